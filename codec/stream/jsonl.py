"""Committed changes as JSON objects: what ``replwire decode`` prints, one per line.

Strategy: one object per change of a committed transaction (and per non-transactional logical message),
with the keys the command line promises: ``op``, ``schema``, ``table``, ``xid``, ``lsn``, ``commit_lsn``,
``commit_time``, ``new``/``old``/``key`` and ``unchanged_toast``; a truncate is one object per truncated
table, with its ``schema``/``table``, ``relations`` (every table the one TRUNCATE emptied), ``cascade`` and
``restart_identity``.  ``xid`` is the top-level transaction's xid,
whichever subtransaction made the change; a change of a streamed transaction also has ``subxid``, the xid of
the (sub)transaction that made it as the server sent it (the top-level xid for the transaction's own changes),
and a two-phase transaction's changes have ``gid``.  Values become typed JSON without losing
anything, in text and binary mode alike:

* integers as numbers; ``numeric`` as exact strings in the server's plain form (scale kept: ``"1.10"``,
  ``"0.0000001000"``; ``"NaN"``, ``"Infinity"``, ``"-Infinity"``); floats as numbers that read back as the
  same float (``-0.0`` kept), ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` as strings; booleans;
* dates, times and timestamps in ISO 8601 (timestamptz in UTC), and where ISO's years cannot say it the
  server's own text: ``"infinity"``, BC dates and years past 9999 (``"4713-01-01 BC"``, ``"10000-01-01
  00:00:00+00"``; in binary mode written as the server writes them, a timestamptz in UTC);
* ``interval`` as the ISO 8601 duration PostgreSQL writes under ``intervalstyle = iso_8601``, months, days
  and time kept apart (``"P1M"``, ``"P30D"``, ``"PT720H"``, ``"P-1M30D"``, ``"P1M1DT1H0.5S"``;
  :class:`~replwire.codec.stream.value_types.Interval`);
* ``json``/``jsonb`` as a JSON *string* holding the server's JSON text, unchanged (no number rounded, key
  order and duplicate keys of ``json`` kept): JSON ``null`` is ``"null"``, SQL NULL is ``null``;
* ranges and multiranges as the server's text (``"(,11)"``, ``"[\\"2026-01-01 00:00:00+00\\",)"``), in
  binary mode written as range_out writes them (a timestamptz bound in UTC);
* ``money`` as the server's text in text mode (``"$1,234.56"``, its form depends on the server's
  ``lc_monetary``, which the stream does not carry) and in binary mode as the integer the server sends, the
  amount in the currency's smallest unit (``123456``: cents under most locales);
* ``bytea`` as ``\\x`` hex, arrays as lists, everything else as the server's text.

An unchanged TOASTed column is left out of ``new`` and named in ``unchanged_toast`` -- never written as null.
"""

from __future__ import annotations

import binascii
import collections
import datetime as dt
import decimal
import functools
import ipaddress
import json
import math
import re
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from ...schema.capture import BACKFILL_PREFIX
from ...schema.encodings import SQL_ASCII, UTF8, text_codec
from ..messages import Begin, Commit, Delete, Insert, Update
from ..scalars import LSN
from ..wire.fast import COMPILED
from ..wire.gen import row_ways
from ..wire.gen.row_ways import ENCODINGS
from .assembler import Assembler, Change, ChangeMaker, Rendered, Transaction
from .decoder import IDLE, STREAM, Decoder
from .server_text import server_text
from .value_types import (
    UNCHANGED_TOAST,
    Infinite,
    Interval,
    JsonText,
    RawValue,
    float4,
    interval_binary,
    interval_iso,
    interval_parts,
)
from .values import RowSchema, ValueLoader


def json_value(value: Any) -> Any:
    """A typed value as a JSON-ready value (see the module docstring)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, decimal.Decimal):  # numeric's own text: plain digits, the scale kept
        return format(value, "f") if value.is_finite() else {"NaN": "NaN", "Infinity": "Infinity",
                                                              "-Infinity": "-Infinity"}.get(str(value), str(value))
    if isinstance(value, (JsonText, Interval)):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Infinite):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, RawValue):
        return str(value)
    if isinstance(value, (uuid.UUID, ipaddress.IPv4Address, ipaddress.IPv6Address, ipaddress.IPv4Network,
                          ipaddress.IPv6Network, ipaddress.IPv4Interface, ipaddress.IPv6Interface)):
        return str(value)
    if isinstance(value, dt.timedelta):
        return _duration(value)
    if hasattr(value, "obj") and type(value).__name__ in ("Json", "Jsonb"):  # psycopg wrappers
        return ENCODE(value.obj)
    text = server_text(value)  # a range or multirange
    return text if text is not None else str(value)


def _duration(value: dt.timedelta) -> str:
    """ISO 8601 duration of a ``timedelta`` as its days and time (what PostgreSQL's ISO 8601 style writes of
    an interval of those days and microseconds)."""
    return str(Interval(0, value.days, value.seconds * 1_000_000 + value.microseconds))


def _row(values: dict[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    # str, int and None (most values) are their own JSON value: skip the call
    return {name: json_value(v) for name, v in values.items() if v is not UNCHANGED_TOAST}


#: How a JSON object of typed values is written: compact, UTF-8 kept (what ``RowJson`` reproduces).
ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_STRING = json.encoder.encode_basestring  # what ENCODE writes a str with (ensure_ascii=False)


def _value_encoder() -> Callable[[Any], str]:
    """``ENCODE`` for the JSON-ready values :func:`json_value` gives, without ``JSONEncoder.encode``'s set-up
    on every call: CPython's C encoder, made once with ENCODE's options (no check for cycles: typed values
    hold none); plain ``ENCODE`` where there is no C encoder."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return ENCODE
    encoder = make(None, json.JSONEncoder().default, _STRING, None, ":", ",", False, False, True)
    return lambda value: "".join(encoder(value, 0))


_encode = _value_encoder()
#: The classes :func:`json_value` gives back unchanged, so ``_encode`` takes them as they are.
_OWN_JSON = frozenset((str, int, bool, type(None)))
#: Element types whose arrays load as lists of :data:`_OWN_JSON` values (and None): text types, integers, bool.
_OWN_JSON_ELEMENTS = frozenset((25, 1043, 1042, 19, 20, 21, 23, 16))

# Text-format ('t') columns RowJson writes without the typed value, by the OID their type resolves to: as a
# JSON string of the text (text types, and types kept as text), or as the integer.
#: text, varchar, bpchar, name; json, jsonb (the server's JSON text, as a string); the built-in ranges and
#: multiranges (the server's text: int4, num, ts, tstz, date, int8); None: kept as text
_STRING_OIDS = frozenset((25, 1043, 1042, 19, 114, 3802, 3904, 3906, 3908, 3910, 3912, 3926, 4451, 4532, 4533,
                          4534, 4535, 4536, None))
_INTEGER_OIDS = frozenset((20, 21, 23))  # int8, int2, int4

_DATE_TEXT = re.compile(rb"\d{4}-\d{2}-\d{2}")
_TIME_TEXT = re.compile(rb"\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?")
_TIMESTAMP_TEXT = re.compile(rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?")
_TIMESTAMPTZ_TEXT = re.compile(rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?[+-]\d{2}(?::\d{2}){0,2}")
#: numeric_out's text of a finite value, which Decimal's plain form (format "f") writes back the same
_NUMERIC_TEXT = re.compile(rb"-?(?:0|[1-9]\d*)(?:\.\d+)?")
_UTC = dt.timezone.utc
#: uuid_out's text: what ``str()`` of the UUID writes
_UUID_TEXT = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


#: The bytes of the float texts written from the text (the C writer's too): what float() reads as psycopg's
#: loader does (no spaces, no underscores)
_FLOAT_BYTES = b"0123456789.+-eENaIinfty"


#: float_out's words, as the typed value's JSON
_FLOAT_WORDS = {b"NaN": '"NaN"', b"Infinity": '"Infinity"', b"-Infinity": '"-Infinity"'}


def _float_text(data: bytes) -> str | None:
    if data.translate(None, _FLOAT_BYTES):
        return None  # (float() takes spaces and underscores, psycopg's loader does not: the typed value)
    value = float(data)
    if value - value == 0.0:  # finite
        return repr(value)
    word = _FLOAT_WORDS.get(data)
    if word is not None:
        return word
    if math.isinf(value) and data.lstrip(b" +-")[:1] not in (b"I", b"i"):
        return None  # a number past the double's range: psycopg's loader fails on it, the typed value is the text
    return _STRING(json_value(value))


def _numeric_text(data: bytes) -> str | None:
    if _NUMERIC_TEXT.fullmatch(data):  # numeric_out's plain form: the JSON string of the same text
        return '"' + data.decode("ascii") + '"'
    return _STRING(json_value(decimal.Decimal(data.decode("ascii"))))


def _uuid_text(data: bytes) -> str | None:
    if _UUID_TEXT.fullmatch(data) is not None:  # uuid_out's form: what str() of the UUID writes back
        return '"' + data.decode("ascii") + '"'
    text = data.decode("ascii")
    return _STRING(text) if len(text) == 36 and text == str(uuid.UUID(text)) else None


# (a column of dates or intervals holds few distinct values: each one's JSON is remembered)
@functools.lru_cache(maxsize=4096)
def _date_text(data: bytes) -> str | None:
    return _STRING(dt.date.fromisoformat(data.decode("ascii")).isoformat()) if _DATE_TEXT.fullmatch(data) else None


def _time_text(data: bytes) -> str | None:
    return _STRING(dt.time.fromisoformat(data.decode("ascii")).isoformat()) if _TIME_TEXT.fullmatch(data) else None


def _timestamp_text(data: bytes) -> str | None:
    if _TIMESTAMP_WHOLE(data) is not None:  # (the commonest: whole seconds, a day every month has)
        return '"' + data.replace(b" ", b"T").decode("ascii") + '"'
    match = _TIMESTAMP_PLAIN.fullmatch(data)
    if match is not None and _real_day(match[1]):  # (a real date and time: what fromisoformat would say)
        if match[2] is None:  # whole seconds: the text with a T
            return '"' + data.replace(b" ", b"T").decode("ascii") + '"'
        return '"' + _iso_timestamp(data.decode("ascii")) + '"'
    if not _TIMESTAMP_TEXT.fullmatch(data):
        return None
    text = data.decode("ascii")
    dt.datetime.fromisoformat(text)  # (a real date and time, or ValueError)
    return '"' + _iso_timestamp(text) + '"'


def _timestamptz_text(data: bytes) -> str | None:
    if _UTC_OFFSET_READS:
        # in UTC, whole seconds, a day every month has (the commonest): the text with a T, and the offset as
        # isoformat writes it
        if _TIMESTAMPTZ_WHOLE(data) is not None:
            return '"' + data.replace(b" ", b"T").decode("ascii") + ':00"'
        match = _TIMESTAMPTZ_UTC.fullmatch(data)
        if match is not None and _real_day(match[1]):  # in UTC, a real date and time
            if match[2] is None:
                return '"' + data.replace(b" ", b"T").decode("ascii") + ':00"'
            return '"' + _iso_timestamp(data[:-3].decode("ascii")) + '+00:00"'
    if not _TIMESTAMPTZ_TEXT.fullmatch(data):
        return None
    text = data.decode("ascii")
    value = dt.datetime.fromisoformat(text)
    if text.endswith("+00"):  # in UTC already (a server whose TimeZone is UTC)
        return '"' + _iso_timestamp(text[:-3]) + '+00:00"'
    return _STRING(value.astimezone(_UTC).isoformat())


#: A timestamp's text (and a timestamptz's in UTC) whose time fromisoformat takes wherever its date is real
#: (hours to 23, minutes and seconds to 59; a fraction of 1 to 6 digits, where this Python reads every such
#: fraction): the date, and the fraction if any.
def _reads_fractions() -> bool:
    try:
        return all(dt.datetime.fromisoformat("2000-01-01 00:00:00." + "1" * k).microsecond for k in range(1, 7))
    except ValueError:  # (Python 3.10 reads 3 or 6 digits only)
        return False


_FRACTION = rb"(\.\d{1,6})?" if _reads_fractions() else rb"(\.(?!))?"
_CLOCK = rb"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d"
_TIMESTAMP_PLAIN = re.compile(rb"(\d{4}-\d{2}-\d{2}) " + _CLOCK + _FRACTION)
_TIMESTAMPTZ_UTC = re.compile(rb"(\d{4}-\d{2}-\d{2}) " + _CLOCK + _FRACTION + rb"\+00")
#: Of those, the ones of whole seconds on a date every month has (years 1 to 9999, days to the 28th), which
#: fromisoformat reads without a look at the date.
_EVERY_MONTH_DAY = rb"(?!0000)\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8]) "
_TIMESTAMP_WHOLE = re.compile(_EVERY_MONTH_DAY + _CLOCK).fullmatch
_TIMESTAMPTZ_WHOLE = re.compile(_EVERY_MONTH_DAY + _CLOCK + rb"\+00").fullmatch


def _reads_utc_offset() -> bool:
    try:
        return dt.datetime.fromisoformat("2000-01-01 00:00:00+00").utcoffset() == dt.timedelta(0)
    except ValueError:
        return False


_UTC_OFFSET_READS = _reads_utc_offset()
_REAL_DAYS: dict[bytes, bool] = {}


def _real_day(day: bytes) -> bool:
    """Whether fromisoformat reads the date ``day`` (``YYYY-MM-DD``) with a time: a real date."""
    real = _REAL_DAYS.get(day)
    if real is None:
        try:
            dt.datetime.fromisoformat(day.decode("ascii") + " 00:00:00")
            real = True
        except ValueError:
            real = False
        if len(_REAL_DAYS) > 65536:
            _REAL_DAYS.clear()
        _REAL_DAYS[day] = real
    return real


def _iso_timestamp(text: str) -> str:
    """``datetime.isoformat()`` of the timestamp ``text`` (``YYYY-MM-DD HH:MM:SS[.f]``, a real date and time)
    written from the text: ``T`` between date and time, and the fraction in microseconds (none if zero)."""
    fraction = text[19:]
    return text[:10] + "T" + text[11:19] + (fraction.ljust(7, "0") if fraction.strip(".0") else "")


def _bytea_text(data: bytes) -> str | None:
    if data[:2] != b"\\x":
        return None
    return '"\\\\x' + binascii.unhexlify(data[2:]).hex() + '"'  # (hex digits, lower case, need no escapes)


@functools.lru_cache(maxsize=4096)
def _interval_text(data: bytes) -> str | None:
    parts = interval_parts(data)
    return None if parts is None else '"' + interval_iso(*parts) + '"'  # (ISO text needs no escapes)


# Text-format ('t') columns RowJson writes from the text with one conversion, by the OID their type resolves to:
# each gives exactly the JSON text of the typed value (json_value of psycopg's value), or None where the text is
# not in the form the conversion is exact for (the typed value is written then).  bool is written inline.
_TEXT_CONVERSIONS: dict[int, Callable[[bytes], str | None]] = {
    700: _float_text, 701: _float_text, 1700: _numeric_text, 2950: _uuid_text, 1082: _date_text,
    1083: _time_text, 1114: _timestamp_text, 1184: _timestamptz_text, 17: _bytea_text, 1186: _interval_text,
}
_BOOL = 16


def _plain_string_array(data: bytes) -> str | None:
    """The JSON list of a one-dimensional array of strings (UTF-8) whose elements array_out writes bare
    and JSON writes without escapes, or NULL, as psycopg loads it; else None."""
    if _PLAIN_STRING_ARRAY(data) is None:
        return None
    text = '["' + data[1:-1].decode("utf-8").replace(",", '","') + '"]'
    return text.replace('"NULL"', "null") if b"NULL" in data else text  # (no element but a NULL is "NULL")


def _plain_integer_array(data: bytes) -> str | None:
    """The JSON list of a one-dimensional array of integers (or NULL) in array_out's form, as psycopg loads
    it (the same digits); else None."""
    if _PLAIN_INTEGER_ARRAY(data) is None:
        return None
    text = "[" + data[1:-1].decode("ascii") + "]"
    return text.replace("NULL", "null") if b"NULL" in data else text


#: Elements that need no quotes in array_out's text (no quote, backslash, brace, delimiter or white space)
#: and no escape in JSON (no control character): NULL (array_out's null element, what psycopg loads as None:
#: a string spelt so is quoted), or a string not spelt so in any case.
_STRING_ELEMENT = rb'(?:NULL|(?!(?i:null)[,}])[^"\\{},\x00-\x20]+)'
_PLAIN_STRING_ARRAY = re.compile(rb"\{" + _STRING_ELEMENT + rb"(?:," + _STRING_ELEMENT + rb")*\}").fullmatch
_INTEGER_ELEMENT = rb"(?:NULL|0|-?[1-9][0-9]{0,18})"
_PLAIN_INTEGER_ARRAY = re.compile(rb"\{" + _INTEGER_ELEMENT + rb"(?:," + _INTEGER_ELEMENT + rb")*\}").fullmatch
#: Arrays written from their text without psycopg, where the client encoding is UTF-8, by element OID.
_PLAIN_ARRAYS: dict[int, Callable[[bytes], str | None]] = {
    **dict.fromkeys((25, 1043, 1042, 19), _plain_string_array), **dict.fromkeys((20, 21, 23), _plain_integer_array)}
#: What a conversion raises where the text or bytes are not a value it reads (the typed value is written then).
_CONVERSION_FAILS = (ValueError, OverflowError, UnicodeDecodeError, decimal.InvalidOperation)


def _binary_integer(width: int) -> Callable[[bytes], str | None]:
    def integer(data: bytes) -> str | None:
        return str(int.from_bytes(data, "big", signed=True)) if len(data) == width else None
    return integer


def _binary_bool(data: bytes) -> str | None:
    return ("false" if data == b"\x00" else "true") if len(data) == 1 else None


def _binary_float8(data: bytes) -> str | None:
    value = _FLOAT8.unpack(data)[0] if len(data) == 8 else math.nan
    return repr(value) if math.isfinite(value) else None


def _binary_float4(data: bytes) -> str | None:
    value = float4(data) if len(data) == 4 else math.nan
    return repr(value) if math.isfinite(value) else None


def _binary_json(data: bytes, codec: str) -> str | None:
    return _STRING(data.decode(codec))


def _binary_jsonb(data: bytes, codec: str) -> str | None:
    return _STRING(data[1:].decode(codec)) if data[:1] == b"\x01" else None


def _binary_bytea(data: bytes) -> str | None:
    return '"\\\\x' + data.hex() + '"'  # (hex digits need no escapes)


@functools.lru_cache(maxsize=4096)
def _binary_date(data: bytes) -> str | None:
    if len(data) != 4:
        return None
    return '"' + (_DATE_EPOCH + dt.timedelta(days=int.from_bytes(data, "big", signed=True))).isoformat() + '"'


def _binary_timestamptz(data: bytes) -> str | None:
    if len(data) != 8:
        return None
    micro = int.from_bytes(data, "big", signed=True)  # since 2000-01-01 00:00 UTC: written as UTC
    return '"' + (_TIMESTAMP_EPOCH + dt.timedelta(microseconds=micro)).isoformat() + '+00:00"'


@functools.lru_cache(maxsize=4096)
def _binary_interval(data: bytes) -> str | None:
    return '"' + str(interval_binary(data)) + '"' if len(data) == 16 else None  # (ISO text needs no escapes)


_FLOAT8 = struct.Struct(">d")
_DATE_EPOCH = dt.date(2000, 1, 1)
_TIMESTAMP_EPOCH = dt.datetime(2000, 1, 1)  # (naive: its isoformat is half an aware one's)
# Binary ('b') columns RowJson writes with one conversion, by the OID their type resolves to: each gives exactly
# the JSON text of the typed value, or None (or raises ValueError or OverflowError) where it cannot say it
# exactly (a value of the wrong length, NaN, infinity, a date past year 9999: the typed value is written then).
# The text types' and json's take the client encoding too.
_BINARY_CONVERSIONS: dict[int, Callable[[bytes], str | None]] = {
    21: _binary_integer(2), 23: _binary_integer(4), 20: _binary_integer(8), 16: _binary_bool, 701: _binary_float8,
    700: _binary_float4, 17: _binary_bytea, 1082: _binary_date, 1184: _binary_timestamptz, 1186: _binary_interval,
}
_BINARY_TEXT_CONVERSIONS: dict[int, Callable[..., str | None]] = {
    **dict.fromkeys((25, 1043, 1042, 19, 114), _binary_json), 3802: _binary_jsonb,
}
#: The conversions of :data:`_TEXT_CONVERSIONS` the compiled row writer also does in C (for the text forms
#: the server prints; others through the conversion), by OID: how the plan names them (:data:`_WAYS`).
_COMPILED_CONVERSIONS = {1700: "numeric", 2950: "uuid", 17: "bytea", 1082: "date", 1083: "time", 1114: "timestamp",
                         1184: "timestamptz", 700: "float", 701: "float", 1186: "interval"}
#: The element types whose arrays the compiled row writer also writes in C (array_out's text, as the JSON list
#: of the typed elements), by element OID: the way each element goes (one of row_ways.ARRAY_ELEMENTS).
_COMPILED_ELEMENTS = {25: "string", 1043: "string", 1042: "string", 19: "string", 20: "int", 21: "int", 23: "int",
                      16: "bool", 1700: "numeric", 2950: "uuid", 700: "float", 701: "float"}


#: How the compiled row writer writes binary ('b') values, by the OID their type resolves to (``None``: a type
#: kept as its bytes, written as ``\\x`` hex): the types whose send function's bytes it reads (what
#: :class:`ValueLoader` loads them as, written as :func:`json_value` writes that); an array of these too.
_BINARY_WAYS = {oid: row_ways.BINARY_WAYS[name] for oid, name in {
    21: "int2", 23: "int4", 20: "int8", 16: "bool", 700: "float4", 701: "float8", 25: "text", 1043: "text",
    1042: "text", 19: "text", 114: "text", 3802: "jsonb", 17: "bytea", None: "bytea", 2950: "uuid", 1082: "date",
    1114: "timestamp", 1184: "timestamptz", 1083: "time", 1186: "interval", 1700: "numeric"}.items()}

#: The client encodings (Python codecs) whose text the compiled row writers write themselves, by the form they
#: write it in (:data:`~replwire.codec.wire.gen.row_ways.ENCODINGS`): UTF-8, LATIN1 (each byte one character,
#: U+0000-U+00FF) and SQL_ASCII (bytes 128-255 the surrogates U+DC80-U+DCFF).  The others (WIN1252, EUC_JP, ...)
#: are the Python writers'.
_COMPILED_ENCODINGS = {UTF8: "utf8", "iso8859-1": "latin1", SQL_ASCII: "sql_ascii"}


def compiled_rows(encoding: str) -> Any:
    """The compiled codec's module where it is in use and its row writers write text in ``encoding`` (a client
    encoding, as :func:`~replwire.schema.encodings.text_codec` takes it), else ``None``: the one place that says
    whether a stream's rows go the compiled way or the Python way."""
    return COMPILED if COMPILED is not None and text_codec(encoding) in _COMPILED_ENCODINGS else None


def plan_encoding(encoding: str, *, surrogates: bool = False) -> int:
    """What the compiled row writers are told text in ``encoding`` is (``rows_plan``'s and ``rows_run``'s
    ``encoding``): for lines of bytes, SQL_ASCII's surrogates as the JSON escapes a stream written with
    ``errors="backslashreplace"`` holds (:func:`line_bytes`); with ``surrogates``, as the bytes ``rows_row``
    decodes back into the same ``str`` the Python writer gives.  (Only for an encoding :func:`compiled_rows`
    takes.)"""
    name = _COMPILED_ENCODINGS[text_codec(encoding)]
    return ENCODINGS["sql_ascii_surrogates" if surrogates and name == "sql_ascii" else name]


def line_bytes(text: str) -> bytes:
    """The UTF-8 bytes of a line's ``text`` as the compiled row path writes them: what a UTF-8 stream written
    with ``errors="backslashreplace"`` (``replwire decode``'s standard output) holds of it -- the same bytes for
    any text of a stream in UTF-8 or LATIN1; a SQL_ASCII stream's surrogates U+DC80-U+DCFF as the JSON escapes
    ``\\udc80``-``\\udcff``."""
    return text.encode("utf-8", "backslashreplace")


class _Column(NamedTuple):
    """How :class:`RowJson` writes one column of a relation, its type's OID resolved once."""

    key: str  # the column's name as a JSON string, and ":"
    name: str
    is_key: bool
    way: str  # how its text-format values go (a name of :data:`_WAYS`)
    text: Callable[[bytes], str | None] | None  # a text value's JSON where it is in the usual form, else None
    rest: Callable[[bytes], str]  # a text value's JSON where ``text`` gives none (or there is no ``text``)
    call: Callable[[bytes], str]  # a text value's JSON: ``text``, else ``rest``
    binary: Callable[[bytes], str]  # a binary value's JSON
    binary_way: int  # how the compiled writer writes binary values (:data:`_BINARY_WAYS`, 0: not in C)
    element: int  # an array's element type (0: none the compiled writer writes)


def _first(conversion: Callable[[bytes], str | None], rest: Callable[[bytes], str]) -> Callable[[bytes], str]:
    """``conversion``'s text, and ``rest``'s where it gives None or fails on the value."""
    def write(data: bytes) -> str:
        try:
            text = conversion(data)
        except _CONVERSION_FAILS:
            text = None
        return text if text is not None else rest(data)
    return write


class _Absent:
    """The columns a tuple narrower than its relation lacks, as a row writer sees them: written not at all."""

    __slots__ = ()
    kind = None
    data = None


_ABSENT = _Absent()


def _fit(columns: Sequence[Any], width: int) -> list[Any]:
    """A tuple's ``columns`` as wide as its relation: the ones past it left out, the missing ones absent."""
    return [*columns[:width], *[_ABSENT] * (width - len(columns))]


class RowJson:
    """A tuple as JSON text straight from its wire columns: the same text as ``ENCODE`` of the typed row
    (:meth:`ValueLoader.load_row` then :func:`json_value`, unchanged TOAST left out), without the dict.

    Strategy: per :class:`RowSchema` (and key-only or not) a small function is written and compiled, one
    branch per column, each with the column's name already written as a JSON key, and the row joined at
    once; text, varchar, bpchar, name, json, jsonb, range, multirange, integer and bool columns in text
    format skip the typed value (the text is the value: a JSON string, the integer, true or false); float,
    numeric, uuid, date, time, timestamp(tz), bytea and interval text go through one conversion each that
    gives the same JSON text where the text has the server's usual form (:data:`_TEXT_CONVERSIONS`), arrays
    of text and integers through :data:`_PLAIN_ARRAYS`; everything else through the typed value.  Where the
    compiled codec is in use and writes text of the client encoding (:func:`compiled_rows`), its row writer
    (``rows_row``) writes the row from the same per-column plan (:meth:`plan_columns`) and hands back to the
    Python writer what it does not take.
    """

    def __init__(self, loader: ValueLoader | None = None) -> None:
        self.loader = loader or ValueLoader()
        self._writers: dict[tuple[int, bool], tuple[RowSchema, Callable[..., str]]] = {}
        self._bytes_writers: dict[tuple[int, bool], tuple[RowSchema, Callable[..., tuple[str, int]]]] = {}
        # the compiled row path's writer (``rows_row``), for the encodings it writes, and its plan per schema
        self._compiled = compiled_rows(self.loader.encoding)
        self._plans: dict[int, tuple[RowSchema, Any]] = {}

    def __call__(self, schema: RowSchema, columns: Sequence[Any], *, only_keys: bool = False,
                 toasted: list[str] | None = None) -> str:
        """The JSON object of ``columns`` (a tuple's wire columns); ``only_keys`` keeps the key columns.
        The names of the columns whose unchanged TOASTed value was not sent are appended to ``toasted``."""
        compiled = self._compiled
        if compiled is not None:  # the compiled writer takes the common case, else says None
            made = self._plans.get(id(schema))
            if made is None or made[0] is not schema:
                if len(self._plans) > 4096:
                    self._plans.clear()
                try:
                    plan = compiled.rows_plan((b"", b"", b""), self.plan_columns(schema, surrogates=True),
                                              plan_encoding(self.loader.encoding, surrogates=True))
                except UnicodeEncodeError:  # a name in no Unicode: the Python writer's
                    plan = None
                made = self._plans[id(schema)] = (schema, plan)
            if made[1] is not None:
                text: str | None = compiled.rows_row(made[1], columns, only_keys, toasted)
                if text is not None:
                    return text
        return self._python(schema, only_keys)(columns, toasted)

    def writers(self, schema: RowSchema) -> tuple[Callable[[Sequence[Any], list[str] | None], str],
                                                  Callable[[Sequence[Any], list[str] | None], str]]:
        """What calling this writes of ``schema``'s tuples as two functions of ``(columns, toasted)``: every
        column, and the key columns; without the look-ups of a call, for a writer of many tuples."""
        if self._compiled is None:
            return self._python(schema, False), self._python(schema, True)

        def row(columns: Sequence[Any], toasted: list[str] | None) -> str:
            return self(schema, columns, toasted=toasted)

        def keys(columns: Sequence[Any], toasted: list[str] | None) -> str:
            return self(schema, columns, only_keys=True, toasted=toasted)
        return row, keys

    def _python(self, schema: RowSchema, only_keys: bool) -> Callable[..., str]:
        """The Python writer of ``schema``'s tuples (:meth:`_writer`), made once."""
        cached = self._writers.get((id(schema), only_keys))
        if cached is None or cached[0] is not schema:
            if len(self._writers) > 4096:
                self._writers.clear()
            cached = self._writers[(id(schema), only_keys)] = (schema, self._writer(schema, only_keys))
        return cached[1]

    def plan_columns(self, schema: RowSchema, *, surrogates: bool = False
                     ) -> tuple[tuple[bytes, int, bool, Callable[[bytes], str], str, int, int], ...]:
        """How each column of ``schema`` is written, as the compiled row path's plans take them
        (``rows_plan``): the column's JSON key (its name as a JSON string and ``:``) in UTF-8 (a SQL_ASCII
        name's surrogates as :func:`line_bytes` writes them, or with ``surrogates`` as ``rows_row`` reads
        them: see :func:`plan_encoding`), the way its
        text-format values go as a number (:data:`_WAYS`: 1 a JSON string of the text, 2 the integer's text,
        3 true or false, 4 through the function, or one the compiled writer does itself where the text has
        the server's form and the function does otherwise), whether a key column, the function (a value's
        JSON from its text), the column's name, how its binary values go (:data:`_BINARY_WAYS`, 0: not in C)
        and, for an array, its element type's OID."""
        errors = "surrogatepass" if surrogates else "backslashreplace"
        return tuple((column.key.encode("utf-8", errors), _WAYS[column.way], column.is_key, column.call, column.name,
                      column.binary_way, column.element) for column in self._plan(schema)[0])

    def _plan(self, schema: RowSchema) -> tuple[list[_Column], Callable[[str, bytes, int], str]]:
        """How each column of ``schema`` is written (:class:`_Column`), and the JSON of column ``i``'s typed
        value from its kind and bytes (``typed(kind, data, i)``)."""
        loader = self.loader
        types = [(meta.type_id, type_message) for meta, type_message in zip(schema.relation.columns, schema.types)]
        oids = [loader.resolve(*column) for column in types]
        elements = [loader.array_element(oid) if oid is not None else None for oid in oids]

        def typed(kind: str, data: bytes, i: int) -> str:
            value = loader.load(kind, data, *types[i])
            # (arrays of values that are their own JSON, a list of lists if multi-dimensional, skip json_value)
            if value.__class__ in _OWN_JSON or (value.__class__ is list and elements[i] in _OWN_JSON_ELEMENTS):
                return _encode(value)
            return _encode(json_value(value))

        def array(oid: int, i: int) -> Callable[[bytes], str]:
            # an array of text, integers or bool straight from psycopg's array loader (its list is its own
            # JSON), without ValueLoader.load's cases for other types; psycopg imported at the first such
            # value (the plain arrays are written without it)
            def write(data: bytes) -> str:
                array_loader = loader.text_loader(oid)
                try:
                    value = array_loader.load(data)
                except Exception:  # noqa: BLE001 - a value psycopg refuses: the typed value keeps it whole
                    return typed("t", data, i)
                return _encode(value) if value.__class__ is list else typed("t", data, i)
            return write

        out = []
        for i, (meta, oid, element) in enumerate(zip(schema.relation.columns, oids, elements)):
            made_of = loader.kind_of(oid) if oid is not None else None
            array_of = made_of[1] if made_of is not None and made_of[0] == "array" else None
            way = ("string" if oid in _STRING_OIDS else "int" if oid in _INTEGER_OIDS else "bool" if oid == _BOOL
                   else _COMPILED_CONVERSIONS.get(oid, "call") if oid is not None else "call")
            if way == "call" and array_of in _COMPILED_ELEMENTS:
                way = "array of " + _COMPILED_ELEMENTS[array_of]
            text: Callable[[bytes], str | None] | None = None
            rest: Callable[[bytes], str] = functools.partial(typed, "t", i=i)
            if oid is not None and oid in _TEXT_CONVERSIONS:
                text = _TEXT_CONVERSIONS[oid]
            elif oid is not None and element in _OWN_JSON_ELEMENTS:
                text = _PLAIN_ARRAYS.get(element) if loader.encoding == UTF8 else None
                rest = array(oid, i)
            conversion = _BINARY_CONVERSIONS.get(oid) if oid is not None else None
            if oid in _BINARY_TEXT_CONVERSIONS:
                conversion = functools.partial(_BINARY_TEXT_CONVERSIONS[oid], codec=loader.encoding)
            typed_binary = functools.partial(typed, "b", i=i)
            binary_way, element_oid = _BINARY_WAYS.get(oid, 0), 0
            if not binary_way and array_of is not None and array_of in _BINARY_WAYS:
                binary_way, element_oid = row_ways.BINARY_ARRAY + _BINARY_WAYS[array_of], array_of
            out.append(_Column(_STRING(meta.name) + ":", meta.name, bool(meta.flags & 1), way, text, rest,
                               _first(text, rest) if text is not None else rest,
                               _first(conversion, typed_binary) if conversion is not None else typed_binary,
                               binary_way, element_oid))
        return out, typed

    def _writer(self, schema: RowSchema, only_keys: bool) -> Callable[..., str]:
        """The function that writes a tuple of ``schema`` (``only_keys``: its key columns): every column's
        JSON into a local of its own, then the object joined at once -- without the columns whose value is
        an unchanged TOASTed one (named in ``toasted``) or absent (a tuple narrower than its relation)."""
        plan, typed = self._plan(schema)
        kept = [i for i, column in enumerate(plan) if column.is_key or not only_keys]
        namespace: dict[str, Any] = {"_string": _STRING, "_FAILS": _CONVERSION_FAILS, "_fit": _fit, "_typed": typed,
                                     "_keys": tuple(plan[i].key for i in kept)}
        if not kept:
            lines = ["def write(columns, toasted):", "    return '{}'"]
        else:
            width = len(plan)
            lines = ["def write(columns, toasted):",
                     f"    if len(columns) != {width}: columns = _fit(columns, {width})",
                     "    " + "".join(f"c{i}, " if i in kept else "_, " for i in range(width)) + "= columns",
                     "    u = False"]
            for i in kept:
                column = plan[i]
                c = f"c{i}"
                namespace[f"_t{i}"], namespace[f"_r{i}"] = column.text, column.rest
                namespace[f"_c{i}"], namespace[f"_b{i}"] = column.call, column.binary
                lines += [f"    k = {c}.kind", "    if k == 't':",
                          *("        " + line for line in _text_lines(column, i, self.loader.encoding, f"{c}.data")),
                          f"    elif k == 'n': v{i} = 'null'",
                          f"    elif k == 'b': v{i} = _b{i}({c}.data)",
                          "    elif k == 'u':",
                          f"        v{i} = None",
                          "        u = True",
                          f"        if toasted is not None: toasted.append({column.name!r})",
                          "    elif k is None:",
                          f"        v{i} = None",
                          "        u = True",
                          f"    else: v{i} = _typed(k, {c}.data, {i})"]
            lines += _object_lines(plan, kept, "")
        return _compiled(lines, namespace)

    def bytes_writer(self, schema: RowSchema, only_keys: bool) -> Callable[[bytes, int, list[str] | None],
                                                                            tuple[str, int]]:
        """What calling this writes of a tuple of ``schema``, read from a message's bytes: a function of the
        bytes, the offset of the tuple's column count and ``toasted``, that gives the JSON and the offset
        after the tuple -- past the bytes' end where a length says so: the caller checks that the message
        ends there.  It raises :class:`Declined` where the tuple is not one of the relation's width in the
        server's form, IndexError where the bytes end inside it (the parsed message's way writes it then).
        Made once per schema."""
        cached = self._bytes_writers.get((id(schema), only_keys))
        if cached is None or cached[0] is not schema:
            if len(self._bytes_writers) > 4096:
                self._bytes_writers.clear()
            cached = self._bytes_writers[(id(schema), only_keys)] = (schema,
                                                                     self._bytes_writer(schema, only_keys))
        return cached[1]

    def _bytes_writer(self, schema: RowSchema, only_keys: bool) -> Callable[..., tuple[str, int]]:
        """:meth:`_writer` reading the columns from the bytes (see :meth:`bytes_writer`)."""
        plan, typed = self._plan(schema)
        width = len(plan)
        kept = [i for i, column in enumerate(plan) if column.is_key or not only_keys]
        namespace: dict[str, Any] = {"_string": _STRING, "_FAILS": _CONVERSION_FAILS, "_typed": typed,
                                     "_keys": tuple(plan[i].key for i in kept), "_Declined": Declined,
                                     "_count": _COUNT, "_length": _LENGTH}
        lines = ["def write(data, p, toasted):",
                 f"    if _count(data, p)[0] != {width}: raise _Declined",
                 "    p += 2",
                 "    u = False"]
        for i, column in enumerate(plan):
            if i not in kept:  # (passed over)
                lines += ["    k = data[p]",
                          "    if k == 116 or k == 98: p += 5 + _length(data, p + 1)[0]",
                          "    elif k == 110 or k == 117: p += 1",
                          "    else: raise _Declined"]
                continue
            namespace[f"_t{i}"], namespace[f"_r{i}"] = column.text, column.rest
            namespace[f"_c{i}"], namespace[f"_b{i}"] = column.call, column.binary
            # (a length past the end leaves p past it: the caller's check of the end, or the next column's
            # read, gives up on the tuple)
            lines += ["    k = data[p]",
                      "    if k == 116:",
                      "        q = p + 5 + _length(data, p + 1)[0]",
                      "        s = data[p + 5:q]",
                      "        p = q",
                      *("        " + line for line in _text_lines(column, i, self.loader.encoding, "s")),
                      "    elif k == 110:",
                      f"        v{i} = 'null'",
                      "        p += 1",
                      "    elif k == 98:",
                      "        q = p + 5 + _length(data, p + 1)[0]",
                      f"        v{i} = _b{i}(data[p + 5:q])",
                      "        p = q",
                      "    elif k == 117:",
                      f"        v{i} = None",
                      "        u = True",
                      "        p += 1",
                      f"        if toasted is not None: toasted.append({column.name!r})",
                      "    else: raise _Declined"]
        lines += _object_lines(plan, kept, ", p") if kept else ["    return '{}', p"]
        return _compiled(lines, namespace)


def _object_lines(plan: Sequence[_Column], kept: list[int], more: str) -> list[str]:
    """The end of a generated row writer: the object of the kept columns' values ``v<i>`` joined at once
    (without those left ``None``, unchanged TOASTed ones, when ``u`` says there are some), returned with
    ``more`` after it."""
    values = "".join(f"v{i}, " for i in kept)
    joined = []
    for n, i in enumerate(kept):
        joined += [repr(("{" if n == 0 else ",") + plan[i].key), f"v{i}"]
    return ["    if u: return '{' + ','.join([key + value for key, value in zip(_keys, (" + values +
            ")) if value is not None]) + '}'" + more,
            "    return ''.join((" + ", ".join(joined) + ", '}'))" + more]


def _compiled(lines: list[str], namespace: dict[str, Any]) -> Callable[..., Any]:
    """The function ``write`` the source ``lines`` define, run in ``namespace``."""
    source = "\n".join(lines)
    code = _WRITER_CODE.get(source)
    if code is None:  # (a stream that sends its Relations again, every stream block, writes the same source)
        if len(_WRITER_CODE) > 1024:
            _WRITER_CODE.clear()
        code = _WRITER_CODE[source] = compile(source, "<replwire.codec.stream.jsonl: row writer>", "exec")
    exec(code, namespace)  # noqa: S102
    write: Callable[..., Any] = namespace["write"]
    return write


class Declined(Exception):  # noqa: N818 - not an error: the way back to the parsed messages
    """What a bytes writer (:meth:`RowJson.bytes_writer`) or :meth:`JsonLines.plain` leaves to the way through
    parsed messages."""


_COUNT = struct.Struct(">H").unpack_from
_LENGTH = struct.Struct(">L").unpack_from


def _text_lines(column: _Column, i: int, encoding: str, data: str) -> list[str]:
    """The statements of a row writer that put the JSON of its column ``i``'s text value (the bytes ``data``,
    an expression) into ``v{i}``: the text as it is for the ways that need nothing else, ``text`` without a
    call around it."""
    v = f"v{i}"
    if column.way == "string":
        return [f"{v} = _string({data}.decode({encoding!r}))"]
    if column.way == "int":
        return [f"{v} = str(int({data}))"]
    if column.way == "bool":
        return [f"d = {data}", f"{v} = 'true' if d == b't' else 'false' if d == b'f' else _c{i}(d)"]
    if column.text is not None:
        return [f"d = {data}", f"try: {v} = _t{i}(d)", f"except _FAILS: {v} = None",
                f"if {v} is None: {v} = _r{i}(d)"]
    return [f"{v} = _c{i}({data})"]


#: The row writers' sources compiled so far: the code of each (what it refers to is each writer's own).
_WRITER_CODE: dict[str, Any] = {}


def change_object(change: Change, transaction: Transaction | None) -> dict[str, Any]:
    """One change as the JSON object ``replwire decode`` prints (a truncate: the object of its first table;
    :func:`change_objects` gives one per table)."""
    return change_objects(change, transaction)[0]


def change_objects(change: Change, transaction: Transaction | None) -> list[dict[str, Any]]:
    """One change as the JSON objects ``replwire decode`` prints: one, or for a truncate one per table."""
    if transaction is None:
        return list(_change_objects(change, None))
    return list(_change_objects(change, _transaction_fields(transaction), transaction.streamed))


def _transaction_fields(transaction: Transaction) -> dict[str, Any]:
    """The keys every change of ``transaction`` shares (made once per transaction, not once per change)."""
    out: dict[str, Any] = {"xid": transaction.xid, "commit_lsn": str(transaction.commit_lsn),
                           "commit_time": _commit_time(transaction.commit_time)}
    if transaction.origin is not None:
        out["origin"] = transaction.origin[0]
    if transaction.gid is not None:
        out["gid"] = transaction.gid
    return out


def _change_objects(change: Change, shared: dict[str, Any] | None,
                    streamed: bool = False) -> Iterator[dict[str, Any]]:
    """The objects of one change: one, or for a truncate one per truncated table, each with the table's
    ``schema`` and ``table`` (so a consumer that follows a table sees its truncates), and ``relations``
    (every table the one TRUNCATE emptied, in the server's order), ``cascade`` and ``restart_identity``."""
    if change.op != "truncate":
        if change.op == "message" and change.prefix == BACKFILL_PREFIX:
            return  # (a backfill's own marker: not a change of the database's)
        yield _change_object(change, shared, streamed)
        return
    assert change.relations is not None  # a truncate change names its tables
    relations = [f"{schema}.{table}" for schema, table in change.relations]
    for schema, table in change.relations:
        out = _change_object(change, shared, streamed)
        out["schema"], out["table"] = schema, table
        out["relations"] = relations
        out["cascade"], out["restart_identity"] = change.cascade, change.restart_identity
        yield out


def _change_object(change: Change, shared: dict[str, Any] | None, streamed: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"op": change.op, "schema": change.schema, "table": change.table, "xid": None,
                           "lsn": str(change.lsn) if change.lsn is not None else None}
    if shared is not None:
        out.update(shared)
    if streamed:
        out["subxid"] = change.subxid
    if change.op == "message":
        assert change.content is not None  # a message change has its content
        out["prefix"] = change.prefix
        out["content"] = "\\x" + change.content.hex()
        out["transactional"] = change.transactional
        try:
            out["content_text"] = change.content.decode("utf-8")
        except UnicodeDecodeError:
            pass
    elif change.op != "truncate":  # (a truncate's tables: _change_objects)
        for name in ("new", "old", "key"):
            row = _row(getattr(change, name))
            if row is not None:
                out[name] = row
        toasted = [name for name, v in (change.new or {}).items() if v is UNCHANGED_TOAST]
        if toasted:
            out["unchanged_toast"] = toasted
    return out


def _commit_time(commit_time: Any) -> Any:
    """A commit's time as its JSON value: ISO 8601, or the wire integer where a datetime cannot hold it."""
    try:
        return json_value(commit_time.to_datetime())
    except ValueError:
        return int(commit_time)


def _commit_keys(commit_lsn: str, commit_time: Any) -> str:
    """The ``commit_lsn`` and ``commit_time`` keys of a line, after its ``xid``."""
    return f',"commit_lsn":{_STRING(commit_lsn)},"commit_time":{_encode(commit_time)}'


def objects(item: Transaction | Change) -> Iterator[dict[str, Any]]:
    """The JSON objects of one assembler item: every change of a transaction, or a lone message."""
    if isinstance(item, Transaction):
        shared = _transaction_fields(item)
        for change in item.changes:
            yield from _change_objects(change, shared, item.streamed)
    else:
        yield from _change_objects(item, None)


class JsonLines:
    """The lines ``replwire decode`` prints for one assembler item, written straight from the wire tuples:
    the same text as ``ENCODE`` of each of :func:`objects`, without the dicts and Change objects.

    Strategy: per transaction, the keys every change shares (xid, commit LSN and time, origin, gid) are
    written once; per relation and operation, the line's start; each row image comes from :class:`RowJson`.
    The changes come from :meth:`~replwire.codec.stream.assembler.Changes.wire` (an Assembler made with
    ``rows=False`` makes no row dicts); truncates and logical messages, rare, go through :func:`objects`.
    Under the Python codec, :class:`PlainRuns` has the same lines written straight from the messages' bytes
    (:meth:`plain`, :meth:`body`), without parsed messages: what the compiled row path does in C.
    """

    def __init__(self, encoding: str = "UTF8", rows: RowJson | None = None) -> None:
        self.rows = rows or RowJson(ValueLoader(encoding))
        self.maker = ChangeMaker(rows=False, encoding=encoding)
        # relation id -> its Relation and the decoder's types_version, the starts of its lines (as _shapes) and
        # its bytes writers: for plain()
        self._plain_shapes: dict[int, tuple[Any, ...]] = {}
        # id(row schema) -> the schema, the starts of its insert's, update's and delete's lines, and the
        # writers of its tuples (RowJson.writers)
        self._shapes: dict[int, tuple[Any, ...]] = {}

    def _shape(self, schema: RowSchema) -> tuple[Any, ...]:
        if len(self._shapes) > 4096:
            self._shapes.clear()
        shape = self._shapes[id(schema)] = (schema, *(_start(schema, op) for op in ("insert", "update", "delete")),
                                            *self.rows.writers(schema))
        return shape

    def __call__(self, item: Transaction | Change) -> Iterator[str | bytes]:
        """The lines of ``item``, one at a time (a spilled transaction is read back as they are taken); the
        changes the compiled row path rendered (:class:`~replwire.codec.stream.assembler.Rendered`) as bytes:
        their lines in UTF-8, each ending in a newline."""
        if not isinstance(item, Transaction):
            for obj in objects(item):
                yield ENCODE(obj)
            return
        shared = _transaction_fields(item)
        # (the keys after "xid", in their order: the commit's LSN and time, then origin and gid if any)
        tail = _commit_keys(shared["commit_lsn"], shared["commit_time"])
        if len(shared) > 3:
            tail += "".join(f",{_STRING(name)}:{ENCODE(value)}" for name, value in shared.items()
                            if name not in _COMMIT_FIELDS)
        xid = f"{item.xid}" if item.xid is not None else "null"
        streamed, shapes = item.streamed, self._shapes
        joined: tuple[bytes, bytes] | None = None  # the xid and tail rows_join puts into Rendered lines
        for message, schema, lsn, subxid in item.changes.wire():
            cls = message.__class__
            if cls is Rendered:  # (rendered by the compiled row path, or by PlainRuns under the Python codec)
                assert isinstance(message, Rendered)
                if joined is None:
                    joined = (xid.encode(), line_bytes(tail))
                if COMPILED is not None:
                    yield COMPILED.rows_join(message.data, *joined, message.dropped or None)
                else:
                    yield _joined(message.data, *joined, message.dropped)
                continue
            if cls is not Insert and cls is not Update and cls is not Delete:  # a truncate or a logical message
                assert not isinstance(message, Rendered)
                change = self.maker.change(message, schema, LSN(lsn) if lsn is not None else None, item.xid,
                                           subxid if streamed else None)
                for obj in _change_objects(change, shared, streamed):
                    yield ENCODE(obj)
                continue
            shape = shapes.get(id(schema))
            if shape is None or shape[0] is not schema:
                shape = self._shape(schema)
            _, inserts, updates, deletes, row, keys = shape
            start = inserts if cls is Insert else updates if cls is Update else deletes
            if lsn is not None:
                line = f'{start}{xid},"lsn":"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"{tail}'
            else:
                line = f'{start}{xid},"lsn":null{tail}'
            if streamed:
                line += f',"subxid":{subxid}'
            dml: Any = message  # an Insert, Update or Delete: the tuples each has
            toasted: list[str] = []
            if cls is not Delete and dml.new is not None:
                line = f'{line},"new":{row(dml.new, toasted)}'
            if cls is not Insert:
                if dml.key is not None:
                    line += ',"key":' + keys(dml.key, None)
                elif dml.old is not None:
                    line += ',"old":' + row(dml.old, None) + ',"key":' + keys(dml.old, None)
            if toasted:
                line += ',"unchanged_toast":' + ENCODE(toasted)
            yield line + "}"

    def plain(self, records: list[Any], decoder: Decoder) -> tuple[str, int, Any]:
        """The lines of a plain transaction from its records' bytes (``(offset, lsn, xid, data)``: a Begin,
        row changes, a Commit), what :meth:`__call__` writes of it after the Assembler, each ending in a
        newline; its change count and end LSN.  Raises :class:`Declined` where a message is not in the form
        the writers read, or of a relation ``decoder`` has no Relation for, or of another width."""
        proto, encoding = decoder.proto_version, decoder.encoding
        try:
            begin = decoder._parse(records[0][3], proto_version=proto, in_stream=False, encoding=encoding)
            commit = decoder._parse(records[-1][3], proto_version=proto, in_stream=False, encoding=encoding)
        except Exception as error:  # noqa: BLE001 - the Assembler's way says what is wrong
            raise Declined from error
        if begin.__class__ is not Begin or commit.__class__ is not Commit:
            raise Declined
        xid = f"{begin.xid}"
        tail = _commit_keys(str(commit.commit_lsn), _commit_time(commit.commit_time))
        out = []
        for _, lsn, _, data in records[1:-1]:
            start, rest = self._change(data, 1, decoder)
            if lsn:
                out.append(f'{start}{xid},"lsn":"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"{tail}{rest}}}\n')
            else:
                out.append(f'{start}{xid},"lsn":null{tail}{rest}}}\n')
        return "".join(out), len(out), commit.end_lsn

    def body(self, records: list[Any], decoder: Decoder) -> Rendered:
        """The row changes of an open stream block from their records' bytes (``(offset, lsn, xid, data)``) as
        one :class:`~replwire.codec.stream.assembler.Rendered` run for the Assembler to buffer: what
        :meth:`__call__` writes of them when their transaction commits, without its xid and commit keys
        (:func:`_joined` puts them in).  Raises as :meth:`plain` does."""
        out: list[str] = []
        made_by: list[int] = []
        for _, lsn, _, data in records:
            subxid = _RELATION_ID(data, 1)[0]
            made_by.append(subxid)
            start, rest = self._change(data, 5, decoder)
            if lsn:
                out.append(f'{start}\x1e,"lsn":"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"\x1d,"subxid":{subxid}{rest}}}\n')
            else:
                out.append(f'{start}\x1e,"lsn":null\x1d,"subxid":{subxid}{rest}}}\n')
        return Rendered("".join(out).encode("utf-8"), len(out), dict(collections.Counter(made_by)))

    def _change(self, data: bytes, at: int, decoder: Decoder) -> tuple[str, str]:
        """A row change's line from its message's bytes (``at``: the offset of its relation id), as the start
        (up to ``"xid":``) and what follows the commit keys and subxid (without the closing brace)."""
        relation_id = _RELATION_ID(data, at)[0]
        relation = decoder.relations.get(relation_id)
        shapes = self._plain_shapes
        shape = shapes.get(relation_id)
        if shape is None or shape[0] is not relation or shape[1] != decoder.types_version:
            if relation is None:
                raise Declined
            schema = self.maker.row_schema(decoder, relation_id)
            if len(shapes) > 4096:
                shapes.clear()
            shape = shapes[relation_id] = (relation, decoder.types_version,
                                           *(_start(schema, op) for op in ("insert", "update", "delete")),
                                           self.rows.bytes_writer(schema, False), self.rows.bytes_writer(schema, True))
        _, _, inserts, updates, deletes, row, keys = shape
        tag, mark, p = data[0], data[at + 4], at + 5
        toasted: list[str] = []
        if tag == 73 and mark == 78:  # an Insert
            new, p = row(data, p, toasted)
            start, rest = inserts, f',"new":{new}'
        elif tag == 85:  # an Update: its key or old image, if any, then its new image
            before = ""
            if mark != 78:
                if mark == 75:
                    key, p = keys(data, p, None)
                    before = ',"key":' + key
                elif mark == 79:
                    old, _ = row(data, p, None)
                    key, p = keys(data, p, None)
                    before = f',"old":{old},"key":{key}'
                else:
                    raise Declined
                if data[p] != 78:
                    raise Declined
                p += 1
            new, p = row(data, p, toasted)
            start, rest = updates, f',"new":{new}{before}'
        elif tag == 68 and mark == 75:  # a Delete
            key, p = keys(data, p, None)
            start, rest = deletes, f',"key":{key}'
        elif tag == 68 and mark == 79:
            old, _ = row(data, p, None)
            key, p = keys(data, p, None)
            start, rest = deletes, f',"old":{old},"key":{key}'
        else:
            raise Declined
        if p != len(data):
            raise Declined
        if toasted:
            rest += ',"unchanged_toast":' + ENCODE(toasted)
        return start, rest

    def compiled_events(self) -> None:
        """JSON lines, not Debezium's events (see :class:`~replwire.codec.decode.RowWriter`)."""

    def written_through(self, commit_lsn: int) -> None:
        """(Nothing to remember: see :class:`~replwire.codec.decode.RowWriter`.)"""

    def plan(self, schema: RowSchema) -> tuple[tuple[bytes, ...], tuple[tuple[bytes, int, bool, Any, str, int, int],
                                                                          ...], int]:
        """What the compiled row path writes the changes of ``schema``'s relation with (its arguments of
        ``rows_plan``): the start of an insert's, an update's and a delete's line, up to ``"xid":``, the
        columns (:meth:`RowJson.plan_columns`) and what their text is in (:func:`plan_encoding`); all as
        :meth:`__call__` writes them, in :func:`line_bytes`."""
        starts = tuple(line_bytes(_start(schema, op)) for op in ("insert", "update", "delete"))
        return starts, self.rows.plan_columns(schema), plan_encoding(self.rows.loader.encoding)


#: The keys of :func:`_transaction_fields` every transaction has.
_COMMIT_FIELDS = frozenset(("xid", "commit_lsn", "commit_time"))


_RELATION_ID = struct.Struct(">L").unpack_from


class PlainRun:
    """The lines :class:`PlainRuns` wrote for a plain transaction: ``data`` in UTF-8, each line ending in a
    newline (nothing for one a resume sent again: ``repeated``), and the ``records`` it was."""

    __slots__ = ("changes", "data", "records", "repeated")

    def __init__(self, data: bytes, records: int, changes: int, repeated: int) -> None:
        self.data, self.records, self.changes, self.repeated = data, records, changes, repeated


class PlainRuns:
    """The records of an input for the Assembler (``(offset, lsn, xid, data)`` from ``reading``), but each
    plain transaction of at most :data:`_MOST_PLAIN` row changes that begins between transactions (the
    decoder idle) given as one :class:`PlainRun` of its lines (:meth:`JsonLines.plain`), its records counted
    as passed over (:meth:`~replwire.codec.stream.decoder.Decoder.skip`) -- the pure-Python twin of the
    compiled row path's runs.  Anything else (a Relation inside, a message the lines' writers decline) gives
    the transaction's records to the Assembler, as they came.  ``last_end``: the end of the last transaction
    given, which one ending no later is repeated (its run writes nothing)."""

    def __init__(self, reading: Any, lines: JsonLines, assembler: Assembler, last_end: int) -> None:
        self.reading, self.lines, self.assembler, self.last_end = reading, lines, assembler, last_end
        self.rendered = 0  # records rendered into a streamed transaction's buffer (Rendered runs) so far

    @property
    def tail(self) -> Any:
        return self.reading.tail

    def close(self) -> None:
        self.reading.close()

    def __iter__(self) -> Iterator[Any]:
        decoder, plain = self.assembler.decoder, self.lines.plain
        held: list[Any] = []  # a plain transaction's records, from its Begin
        body: list[Any] = []  # the row changes of the stream block open
        try:
            for record in self.reading:
                data = record[3]
                tag = data[0] if data else -1
                if body:
                    if tag in _ROW_TAGS and len(body) < _MOST_PLAIN:
                        body.append(record)
                        continue
                    given, body = body, []
                    if not self._render(given):
                        yield from given
                if held:
                    held.append(record)
                    if tag in _ROW_TAGS and len(held) <= _MOST_PLAIN:
                        continue
                    if tag == 67:  # a Commit
                        try:
                            lines, changes, end = plain(held, decoder)
                        except Exception:  # noqa: BLE001 - declined, or a value that fails: the Assembler's way
                            pass
                        else:
                            decoder.skip(len(held))
                            if end <= self.last_end:
                                run = PlainRun(b"", len(held), 0, 1)
                            else:
                                self.last_end = end
                                run = PlainRun(lines.encode("utf-8"), len(held), changes, 0)
                            held = []
                            yield run
                            continue
                    given, held = held, []
                    yield from given
                elif decoder.__class__ is not Decoder:
                    yield record
                elif tag == 66 and decoder.state == IDLE:  # a Begin
                    held.append(record)
                elif tag in _ROW_TAGS and decoder.state == STREAM:
                    body.append(record)
                else:
                    yield record
        except Exception:
            given, held = held + body, []  # (the records read before a reading error go first, as they came)
            yield from given
            raise
        if body and not self._render(body):
            yield from body
        yield from held

    def _render(self, body: list[Any]) -> bool:
        """Whether the row changes ``body`` of the open stream block went to its transaction's buffer as one
        :class:`~replwire.codec.stream.assembler.Rendered` run (else they go to the Assembler as they are)."""
        decoder = self.assembler.decoder
        index = decoder.index
        try:
            self.assembler.add_rendered(self.lines.body(body, decoder))
        except Exception:  # noqa: BLE001 - declined, or a value that fails: the Assembler's way
            decoder.index = index
            return False
        self.rendered += len(body)
        return True


_ROW_TAGS = frozenset(b"IUD")
#: The most row changes :class:`PlainRuns` holds to write at once: of a plain transaction (a bigger one goes
#: to the Assembler, which spills it to a file), of a stream block (one Rendered run).
_MOST_PLAIN = 4096
_SUBXID = b'\x1d,"subxid":'


def _joined(data: bytes, xid: bytes, tail: bytes, dropped: set[int]) -> bytes:
    """The lines of a run :meth:`JsonLines.body` rendered, with their transaction's ``xid`` and commit keys
    (``tail``), in UTF-8; the lines of the subtransactions in ``dropped`` left out.  A rendered line has
    \\x1e where the xid goes and \\x1d where the commit keys go, just before its subxid (no line's JSON has
    either: control characters are escaped in its strings)."""
    if dropped:
        kept = []
        for line in data.split(b"\n")[:-1]:
            at = line.index(_SUBXID) + len(_SUBXID)
            if int(line[at:line.index(b",", at)]) not in dropped:
                kept.append(line + b"\n")
        data = b"".join(kept)
    return data.replace(b"\x1e", xid).replace(b"\x1d", tail)


def _start(schema: RowSchema, op: str) -> str:
    """The start of a change's line, up to ``"xid":``."""
    relation = schema.relation
    return (f'{{"op":"{op}","schema":{_STRING(relation.namespace or "pg_catalog")},'
            f'"table":{_STRING(relation.name)},"xid":')


#: The text ways by name (row_ways.TEXT_WAYS, and "array of" an element's).
_WAYS = {**row_ways.TEXT_WAYS, **{f"array of {way}": row_ways.ARRAY + row_ways.TEXT_WAYS[way]
                                  for way in row_ways.ARRAY_ELEMENTS}}

__all__ = ["ENCODE", "Declined", "JsonLines", "PlainRun", "PlainRuns", "RowJson", "change_object", "change_objects",
           "compiled_rows", "json_value", "line_bytes", "objects", "plan_encoding"]
