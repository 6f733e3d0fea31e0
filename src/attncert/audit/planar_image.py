"""The fixed query's 2-D image of the perturbation ball, in ball arithmetic (for `audit.exact_upper`).

    P = {(u_s . delta, u_w . delta) : ||delta|| <= r}

with u_s, u_w given as `flint.arb` balls that enclose the exact directions. Every method returns an arb
that encloses (or bounds, as stated) its exact value for every direction inside the balls; float64 is
used only to choose where to evaluate (a dual variable, a candidate minimizer, an order to certify).
The math is in the docstring of `attncert.audit.exact_upper`; this module holds its two geometries:

* `ZonotopeImage` (linf): support function r sum_i |y_s u_s,i + y_w u_w,i|; the breakpoints of the dual
  variable (float64); the upper vertex chain, its order certified in arb; the minimum of
  e^sigma (c - omega) over the chain's vertices.
* `EllipseImage` (l2): the Gram matrix G and its Cholesky factor in arb; support function
  r sqrt((1, y) G (1, y)); the minimum of f(t) = e^{a cos t} (c - p cos t - q sin t) over the upper arc
  t in [0, pi] by branch and bound with a second-order Taylor form.

`Undecidable` is raised when the geometry cannot be settled at the working precision (a generator's
orientation, or the order of more than two nearly parallel generators); the caller then bounds the
affected terms by 0 and says so.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np
from flint import arb, arb_mat

MAX_CELLS = 256  # branch-and-bound cells per token (l2); the bound is sound at any budget, only looser
GRID = 65  # float64 angles searched for the arc's minimizer (l2)


class Undecidable(Exception):
    """The geometry cannot be decided in ball arithmetic at the working precision."""


def _mid(x: arb) -> float:
    return float(x.mid())


def _sum(xs) -> arb:
    acc = arb(0)
    for x in xs:
        acc += x
    return acc


# ----------------------------------------------------------------------------------------------
# linf: the zonotope
# ----------------------------------------------------------------------------------------------
class ZonotopeImage:
    norm = "linf"

    def __init__(self, u_s: list, u_w: list, r: arb):
        keep = [i for i in range(len(u_s)) if not (u_s[i].is_zero() and u_w[i].is_zero())]  # zero generators
        self.us, self.uw, self.r = [u_s[i] for i in keep], [u_w[i] for i in keep], r
        self.omega_max = r * _sum(abs(b) for b in self.uw)  # max_P omega = r ||u_w||_1
        us_f = np.array([_mid(a) for a in self.us])
        uw_f = np.array([_mid(b) for b in self.uw])
        rf = _mid(r)
        # dual variable y > 0: |u_s,i + y u_w,i| has a kink at y = -u_s,i/u_w,i when that is positive
        kink = (us_f * uw_f) < 0
        idx = np.flatnonzero(kink)
        c = -us_f[idx] / uw_f[idx]
        order = np.argsort(c, kind="stable")
        self._kink_gen, self._kink_at = idx[order], c[order]
        first = np.where(us_f != 0, np.sign(us_f), np.sign(uw_f))  # sign of u_s,i + y u_w,i as y -> 0+
        om0 = rf * float(np.sum(first * uw_f))
        self._om_after = om0 + 2.0 * rf * np.cumsum(np.abs(uw_f[self._kink_gen]))  # omega(y) past kink k
        self._om_before = np.concatenate(([om0], self._om_after[:-1]))
        self._v_minus = self._om_before - 1.0 / self._kink_at  # omega(y) - 1/y just left of kink k
        self._v_plus = self._om_after - 1.0 / self._kink_at  # ... just right: increasing in k
        self._om_last = float(self._om_after[-1]) if len(idx) else om0
        self._chain = None

    def support(self, y: arb) -> arb:
        """h_P(1, y) = r sum_i |u_s,i + y u_w,i|."""
        acc = arb(0)
        for a, b in zip(self.us, self.uw):
            acc += abs(a + y * b)
        return self.r * acc

    def dual(self, B: float, hint=None) -> arb:
        """A y > 0 near the minimizer of g(y) = h_P(1, y) + y B - log y (float64 choice; any y > 0 is sound).

        g'(y) = omega(y) + B - 1/y increases with y; its sign change is either inside a piece of constant
        omega (y = 1/(B + omega)) or at a kink (y = -u_s,i/u_w,i, returned as a ball: exact to the precision).
        """
        T = -B
        k = int(np.searchsorted(self._v_plus, T, side="left"))
        if k < len(self._v_plus) and self._v_minus[k] <= T:
            i = int(self._kink_gen[k])
            y = -self.us[i] / self.uw[i]
            if y > 0:
                return y
            return arb(float(self._kink_at[k]))
        om = self._om_before[k] if k < len(self._v_plus) else self._om_last
        return arb(1.0 / max(B + om, 1e-300 + 1e-30 * abs(B)))

    # -- the upper vertex chain -----------------------------------------------------------------
    def chain(self):
        """(e^sigma_k, omega_k) at every candidate vertex of the upper boundary, built once."""
        if self._chain is None:
            self._chain = self._build_chain()
        if isinstance(self._chain, Undecidable):
            raise self._chain
        return self._chain

    def _build_chain(self):
        r = self.r
        gs, gw, e = [], [], []
        for a, b in zip(self.us, self.uw):  # orient every generator to the right (upward if vertical)
            s = 1 if a > 0 else -1 if a < 0 else 0
            if s == 0 and a.is_zero():
                s = 1 if b > 0 else -1 if b < 0 else 0
            if s == 0:
                return Undecidable(f"the orientation of a generator is undecidable (u_s = {a.str(3, radius=True)})")
            e.append(s)
            gs.append(r * a if s > 0 else -(r * a))
            gw.append(r * b if s > 0 else -(r * b))
        m = len(gs)
        e_f = np.array(e, dtype=float)
        ang = np.arctan2(e_f * np.array([_mid(b) for b in self.uw]), np.abs([_mid(a) for a in self.us]))
        order = list(np.argsort(-ang, kind="stable"))  # decreasing angle, then certified below

        def cross(a, b):  # <= 0 iff g_a comes first (angle_a >= angle_b)
            return gs[a] * gw[b] - gw[a] * gs[b]

        for _ in range(m + 1):  # bubble passes: swap pairs whose order is certainly the other one
            swapped, ambiguous = False, set()
            for k in range(m - 1):
                cr = cross(order[k], order[k + 1])
                if cr <= 0:
                    continue
                if cr > 0:
                    order[k], order[k + 1] = order[k + 1], order[k]
                    swapped = True
                else:
                    ambiguous.add(k)
            if not swapped:
                break
        else:
            return Undecidable("the order of the generators did not settle")
        if any(k + 1 in ambiguous for k in ambiguous):
            return Undecidable("three or more consecutive generators are parallel within the balls")
        # blocks: single generators and undecided pairs; every member of a block must come certainly
        # before every member of the next one, then the exact order is ours up to swaps inside the pairs
        blocks, k = [], 0
        while k < m:
            size = 2 if k in ambiguous else 1
            blocks.append(order[k:k + size])
            k += size
        for X, Y in zip(blocks, blocks[1:]):
            if (len(X) > 1 or len(Y) > 1) and not all(cross(x, y) <= 0 for x in X for y in Y):
                return Undecidable("a nearly parallel pair of generators is not ordered against its neighbours")
        sig, om = -_sum(gs), -_sum(gw)
        points = [(sig, om)]
        for k in range(m):
            a = order[k]
            if k in ambiguous:
                b = order[k + 1]
                points.append((sig + 2 * gs[b], om + 2 * gw[b]))
            sig, om = sig + 2 * gs[a], om + 2 * gw[a]
            points.append((sig, om))
        return [(s.exp(), w) for s, w in points], len(ambiguous)

    def min_weighted_gap(self, c: arb, hint=None) -> arb:
        """A ball containing min_P e^sigma (c - omega), for c > max_P omega (the min is at a chain vertex)."""
        pts, _ = self.chain()
        best = None
        for E, w in pts:
            v = E * (c - w)
            best = v if best is None else best.min(v)
        return best


# ----------------------------------------------------------------------------------------------
# l2: the ellipse
# ----------------------------------------------------------------------------------------------
class EllipseImage:
    norm = "l2"

    def __init__(self, u_s: list, u_w: list, r: arb):
        d = len(u_s)
        A = arb_mat(2, d, list(u_s) + list(u_w))
        G = A * A.transpose()
        self.Gss, self.Gsw, self.Gww = G[0, 0], G[0, 1], G[1, 1]
        self.r = r
        self.omega_max = r * self.Gww.nonnegative_part().sqrt()
        if self.Gss > 0:  # Cholesky factor R of G: P = {r R^T z : ||z|| <= 1}
            r11 = self.Gss.sqrt()
            r12 = self.Gsw / r11
            r22 = (self.Gww - r12 * r12).nonnegative_part().sqrt()
        elif self.Gss.is_zero():  # u_s = 0: P is the segment {0} x [-R_w, R_w]
            r11, r12, r22 = arb(0), self.Gww.nonnegative_part().sqrt(), arb(0)
        else:
            r11 = None
        self.abc = None if r11 is None else (r * r11, r * r12, r * r22)  # (a, p, q)
        self._f64 = tuple(_mid(x) for x in (self.Gss, self.Gsw, self.Gww))
        self._abc_f = None if r11 is None else tuple(_mid(x) for x in self.abc)
        self._grid = np.linspace(0.0, math.pi, GRID)

    def support(self, y: arb) -> arb:
        """h_P(1, y) = r sqrt(G_ss + 2 y G_sw + y^2 G_ww)."""
        return self.r * (self.Gss + 2 * y * self.Gsw + y * y * self.Gww).nonnegative_part().sqrt()

    def dual(self, B: float, hint=None) -> arb:
        """A y > 0 near the minimizer of g(y) = h_P(1, y) + y B - log y (bisection in log y, then Newton)."""
        gss, gsw, gww = self._f64
        rf = _mid(self.r)

        def g1(y):  # g'(y) and g''(y); y in [e^-300, e^300] keeps every product finite
            Q = max(gss + 2 * y * gsw + y * y * gww, 1e-300)
            s, v = math.sqrt(Q), gsw + y * gww
            return rf * v / s + B - 1.0 / y, rf * (gww * Q - v * v) / (Q * s) + 1.0 / (y * y)

        lo, hi = -300.0, 300.0  # log y
        if hint is not None and B + hint[1] > 0 and -300 < -math.log(B + hint[1]) < 300:
            y0 = 1.0 / (B + hint[1])
            if g1(y0)[0] < 0:
                lo = math.log(y0)
            else:
                hi = math.log(y0)
        for _ in range(64):
            m = 0.5 * (lo + hi)
            if g1(math.exp(m))[0] < 0:
                lo = m
            else:
                hi = m
        y = math.exp(0.5 * (lo + hi))
        for _ in range(3):
            d1, d2 = g1(y)
            y_new = y - d1 / d2 if d2 > 0 and math.isfinite(d1) else -1.0
            if not 0 < y_new < math.exp(300):
                break
            y = y_new
        return arb(y)

    # -- the minimum of e^sigma (c - omega) on the upper arc ---------------------------------------
    def _f(self, t: arb, c: arb, order2=True):
        """f, f', f'' of f(t) = e^{a cos t} (c - p cos t - q sin t) (balls over the ball t)."""
        a, p, q = self.abc
        s, co = t.sin_cos()
        E = (a * co).exp()
        L = c - p * co - q * s
        L1 = p * s - q * co
        f, f1 = E * L, E * (L1 - a * s * L)
        f2 = E * ((a * a * s * s - a * co) * L - 2 * a * s * L1 + p * co + q * s) if order2 else None
        return f, f1, f2, (a * co).lower().exp(), L  # exp of the exponent's lower end: e^x's ball can reach 0

    def _cell_lower(self, c: arb, lo: float, hi: float) -> arb:
        """A lower bound (exact arb) of f on [lo, hi]: ball evaluation and Taylor form at the midpoint."""
        m_f = 0.5 * (lo + hi)
        m = arb(m_f)
        h = (arb(hi) - m).max(m - arb(lo))
        T = arb(lo).union(arb(hi))
        F0, F1, *_ = self._f(m, c, order2=False)
        FT, _, F2, ET, LT = self._f(T, c)
        L = F2.lower()
        # f = E L with E > 0 and L >= c - R_w > 0 on P: the product of the two lower ends
        best = FT.lower().max((ET.lower() * LT.lower().max((c - self.omega_max).lower())).lower())
        if L > 0:  # f >= F0 + F1 tau + L tau^2 / 2 >= F0 - F1^2/(2L)
            best = best.max((F0 - F1 * F1 / (2 * L)).lower())
        if L <= 0 or abs(F1) >= h * L:  # the quadratic's minimum over |tau| <= h is at an end
            best = best.max((F0 - abs(F1) * h + L * h * h / 2).lower())
        return best

    def _argmin_float(self, c: float, hint=None) -> float:
        """A float64 minimizer of f on [0, pi]: the best grid angle (and the hint's angle), then a bracketed
        Newton on the sign of f'/e^{a cos t} = D(t) = L'(t) - a sin t L(t) (f can be sharp: c close to R_w)."""
        a, p, q = self._abc_f

        def D(t):  # f'(t) / E(t), and its derivative
            s, co = math.sin(t), math.cos(t)
            L, L1, L2 = c - p * co - q * s, p * s - q * co, p * co + q * s
            return L1 - a * s * L, L2 - a * co * L - a * s * L1

        def logf(t):
            return a * np.cos(t) + np.log(np.maximum(c - p * np.cos(t) - q * np.sin(t), 1e-300))

        grid = self._grid
        k = int(np.argmin(logf(grid)))
        brackets = [(grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)])]
        if hint is not None and a > 0:
            co = min(max(hint[0] / a, -1.0), 1.0)
            si = (hint[1] - p * co) / q if q > 0 else math.sqrt(max(1 - co * co, 0.0))
            th = math.atan2(max(si, 0.0), co)
            brackets.append((max(th - 1e-3, 0.0), min(th + 1e-3, math.pi)))
        best, best_val = None, None
        for lo, hi in brackets:
            lo, hi = float(lo), float(hi)
            t = 0.5 * (lo + hi)
            if D(lo)[0] < 0 < D(hi)[0]:
                for _ in range(80):  # rtsafe: Newton inside the bracket, else bisection
                    d, d1 = D(t)
                    if d < 0:
                        lo = t
                    else:
                        hi = t
                    t_new = t - d / d1 if d1 > 0 else 0.5 * (lo + hi)
                    if not lo < t_new < hi:
                        t_new = 0.5 * (lo + hi)
                    if t_new == t or hi - lo < 1e-17:
                        break
                    t = t_new
            else:  # no sign change: the better end
                t = lo if logf(np.array(lo)) < logf(np.array(hi)) else hi
            val = float(logf(np.array(t)))
            if best is None or val < best_val:
                best, best_val = t, val
        return best

    def min_weighted_gap(self, c: arb, hint=None) -> arb:
        """A lower bound (exact arb) of min_P e^sigma (c - omega), for c > max_P omega.

        The minimum is on the upper arc t in [0, pi] (log of the objective is concave: an extreme point;
        for fixed sigma the largest omega). Cover [0, pi] by the central cell [m* - w, m* + w] around the
        float minimizer m* and side cells, bisected until each is bounded below by the central bound.
        """
        if self.abc is None:
            raise Undecidable("u_s is neither certainly zero nor certainly nonzero")
        t_star = self._argmin_float(_mid(c), hint)
        m = arb(t_star)
        F0, F1, *_ = self._f(m, c, order2=False)
        w = math.pi / 64
        for _ in range(40):  # shrink the central cell until f'' > 0 on it
            F2 = self._f(arb(t_star, w), c)[2]
            if F2.lower() > 0 or w < 1e-12:
                break
            w /= 2
        wa = arb(w)
        L = F2.lower()
        if L > 0:
            X = (F0 - F1 * F1 / (2 * L)).lower()
        else:
            X = (F0 - abs(F1) * wa + L * wa * wa / 2).lower()
        pi_up = float(np.nextafter(math.pi, 4.0))
        cells = [(lo, hi) for lo, hi in ((0.0, t_star - w), (t_star + w, pi_up)) if hi > lo]
        cells = deque(cells)  # breadth first: a budget ends with every region bisected about equally
        result, used = X, 0
        while cells:
            lo, hi = cells.popleft()
            used += 1
            b = self._cell_lower(c, lo, hi)
            if b >= X or used + len(cells) >= MAX_CELLS or hi - lo < 1e-14:
                result = result.min(b)
                continue
            mid = 0.5 * (lo + hi)
            cells += [(lo, mid), (mid, hi)]
        return result
