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

With ``via="sql"`` the same file is written from the SQL functions over an ordinary connection instead,
for servers where a replication connection is not available: ``pg_logical_slot_peek_binary_changes`` reads a
batch from the slot's confirmed position, the records are appended and fsynced, and only then is the slot
moved with ``pg_replication_slot_advance`` -- to the last position completed in the batch (a commit's end
LSN, never the middle of a commit record, which would make the server skip that transaction), or, when the
call read everything up to the WAL position taken just before it, to that position.  Each call is a new
pgoutput session, so every batch repeats the Relation (and Type) messages its changes need.  Streaming is
refused in this mode: every call decodes again from the confirmed position, so a streamed transaction still
in progress would be sent -- and stored -- again by every call (without it the server spills a large
transaction to disk and sends it once, at its commit).

Every capture -- this one and the initial snapshot's (:mod:`~replwire.codec.io.snapshot`) -- starts with
:func:`set_up` over an ordinary connection: connect, read the server's version, check the publication (and,
for a snapshot, that the server is not a standby); :func:`connect` opens every connection, so a failure to
connect reads the same wherever it happens.

Restarting on an existing file resumes from the slot's confirmed position: records after the last one
the server has confirmed are cut off first (the server sends them again), so the file ends up holding
every message exactly once.  Only the slot the file came from can do that: a new file's header records the
slot's name, the server's system identifier and the database, and a file that names another is refused; a
file that holds records is refused too when its slot does not exist (a new slot would start now, and what
happened between the file's end and now would be in neither).  Both are checked, like the output file itself
(:func:`check_output`), before anything is created on the server.  A streamed transaction whose early
blocks were kept is sent again from its first block; readers restart such a transaction when its
``first_segment`` Stream Start comes again.
"""

from __future__ import annotations

import os
import select
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ...schema import highest_proto_version
from ..errors import DecodeError, ReplwireError
from ..scalars import LSN
from ..stream import snapshot
from ..wire.fast import parse
from . import slot
from .capture_file import CaptureFileError, CaptureHeader, CaptureReader, CaptureWriter, cut_file, read_capture
from .positions import PositionTracker, message_completes
from .slot import quote_identifier

__all__ = ["VIAS", "CaptureDamaged", "CaptureError", "CaptureSettings", "CaptureWriteError", "ConnectionLost",
           "LiveCapture", "Progress", "Server", "check_output", "check_settings", "check_source", "connect",
           "resume_point", "server_error", "set_up"]

#: How live capture reads the slot: the replication protocol, or the SQL functions over an ordinary connection.
VIAS = ("replication", "sql")
_CONFIRMED = bytes((snapshot.CONFIRMED,))
#: The most seconds between two SlotConfirmed records while the server's WAL moves with nothing for the
#: publication (below psycopg2's status interval of 10 s, see _run_replication).
_CONFIRM_EVERY = 5.0


class CaptureError(ReplwireError, RuntimeError):
    """Live capture could not start or go on (server, slot, publication or file problem).  ``exit_status`` is
    the status ``replwire capture`` exits with for it; the subclasses below are the classes a caller may want to
    tell apart."""

    exit_status = 1


class ConnectionLost(CaptureError):
    """The connection to the server was lost (a restart, a failover, the walsender terminated, the network),
    or could not be made: trying again later may succeed."""

    exit_status = 3


class CaptureWriteError(CaptureError):
    """The capture file could not be written (a full disk, an I/O error); it was cut back to its last durable
    record, which is as far as the slot was told."""

    exit_status = 4


class CaptureDamaged(CaptureError):
    """The capture file is damaged inside: resuming it would cut off changes the slot already confirmed."""

    exit_status = 5


#: Words of the server's (or libpq's) refusal to connect that trying again will not change.
_REFUSALS = ("authentication failed", "no pg_hba.conf entry", "does not exist", "permission denied",
             "not permitted", "must be superuser", "must have", "invalid", "unsupported")


def is_lost(error: Exception, conn: Any = None) -> bool:
    """Whether the driver's ``error`` means the connection went away (or the server cannot take it now), so a
    new one may succeed: a closed ``conn``, no SQLSTATE (libpq's own "no COPY in progress", "server closed the
    connection unexpectedly"), a connection exception (08), an operator intervention (57: a shutdown, the
    walsender terminated, the server starting up), or the slot still held by a walsender that is exiting."""
    if conn is not None and conn.closed:
        return True
    code = getattr(error, "pgcode", None)
    if code is None:
        text = str(error).lower()
        return not any(word in text for word in _REFUSALS)
    return code[:2] in ("08", "57") or code == "55006"  # object_in_use: "replication slot ... is active for PID"


@dataclass(frozen=True)
class CaptureSettings:
    """What to capture: the slot, the publication, and the pgoutput options to ask for."""

    slot: str
    publication: str
    proto_version: int | None = None  # None: the highest the server supports
    streaming: str | None = None  # None, "on" or "parallel"
    binary: bool = False
    messages: bool = False
    two_phase: bool = False

    def options(self, server_version: int) -> dict[str, str]:
        """The pgoutput options for ``START_REPLICATION`` (besides proto_version), checked against the server."""
        proto = self.protocol(server_version)
        out: dict[str, str] = {"publication_names": quote_identifier(self.publication)}
        if self.streaming:
            need = 4 if self.streaming == "parallel" else 2
            if proto < need:
                raise CaptureError(f"streaming={self.streaming} needs protocol {need}; this capture uses {proto}")
            out["streaming"] = self.streaming if server_version >= 160000 else "true"
        if self.binary:
            out["binary"] = "true"
        if self.messages:
            out["messages"] = "true"
        if self.two_phase:
            if proto < 3:
                raise CaptureError(f"two_phase needs protocol 3; this capture uses {proto}")
            out["two_phase"] = "true"
        if server_version < 140000 and set(out) - {"publication_names"}:
            raise CaptureError("binary, messages and streaming need PostgreSQL 14 or later")
        return out

    def protocol(self, server_version: int) -> int:
        """The protocol version this capture uses on the server: the one asked for, checked, or the highest."""
        highest = highest_proto_version(server_version)
        if self.proto_version is None:
            return highest
        if not 1 <= self.proto_version <= highest:
            raise CaptureError(f"the server ({server_version}) supports protocol versions 1 to {highest}, "
                               f"not {self.proto_version}")
        return self.proto_version


def server_error(error: Exception) -> str:
    """A driver's error as one line: the server's message with its detail and hint lines, if any."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__


def connect(dsn: str, *, replication: bool = False) -> Any:
    """A psycopg2 connection to ``dsn`` -- a logical replication connection with ``replication`` -- or a
    :class:`CaptureError` that says which could not be opened, why, and what it needs."""
    import psycopg2
    import psycopg2.extras

    try:
        if replication:
            return psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        return psycopg2.connect(dsn)
    except psycopg2.Error as error:
        kind = ConnectionLost if is_lost(error) else CaptureError
        if replication:
            raise kind(f"cannot open a replication connection: {server_error(error)} (it needs a user with "
                       "the REPLICATION attribute and a free walsender, max_wal_senders)") from None
        raise kind(f"cannot connect to the server: {server_error(error)} (check the DSN)") from None


@dataclass(frozen=True)
class Server:
    """The server as :func:`set_up` found it: the ordinary connection (autocommit) and a cursor of it, its
    ``server_version_num``, and what the file's header records: the connection's client encoding, the server's
    system identifier (in decimal) and the database's name (each ``None`` when the server does not tell it)."""

    conn: Any
    cur: Any
    version: int
    client_encoding: str
    system_identifier: str | None = None
    database: str | None = None

    def header(self, settings: CaptureSettings) -> CaptureHeader:
        """The header of a new capture file of ``settings`` from this server (checks the settings)."""
        return CaptureHeader(proto_version=settings.protocol(self.version), server_version=self.version,
                             options=settings.options(self.version), client_encoding=self.client_encoding,
                             slot_name=settings.slot, system_identifier=self.system_identifier,
                             database=self.database)


def _identity(cur: Any) -> tuple[str | None, str | None]:
    """The server's system identifier (in decimal) and the database's name, each ``None`` when the server does
    not tell it: a user who may not call pg_control_system(), or a server that answers only the queries of a
    replication client's set-up (``replwire serve``'s)."""
    import psycopg2.errors

    values: list[str | None] = []
    for query in ("SELECT system_identifier::text FROM pg_control_system()", "SELECT current_database()"):
        try:
            cur.execute(query)
        except (psycopg2.errors.InsufficientPrivilege, psycopg2.errors.FeatureNotSupported):
            values.append(None)
        else:
            values.append(str(cur.fetchone()[0]))
    return values[0], values[1]


@contextmanager
def set_up(dsn: str, publication: str, *, create_publication: bool = False, for_snapshot: bool = False,
           check: Callable[[Server], None] | None = None) -> Iterator[Server]:
    """The set-up every capture starts with, over an ordinary connection that is closed on leaving: connect,
    read the server's version, refuse a standby when the set-up is ``for_snapshot``, call ``check`` with the
    :class:`Server` (the caller's checks that must pass before anything is created on the server), and check
    the publication (create it ``FOR ALL TABLES`` with ``create_publication``).  A failure is a
    :class:`CaptureError` naming what failed and what to do."""
    import psycopg2

    conn = connect(dsn)
    try:
        conn.autocommit = True
        cur = conn.cursor()
        try:
            version = slot.server_version(cur)
            if for_snapshot:
                cur.execute("SELECT pg_is_in_recovery()")
                if cur.fetchone()[0]:
                    raise CaptureError("the server is a standby (in recovery): take the snapshot from the primary, "
                                       "with --dsn naming it")
            server = Server(conn, cur, version, conn.get_parameter_status("client_encoding"), *_identity(cur))
            if check is not None:
                check(server)
            slot.check_publication(cur, publication, create=create_publication,
                                   hint="(create it with CREATE PUBLICATION, or have it created FOR ALL TABLES "
                                        "with --create-publication, create_publication=True from Python)")
        except slot.SlotError as error:
            raise CaptureError(str(error)) from None
        except psycopg2.Error as error:
            kind = ConnectionLost if is_lost(error, conn) else CaptureError
            raise kind(f"cannot set up the capture: {server_error(error)}") from None
        yield server
    finally:
        conn.close()


def check_output(path: str | os.PathLike[str]) -> CaptureHeader | None:
    """Check, before any work on the server, that a capture can write ``path``: an existing, non-empty file
    must be a readable capture file (whose header is returned, to resume it), and a new one's directory
    must exist and be writable.  A problem is a :class:`CaptureError` naming the file and what to do."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise CaptureError(f"{path} is a directory, not a capture file: name a file to capture into")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        try:
            with read_capture(path) as reader:
                header = reader.header
        except CaptureFileError as error:
            raise CaptureError(f"{error}: an existing file is resumed, so it must be a capture file (name a new "
                               "file to start a capture)") from None
        except OSError as error:
            raise CaptureError(f"cannot read {path}: {error.strerror}") from None
        if not os.access(path, os.W_OK):
            raise CaptureError(f"cannot resume {path}: the file is not writable")
        return header
    if os.path.exists(path):  # empty: written from the start
        if not os.access(path, os.W_OK):
            raise CaptureError(f"cannot write {path}: the file is not writable")
        return None
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CaptureError(f"cannot create {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CaptureError(f"cannot create {path}: the directory {directory} is not writable")
    return None


def check_settings(path: str | os.PathLike[str], header: CaptureHeader, wanted: CaptureHeader) -> None:
    """Refuse to resume the capture file ``path`` (whose header is ``header``) with other settings than
    ``wanted``'s (protocol version, pgoutput options, client encoding): its records would be read with the
    wrong ones."""
    if header.settings != wanted.settings:
        raise CaptureError(f"{os.fspath(path)} was captured with other settings {header.settings}, not "
                           f"{wanted.settings}; use another --out file")


def check_source(path: str | os.PathLike[str], header: CaptureHeader, slot_name: str, server: Server) -> None:
    """Refuse to resume the capture file ``path`` (whose header is ``header``) from ``slot_name`` on
    ``server`` when its header names another slot, server or database (what it does not name is not
    checked: an older file).  The slot the file came from is the only one that continues it."""
    path = os.fspath(path)
    if header.slot_name is not None and header.slot_name != slot_name:
        raise CaptureError(f"{path} was captured from slot {header.slot_name!r}, not {slot_name!r}: resume it "
                           f"with --slot {header.slot_name}, or use another --out for a capture of slot "
                           f"{slot_name!r}")
    here = server.system_identifier
    if header.system_identifier is not None and here is not None and header.system_identifier != here:
        raise CaptureError(f"{path} was captured from the server with system identifier "
                           f"{header.system_identifier}, not this one ({here}): resume it from that server "
                           "(--dsn), or use another --out")
    if header.database is not None and server.database is not None and header.database != server.database:
        raise CaptureError(f"{path} was captured from database {header.database!r}, not {server.database!r}: "
                           f"resume it with a --dsn naming dbname={header.database}, or use another --out")


def _first_record(path: str) -> bytes | None:
    """The data of the first record of the capture file ``path`` that holds something captured (``None``: it
    holds none, at most records of where its slot stood)."""
    with read_capture(path) as reader:
        reading = reader.records(raw=True)
        try:
            first = next((data for _, _, _, data in reading if data[:1] != _CONFIRMED), None)
        finally:
            reading.close()
    return first


@dataclass
class Progress:
    """What a running capture has done so far."""

    messages: int = 0
    bytes: int = 0
    transactions: int = 0
    current_lsn: LSN = LSN(0)
    flushed_lsn: LSN = LSN(0)
    server_lsn: LSN = LSN(0)
    started: float = field(default_factory=time.monotonic)

    @property
    def lag_bytes(self) -> int:
        """How far the server's WAL end is ahead of what this capture has made durable."""
        return max(0, int(self.server_lsn) - int(self.flushed_lsn))


def resume_point(path: str, confirmed: LSN) -> tuple[int, int]:
    """Where to cut an existing capture file so that it ends with what the server confirmed: the offset after
    the last record whose completed position is at or below ``confirmed`` (records after it are sent again),
    and how many records stay.

    A damaged record is where the file's readable part ends.  Intact records after it (the file is damaged
    inside, not torn at its end) that complete a position at or below ``confirmed`` hold changes the server
    will not send again: cutting would lose them, so that is refused with a :class:`CaptureDamaged`."""
    found = _resume_point(path, confirmed)
    return found.cut, found.kept


@dataclass(frozen=True)
class _Resume:
    """:func:`resume_point`'s ``cut`` and ``kept``, and what the records cut off held: how many, their
    bytes, and how many positions they complete (what a capture counted as messages, bytes and
    transactions when it received them)."""

    cut: int
    kept: int
    messages: int
    bytes: int
    transactions: int


def _resume_point(path: str, confirmed: LSN) -> _Resume:
    """:func:`resume_point`, with what is cut off."""
    with read_capture(path) as reader:
        tracker = PositionTracker(reader.header.proto_version, reader.header.client_encoding)
        cut, kept, count = reader.header_end, 0, 0
        size = completed = kept_size = kept_completed = 0  # (the bytes and positions of all, and of the kept)
        reading = reader.records(raw=True)
        for offset, _, _, data in reading:
            position: int | None
            if data and data[0] == snapshot.CONFIRMED:  # where the slot stood (between transactions): no message
                if snapshot.parse_record(data).lsn <= confirmed:
                    cut = reading.end
                continue
            count += 1
            size += len(data)
            if data and data[0] in snapshot.KINDS:  # a record of the file's snapshot section, not pgoutput
                position = snapshot.record_completes(data)
            else:
                try:
                    position = tracker.feed(data)
                except ReplwireError as error:
                    raise CaptureError(f"{path}: the record at offset {offset} holds a message replwire cannot "
                                       f"decode ({error}): the file cannot be resumed past it.  Keep this file "
                                       "as it is and capture to another --out") from None
            if position is not None:
                completed += 1
                if position <= confirmed:
                    cut, kept, kept_size, kept_completed = reading.end, count, size, completed
        damage = reading.tail
        if damage is not None and damage.intact_from is not None:
            lost = _confirmed_after(reader, damage.intact_from, confirmed)
            if lost is not None:
                raise CaptureDamaged(f"{path}: {damage}; the records after it complete positions the slot "
                                   f"already confirmed (up to {LSN(lost)}, confirmed {confirmed}), which the "
                                   "server will not send again: resuming would cut them off.  Keep this file "
                                   "as it is (decode reads up to the damage) and capture to another --out")
    return _Resume(cut, kept, count - kept, size - kept_size, completed - kept_completed)


def _confirmed_after(reader: CaptureReader, start: int, confirmed: LSN) -> int | None:
    """The highest position at or below ``confirmed`` that a record of ``reader`` from offset ``start`` on
    completes (read from each message alone: no stream state is known there), or ``None``."""
    proto, encoding = reader.header.proto_version, reader.header.client_encoding
    found = None
    for _, _, _, data in reader.records(start, raw=True):
        if not data:
            continue
        if data[0] in snapshot.KINDS:
            position = snapshot.record_completes(data)
        else:
            try:
                position = message_completes(parse(data, proto_version=proto, encoding=encoding))
            except DecodeError:
                continue
        if position is not None and position <= confirmed and (found is None or position > found):
            found = position
    return found


class LiveCapture:
    """Capture from ``dsn`` into the capture file ``out`` (see the module's docstring for the guarantees).

    ``create_slot`` creates the slot when it does not exist; ``create_publication`` creates the publication
    ``FOR ALL TABLES`` when it does not exist.  ``via`` is ``"replication"`` (the replication protocol) or
    ``"sql"`` (the SQL functions, ``batch_size`` rows asked for per call, polled every ``sync_interval``
    seconds while there is nothing new).  ``progress`` is called with a :class:`Progress` after every sync.
    :meth:`run` returns when ``stop`` is set, when ``idle_exit`` seconds passed with nothing to capture, or on
    Ctrl-C, always after a final sync and acknowledgement (only the sync when Ctrl-C lands in the middle of a
    burst of messages, whose positions are then not all in the file).

    A connection lost once the capture is streaming (a restart, a failover, the walsender
    terminated, the network) is not the end: with ``reconnect`` (the default) the capture resumes from the
    file's last durable record exactly as a new run on the file would -- the same checks of the file, the
    server, the database and the slot -- after ``reconnect_delay`` seconds, doubled after every failed attempt
    up to ``reconnect_max`` seconds; each attempt is told to ``log``.  Without ``reconnect`` the loss is a
    :class:`ConnectionLost`.  What cannot be survived is a :class:`CaptureError` (the slot dropped, a refused
    login), a :class:`CaptureWriteError` (the file could not be written) or a :class:`CaptureDamaged`.
    """

    def __init__(self, dsn: str, out: str | os.PathLike[str], settings: CaptureSettings, *, create_slot: bool = True,
                 create_publication: bool = False, sync_interval: float = 0.5,
                 progress: Callable[[Progress], None] | None = None, via: str = "replication",
                 batch_size: int = 10_000, reconnect: bool = True, reconnect_delay: float = 0.5,
                 reconnect_max: float = 30.0, log: Callable[[str], None] | None = None) -> None:
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
        self.progress = Progress()
        self.resumed_records: int | None = None
        self.reconnects = 0  # how many times the capture reconnected
        self._activity = time.monotonic()  # when the last message arrived (for idle_exit)
        self._streamed = False  # whether streaming ever started (only then is a lost connection reconnected)

    def check_output(self) -> CaptureHeader | None:
        """:func:`check_output` of this capture's file (:meth:`run` calls it first; a caller with work of its
        own to do before, such as a snapshot, calls it before that)."""
        return check_output(self.out)

    # -- set-up over a normal connection -------------------------------------------------------------------

    def _prepare_server(self, existing: CaptureHeader | None) -> tuple[CaptureHeader, LSN]:
        """Set up, check the existing file (``existing``: its header) against the server and the slot, and
        only then check or create the slot: the header of the file and the slot's confirmed position."""
        import psycopg2

        name = self.settings.slot

        def check(server: Server) -> None:  # before the publication or the slot is created
            header = server.header(self.settings)  # (checks the settings against the server)
            if existing is not None:
                check_settings(self.out, existing, header)
                check_source(self.out, existing, name, server)
                if not slot.slot_exists(server.cur, name):
                    self._refuse_new_slot(existing)

        with set_up(self.dsn, self.settings.publication, create_publication=self.create_publication,
                    check=check) as server:
            header = server.header(self.settings)
            try:
                confirmed = slot.check_slot(server.cur, name, two_phase=self.settings.two_phase or None,
                                            create=self.create_slot)
            except slot.SlotError as error:
                raise CaptureError(str(error)) from None
            except psycopg2.Error as error:
                kind = ConnectionLost if is_lost(error, server.conn) else CaptureError
                raise kind(f"cannot check or create slot {name!r}: {server_error(error)}") from None
            return header, confirmed

    def _refuse_new_slot(self, existing: CaptureHeader) -> None:
        """The slot does not exist, and the file ``existing`` heads is to be resumed: refused when the file
        holds records (a new slot would start now, so what happened between the file's end and now would be
        in neither).  An interrupted snapshot is taken again with its slot by ``take_snapshot``, before this."""
        try:
            first = _first_record(self.out)
        except CaptureFileError as error:
            raise CaptureError(str(error)) from None
        if first is None:  # nothing was captured, nothing to continue: the new slot's stream starts the file
            try:
                with read_capture(self.out) as reader:
                    start = reader.header_end
                cut_file(self.out, start)  # (where the old slot stood says nothing of the new one)
            except (OSError, CaptureFileError) as error:
                raise CaptureError(f"cannot write {self.out}: {error}") from None
            return
        name = self.settings.slot
        if first[:1] and first[0] == snapshot.BEGIN:
            taken = snapshot.parse_record(first).slot
            raise CaptureError(f"replication slot {name!r} does not exist, and {self.out} holds a snapshot taken "
                               f"with slot {taken!r}: a new slot would start now, without the changes between "
                               f"the snapshot and now (run the same command with --snapshot and --slot {taken} to "
                               "take an interrupted snapshot again, or use another --out for a new capture)")
        if existing.slot_name == name:
            raise CaptureError(f"replication slot {name!r}, which {self.out} was captured from, no longer exists: "
                               "the changes since the file's end are lost with it; start a new capture file "
                               "(another --out)")
        came_from = f"slot {existing.slot_name!r}" if existing.slot_name else "another slot"
        raise CaptureError(f"replication slot {name!r} does not exist, and {self.out} already holds a capture "
                           f"(from {came_from}): a new slot would start now, and the changes between the file's "
                           "end and now would be missing. Use the slot the file was captured from (--slot), or "
                           "another --out for a new capture")

    def _open_file(self, header: CaptureHeader, confirmed: LSN, *, again: bool = False) -> CaptureWriter:
        """The writer of the capture file, cut to what the slot confirmed (``again``: on a reconnection, where
        what is cut off was counted as received and is received again)."""
        try:
            if os.path.exists(self.out) and os.path.getsize(self.out) > 0:
                found = _resume_point(self.out, confirmed)
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
            return writer
        except CaptureFileError as error:
            raise (CaptureDamaged if error.damaged_inside else CaptureError)(str(error)) from None
        except OSError as error:
            raise CaptureWriteError(f"cannot write {self.out}: {error.strerror or error}") from None

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
        self.progress.flushed_lsn = confirmed
        self._activity = time.monotonic()
        runner = self._run_sql if self.via == "sql" else self._run_replication
        try:
            attempts = 0
            while True:
                started = self.progress.messages
                try:
                    return runner(writer, proto, options, stop, idle_exit)
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
            if _first_record(self.out) is None:
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
        _check_encoding(conn, writer)
        cur = conn.cursor()
        pending = 0  # the highest position completed since the last acknowledgement (0: none)
        reached = int(self.progress.flushed_lsn)  # the highest position the file completes or names
        last_sync = last_confirm = time.monotonic()

        def sync_and_ack(force: bool = False) -> None:
            nonlocal pending, reached, last_sync, last_confirm
            now = time.monotonic()
            if not force and now - last_sync < self.sync_interval:
                return
            target = pending
            server_end = getattr(cur, "wal_end", 0) or 0
            if server_end > progress.server_lsn:
                progress.server_lsn = LSN(server_end)
            if tracker.idle and server_end > max(target, reached):
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
            reached = max(reached, target)
            if target > progress.flushed_lsn:
                progress.flushed_lsn = LSN(target)
            cur.send_feedback(write_lsn=int(progress.current_lsn), flush_lsn=int(progress.flushed_lsn),
                              apply_lsn=int(progress.flushed_lsn), force=True)
            pending = 0
            if self.on_progress:
                self.on_progress(progress)

        read, feed = cur.read_message, tracker.feed
        failure: Exception | None = None
        walsender: int | None = None
        stopping = False  # stopped on purpose: stop, idle_exit or Ctrl-C
        started = False  # START_REPLICATION was taken
        in_burst = interrupted = False  # (in_burst: records read whose bookkeeping is not done)
        refused: CaptureError | None = None  # a message the tracker cannot take: the end of the capture
        try:
            walsender = conn.get_backend_pid()
            cur.start_replication(slot_name=self.settings.slot, decode=False,
                                  options={"proto_version": str(proto), **options}, status_interval=10)
            self._streamed = started = True
            while not (stop is not None and stop.is_set()):
                message = read()
                if message is None:
                    sync_and_ack()
                    if idle_exit is not None and tracker.idle and time.monotonic() - self._activity > idle_exit:
                        break
                    select.select([cur], [], [], min(self.sync_interval, 0.2))
                    continue
                # A burst: every message already received, up to a thousand, with no per-message bookkeeping
                # beyond the tracker; the records go to the file, and the counters are published, after it.
                burst: list[tuple[int, int, bytes]] = []
                add = burst.append
                completed = 0
                durable_now = False
                in_burst = True
                try:
                    while message is not None:
                        data = message.payload
                        start = message.data_start
                        try:
                            position = feed(data)  # before it goes into the burst: a refused one is not written
                        except ReplwireError as error:
                            refused = _undecodable(start, getattr(cur, "wal_end", 0) or 0, error)
                            break
                        add((start, 0, data))
                        if position is not None:
                            completed += 1
                            if position > pending:
                                pending = position
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
                    progress.bytes += sum(len(record[2]) for record in burst)
                    progress.transactions += completed
                    current = max((record[0] for record in burst), default=0)  # (0: a message without a position)
                    if current > progress.current_lsn:
                        progress.current_lsn = LSN(current)
                in_burst = False
                self._activity = time.monotonic()
                if refused is not None:
                    break  # (what came before it is in the file: made durable and acknowledged below)
                sync_and_ack(force=durable_now)
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

    # -- the SQL functions ----------------------------------------------------------------------------------

    def _run_sql(self, writer: CaptureWriter, proto: int, options: dict[str, str],
                 stop: threading.Event | None, idle_exit: float | None) -> Progress:
        import psycopg2

        progress = self.progress
        try:
            conn = connect(self.dsn)
        except CaptureError:
            writer.close()
            raise
        _check_encoding(conn, writer)
        batch = _SqlBatch(self.settings.slot, ["proto_version", str(proto)]
                          + [item for pair in options.items() for item in pair], self.batch_size, writer, progress)
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


def _undecodable(lsn: int, wal_end: int, error: ReplwireError) -> CaptureError:
    """The end of a capture at a message replwire cannot decode (sent at ``lsn``, 0 when the server sent it
    without a position, with the server's WAL end then ``wal_end``): nothing of it was written."""
    where = f"at {LSN(lsn)}" if lsn else f"without a position (the server's WAL end {LSN(wal_end)})"
    return CaptureError(f"the server sent a message replwire cannot decode, {where}: {error}; it was not written "
                        "to the file, which holds everything before it and can be resumed")


def _check_encoding(conn, writer: CaptureWriter) -> None:
    """The connection that reads the slot must have the client encoding the file's header records (the one
    the set-up connection reported): the server converts the Strings and text values to it."""
    encoding = conn.get_parameter_status("client_encoding")
    if encoding != writer.header.client_encoding:
        writer.close()
        conn.close()
        raise CaptureError(f"the connection's client encoding changed from {writer.header.client_encoding} to "
                           f"{encoding}")


class _SqlBatch:
    """One call of ``pg_logical_slot_peek_binary_changes`` at a time, appended to the capture file.

    ``kept`` is where the file ends after the last record that completes a position, ``done`` the highest such
    position.  Records appended after ``kept`` belong to something the server will send again (it sends
    everything after the slot's confirmed position on every call), so :meth:`settle` drops them before it
    fsyncs, and the file ends at a completed position before the slot moves.
    """

    def __init__(self, slot: str, args: list[str], size: int, writer: CaptureWriter, progress: Progress) -> None:
        self.slot, self.args, self.size, self.writer, self.progress = slot, args, size, writer, progress
        self.kept, self.done = writer.mark(), progress.flushed_lsn
        self._counted = progress.messages, progress.bytes  # (the counts at kept)

    def read(self, conn, tracker: PositionTracker) -> tuple[int, LSN]:
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
                    raise _undecodable(lsn, wal_end, error) from None
                writer.append(lsn, xid, data)
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
        What is dropped is not counted (it is received, and counted, again)."""
        self.writer.rewind(self.kept)
        self.progress.messages, self.progress.bytes = self._counted
        self.writer.sync()
