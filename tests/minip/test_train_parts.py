"""The Min-IP training jobs (attncert.minip.sweep.train_parts): groups of a setting's models, from the config alone."""
import yaml

from attncert.minip.sweep import (JOB_SECONDS, RUN_SECONDS_PER_STEP, runs, setting_models, train_config, train_jobs,
                                  train_parts)
from conftest import REPO


def _grid(name: str) -> dict:
    return yaml.safe_load((REPO / "workflow" / "config" / f"{name}.yaml").read_text())["minip"]


def test_every_run_is_in_exactly_one_job_in_the_config_order():
    for name in ("default", "paper"):
        cfg = _grid(name)
        jobs = train_jobs(cfg)
        trained = [(setting, m) for (setting, _part), models in jobs.items() for m in models]
        assert len(trained) == len(set(trained))
        assert set(trained) == {(r.setting, r.model) for r in runs(cfg)}
        for setting in {s for s, _ in jobs}:
            parts = [models for (s, _p), models in jobs.items() if s == setting]
            assert [m for models in parts for m in models] == setting_models(cfg, setting)


def test_each_job_exceeds_its_budget_by_less_than_one_model():
    for name in ("default", "paper"):
        cfg = _grid(name)
        for (setting, _part), models in train_jobs(cfg).items():
            model_seconds = len(cfg["seeds"]) * RUN_SECONDS_PER_STEP * train_config(cfg, setting).steps
            assert (len(models) - 1) * model_seconds < JOB_SECONDS, (setting, models)


def test_the_default_grid_splits_the_witness_setting_in_two():
    cfg = _grid("default")
    jobs = train_jobs(cfg)
    assert sorted(p for s, p in jobs if s == "witness") == ["part0", "part1"]
    assert jobs[("witness", "part0")] == ("r1", "r2", "r4", "r7", "r8", "r10")
    assert jobs[("witness", "part1")] == ("r12", "r16", "r32", "r64", "dense")
    assert all(p == "part0" for s, p in jobs if s != "witness")
    assert len(jobs) == 8
    assert [p.name for p in train_parts(cfg)] == ["witness_part0", "witness_part1", "n3_part0", "n2_part0"]


def test_the_groups_follow_the_cost_of_the_runs():
    cfg = _grid("default")
    more_steps = {**cfg, "witness": {**cfg["witness"], "steps": 3 * cfg["witness"]["steps"]}}
    assert len([p for s, p in train_jobs(more_steps) if s == "witness"]) == 6
    one_seed = {**cfg, "seeds": [0]}
    assert len(train_jobs(one_seed)) == 7
    assert train_jobs(cfg) == train_jobs(_grid("default"))
