"""One client connection of replwire's walsender (PostgreSQL's ``walsender.c``), sans I/O: bytes and the
time in, bytes out.

Strategy: h11's, the protocol as data.  A :class:`Session` is in one :class:`Phase` (startup, SCRAM
authentication when the server has a password, ready for simple queries, streaming in CopyBoth after
``START_REPLICATION``, closed), and what it does is looked up in tables beside it: :data:`HANDLERS` by phase
and client message (an event with no row is a protocol violation), :data:`COMMANDS` by the command
:mod:`~replwire.codec.serve.repl_commands` read, :data:`TIMERS` by phase (``tick`` fires them and
``next_deadline`` reads them, so the two cannot disagree), and :data:`TRANSITIONS`, checked by
``Session._enter``, the one place the phase changes.  A client's error is raised as a
:class:`~replwire.codec.serve.errors.WalsenderError` and answered in one place: FATAL ends the session, ERROR
is followed by ReadyForQuery.

While streaming, :meth:`Session.frame` hands out one XLogData at a time from the client's
:class:`~replwire.codec.serve.replay.Replay`, so the driver sends as fast as its socket takes them.  The
driver (:mod:`~replwire.codec.serve.server`) gives the session what it does not choose -- the server's slots,
its pid and cancel key, the time as ``now`` -- and reads back :meth:`Session.output` and
:attr:`Session.started`.  The session never blocks, sleeps, reads a clock or draws a random number: the same
bytes at the same times get the same answer.  It does read the stream it serves: a capture's
:class:`~replwire.codec.serve.source.Source` reads its files as the replay goes, so a file that breaks
mid-stream raises from :meth:`Session.frame`.
"""

from __future__ import annotations

import functools
import pathlib
import ssl
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Protocol

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

__all__ = [
    "COMMANDS", "HANDLERS", "OTHER", "POSTGRES_EPOCH", "TIMERS", "TRANSITIONS", "Phase", "ServeSettings",
    "Session", "SlotRegistry", "Start", "Timer", "version_text",
]

#: Seconds from the Unix epoch to PostgreSQL's (2000-01-01 00:00:00 UTC).
POSTGRES_EPOCH = 946_684_800


class Phase(Enum):
    """Where a session is; the value is the name its errors use ("... in state ready")."""

    #: Before the startup packet; SSL, GSS and cancel requests come here.
    STARTUP = "startup"
    #: The SCRAM exchange, when the server has a password.
    AUTH = "auth"
    #: Simple queries: the replication commands and the SQL clients send while they set up.
    READY = "ready"
    #: CopyBoth after START_REPLICATION: XLogData out, standby status updates in.
    STREAMING = "streaming"
    CLOSED = "closed"


#: The phases a session may go to from each; ``Session._enter`` refuses any other move.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.STARTUP: frozenset({Phase.AUTH, Phase.READY, Phase.CLOSED}),
    Phase.AUTH: frozenset({Phase.READY, Phase.CLOSED}),
    Phase.READY: frozenset({Phase.STREAMING, Phase.CLOSED}),
    Phase.STREAMING: frozenset({Phase.READY, Phase.CLOSED}),
    Phase.CLOSED: frozenset(),
}


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
        self.phase = Phase.STARTUP  # (changed by _enter only)
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
        self._connected_at: float = now  # the startup and authentication must end by startup_timeout after it
        self._last_heard: float = now
        self._last_keepalive: float = now
        self._exhausted = False
        self._parameters: dict[str, str] = {}
        #: Each START_REPLICATION streamed for, in order, until the driver takes them (and clears the list).
        self.started: list[Start] = []

    # -- the driver's side ----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.phase is Phase.CLOSED

    @property
    def streaming(self) -> bool:
        """In CopyBoth, with messages left to send."""
        return self.phase is Phase.STREAMING and not self._exhausted

    @property
    def starting(self) -> bool:
        """Before the startup and authentication ended: :meth:`next_deadline` is the startup deadline."""
        return self.phase in (Phase.STARTUP, Phase.AUTH)

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
                key = event.type if isinstance(event, ClientMessage) else type(event)
                handler = HANDLERS.get((self.phase, key)) or HANDLERS.get((self.phase, OTHER), Session._unexpected)
                handler(self, event, now)
            except WalsenderError as error:
                self._answer(error)

    def frame(self, now: float) -> bytes | None:
        """The next XLogData as a CopyData message, or ``None`` when the stream has nothing more."""
        if self.phase is not Phase.STREAMING or self._messages is None:
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
        """Keepalives and timeouts, at time ``now`` (Unix time in seconds, as every ``now`` here): the first
        timer of the phase that is due fires (:data:`TIMERS`)."""
        for timer in TIMERS[self.phase]:
            if timer.due(self, now):
                try:
                    timer.expire(self, now)
                except WalsenderError as error:
                    self._answer(error)
                return

    def next_deadline(self) -> float:
        """The time by which :meth:`tick` has something to do (infinity once closed)."""
        return min((timer.deadline(self) for timer in TIMERS[self.phase]), default=float("inf"))

    def tls_started(self) -> None:
        """The driver finished the TLS handshake the client asked for: what follows is encrypted."""
        self.start_tls, self.tls = False, True

    def disconnect(self, reason: str) -> None:
        """End the session from the driver's side (fault injection, server shutdown)."""
        self._close(reason)

    def keepalive(self, now: float, *, reply: bool) -> None:
        """Send a keepalive, asking for a reply if ``reply``; its WAL end is the replay's position."""
        position = self.replay.position if self.replay is not None else 0
        keepalive = PrimaryKeepalive(wal_end=LSN(position), send_time=_now(now), reply_requested=int(reply))
        self._out += frontend.build_copy_data(build_envelope(keepalive))
        self._last_keepalive = now

    # -- phases and errors ----------------------------------------------------------------------------------

    def _enter(self, phase: Phase) -> None:
        if phase not in TRANSITIONS[self.phase]:
            raise AssertionError(f"no transition from {self.phase.value} to {phase.value}")
        self.phase = phase

    def _close(self, reason: str) -> None:
        if not self.closed:
            self._enter(Phase.CLOSED)
            self.close_reason = reason
            self._messages = None
            self.slots.release(self.pid)  # (PostgreSQL drops a session's temporary slots when it ends)

    def _answer(self, error: WalsenderError) -> None:
        """The one place a client's error becomes its ErrorResponse: FATAL closes the session, ERROR is
        followed by ReadyForQuery."""
        message = str(error)
        if error.fatal:
            self._out += frontend.build_error(message, error.sqlstate, severity="FATAL", detail=error.detail)
            self._close(message)
        else:
            self._out += frontend.build_error(message, error.sqlstate, detail=error.detail) + frontend.build_ready()

    def _unexpected(self, event: frontend.Event, now: float) -> None:
        """An event with no row in :data:`HANDLERS` for the phase."""
        if not isinstance(event, ClientMessage):
            raise ProtocolViolation(f"unexpected {type(event).__name__} in state {self.phase.value}")
        if event.type in b"PBEDSHFC":
            raise ProtocolViolation("extended query protocol not supported in a replication connection")
        raise ProtocolViolation(f"invalid frontend message type {event.type!r} in state {self.phase.value}")

    # -- timers (TIMERS) ------------------------------------------------------------------------------------

    def _authentication_timeout(self, now: float) -> None:
        raise WalsenderError("canceling authentication due to timeout", "08006")

    def _idle_timeout(self, now: float) -> None:
        raise WalsenderError(f"terminating connection: the client sent nothing for "
                             f"{self.settings.reply_timeout:g} seconds", "08006")

    def _replication_timeout(self, now: float) -> None:
        raise WalsenderError("terminating walsender process due to replication timeout", "08006")

    def _keepalive_due(self, now: float) -> None:
        self.keepalive(now, reply=True)

    # -- startup and authentication (HANDLERS) --------------------------------------------------------------

    def _encryption_request(self, event: frontend.EncryptionRequest, now: float) -> None:
        if event.code != frontend.SSL_REQUEST or self.settings.tls_cert is None:
            self._out += b"N"
            return
        if self.tls:
            raise ProtocolViolation("an SSL request on a connection already encrypted")
        if self.reader.buffered:  # (bytes sent before the handshake must not pass as encrypted ones)
            raise ProtocolViolation("received unencrypted data after SSL request")
        self._out += b"S"
        self.start_tls = True

    def _cancel_request(self, event: frontend.CancelRequest, now: float) -> None:
        self._close("cancel request")

    def _terminate(self, event: ClientMessage, now: float) -> None:
        self._close("the client terminated the session")

    def _startup(self, event: frontend.Startup, now: float) -> None:
        parameters = event.parameters
        self.user = parameters["user"]
        settings = self.settings
        if settings.tls_cert is not None and not self.tls and not self.loopback and not settings.allow_plaintext:
            raise WalsenderError(f'connections from host "{self.peer}" must use TLS (sslmode=require): this server '
                                 "accepts connections without it from loopback only", "28000")
        replication = parameters.get("replication", "").lower()
        if replication != "database":
            raise WalsenderError("this server serves logical replication connections only: connect with "
                                 "replication=database", "08004")
        wanted = parameters.get("client_encoding")
        if wanted and _norm_encoding(wanted) != _norm_encoding(self.source.client_encoding):
            raise WalsenderError(f"client_encoding {wanted} is not served: the stream is in "
                                 f"{self.source.client_encoding}", "22023")
        self._parameters = parameters
        if self._secret is not None:
            self._enter(Phase.AUTH)
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
        self._enter(Phase.READY)

    def _not_sasl(self, event: ClientMessage, now: float) -> None:
        raise ProtocolViolation(f"expected SASL response, got message type {event.type!r}")

    def _password(self, event: ClientMessage, now: float) -> None:
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

    # -- queries (HANDLERS, then COMMANDS) ------------------------------------------------------------------

    def _query(self, event: ClientMessage, now: float) -> None:
        text, _ = frontend.read_cstring(event.body)
        command = repl_commands.read_query(text)
        COMMANDS[type(command)](self, command, now)

    def _query_while_streaming(self, event: ClientMessage, now: float) -> None:
        raise ProtocolViolation("a query while streaming: send CopyDone first")

    def _identify_system(self, command: repl_commands.IdentifySystem, now: float) -> None:
        position = str(LSN(self.source.scan().last_lsn))
        self._rows(["systemid", "timeline", "xlogpos", "dbname"], [[self.settings.system_identifier, "1",
                                                                      position, self._database]],
                   [25, 23, 25, 25], "IDENTIFY_SYSTEM")

    def _show(self, command: repl_commands.Show, now: float) -> None:
        self._rows([command.name], [[self._setting(command.name)]], None, "SHOW")

    def _current_setting(self, command: repl_commands.Setting, now: float) -> None:
        self._rows([command.column], [[self._setting(command.name)]], None, "SELECT 1")

    def _set_config(self, command: repl_commands.SetConfig, now: float) -> None:
        self._rows(["set_config"], [[command.value]], None, "SELECT 1")

    def _publication_tables(self, command: repl_commands.PublicationTables, now: float) -> None:
        relations = sorted(self.source.scan().relations)
        rows = [[namespace, name] + [None] * (len(command.columns) - 2) for namespace, name in relations]
        self._rows(list(command.columns), [row[:len(command.columns)] for row in rows], None,
                   f"SELECT {len(rows)}")

    def _publication_names(self, command: repl_commands.PublicationNames, now: float) -> None:
        self._rows([command.column], [[name] for name in command.names], None, f"SELECT {len(command.names)}")

    def _create_slot(self, command: repl_commands.CreateSlot, now: float) -> None:
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

    def _drop_slot(self, command: repl_commands.DropSlot, now: float) -> None:
        # (any name may be dropped, as any name may be streamed from, save another live session's
        # temporary slot, which PostgreSQL reports active)
        holder = self.slots.holder(command.slot)
        if holder is not None and holder != self.pid:
            raise WalsenderError(f'replication slot "{command.slot}" is active for PID {holder}', "55006",
                                 fatal=False)
        self.slots.drop(command.slot)
        self._out += frontend.build_command_complete("DROP_REPLICATION_SLOT") + frontend.build_ready()

    def _alter_slot(self, command: repl_commands.AlterSlot, now: float) -> None:
        self._out += frontend.build_command_complete("ALTER_REPLICATION_SLOT") + frontend.build_ready()

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

    def _setting(self, name: str) -> str:
        """The setting ``SHOW`` and ``current_setting()`` tell for ``name``."""
        settings = {"server_version": version_text(self.settings.server_version),
                    "server_version_num": str(self.settings.server_version), "integer_datetimes": "on",
                    "wal_segment_size": "16MB", "server_encoding": self.source.client_encoding,
                    "client_encoding": self.source.client_encoding,
                    "max_replication_slots": "10", "data_directory_mode": "0700"}
        if name not in settings:
            raise WalsenderError(f'unrecognized configuration parameter "{name}"', "42704", fatal=False)
        return settings[name]

    def _slot_row(self, command: repl_commands.SlotRow, now: float) -> None:
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

    def _start_replication(self, command: repl_commands.StartReplication, now: float) -> None:
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
        self._enter(Phase.STREAMING)
        self._out += frontend.build_copy_both()
        self.started.append(Start(command.slot, start, request))
        self._last_heard = self._last_keepalive = now

    # -- CopyBoth (HANDLERS) --------------------------------------------------------------------------------

    def _copy_data(self, event: ClientMessage, now: float) -> None:
        try:
            frame = parse_envelope(event.body, sender="client")
        except DecodeError as error:
            raise ProtocolViolation(f"invalid standby message: {error}") from None
        if isinstance(frame, StandbyStatusUpdate):
            if self.slot is not None and frame.flush_lsn:
                self.slots.confirm(self.slot, int(frame.flush_lsn))
            if frame.reply_requested:
                self.keepalive(now, reply=False)
        elif not isinstance(frame, HotStandbyFeedback):  # pragma: no cover - the client side has two kinds
            raise ProtocolViolation(f"unexpected standby message {type(frame).__name__}")

    def _copy_done(self, event: ClientMessage, now: float) -> None:
        self._out += frontend.build_message(b"c", b"")
        self._out += frontend.build_command_complete("START_REPLICATION") + frontend.build_ready()
        self._messages, self.replay = None, None
        self._enter(Phase.READY)

    def _copy_fail(self, event: ClientMessage, now: float) -> None:
        self._close("the client failed the copy")


#: A handler of :data:`HANDLERS` or :data:`COMMANDS`: the session, the event or command, the time.
Handler = Callable[[Session, Any, float], None]

#: The key of :data:`HANDLERS` for every message type of a phase that has no row of its own.
OTHER = None

#: What each event does in each phase: the packets before the startup by their class, typed messages by
#: their type byte (``OTHER``: any other type byte).  An event with no row is a protocol violation.
HANDLERS: dict[tuple[Phase, bytes | type | None], Handler] = {
    (Phase.STARTUP, frontend.EncryptionRequest): Session._encryption_request,
    (Phase.STARTUP, frontend.CancelRequest): Session._cancel_request,
    (Phase.STARTUP, frontend.Startup): Session._startup,
    (Phase.AUTH, b"p"): Session._password,
    (Phase.AUTH, OTHER): Session._not_sasl,
    (Phase.READY, b"Q"): Session._query,
    (Phase.STREAMING, b"Q"): Session._query_while_streaming,
    (Phase.STREAMING, b"d"): Session._copy_data,
    (Phase.STREAMING, b"c"): Session._copy_done,
    (Phase.STREAMING, b"f"): Session._copy_fail,
    **{(phase, b"X"): Session._terminate for phase in (Phase.AUTH, Phase.READY, Phase.STREAMING)},
}

#: How each command :func:`~replwire.codec.serve.repl_commands.read_query` reads is answered.
COMMANDS: dict[type, Handler] = {
    repl_commands.IdentifySystem: Session._identify_system,
    repl_commands.Show: Session._show,
    repl_commands.SetConfig: Session._set_config,
    repl_commands.PublicationTables: Session._publication_tables,
    repl_commands.PublicationNames: Session._publication_names,
    repl_commands.Setting: Session._current_setting,
    repl_commands.SlotRow: Session._slot_row,
    repl_commands.CreateSlot: Session._create_slot,
    repl_commands.DropSlot: Session._drop_slot,
    repl_commands.AlterSlot: Session._alter_slot,
    repl_commands.StartReplication: Session._start_replication,
}


class Timer(NamedTuple):
    """One wait of a phase: ``length`` (a :class:`ServeSettings` field) from ``since`` (the session's time it
    counts from); a timeout fires once that has passed, a timer ``at`` its deadline on it."""

    since: str
    length: str
    expire: Callable[[Session, float], None]
    at: bool = False

    def deadline(self, session: Session) -> float:
        deadline: float = getattr(session, self.since) + getattr(session.settings, self.length)
        return deadline

    def due(self, session: Session, now: float) -> bool:
        elapsed, length = now - getattr(session, self.since), getattr(session.settings, self.length)
        return bool(elapsed >= length if self.at else elapsed > length)


# (counted from the connection's start, as PostgreSQL's authentication_timeout is: a client trickling its
# startup packet a byte at a time must not hold its place for longer)
_AUTHENTICATION = Timer("_connected_at", "startup_timeout", Session._authentication_timeout)

#: What each phase waits for, in the order ``tick`` checks them (the first due fires); ``next_deadline`` is
#: the earliest of them.
TIMERS: dict[Phase, tuple[Timer, ...]] = {
    Phase.STARTUP: (_AUTHENTICATION,),
    Phase.AUTH: (_AUTHENTICATION,),
    Phase.READY: (Timer("_last_heard", "reply_timeout", Session._idle_timeout),),
    Phase.STREAMING: (Timer("_last_heard", "reply_timeout", Session._replication_timeout),
                      Timer("_last_keepalive", "keepalive_interval", Session._keepalive_due, at=True)),
    Phase.CLOSED: (),
}


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
