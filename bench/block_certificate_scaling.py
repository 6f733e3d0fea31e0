"""Cost of the block certificate and of the block CROWN against the width d and the number of keys n (a benchmark).

One transition per model, the query token's residual stream perturbed (ell_inf, one radius), a few specification
rows (the stage's: `head.specification.specification_rows`, heads 0 .. m-1 of block l+1), the context the
first n tokens of the committed passage `data/long_context_passage.txt`:

* all-MiniLM-L6-v2 (embedded, d = 384, BERT post-LN, bidirectional: n keys = the n tokens incl. [CLS]/[SEP]),
  transition 2 -> 3, query position 4 (the default config's);
* `random-gpt2` (SYNTHETIC: GPT-2 small's shapes, seeded random weights, init std 0.08; not GPT-2; d = 768, pre-LN,
  causal), transition 5 -> 6, query position n - 1 (so the query attends n keys).

Per (model, n): `block.certificate.certify_transition` (the stage's settings: 8 pieces, the SDP duals from the
mixing method) and
`block.crown.crown_bounds` (the CROWN pass the stage runs; one call bounds all m rows, upper and lower), each
--reps times: median seconds per call and per unit (call / m), and the peak resident memory above the call's start
(the kernel's VmHWM after resetting it through /proc/self/clear_refs, freed heap trimmed first). The ascent
maximum of f (`residual.ascent` from the stage's starts: +-u* and +-(second best) of the box-QP search on the
centre Hessian, then random vertices, --ascent-starts in all, --ascent-steps steps) gives certificate_f / ascent
and crown_upper / ascent (medians over the rows; the certificate's also split into its SDP quadratic term and its
remainder). A CROWN call whose predicted time (the last n's times (n ratio)^2) exceeds --crown-cap seconds is not
run, and said so; the process runs under an address-space limit (--memory-limit-gb), so that a call that runs
out of memory fails (recorded, and no larger n is tried for it) instead of calling the machine's OOM killer.

Fitted growth exponents: slope of log(median seconds) (and of log(peak MB)) on log(n) per model and method; the d
ratio is time(random-gpt2) / time(MiniLM) at the same n, with log2 of it the implied exponent in d (the two models
also differ in family and d_head: 32 vs 64, so this is an upper-level comparison, not a pure d sweep).

Every token perturbed (the perturbation dimension n d instead of d) is not implemented by the certificate (its graph
carries one input token); the estimate uses measured pieces: the verified SDP's dense eigendecompositions on random
symmetric D x D matrices (D up to --eig-max, fitted exponent, extrapolated to D = n d), the Hessian's storage
(m (n d)^2 float64 numbers) and the measured graph part scaled by the Jacobians' width (n times).

    .venv/bin/python -m bench.block_certificate_scaling [--quick] [--ns 8 16 32 64] [--rows 4] [--reps 2]

Writes block_certificate_scaling[-quick].md / .json (bench/common.py).
"""
from __future__ import annotations

import os

from bench import common  # noqa: E402

common.single_threaded_blas()
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

REPO = common.REPO
QUICK = dict(ns=[8, 16], rows=2, reps=1, ascent_steps=20, eig_max=768, crown_cap=60.0)
PASSAGE = "data/long_context_passage.txt"
MODELS = {
    "all-MiniLM-L6-v2": dict(cfg={"name": "all-MiniLM-L6-v2", "family": "bert", "source": "embedded"},
                             family="bert", layer=2, position=lambda n: 4, d=384),
    "random-gpt2": dict(cfg={"source": "random-gpt2", "family": "gpt2", "seed": 0, "init_std": 0.08},
                        family="gpt2", layer=5, position=lambda n: n - 1, d=768),
}


def measure(fn, reps: int):
    """(last output, median seconds, max peak MB above the start or NaN)."""
    secs, mbs, out = [], [], None
    for _ in range(reps):
        gc.collect()
        ok = common.reset_peak_memory()
        start = common.process_status_mb("VmRSS")
        t0 = time.perf_counter()
        out = fn()
        secs.append(time.perf_counter() - t0)
        mbs.append(common.process_status_mb("VmHWM") - start if ok else math.nan)
    return out, float(np.median(secs)), float(np.max(mbs))


def transitions(name: str, ns: list[int], rows: int):
    """(n, BlockTransition, C) for every n: the stage's construction from the extracted layers."""
    from attncert.block.build import transition_from_arrays
    from attncert.head.specification import specification_rows
    from attncert.model.extraction import extract_layers, load_model, tokenize_prompts

    spec = MODELS[name]
    loaded = load_model(spec["cfg"])
    text = (REPO / PASSAGE).read_text()
    L = spec["layer"]
    for n in ns:
        ids = tokenize_prompts(loaded.tokenizer, [text], n)
        arrays = extract_layers(loaded.model, spec["family"], ids, [L, L + 1])
        pos = spec["position"](n)
        tr = transition_from_arrays(arrays[L], arrays[L + 1], L, 0, pos)
        nxt = arrays[L + 1]
        C = specification_rows(nxt["W_V"], nxt["W_O"], L + 1, list(range(rows)), 0, pos, 0)
        yield n, tr, C


def centre(tr, C):
    """g(0) and grad g(0) (the stage's float g0, G) by reverse mode."""
    import torch
    from torch.func import jacrev

    from attncert.block.map import DTYPE, specification_values

    Ct = torch.as_tensor(C, dtype=DTYPE)
    zero = torch.zeros(tr.d, dtype=DTYPE)
    g = lambda delta: specification_values(tr, Ct, delta)  # noqa: E731
    with torch.no_grad():
        g0 = g(zero)
    return Ct, g0, jacrev(g)(zero).detach()


def run(args) -> dict:
    import torch

    from attncert.block.certificate import certify_transition
    from attncert.block.crown import crown_bounds
    from attncert.block.residual import ascent

    torch.set_num_threads(1)
    if args.memory_limit_gb > 0:      # a failed allocation raises (caught per call) instead of the OOM killer
        import resource

        limit = int(args.memory_limit_gb * 2 ** 30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    r = float(args.radius)
    rows = []
    for name in args.models:
        last_crown = None
        for n, tr, C in transitions(name, args.ns, args.rows):
            Ct, g0, G = centre(tr, C)
            m = C.shape[0]
            row = dict(model=name, n=n, d=tr.d, keys=len(tr.keys), m=m, heads=tr.n_heads, radius=r)
            try:
                cert, row["certificate_s"], row["certificate_mb"] = measure(
                    lambda: certify_transition(tr, C, g0.numpy(), G.numpy(), [r], sdp_iterations=10),
                    args.reps)
            except (MemoryError, RuntimeError) as e:
                print(f"[{name} n={n}] certificate failed: {type(e).__name__}: {e}"[:240], flush=True)
                continue
            row["certificate_f"] = cert.certificate_f[:, 0].tolist()
            row["certificate_g"] = cert.certificate_g[:, 0].tolist()
            row["certificate_quadratic"] = cert.parts["quadratic"][:, 0].tolist()
            row["certificate_remainder"] = cert.parts["remainder"][:, 0].tolist()
            predicted = None if last_crown is None else last_crown[1] * (n / last_crown[0]) ** 2
            if predicted is not None and not math.isfinite(predicted):
                row["crown_status"] = f"not run: failed at n = {last_crown[0]}"
            elif predicted is not None and predicted > args.crown_cap:
                row["crown_status"] = f"not run: predicted {predicted:.0f} s > --crown-cap {args.crown_cap:g} s"
            else:
                try:
                    (up, lo), row["crown_s"], row["crown_mb"] = measure(
                        lambda: crown_bounds(tr, C, g0.numpy(), G.numpy(), [r]), args.reps)
                    row["crown_upper"], row["crown_status"] = up[0].tolist(), "ok"
                    last_crown = (n, row["crown_s"])
                except (MemoryError, RuntimeError) as e:
                    row["crown_status"] = (f"failed under the {args.memory_limit_gb:g} GB address-space limit: "
                                           f"{type(e).__name__}: {e}")[:240]
                    last_crown = (n, math.inf)
                    gc.collect()
            t0 = time.perf_counter()
            starts = ascent_starts(cert.H0, args.ascent_starts)
            best, _ = ascent(tr, Ct, g0, G, [r], starts, args.ascent_steps)
            row["ascent_s"] = time.perf_counter() - t0
            row["ascent_max"] = best[:, 0].tolist()
            asc = np.asarray(row["ascent_max"])
            row["violations"] = int((np.asarray(row["certificate_f"]) < asc).sum())
            if "crown_upper" in row:
                row["violations"] += int((np.asarray(row["crown_upper"]) < asc).sum())
            rows.append(row)
            print(f"[{name} n={n}] certificate {row['certificate_s']:.2f} s, crown "
                  f"{row.get('crown_s', math.nan):.2f} s ({row['crown_status']})", flush=True)
            del cert
            gc.collect()
    return dict(rows=rows, eig=eig_scaling(args.eig_max, args.reps))


def ascent_starts(H0, count: int):
    """The stage's starts of the ascent on f: +-u* and +-(second best) of the box-QP search on the centre Hessian
    (starts: signs of its top eigenvectors and random vertices), then random vertices; (m, count, d)."""
    import torch

    from attncert.block.box_qp import QuadraticForms, box_qp_max
    from attncert.block.residual import _distinct_second

    H = torch.as_tensor(np.asarray(H0), dtype=torch.float64)
    m, d, _ = H.shape
    gen = torch.Generator().manual_seed(0)
    qs = torch.sign(torch.randn(m, 16, d, dtype=torch.float64, generator=gen))
    qs[:, :4] = torch.sign(torch.linalg.eigh(H)[1][:, :, -4:].transpose(1, 2))
    qs[qs == 0] = 1.0
    _, u1, vals, us = box_qp_max(QuadraticForms(dense=H), qs, 50, 5)
    u2 = _distinct_second(vals, us, u1)
    starts = torch.sign(torch.randn(m, max(count, 4), d, dtype=torch.float64, generator=gen))
    for k, u in enumerate((u1, -u1, u2, -u2)):
        starts[:, k] = u
    starts[starts == 0] = 1.0
    return starts


def eig_scaling(eig_max: int, reps: int) -> list:
    """Seconds of one dense symmetric eigendecomposition (the SDP dual's eigenvalue), one Cholesky (its
    verification) and one sweep of the mixing method (`block.mixing_dual`, the dual's primal) of a random D x D
    float64 matrix, D = 384 .. eig_max (doubling)."""
    import torch

    from attncert.block.mixing_dual import mixing_factors

    out, D = [], 384
    while D <= eig_max:
        A = torch.randn(D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(D))
        A = A + A.T
        _, es, _ = measure(lambda: torch.linalg.eigh(A), reps)
        B = A + 4 * math.sqrt(D) * torch.eye(D, dtype=torch.float64)
        _, cs, _ = measure(lambda: torch.linalg.cholesky_ex(B), reps)
        _, ms, _ = measure(lambda: mixing_factors(A.unsqueeze(0), sweeps=1), reps)
        out.append(dict(D=D, eigh_s=es, cholesky_s=cs, sweep_s=ms))
        D *= 2
    return out


def _slope(xs, ys) -> float:
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y) and y > 0]
    if len(pts) < 2:
        return math.nan
    return float(np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)[0])


def _median_ratio(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = (b > 0) & np.isfinite(a)
    return float(np.median(a[ok] / b[ok])) if ok.any() else math.nan


def summarize(data: dict) -> dict:
    rows = data["rows"]
    out = {"exponents_n": {}, "d_ratio": {}, "all_tokens": [], "eig_exponent": math.nan}
    for row in rows:
        row["certificate_s_per_unit"] = row["certificate_s"] / row["m"]
        row["crown_s_per_unit"] = row.get("crown_s", math.nan) / row["m"]
        row["certificate_over_ascent"] = _median_ratio(row["certificate_f"], row["ascent_max"])
        row["quadratic_over_ascent"] = _median_ratio(row["certificate_quadratic"], row["ascent_max"])
        row["remainder_over_ascent"] = _median_ratio(row["certificate_remainder"], row["ascent_max"])
        row["crown_over_ascent"] = _median_ratio(row.get("crown_upper", [math.nan] * row["m"]), row["ascent_max"])
    for name in MODELS:
        sub = [r for r in rows if r["model"] == name]
        if not sub:
            continue
        ns = [r["n"] for r in sub]
        out["exponents_n"][name] = {k: _slope(ns, [r.get(k, math.nan) for r in sub])
                                    for k in ("certificate_s", "crown_s", "certificate_mb", "crown_mb")}
    small, big = ([r for r in rows if r["model"] == nm] for nm in MODELS)
    for a in small:
        b = next((r for r in big if r["n"] == a["n"]), None)
        if b is None:
            continue
        cell = {}
        for k in ("certificate_s", "crown_s", "certificate_mb", "crown_mb"):
            if math.isfinite(a.get(k, math.nan)) and math.isfinite(b.get(k, math.nan)) and a[k] > 0:
                cell[k] = b[k] / a[k]
                cell[k + "_exponent"] = math.log(cell[k]) / math.log(b["d"] / a["d"])
        out["d_ratio"][a["n"]] = cell
    eig = data["eig"]
    out["eig_exponent"] = _slope([e["D"] for e in eig], [e["eigh_s"] for e in eig])
    out["sweep_exponent"] = _slope([e["D"] for e in eig], [e.get("sweep_s", math.nan) for e in eig])
    # every token perturbed: perturbation dimension D = n d (estimate from the measured pieces)
    if eig and math.isfinite(out["eig_exponent"]) and math.isfinite(out["sweep_exponent"]):
        from attncert.block.mixing_dual import SWEEPS, WARM_SWEEPS

        top = eig[-1]
        for r in rows:
            D = r["n"] * r["d"]
            eig_s = top["eigh_s"] * (D / top["D"]) ** out["eig_exponent"]
            sweep_s = top["sweep_s"] * (D / top["D"]) ** out["sweep_exponent"]
            # both senses, every row: the top eigenvector, the centre's and the radius's dual eigenvalue, the sweeps
            sdp_s = 2 * r["m"] * (3 * eig_s + (SWEEPS + WARM_SWEEPS) * sweep_s)
            hess_gb = r["m"] * D * D * 8 / 1e9
            graph_s = r["certificate_s"] * r["n"]               # Jacobians n times wider (a lower estimate)
            crown_s = r.get("crown_s", math.nan) * r["n"]     # back-substitution coefficients n times wider (lower)
            out["all_tokens"].append(dict(model=r["model"], n=r["n"], D=D, sdp_s=sdp_s, hessian_gb=hess_gb,
                                          certificate_s=sdp_s + graph_s, crown_s=crown_s,
                                          certificate_s_per_unit=(sdp_s + graph_s) / r["m"],
                                          crown_s_per_unit=crown_s / r["m"]))
    return out


def _f(x, fmt=".3g") -> str:
    return "—" if x is None or not math.isfinite(x) else format(x, fmt)


def markdown(args, data: dict, summ: dict) -> str:
    from attncert.block.mixing_dual import SWEEPS, WARM_SWEEPS

    lines = [f"Block certificate vs block CROWN: cost against n (keys) and d. One transition per model, the query "
             f"token perturbed, ell_inf r = {args.radius:g}, {args.rows} specification rows (units); prompt "
             f"`{PASSAGE}`. all-MiniLM-L6-v2: transition 2 -> 3, query position 4. random-gpt2 is SYNTHETIC "
             "(GPT-2 small's shapes, init std 0.08), not GPT-2: transition 5 -> 6, query position n - 1.", "",
             "| model | d | n | certificate s / unit | CROWN s / unit | certificate peak MB | CROWN peak MB | "
             "certificate_f / ascent (SDP quadratic + remainder) | CROWN / ascent | violations |",
             "| --- " * 10 + "|"]
    for r in data["rows"]:
        crown = _f(r["crown_s_per_unit"]) if r["crown_status"] == "ok" else f"not run ({r['crown_status']})"
        lines.append(f"| {r['model']} | {r['d']} | {r['n']} | {_f(r['certificate_s_per_unit'])} | {crown} | "
                     f"{_f(r['certificate_mb'], '.0f')} | {_f(r.get('crown_mb', math.nan), '.0f')} | "
                     f"{_f(r['certificate_over_ascent'])} ({_f(r['quadratic_over_ascent'])} + "
                     f"{_f(r['remainder_over_ascent'])}) | {_f(r['crown_over_ascent'])} | {r['violations']} |")
    lines += ["", "Seconds per unit = median seconds of one call (all rows at once) / rows; peak MB = VmHWM above "
              "the call's start (largest over the repetitions).", "",
              "Fitted growth exponents over n (slope of log on log n):", ""]
    for name, e in summ["exponents_n"].items():
        lines.append(f"- {name}: certificate time {_f(e['certificate_s'], '.2f')}, CROWN time {_f(e['crown_s'], '.2f')}"
                     f"; certificate memory {_f(e['certificate_mb'], '.2f')}, CROWN memory {_f(e['crown_mb'], '.2f')}")
    lines += ["", "d ratio (random-gpt2 d = 768 / all-MiniLM-L6-v2 d = 384 at the same n; implied exponent in d "
              "in brackets; the models also differ in family and d_head):", ""]
    for n, c in summ["d_ratio"].items():
        parts = [f"{lab} {_f(c.get(k))} ({_f(c.get(k + '_exponent'), '.2f')})" for k, lab in
                 (("certificate_s", "certificate time"), ("crown_s", "CROWN time"),
                  ("certificate_mb", "certificate memory"), ("crown_mb", "CROWN memory")) if k in c]
        lines.append(f"- n = {n}: " + ", ".join(parts))
    lines += ["", "Dense symmetric eigendecomposition (the SDP dual's eigenvalue; d x d per row), Cholesky (its "
              "verification) and one mixing-method sweep (the dual's primal, one matrix), one thread: "
              + ", ".join(f"D = {e['D']}: {_f(e['eigh_s'])} s / {_f(e['cholesky_s'])} s / "
                          f"{_f(e.get('sweep_s', math.nan))} s" for e in data["eig"])
              + f"; fitted exponents {_f(summ['eig_exponent'], '.2f')} (eigh), "
                f"{_f(summ.get('sweep_exponent', math.nan), '.2f')} (sweep).", "",
              "Every token's residual stream perturbed (D = n d), ESTIMATED, not measured (the certificate's graph "
              f"carries one input token): SDP = 2 senses x rows x (3 eigh(D) + {SWEEPS + WARM_SWEEPS} "
              "sweeps(D)), each extrapolated with its fitted exponent; certificate = SDP + the measured call x n "
              "(Jacobians n times wider; a lower estimate, the node count also grows with the other tokens' "
              "LayerNorm/K/V nodes); CROWN = measured call x n (the "
              "same lower estimate); Hessian = rows x D^2 float64.", "",
              "| model | n | D = n d | certificate s / unit (est.) | of which SDP | CROWN s / unit (est., lower) | "
              "Hessian GB |", "| --- " * 7 + "|"]
    for a in summ["all_tokens"]:
        lines.append(f"| {a['model']} | {a['n']} | {a['D']} | {_f(a['certificate_s_per_unit'])} | "
                     f"{_f(a['sdp_s'] / next(r['m'] for r in data['rows'] if r['n'] == a['n']))} | "
                     f"{_f(a['crown_s_per_unit'])} | {_f(a['hessian_gb'])} |")
    total = sum(r["violations"] for r in data["rows"])
    lines += ["", f"Soundness violations (a bound below the ascent maximum): {total}", ""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    ap.add_argument("--ns", type=int, nargs="+", default=[8, 16, 32, 64], help="numbers of keys")
    ap.add_argument("--rows", type=int, default=4, help="specification rows (units) per transition")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of every timed call")
    ap.add_argument("--radius", type=float, default=1e-3)
    ap.add_argument("--ascent-starts", type=int, default=8)
    ap.add_argument("--ascent-steps", type=int, default=60)
    ap.add_argument("--crown-cap", type=float, default=240.0, help="skip a CROWN call predicted above this (s)")
    ap.add_argument("--memory-limit-gb", type=float, default=8.0,
                    help="address-space limit of the process (0: none); without it CROWN at MiniLM n = 64 took all "
                         "24 GB of the machine and was killed")
    ap.add_argument("--eig-max", type=int, default=3072, help="largest D of the eigendecomposition timing")
    return ap


def main(args) -> dict:
    warnings.filterwarnings("ignore")
    data = run(args)
    summ = summarize(data)
    print(markdown(args, data, summ))
    return dict(summary=summ, **data)


if __name__ == "__main__":
    common.run("block_certificate_scaling", main, common.parse(build_parser(), QUICK))
