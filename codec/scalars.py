"""The two scalar types of the protocol that deserve more than ``int``: :class:`LSN` and :class:`Timestamp`.

Strategy: both are ``int`` subclasses holding the exact wire integer, so every value round-trips and
arithmetic and comparisons just work; they add the text forms PostgreSQL uses.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

__all__ = ["LSN", "Timestamp"]

_LSN_TEXT = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")

#: 2000-01-01 00:00:00 UTC, the origin of PostgreSQL timestamps.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)


class LSN(int):
    """A WAL position (``XLogRecPtr``): an unsigned 64-bit integer that prints as PostgreSQL does.

    Examples:
        >>> LSN("0/16B3748")
        LSN('0/16B3748')
        >>> str(LSN(0x16B3748)), int(LSN("1/0"))
        ('0/16B3748', 4294967296)

    The text form is ``%X/%X`` (upper-case hex, high and low 32 bits, no padding); parsing accepts one to
    eight hex digits on each side in either case, so the zero-padded form of newer servers reads too.
    """

    __slots__ = ()

    def __new__(cls, value: int | str = 0) -> LSN:
        if isinstance(value, str):
            match = _LSN_TEXT.fullmatch(value.strip())
            if match is None:
                raise ValueError(f"not an LSN: {value!r} (expected hex/hex, e.g. '0/16B3748')")
            value = (int(match.group(1), 16) << 32) | int(match.group(2), 16)
        elif isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"an LSN is an int or 'X/X' text, not {type(value).__name__}")
        if not 0 <= value <= 0xFFFF_FFFF_FFFF_FFFF:
            raise ValueError(f"an LSN is an unsigned 64-bit integer, got {value}")
        return super().__new__(cls, value)

    def __str__(self) -> str:
        return f"{int(self) >> 32:X}/{int(self) & 0xFFFF_FFFF:X}"

    def __repr__(self) -> str:
        return f"LSN('{self}')"


class Timestamp(int):
    """A PostgreSQL ``TimestampTz`` on the wire: signed microseconds since 2000-01-01 00:00:00 UTC.

    The exact wire integer is kept, so every Int64 round-trips, including the ±infinity values
    (the Int64 extremes) that ``datetime`` cannot hold.

    Examples:
        >>> t = Timestamp("2026-11-21T07:35:12.5+00:00")
        >>> int(t), t.to_datetime().isoformat()
        (848561712500000, '2026-11-21T07:35:12.500000+00:00')
    """

    __slots__ = ()

    #: The wire value of ``'infinity'``.
    INFINITY = 2**63 - 1
    #: The wire value of ``'-infinity'``.
    NEG_INFINITY = -(2**63)

    def __new__(cls, value: int | str | datetime = 0) -> Timestamp:
        if isinstance(value, datetime):
            return cls.from_datetime(value)
        if isinstance(value, str):
            text = value.strip()
            if text == "infinity":
                value = cls.INFINITY
            elif text == "-infinity":
                value = cls.NEG_INFINITY
            else:
                return cls.from_datetime(datetime.fromisoformat(text))
        elif isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"a Timestamp is an int, ISO 8601 text or datetime, not {type(value).__name__}")
        if not cls.NEG_INFINITY <= value <= cls.INFINITY:
            raise ValueError(f"a Timestamp is a signed 64-bit integer, got {value}")
        return super().__new__(cls, value)

    @classmethod
    def from_datetime(cls, value: datetime) -> Timestamp:
        """The wire value of an aware ``datetime`` (a naive one is refused: the wire is UTC)."""
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("a naive datetime has no defined wire value; give it a tzinfo")
        delta = value - PG_EPOCH
        return cls((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)

    @property
    def is_infinite(self) -> bool:
        """True for ``'infinity'`` and ``'-infinity'``."""
        return int(self) in (self.INFINITY, self.NEG_INFINITY)

    def to_datetime(self) -> datetime:
        """The instant as an aware ``datetime`` in UTC.

        Raises ``ValueError`` for ±infinity and for values outside ``datetime``'s years 1 to 9999.
        """
        if self.is_infinite:
            raise ValueError(f"{self} has no datetime")
        try:
            return PG_EPOCH + timedelta(microseconds=int(self))
        except OverflowError:
            raise ValueError(f"timestamp {int(self)} is outside datetime's range") from None

    def __str__(self) -> str:
        if int(self) == self.INFINITY:
            return "infinity"
        if int(self) == self.NEG_INFINITY:
            return "-infinity"
        try:
            return self.to_datetime().isoformat()
        except ValueError:
            return str(int(self))

    def __repr__(self) -> str:
        text = str(self)
        return f"Timestamp({text!r})" if text != str(int(self)) else f"Timestamp({int(self)})"
