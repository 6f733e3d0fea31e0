"""Certify one unit: every quantity of a row of `data/certify/{model}/layer{L}.csv`.

Per unit (sense "max": the worst case is the largest value of g = c . head output):

    nominal        g at the unperturbed tokens
    exact_lo/hi    certified bracket of max g (fixed query only; separable root)
    best_feasible  best value found by multi-start projected ascent (both modes)
    first_order    greedy-LP certificate over admissible attention patterns (both modes)
    second_order   exponential-cone moment relaxation, from a dual-feasible point (both modes)
    secant_bound   value-weighted secant-slack bound on second_order's gap (fixed query)
    exact_status   "ok" if the exact bracket is <= 1e-10 of the value spread, else the reason (the bracket
                   is still certified); added after the original columns
    second_order_tight  the tight variant of the relaxation (upper_cone=True: the exact upper exponential
                   bound in a-scaled moments, beyond the paper), same weak-duality certification;
                   t_second_tight_s its time

Every certificate is computed without the exact value. Each quantity is computed in its own
try-block: a failure is written into `status`/`error` and the row is still written, never dropped.
"""
from __future__ import annotations

import math
import time
import traceback

from attncert.certify.best_feasible_ascent import best_feasible_ascent
from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.secant_slack_bound import secant_slack_bound
from attncert.certify.second_order import second_order_certificate
from attncert.head.problem import HeadProblem
from attncert.pipeline.unit_tables import soundness_check

COLUMNS = ["layer", "head", "prompt", "query_pos", "radius", "norm", "mode", "n_tokens", "nominal",
           "exact_lo", "exact_hi", "value_spread", "best_feasible", "first_order", "second_order",
           "secant_bound", "t_exact_s", "t_first_s", "t_ascent_s", "t_second_s", "solver", "status", "error",
           "exact_status", "second_order_tight", "t_second_tight_s"]  # appended last (issue 13): "ok" or why the bracket is wider than 1e-10 of the spread


def certify_unit(problem: HeadProblem, *, ascent_restarts: int = 8, ascent_steps: int = 150, seed: int = 0,
                 second_order: bool = True, tight: bool = True) -> dict:
    row = {k: math.nan for k in COLUMNS}
    row.update(problem.meta)
    row.update(n_tokens=problem.n, radius=problem.radius, norm=problem.norm, mode=problem.mode,
               solver="", status="ok", error="", exact_status="")
    failures = []

    def attempt(name, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - recorded in the row, never silent
            failures.append(f"{name}: {type(e).__name__}: {e}".replace("\n", " ")[:300])
            traceback.print_exc()

    row["nominal"] = problem.nominal_value()

    def run_exact():
        res = exact_worst_case(problem, sense="max")
        row.update(exact_lo=res.lo, exact_hi=res.hi, value_spread=res.value_spread, t_exact_s=res.seconds,
                   exact_status=res.status)

    def run_first():
        t0 = time.perf_counter()
        row["first_order"] = first_order_certificate(problem, sense="max")
        row["t_first_s"] = time.perf_counter() - t0

    def run_ascent():
        res = best_feasible_ascent(problem, restarts=ascent_restarts, steps=ascent_steps, seed=seed, sense="max")
        row.update(best_feasible=res.value, t_ascent_s=res.seconds)

    def run_second():
        res = second_order_certificate(problem, sense="max")
        row.update(second_order=res.value, t_second_s=res.seconds, solver=res.solver)
        if res.fallback:
            failures.append(f"second_order: fallback to first order ({res.status})")

    def run_tight():
        res = second_order_certificate(problem, sense="max", upper_cone=True)
        row.update(second_order_tight=res.value, t_second_tight_s=res.seconds)
        if res.fallback:
            failures.append(f"second_order_tight: fallback to first order ({res.status})")

    def run_secant():
        if math.isfinite(row["exact_hi"]):
            row["secant_bound"] = secant_slack_bound(problem, row["exact_hi"]).bound

    if problem.mode == "fixed":
        attempt("exact", run_exact)
    attempt("first_order", run_first)
    attempt("ascent", run_ascent)
    if second_order:
        attempt("second_order", run_second)
        if tight:
            attempt("second_order_tight", run_tight)
        if problem.mode == "fixed":
            attempt("secant_bound", run_secant)
    violations = soundness_check(row, ("exact_hi", "first_order", "second_order", "second_order_tight"))
    if violations:
        row["status"] = "UNSOUND"
        row["error"] = " | ".join(violations + failures)
        return row
    if failures:
        row["status"] = "fallback" if all("fallback" in f for f in failures) else "error"
        row["error"] = " | ".join(failures)
    return row
