"""The bounds of the quadratic parts beyond node by node (block/grouped_quadratic.py, block/centre_hessian.py and the
signed unary sums of block/taylor_model.py, with the audit's numpy versions) on tiny random blocks: for random rows
R_v and sampled points of the box, the query-key group's sum, a few rows' whole quadratic part and a unary op's
signed sum lie within their bounds; the audit's implementations give the same bounds; the signed sum is below the
absolute one on the block output's rows."""
import numpy as np
import pytest
import torch

from attncert.audit.block_grouped_quadratic import score_groups as audit_groups
from attncert.block.certificate import block_graph
from attncert.block.grouped_quadratic import score_groups

from tiny_blocks import tiny_block  # tests/tiny_blocks.py

torch.set_num_threads(1)
DT = torch.float64


@pytest.fixture(scope="module", params=["gpt2", "bert"])
def graph(request, tiny_gpt2_dir, tiny_bert_dir):
    _, tr, C, _ = tiny_block(request.param, tiny_gpt2_dir, tiny_bert_dir)
    r = 0.05
    G, gv = block_graph(tr, C, torch.tensor([0.0, r], dtype=DT))
    return tr, C, G, r


def _rows(G, n_cols, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(5, n_cols, dtype=DT, generator=gen)


def _deltas(d, r, seed, n=300):
    gen = torch.Generator().manual_seed(seed)
    return torch.cat([(2 * torch.rand(n, d, dtype=DT, generator=gen) - 1) * r,
                      torch.sign(torch.randn(n, d, dtype=DT, generator=gen)) * r])


def test_the_query_key_group_bounds_its_products_at_sampled_points(graph):
    tr, C, G, r = graph
    (bg,) = score_groups(G)
    x, y = (G.vars[i] for i in bg.op.inputs)
    lo, hi = bg.op.cols
    Rv = _rows(G, hi, 3)
    Rv[:, lo:hi] = Rv[:, lo:lo + 1] * (1 + 1e-3 * Rv[:, lo:hi])     # nearly equal columns, as through the score
    Q = (x.s * y.s * r * r).unsqueeze(0).expand(1, -1)
    Qfull = torch.zeros(1, hi, dtype=DT)
    Qfull[:, lo:hi] = Q
    bound = bg.bound(Rv, Qfull, torch.tensor([r * r], dtype=DT))[0]
    for delta in _deltas(tr.d, r, 4):
        total = Rv[:, lo:hi] @ ((x.J @ delta) * (y.J @ delta))
        assert torch.all(total.abs() <= bound * (1 + 1e-9))


def test_the_audit_computes_the_same_query_key_bounds(graph):
    """The audit's numpy query-key group, given the stage's float nodes, agrees with the stage's bound."""
    from types import SimpleNamespace as NS

    tr, C, G, r = graph
    (bg,) = score_groups(G)
    lo, hi = bg.op.cols
    Rv = _rows(G, hi, 5)
    Q = torch.zeros(1, hi, dtype=DT)
    x, y = (G.vars[i] for i in bg.op.inputs)
    Q[:, lo:hi] = x.s * y.s * r * r
    stage = bg.bound(Rv, Q, torch.tensor([r * r], dtype=DT)).numpy()
    ins = tuple(NS(c=v.c.numpy(), J=v.J.numpy(), s=v.s.numpy()) for v in (x, y))
    fake = NS(nodes=[NS(cols=bg.op.cols, inputs=ins)], bilinear_groups=[(0, bg.H, bg.w)])
    (abg,) = audit_groups(fake)
    np.testing.assert_allclose(abg.bound(Rv.numpy(), Q.numpy(), np.array([[r * r]])), stage, rtol=1e-8)


def test_signed_unary_quadratic_parts_bound_the_mlp_output_and_beat_the_absolute_sum(graph):
    """A unary op's pieces 1/2 phi''(c_k) p_k^2 have the sign of phi''(c_k): through a later value v,
    sum_k R_vk Q_k lies in [-N_v, P_v] (the negative and positive parts' sums with the nodes' Qmax) at sampled points
    of the box; for the block output's rows through the GELU layer, max(P, N) is below sum_k |R_vk| Qmax_k."""
    tr, C, G, r = graph
    (gelu,) = [op for op in G.ops if op.kind == "unary" and op.curve is tr.activation]
    z = G.vars[gelu.inputs[0]]
    lo, hi = gelu.cols
    later = [v for v in G.vars if v.R.shape[1] >= hi][-1]
    Rv = later.R[:, lo:hi]
    d2 = gelu.curve.d2(z.c)
    q = 0.5 * d2.abs() * (z.s * r) ** 2
    Rs = Rv * torch.sign(d2)
    P, N = Rs.clamp_min(0) @ q, (-Rs).clamp_min(0) @ q
    for delta in _deltas(tr.d, r, 9):
        total = Rv @ (0.5 * d2 * (z.J @ delta) ** 2)
        assert torch.all(total <= P * (1 + 1e-9)) and torch.all(-total <= N * (1 + 1e-9))
    assert float(torch.median(torch.maximum(P, N) / (Rv.abs() @ q))) < 1.0


def test_the_formed_centre_hessian_bounds_a_few_rows_quadratic_part(graph):
    """quadratic_part_box: for a few random rows R_v over every node, sum_k R_vk Q_k(delta) (each node's centre
    quadratic piece evaluated directly) lies within rho^2 times the bound at sampled points; the audit's numpy
    version gives the same bound on its own enclosure's floats (within the two implementations' raises)."""
    from attncert.audit.block_enclosure import quadratic_part_box as audit_box
    from attncert.block.centre_hessian import quadratic_part_box

    tr, C, G, r = graph
    Rv = _rows(G, G.n_nodes, 7)
    bound = r * r * quadratic_part_box(G, Rv)
    for delta in _deltas(tr.d, r, 8, n=100):
        total = torch.zeros(Rv.shape[0], dtype=DT)
        for op in G.ops:
            if op.kind == "unary":
                z = G.vars[op.inputs[0]]
                piece = 0.5 * op.curve.d2(z.c) * (z.J @ delta) ** 2
            elif op.kind == "product":
                x, y = (G.vars[i] for i in op.inputs)
                piece = (x.J @ delta) * (y.J @ delta)
            else:
                continue
            total += Rv[:, op.cols[0]:op.cols[1]] @ piece
        assert torch.all(total.abs() <= bound * (1 + 1e-9))
    from types import SimpleNamespace as NS

    nodes = []
    for op in G.ops:
        if op.kind == "linear":
            continue
        ins = tuple(NS(c=G.vars[j].c.numpy(), J=G.vars[j].J.numpy(), s=G.vars[j].s.numpy()) for j in op.inputs)
        nodes.append(NS(kind=op.kind, cols=op.cols, inputs=ins, curve=op.curve.name if op.curve else None))
    np.testing.assert_allclose(audit_box(NS(nodes=nodes), Rv.numpy()), quadratic_part_box(G, Rv).numpy(), rtol=1e-8)
