"""One verdict per statement of the papers: what the README's and docs/results.md's tallies count.

A sentence of a paper can carry several claims (the effective-rank sentence is judged by three definitions of
the rank; "7.8× (α-CROWN 6.7×)" by the ratio and by the order of the two methods). Counting claims would weigh a
sentence by how many ways we measure it, so the tally counts every quoted sentence (`sentence` of
`data/paper_claims.yaml`, the same text = the same statement) once, with the least favourable verdict of its
claims in the order SEVERITY (differs, qualitative, set-up differs, reproduced, stronger; n/a only when every
claim is n/a); its verdict before the caps is the least favourable of the claims' uncapped verdicts. Variants
beyond the paper (`beyond: true`: the tight certificate, long contexts) are judged against a sentence of the paper
but are not the paper's statement: they are tallied apart, one per claim, and never counted as the sentence.
"""
from __future__ import annotations

import pandas as pd

from attncert.paper_comparison.verdict import DIFFERS, NA, QUALITATIVE, REPRODUCED, SETUP_DIFFERS, STRONGER

SEVERITY = (DIFFERS, QUALITATIVE, SETUP_DIFFERS, REPRODUCED, STRONGER)
COLUMNS = ["paper", "sentence", "english", "verdict", "uncapped", "claims"]


def least_favourable(kinds) -> str:
    """The first of SEVERITY among `kinds` (n/a ignored unless every kind is n/a)."""
    present = [k for k in kinds if k != NA]
    return min(present, key=SEVERITY.index) if present else NA


def sentence_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per quoted sentence of the papers (claims beyond the paper left out), in the claims' order:
    paper, sentence, english, verdict, uncapped verdict, and the ids of its claims."""
    paper = table[~table["beyond"].astype(bool)]
    rows = []
    for (letter, sentence), part in paper.groupby(["paper", "sentence"], sort=False):
        rows.append({"paper": letter, "sentence": sentence, "english": part["english"].iloc[0],
                     "verdict": least_favourable(part["verdict"]), "uncapped": least_favourable(part["uncapped"]),
                     "claims": ", ".join(part["id"])})
    return pd.DataFrame(rows, columns=COLUMNS)


def beyond_table(table: pd.DataFrame) -> pd.DataFrame:
    """The claims beyond the paper, one row each (tallied apart from the papers' sentences)."""
    return table[table["beyond"].astype(bool)]
