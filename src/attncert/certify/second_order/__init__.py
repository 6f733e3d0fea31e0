"""Second-order certificate: the exponential-cone moment relaxation and its weak-duality certification.

    relaxation        variables, constraints, objective shared by both query modes; fallback rule
    facets            zonotope facets (linf); cutting_planes: the loop that chooses them
    fixed_program     the fixed-query program's builder (no solver: `attncert.audit` rebuilds programs with it)
    fixed, varying    the relaxation for a fixed / a varying query
    varying_factored  the varying query with factored weights a_j = tau e^{eta_j} e^{sigma_j + beta_j} (default)
    varying_long      the same relaxation above 16 tokens, the query linked through d_h, no cvxpy (linear in n);
                      varying_long_program: its builder (no solver: the audit rebuilds it)
    dual_certificate  weak duality with a box, dual repair and outward rounding
    compiled          cvxpy's compiled data refilled per solve (the canonical program; no solver)
    certificate       `second_order_certificate`: dispatch on mode and sense

Import from the modules (`certificate.second_order_certificate`, `relaxation.SecondOrderResult`): the package
itself imports nothing, so that a builder module (`fixed_program`, `compiled`) can be used without the solvers.
"""
