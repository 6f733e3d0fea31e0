"""Where a solve of the long varying program ended, for a later solve of the same unit to start from.

The tight variant of a unit is solved after its paper-like variant (`certificate._tight_or_paper_like`). Every cut
the paper-like rounds found is valid for the tight program too: the half-planes are edges under each token's own
chain (indices into `long_program.chain_rows`, the same for both variants), a support multiplier t is rebuilt into
its rows by the tight build, and a shift cut (w, F) gets its own Lambda' from the data, whatever chose w and F. So
the tight solve starts from them, and from the builds' memo (budgets, Lambda', support rows: functions of the unit's
data only), instead of from `long.start_edges`: the cutting-plane rounds it would repeat are the ones the paper-like
solve already paid for, and the resumed solve is a single last round (no rough first solve, no new cuts: it
walks the ladder to ACCEPT as a last round does).

Measured (GPT-2-sized `random-gpt2` heads, the units of `bench/context_length`, linf; the tight solve from a cold
start against resumed, each unit's min(tight, paper-like) relative gap and the tight solve's seconds): 1,024 keys,
heads 0 and 1 at r = 0.002 / 0.02: 0.01733 / 0.17778 / 0.00832 / 0.03367 in 5.6 / 25.2 / 3.5 / 30.9 s (2 / 7 / 2 / 8
solves) against 0.01733 / 0.18051 / 0.00833 / 0.03366 in 3.4 / 4.3 / 1.9 / 4.6 s (one solve each; head 0 at r = 0.02
1.5 % looser); 256 keys, heads 0-3, both radii: 1.4-10.9 s against 0.6-1.5 s, the gaps equal to 0.2 % (three
0.01-0.13 % tighter); 64 keys, heads 0-3: equal to 0.05 %, 1.2-5.1 s against 0.9-2.4 s (with the cvxpy programs
beside it); l2 (no rounds; 256 keys, heads 0-1): equal, the same seconds. Resumed with further rounds instead (cuts
at the tight point, as a cold solve's): 1,024 keys head 0 at r = 0.02 0.17841 in 9.6 s (3 solves), head 1 at r =
0.002 0.00829 in 8.2 s (3 solves).

Nothing here enters a certificate: the stored construction (edges, shift cuts, support multipliers) is what the audit
rebuilds, wherever it came from.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from attncert.certify.second_order.varying_query.data import VaryingData


def unit_fingerprint(D: VaryingData, W_Q: np.ndarray, second: bool) -> str:
    """A digest of everything the builds' memo and the cuts depend on: the unit's data, W_Q and `second`."""
    h = hashlib.blake2b(digest_size=16)
    for name, value in sorted(D.fields().items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(value).tobytes() if isinstance(value, np.ndarray) else repr(value).encode())
    h.update(np.ascontiguousarray(W_Q, dtype=np.float64).tobytes())
    h.update(b"second" if second else b"first")
    return h.hexdigest()


@dataclass
class LongStart:
    """A solve's end state (module docstring): its cuts, its builds' memo and the attempt that gave its bound."""

    fingerprint: str
    edges: list | None
    support_ts: list
    shift_cuts: list
    memo: dict
    attempt: tuple

    def fits(self, D: VaryingData, W_Q: np.ndarray, second: bool) -> bool:
        """Was it taken from a solve of this unit (same data, W_Q and `second`)?"""
        return self.fingerprint == unit_fingerprint(D, W_Q, second)
