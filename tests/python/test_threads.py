"""Thread behaviour of the Python layer: the GIL is released while voxpipe reads, and reads from
several Python threads at once give the same values as one at a time."""

import threading

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    rng = np.random.default_rng(7)
    data = rng.integers(-1000, 1000, size=(96, 96, 60, 12), dtype=np.int16)
    path = str(tmp_path_factory.mktemp("threads") / "series.nii.gz")
    img = nib.Nifti1Image(data, np.eye(4))
    img.header.set_slope_inter(0.5, 3.0)
    nib.save(img, path)
    return path


def test_gil_is_released_while_decoding(series):
    """While a thread decodes, Python code in another thread keeps running. With the GIL held
    through the decode, the counting loop would get at most a few switch intervals."""
    img = vp.load(series, threads=1)
    done = threading.Event()

    def read():
        for _ in range(3):
            img.get_fdata(dtype=np.float64, caching="unchanged")
        done.set()

    reader = threading.Thread(target=read)
    count = 0
    reader.start()
    while not done.is_set():
        count += 1
    reader.join()
    assert count > 200_000


def test_concurrent_reads_from_threads_are_equal(series):
    expected = nib.load(series).get_fdata(dtype=np.float32)
    results = [None] * 4
    errors = []

    def read(i):
        try:
            img = vp.load(series)
            results[i] = img.get_fdata(dtype=np.float32) if i % 2 else img.dataobj[..., 5]
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, r in enumerate(results):
        if i % 2:
            assert np.array_equal(r, expected)
        else:
            assert np.array_equal(r, np.asarray(nib.load(series).dataobj[..., 5]))
