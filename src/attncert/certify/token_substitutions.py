"""Exact worst case over enumerated token substitutions, for any query (fixed or varying).

Problem. Every attended position j picks one token from a finite list C_j = {c_j1, ..., c_jm_j}
(rows of `candidates[j]`, each in R^d):

    g* = max_{k_1..k_n}  sum_j e^{s_j} w_j / sum_j e^{s_j},
    s_j = q . (c_jk_j W_K + b_K) / sqrt(d_h),   w_j = c . (c_jk_j W_V + b_V),
    q   = c_ik_i W_Q + b_Q  (mode "varying")   or   q = nominal query (mode "fixed").

Method. Once the query token is chosen, the scores are fixed numbers per option, and the same
separable root as for the continuous fixed-query problem applies:

    g* >= t   <=>   F(t) = sum_j max_{k in C_j} e^{s_jk} (w_jk - t) >= 0.

(In varying mode the query position's own option is tied to the query choice, so its term is the
single option chosen.) Dinkelbach's iteration t <- g(argmax of F(t)) increases t strictly until the
argmax repeats; there are finitely many argmax patterns, so it stops after finitely many steps at
F(t) = 0, i.e. at the exact optimum (a bisection safeguard, as in `exact_worst_case`, skips the
crawling phase that Newton steps can have when scores differ a lot). Varying mode enumerates the
query position's m_i choices (each solved by its own root) and keeps the best: cost
O(m_i * iterations * sum_j m_j) instead of prod_j m_j.

The minimum is the maximum of -g (sense="min").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from attncert.certify.dinkelbach import DinkelbachStep, safeguarded_dinkelbach
from attncert.head.problem import HeadProblem


@dataclass
class SubstitutionResult:
    value: float  # problem.value(Z) at the optimal choice
    choice: tuple[int, ...]  # index into candidates[j] for every position j
    Z: np.ndarray  # (n, d) the chosen tokens
    sense: str
    iterations: int  # total Dinkelbach iterations over all query choices


def _separable_root(S: list[np.ndarray], W: list[np.ndarray], max_iter: int = 10000):
    """max over choices k_j of sum_j e^{S_j[k_j]} W_j[k_j] / sum_j e^{S_j[k_j]}; returns (t, choice, iters).

    Dinkelbach from the highest-score pattern, safeguarded by bisection on [t_lo, t_hi] when its
    steps crawl (`dinkelbach.safeguarded_dinkelbach`); it stops only after a Newton step from t_lo
    finds no better pattern, i.e. F(t_lo) <= 0 up to rounding: t_lo is the optimum.

    Deviation form. Near the root, w_jk - t cancels: with scores tens apart, t = g(P) of the incumbent
    pattern P rounds to the heavy token's value and an option whose weight is below the unit roundoff
    looks worse than keeping the heavy one, so the iteration stops short (by up to the value spread).
    Every probe is therefore written relative to the incumbent, whose value t_P is exact in this form:
        w_jk - probe = sum_{i in P} e_i (w_jk - w_i) / sum_{i in P} e_i  -  (probe - t_P),
    each term without cancellation; (probe - t_P) is 0 on a Newton step and a plain difference on a
    bisection step. A Newton step whose better pattern gains less than one ulp (a heavy token that
    must be dropped for a far better pattern) reports F > 0, and the loop bisects instead of stopping.
    """
    shift = max(float(s.max()) for s in S)
    E = [np.exp(s - shift) for s in S]

    def ratio(ch):
        e = np.array([E[j][k] for j, k in enumerate(ch)])
        w = np.array([W[j][k] for j, k in enumerate(ch)])
        return float(e @ w / e.sum())

    choice = [int(np.argmax(e)) for e in E]
    incumbent = {"t": ratio(choice), "pattern": choice}

    def step(probe: float) -> DinkelbachStep:
        P = incumbent["pattern"]
        e = np.array([E[i][k] for i, k in enumerate(P)])
        w = np.array([W[i][k] for i, k in enumerate(P)])
        lift = probe - incumbent["t"]
        new, F = [], 0.0
        for j in range(len(S)):
            dev = ((W[j][:, None] - w[None, :]) @ e) / e.sum() - lift  # w_jk - probe, per option k
            c = E[j] * dev
            k = int(np.argmax(c))
            new.append(k)
            F += float(c[k])
        value = ratio(new)
        if value > incumbent["t"]:  # mirrors the update of t_lo in safeguarded_dinkelbach
            incumbent.update(t=value, pattern=new)
        return DinkelbachStep(value, F < 0, new, improvable=F > 0)

    t_hi = max(float(w.max()) for w in W)
    t, choice, _, it = safeguarded_dinkelbach(step, incumbent["t"], t_hi, choice, 0.0, max_iter)
    return t, choice, it


def token_substitution_worst_case(problem: HeadProblem, candidates: Sequence[np.ndarray],
                                  sense: str = "max") -> SubstitutionResult:
    """Exact max (or min) of g when position j takes one of the rows of candidates[j].

    `problem` supplies the head (weights, c, query_index, mode); its Z0 fixes only the nominal query of
    mode "fixed"; radius and norm are not used.
    """
    if sense == "min":
        r = token_substitution_worst_case(problem.negated(), candidates, "max")
        return SubstitutionResult(-r.value, r.choice, r.Z, "min", r.iterations)
    if sense != "max":
        raise ValueError(f"sense must be 'max' or 'min'; got {sense!r}")
    cands = [np.atleast_2d(np.asarray(c, dtype=np.float64)) for c in candidates]
    if len(cands) != problem.n or any(c.shape[1] != problem.d or c.shape[0] < 1 for c in cands):
        raise ValueError(f"need {problem.n} non-empty candidate lists of {problem.d}-vectors")
    i = problem.query_index
    sq = np.sqrt(problem.d_head)
    keys = [c @ problem.W_K + problem.b_K for c in cands]
    vals = [(c @ problem.W_V + problem.b_V) @ problem.c for c in cands]
    if problem.mode == "fixed":
        queries = [(None, problem.nominal_query())]
    else:
        queries = [(k, cands[i][k] @ problem.W_Q + problem.b_Q) for k in range(cands[i].shape[0])]
    best = None
    total_iters = 0
    for kq, q in queries:
        S = [kj @ q / sq for kj in keys]
        W = list(vals)
        if kq is not None:  # the query position's token is the query choice itself
            S[i], W[i] = S[i][kq:kq + 1], W[i][kq:kq + 1]
        t, ch, it = _separable_root(S, W)
        total_iters += it
        if kq is not None:
            ch[i] = kq
        if best is None or t > best[0]:
            best = (t, tuple(ch))
    choice = best[1]
    Z = np.stack([cands[j][k] for j, k in enumerate(choice)])
    return SubstitutionResult(problem.value(Z), choice, Z, "max", total_iters)
