"""Text of DICOM values: Specific Character Set to Python codecs, and decoding with pydicom's
names and rules (pydicom.charset), code extensions (ISO 2022 escape sequences) included.
Undecodable bytes become U+FFFD, as pydicom does outside its RAISE mode."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable

__all__ = ["DEFAULT_ENCODING", "python_encodings", "decode_text"]

DEFAULT_ENCODING = "iso8859"  # Python's latin-1, as pydicom's default
_PYTHON_ENCODING = {
    "": DEFAULT_ENCODING, "ISO_IR 6": DEFAULT_ENCODING, "ISO_IR 13": "shift_jis",
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
    _ESC + b"(B": DEFAULT_ENCODING, _ESC + b"-A": "latin_1", _ESC + b")I": "shift_jis",
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


def python_encodings(charsets: str | Iterable[str]) -> list[str]:
    """The Python codecs of the values of Specific Character Set (pydicom's convert_encodings):
    common misspellings ("ISO IR 100", "ISO-2022-IR 87") corrected, unknown names read as the
    default repertoire, stand-alone sets (UTF-8, GB18030, GBK) not combined with others."""
    names = [charsets] if isinstance(charsets, str) else list(charsets)
    names = names or [""]
    if not names[0]:
        names[0] = "ISO_IR 6"
    out = []
    for cs in names:
        if cs in _PYTHON_ENCODING:
            out.append(_PYTHON_ENCODING[cs])
            continue
        patched = None
        if re.match("^ISO[^_]IR", cs):
            patched = "ISO_IR" + cs[6:]
        elif re.match("^(?=ISO.2022.IR.)(?!ISO 2022 IR )", cs):
            patched = "ISO 2022 IR " + cs[12:]
        if patched is not None:
            out.append(_PYTHON_ENCODING.get(patched, DEFAULT_ENCODING))
        else:
            out.append(cs if _codec_exists(cs) else DEFAULT_ENCODING)
    if len(names) > 1:
        if names[0] in _STAND_ALONE:
            return out[:1]
        out = [out[0]] + [e for cs, e in zip(names[1:], out[1:]) if cs not in _STAND_ALONE]
    return out


def _decode_with(value: bytes, encoding: str) -> str:
    try:
        return value.decode(encoding)
    except LookupError:
        return value.decode(DEFAULT_ENCODING)
    except UnicodeError:
        return value.decode(encoding, errors="replace")


def _decode_escaped(fragment: bytes, encodings: list[str]) -> str:
    n = 4 if fragment.startswith((b"\x1b$(", b"\x1b$)")) else 3
    encoding = _ESCAPE_ENCODING.get(fragment[:n], "")
    if encoding not in encodings and encoding != DEFAULT_ENCODING:
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
    parts: list[str] = []
    for fragment in re.findall(b"(^[^\x1b]+|[\x1b][^\x1b]*)", value):
        try:
            if fragment.startswith(_ESC):
                parts.append(_decode_escaped(fragment, encodings))
            else:
                parts.append(fragment.decode(encodings[0]))
        except (UnicodeError, LookupError):
            parts.append(_decode_with(fragment, encodings[0]) if _codec_exists(encodings[0])
                         else fragment.decode(DEFAULT_ENCODING, errors="replace"))
    return "".join(parts)

