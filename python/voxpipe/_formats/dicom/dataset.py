"""DICOM datasets, shaped after pydicom's (the public names are voxpipe.dicom's).

::

    import voxpipe as vp
    ds = vp.dicom.read("slice.dcm")           # metadata; the pixel data is located, not read
    ds.Rows, ds.PixelSpacing, ds.PatientName  # values converted as pydicom 3 converts them
    elem = ds[0x0028, 0x0010]                 # or ds[0x00280010], ds["Rows"]: a DataElement
    elem.VR, elem.value, elem.value_tell      # "US", 512, byte offset of the value
    ds.pixel_data_offset, ds.pixel_data_length, ds.pixel_data_fragments

Parsing is voxpipe's C++ parser (docs/dicom.md); this module converts values (number VRs, IS/DS,
text decoded with Specific Character Set, sequences) the first time they are asked for, and reads
values larger than ``defer_size`` from the file on first access. Keywords are those of the DICOM
data dictionary (PS3.6, docs/dicom.md); any tag can be reached by number.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
import struct
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, Union

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from ..._foundation.native import core as _core
from . import pixels as _dicom_pixels
from ..._foundation import errors
from ..._foundation.types import Array, StrPath

__all__ = ["DataElement", "Dataset", "FileDataset", "Tag", "read", "DEFAULT_DEFER_SIZE"]

# Values longer than this are located by `read` and read from the file when first accessed.
DEFAULT_DEFER_SIZE = 64 * 1024
UNDEFINED_LENGTH = 0xFFFFFFFF
_PIXEL_TAGS = (0x7FE00010, 0x7FE00008, 0x7FE00009)
_NO_LIMIT = 2**64 - 1


# What names an element: a tag number, (group, element) or a keyword.
TagKey: TypeAlias = Union[int, tuple[int, int], str]


class Tag(int):
    """A tag, ``group << 16 | element``, shown as pydicom shows it: ``(0028,0010)``."""

    __slots__ = ()

    def __new__(cls, arg: TagKey, element: int | None = None) -> Tag:
        if element is not None:
            # a group number: any other arg raises as int() does
            return super().__new__(cls, (int(arg) << 16) | int(element))  # type: ignore[arg-type]
        if isinstance(arg, tuple):
            group, elem = arg
            return super().__new__(cls, (int(group) << 16) | int(elem))
        if isinstance(arg, str):
            tag = _core.dicom_keyword_tag(arg)
            if tag is None:
                raise ValueError(f"'{arg}' is not a keyword of voxpipe's DICOM dictionary")
            return super().__new__(cls, tag)
        value = int(arg)
        if not 0 <= value <= 0xFFFFFFFF:
            raise OverflowError(f"tags are 32-bit numbers, but received {value:#x}")
        return super().__new__(cls, value)

    @property
    def group(self) -> int:
        return self >> 16

    @property
    def element(self) -> int:
        return self & 0xFFFF

    @property
    def is_private(self) -> bool:
        return self.group % 2 == 1

    def __repr__(self) -> str:
        return f"({self.group:04X},{self.element:04X})"

    __str__ = __repr__


def _tag_of(key: TagKey) -> int | None:
    """The tag a key names (int, (group, element), keyword), or None for an unknown keyword."""
    if isinstance(key, str):
        return _core.dicom_keyword_tag(key)
    return int(Tag(key))


# ---------------------------------------------------------------------------------------------
# Character sets: pydicom's names and rules (pydicom.charset), with code extensions (ISO 2022
# escape sequences). Undecodable bytes become U+FFFD, as pydicom does outside its RAISE mode.

_DEFAULT_ENCODING = "iso8859"  # Python's latin-1, as pydicom's default
_PYTHON_ENCODING = {
    "": _DEFAULT_ENCODING, "ISO_IR 6": _DEFAULT_ENCODING, "ISO_IR 13": "shift_jis",
    "ISO_IR 100": "latin_1", "ISO_IR 101": "iso8859_2", "ISO_IR 109": "iso8859_3",
    "ISO_IR 110": "iso8859_4", "ISO_IR 126": "iso_ir_126", "ISO_IR 127": "iso_ir_127",
    "ISO_IR 138": "iso_ir_138", "ISO_IR 144": "iso_ir_144", "ISO_IR 148": "iso_ir_148",
    "ISO_IR 166": "iso_ir_166", "ISO 2022 IR 6": "iso8859", "ISO 2022 IR 13": "shift_jis",
    "ISO 2022 IR 87": "iso2022_jp", "ISO 2022 IR 100": "latin_1", "ISO 2022 IR 101": "iso8859_2",
    "ISO 2022 IR 109": "iso8859_3", "ISO 2022 IR 110": "iso8859_4",
    "ISO 2022 IR 126": "iso_ir_126", "ISO 2022 IR 127": "iso_ir_127",
    "ISO 2022 IR 138": "iso_ir_138", "ISO 2022 IR 144": "iso_ir_144",
    "ISO 2022 IR 148": "iso_ir_148", "ISO 2022 IR 149": "euc_kr",
    "ISO 2022 IR 159": "iso2022_jp_2", "ISO 2022 IR 166": "iso_ir_166",
    "ISO 2022 IR 58": "iso_ir_58", "ISO_IR 192": "UTF8", "GB18030": "GB18030",
    "ISO 2022 GBK": "GBK", "ISO 2022 58": "GB2312", "GBK": "GBK",
}
_STAND_ALONE = ("ISO_IR 192", "GBK", "GB18030")
_ESC = b"\x1b"
_ESCAPE_ENCODING = {
    _ESC + b"(B": _DEFAULT_ENCODING, _ESC + b"-A": "latin_1", _ESC + b")I": "shift_jis",
    _ESC + b"(J": "shift_jis", _ESC + b"$B": "iso2022_jp", _ESC + b"-B": "iso8859_2",
    _ESC + b"-C": "iso8859_3", _ESC + b"-D": "iso8859_4", _ESC + b"-F": "iso_ir_126",
    _ESC + b"-G": "iso_ir_127", _ESC + b"-H": "iso_ir_138", _ESC + b"-L": "iso_ir_144",
    _ESC + b"-M": "iso_ir_148", _ESC + b"-T": "iso_ir_166", _ESC + b"$)C": "euc_kr",
    _ESC + b"$(D": "iso2022_jp_2", _ESC + b"$)A": "iso_ir_58",
}
# Python codecs that take the escape sequence themselves.
_SELF_ESCAPING = ("iso2022_jp", "iso2022_jp_2", "iso_ir_58")
_TEXT_DELIMITERS = {0x0D, 0x0A, 0x09, 0x0C}


def _codec_exists(name: str) -> bool:
    try:
        codecs.lookup(name)
        return True
    except LookupError:
        return False


def python_encodings(charsets) -> list[str]:
    """The Python codecs of the values of Specific Character Set (pydicom's convert_encodings):
    common misspellings ("ISO IR 100", "ISO-2022-IR 87") corrected, unknown names read as the
    default repertoire, stand-alone sets (UTF-8, GB18030, GBK) not combined with others."""
    if isinstance(charsets, str):
        charsets = [charsets]
    charsets = list(charsets) or [""]
    if not charsets[0]:
        charsets[0] = "ISO_IR 6"
    out = []
    for cs in charsets:
        if cs in _PYTHON_ENCODING:
            out.append(_PYTHON_ENCODING[cs])
            continue
        patched = None
        if re.match("^ISO[^_]IR", cs):
            patched = "ISO_IR" + cs[6:]
        elif re.match("^(?=ISO.2022.IR.)(?!ISO 2022 IR )", cs):
            patched = "ISO 2022 IR " + cs[12:]
        if patched is not None:
            out.append(_PYTHON_ENCODING.get(patched, _DEFAULT_ENCODING))
        else:
            out.append(cs if _codec_exists(cs) else _DEFAULT_ENCODING)
    if len(charsets) > 1:
        if charsets[0] in _STAND_ALONE:
            return out[:1]
        out = [out[0]] + [e for cs, e in zip(charsets[1:], out[1:]) if cs not in _STAND_ALONE]
    return out


def _decode_with(value: bytes, encoding: str) -> str:
    try:
        return value.decode(encoding)
    except LookupError:
        return value.decode(_DEFAULT_ENCODING)
    except UnicodeError:
        return value.decode(encoding, errors="replace")


def _decode_escaped(fragment: bytes, encodings: list[str]) -> str:
    n = 4 if fragment.startswith((b"\x1b$(", b"\x1b$)")) else 3
    encoding = _ESCAPE_ENCODING.get(fragment[:n], "")
    if encoding not in encodings and encoding != _DEFAULT_ENCODING:
        return fragment.decode(encodings[0], errors="replace")  # unknown escape sequence
    if encoding in _SELF_ESCAPING:
        return fragment.decode(encoding)
    fragment = fragment[n:]
    # A delimiter switches back to the first character set.
    cut = next((i for i, ch in enumerate(fragment) if ch in _TEXT_DELIMITERS), None)
    if cut is not None:
        return fragment[:cut].decode(encoding) + fragment[cut:].decode(encodings[0])
    return fragment.decode(encoding)


def decode_text(value: bytes, encodings: list[str]) -> str:
    """Decode `value` as pydicom's charset.decode_bytes does (with replacement, never raising)."""
    if _ESC not in value:
        return _decode_with(value, encodings[0])
    parts = []
    for fragment in re.findall(b"(^[^\x1b]+|[\x1b][^\x1b]*)", value):
        try:
            if fragment.startswith(_ESC):
                parts.append(_decode_escaped(fragment, encodings))
            else:
                parts.append(fragment.decode(encodings[0]))
        except (UnicodeError, LookupError):
            parts.append(_decode_with(fragment, encodings[0]) if _codec_exists(encodings[0])
                         else fragment.decode(_DEFAULT_ENCODING, errors="replace"))
    return "".join(parts)


# ---------------------------------------------------------------------------------------------
# Values, as pydicom 3 converts them (pydicom.values, default configuration).

_NUMBER_FORMAT = {"US": "H", "SS": "h", "UL": "L", "SL": "l", "FL": "f", "FD": "d", "SV": "q",
                  "UV": "Q"}
_BYTES_VRS = frozenset({"OB", "OD", "OF", "OL", "OV", "OW", "UN", "??"})
# Empty values of these are "" (pydicom's empty_value_for_VR); others None, SQ [].
_EMPTY_TEXT_VRS = frozenset({"AE", "AS", "CS", "DA", "DT", "LO", "LT", "PN", "SH", "ST", "TM",
                             "UC", "UI", "UR", "UT"})


def _one_or_list(values: list):
    return values[0] if len(values) == 1 else values


def _split_strings(text: str) -> list[str]:
    return text.rstrip(" \x00").split("\\")


def _is_value(item: str):
    if item.strip() == "":
        return item
    try:
        value = int(item)
    except ValueError:
        value = int(float(item))
    f = float(item)
    return value if value == f else f  # a non-integral IS stays a float (pydicom's ISfloat)


def _ds_value(item: str):
    return item if item.strip() == "" else float(item)


def _person_name(name: str) -> str:
    """As str(pydicom's PersonName): without trailing empty component groups ("A^B=" -> "A^B")."""
    groups = name.split("=")
    while groups and not groups[-1]:
        groups.pop()
    return "=".join(groups)


def _text_values(raw: bytes, encodings: list[str]):
    return _one_or_list([v.rstrip("\0 ") for v in decode_text(raw, encodings).split("\\")])


def convert_value(vr: str, raw: bytes, big_endian: bool, encodings: list[str]):
    """The Python value of `raw`, the bytes of an element of VR `vr` (not SQ)."""
    if len(raw) == 0:
        return "" if vr in _EMPTY_TEXT_VRS else None
    try:
        return _convert(vr, raw, big_endian, encodings)
    except (ValueError, struct.error):
        # pydicom retries other VRs, SH first, which always decodes.
        return _text_values(raw, encodings)


def _convert(vr: str, raw: bytes, big_endian: bool, encodings: list[str]):
    if vr in _BYTES_VRS:
        return raw
    fmt = _NUMBER_FORMAT.get(vr)
    if fmt is not None:
        size = struct.calcsize("=" + fmt)
        if len(raw) % size:
            raise ValueError(f"{len(raw)} bytes are not a whole number of {vr} values")
        values = list(struct.unpack(f"{'><'[not big_endian]}{len(raw) // size}{fmt}", raw))
        return _one_or_list(values)
    if vr == "AT":
        order = ">" if big_endian else "<"
        tags = [Tag((g << 16) | e) for g, e in struct.iter_unpack(order + "HH", raw[:len(raw) & ~3])]
        return _one_or_list(tags)
    if vr in ("LO", "SH", "UC"):
        return _text_values(raw, encodings)
    if vr in ("LT", "ST", "UT"):
        return decode_text(raw, encodings).rstrip("\0 ")
    if vr == "PN":
        names = decode_text(raw.rstrip(b"\x00 "), encodings).split("\\")
        return _one_or_list([_person_name(n) for n in names])
    text = raw.decode(_DEFAULT_ENCODING)
    if vr == "AE":
        return _one_or_list([v.strip() for v in text.split("\\")])
    if vr == "UR":
        return text.rstrip()
    if vr == "DS":
        return _one_or_list([_ds_value(v) for v in _split_strings(text.strip())])
    if vr == "IS":
        return _one_or_list([_is_value(v) for v in _split_strings(text)])
    return _one_or_list(_split_strings(text))  # AS CS DA DT TM UI


# ---------------------------------------------------------------------------------------------
# Deferred values


class _Source:
    """The file a dataset came from, for values read after `read` returned: the file at its
    path, or, for a file held in memory (an object from a URL), ``buffer``."""

    def __init__(self, core_file, size: int, buffer: Any = None):
        self.path = core_file.path
        self.size = size  # taken before parsing, so that a change during parsing is seen too
        # (device, inode, size, mtime_ns) of the file the parse read (None for bytes): a file
        # renamed over this one or rewritten in place since is refused, not read at the old
        # offsets.
        self.identity = None if buffer is not None else core_file.identity
        self.inflated = core_file.offsets_in_inflated_stream
        self.dataset_offset = core_file.dataset_offset
        self.buffer = buffer

    def read(self, offset: int, length: int, tag: int) -> bytes:
        field = f"deferred value {Tag(tag)}"
        if self.buffer is not None:
            view = memoryview(self.buffer).cast("B")
            if not self.inflated:
                data = bytes(view[offset:offset + length])
            else:
                step = 1 << 20
                data = self._inflate((view[i:i + step]
                                      for i in range(self.dataset_offset, len(view), step)),
                                     offset, length)
            return self._whole(data, offset, length, field)
        # Opened without waiting (a FIFO that took the name would wait for a writer forever),
        # then checked on the descriptor: the file that is read is the file that was checked.
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise errors.VoxpipeFileNotFoundError(
                f"{self.path}: {field}: the file no longer exists", self.path, field, offset
            ) from None
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = ("FIFO" if stat.S_ISFIFO(st.st_mode) else "directory"
                        if stat.S_ISDIR(st.st_mode) else "special file")
                raise errors.VoxpipeIOError(
                    f"{self.path}: {field}: expected a regular file, but found a {kind}",
                    self.path, field, offset)
            os.set_blocking(fd, True)
            if st.st_size != self.size:
                raise errors.VoxpipeIOError(
                    f"{self.path}: {field}: expected the file as read ({self.size} bytes), but "
                    f"it now has {st.st_size} bytes", self.path, field, offset)
            now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if self.identity is not None and tuple(self.identity) != now:
                raise errors.VoxpipeIOError(
                    f"{self.path}: {field}: the file changed since it was opened (another file "
                    f"put in its place, or rewritten); read it again to see the new file",
                    self.path, field, offset)
            if not self.inflated:
                f.seek(offset)
                data = f.read(length)
            else:
                f.seek(self.dataset_offset)
                data = self._inflate(iter(lambda: f.read(1 << 20), b""), offset, length)
        return self._whole(data, offset, length, field)

    def _whole(self, data: bytes, offset: int, length: int, field: str) -> bytes:
        if len(data) != length:
            raise errors.TruncatedError(
                f"{self.path}: {field}: expected {length} bytes at byte {offset}, but the data "
                f"end after {len(data)}", self.path, field, offset)
        return data

    def _inflate(self, chunks, offset: int, length: int) -> bytes:
        """Bytes [offset, offset + length) of the inflated dataset stream, whose deflated bytes
        ``chunks`` yields from its start (a deflate stream has no random access), keeping only
        what is asked for."""
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        pos, out = 0, bytearray()
        end = offset + length
        for chunk in chunks:
            if pos >= end:
                break
            try:
                data = inflater.decompress(chunk)
            except zlib.error as e:
                raise errors.CorruptError(f"{self.path}: deflated dataset: {e}", self.path,
                                          "deflated dataset", None) from None
            lo, hi = max(offset - pos, 0), min(end - pos, len(data))
            if lo < hi:
                out += data[lo:hi]
            pos += len(data)
            if inflater.eof:
                break
        return bytes(out)


# ---------------------------------------------------------------------------------------------
# Elements and datasets


def _keyword(tag: int) -> str:
    return _core.dicom_tag_keyword(tag) or ""


def _name(tag: int) -> str:
    keyword = _keyword(tag)
    if keyword:
        return keyword
    if tag & 0xFFFF == 0:
        return "Group Length"
    if (tag >> 16) % 2 == 1:
        return "Private Creator" if 0x10 <= tag & 0xFFFF <= 0xFF else "Private tag data"
    return "Unknown"


class DataElement:
    """One element: ``tag``, ``VR``, ``value`` (converted on first access), ``keyword``,
    ``name``, ``value_tell`` (offset of the first value byte), ``length`` (as stored;
    0xFFFFFFFF when undefined) and ``is_undefined_length``."""

    __slots__ = ("_raw", "_dataset", "_value", "_converted", "tag", "VR")
    descripWidth = 35
    maxBytesToDisplay = 16
    tag: Tag
    VR: str

    def __init__(self, raw: Any, dataset: Dataset) -> None:
        self._raw = raw
        self._dataset = dataset
        self._converted = False
        self._value: Any = None
        self.tag = Tag(raw.tag)
        self.VR = raw.vr

    @property
    def keyword(self) -> str:
        return _keyword(self.tag)

    @property
    def name(self) -> str:
        """The keyword (voxpipe's dictionary has no descriptive names), or pydicom's name for
        private and unknown tags."""
        return _name(self.tag)

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
        if self.VR in _BYTES_VRS or self.VR in ("LT", "UT"):
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

    def __init__(self, raw: Any, source: _Source | None, parent: Dataset | None = None,
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
    def _tag_set(self) -> frozenset:
        tags = self.__dict__.get("_tag_set_cache")
        if tags is None:
            tags = frozenset(self._raw.tags)
            if self._hidden is not None:
                tags = tags - {self._hidden}
            self.__dict__["_tag_set_cache"] = tags
        return tags

    @property
    def _tags(self) -> list:
        tags = self.__dict__.get("_tags_cache")
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
            elem = self._elements[tag] = DataElement(self._raw.find(tag), self)
        return elem

    def __getitem__(self, key: TagKey) -> DataElement:
        tag = _tag_of(key)
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
            tag = _tag_of(key)  # type: ignore[arg-type]  # any other key raises: not present
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
        return sorted(k for k in (_keyword(t) for t in self._tags) if k)

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
                self._encodings = [_DEFAULT_ENCODING]
        return self._encodings

    def _raw_bytes(self, elem: DataElement) -> bytes:
        raw = elem._raw
        if raw.value_read:
            return raw.value
        length = raw.length
        if length == UNDEFINED_LENGTH:
            length = self._undefined_length(raw.tag)
        # A deferred value comes from a file, whose source is set.
        return self._source.read(raw.value_offset, length, raw.tag)  # type: ignore[union-attr]

    def _undefined_length(self, tag: int) -> int:
        path = self._source.path  # type: ignore[union-attr]  # set wherever values are read
        raise errors.FormatError(f"{path}: {Tag(tag)}: a value of undefined "
                                 "length that is not a sequence", path, str(Tag(tag)))

    def _convert(self, elem: DataElement):
        raw = elem._raw
        if raw.is_sequence:
            return [Dataset(raw.item(i), self._source, self) for i in range(raw.item_count)]
        if raw.length == 0:
            return convert_value(elem.VR, b"", self._raw.big_endian, [_DEFAULT_ENCODING])
        data = self._raw_bytes(elem)
        encodings = self.encodings if elem.VR in ("LO", "SH", "UC", "LT", "ST", "UT", "PN") \
            else [_DEFAULT_ENCODING]
        return convert_value(elem.VR, data, self._raw.big_endian, encodings)

    # -- text

    def _lines(self, indent: int) -> list[str]:
        lines = []
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

    def __init__(self, core_file: Any, stop_before_pixels: bool, size: int,
                 on_corrupt: str = "raise", buffer: Any = None) -> None:
        # buffer: the file's bytes, for a file held in memory (deferred values are read there).
        source = _Source(core_file, size, buffer)
        self._file = core_file  # the parsed file (_core.DicomFile), for the pixel layer
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

    @property
    def pixel_info(self) -> Any:
        """The checked Image Pixel module (rows, columns, samples_per_pixel, bits_allocated,
        bits_stored, pixel_representation, planar_configuration, number_of_frames, photometric,
        photometric_out, dtype, shape, codec). Raises FormatError naming the tag when a required
        value is missing or inconsistent, UnsupportedError for a syntax voxpipe cannot decode."""
        info = self.__dict__.get("_pixel_info")
        if info is None:
            info = self.__dict__["_pixel_info"] = _dicom_pixels.pixel_info(self)
        return info

    @property
    def pixel_array(self) -> Array:
        """The pixel data as pydicom's ``Dataset.pixel_array``: same shape, dtype (native byte
        order) and values; frames are decoded in parallel. Cached, as in pydicom. A compressed
        frame its decoder reports damaged raises CorruptError, unless the file was read with
        ``on_corrupt='warn'`` (then: what the decoder recovers, with a CorruptDataWarning)."""
        arr = self.__dict__.get("_pixel_array")
        if arr is None:
            arr = self.__dict__["_pixel_array"] = _dicom_pixels.pixel_array(
                self, info=self.pixel_info, on_corrupt=self._on_corrupt)
        return arr

    def pixel_array_frame(self, index: int, *, as_rgb: bool = True,
                          on_corrupt: Literal["raise", "warn"] | None = None) -> Array:
        """Frame `index` only (pydicom's ``pixel_array(path, index=...)``); nothing cached.
        ``on_corrupt``: 'raise' or 'warn' (default: the one ``read`` was given)."""
        return _dicom_pixels.pixel_array(self, index, as_rgb=as_rgb, info=self.pixel_info,
                                         on_corrupt=on_corrupt or self._on_corrupt)

    def get_fdata(self, dtype: npt.DTypeLike | None = np.float64, *, index: int | None = None,
                  as_rgb: bool = True, threads: int | None = None,
                  on_corrupt: Literal["raise", "warn"] | None = None) -> Array:
        """The pixel data with the modality transform applied, equal to pydicom's
        ``apply_modality_lut(ds.pixel_array, ds)``: the Modality LUT Sequence where present,
        else Rescale Slope and Intercept when both are, computed in float64; ``dtype=float32``
        rounds those values once. Decoded and transformed in one pass; not cached.
        ``on_corrupt``: 'raise' or 'warn' (default: the one ``read`` was given)."""
        return _dicom_pixels.modality_array(self, dtype, index, as_rgb=as_rgb, threads=threads,
                                            info=self.pixel_info,
                                            on_corrupt=on_corrupt or self._on_corrupt)

    def _undefined_length(self, tag: int) -> int:
        pixel = self._file.pixel_data
        if pixel is not None and pixel.tag == tag and pixel.encapsulated:
            return pixel.length - 8  # pydicom's value stops before the Sequence Delimitation Item
        return super()._undefined_length(tag)

    def _lines(self, indent: int) -> list[str]:
        lines = []
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
