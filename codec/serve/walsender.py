"""One client connection of the walsender, sans I/O: bytes and the time in, bytes out.

Strategy: a :class:`Session` is a state machine over the events of
:class:`~replwire.codec.serve.frontend.FrontendReader` -- startup, SCRAM authentication when the server has
a password, then simple queries (:mod:`~replwire.codec.serve.repl_commands`) until ``START_REPLICATION`` turns
the connection into CopyBoth.  Then :meth:`Session.frame` hands out one XLogData CopyData message at a
time from the client's :class:`~replwire.codec.serve.replay.Replay`, so whoever drives the session sends
as fast as the socket takes them and never holds the stream; the client's standby status updates move the
slot's confirmed position (kept in :class:`Slots`, shared by the sessions of one server, as a server keeps
its slots), and :meth:`Session.tick` sends keepalives that ask for a reply and ends a session whose client
stopped answering.  Every error the client causes is an ErrorResponse the client can read; a protocol
violation also ends the session (:attr:`Session.closed`).  The caller moves bytes and calls :meth:`tick`;
the session never blocks, sleeps or reads a clock.
"""

from __future__ import annotations

import functools
import pathlib
import ssl
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from ..errors import DecodeError
from ..messages import HotStandbyFeedback, PrimaryKeepalive, StandbyStatusUpdate, XLogData
from ..scalars import LSN, Timestamp
from ..wire.fast import build_envelope, parse_envelope
from . import frontend, repl_commands
from .errors import AuthenticationFailed, ProtocolViolation, WalsenderError
from .frontend import ClientMessage
from .replay import Replay, Request, RequestError
from .scram import MECHANISM, MECHANISM_PLUS, ScramExchange, ScramSecret, certificate_binding
from .source import Source

__all__ = ["POSTGRES_EPOCH", "ServeSettings", "Session", "SlotRegistry", "Start", "version_text"]

#: Seconds from the Unix epoch to PostgreSQL's (2000-01-01 00:00:00 UTC).
POSTGRES_EPOCH = 946_684_800


@dataclass(frozen=True)
class ServeSettings:
    """How a server behaves towards every client.

    ``server_version`` (``server_version_num`` form, e.g. 150004) decides the protocol versions offered and
    what the client is told; ``keepalive_interval`` and ``reply_timeout`` are in seconds; a client that sends
    nothing for ``reply_timeout`` is disconnected, and one that has not ended its startup and authentication
    ``startup_timeout`` seconds after it connected (PostgreSQL's ``authentication_timeout``)."""

    server_version: int = 160000
    password: str | None = None
    keepalive_interval: float = 10.0
    reply_timeout: float = 60.0
    startup_timeout: float = 10.0
    max_message: int = 1 << 20
    system_identifier: str = "7000000000000000000"
    #: TLS: the server's certificate (chain) and private key, PEM files; None: no TLS (SSL requests are
    #: answered ``N``).  With TLS, a client off loopback must use it unless ``allow_plaintext``.
    tls_cert: str | None = None
    tls_key: str | None = None
    allow_plaintext: bool = False


class SlotRegistry(Protocol):
    """The slots of the server a session belongs to, owned by its driver (``server.Slots``): a session reads
    and changes them through these calls only, so sessions running at once see one registry."""

    def confirm(self, slot: str, lsn: int) -> None:
        """The client confirmed (flushed) ``slot`` up to ``lsn``."""

    def get(self, slot: str) -> int:
        """The position confirmed on ``slot`` (0 if none)."""

    def create(self, slot: str, *, owner: int | None = None) -> bool:
        """Make ``slot`` (TEMPORARY, held by the session ``owner``, when given); False if it exists."""

    def holder(self, slot: str) -> int | None:
        """The session (pid) whose TEMPORARY slot ``slot`` is, or None."""

    def drop(self, slot: str) -> None:
        """Drop ``slot`` and what was confirmed on it."""

    def release(self, owner: int) -> None:
        """The session ``owner`` ended: drop its TEMPORARY slots."""


class Start(NamedTuple):
    """A START_REPLICATION the session began streaming for: the slot, the position it starts from, and the
    client's request."""

    slot: str
    lsn: int
    request: Request


def _norm_encoding(name: str) -> str:
    return name.upper().replace("-", "").replace("_", "").replace("UNICODE", "UTF8")


def version_text(server_version: int) -> str:
    """``server_version`` as PostgreSQL reports it: ``15.4`` for 150004 (10 and later)."""
    return f"{server_version // 10000}.{server_version % 10000}"


class Session:
    """One connection: :meth:`receive` client bytes, take :meth:`output`; while :attr:`streaming`, call
    :meth:`frame` for XLogData messages; call :meth:`tick` with the time now and then.

    The driver gives what a session does not choose: the server's ``slots``, the session's ``pid`` and the
    ``cancel_key`` it tells the client (BackendKeyData), and the time it connected (``now``)."""

    def __init__(self, source: Source, settings: ServeSettings, slots: SlotRegistry, *, pid: int, cancel_key: int,
                 now: float = 0.0, peer: str = "127.0.0.1", loopback: bool = True) -> None:
        self.source, self.settings = source, settings
        self.peer, self.loopback = peer, loopback
        #: Set when the client's SSL request was answered ``S``: the driver now runs the TLS handshake on the
        #: connection, then calls :meth:`tls_started`.
        self.start_tls = False
        self.tls = False
        self.slots = slots
        self.reader = frontend.FrontendReader(max_message=settings.max_message)
        self.pid, self.cancel_key = pid, cancel_key
        self.state = "startup"  # startup, auth, ready, streaming, closed
        self.user = ""
        self.close_reason: str | None = None
        self.replay: Replay | None = None
        self.slot: str | None = None
        self.sent_frames = 0
        self.last_lsn = 0  # the data_start of the last frame sent
        self._out = bytearray()
        self._messages: Iterator[tuple[int, bytes]] | None = None
        self._scram: ScramExchange | None = None
        self._secret = _secret(settings.password) if settings.password is not None else None
        self._connected_at = now  # the startup and authentication must end by startup_timeout after it
        self._last_heard = now
        self._last_keepalive = now
        self._exhausted = False
        self._parameters: dict[str, str] = {}
        #: Each START_REPLICATION streamed for, in order, until the driver takes them (and clears the list).
        self.started: list[Start] = []

    # -- the driver's side ----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state == "closed"

    @property
    def streaming(self) -> bool:
        """In CopyBoth, with messages left to send."""
        return self.state == "streaming" and not self._exhausted

    @property
    def starting(self) -> bool:
        """Before the startup and authentication ended: :meth:`next_deadline` is the startup deadline."""
        return self.state in ("startup", "auth")

    def output(self) -> bytes:
        """Everything the session wants sent now (and forget it)."""
        data = bytes(self._out)
        self._out.clear()
        return data

    def receive(self, data: bytes, now: float) -> None:
        """Bytes from the client (``b""``: it closed the connection)."""
        if self.closed:
            return
        if not data:
            self._close("the client closed the connection")
            return
        self._last_heard = now
        self.reader.feed(data)
        while not self.closed:
            try:
                event = self.reader.next()
                if event is None:
                    break
                self._event(event, now)
            except WalsenderError as error:  # (the one place a client's error becomes its ErrorResponse)
                if error.fatal:
                    self._fatal(str(error), error.sqlstate, detail=error.detail)
                else:
                    self._out += frontend.build_error(str(error), error.sqlstate, detail=error.detail)
                    self._out += frontend.build_ready()

    def frame(self, now: float) -> bytes | None:
        """The next XLogData as a CopyData message, or ``None`` when the stream has nothing more."""
        if self.state != "streaming" or self._messages is None:
            return None
        try:
            lsn, data = next(self._messages)
        except StopIteration:
            self._exhausted = True
            return None
        self.sent_frames += 1
        assert self.replay is not None
        self.last_lsn = lsn
        # (the walsender writes the same LSN into both, 0 for a frame without a position: WalSndPrepareWrite)
        frame = XLogData(data_start=LSN(lsn), wal_end=LSN(lsn), send_time=_now(now), data=data)
        return frontend.build_copy_data(build_envelope(frame))

    def tick(self, now: float) -> None:
        """Keepalives and timeouts, at time ``now`` (Unix time in seconds, as every ``now`` here)."""
        if self.closed:
            return
        silent = now - self._last_heard
        # (counted from the connection's start, as PostgreSQL's authentication_timeout is: a client trickling
        # its startup packet a byte at a time must not hold its place for longer)
        if self.state in ("startup", "auth") and now - self._connected_at > self.settings.startup_timeout:
            self._fatal("canceling authentication due to timeout", "08006")
        elif self.state == "streaming":
            if silent > self.settings.reply_timeout:
                self._fatal("terminating walsender process due to replication timeout", "08006")
            elif now - self._last_keepalive >= self.settings.keepalive_interval:
                self.keepalive(now, reply=True)
        elif self.state == "ready" and silent > self.settings.reply_timeout:
            self._fatal("terminating connection: the client sent nothing for "
                        f"{self.settings.reply_timeout:g} seconds", "08006")

    def next_deadline(self) -> float:
        """The time by which :meth:`tick` has something to do."""
        if self.state in ("startup", "auth"):
            return self._connected_at + self.settings.startup_timeout
        if self.state == "streaming":
            return min(self._last_heard + self.settings.reply_timeout,
                       self._last_keepalive + self.settings.keepalive_interval)
        return self._last_heard + self.settings.reply_timeout

    def tls_started(self) -> None:
        """The driver finished the TLS handshake the client asked for: what follows is encrypted."""
        self.start_tls, self.tls = False, True

    def disconnect(self, reason: str) -> None:
        """End the session from the driver's side (fault injection, server shutdown)."""
        self._close(reason)

    # -- events ---------------------------------------------------------------------------------------------

    def _close(self, reason: str) -> None:
        if not self.closed:
            self.state = "closed"
            self.close_reason = reason
            self._messages = None
            self.slots.release(self.pid)  # (PostgreSQL drops a session's temporary slots when it ends)

    def _fatal(self, message: str, sqlstate: str, *, detail: str | None = None) -> None:
        self._out += frontend.build_error(message, sqlstate, severity="FATAL", detail=detail)
        self._close(message)

    def _event(self, event: frontend.Event, now: float) -> None:
        if isinstance(event, frontend.EncryptionRequest):
            if event.code != frontend.SSL_REQUEST or self.settings.tls_cert is None:
                self._out += b"N"
                return
            if self.tls:
                raise ProtocolViolation("an SSL request on a connection already encrypted")
            if self.reader.buffered:  # (bytes sent before the handshake must not pass as encrypted ones)
                raise ProtocolViolation("received unencrypted data after SSL request")
            self._out += b"S"
            self.start_tls = True
            return
        if isinstance(event, frontend.CancelRequest):
            self._close("cancel request")
            return
        if isinstance(event, frontend.Startup):
            self._startup(event.parameters)
            return
        assert isinstance(event, ClientMessage)
        kind = event.type
        if kind == b"X":
            self._close("the client terminated the session")
        elif self.state == "auth":
            self._password(event)
        elif kind == b"Q":
            if self.state != "ready":
                raise ProtocolViolation("a query while streaming: send CopyDone first")
            text, _ = frontend.read_cstring(event.body)
            self._query(text, now)
        elif self.state == "streaming" and kind == b"d":
            self._copy_data(event.body, now)
        elif self.state == "streaming" and kind == b"c":
            self._out += frontend.build_message(b"c", b"")
            self._out += frontend.build_command_complete("START_REPLICATION") + frontend.build_ready()
            self.state, self._messages, self.replay = "ready", None, None
        elif self.state == "streaming" and kind == b"f":
            self._close("the client failed the copy")
        elif kind in b"PBEDSHFC":
            raise ProtocolViolation("extended query protocol not supported in a replication connection")
        else:
            raise ProtocolViolation(f"invalid frontend message type {kind!r} in state {self.state}")

    def _startup(self, parameters: dict[str, str]) -> None:
        self.user = parameters["user"]
        settings = self.settings
        if settings.tls_cert is not None and not self.tls and not self.loopback and not settings.allow_plaintext:
            self._fatal(f'connections from host "{self.peer}" must use TLS (sslmode=require): this server '
                        "accepts connections without it from loopback only", "28000")
            return
        replication = parameters.get("replication", "").lower()
        if replication != "database":
            self._fatal("this server serves logical replication connections only: connect with "
                        "replication=database", "08004")
            return
        wanted = parameters.get("client_encoding")
        if wanted and _norm_encoding(wanted) != _norm_encoding(self.source.client_encoding):
            self._fatal(f"client_encoding {wanted} is not served: the stream is in {self.source.client_encoding}",
                        "22023")
            return
        self._parameters = parameters
        if self._secret is not None:
            self.state = "auth"
            offered = [MECHANISM_PLUS, MECHANISM] if self._binding is not None else [MECHANISM]
            self._out += frontend.build_auth(10, b"".join(frontend.cstring(m) for m in offered) + b"\0")
            return
        self._welcome()

    @property
    def _binding(self) -> bytes | None:
        """Over TLS, the channel-binding data of the server's certificate (None: SCRAM without binding)."""
        if not self.tls or self.settings.tls_cert is None:
            return None
        return _certificate_binding(self.settings.tls_cert)

    def _welcome(self) -> None:
        self._out += frontend.build_auth(0)
        encoding = self.source.client_encoding
        for name, value in (("application_name", self._parameters.get("application_name", "")),
                            ("client_encoding", encoding), ("DateStyle", "ISO, MDY"),
                            ("integer_datetimes", "on"), ("IntervalStyle", "postgres"),
                            ("is_superuser", "on"), ("server_encoding", encoding),
                            ("server_version", version_text(self.settings.server_version)),
                            ("session_authorization", self.user), ("standard_conforming_strings", "on"),
                            ("TimeZone", "UTC")):
            self._out += frontend.build_parameter_status(name, value)
        self._out += frontend.build_message(b"K", struct.pack(">iI", self.pid, self.cancel_key))
        self._out += frontend.build_ready()
        self.state = "ready"

    def _password(self, event: ClientMessage) -> None:
        if event.type != b"p":
            raise ProtocolViolation(f"expected SASL response, got message type {event.type!r}")
        assert self._secret is not None
        try:
            if self._scram is None:
                mechanism, offset = frontend.read_cstring(event.body)
                if mechanism != MECHANISM and not (mechanism == MECHANISM_PLUS and self._binding is not None):
                    raise AuthenticationFailed("client selected an invalid SASL authentication mechanism")
                if len(event.body) < offset + 4:
                    raise ProtocolViolation("invalid SASL initial response")
                (length,) = struct.unpack_from(">i", event.body, offset)
                data = event.body[offset + 4:]
                if length != len(data):
                    raise ProtocolViolation("invalid SASL initial response length")
                self._scram = ScramExchange(self._secret, binding=self._binding, mechanism=mechanism)
                self._out += frontend.build_auth(11, self._scram.first(data))
            else:
                final = self._scram.final(event.body)
                self._out += frontend.build_auth(12, final)
                self._welcome()
        except AuthenticationFailed as error:  # (the client is told only that its password failed)
            raise AuthenticationFailed(f'password authentication failed for user "{self.user}"',
                                       detail=str(error)) from None

    # -- queries --------------------------------------------------------------------------------------------

    def _query(self, text: str, now: float) -> None:
        command = repl_commands.read_query(text)
        out = self._out
        if isinstance(command, repl_commands.IdentifySystem):
            position = str(LSN(self.source.scan().last_lsn))
            self._rows(["systemid", "timeline", "xlogpos", "dbname"], [[self.settings.system_identifier, "1",
                                                                          position, self._database]],
                       [25, 23, 25, 25], "IDENTIFY_SYSTEM")
        elif isinstance(command, repl_commands.Show):
            value = self._settings().get(command.name)
            if value is None:
                raise WalsenderError(f'unrecognized configuration parameter "{command.name}"', "42704", fatal=False)
            self._rows([command.name], [[value]], None, "SHOW")
        elif isinstance(command, repl_commands.SetConfig):
            self._rows(["set_config"], [[command.value]], None, "SELECT 1")
        elif isinstance(command, repl_commands.PublicationTables):
            relations = sorted(self.source.scan().relations)
            rows = [[namespace, name] + [None] * (len(command.columns) - 2) for namespace, name in relations]
            self._rows(list(command.columns), [row[:len(command.columns)] for row in rows], None,
                       f"SELECT {len(rows)}")
        elif isinstance(command, repl_commands.PublicationNames):
            self._rows([command.column], [[name] for name in command.names], None, f"SELECT {len(command.names)}")
        elif isinstance(command, repl_commands.Setting):
            value = self._settings().get(command.name)
            if value is None:
                raise WalsenderError(f'unrecognized configuration parameter "{command.name}"', "42704", fatal=False)
            self._rows([command.column], [[value]], None, "SELECT 1")
        elif isinstance(command, repl_commands.SlotRow):
            self._slot_row(command)
        elif isinstance(command, repl_commands.CreateSlot):
            if command.plugin is None:
                raise WalsenderError("physical replication slots are not served", "0A000", fatal=False)
            # A slot that exists (created here, or with a position a client confirmed) is refused as PostgreSQL
            # refuses it (slot.c's ReplicationSlotCreate): a client that creates its slot if it does not exist
            # and then starts at 0/0 (pg_recvlogical --create-slot --if-not-exists --start) resumes after
            # what it confirmed.  A new slot is offered the whole stream: its consistent point is where the
            # stream starts (a client that starts where its new slot is consistent, as postgres.js does with
            # its TEMPORARY slot, gets every transaction), and nothing is confirmed on it yet.
            if not self.slots.create(command.slot, owner=self.pid if command.temporary else None):
                raise WalsenderError(f'replication slot "{command.slot}" already exists', "42710", fatal=False)
            position = str(LSN(self._stream_start()))
            self._rows(["slot_name", "consistent_point", "snapshot_name", "output_plugin"],
                       [[command.slot, position, None, command.plugin]], None, "CREATE_REPLICATION_SLOT")
        elif isinstance(command, repl_commands.DropSlot):
            # (any name may be dropped, as any name may be streamed from, save another live session's
            # temporary slot, which PostgreSQL reports active)
            holder = self.slots.holder(command.slot)
            if holder is not None and holder != self.pid:
                raise WalsenderError(f'replication slot "{command.slot}" is active for PID {holder}', "55006",
                                     fatal=False)
            self.slots.drop(command.slot)
            out += frontend.build_command_complete("DROP_REPLICATION_SLOT") + frontend.build_ready()
        elif isinstance(command, repl_commands.AlterSlot):
            out += frontend.build_command_complete("ALTER_REPLICATION_SLOT") + frontend.build_ready()
        else:
            assert isinstance(command, repl_commands.StartReplication)
            self._start(command, now)

    def _stream_start(self) -> int:
        """The first position the stream served holds (0 if it holds none): starting there, a client is
        sent every transaction of it."""
        for segment in self.source.segments:
            records = segment.records()
            try:
                for lsn, _ in records:
                    if lsn:
                        return lsn
            finally:
                close = getattr(records, "close", None)  # (a generator: its file is closed now)
                if close is not None:
                    close()
        return 0

    def _settings(self) -> dict[str, str]:
        """The settings ``SHOW`` and ``current_setting()`` tell."""
        return {"server_version": version_text(self.settings.server_version),
                "server_version_num": str(self.settings.server_version), "integer_datetimes": "on",
                "wal_segment_size": "16MB", "server_encoding": self.source.client_encoding,
                "client_encoding": self.source.client_encoding,
                "max_replication_slots": "10", "data_directory_mode": "0700"}

    def _slot_row(self, command: repl_commands.SlotRow) -> None:
        """One slot's row of ``pg_replication_slots``: every slot name exists, decodes with pgoutput without
        two-phase, in the client's database, at the position clients confirmed, and is not in use."""
        confirmed = str(LSN(self.slots.get(command.slot)))
        values: dict[str, tuple[str | None, int]] = {
            "slot_name": (command.slot, 25), "plugin": ("pgoutput", 25), "slot_type": ("logical", 25),
            "database": (self._database, 25), "current_database": (self._database, 25),
            "temporary": ("t" if self.slots.holder(command.slot) is not None else "f", 16),
            "two_phase": ("f", 16), "to_jsonb": ("f", 16), "active": ("f", 16),
            "active_pid": (None, 23), "confirmed_flush_lsn": (confirmed, 25), "restart_lsn": (confirmed, 25)}
        unknown = [field for field in command.fields if field not in values]
        if unknown:
            raise WalsenderError(f"pg_replication_slots column {unknown[0]} is not served", "0A000", fatal=False)
        row = [values[field][0] for field in command.fields]
        self._rows(list(command.columns), [row], [values[field][1] for field in command.fields], "SELECT 1")

    @property
    def _database(self) -> str:
        return self._parameters.get("database") or self.user

    def _rows(self, names: list[str], rows: list[list[str | None]], oids: list[int] | None, tag: str) -> None:
        out = self._out
        out += frontend.build_row_description(names, oids)
        for row in rows:
            out += frontend.build_data_row(row)
        out += frontend.build_command_complete(tag) + frontend.build_ready()

    def _start(self, command: repl_commands.StartReplication, now: float) -> None:
        try:
            request = Request.from_options(command.options, server_version=self.settings.server_version)
            request.check_source(self.source)
        except RequestError as error:  # (replay's own error: a refused START_REPLICATION, the session goes on)
            raise WalsenderError(str(error), error.sqlstate, fatal=False) from None
        start = max(command.lsn, self.slots.get(command.slot))
        self.slot = command.slot
        self.replay = Replay(self.source, request, start)
        self._messages = self.replay.messages()
        self._exhausted = False
        self.state = "streaming"
        self._out += frontend.build_copy_both()
        self.started.append(Start(command.slot, start, request))
        self._last_heard = self._last_keepalive = now

    # -- CopyBoth -------------------------------------------------------------------------------------------

    def _copy_data(self, payload: bytes, now: float) -> None:
        try:
            frame = parse_envelope(payload, sender="client")
        except DecodeError as error:
            raise ProtocolViolation(f"invalid standby message: {error}") from None
        if isinstance(frame, StandbyStatusUpdate):
            if self.slot is not None and frame.flush_lsn:
                self.slots.confirm(self.slot, int(frame.flush_lsn))
            if frame.reply_requested:
                self.keepalive(now, reply=False)
        elif not isinstance(frame, HotStandbyFeedback):  # pragma: no cover - the client side has two kinds
            raise ProtocolViolation(f"unexpected standby message {type(frame).__name__}")

    def keepalive(self, now: float, *, reply: bool) -> None:
        """Send a keepalive, asking for a reply if ``reply``; its WAL end is the replay's position."""
        position = self.replay.position if self.replay is not None else 0
        keepalive = PrimaryKeepalive(wal_end=LSN(position), send_time=_now(now), reply_requested=int(reply))
        self._out += frontend.build_copy_data(build_envelope(keepalive))
        self._last_keepalive = now


@functools.lru_cache(maxsize=8)
def _secret(password: str) -> ScramSecret:
    """The stored form of a server's password, made once (PBKDF2 is slow on purpose)."""
    return ScramSecret.from_password(password)


@functools.lru_cache(maxsize=8)
def _certificate_binding(path: str) -> bytes | None:
    """``tls-server-end-point`` data of the first certificate in the PEM file ``path``; None if there is no
    binding to it (then SCRAM-SHA-256-PLUS is not offered)."""
    try:
        text = pathlib.Path(path).read_text(encoding="ascii")
        end = text.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")
        return certificate_binding(ssl.PEM_cert_to_DER_cert(text[text.index("-----BEGIN CERTIFICATE-----"):end]))
    except (OSError, ValueError):
        return None


def _now(now: float) -> Timestamp:
    return Timestamp(int((now - POSTGRES_EPOCH) * 1_000_000))
