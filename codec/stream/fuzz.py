"""Fuzz targets of the stream layer's compiled twins: the one that reads many values at once (``texts_typed``, the
C of ``codec/stream/values.c``), ``replwire fuzz --target replwire.codec.stream.fuzz:fuzz_texts``; and the JSON
row writer's text in each client encoding it reads (``rows_row``, the C of ``codec/stream/jsonl.c``),
``replwire fuzz --target replwire.codec.stream.fuzz:fuzz_strings``; ``make fuzz-compiled`` runs both under ASan
and UBSan.  Any bytes are an input of either (both start from :data:`SEEDS`).

An input is a form byte, a flags byte, then the values, separated by NUL bytes: a value that is one byte 0xff
is a null.  The flags pick the array's offset (the first values left out) and, for decimal128, a precision
and scale (some of them invalid, which must be refused with ``ValueError``).  Invariant: ``texts_typed``
reads every value or declines (None), never touching memory outside its buffers (the sanitizers' part), and
what it gives has the layout of its form: a validity bitmap exactly where a value is null, a values buffer
of the form's width per value (for variable-width forms int32 offsets that rise from 0 to the text's
length).  Whether the values are right is the differential tests' part (tests/spark/test_column_texts.py,
against the values read one by one).

``fuzz_strings``: the first byte picks the plan's encoding (``row_ways.ENCODINGS``: UTF-8, LATIN1, SQL_ASCII
as escapes, SQL_ASCII as surrogates), the rest is one text, written by ``rows_row`` as a text column, a binary
text, a binary jsonb and (in a row of its own) inside an array.  Invariant: the three are exactly the JSON
string the Python writer writes of the text decoded in that encoding (``json.encoder.encode_basestring``, a
SQL_ASCII text's surrogates as the JSON escapes or as themselves), or, only where the text is not valid UTF-8
in a UTF-8 plan, the row is declined (None); the array's row is declined or a JSON list.
"""

from __future__ import annotations

import json
from array import array

from ...schema.encodings import SQL_ASCII, UTF8
from ..messages import TupleColumn
from ..wire.fast import COMPILED
from ..wire.gen.row_ways import ARRAY, BINARY_WAYS, ENCODINGS, TEXT_WAYS
from ..wire.gen.text_forms import FORMS

__all__ = ["SEEDS", "STRING_SEEDS", "fuzz_strings", "fuzz_texts"]

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
#: fuzz_strings' own inputs (the fuzzer starts it from :data:`SEEDS`, inputs of it too): each encoding, with
#: every byte 0x80-0xff, escapes, and an array's quoting.
STRING_SEEDS = [bytes([encoding]) + text for encoding in ENCODINGS.values() for text in (
    b"caf\xe9 \"q\" \\ \x01\x1f\x7f", bytes(range(0x80, 0x100)), b'\xe9t\xe9,"a \\"b\\" \\\\ \xff",NULL',
    "crème brûlée".encode())]


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


#: fuzz_strings' codecs, by plan encoding; its plans (a text, a binary text and a binary jsonb; an array of text).
_CODECS = {ENCODINGS["utf8"]: UTF8, ENCODINGS["latin1"]: "iso8859-1", ENCODINGS["sql_ascii"]: SQL_ASCII,
           ENCODINGS["sql_ascii_surrogates"]: SQL_ASCII}


def _string_plans() -> dict[int, tuple[object, object]]:
    if COMPILED is None:
        return {}

    def call(data: bytes) -> str:
        raise ValueError("a value the plan writes in C")

    text = (b'"s":', TEXT_WAYS["string"], True, call, "s")
    binary = (b'"b":', TEXT_WAYS["string"], False, call, "b", BINARY_WAYS["text"])
    jsonb = (b'"j":', TEXT_WAYS["string"], False, call, "j", BINARY_WAYS["jsonb"])
    array_of = (b'"a":', ARRAY + TEXT_WAYS["string"], False, call, "a")
    return {encoding: (COMPILED.rows_plan((b"", b"", b""), (text, binary, jsonb), encoding),
                       COMPILED.rows_plan((b"", b"", b""), (array_of,), encoding)) for encoding in _CODECS}


_STRING_PLANS = _string_plans()
_STRING = json.encoder.encode_basestring  # (what the Python writer writes a str with)


def fuzz_strings(data: bytes) -> None:
    if not data or COMPILED is None:
        return
    encoding, text = data[0] % len(_CODECS), data[1:]
    strings, arrays = _STRING_PLANS[encoding]
    row = [TupleColumn(kind="t", data=text), TupleColumn(kind="b", data=text), TupleColumn(kind="b", data=b"\1" + text)]
    got = COMPILED.rows_row(strings, row, False, None)
    try:
        value = _STRING(text.decode(_CODECS[encoding]))
    except UnicodeDecodeError:
        if got is not None:
            raise AssertionError(f"{text!r} is no UTF-8, and rows_row wrote {got!r}") from None
    else:
        if encoding == ENCODINGS["sql_ascii"]:  # the surrogates as the escapes a line's bytes hold
            value = value.encode("utf-8", "backslashreplace").decode("ascii")
        if got != f'{{"s":{value},"b":{value},"j":{value}}}':
            raise AssertionError(f"{text!r} in encoding {encoding}: {got!r}, the Python writer's {value!r}")
    listed = COMPILED.rows_row(arrays, [TupleColumn(kind="t", data=b"{" + text + b"}")], False, None)
    if listed is not None and not isinstance(json.loads(listed)["a"], list):
        raise AssertionError(f"{text!r} as an array: {listed!r}")
