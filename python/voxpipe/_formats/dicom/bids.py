"""DICOM series to BIDS-ready NIfTI, as dcm2niix writes them: ``vp.dicom.to_nifti``.

The conversion is the core's ``voxpipe dcm2niix`` (cli/dcm2niix.cpp), run in this process with
its output kept: dcm2niix's file names, voxel order, sidecar keys and gradient tables. This
module turns keyword arguments into that command's options and its results into Python values.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Literal, NamedTuple

from ..._foundation.errors import (FormatError, InvalidArgumentError, SkippedFileWarning,
                                   VoxpipeError, VoxpipeFileNotFoundError, VoxpipeIOError)
from ..._foundation.native import core as _core
from ..._foundation.types import StrPath


class Converted(NamedTuple):
    """One series as ``to_nifti`` wrote it: the paths of its files (None for those not written),
    its sidecar's metadata as a dict (None without a sidecar), and the images of its DICOM
    overlays (``NAME_ROI1.nii``..., as dcm2niix writes them; empty when it has none)."""

    nifti: str | None
    sidecar: str | None
    metadata: dict[str, Any] | None
    bval: str | None
    bvec: str | None
    overlays: tuple[str, ...] = ()


def _flag(value: bool) -> str:
    return "y" if value else "n"


def to_nifti(source: StrPath, out_dir: StrPath, *, filename: str = "%f_%p_%t_%s",
             compress: bool = True, sidecar: bool = True, nifti: bool = True,
             anonymize: bool = True, ignore_derived: bool = False, philips_precise: bool = True,
             dcm2niix_order: bool = True, depth: int = 5, single_file: bool = False,
             overwrite: Literal["suffix", "replace", "skip"] = "suffix",
             compression_level: int | None = None) -> list[Converted]:
    """Convert every DICOM series under ``source`` into ``out_dir`` as dcm2niix does: one NIfTI
    image per series (``.nii.gz``, or ``.nii`` with ``compress=False``), its BIDS JSON sidecar
    and, for diffusion series, ``.bval``/``.bvec``. Returns what was written, series by series.

    ``source``: a folder (subfolders down to ``depth`` levels), a file (its folder is converted
    unless ``single_file``), or an object store prefix (``s3://bucket/study/dicom/``...; the
    store configured by the environment, as the ``voxpipe`` command reads URLs).
    ``out_dir`` must exist. The options are dcm2niix's, by name:

    ========================  =====================  =====================================
    keyword                    dcm2niix                meaning
    ========================  =====================  =====================================
    ``filename``               ``-f``                  file name template (``%p_%s``, ...)
    ``compress``               ``-z y/n``              gzip the images
    ``sidecar``, ``nifti``     ``-b y/n/o``            which files are written
    ``anonymize``              ``-ba``                 leave patient keys out of sidecars
    ``ignore_derived``         ``-i``                  skip derived, localizer and 2D images
    ``philips_precise``        ``-p``                  Philips precise (float) scaling
    ``dcm2niix_order``         ``-y``                  dcm2niix's voxel order (rows flipped)
    ``depth``                  ``-d``                  folder search depth
    ``single_file``            ``-s``                  convert only the file named
    ``overwrite``              ``-w 2/1/0``            an existing name: suffix a, b, ...;
                                                       replace it; or skip the series
    ``compression_level``      ``-1..-9``              gzip level
    ========================  =====================  =====================================

    Raises FormatError when no DICOM image is found, VoxpipeFileNotFoundError for a missing
    source, VoxpipeIOError for an output folder that is missing or not writable. Series that
    cannot be converted (a missing slice, a name ``overwrite="skip"`` leaves) are left out with
    a SkippedFileWarning naming why; if none could be, FormatError.

    >>> import nibabel as nib, pathlib, tempfile
    >>> src = pathlib.Path(nib.__file__).parent / "nicom" / "tests" / "data" / "0.dcm"
    >>> out = tempfile.mkdtemp()
    >>> [c.metadata["SeriesNumber"] for c in vp.dicom.to_nifti(src, out, single_file=True)]
    [12]
    """
    if overwrite not in ("suffix", "replace", "skip"):
        raise InvalidArgumentError(f"overwrite={overwrite!r}: expected 'suffix', 'replace' or "
                                   "'skip'")
    if not 0 <= depth <= 9:
        raise InvalidArgumentError(f"depth={depth}: expected 0 to 9 (folder levels)")
    if compression_level is not None and not 1 <= compression_level <= 9:
        raise InvalidArgumentError(f"compression_level={compression_level}: expected 1 to 9")
    if not nifti and not sidecar:
        raise InvalidArgumentError("nifti=False and sidecar=False: nothing would be written")
    src, out = os.fspath(source), os.fspath(out_dir)
    if not filename or filename.startswith("-"):
        raise InvalidArgumentError(f"filename={filename!r}: expected a dcm2niix -f template")
    args = ["-b", ("y" if nifti else "o") if sidecar else "n", "-ba", _flag(anonymize),
            "-z", _flag(compress), "-f", filename, "-i", _flag(ignore_derived),
            "-p", _flag(philips_precise), "-y", _flag(dcm2niix_order), "-d", str(depth),
            "-s", _flag(single_file), "-w", {"suffix": "2", "replace": "1", "skip": "0"}[overwrite],
            "-o", out]
    if compression_level is not None:
        args.insert(0, f"-{compression_level}")
    rc, stdout, stderr, bases = _core.cli_dcm2niix([*args, src])
    message = " ".join(line.strip() for line in stderr.splitlines() if "Error" in line) or \
        stderr.strip() or stdout.strip()
    if rc == 2:
        raise FormatError(f"no DICOM images found in {src}: {message}", src)
    if rc == 5:
        if "://" not in src and not os.path.exists(src):
            raise VoxpipeFileNotFoundError(f"{src}: no such file or folder", src)
        raise VoxpipeIOError(message, src)
    if rc in (6, 7):
        raise VoxpipeIOError(message, out)
    if rc == 12:
        raise InvalidArgumentError(message)
    if rc not in (0, 1, 8):
        raise VoxpipeError(f"voxpipe dcm2niix ended with status {rc}: {message}", src)
    # 1: nothing converted, 8: some series not: each left out says why on a line of its own.
    failed = [line.split(": ", 2)[2] for line in stderr.splitlines()
              if line.startswith("Error: not converted: ")]
    skipped = [line.split(": ", 1)[1] for line in stderr.splitlines()
               if line.startswith("Warning: Skipping existing file")]
    if not bases and failed:
        raise FormatError(f"no series of {src} could be converted: " + "; ".join(failed), src)
    for why in failed + skipped:
        warnings.warn(why, SkippedFileWarning, stacklevel=2)
    return [_converted(base, nifti, sidecar) for base in bases]


def _converted(base: str, nifti: bool, sidecar: bool) -> Converted:
    image = None
    if nifti:
        for suffix in (".nii.gz", ".nii"):
            if os.path.exists(base + suffix):
                image = base + suffix
                break
    side = base + ".json" if sidecar and os.path.exists(base + ".json") else None
    metadata = None
    if side is not None:
        with open(side, encoding="utf-8") as f:
            metadata = json.load(f)
    bval = base + ".bval" if os.path.exists(base + ".bval") else None
    bvec = base + ".bvec" if os.path.exists(base + ".bvec") else None
    overlays = []
    for n in range(1, 17):  # overlay groups 6000-601E: dcm2niix's _ROI1 ... _ROI16
        roi = next((base + f"_ROI{n}{s}" for s in (".nii.gz", ".nii")
                    if os.path.exists(base + f"_ROI{n}{s}")), None)
        if roi is not None:
            overlays.append(roi)
    return Converted(image, side, metadata, bval, bvec, tuple(overlays))
