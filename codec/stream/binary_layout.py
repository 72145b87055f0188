"""The layouts of PostgreSQL's binary send functions, checked before a value reaches a loader.

Strategy: psycopg's compiled binary loaders read their type's width without looking at the value's length
(a 4-byte ``float8`` would be read past its end), so every binary (``'b'``) column is checked here first.
A fixed-width type (:data:`BINARY_WIDTHS`, the bytes PostgreSQL's send function writes) must have exactly
that length; a ``numeric`` its 8-byte header and as many digits as the header counts; an array
(``array_send``), a range, a multirange and a ``record`` a header and parts that fit the value exactly,
each part checked in turn as a value of its type, down to a fixed depth.  :class:`BinaryLayout` says why a
value does not fit (a sentence naming the type and the lengths) or ``None``; what the caller does with a
value that does not fit (keep it whole as a :class:`~replwire.codec.stream.value_types.RawValue`) is the
loader's.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

__all__ = ["BINARY_WIDTHS", "NESTING", "RANGE_EMPTY", "RANGE_LB_INF", "RANGE_UB_INF", "BinaryLayout", "read_int32"]


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
NESTING = 16  # deepest nesting of arrays, ranges and records checked (each level takes bytes of the value)
# range_send's flags (utils/rangetypes.h): RANGE_EMPTY, RANGE_LB_INF, RANGE_UB_INF
RANGE_EMPTY, RANGE_LB_INF, RANGE_UB_INF = 0x01, 0x08, 0x10
_ARRAY_HEAD = struct.Struct(">iiI")  # array_send's ndim, has-nulls flag, element OID
_ARRAY_DIMS = [struct.Struct(f">{2 * n}i") for n in range(_MAXDIM + 1)]  # (length, lower bound) per dimension


def read_int32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 4], "big", signed=True)


class BinaryLayout:
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
        if depth >= NESTING:
            return f"a binary value nested more than {NESTING} deep"
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
        length = read_int32(data, at)
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
                length = read_int32(data, at) if at + 4 <= size else -2
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
        if not flags & RANGE_EMPTY:
            for flag, what in ((RANGE_LB_INF, "the lower bound"), (RANGE_UB_INF, "the upper bound")):
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
        count, at = read_int32(data, 0), 4
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
        count, at = read_int32(data, 0), 4
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
