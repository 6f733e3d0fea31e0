"""Certify one attention head of your own model: no pipeline run needed.

    .venv/bin/python examples/certify_own_head.py [--layer 2] [--head 5] [--radius 0.002] [--mode fixed]

Reads one head of the embedded model all-MiniLM-L6-v2 with `transformers` (offline), builds the
`HeadProblem` by hand (row-vector weights (d, d_h), the normalized tokens the head reads, a linear
specification c of the head output) and computes, for the worst case max g over an l_inf ball of radius r
around every token: the exact certified bracket (fixed query), the first-order certificate, the
second-order certificate and CROWN. Replace `head_from_model` with your own weights: any (d, d_h)
W_Q, W_K, W_V, biases, tokens Z0 (n, d) and c (d_h,) will do.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def head_from_model(layer: int, head: int, text: str = "The quick brown fox jumps over the lazy dog."):
    """(W_Q, W_K, W_V, b_Q, b_K, b_V, Z0, W_O) of one head of all-MiniLM-L6-v2, row-vector orientation."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from attncert.pipeline.model_source import embedded_model_dir

    path = str(embedded_model_dir())
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    ids = tok(text, return_tensors="pt")["input_ids"][:, :8]
    with torch.no_grad():  # BERT (post-LN): the head reads the hidden state entering its layer
        Z0 = model(ids, output_hidden_states=True).hidden_states[layer][0].double().numpy()
    att = model.encoder.layer[layer].attention
    H = model.config.num_attention_heads
    dh = model.config.hidden_size // H
    cols = slice(head * dh, (head + 1) * dh)

    def w(lin):  # torch Linear stores (out, in); the row-vector W is (in, out)
        return lin.weight.detach().double().numpy().T[:, cols], lin.bias.detach().double().numpy()[cols]

    (W_Q, b_Q), (W_K, b_K), (W_V, b_V) = w(att.self.query), w(att.self.key), w(att.self.value)
    W_O = att.output.dense.weight.detach().double().numpy().T[cols, :]  # (d_h, d): head output -> residual
    return W_Q, W_K, W_V, b_Q, b_K, b_V, Z0, W_O


def build_problem(layer: int = 2, head: int = 5, radius: float = 0.002, mode: str = "fixed", query_index: int = 4,
                  seed: int = 0):
    """The certification unit: l_inf ball of `radius` around every token, specification c from W_O."""
    from attncert.head.problem import HeadProblem
    from attncert.head.specification import specification_direction

    W_Q, W_K, W_V, b_Q, b_K, b_V, Z0, W_O = head_from_model(layer, head)
    c = specification_direction(W_O, seed)  # a unit direction of the residual stream, pulled back through W_O
    return HeadProblem(W_Q, W_K, W_V, b_Q, b_K, b_V, Z0, query_index, c, radius, norm="linf", mode=mode)


def certify(p) -> dict:
    """Nominal value, exact bracket (fixed query) and the upper bounds on max g of one HeadProblem."""
    from attncert.baselines.linear_bound_baselines import baseline_upper_bound
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.certify.first_order_certificate import first_order_certificate
    from attncert.certify.second_order.certificate import second_order_certificate

    out = {"nominal": p.nominal_value()}  # g at the unperturbed tokens
    if p.mode == "fixed":
        exact = exact_worst_case(p)  # certified bracket [lo, hi] of max g; lo is attained by exact.witness
        out.update(exact_lo=exact.lo, exact_hi=exact.hi)
    out["first_order"] = first_order_certificate(p)
    cert = second_order_certificate(p)  # sound: from a dual-feasible point of the relaxation, rounded outward
    out.update(second_order=cert.value, solver=cert.solver, fallback=cert.fallback)
    out["crown"] = baseline_upper_bound(p, "crown").upper
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=int, default=2)
    ap.add_argument("--head", type=int, default=5)
    ap.add_argument("--radius", type=float, default=0.002)
    ap.add_argument("--mode", choices=["fixed", "varying"], default="fixed")
    args = ap.parse_args(argv)
    res = certify(build_problem(args.layer, args.head, args.radius, args.mode))
    print(f"all-MiniLM-L6-v2 layer {args.layer} head {args.head}, query token 4, l_inf radius {args.radius}, "
          f"{args.mode} query; max g is bracketed by exact_lo/hi and bounded above by the rest")
    for key, value in res.items():
        print(f"  {key:13s} {value:.10g}" if isinstance(value, float) else f"  {key:13s} {value}")
    return res


if __name__ == "__main__":
    main()
