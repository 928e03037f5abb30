"""NIfTI-1 and NIfTI-2 headers with nibabel's field names, dtypes and accessors.

A header is a 0-d NumPy structured array laid out exactly as on disk (nibabel's header_dtd), so
``hdr['pixdim']`` returns what nibabel's returns, dtype and byte order included. Affines are
computed by the C++ core with nibabel's arithmetic; load-time fixes are applied by the core before
a header reaches Python.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

from . import _core

_N1_FIELDS = [
    ("sizeof_hdr", "i4"), ("data_type", "S10"), ("db_name", "S18"), ("extents", "i4"),
    ("session_error", "i2"), ("regular", "S1"), ("dim_info", "u1"), ("dim", "i2", (8,)),
    ("intent_p1", "f4"), ("intent_p2", "f4"), ("intent_p3", "f4"), ("intent_code", "i2"),
    ("datatype", "i2"), ("bitpix", "i2"), ("slice_start", "i2"), ("pixdim", "f4", (8,)),
    ("vox_offset", "f4"), ("scl_slope", "f4"), ("scl_inter", "f4"), ("slice_end", "i2"),
    ("slice_code", "u1"), ("xyzt_units", "u1"), ("cal_max", "f4"), ("cal_min", "f4"),
    ("slice_duration", "f4"), ("toffset", "f4"), ("glmax", "i4"), ("glmin", "i4"),
    ("descrip", "S80"), ("aux_file", "S24"), ("qform_code", "i2"), ("sform_code", "i2"),
    ("quatern_b", "f4"), ("quatern_c", "f4"), ("quatern_d", "f4"), ("qoffset_x", "f4"),
    ("qoffset_y", "f4"), ("qoffset_z", "f4"), ("srow_x", "f4", (4,)), ("srow_y", "f4", (4,)),
    ("srow_z", "f4", (4,)), ("intent_name", "S16"), ("magic", "S4"),
]

_N2_FIELDS = [
    ("sizeof_hdr", "i4"), ("magic", "S4"), ("eol_check", "i1", (4,)), ("datatype", "i2"),
    ("bitpix", "i2"), ("dim", "i8", (8,)), ("intent_p1", "f8"), ("intent_p2", "f8"),
    ("intent_p3", "f8"), ("pixdim", "f8", (8,)), ("vox_offset", "i8"), ("scl_slope", "f8"),
    ("scl_inter", "f8"), ("cal_max", "f8"), ("cal_min", "f8"), ("slice_duration", "f8"),
    ("toffset", "f8"), ("slice_start", "i8"), ("slice_end", "i8"), ("descrip", "S80"),
    ("aux_file", "S24"), ("qform_code", "i4"), ("sform_code", "i4"), ("quatern_b", "f8"),
    ("quatern_c", "f8"), ("quatern_d", "f8"), ("qoffset_x", "f8"), ("qoffset_y", "f8"),
    ("qoffset_z", "f8"), ("srow_x", "f8", (4,)), ("srow_y", "f8", (4,)), ("srow_z", "f8", (4,)),
    ("slice_code", "i4"), ("xyzt_units", "i4"), ("intent_code", "i4"), ("intent_name", "S16"),
    ("dim_info", "u1"), ("unused_str", "S15"),
]

RGB24 = np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1")])
RGBA32 = np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1"), ("A", "u1")])

# NIfTI datatype code <-> NumPy dtype (nibabel's _dtdefs, without float128/complex256, which
# nibabel cannot read on platforms without IEEE binary128 long double).
_CODE_TO_DTYPE = {
    2: np.dtype("u1"), 4: np.dtype("i2"), 8: np.dtype("i4"), 16: np.dtype("f4"),
    32: np.dtype("c8"), 64: np.dtype("f8"), 128: RGB24, 256: np.dtype("i1"),
    512: np.dtype("u2"), 768: np.dtype("u4"), 1024: np.dtype("i8"), 1280: np.dtype("u8"),
    1792: np.dtype("c16"), 2304: RGBA32,
}
# voxpipe core dtype names, keyed like _CODE_TO_DTYPE.
_CODE_TO_NAME = {
    2: "uint8", 4: "int16", 8: "int32", 16: "float32", 32: "complex64", 64: "float64",
    128: "rgb24", 256: "int8", 512: "uint16", 768: "uint32", 1024: "int64", 1280: "uint64",
    1792: "complex128", 2304: "rgba32",
}
_NAME_TO_DTYPE = {name: _CODE_TO_DTYPE[code] for code, name in _CODE_TO_NAME.items()}

_XFORM_CODES = {
    "unknown": 0, "scanner": 1, "aligned": 2, "talairach": 3, "mni": 4, "template": 5,
    0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5,
}


def dtype_code(dtype) -> int:
    """NIfTI datatype code for a NumPy dtype (byte order ignored)."""
    dt = np.dtype(dtype)
    if dt.fields is None:
        dt = dt.newbyteorder("=")
    for code, known in _CODE_TO_DTYPE.items():
        if known == dt:
            return code
    raise ValueError(f'data dtype "{dt}" not supported')


def native_code(endianness: str) -> str:
    """'<' or '>' for a NumPy byte-order character ('=' and '|' mean the machine's order)."""
    native = "<" if sys.byteorder == "little" else ">"
    return {"=": native, "|": native}.get(endianness, endianness)


class Nifti1Header:
    """NIfTI-1 header (nibabel.Nifti1Header's fields and main accessors)."""

    _fields = _N1_FIELDS
    sizeof_hdr = 348
    single_magic = b"n+1"
    pair_magic = b"ni1"
    single_vox_offset = 352
    version = 1

    def __init__(self, binaryblock: bytes | None = None, endianness: str | None = None,
                 extensions=()):
        if binaryblock is None:
            endianness = "<" if endianness in (None, "=", "native") else endianness
            self._structarr = np.zeros((), dtype=np.dtype(self._fields).newbyteorder(endianness))
            self._set_defaults()
        else:
            if endianness is None:
                raise ValueError("endianness is required with a binary block")
            dt = np.dtype(self._fields).newbyteorder(endianness)
            self._structarr = np.ndarray((), dtype=dt, buffer=bytearray(binaryblock[: dt.itemsize]))
        self.extensions = list(extensions)

    def _set_defaults(self):
        s = self._structarr
        s["sizeof_hdr"] = self.sizeof_hdr
        s["dim"] = [0] + [1] * 7
        s["datatype"] = 16
        s["bitpix"] = 32
        s["pixdim"] = 1
        s["scl_slope"] = 1
        s["magic"] = self.single_magic
        if self.version == 2:
            s["eol_check"] = (13, 10, 26, 10)

    # -- mapping interface ------------------------------------------------------------------
    def __getitem__(self, name):
        return self._structarr[name]

    def __setitem__(self, name, value):
        self._structarr[name] = value

    def keys(self):
        return list(self._structarr.dtype.names)

    def values(self):
        return [self._structarr[k] for k in self.keys()]

    def items(self):
        return [(k, self._structarr[k]) for k in self.keys()]

    def __iter__(self):
        return iter(self.keys())

    def __contains__(self, name):
        return name in self._structarr.dtype.names

    def __eq__(self, other):
        if not isinstance(other, Nifti1Header):
            return NotImplemented
        return self.binaryblock == other.binaryblock and self.endianness == other.endianness

    @property
    def binaryblock(self) -> bytes:
        return self._structarr.tobytes()

    @property
    def endianness(self) -> str:
        order = self._structarr.dtype["sizeof_hdr"].byteorder
        return native_code(order)

    def copy(self):
        return type(self)(self.binaryblock, self.endianness, list(self.extensions))

    def as_byteorder(self, endianness: str):
        """A copy with the same field values in another byte order ('<', '>' or '=')."""
        out = self.copy()
        out._structarr = self._structarr.astype(self._structarr.dtype.newbyteorder(endianness))
        return out

    def __repr__(self):
        return f"<{type(self).__name__} shape={self.get_data_shape()} dtype={self.get_data_dtype()}>"

    # -- shape, dtype, zooms ----------------------------------------------------------------
    def get_data_shape(self):
        dims = self._structarr["dim"]
        ndims = int(dims[0])
        if ndims == 0:
            return (0,)
        shape = tuple(int(d) for d in dims[1 : ndims + 1])
        if self.version == 1:
            # FreeSurfer conventions for long vectors (nibabel's Nifti1Header.get_data_shape).
            if shape[:3] == (-1, 1, 1):
                vec_len = int(self._structarr["glmin"])
                if vec_len == 0:
                    raise ValueError("-1 in dim[1] but 0 in glmin; inconsistent freesurfer type header?")
                return (vec_len, 1, 1) + shape[3:]
            if shape[:3] == (27307, 1, 6):
                return (163842, 1, 1) + shape[3:]
        return shape

    def set_data_shape(self, shape):
        shape = tuple(int(s) for s in shape)
        if self.version == 1:
            # FreeSurfer conventions (nibabel's Nifti1Header.set_data_shape).
            if shape[:3] == (163842, 1, 1):
                shape = (27307, 1, 6) + shape[3:]
            elif len(shape) >= 3 and shape[1:3] == (1, 1) and shape[0] > np.iinfo(np.int16).max:
                if shape[0] > np.iinfo(np.int32).max:
                    raise ValueError(f"shape[0] {shape[0]} does not fit in glmax datatype")
                warnings.warn("Using large vector Freesurfer hack; header will not be compatible "
                              "with SPM or FSL", stacklevel=2)
                self._structarr["glmin"] = shape[0]
                shape = (-1, 1, 1) + shape[3:]
        ndim = len(shape)
        if ndim > 7:
            raise ValueError("shape has more than 7 dimensions")
        s = self._structarr
        info = np.iinfo(s["dim"].dtype)
        if any(v > info.max or v < info.min for v in shape):
            raise ValueError(f"shape {shape} does not fit in dim datatype")
        s["dim"] = 1
        s["dim"][0] = ndim
        s["dim"][1 : ndim + 1] = shape
        s["pixdim"][ndim + 1 :] = 1.0

    def get_data_dtype(self):
        code = int(self._structarr["datatype"])
        try:
            dt = _CODE_TO_DTYPE[code]
        except KeyError:
            raise ValueError(f"data code {code} not supported") from None
        return dt if dt.fields is not None else dt.newbyteorder(self.endianness)

    def set_data_dtype(self, datatype):
        if isinstance(datatype, str) and datatype in ("int", "uint"):
            raise ValueError(f'Invalid data type "{datatype}". Specify a sized integer, e.g. "int32"')
        if datatype is int:
            raise ValueError('Invalid data type int. Specify a sized integer, e.g., "uint8" or numpy.int16.')
        code = int(datatype) if isinstance(datatype, (int, np.integer)) else dtype_code(datatype)
        if code not in _CODE_TO_DTYPE:
            raise ValueError(f"data code {code} not supported")
        self._structarr["datatype"] = code
        self._structarr["bitpix"] = _CODE_TO_DTYPE[code].itemsize * 8

    def get_zooms(self):
        ndim = int(self._structarr["dim"][0])
        if ndim == 0:
            return (1.0,)
        return tuple(self._structarr["pixdim"][1 : ndim + 1])

    def set_zooms(self, zooms):
        ndim = int(self._structarr["dim"][0])
        zooms = np.asarray(zooms)
        if len(zooms) != ndim:
            raise ValueError(f"Expecting {ndim} zoom values for ndim {ndim}")
        if np.any(zooms < 0):
            raise ValueError("zooms must be positive")
        self._structarr["pixdim"][1 : ndim + 1] = zooms

    # -- offsets and scaling ----------------------------------------------------------------
    def get_data_offset(self):
        return int(self._structarr["vox_offset"])

    def set_data_offset(self, offset):
        self._structarr["vox_offset"] = offset

    def get_slope_inter(self):
        slope = float(self._structarr["scl_slope"])
        inter = float(self._structarr["scl_inter"])
        if slope == 0 or not np.isfinite(slope):
            return None, None
        if not np.isfinite(inter):
            raise ValueError(f"Valid slope but invalid intercept {inter}")
        return slope, inter

    def set_slope_inter(self, slope, inter=None):
        self._structarr["scl_slope"] = np.nan if slope is None else slope
        self._structarr["scl_inter"] = np.nan if inter is None else inter

    def get_xyzt_units(self):
        units = int(self._structarr["xyzt_units"])
        names = {0: "unknown", 1: "meter", 2: "mm", 3: "micron", 8: "sec", 16: "msec",
                 24: "usec", 32: "hz", 40: "ppm", 48: "rads"}
        return names.get(units & 0x07, "unknown"), names.get(units & 0x38, "unknown")

    # -- affines ----------------------------------------------------------------------------
    def _affines(self):
        q, s, b = _core.affines(self.binaryblock)
        return (np.array(q, dtype=np.float64).reshape(4, 4), np.array(s, dtype=np.float64).reshape(4, 4),
                np.array(b, dtype=np.float64).reshape(4, 4))

    def get_qform(self, coded=False):
        code = int(self._structarr["qform_code"])
        if code == 0 and coded:
            return None, 0
        q = self._affines()[0]
        return (q, code) if coded else q

    def get_sform(self, coded=False):
        code = int(self._structarr["sform_code"])
        if code == 0 and coded:
            return None, 0
        s = self._affines()[1]
        return (s, code) if coded else s

    def get_base_affine(self):
        return self._affines()[2]

    def get_best_affine(self):
        if self._structarr["sform_code"] != 0:
            return self.get_sform()
        if self._structarr["qform_code"] != 0:
            return self.get_qform()
        return self.get_base_affine()

    def set_sform(self, affine, code=None):
        s = self._structarr
        old = int(s["sform_code"])
        if code is None:
            code = 0 if affine is None else (2 if old == 0 else old)
        else:
            code = _XFORM_CODES[code]
        s["sform_code"] = code
        if affine is None:
            return
        affine = np.asarray(affine)
        s["srow_x"][:] = affine[0, :]
        s["srow_y"][:] = affine[1, :]
        s["srow_z"][:] = affine[2, :]

    def set_qform(self, affine, code=None, strip_shears=True):
        """Store `affine` as quaternion, qfac and zooms (nibabel's algorithm, step for step)."""
        s = self._structarr
        old = int(s["qform_code"])
        if code is None:
            code = 0 if affine is None else (2 if old == 0 else old)
        else:
            code = _XFORM_CODES[code]
        s["qform_code"] = code
        if affine is None:
            return
        affine = np.asarray(affine)
        if affine.shape != (4, 4):
            raise TypeError("Need 4x4 affine as input")
        trans = affine[:3, 3]
        RZS = affine[:3, :3]
        zooms = np.sqrt(np.sum(RZS * RZS, axis=0))
        R = RZS / zooms
        if np.linalg.det(R) > 0:
            qfac = 1
        else:
            qfac = -1
            R[:, -1] *= -1
        # Polar decomposition: the closest orthogonal matrix to R.
        P, _, Qs = np.linalg.svd(R)
        PR = np.dot(P, Qs)
        if not strip_shears and not np.allclose(PR, R):
            raise ValueError("Shears in affine and `strip_shears` is False")
        quat = _mat2quat(PR)
        s["qoffset_x"], s["qoffset_y"], s["qoffset_z"] = trans
        s["pixdim"][0] = qfac
        s["pixdim"][1:4] = zooms
        s["quatern_b"], s["quatern_c"], s["quatern_d"] = quat[1:]


class Nifti2Header(Nifti1Header):
    """NIfTI-2 header (nibabel.Nifti2Header's fields)."""

    _fields = _N2_FIELDS
    sizeof_hdr = 540
    single_magic = b"n+2"
    pair_magic = b"ni2"
    single_vox_offset = 544
    version = 2


def _mat2quat(M):
    """Quaternion (w, x, y, z) of rotation matrix M, as nibabel.quaternions.mat2quat."""
    Qxx, Qyx, Qzx, Qxy, Qyy, Qzy, Qxz, Qyz, Qzz = M.flat
    K = np.array([
        [Qxx - Qyy - Qzz, 0, 0, 0],
        [Qyx + Qxy, Qyy - Qxx - Qzz, 0, 0],
        [Qzx + Qxz, Qzy + Qyz, Qzz - Qxx - Qyy, 0],
        [Qyz - Qzy, Qzx - Qxz, Qxy - Qyx, Qxx + Qyy + Qzz],
    ]) / 3.0
    vals, vecs = np.linalg.eigh(K)
    q = vecs[[3, 0, 1, 2], np.argmax(vals)]
    if q[0] < 0:
        q *= -1
    return q
