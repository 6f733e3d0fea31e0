"""One attention head written as a `bound_propagation` network of the token perturbation.

Input: x = (delta_1, ..., delta_n) in R^{n d}, the perturbation of the attended tokens (token-major,
flattened), float64. Output: g_o = c_o . sum_j a_j v_j for m specifications c_1..c_m (m = 1 for one
unit). Notation of `HeadProblem` (row vectors): z_j = z0_j + delta_j, q = z_i W_Q + b_Q,
k_j = z_j W_K + b_K, v_j = z_j W_V + b_V, s_j = q . k_j / sqrt(d_h), i = query_index.

Network (each line one library module; `InputLinear` reads x directly):

    fixed query   t_{jk} = s_k - s_j = (s0_k - s0_j) + u_s . delta_k - u_s . delta_j     InputLinear (n d -> n^2)
                  with u_s = W_K q0 / sqrt(d_h), s0_j = z0_j . u_s + b_K . q0 / sqrt(d_h)
    varying query [q, ..., q, k_1, ..., k_n]                                             InputLinear (n d -> 2 n d_h)
                  p_{k,h} = q_h k_{k,h}                                                  BilinearProduct (exact input)
                  t_{jk} = sum_h (p_{k,h} - p_{j,h}) / sqrt(d_h)                          FixedLinear (n d_h -> n^2)
    E_{jk} = exp(t_{jk})                                                                 Exp
    D_j = sum_k E_{jk}                     (E_{jj} = 1)                                   FixedLinear (n^2 -> n)
    a_j = 1 / D_j  =  1 / sum_k exp(s_k - s_j) = softmax(s)_j                            PositiveReciprocal
    a tiled over the m specifications                                                    FixedLinear (n -> n m)
    w_{o,j} = c_o . v_j = c_o . v0_j + (W_V c_o) . delta_j      (in parallel with the above) InputLinear (n d -> n m)
    y_{o,j} = a_j w_{o,j}                                                                BilinearProduct
    g_o = sum_j y_{o,j}                                                                  FixedLinear (n m -> m)

The softmax is built as a_j = 1 / sum_k exp(s_k - s_j): no subtraction of two bounded quantities
after the exponential, which bounds far better than exp(s_j) / sum_k exp(s_k) (SPEC, environment
facts). In the varying mode the scores are formed the way a transformer forms them (n d_h products
q_h k_{k,h}, as a matmul relaxation does) and differenced afterwards.

Custom modules (added through the library's extension mechanism: an `nn.Module` plus a `BoundModule`
registered with `BoundModelFactory.register`; the library itself is not modified):

* `InputLinear` / `BoundInputLinear`: a linear layer applied to the network input. Its IBP bounds are
  the exact range over the input set (`region.concretize` of the layer itself), so IBP under the l2
  set uses the l2 dual norm for the first layer instead of the set's bounding box. For a box this is
  what the library's IBP computes anyway. Its back-substitution works per token with duplicate rows
  merged (block sparsity of the first layers).
* `PlainLinear`: the library's `FixedLinear` (the table's FixedLinear) without `nn.Linear`'s random
  initialisation of the weight it replaces.
* `BoundPlainLinear`: the library's `BoundLinear` with the back-substitution in eager torch (the
  library's TorchScript version is ~100x slower under autograd on these small matrices).
* `BoundAlphaExp`, `BoundAlphaPositiveReciprocal`, `BoundAlphaBilinear`: the library's relaxations
  (below), re-implemented so that (1) every objective (row of the backward coefficient matrix) may
  carry its own relaxation parameters, keyed by the bound being computed: what full alpha-CROWN needs
  (`linear_bound_baselines.py`); (2) the zero-width case of the reciprocal is sound (the library's
  `BoundReciprocal` returns 1/l as the lower and 1/u as the upper bound of 1/x on [l, u] with
  u - l <= 1e-8, which is reversed; its negative branch also writes the upper intercept into the slope).

Relaxations on an input interval [l, u] (each sound for every parameter value in [0, 1]):

* exp (convex):  upper = secant  e^l + (e^u - e^l)/(u - l) (x - l);
                 lower = tangent at d = l + theta (u - l):  e^d (1 + x - d),  theta in [0, 1].
* 1/x, l > 0 (convex, decreasing): upper = secant  1/l - (x - l)/(l u);
                 lower = tangent at d = l + theta (u - l):  2/d - x/d^2.
* x y on [lx, ux] x [ly, uy] (McCormick): lower = kappa (ly x + lx y - lx ly) + (1 - kappa)(uy x + ux y - ux uy),
                 upper = kappa (uy x + lx y - lx uy) + (1 - kappa)(ly x + ux y - ux ly), kappa in [0, 1]
  (convex combinations of the two McCormick planes; each plane is valid on the box).
* width u - l <= ZERO_WIDTH: the constant bounds f(l), f(u) (resp. f(u), f(l) for 1/x).

CROWN uses theta = 1/2 and kappa = 1/2, the library's defaults.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from bound_propagation import Exp, Parallel

from attncert.baselines.op_bilinear import BilinearProduct
from attncert.baselines.op_convex import PositiveReciprocal
from attncert.baselines.op_linear import InputLinear, PlainLinear
from attncert.baselines.registry import head_factory
from attncert.baselines.relaxation_parameters import DTYPE, set_relaxation_rule
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.problem import HeadProblem


# The head as a network
# --------------------------------------------------------------------------------------------------
def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE)


def _score_difference_matrix(n: int, reference: int | None = None) -> np.ndarray:
    """Score differences as a matrix on s.

    reference None: (n^2, n) matrix M with (M s)_{jk} = s_k - s_j, row index j * n + k (our softmax);
    reference m:    (n, n) matrix M with (M s)_k = s_k - s_m (auto_LiRPA's exp(x - max) with the max
                    index fixed at m).
    """
    if reference is not None:
        M = np.eye(n)
        M[:, reference] -= 1.0
        return M
    M = np.zeros((n * n, n))
    for j in range(n):
        for k in range(n):
            if j != k:
                M[j * n + k, k] += 1.0
                M[j * n + k, j] -= 1.0
    return M


def _scores_fixed(p: HeadProblem, reference: int | None = None) -> nn.Module:
    n, d = p.n, p.d
    s0, _, u_s, _ = fixed_query_reduction(p).directions()
    S = np.zeros((n, n * d))  # s_j = s0_j + u_s . delta_j
    for j in range(n):
        S[j, j * d:(j + 1) * d] = u_s
    M = _score_difference_matrix(n, reference)
    return InputLinear(_t(M @ S), _t(M @ s0), token_dim=d)


def _scores_varying(p: HeadProblem, reference: int | None = None) -> nn.Sequential:
    n, d, dh, i = p.n, p.d, p.d_head, p.query_index
    q0 = p.Z0[i] @ p.W_Q + p.b_Q
    K0 = p.Z0 @ p.W_K + p.b_K  # (n, dh)
    W = np.zeros((2 * n * dh, n * d))
    b = np.zeros(2 * n * dh)
    for k in range(n):
        rows_q = slice(k * dh, (k + 1) * dh)
        rows_k = slice(n * dh + k * dh, n * dh + (k + 1) * dh)
        W[rows_q, i * d:(i + 1) * d] = p.W_Q.T
        b[rows_q] = q0
        W[rows_k, k * d:(k + 1) * d] = p.W_K.T
        b[rows_k] = K0[k]
    # s_k = sum_h p_{k,h} / sqrt(dh); t = M s
    Ssum = np.kron(np.eye(n), np.ones((1, dh))) / np.sqrt(dh)  # (n, n dh)
    M = _score_difference_matrix(n, reference)
    return nn.Sequential(
        InputLinear(_t(W), _t(b), token_dim=d), BilinearProduct(exact_input=True), PlainLinear(_t(M @ Ssum))
    )


def _value_reads(p: HeadProblem, C: np.ndarray) -> InputLinear:
    """w_{o,j} = c_o . v_j for the rows c_o of C (m, dh); row index o * n + j."""
    n, d = p.n, p.d
    m = C.shape[0]
    V0 = p.Z0 @ p.W_V + p.b_V  # (n, dh)
    U = p.W_V @ C.T  # (d, m): u_w for each spec
    W = np.zeros((m * n, n * d))
    b = np.zeros(m * n)
    for o in range(m):
        for j in range(n):
            W[o * n + j, j * d:(j + 1) * d] = U[:, o]
            b[o * n + j] = V0[j] @ C[o]
    return InputLinear(_t(W), _t(b), token_dim=d)


#: Softmax constructions (`head_network(..., softmax=...)`).
SOFTMAX_GRAPHS = ("reciprocal", "auto_lirpa")


def _attention_reciprocal(p: HeadProblem) -> nn.Sequential:
    """a_j = 1 / sum_k exp(s_k - s_j): n^2 exps, n reciprocals, no product (our construction)."""
    n = p.n
    scores = _scores_fixed(p) if p.mode == "fixed" else _scores_varying(p)
    row_sum = np.kron(np.eye(n), np.ones((1, n)))  # D_j = sum_k E_{jk}, E_{jj} = exp(0) = 1
    return nn.Sequential(scores, Exp(), PlainLinear(_t(row_sum)), PositiveReciprocal(floor=1.0))


def _attention_auto_lirpa(p: HeadProblem) -> nn.Sequential:
    """auto_LiRPA's softmax graph: E_k = exp(s_k - s_m) with m the nominal argmax (its ReduceMax with a
    fixed max index), S = sum_k E_k (E_m = 1), a_j = E_j * (1/S) (its Div: a reciprocal and a product)."""
    n = p.n
    m = int(np.argmax(_nominal_scores(p)))
    scores = _scores_fixed(p, m) if p.mode == "fixed" else _scores_varying(p, m)
    identity = PlainLinear(_t(np.eye(n)))
    inverse_sum = nn.Sequential(PlainLinear(_t(np.ones((1, n)))), PositiveReciprocal(floor=1.0),
                                PlainLinear(_t(np.ones((n, 1)))))
    return nn.Sequential(scores, Exp(), Parallel(identity, inverse_sum), BilinearProduct(exact_input=False))


def _nominal_scores(p: HeadProblem) -> np.ndarray:
    q = p.nominal_query()
    return (p.Z0 @ p.W_K + p.b_K) @ q / np.sqrt(p.d_head)


def head_network(problem: HeadProblem, specifications: np.ndarray | None = None,
                 softmax: str = "reciprocal") -> nn.Sequential:
    """The network x = delta (n d) -> (g_1, ..., g_m) for the specification rows (default: problem.c).

    Only the tokens, weights, query index and mode of `problem` are used (not its radius or norm).
    softmax: "reciprocal" (ours, a_j = 1/sum_k exp(s_k - s_j)) or "auto_lirpa" (exp(s - s_m)/sum).
    """
    C = np.atleast_2d(problem.c if specifications is None else np.asarray(specifications, dtype=np.float64))
    if C.shape[1] != problem.d_head:
        raise ValueError(f"specifications must be (m, {problem.d_head}); got {C.shape}")
    if softmax not in SOFTMAX_GRAPHS:
        raise ValueError(f"softmax must be one of {SOFTMAX_GRAPHS}; got {softmax!r}")
    n, m = problem.n, C.shape[0]
    weights = _attention_reciprocal(problem) if softmax == "reciprocal" else _attention_auto_lirpa(problem)
    tile = np.tile(np.eye(n), (m, 1))  # (m n, n)
    attention = nn.Sequential(*weights, PlainLinear(_t(tile)))
    readout = np.kron(np.eye(m), np.ones((1, n)))  # g_o = sum_j y_{o,j}
    return nn.Sequential(
        Parallel(attention, _value_reads(problem, C)),
        BilinearProduct(exact_input=False),
        PlainLinear(_t(readout)),
    )


def bound_head_network(problem: HeadProblem, specifications: np.ndarray | None = None,
                       relaxation: str = "auto_lirpa", softmax: str = "reciprocal",
                       device: torch.device | str = "cpu"):
    """(network, bound network) built with `head_factory()`, CROWN relaxations of rule `relaxation`
    ("auto_lirpa" or "mid", see `relaxation_parameters.RELAXATION_RULES`), every tensor on `device`
    (the network is moved before the bound network is built, so both share its weights)."""
    net = head_network(problem, specifications, softmax).to(device)
    bnet = head_factory().build(net)
    set_relaxation_rule(bnet, relaxation)
    return net, bnet
