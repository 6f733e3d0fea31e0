"""The solver noise floor of a certified gap (docs/certificate.md §6.1), and which summary numbers it makes
meaningless.

A certificate is a weak-duality bound of a conic program whose objective is measured in the unit
rho_o = first-order bound - nominal value, and no certificate's solve is asked for more than `SOLVER_NOISE` of that
unit (the coarsest of the solvers' tolerances and the acceptance margin of a certified dual;
tests/reporting/test_noise_floor.py derives it from the solver ladders). The reference value adds its own
uncertainty, the width of the exact bracket (fixed query; the best ascent value of a varying query is an attained
value, exact). So, per unit (`unit_tables`' gaps),

    floor = SOLVER_NOISE * (first_order - nominal) + (exact_hi - exact_lo, fixed query only),

and a gap below its floor is indistinguishable from 0 at the solvers' accuracy: a ratio or a slope computed from it
is not a result. `gaps_with_floor` adds the floor and a below_floor_<cert> flag per certificate; a median over units
is at the floor when at least half of them are (`at_floor_count`), a per-unit slope when a gap it is fitted through
is (`slope_below_floor`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from attncert.reporting.unit_tables import UNIT_KEYS, add_gaps

#: the solver noise floor of a certified gap, in units of the relaxation's objective unit (see the docstring)
SOLVER_NOISE = 1e-7
CERTIFICATES = ("first_order", "second_order", "second_order_tight")


def gap_noise_floor(df: pd.DataFrame) -> pd.Series:
    """Per unit, the solver noise floor of a gap in the head's output units (NaN where the first-order bound is
    not finite: no objective unit, nothing is called noise)."""
    unit = (df["first_order"] - df["nominal"]).where(np.isfinite(df["first_order"]))
    bracket = (df["exact_hi"] - df["exact_lo"]).where(df["mode"].eq("fixed") & df["exact_hi"].notna(), 0.0)
    return (SOLVER_NOISE * unit + bracket).astype(float)


def gaps_with_floor(df: pd.DataFrame, certificates=CERTIFICATES) -> pd.DataFrame:
    """`unit_tables.add_gaps` plus noise_floor and below_floor_<cert> (the gap is below the floor) columns."""
    out = add_gaps(df, certificates)
    out["noise_floor"] = gap_noise_floor(out)
    for cert in certificates:
        if f"gap_{cert}" in out:
            out[f"below_floor_{cert}"] = out[f"gap_{cert}"] < out["noise_floor"]
    return out


def slope_below_floor(df: pd.DataFrame, flag: str, slope_max_radius: float = 0.005) -> pd.Series:
    """Per unit (the index of `unit_tables.per_unit_slopes`): True when a gap its slope is fitted through is below the
    noise floor (`flag`: a below_floor_<cert> column of `gaps_with_floor`), so the slope is not a result."""
    sub = df[df["radius"] <= slope_max_radius + 1e-15]
    return sub.groupby(UNIT_KEYS)[flag].any()


def at_floor_count(below: int, units: int) -> bool:
    """A median over `units` units of which `below` are at the noise floor is itself at the floor when at least
    half of them are (it is then one of their numbers, or between two of them); no units: False."""
    return bool(units > 0 and 2 * int(below) >= int(units))
