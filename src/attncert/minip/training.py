"""One training run of a head on a Min-IP setting, and its evaluation.

Objective: mean squared error between predictions and targets over all positions, Adam with a
cosine-decayed learning rate. Deterministic given the seed: `torch.manual_seed(seed)`,
`torch.set_num_threads(1)`, and a numpy generator seeded with the seed for the data stream.

Device (config key `device`, `attncert.configuration.device.resolve_device`): the model is initialized on
the CPU from the seed, then moved; every batch and evaluation set is created on that device, and
predictions come back to the CPU for the metrics. A GPU changes results only by floating-point
reduction order; an absent GPU raises DeviceError (one line) before anything is trained.

Settings:
  * scaling (iid / OOD): tokens in {0,1}^m, length N; the training stream draws fresh batches over the
    train pool; evaluation on fixed sets of iid sequences (train pool) and OOD sequences (disjoint
    test pool), generated from the pool seed so every run of a setting sees the same test sets.
  * witness: full-batch training on the witness family itself (an expressivity test: can a head of
    rank r fit these 1,2,... inputs at all?), evaluated on the same family.

Reported per run: error (fraction of positions with |y - t| >= 1/2), the largest deviation
max |y - t| (the paper's metric, `task.max_abs_error`), final training loss, and for the witness
family the error and the largest deviation at the query position and the fraction of queries s for
which some sequence (q_s, ., .) is wrong at the query position. Scaling runs report both metrics on
the iid and on the OOD test sequences (all positions).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict

import numpy as np
import torch
from tqdm import tqdm

from attncert.configuration.device import resolve_device

from .models import NONNEGATIVITY, build_model
from .pools import sample_sequences, split_pool
from .task import max_abs_error, minip_targets, wrong
from .train_config import TrainConfig


def _cosine_lr(opt, base_lr: float, step: int, steps: int) -> None:
    lr = 0.5 * base_lr * (1.0 + math.cos(math.pi * step / steps))
    for g in opt.param_groups:
        g["lr"] = lr


def _predict(model, X: np.ndarray, chunk: int = 4096) -> np.ndarray:
    model.eval()
    out = []
    device = next(model.parameters()).device
    with torch.no_grad():
        for i in range(0, len(X), chunk):
            x = torch.as_tensor(X[i:i + chunk], dtype=torch.float32, device=device)
            out.append(model(x).double().cpu().numpy())
    model.train()
    return np.concatenate(out) if out else np.zeros((0,) + X.shape[1:2])


class ForeachAdam:
    """`torch.optim.Adam(params, lr=lr, foreach=True)` with its defaults (betas (0.9, 0.999), eps 1e-8,
    no weight decay, no amsgrad), without the `torch.optim.Optimizer` base class.

    `step` calls the update that `torch.optim.Adam.step` calls for these settings,
    `torch.optim.adam._multi_tensor_adam`, with the same arguments and the same state (step counters as
    CPU scalars of `_get_scalar_dtype()`, zero moments), so the parameters after every step are bit for
    bit those of `torch.optim.Adam` (tests/minip/test_training.py). Why not Adam itself: constructing a
    `torch.optim.Optimizer` imports `torch._dynamo`, about 1.4 CPU-seconds per process, which is a
    quarter of a short Min-IP training job; nothing here needs it.
    """

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        from torch.optim.optimizer import _get_scalar_dtype

        self.params = list(params)
        self.param_groups = [{"lr": lr}]  # `_cosine_lr` sets the learning rate here, as on an optimizer
        self.betas, self.eps = betas, eps
        self.exp_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.state_steps = [torch.tensor(0.0, dtype=_get_scalar_dtype(), device="cpu") for _ in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        from torch.optim.adam import _multi_tensor_adam

        if any(p.grad is None for p in self.params):  # Adam would skip such a parameter; ours all train
            raise RuntimeError("ForeachAdam: every parameter needs a gradient")
        if any(torch.is_complex(p) or p.grad.is_sparse for p in self.params):
            raise RuntimeError("ForeachAdam: real dense parameters only")
        _multi_tensor_adam(self.params, [p.grad for p in self.params], self.exp_avgs, self.exp_avg_sqs, [],
                           self.state_steps, None, None, amsgrad=False, has_complex=False,
                           beta1=self.betas[0], beta2=self.betas[1], lr=self.param_groups[0]["lr"],
                           weight_decay=0, eps=self.eps, maximize=False, capturable=False,
                           differentiable=False, decoupled_weight_decay=False)


def _fit(model, batches, steps: int, lr: float, desc: str) -> float:
    opt = ForeachAdam(model.parameters(), lr=lr)
    loss_value = float("nan")
    for step in tqdm(range(steps), desc=desc, mininterval=5.0, leave=False):
        X, T = batches(step)
        _cosine_lr(opt, lr, step, steps)
        pred = model(X)
        loss = torch.mean((pred - T) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_value = float(loss.detach())
    return loss_value


def _setup(seed: int) -> np.random.Generator:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    return np.random.default_rng(seed)


def model_on_device(kind: str, bits: int, rank: int | None, train: TrainConfig, device: torch.device):
    """The head of `kind`, initialized on the CPU (from the seed set by `_setup`) and moved to `device`."""
    return build_model(kind, bits, rank, train.hidden, train.value_dim, train.depth).to(device)


def run_scaling(*, bits: int, length: int, kind: str, rank: int | None, seed: int, train: TrainConfig,
                test_fraction: float, max_pool: int, pool_seed: int, eval_sequences: int,
                device: str | torch.device | None = None) -> dict:
    """Train one head on random Min-IP sequences over the train pool; iid and OOD test errors."""
    dev = resolve_device(device)
    t0 = time.perf_counter()
    pool = split_pool(bits, test_fraction, max_pool, pool_seed)
    eval_rng = np.random.default_rng([pool_seed, bits, length])
    X_iid = sample_sequences(pool.train, eval_sequences, length, eval_rng)
    X_ood = sample_sequences(pool.test, eval_sequences, length, eval_rng)
    rng = _setup(seed)
    model = model_on_device(kind, bits, rank, train, dev)

    def batches(_step):
        X = sample_sequences(pool.train, train.batch, length, rng)
        return (torch.as_tensor(X, dtype=torch.float32, device=dev),
                torch.as_tensor(minip_targets(X), dtype=torch.float32, device=dev))

    loss = _fit(model, batches, train.steps, train.lr, f"m={bits} N={length} {kind} r={rank} s={seed}")
    rec = {}
    for split, X in (("iid", X_iid), ("ood", X_ood)):
        pred, target = _predict(model, X), minip_targets(X)
        rec[f"error_{split}"] = float(wrong(pred, target).mean())
        rec[f"max_abs_error_{split}"] = max_abs_error(pred, target)
    rec.update(bits=bits, length=length, kind=kind, rank=rank, seed=seed, final_loss=loss,
               pool_train=len(pool.train), pool_test=len(pool.test), eval_sequences=eval_sequences,
               nonnegativity=NONNEGATIVITY, train=asdict(train), seconds=time.perf_counter() - t0)
    return rec


def evaluate_witness(pred: np.ndarray, family) -> dict:
    """Error and largest deviation over all positions and at the query position; queries failed."""
    bad = wrong(pred, family.targets)
    bad_query = bad[:, 0]
    failed = np.zeros(family.n_queries, dtype=bool)
    np.logical_or.at(failed, family.query_of, bad_query)
    return {"error": float(bad.mean()), "error_query_position": float(bad_query.mean()),
            "max_abs_error": max_abs_error(pred, family.targets),
            "max_abs_error_query_position": max_abs_error(pred[:, 0], family.targets[:, 0]),
            "queries_failed": int(failed.sum()), "fraction_queries_failed": float(failed.mean()),
            "inputs": family.size}


def run_witness(*, family, kind: str, rank: int | None, seed: int, train: TrainConfig,
                device: str | torch.device | None = None) -> dict:
    """Full-batch training on the witness family; evaluation on the same family."""
    dev = resolve_device(device)
    t0 = time.perf_counter()
    _setup(seed)
    model = model_on_device(kind, family.bits, rank, train, dev)
    X = torch.as_tensor(family.sequences, dtype=torch.float32, device=dev)
    T = torch.as_tensor(family.targets, dtype=torch.float32, device=dev)
    loss = _fit(model, lambda _s: (X, T), train.steps, train.lr, f"witness {kind} r={rank} s={seed}")
    rec = evaluate_witness(_predict(model, family.sequences), family)
    rec.update(bits=family.bits, length=3, kind=kind, rank=rank, seed=seed, final_loss=loss,
               n_queries=family.n_queries, nonnegativity=NONNEGATIVITY, train=asdict(train),
               seconds=time.perf_counter() - t0)
    return rec
