"""Is the stored program the one the construction gives for this unit? Rebuilt with the builder, never solved.

A fixed-query second-order certificate records the builder's inputs (`certify.certificate_store`, "build/"):
the build key, the relaxation data (shifted scores A, values w0, their error bounds, half-widths R_s, R_w, the
units rho_w, rho_o, the objective origin g0, the dropped tokens' tail) and, for linf, the facet edges of each
token. The check has two parts:

1. the relaxation data follow from the unit's reduction (itself checked against the weights, `row_audit`):
   shift = max_j (s0_j + eps_s,j), the kept tokens and the tail of `ReducedGeometry.kept_tokens`, A = (s0 - shift),
   w0, eps_s, eps_w on the kept tokens, the same R_s, R_w and radius (bit for bit: the same float operations);
   g0, rho_w and rho_o are free (any origin and positive units give the same relaxation);
2. the builder (`certify.second_order.fixed_query.program`, the facets of `certify.second_order.relaxation.facets`,
canonicalized by
   cvxpy through `certify.second_order.dual_bound.compiled`) rebuilds (c, A, b, cones, lo, hi) from these inputs, and
   the
   result equals the stored program bit for bit; the one exception is a query budget of the long-context varying
   program (an eigenvalue bound through BLAS/LAPACK, whose last bits follow the thread count and the machine),
   which may differ by `long_program.BUDGET_REL_TOL` relative (`same_matrix`), so that the verdict is the same
   whoever certified and whoever audits.

A varying-query (factored) certificate records the fields of `VaryingData` before its negligible tokens are
dropped; part 1 is then `varying_data_from_weights` (the score model of the program covers the exact scores of
the weights, checked in ball arithmetic), and part 2 rebuilds `VaryingData.from_fields`, drops the negligible
tokens with the builder's own rule and rebuilds the factored program (`varying_query.program`).

The unfactored varying program (`unfactored_program`, used for tiny widths, a single token, or when the factored
solve fails) records the same fields and is rebuilt the same way.

The link also ties the certificate to the row and fixes what the audit does not take from the file:

* the program's kind to the row's mode (path "fixed" only on a fixed-query row, a varying path only on a
  varying-query row), the build key's norm to the row's norm and its sizes to the unit's (n kept tokens,
  width d);
* the map to g units: (origin, scale, tail) = (g0, rho_o, tail) of the data the program was rebuilt from
  (the objective is (g - g0) / rho_o; tail covers the dropped tokens), never the stored `affine`;
* the data-error model: `data_error.DATA_REL_ERR`, never the stored `data_rel_err`.

A certificate without builder inputs, or with an unknown builder path, is not rebuilt and fails.

Nothing here calls a solver: cvxpy only canonicalizes (`get_problem_data`).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from flint import arb

from attncert.audit.head_enclosure import array_key, norm_bound, scaling_defect
from attncert.certify.certificate_store import VARYING_PATHS
from attncert.certify.second_order.dual_bound.compiled import canonical_program
from attncert.certify.second_order.dual_bound.data_error import DATA_REL_ERR
from attncert.certify.second_order.relaxation.facets import UpperChainFacets, fill_facets
from attncert.certify.second_order.fixed_query.program import (FixedRelaxationData, build_fixed_program, fixed_box,
                                                         set_fixed_parameters)
from attncert.certify.second_order.varying_query.data import VaryingData, start_chains
from attncert.certify.second_order.varying_query.program import (build_factored_program, factored_box,
                                                                    fill_support, set_factored_parameters)
from attncert.certify.second_order.varying_query.long_program import BUDGET_REL_TOL, build_long_program
from attncert.certify.second_order.varying_query.unfactored_program import (
    build_varying_program,
    set_varying_parameters,
    varying_box,
)
from attncert.head.projected_ball import projected_ball
from attncert.head.reduced_geometry import ReducedGeometry
from attncert.head.rounding import gamma


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a, b)


def data_from_reduction(build: dict, red: dict, radius: float, norm: str) -> str:
    """'' when the stored relaxation data follow from the reduction, else what differs."""
    s0, w0, eps_s, eps_w = red["s0"], red["w0"], red["eps_s"], red["eps_w"]
    R_s, R_w = float(red["R_s"]), float(red["R_w"])
    geo = ReducedGeometry(s0, w0, red["u_s"], red["u_w"], R_s, R_w, eps_s, eps_w, radius, norm, float("nan"))
    keep, tail = geo.kept_tokens()  # the record's own rule for the tokens the relaxation drops
    shift = float(np.max(s0 + eps_s))
    expected = {"A": (s0 - shift)[keep], "w0": w0[keep], "eps_s": eps_s[keep], "eps_w": eps_w[keep], "R_s": R_s,
                "R_w": R_w, "radius": radius, "tail": tail if not np.all(keep) else 0.0}
    for name, want in expected.items():
        if not _same(build[name], want):
            return f"relaxation data {name} differ from the reduction's"
    if str(build["norm"]) != norm:
        return "relaxation data for another norm"
    if not (float(build["rho_o"]) > 0 and float(build["rho_w"]) > 0):
        return "nonpositive unit"
    return ""


def rebuild_fixed(build: dict, red: dict, norm_row: str) -> tuple[dict | None, tuple, str]:
    """(the canonical program (c, A, b, dims, lo, hi) the builder gives for the stored inputs, the map (origin,
    scale, tail) to g units of that data, '' or why the key does not fit the row). None: cvxpy's internals
    cannot be read."""
    n, norm, K, upper_cone, mono, deviation = json.loads(str(build["key"]))
    if norm != norm_row or int(n) != np.asarray(build["A"]).size:
        return (
            None,
            (),
            f"build key for n = {n}, {norm}; the row's unit has n = {np.asarray(build['A']).size}, {norm_row}",
        )
    D = FixedRelaxationData(A=build["A"], w0=build["w0"], g0=float(build["g0"]), eps_s=build["eps_s"],
                            eps_w=build["eps_w"], u_s=red["u_s"], u_w=red["u_w"], R_s=float(build["R_s"]),
                            R_w=float(build["R_w"]), rho_w=float(build["rho_w"]), rho_o=float(build["rho_o"]),
                            radius=float(build["radius"]), norm=str(build["norm"]), tail=float(build["tail"]))
    prob, P, V = build_fixed_program(int(n), norm, int(K), bool(upper_cone), int(mono), bool(deviation))
    _, _, tau_lo, tau_hi = set_fixed_parameters(P, D)
    if norm == "linf":
        chain = UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s, chain=projected_ball(D.u_s, D.u_w, D.radius, norm))
        edges = [row[row >= 0] for row in np.asarray(build["edges"])]
        fill_facets(P, [chain] * int(n), edges, int(K), D.scales)
    return canonical_program(prob, fixed_box(V, int(n), tau_lo, tau_hi, D)), (D.g0, D.rho_o, D.tail), ""


def rebuild_varying(build: dict, red: dict, norm_row: str, path: str, d_unit: int) -> tuple[dict | None, tuple, str]:
    """The varying-query program (`path`: factored or unfactored) the builder gives for the stored fields, with
    negligible tokens dropped by the builder's rule; its map to g units; '' or why the key does not fit the row."""
    fields = {k: build[k] for k in VaryingData.FIELDS if k not in ("u_s", "u_w")}
    fields.update(u_s=red["u_s"], u_w=red["u_w"])
    for k in ("g0", "R_s", "R_q", "R_w", "bb", "rho_w", "rho_o", "radius", "tail", "shift"):
        fields[k] = float(fields[k])
    D = VaryingData.from_fields(fields).drop_negligible()
    key = json.loads(str(build["key"]))
    n, d, norm = int(key[0]), int(key[1]), key[2]
    if norm != norm_row or D.n != n or d != d_unit or D.d != d_unit:
        return (
            None,
            (),
            f"build key for n = {n}, d = {d}, {norm}; the row's unit has n = {D.n}, d = {d_unit}, {norm_row}",
        )
    affine = (D.g0, D.rho_o, D.tail)
    if path == "varying_factored":
        K, mono, second, upper_cone = (int(key[3]), int(key[4]), bool(key[5]), bool(key[6]))
        support = int(key[7]) if len(key) > 7 else 0
        prob, P, V = build_factored_program(n, d, norm, K, mono, second, upper_cone, support)
        tau_lo, tau_hi, Hf = set_factored_parameters(P, D)
        if support:
            try:
                fill_support(P, D, np.asarray(build["support_t"], dtype=np.float64) if "support_t" in build else ())
            except ValueError as e:
                return None, (), f"the stored builder inputs do not build a program: {e}"
        box = factored_box(V, D, tau_lo, tau_hi, Hf)
    else:
        K, upper_cone, mono, deviation = int(key[3]), bool(key[4]), int(key[5]), bool(key[6])
        if deviation != D.deviation:
            return None, (), "build key's deviation form differs from the data's"
        prob, P, V = build_varying_program(n, d, norm, K, upper_cone, mono, deviation)
        _, _, (tau_lo, tau_hi) = set_varying_parameters(P, D)
        box = varying_box(V, D, tau_hi, tau_lo)
    if norm == "linf":
        edges = [row[row >= 0] for row in np.asarray(build["edges"])]
        fill_facets(P, start_chains(D), edges, K, D.scales[:, :2])
    return canonical_program(prob, box), affine, ""


def rebuild_varying_long(build: dict, red: dict, norm_row: str, W_Q: np.ndarray) -> tuple[dict | None, tuple, str]:
    """The long-context varying program (`long_program`) the builder gives for the stored key-centered
    fields, with negligible tokens dropped by the builder's rule; its map to g units; '' or why the key does not
    fit the row. No cvxpy: the builder assembles (c, A, b, cones, box) itself."""
    fields = {k: build.get(k) for k in VaryingData.FIELDS + VaryingData.KEY_FIELDS if k not in ("u_s", "u_w")}
    fields.update(u_s=red["u_s"], u_w=red["u_w"])
    for k in ("g0", "R_s", "R_q", "R_w", "bb", "rho_w", "rho_o", "radius", "tail", "shift"):
        fields[k] = float(fields[k])
    D = VaryingData.from_fields(fields).drop_negligible()
    n, d, norm, upper_cone, mono, second, tau_exp = json.loads(str(build["key"]))
    if norm != norm_row or D.n != int(n) or int(d) != W_Q.shape[0] or D.d != W_Q.shape[0]:
        return None, (), (f"build key for n = {n}, d = {d}, {norm}; the row's unit has n = {D.n}, d = {W_Q.shape[0]}, "
                          f"{norm_row}")
    edges = [row[row >= 0] for row in np.asarray(build["edges"])] if norm == "linf" else None
    cuts = list(zip(np.asarray(build["shift_w"]), np.asarray(build["shift_F"]))) if "shift_w" in build else []
    support = np.asarray(build["support_t"], dtype=np.float64) if "support_t" in build else ()
    try:
        prog = build_long_program(D, W_Q, bool(upper_cone), int(mono), bool(second), edges, int(tau_exp), cuts,
                                  support)
    except ValueError as e:
        return None, (), f"the stored builder inputs do not build a program: {e}"
    return (dict(c=prog.c, A=prog.A, b=prog.b, dims=prog.dims, lo=prog.lo, hi=prog.hi, budget_rows=prog.budget_rows),
            (D.g0, D.rho_o, D.tail), "")


def same_matrix(stored: sp.csr_matrix, ref: sp.csr_matrix, budget_rows=()) -> bool:
    """The stored A is the rebuilt one: bit for bit, except that a query budget (column 0 of `budget_rows`: its
    value is -Lambda_S) may differ by BUDGET_REL_TOL relative, as BLAS and LAPACK give its last bits differently
    with another thread count or machine. Nothing else may differ, and no entry may appear or vanish."""
    if stored.shape != ref.shape:
        return False
    diff = (stored != ref).tocoo()
    if diff.nnz == 0:
        return True
    budget = np.zeros(stored.shape[0], dtype=bool)
    budget[np.asarray(budget_rows, dtype=np.int64)] = True
    if not (np.all(diff.col == 0) and np.all(budget[diff.row])):
        return False
    s = stored.tocsc()[:, 0].toarray().ravel()[diff.row]
    r = ref.tocsc()[:, 0].toarray().ravel()[diff.row]
    return bool(np.all((r < 0) & (s < 0) & (np.abs(s - r) <= BUDGET_REL_TOL * np.abs(r))))


@dataclass
class ProgramLink:
    """Whether the stored program is the construction's for the row's unit (`margin` 0 yes, -inf no, with `why`),
    and the map to g units and data-error model the audit uses for it (never the stored ones)."""

    margin: float
    why: str = ""
    affine: tuple = ()  # (origin, scale, tail) of the rebuilt data
    data_rel_err: float = DATA_REL_ERR


def program_link(stored: dict, red: dict, radius: float, norm: str, mode: str, head,
                 scalings: tuple | None = None) -> ProgramLink:
    """Rebuild the stored program from its builder's inputs for this row's unit and compare it bit for bit.
    scalings: the row's stored bilinear scalings (a varying query's bb is checked against the bound they give)."""
    path = str(stored.get("build/path", ""))
    build = {k[len("build/"):]: v for k, v in stored.items() if k.startswith("build/")}
    if path not in ("fixed", *VARYING_PATHS) or "key" not in build:
        return ProgramLink(-np.inf, f"no builder inputs stored ({path or 'unknown program'}): the program cannot "
                                    "be rebuilt")
    if (path == "fixed") != (mode == "fixed"):
        return ProgramLink(-np.inf, f"a {path} program on a {mode}-query row")
    if path == "fixed":
        why = data_from_reduction(build, red, radius, norm)
        rebuild = lambda: rebuild_fixed(build, red, norm)  # noqa: E731
    elif path == "varying_long":
        why = varying_long_data_from_weights(build, red, head, radius, norm, scalings)
        rebuild = lambda: rebuild_varying_long(build, red, norm, head.W_Q)  # noqa: E731
    else:
        why = varying_data_from_weights(build, red, head, radius, norm, scalings)
        rebuild = lambda: rebuild_varying(build, red, norm, path, head.W_Q.shape[0])  # noqa: E731
    if why:
        return ProgramLink(-np.inf, why)
    prog, affine, why = rebuild()
    if why:
        return ProgramLink(-np.inf, why)
    if prog is None:
        return ProgramLink(-np.inf, "cvxpy's canonical data could not be read")
    A = sp.csr_matrix(stored["A"])
    ref = sp.csr_matrix(prog["A"])
    dims = prog["dims"]
    want_dims = [dims.zero, dims.nonneg, dims.exp, *dims.soc]
    for name, ok in (("cones", _same(stored["dims"], want_dims)), ("c", _same(stored["c"], prog["c"])),
                     ("b", _same(stored["b"], prog["b"])), ("lo", _same(stored["lo"], prog["lo"])),
                     ("hi", _same(stored["hi"], prog["hi"])),
                     ("A", same_matrix(A, ref, prog.get("budget_rows", ())))):
        if not ok:
            return ProgramLink(-np.inf, f"the stored program's {name} differs from the rebuilt one")
    affine = tuple(float(x) for x in affine)
    if not _same(np.asarray(stored["affine"], dtype=np.float64), np.asarray(affine)):
        return ProgramLink(-np.inf, f"the stored map to g {tuple(np.asarray(stored['affine']).tolist())} is not the "
                                    f"one its program was built with {affine}", affine)
    if float(stored["data_rel_err"]) != DATA_REL_ERR:
        return ProgramLink(-np.inf, f"the stored data-error model {float(stored['data_rel_err'])} is not the "
                                    f"certifier's {DATA_REL_ERR}", affine)
    if not (math.isfinite(affine[0]) and affine[1] > 0 and math.isfinite(affine[1]) and affine[2] >= 0
            and math.isfinite(affine[2])):
        return ProgramLink(-np.inf, f"the map to g {affine} is not finite with a positive scale", affine)
    return ProgramLink(0.0, "", affine)


def _lower(x) -> float:
    return float(x.lower())


def varying_data_from_weights(build: dict, red: dict, head, radius: float, norm: str, scalings=None) -> str:
    """'' when the stored varying-query fields describe the unit's exact scores, else what fails.

    The program reads key j's score (tokens in `order`, the query last) as A_j + shift + u_s.delta_j + p_j.delta_i
    + beta_j + e_j and the query's as A_i + shift + u_q.delta_i + beta_i + e_i (u_q = u_s + p_i; after the
    softmax-invariant shift of every score by -pbar.delta_i), with |beta_j| <= bb and |e_j| <= eps_j. With the
    exact s0*, u_s*, p*_j = W_Q k0*_j / sqrt(d_h) of the weights, that holds for every delta in the ball when
    |s0*_j - A_j - shift| + r ||u_s - u_s*||_* + r ||p_j - (p*_j - pbar)||_* <= eps_j (the query: with u_q and
    u_s* + p*_i - pbar), bb >= r^2 beta / sqrt(d_h) (beta: `HeadEnclosure.bilinear_bound` at the row's stored
    scalings, and for linf also the entry sum of W_Q W_K^T), and the half-widths cover their directions:
    R_s >= r ||u_s||_*, R_q >= r ||u_q||_*, R_w >= r ||u_w||_*, H_j >= r ||p_j||_*, h_j >= R_j + H_j + bb.
    The values and the remaining fields must be the reduction's and the builder's (bit for bit).
    """
    why = _varying_common(build, red, head, radius, norm, scalings)
    if why:
        return why
    r = arb(radius)
    order = np.asarray(build["order"], dtype=int)
    n = order.size
    p, pbar, A, eps = np.asarray(build["p"]), np.asarray(build["pbar"]), build["A"], build["eps"]
    u_s = red["u_s"]
    u_q = u_s + p[-1]
    shift = float(build["shift"])
    p_exact = head.key_query_directions()  # (n, d) balls: W_Q k0*_j / sqrt(d_h)
    du_s = r * head.difference_norm(u_s, "u_s", norm)
    pbar_key = array_key(pbar)
    for j in range(n):
        o = int(order[j])
        if j < n - 1:
            reach = du_s + r * head.memo(("key_direction", o, norm, array_key(p[j]), pbar_key), lambda: norm_bound(
                [arb(float(a)) - (pe - arb(float(pb))) for a, pe, pb in zip(p[j], p_exact[o], pbar)], norm))
        else:
            reach = r * head.memo(("query_direction", o, norm, array_key(u_q), pbar_key), lambda: norm_bound(
                [arb(float(a)) - (us + pe - arb(float(pb))) for a, us, pe, pb in zip(u_q, head.u_s, p_exact[o], pbar)],
                norm))
        if _lower(arb(float(eps[j])) - abs(head.s0[o] - arb(float(A[j])) - arb(shift)) - reach) < 0:
            return f"varying data: score error bound of token {o} too small"
    H = build["H"]
    for j in range(n - 1):
        if _lower(arb(float(H[j])) - r * head.float_norm(p[j], norm)) < 0:
            return f"varying data: H of token {int(order[j])} too small"
    return ""


def varying_long_data_from_weights(build: dict, red: dict, head, radius: float, norm: str, scalings=None) -> str:
    """'' when the key-centered fields of the long-context varying program describe the unit's exact scores.

    The program reads the query's shift of key j's score as (delta_i W_Q) . kq_j, the exact functional of the
    stored kq_j (`long_program`), after the softmax-invariant shift of every score by
    -(delta_i W_Q) . kbar / sqrt(d_h). With k0*_j = z_j W_K + b_K exactly, that reads key j's exact score when
    |s0*_j - A_j - shift| + r ||u_s - u_s*||_* + r ||W_Q D_j||_* <= eps_j, D_j = (k0*_j - kbar) / sqrt(d_h) - kq_j,
    and ||W_Q D||_* <= sum_k ||W_Q[:, k]||_1 |D_k| (box) or ||W_Q||_F ||D||_2 (ball): d_h balls per key. The query
    reads u_q = u_s + p_i, compared with u_s* + W_Q (k0*_i - kbar) / sqrt(d_h) in d balls. H_j >= r ||W_Q kq_j||_*:
    the float product with its a-priori error gamma_{d_h+2} |W_Q| |kq_j|, summed with gamma_{d+2}. The rest as
    `varying_data_from_weights`.
    """
    why = _varying_common(build, red, head, radius, norm, scalings)
    if why:
        return why
    from flint import arb_mat

    r = arb(radius)
    order = np.asarray(build["order"], dtype=int)
    n, i = order.size, int(order[-1])
    kq, kbar = np.asarray(build.get("kq")), np.asarray(build.get("kbar"))
    W_Q = head.W_Q
    d, dh = W_Q.shape
    if kq.shape != (n, dh) or kbar.shape != (dh,):
        return "varying data: key-space directions of the wrong shape"
    A, eps, shift = build["A"], build["eps"], float(build["shift"])
    K0 = head.keys  # (n, d_h) balls of z_j W_K + b_K
    kb = [arb(float(x)) for x in kbar]
    if norm == "linf":
        col = [arb(float(x)) * arb(1.0 + gamma(d + 2)) for x in np.abs(W_Q).sum(axis=0)]
        reach_of = lambda D: sum((c * abs(x) for c, x in zip(col, D)), arb(0))  # noqa: E731
    else:
        fro = arb(float(np.sqrt((W_Q * W_Q).sum()))) * arb(1.0 + gamma(d * dh + 2))
        reach_of = lambda D: fro * sum((x * x for x in D), arb(0)).sqrt()  # noqa: E731
    du_s = r * head.difference_norm(red["u_s"], "u_s", norm)
    rows = K0.tolist()
    keys = [rows[int(o)] for o in order[:-1]]
    # D_j = (k0*_j - kbar) / sqrt(d_h) - kq_j entrywise (arb_mat's entrywise arb_sub and arb_div, as per entry)
    Ds = ((arb_mat(keys) - arb_mat([kb] * len(keys))) / head.sqrt_dh - arb_mat(kq[:-1].tolist())).tolist() \
        if keys else []
    for j in range(n - 1):
        o = int(order[j])
        D = Ds[j]
        if _lower(arb(float(eps[j])) - abs(head.s0[o] - arb(float(A[j])) - arb(shift)) - du_s - r * reach_of(D)) < 0:
            return f"varying data: score error bound of token {o} too small"
    Kc = arb_mat([[(K0[i, k] - kb[k]) / head.sqrt_dh] for k in range(dh)])
    pq = head.W_Q_balls * Kc
    u_q = red["u_s"] + np.asarray(build["p"])[-1]
    diff = [arb(float(a)) - (us + pq[a_, 0]) for a_, (a, us) in enumerate(zip(u_q, head.u_s))]
    if _lower(arb(float(eps[-1])) - abs(head.s0[i] - arb(float(A[-1])) - arb(shift)) - r * norm_bound(diff, norm)) < 0:
        return f"varying data: score error bound of token {i} too small"
    dual = (lambda v: np.abs(v).sum(axis=1)) if norm == "linf" else (lambda v: np.sqrt((v * v).sum(axis=1)))
    P = kq[:-1] @ W_Q.T
    reach = (dual(P) + gamma(dh + 2) * dual(np.abs(kq[:-1]) @ np.abs(W_Q).T)) * (1.0 + gamma(d + 4))
    H = np.asarray(build["H"])[:-1]
    for j in range(n - 1):
        if _lower(arb(float(H[j])) - r * arb(float(reach[j]))) < 0:
            return f"varying data: H of token {int(order[j])} too small"
    return ""


def _varying_common(build: dict, red: dict, head, radius: float, norm: str, scalings=None) -> str:
    """The checks both varying-query data share: the unit, the values, the shifted scores, the bilinear bound
    (linf: with the row's stored scalings, which must be valid: `scaling_defect`), the half-widths R_s, R_q, R_w,
    h_j >= R_j + H_j + bb, and the units of every coordinate."""
    r = arb(radius)
    order = np.asarray(build["order"], dtype=int)
    n, i = order.size, int(order[-1])
    s0, eps_w, w0 = red["s0"], red["eps_w"], red["w0"]
    p, A, eps = np.asarray(build["p"]), build["A"], build["eps"]
    u_s, u_w = red["u_s"], red["u_w"]
    u_q = u_s + p[-1]
    if str(build["norm"]) != norm or float(build["radius"]) != radius or i != head.query_index:
        return "varying data for another unit"
    if not (_same(build["w0"], w0[order]) and _same(build["eps_w"], eps_w[order])):
        return "varying data: values differ from the reduction's"
    shift = float(build["shift"])
    if not (shift == float(np.max(s0[order] + eps)) and _same(A, s0[order] - shift)):
        return "varying data: shifted scores differ from the reduction's"
    if norm == "linf":
        why = scaling_defect(scalings, head.W_Q.shape[0])
        if why:
            return f"varying data: {why}"
    beta = head.bilinear_bound(norm, scalings if norm == "linf" else None)
    bb = float(build["bb"])
    checks = [("bilinear bound bb", arb(bb) - r * r * beta / head.sqrt_dh),
              ("R_s", arb(float(build["R_s"])) - r * head.float_norm(u_s, norm)),
              ("R_q", arb(float(build["R_q"])) - r * head.float_norm(u_q, norm)),
              ("R_w", arb(float(build["R_w"])) - r * head.float_norm(u_w, norm))]
    H, h = build["H"], build["h"]
    R = [float(build["R_s"])] * (n - 1) + [float(build["R_q"])]
    for j in range(n):
        checks.append((f"h of token {int(order[j])}", arb(float(h[j])) - arb(R[j]) - arb(float(H[j])) - arb(bb)))
    for label, m in checks:
        if _lower(m) < 0:
            return f"varying data: {label} too small"
    rng = np.stack([np.array(R), np.full(n, float(build["R_w"])), H, np.full(n, bb)], axis=1)
    units = np.where(rng > 0, rng, 1.0)
    if not (_same(build["active"], (rng > 0).astype(np.float64)) and _same(build["scales"], units)):
        return "varying data: units differ from the half-widths"
    return ""
