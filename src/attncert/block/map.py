"""The block map F: residual stream entering block l -> the normalized token a head of block l+1 reads.

Notation (row vectors, float64). x0 in R^{T x d} is the residual stream entering block l for one
prompt; i is the query position; only token i is perturbed, x_i = x0_i + delta (delta in R^d, see
docs/block_residual.md for why). Every other token keeps its nominal value, so its key and value are
constants. The attended positions are J = {0..i} for GPT-2 (causal) and J = {0..T-1} for BERT.

GPT-2 (pre-LN), block l followed by ln_1 of block l+1:

    u   = LN_in(x_i)                      ln_1 of block l (what the heads of block l read)
    q   = u W_Q + b_Q,  k_i = u W_K + b_K,  v_i = u W_V + b_V     (all heads; k_j, v_j fixed for j != i)
    y   = x_i + Attn(q, k_i, v_i) W_O + b_O
    y2  = y + GELU(LN_attn(y) W_1 + b_1) W_2 + b_2                 LN_attn = ln_2 of block l
    F   = LN_out(y2)                                               LN_out  = ln_1 of block l+1

BERT (post-LN), layer l; its input x is already a normalized token (the heads of layer l read it):

    q, k_i, v_i from x_i directly;  y = x_i + Attn(...) W_O + b_O
    h   = LN_attn(y)                                               attention.output.LayerNorm
    F   = LN_out(h + GELU(h W_1 + b_1) W_2 + b_2)                  output.LayerNorm (= input of layer l+1)

Per head (scores scaled by 1/sqrt(d_h)): s_j = q . k_j / sqrt(d_h), j in J, and the softmax is built
exactly as the CROWN network builds it (bound_propagation_head.py):

    t_jk = s_k - s_j (j != k),  E_jk = exp(t_jk),  D_j = 1 + sum_{k != j} E_jk,  a_j = 1 / D_j
    o    = sum_{j != i} a_j v_j + a_i * v_i

LayerNorm as primitives: c = x - mean(x), sq = c^2, r = (mean(sq) + eps)^(-1/2), out = gamma * (c r) + beta.

The *scalar nonlinear nodes* of F (what a linear bound propagator relaxes one at a time) are:
squares and the reciprocal square root of every LayerNorm, its products c_k r, the products
q_e k_{i,e} of the query with the perturbed key, the exps E_jk, the reciprocals a_j, the products
a_i v_{i,e}, and the GELU neurons. `forward` evaluates F for a batch of perturbations and, through a
`Tape`, exposes the inputs of every node group (and lets a perturbation eps be added to each node's
output, so autograd gives the adjoint dg/d(node output)); `block_residual.py` builds the Hessian and
the per-operation terms from them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


DTYPE = torch.float64
_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_K = math.sqrt(2.0 / math.pi)
_TANH_A = 0.044715


# --------------------------------------------------------------------------------------------------
# Scalar primitives: value, first and second derivative, inflection and stationary points
# --------------------------------------------------------------------------------------------------
def _bisect_roots(fn, lo: float, hi: float, grid: int = 20001) -> tuple[float, ...]:
    """All sign changes of a smooth scalar fn on [lo, hi] (fine grid, then 200 bisection steps)."""
    x = torch.linspace(lo, hi, grid, dtype=DTYPE)
    y = fn(x)
    idx = torch.nonzero(torch.sign(y[:-1]) * torch.sign(y[1:]) < 0).flatten().tolist()
    roots = []
    for k in idx:
        a, b = x[k].clone(), x[k + 1].clone()
        fa = fn(a)
        for _ in range(200):
            m = 0.5 * (a + b)
            fm = fn(m)
            if torch.sign(fm) == torch.sign(fa):
                a, fa = m, fm
            else:
                b = m
        roots.append(float(0.5 * (a + b)))
    return tuple(roots)


@dataclass(frozen=True)
class ScalarCurve:
    """A scalar C^2 function phi with phi', phi''.

    inflections: the points where phi'' changes sign (phi' is monotone between consecutive ones);
    stationary: the points where phi' changes sign (phi is monotone between them);
    domain_lower: phi is defined for z > domain_lower (None: everywhere).
    """

    name: str
    f: callable
    d1: callable
    d2: callable
    inflections: tuple = ()
    stationary: tuple = ()
    domain_lower: float | None = None


def _gelu_erf(z):
    return z * 0.5 * (1.0 + torch.erf(z / _SQRT2))


def _gelu_erf_d1(z):
    return 0.5 * (1.0 + torch.erf(z / _SQRT2)) + z * _INV_SQRT_2PI * torch.exp(-0.5 * z * z)


def _gelu_erf_d2(z):
    return _INV_SQRT_2PI * torch.exp(-0.5 * z * z) * (2.0 - z * z)


def _gelu_tanh(z):
    return 0.5 * z * (1.0 + torch.tanh(_TANH_K * (z + _TANH_A * z ** 3)))


def _gelu_tanh_d1(z):
    t = torch.tanh(_TANH_K * (z + _TANH_A * z ** 3))
    du = _TANH_K * (1.0 + 3.0 * _TANH_A * z * z)
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * du


def _gelu_tanh_curvature_sign(z):
    """phi''/(1 - t^2) for the tanh GELU: same sign as phi'', no underflow in the tails."""
    t = torch.tanh(_TANH_K * (z + _TANH_A * z ** 3))
    du = _TANH_K * (1.0 + 3.0 * _TANH_A * z * z)
    ddu = 6.0 * _TANH_K * _TANH_A * z
    return du + 0.5 * z * (ddu - 2.0 * t * du * du)


def _gelu_tanh_d2(z):
    t = torch.tanh(_TANH_K * (z + _TANH_A * z ** 3))
    return (1.0 - t * t) * _gelu_tanh_curvature_sign(z)


SQUARE = ScalarCurve("square", lambda z: z * z, lambda z: 2.0 * z, lambda z: 2.0 * torch.ones_like(z),
                     inflections=(), stationary=(0.0,))
RSQRT = ScalarCurve("rsqrt", torch.rsqrt, lambda z: -0.5 * z ** -1.5, lambda z: 0.75 * z ** -2.5,
                    domain_lower=0.0)
EXP = ScalarCurve("exp", torch.exp, torch.exp, torch.exp)
RECIPROCAL = ScalarCurve("reciprocal", lambda z: 1.0 / z, lambda z: -1.0 / (z * z), lambda z: 2.0 / z ** 3,
                         domain_lower=0.0)
GELU_ERF = ScalarCurve("gelu", _gelu_erf, _gelu_erf_d1, _gelu_erf_d2, inflections=(-_SQRT2, _SQRT2),
                       stationary=_bisect_roots(_gelu_erf_d1, -10.0, 10.0))
# GELU's tanh approximation (GPT-2's "gelu_new"); inflections are the sign changes of phi''/(1 - t^2)
# (a smooth function that tends to -inf in both tails, so no sign change lies outside [-50, 50]).
GELU_TANH = ScalarCurve("gelu_tanh", _gelu_tanh, _gelu_tanh_d1, _gelu_tanh_d2,
                        inflections=_bisect_roots(_gelu_tanh_curvature_sign, -50.0, 50.0),
                        stationary=_bisect_roots(_gelu_tanh_d1, -10.0, 10.0))
ACTIVATIONS = {"gelu": GELU_ERF, "gelu_new": GELU_TANH, "gelu_pytorch_tanh": GELU_TANH}


# --------------------------------------------------------------------------------------------------
# Node groups
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeGroup:
    """A group of scalar nonlinear nodes of F of one kind ('unary' with `curve`, or 'product')."""

    name: str
    kind: str
    category: str
    curve: ScalarCurve | None = None


def node_groups(family: str, activation: ScalarCurve) -> list[NodeGroup]:
    """The node groups of F in evaluation order (categories: layernorm, qk, exp, reciprocal, av, gelu)."""
    groups = []
    lns = ["ln_in", "ln_attn", "ln_out"] if family == "gpt2" else ["ln_attn", "ln_out"]

    def ln(name):
        return [NodeGroup(f"{name}.square", "unary", "layernorm", SQUARE),
                NodeGroup(f"{name}.rsqrt", "unary", "layernorm", RSQRT),
                NodeGroup(f"{name}.product", "product", "layernorm")]

    if "ln_in" in lns:
        groups += ln("ln_in")
    groups += [NodeGroup("attn.qk", "product", "qk"), NodeGroup("attn.exp", "unary", "exp", EXP),
               NodeGroup("attn.reciprocal", "unary", "reciprocal", RECIPROCAL), NodeGroup("attn.av", "product", "av")]
    groups += ln("ln_attn")
    groups += [NodeGroup("mlp.gelu", "unary", "gelu", activation)]
    groups += ln("ln_out")
    return groups


class Tape:
    """Records node inputs during one evaluation of F and adds `eps[name]` to node outputs.

    inputs[name] is the node input (unary: z) or the pair (x, y) (product); `captures` holds linear
    intermediates that are not nodes (the attention scores, used for the softmax-as-one-op variant).
    """

    def __init__(self, eps: dict | None = None):
        self.eps = eps or {}
        self.inputs: dict = {}
        self.captures: dict = {}

    def _out(self, name, value):
        e = self.eps.get(name)
        return value if e is None else value + e

    def unary(self, name: str, curve: ScalarCurve, z):
        self.inputs[name] = z
        return self._out(name, curve.f(z))

    def product(self, name: str, x, y):
        self.inputs[name] = (x, y)
        return self._out(name, x * y)

    def capture(self, name: str, value):
        self.captures[name] = value
        return value


# --------------------------------------------------------------------------------------------------
# The transition and its parameters
# --------------------------------------------------------------------------------------------------
@dataclass
class LayerNormParams:
    gain: torch.Tensor
    bias: torch.Tensor
    eps: float


@dataclass
class BlockTransition:
    """Everything F needs for one transition l -> l+1, one prompt and query position i."""

    family: str
    layer: int
    position: int
    x0: torch.Tensor            # (T, d) residual stream entering block l
    keys: list                  # attended positions J (contains position)
    n_heads: int
    W_Q: torch.Tensor           # (d, d) all heads, columns head-major; likewise W_K, W_V
    b_Q: torch.Tensor
    W_K: torch.Tensor
    b_K: torch.Tensor
    W_V: torch.Tensor
    b_V: torch.Tensor
    W_O: torch.Tensor           # (d, d)
    b_O: torch.Tensor
    W_1: torch.Tensor           # (d, m)
    b_1: torch.Tensor
    W_2: torch.Tensor           # (m, d)
    b_2: torch.Tensor
    ln_attn: LayerNormParams
    ln_out: LayerNormParams
    activation: ScalarCurve
    ln_in: LayerNormParams | None = None   # GPT-2 only
    # nominal keys/values of all attended positions, (n, H, d_h) each (filled by __post_init__)
    K0: torch.Tensor = field(init=False)
    V0: torch.Tensor = field(init=False)

    def __post_init__(self):
        if self.position not in self.keys:
            raise ValueError("the query position must be attended")
        xs = self.x0[self.keys]
        u = layer_norm(xs, self.ln_in) if self.ln_in is not None else xs
        n, H = len(self.keys), self.n_heads
        self.K0 = (u @ self.W_K + self.b_K).reshape(n, H, self.d_head)
        self.V0 = (u @ self.W_V + self.b_V).reshape(n, H, self.d_head)

    @property
    def d(self) -> int:
        return self.x0.shape[1]

    @property
    def d_head(self) -> int:
        return self.d // self.n_heads

    @property
    def query_index(self) -> int:
        return self.keys.index(self.position)

    @property
    def groups(self) -> list[NodeGroup]:
        return node_groups(self.family, self.activation)


def layer_norm(x, p: LayerNormParams, tape: Tape | None = None, name: str = "ln"):
    """gamma * (c r) + beta with c = x - mean(x), r = (mean(c^2) + eps)^(-1/2); nodes via `tape`."""
    c = x - x.mean(dim=-1, keepdim=True)
    if tape is None:
        r = torch.rsqrt((c * c).mean(dim=-1, keepdim=True) + p.eps)
        return p.gain * (c * r) + p.bias
    sq = tape.unary(f"{name}.square", SQUARE, c)
    r = tape.unary(f"{name}.rsqrt", RSQRT, sq.mean(dim=-1, keepdim=True) + p.eps)
    n = tape.product(f"{name}.product", c, r.expand_as(c))
    return p.gain * n + p.bias


def forward(tr: BlockTransition, delta: torch.Tensor, tape: Tape | None = None) -> torch.Tensor:
    """F(x0 + delta e_i): the normalized token at position i after the transition; delta (..., d)."""
    tape = tape if tape is not None else Tape()
    H, dh = tr.n_heads, tr.d_head
    n, iq = len(tr.keys), tr.query_index
    batch = delta.shape[:-1]
    x = tr.x0[tr.position] + delta
    u = layer_norm(x, tr.ln_in, tape, "ln_in") if tr.ln_in is not None else x
    q = u @ tr.W_Q + tr.b_Q
    k = u @ tr.W_K + tr.b_K
    v = u @ tr.W_V + tr.b_V
    qh = q.reshape(*batch, H, dh)
    scale = 1.0 / math.sqrt(dh)
    s_fixed = torch.einsum("...he,jhe->...hj", qh, tr.K0) * scale          # (..., H, n); column iq replaced
    p = tape.product("attn.qk", q, k)
    s_i = p.reshape(*batch, H, dh).sum(dim=-1) * scale                     # (..., H)
    onehot = torch.zeros(n, dtype=DTYPE)
    onehot[iq] = 1.0
    s = s_fixed * (1.0 - onehot) + s_i.unsqueeze(-1) * onehot
    tape.capture("attn.scores", s)
    off = torch.nonzero(~torch.eye(n, dtype=torch.bool).flatten()).flatten()   # the pairs (j, k != j), row-major
    t = (s.unsqueeze(-2) - s.unsqueeze(-1)).flatten(-2).index_select(-1, off)  # t_jk = s_k - s_j
    E = tape.unary("attn.exp", EXP, t.reshape(*batch, H * n * (n - 1)))
    D = 1.0 + E.reshape(*batch, H, n, n - 1).sum(dim=-1)                   # (..., H, n)
    a = tape.unary("attn.reciprocal", RECIPROCAL, D.reshape(*batch, H * n)).reshape(*batch, H, n)
    a_rest = a * (1.0 - onehot)
    o_fixed = torch.einsum("...hj,jhe->...he", a_rest, tr.V0)
    a_i = a[..., iq].unsqueeze(-1).expand(*batch, H, dh).reshape(*batch, H * dh)
    pv = tape.product("attn.av", a_i, v)
    o = o_fixed.reshape(*batch, H * dh) + pv
    y = x + o @ tr.W_O + tr.b_O
    if tr.family == "gpt2":
        h = layer_norm(y, tr.ln_attn, tape, "ln_attn")
        base = y
    else:
        h = layer_norm(y, tr.ln_attn, tape, "ln_attn")
        base = h
    m = tape.unary("mlp.gelu", tr.activation, h @ tr.W_1 + tr.b_1)
    y2 = base + m @ tr.W_2 + tr.b_2
    return layer_norm(y2, tr.ln_out, tape, "ln_out")


def specification_values(tr: BlockTransition, C: torch.Tensor, delta: torch.Tensor, tape: Tape | None = None):
    """g(delta) = C F(x0 + delta e_i) for specification rows C (m, d): shape (..., m)."""
    return forward(tr, delta, tape) @ C.T
