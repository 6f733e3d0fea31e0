"""Certify one unit: every quantity of a row of `data/certify/{model}/layer{L}.csv`.

Per unit (sense "max": the worst case is the largest value of g = c . head output):

    nominal        g at the unperturbed tokens
    exact_lo/hi    certified bracket of max g (fixed query only; separable root)
    best_feasible  best feasible value: fixed query, the exact solver's witness (its value is exact_lo:
                   the exact maximiser is the best feasible point, no search needed); varying query, the
                   multi-start projected ascent warm-started from the exact fixed-query maximiser
    first_order    greedy-LP certificate over admissible attention patterns (both modes)
    second_order   exponential-cone moment relaxation, from a dual-feasible point (both modes)
    secant_bound   value-weighted secant-slack bound on second_order's gap (fixed query)
    exact_status   "ok" if the exact bracket is <= 1e-10 of the value spread, else the reason (the bracket
                   is still certified); added after the original columns
    second_order_tight  the tight variant of the relaxation (upper_cone=True: the exact upper exponential
                   bound in a-scaled moments, beyond the paper), same weak-duality certification;
                   t_second_tight_s its time

Columns after `error`:

    best_feasible_from  "exact_witness" | "ascent_warm" (from the fixed-query maximiser) | "ascent" (cold)
    ascent_check        fixed query, on a deterministic sample of units (`ascent_check_fraction`, chosen
                        by a hash of the unit): a cold multi-start ascent, as an independent cross-check of
                        the exact solver (it must not exceed exact_hi; a value above is recorded UNSOUND)
    t_ascent_check_s    its time

Varying query: the warm-started ascents of a unit's radii can run beforehand as one batch
(`varying_ascents`, each result equal to the unit's own; `t_ascent_s` is then its share of the batch's wall
time plus its warm start's solve) and be handed to `certify_unit` (`ascent=`). The warm start is the exact solve of
the fixed query at the same radius: the fixed-query unit's own solve when the caller has it (`exact_out=`).

`legacy_ascent=True` takes the reference path (cold ascent on every unit, full projections, no early
stop; best_feasible from the ascent) for the cost benchmark (bench/paper_cost.py).

Every certificate is computed without the exact value. Each quantity is computed in its own
try-block: a failure is written into `status`/`error` and the row is still written, never dropped.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import time
import traceback

import numpy as np

from attncert.certify.best_feasible_ascent import AscentResult, best_feasible_ascent, best_feasible_ascents
from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.first_order_certificate import (bilinear_bound, bilinear_scalings, first_order_certificate,
                                                     score_value_intervals)
from attncert.certify.secant_slack_bound import secant_slack_bound
from attncert.certify.second_order.certificate import paper_like_solve, second_order_certificate
from attncert.certify.second_order.dual_bound.dual_record import recording_duals
from attncert.head.reduced_geometry import reduced_geometry
from attncert.head.problem import HeadProblem
from attncert.configuration.device import resolve_device
from attncert.reporting.unit_tables import soundness_check
from attncert.certify.unit_columns import COLUMNS

#: The polish phase of the ascent stops once no start gains more than ASCENT_STOP_TOL of the movement so
#: far over ASCENT_PATIENCE steps (legacy_ascent: never). 10 steps cut a slow start 3e-7 of the movement
#: short on 1 of 39 GPT-2-sized units (bench/paper_cost.py, init std 0.08); 25 do not.
ASCENT_STOP_TOL = 1e-9
ASCENT_PATIENCE = 25


def in_check_sample(meta: dict, fraction: float) -> bool:
    """Deterministic by unit (its keys without the mode): is the unit in the ascent cross-check sample?"""
    if fraction <= 0:
        return False
    if fraction >= 1:
        return True
    key = repr(sorted((k, round(v, 12) if isinstance(v, float) else v) for k, v in meta.items() if k != "mode"))
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0**64 < fraction


def _ascent_kw(ascent_restarts: int, ascent_steps: int, seed: int, device: str, legacy_ascent: bool = False) -> dict:
    """The keyword arguments of every ascent of a row (`best_feasible_ascent`)."""
    kw = dict(restarts=ascent_restarts, steps=ascent_steps, seed=seed, sense="max", device=device)
    if not legacy_ascent:
        kw.update(stop_tol=ASCENT_STOP_TOL, patience=ASCENT_PATIENCE)
    else:
        kw["fused"] = False
    return kw


@dataclasses.dataclass(frozen=True)
class PrecomputedAscent:
    """A varying-query unit's warm-started ascent, run beforehand (`varying_ascents`)."""
    result: AscentResult
    seconds: float  # the unit's share of the batch's wall time plus its warm start's exact solve


def varying_ascents(problems: list[HeadProblem], *, ascent_restarts: int = 6, ascent_steps: int = 100, seed: int = 0,
                    device: str = "cpu", fixed_exact: list | None = None) -> list[PrecomputedAscent | None]:
    """The warm-started ascents of varying-query units that differ only in their radius, as one batch
    (`best_feasible_ascents`): what `certify_unit` would compute for each. A unit whose warm start fails gets
    None, and so does every unit if the batch fails: `certify_unit` then runs (and records) its own.

    fixed_exact: per problem, None or the `exact_worst_case` result (sense "max") of its fixed-query problem (the
    same problem with mode "fixed"), already computed by the caller (the fixed-query unit of the same radius):
    its warm start, taken as it is instead of solving it again (the solver is deterministic: the same witness)."""
    warm = []
    for k, p in enumerate(problems):
        try:
            res = fixed_exact[k] if fixed_exact is not None and fixed_exact[k] is not None else \
                exact_worst_case(dataclasses.replace(p, mode="fixed"), sense="max")
            warm.append((res.witness - p.Z0, res.seconds))
        except Exception:  # noqa: BLE001 - the unit's own run repeats it and records the failure in its row
            warm.append(None)
    out: list[PrecomputedAscent | None] = [None] * len(problems)
    ready = [i for i, w in enumerate(warm) if w is not None]
    if not ready:
        return out
    try:
        results = best_feasible_ascents([problems[i] for i in ready], starts=[warm[i][0][None] for i in ready],
                                        **_ascent_kw(ascent_restarts, ascent_steps, seed, device))
    except Exception:  # noqa: BLE001 - as above
        return out
    for i, res in zip(ready, results):
        out[i] = PrecomputedAscent(res, res.seconds + warm[i][1])
    return out


def certify_unit(problem: HeadProblem, *, ascent_restarts: int = 6, ascent_steps: int = 100, seed: int = 0,
                 second_order: bool = True, tight: bool = True, ascent_check_fraction: float = 0.05,
                 device: str = "cpu", legacy_ascent: bool = False, certificates: dict | None = None,
                 ascent: PrecomputedAscent | None = None, exact_out: list | None = None) -> dict:
    """One row of the certification table (see the module docstring).

    certificates: if a dict is given, it is filled with what certifies each number of the row, for a checker
    that trusts no solver (`certificate_store`): the reduction, the first-order intervals, the exact solver's
    witness, and the weak-duality certificate (program, repaired dual, map to g) of each second-order value.
    ascent: the unit's warm-started ascent from `varying_ascents` (varying query, not legacy_ascent), used as is.
    exact_out: if a list is given, a fixed-query unit appends its `exact_worst_case` result to it (a warm start for
    the varying-query unit of the same radius: `varying_ascents`'s fixed_exact).
    """
    resolve_device(device)  # a missing GPU stops the job with one line, it is not a per-unit failure
    if ascent is not None and (problem.mode != "varying" or legacy_ascent):
        raise ValueError("a precomputed ascent is for a varying-query unit without legacy_ascent")
    row = {k: math.nan for k in COLUMNS}
    row.update(problem.meta)
    row.update(n_tokens=problem.n, radius=problem.radius, norm=problem.norm, mode=problem.mode,
               solver="", status="ok", error="", exact_status="", best_feasible_from="")
    failures = []
    warm = []  # the fixed-query maximiser, a start for the varying-query ascent
    ascent_kw = _ascent_kw(ascent_restarts, ascent_steps, seed, device, legacy_ascent)

    def attempt(name, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - recorded in the row, never silent
            failures.append(f"{name}: {type(e).__name__}: {e}".replace("\n", " ")[:300])
            traceback.print_exc()

    row["nominal"] = problem.nominal_value()
    geo = None  # the unit's reduced geometry (`run_first`), handed to the certificates
    paper = None  # the unit's paper-like solve (`run_second`), the tight variant's partner

    def run_exact():
        res = exact_worst_case(problem, sense="max")
        if exact_out is not None:
            exact_out.append(res)
        row.update(exact_lo=res.lo, exact_hi=res.hi, value_spread=res.value_spread, t_exact_s=res.seconds,
                   exact_status=res.status)
        if certificates is not None:  # the witness as its perturbation (compresses well) when Z0 + delta is Z
            delta = res.witness - problem.Z0
            exact = np.array_equal(problem.Z0 + delta, res.witness)
            certificates["exact"] = {"witness_delta": delta} if exact else {"witness": np.asarray(res.witness)}
        if not legacy_ascent:  # the witness is feasible and attains exact_lo: the best feasible point
            row.update(best_feasible=res.witness_value, best_feasible_from="exact_witness")

    def run_warm_start():
        res = exact_worst_case(dataclasses.replace(problem, mode="fixed"), sense="max")
        warm.append((res.witness - problem.Z0, res.seconds))

    def run_first():
        nonlocal geo
        t0 = time.perf_counter()
        geo = reduced_geometry(problem)
        row["first_order"] = first_order_certificate(problem, sense="max", geometry=geo)
        row["t_first_s"] = time.perf_counter() - t0
        if certificates is not None:
            certificates["reduction"] = {k: np.asarray(getattr(geo, k), dtype=np.float64) for k in
                                         ("s0", "w0", "u_s", "u_w", "eps_s", "eps_w", "R_s", "R_w")}
            beta = bilinear_bound(problem) if problem.mode == "varying" else math.nan
            l, u, _, W = score_value_intervals(problem, None if problem.mode == "fixed" else beta)
            certificates["first_order"] = {"l": l, "u": u, "W": W, "beta": np.float64(beta)}
            scalings = bilinear_scalings(problem) if problem.mode == "varying" else None
            if scalings is not None:  # what beta's diagonal bound was evaluated at (linf), for the audit
                certificates["first_order"].update(scale_q=scalings[0], scale_k=scalings[1])

    def run_ascent():
        if ascent is not None:
            res, seconds, warmed = ascent.result, ascent.seconds, True
        else:
            starts, t_warm = (warm[0][0][None], warm[0][1]) if warm else (None, 0.0)
            res = best_feasible_ascent(problem, starts=starts, **ascent_kw)
            seconds, warmed = res.seconds + t_warm, bool(warm)  # t_ascent_s includes the warm start's solve
        row.update(best_feasible=res.value, t_ascent_s=seconds,
                   best_feasible_from="ascent_warm" if warmed else "ascent")
        if certificates is not None:  # the attained point, so that a checker can confirm best_feasible
            certificates["best_feasible"] = {"witness": np.asarray(res.Z, dtype=np.float64)}

    def run_check():
        res = best_feasible_ascent(problem, **ascent_kw)
        row.update(ascent_check=res.value, t_ascent_check_s=res.seconds)

    def keep_dual(name, rec, value):
        """Keep the certificate of a second-order value: its best dual, else the first-order bound it equals."""
        if certificates is not None:
            best = rec.best
            certificates[name] = ({"kind": "dual", "cert": best} if best is not None and best.value <= value
                                  else {"kind": "first_order"})

    def run_second():
        nonlocal paper
        with recording_duals() as rec:
            paper = paper_like_solve(problem, geometry=geo)
            res = second_order_certificate(problem, sense="max", geometry=geo, paper_like=paper)
        keep_dual("second_order", rec, res.value)
        row.update(second_order=res.value, t_second_s=res.seconds, solver=res.solver)
        if res.fallback:
            failures.append(f"second_order: fallback to first order ({res.status})")

    def run_tight():
        with recording_duals() as rec:
            res = second_order_certificate(problem, sense="max", upper_cone=True, geometry=geo, paper_like=paper)
        keep_dual("second_order_tight", rec, res.value)
        row.update(second_order_tight=res.value, t_second_tight_s=res.seconds)
        if res.fallback:
            failures.append(f"second_order_tight: fallback to first order ({res.status})")

    def run_secant():
        if math.isfinite(row["exact_hi"]):
            row["secant_bound"] = secant_slack_bound(problem, row["exact_hi"]).bound

    # the first-order certificate first: it computes the unit's reduced geometry (handed to the second order), so
    # t_first_s + t_second_s is what the certificate costs on its own
    attempt("first_order", run_first)
    if problem.mode == "fixed":
        attempt("exact", run_exact)
    elif not legacy_ascent and ascent is None:
        attempt("warm_start", run_warm_start)
    if legacy_ascent or problem.mode == "varying" or not math.isfinite(row["best_feasible"]):
        attempt("ascent", run_ascent)
    elif in_check_sample(problem.meta, ascent_check_fraction):
        attempt("ascent_check", run_check)
    if second_order:
        attempt("second_order", run_second)
        if tight:
            attempt("second_order_tight", run_tight)
        if problem.mode == "fixed":
            attempt("secant_bound", run_secant)
    checked = dict(row)
    if math.isfinite(row["ascent_check"]):  # an attained value too: nothing may lie below it
        checked["best_feasible"] = max(row["ascent_check"], row["best_feasible"])
    violations = soundness_check(checked, ("exact_hi", "first_order", "second_order", "second_order_tight"))
    if violations:
        row["status"] = "UNSOUND"
        row["error"] = " | ".join(violations + failures)
        return row
    if failures:
        row["status"] = "fallback" if all("fallback" in f for f in failures) else "error"
        row["error"] = " | ".join(failures)
    return row
