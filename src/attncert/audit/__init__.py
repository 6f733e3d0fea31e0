"""attncert audit: independent checks of the certified numbers, trusting numpy, python-flint (arb ball
arithmetic) and the stored files only. No module of this package imports a solver (torch, cvxpy, clarabel,
scs) or the solving code (attncert.certify, attncert.baselines, attncert.block)."""
