"""Where an interior-point solve of the long varying-query program stops: its progress, not the solver's status.

The certified bound is weak duality on whatever iterate a solve ends at (`long.free_dual_bound`), so a stop decides
only how tight the bound is, never whether it holds. Clarabel calls `ProgressStall` after every iteration with its
info; the stop fires once, over the last `window` iterations,

    |primal(k) - primal(k - window)| <= tol x gap_scale,     |duality gap(k)| <= tol x gap_scale,
    res_primal(k) > residual x res_primal(k - window),      res_dual(k) > residual x res_dual(k - window),

gap_scale = the first-order bound minus the primal (objective units): the scale of what the certificate measures.
Two stops use it (`long.second_order_varying_long`): the full one (STALL, STALL_WINDOW, STALL_RESIDUAL) for every
solve whose bound may be the certificate, and the rough one (ROUGH_STALL, ROUGH_WINDOW, no residual condition) for
the first solve of a first cutting-plane round, which needs only a point to cut at. Either also ends a solve that
crawls far from its optimum: from iteration CRAWL_AFTER on, once neither residual fell below CRAWL_FALL of its value
CRAWL_WINDOW iterations before while the duality gap is still above CRAWL_GAP x gap_scale (`crawled`).
"""
from __future__ import annotations

import math

STALL, STALL_WINDOW = 1e-7, 5  # the full stop: the primal and the duality gap moved <= STALL x gap_scale over
#   STALL_WINDOW iterations. STALL is the long ladder's own tolerance, so the solver noise floor of a gap
#   (`reporting.noise_floor`) still holds. On these programs the residuals can stall near 1e-5 for the second half
#   of a solve: a GPT-2-sized unit with 1,024 keys (linf, r = 0.002) ran 257 iterations in 14.3 s before "almost
#   solved", its primal moving by less than 1e-7 of the first-order gap per 10 iterations from the 160th.
#   Measured with STALL 2e-7 (window 10): that unit 21.8 -> 16.3 s, its bound 0.1 % of the gap tighter; GPT-2-sized
#   heads 0-3 at 256 keys, r = 0.002 and 0.02: 55.9 -> 42.1 s for the eight, bounds equal but one 0.5 % of its gap
#   looser; random heads (50, 17-300 tokens, r 1e-4-3e-2, both norms and variants): at most 0.3 % of the gap
#   looser. With 2e-6 and no residual condition: up to 10 % looser, and at r = 0.02 solves that stopped short of
#   ACCEPT sent the ladder on to 3-5x as many attempts. Window 5 against 10 (STALL 1e-7): GPT-2-sized heads 0-3,
#   1,024 keys, r = 0.002, paper-like, the last round's solve 100 / 74 / 109 / 69 -> 75 / 67 / 79 / 69 iterations
#   (after a rough first solve), gaps equal to 5 digits.
STALL_RESIDUAL = 0.5  # ... and neither residual fell below this fraction of its value over those iterations
ROUGH_STALL, ROUGH_WINDOW = 1e-4, 5  # the rough stop: primal and duality gap moved <= 1e-4 x gap_scale over 5
#   iterations, whatever the residuals. GPT-2-sized heads 0 and 1, 1,024 keys, r = 0.002: the first solve 119 / 126
#   -> 63 / 29 iterations (heads 2 and 3: 32 each), its bound 8e-6-5e-4 of gap_scale above its primal. With 1e-5:
#   86 / 48 / 59 / 63 iterations and more solves after them (4.0-8.1 s a unit against 3.9-5.4)


CRAWL_AFTER, CRAWL_WINDOW, CRAWL_FALL, CRAWL_GAP = 40, 25, 0.75, 1e-3  # GPT-2-sized head 1 at 1,024 keys, r = 0.02:
#   its first solve crept for 228 iterations (6.4 s; steps of 1e-3-1e-1, the dual residual 2e6 -> 2e5) to a bound of
#   15.3 against the unit's 3.72; the crawl stop ends it at 40. GPT-2-sized heads 0-3, 1,024 keys, r = 0.02,
#   paper-like: 32.6 / 20.5 / 36.5 / 12.4 -> 31.9 / 15.5 / 28.0 / 11.4 s, gaps equal to 3 digits; it did not fire on
#   heads 0-3 at r = 0.002 nor on 12 heads at 256 keys, r = 0.02


def gap_scale(fo_obj: float, p_obj: float) -> float:
    """The scale of what a solve certifies: the first-order bound minus the primal (objective units); |primal| where
    that is not positive."""
    scale = fo_obj - p_obj if math.isfinite(fo_obj) and fo_obj > p_obj else abs(p_obj)
    return max(scale, 1e-300)


class ProgressStall:
    """Clarabel termination callback (module docstring): True once the primal objective (objective units, the program
    maximizes) and the duality gap moved by at most tol x `gap_scale` over the last `window` iterations and neither
    residual fell below `residual` of its value over them (`fired`), or once the solve crawls far from its optimum
    (`crawled`, module docstring). A solve that neither ended stopped on the solver's own criteria, as without it."""

    def __init__(self, fo_obj: float, tol: float = STALL, window: int = STALL_WINDOW,
                 residual: float = STALL_RESIDUAL):
        self.fo_obj, self.tol, self.window, self.residual = fo_obj, tol, window, residual
        self.seen, self.fired, self.crawled = [], False, False

    def __call__(self, info) -> bool:
        p = -float(info.cost_primal)
        self.seen.append((p, float(info.res_primal), float(info.res_dual)))
        if len(self.seen) <= self.window or not math.isfinite(p):
            return False
        p0, rp0, rd0 = self.seen[-1 - self.window]
        _, rp, rd = self.seen[-1]
        tol = self.tol * gap_scale(self.fo_obj, p)
        self.fired = (abs(p - p0) <= tol and abs(float(info.gap_abs)) <= tol and rp > self.residual * rp0
                      and rd > self.residual * rd0)
        if not self.fired and len(self.seen) > max(CRAWL_AFTER, CRAWL_WINDOW):
            _, rpc, rdc = self.seen[-1 - CRAWL_WINDOW]
            self.crawled = (rp > CRAWL_FALL * rpc and rd > CRAWL_FALL * rdc
                            and abs(float(info.gap_abs)) > CRAWL_GAP * gap_scale(self.fo_obj, p))
        return self.fired or self.crawled


def rough_stall(fo_obj: float) -> ProgressStall:
    """The rough stop (ROUGH_STALL over ROUGH_WINDOW iterations, no residual condition)."""
    return ProgressStall(fo_obj, ROUGH_STALL, ROUGH_WINDOW, 0.0)
