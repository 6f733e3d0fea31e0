"""The kept certificate of a second-order bound: what a checker that trusts no solver needs to re-derive it.

Within `recording_duals()`, every bound that `weak_duality.weak_duality_bound` certifies inside
`solve_and_certify` is offered (`offer_dual`) with its program (c, A, b, cones, box) and repaired dual; the
relaxation's code states what the program was built from (`note_construction`: the builder's inputs) and its
map to g units (`note_affine`). The record keeps the certificate with the smallest value in g units: the
certificate of the reported number (`certify.run`, stored by `certify.certificate_store`).
"""
from __future__ import annotations

import contextvars
import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from attncert.head.rounding import outward_affine


@dataclass
class DualCertificate:
    """One weak-duality bound with everything that certifies it (objective units of the program).

    A checker confirms `bound` >= the program's optimum over the box from (c, A, b, dims, lo, hi, z) alone
    (z in K^*, then (WD) in rigorous arithmetic), and the reported value in g units from
    g = origin + scale * bound + tail (`rounding.outward_affine`).
    """

    bound: float
    c: np.ndarray
    A: sp.csc_matrix
    b: np.ndarray
    dims: dict  # zero, nonneg, soc (list of sizes), exp (number of cones)
    lo: np.ndarray
    hi: np.ndarray
    z: np.ndarray  # the repaired dual vector, exactly in K^*
    data_rel_err: float
    affine: tuple = ()  # (origin, scale, tail) of the map to g, set by the caller's unit conversion
    value: float = math.inf  # the certified value in g units (outward_affine of bound)
    construction: dict = field(default_factory=dict)  # what the program was built from (`note_construction`)
    kind: str = "dual"


@dataclass
class SupportCertificate:
    """One bound of `support_bound.bound_from_dual` with what certifies it (objective units of the token program).

    The bound is z.b + max(tau_lo Q, tau_hi Q) (docs/certificate.md §4.1): the rows of X (0 <= lam <= tau and the
    description of P) carry no multiplier, X enters through the exact support function of P. So the program the
    certificate needs is the token program without facets (`token_program.build_program` with no edges), z mapped
    onto its rows by family name (the facet rows' multipliers are zero; `certificate_store` stores that form). A
    checker rebuilds that program from the relaxation data (`construction`), checks z in K^* and recomputes the
    bound (`audit.support_duality`).
    """

    bound: float
    prog: object  # the token program the bound was computed on (`token_program.Program`)
    z: np.ndarray  # its repaired dual vector, zero on the rows of X
    construction: dict = field(default_factory=dict)
    affine: tuple = ()
    value: float = math.inf
    kind: str = "support"


class DualRecord:
    """Collects the certified duals of one certificate computation; keeps the one with the smallest value in g.

    Every bound `weak_duality_bound` certifies inside `solve_and_certify` is offered; the relaxation's unit
    conversion (`note_affine`, called by each program's map to g units) attaches its affine map and the
    smallest value in g units is kept: the certificate of the reported second-order number.
    """

    def __init__(self):
        self.pending: list[DualCertificate] = []
        self.best: DualCertificate | None = None
        self.construction: dict = {}  # the current program's construction inputs

    def offer(self, cert: DualCertificate):
        self.pending.append(cert)

    def note_affine(self, origin: float, scale: float, tail: float):
        for cert in self.pending:
            cert.affine = (float(origin), float(scale), float(tail))
            cert.value = outward_affine(origin, scale, cert.bound, tail)
            if math.isfinite(cert.value) and (self.best is None or cert.value < self.best.value):
                self.best = cert
        self.pending = []


_RECORD: contextvars.ContextVar = contextvars.ContextVar("dual_record", default=None)


@contextmanager
def recording_duals():
    """Within this block every certified dual is offered to the yielded `DualRecord`."""
    rec = DualRecord()
    token = _RECORD.set(rec)
    try:
        yield rec
    finally:
        _RECORD.reset(token)


def note_construction(reset: bool = False, **fields):
    """Called by a relaxation before its solves: what its program is built from (the builder's inputs, so that a
    checker can rebuild the same program without solving; `attncert.audit.program_link`). reset: start anew."""
    rec = _RECORD.get()
    if rec is not None:
        if reset:
            rec.construction = {}
        rec.construction.update(fields)


def offer_kept(cert: "DualCertificate | None"):
    """Offer a certificate kept by an earlier record (a result reused within this one): it becomes the current
    record's best when its value in g units is smaller."""
    rec = _RECORD.get()
    if rec is not None and cert is not None and (rec.best is None or cert.value < rec.best.value):
        rec.best = cert


def note_affine(origin: float, scale: float, tail: float = 0.0):
    """Called by a program's map to g units (value = origin + scale * bound + tail) after its solves."""
    rec = _RECORD.get()
    if rec is not None:
        rec.note_affine(origin, scale, tail)


def _dims_record(dims) -> dict:
    return {"zero": int(dims.zero), "nonneg": int(dims.nonneg), "soc": [int(q) for q in dims.soc],
            "exp": int(dims.exp)}


def offer_support(bound: float, prog, z: np.ndarray):
    """Called by `support_bound.bound_from_dual`: a sound bound of the token program from the repaired dual z.
    Only a program over the construction's tokens can be its certificate (a program of other tokens, such as the
    token family's grid, bounds another program: the audit would rebuild the unit's and not re-derive it)."""
    rec = _RECORD.get()
    data = rec.construction.get("data") if rec is not None else None
    if data is not None and getattr(prog, "n", None) != np.asarray(data.A).size:
        return
    if rec is not None and math.isfinite(bound) and rec.construction.get("path") == "support":
        rec.offer(SupportCertificate(float(bound), prog, np.array(z, dtype=np.float64),
                                     construction=dict(rec.construction)))


def offer_dual(bound, c, A, b, dims, lo, hi, z, data_rel_err):
    rec = _RECORD.get()
    if rec is not None and math.isfinite(bound):
        A = A if sp.issparse(A) and A.format == "csc" else sp.csc_matrix(A)
        rec.offer(DualCertificate(bound, np.array(c, dtype=np.float64), A.copy(), np.array(b, dtype=np.float64),
                                  _dims_record(dims), np.array(lo), np.array(hi), np.array(z), data_rel_err,
                                  construction=dict(rec.construction)))
