"""The change rows of a part, with the compiled codec writing the columns of its plain transactions.

Strategy: :func:`part_changes` gives what :func:`~replwire.codec.split.decode.decode_part` gives (with
``rows=False``), in the same order, but each run of plain transactions that the compiled codec's column
path (``rows_columns``, see its C twin ``codec/split/columns.c``) takes comes as one :class:`ColumnRun`: the
change rows' columns as buffers, ready to be wrapped as Arrow arrays (:mod:`replwire.spark.rows`), with no
Python object per change.  The column path runs only between transactions (the decoder idle), with a plan
for every relation the decoder knows, over whole transactions; it stops at the start of anything else,
and the records from there go to a :class:`~replwire.codec.split.decode.PartDecoder` until the decoder is
idle again (the alternation is :class:`~replwire.codec.split.compiled_path.CompiledPath`'s).  A plain
transaction leaves the router and decoder as it found them, so the records it took are only counted
(``Decoder.skip``).  Without the compiled codec, or for input not in UTF-8, everything goes to
:func:`decode_part`.  Nothing here knows about Arrow or Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...schema.encodings import UTF8
from ..gc_tuning import fewer_collections
from ..messages import Relation
from ..stream.assembler import relation_namespace
from ..stream.decoder import IDLE
from ..stream.jsonl import RowJson
from ..stream.values import RowSchema, ValueLoader
from ..wire.fast import COMPILED
from .compiled_path import CompiledPath
from .decode import Decoded, PartDecoder, decode_part
from .parts import Part

__all__ = ["BUFFERS", "ColumnRun", "part_changes"]

#: The names of a :class:`ColumnRun`'s buffers, in order (the K_ enum of columns.c).
BUFFERS = ("shape", "lsn", "lsn_ok", "position", "xid", "commit_lsn", "end_lsn", "commit_time", "time_ok", "new_ok",
           "new_off", "new", "old_ok", "old_off", "old", "key_ok", "key_off", "key", "toast_ok", "toast_off",
           "name_off", "name", "new_at", "old_at", "cell_kind", "cell_off", "cell")


@dataclass(slots=True)
class ColumnRun:
    """The change rows of a run of plain transactions as column buffers in Arrow's layout: ``rows`` of them,
    each of the shape ``shapes[shape]`` (op, schema, table, relation id).  ``buffers``, in order: the rows'
    shapes (int32: slot * 3 + 0 insert, 1 update, 2 delete), LSNs (int64) and their validity, positions,
    their transaction's xid, commit LSN, end LSN, commit time (int64 microseconds from 1970-01-01 UTC) and
    its validity; then new, old and key (each a validity, int32 offsets, UTF-8 text); unchanged_toast's
    validity and int32 offsets into the names, whose int32 offsets and UTF-8 text come next (:data:`BUFFERS`
    names them all).  A validity is a bitmap, ``None`` where every row is valid.  A run of cells (see
    :func:`part_changes`) has its row images as cells instead, and new, old, key and unchanged_toast empty:
    per row the index of its new tuple's first cell and of its old or key tuple's (int32, -1 for none), and
    per cell its kind (``n``, ``u``, ``t`` or ``b``), int32 offsets and bytes; a tuple is as many cells in a
    row as its relation has columns."""

    rows: int
    buffers: tuple[bytes | None, ...]
    shapes: list[tuple[str, str, str, int]]
    widths: list[int]  # by slot: how many columns the relation has (cells a tuple of it is)


#: How much of a part the column path reads at a time, and the most input one transaction may take in it
#: (a bigger one goes to the Python path).
_CHUNK = 1 << 20
_MOST = 16 << 20
#: The most text one run's row images may hold (its string buffers take int32 offsets).
_MOST_TEXT = 256 << 20
#: After this many tries of the column path in a row that took fewer than ``_WORTH`` records, the Python
#: path takes more records before the next (see :mod:`~replwire.codec.split.compiled_path`).
_WORTH = 32
_TRIES = 4
_OPS = ("insert", "update", "delete")


def part_changes(part: Part, rows: int = 8192, *, cells: bool = False) -> Iterator[Decoded | ColumnRun]:
    """The committed changes of ``part`` as ``decode_part(part, rows=False)`` gives them, in the same order,
    with the runs of plain transactions the column path takes as :class:`ColumnRun` s of about ``rows``
    rows (a run ends after the transaction that reaches them), their row images as JSON -- or with
    ``cells``, as the wire tuples' columns (for typed columns, :class:`replwire.spark.rows.TableRows`)."""
    if COMPILED is None or part.source.encoding != UTF8:
        yield from decode_part(part, rows=False)
        return
    with fewer_collections():
        yield from _ColumnPath(part, rows, cells).run()


class _ColumnPath(CompiledPath):
    """The column path and the Python path over one part, in turn (see the module docstring)."""

    def __init__(self, part: Part, rows: int, cells: bool) -> None:
        super().__init__(part.source, part.start, part.stop, chunk=_CHUNK, most=_MOST, worth=_WORTH,
                         tries=_TRIES)
        self.rows = rows
        self.cells = cells
        self.decoding = PartDecoder(part, rows=False)
        self.json = RowJson(ValueLoader(part.source.encoding))
        self.outcomes = part.outcome_keys()
        self.dropped = dict(part.dropped_subxacts)
        self.base = part.source.position(0)
        self.shapes: list[tuple[str, str, str, int]] = []
        self.widths: list[int] = []

    def ready(self) -> bool:
        return self.decoding.decoder.state == IDLE

    def take(self, data: memoryview, eof: bool, at: int) -> tuple[int, int, bool, ColumnRun | None]:
        decoder = self.decoding.decoder
        consumed, records, rows, declined, buffers = COMPILED.rows_columns(
            data, eof, self.plans(decoder, self.decoding.maker), decoder.proto_version, self.frame, self.base | at,
            self.outcomes, self.dropped, self.rows, _MOST_TEXT, self.cells)
        if records:
            decoder.skip(records)
        return consumed, records, declined, ColumnRun(rows, buffers, self.shapes, self.widths) if rows else None

    def python(self, records: Iterator[Any]) -> Iterator[Decoded]:
        return self.decoding.decode(records)

    def plan(self, relation_id: int, relation: Relation, schema: RowSchema) -> tuple[Any, int]:
        """The plan and the relation's slot in ``shapes``."""
        plan = COMPILED.rows_plan((b"", b"", b""), self.json.plan_columns(schema))
        slot = len(self.shapes) // 3
        self.shapes += [(op, relation_namespace(relation), relation.name, relation_id) for op in _OPS]
        self.widths.append(len(relation.columns))
        return plan, slot
