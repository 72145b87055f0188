"""The change rows of a part, with the compiled codec writing the columns of its plain and streamed
transactions.

Strategy: :func:`part_changes` gives what :func:`~replwire.codec.split.decode.decode_part` gives (with
``rows=False``), in the same order, but each run of plain transactions and stream blocks that the compiled
codec's column path (``rows_columns``, see its C twin ``codec/split/columns.c``) takes comes as one
:class:`ColumnRun`: the change rows' columns as buffers, ready to be wrapped as Arrow arrays
(:mod:`replwire.spark.rows`), with no Python object per change.  The column path runs only between
transactions (the decoder idle), with a plan for every relation the decoder knows, over whole transactions,
whole Stream Start ... Stream Stop blocks and the Stream Commits and Stream Aborts between them; it stops
at the start of anything else, and the records from there go to a
:class:`~replwire.codec.split.decode.PartDecoder` until the decoder is idle again (the alternation is
:class:`~replwire.codec.split.compiled_path.CompiledPath`'s).  What it takes leaves the decoder as it found
it, so the records are only counted (``Decoder.skip``) -- but for a Relation a block sends again (PostgreSQL
sends each table's again in every streamed transaction): the C takes one only where it is the decoder's but
for the streamed xid (the plan stays right), and hands its bytes back for the decoder's cache, as the Python
path would have taken it.  A stream block, a Stream Commit or a Stream Abort changes which streamed
transactions the router holds open, so the C keeps the router's own dict of them (``Router.streams``) as
the router would: the Python path after it finds the router exactly as if it had routed those records,
with no list of what happened to replay.  A streamed change's facts are its
transaction's outcome's (the first pass found them; its Stream Commit may lie in a later part): the C gets
them by key (:func:`_streamed_facts`) for the streamed transactions it may write -- no origin, not
two-phase -- and leaves the blocks of the others to the Python path.  Without the compiled codec, or for
input not in UTF-8, everything goes to :func:`decode_part`.  Nothing here knows about Arrow or Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ...schema.encodings import UTF8
from ..errors import EncodeError
from ..gc_tuning import fewer_collections
from ..messages import Relation
from ..stream.assembler import relation_namespace
from ..stream.decoder import IDLE
from ..stream.jsonl import RowJson
from ..stream.outcome import Outcome
from ..stream.values import RowSchema, ValueLoader
from ..wire.fast import COMPILED, build, parse
from ..wire.gen.column_buffers import BUFFERS
from .compiled_path import CompiledPath
from .decode import Decoded, PartDecoder, decode_part
from .parts import PackedOutcomes, Part

__all__ = ["BUFFERS", "ColumnRun", "part_changes"]



@dataclass(slots=True)
class ColumnRun:
    """The change rows of a run of plain and streamed transactions as column buffers in Arrow's layout:
    ``rows`` of them, each of the shape ``shapes[shape]`` (op, schema, table, relation id).  ``buffers``, in
    order: the rows' shapes (int32: slot * 3 + 0 insert, 1 update, 2 delete), LSNs (int64) and their
    validity, positions, their transaction's xid, commit LSN, end LSN, commit time (int64 microseconds from
    1970-01-01 UTC) and its validity; then new, old and key (each a validity, int32 offsets, UTF-8 text);
    unchanged_toast's validity and int32 offsets into the names, whose int32 offsets and UTF-8 text come next
    (:data:`BUFFERS` names them all).  A validity is a bitmap, ``None`` where every row is valid.  A run of
    cells (see :func:`part_changes`) has its row images as cells instead, and new, old, key and
    unchanged_toast empty: per row the index of its new tuple's first cell and of its old or key tuple's
    (int32, -1 for none), and per cell its kind (``n``, ``u``, ``t`` or ``b``), int32 offsets and bytes; a
    tuple is as many cells in a row as its relation has columns.  Last, each row's ``subxid`` (int64; valid
    for a streamed transaction's change only: that change's xid, its transaction's the top-level ``xid``)
    and its validity."""

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
    with the runs of plain and streamed transactions the column path takes as :class:`ColumnRun` s of about ``rows``
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
        self.streams = self.decoding.router.streams  # (the C keeps it as the router does)
        self.facts = _streamed_facts(part.outcome_table())
        self.base = part.source.position(0)
        self.shapes: list[tuple[str, str, str, int]] = []
        self.widths: list[int] = []
        self.relations: list[bytes] = []  # the Relations the C took in stream blocks, for the decoder's cache

    def ready(self) -> bool:
        return self.decoding.decoder.state == IDLE

    def take(self, data: memoryview, eof: bool, at: int) -> tuple[int, int, bool, ColumnRun | None]:
        decoder = self.decoding.decoder
        consumed, records, rows, declined, buffers = COMPILED.rows_columns(
            data, eof, self.plans(decoder, self.decoding.maker), decoder.proto_version, self.frame, self.base | at,
            self.outcomes, self.dropped, self.rows, _MOST_TEXT, self.cells, self.streams, self.facts, self.relations)
        if records:
            decoder.skip(records)
        if self.relations:
            # sent again in a block, each the decoder's but for the streamed xid: the decoder's cache takes it,
            # as the Python path's would; the plan stays (made for the same relation)
            for sent in self.relations:
                relation = parse(sent, proto_version=decoder.proto_version, in_stream=True, encoding=decoder.encoding)
                assert isinstance(relation, Relation)  # (the C takes only a Relation equal to one the decoder has)
                decoder.remember(relation)
                made = self._planned.get(relation.relation_id)
                if made is not None:
                    self._planned[relation.relation_id] = (relation, made[1])
            self.relations.clear()
        return consumed, records, declined, ColumnRun(rows, buffers, self.shapes, self.widths) if rows else None

    def python(self, records: Iterator[Any]) -> Iterator[Decoded]:
        return self.decoding.decode(records)

    def plan(self, relation_id: int, relation: Relation, schema: RowSchema) -> tuple[Any, ...]:
        """The plan, the relation's slot in ``shapes``, and the relation's message as sent outside a stream
        (the C takes a Relation in a stream block that is the same but for the streamed xid)."""
        plan = COMPILED.rows_plan((b"", b"", b""), self.json.plan_columns(schema))
        slot = len(self.shapes) // 3
        self.shapes += [(op, relation_namespace(relation), relation.name, relation_id) for op in _OPS]
        self.widths.append(len(relation.columns))
        streamed = relation.xid is not None
        try:
            sent = build(relation, proto_version=self.decoding.decoder.proto_version, in_stream=streamed,
                         encoding=self.decoding.decoder.encoding)
        except (EncodeError, UnicodeEncodeError):  # (no plan for its Relation in a block: the Python path's)
            return plan, slot
        return plan, slot, sent[:1] + sent[5:] if streamed else sent


def _streamed_facts(outcomes: Mapping[int, Outcome]) -> dict[int, tuple[int, int, int, int]]:
    """The facts the column path writes a streamed transaction's changes with -- xid, commit LSN, end LSN,
    commit time (the wire's microseconds) -- by key, for the streamed ones in ``outcomes`` it may write: no
    origin, not two-phase.  A part's packed outcomes keep those facts in their ``rare`` entries, which are
    few: no Outcome is made for them."""
    if isinstance(outcomes, PackedOutcomes):
        keys, xids, commit_lsns, end_lsns, commit_times, rare = outcomes.packed
        return {keys[i]: (xids[i], commit_lsns[i], end_lsns[i], commit_times[i])
                for i, (origin, gid, prepare_lsn, _, streamed) in rare.items()
                if streamed and origin is None and gid is None and prepare_lsn is None}
    return {key: (o.xid, int(o.commit_lsn), int(o.end_lsn), int(o.commit_time)) for key, o in outcomes.items()
            if o.streamed and not o.origin and o.gid is None and o.prepare_lsn is None and o.xid is not None}
