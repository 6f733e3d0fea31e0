"""Certify one attention head of a checkpoint: no pipeline run needed.

    .venv/bin/python examples/certify_own_head.py [--model-dir DIR] [--layer 2] [--head 5] [--radius 0.002] [--mode
    fixed]

The same library path as `attncert certify` (which has every option): `checkpoint_head` reads one head of a
local checkpoint (default: the embedded all-MiniLM-L6-v2) on a text, with every choice checked, and returns
the `HeadProblem` (row-vector W_Q, W_K, W_V (d, d_h), biases, the normalized tokens Z0 the head reads, query
index, specification c, radius, norm, mode); `head_bounds` computes, for max g over the l_inf ball, the exact
certified bracket (fixed query), the first-order certificate, both second-order certificates and CROWN.
With weights of your own, build `attncert.head.problem.HeadProblem(W_Q, W_K, W_V, b_Q, b_K, b_V, Z0,
query_index, c, radius)` directly and pass it to `head_bounds`.
"""
from __future__ import annotations

import argparse
import sys

from attncert.cli import one_blas_thread

one_blas_thread()  # as `attncert certify` and the pipeline: a certificate's last digits depend on the BLAS threads

from attncert.checkpoint.checkpoint_input import CheckpointInputError  # noqa: E402 (after the thread count)
from attncert.checkpoint.head_bounds import head_bounds  # noqa: E402
from attncert.checkpoint.one_head import HeadRequest, checkpoint_head  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", help="a save_pretrained folder (default: the embedded all-MiniLM-L6-v2)")
    ap.add_argument("--layer", type=int, default=2)
    ap.add_argument("--head", type=int, default=5)
    ap.add_argument("--radius", type=float, default=0.002)
    ap.add_argument("--mode", choices=["fixed", "varying"], default="fixed")
    a = ap.parse_args(argv)
    try:
        p = checkpoint_head(HeadRequest(model_dir=a.model_dir, layer=a.layer, head=a.head, radius=a.radius,
                                        mode=a.mode))
    except (CheckpointInputError, ValueError) as e:  # one line naming the valid range, e.g. --head 12
        print(f"certify_own_head: {e}", file=sys.stderr)
        return 2
    res = head_bounds(p)
    print(f"layer {a.layer} head {a.head}, query token 4, l_inf radius {a.radius}, {a.mode} query; "
          "max g is bracketed by exact_lo/hi and bounded above by the rest")
    for key in ("nominal", "exact_lo", "exact_hi", "first_order", "second_order", "second_order_tight", "crown"):
        print(f"  {key:19s} {res[key]:.10g}" if res[key] is not None else f"  {key:19s} —")
    return 0


if __name__ == "__main__":
    sys.exit(main())
