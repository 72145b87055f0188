"""Live capture: stream pgoutput from a replication slot into a capture file, acknowledging only what is
durably on disk.

Strategy: a thin adapter around psycopg2's ``LogicalReplicationConnection`` (it answers the server's
keepalives itself).  Every XLogData payload is read by a :class:`~replwire.codec.io.positions.
PositionTracker` as it arrives, only for the position it completes -- the end LSN of a commit, a prepare or
a rollback, or the LSN of a non-transactional message -- and whether anything is left in flight; the
payloads go to a :class:`~replwire.codec.io.capture_file.CaptureWriter` a burst at a time (everything
already received, up to a thousand messages).
At most every ``sync_interval`` seconds the file is fsynced, and only then is the highest such position
reported to the server as flushed, so the slot's confirmed position never passes data that is not on disk.
When nothing is in flight, the server's own WAL end is acknowledged too, so an idle slot does not hold WAL.
The file's header records the connection's client encoding, which the server converts the Strings and
text values to (a ``SQL_ASCII`` database sends its bytes unconverted), as the server reports it.

With ``via="sql"`` the same file is written from the SQL functions over an ordinary connection instead
(:mod:`~replwire.codec.io.sql_capture`).  Either way the capture starts with the set-up of
:mod:`~replwire.codec.io.connection`, and restarting on an existing file resumes from the slot's confirmed
position (:mod:`~replwire.codec.io.resume`), after the same checks of the file, the server, the database and
the slot; a lost connection is resumed the same way.  A streamed transaction whose early blocks were kept is
sent again from its first block; readers restart such a transaction when its ``first_segment`` Stream Start
comes again.

With a :class:`~replwire.codec.io.rotation.Rotation` the file is a series of segments
(:mod:`~replwire.codec.io.rotation`): between transactions, once the current one is big or old enough, it is
made durable, its last position acknowledged, and the capture goes on in the next.
"""

from __future__ import annotations

import os
import select
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import ReplwireError
from ..options import quote_identifier
from ..scalars import LSN
from . import slot
from .capture_file import CaptureFileError, CaptureHeader, CaptureWriter, RecordData, cut_file, record_size
from .column_defaults import ColumnDefaults
from .connection import (
    CaptureDamaged,
    CaptureError,
    CaptureSettings,
    CaptureWriteError,
    ConnectionLost,
    ServerInfo,
    check_encoding,
    connect,
    is_lost,
    server_error,
    set_up,
    undecodable,
)
from .positions import PositionTracker, Progress
from .record_plan import RECORD_PLAN
from .resume import check_output, check_settings, check_source, first_record, refuse_new_slot, resume
from .rotation import Rotation, check_pattern, resume_segment, segment_path
from .sql_capture import SqlCapture

if TYPE_CHECKING:
    from .backfill import Backfill

__all__ = ["VIAS", "LiveCapture"]

#: How live capture reads the slot: the replication protocol, or the SQL functions over an ordinary connection.
VIAS = ("replication", "sql")
#: The most seconds between two SlotConfirmed records while the server's WAL moves with nothing for the
#: publication (below psycopg2's status interval of 10 s, see _run_replication).
_CONFIRM_EVERY = 5.0
#: The bytes a record takes in the file besides its message (its LSN, xid, length and CRC-32).
_FRAMING = RECORD_PLAN.head.size + RECORD_PLAN.crc.size


class LiveCapture(SqlCapture):
    """Capture from ``dsn`` into the capture file ``out`` (see the module's docstring for the guarantees).

    ``create_slot`` creates the slot when it does not exist; ``create_publication`` creates the publication
    ``FOR ALL TABLES`` when it does not exist.  ``via`` is ``"replication"`` (the replication protocol) or
    ``"sql"`` (the SQL functions, ``batch_size`` rows asked for per call, polled every ``sync_interval``
    seconds while there is nothing new).  ``progress`` is called with a :class:`Progress` after every sync.
    :meth:`run` returns when ``stop`` is set, when ``idle_exit`` seconds passed with nothing to capture (and
    no backfill runs), or on Ctrl-C, always after a final sync and acknowledgement (only the sync when Ctrl-C
    lands in the middle of a burst of messages, whose positions are then not all in the file).

    ``backfill`` names tables (``schema.table``, or ``"all"``) to copy into the file while it streams
    (:mod:`~replwire.codec.io.backfill`; over replication, with ``settings.messages`` on), each chunk aiming
    at ``backfill_budget`` seconds of reading, at most ``backfill_rate`` rows per second per table when given;
    a table whose run the file holds is continued from its last
    chunk, or left alone when that run ended.  With ``settings.messages`` on, a capture over replication
    also backfills the tables ``replwire backfill`` asks its slot for.

    With ``failover`` (PostgreSQL 17+) the slot is a failover slot, which a standby with
    ``sync_replication_slots`` keeps in step: it is created with FAILOVER, or made one when it exists without;
    the capture reads it on a primary only, and after a failover (through a DSN naming both servers, with
    ``target_session_attrs=read-write``) goes on from the promoted standby's copy of the slot.

    A connection lost once the capture is streaming (a restart, a failover, the walsender
    terminated, the network) is not the end: with ``reconnect`` (the default) the capture resumes from the
    file's last durable record exactly as a new run on the file would -- the same checks of the file, the
    server, the database and the slot -- after ``reconnect_delay`` seconds, doubled after every failed attempt
    up to ``reconnect_max`` seconds; each attempt is told to ``log``.  Without ``reconnect`` the loss is a
    :class:`ConnectionLost`.  What cannot be survived is a :class:`CaptureError` (the slot dropped, a refused
    login), a :class:`CaptureWriteError` (the file could not be written) or a :class:`CaptureDamaged`.

    With ``rotation`` (without a backfill), ``out`` names a series of segments
    (:mod:`~replwire.codec.io.rotation`), and :attr:`out` is the one being written.
    """

    def __init__(self, dsn: str, out: str | os.PathLike[str], settings: CaptureSettings, *, create_slot: bool = True,
                 create_publication: bool = False, sync_interval: float = 0.5,
                 progress: Callable[[Progress], None] | None = None, via: str = "replication",
                 batch_size: int = 10_000, reconnect: bool = True, reconnect_delay: float = 0.5,
                 reconnect_max: float = 30.0, log: Callable[[str], None] | None = None,
                 backfill: Sequence[str] = (), backfill_budget: float | None = None,
                 backfill_rate: float | None = None, failover: bool = False,
                 rotation: Rotation | None = None) -> None:
        if via not in VIAS:
            raise ValueError(f"via must be one of {VIAS}, not {via!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self.dsn, self.out, self.settings = dsn, os.fspath(out), settings
        self.create_slot, self.create_publication = create_slot, create_publication
        self.sync_interval, self.on_progress = sync_interval, progress
        self.via, self.batch_size = via, batch_size
        self.reconnect, self.reconnect_delay, self.reconnect_max = reconnect, reconnect_delay, reconnect_max
        self.log = log
        self.failover = failover  # (see _check_failover)
        self.backfill, self.backfill_budget, self.backfill_rate = list(backfill), backfill_budget, backfill_rate
        if self.backfill and not settings.messages:
            raise ValueError("a backfill needs settings.messages: its watermarks are logical messages")
        if self.backfill and via != "replication":
            raise ValueError("a backfill needs via='replication'")
        if rotation is not None and self.backfill:
            raise ValueError("a rotation cannot be used with a backfill")
        self.rotation, self.pattern = rotation, self.out
        self._rotating = False  # the streaming session ended for a rotation
        self._segment_opened = (0.0, 0)  # (when the segment was opened by this run, and the transactions then)
        self.progress = Progress()
        self.resumed_records: int | None = None
        self.reconnects = 0  # how many times the capture reconnected
        self._activity = time.monotonic()  # when the last message arrived (for idle_exit)
        self._streamed = False  # whether streaming ever started (only then is a lost connection reconnected)
        # For the metrics (metrics.py): the protocol version and the last message written that completed a
        # transaction's position (whose commit time it reads), and the backfill of the connection streaming now.
        self.last_completed: tuple[int, bytes] | None = None
        self.running_backfill: Backfill | None = None
        self._defaults: ColumnDefaults | None = None  # (see _column_defaults)

    def check_output(self) -> CaptureHeader | None:
        """:func:`check_output` of this capture's file (:meth:`run` calls it first; a caller with work of its
        own to do before, such as a snapshot, calls it before that).  With rotation, of the newest segment."""
        if self.rotation is not None:
            self.out = check_pattern(self.pattern)
        return check_output(self.out)

    # -- set-up over a normal connection -------------------------------------------------------------------

    def _prepare_server(self, existing: CaptureHeader | None) -> tuple[CaptureHeader, LSN]:
        """Set up, check the existing file (``existing``: its header) against the server and the slot, and
        only then check or create the slot: the header of the file and the slot's confirmed position."""
        import psycopg2

        name = self.settings.slot

        def check(server: ServerInfo) -> None:  # before the publication or the slot is created
            header = server.header(self.settings)  # (checks the settings against the server)
            if self.failover:
                self._check_failover(server)
            if existing is not None:
                check_settings(self.out, existing, header)
                check_source(self.out, existing, name, server)
                if not slot.slot_exists(server.cur, name):
                    try:
                        refuse_new_slot(self.out, name, existing)
                    except CaptureError as error:
                        if not self.failover:
                            raise
                        raise CaptureError(f"{error} (after a failover the slot is on the new primary only if the "
                                           "standby had synchronised it before its promotion: synced, and not "
                                           "temporary, in the standby's pg_replication_slots)") from None

        with set_up(self.dsn, self.settings.publication, create_publication=self.create_publication,
                    check=check) as server:
            header = server.header(self.settings)
            try:
                if self.failover and slot.has_failover(server.cur, name) is False:
                    self._make_failover(server.cur, name)
                confirmed = slot.check_slot(server.cur, name, two_phase=self.settings.two_phase or None,
                                            create=self.create_slot, failover=self.failover)
            except slot.SlotError as error:
                raise CaptureError(str(error)) from None
            except psycopg2.Error as error:
                kind = ConnectionLost if is_lost(error, server.conn) else CaptureError
                raise kind(f"cannot check or create slot {name!r}: {server_error(error)}") from None
            return header, confirmed

    def _check_failover(self, server: ServerInfo) -> None:
        """A failover slot needs PostgreSQL 17+, and is read on a primary: a standby is refused when the capture
        starts, and waited for (as a lost connection) when it reconnects, as it may be about to be promoted."""
        if server.version < slot.FAILOVER_VERSION:
            raise CaptureError(f"failover slots need PostgreSQL 17 or later; the server is "
                               f"{server.version // 10000}.{server.version % 10000} (leave out --failover)")
        server.cur.execute("SELECT pg_is_in_recovery()")
        if server.cur.fetchone()[0]:
            what = ("the server is a standby (in recovery): a failover slot is read on the primary; name both "
                    "servers in --dsn with target_session_attrs=read-write (host=A,B port=P,Q ...)")
            raise (ConnectionLost if self._streamed else CaptureError)(what)

    def _make_failover(self, cur: Any, name: str, timeout: float = 10.0) -> None:
        """Make the existing slot ``name`` a failover slot (``ALTER_REPLICATION_SLOT``, a replication command,
        which waits for as long as another process holds the slot): once no walsender holds it, waiting up to
        ``timeout`` seconds for one that is exiting (the snapshot's) to let go."""
        import psycopg2

        deadline = time.monotonic() + timeout
        while True:
            cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (name,))
            row = cur.fetchone()
            if row is None or row[0] is None:
                break
            if time.monotonic() > deadline:
                raise CaptureError(f"slot {name!r} is not a failover slot, and cannot be made one while the process "
                                   f"with PID {row[0]} reads it: stop that client")
            time.sleep(0.05)
        conn = connect(self.dsn, replication=True)
        try:
            conn.cursor().execute(f"ALTER_REPLICATION_SLOT {quote_identifier(name)} (FAILOVER true)")
        except psycopg2.Error as error:
            kind = ConnectionLost if is_lost(error, conn) else CaptureError
            raise kind(f"cannot make slot {name!r} a failover slot: {server_error(error)}") from None
        finally:
            conn.close()
        self._say(f"slot {name!r} is now a failover slot (ALTER_REPLICATION_SLOT ... (FAILOVER true))")

    def _open_file(self, header: CaptureHeader, confirmed: LSN, *, again: bool = False) -> CaptureWriter:
        """The writer of the capture file, cut to what the slot confirmed (``again``: on a reconnection, where
        what is cut off was counted as received and is received again)."""
        try:
            if self.rotation is not None:  # the segment that holds the slot's position (see rotation.py)
                number, self.out, removed = resume_segment(self.pattern, confirmed)
                if removed:
                    gone = ", ".join(reversed(removed))
                    self._say(f"the slot stands at {confirmed}, before {gone} started: removed (the server sends "
                              f"what they held again); resuming {self.out}")
                header = replace(header, segment=number, segment_start=confirmed)  # (for a new one)
            if os.path.exists(self.out) and os.path.getsize(self.out) > 0:
                found = resume(self.out, confirmed)
                cut_file(self.out, found.cut)
                if again:  # (each cut record was received by this run: the file was cut when it started)
                    progress = self.progress
                    progress.messages -= min(found.messages, progress.messages)
                    progress.bytes -= min(found.bytes, progress.bytes)
                    progress.transactions -= min(found.transactions, progress.transactions)
                else:
                    self.resumed_records = found.kept
            writer = CaptureWriter(self.out, header)
            writer.confirm(confirmed, at_start=True)  # where the slot stands: what the server sends follows it
            self._segment_opened = (time.monotonic(), self.progress.transactions)
            return writer
        except CaptureFileError as error:
            raise (CaptureDamaged if error.damaged_inside else CaptureError)(str(error)) from None
        except OSError as error:
            raise CaptureWriteError(f"cannot write {self.out}: {error.strerror or error}") from None

    def _rotation_due(self, writer: CaptureWriter, ahead: int = 0, grown: bool = False) -> bool:
        """Whether the segment ``writer`` writes is to be closed (to be asked only between transactions), with
        ``ahead`` bytes more to come into it (``grown``: a transaction among them)."""
        if self.rotation is None:
            return False
        opened, transactions = self._segment_opened
        return self.rotation.due(writer.mark()[0] + ahead, time.monotonic() - opened,
                                 grown or self.progress.transactions > transactions)

    def _next_segment(self, writer: CaptureWriter) -> CaptureWriter:
        """The writer of a new segment after the one ``writer`` writes (everything in it durable and acknowledged,
        up to ``progress.flushed_lsn``, which it reaches), starting at that position.  Over replication
        :meth:`run` then goes on in it as a reconnection would (:func:`~replwire.codec.io.rotation.
        resume_segment` decides)."""
        position = self.progress.flushed_lsn
        number = (writer.header.segment or 0) + 1
        path = segment_path(self.pattern, number)
        try:
            following = CaptureWriter(path, replace(writer.header, segment=number, segment_start=position))
            following.confirm(position, at_start=True)
            following.sync()
        except OSError as error:
            raise CaptureWriteError(f"cannot write {path}: {error.strerror or error}; {writer.path} is complete: "
                                    "make room and run the same command again to resume") from None
        self._say(f"rotated: segment {number} ({path}) starts at {position}")
        return following

    def _rotated(self, writer: CaptureWriter) -> CaptureWriter | None:
        if not self._rotation_due(writer):
            return None
        following = self._next_segment(writer)
        writer.close()
        self.out = following.path
        self._segment_opened = (time.monotonic(), self.progress.transactions)
        return following

    def _backfill(self, writer: CaptureWriter) -> Backfill:
        from .backfill import BUDGET, Backfill

        return Backfill(self.dsn, self.settings.publication, self.backfill, binary=self.settings.binary,
                        proto_version=writer.header.proto_version, server_version=writer.header.server_version,
                        encoding=writer.header.client_encoding, path=self.out, two_phase=self.settings.two_phase,
                        budget=self.backfill_budget or BUDGET, rate=self.backfill_rate, slot=self.settings.slot,
                        log=self.log)

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)

    # -- the loop -------------------------------------------------------------------------------------------

    def run(self, *, stop: threading.Event | None = None, idle_exit: float | None = None) -> Progress:
        if self.via == "sql" and self.settings.streaming:
            raise CaptureError("streaming cannot be used with the SQL functions: every call decodes again from the "
                               "slot's confirmed position, so a streamed transaction still in progress would be "
                               "stored again by every call (leave streaming off: the server spills large "
                               "transactions to disk and sends them once), or capture over replication")
        existing = self.check_output()
        created = not os.path.exists(self.out)  # (an empty file is not this run's to remove)
        header, confirmed = self._prepare_server(existing)
        options, proto = header.options, header.proto_version
        writer = self._open_file(header, confirmed)
        if self.backfill:
            try:
                self._backfill(writer).prepare()  # (refuses what cannot be backfilled before streaming starts)
            except BaseException:
                writer.close()
                raise
        self.progress.flushed_lsn = confirmed
        self._activity = time.monotonic()
        runner = self._run_sql if self.via == "sql" else self._run_replication
        try:
            attempts = 0
            while True:
                started = self.progress.messages
                try:
                    self._rotating = False
                    result = runner(writer, proto, options, stop, idle_exit)
                    if not self._rotating:
                        return result
                    # Rotation: the session ended between transactions, everything durable and acknowledged,
                    # and the slot released.  The next segment is streamed in a new session, as after a
                    # reconnection, so the server sends the Relation messages again: each segment decodes alone.
                    self._next_segment(writer).close()
                    header, confirmed = self._prepare_server(self.check_output())
                    writer = self._open_file(header, confirmed, again=True)
                    self.progress.flushed_lsn = confirmed
                except ConnectionLost as lost:
                    if not self.reconnect or not self._streamed:
                        raise  # (a first connection that fails is an error, as pg_recvlogical's is)
                    if self.progress.messages > started:
                        attempts = 0  # it streamed again: the next loss starts the back-off anew
                    found = self._reconnect(str(lost), attempts, stop, idle_exit)
                    if found is None:
                        return self.progress
                    writer, attempts = found
        except BaseException:
            if created:
                self._remove_if_empty()
            raise

    def _remove_if_empty(self) -> None:
        """A capture that failed before a record reached the new file it created leaves no file behind."""
        try:
            if first_record(self.out) is None:
                os.unlink(self.out)
        except (OSError, CaptureFileError):
            pass

    def _reconnect(self, reason: str, attempts: int, stop: threading.Event | None, idle_exit: float | None
                   ) -> tuple[CaptureWriter, int] | None:
        """Resume after a lost connection, as a new run on the file would, trying again with a growing delay
        until it works; ``None`` when ``stop`` was set or ``idle_exit`` passed meanwhile.  Anything that cannot
        be survived is raised."""
        while True:
            delay = min(self.reconnect_delay * 2 ** attempts, self.reconnect_max)
            attempts += 1
            self._say(f"{reason}; reconnecting in {delay:g} s (attempt {attempts})")
            if stop is not None:
                stopped = stop.wait(delay)
            else:
                time.sleep(delay)
                stopped = False
            if stopped:
                self._say("stopped while reconnecting")
                return None
            if idle_exit is not None and time.monotonic() - self._activity > idle_exit:
                self._say(f"stopped: nothing captured for {idle_exit:g} s (--idle-exit), the last "
                          f"{delay:g} s while reconnecting")
                return None
            try:
                header, confirmed = self._prepare_server(self.check_output())
                writer = self._open_file(header, confirmed, again=True)
            except ConnectionLost as again:
                reason = str(again)
                continue
            self.reconnects += 1
            self.progress.flushed_lsn = confirmed
            self._say(f"reconnected: resuming from {confirmed}, the slot's confirmed position")
            return writer, attempts

    def _run_replication(self, writer: CaptureWriter, proto: int, options: dict[str, str],
                         stop: threading.Event | None, idle_exit: float | None) -> Progress:
        """Stream until stopped; the file is closed on return.  A lost connection is a :class:`ConnectionLost`,
        a failed write a :class:`CaptureWriteError` (each only after the clean-up, which acknowledges nothing
        then), a server's error a :class:`CaptureError`."""
        import psycopg2

        tracker = PositionTracker(proto, writer.header.client_encoding)
        progress = self.progress
        try:
            conn = connect(self.dsn, replication=True)
        except CaptureError:
            writer.close()
            raise
        check_encoding(conn, writer)
        cur = conn.cursor()
        pending = 0  # the highest position completed since the last acknowledgement (0: none)
        last_sync = last_confirm = time.monotonic()

        def sync_and_ack(force: bool = False) -> None:
            nonlocal pending, last_sync, last_confirm
            now = time.monotonic()
            if not force and now - last_sync < self.sync_interval:
                return
            target = pending
            server_end = getattr(cur, "wal_end", 0) or 0
            if server_end > progress.server_lsn:
                progress.server_lsn = LSN(server_end)
            if tracker.idle and server_end > max(target, progress.flushed_lsn):  # (acknowledged: in the file)
                # Nothing in flight: the server may forget everything it sent -- once the file says so (a
                # SlotConfirmed, durable before the acknowledgement), so that a capture started later from
                # this position is known to follow this file.  Said every _CONFIRM_EVERY seconds at most
                # while the server's WAL moves with nothing for the publication; psycopg2 confirms the WAL
                # end of the keepalives itself in the status updates it sends when this loop sends none for
                # its status interval, which these keep from coming due.
                if not force and not pending and now - last_confirm < _CONFIRM_EVERY:
                    return
                writer.confirm(server_end)
                target, last_confirm = server_end, now
            writer.sync()
            last_sync = now
            if target > progress.flushed_lsn:
                progress.flushed_lsn = LSN(target)
            cur.send_feedback(write_lsn=int(progress.current_lsn), flush_lsn=int(progress.flushed_lsn),
                              apply_lsn=int(progress.flushed_lsn), force=True)
            pending = 0
            if self.on_progress:
                self.on_progress(progress)

        read, feed = cur.read_message, tracker.feed
        rotating = self.rotation is not None
        failure: Exception | None = None
        walsender: int | None = None
        stopping = False  # stopped on purpose: stop, idle_exit or Ctrl-C
        started = False  # START_REPLICATION was taken
        in_burst = interrupted = False  # (in_burst: records read whose bookkeeping is not done)
        refused: CaptureError | None = None  # a message the tracker cannot take: the end of the capture
        backfill: Backfill | None = None
        defaults = self._column_defaults(writer, proto)
        follow: Callable[[int, bytes], list[RecordData]] | None = None  # the backfill's side of each message
        try:
            walsender = conn.get_backend_pid()
            if self.backfill or self.settings.messages:  # (from what the file holds now: a reconnection
                backfill = self._backfill(writer)        # continues each run from there, and takes requests)
                self.running_backfill = backfill
                backfill.prepare()
                follow = backfill.feed
            cur.start_replication(slot_name=self.settings.slot, decode=False,
                                  options={"proto_version": str(proto), **options}, status_interval=10)
            self._streamed = started = True
            if backfill is not None:
                backfill.start()
            while not (stop is not None and stop.is_set()):
                if backfill is not None and backfill.failure is not None:
                    break
                message = read()
                if message is None:
                    sync_and_ack()
                    if rotating and tracker.idle and self._rotation_due(writer):
                        self._rotating = True  # (the session ends here, between transactions: see run())
                        break
                    if (idle_exit is not None and tracker.idle and time.monotonic() - self._activity > idle_exit
                            and not (backfill is not None and backfill.busy)):
                        break
                    # (awake when the next sync is due: what is pending is acknowledged on time)
                    due = self.sync_interval - (time.monotonic() - last_sync) if pending else self.sync_interval
                    select.select([cur], [], [], max(0.0, min(self.sync_interval, 0.2, due)))
                    continue
                # A burst: every message already received, up to a thousand, with no per-message bookkeeping
                # beyond the tracker; the records go to the file, and the counters are published, after it.
                burst: list[tuple[int, int, RecordData]] = []
                add = burst.append
                completed = ahead = 0  # (ahead: the bytes of the burst's messages)
                done: bytes | None = None  # the last transaction's message that completed a position
                durable_now = False
                in_burst = True
                try:
                    while message is not None:
                        data = message.payload
                        start = message.data_start
                        try:
                            position = feed(data)  # before it goes into the burst: a refused one is not written
                        except ReplwireError as error:
                            refused = undecodable(start, getattr(cur, "wal_end", 0) or 0, error)
                            break
                        add((start, 0, data))
                        ahead += len(data) + _FRAMING
                        if follow is not None:
                            for record in follow(start, data):  # a backfill's chunk, right after its watermark
                                add((start, 0, record))
                        if defaults is not None and data and data[0] == 0x52:  # a Relation: its columns' defaults
                            found = defaults.after_relation(data, tracker.in_stream)
                            if found is not None:
                                add((start, 0, found))
                        if position is not None:
                            completed += 1
                            if data[0] != 0x4D:  # (not a Message: a commit, prepare or rollback has a time)
                                done = data
                            if position > pending:
                                pending = position
                            if rotating and tracker.idle and self._rotation_due(writer, ahead, grown=True):
                                break  # (the segment is closed at this transaction's end: see run())
                        if start == 0 and pending:
                            # A message the server sent without a position (a Relation or Type, a Begin before
                            # its Origin).  After one, psycopg2 itself confirms the WAL end of the next keepalive
                            # it reads, in read_message(), and in every later status update: so what completed
                            # before it is made durable before anything more is read.
                            durable_now = True
                            break
                        if len(burst) == 1000:
                            break
                        message = read()
                finally:
                    writer.extend(burst)  # first: whatever is acknowledged after this must be in the file
                    progress.messages += len(burst)
                    progress.bytes += sum(record_size(record[2]) for record in burst)
                    progress.transactions += completed
                    if done is not None:
                        self.last_completed = (proto, done)
                    current = max((record[0] for record in burst), default=0)  # (0: a message without a position)
                    if current > progress.current_lsn:
                        progress.current_lsn = LSN(current)
                in_burst = False
                self._activity = time.monotonic()
                if refused is not None:
                    break  # (what came before it is in the file: made durable and acknowledged below)
                sync_and_ack(force=durable_now)
                if rotating and tracker.idle and self._rotation_due(writer):
                    self._rotating = True
                    break
            stopping = refused is None
        except KeyboardInterrupt:
            stopping = True
            # Interrupted in the middle of a burst, the positions and the tracker may be ahead of the file:
            # what the file holds is made durable (by close()), and nothing more is acknowledged.
            interrupted = in_burst
        except (psycopg2.Error, OSError, ValueError) as error:  # (ValueError: select() on a closed connection)
            failure = error
        if failure is None and not interrupted:
            try:
                sync_and_ack(force=True)  # the last acknowledgement: of what is durable now
            except (psycopg2.Error, OSError, ValueError) as error:
                failure = error
        if self._rotating and failure is None:
            self._wait_confirmed(progress.flushed_lsn)
        if backfill is not None:
            backfill.stop()
        if defaults is not None:
            defaults.close()
        # An OSError or ValueError is the connection's only when the connection is gone; otherwise it is this
        # process's own (a failed write, which writer.failed tells, or the progress callback's), not a loss.
        lost = failure is not None and (is_lost(failure, conn) if isinstance(failure, psycopg2.Error)
                                        else bool(conn.closed))
        try:
            writer.close()  # (a broken writer's file stays cut back to its last durable record)
        except OSError:
            pass  # (writer.failed says what)
        finally:
            conn.close()
        if writer.failed is not None:  # what cannot be survived comes first
            problem = writer.failed
            raise CaptureWriteError(f"cannot write {self.out}: {problem.strerror or problem}; the file was cut back "
                                    f"to its last durable record (offset {writer.durable}), and the slot confirmed "
                                    f"no more than that ({progress.flushed_lsn}): make room and run the same "
                                    "command again to resume") from None
        if refused is not None:
            raise refused
        if backfill is not None and failure is None:
            backfill.check()  # (the chunker's failure: a lost connection is reconnected as the stream's is)
        if failure is not None and not isinstance(failure, psycopg2.Error) and not lost:
            raise failure  # (not the server's, not the connection's: this process's own)
        if failure is not None:
            if not lost:
                raise CaptureError(f"the server stopped the capture: {server_error(failure)}") from None
            if stopping:
                return progress  # stopped as asked; what the file holds is durable, the rest is sent again
            if not started:
                raise ConnectionLost(f"cannot start streaming from slot {self.settings.slot!r}: "
                                     f"{server_error(failure)}") from None
            raise ConnectionLost(f"lost the connection to the server: {server_error(failure)}") from None
        if walsender is not None:
            self._wait_released(walsender)
        return progress

    def _wait_confirmed(self, position: LSN, timeout: float = 5.0) -> None:
        """Wait until the slot's confirmed position is ``position``, before a rotation closes the connection.

        What the server sent is left unread then, so the kernel resets the connection as it closes, and a reset
        can drop the acknowledgement the walsender has not read yet: the next segment would start past the
        slot (and be removed by :func:`~replwire.codec.io.rotation.resume_segment`, the session started
        again).  The walsender reads replies even while it waits to send, so this takes a round trip or two."""
        import psycopg2

        deadline = time.monotonic() + timeout
        try:
            conn = psycopg2.connect(self.dsn)
        except psycopg2.Error:
            return  # (what the slot stands at is read again before the next segment is written)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while time.monotonic() < deadline:
                    cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                (self.settings.slot,))
                    row = cur.fetchone()
                    if row is None or row[0] is None or LSN(row[0]) >= position:
                        return
                    time.sleep(0.002)
        except psycopg2.Error:
            return
        finally:
            conn.close()

    def _wait_released(self, walsender: int, timeout: float = 10.0) -> None:
        """Wait until the walsender ``walsender`` has let go of the slot.

        Closing the connection only sends the final status update and a Terminate; the walsender handles
        them later, in order, and releases the slot as it exits, after taking the update.  Until then the slot
        shows an older confirmed position and cannot be used again ("active for PID"), so :meth:`run`
        returns only once the slot is released (or, after ``timeout`` seconds, with a warning)."""
        import psycopg2

        deadline = time.monotonic() + timeout
        try:
            conn = psycopg2.connect(self.dsn)
        except psycopg2.Error:
            return  # the acknowledgement was sent; nothing here can make the server take it sooner
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while True:
                    cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                                (self.settings.slot,))
                    row = cur.fetchone()
                    if row is None or row[0] != walsender:
                        return
                    if time.monotonic() > deadline:
                        warnings.warn(f"the walsender (PID {walsender}) still holds slot {self.settings.slot!r} "
                                      f"{timeout:g} s after the capture closed its connection; the slot may not "
                                      f"show the last acknowledged position {self.progress.flushed_lsn} yet",
                                      RuntimeWarning, stacklevel=3)
                        return
                    time.sleep(0.005)
        except psycopg2.Error:
            return
        finally:
            conn.close()
