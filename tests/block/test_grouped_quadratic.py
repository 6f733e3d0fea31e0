"""The grouped bounds of the quadratic parts (block/grouped_quadratic.py, audit/block_grouped_quadratic.py) on tiny
random blocks: for random rows R_v and sampled points of the box, the softmax group's sum_k R_vk Q_k(delta) and the
query-key group's lie within rho^2 times the bound; the audit's numpy implementation gives the same bound; and where
the softmax's denominator moves, the group's bound on the MLP inputs is below the node-by-node sum."""
import numpy as np
import pytest
import torch

from attncert.audit.block_grouped_quadratic import score_groups as audit_groups
from attncert.block.certificate import block_graph
from attncert.block.grouped_quadratic import score_groups
from attncert.block.map import EXP, RECIPROCAL

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


def test_the_softmax_group_bounds_its_quadratic_pieces_at_sampled_points(graph):
    tr, C, G, r = graph
    (sg,), _ = score_groups(G)
    E, D, A = sg.ops
    t, Dv = G.vars[E.inputs[0]], G.vars[D.inputs[0]]
    x, y = (G.vars[i] for i in A.inputs)
    Rv = _rows(G, A.cols[1], 1)
    bound = r * r * sg.bound(Rv)
    for delta in _deltas(tr.d, r, 2):
        pieces = torch.cat([0.5 * EXP.d2(t.c) * (t.J @ delta) ** 2,
                            0.5 * RECIPROCAL.d2(Dv.c) * (Dv.J @ delta) ** 2,
                            (x.J @ delta) * (y.J @ delta)])
        cols = torch.cat([torch.arange(*E.cols), torch.arange(*D.cols), torch.arange(*A.cols)])
        total = Rv[:, cols] @ pieces
        assert torch.all(total.abs() <= bound * (1 + 1e-9)), (total.abs() / bound).max()


def test_the_query_key_group_bounds_its_products_at_sampled_points(graph):
    tr, C, G, r = graph
    _, (bg,) = score_groups(G)
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


def test_the_audit_computes_the_same_group_bounds(graph):
    """The audit's numpy softmax group, given the stage's float nodes, agrees with the stage's bound (within their
    different raises: the formulas alone are compared; the audit's own enclosure is compared by the audit tests)."""
    from types import SimpleNamespace as NS

    tr, C, G, r = graph
    soft, bil = score_groups(G)
    (E, D, A) = soft[0].ops
    Rv = _rows(G, A.cols[1], 5)
    stage = soft[0].bound(Rv).numpy()

    def var(v):
        return NS(c=v.c.numpy(), J=v.J.numpy(), s=v.s.numpy())
    nodes = {i: NS(cols=op.cols, inputs=tuple(var(G.vars[j]) for j in op.inputs))
             for i, op in enumerate([E, D, A])}
    fake = NS(nodes=nodes, softmax_groups=[(0, 1, 2, soft[0].H, soft[0].n)], bilinear_groups=[])
    (asg,), _ = audit_groups(fake)
    np.testing.assert_allclose(asg.bound(Rv.numpy()), stage, rtol=1e-8)


def test_the_softmax_group_is_below_the_node_by_node_sum_where_the_denominator_moves(graph):
    """Without the linear score shift (block_graph's `shift` zero) the softmax's denominator moves with every score,
    and its exps', 1/D's and weights' pieces cancel through the MLP's inputs (what the GELU's rest squares): the
    grouped form's bound is below the sum of the nodes' own bounds there."""
    tr, C, _, r = graph
    G, _ = block_graph(tr, C, torch.tensor([0.0, r], dtype=DT), torch.zeros(tr.n_heads, tr.d, dtype=DT))
    (sg,), _ = score_groups(G)
    E, D, A = sg.ops
    (gelu,) = [op for op in G.ops if op.kind == "unary" and op.curve is tr.activation]
    Rv = G.vars[gelu.inputs[0]].R
    node = torch.zeros(Rv.shape[0], dtype=DT)
    for op in (E, D):
        z = G.vars[op.inputs[0]]
        node += Rv[:, op.cols[0]:op.cols[1]].abs() @ (0.5 * op.curve.d2(z.c).abs() * z.s ** 2)
    x, y = (G.vars[i] for i in A.inputs)
    node += Rv[:, A.cols[0]:A.cols[1]].abs() @ (x.s * y.s)
    assert float(torch.median(sg.bound(Rv) / node)) < 1.0


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
