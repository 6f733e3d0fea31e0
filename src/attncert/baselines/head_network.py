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
from bound_propagation import (BoundModelFactory, Exp, FixedLinear, Parallel, Reciprocal, VectorMul)
from bound_propagation.activation import BoundActivation, assert_bound_order
from bound_propagation.bivariate import BoundVectorMul
from bound_propagation.bounds import IntervalBounds, LinearBounds
from bound_propagation.linear import BoundLinear

from attncert.head.problem import HeadProblem

DTYPE = torch.float64
#: An input interval narrower than this is treated as a point (constant relaxation, still sound).
ZERO_WIDTH = 1e-12
#: Default relaxation parameter (theta for tangent points, kappa for McCormick planes): CROWN's choice.
DEFAULT_PARAMETER = 0.5


# --------------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------------

def each_side(linear_bounds: LinearBounds, step) -> LinearBounds:
    """One back-substitution step applied to both sides of a linear bound.

    step((A, bias), upper) -> (A', bias'); `upper` tells which side (relaxations pick their planes by it).
    """
    lower = None if linear_bounds.lower is None else step(linear_bounds.lower, False)
    upper = None if linear_bounds.upper is None else step(linear_bounds.upper, True)
    return LinearBounds(linear_bounds.region, lower, upper)

class InputLinear(FixedLinear):
    """y = W x + b applied to the network input x = (delta_1, ..., delta_n) (first operation on its path).

    token_dim = d: the weight is also stored per token, W = [W_1 | ... | W_n] with W_j (out, d), keeping
    only the rows R_j that read token j, and of those only the distinct ones: W_j[R_j] = P_j U_j with
    P_j a 0/1 row-selection (index map) and U_j the distinct rows. Back-substituting A (m, out) gives
    the token-j block A[:, R_j] W_j[R_j] = (A[:, R_j] P_j) U_j, at cost m |R_j| + m |U_j| d instead of
    m * out * n d (the head's first layers are block sparse: a key reads one token; the n copies of the
    query read token i through the same rows).
    """

    def __init__(self, weight, bias=None, token_dim: int | None = None):
        super().__init__(weight, bias)
        self.token_dim = token_dim
        self.token_rows, self.token_inverse, self.token_blocks = [], [], []
        if token_dim is not None:
            n_in = self.weight.size(-1)
            if n_in % token_dim:
                raise ValueError("input size is not a multiple of token_dim")
            for j in range(n_in // token_dim):
                block = self.weight[:, j * token_dim:(j + 1) * token_dim]
                rows = torch.nonzero(block.abs().sum(dim=1) > 0).flatten()
                unique, inverse = torch.unique(block[rows], dim=0, return_inverse=True)
                if unique.size(0) == rows.numel():  # no duplicates: keep the rows in their order
                    unique, inverse = block[rows], None
                self.token_rows.append(rows)
                self.token_inverse.append(inverse)
                self.token_blocks.append(unique.contiguous())


class BilinearProduct(VectorMul):
    """y = x[:h] * x[h:] (elementwise product of the two halves).

    exact_input=True declares that the module's input is an `InputLinear` of the network input, whose
    IBP interval is already the exact range, so CROWN need not back-substitute to bound it.
    """

    def __init__(self, exact_input: bool = False):
        super().__init__()
        self.exact_input = exact_input


class PositiveReciprocal(Reciprocal):
    """y = 1 / x for x > 0."""


# --------------------------------------------------------------------------------------------------
# Per-objective relaxation parameters
# --------------------------------------------------------------------------------------------------
class PerObjectiveParameters:
    """Relaxation parameters in [0, 1], one per (objective, neuron), stored per key and pass.

    `alpha_key` is set by the optimizer (`set_alpha_key`) to name the bound being computed (an
    intermediate layer or the output); None means "use the CROWN default for every objective".
    The pass is "lower" or "upper": the lower and upper bound of an objective get separate parameters.
    """

    def _init_parameters(self):
        self.alpha_key = None
        self._parameters_by_key = {}

    def parameter(self, pass_name: str, name: str, shape, like: torch.Tensor):
        key = (self.alpha_key, pass_name, name)
        p = self._parameters_by_key.get(key)
        if p is None or tuple(p.shape) != tuple(shape):
            p = torch.full(tuple(shape), DEFAULT_PARAMETER, dtype=like.dtype, device=like.device, requires_grad=True)
            self._parameters_by_key[key] = p
        return p

    def parameters_for(self, key):
        return [p for (k, _, _), p in self._parameters_by_key.items() if k == key]

    def clear_parameters(self):
        self._parameters_by_key = {}


def set_alpha_key(root: nn.Module, key) -> None:
    for m in root.modules():
        if isinstance(m, PerObjectiveParameters):
            m.alpha_key = key


def alpha_parameters(root: nn.Module, key) -> list[torch.Tensor]:
    out = []
    for m in root.modules():
        if isinstance(m, PerObjectiveParameters):
            out.extend(m.parameters_for(key))
    return out


def clamp_alpha_parameters(params) -> None:
    with torch.no_grad():
        for p in params:
            p.clamp_(0.0, 1.0)


# --------------------------------------------------------------------------------------------------
# Bound modules
# --------------------------------------------------------------------------------------------------
def _linear_backward(weight, bias, bounds):
    """Back-substitution through y = W x + b: (A, c) -> (A W, c + A b)."""
    A, acc = bounds
    if bias is not None:
        acc = acc + A.matmul(bias)
    return A.matmul(weight), acc


class BoundPlainLinear(BoundLinear):
    """The library's BoundLinear with the back-substitution in eager torch.

    The library's version calls a TorchScript function; under autograd (alpha-CROWN) TorchScript's
    profiling executor makes every call ~100x slower on these small matrices. Same arithmetic.
    """

    def crown_backward(self, linear_bounds, optimize):
        W, b = self.module.weight, self.module.bias
        return each_side(linear_bounds, lambda bounds, upper: _linear_backward(W, b, bounds))


class BoundInputLinear(BoundPlainLinear):
    """Linear layer on the network input; IBP returns the exact range over the input set."""

    def _backward(self, bounds):
        A, acc = bounds
        mod = self.module
        if mod.bias is not None:
            acc = acc + A.matmul(mod.bias)
        if mod.token_dim is None:
            return A.matmul(mod.weight), acc
        parts = []
        for rows, inverse, block in zip(mod.token_rows, mod.token_inverse, mod.token_blocks):
            selected = A.index_select(-1, rows)
            if inverse is not None:  # merge the columns of identical rows first
                merged = torch.zeros((*A.shape[:-1], block.size(0)), dtype=A.dtype, device=A.device)
                selected = merged.index_add(-1, inverse, selected)
            parts.append(selected.matmul(block))
        return torch.cat(parts, dim=-1), acc

    def crown_backward(self, linear_bounds, optimize):
        return each_side(linear_bounds, lambda bounds, upper: self._backward(bounds))

    @assert_bound_order
    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        region = bounds.region
        W, b = self.module.weight, self.module.bias
        if b is None:
            b = torch.zeros(W.size(0), dtype=W.dtype, device=W.device)
        if W.size(-1) != region.size(-1):
            raise ValueError("InputLinear must read the network input directly")
        lower, upper = region.concretize(LinearBounds(region, (W, b), (W, b)))
        # The library's HyperRectangle / our PerTokenL2Ball broadcast an unbatched W over the batch.
        return IntervalBounds(region, lower, upper)


class _BoundConvexActivation(PerObjectiveParameters, BoundActivation):
    """Shared code for convex scalar functions: secant above, tangent at l + theta (u - l) below."""

    def __init__(self, module, factory, **kwargs):
        BoundActivation.__init__(self, module, factory, **kwargs)
        self._init_parameters()
        self.lower_input = None
        self.upper_input = None
        self.point = None  # mask of zero-width neurons

    # f, f' and the domain check are provided by subclasses
    def f(self, x):
        raise NotImplementedError

    def fprime(self, x):
        raise NotImplementedError

    def check_domain(self, lower, upper):
        pass

    def constant_bounds(self, lower, upper):
        """(lower constant, upper constant) of f on a point-like interval."""
        raise NotImplementedError

    @assert_bound_order
    def alpha_beta(self, preactivation):
        lower, upper = preactivation.lower.detach(), preactivation.upper.detach()
        self.check_domain(lower, upper)
        self.lower_input, self.upper_input = lower, upper
        self.point = (upper - lower) <= ZERO_WIDTH
        # CROWN defaults, stored as the library stores them (alpha = slope, beta = intercept)
        self.alpha_upper, self.beta_upper = self.secant()
        slope, intercept = self.tangent(torch.full_like(lower.unsqueeze(-2), DEFAULT_PARAMETER))
        self.alpha_lower, self.beta_lower = slope.squeeze(-2), intercept.squeeze(-2)

    def secant(self):
        l, u, point = self.lower_input, self.upper_input, self.point
        fl, fu = self.f(l), self.f(u)
        width = torch.where(point, torch.ones_like(l), u - l)
        slope = torch.where(point, torch.zeros_like(l), (fu - fl) / width)
        intercept = torch.where(point, self.constant_bounds(l, u)[1], fl - slope * l)
        return slope, intercept

    def tangent(self, theta):
        """Tangent at d = l + theta (u - l); theta is (..., objectives, neurons)."""
        l, u, point = (t.unsqueeze(-2) for t in (self.lower_input, self.upper_input, self.point))
        d = l + theta * (u - l)
        slope = self.fprime(d)
        intercept = self.f(d) - slope * d
        slope = torch.where(point, torch.zeros_like(slope), slope)
        intercept = torch.where(point, self.constant_bounds(l, u)[0], intercept)
        return slope, intercept

    def clear_relaxation(self):
        super().clear_relaxation()
        self.clear_parameters()
        self.lower_input = self.upper_input = self.point = None

    def crown_backward(self, linear_bounds, optimize):
        assert self.bounded
        sec_slope, sec_int = self.alpha_upper, self.beta_upper

        def one_pass(W, acc_bias, pass_name):
            # Upper pass: W >= 0 takes the upper relaxation; lower pass: W >= 0 takes the lower one.
            if self.alpha_key is None:
                tan_slope, tan_int = self.alpha_lower.unsqueeze(-2), self.beta_lower.unsqueeze(-2)
            else:
                theta = self.parameter(pass_name, "theta", W.shape, W)
                tan_slope, tan_int = self.tangent(theta)
            use_secant = (W >= 0) if pass_name == "upper" else (W < 0)
            lam = torch.where(use_secant, sec_slope.unsqueeze(-2), tan_slope)
            mu = torch.where(use_secant, sec_int.unsqueeze(-2), tan_int)
            return W * lam, acc_bias + (W * mu).sum(dim=-1)

        return each_side(linear_bounds, lambda bounds, upper: one_pass(*bounds, "upper" if upper else "lower"))

    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        self.check_domain(bounds.lower, bounds.upper)
        return super().ibp_forward(bounds, save_relaxation=save_relaxation, save_input_bounds=save_input_bounds)

    def parameterize_alpha_beta(self, alpha_lower, alpha_upper, beta_lower, beta_upper):
        return alpha_lower, alpha_upper, beta_lower, beta_upper

    def bound_parameters(self):  # the library's own alpha loop is not used with these modules
        return []


class BoundAlphaExp(_BoundConvexActivation):
    def f(self, x):
        return torch.exp(x)

    def fprime(self, x):
        return torch.exp(x)

    def constant_bounds(self, lower, upper):
        return torch.exp(lower), torch.exp(upper)


class BoundAlphaPositiveReciprocal(_BoundConvexActivation):
    def f(self, x):
        return 1.0 / x

    def fprime(self, x):
        return -1.0 / (x * x)

    def constant_bounds(self, lower, upper):
        return 1.0 / upper, 1.0 / lower

    def check_domain(self, lower, upper):
        if torch.any(lower <= 0):
            raise ValueError("PositiveReciprocal: input interval reaches 0 (softmax denominator bound not positive)")

    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        self.check_domain(bounds.lower, bounds.upper)
        if save_relaxation:
            self.alpha_beta(preactivation=bounds)
            self.bounded = True
        if save_input_bounds:
            self.input_bounds = bounds
        return IntervalBounds(bounds.region, 1.0 / bounds.upper, 1.0 / bounds.lower)


class BoundAlphaBilinear(PerObjectiveParameters, BoundVectorMul):
    """McCormick relaxation of x[:h] * x[h:] with per-objective plane mixing kappa."""

    def __init__(self, module, factory, **kwargs):
        BoundVectorMul.__init__(self, module, factory, **kwargs)
        self._init_parameters()

    def init_kappa(self):  # parameters live in PerObjectiveParameters
        pass

    def _halves(self):
        b = self.input_bounds
        h = b.lower.size(-1) // 2
        return (b.lower[..., :h].detach(), b.upper[..., :h].detach(),
                b.lower[..., h:].detach(), b.upper[..., h:].detach())

    def planes(self, kappa_lower, kappa_upper):
        """Slopes (ax, ay) and intercepts of the lower and upper planes; kappas broadcast."""
        lx, ux, ly, uy = (t.unsqueeze(-2) for t in self._halves())
        k = kappa_lower
        lo = (k * ly + (1 - k) * uy, k * lx + (1 - k) * ux, -k * lx * ly - (1 - k) * ux * uy)
        k = kappa_upper
        up = (k * uy + (1 - k) * ly, k * lx + (1 - k) * ux, -k * lx * uy - (1 - k) * ux * ly)
        return lo, up

    def crown_backward(self, linear_bounds, optimize):
        assert self.bounded

        def one_pass(W, acc_bias, pass_name):
            if self.alpha_key is None:
                kl = ku = DEFAULT_PARAMETER
            else:
                kl = self.parameter(pass_name, "kappa_lower", W.shape, W)
                ku = self.parameter(pass_name, "kappa_upper", W.shape, W)
            lo, up = self.planes(kl, ku)
            use_upper = (W >= 0) if pass_name == "upper" else (W < 0)
            ax = torch.where(use_upper, up[0], lo[0])
            ay = torch.where(use_upper, up[1], lo[1])
            c = torch.where(use_upper, up[2], lo[2])
            return torch.cat([W * ax, W * ay], dim=-1), acc_bias + (W * c).sum(dim=-1)

        return each_side(linear_bounds, lambda bounds, upper: one_pass(*bounds, "upper" if upper else "lower"))

    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        out = super().ibp_forward(bounds, save_relaxation=save_relaxation, save_input_bounds=save_input_bounds)
        if save_input_bounds and self.module.exact_input:
            self.bounded = True  # the IBP interval of an InputLinear is already the exact range
        return out

    def clear_relaxation(self):
        super().clear_relaxation()
        self.clear_parameters()

    def bound_parameters(self):
        return []

    def clip_params(self):
        pass

    def project_grads(self):
        pass


def head_factory() -> BoundModelFactory:
    """The library's factory with our modules registered (registration order: most specific last)."""
    factory = BoundModelFactory()
    factory.register(FixedLinear, BoundPlainLinear)
    factory.register(Exp, BoundAlphaExp)
    factory.register(PositiveReciprocal, BoundAlphaPositiveReciprocal)
    factory.register(BilinearProduct, BoundAlphaBilinear)
    factory.register(InputLinear, BoundInputLinear)
    return factory


# --------------------------------------------------------------------------------------------------
# The head as a network
# --------------------------------------------------------------------------------------------------
def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE)


def _score_difference_matrix(n: int) -> np.ndarray:
    """(n^2, n) matrix M with (M s)_{jk} = s_k - s_j, row index j * n + k."""
    M = np.zeros((n * n, n))
    for j in range(n):
        for k in range(n):
            if j != k:
                M[j * n + k, k] += 1.0
                M[j * n + k, j] -= 1.0
    return M


def _scores_fixed(p: HeadProblem) -> nn.Module:
    n, d = p.n, p.d
    s0, _, u_s, _ = p.fixed_query_directions()
    S = np.zeros((n, n * d))  # s_j = s0_j + u_s . delta_j
    for j in range(n):
        S[j, j * d:(j + 1) * d] = u_s
    M = _score_difference_matrix(n)
    return InputLinear(_t(M @ S), _t(M @ s0), token_dim=d)


def _scores_varying(p: HeadProblem) -> nn.Sequential:
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
    M = _score_difference_matrix(n)
    return nn.Sequential(InputLinear(_t(W), _t(b), token_dim=d), BilinearProduct(exact_input=True), FixedLinear(_t(M @ Ssum)))


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


def head_network(problem: HeadProblem, specifications: np.ndarray | None = None) -> nn.Sequential:
    """The network x = delta (n d) -> (g_1, ..., g_m) for the specification rows (default: problem.c).

    Only the tokens, weights, query index and mode of `problem` are used (not its radius or norm).
    """
    C = np.atleast_2d(problem.c if specifications is None else np.asarray(specifications, dtype=np.float64))
    if C.shape[1] != problem.d_head:
        raise ValueError(f"specifications must be (m, {problem.d_head}); got {C.shape}")
    n, m = problem.n, C.shape[0]
    scores = _scores_fixed(problem) if problem.mode == "fixed" else _scores_varying(problem)
    row_sum = np.kron(np.eye(n), np.ones((1, n)))  # D_j = sum_k E_{jk}
    tile = np.tile(np.eye(n), (m, 1))  # (m n, n)
    attention = nn.Sequential(scores, Exp(), FixedLinear(_t(row_sum)), PositiveReciprocal(), FixedLinear(_t(tile)))
    readout = np.kron(np.eye(m), np.ones((1, n)))  # g_o = sum_j y_{o,j}
    return nn.Sequential(
        Parallel(attention, _value_reads(problem, C)),
        BilinearProduct(exact_input=False),
        FixedLinear(_t(readout)),
    )


def bound_head_network(problem: HeadProblem, specifications: np.ndarray | None = None):
    """(network, bound network) built with `head_factory()`."""
    net = head_network(problem, specifications)
    return net, head_factory().build(net)
