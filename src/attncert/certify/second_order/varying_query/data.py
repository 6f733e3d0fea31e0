"""The reduced data of a varying-query unit (`VaryingData`): what both varying-query programs are built from.

Builder code only (no solver): `attncert.audit` rebuilds the data from their stored fields (`from_fields`).
"""
from __future__ import annotations

import math

import numpy as np

from attncert.certify.diagonal_bilinear_bound import head_bilinear_bound
from attncert.certify.second_order.relaxation.facets import UpperChainFacets
from attncert.certify.second_order.relaxation.rows import DEVIATION_BELOW
from attncert.head.negligible_tokens import negligible_tokens
from attncert.head.problem import HeadProblem
from attncert.head.reduced_geometry import ReducedGeometry
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

_LOW = -650.0  # lowest representable log lower weight of the (never dropped) query token


class VaryingData:
    """Reduced data of a varying-query unit, tokens permuted so that the query token is last.

    Coordinates of token j: (sigma, omega, eta, beta), each in units of its own range `scales[j]`
    (a coordinate whose range is 0 is identically 0: unit 1, `active` 0). The score shift
    sigma + eta + beta lies in [-h_j, h_j]; the unit score is (R sigma_hat + H eta_hat + bb beta_hat) / h_j.
    """

    def __init__(self, problem: HeadProblem, geo: ReducedGeometry, fo: float, center: bool | str = False):
        """geo: `reduced_geometry(problem)`; fo: the fallback bound. center: subtract a common query direction pbar
        from every score.

        Softmax is invariant under a common shift of the scores, so s_j - pbar.delta_i (every j, the query token
        too) gives the same head for any fixed vector pbar: p_j becomes p_j - pbar and the query token's own
        direction u_s + p_i - pbar. It narrows H_j where the keys share a component (biases, common directions
        of the tokens). center=True: pbar = the coordinatewise median of the p_j; the rounding of the subtraction
        (<= u |p_j - pbar|.|delta_i| per token) is added to the score error eps_j. center="key": pbar =
        W_Q kbar / sqrt(d_h) with kbar the coordinatewise median of the keys k0_j, so that every direction stays
        in the range of W_Q: p_j = W_Q kq_j with the key-space direction kq_j = (k0_j - kbar) / sqrt(d_h) (field
        `kq`, (n, d_h)), and a program can read the query's shift of every score through the d_h-dimensional
        delta_i W_Q (`long_program`). The program's functional of key j is then the exact W_Q kq_j of the
        stored kq_j; the rounding of kq_j against (k0*_j - kbar) / sqrt(d_h) (`key_direction_error`) is added to
        eps_j, and H_j covers the rounding of the float p_j against W_Q kq_j.
        """
        n, d, dh, r = problem.n, problem.d, problem.d_head, problem.radius
        i = problem.query_index
        self.order = np.array([j for j in range(n) if j != i] + [i])
        dual = problem.dual_norm
        up = 1.0 + gamma(d + 4)
        s0, w0, u_s, u_w = geo.s0, geo.w0, geo.u_s, geo.u_w
        eps_w = geo.eps_w
        sq = math.sqrt(dh)
        K0 = problem.Z0 @ problem.W_K + problem.b_K
        p = (K0 @ problem.W_Q.T) / sq  # (n, d): p_j = W_Q k0_j / sqrt(d_h)
        shift_err = np.zeros(n)
        pbar = np.zeros(d)
        self.kq = self.kbar = None
        p_err = np.zeros(n)  # rounding of the float p_j against the program's functional W_Q kq_j (dual norm)
        if center == "key":
            self.kbar = key_center(K0, problem.W_Q, p, dual)
            self.kq = (K0 - self.kbar) / sq
            p = self.kq @ problem.W_Q.T
            absq = np.abs(problem.W_Q)
            e = key_direction_error(problem, K0, self.kbar, self.kq)  # (n, d_h) per coordinate
            shift_err = r * np.array([dual(absq @ e[j]) for j in range(n)]) * (1.0 + gamma(dh + 4)) + 1e-300
            # the float product's error and the rounding of H_j's own products (relative <= 3u; 8u taken)
            p_err = np.array([dual(absq @ np.abs(self.kq[j])) * gamma(dh + 4) + 8.0 * UNIT_ROUNDOFF * dual(p[j])
                              for j in range(n)])
            shift_err = shift_err + r * p_err  # the query token reads its direction u_s + p_i through the float p_i
            pbar = self.kbar @ problem.W_Q.T / sq  # for the record: the program never reads it
        elif center:
            pbar = np.median(p, axis=0)
            p = p - pbar
            shift_err = 4.0 * UNIT_ROUNDOFF * r * np.array([dual(np.abs(p[j])) for j in range(n)]) + 1e-300
        o = self.order
        self.w0, self.eps_w = w0[o], eps_w[o]
        if self.kq is not None:
            self.kq = self.kq[o]  # token order of every per-token field: the query last
        self.g0 = geo.nominal
        self.u_s, self.u_w = u_s, u_w
        self.u_q = u_s + p[i]  # score direction of the query token's own perturbation
        self.p = p[o]
        self.R_s = r * dual(u_s) * up
        self.R_q = r * dual(self.u_q) * up
        self.R_w = r * dual(u_w) * up
        self.H = np.array([r * (dual(self.p[j]) + p_err[o[j]]) * up for j in range(n)])
        self.H[-1] = 0.0  # the query token's eta is part of sigma_i^+
        self.bb = r * r * head_bilinear_bound(problem.W_Q, problem.W_K, problem.norm) / sq * up
        R = np.where(np.arange(n) < n - 1, self.R_s, self.R_q)
        self.h = (R + self.H + self.bb) * (1.0 + 4.0 * UNIT_ROUNDOFF)  # total score shift in [-h_j, h_j]
        rng = np.stack([R, np.full(n, self.R_w), self.H, np.full(n, self.bb)], axis=1)
        self.active = (rng > 0).astype(np.float64)
        self.scales = np.where(rng > 0, rng, 1.0)
        # rounding envelope of every score term (absolute values), as for the first-order intervals
        zi = np.abs(problem.Z0[i])
        q_env = (zi + r) @ np.abs(problem.W_Q) + np.abs(problem.b_Q)
        k_env = (np.abs(problem.Z0) + r) @ np.abs(problem.W_K) + np.abs(problem.b_K)
        self.eps = (8.0 * gamma(3 * d + 3 * dh + 50) * (k_env @ q_env) / sq + shift_err)[o]
        shift = float(np.max(s0[o] + self.eps))
        self.A = s0[o] - shift
        self.shift, self.pbar = shift, pbar
        self.rho_w = self.scales[0, 1]
        self.rho_o = max(fo - self.g0, self.R_w, 1e-300) if math.isfinite(fo) else max(self.R_w, 1.0)
        self.radius, self.norm, self.n, self.d = r, problem.norm, n, d
        self.Vt = self.query_map()
        self.deviation = bool(np.min(self.h) < DEVIATION_BELOW)
        self.tail = 0.0  # sound bound on the effect of dropped (negligible) tokens

    # the fields that determine the relaxation data (`fields`, `from_fields`); Vt and u_q follow from them
    FIELDS = ("order", "w0", "eps_w", "g0", "u_s", "u_w", "p", "R_s", "R_q", "R_w", "H", "bb", "h", "active", "scales",
              "eps", "A", "rho_w", "rho_o", "radius", "norm", "n", "d", "deviation", "tail", "shift", "pbar")
    KEY_FIELDS = ("kq", "kbar")  # the key-space directions (center="key" only)

    def query_map(self) -> np.ndarray:
        """The query-side map in unit coordinates, rows: eta_j (j != i), sigma_i^+, omega_i."""
        r = self.radius
        return np.vstack([self.p[:-1] * (r / self.scales[:-1, 2:3]) * self.active[:-1, 2:3],
                          (self.u_q * (r / self.scales[-1, 0]))[None, :],
                          (self.u_w * (r / self.rho_w))[None, :]])

    def fields(self) -> dict:
        """A copy of the fields (before `drop_negligible`, which changes the object in place)."""
        names = self.FIELDS + (self.KEY_FIELDS if self.kq is not None else ())
        return {k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in ((k, getattr(self, k)) for k in names)}

    @classmethod
    def from_fields(cls, fields: dict) -> "VaryingData":
        """The data rebuilt from `fields()` (bit for bit: u_q = u_s + p_i and Vt by the same operations)."""
        D = cls.__new__(cls)
        for k in cls.FIELDS + cls.KEY_FIELDS:
            setattr(D, k, fields.get(k))
        D.n, D.d, D.deviation = int(D.n), int(D.d), bool(D.deviation)
        D.norm = str(D.norm)
        D.u_q = D.u_s + D.p[-1]
        D.Vt = D.query_map()
        return D

    def drop_negligible(self) -> "VaryingData":
        """Drop the key tokens that can never carry weight (`head.negligible_tokens`; never the query)."""
        top = self.w0 + self.R_w + self.eps_w
        keep, tail = negligible_tokens(self.A, self.h, self.eps, top + 4.0 * UNIT_ROUNDOFF * np.abs(top),
                                       self.w0 - self.R_w - self.eps_w, keep_always=self.n - 1)
        q = self.n - 1
        low = self.A[q] - self.h[q] - self.eps[q]
        if np.all(keep) and low >= _LOW:
            return self
        if low < _LOW:
            # the query token cannot be dropped (its perturbation moves every score): raise its nominal score
            # so that its lower weight bound is representable. For any perturbation, with g' the head without
            # it, |g - g'| <= e_q |w_q - g'| / Z' and the raised head's likewise with c e_q (c >= 1), so the bound
            # of the raised head plus 2 c e_q^max / Z_lo (W_max - W_min) bounds max g.
            A_new = _LOW + self.h[q] + self.eps[q]
            lower = self.A[keep] - self.h[keep] - self.eps[keep]
            m = float(np.max(lower))
            logZ = m + math.log(float(np.sum(np.exp(lower - m))))
            spread = float(np.max(top) - np.min(self.w0 - self.R_w - self.eps_w))
            tail += 8.0 * math.exp(A_new + self.h[q] + self.eps[q] - logZ) * spread + 1e-300
            self.A = self.A.copy()
            self.A[q] = A_new
        for name in ("order", "w0", "eps_w", "p", "H", "h", "active", "scales", "eps", "A") + (
                ("kq",) if self.kq is not None else ()):
            setattr(self, name, getattr(self, name)[keep])
        self.Vt = np.vstack([self.Vt[: self.n - 1][keep[:-1]], self.Vt[self.n - 1:]])
        self.n = int(keep.sum())
        self.deviation = bool(np.min(self.h) < DEVIATION_BELOW)
        self.tail = tail
        return self


def key_center(K0: np.ndarray, W_Q: np.ndarray, p: np.ndarray, dual) -> np.ndarray:
    """The common key kbar whose query direction W_Q kbar / sqrt(d_h) leaves the smallest sum of the keys' dual
    norms ||p_j - W_Q kbar / sqrt(d_h)||_* (the sum of H_j / r), of two candidates: the coordinatewise median of
    the keys, and the least-squares preimage of the coordinatewise median of the p_j (the minimizer of that sum
    over all of R^d for the box's l1 dual norm, projected on the range of W_Q). Any kbar is sound."""
    sq = math.sqrt(W_Q.shape[1])
    cands = [np.median(K0, axis=0), np.linalg.lstsq(W_Q / sq, np.median(p, axis=0), rcond=None)[0]]
    cost = [sum(dual(pj) for pj in p - (kb @ W_Q.T) / sq) for kb in cands]
    return cands[int(np.argmin(cost))]


def key_direction_error(problem: HeadProblem, K0: np.ndarray, kbar: np.ndarray, kq: np.ndarray) -> np.ndarray:
    """(n, d_h): |kq_j - (k0*_j - kbar) / sqrt(d_h)| per coordinate, k0*_j = z_j W_K + b_K exactly.

    K0 = fl(Z0 W_K + b_K) errs by <= gamma_{d+1} (|Z0| |W_K| + |b_K|); the subtraction of kbar and the division
    by the float sqrt(d_h) (itself within u of the real one) add <= 4u (|K0| + |kbar|) / sqrt(d_h) + 4u |kq|.
    Doubled, with the division's own relative error.
    """
    d, dh = problem.W_Q.shape
    sq = math.sqrt(dh)
    base = gamma(d + 1) * (np.abs(problem.Z0) @ np.abs(problem.W_K) + np.abs(problem.b_K))
    e = (base + 4.0 * UNIT_ROUNDOFF * (np.abs(K0) + np.abs(kbar))) / sq + 4.0 * UNIT_ROUNDOFF * np.abs(kq)
    return 2.0 * e * (1.0 + 1e-9) + 1e-300


def start_chains(D: VaryingData) -> list:
    """linf: each token's upper facet chain, the keys' from u_s, the query position's from u_q."""
    chains = [UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s)] * (D.n - 1)
    chains.append(UpperChainFacets(D.u_q, D.u_w, D.radius, D.R_q))
    return chains
