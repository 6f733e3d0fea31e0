"""The training loss's gradients written out by hand (`minip.backprop`) are autograd's, bit for bit."""
import itertools

import pytest
import torch

from attncert.minip.backprop import batch_ok, handles, loss_and_gradients
from attncert.minip.models import build_model
from attncert.minip.training import TrainConfig, run_witness
from attncert.minip.witness import witness_family

CASES = [c for c in itertools.product(["kernel", "dense"], [1, 4, 64], [8, 24], [1, 2, 3, 4], [1, 2])
         if c[0] == "kernel" or c[1] == 1]


@pytest.mark.parametrize("kind,rank,bits,length,depth", CASES)
def test_gradients_are_those_of_loss_backward(kind, rank, bits, length, depth):
    gen = torch.Generator().manual_seed(rank * 1000 + bits * 10 + length + depth)
    torch.manual_seed(rank + bits + length + depth)
    model = build_model(kind, bits, rank, 16 * depth, 4 * depth + 1, depth)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # larger weights: peaked attention, saturated features
    assert handles(model)
    for batch in (1, 37, 128):
        X = torch.randint(0, 2, (batch, length, bits), generator=gen).float()
        T = torch.randint(0, bits, (batch, length), generator=gen).float()
        assert batch_ok(X, T)
        model.zero_grad(set_to_none=True)
        reference = torch.mean((model(X) - T) ** 2)
        reference.backward()
        expected = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        loss = loss_and_gradients(model, X, T)
        assert torch.equal(loss, reference.detach())
        for p, g in zip(model.parameters(), expected):
            assert p.grad.shape == g.shape and torch.equal(p.grad, g)


def test_other_batches_and_modules_go_through_autograd():
    model = build_model("kernel", 8, 2, 16, 4)
    X = torch.zeros(4, 3, 8)
    assert not batch_ok(X.transpose(0, 1), torch.zeros(3, 4)) and not batch_ok(X.double(), torch.zeros(4, 3))
    assert not handles(torch.nn.Linear(3, 2))
    model.maps.bias.requires_grad_(False)
    assert not handles(model)


def test_a_run_trained_by_hand_is_the_run_trained_with_autograd(monkeypatch):
    """A whole witness run (every step's Adam update from these gradients) gives the record autograd gives."""
    from attncert.minip import training

    fam, tiny = witness_family(8, 4), TrainConfig(steps=40, batch=0, lr=1e-2, hidden=16, value_dim=4)
    drop = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    by_hand = drop(run_witness(family=fam, kind="kernel", rank=2, seed=1, train=tiny))
    monkeypatch.setattr(training, "handles", lambda model: False)
    assert by_hand == drop(run_witness(family=fam, kind="kernel", rank=2, seed=1, train=tiny))


@pytest.mark.parametrize("kind,rank", [("kernel", 1), ("kernel", 4), ("kernel", 128), ("dense", None)])
def test_gradients_at_the_paper_sizes_are_those_of_loss_backward(kind, rank):
    """The paper grid's head (hidden 64, value_dim 16) on a batch of 256 sequences of 3 tokens of 20 bits."""
    gen = torch.Generator().manual_seed(20)
    torch.manual_seed(rank or 0)
    model = build_model(kind, 20, rank, 64, 16, 1)
    X = torch.randint(0, 2, (256, 3, 20), generator=gen).float()
    T = torch.randint(0, 20, (256, 3), generator=gen).float()
    model.zero_grad(set_to_none=True)
    reference = torch.mean((model(X) - T) ** 2)
    reference.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    assert torch.equal(loss_and_gradients(model, X, T), reference.detach())
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), expected))


def test_leading_columns_of_a_product_are_those_of_the_whole_product():
    """d[h, x] = dz W keeps only the columns of h; computing just those (dz times W's first H columns) gives
    the bits of those columns of the whole product, for every shape of the paper grid's maps layer: rows
    256 * N (N = 2, 3) and the witness family's 190 * 3, m = 6..24, the outputs of every rank and of the
    dense head."""
    gen = torch.Generator().manual_seed(0)
    ranks = (1, 2, 4, 6, 7, 8, 9, 10, 11, 12, 14, 16, 20, 24, 32, 48, 64, 96, 128)
    for rows in (512, 768, 570):
        for m in (6, 8, 10, 12, 14, 16, 20, 24):
            for out in sorted({2 * r + m + 33 for r in ranks} | {3 * m + 33}):
                dz, W = torch.randn(rows, out, generator=gen), torch.randn(out, 64 + m, generator=gen)
                assert torch.equal(dz.mm(W.narrow(-1, 0, 64)), dz.mm(W).narrow(-1, 0, 64))
