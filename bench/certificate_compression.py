"""Write and read time and size of one layer's certificate file, deflate against LZMA.

    python -m bench.certificate_compression [--file data/certify/all-MiniLM-L6-v2/layer0_certificates.npz] [--reps 3]

The file of a finished run is read once (`CertificateFile`) and written again through
`write_certificates` with each compression, alternating, `--reps` times each; every rewrite is checked
to hold the same arrays bit for bit. Read time: every row of the file through `CertificateFile.row`
(what the audit does). Cost grows linearly in the number of members (a layer: about 15 per unit).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from attncert.certify.certificate_store import CertificateFile, write_certificates
from bench import common

QUICK = {"reps": 1}
COMPRESSIONS = {"deflate": zipfile.ZIP_DEFLATED, "lzma": zipfile.ZIP_LZMA}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, default=common.REPO / "data/certify/all-MiniLM-L6-v2/layer0_certificates.npz",
                    help="a layer's certificate file from a finished run")
    ap.add_argument("--reps", type=int, default=3, help="writes and reads per compression")
    return ap


def _identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaN payloads included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def read_all(path: Path) -> float:
    t0 = time.perf_counter()
    with CertificateFile(path) as cf:
        for r in cf.rows:
            cf.row(r)
    return time.perf_counter() - t0


def main(args) -> dict:
    if not args.file.is_file():
        raise SystemExit(
            f"bench.certificate_compression: {args.file} not found; fix: run "
            f"`snakemake --cores all {args.file.relative_to(common.REPO) if args.file.is_absolute() else args.file}` "
            f"first"
        )
    with CertificateFile(args.file) as cf:
        entries = {k: cf.array(k) for k in cf.keys}
    print(f"{args.file.name}: {len(entries)} arrays (byte-plane parts not counted)\n")
    out = {name: {"write_s": [], "read_s": [], "bytes": None} for name in COMPRESSIONS}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            order = list(COMPRESSIONS) if rep % 2 == 0 else list(COMPRESSIONS)[::-1]
            for name in order:
                path = Path(tmp) / f"{name}.npz"
                t0 = time.perf_counter()
                write_certificates(path, entries, compression=COMPRESSIONS[name])
                out[name]["write_s"].append(time.perf_counter() - t0)
                out[name]["read_s"].append(read_all(path))
                out[name]["bytes"] = path.stat().st_size
                with CertificateFile(path) as back:
                    same = all(_identical(back.array(k), v) for k, v in entries.items())
                if not same:
                    raise SystemExit(f"bench.certificate_compression: {name} did not round-trip bit for bit")
    print("| compression | write s (median) | read all rows s (median) | MB |")
    print("| --- | ---: | ---: | ---: |")
    for name, r in out.items():
        r["write_median_s"], r["read_median_s"] = statistics.median(r["write_s"]), statistics.median(r["read_s"])
        print(f"| {name} | {r['write_median_s']:.2f} | {r['read_median_s']:.2f} | {r['bytes'] / 1e6:.2f} |")
    d, z = out["deflate"], out["lzma"]
    ratios = {"write_lzma_over_deflate": z["write_median_s"] / d["write_median_s"],
              "read_lzma_over_deflate": z["read_median_s"] / d["read_median_s"],
              "size_deflate_over_lzma": d["bytes"] / z["bytes"]}
    print(f"\nwrite: lzma / deflate {ratios['write_lzma_over_deflate']:.1f}x; read: lzma / deflate "
          f"{ratios['read_lzma_over_deflate']:.2f}x; size: deflate / lzma {ratios['size_deflate_over_lzma']:.3f}")
    return {"file": args.file, "arrays": len(entries), "reps": args.reps, "by_compression": out, "ratios": ratios}


if __name__ == "__main__":
    common.run("certificate_compression", main, common.parse(build_parser(), QUICK))
