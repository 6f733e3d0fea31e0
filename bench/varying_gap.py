"""Varying-query gap by radius on GPT-2-sized random heads (not a test).

Units: `bench_second_order.gpt2_like_head` (d = 768, d_head = 64, linf, random GPT-2-like weights) with
n = 8 attended tokens (query = last token), mode "varying", radii 0.002 / 0.005 / 0.01 / 0.02.
For every unit: the first-order certificate (FO), the unfactored second-order certificate of `unfactored`
(SO, default variant: the program before the factored one), each requested variant (--variants, names of
`variant`; 'moment' is the factored default, 'tight' its tight variant), and the best feasible value of multi-start
ascent (`best`, a lower
bound of max g). Printed per radius: median relative gap (cert - best) / (best - nominal) of each, median
seconds per unit (the one-time compile of a shape is excluded: one warm-up unit per variant), fallbacks,
the median score half-width components (R_s, H = max_j r ||p_j||_1, bb) and the median per-unit log-log
slope of (cert - best) over the radii. All certificates of a unit run side by side in the same process.

    .venv/bin/python -m bench.varying_gap [--heads 6] [--variants moment,tight] [--quick]

BLAS runs single-threaded (set before numpy is imported).
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from bench import common  # noqa: E402
from bench.bench_second_order import gpt2_like_head  # noqa: E402

RADII = (0.002, 0.005, 0.01, 0.02)


def variant(problem, name: str):
    """The varying-query variants compared here.

    'shift' / 'oldtight': the unfactored program of `varying_query.unfactored`, centered / with the upper cone
    (C5); 'factor' / 'factor0': factored, centered / not centered, no second moments; 'moment': factored, centered,
    second moments (the default); 'tight' / 'tight0': factored, centered, upper cone (C5) at the key level, with /
    without second moments.
    """
    from attncert.certify.second_order.varying_query.factored import second_order_varying_factored as factored
    from attncert.certify.second_order.varying_query.unfactored import second_order_varying as unfactored

    from attncert.head.reduced_geometry import reduced_geometry

    geo = reduced_geometry(problem)
    runs = {"shift": lambda: unfactored(problem, geo, center=True),
            "oldtight": lambda: unfactored(problem, geo, upper_cone=True),
            "factor": lambda: factored(problem, geo, center=True, second=False),
            "factor0": lambda: factored(problem, geo, center=False, second=False),
            "moment": lambda: factored(problem, geo), "tight": lambda: factored(problem, geo, upper_cone=True),
            "tight0": lambda: factored(problem, geo, upper_cone=True, second=False)}
    if name not in runs:
        raise ValueError(f"unknown variant {name!r}")
    return runs[name]()


def certifiers(names):
    """name -> callable(problem) -> SecondOrderResult-like (value, fallback)."""
    from attncert.certify.second_order.attained import first_order_attained
    from attncert.certify.second_order.varying_query.unfactored import second_order_varying
    from attncert.head.reduced_geometry import reduced_geometry

    # the unfactored program
    out = {"SO": lambda p: first_order_attained(p, second_order_varying(p, reduced_geometry(p)))}
    for name in names:
        if name:
            out[name] = (lambda nm: (lambda p: variant(p, nm)))(name)
    return out


QUICK = {"heads": 1, "radii": "0.002,0.02", "restarts": 4, "steps": 40}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--variants", default="", help="comma-separated variant names of varying_factored")
    ap.add_argument("--radii", default=",".join(str(r) for r in RADII))
    ap.add_argument("--restarts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=80)
    return ap


def main(args) -> dict:
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    from attncert.certify.best_feasible_ascent import best_feasible_ascent
    from attncert.certify.first_order_certificate import first_order_certificate
    from attncert.certify.second_order.varying_query.data import VaryingData
    from attncert.head.reduced_geometry import reduced_geometry

    head = gpt2_like_head
    radii = tuple(float(x) for x in args.radii.split(","))
    cert = certifiers(args.variants.split(","))
    names = ["FO"] + list(cert)
    warm = head(10_000, radii[0], "varying", n=args.n)
    for nm, f in cert.items():
        t0 = time.perf_counter()
        f(warm)
        print(f"warm-up {nm}: {time.perf_counter() - t0:.2f} s (includes the compile)")
    gaps = {nm: {r: [] for r in radii} for nm in names}
    rel = {nm: {r: [] for r in radii} for nm in names}
    secs = {nm: {r: [] for r in radii} for nm in names}
    falls = {nm: {r: 0 for r in radii} for nm in names}
    comp = {r: [] for r in radii}
    for seed in range(args.heads):
        for r in radii:
            p = head(seed, r, "varying", n=args.n)
            D = VaryingData(p, reduced_geometry(p), math.inf)
            comp[r].append((D.R_s, float(np.max(D.H)), D.bb))
            best = best_feasible_ascent(p, restarts=args.restarts, steps=args.steps, seed=seed).value
            vals = {}
            t0 = time.perf_counter()
            vals["FO"] = first_order_certificate(p)
            secs["FO"][r].append(time.perf_counter() - t0)
            for nm, f in cert.items():
                t0 = time.perf_counter()
                res = f(p)
                secs[nm][r].append(time.perf_counter() - t0)
                vals[nm] = res.value
                falls[nm][r] += bool(res.fallback)
            move = best - p.nominal_value()
            for nm in names:
                if vals[nm] < best:
                    print(f"UNSOUND? {nm} seed {seed} r {r}: {vals[nm]} < best {best}")
                gaps[nm][r].append(vals[nm] - best)
                rel[nm][r].append((vals[nm] - best) / move)
            line = "  ".join(f"{nm} {(vals[nm] - best) / move:.4f}" for nm in names)
            print(f"seed {seed} r {r:<6} move {move:.4g}  {line}", flush=True)
    print()
    print("median relative gap (cert - best ascent) / (best ascent - nominal); [median s/unit]; fallbacks")
    print(f"{'r':>7s} {'R_s':>6s} {'H':>6s} {'bb':>6s}  " + "  ".join(f"{nm:>22s}" for nm in names))
    for r in radii:
        c = np.median(np.array(comp[r]), axis=0)
        print(f"{r:7g} {c[0]:6.3f} {c[1]:6.3f} {c[2]:6.3f}  "
              + "  ".join(f"{np.median(rel[nm][r]):9.4f} [{np.median(secs[nm][r]):6.3f}s] {falls[nm][r]:2d}fb"
                          for nm in names))
    print()
    result = {"radii": list(radii), "n": args.n, "heads": args.heads, "median_rel_gap": {
        nm: {r: float(np.median(rel[nm][r])) for r in radii} for nm in names}, "median_seconds": {
        nm: {r: float(np.median(secs[nm][r])) for r in radii} for nm in names}, "fallbacks": falls, "slopes": {}}
    for rs in (radii, radii[:2]):
        print("median per-unit log-log slope of (cert - best) over r in", rs)
        for nm in names:
            sl = []
            for k in range(args.heads):
                g = np.array([gaps[nm][r][k] for r in rs])
                if np.all(g > 0):
                    sl.append(np.polyfit(np.log(rs), np.log(g), 1)[0])
            print(f"  {nm:8s} {np.median(sl) if sl else float('nan'):.2f}  ({len(sl)} heads)")
            result["slopes"].setdefault(",".join(map(str, rs)), {})[nm] = float(np.median(sl)) if sl else None
    return result


if __name__ == "__main__":
    common.run("varying_gap", main, common.parse(build_parser(), QUICK))
