"""Values of DICOM elements, as pydicom 3 converts them (pydicom.values, default
configuration): numbers by VR, IS/DS, AT as Tags, text decoded with the dataset's character
sets, several values (separated by backslashes) as a list."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar, Union

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

from .charset import DEFAULT_ENCODING, decode_text
from .tags import Tag

__all__ = ["BYTES_VRS", "Scalar", "Value", "convert_value"]

# One value of a number or text VR (an AT value is a Tag, an int).
Scalar: TypeAlias = Union[str, int, float]
# A converted value: empty (None, or "" for text VRs), bytes, one value, or several.
Value: TypeAlias = Union[None, bytes, Scalar, Sequence[Scalar]]

_T = TypeVar("_T")

_NUMBER_FORMAT = {"US": "H", "SS": "h", "UL": "L", "SL": "l", "FL": "f", "FD": "d", "SV": "q",
                  "UV": "Q"}
# VRs whose value is its bytes.
BYTES_VRS = frozenset({"OB", "OD", "OF", "OL", "OV", "OW", "UN", "??"})
# Empty values of these are "" (pydicom's empty_value_for_VR); others None, SQ [].
_EMPTY_TEXT_VRS = frozenset({"AE", "AS", "CS", "DA", "DT", "LO", "LT", "PN", "SH", "ST", "TM",
                             "UC", "UI", "UR", "UT"})


def _one_or_list(values: list[_T]) -> _T | list[_T]:
    return values[0] if len(values) == 1 else values


def _split_strings(text: str) -> list[str]:
    return text.rstrip(" \x00").split("\\")


def _is_value(item: str) -> Scalar:
    if item.strip() == "":
        return item
    try:
        value = int(item)
    except ValueError:
        value = int(float(item))
    f = float(item)
    return value if value == f else f  # a non-integral IS stays a float (pydicom's ISfloat)


def _ds_value(item: str) -> str | float:
    return item if item.strip() == "" else float(item)


def _person_name(name: str) -> str:
    """As str(pydicom's PersonName): without trailing empty component groups ("A^B=" -> "A^B")."""
    groups = name.split("=")
    while groups and not groups[-1]:
        groups.pop()
    return "=".join(groups)


def _text_values(raw: bytes, encodings: list[str]) -> str | list[str]:
    return _one_or_list([v.rstrip("\0 ") for v in decode_text(raw, encodings).split("\\")])


def convert_value(vr: str, raw: bytes, big_endian: bool, encodings: list[str]) -> Value:
    """The Python value of `raw`, the bytes of an element of VR `vr` (not SQ)."""
    if len(raw) == 0:
        return "" if vr in _EMPTY_TEXT_VRS else None
    try:
        return _convert(vr, raw, big_endian, encodings)
    except (ValueError, struct.error):
        # pydicom retries other VRs, SH first, which always decodes.
        return _text_values(raw, encodings)


def _convert(vr: str, raw: bytes, big_endian: bool, encodings: list[str]) -> Value:
    if vr in BYTES_VRS:
        return raw
    fmt = _NUMBER_FORMAT.get(vr)
    if fmt is not None:
        size = struct.calcsize("=" + fmt)
        if len(raw) % size:
            raise ValueError(f"{len(raw)} bytes are not a whole number of {vr} values")
        layout = f"{'><'[not big_endian]}{len(raw) // size}{fmt}"
        values: list[int | float] = list(struct.unpack(layout, raw))
        return _one_or_list(values)
    if vr == "AT":
        order = ">" if big_endian else "<"
        pairs = struct.iter_unpack(order + "HH", raw[:len(raw) & ~3])
        tags = [Tag((g << 16) | e) for g, e in pairs]
        return _one_or_list(tags)
    if vr in ("LO", "SH", "UC"):
        return _text_values(raw, encodings)
    if vr in ("LT", "ST", "UT"):
        return decode_text(raw, encodings).rstrip("\0 ")
    if vr == "PN":
        names = decode_text(raw.rstrip(b"\x00 "), encodings).split("\\")
        return _one_or_list([_person_name(n) for n in names])
    text = raw.decode(DEFAULT_ENCODING)
    if vr == "AE":
        return _one_or_list([v.strip() for v in text.split("\\")])
    if vr == "UR":
        return text.rstrip()
    if vr == "DS":
        return _one_or_list([_ds_value(v) for v in _split_strings(text.strip())])
    if vr == "IS":
        return _one_or_list([_is_value(v) for v in _split_strings(text)])
    return _one_or_list(_split_strings(text))  # AS CS DA DT TM UI

