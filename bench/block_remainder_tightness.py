"""Where the block certificate's looseness sits (a benchmark): its remainder term against the beyond-quadratic part
of f that ascent finds, the node-by-node remainder with the enclosures' remainders removed, and the Jacobian
remainder of the MLP's GELU inputs against their true centre Hessians.

The certificate (`block.certificate.certify_transition`) bounds max f <= 1/2 SDP(H0) + Rem, with Rem a bound on
sup |f(delta) - 1/2 delta^T H0 delta| over the box. Three measurements, on one transition per model (the query
token's residual stream perturbed, ell_inf, the stage's specification rows, `bench.block_certificate_scaling`'s
construction):

1. Per radius r: certificate_f / ascent max f, split into its SDP quadratic term and its remainder; the largest
   |f - q| (q = 1/2 delta^T H0 delta) found by multi-start sign ascent of +-(f - q) from the stage's ascent starts
   (a LOWER bound on sup |f - q|, so Rem / found is an upper estimate of the remainder's looseness); and
   (SDP quadratic + found) / ascent, the ratio the certificate would reach with a remainder bound equal to the
   found value (no bound of the form "SDP quadratic + sup |f - q|" can be below it).
2. The remainder's node-by-node bound at rho = r (`block.remainder_form.node_terms`, kappa = 1, summed over the
   nodes, median over the rows) as computed, and with the Jacobian remainders a, the adjoint remainders Lam, or
   both set to zero (an ablation, NOT a bound: it says which enclosure remainder the bound pays for).
3. For the GELU inputs z_k (the MLP's pre-activations) at rho = 1e-4: the Jacobian remainder a_k / rho of the
   enclosure (`block.enclosure`) against ||M_k||_{inf->1} of the centre Hessian M_k = d^2 z_k / d delta^2 (autograd,
   float): bracketed by alternating sign ascent (lower) and the entrywise l1 sum (upper). To first order in rho,
   rho ||M_k||_{inf->1} is the true sup of |J_k(xi) u - J_k(0) u|.
4. What if (--what-if models; NOT a bound, an estimate of the gain): the certificate recomputed with the Jacobian
   remainder a of LayerNorm 2's centred input, the GELU inputs and the output LayerNorm's centred input replaced by
   min(a, rho x entrywise l1 of their centre Hessians) (autograd, float; the higher-order part of a dropped).

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

QUICK = dict(models=["all-MiniLM-L6-v2"], rows=2, steps=20, starts=6, radii=[1e-4, 1e-3], gelu_rows=2,
             what_if=[])


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


def ablation(tr, Ct, radii) -> dict:
    """The remainder's node-by-node bound at rho = r (sum over the nodes; median over the rows): as computed, with
    a = 0, with Lam = 0, with both = 0; and the three largest ops as computed."""
    import torch

    from attncert.block.certificate import block_graph
    from attncert.block.map import DTYPE
    from attncert.block.remainder_form import node_terms

    G, gv = block_graph(tr, Ct, torch.as_tensor([0.0, *radii], dtype=DTYPE))
    lam0, Lam = G.adjoints(gv)
    ops = [op for op in G.ops if op.kind != "linear"]
    out = {}
    for label, zero_a, zero_lam in (("computed", False, False), ("a = 0", True, False),
                                    ("Lam = 0", False, True), ("a = Lam = 0", True, True)):
        saved = [v.a for v in G.vars]
        if zero_a:
            for v in G.vars:
                v.a = torch.zeros_like(v.a)
        lam = {k: torch.zeros_like(v) if zero_lam else v for k, v in Lam.items()}
        per_op = [node[1:].numpy() for _, _, node in node_terms(G, lam0, lam, 1.0)]     # (R, m) each
        for v, a in zip(G.vars, saved):
            v.a = a
        out[label] = np.median(np.sum(per_op, 0), -1).tolist()
        if label == "computed":
            share = np.median(np.stack(per_op), -1)                                       # (ops, R)
            top = np.argsort(-share[:, -1])[:3]
            out["largest ops"] = [(_op_name(ops[i]), share[i].tolist()) for i in top]
    return out


def _op_name(op) -> str:
    return f"{op.curve.name} node" if op.kind == "unary" else "product node"


def gelu_jacobian(tr, Ct, rows: int) -> list:
    """(k, a_k / rho, lower, upper, s_k) for the GELU inputs with the largest a_k and for `rows` // 2 median ones."""
    import torch
    from torch.func import hessian

    from attncert.block.certificate import block_graph
    from attncert.block.map import DTYPE, Tape, forward

    rho = 1e-4
    G, _ = block_graph(tr, Ct, torch.as_tensor([0.0, rho], dtype=DTYPE))
    op = next(o for o in G.ops if o.kind == "unary" and o.curve is tr.activation)
    z = G.vars[op.inputs[0]]
    a = (z.a[1] / rho).numpy()
    order = np.argsort(-a)
    picks = list(order[:rows - rows // 2]) + list(order[len(order) // 2:len(order) // 2 + rows // 2])
    zero = torch.zeros(tr.d, dtype=DTYPE)

    def pre(delta, k):
        tape = Tape()
        forward(tr, delta, tape)
        return tape.inputs["mlp.gelu"][..., k]

    out, gen = [], torch.Generator().manual_seed(0)
    for k in picks:
        M = hessian(lambda dl: pre(dl, int(k)))(zero)
        low = 0.0
        for _ in range(8):
            xi = torch.sign(torch.randn(tr.d, dtype=DTYPE, generator=gen))
            for _ in range(30):
                u = torch.sign(M.T @ xi)
                xi = torch.sign(M @ u)
            low = max(low, float(xi @ M @ u))
        out.append((int(k), float(a[k]), low, float(M.abs().sum()), float(z.s[k])))
    return out


def what_if(tr, C, g0, G, radii) -> np.ndarray:
    """certificate_f (m, R) with a of the three vector inputs of measurement 4 replaced (monkeypatched enclosure)."""
    import torch
    from torch.func import jacrev, jvp

    import attncert.block.enclosure as enclosure
    from attncert.block.certificate import block_graph, certify_transition
    from attncert.block.map import DTYPE, Tape, forward

    def inputs(delta):
        tape = Tape()
        forward(tr, delta, tape)
        return torch.cat([tape.inputs[k] for k in ("ln_attn.square", "mlp.gelu", "ln_out.square")])

    d, jac, zero = tr.d, jacrev(inputs, chunk_size=256), torch.zeros(tr.d, dtype=DTYPE)
    l1 = 0.0
    for i in range(d):                                     # column i of every centre Hessian: d/d delta_i of J
        (_, col) = jvp(jac, (zero,), (torch.eye(d, dtype=DTYPE)[i],))
        l1 = l1 + col.abs().sum(-1)
    # the enclosure's var index of each input (the graph's op order does not depend on the radii)
    G0, _ = block_graph(tr, torch.as_tensor(C, dtype=DTYPE), torch.zeros(1, dtype=DTYPE))
    unary = [o for o in G0.ops if o.kind == "unary"]
    squares = [o.inputs[0] for o in unary if o.curve.name == "square"]
    gelu = next(o.inputs[0] for o in unary if o.curve is tr.activation)
    slices, lo = {}, 0
    for index in (squares[-2], gelu, squares[-1]):
        width = G0.vars[index].c.shape[0]
        slices[index] = slice(lo, lo + width)
        lo += width
    finish = enclosure.Graph._finish

    def patched(graph, v):
        out = finish(graph, v)
        if out.index in slices:
            out.a = torch.minimum(out.a, graph.rho.unsqueeze(1) * l1[slices[out.index]].unsqueeze(0))
        return out

    enclosure.Graph._finish = patched
    try:
        return certify_transition(tr, C, g0.numpy(), G.numpy(), radii).certificate_f
    finally:
        enclosure.Graph._finish = finish


def run(args) -> dict:
    import torch

    from attncert.block.certificate import certify_transition
    from attncert.block.residual import ascent

    torch.set_num_threads(1)
    radii = [float(r) for r in args.radii]
    result = {}
    for name in args.models:
        _, tr, C = next(transitions(name, [args.n], args.rows))
        Ct, g0, G = centre(tr, C)
        cert = certify_transition(tr, C, g0.numpy(), G.numpy(), radii)
        starts = ascent_starts(cert.H0, args.starts)
        best = ascent(tr, Ct, g0, G, radii, starts, args.steps)[0].numpy()                # (m, R)
        found = beyond_quadratic(tr, Ct, g0, G, cert.H0, radii, starts, args.steps).max(0)  # (m, R)
        quad, rem = cert.parts["quadratic"], cert.parts["remainder"]
        med = lambda x: np.median(x, 0).tolist()  # noqa: E731
        result[name] = dict(
            d=tr.d, n=len(tr.keys), rows=C.shape[0], radii=radii,
            certificate_over_ascent=med(cert.certificate_f / best), quadratic_over_ascent=med(quad / best),
            remainder_over_ascent=med(rem / best), found_over_ascent=med(found / best),
            remainder_over_found=med(rem / found), exact_remainder_ratio=med((quad + found) / best),
            violations=int((cert.certificate_f < best).sum()),
            ablation=ablation(tr, Ct, radii), gelu=gelu_jacobian(tr, Ct, args.gelu_rows))
        if name in args.what_if:
            result[name]["what_if_over_ascent"] = med(what_if(tr, C, g0, G, radii) / best)
        print(markdown(name, result[name]), flush=True)
    return result


def markdown(name: str, r: dict) -> str:
    f = lambda xs: " | ".join(f"{x:.3g}" for x in xs)  # noqa: E731
    note = "SYNTHETIC (GPT-2 small's shapes, init std 0.08), not GPT-2" if name == "random-gpt2" else "embedded model"
    lines = [f"## {name} ({note}): d = {r['d']}, {r['n']} keys, {r['rows']} rows; medians over the rows", "",
             "| r | " + " | ".join(f"{x:g}" for x in r["radii"]) + " |", "| --- " * (len(r["radii"]) + 1) + "|",
             f"| certificate_f / ascent | {f(r['certificate_over_ascent'])} |",
             f"| SDP quadratic / ascent | {f(r['quadratic_over_ascent'])} |",
             f"| remainder / ascent | {f(r['remainder_over_ascent'])} |",
             f"| largest \\|f - q\\| found / ascent | {f(r['found_over_ascent'])} |",
             f"| remainder / largest \\|f - q\\| found | {f(r['remainder_over_found'])} |",
             f"| (SDP quadratic + found) / ascent | {f(r['exact_remainder_ratio'])} |", "",
             f"Violations (certificate below the ascent): {r['violations']}.", "",
             "Node-by-node remainder bound at rho = r (sum over the nodes; ablations are not bounds):", "",
             "| variant | " + " | ".join(f"{x:g}" for x in r["radii"]) + " |", "| --- " * (len(r["radii"]) + 1) + "|"]
    for label in ("computed", "a = 0", "Lam = 0", "a = Lam = 0"):
        lines.append(f"| {label} | {f(r['ablation'][label])} |")
    if "what_if_over_ascent" in r:
        lines += ["", "What if (an estimate, not a bound): certificate_f / ascent with a of LayerNorm 2's centred "
                  "input, the GELU inputs and the output LayerNorm's centred input at rho x the entrywise l1 of "
                  f"their centre Hessians: {f(r['what_if_over_ascent'])}"]
    lines += ["", "Largest ops (as computed): " + "; ".join(
        f"{nm} {f(v)}" for nm, v in r["ablation"]["largest ops"]), "",
        "GELU inputs at rho = 1e-4: the enclosure's a_k / rho against ||M_k||_{inf->1} of the centre Hessian:", "",
        "| k | a_k / rho | M_k norm, lower | M_k norm, upper | a_k / rho over upper | s_k = l1 norm of J_k |",
        "| --- | --- | --- | --- | --- | --- |"]
    for k, a, lo, up, s in r["gelu"]:
        lines.append(f"| {k} | {a:.4g} | {lo:.4g} | {up:.4g} | {a / up:.3g} | {s:.4g} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--n", type=int, default=16, help="keys (the passage's first n tokens)")
    ap.add_argument("--rows", type=int, default=4, help="specification rows (units)")
    ap.add_argument("--radii", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3])
    ap.add_argument("--steps", type=int, default=60, help="ascent steps")
    ap.add_argument("--starts", type=int, default=16, help="ascent starts")
    ap.add_argument("--gelu-rows", type=int, default=6, help="GELU inputs whose centre Hessian is computed")
    ap.add_argument("--what-if", nargs="*", default=["all-MiniLM-L6-v2"], choices=list(MODELS),
                    help="models of measurement 4 (d jvp passes of a Jacobian: minutes at d = 384)")
    args = common.parse(ap, QUICK, argv)
    return common.run("block_remainder_tightness", run, args)


if __name__ == "__main__":
    main()
