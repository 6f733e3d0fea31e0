"""The output LayerNorm's range: a bound on g = C F over every input, finite at any radius.

F ends with a LayerNorm, LN(y) = gamma * n + beta with n = P y / sqrt(|P y|^2 / d + eps), P = I - 1 1^T / d. So
1^T n = 0 and |n|_2^2 = d m / (m + eps) < d (m = |P y|^2 / d): whatever y is, n lies in the centred ball of radius
sqrt(d). For a specification row c and a sense s = +-1, with w = c * gamma,

    max_y s c . LN(y) <= s c . beta + sqrt(d) || P w ||_2,

and for f = g - g0 - G . delta over ||delta||_inf <= r

    max s f <= max s g - s g0 + r ||G||_1.

These hold for any perturbation set, so they cap the Taylor-model certificate (block/certificate.py) where its
enclosures blow up (scores moving by O(1) over the box, a 1/sqrt or 1/sum input reaching 0), never loosen it.
Rounding: every float operation errs by at most u relatively; each bound is raised by gamma_k of its operation
count (Higham), and `inflate`.
"""
from __future__ import annotations

import math

import torch

from attncert.block.enclosure import U, inflate
from attncert.block.map import DTYPE, LayerNormParams
from attncert.head.rounding import gamma

CROSS_SLACK = 2.0 ** -40


def layer_norm_range(C: torch.Tensor, ln: LayerNormParams) -> torch.Tensor:
    """(2, m) upper bounds of max s c . LN(y) over every y, for s = +1 (row 0) and s = -1 (row 1)."""
    C = C.to(DTYPE)
    d = C.shape[1]
    w = C * ln.gain                                                     # (m, d), each entry within u of c_k gamma_k
    pw = w - w.mean(-1, keepdim=True)
    # |pw_k - (P w_exact)_k| <= gamma_{d+3} (|w_k| + mean |w| + |pw_k|): the products, the mean, the subtraction
    err = gamma(d + 3) * (w.abs() + w.abs().mean(-1, keepdim=True) + pw.abs())
    norm = torch.sqrt(((pw.abs() + err) ** 2).sum(-1)) * (1 + gamma(d + 4))
    spread = inflate(norm * (math.sqrt(d) * (1 + 2 * U)) * (1 + 2 * U))
    cb = C @ ln.bias
    cb_err = gamma(d + 1) * (C.abs() @ ln.bias.abs())
    total = torch.stack([cb, -cb]) + (cb_err + spread)                 # one rounding; of either sign
    # raised by 2^-40 of its terms: an independent re-derivation (the audit's numpy) sums in another order
    return total + inflate(2 * U * total.abs() + CROSS_SLACK * (cb.abs() + spread))


def f_range(g_range: torch.Tensor, g0: torch.Tensor, grad: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """(2, m, R) upper bounds of max s (g - g0 - G . delta) over ||delta||_inf <= rho (R,) from `layer_norm_range`'s
    (2, m) bounds on max s g."""
    d = grad.shape[-1]
    sign = torch.tensor([1.0, -1.0], dtype=DTYPE).view(2, 1)
    off = g_range - sign * g0                                         # one rounding per entry
    off = off + U * off.abs()
    lin = inflate(grad.abs().sum(-1) * (1 + gamma(d + 2)))            # >= ||G||_1
    total = off.unsqueeze(-1) + lin.view(1, -1, 1) * rho.view(1, 1, -1) * (1 + 2 * U)
    return inflate(total + U * total.abs())
