"""The committed changes of one stream's files written out as text: what ``replwire decode`` prints.

Strategy: :func:`write_changes` runs the single-process decoding (:func:`~replwire.codec.decode.committed`)
over the inputs and writes each committed change to a text stream in one of three formats -- JSON lines
(:mod:`~replwire.codec.stream.jsonl`), Debezium's change-event values (:mod:`~replwire.codec.stream.debezium`),
or :class:`ChangeTable` -- and counts what it wrote; where the compiled codec is in use, its row path writes
JSON lines and Debezium's events itself, as UTF-8 bytes that go out as they are.  Lines go out in batches,
one write per :data:`BATCH` lines (or per MiB of the row path's) rather than one per line, and the batch is
flushed before the caller hears of anything (a torn tail, an interrupted snapshot section, an error), so a
caller that reports on stderr keeps the two streams in order on a terminal.  What is said, and where, is
the caller's: this module writes only the changes.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol, TextIO

from .decode import RecordError, RowWriter, Written, committed
from .gc_tuning import fewer_collections
from .io.capture_file import CaptureFileError, TailProblem
from .io.follow import Follower
from .io.segments import Input
from .stream import jsonl
from .stream.assembler import Change, Transaction
from .stream.tables import TableFilter
from .stream.values import TypedValuesUnavailable

__all__ = ["BATCH", "FORMATS", "ChangeTable", "DecodeCounts", "Progress", "write_changes"]

#: The output formats: one JSON object per change, a readable table, Debezium's change-event values.
FORMATS = ("jsonl", "table", "debezium")
#: Lines written to the output at a time.
BATCH = 2048
#: Bytes of the compiled row path's lines written at a time (at least).
_BLOCK = 1 << 20


@dataclass(slots=True)
class DecodeCounts:
    """What :func:`write_changes` wrote: committed ``transactions`` and ``changes`` (a non-transactional
    logical message counts as a change of no transaction), the transactions a resume sent again and that
    were skipped (``repeated``), and the inputs damaged inside (intact records after a damaged one), in the
    order they were found: their records up to the damage were written."""

    transactions: int = 0
    changes: int = 0
    repeated: int = 0
    damaged: list[str] = field(default_factory=list)


class Progress(Protocol):
    """Where :func:`write_changes` shows its counts as it goes (a terminal's status line, say)."""

    def show(self, transactions: int, changes: int) -> None:
        """The counts so far, after each item written."""

    def clear(self) -> None:
        """Remove what is shown: the output is flushed and the caller is about to say something."""


def _utf8_buffer(out: TextIO) -> BinaryIO | None:
    """The byte stream under ``out`` when ``out`` writes text as UTF-8 (``sys.stdout`` as a rule), so that
    UTF-8 lines can go to it without being decoded and encoded again; else ``None``."""
    buffer = getattr(out, "buffer", None)
    encoding = getattr(out, "encoding", None)
    if buffer is None or not isinstance(encoding, str):
        return None
    try:
        return buffer if codecs.lookup(encoding).name == "utf-8" else None
    except LookupError:
        return None


def write_changes(inputs: Sequence[Input], out: TextIO, output_format: str = "jsonl", *, tombstones: bool = True,
                  version: str = "unknown", tail: Callable[[str, TailProblem], None] | None = None,
                  warn: Callable[[str, str], None] | None = None,
                  progress: Progress | None = None, tables: TableFilter | None = None,
                  follow: Follower | None = None) -> DecodeCounts:
    """Write the committed changes of ``inputs`` (:func:`~replwire.codec.split.open_inputs`, in stream order)
    to ``out`` in ``output_format`` (one of :data:`FORMATS`), each line ending in a newline, and return the
    counts.  ``tombstones`` and ``version`` (replwire's, for ``source.version``) are the Debezium format's.

    ``out`` is flushed before ``tail(path, problem)`` hears of a capture file's torn or damaged end (see
    :func:`~replwire.codec.decode.committed`), before ``warn(path, message)`` hears of a snapshot section that
    never ended, before :class:`~replwire.codec.decode.RecordError`, :class:`~replwire.codec.io.capture_file.
    CaptureFileError` or :class:`~replwire.codec.TypedValuesUnavailable` is raised, and at the end; so is
    ``progress`` cleared.  The JSON lines format needs psycopg 3 from the start (it raises
    ``TypedValuesUnavailable`` before writing anything), the others from the first row.

    ``tables`` (:class:`~replwire.codec.stream.tables.TableFilter`): only the changes of the tables it keeps
    are written, and counted; a transaction left with none is neither (no format writes anything for a
    transaction but its changes' lines).

    ``follow`` (a :class:`~replwire.codec.io.follow.Follower`): the last input is followed as it grows (see
    :func:`~replwire.codec.decode.committed`); ``out`` is flushed (and ``progress`` cleared) each time it
    waits for more, so what is committed is out before the wait, and the follower's own ``waiting`` is
    called after that."""
    lines, writer = _formats(inputs, output_format, tombstones, version)
    counts = DecodeCounts()
    # what is not yet written: lines (str, without their newline), or the compiled row path's UTF-8 lines
    # (bytes, each ending in a newline), never both: each kind is written before the other is taken
    pending: list[str] = []
    blocks: list[bytes] = []
    held = 0  # the bytes in blocks
    raw = _utf8_buffer(out)  # where the compiled row path's UTF-8 lines go as they are, if anywhere

    def write_pending() -> None:
        nonlocal held
        if pending:
            pending.append("")
            out.write("\n".join(pending))
            pending.clear()
        if blocks:
            data = blocks[0] if len(blocks) == 1 else b"".join(blocks)
            blocks.clear()
            held = 0
            if raw is not None:
                out.flush()
                raw.write(data)
            else:
                out.write(data.decode("utf-8"))

    def write_utf8(data: bytes) -> None:
        nonlocal held
        if pending:
            write_pending()
        if raw is not None and len(data) >= 1 << 15:  # a run of 32 KiB or more: as it is, not copied in a join
            if blocks:
                write_pending()
            out.flush()
            raw.write(data)
            return
        blocks.append(data)
        held += len(data)
        if held >= _BLOCK:
            write_pending()

    def flush() -> None:
        write_pending()
        out.flush()
        if progress is not None:
            progress.clear()

    def flushed_tail(path: str, problem: TailProblem) -> None:
        flush()
        if problem.intact_from is not None:
            counts.damaged.append(path)
        if tail is not None:
            tail(path, problem)

    def flushed_warn(path: str, message: str) -> None:
        flush()
        if warn is not None:
            warn(path, message)

    def repeated(item: object) -> None:
        counts.repeated += 1

    if follow is not None:
        then = follow.waiting

        def waiting() -> None:
            flush()
            if then is not None:
                then()

        follow = dataclasses.replace(follow, waiting=waiting)
    with fewer_collections():  # millions of short-lived objects: see replwire.codec.gc_tuning
        try:
            for item in committed(inputs, tail=flushed_tail, repeated=repeated, warn=flushed_warn,
                                  rows=output_format == "table", lines=writer, tables=tables, follow=follow):
                if item.__class__ is Written:  # lines the compiled row path wrote
                    assert isinstance(item, Written)
                    write_utf8(item.data)
                    counts.transactions += item.transactions
                    counts.changes += item.changes
                    counts.repeated += item.repeated
                else:
                    assert not isinstance(item, Written)
                    # changes, not lines: a truncate prints a line per table, Debezium's format tombstones too
                    if isinstance(item, Transaction):
                        counts.transactions += 1
                        counts.changes += len(item.changes)
                    else:
                        counts.changes += 1
                    for line in lines(item):
                        if line.__class__ is bytes:  # lines the compiled row path rendered, in UTF-8
                            assert isinstance(line, bytes)
                            write_utf8(line)
                            continue
                        assert isinstance(line, str)
                        if blocks:
                            write_pending()
                        pending.append(line)
                        if len(pending) >= BATCH:
                            write_pending()
                if progress is not None:
                    progress.show(counts.transactions, counts.changes)
        except (RecordError, CaptureFileError, TypedValuesUnavailable):
            flush()
            raise
        flush()
    return counts


def _formats(inputs: Sequence[Input], output_format: str, tombstones: bool, version: str
             ) -> tuple[Callable[[Transaction | Change], Iterable[str | bytes]], RowWriter | None]:
    """The lines of one item in ``output_format``, and the writer the compiled row path writes for (``None``:
    every item comes as an item)."""
    if output_format == "debezium":
        from .stream.debezium import DebeziumEvents

        database = next((i.database for i in inputs if i.database), "")  # from the headers open_inputs read
        # written from the wire tuples (rows=False below): the same text as ENCODE of its events' dicts
        events = DebeziumEvents(version, db=database, tombstones=tombstones, encoding=inputs[0].encoding)
        return events.lines, events
    if output_format == "table":  # printed line by line as the changes come, like the others
        table = ChangeTable()
        return (lambda item: map(table.line, jsonl.objects(item))), None
    if output_format == "jsonl":  # straight from the wire tuples (the same text as ENCODE of jsonl.objects)
        writer = jsonl.JsonLines(inputs[0].encoding)  # its value loader needs psycopg, and says so at once
        return writer, writer
    raise ValueError(f"output_format must be one of {', '.join(FORMATS)}, not {output_format!r}")


class ChangeTable:
    """Changes as a table printed as they come (``--format table``): a header, then one line per change with
    op, table, xid, commit LSN, the row's values (long ones shortened) and the columns whose unchanged TOASTed
    value was not sent, in fixed-width columns (a longer name or LSN widens its line, not the table), so
    nothing is kept but the line being written."""

    WIDTHS = (9, 24, 10, 12)  # op, table, xid, commit_lsn; then values, then unchanged TOAST after " | "

    def __init__(self) -> None:
        self.started = False  # the header goes with the first line

    def header(self) -> str:
        return self._line("op", "table", "xid", "commit_lsn", "values", "unchanged TOAST")

    def _line(self, *cells: str) -> str:
        fixed = "".join(cell.ljust(width) + " " for cell, width in zip(cells, self.WIDTHS))
        return (fixed + cells[4] + (f" | {cells[5]}" if cells[5] else "")).rstrip()

    @staticmethod
    def _short(value: object) -> str:
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 40 else text[:37] + "…"

    def line(self, obj: dict[str, Any]) -> str:
        """The line of one JSON object of :func:`~replwire.codec.stream.jsonl.objects`, after the header if it
        is the first."""
        values = obj.get("new") or obj.get("key") or obj.get("old") or {}
        shown = ", ".join(f"{k}={self._short(v)}" for k, v in values.items())
        if obj["op"] == "truncate":
            shown = ("cascade" if obj.get("cascade") else "") + (" restart identity" if obj.get("restart_identity")
                                                                 else "")
        elif obj["op"] == "message":
            shown = f"{obj['prefix']}: {self._short(obj.get('content_text', obj['content']))}"
        name = f"{obj['schema']}.{obj['table']}" if obj.get("table") else ""
        xid = obj.get("xid")
        line = self._line(obj["op"], name, "" if xid is None else str(xid), obj.get("commit_lsn") or "",
                          shown.strip(), ", ".join(obj.get("unchanged_toast", [])))
        if not self.started:
            self.started = True
            return f"{self.header()}\n{line}"
        return line
