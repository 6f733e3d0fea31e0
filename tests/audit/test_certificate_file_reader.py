"""CertificateFile's member reader: a member whose npy header was seen before is read by its data alone; it must
give what np.load gives, and a member shorter than its header says must fail as numpy's reader fails (ValueError:
the row fails, the audit goes on)."""
import io
import zipfile

import numpy as np
import pytest

from attncert.certify.certificate_store import FORMAT_VERSION, CertificateFile


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, allow_pickle=False)
    return buf.getvalue()


def test_members_sharing_a_header_read_as_np_load_reads_them(tmp_path):
    path = tmp_path / "c.npz"
    x, y = np.arange(6.0).reshape(2, 3), -np.arange(6.0).reshape(2, 3)
    f = np.asfortranarray(x + 10)
    np.savez(path, format_version=np.array(FORMAT_VERSION), **{"r0/x": x, "r0/y": y, "r1/f": f, "r1/g": f * 2,
                                                              "r1/u": np.array("unit"), "r1/v": np.array("unis")})
    with zipfile.ZipFile(path, "a") as zf:          # y's header again, its data cut short
        zf.writestr("r1/short.npy", _npy(y)[:-8])
    store = CertificateFile(path)
    with np.load(path) as ref:
        for key in ("r0/x", "r0/y", "r1/f", "r1/g", "r1/u", "r1/v"):
            got, want = store.array(key), ref[key]
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
            assert got.flags.writeable and got.flags.f_contiguous == want.flags.f_contiguous
    with pytest.raises(ValueError):
        store.array("r1/short")
