"""What the SDP-rounding starts add to the ascent maximum of f (a benchmark): `analyze_transition` before and after.

The block stage reports its certificate over `ascent_max`, the best value of f found by multi-start projected
ascent (`block.residual.ascent`; a lower bound on max f over the box, the tightness reference). Its starts were
+-u*, +-u2 of the box-QP search on the centre Hessian and random vertices; `sdp_rounding_starts` adds +- the best
vertices of the hyperplane rounding of the SDP relaxation of the centre quadratic (`block.sdp_rounding`). Per
transition, `analyze_transition` runs twice with the default configuration's block settings (radii, qp_starts,
sdp_iterations, ascent_restarts, ascent_steps, seed): sdp_rounding_starts = 0 (before) and
--rounding-starts (after); alpha-CROWN is off (it does not depend on the starts). Compared per (unit, radius):

* ascent_max after / before (>= 1 up to rounding: the before starts are a subset of the after starts, same seed),
  how many (unit, radius) improve (ratio > 1 + 1e-9), the median and largest ratio;
* certificate_f / ascent_max before and after (medians; the certificate itself must not change: checked);
* CPU seconds per transition: the phase `sdp_rounding` and the ascent phase before and after (more starts).

Transitions: the default stage's construction (workflow/config/default.yaml: the first n_prompts prompts of
data/prompts.txt at max_tokens tokens, prompt `block.prompt`, query position `block.query_position`, the
specification rows of `head.specification.specification_rows` with spec_seed) on
* all-MiniLM-L6-v2 (embedded; the default model), every head of block l+1;
* `random-gpt2` (SYNTHETIC: GPT-2 small's shapes, seeded random weights, init std 0.08; not GPT-2), --gpt2-heads
  heads of block l+1.

    .venv/bin/python -m bench.block_ascent_starts [--quick] [--minilm-transitions 0 1 2 3 4]
                                                  [--gpt2-transitions 0 5 10] [--gpt2-heads 4]

Writes block_ascent_starts[-quick].md / .json (bench/common.py).
"""
from __future__ import annotations

import os

from bench import common  # noqa: E402

common.single_threaded_blas()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import math  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from bench.block_certificate_scaling import MODELS  # noqa: E402

REPO = common.REPO
CONFIG = "workflow/config/default.yaml"
QUICK = dict(minilm_transitions=[2], gpt2_transitions=[], minilm_heads=3, ascent_steps=40)
IMPROVED = 1e-9                        # relative gain above which a (unit, radius) counts as improved


def default_settings() -> dict:
    """The default configuration's prompt, tokens and block settings."""
    cfg = yaml.safe_load((REPO / CONFIG).read_text())
    return dict(prompts=cfg["prompts"], n_prompts=cfg["n_prompts"], max_tokens=cfg["max_tokens"],
                spec_seed=cfg["spec_seed"], block=cfg["block"])


def stage_transitions(name: str, layers: list[int], heads: int | None, s: dict):
    """(layer, BlockTransition, C, heads) per layer: the block stage's construction (workflow/scripts/
    block_transition.py) from the extraction of the default prompts."""
    from attncert.block.build import transition_from_arrays
    from attncert.configuration.config import read_prompts
    from attncert.head.specification import specification_rows
    from attncert.model.extraction import extract_layers, load_model, tokenize_prompts

    loaded = load_model(MODELS[name]["cfg"])
    ids = tokenize_prompts(loaded.tokenizer, read_prompts(REPO / s["prompts"], s["n_prompts"]), s["max_tokens"])
    arrays = extract_layers(loaded.model, MODELS[name]["family"], ids, sorted({x + k for x in layers for k in (0, 1)}))
    prompt, position = int(s["block"]["prompt"]), int(s["block"]["query_position"])
    for L in layers:
        nxt = arrays[L + 1]
        units = list(range(nxt["W_V"].shape[0] if heads is None else heads))
        tr = transition_from_arrays(arrays[L], nxt, L, prompt, position)
        C = specification_rows(nxt["W_V"], nxt["W_O"], L + 1, units, prompt, position, s["spec_seed"])
        yield L, tr, C, units


def run_pair(tr, C, b: dict, rounding_starts: int, ascent_steps: int) -> dict:
    """`analyze_transition` with sdp_rounding_starts = 0 and = rounding_starts: ascent_max, certificate_f
    (m, R) and the timings of both."""
    from attncert.block.residual import analyze_transition

    out = {}
    for label, k in (("before", 0), ("after", rounding_starts)):
        rows, timings = analyze_transition(
            tr, C, b["radii"], qp_starts=b["qp_starts"], sdp_iterations=b["sdp_iterations"],
            ascent_restarts=b["ascent_restarts"], ascent_steps=ascent_steps, seed=b["seed"],
            alpha_crown=False, sdp_rounding_starts=k)
        R = len(b["radii"])
        out[label] = dict(
            ascent_max=np.array([r["ascent_max"] for r in rows]).reshape(-1, R),
            certificate_f=np.array([r["certificate_f"] for r in rows]).reshape(-1, R),
            second_order_max=np.array([r["second_order_max"] for r in rows]).reshape(-1, R),
            status=sorted({r["status"] for r in rows}), timings=timings)
    return out


def compare(pair: dict, radii: list[float]) -> dict:
    """Per radius: ratios after / before of the ascent maximum, improvements, certificate / ascent; CPU seconds."""
    b, a = pair["before"], pair["after"]
    ratio = a["ascent_max"] / b["ascent_max"]
    return dict(
        ratio=ratio.tolist(),
        improved=[int((ratio[:, j] > 1 + IMPROVED).sum()) for j in range(len(radii))],
        worse=[int((ratio[:, j] < 1 - IMPROVED).sum()) for j in range(len(radii))],
        median_ratio=np.median(ratio, 0).tolist(), max_ratio=ratio.max(0).tolist(),
        cert_over_ascent_before=np.median(b["certificate_f"] / b["ascent_max"], 0).tolist(),
        cert_over_ascent_after=np.median(a["certificate_f"] / a["ascent_max"], 0).tolist(),
        ascent_over_second_order_after=np.median(a["ascent_max"] / a["second_order_max"], 0).tolist(),
        certificate_unchanged=bool(np.array_equal(a["certificate_f"], b["certificate_f"])),
        status=sorted(set(a["status"]) | set(b["status"])),
        sdp_rounding_s=a["timings"]["sdp_rounding"], ascent_s_before=b["timings"]["ascent"],
        ascent_s_after=a["timings"]["ascent"], total_s_before=sum(b["timings"].values()),
        total_s_after=sum(a["timings"].values()))


def run(args) -> dict:
    import torch

    torch.set_num_threads(1)
    s = default_settings()
    b = s["block"]
    radii = [float(r) for r in args.radii]
    b["radii"] = radii
    plan = [("all-MiniLM-L6-v2", args.minilm_transitions, args.minilm_heads),
            ("random-gpt2", args.gpt2_transitions, args.gpt2_heads)]
    out = []
    for name, layers, heads in plan:
        if not layers:
            continue
        for L, tr, C, units in stage_transitions(name, layers, heads, s):
            rec = dict(model=name, transition=L, d=tr.d, keys=len(tr.keys), units=len(units), radii=radii,
                       **compare(run_pair(tr, C, b, args.rounding_starts, args.ascent_steps), radii))
            out.append(rec)
            print(line(rec), flush=True)
    return dict(settings=dict(block=b, rounding_starts=args.rounding_starts, ascent_steps=args.ascent_steps,
                              prompts=s["prompts"], n_prompts=s["n_prompts"], max_tokens=s["max_tokens"]),
                transitions=out)


def line(r: dict) -> str:
    return (f"[{r['model']} transition {r['transition']}] improved {sum(r['improved'])} / "
            f"{r['units'] * len(r['radii'])}, largest ratio {max(r['max_ratio']):.6g}, sdp_rounding "
            f"{r['sdp_rounding_s']:.2f} s, ascent {r['ascent_s_before']:.2f} -> {r['ascent_s_after']:.2f} s")


def _f(xs, fmt=".6g") -> str:
    return " / ".join(format(x, fmt) for x in xs)


def markdown(result: dict) -> str:
    st, rows = result["settings"], result["transitions"]
    radii = st["block"]["radii"]
    lines = ["", f"ascent_max after / before: after = the default starts + {st['rounding_starts']} SDP-rounding "
             f"vertices and their negations ({2 * st['rounding_starts']} starts more), {st['ascent_steps']} ascent "
             f"steps, the rest of the default block settings. Per radius ({_f(radii, 'g')}), separated by /. "
             "random-gpt2 is SYNTHETIC (GPT-2 small's shapes, init std 0.08), not GPT-2.", "",
             "| model | transition | d | units | improved (of units) | median ratio | largest ratio | "
             "certificate_f / ascent, before | after | CPU s sdp_rounding | CPU s ascent before -> after |",
             "| --- " * 11 + "|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['transition']} -> {r['transition'] + 1} | {r['d']} | {r['units']} | "
                     f"{_f(r['improved'], 'd')} | {_f(r['median_ratio'], '.6f')} | {_f(r['max_ratio'], '.6f')} | "
                     f"{_f(r['cert_over_ascent_before'], '.4g')} | {_f(r['cert_over_ascent_after'], '.4g')} | "
                     f"{r['sdp_rounding_s']:.2f} | {r['ascent_s_before']:.2f} -> {r['ascent_s_after']:.2f} |")
    lines += ["", "Summary per model (all transitions, units and radii):", ""]
    for name in dict.fromkeys(r["model"] for r in rows):
        lines.append(summary(name, [r for r in rows if r["model"] == name]))
    return "\n".join(lines) + "\n"


def summary(name: str, sub: list) -> str:
    """One model's line: improved (unit, radius), gains, extra CPU per transition, certificate unchanged."""
    ratio = np.concatenate([np.asarray(r["ratio"]).ravel() for r in sub])
    gains = ratio[ratio > 1 + IMPROVED] - 1
    median_gain, largest = (np.median(gains), gains.max()) if len(gains) else (math.nan, 0.0)
    worse = int(sum(sum(r["worse"]) for r in sub))
    extra = [r["sdp_rounding_s"] + r["ascent_s_after"] - r["ascent_s_before"] for r in sub]
    share = [e / r["total_s_before"] for e, r in zip(extra, sub)]
    return (f"- {name}: {len(gains)} of {ratio.size} (unit, radius) improve, {worse} decrease; gain median "
            f"{_pct(median_gain)}, largest {_pct(largest)}; extra CPU per transition {np.median(extra):.2f} s median "
            f"(sdp_rounding {np.median([r['sdp_rounding_s'] for r in sub]):.2f} s + the ascent's extra starts), "
            f"{100 * np.median(share):.1f}% of the transition's analysis without alpha-CROWN; certificate unchanged: "
            f"{all(r['certificate_unchanged'] for r in sub)}; statuses {sorted({x for r in sub for x in r['status']})}")


def _pct(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{100 * x:.3g}%"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minilm-transitions", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument("--minilm-heads", type=int, default=None, help="units per MiniLM transition (default: all 12)")
    ap.add_argument("--gpt2-transitions", type=int, nargs="*", default=[0, 5, 10])
    ap.add_argument("--gpt2-heads", type=int, default=4, help="units per random-gpt2 transition")
    ap.add_argument("--radii", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3])
    ap.add_argument("--rounding-starts", type=int, default=4, help="sdp_rounding_starts of the after run")
    ap.add_argument("--ascent-steps", type=int, default=None, help="default: the configuration's block.ascent_steps")
    return ap


def main(args) -> dict:
    warnings.filterwarnings("ignore")
    if args.ascent_steps is None:
        args.ascent_steps = int(default_settings()["block"]["ascent_steps"])
    result = run(args)
    print(markdown(result))
    return result


if __name__ == "__main__":
    common.run("block_ascent_starts", main, common.parse(build_parser(), QUICK))
