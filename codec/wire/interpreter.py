"""Parse and build by interpreting the walker's layout model: the fast codec's exact, slow path.

The generated fast codec (:mod:`replwire.codec.wire.fast`) decides quickly whether a message is valid; when it
is not sure -- bad input, a caller's unusual value -- it hands the message to this module, which parses or
builds it node by node and says exactly where and what went wrong: the same :class:`DecodeError` /
:class:`EncodeError` class, byte offset, field path and reason as the construct reference path.

Strategy: one small function per node class of :mod:`replwire.codec.walker`, mirroring what the construct
classes of :mod:`replwire.schema.constructs` do, in the same order.  A failure is the reference's
:class:`~replwire.schema.wire_error.WireError` carrying the reason; every field and array element it passes on
the way out adds its name or index (and the innermost byte offset) with
:func:`~replwire.schema.wire_error.annotate`, exactly as the construct classes do.  Values go through the
message classes' own conversions (``_from_wire`` when parsing, ``to_wire`` when building), so the objects
and the value checks are the reference's.  Nothing here is written per message.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

from ...schema.encodings import UTF8, decode_string, encode_string
from ...schema.message_spec import MessageSpec
from ...schema.wire_error import WireError, annotate, location
from .. import walker
from ..errors import DecodeError, EncodeError
from ..messages import WireMessage
from ..walker import (
    ArrayOf,
    CharOf,
    CountedArray,
    DerivedCount,
    IfBytesRemain,
    Int,
    LengthPrefixed,
    MarkedBy,
    Record,
    Rest,
    TagByte,
    Text,
    When,
    Zero,
)
from . import reference

__all__ = ["build", "parse"]

#: Message classes by declaration.
CLASSES: dict[int, type[WireMessage]] = {id(cls.spec): cls for cls in WireMessage.__subclasses__()}

#: What construct puts in front of the text of its own (non-replwire) build errors.
CONSTRUCT_PREFIX = "Error in path (building)\n"


@cache
def layout_of(spec: MessageSpec) -> walker.Layout:
    return walker.layout(spec)


def truncated(needed: int, available: int) -> str:
    return f"truncated: needed {needed} byte{'s' if needed != 1 else ''}, {available} available"


def accepts_none(n: walker.Node) -> bool:
    """Whether ``None`` builds as "absent" (see :func:`replwire.schema.constructs.accepts_none`)."""
    return isinstance(n, IfBytesRemain) or (isinstance(n, MarkedBy) and n.optional)


# ---------------------------------------------------------------------------------------------------------
# parsing


class _Reader:
    def __init__(self, data: bytes, spec: MessageSpec, params: dict[str, Any]) -> None:
        self.data = data
        self.pos = 0
        self.spec = spec
        self.params = params

    def take(self, size: int) -> bytes:
        available = len(self.data) - self.pos
        if size > available:
            raise WireError(truncated(size, available))
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def node(self, n: walker.Node, fields: dict[str, Any]) -> Any:
        if isinstance(n, Int):
            return int.from_bytes(self.take(n.size), "big", signed=n.signed)
        if isinstance(n, DerivedCount):
            return self.node(n.int, fields)
        if isinstance(n, Zero):
            value = self.node(n.int, fields)
            if value != 0:
                raise WireError(f"must be 0, got {value}")
            return value
        if isinstance(n, TagByte):
            got = self.take(1)
            if got != n.tag.encode("ascii"):
                raise WireError(f"expected tag {n.tag!r}, got {got.decode('latin-1')!r}")
            proto = self.params.get("proto_version")
            if n.min_proto is not None and proto is not None and proto < n.min_proto:
                raise WireError(f"{self.spec.name} exists from protocol version {n.min_proto} on, "
                              f"not in protocol version {proto}")
            return n.tag
        if isinstance(n, Text):
            rest = self.data[self.pos:]
            end = rest.find(b"\0")
            if end < 0:
                self.pos = len(self.data)
                raise WireError(f"no NUL terminator in the {len(rest)} bytes left")
            self.pos += end + 1
            return decode_string(rest[:end], self.params["encoding"])
        if isinstance(n, CharOf):
            value = self.take(1).decode("latin-1")
            if value not in n.choices:
                allowed = ", ".join(repr(c) for c in n.choices)
                raise WireError(f"unknown {n.what} {value!r} (expected one of {allowed})")
            return value
        if isinstance(n, LengthPrefixed):
            return self.take(self.node(n.length, fields))
        if isinstance(n, Rest):
            rest = self.data[self.pos:]
            self.pos = len(self.data)
            return rest
        if isinstance(n, When):
            return self.node(n.node, fields) if walker.evaluate(n.condition, self.params, fields) else None
        if isinstance(n, IfBytesRemain):
            return None if self.pos >= len(self.data) else self.node(n.node, fields)
        if isinstance(n, MarkedBy):
            return self.marked(n, fields)
        if isinstance(n, CountedArray):
            return self.items(n.item, self.node(n.count, fields))
        if isinstance(n, ArrayOf):
            return self.items(n.item, fields[n.count_field])
        if isinstance(n, Record):
            return self.record(n)
        raise walker.UnknownConstruct(f"the interpreter does not know {n!r}")

    def marked(self, n: MarkedBy, fields: dict[str, Any]) -> Any:
        start = self.pos
        got = self.data[start:start + 1]
        self.pos += len(got)
        if got == n.marker.encode("ascii"):
            return self.node(n.node, fields)
        if n.optional:
            self.pos = start
            return None
        if not got:
            raise WireError(f"truncated: needed 1 byte for the marker {n.expect}, 0 available")
        raise WireError(f"bad marker {got.decode('latin-1')!r}: expected {n.expect}")

    def items(self, item: walker.Node, count: int) -> list[Any]:
        values = []
        for index in range(count):
            start = self.pos
            try:
                values.append(self.node(item, {}))
            except WireError as failure:
                annotate(failure, index=index, offset=start)
                raise
        return values

    def record(self, record: Record) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for f in record.fields:
            start = self.pos
            try:
                fields[f.name] = self.node(f.node, fields)
            except WireError as failure:
                annotate(failure, name=f.name, offset=start)
                raise
        return fields


def parse(spec: MessageSpec, data: bytes, proto_version: int | None, in_stream: bool,
          encoding: str = UTF8) -> WireMessage:
    """Parse ``data`` as exactly one ``spec`` message, its Strings in the codec ``encoding``, or raise the
    reference path's :class:`DecodeError`."""
    reader = _Reader(data, spec, {"proto_version": proto_version, "in_stream": in_stream, "encoding": encoding})
    try:
        raw = reader.record(layout_of(spec).record)
    except WireError as failure:
        offset, field = location(failure)
        raise DecodeError(failure.reason, offset=offset if offset is not None else reader.pos,
                          tag=spec.tag, message=spec.name, field=field, proto_version=proto_version) from None
    if reader.pos != len(data):
        extra = len(data) - reader.pos
        raise DecodeError(f"{extra} trailing byte{'s' if extra != 1 else ''} after the end of the message"
                          + reference._absent_fields_hint(spec, proto_version),
                          offset=reader.pos, tag=spec.tag, message=spec.name, proto_version=proto_version)
    return CLASSES[id(spec)]._from_wire(raw)


# ---------------------------------------------------------------------------------------------------------
# building


class _Writer:
    def __init__(self, spec: MessageSpec, params: dict[str, Any]) -> None:
        self.out = bytearray()
        self.spec = spec
        self.params = params

    def integer(self, n: Int, value: Any) -> Any:
        fmt = ">" + n.format
        try:
            self.out += struct.pack(fmt, value)
        except Exception:
            raise WireError(f"{CONSTRUCT_PREFIX}struct {fmt!r} error during building, given value {value!r}") \
                from None
        return value

    def raw(self, value: Any) -> bytes:
        """What construct's ``GreedyBytes`` accepts: bytes (a bytearray is copied)."""
        data = bytes(value) if type(value) is bytearray else value
        if not hasattr(data, "__len__"):
            raise WireError(f"expected bytes, got {type(value).__name__}")
        if not isinstance(data, bytes):
            raise WireError(f"{CONSTRUCT_PREFIX}given non-bytes value, perhaps unicode? {data!r}")
        return data

    def node(self, n: walker.Node, value: Any, context: dict[str, Any]) -> Any:
        if isinstance(n, Int):
            return self.integer(n, value)
        if isinstance(n, Zero):  # None: an omitted field
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise WireError(f"must be the int 0, got {value!r} ({type(value).__name__})")
                if value != 0:
                    raise WireError(f"must be 0, got {value!r}")
            return self.integer(n.int, 0)
        if isinstance(n, TagByte):
            proto = self.params.get("proto_version")
            if n.min_proto is not None and proto is not None and proto < n.min_proto:
                raise WireError(f"{self.spec.name} exists from protocol version {n.min_proto} on, "
                              f"not in protocol version {proto}")
            self.out += n.tag.encode("ascii")
            return n.tag
        if isinstance(n, Text):
            self.out += encode_string(value, self.params["encoding"]) + b"\0"
            return value
        if isinstance(n, CharOf):
            if not isinstance(value, str) or len(value) != 1:
                raise WireError(f"expected a one-character str, got {value!r}")
            if value not in n.choices:
                allowed = ", ".join(repr(c) for c in n.choices)
                raise WireError(f"unknown {n.what} {value!r} (expected one of {allowed})")
            self.out += value.encode("latin-1")
            return value
        if isinstance(n, LengthPrefixed):
            data = self.raw(value)
            self.integer(n.length, len(data))
            self.out += data
            return data
        if isinstance(n, Rest):
            data = self.raw(value)
            self.out += data
            return data
        if isinstance(n, When):
            present = walker.evaluate(n.condition, self.params, context)
            if present and value is None and not accepts_none(n.node):
                raise WireError(f"a value is required here (present because {n.text})")
            if not present and value is not None:
                raise WireError(f"must be None here: the field is absent unless {n.text}")
            return self.node(n.node, value, context) if present else None
        if isinstance(n, IfBytesRemain):
            return None if value is None else self.node(n.node, value, context)
        if isinstance(n, MarkedBy):
            if value is None:
                if n.optional:
                    return None
                raise WireError(f"a value is required here (marker {n.expect})")
            self.out += n.marker.encode("ascii")
            return self.node(n.node, value, context)
        if isinstance(n, CountedArray):
            if not isinstance(value, (list, tuple)):
                raise WireError(f"expected a list, got {type(value).__name__}")
            most = n.count.bounds[1]
            if len(value) > most:
                raise WireError(f"{len(value)} items do not fit the Int{8 * n.count.size} count (at most {most})")
            self.integer(n.count, len(value))
            return self.items(n.item, value, context)
        if isinstance(n, ArrayOf):
            items = self.items(n.item, value, context)
            if context[n.count_field] != len(items):
                raise WireError(f"{len(items)} items given but the count says {context[n.count_field]}")
            return items
        if isinstance(n, Record):
            self.record(n, value)
            return value
        raise walker.UnknownConstruct(f"the interpreter does not know {n!r}")

    def items(self, item: walker.Node, values: Any, context: dict[str, Any]) -> Any:
        if not isinstance(values, (list, tuple)):
            raise WireError(f"expected a list, got {type(values).__name__}")
        for index, value in enumerate(values):
            try:
                self.node(item, value, {})
            except WireError as failure:
                annotate(failure, index=index)
                raise
        return values

    def record(self, record: Record, values: dict[str, Any]) -> None:
        context = dict(values)
        for f in record.fields:
            n = f.node
            if isinstance(n, DerivedCount):
                counted = context.get(n.of)
                if not isinstance(counted, (list, tuple)):  # the count of a missing list: name the list
                    failure = WireError(f"expected a list, got {type(counted).__name__}")
                    annotate(failure, name=n.of)
                    raise failure
                value = len(counted)
                try:
                    context[f.name] = self.integer(n.int, value)
                except WireError as failure:
                    annotate(failure, name=f.name)
                    raise
                continue
            try:
                context[f.name] = self.node(n, values.get(f.name), context)
            except WireError as failure:
                annotate(failure, name=f.name)
                raise


def build(message: WireMessage, proto_version: int | None, in_stream: bool, encoding: str = UTF8) -> bytes:
    """Build ``message``, its Strings in the codec ``encoding``, or raise the reference path's
    :class:`EncodeError`."""
    spec = message.spec
    values = message.to_wire()
    writer = _Writer(spec, {"proto_version": proto_version, "in_stream": in_stream, "encoding": encoding})
    try:
        writer.record(layout_of(spec).record, values)
    except WireError as failure:
        raise EncodeError(failure.reason, message=spec.name, field=location(failure)[1]) from None
    return bytes(writer.out)
