"""The certified bound from a dual: weak duality with outward rounding (`weak_duality`), the solve ladder that
produces the duals (`solve_ladder`), cvxpy's compiled data (`compiled`), the kept certificate (`dual_record`).
Map: `attncert.certify.second_order`."""
