#!/usr/bin/env python
"""DICOM series: voxpipe against pydicom (every decoding plugin it has) and dcm2niix, in one run.

Writes the "DICOM" section of BENCHMARKS.md (between its markers; the rest of the file is left
as it is) and prints it.

Input: an MR series of 176 sagittal slices, 256x256 int16, one file per slice, made here with
pydicom into bench/data/dicom/ when missing (reused when present). The voxels are those of
bench/data/t1_3d.nii (make_data.py's anatomy and Rician noise, same seed; the file itself is not
needed). Each file carries what a scanner writes: patient/study/series/frame-of-reference UIDs,
geometry, rescale (slope 0.73, intercept -12.5, so the float32 conversion really multiplies),
about 80 typical MR elements, a referenced-image sequence and a Siemens-like private block with
an 8 KiB CSA-like value. Files are named by their SOPInstanceUID, so listing order is not
spatial. Three copies:
  explicit  Explicit VR Little Endian
  jpegls    the same datasets, ds.compress(JPEGLSLossless)    (pyjpegls)
  j2k       the same datasets, ds.compress(JPEG2000Lossless)  (pylibjpeg-openjpeg)

Cases (each run in a fresh child process, this script with --child, after reading every input
file once (warm page cache) and touching 1 GiB in a throwaway process (benchlib.prime_memory)):
  1. folder -> float32 volume: vp.load_dicom (all threads; threads=1) vs pydicom as users write
     it (dcmread every file, sort along the slice normal, pixel_array * slope + intercept into a
     float32 stack) vs `dcm2niix -z n` writing an uncompressed .nii.
  2. where the pixels are (metadata + pixel data offset of every file): vp.dicom.read in a loop,
     vp.dicom.scan (parses the files in parallel and assembles the series) vs pydicom dcmread
     with stop_before_pixels (then the file position) and with defer_size (then value_tell).
  3. compressed series: vp.load_dicom vs the pydicom loop of 1 with each decoding plugin.
  4. peak RSS of vp.load_dicom over the child's baseline (interpreter + imports) against the
     size of the volume, and the part of it that is file-backed (library code run for the first
     time, not allocated).
  5. the first call's extra time over the second, taken apart: vp.load_dicom (Explicit VR) with
     its output pre-faulted (a pooled buffer of its size written and released first), then also
     with the core's worker threads started and nibabel's first Nifti1Image made, and with the
     recycled-output pool off; these rows interleaved, round by round.
Times: "first" is the first call in the fresh process, "second" the same call again in it; the
table shows medians of --repeat processes. Before writing anything the results are checked:
voxpipe's volume must equal pydicom's stack transposed to (columns, rows, slices) exactly,
dcm2niix's .nii must hold the same values on the same grid, and every pixel offset must equal
pydicom's.

Usage: .venv/bin/python bench/bench_dicom.py [--repeat N] [--wait-idle [--max-wait S]]
       [--output PATH]
"""
import copy
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import (HERE, MIB, Parser, cpu_snapshot, git_state, medians, ms, other_work,
                      other_work_brief, prime_memory, publish, reset_peak_rss, run_child, settle,
                      stamp, versions, versions_text, vm, warm)

DICOM = os.path.join(HERE, "data", "dicom")
FOLDERS = {name: os.path.join(DICOM, name) for name in ("explicit", "jpegls", "j2k")}
SYNTAX_NAMES = {"explicit": "Explicit VR Little Endian", "jpegls": "JPEG-LS Lossless",
                "j2k": "JPEG 2000 Lossless"}
DCM2NIIX = os.path.join(os.path.dirname(sys.executable), "dcm2niix")
SHAPE = (256, 256, 176)  # columns, rows, slices
SLOPE, INTERCEPT = "0.73", "-12.5"
PRIME_MIB = 1024  # several times anything a case here allocates
# Section 5: vp.load_dicom of the Explicit VR series with parts of the first call's one-time work
# done before it (child's prepare_first_call), or the recycled-output pool off.
FIRST_CALL_CASES = {
    "plain": {},
    "prefault": {"prefault": True},
    "prefault_warm": {"prefault": True, "warm": True},
    "pool_off": {"env": {"VOXPIPE_POOL_BYTES": "0"}},
    "plain1": {"threads": 1},
    "prefault_warm1": {"prefault": True, "warm": True, "threads": 1},
}
BEGIN = "<!-- dicom benchmark: begin -->"
END = "<!-- dicom benchmark: end -->"


# --------------------------------------------------------------------------------------------
# Input series.
# --------------------------------------------------------------------------------------------

def _uid(*parts):
    from pydicom.uid import generate_uid
    return generate_uid(entropy_srcs=["voxpipe-bench-dicom", *map(str, parts)])


def _slice_dataset(k, pixels, rng):
    """Slice k (0 = leftmost) of the series as a scanner would write it."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, MRImageStorage

    n = SHAPE[2]
    sop = _uid("sop", k)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = MRImageStorage
    meta.MediaStorageSOPInstanceUID = sop
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    meta.ImplementationClassUID = _uid("implementation")
    meta.ImplementationVersionName = "VOXPIPE_BENCH"

    ds = Dataset()
    ds.file_meta = meta
    ds.SpecificCharacterSet = "ISO_IR 100"
    ds.ImageType = ["ORIGINAL", "PRIMARY", "M", "ND", "NORM"]
    ds.InstanceCreationDate, ds.InstanceCreationTime = "20260315", f"1012{k % 60:02d}.123000"
    ds.SOPClassUID, ds.SOPInstanceUID = MRImageStorage, sop
    ds.StudyDate = ds.SeriesDate = ds.AcquisitionDate = ds.ContentDate = "20260315"
    ds.StudyTime, ds.SeriesTime = "100412.000000", "100958.312000"
    ds.AcquisitionTime, ds.ContentTime = "101003.457500", f"1012{k % 60:02d}.120000"
    ds.AccessionNumber = "A20260315-0042"
    ds.Modality = "MR"
    ds.Manufacturer = "SIEMENS"
    ds.InstitutionName = "Bench Hospital"
    ds.InstitutionAddress = "Street 1,City,District,DE,12345"
    ds.ReferringPhysicianName = "Doe^Jane"
    ds.StationName = "MRC40123"
    ds.StudyDescription = "Head^Brain"
    ds.SeriesDescription = "t1_mprage_sag_p2_iso"
    ds.InstitutionalDepartmentName = "Radiology"
    ds.PerformingPhysicianName = "Smith^John"
    ds.OperatorsName = "Tech^A"
    ds.ManufacturerModelName = "Prisma_fit"
    ds.ReferencedImageSequence = Sequence()
    for j in range(3):  # the localizer images, as scanners reference them
        item = Dataset()
        item.ReferencedSOPClassUID = MRImageStorage
        item.ReferencedSOPInstanceUID = _uid("localizer", j)
        ds.ReferencedImageSequence.append(item)
    ds.PatientName = "Bench^Patient"
    ds.PatientID = "VP000042"
    ds.PatientBirthDate = "19800101"
    ds.PatientSex = "F"
    ds.PatientAge = "046Y"
    ds.PatientSize = "1.68"
    ds.PatientWeight = "61"
    ds.BodyPartExamined = "HEAD"
    ds.ScanningSequence = ["GR", "IR"]
    ds.SequenceVariant = ["SK", "SP", "MP"]
    ds.ScanOptions = "IR"
    ds.MRAcquisitionType = "3D"
    ds.SequenceName = "*tfl3d1_16ns"
    ds.AngioFlag = "N"
    ds.SliceThickness = "1"
    ds.RepetitionTime = "2300"
    ds.EchoTime = "2.98"
    ds.InversionTime = "900"
    ds.NumberOfAverages = "1"
    ds.ImagingFrequency = "123.251815"
    ds.ImagedNucleus = "1H"
    ds.EchoNumbers = "1"
    ds.MagneticFieldStrength = "3"
    ds.SpacingBetweenSlices = "1"
    ds.NumberOfPhaseEncodingSteps = "240"
    ds.EchoTrainLength = "1"
    ds.PercentSampling = "100"
    ds.PercentPhaseFieldOfView = "93.75"
    ds.PixelBandwidth = "240"
    ds.DeviceSerialNumber = "166012"
    ds.SoftwareVersions = "syngo MR XA30"
    ds.ProtocolName = "t1_mprage_sag_p2_iso"
    ds.TransmitCoilName = "Body"
    ds.AcquisitionMatrix = [0, 256, 240, 0]
    ds.InPlanePhaseEncodingDirection = "ROW"
    ds.FlipAngle = "9"
    ds.VariableFlipAngleFlag = "N"
    ds.SAR = "0.0451"
    ds.dBdt = "0"
    ds.PatientPosition = "HFS"
    # Siemens-like private block: a creator and a CSA-header-sized opaque value.
    block = ds.private_block(0x0029, "SIEMENS CSA HEADER", create=True)
    block.add_new(0x08, "CS", "IMAGE NUM 4")
    block.add_new(0x09, "LO", "20260315")
    block.add_new(0x10, "OB", rng.bytes(8192))
    ds.StudyInstanceUID = _uid("study")
    ds.SeriesInstanceUID = _uid("series")
    ds.StudyID = "42"
    ds.SeriesNumber = 5
    ds.AcquisitionNumber = 1
    ds.InstanceNumber = k + 1
    # Sagittal: rows run anterior -> posterior... as (0, 1, 0), columns head -> feet (0, 0, -1);
    # the normal (row x column) is (-1, 0, 0), so slice k lies at x = 87.5 - k.
    ds.ImagePositionPatient = [f"{87.5 - k:g}", "-127.5", "127.5"]
    ds.ImageOrientationPatient = ["0", "1", "0", "0", "0", "-1"]
    ds.FrameOfReferenceUID = _uid("frame")
    ds.PositionReferenceIndicator = ""
    ds.SliceLocation = f"{87.5 - k:g}"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = SHAPE[1], SHAPE[0]
    ds.PixelSpacing = ["1", "1"]
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
    ds.SmallestImagePixelValue = int(pixels.min())
    ds.LargestImagePixelValue = int(pixels.max())
    ds["SmallestImagePixelValue"].VR = ds["LargestImagePixelValue"].VR = "SS"
    ds.WindowCenter, ds.WindowWidth = "420", "910"
    ds.WindowCenterWidthExplanation = "Algo1"
    ds.RescaleIntercept, ds.RescaleSlope, ds.RescaleType = INTERCEPT, SLOPE, "US"
    ds.RequestedProcedureDescription = "MRT Schaedel"
    ds.PerformedProcedureStepStartDate = "20260315"
    ds.PerformedProcedureStepStartTime = "100412.000000"
    ds.PerformedProcedureStepID = "MR20260315100412"
    ds.PerformedProcedureStepDescription = "Head^Brain"
    ds.PixelData = pixels.astype("<i2").tobytes()
    ds["PixelData"].VR = "OW"
    assert n == SHAPE[2]
    return ds


def make_inputs(names=None):
    """Write the three series (or those of `names`) into bench/data/dicom/ unless they are there
    (each is written to a temporary folder and renamed, so a folder that exists is complete)."""
    missing = [name for name, folder in FOLDERS.items()
               if (names is None or name in names) and not os.path.isdir(folder)]
    if not missing:
        return
    import numpy as np
    from pydicom.uid import JPEG2000Lossless, JPEGLSLossless
    import make_data

    print(f"writing the DICOM series ({', '.join(missing)}) into {DICOM} ...", flush=True)
    spec = make_data.SPECS["t1_3d"]
    assert spec["shape"] == SHAPE
    rng = np.random.default_rng([make_data.SEED, list(make_data.SPECS).index("t1_3d")])
    anat, _ = make_data.anatomy(SHAPE, rng)
    anat *= np.float32(spec["gain"])
    vol = np.frombuffer(make_data.rician(anat, spec["sigma"], rng), "<i2").reshape(SHAPE, order="F")
    rng_private = np.random.default_rng(make_data.SEED)
    syntax = {"explicit": None, "jpegls": JPEGLSLossless, "j2k": JPEG2000Lossless}
    tmp = {name: FOLDERS[name] + ".tmp" for name in missing}
    for folder in tmp.values():
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    for k in range(SHAPE[2]):
        # Rows of the image are the second voxel axis, columns the first: slice k as
        # (rows, columns) is vol[:, :, k].T, so the volume voxpipe assembles is vol itself.
        ds = _slice_dataset(k, np.ascontiguousarray(vol[:, :, k].T), rng_private)
        for name in missing:
            out = copy.deepcopy(ds) if syntax[name] else ds  # compress() edits in place
            if syntax[name]:
                out.compress(syntax[name])
            out.save_as(os.path.join(tmp[name], ds.SOPInstanceUID + ".dcm"),
                        enforce_file_format=True)
    for name in missing:
        os.replace(tmp[name], FOLDERS[name])


def series_files(folder):
    return [os.path.join(folder, f) for f in os.listdir(folder)]


# --------------------------------------------------------------------------------------------
# Child: one case.
# --------------------------------------------------------------------------------------------

def pydicom_volume(folder, plugin=None):
    """What users write: read every file, sort along the slice normal, rescale, stack
    (float64 arithmetic, rounded once into the float32 stack, as voxpipe rounds)."""
    import numpy as np
    import pydicom

    dss = [pydicom.dcmread(p) for p in series_files(folder)]
    iop = np.array(dss[0].ImageOrientationPatient, dtype=np.float64)
    normal = np.cross(iop[:3], iop[3:])
    dss.sort(key=lambda ds: float(normal @ np.array(ds.ImagePositionPatient, dtype=np.float64)))
    out = np.empty((len(dss), dss[0].Rows, dss[0].Columns), np.float32)
    for i, ds in enumerate(dss):
        if plugin:
            ds.pixel_array_options(decoding_plugin=plugin)
        out[i] = ds.pixel_array * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
    return out


def pydicom_offsets_stop(folder):
    """dcmread(stop_before_pixels=True) leaves the file at the Pixel Data element's header."""
    import pydicom

    out = {}
    for p in series_files(folder):
        with open(p, "rb") as f:
            ds = pydicom.dcmread(f, stop_before_pixels=True)
            f.read(8)  # tag, VR, 2 reserved bytes (explicit VR, OB/OW) ...
            out[os.path.basename(p)] = f.tell() + 4  # ... then the 4-byte length
        del ds
    return out


def pydicom_offsets_defer(folder):
    import pydicom

    out = {}
    for p in series_files(folder):
        ds = pydicom.dcmread(p, defer_size=1024)
        out[os.path.basename(p)] = ds.get_item(0x7FE00010, keep_deferred=True).value_tell
    return out


def rss_parts():
    """(anonymous, file-backed) resident bytes: RssFile grows when code of a shared library
    runs for the first time (its pages are mapped in from the page cache), RssAnon with what the
    process allocates."""
    return vm("RssAnon"), vm("RssFile")


def prepare_first_call(spec, threads):
    """What the case asks to have done before the first timed call, so that the first call's
    extra cost can be taken apart (section 5): "prefault", an output buffer of the volume's size
    taken from voxpipe's recycled-output pool, written to and released (the call's output then
    reuses it, already faulted in); "warm", the core's worker threads started (two files that are
    not DICOM, scanned in parallel and skipped) and nibabel's first Nifti1Image made (its qform
    runs numpy.linalg, whose code is then mapped in)."""
    import numpy as np
    import voxpipe as vp
    took = {}
    if spec.get("warm"):
        from nibabel import Nifti1Image
        t0 = time.perf_counter()
        vp._core.dicom_scan([os.path.join(HERE, "benchlib.py"), os.path.join(HERE, "README.md")],
                            threads=threads or 0, recursive=False)
        t1 = time.perf_counter()
        Nifti1Image(np.zeros((2, 2, 2), np.float32), np.eye(4))
        took = {"warm_threads": t1 - t0, "warm_nibabel": time.perf_counter() - t1}
    if spec.get("prefault"):
        from voxpipe._foundation import pool as _pool
        buf = _pool.empty(SHAPE, np.float32, "F")
        buf.fill(0)
        del buf
    return took


def child(spec):
    case, folder = spec["case"], spec["folder"]
    threads = spec.get("threads")
    os.environ.update(spec.get("env", {}))
    if case == "voxpipe":
        import numpy as np
        import voxpipe as vp
        took = prepare_first_call(spec, threads)
        call = lambda: vp.load_dicom(folder, dtype=np.float32, threads=threads)  # noqa: E731
    elif case == "voxpipe_read":
        import voxpipe as vp

        def call():
            return {os.path.basename(p): vp.dicom.read(p).pixel_data_offset
                    for p in series_files(folder)}
    elif case == "voxpipe_scan":
        import voxpipe as vp
        call = lambda: vp.dicom.scan(folder, threads=threads)  # noqa: E731
    elif case == "pydicom":
        import numpy as np  # noqa: F401  (imported before the call, as the others are)
        import pydicom  # noqa: F401
        call = lambda: pydicom_volume(folder, spec.get("plugin"))  # noqa: E731
    elif case == "pydicom_stop":
        import pydicom  # noqa: F401
        call = lambda: pydicom_offsets_stop(folder)  # noqa: E731
    elif case == "pydicom_defer":
        import pydicom  # noqa: F401
        call = lambda: pydicom_offsets_defer(folder)  # noqa: E731
    elif case == "dcm2niix":
        out_dir = spec["out"]

        def call():
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            subprocess.run([DCM2NIIX, "-z", "n", "-o", out_dir, "-f", "out", folder],
                           check=True, stdout=subprocess.DEVNULL)
    else:
        raise ValueError(case)

    base = vm("VmRSS")
    anon0, file0 = rss_parts()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    modules = len(sys.modules)
    reset_peak_rss()
    t0 = time.perf_counter()
    result = call()
    first = time.perf_counter() - t0
    modules = len(sys.modules) - modules
    peak = vm("VmHWM") - base
    anon1, file1 = rss_parts()
    info = {"first": first, "peak_mib": peak / MIB, "base_mib": base / MIB,
            "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0,
            "anon_mib": (anon1 - anon0) / MIB, "file_mib": (file1 - file0) / MIB,
            "modules": modules}
    if case == "voxpipe":
        info.update(took)
    if case == "dcm2niix":
        # dcm2niix's own peak RSS (not over a baseline: it is a separate program).
        info["peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    else:
        if isinstance(result, dict):
            info["offsets"] = result
        del result
        base2 = vm("VmRSS")
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        reset_peak_rss()
        t0 = time.perf_counter()
        result = call()
        info["second"] = time.perf_counter() - t0
        info["peak2_mib"] = (vm("VmHWM") - base2) / MIB
        info["faults2"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    return info


# --------------------------------------------------------------------------------------------
# Parent.
# --------------------------------------------------------------------------------------------

def one_child(spec):
    """One fresh child process for `spec`, page cache warm and memory primed just before it."""
    warm(*series_files(spec["folder"]))
    prime_memory(PRIME_MIB)
    return run_child(__file__, spec)


def summarize(runs):
    """Medians over the processes of one case."""
    med = medians(runs, ("first", "second", "peak_mib", "peak2_mib", "base_mib", "faults",
                         "faults2", "anon_mib", "file_mib", "modules", "warm_threads",
                         "warm_nibabel"))
    med["runs"] = [round(r["first"], 4) for r in runs]
    if "second" in runs[0]:  # each process's own first - second, then the median
        med["gaps"] = sorted(r["first"] - r["second"] for r in runs)
        med["gap"] = statistics.median(med["gaps"])
    if "offsets" in runs[0]:
        med["offsets"] = runs[0]["offsets"]
    return med


def measure(spec, repeat):
    return summarize([one_child(spec) for _ in range(repeat)])


def measure_interleaved(specs, repeat):
    """Like measure for each of `specs` (a dict), the cases taking turns, one process each per
    round, so that a change in the machine's load falls on all of them alike."""
    runs = {key: [] for key in specs}
    for _ in range(repeat):
        for key, spec in specs.items():
            runs[key].append(one_child(spec))
    return {key: summarize(r) for key, r in runs.items()}


def pydicom_plugins(name):
    from pydicom.pixels import get_decoder
    from pydicom.uid import ExplicitVRLittleEndian, JPEG2000Lossless, JPEGLSLossless
    uid = {"explicit": ExplicitVRLittleEndian, "jpegls": JPEGLSLossless, "j2k": JPEG2000Lossless}[name]
    return [None] if name == "explicit" else list(get_decoder(uid).available_plugins)


def check(res):
    """Exact agreement, so that a fast wrong answer cannot pass. Returns (check, result) rows."""
    import numpy as np
    import nibabel as nib
    import voxpipe as vp

    rows = []
    for name, folder in FOLDERS.items():
        img = vp.load_dicom(folder, dtype=np.float32)
        data = np.asarray(img.dataobj)
        for plugin in pydicom_plugins(name):
            ref = pydicom_volume(folder, plugin).transpose(2, 1, 0)
            same = data.shape == ref.shape and data.dtype == ref.dtype and np.array_equal(data, ref)
            label = f"{name}: vp.load_dicom == pydicom" + (f" ({plugin})" if plugin else "") + \
                " stack transposed to (columns, rows, slices), float32"
            rows.append((label, "ok: identical" if same else
                         f"**DIFFERENT** (shape {data.shape} vs {ref.shape}, max abs diff "
                         f"{np.abs(data.astype(np.float64) - ref).max() if data.shape == ref.shape else 'n/a'})"))
        if name == "explicit":
            # dcm2niix's .nii (written by the timed runs): same values on the same voxel grid,
            # once its axes are put in voxpipe's order (it flips rows for NIfTI).
            nii = nib.load(os.path.join(DICOM, "dcm2niix_out", "out.nii"))
            t = nib.orientations.ornt_transform(nib.orientations.io_orientation(nii.affine),
                                                nib.orientations.io_orientation(img.affine))
            d2 = nib.orientations.apply_orientation(nii.get_fdata(), t)
            a2 = nii.affine @ nib.orientations.inv_ornt_aff(t, nii.shape)
            same_aff = np.allclose(a2, img.affine, atol=1e-4)
            diff = np.abs(d2 - data).max() if d2.shape == data.shape else None
            rows.append(("explicit: dcm2niix .nii (scl applied) vs vp.load_dicom, axes aligned",
                         f"{'ok' if same_aff and diff is not None and diff < 1e-3 else '**DIFFERENT**'}: "
                         f"affine {'equal' if same_aff else 'differs'} (1e-4 mm), max abs diff "
                         f"{diff if diff is None else f'{diff:.2g}'} (float32 rounding)"))
            series = vp.dicom.scan(folder)
            rows.append(("explicit: vp.dicom.scan finds one series of shape (256, 256, 176)",
                         "ok" if len(series) == 1 and series[0].shape == SHAPE
                         else f"**NO**: {series!r}"))
    ref = res[("locate", "pydicom_defer")]["offsets"]
    for key in (("locate", "voxpipe_read"), ("locate", "pydicom_stop")):
        got = res[key]["offsets"]
        rows.append((f"pixel data offsets: {key[1]} == pydicom value_tell (all {len(ref)} files)",
                     "ok: identical" if got == ref else "**DIFFERENT**"))
    return rows


def tool_versions():
    out = versions(("voxpipe", "pydicom", "numpy", "pylibjpeg", "openjpeg", "libjpeg",
                    "jpeg_ls", "gdcm"))
    try:
        import gdcm
        out["gdcm"] = gdcm.Version.GetVersion()
    except (ImportError, AttributeError):
        pass
    r = subprocess.run([DCM2NIIX, "--version"], capture_output=True, text=True)
    out["dcm2niix"] = (r.stdout + r.stderr).strip().split()[-1]
    return out


def main():
    ap = Parser(__doc__, repeat=5, wait_idle=True)
    args = ap.parse(child)
    make_inputs()
    waited = settle(args)
    cpu0 = cpu_snapshot()
    rep = args.repeat
    cores = os.cpu_count()
    out_dir = os.path.join(DICOM, "dcm2niix_out")
    res = {}
    for name, folder in FOLDERS.items():
        res[(name, "vp")] = measure({"case": "voxpipe", "folder": folder}, rep)
        res[(name, "vp1")] = measure({"case": "voxpipe", "folder": folder, "threads": 1}, rep)
        for plugin in pydicom_plugins(name):
            res[(name, "pydicom", plugin)] = measure(
                {"case": "pydicom", "folder": folder, "plugin": plugin}, rep)
    res[("explicit", "dcm2niix")] = measure({"case": "dcm2niix", "folder": FOLDERS["explicit"],
                                             "out": out_dir}, rep)
    for case in ("voxpipe_read", "voxpipe_scan", "pydicom_stop", "pydicom_defer"):
        res[("locate", case)] = measure({"case": case, "folder": FOLDERS["explicit"]}, rep)
    res[("locate", "voxpipe_scan1")] = measure({"case": "voxpipe_scan", "threads": 1,
                                                "folder": FOLDERS["explicit"]}, rep)
    # 5. The first call's extra cost taken apart: the same call with parts of it done before,
    # the cases interleaved.
    first = measure_interleaved({key: {"case": "voxpipe", "folder": FOLDERS["explicit"], **extra}
                                 for key, extra in FIRST_CALL_CASES.items()}, rep)
    res.update({("first", key): r for key, r in first.items()})
    cpu1 = cpu_snapshot()
    checks = check(res)
    publish(args.output, report(res, checks, rep, cores, waited, (cpu0, cpu1)), BEGIN, END)


def report(res, checks, rep, cores, waited, cpu):
    n = SHAPE[2]
    vol_mib = SHAPE[0] * SHAPE[1] * SHAPE[2] * 4 / MIB
    frame_mib = SHAPE[0] * SHAPE[1] * 2 / MIB
    sizes = {name: sum(os.path.getsize(p) for p in series_files(f)) / MIB
             for name, f in FOLDERS.items()}
    use = other_work(*cpu, cores)
    goals = []

    lines = [BEGIN, "", "## DICOM series: bench/bench_dicom.py", "",
             f"{stamp(cores)}; commit {git_state()}; medians of {rep} fresh processes per row, "
             f"page cache warm and {PRIME_MIB} MiB primed before each. "
             + versions_text(tool_versions()) + ".", "",
             f"Load average {waited[0]:.2f} when the measurements started (after waiting "
             f"{waited[1]:.0f} s for it to fall below 0.5); other work on the machine during the "
             f"run: {other_work_brief(use)}.", "",
             f"Input: an MR series of {n} sagittal slices, 256x256 int16, one file per slice "
             "(about 80 typical MR elements, a sequence, an 8 KiB private value; rescale slope "
             f"{SLOPE}, intercept {INTERCEPT}; file names not in spatial order), as Explicit VR "
             f"Little Endian ({sizes['explicit']:.1f} MiB), JPEG-LS Lossless "
             f"({sizes['jpegls']:.1f} MiB) and JPEG 2000 Lossless ({sizes['j2k']:.1f} MiB). Output "
             f"volume {vol_mib:.0f} MiB float32. *first*: first call in a fresh process; "
             "*second*: the same call again in that process. Peak RSS: growth over the child's "
             "RSS after its imports (dcm2niix: its own peak RSS).", ""]

    # 1 and 3: folder -> float32 volume.
    for name in FOLDERS:
        title = "### 1. Folder -> float32 volume" if name == "explicit" else \
            f"### 3. Compressed series: {SYNTAX_NAMES[name]}"
        lines += [title + f" ({SYNTAX_NAMES[name]}, {n} files)", "",
                  "| tool | first | second | peak RSS | pydicom / tool (first) |"
                  + (" dcm2niix / tool |" if name == "explicit" else ""),
                  "|---|---|---|---|---|" + ("---|" if name == "explicit" else "")]
        plugins = pydicom_plugins(name)
        pyd = {p: res[(name, "pydicom", p)] for p in plugins}
        best = min(plugins, key=lambda p: pyd[p]["first"])
        ref = pyd[best]["first"]
        d2n = res.get((name, "dcm2niix"))
        rows = [(f"vp.load_dicom, all threads ({cores})", res[(name, "vp")]),
                ("vp.load_dicom, threads=1", res[(name, "vp1")])]
        rows += [("pydicom loop" + (f", plugin {p}" if p else "") + (" (fastest)" if len(plugins) > 1 and p == best else ""), pyd[p])
                 for p in plugins]
        if d2n:
            rows.append(("dcm2niix -z n (folder -> .nii, process included)", d2n))
        for label, r in rows:
            second = ms(r["second"]) if "second" in r else "-"
            line = (f"| {label} | {ms(r['first'])} | {second} | {r['peak_mib']:.0f} MiB | "
                    f"**{ref / r['first']:.2f}x** |")
            if name == "explicit":
                line += f" {d2n['first'] / r['first']:.2f}x |"
            lines.append(line)
        lines.append("")
        vp_t, vp1_t = res[(name, "vp")]["first"], res[(name, "vp1")]["first"]
        if name == "explicit":
            goals.append(("1. folder -> float32 >= 5x pydicom", f"{ref / vp_t:.2f}x "
                          f"(threads=1: {ref / vp1_t:.2f}x)", ref / vp_t >= 5))
            goals.append(("1. folder -> float32 faster than dcm2niix",
                          f"{d2n['first'] / vp_t:.2f}x (threads=1: {d2n['first'] / vp1_t:.2f}x)",
                          d2n["first"] > vp_t))
        else:
            goals.append((f"3. {SYNTAX_NAMES[name]} faster than pydicom's fastest plugin ({best})",
                          f"{ref / vp_t:.2f}x (threads=1: {ref / vp1_t:.2f}x)", ref > vp_t))

    # 2. Locating the pixels.
    loc = {k[1]: v for k, v in res.items() if k[0] == "locate"}
    best_py = min(("pydicom_stop", "pydicom_defer"), key=lambda k: loc[k]["first"])
    ref = loc[best_py]["first"]
    labels = {"voxpipe_read": "vp.dicom.read(p).pixel_data_offset, loop",
              "voxpipe_scan": f"vp.dicom.scan(folder), all threads ({cores}): parse + assemble",
              "voxpipe_scan1": "vp.dicom.scan(folder, threads=1)",
              "pydicom_stop": "pydicom dcmread(f, stop_before_pixels=True) + f.tell(), loop",
              "pydicom_defer": "pydicom dcmread(p, defer_size=1024) + value_tell, loop"}
    lines += [f"### 2. Pixel location: metadata and pixel data offset of all {n} files "
              "(Explicit VR Little Endian)", "",
              "| tool | first | second | per file (first) | pydicom fastest / tool (first) |",
              "|---|---|---|---|---|"]
    for key, label in labels.items():
        r = loc[key]
        lines.append(f"| {label} | {ms(r['first'])} | {ms(r['second'])} | "
                     f"{r['first'] / n * 1e6:.0f} us | **{ref / r['first']:.2f}x** |")
    lines.append("")
    goals.append(("2. pixel location >= 10x pydicom (its fastest way), vp.dicom.read loop",
                  f"{ref / loc['voxpipe_read']['first']:.2f}x",
                  ref / loc["voxpipe_read"]["first"] >= 10))
    goals.append(("2. pixel location >= 10x pydicom (its fastest way), vp.dicom.scan",
                  f"{ref / loc['voxpipe_scan']['first']:.2f}x",
                  ref / loc["voxpipe_scan"]["first"] >= 10))

    # 4. Memory.
    lines += ["### 4. Peak RSS of vp.load_dicom (first call, fresh process)", "",
              f"Volume {vol_mib:.1f} MiB float32; one stored frame {frame_mib * 1024:.0f} KiB. "
              "Overhead = peak RSS growth over the baseline (interpreter + numpy + voxpipe "
              "imported) - volume. The second call (same process, first result freed) shows what "
              "the first call's one-time work adds (section 5 takes it apart): its output reuses "
              "the first call's buffer from the recycled-output pool, already resident, so its "
              "overhead is its whole growth (when its growth holds a new volume, as with the pool "
              "off, the volume is subtracted).", "",
              "| series | threads | baseline | peak - baseline | overhead | overhead in frames per "
              "thread | second call: peak - baseline | second call: overhead | first call: of the "
              "growth, file-backed (code run for the first time) |",
              "|---|---|---|---|---|---|---|---|---|"]
    allowance = 4  # "a few frames per thread"
    for name in FOLDERS:
        for key, t in (("vp", cores), ("vp1", 1)):
            r = res[(name, key)]
            over = r["peak_mib"] - vol_mib
            # A second call whose output came from the pool grows by its overhead alone.
            over2 = r["peak2_mib"] - (vol_mib if r["peak2_mib"] > vol_mib / 2 else 0)
            lines.append(f"| {name} | {t} | {r['base_mib']:.0f} MiB | {r['peak_mib']:.1f} MiB | "
                         f"{over:.1f} MiB | {over / frame_mib / t:.1f} | {r['peak2_mib']:.1f} MiB | "
                         f"{over2:.1f} MiB | {r['file_mib']:.1f} MiB |")
            if key == "vp":
                goals.append((f"4. {name}: peak RSS <= volume + {allowance} frames per thread "
                              f"({vol_mib:.0f} + {allowance * cores * frame_mib:.1f} MiB)",
                              f"{r['peak_mib']:.1f} MiB ({r['file_mib']:.1f} MiB of it "
                              "file-backed: code run for the first time, section 5)",
                              over <= allowance * cores * frame_mib))
    lines += [""] + first_call_section(res, cores, vol_mib)
    lines += ["", "### Goals", "", "| goal | measured | status |", "|---|---|---|"]
    lines += [f"| {g} | {m} | {'**met**' if ok else '**not met**'} |" for g, m, ok in goals]
    lines += ["", "### Agreement", "", "| check | result |", "|---|---|"]
    lines += [f"| {c} | {r} |" for c, r in checks]
    lines += ["", END, ""]
    return "\n".join(lines)


def first_call_section(res, cores, vol_mib):
    """Section 5: the first call's extra time and memory, taken apart by the FIRST_CALL_CASES
    rows (each the median of its fresh processes)."""
    rows = [("nothing", cores, res[("first", "plain")]),
            ("output pre-faulted", cores, res[("first", "prefault")]),
            ("output pre-faulted; worker threads and nibabel warm", cores,
             res[("first", "prefault_warm")]),
            ("nothing; recycled-output pool off (VOXPIPE_POOL_BYTES=0)", cores,
             res[("first", "pool_off")]),
            ("nothing", 1, res[("first", "plain1")]),
            ("output pre-faulted; worker threads and nibabel warm", 1,
             res[("first", "prefault_warm1")])]
    lines = ["### 5. First call vs second call: where the first call's extra time and memory go "
             "(Explicit VR Little Endian)", "",
             "vp.load_dicom as in 1 (the rows measured again here, interleaved: one process of "
             "each row per round), with part of the first call's one-time work done before the "
             "first call (and before the baseline): *output pre-faulted*: a buffer of the "
             "volume's size taken from voxpipe's recycled-output pool, written and released, so "
             "that the call's output reuses it (what every later call gets); *worker threads and "
             "nibabel warm*: the core's worker threads started (two non-DICOM files scanned in "
             "parallel) and one small Nifti1Image made (nibabel computes its qform with "
             "numpy.linalg, whose code is then mapped in). *first - second*: the median of each "
             "process's own difference. Minor faults: page faults during the call (one per 2 MiB "
             "transparent huge page of the output). RSS growth: from the baseline to the end of "
             "the first call (volume still referenced), anonymous (allocated) and file-backed "
             "(pages of shared libraries run for the first time).", "",
             "| done before the first call | threads | first | second | first - second | minor "
             "faults, first / second call | RSS growth, first call: anonymous | file-backed |",
             "|---|---|---|---|---|---|---|---|"]
    for label, t, r in rows:
        lines.append(f"| {label} | {t} | {ms(r['first'])} | {ms(r['second'])} | {ms(r['gap'])} | "
                     f"{r['faults']:.0f} / {r['faults2']:.0f} | {r['anon_mib']:.2f} MiB | "
                     f"{r['file_mib']:.2f} MiB |")
    plain, pre, warm_, off = (rows[i][2] for i in range(4))
    warm1 = rows[5][2]
    imported = max(r["modules"] for _, _, r in rows)
    # The parts, each from the per-process first - second differences (less noisy than
    # first calls of different processes): they add up to the first row's.
    touch, once, left = plain["gap"] - pre["gap"], pre["gap"] - warm_["gap"], warm_["gap"]
    spread = f"{ms(plain['gaps'][0])} to {ms(plain['gaps'][-1])}"
    lines += ["",
              f"The first call's {ms(plain['gap'])} over the second ({cores} threads; {spread} "
              "in its processes: parts smaller than that spread are noise, and other work on the "
              "machine widens it), in parts (differences of the rows' *first - second*):", "",
              f"- **First touch of the {vol_mib:.0f} MiB output: {ms(touch)}** (row *nothing* "
              f"minus row *output pre-faulted*; the first call's anonymous growth is "
              f"{plain['anon_mib']:.1f} MiB with a new output, {pre['anon_mib']:.1f} MiB with it "
              f"pre-faulted). Inherent to a new output: the kernel zeroes each page on its first "
              f"write. Later calls reuse the released buffer from the pool; with the pool off "
              f"every call pays it, and the first call is only {ms(off['gap'])} slower than the "
              "second (row *recycled-output pool off*).",
              f"- **Worker threads and nibabel's first qform: {ms(once)}** (row *output "
              f"pre-faulted* minus the row below it). Once per process: starting the core's "
              f"thread pool (its workers live for the process; done alone beforehand it took "
              f"{ms(warm_['warm_threads'])}) and "
              f"numpy.linalg's first run, which nibabel's Nifti1Image uses for the qform of every "
              f"image ({ms(warm_['warm_nibabel'])} for the first Nifti1Image alone).",
              f"- **Left: {ms(left)}** ({ms(warm1['gap'])} on one thread): voxpipe's DICOM code "
              f"running for the first time ({warm_['file_mib']:.2f} MiB of its and libstdc++'s "
              f"pages mapped in) and the worker thread's malloc arena growing to hold its share of "
              f"the parsed metadata ({warm_['anon_mib']:.2f} MiB anonymous on {cores} threads, "
              f"{warm1['anon_mib']:.2f} MiB on one, where the main heap has room left by the "
              "imports).",
              f"- **Memory**: of the first call's {plain['peak_mib'] - vol_mib:.1f} MiB of peak "
              f"RSS over the volume (section 4), {plain['file_mib']:.1f} MiB are file-backed: "
              f"shared library code run for the first time (numpy's BLAS/LAPACK through nibabel's qform, "
              f"voxpipe's DICOM code), counted in RSS but not allocated, and shared with every "
              f"process that maps the same files; the anonymous growth is the volume plus "
              f"{plain['anon_mib'] - vol_mib:.2f} MiB (the worker's arena and its frame buffer). "
              f"Modules imported during the first call: {imported:.0f} (the DICOM dictionary is a "
              "compile-time table: nothing is built on first use).",
              ]
    return lines


if __name__ == "__main__":
    main()
