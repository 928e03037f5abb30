"""`voxpipe dcm2niix` against dcm2niix on every real DICOM series found offline: the library under
tests/python/test_dcm2niix_parity.py and bench/dicom_parity.py (which writes the table of
docs/dicom.md).

A case is a folder of DICOM files as a user would hand it to dcm2niix, taken from installed
packages: nibabel's nicom test data, pydicom's test files, pydicom-data and heudiconv's test data
(the last two when installed). Both converters run on it with the same options into separate
folders; then every output of dcm2niix is matched by name with ours and compared:
  - names: the same set of files (.nii/.nii.gz, .json, .bval, .bvec);
  - data: equal values on the same grid (both read with nibabel; when the voxel axes differ they
    are matched in world space first);
  - affine: the largest difference of the world coordinates of the grid's corners (mm);
  - bval: equal to 1e-4; bvec: each volume's direction taken back to the world frame through its
    file's affine (FSL convention: x negated when the affine's determinant is positive) equal to
    1e-4;
  - sidecar: every key dcm2niix writes present in ours with an equal value (numbers to 1e-5
    relative, strings exactly), but for the keys in KEY_EXCEPTIONS (each with its reason) and
    values dcm2niix cuts at its buffer sizes or leaves padded (dcm2niix_limitation; counted
    apart).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

import nibabel as nib
import numpy as np

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get('VOXPIPE_CLI') or REPO / '.venv' / 'bin' / 'voxpipe')
DCM2NIIX = shutil.which('dcm2niix') or shutil.which('dcm2niix', path=str(Path(sys.executable).parent))

# The options heudiconv passes (through nipype's Dcm2niix), with an uncompressed output so that
# the comparison reads fast; -f is the template of dcm2bids and of most scripts.
OPTIONS = ('-b', 'y', '-z', 'n', '-x', 'n', '-t', 'n', '-m', '0', '-w', '2', '-f', '%p_%s',
           '-s', 'n', '-v', 'n')

# Keys whose values differ by design, with the reason.
KEY_EXCEPTIONS = {
    'ConversionSoftware': 'names the converter',
    'ConversionSoftwareVersion': 'the converter\'s version',
}

REL = 1e-5
VEC_TOL = 1e-4


@dataclasses.dataclass
class Case:
    name: str
    source: str  # the package the files come from
    files: list[Path]


def _nicom_dir() -> Path:
    return Path(nib.__file__).parent / 'nicom' / 'tests' / 'data'


def offline_cases() -> list[Case]:
    """Every offline case: one per DICOM file of the test-data folders (files of one series that
    belong together are one case)."""
    cases: list[Case] = []
    nicom = _nicom_dir()
    together = {('0.dcm', '1.dcm'): 'nibabel DTI mosaic pair',
                ('siemens_dwi_0.dcm.gz', 'siemens_dwi_1000.dcm.gz'): 'nibabel DWI b0/b1000'}
    used: set[str] = set()
    for names, label in together.items():
        files = [nicom / n for n in names if (nicom / n).is_file()]
        if files:
            cases.append(Case(label, 'nibabel', files))
            used.update(names)
    for f in sorted(nicom.iterdir()):
        if f.name not in used and (f.name.endswith('.dcm') or f.name.endswith('.dcm.gz')):
            cases.append(Case(f'nibabel {f.name}', 'nibabel', [f]))
    try:
        import pydicom.data
        files_dir = Path(pydicom.data.__file__).parent / 'test_files'
        for f in sorted(files_dir.glob('*.dcm')):
            cases.append(Case(f'pydicom {f.name}', 'pydicom', [f]))
    except ImportError:
        pass
    try:
        import data_store  # pydicom-data
        for f in sorted((Path(data_store.__file__).parent / 'data').glob('*.dcm')):
            cases.append(Case(f'pydicom-data {f.name}', 'pydicom-data', [f]))
    except ImportError:
        pass
    try:
        import heudiconv
        data = Path(heudiconv.__file__).parent / 'tests' / 'data'
        for d in sorted(p for p in data.iterdir() if p.is_dir()):
            files = sorted(f for f in d.rglob('*.dcm'))
            if files:
                cases.append(Case(f'heudiconv {d.name}', 'heudiconv', files))
        for f in sorted(data.glob('*.dcm')):
            cases.append(Case(f'heudiconv {f.name}', 'heudiconv', [f]))
    except ImportError:
        pass
    return cases


def materialize(case: Case, folder: Path) -> Path:
    """The case's files in a folder of their own (.dcm.gz files decompressed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in case.files:
        if f.name.endswith('.gz'):
            (folder / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
        else:
            shutil.copyfile(f, folder / f.name)
    return folder


def run_dcm2niix(src: Path, out: Path, options: Iterable[str] = OPTIONS) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    assert DCM2NIIX is not None
    return subprocess.run([DCM2NIIX, *options, '-o', str(out), str(src)], capture_output=True,
                          text=True, timeout=300)


def run_voxpipe(src: Path, out: Path, options: Iterable[str] = OPTIONS) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.run([str(CLI), 'dcm2niix', *options, '-o', str(out), str(src)],
                          capture_output=True, text=True, timeout=300)


@dataclasses.dataclass
class FileResult:
    stem: str
    data_equal: bool | None = None      # None: not compared (no image on one side)
    data_detail: str = ''
    affine_mm: float | None = None      # largest corner difference
    bval_equal: bool | None = None
    bvec_world_err: float | None = None
    keys_theirs: int = 0
    keys_equal: int = 0
    missing: list[str] = dataclasses.field(default_factory=list)
    different: dict[str, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    # Keys whose values differ by one of dcm2niix's documented limits, with the limit.
    documented: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class CaseResult:
    case: str
    rc_theirs: int
    rc_ours: int
    names_theirs: list[str]
    names_ours: list[str]
    files: list[FileResult]

    @property
    def names_equal(self) -> bool:
        return self.names_theirs == self.names_ours


def _image_files(folder: Path) -> dict[str, Path]:
    out = {}
    for p in sorted(folder.iterdir()):
        for suffix in ('.nii.gz', '.nii'):
            if p.name.endswith(suffix):
                out[p.name[: -len(suffix)]] = p
    return out


def values_equal(a: Any, b: Any, rel: float = REL) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_equal(x, y, rel) for x, y in zip(a, b))
    return bool(a == b)


def dcm2niix_limitation(theirs: Any, ours: Any) -> str | None:
    """Why dcm2niix's value differs from voxpipe's when the difference is one of dcm2niix's
    documented limits (docs/dicom.md, "JSON sidecar"), else None."""
    if isinstance(theirs, str) and isinstance(ours, str):
        if len(theirs) in (64, 65, 255) and len(ours) > len(theirs) and ours.startswith(theirs):
            return 'dcm2niix cuts long strings at its buffer size'
        if theirs != ours and theirs.rstrip(' ') == ours.rstrip(' '):
            return 'dcm2niix keeps padding spaces'
    if (isinstance(theirs, list) and isinstance(ours, list) and len(theirs) == len(ours)
            and all(isinstance(a, str) and isinstance(b, str) for a, b in zip(theirs, ours))
            and theirs != ours and [a.rstrip(' ') for a in theirs] == [b.rstrip(' ') for b in ours]):
        return 'dcm2niix keeps padding spaces'
    return None


def compare_sidecars(theirs: dict, ours: dict, result: FileResult) -> None:
    for key, value in theirs.items():
        if key in KEY_EXCEPTIONS:
            continue
        result.keys_theirs += 1
        if key not in ours:
            result.missing.append(key)
        elif values_equal(value, ours[key]):
            result.keys_equal += 1
        elif (why := dcm2niix_limitation(value, ours[key])) is not None:
            result.documented[key] = why
        else:
            result.different[key] = (value, ours[key])


def _corners(affine: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    idx = np.array([[i, j, k, 1.0] for i in (0, shape[0] - 1) for j in (0, shape[1] - 1)
                    for k in (0, (shape[2] - 1) if len(shape) > 2 else 0)])
    return (affine @ idx.T).T[:, :3]


def _aligned(img: nib.Nifti1Image, target: nib.Nifti1Image) -> tuple[np.ndarray, np.ndarray]:
    """img's data and affine on target's voxel axes (each target axis matched to the axis whose
    column is parallel to it, flipped where it points the other way)."""
    data = np.asanyarray(img.dataobj)
    affine = img.affine.copy()
    if data.ndim < 3 or np.asanyarray(target.dataobj).ndim < 3:
        return data, affine
    order = []
    for a in range(3):
        t = target.affine[:3, a] / np.linalg.norm(target.affine[:3, a])
        cos = [float(t @ affine[:3, b] / np.linalg.norm(affine[:3, b])) for b in range(3)]
        b = int(np.argmax(np.abs(cos)))
        if cos[b] < 0:
            affine[:3, 3] += (data.shape[b] - 1) * affine[:3, b]
            affine[:3, b] *= -1
            data = np.flip(data, axis=b)
        order.append(b)
    if sorted(order) != [0, 1, 2]:
        return np.asanyarray(img.dataobj), img.affine
    order += list(range(3, data.ndim))
    new = affine.copy()
    for a, b in enumerate(order[:3]):
        new[:3, a] = affine[:3, b]
    return data.transpose(order), new


def _world_bvecs(bvec: np.ndarray, affine: np.ndarray) -> np.ndarray:
    """FSL .bvec (3 x N, voxel frame) to unit world directions (N x 3)."""
    r = affine[:3, :3] / np.linalg.norm(affine[:3, :3], axis=0)
    v = bvec.copy().reshape(3, -1)
    if np.linalg.det(affine[:3, :3]) > 0:
        v[0] *= -1
    return (r @ v).T


def compare_file(stem: str, theirs: Path, ours: Path) -> FileResult:
    result = FileResult(stem)
    t_img, o_img = _image_files(theirs).get(stem), _image_files(ours).get(stem)
    if t_img is not None and o_img is not None:
        a, b = nib.load(t_img), nib.load(o_img)
        od, oa = _aligned(b, a)
        td = np.asanyarray(a.dataobj)
        if td.shape != od.shape:
            result.data_equal = False
            result.data_detail = f'shape {td.shape} vs {od.shape}'
        else:
            if td.dtype.names or od.dtype.names:
                equal = td.tobytes() == od.tobytes()
            else:
                # Both as nibabel reads them (scaled when the header says so).
                equal = np.array_equal(td.astype(np.float64), od.astype(np.float64),
                                       equal_nan=True)
            result.data_equal = bool(equal)
            if not equal:
                result.data_detail = 'values differ'
            result.affine_mm = float(np.abs(_corners(a.affine, td.shape)
                                            - _corners(oa, od.shape)).max())
        tj, oj = theirs / f'{stem}.bval', ours / f'{stem}.bval'
        if tj.exists():
            result.bval_equal = oj.exists() and np.allclose(
                np.loadtxt(tj, ndmin=1), np.loadtxt(oj, ndmin=1), atol=1e-4, rtol=0)
        tv, ov = theirs / f'{stem}.bvec', ours / f'{stem}.bvec'
        if tv.exists():
            if ov.exists():
                wt = _world_bvecs(np.loadtxt(tv, ndmin=2), a.affine)
                wo = _world_bvecs(np.loadtxt(ov, ndmin=2), b.affine)
                result.bvec_world_err = float(np.abs(wt - wo).max()) if wt.shape == wo.shape else math.inf
            else:
                result.bvec_world_err = math.inf
    tj, oj = theirs / f'{stem}.json', ours / f'{stem}.json'
    if tj.exists():
        compare_sidecars(json.loads(tj.read_text()), json.loads(oj.read_text()) if oj.exists() else {},
                         result)
    return result


SUFFIXES = ('.nii.gz', '.nii', '.json', '.bval', '.bvec', '.txt', '.nrrd', '.mha', '.mhd')


def _stem(name: str) -> str:
    """The file name without the converter's suffix (protocol names may hold dots: "1.5")."""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def compare_case(case: Case, work: Path, options: Iterable[str] = OPTIONS) -> CaseResult:
    src = materialize(case, work / 'in')
    rt = run_dcm2niix(src, work / 'theirs', options)
    ro = run_voxpipe(src, work / 'ours', options)
    names_t = sorted(p.name for p in (work / 'theirs').iterdir())
    names_o = sorted(p.name for p in (work / 'ours').iterdir())
    stems = sorted({_stem(p.name) for p in (work / 'theirs').iterdir()})
    files = [compare_file(s, work / 'theirs', work / 'ours') for s in stems]
    return CaseResult(case.name, rt.returncode, ro.returncode, names_t, names_o, files)


def difference_kinds(r: CaseResult) -> set[str]:
    """How a case's outputs differ from dcm2niix's: 'exit' (exit code), 'names' (the files
    written; their contents are then not compared), 'data', 'affine', 'bval', 'bvec', and
    'key:NAME' for each sidecar key missing or different (dcm2niix_limitation's aside)."""
    kinds = set()
    if r.rc_ours != r.rc_theirs:
        kinds.add('exit')
    if not r.names_equal:
        kinds.add('names')
        return kinds
    for f in r.files:
        if f.data_equal is False:
            kinds.add('data')
        if f.affine_mm is not None and f.affine_mm >= 1e-3:
            kinds.add('affine')
        if f.bval_equal is False:
            kinds.add('bval')
        if f.bvec_world_err is not None and not f.bvec_world_err < VEC_TOL:
            kinds.add('bvec')
        kinds.update(f'key:{k}' for k in (*f.missing, *f.different))
    return kinds


def markdown_table(results: list[CaseResult]) -> str:
    """One row per dcm2niix output file (a case with no output: one row saying so)."""
    lines = ['| case | output | names | data | affine (mm) | bval/bvec | sidecar keys equal | missing or different |',
             '|---|---|---|---|---|---|---|---|']
    for r in results:
        if not r.files:
            lines.append(f'| {r.case} | (none: dcm2niix rc {r.rc_theirs}, ours rc {r.rc_ours}) | '
                         f'{"same" if r.names_equal else "differ"} | | | | | |')
            continue
        for f in r.files:
            data = '' if f.data_equal is None else ('equal' if f.data_equal else f.data_detail)
            aff = '' if f.affine_mm is None else f'{f.affine_mm:.1e}'
            dwi = ''
            if f.bval_equal is not None or f.bvec_world_err is not None:
                dwi = ('bval ' + ('equal' if f.bval_equal else 'differ') + ', bvec '
                       + (f'{f.bvec_world_err:.1e}' if f.bvec_world_err is not None else '-'))
            off = sorted(f.missing) + sorted(f.different)
            more = ', '.join(off[:8]) + (f' (+{len(off) - 8})' if len(off) > 8 else '')
            keys = f'{f.keys_equal}/{f.keys_theirs}'
            if f.documented:
                keys += f' (+{len(f.documented)} cut or padded by dcm2niix)'
            lines.append(f'| {r.case} | {f.stem} | {"same" if r.names_equal else "differ"} | {data} '
                         f'| {aff} | {dwi} | {keys} | {more} |')
    return '\n'.join(lines) + '\n'
