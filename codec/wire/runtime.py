"""What the generated fast codec calls besides its own functions: declining, the slow path, unusual input.

Strategy: the generated module (:mod:`replwire.codec.wire._generated`, written by
:mod:`replwire.codec.wire.gen`) imports everything it refers to from here and from the message and scalar
modules, so it is an ordinary module.  A generated function that meets anything it cannot vouch for raises
:class:`Decline` (or lets one of :data:`DECLINE` / :data:`DECLINE_BUILD` propagate) and hands its input to
:mod:`replwire.codec.wire.interpreter` through :func:`parse_slow` / :func:`build_slow`, counted in
:data:`DECLINED`, which returns the exact result or raises the exact error.  What is not the common case
at all -- another kind of input, a context that cannot be, an encoding other than UTF-8 (resolved here to its
codec, then back to the generated functions), an unknown tag or class -- the generated entry points hand
to the ``*_other`` functions, with their dispatch tables, which check it as the reference
does and in the reference's order.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

from ...schema.encodings import UTF8
from ..errors import EncodeError
from ..messages import WireMessage
from ..scalars import LSN, Timestamp
from . import interpreter
from .reference import as_bytes, check_context, envelope_class, logical_class

__all__ = [
    "DECLINE", "DECLINED", "DECLINE_BUILD", "Decline", "INTS", "build_envelope_other", "build_other", "build_slow",
    "by_tag", "parse_envelope_other", "parse_other", "parse_slow",
]

#: How often a generated function handed its input to the interpreter, by ("parse"|"build", message name).
DECLINED: Counter[tuple[str, str]] = Counter()


class Decline(Exception):
    """Raised by generated code when it cannot vouch for its input."""


#: What generated parsing lets propagate to mean "not sure": a failed check, a short buffer
#: (struct.error, IndexError), a missing NUL or text the encoding cannot decode (ValueError).
DECLINE = (Decline, struct.error, IndexError, ValueError)
#: Building: a failed guard, an out-of-range integer, a string the encoding cannot encode, a missing attribute.
DECLINE_BUILD = (Decline, struct.error, UnicodeEncodeError, AttributeError)
#: The classes whose instances generated building packs as they are (anything else is checked first).
INTS = frozenset((int, LSN, Timestamp))


def parse_slow(spec: Any, data: bytes, proto_version: int | None, in_stream: bool, encoding: str) -> WireMessage:
    DECLINED["parse", spec.name] += 1
    return interpreter.parse(spec, data, proto_version, in_stream, encoding)


def build_slow(message: WireMessage, proto_version: int | None, in_stream: bool, encoding: str) -> bytes:
    DECLINED["build", message.spec.name] += 1
    return interpreter.build(message, proto_version, in_stream, encoding)


def by_tag(functions: dict[int, Callable[..., Any]]) -> list[Callable[..., Any] | None]:
    """A parse dispatch table: the function of each tag byte at its index, ``None`` elsewhere."""
    table: list[Callable[..., Any] | None] = [None] * 256
    for tag, function in functions.items():
        table[tag] = function
    return table


Tables = dict[bool, dict[int, Any]]  # by in_stream, then proto_version


def _context(tables: Tables, proto_version: Any, in_stream: Any, encoding: Any) -> tuple[Any, str]:
    """The table of a context and the codec of its encoding, checked as the reference checks them
    (``ValueError``)."""
    codec = check_context(proto_version, in_stream, encoding)
    return tables[in_stream][int(proto_version)], codec


def parse_other(tables: Tables, data: Any, proto_version: Any, in_stream: Any, encoding: Any) -> WireMessage:
    table, codec = _context(tables, proto_version, in_stream, encoding)
    if data.__class__ is not bytes:
        data = as_bytes(data)
    function: Callable[..., WireMessage] | None = table[data[0]] if data else None
    if function is None:
        logical_class(data, proto_version)  # raises the empty-input or unknown-tag DecodeError
        raise AssertionError("every known tag has a parser in every context")
    return function(data, proto_version, in_stream, codec)


def build_other(tables: Tables, message: Any, proto_version: Any, in_stream: Any, encoding: Any) -> bytes:
    table, codec = _context(tables, proto_version, in_stream, encoding)
    function: Callable[..., bytes] | None = table.get(message.__class__)
    if function is None:
        if not isinstance(message, WireMessage) or message.spec.layer != "logical":
            raise EncodeError(f"expected a pgoutput message object, got {type(message).__name__}")
        return build_slow(message, proto_version, in_stream, codec)  # a subclass of a message class
    return function(message, proto_version, in_stream, codec)


def parse_envelope_other(tables: dict[str, list[Any]], data: Any, sender: Any) -> WireMessage:
    if data.__class__ is not bytes:
        data = as_bytes(data)
    function: Callable[..., WireMessage] | None
    try:
        function = tables[sender][data[0]]
    except (KeyError, IndexError, TypeError):
        function = None
    if function is None or sender.__class__ is not str:
        cls = envelope_class(data, sender)  # the bad-sender ValueError, the empty-input or unknown-tag DecodeError
        function = tables[sender][ord(cls.tag)]  # (a str subclass for sender)
    return function(data, None, False, UTF8)


def build_envelope_other(message: Any) -> bytes:
    if not isinstance(message, WireMessage) or message.spec.layer != "envelope":
        raise EncodeError(f"expected an envelope message object, got {type(message).__name__}")
    return build_slow(message, None, False, UTF8)
