"""Which moment cuts of the query's shift (`shift_moment`) the long varying program carries, each with its S-lemma
factor: two in every program (`all_keys_shift_cut`) and, in a linf cutting round, one weighted by the solved
second moments where the solved point violates it (`weighted_shift_cut`)."""
from __future__ import annotations

import numpy as np

from attncert.certify.second_order.varying_query.data import VaryingData
from attncert.certify.second_order.varying_query.long_program import key_lead, shift_cut_bound
from attncert.certify.second_order.varying_query.shift_moment import s_lemma_factor

SHIFT_CUT_MIN = 1e-3  # linf rounds add a weighted moment cut of the query's shift violated by more than this (relative)


def all_keys_shift_cut(D: VaryingData, W_Q: np.ndarray) -> list:
    """The moment cuts of the query's shift (`shift_moment`) in every program, each with its S-lemma factor: every key
    weighted 1, and every key weighted by its nominal softmax weight relative to the heaviest (e^{A_j - A_max}): two
    second-order cones of d_h + 2 rows. GPT-2-sized heads (random-gpt2, the context_length bench's units), l2, tight,
    relative gap with neither / the first / both: 0.00076 / 0.00026 / - at 64 keys (r = 0.002, one head; the full
    d_h x d_h moment matrix, a PSD cone at 40-150x the time: 0.00025); at 1,024 keys (3 heads, r = 0.002) the second
    cut takes 0.00042 / 0.00071 / 0.00058 to 0.00039 / 0.00020 / 0.00029 and at r = 0.02 0.0048 / 0.0044 / 0.0028 to
    0.0034 / 0.0018 / 0.0023. linf: a few per cent (the box's ellipsoid is loose). A second cut per weight in the
    metric of the max-cut SDP's scaling (`box_scaling.sdp_scaling`) instead of the column norms was measured and not
    kept: GPT-2-sized heads, 64 keys, r = 0.002, paper-like, heads 0-5, the long program alone: 0.0097 / 0.0166 /
    0.0143 / 0.0121 / 0.0120 / 0.0166 without it, 0.0070 / 0.0164 / 0.0143 / 0.0121 / 0.0121 / 0.0165 with it; on the
    default run's 512-key MiniLM units at r = 0.02 its later rounds ended in "insufficient progress" and walked the
    ladder (head 3 paper-like 8.9 -> 28.2 s, head 0 tight 20.0 -> 25.8 s), each bound slightly looser. Nor were
    copies with the factor scaled by sqrt(theta) (theta 0, 0.25, 0.5: on the box the S-lemma factor makes the form
    flat, whose max-cut bound is ~1.33x its best-found box maximum, against 1.0-1.25x without it): GPT-2-sized heads
    0-5 at 64 and 256 keys, both radii, the long program alone, one gap 26 % lower (head 0, 64 keys, r = 0.002),
    the rest within 3 % either way."""
    m = D.n - 1
    kq_lead = key_lead(D)[:, None] * D.kq[:m]
    weights = (np.ones(m), np.exp(np.maximum(D.A[:m] - np.max(D.A[:m]), -700.0)))
    return [(w, s_lemma_factor(D.Vt[:m], W_Q, w, kq_lead, D.norm)) for w in weights]


def weighted_shift_cut(prog, x: np.ndarray, D: VaryingData, W_Q: np.ndarray, memo: dict | None = None):
    """A moment cut of the query's shift weighted by the solved second moments (w_j = Q_j / tau, scaled to max 1)
    with its S-lemma factor, if the solved point violates it by more than SHIFT_CUT_MIN of its right side; else
    None. linf cutting-plane rounds: at 1,024 keys the relaxation spreads the query factor's second moments over
    light keys that the 0/1 budgets leave loose. memo: `build_long_program`'s (Lambda' is kept there)."""
    m = D.n - 1
    tau, Q, Y = float(prog.block(x, "tau")[0]), prog.block(x, "Q"), prog.block(x, "Y")
    if not (tau > 0 and m > 0 and np.all(np.isfinite(Q)) and float(np.max(Q)) > 0):
        return None
    w = np.clip(Q, 0.0, None) / float(np.max(Q))
    F = s_lemma_factor(D.Vt[:m], W_Q, w, key_lead(D)[:, None] * D.kq[:m], D.norm)
    lam = shift_cut_bound(D, W_Q, w, F, {} if memo is None else memo)
    lhs = tau * float(w @ Q) + float(np.sum((F @ Y) ** 2))
    return (w, F) if lhs > (1.0 + SHIFT_CUT_MIN) * lam * tau * tau else None
