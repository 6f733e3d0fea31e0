"""A training run's hyperparameters (`minip.training` trains with them; `minip.sweep` derives them from
the config without importing torch)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch: int
    lr: float
    hidden: int
    value_dim: int
    depth: int = 1
