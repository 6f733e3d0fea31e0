r"""Audit of the exact solver's upper end: F(hi) < 0 in ball arithmetic, so hi bounds the fixed-query worst case.

Trusted base: python-flint's `arb` ball arithmetic, numpy, and the input balls. float64 only chooses *where*
to evaluate (a dual variable, a candidate minimizer, an order to certify); every bound is an arb
expression, so a bad choice can make the check fail but never pass wrongly. No solver and no attncert
module outside `attncert.audit` is imported.

**Problem.** Fixed query (`attncert.certify.exact_worst_case`): token j reads s_j = s0_j + sigma_j,
w_j = w0_j + omega_j, where x_j = (sigma_j, omega_j) ranges over the 2-D image of the ball

    P = {(u_s . delta, u_w . delta) : ||delta|| <= r}       (linf: a zonotope; l2: an ellipse).

For a number t let B_j = w0_j - t and

    F(t) = sum_j h_j,        h_j = max_{x in P} e^{s0_j + sigma} (B_j + omega).

If F(hi) < 0 then every feasible delta has sum_j e^{s_j} (w_j - hi) < 0, i.e. g(delta) < hi: hi is an
upper bound of max g. The inputs s0, w0, u_s, u_w are balls that enclose the exact reduction; each
quantity below is evaluated in arb and so encloses (or bounds, as stated) its exact value for every
reduction inside the balls. Notation: the support function h_P(y) = max_{x in P} y . x,

    linf:  h_P(y) = r sum_i |y_s u_s,i + y_w u_w,i|,        l2:  h_P(y) = r ||y_s u_s + y_w u_w||_2,

and R_w = h_P(0, 1) = max_P omega.

**(1) Tokens that can be positive** (B_j + R_w < 0 not certain). For z > 0 and y > 0,
log z <= y z - 1 - log y (the tangent of log at z = 1/y). With z = B + omega > 0 and x in P,

    s0 + sigma + log(B + omega) <= s0 + (sigma + y omega) + y B - 1 - log y <= s0 + h_P(1, y) + y B - 1 - log y,

and where B + omega <= 0 the term is <= 0. Hence, for every y > 0,

    h_j <= U_j(y) = exp(s0_j + h_P(1, y) + y B_j - 1 - log y).

The bound is exact at the right y: if x* maximizes the concave sigma + log(B + omega) over P, optimality
puts its gradient (1, y*), y* = 1/(B + omega*), in the normal cone of P at x*, so h_P(1, y*) =
sigma* + y* omega* and U_j(y*) = e^{s0 + sigma*}(B + omega*) = h_j. The y is chosen by minimizing the convex
g(y) = h_P(1, y) + y B - log y in float64 (`planar_image.*.dual`): linf, g' = omega(y) + B - 1/y with
omega(y) piecewise constant (it jumps by 2 r |u_w,i| at the kink y = -u_s,i/u_w,i), so the sign change
is found by a binary search over the sorted kinks, either inside a piece (y = 1/(B + omega), error in U of
second order) or at a kink (y = -u_s,i/u_w,i taken as a ball, exact to the working precision); l2,
bisection in log y and Newton. The hint x0_j (l2 only) is a starting point. No y can give a wrong pass.

**(2) Tokens certainly negative** (B_j + R_w < 0 in arb). Then B + omega < 0 on P and
h_j = -e^{s0_j} m_j with m_j = min_{x in P} e^{sigma} (c - omega), c = -B_j > R_w. These terms nearly
cancel the positive ones at hi, so m_j is needed to working precision, from below. log(e^sigma (c - omega))
is concave on P, so the minimum is at an extreme point, and for fixed sigma at the largest omega: on the
upper boundary.

* linf: the extreme points of the upper boundary are the vertices of its chain. With the generators
  oriented to the right, g_i = r e_i (u_s,i, u_w,i) (e_i = sign u_s,i, or sign u_w,i when u_s,i = 0;
  zero generators dropped), the chain starts at v_0 = -sum_i g_i and adds 2 g_i in order of decreasing
  angle. The order is sorted in float64 and certified in arb: consecutive g_a, g_b need
  g_a,s g_b,w - g_a,w g_b,s <= 0 (0 exactly: parallel, either order gives the same extreme points); a
  pair certainly in the other order is swapped; a pair that cannot be decided keeps both intermediate
  points as candidates (points of P: extra candidates never lower the minimum below m_j) when both
  members are certainly ordered against their neighbours. m_j is enclosed by min_k e^{sigma_k}(c - omega_k)
  (the e^{sigma_k} shared by all tokens). An undecidable orientation or run of three near-parallel
  generators makes the token's bound 0 (sound: it is negative), named in `reason`.
* l2: the upper arc x(t) = (a cos t, p cos t + q sin t), t in [0, pi], (a, p, q) = r (R_11, R_12, R_22),
  R the Cholesky factor of the Gram matrix of (u_s, u_w) (P = {r R^T z : ||z|| <= 1}). Minimize
  f(t) = e^{a cos t} (c - p cos t - q sin t) by branch and bound: m* a float64 minimizer (a grid, then
  Newton on (log f)'), the cell |t - m*| <= w bounded by Taylor's theorem,
  f(t) >= f(m*) + f'(m*) tau + L tau^2 / 2 >= f(m*) - f'(m*)^2 / (2L), L <= f'' on the cell (a ball
  evaluation), tight since f'(m*) ~ 0; the rest of [0, pi] covered by cells bisected until each is
  bounded below by that value (its own Taylor form at the midpoint, or a plain ball evaluation). The
  lower bound is the minimum over the final cover, at any cell budget.

**(3) The sum.** F(hi) e^{-C} = sum_j term_j e^{-C}, C = max_j mid(s0_j), in arb (whose exponents do not
overflow). The check passes iff the ball of the sum lies below 0. The reported floats are in units of the
largest term (`scale`), so they stay finite whatever the score range.

**Undecided sign.** When the ball of B_j + R_w contains 0, (1) is used with y = 1/gap, gap the upper end
of B_j + R_w > 0: since h_P(1, y) <= R_s + y R_w (R_s = max_P sigma), U_j <= e^{s0_j + R_s} gap, a term of
the size of the input balls (the check cannot then resolve an hi that close to w0_j + R_w).

Not checked here: that the input balls enclose the reduction of the stored head (the caller's ball
computation), and that hi is the number the table reports.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flint import arb, ctx

from attncert.audit.planar_image import EllipseImage, Undecidable, ZonotopeImage

PREC = 128  # bits of flint's working precision


@dataclass
class ExactUpperCheck:
    passed: bool  # F(hi) < 0 certified: hi is an upper bound of the fixed-query worst case
    f_upper: float  # upper end of the ball of F(hi) e^{-scale} (< 0 to pass; a float, for the report)
    scale: float  # F is reported in units of e^scale (scale = the log of the largest term's size)
    margin: float  # -f_upper / sum_j |term_j| e^{-scale}: relative margin, > 0 iff passed
    reason: str = ""  # empty when passed; else why not (one line)
    positive_tokens: int = 0  # tokens bounded by (1), the others by (2)


def _balls(xs) -> list:
    return [x if isinstance(x, arb) else arb(float(x)) for x in xs]


def exact_upper_check(s0, w0, u_s, u_w, radius: float, norm: str, hi: float, x0: np.ndarray | None = None,
                      prec: int = PREC) -> ExactUpperCheck:
    """Certify F(hi) < 0 (hi bounds max g for the fixed query) in arb ball arithmetic at `prec` bits.

    s0, w0 (n,) and u_s, u_w (d,): `flint.arb` balls enclosing the exact reduction (floats are taken as
    exact); x0 (n, 2): optional hint points (sigma_j, omega_j) of P, starting points only (l2).
    """
    if norm not in ("linf", "l2"):
        raise ValueError(f"norm must be 'linf' or 'l2'; got {norm!r}")
    if not (np.isfinite(radius) and radius > 0 and np.isfinite(hi)):
        raise ValueError(f"radius must be positive and finite and hi finite; got {radius}, {hi}")
    if len(s0) != len(w0) or len(s0) == 0 or len(u_s) != len(u_w):
        raise ValueError("s0, w0 must have the same length n >= 1 and u_s, u_w the same length d")
    old = ctx.prec
    ctx.prec = int(prec)
    try:
        return _check(_balls(s0), _balls(w0), _balls(u_s), _balls(u_w), float(radius), norm, float(hi), x0)
    finally:
        ctx.prec = old


def token_terms(s0, w0, image, hi: float, x0=None) -> tuple[list, list, int]:
    """Per-token upper bounds (arb) of h_j e^{-C} at t = hi, C = max_j mid(s0_j); notes; positive tokens.

    Inputs as lists of arb; `image` a `planar_image.ZonotopeImage` or `EllipseImage`. The working precision
    is the caller's (flint.ctx.prec).
    """
    t = arb(hi)
    C = max(float(s.mid()) for s in s0)
    terms, notes, n_pos = [], [], 0
    for j, (s, w) in enumerate(zip(s0, w0)):
        B = w - t
        hint = None if x0 is None else (float(x0[j][0]), float(x0[j][1]))
        if B + image.omega_max < 0:  # (2): negative on all of P
            try:
                m = image.min_weighted_gap(-B, hint)
                terms.append(-((s - C).exp() * m))
            except Undecidable as exc:
                terms.append(arb(0))  # the term is negative: 0 bounds it
                notes.append(f"token {j} bounded by 0: {exc}")
            continue
        n_pos += 1  # (1): U_j(y) for a y > 0
        gap = (B + image.omega_max).upper()
        if not B + image.omega_max > 0:  # sign undecided: y = 1/gap gives U_j <= e^{s0 + R_s} gap
            y = arb(1.0 / max(float(gap.mid()), 1e-300))
        else:
            y = image.dual(float(B.mid()), hint)
        terms.append((s - C + image.support(y) + y * B - 1 - y.log()).exp())
    return terms, notes, n_pos


def _check(s0, w0, u_s, u_w, radius, norm, hi, x0) -> ExactUpperCheck:
    r = arb(radius)
    image = ZonotopeImage(u_s, u_w, r) if norm == "linf" else EllipseImage(u_s, u_w, r)
    terms, notes, n_pos = token_terms(s0, w0, image, hi, x0)
    C = max(float(s.mid()) for s in s0)
    F = arb(0)
    for term in terms:
        F += term
    # report in units of e^{C + K}, K the log of the largest term (arb: no overflow; the floats stay finite)
    logs = [float(abs(term).upper().log().mid()) for term in terms if abs(term).upper() > 0]
    K = max((v for v in logs if np.isfinite(v)), default=0.0)
    unit = arb(-K).exp()
    size = sum(float((abs(term) * unit).mid()) for term in terms)
    f_up = float((F * unit).upper().mid())
    margin = -f_up / size if size > 0 and np.isfinite(f_up) else float("nan")
    passed = bool(F < 0)
    reason = (
        ""
        if passed
        else (
            f"F(hi) not certified < 0: upper end {f_up:.3e} e^scale (relative to the terms {-margin:.2e})"
            + "".join(f"; {note}" for note in notes[:3])
        )
    )
    return ExactUpperCheck(passed, f_up, C + K, margin, reason, n_pos)
