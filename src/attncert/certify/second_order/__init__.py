"""Second-order certificate: the exponential-cone moment relaxation of one head and its weak-duality certification.

Read top to bottom: the relaxation's rows, the certified bound from a dual, one program per query kind (each with
its small-n and long-context solve), the dispatch.

    relaxation/           the relaxation's rows (docs/certificate.md)
        rows              variables, weight rows (C1)-(C5), objective, ellipse of P (l2), the fallback rule
        facets            the zonotope facets of P (linf)
        cutting_planes    the loop that chooses the facets: solve, certify, add the violated facets, repeat
    dual_bound/           the certified bound from a dual (valid whatever the solver returns)
        weak_duality      dual repair into K^*, weak duality over a box with outward rounding, dual polishing
        solve_ladder      a cvxpy program solved by a ladder of solver attempts, each attempt certified
        compiled          cvxpy's compiled conic data refilled per solve (the canonical program; no solver)
        dual_record       the kept certificate of the reported number (what a checker needs to re-derive it)
    fixed_query/          the fixed query
        program           the cvxpy program's builder (no solver: the audit rebuilds programs with it)
        monolithic        its solve, up to SEPARABLE_ABOVE attended keys
        token_program     the same relaxation as conic data assembled per token (builder, no solver)
        token_solve       the token program's Clarabel solve, polished and refined duals, cutting-plane rounds
        support_bound     the certified bound from any dual through the exact support function of P
        token_family      duals for many keys from a one-parameter family of token programs
        separable         the long-context solve (cost linear in the keys): token program, family, support bound
    varying_query/        the varying query (every token, the query included, perturbed)
        data              the reduced data of a unit (`VaryingData`) every varying program is built from
        box_scaling       the box's diagonal scaling (the dual of the max-cut SDP) behind the query budgets
        shift_moment      the moment cut of the query's shift and its bound
        program           the factored program's builder (a_j = tau e^{eta_j} e^{sigma_j + beta_j})
        unfactored_program, unfactored
                          the unfactored program (the factored one's fallback where its cones degenerate)
        factored          the factored program's solve (up to VARYING_LONG_ABOVE tokens; beside `long` up to 64)
        long_program      the factored relaxation linked through the d_h-dimensional query shift (builder)
        shift_cuts        which moment cuts of the query's shift a long program carries
        progress_stall, walk_share
                          when a solve, a ladder walk or the cutting rounds stop (stopping rules only)
        long              its solve above VARYING_LONG_ABOVE tokens (cost linear in n, no cvxpy)
    attained              a first-order fallback that a feasible point attains is relabelled (same value)
    certificate           `second_order_certificate`: dispatch on query mode, number of tokens and sense

Imports point down this list. Import from the modules (`certificate.second_order_certificate`,
`relaxation.rows.SecondOrderResult`): the packages import nothing, so that a builder module can be used without
the solvers.
"""
