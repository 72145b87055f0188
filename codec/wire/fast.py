"""The fast codec: parse and build with Python code generated from the declarations at import.

``parse``, ``build``, ``parse_envelope`` and ``build_envelope`` here have the signatures and the results of
:mod:`replwire.codec.wire.reference`'s -- the same message objects, the same bytes, the same errors -- and are
the ones :mod:`replwire.codec` exports.  The reference path stays importable as
``replwire.codec.wire.reference``.

Strategy: :func:`replwire.codec.wire.gen.generate.generate` writes one parse and one build function per message and
context, and the four entry points; they are compiled here once, into a private namespace.  The
per-message functions go in dispatch tables: per context, a list indexed by the tag byte for parsing and a
dict keyed by the message class for building.  The entry points carry the bodies of the commonest messages
inline and look the others up in the tables; what is not the common case they hand to the ``_*_other``
functions here, which check it as the reference does.  A generated
function that meets anything it cannot vouch for hands the input to :mod:`replwire.codec.wire.interpreter`
(counted in :data:`DECLINED`), which returns the exact result or raises the exact error.  The generated
source is registered with :mod:`linecache` under :data:`FILENAME`, so tracebacks and profiles show it.
"""

from __future__ import annotations

import inspect
import linecache
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import EncodeError
from ..messages import WireMessage
from ..scalars import LSN, Timestamp
from . import interpreter
from .gen import generate
from .reference import as_bytes, check_context, envelope_class, logical_class

__all__ = ["DECLINED", "FILENAME", "SOURCE", "build", "build_envelope", "parse", "parse_envelope"]

#: The name the generated source is compiled and registered under.
FILENAME = "<replwire.codec.wire.fast: generated>"

#: How often a generated function handed its input to the interpreter, by ("parse"|"build", message name).
DECLINED: Counter[tuple[str, str]] = Counter()


class _Decline(Exception):
    """Raised by generated code when it cannot vouch for its input."""


def _parse_slow(spec: Any, data: bytes, proto_version: int | None, in_stream: bool) -> WireMessage:
    DECLINED["parse", spec.name] += 1
    return interpreter.parse(spec, data, proto_version, in_stream)


def _build_slow(message: WireMessage, proto_version: int | None, in_stream: bool) -> bytes:
    DECLINED["build", message.spec.name] += 1
    return interpreter.build(message, proto_version, in_stream)


def runtime_globals() -> dict[str, Any]:
    """What generated code refers to besides the constants of its :class:`generate.Namespace`."""
    return dict(
        _Decline=_Decline,
        # what the generated code lets propagate to mean "not sure": a failed check, a short buffer
        # (struct.error, IndexError), a missing NUL or bad UTF-8 (ValueError)
        _DECLINE=(_Decline, struct.error, IndexError, ValueError),
        # building: a failed guard, an out-of-range integer, a string that is not UTF-8, a missing attribute
        _DECLINE_BUILD=(_Decline, struct.error, UnicodeEncodeError, AttributeError),
        _parse_slow=_parse_slow, _build_slow=_build_slow,
        _new=object.__new__, _inew=int.__new__,
        _unpack_from=struct.unpack_from, _pack=struct.pack,
        _INTS=frozenset((int, LSN, Timestamp)), _ZERO=0,
    )


def _compile() -> tuple[str, dict[str, Any], generate.Generated]:
    generated = generate.generate()
    namespace: dict[str, Any] = dict(generated.namespace.values)
    namespace.update(runtime_globals())
    source = generated.source
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    exec(compile(source, FILENAME, "exec"), namespace)  # noqa: S102 - our own generated code
    return source, namespace, generated


SOURCE, _NAMESPACE, _GENERATED = _compile()


def _parse_table(key: tuple) -> list[Any]:
    table: list[Any] = [None] * 256
    for tag, name in _GENERATED.parsers[key].items():
        table[ord(tag)] = _NAMESPACE[name]
    return table


def _build_table(key: tuple) -> dict[type, Any]:
    return {cls: _NAMESPACE[name] for cls, name in _GENERATED.builders[key].items()}


#: Parse tables by in_stream, then proto_version.
_PARSE: dict[bool, dict[int, list[Any]]] = {}
_BUILD: dict[bool, dict[int, dict[type, Any]]] = {}
for _version, _in_stream in generate.LOGICAL_CONTEXTS:
    _PARSE.setdefault(_in_stream, {})[_version] = _parse_table(("logical", None, (_version, _in_stream)))
    _BUILD.setdefault(_in_stream, {})[_version] = _build_table(("logical", (_version, _in_stream)))
_PARSE_ENVELOPE = {sender: _parse_table(("envelope", sender, generate.ENVELOPE_CONTEXT))
                   for sender in ("server", "client")}
_BUILD_ENVELOPE = _build_table(("envelope", generate.ENVELOPE_CONTEXT))
_PARSE_OUT, _PARSE_IN = _PARSE[False], _PARSE[True]
_BUILD_OUT, _BUILD_IN = _BUILD[False], _BUILD[True]


def _context(tables: dict[bool, dict[int, Any]], proto_version: Any, in_stream: Any) -> Any:
    """The table of a context, checked as the reference checks it (``ValueError``)."""
    check_context(proto_version, in_stream)
    return tables[in_stream][int(proto_version)]


# What the generated entry points hand on when the input is not the common case (or its tag or class is
# not in the tables): the reference's checks and errors, in the reference's order.

def _parse_other(data: Any, proto_version: Any, in_stream: Any) -> WireMessage:
    table = _context(_PARSE, proto_version, in_stream)
    if data.__class__ is not bytes:
        data = as_bytes(data)
    function = table[data[0]] if data else None
    if function is None:
        logical_class(data, proto_version)  # raises the empty-input or unknown-tag DecodeError
    return function(data, proto_version, in_stream)


def _build_other(message: Any, proto_version: Any, in_stream: Any) -> bytes:
    function = _context(_BUILD, proto_version, in_stream).get(message.__class__)
    if function is None:
        if not isinstance(message, WireMessage) or message.spec.layer != "logical":
            raise EncodeError(f"expected a pgoutput message object, got {type(message).__name__}")
        return _build_slow(message, proto_version, in_stream)  # a subclass of a message class
    return function(message, proto_version, in_stream)


def _parse_envelope_other(data: Any, sender: Any) -> WireMessage:
    if data.__class__ is not bytes:
        data = as_bytes(data)
    try:
        function = _PARSE_ENVELOPE[sender][data[0]]
    except (KeyError, IndexError, TypeError):
        function = None
    if function is None or sender.__class__ is not str:
        cls = envelope_class(data, sender)  # the bad-sender ValueError, the empty-input or unknown-tag DecodeError
        function = _PARSE_ENVELOPE[sender][ord(cls.tag)]  # (a str subclass for sender)
    return function(data, None, False)


def _build_envelope_other(message: Any) -> bytes:
    if not isinstance(message, WireMessage) or message.spec.layer != "envelope":
        raise EncodeError(f"expected an envelope message object, got {type(message).__name__}")
    return _build_slow(message, None, False)


_NAMESPACE.update(_PARSE_OUT=_PARSE_OUT, _PARSE_IN=_PARSE_IN, _BUILD_OUT=_BUILD_OUT, _BUILD_IN=_BUILD_IN,
                  _PARSE_ENVELOPE=_PARSE_ENVELOPE, _BUILD_ENVELOPE=_BUILD_ENVELOPE, _parse_other=_parse_other,
                  _build_other=_build_other, _parse_envelope_other=_parse_envelope_other,
                  _build_envelope_other=_build_envelope_other)

_F = TypeVar("_F", bound=Callable[..., Any])


def _parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _generated(model: _F) -> _F:
    """The generated entry point of ``model``'s name, with ``model``'s docstring and annotations: ``model``
    is the documentation and the type of the public function, the generated code its body (the common
    case inline, see :mod:`replwire.codec.wire.gen.entry`)."""
    function = _NAMESPACE[model.__name__]
    if _parameters(function) != _parameters(model):
        raise TypeError(f"the generated {model.__name__} does not have the parameters of the documented one")
    function.__doc__ = model.__doc__
    function.__module__ = model.__module__
    function.__annotations__ = model.__annotations__
    return function  # type: ignore[no-any-return]


@_generated
def parse(data: Any, *, proto_version: int, in_stream: bool = False) -> WireMessage:
    """Parse exactly one pgoutput message (``data``: bytes, bytearray or memoryview).

    ``proto_version`` is the protocol version negotiated with ``START_REPLICATION`` (1-4); ``in_stream``
    whether the message is inside a Stream Start...Stop block.  Raises :class:`DecodeError` for bytes
    that are not exactly one valid message.
    """
    raise NotImplementedError  # generated


@_generated
def build(message: Any, *, proto_version: int, in_stream: bool = False) -> bytes:
    """Build one pgoutput message; raises :class:`EncodeError` for a message that cannot be built."""
    raise NotImplementedError  # generated


@_generated
def parse_envelope(data: Any, *, sender: str = "server") -> WireMessage:
    """Parse one CopyData payload of a replication connection, sent by ``sender`` (server or client)."""
    raise NotImplementedError  # generated


@_generated
def build_envelope(message: Any) -> bytes:
    """Build one CopyData payload of a replication connection."""
    raise NotImplementedError  # generated
