"""Typed column values: a tuple column's bytes turned into a Python value by its type OID.

Strategy: psycopg 3 already knows how to read every built-in PostgreSQL type in both formats, so a
connection-less :class:`psycopg.adapt.Transformer` supplies the loaders (text ``t`` and binary ``b``
alike); this module only decides *which* OID to load a column as, and what to do where psycopg cannot:

* A column whose type OID is a built-in type loads as that type.  Any other OID (domains, enums, arrays
  of them, composites, extension types) is looked up in the Type (``Y``) messages seen so far: the server
  sends the **base** type's name there, so a domain over a built-in type (``posint`` over ``int4``, a
  domain over ``int4[]`` named ``_int4``) loads as that built-in type.  A type whose Type message names a
  non-``pg_catalog`` type (an enum, a composite, ...) or that psycopg does not know stays as the server's
  text (``str``) for ``t`` columns and the raw ``bytes`` of its send function for ``b`` columns -- exactly
  what psycopg itself returns for a ``SELECT`` of an unregistered type.
* ``'u'`` (an unchanged TOASTed value that was not sent) becomes :data:`UNCHANGED_TOAST`, a marker that is
  not ``None``, not falsy-by-accident comparable to anything else, and never produced for a NULL.
* ``date``, ``timestamp`` and ``timestamptz`` ``'infinity'``/``'-infinity'`` (which psycopg refuses to
  load) become the sentinels :data:`INFINITY` and :data:`NEG_INFINITY`; ``numeric`` NaN and ±Infinity are
  ``Decimal`` values (psycopg's own), floats are ``float``.
* Where psycopg's loaders lose information, replwire's own load instead: ``interval`` is an
  :class:`Interval` (months, days and microseconds apart; psycopg folds a month into 30 days), ``json`` and
  ``jsonb`` a :class:`JsonText` (the server's text, unparsed: psycopg's floats round long numbers, and its
  JSON ``null`` is ``None`` like SQL NULL), binary ``money`` the ``int`` the server sends (the amount in the
  currency's smallest unit; psycopg gives the bytes), binary ``float4`` the shortest decimal that reads
  back as the same single (:func:`float4`: ``1.1`` as in text mode, where psycopg gives the double
  ``1.100000023841858``).  Arrays of these types hold the same.
* A value psycopg raises on for another reason (a date before year 1 or after 9999, ...) is kept whole as
  a :class:`RawValue` (kind, bytes, the reason) -- never dropped, never ``None``; for a binary date,
  timestamp, timestamptz, or a range with such a bound, its ``text`` is the server's text of the value
  (``4713-01-01 BC``; a timestamptz in UTC), which ``str()`` gives, as it gives a text value's text.
  :func:`server_text` writes a range or multirange as the server does.
* A binary (``'b'``) value is checked against its type's layout before any loader sees it, because
  psycopg's compiled binary loaders read their type's width without looking at the value's length (a
  4-byte ``float8`` would be read past its end).  A fixed-width type (:data:`BINARY_WIDTHS`: the bytes
  PostgreSQL's send function writes) must have exactly that length; a ``numeric`` its 8-byte header and
  as many digits as the header counts; an array (``array_send``), a range, a multirange and a ``record``
  a header and parts that fit the value exactly (an array the element type of its column), each part
  checked in turn as a value of its type.
  A value that does not fit is kept whole as a :class:`RawValue` whose reason names the type and the
  lengths.

Text is in the connection's client encoding (the ``encoding`` of :class:`ValueLoader`, :func:`text_value`
and :func:`untyped_row`; UTF-8 by default, as for the Strings of the messages): the server's text of a
value, and the binary form of the text types, which ``textsend`` converts too.  psycopg's loaders take
their encoding from a connection, and there is none here, so for any other encoding the loader of each
text type (``text``, ``varchar``, ``bpchar``, ``name``, ``"char"``, ``json``, ``jsonb``, and the fallback of
types psycopg has no loader for) is replaced by one that decodes in that encoding; arrays of them load
through these.  In ``SQL_ASCII`` text decodes with its codec too: bytes 128-255 become the surrogates
U+DC80-U+DCFF (psycopg itself gives ``bytes`` there).

psycopg is imported lazily, on the first typed value, so ``replwire.codec`` imports without it; asking for
typed values without it raises :class:`TypedValuesUnavailable` saying what to install.
"""

from __future__ import annotations

import datetime as dt
import decimal
import importlib.util
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...schema.encodings import UTF8, text_codec
from ..errors import ReplwireError, install_hint

__all__ = [
    "BINARY_WIDTHS", "INFINITY", "NEG_INFINITY", "UNCHANGED_TOAST", "Infinite", "Interval", "JsonText", "RawValue",
    "RowSchema", "TypedValuesUnavailable", "UnchangedToast", "ValueLoader", "server_text", "text_value",
]


class TypedValuesUnavailable(ReplwireError, ImportError):
    """Typed values were asked for, but psycopg 3 is not installed."""


class UnchangedToast:
    """The marker for a ``'u'`` column: an unchanged TOASTed value the server did not send.

    There is exactly one instance, :data:`UNCHANGED_TOAST`.  It is not ``None`` and it is truthy, so neither
    ``value is None`` nor ``if value:`` can mistake it for a NULL or an empty value: keep the value you
    already have for that column.
    """

    _instance: UnchangedToast | None = None
    __slots__ = ()

    def __new__(cls) -> UnchangedToast:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __bool__(self) -> bool:
        return True

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


#: The value of every ``'u'`` column (see :class:`UnchangedToast`).
UNCHANGED_TOAST = UnchangedToast()


class Infinite:
    """``'infinity'`` or ``'-infinity'`` of a ``date``, ``timestamp`` or ``timestamptz`` column.

    ``datetime`` has no infinities (psycopg raises on them), so these two sentinels stand in:
    :data:`INFINITY` compares greater and :data:`NEG_INFINITY` smaller than every ``date``/``datetime``, and
    ``str()`` gives the server's own text.
    """

    __slots__ = ("sign",)
    sign: int
    _instances: dict[int, Infinite] = {}

    def __new__(cls, sign: int) -> Infinite:
        if sign not in (1, -1):
            raise ValueError("sign must be 1 or -1")
        if sign not in cls._instances:
            instance = super().__new__(cls)
            object.__setattr__(instance, "sign", sign)
            cls._instances[sign] = instance
        return cls._instances[sign]

    def __repr__(self) -> str:
        return "INFINITY" if self.sign > 0 else "NEG_INFINITY"

    def __str__(self) -> str:
        return "infinity" if self.sign > 0 else "-infinity"

    def __reduce__(self) -> str:
        return repr(self)

    def __lt__(self, other: Any) -> bool:
        return self.sign < 0 and other is not self

    def __le__(self, other: Any) -> bool:
        return self.sign < 0 or other is self

    def __gt__(self, other: Any) -> bool:
        return self.sign > 0 and other is not self

    def __ge__(self, other: Any) -> bool:
        return self.sign > 0 or other is self


#: ``'infinity'`` of a date/timestamp/timestamptz column.
INFINITY = Infinite(1)
#: ``'-infinity'`` of a date/timestamp/timestamptz column.
NEG_INFINITY = Infinite(-1)


_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1
_USECS_PER_HOUR, _USECS_PER_MINUTE, _USECS_PER_SECOND = 3_600_000_000, 60_000_000, 1_000_000


def interval_iso(months: int, days: int, microseconds: int) -> str:
    """The ISO 8601 text of an interval of these parts, as PostgreSQL writes it under ``intervalstyle =
    iso_8601`` (see :class:`Interval`)."""
    if not (months or days or microseconds):
        return "PT0S"
    if months == _INT32_MAX and days == _INT32_MAX and microseconds == _INT64_MAX:
        return "infinity"
    if months == -_INT32_MAX - 1 and days == -_INT32_MAX - 1 and microseconds == -_INT64_MAX - 1:
        return "-infinity"
    # each part with the sign of what it comes from, as C's truncating division gives it
    years, months = divmod(months, 12) if months >= 0 else (-(-months // 12), -(-months % 12))
    parts = ["P"]
    if years:
        parts.append(f"{years}Y")
    if months:
        parts.append(f"{months}M")
    if days:
        parts.append(f"{days}D")
    if microseconds:
        sign = "-" if microseconds < 0 else ""
        hours, rest = divmod(-microseconds if sign else microseconds, _USECS_PER_HOUR)
        minutes, rest = divmod(rest, _USECS_PER_MINUTE)
        seconds, fraction = divmod(rest, _USECS_PER_SECOND)
        parts.append("T")
        if hours:
            parts.append(f"{sign}{hours}H")
        if minutes:
            parts.append(f"{sign}{minutes}M")
        if fraction:
            parts.append(f"{sign}{seconds}" + f".{fraction:06d}".rstrip("0") + "S")
        elif seconds:
            parts.append(f"{sign}{seconds}S")
    return "".join(parts)


@dataclass(frozen=True)
class Interval:
    """An ``interval`` value as PostgreSQL keeps it: ``months``, ``days`` and ``microseconds``, three separate
    parts (a month is not 30 days, nor a day 24 hours, across a daylight-saving change).

    ``str()`` is the ISO 8601 duration PostgreSQL itself prints under ``SET intervalstyle = iso_8601``
    (``EncodeInterval`` in src/backend/utils/adt/datetime.c): ``P1Y2M3DT4H5M6.5S``, each part with its own
    sign (``P-1M30D``), ``PT0S`` for zero, and ``infinity``/``-infinity`` for PostgreSQL 17's infinite
    intervals.  This is what ``replwire decode``, Debezium events and the Spark columns write.
    ``timedelta()`` gives the ``datetime.timedelta`` psycopg would (a month taken as 30 days: lossy).
    """

    months: int
    days: int
    microseconds: int

    @property
    def infinite(self) -> int:
        """1 for ``infinity``, -1 for ``-infinity``, 0 for a finite interval."""
        if self.months == _INT32_MAX and self.days == _INT32_MAX and self.microseconds == _INT64_MAX:
            return 1
        if self.months == -_INT32_MAX - 1 and self.days == -_INT32_MAX - 1 and self.microseconds == -_INT64_MAX - 1:
            return -1
        return 0

    def __str__(self) -> str:
        return interval_iso(self.months, self.days, self.microseconds)

    def timedelta(self) -> dt.timedelta:
        """As psycopg loads an interval: a year is 365 days and a month 30 (lossy; what replwire's typed
        values were before they kept the parts).  An infinite interval raises ``OverflowError``."""
        if self.infinite:
            raise OverflowError(f"{self} has no timedelta")
        years, months = divmod(abs(self.months), 12)
        folded = 365 * years + 30 * months
        return dt.timedelta(days=self.days + (folded if self.months >= 0 else -folded),
                            microseconds=self.microseconds)


# interval_out's text under the default intervalstyle (postgres): [N year[s]] [N mon[s]] [N day[s]]
# [[+-]H:MM:SS[.f]], each field with its own sign; and under iso_8601: P[nY][nM][nD][T[nH][nM][n[.f]S]]
_INTERVAL_POSTGRES = re.compile(
    rb"(?:([+-]?\d+) years?(?: |$))?(?:([+-]?\d+) mons?(?: |$))?(?:([+-]?\d+) days?(?: |$))?"
    rb"(?:([+-])?(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?")
_INTERVAL_ISO = re.compile(
    rb"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?)(\d+)(?:\.(\d{1,6}))?S)?)?")


def interval_parts(data: bytes) -> tuple[int, int, int] | None:
    """(months, days, microseconds) of interval_out's text (intervalstyle postgres or iso_8601), or ``None``
    for another form."""
    if data == b"infinity":
        return _INT32_MAX, _INT32_MAX, _INT64_MAX
    if data == b"-infinity":
        return -_INT32_MAX - 1, -_INT32_MAX - 1, -_INT64_MAX - 1
    match = _INTERVAL_POSTGRES.fullmatch(data)
    if match is not None and data:
        years, months, days, sign, hours, minutes, seconds, fraction = match.groups()
        micro = 0
        if hours is not None:
            micro = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * _USECS_PER_SECOND
            micro += int((fraction or b"").ljust(6, b"0"))
            if sign == b"-":
                micro = -micro
        return int(years or 0) * 12 + int(months or 0), int(days or 0), micro
    match = _INTERVAL_ISO.fullmatch(data)
    if match is not None and any(match.groups()):  # (not a bare P or PT)
        years, months, days, hours, minutes, minus, seconds, fraction = match.groups()
        micro = ((int(hours or 0) * 60 + int(minutes or 0)) * 60) * _USECS_PER_SECOND
        part = int(seconds or 0) * _USECS_PER_SECOND + int((fraction or b"").ljust(6, b"0"))
        micro += -part if minus else part
        return int(years or 0) * 12 + int(months or 0), int(days or 0), micro
    return None


def _interval_binary(data: bytes) -> Interval:
    """interval_send's form: int64 microseconds, int32 days, int32 months."""
    microseconds, days, months = struct.unpack(">qii", data)
    return Interval(months, days, microseconds)


_FLOAT4 = struct.Struct(">f")


def float4(data: bytes) -> float:
    """A binary ``float4`` (float4send: the IEEE single, 4 bytes) as the ``float`` of its shortest decimal
    that reads back as the same single -- the digits the server's own text has (``1.1``, not the double
    ``1.100000023841858`` of the single's exact value), so text and binary mode give the same value; NaN,
    ±Infinity and -0 as they are."""
    value: float
    (value,) = _FLOAT4.unpack(data)
    if value != value or value in (_INF, -_INF) or value == 0:
        return value
    low, high = 1, 9  # 9 significant digits always read back as the same single, and more digits than
    while low < high:  # a number that does also do: the fewest, by bisection
        digits = (low + high) // 2
        if _FLOAT4.pack(float(f"{value:.{digits}g}")) == data:
            high = digits
        else:
            low = digits + 1
    return float(f"{value:.{low}g}")


_INF = float("inf")


@dataclass(frozen=True)
class JsonText:
    """A ``json`` or ``jsonb`` value: the server's JSON text, exactly as it sent it.

    Kept as text, not parsed, so nothing is lost: numbers keep every digit (``1.000000000000000000001``),
    a ``json`` value keeps its key order, duplicate keys and spacing, and JSON ``null`` (``JsonText("null")``)
    is not SQL NULL (``None``).  ``str()`` is the text; :meth:`load` parses it (with ``json.loads``'s options,
    e.g. ``parse_float=decimal.Decimal`` to keep the numbers exact).  ``replwire decode``, Debezium events and
    the Spark columns write it as a JSON string holding this text.
    """

    text: str

    def __str__(self) -> str:
        return self.text

    def load(self, **options: Any) -> Any:
        """The value parsed by ``json.loads(text, **options)``."""
        return json.loads(self.text, **options)



@dataclass(frozen=True)
class RawValue:
    """A value psycopg could not represent (e.g. a date outside years 1-9999), kept whole.

    ``kind`` is ``'t'`` or ``'b'``, ``data`` the exact bytes from the wire, ``type_id`` the column's type OID,
    ``reason`` psycopg's message.  ``str()`` of a text value is the server's text.
    """

    type_id: int
    kind: str
    data: bytes
    reason: str
    #: The server's text of a binary value replwire can write as the server would (a date, timestamp or
    #: timestamptz outside years 1-9999, or a range with such a bound; see :func:`server_text`), else ``None``.
    text: str | None = None

    def __str__(self) -> str:
        if self.text is not None:
            return self.text
        return self.data.decode("utf-8", "replace") if self.kind == "t" else self.data.hex()


def _civil(days: int) -> tuple[int, int, int]:
    """The proleptic Gregorian (year, month, day) of a day count from 2000-01-01, year 0 being 1 BC (what
    PostgreSQL's j2date gives), for any int (H. Hinnant's civil_from_days)."""
    z = days + 10957 + 719468  # from 0000-03-01
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _date_server_text(days: int) -> str:
    """date_out's text (DateStyle ISO) of date_send's day count from 2000-01-01, years before 1 as BC."""
    if days == _INT32_MAX or days == -_INT32_MAX - 1:
        return "infinity" if days > 0 else "-infinity"
    year, month, day = _civil(days)
    return f"{year if year > 0 else 1 - year:04d}-{month:02d}-{day:02d}{'' if year > 0 else ' BC'}"


def _timestamp_server_text(microseconds: int, zone: bool) -> str:
    """timestamp_out's (``zone``: timestamptz_out's, in UTC, ``+00``) text (DateStyle ISO) of the send
    function's microseconds from 2000-01-01 00:00, years before 1 as BC."""
    if microseconds == _INT64_MAX or microseconds == -_INT64_MAX - 1:
        return "infinity" if microseconds > 0 else "-infinity"
    days, rest = divmod(microseconds, 86_400 * _USECS_PER_SECOND)
    year, month, day = _civil(days)
    seconds, fraction = divmod(rest, _USECS_PER_SECOND)
    text = (f"{year if year > 0 else 1 - year:04d}-{month:02d}-{day:02d} "
            f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}")
    if fraction:
        text += f".{fraction:06d}".rstrip("0")
    return text + ("+00" if zone else "") + ("" if year > 0 else " BC")


def _offset_text(offset: dt.timedelta) -> str:
    """A UTC offset as timestamptz_out writes it: +HH, +HH:MM or +HH:MM:SS."""
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{sign}{hours:02d}"
    if minutes or seconds:
        text += f":{minutes:02d}"
    return text + (f":{seconds:02d}" if seconds else "")


def _bound_text(value: Any) -> str:
    """A range bound (a typed value) as its type's output function writes it."""
    if isinstance(value, decimal.Decimal):
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, dt.datetime):
        text = value.replace(tzinfo=None, microsecond=0).isoformat(" ")
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        if value.tzinfo is not None:
            offset = value.utcoffset()
            text += _offset_text(offset if offset is not None else dt.timedelta(0))
        return text
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


_RANGE_SPECIAL = frozenset('"\\(),[] \t\n\v\f\r')  # (isspace in the C locale)


def _range_quote(text: str) -> str:
    """A bound's text as range_out writes it (range_bound_escape): in double quotes, ``"`` and ``\\``
    doubled, when empty or holding a quote, backslash, parenthesis, bracket, comma or white space."""
    if text and _RANGE_SPECIAL.isdisjoint(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'


def server_text(value: Any) -> str | None:
    """The server's text of a typed range or multirange value (psycopg's ``Range``/``Multirange``), as
    range_out/multirange_out write it (``[1,11)``, ``(,11)``, ``empty``, ``{[1,3),[5,7)}``; a timestamptz
    bound with its UTC offset as the datetime has it); ``None`` for any other value."""
    kind = type(value).__name__
    if not type(value).__module__.startswith("psycopg"):
        return None
    if kind == "Multirange":
        return "{" + ",".join(_range_text(r) for r in value) + "}"
    if kind == "Range":
        return _range_text(value)
    return None


def _range_text(value: Any) -> str:
    if value.isempty:
        return "empty"
    lower = "" if value.lower is None else _range_quote(_bound_text(value.lower))
    upper = "" if value.upper is None else _range_quote(_bound_text(value.upper))
    return f"{'[' if value.lower_inc else '('}{lower},{upper}{']' if value.upper_inc else ')'}"


# OIDs of the types whose infinities get the sentinels, and their binary extremes.
_DATE, _TIMESTAMP, _TIMESTAMPTZ = 1082, 1114, 1184
_INFINITE_TEXT = {b"infinity": INFINITY, b"-infinity": NEG_INFINITY}
_INFINITE_BINARY = {
    _DATE: {(2**31 - 1).to_bytes(4, "big"): INFINITY, (-(2**31)).to_bytes(4, "big", signed=True): NEG_INFINITY},
    _TIMESTAMP: {(2**63 - 1).to_bytes(8, "big"): INFINITY, (-(2**63)).to_bytes(8, "big", signed=True): NEG_INFINITY},
}
_INFINITE_BINARY[_TIMESTAMPTZ] = _INFINITE_BINARY[_TIMESTAMP]


#: The exact length of the binary form of the fixed-width built-in types, by OID: the bytes PostgreSQL's
#: send function writes (src/backend/utils/adt/): boolsend 1 (bool.c); int2send 2, int4send 4 (int.c);
#: int8send 8 (int8.c); oidsend 4 (oid.c); float4send 4, float8send 8 (float.c); date_send 4, time_send 8,
#: timetz_send 12 (date.c); timestamp_send 8, timestamptz_send 8, interval_send 16 (timestamp.c);
#: uuid_send 16 (uuid.c); cash_send 8 (cash.c).
BINARY_WIDTHS: dict[int, int] = {16: 1, 21: 2, 23: 4, 20: 8, 26: 4, 700: 4, 701: 8, 1082: 4, 1083: 8, 1266: 12,
                                 1114: 8, 1184: 8, 1186: 16, 2950: 16, 790: 8}
_NUMERIC = 1700
_MAXDIM = 6  # MAXDIM of PostgreSQL's arrays (utils/array.h)
_NAMES = {16: "bool", 21: "int2", 23: "int4", 20: "int8", 26: "oid", 700: "float4", 701: "float8", 1082: "date",
          1083: "time", 1266: "timetz", 1114: "timestamp", 1184: "timestamptz", 1186: "interval", 2950: "uuid",
          790: "money", _NUMERIC: "numeric"}


_RECORD = 2249
_NESTING = 16  # deepest nesting of arrays, ranges and records checked (each level takes bytes of the value)
# range_send's flags (utils/rangetypes.h): RANGE_EMPTY, RANGE_LB_INF, RANGE_UB_INF
_RANGE_EMPTY, _RANGE_LB_INF, _RANGE_UB_INF = 0x01, 0x08, 0x10
_ARRAY_HEAD = struct.Struct(">iiI")  # array_send's ndim, has-nulls flag, element OID
_ARRAY_DIMS = [struct.Struct(f">{2 * n}i") for n in range(_MAXDIM + 1)]  # (length, lower bound) per dimension


def _int32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 4], "big", signed=True)


class _Layout:
    """Checks binary values against the layouts of PostgreSQL's send functions (see the module docstring),
    walking into arrays, ranges, multiranges and records, whose parts go to psycopg's loaders in turn.
    ``kinds(oid)`` says what ``oid`` is: ``("array", element)``, ``("range", subtype)``, ``("multirange",
    range)`` or ``None``."""

    def __init__(self, kinds: Callable[[int], tuple[str, int] | None]) -> None:
        self.kinds = kinds

    def fault(self, oid: int, data: bytes, depth: int = 0) -> str | None:
        """Why the binary value ``data`` of type ``oid`` does not fit its type's layout, or ``None``."""
        size = len(data)
        width = BINARY_WIDTHS.get(oid)
        if width is not None:
            return None if size == width else f"a binary {_NAMES[oid]} is {width} bytes, this value is {size}"
        if oid == _NUMERIC:  # numeric_send: ndigits, weight, sign, dscale (int16 each), then ndigits digits
            if size < 8:
                return f"a binary numeric has an 8-byte header, this value is {size} bytes"
            expected = 8 + 2 * int.from_bytes(data[:2], "big")
            return None if size == expected else \
                f"a binary numeric with this header is {expected} bytes, this value is {size}"
        kind = ("record", oid) if oid == _RECORD else self.kinds(oid)
        if kind is None:
            return None
        if depth >= _NESTING:
            return f"a binary value nested more than {_NESTING} deep"
        what, inner = kind
        if what == "record":
            return self._record(data, depth)
        if what == "array":
            return self._array(inner, data, depth)
        if what == "range":
            return self._range(inner, data, depth)
        return self._multirange(inner, data, depth)

    def _part(self, oid: int, data: bytes, at: int, depth: int, what: str) -> tuple[int, str | None]:
        """The part at ``at``: an int32 length (-1: NULL) and that many bytes of type ``oid``; the offset
        after it and the fault, if any."""
        size = len(data)
        if at + 4 > size:
            return at, f"{what} starts past the end ({size} bytes)"
        length = _int32(data, at)
        at += 4
        if length == -1:
            return at, None
        if length < 0 or at + length > size:
            return at, f"{what} has length {length}, past the end ({size} bytes)"
        fault = self.fault(oid, data[at:at + length], depth + 1)
        return at + length, None if fault is None else f"{what}: {fault}"

    def _array(self, element: int, data: bytes, depth: int) -> str | None:
        # array_send: ndim, has-nulls flag, element OID (int32 each), per dimension its length and lower
        # bound (int32 each), then each element as a part.
        size = len(data)
        if size < 12:
            return f"a binary array has a 12-byte header, this value is {size} bytes"
        ndim, _, stated = _ARRAY_HEAD.unpack_from(data)
        if not 0 <= ndim <= _MAXDIM:
            return f"a binary array has 0 to {_MAXDIM} dimensions, this value says {ndim}"
        if ndim == 0:
            return None if size == 12 else f"an empty binary array is 12 bytes, this value is {size}"
        if stated != element:
            return f"a binary array of element type {element} says its elements are of type {stated}"
        at = 12 + 8 * ndim
        if size < at:
            return f"a binary array of {ndim} dimensions has a {at}-byte header, this value is {size} bytes"
        count = 1
        for i, length in enumerate(_ARRAY_DIMS[ndim].unpack_from(data, 12)[::2]):
            if length < 0:
                return f"dimension {i + 1} of a binary array has length {length}"
            count *= length
        if count * 4 > size - at:  # every element takes at least its 4-byte length
            return f"a binary array of {count} elements cannot be {size} bytes"
        width = BINARY_WIDTHS.get(element)
        if width is not None and size == at + count * (4 + width):
            # no NULLs: every element's length is the width (below 256: bytes 0, 0, 0, width) if each byte
            # of the lengths, taken a stride apart, is that byte (compared whole, not element by element)
            step, zeros = 4 + width, bytes(count)
            if (data[at:size:step] == zeros and data[at + 1:size:step] == zeros and data[at + 2:size:step] == zeros
                    and data[at + 3:size:step] == bytes((width,)) * count):
                return None
        simple = width is None and element not in (_NUMERIC, _RECORD) and self.kinds(element) is None
        for n in range(count):
            if simple:  # a type of any length: only the lengths need checking
                length = _int32(data, at) if at + 4 <= size else -2
                if length >= -1 and at + 4 + max(length, 0) <= size:
                    at += 4 + max(length, 0)
                    continue
            at, fault = self._part(element, data, at, depth, f"element {n + 1} of a binary array")
            if fault is not None:
                return fault
        return None if at == size else \
            f"a binary array of {count} elements ends at byte {at}, this value is {size} bytes"

    def _range(self, subtype: int, data: bytes, depth: int) -> str | None:
        # range_send: a flags byte, then the lower and the upper bound as parts, each unless infinite
        # (neither for an empty range).
        size = len(data)
        if size < 1:
            return "a binary range has a flags byte, this value is empty"
        flags, at = data[0], 1
        if not flags & _RANGE_EMPTY:
            for flag, what in ((_RANGE_LB_INF, "the lower bound"), (_RANGE_UB_INF, "the upper bound")):
                if not flags & flag:
                    at, fault = self._part(subtype, data, at, depth, f"{what} of a binary range")
                    if fault is not None:
                        return fault
        return None if at == size else f"a binary range ends at byte {at}, this value is {size} bytes"

    def _multirange(self, range_oid: int, data: bytes, depth: int) -> str | None:
        # multirange_send: the number of ranges (int32), then each range as a part.
        size = len(data)
        if size < 4:
            return f"a binary multirange has a 4-byte count, this value is {size} bytes"
        count, at = _int32(data, 0), 4
        if count < 0 or count * 4 > size - at:
            return f"a binary multirange of {count} ranges cannot be {size} bytes"
        for n in range(count):
            at, fault = self._part(range_oid, data, at, depth, f"range {n + 1} of a binary multirange")
            if fault is not None:
                return fault
        return None if at == size else f"a binary multirange ends at byte {at}, this value is {size} bytes"

    def _record(self, data: bytes, depth: int) -> str | None:
        # record_send: the number of fields (int32), then each field's type OID and the field as a part.
        size = len(data)
        if size < 4:
            return f"a binary record has a 4-byte count, this value is {size} bytes"
        count, at = _int32(data, 0), 4
        if count < 0 or count * 8 > size - at:
            return f"a binary record of {count} fields cannot be {size} bytes"
        for n in range(count):
            if at + 4 > size:
                return f"field {n + 1} of a binary record starts past the end ({size} bytes)"
            field = int.from_bytes(data[at:at + 4], "big")
            at, fault = self._part(field, data, at + 4, depth, f"field {n + 1} of a binary record")
            if fault is not None:
                return fault
        return None if at == size else f"a binary record ends at byte {at}, this value is {size} bytes"


#: The text types, by OID: text, varchar, bpchar, name.
_TEXT_OIDS = (25, 1043, 1042, 19)


def _text_fast(codec: str) -> dict[int, Callable[[bytes], Any]]:
    """Text-format values whose psycopg loader amounts to one call: the most common column types, loaded
    without the loader's own overhead (same results: the tests compare with psycopg's SELECT)."""
    def text(data: bytes) -> str:
        return data.decode(codec)

    return {**dict.fromkeys(_TEXT_OIDS, text), 20: int, 21: int, 23: int}


def text_value(kind: str, data: bytes | None, encoding: str = UTF8) -> Any:
    """The untyped value of a tuple column: ``None`` for ``'n'``, :data:`UNCHANGED_TOAST` for ``'u'``, the
    text (``str``, decoded in the client ``encoding``) for ``'t'``, the raw ``bytes`` for ``'b'``."""
    if kind == "n":
        return None
    if kind == "u":
        return UNCHANGED_TOAST
    if kind == "t":
        if data is None:
            raise ValueError("a text column ('t') without data")
        return data.decode(text_codec(encoding))
    return data


@dataclass(frozen=True)
class RowSchema:
    """What loading a tuple needs, fixed when the change arrived: the Relation message then in force, and
    the Type message (or ``None``) then known for each of its columns' type OIDs."""

    relation: Any  # Relation
    types: tuple[Any, ...]  # Type | None per column

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.relation.columns]


def _adapters(codec: str) -> Any:
    """The loaders replwire uses: a copy of psycopg's with its own for the types psycopg's lose information
    of -- ``json``/``jsonb`` as :class:`JsonText`, ``interval`` as :class:`Interval`, binary ``money`` as the
    integer of the send function (the amount in the currency's smallest unit) -- and, for text not in UTF-8,
    text loaders that decode in ``codec`` (see the module docstring).  Arrays of these types load through
    them too."""
    import psycopg
    from psycopg.adapt import AdaptersMap, Loader
    from psycopg.pq import Format

    class TextLoader(Loader):
        def load(self, data: Any) -> str:
            return bytes(data).decode(codec)

    class TextBinaryLoader(TextLoader):
        format = Format.BINARY

    class JsonLoader(Loader):
        def load(self, data: Any) -> JsonText:
            return JsonText(bytes(data).decode(codec))

    class JsonBinaryLoader(JsonLoader):
        format = Format.BINARY

    class JsonbBinaryLoader(JsonLoader):
        format = Format.BINARY

        def load(self, data: Any) -> JsonText:  # a version byte (1), then the text
            if not data or data[0] != 1:
                raise ValueError(f"unknown jsonb binary format: {bytes(data[:1])!r}")
            return super().load(data[1:])

    class IntervalLoader(Loader):
        def load(self, data: Any) -> Interval:
            parts = interval_parts(bytes(data))
            if parts is None:
                raise ValueError(f"not an interval text replwire reads: {bytes(data)!r}")
            return Interval(*parts)

    class IntervalBinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> Interval:
            return _interval_binary(bytes(data))

    class Float4BinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> float:
            return float4(bytes(data))

    class MoneyBinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> int:  # cash_send: int64
            return int.from_bytes(bytes(data), "big", signed=True)

    adapters = AdaptersMap(psycopg.adapters)
    for name in ("json", "jsonb"):
        adapters.register_loader(name, JsonLoader)
    adapters.register_loader("json", JsonBinaryLoader)
    adapters.register_loader("jsonb", JsonbBinaryLoader)
    adapters.register_loader("interval", IntervalLoader)
    adapters.register_loader("interval", IntervalBinaryLoader)
    adapters.register_loader("money", MoneyBinaryLoader)
    adapters.register_loader("float4", Float4BinaryLoader)
    if codec == UTF8:
        return adapters
    adapters.register_loader(0, TextLoader)  # a type psycopg has no loader for: its text
    for name in ("text", "varchar", "bpchar", "name", '"char"'):
        adapters.register_loader(name, TextLoader)
        adapters.register_loader(name, TextBinaryLoader)
    return adapters


#: Built-in types psycopg's registry has (a test checks it), resolved without importing psycopg: bool,
#: bytea, name, int8, int2, int4, text, json, float4, float8, bpchar, varchar, date, time, timestamp,
#: timestamptz, numeric, uuid, jsonb.
_BUILTIN = frozenset({16, 17, 19, 20, 21, 23, 25, 114, 700, 701, 1042, 1043, 1082, 1083, 1114, 1184, 1700, 2950,
                      3802})


def _psycopg() -> tuple[Any, Any, Any]:
    try:
        from psycopg.adapt import Transformer
        from psycopg.postgres import types as registry
        from psycopg.pq import Format
    except ImportError as error:  # pragma: no cover - exercised by a subprocess test
        raise TypedValuesUnavailable(
            f"typed values need psycopg 3: {install_hint('values')} (or ask for untyped values: "
            "typed=False gives str for 't' and bytes for 'b' columns)") from error
    return Transformer, registry, Format


class ValueLoader:
    """Loads tuple columns by type OID through psycopg's loaders (see the module docstring for the rules).

    One instance caches its loaders; it holds no connection.  ``encoding`` is the client encoding of the
    text (PostgreSQL's name or Python's, as for :func:`replwire.codec.parse`).  ``load(column, type_id,
    type_message)`` loads one :class:`~replwire.codec.TupleColumn`; :meth:`load_row` a whole tuple into a dict.
    """

    def __init__(self, encoding: str = UTF8) -> None:
        self.encoding = text_codec(encoding)
        if importlib.util.find_spec("psycopg") is None:
            _psycopg()  # says what to install
        self._text_fast = _text_fast(self.encoding)
        self._loaders: dict[tuple[int | None, str], Any] = {}
        self._resolved: dict[tuple[int, tuple[str, str] | None], int | None] = {}
        self._kinds: dict[int, tuple[str, int] | None] = {}
        self._layout = _Layout(self._kind)
        self._psycopg: tuple[Any, Any, Any] | None = None  # registry, transformer, formats: imported when needed

    def _ready(self) -> tuple[Any, Any, Any]:
        """psycopg's type registry, a transformer with the loaders of :func:`_adapters` and the formats by
        kind (psycopg is imported on first need: many streams have only the types :data:`_BUILTIN`)."""
        if self._psycopg is None:
            Transformer, registry, Format = _psycopg()
            self._psycopg = (registry, Transformer(_adapters(self.encoding)),
                             {"t": Format.TEXT, "b": Format.BINARY})
        return self._psycopg

    @property
    def _registry(self) -> Any:
        """psycopg's type registry."""
        return self._ready()[0]

    def resolve(self, type_id: int, type_message: Any = None) -> int | None:
        """The built-in type OID a column of ``type_id`` loads as, or ``None`` to keep text/bytes.

        ``type_message`` is the Type message for ``type_id`` (its base type's namespace and name), if any.
        """
        key = (type_id, None if type_message is None else (type_message.namespace, type_message.name))
        if key in self._resolved:
            return self._resolved[key]
        oid: int | None = None
        if type_id in _BUILTIN:
            oid = type_id
        elif type_id < 10000 and self._ready()[0].get(type_id) is not None:
            oid = type_id  # a built-in type (FirstGenbkiObjectId = 10000; built-ins never get a Type message)
        elif type_message is not None and type_message.namespace in ("", "pg_catalog"):
            name = type_message.name
            registry = self._ready()[0]
            info = registry.get(name)
            if info is not None:
                oid = info.oid
            elif name.startswith("_"):  # an array of a built-in type, by its pg_type name
                element = registry.get(name[1:])
                if element is not None and element.array_oid:
                    oid = element.array_oid
        self._resolved[key] = oid
        return oid

    def _kind(self, oid: int) -> tuple[str, int] | None:
        """What the built-in type ``oid`` is made of: ``("array", element OID)``, ``("range", subtype OID)``,
        ``("multirange", range OID)``, or ``None`` for any other type."""
        if oid in _BUILTIN:
            return None
        if oid not in self._kinds:
            info = self._registry.get(oid)
            kind: tuple[str, int] | None = None
            if info is not None and info.array_oid == oid:
                kind = ("array", info.oid)
            elif info is not None and info.oid == oid and getattr(info, "range_oid", None):
                kind = ("multirange", info.range_oid)
            elif info is not None and info.oid == oid and getattr(info, "subtype_oid", None):
                kind = ("range", info.subtype_oid)
            self._kinds[oid] = kind
        return self._kinds[oid]

    def _loader(self, oid: int | None, kind: str) -> Any:
        loader = self._loaders.get((oid, kind))
        if loader is None:
            _, transformer, formats = self._ready()
            loader = transformer.get_loader(oid if oid is not None else 0, formats[kind])
            self._loaders[(oid, kind)] = loader
        return loader

    def load(self, kind: str, data: bytes | None, type_id: int, type_message: Any = None) -> Any:
        """One column's value (``kind`` and ``data`` as on the wire)."""
        if kind == "n":
            return None
        if kind == "u":
            return UNCHANGED_TOAST
        if kind not in ("t", "b") or data is None:
            raise ValueError(f"not a tuple column kind with data: {kind!r}")
        oid = self.resolve(type_id, type_message)
        if oid is None:
            return data.decode(self.encoding) if kind == "t" else bytes(data)
        if kind == "t":
            fast = self._text_fast.get(oid)
            if fast is not None:
                return fast(data)
        if oid in _INFINITE_BINARY:
            special = _INFINITE_TEXT.get(data) if kind == "t" else _INFINITE_BINARY[oid].get(bytes(data))
            if special is not None:
                return special
        if kind == "b":
            fault = self._layout.fault(oid, bytes(data))
            if fault is not None:
                return RawValue(type_id, kind, bytes(data), f"malformed binary value: {fault}")
        try:
            return self._loader(oid, kind).load(data)
        except Exception as error:  # noqa: BLE001 - psycopg's DataError and friends: keep the value whole
            return RawValue(type_id, kind, bytes(data), f"{type(error).__name__}: {error}",
                            self._binary_text(oid, bytes(data)) if kind == "b" else None)

    def _binary_text(self, oid: int, data: bytes, depth: int = 0) -> str | None:
        """The server's text of a binary value (already checked against its layout) psycopg cannot load,
        where replwire can write it as the server does: a date, timestamp or timestamptz (in UTC) outside
        Python's years 1-9999, a range or multirange with such a bound; else ``None``."""
        if oid == _DATE:
            return _date_server_text(int.from_bytes(data, "big", signed=True))
        if oid in (_TIMESTAMP, _TIMESTAMPTZ):
            return _timestamp_server_text(int.from_bytes(data, "big", signed=True), oid == _TIMESTAMPTZ)
        kind = self._kind(oid)
        if kind is None or depth >= _NESTING:
            return None
        what, inner = kind
        if what == "range":
            flags, at, bounds = data[0], 1, []
            if flags & _RANGE_EMPTY:
                return "empty"
            for flag in (_RANGE_LB_INF, _RANGE_UB_INF):
                if flags & flag:
                    bounds.append("")
                    continue
                length = _int32(data, at)
                bound = self.load("b", data[at + 4:at + 4 + length], inner)
                at += 4 + length
                if isinstance(bound, RawValue):
                    if bound.text is None:
                        return None
                    text = bound.text
                else:
                    text = str(bound) if isinstance(bound, Infinite) else _bound_text(bound)
                bounds.append(_range_quote(text))
            lower_inc, upper_inc = flags & 0x02, flags & 0x04  # RANGE_LB_INC, RANGE_UB_INC
            return f"{'[' if lower_inc else '('}{bounds[0]},{bounds[1]}{']' if upper_inc else ')'}"
        if what == "multirange":
            count, at, parts = _int32(data, 0), 4, []
            for _ in range(count):
                length = _int32(data, at)
                part = self._range_or_text(inner, data[at + 4:at + 4 + length], depth + 1)
                if part is None:
                    return None
                parts.append(part)
                at += 4 + length
            return "{" + ",".join(parts) + "}"
        return None

    def _range_or_text(self, oid: int, data: bytes, depth: int) -> str | None:
        value = self.load("b", data, oid)
        if isinstance(value, RawValue):
            return value.text if value.text is not None else self._binary_text(oid, data, depth)
        return server_text(value)

    def load_row(self, schema: RowSchema, columns: Any, *, only_keys: bool = False) -> dict[str, Any]:
        """A tuple as ``{column name: value}``; ``only_keys`` keeps just the replica-identity key columns."""
        out: dict[str, Any] = {}
        for meta, type_message, column in zip(schema.relation.columns, schema.types, columns):
            if only_keys and not meta.flags & 1:
                continue
            out[meta.name] = self.load(column.kind, column.data, meta.type_id, type_message)
        return out


def untyped_row(schema: RowSchema, columns: Any, *, only_keys: bool = False, encoding: str = UTF8) -> dict[str, Any]:
    """Like :meth:`ValueLoader.load_row`, with :func:`text_value` instead of psycopg (no dependency)."""
    return {meta.name: text_value(column.kind, column.data, encoding)
            for meta, column in zip(schema.relation.columns, columns) if not only_keys or meta.flags & 1}
