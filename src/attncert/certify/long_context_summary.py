"""The long-context experiment's summary (beyond the paper): per query mode, length and radius the median relative
gap and seconds of each certificate, the claims' measured values, the grid label and the Markdown table.

Pure (pandas and the unit tables' gaps), so the audit recomputes `figures/tables/{model}/long_context.md` and
`long_context_measured.json` from `data/long_context/{model}/units.csv` with these functions
(`attncert.audit.table_recompute`); the certification itself is `attncert.certify.long_context`. A median
relative gap is marked when at least half of its units' gaps are below the solver noise floor
(`reporting.noise_floor`); the columns' wording: `certify.table_legend.LONG_CONTEXT`.
"""
from __future__ import annotations

import pandas as pd

from attncert.certify import table_legend
from attncert.reporting.table_files import positions_words
from attncert.reporting.table_legend import legend_table
from attncert.reporting.noise_floor import SOLVER_NOISE, at_floor_count, gaps_with_floor

CERTS = ("first_order", "second_order", "second_order_tight")
MODES = ("fixed", "varying")


def grid_label(df: pd.DataFrame, model: str) -> str:
    """The table's and the measured values' label: model, layer, heads, modes, query positions, passage, units."""
    layer = int(df["layer"].iloc[0])
    return (f"{model}: layer {layer}, {df['head'].nunique()} heads, "
            f"{' and '.join(sorted(df['mode'].unique()))} query, {positions_words(df['query_pos'].unique())}, "
            f"passage data/long_context_passage.txt; {len(df)} units")


def summary(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Per (mode, length, radius): median relative gap and seconds of each certificate; and the measured values of
    the claims per mode (largest length certified without a fallback or a violation, the gap there; fixed query:
    `long_context_*`, varying query: `long_context_varying_*`)."""
    g = gaps_with_floor(df)
    rows = []
    for (mode, T, r), sub in g.groupby(["mode", "length", "radius"]):
        row = dict(mode=str(mode), length=int(T), n_keys=int(sub["n_tokens"].iloc[0]), radius=float(r),
                   units=len(sub), exact_s=float(sub["t_exact_s"].median()),
                   ascent_s=float(sub["t_ascent_s"].median()))
        for cert in CERTS:
            if f"rel_gap_{cert}" in sub:
                row[f"rel_gap_{cert}"] = float(sub[f"rel_gap_{cert}"].median())
                row[f"below_floor_{cert}"] = int(sub[f"below_floor_{cert}"].sum())
        row["first_order_s"] = float(sub["t_first_s"].median())
        row["second_order_s"] = float(sub["t_second_s"].median())
        row["second_order_tight_s"] = float(sub["t_second_tight_s"].median())
        row["fallbacks"] = int((sub["status"] == "fallback").sum())
        row["violations"] = int((sub["status"] == "UNSOUND").sum())
        rows.append(row)
    table = pd.DataFrame(rows)
    measured = {}
    for mode in sorted(table["mode"].unique()):
        at_mode = table[table["mode"] == mode]
        prefix = "long_context" if mode == "fixed" else f"long_context_{mode}"
        ok = at_mode[(at_mode["fallbacks"] == 0) & (at_mode["violations"] == 0)]
        n_max = int(ok["n_keys"].max()) if len(ok) else 0
        measured[f"{prefix}_largest_n"] = n_max
        measured[f"{prefix}_violations"] = int(at_mode["violations"].sum())
        for r in sorted(at_mode["radius"].unique()):
            at = at_mode[(at_mode["n_keys"] == n_max) & (at_mode["radius"] == r)]
            if len(at):
                measured[f"{prefix}_rel_gap_r{r:g}"] = float(at["rel_gap_second_order"].iloc[0])
                measured[f"{prefix}_tight_rel_gap_r{r:g}"] = float(at["rel_gap_second_order_tight"].iloc[0])
                measured[f"{prefix}_seconds_r{r:g}"] = float(at["second_order_s"].iloc[0])
    return table, measured


def markdown(table: pd.DataFrame, label: str) -> str:
    """One table per query mode, headers in words, each with its legend; medians at the noise floor marked."""
    cols = ["n_keys", "radius", "units", "rel_gap_first_order", "rel_gap_second_order", "rel_gap_second_order_tight",
            "first_order_s", "second_order_s", "second_order_tight_s", "below_floor", "fallbacks", "violations"]
    out = [f"# Long context (beyond the paper)\n\n{label}. Medians per number of attended keys; relative gap = "
           "(certificate - reference value) / output movement range, the reference value being the exact worst "
           "case (fixed query) or the best ascent value (varying query: no exact value exists). The paper certifies "
           "at most 16 keys. Every certified number is stored with its certificate "
           "(`data/long_context/{model}/units_certificates.npz`) and audited by `attncert audit` (audit.md beside "
           "this table).\n"]
    for mode in MODES:
        sub = table[table["mode"] == mode].reset_index(drop=True)
        if not len(sub):
            continue
        ref = ["exact_s"] if mode == "fixed" else ["ascent_s"]
        title = "Fixed query" if mode == "fixed" else "Varying query (the query token moves too)"
        counts = [f"below_floor_{c}" for c in CERTS]
        shown = sub.assign(below_floor=[" / ".join(str(int(v)) for v in r) for r in sub[counts].to_numpy()])
        marks = {f"rel_gap_{c}": [at_floor_count(b, u) for b, u in zip(sub[f"below_floor_{c}"], sub["units"])]
                 for c in CERTS}
        out.append(f"\n## {title}\n\n" + legend_table(shown[cols[:6] + ref + cols[6:]], table_legend.LONG_CONTEXT,
                                                         marks=marks, floor=SOLVER_NOISE))
    return "".join(out)
