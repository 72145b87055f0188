"""The server's text of values replwire holds in binary form: what PostgreSQL's output functions write.

Strategy: a binary date, timestamp or timestamptz outside the years psycopg can load (1-9999), or a range
with such a bound, is kept as a :class:`~replwire.codec.stream.value_types.RawValue`; so that ``str()`` of it
reads as a text-mode capture would, this module writes the text the server's ``date_out``,
``timestamp_out``/``timestamptz_out`` (UTC, ``ISO, MDY``) and ``range_out``/``multirange_out`` give, from the
day or microsecond counts themselves (proleptic Gregorian, year 0 being 1 BC), without ``datetime``'s
range limits.  :func:`server_text` is the entry point for a value already loaded.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

__all__ = ["bound_text", "date_server_text", "range_quote", "server_text", "timestamp_server_text"]

_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1
_USECS_PER_SECOND = 1_000_000


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


def date_server_text(days: int) -> str:
    """date_out's text (DateStyle ISO) of date_send's day count from 2000-01-01, years before 1 as BC."""
    if days == _INT32_MAX or days == -_INT32_MAX - 1:
        return "infinity" if days > 0 else "-infinity"
    year, month, day = _civil(days)
    return f"{year if year > 0 else 1 - year:04d}-{month:02d}-{day:02d}{'' if year > 0 else ' BC'}"


def timestamp_server_text(microseconds: int, zone: bool) -> str:
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


def bound_text(value: Any) -> str:
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


def range_quote(text: str) -> str:
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
    lower = "" if value.lower is None else range_quote(bound_text(value.lower))
    upper = "" if value.upper is None else range_quote(bound_text(value.upper))
    return f"{'[' if value.lower_inc else '('}{lower},{upper}{']' if value.upper_inc else ')'}"
