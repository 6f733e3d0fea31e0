"""The papers' claims (`data/paper_claims.yaml`): loading and validation.

File layout: two sections, `paper_a` and `paper_b`, each with `grid` (`model`: the paper's model or
model class; `sentence`), `claims` (a list, below) and `not_checked` (statements of the paper that no
measurement can check: `sentence` and `reason`).

One claim:

    id          unique name of the row
    value       the paper's number as it stands in the paper (shown; also read by the stages' own tables):
                a number, a band [lo, hi], {median: m, range: [lo, hi]}, a list, a string or a boolean
    target      the number the verdict compares with when `value` is stated in another unit (default: value)
    unit        the claim's own metric: what the number measures, on which units
    form        value | band | at_most | at_least | holds | ordered | setup  (see attncert.paper_comparison.verdict)
    measured    the key of the stages' `*_measured.json` holding ours (default: id); `ordered` takes a list
    tolerance   {abs: x} | {rel: x} | {factor: x} | none  (in the claim's metric)
    better      lower | higher | none  (the claim's direction: `value`/`band` claims, and `ordered` ones with lower
                whose last key beats the order, can be `stronger`)
    direction   [lo, hi] (optional; `.inf` allowed): where the claim's direction or order holds, so that
                a value outside the tolerance but inside it reads `qualitative`
    strict      true for "<" / ">" limits (at_most / at_least)
    depends_on  ids of `setup` claims whose difference makes ours a different set-up (caps the verdict)
    our_metric  set only when our measured key is a different metric than the claim's: what ours measures
    why         one sentence: why this tolerance (and direction)
    sentence    the sentence of the paper (summary, in Korean) the claim comes from, quoted; claims quoting the
                same text are one statement of the paper and get one verdict in the tally (`sentence_tally`)
    english     the same sentence in English (a faithful translation, shown beside the quote)
    beyond      true for a variant beyond the paper (our tight certificate, long contexts) judged against a
                sentence of the paper: tallied apart, never as the paper's statement

Every malformed entry raises `ClaimsError` with one line naming the file, the claim and the field.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

FORMS = ("value", "band", "at_most", "at_least", "holds", "ordered", "setup")
NUMERIC_FORMS = ("value", "band", "at_most", "at_least")
BETTER = ("lower", "higher", "none")
TOLERANCES = ("abs", "rel", "factor")
SECTIONS = {"paper_a": "A", "paper_b": "B"}


class ClaimsError(ValueError):
    """A malformed claims file; the message is one line naming the file, claim and field."""


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str                      # "A" or "B"
    value: object
    unit: str
    form: str
    measured: str | tuple[str, ...]
    tolerance: tuple[str, float] | None
    better: str
    why: str
    sentence: str
    english: str = ""
    beyond: bool = False
    target: object = None
    direction: tuple[float, float] | None = None
    strict: bool = False
    depends_on: tuple[str, ...] = ()
    our_metric: str | None = None

    @property
    def compared(self):
        """The paper's number the verdict uses (`target`, else `value`)."""
        return self.value if self.target is None else self.target


@dataclass(frozen=True)
class Claims:
    claims: list[Claim]
    models: dict[str, str]                              # paper -> the paper's model (grid.model)
    not_checked: dict[str, list[dict]] = field(default_factory=dict)

    def by_id(self) -> dict[str, Claim]:
        return {c.id: c for c in self.claims}


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def _numeric_value(v) -> bool:
    """A number, a [lo, hi] band with lo <= hi, or {median: number, ...}."""
    if isinstance(v, dict):
        return _number(v.get("median"))
    if isinstance(v, list):
        return len(v) == 2 and all(_number(x) for x in v) and v[0] <= v[1]
    return _number(v)


def _flag(raw: dict, key: str, at: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ClaimsError(f"{at}: `{key}` must be true or false (got {value!r})")
    return value


def _parse_claim(raw, paper: str, where: str) -> Claim:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise ClaimsError(f"{where}: every claim needs a string `id` (got {raw!r:.60})")
    cid = raw["id"]
    at = f"{where}: claim {cid!r}"
    for key in ("unit", "why", "sentence", "english"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ClaimsError(f"{at}: `{key}` must be a non-empty string")
    if "value" not in raw:
        raise ClaimsError(f"{at}: `value` (the paper's number) is missing")
    form = raw.get("form")
    if form not in FORMS:
        raise ClaimsError(f"{at}: `form` must be one of {', '.join(FORMS)} (got {form!r})")
    target = raw.get("target")
    compared = raw["value"] if target is None else target
    if form in NUMERIC_FORMS and not _numeric_value(compared):
        raise ClaimsError(
            f"{at}: form {form} needs a number, [lo, hi] or {{median: ...}} to compare with (got {compared!r})"
        )
    if form in ("at_most", "at_least") and not _number(compared):
        raise ClaimsError(f"{at}: form {form} needs one number as its limit (got {compared!r})")
    measured = raw.get("measured", cid)
    if form == "ordered":
        if not (isinstance(measured, list) and len(measured) >= 2 and all(isinstance(m, str) for m in measured)):
            raise ClaimsError(f"{at}: form ordered needs `measured` to be a list of at least two keys")
        measured = tuple(measured)
    elif not isinstance(measured, str):
        raise ClaimsError(f"{at}: `measured` must be one key (got {measured!r})")
    tol = raw.get("tolerance", "missing")
    if tol == "missing":
        raise ClaimsError(f"{at}: `tolerance` is missing (use `none` for an exact claim)")
    if tol is None or tol == "none":
        tolerance = None
    elif (
        isinstance(tol, dict)
        and len(tol) == 1
        and next(iter(tol)) in TOLERANCES
        and _number(next(iter(tol.values())))
        and next(iter(tol.values())) >= 0
    ):
        kind, amount = next(iter(tol.items()))
        if kind == "factor" and amount < 1:
            raise ClaimsError(f"{at}: a `factor` tolerance must be >= 1 (got {amount})")
        tolerance = (kind, float(amount))
    else:
        raise ClaimsError(
            f"{at}: `tolerance` must be none or one of {{abs: x}}, {{rel: x}}, {{factor: x}} with x >= 0 (got {tol!r})"
        )
    if form == "ordered" and tolerance is not None and tolerance[0] != "factor":
        raise ClaimsError(f"{at}: form ordered takes tolerance none or {{factor: f}} (got {tol!r})")
    better = raw.get("better", "none")
    if better not in BETTER:
        raise ClaimsError(f"{at}: `better` must be one of {', '.join(BETTER)} (got {better!r})")
    if (form, better) in (("at_most", "higher"), ("at_least", "lower")):
        raise ClaimsError(f"{at}: `better: {better}` contradicts form {form}")
    direction = raw.get("direction")
    if direction is not None:
        if not (
            isinstance(direction, list)
            and len(direction) == 2
            and all(isinstance(x, (int, float)) for x in direction)
            and direction[0] <= direction[1]
        ):
            raise ClaimsError(f"{at}: `direction` must be [lo, hi] with lo <= hi (got {direction!r})")
        direction = (float(direction[0]), float(direction[1]))
    depends = raw.get("depends_on", [])
    if not (isinstance(depends, list) and all(isinstance(d, str) for d in depends)):
        raise ClaimsError(f"{at}: `depends_on` must be a list of setup claim ids (got {depends!r})")
    our_metric = raw.get("our_metric")
    if our_metric is not None and (not isinstance(our_metric, str) or not our_metric.strip()):
        raise ClaimsError(f"{at}: `our_metric` must be a non-empty string when given")
    known = {"id", "value", "target", "unit", "form", "measured", "tolerance", "better", "direction", "strict",
             "depends_on", "our_metric", "why", "sentence", "english", "beyond"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ClaimsError(f"{at}: unknown field(s) {', '.join(unknown)}")
    return Claim(id=cid, paper=paper, value=raw["value"], unit=raw["unit"], form=form, measured=measured,
                 tolerance=tolerance, better=better, why=raw["why"].strip(), sentence=raw["sentence"].strip(),
                 english=raw["english"].strip(), beyond=_flag(raw, "beyond", at),
                 target=target, direction=direction, strict=bool(raw.get("strict", False)),
                 depends_on=tuple(depends), our_metric=our_metric)


def load_claims(path: str | Path) -> Claims:
    """Parse and validate the claims file; raise ClaimsError (one line) on the first problem."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ClaimsError(f"{path}: not valid YAML ({first})") from None
    if not isinstance(doc, dict) or set(doc) != set(SECTIONS):
        raise ClaimsError(f"{path}: the top level must hold exactly the sections {', '.join(SECTIONS)}")
    claims, models, not_checked = [], {}, {}
    for section, paper in SECTIONS.items():
        sec = doc[section]
        where = f"{path}: {section}"
        if (
            not isinstance(sec, dict)
            or not isinstance(sec.get("grid"), dict)
            or not isinstance(sec["grid"].get("model"), str)
        ):
            raise ClaimsError(f"{where}: needs `grid.model` (the paper's model) and `claims`")
        if not isinstance(sec.get("claims"), list) or not sec["claims"]:
            raise ClaimsError(f"{where}: `claims` must be a non-empty list")
        models[paper] = sec["grid"]["model"]
        claims += [_parse_claim(raw, paper, where) for raw in sec["claims"]]
        nc = sec.get("not_checked", [])
        if not (isinstance(nc, list) and all(isinstance(x, dict) and all(isinstance(x.get(k), str) and x[k].strip()
                                                                          for k in ("sentence", "english", "reason"))
                                             for x in nc)):
            raise ClaimsError(f"{where}: `not_checked` must be a list of {{sentence, english, reason}}")
        not_checked[paper] = nc
    ids = [c.id for c in claims]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ClaimsError(f"{path}: duplicate claim id(s) {', '.join(dup)}")
    forms = {c.id: c.form for c in claims}
    for c in claims:
        for d in c.depends_on:
            if forms.get(d) != "setup":
                raise ClaimsError(f"{path}: claim {c.id!r}: depends_on {d!r} is not a setup claim of this file")
    return Claims(claims=claims, models=models, not_checked=not_checked)
