"""The building blocks every declaration in :mod:`replwire.schema` is made of.

Strategy: a message is an ordinary construct ``Struct``.  Each named member is a :class:`Field` -- a
``Renamed`` that also carries the metadata the docs, the strategies and the fast codec need
(:class:`FieldMeta`).  The few wire idioms construct has no exact word for are small construct classes
here, each strict in both directions:

* :class:`Tag` -- the leading type byte, which also knows the lowest protocol version the message exists in;
* :class:`When` -- an ``If`` whose build refuses a value for a field that is absent (construct's ``If``
  silently drops it) and refuses ``None`` for a field that is present;
* :class:`Tail` -- a field present exactly when bytes remain (the Stream Abort abort LSN/time);
* :class:`Marked` -- a sub-record introduced by a marker byte (``K``/``O``/``N`` before tuple data);
* :class:`Counted` and :class:`Items` -- arrays whose errors name the failing index;
* :class:`PgString`, :class:`Char`, :class:`MustBeZero`.

Failures raised by these classes are :class:`WireError` with a plain-words ``reason``; every
:class:`Field` and array on the way out records its name, index and byte offset on the exception
(:func:`annotate`, read back by :func:`location`) so that ``replwire.codec`` can say *where* and *what*.
The codec's own checks (the interpreter, the message classes' value checks) raise and annotate the same
way, so there is one kind of failure on its way out and one way to read where it happened.  This module
imports construct only.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypedDict

from construct import (
    Const,
    Construct,
    ConstructError,
    GreedyBytes,
    IfThenElse,
    Int8ub,
    Int16ub,
    Int32sb,
    Int32ub,
    Int64sb,
    Int64ub,
    Pass,
    Prefixed,
    Renamed,
    SizeofError,
    Struct,
    Subconstruct,
)
from construct.core import evaluate, stream_read, stream_tell, stream_write
from construct.expr import BinExpr, ExprMixin, UniExpr, opnames

DOCS_LOGICAL = "https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html"
DOCS_REPLICATION = "https://www.postgresql.org/docs/current/protocol-replication.html"


class WireError(ConstructError):
    """A check of a replwire declaration failed; ``reason`` says what, in plain words."""

    def __init__(self, reason: str, path: str | None = None) -> None:
        super().__init__(reason, path=path)
        self.reason = reason


def annotate(error: BaseException, *, name: str | None = None, index: int | None = None,
             offset: int | None = None) -> None:
    """Record one step of the error's location on the exception, innermost first.

    ``replwire_path`` is built from the inside out (the innermost field is recorded first and every
    enclosing field or array index is put in front of it); ``replwire_offset`` keeps the innermost offset.
    """
    path = getattr(error, "replwire_path", None)
    if path is None:
        path = []
        error.replwire_path = path  # type: ignore[attr-defined]
    if index is not None:
        path.insert(0, f"[{index}]")
    if name is not None:
        path.insert(0, name)
    if offset is not None and getattr(error, "replwire_offset", None) is None:
        error.replwire_offset = offset  # type: ignore[attr-defined]


def location(error: BaseException) -> tuple[int | None, str | None]:
    """What :func:`annotate` recorded on ``error``: the innermost byte offset (or ``None``) and the field
    path as errors print it (or ``None`` when the failure is not inside a field)."""
    return getattr(error, "replwire_offset", None), path_text(getattr(error, "replwire_path", None) or ()) or None


def path_text(parts: Iterable[str]) -> str:
    """A field path as text: names joined by dots, array indexes attached (``columns[1].type_id``)."""
    return ".".join(parts).replace(".[", "[")


class Trace:
    """Where each field was found, recorded while parsing when passed as the ``_trace`` parse parameter.

    ``spans`` holds ``(path, start, end, value, meta)`` tuples, innermost first; ``path`` is a tuple of
    field names and ``[index]`` parts.
    """

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.spans: list[tuple[tuple[str, ...], int, int, Any, FieldMeta | None]] = []

    def record(self, start: int, end: int, value: Any, meta: FieldMeta | None) -> None:
        self.spans.append((tuple(self.stack), start, end, value, meta))


# ---------------------------------------------------------------------------------------------------------
# metadata


@dataclass(frozen=True)
class FieldMeta:
    """What the documentation, the strategies and the code generators know about one field.

    ``doc`` is the meaning in our words; ``doc_ref`` the anchor on the PostgreSQL documentation page
    (``docs_url`` joins the two); ``since`` the protocol version the field first appears in; ``spec_type``
    the type label the PostgreSQL documentation uses; ``value`` the kind of Python value the codec gives
    (``lsn``, ``timestamp``, ``xid``, ``oid``, ``int``, ``text``, ``char``, ``bytes``, ``record``,
    ``items``, ``tag``, ``count``).
    """

    doc: str
    spec_type: str
    value: str
    since: int = 1
    doc_ref: str | None = None
    docs_page: str = DOCS_LOGICAL

    @property
    def docs_url(self) -> str:
        return f"{self.docs_page}#{self.doc_ref}" if self.doc_ref else self.docs_page


class Field(Renamed):
    """A named member of a declaration, with its :class:`FieldMeta`.

    Parsing and building are the wrapped construct's; on failure the field adds its name and the byte
    offset where it started to the exception (see :func:`annotate`).
    """

    def __init__(self, name: str, subcon: Construct, meta: FieldMeta) -> None:
        super().__init__(subcon, newname=name, newdocs=meta.doc)
        self.meta = meta

    def _parse(self, stream, context, path):
        start = stream_tell(stream, path)
        trace = context._params.get("_trace")
        if trace is not None:
            trace.stack.append(self.name)
        try:
            value = self.subcon._parsereport(stream, context, path)
            if trace is not None:
                trace.record(start, stream_tell(stream, path), value, self.meta)
            return value
        except ConstructError as error:
            annotate(error, name=self.name, offset=start)
            raise
        finally:
            if trace is not None:
                trace.stack.pop()

    def _build(self, obj, stream, context, path):
        start = stream_tell(stream, path)
        try:
            return self.subcon._build(obj, stream, context, path)
        except ConstructError as error:
            annotate(error, name=self.name, offset=start)
            raise


@dataclass(frozen=True)
class WireType:
    """A wire primitive together with the docs' label for it and the kind of value it carries."""

    construct: Construct
    spec_type: str
    value: str


def field(name: str, wire: WireType, doc: str, *, since: int = 1, when: Any = None,
          spec_type: str | None = None, wrap: Any = None) -> Field:
    """Declare one named field.

    ``when`` is a construct ``this`` expression: the field is on the wire exactly when it is true
    (:class:`When`).  ``wrap`` takes the primitive and returns the construct to use instead (for
    :class:`Tail` and :class:`Marked`).  The ``doc_ref`` anchor is filled in by :func:`record` or by the
    message declaration the field belongs to.
    """
    subcon = wire.construct
    if wrap is not None:
        subcon = wrap(subcon)
    if when is not None:
        subcon = When(when, subcon)
    meta = FieldMeta(doc=doc, spec_type=spec_type or wire.spec_type, value=wire.value, since=since)
    return Field(name, subcon, meta)


def record(*fields: Field, doc_ref: str, docs_page: str = DOCS_LOGICAL) -> Struct:
    """A ``Struct`` of fields that all point at the same place in the PostgreSQL documentation."""
    for f in fields:
        if f.meta.doc_ref is None:
            f.meta = dataclasses.replace(f.meta, doc_ref=doc_ref, docs_page=docs_page)
    return Struct(*fields)


# ---------------------------------------------------------------------------------------------------------
# strict construct classes


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

    def _check_version(self, context, path) -> None:
        if self.min_proto is None:
            return
        proto = context._params.get("proto_version")
        if proto is not None and proto < self.min_proto:
            raise WireError(f"{self.message} exists from protocol version {self.min_proto} on, "
                            f"not in protocol version {proto}", path=path)

    def _parse(self, stream, context, path):
        got = stream_read(stream, 1, path)
        if got != self.tag:
            raise WireError(f"expected tag {self.tag.decode('latin-1')!r}, got {got.decode('latin-1')!r}",
                            path=path)
        self._check_version(context, path)
        return self.tag.decode("ascii")

    def _build(self, obj, stream, context, path):
        self._check_version(context, path)
        stream_write(stream, self.tag, 1, path)
        return self.tag.decode("ascii")

    def _sizeof(self, context, path):
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

    def _build(self, obj, stream, context, path):
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


def _at_end(stream, path) -> bool:
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

    def _parse(self, stream, context, path):
        if _at_end(stream, path):
            return None
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj, stream, context, path):
        if obj is None:
            return None
        return self.subcon._build(obj, stream, context, path)

    def _sizeof(self, context, path):
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

    def _parse(self, stream, context, path):
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

    def _build(self, obj, stream, context, path):
        if obj is None:
            if self.optional:
                return None
            raise WireError(f"a value is required here (marker {self.expect})", path=path)
        stream_write(stream, self.marker, 1, path)
        return self.subcon._build(obj, stream, context, path)

    def _sizeof(self, context, path):
        raise SizeofError("a marked record has no fixed size", path=path)


def _parse_items(subcon, count, stream, context, path):
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


def _build_items(subcon, obj, stream, context, path):
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

    def _parse(self, stream, context, path):
        return _parse_items(self.subcon, evaluate(self.count, context), stream, context, path)

    def _build(self, obj, stream, context, path):
        items = _build_items(self.subcon, obj, stream, context, path)
        count = evaluate(self.count, context)
        if count != len(items):
            raise WireError(f"{len(items)} items given but the count says {count}", path=path)
        return items

    def _sizeof(self, context, path):
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

    def _parse(self, stream, context, path):
        count = self.countfield._parsereport(stream, context, path)
        return _parse_items(self.subcon, count, stream, context, path)

    def _build(self, obj, stream, context, path):
        if not isinstance(obj, (list, tuple)):
            raise WireError(f"expected a list, got {type(obj).__name__}", path=path)
        label, most = count_limit(self.countfield)
        if len(obj) > most:
            raise WireError(f"{len(obj)} items do not fit the {label} count (at most {most})", path=path)
        self.countfield._build(len(obj), stream, context, path)
        return _build_items(self.subcon, obj, stream, context, path)

    def _sizeof(self, context, path):
        raise SizeofError("an array has no fixed size", path=path)


class PgString(Construct):
    """PostgreSQL's ``String``: text in the connection's client encoding, ending in a NUL byte.

    The encoding is the parse/build parameter ``encoding`` (a Python codec name from :func:`text_codec`;
    UTF-8 when absent).  Bytes the encoding cannot decode are an error, except in ``SQL_ASCII``, where
    every byte string decodes (see :data:`SQL_ASCII`).
    """

    def _parse(self, stream, context, path):
        start = stream_tell(stream, path)
        rest = stream.read()
        end = rest.find(b"\0")
        if end < 0:
            stream.seek(start + len(rest))
            raise WireError(f"no NUL terminator in the {len(rest)} bytes left", path=path)
        stream.seek(start + end + 1)
        return decode_string(rest[:end], context._params.get("encoding", UTF8))

    def _build(self, obj, stream, context, path):
        raw = encode_string(obj, context._params.get("encoding", UTF8))
        stream_write(stream, raw + b"\0", len(raw) + 1, path)
        return obj

    def _sizeof(self, context, path):
        raise SizeofError("a String has no fixed size", path=path)


class Char(Construct):
    """One byte read as a one-character ``str``, limited to ``choices`` (``what`` names it in errors)."""

    def __init__(self, choices: str, what: str) -> None:
        super().__init__()
        self.choices = choices
        self.what = what

    def _check(self, value: str, path) -> None:
        if value not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            raise WireError(f"unknown {self.what} {value!r} (expected one of {allowed})", path=path)

    def _parse(self, stream, context, path):
        value = stream_read(stream, 1, path).decode("latin-1")
        self._check(value, path)
        return value

    def _build(self, obj, stream, context, path):
        if not isinstance(obj, str) or len(obj) != 1:
            raise WireError(f"expected a one-character str, got {obj!r}", path=path)
        self._check(obj, path)
        stream_write(stream, obj.encode("latin-1"), 1, path)
        return obj

    def _sizeof(self, context, path):
        return 1


class MustBeZero(Const):
    """An integer that PostgreSQL always sends as 0 and whose reader rejects anything else."""

    def __init__(self, subcon: Construct) -> None:
        super().__init__(0, subcon)

    def _parse(self, stream, context, path):
        value = self.subcon._parsereport(stream, context, path)
        if value != 0:
            raise WireError(f"must be 0, got {value}", path=path)
        return value

    def _build(self, obj, stream, context, path):
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

    def _parse(self, stream, context, path):
        got = stream_read(stream, len(self.value), path)
        if got != self.value:
            raise WireError(f"not a replwire file: expected {self.value!r}, got {got!r}", path=path)
        return got

    def _build(self, obj, stream, context, path):
        stream_write(stream, self.value, len(self.value), path)
        return self.value

    def _sizeof(self, context, path):
        return len(self.value)


class Crc32(Subconstruct):
    """A record followed by the CRC-32 (zlib's, big-endian Int32) of its bytes; a mismatch is an error."""

    def _parse(self, stream, context, path):
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

    def _build(self, obj, stream, context, path):
        start = stream_tell(stream, path)
        value = self.subcon._build(obj, stream, context, path)
        end = stream_tell(stream, path)
        stream.seek(start)
        raw = stream_read(stream, end - start, path)
        stream_write(stream, zlib.crc32(raw).to_bytes(4, "big"), 4, path)
        return value

    def _sizeof(self, context, path):
        return self.subcon._sizeof(context, path) + 4


# ---------------------------------------------------------------------------------------------------------
# client encodings

#: The codec of a String when the context names none: PostgreSQL's UTF8.
UTF8 = "utf-8"
#: The codec of PostgreSQL's ``SQL_ASCII``, which sends its bytes unconverted: bytes 0-127 are ASCII, and
#: each byte 128-255 decodes to the lone surrogate U+DC80-U+DCFF that Python's ``surrogateescape`` gives it
#: (PEP 383).  Every NUL-free byte string decodes, and encodes back to the same bytes; a ``str`` builds
#: exactly when it is made of ASCII characters and such surrogates.  Registered as a Python codec (this
#: name only), so that every path decodes a String the same way: ``raw.decode(codec)``.
SQL_ASCII = "sql_ascii"

#: PostgreSQL's client encodings (``SHOW client_encoding``) whose Python codec does not share their name.
#: The others are found by name (``LATIN1`` is ``iso8859-1``); ``EUC_TW`` and ``MULE_INTERNAL`` have no
#: Python codec.
_PG_CODECS = {
    "SQL_ASCII": SQL_ASCII, "KOI8R": "koi8_r", "KOI8U": "koi8_u", "WIN866": "cp866", "WIN874": "cp874",
    **{f"WIN{n}": f"cp{n}" for n in range(1250, 1259)},
}
_PG_NAMES = (
    "SQL_ASCII EUC_JP EUC_CN EUC_KR EUC_JIS_2004 UTF8 LATIN1 LATIN2 LATIN3 LATIN4 LATIN5 LATIN6 LATIN7 LATIN8 "
    "LATIN9 LATIN10 WIN1256 WIN1258 WIN866 WIN874 KOI8R WIN1251 WIN1252 ISO_8859_5 ISO_8859_6 ISO_8859_7 "
    "ISO_8859_8 WIN1250 WIN1253 WIN1254 WIN1255 WIN1257 KOI8U SJIS BIG5 GBK UHC GB18030 JOHAB SHIFT_JIS_2004"
).split()


def _sql_ascii_search(name: str) -> codecs.CodecInfo | None:
    if name.lower().replace("-", "_") != SQL_ASCII:
        return None
    return codecs.CodecInfo(name=SQL_ASCII,
                            encode=lambda text, errors="strict": (text.encode("ascii", "surrogateescape"),
                                                                  len(text)),
                            decode=lambda data, errors="strict": (bytes(data).decode("ascii", "surrogateescape"),
                                                                  len(data)))


codecs.register(_sql_ascii_search)

#: The Python codec of each PostgreSQL client encoding replwire can read, by PostgreSQL's name.
CLIENT_ENCODINGS: dict[str, str] = {name: codecs.lookup(_PG_CODECS.get(name, name)).name for name in _PG_NAMES}
_LABELS = {codec: "UTF-8" if codec == UTF8 else name for name, codec in reversed(CLIENT_ENCODINGS.items())}


@functools.cache
def text_codec(encoding: Any) -> str:
    """The Python codec that decodes the Strings of a connection whose client encoding is ``encoding``.

    ``encoding`` is PostgreSQL's name of a client encoding (``UTF8``, ``LATIN1``, ``SQL_ASCII``, ``WIN1252``,
    any case) or a name Python knows that encoding by (``utf-8``, ``latin-1``, ``cp1252``).  Anything else
    -- an encoding PostgreSQL has no client encoding for (``utf-16``), or an unknown name -- is a caller
    error (``ValueError``).
    """
    if not isinstance(encoding, str):
        raise ValueError(f"encoding must be a str naming a client encoding, got {encoding!r}")
    codec = CLIENT_ENCODINGS.get(encoding.upper())
    if codec is None:
        try:
            codec = codecs.lookup(encoding).name
        except LookupError:
            codec = None
    if codec not in _LABELS:
        raise ValueError(f"encoding must name a PostgreSQL client encoding (UTF8, LATIN1, SQL_ASCII, ...) "
                         f"or its Python codec, got {encoding!r}")
    return codec


def decode_string(raw: bytes, codec: str) -> str:
    """A String's bytes (without the NUL) as text, in ``codec`` (one :func:`text_codec` gives)."""
    try:
        return raw.decode(codec)
    except UnicodeDecodeError as error:
        raise WireError(f"invalid {_LABELS[codec]} at byte {error.start} of the string") from None


def encode_string(text: Any, codec: str) -> bytes:
    """The bytes of a String (without the NUL) for ``text``, in ``codec`` (one :func:`text_codec` gives)."""
    if not isinstance(text, str):
        raise WireError(f"expected str, got {type(text).__name__}")
    if "\0" in text:
        raise WireError("a String cannot contain a NUL character")
    try:
        return text.encode(codec)
    except UnicodeEncodeError as error:
        raise WireError(f"not encodable as {_LABELS[codec]} at character {error.start}") from None


# ---------------------------------------------------------------------------------------------------------
# wire primitives, with the PostgreSQL docs' labels

Int8 = WireType(Int8ub, "Int8", "int")
Int16 = WireType(Int16ub, "Int16", "int")
Int32 = WireType(Int32ub, "Int32", "int")
Int64 = WireType(Int64ub, "Int64", "int")
SignedInt32 = WireType(Int32sb, "Int32", "int")
Lsn = WireType(Int64ub, "Int64 (XLogRecPtr)", "lsn")
Timestamp = WireType(Int64sb, "Int64 (TimestampTz)", "timestamp")
Xid = WireType(Int32ub, "Int32 (TransactionId)", "xid")
Oid = WireType(Int32ub, "Int32 (Oid)", "oid")
String = WireType(PgString(), "String", "text")
ZeroFlags = WireType(MustBeZero(Int8ub), "Int8(0)", "int")
LengthPrefixedBytes = WireType(Prefixed(Int32ub, GreedyBytes), "Int32 length, then Byten", "bytes")
RestBytes = WireType(GreedyBytes, "Byten", "bytes")


def tag_field(tag: bytes, message: str, doc: str, *, min_proto: int | None = None) -> Field:
    """The leading type byte as a field (see :class:`Tag`)."""
    shown = f"'{tag.decode('ascii')}'" if tag.decode("ascii").isprintable() else f"0x{tag[0]:02x}"
    return Field("tag", Tag(tag, message, min_proto), FieldMeta(doc=doc, spec_type=f"Byte1({shown})", value="tag"))


def counted(name: str, count: WireType, item: Struct, item_class: str, doc: str, *,
            since: int = 1, spec_type: str | None = None) -> Field:
    """A field holding an array of records preceded by its count (derived when building)."""
    meta = FieldMeta(doc=doc, spec_type=spec_type or f"{count.spec_type} count, then {item_class} each",
                     value="items", since=since)
    return Field(name, Counted(count.construct, item), meta)


@dataclass(frozen=True)
class MessageSpec:
    """One message of a layer: its declaration and what the docs and the codec need to know about it.

    ``declaration`` is the construct ``Struct``; ``min_proto`` the lowest protocol version it exists in
    (also enforced by its :class:`Tag`); ``since_server`` the first PostgreSQL major that sends it;
    ``options`` the pgoutput options that make the server send it; ``family`` groups the docs.
    """

    name: str
    tag: str
    layer: str
    family: str
    declaration: Struct
    doc: str
    doc_ref: str
    docs_page: str = DOCS_LOGICAL
    min_proto: int = 1
    since_server: int = 10
    options: tuple[str, ...] = ()


class Family(TypedDict, total=False):
    """Keyword arguments of :func:`message` that the messages of one family share (``**COMMON``)."""

    family: str
    layer: str
    docs_page: str
    min_proto: int
    since_server: int
    options: tuple[str, ...]


def message(tag: bytes, name: str, *fields: Field, family: str, doc: str, doc_ref: str,
            tag_doc: str | None = None, layer: str = "logical", min_proto: int = 1,
            since_server: int = 10, options: tuple[str, ...] = (), docs_page: str = DOCS_LOGICAL,
            ) -> MessageSpec:
    """Declare one message: its tag field followed by ``fields``, as a construct ``Struct``."""
    gate = min_proto if (layer == "logical" and min_proto > 1) else None
    head = tag_field(tag, name, tag_doc or f"Identifies the message as {name}.", min_proto=gate)
    for f in (head, *fields):  # a field cannot be older than its message
        if f.meta.since < min_proto:
            f.meta = dataclasses.replace(f.meta, since=min_proto)
    declaration = record(head, *fields, doc_ref=doc_ref, docs_page=docs_page)
    return MessageSpec(name=name, tag=tag.decode("ascii"), layer=layer, family=family,
                       declaration=declaration, doc=doc, doc_ref=doc_ref, docs_page=docs_page,
                       min_proto=min_proto, since_server=since_server, options=options)
