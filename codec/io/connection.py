"""The capture's connection to the server: opening it, the set-up every capture starts with, and the errors
a capture ends with.

Strategy: every capture -- live capture's (:mod:`~replwire.codec.io.live`) and the initial snapshot's
(:mod:`~replwire.codec.io.snapshot`) -- starts with :func:`set_up` over an ordinary connection: connect, read
the server's version, check the publication (and, for a snapshot, that the server is not a standby);
:func:`connect` opens every connection, so a failure to connect reads the same wherever it happens, and
:func:`is_lost` tells a lost connection (worth trying again) from a refusal.  The error classes are
:class:`CaptureError` and the subclasses a caller may want to tell apart, each with the exit status
``replwire capture`` ends with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import ReplwireError
from ..options import OptionsError, PgoutputOptions
from ..scalars import LSN
from . import slot
from .capture_file import CaptureHeader, CaptureWriter

__all__ = ["CaptureDamaged", "CaptureError", "CaptureSettings", "CaptureWriteError", "ConnectionLost", "ServerInfo",
           "check_encoding", "connect", "is_lost", "server_error", "set_up", "undecodable"]


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
    """What to capture: the slot, the publication, and the pgoutput options to ask for (:attr:`pgoutput`)."""

    slot: str
    publication: str
    proto_version: int | None = None  # None: the highest the server supports
    streaming: str | None = None  # None, "on" or "parallel"
    binary: bool = False
    messages: bool = False
    two_phase: bool = False

    @property
    def pgoutput(self) -> PgoutputOptions:
        """The pgoutput options these settings ask for."""
        return PgoutputOptions(self.proto_version, (self.publication,), self.streaming or "off", self.two_phase,
                               self.messages, self.binary)

    def options(self, server_version: int) -> dict[str, str]:
        """The pgoutput options for ``START_REPLICATION`` (besides proto_version), checked against the server."""
        try:
            options = self.pgoutput.for_server(server_version)
        except OptionsError as error:
            raise CaptureError(str(error)) from None
        del options["proto_version"]
        return options

    def protocol(self, server_version: int) -> int:
        """The protocol version this capture uses on the server: the one asked for, checked, or the highest."""
        try:
            return self.pgoutput.protocol(server_version)
        except OptionsError as error:
            raise CaptureError(str(error)) from None


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
class ServerInfo:
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
           check: Callable[[ServerInfo], None] | None = None) -> Iterator[ServerInfo]:
    """The set-up every capture starts with, over an ordinary connection that is closed on leaving: connect,
    read the server's version, refuse a standby when the set-up is ``for_snapshot``, call ``check`` with the
    :class:`ServerInfo` (the caller's checks that must pass before anything is created on the server), and check
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
            server = ServerInfo(conn, cur, version, conn.get_parameter_status("client_encoding"), *_identity(cur))
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



def undecodable(lsn: int, wal_end: int, error: ReplwireError) -> CaptureError:
    """The end of a capture at a message replwire cannot decode (sent at ``lsn``, 0 when the server sent it
    without a position, with the server's WAL end then ``wal_end``): nothing of it was written."""
    where = f"at {LSN(lsn)}" if lsn else f"without a position (the server's WAL end {LSN(wal_end)})"
    return CaptureError(f"the server sent a message replwire cannot decode, {where}: {error}; it was not written "
                        "to the file, which holds everything before it and can be resumed")


def check_encoding(conn: Any, writer: CaptureWriter) -> None:
    """The connection that reads the slot must have the client encoding the file's header records (the one
    the set-up connection reported): the server converts the Strings and text values to it."""
    encoding = conn.get_parameter_status("client_encoding")
    if encoding != writer.header.client_encoding:
        writer.close()
        conn.close()
        raise CaptureError(f"the connection's client encoding changed from {writer.header.client_encoding} to "
                           f"{encoding}")

