"""Parse and build through the construct declarations themselves: the reference path.

Strategy: dispatch on the tag per layer (logical, or envelope per sender), run the declaration's
construct parser or builder with the context ``proto_version``/``in_stream``/``encoding``, and translate every
failure at the boundary.  Parsing returns a message or raises :class:`DecodeError`; building returns
bytes or raises :class:`EncodeError`.  The failing field's path, array index and byte offset come from
the annotations :mod:`replwire.schema.wire_error` puts on the exception.
"""

from __future__ import annotations

import io
import re
from typing import Any

from construct import ConstructError, StreamError

from ... import schema
from ...schema.encodings import UTF8, text_codec
from ...schema.fields import Trace
from ...schema.message_spec import MessageSpec
from ...schema.wire_error import WireError, location
from .. import messages
from ..errors import DecodeError, EncodeError
from ..messages import WireMessage

__all__ = [
    "ENVELOPE_CLASSES", "LOGICAL_CLASSES", "as_bytes", "build", "build_envelope", "check_context", "envelope_class",
    "logical_class", "parse", "parse_envelope", "parse_with",
]

#: Message classes by tag, per layer; built from the classes, checked against the schema registries.
LOGICAL_CLASSES: dict[str, type[WireMessage]] = {
    cls.spec.tag: cls for cls in WireMessage.__subclasses__() if cls.spec.layer == "logical"}
ENVELOPE_CLASSES: dict[str, dict[str, type[WireMessage]]] = {
    sender: {tag: next(c for c in WireMessage.__subclasses__() if c.spec is spec) for tag, spec in specs.items()}
    for sender, specs in schema.ENVELOPE.items()}
assert {t: c.spec for t, c in LOGICAL_CLASSES.items()} == schema.LOGICAL, "a logical message has no class"

_SHORT_READ = re.compile(r"expected (\d+), found (\d+)")


def check_context(proto_version: Any, in_stream: Any, encoding: Any = UTF8) -> str:
    """Refuse a parse/build context that cannot occur on the wire (a caller error: ``ValueError``); the
    Python codec of its ``encoding`` (see :func:`replwire.schema.encodings.text_codec`)."""
    if isinstance(proto_version, bool) or not isinstance(proto_version, int) \
            or not 1 <= proto_version <= schema.MAX_PROTO_VERSION:
        raise ValueError(f"proto_version must be an int from 1 to {schema.MAX_PROTO_VERSION}, "
                         f"got {proto_version!r}")
    if not isinstance(in_stream, bool):
        raise ValueError(f"in_stream must be True or False, got {in_stream!r}")
    if in_stream and proto_version < 2:
        raise ValueError("in_stream=True needs proto_version 2 or later (streaming starts at protocol 2)")
    return text_codec(encoding)


def _reason(error: ConstructError) -> str:
    if isinstance(error, WireError):
        return error.reason
    text = str(error.args[0]) if error.args else type(error).__name__
    if isinstance(error, StreamError):
        match = _SHORT_READ.search(text)
        if match:
            needed, available = match.groups()
            return f"truncated: needed {needed} byte{'s' if needed != '1' else ''}, {available} available"
    return text


def _absent_fields_hint(spec: MessageSpec, proto_version: int | None) -> str:
    later = [f.name for f in messages.value_fields(spec.declaration)
             if proto_version is not None and f.meta.since > proto_version and f.meta.since > 1
             and f.name != "xid"]
    if not later:
        return ""
    return f"; {', '.join(later)} exist only from protocol {max_since(spec)} on"


def max_since(spec: MessageSpec) -> int:
    return max(f.meta.since for f in messages.value_fields(spec.declaration))


def parse_with(cls: type[WireMessage], data: bytes, *, proto_version: int | None, in_stream: bool,
               encoding: str = UTF8, trace: Trace | None = None) -> WireMessage:
    """Parse ``data`` as exactly one ``cls`` message, its Strings in the codec ``encoding`` (recording where
    each field is in ``trace``, if given)."""
    spec = cls.spec
    stream = io.BytesIO(data)
    try:
        raw = spec.declaration.parse_stream(stream, proto_version=proto_version, in_stream=in_stream,
                                            encoding=encoding, _trace=trace)
    except ConstructError as error:
        offset, field = location(error)
        raise DecodeError(_reason(error), offset=offset if offset is not None else stream.tell(),
                          tag=spec.tag, message=spec.name, field=field, proto_version=proto_version) from None
    end = stream.tell()
    if end != len(data):
        extra = len(data) - end
        raise DecodeError(f"{extra} trailing byte{'s' if extra != 1 else ''} after the end of the message"
                          + _absent_fields_hint(spec, proto_version),
                          offset=end, tag=spec.tag, message=spec.name, proto_version=proto_version)
    return cls._from_wire(raw)


def build_with(message: WireMessage, *, proto_version: int | None, in_stream: bool,
               encoding: str = UTF8) -> bytes:
    """Build ``message`` with its own declaration, its Strings in the codec ``encoding``."""
    spec = message.spec
    values = message.to_wire()
    try:
        built: bytes = spec.declaration.build(values, proto_version=proto_version, in_stream=in_stream,
                                              encoding=encoding)
        return built
    except ConstructError as error:
        _, field = location(error)
        raise EncodeError(_reason(error), message=spec.name, field=field) from None


def as_bytes(data: Any) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected bytes, bytearray or memoryview, got {type(data).__name__}")


def logical_class(data: bytes, proto_version: int) -> type[WireMessage]:
    """The message class the tag byte of ``data`` names."""
    if not data:
        raise DecodeError("empty message: no tag byte", offset=0, proto_version=proto_version)
    tag = chr(data[0])
    cls = LOGICAL_CLASSES.get(tag)
    if cls is None:
        raise DecodeError(f"unknown message tag {tag!r}", offset=0, tag=tag, proto_version=proto_version)
    return cls


def parse(data: Any, *, proto_version: int, in_stream: bool = False, encoding: str = UTF8) -> WireMessage:
    """Parse exactly one pgoutput message (reference path)."""
    codec = check_context(proto_version, in_stream, encoding)
    data = as_bytes(data)
    return parse_with(logical_class(data, proto_version), data, proto_version=proto_version, in_stream=in_stream,
                      encoding=codec)


def build(message: Any, *, proto_version: int, in_stream: bool = False, encoding: str = UTF8) -> bytes:
    """Build one pgoutput message (reference path)."""
    codec = check_context(proto_version, in_stream, encoding)
    if not isinstance(message, WireMessage) or message.spec.layer != "logical":
        raise EncodeError(f"expected a pgoutput message object, got {type(message).__name__}")
    return build_with(message, proto_version=proto_version, in_stream=in_stream, encoding=codec)


def _check_sender(sender: Any) -> dict[str, type[WireMessage]]:
    classes = ENVELOPE_CLASSES.get(sender) if isinstance(sender, str) else None
    if classes is None:
        raise ValueError(f"sender must be 'server' or 'client', got {sender!r}")
    return classes


def envelope_class(data: bytes, sender: str) -> type[WireMessage]:
    """The envelope message class the tag byte of ``data`` names, for messages sent by ``sender``."""
    classes = _check_sender(sender)
    if not data:
        raise DecodeError("empty message: no tag byte", offset=0)
    tag = chr(data[0])
    cls = classes.get(tag)
    if cls is None:
        known = ", ".join(repr(t) for t in classes)
        raise DecodeError(f"unknown {sender} message tag {tag!r} (expected {known})", offset=0, tag=tag)
    return cls


def parse_envelope(data: Any, *, sender: str = "server") -> WireMessage:
    """Parse one CopyData payload of a replication connection (reference path)."""
    data = as_bytes(data)
    return parse_with(envelope_class(data, sender), data, proto_version=None, in_stream=False)


def build_envelope(message: Any) -> bytes:
    """Build one CopyData payload of a replication connection (reference path)."""
    if not isinstance(message, WireMessage) or message.spec.layer != "envelope":
        raise EncodeError(f"expected an envelope message object, got {type(message).__name__}")
    return build_with(message, proto_version=None, in_stream=False)
