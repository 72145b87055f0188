"""A stream's committed changes in one process: the engine of ``replwire decode``.

Strategy: :func:`committed` feeds the records of one stream's inputs (:func:`~replwire.codec.io.segments.
open_inputs`, in stream order) to one :class:`~replwire.codec.Assembler`, resumed between inputs, and yields
each committed transaction (and non-transactional logical message) once: what a resume sends again is
skipped by its end LSN, and a snapshot section an earlier input already held is read once (:class:`_Sections`).
Where the compiled codec is in use and the caller writes JSON lines or Debezium's events, :class:`_RowPath`
lets the compiled row path write runs of plain transactions between the Assembler's items (:class:`Written`)
and render the changes inside the transactions the Assembler holds (streamed, prepared, long ones), with
the same text.
This is the single-process way to what :mod:`replwire.codec.split` gives part by part; the tests hold the two
to each other.  :mod:`replwire.codec.decode_output` writes what this yields.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from ..schema.capture import BACKFILL_PREFIX
from ..schema.encodings import UTF8
from .errors import DecodeError, ReplwireError
from .io.capture_file import TailProblem
from .io.follow import Cut, Follower, FollowReading
from .io.positions import message_completes
from .io.segments import Input, Reach, open_inputs, read_records
from .split.compiled_path import CompiledPath
from .stream import snapshot_records
from .stream.assembler import Assembler, Change, ChangeMaker, Rendered, Transaction
from .stream.decoder import IDLE, Decoder, StreamStateError
from .stream.tables import TableFilter, filter_change, filter_item

if TYPE_CHECKING:
    from .messages import Relation
    from .stream.values import RowSchema

__all__ = ["RecordError", "Written", "committed"]


#: The tags of the messages that complete a position but make no item of the Assembler: Prepare, Stream
#: Prepare, Rollback Prepared (a transaction's Commit Prepared makes one).
_ENDS_QUIETLY = frozenset(b"Ppr")


class RecordError(ReplwireError, ValueError):
    """A record of an input that does not decode: ``path``, ``record`` (its number in the input, from 0) and
    the decoder's ``error`` (a :class:`~replwire.codec.DecodeError` or
    :class:`~replwire.codec.StreamStateError`; also the ``__cause__``)."""

    def __init__(self, path: str, record: int, error: Exception) -> None:
        self.path, self.record, self.error = path, record, error
        super().__init__(f"{path}, record {record}: {error}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordError, (self.path, self.record, self.error))


class RowWriter(Protocol):
    """A writer of lines the compiled row path writes for (:class:`~replwire.codec.stream.jsonl.JsonLines`,
    :class:`~replwire.codec.stream.debezium.DebeziumEvents`)."""

    def plan(self, schema: RowSchema) -> tuple[tuple[bytes, ...], tuple[Any, ...], int] | None:
        """Its plan for a relation's changes (the arguments of ``rows_plan``: line starts, columns, and what
        their text is in; ``None``: none, their transactions go to the writer as items)."""

    def compiled_events(self) -> tuple[bytes, bytes, bool, int] | None:
        """What the row path writes Debezium's events with (``rows_run``'s ``events``), ``None`` for JSON
        lines."""

    def written_through(self, commit_lsn: int) -> None:
        """The row path wrote the events of the transactions up to the one committed at ``commit_lsn``."""


@dataclass(slots=True)
class Written:
    """Lines the compiled row path wrote for a run of plain transactions of an input (what its
    :class:`RowWriter` writes for them -- JSON lines or Debezium's events -- each line ending in a newline),
    as the UTF-8 ``data`` a text stream would write of them (with ``errors="backslashreplace"``, as ``replwire
    decode``'s standard output: a SQL_ASCII stream's surrogates as the JSON escapes ``\\udc80``-``\\udcff``,
    :func:`~replwire.codec.stream.jsonl.line_bytes`): the ``records`` they were, the ``transactions`` and
    ``changes`` printed, and the transactions a resume sent again (``repeated``, not printed)."""

    data: bytes
    records: int
    transactions: int
    changes: int
    repeated: int


#: How much of an input the compiled row path reads at a time, and the most input one transaction
#: may take in it (a bigger one goes to the Assembler, which spills it to a file).
_CHUNK = 1 << 20
_MOST = 16 << 20
#: After this many tries of the row path in a row that took fewer than ``_WORTH`` records (nothing), the
#: Assembler takes more records before the next (see :mod:`~replwire.codec.split.compiled_path`).  A try that
#: takes one transaction is worth it: the real servers' streams hold short runs of plain transactions
#: between others, which the row path then writes too (a stream alternating plain transactions with
#: declined ones costs about a fifth more than with the column path's 32).
_WORTH = 1
_TRIES = 4


class _RowPath(CompiledPath):
    """The records of one input for :func:`committed`, with a plan for every relation the decoder knows.
    Between transactions (the decoder idle), every run of plain transactions the compiled row path takes
    (``rows_run``) -- two-phase ones committed or rolled back right after their Prepare too, while no other
    prepared transaction waits -- is given as one :class:`Written` instead of its records.  Inside a transaction the
    Assembler holds open -- a stream block, a prepared transaction, a plain one ``rows_run`` left -- the
    row changes it takes (``rows_body``) go to that transaction's buffer as one
    :class:`~replwire.codec.stream.assembler.Rendered` run of lines, which the writer finishes when the
    transaction commits.  Each stops at anything else: the records from there go to the Assembler until
    the row path can go on.  A torn or corrupt capture file tail is read by the Python reader, which
    reports it (``tail``)."""

    def __init__(self, source: Input, assembler: Assembler, lines: RowWriter, rows: Any,
                 tables: TableFilter | None = None) -> None:
        # a capture file is read up to its size when the inputs were opened, as its Python reader does
        super().__init__(source, source.first, source.size if source.form == "capture" else None, chunk=_CHUNK,
                         most=_MOST, worth=_WORTH, tries=_TRIES)
        self.assembler, self.lines, self.rows = assembler, lines, rows
        self.tables = tables  # a relation it leaves out has its width for a plan: rows_run passes over its changes
        self.last_end = -1
        self.rendered = 0  # records taken by rows_body (into Rendered runs) so far
        self._events = lines.compiled_events() is not None  # (Debezium's events, else JSON lines)
        from .stream.jsonl import plan_encoding

        self._encoding = plan_encoding(source.encoding)  # (what an Origin's name and a gid are in)
        self._maker = ChangeMaker(typed=False, rows=False, encoding=source.encoding)  # (for row schemas)
        self._running: Generator[Any, None, None] | None = None

    def __iter__(self) -> Iterator[Any]:
        self._running = self.run()
        return self._running

    def close(self) -> None:
        """Stop reading: the file and the capture file's Python reader are closed."""
        if self._running is not None:
            self._running.close()

    def ready(self) -> bool:
        return self.last_end < 1 << 63

    def take(self, data: memoryview, eof: bool, at: int) -> tuple[int, int, Any, Written | None]:
        decoder = self.assembler.decoder
        if decoder.state != IDLE:  # the row changes of the transaction open there
            consumed, run, records, subxids, declined = self.rows.rows_body(
                data, eof, self.plans(decoder, self._maker), decoder.proto_version, decoder.in_stream, self.frame,
                self._events)
            if records:
                self.assembler.add_rendered(Rendered(run, records, subxids))
                self.rendered += records
            return consumed, records, declined, None
        events = self.lines.compiled_events() if self._events else None
        consumed, lines, records, transactions, changes, repeated, self.last_end, declined, last_commit = (
            self.rows.rows_run(data, eof, self.plans(decoder, self._maker), decoder.proto_version, self.last_end,
                               self.frame, events, not self.assembler.prepared_waiting, self._encoding))
        if events and last_commit != events[3]:
            self.lines.written_through(last_commit)
        if not records:
            return consumed, records, declined, None
        decoder.skip(records)
        return consumed, records, declined, Written(lines, records, transactions, changes, repeated)

    def python(self, records: Iterator[Any]) -> Iterator[Any]:
        return records  # fed to the Assembler by committed()

    def plan(self, relation_id: int, relation: Relation, schema: RowSchema) -> Any:
        if self.tables and not self.tables.matches_relation(relation):
            return len(relation.columns)  # (the row path's plan for a relation left out: its width)
        plan = self.lines.plan(schema)
        return self.rows.rows_plan(*plan) if plan is not None else None


def committed(inputs: Sequence[Input], *, typed: bool = True, rows: bool = True,
              tail: Callable[[str, TailProblem], None] | None = None,
              repeated: Callable[[Transaction | Change], None] | None = None,
              warn: Callable[[str, str], None] | None = None,
              lines: RowWriter | None = None,
              tables: TableFilter | None = None,
              follow: Follower | None = None) -> Iterator[Transaction | Change | Written]:
    """The single-process way to the same result: every committed transaction (and non-transactional
    logical message) of ``inputs`` from one :class:`~replwire.codec.Assembler`, resumed between inputs, with
    what a resume sends again skipped (an item whose end is not past the last one's), each such item handed
    to ``repeated`` if given.  The rows of a snapshot section come first, as ``"snapshot"`` changes
    (:mod:`replwire.codec.stream.snapshot_records`); a section an earlier input already held is skipped, and
    ``warn(path, message)`` hears of a section that never ended.  A backfill's rows come where its chunk is,
    right after the chunk's watermark, as ``"backfill"`` changes at its position; the watermarks (logical
    messages of prefix ``replwire.backfill``) are not given, and a chunk whose watermark a resume sent again
    is skipped with it.  ``tail(path, problem)`` hears of a torn
    capture file tail once the records before it are done.  A record that does not decode raises
    :class:`RecordError`.  ``rows=False``: no row dicts (see :class:`~replwire.codec.Assembler`).

    With ``lines`` (the :class:`RowWriter` the caller writes the items with), the compiled row path, where
    the compiled codec is in use and writes the input's text (:func:`~replwire.codec.stream.jsonl.compiled_rows`:
    UTF-8, LATIN1, SQL_ASCII), writes the plain transactions itself -- they come as
    :class:`Written` lines (the same text), not as items -- and renders the changes inside the others into
    their buffers (the writer finishes them at their commit); where the Python codec is, and ``lines`` writes
    JSON lines, :class:`~replwire.codec.stream.jsonl.PlainRuns` does the same in Python: the plain
    transactions come as :class:`Written` lines, and the row changes of stream blocks go into their
    transactions' buffers as rendered runs.

    With ``tables`` (:class:`~replwire.codec.stream.tables.TableFilter`), only the changes of the tables it
    keeps are given (:func:`~replwire.codec.stream.tables.filter_item`: a transaction left with none is not
    given at all; logical messages are kept).  The compiled row path's plan for a relation it leaves out is
    the relation's width: ``rows_run`` passes over those changes of plain transactions (a transaction left
    with none is neither written nor counted), and ``rows_body`` declines them, so that inside the
    transactions the Assembler holds they go to the Assembler, whose items are filtered (the Python codec's
    :class:`~replwire.codec.stream.jsonl.PlainRuns` is not used with a filter).

    With ``follow`` (a :class:`~replwire.codec.io.follow.Follower`), the last input is a capture file still
    being written (opened with ``open_inputs(..., growing=True)``): once its records up to its ``size`` are
    read, its records go on being read as they are written (by the Python path), and each transaction is given
    as soon as its commit is in the file, until the follower stops (``stop``, ``idle_exit``) or meets damage
    (given to ``tail`` as any reading's).  Where the writer cuts the file back (a
    :class:`~replwire.codec.io.follow.Cut`), the Assembler drops the transaction open (:meth:`Assembler.resume
    <replwire.codec.Assembler.resume>`), and what comes again is given once, as after any resume.  Where the
    followed file is a segment the capture went on from (:attr:`FollowReading.moved_on
    <replwire.codec.io.follow.FollowReading.moved_on>`), the next segment is opened as one more input of the
    stream (checked as :func:`~replwire.codec.io.segments.open_inputs` checks a set) and followed on."""
    from .stream.jsonl import JsonLines, PlainRun, PlainRuns, compiled_rows

    assembler = Assembler(proto_version=inputs[0].proto_version, encoding=inputs[0].encoding, typed=typed,
                          rows=rows)
    feed = assembler.feed
    kinds, backfill_kinds = snapshot_records.KINDS, snapshot_records.BACKFILL_KINDS
    sections = _Sections(inputs[0], typed)
    last_end = -1
    chunks_at: int | None = None  # the position of the last backfill watermark read (not sent again)
    reach = Reach()  # (last_end, and the prepares' and rollbacks' ends: checks each capture's start)
    inputs = list(inputs)  # (a followed series grows by the segments the capture goes on in)
    for source in inputs:
        if source.index:
            assembler.resume()
        path: _RowPath | PlainRuns | None = None
        # (a followed file is read up to its size when opened, the end of its whole records, then followed)
        stop = source.size if follow is not None and source is inputs[-1] else None
        compiled = compiled_rows(source.encoding)
        if lines is not None and compiled is not None:
            path = _RowPath(source, assembler, lines, compiled, tables)
            path.last_end = last_end
        elif isinstance(lines, JsonLines) and source.encoding == UTF8 and not tables:
            path = PlainRuns(read_records(source, None, stop, raw=True), lines, assembler, last_end)
        reading: Any = path if path is not None else read_records(source, None, stop, raw=True)
        if follow is not None and source is inputs[-1]:
            if source.form != "capture":
                raise ValueError(f"{source.path}: only a capture file can be followed")
            reading = _Then(reading, source, follow)
        number = 0
        try:
            for record in reading:
                if record.__class__ is Written:
                    number += record.records
                    if path is not None:
                        last_end = path.last_end
                    yield record
                    continue
                if record.__class__ is PlainRun:
                    number += record.records
                    if path is not None:
                        last_end = path.last_end
                    yield Written(record.data, record.records, 1 - record.repeated, record.changes, record.repeated)
                    continue
                if record.__class__ is Cut:  # a followed file cut back by its writer: what was after it comes again
                    assembler.resume()
                    continue
                offset, lsn, _, data = record
                number += 1
                tag = data[0] if data else -1
                if tag in kinds:
                    if tag == snapshot_records.CONFIRMED:
                        reach.confirmed(source.path, data, last_end, offset)
                    elif tag in backfill_kinds and lsn != chunks_at:  # (its watermark was sent again: skipped)
                        continue
                    if tables:
                        for change in sections.feed(data, lsn):
                            if filter_change(change, tables) is not None:
                                yield change
                        continue
                    yield from sections.feed(data, lsn)
                    continue
                items = feed(data, lsn=lsn or None)
                if tag in _ENDS_QUIETLY:  # completes a position, and gives no item for it
                    message = assembler.decoder.last_message
                    at = message_completes(message) if message is not None else None
                    if at is not None and at > reach.position:
                        reach.position = at
                for item in items:
                    end = item.end_lsn if isinstance(item, Transaction) else item.lsn
                    if end is not None and end <= last_end:
                        chunks_at = None  # (a chunk after it was sent again with it)
                        if repeated is not None:
                            repeated(item)
                        continue
                    if end is not None:
                        last_end = end
                        if path is not None:
                            path.last_end = end
                    if item.__class__ is Change and item.op == "message" and item.prefix == BACKFILL_PREFIX:
                        chunks_at = end  # a backfill's watermark: the chunk after it is at its position
                        continue
                    if tables:
                        kept = filter_item(item, tables)
                        if kept is None:
                            continue
                        item = kept
                    yield item
        except (DecodeError, StreamStateError, snapshot_records.SnapshotError) as error:
            rendered = path.rendered if path is not None else 0  # (records of Rendered runs, before it)
            raise RecordError(source.path, number + rendered - 1, error) from error
        finally:
            reading.close()
        if reading.tail is not None and tail is not None:
            tail(source.path, reading.tail)
        if follow is not None and source is inputs[-1] and reading.moved_on is not None:
            inputs.append(_next_input(source, reading.moved_on))
        section = sections.reader.section
        if section is not None and not section.complete and warn is not None:
            warn(source.path, "its snapshot section ends before its SnapshotEnd: the snapshot was interrupted, and "
                              "holds only some rows (running the capture again takes it again)")


def _next_input(source: Input, path: str) -> Input:
    """The segment at ``path``, which the capture went on in after ``source``, as the next input of the stream,
    read as ``source`` is (its protocol version, and the encoding a SQL_ASCII capture was given); refused
    (:class:`~replwire.codec.io.capture_file.CaptureFileError`) unless the two are one stream."""
    both = open_inputs([source.path, path], source.proto_version, source.encoding, growing=True, order=False)
    return replace(both[1], index=source.index + 1)


class _Then:
    """The records of ``first`` (a reading of ``source`` up to its ``size``), then, if it ended whole, those
    ``follow`` reads from there as the file grows; ``tail`` is the one that ended it, ``moved_on`` the next
    segment where the capture went on in one.  The follower's ``stop`` ends it in either."""

    def __init__(self, first: Any, source: Input, follow: Follower) -> None:
        self.first, self.source, self.follow = first, source, follow
        self.then: FollowReading | None = None
        self.tail: TailProblem | None = None
        self.moved_on: str | None = None

    def __iter__(self) -> Iterator[Any]:
        stop = self.follow.stop
        if stop is None:
            yield from self.first
        else:  # (a stop is heeded while what the file held is read too, every 1024 records or runs)
            for n, record in enumerate(self.first, 1):
                yield record
                if not n & 1023 and stop():
                    return
        self.tail = self.first.tail
        if self.tail is not None or (stop is not None and stop()):
            return
        self.then = self.follow.records(self.source.path, self.source.size)
        yield from self.then
        self.tail, self.moved_on = self.then.tail, self.then.moved_on

    @property
    def rendered(self) -> int:
        return int(getattr(self.first, "rendered", 0))

    def close(self) -> None:
        self.first.close()
        if self.then is not None:
            self.then.close()


class _Sections:
    """The snapshot sections of a stream's inputs, read once each: a section whose consistent point an
    earlier input's complete section had (a file given twice, or copied) is skipped."""

    def __init__(self, source: Input, typed: bool) -> None:
        maker = ChangeMaker(typed=typed, encoding=source.encoding)
        self.reader = snapshot_records.SnapshotReader(Decoder(source.proto_version, source.encoding), maker)
        self.seen: set[int] = set()
        self.skipping = False
        self.begin: bytes | None = None  # a section's SnapshotBegin, until its SnapshotSlot tells whether it is new

    def feed(self, data: bytes, lsn: int) -> list[Change]:
        code = data[0]
        if code in snapshot_records.BACKFILL_KINDS:  # (a backfill's chunk, in the stream: no section's)
            return self.reader.feed(data, lsn)
        if code == snapshot_records.BEGIN:
            self.begin, self.skipping = data, False
            return []
        if code == snapshot_records.SLOT:
            self.skipping = int(lsn) in self.seen
            if self.begin is not None and not self.skipping:
                self.reader.feed(self.begin)
            self.begin = None
        if self.skipping:
            return []
        changes = self.reader.feed(data, lsn)
        if code == snapshot_records.END:
            self.seen.add(int(lsn))
        return changes
