"""Hadamard matrices and the constant-weight codes read off them.

Hadamard matrix. H in {-1,+1}^{n x n} with H H^T = n I. Two constructions:
  * Sylvester: H_1 = [1], H_{2k} = [[H_k, H_k], [H_k, -H_k]]  (n a power of two);
  * Paley I: for a prime q = 3 (mod 4), the Jacobsthal matrix Q_{ij} = chi(j - i) (chi the quadratic
    character mod q, chi(0) = 0) is antisymmetric with Q Q^T = q I - J and Q J = 0, so
    H = I + [[0, 1^T], [-1, Q]] has order n = q + 1 and H H^T = n I.

Normalization. Multiplying rows and columns by -1 keeps H H^T = n I; we make the first row and the
first column all +1. Every other row then has n/2 entries +1 (it is orthogonal to the first row), and
two different rows agree in exactly n/2 positions (they are orthogonal).

Constant-weight code. Row k >= 1 of the normalized H gives the word a_k = 1[H_k = +1] in {0,1}^n.
All n - 1 words have weight w = n/2 and every two of them intersect in exactly n/4 positions (from
agreement n/2 = |a_s n a_t| + |complement n complement| = 2 |a_s n a_t|). Hence for s != t

    |a_t \\ a_s| = n/2 - n/4 = n/4,

which is the overlap gap the witness family uses (n = 24: weight 12, intersections 6, gap 6).
"""
from __future__ import annotations

import numpy as np


def _is_prime(q: int) -> bool:
    return q >= 2 and all(q % p for p in range(2, int(q ** 0.5) + 1))


def sylvester_hadamard(n: int) -> np.ndarray:
    if n < 1 or n & (n - 1):
        raise ValueError(f"Sylvester construction needs a power of two, got n={n}")
    H = np.ones((1, 1), dtype=np.int64)
    while H.shape[0] < n:
        H = np.block([[H, H], [H, -H]])
    return H


def paley_hadamard(n: int) -> np.ndarray:
    q = n - 1
    if not (_is_prime(q) and q % 4 == 3):
        raise ValueError(f"Paley I construction needs n - 1 prime and = 3 mod 4, got n={n}")
    squares = {(x * x) % q for x in range(1, q)}
    chi = np.array([0] + [1 if d in squares else -1 for d in range(1, q)], dtype=np.int64)
    idx = np.arange(q)
    Q = chi[(idx[None, :] - idx[:, None]) % q]
    S = np.zeros((n, n), dtype=np.int64)
    S[0, 1:] = 1
    S[1:, 0] = -1
    S[1:, 1:] = Q
    return np.eye(n, dtype=np.int64) + S


def normalize(H: np.ndarray) -> np.ndarray:
    """Signs flipped so that the first row and the first column are all +1."""
    H = H * H[:, :1]  # first column -> +1
    return H * H[:1, :]  # first row -> +1 (the first column stays +1)


def hadamard(n: int) -> np.ndarray:
    """A normalized Hadamard matrix of order n (Sylvester if n is a power of two, else Paley I)."""
    if n >= 1 and not n & (n - 1):
        H = sylvester_hadamard(n)
    else:
        H = paley_hadamard(n)
    H = normalize(H)
    if not np.array_equal(H @ H.T, n * np.eye(n, dtype=np.int64)):
        raise AssertionError(f"construction of a Hadamard matrix of order {n} failed")
    return H


def constant_weight_code(n: int, size: int) -> np.ndarray:
    """The first `size` words a_1..a_size (rows 1..size of the normalized H) as a (size, n) 0/1 array.

    Weight n/2, pairwise intersections n/4; at most n - 1 words.
    """
    if not 1 <= size <= n - 1:
        raise ValueError(f"a Hadamard code of length {n} has at most {n - 1} words, asked for {size}")
    H = hadamard(n)
    return (H[1:size + 1] > 0).astype(np.int8)
