"""Audit one row of the certification table step by step, printing the numbers of every check (docs/audit.md).

    .venv/bin/python examples/audit_one_row.py --model all-MiniLM-L6-v2 --layer 2 --row 0

Reads data/certify/{model}/layer{L}.csv, its certificates, the specification and the extracted weights (after a
`snakemake` run), and re-derives the row's five numbers the way `attncert audit` does, without a solver.
"""
import argparse
import csv
from pathlib import Path

import numpy as np
from flint import arb, ctx

from attncert.audit.dual_cone import dual_cone_margin
from attncert.audit.exact_upper import exact_upper_check
from attncert.audit.first_order_check import enclosure_margin, first_order_scalings, lp_margin
from attncert.audit.head_enclosure import PREC, LayerFiles
from attncert.audit.program_link import program_link
from attncert.audit.row_audit import reduction_margin
from attncert.audit.weak_duality import weak_duality_upper
from attncert.audit.witness_check import ball_margin, value_margin, witness_tokens
from attncert.certify.certificate_store import CertificateFile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--layer", type=int, default=2)
    ap.add_argument("--row", type=int, default=0)
    ap.add_argument("--data", default="data")
    a = ap.parse_args()
    ctx.prec = PREC
    base = Path(a.data) / "certify" / a.model
    with open(base / f"layer{a.layer}.csv", newline="") as fh:
        row = list(csv.DictReader(fh))[a.row]
    files = LayerFiles(Path(a.data) / "extract" / a.model / f"layer{a.layer}.npz", base / f"layer{a.layer}_spec.npz")
    radius, norm, mode = float(row["radius"]), row["norm"], row["mode"]
    print(f"unit: layer {a.layer}, head {row['head']}, prompt {row['prompt']}, query {row['query_pos']}, "
          f"r = {radius:g}, {norm}, {mode} query, n = {row['n_tokens']}")
    head = files.unit(int(row["head"]), int(row["prompt"]), int(row["query_pos"]))
    with CertificateFile(base / f"layer{a.layer}_certificates.npz") as store:
        cert = store.row(a.row)
        for name in ("second_order", "second_order_tight"):
            if "A_rows" in cert.get(name, {}):
                cert[name]["A"] = store.matrix(cert[name]["A_rows"], cert[name]["A_shape"])
    red = cert["reduction"]
    m, where = reduction_margin(head, red, radius, norm)
    print(f"1. reduction: s0_0 stored {red['s0'][0]!r}, from the weights {head.s0[0].str(20)}; "
          f"smallest margin of the error bounds {m:.3e} ({where})")
    fo, U = cert["first_order"], float(row["first_order"])
    m1, where = enclosure_margin(head, fo["l"], fo["u"], fo["W"], radius, norm, mode, first_order_scalings(fo))
    print(f"5a. first_order = {U!r}: intervals enclose the exact ranges (margin {m1:.3e}, {where}); "
          f"-F1(U) / sum e^s = {lp_margin(fo['l'], fo['u'], fo['W'], U):.3e} >= 0")
    for name in ("second_order", "second_order_tight"):
        so, value = cert[name], float(row[name])
        if str(so["kind"]) != "dual":
            print(f"{name} = {value!r}: the first-order bound (tie or fallback), {value - U:.3e} above it")
            continue
        link = program_link(so, red, radius, norm, mode, head, first_order_scalings(fo))
        if link.margin < 0:
            print(f"{name} = {value!r}: the program is not the construction's for this unit: {link.why}")
            continue
        cone, where = dual_cone_margin(so["z"], so["dims"])
        wd = weak_duality_upper(so["c"], so["A"], so["b"], so["z"], so["lo"], so["hi"], link.data_rel_err)
        origin, scale, tail = link.affine  # the rebuilt data's map to g, not the stored one
        certified = arb(origin) + arb(scale) * wd + arb(tail)
        dims = so["dims"]
        print(f"{name} = {value!r}: program {so['A'].shape[0]} rows x {so['A'].shape[1]} variables "
              f"({int(dims[0])} zero, {int(dims[1])} nonnegative, {int(dims[2])} exponential cones, "
              f"{len(dims) - 3} second-order cones), {so['A'].nnz} nonzeros; "
              f"rebuilt bit for bit: True")
        print(f"   2. dual in K^*: smallest margin {cone:.3e} ({where})")
        print(f"   3. (WD) in balls: {wd.str(17)} (objective units); g = {origin!r} + {scale!r} x (WD) + {tail!r} "
              f"= {certified.str(17)}; reported - certified upper end = {float((arb(value) - certified).lower()):.3e}")
    if mode == "fixed":
        Z = witness_tokens(head, cert["exact"])
        lo, hi = float(row["exact_lo"]), float(row["exact_hi"])
        print(f"4. exact_lo = {lo!r}: witness in the ball (margin {ball_margin(head, Z, radius, norm):.3e}); "
              f"g(witness) = {head.value(Z, 'fixed').str(20)}, minus exact_lo: {value_margin(head, Z, lo):.3e}")
        chk = exact_upper_check(head.s0, head.w0, head.u_s, head.u_w, radius, norm, hi)
        print(f"5b. exact_hi = {hi!r}: F(exact_hi) upper end {chk.f_upper:.3e} x e^{chk.scale:.4f} < 0 "
              f"(relative margin {chk.margin:.3e}, {chk.positive_tokens} tokens with a positive term)")
    print(f"bracket width {float(row['exact_hi']) - float(row['exact_lo']):.3e}" if mode == "fixed" else "")


if __name__ == "__main__":
    np.set_printoptions(precision=17)
    main()
