"""Adam steps on alpha-CROWN's relaxation parameters: `torch.optim.Adam(params, lr, betas)` on CPU tensors, without
the `torch.optim.Optimizer` base class.

For a parameter p with gradient g at its t-th step (t counts only the steps at which p had a gradient),

    m <- m + (1 - beta1) (g - m),   v <- beta2 v + (1 - beta2) g * g,
    p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps),     eps = 1e-8.

`step` calls the update that `torch.optim.Adam.step` calls for these settings on CPU tensors,
`torch.optim.adam._single_tensor_adam`, with the same arguments and the same state (step counters as CPU scalars
of `_get_scalar_dtype()`, zero moments, created at a parameter's first gradient; a parameter without a gradient is
skipped), so every iterate is bit for bit Adam's. Why not Adam itself: constructing a `torch.optim.Optimizer`
imports `torch._dynamo`, about 1.5 CPU seconds per process (as `minip.training.ForeachAdam`).
"""
from __future__ import annotations

import torch


class AdamSteps:
    """Adam on `params` (tensors that require grad): `zero_grad()`, then backward, then `step()`."""

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float = 1e-8):
        self.params = list(params)
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.state: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}  # index -> (m, v, step)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        from torch.optim.adam import _single_tensor_adam
        from torch.optim.optimizer import _get_scalar_dtype

        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if any(torch.is_complex(self.params[i]) or self.params[i].grad.is_sparse for i in live):
            raise RuntimeError("AdamSteps: real dense parameters only")
        for i in live:
            if i not in self.state:
                p = self.params[i]
                self.state[i] = (torch.zeros_like(p, memory_format=torch.preserve_format),
                                 torch.zeros_like(p, memory_format=torch.preserve_format),
                                 torch.tensor(0.0, dtype=_get_scalar_dtype()))
        _single_tensor_adam([self.params[i] for i in live], [self.params[i].grad for i in live],
                            [self.state[i][0] for i in live], [self.state[i][1] for i in live], [],
                            [self.state[i][2] for i in live], None, None, amsgrad=False, has_complex=False,
                            beta1=self.betas[0], beta2=self.betas[1], lr=self.lr, weight_decay=0, eps=self.eps,
                            maximize=False, capturable=False, differentiable=False, decoupled_weight_decay=False)
