"""Cost and gap of every certifier against the number of attended keys n (a benchmark, not a test).

Model: the SYNTHETIC `random-gpt2` (GPT-2 small's shapes, seeded random weights, init std 0.08 so the score
widths are GPT-2-like; not GPT-2), layer 5, the committed public-domain passage `data/long_context_passage.txt`
(1,024 tokens). A unit attends to n keys: query position n - 1 of the causal head.

Methods per unit (each as far as it runs in about 60 s per unit; where it cannot, the table says why):
exact worst case (fixed query), first-order certificate, second-order certificate (paper-like and tight:
`second_order_certificate`, which uses the separable path above 48 keys), the monolithic program of
`second_order.fixed_query.monolithic` ("before": every n up to --before-max), CROWN and alpha-CROWN
(`bound_propagation` head
network) up to --crown-max, and the varying query up to --varying-max: its second-order certificate (both variants,
`varying_query.long` above 16 tokens), the cvxpy program with the d-dimensional witness up to --before-varying-max,
CROWN
and alpha-CROWN up to --crown-max-varying, each with its gap against the best ascent value and its peak memory.

Relative gap: (bound - reference) / (reference - nominal), reference = the exact bracket's upper end (fixed
query) or the best ascent value (varying query). Soundness: every bound must be >= the reference; a
violation is counted and printed. Fitted growth exponent: slope of log(median seconds) on log(n) over
n in [64, 1024].

    .venv/bin/python -m bench.context_length [--quick] [--heads 3] [--ns 512 1024] [--part NAME]
    .venv/bin/python -m bench.context_length --no-fixed --varying-max 1024 --heads 2 --part varying

Writes context_length[-PART][-quick].md / .json (bench/common.py) and the figure .png beside them;
`--replot JSON` redraws the figure of a stored result; `--merge JSON ... --part NAME` writes one result (table,
exponents, figure) from the rows of stored results run in parts (e.g. 12 heads at 16-256 keys and 4 at 1,024).
"""
from __future__ import annotations

import os

from bench import common  # noqa: E402

common.single_threaded_blas()
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = common.REPO
NS = (2, 5, 9, 16, 32, 64, 128, 256, 512, 1024)
QUICK = dict(ns=[5, 16, 64, 256, 1024], heads=1, radii=[0.002], norms=["linf"], before_max=64, crown_max=16,
             varying_max=16, before_varying_max=16, crown_max_varying=5)
LAYER = 5
INIT_STD = 0.08


def relative_gap(row: dict, method: str) -> float:
    """(bound - reference) / (reference - nominal) of one unit's row: the relative gap every table here reports."""
    return (row[method] - row["reference"]) / row["movement"]


def head_arrays(n_tokens: int):
    from attncert.model.extraction import extract_layers, load_model, tokenize_prompts

    loaded = load_model({"source": "random-gpt2", "family": "gpt2", "seed": 0, "init_std": INIT_STD})
    text = (REPO / "data" / "long_context_passage.txt").read_text()
    ids = tokenize_prompts(loaded.tokenizer, [text], n_tokens)
    return extract_layers(loaded.model, "gpt2", ids, [LAYER])[LAYER]


def problem(arrays, spec, qps, head, n, radius, norm, mode):
    from attncert.head.units import Unit, head_problem

    return head_problem(arrays, spec, qps, Unit(LAYER, head, 0, n - 1, radius, norm, mode))


def timed(fn):
    t0 = time.perf_counter()
    try:
        out = fn()
    except MemoryError as e:
        return math.nan, time.perf_counter() - t0, f"MemoryError {e}"
    return out, time.perf_counter() - t0, "ok"


def _second_order_call(args):
    """In a fresh interpreter: one second-order certificate; (value, seconds, status, peak memory above the
    interpreter's level before the call, MB). The solver allocates outside Python, so the kernel's high-water mark
    (VmHWM) is read, not tracemalloc; a fresh process so that no earlier call's pages are reused."""
    problem, name = args
    common.single_threaded_blas()
    from attncert.certify.second_order.certificate import second_order_certificate
    from attncert.certify.second_order.varying_query.factored import second_order_varying_factored
    from attncert.head.reduced_geometry import reduced_geometry

    fn = {
        "second_order": lambda: second_order_certificate(problem).value,
        "second_order_tight": lambda: second_order_certificate(problem, upper_cone=True).value,
        "before_second_order": lambda: second_order_varying_factored(problem, reduced_geometry(problem)).value,
        "before_second_order_tight": lambda: (
            second_order_varying_factored(problem, reduced_geometry(problem), upper_cone=True).value
        ),
    }[name]
    start = common.process_status_mb("VmRSS")
    val, sec, status = timed(fn)
    return val, sec, status, common.process_status_mb("VmHWM") - start


def isolated(problem, name):
    """`_second_order_call` in a spawned process (one call per process)."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(_second_order_call, ((problem, name),))


def run(args) -> dict:
    from attncert.baselines.linear_bound_baselines import baseline_upper_bound
    from attncert.certify.best_feasible_ascent import best_feasible_ascent
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.certify.first_order_certificate import first_order_certificate
    from attncert.certify.second_order.certificate import second_order_certificate
    from attncert.certify.second_order.fixed_query.monolithic import second_order_fixed
    from attncert.head.reduced_geometry import reduced_geometry
    from attncert.head.units import specification_vectors
    from tqdm import tqdm

    ns, radii, norms = tuple(args.ns), tuple(args.radii), tuple(args.norms)
    arrays = head_arrays(max(ns))
    qps = [n - 1 for n in ns]
    spec = specification_vectors(arrays, LAYER, qps, 0)
    rows = []
    jobs = [(h, n, r, nm) for n in ns for h in range(args.heads) for r in radii for nm in norms]
    for h, n, r, nm in tqdm([] if args.no_fixed else jobs, desc="fixed-query units"):
        p = problem(arrays, spec, qps, h, n, r, nm, "fixed")
        row = dict(mode="fixed", head=h, n=n, radius=r, norm=nm)
        ex, row["exact_s"], _ = timed(lambda: exact_worst_case(p))
        ref, nom = ex.hi, p.nominal_value()
        row["reference"], row["movement"] = ref, ref - nom
        methods = {"first_order": lambda: first_order_certificate(p),
                   "second_order": lambda: second_order_certificate(p).value,
                   "second_order_tight": lambda: second_order_certificate(p, upper_cone=True).value}
        if n <= args.before_max:
            methods["before_second_order"] = lambda: second_order_fixed(p, reduced_geometry(p)).value
            methods["before_second_order_tight"] = lambda: (
                second_order_fixed(p, reduced_geometry(p), upper_cone=True).value
            )
        if n <= args.crown_max:
            methods["crown"] = lambda: baseline_upper_bound(p, "crown").upper
            methods["alpha_crown"] = lambda: baseline_upper_bound(p, "alpha_crown").upper
        for name, fn in methods.items():
            val, sec, status = timed(fn)
            row[name], row[f"{name}_s"], row[f"{name}_status"] = val, sec, status
        for name in ("crown", "alpha_crown"):
            if n > args.crown_max:
                row[f"{name}_status"] = (f"not run: n > {args.crown_max} (the bound_propagation head network's dense "
                                         "coefficients need about n^2 d memory: MemoryError from n = 128)")
        rows.append(row)
    vjobs = [(h, n, r, nm) for n in ns if n <= args.varying_max and not args.no_varying for h in range(args.heads)
             for r in radii for nm in norms]
    for h, n, r, nm in tqdm(vjobs, desc="varying-query units"):
        p = problem(arrays, spec, qps, h, n, r, nm, "varying")
        row = dict(mode="varying", head=h, n=n, radius=r, norm=nm)
        best, row["ascent_s"], _ = timed(lambda: best_feasible_ascent(p, restarts=4, steps=60, seed=0).value)
        row["reference"], row["movement"] = best, best - p.nominal_value()
        methods = {"first_order": lambda: first_order_certificate(p), "second_order": None, "second_order_tight": None}
        if n <= args.before_varying_max:  # the cvxpy program with the d-dimensional witness (the path up to 16 tokens)
            methods["before_second_order"] = methods["before_second_order_tight"] = None
        if n <= args.crown_max_varying:
            methods["crown"] = lambda: baseline_upper_bound(p, "crown").upper
            methods["alpha_crown"] = lambda: baseline_upper_bound(p, "alpha_crown").upper
        for name, fn in methods.items():
            if name in ("first_order", "crown", "alpha_crown"):
                row[name], row[f"{name}_s"], row[f"{name}_status"] = timed(fn)
            else:
                row[name], row[f"{name}_s"], row[f"{name}_status"], row[f"{name}_mb"] = isolated(p, name)
        for name in ("crown", "alpha_crown"):
            if n > args.crown_max_varying:
                row[f"{name}_status"] = (f"not run for the varying query: n > {args.crown_max_varying} (every token "
                                         "perturbed: the head network's dense coefficients grow as n^2 d; MemoryError "
                                         "from n = 64)")
        rows.append(row)
    return dict(rows=rows, ns=list(ns), quick=bool(args.quick))


METHODS = ("exact", "first_order", "second_order", "second_order_tight", "before_second_order",
           "before_second_order_tight", "crown", "alpha_crown")


def summarize(data: dict) -> dict:
    out = {"fixed": {}, "varying": {}, "exponents": {}, "violations": []}
    for row in data["rows"]:
        for m in METHODS:
            if m == "exact" or not isinstance(row.get(m), float) or not math.isfinite(row[m]):
                continue
            tol = 1e-9 * (1.0 + abs(row["reference"]))
            if row[m] < row["reference"] - tol:
                out["violations"].append(dict(method=m, **{k: row[k] for k in ("mode", "head", "n", "radius", "norm")},
                                              bound=row[m], reference=row["reference"]))
    for mode in ("fixed", "varying"):
        for n in data["ns"]:
            sub = [r for r in data["rows"] if r["mode"] == mode and r["n"] == n]
            if not sub:
                continue
            cell = {}
            for m in METHODS:
                key = f"{m}_s"
                secs = [r[key] for r in sub if key in r and (m == "exact" or math.isfinite(r.get(m, math.nan)))]
                if not secs:
                    continue
                cell[m] = dict(median_s=float(np.median(secs)), max_s=float(np.max(secs)))
                mbs = [r[f"{m}_mb"] for r in sub if f"{m}_mb" in r and math.isfinite(r.get(m, math.nan))]
                if mbs:
                    cell[m]["median_mb"], cell[m]["max_mb"] = float(np.median(mbs)), float(np.max(mbs))
                for nm in sorted({r["norm"] for r in sub}):
                    for rad in sorted({r["radius"] for r in sub}):
                        rel = [relative_gap(r, m) for r in sub if m != "exact"
                               and r["norm"] == nm and r["radius"] == rad and r["movement"] > 0
                               and math.isfinite(r.get(m, math.nan))]
                        if rel:
                            cell[m][f"rel_gap_{nm}_r{rad:g}"] = float(np.median(rel))
                fb = [r for r in sub if str(r.get(f"{m}_status", "ok")) != "ok"]
                cell[m]["failed"] = len(fb)
                if m != "exact":
                    for rad in sorted({r["radius"] for r in sub}):
                        rel = [relative_gap(r, m) for r in sub
                               if r["radius"] == rad and r["movement"] > 0 and math.isfinite(r.get(m, math.nan))]
                        if rel:
                            cell[m][f"rel_gap_r{rad:g}"] = float(np.median(rel))
            out[mode][n] = cell
    for mode in ("fixed", "varying"):
        for m in METHODS:
            for what, key in (("time", "median_s"), ("memory", "median_mb")):
                pts = [(n, c[m][key]) for n, c in out[mode].items() if m in c and key in c[m] and 64 <= n <= 1024]
                if len(pts) >= 2:
                    x, y = np.log([p[0] for p in pts]), np.log([max(p[1], 1e-6) for p in pts])
                    name = m if (mode, what) == ("fixed", "time") else f"{mode} {what}: {m}"
                    out["exponents"][name] = float(np.polyfit(x, y, 1)[0])
    return out


MODEL = f"random-gpt2 (SYNTHETIC, not GPT-2), init std {INIT_STD}, layer {LAYER}"
PROMPT = "data/long_context_passage.txt"


LABELS = {"exact": "exact worst case", "first_order": "first order", "second_order": "second order",
          "second_order_tight": "second order, tight", "before_second_order": "second order, monolithic program",
          "before_second_order_tight": "tight, monolithic program", "crown": "CROWN", "alpha_crown": "alpha-CROWN"}
# the varying query's "before" is the cvxpy program with the d-dimensional witness (`varying_query.factored`)
VARYING_LABELS = dict(LABELS, before_second_order="second order, factored program",
                      before_second_order_tight="tight, factored program")


def labels(mode: str) -> dict:
    """The column and legend labels of a query mode."""
    return VARYING_LABELS if mode == "varying" else LABELS


def markdown(data: dict, summ: dict) -> str:
    lines = [f"Certifier cost and gap vs the number of keys n. Model: {MODEL}; prompt `{PROMPT}`. Not a GPT-2 result.",
             ""]
    radii = sorted({r["radius"] for r in data["rows"]})
    for mode in ("fixed", "varying"):
        if not summ[mode]:
            continue
        lines += [
            f"{mode} query: median seconds per unit (relative gap at " + ", ".join(f"r = {r:g}" for r in radii) + ")",
            "",
        ]
        present = [m for m in METHODS if any(m in c for c in summ[mode].values())]
        lines.append("| n | " + " | ".join(labels(mode)[m] for m in present) + " |")
        lines.append("| --- " * (len(present) + 1) + "|")
        for n, cell in summ[mode].items():
            vals = []
            for m in present:
                if m not in cell:
                    vals.append("—")
                    continue
                gaps = " / ".join(f"{cell[m][f'rel_gap_r{r:g}']:.3g}" for r in radii if f"rel_gap_r{r:g}" in cell[m])
                mem = f", {cell[m]['median_mb']:.0f} MB" if "median_mb" in cell[m] else ""
                vals.append(f"{cell[m]['median_s']:.3g} s{mem}" + (f" ({gaps})" if gaps else ""))
            lines.append(f"| {n} | " + " | ".join(vals) + " |")
        lines.append("")
    notes = sorted({r.get(f"{m}_status") for r in data["rows"] for m in ("crown", "alpha_crown")
                    if str(r.get(f"{m}_status", "ok")) != "ok"} - {None})
    if notes:
        lines += ["Where CROWN / alpha-CROWN have no entry: " + "; ".join(notes), ""]
    norms = sorted({r["norm"] for r in data["rows"]})
    if summ["varying"] and len(norms) > 1:
        lines += ["varying query, relative gap per norm (median; " + ", ".join(f"r = {r:g}" for r in radii) + ")", ""]
        present = [m for m in METHODS if any(m in c for c in summ["varying"].values())]
        lines.append("| n | " + " | ".join(f"{VARYING_LABELS[m]}, {nm}" for m in present for nm in norms) + " |")
        lines.append("| --- " * (len(present) * len(norms) + 1) + "|")
        for n, cell in summ["varying"].items():
            vals = [" / ".join(f"{cell[m][f'rel_gap_{nm}_r{r:g}']:.3g}" for r in radii
                               if f"rel_gap_{nm}_r{r:g}" in cell.get(m, {})) or "—" for m in present for nm in norms]
            lines.append(f"| {n} | " + " | ".join(vals) + " |")
        lines.append("")
    label = lambda k: LABELS.get(k, k.split(": ")[0] + ": " + LABELS.get(k.split(": ")[-1], k))  # noqa: E731
    lines += [
        "Fitted growth exponent over n in [64, 1024] (of the median seconds, and of the median peak memory "
        "above the call's start): " + ", ".join(f"{label(m)} {e:.2f}" for m, e in summ["exponents"].items()),
        "",
        f"Soundness violations (a bound below the exact bracket or the best ascent value): {len(summ['violations'])}",
        "",
    ]
    return "\n".join(lines)


def figure(summ: dict, path: Path) -> dict:
    """One row per query mode present: median seconds per unit, the median relative gap at r = 0.002 (the varying
    query per norm: l2 solid, linf dotted), and the second-order gaps' growth (each radius's median relative gap over
    its value at the smallest n; r = 0.002 solid, other radii dashed, with the 1.2x growth target), against n on
    log-log axes. Returns the number of data curves drawn per (mode, panel)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in ("fixed", "varying") if summ[m]] or ["fixed"]
    fig, axes = plt.subplots(len(modes), 3, figsize=(15, 3.8 * len(modes) + 0.6), squeeze=False)
    growth = {mode: 0 for mode in modes}
    for row, mode in zip(axes, modes):
        # the varying query per norm; results stored before the per-norm medians: the median over norms
        split = mode == "varying" and any(k.startswith("rel_gap_l2_") for c in summ[mode].values() for p in c.values()
                                          for k in p)
        norms = ("l2", "linf") if split else (None,)
        for k, m in enumerate(METHODS):
            pts = sorted((int(n), c[m]) for n, c in summ[mode].items() if m in c)
            if not pts:
                continue
            style = dict(color=f"C{k}", ms=4, ls="--" if m.startswith("before") else "-", marker="o")
            row[0].loglog([p[0] for p in pts], [p[1]["median_s"] for p in pts], label=labels(mode)[m], **style)
            for nm in norms:
                key = f"rel_gap_{nm}_r0.002" if nm else "rel_gap_r0.002"
                gaps = [(n, p[key]) for n, p in pts if p.get(key, 0) > 0]
                if gaps and m != "exact":
                    ls = ":" if nm == "linf" else style["ls"]
                    row[1].loglog([g[0] for g in gaps], [g[1] for g in gaps], **{**style, "ls": ls})
            if m.startswith("second_order"):
                radii = sorted({k.removeprefix("rel_gap_r") for _, p in pts for k in p if k.startswith("rel_gap_r")},
                               key=float)
                for rad in radii:
                    gaps = [(n, p[f"rel_gap_r{rad}"]) for n, p in pts if p.get(f"rel_gap_r{rad}", 0) > 0]
                    if len(gaps) >= 2:
                        row[2].semilogx([g[0] for g in gaps], [g[1] / gaps[0][1] for g in gaps],
                                        **{**style, "ls": "-" if rad == "0.002" else "--"})
                        growth[mode] += 1
        what = "varying query, every token perturbed" if mode == "varying" else "fixed query"
        row[0].set_title(f"cost ({what})", fontsize=10)
        row[1].set_title(f"gap / movement ({what}" + ("; l2 solid, linf dotted)" if split else ")"),
                         fontsize=9)
        row[0].set_ylabel("median seconds per unit")
        row[1].set_ylabel("median relative gap, r = 0.002")
        row[2].axhline(1.2, color="0.5", lw=0.8, ls=":", label="1.2x growth target")
        row[2].set_title("second-order gap / its value at the smallest n\n(r = 0.002 solid, other radii dashed)",
                         fontsize=9)
        row[2].set_ylabel("growth of the median relative gap")
        ticks = sorted({int(n) for n in summ[mode]})
        for ax in row:
            ax.set_xticks(ticks, [str(t) for t in ticks], minor=False)
            ax.set_xticks([], minor=True)
            ax.set_xlabel("attended keys n")
            ax.grid(True, which="both", alpha=0.3)
    handles = {}
    for ax in [*axes[:, 0], *axes[:, 2]]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"random-gpt2 (SYNTHETIC, not GPT-2), init std {INIT_STD}, layer {LAYER}", fontsize=10)
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight(), 1, 0.96))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    drawn = {(mode, panel): len(row[k].get_lines()) for row, mode in zip(axes, modes)
             for k, panel in enumerate(("cost", "gap"))}
    return drawn | {(mode, "growth"): growth[mode] for mode in modes}


def replot(json_path: Path) -> None:
    """Redraw the figure of a stored result (its JSON) without running anything."""
    record = json.loads(json_path.read_text())
    figure(record["result"]["summary"], json_path.with_suffix(".png"))


def merged(paths: list) -> dict:
    """The rows of stored results (their JSONs) as one result, each row naming the result it came from; a unit in
    two of them is refused."""
    rows, seen = [], {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["result"]["rows"]:
            unit = (row["mode"], row["head"], row["n"], row["radius"], row["norm"])
            if unit in seen:
                raise SystemExit(f"{Path(path).name} and {seen[unit]} both hold the unit {unit}: merge disjoint parts")
            seen[unit] = Path(path).name
            rows.append(dict(row, source=Path(path).name))
    return dict(rows=rows, ns=sorted({r["n"] for r in rows}), quick=False)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=list(NS), help="numbers of keys")
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--radii", type=float, nargs="+", default=[0.002, 0.02])
    ap.add_argument("--norms", nargs="+", choices=["linf", "l2"], default=["linf", "l2"])
    ap.add_argument("--before-max", type=int, default=256, help="largest n for the monolithic program")
    ap.add_argument("--crown-max", type=int, default=64, help="largest n for CROWN / alpha-CROWN")
    ap.add_argument("--varying-max", type=int, default=64, help="largest n for the varying query")
    ap.add_argument("--no-varying", action="store_true", help="fixed query only")
    ap.add_argument("--no-fixed", action="store_true", help="varying query only")
    ap.add_argument("--before-varying-max", type=int, default=64,
                    help="largest n for the varying query's cvxpy program (d-dimensional witness)")
    ap.add_argument("--crown-max-varying", type=int, default=32, help="largest n for CROWN on the varying query")
    ap.add_argument("--part", help="a name for this result (context_length-PART)")
    ap.add_argument("--replot", type=Path, help="only redraw the figure of a stored result JSON")
    ap.add_argument("--merge", type=Path, nargs="+", help="stored result JSONs (disjoint units) to write as one result")
    return ap


def main(args) -> dict:
    warnings.filterwarnings("ignore")
    data = merged(args.merge) if args.merge else run(args)
    summ = summarize(data)
    print(markdown(data, summ))
    args.results.mkdir(parents=True, exist_ok=True)
    figure(summ, args.results / f"{common.result_name('context_length', args, args.part)}.png")
    return dict(summary=summ, **data)


if __name__ == "__main__":
    _args = common.parse(build_parser(), QUICK)
    if _args.replot:
        replot(_args.replot)
    else:
        common.run("context_length", main, _args, _args.part)
