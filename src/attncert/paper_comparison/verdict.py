"""The verdict of one claim against our measured value.

Kinds:

    reproduced      within tolerance, in the claim's own metric, on the claim's set-up
    stronger        better than the claim beyond its tolerance, in the claim's direction (`better`:
                    lower = tighter / faster, higher = more units certified, a larger proven bound)
    qualitative     the claim's direction or order holds (ours lies in its `direction` interval, or a
                    yes/no statement holds), the magnitude is outside tolerance or not comparable
    differs         neither
    set-up differs  a grid, suite, unit count or model that differs from the paper's: reported, not judged
    n/a             nothing measured (no stage emits the key, or the value is NaN / empty)

Numeric claims. The paper's number becomes an interval P: `value` [x, x]; `band` [lo, hi]; `at_most`
(-inf, x]; `at_least` [x, inf); a {median, range} value is judged on its median. Ours becomes an
interval O the same way (a number, [min, max] of a list, or a median). The tolerance widens P to the
accepted interval A: abs a -> [lo - a, hi + a], rel t -> [lo - t|lo|, hi + t|hi|], factor f ->
[lo / f, hi * f] (none: A = P). With `strict` a limit is open ("< x", "> x"). Then, in order:

    better = lower:  stronger if O lies entirely below A (value/band claims only); reproduced if O
                     nowhere exceeds A's upper end
    better = higher: the mirror image
    better = none:   reproduced if O lies inside A
    otherwise:       qualitative if O lies inside `direction`, else differs

A limit claim (at_most / at_least) that holds is `reproduced`, never `stronger`: the paper states a
limit, not a number to beat.

Other forms. `holds`: ours is a boolean; true -> reproduced, false -> differs. `ordered`: ours is a
list of values (one per measured key); one value lies below the next when its upper end is strictly below
the next's lower end, and, with a `factor` tolerance f, below it by more than the factor (f x upper end <
next lower end): two values within a factor f of each other are in no order. Reproduced when each one lies
below the next; with `better: lower`, the order failing only because the last key lies below the one before
it (the others in order) is stronger (a certificate faster than a baseline the paper called faster); else
differs. The factor keeps a verdict on measured seconds from flipping with noise between nearly equal times. `setup`:
ours equals the paper's number (within
tolerance) or string -> reproduced, else `set-up differs`.

Caps: a result can be at best `qualitative`, whatever the comparison says, when
  (1) our measured key is a different metric than the claim's (`our_metric` is set): the two numbers
      do not measure the same thing, so only the direction can be compared; or
  (2) the set-up the claim's magnitude belongs to differs (`depends_on` names a setup claim whose
      verdict is not `reproduced`: another model, another witness suite, or not measured).
The model rule, precisely: Paper A's magnitudes (relative gaps, ratios to baselines, shares of units,
timings, block statistics) are properties of GPT-2 small's heads; a result on another model (the
default run: all-MiniLM-L6-v2) can be at best `qualitative` for them: the direction or order can carry
over to another transformer, the magnitude cannot be reproduced on a model the paper did not use.
Claims about the method itself (orders of the gap in r, exactness, soundness against the secant
bound) do not depend on the model and are judged in full. The comparison is always made in the
claim's metric and tolerance; a capped verdict keeps the uncapped one in `uncapped` and says why in
`note`, and the table names the model and grid that produced ours. `differs` is never raised by a cap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attncert.paper_comparison.claims import Claim

REPRODUCED, STRONGER, QUALITATIVE, DIFFERS, SETUP_DIFFERS, NA = (
    "reproduced", "stronger", "qualitative", "differs", "set-up differs", "n/a")
KINDS = (REPRODUCED, STRONGER, QUALITATIVE, DIFFERS, SETUP_DIFFERS, NA)


@dataclass(frozen=True)
class Verdict:
    kind: str
    uncapped: str        # the verdict before a cap (equal to kind when nothing capped it)
    note: str = ""       # why a cap applied, or why n/a


def _missing(x) -> bool:
    if x is None:
        return True
    if isinstance(x, float) and math.isnan(x):
        return True
    if isinstance(x, (list, tuple, dict)) and len(x) == 0:
        return True
    return False


def interval(x) -> tuple[float, float] | None:
    """A number -> (x, x); a list -> (min, max) of its finite numbers; {median: m} -> (m, m); else None."""
    if isinstance(x, dict):
        x = x.get("median")
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (list, tuple)):
        vals = [float(v) for v in x if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)]
        return (min(vals), max(vals)) if vals else None
    if isinstance(x, (int, float)) and np.isfinite(float(x)):
        return float(x), float(x)
    return None


def paper_interval(claim: Claim) -> tuple[float, float]:
    lo, hi = interval(claim.compared)
    if claim.form == "at_most":
        return -math.inf, hi
    if claim.form == "at_least":
        return lo, math.inf
    return lo, hi


def accepted_interval(claim: Claim) -> tuple[float, float]:
    """The paper's interval widened by the claim's tolerance (infinite ends stay infinite)."""
    lo, hi = paper_interval(claim)
    if claim.tolerance is None:
        return lo, hi
    kind, t = claim.tolerance
    if kind == "abs":
        return lo - t, hi + t
    if kind == "rel":
        return lo - t * abs(lo) if math.isfinite(lo) else lo, hi + t * abs(hi) if math.isfinite(hi) else hi
    return lo / t if math.isfinite(lo) else lo, hi * t if math.isfinite(hi) else hi   # factor


def _le(a: float, b: float, strict: bool) -> bool:
    return a < b if strict else a <= b


def _numeric(claim: Claim, ours) -> str:
    o = interval(ours)
    if o is None:
        return NA
    lo, hi = accepted_interval(claim)
    limit = claim.form in ("at_most", "at_least")
    strict = claim.strict and limit           # the open end of a limit; the other end is infinite
    inside = _le(lo, o[0], strict) and _le(o[1], hi, strict)
    if claim.better == "lower":
        if not limit and o[1] < lo:
            return STRONGER
        if _le(o[1], hi, strict):
            return REPRODUCED
    elif claim.better == "higher":
        if not limit and o[0] > hi:
            return STRONGER
        if _le(lo, o[0], strict):
            return REPRODUCED
    elif inside:
        return REPRODUCED
    if claim.direction is not None and claim.direction[0] <= o[0] and o[1] <= claim.direction[1]:
        return QUALITATIVE
    return DIFFERS


def _increasing(spans, factor: float = 1.0) -> bool:
    """Each interval lies strictly below the next, by more than `factor` (factor x max of one < min of the next)."""
    return all(factor * a[1] < b[0] for a, b in zip(spans, spans[1:]))


def _ordered(ours, better: str = "none", factor: float = 1.0) -> str:
    spans = [interval(v) for v in ours]
    if any(s is None for s in spans):
        return NA
    if _increasing(spans, factor):
        return REPRODUCED
    # better = lower: the last key is the one the claim puts on top (e.g. the certificate's time); when the others
    # keep their order and it lies entirely below the one before it, it beats the claim: stronger, not differs
    if better == "lower" and _increasing(spans[:-1], factor) and factor * spans[-1][1] < spans[-2][0]:
        return STRONGER
    return DIFFERS


def _setup(claim: Claim, ours) -> str:
    if isinstance(claim.compared, str) or isinstance(ours, str):
        same = str(ours).strip().lower() == str(claim.compared).strip().lower()
        return REPRODUCED if same else SETUP_DIFFERS
    o = interval(ours)
    if o is None:
        return NA
    lo, hi = accepted_interval(claim)
    return REPRODUCED if lo <= o[0] and o[1] <= hi else SETUP_DIFFERS


def uncapped_verdict(claim: Claim, ours) -> str:
    """The verdict in the claim's metric and tolerance, before any cap."""
    if claim.form == "ordered":
        if not isinstance(ours, (list, tuple)) or len(ours) != len(claim.measured) or any(_missing(v) for v in ours):
            return NA
        return _ordered(ours, claim.better, claim.tolerance[1] if claim.tolerance else 1.0)
    if _missing(ours):
        return NA
    if claim.form == "setup":
        return _setup(claim, ours)
    if claim.form == "holds":
        if not isinstance(ours, (bool, np.bool_)):
            raise TypeError(f"claim {claim.id!r}: form holds needs a boolean measurement, got {ours!r}")
        return REPRODUCED if ours else DIFFERS
    return _numeric(claim, ours)


def verdict(claim: Claim, ours, setup_differs: str | None = None) -> Verdict:
    """The verdict of `claim` given our measured value(s).

    `setup_differs`: None when the claim's set-up (its `depends_on` setup claims) is the paper's, else
    a short reason ("set-up paper_a_model: ours all-MiniLM-L6-v2, paper GPT-2 small"). See the module
    docstring for the rule.
    """
    kind = uncapped_verdict(claim, ours)
    if kind == NA:
        return Verdict(NA, NA, "not measured in this run")
    reasons = []
    if claim.our_metric and claim.form != "setup":
        reasons.append(f"our metric differs: {claim.our_metric}")
    if setup_differs and claim.form != "setup":
        reasons.append(setup_differs)
    if reasons and kind in (REPRODUCED, STRONGER):
        return Verdict(QUALITATIVE, kind, f"{kind} before the cap; capped at qualitative: " + "; ".join(reasons))
    if reasons:
        return Verdict(kind, kind, "; ".join(reasons))
    return Verdict(kind, kind)
