"""Helpers for the voxpipe-vs-nibabel differential tests.

* File generation: nibabel serialises an image in memory (``to_bytes`` / a BytesIO file map), the
  bytes are split into header / extension block / data (``Parts``), header fields can then be
  patched through a structured numpy view of the raw header (``Parts.hdr_fields``), and
  ``write_parts`` lays the pieces out on disk (single file or pair, optional gzip, any data offset,
  truncation, trailing bytes).
* Comparison: ``compare_images`` checks every observable the voxpipe API shares with nibabel and
  returns a list of human-readable problems (empty list = identical).  ``compare_load`` loads a path
  with both libraries and requires both to raise or both to give identical images.

Only numpy, nibabel and the standard library are used.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import math
import os
import warnings
from typing import Any, Callable, Iterable, Sequence

import nibabel as nib
import numpy as np

HDR_CLASS = {1: nib.Nifti1Header, 2: nib.Nifti2Header}
SINGLE_CLASS = {1: nib.Nifti1Image, 2: nib.Nifti2Image}
PAIR_CLASS = {1: nib.Nifti1Pair, 2: nib.Nifti2Pair}
HDR_SIZE = {1: 348, 2: 540}
SINGLE_OFFSET = {1: 352, 2: 544}

RGB24 = np.dtype([('R', 'u1'), ('G', 'u1'), ('B', 'u1')])
RGBA32 = np.dtype([('R', 'u1'), ('G', 'u1'), ('B', 'u1'), ('A', 'u1')])

# Every dtype nibabel writes on x86-64 (float128/complex256 are unsupported there).
DTYPES: dict[str, np.dtype] = {
    'uint8': np.dtype(np.uint8),
    'int8': np.dtype(np.int8),
    'int16': np.dtype(np.int16),
    'uint16': np.dtype(np.uint16),
    'int32': np.dtype(np.int32),
    'uint32': np.dtype(np.uint32),
    'int64': np.dtype(np.int64),
    'uint64': np.dtype(np.uint64),
    'float32': np.dtype(np.float32),
    'float64': np.dtype(np.float64),
    'complex64': np.dtype(np.complex64),
    'complex128': np.dtype(np.complex128),
    'rgb24': RGB24,
    'rgba32': RGBA32,
}

KINDS = ('nii', 'nii.gz', 'pair', 'pair.gz')

SHAPES = {
    1: (11,),
    2: (5, 6),
    3: (5, 6, 7),
    4: (5, 6, 7, 3),
    5: (4, 5, 3, 2, 2),
    6: (3, 5, 2, 2, 1, 2),
    7: (3, 5, 2, 1, 2, 1, 2),
}

# An oblique, sheared sform and a rigid qform with zooms and a left-handed (qfac -1) frame.
SFORM = np.array(
    [
        [0.9, 0.1, -0.2, -40.5],
        [-0.05, 1.1, 0.3, 20.25],
        [0.15, -0.25, 2.2, -10.0],
        [0.0, 0.0, 0.0, 1.0],
    ]
)


def rot_matrix(ax: float, ay: float, az: float) -> np.ndarray:
    cx, sx, cy, sy, cz, sz = (math.cos(ax), math.sin(ax), math.cos(ay), math.sin(ay),
                              math.cos(az), math.sin(az))
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return rz @ ry @ rx


def qform_affine(angles=(0.3, -0.2, 0.7), zooms=(1.5, 2.0, 2.5), qfac=-1.0,
                 offset=(12.5, -7.25, 30.0)) -> np.ndarray:
    a = np.eye(4)
    a[:3, :3] = rot_matrix(*angles) @ np.diag([zooms[0], zooms[1], zooms[2] * qfac])
    a[:3, 3] = offset
    return a


QFORM = qform_affine()


# ----------------------------------------------------------------------------------------------
# Data generation
# ----------------------------------------------------------------------------------------------

def _spread(n: int, k: int) -> np.ndarray:
    """k distinct positions spread over range(n) (first ones first, so small arrays get them)."""
    pos = [0, n - 1] + [(i * 7919 + 13) % n for i in range(k)]
    out = []
    for p in pos:
        if p not in out:
            out.append(p)
    return np.array(out[:k], dtype=np.intp)


def make_data(dtype: np.dtype | str, shape: Sequence[int], seed: int = 0) -> np.ndarray:
    """Deterministic data of `dtype` with the type's edge values sprinkled in."""
    dt = DTYPES[dtype] if isinstance(dtype, str) else np.dtype(dtype)
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if len(shape) else 1
    if dt.names:
        raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
        raw[: dt.itemsize] = 0
        raw[dt.itemsize: 2 * dt.itemsize] = 255
        return raw.view(dt).reshape(shape)
    if dt.kind in 'iu':
        info = np.iinfo(dt)
        arr = rng.integers(int(info.min), int(info.max), size=n, dtype=dt, endpoint=True)
        specials = [info.min, info.max, 0, 1, info.max - 1]
        if dt.kind == 'i':
            specials += [-1, info.min + 1]
        if dt.itemsize == 8:
            specials += [2**53 + 1, 2**53 - 1, 2**24 + 1, 2**62 + 2**39 + 1]
            if dt.kind == 'u':
                specials += [2**63 + 2**40 + 1, 2**64 - 2**39 - 1]
            else:
                specials += [-(2**53) - 1, -(2**62) - 2**39 - 1]
        if dt.itemsize == 4:
            specials += [2**24 + 1, 2**31 - 65]
        pos = _spread(n, len(specials))
        arr[pos] = np.array(specials[: len(pos)], dtype=object).astype(dt)
        return arr.reshape(shape)
    if dt.kind == 'f':
        fi = np.finfo(dt)
        arr = (rng.standard_normal(n) * 100).astype(dt)
        specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, fi.max, fi.min, fi.tiny,
                    fi.smallest_subnormal, -fi.smallest_subnormal, 1.0, -1.0, 1 / 3]
        pos = _spread(n, len(specials))
        arr[pos] = np.array(specials[: len(pos)], dtype=dt)
        return arr.reshape(shape)
    if dt.kind == 'c':
        ft = np.dtype(f'f{dt.itemsize // 2}')
        re = make_data(ft, (n,), seed).ravel()
        im = make_data(ft, (n,), seed + 1).ravel()[::-1].copy()
        arr = re.astype(dt)
        arr.imag = im
        return arr.reshape(shape)
    raise TypeError(dt)


# ----------------------------------------------------------------------------------------------
# Raw file construction
# ----------------------------------------------------------------------------------------------

def header_view(buf: bytearray, version: int, endian: str) -> np.ndarray:
    """0-d structured array aliasing the raw header bytes in `buf` (writes go through)."""
    dt = HDR_CLASS[version].template_dtype.newbyteorder(endian)
    return np.ndarray((), dtype=dt, buffer=memoryview(buf)[: dt.itemsize])


@dataclasses.dataclass
class Parts:
    """A NIfTI file split in pieces.

    single: ``hdr`` + ``ext`` (4-byte flag + extensions, or whatever bytes follow the header)
            + zero padding up to ``data_pos`` + ``data``.
    pair:   .hdr = ``hdr`` + ``ext``; .img = ``data_pos`` zero bytes + ``data``.
    """

    version: int
    endian: str
    single: bool
    hdr: bytearray
    ext: bytes
    data: bytes
    data_pos: int | None = None  # None: right after ext (single) / vox_offset (pair)

    @property
    def fields(self) -> np.ndarray:
        return header_view(self.hdr, self.version, self.endian)

    def patch(self, **kw: Any) -> 'Parts':
        f = self.fields
        for k, v in kw.items():
            f[k] = v
        return self

    def copy(self) -> 'Parts':
        return dataclasses.replace(self, hdr=bytearray(self.hdr))


def nib_image(data, version=1, endian='<', single=True, dtype=None, affine=None,
              qform=None, sform=None, extensions=()):
    """Build (not save) a nibabel image with header byte order `endian`."""
    cls = SINGLE_CLASS[version] if single else PAIR_CLASS[version]
    hdr = cls.header_class(endianness=endian)  # a Nifti1Header would lose the order in a pair
    if dtype is None:
        dtype = data.dtype
    aff = SFORM if affine is None else affine
    img = cls(data, aff, header=hdr, dtype=dtype)
    if qform is not None:
        img.set_qform(qform[0], int(qform[1]))
    if sform is not None:
        img.set_sform(sform[0], int(sform[1]))
    for code, content in extensions:
        img.header.extensions.append(nib.nifti1.Nifti1Extension(code, content))
    return img


def parts_from_image(img) -> Parts:
    """Serialise a nibabel image in memory and split it into Parts."""
    version = 2 if isinstance(img.header, nib.Nifti2Header) else 1
    endian = img.header.endianness
    hs = HDR_SIZE[version]
    if img.header.is_single:
        b = img.to_bytes()
        vox = int(header_view(bytearray(b[:hs]), version, endian)['vox_offset'])
        return Parts(version, endian, True, bytearray(b[:hs]), b[hs:vox], b[vox:])
    fm = type(img).make_file_map({'image': io.BytesIO(), 'header': io.BytesIO()})
    img.to_file_map(fm)
    hb = fm['header'].fileobj.getvalue()
    ib = fm['image'].fileobj.getvalue()
    vox = int(header_view(bytearray(hb[:hs]), version, endian)['vox_offset'])
    return Parts(version, endian, False, bytearray(hb[:hs]), hb[hs:], ib[vox:], data_pos=vox)


def nib_parts(data, version=1, endian='<', single=True, **kw) -> Parts:
    return parts_from_image(nib_image(data, version, endian, single, **kw))


def gz(b: bytes) -> bytes:
    return gzip.compress(b, compresslevel=6, mtime=0)


def file_names(base: os.PathLike | str, kind: str) -> tuple[str, str | None]:
    """(header-or-single file, image file or None)."""
    base = os.fspath(base)
    if kind == 'nii':
        return base + '.nii', None
    if kind == 'nii.gz':
        return base + '.nii.gz', None
    if kind == 'pair':
        return base + '.hdr', base + '.img'
    if kind == 'pair.gz':
        return base + '.hdr.gz', base + '.img.gz'
    raise ValueError(kind)


def file_bytes(parts: Parts) -> tuple[bytes, bytes | None]:
    if parts.single:
        head = bytes(parts.hdr) + parts.ext
        pos = len(head) if parts.data_pos is None else parts.data_pos
        if pos >= len(head):
            head = head + b'\0' * (pos - len(head))
        return head + parts.data, None
    pos = int(parts.fields['vox_offset']) if parts.data_pos is None else parts.data_pos
    return bytes(parts.hdr) + parts.ext, b'\0' * pos + parts.data


def write_parts(base, parts: Parts, kind: str | None = None, open_with: str = 'hdr',
                mutate: Callable[[bytes], bytes] | None = None) -> str:
    """Write `parts` at `base` + extension(s); returns the path to load.

    `mutate` post-processes the bytes of the file holding the data (single file or .img) before
    compression.  For pairs `open_with` chooses whether the .hdr or the .img name is returned.
    """
    if kind is None:
        kind = 'nii' if parts.single else 'pair'
    if parts.single != kind.startswith('nii'):
        raise ValueError('kind does not match parts.single')
    first, second = file_names(base, kind)
    b1, b2 = file_bytes(parts)
    if mutate is not None:
        if b2 is None:
            b1 = mutate(b1)
        else:
            b2 = mutate(b2)
    if kind.endswith('.gz'):
        b1 = gz(b1)
        b2 = None if b2 is None else gz(b2)
    with open(first, 'wb') as f:
        f.write(b1)
    if second is not None:
        with open(second, 'wb') as f:
            f.write(b2)
        if open_with == 'img':
            return second
    return first


def ext_bytes(exts: Iterable[tuple[int, bytes]], endian='<', flag=b'\x01\x00\x00\x00',
              pad=True) -> bytes:
    """Raw extension block: flag + [esize, ecode, content (+ zero padding)]*."""
    out = bytearray(flag)
    i4 = np.dtype(endian + 'i4')
    for item in exts:
        if len(item) == 3:
            code, content, esize = item
        else:
            code, content = item
            esize = (len(content) + 8 + 15) // 16 * 16 if pad else len(content) + 8
        out += np.array([esize, code], dtype=i4).tobytes()
        out += content
        out += b'\0' * max(0, esize - 8 - len(content))
    return bytes(out)


# ----------------------------------------------------------------------------------------------
# Comparison
# ----------------------------------------------------------------------------------------------

def outcome(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            return True, fn()
    except Exception as e:  # noqa: BLE001 - differential testing wants every failure
        return False, e


def _float_view(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == 'c':
        s = a.dtype.str
        return a.reshape(-1).view(np.dtype(s[0] + 'f' + str(a.dtype.itemsize // 2)))
    return a.reshape(-1)


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-exact equality for arrays of the same dtype/shape; NaN payloads are not compared."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    if a.dtype.kind in 'fc':
        fa, fb = _float_view(a), _float_view(b)
        na, nb_ = np.isnan(fa), np.isnan(fb)
        if not np.array_equal(na, nb_):
            return False
        return fa[~na].tobytes() == fb[~nb_].tobytes()
    return a.tobytes() == b.tobytes()


def _first_diff(a: np.ndarray, b: np.ndarray) -> str:
    try:
        if a.dtype.names or b.dtype.names:
            return ''
        fa, fb = np.ravel(a), np.ravel(b)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            neq = ~((fa == fb) | ((fa != fa) & (fb != fb)))
            if a.dtype.kind in 'fc':
                neq |= np.signbit(np.real(fa)) != np.signbit(np.real(fb))
        idx = np.flatnonzero(neq)
        if not len(idx):
            return ' (values equal, bits differ)'
        i = idx[0]
        return f' ({len(idx)} differ; first flat idx {i}: voxpipe {fa[i]!r} nibabel {fb[i]!r})'
    except Exception:  # noqa: BLE001
        return ''


def array_problem(got: Any, exp: np.ndarray, what: str) -> str | None:
    """None if `got` (voxpipe) is an ndarray identical to `exp` (nibabel) in dtype, shape, bits.

    nibabel returns a numpy scalar (np.generic, native byte order) for an all-integer index.
    Here a 0-d ndarray with the same value is accepted too (in any byte order); the scalar type
    itself is checked by one dedicated test (test_quirks.py::test_all_int_index_returns_scalar)
    so that this API difference does not drown every other comparison.
    """
    if isinstance(exp, np.generic):
        if isinstance(got, np.ndarray) and got.ndim == 0 and not got.dtype.names:
            got = got.astype(got.dtype.newbyteorder('='))
        elif isinstance(got, np.ndarray) and got.ndim == 0:
            got = got[()]
        if not isinstance(got, (np.generic, np.ndarray)):
            return (f'{what}: nibabel returns numpy scalar {type(exp).__name__} but voxpipe '
                    f'{type(got).__name__}')
        got, exp = np.asarray(got), np.asarray(exp)
    elif not isinstance(got, np.ndarray):
        return f'{what}: voxpipe returned {type(got).__name__}, nibabel ndarray'
    if got.dtype != exp.dtype:
        return f'{what}: dtype voxpipe {got.dtype.str}/{got.dtype} nibabel {exp.dtype.str}/{exp.dtype}'
    if got.shape != exp.shape:
        return f'{what}: shape voxpipe {got.shape} nibabel {exp.shape}'
    if not bits_equal(got, exp):
        return f'{what}: values differ{_first_diff(got, exp)}'
    return None


def both(vp_fn, nib_fn, what, cmp, problems: list[str]) -> None:
    """Run both; nibabel raising requires voxpipe raising; otherwise `cmp(vp_val, nib_val)`."""
    ok_n, nv = outcome(nib_fn)
    ok_v, vv = outcome(vp_fn)
    if not ok_n:
        if ok_v:
            problems.append(f'{what}: nibabel raises {type(nv).__name__}({nv}) but voxpipe '
                            f'returned {_short(vv)}')
        return
    if not ok_v:
        problems.append(f'{what}: voxpipe raised {type(vv).__name__}: {vv}')
        return
    p = cmp(vv, nv)
    if p:
        problems.append(p if isinstance(p, str) else f'{what}: {p}')


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f'ndarray(dtype={v.dtype}, shape={v.shape})'
    r = repr(v)
    return r if len(r) < 120 else r[:117] + '...'


def _scalar_problem(what, got, exp):
    g, e = np.asarray(got), np.asarray(exp)
    if g.dtype != e.dtype or g.shape != e.shape or not bits_equal(g, e):
        return f'{what}: voxpipe {got!r} ({g.dtype}) nibabel {exp!r} ({e.dtype})'
    return None


def _float_attr_problem(what, got, exp):
    if not isinstance(got, (float, np.floating)):
        return f'{what}: voxpipe {got!r} is not a float (nibabel {exp!r})'
    if np.float64(got).tobytes() != np.float64(exp).tobytes() and not (
            math.isnan(got) and math.isnan(exp)):
        return f'{what}: voxpipe {got!r} nibabel {exp!r}'
    return None


def slicers_for(shape: tuple[int, ...]) -> list[Any]:
    """Basic-indexing slicers valid for `shape` (None / Ellipsis / ints / stepped slices)."""
    nd = len(shape)
    s = slice
    cands = [
        (), Ellipsis, (Ellipsis, 0), 0, -1, 1, s(1, 4), s(None, None, 2), s(None, None, -1),
        (None, Ellipsis, 1), (s(None), s(2, 5, 2), -1), (2, 3), s(3, 3), s(None),
        (s(None),) * nd, tuple(s(0, d) for d in shape), tuple(s(0, d, 1) for d in shape),
        (s(None), -2, s(None, None, -2)), (Ellipsis, s(1, None, 3)), (1, Ellipsis, None),
        s(-3, None), s(2, 100), s(4, 0, -2), s(None, None, -3), s(-1, -4, -1),
        (0, 0, 0), (-1, -1, -1), (s(1, 2), s(None), 0), (Ellipsis, s(None, None, -1), 0),
        (s(None), None, s(1, 3), None), (Ellipsis, -1), (Ellipsis, 1, s(None, None, 2)),
        (s(None, None, 2), s(None, None, 3), s(None, None, -2)), (s(0, 0), 1),
        (2, Ellipsis, s(None, None, -1)), (None,), (None, None), (Ellipsis, None),
        tuple([0] * nd), tuple([-1] * nd), (s(None), Ellipsis, s(None)), (s(1, -1),) * nd,
    ]
    if nd >= 4:
        cands += [(Ellipsis, 1, 0), (s(None), s(None), s(None), -1), (0, 1, 2, s(None, None, -1)),
                  (Ellipsis, s(1, 3), None)]
    if nd >= 5:
        cands += [(s(None),) * 4 + (1,), (1, s(None), 2, Ellipsis, -1)]
    out = []
    for c in cands:
        if _valid_for(c, shape):
            out.append(c)
    return out


def nonempty_slicers(shape: tuple[int, ...]) -> list[Any]:
    """slicers_for(shape) minus those selecting nothing (nibabel sometimes raises on those)."""
    probe = np.empty(shape, dtype=np.uint8)
    return [s for s in slicers_for(shape) if np.asarray(probe[s]).size > 0]


def _axes_of(slicer, nd: int) -> list[tuple[Any, int]] | None:
    """[(index item, axis)] for the non-None items of `slicer`; None if not basic/valid."""
    t = slicer if isinstance(slicer, tuple) else (slicer,)
    if sum(x is Ellipsis for x in t) > 1:
        return None
    idx = [x for x in t if x is not None]
    if Ellipsis in idx:
        e = idx.index(Ellipsis)
        before, after = idx[:e], idx[e + 1:]
        if len(before) + len(after) > nd:
            return None
        return ([(x, ax) for ax, x in enumerate(before)]
                + [(x, nd - len(after) + k) for k, x in enumerate(after)])
    if len(idx) > nd:
        return None
    return [(x, ax) for ax, x in enumerate(idx)]


def _valid_for(slicer, shape) -> bool:
    """In range for numpy, and away from nibabel's known slicing bugs: slice bounds below -len
    (not clamped by nibabel's fill_slicer) and slices of zero-length axes; those are covered
    by dedicated tests in test_quirks.py."""
    axes = _axes_of(slicer, len(shape))
    if axes is None:
        return False
    for x, ax in axes:
        n = shape[ax]
        if isinstance(x, int) and not (-n <= x < n):
            return False
        if isinstance(x, slice):
            if n == 0:
                return False
            for b in (x.start, x.stop):
                if b is not None and b < -n:
                    return False
    return True


def slicer_id(s: Any) -> str:
    def one(x):
        if x is None:
            return 'None'
        if x is Ellipsis:
            return '...'
        if isinstance(x, slice):
            return ':'.join('' if v is None else str(v) for v in (x.start, x.stop, x.step))
        return str(x)
    t = s if isinstance(s, tuple) else (s,)
    return '[' + ','.join(one(x) for x in t) + ']'


PARTS_ALL = ('meta', 'header', 'extensions', 'dataobj', 'data', 'unscaled', 'fdata', 'slicers')


def compare_images(vi, ni, parts: Sequence[str] = PARTS_ALL, slicers=None) -> list[str]:
    """All differences between voxpipe image `vi` and nibabel image `ni` (empty: identical)."""
    pr: list[str] = []
    if 'meta' in parts:
        both(lambda: tuple(vi.shape), lambda: tuple(ni.shape), 'shape',
             lambda g, e: None if g == e and all(type(x) is int for x in g)
             else f'shape: voxpipe {g!r} nibabel {e!r}', pr)
        both(lambda: vi.ndim, lambda: ni.ndim, 'ndim',
             lambda g, e: None if g == e else f'ndim: voxpipe {g!r} nibabel {e!r}', pr)
        both(lambda: vi.affine, lambda: ni.affine, 'affine',
             lambda g, e: array_problem(np.asarray(g), e, 'affine') or (
                 None if isinstance(g, np.ndarray) and np.array_equal(g, e, equal_nan=True)
                 else f'affine: voxpipe\n{g!r}\nnibabel\n{e!r}'), pr)
    if 'header' in parts:
        vh, nh = vi.header, ni.header
        for k in nh.keys():
            both(lambda k=k: vh[k], lambda k=k: nh[k], f'header[{k!r}]',
                 lambda g, e, k=k: _scalar_problem(f'header[{k!r}]', g, e), pr)
        both(lambda: tuple(vh.get_zooms()), lambda: tuple(nh.get_zooms()), 'get_zooms()',
             lambda g, e: None if len(g) == len(e) and all(
                 _scalar_problem('z', a, b) is None for a, b in zip(g, e))
             else f'get_zooms(): voxpipe {g!r} nibabel {e!r}', pr)
        both(lambda: tuple(vh.get_data_shape()), lambda: tuple(nh.get_data_shape()),
             'get_data_shape()',
             lambda g, e: None if g == e and all(type(x) is int for x in g)
             else f'get_data_shape(): voxpipe {g!r} nibabel {e!r}', pr)
        both(lambda: vh.get_data_dtype(), lambda: nh.get_data_dtype(), 'get_data_dtype()',
             lambda g, e: None if np.dtype(g) == e and np.dtype(g).str == e.str
             else f'get_data_dtype(): voxpipe {g!r} nibabel {e!r}', pr)
    if 'extensions' in parts:
        def ext_list(exts, raw=False):
            # nibabel >= 5.3: get_content() raises NotImplementedError for codes handled by the
            # generic NiftiExtension (18-42), so the nibabel side uses the raw ``.content``.
            return [(int(x.get_code()),
                     bytes(x.content if raw or isinstance(x, nib.nifti1.NiftiExtension)
                           else x.get_content()))
                    for x in exts]
        both(lambda: ext_list(vi.header.extensions),
             lambda: ext_list(ni.header.extensions, raw=True),
             'extensions', lambda g, e: None if g == e
             else f'extensions: voxpipe {_short(g)} nibabel {_short(e)}', pr)
    if 'dataobj' in parts:
        vd, nd = vi.dataobj, ni.dataobj
        both(lambda: tuple(vd.shape), lambda: tuple(nd.shape), 'dataobj.shape',
             lambda g, e: None if g == e else f'dataobj.shape: voxpipe {g} nibabel {e}', pr)
        both(lambda: vd.ndim, lambda: nd.ndim, 'dataobj.ndim',
             lambda g, e: None if g == e else f'dataobj.ndim: voxpipe {g} nibabel {e}', pr)
        both(lambda: vd.dtype, lambda: nd.dtype, 'dataobj.dtype',
             lambda g, e: None if np.dtype(g) == e and np.dtype(g).str == e.str
             else f'dataobj.dtype: voxpipe {g!r} nibabel {e!r}', pr)
        for attr in ('slope', 'inter'):
            both(lambda a=attr: getattr(vd, a), lambda a=attr: getattr(nd, a), f'dataobj.{attr}',
                 lambda g, e, a=attr: _float_attr_problem(f'dataobj.{a}', g, e), pr)
        both(lambda: vd.offset, lambda: nd.offset, 'dataobj.offset',
             lambda g, e: None if g == e and isinstance(g, (int, np.integer))
             else f'dataobj.offset: voxpipe {g!r} nibabel {e!r}', pr)
    if 'data' in parts:
        both(lambda: np.asarray(vi.dataobj), lambda: np.asarray(ni.dataobj),
             'np.asarray(dataobj)', lambda g, e: array_problem(g, e, 'np.asarray(dataobj)'), pr)
    if 'unscaled' in parts:
        both(lambda: vi.dataobj.get_unscaled(), lambda: ni.dataobj.get_unscaled(),
             'dataobj.get_unscaled()',
             lambda g, e: array_problem(np.asarray(g), e, 'dataobj.get_unscaled()'), pr)
    if 'fdata' in parts:
        both(lambda: vi.get_fdata(), lambda: ni.get_fdata(), 'get_fdata()',
             lambda g, e: array_problem(g, e, 'get_fdata()'), pr)
        both(lambda: vi.get_fdata(dtype=np.float32), lambda: ni.get_fdata(dtype=np.float32),
             'get_fdata(float32)', lambda g, e: array_problem(g, e, 'get_fdata(float32)'), pr)
    if 'slicers' in parts:
        shp = outcome(lambda: tuple(ni.shape))[1]
        for s in (slicers if slicers is not None else slicers_for(shp)):
            what = f'dataobj{slicer_id(s)}'
            both(lambda s=s: vi.dataobj[s], lambda s=s: ni.dataobj[s], what,
                 lambda g, e, w=what: array_problem(g, e, w), pr)
    return pr


def assert_same(vi, ni, parts: Sequence[str] = PARTS_ALL, slicers=None, context: str = '') -> None:
    problems = compare_images(vi, ni, parts, slicers)
    if problems:
        raise AssertionError(f'voxpipe != nibabel {context}\n  - ' + '\n  - '.join(problems))


def load_both(path, nib_loader: Callable | None = None):
    import voxpipe as vp

    ok_n, ni = outcome(lambda: (nib_loader or nib.load)(path))
    ok_v, vi = outcome(lambda: vp.load(path))
    return (ok_n, ni), (ok_v, vi)


def check_error(exc: BaseException, path, fields: Sequence[str] = ()) -> list[str]:
    """Problems with a voxpipe error: must derive from ValueError/OSError and name path/field."""
    pr = []
    if not isinstance(exc, (ValueError, OSError)):
        pr.append(f'voxpipe raised {type(exc).__module__}.{type(exc).__name__} which is neither '
                  f'ValueError nor OSError: {exc}')
    msg = str(exc)
    if os.fspath(path) not in msg:
        pr.append(f'path {os.fspath(path)!r} not in voxpipe error message {msg!r}')
    if fields and not any(f.lower() in msg.lower() for f in fields):
        pr.append(f'none of the fields {list(fields)} in voxpipe error message {msg!r}')
    return pr


def compare_load(path, parts: Sequence[str] = PARTS_ALL, nib_loader=None, slicers=None,
                 err_fields: Sequence[str] = (), expect_nib_error: bool | None = None):
    """Load with both; both raise (voxpipe: ValueError/OSError naming the path) or same image.

    `expect_nib_error` (True/False) first asserts what nibabel does, to catch a fixture that does
    not build the intended quirk.  Returns (nib_image_or_exc, vp_image_or_exc).
    """
    (ok_n, ni), (ok_v, vi) = load_both(path, nib_loader)
    if expect_nib_error is not None:
        assert (not ok_n) == expect_nib_error, (
            f'fixture check: nibabel {"loaded" if ok_n else "raised " + repr(ni)} on {path}')
    if not ok_n:
        assert not ok_v, (f'nibabel raises {type(ni).__name__}({ni}) at load but voxpipe loads '
                          f'{path}')
        pr = check_error(vi, path, err_fields)
        assert not pr, '\n'.join(pr)
        return ni, vi
    if not ok_v:
        raise AssertionError(f'nibabel loads {path} but voxpipe raised {type(vi).__name__}: {vi}')
    assert_same(vi, ni, parts, slicers, context=f'for {path}')
    return ni, vi
