#!/usr/bin/env python3
"""nibabel's own test suite, run twice: as nibabel ships it, and with ``vp.accelerate_nibabel()``
active (nibabel.load and every from_file_map of its NIfTI classes read through voxpipe). Every
test that passes in the first run must pass in the second, apart from the differences listed in
KNOWN_DIFFERENCES below, each explained in docs/nifti.md ("nibabel's test suite under
accelerate_nibabel()"). Exits 1 on any other difference, on a listed one that no longer differs
(the list stays exact), and on a run in which voxpipe served no NIfTI open.

Usage: scripts/nibabel_suite.py [--full] [--keep DIR] [PYTEST_ARG...]
  (default)  the modules in CI_MODULES less CI_DESELECT: those that open NIfTI files through
             nibabel.load / from_file_map (both runs side by side: about a minute on 2 cores)
  --full     nibabel's whole suite (5,500 tests, about 3.5 min a run on 2 cores)
  --keep DIR keep the JUnit XML reports, logs and the counts of opens in DIR
  PYTEST_ARG passed to both pytest runs (e.g. -k nifti1)

The voxpipe it tests is the one `python -c "import voxpipe"` imports (the package installed in
.venv in CI; devtools' PYTHONPATH for a working tree). Run with the interpreter that has nibabel
(.venv/bin/python). nibabel's test data that its wheel lacks (nibabel-data) and optional
packages it lacks make tests skip, in both runs alike; test_image_api needs pytest-httpserver
(requirements-dev.txt), without it every test there errors in both runs and this script stops.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import nibabel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN_DIR = os.path.join(ROOT, "tests", "nibabel_suite")

# The modules CI runs: those of nibabel 5.4.2's suite in which voxpipe serves NIfTI opens, as
# the plugin counts them per module in a --full run (the run prints them). The rest
# (quaternions, MINC, PAR/REC, GIFTI, ECAT, Analyze/SPM headers, nibabel's own ArrayProxy and
# fileslice tests: four fifths of the run time) never reaches voxpipe. Re-check the list with
# --full when nibabel's pin changes.
CI_MODULES = [
    # NIfTI-1/2 headers, images, pairs, BytesIO round trips, from_file_map, pickles
    "nibabel.tests.test_nifti1",
    "nibabel.tests.test_nifti2",
    # the image API battery: files, streams, bytes, URLs, mmap/keep_file_open, slicing, caching
    "nibabel.tests.test_image_api",
    # nib.load/save over every kind of file, compressed and not; the files interface
    "nibabel.tests.test_image_load_save",
    "nibabel.tests.test_loadsave",
    "nibabel.tests.test_files_interface",
    # scaled and unscaled round trips through BytesIO file maps
    "nibabel.tests.test_round_trip",
    # concat_images / four_to_three / squeeze, resample_from_to / conform on loaded images
    "nibabel.tests.test_funcs",
    "nibabel.tests.test_processing",
    # the nib-* commands: in-process (cmdline: conform, convert, roi, stats, ...) and as
    # subprocesses (test_scripts starts the commands beside the interpreter; the sitecustomize
    # beside the plugin accelerates them too)
    "nibabel.cmdline",
    "nibabel.tests.test_scripts",
    # CIFTI-2: a NIfTI-2 image whose data nibabel reshapes
    "nibabel.cifti2",
    # streamlines' reference-space helpers take a NIfTI file
    "nibabel.streamlines.tests.test_utils",
]
# Left out of those modules: tests of formats that never reach voxpipe (Analyze and SPM images
# are not NIfTI classes; MINC, MGH, PAR/REC, ... open no NIfTI), and nib-* commands that read
# no NIfTI or read it as nib-ls does already (parrec2nii alone takes 16 s).
CI_DESELECT = [
    "tests/test_image_api.py::TestAnalyzeAPI",
    "tests/test_image_api.py::TestSpm99AnalyzeAPI",
    "tests/test_image_api.py::TestSpm2AnalyzeAPI",
    "tests/test_scripts.py::test_help",
    "tests/test_scripts.py::test_parrec2nii",
    "tests/test_scripts.py::test_nib_trk2tck",
    "tests/test_scripts.py::test_nib_tck2trk",
]

# Test ids (module path::[Class::]name) that pass without acceleration and fail with it, on
# purpose. Each is explained in docs/nifti.md, "nibabel's test suite under accelerate_nibabel()".
KNOWN_DIFFERENCES: dict[str, str] = {}


def test_outcomes(xml_path: str, messages: dict[str, str] | None = None) -> dict[str, str]:
    """{test id: passed | failed | error | skipped} from a JUnit XML report; `messages` gets
    the message of each failure or error."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        # classname is the dotted module path, then the class if any: tests.test_x.TestY
        parts = classname.split(".")
        split = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
        test_id = "/".join(parts[:split]) + ".py::" + "::".join(parts[split:] + [name])
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                if messages is not None:
                    messages[test_id] = child.get("message", "")
                break
            if child.tag == "skipped":
                # an xfail is a JUnit skip too; xpassed strict ones are failures
                outcome = "skipped"
        if outcomes.get(test_id, "passed") != "passed":
            continue  # a teardown error is a second entry of the same test: keep the worst
        outcomes[test_id] = outcome
    return outcomes


def start_run(name: str, targets: list[str], extra: list[str], workdir: str, accelerated: bool):
    env = dict(os.environ)
    # the nib-* commands test_scripts starts are next to the interpreter
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("VOXPIPE_ACCELERATE_NIBABEL", None)
    # Test ids relative to nibabel's folder (tests/test_nifti1.py::...), whatever the targets.
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            "--rootdir", os.path.dirname(nibabel.__file__),
            "--junitxml", os.path.join(workdir, f"{name}.xml"), "--pyargs", *targets, *extra]
    if accelerated:
        env["PYTHONPATH"] = PLUGIN_DIR + os.pathsep + env.get("PYTHONPATH", "")
        env["VOXPIPE_ACCELERATE_NIBABEL"] = "1"
        env["VOXPIPE_NIBABEL_COUNTS"] = os.path.join(workdir, "opens.json")
        args[3:3] = ["-p", "voxpipe_nibabel_plugin"]
    # An empty folder of its own as the working directory: no conftest, ini file or
    # temporary output of this repository or of the other run is seen.
    cwd = os.path.join(workdir, name)
    os.makedirs(cwd)
    # Temporary files too: some of nibabel's tests leave theirs (test_cifti2io_axes makes 144
    # with tempfile.mkstemp and never removes them); they go with the work folder.
    env["TMPDIR"] = os.path.join(workdir, f"{name}-tmp")
    os.makedirs(env["TMPDIR"])
    log = open(os.path.join(workdir, f"{name}.log"), "w")
    return subprocess.Popen(args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT), log


def last_line(path: str) -> str:
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else "(no output)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="nibabel's whole suite")
    parser.add_argument("--keep", metavar="DIR", help="keep reports and logs in DIR")
    options, extra = parser.parse_known_args()
    targets = ["nibabel"] if options.full else CI_MODULES
    if not options.full:
        extra = [f"--deselect={t}" for t in CI_DESELECT] + extra

    workdir = options.keep or tempfile.mkdtemp(prefix="nibabel_suite.")
    if options.keep:
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir)
    try:
        import voxpipe  # the one both runs see: named in the report

        print(f"nibabel {nibabel.__version__}, voxpipe from {os.path.dirname(voxpipe.__file__)}"
              f"; {'whole suite' if options.full else f'{len(targets)} modules'}", flush=True)
        start = time.monotonic()
        runs = {name: start_run(name, targets, extra, workdir, accelerated)
                for name, accelerated in (("nibabel", False), ("accelerated", True))}
        for name, (proc, log) in runs.items():
            proc.wait()
            log.close()
            print(f"{name:>11}: {last_line(os.path.join(workdir, f'{name}.log'))}")
        print(f"both runs: {time.monotonic() - start:.0f} s")
        return compare(workdir, options.full)
    finally:
        if not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def compare(workdir: str, full: bool) -> int:
    try:
        plain = test_outcomes(os.path.join(workdir, "nibabel.xml"))
        messages: dict[str, str] = {}
        accel = test_outcomes(os.path.join(workdir, "accelerated.xml"), messages)
        with open(os.path.join(workdir, "opens.json")) as f:
            opens = json.load(f)
    except (OSError, ET.ParseError, ValueError) as exc:
        print(f"a run left no report ({exc}): see its log above")
        return 1
    failed = False
    passing = {t for t, o in plain.items() if o == "passed"}
    image_api = [t for t in plain if t.startswith("tests/test_image_api.py")]
    if image_api and not any(t in passing for t in image_api):
        print("test_image_api passed nothing without acceleration: is pytest-httpserver "
              "installed (requirements-dev.txt)?")
        failed = True
    lost = sorted(t for t in passing if accel.get(t) != "passed")
    unexpected = [t for t in lost if t not in KNOWN_DIFFERENCES]
    stale = sorted(t for t in KNOWN_DIFFERENCES
                   if t in plain and (t not in passing or accel.get(t) == "passed"))
    gained = sorted(t for t, o in accel.items() if o == "passed" and t not in passing)
    print(f"passed without acceleration: {len(passing)} of {len(plain)}; with it: "
          f"{sum(o == 'passed' for o in accel.values())} of {len(accel)}; "
          f"known differences: {len(lost) - len(unexpected)}")
    print("NIfTI opens with acceleration: " + ", ".join(
        f"{n} {what}" for what, n in sorted(opens["opens"].items())))
    if not opens["opens"].get("served by voxpipe"):
        print("voxpipe served no NIfTI open: the accelerated run tested nothing of voxpipe")
        failed = True
    if unexpected:
        failed = True
        print(f"\n{len(unexpected)} tests pass without acceleration and not with it:")
        for t in unexpected:
            message = messages.get(t, "").strip().splitlines()
            print(f"  {t}: {accel.get(t, 'not run')}" + (f": {message[0][:200]}" if message
                                                          else ""))
        print("fix voxpipe, or, for a deliberate difference, explain it in docs/nifti.md and "
              "list it in KNOWN_DIFFERENCES (scripts/nibabel_suite.py)")
    if stale:
        failed = True
        print("\nlisted in KNOWN_DIFFERENCES but no longer a difference (remove them there and "
              "in docs/nifti.md):")
        for t in stale:
            print(f"  {t}")
    if gained:
        print(f"\n{len(gained)} tests pass only with acceleration:")
        for t in gained:
            print(f"  {t}: {plain.get(t, 'not run')} without")
    if full:
        served = sorted(m for m in {t.split("::")[0] for t in plain}
                        if opens["served_by_module"].get(m))
        print("\nmodules where voxpipe served NIfTI opens: " + " ".join(served))
    print(f"\nnibabel suite under accelerate_nibabel(): {'FAILED' if failed else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
