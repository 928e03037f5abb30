"""The device API without a GPU: the status report, the device argument, DeviceUnavailableError,
device='cpu' unchanged, and the DLPack export on host memory (NumPy and PyTorch from_dlpack: no
copy, strides, dtypes, versioned and legacy capsules, one free after the last consumer).

The device path itself runs here against the stand-in libcuda of tests/cpp/cuda/fake_cuda.cpp
(compiled by the test, put first on LD_LIBRARY_PATH of a child process) over the NIfTI matrix,
bit for bit against the host path (device_check.py), and over DICOM series (native 3D/4D,
BitsStored 12, enhanced multi-frame with a rescale per frame, RLE); on a machine with a GPU the same check runs
on the real device, plus torch.from_dlpack on CUDA. Those skip, with the reason, where they
cannot run. device_check.py also checks load_many/load_batch to the device over several files
and thread plans: host values in input order, files overlapping in flight, the per-file thread
split, and bad files raising in input order with no thread left. The file workers themselves
(overlap, input-order errors, joins) are checked here without a driver.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import voxpipe as vp
from voxpipe import _core
from voxpipe._foundation import device as _device
from voxpipe.errors import DeviceUnavailableError, VoxpipeError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STATUS = vp.cuda_status()
GPU = STATUS.available and "fake" not in " ".join(STATUS.device_names)


@pytest.fixture(scope="module")
def nii(tmp_path_factory):
    d = tmp_path_factory.mktemp("device")
    rng = np.random.default_rng(7)
    data = rng.integers(-3000, 3000, size=(9, 8, 7), dtype=np.int16)
    img = nib.Nifti1Image(data.astype(">i2"), np.eye(4))
    img.header.set_slope_inter(0.37, -2.0)
    out = []
    for name in ("a.nii", "b.nii.gz"):
        nib.save(img, str(d / name))
        out.append(str(d / name))
    return out


# ---- status and the device argument -----------------------------------------------------------

def test_cuda_status_is_a_frozen_dataclass_of_the_cpp_report():
    s = vp.cuda_status()
    assert isinstance(s, vp.CudaStatus)
    assert [f.name for f in dataclasses.fields(s)] == [
        "available", "reason", "kernels_built", "driver_version", "device_count",
        "device_names", "cufile_available", "cufile_reason"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.available = True
    assert s.available == (s.reason == "")
    assert len(s.device_names) == s.device_count
    assert s.cufile_reason


@pytest.mark.skipif(STATUS.available, reason="a CUDA driver is present")
def test_status_without_a_driver_names_libcuda():
    if shutil.which("nvidia-smi") is None and not os.path.exists("/proc/driver/nvidia"):
        assert STATUS.reason.startswith("libcuda.so.1 not found"), STATUS.reason
    assert STATUS.device_count == 0 and STATUS.device_names == ()


@pytest.mark.parametrize("arg, want", [
    (None, None), ("cpu", None), ("cuda", 0), ("cuda:0", 0), ("cuda:3", 3), ("cuda:12", 12)])
def test_parse_device(arg, want):
    assert _device.parse_device(arg) == want


@pytest.mark.parametrize("arg", ["gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cuda:٣",
                                 "mps", 0, 1.0, b"cuda", ("cuda", 0)])
def test_parse_device_rejects(arg):
    with pytest.raises(ValueError):
        _device.parse_device(arg)


def test_parse_torch_device():
    torch = pytest.importorskip("torch")
    assert _device.parse_device(torch.device("cpu")) is None
    assert _device.parse_device(torch.device("cuda")) == 0
    assert _device.parse_device(torch.device("cuda", 2)) == 2
    with pytest.raises(ValueError):
        _device.parse_device(torch.device("meta"))


def test_parse_device_does_not_import_torch():
    code = ("import sys, voxpipe as vp; from voxpipe._foundation import device as _device; "
            "_device.parse_device('cuda:1'); vp.cuda_status(); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_device_unavailable_error_class():
    assert issubclass(DeviceUnavailableError, VoxpipeError)
    assert issubclass(DeviceUnavailableError, RuntimeError)


@pytest.mark.skipif(STATUS.available, reason="CUDA is available here")
@pytest.mark.parametrize("call", [
    lambda p: vp.load(p[0]).dataobj.read(dtype=np.float32, device="cuda"),
    lambda p: vp.load(p[0]).dataobj.read(device="cuda:1"),
    lambda p: vp.to_device(vp.load(p[1])),
    lambda p: vp.to_device(np.zeros(3), "cuda"),
    lambda p: vp.load_many(p, device="cuda"),
    lambda p: vp.load_batch(p[:1], device="cuda"),
    lambda p: vp.cufile_status(),
], ids=["get_fdata", "get_fdata-cuda1", "to_device-image", "to_device-array", "load_many",
        "load_batch", "cufile_status"])
def test_cuda_without_a_device_raises_with_the_reason(nii, call):
    with pytest.raises(DeviceUnavailableError) as e:
        call(nii)
    assert STATUS.reason in str(e.value)


def test_cufile_status_needs_a_cuda_device():
    with pytest.raises(ValueError, match="needs a CUDA device"):
        vp.cufile_status("cpu")


def test_cufile_library_found_in_the_nvidia_cufile_wheel(tmp_path, monkeypatch):
    from voxpipe._foundation import device as _device

    monkeypatch.setattr(sys, "path", [str(tmp_path / "absent"), str(tmp_path)])
    assert _device._wheel_cufile() is None
    lib = tmp_path / "nvidia" / "cufile" / "lib" / "libcufile.so.0"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    assert _device._wheel_cufile() == str(lib)


@pytest.mark.skipif(STATUS.available, reason="CUDA is available here")
def test_dicom_series_without_a_device_raises_with_the_reason(tmp_path):
    from test_dicom_series import write_series

    write_series(str(tmp_path), n=3)
    series = vp.dicom.scan(str(tmp_path))[0]
    with pytest.raises(DeviceUnavailableError) as e:
        series.get_data(device="cuda")
    assert STATUS.reason in str(e.value)
    assert np.array_equal(series.get_data(device="cpu"), series.get_data())


def test_device_cpu_is_todays_behaviour(nii):
    for p in nii:
        for dtype in (np.float32, np.float64):
            want = vp.load(p).get_fdata(dtype=dtype)
            for device in ("cpu", None):
                got = vp.load(p).dataobj.read(dtype=dtype, device=device)
                assert type(got) is np.ndarray and got.dtype == want.dtype
                assert got.strides == want.strides and np.array_equal(got, want)
        nat = vp.to_device(vp.load(p), "cpu")
        assert np.array_equal(nat, np.asanyarray(vp.load(p).dataobj))
    b = vp.load_batch(nii, device="cpu")
    assert isinstance(b, np.ndarray) and np.array_equal(b, vp.load_batch(nii))
    many = vp.load_many(nii, device="cpu")
    assert all(isinstance(a, np.ndarray) for a in many)
    arr = np.arange(5)
    assert vp.to_device(arr, "cpu") is arr


def test_device_cannot_take_out(nii):
    with pytest.raises(ValueError):
        vp.load(nii[0]).dataobj.read(dtype=np.float32,
                                     out=np.empty((9, 8, 7), np.float32, order="F"), device="cuda")


# ---- the DLPack export, on host memory --------------------------------------------------------

def host_array(a):
    """The export path with host memory behind it: a kDLCPU DeviceArray holding a copy of a."""
    return _device.array_to_device(a, None)


def fdata_on_host_memory(path, dtype):
    return _device.image_to_device(vp.load(path), dtype, None)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64",
                                   "int64", "float32", "float64", "complex64", "complex128"])
def test_numpy_from_dlpack_shares_memory_with_fortran_strides(dtype):
    a = np.asfortranarray(np.arange(2 * 3 * 5).reshape(2, 3, 5).astype(dtype))
    d = host_array(a)
    assert d.dtype == a.dtype and d.shape == a.shape and d.strides == a.strides
    assert d.__dlpack_device__() == (1, 0)
    n = np.from_dlpack(d)
    assert n.dtype == a.dtype and n.strides == a.strides and np.array_equal(n, a)
    assert n.__array_interface__["data"][0] == d._memory.address  # no copy


def test_torch_from_dlpack_shares_memory_with_fortran_strides(nii):
    torch = pytest.importorskip("torch")
    d = fdata_on_host_memory(nii[0], np.float32)
    want = vp.load(nii[0]).get_fdata(dtype=np.float32)
    t = torch.from_dlpack(d)
    assert t.dtype == torch.float32 and tuple(t.shape) == want.shape
    assert t.stride() == tuple(s // 4 for s in want.strides)  # elements: (1, 9, 72)
    assert t.data_ptr() == d._memory.address
    assert np.array_equal(t.numpy(), want)
    n = np.from_dlpack(d)
    n[1, 2, 3] = 123.5  # one memory: the tensor sees it
    assert t[1, 2, 3].item() == 123.5


def test_c_ordered_arrays_keep_c_strides():
    torch = pytest.importorskip("torch")
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    t = torch.from_dlpack(host_array(a))
    assert t.stride() == (12, 4, 1) and np.array_equal(t.numpy(), a)


def test_capsules_versioned_or_legacy_by_max_version():
    d = host_array(np.zeros(4, np.float32))
    import ctypes

    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert name(d.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert name(d.__dlpack__(max_version=(1, 3))) == b"dltensor_versioned"
    assert name(d.__dlpack__()) == b"dltensor"
    assert name(d.__dlpack__(max_version=(0, 8))) == b"dltensor"


def test_dlpack_arguments():
    d = host_array(np.zeros(4, np.float32))
    d.__dlpack__(stream=None, dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError):
        d.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        d.__dlpack__(dl_device=(2, 0))
    with pytest.raises(ValueError):
        d.__dlpack__(stream=1)  # host memory: stream must be None
    with pytest.raises(TypeError):
        d.__dlpack__(None)


def test_owner_freed_once_after_the_last_consumer():
    torch = pytest.importorskip("torch")
    gc.collect()
    before = _core._memory_frees()
    d = host_array(np.arange(1000, dtype=np.float64))
    t = torch.from_dlpack(d)
    n = np.from_dlpack(d)
    caps = d.__dlpack__(max_version=(1, 0))  # never consumed: its destructor releases it
    del d, caps
    gc.collect()
    assert _core._memory_frees() == before
    assert t[999].item() == 999.0 and n[10] == 10.0
    del t
    gc.collect()
    assert _core._memory_frees() == before
    del n
    gc.collect()
    assert _core._memory_frees() == before + 1


def test_batch_items_are_views_of_one_memory(nii):
    imgs = [vp.load(p) for p in nii]
    want = vp.load_batch(nii)
    d = _device.DeviceArray(_core._host_memory_for_tests(want.nbytes), 0, want.shape, want.dtype,
                            tuple(s // 4 for s in want.strides))
    for i, img in enumerate(imgs):
        d[i]._memory.copy_from_host(i * want[0].nbytes,
                                    img.get_fdata(dtype=np.float32).reshape(-1, order="F").view(np.uint8))
    assert d.strides == want.strides and np.array_equal(d.cpu(), want)
    assert np.array_equal(np.from_dlpack(d[1]), want[1]) and d[-1].shape == want.shape[1:]
    with pytest.raises(IndexError):
        d[2]


def test_cpu_copy_and_repr():
    a = np.asfortranarray(np.arange(12, dtype=np.uint16).reshape(3, 4))
    d = host_array(a)
    c = d.cpu()
    assert c.strides == a.strides and np.array_equal(c, a) and d.numpy().dtype == a.dtype
    assert c.__array_interface__["data"][0] != d._memory.address
    assert "shape=(3, 4)" in repr(d) and d.device == "cpu" and len(d) == 3 and d.nbytes == 24
    assert host_array(np.zeros((0, 3))).cpu().shape == (0, 3)


def test_views_are_checked_against_the_memory():
    m = _core._host_memory_for_tests(16)
    with pytest.raises(ValueError):
        m.view(0, [5], [1], "float32")
    with pytest.raises(ValueError):
        m.view(8, [2], [2], "float32")
    with pytest.raises(ValueError):
        m.view(0, [2], [1], "rgb24")


def test_memory_alive_at_interpreter_exit():
    # A live array and a live tensor at exit: freed (or left to the process) without a crash.
    code = ("import numpy as np, torch; from voxpipe._foundation import device as _device; "
            "d = _device.array_to_device(np.arange(10.0), None); t = torch.from_dlpack(d)")
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---- the file workers of load_many/load_batch to a device (no driver needed) -----------------

def _run(n, workers, work):
    import voxpipe._many.loading as many

    before = set(threading.enumerate())
    try:
        many.run_files([f"file{i}" for i in range(n)], workers, work)
    finally:
        assert set(threading.enumerate()) - before == set()  # every worker joined


def test_file_workers_overlap_and_cover_every_file_once():
    lock, now, most, done = threading.Lock(), [0], [0], []

    def work(i):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.02)
        with lock:
            now[0] -= 1
            done.append(i)

    _run(8, 3, work)
    assert sorted(done) == list(range(8)) and most[0] == 3
    done.clear(), most.__setitem__(0, 0)
    _run(5, 1, work)
    assert done == list(range(5)) and most[0] == 1  # one worker: input order, one at a time


def test_file_workers_raise_the_first_failing_file_in_input_order():
    """File 2 fails late, file 3 at once: file 2's error is raised, naming it; nothing is
    claimed after the first failure, and every worker has ended when it raises."""
    started = []

    def work(i):
        started.append(i)
        if i == 2:
            time.sleep(0.1)
            raise ValueError("late")
        if i == 3:
            raise OSError("early")
        time.sleep(0.01)

    with pytest.raises(ValueError, match="late") as info:
        _run(20, 2, work)
    assert "file2" in " ".join(getattr(info.value, "__notes__", []))
    assert max(started) <= 4 and sorted(started) == list(range(len(started)))


# ---- the device path: stand-in driver (CI) and real GPU ---------------------------------------

@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> str:
    """A directory holding the stand-in driver as libcuda.so.1: $VOXPIPE_FAKE_CUDA (a built
    voxpipe_fake_cuda module), else compiled here from tests/cpp/cuda/fake_cuda.cpp."""
    d = tmp_path_factory.mktemp("fake_cuda")
    built = os.environ.get("VOXPIPE_FAKE_CUDA")
    if built:
        shutil.copy(built, d / "libcuda.so.1")
        return str(d)
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    src = ROOT / "tests" / "cpp" / "cuda" / "fake_cuda.cpp"
    if not cxx or not src.exists():
        pytest.skip("no C++ compiler or no tests/cpp/cuda/fake_cuda.cpp to build the stand-in driver")
    subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-fvisibility=hidden",
                    f"-I{ROOT / 'src'}", f"-I{ROOT / 'include'}", str(src), "-o",
                    str(d / "libcuda.so.1")], check=True)
    return str(d)


def _run_check(tmp_path, env, *flags):
    r = subprocess.run([sys.executable, str(HERE / "device_check.py"), str(tmp_path), *flags],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.strip().splitlines()[-1].startswith("checked ")


@pytest.mark.skipif(not STATUS.kernels_built, reason=STATUS.reason or "kernels not built")
def test_device_path_on_the_stand_in_driver_equals_the_host_path(fake_driver, tmp_path):
    fake = fake_driver
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = fake + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    probe = subprocess.run([sys.executable, "-c", "import voxpipe as vp; s = vp.cuda_status(); "
                            "print(s.available, s.device_names)"], env=env, capture_output=True,
                           text=True, check=True)
    assert probe.stdout.strip() == "True ('voxpipe fake device',)", probe.stdout + probe.stderr
    _run_check(tmp_path, env, "--counters")


@pytest.mark.skipif(not STATUS.kernels_built, reason=STATUS.reason or "kernels not built")
@pytest.mark.skipif(GPU, reason="a real GPU: bench/gpu/run.sh runs the benchmark itself")
def test_gpu_benchmark_rows_run_on_the_stand_in_driver(fake_driver, tmp_path):
    """bench/gpu/bench_gpu.py --small: every GPU row runs (the stand-in's figures mean nothing),
    so that a GPU session is not lost to a broken script."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = fake_driver + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    out = tmp_path / "gpu.md"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu" / "bench_gpu.py"), "--small",
                        "--repeat", "1", "--output", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    text = out.read_text()
    for row in ("Pinned host-to-device bandwidth", "vp dataobj.read(float32, device='cuda') |",
                "[nibabel-written, one member] vp dataobj.read(float32, device='cuda')",
                "vp.dicom.scan(folder)[0].get_data(float32, device='cuda')",
                "[JPEG-LS] series.get_data(float32, device='cuda')",
                "[32 files] vp.load_batch(device='cuda')", "cuFile ("):
        assert row in text, row


@pytest.mark.skipif(not GPU, reason=STATUS.reason or "no real GPU (stand-in driver)")
def test_device_path_on_the_gpu_equals_the_host_path(tmp_path):
    _run_check(tmp_path, dict(os.environ))


@pytest.mark.skipif(not GPU, reason=STATUS.reason or "no real GPU (stand-in driver)")
def test_torch_from_dlpack_on_cuda(nii):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    want = vp.load(nii[1]).get_fdata(dtype=np.float32)
    d = vp.load(nii[1]).dataobj.read(dtype=np.float32, device="cuda")
    t = torch.from_dlpack(d)
    assert t.is_cuda and t.data_ptr() == d._memory.address
    assert t.stride() == tuple(s // 4 for s in want.strides)
    assert np.array_equal(t.cpu().numpy(), want)
    b = vp.load_batch(nii, device=torch.device("cuda", 0))
    tb = torch.from_dlpack(b)
    assert torch.equal(tb.cpu(), torch.from_numpy(vp.load_batch(nii)))
