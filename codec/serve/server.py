"""The server: sockets and threads around ``Session``, with limits and
fault injection, and ``serving``, the context manager tests use.

Strategy: one thread accepts; each connection gets a thread running its session: it sends what the session
has, fills the socket with XLogData frames (in batches of about ``BATCH`` bytes, or one at a time with a
per-message delay), waits for the client's bytes until the session's next deadline, and ticks it.  Limits
keep one client from harming the others: at most ``max_connections`` sessions (one more is told "too many
clients" and closed at once), every read bounded by the session's reader, every write bounded by the reply
timeout (a client that stops reading is dropped like one that stops answering).  A session's failure ends
that connection only, and is logged.  Serving recorded data, the server listens on loopback unless given a
password, which clients must then prove with SCRAM-SHA-256.  Given a certificate and key, it answers an SSL
request ``S`` and runs the TLS handshake (Python's ``ssl``) before the session goes on; clients off loopback
must then use TLS unless ``allow_plaintext``.

Fault injection (``Faults``): drop the connection once, after ``disconnect_after`` XLogData frames
(counted over all connections), or every connection after each ``disconnect_every`` frames; delay every
frame by ``delay`` seconds; send a keepalive right after every frame without a position
(``keepalive_after_unpositioned``).  A dropped connection is closed without a word, as a crashed server's would be.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import secrets
import select
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages import WireMessage
from ..scalars import LSN
from . import frontend
from .errors import ServeError
from .source import Source
from .walsender import ServeSettings, Session, Start

__all__ = ["BATCH", "FIRST_PID", "Faults", "Server", "ServerAddress", "Slots", "serving", "source_of"]

#: About how many bytes of frames are sent at a time.
BATCH = 64 * 1024
#: At most this many connections over the limit wait for their refusal; more are closed at once.
REFUSING = 1024
#: At most this many connections over the limit that asked for TLS are refused over TLS at a time.
TLS_REFUSING = 8
_REQUEST = struct.Struct(">ii")
_INT32 = struct.Struct(">i")
_ENCRYPTION_REQUESTS = {(8, frontend.SSL_REQUEST), (8, frontend.GSSENC_REQUEST)}
#: The process ID told to a server's first session (BackendKeyData); each later one is the next number.
FIRST_PID = 40_000


@dataclass(frozen=True)
class Faults:
    """Faults to inject, for testing how a consumer copes."""

    disconnect_after: int | None = None
    disconnect_every: int | None = None
    delay: float = 0.0
    #: Send a keepalive asking for a reply right after every frame without a position (a Relation, a Type, a
    #: Begin before its Origin), as a walsender may when it waits for its socket there.
    keepalive_after_unpositioned: bool = False


@dataclass
class Slots:
    """The slots of one server, shared by its sessions (through ``session.SlotRegistry``); thread-safe.

    ``confirmed`` holds the confirmed (flushed) position of each slot name clients streamed from;
    ``created`` the names clients created (``CREATE_REPLICATION_SLOT``) and did not drop; ``temporary`` the
    TEMPORARY slots, each with the session (its pid) that made it and whose end drops it.  A name in any of
    them exists: creating it again is refused, as PostgreSQL refuses it."""

    confirmed: dict[str, int] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)
    temporary: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def confirm(self, slot: str, lsn: int) -> None:
        with self._lock:
            if lsn > self.confirmed.get(slot, 0):
                self.confirmed[slot] = lsn

    def get(self, slot: str) -> int:
        with self._lock:
            return self.confirmed.get(slot, 0)

    def create(self, slot: str, *, owner: int | None = None) -> bool:
        """Make ``slot`` (TEMPORARY, held by the session ``owner``, when ``owner`` is given); False if a slot
        of that name exists (created, temporary, or with a confirmed position)."""
        with self._lock:
            if slot in self.created or slot in self.temporary or slot in self.confirmed:
                return False
            if owner is None:
                self.created.add(slot)
            else:
                self.temporary[slot] = owner
            return True

    def holder(self, slot: str) -> int | None:
        """The session (pid) whose TEMPORARY slot ``slot`` is, or None."""
        with self._lock:
            return self.temporary.get(slot)

    def drop(self, slot: str) -> None:
        with self._lock:
            self.confirmed.pop(slot, None)
            self.created.discard(slot)
            self.temporary.pop(slot, None)

    def release(self, owner: int) -> None:
        """The session ``owner`` ended: drop its TEMPORARY slots (and what was confirmed on them)."""
        with self._lock:
            for slot in [slot for slot, holder in self.temporary.items() if holder == owner]:
                del self.temporary[slot]
                self.confirmed.pop(slot, None)


@dataclass(frozen=True)
class ServerAddress:
    """Where a server listens; ``conninfo`` is a libpq connection string for a replication client."""

    host: str
    port: int

    def conninfo(self, *, dbname: str = "replwire", user: str = "replwire", password: str | None = None,
                 replication: bool = True) -> str:
        parts = [f"host={self.host}", f"port={self.port}", f"dbname={dbname}", f"user={user}"]
        if password is not None:
            parts.append("password='" + password.replace("\\", "\\\\").replace("'", "\\'") + "'")
        if replication:
            parts.append("replication=database")
        return " ".join(parts)


def _is_loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


class Server:
    """Serve ``source`` on ``host:port`` (port 0: any free port; see ``address``).  Start with
    ``start`` (a background thread) or ``serve_forever``; ``close`` stops it and its
    connections.  ``log`` receives one line per event worth telling (connections, errors, faults)."""

    def __init__(self, source: Source, *, host: str = "127.0.0.1", port: int = 0,
                 settings: ServeSettings | None = None, faults: Faults | None = None, max_connections: int = 64,
                 log: Callable[[str], None] | None = None) -> None:
        self.source = source
        self.settings = settings or ServeSettings(server_version=source.server_version)
        self.faults = faults or Faults()
        self.max_connections = max_connections
        self.log = log or (lambda line: None)
        if self.settings.password == "":
            raise ServeError("an empty password is no password: give one clients must prove, or none (then the "
                             "server listens on loopback only)")
        self._tls = _tls_context(self.settings)
        if not _is_loopback(host) and self.settings.password is None:
            raise ServeError(f"{host} is not a loopback address: serving recorded data there needs a password "
                             f"(clients then authenticate with SCRAM-SHA-256)")
        source.scan()  # read the stream once now: a broken one fails here, not in front of a client
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError as error:
            self._socket.close()
            raise ServeError(f"cannot listen on {host}:{port}: {error.strerror}") from None
        self._socket.listen(128)
        self.address = ServerAddress(host, self._socket.getsockname()[1])
        self.slots = Slots()
        self._pids = itertools.count(FIRST_PID)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._frames = 0
        self._dropped_once = False
        self._tls_refusing = 0  # connections over the limit being refused over TLS
        self._acceptor: threading.Thread | None = None
        #: ``(slot, start LSN, request)`` of every START_REPLICATION served, in order.
        self.starts: list[Start] = []
        self.served = 0  # connections taken
        self.refused = 0  # connections refused for the limit

    # -- running ----------------------------------------------------------------------------------------

    def start(self) -> Server:
        self._acceptor = threading.Thread(target=self.serve_forever, name="replwire-serve", daemon=True)
        self._acceptor.start()
        return self

    def serve_forever(self) -> None:
        # (a selector, not select(): a crowd of connections has descriptors past select's 1024)
        selector = selectors.DefaultSelector()
        selector.register(self._socket, selectors.EVENT_READ)
        # connections over the limit, until their startup packet came: when they must be answered anyway, and
        # what they sent so far
        refusing: dict[socket.socket, tuple[float, bytearray]] = {}
        try:
            while not self._stopping.is_set():
                try:
                    ready = {key.fileobj for key, _ in selector.select(0.2)}
                except (OSError, ValueError):
                    if self._stopping.is_set():
                        return
                    continue
                now = time.monotonic()
                for conn in [c for c in refusing if c in ready or refusing[c][0] < now]:
                    deadline = refusing[conn][0]
                    outcome = self._refusal(conn, refusing[conn][1], timed_out=deadline < now)
                    if outcome == "wait":
                        continue  # (it asked for encryption, was told no, and its startup packet is to come)
                    del refusing[conn]
                    selector.unregister(conn)
                    if outcome == "tls":
                        self._refuse_over_tls(conn, deadline)
                    else:
                        conn.close()
                if self._socket not in ready:
                    continue
                try:
                    conn, peer = self._socket.accept()
                except OSError:
                    continue
                with self._lock:
                    full = len(self._connections) >= self.max_connections
                    if not full:
                        self._connections.add(conn)
                        self._threads = [t for t in self._threads if t.is_alive()]
                if full:
                    self.refused += 1
                    if len(refusing) >= REFUSING:
                        conn.close()
                    else:  # answered once its startup packet is read: closing on unread bytes would reset it
                        conn.setblocking(False)
                        refusing[conn] = (now + self.settings.startup_timeout, bytearray())
                        selector.register(conn, selectors.EVENT_READ)
                    continue
                self.served += 1
                thread = threading.Thread(target=self._run, args=(conn, peer), name=f"replwire-serve-{peer}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
        finally:
            for conn in refusing:
                conn.close()
            selector.close()

    def _refusal(self, conn: socket.socket, received: bytearray, *, timed_out: bool) -> str:
        """Read what a connection over the limit sent; refuse it once its startup packet came (or its time
        ran out): ``"close"`` when it is answered, to be closed; ``"wait"`` for more; ``"tls"`` when it asked
        for TLS, which the server has: it is to be refused over TLS.  An encryption request the server
        cannot take is answered ``N`` first, as PostgreSQL does: an error in its place would be read as a
        failed encryption negotiation ("server sent an error response during SSL exchange")."""
        try:
            if not timed_out:
                data = conn.recv(frontend.MAX_STARTUP)
                if not data:
                    return "close"
                received += data
                while len(received) >= 8 and _REQUEST.unpack_from(received) in _ENCRYPTION_REQUESTS:
                    if (self._tls is not None and len(received) == 8
                            and _REQUEST.unpack_from(received)[1] == frontend.SSL_REQUEST):
                        return "tls"
                    del received[:8]
                    conn.send(b"N")
                if not received:
                    return "wait"
            conn.send(frontend.build_error("sorry, too many clients already", "53300", severity="FATAL"))
            conn.shutdown(socket.SHUT_WR)
        except BlockingIOError:
            return "wait"
        except OSError:
            pass
        return "close"

    def _refuse_over_tls(self, conn: socket.socket, deadline: float) -> None:
        """Tell a connection over the limit that asked for TLS why it is refused, over TLS (a client with
        ``sslmode=require`` would otherwise only learn that the server "does not support SSL"): in a thread
        of its own, at most :data:`TLS_REFUSING` at a time (beyond that it is closed), by ``deadline``."""
        with self._lock:
            if self._tls_refusing >= TLS_REFUSING:
                conn.close()
                return
            self._tls_refusing += 1

        def refuse() -> None:
            assert self._tls is not None
            secure: socket.socket = conn
            try:
                conn.setblocking(True)
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                conn.sendall(b"S")
                secure = self._tls.wrap_socket(conn, server_side=True)
                received = b""
                while len(received) < 4 or len(received) < min(_INT32.unpack_from(received)[0], frontend.MAX_STARTUP):
                    secure.settimeout(max(0.1, deadline - time.monotonic()))
                    data = secure.recv(frontend.MAX_STARTUP)
                    if not data or len(received) > frontend.MAX_STARTUP:
                        break
                    received += data
                secure.sendall(frontend.build_error("sorry, too many clients already", "53300", severity="FATAL"))
            except (OSError, ValueError):
                pass
            finally:
                with contextlib.suppress(OSError):
                    secure.close()
                with self._lock:
                    self._tls_refusing -= 1

        threading.Thread(target=refuse, name="replwire-serve-refusal", daemon=True).start()

    def close(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._socket.close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._acceptor is not None and self._acceptor is not threading.current_thread():
            self._acceptor.join(5)
        for thread in list(self._threads):
            thread.join(5)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one connection ---------------------------------------------------------------------------------

    def _fault(self, session: Session, frames: int) -> str | None:
        faults = self.faults
        if faults.disconnect_every and frames and frames % faults.disconnect_every == 0:
            return f"--disconnect-every {faults.disconnect_every}"
        if faults.disconnect_after is not None:
            with self._lock:
                self._frames += 1
                if not self._dropped_once and self._frames >= faults.disconnect_after:
                    self._dropped_once = True
                    return f"--disconnect-after {faults.disconnect_after}"
        return None

    def _run(self, conn: socket.socket, peer: Any) -> None:
        host = peer[0] if isinstance(peer, tuple) else str(peer)
        with self._lock:
            pid = next(self._pids)
        session = Session(self.source, self.settings, self.slots, pid=pid, cancel_key=secrets.randbits(32),
                          now=time.time(), peer=host, loopback=_is_loopback_address(host))
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.log(f"{where}: connected (session {session.pid})")
        conn.settimeout(self.settings.reply_timeout)
        poller = select.poll()
        poller.register(conn, select.POLLIN)
        next_frame_at = 0.0
        dropped: str | None = None
        bounded = False  # (the socket's timeout is the startup deadline's, not the reply timeout)
        try:
            while not session.closed and not self._stopping.is_set():
                now = time.time()
                out = bytearray(session.output())
                ready = session.streaming
                if ready and now >= next_frame_at:
                    while len(out) < BATCH:
                        frame = session.frame(now)
                        if frame is None:
                            break
                        out += frame
                        if self.faults.keepalive_after_unpositioned and session.last_lsn == 0:
                            session.keepalive(now, reply=True)
                            out += session.output()
                        dropped = self._fault(session, session.sent_frames)
                        if dropped is not None:
                            break
                        if self.faults.delay:
                            next_frame_at = now + self.faults.delay
                            break
                if out:
                    conn.sendall(out)
                if dropped is not None:
                    session.disconnect(dropped)
                    break
                if session.start_tls:
                    conn = self._handshake(conn, session)
                    poller = select.poll()
                    poller.register(conn, select.POLLIN)
                    continue
                wait = max(0.0, min(session.next_deadline(), next_frame_at if self.faults.delay else now + 1) - now)
                if session.streaming and not self.faults.delay:
                    wait = 0.0
                # (a TLS connection may hold decrypted bytes the socket no longer shows)
                buffered = isinstance(conn, ssl.SSLSocket) and conn.pending() > 0
                if buffered or poller.poll(wait * 1000):
                    # (readable may be only part of a TLS record: SSLSocket.recv then waits for the rest, for
                    # as long as the socket's timeout.  Until the startup ends, that wait ends at the startup
                    # deadline, so tick enforces it however the client trickles its bytes; after, the reply
                    # timeout bounds it.)
                    starting = session.starting
                    if starting:
                        conn.settimeout(max(0.01, session.next_deadline() - time.time()))
                        bounded = True
                    try:
                        data = conn.recv(BATCH)
                    except TimeoutError:
                        if not starting:
                            raise
                    else:
                        session.receive(data, time.time())
                        self._take_starts(session, where)
                    if bounded and not session.starting:
                        conn.settimeout(self.settings.reply_timeout)
                        bounded = False
                session.tick(time.time())
            rest = session.output()
            if rest and dropped is None:
                with contextlib.suppress(OSError):
                    conn.sendall(rest)
        except (TimeoutError, OSError) as error:
            session.disconnect(f"connection error: {error}")
        except Exception as error:  # noqa: BLE001 - one session's failure must not take the server down
            self.log(f"{where}: session failed: {type(error).__name__}: {error}")
            with contextlib.suppress(OSError):
                conn.sendall(session.output() + frontend.build_error(f"internal error: {error}", "XX000",
                                                                     severity="FATAL"))
            session.disconnect(f"internal error: {error}")
        finally:
            with self._lock:
                self._connections.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()
            self.log(f"{where}: closed ({session.close_reason}; {session.sent_frames} frames sent)")


    def _take_starts(self, session: Session, where: str) -> None:
        """Note the START_REPLICATIONs ``session`` began streaming for (before their first frame is sent)."""
        for start in session.started:
            request = start.request
            self.starts.append(start)
            self.log(f"{where}: START_REPLICATION slot {start.slot} from {LSN(start.lsn)}: proto_version "
                     f"{request.proto_version}, streaming {request.streaming}, two_phase {request.two_phase}, "
                     f"messages {request.messages}, binary {request.binary}, origin {request.origin}")
        session.started.clear()

    def _handshake(self, conn: socket.socket, session: Session) -> socket.socket:
        """The TLS handshake the session agreed to, within the startup timeout; the encrypted socket."""
        assert self._tls is not None
        conn.settimeout(max(0.1, session.next_deadline() - time.time()))
        try:
            wrapped = self._tls.wrap_socket(conn, server_side=True)
        except (OSError, ValueError) as error:  # (ssl.SSLError is an OSError)
            raise OSError(f"TLS handshake failed: {error}") from None
        finally:
            with self._lock:
                self._connections.discard(conn)
        with self._lock:
            self._connections.add(wrapped)
        wrapped.settimeout(self.settings.reply_timeout)
        session.tls_started()
        return wrapped


def _tls_context(settings: ServeSettings) -> ssl.SSLContext | None:
    """The server's TLS context from ``settings`` (None without TLS), or :class:`ServeError`."""
    if settings.tls_cert is None and settings.tls_key is None:
        return None
    if settings.tls_cert is None or settings.tls_key is None:
        raise ServeError("TLS needs both a certificate and its private key (--tls-cert and --tls-key)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # (PostgreSQL's default ssl_min_protocol_version)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as error:
        raise ServeError(f"cannot load the TLS certificate {settings.tls_cert} and key {settings.tls_key}: "
                         f"{error}") from None
    return context


def _is_loopback_address(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def source_of(stream: Source | str | os.PathLike[str] | Sequence[Any], *, proto_version: int = 4,
              server_version: int | None = None) -> Source:
    """A ``Source`` from what a user has: one, capture file paths, or built
    messages (encoded with ``proto_version``)."""
    if isinstance(stream, Source):
        return stream
    if isinstance(stream, (str, os.PathLike)):
        return Source.from_captures([stream], server_version=server_version)
    items = list(stream)
    if items and all(isinstance(item, (str, os.PathLike)) for item in items):
        return Source.from_captures(items, server_version=server_version)
    if all(isinstance(item, WireMessage) or (isinstance(item, tuple) and len(item) == 2) for item in items):
        return Source.from_messages(items, proto_version=proto_version,
                                    server_version=server_version or 180000)
    raise TypeError("serve a Source, capture file paths, or pgoutput message objects")


@contextlib.contextmanager
def serving(stream: Source | str | os.PathLike[str] | Iterable[Any], *, host: str = "127.0.0.1", port: int = 0,
            server_version: int | None = None, password: str | None = None, proto_version: int = 4,
            keepalive_interval: float = 10.0, reply_timeout: float = 60.0, faults: Faults | None = None,
            max_connections: int = 64, log: Callable[[str], None] | None = None, tls_cert: str | None = None,
            tls_key: str | None = None, allow_plaintext: bool = False) -> Iterator[ServerAddress]:
    """Serve ``stream`` -- capture file paths (one, or several in the order they were written), a
    ``Source`` (from ``replwire.codec.serve.source``), or built pgoutput messages -- over the replication
    protocol for the ``with`` block; the block gets the [ServerAddress][replwire.codec.serve.server.ServerAddress].

    Examples:
        >>> from replwire.codec import serving
        >>> with serving("app.rwcap") as address:  # doctest: +SKIP
        ...     psycopg2.connect(address.conninfo(), connection_factory=LogicalReplicationConnection)
    """
    items: Any = stream if isinstance(stream, (Source, str, os.PathLike)) else list(stream)
    source = source_of(items, proto_version=proto_version, server_version=server_version)
    settings = ServeSettings(server_version=server_version or source.server_version, password=password,
                             keepalive_interval=keepalive_interval, reply_timeout=reply_timeout,
                             tls_cert=tls_cert, tls_key=tls_key, allow_plaintext=allow_plaintext)
    with Server(source, host=host, port=port, settings=settings, faults=faults, max_connections=max_connections,
                log=log) as server:
        yield server.address
