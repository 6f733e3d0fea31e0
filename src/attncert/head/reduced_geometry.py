"""The reduced geometry of one unit: everything a fixed-query certificate needs, computed once.

With the query at its nominal value, token j enters the head through its score s_j = s0_j + sigma_j and its
value w_j = w0_j + omega_j, with (sigma_j, omega_j) = (u_s . delta_j, u_w . delta_j) in P, the 2-D image of the
ball (`fixed_query`, `projected_ball`). The record holds

    s0, w0, u_s, u_w     the reduction (float64, from the extended-precision chain of `fixed_query`)
    R_s, R_w             half-widths: r ||u_s||_*, r ||u_w||_*, rounded up (>= max |sigma|, |omega| over P)
    eps_s, eps_w         per token, bounds on |float64 - exact| of s0_j + u_s . delta and w0_j + u_w . delta
    nominal              g at the nominal tokens
    image                P itself (`projected_ball`: the zonotope's upper chain or the ellipse), built on first use
    kept_tokens()        the tokens that can carry weight, and a sound bound on the effect of the others
                         (`negligible_tokens`)

Data errors. Chain q = z_i W_Q + b_Q, u_s = W_K q / sqrt(d_h), s0 = Z0 u_s + b_K.q / sqrt(d_h), u_w = W_V c,
w0 = Z0 u_w + b_V.c. A computed dot product of length k errs by at most gamma_k times the same product of
absolute values; every chain is shorter than K = 2d + d_h + 10; moving over the ball adds r gamma_K
||abs-product||_*. Doubled for safety. One error model for the first-order interval, the relaxations and the
trivial bound.

`reduced_geometry(problem)` computes it; the certificates take it as an argument (computed once per unit by their
caller and passed down). Its arrays are read-only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.negligible_tokens import negligible_tokens
from attncert.head.projected_ball import projected_ball
from attncert.head.rounding import UNIT_ROUNDOFF, gamma


@dataclass(frozen=True)
class ReducedGeometry:
    s0: np.ndarray
    w0: np.ndarray
    u_s: np.ndarray
    u_w: np.ndarray
    R_s: float
    R_w: float
    eps_s: np.ndarray
    eps_w: np.ndarray
    radius: float
    norm: str
    nominal: float
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n(self) -> int:
        return self.s0.size

    @property
    def image(self):
        """P, the 2-D image of the ball (built on first use)."""
        if "image" not in self._cache:
            self._cache["image"] = projected_ball(self.u_s, self.u_w, self.radius, self.norm)
        return self._cache["image"]

    def kept_tokens(self) -> tuple[np.ndarray, float]:
        """(keep mask, tail): the tokens whose weight share can exceed e^-NEGLIGIBLE, and a sound bound on the
        effect of the others on max g (`negligible_tokens`), for score half-width R_s (fixed query)."""
        if "kept" not in self._cache:
            lo, top = self.value_range()
            h = np.full(self.n, self.R_s)
            self._cache["kept"] = negligible_tokens(self.s0, h, self.eps_s, top + 4.0 * UNIT_ROUNDOFF * np.abs(top), lo)
        return self._cache["kept"]

    def value_range(self) -> tuple[np.ndarray, np.ndarray]:
        """(W_lo, W_hi): every value w_j over the ball, rounding included."""
        half = self.R_w + self.eps_w
        return self.w0 - half, self.w0 + half

    def score_range(self) -> tuple[np.ndarray, np.ndarray]:
        """(l, u): every score s_j over the ball (fixed query), rounding included."""
        half = self.R_s + self.eps_s
        return self.s0 - half, self.s0 + half


def reduced_geometry(problem, given: ReducedGeometry | None = None) -> ReducedGeometry:
    """The unit's record (see the module docstring).

    given: the record a caller already computed for this unit, returned as it is after a check that it belongs to
    the unit (token count, radius, norm); None computes it.
    """
    if given is not None:
        if given.s0.shape[0] != problem.n or given.radius != float(problem.radius) or given.norm != problem.norm:
            raise ValueError(f"the given reduced geometry is for n={given.s0.shape[0]}, r={given.radius}, "
                             f"{given.norm}, not this unit's n={problem.n}, r={problem.radius}, {problem.norm}: "
                             f"pass reduced_geometry(problem) of this unit")
        return given
    red = fixed_query_reduction(problem)
    s0, w0, u_s, u_w = red.directions()
    d, dh, r = problem.d, problem.d_head, problem.radius
    g = 2.0 * gamma(2 * d + dh + 10)
    sq = math.sqrt(dh)
    absZ = np.abs(problem.Z0)
    eps_s = g * (absZ @ red.us_abs + np.abs(problem.b_K) @ red.q_abs / sq + r * problem.dual_norm(red.us_abs))
    eps_w = g * (absZ @ red.uw_abs + np.abs(problem.b_V) @ np.abs(problem.c) + r * problem.dual_norm(red.uw_abs))
    eps_s.flags.writeable = False
    eps_w.flags.writeable = False
    up = 1.0 + gamma(d + 4)
    return ReducedGeometry(s0, w0, u_s, u_w, r * problem.dual_norm(u_s) * up, r * problem.dual_norm(u_w) * up,
                           eps_s, eps_w, float(r), problem.norm, problem.nominal_value())
