"""A cubic Taylor model of the block map: the part of g beyond its centre quadratic bounded as a whole, with signs.

The centre-linearized graph (block/enclosure.py) gives an exact identity for the output g = C F:

    g(delta) = g(0) + grad g(0) . delta + sum_n lambda_n nu_n(delta) + err,     lambda_n = R_g[:, n],

nu_n the excess of scalar node n over its centre linearization, err the rounding of g's form (|err| <= cerr +
jerrJ rho + jerr max |nu|). Every node input is z_n = c_n + Delta_n with Delta_n = p_n + h_n + t_n + e_n, where
p_n = j_n . delta (j_n its centre Jacobian row), h_n = R_n Q (quadratic), t_n = R_n Cu (cubic) and e_n = R_n Rest +
rounding; Q, Cu, Rest are the nodes' own pieces, split by order in delta:

    unary phi:    nu = 1/2 phi''(c) p^2  +  [phi''(c) p h + 1/6 phi'''(c) p^3]  +  rest,
                  rest = 1/2 phi''(c) [(h + t + e)^2 + 2 p (t + e)] + 1/6 phi'''(c) (Delta^3 - p^3)
                         + 1/24 phi''''(zeta) Delta^4   (+ the rounding of phi(c) and phi'(c) err_z),
                  the last term bounded by M4 |Delta|^4 / 24 or, for exp, 1/z and z^(-1/2), by the exact excess
                  over the cubic Taylor polynomial at the range's end points (enclosure.taylor_excess_at_ends)
    product x y:  nu = p_x p_y  +  [p_x h_y + h_x p_y]  +  rest,
                  rest = p_x (t_y + e_y) + (t_x + e_x) p_y + (h_x + t_x + e_x)(h_y + t_y + e_y)  (+ rounding).

Summed with the adjoints, the quadratic pieces give 1/2 delta^T H0 delta, and the cubic pieces regroup by the node
that created each quadratic piece:

    sum_n lambda_n cubic_n = sum_k Q_k(delta) (kappa_k . delta) + sum_{unary n} lambda_n phi'''(c_n) p_n^3 / 6,
    kappa_k = sum_{unary n} lambda_n phi''(c_n) R_{n k} j_n
              + sum_{product n} lambda_n (R_{y_n k} j_{x_n} + R_{x_n k} j_{y_n}),

kappa_k . delta being the first-order change of lambda_k along delta. With |kappa_k . delta| <= rho ||kappa_k||_1 and
|p_n| <= rho s_n (s = ||j||_1), every cubic term is at most rho^3 times a coefficient times a square (j . u)^2
(u = delta / rho; a product's p_x p_y split as (t p_x^2 + p_y^2 / t) / 2, t = s_y / s_x), so

    |cubic part| <= rho^3 u^T P u,   P = sum_k c_k j_k j_k^T  (positive semidefinite, the same for every radius).

Unlike the node-by-node remainder this replaced, nothing here takes an absolute value of a sum over nodes
of a cubic: the cancellations between nodes stay inside kappa_k, and the squares stay inside one form. The rest
(fourth order and beyond) is bounded node by node through the magnitudes

    |h| <= |R| Qmax,  |t| <= |R| Cmax,  |e| <= |R| Restmax + rounding,  |Delta| <= min(s rho + |h| + |t| + |e|, width),

and enters the output as sum_n |lambda_n| Restmax_n, except where signs can be kept at no cost: the terms
p_n (t_n + e_n) sum to sum_k (Cu_k + Rest_k)(kappa_k . delta) (bounded with ||kappa_k||_1, like the cubic part), and
a product with a broadcast factor y (LayerNorm's 1/sigma, the softmax's 1/sum, the query's own attention weight)
has sum_{i in g} R_{v i} p_{x i} p_{y g} = p_{y g} (sum_{i in g} R_{v i} j_{x i}) . delta: one l1 norm per group
instead of a sum of absolute values. A unary op's quadratic pieces 1/2 phi''(c_k) p_k^2 have the signs of phi''(c_k),
so they enter a value v as max(sum_k (R_vk sgn_k)^+ Qmax_k, sum_k (R_vk sgn_k)^- Qmax_k) (the positive and negative
sums cannot both be reached); a head's query-key products are bounded as one form (block/grouped_quadratic.py), and
the quadratic parts of at most HESSIAN_ROWS rows (1/sigma's and 1/D's
inputs, the lambda-weighted rows of a broadcast product; at d > 512 only 1/sigma's single rows, `hessian_row_limit`)
also through their formed centre Hessians,
1/2 (sum_ij |H_v,ij| + rounding) (block/centre_hessian.py). The rest is bounded per sense s = +-1 of g: a unary
node's 1/2 phi''(c) (h + t + e)^2 has phi''(c)'s sign and the convex curves' phi - T3 is >= 0, so those enter s g
only with the positive parts of s lambda_n phi''(c_n) and s lambda_n (`signed_unary_terms`). The certificate
(block/certificate.py) is then

    max (+-f) <= base + lin + r^2 [1/2 max_u u^T (+-H0 + 2 r P) u + rounding(H0, P)] + Rest_out(+-),

the maximum bounded by one verified SDP dual per radius and sense.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attncert.block.centre_hessian import quadratic_part_box
from attncert.block.enclosure import (_GELU_D3, FN_ULPS, U, Graph, _gelu_sups, inflate, pad_columns,
                                      taylor_excess_at_ends)
from attncert.block.grouped_quadratic import score_groups
from attncert.block.map import DTYPE, EXP, RECIPROCAL, RSQRT, SQUARE, ScalarCurve
from attncert.head.rounding import gamma

KAPPA_BLOCK = 512      # columns of kappa formed at once (memory: m x block x d floats)
HESSIAN_ROWS = 16      # quadratic parts of at most this many rows also bounded through their formed centre Hessians
HESSIAN_ROWS_WIDE = 1  # ... at widths d > HESSIAN_WIDE_D: a formed Hessian costs ~d^3 (8x at d = 768), and there
HESSIAN_WIDE_D = 512   # the 1/D and lambda-weighted rows bought <= 1.5 % for 30 % of the certificate's CPU (bench)


def hessian_row_limit(d: int) -> int:
    """The most rows whose quadratic parts are also bounded through their formed centre Hessians at width d."""
    return HESSIAN_ROWS if d <= HESSIAN_WIDE_D else HESSIAN_ROWS_WIDE


def third_derivative(curve: ScalarCurve, c: torch.Tensor) -> torch.Tensor:
    """|phi'''(c)| raised by its evaluation error (FN_ULPS units)."""
    if curve is SQUARE:
        return torch.zeros_like(c)
    if curve is EXP:
        v = torch.exp(c)
    elif curve is RSQRT:
        v = 1.875 * c ** -3.5
    elif curve is RECIPROCAL:
        v = 6.0 / c ** 4
    elif curve.name in _GELU_D3:
        v = _GELU_D3[curve.name](c)
    else:
        raise ValueError(f"no third derivative for curve {curve.name!r}")
    return inflate(v.abs() * (1 + FN_ULPS * U))


def fourth_bound(curve: ScalarCurve, c: torch.Tensor, w: torch.Tensor, floor: float | None) -> torch.Tensor:
    """sup |phi''''| over [c - w, c + w] (clipped below at `floor`); +inf where the range reaches a singularity."""
    if curve is SQUARE:
        return torch.zeros_like(w)
    if curve.name in _GELU_D3:
        return torch.full_like(w, _gelu_sups(curve.name)[1])
    lo = c - w
    if floor is not None:
        lo = torch.clamp(lo, min=floor * (1.0 - 1e-9))
    if curve is EXP:
        return inflate(torch.exp(c + w) * (1.0 + FN_ULPS * U))
    low = lo * (1.0 - 4 * U)
    pos = low > 0
    safe = torch.where(pos, low, torch.ones_like(low))
    v = 6.5625 * safe ** -4.5 if curve is RSQRT else 24.0 / safe ** 5
    if curve is not RSQRT and curve is not RECIPROCAL:
        raise ValueError(f"no fourth-derivative bound for curve {curve.name!r}")
    return torch.where(pos, inflate(v * (1 + FN_ULPS * U)), torch.full_like(w, math.inf))


@dataclass
class CubicModel:
    P: torch.Tensor              # (m, d, d) float, the cubic part's form (rows with a non-finite coefficient: zeros)
    P_rounding: torch.Tensor     # (m,) bound on max_u |u^T (P - P_exact) u| over the box
    P_finite: torch.Tensor       # (m,) bool
    rest: torch.Tensor           # (2, B, m) per sense (+g, -g): bound on +-sum_n lambda_n rest_n + the output's
                                 # rounding beyond e0 + a0 rho
    coefficients: list           # per nonlinear op: [(coef (m, N), J (N, d)), ...] (for measurement)


def _node_inputs(G: Graph, op):
    return [G.vars[i] for i in op.inputs]


def kappa_norms(G: Graph, lam: torch.Tensor, signed: bool = True) -> torch.Tensor:
    """(m, n_nodes) upper bounds on ||kappa_k||_1 (module docstring), kappa formed in blocks of columns; with
    `signed` False the sum of absolute values sum_n |lambda_n phi''_n R_nk| ||j_n||_1 instead (no kappa formed: the
    node-by-node bound, for the ablation bench)."""
    m, nK = lam.shape[0], G.n_nodes
    # per nonlinear op: (weight (m, N), R rows (N, n_cols), J rows (N, d)) with kappa_k += sum_i weight_i R_ik J_i
    pieces = []
    for op in G.ops:
        if op.kind == "linear":
            continue
        l = lam[:, op.cols[0]:op.cols[1]]
        if op.kind == "unary":
            (z,) = _node_inputs(G, op)
            pieces.append((l * op.curve.d2(z.c), z.R, z.J, z.s))
        else:
            x, y = _node_inputs(G, op)
            pieces.append((l, y.R, x.J, x.s))
            pieces.append((l, x.R, y.J, y.s))
    norms = torch.zeros(m, nK, dtype=DTYPE)
    err = torch.zeros(m, nK, dtype=DTYPE)
    count = 0
    for lo in range(0, nK if signed else 0, KAPPA_BLOCK):
        hi = min(lo + KAPPA_BLOCK, nK)
        block = torch.zeros(m, hi - lo, G.d, dtype=DTYPE)
        for wgt, R, J, _ in pieces:
            if R.shape[1] <= lo:
                continue
            Rb = R[:, lo:min(hi, R.shape[1])]                               # (N, b)
            b = Rb.shape[1]
            block[:, :b] += torch.matmul(Rb.T, wgt.unsqueeze(-1) * J)       # (b, N) @ (m, N, d)
        norms[:, lo:hi] = block.abs().sum(-1)
    for wgt, R, J, s in pieces:
        count += R.shape[0]
        err[:, :R.shape[1]] += (wgt.abs() * s) @ R.abs()
    g = gamma(count + G.d + 16) + FN_ULPS * U
    if not signed:
        return inflate(err * (1 + 2 * g))
    return inflate(inflate(norms) + inflate(g * err) * 2.0)


def signed_unary_terms(op, z, lam_n: torch.Tensor, terms: dict, convex: bool, D1: torch.Tensor) -> torch.Tensor:
    """(2, B, m) the output's share sum_n lambda_n own_n of a unary node's rest terms `terms`, per sense s = +-1.

    1/2 phi''(c) (Delta - p)^2 has the sign of phi''(c) (its float value errs by FN_ULPS u relatively), and for the
    convex exp, 1/z and z^(-1/2) the excess phi - T3 over the cubic Taylor polynomial is >= 0: in s g they raise
    the bound only where s lambda phi''(c) > 0 (s lambda > 0), so they enter with those positive parts; the other
    terms with |lambda|."""
    d2s = op.curve.d2(z.c)
    l = lam_n.abs()
    slack = l * d2s.abs() * (2 * FN_ULPS * U)
    others = inflate(sum(v for k, v in terms.items() if k != "h2" and not (convex and k == "m4")))
    h2 = 0.5 * D1 * D1
    out = []
    for sign in (1.0, -1.0):
        t = inflate(others @ l.T) + inflate(h2 @ inflate((sign * lam_n * d2s).clamp_min(0.0) + slack).T)
        if convex:
            t = t + inflate(terms["m4"] @ inflate((sign * lam_n).clamp_min(0.0)).T)
        out.append(inflate(t))
    return torch.stack(out)


def broadcast_groups(v) -> list | None:
    """The groups of identical rows of v (value, Jacobian and noise rows), if v has fewer distinct rows than
    entries (a broadcast, as LayerNorm's 1 / sigma and the softmax's 1 / sum): a list of index tensors; else None."""
    rows = torch.cat([v.c.unsqueeze(1), v.J, v.R, v.cerr.unsqueeze(1), v.jerr.unsqueeze(1)], 1)
    uniq, inverse = torch.unique(rows, dim=0, return_inverse=True)
    if uniq.shape[0] == rows.shape[0]:
        return None
    return [torch.nonzero(inverse == g).flatten() for g in range(uniq.shape[0])]


def factored_products(G: Graph) -> dict:
    """Product ops x y with a broadcast factor: op.out -> (groups, index of the broadcast input (0 or 1))."""
    out = {}
    for op in G.ops:
        if op.kind != "product":
            continue
        for which in (1, 0):
            groups = broadcast_groups(G.vars[op.inputs[which]])
            if groups is not None:
                out[op.out] = (groups, which)
                break
    return out


def cubic_model(G: Graph, gv, H0_rows: int, shared_factors: bool = True, kappa_rest: bool = True,
                signed_kappa: bool = True, signed_rest: bool = True, grouped: bool = True,
                hessian_rows: bool = True, signed_quadratic: bool = True) -> CubicModel:
    """The cubic form P and the rest over the graph's radii (module docstring). The switches (each sound either way;
    for the ablation bench): `shared_factors` takes a broadcast factor out of the products' quadratic parts
    (LayerNorm's 1/sigma, the softmax's 1/sum and the query's own weight), `kappa_rest` bounds the nodes' fourth-order
    terms p (t + e) through kappa instead of node by node, `signed_kappa` forms kappa (else ||kappa_k||_1 is bounded
    by a sum of absolute values over the later nodes), `signed_rest` bounds the rest per sense with the signs of the
    unary nodes' squared terms (`signed_unary_terms`; with `kappa_rest`), `grouped` bounds the quadratic parts
    through a head's query-key products as one form where smaller (block/grouped_quadratic.py), `hessian_rows` those
    of at most HESSIAN_ROWS rows through their formed centre Hessians where smaller, `signed_quadratic` sums the unary
    ops' quadratic pieces with the signs of phi''."""
    B, m, nK = G.B, H0_rows, G.n_nodes
    rho = G.rho
    lam = pad_columns(gv.R, nK)                                                  # (m, nK)
    kn = kappa_norms(G, lam, signed_kappa)                                   # (m, nK)
    Qmax = torch.zeros(B, nK, dtype=DTYPE)
    Cmax = torch.zeros(B, nK, dtype=DTYPE)
    Rest = torch.zeros(B, nK, dtype=DTYPE)
    numax = torch.zeros(B, nK, dtype=DTYPE)
    own_sense = torch.zeros(2, B, m, dtype=DTYPE)
    coefficients = []
    r1 = rho.unsqueeze(1)
    factored = factored_products(G) if shared_factors else {}
    bilinears = score_groups(G) if grouped else []
    in_group = {bg.op.out for bg in bilinears}
    signed_unary = []          # (op, sign of phi'' (N,)) of the unary ops whose quadratic parts enter with signs
    fops = [op for op in G.ops if op.out in factored and op.out not in in_group]
    Qplain = torch.zeros(B, nK, dtype=DTYPE)       # Qmax without the factored products' and the groups' columns
    r2 = inflate(rho * rho)

    def shared_factor_sum(Rv, op):
        """(N_v,) sum over the groups g of s_g ||sum_{i in g} R_{v i} j_{x i}||_1 for a factored product op: with
        rho^2 a bound on |sum_i R_{v i} p_{x i} p_{y g(i)}| (the common factor p_{y g} taken out of the sum)."""
        groups, which = factored[op.out]
        x, y = (G.vars[i] for i in op.inputs) if which == 1 else tuple(G.vars[i] for i in reversed(op.inputs))
        lo = op.cols[0]
        N = x.J.shape[0]
        size = len(groups[0])
        blocks = all(len(idx) == size and int(idx[0]) == g * size and bool((idx[1:] - idx[:-1] == 1).all())
                     for g, idx in enumerate(groups))
        sy = torch.stack([y.s[idx[0]] for idx in groups])                  # (n_groups,)
        if blocks:                                                          # contiguous equal blocks: one einsum
            Rb = Rv[:, lo:lo + N].reshape(Rv.shape[0], len(groups), size)
            A = torch.einsum("vgs,gsd->vgd", Rb, x.J.reshape(len(groups), size, -1)).abs().sum(-1)
            total = A @ sy
            err = torch.einsum("vgs,gs->vg", Rb.abs(), x.s.reshape(len(groups), size)) @ sy
        else:
            total = torch.zeros(Rv.shape[0], dtype=DTYPE)
            err = torch.zeros(Rv.shape[0], dtype=DTYPE)
            for g, idx in enumerate(groups):
                Rg = Rv[:, lo + idx]
                total += sy[g] * (Rg @ x.J[idx]).abs().sum(-1)
                err += sy[g] * (Rg.abs() @ x.s[idx])
        return inflate(inflate(total) + gamma(x.J.shape[0] + G.d + 4) * err)

    def quadratic_part(Rv):
        """(B, rows) bound on |R_v Q| (the quadratic part of the rows' values)."""
        n = Rv.shape[1]
        Hv = Qplain[:, :n] @ Rv.abs().T
        for op, sgn in signed_unary:
            lo, hi = op.cols
            if hi <= n:
                Rs = Rv[:, lo:hi] * sgn
                q = Qmax[:, lo:hi]
                slack = (2 * FN_ULPS * U) * (q @ Rv[:, lo:hi].abs().T)
                Hv = Hv + inflate(torch.maximum(q @ Rs.clamp_min(0.0).T, q @ (-Rs).clamp_min(0.0).T) + slack)
        for op in fops:
            if op.cols[1] <= n:
                Hv = Hv + r2.unsqueeze(1) * shared_factor_sum(Rv, op).unsqueeze(0)
        for bg in bilinears:
            if bg.op.cols[1] <= n:
                lo, hi = bg.op.cols
                Hv = Hv + torch.minimum(Qmax[:, lo:hi] @ Rv[:, lo:hi].abs().T, bg.bound(Rv, Qmax, r2))
        if hessian_rows and Rv.shape[0] <= hessian_row_limit(G.d):     # few rows: their centre Hessians, formed
            Hv = torch.minimum(Hv, r2.unsqueeze(1) * quadratic_part_box(G, Rv).unsqueeze(0))
        return inflate(Hv)

    def rounding(v):
        """(B, N) bound on |err_v|: cerr + jerrJ rho + jerr max |nu| over the nodes so far."""
        return inflate(v.cerr + v.jerrJ * r1 + v.jerr * numax.amax(-1, keepdim=True))

    def parts(v):
        """(H, T, E, D1, w) of a node input v: bounds on |h|, |t|, |e| (rounding included), |Delta - p|, |Delta|."""
        n = v.R.shape[1]
        A = v.R.abs().T
        Hv, Tv = quadratic_part(v.R), inflate(Cmax[:, :n] @ A)
        Ev = inflate(Rest[:, :n] @ A + rounding(v))
        D1 = torch.minimum(inflate(Hv + Tv + Ev), v.e)
        w = torch.minimum(inflate(v.s * r1 + D1), G.width(v))
        return Hv, Tv, Ev, D1, w

    for op in G.ops:
        if op.kind == "linear":
            continue
        lo, hi = op.cols
        l = lam[:, lo:hi].abs()                                              # (m, N)
        if op.kind == "unary":
            (z,) = _node_inputs(G, op)
            Hz, Tz, Ez, D1, w = parts(z)
            sp = inflate(z.s * r1)                                          # (B, N) bound on |p|
            d2 = op.curve.d2(z.c).abs() * (1 + FN_ULPS * U)
            d3 = third_derivative(op.curve, z.c)
            m4 = inflate(fourth_bound(op.curve, z.c, w, z.floor) * w ** 4 / 24.0)   # |phi(z) - T3(z)|
            ends = taylor_excess_at_ends(op.curve, z.c, w, z.floor, 3)
            m4 = m4 if ends is None else torch.minimum(m4, ends)
            q = inflate(0.5 * d2 * sp * sp)
            cu = inflate(d2 * sp * Hz + d3 * sp ** 3 / 6.0)
            out = G.vars[op.out]
            zr = rounding(z)
            rnd = inflate(op.curve.d1(z.c).abs() * (1 + FN_ULPS * U) * zr + FN_ULPS * U * out.c.abs())
            terms = {"h2": 0.5 * d2 * D1 * D1, "pte_rnd": d2 * sp * zr,
                     "d3": d3 * D1 * (w * w + w * sp + sp * sp) / 6.0, "m4": m4, "rnd": rnd}
            rest = inflate(inflate(sum(terms.values())) + d2 * sp * (Tz + Ez))
            own = inflate(sum(terms.values())) if kappa_rest else rest
            coef = inflate(0.5 * d2 * kn[:, lo:hi] + l * d3 * z.s / 6.0)     # (m, N) on (j . u)^2
            terms_out = None
            if kappa_rest and signed_rest:
                terms_out = signed_unary_terms(op, z, lam[:, lo:hi], terms, ends is not None, D1)
            coefficients.append([(coef, z.J)])
        else:
            x, y = _node_inputs(G, op)
            Hx, Tx, Ex, D1x, wx = parts(x)
            Hy, Ty, Ey, D1y, wy = parts(y)
            px, py = inflate(x.s * r1), inflate(y.s * r1)
            q = inflate(px * py)
            cu = inflate(px * Hy + Hx * py)
            out = G.vars[op.out]
            xr, yr = rounding(x), rounding(y)
            rnd = inflate(y.c.abs() * xr + x.c.abs() * yr + U * out.c.abs())
            terms = {"pte_rnd": px * yr + xr * py, "h2": D1x * D1y, "rnd": rnd}
            pte = inflate(px * (Ty + Ey) + (Tx + Ex) * py)
            rest = inflate(inflate(sum(terms.values())) + pte)
            own = inflate(sum(terms.values())) if kappa_rest else rest
            own_no_h2 = inflate(terms["pte_rnd"] + terms["rnd"] + (0.0 if kappa_rest else pte))
            if op.out in factored:
                # the output's sum of lambda_n (Delta_x - p_x)_n (Delta_y - p_y)_g over a group g with a common
                # factor: |sum_n lambda_n (Delta_x - p_x)_n| bounded through the lambda-weighted rows of R_x
                groups, which = factored[op.out]
                xv, D1xv, xrv, D1yv = (x, D1x, xr, D1y) if which == 1 else (y, D1y, yr, D1x)
                lam_s = lam[:, lo:hi]
                h2_out = torch.zeros(B, m, dtype=DTYPE)
                for idx in groups:
                    wrows = lam_s[:, idx] @ xv.R[idx]                          # (m, n_x) float
                    wabs = lam_s[:, idx].abs() @ xv.R[idx].abs()
                    werr = gamma(len(idx) + 2) * wabs                            # rounding of wrows
                    n = wrows.shape[1]
                    bound_w = inflate(quadratic_part(wrows) + Cmax[:, :n] @ wrows.abs().T + Rest[:, :n] @ wrows.abs().T
                                      + (Qmax[:, :n] + Cmax[:, :n] + Rest[:, :n]) @ werr.T
                                      + xrv[:, idx] @ lam_s[:, idx].abs().T)
                    plain = inflate(D1xv[:, idx] @ lam_s[:, idx].abs().T)
                    h2_out += inflate(D1yv[:, idx[0]].unsqueeze(1) * torch.minimum(bound_w, plain))
                terms_out = inflate(own_no_h2 @ l.T + h2_out)
            sx, sy = x.s, y.s
            t = torch.where((sx > 0) & (sy > 0), sy / sx.clamp_min(1e-300), torch.ones_like(sx))
            k = kn[:, lo:hi]
            if op.out not in factored:
                terms_out = None
            coefficients.append([(inflate(0.5 * k * t * (1 + 4 * U)), x.J), (inflate(0.5 * k / t * (1 + 4 * U)), y.J)])
        Qmax[:, lo:hi], Cmax[:, lo:hi] = q, cu
        if op.kind == "unary" and signed_quadratic and op.out not in in_group:
            signed_unary.append((op, torch.sign(op.curve.d2(G.vars[op.inputs[0]].c))))
        elif op.out not in factored and op.out not in in_group:
            Qplain[:, lo:hi] = q
        Rest[:, lo:hi] = torch.nan_to_num(rest, nan=math.inf, posinf=math.inf)
        own_term = inflate(own @ l.T) if terms_out is None else terms_out     # (B, m), or (2, B, m) per sense
        own_sense += torch.nan_to_num(own_term, nan=math.inf, posinf=math.inf)
        numax[:, lo:hi] = torch.minimum(inflate(q + cu + Rest[:, lo:hi]), G.eps[:, lo:hi])
    # the output: sum_n lambda_n rest_n = sum_n lambda_n own_n + sum_k (Cu_k + Rest_k)(kappa_k . delta), plus the
    # output form's rounding on the nodes' excess (jerr max |nu|)
    moved = inflate(inflate((Cmax + Rest) * r1) @ kn.T) if kappa_rest else torch.zeros(B, m, dtype=DTYPE)
    rest_out = inflate(own_sense + moved + gv.jerr.unsqueeze(0) * numax.amax(-1, keepdim=True))   # (2, B, m)
    rest_out = torch.nan_to_num(rest_out, nan=math.inf, posinf=math.inf)
    P = torch.zeros(m, G.d, G.d, dtype=DTYPE)
    absum = torch.zeros(m, dtype=DTYPE)
    finite = torch.ones(m, dtype=torch.bool)
    count = 0
    for pairs in coefficients:
        for coef, J in pairs:
            ok = torch.isfinite(coef).all(-1)
            finite &= ok
            coef = torch.where(ok.unsqueeze(-1), coef, torch.zeros_like(coef))
            P += torch.matmul((coef.unsqueeze(-1) * J).transpose(-1, -2), J)
            s = J.abs().sum(-1)
            absum += (coef * s * s).sum(-1)
            count += J.shape[0]
    P = 0.5 * (P + P.transpose(-1, -2))
    return CubicModel(P=P, P_rounding=inflate(gamma(count + 16) * absum), P_finite=finite, rest=rest_out,
                      coefficients=coefficients)
