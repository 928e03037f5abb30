"""The `voxpipe` command runs no code from the folder it runs in: a folder holding voxpipe.py,
numpy.py, zarr.py, obstore.py (and nibabel.py, json.py, fsspec.py, sitecustomize.py,
usercustomize.py), each writing a marker file when imported, is the working folder of every
command, on a local file, a NIfTI-Zarr store and an s3:// object (moto's S3 server, started
here), run by both forms of the command (tests/python/voxpipe_commands.py): no marker appears
and each output is the right one. That the planted modules are found by a Python that puts the
folder first on sys.path is checked too (`python -m voxpipe`, the hand-off the program used to
make).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from s3_server import S3Server
from voxpipe_commands import KINDS, LAUNCHER, command, cxx_program

BUCKET = "voxpipe-isolation"
PLANTED = ("voxpipe", "numpy", "zarr", "obstore", "nibabel", "json", "fsspec", "sitecustomize",
           "usercustomize")
TIMEOUT = 120


@dataclass
class World:
    folder: Path  # the working folder, with the planted modules and in.nii.gz
    markers: Path  # where a planted module that is imported writes its marker
    dicom: Path
    env: dict[str, str]
    data: np.ndarray  # in.nii.gz's scaled values


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("isolation")
    folder, markers = base / "work", base / "markers"
    folder.mkdir()
    markers.mkdir()
    for name in PLANTED:
        (folder / f"{name}.py").write_text(
            f"open({str(markers / name)!r}, 'w').write('imported from the working folder')\n")
    img = nib.Nifti1Image(np.random.default_rng(31).integers(-900, 900, (12, 10, 8, 3),
                                                               dtype=np.int16),
                          np.diag([2.0, 2.0, 2.5, 1.0]))
    img.header.set_slope_inter(0.5, 10.0)
    nib.save(img, folder / "in.nii.gz")
    from test_cli_dcm2nii import write_series
    write_series(base / "dicom", slices=4)

    server = S3Server(BUCKET)
    server.client.upload_file(str(folder / "in.nii.gz"), BUCKET, "sub-01/in.nii.gz")
    for f in sorted((base / "dicom").iterdir()):
        server.client.upload_file(str(f), BUCKET, f"dicom/{f.name}")
    env = server.environment(VOXPIPE_CACHE_DIR=str(base / "cache"))
    yield World(folder, markers, base / "dicom", env,
                nib.load(folder / "in.nii.gz").get_fdata())
    server.stop()


@pytest.fixture(params=KINDS)
def voxpipe(request, world):
    """Runs `voxpipe ARGS...` of one kind in the planted folder; asserts that it succeeded and
    imported nothing from there, and returns its standard output."""
    if request.param == "program" and cxx_program() is None:
        pytest.skip("no voxpipe executable built")
    prefix, env = command(request.param, world.env)

    def run(*args) -> str:
        r = subprocess.run([*prefix, *map(str, args)], cwd=world.folder, env=env,
                           capture_output=True, text=True, timeout=TIMEOUT)
        imported = sorted(p.name for p in world.markers.iterdir())
        for p in world.markers.iterdir():  # the next command starts clean, even after a failure
            p.unlink()
        assert not imported, f"voxpipe {args[0]} imported {imported} from the working folder"
        assert r.returncode == 0, f"voxpipe {' '.join(map(str, args))}: {r.stderr}"
        return r.stdout
    return run


def same_data(path: Path, world: World) -> bool:
    return nib.load(path).get_fdata().tobytes() == world.data.tobytes()


def test_the_planted_modules_are_what_a_python_started_with_m_imports(world):
    # What the program ran before for URLs and stores: the folder comes first with -m.
    r = subprocess.run([sys.executable, "-m", "voxpipe", "--version"], cwd=world.folder,
                       env=world.env, capture_output=True, text=True, timeout=TIMEOUT)
    imported = sorted(p.name for p in world.markers.iterdir())
    for p in world.markers.iterdir():
        p.unlink()
    assert imported == ["voxpipe"], (imported, r.stderr)


def test_local_files(voxpipe, world, tmp_path):
    assert voxpipe("--version").startswith("voxpipe ")
    assert "int16" in voxpipe("info", "in.nii.gz")
    assert json.loads(voxpipe("info", "--json", "in.nii.gz"))["shape"] == [12, 10, 8, 3]
    voxpipe("convert", "in.nii.gz", tmp_path / "out.nii")
    assert same_data(tmp_path / "out.nii", world)
    assert voxpipe("index", "in.nii.gz", "-o", tmp_path / "in.gzidx").startswith("wrote ")
    voxpipe("resample", "in.nii.gz", "--reference", "in.nii.gz", "-o", tmp_path / "r.nii.gz")
    assert nib.load(tmp_path / "r.nii.gz").shape == world.data.shape
    voxpipe("view", "in.nii.gz", "-o", tmp_path / "in.png")
    assert (tmp_path / "in.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "1 series written" in voxpipe("dcm2nii", world.dicom, "-o", tmp_path / "dcm")
    # The nibabel child is a Python too: it ran (this Python, found without $VOXPIPE_PYTHON by
    # the pip command) and imported neither the planted numpy, nibabel nor json.
    out = voxpipe("bench-load", "in.nii.gz", "--repeat", "1")
    assert f"nibabel {nib.__version__}, Python" in out and sys.executable in out, out


def test_stores(voxpipe, world, tmp_path):
    store = tmp_path / "in.nii.zarr"
    assert voxpipe("convert", "in.nii.gz", store).startswith("wrote ")
    assert "int16" in voxpipe("info", store)
    voxpipe("convert", store, tmp_path / "back.nii.gz")
    assert same_data(tmp_path / "back.nii.gz", world)


def test_urls(voxpipe, world, tmp_path):
    url = f"s3://{BUCKET}/sub-01/in.nii.gz"
    assert (voxpipe("info", url).replace(url, "X")
            == voxpipe("info", "in.nii.gz").replace("in.nii.gz", "X"))
    voxpipe("convert", url, tmp_path / "out.nii")
    assert same_data(tmp_path / "out.nii", world)
    voxpipe("convert", url, tmp_path / "out.nii.zarr")
    assert "int16" in voxpipe("info", tmp_path / "out.nii.zarr")
    assert voxpipe("index", "--cache", url).startswith("wrote ")
    voxpipe("view", url, "-o", tmp_path / "url.png")
    assert (tmp_path / "url.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "4 files read" in voxpipe("dcm2nii", f"s3://{BUCKET}/dicom/", tmp_path / "dcm")


def test_the_pip_command_imports_the_package_for_every_url_and_store():
    # The command imports the package (which reads URLs and stores) only when an argument may
    # need it: its test must accept everything the package calls a URL or a store.
    spec = importlib.util.spec_from_file_location("python_launcher", LAUNCHER)
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    from voxpipe._sources.remote import is_url
    names = ["s3://b/k.nii", "S3A://b/k", "gs://b/x", "az://c/x", "abfss://c@a/x", "adl://x/y",
             "azure://c/x", "http://h/x.nii.gz", "HTTPS://h/x?X-Amz-Signature=1", "a.nii.zarr",
             "a.ZARR/", "dir/b.ome.zarr//", "x.zarr?version=2"]
    for name in names:
        assert is_url(name) or name.split("?")[0].rstrip("/").lower().endswith(".zarr")
        assert launcher.may_need_package(["info", "--json", name]), name
    for name in ["in.nii.gz", "file.zarr.nii", "s3.nii", "--json", "zarr"]:
        assert not launcher.may_need_package(["info", name]), name
