"""Figures of the Min-IP stage (matplotlib; each saved as PDF and PNG; style: `figure_style.style`).

  witness_figure     error, largest deviation max |y - t| (all positions and query position) and
                     fraction of queries failed vs rank on the witness suite, every seed shown, the
                     proven bound as a vertical line, dense attention as reference, the paper's numbers
  scaling_figure     error vs rank per problem size m (one panel each), every length N in it (a length
                     run at one rank only as points), OOD and iid, seeds shown, dense attention as reference
  transition_figure  the smallest rank reaching the error threshold vs problem size; runs that never reach
                     it in a "not reached" row above the axis range; the paper's 8 -> 16 -> 64 beside ours
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
from matplotlib.lines import Line2D  # noqa: E402

from attncert.figure_style import style  # noqa: E402
from attncert.provenance.provenance import atomic_path  # noqa: E402

SEED_MARKERS = "osD^v<>ph*"
SEED_SYMBOLS = dict(zip(SEED_MARKERS, "○□◇△▽◁▷⬠⬡*"))  # for legend text
KERNEL, DENSE = style.method_color("kernel"), style.method_color("dense")
LENGTH_COLORS = ("#0072b2", "#cc79a7", "#e69f00", "#56b4e9")


def _save(fig, pdf_path, png_path) -> None:
    for path, kw in ((pdf_path, {}), (png_path, {"dpi": style.DPI})):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=str(path).rsplit(".", 1)[-1], bbox_inches="tight", **kw)
    plt.close(fig)


def _jitter(seed: int, n: int) -> float:
    return 1.0 + 0.06 * (seed - (n - 1) / 2)


def _rank_ticks(ax, ranks, lo=None, hi=None) -> None:
    """Integer tick labels at the ranks of the grid (log2 axis), no minor labels."""
    ticks = sorted({int(r) for r in ranks})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlim((lo or ticks[0]) / 1.4, (hi or ticks[-1]) * 1.4)


def _seed_points(ax, k: pd.DataFrame, col: str, seeds, color=KERNEL) -> None:
    for i, s in enumerate(seeds):
        g = k[k.seed == s]
        ax.scatter(g["rank"] * _jitter(i, len(seeds)), g[col], marker=SEED_MARKERS[i % 10], s=22,
                   facecolors="none", edgecolors=color, alpha=0.8, label=f"seed {s}", zorder=style.Z_OURS)


def witness_figure(runs: pd.DataFrame, bound: dict, pdf_path, png_path, paper: dict | None = None) -> None:
    """paper: `figures.paper_marks` (the paper's numbers on the witness suite), drawn on the |y - t| panel."""
    w = runs[runs.setting == "witness"]
    k, d = w[w.kind == "kernel"], w[w.kind == "dense"]
    seeds = sorted(k.seed.unique())
    style.use()
    fig, grid = plt.subplots(2, 2, figsize=(10.4, 6.8))
    axes = [grid[0][0], grid[0][1], grid[1][0]]
    grid[1][1].axis("off")  # the legend's cell
    panels = ((axes[0], "error", "error (fraction of positions wrong)"),
              (axes[1], "max_abs_error", "largest |y - t| over the suite"),
              (axes[2], "fraction_queries_failed", "fraction of queries failed"))
    for ax, col, label in panels:
        med = k.groupby("rank")[col].median()
        ax.plot(med.index, med.values, "-", color=KERNEL, lw=3.2 if col == "max_abs_error" else 1.8, alpha=0.55
                if col == "max_abs_error" else 1.0, label="kernel, median over seeds", zorder=style.Z_OURS)
        _seed_points(ax, k, col, seeds)
        if len(d):
            ax.axhline(d[col].max(), color=DENSE, ls="--", lw=1.2, label=f"dense softmax (max over {len(d)} seeds)")
        ax.axvline(bound["bound"], color="C3", ls=":", lw=1.5, label=f"proven bound r ≥ {bound['bound']}")
        ax.axvspan(k["rank"].min() * 0.8, bound["bound"] * 0.97, color="C3", alpha=0.06, lw=0,
                   label="shaded: ranks below the proven bound")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("feature rank r")
        ax.set_title(label)
        _rank_ticks(ax, k["rank"])
    ax = axes[1]
    med = k.groupby("rank")["max_abs_error"].median()
    med_q = k.groupby("rank")["max_abs_error_query_position"].median()
    same = bool(np.allclose(med_q.reindex(med.index).to_numpy(), med.to_numpy(), rtol=1e-6, equal_nan=True))
    ax.plot(med_q.index, med_q.values, "--", color="C1", lw=1.4, zorder=style.Z_OURS + 0.1,
            label="kernel, query position only (median)" + (": equal to the median over all positions,\n"
                                                             "drawn over its wide light line" if same else ""))
    ax.axhline(0.5, color="black", ls="-", lw=0.8, label="1/2: solved iff below (theorem's criterion)")
    if paper:
        lo = k["rank"].min() / 1.3
        style.paper_bound_line(ax, lo, paper["bound"] * 0.97, paper["fail_above"], ">",
                               label=f"paper: > {paper['fail_above']:g} for r < {paper['bound']:g} "
                                     "(its 24-bit suite; a lower bound)")
        style.paper_marker(ax, paper["solve_rank"], paper["solve_below"], bound="<",
                           label=f"paper: solved (< {paper['solve_below']:g}) at r = {paper['solve_rank']:g}")
    ax.set_yscale("log")
    axes[2].set_ylim(-0.03, 1.03)
    handles, labels = [], []
    for a in axes:  # one legend in the fourth cell, each entry once
        for h, lab in zip(*a.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(style.paper_handle(">" if "> " in lab else "<") if lab.startswith("paper") else h)
                labels.append(lab)
    fig.legend(handles, labels, loc="center", bbox_to_anchor=(0.5, 0.5), bbox_transform=grid[1][1].transAxes,
               ncol=1, fontsize=style.FONT["legend"], frameon=False)
    fig.suptitle(f"Min-IP witness suite: {bound['family_size']} length-3 inputs over {{0,1}}^{bound['bits']}, "
                 f"{bound['n_queries']} queries\n(nonnegative kernel attention, exp features, full-batch training)")
    _save(fig, pdf_path, png_path)


def scaling_figure(runs: pd.DataFrame, threshold: float, pdf_path, png_path) -> None:
    """One panel per problem size m; each length N a colour: its OOD median (solid) and iid median (dashed)
    over the ranks, OOD seeds as open markers; a length run at one rank only as its seeds' points."""
    s = runs[runs.setting != "witness"]
    sizes = sorted(s.bits.dropna().unique().astype(int))
    lengths = sorted(s.length.dropna().unique().astype(int), reverse=True)
    all_ranks = sorted(int(r) for r in s["rank"].dropna().unique())
    style.use()
    fig, axes = plt.subplots(1, len(sizes), figsize=style.figsize(len(sizes), 1, 3.5, 3.6, 1.4), squeeze=False,
                             sharey=True)
    for j, m in enumerate(sizes):
        ax = axes[0][j]
        dense_levels = {}
        for i, n in enumerate(lengths):
            g = s[(s.bits == m) & (s.length == n)]
            k, d = g[g.kind == "kernel"], g[g.kind == "dense"]
            color = LENGTH_COLORS[i % len(LENGTH_COLORS)]
            seeds = sorted(k.seed.unique())
            ranks = sorted(k["rank"].dropna().unique())
            if len(ranks) > 1:
                med = k.groupby("rank")[["error_ood", "error_iid"]].median()
                ax.plot(med.index, med["error_ood"], "-", color=color, label=f"kernel, N = {n}, OOD (median)",
                        zorder=style.Z_OURS)
                ax.plot(med.index, med["error_iid"], "--", color=color, label=f"kernel, N = {n}, iid (median)",
                        zorder=style.Z_OURS)
            only = f"; rank {int(ranks[0])} only run" if len(ranks) == 1 else ""
            seed_names = ", ".join(f"{SEED_SYMBOLS[SEED_MARKERS[t % 10]]} seed {sd}" for t, sd in enumerate(seeds))
            for t, sd in enumerate(seeds):
                gs = k[k.seed == sd]
                ax.scatter(gs["rank"] * _jitter(t, len(seeds)), gs["error_ood"], marker=SEED_MARKERS[t % 10], s=20,
                           facecolors="none" if len(ranks) > 1 else color, edgecolors=color, alpha=0.8,
                           zorder=style.Z_OURS, label=None if t else f"kernel, N = {n}, OOD, each seed{only}\n"
                                                                     f"({seed_names})")
            if len(d):
                dense_levels.setdefault(float(d["error_ood"].max()), []).append((n, len(d)))
        for level, ns in dense_levels.items():  # lengths with the same dense error share one line
            ax.axhline(level, color=DENSE, ls="-.", lw=1.2, label="dense softmax, OOD, max over seeds: "
                       + ", ".join(f"N = {n}" for n, _ in ns) + f" ({level:g})")
        ax.axhline(threshold, color="grey", ls=":", lw=1, label=f"threshold {threshold:g}")
        ax.set_xscale("log", base=2)
        _rank_ticks(ax, all_ranks, min(all_ranks), max(all_ranks))
        ax.set_title(f"m = {m} bits per token")
        ax.set_xlabel("feature rank r")
    axes[0][0].set_ylabel("error (fraction of positions wrong)")
    handles, labels = [], []
    for a in axes[0]:
        for h, lab in zip(*a.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    style.figure_legend(fig, handles, labels, ncol=3)
    fig.suptitle("Min-IP on random tokens, disjoint train/test token pools: error vs feature rank\n"
                 "(nonnegative kernel attention, exp features; dense softmax as reference)")
    _save(fig, pdf_path, png_path)


def _not_reached_axis(ax, max_rank: float) -> float:
    """A "not reached" row above the largest rank of the grid (log2 axis): a dashed separator and its own
    tick label; returns the row's height. Nothing is plotted there as if a rank had been measured."""
    row = 2.0 * max_rank
    ax.axhline(max_rank * 1.41, color="0.6", ls="--", lw=0.8)
    ax.axhspan(max_rank * 1.41, row * 1.6, color="0.93", lw=0, zorder=0)
    ax.set_yscale("log", base=2)
    ticks = [2 ** k for k in range(0, int(np.log2(max_rank)) + 1)]
    ax.set_yticks(ticks + [row], [f"{t:g}" for t in ticks] + [f"not reached\n(> {max_rank:g})"])
    ax.set_ylim(0.7, row * 1.6)
    return row


def transition_figure(trans: pd.DataFrame, threshold: float, pdf_path, png_path, paper: list | None = None) -> None:
    """paper: the paper's transition ranks as the problem grows (claim ood_transition, e.g. [8, 16, 64]; its
    problem sizes are not stated), drawn in a column of their own beside ours."""
    style.use()
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    max_rank = float(pd.to_numeric(trans["max_rank"]).max())
    row = _not_reached_axis(ax, max_rank)
    bits = sorted(trans.bits.unique())
    for i, (n, g) in enumerate(trans.groupby("length")):
        g = g.sort_values("bits")
        color = LENGTH_COLORS[i % len(LENGTH_COLORS)]
        for split, (marker, ls), dx in (("ood", ("o", "-"), -0.12), ("iid", ("s", "--"), 0.12)):  # OOD, iid offset
            col = g[f"transition_rank_{split}"].astype(str)
            vals = [np.nan if v.startswith(">") else float(v) for v in col]
            over = [row if v.startswith(">") else np.nan for v in col]
            ax.plot(g["bits"] + dx, vals, marker=marker, ls=ls, color=color, label=f"N = {n}, {split.upper()}",
                    zorder=style.Z_OURS)
            if not np.all(np.isnan(over)):
                ax.plot(g["bits"] + dx, over, ls="none", marker="^", ms=9, mfc="none", mec=color, mew=1.5,
                        zorder=style.Z_OURS, label=f"N = {n}, {split.upper()}: not reached by rank {max_rank:g}")
    xticks, xlabels = list(bits), [str(b) for b in bits]
    if paper:
        x = max(bits) + 0.6 * (max(bits) - min(bits)) / max(len(bits) - 1, 1) + 1
        xs = [x + 0.5 * (k - (len(paper) - 1) / 2) for k in range(len(paper))]
        ax.plot(xs, paper, color="0.5", ls=":", lw=1, zorder=style.Z_PAPER)
        style.paper_marker(ax, xs, [float(v) for v in paper], note="{y:g}", note_side="left",
                           label="paper: " + " → ".join(f"{v:g}" for v in paper)
                           + " as the problem grows (its sizes and threshold not stated)")
        xticks.append(x)
        xlabels.append("paper\n(sizes not\nstated)")
    ax.set_xticks(xticks, xlabels)
    ax.set_xlabel("problem size m (bits per token)")
    ax.set_ylabel(f"smallest rank with median error < {threshold:g}")
    style.figure_legend(fig, *ax.get_legend_handles_labels(), ncol=2)
    ax.set_title("Min-IP transition rank vs problem size\n(kernel attention, exp features, disjoint token pools)")
    _save(fig, pdf_path, png_path)


def threshold_figure(crit: pd.DataFrame, criteria: list[str], pdf_path, png_path) -> None:
    """`crit` from `sweep.criterion_transitions`; one line per criterion, OOD and iid panels, largest N; a
    criterion never met sits in the "not reached" row and its legend entry says so."""
    n = int(crit["length"].max())
    c = crit[crit.length == n]
    max_rank = float(c["max_rank"].max())
    never = {label for label in criteria if c[label].isna().all()}
    style.use()
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.8), sharey=True)
    for ax, split in zip(axes, ("ood", "iid")):
        g = c[c.split == split].sort_values("bits")
        row = _not_reached_axis(ax, max_rank)
        for j, label in enumerate(criteria):
            dx = 0.15 * (j - (len(criteria) - 1) / 2)  # small offsets: criteria often coincide
            vals = [np.nan if v is None or pd.isna(v) else float(v) for v in g[label]]
            over = [row if v is None or pd.isna(v) else np.nan for v in g[label]]
            ax.plot(g["bits"] + dx, vals, "-o", color=f"C{j}", zorder=style.Z_OURS)
            if not np.all(np.isnan(over)):
                ax.plot(g["bits"] + dx, over, ls="none", marker="^", ms=9, mfc="none", mec=f"C{j}", mew=1.5,
                        zorder=style.Z_OURS)
        ax.set_xticks(sorted(c.bits.unique()))
        ax.set_xlabel("problem size m (bits per token)")
        ax.set_title(f"{split.upper()} test sequences")
    axes[0].set_ylabel("transition rank (median over seeds)")
    colours = [Line2D([], [], color=f"C{j}", marker="o") for j in range(len(criteria))]
    names = [label + (f": never reached (at any m, by rank {max_rank:g})" if label in never else "")
             for label in criteria]
    shapes = [Line2D([], [], color="black", marker="o"), Line2D([], [], color="black", marker="^", ls="none",
                                                                 mfc="none")]
    fig.legend(colours, names, loc="outside lower left", ncol=2, title="colour: criterion",
               fontsize=style.FONT["legend"], title_fontsize=style.FONT["legend"], alignment="left")
    fig.legend(shapes, ["reached at this rank", f"not reached by rank {max_rank:g}"], loc="outside lower right",
               title="marker", fontsize=style.FONT["legend"], title_fontsize=style.FONT["legend"], alignment="left")
    fig.suptitle(f"Min-IP on random tokens, N = {n}: smallest feature rank meeting each criterion vs problem size\n"
                 "(kernel attention, exp features, disjoint train/test token pools)")
    _save(fig, pdf_path, png_path)
