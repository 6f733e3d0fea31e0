"""The audit's verdict on a stored program does not depend on the BLAS thread count of the certifier or the reader.

A long-context varying program with hundreds of keys computes its all-keys query budget through BLAS and LAPACK,
whose last bits change with the thread count. The program is built in a subprocess with 2 OpenBLAS threads (the
certifier) and rebuilt here with 1 (the reader): `program_link.same_matrix` accepts it, while any other difference
(one ulp off a non-budget entry, a budget lowered beyond the tolerance) is refused.
"""
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from attncert.audit.program_link import same_matrix
from attncert.certify.second_order.varying_query.long_program import BUDGET_REL_TOL

BUILD = textwrap.dedent("""
    import pickle
    import sys
    import numpy as np
    import scipy.sparse as sp
    import attncert.certify.second_order.varying_query.long as vl
    from attncert.certify.second_order.varying_query.shift_cuts import all_keys_shift_cut
    import attncert.certify.second_order.varying_query.long_program as vlp
    from attncert.certify.first_order_certificate import first_order_certificate
    from attncert.certify.second_order.relaxation.rows import MONOTONE_POINTS
    from attncert.certify.second_order.varying_query.data import VaryingData
    from attncert.head.problem import random_head_problem
    from attncert.head.reduced_geometry import reduced_geometry

    norm, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    p = random_head_problem(np.random.default_rng(2), d=384, d_head=32, n=n, radius=0.01, norm=norm,
                            mode="varying", scale=0.05)
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), center="key")
    fields = D.fields()
    D = D.drop_negligible()
    edges = vl.start_edges(D) if norm == "linf" else None
    cuts = all_keys_shift_cut(D, p.W_Q)  # the moment cuts' factors: eigenvectors, thread-dependent bits
    prog = vlp.build_long_program(D, p.W_Q, False, MONOTONE_POINTS, True, edges, shift_cuts=cuts)
    sp.save_npz(out + "_A.npz", sp.csr_matrix(prog.A))
    np.save(out + "_box.npy", np.stack([prog.lo, prog.hi, prog.c]))
    with open(out + "_inputs.pkl", "wb") as fh:
        pickle.dump((fields, p.W_Q, edges, cuts), fh)
""")


def _rebuild(prefix: str, norm: str):
    import attncert.certify.second_order.varying_query.long_program as vlp
    from attncert.certify.second_order.relaxation.rows import MONOTONE_POINTS
    from attncert.certify.second_order.varying_query.data import VaryingData

    with open(prefix + "_inputs.pkl", "rb") as fh:  # written by the subprocess above, in this test
        fields, W_Q, edges, cuts = pickle.load(fh)
    D = VaryingData.from_fields(fields).drop_negligible()
    return vlp.build_long_program(D, W_Q, False, MONOTONE_POINTS, True, edges, shift_cuts=cuts)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_program_built_with_two_threads_is_the_one_rebuilt_with_one(tmp_path, norm):
    prefix = str(tmp_path / norm)
    env = {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", BUILD, norm, "513", prefix], check=True, env=env, timeout=600)
    stored = sp.load_npz(prefix + "_A.npz").tocsr()
    with threadpool_limits(1):
        prog = _rebuild(prefix, norm)
    ref = sp.csr_matrix(prog.A)
    assert prog.budget_rows.size >= 3 and prog.cut_lams.size == 2  # the budgets and the two moment cuts' rows
    assert same_matrix(stored, ref, prog.budget_rows)
    assert np.array_equal(np.load(prefix + "_box.npy"), np.stack([prog.lo, prog.hi, prog.c]))  # bit for bit
    # a forger's edits are still refused: one ulp off an entry that is not a budget, a budget lowered too far
    other = stored.copy()
    row = int(np.setdiff1d(np.arange(other.shape[0]), prog.budget_rows)[other.shape[0] // 2])
    cols = other[row].indices
    other[row, cols[0]] = np.nextafter(other[row, cols[0]], np.inf)
    assert not same_matrix(other, ref, prog.budget_rows)
    lowered = stored.copy()
    b = int(prog.budget_rows[-1])
    lowered[b, 0] = ref[b, 0] * (1.0 - 4.0 * BUDGET_REL_TOL)  # -Lambda closer to 0: a smaller budget
    assert not same_matrix(lowered, ref, prog.budget_rows)


def test_same_matrix_tolerates_only_budget_bits():
    """A budget entry (column 0 of a budget row) may move within BUDGET_REL_TOL; nothing else, nowhere else."""
    A = sp.csr_matrix(np.array([[-2.0, 1.0, 0.0], [-3.0, 0.0, 1.0], [0.5, 1.0, 1.0]]))
    rows = np.array([0, 1])
    near = A.copy()
    near[1, 0] = -3.0 * (1.0 + 0.5 * BUDGET_REL_TOL)
    assert same_matrix(near, A, rows)
    assert not same_matrix(near, A, np.array([0]))  # that row is not a budget row
    far = A.copy()
    far[1, 0] = -3.0 * (1.0 - 2.0 * BUDGET_REL_TOL)
    assert not same_matrix(far, A, rows)
    col = A.copy()
    col[0, 1] = np.nextafter(1.0, 2.0)
    assert not same_matrix(col, A, rows)
    sign = A.copy()
    sign[0, 0] = 0.0
    sign.eliminate_zeros()
    assert not same_matrix(sign, A, rows)
    assert not same_matrix(sp.csr_matrix(np.zeros((2, 3))), A, rows)
    assert same_matrix(A, A, rows) is True
