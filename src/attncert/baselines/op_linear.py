"""Linear operators: a linear layer reading the network input (`InputLinear`, with exact IBP over the
input set and per-token block-sparse back-substitution) and the library's linear layer with an eager
back-substitution (`BoundPlainLinear`).
"""
from __future__ import annotations

import torch
from bound_propagation import FixedLinear
from bound_propagation.activation import assert_bound_order
from bound_propagation.bounds import IntervalBounds, LinearBounds
from bound_propagation.linear import BoundLinear

from attncert.baselines.relaxation_parameters import each_side

class PlainLinear(FixedLinear):
    """The library's `FixedLinear` (y = W x + b, W and b given) without `nn.Linear`'s random initialisation: its
    constructor draws a weight and a bias from torch's generator and `FixedLinear` discards both at once (a third
    of the time a head network took to build). Same buffers, same arithmetic; torch's global generator is left
    as it was."""

    def reset_parameters(self) -> None:
        pass


class InputLinear(PlainLinear):
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
        # every output row reads at most two tokens (`_TokenBlockProduct`'s backward is then autograd's bit for bit)
        readers = torch.zeros(self.weight.size(0), dtype=torch.int64)
        for rows in self.token_rows:
            readers[rows] += 1
        self.at_most_two_tokens = bool(self.token_rows) and int(readers.max()) <= 2

    def _apply(self, fn, *args, **kwargs):
        """Module.to / .double / ... also move the per-token index maps and blocks (plain lists, not buffers)."""
        super()._apply(fn, *args, **kwargs)
        move = lambda ts: [None if t is None else fn(t) for t in ts]  # noqa: E731
        self.token_rows, self.token_inverse, self.token_blocks = (move(self.token_rows), move(self.token_inverse),
                                                                  move(self.token_blocks))
        return self


def _linear_backward(weight, bias, bounds):
    """Back-substitution through y = W x + b: (A, c) -> (A W, c + A b)."""
    A, acc = bounds
    if bias is not None:
        acc = acc + A.matmul(bias)
    return A.matmul(weight), acc


def interval_linear(weight, bias, lower, upper):
    """Interval of y = W x + b over the box [lower, upper]: W+ l + W- u and W+ u + W- l (+ b).

    The library computes W c -/+ |W| r from the centre c and radius r of the box; when the entries
    span many orders of magnitude (exp outputs from 1e-20 to 1e20) the centre and the radius are both
    ~u/2 and their difference loses every digit of the small entries: a sum of positive terms, one of
    them exactly 1, came out <= 0. The split form adds terms of one sign only.
    Infinite input bounds (exp overflow) meet zero weights as 0 * inf := 0 (that input does not enter
    the output), so an infinite bound stays infinite instead of becoming NaN.
    """
    Wp, Wn = weight.clamp(min=0), weight.clamp(max=0)
    if bool(torch.isfinite(lower).all()) and bool(torch.isfinite(upper).all()):
        lo = lower.matmul(Wp.transpose(-1, -2)) + upper.matmul(Wn.transpose(-1, -2))
        up = upper.matmul(Wp.transpose(-1, -2)) + lower.matmul(Wn.transpose(-1, -2))
    else:
        def term(x, w):  # sum_i w_ji x_i with 0 * inf = 0, elementwise (small layers only get here)
            prod = x.unsqueeze(-2) * w
            return torch.where(w == 0, torch.zeros_like(prod), prod).sum(-1)

        lo, up = term(lower, Wp) + term(upper, Wn), term(upper, Wp) + term(lower, Wn)
    if bias is not None:
        lo, up = lo + bias, up + bias
    return lo, up


class BoundPlainLinear(BoundLinear):
    """The library's BoundLinear with the back-substitution in eager torch and the interval computed
    without centre-radius cancellation (`interval_linear`).

    The library's version calls a TorchScript function; under autograd (alpha-CROWN) TorchScript's
    profiling executor makes every call ~100x slower on these small matrices. Same arithmetic.
    """

    def crown_backward(self, linear_bounds, optimize):
        W, b = self.module.weight, self.module.bias
        return each_side(linear_bounds, lambda bounds, upper: _linear_backward(W, b, bounds), linear=True)

    @assert_bound_order
    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        if self.module.weight.dim() != 2:
            return super().ibp_forward(bounds, save_relaxation=save_relaxation, save_input_bounds=save_input_bounds)
        lower, upper = interval_linear(self.module.weight, self.module.bias, bounds.lower, bounds.upper)
        return IntervalBounds(bounds.region, lower, upper)


class _TokenBlockProduct(torch.autograd.Function):
    """A -> A W for an `InputLinear` W stored per token (`InputLinear` docstring): the token-j block of the result
    is (A[:, R_j] P_j) U_j, each block's matrix product written straight into its columns of the result.

    The same products as index_select / index_add / matmul per token followed by a concatenation, without the
    concatenation's copy. Backward, with G_j the token-j columns of the incoming gradient G: the gradient of A is
    sum_j (G_j U_j^T P_j^T placed at the columns R_j), each term the product autograd forms for that token's
    matmul, scattered by index_add_ as autograd's index_select backward scatters it. Autograd sums the tokens' terms
    in its own order; for a column of A read by at most two tokens (every head network: a score difference reads
    two tokens, everything else one) the sum of its at most two nonzero terms does not depend on the order, so the
    gradient is the same bit for bit.
    """

    @staticmethod
    def forward(ctx, A, mod):
        ctx.mod, ctx.shape = mod, A.shape
        d = mod.token_dim
        out = A.new_empty((*A.shape[:-1], len(mod.token_blocks) * d))
        rows_out = out.view(-1, out.size(-1))
        for j, (rows, inverse, block) in enumerate(zip(mod.token_rows, mod.token_inverse, mod.token_blocks)):
            selected = A.index_select(-1, rows)
            if inverse is not None:  # merge the columns of identical rows first
                merged = torch.zeros((*A.shape[:-1], block.size(0)), dtype=A.dtype, device=A.device)
                selected = merged.index_add(-1, inverse, selected)
            if block.size(0) == 0:  # a token no row reads: zero columns (mm into `out` would leave them unset)
                rows_out[:, j * d:(j + 1) * d].zero_()
            else:
                torch.mm(selected.reshape(-1, selected.size(-1)), block, out=rows_out[:, j * d:(j + 1) * d])
        return out

    @staticmethod
    def backward(ctx, grad):
        mod, d = ctx.mod, ctx.mod.token_dim
        rows_grad = grad.reshape(-1, grad.size(-1))
        out = torch.zeros(ctx.shape, dtype=grad.dtype, device=grad.device)
        for j, (rows, inverse, block) in enumerate(zip(mod.token_rows, mod.token_inverse, mod.token_blocks)):
            g = rows_grad[:, j * d:(j + 1) * d].mm(block.t()).view(*ctx.shape[:-1], block.size(0))
            if inverse is not None:
                g = g.index_select(-1, inverse)
            out.index_add_(-1, rows, g)
        return out, None


class BoundInputLinear(BoundPlainLinear):
    """Linear layer on the network input; IBP returns the exact range over the input set."""

    def _backward(self, bounds):
        A, acc = bounds
        mod = self.module
        if mod.bias is not None:
            acc = acc + A.matmul(mod.bias)
        if mod.token_dim is None:
            return A.matmul(mod.weight), acc
        if mod.at_most_two_tokens or not A.requires_grad:  # the same products, without the concatenation
            return _TokenBlockProduct.apply(A, mod), acc
        parts = []
        for rows, inverse, block in zip(mod.token_rows, mod.token_inverse, mod.token_blocks):
            selected = A.index_select(-1, rows)
            if inverse is not None:  # merge the columns of identical rows first
                merged = torch.zeros((*A.shape[:-1], block.size(0)), dtype=A.dtype, device=A.device)
                selected = merged.index_add(-1, inverse, selected)
            parts.append(selected.matmul(block))
        return torch.cat(parts, dim=-1), acc

    def crown_backward(self, linear_bounds, optimize):
        return each_side(linear_bounds, lambda bounds, upper: self._backward(bounds), linear=True)

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
