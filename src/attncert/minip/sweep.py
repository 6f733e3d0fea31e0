"""The grid of training runs named by the config, the aggregation of their records, transition ranks.

Settings. "witness" (the witness family of `witness`) and "m{bits}-n{length}" (random tokens of
`bits` bits, sequences of `length` tokens, disjoint train/test pools). Models: "r{rank}" (kernel
attention of that rank) and "dense" (dense softmax attention). One run per (setting, model, seed),
stored as data/minip/{name}/runs/{setting}/{model}_s{seed}.json, `name` being the grid's `minip.name`
(one folder per grid, so that two grids' runs never share a path).

Transition rank of a setting: the smallest rank r of the grid whose error meets the criterion --
witness: some seed has largest deviation max |y - t| < 1/2 over the whole suite (the theorem's
"solves"; the same event as error exactly 0), and, separately, every seed does; scaling: the median
over seeds of the error is below the threshold (5% by default). None when no rank of the grid does.

How much the threshold decides (`criterion_transitions`): the same transition rank under several
criteria, median over seeds of a per-run statistic c(run) below a level,

    "error < p"         c = share of positions with |y - t| >= 1/2,   level p (e.g. 1%, 5%, 10%)
    "max|y-t| < 1/2"    c = largest deviation over the test sequences, level 1/2

(the last is the paper's criterion; it holds exactly when the share wrong is 0).
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from .task import HALF
from .train_config import TrainConfig

DATA_ROOT = "data/minip"  # one folder per grid below it, named by `minip.name`
SETTING_RE = re.compile(r"^(witness|m(\d+)-n(\d+))$")
MODEL_RE = re.compile(r"^(r(\d+)|dense)$")


@dataclass(frozen=True)
class Run:
    setting: str
    model: str
    seed: int

    @property
    def path(self) -> str:
        """The run's record, relative to its grid's folder (`data_dir`)."""
        return f"runs/{self.setting}/{self.model}_s{self.seed}.json"


def data_dir(name: str) -> str:
    """The folder of the grid named `name` (its `minip.name`): data/minip/{name}."""
    return f"{DATA_ROOT}/{name}"


def scaling_setting(bits: int, length: int) -> str:
    return f"m{bits}-n{length}"


def parse_setting(setting: str) -> tuple[str, int | None, int | None]:
    """'witness' -> ('witness', None, None); 'm12-n3' -> ('scaling', 12, 3)."""
    m = SETTING_RE.match(setting)
    if not m:
        raise ValueError(f"unknown Min-IP setting {setting!r}")
    if m.group(1) == "witness":
        return "witness", None, None
    return "scaling", int(m.group(2)), int(m.group(3))


def parse_model(model: str) -> tuple[str, int | None]:
    """'r8' -> ('kernel', 8); 'dense' -> ('dense', None)."""
    m = MODEL_RE.match(model)
    if not m:
        raise ValueError(f"unknown Min-IP model {model!r}")
    return ("dense", None) if model == "dense" else ("kernel", int(m.group(2)))


def runs(cfg: dict) -> list[Run]:
    """Every run of the sweep described by the `minip` config section."""
    seeds = cfg["seeds"]
    out = [Run("witness", m, s) for m in [f"r{r}" for r in cfg["witness"]["ranks"]] + ["dense"] for s in seeds]
    for spec in cfg["scaling"]["lengths"]:
        for bits in cfg["scaling"]["sizes"]:
            setting = scaling_setting(bits, spec["length"])
            out += [Run(setting, m, s) for m in [f"r{r}" for r in spec["ranks"]] + ["dense"] for s in seeds]
    return out


# Training jobs. One job trains several runs of one setting in turn (starting a job -- Python, torch,
# the script's imports -- costs about as much as a short run): the models of a setting, in the config's
# order, cut into ceil(cost / JOB_SECONDS) contiguous groups of equal size (the first groups one model more
# where it does not divide), cost being the estimated seconds of all the setting's runs. So a group's
# estimate exceeds JOB_SECONDS by less than one model's runs, and no job comes near 90 s on the default grid
# (witness: 11 models x 3 seeds x 3 s = 99 s -> 2 groups; scaling, length 3: 8 x 3 x 2 s = 48 s -> 1).
# Estimated cost of a run: RUN_SECONDS_PER_STEP x its training steps (one CPU thread; measured on the
# default grid: witness runs ~3 s at 1500 steps, scaling runs ~2 s at 1000 steps; the paper grid's
# 715 runs come to ~3900 s by this estimate against ~3850 s measured).
RUN_SECONDS_PER_STEP = 0.002
JOB_SECONDS = 50.0


def setting_models(cfg: dict, setting: str) -> list[str]:
    """The models of `setting` in the config's order: 'r{rank}' for each rank of the grid, then 'dense'."""
    kind, _bits, length = parse_setting(setting)
    if kind == "witness":
        ranks = cfg["witness"]["ranks"]
    else:
        ranks = next(s for s in cfg["scaling"]["lengths"] if s["length"] == length)["ranks"]
    return [f"r{r}" for r in ranks] + ["dense"]


@dataclass(frozen=True)
class TrainPart:
    """One group of models, trained by one job per setting of `settings` (every seed of each model).

    `family` is "witness" or "n{length}" (the scaling settings of one sequence length): the settings of a
    family share their models and training steps, hence their groups. `part` ("part0", "part1", ...) names
    the group within a setting (its log and benchmark file)."""
    family: str
    part: str
    settings: tuple[str, ...]
    models: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.family}_{self.part}"


def train_parts(cfg: dict) -> list[TrainPart]:
    """The groups of the training jobs (comment above `RUN_SECONDS_PER_STEP`), family by family."""
    families: dict[str, list[str]] = {}
    for run in runs(cfg):
        _kind, _bits, length = parse_setting(run.setting)
        family = families.setdefault("witness" if length is None else f"n{length}", [])
        if run.setting not in family:
            family.append(run.setting)
    out = []
    for family, settings in families.items():
        models = setting_models(cfg, settings[0])
        cost = len(models) * len(cfg["seeds"]) * RUN_SECONDS_PER_STEP * train_config(cfg, settings[0]).steps
        n = min(len(models), max(1, math.ceil(cost / JOB_SECONDS)))
        size, extra = divmod(len(models), n)  # the first `extra` groups take one model more
        start = 0
        for i in range(n):
            stop = start + size + (i < extra)
            out.append(TrainPart(family, f"part{i}", tuple(settings), tuple(models[start:stop])))
            start = stop
    return out


def train_jobs(cfg: dict) -> dict[tuple[str, str], tuple[str, ...]]:
    """{(setting, part): its models}: every training job of the grid. A run's record does not depend on
    the job that trains it (each run seeds torch and numpy itself)."""
    return {(setting, p.part): p.models for p in train_parts(cfg) for setting in p.settings}


def table_inputs(table: str, name: str) -> dict[str, str]:
    """Input files of the table `table` (witness, transition, paper, constructions) of the grid named `name`."""
    data = data_dir(name)
    if table == "constructions":
        return {"constructions": f"{data}/constructions.csv"}
    inputs = {"sweep": f"{data}/sweep.csv", "bound": f"{data}/witness_bound.json"}
    if table == "paper":
        inputs["claims"] = "data/paper_claims.yaml"
    return inputs


def run_params(cfg: dict, setting: str, device: str = "cpu") -> dict:
    """The part of the config one run of `setting` depends on (Snakemake params of the job, so that
    editing the grid does not invalidate runs that did not change): the `minip` section's settings and
    the torch `device` (top-level config key; `attncert.configuration.device`)."""
    kind, _bits, _length = parse_setting(setting)
    out = {"train": asdict(train_config(cfg, setting)), "device": str(device)}
    if kind == "witness":
        out["witness"] = {k: cfg["witness"][k] for k in ("bits", "queries", "ladder_step")}
    else:
        out["scaling"] = {k: cfg["scaling"][k] for k in ("test_fraction", "max_pool", "pool_seed", "eval_sequences")}
    return out


def train_config(cfg: dict, setting: str) -> TrainConfig:
    kind, _bits, length = parse_setting(setting)
    model = cfg["model"]
    if kind == "witness":
        steps, batch = cfg["witness"]["steps"], 0
    else:
        spec = next(s for s in cfg["scaling"]["lengths"] if s["length"] == length)
        steps, batch = spec["steps"], cfg["scaling"]["batch"]
    return TrainConfig(steps=steps, batch=batch, lr=model["lr"], hidden=model["hidden"],
                       value_dim=model["value_dim"], depth=model["depth"])


RECORD_COLUMNS = ["setting", "bits", "length", "kind", "rank", "seed", "error", "error_iid", "error_ood",
                  "error_query_position", "max_abs_error", "max_abs_error_query_position", "max_abs_error_iid",
                  "max_abs_error_ood", "fraction_queries_failed", "queries_failed", "final_loss", "seconds"]


def collect(records: list[dict]):
    """One row per run (a pandas DataFrame); missing metrics (e.g. error_ood of witness runs) are NaN."""
    import numpy as np
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    for c in RECORD_COLUMNS:
        if c not in df:
            df[c] = np.nan
    df = df[RECORD_COLUMNS].copy()
    df["rank"] = df["rank"].astype("Int64")
    return df.sort_values(["setting", "kind", "rank", "seed"], na_position="last").reset_index(drop=True)


def witness_transition(df) -> dict:
    """Smallest rank where some seed / every seed has max |y - t| < 1/2 on the whole witness suite."""
    k = df[(df.setting == "witness") & (df.kind == "kernel")]
    by_rank = k.groupby("rank")["max_abs_error"]
    some = [int(r) for r, e in by_rank if (e < HALF).any()]
    every = [int(r) for r, e in by_rank if (e < HALF).all()]
    return {"some_seed_zero": min(some) if some else None, "every_seed_zero": min(every) if every else None}


def scaling_transitions(df, threshold: float):
    """Per (bits, length): smallest rank whose median error over seeds is < threshold (iid and OOD)."""
    import pandas as pd

    rows = []
    k = df[(df.kind == "kernel") & (df.setting != "witness")]
    d = df[(df.kind == "dense") & (df.setting != "witness")]
    for (bits, length), g in k.groupby(["bits", "length"]):
        med = g.groupby("rank")[["error_iid", "error_ood"]].median().sort_index()
        row = {"bits": int(bits), "length": int(length), "max_rank": int(med.index.max())}
        for split in ("iid", "ood"):
            ok = med.index[med[f"error_{split}"] < threshold]
            row[f"transition_rank_{split}"] = int(ok.min()) if len(ok) else None
            row[f"min_median_error_{split}"] = float(med[f"error_{split}"].min())
        dd = d[(d.bits == bits) & (d.length == length)]
        row["dense_max_error_ood"] = float(dd["error_ood"].max()) if len(dd) else None
        row["dense_max_error_iid"] = float(dd["error_iid"].max()) if len(dd) else None
        row["dense_seeds"] = int(len(dd))
        rows.append(row)
    return pd.DataFrame(rows)


MAX_ERR_CRITERION = "max|y-t| < 1/2"


def criterion_label(threshold: float) -> str:
    return f"error < {threshold:g}"


def criterion_transitions(df, thresholds: list[float]):
    """Per (bits, length, split in iid/ood): the transition rank under each criterion (module docstring).

    Columns: bits, length, split, max_rank, then one column per criterion ("error < p" for each p in
    `thresholds`, and "max|y-t| < 1/2") holding the smallest rank of the grid meeting it, or None.
    """
    import pandas as pd

    rows = []
    k = df[(df.kind == "kernel") & (df.setting != "witness")]
    for (bits, length), g in k.groupby(["bits", "length"]):
        for split in ("iid", "ood"):
            med = g.groupby("rank")[[f"error_{split}", f"max_abs_error_{split}"]].median().sort_index()
            row = {"bits": int(bits), "length": int(length), "split": split, "max_rank": int(med.index.max())}
            tests = [(criterion_label(p), f"error_{split}", p) for p in thresholds]
            tests.append((MAX_ERR_CRITERION, f"max_abs_error_{split}", HALF))
            for label, col, level in tests:
                ok = med.index[med[col] < level]
                row[label] = int(ok.min()) if len(ok) else None
            rows.append(row)
    out = pd.DataFrame(rows)
    for label in [criterion_label(p) for p in thresholds] + [MAX_ERR_CRITERION]:
        out[label] = pd.Series([r[label] for r in rows], dtype=object)  # keep None, not NaN
    return out
