"""The baseline figure: median relative gap vs radius of every method beside the second-order
certificate, one panel per query mode, titled with the model and grid."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from attncert.baselines.comparison import KEYS  # noqa: E402
from attncert.pipeline.report_files import save_figure  # noqa: E402


def figure_gap_vs_radius(m: pd.DataFrame, label: str, out_pdf) -> None:
    """m: `comparison.merge` of the baseline and certification tables."""
    ok = m[(m["status"] == "ok") & (m["gap"] > 0)]
    cert = m.drop_duplicates(KEYS).assign(method="second_order", gap=lambda d: d["gap_second_order"],
                                          rel_gap=lambda d: d["gap_second_order"] / d["movement"])
    parts = [ok, cert[cert["gap"] > 0]]
    if "gap_second_order_tight" in m:
        tight = m.drop_duplicates(KEYS).assign(method="second_order_tight (beyond the paper)",
                                               gap=lambda d: d["gap_second_order_tight"],
                                               rel_gap=lambda d: d["gap_second_order_tight"] / d["movement"])
        parts.append(tight[tight["gap"] > 0])
    allm = pd.concat(parts, ignore_index=True)
    sns.set_theme(style="whitegrid")
    modes = sorted(allm["mode"].unique())
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.5), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        for method, g in allm[allm["mode"] == mode].groupby("method"):
            q = g.groupby("radius")["rel_gap"].median()
            ax.plot(q.index, q.values, "o-", label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r")
        ax.set_title(f"{mode} query", fontsize=10)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("median relative gap (bound − reference) / movement")
    fig.suptitle(f"IBP / CROWN / α-CROWN vs the second-order certificate — {label}", fontsize=9)
    save_figure(fig, out_pdf)
