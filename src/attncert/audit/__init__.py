"""`attncert audit`: every certified number of the certification table, confirmed without trusting a solver.

The checker reads the stored certificates (`certify.certificate_store`), the extracted weights and the
specification vectors, and re-derives each number in ball arithmetic (python-flint) and error-bounded float64:

    head_enclosure   the exact reduction of a unit, enclosed from the weights
    dual_cone        z in K^* (nonnegative orthant, second-order cone, dual exponential cone)
    weak_duality     the weak-duality bound of a stored program and dual, recomputed
    first_order_check  the greedy LP's intervals enclose the exact ranges; the LP value bounds the ratio
    witness_check    a witness lies in the ball (exact_lo's, the best feasible point's)
    exact_upper      F(exact_hi) < 0 from per-token bounds of the inner maxima
    program_link     the stored program is the builder's for the row's unit; the map to g it was built with
    row_audit        every number of one row: pass, fail (which check, by how much) or an empty cell by design
    row_consistency  cross-checks of a row against its audited witnesses and its own status
    table_coverage   the configured grid is complete; the tables without certificates, listed
    audit_table      the audit of a model's tables and the `attncert audit` command
    model_weights    the extracted arrays are the checkpoint's: its files' hashes, its tensors (checkpoint_tensors),
                     an independent numpy forward pass (reference_forward), a fresh tokenization

It imports no solver, no torch and none of the code that solves (an AST test enforces this). docs/audit.md
states what is trusted and the math of every check.
"""
