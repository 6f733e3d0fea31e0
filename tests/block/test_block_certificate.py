"""The sound block certificate (block/certificate.py, block/taylor_model.py, block/enclosure.py) on tiny random
blocks (GPT-2 pre-LN and BERT post-LN): it bounds f and g at random points, vertices and ascent maxima at every
radius, both senses; with its beyond-quadratic part dropped it is violated (so the tests can see an unsound bound);
its pieces hold on their own and each is needed.
"""
import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from attncert.block.build import transition_from_model
from attncert.block.certificate import block_graph, certify_transition, sdp_box_upper, verified_pd
from attncert.block.map import specification_values
from attncert.block.residual import analyze_transition, ascent, curvature
from attncert.model.extraction import load_model

from tiny_blocks import tiny_block  # tests/tiny_blocks.py

torch.set_num_threads(1)
DT = torch.float64
RADII = [1e-3, 1e-2, 3e-2]


@pytest.fixture(scope="module", params=["gpt2", "bert"])
def tiny(request, tiny_gpt2_dir, tiny_bert_dir):
    _, tr, C, cv = tiny_block(request.param, tiny_gpt2_dir, tiny_bert_dir)
    cert = certify_transition(tr, C.numpy(), cv.g0.numpy(), cv.gradient.numpy(), RADII)
    return tr, C, cv, cert


def _points(tr, r, n=400, seed=0):
    gen = torch.Generator().manual_seed(seed)
    pts = (2 * torch.rand(n, tr.d, dtype=DT, generator=gen) - 1) * r
    vertices = torch.sign(torch.randn(n, tr.d, dtype=DT, generator=gen)) * r
    return torch.cat([pts, vertices])


def _ascent_max(tr, C, cv, sign=1.0, radii=RADII):
    Cs = sign * C
    g0, grad = sign * cv.g0, sign * cv.gradient
    starts = torch.sign(torch.randn(C.shape[0], 6, tr.d, dtype=DT, generator=torch.Generator().manual_seed(3)))
    best, _ = ascent(tr, Cs, g0, grad, radii, starts, steps=60)
    return best.numpy()                                                    # (m, R)


def test_certificate_bounds_f_and_g_everywhere(tiny):
    tr, C, cv, cert = tiny
    assert np.all(np.isfinite(cert.certificate_f)) and np.all(np.isfinite(cert.certificate_g))
    for ri, r in enumerate(RADII):
        delta = _points(tr, r, seed=ri)
        g = specification_values(tr, C, delta).detach().numpy()           # (n, m)
        f = g - cv.g0.numpy() - (delta @ cv.gradient.T).numpy()
        assert np.all(f <= cert.certificate_f[:, ri]), r
        assert np.all(-f <= cert.certificate_f_neg[:, ri]), r
        assert np.all(g <= cert.certificate_g[:, ri]), r
        assert np.all(-g <= cert.certificate_g_neg[:, ri]), r
    assert np.all(_ascent_max(tr, C, cv) <= cert.certificate_f)
    assert np.all(_ascent_max(tr, C, cv, -1.0) <= cert.certificate_f_neg)


def test_certificate_without_remainder_is_violated(tiny):
    """The certificate with its remainder dropped (the SDP bound of 1/2 r^2 u^T H0 u alone) is not an upper
    bound at large radii: the ascent exceeds it on some unit in one sense or the other, and so the soundness
    test above would fail without the remainder. The full certificate still holds there (or is +inf)."""
    tr, C, cv, _ = tiny
    radii = [0.1, 0.3, 1.0]
    cert = certify_transition(tr, C.numpy(), cv.g0.numpy(), cv.gradient.numpy(), radii)
    up, down = _ascent_max(tr, C, cv, radii=radii), _ascent_max(tr, C, cv, -1.0, radii=radii)
    over = (up > cert.parts["quadratic"]) | (down > cert.parts["quadratic_neg"])
    assert over.any()
    assert np.all(up <= cert.certificate_f) and np.all(down <= cert.certificate_f_neg)
    assert np.all(cert.parts["remainder"] > 0)


def test_affine_enclosure_holds_at_sampled_points(tiny):
    tr, C, cv, _ = tiny
    r = RADII[-1]
    G, gv = block_graph(tr, C, torch.tensor([r], dtype=DT))
    xi = _points(tr, r, n=200, seed=7)
    g = specification_values(tr, C, xi).detach()
    lin = gv.c + xi @ gv.J.T
    assert torch.all((g - lin).abs() <= gv.e[0])
    # the Jacobian remainder: J(xi) u - J u for u = sign vectors
    jac = torch.func.vmap(torch.func.jacrev(lambda x: specification_values(tr, C, x)))(xi[:20])   # (20, m, d)
    u = torch.sign(torch.randn(5, tr.d, dtype=DT, generator=torch.Generator().manual_seed(2)))
    dev = torch.einsum("nmd,kd->nkm", jac - gv.J.unsqueeze(0), u).abs()
    assert torch.all(dev <= gv.a[0])


def test_sdp_box_upper_covers_every_vertex_and_is_verified():
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(4, 8, 8, dtype=DT, generator=gen)
    M = 0.5 * (A + A.transpose(-1, -2))
    bound, y = sdp_box_upper(M, iterations=20)
    V = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=8)), dtype=DT)
    brute = 0.5 * torch.einsum("vd,pde,ve->pv", V, M, V).amax(-1)
    assert torch.all(brute <= bound)
    assert torch.all(verified_pd(torch.diag_embed(y) - M))
    assert not bool(verified_pd(-torch.eye(3, dtype=DT).unsqueeze(0))[0])


def test_the_rank_one_dual_covers_every_vertex_and_beats_the_diagonal_dual_where_one_direction_dominates():
    """diag(y) + t v v^T - M verified PSD => 1/2 u^T M u <= 1/2 (sum y + t ||v||_1^2) on the box: above every vertex
    for any v (the top eigenvector or a random one); on a spiked matrix (one direction dominating, as the centre
    Hessians' box maxima are) below the diagonal dual; with t = 0 forced it is the diagonal dual."""
    from attncert.block.certificate import RANK_ONE_STEP, rank_one_box_upper

    gen = torch.Generator().manual_seed(1)
    n = 10
    A = torch.randn(6, n, n, dtype=DT, generator=gen)
    noise = 0.3 * 0.5 * (A + A.transpose(-1, -2))
    w = torch.randn(6, n, dtype=DT, generator=gen)
    M = noise + 10.0 * torch.einsum("pi,pj->pij", w, w) / n                   # spiked
    V = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=n)), dtype=DT)
    brute = 0.5 * torch.einsum("vd,pde,ve->pv", V, M, V).amax(-1)
    top = torch.linalg.eigh(M)[1][..., -1]
    diag, _ = sdp_box_upper(M, iterations=20)
    for v in (top, torch.randn(6, n, dtype=DT, generator=gen)):
        bound, y, t = rank_one_box_upper(M, v, 20)
        assert torch.all(brute <= bound) and torch.all(t >= 0) and torch.all(torch.isfinite(bound))
        assert torch.all(verified_pd(torch.diag_embed(y) + t.view(-1, 1, 1) * torch.einsum("pi,pj->pij", v, v) - M))
    bound, _, t = rank_one_box_upper(M, top, 20)
    assert torch.all(t > 0) and torch.all(bound < diag) and torch.all(bound <= 1.01 * brute)
    assert RANK_ONE_STEP > 0


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_reported_certificate_is_the_second_order_one_and_sound(family, tiny_gpt2_dir, tiny_bert_dir):
    """The stage's certificate columns are the block certificate alone (the Taylor model's bound capped by the
    output LayerNorm's range), never CROWN's bound; finite at every radius; every one holds at sampled points and at
    the ascent maximum."""
    path = tiny_gpt2_dir if family == "gpt2" else tiny_bert_dir
    loaded = load_model({"name": f"tiny-{family}", "family": family, "source": str(path)})
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((6, 16)) * (1.0 if family == "bert" else 2.0)
    tr = transition_from_model(loaded.model, family, 1, x0, position=3)
    C = rng.standard_normal((3, 16))
    C = C / np.linalg.norm(C, axis=1, keepdims=True)
    radii = [1e-3, 0.3, 1.0]
    rows, _ = analyze_transition(tr, C, radii, qp_starts=8, ascent_restarts=4, ascent_steps=40, seed=0)
    df = pd.DataFrame(rows)
    assert (df["status"] == "ok").all()
    assert (df["certificate_f"] >= df["ascent_max"]).all()
    for k in ("f", "g", "f_neg", "g_neg"):
        assert np.array_equal(df[f"certificate_{k}"], df[f"second_order_certificate_{k}"])
    assert not [c for c in df.columns if c.endswith("_source")]
    numbers = [f"certificate_{k}" for k in ("f", "g", "f_neg", "g_neg")]
    assert np.isfinite(df[numbers].to_numpy()).all()
    if family == "gpt2":       # its LayerNorm variance reaches 0 at r = 1: the Taylor model is +inf, the cap decides
        assert df.loc[df.radius == radii[-1], "from_range_f"].all()
    assert not df.loc[df.radius == radii[0], "from_range_f"].any()       # the Taylor model decides at small r
    Ct = torch.as_tensor(C, dtype=DT)
    for ri, r in enumerate(radii):
        rr = df[df.radius == r]
        delta = _points(tr, r, seed=10 + ri)
        g = specification_values(tr, Ct, delta).detach().numpy()
        f = g - rr["g0"].to_numpy() - delta.numpy() @ curvature(tr, Ct).gradient.numpy().T
        assert np.all(f <= rr["certificate_f"].to_numpy()) and np.all(-f <= rr["certificate_f_neg"].to_numpy())
        assert np.all(g <= rr["certificate_g"].to_numpy()) and np.all(-g <= rr["certificate_g_neg"].to_numpy())


def _beyond_quadratic(tr, C, r, seed):
    """Sampled delta (points, vertices, and the ascent's iterates on +-(f - q)) with g - g(0) - grad . delta -
    1/2 delta^T H0 delta at each (n, m), and the Taylor model's pieces at r (the rest per sense, (2, 1, m))."""
    from attncert.block.certificate import centre_hessian
    from attncert.block.taylor_model import cubic_model

    G, gv = block_graph(tr, C, torch.tensor([0.0, r * (1 + 1e-12)], dtype=DT))
    H0, h_round = centre_hessian(G, G.centre_adjoints(gv))
    cm = cubic_model(G, gv, C.shape[0])
    delta = _points(tr, r, n=150, seed=seed)
    g = specification_values(tr, C, delta).detach()
    beyond = g - gv.c - delta @ gv.J.T - 0.5 * torch.einsum("nd,mde,ne->nm", delta, H0, delta)
    u = delta / r
    cubic = r ** 3 * (torch.einsum("nd,mde,ne->nm", u, cm.P, u) + cm.P_rounding)
    rounding = 0.5 * r * r * h_round + gv.e[0] + gv.a[0] * r
    return beyond, cubic, cm.rest[:, 1].unsqueeze(1), rounding.unsqueeze(0), delta


def _third_order_term(tr, C, delta):
    """(n, m) the exact third-order Taylor term D^3 g(0)[delta, delta, delta] / 6 (nested forward-mode derivatives)."""
    from torch.func import jvp

    def along(d):
        g = lambda t: specification_values(tr, C, t * d)  # noqa: E731
        d1 = lambda t: jvp(g, (t,), (torch.ones_like(t),))[1]  # noqa: E731
        d2 = lambda t: jvp(d1, (t,), (torch.ones_like(t),))[1]  # noqa: E731
        return jvp(d2, (torch.zeros((), dtype=DT),), (torch.ones((), dtype=DT),))[1] / 6.0
    return torch.stack([along(d) for d in delta])


def test_cubic_model_bounds_g_beyond_its_quadratic_and_needs_each_piece(tiny):
    """+-(g - g(0) - grad . delta - 1/2 delta^T H0 delta) <= r^3 u^T P u + rest(+-) + rounding at sampled points of
    the box (block/taylor_model.py) at every radius, and each piece is needed: without the cubic form the bound fails
    at some point, and the rest is what bounds g beyond its exact third-order Taylor polynomial (which exceeds the
    rounding alone at some point)."""
    tr, C, cv, _ = tiny
    without_cubic = without_rest = False
    for k, r in enumerate([1e-3, 1e-2, 3e-2, 0.1]):
        beyond, cubic, (up, down), rounding, delta = _beyond_quadratic(tr, C, r, seed=20 + k)
        if not (torch.isfinite(up).all() and torch.isfinite(down).all()):
            continue
        assert torch.all(beyond <= cubic + up + rounding) and torch.all(-beyond <= cubic + down + rounding), r
        without_cubic |= bool((beyond > up + rounding).any() or (-beyond > down + rounding).any())
        G, gv = block_graph(tr, C, torch.tensor([0.0], dtype=DT))
        H0 = torch.func.hessian(lambda x: specification_values(tr, C, x))(torch.zeros(tr.d, dtype=DT))
        d = delta[:12]
        g = specification_values(tr, C, d).detach()
        fourth = (g - gv.c - d @ gv.J.T - 0.5 * torch.einsum("nd,mde,ne->nm", d, H0, d)
                  - _third_order_term(tr, C, d).detach())
        assert torch.all(fourth <= up + rounding + 1e-12 * g.abs()), r
        assert torch.all(-fourth <= down + rounding + 1e-12 * g.abs()), r
        without_rest |= bool((fourth.abs() > rounding + 1e-12 * g.abs()).any())
    assert without_cubic and without_rest


def _denominator(G):
    """The var of the softmax denominators sum_k E_k (the input of the 1/x node)."""
    from attncert.block.map import RECIPROCAL
    (op,) = [op for op in G.ops if op.kind == "unary" and op.curve is RECIPROCAL]
    return G.vars[op.inputs[0]]


def test_the_weighted_mean_shift_stills_the_softmax_denominator(tiny):
    """With c_h the softmax-weighted mean of the score Jacobian rows, D = sum_j exp(s_j - m_h - c_h . xi) has no
    first-order motion (its Jacobian is rounding); with no shift it moves with every score."""
    tr, C, cv, _ = tiny
    rho = torch.tensor([0.0, RADII[-1]], dtype=DT)
    G, _ = block_graph(tr, C, rho)
    G0, _ = block_graph(tr, C, rho, torch.zeros(tr.n_heads, tr.d, dtype=DT))
    moved, still = _denominator(G0).J.abs().sum(-1), _denominator(G).J.abs().sum(-1)
    assert float(moved.min()) > 1e-6
    assert float((still / moved).max()) < 1e-12


@pytest.mark.parametrize("kind", ["zero", "random", "large"])
def test_any_softmax_shift_gives_a_sound_certificate(tiny, kind):
    """Softmax is the same function for every linear score shift c_h, so the certificate built on any shift bounds f
    and g at sampled points and ascent maxima (the weighted mean is the tight choice, not the sound one)."""
    tr, C, cv, cert = tiny
    gen = torch.Generator().manual_seed(11)
    scale = {"zero": 0.0, "random": 1.0, "large": 30.0}[kind]
    shift = scale * torch.randn(tr.n_heads, tr.d, dtype=DT, generator=gen)
    other = certify_transition(tr, C.numpy(), cv.g0.numpy(), cv.gradient.numpy(), RADII, shift=shift)
    assert np.array_equal(other.stored["softmax_shift"], shift.numpy())
    for ri, r in enumerate(RADII):
        delta = _points(tr, r, n=200, seed=ri)
        g = specification_values(tr, C, delta).detach().numpy()
        f = g - cv.g0.numpy() - (delta @ cv.gradient.T).numpy()
        assert np.all(f <= other.certificate_f[:, ri]) and np.all(-f <= other.certificate_f_neg[:, ri])
        assert np.all(g <= other.certificate_g[:, ri]) and np.all(-g <= other.certificate_g_neg[:, ri])
    assert np.all(_ascent_max(tr, C, cv) <= other.certificate_f)
    if kind != "zero":
        return
    # the weighted mean is at least as tight as no shift at the largest radius on these blocks
    assert np.all(cert.certificate_f[:, -1] <= other.certificate_f[:, -1] * (1 + 1e-9))
