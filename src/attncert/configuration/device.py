"""The torch device of the torch parts of the pipeline (config key `device`, default `cpu`).

`resolve_device("cpu")` -> cpu; `resolve_device("cuda")` / `"cuda:N"` -> that GPU when torch sees it,
else `DeviceError` with one line naming the fix. Every stage that runs torch code resolves its device
here, so the setting means the same everywhere (today: the ascent; α-CROWN and Min-IP to follow).
Results do not depend on the device beyond floating-point reduction order (all stages use float64).
"""
from __future__ import annotations

import re

import torch

DEFAULT_DEVICE = "cpu"
_PATTERN = re.compile(r"^(cpu|cuda(:[0-9]+)?)$")


class DeviceError(RuntimeError):
    """The configured device cannot be used; the message is one line naming the fix."""


def resolve_device(name: str | torch.device | None = None) -> torch.device:
    """`name` ('cpu', 'cuda', 'cuda:N', a torch.device or None for the default) as a usable torch.device."""
    if isinstance(name, torch.device):
        name = str(name)
    name = DEFAULT_DEVICE if name is None else str(name).strip()
    if not _PATTERN.match(name):
        raise DeviceError(f"config key 'device': {name!r} is not a device; fix: use cpu, cuda or cuda:N")
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceError(
            f"config key 'device' is {name!r} but torch sees no CUDA device (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda is not None}); fix: set device: cpu, or install a CUDA build of "
            f"torch on a machine with a GPU"
        )
    index = int(name.split(":")[1]) if ":" in name else 0
    if index >= torch.cuda.device_count():
        raise DeviceError(f"config key 'device' is {name!r} but torch sees {torch.cuda.device_count()} CUDA device(s); "
                          f"fix: use cuda:0..cuda:{torch.cuda.device_count() - 1} or cpu")
    return torch.device(name)
