"""Snapshot and backfill records: the capture file's records of table rows, built, parsed and read as rows.

Strategy: the record kinds are declared in :mod:`replwire.schema.capture` (``SNAPSHOT_RECORDS``); this
module builds and parses them through those declarations, and turns a section back into changes.  A
``SnapshotTable`` record holds the Relation (and Type) messages pgoutput would send for the table, so its
rows are read exactly like the columns of an Insert: each row of a ``SnapshotRows`` record -- COPY's text
or binary form -- becomes the wire columns of an Insert (``'t'`` or ``'b'``, ``'n'`` for NULL), which the
caller's :class:`~replwire.codec.stream.decoder.Decoder` and
:class:`~replwire.codec.stream.assembler.ChangeMaker` type as they type inserts; the change's ``op`` is
``"snapshot"`` and its ``lsn`` the snapshot's consistent point.  COPY's text form escapes backslash,
tab, newline, carriage return, backspace, form feed and vertical tab with a backslash and writes NULL as
``\\N``; its binary form is, per row, an Int16 field count and per field an Int32 length (-1 for NULL)
and the value's bytes in the type's send format, the same bytes pgoutput's binary mode sends.  Every read
of a record is bounds-checked: a damaged record raises :class:`SnapshotError` naming the record kind, the
row and the byte offset.

A backfill's records (``BackfillChunk``, ``BackfillRows``, ``BackfillEnd``; see :mod:`replwire.schema.capture`)
hold rows the same way: a ``BackfillChunk`` record carries the table's Type and Relation messages as its
rows were read, which a decoder of the reader's own takes (they never replace the stream's: a chunk read
after an ``ALTER TABLE`` may be of a shape the stream has not announced yet), and each row of its
``BackfillRows`` records becomes a change with ``op`` ``"backfill"`` at the record's LSN -- the key's row as
it is there, which replaces what the key had.

The capture file's other record kind that is no pgoutput message, ``SlotConfirmed`` (:data:`CONFIRMED`:
where the slot stood, see :mod:`replwire.schema.capture`), is built and parsed here too, so that one test
(``data[0] in KINDS``) sends every such record to the same reader; it holds no rows, and
:meth:`SnapshotReader.feed` passes over it.
"""

from __future__ import annotations

import bisect
import itertools
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from construct import ConstructError

from ...schema import capture as layout
from ..errors import DecodeError, ReplwireError
from ..messages import Insert, Relation, TupleColumn, Type
from ..scalars import LSN
from ..wire.fast import COMPILED, build, parse
from .assembler import Change, ChangeMaker
from .decoder import Decoder

__all__ = ["BACKFILL", "BACKFILL_KINDS", "BEGIN", "CHUNK", "CHUNK_ROWS", "CONFIRMED", "DEFAULTS", "END", "KINDS",
           "RUN_END",
           "ROWS_RECORD", "SLOT", "TABLE", "TABLE_END", "SnapshotError", "SnapshotReader", "begin_record",
           "binary_rows", "chunk_record", "chunk_rows_record", "confirmed_record", "defaults_record", "end_record",
           "kind", "parse_record", "record_completes", "row_cuts", "rows_record", "run_end_record", "slot_record",
           "table_end_record", "table_record", "text_cuts", "text_rows"]

#: The kinds' first bytes.
BEGIN, SLOT, TABLE, ROWS_RECORD, TABLE_END, END = (ord(spec.tag) for spec in layout.SNAPSHOT_RECORDS)
#: ``SlotConfirmed``'s first byte.
CONFIRMED = ord(layout.SLOT_CONFIRMED.tag)
#: ``ColumnDefaults``' first byte.
DEFAULTS = ord(layout.COLUMN_DEFAULTS.tag)
#: The backfill kinds' first bytes (``BackfillChunk``, ``BackfillRows``, ``BackfillEnd``), and all three.
CHUNK, CHUNK_ROWS, RUN_END = (ord(spec.tag) for spec in layout.BACKFILL_RECORDS)
BACKFILL_KINDS = frozenset((CHUNK, CHUNK_ROWS, RUN_END))
#: The first byte of every capture record kind that is no pgoutput message (the snapshot section's and
#: ``SlotConfirmed``): a capture record's data is one of them when ``data and data[0] in KINDS`` (written out
#: where it is read: it runs once per record).
KINDS = frozenset(ord(spec.tag) for spec in layout.CAPTURE_RECORDS)
_SPECS = {ord(spec.tag): spec for spec in layout.CAPTURE_RECORDS}
#: The op of a snapshot row's change, and of a backfill row's.
SNAPSHOT = "snapshot"
BACKFILL = "backfill"
#: The header ``COPY ... (FORMAT binary)`` starts with (signature, flags, header extension length).
BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)


class SnapshotError(ReplwireError, ValueError):
    """A snapshot record that cannot be read: what is wrong, and where."""


def kind(data: bytes) -> str:
    """The name of a snapshot record's kind (``SnapshotRows``, ...)."""
    return _SPECS[data[0]].name


def record_completes(data: bytes, lsn: int) -> LSN | None:
    """The position a record of :data:`KINDS` (whose record has the LSN ``lsn``) completes: the consistent
    point for ``SnapshotEnd`` (the section is whole once it is durable), the position of a ``SlotConfirmed``
    (written between transactions), the record's LSN for a backfill record (its chunk's closing watermark,
    whose record comes before it: each row is whole on its own, so a chunk cut short keeps the rows it has),
    else ``None``."""
    code = data[0]
    if code in BACKFILL_KINDS:
        return LSN(lsn)
    return LSN(parse_record(data).lsn) if code == END or code == CONFIRMED else None


def parse_record(data: bytes) -> Any:
    """A snapshot record's fields (a construct container, ``tag`` included), from its declaration."""
    spec = _SPECS.get(data[0]) if data else None
    if spec is None:
        raise SnapshotError(f"not a snapshot record (first byte {data[:1].hex() or 'missing'})")
    try:
        return spec.declaration.parse(data)
    except ConstructError as error:
        raise SnapshotError(f"{spec.name}: {error}") from None


def _build(spec: Any, **fields: Any) -> bytes:
    return bytes(spec.declaration.build({"tag": None, **fields}))


def begin_record(slot: str, binary: bool) -> bytes:
    return _build(layout.SNAPSHOT_BEGIN, slot=slot, binary=int(binary))


def slot_record(lsn: LSN, snapshot_name: str) -> bytes:
    return _build(layout.SNAPSHOT_SLOT, lsn=int(lsn), snapshot_name=snapshot_name)


def table_record(relation: Relation, types: list[Type]) -> bytes:
    """The table's record: its Type messages and Relation, built with replwire's encoder (protocol 1)."""
    messages = [{"data": build(m, proto_version=1)} for m in (*types, relation)]
    return _build(layout.SNAPSHOT_TABLE, relation_id=relation.relation_id, messages=messages)


def schema_message(data: bytes, encoding: str) -> Relation | Type:
    """One of a ``SnapshotTable`` record's messages, parsed."""
    try:
        message = parse(data, proto_version=1, encoding=encoding)
    except DecodeError as error:
        raise SnapshotError(f"SnapshotTable: {error}") from None
    if not isinstance(message, (Relation, Type)):
        raise SnapshotError(f"SnapshotTable: a {type(message).__name__} message where a Relation or Type belongs")
    return message


def rows_record(relation_id: int, binary: bool, rows: int,
                data: bytes | memoryview) -> tuple[bytes, bytes | memoryview]:
    """A ``SnapshotRows`` record's data in two pieces: its fields, then the rows ``data`` as they are.

    The rows are the declaration's last field, the rest of the record: the fields are built with it empty,
    and the rows are never copied (a :class:`~replwire.codec.io.capture_file.CaptureWriter` writes them from
    where they are)."""
    return _build(layout.SNAPSHOT_ROWS, relation_id=relation_id, binary=int(binary), rows=rows, data=b""), data


def table_end_record(relation_id: int, rows: int) -> bytes:
    return _build(layout.SNAPSHOT_TABLE_END, relation_id=relation_id, rows=rows)


def end_record(lsn: LSN, tables: int, rows: int) -> bytes:
    return _build(layout.SNAPSHOT_END, lsn=int(lsn), tables=tables, rows=rows)


def chunk_record(run: int, chunk: int, relation: Relation, types: list[Type], *, binary: bool, rows: int,
                 last: bool, cursor: str, snapshot: str, read_us: int, at_us: int, refetch: str = "") -> bytes:
    """A backfill chunk's ``BackfillChunk`` (see :data:`replwire.schema.capture.BACKFILL_CHUNK`): the table's Type
    messages and Relation, built with replwire's encoder (protocol 1), and what the chunk was."""
    messages = [{"data": build(m, proto_version=1)} for m in (*types, relation)]
    return _build(layout.BACKFILL_CHUNK, run=run, chunk=chunk, relation_id=relation.relation_id, binary=int(binary),
                  rows=rows, last=int(last), cursor=cursor, refetch=refetch, snapshot=snapshot, read_us=read_us,
                  at_us=at_us,
                  messages=messages)


def chunk_rows_record(relation_id: int, binary: bool, rows: int,
                      data: bytes | memoryview) -> tuple[bytes, bytes | memoryview]:
    """A ``BackfillRows`` record's data in two pieces, as :func:`rows_record`'s."""
    return _build(layout.BACKFILL_ROWS, relation_id=relation_id, binary=int(binary), rows=rows, data=b""), data


def run_end_record(run: int, relation_id: int, reason: int, chunks: int, rows: int, message: str = "") -> bytes:
    return _build(layout.BACKFILL_END, run=run, relation_id=relation_id, reason=reason, chunks=chunks, rows=rows,
                  message=message)


def defaults_record(relation_id: int, columns: list[tuple[str, int, str]]) -> bytes:
    """A ``ColumnDefaults`` record: the ``(name, kind, value)`` of each column (see
    :data:`~replwire.schema.capture.COLUMN_DEFAULTS`)."""
    return _build(layout.COLUMN_DEFAULTS, relation_id=relation_id,
                  columns=[{"name": name, "kind": kind, "value": value} for name, kind, value in columns])


def confirmed_record(lsn: int, at_start: bool) -> bytes:
    """A ``SlotConfirmed``: the slot's confirmed position as streaming starts (``at_start``), or a position
    acknowledged to the server."""
    return _build(layout.SLOT_CONFIRMED, lsn=int(lsn), at_start=int(at_start))


# -- COPY's row forms -------------------------------------------------------------------------------------

_ESCAPED = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.DOTALL)
_SIMPLE = {b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"v": b"\v"}


def _unescape(match: re.Match[bytes]) -> bytes:
    octal, hexa, other = match.groups()
    if octal is not None:
        return bytes((int(octal, 8) & 0xFF,))
    if hexa is not None:
        return bytes((int(hexa, 16),))
    return _SIMPLE.get(other, other)


_NULL = TupleColumn(kind="n", data=None)


def text_rows(data: bytes, width: int, what: str = "SnapshotRows") -> Iterator[list[TupleColumn]]:
    """The rows of COPY's text form (whole lines) as wire columns; each must have ``width`` fields (``what``:
    the record kind an error names)."""
    if data and not data.endswith(b"\n"):
        raise SnapshotError(f"{what}: the rows do not end with a whole line (at offset {len(data)})")
    offset = 0
    for number, line in enumerate(data.split(b"\n")[:-1]):
        fields = line.split(b"\t")
        if len(fields) != width:
            raise SnapshotError(f"{what}: row {number} (at offset {offset}) has {len(fields)} fields, "
                                f"the table {width}")
        yield [_NULL if f == b"\\N" else TupleColumn(kind="t", data=_ESCAPED.sub(_unescape, f) if b"\\" in f else f)
               for f in fields]
        offset += len(line) + 1


def _text_cuts(data: bytes, most: int) -> list[tuple[int, int]]:
    if most < 1:
        raise ValueError("text_cuts: most must be at least 1")
    cuts, start = [], 0
    while start < len(data):
        stop = data.find(b"\n", start + most - 1) + 1 or len(data)
        cuts.append((data.count(b"\n", start, stop), stop))
        start = stop
    return cuts


def text_cuts(data: bytes, most: int) -> list[tuple[int, int]]:
    """Where COPY's text rows ``data`` are cut into records of at least ``most`` bytes: each cut as ``(lines,
    end)``, its lines ending at offset ``end`` with the first line that takes it to ``most`` bytes past the
    cut before; the last cut ends at the data's end (with what follows its last newline, if anything does:
    the caller checks the data ends with one).  Compiled, it finds the newlines at ``memchr``'s pace without
    holding the GIL, so the capture's reading of the next chunk goes on meanwhile."""
    return (_text_cuts if COMPILED is None else COMPILED.text_cuts)(data, most)


def _row_cuts(rows: Sequence[bytes], most: int) -> list[tuple[int, int]]:
    if most < 1:
        raise ValueError("row_cuts: most must be at least 1")
    ends = list(itertools.accumulate(map(len, rows)))  # (the byte offset after each row)
    cuts, start = [], 0
    while start < len(rows):
        stop = min(bisect.bisect_left(ends, (ends[start - 1] if start else 0) + most, start), len(rows) - 1)
        cuts.append((stop + 1 - start, ends[stop]))
        start = stop + 1
    return cuts


def row_cuts(rows: list[bytes], most: int) -> list[tuple[int, int]]:
    """Where ``rows`` (one row's bytes each: COPY's binary tuples, or its text lines), joined, are cut into
    records of at least ``most`` bytes: each cut as ``(rows, end)``, its rows ending at offset ``end`` of the
    joined bytes with the first row that takes it to ``most`` bytes past the cut before; the last cut ends
    with the last row.  Compiled, it adds up the rows' lengths in one pass, with no object made for each."""
    return (_row_cuts if COMPILED is None else COMPILED.row_cuts)(rows, most)


_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")


def binary_rows(data: bytes, width: int, what: str = "SnapshotRows") -> Iterator[list[TupleColumn]]:
    """The rows of COPY's binary form (whole tuples, no header or trailer) as wire columns (``what``: the
    record kind an error names)."""
    size, i, number = len(data), 0, 0
    while i < size:
        if i + 2 > size:
            raise SnapshotError(f"{what}: row {number} cut short at offset {i}")
        (count,) = _INT16.unpack_from(data, i)
        if count != width:
            raise SnapshotError(f"{what}: row {number} (at offset {i}) has {count} fields, the table {width}")
        i += 2
        row = []
        for _ in range(count):
            if i + 4 > size:
                raise SnapshotError(f"{what}: row {number} cut short at offset {i}")
            (length,) = _INT32.unpack_from(data, i)
            i += 4
            if length == -1:
                row.append(_NULL)
                continue
            if length < 0 or i + length > size:
                raise SnapshotError(f"{what}: row {number}: a field of {length} bytes at offset {i} runs "
                                    f"past the record's {size}")
            row.append(TupleColumn(kind="b", data=data[i:i + length]))
            i += length
        yield row
        number += 1


# -- reading a section back ---------------------------------------------------------------------------------


@dataclass
class SectionState:
    """Where a reader stands in a snapshot section: the slot, the consistent point, whether it is binary,
    and whether the section ended."""

    slot: str
    binary: bool
    lsn: LSN | None = None
    complete: bool = False


class SnapshotReader:
    """Turns the records of snapshot sections into ``"snapshot"`` changes (see the module docstring).

    ``decoder`` takes the section's Type and Relation messages into its caches (the decoder of the stream,
    so that the changes after the section know them too, or one of its own); ``maker`` types the rows.
    :meth:`feed` takes a record's data (and its LSN) and returns the changes it holds.  ``section`` is the
    section being read, or the last one.
    """

    def __init__(self, decoder: Decoder, maker: ChangeMaker) -> None:
        self.decoder, self.maker = decoder, maker
        self.section: SectionState | None = None
        self.chunks = Decoder(decoder.proto_version, decoder.encoding)  # the shapes backfill chunks were read in

    def feed(self, data: bytes, lsn: int | None = None) -> list[Change]:
        code = data[0]
        if code == ROWS_RECORD or code == CHUNK_ROWS:
            return list(self.rows(data, lsn))
        fields = parse_record(data)
        if code == CONFIRMED or code == RUN_END:
            return []  # where the slot stood, or a backfill run's end: no rows
        if code == CHUNK:
            for item in fields.messages:
                self.chunks.remember(schema_message(item.data, self.chunks.encoding))
            return []
        if code == BEGIN:
            self.section = SectionState(fields.slot, bool(fields.binary))
        elif code == SLOT:
            self._open().lsn = LSN(fields.lsn)
        elif code == TABLE:
            self._open()
            for item in fields.messages:
                self.decoder.remember(schema_message(item.data, self.decoder.encoding))
        elif code == END:
            self._open().complete = True
        return []

    def _open(self) -> SectionState:
        if self.section is None:  # a reader that starts inside a section (a part of split decoding)
            self.section = SectionState("", False)
        return self.section

    def rows(self, data: bytes, lsn: int | None) -> Iterator[Change]:
        """The changes of one ``SnapshotRows`` or ``BackfillRows`` record."""
        fields = parse_record(data)
        backfill = data[0] == CHUNK_ROWS
        decoder = self.chunks if backfill else self.decoder
        relation = decoder.relations.get(fields.relation_id)
        if relation is None:
            raise SnapshotError(f"{kind(data)}: relation {fields.relation_id} is unknown: no "
                                f"{'BackfillChunk' if backfill else 'SnapshotTable'} record for it came before")
        at: LSN | None
        if backfill:
            if not lsn:
                raise SnapshotError("BackfillRows: a record without an LSN (its chunk's position)")
            at, op = LSN(lsn), BACKFILL
        else:
            at, op = (LSN(lsn) if lsn else self._open().lsn), SNAPSHOT
        width = len(relation.columns)
        body = bytes(fields.data)
        parse = binary_rows if fields.binary else text_rows
        schema = None
        maker = self.maker
        count = 0
        for columns in parse(body, width, kind(data)):
            message = Insert(xid=None, relation_id=fields.relation_id, new=columns)
            if schema is None:
                schema = maker.schema_for(decoder, message)
            change = maker.change(message, schema, at, None)
            change.op = op
            count += 1
            yield change
        if count != fields.rows:
            raise SnapshotError(f"{kind(data)}: the record says {fields.rows} rows, its data holds {count}")
