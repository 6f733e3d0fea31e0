"""A sound certificate of the block map over the whole box: the centre quadratic and a cubic Taylor model.

g(delta) = c . F(x0 + delta e_i) for a specification row c, ||delta||_inf <= r. The centre-linearized graph of F
(block/enclosure.py) and the split of every node's excess by order in delta (block/taylor_model.py) give

    g(delta) = g(0) + grad g(0) . delta + 1/2 delta^T H0 delta + cubic(delta) + rest(delta),
    |cubic(delta)| <= r^3 u^T P u  (u = delta / r, P positive semidefinite),   |rest| <= Rest(r),

so that, for each sense s = +-1,

    max s (g - g(0) - grad g(0) . delta) <= r^2 max_u 1/2 u^T (s H0 + 2 r P) u + Rest(r) + rounding.

* g(0), grad g(0), H0: the graph's float values at rho = 0 with their rounding errors (e0, a0); H0 = sum_n A_n j_n
  j_n^T in float, its rounding bounded by gamma_K sum |A_n| s_n^2 (`centre_hessian`); P's rounding likewise.
* max over the box of 1/2 u^T M u, M = s H0 + 2 r P: the SDP dual with one rank-one term, 1/2 (sum y + t ||v||_1^2)
  for diag(y) + t v v^T - M positive semidefinite (v the top eigenvector of s H0, `rank_one_box_upper`; t = 0 is the
  diagonal dual), checked by a floating-point Cholesky factorization of diag(y) + t v v^T - M - c I (Rump 2006,
  "Verification of positive definiteness": success implies positive definite for the stated c, here raised by the
  rounding of forming the matrix). y is read off a near-optimal primal of the SDP (block/mixing_dual.py: the mixing
  method on X = V V^T, s H0 from random rows, each radius's M warm from the previous factors; t = 0), or, switched
  off, (y, t) start from the dual of s H0 and take a few subgradient steps; nothing but the Cholesky check makes
  them valid.

certificate_f bounds max f with f = g - g0 - G . delta for the stage's own float (g0, G) (the ascent's f), from
the output's float form g(delta) = c + J delta + sum_n lambda_n nu_n(delta) + err (exact; the rest holds every
node's rounding, err the output form's own):
    certificate_f = (c - g0) + r ||J - G||_1 + r^2 [1/2 sum y + rounding] + Rest(r) + |err|,
certificate_g bounds max g:  c + r ||J||_1 + the same beyond-linear bound + |err|.
Where an enclosure reaches a singularity (LayerNorm's 1/sqrt input or the softmax's 1/sum reaching 0 over the
box) a piece is +inf and so is the Taylor model's bound: never a finite number without a bound behind it. Every
number is then capped by the output LayerNorm's range (block/layer_norm_range.py: s c . beta + sqrt(d) ||P (c gamma)||
for g, finite at any radius); `parts["from_range_f"]` (and _g, _f_neg, _g_neg) marks the numbers the cap decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attncert.block.box_qp import top_eigenpairs
from attncert.block.enclosure import U, Graph, Var, inflate
from attncert.block.map import DTYPE, EXP, RECIPROCAL, RSQRT, SQUARE, BlockTransition, LayerNormParams
from attncert.block.centre_hessian import centre_hessian
from attncert.block.layer_norm_range import f_range, layer_norm_range
from attncert.block.mixing_dual import WARM_SWEEPS, mixing_dual, mixing_factors
from attncert.block.taylor_model import cubic_model
from attncert.head.rounding import gamma

CROSS_SLACK = 2.0 ** -40   # relative raise of e0 and a0 (see certify_transition)
JOINT_SDP_STEPS = 1        # subgradient steps on +-H0 + 2 r P from the dual of +-H0 (3 give the same medians)
RANK_ONE_STEP = 0.2        # the rank-one weight's subgradient step, a fraction of v^T M v (0.3 and 20 steps: the same)


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


def softmax_shift(s: Var, heads: int) -> torch.Tensor:
    """(H, d) the softmax-weighted mean of each head's score Jacobian rows, c_h = sum_j a_hj(0) J_{s_hj}.

    Softmax is invariant to a common shift of its scores, so E_j = exp(s_j - m_h - c_h . xi) over
    D = sum_k E_k gives the same weights for any c_h. This one makes D's linear part sum_j E_j (J_{s_j} - c_h) . xi
    vanish (up to rounding) and the exps' input ranges r ||J_{s_j} - c_h||_1 small where the weights are: the 1/D
    node then has no first-order motion, so its quadratic and cubic pieces, which the Taylor model bounds node by
    node, vanish with it. Any c_h gives a sound certificate; the audit reads it from the certificate file."""
    a0 = torch.softmax(s.c.reshape(heads, -1), -1)
    return torch.einsum("hj,hjd->hd", a0, s.J.reshape(heads, a0.shape[1], -1))


def block_graph(tr: BlockTransition, C: torch.Tensor, rho: torch.Tensor, shift=None) -> tuple[Graph, Var]:
    """The graph of g = C F(x0 + xi e_i) with Taylor models over ||xi||_inf <= rho (B,); `shift` (H, d): the
    softmax's linear score shift c_h (`softmax_shift`), the weighted mean of the score Jacobians when None."""
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
    # softmax per head h of scores shifted by m_h + c_h . xi: a_j = E_j / sum_k E_k, E_j = exp(s_j - m_h - c_h . xi)
    # (the same function as map.forward's 1 / (1 + sum exp(s_k - s_j)) for any shift), m_h the largest centre score
    c_h = softmax_shift(s, H) if shift is None else torch.as_tensor(shift, dtype=DTYPE)
    G.softmax_shift = c_h
    xi = G.linear([(x, torch.eye(d, dtype=DTYPE))], -tr.x0[tr.position])          # xi itself (value 0 at the centre)
    m_h = -s.c.reshape(H, n).amax(-1).repeat_interleave(n)
    t = G.linear([(s, torch.eye(H * n, dtype=DTYPE)), (xi, -c_h.repeat_interleave(n, 0).T.contiguous())], m_h)
    E = G.unary(t, EXP)
    S = torch.zeros(H * n, H, dtype=DTYPE)
    for h in range(H):
        S[h * n:(h + 1) * n, h] = 1.0
    D = G.linear([(E, S)])
    Dinv = G.unary(D, RECIPROCAL)
    a = G.product(E, G.linear([(Dinv, S.T.contiguous())]))
    G.bilinear_groups.append((p.index, H, dh))
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
    """Sound upper bound of max over u in [-1,1]^n of 1/2 u^T M u (M (P, n, n) float, symmetric): the diagonal SDP
    dual, 1/2 sum y for y >= 0 with diag(y) - M positive semidefinite (u^T M u <= u^T diag(y) u <= sum y), i.e.
    `rank_one_box_upper` without a rank-one direction (v = 0, t = 0). Returns (bound (P,), y (P, n))."""
    P, n, _ = M.shape
    cand = None if candidate is None else (candidate, torch.zeros(P, dtype=DTYPE))
    bound, y, _ = rank_one_box_upper(M, torch.zeros(P, n, dtype=DTYPE), iterations, D0=D0, candidate=cand)
    return bound, y


def _has_rank_one(t: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether t v v^T can be nonzero: False for v = 0 with t finite, where t v v^T is exactly +0 and adding it to
    a matrix without -0 entries changes no bit (so it is not formed)."""
    return bool(v.any()) or not bool(torch.isfinite(t).all())


def _rank_one_term(t: torch.Tensor, v: torch.Tensor, vv: torch.Tensor | None) -> torch.Tensor | None:
    """t v v^T (P, n, n) (vv = v v^T when formed), or None where it is exactly +0 (`_has_rank_one`)."""
    if not _has_rank_one(t, v):
        return None
    return t.view(-1, 1, 1) * (torch.einsum("pi,pj->pij", v, v) if vv is None else vv)


def rank_one_margin(M: torch.Tensor, y: torch.Tensor, t: torch.Tensor, v: torch.Tensor,
                    absM: torch.Tensor | None = None) -> torch.Tensor:
    """(P,) a bound on ||A_float - A||_2 for A = diag(y) - M + t v v^T formed in float (each entry 4 roundings):
    gamma_4 ||diag|y| + |M| + t |v| |v|^T||_F (`absM`: |M| if already formed)."""
    big = torch.diag_embed(y.abs()) + (M.abs() if absM is None else absM)
    if _has_rank_one(t, v):
        big = big + t.abs().view(-1, 1, 1) * torch.einsum("pi,pj->pij", v.abs(), v.abs())
    return _margin(big)


def _margin(big: torch.Tensor) -> torch.Tensor:
    """gamma_4 ||big||_F, raised by the rounding of the norm (`rank_one_margin`)."""
    return inflate(gamma(4) * torch.linalg.matrix_norm(big) * (1 + gamma(big.shape[-1] ** 2 + 2)))


class _CheckedMatrices:
    """A = diag(y) - M + t v v^T and its rounding matrix diag|y| + |M| + |t| |v| |v|^T (`rank_one_margin`) for the
    Cholesky checks of `rank_one_box_upper`, where only y changes: the off-diagonal entries (0 - M_ij + t v_i v_j,
    0 + |M_ij| + |t| |v_i| |v_j|) are formed once, each check writes the diagonal. The same floats as forming both
    matrices anew; A - c I is A with c taken off its diagonal (c I is +0 off it for a finite c >= 0)."""

    def __init__(self, M: torch.Tensor, term: torch.Tensor | None, abs_term: torch.Tensor | None):
        self.A = torch.rsub(M, 0.0).contiguous()
        self.big = M.abs().contiguous()
        self.M_diag = torch.diagonal(M, dim1=-2, dim2=-1)
        self.absM_diag = torch.diagonal(self.big, dim1=-2, dim2=-1).clone()
        self.term = term
        if term is not None:
            self.A = self.A + term
            self.big = self.big + abs_term
        self.t_diag = None if term is None else torch.diagonal(term, dim1=-2, dim2=-1).clone()
        self.abs_t_diag = None if term is None else torch.diagonal(abs_term, dim1=-2, dim2=-1).clone()

    def check(self, y: torch.Tensor) -> torch.Tensor:
        """(P,) info of the float Cholesky of A - c I, c = psd_shift(A) + rank_one_margin (0: positive definite)."""
        a, b = y - self.M_diag, y.abs() + self.absM_diag
        if self.term is not None:
            a, b = a + self.t_diag, b + self.abs_t_diag
        torch.diagonal(self.A, dim1=-2, dim2=-1).copy_(a)
        torch.diagonal(self.big, dim1=-2, dim2=-1).copy_(b)
        c = psd_shift(self.A) + _margin(self.big)
        if bool(torch.isfinite(c).all()) and bool((c >= 0).all()):
            torch.diagonal(self.A, dim1=-2, dim2=-1).sub_(c.unsqueeze(-1))
            return torch.linalg.cholesky_ex(self.A)[1]
        eye = torch.eye(self.A.shape[-1], dtype=DTYPE)
        return torch.linalg.cholesky_ex(self.A - c.view(-1, 1, 1) * eye)[1]


def rank_one_box_upper(M: torch.Tensor, v: torch.Tensor, iterations: int, D0: torch.Tensor | None = None,
                       t0: torch.Tensor | None = None, candidate: tuple | None = None):
    """Sound upper bound of max over u in [-1,1]^n of 1/2 u^T M u (M (P, n, n) float, symmetric) through the SDP dual
    with one rank-one term along v (P, n):

        diag(y) + t v v^T - M positive semidefinite, y >= 0, t >= 0   =>   u^T M u <= sum y + t (v . u)^2
                                                                          <= sum y + t ||v||_1^2   on the box.

    t = 0 is the diagonal dual (`sdp_box_upper`). With v the top eigenvector of M the rank-one term pays for the
    direction that dominates the maximum at its exact box maximum ((v . u)^2 <= ||v||_1^2, attained at u = sign v),
    which the diagonal dual overpays (by up to pi / 2 for a rank-one M). (D, t) take projected subgradient steps on
    1/2 (sum max(D + mu, 0) + t ||v||_1^2), mu = lambda_max(M - t v v^T - diag D): one eigenpair per step, as without t.
    `candidate` (y, t), or a list of them, is taken where its value is smaller (with 0 iterations: the candidates
    alone). Only the check makes (y, t) valid: a float Cholesky of
    diag(y) - M + t v v^T minus Rump's shift and the rounding of forming that matrix (`rank_one_margin`); y is raised
    until it passes. Returns (bound (P,), y (P, n), t (P,))."""
    P, n, _ = M.shape
    L = inflate(v.abs().sum(-1) ** 2 * (1 + gamma(n + 2)))             # >= ||v||_1^2
    vv = torch.einsum("pi,pj->pij", v, v) if bool(v.any()) else None     # None: v = 0, no rank-one term formed
    D = torch.diagonal(M, dim1=-2, dim2=-1).clone() if D0 is None else D0.clone()
    t = torch.zeros(P, dtype=DTYPE) if t0 is None else t0.clone()
    scale = (torch.einsum("pi,pij,pj->p", v, M, v).abs() + 1e-300) if iterations else None   # t's step: v^T M v
    best_val = torch.full((P,), math.inf, dtype=DTYPE)
    best_y, best_t = torch.zeros(P, n, dtype=DTYPE), torch.zeros(P, dtype=DTYPE)
    norm_M = torch.linalg.matrix_norm(M)
    step = norm_M / n
    for it in range(iterations):
        term = _rank_one_term(t, v, vv)
        shifted = M if term is None else M - term
        mu, top = top_eigenpairs(shifted - torch.diag_embed(D))
        y = torch.clamp(D + mu.unsqueeze(-1), min=0.0)
        val = 0.5 * (y.sum(-1) + t * L)
        better = val < best_val
        best_val = torch.where(better, val, best_val)
        best_y = torch.where(better.unsqueeze(-1), y, best_y)
        best_t = torch.where(better, t, best_t)
        active = (D + mu.unsqueeze(-1) > 0).to(DTYPE)
        n_active = active.sum(-1)
        sub = active - n_active.unsqueeze(-1) * top ** 2
        D = D - (step / math.sqrt(it + 1)).unsqueeze(-1) * sub / sub.norm(dim=-1, keepdim=True).clamp_min(1e-300)
        slope = L - n_active * (v * top).sum(-1) ** 2                   # 2 d val / dt
        t = (t - RANK_ONE_STEP * scale / math.sqrt(it + 1) * torch.sign(slope)).clamp_min(0.0)
    for cy, ct in ([] if candidate is None else candidate if isinstance(candidate, list) else [candidate]):
        val = 0.5 * (cy.sum(-1) + ct * L)
        take = val < best_val
        best_val = torch.where(take, val, best_val)
        best_y = torch.where(take.unsqueeze(-1), cy, best_y)
        best_t = torch.where(take, ct, best_t)
    tau = (1e-12 * norm_M).unsqueeze(-1) + 1e-300
    y = best_y + tau
    ok = torch.zeros(P, dtype=torch.bool)
    term = _rank_one_term(best_t, v, vv)
    abs_term = (best_t.abs().view(-1, 1, 1) * torch.einsum("pi,pj->pij", v.abs(), v.abs())
                if _has_rank_one(best_t, v) else None)
    checked = _CheckedMatrices(M, term, abs_term)
    for _ in range(60):
        info = checked.check(y)
        ok = ok | (info == 0)
        if bool(ok.all()):
            break
        tau = torch.where(ok.unsqueeze(-1), tau, 4.0 * tau)
        y = torch.where(ok.unsqueeze(-1), y, best_y + tau)
    y = torch.where(ok.unsqueeze(-1), y, torch.full_like(y, math.inf))
    return inflate(0.5 * (y.sum(-1) + best_t * L)), y, best_t


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


def _not_finite_is_inf(v: torch.Tensor) -> torch.Tensor:
    """NaN (inf - inf, 0 * inf: an infinite piece) read as +inf; +inf kept (torch's default maps it to the largest
    float, which would read as finite)."""
    return torch.nan_to_num(v, nan=math.inf, posinf=math.inf)


def beyond_linear(y: torch.Tensor, r_t: torch.Tensor, h_round, P_rounding, P_finite, rest,
                  rank_one: torch.Tensor | None = None) -> torch.Tensor:
    """(m,) bound on max over the box of sign (1/2 delta^T H delta + cubic + rest) at radius r_t (a float >= r):
    r^2 [1/2 (sum y + t ||v||_1^2) + 1/2 h_round + r P_rounding] + rest, (y, t, v) the verified dual of
    sign H0 + 2 r P (`rank_one_box_upper`; `rank_one` (m,) >= t ||v||_1^2, none for the diagonal dual)."""
    r2 = inflate(r_t * r_t)
    dual = y.sum(-1) if rank_one is None else y.sum(-1) + rank_one
    inner = inflate(0.5 * dual + 0.5 * h_round + inflate(r_t * P_rounding))
    out = inflate(inflate(inner * r2) + rest)
    return torch.where(P_finite, _not_finite_is_inf(out), torch.full_like(out, math.inf))


def f_and_g_bounds(sign: float, c, grad_l1, off_g0, e0, a0, off_grad, r_t, beyond) -> tuple:
    """(bound on max sign f, bound on max sign g) (m,) at one radius from the beyond-linear bound (`beyond_linear`),
    by the exact identity g(delta) = c + J delta + sum_n lambda_n nu_n(delta) + err of the output's float form:
        sign f = sign (c - g0) + sign (J - G) . delta + beyond + |err|,
        sign g = sign c + sign J . delta + beyond + |err|,
    |err| <= e0 + a0 r (the output form's rounding; its part on the nodes' excess is in the rest)."""
    off = sign * off_g0
    base_f = off + inflate(U * off.abs() + e0)
    f = inflate(base_f.clamp_min(0.0) + inflate((off_grad + a0) * r_t) + beyond)
    g = sign * c + inflate(e0 + a0 * r_t + inflate(grad_l1 * r_t) + beyond)
    g = g + inflate(U * g.abs())
    return _not_finite_is_inf(f), _not_finite_is_inf(g)


def certificate_file_arrays(cert: "BlockCertificate", heads: list) -> dict:
    """One transition's stored certificate as arrays for an npz (`heads`: the table's head of each row of C): the
    verified SDP duals y_pos / y_neg (R, m, d) of +-H0 + 2 r P per radius with their rank-one terms t_pos / t_neg
    (R, m) along v_pos / v_neg (m, d), the stage's float g0 and G
    (f = g - g0 - G . delta), the softmax's linear score shift (H, d) the graph was built with (`softmax_shift`;
    any shift gives a sound bound) and the radii. Everything else the bound uses is re-derived from the weights by the
    audit."""
    return {**{k: np.asarray(v) for k, v in cert.stored.items()}, "heads": np.asarray(heads, dtype=np.int64)}


def certify_transition(tr: BlockTransition, C, g0, grad, radii, sdp_iterations: int = 10,
                       model_options: dict | None = None, shift=None, rank_one: bool = True,
                       mixing: bool = True) -> BlockCertificate:
    """Sound bounds on max f and max g over ||delta||_inf <= r for every row of C and radius r: the cubic Taylor
    model (block/taylor_model.py) with one verified SDP dual of +-H0 + 2 r P per radius and sense
    (`model_options`: `cubic_model`'s switches, for the ablation bench; `shift`: the softmax's linear score shift
    (H, d), `softmax_shift`'s weighted mean when None; any shift is sound; `rank_one` False: the diagonal SDP dual
    alone, v = 0; `mixing` False: the duals by subgradient steps alone, not from the mixing method's primal)."""
    Ct = torch.as_tensor(np.asarray(C, dtype=np.float64), dtype=DTYPE)
    g0 = torch.as_tensor(np.asarray(g0, dtype=np.float64), dtype=DTYPE)
    grad = torch.as_tensor(np.asarray(grad, dtype=np.float64), dtype=DTYPE)
    radii = np.asarray(radii, dtype=np.float64)
    rho_t = torch.as_tensor(np.concatenate([[0.0], radii]) * (1 + 4 * U), dtype=DTYPE)   # t r (real) <= rho (float)
    G, gv = block_graph(tr, Ct, rho_t, shift)
    H0, h_round = centre_hessian(G, G.centre_adjoints(gv))
    cm = cubic_model(G, gv, Ct.shape[0], **(model_options or {}))
    # g(delta) = c + J delta + sum_n lambda_n nu_n(delta) + err exactly, |err| <= cerr + jerrJ rho + jerr max |nu|:
    # the nodes' own rounding is inside the Taylor model's rest (nu_n whole), so only the output form's rounding
    # is added here, raised by 2^-40 |c| and 2^-40 ||J||_1: an independent re-derivation (the audit's) computes
    # the same floats up to a few units in their last bits
    e0 = inflate(gv.cerr + CROSS_SLACK * gv.c.abs())                        # (m,)
    a0 = inflate(gv.jerrJ + CROSS_SLACK * gv.J.abs().sum(-1))                # (m,)
    off_g0 = gv.c - g0                                                      # float difference (one rounding)
    off_grad = inflate((gv.J - grad).abs().sum(-1) * (1 + 2 * U))           # (m,)
    grad_l1 = gv.J.abs().sum(-1)
    _, yP = sdp_box_upper(2.0 * cm.P, 1)                                    # a start for the joint duals
    stored = {"radii": radii.copy(), "g0": g0.numpy().copy(), "G": grad.numpy().copy(),
              "softmax_shift": G.softmax_shift.numpy().copy()}
    out, parts = {}, {}
    for sense, sign in (("pos", 1.0), ("neg", -1.0)):
        if rank_one and not mixing:                                         # the rank-one direction of this sense
            _, v = top_eigenpairs(sign * H0)
        else:                                                               # (at the SDP's optimum t = 0: no use)
            v = torch.zeros(H0.shape[:2], dtype=DTYPE)
        L = inflate(v.abs().sum(-1) ** 2 * (1 + gamma(v.shape[-1] + 2)))   # >= ||v||_1^2
        no_t = torch.zeros(v.shape[0], dtype=DTYPE)
        if mixing:                                                          # the primal's dual, no subgradient
            V = mixing_factors(sign * H0)
            bH, yH, tH = rank_one_box_upper(sign * H0, v, 0, candidate=(mixing_dual(sign * H0, V), no_t))
        else:
            bH, yH, tH = rank_one_box_upper(sign * H0, v, sdp_iterations)
        ys, ts, fs, gs, quads, beyonds = [], [], [], [], [], []
        for ri in range(len(radii)):
            r_t = rho_t[ri + 1]
            M = sign * H0 + 2.0 * r_t * cm.P
            candidates, steps = [(yH + r_t * yP, tH)], JOINT_SDP_STEPS
            if mixing:
                V = mixing_factors(M, sweeps=WARM_SWEEPS, V0=V)                 # warm: the previous radius's factors
                candidates, steps = candidates + [(mixing_dual(M, V), no_t)], 0
            _, y, t = rank_one_box_upper(M, v, steps, D0=yH, t0=tH, candidate=candidates)
            beyond = beyond_linear(y, r_t, h_round, cm.P_rounding, cm.P_finite, cm.rest[0 if sign > 0 else 1, ri + 1],
                                   rank_one=inflate(t * L))
            f, g = f_and_g_bounds(sign, gv.c, grad_l1, off_g0, e0, a0, off_grad, r_t, beyond)
            ys.append(y)
            ts.append(t)
            fs.append(f)
            gs.append(g)
            quads.append(inflate(bH * inflate(r_t * r_t)))
            beyonds.append(beyond)
        stored[f"y_{sense}"] = torch.stack(ys).numpy().copy()
        stored[f"t_{sense}"] = torch.stack(ts).numpy().copy()                # (R, m)
        stored[f"v_{sense}"] = v.numpy().copy()                             # (m, d)
        out[sense] = [torch.stack(xs, -1).numpy() for xs in (fs, gs, quads, beyonds)]
    # the output LayerNorm's range caps each number (finite for any input; block/layer_norm_range.py)
    g_cap = layer_norm_range(Ct, tr.ln_out)                                  # (2, m)
    f_cap = f_range(g_cap, g0, grad, rho_t[1:])                              # (2, m, R)
    capped = {}
    for k, (sense, suffix) in enumerate((("pos", ""), ("neg", "_neg"))):
        caps = (f_cap[k].numpy(), g_cap[k].numpy()[:, None].repeat(len(radii), 1))
        capped[sense] = tuple(np.minimum(taylor, cap) for taylor, cap in zip(out[sense][:2], caps))
        for name, taylor, cap in zip("fg", out[sense][:2], caps):
            parts[f"from_range_{name}{suffix}"] = ~(taylor <= cap)
    parts.update({"quadratic": out["pos"][2], "remainder": np.maximum(out["pos"][3] - out["pos"][2], 0.0),
                  "beyond_linear": out["pos"][3], "quadratic_neg": out["neg"][2],
                  "taylor_f": out["pos"][0], "range_f": f_cap[0].numpy()})
    return BlockCertificate(radii=radii, certificate_f=capped["pos"][0], certificate_g=capped["pos"][1],
                            certificate_f_neg=capped["neg"][0], certificate_g_neg=capped["neg"][1], parts=parts,
                            stored=stored, H0=H0.numpy())

