"""Paper A's certification numbers placed on a figure's axes: its relative gaps at the radii it names, and its
shares of units certified within a fraction of their movement range (read from `data/paper_claims.yaml` through
`claim_dicts`)."""
from __future__ import annotations

import re


def paper_points(claims, prefix: str) -> list[tuple[float, float]]:
    """(radius, paper value) of every claim whose id is `prefix` followed by the radius, e.g.
    second_order_rel_gap_r0.002 -> (0.002, 0.004); only single numbers (a band is not a point)."""
    out = []
    for c in claims or ():
        m = re.fullmatch(re.escape(prefix) + r"([0-9.]+)", c["id"])
        if m and isinstance(c["value"], (int, float)):
            out.append((float(m.group(1)), float(c["value"])))
    return sorted(out)


def paper_shares(claims, radii) -> list[tuple[str, list[float], float, str]]:
    """(label, radii, share, "≥" or ">") of the paper's "share certified within x%" claims, placed at the
    plotted radii their unit names (`r ≤ x`: every plotted radius up to x; `r = x`: that radius)."""
    out = []
    for cid, within in (("within_10pct_small_r", "10%"), ("within_1pct_r0.001", "1%")):
        c = next((c for c in claims or () if c["id"] == cid), None)
        if c is None:
            continue
        if m := re.search(r"r ≤ ([0-9.]+)", c["unit"]):
            at = [r for r in radii if r <= float(m.group(1)) * (1 + 1e-9)]
            where = f"r ≤ {m.group(1)}"
        elif m := re.search(r"r = ([0-9.]+)", c["unit"]):
            at = [float(m.group(1))]
            where = f"r = {m.group(1)}"
        else:
            continue
        op = ">" if c.get("strict") else "≥"
        share = "every unit" if op == "≥" and c["value"] == 1 else f"{op} {c['value']:g} of the units"
        out.append((f"paper (GPT-2 small): {share} within {within} at {where}", at, float(c["value"]), within))
    return out
