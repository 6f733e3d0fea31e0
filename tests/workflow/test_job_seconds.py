"""Every rule's priority comes from the measured-cost file (workflow/config/job_seconds.yaml, bench/job_seconds.py):
each rule is listed there and asks for its own entry, every benchmark file maps to its rule, and a rule's priority
is the seconds of the longest chain from its jobs to the end of the run."""
import re
from pathlib import Path

import yaml

from bench.job_seconds import priorities, rule_family, rule_of
from conftest import REPO

RULES = REPO / "workflow" / "rules"
COST = yaml.safe_load((REPO / "workflow" / "config" / "job_seconds.yaml").read_text())["rules"]


def _rules() -> dict[str, str]:
    """{rule name: its body} of every rule in workflow/rules/*.smk; a rule generated in a loop, one per group of
    jobs (`name: f"{family}_{...}"`), under its family's name."""
    out = {}
    for smk in sorted(RULES.glob("*.smk")):
        text = smk.read_text()
        for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", text, re.M | re.S):
            out[m.group(1)] = m.group(2)
        generated = r'^    rule:\n        name:\n            f"(\w+?)_\{[^\n]*\n(.*?)(?=^\S|\Z)'
        for m in re.finditer(generated, text, re.M | re.S):
            out[m.group(1)] = m.group(2)
    return out


def test_every_rule_has_a_measured_priority_and_resources():
    rules = _rules()
    assert len(rules) > 25
    for name, body in rules.items():
        assert f'priority: priority_of("{name}")' in body, name
        assert re.search(r"^\s+threads: \d+$", body, re.M), name
        assert "mem_mb=" in body and "runtime=" in body, name
    unlisted = sorted(set(rules) - set(COST) - {"all"})
    assert unlisted == [], f"rules without a measured cost: {unlisted}; fix: python -m bench.job_seconds RUN --write"
    assert all(isinstance(v["priority"], int) for v in COST.values())


def test_every_benchmark_file_maps_to_its_rule():
    for name, body in _rules().items():
        m = re.search(r"benchmark:\n\s+f?\"([^\"]+)\"", body)
        if m is None:
            continue
        values = {"model": "mdl", "grid": "default", "layer": "1", "transition": "1", "length": "16",
                  "lengths": "16-64", "head": "3", "audit_part": "layer1"}
        sample = re.sub(r"\{+([\w.]+)\}+", lambda w: values.get(w.group(1), "a_name"), m.group(1))
        assert rule_of(sample.removeprefix("benchmarks/")) == name, (name, sample)


def test_the_minip_training_rules_are_one_family():
    """One rule per group of Min-IP training jobs (minip_train_{family}_{part}): one cost entry, minip_train."""
    assert "minip_train" in _rules()
    for name in ("minip_train_witness_part0", "minip_train_n3_part1"):
        assert rule_family(name) == "minip_train"
    assert rule_family("minip_collect") == "minip_collect"
    assert rule_of("minip/default/train/m8-n2/part0.tsv") == "minip_train"


def test_priority_is_the_longest_chain_to_the_end():
    after = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}
    got = priorities({"a": 1.0, "b": 10.0, "c": 2.0, "d": 3.0}, after)
    assert got == {"a": 14.0, "b": 13.0, "c": 5.0, "d": 3.0}


def test_the_long_context_parts_and_audit_pieces_come_before_the_short_jobs():
    """The long-context parts' chains (part -> merge -> the long-context audit -> audit) are longer than a figure's
    and no shorter than a Min-IP training's (the parts and the trainings take about as long to the end of the run):
    they never wait behind the short jobs that close the run. An audit piece waits for its stage anyway; once ready
    it goes before the figures and tables that close the run."""
    assert COST["long_context_certify"]["priority"] >= COST["minip_train"]["priority"]
    for later in ("certify_figure", "report_table", "paper_vs_reproduced"):
        assert COST["long_context_certify"]["priority"] > COST[later]["priority"], later
        assert COST["audit_certificates"]["priority"] > COST[later]["priority"], later


def test_the_cost_file_says_how_to_regenerate_it():
    head = (REPO / "workflow" / "config" / "job_seconds.yaml").read_text().splitlines()[0]
    assert "python -m bench.job_seconds" in head and Path(REPO / "bench" / "job_seconds.py").is_file()
