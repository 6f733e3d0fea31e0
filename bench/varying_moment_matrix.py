"""Diagnostic: does the full d_h x d_h moment matrix of the query's shift tighten the long path's relaxation?

The long path (`varying_query.long`, docs/certificate.md §5.2) solves, for one unit, a conic program over the
lifted point (tau, W = tau x, Y = W_Q^T W, per key eta_j = a_j . Y and Q_j >= eta_j^2 / tau, a_j = lead_j kq_j,
budgets sum_{j in S} Q_j <= Lambda_S tau, the S-lemma moment cuts of `shift_moment`, ...). Call it

    P0 = max { f(z) : z in K_long }.

The lift adds the tau-scaled moment matrix Z = tau E[xi xi^T] of the shift xi = W_Q^T x (d_h x d_h):

    P1 = max { f(z) : z in K_long,  [[tau, Y^T], [Y, Z]] PSD,
                      Q_j <= a_j^T Z a_j                      (every key j),
                      tr(G^{-1} Z) <= tau,  G = W_Q^T W_Q     (l2: x in the unit ball; exact projection),
                      tr(G_g^{-1} Z) <= tau sum_k g_k,  G_g = W_Q^T diag(1/g) W_Q   (linf: the box's ellipsoids
                          sum_k g_k x_k^2 <= sum_k g_k, one per S-lemma cut's g and g = 1),
                      Z_kk <= tau c_k^2,  c_k = ||W_Q[:, k]||_1   (linf: |xi_k| <= c_k) }.

Every constraint holds at a true point (Z = tau xi xi^T, Q_j = tau (a_j . xi)^2), so P0 >= P1 >= the true max.
The program K_long is captured from the long path's own run (its final facets and cuts, the attempt it kept), so
the only difference between P0 and P1 is the lift. Z is scaled as Z'_kl = Z_kl / (c_k c_l) for the solver.

PRIMAL optima are reported (a diagnostic of relaxation tightness, not a certificate): relative gap
(primal - best ascent) / (first order - best ascent), with the best ascent and first order of
bench/results/context_length-varying-3heads-free-duals.json (heads 0-2) and -12heads.json (heads 3-11) (same
units: random-gpt2, layer 5, query n - 1).

    PYTHONPATH=src python -m bench.varying_moment_matrix --ns 16 64 256 --heads 0 1 2 --cases linf:0.02 l2:0.002

Writes varying_moment_matrix-<part>[-quick].md / .json (bench/common.py; one JSON line per unit in the report).
The committed summary is varying_moment_matrix-diagnostic.md (hand-written from these rows).
"""
from __future__ import annotations

from bench import common

common.single_threaded_blas()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
# best ascent and first order per unit; the 12-head run holds the same units (its values for heads 0-2 agree with the
# 3-head run's to 5e-14) and gives heads 3-11
REF_JSONS = ("context_length-varying-12heads.json", "context_length-varying-3heads-free-duals.json")
QUICK = dict(ns=[16], heads=[0], cases=["linf:0.02"])
BENCH_NS = (16, 64, 256, 1024)  # the reference run's ns (its specification vectors are taken at these positions)


def references() -> dict:
    out = {}
    for name in REF_JSONS:  # the later file wins
        for r in json.loads((RESULTS / name).read_text())["result"]["rows"]:
            out[(r["head"], r["n"], r["norm"], r["radius"])] = r
    return out


def captured_long(p, tight: bool):
    """Run the long path on p, recording every solve; returns (result, the kept attempt (prog, opts, D, p_obj,
    shift cuts), number of solves)."""
    from attncert.certify.second_order.varying_query import long as L
    from attncert.head.reduced_geometry import reduced_geometry

    calls, solve, note, cuts = [], L.solve_scaled, L.note_construction, []

    def rec(prog, opts, D):
        out = solve(prog, opts, D)
        calls.append((prog, opts, D, out[1], *cuts))
        return out

    def noted(**kw):  # called just before each solve: the shift cuts (w, F), edges, key of the program to be solved
        cuts[:] = [kw.get("shift_cuts", []), kw.get("edges"), kw.get("key")]
        return note(**kw)

    L.solve_scaled, L.note_construction, beside = rec, noted, L._beside_factored
    L._beside_factored = lambda problem, geo, res, *a: res  # the diagnostic is about the long program alone
    try:
        res = L.second_order_varying_long(p, reduced_geometry(p), upper_cone=tight)
    finally:
        L.solve_scaled, L.note_construction, L._beside_factored = solve, note, beside
    from attncert.certify.second_order.varying_query.unfactored import _to_g

    # the long path's reported primal is that of the attempt with the smallest certified bound
    pick = [c for c in calls if math.isfinite(c[3]) and _to_g(c[3], c[2]) == res.primal]
    return res, (pick[-1] if pick else None), len(calls)


def lift(prog, D, W_Q: np.ndarray, norm: str, shift_cuts: list):
    """(c, A, b, extra cones, number of new columns) of the lifted program (module docstring)."""
    from attncert.certify.second_order.varying_query.long_program import key_lead

    m, dh, nv = D.n - 1, W_Q.shape[1], prog.c.size
    cnorm = np.abs(W_Q).sum(axis=0) if norm == "linf" else np.sqrt((W_Q * W_Q).sum(axis=0))
    iu, ju = np.triu_indices(dh)  # Z'_kl, k <= l; column order of the new block
    nz = iu.size
    zcol = {(int(a), int(b)): nv + t for t, (a, b) in enumerate(zip(iu, ju))}
    a = key_lead(D)[:, None] * D.kq[:m] * cnorm[None, :]  # a_j in the scaled coordinates
    mult = np.where(iu == ju, 1.0, 2.0)
    Qt = (a[:, iu] * a[:, ju]) * mult[None, :]  # a_j^T Z' a_j as coefficients of Z'_kl
    cols_q = np.concatenate([prog.offsets["Q"] + np.arange(m)[:, None], np.broadcast_to(nv + np.arange(nz), (m, nz))],
                            axis=1)
    vals_q = np.concatenate([-np.ones((m, 1)), Qt], axis=1)
    rr = [np.repeat(np.arange(m), nz + 1)]
    cc, vv = [cols_q.ravel()], [vals_q.ravel()]
    r0 = m
    # ellipsoids: tau rhs - tr(Ginv Z) >= 0 with Z = C Z' C
    Vt = D.Vt[:m]
    if norm == "linf":
        gs = [np.ones(W_Q.shape[0])] + [np.sqrt((np.clip(w, 0, None)[:, None] * Vt * Vt).sum(axis=0)) + 1e-300
                                        for w, _ in shift_cuts]
    else:
        gs = [None]
    for g in gs:
        G = W_Q.T @ W_Q if g is None else W_Q.T @ (W_Q / g[:, None])
        Gi = np.linalg.inv(0.5 * (G + G.T))
        Gi = Gi * np.outer(cnorm, cnorm)
        rhs = 1.0 if g is None else float(np.sum(g))
        coef = Gi[iu, ju] * mult
        rr.append(np.full(nz + 1, r0))
        cc.append(np.concatenate([[0], nv + np.arange(nz)]))
        vv.append(np.concatenate([[rhs], -coef]))
        r0 += 1
    if norm == "linf":  # Z'_kk <= tau
        diag = np.nonzero(iu == ju)[0]
        rr += [np.repeat(r0 + np.arange(dh), 2)]
        cc += [np.stack([np.zeros(dh, dtype=np.int64), nv + diag], 1).ravel()]
        vv += [np.tile([1.0, -1.0], dh)]
        r0 += dh
    n_nonneg = r0
    # PSD block M' = [[tau, (Y/c)^T], [Y/c, Z']] in Clarabel's scaled upper triangle (column major, sqrt2 off-diag)
    s2, prr, pcc, pvv, t = math.sqrt(2.0), [], [], [], 0
    for l in range(dh + 1):  # noqa: E741
        for k in range(l + 1):
            if l == 0:
                col, v = 0, 1.0
            elif k == 0:
                col, v = prog.offsets["Y"] + l - 1, s2 / cnorm[l - 1]
            else:
                col, v = zcol[(k - 1, l - 1)], (1.0 if k == l else s2)
            prr.append(r0 + t)
            pcc.append(col)
            pvv.append(v)
            t += 1
    r0 += t
    E = sp.coo_matrix((-np.concatenate(vv + [np.array(pvv)]), (np.concatenate(rr + [np.array(prr)]),
                                                               np.concatenate(cc + [np.array(pcc)]))),
                      shape=(r0, nv + nz)).tocsc()
    A = sp.vstack([sp.hstack([prog.A, sp.csc_matrix((prog.A.shape[0], nz))]), E]).tocsc()
    b = np.concatenate([prog.b, np.zeros(r0)])
    c = np.concatenate([prog.c, np.zeros(nz)])
    return c, A, b, (n_nonneg, dh + 1), nz


def solve(c, A, b, dims, extra, opts, f):
    """Clarabel on the token-scaled program (`long.solve_scaled`'s scaling f, 1 on the new columns)."""
    import clarabel

    cones = []
    if dims.zero:
        cones.append(clarabel.ZeroConeT(dims.zero))
    if dims.nonneg:
        cones.append(clarabel.NonnegativeConeT(dims.nonneg))
    cones += [clarabel.SecondOrderConeT(q) for q in dims.soc]
    cones += [clarabel.ExponentialConeT()] * dims.exp
    if extra is not None:
        cones += [clarabel.NonnegativeConeT(extra[0]), clarabel.PSDTriangleConeT(extra[1])]
    s = clarabel.DefaultSettings()
    s.verbose = False
    for k, v in opts.items():
        setattr(s, k, v)
    s.max_threads = 1
    As = (A @ sp.diags(f)).tocsc()
    t0 = time.perf_counter()
    raw = clarabel.DefaultSolver(sp.csc_matrix((c.size, c.size)), c * f, As, b, cones, s).solve()
    x = np.asarray(raw.x, dtype=np.float64) * f if raw.x is not None and len(raw.x) == c.size else None
    status = f"{raw.status} (r_prim {raw.r_prim:.0e}, r_dual {raw.r_dual:.0e})"
    return -float(raw.obj_val), -float(raw.obj_val_dual), status, time.perf_counter() - t0, int(raw.iterations), x


def one_unit(p, ref: dict, tight: bool) -> dict:
    from attncert.certify.second_order.varying_query.long import LONG_LADDER, token_scales
    from attncert.certify.second_order.varying_query.unfactored import _to_g

    t0 = time.perf_counter()
    res, kept, n_solves = captured_long(p, tight)
    out = dict(long_value=res.value, long_primal=res.primal, long_s=time.perf_counter() - t0, long_solves=n_solves)
    if kept is None:
        return dict(out, error="no kept attempt")
    prog, opts, D, _, shift_w, edges, build_key = kept
    f = token_scales(prog, D)
    common.reset_peak_memory()
    base = common.process_status_mb("VmHWM")
    p0, d0, st0, s0, it0, _ = solve(prog.c, prog.A, prog.b, prog.dims, None, opts, f)
    out.update(without=_to_g(p0, D), without_status=st0, without_s=s0, without_it=it0, without_nnz=int(prog.A.nnz),
               without_mb=common.process_status_mb("VmHWM") - base)
    c, A, b, extra, nz = lift(prog, D, p.W_Q, p.norm, shift_w)
    common.reset_peak_memory()
    base = common.process_status_mb("VmHWM")
    p1, d1, st1, s1, it1, x1 = solve(c, A, b, prog.dims, extra, opts, np.concatenate([f, np.ones(nz)]))
    for rung in LONG_LADDER[1:]:  # an unconverged lifted solve: the long path's other rungs, the first converged kept
        if st1.startswith(("Solved", "AlmostSolved")):
            break
        q = solve(c, A, b, prog.dims, extra, rung, np.concatenate([f, np.ones(nz)]))
        p1, d1, st1, s1, it1, x1 = q[:3] + (s1 + q[3],) + q[4:]
    out.update(with_=_to_g(p1, D), with_status=st1, with_s=s1, with_it=it1, with_nnz=int(A.nnz),
               with_mb=common.process_status_mb("VmHWM") - base)
    fo, best = ref["first_order"], ref["reference"]
    if edges is not None and x1 is not None:  # linf: atoms of the lifted optimum above their chains (cuts not added)
        from attncert.certify.second_order.varying_query.long import cuts

        new, excess = cuts(prog, x1[:prog.c.size], D, edges)
        out.update(with_new_edges=int(sum(e.size for e in new)), with_excess_rel=excess * D.rho_o / (fo - best))
    out.update(without_dual=_to_g(d0, D), with_dual=_to_g(d1, D))  # the solver's dual objectives (not certified)
    for k in ("long_primal", "without", "with_", "without_dual", "with_dual"):
        out[f"gap_{k}"] = (out[k] - best) / (fo - best)
    out["gap_cert_long"] = (res.value - best) / (fo - best)
    return out


def main(args) -> dict:
    import torch

    torch.set_num_threads(1)
    from bench.context_length import head_arrays, problem
    from attncert.certify.second_order.dual_bound import dual_record
    from attncert.head.units import specification_vectors

    arrays = head_arrays(max(BENCH_NS))
    qps = [n - 1 for n in BENCH_NS]
    spec = specification_vectors(arrays, 5, qps, 0)
    refs = references()
    rows = []
    for case in args.cases:
        norm, radius = case.split(":")
        radius = float(radius)
        for n in args.ns:
            for h in args.heads:
                p = problem(arrays, spec, qps, h, n, radius, norm, "varying")
                ref = refs[(h, n, norm, radius)]
                with dual_record.recording_duals():
                    row = one_unit(p, ref, args.tight)
                row.update(head=h, n=n, norm=norm, radius=radius, tight=args.tight)
                rows.append(row)
                print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}),
                      flush=True)
    return dict(rows=rows)


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--heads", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--cases", nargs="+", default=["linf:0.02", "l2:0.002"])
    ap.add_argument("--tight", action="store_true")
    ap.add_argument("--part", default="run", help="name of the result files (varying_moment_matrix-PART)")
    args = common.parse(ap, QUICK, argv)
    common.run("varying_moment_matrix", main, args, part=args.part)


if __name__ == "__main__":
    cli()
