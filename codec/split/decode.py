"""The second pass of split decoding: the committed changes of one part.

Strategy: :func:`decode_part` runs the :class:`~replwire.codec.Decoder` and
:class:`~replwire.codec.stream.routing.Router` from the state a :class:`~replwire.codec.split.parts.Part`
begins in over the part's records and yields the changes whose transaction was committed (once: a
transaction seen again after a resume is skipped, as ``replwire decode`` does), each with its transaction's
:class:`~replwire.codec.stream.outcome.Outcome` and its stream *position*, which orders changes within a
transaction.  :func:`replwire.codec.decode.committed` is what one :class:`~replwire.codec.Assembler` gives over
the same inputs: ``replwire decode`` prints it, and the tests hold the parts to it.  Nothing here knows about
Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ...schema.capture import BACKFILL_PREFIX
from ..gc_tuning import fewer_collections
from ..io.segments import read_records
from ..messages import Message
from ..scalars import LSN, Timestamp
from ..stream import snapshot_records
from ..stream.assembler import Change, ChangeMaker
from ..stream.outcome import Outcome
from ..stream.routing import CHANGE, LONE, Router
from .parts import Part

__all__ = ["Decoded", "PartDecoder", "decode_part"]


@dataclass(slots=True)
class Decoded:
    """One committed change from :func:`decode_part`: the change (see :class:`~replwire.codec.Change`; its
    ``row_schema`` is what its tuples' values are read with), its transaction's facts (``None`` for a
    non-transactional logical message), and its stream ``position``."""

    position: int
    change: Change
    outcome: Outcome | None


def decode_part(part: Part, *, typed: bool = True, rows: bool = True) -> Iterator[Decoded]:
    """The committed changes of one part, in stream order (see the module docstring).  ``typed=False``
    leaves the values as text (``str``) and bytes; ``rows=False`` makes no row dicts at all (``new``, ``old``
    and ``key`` stay ``None``), for callers that read the wire tuples of ``change.message`` with
    ``change.row_schema`` themselves."""
    with fewer_collections():
        yield from PartDecoder(part, typed=typed, rows=rows).decode(read_records(part.source, part.start, part.stop,
                                                                                 raw=True))


class PartDecoder:
    """The decoding of one part: the router and decoder from the state the part begins in, and what the part
    says of its transactions.  :meth:`decode` runs them over records of the part, in order; the records may
    come in several runs, with records between them that the caller passed over and counted with the
    decoder's ``skip`` (plain transactions, which leave the router and decoder as they found them)."""

    def __init__(self, part: Part, *, typed: bool = True, rows: bool = True) -> None:
        self.router = router = Router.from_state(part.state)
        self.decoder = router.decoder
        self.maker = ChangeMaker(typed=typed and rows, rows=rows, encoding=self.decoder.encoding)
        self.outcomes, self.repeated, self.dropped = part.outcome_table(), part.repeated_lone, part.dropped_subxacts
        self.base = part.source.position(0)
        self.sections = snapshot_records.SnapshotReader(self.decoder, self.maker)
        chunks = part.state.get("chunks")
        if chunks is not None:  # the shapes of the backfill chunks before the part (a chunk may go on in it)
            self.sections.chunks.relations.update(chunks["relations"])
            self.sections.chunks.types.update(chunks["types"])

    def decode(self, records: Iterable[tuple[int, int, Any, bytes]]) -> Iterator[Decoded]:
        """The committed changes of ``records`` (raw records of the part: offset, LSN, xid, data)."""
        router, decoder, maker = self.router, self.decoder, self.maker
        outcomes, repeated, dropped = self.outcomes, self.repeated, self.dropped
        base, sections = self.base, self.sections
        new_lsn = int.__new__  # the records' LSNs are unsigned 64-bit already: no need to check them again
        for offset, lsn, _, data in records:
            if data and data[0] in snapshot_records.KINDS:
                if not (repeated and base | offset in repeated):  # (a backfill chunk a resume sent again)
                    yield from _snapshot_rows(sections, data, lsn, base | offset)
                continue
            in_stream = decoder.in_stream
            message = decoder.feed(data)
            position = base | offset
            route = router.route(message, position, in_stream)
            if route is None:
                continue
            if route.kind is CHANGE:
                key = route.key
                assert key is not None  # a change route names its transaction (Router.route)
                outcome = outcomes.get(key)
                if outcome is None or (dropped and route.value in dropped.get(key, ())):
                    continue
                if message.__class__ is Message and message.prefix == BACKFILL_PREFIX:
                    continue  # (a backfill's own marker: not a change of the database's)
                schema = maker.schema_for(decoder, message)
                change = maker.change(message, schema, new_lsn(LSN, lsn) if lsn else None, outcome.xid,
                                      route.value if outcome.streamed else None)
                yield Decoded(position, change, outcome)
            elif route.kind is LONE and position not in repeated:
                if message.prefix == BACKFILL_PREFIX:  # type: ignore[attr-defined]  # (a backfill's watermark)
                    continue
                yield Decoded(position, maker.change(message, None, new_lsn(LSN, lsn) if lsn else None, None), None)


def _snapshot_rows(sections: snapshot_records.SnapshotReader, data: bytes, lsn: int,
                   position: int) -> Iterator[Decoded]:
    """The rows of a snapshot record, as changes of a transaction committed at the snapshot's LSN (so that
    they come before every change of the stream), with no commit time; the row at index ``i`` of the record
    has the position of the record plus ``i`` (a record holds more bytes than rows, so these stay below the
    next record's)."""
    if data[0] != snapshot_records.ROWS_RECORD and data[0] != snapshot_records.CHUNK_ROWS:
        sections.feed(data, lsn)
        return
    at = LSN(lsn)
    outcome = Outcome(None, at, at, _NO_TIME)
    for i, change in enumerate(sections.rows(data, lsn)):
        yield Decoded(position + i, change, outcome)


#: A snapshot row's commit time: none (the wire value of 'infinity', which the Spark rows write as null).
_NO_TIME = Timestamp(Timestamp.INFINITY)
