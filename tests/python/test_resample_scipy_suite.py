"""scipy's own tests of map_coordinates and affine_transform, run against voxpipe's.

scipy.ndimage's test_interpolation.py (shipped in scipy's wheel) is run in a child pytest with
``scipy.ndimage.map_coordinates`` and ``scipy.ndimage.affine_transform`` replaced by voxpipe's;
every test that reaches voxpipe must pass (with scipy 1.17.1: 273 of the module's 991, among them
the complex-input tests and the output_shape test that expects RuntimeError). The rest of the
module (zoom, shift, rotate, spline_filter, geometric_transform, which voxpipe does not have)
runs scipy's own code and is not counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ndi = pytest.importorskip("scipy.ndimage")

PLUGIN = r'''
import json
import os

import pytest
import scipy.ndimage as ndi
from scipy._lib._array_api import xp_capabilities_table

import voxpipe as vp

_calls = [0]
_outcomes = {}


def _counted(f):
    def g(*args, **kwargs):
        _calls[0] += 1
        return f(*args, **kwargs)
    return g


for _name in ("map_coordinates", "affine_transform"):
    _g = _counted(getattr(vp, _name))
    # scipy's tests look their functions up in its array-API capabilities table.
    xp_capabilities_table[_g] = xp_capabilities_table[getattr(ndi, _name)]
    setattr(ndi, _name, _g)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if call.when == "setup":
        _calls[0] = 0
    if call.when == "call" or report.outcome != "passed":
        _outcomes[item.name] = _outcomes.get(item.name) or (
            report.outcome, _calls[0], str(report.longrepr)[-600:] if report.failed else "")


def pytest_sessionfinish(session):
    with open(os.environ["VOXPIPE_SCIPY_SUITE_OUT"], "w") as f:
        json.dump(_outcomes, f)
'''


def _scipy_test_file() -> str:
    path = os.path.join(os.path.dirname(ndi.__file__), "tests", "test_interpolation.py")
    if not os.path.exists(path):
        pytest.skip("scipy's tests are not installed")
    try:
        from scipy._lib._array_api import xp_capabilities_table  # noqa: F401
    except ImportError:
        pytest.skip("this scipy has no array-API capabilities table (scipy < 1.16)")
    return path


def test_scipy_s_interpolation_tests_pass_with_voxpipe_s_functions(tmp_path):
    test_file = _scipy_test_file()
    (tmp_path / "voxpipe_scipy_plugin.py").write_text(PLUGIN)
    out = tmp_path / "outcomes.json"
    env = dict(os.environ, VOXPIPE_SCIPY_SUITE_OUT=str(out),
               PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    cp = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "voxpipe_scipy_plugin", "-o", "addopts=", test_file],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.exists(), cp.stdout[-3000:] + cp.stderr[-3000:]
    outcomes = json.loads(out.read_text())
    reached = {name: o for name, o in outcomes.items() if o[1] > 0}
    failed = {name: o[2] for name, o in reached.items() if o[0] != "passed"}
    assert not failed, "\n\n".join(f"{name}:\n{text}" for name, text in failed.items())
    # The suite did reach voxpipe: its affine and map_coordinates classes, and the tests that
    # failed before complex inputs and scipy's RuntimeError (issue 31, item 12).
    assert len(reached) >= 200, f"only {len(reached)} of scipy's tests called voxpipe"
    for name in ["test_affine_transform05[numpy-complex128-3]",
                 "test_zoom_affine01[numpy-complex128-5]",
                 "test_affine_transform_output_shape[numpy]"]:
        assert name in reached and reached[name][0] == "passed", (name, outcomes.get(name))
