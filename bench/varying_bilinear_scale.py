"""What the bilinear bound costs the varying query: its certificate with beta(M) scaled, per length (not a test).

    python -m bench.varying_bilinear_scale --npz <run>/data/long_context/all-MiniLM-L6-v2/layer_tokens.npz \
        --units <run>/data/long_context/all-MiniLM-L6-v2/units.csv [--lengths 16 64 256] [--scales 1 0.8 0.6 0]

The varying query's relaxation bounds the bilinear term beta_j = delta_i M delta_j^T / sqrt(d_h) of every key by
[-b, b], b = r^2 beta(M) / sqrt(d_h), beta(M) >= max_{x, y in the unit ball} x M y^T (docs/certificate.md section 5;
linf: min(sum |M_kl|, d ||M||_2, the diagonally scaled bound)). This diagnostic re-certifies the default run's
long-context varying units (the run's token file and its best ascent values as the reference) with beta(M)
multiplied by each `--scales` factor, and prints the median relative gap (certificate - best ascent) /
(best ascent - nominal) of the paper-like and the tight variant per length. A factor below 1 is a WHAT-IF: the
numbers are solver bounds of a relaxation that is not proved sound for the head (0 drops the bilinear term
altogether), never certificates. Per head it also prints the best of 200 alternating sign ascents on max x^T M y
over the box (a lower bound on the true ||M||_{inf->1}, so the factor a certified beta(M) could at best reach)
against the unscaled beta(M), and the diagonally scaled spectral bound

    x^T M y <= ||D_a^(-1/2) M D_b^(-1/2)||_2 sqrt(sum a) sqrt(sum b)    for |x|, |y| <= 1 and any a, b > 0

(a = b = 1 is d ||M||_2; a, b from `certify.diagonal_bilinear_bound.diagonal_scalings`, the certified value
`diagonal_bilinear_bound`). The certified beta(M) (`head_bilinear_bound`) is the smallest of unscaled bounds
(sum of column-norm products, d ||M||_2) and the diagonally scaled one; "unscaled" below is min(sum |M_kl|,
d ||M||_2). The `--scales` factors multiply the
unscaled bound (a what-if against the bound before the scaling); the scale `diagonal` re-certifies with the
certified beta(M) itself. (The first-order fallback inside the second-order certificate uses the certified beta(M)
at every factor.)

Writes varying_bilinear_scale[-quick].md / .json (bench/common.py). One BLAS/OpenMP thread.
"""
from __future__ import annotations

import argparse
import statistics
import time

from bench import common

common.single_threaded_blas()

import numpy as np  # noqa: E402  (after the BLAS thread count is set)

QUICK = {"lengths": [16], "scales": [1.0, 0.0]}
HEADS = (0, 3, 6, 9)  # workflow/config/default.yaml long_context.heads
LAYER, QUERY_POSITION, SPEC_SEED = 2, 4, 0  # the same config's layer and query position, and spec_seed


def heuristic_inf_to_one(M: np.ndarray, starts: int = 200, sweeps: int = 50, seed: int = 0) -> float:
    """max x^T M y over x, y in {-1, 1}^d found by alternating sign updates from random y: a lower bound."""
    rng = np.random.default_rng(seed)
    best = 0.0
    for _ in range(starts):
        y = rng.choice([-1.0, 1.0], M.shape[1])
        for _ in range(sweeps):
            x = np.sign(M @ y)
            y = np.sign(M.T @ x)
        best = max(best, float(x @ M @ y))
    return best


def unscaled_bound(W_Q: np.ndarray, W_K: np.ndarray) -> float:
    """The linf beta(M) before the diagonal scaling: min(sum |M_kl|, d ||M||_2), outward rounded."""
    from attncert.certify.diagonal_bilinear_bound import spectral_norm_bound
    from attncert.head.rounding import gamma

    d, dh = W_Q.shape
    entry = float(np.abs(W_Q @ W_K.T).sum()) * (1.0 + 2.0 * gamma(dh + d * d + 4))
    return min(entry, d * spectral_norm_bound(W_Q, W_K))


def main(args) -> dict:
    import pandas as pd

    import attncert.certify.second_order.varying_query.data as data
    from attncert.certify.long_context import long_context_problems
    from attncert.certify.second_order.certificate import second_order_certificate
    from attncert.model.extraction import load_layer

    from attncert.certify.diagonal_bilinear_bound import diagonal_bilinear_bound

    arrays = load_layer(args.npz)
    units = pd.read_csv(args.units)
    print("beta(M) per head (linf): the unscaled bound, the best found max x^T M y (a lower bound on the truth) and "
          "the certified diagonally scaled bound")
    for h in HEADS:
        M = arrays["W_Q"][h] @ arrays["W_K"][h].T
        cur = unscaled_bound(arrays["W_Q"][h], arrays["W_K"][h])
        low = heuristic_inf_to_one(M)
        t0 = time.perf_counter()
        diag = diagonal_bilinear_bound(arrays["W_Q"][h], arrays["W_K"][h])
        seconds = time.perf_counter() - t0
        print(f"  head {h}: unscaled {cur:.4g}, found {low:.4g} = {low / cur:.3f} of it, diagonally scaled "
              f"{diag:.4g} = {diag / cur:.3f} of it ({seconds:.3f} s)")
    real = data.head_bilinear_bound
    rows = []
    print(f"\nmedian relative gap over heads {list(HEADS)}, linf, r = {args.radius}, varying query "
          "(paper-like / tight)")
    print("| beta(M) x | " + " | ".join(f"n = {n}" for n in args.lengths) + " | growth, last n / first |")
    print("| ---: | " + " | ".join("---" for _ in args.lengths) + " | --- |")
    try:
        for scale in args.scales + ["diagonal"]:
            if scale == "diagonal":
                data.head_bilinear_bound = real
            else:
                data.head_bilinear_bound = lambda W_Q, W_K, norm, s=scale: s * unscaled_bound(W_Q, W_K)
            med = []
            for n in args.lengths:
                gaps = {False: [], True: []}
                for p in long_context_problems(arrays, LAYER, [n], list(HEADS), QUERY_POSITION, [args.radius],
                                               ["linf"], SPEC_SEED, ["varying"]):
                    row = units[(units["length"] == n) & (units["head"] == p.meta["head"])
                                & (units["mode"] == "varying") & (np.isclose(units["radius"], args.radius))].iloc[0]
                    move = row["best_feasible"] - row["nominal"]
                    for tight in (False, True):
                        v = second_order_certificate(p, upper_cone=tight).value
                        gaps[tight].append((v - row["best_feasible"]) / move)
                        rows.append(dict(scale=scale, n=n, head=p.meta["head"], tight=tight, value=v,
                                         reference=row["best_feasible"], movement=move))
                med.append((statistics.median(gaps[False]), statistics.median(gaps[True])))
            growth = f"{med[-1][0] / med[0][0]:.2f} / {med[-1][1] / med[0][1]:.2f}"
            print(f"| {scale} | " + " | ".join(f"{a:.4f} / {b:.4f}" for a, b in med) + f" | {growth} |", flush=True)
    finally:
        data.head_bilinear_bound = real
    return {"rows": rows}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npz", required=True, help="a default run's data/long_context/{model}/layer_tokens.npz")
    ap.add_argument("--units", required=True, help="the same run's data/long_context/{model}/units.csv")
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 0.8, 0.6, 0.0])
    ap.add_argument("--radius", type=float, default=0.02)
    return ap


if __name__ == "__main__":
    common.run("varying_bilinear_scale", main, common.parse(build_parser(), QUICK))
