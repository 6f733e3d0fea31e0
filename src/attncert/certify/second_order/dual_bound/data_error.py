"""The data-error model of every stored program, shared by the certifier and the checker.

Each entry of a program's (c, A, b) is the float64 image of the real relaxation's entry with relative error at most
DATA_REL_ERR (a few dozen roundings of derived quantities). The certifier adds the resulting allowance to weak duality
(`weak_duality.weak_duality_bound`); the audit uses this constant, never a value stored in a certificate file. A
constant only: the checker imports it without importing any solving code.
"""

DATA_REL_ERR = 1e-12
