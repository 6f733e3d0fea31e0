"""The join of the baselines with the certification table: ratios, lost units, the measured keys."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from attncert.baselines import comparison as bc
from attncert.baselines.linear_bound_baselines import METHODS

RADII = (0.001, 0.01)
# gap of each method as a multiple of the certificate's gap (fixed / varying)
FACTOR = {"ibp": (50.0, 80.0), "crown": (4.0, 8.0), "crown_mid": (6.0, 10.0), "alpha_crown": (3.0, 2.0),
          "alpha_crown_last_layer": (3.5, 7.0), "crown_lirpa_softmax": (3.0, 5.0),
          "alpha_crown_last_layer_lirpa_softmax": (2.5, 4.0)}


def _tables():
    cert, base = [], []
    for head, mode, r in itertools.product(range(3), ("fixed", "varying"), RADII):
        key = {"layer": 0, "head": head, "prompt": 0, "query_pos": 4, "norm": "linf", "mode": mode, "radius": r}
        ref, gap2 = 1.0 + 10 * r, 0.01 * r
        # first order: 5x the certificate's gap at the smallest radius on head 0, 2x elsewhere
        gap1 = (5.0 if (head == 0 and r == RADII[0]) else 2.0) * (4.0 if mode == "fixed" else 8.0) * gap2
        cert.append({**key, "nominal": 1.0, "exact_lo": ref if mode == "fixed" else np.nan,
                     "exact_hi": ref if mode == "fixed" else np.nan, "best_feasible": ref,
                     "first_order": ref + gap1, "second_order": ref + gap2, "t_second_s": 0.5})
        for method in METHODS:
            f = FACTOR[method][mode == "varying"]
            status = "error: ValueError: simulated" if (method == "crown_mid" and head == 2 and r == 0.01) else "ok"
            base.append({**key, "method": method, "upper": ref + f * gap2 if status == "ok" else np.nan,
                         "attained": ref, "seconds": 0.01, "status": status, "label": method})
    return pd.DataFrame(base), pd.DataFrame(cert)


def test_measured_keys_and_lost_units():
    base, cert = _tables()
    m = bc.merge(base, cert)
    table, slopes, head = bc.comparison_table(m, "toy"), bc.slope_table(m, "toy"), bc.headline(m, "toy")
    first_order, lost = bc.crown_vs_first_order(m), bc.lost_units(base)
    assert len(lost) == 2 and set(lost["method"]) == {"crown_mid"} and lost["reason"].str.startswith("error").all()
    out = bc.paper_measurements(table, slopes, head, first_order, lost)
    assert out["crown_over_cert_fixed"] == pytest.approx([4.0, 4.0])
    assert out["crown_over_cert_varying_r0.001"] == pytest.approx(8.0)
    assert out["alpha_crown_variant"] == "alpha_crown_last_layer_lirpa_softmax"
    assert out["alpha_crown_over_cert_varying_r0.01"] == pytest.approx(4.0)
    assert out["alpha_crown_last_layer_over_cert_varying_r0.01"] == pytest.approx(7.0)
    assert out["alpha_crown_full_over_cert_varying_r0.01"] == pytest.approx(2.0)
    assert out["crown_mid_over_cert_varying_r0.01"] == pytest.approx(10.0)
    assert out["crown_lirpa_softmax_over_cert_fixed"] == pytest.approx([3.0, 3.0])
    # CROWN's gap is 4x (fixed) / 8x (varying) the certificate's; first order is 20x / 40x on head 0 and
    # 8x / 16x on the others at r = 0.001: CROWN below first order on every unit
    assert out["crown_tighter_than_first_order_smallest_r"] == {"fixed": 1.0, "varying": 1.0}
    assert out["baseline_units_lost"] == 2
    assert out["cert_tighter_share"] == 1.0


def test_crown_above_first_order_counts():
    base, cert = _tables()
    cert.loc[cert["head"] == 1, "first_order"] = cert.loc[cert["head"] == 1, "best_feasible"] + 1e-9
    fo = bc.crown_vs_first_order(bc.merge(base, cert)).set_index("mode")
    assert fo.loc["fixed", "share_below_first_order"] == pytest.approx(2 / 3)
    assert fo.loc["fixed", "units"] == 3 and fo.loc["fixed", "radius"] == RADII[0]
