"""Is the stored program the one the construction gives for this unit? Rebuilt with the builder, never solved.

A fixed-query second-order certificate records the builder's inputs (`certify.certificate_store`, "build/"):
the build key, the relaxation data (shifted scores A, values w0, their error bounds, half-widths R_s, R_w, the
units rho_w, rho_o, the objective origin g0, the dropped tokens' tail) and, for linf, the facet edges of each
token. The check has two parts:

1. the relaxation data follow from the unit's reduction (itself checked against the weights, `row_audit`):
   shift = max_j (s0_j + eps_s,j), the kept tokens and the tail of `head.negligible_tokens`, A = (s0 - shift),
   w0, eps_s, eps_w on the kept tokens, the same R_s, R_w and radius (bit for bit: the same float operations);
   g0, rho_w and rho_o are free (any origin and positive units give the same relaxation);
2. the builder (`certify.second_order.fixed_program`, the facets of `certify.second_order.facets`, canonicalized by
   cvxpy through `certify.second_order.compiled`) rebuilds (c, A, b, cones, lo, hi) from these inputs, and the
   result equals the stored program bit for bit.

Nothing here calls a solver: cvxpy only canonicalizes (`get_problem_data`).
"""
from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.compiled import canonical_program
from attncert.certify.second_order.facets import UpperChainFacets, fill_facets
from attncert.certify.second_order.fixed_program import (FixedRelaxationData, build_fixed_program, fixed_box,
                                                         set_fixed_parameters)
from attncert.head.negligible_tokens import negligible_tokens
from attncert.head.projected_ball import projected_ball
from attncert.head.rounding import UNIT_ROUNDOFF


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a, b)


def data_from_reduction(build: dict, red: dict, radius: float, norm: str) -> str:
    """'' when the stored relaxation data follow from the reduction, else what differs."""
    s0, w0, eps_s, eps_w = red["s0"], red["w0"], red["eps_s"], red["eps_w"]
    R_s, R_w = float(red["R_s"]), float(red["R_w"])
    lo_w, top = w0 - (R_w + eps_w), w0 + (R_w + eps_w)
    keep, tail = negligible_tokens(s0, np.full(s0.size, R_s), eps_s, top + 4.0 * UNIT_ROUNDOFF * np.abs(top), lo_w)
    shift = float(np.max(s0 + eps_s))
    expected = {"A": (s0 - shift)[keep], "w0": w0[keep], "eps_s": eps_s[keep], "eps_w": eps_w[keep], "R_s": R_s,
                "R_w": R_w, "radius": radius, "tail": tail if not np.all(keep) else 0.0}
    for name, want in expected.items():
        if not _same(build[name], want):
            return f"relaxation data {name} differ from the reduction's"
    if str(build["norm"]) != norm:
        return "relaxation data for another norm"
    if not (float(build["rho_o"]) > 0 and float(build["rho_w"]) > 0):
        return "nonpositive unit"
    return ""


def rebuild_fixed(build: dict, red: dict) -> dict | None:
    """The canonical program (c, A, b, dims, lo, hi) the builder gives for the stored inputs (None: cvxpy's internals
    cannot be read)."""
    n, norm, K, upper_cone, mono, deviation = json.loads(str(build["key"]))
    D = FixedRelaxationData(A=build["A"], w0=build["w0"], g0=float(build["g0"]), eps_s=build["eps_s"],
                            eps_w=build["eps_w"], u_s=red["u_s"], u_w=red["u_w"], R_s=float(build["R_s"]),
                            R_w=float(build["R_w"]), rho_w=float(build["rho_w"]), rho_o=float(build["rho_o"]),
                            radius=float(build["radius"]), norm=str(build["norm"]), tail=float(build["tail"]))
    prob, P, V = build_fixed_program(int(n), norm, int(K), bool(upper_cone), int(mono), bool(deviation))
    _, _, tau_lo, tau_hi = set_fixed_parameters(P, D)
    if norm == "linf":
        chain = UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s, chain=projected_ball(D.u_s, D.u_w, D.radius, norm))
        edges = [row[row >= 0] for row in np.asarray(build["edges"])]
        fill_facets(P, [chain] * int(n), edges, int(K), D.scales)
    return canonical_program(prob, fixed_box(V, int(n), tau_lo, tau_hi, D))


def program_link(stored: dict, red: dict, radius: float, norm: str) -> tuple[float, str]:
    """(0, '') when the stored program is the construction's for this unit, else (-inf, what differs)."""
    if str(stored.get("build/path", "")) != "fixed":
        return float("nan"), "no builder inputs stored (varying query): the program is not rebuilt"
    build = {k[len("build/"):]: v for k, v in stored.items() if k.startswith("build/")}
    why = data_from_reduction(build, red, radius, norm)
    if why:
        return -np.inf, why
    prog = rebuild_fixed(build, red)
    if prog is None:
        return -np.inf, "cvxpy's canonical data could not be read"
    A = sp.csr_matrix(stored["A"])
    ref = sp.csr_matrix(prog["A"])
    dims = prog["dims"]
    want_dims = [dims.zero, dims.nonneg, dims.exp, *dims.soc]
    for name, ok in (("cones", _same(stored["dims"], want_dims)), ("c", _same(stored["c"], prog["c"])),
                     ("b", _same(stored["b"], prog["b"])), ("lo", _same(stored["lo"], prog["lo"])),
                     ("hi", _same(stored["hi"], prog["hi"])),
                     ("A", A.shape == ref.shape and (A != ref).nnz == 0)):
        if not ok:
            return -np.inf, f"the stored program's {name} differs from the rebuilt one"
    return 0.0, ""
