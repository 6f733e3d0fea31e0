"""Training runs (tiny), the witness evaluation, the sweep grid, tables, figures and the config schema."""
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
import yaml

from attncert.minip import plots, tables
from attncert.minip.sweep import (
    MAX_ERR_CRITERION,
    collect,
    criterion_transitions,
    parse_model,
    parse_setting,
    run_params,
    runs,
    scaling_transitions,
    train_config,
    witness_transition,
)
from attncert.minip.training import TrainConfig, evaluate_witness, model_on_device, run_scaling, run_witness
from attncert.minip.witness import witness_family

from conftest import REPO

CFG = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
PAPER = yaml.safe_load((REPO / "workflow" / "config" / "paper.yaml").read_text())
SCHEMA = yaml.safe_load((REPO / "workflow" / "config" / "schema.yaml").read_text())
TINY = TrainConfig(steps=30, batch=32, lr=1e-2, hidden=16, value_dim=4)


def test_witness_run_is_deterministic():
    fam = witness_family(8, 4)
    a = run_witness(family=fam, kind="kernel", rank=2, seed=1, train=TINY)
    b = run_witness(family=fam, kind="kernel", rank=2, seed=1, train=TINY)
    drop = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert drop(a) == drop(b)
    assert a["inputs"] == fam.size and 0 <= a["error"] <= 1
    # the largest deviation is recorded beside the share wrong, and agrees with it about "solved"
    assert 0 <= a["max_abs_error_query_position"] <= a["max_abs_error"]
    assert (a["max_abs_error"] < 0.5) == (a["error"] == 0)


def test_scaling_run_is_deterministic_and_reports_both_splits():
    kw = dict(bits=6, length=3, kind="dense", rank=None, train=TINY, test_fraction=0.25, max_pool=4096,
              pool_seed=0, eval_sequences=64)
    a, b = run_scaling(seed=0, **kw), run_scaling(seed=0, **kw)
    assert a["error_ood"] == b["error_ood"] and a["final_loss"] == b["final_loss"]
    assert a["max_abs_error_ood"] == b["max_abs_error_ood"] and a["max_abs_error_iid"] >= 0
    for split in ("iid", "ood"):
        assert (a[f"max_abs_error_{split}"] < 0.5) == (a[f"error_{split}"] == 0)
    assert a["pool_train"] == 48 and a["pool_test"] == 16
    assert run_scaling(seed=1, **kw)["final_loss"] != a["final_loss"]


def test_evaluate_witness_counts_failed_queries():
    fam = witness_family(24, 10)
    pred = fam.targets.astype(float)
    assert evaluate_witness(pred, fam)["fraction_queries_failed"] == 0.0
    pred[np.flatnonzero(fam.query_of == 3)[2], 0] += 0.6  # one input of query 3 wrong at the query position
    pred[0, 1] += 0.6                                     # a non-query position: counts in the error only
    r = evaluate_witness(pred, fam)
    assert r["queries_failed"] == 1 and r["fraction_queries_failed"] == 0.1
    assert r["error"] == pytest.approx(2 / (3 * fam.size))


def test_sweep_grid_of_default_config():
    grid = runs(CFG["minip"])
    assert len(grid) == len({r.path for r in grid})
    n_w = (len(CFG["minip"]["witness"]["ranks"]) + 1) * len(CFG["minip"]["seeds"])
    assert sum(r.setting == "witness" for r in grid) == n_w
    for r in grid:
        parse_setting(r.setting), parse_model(r.model)
        assert train_config(CFG["minip"], r.setting).steps > 0
    assert parse_setting("m12-n3") == ("scaling", 12, 3) and parse_model("r16") == ("kernel", 16)
    with pytest.raises(ValueError):
        parse_model("r-1")


def test_minip_config_schema():
    schema = {**SCHEMA["properties"]["minip"]}
    jsonschema.validate(CFG["minip"], schema)
    jsonschema.validate(PAPER["minip"], schema)
    for bad in ({k: v for k, v in CFG["minip"].items() if k != "witness"},
                {**CFG["minip"], "witness": {**CFG["minip"]["witness"], "bits": 10}},
                {**CFG["minip"], "seeds": []}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def _maxerr(err: float, seed: int) -> float:
    """A largest deviation consistent with a share wrong: < 1/2 iff nothing is wrong."""
    return 0.1 + 0.01 * seed if err == 0 else 1.0 + 10 * err + 0.1 * seed


def _synthetic_records():
    recs = []
    for seed in range(3):
        for rank, err in ((1, 0.2), (4, 0.1), (8, 0.02), (16, 0.0)):
            e = err if not (rank == 16 and seed) else 0.01
            recs.append(dict(setting="witness", bits=24, length=3, kind="kernel", rank=rank, seed=seed,
                             error=e, error_query_position=err, max_abs_error=_maxerr(e, seed),
                             max_abs_error_query_position=_maxerr(e, seed) / 2,
                             fraction_queries_failed=min(1.0, 5 * err), queries_failed=1, final_loss=err, seconds=1.0))
        recs.append(dict(setting="witness", bits=24, length=3, kind="dense", rank=None, seed=seed, error=0.0,
                         error_query_position=0.0, max_abs_error=0.01, max_abs_error_query_position=0.01,
                         fraction_queries_failed=0.0, queries_failed=0, final_loss=0, seconds=1))
        for m, shift in ((8, 0), (12, 1)):
            for rank in (1, 2, 4, 8):
                e = 0.2 / rank * (1 + 3 * shift) if rank < 8 or shift else 0.0
                recs.append(dict(setting=f"m{m}-n3", bits=m, length=3, kind="kernel", rank=rank, seed=seed,
                                 error_iid=e, error_ood=e, max_abs_error_iid=_maxerr(e, seed),
                                 max_abs_error_ood=_maxerr(e, seed), final_loss=e, seconds=1.0))
            recs.append(dict(setting=f"m{m}-n3", bits=m, length=3, kind="dense", rank=None, seed=seed,
                             error_iid=0.0, error_ood=0.0, max_abs_error_iid=0.0, max_abs_error_ood=0.0,
                             final_loss=0.0, seconds=1.0))
    return collect(recs)


def test_transitions_tables_and_figures(tmp_path):
    df = _synthetic_records()
    assert witness_transition(df) == {"some_seed_zero": 16, "every_seed_zero": None}
    t = scaling_transitions(df, 0.05).set_index("bits")
    assert t.loc[8, "transition_rank_ood"] == 8 and pd.isna(t.loc[12, "transition_rank_ood"])
    bound = {"bound": 8, "bits": 24, "n_queries": 10, "family_size": 190, "gap": 6, "frobenius": 8,
             "dominant": 6, "min_ratio": 5}
    w = tables.witness_table(df, bound)
    assert list(w["rank"].iloc[:4]) == [1, 4, 8, 16] and w["vs_bound"].iloc[0] == "below"
    tr = tables.transition_table(df, 0.05)
    assert list(tr["transition_rank_ood"]) == ["8", ">8"]
    claims = yaml.safe_load((REPO / "data" / "paper_claims.yaml").read_text())["paper_b"]["claims"]
    p = tables.paper_table(df, bound, claims, 0.05)
    assert "1272" in p.to_string() and "8 (m=8) -> >8 (m=12)" in p.to_string()
    tables.write_table(p, tmp_path / "p.csv", tmp_path / "p.md", title="t", notes=["n"])
    assert (tmp_path / "p.md").read_text().startswith("# t")
    plots.witness_figure(df, bound, tmp_path / "w.pdf", tmp_path / "w.png")
    plots.scaling_figure(df, 0.05, tmp_path / "s.pdf", tmp_path / "s.png")
    plots.transition_figure(tr, 0.05, tmp_path / "t.pdf", tmp_path / "t.png")
    crit = criterion_transitions(df, [0.01, 0.05, 0.1])
    plots.threshold_figure(crit, ["error < 0.01", "error < 0.05", "error < 0.1", MAX_ERR_CRITERION],
                           tmp_path / "c.pdf", tmp_path / "c.png")
    for f in ("w", "s", "t", "c"):
        assert Path(tmp_path / f"{f}.pdf").stat().st_size > 1000 and Path(tmp_path / f"{f}.png").stat().st_size > 1000


# ---------------------------------------------------------------------------------------------
# device (config key `device`, through minip.sweep.run_params)
# ---------------------------------------------------------------------------------------------
def test_run_params_carry_the_device():
    assert run_params(CFG["minip"], "witness")["device"] == "cpu"
    assert run_params(CFG["minip"], "m8-n3", "cuda:1")["device"] == "cuda:1"


def test_model_follows_the_device():
    """`meta` (tensors without data, in every torch build) stands in for a GPU: every parameter moves."""
    import torch

    model = model_on_device("kernel", 6, 2, TINY, torch.device("meta"))
    assert all(p.device.type == "meta" for p in model.parameters())


def test_cpu_device_gives_the_default_run():
    fam = witness_family(8, 4)
    a = run_witness(family=fam, kind="kernel", rank=2, seed=1, train=TINY, device="cpu")
    b = run_witness(family=fam, kind="kernel", rank=2, seed=1, train=TINY)
    drop = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert drop(a) == drop(b)


def test_missing_cuda_is_one_line_before_training():
    import torch

    from attncert.configuration.device import DeviceError

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    kw = dict(bits=6, length=3, kind="dense", rank=None, seed=0, train=TINY, test_fraction=0.25, max_pool=4096,
              pool_seed=0, eval_sequences=64)
    for run in (
        lambda: run_scaling(device="cuda", **kw),
        lambda: run_witness(family=witness_family(8, 4), kind="kernel", rank=2, seed=0, train=TINY, device="cuda"),
    ):
        with pytest.raises(DeviceError) as info:
            run()
        assert "\n" not in str(info.value) and "fix: set device: cpu" in str(info.value)


def test_foreach_adam_matches_torch_adam_bit_for_bit():
    """The training loop's optimizer is torch.optim.Adam(foreach=True) step for step, with the learning
    rate changed between steps as the cosine schedule does; every parameter is exactly equal."""
    import torch

    from attncert.minip.models import build_model
    from attncert.minip.training import ForeachAdam, _cosine_lr

    fam = witness_family(8, 3, 0)
    X = torch.as_tensor(fam.sequences, dtype=torch.float32)
    T = torch.as_tensor(fam.targets, dtype=torch.float32)
    trained = []
    for make in (lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True), lambda ps: ForeachAdam(ps, lr=0.01)):
        torch.manual_seed(3)
        model = build_model("kernel", fam.bits, 2, 16, 4)
        start = [p.detach().clone() for p in model.parameters()]
        opt = make(list(model.parameters()))
        for step in range(60):
            _cosine_lr(opt, 0.01, step, 60)
            loss = torch.mean((model(X) - T) ** 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
        trained.append([p.detach().clone() for p in model.parameters()])
    assert not any(torch.equal(p, q) for p, q in zip(start, trained[1]))  # every parameter trained
    assert all(torch.equal(p, q) for p, q in zip(*trained))


@pytest.mark.parametrize("batch", [5, 16])
def test_training_stream_draws_the_batches_one_draw_per_step_would(batch):
    """The scaling runs' batches, drawn several steps at a time, are those of one `sample_sequences` call per
    step on the same generator (and their targets), across chunk boundaries and a short last chunk; each
    step's X starts on torch's alignment (a view of the chunk where batch * length floats fill whole
    64-byte blocks, as with 16 sequences of 3 tokens; its own copy otherwise, as with 5)."""
    import torch

    from attncert.minip.pools import sample_sequences, split_pool
    from attncert.minip.task import minip_targets
    from attncert.minip.training import _TrainingStream

    pool = split_pool(10, 0.25, 4096, 0).train  # 768 tokens: not a power of two (rejection sampling)
    steps, length = 23, 3
    stream = _TrainingStream(pool, batch, length, steps, np.random.default_rng(7), torch.device("cpu"))
    stream.CHUNK = 4
    assert stream.views == (batch == 16)
    rng = np.random.default_rng(7)
    for step in range(steps):
        X, T = stream(step)
        ref = sample_sequences(pool, batch, length, rng)
        assert X.dtype == T.dtype == torch.float32 and X.is_contiguous() and X.data_ptr() % 64 == 0
        assert torch.equal(X, torch.as_tensor(ref, dtype=torch.float32))
        assert torch.equal(T, torch.as_tensor(minip_targets(ref), dtype=torch.float32))
    shares = X.untyped_storage().data_ptr() == stream.X.untyped_storage().data_ptr()
    assert shares == stream.views


def test_backward_helper_gives_the_gradients_of_loss_backward():
    import torch

    from attncert.minip.models import build_model
    from attncert.minip.training import _backward

    fam = witness_family(8, 3, 0)
    X = torch.as_tensor(fam.sequences, dtype=torch.float32)
    T = torch.as_tensor(fam.targets, dtype=torch.float32)
    torch.manual_seed(0)
    model = build_model("kernel", fam.bits, 2, 16, 4)
    grads = []
    for backward in (lambda loss: loss.backward(), _backward):
        model.zero_grad(set_to_none=True)
        backward(torch.mean((model(X) - T) ** 2))
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@pytest.mark.parametrize("B,N,p", [(1, 1, 5), (7, 2, 22), (128, 2, 36), (128, 3, 22), (128, 3, 32), (190, 3, 40),
                                   (256, 3, 36), (2048, 3, 28), (33, 3, 44), (128, 3, 45), (16, 4, 8)])
def test_attention_product_is_bmm_bit_for_bit(B, N, p):
    """The heads' w @ v (a sum of products where torch's bmm sums term by term; bmm itself elsewhere, e.g.
    N * N * p >= 400 or N > 3) gives the bits of `w @ v`, and the gradients of bmm's backward."""
    import torch

    from attncert.minip.models import attention_product

    gen = torch.Generator().manual_seed(B * 1000 + N * 100 + p)
    for scale in (1.0, 30.0):
        logits = scale * torch.randn(B, N, N, generator=gen)
        v0 = torch.randn(B, N, p, generator=gen) * 3
        v0[..., : p // 2] = (v0[..., : p // 2] > 0).float()  # raw 0/1 bits beside learned values
        g = torch.randn(B, N, p, generator=gen)
        out = []
        for product in (lambda w, v: w @ v, attention_product):
            lg = logits.clone().requires_grad_(True)
            v = v0.clone().requires_grad_(True)
            o = product(torch.softmax(lg, dim=-1), v)
            o.backward(g)
            out.append((o.detach(), lg.grad, v.grad))
        for a, b in zip(*out):
            assert torch.equal(a, b)


def test_training_does_not_import_torch_dynamo():
    """A short job's start-up: the training loop must not pull in torch._dynamo (about 1.4 CPU-s)."""
    import subprocess
    import sys

    code = ("import sys\nfrom attncert.minip.training import TrainConfig, run_witness\n"
            "from attncert.minip.witness import witness_family\n"
            "run_witness(family=witness_family(8, 3, 0), kind='kernel', rank=1, seed=0,"
            " train=TrainConfig(steps=3, batch=0, lr=0.01, hidden=8, value_dim=2))\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_witness_figure_marks_the_papers_numbers(tmp_path, monkeypatch):
    """The witness figure draws the paper's claims (from data/paper_claims.yaml) at their points: largest |y - t|
    above 0.80 below the rank bound 8, and solved (< 1/2) at rank 32."""
    from attncert.minip.figures import paper_marks
    from attncert.paper_comparison.paper_comparison import claim_dicts

    marks = paper_marks(claim_dicts(REPO / "data" / "paper_claims.yaml", "paper_b"))
    assert marks == {"bound": 8.0, "fail_above": 0.8, "solve_rank": 32.0, "solve_below": 0.5}
    drawn = {}
    monkeypatch.setattr(plots, "_save", lambda fig, pdf, png: drawn.setdefault("fig", fig))
    bound = {"bound": 8, "bits": 24, "n_queries": 10, "family_size": 190}
    plots.witness_figure(_synthetic_records(), bound, tmp_path / "w.pdf", tmp_path / "w.png", marks)
    ax = drawn["fig"].axes[1]
    star = [ln for ln in ax.get_lines() if ln.get_label().startswith("paper: solved")][0]
    assert list(star.get_xdata()) == [32.0] and list(star.get_ydata()) == [0.5]
    fail = [c for c in ax.collections if c.get_label().startswith("paper: > 0.8")][0]
    (x0, y0), (x1, y1) = fail.get_segments()[0]
    assert y0 == y1 == 0.8 and x1 < 8.0
    assert drawn["fig"].legends and not ax.get_legend()  # one legend below the panels, none over the data
