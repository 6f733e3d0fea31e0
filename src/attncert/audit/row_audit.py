"""Every certified number of one row of the certification table: pass, fail, or not applicable by configuration.

Numbers and their checks (docs/audit.md):

    all rows       pairing         the certificate's unit is the row's
                   reduction       the stored reduction encloses the exact one of the weights (`reduction_margin`):
                                   the data every relaxation reads; when it fails, every number of the row fails
                                   (the certificates are not for this unit)
    first_order    intervals       the stored [l_j, u_j], W_j enclose the exact score and value ranges
                   greedy_lp       F1(first_order) <= 0
    exact_lo       witness_ball    the exact solver's witness lies in the ball
                   witness_value   g(witness) >= exact_lo
    exact_hi       inner_maxima    F(exact_hi) < 0 from per-token bounds (`exact_upper`)
    best_feasible  witness_ball    the best feasible point lies in the ball (varying query: the ascent's point;
                   witness_value   fixed query: the exact witness) and attains the reported value
    second_order,  program         the stored program is the builder's for this row's unit, mode and norm; the map
    ..._tight                      to g and the data-error model are the rebuilt data's (`program_link`)
                   dual_cone       the stored dual lies in K^*
                   weak_duality    origin + scale * (WD) + tail <= the reported value
                   (kind "support", the long-context fixed query: program and dual_cone for the token program
                   (`support_duality.support_link`), then support_duality: origin + scale * (the support-function
                   bound) + tail <= the reported value)
                   (kind "first_order": the reported value is >= first_order, whose own checks pass)

Then the cross-checks of the row (`row_consistency`): every upper bound covers the value its audited witnesses
attain, exact_lo <= exact_hi, and the table's own status is not UNSOUND. A number the configuration does not
compute (the varying query's exact bracket; second order switched off) must be an empty cell.

Every number reports its decisive margin (the slack of its last check, in that check's units: the value units
of g for weak_duality, greedy_lp relative to the weight sum, witness_value and covers_attained) and the margin
of every check (`margins`); a number fails with the first check that fails.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from flint import arb, ctx

from attncert.audit.dual_cone import dual_cone_margin
from attncert.audit.exact_upper import exact_upper_check
from attncert.audit.first_order_check import enclosure_margin, first_order_scalings, lp_margin
from attncert.audit.head_enclosure import PREC, LayerFiles, array_key
from attncert.audit.row_consistency import cross_check_row
from attncert.audit.weak_duality import weak_duality_upper
from attncert.audit.witness_check import ball_margin, witness_tokens

NUMBERS = ("first_order", "second_order", "second_order_tight", "exact_lo", "exact_hi", "best_feasible")
#: best_feasible is a float64 evaluation of g at its point: it may exceed the exact g(point) by this much,
#: relative to the largest |value| the head reads (a sum of n products rounds by ~n u of that)
FEASIBLE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class Expect:
    """What the configuration says a row holds: the second-order numbers are computed (`certify.second_order`,
    `certify.tight`), else their cells must be empty."""

    second_order: bool = True
    tight: bool = True


@dataclass
class Outcome:
    number: str
    reported: float
    status: str  # "pass" | "fail" | "not applicable" (an empty cell by configuration; `reason` says why)
    check: str  # the checks that passed, or the one that failed
    margin: float  # the decisive check's slack (>= 0 when it holds), or the failing check's
    reason: str = ""
    margins: str = ""  # every check's margin: "name=margin;..." ("ok" for a check that holds or not)


def _held(checks: list[tuple[str, float, str]], number: str, reported: float) -> Outcome:
    """Outcome of a number from its (check, margin, where) list: the first failing check, else pass. A check
    without a numeric slack (the program rebuild) passes with margin +inf and is listed as "ok"."""
    shown = ";".join(f"{c}={'ok' if m == math.inf else f'{m:.3g}'}" for c, m, _ in checks)
    for name, margin, where in checks:
        if not margin >= 0:
            return Outcome(number, reported, "fail", name, margin, where, shown)
    numeric = [m for _, m, _ in checks if m != math.inf]
    return Outcome(number, reported, "pass", "+".join(c[0] for c in checks), numeric[-1] if numeric else math.inf,
                   "", shown)


def _fail(number: str, reported: float, check: str, reason: str) -> Outcome:
    return Outcome(number, reported, "fail", check, -math.inf, reason)


def reported_value(text) -> float:
    """A table cell as a float: '' -> nan (an empty cell); anything unreadable -> nan as well (then non-finite)."""
    text = str(text).strip()
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


def reduction_margin(head, red: dict, radius: float, norm: str) -> tuple[float, str]:
    """Smallest margin of the reduction's enclosure, and where. With the exact s0*, u_s* (and w0*, u_w*) of the
    weights, every point of the ball has s_j = s0*_j + u_s*.delta = s0_j + u_s.delta + e_j with
    |e_j| <= |s0_j - s0*_j| + r ||u_s - u_s*||_*, which must be <= eps_s,j; and R_s >= r ||u_s||_* (the same for
    the values)."""
    r = arb(radius)
    worst, where = math.inf, ""
    for name, exact0, exact_u, s0, u, R, eps, vector in (
            ("score", head.s0, head.u_s, red["s0"], red["u_s"], red["R_s"], red["eps_s"], "u_s"),
            ("value", head.w0, head.u_w, red["w0"], red["u_w"], red["R_w"], red["eps_w"], "u_w")):
        if len(u) != len(exact_u) or len(s0) != len(exact0) or len(eps) != len(exact0) or np.size(R) != 1:
            return -math.inf, f"{name} reduction has the wrong size"
        direction = r * head.difference_norm(u, vector, norm)
        half = float((arb(float(R)) - r * head.float_norm(u, norm)).lower())
        if not half >= worst:
            worst, where = half, f"{name} half-width"
        for j in range(head.n):
            m = float((arb(float(eps[j])) - abs(arb(float(s0[j])) - exact0[j]) - direction).lower())
            if not m >= worst:
                worst, where = m, f"{name} error bound of token {j}"
    return worst, where


def audit_row(files: LayerFiles, row: dict, cert: dict, expect: Expect = Expect()) -> list[Outcome]:
    """The outcomes of the numbers of one table row (`row`: the CSV row; `cert`: its stored certificates)."""
    old = ctx.prec
    ctx.prec = PREC
    try:
        return _audit_row(files, row, cert, expect)
    finally:
        ctx.prec = old


def _unit_matches(row: dict, unit: dict) -> str:
    for k in ("layer", "head", "prompt", "query_pos", "norm", "mode") + (("length",) if "length" in row else ()):
        if str(row[k]) != str(unit.get(k)):
            return f"certificate is for {k}={unit.get(k)}, the row has {row[k]}"
    if float(row["radius"]) != float(unit.get("radius", math.nan)):
        return f"certificate is for radius {unit.get('radius')}, the row has {row['radius']}"
    return ""


def _audit_row(files: LayerFiles, row: dict, cert: dict, expect: Expect) -> list[Outcome]:
    values = {k: reported_value(row.get(k, "")) for k in NUMBERS}
    mismatch = "no stored certificate for this row" if not cert else _unit_matches(row, cert.get("unit", {}))
    if mismatch:
        return [_fail(k, values[k], "pairing", mismatch) for k in NUMBERS]
    radius, norm, mode = float(row["radius"]), str(row["norm"]), str(row["mode"])
    head = files.unit_of(row)
    red = cert.get("reduction")
    reduction = ("reduction", *reduction_margin(head, red, radius, norm)) if red else (
        "reduction", -math.inf, "no stored reduction")
    out: dict[str, Outcome] = {}

    fo = cert.get("first_order")
    scalings = first_order_scalings(fo)  # the bilinear bound's stored scalings (linf varying query)
    if not math.isfinite(values["first_order"]):
        out["first_order"] = _fail("first_order", values["first_order"], "reported", "no finite first-order value")
    elif fo is None:
        out["first_order"] = _fail("first_order", values["first_order"], "certificate", "no stored first-order data")
    else:
        out["first_order"] = _held(
            [
                ("intervals", *enclosure_margin(head, fo["l"], fo["u"], fo["W"], radius, norm, mode,
                                                scalings)),
                ("greedy_lp", lp_margin(fo["l"], fo["u"], fo["W"], values["first_order"]), ""),
            ],
            "first_order",
            values["first_order"],
        )

    for name, wanted, key in (("second_order", expect.second_order, "certify.second_order"),
                              ("second_order_tight", expect.tight, "certify.tight")):
        if wanted:
            out[name] = _second_order(name, values, cert.get(name), out["first_order"], red, radius, norm, mode, head,
                                      scalings)
        else:
            out[name] = _empty_cell(name, values[name], f"not computed by the configuration ({key}: false)")

    attained = []  # lower ends of g at the audited witnesses
    if mode == "fixed":
        out["exact_lo"], out["exact_hi"] = _exact(head, cert.get("exact"), values, radius, norm, attained)
    else:
        for k in ("exact_lo", "exact_hi"):
            out[k] = _empty_cell(k, values[k], "varying query: no exact value (NP-hard)")
    stored = cert.get("best_feasible") or (cert.get("exact") if mode == "fixed" else None)
    out["best_feasible"] = _best_feasible(head, stored, values["best_feasible"], radius, norm, mode, attained)

    for k in NUMBERS:  # a reduction that the weights do not give: the row's certificates are not for this unit
        o = out[k]
        if o.status == "pass" and not reduction[1] >= 0:
            out[k] = Outcome(k, o.reported, "fail", "reduction", reduction[1], reduction[2], o.margins)
    cross_check_row(out, values, max(attained, default=-math.inf), str(row.get("status", "")),
                    str(row.get("error", "")))
    return [out[k] for k in NUMBERS]


def _empty_cell(name: str, value: float, why: str) -> Outcome:
    if math.isnan(value):
        return Outcome(name, value, "not applicable", "empty_cell", math.nan, why)
    return _fail(name, value, "empty_cell", f"a value where the cell must be empty ({why})")


def _g_at(head, Z: np.ndarray, mode: str):
    """g at the point Z in balls, or None when Z is not a finite point of the unit's shape."""
    if Z.shape != head.Z0.shape or not np.all(np.isfinite(Z)):
        return None
    return head.memo(("value", mode, array_key(Z)), lambda: head.value(Z, mode))  # a point audited twice: once


def _exact(head, ex: dict | None, values: dict, radius: float, norm: str, attained: list):
    lo, hi = values["exact_lo"], values["exact_hi"]
    if ex is None:
        return (_fail("exact_lo", lo, "certificate", "no stored witness"),
                _fail("exact_hi", hi, "certificate", "no stored witness"))
    Z = witness_tokens(head, ex)
    inside = ball_margin(head, Z, radius, norm)
    gZ = _g_at(head, Z, "fixed")
    if gZ is not None and inside >= 0:
        attained.append(float(gZ.lower()))
    if not math.isfinite(lo):
        out_lo = _fail("exact_lo", lo, "reported", "no finite exact_lo")
    else:
        value = float((gZ - arb(lo)).lower()) if gZ is not None else -math.inf
        out_lo = _held([("witness_ball", inside, ""), ("witness_value", value, "")], "exact_lo", lo)
    if not math.isfinite(hi):
        return out_lo, _fail("exact_hi", hi, "reported", "no finite exact_hi")
    D = Z - head.Z0 if gZ is not None else np.zeros_like(head.Z0)
    us, uw = head.memo(("mids",), lambda: tuple(np.array([float(x.mid()) for x in v]) for v in (head.u_s, head.u_w)))
    chk = exact_upper_check(head.s0, head.w0, head.u_s, head.u_w, radius, norm, hi, np.stack([D @ us, D @ uw], 1))
    return out_lo, _held([("inner_maxima", chk.margin, chk.reason)], "exact_hi", hi)


def _best_feasible(head, stored: dict | None, value: float, radius: float, norm: str, mode: str,
                   attained: list) -> Outcome:
    """The best feasible value: its point lies in the ball and attains it (up to FEASIBLE_TOLERANCE)."""
    if not math.isfinite(value):
        return _fail("best_feasible", value, "reported", "no finite best feasible value")
    if stored is None:
        return _fail("best_feasible", value, "certificate", "no stored point")
    Z = witness_tokens(head, stored)
    inside = ball_margin(head, Z, radius, norm)
    gZ = _g_at(head, Z, mode)
    if gZ is None:
        return _fail("best_feasible", value, "witness_ball", "the stored point is not finite or has the wrong shape")
    if inside >= 0:
        attained.append(float(gZ.lower()))
    scale = max([1.0] + [abs(float(w.mid())) for w in head.w0])
    slack = float((gZ + arb(FEASIBLE_TOLERANCE * scale) - arb(value)).lower())
    return _held([("witness_ball", inside, ""), ("witness_value", slack, "the point attains less than reported")],
                 "best_feasible", value)


def _second_order(name: str, values: dict, stored: dict | None, first: Outcome, red: dict | None, radius: float,
                  norm: str, mode: str, head, scalings: tuple | None = None) -> Outcome:
    value = values[name]
    if not math.isfinite(value):
        return _fail(name, value, "reported", "no finite value")
    if stored is None:
        return _fail(name, value, "certificate", "no stored certificate")
    kind = str(stored["kind"])
    if kind == "first_order":
        margin = value - values["first_order"]
        if not margin >= 0:
            return Outcome(name, value, "fail", "equals_first_order", margin, "below the first-order value")
        if first.status != "pass":
            return Outcome(name, value, "fail", f"first_order:{first.check}", first.margin, first.reason)
        return Outcome(
            name,
            value,
            "pass",
            "first_order_bound",
            margin,
            "the first-order certificate (tie or fallback)",
            f"first_order_bound={margin:.3g}",
        )
    if kind not in ("dual", "support"):
        return _fail(name, value, "certificate", f"unknown certificate kind {kind!r}")
    if red is None:
        return _fail(name, value, "program", "no stored reduction")
    if kind == "support":
        return _support(name, value, stored, red, radius, norm, mode)
    from attncert.audit.program_link import program_link  # the builders (cvxpy): imported where a program is

    link = program_link(stored, red, radius, norm, mode, head, scalings)
    checks = [("program", math.inf if link.margin >= 0 else link.margin, link.why)]
    if link.margin >= 0:
        checks.append(("dual_cone", *dual_cone_margin(stored["z"], stored["dims"])))
    if checks[-1][1] >= 0:
        origin, scale, tail = link.affine
        wd = weak_duality_upper(stored["c"], stored["A"], stored["b"], stored["z"], stored["lo"], stored["hi"],
                                link.data_rel_err)
        certified = arb(origin) + arb(scale) * wd + arb(tail)
        checks.append(("weak_duality", float((arb(value) - certified).lower()),
                       "the recomputed bound exceeds the reported value"))
    return _held(checks, name, value)


def _support(name: str, value: float, stored: dict, red: dict, radius: float, norm: str, mode: str) -> Outcome:
    """A support-function certificate (`support_duality`): the token program is the builder's for this row, the
    dual lies in K^*, and the recomputed bound, mapped to g, is at or below the reported value."""
    from attncert.audit.support_duality import support_bound_upper, support_link

    link = support_link(stored, red, radius, norm, mode)
    checks = [("program", math.inf if link.margin >= 0 else link.margin, link.why)]
    if link.margin >= 0:
        checks.append(("dual_cone", *dual_cone_margin(stored["z"], stored["dims"])))
    if checks[-1][1] >= 0:
        D = link.data
        bound = support_bound_upper(link.prog, np.asarray(stored["z"], dtype=np.float64), D.u_s, D.u_w, D.radius,
                                    D.R_s, D.rho_w, norm)
        origin, scale, tail = link.affine
        certified = arb(origin) + arb(scale) * bound + arb(tail)
        checks.append(("support_duality", float((arb(value) - certified).lower()),
                       "the recomputed support-function bound exceeds the reported value"))
    return _held(checks, name, value)
