"""Second-order certificate, varying query, at a cost linear in the number of keys (`long_program`).

The relaxation is the factored one of `factored` with the query's shift read through the d_h-dimensional
delta_i W_Q; its conic data are assembled per row family (no cvxpy) and solved by Clarabel, whose KKT matrix is a
block per key plus the dense d_h + d columns of the query side: each interior-point iteration costs
O(n (rows per key) + n d_h^2 + d d_h), linear in n.

Certification as everywhere: every solve's dual is repaired into K^* and bounded by weak duality over a box that
holds every lifted true point (`weak_duality.weak_duality_bound`, outward rounded), whatever the solver
returns, and again with its free duals line-searched (`free_dual_bound`); the smallest bound is kept and offered
to the caller's dual record with the builder's inputs (`note_construction`: the key-centered `VaryingData` fields,
the build key and the facet edges), so that `attncert.audit` rebuilds the program and confirms the bound without a
solver.

Token scaling. The program's variables of key j are normalized by its weight (e^{A_j} factored out), so a key of
weight 1e-8 has objective and normalization coefficients of that size, yet the interior-point solver's absolute
tolerances apply to its dual entries as to the heaviest key's: with a thousand keys their dual residuals, paid at the
box's width by weak duality, summed to most of the gap (a GPT-2-sized unit with 1,024 keys: 0.16 of a 0.25 movement).
The solver therefore sees every key's columns multiplied by 2^round((A_max - A_j) / ln 2) (`token_scales`), a change
of variables that keeps the row duals and the primal objective, and its x is scaled back. The certified number is
weak duality on the unscaled program, which for a given dual is bit for bit the scaled program's (a power of two
scales every product exactly), so the stored certificate and the audit's rebuild do not depend on it.

Attempts (`ATTEMPTS`: solver settings and tau_exp of `build_long_program`) run in order until one's certified bound
lies within ACCEPT x the first-order gap of its primal, whatever the solver's status (its dual is then as good as a
converged one); the smallest bound of all is kept. The first-order gap is the scale of what is certified: a
second-order gap at r = 1e-4 is ~3e-4 of it, so a tolerance relative to |primal| (of the order of the whole
movement) let the solver's slack exceed the gap itself (GPT-2-sized heads, l2, r = 1e-4, 32 and 64 keys: 3-8x the
cvxpy program's gap, almost all of it bound - primal). A round with cuts still to add needs only a point to cut
at: it ends at an attempt within ROUGH of its primal (above ROUGH_ABOVE tokens the first round starts with a rough
solve, `ROUGH_FIRST`). The last round's walk also ends at an attempt that does not lower a bound within WALK_STOP,
or once another attempt could win at most `walk_share.WALK_SHARE` of the bound's distance to a feasible value.
Later rounds (cutting planes) use the attempt with the smallest bound. Every solve ends where its progress stalls
(`progress_stall.ProgressStall`) if the solver does not stop first.

Two moment cuts of the query's shift (`shift_cuts`: every key weighted 1, and weighted by its softmax weight) are
in every program; a linf round that adds facets also adds one weighted by the solved second moments when the solved
point violates it (it never causes a solve of its own).

The keys' support cuts (linf, `key_support_cut`): each key's Lagrangian term bounded by its exact maximum over its
own set at a multiplier t of the normalization. The first solve has them at `key_support_cut.start_support`;
every later round adds one at the solved normalization multiplier while that cut removes more than CUT_STOP of the
first-order gap from the solved point (GPT-2-sized heads, 12 per n, paper-like, median relative gap at r = 0.002 /
0.02 without and with the cuts, measured with the rounds' earlier stop at 1 % of the primal: 0.025 / 0.19 -> 0.018 /
0.13 at 64 keys, 0.026 / 0.20 -> 0.019 / 0.11 at 256, 0.026 / 0.20 -> 0.018 / 0.13
at 1,024; up to two more solves: 10.6 -> 19.9 s per unit at 1,024 keys).

linf: each token starts with the half-planes of `token_solve.edge_window` around the vertex that the boundary
Dinkelbach estimate picks (consecutive edges and a sigma grid); after a solve, the edge under every atom
U_j / lam_j, V_j / (base_j - lam_j) that lies above its chain is added (MAX_EDGES edges per token), until the
violated atoms weigh at most CUT_STOP of the first-order gap: ROUNDS rounds, and more (up to
`walk_share.MAX_ROUNDS`) while the last one lowered its primal by more than `walk_share.ROUND_SHARE` of the
bound's distance to a feasible value.

Above RESUME_ABOVE tokens a solve given where a solve of the same unit ended (`long_start`: the tight variant after
the paper-like one) starts from that solve's cuts, memo and winning attempt, adds no facets, and re-solves with a
shift cut at its own point up to RESUMED_SOLVES solves.
"""
from __future__ import annotations

import functools
import math
import time
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.relaxation.cutting_planes import vertex_dinkelbach
from attncert.certify.second_order.relaxation.key_support_cut import start_support, support_excess, support_row
from attncert.certify.second_order.dual_bound.data_error import DATA_REL_ERR
from attncert.certify.second_order.dual_bound.free_dual_shift import smaller_bound
from attncert.certify.second_order.dual_bound.dual_record import note_construction, offer_dual
from attncert.certify.second_order.relaxation.rows import (
    MONOTONE_POINTS,
    SecondOrderResult,
    settle,
)
from attncert.certify.second_order.fixed_query.token_solve import LADDER, edge_window, solve_once
from attncert.certify.second_order.varying_query.progress_stall import ProgressStall, gap_scale, rough_stall
from attncert.certify.second_order.varying_query.unfactored import _to_g, prepared_varying
from attncert.certify.second_order.varying_query.walk_share import (MAX_ROUNDS, feasible_objective, round_paid,
                                                                     walk_won)
from attncert.certify.second_order.varying_query.data import VaryingData
from attncert.certify.second_order.varying_query.long_start import LongStart, unit_fingerprint
from attncert.certify.second_order.varying_query.long_program import (KEYS_BLOCKS, TOKEN_BLOCKS, build_long_program,
                                                                    long_chains)
from attncert.certify.second_order.varying_query.shift_cuts import all_keys_shift_cut, weighted_shift_cut
from attncert.head.problem import HeadProblem
from attncert.head.reduced_geometry import ReducedGeometry

# Clarabel at 1e-7: on a GPT-2-sized unit with 1,024 keys the 1e-8 rungs stalled at "almost solved" after ~190
# iterations (4.3 s), 1e-7 converged in 59 (1.5 s); the certified bounds differ by 3e-7 of the objective (the
# bound is weak duality over the box whatever the accuracy).
# min_switch_step_length 0.01 (Clarabel's default 0.1): on GPT-2-sized units with 256 and 1,024 keys at r = 0.02 every
# rung stopped at "insufficient progress" within a second (the step length fell below 0.1 and the switch to the
# dual scaling stalled); with 0.01 the same rungs reached bounds within 1e-6 of their primal.
# Iterative refinement stays on: without it an iteration costs half (1,024 keys: 3.9 -> 2.1 s for 60) and the
# GPT-2-sized units' bounds moved by <= 0.3 % of their gaps, but on random heads at r <= 5e-3 bounds came out up to
# 246x looser (7 of 90 units looser by > 1 %), with nothing in the solve's own report to tell them apart.
LONG_LADDER = tuple(dict(o, tol_gap_abs=1e-7, tol_gap_rel=1e-7, tol_feas=1e-7, min_switch_step_length=0.01)
                    for o in LADDER)
# (Clarabel settings, tau_exp of `build_long_program`) in order until one converges. On a GPT-2-sized head with
# 1,024 keys at r = 0.02 (tight variant) every rung at tau_exp 0 stopped at "insufficient progress" after 10 steps;
# at tau_exp 5 the same rung solved in 54 iterations (2.3 s), the certified bound the same to 1e-4.
ATTEMPTS = ((0, 0), (0, 5), (1, 0), (2, -5))
# Above BESIDE_MAX tokens: tau_exp 5 first. l2, GPT-2-sized heads, 256 and 1,024 keys, r = 0.002 and 0.02: its bound
# lay within 1e-6 of its primal (relative) on all 8 units, tau_exp 0's at 4e-5-3e-4. linf, the default run's
# long-context units (MiniLM, 128 / 256 / 512 keys, 4 heads, 2 radii, both variants): 10.6 / 22.6 / 75.9 s against
# 8.4 / 18.9 / 49.8 s, bounds within 1.1e-6 either way (GPT-2-sized heads 0 and 1 at 256 and 1,024 keys, 16
# certificates, run side by side: 266 s against 256 s, bounds within 6e-7). Not at fewer keys: on 32 and 64 keys
# (l2, r = 1e-4) its solves stop with bound and primal together far above the optimum.
# tau_exp 10 last: GPT-2-sized heads at 1,024 keys (linf, r = 0.02), where the four attempts before it all end at
# "insufficient progress" without reaching ACCEPT, its single solve certified 0.686 / 0.549 / 0.734 (objective units)
# against tau_exp 5's 0.715 / 0.563 / 0.750 on the three units tried; head 1's tight variant went from a relative gap
# of 1.20 to 0.100 (15-20 s more on such units; never reached on the default run, whose certificates take <= 2 solves).
# Not earlier: its bound and primal can meet above the optimum (tau_exp 12-20 there: 0.687-1.24, "converged")
ATTEMPTS_WIDE = ((0, 5), (0, 0), (1, 0), (2, -5), (0, 10))
NEAR, GRID_WIDE, GRID_WIDE_UP_TO = 12, 25, 128  # up to 128 tokens: NEAR consecutive edges on each side of a token's
#   estimated vertex and a sigma grid of GRID_WIDE edges (linf). On a GPT-2-sized unit with 64 keys (tight, r = 0.02)
#   the 25-point grid gives a gap of 0.0097 against 0.0119 with 9 points in the same time (the cvxpy program: 0.0102)
NEAR_LONG, GRID_LONG = 4, 5  # above 128 tokens: the cutting-plane rounds find the edges that bind. GPT-2-sized heads,
#   paper-like, against 12 and 9: 256 keys (heads 0-5, r = 0.002 and 0.02) 42.9 -> 36.1 s for the twelve, gaps within
#   0.3 %; 1,024 keys (heads 0-3) r = 0.002 9.2-10.4 -> 6.2-7.8 s, gaps equal to 5 digits; r = 0.02 gaps 0.1807 /
#   0.0383 / 0.0493 / 0.0838 -> 0.1804 / 0.0383 / 0.0489 / 0.0838 (seconds there follow the ladder's path)
ROUNDS = 3  # solves with cutting planes (linf). The last round walks the ladder while no attempt reaches ACCEPT:
#             ending it also at the first attempt below every earlier round's bound halved the seconds at r = 0.02
#             (GPT-2-sized heads, linf, both variants: 256 keys heads 0-5 197 -> 98 s, 1,024 keys heads 0-2 597 ->
#             341 s) for bounds up to 5.9 % looser (head 4 at 256 keys; 1,024 keys head 2: 3.4-3.7 %; medians
#             0.1052 -> 0.1052 and 0.0480 -> 0.0498): not done, the later attempts are where those units' bounds come
#             from. Keeping only the first attempt in later rounds: about the same seconds, up to 6.4 % looser.
#             More rounds while they pay: `walk_share.round_paid`
MAX_EDGES = 40  # half-planes per token at most
CUT_STOP = 1e-4  # stop once the atoms above their chains, and the support cut at the solved multiplier, remove <=
#                  this x the first-order gap (`gap_scale`) from the solved point. The second-order gap is ~1-3 % of
#                  the first-order gap at r = 0.002 and ~10 % at 0.02, so the stop is that small: GPT-2-sized heads,
#                  linf, relative gap paper-like at 1e-2 / 1e-4 of it, r = 0.002: 64 keys (heads 0, 5, 6, 9, 10)
#                  0.0104 / 0.0103, 0.0193 / 0.0189, 0.0352 / 0.0340, 0.0101 / 0.0092, 0.0091 / 0.0085 (the cvxpy
#                  program: 0.0104, 0.0192, 0.0346, 0.0099, 0.0085), 256 keys (heads 0-3) 0.0074 / 0.0068, 0.0227 /
#                  0.0193, 0.0156 / 0.0145, 0.0266 / 0.0254 (2-3x the seconds); r = 0.02, 256 keys 0.134 / 0.132,
#                  0.090 / 0.090, 0.166 / 0.161, 0.071 / 0.071. Against the primal (~0.99 in objective units, where
#                  the first-order bound is at most 1) almost no unit got a second solve
BESIDE_MAX = 64  # tokens at most for the cvxpy programs solved beside this one (`_beside_factored`), compiled
#                  without cvxpy's parameter tensor above `program.ONE_SHOT_ABOVE` tokens (with it their first solve in
#                  a process took 14-23 s and 1.2-3.3 GB at 32-64 keys)
ROUGH = 1e-3  # a round that is not the last ends at the first attempt within ROUGH x the first-order gap of its
#               primal whose point has cuts to add (`round_cuts`): its bound is superseded by the next round's, which
#               needs only where to cut. The last round walks the ladder to ACCEPT. GPT-2-sized heads 0-3, 1,024 keys,
#               r = 0.02, paper-like: 45.1 / 19.8 / 40.4 / 39.5 -> 25.7 / 19.7 / 24.0 / 24.7 s, gaps 0.1804 / 0.0383 /
#               0.0489 / 0.0838 -> 0.1808 / 0.0383 / 0.0485 / 0.0838 (r = 0.002 and 256 keys: no round had walked)
ROUGH_FIRST = 5e-2  # the first round's first attempt is solved to the rough stop (`progress_stall.rough_stall`) and
#                     ends the round at ROUGH_FIRST instead of ROUGH; a rough solve that its stop ended is solved out
#                     (the same attempt with the full stop) before the ladder walks on, and a rough point with nothing
#                     to cut has its round solved again as the last. GPT-2-sized heads 0-3, 1,024 keys, paper-like:
#                     r = 0.002 8.1 / 7.0 / ~7 / ~7 -> 5.4 / 3.9 / 4.4 / 4.1 s (with the stop's window 5), gaps equal
#                     to 3 digits; r = 0.02 (rough first points at 3.5e-3-1.7e-2) 28.6 / 21.7 / 26.4 / 27.8 -> 25.4 /
#                     21.3 / 26.9 / 14.0 s (with WALK_STOP), gaps 0.1808 / 0.0383 / 0.0489 / 0.0838 -> 0.1820 /
#                     0.0383 / 0.0491 / 0.0838. `bench/context_length` (12 heads at 256 keys, 4 at 1,024; side by
#                     side; with WALK_STOP, the stop's window 5 and the builds' memo): 1,024 keys, median seconds
#                     paper-like r = 0.002 9.1 -> 4.8, r = 0.02 28.4 -> 26.6 (tight 16.2 -> 10.3, 66.2 -> 49.7), gaps
#                     unit by unit after / before 0.995-1.011; 256 keys 2.8 -> 2.0 s but gaps 0.949-1.121 (the rough
#                     point's cuts differ and the rounds stop elsewhere): so only
ROUGH_ABOVE = 512  # ... above this many tokens, where a solve costs seconds
ACCEPT = 2e-5  # the ladder ends at the first attempt whose bound - primal <= ACCEPT x the first-order gap (`converged`)
WALK_STOP = 1e-4  # ... or at an attempt after the round's first that did not lower the round's bound once that bound
#                   is within WALK_STOP of its primal. GPT-2-sized heads at 1,024 keys, r = 0.02: head 3's last round
#                   walked 4 attempts at 2.03e-5 (ACCEPT 2e-5), none lowering the bound (13.8 s)
MAX_SCALE_EXP = 60  # token scaling: 2^60 at most (keys below e^-60 of the top are dropped beforehand)
RESUME_ABOVE = 256  # a start from the same unit's paper-like solve is taken above this many tokens (`long_start`)
RESUMED_SOLVES = 2  # ... and a resumed solve re-solves with a shift cut at its own point up to this many solves
VIOLATION = 1e-9  # an atom this far above its chain (unit value coordinate) gets a cut


def second_order_varying_long(
    problem: HeadProblem,
    geo: ReducedGeometry,
    upper_cone: bool = False,
    monotone_points: int = MONOTONE_POINTS,
    second: bool = True,
    ladder=LONG_LADDER,
    start: LongStart | None = None,
) -> SecondOrderResult:
    """Sound upper bound on max g for a varying query (module docstring). start: where a solve of the same unit
    ended (`long_start`, the result's `resume`), its cuts and memo taken instead of the first round's."""
    if problem.mode != "varying":
        raise ValueError("second_order_varying_long expects mode='varying'")
    t0 = time.perf_counter()
    fo, D, why = prepared_varying(problem, geo, "key", "varying_long")
    if not why and D.n < 2:
        why = "a single token"
    if why:  # the cvxpy programs may still certify it (a key dropped below e^-60 leaves a single token)
        return _beside_factored(problem, geo, settle(math.inf, fo, t0, "varying", no_solve_reason=why), upper_cone,
                                monotone_points, t0)
    edges = start_edges(D) if problem.norm == "linf" else None
    shift_cuts = all_keys_shift_cut(D, problem.W_Q) if second else []
    memo = {}  # the builds' budgets, shift cuts' Lambda' and support rows (`build_long_program`)
    best, best_status, primal, gap, log, rounds = math.inf, "not_run", math.nan, math.nan, [], 0
    # a feasible value (objective units: run once, only where a stop is weighed); each round's (bound, primal, status)
    feasible, round_points = functools.cache(lambda: feasible_objective(problem, D.g0, D.rho_o, D.tail)), []
    order = ATTEMPTS_WIDE if D.n > BESIDE_MAX else ATTEMPTS
    attempts = [(ladder[r], e) for r, e in order if r < len(ladder)]
    fo_obj = (fo - D.g0 - D.tail) / D.rho_o  # the first-order bound in the program's objective units
    support_ts = start_support(fo_obj) if edges is not None else []
    resumed = start is not None and D.n > RESUME_ABOVE and start.fits(D, problem.W_Q, second)
    if resumed:
        edges, support_ts, shift_cuts, memo = start.edges, list(start.support_ts), list(start.shift_cuts), start.memo
        attempts = [a for a in attempts if a == start.attempt] + [a for a in attempts if a != start.attempt]
    last_round = edges is None or resumed  # a resumed solve: no new facets (`long_start`)
    while True:
        rounds += 1
        if not last_round and rounds >= ROUNDS:  # further rounds while the last one paid (`walk_share.round_paid`)
            last_round = rounds >= MAX_ROUNDS or not round_paid(round_points,
                                                                feasible() if len(round_points) > 1 else None)
        kept, nxt, kept_rough, kept_status = None, None, False, ""  # kept: (bound, attempt, program, x, primal,
        #   normalization multiplier), the round's smallest bound with a primal point (from a rough solve? its status);
        #   nxt: (kept, its cuts)
        tries = [(a, False) for a in attempts]
        if not last_round and rounds == 1 and D.n > ROUGH_ABOVE:  # the first attempt rough (`ROUGH_FIRST`)
            tries.insert(0, (attempts[0], True))
        walked, solved_out = 0, None
        for i, ((opts, tau_exp), rough) in enumerate(tries):
            if (opts, tau_exp) == solved_out:
                continue  # its rough solve ended on its own: that was this attempt solved out
            prog = build_long_program(D, problem.W_Q, upper_cone, monotone_points, second, edges, tau_exp, shift_cuts,
                                      support_ts, memo)
            key = (D.n, D.d, problem.norm, bool(upper_cone), int(monotone_points), bool(second), int(tau_exp))
            note_construction(key=key, edges=None if edges is None else [np.array(e) for e in edges],
                              shift_cuts=[(w.copy(), F.copy()) for w, F in shift_cuts],
                              support_ts=np.array(support_ts, dtype=np.float64))
            stop = rough_stall(fo_obj) if rough else ProgressStall(fo_obj)
            status, p_obj, x, z, solve_log = solve_scaled(prog, opts, D, stop)
            if rough and not stop.fired:
                rough, solved_out = False, (opts, tau_exp)
            walked += 1
            bound = math.inf
            if z is not None:
                try:
                    bound, zr = free_dual_bound(prog, z)
                    offer_dual(bound, prog.c, prog.A, prog.b, prog.dims, prog.lo, prog.hi, zr, DATA_REL_ERR)
                except (ValueError, FloatingPointError, OverflowError):
                    bound = math.inf
            val = _to_g(bound, D) if math.isfinite(bound) else math.inf
            log += [(s, st, val, sec) for (s, st, sec) in solve_log]
            if val < best:  # every attempt's bound is sound, converged or not
                best, best_status = val, status
                primal = _to_g(p_obj, D) if math.isfinite(p_obj) else math.nan
                gap = best - primal if math.isfinite(primal) else math.nan
            lowered = x is not None and math.isfinite(bound) and (kept is None or bound < kept[0])
            if lowered:
                kept, kept_rough, kept_status = (bound, (opts, tau_exp), prog, x, p_obj, float(z[0])), rough, status
            if kept is None:
                continue
            if converged(kept[0], kept[4], fo_obj, ACCEPT) or (walked > 1 and not lowered and converged(
                    kept[0], kept[4], fo_obj, WALK_STOP)):
                break
            if last_round and i + 1 < len(tries):  # another attempt could win at most bound - primal (`walk_share`)
                if walk_won(kept[0], kept[4], feasible(), kept_status):
                    break
            if not last_round and converged(kept[0], kept[4], fo_obj, ROUGH_FIRST if kept_rough else ROUGH):
                if nxt is None or nxt[0] is not kept:  # each kept point's cuts once
                    nxt = (kept, round_cuts(kept, D, edges, fo_obj, memo))
                if nxt[1] is not None:  # a round with cuts to add: its point is good enough to cut at
                    break
        if kept is None:
            break
        _, attempt, prog, x, _, t_dual = kept
        round_points.append((kept[0], kept[4], kept_status))
        attempts = [attempt] + [a for a in attempts if a != attempt]  # later rounds: that attempt first, once
        if edges is None:
            break
        found = nxt[1] if nxt is not None and nxt[0] is kept else round_cuts(kept, D, edges, fo_obj, memo)
        if found is None and kept_rough and not last_round:
            last_round, rounds = True, rounds - 1  # nothing to cut at the rough point: this round again, solved out
            continue
        if resumed and edges is not None and second and rounds < RESUMED_SOLVES:  # linf: shift cuts at its point
            cut = weighted_shift_cut(prog, x, D, problem.W_Q, memo)
            if cut is None:
                break
            shift_cuts = shift_cuts + [cut]
            continue
        if found is None or last_round:
            break
        new, support = found
        edges = [np.union1d(e, a)[:MAX_EDGES] if a.size else e for e, a in zip(edges, new)]
        support_ts = support_ts + [t_dual] if support else support_ts
        if second:  # a weighted cut rides along with the facets
            cut = weighted_shift_cut(prog, x, D, problem.W_Q, memo)
            shift_cuts = shift_cuts + ([cut] if cut is not None else [])
    n_facets = int(max((e.size for e in edges), default=0)) if edges is not None else 0
    res = settle(best, fo, t0, "varying", status=best_status, solver="CLARABEL" if math.isfinite(best) else "none",
                 primal=primal, rounds=rounds, n_facets=n_facets, log=log, dual_gap=gap)
    res.resume = LongStart(unit_fingerprint(D, problem.W_Q, second), edges, support_ts, shift_cuts, memo, attempts[0])
    return _beside_factored(problem, geo, res, upper_cone, monotone_points, t0)


def round_cuts(kept, D: VaryingData, edges: list, fo_obj: float, memo: dict | None = None):
    """What a round's solved point asks of the next round: (new half-planes per token, add the support cut at its
    normalization multiplier?), or None when the atoms above their chains and that support cut remove at most
    CUT_STOP x the first-order gap (`gap_scale`) from it. memo: `build_long_program`'s."""
    _, _, prog, x, p_obj, t_dual = kept
    new, excess = cuts(prog, x, D, edges)
    stop = CUT_STOP * gap_scale(fo_obj, p_obj)
    support = math.isfinite(t_dual) and keys_support_excess(prog, x, D, t_dual, memo) > stop
    if (excess <= stop or not any(e.size for e in new)) and not support:
        return None
    return new, support


def keys_support_excess(prog, x: np.ndarray, D: VaryingData, t: float, memo: dict | None = None) -> float:
    """How much the keys' support cut at t would remove from the solved point (`key_support_cut.support_excess`).
    memo: `build_long_program`'s (the row is kept there for the next build)."""
    m = D.n - 1
    if m < 1:
        return 0.0
    k = prog.coef
    row = support_row(D, k["hk"], k["kappa"], k["Ehat"], k["wt"], long_chains(D)[0], t, {} if memo is None else memo)
    return support_excess(row, k["El"][:m], prog.block(x, "bt"), prog.block(x, "lam")[:m],
                          prog.block(x, "Vw")[:m], prog.block(x, "Uw")[:m])


def free_dual_bound(prog, z: np.ndarray) -> tuple[float, np.ndarray]:
    """(bound, repaired z): the smaller weak-duality bound of the solver's z and of z with its free duals
    line-searched (`free_dual_shift.smaller_bound`): the definitions of the shift cuts' slacks first (their box is
    the widest), then every other zero row. A 256-key MiniLM unit (linf, r = 0.02, tight): bound - primal
    4.0e-6 -> 1.2e-7 of the first-order gap at Clarabel's exit, and 2.4e-4 -> 7.3e-6 after 90 iterations."""
    zero = prog.dims.zero
    sc = prog.A[:zero, prog.offsets["SC"]:]
    first = np.unique(sc.tocoo().row) if sc.shape[1] else np.zeros(0, dtype=np.int64)
    rows = np.concatenate([first, np.setdiff1d(np.arange(zero), first)])
    return smaller_bound(prog.c, prog.A, prog.b, prog.dims, z, prog.lo, prog.hi, rows)


def converged(bound: float, p_obj: float, fo_obj: float, tol: float) -> bool:
    """Is a solve's certified bound within tol x (first-order bound - primal) of its primal (module docstring)?
    The first-order gap is the scale of what the certificate measures; |primal| where it is not positive."""
    if not (math.isfinite(bound) and math.isfinite(p_obj)):
        return False
    return bound - p_obj <= tol * gap_scale(fo_obj, p_obj)


def token_scales(prog, D: VaryingData) -> np.ndarray:
    """Per column the power of two the solver's variables are divided by (module docstring): key j's columns by
    2^round((A_max - A_j) / ln 2), the query token's and the shared columns (tau, W, Y) by 1."""
    m = D.n - 1
    f = np.ones(prog.c.size)
    if m < 1:
        return f
    e = np.clip(np.round((np.max(D.A[:m]) - D.A[:m]) / math.log(2.0)), 0, MAX_SCALE_EXP)
    scale = np.exp2(e)
    for name in KEYS_BLOCKS:
        f[prog.offsets[name]:prog.offsets[name] + m] = scale
    for name in TOKEN_BLOCKS:
        f[prog.offsets[name]:prog.offsets[name] + m] = scale
    return f


def solve_scaled(prog, opts: dict, D: VaryingData, stop=None):
    """One Clarabel solve of `prog` in the token-scaled variables. Returns (status, primal objective, x, z, log),
    x in the program's own variables and z (row duals, unchanged by a column scaling) whatever the status, so
    that every attempt's dual is bounded; x is None only when the solver returned nothing. stop: Clarabel's
    termination callback (`ProgressStall`)."""
    f = token_scales(prog, D)
    scaled = SimpleNamespace(c=prog.c * f, A=(prog.A @ sp.diags(f)).tocsc(), b=prog.b, dims=prog.dims)
    status, _, raw, entry = solve_once(scaled, opts, stop)
    if raw is None or raw.x is None or raw.z is None or len(raw.x) != prog.c.size:
        return status, math.nan, None, None, [entry]
    x = np.asarray(raw.x, dtype=np.float64) * f
    return status, -float(raw.obj_val), x, np.asarray(raw.z, dtype=np.float64), [entry]


def _beside_factored(problem: HeadProblem, geo: ReducedGeometry, res: SecondOrderResult, upper_cone: bool,
                     monotone_points: int, t0: float) -> SecondOrderResult:
    """On at most BESIDE_MAX tokens the cvxpy programs of `factored` (which try the unfactored program in turn) are
    solved as well and the smaller of the two certified bounds is returned, its status saying which: so that taking
    this path above VARYING_LONG_ABOVE tokens never costs tightness against the cvxpy program. Where this program
    falls back or ends far from its optimum (tiny or wide score widths) they are the rescue; elsewhere either can be
    the smaller (the two center the query differently and cut the polygons at different edges: GPT-2-sized heads,
    32 and 64 keys, both norms, r = 1e-4 / 0.002 / 0.02, 144 pairs of units and variants: this program alone looser
    by more than 0.1 % of the cvxpy program's gap on 5, by at most 2.1 %, all linf; with them looser on none,
    `bench/varying_path_choice.py`). Costs their solves: a 64-key unit 2.0 -> 3.0 s paper-like, 4.0 -> 5.8 s tight
    (12 such heads, linf, a fresh process per unit; `bench/results/context_length-varying-64-12heads-linf-*`)."""
    if problem.n > BESIDE_MAX:
        return res
    from attncert.certify.second_order.varying_query.factored import second_order_varying_factored

    other = second_order_varying_factored(problem, geo, monotone_points=monotone_points, upper_cone=upper_cone)
    other.seconds = time.perf_counter() - t0
    if other.value < res.value or (other.value == res.value and not other.fallback):
        other.status = f"{other.status} (the cvxpy program, below the long-context program: {res.status})"
        return other
    res.seconds = other.seconds
    return res


def start_edges(D: VaryingData) -> list:
    """Per token the indices of its first half-planes (`long_program.chain_rows`): the sigma bounds, NEAR
    consecutive edges on each side of the vertex of its boundary Dinkelbach estimate and a sigma grid of GRID_WIDE
    points (at most GRID_WIDE_UP_TO tokens), else NEAR_LONG edges and GRID_LONG points."""
    keys, query = long_chains(D)
    m = D.n - 1
    sig = np.vstack([np.broadcast_to(keys.chain.sigma, (m, keys.chain.sigma.size)), query.chain.sigma[None]])
    om = np.vstack([np.broadcast_to(keys.chain.omega, (m, keys.chain.omega.size)), query.chain.omega[None]])
    _, kv = vertex_dinkelbach(D.A, D.w0, D.g0, sig, om)
    near, grid = (NEAR, GRID_WIDE) if D.n <= GRID_WIDE_UP_TO else (NEAR_LONG, GRID_LONG)
    rows = np.vstack([edge_window(kv[:m], keys.chain, near, grid), edge_window(kv[m:], query.chain, near, grid)])
    return [np.unique(r) for r in rows]


def cuts(prog, x: np.ndarray, D: VaryingData, edges: list) -> tuple[list, float]:
    """Per token the half-planes under its atoms that lie above its chain, and the atoms' weighted height above it
    (objective units): what more cuts can still remove."""
    keys, query = long_chains(D)
    m = D.n - 1
    base = np.concatenate([prog.block(x, "bt"), prog.block(x, "tau")])
    lam = prog.block(x, "lam")
    new = [np.zeros(0, dtype=np.int64) for _ in range(D.n)]
    total = 0.0
    for mass, s_blk, w_blk, weight in ((lam, "Us", "Uw", prog.coef["Uw"]), (base - lam, "Vs", "Vw", prog.coef["Vw"])):
        ok = mass > 1e-12 * max(float(np.max(np.abs(base))), 1e-300)
        safe = np.where(ok, mass, 1.0)
        for chain, sel in ((keys, np.arange(m)), (query, np.array([m]))):
            sig = np.clip(prog.block(x, s_blk)[sel] / safe[sel] * D.scales[sel, 0], -chain.R_s, chain.R_s)
            om = prog.block(x, w_blk)[sel] / safe[sel]
            height = om - chain.omega_max(sig) / D.rho_w
            above = ok[sel] & (height > VIOLATION)
            e = chain.edge_at(sig) + 2
            for j, ej in zip(sel[above], e[above]):
                if ej not in edges[j] and edges[j].size < MAX_EDGES:
                    new[j] = np.union1d(new[j], [ej])
            total += float(np.sum(np.where(above, np.abs(weight[sel]) * mass[sel] * height, 0.0)))
    return new, total
