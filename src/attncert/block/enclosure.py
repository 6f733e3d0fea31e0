"""Affine enclosures of the block map over a box.

Every intermediate vector v of F (block/map.py; row vectors, float64) is carried as an affine form

    v(xi) = c + J xi + R nu + err,     ||xi||_inf <= rho,

with c, J the float value and Jacobian at xi = 0, one noise symbol nu_n per scalar nonlinear node n (its
linearization error at the centre, |nu_n| <= eps_n(rho)), R the float coefficients of the centre-linearized
graph from the node outputs to v (so linear layers keep their cancellations), and |err| the rounding of c, J, R.
Likewise the Jacobian along any ||u||_inf <= 1: J_v(xi) u = J u + R beta + err', |beta_n| <= b_n(rho), where
beta_n is the change of node n's local slope over the box times its input's derivative. Hence per entry

    e(rho) = |R| eps + rounding  (value remainder),    a(rho) = |R| b + rounding  (Jacobian remainder),
    unary phi(z):  eps = 1/2 M2 w^2 + ...,   b = M2 w (s + a) + ...;   product x y: eps = w_x w_y + ...,
                   b = (s_x + a_x) w_y + w_x (s_y + a_y) + ...,

with w = ||J||_1 rho + e the half-width of the node input's range, s = ||J||_1 and M2 = sup |phi''| over the
range; for the convex exp, 1/z and z^(-1/2) the terms 1/2 M2 w^2 and M2 w are replaced by the exact linearization
error and slope change at the range's end points where smaller (`taylor_excess_at_ends`, `slope_change_at_ends`).
The output's R columns are the centre adjoints lambda_n = dg/d(node n's output) of g = C F; the cubic
Taylor model built on these forms is block/taylor_model.py.

Rounding model: every float64 operation errs by at most u = 2^-53 relatively (Higham's gamma_k for chains);
exp, erf, tanh and rsqrt of numpy/torch err by at most `FN_ULPS` units of u (an assumption about the math
library, documented); every derived bound is a sum of nonnegative float terms and is raised by `inflate`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attncert.block.map import DTYPE, EXP, GELU_TANH, RECIPROCAL, RSQRT, SQUARE, ScalarCurve
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

U = UNIT_ROUNDOFF
FN_ULPS = 16.0          # elementary functions and the short formulas of phi, phi', phi'' (16 u, generous)
INFLATE = 1e-9          # relative raise of every float sum of nonnegative terms (gamma_k for k <= 10^6 is 1.1e-10)


def inflate(x: torch.Tensor) -> torch.Tensor:
    """A float >= x in real arithmetic when x is a float sum of at most 10^6 nonnegative rounded products."""
    return x * (1.0 + INFLATE) + 1e-300


# --------------------------------------------------------------------------------------------------
# Derivative bounds of the scalar curves over an interval
# --------------------------------------------------------------------------------------------------
def _gelu_erf_d3(z):
    p = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return p * (z ** 3 - 4.0 * z)


def _autograd_d3(d2):
    """z -> d/dz d2(z) elementwise (differentiable again when z requires grad)."""
    def d3(z):
        nested = z.requires_grad
        with torch.enable_grad():
            x = z if nested else z.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(d2(x).sum(), x, create_graph=nested)
        return g if nested else g.detach()
    return d3


def _global_sup(fn, lo=-40.0, hi=40.0, n=400001, safety=1.25) -> float:
    """sup |fn| on a fine grid, times a safety factor (fn smooth with bounded next derivative, decaying tails)."""
    z = torch.linspace(lo, hi, n, dtype=DTYPE)
    return float(fn(z).abs().max()) * safety


_GELU_D3 = {"gelu": _gelu_erf_d3, "gelu_tanh": _autograd_d3(GELU_TANH.d2)}
_GELU_SUP = {}


def _gelu_sups(name: str) -> tuple[float, float]:
    """(K3, K4): bounds on sup |phi'''| and sup |phi''''| over the real line."""
    if name not in _GELU_SUP:
        d3 = _GELU_D3[name]
        _GELU_SUP[name] = (_global_sup(d3), _global_sup(_autograd_d3(d3)))
    return _GELU_SUP[name]


def curve_bounds(curve: ScalarCurve, c: torch.Tensor, w: torch.Tensor):
    """(M2, M3): bounds on sup |phi''| and sup |phi'''| over [c - w, c + w] (elementwise; w >= 0)."""
    lo, hi = c - w, c + w
    if curve is SQUARE:
        return torch.full_like(w, 2.0), torch.zeros_like(w)
    if curve is EXP:
        top = inflate(torch.exp(hi) * (1.0 + FN_ULPS * U))
        return top, top
    if curve is RSQRT or curve is RECIPROCAL:
        low = lo * (1.0 - 4 * U)
        pos = low > 0
        safe = torch.where(pos, low, torch.ones_like(low))
        if curve is RSQRT:
            m2, m3 = 0.75 * safe ** -2.5, 1.875 * safe ** -3.5
        else:
            m2, m3 = 2.0 / safe ** 3, 6.0 / safe ** 4
        inf = torch.full_like(w, math.inf)
        return (torch.where(pos, inflate(m2 * (1 + FN_ULPS * U)), inf),
                torch.where(pos, inflate(m3 * (1 + FN_ULPS * U)), inf))
    if curve.name in _GELU_D3:
        k3, k4 = _gelu_sups(curve.name)
        m2 = curve.d2(c).abs() * (1 + FN_ULPS * U) + k3 * w
        m3 = _GELU_D3[curve.name](c).abs() * (1 + FN_ULPS * U) + k4 * w
        return inflate(m2) + 1e-300, inflate(m3) + 1e-300
    raise ValueError(f"no derivative bounds for curve {curve.name!r}")


def range_bounds(curve: ScalarCurve, c: torch.Tensor, w: torch.Tensor, floor: float | None):
    """curve_bounds over [c - w, c + w], clipped below at `floor` (the true input never lies below it;
    the centre c, a float, lies above floor (1 - 1e-9))."""
    if floor is None:
        return curve_bounds(curve, c.expand_as(w), w)
    f = floor * (1.0 - 1e-9)
    if bool((c < f).any()):
        raise ValueError(f"{curve.name}: a centre lies below the domain floor {floor}")
    lo = torch.clamp(c - w, min=f)
    hi = torch.maximum(c + w, lo)
    return curve_bounds(curve, 0.5 * (lo + hi), inflate(0.5 * (hi - lo)))


CONVEX_CURVES = (EXP, RECIPROCAL, RSQRT)     # phi'' > 0 and phi'''' > 0 on the domain


def _signed_d3(curve: ScalarCurve, c: torch.Tensor) -> torch.Tensor:
    if curve is EXP:
        return torch.exp(c)
    return -1.875 * c ** -3.5 if curve is RSQRT else -6.0 / c ** 4


def _end_points(curve: ScalarCurve, c: torch.Tensor, w: torch.Tensor, floor: float | None):
    """(c, lo, hi, bad): float end points lo <= c - w and hi >= c + w (lo clipped at `floor`); bad where lo <= 0 for a
    curve with a singularity at 0 (lo replaced by c there, the result is set to +inf)."""
    c, w = torch.broadcast_tensors(c, w)
    pad = 4 * U * (c.abs() + w)
    lo, hi = c - w - pad, c + w + pad
    if floor is not None:
        lo = torch.maximum(lo, torch.full_like(lo, floor * (1.0 - 1e-9)))
    bad = ~(lo > 0) if curve is not EXP else torch.zeros_like(lo, dtype=torch.bool)
    return c, torch.where(bad, c, lo), hi, bad


def taylor_excess_at_ends(curve: ScalarCurve, c: torch.Tensor, w: torch.Tensor, floor: float | None, order: int):
    """sup |phi(z) - T(z)| over z in [c - w, c + w] (clipped below at `floor`) for exp, 1/z and z^(-1/2), T phi's
    Taylor polynomial of order k = 1 or 3 at c; None for the other curves.

    These three have phi'' > 0 and phi'''' > 0 on their domain, so E(z) = phi(z) - T(z) = phi^(k+1)(zeta)
    (z - c)^(k+1) / (k+1)! is nonnegative and grows away from c on each side (E'(z) has the sign of z - c): its
    sup over the interval is max(E(lo), E(hi)), evaluated at float end points lo <= c - w, hi >= c + w and raised
    by the evaluation's rounding ((FN_ULPS + 12) u of the sum of the terms' magnitudes). Near the domain's end
    this is far below (M2 / 2) w^2 or (M4 / 24) w^4 with M taken at the interval's left end; +inf where lo <= 0."""
    if not any(curve is k for k in CONVEX_CURVES):
        return None
    c, lo, hi, bad = _end_points(curve, c, w, floor)
    fc, d1, d2, d3 = curve.f(c), curve.d1(c), curve.d2(c), _signed_d3(curve, c)
    worst = torch.zeros_like(c)
    for x in (lo, hi):
        D = x - c
        terms = [curve.f(x), -fc, -d1 * D]
        if order == 3:
            terms += [-0.5 * d2 * D * D, -(d3 / 6.0) * D * D * D]
        value = sum(terms)
        err = (FN_ULPS + 12) * U * sum(t.abs() for t in terms)
        worst = torch.maximum(worst, value + err)
    worst = inflate(worst)
    return torch.where(bad | ~torch.isfinite(worst), torch.full_like(worst, math.inf), worst)


def slope_change_at_ends(curve: ScalarCurve, c: torch.Tensor, w: torch.Tensor, floor: float | None):
    """sup |phi'(z) - phi'(c)| over [c - w, c + w] (clipped at `floor`) for the convex exp, 1/z and z^(-1/2) (phi'
    increases, so the sup is at an end point), raised by its rounding; None for the other curves."""
    if not any(curve is k for k in CONVEX_CURVES):
        return None
    c, lo, hi, bad = _end_points(curve, c, w, floor)
    d1c, d1lo, d1hi = curve.d1(c), curve.d1(lo), curve.d1(hi)
    value = torch.maximum(d1c - d1lo, d1hi - d1c)
    out = inflate(value + (FN_ULPS + 4) * U * (2 * d1c.abs() + d1lo.abs() + d1hi.abs()))
    return torch.where(bad | ~torch.isfinite(out), torch.full_like(out, math.inf), out)


# --------------------------------------------------------------------------------------------------
# The graph of affine enclosures: one noise symbol per scalar nonlinear node
# --------------------------------------------------------------------------------------------------
@dataclass
class Var:
    """One intermediate vector v(xi) = c + J xi + R nu + err over ||xi||_inf <= rho.

    nu_n is the linearization error of node n (|nu_n| <= eps_n(rho)); R (N, n_nodes so far) the float
    coefficients of the centre-linearized graph; |err| <= cerr + jerr max(rho, max eps) (rounding of c, J, R),
    and also <= cerr + jerrJ rho + jerr max eps (jerrJ: the rounding of J's rows alone, l1).
    e (B, N) and a (B, N) are the value and Jacobian remainders of the module docstring."""

    c: torch.Tensor
    J: torch.Tensor
    R: torch.Tensor
    cerr: torch.Tensor
    jerr: torch.Tensor
    e: torch.Tensor = None
    a: torch.Tensor = None
    index: int = -1
    floor: float | None = None         # a known lower bound of every entry (rsqrt and reciprocal inputs)
    s: torch.Tensor = None             # (N,) ||J||_1 per entry (rounded up)
    rowabs: torch.Tensor = None        # (N,) ||[J R]||_1 per entry
    jerrJ: torch.Tensor = None         # (N,) bound on the l1 rounding error of J's row alone (<= jerr)


@dataclass
class Op:
    kind: str                          # 'linear' | 'unary' | 'product'
    out: int
    inputs: list                       # var indices
    cols: tuple = (0, 0)               # the node's noise columns
    curve: ScalarCurve | None = None


def pad_columns(R: torch.Tensor, n: int) -> torch.Tensor:
    """R with zero columns appended up to n (the noise symbols of nodes created after R's variable)."""
    return R if R.shape[1] == n else torch.cat([R, torch.zeros(R.shape[0], n - R.shape[1], dtype=DTYPE)], 1)


class Graph:
    """Affine enclosures over the radii rho (B,); records the ops (the Taylor model walks them again)."""

    def __init__(self, d: int, rho: torch.Tensor):
        self.d, self.rho = d, rho.to(DTYPE)
        self.B = rho.shape[0]
        self.vars: list[Var] = []
        self.ops: list[Op] = []
        self.eps = torch.zeros(self.B, 0, dtype=DTYPE)     # value noise bounds (B, n_nodes)
        self.beta = torch.zeros(self.B, 0, dtype=DTYPE)    # derivative noise bounds (B, n_nodes)
        self.softmax_shift: torch.Tensor | None = None      # (H, d) set by block_graph (block/certificate.py)
        self.bilinear_groups: list = []    # (query-key product var index, heads, head width) per score product

    @property
    def n_nodes(self) -> int:
        return self.eps.shape[1]

    def centre_adjoints(self, out: Var) -> dict:
        """Per nonlinear op (by its output var index): lambda (m, N) = d out / d(node output) at the centre, the
        output's R columns."""
        R = pad_columns(out.R, self.n_nodes)
        return {op.out: R[:, op.cols[0]:op.cols[1]] for op in self.ops if op.kind != "linear"}

    def _finish(self, v: Var) -> Var:
        v.s = inflate(v.J.abs().sum(-1))
        absR = v.R.abs()
        v.rowabs = inflate(v.s + absR.sum(-1))
        emax = torch.maximum(self.rho, self.eps.amax(-1) if self.n_nodes else torch.zeros_like(self.rho))
        bmax = torch.clamp(self.beta.amax(-1) if self.n_nodes else torch.zeros_like(self.rho), min=1.0)
        n = v.R.shape[1]
        v.e = inflate(self.eps[:, :n] @ absR.T + v.cerr + v.jerr * emax.unsqueeze(1))
        v.a = inflate(self.beta[:, :n] @ absR.T + v.jerr * bmax.unsqueeze(1))
        v.index = len(self.vars)
        self.vars.append(v)
        return v

    def width(self, v: Var) -> torch.Tensor:      # (B, N) range half-width
        return inflate(v.s.unsqueeze(0) * self.rho.unsqueeze(1) + v.e)

    def zerr(self, v: Var) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N) bounds on the rounding parts of v's value and Jacobian remainders."""
        emax = torch.maximum(self.rho, self.eps.amax(-1) if self.n_nodes else torch.zeros_like(self.rho))
        bmax = torch.clamp(self.beta.amax(-1) if self.n_nodes else torch.zeros_like(self.rho), min=1.0)
        return (inflate(v.cerr + v.jerr * emax.unsqueeze(1)), inflate(v.jerr * bmax.unsqueeze(1)))

    def input(self, x0: torch.Tensor) -> Var:
        N = x0.shape[0]
        z = torch.zeros(N, dtype=DTYPE)
        return self._finish(Var(x0.clone(), torch.eye(N, dtype=DTYPE), torch.zeros(N, self.n_nodes, dtype=DTYPE),
                                z, z.clone(), jerrJ=z.clone()))

    def linear(self, terms: list, bias=None) -> Var:
        """sum_i v_i W_i + bias (W_i (N_i, N_out))."""
        n = self.n_nodes
        g = gamma(sum(W.shape[0] for _, W in terms) + 2)
        c = sum(v.c @ W for v, W in terms)
        J = sum(W.T @ v.J for v, W in terms)
        R = sum(W.T @ pad_columns(v.R, n) for v, W in terms)
        absc = sum(v.c.abs() @ W.abs() for v, W in terms)
        if bias is not None:
            c = c + bias
            absc = absc + bias.abs()
        cerr = inflate(sum(v.cerr @ W.abs() for v, W in terms) + g * absc)
        jerr = inflate(sum((v.jerr + g * v.rowabs) @ W.abs() for v, W in terms))
        jerrJ = inflate(sum((v.jerrJ + g * v.s) @ W.abs() for v, W in terms))
        out = self._finish(Var(c, J, R, cerr, jerr, jerrJ=jerrJ))
        self.ops.append(Op("linear", out.index, [v.index for v, _ in terms]))
        return out

    def _node(self, c, J, R_old, jerr, jerrJ, eps, beta, kind, inputs, curve=None) -> Var:
        N = c.shape[0]
        n0 = self.n_nodes
        self.eps = torch.cat([self.eps, inflate(eps)], 1)
        self.beta = torch.cat([self.beta, inflate(beta)], 1)
        R = torch.cat([pad_columns(R_old, n0), torch.eye(N, dtype=DTYPE)], 1)
        out = self._finish(Var(c, J, R, torch.zeros(N, dtype=DTYPE), inflate(jerr), jerrJ=inflate(jerrJ)))
        self.ops.append(Op(kind, out.index, inputs, (n0, n0 + N), curve))
        return out

    def unary(self, z: Var, curve: ScalarCurve, floor: float | None = None) -> Var:
        z.floor = floor
        w = self.width(z)
        M2, _ = range_bounds(curve, z.c, w, floor)
        d1 = curve.d1(z.c)
        c = curve.f(z.c)
        ad1 = d1.abs()
        ze, za = self.zerr(z)
        lin, slope = 0.5 * M2 * w * w, M2 * w      # |phi(z) - phi(c) - phi'(c)(z - c)|, |phi'(z) - phi'(c)|
        ends = taylor_excess_at_ends(curve, z.c, w, floor, 1)
        if ends is not None:
            lin = torch.minimum(lin, ends)
            slope = torch.minimum(slope, slope_change_at_ends(curve, z.c, w, floor))
        eps = lin + ad1 * ze + FN_ULPS * U * c.abs()
        beta = ad1 * za + slope * (z.s + z.a)
        jerr = ad1 * z.jerr + (FN_ULPS + 2) * U * ad1 * z.rowabs
        jerrJ = ad1 * z.jerrJ + (FN_ULPS + 2) * U * ad1 * z.s
        return self._node(c, d1.unsqueeze(-1) * z.J, d1.unsqueeze(-1) * z.R, jerr, jerrJ, eps, beta, "unary", [z.index],
                          curve)

    def product(self, x: Var, y: Var) -> Var:
        n = self.n_nodes
        wx, wy = self.width(x), self.width(y)
        xe, xa = self.zerr(x)
        ye, ya = self.zerr(y)
        c = x.c * y.c
        acx, acy = x.c.abs(), y.c.abs()
        J = y.c.unsqueeze(-1) * x.J + x.c.unsqueeze(-1) * y.J
        R = y.c.unsqueeze(-1) * pad_columns(x.R, n) + x.c.unsqueeze(-1) * pad_columns(y.R, n)
        eps = wx * wy + acy * xe + acx * ye + U * c.abs()
        beta = acy * xa + acx * ya + (x.s + x.a) * wy + wx * (y.s + y.a)
        jerr = acy * x.jerr + acx * y.jerr + 3 * U * (acy * x.rowabs + acx * y.rowabs)
        jerrJ = acy * x.jerrJ + acx * y.jerrJ + 3 * U * (acy * x.s + acx * y.s)
        return self._node(c, J, R, jerr, jerrJ, eps, beta, "product", [x.index, y.index])
