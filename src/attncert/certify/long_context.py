"""Long-context experiment (beyond the paper): the certificates of one head attending to up to 512 keys.

The paper certifies query positions 1, 4, 8 and 15, so its heads attend to at most 16 keys, and names a
relaxation linear in the number of keys as the scaling challenge. Here one committed public-domain passage
(`data/long_context_passage.txt`) is read at context lengths T (`long_context.lengths`); every unit is a
head of one layer, the query at `query_position`, all T keys attended (bidirectional model; causal: the
first query_position + 1 keys only, so use a late query there), a fixed query, and the radii of the config.
Each unit is certified like the main grid (`run.certify_unit`: exact bracket, first order, both second-order
variants, the soundness check), and the summary gives per length the median relative gap and seconds.
"""
from __future__ import annotations

import sys

import pandas as pd

from attncert.certify.run import COLUMNS, certify_unit
from attncert.head.problem import HeadProblem
from attncert.head.specification import specification_direction
from attncert.pipeline.unit_tables import add_gaps

CERTS = ("first_order", "second_order", "second_order_tight")


def long_context_problems(arrays: dict, layer: int, lengths, heads, query_position, radii, norms,
                          spec_seed: int) -> list[HeadProblem]:
    """Every unit: (length, head, radius, norm), fixed query; query_position "last" is T - 1 (a causal head then
    attends to all T keys)."""
    out = []
    causal = bool(arrays["causal"])
    for T in lengths:
        Z = arrays[f"Z_{T}"][0]
        qp = T - 1 if query_position == "last" else int(query_position)
        if qp >= T:
            raise ValueError(f"long_context.query_position {qp} >= length {T}; fix: lower it or use 'last'")
        Z0 = Z[:qp + 1] if causal else Z
        for h in heads:
            c = specification_direction(arrays["W_O"][h], spec_seed + 1000 * layer + h)  # one direction per head
            for norm in norms:
                for r in radii:
                    meta = dict(layer=layer, head=h, prompt=0, query_pos=qp, length=T)
                    out.append(HeadProblem(arrays["W_Q"][h], arrays["W_K"][h], arrays["W_V"][h], arrays["b_Q"][h],
                                           arrays["b_K"][h], arrays["b_V"][h], Z0, qp, c, float(r),
                                           norm, "fixed", meta=meta))
    return out


def certify_long_context(problems: list[HeadProblem], *, ascent_restarts: int, ascent_steps: int, seed: int,
                         tight: bool) -> pd.DataFrame:
    from tqdm import tqdm

    rows = [certify_unit(p, ascent_restarts=ascent_restarts, ascent_steps=ascent_steps, seed=seed, tight=tight,
                         ascent_check_fraction=0.0)
            for p in tqdm(problems, desc="long context", file=sys.stderr, mininterval=5)]
    df = pd.DataFrame(rows, columns=["length"] + COLUMNS)
    return df


def summary(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Per (length, radius): median relative gap and seconds of each certificate; and the measured values of
    the claims (largest length certified without a fallback or a violation, the gap there)."""
    g = add_gaps(df)
    rows = []
    for (T, r), sub in g.groupby(["length", "radius"]):
        row = dict(length=int(T), n_keys=int(sub["n_tokens"].iloc[0]), radius=float(r), units=len(sub),
                   exact_s=float(sub["t_exact_s"].median()))
        for cert in CERTS:
            if f"rel_gap_{cert}" in sub:
                row[f"rel_gap_{cert}"] = float(sub[f"rel_gap_{cert}"].median())
        row["first_order_s"] = float(sub["t_first_s"].median())
        row["second_order_s"] = float(sub["t_second_s"].median())
        row["second_order_tight_s"] = float(sub["t_second_tight_s"].median())
        row["fallbacks"] = int((sub["status"] == "fallback").sum())
        row["violations"] = int((sub["status"] == "UNSOUND").sum())
        rows.append(row)
    table = pd.DataFrame(rows)
    ok = table[(table["fallbacks"] == 0) & (table["violations"] == 0)]
    n_max = int(ok["n_keys"].max()) if len(ok) else 0
    measured = {"long_context_largest_n": n_max, "long_context_violations": int(table["violations"].sum())}
    for r in sorted(table["radius"].unique()):
        at = table[(table["n_keys"] == n_max) & (table["radius"] == r)]
        if len(at):
            measured[f"long_context_rel_gap_r{r:g}"] = float(at["rel_gap_second_order"].iloc[0])
            measured[f"long_context_tight_rel_gap_r{r:g}"] = float(at["rel_gap_second_order_tight"].iloc[0])
            measured[f"long_context_seconds_r{r:g}"] = float(at["second_order_s"].iloc[0])
    return table, measured


def figure(table: pd.DataFrame, label: str, out_pdf, paper: dict | None = None) -> None:
    """Relative gap and seconds per unit vs the number of keys, log-log, one line per certificate and radius.

    paper: {radius: the paper's median relative gap of the second-order certificate at 5 keys (GPT-2, query
    position 4)}, drawn as labelled stars."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attncert.pipeline.report_files import save_figure

    colors = {"first_order": "#d95f02", "second_order": "#1b9e77", "second_order_tight": "#7570b3"}
    names = {"first_order": "first order", "second_order": "second order",
             "second_order_tight": "second order, tight (beyond the paper)"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for r, style in zip(sorted(table["radius"].unique()), ("o-", "s--", "^:")):
        sub = table[table["radius"] == r].sort_values("n_keys")
        for cert in ("first_order", "second_order", "second_order_tight"):
            axes[0].loglog(sub["n_keys"], sub[f"rel_gap_{cert}"], style, color=colors[cert], ms=4,
                           label=f"{names[cert]}, r = {r:g}")
            axes[1].loglog(sub["n_keys"], sub[f"{cert}_s"], style, color=colors[cert], ms=4,
                           label=f"{names[cert]}, r = {r:g}")
        axes[1].loglog(sub["n_keys"], sub["exact_s"], style, color="0.4", ms=4, label=f"exact worst case, r = {r:g}")
    for r, val in sorted((paper or {}).items()):
        axes[0].loglog([5], [val], "*", color="black", ms=11, label=f"paper (GPT-2, 5 keys), r = {r:g}")
        axes[0].annotate(f"paper {val:g}", (5, val), xytext=(7, -3), textcoords="offset points", fontsize=8)
    axes[0].axvspan(1, 16, color="0.85", alpha=0.5, lw=0)
    axes[0].text(7.3, 0.97, "the paper's range\n(n <= 16)", transform=axes[0].get_xaxis_transform(), fontsize=8,
                 color="0.3", va="top", ha="center")
    ours = sorted(set(table["n_keys"].astype(int)))
    for ax, ticks in zip(axes, (sorted(set(ours) | ({5} if paper else set())), ours)):
        ax.set_xlim(ticks[0] / 1.5, ticks[-1] * 1.5)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].set_ylabel("median gap / output movement range")
    axes[1].set_ylabel("median seconds per unit")
    for ax in axes:
        ax.set_xlabel("attended keys n")
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[1].get_legend_handles_labels()
    h0, l0 = axes[0].get_legend_handles_labels()
    extra = [(h, lab) for h, lab in zip(h0, l0) if lab.startswith("paper")]
    handles += [h for h, _ in extra]
    labels += [lab for _, lab in extra]
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7.5, frameon=False)
    fig.suptitle(f"Long context, fixed query ({label}; not GPT-2)", fontsize=10)
    fig.tight_layout(rect=(0, 0.16, 1, 0.95))
    save_figure(fig, out_pdf)
    plt.close(fig)


def markdown(table: pd.DataFrame, label: str) -> str:
    cols = ["n_keys", "radius", "units", "rel_gap_first_order", "rel_gap_second_order", "rel_gap_second_order_tight",
            "exact_s", "first_order_s", "second_order_s", "second_order_tight_s", "fallbacks", "violations"]
    head = (f"# Long context, fixed query (beyond the paper)\n\n{label}. Medians per number of attended keys; "
            "relative gap = (certificate - exact bracket's upper end) / output movement range. The paper certifies "
            "at most 16 keys. **Not audited**: the long-context rows keep no stored certificate, so `attncert audit` "
            "lists them as not covered (audit.md beside this table).\n\n")
    return head + table[cols].to_markdown(index=False, floatfmt=".4g") + "\n"
