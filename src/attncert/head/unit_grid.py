"""The certification grid: the units a configuration defines (torch-free, so that the audit can list them).

A *unit* is (layer, head, prompt, query_pos, radius, norm, mode) of one model; `grid` is the product the
`certify` section of the configuration spans (with the optional varying-query sub-grid `certify.varying`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    layer: int
    head: int
    prompt: int
    query_pos: int
    radius: float
    norm: str
    mode: str

    def key(self) -> dict:
        return {"layer": self.layer, "head": self.head, "prompt": self.prompt, "query_pos": self.query_pos,
                "radius": self.radius, "norm": self.norm, "mode": self.mode}


def grid(heads, prompts, query_positions, radii, norms, modes, layer: int, varying: dict | None = None) -> list[Unit]:
    """Every unit of the product grid; `varying` (optional keys query_positions, radii) keeps only the
    varying-query units on that sub-grid (config `certify.varying`)."""
    varying = varying or {}
    v_qps = [int(q) for q in varying.get("query_positions", query_positions)]
    v_radii = [float(r) for r in varying.get("radii", radii)]
    return [Unit(layer, h, p, qp, float(r), nm, md)
            for h, p, qp, nm, md, r in itertools.product(heads, prompts, query_positions, norms, modes, radii)
            if md != "varying" or (int(qp) in v_qps and any(abs(float(r) - v) <= 1e-12 * v for v in v_radii))]
