"""Second-order analysis of the block residual f(delta) = g(delta) - g(0) - grad g(0) . delta.

g_h(delta) = c_h . F(x0 + delta e_i) (block_map.py) for a specification row c_h; the perturbation set
is the box ||delta||_inf <= r. Everything here is about the second-order term of f,

    f(delta) = 1/2 delta^T H delta + O(r^3),   H = Hessian of g at 0   (torch.func.hessian),

and its decomposition over the scalar nonlinear nodes n of F (chain rule on the computation graph):

    H = sum_n lambda_n * J_n^T (Hessian of phi_n at its nominal input) J_n,

with J_n the Jacobian of the node's input(s) with respect to delta and lambda_n = dg / d(node output)
(the adjoint). For a unary node z -> phi(z) (z = j . delta):   H_n = lambda phi''(z0) j j^T;
for a product node (x, y) -> x y:                              H_n = lambda (j_x j_y^T + j_y j_x^T).

Quantities (all second-order maxima scale exactly as r^2; they are computed at r = 1):

* joint maximum   M  = max_{u in [-1,1]^d} 1/2 u^T H u. Maximizing an indefinite quadratic over a box
  is NP-hard: `box_qp_max` returns a best-found value (a lower bound on M: multi-start projected
  gradient ascent, then exact coordinate ascent, i.e. 1-flip vertex search at the box faces) and
  `box_qp_upper` an upper bound from the dual of the SDP relaxation (not audited),
      1/2 u^T H u <= 1/2 sum_k max(D_kk + lambda_max(H - D), 0)   for every diagonal D,
  minimized over D by projected subgradient steps.
* per-operation maxima M_n = max_{u in box} 1/2 u^T H_n u, exact in closed form:
      unary:   M_n = 1/2 max(lambda phi'', 0) ||j||_1^2;
      product: M_n = max over the 2-D zonotope {(j_x . u, j_y . u)} of lambda x y, attained on its
               boundary (x y is harmonic), so on one of its 2d edges (`max_bilinear_box`).
  per-op sum S = sum_n M_n >= M (max of a sum <= sum of maxima).
* softmax as one operation: per attention head of block l, the exps and reciprocals of that head are
  replaced by one operation s -> softmax(s) on its score vector s (n entries):
      H_softmax = J_s^T (sum_j lambda_{a_j} Hessian of softmax_j(s0)) J_s,
  whose box maximum is again found by `box_qp_max` (low-rank form), seeded with the joint maximizer.
* CROWN's leading order: with exact intermediate intervals, CROWN's bound on f is
  sum_unary M_n + sum_products |lambda| ||j_x||_1 ||j_y||_1 + O(r^3) (`crown_leading_order`).
* effective rank of the curvature: (sum |mu_k|)^2 / sum mu_k^2 over the eigenvalues mu of H
  (the participation ratio of the eigenvalue magnitudes: d for a flat spectrum, 1 for rank one).
* ascent: multi-start projected sign-gradient ascent on f itself (exact float64 evaluation),
  a lower bound on max f. Its starts: +-u* and +-u2 of the box-QP search, random vertices, and +- the best
  vertices of the SDP relaxation's hyperplane rounding (`sdp_rounding`; a search heuristic, no bound).
"""
from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.func import hessian, jacfwd, jacrev, vmap

from attncert.block.map import DTYPE, BlockTransition, Tape, forward, specification_values
from attncert.block.certificate import certify_transition
from attncert.block.crown import crown_bounds
from attncert.block.box_qp import (QuadraticForms, box_qp_max, box_qp_upper, effective_rank, entropy_rank,
                                   spectral_ratio, stable_rank)
from attncert.block.sdp_rounding import rounding_starts


# --------------------------------------------------------------------------------------------------
# Curvature data: gradient, Hessian, node Jacobians and adjoints at delta = 0
# --------------------------------------------------------------------------------------------------
@dataclass
class Curvature:
    g0: torch.Tensor             # (m,)
    gradient: torch.Tensor       # (m, d)
    hessian: torch.Tensor        # (m, d, d)   torch.func
    jac: dict                    # group -> (width, d) or ((width, d), (width, d)) for products
    z0: dict                     # group -> nominal node input (width,) or (x0, y0)
    adjoint: dict                # group -> (m, width)
    scores_jac: torch.Tensor     # (H, n, d)
    scores0: torch.Tensor        # (H, n)


def _node_inputs(tr: BlockTransition):
    def fn(delta):
        tape = Tape()
        forward(tr, delta, tape)
        return tape.inputs, tape.captures["attn.scores"]
    return fn


def curvature(tr: BlockTransition, C: torch.Tensor) -> Curvature:
    """Gradient, Hessian (torch.func) and the per-node data of g = C F at delta = 0."""
    zero = torch.zeros(tr.d, dtype=DTYPE)

    def g(delta):
        return specification_values(tr, C, delta)

    g0 = g(zero).detach()
    grad = jacrev(g)(zero).detach()
    H = jacfwd(jacrev(g))(zero).detach()
    H = 0.5 * (H + H.transpose(-1, -2))
    fn = _node_inputs(tr)
    with torch.no_grad():
        z0, s0 = fn(zero)
    jac, sjac = jacfwd(fn)(zero)
    eps0 = {}
    for name, val in z0.items():
        eps0[name] = torch.zeros_like(val[0] if isinstance(val, tuple) else val)

    def g_eps(eps):
        return specification_values(tr, C, zero, Tape(eps))

    adjoint = jacrev(g_eps)(eps0)
    return Curvature(
        g0=g0,
        gradient=grad,
        hessian=H,
        jac={k: (tuple(t.detach() for t in v) if isinstance(v, tuple) else v.detach()) for k, v in jac.items()},
        z0={k: (tuple(t.detach() for t in v) if isinstance(v, tuple) else v.detach()) for k, v in z0.items()},
        adjoint={k: v.detach() for k, v in adjoint.items()},
        scores_jac=sjac.detach(),
        scores0=s0.detach(),
    )


def second_derivatives(tr: BlockTransition, cv: Curvature) -> dict:
    """phi''(z0) for every unary node group."""
    return {grp.name: grp.curve.d2(cv.z0[grp.name]) for grp in tr.groups if grp.kind == "unary"}


def node_hessians(tr: BlockTransition, cv: Curvature) -> dict:
    """Per node group, the summed H_n over its nodes, (m, d, d) each (the exact chain-rule terms)."""
    d2 = second_derivatives(tr, cv)
    out = {}
    for grp in tr.groups:
        lam = cv.adjoint[grp.name]                               # (m, width)
        if grp.kind == "unary":
            J = cv.jac[grp.name]                                 # (width, d)
            w = lam * d2[grp.name]                               # (m, width)
            out[grp.name] = torch.einsum("mw,wd,we->mde", w, J, J)
        else:
            Jx, Jy = cv.jac[grp.name]
            A = torch.einsum("mw,wd,we->mde", lam, Jx, Jy)
            out[grp.name] = A + A.transpose(-1, -2)
    return out


# --------------------------------------------------------------------------------------------------
# Per-operation maxima (exact)
# --------------------------------------------------------------------------------------------------
def max_bilinear_box(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """max over u in [-1,1]^d of (a . u)(b . u), for rows a, b (N, d); exact.

    The image of the box is the zonotope Z = {sum_k u_k (a_k, b_k)}. With every generator turned into
    the upper half plane and sorted by angle, the chain P_0 = -sum g_k, P_m = P_{m-1} + 2 g_(m) is
    half of Z's boundary (the other half is -chain, and x y is even). On the edge P + 2 t g, t in [0,1],
    x y = (P_x + 2 t g_x)(P_y + 2 t g_y) is a quadratic in t: its maximum is at an end point or at the
    stationary point when 4 g_x g_y < 0.
    """
    flip = (b < 0) | ((b == 0) & (a < 0))
    gx = torch.where(flip, -a, a)
    gy = torch.where(flip, -b, b)
    order = torch.argsort(torch.atan2(gy, gx), dim=-1)
    gx = torch.gather(gx, -1, order)
    gy = torch.gather(gy, -1, order)
    Px = -gx.sum(-1, keepdim=True) + 2.0 * torch.cumsum(gx, -1)
    Py = -gy.sum(-1, keepdim=True) + 2.0 * torch.cumsum(gy, -1)
    start_x = torch.cat([-gx.sum(-1, keepdim=True), Px[..., :-1]], -1)
    start_y = torch.cat([-gy.sum(-1, keepdim=True), Py[..., :-1]], -1)
    best = torch.maximum((Px * Py).amax(-1), start_x[..., 0] * start_y[..., 0])
    qa = 4.0 * gx * gy
    qb = 2.0 * (start_x * gy + start_y * gx)
    with torch.no_grad():
        tstar = torch.where(qa < 0, -qb / torch.where(qa < 0, 2.0 * qa, torch.ones_like(qa)), torch.zeros_like(qa))
    inside = (qa < 0) & (tstar > 0) & (tstar < 1)
    val = (start_x + 2 * tstar * gx) * (start_y + 2 * tstar * gy)
    val = torch.where(inside, val, torch.full_like(val, -math.inf))
    return torch.maximum(best, val.amax(-1))


def per_op_maxima(tr: BlockTransition, cv: Curvature, block: int = 64) -> dict:
    """Per node group, (m, width) exact maxima M_n over the unit box of 1/2 u^T H_n u (`block` product rows at once)."""
    d2 = second_derivatives(tr, cv)
    out = {}
    for grp in tr.groups:
        lam = cv.adjoint[grp.name]
        if grp.kind == "unary":
            l1 = cv.jac[grp.name].abs().sum(-1)                  # (width,)
            out[grp.name] = 0.5 * torch.clamp(lam * d2[grp.name], min=0.0) * l1 * l1
        else:
            Jx, Jy = cv.jac[grp.name]
            m, w = lam.shape
            sign = torch.sign(lam)                                # (m, width)
            a = Jx.unsqueeze(0).expand(m, w, -1)
            b = Jy.unsqueeze(0) * sign.unsqueeze(-1)
            a, b = a.reshape(m * w, -1), b.reshape(m * w, -1)     # independent rows: blocks that stay in cache
            out[grp.name] = lam.abs() * torch.cat([max_bilinear_box(a[k:k + block], b[k:k + block])
                                                   for k in range(0, m * w, block)]).reshape(m, w)
    return out


def crown_leading_order(tr: BlockTransition, cv: Curvature) -> torch.Tensor:
    """The r^2 coefficient of CROWN's bound on f when every intermediate interval is the exact linear
    range z0 +- r ||j||_1 (m,): per unary node 1/2 max(lambda phi'', 0) ||j||_1^2 (secant vs tangent:
    equal to its own maximum M_n), per product node |lambda| ||j_x||_1 ||j_y||_1 (McCormick with
    kappa = 1/2 at the box centre; >= M_n). See docs/block_residual.md."""
    d2 = second_derivatives(tr, cv)
    total = torch.zeros(cv.g0.shape[0], dtype=DTYPE)
    for grp in tr.groups:
        lam = cv.adjoint[grp.name]
        if grp.kind == "unary":
            l1 = cv.jac[grp.name].abs().sum(-1)
            total += (0.5 * torch.clamp(lam * d2[grp.name], min=0.0) * l1 * l1).sum(-1)
        else:
            Jx, Jy = cv.jac[grp.name]
            total += (lam.abs() * Jx.abs().sum(-1) * Jy.abs().sum(-1)).sum(-1)
    return total


# --------------------------------------------------------------------------------------------------
# Softmax as one operation
# --------------------------------------------------------------------------------------------------
def softmax_forms(tr: BlockTransition, cv: Curvature) -> QuadraticForms:
    """Per (spec, attention head of block l): J_s^T K J_s with K = sum_j lambda_{a_j} Hess softmax_j(s0).

    Forms are ordered spec-major: index p = spec * H + head.
    """
    H, n = cv.scores0.shape
    lam_a = cv.adjoint["attn.reciprocal"].reshape(-1, H, n)          # (m, H, n): a_j = 1 / D_j
    m = lam_a.shape[0]

    def weighted(s, lam):
        return (lam * torch.softmax(s, -1)).sum()

    K = vmap(vmap(hessian(weighted), in_dims=(0, 0)), in_dims=(None, 0))(cv.scores0, lam_a)  # (m, H, n, n)
    J = cv.scores_jac                                                 # (H, n, d)
    dense = torch.einsum("hnd,mhnk,hke->mhde", J, K, J).reshape(m * H, tr.d, tr.d)
    return QuadraticForms(dense=0.5 * (dense + dense.transpose(-1, -2)))


# --------------------------------------------------------------------------------------------------
# Ascent on f itself
# --------------------------------------------------------------------------------------------------
def residual_values(tr: BlockTransition, C: torch.Tensor, g0, grad, delta: torch.Tensor) -> torch.Tensor:
    """f_h(delta) for delta (m, ..., d): row h of the batch belongs to specification h."""
    z = forward(tr, delta)
    shape = (C.shape[0],) + (1,) * (delta.dim() - 2) + (C.shape[1],)
    g = (z * C.reshape(shape)).sum(-1)
    lin = (delta * grad.reshape(shape)).sum(-1)
    return g - g0.reshape(shape[:-1]) - lin


def ascent(tr: BlockTransition, C: torch.Tensor, g0, grad, radii, starts: torch.Tensor, steps: int,
           step0: float = 0.25, step_end: float = 0.002, progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-start projected sign-gradient ascent of f_h over ||delta||_inf <= r.

    starts: (m, S, d) directions in the unit box (scaled by each radius). Step size r * alpha_t with
    alpha_t decaying geometrically from step0 to step_end. Returns the best value found (m, R) and its
    point (m, R, d); every evaluated iterate is feasible, so the value is a lower bound on max f.
    """
    r = torch.as_tensor(radii, dtype=DTYPE).view(1, -1, 1, 1)
    delta = (starts.unsqueeze(1) * r).clone()                        # (m, R, S, d)
    m, R, S, d = delta.shape
    best = torch.full((m, R), -math.inf, dtype=DTYPE)
    arg = torch.zeros(m, R, d, dtype=DTYPE)
    ratio = (step_end / step0) ** (1.0 / max(steps - 1, 1))
    for t in range(steps + 1):
        x = delta.detach().requires_grad_(t < steps)                 # the last evaluation: its value only
        f = residual_values(tr, C, g0, grad, x)
        gx = torch.autograd.grad(f.sum(), x)[0] if t < steps else None
        with torch.no_grad():
            fv, k = f.max(-1)
            better = fv > best
            best = torch.where(better, fv, best)
            pts = torch.gather(x, 2, k.view(m, R, 1, 1).expand(m, R, 1, d)).squeeze(2)
            arg = torch.where(better.unsqueeze(-1), pts, arg)
            if t < steps:
                alpha = step0 * ratio ** t
                delta = torch.maximum(torch.minimum(x + alpha * r * torch.sign(gx), r), -r)
        if progress is not None:
            progress(1)
    return best, arg


# --------------------------------------------------------------------------------------------------
# One transition: every unit (specification row) and radius
# --------------------------------------------------------------------------------------------------
CATEGORIES = ("layernorm", "qk", "exp", "reciprocal", "av", "gelu")


def _distinct_second(vals: torch.Tensor, us: torch.Tensor, best: torch.Tensor) -> torch.Tensor:
    """Per form, the best final point that differs from +-best (else best itself)."""
    out = best.clone()
    for p in range(vals.shape[0]):
        order = torch.argsort(vals[p], descending=True)
        for k in order.tolist():
            u = us[p, k]
            if min((u - best[p]).abs().max(), (u + best[p]).abs().max()) > 1e-6:
                out[p] = u
                break
    return out


def analyze_transition(tr: BlockTransition, C: np.ndarray, radii, *, qp_starts: int = 64, qp_steps: int = 50,
                       qp_sweeps: int = 10, sdp_iterations: int = 10, ascent_restarts: int = 8,
                       ascent_steps: int = 120, seed: int = 0, reference: np.ndarray | None = None,
                       alpha_crown: bool = True, sdp_rounding_starts: int = 2,
                       progress=None, keep: dict | None = None) -> tuple[list[dict], dict]:
    """All block-residual quantities of one transition for the specification rows C (m, d).

    Returns (rows, timings): one row per (row of C, radius) with the quantities of the module
    docstring scaled to radius r (second-order quantities times r^2), and per-phase CPU seconds.
    The ascent on f starts from +-u*, +-u2, random vertices (`ascent_restarts` in all) and +- each of the
    `sdp_rounding_starts` best SDP-rounding vertices of the centre Hessian other than +-sign(u*), +-sign(u2)
    (0: none; phase `sdp_rounding`: the rounding and the assembly of the starts).
    """
    import time

    def tick(name, t0):
        timings[name] = time.process_time() - t0
        if progress is not None:
            progress(name)
        return time.process_time()

    timings = {}
    radii = [float(r) for r in radii]
    gen = torch.Generator().manual_seed(int(seed) * 1000003 + tr.layer)
    Ct = torch.as_tensor(np.asarray(C, dtype=np.float64), dtype=DTYPE)
    m, d = Ct.shape
    t0 = time.process_time()
    cv = curvature(tr, Ct)
    with torch.no_grad():
        F0 = forward(tr, torch.zeros(d, dtype=DTYPE)).numpy()
    f0_error = float(np.abs(F0 - reference).max()) if reference is not None else float("nan")
    decomposition = node_hessians(tr, cv)
    total_h = sum(decomposition.values())
    dec_error = ((total_h - cv.hessian).flatten(1).norm(dim=1) / cv.hessian.flatten(1).norm(dim=1).clamp_min(1e-300))
    del decomposition, total_h
    t0 = tick("curvature", t0)
    # joint second-order maximum (best found) and its SDP-dual upper bound
    Q = QuadraticForms(dense=cv.hessian)
    evecs = torch.linalg.eigh(cv.hessian)[1]
    k_eig = min(4, qp_starts, d)
    starts = torch.sign(torch.randn(m, qp_starts, d, dtype=DTYPE, generator=gen))
    starts[:, :k_eig] = torch.sign(evecs[:, :, -k_eig:].transpose(1, 2))
    starts[starts == 0] = 1.0
    M2, u_star, vals, us = box_qp_max(Q, starts, qp_steps, qp_sweeps)
    M2_upper = box_qp_upper(cv.hessian, sdp_iterations)
    t0 = tick("second_order", t0)
    # per-operation maxima and the softmax-as-one-op variant
    per_op = per_op_maxima(tr, cv)
    by_cat = {c: torch.zeros(m, dtype=DTYPE) for c in CATEGORIES}
    for grp in tr.groups:
        by_cat[grp.category] += per_op[grp.name].sum(-1)
    S = sum(by_cat.values())
    lead = crown_leading_order(tr, cv)
    SF = softmax_forms(tr, cv)
    H = tr.n_heads
    sm_starts = torch.sign(torch.randn(m * H, max(qp_starts // 4, 2), d, dtype=DTYPE, generator=gen))
    sm_starts[:, 0] = u_star.repeat_interleave(H, 0)
    sm_starts[sm_starts == 0] = 1.0
    merged = box_qp_max(SF, sm_starts, qp_steps, max(qp_sweeps // 2, 1))[0].reshape(m, H).sum(-1)
    S_soft = S - by_cat["exp"] - by_cat["reciprocal"] + merged
    mu = torch.linalg.eigvalsh(cv.hessian)                            # one spectrum for the four summaries
    eff, spec_ratio, ent_rank, stab_rank = (f(cv.hessian, mu) for f in (effective_rank, spectral_ratio, entropy_rank,
                                                                         stable_rank))
    t0 = tick("per_op", t0)
    # ascent on f: starts +-u*, +-(second local maximum), random vertices, +-(SDP rounding vertices)
    u2 = _distinct_second(vals, us, u_star)
    a_starts = torch.sign(torch.randn(m, max(ascent_restarts, 1), d, dtype=DTYPE, generator=gen))
    fixed = [u_star, -u_star, u2, -u2]
    for k in range(min(len(fixed), ascent_restarts)):
        a_starts[:, k] = fixed[k]
    rounded = rounding_starts(cv.hessian, sdp_rounding_starts, int(seed) * 1000003 + tr.layer,
                              exclude=torch.stack([u_star, u2], dim=1))
    t0 = tick("sdp_rounding", t0)
    best, _ = ascent(tr, Ct, cv.g0, cv.gradient, radii, torch.cat([a_starts, rounded], dim=1), ascent_steps)
    t0 = tick("ascent", t0)
    try:
        crown, crown_lo = crown_bounds(tr, Ct.numpy(), cv.g0.numpy(), cv.gradient.numpy(), radii)   # (R, m)
        crown_status = "ok"
    except (ValueError, RuntimeError) as e:
        crown = crown_lo = np.full((len(radii), m), np.nan)
        crown_status = f"crown_error: {type(e).__name__}: {e}"
    t0 = tick("crown", t0)
    cert = certify_transition(tr, Ct.numpy(), cv.g0.numpy(), cv.gradient.numpy(), radii, sdp_iterations=sdp_iterations)
    if keep is not None:                      # the caller stores what certifies the bounds
        keep["certificate"] = cert
    # the reported bounds are the block certificate's alone (the Taylor model's, capped by the output LayerNorm's
    # range): CROWN's bounds are the baseline columns crown_upper, crown_lower, never a certificate
    reported = {"f": cert.certificate_f, "g": cert.certificate_g, "f_neg": cert.certificate_f_neg,
                "g_neg": cert.certificate_g_neg}
    t0 = tick("certificate", t0)
    alpha = np.full((len(radii), m), np.nan)
    if alpha_crown:
        from attncert.block.crown import alpha_crown_upper_block
        try:
            alpha = alpha_crown_upper_block(tr, Ct.numpy(), cv.g0.numpy(), cv.gradient.numpy(), radii)
        except (ValueError, RuntimeError) as e:                     # a baseline's failure leaves NaN, logged
            logging.error("alpha-CROWN failed on transition %d: %s: %s", tr.layer, type(e).__name__, e)
        t0 = tick("alpha_crown", t0)
    rows = []
    for h in range(m):
        for ri, r in enumerate(radii):
            r2 = r * r
            asc = float(best[h, ri])
            cu = float(crown[ri, h])
            status = crown_status
            if crown_status == "ok":                 # a NaN from CROWN is no bound (labelled), not a wrong one
                status = "ok" if cu >= asc else ("crown_nan" if math.isnan(cu) else "UNSOUND")
            cf = float(reported["f"][h, ri])
            if not cf >= asc:
                status = "UNSOUND_CERTIFICATE"
            row = {
                "unit": h, "radius": r, "g0": float(cv.g0[h]),
                "second_order_max": float(M2[h]) * r2, "second_order_upper": float(M2_upper[h]) * r2,
                "ascent_max": asc, "crown_upper": cu, "alpha_crown_upper": float(alpha[ri, h]),
                "crown_lower": float(crown_lo[ri, h]),
                "certificate_f": cf, **{f"certificate_{k}": float(reported[k][h, ri]) for k in ("g", "f_neg", "g_neg")},
                "second_order_certificate_f": float(cert.certificate_f[h, ri]),
                "second_order_certificate_g": float(cert.certificate_g[h, ri]),
                "second_order_certificate_f_neg": float(cert.certificate_f_neg[h, ri]),
                "second_order_certificate_g_neg": float(cert.certificate_g_neg[h, ri]),
                **{f"from_range_{k}": bool(cert.parts[f"from_range_{k}"][h, ri]) for k in ("f", "g", "f_neg", "g_neg")},
                "certificate_quadratic": float(cert.parts["quadratic"][h, ri]),
                "certificate_remainder": float(cert.parts["remainder"][h, ri]),
                "per_op_sum": float(S[h]) * r2, "per_op_sum_softmax_one_op": float(S_soft[h]) * r2,
                "softmax_one_op": float(merged[h]) * r2, "crown_leading_order": float(lead[h]) * r2,
                **{f"per_op_{c}": float(by_cat[c][h]) * r2 for c in CATEGORIES},
                "effective_rank": float(eff[h]), "spectral_ratio": float(spec_ratio[h]),
                "entropy_rank": float(ent_rank[h]), "stable_rank": float(stab_rank[h]),
                "hessian_decomposition_error": float(dec_error[h]), "f0_error": f0_error,
                "gradient_norm_l1": float(cv.gradient[h].abs().sum()),
                "status": status,
            }
            rows.append(row)
    return rows, timings


def transition_table(rows: list, timings: dict, tr: BlockTransition, heads: list[int], model: str,
                     prompt: int) -> pd.DataFrame:
    """The rows of `analyze_transition` as the stage's table: unit identity first, CPU seconds last."""
    df = pd.DataFrame(rows)
    ident = {"model": model, "family": tr.family, "transition": tr.layer, "layer_next": tr.layer + 1,
             "head": [heads[u] for u in df.pop("unit")], "prompt": prompt, "position": tr.position,
             "n_keys": len(tr.keys), "d": tr.d}
    for k, (name, value) in enumerate(ident.items()):
        df.insert(k, name, value)
    for name, sec in timings.items():
        df[f"cpu_seconds_{name}"] = sec
    for _, r in df[df["status"] != "ok"].iterrows():
        logging.error("%s: head %d radius %g crown %r ascent %r", r["status"], r["head"], r["radius"],
                      r["crown_upper"], r["ascent_max"])
        if r["status"] in ("UNSOUND", "UNSOUND_CERTIFICATE"):
            print(f"attncert: SOUNDNESS VIOLATION block transition {tr.layer} head {r['head']} r={r['radius']}",
                  file=sys.stderr)
    return df
