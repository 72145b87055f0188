"""A fuzz target of the stream layer's compiled twin that reads many values at once (``texts_typed``, the C of
``codec/stream/values.c``): ``replwire fuzz --target replwire.codec.stream.fuzz:fuzz_texts``, which
``make fuzz-compiled`` runs under ASan and UBSan.

An input is a form byte, a flags byte, then the values, separated by NUL bytes: a value that is one byte 0xff
is a null.  The flags pick the array's offset (the first values left out) and, for decimal128, a precision
and scale (some of them invalid, which must be refused with ``ValueError``).  Invariant: ``texts_typed``
reads every value or declines (None), never touching memory outside its buffers (the sanitizers' part), and
what it gives has the layout of its form: a validity bitmap exactly where a value is null, a values buffer
of the form's width per value (for variable-width forms int32 offsets that rise from 0 to the text's
length).  Whether the values are right is the differential tests' part (tests/spark/test_column_texts.py,
against the values read one by one).
"""

from __future__ import annotations

from array import array

from ..wire.fast import COMPILED
from ..wire.gen.text_forms import FORMS

__all__ = ["SEEDS", "fuzz_texts"]

_WIDTH = {"int16": 2, "int32": 4, "int64": 8, "float32": 4, "float64": 8, "date32": 4, "timestamp": 8,
          "timestamptz": 8, "decimal128": 16}
_NAMES = {number: name for name, number in FORMS.items()}

#: Seeds: each form with values in its form, near misses, and a null.
SEEDS = [bytes([FORMS[form], flags]) + b"\0".join(values) for form, flags, values in [
    ("int16", 0, [b"1", b"-32768", b"\xff", b"32768"]), ("int32", 1, [b"7", b"-2147483648", b"12"]),
    ("int64", 0, [b"-9223372036854775808", b"9223372036854775807", b"007"]),
    ("float32", 0, [b"1.5", b"NaN", b"-Infinity", b"3.4028235e+38"]), ("float64", 0, [b"0.1", b"1e-400", b"-0"]),
    ("bool", 2, [b"t", b"f", b"\xff", b"t"]), ("date32", 0, [b"2024-02-29", b"0001-01-01", b"9999-12-31"]),
    ("timestamp", 0, [b"2024-01-01 00:00:37.123456", b"1970-01-01 00:00:00"]),
    ("timestamptz", 0, [b"2024-01-01 00:00:01.25-07", b"0001-01-01 00:00:00+00", b"2024-01-01 00:00:01+05:30"]),
    ("decimal128", 0x52, [b"79.19", b"-0.50", b"00012.3", b"\xff"]), ("hex_bytes", 0, [b"\\x00ff", b"\\x", b"\xff"]),
    ("interval", 0, [b"1 year 2 mons 3 days 04:05:06.789", b"-00:00:00.5", b"00:00:00"])]]


def fuzz_texts(data: bytes) -> None:
    if len(data) < 2 or COMPILED is None:
        return
    form, flags, body = data[0], data[1], data[2:]
    items = body.split(b"\0")
    skip = flags & 3 if len(items) > (flags & 3) else 0
    offsets, text, validity = array("i", [0]), bytearray(), bytearray(len(items) // 8 + 1)
    for i, item in enumerate(items):
        if item != b"\xff":
            validity[i // 8] |= 1 << (i % 8)
            text += item
        offsets.append(len(text))
    count = len(items) - skip
    precision, scale = (flags >> 2) % 40, (flags >> 6) * 3 % 40
    try:
        made = COMPILED.texts_typed(form, count, skip, bytes(validity), offsets.tobytes(), bytes(text),
                                    precision, scale)
    except ValueError:
        name = _NAMES.get(form)
        if name is None or (name == "decimal128" and not (1 <= precision <= 38 and 0 <= scale <= precision)):
            return  # refused as it must be
        raise
    if made is None:
        return
    name = _NAMES[form]  # (any other form is refused above)
    valid, values, variable = made
    nulls = [items[skip + i] == b"\xff" for i in range(count)]
    if (valid is None) != (not any(nulls)):
        raise AssertionError(f"validity {valid!r} for nulls {nulls}")
    if valid is not None and [not valid[i // 8] >> (i % 8) & 1 for i in range(count)] != nulls:
        raise AssertionError(f"validity {valid!r} for nulls {nulls}")
    if name == "bool":
        expected = (count + 7) // 8
    elif name in _WIDTH:
        expected = count * _WIDTH[name]
    else:
        expected = (count + 1) * 4
        ends = array("i", values)
        if variable is None or ends[0] != 0 or ends[-1] != len(variable) or list(ends) != sorted(ends):
            raise AssertionError(f"offsets {list(ends)} for {len(variable or b'')} bytes")
    if len(values) != expected or (variable is not None) != (name not in _WIDTH and name != "bool"):
        raise AssertionError(f"{name}: {len(values)} value bytes for {count} values")
