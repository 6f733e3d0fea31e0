"""CROWN upper bound on the block residual f(delta) = g(delta) - g(0) - grad g(0) . delta.

The network is F of `block_map.py` written as a `bound_propagation` module tree on the input
x = delta in R^d (float64), followed by the specification rows C and the folded linear term:

    f = C F(x0 + delta e_i) - g(0) - G delta,      G = grad g(0) (m, d)

Because the tree library has no DAG, each stage carries the values later stages need ("the state")
through a linear branch of a `Parallel` (exact: CROWN back-substitution through Parallel sums the
branch contributions, which is DAG CROWN). Stages (GPT-2; BERT drops LN_in, feeds the heads with
x directly and uses h = LN_attn(y) as the MLP residual):

    [delta]                          LN_in stage A: c = P x, r = rsqrt(mean(c^2) + eps)   -> [delta, c, r]
                                     LN_in stage B: n = c * r (products)                  -> [delta, n1]
    qk:     p = q * k_i                                                                    -> [delta, n1, p]
    exp:    E_jk = exp(s_k - s_j)    (s linear in n1 and p)                                -> [delta, n1, E]
    recip:  a_j = 1 / (1 + sum_k E_jk)                                                     -> [delta, n1, a]
    av:     pv = a_i * v_i                                                                 -> [delta, a, pv]
    y = x + attention output (linear in the state); LN_attn on y (two stages)             -> [y, n2]
    gelu:   m = GELU(LN_attn(y) W_1 + b_1)                                                 -> [y, m]
    LN_out on y2 = y + m W_2 + b_2 (two stages)                                            -> [n3]
    out:    C (gamma n3 + beta)

Relaxations (all sound on the interval of the node's input; CROWN defaults, as in
`attncert.baselines`): exp and 1/x - secant above, tangent at the midpoint below (library modules
registered in `head_factory`); products - McCormick planes mixed with kappa = 1/2; square, rsqrt and
GELU - `BoundScalarCurve`: on an interval where phi is convex, upper = secant and lower = tangent at
the midpoint (concave: mirrored); across an inflection point both slopes are the secant slope; in
every case the intercepts are the exact max / min of phi(z) - s z over [l, u], found at the end points
and the roots of phi'(z) = s on the pieces where phi' is monotone (bisection), then rounded outward.
IBP of these modules is the exact range (end points and stationary points).

The returned bound is raised by an estimated rounding margin (1e-12 (1 + |g(0)|) + 1e-9 |bound|): all
arithmetic is float64; the margin is not a rigorous interval-arithmetic proof.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from bound_propagation import Exp, FixedLinear, HyperRectangle, Parallel

from attncert.baselines.op_bilinear import BilinearProduct
from attncert.baselines.op_convex import PositiveReciprocal
from attncert.block.map import DTYPE, RSQRT, SQUARE, BlockTransition
from attncert.block.crown_modules import (BroadcastProduct, ColumnSparseLinear, GroupSums, PairDifferences,
                                         ScalarCurveModule, block_factory)

ROUNDING_ABS = 1e-12
ROUNDING_REL = 1e-9


# --------------------------------------------------------------------------------------------------
# Affine expressions of named state blocks
# --------------------------------------------------------------------------------------------------
class Affine:
    """out = sum_name M[name] @ state[name] + bias (column orientation), float64 numpy."""

    def __init__(self, terms: dict, bias, pure: list | None = None):
        self.terms = {k: np.asarray(v, dtype=np.float64) for k, v in terms.items()}
        self.bias = np.asarray(bias, dtype=np.float64)
        self.pure = pure   # [names] when the expression is the concatenation of whole state blocks

    @property
    def size(self) -> int:
        return self.bias.shape[0]

    def left(self, A) -> "Affine":
        A = np.asarray(A, dtype=np.float64)
        return Affine({k: A @ v for k, v in self.terms.items()}, A @ self.bias)

    def __add__(self, other: "Affine") -> "Affine":
        terms = dict(self.terms)
        for k, v in other.terms.items():
            terms[k] = terms[k] + v if k in terms else v
        return Affine(terms, self.bias + other.bias)

    def shift(self, b) -> "Affine":
        return Affine(self.terms, self.bias + np.asarray(b, dtype=np.float64))

    @staticmethod
    def stack(parts: list) -> "Affine":
        names = []
        for p in parts:
            names += [k for k in p.terms if k not in names]
        terms = {}
        for k in names:
            width = next(p.terms[k].shape[1] for p in parts if k in p.terms)
            terms[k] = np.concatenate([p.terms[k] if k in p.terms else np.zeros((p.size, width)) for p in parts])
        pure = None
        if all(p.pure for p in parts):
            pure = [n for p in parts for n in p.pure]
            pure = pure if len(set(pure)) == len(pure) else None
        return Affine(terms, np.concatenate([p.bias for p in parts]), pure)

    @staticmethod
    def block(name: str, size: int) -> "Affine":
        return Affine({name: np.eye(size)}, np.zeros(size), pure=[name])

    def matrix(self, layout: list) -> tuple[np.ndarray, np.ndarray]:
        """(W, b) over a state layout [(name, size), ...]; every term must be in the layout."""
        missing = set(self.terms) - {n for n, _ in layout}
        if missing:
            raise KeyError(f"state lacks {sorted(missing)}")
        cols = [self.terms.get(n, np.zeros((self.size, s))) for n, s in layout]
        return np.concatenate(cols, axis=1), self.bias


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE)


def _linear(W, b=None) -> FixedLinear:
    return FixedLinear(_t(W), None if b is None else _t(b))


def _state_linear(expr: Affine, layout: list) -> nn.Module:
    """The linear map expr of the state; reads only the state blocks expr uses (a pure selection when
    expr is a concatenation of whole blocks)."""
    offsets, start = {}, 0
    for name, size in layout:
        offsets[name] = (start, start + size)
        start += size
    missing = set(expr.terms) - set(offsets)
    if missing:
        raise KeyError(f"state lacks {sorted(missing)}")
    if expr.pure is not None:
        return ColumnSparseLinear(None, [offsets[n] for n in expr.pure], start, None)
    names = [n for n, _ in layout if n in expr.terms]
    if len(names) == len(layout):
        return _linear(*expr.matrix(layout))
    sub = np.concatenate([expr.terms[n] for n in names], axis=1)
    bias = _t(expr.bias) if np.any(expr.bias) else None
    return ColumnSparseLinear(_t(sub), [offsets[n] for n in names], start, bias)


class _Builder:
    """Accumulates stages; each stage maps the state to [kept linear outputs..., op outputs...]."""

    def __init__(self, d: int):
        self.layout = [("delta", d)]
        self.stages = []

    def stage(self, keep: dict, ops: list) -> None:
        """keep: name -> Affine (linear outputs carried on); ops: (name, size, [modules applied to the state])."""
        branches, layout = [], []
        if keep:
            names = list(keep)
            branches.append(_state_linear(Affine.stack([keep[n] for n in names]), self.layout))
            layout += [(n, keep[n].size) for n in names]
        for name, size, modules in ops:
            branches.append(nn.Sequential(*modules))
            layout.append((name, size))
        self.stages.append(Parallel(*branches))
        self.layout = layout

    def linear(self, expr: Affine) -> nn.Module:
        return _state_linear(expr, self.layout)


def _layer_norm(bld: _Builder, y: Affine, ln, name: str, keep: dict) -> Affine:
    """Two stages: [keep, c, r] then [keep, n]; returns gamma * n + beta as an Affine of the state."""
    d = y.size
    P = np.eye(d) - np.full((d, d), 1.0 / d)
    c = y.left(P)
    mean = np.full((1, d), 1.0 / d)
    bld.stage({**keep, f"{name}.c": c},
              [(f"{name}.r", 1, [bld.linear(c), ScalarCurveModule(SQUARE), _linear(mean, np.array([ln.eps])),
                                 ScalarCurveModule(RSQRT, floor=ln.eps)])])
    pair = Affine.stack([Affine.block(f"{name}.c", d), Affine.block(f"{name}.r", 1)])
    kept = {k: Affine.block(k, v.size) for k, v in keep.items()}
    bld.stage(kept, [(f"{name}.n", d, [bld.linear(pair), BroadcastProduct(1, d)])])
    g = ln.gain.numpy()
    return Affine({f"{name}.n": np.diag(g)}, ln.bias.numpy())


def block_network(tr: BlockTransition, C: np.ndarray) -> nn.Sequential:
    """delta (d) -> C F(x0 + delta e_i) (m) as a bound_propagation module tree."""
    d, H, dh = tr.d, tr.n_heads, tr.d_head
    n, iq = len(tr.keys), tr.query_index
    bld = _Builder(d)
    delta = Affine.block("delta", d)
    x = delta.shift(tr.x0[tr.position].numpy())
    if tr.ln_in is not None:
        u = _layer_norm(bld, x, tr.ln_in, "ln_in", {"delta": delta})
        base = {"delta": Affine.block("delta", d), "ln_in.n": Affine.block("ln_in.n", d)}
    else:
        u = x
        base = {"delta": Affine.block("delta", d)}
    WQ, WK, WV = tr.W_Q.numpy(), tr.W_K.numpy(), tr.W_V.numpy()
    q = u.left(WQ.T).shift(tr.b_Q.numpy())
    k = u.left(WK.T).shift(tr.b_K.numpy())
    v = u.left(WV.T).shift(tr.b_V.numpy())
    # qk products
    bld.stage(base, [("p", d, [bld.linear(Affine.stack([q, k])), BilinearProduct()])])
    keep = {name: Affine.block(name, e.size) for name, e in base.items()}
    # scores s (H n): s_j = q^h . K0_j^h / sqrt(dh) for j != i, s_i = sum_e p^h_e / sqrt(dh)
    K0 = tr.K0.numpy()                                            # (n, H, dh)
    S_q = np.zeros((H * n, d))
    S_p = np.zeros((H * n, d))
    for h in range(H):
        cols = slice(h * dh, (h + 1) * dh)
        for j in range(n):
            if j == iq:
                S_p[h * n + j, cols] = 1.0 / np.sqrt(dh)
            else:
                S_q[h * n + j, cols] = K0[j, h] / np.sqrt(dh)
    s = q.left(S_q) + Affine({"p": S_p}, np.zeros(H * n))
    # differences t_jk = s_k - s_j, (h, j, k != j) row-major; E_jk = exp(t_jk)
    n_exp = H * n * (n - 1)
    bld.stage(keep, [("E", n_exp, [bld.linear(s), PairDifferences(H, n), Exp()])])
    # D_j = 1 + sum_{k != j} E_jk, a_j = 1 / D_j
    bld.stage(keep, [("a", H * n, [bld.linear(Affine.block("E", n_exp)), GroupSums(n - 1, 1.0), PositiveReciprocal()])])
    # pv = a_i^h * v_i^h (per head, a_i^h broadcast over d_h)
    select = np.zeros((H, H * n))
    for h in range(H):
        select[h, h * n + iq] = 1.0
    pair = Affine.stack([v, Affine({"a": select}, np.zeros(H))])
    bld.stage({"delta": Affine.block("delta", d), "a": Affine.block("a", H * n)},
              [("pv", d, [bld.linear(pair), BroadcastProduct(H, dh)])])
    V0 = tr.V0.numpy()                                            # (n, H, dh)
    A_fixed = np.zeros((d, H * n))                                # o_fixed = sum_{j != i} a_j V0_j
    for h in range(H):
        for j in range(n):
            if j != iq:
                A_fixed[h * dh:(h + 1) * dh, h * n + j] = V0[j, h]
    WO = tr.W_O.numpy().T
    o = Affine({"a": A_fixed, "pv": np.eye(d)}, np.zeros(d))
    y = x + o.left(WO).shift(tr.b_O.numpy())
    if tr.family == "gpt2":
        h_ln = _layer_norm(bld, y, tr.ln_attn, "ln_attn", {"y": y})
        resid = Affine.block("y", d)
        carry = {"y": Affine.block("y", d)}
    else:
        h_ln = _layer_norm(bld, y, tr.ln_attn, "ln_attn", {})
        resid = h_ln
        carry = {"ln_attn.n": Affine.block("ln_attn.n", d)}
    pre = h_ln.left(tr.W_1.numpy().T).shift(tr.b_1.numpy())
    width = pre.size
    bld.stage(carry, [("m", width, [bld.linear(pre), ScalarCurveModule(tr.activation)])])
    y2 = resid + Affine({"m": tr.W_2.numpy().T}, tr.b_2.numpy())
    z = _layer_norm(bld, y2, tr.ln_out, "ln_out", {})
    out = z.left(np.asarray(C, dtype=np.float64))
    return nn.Sequential(*bld.stages, bld.linear(out))


def residual_network(tr: BlockTransition, C: np.ndarray, g0: np.ndarray, G: np.ndarray) -> nn.Sequential:
    """delta -> f = C F(x0 + delta e_i) - g0 - G delta (m outputs)."""
    m = C.shape[0]
    G = np.asarray(G, dtype=np.float64)
    lin = _linear(-G, -np.asarray(g0, dtype=np.float64))
    combine = np.concatenate([np.eye(m), np.eye(m)], axis=1)
    return nn.Sequential(Parallel(block_network(tr, C), lin), _linear(combine))


@torch.no_grad()
def crown_bounds(tr: BlockTransition, C, g0, G, radii) -> tuple[np.ndarray, np.ndarray]:
    """Sound (up to the stated rounding margin) CROWN bounds (upper, lower) on f over ||delta||_inf <= r.

    One pass: the intermediate bounds are shared, the output's lower bound costs one more backward step.
    Returns two (len(radii), m) arrays."""
    net = residual_network(tr, np.asarray(C), np.asarray(g0), np.asarray(G))
    bnet = block_factory().build(net)
    r = torch.as_tensor(np.asarray(radii, dtype=np.float64), dtype=DTYPE)
    half = r[:, None].expand(len(r), tr.d)
    region = HyperRectangle(-half, half)
    b = bnet.crown(region, bound_lower=True, bound_upper=True).concretize()
    upper, lower = b.upper.numpy(), b.lower.numpy()
    base = ROUNDING_ABS * (1.0 + np.abs(np.asarray(g0)))[None, :]
    return upper + base + ROUNDING_REL * np.abs(upper), lower - base - ROUNDING_REL * np.abs(lower)


def crown_upper(tr: BlockTransition, C, g0, G, radii) -> np.ndarray:
    """CROWN upper bounds on max f over ||delta||_inf <= r (`crown_bounds`' first array), (len(radii), m)."""
    return crown_bounds(tr, C, g0, G, radii)[0]


def alpha_crown_upper_block(tr: BlockTransition, C, g0, G, radii, iterations: int = 30,
                            optimize_intermediate: bool = False) -> np.ndarray:
    """alpha-CROWN upper bounds on max f (len(radii), m): `baselines.linear_bound_baselines.alpha_crown_upper`
    on the same network as `crown_upper`, one radius at a time, Adam lr 0.1, at most `iterations` steps per
    stage with its convergence test; optimize_intermediate=False optimizes the output's backward pass only
    (CROWN's intermediate bounds, set by `crown_relax`: the stages without steps would set the same ones, see
    `baselines.shared_relaxations`). Same rounding margin as CROWN (an estimate, not a proof)."""
    from attncert.baselines.linear_bound_baselines import alpha_crown_upper

    net = residual_network(tr, np.asarray(C), np.asarray(g0), np.asarray(G))
    out = []
    for r in np.asarray(radii, dtype=np.float64):
        bnet = block_factory().build(net)
        half = torch.full((1, tr.d), float(r), dtype=DTYPE)
        region = HyperRectangle(-half, half)
        if not optimize_intermediate:
            with torch.no_grad():
                bnet.propagate_size(tr.d)
                bnet.crown_relax(region)
        up = alpha_crown_upper(bnet, region, np.asarray(C).shape[0], iterations=iterations,
                               optimize_intermediate=optimize_intermediate, relaxed=not optimize_intermediate)
        out.append(up.detach().reshape(-1).numpy())
    upper = np.stack(out)
    margin = ROUNDING_ABS * (1.0 + np.abs(np.asarray(g0)))[None, :] + ROUNDING_REL * np.abs(upper)
    return upper + margin
