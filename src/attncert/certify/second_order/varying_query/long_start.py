"""Where a solve of the long varying program ended, for a later solve of the same unit to start from.

The tight variant of a unit is solved after its paper-like variant (`certificate._tight_or_paper_like`). Every cut
the paper-like rounds found is valid for the tight program too: the half-planes are edges under each token's own
chain (indices into `long_program.chain_rows`, the same for both variants), a support multiplier t is rebuilt into
its rows by the tight build, and a shift cut (w, F) gets its own Lambda' from the data, whatever chose w and F. So
the tight solve starts from them, and from the builds' memo (budgets, Lambda', support rows: functions of the unit's
data only), instead of from `long.start_edges`: the cutting-plane rounds it would repeat are the ones the paper-like
solve already paid for. It adds no facets; after its first solve it adds a shift cut weighted by its own second
moments when that cut is violated (`shift_cuts.weighted_shift_cut`) and solves again, up to `long.RESUMED_SOLVES`
solves, each walking the ladder to ACCEPT as a last round does. Above `long.RESUME_ABOVE` tokens only.

Measured (GPT-2-sized `random-gpt2` heads, the units of `bench/context_length`, linf; the tight solve from a cold
start against resumed; each unit's min(tight, paper-like) relative gap and the tight solve's seconds). 1,024 keys,
heads 0 and 1, r = 0.02: cold 0.17778 / 0.03367 in 25.8 / 28.7 s (7 / 8 solves); resumed with one solve 0.18051 /
0.03366 in 4.3 / 4.6 s, with two (RESUMED_SOLVES) 0.17849 / 0.03335 in 8.3 / 8.6 s, with three 0.17755 (head 0) in
13.2 s; r = 0.002: cold 0.01733 / 0.00832 in 5.7 / 3.7 s, resumed with two solves 0.01730 / 0.00830 in 6.6 / 6.0 s
(the cold solve starts rough). l2 (no facets: the memo, the two shift cuts and the attempt only), 1,024 keys, heads
0-3, both radii: the same gaps, 1.5-3.7 s either way. Why not at fewer tokens: 12 heads at 16 / 64 / 256 keys, both
radii, resumed with one solve: the tight call's median seconds 5.6 / 3.4 / 12.5 -> 3.4 / 2.9 / 6.4, but 4 of the 72
units looser by 0.8-8.7 % (head 0 at 16 keys, r = 0.02: 0.0396 -> 0.0430; head 7 at 256 keys, r = 0.002: 0.0127 ->
0.0136, the paper-like bound); on head 7 the shift cuts weighted by the tight solve's own second moments are what its
cold rounds find (the paper-like cuts with the cold solve's shift cuts: 0.0127) and two more of them take it to 0.0132
only: where a solve costs a fraction of a second the cold rounds are kept.

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
