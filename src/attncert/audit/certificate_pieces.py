"""The pieces of the audit's certificate part: what one `audit_certificates` job audits, and the order in which
their records are joined (`audit_table.join_records`) into the file one job auditing every piece writes.

    layer{L}       the certification table of layer L (`audit_table.audit_layer`)
    long_context   the long-context table (`long_context_audit`)
    block          the block table's own checks (completeness, unit cells) and the rows of any transition the
                   configuration does not name (`block_audit.audit_block`, piece "table")
    block{L}       the rows of configured block transition L, its certificates re-derived from the weights
"""
from __future__ import annotations


def certificate_parts(layers: list[int], transitions=()) -> list[str]:
    """The pieces of the certificates part, in the order `audit_model` audits them (and the pipeline joins their
    records, `join_records`): one per certification layer (`layer{L}`), then `long_context`, then `block` (the block
    table's own checks), then one per configured block transition (`block{L}`, in increasing order)."""
    return ([f"layer{int(L)}" for L in layers] + ["long_context", "block"]
            + [f"block{int(L)}" for L in sorted(int(t) for t in transitions or ())])


def block_transitions(coverage) -> tuple:
    """The block transitions a `CoverageConfig` (the recorded configuration) names, each its own piece; () when it
    names none."""
    block = coverage.block if coverage is not None else None
    return tuple(block.transitions) if block is not None and block.transitions is not None else ()


def part_stage(part: str) -> str:
    """The stage a piece of the certificates part is timed under (`audit_model`'s stage_seconds)."""
    if part == "long_context":
        return "long-context table"
    if part.startswith("block"):
        return "block table"
    return "certification tables"
