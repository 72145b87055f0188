"""The frontend/backend protocol 3.0 as a server sees it, sans I/O: client bytes in, events out; server
messages built to bytes.

Strategy: :class:`FrontendReader` buffers what a client sent and cuts it into messages -- first the
untyped startup packet (or an SSL, GSS or cancel request before it), then typed messages (a type byte, an
Int32 length counting itself, the body).  A length is checked before anything is buffered for it: a
startup packet longer than :data:`MAX_STARTUP` or a message longer than the reader's ``max_message``
is a :class:`ProtocolViolation`, so a client claiming 2 GiB costs nothing but its error.  The reader
never holds more than one message plus what arrived with it.  The ``build_*`` functions make the server's
messages (ErrorResponse with PostgreSQL's field codes, RowDescription of text columns, DataRow, ...).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import ProtocolViolation

__all__ = [
    "CANCEL_REQUEST", "GSSENC_REQUEST", "MAX_STARTUP", "PROTOCOL_3_0", "SSL_REQUEST", "CancelRequest",
    "ClientMessage", "EncryptionRequest", "Event", "FrontendReader", "Startup", "build_auth",
    "build_command_complete", "build_copy_both", "build_copy_data", "build_data_row", "build_error",
    "build_message", "build_parameter_status", "build_ready", "build_row_description",
]

PROTOCOL_3_0 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
#: PostgreSQL's limit on a startup packet (``MAX_STARTUP_PACKET_LENGTH``).
MAX_STARTUP = 10_000
_INT32 = struct.Struct(">i")
_HEAD = struct.Struct(">ci")


@dataclass(frozen=True)
class Startup:
    """A startup packet: protocol 3.0 and its parameters (``user``, ``database``, ``replication``, ...)."""

    parameters: dict[str, str]


@dataclass(frozen=True)
class CancelRequest:
    """A cancel request (answered by closing the connection)."""

    pid: int
    secret: int


@dataclass(frozen=True)
class EncryptionRequest:
    """An SSL or GSS encryption request, before the startup packet (answered ``N``: not supported)."""

    code: int


@dataclass(frozen=True)
class ClientMessage:
    """A typed message after the startup: its type byte (``b"Q"``, ``b"d"``, ...) and its body."""

    type: bytes
    body: bytes


Event = Startup | CancelRequest | EncryptionRequest | ClientMessage


class FrontendReader:
    """Cuts a client's bytes into events: :meth:`feed` the bytes as they arrive, then take :meth:`next`
    until it returns ``None`` (more bytes needed).  Raises :class:`ProtocolViolation` for what no valid
    client sends; the connection is then to be closed."""

    def __init__(self, *, max_message: int = 1 << 20) -> None:
        self.max_message = max_message
        self.started = False
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def next(self) -> Event | None:
        buffer = self._buffer
        if not self.started:
            if len(buffer) < 4:
                return None
            (length,) = _INT32.unpack_from(buffer, 0)
            if not 8 <= length <= MAX_STARTUP:
                raise ProtocolViolation(f"invalid length of startup packet: {length}")
            if len(buffer) < length:
                return None
            packet = bytes(buffer[:length])
            del buffer[:length]
            return self._startup(packet)
        if len(buffer) < 5:
            return None
        kind, length = _HEAD.unpack_from(buffer, 0)
        if length < 4:
            raise ProtocolViolation(f"invalid message length {length} for message type {kind!r}")
        if length - 4 > self.max_message:
            raise ProtocolViolation(f"message of type {kind!r} claims {length - 4} bytes; at most "
                                    f"{self.max_message} are accepted")
        if len(buffer) < 1 + length:
            return None
        body = bytes(buffer[5:1 + length])
        del buffer[:1 + length]
        return ClientMessage(kind, body)

    def _startup(self, packet: bytes) -> Event:
        (code,) = _INT32.unpack_from(packet, 4)
        if code in (SSL_REQUEST, GSSENC_REQUEST):
            if len(packet) != 8:
                raise ProtocolViolation("an encryption request is 8 bytes")
            return EncryptionRequest(code)
        if code == CANCEL_REQUEST:
            if len(packet) != 16:
                raise ProtocolViolation("a cancel request is 16 bytes")
            pid, secret = struct.unpack_from(">ii", packet, 8)
            return CancelRequest(pid, secret)
        if code >> 16 != 3:
            raise ProtocolViolation(f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: this server "
                                    f"speaks 3.0", "0A000")
        fields = packet[8:].split(b"\0")
        # name\0value\0 ... \0: the split ends in two empty strings (the final terminator)
        if len(fields) < 2 or fields[-1] != b"" or fields[-2] != b"" or len(fields) % 2 != 0:
            raise ProtocolViolation("invalid startup packet layout: expected terminator as last byte")
        parameters: dict[str, str] = {}
        for i in range(0, len(fields) - 2, 2):
            try:
                parameters[fields[i].decode("utf-8")] = fields[i + 1].decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolViolation("a startup parameter is not valid UTF-8") from None
        if "user" not in parameters:
            raise ProtocolViolation("no PostgreSQL user name specified in startup packet", "28000")
        self.started = True
        return Startup(parameters)


def cstring(text: str) -> bytes:
    return text.encode("utf-8") + b"\0"


def read_cstring(body: bytes, offset: int = 0) -> tuple[str, int]:
    """The NUL-terminated string at ``offset`` and where it ends; :class:`ProtocolViolation` if unterminated."""
    end = body.find(b"\0", offset)
    if end < 0:
        raise ProtocolViolation("invalid string in message: no terminator")
    try:
        return body[offset:end].decode("utf-8"), end + 1
    except UnicodeDecodeError:
        raise ProtocolViolation("invalid byte sequence in a string of the message", "22021") from None


def build_message(kind: bytes, body: bytes) -> bytes:
    return kind + _INT32.pack(len(body) + 4) + body


def build_auth(code: int, data: bytes = b"") -> bytes:
    """AuthenticationOk (0), AuthenticationSASL (10), SASLContinue (11), SASLFinal (12)."""
    return build_message(b"R", _INT32.pack(code) + data)


def build_parameter_status(name: str, value: str) -> bytes:
    return build_message(b"S", cstring(name) + cstring(value))


def build_ready(status: bytes = b"I") -> bytes:
    return build_message(b"Z", status)


def _fields(severity: str, sqlstate: str, message: str, detail: str | None, hint: str | None) -> bytes:
    parts = [b"S" + cstring(severity), b"V" + cstring(severity), b"C" + cstring(sqlstate), b"M" + cstring(message)]
    if detail:
        parts.append(b"D" + cstring(detail))
    if hint:
        parts.append(b"H" + cstring(hint))
    return b"".join(parts) + b"\0"


def build_error(message: str, sqlstate: str = "XX000", *, severity: str = "ERROR", detail: str | None = None,
                hint: str | None = None) -> bytes:
    return build_message(b"E", _fields(severity, sqlstate, message, detail, hint))


def build_row_description(names: Sequence[str], type_oids: Sequence[int] | None = None) -> bytes:
    """RowDescription of text-format columns (``text`` unless ``type_oids`` says otherwise)."""
    oids = type_oids or [25] * len(names)
    body = struct.pack(">h", len(names)) + b"".join(
        cstring(name) + struct.pack(">ihihih", 0, 0, oid, -1, -1, 0) for name, oid in zip(names, oids))
    return build_message(b"T", body)


def build_data_row(values: Iterable[str | None]) -> bytes:
    items = list(values)
    body = bytearray(struct.pack(">h", len(items)))
    for value in items:
        if value is None:
            body += _INT32.pack(-1)
        else:
            data = value.encode("utf-8")
            body += _INT32.pack(len(data)) + data
    return build_message(b"D", bytes(body))


def build_command_complete(tag: str) -> bytes:
    return build_message(b"C", cstring(tag))


def build_copy_both() -> bytes:
    """CopyBothResponse: binary, no columns (what a walsender sends for START_REPLICATION)."""
    return build_message(b"W", b"\0\0\0")


def build_copy_data(payload: bytes) -> bytes:
    return build_message(b"d", payload)
