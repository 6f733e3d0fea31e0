"""Random small heads for the certificates' property tests, and a sampled lower bound on their maximum."""
import math

import numpy as np
from hypothesis import strategies as st

from attncert.head.problem import random_head_problem


@st.composite
def small_heads(draw, mode="fixed", max_n=5):
    seed = draw(st.integers(0, 10_000))
    d = draw(st.integers(2, 6))
    n = draw(st.integers(1, max_n))
    dh = draw(st.integers(1, 4))
    radius = 10 ** draw(st.floats(math.log10(0.003), math.log10(0.3)))
    norm = draw(st.sampled_from(["linf", "l2"]))
    scale = draw(st.floats(0.3, 1.5))
    return random_head_problem(np.random.default_rng(seed), d=d, d_head=dh, n=n, radius=radius, norm=norm,
                               mode=mode, scale=scale)


def sampled_max(problem, k=64, seed=0):
    """Largest g over random feasible perturbations (vertices of the box / points of the sphere)."""
    rng = np.random.default_rng(seed)
    best = problem.nominal_value()
    for _ in range(k):
        D = rng.standard_normal(problem.Z0.shape)
        if problem.norm == "linf":
            D = problem.radius * np.sign(D)
        else:
            D = problem.radius * D / np.linalg.norm(D, axis=1, keepdims=True)
        best = max(best, problem.value(problem.Z0 + D))
    return best
