"""The free duals' exact line search (`dual_bound.free_dual_shift`): the minimizer is a minimizer, the bound never
rises, only the named zero rows move, and the long path's certified bound is never above the unshifted dual's."""
import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.certify.second_order.dual_bound.free_dual_shift import line_minimizer, shift_free_duals
from attncert.certify.second_order.dual_bound.weak_duality import weak_duality_bound
from attncert.certify.second_order.varying_query import long as vl


def box_cost(delta, g, a, lo, hi, b_r):
    y = g - delta * a
    return delta * b_r + float(np.sum(np.maximum(y * lo, y * hi)))


@settings(max_examples=60, derandomize=True)
@given(st.integers(0, 10_000), st.integers(1, 12), st.floats(-3.0, 3.0))
def test_the_line_minimizer_is_below_every_kink_and_zero(seed, k, b_r):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=k) * 10.0 ** rng.integers(-6, 3)
    a = rng.normal(size=k) * np.where(rng.random(k) < 0.2, 0.0, 1.0)
    lo = -rng.random(k) * 10.0 ** rng.integers(-3, 4, size=k)
    hi = rng.random(k) * 10.0 ** rng.integers(-3, 4, size=k)
    delta = line_minimizer(g, a, lo, hi, b_r)
    here = box_cost(delta, g, a, lo, hi, b_r)
    nz = a != 0
    down = b_r - np.sum(np.where(a > 0, a * hi, a * lo))  # slope at -infinity
    up = b_r - np.sum(np.where(a > 0, a * lo, a * hi))  # slope at +infinity
    if not (down < 0 < up):  # no finite minimum: the row is left alone
        assert delta == 0.0
        return
    for cand in list(g[nz] / a[nz]) + [0.0]:
        assert here <= box_cost(cand, g, a, lo, hi, b_r) + 1e-9 * (1.0 + abs(here))


def test_an_unbounded_or_empty_row_is_left_alone():
    g, lo, hi = np.array([1.0, -2.0]), np.array([-1.0, -1.0]), np.array([1.0, 1.0])
    assert line_minimizer(g, np.zeros(2), lo, hi, 0.5) == 0.0  # no column: nothing to move
    assert line_minimizer(g, np.array([1.0, 1.0]), lo, hi, 5.0) == 0.0  # slope > 0 at -infinity: no finite minimum


def random_program(seed: int, m0: int = 3, m1: int = 5, nvar: int = 6):
    rng = np.random.default_rng(seed)
    A = sp.random(m0 + m1, nvar, density=0.6, random_state=seed, format="csc") * 3.0
    x0 = rng.normal(size=nvar)
    b = A @ x0 + np.concatenate([np.zeros(m0), rng.random(m1)])  # x0 is feasible
    dims = type("Dims", (), dict(zero=m0, nonneg=m1, soc=[], exp=0, psd=[], p3d=[]))()
    lo, hi = x0 - rng.random(nvar) * 5.0, x0 + rng.random(nvar) * 50.0
    return rng.normal(size=nvar), A, b, dims, lo, hi, x0


@settings(max_examples=40, derandomize=True)
@given(st.integers(0, 10_000))
def test_shifting_never_raises_the_certified_bound_and_moves_only_the_zero_rows(seed):
    c, A, b, dims, lo, hi, x0 = random_program(seed)
    z = np.random.default_rng(seed + 1).normal(size=A.shape[0])
    before, zr = weak_duality_bound(c, A, b, dims, z, lo, hi)
    zs = shift_free_duals(c, A, b, zr, lo, hi, range(dims.zero))
    after, _ = weak_duality_bound(c, A, b, dims, zs, lo, hi)
    assert np.array_equal(zs[dims.zero:], zr[dims.zero:])
    assert after <= before * (1 + 1e-12) + 1e-9
    assert after >= -float(c @ x0) - 1e-9  # still a bound: x0 is a feasible point of the box


def test_the_long_path_keeps_the_smaller_of_the_two_bounds():
    c, A, b, dims, lo, hi, _ = random_program(3)
    prog = type("P", (), dict(c=c, A=A, b=b, dims=dims, lo=lo, hi=hi, offsets={"SC": A.shape[1]}))()
    z = np.random.default_rng(4).normal(size=A.shape[0])
    bound, zr = weak_duality_bound(c, A, b, dims, z, lo, hi)
    kept, zk = vl.free_dual_bound(prog, z)
    assert kept <= bound
    assert kept == weak_duality_bound(c, A, b, dims, zk, lo, hi)[0]
