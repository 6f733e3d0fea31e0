"""Every certified number of one row of the certification table: pass, fail, or not certifiable by design.

Numbers and their checks (docs/audit.md):

    all rows       reduction       the stored reduction encloses the exact one of the weights (`reduction_margin`):
                                   the data every relaxation reads; when it fails, every number of the row fails
                                   (the certificates are not for this unit)
    first_order    intervals       the stored [l_j, u_j], W_j enclose the exact score and value ranges
                   greedy_lp       F1(first_order) <= 0
    exact_lo       witness_ball    the witness lies in the ball
                   witness_value   g(witness) >= exact_lo
    exact_hi       inner_maxima    F(exact_hi) < 0 from per-token bounds (`exact_upper`)
    second_order,  program         the stored program is the builder's for this unit (fixed query; `program_link`)
    ..._tight      dual_cone       the stored dual lies in K^*
                   weak_duality    origin + scale * (WD) + tail <= the reported value
                   (kind "first_order": the reported value is >= first_order, whose own checks pass)

A number fails with the first check that fails and its margin (how far from holding, in that check's units).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from flint import arb, ctx

from attncert.audit.dual_cone import dual_cone_margin
from attncert.audit.exact_upper import exact_upper_check
from attncert.audit.first_order_check import enclosure_margin, lp_margin
from attncert.audit.head_enclosure import PREC, LayerFiles, norm_bound
from attncert.audit.program_link import program_link
from attncert.audit.weak_duality import weak_duality_upper
from attncert.audit.witness_check import ball_margin, value_margin, witness_tokens

NUMBERS = ("first_order", "second_order", "second_order_tight", "exact_lo", "exact_hi")


@dataclass
class Outcome:
    number: str
    reported: float
    status: str  # "pass" | "fail" | "not certifiable" (by design; `reason` says why) | "not applicable"
    check: str  # the checks that passed, or the one that failed
    margin: float  # the smallest margin of the checks (>= 0 when they hold)
    reason: str = ""


def _held(checks: list[tuple[str, float, str]], number: str, reported: float) -> Outcome:
    """Outcome of a number from its (check, margin, where) list: the first failing check, else pass."""
    for name, margin, where in checks:
        if not margin >= 0:
            return Outcome(number, reported, "fail", name, margin, where)
    return Outcome(number, reported, "pass", "+".join(c[0] for c in checks), min(c[1] for c in checks))


def reduction_margin(head, red: dict, radius: float, norm: str) -> tuple[float, str]:
    """Smallest margin of the reduction's enclosure, and where. With the exact s0*, u_s* (and w0*, u_w*) of the
    weights, every point of the ball has s_j = s0*_j + u_s*.delta = s0_j + u_s.delta + e_j with
    |e_j| <= |s0_j - s0*_j| + r ||u_s - u_s*||_*, which must be <= eps_s,j; and R_s >= r ||u_s||_* (the same for
    the values)."""
    r = arb(radius)
    worst, where = math.inf, ""
    for name, exact0, exact_u, s0, u, R, eps in (
            ("score", head.s0, head.u_s, red["s0"], red["u_s"], red["R_s"], red["eps_s"]),
            ("value", head.w0, head.u_w, red["w0"], red["u_w"], red["R_w"], red["eps_w"])):
        if len(u) != len(exact_u) or len(s0) != len(exact0):
            return -math.inf, f"{name} reduction has the wrong size"
        direction = r * norm_bound([arb(float(a)) - b for a, b in zip(u, exact_u)], norm)
        half = float((arb(float(R)) - r * norm_bound([arb(float(a)) for a in u], norm)).lower())
        if half < worst:
            worst, where = half, f"{name} half-width"
        for j in range(head.n):
            m = arb(float(eps[j])) - abs(arb(float(s0[j])) - exact0[j]) - direction
            if float(m.lower()) < worst:
                worst, where = float(m.lower()), f"{name} error bound of token {j}"
    return worst, where


def audit_row(files: LayerFiles, row: dict, cert: dict) -> list[Outcome]:
    """The outcomes of the five numbers of one table row (`row`: the CSV row; `cert`: its stored certificates)."""
    old = ctx.prec
    ctx.prec = PREC
    try:
        return _audit_row(files, row, cert)
    finally:
        ctx.prec = old


def _unit_matches(row: dict, unit: dict) -> str:
    for k in ("layer", "head", "prompt", "query_pos", "norm", "mode"):
        if str(row[k]) != str(unit.get(k)):
            return f"certificate is for {k}={unit.get(k)}, the row has {row[k]}"
    if float(row["radius"]) != float(unit.get("radius", math.nan)):
        return f"certificate is for radius {unit.get('radius')}, the row has {row['radius']}"
    return ""


def _audit_row(files: LayerFiles, row: dict, cert: dict) -> list[Outcome]:
    values = {k: float(row[k]) if str(row[k]).strip() else math.nan for k in NUMBERS}
    mismatch = "no stored certificate for this row" if not cert else _unit_matches(row, cert.get("unit", {}))
    if mismatch:
        return [Outcome(k, values[k], "fail", "pairing", -math.inf, mismatch) for k in NUMBERS]
    radius, norm, mode = float(row["radius"]), str(row["norm"]), str(row["mode"])
    head = files.unit(int(row["head"]), int(row["prompt"]), int(row["query_pos"]))
    red = cert.get("reduction")
    reduction = ("reduction", *reduction_margin(head, red, radius, norm)) if red else (
        "reduction", -math.inf, "no stored reduction")
    out: dict[str, Outcome] = {}

    fo = cert.get("first_order")
    if fo is None or not math.isfinite(values["first_order"]):
        out["first_order"] = Outcome("first_order", values["first_order"], "fail", "first_order", -math.inf,
                                     "no stored first-order data" if fo is None else "no finite first-order value")
    else:
        out["first_order"] = _held([("intervals", *enclosure_margin(head, fo["l"], fo["u"], fo["W"], radius, norm, mode)),
                                    ("greedy_lp", lp_margin(fo["l"], fo["u"], fo["W"], values["first_order"]), "")],
                                   "first_order", values["first_order"])

    for name in ("second_order", "second_order_tight"):
        out[name] = _second_order(name, values, cert.get(name), out["first_order"], red, radius, norm, head)

    if mode == "fixed":
        ex = cert.get("exact")
        if ex is None:
            for k in ("exact_lo", "exact_hi"):
                out[k] = Outcome(k, values[k], "fail", "witness", -math.inf, "no stored witness")
        else:
            Z = witness_tokens(head, ex)
            out["exact_lo"] = _held([("witness_ball", ball_margin(head, Z, radius, norm), ""),
                                     ("witness_value", value_margin(head, Z, values["exact_lo"]), "")],
                                    "exact_lo", values["exact_lo"])
            D = Z - head.Z0
            us = np.array([float(x.mid()) for x in head.u_s])
            uw = np.array([float(x.mid()) for x in head.u_w])
            hint = np.stack([D @ us, D @ uw], axis=1)
            chk = exact_upper_check(head.s0, head.w0, head.u_s, head.u_w, radius, norm, values["exact_hi"], hint)
            out["exact_hi"] = _held([("inner_maxima", chk.margin, chk.reason)], "exact_hi", values["exact_hi"])
    else:
        for k in ("exact_lo", "exact_hi"):
            out[k] = Outcome(k, values[k], "not applicable", "", math.nan, "varying query: no exact value (NP-hard)")

    for k in NUMBERS:  # a reduction that the weights do not give: the row's certificates are not for this unit
        o = out[k]
        if o.status == "pass" and not reduction[1] >= 0:
            out[k] = Outcome(k, o.reported, "fail", "reduction", reduction[1], reduction[2])
    return [out[k] for k in NUMBERS]


def _second_order(name: str, values: dict, stored: dict | None, first: Outcome, red: dict | None, radius: float,
                  norm: str, head) -> Outcome:
    value = values[name]
    if not math.isfinite(value):
        return Outcome(name, value, "not certifiable", "", math.nan, "no value (second order not run)")
    if stored is None:
        return Outcome(name, value, "not certifiable", "", math.nan,
                       "no stored certificate (the separable long-context path keeps none)")
    kind = str(stored["kind"])
    if kind == "first_order":
        margin = value - values["first_order"]
        if not margin >= 0:
            return Outcome(name, value, "fail", "equals_first_order", margin, "below the first-order value")
        if first.status != "pass":
            return Outcome(name, value, "fail", f"first_order:{first.check}", first.margin, first.reason)
        return Outcome(name, value, "pass", "first_order_bound", margin, "the first-order certificate (tie or fallback)")
    checks = []
    link, why = program_link(stored, red, radius, norm, head) if red else (-math.inf, "no stored reduction")
    if not math.isnan(link):
        checks.append(("program", link, why))
    checks.append(("dual_cone", *dual_cone_margin(stored["z"], stored["dims"])))
    origin, scale, tail = (float(x) for x in stored["affine"])
    if checks[-1][1] >= 0 and (not checks or checks[0][1] >= 0):
        wd = weak_duality_upper(stored["c"], stored["A"], stored["b"], stored["z"], stored["lo"], stored["hi"],
                                float(stored["data_rel_err"]))
        certified = arb(origin) + arb(scale) * wd + arb(tail)
        margin = float((arb(value) - certified).lower()) if scale > 0 else -math.inf
        checks.append(("weak_duality", margin, "the recomputed bound exceeds the reported value"
                       if scale > 0 else "the map to g has a nonpositive scale"))
    out = _held(checks, name, value)
    if out.status == "pass" and math.isnan(link):
        out.reason = why
    return out
