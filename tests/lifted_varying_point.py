"""The lifted true point of a varying-query perturbation: the values every variable of the factored programs takes
there (`second_order.varying_query.program`, `second_order.varying_query.long_program`). Shared by their tests, which
check that each row of the assembled program holds at it."""
import numpy as np

from attncert.certify.second_order.varying_query.program import widths


def lifted_factored_point(p, D, delta, query_shift) -> dict:
    """Values at Z0 + delta (D: `VaryingData`, the query last). query_shift(j, di): the score shift of key j by the
    query's perturbation di (the program's eta_j before its normalization by H_j). The per-token atoms are returned
    as lam / base - lam times xhat (n x 3: sigma, omega, beta in unit coordinates)."""
    M = p.W_Q @ p.W_K.T / np.sqrt(p.d_head)
    dp = delta[D.order]
    di = dp[-1]
    n, m = D.n, D.n - 1
    x = np.zeros((n, 3))  # sigma, omega, beta
    eta = np.zeros(n)
    for j in range(m):
        x[j] = [D.u_s @ dp[j], D.u_w @ dp[j], di @ M @ dp[j]]
        eta[j] = query_shift(j, di)
    x[-1] = [D.u_q @ di, D.u_w @ di, di @ M @ di]
    Hf, hk = widths(D)
    e = np.exp(D.A + x[:, 0] + x[:, 2] + eta)
    tau = 1.0 / e.sum()
    bt = tau * np.exp(eta[:m] + Hf[:m])
    base = np.concatenate([bt, [tau]])
    sk = x[:, 0] + x[:, 2]
    lam = base * np.expm1(sk + hk + D.eps) / np.expm1(2 * hk + 2 * D.eps)
    xhat = x / D.scales[:, [0, 1, 3]] * D.active[:, [0, 1, 3]]
    etahat = eta[:m] / Hf[:m]
    return {"tau": tau, "mu": tau * np.expm1(eta[:m] + Hf[:m]) / np.expm1(2 * Hf[:m]), "bt": bt, "eta": tau * etahat,
            "lam": lam, "U": lam[:, None] * xhat, "V": (base - lam)[:, None] * xhat, "SU": lam * sk / hk,
            "SV": (base - lam) * sk / hk, "W": tau * di / p.radius, "Q": tau * etahat ** 2}
