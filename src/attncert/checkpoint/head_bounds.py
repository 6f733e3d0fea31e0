"""Every bound `attncert certify` reports on max g of one HeadProblem, each with its seconds.

    nominal             g at the unperturbed tokens (a value, not a bound)
    exact_lo, exact_hi  the certified bracket of max g (fixed query only: `certify.exact_worst_case`)
    first_order         the first-order certificate (greedy LP over the admissible attention patterns)
    second_order        the paper-like second-order certificate (exponential-cone moment relaxation)
    second_order_tight  the same with the exact upper exponential cone added (beyond the paper)
    crown               CROWN (`bound_propagation`, float64; `baselines.linear_bound_baselines`)

Every upper bound is sound: max g <= each of first_order, second_order, second_order_tight, crown; for a
fixed query exact_lo <= max g <= exact_hi. A second-order solve that fails falls back to the first-order bound
and says so (`*_fallback`).
"""
from __future__ import annotations

import time

from attncert.baselines.linear_bound_baselines import baseline_upper_bound
from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.certificate import paper_like_solve, second_order_certificate
from attncert.head.problem import HeadProblem

BOUNDS = ("exact_lo", "exact_hi", "first_order", "second_order", "second_order_tight", "crown")


def head_bounds(p: HeadProblem) -> dict:
    """{nominal, exact_lo, exact_hi (None for a varying query), first_order, second_order, second_order_tight,
    crown, their `seconds`, and each second order's solver and fallback flag} for max g of `p`."""
    seconds: dict[str, float] = {}

    def timed(name, compute):
        t0 = time.perf_counter()
        value = compute()
        seconds[name] = time.perf_counter() - t0
        return value

    out: dict = {"nominal": p.nominal_value(), "exact_lo": None, "exact_hi": None}
    if p.mode == "fixed":
        exact = timed("exact", lambda: exact_worst_case(p))
        out.update(exact_lo=float(exact.lo), exact_hi=float(exact.hi))
    out["first_order"] = float(timed("first_order", lambda: first_order_certificate(p)))
    # the paper-like solve once: the tight variant's number is the smaller of its bound and the paper-like one
    paper = timed("paper_like", lambda: paper_like_solve(p))
    for name, cone in (("second_order", False), ("second_order_tight", True)):
        cert = timed(name, lambda cone=cone: second_order_certificate(p, upper_cone=cone, paper_like=paper))
        out.update({name: float(cert.value), f"{name}_solver": cert.solver, f"{name}_fallback": bool(cert.fallback)})
    seconds["second_order"] += seconds.pop("paper_like")
    crown = timed("crown", lambda: baseline_upper_bound(p, "crown"))
    out["crown"] = float(crown.upper) if crown.status == "ok" else None
    out["crown_status"] = crown.status
    out["seconds"] = seconds
    return out
