"""A sound second-order certificate of the block map over the whole box.

g(delta) = c . F(x0 + delta e_i) for a specification row c, ||delta||_inf <= r. Taylor's formula with the
integral remainder,

    g(delta) = g(0) + grad g(0) . delta + 1/2 delta^T H0 delta + int_0^1 (1 - t) delta^T (H(t delta) - H0) delta dt,

and the node decomposition of the Hessian at any point xi (block/residual.py), H(xi) = sum_n A_n(xi) j_n(xi)
j_n(xi)^T + products, A_n = lambda_n phi_n''(z_n), bound every piece soundly:

* g(0), grad g(0), H0: from the first-order Taylor models of `enclosure` at rho = 0 (float values plus their
  rounding errors); H0 = sum_n A_n(0) j_n j_n^T in float, its rounding error bounded by gamma_K sum |A_n| s_n^2.
* max over the box of 1/2 u^T H0 u: the diagonal SDP dual (`box_qp.box_qp_upper`'s iteration), with
  diag(y) - H0 checked positive definite by a floating-point Cholesky factorization of diag(y) - H0 - c I
  (Rump 2006, "Verification of positive definiteness": success implies positive definite for the stated c).
* the remainder: for ||xi||_inf <= rho, ||u||_inf <= 1, node by node,
      |u^T (H(xi) - H0) u| <= sum_unary [dA (p + q)^2 + |A0| (2 |p q| + q^2)]
          + sum_products 2 [Lam |P_x P_y| + |lam0| (|q_x p_y| + |p_x q_y| + |q_x q_y|)]
  with p = j_n . u, |q| <= a (the Jacobian remainder of the node input), dA = Lam (|phi''(c)| + M3 w) + |lam0| M3 w
  (M3 = sup |phi'''| over the node's range) and Lam the adjoint's remainder (`enclosure`). `remainder_form` splits
  each term into c_n p^2 plus a scalar, so the sum is a positive semidefinite form u^T P(rho) u plus rest(rho),
  maximized over the box jointly by its own SDP dual (node by node, the maxima of (j_n . u)^2 are not attained at
  one u). Split t in [0, 1] into K pieces: the piece [t_k, t_{k+1}] sees ||t delta||_inf <= t_{k+1} r, so
      int_0^1 (1 - t) |delta^T (H(t delta) - H0) delta| dt <= r^2 [max_u u^T Pbar u + sum_k w_k rest(t_{k+1} r)],
      Pbar = sum_k w_k P(t_{k+1} r),  w_k = int_{t_k}^{t_{k+1}} (1 - t) dt.

With Rem(r) that bracket (plus the rounding of H0 and Pbar):
certificate_f bounds max f with f = g - g0 - G . delta for the stage's own float (g0, G) (the ascent's f):
    certificate_f = (g(0) - g0) + r ||grad g(0) - G||_1 + r^2 [1/2 SDP(H0) + Rem(r)]
certificate_g bounds max g:  g(0) + max_u (r grad . u + 1/2 r^2 u^T H0 u) + r^2 Rem(r), the first
maximum by the same SDP dual on the (d + 1) x (d + 1) matrix [[r^2 H0, r grad], [r grad^T, 0]] (a sign t = +-1
homogenizes the linear term), or by r ||grad||_1 + the quadratic bound.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attncert.block.enclosure import FN_ULPS, U, Graph, Var, inflate
from attncert.block.map import DTYPE, EXP, RECIPROCAL, RSQRT, SQUARE, BlockTransition, LayerNormParams
from attncert.block.remainder_form import KAPPA, remainder_form
from attncert.head.rounding import gamma

CROSS_SLACK = 2.0 ** -40   # relative raise of e0 and a0 (see certify_transition)
REMAINDER_SDP_STEPS = 1    # subgradient steps of the remainder form's dual (1, 2, 4, 10 give the same medians)


# --------------------------------------------------------------------------------------------------
# The block map as a graph of Taylor models (the same operations as map.forward)
# --------------------------------------------------------------------------------------------------
def _layer_norm(G: Graph, x: Var, p: LayerNormParams) -> Var:
    d = x.c.shape[0]
    P = torch.eye(d, dtype=DTYPE) - torch.full((d, d), 1.0 / d, dtype=DTYPE)
    c = G.linear([(x, P)])
    sq = G.unary(c, SQUARE)
    ms = G.linear([(sq, torch.full((d, 1), 1.0 / d, dtype=DTYPE))], torch.tensor([p.eps], dtype=DTYPE))
    r = G.unary(ms, RSQRT, floor=p.eps)
    rb = G.linear([(r, torch.ones(1, d, dtype=DTYPE))])
    n = G.product(c, rb)
    return G.linear([(n, torch.diag(p.gain))], p.bias)


def block_graph(tr: BlockTransition, C: torch.Tensor, rho: torch.Tensor) -> tuple[Graph, Var]:
    """The graph of g = C F(x0 + xi e_i) with Taylor models over ||xi||_inf <= rho (B,)."""
    d, H, dh = tr.d, tr.n_heads, tr.d_head
    n, iq = len(tr.keys), tr.query_index
    G = Graph(d, rho)
    x = G.input(tr.x0[tr.position])
    u = _layer_norm(G, x, tr.ln_in) if tr.ln_in is not None else x
    q = G.linear([(u, tr.W_Q)], tr.b_Q)
    k = G.linear([(u, tr.W_K)], tr.b_K)
    v = G.linear([(u, tr.W_V)], tr.b_V)
    p = G.product(q, k)
    Kq = torch.zeros(d, H * n, dtype=DTYPE)          # s_j (j != i) = q^h . K0_j^h, unscaled
    Sp = torch.zeros(d, H * n, dtype=DTYPE)          # s_i = sum_e p^h_e, unscaled
    for h in range(H):
        cols = slice(h * dh, (h + 1) * dh)
        for j in range(n):
            if j == iq:
                Sp[cols, h * n + j] = 1.0
            else:
                Kq[cols, h * n + j] = tr.K0[j, h]
    s_raw = G.linear([(q, Kq), (p, Sp)])
    s = G.linear([(s_raw, torch.eye(H * n, dtype=DTYPE) * (1.0 / math.sqrt(dh)))])
    # softmax per head with a constant shift m_h (the largest centre score): a_j = E_j / sum_k E_k,
    # E_j = exp(s_j - m_h) (the same function as map.forward's 1 / (1 + sum exp(s_k - s_j)), well scaled)
    shift = -s.c.reshape(H, n).amax(-1).repeat_interleave(n)
    t = G.linear([(s, torch.eye(H * n, dtype=DTYPE))], shift)
    E = G.unary(t, EXP)
    S = torch.zeros(H * n, H, dtype=DTYPE)
    for h in range(H):
        S[h * n:(h + 1) * n, h] = 1.0
    D = G.linear([(E, S)])
    Dinv = G.unary(D, RECIPROCAL)
    a = G.product(E, G.linear([(Dinv, S.T.contiguous())]))
    A_fixed = torch.zeros(H * n, d, dtype=DTYPE)
    Sel = torch.zeros(H * n, d, dtype=DTYPE)
    for h in range(H):
        for j in range(n):
            if j == iq:
                Sel[h * n + j, h * dh:(h + 1) * dh] = 1.0
            else:
                A_fixed[h * n + j, h * dh:(h + 1) * dh] = tr.V0[j, h]
    ai = G.linear([(a, Sel)])
    pv = G.product(ai, v)
    o = G.linear([(a, A_fixed), (pv, torch.eye(d, dtype=DTYPE))])
    y = G.linear([(x, torch.eye(d, dtype=DTYPE)), (o, tr.W_O)], tr.b_O)
    h_ln = _layer_norm(G, y, tr.ln_attn)
    base = y if tr.family == "gpt2" else h_ln
    pre = G.linear([(h_ln, tr.W_1)], tr.b_1)
    mm = G.unary(pre, tr.activation)
    y2 = G.linear([(base, torch.eye(d, dtype=DTYPE)), (mm, tr.W_2)], tr.b_2)
    F = _layer_norm(G, y2, tr.ln_out)
    g = G.linear([(F, C.T.contiguous())])
    return G, g


# --------------------------------------------------------------------------------------------------
# Hessian at the centre and its variation over the box
# --------------------------------------------------------------------------------------------------
def centre_hessian(G: Graph, lam0: list) -> tuple[torch.Tensor, torch.Tensor]:
    """(H0 (m, d, d) float, its rounding bound on the box: max_u |u^T (H0 - H_exact) u| / 1 for ||u|| <= 1)."""
    H = None
    absum = None
    count = 0
    for op in G.ops:
        if op.kind == "linear":
            continue
        l0 = lam0[op.out]                                            # (m, N)
        if op.kind == "unary":
            z = G.vars[op.inputs[0]]
            A = l0 * op.curve.d2(z.c)
            term = torch.einsum("mn,nd,ne->mde", A, z.J, z.J)
            ab = (A.abs() * z.s ** 2).sum(-1) * (1.0 + FN_ULPS * U)
        else:
            x, y = (G.vars[i] for i in op.inputs)
            half = torch.einsum("mn,nd,ne->mde", l0, x.J, y.J)
            term = half + half.transpose(-1, -2)
            ab = 2.0 * (l0.abs() * x.s * y.s).sum(-1)
        count += l0.shape[1]
        H = term if H is None else H + term
        absum = ab if absum is None else absum + ab
    H = 0.5 * (H + H.transpose(-1, -2))
    return H, inflate(gamma(count + 16) * absum)


# --------------------------------------------------------------------------------------------------
# Box maximum of a quadratic form: SDP dual with a verified positive definiteness
# --------------------------------------------------------------------------------------------------
def psd_shift(A: torch.Tensor) -> torch.Tensor:
    """c such that a successful float Cholesky of A - c I proves A (exactly as stored) positive definite
    (Rump 2006, Thm 2.3 with alpha = gamma_{n+1} / (1 - gamma_{n+1}); doubled and padded here)."""
    n = A.shape[-1]
    g = gamma(n + 2)
    tr = torch.diagonal(A, dim1=-2, dim2=-1).abs().sum(-1)
    return 2.0 * (g / (1.0 - g)) * tr * (1 + 1e-6) + 1e-280


def verified_pd(A: torch.Tensor) -> torch.Tensor:
    """(P,) bool: A_p positive definite, proved by a float Cholesky of A_p - c_p I."""
    c = psd_shift(A)
    _, info = torch.linalg.cholesky_ex(A - c.view(-1, 1, 1) * torch.eye(A.shape[-1], dtype=DTYPE))
    return info == 0


def sdp_box_upper(M: torch.Tensor, iterations: int = 12, D0: torch.Tensor | None = None,
                  candidate: torch.Tensor | None = None):
    """Sound upper bound of max over u in [-1,1]^n of 1/2 u^T M u (M (P, n, n) float, symmetric).

    For y with diag(y) - M positive semidefinite and y >= 0: u^T M u <= u^T diag(y) u <= sum y. y is found by
    projected subgradient steps on D (y = D + lambda_max(M - D)), or is `candidate` (P, n) where that is smaller,
    then raised until diag(y) - M passes `verified_pd`. Returns (bound (P,), y (P, n))."""
    P, n, _ = M.shape
    D = torch.diagonal(M, dim1=-2, dim2=-1).clone() if D0 is None else D0.clone()
    best_val = torch.full((P,), math.inf, dtype=DTYPE)
    best_y = torch.zeros(P, n, dtype=DTYPE)
    norm = torch.linalg.matrix_norm(M, ord=2)
    step = norm / n
    for it in range(iterations):
        evals, evecs = torch.linalg.eigh(M - torch.diag_embed(D))
        mu = evals[:, -1]
        y = torch.clamp(D + mu.unsqueeze(-1), min=0.0)
        val = 0.5 * y.sum(-1)
        better = val < best_val
        best_val = torch.where(better, val, best_val)
        best_y = torch.where(better.unsqueeze(-1), y, best_y)
        active = (D + mu.unsqueeze(-1) > 0).to(DTYPE)
        v2 = evecs[:, :, -1] ** 2
        sub = active - active.sum(-1, keepdim=True) * v2
        D = D - (step / math.sqrt(it + 1)).unsqueeze(-1) * sub / sub.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    if candidate is not None:
        take = 0.5 * candidate.sum(-1) < best_val
        best_y = torch.where(take.unsqueeze(-1), candidate, best_y)
    tau = (1e-12 * norm).unsqueeze(-1) + 1e-300
    y = best_y + tau
    ok = torch.zeros(P, dtype=torch.bool)
    for _ in range(60):
        A = torch.diag_embed(y) - M
        ok_now = verified_pd(A)
        ok = ok | ok_now
        if bool(ok.all()):
            break
        tau = torch.where(ok.unsqueeze(-1), tau, 4.0 * tau)
        y = torch.where(ok.unsqueeze(-1), y, best_y + tau)
    y = torch.where(ok.unsqueeze(-1), y, torch.full_like(y, math.inf))
    return inflate(0.5 * y.sum(-1)), y


def augmented(H: torch.Tensor, grad: torch.Tensor, r: float) -> torch.Tensor:
    """[[r^2 H, r grad], [r grad^T, 0]] (P, d + 1, d + 1): 1/2 [u; t]^T M [u; t] = r grad . u t + r^2/2 u^T H u."""
    P, d, _ = H.shape
    M = torch.zeros(P, d + 1, d + 1, dtype=DTYPE)
    M[:, :d, :d] = (r * r) * H
    M[:, :d, d] = r * grad
    M[:, d, :d] = r * grad
    return M


# --------------------------------------------------------------------------------------------------
# The certificate of one transition
# --------------------------------------------------------------------------------------------------
@dataclass
class BlockCertificate:
    radii: np.ndarray            # (R,)
    certificate_f: np.ndarray    # (m, R) bound on max f (f with the stage's float g0, G)
    certificate_g: np.ndarray    # (m, R) bound on max g
    certificate_f_neg: np.ndarray   # (m, R) the same for -g
    certificate_g_neg: np.ndarray
    parts: dict                  # name -> (m, R) the terms (for measurement and storage)
    stored: dict | None = None   # what certifies the bounds (`certificate_file_arrays`; the audit's input)
    H0: np.ndarray | None = None    # (m, d, d) the centre Hessian (float)


def integration_weights(K: int) -> np.ndarray:
    t = np.linspace(0.0, 1.0, K + 1)
    return (t[1:] - t[:-1]) - 0.5 * (t[1:] ** 2 - t[:-1] ** 2)


def _not_finite_is_inf(v: torch.Tensor) -> torch.Tensor:
    """NaN (inf - inf, 0 * inf: an infinite piece) read as +inf; +inf kept (torch's default maps it to the largest
    float, which would read as finite)."""
    return torch.nan_to_num(v, nan=math.inf, posinf=math.inf)


def bound_terms(sign: float, radii, y, dev, rem_form, dev_node, weights, off_g0, e0, a0, off_grad):
    """The outward-rounded terms of the bounds of one sense from the certificate's pieces (all torch float64):
    radii (R,), y the verified SDP dual (m, d), dev (R, K, m) the remainder's scalar part on each piece (plus H0's
    rounding), rem_form (m, R) the bound of its joint form (`remainder_form`: max u^T Pbar u plus Pbar's rounding),
    dev_node (R, K, m) the node-by-node bound of the remainder on each piece (the smaller of the two is used),
    weights (K,), off_g0 = g(0) - g0 (m,), e0 / a0 the rounding of g(0) / grad g(0), off_grad =
    ||grad g(0) - G||_1 raised. Returns (r_t, quad, rem, base_f, lin_err), each (m, R) but r_t (R,)."""
    K = weights.shape[0]
    r_t = radii * (1 + 4 * U)
    r2 = inflate(r_t * r_t)
    M2 = inflate(0.5 * y.sum(-1))                                           # max of 1/2 u^T (s H0) u on the box
    quad = inflate(M2.unsqueeze(-1) * r2)
    dev_int = inflate((dev * weights.view(1, K, 1)).sum(1)).T               # (m, R)
    node_int = inflate((dev_node * weights.view(1, K, 1)).sum(1)).T         # (m, R)
    rem = inflate(torch.minimum(inflate(dev_int + rem_form), node_int) * r2)
    off = sign * off_g0
    base_f = (off + inflate(U * off.abs() + e0)).unsqueeze(-1)
    lin_err = inflate((off_grad + a0).unsqueeze(-1) * r_t)
    return r_t, quad, rem, base_f, lin_err


def f_bound(sign: float, **pieces) -> torch.Tensor:
    """Bound on max of sign * f (m, R) from the pieces (`bound_terms`); +inf where a piece is not finite."""
    _, quad, rem, base_f, lin_err = bound_terms(sign, **pieces)
    return _not_finite_is_inf(inflate(base_f.abs() * (base_f > 0) + lin_err + quad + rem))


def g_bound(c, grad_l1, sign: float, joint_max=None, **pieces) -> torch.Tensor:
    """Bound on max of sign * g (m, R): sign c + e0 + a0 r + max(r grad . u + 1/2 r^2 u^T H0 u) + remainder, the
    maximum bounded by r ||grad||_1 + the quadratic bound unless `joint_max` (the augmented SDP) is given."""
    r_t, quad, rem, _, _ = bound_terms(sign, **pieces)
    if joint_max is None:
        joint_max = inflate(grad_l1.unsqueeze(-1) * r_t + quad)
    e0, a0 = pieces["e0"], pieces["a0"]
    cert_g = sign * c.unsqueeze(-1) + inflate(e0.unsqueeze(-1) + a0.unsqueeze(-1) * r_t + joint_max + rem)
    return _not_finite_is_inf(cert_g + inflate(U * cert_g.abs()))


def certificate_file_arrays(cert: "BlockCertificate", heads: list) -> dict:
    """One transition's stored certificate as arrays for an npz (`heads`: the table's head of each row of C): the
    verified SDP duals y_pos / y_neg and y_rem (R, m, d: the remainder's form per radius), the stage's float g0 and
    G (f = g - g0 - G . delta), the radii, kappa and the number of pieces. Everything else the bound uses is
    re-derived from the weights by the audit."""
    return {**{k: np.asarray(v) for k, v in cert.stored.items()}, "heads": np.asarray(heads, dtype=np.int64)}


def certify_transition(tr: BlockTransition, C, g0, grad, radii, pieces: int = 8, sdp_iterations: int = 10,
                       joint: bool = False) -> BlockCertificate:
    """Sound bounds on max f and max g over ||delta||_inf <= r for every row of C and radius r."""
    Ct = torch.as_tensor(np.asarray(C, dtype=np.float64), dtype=DTYPE)
    g0 = torch.as_tensor(np.asarray(g0, dtype=np.float64), dtype=DTYPE)
    grad = torch.as_tensor(np.asarray(grad, dtype=np.float64), dtype=DTYPE)
    radii = np.asarray(radii, dtype=np.float64)
    R, K = len(radii), pieces
    ts = np.arange(1, K + 1) / K
    rho = np.concatenate([[0.0], (radii[:, None] * ts[None, :]).reshape(-1)])
    # rho slightly raised so that t r (real) <= rho (float)
    rho_t = torch.as_tensor(rho * (1 + 4 * U), dtype=DTYPE)
    G, gv = block_graph(tr, Ct, rho_t)
    lam0, Lam = G.adjoints(gv)
    H0, h_round = centre_hessian(G, lam0)
    w = torch.as_tensor(integration_weights(K), dtype=DTYPE)
    form = remainder_form(G, lam0, Lam, w, R, K, KAPPA)
    dev = inflate(form.rest + h_round.view(1, 1, -1))                      # (R, K, m)
    dev_node = inflate(form.node_by_node + h_round.view(1, 1, -1))          # (R, K, m)
    rem_form, y_rem = [], []
    for ri in range(R):                                                     # max u^T Pbar u <= 1/2 sum y
        b, yr = sdp_box_upper(2.0 * form.Pbar[ri], REMAINDER_SDP_STEPS, candidate=form.dominance[ri])
        rem_form.append(torch.where(form.finite[ri], inflate(b + form.rounding[ri]), math.inf))
        y_rem.append(yr)
    rem_form = torch.stack(rem_form, -1)                                    # (m, R)
    # the rounding of g(0) and grad g(0), raised by 2^-40 |g(0)| and 2^-40 ||grad g(0)||_1: an independent
    # re-derivation (the audit's) computes the same floats up to a few units in their last bits
    e0 = inflate(gv.e[0] + CROSS_SLACK * gv.c.abs())                        # (m,)
    a0 = inflate(gv.a[0] + CROSS_SLACK * gv.J.abs().sum(-1))                # (m,)
    r_t = torch.as_tensor(radii * (1 + 4 * U), dtype=DTYPE)
    off_g0 = gv.c - g0                                                      # float difference (one rounding)
    off_grad = inflate((gv.J - grad).abs().sum(-1) * (1 + 2 * U))           # (m,)
    parts = {}
    # the bound's pieces; what certifies them beside the weights is `stored` (re-derived by attncert audit)
    pieces = {"radii": torch.as_tensor(radii, dtype=DTYPE), "dev": dev, "rem_form": rem_form, "dev_node": dev_node,
              "weights": w,
              "off_g0": off_g0, "e0": e0, "a0": a0, "off_grad": off_grad}
    stored = {"radii": radii.copy(), "g0": g0.numpy().copy(), "G": grad.numpy().copy(), "pieces": np.int64(K),
              "y_rem": torch.stack(y_rem).numpy().copy(), "kappa": np.float64(KAPPA)}
    out = {}
    for sense, sign in (("pos", 1.0), ("neg", -1.0)):
        _, yH = sdp_box_upper(sign * H0, sdp_iterations)                    # (m,), (m, d)
        stored[f"y_{sense}"] = yH.numpy().copy()
        _, quad, rem, _, _ = bound_terms(sign, y=yH, **pieces)
        cert_f = f_bound(sign, y=yH, **pieces)
        joint_max = None
        if joint:
            joint_max = torch.stack([sdp_box_upper(augmented(sign * H0, sign * gv.J, r), sdp_iterations, torch.cat(
                [r * r * yH + r * gv.J.abs(), r * gv.J.abs().sum(-1, keepdim=True)], -1))[0]
                for r in r_t.tolist()], -1)                                    # (m, R)
        cert_g = g_bound(gv.c, gv.J.abs().sum(-1), sign, y=yH, joint_max=joint_max, **pieces)
        if joint_max is None:
            joint_max = inflate(gv.J.abs().sum(-1).unsqueeze(-1) * r_t + quad)
        # a nan can only come from an infinite bound (inf - inf, 0 * inf): the sound reading is +inf
        out[sense] = tuple(_not_finite_is_inf(v).numpy() for v in (cert_f, cert_g, quad, rem, joint_max))
    parts.update({"quadratic": out["pos"][2], "remainder": out["pos"][3], "joint": out["pos"][4],
                  "quadratic_neg": out["neg"][2], "rounding": np.broadcast_to(
                      (e0 + (off_grad + a0) * 1e-3).unsqueeze(-1).numpy(), (Ct.shape[0], R)).copy()})
    return BlockCertificate(radii=radii, certificate_f=out["pos"][0], certificate_g=out["pos"][1],
                            certificate_f_neg=out["neg"][0], certificate_g_neg=out["neg"][1], parts=parts,
                            stored=stored, H0=H0.numpy())
