"""A tiny run's row tables (certification, baselines, block, long context) with their sidecars, and its summary
tables written by the pipeline's own entry scripts (workflow/scripts/*_table.py, *_report.py, paper_vs_reproduced.py)
run in-process with a stand-in for Snakemake's `snakemake` object."""
from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pandas as pd

from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar

REPO = Path(__file__).resolve().parents[2]
MODEL = "m"
MODEL_CFG = {"name": MODEL, "family": "bert", "source": "embedded"}
LAYERS = (0, 1)
RADII = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02)
BLOCK = {"radii": [1e-4, 1e-3, 3e-3], "reference_radius": 0.001, "second_order_tolerance": 0.5}


class Files(dict):
    """Snakemake's named file lists: attributes by name, iteration over the files."""
    __getattr__ = dict.__getitem__

    def __iter__(self):
        return iter(self.values())


class Params(dict):
    __getattr__ = dict.__getitem__


def _write_rows(path: Path, df: pd.DataFrame, stage: str) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, float_format="%.17g")
    write_sidecar(path, provenance({"code": "t", "model": MODEL_CFG, "block": BLOCK}, stage=stage))


def _unit_row(rng, layer, head, r, mode, **extra) -> dict:
    nominal, m = 0.1 + 0.01 * head, 10 * r * (1 + rng.random())
    ref = nominal + m
    gap2 = m * 2 * r * (1 + rng.random())
    return {"layer": layer, "head": head, "prompt": 0, "query_pos": 4, "radius": r, "norm": "linf", "mode": mode,
            "n_tokens": 8, "nominal": nominal, "exact_lo": ref - 1e-13 if mode == "fixed" else np.nan,
            "exact_hi": ref if mode == "fixed" else np.nan, "value_spread": 2.0, "best_feasible": ref - 1e-13,
            "first_order": ref + m * (0.5 + rng.random()), "second_order": ref + gap2,
            "second_order_tight": ref + 0.5 * gap2, "secant_bound": 3 * gap2, "t_exact_s": rng.random(),
            "t_first_s": rng.random(), "t_ascent_s": rng.random(), "t_second_s": rng.random(),
            "t_second_tight_s": rng.random(), "status": "ok", **extra}


def certify_rows(layer: int) -> pd.DataFrame:
    rng = np.random.default_rng(layer)
    return pd.DataFrame([_unit_row(rng, layer, h, r, mode) for h in (0, 1) for mode in ("fixed", "varying")
                         for r in RADII])


def baseline_rows(cert: pd.DataFrame) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    rows = []
    for _, u in cert[cert["radius"] >= 0.001].iterrows():
        for method, factor in (("ibp", 30.0), ("crown", 4.0), ("alpha_crown_last_layer_lirpa_softmax", 3.0)):
            ref = u["exact_hi"] if u["mode"] == "fixed" else u["best_feasible"]
            rows.append({**{k: u[k] for k in ("layer", "head", "prompt", "query_pos", "radius", "norm", "mode")},
                         "method": method, "upper": ref + factor * (u["second_order"] - ref), "attained": ref,
                         "seconds": 0.01 * factor * (1 + rng.random()), "status": "ok", "label": method.upper(),
                         "seconds_certificate_beside": 0.2 if u["head"] == 0 and u["mode"] == "fixed" else np.nan})
    return pd.DataFrame(rows)


def block_rows() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for t in (0, 1):
        for h in range(4):
            for r in BLOCK["radii"]:
                asc = 2.0 * r * r * (1 + rng.random())
                so, crown = asc * (3.0 + rng.random()), asc * (60.0 + 10 * rng.random())
                rep = min(so, crown)
                rows.append({
                    "model": MODEL, "family": "bert", "transition": t, "head": h, "prompt": 0, "position": 4,
                    "d": 8, "radius": r, "g0": 0.5, "gradient_norm_l1": 2.0, "ascent_max": asc,
                    "second_order_max": asc * (1 + 0.01 * rng.random()), "second_order_upper": 1.6 * asc,
                    "crown_upper": crown, "crown_lower": -crown, "alpha_crown_upper": 0.9 * crown,
                    "certificate_f": rep, "certificate_source": "second_order" if so <= crown else "crown",
                    "certificate_g": 0.5 + 2.0 * r + rep, "second_order_certificate_f": so,
                    "second_order_certificate_g": 0.5 + 2.0 * r + so, "per_op_sum": 40 * asc * (1 + rng.random()),
                    "per_op_sum_softmax_one_op": 38 * asc, "crown_leading_order": 30 * asc,
                    "effective_rank": 3 + rng.random(), "entropy_rank": 4 + rng.random(),
                    "stable_rank": 1 + rng.random(), "status": "ok", "cpu_seconds_certificate": 4.5,
                    "cpu_seconds_crown": 3.0,
                })
    return pd.DataFrame(rows)


def long_context_rows() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = [_unit_row(rng, 2, h, r, mode, length=n) | {"n_tokens": n}
            for n in (16, 64) for h in (0, 3) for mode in ("fixed", "varying") for r in (0.002, 0.02)]
    return pd.DataFrame(rows)


def run_script(name: str, inputs: dict, outputs: dict, params: dict, log: Path) -> None:
    """workflow/scripts/`name` as Snakemake runs it (its job log and excepthook left out)."""
    import attncert.provenance.job_log as job_log

    start = job_log.start_job_log
    job_log.start_job_log = lambda path: None
    try:
        sm = type("Snakemake", (), {"input": Files(inputs), "output": Files(outputs), "wildcards": Params(model=MODEL),
                                    "params": Params({"model": MODEL_CFG, "code": "t", **params}), "log": [str(log)]})
        runpy.run_path(str(REPO / "workflow" / "scripts" / name), init_globals={"snakemake": sm})
    finally:
        job_log.start_job_log = start
        expect_model_of({})


def write_run(root: Path) -> tuple[Path, Path]:
    """(data/, figures/tables/) of a tiny run: row tables, then every summary table the pipeline writes from them."""
    data, tables = root / "data", root / "figures" / "tables"
    out = tables / MODEL
    out.mkdir(parents=True)
    for sub in ("certify", "baselines", "block", "long_context"):
        (data / sub / MODEL).mkdir(parents=True)
    (data / "paper_claims.yaml").write_text((REPO / "data" / "paper_claims.yaml").read_text())
    cert = []
    for layer in LAYERS:
        cert.append(data / "certify" / MODEL / f"layer{layer}.csv")
        rows = certify_rows(layer)
        _write_rows(cert[-1], rows, "certify")
        _write_rows(data / "baselines" / MODEL / f"layer{layer}.csv", baseline_rows(rows), "baselines")
    _write_rows(data / "block" / MODEL / "transition0.csv", block_rows(), "block_transition")
    _write_rows(data / "block" / MODEL / "units.csv", block_rows(), "block_merge")
    _write_rows(data / "long_context" / MODEL / "units.csv", long_context_rows(), "long_context_certify")
    log = root / "log.txt"
    names = ("table", "slopes", "paper", "violations", "md", "measured")
    files = ("certification.csv", "certification_slopes.csv", "certification_vs_paper.csv", "soundness_violations.csv",
             "certification.md", "certify_measured.json")
    run_script("certify_table.py", {"tables": cert}, {k: str(out / f) for k, f in zip(names, files)}, {}, log)
    names = ("summary", "summary_md", "paper", "paper_md", "certificate", "certificate_md", "measured")
    files = [f"block_{n}.{e}" for n in ("summary", "vs_paper", "certificate") for e in ("csv", "md")]
    run_script("block_table.py", {"units": str(data / "block" / MODEL / "units.csv"),
                                  "claims": str(data / "paper_claims.yaml")},
               {k: str(out / f) for k, f in zip(names, files + ["block_measured.json"])}, {"block": BLOCK}, log)
    run_script("long_context_report.py", {"csv": str(data / "long_context" / MODEL / "units.csv"),
                                          "claims": str(data / "paper_claims.yaml")},
               {"pdf": str(root / "lc.pdf"), "png": str(root / "lc.png"), "md": str(out / "long_context.md"),
                "measured": str(out / "long_context_measured.json")}, {}, log)
    run_script("baselines_table.py", {"baselines": [str(data / "baselines" / MODEL / f"layer{L}.csv") for L in LAYERS],
                                      "cert": [str(p) for p in cert]},
               {"md": str(out / "baselines.md"), "csv": str(out / "baselines.csv"),
                "slopes": str(out / "baselines_slopes.csv"), "headline": str(out / "baselines_headline.csv"),
                "measured": str(out / "baselines_measured.json")}, {}, log)
    measured = [str(out / f"{s}_measured.json") for s in ("certify", "baselines", "block", "long_context")]
    run_script("paper_vs_reproduced.py", {"claims": str(data / "paper_claims.yaml"), "measured": measured},
               {"md": str(out / "paper_vs_reproduced.md"), "csv": str(out / "paper_vs_reproduced.csv"),
                "snapshot": str(out / "paper_vs_reproduced.json")}, {}, log)
    return data, tables
