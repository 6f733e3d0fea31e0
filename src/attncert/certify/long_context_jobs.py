"""Which long-context units one `long_context_certify` job certifies: a group of context lengths, for one head.

A job's cost grows about linearly with the keys it attends to (`bench/results/context_length-varying-12heads.md`),
and every job also pays a fixed start-up (the interpreter, torch and the solvers: about 3 s). The configured lengths
are therefore packed, in their configured order, into groups whose key counts sum to at most the longest length:
each job then costs about as much as the longest length alone, and the short lengths share one start-up
(`[16, 64, 128, 256, 512]` -> `[16, 64, 128, 256]`, `[512]`). A job certifies every unit of its lengths and its head
(modes, norms, radii), each exactly as a job of its length alone would (`long_context.certify_long_context` batches
only units of one length). Pure Python, so that the workflow can import it when it builds the DAG.
"""
from __future__ import annotations


def length_groups(lengths) -> list[tuple[int, ...]]:
    """The configured lengths packed, in order, into groups whose sum is at most the longest length."""
    lengths = [int(T) for T in lengths]
    if not lengths:
        return []
    cap, groups, current = max(lengths), [], []
    for T in lengths:
        if current and sum(current) + T > cap:
            groups.append(tuple(current))
            current = []
        current.append(T)
    groups.append(tuple(current))
    return groups


def group_label(group) -> str:
    """The `lengths` wildcard of a group's job: its lengths joined by '-' ("16-64-128-256")."""
    return "-".join(str(int(T)) for T in group)


def group_of_label(label: str) -> tuple[int, ...]:
    """The lengths of a `group_label`."""
    return tuple(int(T) for T in str(label).split("-"))


def part_stem(group, head: int) -> str:
    """The file stem of a job's part (under data/long_context/{model}/parts/)."""
    return f"lengths{group_label(group)}_head{int(head)}"


def part_keys(lengths, heads) -> list[tuple[tuple[int, ...], int]]:
    """(length group, head) of every job in table order: by head, then by length."""
    return [(g, int(h)) for h in heads for g in length_groups(lengths)]
