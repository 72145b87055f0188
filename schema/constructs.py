"""The wire idioms construct has no exact word for, as small construct classes, each strict in both directions.

Strategy: a message is an ordinary construct ``Struct`` of :class:`~replwire.schema.fields.Field` members;
the few idioms below fill the gaps:

* :class:`Tag` -- the leading type byte, which also knows the lowest protocol version the message exists in;
* :class:`When` -- an ``If`` whose build refuses a value for a field that is absent (construct's ``If``
  silently drops it) and refuses ``None`` for a field that is present;
* :class:`Tail` -- a field present exactly when bytes remain (the Stream Abort abort LSN/time);
* :class:`Marked` -- a sub-record introduced by a marker byte (``K``/``O``/``N`` before tuple data);
* :class:`Counted` and :class:`Items` -- arrays whose errors name the failing index;
* :class:`PgString`, :class:`Char`, :class:`MustBeZero`;
* :class:`Magic` and :class:`Crc32`, for the capture file.

Failures are :class:`~replwire.schema.wire_error.WireError` with a plain-words ``reason``; the arrays
annotate them with the failing index (:func:`~replwire.schema.wire_error.annotate`).  This module imports
construct only.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, BinaryIO

from construct import Const, Construct, ConstructError, Container, IfThenElse, Pass, SizeofError, Subconstruct
from construct.core import evaluate, stream_read, stream_tell, stream_write
from construct.expr import BinExpr, ExprMixin, UniExpr, opnames

from .encodings import UTF8, decode_string, encode_string
from .wire_error import WireError, annotate

__all__ = ["Char", "Counted", "Crc32", "Items", "Magic", "Marked", "MustBeZero", "PgString", "Tag", "Tail", "When",
           "accepts_none", "count_limit", "render_condition"]


class Tag(Construct):
    """The leading type byte of a message.

    Parsing checks the byte; both directions check that the message exists in the protocol version in
    the context (``this._params.proto_version``) when ``min_proto`` is given.
    """

    def __init__(self, tag: bytes, message: str, min_proto: int | None = None) -> None:
        super().__init__()
        if len(tag) != 1:
            raise ValueError("a tag is one byte")
        self.tag = tag
        self.message = message
        self.min_proto = min_proto

    def _check_version(self, context: Container, path: str) -> None:
        if self.min_proto is None:
            return
        proto = context._params.get("proto_version")
        if proto is not None and proto < self.min_proto:
            raise WireError(f"{self.message} exists from protocol version {self.min_proto} on, "
                            f"not in protocol version {proto}", path=path)

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> str:
        got = stream_read(stream, 1, path)
        if got != self.tag:
            raise WireError(f"expected tag {self.tag.decode('latin-1')!r}, got {got.decode('latin-1')!r}",
                            path=path)
        self._check_version(context, path)
        return self.tag.decode("ascii")

    def _build(self, obj: object, stream: BinaryIO, context: Container, path: str) -> str:
        self._check_version(context, path)
        stream_write(stream, self.tag, 1, path)
        return self.tag.decode("ascii")

    def _sizeof(self, context: Container, path: str) -> int:
        return 1


class When(IfThenElse):
    """A field on the wire exactly when ``condfunc`` (a ``this`` expression) holds.

    Parsing gives ``None`` for an absent field.  Building refuses a value for an absent field and
    refuses ``None`` for a present one, instead of silently dropping or failing obscurely.
    """

    def __init__(self, condfunc: Any, subcon: Construct) -> None:
        super().__init__(condfunc, subcon, Pass)

    @property
    def subcon(self) -> Construct:
        return self.thensubcon

    def _build(self, obj: Any, stream: BinaryIO, context: Container, path: str) -> Any:
        present = bool(evaluate(self.condfunc, context))
        if present and obj is None and not accepts_none(self.thensubcon):
            raise WireError(f"a value is required here (present because {render_condition(self.condfunc)})",
                            path=path)
        if not present and obj is not None:
            raise WireError(f"must be None here: the field is absent unless {render_condition(self.condfunc)}",
                            path=path)
        if present:
            return self.thensubcon._build(obj, stream, context, path)
        return None


def render_condition(cond: Any, top: bool = True) -> str:
    """A ``this`` expression as short text: ``this._params.in_stream`` reads ``in_stream``, and a literal
    reads as Python writes it, so ``(this.kind == "t")`` reads ``kind == 't'``.

    The expression tree is walked (construct's own ``str`` prints string literals bare, which makes
    ``kind == t`` look like a comparison of two fields); only the paths are shortened.
    """
    if isinstance(cond, BinExpr):
        text = f"({render_condition(cond.lhs, False)} {opnames[cond.op]} {render_condition(cond.rhs, False)})"
    elif isinstance(cond, UniExpr):
        text = f"({opnames[cond.op]} {render_condition(cond.operand, False)})"
    elif isinstance(cond, ExprMixin):  # a path: this['_params']['in_stream'], this['kind']
        text = re.sub(r"this\['_params'\]\['(\w+)'\]", r"\1", str(cond))
        return re.sub(r"this\['(\w+)'\]", r"\1", text)
    else:
        return repr(cond)
    return text[1:-1] if top else text


def accepts_none(subcon: Construct) -> bool:
    """Whether a construct builds ``None`` as "absent" (an optional :class:`Marked`, a :class:`Tail`)."""
    return isinstance(subcon, Tail) or (isinstance(subcon, Marked) and subcon.optional)


def _at_end(stream: BinaryIO, path: str) -> bool:
    position = stream_tell(stream, path)
    more = stream.read(1)
    stream.seek(position)
    return not more


class Tail(Subconstruct):
    """A field that is present exactly when bytes remain after the fields before it.

    Used where the length of the whole message is the only thing that tells two forms apart.  Parsing
    gives ``None`` at the end of the input and parses (strictly) otherwise; building emits nothing for
    ``None``.
    """

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> Any:
        if _at_end(stream, path):
            return None
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: BinaryIO, context: Container, path: str) -> Any:
        if obj is None:
            return None
        return self.subcon._build(obj, stream, context, path)

    def _sizeof(self, context: Container, path: str) -> int:
        raise SizeofError("a tail has no fixed size", path=path)


class Marked(Subconstruct):
    """A sub-record introduced by a one-byte marker (``K``, ``O`` or ``N`` before tuple data).

    Optional: present exactly when the next byte is the marker, ``None`` otherwise.  Required: the marker
    must be there (``expect`` names what was expected, for the error).
    """

    def __init__(self, marker: bytes, subcon: Construct, *, optional: bool = False,
                 expect: str | None = None) -> None:
        super().__init__(subcon)
        self.marker = marker
        self.optional = optional
        self.expect = expect or repr(marker.decode("ascii"))

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> Any:
        position = stream_tell(stream, path)
        got = stream.read(1)
        if got == self.marker:
            return self.subcon._parsereport(stream, context, path)
        if self.optional:
            stream.seek(position)
            return None
        if not got:
            raise WireError(f"truncated: needed 1 byte for the marker {self.expect}, 0 available", path=path)
        raise WireError(f"bad marker {got.decode('latin-1')!r}: expected {self.expect}", path=path)

    def _build(self, obj: Any, stream: BinaryIO, context: Container, path: str) -> Any:
        if obj is None:
            if self.optional:
                return None
            raise WireError(f"a value is required here (marker {self.expect})", path=path)
        stream_write(stream, self.marker, 1, path)
        return self.subcon._build(obj, stream, context, path)

    def _sizeof(self, context: Container, path: str) -> int:
        raise SizeofError("a marked record has no fixed size", path=path)


def _parse_items(subcon: Construct, count: int, stream: BinaryIO, context: Container, path: str) -> list[Any]:
    items = []
    trace = context._params.get("_trace")
    for index in range(count):
        context._index = index
        start = stream_tell(stream, path)
        if trace is not None:
            trace.stack.append(f"[{index}]")
        try:
            items.append(subcon._parsereport(stream, context, path))
            if trace is not None:
                trace.record(start, stream_tell(stream, path), items[-1], None)
        except ConstructError as error:
            annotate(error, index=index, offset=start)
            raise
        finally:
            if trace is not None:
                trace.stack.pop()
    return items


def _build_items(subcon: Construct, obj: object, stream: BinaryIO, context: Container,
                 path: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(obj, (list, tuple)):
        raise WireError(f"expected a list, got {type(obj).__name__}", path=path)
    for index, item in enumerate(obj):
        context._index = index
        try:
            subcon._build(item, stream, context, path)
        except ConstructError as error:
            annotate(error, index=index)
            raise
    return obj


class Items(Subconstruct):
    """An array whose element count comes from an earlier field (``count`` is a ``this`` expression)."""

    def __init__(self, count: Any, subcon: Construct) -> None:
        super().__init__(subcon)
        self.count = count

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> list[Any]:
        return _parse_items(self.subcon, evaluate(self.count, context), stream, context, path)

    def _build(self, obj: object, stream: BinaryIO, context: Container, path: str) -> list[Any] | tuple[Any, ...]:
        items = _build_items(self.subcon, obj, stream, context, path)
        count = evaluate(self.count, context)
        if count != len(items):
            raise WireError(f"{len(items)} items given but the count says {count}", path=path)
        return items

    def _sizeof(self, context: Container, path: str) -> int:
        raise SizeofError("an array has no fixed size", path=path)


def count_limit(countfield: Construct) -> tuple[str, int]:
    """The docs' label of an integer count field (``Int16``) and the most items it can count."""
    bits = 8 * countfield.sizeof()
    signed = countfield.fmtstr[-1].islower()
    return f"Int{bits}", 2 ** (bits - 1) - 1 if signed else 2**bits - 1


class Counted(Subconstruct):
    """An array directly preceded by its element count (``countfield``, derived when building)."""

    def __init__(self, countfield: Construct, subcon: Construct) -> None:
        super().__init__(subcon)
        self.countfield = countfield

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> list[Any]:
        count = self.countfield._parsereport(stream, context, path)
        return _parse_items(self.subcon, count, stream, context, path)

    def _build(self, obj: object, stream: BinaryIO, context: Container, path: str) -> list[Any] | tuple[Any, ...]:
        if not isinstance(obj, (list, tuple)):
            raise WireError(f"expected a list, got {type(obj).__name__}", path=path)
        label, most = count_limit(self.countfield)
        if len(obj) > most:
            raise WireError(f"{len(obj)} items do not fit the {label} count (at most {most})", path=path)
        self.countfield._build(len(obj), stream, context, path)
        return _build_items(self.subcon, obj, stream, context, path)

    def _sizeof(self, context: Container, path: str) -> int:
        raise SizeofError("an array has no fixed size", path=path)


class PgString(Construct):
    """PostgreSQL's ``String``: text in the connection's client encoding, ending in a NUL byte.

    The encoding is the parse/build parameter ``encoding`` (a Python codec name from :func:`text_codec`;
    UTF-8 when absent).  Bytes the encoding cannot decode are an error, except in ``SQL_ASCII``, where
    every byte string decodes (see :data:`SQL_ASCII`).
    """

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> str:
        start = stream_tell(stream, path)
        rest = stream.read()
        end = rest.find(b"\0")
        if end < 0:
            stream.seek(start + len(rest))
            raise WireError(f"no NUL terminator in the {len(rest)} bytes left", path=path)
        stream.seek(start + end + 1)
        return decode_string(rest[:end], context._params.get("encoding", UTF8))

    def _build(self, obj: object, stream: BinaryIO, context: Container, path: str) -> object:
        raw = encode_string(obj, context._params.get("encoding", UTF8))
        stream_write(stream, raw + b"\0", len(raw) + 1, path)
        return obj

    def _sizeof(self, context: Container, path: str) -> int:
        raise SizeofError("a String has no fixed size", path=path)


class Char(Construct):
    """One byte read as a one-character ``str``, limited to ``choices`` (``what`` names it in errors)."""

    def __init__(self, choices: str, what: str) -> None:
        super().__init__()
        self.choices = choices
        self.what = what

    def _check(self, value: str, path: str) -> None:
        if value not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            raise WireError(f"unknown {self.what} {value!r} (expected one of {allowed})", path=path)

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> str:
        value: str = stream_read(stream, 1, path).decode("latin-1")
        self._check(value, path)
        return value

    def _build(self, obj: object, stream: BinaryIO, context: Container, path: str) -> str:
        if not isinstance(obj, str) or len(obj) != 1:
            raise WireError(f"expected a one-character str, got {obj!r}", path=path)
        self._check(obj, path)
        stream_write(stream, obj.encode("latin-1"), 1, path)
        return obj

    def _sizeof(self, context: Container, path: str) -> int:
        return 1


class MustBeZero(Const):
    """An integer that PostgreSQL always sends as 0 and whose reader rejects anything else."""

    def __init__(self, subcon: Construct) -> None:
        super().__init__(0, subcon)

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> int:
        value: int = self.subcon._parsereport(stream, context, path)
        if value != 0:
            raise WireError(f"must be 0, got {value}", path=path)
        return value

    def _build(self, obj: object, stream: BinaryIO, context: Container, path: str) -> int:
        # None is what Struct passes for an omitted field (a Const builds from nothing): it builds as 0.
        # Otherwise only an int will do: 0.0 and False equal 0 but are not the wire's integer.
        if obj is not None:
            if isinstance(obj, bool) or not isinstance(obj, int):
                raise WireError(f"must be the int 0, got {obj!r} ({type(obj).__name__})", path=path)
            if obj != 0:
                raise WireError(f"must be 0, got {obj!r}", path=path)
        self.subcon._build(0, stream, context, path)
        return 0


class Magic(Construct):
    """Fixed bytes that identify a file format."""

    def __init__(self, value: bytes) -> None:
        super().__init__()
        self.value = value

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> bytes:
        got: bytes = stream_read(stream, len(self.value), path)
        if got != self.value:
            raise WireError(f"not a replwire file: expected {self.value!r}, got {got!r}", path=path)
        return got

    def _build(self, obj: object, stream: BinaryIO, context: Container, path: str) -> bytes:
        stream_write(stream, self.value, len(self.value), path)
        return self.value

    def _sizeof(self, context: Container, path: str) -> int:
        return len(self.value)


class Crc32(Subconstruct):
    """A record followed by the CRC-32 (zlib's, big-endian Int32) of its bytes; a mismatch is an error."""

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> Any:
        start = stream_tell(stream, path)
        value = self.subcon._parsereport(stream, context, path)
        end = stream_tell(stream, path)
        stream.seek(start)
        raw = stream_read(stream, end - start, path)
        expected = int.from_bytes(stream_read(stream, 4, path), "big")
        actual = zlib.crc32(raw)
        if actual != expected:
            raise WireError(f"checksum mismatch: stored {expected:08x}, computed {actual:08x}", path=path)
        return value

    def _build(self, obj: Any, stream: BinaryIO, context: Container, path: str) -> Any:
        start = stream_tell(stream, path)
        value = self.subcon._build(obj, stream, context, path)
        end = stream_tell(stream, path)
        stream.seek(start)
        raw = stream_read(stream, end - start, path)
        stream_write(stream, zlib.crc32(raw).to_bytes(4, "big"), 4, path)
        return value

    def _sizeof(self, context: Container, path: str) -> int:
        size: int = self.subcon._sizeof(context, path)
        return size + 4
