"""The fields every declaration in :mod:`replwire.schema` is made of, and what is known about each.

Strategy: each named member of a message's ``Struct`` is a :class:`Field` -- a ``Renamed`` that also carries
the metadata the docs, the strategies and the fast codec need (:class:`FieldMeta`).  A field is declared with
:func:`field` from one of the wire primitives below (a :class:`WireType`: the construct, the PostgreSQL docs'
label for it and the kind of value it carries).  On failure a field records its name and offset on the
exception (:func:`~replwire.schema.wire_error.annotate`); when parsing with a :class:`Trace` it records where
each field was found.  This module imports construct only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, BinaryIO

from construct import (
    Construct,
    ConstructError,
    Container,
    GreedyBytes,
    Int8ub,
    Int16ub,
    Int32sb,
    Int32ub,
    Int64sb,
    Int64ub,
    Prefixed,
    Renamed,
    Struct,
)
from construct.core import stream_tell

from .constructs import Counted, MustBeZero, PgString, Tag, When
from .wire_error import annotate

__all__ = [
    "DOCS_LOGICAL", "DOCS_REPLICATION", "Field", "FieldMeta", "Int8", "Int16", "Int32", "Int64", "LengthPrefixedBytes",
    "Lsn", "Oid", "RestBytes", "SignedInt32", "String", "Timestamp", "Trace", "WireType", "Xid", "ZeroFlags",
    "counted", "field", "record", "tag_field",
]

DOCS_LOGICAL = "https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html"
DOCS_REPLICATION = "https://www.postgresql.org/docs/current/protocol-replication.html"


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

    def _parse(self, stream: BinaryIO, context: Container, path: str) -> Any:
        start = stream_tell(stream, path)
        trace: Trace | None = context._params.get("_trace")
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

    def _build(self, obj: Any, stream: BinaryIO, context: Container, path: str) -> Any:
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


# the wire primitives, with the PostgreSQL docs' labels

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
