"""Live capture through the SQL functions, over an ordinary connection, for servers where a replication
connection is not available.

Strategy: ``pg_logical_slot_peek_binary_changes`` reads a batch from the slot's confirmed position, the
records are appended and fsynced, and only then is the slot moved with ``pg_replication_slot_advance`` -- to
the last position completed in the batch (a commit's end LSN, never the middle of a commit record, which
would make the server skip that transaction), or, when the call read everything up to the WAL position taken
just before it, to that position.  Each call is a new pgoutput session, so every batch repeats the Relation
(and Type) messages its changes need.  Streaming is refused in this mode (:class:`~replwire.codec.io.live.
LiveCapture` checks it): every call decodes again from the confirmed position, so a streamed transaction
still in progress would be sent -- and stored -- again by every call.  :class:`SqlCapture` is the loop,
a part of :class:`~replwire.codec.io.live.LiveCapture`, whose settings and progress it reads and updates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import ReplwireError
from ..options import as_arguments
from ..scalars import LSN
from . import slot
from .capture_file import CaptureWriter
from .column_defaults import ColumnDefaults
from .connection import (
    CaptureError,
    CaptureSettings,
    CaptureWriteError,
    ConnectionLost,
    check_encoding,
    connect,
    is_lost,
    server_error,
    undecodable,
)
from .positions import PositionTracker, Progress

__all__ = ["SqlCapture"]


class SqlCapture:
    """The capture loop over the SQL functions; :class:`~replwire.codec.io.live.LiveCapture` is one, and sets
    these attributes."""

    dsn: str
    out: str
    settings: CaptureSettings
    sync_interval: float
    batch_size: int
    on_progress: Callable[[Progress], None] | None
    progress: Progress
    _activity: float
    _streamed: bool
    log: Callable[[str], None] | None
    _defaults: ColumnDefaults | None

    def _column_defaults(self, writer: CaptureWriter, proto: int) -> ColumnDefaults | None:
        """The reader of the column defaults to write after each Relation (one for the whole run: it knows the
        columns seen before); ``None`` for a file of a format version without ColumnDefaults records."""
        if writer.format_version < 5:
            return None
        if self._defaults is None:
            self._defaults = ColumnDefaults(self.dsn, proto, writer.header.client_encoding,
                                            self.log or (lambda line: None))
        return self._defaults

    def _rotated(self, writer: CaptureWriter) -> CaptureWriter | None:
        """With rotation (:class:`~replwire.codec.io.live.LiveCapture`'s), once the segment ``writer`` writes is
        due: the writer of the next one (``writer`` closed); ``None`` to go on in it.  Asked only when the file
        is durable, ends between transactions and the slot stands at its end."""
        return None

    def _run_sql(self, writer: CaptureWriter, proto: int, options: dict[str, str],
                 stop: threading.Event | None, idle_exit: float | None) -> Progress:
        import psycopg2

        progress = self.progress
        try:
            conn = connect(self.dsn)
        except CaptureError:
            writer.close()
            raise
        check_encoding(conn, writer)
        batch = _SqlBatch(self.settings.slot, as_arguments({"proto_version": str(proto), **options}), self.batch_size,
                          writer, progress, self._column_defaults(writer, proto))
        failure: str | None = None
        lost = False

        def advance(target: LSN) -> None:
            if target > progress.flushed_lsn:
                if target > batch.done:  # a position no record completes: the file says so before the slot moves
                    batch.confirm(target)
                with conn.cursor() as cur:
                    cur.execute("SELECT end_lsn::text FROM pg_replication_slot_advance(%s, %s::pg_lsn)",
                                (self.settings.slot, str(target)))
                    moved = LSN(cur.fetchone()[0])
                conn.commit()
                progress.flushed_lsn = max(progress.flushed_lsn, min(moved, target))

        try:
            try:
                while not (stop is not None and stop.is_set()):
                    before = batch.done
                    # every call is a new pgoutput session
                    rows, wal_end = batch.read(conn, PositionTracker(proto, writer.header.client_encoding))
                    self._streamed = True
                    everything_read = rows < self.batch_size and writer.mark() == batch.kept
                    batch.settle()
                    # Fewer rows than asked for: the call read all the WAL before wal_end and nothing in it is
                    # left to complete, so the slot need not keep it (an idle slot does not hold WAL).
                    advance(max(batch.done, wal_end) if everything_read else batch.done)
                    if self.on_progress:
                        self.on_progress(progress)
                    following = self._rotated(writer)  # (settled and advanced: between transactions)
                    if following is not None:
                        writer = batch.writer = following
                        batch.kept = writer.mark()
                    if rows:
                        self._activity = time.monotonic()
                        if rows >= self.batch_size and batch.done > before:
                            continue  # more is waiting
                    elif idle_exit is not None and time.monotonic() - self._activity > idle_exit:
                        break
                    if stop is not None:
                        stop.wait(self.sync_interval)
                    else:
                        time.sleep(self.sync_interval)
            except KeyboardInterrupt:
                pass
            except psycopg2.Error as error:
                failure = server_error(error)
                lost = is_lost(error, conn)
            except OSError:
                if writer.failed is None:
                    raise  # not the file's: this process's own (the progress callback's, say)
                # the file could not be written (writer.failed)
        finally:
            try:
                if writer.failed is None:
                    batch.settle()
                    if not conn.closed:
                        conn.rollback()  # an interrupted call: what it read after batch.kept is sent again next time
                        advance(batch.done)
            except psycopg2.Error as error:
                failure = failure or server_error(error)
            except OSError:
                if writer.failed is None:
                    raise
            finally:
                try:
                    writer.close()
                except OSError:
                    pass
                conn.close()
                if batch.defaults is not None:
                    batch.defaults.close()
        if writer.failed is not None:
            problem = writer.failed
            raise CaptureWriteError(f"cannot write {self.out}: {problem.strerror or problem}; the file was cut back "
                                    f"to its last durable record (offset {writer.durable}), and the slot was moved "
                                    f"no further than that ({progress.flushed_lsn}): make room and run the same "
                                    "command again to resume")
        if failure is not None:
            if lost:
                raise ConnectionLost(f"lost the connection to the server: {failure}")
            raise CaptureError(f"capturing through the SQL functions failed: {failure}")
        return progress



class _SqlBatch:
    """One call of ``pg_logical_slot_peek_binary_changes`` at a time, appended to the capture file.

    ``kept`` is where the file ends after the last record that completes a position, ``done`` the highest such
    position.  Records appended after ``kept`` belong to something the server will send again (it sends
    everything after the slot's confirmed position on every call), so :meth:`settle` drops them before it
    fsyncs, and the file ends at a completed position before the slot moves.
    """

    def __init__(self, slot: str, args: list[str], size: int, writer: CaptureWriter, progress: Progress,
                 defaults: ColumnDefaults | None) -> None:
        self.slot, self.args, self.size, self.writer, self.progress = slot, args, size, writer, progress
        self.defaults = defaults
        self.kept, self.done = writer.mark(), progress.flushed_lsn
        self._counted = progress.messages, progress.bytes  # (the counts at kept)

    def read(self, conn: Any, tracker: PositionTracker) -> tuple[int, LSN]:
        """Read one call's rows into the file; returns how many, and the WAL position the call read up to at
        least (taken just before it)."""
        writer, progress = self.writer, self.progress
        with conn.cursor() as cur:
            wal_end = slot.wal_end(cur)
        progress.server_lsn = max(progress.server_lsn, wal_end)
        rows = 0
        with conn.cursor(name="replwire_peek") as cur:  # server-side: a large transaction comes in pieces
            cur.itersize = 1000
            cur.execute("SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes("
                        "%s, NULL, %s, VARIADIC %s::text[])", (self.slot, self.size, self.args))
            for lsn_text, xid, raw in cur:
                data, lsn = bytes(raw), LSN(lsn_text)
                try:
                    position = tracker.feed(data)  # before it is appended: a refused one is not written
                except ReplwireError as error:
                    raise undecodable(lsn, wal_end, error) from None
                writer.append(lsn, xid, data)
                if self.defaults is not None and data and data[0] == 0x52:  # a Relation: its columns' defaults
                    found = self.defaults.after_relation(data, tracker.in_stream)
                    if found is not None:
                        writer.append(lsn, 0, found)
                rows += 1
                progress.messages += 1
                progress.bytes += len(data)
                progress.current_lsn = max(progress.current_lsn, lsn)
                if position is not None:
                    progress.transactions += 1
                    self.kept, self.done = writer.mark(), max(self.done, LSN(position))
                    self._counted = progress.messages, progress.bytes
        conn.commit()
        return rows, wal_end

    def confirm(self, position: LSN) -> None:
        """Append a SlotConfirmed of ``position`` (beyond what the records complete) and fsync it: on disk before
        the slot moves there.  Only after :meth:`settle` (nothing after ``kept``)."""
        self.writer.confirm(position)
        self.kept = self.writer.mark()
        self.writer.sync()

    def settle(self) -> None:
        """Drop what was appended after the last completed position, and fsync: on disk before the slot moves.
        What is dropped is not counted (it is received, and counted, again), and its column defaults are written
        again after the Relations sent again."""
        if self.defaults is not None and self.writer.mark() != self.kept:
            self.defaults.forget()
        self.writer.rewind(self.kept)
        self.progress.messages, self.progress.bytes = self._counted
        self.writer.sync()
