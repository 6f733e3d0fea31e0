"""`attncert certify`: certify one head of a local checkpoint (default: the embedded all-MiniLM-L6-v2).

    attncert certify [--model-dir DIR] [--family gpt2|bert] [--text TEXT | --prompt-file FILE] [--layer 2]
                     [--head 5] [--query-position 4] [--radius 0.002] [--norm linf|l2] [--mode fixed|varying]
                     [--spec-seed 0] [--max-tokens N] [--tokenizer NAME_OR_DIR] [--json]

Prints the nominal value of g, the exact certified bracket of max g (fixed query), the first-order
certificate, both second-order certificates (paper-like and tight) and CROWN; `--json` prints the same as
one JSON object for scripts; both say what was certified (the request: layer, head, radius, tokenizer, ...).
Bad input (a folder without a config or without tokenizer files, an unsupported family, a layer, head or query
position out of range, a radius that is not positive) stops with one line naming the valid choice and exit
status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

from attncert.checkpoint.checkpoint_input import CheckpointInputError
from attncert.checkpoint.family import FAMILIES
from attncert.checkpoint.head_bounds import BOUNDS, head_bounds
from attncert.checkpoint.one_head import DEFAULT_TEXT, HeadRequest, check_request, checkpoint_head
from attncert.head.problem import MODES, NORMS
from attncert.model.model_source import ModelSourceError, embedded_model_dir

DEFAULT = HeadRequest()  # the defaults --help shows


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="attncert certify", description="Certify one attention head of a local "
                                 "checkpoint (GPT-2 or BERT family; default: the embedded all-MiniLM-L6-v2).")
    ap.add_argument("--model-dir", help="a folder written by transformers' save_pretrained (default: the embedded "
                    "all-MiniLM-L6-v2)")
    ap.add_argument("--family", choices=FAMILIES, help="the model family (default: read from the config)")
    text = ap.add_mutually_exclusive_group()
    text.add_argument("--text", help=f"the text the head reads (default: {DEFAULT_TEXT!r})")
    text.add_argument("--prompt-file", help="a file holding the text")
    ap.add_argument("--layer", type=int, default=DEFAULT.layer, help="block index (default: %(default)s)")
    ap.add_argument("--head", type=int, default=DEFAULT.head, help="head index within the layer (default: %(default)s)")
    ap.add_argument("--query-position", type=int, default=DEFAULT.query_position,
                    help="token index of the query (default: %(default)s)")
    ap.add_argument("--radius", type=float, default=DEFAULT.radius,
                    help="radius of the ball around every token the head reads (default: %(default)s)")
    ap.add_argument("--norm", choices=NORMS, default=DEFAULT.norm, help="norm of the ball (default: %(default)s)")
    ap.add_argument("--mode", choices=MODES, default=DEFAULT.mode, help="fixed or varying query (default: %(default)s)")
    ap.add_argument("--spec-seed", type=int, default=DEFAULT.spec_seed,
                    help="seed of the specification direction c (default: %(default)s)")
    ap.add_argument("--max-tokens", type=int, help="read only the first N tokens of the text (default: all)")
    ap.add_argument("--tokenizer", metavar="NAME_OR_DIR", help="a tokenizer folder (tokenizer.save_pretrained) or "
                    "hub id, for a checkpoint saved without one (default: the checkpoint's own)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return ap


def request(a: argparse.Namespace) -> HeadRequest:
    """The HeadRequest of parsed arguments (the text read from --prompt-file when given)."""
    text = a.text if a.text is not None else DEFAULT_TEXT
    if a.prompt_file:
        try:
            text = Path(a.prompt_file).read_text().strip()
        except OSError as e:
            raise CheckpointInputError(f"--prompt-file {a.prompt_file!r} cannot be read ({type(e).__name__}); "
                                       "fix: pass an existing text file, or --text") from None
    return HeadRequest(a.model_dir, a.family, text, a.layer, a.head, a.query_position, a.radius, a.norm, a.mode,
                       a.spec_seed, a.max_tokens, a.tokenizer)


def human(req: HeadRequest, p, res: dict) -> str:
    """The table `attncert certify` prints: one line of what was certified, then one value per line."""
    where = "embedded all-MiniLM-L6-v2" if Path(req.model_dir) == embedded_model_dir() else req.model_dir
    lines = [
        f"{where} ({req.family}{', tokenizer ' + req.tokenizer if req.tokenizer != req.model_dir else ''}): layer "
        f"{req.layer} head {req.head}, query token {req.query_position} of {p.n} attended, "
        f"{req.norm} radius {req.radius:g}, {req.mode} query. Upper bounds on max g "
        f"(exact_lo <= max g <= exact_hi for a fixed query):",
        f"  {'nominal':19s} {res['nominal']:.10g}",
    ]
    for key in BOUNDS:
        value = res[key]
        if value is None:
            why = "fixed query only" if key.startswith("exact") else res.get("crown_status", "")
            lines.append(f"  {key:19s} —  ({why})")
        else:
            extra = ""
            if key.startswith("second_order"):
                extra = (
                    f"  (solver {res[key + '_solver']}{', fell back to first order' if res[key + '_fallback'] else ''})"
                )
            lines.append(f"  {key:19s} {value:.10g}{extra}")
    lines.append("  seconds: " + ", ".join(f"{k} {v:.3g}" for k, v in res["seconds"].items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run `attncert certify` on argv; 0 on success, 2 with one line on stderr on bad input."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would bury the one-line errors
    a = parser().parse_args(argv)
    try:
        req = request(a)
        model_dir, family, _ = check_request(req)
        # what was certified: the family read from the config, the tokenizer the checkpoint's own unless named
        req = replace(req, model_dir=str(model_dir), family=family, tokenizer=req.tokenizer or str(model_dir))
        p = checkpoint_head(req)
    except (CheckpointInputError, ModelSourceError, ValueError) as e:
        print(f"attncert certify: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    res = head_bounds(p)
    if a.json:
        print(json.dumps({"request": asdict(req), "attended_tokens": p.n, **res}, indent=1))
    else:
        print(human(req, p, res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
