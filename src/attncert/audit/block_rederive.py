"""One block transition's certificate pieces, re-derived by the audit from the extraction files of layers L and L + 1,
the run's configuration (prompt, query position, specification seed) and the unit's radii (numpy; the stage's
construction is `block/build.py`, `block/certificate.py` and `block/taylor_model.py`, in torch).

g = C F(x0 + xi e_i) over ||xi||_inf <= rho: x0 the residual stream entering block L (`residual[prompt]`), i the
query position, F the block map of `block/map.py` (GPT-2: ln_1, attention, ln_2, MLP, ln_1 of block L + 1; BERT:
attention, attention.output.LayerNorm, MLP, output.LayerNorm), C the specification rows of the next layer's heads
(`head.specification.specification_rows`: w_h = W_V[h] c_h / ||W_V[h] c_h||). The other tokens' keys and values are
the float constants LN(x_j) W + b, as the stage computes them.
"""
from __future__ import annotations

import math

import numpy as np

from attncert.audit.block_curves import ACTIVATION_CURVE, U
from attncert.audit.block_enclosure import Enclosure, centre_hessian
from attncert.audit.block_taylor_model import cubic_model


def _layer_norm_value(x, gain, bias, eps):
    c = x - x.mean(-1, keepdims=True)
    return gain * (c * (1.0 / np.sqrt((c * c).mean(-1, keepdims=True) + eps))) + bias


def _layer_norm(E: Enclosure, x, gain, bias, eps):
    d = x.c.shape[0]
    c = E.linear([(x, np.eye(d) - np.full((d, d), 1.0 / d))])
    sq = E.unary(c, "square")
    ms = E.linear([(sq, np.full((d, 1), 1.0 / d))], np.array([eps]))
    r = E.unary(ms, "rsqrt", floor=eps)
    n = E.product(c, E.linear([(r, np.ones((1, d)))]))
    return E.linear([(n, np.diag(gain))], bias)


def block_output(a: dict, nxt: dict, prompt: int, position: int, C: np.ndarray, rho: np.ndarray, shift: np.ndarray):
    """(enclosure, g's affine form) of the transition a -> nxt over the radii rho; `shift` (H, d) the softmax's
    linear score shift c_h (read from the certificate file: any finite value gives a valid decomposition)."""
    gpt2 = bool(a["causal"])
    ln = {p: (np.asarray(arr[f"{p}_gain"], float), np.asarray(arr[f"{p}_bias"], float), float(arr[f"{p}_eps"]))
          for p, arr in (("ln_attn", a), ("ln", a))}
    ln_out = (np.asarray(nxt["ln_gain"], float), np.asarray(nxt["ln_bias"], float), float(nxt["ln_eps"]))
    act = ACTIVATION_CURVE.get(str(a["activation"]))
    if act is None:
        raise ValueError(f"activation {str(a['activation'])!r} is not supported (gelu, gelu_new, gelu_pytorch_tanh)")
    W = {k: np.concatenate(list(np.asarray(a[k], float)), axis=1) for k in ("W_Q", "W_K", "W_V")}
    b = {k: np.asarray(a[k], float).reshape(-1) for k in ("b_Q", "b_K", "b_V")}
    W_O, b_O = np.concatenate(list(np.asarray(a["W_O"], float)), axis=0), np.asarray(a["b_O"], float)
    H = int(a["W_Q"].shape[0])
    x0 = np.asarray(a["residual"][prompt], float)
    T, d = x0.shape
    if not 0 <= position < T:
        raise ValueError(f"position {position} out of range for {T} tokens")
    dh = d // H
    keys = list(range(position + 1)) if gpt2 else list(range(T))
    n, iq = len(keys), keys.index(position)
    xs = x0[keys]
    us = _layer_norm_value(xs, *ln["ln"]) if gpt2 else xs
    K0 = (us @ W["W_K"] + b["b_K"]).reshape(n, H, dh)
    V0 = (us @ W["W_V"] + b["b_V"]).reshape(n, H, dh)
    E = Enclosure(d, rho)
    x = E.input(x0[position])
    u = _layer_norm(E, x, *ln["ln"]) if gpt2 else x
    q = E.linear([(u, W["W_Q"])], b["b_Q"])
    k = E.linear([(u, W["W_K"])], b["b_K"])
    v = E.linear([(u, W["W_V"])], b["b_V"])
    p = E.product(q, k)
    p_node = len(E.nodes) - 1
    Kq, Sp = np.zeros((d, H * n)), np.zeros((d, H * n))
    Sel, A_fixed = np.zeros((H * n, d)), np.zeros((H * n, d))
    for h in range(H):
        cols = slice(h * dh, (h + 1) * dh)
        for j in range(n):
            if j == iq:
                Sp[cols, h * n + j] = 1.0
                Sel[h * n + j, cols] = 1.0
            else:
                Kq[cols, h * n + j] = K0[j, h]
                A_fixed[h * n + j, cols] = V0[j, h]
    s_raw = E.linear([(q, Kq), (p, Sp)])
    s = E.linear([(s_raw, np.eye(H * n) * (1.0 / math.sqrt(dh)))])
    # the softmax of scores shifted by m_h + c_h . xi (the same weights for any c_h; block/certificate.py)
    if shift.shape != (H, d) or not bool(np.isfinite(shift).all()):
        raise ValueError(f"the softmax shift is not a finite ({H}, {d}) array (shape {shift.shape})")
    xi = E.linear([(x, np.eye(d))], -x0[position])
    t = E.linear([(s, np.eye(H * n)), (xi, -np.ascontiguousarray(np.repeat(shift, n, axis=0).T))],
                 np.repeat(-s.c.reshape(H, n).max(-1), n))
    Ex = E.unary(t, "exp")
    S = np.kron(np.eye(H), np.ones((n, 1)))
    Dinv = E.unary(E.linear([(Ex, S)]), "reciprocal")
    att = E.product(Ex, E.linear([(Dinv, np.ascontiguousarray(S.T))]))
    E.bilinear_groups.append((p_node, H, dh))
    pv = E.product(E.linear([(att, Sel)]), v)
    o = E.linear([(att, A_fixed), (pv, np.eye(d))])
    y = E.linear([(x, np.eye(d)), (o, W_O)], b_O)
    h_ln = _layer_norm(E, y, *ln["ln_attn"])
    base = y if gpt2 else h_ln
    pre = E.linear([(h_ln, np.asarray(a["mlp_W_1"], float))], np.asarray(a["mlp_b_1"], float))
    mm = E.unary(pre, act)
    y2 = E.linear([(base, np.eye(d)), (mm, np.asarray(a["mlp_W_2"], float))], np.asarray(a["mlp_b_2"], float))
    F = _layer_norm(E, y2, *ln_out)
    return E, E.linear([(F, np.ascontiguousarray(C.T))])


def rederived_pieces(a: dict, nxt: dict, prompt: int, position: int, C: np.ndarray, radii, shift) -> dict:
    """What the certificate's bound needs (block/certificate.py states the bound), at the radii r raised to
    r_t = r (1 + 4 u) as the stage's, with the softmax shift `shift` (H, d) of the certificate file: c, J (g(0),
    grad g(0) as floats), e0, a0 (their rounding), H0 (m, d, d) and its rounding bound h_round (m,), the cubic form
    P (m, d, d) with P_rounding (m,) and P_finite (m,), and
    rest (2, R, m): the Taylor model's fourth-order rest per sense (+g, -g) and the output's rounding beyond
    e0 + a0 r."""
    radii = np.asarray(radii, dtype=np.float64)
    rho = np.concatenate([[0.0], radii]) * (1 + 4 * U)
    with np.errstate(over="ignore", invalid="ignore"):      # an enclosure that reaches a singularity gives +inf
        E, g = block_output(a, nxt, prompt, position, np.asarray(C, dtype=np.float64), rho,
                            np.asarray(shift, dtype=np.float64))
        lam = np.concatenate([g.R, np.zeros((g.R.shape[0], E.eps.shape[1] - g.R.shape[1]))], 1)
        H0, h_round = centre_hessian(E, [lam[:, nd.cols[0]:nd.cols[1]] for nd in E.nodes])
        cm = cubic_model(E, g)
    # g(delta) = c + J delta + sum_n lambda_n nu_n + err: the nodes' rounding is in the rest, e0 and a0 are the
    # output form's own (cerr, and jerrJ: its Jacobian row's)
    return {"c": g.c, "J": g.J, "e0": g.cerr, "a0": g.jerrJ, "H0": H0, "h_round": h_round, "P": cm.P,
            "P_rounding": cm.P_rounding, "P_finite": cm.P_finite, "rest": cm.rest[:, 1:]}
