"""pytest plugin for nibabel's own test suite under ``vp.accelerate_nibabel()``
(``pytest -p voxpipe_nibabel_plugin --pyargs nibabel``, as scripts/nibabel_suite.py runs it).

It turns acceleration on before any test module is imported (the sitecustomize beside it does
that already at interpreter start in scripts/nibabel_suite.py's run), checks after every test
that it is still on, and counts how the NIfTI opens went: served by voxpipe, or handed back to
nibabel's own from_file_map (a file object, a format or header voxpipe does not open). The counts
end the run's report and go, as JSON, to the file named by VOXPIPE_NIBABEL_COUNTS, so that the
runner can tell a run in which voxpipe served nothing from a real one.
"""

from __future__ import annotations

import collections
import json
import os

import pytest

import voxpipe
from voxpipe._formats.nifti import open as _nifti_open

_counts: collections.Counter = collections.Counter()
# NIfTI opens voxpipe served, per test module: which modules exercise it at all.
_served_in: collections.Counter = collections.Counter()
_module = "(collection)"


def _counting(original):
    def from_file_map(*args, **kwargs):
        try:
            img = original(*args, **kwargs)
        except Exception as exc:
            _counts[f"refused: {type(exc).__name__} (nibabel's code opened it)"] += 1
            raise
        _counts["fell back (nibabel's code opened it)" if img is None
                else "served by voxpipe"] += 1
        if img is not None:
            _served_in[_module] += 1
        return img

    return from_file_map


def pytest_configure(config):
    _nifti_open._from_file_map = _counting(_nifti_open._from_file_map)
    voxpipe.accelerate_nibabel()


def pytest_runtest_logstart(nodeid, location):
    global _module
    _module = nodeid.split("::")[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if not voxpipe.nibabel_accelerated():
        voxpipe.accelerate_nibabel()
        raise AssertionError("the test turned vp.accelerate_nibabel() off")
    return result


def pytest_report_header(config):
    return f"voxpipe {voxpipe.__version__} ({os.path.dirname(voxpipe.__file__)}): " \
           "nibabel.load reads NIfTI through voxpipe"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_sep("-", "NIfTI opens under vp.accelerate_nibabel()")
    for what, n in sorted(_counts.items()):
        terminalreporter.write_line(f"{n:6d} {what}")
    path = os.environ.get("VOXPIPE_NIBABEL_COUNTS")
    if path:
        with open(path, "w") as f:
            json.dump({"opens": dict(_counts), "served_by_module": dict(_served_in)}, f,
                      indent=1, sort_keys=True)
