"""Figures of the Min-IP stage (matplotlib; each saved as PDF and PNG).

  witness_figure     error, largest deviation max |y - t| (all positions and query position) and
                     fraction of queries failed vs rank on the witness suite, every seed shown, the
                     proven bound as a vertical line, dense attention as reference
  scaling_figure     error vs rank per problem size m (columns) and length N (rows), OOD and iid,
                     seeds shown, dense attention as a horizontal reference
  transition_figure  the smallest rank reaching the error threshold vs problem size
  threshold_figure   the same transition rank under each criterion (error < 1%, 5%, 10%, and
                     max |y - t| < 1/2), OOD and iid: how much the threshold decides
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from attncert.provenance.provenance import atomic_path  # noqa: E402

SEED_MARKERS = "osD^v<>ph*"


def _save(fig, pdf_path, png_path) -> None:
    for path, kw in ((pdf_path, {}), (png_path, {"dpi": 150})):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=str(path).rsplit(".", 1)[-1], bbox_inches="tight", **kw)
    plt.close(fig)


def _jitter(seed: int, n: int) -> float:
    return 1.0 + 0.06 * (seed - (n - 1) / 2)


def _rank_ticks(ax, ranks, lo=None, hi=None) -> None:
    """Integer tick labels at the ranks of the grid (log2 axis), no minor labels."""
    ticks = sorted({int(r) for r in ranks})
    ax.set_xticks(ticks, [str(t) for t in ticks], fontsize=7)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlim((lo or ticks[0]) / 1.4, (hi or ticks[-1]) * 1.4)


def _seed_points(ax, k: pd.DataFrame, col: str, seeds, color="C0") -> None:
    for i, s in enumerate(seeds):
        g = k[k.seed == s]
        ax.scatter(g["rank"] * _jitter(i, len(seeds)), g[col], marker=SEED_MARKERS[i % 10], s=22,
                   facecolors="none", edgecolors=color, alpha=0.8, label=f"seed {s}")


def witness_figure(runs: pd.DataFrame, bound: dict, pdf_path, png_path, paper: dict | None = None) -> None:
    """paper: `figures.paper_marks` (the paper's numbers on the witness suite), drawn on the |y - t| panel."""
    w = runs[runs.setting == "witness"]
    k, d = w[w.kind == "kernel"], w[w.kind == "dense"]
    seeds = sorted(k.seed.unique())
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), sharex=True)
    panels = ((axes[0], "error", "error (fraction of positions wrong)"),
              (axes[1], "max_abs_error", "largest |y - t| over the suite"),
              (axes[2], "fraction_queries_failed", "fraction of queries failed"))
    for ax, col, label in panels:
        med = k.groupby("rank")[col].median()
        ax.plot(med.index, med.values, "-", color="C0", lw=1.5, label="kernel, median over seeds")
        _seed_points(ax, k, col, seeds)
        if len(d):
            ax.axhline(d[col].max(), color="C2", ls="--", lw=1.2, label=f"dense softmax (max over {len(d)} seeds)")
        ax.axvline(bound["bound"], color="C3", ls=":", lw=1.5, label=f"proven bound r >= {bound['bound']}")
        ax.axvspan(k["rank"].min() * 0.8, bound["bound"] * 0.97, color="C3", alpha=0.06)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("feature rank r")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        _rank_ticks(ax, k["rank"])
    ax = axes[1]
    med_q = k.groupby("rank")["max_abs_error_query_position"].median()
    ax.plot(med_q.index, med_q.values, "-.", color="C1", lw=1.3, label="kernel, query position only (median)")
    ax.axhline(0.5, color="black", ls="-", lw=0.8, label="1/2: solved iff below (theorem's criterion)")
    if paper:
        lo = k["rank"].min() / 1.3
        ax.hlines(paper["fail_above"], lo, paper["bound"] * 0.97, color="black", lw=2.2, ls="--",
                  label=f"paper: > {paper['fail_above']:g} for r < {paper['bound']:g} (its 24-bit suite)")
        ax.plot([paper["solve_rank"]], [paper["solve_below"]], "v", color="black", ms=10,
                label=f"paper: solved (< {paper['solve_below']:g}) at r = {paper['solve_rank']:g}")
    ax.set_yscale("log")
    axes[2].set_ylim(-0.03, 1.03)
    handles, labels = [], []
    for a in axes:  # one legend below the panels, each entry once
        for h, lab in zip(*a.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle(f"Min-IP witness suite: {bound['family_size']} length-3 inputs over {{0,1}}^{bound['bits']}, "
                 f"{bound['n_queries']} queries (nonnegative kernel attention, exp features, full-batch training)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    _save(fig, pdf_path, png_path)


def scaling_figure(runs: pd.DataFrame, threshold: float, pdf_path, png_path) -> None:
    s = runs[runs.setting != "witness"]
    sizes = sorted(s.bits.dropna().unique().astype(int))
    lengths = sorted(s.length.dropna().unique().astype(int), reverse=True)
    all_ranks = sorted(int(r) for r in s["rank"].dropna().unique())
    fig, axes = plt.subplots(len(lengths), len(sizes), figsize=(3.6 * len(sizes), 3.2 * len(lengths)),
                             squeeze=False, sharey="row")
    for i, n in enumerate(lengths):
        for j, m in enumerate(sizes):
            ax = axes[i][j]
            g = s[(s.bits == m) & (s.length == n)]
            k, d = g[g.kind == "kernel"], g[g.kind == "dense"]
            seeds = sorted(k.seed.unique())
            if len(k):
                med = k.groupby("rank")[["error_ood", "error_iid"]].median()
                ax.plot(med.index, med["error_ood"], "-", color="C0", label="kernel, OOD (median)")
                ax.plot(med.index, med["error_iid"], "--", color="C1", label="kernel, iid (median)")
                for t, sd in enumerate(seeds):
                    gs = k[k.seed == sd]
                    ax.scatter(gs["rank"] * _jitter(t, len(seeds)), gs["error_ood"], marker=SEED_MARKERS[t % 10],
                               s=18, facecolors="none", edgecolors="C0", alpha=0.8, label=f"OOD seed {sd}")
            if len(d):
                ax.axhline(d["error_ood"].max(), color="C2", ls="-.", lw=1.2, label=f"dense, OOD (max of {len(d)} seeds)")
            ax.axhline(threshold, color="grey", ls=":", lw=1, label=f"threshold {threshold:g}")
            ax.set_xscale("log", base=2)
            _rank_ticks(ax, k["rank"] if len(k) else all_ranks, min(all_ranks), max(all_ranks))
            ax.set_title(f"m = {m} bits, N = {n}", fontsize=9)
            ax.set_xlabel("feature rank r")
            if j == 0:
                ax.set_ylabel("error (fraction of positions wrong)")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)  # below the panels
    fig.suptitle("Min-IP on random tokens, disjoint train/test token pools: error vs feature rank "
                 "(nonnegative kernel attention, exp features; dense softmax as reference)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    _save(fig, pdf_path, png_path)


def transition_figure(trans: pd.DataFrame, threshold: float, pdf_path, png_path) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for n, g in trans.groupby("length"):
        g = g.sort_values("bits")
        for split, style, dx in (("ood", "-o", -0.12), ("iid", "--s", 0.12)):  # small offsets: OOD and iid often coincide
            vals = [np.nan if str(v).startswith(">") else float(v) for v in g[f"transition_rank_{split}"]]
            over = [2.0 * float(mx) if str(v).startswith(">") else np.nan for v, mx in zip(g[f"transition_rank_{split}"], g["max_rank"])]
            line, = ax.plot(g["bits"] + dx, vals, style, label=f"N = {n}, {split.upper()}")
            if not np.all(np.isnan(over)):
                ax.plot(g["bits"] + dx, over, "^", color=line.get_color(), mfc="none", ms=9,
                        label=f"N = {n}, {split.upper()}: not reached (> largest rank)")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("problem size m (bits per token)")
    ax.set_ylabel(f"smallest rank with median error < {threshold:g}")
    ax.set_xticks(sorted(trans.bits.unique()))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Min-IP transition rank vs problem size\n(kernel attention, exp features, disjoint token pools)", fontsize=10)
    fig.tight_layout()
    _save(fig, pdf_path, png_path)


def threshold_figure(crit: pd.DataFrame, criteria: list[str], pdf_path, png_path) -> None:
    """`crit` from `sweep.criterion_transitions`; one line per criterion, OOD and iid panels, largest N."""
    n = int(crit["length"].max())
    c = crit[crit.length == n]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, split in zip(axes, ("ood", "iid")):
        g = c[c.split == split].sort_values("bits")
        for j, label in enumerate(criteria):
            dx = 0.15 * (j - (len(criteria) - 1) / 2)  # small offsets: criteria often coincide
            vals = [np.nan if v is None or pd.isna(v) else float(v) for v in g[label]]
            over = [2.0 * mx if v is None or pd.isna(v) else np.nan for v, mx in zip(g[label], g["max_rank"])]
            line, = ax.plot(g["bits"] + dx, vals, "-o", color=f"C{j}", label=label)
            if not np.all(np.isnan(over)):
                ax.plot(g["bits"] + dx, over, "^", color=line.get_color(), mfc="none", ms=9,
                        label=f"{label}: not reached (drawn at 2x largest rank)")
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xticks(sorted(c.bits.unique()))
        ax.set_xlabel("problem size m (bits per token)")
        ax.set_title(f"{split.upper()} test sequences", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("transition rank (median over seeds)")
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"Min-IP on random tokens, N = {n}: smallest feature rank meeting each criterion vs problem size\n"
                 "(kernel attention, exp features, disjoint train/test token pools)", fontsize=10)
    fig.tight_layout()
    _save(fig, pdf_path, png_path)
