"""The Python values replwire gives where psycopg's own would lose something, and its markers.

Strategy: each class here is the value of one case :class:`~replwire.codec.stream.values.ValueLoader`
cannot leave to psycopg, kept small and immutable so it compares, hashes and pickles as a value:
:data:`UNCHANGED_TOAST` (an unchanged TOASTed column the server did not send, never mistaken for NULL),
:data:`INFINITY`/:data:`NEG_INFINITY` (the infinities of dates and timestamps, which psycopg refuses),
:class:`Interval` (months, days and microseconds apart, as the server keeps them), :class:`JsonText` (the
server's JSON text, unparsed) and :class:`RawValue` (a value psycopg raised on, kept whole).  The parsers of
the interval's text and binary forms and of a binary ``float4`` are here beside the types they make; which
column becomes which is the loader's business, not this module's.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
from dataclasses import dataclass
from typing import Any

__all__ = ["INFINITY", "NEG_INFINITY", "UNCHANGED_TOAST", "Infinite", "Interval", "JsonText", "RawValue",
           "UnchangedToast", "float4", "interval_binary", "interval_iso", "interval_parts"]


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


def interval_binary(data: bytes) -> Interval:
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
