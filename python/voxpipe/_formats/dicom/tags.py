"""DICOM tags: ``Tag``, shown as pydicom shows it, and the names voxpipe's data dictionary
(PS3.6, docs/dicom.md) gives them. Any tag can be reached by number, a known one by keyword."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

from ..._foundation.native import core as _core

__all__ = ["Tag", "TagKey", "tag_of", "tag_keyword", "tag_name"]

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


def tag_of(key: TagKey) -> int | None:
    """The tag a key names (int, (group, element), keyword), or None for an unknown keyword."""
    if isinstance(key, str):
        return _core.dicom_keyword_tag(key)
    return int(Tag(key))


def tag_keyword(tag: int) -> str:
    """The keyword of `tag` in voxpipe's dictionary, or "" when it has none."""
    return _core.dicom_tag_keyword(tag) or ""


def tag_name(tag: int) -> str:
    """The keyword (voxpipe's dictionary has no descriptive names), or pydicom's name for
    private and unknown tags."""
    keyword = tag_keyword(tag)
    if keyword:
        return keyword
    if tag & 0xFFFF == 0:
        return "Group Length"
    if (tag >> 16) % 2 == 1:
        return "Private Creator" if 0x10 <= tag & 0xFFFF <= 0xFF else "Private tag data"
    return "Unknown"
