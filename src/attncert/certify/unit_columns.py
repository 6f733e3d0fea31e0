"""The columns of the certification tables: a certified unit's row (`run.certify_unit`) and the long-context table.

No computation here, so that the jobs that only read or join these tables (the long-context merge and report)
import neither torch nor the solvers.
"""

COLUMNS = ["layer", "head", "prompt", "query_pos", "radius", "norm", "mode", "n_tokens", "nominal",
           "exact_lo", "exact_hi", "value_spread", "best_feasible", "first_order", "second_order",
           "secant_bound", "t_exact_s", "t_first_s", "t_ascent_s", "t_second_s", "solver", "status", "error",
           "exact_status", "second_order_tight", "t_second_tight_s",  # bracket status, tight variant
           "best_feasible_from", "ascent_check", "t_ascent_check_s"]     # where the best feasible value comes from

#: The long-context table (`long_context.certify_long_context`, its parts and their merge): the context length,
#: then a unit's row.
LONG_CONTEXT_COLUMNS = ["length"] + COLUMNS
