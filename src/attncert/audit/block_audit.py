"""The block table's certificates: every reported bound of `data/block/{model}/units.csv` re-checked from the
extracted weights, the run's configuration and the SDP duals stored beside it (`transition{L}_certificates.npz`),
in numpy, without the stage's code (`block_rederive` builds the pieces again).

The certificate's claim, per (transition, head), sense s = +-1 and radius r (block/certificate.py and
block/taylor_model.py state it; docs/block_residual.md): with c / J the re-derived output form's float value and
Jacobian (g(delta) = c + J delta + sum_n lambda_n nu_n + err, |err| <= e0 + a0 r' + the part in Rest), H0 the
re-derived centre Hessian (rounding h_round), P the re-derived cubic form of the Taylor model (rounding
P_rounding) and Rest its fourth-order rest of sense s at r' = r (1 + 4 u) >= r, y the stored SDP dual of that radius
and sense, g0 the table's g(0) and G the stored gradient that define f = g - g0 - G . delta,

    beyond = r'^2 [1/2 (sum y + t ||v||_1^2) + 1/2 h_round + r' P_rounding] + Rest
    max s f <= max(s (c - g0) + e0, 0) + (||J - G||_1 + a0) r' + beyond
    max s g <= s c + e0 + a0 r' + ||J||_1 r' + beyond

provided diag(y) + t v v^T - (s H0 + 2 r' P) is positive definite (then 1/2 u^T (s H0 + 2 r' P) u <= 1/2 (sum y +
t (v . u)^2) <= 1/2 (sum y + t ||v||_1^2) on the box; (t, v) the dual's rank-one term, t = 0 the diagonal dual);
beyond is +inf where a coefficient of P or the rest is not finite (the enclosure reaches a singularity). The file's
y, G and softmax_shift (the softmax's linear score shift c_h (heads, d) the map's decomposition E_j = exp(s_j - m_h -
c_h . delta) over sum_k E_k uses: the same function for every c_h) are free parameters: any values give a valid bound,
so nothing the file says is trusted. Checks, in order,
per reported number:

* completeness: the table exists with every column, each unit of the configuration's grid (transitions, heads of
  block L + 1, radii) is a row exactly once, and nothing else is; a missing table, column or unit, a repeated or
  foreign unit, or an unreadable unit cell fails;
* config: the row's prompt and query position are the configuration's block grid (without a configuration the
  table fails: the specification rows need its `spec_seed`);
* weights: the extraction files of layers L and L + 1 pass their sidecars and the pieces can be re-derived;
* pieces: the stored dual of the row's radius and the number's sense is finite, nonnegative and the file's duals
  have the shape (radii, heads, d) of its `radii` and `heads`; its rank-one weight t_{sense} (radii, heads) finite
  and nonnegative, its direction v_{sense} (heads, d) finite; G is finite of shape (heads, d); softmax_shift is
  finite of shape (heads of block L, d);
* dual_pd: A = diag(y) + t v v^T - (s H0 + 2 r' P) positive definite, proved by a float Cholesky of A - c I with
  Rump's shift c = 2 gamma_{n+2} / (1 - gamma_{n+2}) tr(A) (Rump 2006, "Verification of positive definiteness")
  raised by gamma_4 ||diag|y| + |M| + t |v||v|^T||_F, the rounding of forming A;
* sum: the right-hand side above evaluated in float64 with every operation's rounding bounded (gamma_k); the
  table's `second_order_certificate_*` must be at least that;
* reported: the table's `certificate_*` is the second-order certificate alone (CROWN's bounds are baseline
  columns, never a certificate) and must equal its `second_order_certificate_*`; a +inf passes only where the
  bound re-derived from the weights is +inf too (a table may not hide a finite certificate). No label of the
  table is read to decide what is checked.
* layer_norm_range (checked first, after `reported`): the stage caps every number by the output LayerNorm's range
  (block/layer_norm_range.py), re-derived here from layer L + 1's LayerNorm, the specification rows, g0 and G
  (audit/block_layer_norm_range.py): max s g <= s c . beta + sqrt(d) ||P (c gamma)||_2, max s f <= that - s g0 +
  r' ||G||_1. A number at or above it passes whatever the duals say; that cap is finite for finite weights, so
  a +inf number fails `reported`.
"""
from __future__ import annotations

import csv
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attncert.audit.block_curves import up as _up
from attncert.audit.block_layer_norm_range import f_range, g_range
from attncert.audit.block_rederive import rederived_pieces
from attncert.head.rounding import UNIT_ROUNDOFF as U
from attncert.head.rounding import gamma
from attncert.head.specification import specification_rows
from attncert.integrity.intermediate_check import IntermediateError, verify_intermediate

NUMBERS = ("f", "g", "f_neg", "g_neg")
NO_CONFIG_REASON = ("the block certificates are re-derived from the weights with the run's configuration (block "
                    "prompt, query position, spec_seed); fix: pass attncert audit --configfile")
TINY = 1e-300
#: what reading a damaged npz can raise (a truncated or re-signed zip, a missing member, a bad header)
UNREADABLE = (IntermediateError, OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
SENSES = (("pos", 1.0, ""), ("neg", -1.0, "_neg"))


@dataclass(frozen=True)
class BlockAuditConfig:
    """The block grid of a run's configuration (`block` section, `spec_seed`)."""

    prompt: int
    query_position: int
    spec_seed: int
    radii: tuple = ()
    transitions: tuple | None = None  # the run's block transitions (None: not recorded, the grid is not checked)
    heads: tuple | None = None  # the heads of block L + 1 it certifies

    @classmethod
    def from_config(cls, config: dict) -> "BlockAuditConfig | None":
        """From a run's configuration; its `resolved` section (the run's layers, heads and block transitions, as
        the workflow resolved them for the model) fixes the grid."""
        b = config.get("block")
        if not b or "spec_seed" not in config:
            return None
        resolved = config.get("resolved") or {}
        transitions = resolved.get("block_transitions")
        heads = resolved.get("heads")
        return cls(int(b["prompt"]), int(b["query_position"]), int(config["spec_seed"]),
                   tuple(float(r) for r in b.get("radii", ())),
                   None if transitions is None else tuple(int(t) for t in transitions),
                   None if heads is None else tuple(int(h) for h in heads))


def _add_up(a, b):
    """An upper bound of a + b for floats of any sign."""
    s = a + b
    return s + U * np.abs(s) + TINY


def proved_positive_definite(A: np.ndarray, margin: float = 0.0) -> bool:
    """A (n, n) symmetric float matrix proved positive definite: Cholesky of A - c I succeeds (Rump's shift), c raised
    by `margin` (a bound on the distance, in the spectral norm, from A to the exact matrix it stands for)."""
    n = A.shape[-1]
    if not (np.isfinite(A).all() and np.isfinite(margin)):
        return False
    g = gamma(n + 2)
    c = 2.0 * (g / (1.0 - g)) * np.abs(np.diagonal(A)).sum() * (1 + 1e-6) + 1e-280 + margin
    try:
        np.linalg.cholesky(A - c * np.eye(n))
    except np.linalg.LinAlgError:
        return False
    return True


def _duals_ok(y: np.ndarray, shape: tuple) -> np.ndarray:
    """(heads, R) bool: the dual of each head and radius finite and nonnegative, in a file of the right shape."""
    if y.shape != shape:
        return np.zeros((shape[1], shape[0]), dtype=bool)
    return (np.isfinite(y).all(-1) & (y >= 0).all(-1)).T


def _rank_one_ok(t: np.ndarray, v: np.ndarray, R: int, m: int, d: int) -> np.ndarray:
    """(heads, R) bool: the rank-one weight t (R, m) finite and nonnegative, its direction v (m, d) finite."""
    if t.shape != (R, m) or v.shape != (m, d):
        return np.zeros((m, R), dtype=bool)
    return (np.isfinite(t) & (t >= 0)).T & np.isfinite(v).all(-1)[:, None]


def rank_one_margin(M: np.ndarray, y: np.ndarray, t: float, v: np.ndarray) -> float:
    """A bound on ||A_float - A||_2 for A = diag(y) - M + t v v^T formed in float (4 roundings per entry):
    gamma_4 ||diag|y| + |M| + t |v| |v|^T||_F, outward."""
    big = np.abs(M) + abs(t) * np.outer(np.abs(v), np.abs(v))
    big[np.diag_indices_from(big)] += np.abs(y)
    n = big.shape[0]
    return _up(gamma(4) * _up(math.sqrt(_up((big * big).sum(), n * n + 1)), 2), 2)


@np.errstate(over="ignore", invalid="ignore")       # an infinite piece (a singularity reached) gives +inf
def recomputed_bounds(p: dict, duals: dict, G: np.ndarray, g0: np.ndarray, radii, rank_one: dict | None = None) -> dict:
    """(m, R) upper bounds of each number's right-hand side from the re-derived pieces `p` (`rederived_pieces` at
    the radii), the stored duals per sense (`duals[s]` (R, m, d): the dual of each radius, in the order of `radii`),
    their rank-one terms (`rank_one[s]` = (t (R, m), v (m, d)): diag(y) + t v v^T - M positive definite, bound
    1/2 (sum y + t ||v||_1^2)), G (m, d) and g0 (m,); with (m, R) dual checks per sense (`pd`, `pd_neg`) and piece
    checks (`pieces`, `pieces_neg`)."""
    radii = np.asarray(radii, dtype=np.float64)
    J, c, e0, a0, H0, P = (p[k] for k in ("J", "c", "e0", "a0", "H0", "P"))
    m, d = J.shape
    R = len(radii)
    grad_ok = G.shape == (m, d) and bool(np.isfinite(G).all())
    r_t = radii * (1 + 4 * U)                                   # the stage's radius (>= r after one rounding)
    r2 = _up(r_t * r_t, 1)                                      # (R,)
    rounding = _up(0.5 * p["h_round"][:, None] + _up(r_t[None, :] * p["P_rounding"][:, None], 1), 2)   # (m, R)
    off_grad = _up(np.abs(J - G).sum(-1), 2 * d) if G.shape == (m, d) else np.full(m, math.inf)
    grad_l1 = _up(np.abs(J).sum(-1), d)
    out = {}
    for sense, sign, suffix in SENSES:
        y = np.asarray(duals[sense], dtype=np.float64)
        t, v = (np.asarray(a, dtype=np.float64) for a in (rank_one or {}).get(sense, (np.zeros((R, m)),
                                                                                       np.zeros((m, d)))))
        ok = _duals_ok(y, (R, m, d)) & _rank_one_ok(t, v, R, m, d)                       # (m, R)
        pd = np.zeros((m, R), dtype=bool)
        for h, ri in zip(*np.nonzero(ok)):
            M = sign * H0[h] + (2.0 * r_t[ri]) * P[h]
            A = np.diag(y[ri, h]) - M + t[ri, h] * np.outer(v[h], v[h])
            pd[h, ri] = proved_positive_definite(A, rank_one_margin(M, y[ri, h], t[ri, h], v[h]))
        half = np.full((m, R), math.inf)                                      # >= 1/2 (sum y + t ||v||_1^2)
        if ok.any():
            L = _up(np.abs(v).sum(-1) ** 2, d + 2)                                      # (m,) >= ||v||_1^2
            with np.errstate(invalid="ignore", over="ignore"):
                half = np.where(ok, _up(0.5 * _up(y.sum(-1).T + _up(t.T * L[:, None], 1), d + 1), 1), math.inf)
        beyond = _up(_up(_up(half + rounding, 1) * r2[None, :], 1) + p["rest"][0 if sign > 0 else 1].T, 1)
        beyond = np.where(p["P_finite"][:, None] & ~np.isnan(beyond), beyond, math.inf)
        off = _add_up(sign * c, -sign * g0)                                             # >= s (c - g0)
        base = np.maximum(_add_up(off, _up(e0, 0)), 0.0)[:, None]
        lin = _up((off_grad + a0)[:, None] * r_t[None, :], 2)
        out[f"f{suffix}"] = _nan_is_inf(_up(base + lin + beyond, 3))
        inner = _up(e0[:, None] + a0[:, None] * r_t[None, :] + grad_l1[:, None] * r_t[None, :] + beyond, 6)
        out[f"g{suffix}"] = _nan_is_inf(_add_up(sign * c[:, None], inner))
        out[f"pieces{suffix}"] = ok & grad_ok
        out[f"pd{suffix}"] = pd
    return out


def _nan_is_inf(x):
    return np.where(np.isnan(x), math.inf, x)


def _record(L, r: int, row: dict, number: str, status: str, check: str, reason: str, reported=math.nan,
            margin=math.nan) -> dict:
    return {"table": "block", "layer": L, "row": r, "head": row.get("head", ""), "prompt": row.get("prompt", ""),
            "query_pos": row.get("position", ""), "radius": row.get("radius", ""), "norm": "linf", "mode": "",
            "length": "", "number": number, "reported": reported, "status": status, "check": check,
            "margin": -math.inf if status == "fail" and not np.isfinite(margin) else margin, "reason": reason,
            "margins": ""}


def _float(text) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        return math.nan


def _source_column(k: str) -> str:
    return "certificate_source" if k == "f" else f"certificate_{k}_source"


def _arrays(path: Path) -> dict:
    with np.load(verify_intermediate(path), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _rederive(root: Path, model: str, L: int, rows: list[dict], cfg: BlockAuditConfig):
    """(bounds, heads, radii) of transition L, or (check, reason) when it cannot be re-derived."""
    npz = root / "block" / model / f"transition{L}_certificates.npz"
    if not npz.exists():
        return "certificate_file", f"no transition{L}_certificates.npz beside units.csv"
    try:
        z = _arrays(npz)
    except UNREADABLE as e:
        return "certificate_file", f"{type(e).__name__}: {e}"
    try:
        a, nxt = (_arrays(root / "extract" / model / f"layer{k}.npz") for k in (L, L + 1))
    except UNREADABLE as e:
        return "weights", f"{type(e).__name__}: {e}"
    try:
        heads = [int(h) for h in np.asarray(z["heads"]).reshape(-1)]
        file_radii = [float(x) for x in np.asarray(z["radii"], dtype=np.float64).reshape(-1)]
        duals = {s: np.asarray(z[f"y_{s}"], dtype=np.float64) for s, _, _ in SENSES}
        rank_one = {s: (np.asarray(z[f"t_{s}"], dtype=np.float64), np.asarray(z[f"v_{s}"], dtype=np.float64))
                    for s, _, _ in SENSES}
        G = np.asarray(z["G"], float)
        shift = np.asarray(z["softmax_shift"], dtype=np.float64)
    except (KeyError, ValueError, TypeError) as e:
        return "pieces", f"the certificate file lacks an array or holds a malformed one ({type(e).__name__}: {e})"
    if len(set(heads)) != len(heads):
        return "pieces", f"repeated heads {heads}"
    radii = sorted({float(row["radius"]) for row in rows})
    if not set(radii) <= set(file_radii):
        return "unit", f"the table's radii {radii} are not among the certificate file's {file_radii}"
    # the duals of the table's radii; a file whose duals are not (its radii, its heads, d) keeps none (`pieces`)
    pick = [file_radii.index(r) for r in radii]
    duals = {s: y[pick] if y.ndim == 3 and y.shape[:2] == (len(file_radii), len(heads)) else np.zeros(0)
             for s, y in duals.items()}
    rank_one = {s: (t[pick] if t.ndim == 2 and t.shape[0] == len(file_radii) else np.zeros(0), v)
                for s, (t, v) in rank_one.items()}
    g0 = {int(row["head"]): _float(row.get("g0", "")) for row in rows}
    try:
        C = specification_rows(nxt["W_V"], nxt["W_O"], L + 1, heads, cfg.prompt, cfg.query_position, cfg.spec_seed)
    except (KeyError, ValueError, IndexError) as e:
        return "weights", f"the block map cannot be rebuilt from the extraction files ({type(e).__name__}: {e})"
    if shift.shape != (int(np.asarray(a["W_Q"]).shape[0]), C.shape[1]) or not bool(np.isfinite(shift).all()):
        return "pieces", f"the certificate file's softmax_shift is not a finite (heads, d) array (shape {shift.shape})"
    try:
        p = rederived_pieces(a, nxt, cfg.prompt, cfg.query_position, C, radii, shift)
    except (KeyError, ValueError, IndexError) as e:
        return "weights", f"the block map cannot be rebuilt from the extraction files ({type(e).__name__}: {e})"
    g0v = np.array([g0.get(h, math.nan) for h in heads])
    rec = recomputed_bounds(p, duals, G, g0v, radii, rank_one)
    try:
        g_up = g_range(C, nxt["ln_gain"], nxt["ln_bias"])                          # (2, m)
    except (KeyError, ValueError) as e:
        return "weights", f"the output LayerNorm cannot be read from the extraction file ({type(e).__name__}: {e})"
    f_up = f_range(g_up, g0v, G, np.asarray(radii, dtype=np.float64) * (1 + 4 * U))  # (2, m, R)
    for k, (_, _, suffix) in enumerate(SENSES):
        rec[f"range_f{suffix}"] = f_up[k]
        rec[f"range_g{suffix}"] = np.repeat(g_up[k][:, None], len(radii), 1)
    return rec, heads, radii


REQUIRED = ("transition", "head", "prompt", "position", "radius", "g0",
            *(f"certificate_{k}" for k in NUMBERS), *(f"second_order_certificate_{k}" for k in NUMBERS))


def _row_check(row: dict, k: str, rec: dict, h: int, ri: int) -> tuple[str, str, str, float]:
    """(status, check, reason, margin) of one reported number against the bound re-derived from the weights (the
    table's own labels are not read: what it reports is compared with what the weights give)."""
    number = f"certificate_{k}"
    reported = _float(row.get(number, ""))
    second = _float(row.get(f"second_order_{number}", ""))
    suffix = "_neg" if k.endswith("_neg") else ""
    bound = float(rec[k][h, ri])
    if not reported == second:
        return "fail", "reported", f"reported {reported!r} is not the row's second-order certificate {second!r}", \
            math.nan
    cap = float(rec[f"range_{k}"][h, ri])
    if np.isfinite(cap):
        if reported == math.inf:
            return "fail", "reported", (f"reported +inf, but the output LayerNorm's range re-derived from the weights "
                                        f"bounds it by {cap!r}"), math.nan
        if reported >= cap:
            return "pass", "weights+layer_norm_range", "", reported - cap
    if not bool(rec[f"pieces{suffix}"][h, ri]):
        return "fail", "pieces", ("the stored dual of this radius and sense, or the gradient G, is negative, not "
                                  "finite or of the wrong shape"), math.nan
    if not bool(rec[f"pd{suffix}"][h, ri]):
        if reported == math.inf:
            return "pass", "infinite", "reported +inf: true of every unit (the stored dual proves nothing)", math.nan
        return "fail", "dual_pd", ("diag(y) - (s H0 + 2 r' P) not proved positive definite (H0 and P re-derived from "
                                   "the weights, y the stored dual of this radius and sense)"), math.nan
    if reported == math.inf:
        if np.isfinite(bound):
            return "fail", "reported", (f"reported +inf, but the certificate re-derived from the weights is finite "
                                        f"({bound!r})"), math.nan
        return "pass", "infinite", "reported +inf, and the bound re-derived from the weights is +inf too", math.nan
    if not (np.isfinite(bound) and reported >= bound):
        return "fail", "sum", f"reported {reported!r} below the bound re-derived from the weights {bound!r}", \
            reported - bound
    return "pass", "weights+pieces+dual_pd+sum", "", reported - bound


def _unit(row: dict) -> tuple[int, int, float] | None:
    """(transition, head, radius) of a row, or None when a cell does not read as one."""
    try:
        t, h, r = int(str(row["transition"]).strip()), int(str(row["head"]).strip()), float(row["radius"])
    except (KeyError, TypeError, ValueError):
        return None
    return (t, h, r) if math.isfinite(r) else None


def _grid(cfg: BlockAuditConfig) -> list[tuple[int, int, float]] | None:
    if cfg.transitions is None or cfg.heads is None or not cfg.radii:
        return None
    return [(int(t), int(h), float(r)) for t in cfg.transitions for h in cfg.heads for r in cfg.radii]


def audit_block(root: Path, model: str, cfg: BlockAuditConfig | None = None, piece="all") -> list[dict]:
    """One record per (row, reported number) of the block table, every unit of the configured grid present once
    (a missing, repeated or foreign unit, a missing table, column or certificate file is a failure), or nothing
    when the run has no block stage (`cfg` None and no table).

    piece: "all" (the table's checks, then the rows of each transition the configuration does not name, then those
    of each configured transition, in increasing order); "table" (the table's checks and the rows of transitions
    outside the configuration); a transition L (the rows of L alone: the table's checks are the "table" piece's).
    The "table" piece and then every configured transition's, joined in that order, are the "all" records."""
    path = root / "block" / model / "units.csv"
    whole = not isinstance(piece, int)
    if cfg is None:
        if not path.exists() or not whole:
            return []
        return [_record("", -1, {}, "table", "fail", "config", NO_CONFIG_REASON)]
    grid = _grid(cfg)
    if not path.exists():
        if grid == [] or not whole:
            return []
        return [_record("", -1, {}, "table", "fail", "completeness",
                        f"{path} is missing, but the run's configuration has a block grid; fix: regenerate it with: "
                        f"snakemake --cores all {path}")]
    with open(verify_intermediate(path), newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        columns = list(reader.fieldnames or [])
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        return [] if not whole else [_record("", -1, {}, "table", "fail", "columns",
                                             f"{path} lacks the column(s) {', '.join(missing)}; fix: regenerate it "
                                             f"with: snakemake --cores all {path}")]
    out, by_transition = _table_checks(rows, cfg, grid)
    configured = set(cfg.transitions or ())
    if not whole:
        return _transition_records(root, model, piece, by_transition.get(piece, []), cfg)
    order = sorted(L for L in by_transition if L not in configured)
    if piece == "all":
        order += sorted(L for L in by_transition if L in configured)
    for L in order:
        out += _transition_records(root, model, L, by_transition[L], cfg)
    return out


def _table_checks(rows: list[dict], cfg: BlockAuditConfig, grid) -> tuple[list[dict], dict]:
    """(the table's records: unreadable, repeated, foreign and missing units; the rows (r, row) per transition)."""
    out: list[dict] = []
    seen: dict = {}
    by_transition: dict = {}
    wanted = set(grid) if grid is not None else None
    for r, row in enumerate(rows):
        unit = _unit(row)
        if unit is None:
            out.append(_record(row.get("transition", ""), r, row, "row", "fail", "unit",
                               "unreadable unit cells (transition, head, radius)"))
            continue
        seen[unit] = seen.get(unit, 0) + 1
        if seen[unit] == 2:
            out.append(_record(unit[0], r, row, "row", "fail", "completeness", "unit repeated"))
        if wanted is not None and unit not in wanted:
            out.append(_record(unit[0], r, row, "row", "fail", "completeness", "row not in the configuration's grid"))
        by_transition.setdefault(unit[0], []).append((r, row))
    for unit in grid or []:
        if unit not in seen:
            t, h, radius = unit
            out.append(_record(t, -1, {"head": h, "radius": radius, "prompt": cfg.prompt,
                                       "position": cfg.query_position}, "row", "fail", "completeness",
                               "unit of the configuration missing from the table"))
    return out, by_transition


def _transition_records(root: Path, model: str, L: int, items: list, cfg: BlockAuditConfig) -> list[dict]:
    """The records of transition L's rows `items` ((r, row) of the table), its certificates re-derived once."""
    out: list[dict] = []
    if not items:
        return out
    got = _rederive(root, model, L, [row for _, row in items], cfg)
    for r, row in items:
        for k in NUMBERS:
            number = f"certificate_{k}"
            reported = _float(row.get(number, ""))
            if (str(row.get("prompt", "")).strip(), str(row.get("position", "")).strip()) != \
                    (str(cfg.prompt), str(cfg.query_position)):
                out.append(_record(L, r, row, number, "fail", "config", f"prompt {row.get('prompt')}, position "
                                   f"{row.get('position')} are not the configuration's block grid ({cfg.prompt}, "
                                   f"{cfg.query_position})", reported))
                continue
            if len(got) == 2:
                out.append(_record(L, r, row, number, "fail", *got, reported))
                continue
            rec, heads, radii = got
            try:
                h = heads.index(int(row["head"]))
                ri = next(i for i, x in enumerate(radii) if x == float(row["radius"]))
            except (ValueError, StopIteration):
                out.append(_record(L, r, row, number, "fail", "unit", "head not in the certificate file", reported))
                continue
            status, check, reason, margin = _row_check(row, k, rec, h, ri)
            out.append(_record(L, r, row, number, status, check, reason, reported, margin=margin))
    return out
