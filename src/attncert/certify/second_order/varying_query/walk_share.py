"""How much of a certified gap more solving could still win: the last round's walk and further cutting rounds.

Stopping rules, never part of a bound.

The last round walks the solver ladder (`long.ATTEMPTS`) while no attempt's certified bound b lies within ACCEPT
x the first-order gap of its primal p. Another attempt can lower b to the relaxation's optimum, which a primal
point that is feasible to the solver's tolerance puts at about p, so b - p is about what the walk can win. The gap
a reader sees is b minus the true maximum, which no feasible value f exceeds:

    walk on  only while  b - p  >  WALK_SHARE (b - f),

so an ended walk leaves about WALK_SHARE of b - f, the gap plus the ascent's shortfall (max g - f). f comes
from a short seeded ascent (`best_feasible_ascent`, ASCENT_RESTARTS x ASCENT_STEPS), run once per unit and only
when a walk or a further round is weighed. A failed or non-finite ascent, or f not below b, gives no estimate: the walk
goes on as without this rule, and so it does where the kept solve did not end optimal or at its progress stop
(`PRIMAL_TRUSTED`): a solve that ends in a numerical error or insufficient progress can leave its primal above the
relaxation's optimum (a GPT-2-sized head at 256 keys, r = 0.002: b - p at 4e-3 of b - f, and the next attempt
lowered b by 0.15 of the gap). The certificate is whichever attempt's weak-duality bound is smallest, as always.

Cutting rounds. `long.ROUNDS` rounds are solved (fewer where no cut is left); a further round, up to MAX_ROUNDS,
only while the round before lowered its primal (the relaxation's optimum with that round's cuts) by more than
ROUND_SHARE of b - f: the rounds' cuts keep coming at r = 0.02 (`round_paid`). A round whose primal is not from
a status in PRIMAL_TRUSTED is taken to have paid (stopping there left 6 of 112 certificates of `bench/context_length`
above 16 keys up to 6.6 % looser).
"""
from __future__ import annotations

import math

from attncert.head.problem import HeadProblem

WALK_SHARE = 1e-2  # GPT-2-sized head 0 at 1,024 keys, r = 0.02, paper-like: the walk that this ends had b - p at
#                    9e-4 of b - f and lowered b by 3e-4 of it in 12 s of the unit's 29 s
PRIMAL_TRUSTED = ("optimal", "optimal_inaccurate", "stalled")  # the kept solve's statuses whose primal is read
ASCENT_RESTARTS, ASCENT_STEPS = 2, 40  # 0.75 s at 1,024 keys and d = 768; within 4.3 % of the movement of a 4 x 60
#                                        ascent (10 s) at r = 0.02 and 0.2 % at 0.002 (GPT-2-sized heads 0, 2)
ROUND_SHARE, MAX_ROUNDS = 1e-2, 8  # GPT-2-sized heads at r = 0.02, paper-like, rounds until no cut was left: 0-5 at 64
#   keys ended after 5-12 rounds at 0.84-0.996 of the 3-round gaps, 0-3 at 256 keys after 5-8 at 0.90-0.97, in 1.2-3x
#   the seconds. With this rule (`bench/context_length`, 12 heads at 64 / 256 keys, 4 at 1,024): median gap 0.1110 /
#   0.1034 / 0.0664 -> 0.1038 / 0.0987 / 0.0646, no unit looser, seconds 3.5 / 3.9 / 16.6 -> 6.0 / 8.9 / 27.0


def feasible_objective(problem: HeadProblem, g0: float, rho_o: float, tail: float) -> float:
    """A feasible value of g in the program's objective units ((g - g0 - tail) / rho_o), -inf where the ascent
    fails or is not finite."""
    from attncert.certify.best_feasible_ascent import best_feasible_ascent  # torch: only where a stop is weighed

    try:
        f = best_feasible_ascent(problem, restarts=ASCENT_RESTARTS, steps=ASCENT_STEPS, seed=0, num_threads=1).value
    except (ValueError, FloatingPointError, OverflowError, RuntimeError):
        return -math.inf
    obj = (f - g0 - tail) / rho_o
    return obj if math.isfinite(obj) else -math.inf


def seen_gap(bound: float, feasible_obj: float | None) -> float | None:
    """bound - feasible_obj (the gap plus the ascent's shortfall) where that is finite and positive; else None: no
    estimate."""
    if feasible_obj is None:
        return None
    seen = bound - feasible_obj
    return seen if math.isfinite(seen) and seen > 0.0 else None


def walk_won(bound: float, primal: float, feasible_obj: float, status: str) -> bool:
    """Has the walk nothing left worth a solve: bound - primal <= WALK_SHARE (bound - feasible_obj), the primal from
    a solve that ended with a status in PRIMAL_TRUSTED? False without an estimate (module docstring)."""
    seen = seen_gap(bound, feasible_obj)
    return (status in PRIMAL_TRUSTED and seen is not None and math.isfinite(primal)
            and bound - primal <= WALK_SHARE * seen)


def round_paid(rounds: list, feasible_obj: float | None) -> bool:
    """Did the last cutting round lower its primal by more than ROUND_SHARE (bound - feasible_obj)? rounds: each
    round's (bound, primal, status of its kept solve), objective units. False with fewer than two rounds or without
    an estimate (None); True where either primal is not from a status in PRIMAL_TRUSTED (no reading of what the
    round won: the rounds go on, as the walk does)."""
    if len(rounds) < 2:
        return False
    (_, before, status_before), (bound, primal, status) = rounds[-2], rounds[-1]
    seen, won = seen_gap(bound, feasible_obj), before - primal
    if seen is None:
        return False
    if status_before not in PRIMAL_TRUSTED or status not in PRIMAL_TRUSTED:
        return True
    return math.isfinite(won) and won > ROUND_SHARE * seen
