"""The initial snapshot: every published table copied into a new capture file, consistent with its slot.

Strategy: the slot is created on a replication connection with an exported snapshot (``CREATE_REPLICATION_SLOT
... LOGICAL pgoutput (SNAPSHOT 'export')``); a second, ordinary connection opens a ``REPEATABLE READ``
transaction, imports that snapshot (``SET TRANSACTION SNAPSHOT``), locks the published tables ``ACCESS
SHARE`` (a TRUNCATE is not MVCC-safe: committed while the copy runs, it would empty a table the snapshot
should still see) and copies each with ``COPY (SELECT <published columns> FROM <table> WHERE <row filter>)
TO STDOUT`` -- binary for a binary capture.  The snapshot holds every transaction committed before the
slot's consistent point and the slot sends every one committed after it, so each row is in the file once.

The rows go into the snapshot section of the capture file (:mod:`replwire.schema.capture`): the server sends
one COPY data message per row, which arrives here as one ``write``; rows are gathered into records of about
``chunk`` bytes and appended, so memory holds one record's worth of rows, never a table.  Live capture
(:class:`~replwire.codec.io.live.LiveCapture`) then streams from the slot after the section.

Crash safety: the section's first record names the slot and is durable before the slot is created; the
slot is never read until the section is complete (``SnapshotEnd`` durable), so nothing was acknowledged.
Run again on a file whose section is incomplete, :func:`take_snapshot` drops that slot, cuts the section and
takes the snapshot again; on a file whose section is complete it checks the slot still exists (its changes
since the snapshot are otherwise lost) and leaves the rest to live capture.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..options import quote_identifier
from ..scalars import LSN
from ..stream import snapshot_records
from .capture_file import CaptureFileError, CaptureWriter, cut_file, read_capture
from .connection import CaptureError, CaptureSettings, ServerInfo, connect, server_error, set_up
from .resume import check_settings, check_source
from .slot import FAILOVER_VERSION, slot_exists
from .tables import BINARY_TRAILER, Table, after_binary_header, check_select, published_tables

__all__ = ["CHUNK", "SnapshotResult", "TableProgress", "section_state", "take_snapshot"]

#: About how many bytes of rows go into one record.
CHUNK = 256 * 1024


@dataclass
class TableProgress:
    """How far the copy of one table is: rows and bytes so far, seconds since it started, whether done."""

    schema: str
    table: str
    rows: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    done: bool = False

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


@dataclass
class SnapshotResult:
    """What :func:`take_snapshot` did: the consistent point, and the tables and rows it copied (``taken``
    False when the file already held a complete snapshot; ``retaken`` True when an interrupted one was
    dropped first)."""

    lsn: LSN
    tables: int
    rows: int
    taken: bool = True
    retaken: bool = False


@dataclass
class SectionState:
    """What a capture file holds of a snapshot section: ``state`` is ``"none"`` (no records), ``"stream"``
    (records, but no section), ``"interrupted"`` or ``"complete"``; ``slot`` the section's slot."""

    state: str
    slot: str | None = None
    lsn: LSN | None = None


def section_state(path: str) -> SectionState:
    """Whether the capture file ``path`` has a snapshot section, and whether it is complete."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return SectionState("none")
    with read_capture(path) as reader:
        reading = reader.records(raw=True, skip=frozenset((snapshot_records.ROWS_RECORD,)))
        try:
            found: SectionState | None = None
            for _, lsn, _, data, _ in reading:
                if found is None:
                    if not data or data[0] != snapshot_records.BEGIN:
                        return SectionState("stream")
                    found = SectionState("interrupted", snapshot_records.parse_record(data).slot)
                elif not data or data[0] not in snapshot_records.KINDS:
                    break
                elif data[0] == snapshot_records.SLOT:
                    found.lsn = LSN(lsn)
                elif data[0] == snapshot_records.END:
                    found.state = "complete"
                    break
        finally:
            reading.close()
    return found if found is not None else SectionState("none")


class _Rows:
    """What ``COPY ... TO STDOUT`` writes into: the server sends one COPY data message per row, which psycopg2
    hands to :meth:`write` as it is; rows are gathered into ``SnapshotRows`` records of about ``chunk``
    bytes.  :meth:`write` only keeps the row (it runs once per row); the binary form's header (before the
    first row) and trailer (after the last) are taken off when the rows are flushed, and a text record is
    checked to hold exactly one line per row."""

    def __init__(self, writer: CaptureWriter, lsn: LSN, table: Table, binary: bool, chunk: int,
                 progress: TableProgress, report: Callable[[TableProgress], None] | None) -> None:
        self.writer, self.lsn, self.table, self.binary, self.chunk = writer, lsn, table, binary, chunk
        self.progress, self.report = progress, report
        self.parts: list[bytes] = []
        self.size = 0
        self.header = binary  # the binary form's header is still to come (with the first row)
        self.shown = time.monotonic()

    def write(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)
        if self.size >= self.chunk:
            self.flush()

    def flush(self) -> None:
        parts = self.parts
        if self.header and parts:
            parts[0] = after_binary_header(parts[0], self.table.name)
            self.header = False
            if not parts[0]:
                del parts[0]
        if self.binary and parts and parts[-1] == BINARY_TRAILER:
            del parts[-1]
        if parts:
            body = b"".join(parts)
            rows = len(parts)
            if not self.binary and (snapshot_records.text_cuts(body, len(body)) != [(rows, len(body))]
                                    or not body.endswith(b"\n")):
                raise CaptureError(f"COPY of {self.table.name} sent {rows} data messages that are not one line each")
            record = snapshot_records.rows_record(self.table.relation.relation_id, self.binary, rows, body)
            self.writer.append(self.lsn, 0, record)
            self.progress.rows += rows
            self.progress.bytes += len(body)
            now = time.monotonic()
            if self.report is not None and now - self.shown >= 1.0:
                self.shown = now
                self.report(self.progress)
        self.parts, self.size = [], 0


def take_snapshot(dsn: str, out: str | os.PathLike[str], settings: CaptureSettings, *,
                  create_publication: bool = False, progress: Callable[[TableProgress], None] | None = None,
                  chunk: int = CHUNK, failover: bool = False, segment: int | None = None) -> SnapshotResult:
    """Make sure the capture file ``out`` starts with a complete snapshot of ``settings.publication``'s
    tables, taken with the new slot ``settings.slot`` (see the module docstring; a failover slot with
    ``failover``, PostgreSQL 17+); then :class:`~replwire.codec.io.live.LiveCapture` goes on from the slot.
    ``progress`` hears of each table about once a second and when it is done.  ``segment``: the number a new
    file's header gives it (the first segment of a capture with rotation, which starts the stream: no start
    position)."""
    import psycopg2

    path = os.fspath(out)
    checked: list[tuple[SectionState, bool]] = []  # what check() found: the file's section, the slot exists

    def check(server: ServerInfo) -> None:  # before the publication is checked or created
        header = server.header(settings)
        if failover and server.version < FAILOVER_VERSION:
            raise CaptureError(f"failover slots need PostgreSQL 17 or later; the server is "
                               f"{server.version // 10000}.{server.version % 10000} (leave out --failover)")
        try:
            state = section_state(path)
        except CaptureFileError as error:
            raise CaptureError(str(error)) from None
        if state.state != "none":
            with read_capture(path) as reader:
                check_settings(path, reader.header, header)
                if state.state != "stream":  # (refused below whatever its source)
                    check_source(path, reader.header, settings.slot, server)
        existing = slot_exists(server.cur, settings.slot)
        if state.state == "stream":
            raise CaptureError(f"{path} already holds a capture without a snapshot: a snapshot starts a new "
                               "capture file (use another --out, or capture without --snapshot)")
        if state.state == "complete" and not existing:
            raise CaptureError(f"the snapshot in {path} is complete, but its slot {settings.slot!r} no longer "
                               "exists: the changes since the snapshot are lost. Start a new capture file")
        if state.state == "interrupted" and state.slot != settings.slot:
            raise CaptureError(f"{path} holds an interrupted snapshot of slot {state.slot!r}, not "
                               f"{settings.slot!r}: run it with --slot {state.slot}, or use another --out")
        if state.state == "none" and existing:
            raise CaptureError(f"replication slot {settings.slot!r} already exists: a snapshot needs a new slot, "
                               "created with it (drop the slot with pg_drop_replication_slot, use another --slot, "
                               "or capture without --snapshot)")
        checked.append((state, existing))

    with set_up(dsn, settings.publication, create_publication=create_publication, for_snapshot=True,
                check=check) as server:
        conn, cur, version = server.conn, server.cur, server.version
        header = server.header(settings)
        state, existing = checked[0]
        if state.state == "complete":
            assert state.lsn is not None  # a complete section has its SnapshotSlot
            return SnapshotResult(state.lsn, 0, 0, taken=False)
        retaken = state.state == "interrupted"
        if retaken:
            if existing:  # created for this snapshot and never read: nothing of it was acknowledged
                try:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (settings.slot,))
                except psycopg2.Error as error:
                    raise CaptureError(f"cannot drop the interrupted snapshot's slot {settings.slot!r}: "
                                       f"{server_error(error)}") from None
            with read_capture(path) as reader:
                start = reader.header_end
            cut_file(path, start)
        tables = published_tables(cur, settings.publication, version)
        if not tables:
            raise CaptureError(f"publication {settings.publication!r} publishes no tables: there is nothing to "
                               "snapshot")
        check_select(cur, tables, "the snapshot")
        try:
            writer = CaptureWriter(path, header if segment is None else replace(header, segment=segment))
        except CaptureFileError as error:
            raise CaptureError(str(error)) from None
        try:
            return _copy(dsn, writer, settings, version, tables, conn, progress, chunk, retaken, failover)
        finally:
            writer.close()


def _copy(dsn: str, writer: CaptureWriter, settings: CaptureSettings, version: int, tables: list[Table], conn: Any,
          progress: Callable[[TableProgress], None] | None, chunk: int, retaken: bool,
          failover: bool = False) -> SnapshotResult:
    import psycopg2

    binary = settings.binary
    writer.append(0, 0, snapshot_records.begin_record(settings.slot, binary))
    writer.sync()  # the slot is this section's before it exists
    replication = connect(dsn, replication=True)
    try:
        rcur = replication.cursor()
        name = quote_identifier(settings.slot)
        if version >= 150000:
            options = ("SNAPSHOT 'export'" + (", TWO_PHASE" if settings.two_phase else "")
                       + (", FAILOVER" if failover else ""))
            command = f"CREATE_REPLICATION_SLOT {name} LOGICAL pgoutput ({options})"
        else:
            command = f"CREATE_REPLICATION_SLOT {name} LOGICAL pgoutput EXPORT_SNAPSHOT"
        try:
            rcur.execute(command)
            _, point, snapshot_name, _ = rcur.fetchone()
        except psycopg2.Error as error:
            raise CaptureError(f"cannot create slot {settings.slot!r} with an exported snapshot: "
                               f"{server_error(error)}") from None
        lsn = LSN(point)
        writer.append(lsn, 0, snapshot_records.slot_record(lsn, snapshot_name))
        writer.sync()
        cur = conn.cursor()
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
    finally:
        replication.close()  # the snapshot is imported: this transaction holds it now
    try:
        cur.execute("LOCK TABLE " + ", ".join(t.name for t in tables) + " IN ACCESS SHARE MODE")
        total = 0
        for table in tables:
            writer.append(lsn, 0, snapshot_records.table_record(table.relation, list(table.types)))
            shown = TableProgress(table.relation.namespace or "pg_catalog", table.relation.name)
            rows = _Rows(writer, lsn, table, binary, chunk, shown, progress)
            cur.copy_expert(table.copy_sql(binary), rows)
            rows.flush()
            writer.append(lsn, 0, snapshot_records.table_end_record(table.relation.relation_id, shown.rows))
            writer.sync()
            total += shown.rows
            shown.done = True
            if progress is not None:
                progress(shown)
        writer.append(lsn, 0, snapshot_records.end_record(lsn, len(tables), total))
        writer.sync()
        cur.execute("COMMIT")
    except psycopg2.Error as error:
        raise CaptureError(f"the snapshot failed: {server_error(error)}") from None
    return SnapshotResult(lsn, len(tables), total, retaken=retaken)
