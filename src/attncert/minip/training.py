"""One training run of a head on a Min-IP setting, and its evaluation.

Objective: mean squared error between predictions and targets over all positions, Adam with a
cosine-decayed learning rate. Deterministic given the seed: `torch.manual_seed(seed)`,
`torch.set_num_threads(1)`, and a numpy generator seeded with the seed for the data stream.
The gradients of a step are those of `loss.backward()`, computed by hand where `backprop.handles` the
head (bit for bit the same, without autograd's graph).

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

from .backprop import HeadTensors, batch_ok, handles, loss_and_gradients_in_inference_mode
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

    `step` makes the updates that `torch.optim.Adam.step` makes for these settings
    (`torch.optim.adam._multi_tensor_adam`, capturable=False: the same operations in the same order, with the
    same arguments computed the same way), so the parameters after every step are bit for bit those of
    `torch.optim.Adam` (tests/minip/test_training.py). On the CPU each `torch._foreach_*` call there is a loop
    of the one-tensor operation over the parameters (lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_ with
    a scalar); here the parameters are views into one flat buffer, and so are Adam's two moments, so each
    update is that operation once on the buffer: elementwise, each entry computed from the same entries by
    the same arithmetic (the kernels' vector and scalar paths agree; the test compares with torch's Adam on
    parameter sizes that are not multiples of the vector width). It also leaves out the per-step
    bookkeeping: grouping the tensors by device and dtype (one group here), and a tensor step counter per
    parameter, which Adam increments and reads back as a Python float (the count, kept here as that float;
    the bias corrections, equal for all parameters, are computed once). Why not Adam itself:
    constructing a `torch.optim.Optimizer` imports `torch._dynamo`, about 1.4 CPU-seconds per process,
    which is a quarter of a short Min-IP training job; nothing here needs it.
    """

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params = list(params)
        if any(torch.is_complex(p) or p.is_sparse for p in self.params):
            raise RuntimeError("ForeachAdam: real dense parameters only")
        if len({(p.device, p.dtype) for p in self.params}) != 1:
            raise RuntimeError("ForeachAdam: parameters on one device, of one dtype")
        self.param_groups = [{"lr": lr}]  # `_cosine_lr` sets the learning rate here, as on an optimizer
        self.betas, self.eps = betas, eps
        with torch.no_grad():
            self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])
            offset = 0
            for p in self.params:  # each parameter becomes a view of its slice of the buffer (same values)
                p.data = self.flat[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        self.grad, self.denom = torch.empty_like(self.flat), torch.empty_like(self.flat)  # rewritten every step
        # beta2, eps and each step's sqrt(bias_correction2) as the float32 numbers the in-place updates cast
        # them to (a wrapped Python scalar is cast to the tensor's dtype): the same products, sums and
        # quotients, without wrapping a scalar at every step
        self.beta2_f32, self.eps_f32, self.bias_correction2_sqrt_f32 = (
            torch.tensor(x, dtype=self.flat.dtype, device=self.flat.device) for x in (betas[1], eps, 1.0))
        self.steps = 0.0  # Adam's `state["step"]`, as `_get_value` reads it (a float32 count: exact here)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.update()

    def update(self) -> None:
        """`step` without entering no-grad mode: for a caller already in no-grad or inference mode."""
        grads = [p.grad for p in self.params]
        if any(g is None or g.is_sparse for g in grads):  # Adam would skip such a parameter; ours all train
            raise RuntimeError("ForeachAdam: every parameter needs a dense gradient")
        grad = torch.cat([g.reshape(-1) for g in grads], out=self.grad)
        beta1, beta2 = self.betas
        lr = self.param_groups[0]["lr"]
        self.steps += 1.0
        # _multi_tensor_adam, capturable=False, no weight decay, no amsgrad, not maximize:
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(self.beta2_f32)
        self.exp_avg_sq.addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** self.steps
        bias_correction2 = 1 - beta2 ** self.steps
        step_size = (lr / bias_correction1) * -1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        denom = torch.sqrt(self.exp_avg_sq, out=self.denom)
        denom.div_(self.bias_correction2_sqrt_f32.fill_(bias_correction2_sqrt))
        denom.add_(self.eps_f32)
        self.flat.addcdiv_(self.exp_avg, denom, value=step_size)


_ENGINE = getattr(torch.autograd.Variable, "_execution_engine", None)  # what torch.autograd.backward calls


def _backward(loss: torch.Tensor) -> None:
    """`loss.backward()` for a scalar loss, without `torch.autograd.backward`'s argument handling (about 45 us
    of a 2 ms step on the machine measured): the call into the autograd engine that it makes, with the same
    seed gradient (`torch.ones_like(loss)`), no retained graph, gradients accumulated into `.grad`. The
    engine is the same, so the gradients are the same (tests/minip/test_training.py)."""
    if _ENGINE is None:  # a torch without this attribute: the public call
        loss.backward()
        return
    _ENGINE.run_backward((loss,), (torch.ones_like(loss, memory_format=torch.preserve_format),), False, False, (),
                        allow_unreachable=True, accumulate_grad=True)


def _fit(model, batches, steps: int, lr: float, desc: str) -> float:
    """Train for `steps` Adam steps on `batches(step)`; the last step's loss.

    Where `backprop.handles` the head the loop runs in inference mode (the hand-written gradients need no
    autograd bookkeeping; Adam updates tensors made outside it, in place): a batch they do not take
    (`batch_ok`) goes through autograd outside inference mode, on a copy of the batch if it was made inside.
    Otherwise the loop runs without gradient mode except for the forward and backward passes."""
    opt = ForeachAdam(model.parameters(), lr=lr)
    by_hand = handles(model)
    head = HeadTensors(model) if by_hand else None
    loss = None
    with torch.inference_mode() if by_hand else torch.no_grad():
        for step in tqdm(range(steps), desc=desc, mininterval=5.0, leave=False):
            X, T = batches(step)
            _cosine_lr(opt, lr, step, steps)
            opt.zero_grad()
            if by_hand and batch_ok(X, T):  # the gradients of autograd, bit for bit, without its graph
                loss = loss_and_gradients_in_inference_mode(head, X, T)
            else:
                with torch.inference_mode(False):  # gradient mode on
                    if X.is_inference():
                        X, T = X.clone(), T.clone()
                    loss = torch.mean((model(X) - T) ** 2)
                    _backward(loss)
            opt.update()
    return float("nan") if loss is None else float(loss.detach())  # the last step's loss


class _TrainingStream:
    """The training batches of a scaling run: `stream(step)` -> (X, T) float32 tensors on the device, X the
    `batch` sequences `sample_sequences(pool, batch, length, rng)` of that step and T their targets.

    The batches are drawn `CHUNK` steps at a time: one `rng.integers` call of size (k, batch, length)
    gives the same indices as k calls of size (batch, length) one after another (numpy's bounded integers
    consume the bit generator value by value). The targets min_j <x_i, x_j> are computed in float32 on the
    chunk: every product is 0 or 1 and every partial sum an integer <= m (< 2^24), so each inner product is
    exact whatever the order of summation, and T is `minip_targets` of the batch. On the CPU a step's X and
    T are views of the chunk's tensors: torch's allocator aligns a tensor to `ALIGN` bytes, and a step's
    view starts a whole number of `ALIGN`-byte blocks after it when batch * length * m and batch * length
    floats both fill whole blocks, so the matrix products read their inputs at the alignment of a fresh
    tensor. Otherwise (another device, or sizes that break the alignment) each step's X and T are fresh
    copies.
    Steps must be asked for in order; no more than `steps` batches are drawn.
    """

    CHUNK = 64
    ALIGN = 64  # c10's CPU allocator alignment (gAlignment)

    def __init__(self, pool: np.ndarray, batch: int, length: int, steps: int, rng: np.random.Generator,
                 device: torch.device):
        self.pool, self.batch, self.length, self.steps, self.rng, self.device = pool, batch, length, steps, rng, device
        self.start, self.X, self.T = 0, torch.zeros(0), torch.zeros(0)
        rows = batch * length * 4  # bytes of one step's targets; times m: of its sequences
        self.views = torch.device(device).type == "cpu" and rows % self.ALIGN == 0

    def __call__(self, step: int):
        i = step - self.start
        if i >= len(self.X):
            self.start, i = step, 0
            k = min(self.CHUNK, self.steps - step)
            idx = self.rng.integers(0, len(self.pool), size=(k, self.batch, self.length))
            self.X = torch.from_numpy(self.pool[idx]).to(torch.float32)  # a new tensor: torch's alignment
            self.T = torch.matmul(self.X, self.X.transpose(-1, -2)).amin(-1)
        if self.views:
            return self.X[i], self.T[i]
        return self.X[i].to(self.device, copy=True), self.T[i].to(self.device, copy=True)


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

    batches = _TrainingStream(pool.train, train.batch, length, train.steps, rng, dev)
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
