"""DICOM datasets, shaped after pydicom's (the public names are voxpipe.dicom's).

::

    import voxpipe as vp
    ds = vp.dicom.read("slice.dcm")           # metadata; the pixel data is located, not read
    ds.Rows, ds.PixelSpacing, ds.PatientName  # values converted as pydicom 3 converts them
    elem = ds[0x0028, 0x0010]                 # or ds[0x00280010], ds["Rows"]: a DataElement
    elem.VR, elem.value, elem.value_tell      # "US", 512, byte offset of the value
    ds.pixel_data_offset, ds.pixel_data_length, ds.pixel_data_fragments

Parsing is voxpipe's C++ parser (docs/dicom.md); this module holds the elements, datasets and
files it gives. Values are converted (``values.py``, text with ``charset.py``) the first time
they are asked for, and values larger than ``defer_size`` are read from the file on first access
(``deferred.py``). Keywords are those of the DICOM data dictionary (PS3.6, docs/dicom.md); any
tag can be reached by number (``tags.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from ..._foundation import errors
from ..._foundation.native import core as _core
from ..._foundation.types import Array, StrPath
from . import pixels as _dicom_pixels
from .charset import DEFAULT_ENCODING, python_encodings
from .deferred import DeferredSource
from .tags import Tag, TagKey, tag_keyword, tag_name, tag_of
from .values import BYTES_VRS, Value, convert_value

if TYPE_CHECKING:  # typing_extensions is needed for type checking only
    from typing_extensions import Buffer

__all__ = ["DataElement", "Dataset", "FileDataset", "read", "DEFAULT_DEFER_SIZE"]

# Values longer than this are located by `read` and read from the file when first accessed.
DEFAULT_DEFER_SIZE = 64 * 1024
UNDEFINED_LENGTH = 0xFFFFFFFF
_NO_LIMIT = 2**64 - 1


class DataElement:
    """One element: ``tag``, ``VR``, ``value`` (converted on first access), ``keyword``,
    ``name``, ``value_tell`` (offset of the first value byte), ``length`` (as stored;
    0xFFFFFFFF when undefined) and ``is_undefined_length``."""

    __slots__ = ("_raw", "_dataset", "_value", "_converted", "tag", "VR")
    descripWidth = 35
    maxBytesToDisplay = 16
    tag: Tag
    VR: str

    def __init__(self, raw: _core.DicomElement, dataset: Dataset) -> None:
        self._raw = raw
        self._dataset = dataset
        self._converted = False
        self._value: Value | list[Dataset] = None
        self.tag = Tag(raw.tag)
        self.VR = raw.vr

    @property
    def keyword(self) -> str:
        return tag_keyword(self.tag)

    @property
    def name(self) -> str:
        """The keyword (voxpipe's dictionary has no descriptive names), or pydicom's name for
        private and unknown tags."""
        return tag_name(self.tag)

    @property
    def value_tell(self) -> int:
        return self._raw.value_offset

    @property
    def length(self) -> int:
        return self._raw.length

    @property
    def is_undefined_length(self) -> bool:
        return self._raw.length == UNDEFINED_LENGTH

    @property
    def is_deferred(self) -> bool:
        """The value was not read by `read` (it is read from the file on first access)."""
        return not self._raw.value_read and not self._raw.is_sequence

    @property
    def value(self) -> Any:
        if not self._converted:
            self._value = self._dataset._convert(self)
            self._converted = True
        return self._value

    @property
    def VM(self) -> int:
        v = self.value
        if v is None or v == "" or (isinstance(v, bytes) and not v):
            return 0
        if isinstance(v, list) and self.VR != "SQ":
            return len(v)
        return 1

    @property
    def repval(self) -> str:
        value = self.value
        if self.VR in BYTES_VRS or self.VR in ("LT", "UT"):
            if isinstance(value, (bytes, str)) and len(value) > self.maxBytesToDisplay:
                return f"Array of {len(value)} elements"
        if self.VM > self.maxBytesToDisplay:
            return f"Array of {self.VM} elements"
        return repr(value)

    def __str__(self) -> str:
        name = f"{self.name[:self.descripWidth]:<{self.descripWidth}}"
        return f"{self.tag} {name} {self.VR}: {self.repval}"

    def __repr__(self) -> str:
        if self.VR == "SQ":
            return f"{self.tag} {self.name:<{self.descripWidth}} {self.VR}: " \
                   f"<Sequence, length {len(self.value)}>"
        return str(self)


class Dataset:
    """Elements in tag order, accessed as pydicom's Dataset: ``ds.Rows`` (the value),
    ``ds[0x0028, 0x0010]`` / ``ds[0x00280010]`` / ``ds["Rows"]`` (the DataElement), ``in``,
    ``get``, ``keys``, iteration over elements, ``len``, ``dir``. Read-only."""

    def __init__(self, raw: _core.DicomDataset, source: DeferredSource | None,
                 parent: Dataset | None = None,
                 hidden: int | None = None) -> None:
        self._raw = raw
        self._source = source
        self._parent = parent
        self._hidden = hidden
        self._elements: dict[int, DataElement] = {}
        self._encodings: list[str] | None = None

    # The tags are listed on first use: opening a file to read two values (or only to locate the
    # pixel data) creates no per-element objects.
    @property
    def _tag_set(self) -> frozenset[int]:
        tags: frozenset[int] | None = self.__dict__.get("_tag_set_cache")
        if tags is None:
            tags = frozenset(self._raw.tags)
            if self._hidden is not None:
                tags = tags - {self._hidden}
            self.__dict__["_tag_set_cache"] = tags
        return tags

    @property
    def _tags(self) -> list[Tag]:
        tags: list[Tag] | None = self.__dict__.get("_tags_cache")
        if tags is None:
            tags = self.__dict__["_tags_cache"] = [Tag(t) for t in self._raw.tags
                                                   if t != self._hidden]
        return tags

    # -- element access

    def _element(self, tag: int) -> DataElement:
        elem = self._elements.get(tag)
        if elem is None:
            if tag not in self._tag_set:
                raise KeyError(Tag(tag))
            raw = self._raw.find(tag)
            if raw is None:  # listed in the dataset's tags, so found
                raise KeyError(Tag(tag))
            elem = self._elements[tag] = DataElement(raw, self)
        return elem

    def __getitem__(self, key: TagKey) -> DataElement:
        tag = tag_of(key)
        if tag is None:
            raise KeyError(key)
        return self._element(tag)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            tag = _core.dicom_keyword_tag(name)
            if tag is not None and "_raw" in self.__dict__ and tag in self._tag_set:
                return self._element(tag).value
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __contains__(self, key: object) -> bool:
        try:
            tag = tag_of(key)  # type: ignore[arg-type]  # any other key raises: not present
        except (TypeError, ValueError, OverflowError):
            return False
        return tag is not None and tag in self._tag_set

    def get(self, key: TagKey, default: Any = None) -> Any:
        """A keyword gives the value, a tag the DataElement (as pydicom's Dataset.get)."""
        if key not in self:
            return default
        return getattr(self, key) if isinstance(key, str) else self[key]

    def keys(self) -> list[Tag]:
        return list(self._tags)

    def values(self) -> list[DataElement]:
        return [self._element(t) for t in self._tags]

    def items(self) -> list[tuple[Tag, DataElement]]:
        return [(t, self._element(t)) for t in self._tags]

    def elements(self) -> Iterator[DataElement]:
        return iter(self)

    def __iter__(self) -> Iterator[DataElement]:
        for t in self._tags:
            yield self._element(t)

    def __len__(self) -> int:
        return len(self._tag_set)

    def __bool__(self) -> bool:
        return True

    def dir(self) -> list[str]:
        """The keywords of the elements present (pydicom's Dataset.dir())."""
        return sorted(k for k in (tag_keyword(t) for t in self._tags) if k)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.dir()))

    # -- values

    @property
    def encodings(self) -> list[str]:
        """The Python codecs of this dataset's text: its Specific Character Set, else the
        enclosing dataset's."""
        if self._encodings is None:
            charset = self[0x00080005].value if 0x00080005 in self._tag_set else None
            if charset:
                self._encodings = python_encodings(charset)
            elif self._parent is not None:
                self._encodings = self._parent.encodings
            else:
                self._encodings = [DEFAULT_ENCODING]
        return self._encodings

    def _raw_bytes(self, elem: DataElement) -> bytes:
        raw = elem._raw
        value = raw.value  # None when not read
        if value is not None:
            return value
        length = raw.length
        if length == UNDEFINED_LENGTH:
            length = self._undefined_length(raw.tag)
        # A deferred value comes from a file, whose source is set.
        return self._source.read(raw.value_offset, length, raw.tag)  # type: ignore[union-attr]

    def _undefined_length(self, tag: int) -> int:
        path = self._source.path  # type: ignore[union-attr]  # set wherever values are read
        raise errors.FormatError(f"{path}: {Tag(tag)}: a value of undefined "
                                 "length that is not a sequence", path, str(Tag(tag)))

    def _convert(self, elem: DataElement) -> Value | list[Dataset]:
        raw = elem._raw
        if raw.is_sequence:
            return [Dataset(raw.item(i), self._source, self) for i in range(raw.item_count)]
        if raw.length == 0:
            return convert_value(elem.VR, b"", self._raw.big_endian, [DEFAULT_ENCODING])
        data = self._raw_bytes(elem)
        encodings = self.encodings if elem.VR in ("LO", "SH", "UC", "LT", "ST", "UT", "PN") \
            else [DEFAULT_ENCODING]
        return convert_value(elem.VR, data, self._raw.big_endian, encodings)

    # -- text

    def _lines(self, indent: int) -> list[str]:
        lines: list[str] = []
        pad = "   " * indent
        for elem in self:
            if elem.VR == "SQ" or elem._raw.is_sequence:
                items = elem.value
                lines.append(f"{pad}{elem.tag}  {elem.name}  {len(items)} item(s) ---- ")
                for item in items:
                    lines.extend(item._lines(indent + 1))
                    lines.append(f"{pad}   ---------")
            else:
                lines.append(pad + str(elem))
        return lines

    def __str__(self) -> str:
        return "\n".join(self._lines(0))

    __repr__ = __str__


class FileDataset(Dataset):
    """The dataset of a file (pydicom's FileDataset): also ``filename``, ``file_meta``,
    ``transfer_syntax``, ``is_implicit_VR``, ``is_little_endian``, and where the pixel data lies:
    ``pixel_data_offset``, ``pixel_data_length``, ``pixel_data_fragments``."""

    def __init__(self, core_file: _core.DicomFile, stop_before_pixels: bool, size: int,
                 on_corrupt: Literal["raise", "warn"] = "raise",
                 buffer: Buffer | None = None) -> None:
        # buffer: the file's bytes, for a file held in memory (deferred values are read there).
        source = DeferredSource(core_file, size, buffer)
        self._file = core_file  # the parsed file, for the pixel layer
        self._in_memory = buffer is not None
        self._on_corrupt = on_corrupt  # read(on_corrupt=...): the pixel_array property's
        pixel = core_file.pixel_data
        hidden = pixel.tag if (stop_before_pixels and pixel is not None) else None
        super().__init__(core_file.dataset, source, None, hidden)
        self.file_meta = Dataset(core_file.meta, source)
        self.filename = core_file.path

    @property
    def transfer_syntax(self) -> str:
        """The Transfer Syntax UID ("" when the file has none)."""
        return self._file.transfer_syntax.uid

    @property
    def is_implicit_VR(self) -> bool:
        return self._file.implicit_vr

    @property
    def is_little_endian(self) -> bool:
        return not self._file.big_endian

    @property
    def preamble_present(self) -> bool:
        return self._file.has_preamble

    @property
    def offsets_in_inflated_stream(self) -> bool:
        """True for Deflated Explicit VR Little Endian: value offsets (pixel data included) are
        positions in the inflated dataset stream, not in the file."""
        return self._file.offsets_in_inflated_stream

    @property
    def pixel_data_offset(self) -> int | None:
        """Offset of the first byte of the top-level pixel data value (pydicom's value_tell of
        PixelData), or None when there is none."""
        pixel = self._file.pixel_data
        return None if pixel is None else pixel.offset

    @property
    def pixel_data_length(self) -> int | None:
        """Bytes of native pixel data; for encapsulated data, the bytes from pixel_data_offset
        through the Sequence Delimitation Item. None when there is no pixel data."""
        pixel = self._file.pixel_data
        return None if pixel is None else pixel.length

    @property
    def pixel_data_fragments(self) -> list[tuple[int, int]] | None:
        """(offset, length) of each fragment's data for encapsulated pixel data (after the Basic
        Offset Table), else None."""
        pixel = self._file.pixel_data
        if pixel is None or not pixel.encapsulated:
            return None
        return pixel.fragments

    def _pixel_file(self) -> _core.DicomFile:
        """The parsed file, for the pixel layer, which reads a file's pixel data at its path."""
        if self._in_memory:
            # A series' get_data decodes the pixel data of the objects it was scanned from.
            path = self._file.path
            raise errors.UnsupportedError(
                f"{path}: the pixel data of a dataset read from memory (an object "
                f"from a URL) are read through its series: Series.get_data or vp.load_dicom",
                path, "PixelData")
        return self._file

    @property
    def pixel_info(self) -> _core.DicomPixelInfo:
        """The checked Image Pixel module (rows, columns, samples_per_pixel, bits_allocated,
        bits_stored, pixel_representation, planar_configuration, number_of_frames, photometric,
        photometric_out, dtype, shape, codec). Raises FormatError naming the tag when a required
        value is missing or inconsistent, UnsupportedError for a syntax voxpipe cannot decode."""
        info: _core.DicomPixelInfo | None = self.__dict__.get("_pixel_info")
        if info is None:
            info = self.__dict__["_pixel_info"] = _dicom_pixels.pixel_info(self._pixel_file())
        return info

    @property
    def pixel_array(self) -> Array:
        """The pixel data as pydicom's ``Dataset.pixel_array``: same shape, dtype (native byte
        order) and values; frames are decoded in parallel. Cached, as in pydicom. A compressed
        frame its decoder reports damaged raises CorruptError, unless the file was read with
        ``on_corrupt='warn'`` (then: what the decoder recovers, with a CorruptDataWarning)."""
        arr: Array | None = self.__dict__.get("_pixel_array")
        if arr is None:
            info = self.pixel_info
            arr = self.__dict__["_pixel_array"] = _dicom_pixels.pixel_array(
                self._pixel_file(), info=info, on_corrupt=self._on_corrupt)
        return arr

    def pixel_array_frame(self, index: int, *, as_rgb: bool = True,
                          on_corrupt: Literal["raise", "warn"] | None = None) -> Array:
        """Frame `index` only (pydicom's ``pixel_array(path, index=...)``); nothing cached.
        ``on_corrupt``: 'raise' or 'warn' (default: the one ``read`` was given)."""
        info = self.pixel_info
        return _dicom_pixels.pixel_array(self._pixel_file(), index, as_rgb=as_rgb, info=info,
                                         on_corrupt=on_corrupt or self._on_corrupt)

    def get_fdata(self, dtype: npt.DTypeLike | None = np.float64, *, index: int | None = None,
                  as_rgb: bool = True, threads: int | None = None,
                  on_corrupt: Literal["raise", "warn"] | None = None) -> Array:
        """The pixel data with the modality transform applied, equal to pydicom's
        ``apply_modality_lut(ds.pixel_array, ds)``: the Modality LUT Sequence where present,
        else Rescale Slope and Intercept when both are, computed in float64; ``dtype=float32``
        rounds those values once. Decoded and transformed in one pass; not cached.
        ``on_corrupt``: 'raise' or 'warn' (default: the one ``read`` was given)."""
        info = self.pixel_info
        return _dicom_pixels.modality_array(self._pixel_file(), dtype, index, as_rgb=as_rgb,
                                            threads=threads, info=info,
                                            on_corrupt=on_corrupt or self._on_corrupt)

    def _undefined_length(self, tag: int) -> int:
        pixel = self._file.pixel_data
        if pixel is not None and pixel.tag == tag and pixel.encapsulated:
            return pixel.length - 8  # pydicom's value stops before the Sequence Delimitation Item
        return super()._undefined_length(tag)

    def _lines(self, indent: int) -> list[str]:
        lines: list[str] = []
        if len(self.file_meta):
            lines.append("Dataset.file_meta -------------------------------")
            lines.extend(self.file_meta._lines(0))
            lines.append("-------------------------------------------------")
        return lines + super()._lines(indent)


def _defer_limit(defer_size: int | float | str | None) -> int:
    """pydicom's size_in_bytes: an int, a float, or a string such as "512 KB" (kB = 1000,
    KiB = 1024); None or inf: no limit."""
    if defer_size is None or defer_size == float("inf"):
        return _NO_LIMIT
    if isinstance(defer_size, str):
        factors = {"kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2,
                   "gib": 1024**3}
        try:
            size = float(defer_size)
        except ValueError:
            value, _, unit = defer_size.strip().partition(" ")
            if unit.strip().lower() not in factors:
                raise ValueError(f"Unable to parse length with unit '{unit}'") from None
            size = float(value) * factors[unit.strip().lower()]
    else:
        size = defer_size
    if size < 0:
        raise ValueError(f"defer_size must be >= 0, but received {defer_size!r}")
    # A value is deferred when its length is greater than defer_size (pydicom's rule).
    return int(size)


def read(path: StrPath, defer_size: int | float | str | None = DEFAULT_DEFER_SIZE,
         stop_before_pixels: bool = False, force: bool = False,
         on_corrupt: Literal["raise", "warn"] = "raise") -> FileDataset:
    """Parse the DICOM file at `path`, as pydicom's ``dcmread``.

    defer_size: values longer than this many bytes (int, or "512 KB" / "1 MiB") are located but
        not read; they are read from the file the first time they are accessed (an error if the
        file has changed size since). Default 64 KiB; None reads every value now (as pydicom's
        default). The pixel data is never read here.
    stop_before_pixels: leave the pixel data element out (and stop parsing there);
        ``pixel_data_offset``/``length`` still say where it is.
    force: also read files without the 128-byte preamble and "DICM" when their first element
        looks like DICOM (pydicom's force=True); without it they raise FormatError.
    on_corrupt: what ``pixel_array`` (and by default ``get_fdata``, ``pixel_array_frame``) do
        with a compressed frame whose decoder reports damage it can decode past (libjpeg's
        "Corrupt JPEG data", OpenJPEG's damage warnings): 'raise' a CorruptError naming the
        file, the frame and the decoder's message (default), or 'warn': return what the decoder
        recovers, with a voxpipe.errors.CorruptDataWarning.

    Raises voxpipe.errors exceptions (FormatError, TruncatedError, ... : docs/dicom.md).

    >>> from pydicom.data import get_testdata_file  # a CT image pydicom ships with its tests
    >>> ds = vp.dicom.read(get_testdata_file("CT_small.dcm"))
    >>> ds.Modality, ds.Rows, ds.Columns, ds.pixel_data_offset
    ('CT', 128, 128, 6300)
    >>> ds.pixel_array.dtype, ds.get_fdata().dtype   # pydicom's pixel_array; rescaled values
    (dtype('int16'), dtype('float64'))
    """
    _dicom_pixels.check_on_corrupt(on_corrupt)
    path = os.fspath(path)
    try:
        size = os.stat(path).st_size
    except OSError:
        size = -1  # read_dicom raises the error, naming the file
    core_file = _core.read_dicom(path, _defer_limit(defer_size),
                                 stop_at_pixel_data=stop_before_pixels,
                                 require_preamble=not force)
    return FileDataset(core_file, stop_before_pixels, size, on_corrupt)
