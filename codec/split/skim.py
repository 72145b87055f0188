"""The reading half of the first pass: runs of records reduced to what the merge decodes.

Strategy: the first pass must decode every record but the row changes, which are most of a stream; so
each input is read in runs of a few MiB (:class:`Skimmer`), and a run comes back as a :class:`Run`: the
records to decode, and between them only counts of the row changes.  Plain transactions (a Begin, row
changes, its Commit, nothing else), the commonest case, come already parsed, consecutive ones gathered into
one block of columns of numbers (:data:`COLUMNS` and :data:`~replwire.codec.split.parts.PACKED`), so the
merge (:mod:`~replwire.codec.split.first_pass`) handles a block, not its records.  The compiled codec reads
a run in C when it is built (``skim_run``, see its C twin ``codec/split/skim.c``), with the same result; the
Python reading (:meth:`Skimmer.skim` and :func:`take_run`) does what it declines (a torn or corrupt tail, a
bad row) and reports or raises what it finds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

from ..errors import DecodeError
from ..io.capture_file import CaptureFileError, Reading, TailProblem, read_capture
from ..io.copy_csv import read_copy_csv
from ..io.record_plan import record_frame
from ..io.segments import Input
from ..messages import Begin, Commit
from ..stream import snapshot_records
from ..wire.fast import COMPILED, parse
from .parts import PACKED, pack_words

__all__ = ["COLUMNS", "ROW_TAGS", "ROW_TAG_BYTES", "Run", "Skimmed", "Skimmer", "runs_here", "take_run"]

#: Tags of the messages the first pass does not parse (their transaction is all it needs), and the snapshot
#: section's rows (they belong to no transaction).
ROW_TAGS = frozenset(b"IUDT") | {snapshot_records.ROWS_RECORD}
ROW_TAG_BYTES = bytes(sorted(ROW_TAGS))


@dataclass(slots=True)
class Run:
    """What the first pass needs of a run of consecutive records of one input.

    ``controls`` holds the records it must decode -- everything but row changes -- as ``(offset, lsn,
    data)``, except that plain transactions (a Begin, row changes, its Commit, nothing else) come already
    parsed, consecutive ones gathered into one item, a block: ``(offset, lsn, data)`` of the first Begin, the
    number of transactions, the number of records in the block (row changes between its transactions
    included), whether each end LSN is above the one before, the first and last end LSN, then their numbers
    as columns of native 8-byte words (bytes): every transaction's Begin offset, row changes inside, xid,
    commit LSN, end LSN and commit time (:data:`COLUMNS`), and those of the transactions with row changes
    inside, as a part's outcomes are packed: key, xid, commit LSN, end LSN and commit time
    (:data:`~replwire.codec.split.parts.PACKED`).  ``rows[0]`` counts the row changes before the first item,
    ``rows[i + 1]`` those after item ``i``.  ``stop`` is where the next run starts (the input's size after its
    last run); ``tail`` is a torn or corrupt record that ended the input."""

    source: Input
    start: int
    stop: int
    records: int
    controls: list[tuple[Any, ...]]
    rows: list[int]
    tail: TailProblem | None = None


#: The type codes of a block's columns of every transaction: Begin offset, row changes inside, xid, commit
#: LSN, end LSN, commit time.
COLUMNS = "qqQQQq"
#: How far past a run's end a compiled read reads at first, for the record that starts before its end.
_AHEAD = 1 << 16


_BEGIN, _COMMIT = ord(Begin.tag), ord(Commit.tag)


class Skimmer:
    """One input open for the first pass, read run by run: :meth:`run` gives a :class:`Run`, read by the
    compiled codec when it is there (and the file is as big as it was when the inputs were opened), else by
    :meth:`skim` (the records of a run that are not row changes, each with the number of row changes just
    before it) and :func:`take_run`."""

    def __init__(self, source: Input) -> None:
        self.source = source
        self.reader = read_capture(source.path) if source.form == "capture" else None
        self._lines: Reading | None = None  # COPY-CSV: the lines from ``_next`` on, one read
        self._next = -1
        self._carried: Any = None
        self._failed: CaptureFileError | None = None  # COPY-CSV: the line at ``_next`` is not a row
        self._frame = record_frame() if source.form == "capture" else None
        self._file = None
        if COMPILED is not None:
            self._file = open(source.path, "rb")  # noqa: SIM115 -- closed by close()
            if os.fstat(self._file.fileno()).st_size != source.size or (
                    self.reader is not None and self.reader.size != source.size):
                self._file.close()  # still being written: the Python path reads it as big as it was
                self._file = None

    def run(self, start: int, stop: int) -> Run:
        """The run of records from ``start`` (a record boundary) while one starts below ``stop`` (and below
        the input's size as :func:`open_inputs` found it): read by the compiled codec where it takes it, else
        by :meth:`skim` and :func:`take_run`."""
        if self._file is not None:
            run = self._compiled(start, stop)
            if run is not None:
                return run
        return take_run(self.source, start, self.skim(start, stop))

    def _compiled(self, start: int, stop: int) -> Run | None:
        """The run as the compiled codec reads it (``skim_run``), or ``None`` where it declines (a torn or
        corrupt record, a row that is not (lsn, xid, data)) or the file is no longer as big as it was: the
        Python path then reads it, and reports or raises what it finds."""
        assert self._file is not None  # only with the compiled codec
        source, fd = self.source, self._file.fileno()
        limit = min(stop, source.size) - start
        want = min(limit + _AHEAD, source.size - start)
        while True:
            data = os.pread(fd, want, start)
            if len(data) != want:
                return None
            status, end, records, controls, rows = COMPILED.skim_run(
                data, start + want == source.size, self._frame, source.proto_version, ROW_TAG_BYTES, start, limit,
                source.position(0))
            if status == 0:
                return Run(source, start, start + end, records, controls, rows)
            more = min(max(end, 2 * want), source.size - start)  # a record goes on past what was read
            if status == 1 or more <= want:
                return None
            want = more

    def skim(self, start: int, stop: int) -> Skimmed:
        """The records from ``start`` (a record boundary) while one starts below ``stop`` (and below the input's
        size as :func:`open_inputs` found it)."""
        reader, stop = self.reader, min(stop, self.source.size)
        if reader is not None:
            reading = reader.records(start, stop, raw=True, skip=ROW_TAGS)
            controls = list(reading)
            tail = reading.tail
            stop = min(reading.end, self.source.size) if tail is None else self.source.size
            return Skimmed(controls, reading.skipped, stop, tail)
        controls = []
        append = controls.append
        # COPY-CSV: lines carry no length, so the input is read in one go and cut where a run ends
        if start != self._next:
            if self._lines is not None:
                self._lines.close()
            self._lines = read_copy_csv(self.source.path, start, self.source.size, raw=True)
            self._carried = self._failed = None
        elif self._failed is not None:  # this run's first line is not a row: the run before found it
            raise self._failed
        rest = self._lines
        assert rest is not None  # opened above, or by the skim that ended at start (_next is -1 before any)
        lines = chain((self._carried,), rest) if self._carried is not None else rest
        before, after_stop, self._carried = 0, self.source.size, None
        try:
            for line in lines:
                offset, lsn, xid, data = line
                if offset >= stop:
                    after_stop, self._carried = offset, line
                    break
                if data and data[0] in ROW_TAGS:
                    before += 1
                else:
                    append((offset, lsn, xid, data, before))
                    before = 0
        except CaptureFileError as error:
            # the line read to find where this run ends (the first at or past stop) is not a row -- a torn
            # last line, say: it is the next run's, which raises it (as the compiled reading, which reads no
            # further than this run, does); this run is the rows before it
            if error.offset is None or error.offset < stop:
                raise
            after_stop, self._failed = error.offset, error
        self._next = after_stop
        return Skimmed(controls, before, after_stop, None)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        if self._file is not None:
            self._file.close()
        if self._lines is not None:
            self._lines.close()

    def __enter__(self) -> Skimmer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass(slots=True)
class Skimmed:
    """What :meth:`Skimmer.skim` read: the records that are not row changes as ``(offset, lsn, xid, data,
    row changes just before)``, the row changes after the last, where the next run starts (the input's size
    after the last), and a torn or corrupt record that ended the input."""

    controls: list[tuple[int, int, int, bytes, int]]
    after: int
    stop: int
    tail: TailProblem | None

    @property
    def records(self) -> int:
        """How many records were read: the ones kept and every row change counted."""
        return len(self.controls) + self.after + sum(c[4] for c in self.controls)


def take_run(source: Input, start: int, skimmed: Skimmed) -> Run:
    """The run that ``skimmed`` read from ``start``.

    Begin and Commit records are parsed here (they read the same inside a stream or out), so that a plain
    transaction reaches the merge as a few numbers; the merge decodes them after all when the stream
    state there is not what a Begin needs (and so raises what the decoder raises)."""
    controls: list[tuple[Any, ...]] = []
    rows: list[int] = []
    version, run, base = source.proto_version, 0, source.position(0)
    begin: tuple[Any, ...] | None = None  # (offset, lsn, data, xid, rows before) of a Begin not yet closed
    block: list[tuple[int, ...]] = []  # the plain transactions of the block not yet closed
    first: tuple[Any, ...] = ()  # (offset, lsn, data) of its first Begin
    messages = 0  # its records

    def close() -> None:
        if block:
            controls.append(_block(first, block, messages, base))
            block.clear()

    for offset, lsn, _, data, before in skimmed.controls:
        run += before
        tag = data[0] if data else None
        if begin is not None:
            commit = _parsed(parse, data, version) if tag == _COMMIT else None
            if isinstance(commit, Commit):
                if block:
                    messages += begin[4]
                else:
                    rows.append(begin[4])
                    first, messages = begin[:3], 0
                block.append((begin[0], run, begin[3], int(commit.commit_lsn), int(commit.end_lsn),
                              int(commit.commit_time)))
                messages += run + 2
                run, begin = 0, None
                continue
            close()
            rows.append(begin[4])  # not a plain transaction: its Begin is decoded like the rest
            controls.append(begin[:3])
            begin = None
        if tag == _BEGIN and isinstance(opened := _parsed(parse, data, version), Begin):
            begin, run = (offset, lsn, data, opened.xid, run), 0
            continue
        close()
        rows.append(run)
        run = 0
        controls.append((offset, lsn, data))
    run += skimmed.after
    if begin is not None:
        close()
        rows.append(begin[4])
        controls.append(begin[:3])
    close()
    rows.append(run)
    return Run(source, start, skimmed.stop, skimmed.records, controls, rows, skimmed.tail)


def _block(first: tuple[Any, ...], block: list[tuple[int, ...]], messages: int, base: int) -> tuple[Any, ...]:
    """The item of a block of plain transactions (see :class:`Run`): ``block`` holds each one's Begin
    offset, row changes inside, xid, commit LSN, end LSN and commit time."""
    ends = [t[4] for t in block]
    with_rows = [(base | t[0], *t[2:]) for t in block if t[1]]
    return (*first, len(block), messages, all(a < b for a, b in zip(ends, ends[1:])), ends[0], ends[-1],
            tuple(pack_words(code, [t[i] for t in block]).tobytes() for i, code in enumerate(COLUMNS)),
            tuple(pack_words(code, [t[i] for t in with_rows]).tobytes()
                  for i, (code, _) in enumerate((("q", "key"), *PACKED))))


def _parsed(parse: Callable[..., Any], data: bytes, version: int) -> Any:
    """``data`` parsed outside a stream, or ``None`` if it is not a message (the merge says why)."""
    try:
        return parse(data, proto_version=version, in_stream=False)
    except DecodeError:
        return None


def runs_here(inputs: Sequence[Input], unit: int) -> Iterator[Run]:
    """The runs of every input, read in this process: each input kept open, read a run of ``unit`` bytes at
    a time (up to the size open_inputs found: a file still being written is read as it was then)."""
    for source in inputs:
        with Skimmer(source) as skimmer:
            start = source.first
            while True:
                run = skimmer.run(start, start + unit)
                yield run
                if run.tail is not None or run.stop >= source.size:
                    break
                start = run.stop
