"""A duration in words for the run's pages and the README: seconds below 90 s, minutes below 90 min, else hours."""
from __future__ import annotations


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.2f} h"
