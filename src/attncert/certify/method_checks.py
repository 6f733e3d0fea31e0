"""Two claims of Paper A about the method itself, measured on random small heads (no model involved).

two_key_gap_slope
    The paper: on a head with two keys and a fixed query the second-order gap is of order r^2 and this
    order cannot be improved. For `heads` random two-key heads (`random_head_problem`, n = 2) and each
    norm, the gap G(r) = second-order certificate(r) - exact worst case(r) at the radii r_1 < ... < r_k,
    and the least-squares slope of log G against log r. Reported: the median slope over heads and norms
    (heads whose gap is not positive at every radius are counted, not fitted), and per norm.
substitution_max_rel_err_vs_enumeration
    The paper: the separable-root algorithm gives the exact worst case over enumerated token
    substitutions, any query. For `instances` random instances (n <= 4 positions, <= 4 candidates each,
    fixed and varying query), max over instances and senses of
        |separable root - brute-force enumeration| / (value spread of the enumeration).
"""
from __future__ import annotations

import itertools

import numpy as np
from tqdm import tqdm

from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.second_order.certificate import second_order_certificate
from attncert.certify.token_substitutions import token_substitution_worst_case
from attncert.head.problem import random_head_problem


def two_key_gap_slopes(heads: int, radii: list[float], seed: int) -> dict:
    """Per-norm and overall median log-log slope of the second-order gap on random two-key heads."""
    radii = np.asarray(sorted(radii), dtype=float)
    slopes = {"linf": [], "l2": []}
    unfitted = 0
    for h in tqdm(range(heads), desc="two-key heads", mininterval=5):
        for norm in slopes:
            gaps = []
            for r in radii:
                p = random_head_problem(np.random.default_rng(seed + h), d=6, d_head=4, n=2, radius=float(r), norm=norm)
                gaps.append(second_order_certificate(p).value - exact_worst_case(p).hi)
            gaps = np.asarray(gaps)
            if np.all(np.isfinite(gaps)) and np.all(gaps > 0):
                slopes[norm].append(float(np.polyfit(np.log(radii), np.log(gaps), 1)[0]))
            else:
                unfitted += 1
    every = slopes["linf"] + slopes["l2"]
    return {"two_key_gap_slope": float(np.median(every)) if every else None,
            "two_key_gap_slope_linf": float(np.median(slopes["linf"])) if slopes["linf"] else None,
            "two_key_gap_slope_l2": float(np.median(slopes["l2"])) if slopes["l2"] else None,
            "two_key_heads_unfitted": unfitted}


def substitution_vs_enumeration(instances: int, seed: int) -> dict:
    """Largest relative error of the separable-root worst case against brute-force enumeration."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for k in tqdm(range(instances), desc="substitution instances", mininterval=5):
        mode = ("fixed", "varying")[k % 2]
        n = int(rng.integers(1, 5))
        P = random_head_problem(rng, d=int(rng.integers(1, 6)), d_head=int(rng.integers(1, 4)), n=n, mode=mode,
                                scale=float(rng.uniform(0.3, 2.5)))
        cands = [
            P.Z0[j] + rng.standard_normal((int(rng.integers(1, 5)), P.d)) * rng.uniform(0.1, 1.5) for j in range(n)
        ]
        vals = [P.value(np.stack([cands[j][c] for j, c in enumerate(ch)]))
                for ch in itertools.product(*[range(len(c)) for c in cands])]
        spread = max(vals) - min(vals)
        for sense, want in (("max", max(vals)), ("min", min(vals))):
            err = abs(token_substitution_worst_case(P, cands, sense).value - want)
            worst = max(worst, err / spread if spread > 0 else (0.0 if err == 0 else np.inf))
    return {"substitution_max_rel_err_vs_enumeration": float(worst), "substitution_instances": instances}
