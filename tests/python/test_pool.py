"""Recycled outputs (_foundation/pool.py over voxpipe/buffer_pool.hpp): a released output's buffer serves
the next output of its size, already faulted in; an output still referenced anywhere is never
handed out again, so arrays a consumer keeps stay independent and equal to nibabel's; the pool
keeps no more than its limit; and streams (iter_load, load_batch, a DataLoader's workers) reuse
their buffers."""

from __future__ import annotations

import gc
import multiprocessing
import pickle
import threading

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe._foundation import pool as _pool

SHAPE = (64, 64, 80)  # 640 KiB of int16, 1.25 MiB of float32: the pool serves the float32 outputs


def _write(path, k, gz=True):
    rng = np.random.default_rng(100 + k)
    data = rng.integers(-3000, 3000, size=SHAPE, dtype=np.int16)
    img = nib.Nifti1Image(data, np.eye(4))
    img.header.set_slope_inter(0.5 + k, k - 3.0)
    path = str(path / f"v{k}.nii{'.gz' if gz else ''}")
    nib.save(img, path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pool")
    return [_write(d, k, gz=k % 2 == 0) for k in range(8)]


@pytest.fixture(autouse=True)
def fresh_pool():
    gc.collect()
    vp.clear_pool()
    previous = vp.set_pool_limit(256 << 20)
    yield
    vp.set_pool_limit(previous)
    vp.clear_pool()


def _expected(path):
    return nib.load(path).get_fdata(dtype=np.float32)


def _address(a):
    return a.__array_interface__["data"][0]


def test_released_output_is_reused(files):
    first = vp.load(files[0]).get_fdata(dtype=np.float32)
    address = _address(first)
    assert first.flags.f_contiguous and first.flags.writeable
    before = vp.pool_stats()
    del first
    assert vp.pool_stats()["pooled_buffers"] == before["pooled_buffers"] + 1
    second = vp.load(files[1]).get_fdata(dtype=np.float32)
    assert _address(second) == address
    assert vp.pool_stats()["reused"] == before["reused"] + 1
    np.testing.assert_array_equal(second, _expected(files[1]))


def test_kept_outputs_are_independent(files):
    kept = [vp.load(p).get_fdata(dtype=np.float32) for p in files]
    assert len({_address(a) for a in kept}) == len(kept)
    # Views and slices keep their buffer out of the pool as well.
    view = kept[0][:, :, 3]
    del kept[0]
    later = [vp.load(p).get_fdata(dtype=np.float32) for p in files[:3]]
    np.testing.assert_array_equal(view, _expected(files[0])[:, :, 3])
    for path, a in zip(files[1:], kept):
        np.testing.assert_array_equal(a, _expected(path))
    for path, a in zip(files, later):
        np.testing.assert_array_equal(a, _expected(path))


def test_iter_load_reuses_its_outputs(files):
    start = vp.pool_stats()
    for path, a in zip(files * 3, vp.iter_load(files * 3, np.float32, threads=2)):
        np.testing.assert_array_equal(a, _expected(path))
        del a
    stats = vp.pool_stats()
    new = stats["allocated"] - start["allocated"]
    # The outputs in flight at once (the prefetch window and the consumer's), not one per file.
    assert new <= 6, stats
    assert stats["reused"] - start["reused"] >= len(files) * 3 - new


def test_iter_load_values_when_the_consumer_keeps_everything(files):
    got = list(vp.iter_load(files * 2, np.float32, threads=2))
    assert len({_address(a) for a in got}) == len(got)
    for path, a in zip(files * 2, got):
        np.testing.assert_array_equal(a, _expected(path))


def test_repeated_load_batch_reuses_the_batch(files):
    batch = vp.load_batch(files[:4])
    address = _address(batch)
    del batch
    again = vp.load_batch(files[4:])
    assert _address(again) == address
    for k, path in enumerate(files[4:]):
        assert again[k].flags.f_contiguous
        np.testing.assert_array_equal(again[k], _expected(path))


def test_limit_bounds_what_is_kept(files):
    arrays = [vp.load(p).get_fdata(dtype=np.float32) for p in files]
    nbytes = arrays[0].nbytes
    vp.set_pool_limit(3 * nbytes)
    del arrays
    gc.collect()
    stats = vp.pool_stats()
    assert stats["pooled_bytes"] <= 3 * nbytes
    assert stats["pooled_buffers"] == 3
    vp.set_pool_limit(0)
    assert vp.pool_stats()["pooled_bytes"] == 0
    a = vp.load(files[0]).get_fdata(dtype=np.float32)  # still works without a pool
    del a
    assert vp.pool_stats()["pooled_buffers"] == 0
    with pytest.raises(ValueError):
        vp.set_pool_limit(-1)


def test_small_outputs_do_not_use_the_pool(files):
    before = vp.pool_stats()
    part = vp.load(files[0]).dataobj[:, :, 0]
    assert part.nbytes < _pool.POOL_FROM
    del part
    assert vp.pool_stats() == before


def test_pooled_arrays_behave_as_numpy_arrays(files):
    a = vp.load(files[0]).get_fdata(dtype=np.float32)
    b = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(a, b)
    c = a.copy(order="K")
    a[...] = 0
    np.testing.assert_array_equal(b, c)
    assert type(a) is np.ndarray and a.dtype == np.float32 and a.shape == SHAPE


def test_outputs_released_on_other_threads(files):
    arrays = [vp.load(p).get_fdata(dtype=np.float32) for p in files[:4]]
    addresses = {_address(a) for a in arrays}

    def drop():
        arrays.clear()

    t = threading.Thread(target=drop)
    t.start()
    t.join()
    again = vp.load(files[5]).get_fdata(dtype=np.float32)
    assert _address(again) in addresses
    np.testing.assert_array_equal(again, _expected(files[5]))


def _child_reads(path, queue):
    a = vp.load(path).get_fdata(dtype=np.float32)
    queue.put(float(a.sum(dtype=np.float64)))


def test_forked_child_uses_the_pool(files):
    # Threads of the parent are using the pool while it forks.
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            vp.load(files[1]).get_fdata(dtype=np.float32)

    t = threading.Thread(target=churn)
    t.start()
    try:
        ctx = multiprocessing.get_context("fork")
        for _ in range(3):
            q = ctx.Queue()
            p = ctx.Process(target=_child_reads, args=(files[2], q))
            p.start()
            value = q.get(timeout=60)
            p.join(60)
            assert p.exitcode == 0
            assert value == float(_expected(files[2]).sum(dtype=np.float64))
    finally:
        stop.set()
        t.join()
