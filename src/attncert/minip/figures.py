"""The Min-IP figures by name (= file name under figures/minip/), each drawn by `plots`.

    witness_phase_transition      error and largest |y - t| vs rank on the witness suite, proven bound
    scaling_error_vs_rank         random tokens: error vs rank per problem size, kernel vs dense
    transition_rank_vs_size       transition rank vs problem size at the configured threshold, the paper's
                                  8 -> 16 -> 64 beside it
    transition_rank_by_criterion  the transition rank under each reported threshold and |y - t| < 1/2
"""
from __future__ import annotations

import pandas as pd

from attncert.minip import plots
from attncert.minip.figure_names import FIGURES
from attncert.minip.sweep import MAX_ERR_CRITERION, criterion_label, criterion_transitions
from attncert.minip.tables import transition_table


def draw(name: str, runs: pd.DataFrame, bound: dict | None, threshold: float, thresholds: list[float],
         pdf: str, png: str, claims: list[dict] | None = None) -> None:
    """Draw the figure `name` from the sweep table `runs` (and the witness bound record; `claims`: Paper B's
    claims, whose numbers the witness and transition figures mark)."""
    if name == "witness_phase_transition":
        plots.witness_figure(runs, bound, pdf, png, paper_marks(claims or []))
    elif name == "scaling_error_vs_rank":
        plots.scaling_figure(runs, threshold, pdf, png)
    elif name == "transition_rank_vs_size":
        paper = next((c["value"] for c in claims or [] if c["id"] == "ood_transition"), None)
        plots.transition_figure(transition_table(runs, threshold), threshold, pdf, png, paper)
    elif name == "transition_rank_by_criterion":
        criteria = [criterion_label(p) for p in thresholds] + [MAX_ERR_CRITERION]
        plots.threshold_figure(criterion_transitions(runs, list(thresholds)), criteria, pdf, png)
    else:
        raise ValueError(f"unknown Min-IP figure {name!r}; known: {sorted(FIGURES)}")


def paper_marks(claims: list[dict]) -> dict:
    """The paper's witness-suite numbers from its claims: the rank bound below which it reports failure with
    largest |y - t| above `fail_above`, and the rank that solves the suite (every |y - t| below `solve_below`)."""
    by_id = {c["id"]: c for c in claims}
    need = ("witness_bound", "witness_fail_below", "witness_solve_at")
    if not all(k in by_id for k in need):
        return {}
    solve = by_id["witness_solve_at"]
    return {"bound": float(by_id["witness_bound"]["value"]), "fail_above": float(by_id["witness_fail_below"]["value"]),
            "solve_rank": float(solve["value"]), "solve_below": float(solve["target"])}
