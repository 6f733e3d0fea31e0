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

Cost. g reads each token through few directions: the value w_j = z_j . (W_V c) + b_V . c always, and
for a fixed query the score s_j = z_j . (W_K q0) / sqrt(d_h) + const, so one product Z [u_s | u_w]
(d x 2) replaces the (d x d_h) projections (fixed query), and Z [W_K | u_w] (d x (d_h + 1)) plus the
query's own z_i W_Q replace three of them (varying query). `fused=False` evaluates the three full
projections (the reference path of the cost benchmark). A polish step evaluates its candidate with the
gradient there: a start that accepts it begins the next step with that value and gradient instead of
recomputing them (the same numbers: the same calls on the same rows). `stop_tol` ends the
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


def _by_chunk(fn, chunk: int, *xs: torch.Tensor) -> torch.Tensor:
    """fn on consecutive chunks of `chunk` rows of xs, joined; one call on the whole tensors when one chunk holds
    every row (the same call on the same data as the single chunk, without splitting)."""
    if chunk >= xs[0].shape[0]:
        return fn(*xs)
    return torch.cat([fn(*parts) for parts in zip(*(x.split(chunk) for x in xs))])


class _TorchHead:
    """g for a batch of perturbations Delta (B, n, d), float64, on `device`.

    `chunk`: the rows come in consecutive chunks of this many (one chunk per unit of a batched ascent); the
    varying query's two per-row products (the query z_i W_Q and the scores q . k_j) are then formed chunk by
    chunk, so that every row is computed by the very same calls as in a batch of one chunk alone (the library's
    matrix products of a (B, .) operand need not round a row alike for every B; the others do, row by row).
    """

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
        else:  # k_j = z_j W_K + b_K, w_j = z_j . u_w + w_b, q = z_i W_Q + b_Q
            U = np.concatenate([problem.W_K, u_w[:, None]], axis=1)
            self.bias = t(np.append(problem.b_K, w_b))
            self.WQ, self.bQ = t(problem.W_Q), t(problem.b_Q)
        self.U = t(U)

    def __call__(self, delta: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
        Z = self.Z0 + delta
        chunk = Z.shape[0] if chunk is None else chunk
        if not self.fused:
            if self.p.mode == "fixed":
                q = self.q0.expand(Z.shape[0], -1)
            else:
                q = _by_chunk(lambda z: z[:, self.p.query_index] @ self.WQ + self.bQ, chunk, Z)
            s = _by_chunk(lambda k, qc: torch.einsum("bnh,bh->bn", k, qc), chunk, Z @ self.WK + self.bK, q) / self.sq
            w = (Z @ self.WV + self.bV) @ self.c
            return (torch.softmax(s, dim=1) * w).sum(1)
        P = Z @ self.U + self.bias
        if self.p.mode == "fixed":
            s = P[..., 0]
        else:
            s = _by_chunk(lambda Pc, zc: torch.einsum("bnh,bh->bn", Pc[..., :-1], zc @ self.WQ + self.bQ),
                          chunk, P, Z[:, self.p.query_index]) / self.sq
        return (torch.softmax(s, dim=1) * P[..., -1]).sum(1)


def _project(delta: torch.Tensor, r: float | torch.Tensor, norm: str) -> torch.Tensor:
    """Onto the ball of radius r (a number, or one per row: shape (B, 1, 1)); r / |x| is formed as (1 / |x|) r,
    the way torch divides a number by a tensor, so that a radius per row rounds as a single one."""
    if norm == "linf":
        return delta.clamp(-r, r)
    nrm = delta.norm(dim=2, keepdim=True)
    return delta * torch.clamp(nrm.clamp_min(1e-300).reciprocal() * r, max=1.0)


def _direction(grad: torch.Tensor, norm: str) -> torch.Tensor:
    if norm == "linf":
        return grad.sign()
    return grad / grad.norm(dim=2, keepdim=True).clamp_min(1e-300)


def _unit_starts(rng: np.random.Generator, k: int, n: int, d: int, norm: str, vertex: bool) -> np.ndarray:
    """k random points of the unit ball (vertices of the box / points of the sphere, or uniform inside)."""
    if norm == "linf":
        return rng.choice([-1.0, 1.0], size=(k, n, d)) if vertex else rng.uniform(-1, 1, size=(k, n, d))
    X = rng.standard_normal((k, n, d))
    X /= np.linalg.norm(X, axis=2, keepdims=True)
    if not vertex:
        X *= rng.uniform(0, 1, size=(k, n, 1)) ** (1.0 / d)
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
    return best_feasible_ascents([problem], restarts=restarts, steps=steps, seed=seed, step_size=step_size,
                                 final_step_ratio=final_step_ratio, polish_fraction=polish_fraction, screen=screen,
                                 sense=sense, starts=None if starts is None else [starts], num_threads=num_threads,
                                 device=device, fused=fused, stop_tol=stop_tol, patience=patience)[0]


def same_head(a: HeadProblem, b: HeadProblem) -> bool:
    """Do a and b differ at most in their radius (and meta)? Then one batched ascent can run both."""
    return (a.mode == b.mode and a.norm == b.norm and a.query_index == b.query_index
            and all(np.array_equal(getattr(a, k), getattr(b, k))
                    for k in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "Z0", "c")))


def best_feasible_ascents(problems: list[HeadProblem], restarts: int = 16, steps: int = 200, seed: int = 0,
                          step_size: float = 0.25, final_step_ratio: float = 1e-3, polish_fraction: float = 0.4,
                          screen: int = 256, sense: str = "max", starts: list[np.ndarray] | None = None,
                          num_threads: int | None = None, device: str | torch.device | None = None,
                          fused: bool = True, stop_tol: float = 0.0, patience: int = 10) -> list[AscentResult]:
    """`best_feasible_ascent` of each problem, all run as one batch: the problems may differ only in their
    radius (`same_head`), `starts` (one array per problem, or None) must give each the same number of starts.

    Each problem's starts, steps, step lengths and early stop are its own, computed exactly as it would be alone
    (same random draws, same per-row arithmetic: `_TorchHead`'s chunks), so each result equals the one of
    `best_feasible_ascent` on it; only the fixed cost per step is shared. `seconds` of each result is the wall
    time of the batch divided by the number of problems.
    """
    kw = dict(restarts=restarts, steps=steps, seed=seed, step_size=step_size, final_step_ratio=final_step_ratio,
              polish_fraction=polish_fraction, screen=screen, starts=starts, device=device, fused=fused,
              stop_tol=stop_tol, patience=patience)
    if not problems:
        return []
    if any(not same_head(problems[0], p) for p in problems[1:]):
        raise ValueError("a batched ascent needs problems that differ only in the radius")
    if starts is not None and (len(starts) != len(problems)
                               or len({np.asarray(s).reshape(-1, problems[0].n, problems[0].d).shape[0]
                                       for s in starts}) != 1):
        raise ValueError("starts: one array per problem, each with the same number of starts")
    if num_threads is not None:
        prev = torch.get_num_threads()
        torch.set_num_threads(num_threads)
        try:
            return best_feasible_ascents(problems, sense=sense, **kw)
        finally:
            torch.set_num_threads(prev)
    if sense == "min":
        res = best_feasible_ascents([p.negated() for p in problems], sense="max", **kw)
        return [AscentResult(-r.value, r.Z, "min", -r.start_values, r.seconds) for r in res]
    if sense != "max":
        raise ValueError(f"sense must be 'max' or 'min'; got {sense!r}")
    t0 = time.perf_counter()
    dev = resolve_device(device)
    K, first = len(problems), problems[0]
    n, d, norm = first.n, first.d, first.norm
    radii = [p.radius for p in problems]
    head = _TorchHead(first, dev, fused)
    T = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=torch.float64, device=dev)  # noqa: E731

    def per_row(values, rows: int) -> torch.Tensor:
        """(K rows, 1, 1) per-problem numbers, each repeated over its `rows` rows."""
        return T(np.repeat(np.asarray(values, dtype=np.float64), rows))[:, None, None]

    def grad_at(delta: torch.Tensor, chunk: int) -> torch.Tensor:
        x = delta.clone().requires_grad_(True)
        head(x, chunk).sum().backward()
        return x.grad

    def scaled(X: np.ndarray) -> torch.Tensor:
        """r X for every problem's radius r, the problems' rows one after the other."""
        X = T(X)
        return torch.cat([r * X for r in radii])

    # the random starts: every problem would draw the same numbers from its own generator (same seed), so they are
    # drawn once and scaled by each radius
    rng = np.random.default_rng(seed)
    n_rand = max(restarts - 2, 0)
    n_grad_rand = n_rand // 4
    n_screen = n_rand - n_grad_rand
    pieces = [torch.zeros((K, 1, n, d), dtype=torch.float64, device=dev)]
    if restarts >= 2:
        g = grad_at(torch.zeros((K, n, d), dtype=torch.float64, device=dev), 1)
        pieces.append((per_row(radii, 1) * _direction(g, norm))[:, None])
    if n_grad_rand:
        X = scaled(_unit_starts(rng, n_grad_rand, n, d, norm, vertex=False))
        pieces.append((per_row(radii, n_grad_rand) * _direction(grad_at(X, n_grad_rand), norm))
                      .reshape(K, n_grad_rand, n, d))
    if n_screen:  # the best of `screen` random vertices / interior points (one batched evaluation per problem)
        k = max(screen, n_screen)
        X = T(np.concatenate([_unit_starts(rng, k - k // 2, n, d, norm, vertex=True),
                              _unit_starts(rng, k // 2, n, d, norm, vertex=False)]))
        best = []
        with torch.no_grad():
            for r in radii:
                cand = r * X
                best.append(cand[torch.argsort(-head(cand, k), stable=True)[:n_screen]])
        pieces.append(torch.stack(best))
    if starts is not None:
        pieces.append(torch.stack([T(s).reshape(-1, n, d) for s in starts]))
    S = sum(p.shape[1] for p in pieces)  # starts per problem; rows of problem u: u S .. (u + 1) S - 1
    r_rows = per_row(radii, S) if K > 1 else radii[0]  # one radius: a number (torch's clamp to numbers is faster)
    delta = _project(torch.cat(pieces, dim=1).reshape(K * S, n, d), r_rows, norm)

    def step_projected(delta: torch.Tensor, step: torch.Tensor, problems_in=None) -> torch.Tensor:
        """_project(delta + step, r, norm) with r the radius of each row's problem, in place in `step`; the rows are
        those of the problems `problems_in` (None: all), S each, in order. linf: clamped problem by problem to its
        radius (the same numbers as one clamp to the radius per row: a clamp selects delta + step or a bound)."""
        step.add_(delta)
        us = range(K) if problems_in is None else problems_in
        if norm != "linf":
            return _project(step, r_rows if problems_in is None else r_rows[rows], norm)
        for i, u in enumerate(us):
            step[i * S:(i + 1) * S].clamp_(-radii[u], radii[u])
        return step

    best_val = torch.full((K * S,), -torch.inf, dtype=torch.float64, device=dev)
    best_delta = delta.clone()

    def record(val: torch.Tensor, point: torch.Tensor, rows: torch.Tensor | None = None):
        """Keep each row's best value and point; rows: the rows `val` and `point` are of (None: all)."""
        nonlocal best_val, best_delta
        if rows is None:
            improved = val > best_val
            best_val = torch.where(improved, val, best_val)
            best_delta[improved] = point[improved]
            return
        improved = val > best_val[rows]
        best_val = best_val.index_copy(0, rows, torch.where(improved, val, best_val[rows]))
        best_delta = best_delta.index_copy(0, rows, torch.where(improved[:, None, None], point, best_delta[rows]))

    # phase 1: steepest-ascent steps of decaying length (explores, crosses the ball quickly)
    n1 = steps - int(polish_fraction * steps)
    for k in range(n1):
        x = delta.requires_grad_(True)
        val = head(x, S)
        delta = x.detach()
        record(val.detach(), delta)
        (grad,) = torch.autograd.grad(val.sum(), x)
        eta = step_size * final_step_ratio ** (k / max(n1 - 1, 1))
        step = grad.sign_() if norm == "linf" else _direction(grad, norm)
        delta = step_projected(delta, step.mul_(eta * r_rows))
    # phase 2: monotone projected gradient ascent from each start's best point, adaptive step; a problem stops
    # on its own: its rows then stay as they are and leave the batch (`rows`: those of the problems still running)
    delta = best_delta.clone()
    nominal = T([p.nominal_value() for p in problems])
    lr, history = None, []
    rows = None  # None: every row
    running = torch.ones(K, dtype=torch.bool, device=dev)

    def take(t: torch.Tensor) -> torch.Tensor:
        return t if rows is None else t[rows]

    def put(full: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
        return part if rows is None else full.index_copy(0, rows, part)

    ahead = None  # (value, gradient) at the rows `rows` of delta, carried over from the last step (see below)
    alive = None  # the problems still running (None: all)
    for k in range(steps - n1):
        if ahead is None:
            x = (delta.clone() if rows is None else delta[rows]).requires_grad_(True)
            val = head(x, S)
            (grad,) = torch.autograd.grad(val.sum(), x)
            val, point = val.detach(), x.detach()
        else:
            (val, grad), point = ahead, take(delta)
        if lr is None:
            r_col = r_rows[:, 0, 0] if K > 1 else r_rows
            lr = grad.abs().amax(dim=(1, 2)).clamp_min(1e-300).reciprocal() * (0.1 * r_col)  # 0.1 r / max
        lr_run = take(lr)
        # the candidate's value with its gradient: a row that accepts it starts the next step there, and this is
        # the very value and gradient that step would compute (same rows, same calls, row by row)
        xc = step_projected(point, lr_run[:, None, None] * grad, alive).requires_grad_(True)
        vc = head(xc, S)
        (gc,) = torch.autograd.grad(vc.sum(), xc)
        vc, cand = vc.detach(), xc.detach()
        ok = vc > val
        point[ok] = cand[ok]  # (point is delta's rows: a copy, or delta itself)
        grad[ok] = gc[ok]
        delta = put(delta, point)
        lr = put(lr, torch.where(ok, lr_run * 1.5, lr_run * 0.5))
        val = torch.where(ok, vc, val)
        record(val, point, rows)
        ahead = (val, grad)
        if stop_tol > 0:
            history.append(best_val.clone())
            if len(history) > patience:
                gain = (history[-1] - history[-1 - patience]).reshape(K, S).amax(dim=1)
                reach = (best_val.reshape(K, S).amax(dim=1) - nominal).clamp_min(1e-300)
                was = int(running.sum())
                running = running & ~(gain <= stop_tol * reach)
                if not bool(running.any()):
                    break
                if int(running.sum()) != was:  # a problem stopped: the next step evaluates the rows left anew
                    rows, ahead = torch.nonzero(running.repeat_interleave(S)).flatten(), None
                    alive = torch.nonzero(running).flatten().tolist()
    with torch.no_grad():
        record(head(delta, S), delta)

    best_np, values = best_delta.cpu().numpy().reshape(K, S, n, d), best_val.reshape(K, S)
    seconds = (time.perf_counter() - t0) / K
    return [AscentResult(*_best_feasible_point(p, best_np[u], values[u]), "max", values[u].cpu().numpy().copy(),
                         seconds) for u, p in enumerate(problems)]


def _best_feasible_point(problem: HeadProblem, best_np: np.ndarray, best_val: torch.Tensor) -> tuple[float, np.ndarray]:
    """(value, Z): the best of the few best candidates recomputed directly, feasible (the nominal point is always
    feasible: the result is finite even when rounding keeps every candidate outside a tiny ball)."""
    value, Z_best = problem.value(problem.Z0), problem.Z0.copy()
    order = torch.argsort(best_val, descending=True)[:4].tolist()
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
    return float(value), Z_best
