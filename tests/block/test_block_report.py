"""The block certificate's table, claim values and figure (block/report.py, block/figures.py) on a synthetic units
table: +inf second-order bounds count as the largest, the reported bound's sources and violations are counted, the
figure draws with and without alpha-CROWN."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attncert.block import figures, report

RADII = [1e-4, 1e-3, 3e-3]


def _units(alpha: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for t in (0, 1):
        for h in range(4):
            for r in RADII:
                asc = 2.0 * r * r * (1 + rng.random())
                so = asc * (3.0 if r < 1e-3 else 50.0)
                if t == 0 and r == 3e-3 and h < 3:
                    so = np.inf
                crown = asc * 70.0
                rep = so
                rows.append({
                    "model": "synthetic", "family": "bert", "transition": t, "head": h, "prompt": 0, "position": 4,
                    "d": 8, "radius": r, "g0": 0.5, "gradient_norm_l1": 2.0, "ascent_max": asc,
                    "second_order_max": asc, "second_order_upper": 1.6 * asc, "crown_upper": crown,
                    "crown_lower": -crown, "alpha_crown_upper": 0.9 * crown if alpha else np.nan,
                    "certificate_f": rep,
                    "certificate_g": 0.5 + 2.0 * r + rep, "second_order_certificate_f": so,
                    "second_order_certificate_g": 0.5 + 2.0 * r + so, "per_op_sum": 40 * asc,
                    "per_op_sum_softmax_one_op": 38 * asc, "crown_leading_order": 30 * asc,
                    "status": "ok", "cpu_seconds_certificate": 4.5, "cpu_seconds_crown": 3.0,
                })
    return pd.DataFrame(rows)


def test_certificate_table_counts_infinite_bounds():
    df = report.derive(_units())
    tab = report.certificate_table(df).set_index("radius")
    assert tab.loc[1e-4, "second_order_certificate_over_ascent"] == pytest.approx(3.0)
    assert tab.loc[3e-3, "second_order_not_finite"] == 3 and tab.loc[1e-4, "second_order_not_finite"] == 0
    assert tab.loc[3e-3, "second_order_certificate_over_ascent"] == pytest.approx(50.0)   # 3 inf of 8: median finite
    assert tab["violations"].sum() == 0 and tab["alpha_crown_over_ascent"].isna().all()
    assert tab.loc[1e-4, "crown_gap_g_over_linear"] < tab.loc[3e-3, "crown_gap_g_over_linear"]
    assert tab["cpu_seconds_per_unit_certificate"].iloc[0] == pytest.approx(4.5 / 4)
    m = report.certificate_measured(df)
    assert m["block_certificate_over_perop_r0.0001"] == pytest.approx(3.0 / 40)
    assert m["block_certificate_sound_and_finite"] is False and m["block_certificate_violations"] == 0   # 3 +inf


def test_certificate_measured_sees_a_violation_and_an_infinite_report():
    df = _units()
    df.loc[0, "certificate_f"] = 0.5 * df.loc[0, "ascent_max"]
    m = report.certificate_measured(report.derive(df))
    assert m["block_certificate_violations"] == 1 and m["block_certificate_sound_and_finite"] is False
    df = _units().replace(np.inf, 1e3)
    assert report.certificate_measured(report.derive(df))["block_certificate_sound_and_finite"] is True
    df.loc[1, "certificate_g"] = np.inf
    assert report.certificate_measured(report.derive(df))["block_certificate_sound_and_finite"] is False


@pytest.mark.parametrize("alpha", [False, True])
def test_certificate_figure_draws(tmp_path, alpha):
    df = report.derive(_units(alpha))
    claims = [{"id": "block_crown_over_perop", "value": {"median": 1.63, "range": [1.26, 2.34]}},
              {"id": "block_predicted_looseness", "value": {"median": 140, "range": [33, 722]}}]
    pdf, png = tmp_path / "c.pdf", tmp_path / "c.png"
    figures.draw("certificate_vs_radius", df, {}, claims, str(pdf), str(png))
    assert pdf.stat().st_size > 1000 and png.stat().st_size > 1000


def test_paper_table_shows_the_papers_numbers_not_its_sentences():
    """Every cell of the paper column is the paper's number (or n/a / a set-up note), never the summary's sentence:
    the softmax-as-one-op rank correlation row reads the paper's 0.98."""
    from attncert.paper_comparison.paper_comparison import claim_dicts

    df = _units()
    rng = np.random.default_rng(1)
    df = df.assign(effective_rank=rng.uniform(5, 50, len(df)), entropy_rank=rng.uniform(5, 50, len(df)),
                   stable_rank=rng.uniform(1, 10, len(df)))
    claims = claim_dicts(Path(__file__).resolve().parents[2] / "data" / "paper_claims.yaml", "paper_a")
    block = {"reference_radius": 1e-3, "second_order_tolerance": 0.015, "radii": RADII}
    table = report.paper_table(report.derive(df), block, claims)
    paper = table.iloc[:, 1].astype(str)
    assert not paper.str.contains(r"[\uac00-\ud7a3]").any(), paper.tolist()
    row = table[table.iloc[:, 0].str.startswith("Spearman ρ with softmax as one op")]
    assert row.iloc[0, 1].startswith("0.98"), row.iloc[0, 1]
