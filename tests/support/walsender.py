"""A small, test-only client for the streaming replication protocol, over a Unix socket (no libpq).

It speaks just enough of the frontend/backend protocol 3.0 to run ``START_REPLICATION ... LOGICAL`` against a
test server with trust authentication and hand back the raw CopyData payloads (``w`` XLogData, ``k`` primary
keepalive), so tests can feed real envelope frames to the codec. It is deliberately not a general client:
no TLS, no password authentication, TCP only to IPv4 addresses (``replwire serve``), no extended query
protocol.

Every read has a deadline; every loop is bounded by a deadline or a count.

Typical use::

    with WalSender.connect(server) as ws:
        ws.start_replication("slot", {"proto_version": "1", "publication_names": '"pub"'})
        frames = ws.collect(until_lsn=target_lsn, timeout=10)
        ws.send_copy_data(status_update_bytes)          # e.g. b"r" + 3×Int64 LSN + Int64 time + Byte1
    # leaving the block sends CopyDone, drains to ReadyForQuery, sends Terminate and closes.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "WalSender", "WalSenderError", "ServerError", "ReplicationTimeout", "lsn_to_int", "int_to_lsn",
    "keepalive_fields", "xlogdata_fields", "status_update_for_tests", "stream_changes",
]

PROTOCOL_3_0 = 196608
MAX_MESSAGE = 256 * 1024 * 1024  # refuse absurd lengths from a broken peer
MAX_MESSAGES_PER_CALL = 10_000_000  # hard bound on any read loop besides its deadline


class WalSenderError(RuntimeError):
    """Protocol misuse, an unexpected message, or a broken connection."""


class ServerError(WalSenderError):
    """An ErrorResponse from the server; ``fields`` maps the one-letter codes (S, C, M, D, ...) to text."""

    def __init__(self, fields: dict[str, str]) -> None:
        self.fields = fields
        super().__init__(f"{fields.get('S', 'ERROR')} {fields.get('C', '?')}: {fields.get('M', '')}")


class ReplicationTimeout(WalSenderError, TimeoutError):
    """:meth:`WalSender.collect` reached its time bound first; ``frames`` holds what arrived until then."""

    def __init__(self, message: str, frames: list[bytes]) -> None:
        super().__init__(message)
        self.frames = frames


def lsn_to_int(lsn: str | int) -> int:
    """``'16/B374D848'`` → integer (integers pass through)."""
    if isinstance(lsn, int):
        return lsn
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(value: int) -> str:
    """Integer → ``'%X/%X'`` text as PostgreSQL ≤ 18 prints it."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


@dataclass(frozen=True)
class _Keepalive:
    wal_end: int
    send_time: int
    reply_requested: bool


@dataclass(frozen=True)
class _XLogData:
    data_start: int
    wal_end: int
    send_time: int
    data: bytes


def keepalive_fields(payload: bytes) -> _Keepalive:
    """Fields of a ``k`` payload (tag, Int64 walEnd, Int64 sendTime, Byte1 replyRequested); test helper only."""
    if len(payload) != 18 or payload[:1] != b"k":
        raise WalSenderError(f"not a keepalive: {payload[:24]!r} ({len(payload)} bytes)")
    wal_end, send_time, reply = struct.unpack("!QqB", payload[1:])
    return _Keepalive(wal_end, send_time, bool(reply))


def xlogdata_fields(payload: bytes) -> _XLogData:
    """Fields of a ``w`` payload (tag, Int64 dataStart, Int64 walEnd, Int64 sendTime, data); test helper only."""
    if len(payload) < 25 or payload[:1] != b"w":
        raise WalSenderError(f"not XLogData: {payload[:24]!r} ({len(payload)} bytes)")
    start, end, send_time = struct.unpack("!QQq", payload[1:25])
    return _XLogData(start, end, send_time, payload[25:])


def status_update_for_tests(write: int, flush: int, apply: int, *, reply: bool = False,
                            send_time: int | None = None) -> bytes:
    """A hand-built standby status update ``r`` payload (3×Int64 LSN, Int64 time, Byte1), for self-tests."""
    if send_time is None:
        send_time = int((time.time() - 946_684_800) * 1_000_000)
    return b"r" + struct.pack("!QQQqB", write, flush, apply, send_time, 1 if reply else 0)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class WalSender:
    """One replication connection (``replication=database``) to a server's Unix socket, or over TCP.

    Create with :meth:`connect` (from a :class:`tests.pgserver.PgServer`) or the constructor (a socket path,
    or a ``(host, port)`` pair for TCP: ``replwire serve``).
    ``params`` are extra startup parameters, e.g. ``{"wal_sender_timeout": "5s"}``. ``parameters`` holds the
    ParameterStatus values the server reported; ``backend_pid`` its process id.
    """

    def __init__(self, address: str | tuple[str, int], user: str, database: str, *, timeout: float = 10.0,
                 params: dict[str, str] | None = None) -> None:
        self.timeout = timeout
        self.parameters: dict[str, str] = {}
        self.notices: list[dict[str, str]] = []
        self.backend_pid: int | None = None
        self.trailing_frames: list[bytes] = []
        self.command_tags: list[str] = []
        self._buf = bytearray()
        self._copy_both = False
        self._closed = False
        self._sock = socket.socket(socket.AF_UNIX if isinstance(address, str) else socket.AF_INET,
                                   socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(address)
            startup = {"user": user, "database": database, "replication": "database",
                       "application_name": "replwire-tests", "client_encoding": "UTF8"}
            startup.update(params or {})
            self._startup(startup)
        except BaseException:
            self._sock.close()
            self._closed = True
            raise

    @classmethod
    def connect(cls, server: Any, **kw: Any) -> WalSender:
        """Connect to ``server`` (``socket_dir``, ``port``, ``superuser``, ``dbname``) as its superuser."""
        path = f"{server.socket_dir}/.s.PGSQL.{server.port}"
        return cls(path, kw.pop("user", server.superuser), kw.pop("database", server.dbname), **kw)

    # -- low level ---------------------------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def _send_message(self, tag: bytes, body: bytes) -> None:
        self._send(tag + struct.pack("!i", len(body) + 4) + body)

    def _fill(self, n: int, deadline: float) -> bool:
        """Buffer at least ``n`` bytes; False if the deadline passes first."""
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._sock.settimeout(min(left, self.timeout))
            try:
                chunk = self._sock.recv(max(65536, n - len(self._buf)))
            except TimeoutError:
                continue
            if not chunk:
                raise WalSenderError("server closed the connection")
            self._buf += chunk
        return True

    def _read_message(self, deadline: float) -> tuple[bytes, bytes] | None:
        """The next (tag, body), or None at the deadline."""
        if not self._fill(5, deadline):
            return None
        tag = bytes(self._buf[:1])
        (length,) = struct.unpack("!i", self._buf[1:5])
        if length < 4 or length > MAX_MESSAGE:
            raise WalSenderError(f"bad message length {length} for tag {tag!r}")
        if not self._fill(1 + length, deadline):
            return None
        body = bytes(self._buf[5:1 + length])
        del self._buf[:1 + length]
        return tag, body

    def _read_required(self, deadline: float) -> tuple[bytes, bytes]:
        msg = self._read_message(deadline)
        if msg is None:
            raise WalSenderError("timed out waiting for the server")
        return msg

    @staticmethod
    def _fields(body: bytes) -> dict[str, str]:
        out = {}
        for part in body.split(b"\0"):
            if part:
                out[chr(part[0])] = part[1:].decode("utf-8", "replace")
        return out

    def _handle_async(self, tag: bytes, body: bytes) -> bool:
        """Handle messages that may arrive at any time; True if consumed."""
        if tag == b"N":
            self.notices.append(self._fields(body))
            return True
        if tag == b"S":
            name, value, _ = body.split(b"\0", 2)
            self.parameters[name.decode()] = value.decode()
            return True
        if tag == b"E":
            raise ServerError(self._fields(body))
        return False

    def _startup(self, params: dict[str, str]) -> None:
        body = struct.pack("!i", PROTOCOL_3_0)
        for k, v in params.items():
            body += k.encode() + b"\0" + v.encode() + b"\0"
        body += b"\0"
        self._send(struct.pack("!i", len(body) + 4) + body)
        deadline = time.monotonic() + self.timeout
        for _ in range(10_000):
            tag, body = self._read_required(deadline)
            if self._handle_async(tag, body):
                continue
            if tag == b"R":
                (code,) = struct.unpack("!i", body[:4])
                if code != 0:
                    raise WalSenderError(f"authentication method {code} requested; only trust is supported")
            elif tag == b"K":
                self.backend_pid = struct.unpack("!i", body[:4])[0]
            elif tag == b"v":  # NegotiateProtocolVersion: we asked for 3.0, nothing to do
                continue
            elif tag == b"Z":
                return
            else:
                raise WalSenderError(f"unexpected message {tag!r} during startup")
        raise WalSenderError("startup did not finish")

    # -- commands ----------------------------------------------------------------------------------------------

    def query(self, sql: str) -> list[list[str | None]]:
        """Run a simple-query replication command (e.g. ``IDENTIFY_SYSTEM``); return its rows as text."""
        self._send_message(b"Q", sql.encode("utf-8") + b"\0")
        rows: list[list[str | None]] = []
        deadline = time.monotonic() + self.timeout
        error: ServerError | None = None
        for _ in range(MAX_MESSAGES_PER_CALL):
            tag, body = self._read_required(deadline)
            try:
                if self._handle_async(tag, body):
                    continue
            except ServerError as e:  # keep reading to ReadyForQuery, then raise
                error = e
                continue
            if tag == b"D":
                (n,) = struct.unpack("!h", body[:2])
                pos, row = 2, []
                for _ in range(n):
                    (ln,) = struct.unpack("!i", body[pos:pos + 4])
                    pos += 4
                    if ln < 0:
                        row.append(None)
                    else:
                        row.append(body[pos:pos + ln].decode("utf-8"))
                        pos += ln
                rows.append(row)
            elif tag == b"C":
                self.command_tags.append(body.rstrip(b"\0").decode())
            elif tag in (b"T", b"I"):
                continue
            elif tag == b"Z":
                if error is not None:
                    raise error
                return rows
            else:
                raise WalSenderError(f"unexpected message {tag!r} after a query")
        raise WalSenderError("query did not finish")

    def start_replication(self, slot: str, options: dict[str, str], start_lsn: str | int = "0/0") -> None:
        """``START_REPLICATION SLOT "slot" LOGICAL lsn (name 'value', ...)``; waits for CopyBothResponse."""
        opts = ", ".join(f"{_quote_ident(k)} {_quote_literal(v)}" for k, v in options.items())
        lsn = int_to_lsn(lsn_to_int(start_lsn))
        sql = f"START_REPLICATION SLOT {_quote_ident(slot)} LOGICAL {lsn}" + (f" ({opts})" if opts else "")
        self._send_message(b"Q", sql.encode("utf-8") + b"\0")
        deadline = time.monotonic() + self.timeout
        for _ in range(10_000):
            tag, body = self._read_required(deadline)
            if self._handle_async(tag, body):
                continue
            if tag == b"W":
                self._copy_both = True
                return
            raise WalSenderError(f"expected CopyBothResponse, got {tag!r}")
        raise WalSenderError("no CopyBothResponse")

    def read_frame(self, timeout: float) -> bytes | None:
        """The next CopyData payload (raw bytes starting with ``w`` or ``k``), or None after ``timeout``."""
        if not self._copy_both:
            raise WalSenderError("not streaming")
        deadline = time.monotonic() + timeout
        for _ in range(MAX_MESSAGES_PER_CALL):
            msg = self._read_message(deadline)
            if msg is None:
                return None
            tag, body = msg
            if self._handle_async(tag, body):
                continue
            if tag == b"d":
                return body
            if tag == b"c":  # server ended the copy by itself
                self._copy_both = False
                raise WalSenderError("server sent CopyDone")
            raise WalSenderError(f"unexpected message {tag!r} while streaming")
        return None

    def collect(self, until_lsn: str | int, timeout: float = 10.0, *, min_keepalives: int = 1) -> list[bytes]:
        """Collect CopyData payloads until caught up to ``until_lsn``; return them in arrival order.

        Caught up means: a keepalive whose walEnd is ≥ ``until_lsn`` arrived, and at least ``min_keepalives``
        keepalives in all. The walsender sends a keepalive whenever it has sent everything up to the flushed WAL
        and waits for more (also right after START_REPLICATION, before any data, which is why a target is
        required: take ``pg_current_wal_lsn()`` after the last commit of interest). Raises
        :class:`ReplicationTimeout` (with the frames received so far) after ``timeout`` seconds.
        """
        target = lsn_to_int(until_lsn)
        frames: list[bytes] = []
        keepalives = 0
        reached = False
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            frame = self.read_frame(left) if left > 0 else None
            if frame is None:
                raise ReplicationTimeout(
                    f"not caught up to {until_lsn} after {timeout}s ({len(frames)} frames, {keepalives} keepalives)",
                    frames)
            frames.append(frame)
            if frame[:1] == b"k":
                keepalives += 1
                if keepalive_fields(frame).wal_end >= target:
                    reached = True
                if reached and keepalives >= min_keepalives:
                    return frames

    def send_copy_data(self, payload: bytes) -> None:
        """Send one CopyData message with ``payload`` (e.g. a standby status update) to the walsender."""
        if not self._copy_both:
            raise WalSenderError("not streaming")
        self._send_message(b"d", payload)

    def end_copy(self, timeout: float | None = None) -> None:
        """Send CopyDone and read until ReadyForQuery; frames still in flight go to ``trailing_frames``."""
        if not self._copy_both:
            return
        self._send_message(b"c", b"")
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        for _ in range(MAX_MESSAGES_PER_CALL):
            tag, body = self._read_required(deadline)
            if self._handle_async(tag, body):
                continue
            if tag == b"d":
                self.trailing_frames.append(body)
            elif tag == b"c":
                continue
            elif tag == b"C":
                self.command_tags.append(body.rstrip(b"\0").decode())
            elif tag in (b"T", b"D"):  # some servers describe the end position
                continue
            elif tag == b"Z":
                self._copy_both = False
                return
            else:
                raise WalSenderError(f"unexpected message {tag!r} after CopyDone")
        raise WalSenderError("CopyDone not acknowledged")

    def close(self) -> None:
        """End streaming if needed (CopyDone), send Terminate, close the socket. Idempotent."""
        if self._closed:
            return
        try:
            if self._copy_both:
                self.end_copy()
            self._send_message(b"X", b"")
        except (OSError, WalSenderError):
            pass
        finally:
            self._closed = True
            self._sock.close()

    def __enter__(self) -> WalSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stream_changes(server: Any, slot: str, options: dict[str, str], until_lsn: str | int | None = None,
                   timeout: float = 10.0, **kw: Any) -> list[bytes]:
    """Connect, START_REPLICATION, collect until caught up to ``until_lsn`` (default: the server's current
    ``pg_current_wal_lsn()``), end cleanly; return the payloads. ``kw`` go to :meth:`WalSender.connect`."""
    if until_lsn is None:
        with server.connect() as conn:
            until_lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    assert until_lsn is not None
    with WalSender.connect(server, **kw) as ws:
        ws.start_replication(slot, options)
        return ws.collect(until_lsn, timeout)


@contextlib.contextmanager
def pgoutput_slot(conn: Any, slot: str, table: str):
    """A table ``table (id int PRIMARY KEY, v text)``, a publication ``<table>_pub`` for it and a pgoutput slot
    ``slot``; the slot and publication are dropped afterwards (waiting, bounded, for a walsender to release
    the slot)."""
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id int PRIMARY KEY, v text)")
    conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        yield f"{table}_pub"
    finally:
        deadline = time.monotonic() + 10
        while True:
            try:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn.execute(f"DROP PUBLICATION {table}_pub")
