"""Best feasible value by multi-start projected gradient ascent (a lower bound on max g, any query).

Problem. max_{Delta} g(Z0 + Delta)  s.t.  ||Delta_j|| <= r for every attended token j, with g the head
functional of `HeadProblem` (fixed or varying query). For a varying query this is NP-hard, so the
search below only returns a *feasible value*: a certified lower bound on max g, never an upper bound,
and possibly short of the optimum (local maxima).

Method. All starts run as one batch in float64 torch with autograd.
  Phase 1 (exploration): Delta <- Proj_B( Delta + eta_k r D(grad g) ),
    D = sign(grad) (steepest ascent for the box) or grad_j / ||grad_j||_2 per token (ball),
    eta_k decays geometrically from `step_size` to `step_size * final_step_ratio`,
    Proj_B = per-coordinate clipping (linf) or per-token radial scaling (l2).
  Phase 2 (polish, monotone): from each start's best point, Delta' = Proj_B(Delta + lr grad g),
    accepted iff g increases; lr grows x1.5 on success and shrinks x0.5 on failure (per start).
    This converges to a stationary point of the constrained problem, which the sign steps alone
    (fixed step lengths) do not.
Starts: the nominal point, the ball point along the gradient at the nominal point ("sign-of-gradient"
start) and along the gradient at random interior points, the best of `screen` random vertices of the
box (points of the sphere for l2) and uniform random points of the ball (one batched evaluation), plus
any caller-supplied `starts`.
Every iterate of every start is scored; the best one is recomputed with `problem.value` (numpy) after
a feasibility check (`problem.in_ball`; the point is shrunk toward Z0 by up to a relative 1e-6 if
rounding of Z0 + Delta left a tiny ball, and the nominal value is the floor, so the result is finite).

Cost. g reads each token through two directions: the value w_j = z_j . (W_V c) + b_V . c always, and
the score s_j = z_j . (W_K q) / sqrt(d_h) + b_K . q / sqrt(d_h), q = q0 for a fixed query and q = z_i W_Q + b_Q
(the query token's own) for a varying one, so one product Z [W_K q / sqrt(d_h) | u_w] (d x 2 per start) replaces
the three (d x d_h) projections. `fused=False` evaluates the three full
projections (the reference path of the cost benchmark). `stop_tol` ends the
polish phase once no start has gained more than stop_tol x (the best value's distance from the
nominal value) over `patience` consecutive steps. `device` is resolved by
`attncert.configuration.device.resolve_device` (default cpu).

The minimum is the maximum of -g (sense="min").
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from attncert.head.problem import HeadProblem
from attncert.configuration.device import resolve_device


@dataclass
class AscentResult:
    value: float  # problem.value(Z) of the best feasible point found
    Z: np.ndarray  # (n, d) feasible tokens
    sense: str
    start_values: np.ndarray  # best value reached from each start
    seconds: float


class _TorchHead:
    """g for a batch of perturbations Delta (B, n, d), float64, on `device`."""

    def __init__(self, problem: HeadProblem, device: torch.device, fused: bool = True):
        t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=torch.float64, device=device)  # noqa: E731
        self.p, self.fused, self.device = problem, fused, device
        self.sq = float(np.sqrt(problem.d_head))
        self.Z0 = t(problem.Z0)
        q0 = problem.nominal_query()
        if not fused:
            self.WQ, self.WK, self.WV = t(problem.W_Q), t(problem.W_K), t(problem.W_V)
            self.bQ, self.bK, self.bV = t(problem.b_Q), t(problem.b_K), t(problem.b_V)
            self.c, self.q0 = t(problem.c), t(q0)
            return
        u_w, w_b = problem.W_V @ problem.c, float(problem.b_V @ problem.c)
        if problem.mode == "fixed":  # s_j = z_j . u_s + s_b, w_j = z_j . u_w + w_b
            U = np.stack([problem.W_K @ q0 / self.sq, u_w], axis=1)
            self.bias = t([float(problem.b_K @ q0) / self.sq, w_b])
        else:  # q = z_i W_Q + b_Q, s_j = z_j . (W_K q) / sqrt(d_h) + b_K . q / sqrt(d_h), w_j = z_j . u_w + w_b
            self.WQ, self.bQ = t(problem.W_Q), t(problem.b_Q)
            self.WKt, self.bK = t(problem.W_K.T / self.sq), t(problem.b_K / self.sq)
            self.u_w, self.w_b = t(u_w), w_b
            return
        self.U = t(U)

    def __call__(self, delta: torch.Tensor) -> torch.Tensor:
        Z = self.Z0 + delta
        if not self.fused:
            q = (
                self.q0.expand(Z.shape[0], -1)
                if self.p.mode == "fixed"
                else Z[:, self.p.query_index] @ self.WQ + self.bQ
            )
            s = torch.einsum("bnh,bh->bn", Z @ self.WK + self.bK, q) / self.sq
            w = (Z @ self.WV + self.bV) @ self.c
            return (torch.softmax(s, dim=1) * w).sum(1)
        if self.p.mode == "fixed":
            P = Z @ self.U + self.bias
            return (torch.softmax(P[..., 0], dim=1) * P[..., 1]).sum(1)
        q = Z[:, self.p.query_index] @ self.WQ + self.bQ  # (B, d_h)
        V = torch.stack([q @ self.WKt, self.u_w.expand(Z.shape[0], -1)], dim=2)  # (B, d, 2): W_K q / sqrt(d_h), u_w
        P = torch.bmm(Z, V)  # (B, n, 2)
        s = P[..., 0] + (q @ self.bK)[:, None]
        return (torch.softmax(s, dim=1) * (P[..., 1] + self.w_b)).sum(1)


def _project(delta: torch.Tensor, r: float, norm: str) -> torch.Tensor:
    if norm == "linf":
        return delta.clamp(-r, r)
    nrm = delta.norm(dim=2, keepdim=True)
    return delta * torch.clamp(r / nrm.clamp_min(1e-300), max=1.0)


def _project_step(delta: torch.Tensor, step: torch.Tensor, r: float, norm: str) -> torch.Tensor:
    """_project(delta + step), formed in the memory of `step` (a temporary of the caller) where the norm allows."""
    if norm == "linf":
        return step.add_(delta).clamp_(-r, r)
    return _project(delta + step, r, norm)


def _direction(grad: torch.Tensor, norm: str) -> torch.Tensor:
    if norm == "linf":
        return grad.sign()
    return grad / grad.norm(dim=2, keepdim=True).clamp_min(1e-300)


def _random_starts(rng: np.random.Generator, k: int, n: int, d: int, r: float, norm: str, vertex: bool,
                   out: np.ndarray | None = None) -> np.ndarray:
    """r X for k random X of shape (n, d): vertices of the unit box / points of the unit sphere (vertex), else
    uniform points of the box / ball; written into `out` (k, n, d) when given. The box's draws are those of
    rng.choice([-1.0, 1.0]) (integers i in {0, 1}; 2 r i - r is r (2 i - 1) exactly) and of rng.uniform(-1, 1)
    (-1 + 2 u, u = rng.random()), formed in place."""
    X = np.empty((k, n, d)) if out is None else out
    if norm == "linf":
        if vertex:
            X[...] = rng.integers(0, 2, size=(k, n, d))
            X *= 2.0 * r
            X -= r
        else:
            rng.random(out=X)
            X *= 2.0
            X -= 1.0
            X *= r
        return X
    G = rng.standard_normal((k, n, d))
    G /= np.linalg.norm(G, axis=2, keepdims=True)
    if not vertex:
        G *= rng.uniform(0, 1, size=(k, n, 1)) ** (1.0 / d)
    np.multiply(r, G, out=X)
    return X


def best_feasible_ascent(problem: HeadProblem, restarts: int = 16, steps: int = 200, seed: int = 0,
                         step_size: float = 0.25, final_step_ratio: float = 1e-3, polish_fraction: float = 0.4,
                         screen: int = 256, sense: str = "max", starts: np.ndarray | None = None,
                         num_threads: int | None = None, device: str | torch.device | None = None,
                         fused: bool = True, stop_tol: float = 0.0, patience: int = 10) -> AscentResult:
    """Multi-start projected gradient ascent; returns the best feasible value and its tokens.

    restarts: number of generated starts (>= 2: nominal and gradient start, then random ones);
    steps: iterations per start; the last `polish_fraction` of them are the monotone polish phase;
    screen: random points evaluated once, the best of which become the random starts;
    starts: optional extra perturbations (k, n, d) to start from (e.g. a known maximiser: warm start);
    num_threads: torch intra-op threads for this call (restored afterwards); None leaves torch's setting;
    device: 'cpu' (default), 'cuda', 'cuda:N' (attncert.configuration.device.resolve_device);
    fused: evaluate g through the few directions it reads (see the module docstring); False = the
    three full projections; stop_tol, patience: early end of the polish phase (0 = never).
    """
    kw = dict(restarts=restarts, steps=steps, seed=seed, step_size=step_size, final_step_ratio=final_step_ratio,
              polish_fraction=polish_fraction, screen=screen, starts=starts, device=device, fused=fused,
              stop_tol=stop_tol, patience=patience)
    if num_threads is not None:
        prev = torch.get_num_threads()
        torch.set_num_threads(num_threads)
        try:
            return best_feasible_ascent(problem, sense=sense, **kw)
        finally:
            torch.set_num_threads(prev)
    if sense == "min":
        res = best_feasible_ascent(problem.negated(), sense="max", **kw)
        return AscentResult(-res.value, res.Z, "min", -res.start_values, res.seconds)
    if sense != "max":
        raise ValueError(f"sense must be 'max' or 'min'; got {sense!r}")
    t0 = time.perf_counter()
    dev = resolve_device(device)
    rng = np.random.default_rng(seed)
    n, d, r, norm = problem.n, problem.d, problem.radius, problem.norm
    head = _TorchHead(problem, dev, fused)
    T = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=torch.float64, device=dev)  # noqa: E731

    def grad_at(delta: np.ndarray) -> torch.Tensor:
        x = T(delta).requires_grad_(True)
        head(x).sum().backward()
        return x.grad

    n_rand = max(restarts - 2, 0)
    n_grad_rand = n_rand // 4
    n_screen = n_rand - n_grad_rand
    pieces = [torch.zeros((1, n, d), dtype=torch.float64, device=dev)]
    if restarts >= 2:
        pieces.append(r * _direction(grad_at(np.zeros((1, n, d))), norm))
    if n_grad_rand:
        X = _random_starts(rng, n_grad_rand, n, d, r, norm, vertex=False)
        pieces.append(r * _direction(grad_at(X), norm))
    if n_screen:  # the best of `screen` random vertices / interior points (one batched evaluation)
        k = max(screen, n_screen)
        cand = np.empty((k, n, d))
        _random_starts(rng, k - k // 2, n, d, r, norm, vertex=True, out=cand[:k - k // 2])
        _random_starts(rng, k // 2, n, d, r, norm, vertex=False, out=cand[k - k // 2:])
        cand = T(cand)
        with torch.no_grad():
            v = head(cand)
        pieces.append(cand[torch.argsort(-v, stable=True)[:n_screen]])
    if starts is not None:
        pieces.append(T(starts).reshape(-1, n, d))
    delta = _project(torch.cat(pieces), r, norm)

    best_val = torch.full((delta.shape[0],), -torch.inf, dtype=torch.float64, device=dev)
    best_delta = delta.clone()

    def record(val: torch.Tensor, point: torch.Tensor):
        nonlocal best_val
        improved = val > best_val
        best_val = torch.where(improved, val, best_val)
        best_delta[improved] = point[improved]

    # phase 1: steepest-ascent steps of decaying length (explores, crosses the ball quickly)
    n1 = steps - int(polish_fraction * steps)
    for k in range(n1):
        val = head(delta.requires_grad_(True))
        (grad,) = torch.autograd.grad(val.sum(), delta)
        delta = delta.detach()
        record(val.detach(), delta)
        eta = step_size * final_step_ratio ** (k / max(n1 - 1, 1))
        delta = _project_step(delta, _direction(grad, norm).mul_(eta * r), r, norm)
    # phase 2: monotone projected gradient ascent from each start's best point, adaptive step. The candidate is
    # evaluated with its gradient: an accepted candidate is the next point, so its value and gradient are the next
    # step's (each start's row of the batch is computed on its own), and a rejected one leaves value and gradient
    delta = best_delta.clone()
    lr, nominal, history = None, problem.nominal_value(), []
    n2 = steps - n1
    x = delta.clone().requires_grad_(True)
    val = head(x)
    grad = torch.autograd.grad(val.sum(), x)[0] if n2 else None
    val = val.detach()
    for k in range(n2):
        if lr is None:
            lr = 0.1 * r / grad.abs().amax(dim=(1, 2)).clamp_min(1e-300)
        x = _project_step(delta, grad * lr[:, None, None], r, norm).requires_grad_(True)
        vc_graph = head(x)
        vc, cand = vc_graph.detach(), x.detach()
        ok = vc > val
        delta = torch.where(ok[:, None, None], cand, delta)
        lr = torch.where(ok, lr * 1.5, lr * 0.5)
        record(torch.where(ok, vc, val), delta)
        stop = k + 1 == n2
        if stop_tol > 0:
            history.append(best_val.clone())
            if len(history) > patience:
                gain = float((history[-1] - history[-1 - patience]).max())
                stop = stop or gain <= stop_tol * max(float(best_val.max()) - nominal, 1e-300)
        val = torch.where(ok, vc, val)
        if stop:
            break
        (grad_c,) = torch.autograd.grad(vc_graph.sum(), x)
        grad = torch.where(ok[:, None, None], grad_c, grad)
    record(val, delta)

    # recompute the best few candidates directly, keep the best feasible one (the nominal point is
    # always feasible: the result is finite even when rounding keeps every candidate outside a tiny ball)
    value, Z_best = problem.value(problem.Z0), problem.Z0.copy()
    best_np, order = best_delta.cpu().numpy(), torch.argsort(best_val, descending=True)[:4].tolist()
    # inside the ball in exact arithmetic, not only in float64: the float difference Z - Z0 and a norm of d
    # entries err by at most (d + 4) u relative, so a point inside by that margin is inside exactly (the audit
    # checks it in ball arithmetic)
    margin = -problem.radius * (problem.Z0.shape[1] + 4) * 2.0 ** -53
    for b in order:
        D = best_np[b]
        # Z0 + D rounds by ~u |Z0| per coordinate: relative to r that needs a shrink of ~u |Z0| / r
        for shrink in (0.0, 4e-16, 1e-14, 1e-12, 1e-9, 1e-6):
            Z = problem.Z0 + D * (1.0 - shrink)
            if problem.in_ball(Z, tol=margin):
                v = problem.value(Z)
                if v > value:
                    value, Z_best = v, Z
                break
    return AscentResult(float(value), Z_best, "max", best_val.cpu().numpy().copy(), time.perf_counter() - t0)
