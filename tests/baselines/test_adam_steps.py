"""AdamSteps: the iterates of torch.optim.Adam to the last bit, parameters without a gradient skipped as Adam does."""
import torch

from attncert.baselines.adam_steps import AdamSteps


def _run(make, steps=12):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(3, 4, generator=g, dtype=torch.float64).requires_grad_(True)
    b = torch.rand(5, generator=g, dtype=torch.float64).requires_grad_(True)
    target = torch.rand(3, 4, generator=g, dtype=torch.float64)
    opt = make([a, b])
    out = []
    for t in range(steps):
        opt.zero_grad()
        loss = ((a - target) ** 2).sum() * (1 + t % 3)
        if t % 4 != 1:  # b has no gradient at some steps: Adam skips it there (its step count too)
            loss = loss + (b.sin() * a.sum()).sum()
        loss.backward()
        opt.step()
        with torch.no_grad():
            a.clamp_(0.0, 1.0)
        out.append((a.detach().clone(), b.detach().clone()))
    return out


def test_iterates_are_torch_adams_bit_for_bit():
    ours = _run(lambda ps: AdamSteps(ps, 0.1, (0.5, 0.99)))
    theirs = _run(lambda ps: torch.optim.Adam(ps, lr=0.1, betas=(0.5, 0.99)))
    assert all(torch.equal(x, y) and torch.equal(u, v) for (x, u), (y, v) in zip(ours, theirs))
    assert not torch.equal(ours[0][1], ours[-1][1])  # b moved: the comparison covers its steps
