"""The output LayerNorm's range (block/layer_norm_range.py, and the audit's numpy mirror in
audit/block_layer_norm_range.py): s c . LN(y) never exceeds the bound for any input y, at any scale of y, gain, bias
and eps; the bound is attained up to eps / m (y along P (c gamma)), so it is not loose by construction; the stage's
bound is never below the audit's."""
import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.audit.block_layer_norm_range import f_range as audit_f_range
from attncert.audit.block_layer_norm_range import g_range
from attncert.block.layer_norm_range import f_range, layer_norm_range
from attncert.block.map import DTYPE, LayerNormParams, layer_norm


def _params(rng, d, gain_scale, bias_scale, eps):
    return LayerNormParams(torch.as_tensor(gain_scale * rng.standard_normal(d), dtype=DTYPE),
                           torch.as_tensor(bias_scale * rng.standard_normal(d), dtype=DTYPE), eps)


@settings(max_examples=60)
@given(seed=st.integers(0, 10_000), d=st.integers(2, 96), y_scale=st.floats(1e-8, 1e6),
       gain_scale=st.floats(1e-4, 1e3), bias_scale=st.floats(0.0, 1e2), eps=st.sampled_from([1e-12, 1e-5, 1.0]))
def test_no_input_exceeds_the_range_and_the_range_is_nearly_attained(seed, d, y_scale, gain_scale, bias_scale, eps):
    rng = np.random.default_rng(seed)
    ln = _params(rng, d, gain_scale, bias_scale, eps)
    C = torch.as_tensor(rng.standard_normal((3, d)), dtype=DTYPE)
    bound = layer_norm_range(C, ln)
    assert torch.isfinite(bound).all()
    # inputs whose float LayerNorm is accurate (no cancellation in y - mean y): the bound is the real map's
    y = torch.as_tensor(y_scale * rng.standard_normal((200, d)), dtype=DTYPE)
    w = C * ln.gain
    pw = w - w.mean(-1, keepdim=True)
    worst = pw / pw.pow(2).mean(-1, keepdim=True).sqrt() * (1e4 * math.sqrt(eps))   # along P (c gamma), m = 1e8 eps
    g = torch.cat([layer_norm(y, ln), layer_norm(worst, ln)]) @ C.T    # (203, 3)
    assert (g.amax(0) <= bound[0]).all() and ((-g).amax(0) <= bound[1]).all()
    # the row's own direction reaches the bound up to eps / m and rounding
    attained = torch.diagonal(layer_norm(worst, ln) @ C.T)
    assert (attained >= bound[0] - 1e-6 * (bound[0].abs() + (C @ ln.bias).abs() + 1)).all()
    # the audit's mirror agrees, and the stage's bound is never below it
    audit = g_range(C.numpy(), ln.gain.numpy(), ln.bias.numpy())
    scale = (C.abs() @ ln.bias.abs() + math.sqrt(d) * pw.norm(dim=-1)).numpy()      # the terms' size
    assert (bound.numpy() >= audit).all() and (np.abs(bound.numpy() - audit) <= 1e-8 * scale + 1e-300).all()


def test_the_cap_of_f_adds_the_linear_movement_of_any_gradient():
    rng = np.random.default_rng(0)
    d = 16
    ln = _params(rng, d, 1.0, 0.1, 1e-5)
    C = torch.as_tensor(rng.standard_normal((2, d)), dtype=DTYPE)
    g0 = torch.as_tensor(rng.standard_normal(2), dtype=DTYPE)
    G = torch.as_tensor(rng.standard_normal((2, d)), dtype=DTYPE)
    rho = torch.tensor([1e-3, 1.0], dtype=DTYPE)
    gb = layer_norm_range(C, ln)
    fb = f_range(gb, g0, G, rho)                                        # (2, m, R)
    expected = gb - torch.stack([g0, -g0])
    lin = G.abs().sum(-1)
    for ri, r in enumerate(rho):
        assert (fb[:, :, ri] >= expected + lin * r).all()
        assert torch.allclose(fb[:, :, ri], expected + lin * r, rtol=1e-8)
    audit = audit_f_range(g_range(C.numpy(), ln.gain.numpy(), ln.bias.numpy()), g0.numpy(), G.numpy(), rho.numpy())
    assert (fb.numpy() >= audit).all()
    bad = G.numpy().copy()
    bad[0, 0] = math.nan
    assert np.isinf(audit_f_range(gb.numpy(), g0.numpy(), bad, rho.numpy())).all()
