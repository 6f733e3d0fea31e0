"""Random points of the perturbation ball: the sampled lower bound that every certificate must dominate.

For a head problem with n tokens of width d, radius r and norm ||.||, the ball is
    B = {D in R^{n x d} : ||D_i|| <= r for every token i}.
`feasible_perturbations` returns 2k points of B: for linf, k uniform points of the box and k of its
vertices; for l2, k points of each token's ball (a uniform direction times a uniform fraction of r) and
k points of its sphere. Every point is shrunk by a factor 1 - 1e-12 so rounding cannot leave B.
"""
from __future__ import annotations

import numpy as np

from attncert.head.problem import HeadProblem


def feasible_perturbations(problem: HeadProblem, rng: np.random.Generator, k: int = 100) -> np.ndarray:
    """(2k, n, d) perturbations inside the problem's ball (k interior + k on its boundary)."""
    n, d, r = problem.n, problem.d, problem.radius
    if problem.norm == "linf":
        D = np.concatenate([rng.uniform(-r, r, (k, n, d)), rng.choice([-r, r], (k, n, d))])
    else:
        D = rng.standard_normal((2 * k, n, d))
        D *= r / np.linalg.norm(D, axis=2, keepdims=True)
        D[:k] *= rng.uniform(0, 1, (k, n, 1))
    return D * (1 - 1e-12)
