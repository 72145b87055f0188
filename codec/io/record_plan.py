"""Where a capture record's parts lie: a plan derived once from the record's declaration.

Strategy: capture files hold hundreds of thousands of records, too many to parse one by one with construct,
so the readers and the writer of :mod:`~replwire.codec.io.capture_file` go by a :class:`RecordPlan`: one
``struct`` format for the record's fixed fields and its data's length, the data, then the CRC-32.  The plan
is derived from the walker's layout of :data:`~replwire.schema.capture.RECORD` (:func:`record_plan`), which
refuses any other shape, so a change to the declaration cannot be misread silently; a test checks that the
plan agrees with construct's parse and build.  :func:`record_frame` gives the same plan as numbers, for the
readers of the records' bytes in C.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ...schema import capture as layout
from .. import walker

__all__ = ["RECORD_PLAN", "RecordPlan", "record_frame", "record_plan"]


@dataclass(frozen=True)
class RecordPlan:
    """Where a record's parts lie, derived from the walker's layout of the record declaration.

    ``head`` unpacks the fixed fields (``names``) and then the length of the length-prefixed field
    ``data``; the data follows the head, and the CRC-32 (``crc``) of head and data follows the data.
    """

    head: struct.Struct
    names: tuple[str, ...]
    data: str
    crc: struct.Struct


def record_plan(declaration: Any) -> RecordPlan:
    """The :class:`RecordPlan` of a record declared as one checksummed record of fixed-size integers
    followed by one length-prefixed field (the shape of :data:`~replwire.schema.capture.RECORD`); any other
    shape raises :class:`~replwire.codec.walker.UnknownConstruct`, so a change to the declaration cannot be
    misread silently."""
    outer = walker.node(declaration)
    if not (isinstance(outer, walker.Record) and len(outer.fields) == 1
            and isinstance(outer.fields[0].node, walker.Checksummed)
            and isinstance(outer.fields[0].node.node, walker.Record)):
        raise walker.UnknownConstruct(f"a capture record must be one checksummed record, not {outer!r}")
    *fixed, last = outer.fields[0].node.node.fields
    ints = [f.node for f in fixed if isinstance(f.node, walker.Int)]
    if len(ints) != len(fixed) or not isinstance(last.node, walker.LengthPrefixed):
        raise walker.UnknownConstruct("a capture record's fields must be integers, then one length-prefixed "
                                      f"field: {[type(f.node).__name__ for f in (*fixed, last)]}")
    head = ">" + "".join(i.format for i in ints) + last.node.length.format
    # walker.Checksummed: the record's bytes are followed by their CRC-32 (zlib's), a big-endian Int32
    return RecordPlan(struct.Struct(head), tuple(f.name for f in fixed), last.name, struct.Struct(">L"))


#: The plan of :data:`~replwire.schema.capture.RECORD`, which every capture file's records are read and
#: written by.
RECORD_PLAN = record_plan(layout.RECORD)


def record_frame() -> tuple[int, int, int, int, int, int]:
    """Where a record's parts lie, from its plan, for readers of the records' bytes in C (the compiled row
    path): the head's size, the offset and size of the LSN in it, those of the data's length, then the
    size of the CRC-32 that follows the data."""
    codes = RECORD_PLAN.head.format.lstrip(">")
    lsn = RECORD_PLAN.names.index("lsn")

    def at(i: int) -> int:
        return struct.calcsize(">" + codes[:i])

    head = RECORD_PLAN.head.size
    return head, at(lsn), at(lsn + 1) - at(lsn), at(len(codes) - 1), head - at(len(codes) - 1), RECORD_PLAN.crc.size
