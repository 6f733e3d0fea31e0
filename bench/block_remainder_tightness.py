"""Where the block certificate's looseness sits (a benchmark): the cubic Taylor model's pieces against the
beyond-quadratic part of f that ascent finds, and an ablation of each piece.

The certificate (`block.certificate.certify_transition`, `block.taylor_model`) bounds

    max f <= r^2 max_u 1/2 u^T (H0 + 2 r P) u + Rest(r) + rounding,

P the cubic part's form (signed through kappa), Rest the fourth-order rest. On one transition per model (the query
token's residual stream perturbed, ell_inf, the stage's specification rows, `bench.block_certificate_scaling`'s
construction), per radius r, medians over the rows:

1. certificate_f / ascent max f, split into the centre quadratic's SDP term (H0 alone), the cubic form's share
   (SDP of H0 + 2 r P minus that of H0) and the rest (with the rounding); the largest |f - q| (q = 1/2 delta^T H0
   delta) found by multi-start sign ascent of +-(f - q) from the stage's ascent starts (a LOWER bound on
   sup |f - q|), and (SDP quadratic + found) / ascent, the ratio a certificate with the exact beyond-quadratic part
   would reach.
2. Ablation (each variant is still a sound certificate; the switches of `block.taylor_model.cubic_model`, the
   softmax shift of `block.certificate.block_graph`, how the SDP dual is found): the SDP duals by subgradient steps
   instead of from the mixing method's primal (`block.mixing_dual`), with and without their rank-one term, without
   the formed centre Hessians of a few rows, without
   the signs of the unary ops' quadratic pieces, without a head's query-key products bounded as one form, without
   the signed rest (per sense), with the softmax scores shifted by a constant only (no linear c_h . xi), without
   all seven (the previous certificate); then, on the previous certificate, without the shared broadcast factors
   (LayerNorm's 1/sigma, the softmax's 1/sum, the query's own weight taken out of the products' quadratic parts),
   without the fourth-order terms p (t + e) moved into kappa (node by node instead), with |kappa_k| bounded by
   absolute values (no signs: the cubic form node by node), without those three; and the integral-remainder
   certificate this one replaced ("before", from the committed
   result of commit 630d70224eec: same construction, rows, radii and ascent settings).

    .venv/bin/python -m bench.block_remainder_tightness [--quick] [--models all-MiniLM-L6-v2 random-gpt2]

Writes block_remainder_tightness[-quick].md / .json (bench/common.py).
"""
from __future__ import annotations

import os

from bench import common  # noqa: E402

common.single_threaded_blas()
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402

from bench.block_certificate_scaling import MODELS, ascent_starts, centre, transitions  # noqa: E402

QUICK = dict(models=["all-MiniLM-L6-v2"], rows=2, steps=20, starts=6, radii=[1e-4, 1e-3])


def beyond_quadratic(tr, Ct, g0, G, H0, radii, starts, steps: int):
    """max over the ascent's iterates of +(f - q) and of -(f - q): (2, m, R), each a lower bound on sup |f - q|."""
    import torch

    from attncert.block.map import DTYPE
    from attncert.block.residual import residual_values

    H = torch.as_tensor(H0, dtype=DTYPE)
    r = torch.as_tensor(radii, dtype=DTYPE).view(1, -1, 1, 1)
    out = []
    for sign in (1.0, -1.0):
        delta = (starts.unsqueeze(1) * r).clone()
        best = torch.full(delta.shape[:2], -math.inf, dtype=DTYPE)
        for t in range(steps + 1):
            x = delta.detach().requires_grad_(True)
            h = sign * (residual_values(tr, Ct, g0, G, x) - 0.5 * torch.einsum("mrsd,mde,mrse->mrs", x, H, x))
            (gx,) = torch.autograd.grad(h.sum(), x)
            with torch.no_grad():
                best = torch.maximum(best, h.max(-1).values)
                alpha = 0.25 * (0.002 / 0.25) ** (t / max(steps - 1, 1))
                delta = torch.maximum(torch.minimum(x + alpha * r * torch.sign(gx), r), -r)
        out.append(best.numpy())
    return np.stack(out)


ZERO_SHIFT = "zero softmax shift"     # a variant key: the softmax scores shifted by a constant only
NO_RANK_ONE = "no rank-one dual"       # a variant key: the diagonal SDP dual alone
NO_MIXING = "no mixing dual"           # a variant key: the SDP duals by subgradient steps, not from the primal
PREVIOUS = {"hessian_rows": False, "signed_quadratic": False, "grouped": False, "signed_rest": False, ZERO_SHIFT: True,
            NO_RANK_ONE: True, NO_MIXING: True}
VARIANTS = {"full": {}, "SDP dual by subgradient steps with a rank-one term (no mixing method)": {NO_MIXING: True},
            "SDP dual by subgradient steps, diagonal (no mixing, no rank-one term)": {NO_MIXING: True,
                                                                                   NO_RANK_ONE: True},
            "no formed Hessians of a few rows": {"hessian_rows": False},
            "no signed unary quadratic parts": {"signed_quadratic": False},
            "no query-key group": {"grouped": False}, "no signed rest": {"signed_rest": False},
            "no linear softmax shift": {ZERO_SHIFT: True},
            "none of these seven (the previous certificate)": PREVIOUS,
            "previous, no shared factors": {**PREVIOUS, "shared_factors": False},
            "previous, no kappa rest": {**PREVIOUS, "kappa_rest": False},
            "previous, kappa unsigned (node-by-node cubic)": {**PREVIOUS, "signed_kappa": False},
            "previous, none of shared factors, kappa rest, signed kappa": {
                **PREVIOUS, "shared_factors": False, "kappa_rest": False, "signed_kappa": False}}
BEFORE_COMMIT = "ccd30cf"      # the commit that holds the integral-remainder certificate's result


def before(name: str) -> list | None:
    """certificate_f / ascent of the integral-remainder certificate, from the committed result (git show)."""
    import json
    import subprocess

    try:
        text = subprocess.run(["git", "show", f"{BEFORE_COMMIT}:bench/results/block_remainder_tightness.json"],
                              cwd=common.REPO, capture_output=True, text=True, check=True).stdout
        return json.loads(text)["result"][name]["certificate_over_ascent"]
    except (subprocess.CalledProcessError, KeyError, ValueError, OSError):
        return None


def run(args) -> dict:
    import time

    import torch

    from attncert.block.certificate import certify_transition
    from attncert.block.residual import ascent

    torch.set_num_threads(1)
    radii = [float(r) for r in args.radii]
    result = {}
    for name in args.models:
        _, tr, C = next(transitions(name, [args.n], args.rows))
        Ct, g0, G = centre(tr, C)
        certs, seconds = {}, {}
        for label, options in VARIANTS.items():
            options = dict(options)
            shift = torch.zeros(tr.n_heads, tr.d, dtype=torch.float64) if options.pop(ZERO_SHIFT, False) else None
            rank_one = not options.pop(NO_RANK_ONE, False)
            mixing = not options.pop(NO_MIXING, False)
            t0 = time.process_time()
            certs[label] = certify_transition(tr, C, g0.numpy(), G.numpy(), radii, model_options=options,
                                              shift=shift, rank_one=rank_one, mixing=mixing)
            seconds[label] = time.process_time() - t0
        cert = certs["full"]
        starts = ascent_starts(cert.H0, args.starts)
        best = ascent(tr, Ct, g0, G, radii, starts, args.steps)[0].numpy()                # (m, R)
        found = beyond_quadratic(tr, Ct, g0, G, cert.H0, radii, starts, args.steps).max(0)  # (m, R)
        quad, beyond = cert.parts["quadratic"], cert.parts["beyond_linear"]
        med = lambda x: np.median(x, 0).tolist()  # noqa: E731
        joint_minus_quad = np.maximum(beyond - quad, 0.0)
        result[name] = dict(
            d=tr.d, n=len(tr.keys), rows=C.shape[0], radii=radii, layer=tr.layer,
            certificate_over_ascent=med(cert.certificate_f / best), quadratic_over_ascent=med(quad / best),
            beyond_quadratic_over_ascent=med(joint_minus_quad / best),
            found_over_ascent=med(found / best), bound_over_found=med(joint_minus_quad / found),
            exact_remainder_ratio=med((quad + found) / best),
            violations=int(sum((c.certificate_f < best).sum()
                               for c in certs.values())),
            ablation={label: med(c.certificate_f / best) for label, c in certs.items()},
            ablation_seconds=seconds, before=before(name))
        print(markdown(name, result[name]), flush=True)
    return result


def markdown(name: str, r: dict) -> str:
    f = lambda xs: " | ".join(f"{x:.3g}" for x in xs)  # noqa: E731
    note = "SYNTHETIC (GPT-2 small's shapes, init std 0.08), not GPT-2" if name == "random-gpt2" else "embedded model"
    lines = [f"## {name} ({note}): transition {r['layer']} -> {r['layer'] + 1}, d = {r['d']}, {r['n']} keys, "
             f"{r['rows']} rows; medians over the rows", "",
             "| r | " + " | ".join(f"{x:g}" for x in r["radii"]) + " |", "| --- " * (len(r["radii"]) + 1) + "|",
             f"| certificate_f / ascent | {f(r['certificate_over_ascent'])} |",
             f"| SDP quadratic (H0 alone) / ascent | {f(r['quadratic_over_ascent'])} |",
             f"| beyond the quadratic (cubic form's share + rest + rounding) / ascent | "
             f"{f(r['beyond_quadratic_over_ascent'])} |",
             f"| largest \\|f - q\\| found / ascent | {f(r['found_over_ascent'])} |",
             f"| beyond-quadratic bound / largest \\|f - q\\| found | {f(r['bound_over_found'])} |",
             f"| (SDP quadratic + found) / ascent | {f(r['exact_remainder_ratio'])} |", "",
             f"Violations (any variant's certificate below the ascent): {r['violations']}.", "",
             "Ablation: certificate_f / ascent of each variant (every one a sound bound); CPU seconds of the whole "
             "certificate for the rows:", "",
             "| variant | " + " | ".join(f"{x:g}" for x in r["radii"]) + " | CPU s |",
             "| --- " * (len(r["radii"]) + 2) + "|"]
    for label, v in r["ablation"].items():
        lines.append(f"| {label} | {f(v)} | {r['ablation_seconds'][label]:.1f} |")
    if r.get("before"):
        lines.append(f"| before: the integral remainder (commit {BEFORE_COMMIT}) | {f(r['before'])} | |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--n", type=int, default=16, help="keys (the passage's first n tokens)")
    ap.add_argument("--rows", type=int, default=4, help="specification rows (units)")
    ap.add_argument("--radii", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3])
    ap.add_argument("--steps", type=int, default=60, help="ascent steps")
    ap.add_argument("--starts", type=int, default=16, help="ascent starts")
    args = common.parse(ap, QUICK, argv)
    return common.run("block_remainder_tightness", run, args)


if __name__ == "__main__":
    main()
