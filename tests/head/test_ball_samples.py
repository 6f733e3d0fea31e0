import numpy as np
import pytest

from attncert.head.ball_samples import feasible_perturbations
from attncert.head.problem import random_head_problem


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_samples_lie_in_the_ball_and_half_on_its_boundary(norm):
    P = random_head_problem(np.random.default_rng(0), n=4, d=6, d_head=2, radius=0.3, norm=norm)
    D = feasible_perturbations(P, np.random.default_rng(1), k=50)
    assert D.shape == (100, P.n, P.d)
    size = np.abs(D).max(axis=2) if norm == "linf" else np.linalg.norm(D, axis=2)
    assert np.all(size <= P.radius)
    assert np.allclose(size[50:], P.radius, rtol=1e-9)  # the boundary half
    assert np.any(size[:50] < 0.99 * P.radius)  # the interior half is not all on the boundary
