#!/usr/bin/env python
"""`voxpipe dcm2niix` against dcm2niix on every DICOM case found offline (nibabel's nicom test
data, pydicom's test files, pydicom-data, heudiconv's test data): the table of docs/dicom.md
("Parity with dcm2niix", between its markers), one row per file dcm2niix writes.

Each case runs both converters with the options heudiconv passes (tests/python/dcm2niix_parity.py
says which and how the outputs are compared); tests/python/test_dcm2niix_parity.py asserts the
same comparisons. Not a timing: bench_dicom.py measures speed.

Usage: .venv/bin/python bench/dicom_parity.py [--output docs/bids.md]
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import REPO, Parser, publish

sys.path.insert(0, os.path.join(REPO, "tests", "python"))
import dcm2niix_parity as parity  # noqa: E402
from test_dcm2niix_parity import DIFFERENCES  # noqa: E402  (each difference and why)

BEGIN = "<!-- dcm2niix parity: begin (bench/dicom_parity.py) -->"
END = "<!-- dcm2niix parity: end -->"


def dcm2niix_version():
    r = subprocess.run([parity.DCM2NIIX, "--version"], capture_output=True, text=True)
    return (r.stdout + r.stderr).strip().splitlines()[-1]


def main():
    parser = Parser(__doc__)
    args = parser.parse_args()
    output = args.output or os.path.join(REPO, "docs", "bids.md")
    cases = parity.offline_cases()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            results.append(parity.compare_case(case, Path(tmp) / str(i)))
    files = [f for r in results for f in r.files]
    full = sum(1 for f in files if not f.missing and not f.different)
    names = sum(1 for r in results if r.names_equal)
    data = [f for f in files if f.data_equal is not None]
    dwi = [f for f in files if f.bvec_world_err is not None]
    summary = (
        f"{len(cases)} cases ({', '.join(sorted({c.source for c in cases}))}), {len(files)} files "
        f"written by dcm2niix. Same file names: {names} of {len(results)} cases. Equal data: "
        f"{sum(bool(f.data_equal) for f in data)} of {len(data)} images; largest affine "
        f"difference {max((f.affine_mm or 0) for f in data):.1e} mm. Diffusion: "
        f"{sum(bool(f.bval_equal) for f in dwi)} of {len(dwi)} bval equal, largest bvec "
        f"difference in the world frame {max((f.bvec_world_err for f in dwi), default=0):.1e}. "
        f"Sidecars with every dcm2niix key equal: {full} of {len(files)}.")
    text = "\n".join([
        BEGIN,
        f"Reference: {dcm2niix_version()}. Options (both): `{' '.join(parity.OPTIONS)}`. "
        "Columns: names (the same set of files in the case), data (equal values on the same "
        "grid), affine (largest difference of the grid's corners), bval/bvec (bvec: largest "
        "difference of the directions taken back to the world frame), sidecar keys (dcm2niix's "
        "keys that voxpipe writes with an equal value, of those dcm2niix writes but "
        + ", ".join(sorted(parity.KEY_EXCEPTIONS)) + "), and the keys still missing or different.",
        "",
        summary,
        "",
        parity.markdown_table(results),
        "Why the cases that differ do (the list tests/python/test_dcm2niix_parity.py checks):",
        "",
        *[f"- {r.case}: {', '.join(sorted(parity.difference_kinds(r)))}. "
          f"{DIFFERENCES.get(r.case, (set(), 'NOT EXPLAINED'))[1]}."
          for r in results if parity.difference_kinds(r)],
        "",
        END,
    ])
    publish(output, text, BEGIN, END)


if __name__ == "__main__":
    main()
