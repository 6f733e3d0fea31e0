"""The training loss of a head and its gradients, reverse mode written out: bit for bit what autograd gives.

Loss of a head (`models._Head`) on a batch X (B, N, m) with targets T (B, N):

    L = mean_{b,i} (y_bi - t_bi)^2,    dL/dy = (1/(B N)) * 2 (y - t)

and, backwards through the head (notation of `models`; z = the linear layers' outputs, M = B N rows):

    y = <A, o> + c             dA = dy o,          do = dy A,           dc = dy
    o = w @ [x, v]             dw = do [x, v]^T,   d[x, v] = w^T do     (dv: its last p columns)
    w = softmax(s)             ds = w * (dw - <dw, w>)                  (`_softmax_backward_data`)
    s = logsumexp_k(lq + lk)   dlq_ik = sum_j g_ijk,  dlk_jk = sum_i g_ijk,  g_ijk = ds_ij exp(lq_ik + lk_jk - s_ij)
    s = q k^T  (dense)         dq = ds k,          dk = ds^T q
    z = [h, x] W^T + b         dW = dz^T [h, x],   db = sum_rows dz,    d[h, x] = dz W
    h = GELU(z1)               dz1 = dh GELU'(z1)                       (`gelu_backward`)

Every step is the ATen call that autograd's formula for that operation makes (torch's derivatives.yaml and
FunctionsManual: `mean_backward`, `pow_backward`, `mm_mat1_backward` / `mm_mat2_backward` of `addmm` -- the
weight enters `linear` transposed, so its gradient is dz^T [h, x] --, `logsumexp_backward`, `sum_to` for a
broadcast operand, `split_with_sizes_backward` = cat, `cat` backward = narrow), on tensors of the same
shapes and strides, or a computation of the same floats with less work, each entry by the same arithmetic:
  * dy = (d + d) * (1/(B N)): mean_backward's constant times pow_backward's 2 d (doubling is exact, and the
    product of the same two floats is the same float);
  * dv and dh: only the columns kept (the value columns of d[x, v], the columns of h of d[h, x]); dv is a
    sum of products entry by entry (`models._sum_of_products`), and MKL's product gives the kept columns the
    bits of the whole product (tests/minip/test_backprop.py checks the paper grid's shapes); `gelu_backward`
    reads dh contiguous instead of as a slice of d[h, x], and gives the same floats (checked against
    autograd, which passes it the slice);
  * logsumexp_backward's exp(scores - s) * ds computed in place in the scores' memory (the same elementwise
    kernels on the same contiguous shape).
tests/minip/test_backprop.py checks the gradients bit for bit against `loss.backward()`. What it saves is
autograd's own work: recording the graph in the forward pass and walking it, and, run in inference mode,
the version counters and view records of every tensor (together about a quarter of a training step of these
small heads; the kernels take the rest). The gradients are inference tensors: Adam reads them, nothing
records a graph through them.
Only the heads of `models` on a contiguous float32 batch are handled (`handles`, `batch_ok`); anything else
goes through autograd.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .models import DenseAttention, KernelAttention, _Head, _sum_of_products, sums_term_by_term


def handles(model: nn.Module) -> bool:
    """Whether `loss_and_gradients` reproduces autograd for this head (on a contiguous float32 batch, `batch_ok`);
    for any other module use autograd."""
    if type(model) not in (KernelAttention, DenseAttention):
        return False
    layers = list(model.encoder)
    pairs = all(isinstance(a, nn.Linear) and isinstance(g, nn.GELU) for a, g in zip(layers[::2], layers[1::2]))
    return (len(layers) % 2 == 0 and pairs
            and all(p.dtype == torch.float32 and p.requires_grad for p in model.parameters()))


def batch_ok(X: torch.Tensor, T: torch.Tensor) -> bool:
    """A batch `loss_and_gradients` takes: X (B, N, m) contiguous float32, T (B, N) float32."""
    return X.dim() == 3 and X.dtype == T.dtype == torch.float32 and X.is_contiguous() and T.shape == X.shape[:2]


_MEAN_WEIGHTS: dict[int, torch.Tensor] = {}


def _mean_weight(n: int) -> torch.Tensor:
    """mean_backward's weight 1/n as float32 computes it (a float32 1 divided by n, n < 2^24 exact), as a 0-d
    float32 tensor: multiplying by it is multiplying by the Python number 1/n cast to float32 (a wrapped
    scalar is cast to the tensor's dtype), without wrapping and casting it at every step."""
    if n not in _MEAN_WEIGHTS:
        _MEAN_WEIGHTS[n] = torch.tensor(float(np.float32(1.0) / np.float32(n)), dtype=torch.float32)
    return _MEAN_WEIGHTS[n]


class HeadTensors:
    """A head's parameters, GELU variants, map sizes and kind, read once for the steps of a run (a module
    attribute costs about a microsecond to look up, a few dozen of them a step). `.grad` is set on these
    parameters, which are the head's own: valid while no parameter or layer of the head is replaced."""

    def __init__(self, model: _Head):
        layers = list(model.encoder)
        self.encoder = [(lin.weight, lin.bias, act.approximate) for lin, act in zip(layers[::2], layers[1::2])]
        self.maps = (model.maps.weight, model.maps.bias)
        self.sizes = model.sizes
        self.kernel = isinstance(model, KernelAttention)


def _linear_grads(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, dz: torch.Tensor,
                  need_input: int) -> torch.Tensor | None:
    """z = x W^T + b on the rows of x (B, N, k) (`linear` flattens them: addmm(b, x_2d, W^T)): set W.grad and
    b.grad, return the first `need_input` columns of dx (B, N, k) (none if 0). addmm's backward:
    db = sum_to(dz, b), dW^T = (dz^T x)^T (W^T is column-major), dx = dz (W^T)^T; the columns of dx asked for
    are dz times those columns of W (MKL's sgemm gives each entry of the product the same bits whether the
    other columns are computed or not: tests/minip/test_backprop.py checks the shapes of the paper's grid)."""
    dz2 = dz.reshape(-1, dz.shape[-1])
    x2 = x.view(-1, x.shape[-1])
    bias.grad = dz2.sum_to_size(bias.shape)
    weight.grad = dz2.t().mm(x2)
    if not need_input:
        return None
    w = weight if need_input == x.shape[-1] else weight.narrow(-1, 0, need_input)
    return dz2.mm(w).reshape(x.shape[:-1] + (need_input,))


@torch.inference_mode()  # no autograd bookkeeping at all (the same kernels: the same floats)
def loss_and_gradients(model: _Head, X: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """L = mean (model(X) - T)^2 (a 0-d tensor); sets every parameter's `.grad` to dL/dparameter, exactly as
    `L.backward()` would after `zero_grad(set_to_none=True)`. Requires `handles(model)` and `batch_ok(X, T)`."""
    return loss_and_gradients_in_inference_mode(HeadTensors(model), X, T)


def loss_and_gradients_in_inference_mode(head: HeadTensors, X: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """`loss_and_gradients` of the head read into `head`, for a caller already in inference mode
    (`torch.inference_mode()`)."""
    # forward, keeping what the backward reads (autograd's saved tensors)
    inputs, pre = [], []
    h = X
    for weight, bias, _ in head.encoder:
        inputs.append(h)
        z = F.linear(h, weight, bias)
        pre.append(z)
        h = F.gelu(z)
    hx = torch.cat([h, X], dim=-1)
    a, b, v, A, c = F.linear(hx, *head.maps).split(head.sizes, dim=-1)
    kernel = head.kernel
    if kernel:
        scores = a.unsqueeze(-2) + b.unsqueeze(-3)
        s = torch.logsumexp(scores, dim=-1)
    else:
        s = a @ b.transpose(-1, -2)
    w = torch.softmax(s, dim=-1)
    xv = torch.cat([X, v], dim=-1)
    term_by_term = sums_term_by_term(w, xv)
    o = _sum_of_products(w, xv) if term_by_term else w @ xv
    d = (A * o).sum(-1) + c.squeeze(-1) - T
    loss = torch.mean(d ** 2)

    # backward
    dy = torch.add(d, d).mul_(_mean_weight(d.numel()))  # pow_backward (2 d = d + d) times 1/(B N)
    dp = dy.unsqueeze(-1)  # sum_backward: dy expanded over the last dim (broadcast by the products)
    dA, do = dp * o, dp * A
    dw = do.bmm(xv.transpose(1, 2))
    if term_by_term:  # dv = (w^T do)[..., m:], entry by entry the same sums of the same products
        dv = _sum_of_products(w.transpose(1, 2), do.narrow(-1, X.shape[-1], v.shape[-1]))
    else:
        dv = w.transpose(1, 2).bmm(do).narrow(-1, X.shape[-1], v.shape[-1])
    ds = torch._softmax_backward_data(dw, w, -1, torch.float32)
    if kernel:  # logsumexp_backward, in the memory of the scores (read nowhere else)
        g = scores.sub_(s.unsqueeze(-1)).exp_().mul_(ds.unsqueeze(-1))
        da, db = g.sum(-2), g.sum(-3)  # sum_to_size of the broadcast operands
    elif sums_term_by_term(ds, b):  # bmm sums these products term by term: so does `_sum_of_products`
        da = _sum_of_products(ds, b)                  # ds k
        db = _sum_of_products(ds.transpose(1, 2), a)  # (q^T ds)^T = ds^T q, each entry the same products
    else:
        kt = b.transpose(-1, -2)
        da = ds.bmm(kt.transpose(1, 2))
        db = a.transpose(1, 2).bmm(ds).transpose(-1, -2)
    dmaps = torch.cat([da, db, dv, dA, dy.unsqueeze(-1)], dim=-1)  # split_with_sizes_backward
    dh = _linear_grads(*head.maps, hx, dmaps, need_input=h.shape[-1])  # d[h, x] without the columns of x
    for i in range(len(head.encoder) - 1, -1, -1):
        weight, bias, approximate = head.encoder[i]
        dz = torch.ops.aten.gelu_backward(dh, pre[i], approximate=approximate)
        dh = _linear_grads(weight, bias, inputs[i], dz, need_input=inputs[i].shape[-1] if i > 0 else 0)
    return loss
