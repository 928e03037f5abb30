"""vp.to_dask and vp.convert_many on a real distributed.LocalCluster (worker processes, so every
graph and result is pickled), against NumPy on nibabel's data.

- to_dask of a 4D series, of a list of files, of a DICOM series: values (per-volume means,
  whole arrays) equal nibabel's get_fdata / np.asanyarray(dataobj) / get_unscaled, bit for bit
  where the dtype is nibabel's; shapes and output dtypes that differ are refused by name;
- graphs are built from headers only (a file with no data builds, and fails on compute with
  TruncatedError), carry no voxel data (pickle sizes), and are named by the file's identity
  (same file, same name; a rewritten file, a new one);
- chunk choice (volumes per chunk, slabs, storage alignment) and the thread budget in workers;
- convert_many with a damaged input: the others converted (equal to nibabel's reading of the
  inputs, and byte-equal to the in-process run), the damaged one reported, nothing written
  for it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("dask.array")

import voxpipe as vp  # noqa: E402
from voxpipe._many import dask as _dask  # noqa: E402
from voxpipe._many import convert as _convert  # noqa: E402
from dask.array.core import PerformanceWarning  # noqa: E402

SHAPE = (32, 32, 16, 20)


# -- files ---------------------------------------------------------------------------------------
def write_nifti(path, data, slope=None, inter=None, affine=None):
    img = nib.Nifti1Image(data, np.diag([2.0, 2.0, 3.0, 1.0]) if affine is None else affine)
    if slope is not None:
        img.header.set_slope_inter(slope, inter)
    nib.save(img, str(path))
    return str(path)


def series_data(seed=0, shape=SHAPE):
    return np.random.default_rng(seed).integers(-2000, 30000, shape, dtype=np.int16)


def truncated_copy(src, dst, keep):
    """`dst`: the first `keep` bytes of `src` (its header intact, its data cut)."""
    Path(dst).write_bytes(Path(src).read_bytes()[:keep])
    return str(dst)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("dask_files")
    # nibabel writes a .nii.gz as one gzip member: its volumes are read only from its start.
    # vp.save writes the same stored values and scaling as independent members (read apart).
    single = write_nifti(d / "single.nii.gz", series_data(1), 0.5, 10.0)
    vp.save(vp.load(single), d / "sub-01_bold.nii.gz")
    out = {
        "single": single,
        "scaled": str(d / "sub-01_bold.nii.gz"),
        "plain": write_nifti(d / "sub-02_bold.nii", series_data(2)),
        "vols": [write_nifti(d / f"sub-{i:02d}_T1w{'.nii.gz' if i % 2 else '.nii'}",
                             series_data(10 + i, SHAPE[:3]), 0.25, -3.0) for i in range(6)],
    }
    return out


@pytest.fixture(scope="module")
def client():
    """Two worker processes with one thread each; they import voxpipe from where this process
    did (PYTHONPATH passed through to the spawned workers)."""
    # Not resolved: in a development tree the package's files may be links into the sources.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(vp.__file__)))
    path = os.pathsep.join([package_root, *filter(None, [os.environ.get("PYTHONPATH")])])
    # distributed's nannies set their workers' environment (OMP_NUM_THREADS=1, ...) in this
    # process's os.environ, which the workers inherit: put it back once they are gone, so that
    # the tests after these ones read with voxpipe's default thread count.
    environ = dict(os.environ)
    cluster = distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                       dashboard_address=None, env={"PYTHONPATH": path})
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()
    os.environ.clear()
    os.environ.update(environ)


def on(client, collection):
    return client.compute(collection).result()


# -- values --------------------------------------------------------------------------------------
def test_volume_means_of_a_4d_series_equal_numpy_on_nibabel_data(client, files):
    path = files["scaled"]
    want = nib.load(path).get_fdata()
    arr = vp.to_dask(path, chunks=1)
    assert arr.shape == SHAPE and arr.dtype == np.float64 and arr.chunks[3] == (1,) * 20
    means = on(client, arr.mean(axis=(0, 1, 2)))
    np.testing.assert_allclose(means, want.mean(axis=(0, 1, 2)), rtol=1e-13, atol=0)
    np.testing.assert_array_equal(on(client, arr), want)
    # The default: these volumes are small, so one chunk holds them all.
    whole = vp.to_dask(vp.load(path))
    assert whole.chunks == tuple((d,) for d in SHAPE)
    np.testing.assert_array_equal(on(client, whole[..., 7]), want[..., 7])


def test_volume_means_of_a_list_of_files(client, files):
    paths = files["vols"]
    arr = vp.to_dask(paths, np.float32)
    assert arr.shape == SHAPE[:3] + (len(paths),)
    assert arr.chunks[3] == (1,) * len(paths) and arr.dtype == np.float32
    want = np.stack([nib.load(p).get_fdata(dtype=np.float32) for p in paths], axis=-1)
    np.testing.assert_allclose(on(client, arr.mean(axis=(0, 1, 2))),
                               want.astype(np.float64).mean(axis=(0, 1, 2)), rtol=1e-6)
    np.testing.assert_array_equal(on(client, arr), want)


def test_scaled_int16_series_in_every_dtype(client, files):
    path = files["scaled"]
    ref = nib.load(path)
    f64 = on(client, vp.to_dask(path, np.float64, chunks=3))
    assert f64.dtype == np.float64
    np.testing.assert_array_equal(f64, ref.get_fdata())  # bit for bit
    f32 = on(client, vp.to_dask(path, np.float32, chunks=3))
    assert f32.dtype == np.float32
    np.testing.assert_array_equal(f32, ref.get_fdata(dtype=np.float32))
    natural = vp.to_dask(path, chunks=3)
    assert natural.dtype == np.asanyarray(ref.dataobj).dtype
    np.testing.assert_array_equal(on(client, natural), np.asanyarray(ref.dataobj))
    stored = vp.to_dask(path, scaling=False, chunks=3)
    assert stored.dtype == ref.dataobj.dtype == np.dtype("<i2")
    np.testing.assert_array_equal(on(client, stored), ref.dataobj.get_unscaled())


def test_stacking_files_of_different_shapes_names_the_first_that_differs(tmp_path, files):
    odd = write_nifti(tmp_path / "odd.nii.gz", series_data(5, (32, 32, 15)), 0.25, -3.0)
    paths = files["vols"][:2] + [odd] + files["vols"][2:]
    with pytest.raises(ValueError, match=r"odd\.nii\.gz is \(32, 32, 15\)") as info:
        vp.to_dask(paths)
    assert f"{paths[0]} is (32, 32, 16)" in str(info.value)
    # An output dtype that differs (float32 data vs scaled int16) is named too, unless a dtype
    # is asked for.
    floats = write_nifti(tmp_path / "floats.nii", series_data(6, SHAPE[:3]).astype(np.float32))
    with pytest.raises(ValueError, match=r"floats\.nii gives float32.*pass a dtype"):
        vp.to_dask(files["vols"][:1] + [floats])
    assert vp.to_dask(files["vols"][:1] + [floats], np.float32).dtype == np.float32
    with pytest.raises(ValueError, match="at least one file"):
        vp.to_dask([])


# -- laziness, pickles, names --------------------------------------------------------------------
def test_building_the_graph_reads_headers_only(files, tmp_path):
    # Files whose data were cut off (a .nii holding its header alone, a .nii.gz cut in half):
    # the graphs build, the reads fail with voxpipe's TruncatedError when computed.
    header_only = truncated_copy(files["plain"], tmp_path / "header_only.nii", 352)
    half = truncated_copy(files["single"], tmp_path / "half.nii.gz",
                          os.path.getsize(files["single"]) // 2)
    for arr in (vp.to_dask(header_only, chunks=1), vp.to_dask(half),
                vp.to_dask([files["plain"], header_only])):
        assert arr.shape[:4] == SHAPE
        with pytest.raises(vp.errors.TruncatedError):
            arr.sum().compute(scheduler="threads")
    # The volumes before the cut are read, and equal nibabel's.
    with pytest.warns(PerformanceWarning):  # chunks of one gzip stream
        arr = vp.to_dask(half, chunks=1)
    np.testing.assert_array_equal(arr[..., 0].compute(scheduler="threads"),
                                  nib.load(files["single"]).get_fdata()[..., 0])


def test_errors_on_workers_reach_the_caller_as_voxpipe_errors(client, files, tmp_path):
    # distributed pickles a task's exception with tblib: voxpipe's errors must survive that,
    # class (TruncatedError is a ValueError and an OSError), message and fields.
    header_only = truncated_copy(files["plain"], tmp_path / "header_only.nii", 352)
    with pytest.raises(vp.errors.TruncatedError, match="header_only.nii") as info:
        on(client, vp.to_dask(header_only, chunks=1).sum())
    assert (info.value.path, info.value.field) == (header_only, "data")


def test_graph_and_proxy_pickles_carry_no_voxel_data(files):
    img = vp.load(files["scaled"])
    data_bytes = int(np.prod(SHAPE)) * 8
    assert len(pickle.dumps(img.dataobj)) < 1024
    arr = vp.to_dask(img, chunks=1)
    graph = dict(arr.__dask_graph__())
    assert len(graph) == 21  # the shared source and a task per volume
    assert len(pickle.dumps(graph)) < 16 * 1024 < data_bytes
    stacked = vp.to_dask(files["vols"])
    assert len(pickle.dumps(dict(stacked.__dask_graph__()))) < 16 * 1024
    # An image from memory has no file for the tasks to read: refused, not shipped.
    with pytest.raises(TypeError, match="from memory"):
        vp.to_dask(vp.load(Path(files["scaled"]).read_bytes()))


def test_names_follow_the_file(files, tmp_path):
    path = write_nifti(tmp_path / "x.nii", series_data(3), 0.5, 10.0)
    first = vp.to_dask(path, np.float32)
    assert vp.to_dask(path, np.float32).name == first.name
    assert vp.to_dask(vp.load(path), np.float32).name == first.name
    assert vp.to_dask(path, np.float64).name != first.name
    assert vp.to_dask(path, np.float32, chunks=2).name != first.name
    assert vp.to_dask(path, np.float32, scaling=False).name != first.name
    assert vp.to_dask([path, path]).name == vp.to_dask([path, path]).name
    write_nifti(tmp_path / "x.nii", series_data(4), 0.5, 10.0)  # rewritten in place
    second = vp.to_dask(path, np.float32)
    assert second.name != first.name
    np.testing.assert_array_equal(second.compute(scheduler="threads"),
                                  nib.load(path).get_fdata(dtype=np.float32))


def test_relative_names_are_read_on_workers_in_another_folder(client, files, tmp_path,
                                                              monkeypatch):
    """Workers run in their own folder, neither the one an image or series was opened from by a
    relative name nor the one this process moved to since: the graph names the files opened,
    and is named after them."""
    pytest.importorskip("pydicom")
    from test_dicom_series import write_series

    monkeypatch.chdir(Path(files["plain"]).parent)
    img = vp.load(Path(files["plain"]).name)
    (tmp_path / "series").mkdir()
    write_series(tmp_path / "series", "axial", n=4)
    monkeypatch.chdir(tmp_path)
    (series,) = vp.dicom.scan("series")
    monkeypatch.chdir(Path(files["plain"]).parent.parent)  # the graphs are built after moving
    arr = vp.to_dask(img, chunks=1)
    assert arr.name == vp.to_dask(files["plain"], chunks=1).name
    np.testing.assert_array_equal(on(client, arr), nib.load(files["plain"]).get_fdata())
    want = vp.load_dicom(tmp_path / "series", dtype=np.float64).get_fdata()
    np.testing.assert_array_equal(on(client, vp.to_dask(series, np.float64)), want)


def test_urls_on_object_storage(client, files, tmp_path):
    pytest.importorskip("moto.server")
    pytest.importorskip("boto3")
    pytest.importorskip("obstore")
    from s3_server import S3Server

    server = S3Server("voxpipe-dask")
    try:
        local = [files["scaled"]] + files["vols"]
        urls = []
        for f in local:
            server.client.upload_file(f, "voxpipe-dask", f"data/{Path(f).name}")
            urls.append(f"s3://voxpipe-dask/data/{Path(f).name}")
        options = server.storage_options()
        # The workers open each object again from its URL, options and ETag.
        bold = vp.to_dask(urls[0], np.float32, chunks=1, storage_options=options)
        np.testing.assert_array_equal(on(client, bold),
                                      nib.load(local[0]).get_fdata(dtype=np.float32))
        stack = vp.to_dask(urls[1:], storage_options=options)
        want = np.stack([np.asanyarray(nib.load(f).dataobj) for f in local[1:]], axis=-1)
        np.testing.assert_array_equal(on(client, stack), want)
        assert vp.to_dask(urls[1:], storage_options=options).name == stack.name
        results = vp.convert_many(urls[:2], tmp_path, client=client, storage_options=options)
        assert [r.ok for r in results] == [True, True]
        for r, f in zip(results, local[:2]):
            _same_image(r.output, f)
        # A replaced object is another version: another name.
        server.client.upload_file(local[3], "voxpipe-dask", f"data/{Path(local[1]).name}")
        assert vp.to_dask(urls[1:], storage_options=options).name != stack.name
    finally:
        server.stop()


# -- chunks and threads --------------------------------------------------------------------------
def test_chunk_choice():
    plan = _dask.chunk_plan
    # Volumes of 1 MiB of output: 128 per chunk.
    assert plan((64, 64, 64, 300), 4) == ((64,), (64,), (64,), (128, 128, 44))
    # A volume over 64 MiB: one per chunk.
    assert plan((256, 256, 256, 3), 8)[3] == (1, 1, 1)
    # 5D: whole t runs, then c.
    assert plan((64, 64, 64, 40, 10), 4)[3:] == ((40,), (3, 3, 3, 1))
    assert plan((64, 64, 64, 200, 2), 4)[3:] == ((128, 72), (1, 1))
    # A large 3D image: slabs of whole slices (2 MiB each: 64 per chunk).
    assert plan((512, 512, 300), 8) == ((512,), (512,), (64, 64, 64, 64, 44))
    # A size, a count, Dask's own forms.
    assert plan((64, 64, 64, 300), 4, "16 MiB")[3] == (16,) * 18 + (12,)
    assert plan((64, 64, 64, 10), 4, 4)[3] == (4, 4, 2)
    assert plan((64, 64, 64, 10), 4, (32, 64, 64, 5)) == ((32, 32), (64,), (64,), (5, 5))
    # Aligned to storage chunks: whole multiples along every axis cut.
    assert plan((64, 64, 64, 300), 4, storage=(64, 64, 64, 50))[3] == (100, 100, 100)
    assert plan((512, 512, 300), 8, storage=(64, 64, 48)) == ((512,), (512,), (48,) * 6 + (12,))
    assert plan((64, 64, 64, 300), 4, storage=(64, 64, 64, 500))[3] == (300,)
    with pytest.raises(vp.errors.InvalidArgumentError, match="positive"):
        plan((4, 4, 4, 4), 4, 0)


def test_small_target_gives_volume_chunks_with_the_same_values(files):
    path = files["scaled"]
    arr = vp.to_dask(path, np.float32, chunks="100 KiB")  # a volume is 64 KiB of float32
    assert arr.chunks[3] == (1,) * 20
    np.testing.assert_array_equal(arr.compute(scheduler="threads"),
                                  nib.load(path).get_fdata(dtype=np.float32))


def test_a_gzip_stream_read_from_its_start_is_one_chunk(files, tmp_path):
    # One gzip member and no index: reading volume t inflates volumes 0..t-1 again, so volume
    # chunks would cost quadratic time. The default takes the file whole; chunks asked for
    # are kept, with Dask's PerformanceWarning.
    single = Path(tmp_path / "single.nii.gz")
    single.write_bytes(Path(files["single"]).read_bytes())
    want = nib.load(single).get_fdata(dtype=np.float32)
    assert not vp.load(single).dataobj.random_access
    whole = vp.to_dask(single, np.float32, chunks="100 KiB")
    assert whole.chunks == tuple((d,) for d in SHAPE)
    np.testing.assert_array_equal(whole.compute(scheduler="threads"), want)
    with pytest.warns(PerformanceWarning, match="vp.gz.build_index"):
        asked = vp.to_dask(single, np.float32, chunks=5)
    assert asked.chunks[3] == (5, 5, 5, 5)
    np.testing.assert_array_equal(asked.compute(scheduler="threads"), want)
    # With a seek index next to it, volumes are read apart: volume chunks again.
    vp.gz.build_index(single)
    indexed = vp.to_dask(single, np.float32, chunks="100 KiB")
    assert indexed.chunks[3] == (1,) * 20
    np.testing.assert_array_equal(indexed.compute(scheduler="threads"), want)
    # A list of such files is one chunk per file anyway: nothing to learn, nothing warned.
    assert vp.to_dask([files["single"]] * 2).chunks[4] == (1, 1)


def test_threads_per_task_follow_the_worker_budget(client, monkeypatch):
    # distributed's nanny starts each worker with OMP_NUM_THREADS=1
    # (distributed.nanny.pre-spawn-environ): one thread per task.
    assert set(client.run(os.environ.get, "OMP_NUM_THREADS").values()) == {"1"}
    assert set(client.run(_dask.task_threads, None).values()) == {1}
    assert set(client.run(_dask.task_threads, 3).values()) == {3}
    # Elsewhere (the threaded scheduler): 1 unless a variable sets voxpipe's default.
    monkeypatch.delenv("VOXPIPE_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert _dask.task_threads(None) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert _dask.task_threads(None) == 2
    monkeypatch.setenv("VOXPIPE_NUM_THREADS", "3")
    assert _dask.task_threads(None) == 3
    assert _dask.task_threads(5) == 5


# -- DICOM ---------------------------------------------------------------------------------------
def test_dicom_series_in_volume_and_slice_chunks(client, tmp_path):
    pytest.importorskip("pydicom")
    from test_dicom_series import COLS, ROWS, write_series

    four = tmp_path / "bold"
    four.mkdir()
    write_series(four, "oblique", n=5, volumes=4)
    series = vp.dicom.scan(four)[0]
    want = vp.load_dicom(four).get_fdata(dtype=np.float32)
    arr = vp.to_dask(four, chunks=1)
    assert arr.shape == (COLS, ROWS, 5, 4) and arr.chunks[3] == (1, 1, 1, 1)
    np.testing.assert_array_equal(on(client, arr), want)
    np.testing.assert_allclose(on(client, arr.mean(axis=(0, 1, 2))),
                               want.astype(np.float64).mean(axis=(0, 1, 2)), rtol=1e-6)
    stored = vp.to_dask(series, scaling=False, chunks=3)
    assert stored.chunks[3] == (3, 1) and stored.dtype == np.int16
    np.testing.assert_array_equal(on(client, stored), series.get_data(None))
    np.testing.assert_array_equal(on(client, vp.to_dask(series, np.float64)),
                                  series.get_data(np.float64))
    three = tmp_path / "t1"
    three.mkdir()
    write_series(three, "axial", n=6)
    slabs = vp.to_dask(three, chunks=4)
    assert slabs.chunks == ((COLS,), (ROWS,), (4, 2))
    np.testing.assert_array_equal(on(client, slabs),
                                  vp.load_dicom(three).get_fdata(dtype=np.float32))
    with pytest.raises(vp.errors.InvalidArgumentError, match="cut axis 3 only"):
        vp.to_dask(series, chunks=(COLS, ROWS, 2, 1))


# -- NIfTI-Zarr --------------------------------------------------------------------------------
def test_nifti_zarr_store_chunks_follow_the_store(client, files, tmp_path):
    pytest.importorskip("zarr")
    store = tmp_path / "sub-01_bold.nii.zarr"
    vp.save(vp.load(files["scaled"]), store, chunks=(32, 32, 16, 5))
    img = vp.load(store)
    assert tuple(img.dataobj.chunks) == (32, 32, 16, 5)
    arr = vp.to_dask(img, np.float32, chunks="200 KiB")  # 3 volumes: rounded to the store's 5
    assert arr.chunks[3] == (5, 5, 5, 5)
    want = nib.load(files["scaled"]).get_fdata(dtype=np.float32)
    np.testing.assert_array_equal(on(client, arr), want)
    assert vp.to_dask(store, np.float32).name == vp.to_dask(img, np.float32).name


# -- convert_many --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def batch(tmp_path_factory, files):
    """Inputs of several kinds, one of them damaged (a .nii.gz cut in half)."""
    d = tmp_path_factory.mktemp("dask_batch")
    good = [
        files["scaled"],
        files["plain"],
        write_nifti(d / "sub-03_T1w.nii.gz", series_data(8, SHAPE[:3]).astype(np.float32)),
        write_nifti(d / "sub-04_mask.nii.gz", (series_data(9, SHAPE[:3]) > 0).astype(np.uint8)),
    ]
    damaged = truncated_copy(files["scaled"], d / "sub-05_bold.nii.gz",
                             os.path.getsize(files["scaled"]) // 2)
    return good[:2] + [damaged] + good[2:], damaged


def _same_image(out, src):
    a, b = nib.load(out), nib.load(src)
    assert a.shape == b.shape and a.get_data_dtype() == b.get_data_dtype()
    assert a.header.get_slope_inter() == b.header.get_slope_inter()
    np.testing.assert_array_equal(a.affine, b.affine)
    np.testing.assert_array_equal(np.asanyarray(a.dataobj), np.asanyarray(b.dataobj))


def _digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_convert_many_on_the_cluster_reports_the_damaged_input(client, batch, tmp_path):
    inputs, damaged = batch
    on_cluster = vp.convert_many(inputs, tmp_path / "cluster", client=client)
    here = vp.convert_many(inputs, tmp_path / "here")
    assert [r.input for r in on_cluster] == [os.path.abspath(p) for p in inputs]
    for results, folder in ((on_cluster, tmp_path / "cluster"), (here, tmp_path / "here")):
        bad = [r for r in results if not r.ok]
        assert [r.input for r in bad] == [damaged]
        assert bad[0].output is None and bad[0].error.startswith("TruncatedError: ")
        assert "sub-05_bold.nii.gz" in bad[0].error
        assert not (folder / "sub-05_bold.nii.gz").exists()
        assert sorted(os.listdir(folder)) == ["sub-01_bold.nii.gz", "sub-02_bold.nii.gz",
                                              "sub-03_T1w.nii.gz", "sub-04_mask.nii.gz"]
        for r in results:
            if r.ok:
                assert r.error is None and Path(r.output).parent == folder
                _same_image(r.output, r.input)
    for a, b in zip(on_cluster, here):
        if a.ok:  # the same bytes as the single-machine run
            assert _digest(a.output) == _digest(b.output)


def test_convert_many_to_nii_and_errors_raise(client, batch, tmp_path):
    inputs, damaged = batch
    results = vp.convert_many([inputs[0], inputs[3]], tmp_path, to="nii")
    assert [Path(r.output).name for r in results] == ["sub-01_bold.nii", "sub-03_T1w.nii"]
    for r in results:
        _same_image(r.output, r.input)
    with pytest.raises(vp.errors.TruncatedError) as info:
        vp.convert_many(inputs, tmp_path / "raise", errors="raise")
    assert "sub-05_bold.nii.gz" in str(info.value)
    assert "while loading input 2" in getattr(info.value, "__notes__", [])
    assert sorted(os.listdir(tmp_path / "raise")) == ["sub-01_bold.nii.gz",
                                                      "sub-02_bold.nii.gz"]
    with pytest.raises(vp.errors.TruncatedError):
        vp.convert_many(inputs, tmp_path / "raise_cluster", client=client, errors="raise")


def test_convert_many_refuses_colliding_outputs(files, tmp_path):
    with pytest.raises(ValueError, match="would both be written to"):
        vp.convert_many([files["scaled"], files["scaled"]], tmp_path)
    with pytest.raises(ValueError, match="would overwrite it"):
        vp.convert_many([files["scaled"]], Path(files["scaled"]).parent)
    with pytest.raises(vp.errors.InvalidArgumentError, match="expected one of"):
        vp.convert_many([files["scaled"]], tmp_path, to="mgz")
    assert not list(tmp_path.iterdir())
    name = _convert.output_name
    assert name("/d/sub-01_bold.nii.gz", "nii.zarr") == "sub-01_bold.nii.zarr"
    assert name("s3://b/sub-01/anat/sub-01_T1w.nii?versionId=3", "nii.gz") == "sub-01_T1w.nii.gz"
    assert name("/d/sub-01_T1w.nii.zarr/", "nii") == "sub-01_T1w.nii"
    assert name("/d/pair.HDR", "nii") == "pair.nii"


def test_convert_many_to_nifti_zarr(client, batch, tmp_path):
    pytest.importorskip("zarr")
    inputs, damaged = batch
    results = vp.convert_many(inputs, tmp_path / "zarr", to="nii.zarr", client=client)
    assert [r.ok for r in results] == [r != damaged for r in inputs]
    for r in results:
        if r.ok:
            assert r.output.endswith(".nii.zarr")
            want = nib.load(r.input)
            got = vp.load(r.output)
            np.testing.assert_array_equal(got.get_fdata(), want.get_fdata())
            np.testing.assert_array_equal(got.affine, want.affine)


def test_resample_many_on_the_cluster_equals_single_resamples(client, files, batch, tmp_path):
    """Each output is the file vp.resample writes alone, byte for byte; the damaged series is
    reported and the others resampled."""
    inputs, damaged = batch
    movings = [files["scaled"], damaged, files["plain"]]
    reference = files["vols"][0]
    shift = np.eye(4)
    shift[:3, 3] = [1.5, -2.0, 0.5]
    rotate = np.eye(4)
    rotate[:2, :2] = [[np.cos(0.1), -np.sin(0.1)], [np.sin(0.1), np.cos(0.1)]]
    transforms = [shift, shift, rotate]
    results = vp.resample_many(movings, reference, transforms, tmp_path / "cluster",
                               client=client, order=3)
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error.startswith("TruncatedError: ") and "sub-05_bold" in results[1].error
    assert not (tmp_path / "cluster" / "sub-05_bold.nii.gz").exists()
    for r, moving, t in zip(results, movings, transforms):
        if r.ok:
            alone = tmp_path / "alone" / Path(r.output).name
            alone.parent.mkdir(exist_ok=True)
            vp.resample(moving, reference, t, out=alone, order=3)
            assert _digest(r.output) == _digest(alone)
    with pytest.raises(ValueError, match="one transform per moving image"):
        vp.resample_many(movings, reference, transforms[:2], tmp_path / "x")
