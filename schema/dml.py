"""Data changes: Insert ``I``, Update ``U``, Delete ``D``, Truncate ``T``, and their TupleData.

Strategy: TupleData is a counted array of :data:`TUPLE_COLUMN` records whose ``data`` is present exactly
for the text (``t``) and binary (``b``) kinds.  The old-row images of Update and Delete are
:class:`~replwire.schema.constructs.Marked` records: ``K`` (old key) or ``O`` (old row), never both; Update's
may be absent, Delete's may not.  The new row always follows an ``N``.  Every message here carries the
streamed-transaction Xid inside a Stream Start...Stop block.
"""

from typing import Any

from construct import Int16ub, Int32ub, Rebuild, len_, this

from .constructs import Char, Counted, Items, Marked, When
from .fields import Field, FieldMeta, Int8, LengthPrefixedBytes, Oid, WireType, Xid, field, record
from .message_spec import message
from .relation import STREAM_XID_DOC

__all__ = ["DELETE", "INSERT", "MESSAGES", "TRUNCATE", "TUPLE_COLUMN", "UPDATE"]

TUPLEDATA_REF = "PROTOCOL-LOGICALREP-MESSAGE-FORMATS-TUPLEDATA"

COLUMN_KIND = WireType(Char("nutb", "tuple column kind"), "Byte1", "char")

TUPLE_COLUMN = record(
    field("kind", COLUMN_KIND,
          "What follows: 'n' SQL NULL; 'u' an unchanged TOASTed value that was not sent; 't' the value "
          "in text format; 'b' the value in binary format (protocol 2 and later with binary=true)."),
    field("data", LengthPrefixedBytes,
          "The value: its length (Int32, not counting itself), then the bytes of the type's text output "
          "('t', in the client encoding, no NUL terminator) or of its binary send function ('b').",
          when=(this.kind == "t") | (this.kind == "b")),
    doc_ref=TUPLEDATA_REF,
)


TUPLE_DATA = Counted(Int16ub, TUPLE_COLUMN)


def tuple_field(name: str, marker: bytes, doc: str, *, optional: bool = False, expect: str | None = None,
                when: Any = None) -> Field:
    """A row image: the marker byte, then TupleData (column count, derived when building, and columns)."""
    subcon: Any = Marked(marker, TUPLE_DATA, optional=optional, expect=expect)
    if when is not None:
        subcon = When(when, subcon)
    spec_type = f"Byte1('{marker.decode('ascii')}'), then TupleData (Int16 count, then TupleColumn each)"
    return Field(name, subcon, FieldMeta(doc=doc, spec_type=spec_type, value="items"))


INSERT = message(
    b"I", "Insert",
    field("xid", Xid, STREAM_XID_DOC, since=2, when=this._params.in_stream),
    field("relation_id", Oid, "OID of the relation, as in its Relation message."),
    tuple_field("new", b"N", "The new row."),
    family="dml", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-INSERT",
    doc="A row was inserted. Under a row filter an UPDATE whose old row did not match and whose new row "
        "does also arrives as Insert.",
)

UPDATE = message(
    b"U", "Update",
    field("xid", Xid, STREAM_XID_DOC, since=2, when=this._params.in_stream),
    field("relation_id", Oid, "OID of the relation, as in its Relation message."),
    tuple_field("key", b"K", "The old values of the replica identity key columns (other columns 'n'); present "
                        "when the UPDATE changed a key column and the replica identity is DEFAULT or "
                        "USING INDEX.", optional=True),
    tuple_field("old", b"O", "The whole old row; present under REPLICA IDENTITY FULL.", optional=True,
           when=this.key == None),  # noqa: E711 -- a construct expression, not a comparison
    tuple_field("new", b"N", "The new row. A column left untouched whose value is TOASTed is sent as 'u'."),
    family="dml", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-UPDATE",
    doc="A row was updated. At most one of key and old is present.",
)

DELETE = message(
    b"D", "Delete",
    field("xid", Xid, STREAM_XID_DOC, since=2, when=this._params.in_stream),
    field("relation_id", Oid, "OID of the relation, as in its Relation message."),
    tuple_field("key", b"K", "The old values of the replica identity key columns (other columns 'n'); present "
                        "unless the replica identity is FULL.", optional=True),
    tuple_field("old", b"O", "The whole old row; present under REPLICA IDENTITY FULL.", expect="'K' or 'O'",
           when=this.key == None),  # noqa: E711
    family="dml", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-DELETE",
    doc="A row was deleted. Exactly one of key and old is present; a table with REPLICA IDENTITY NOTHING "
        "sends no Delete at all.",
)

TRUNCATE = message(
    b"T", "Truncate",
    field("xid", Xid, STREAM_XID_DOC, since=2, when=this._params.in_stream),
    Field("num_relations", Rebuild(Int32ub, len_(this.relation_ids)),
          FieldMeta(doc="Number of relations truncated (derived from relation_ids when building).",
                    spec_type="Int32", value="count")),
    field("options", Int8, "Option bits: 1 CASCADE, 2 RESTART IDENTITY."),
    Field("relation_ids", Items(this.num_relations, Oid.construct),
          FieldMeta(doc="OID of each truncated relation.", spec_type="Int32 (Oid) each", value="items")),
    family="dml", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-TRUNCATE", since_server=11,
    doc="One TRUNCATE statement, for all the tables it truncated (with CASCADE, the referencing ones too). "
        "A Relation message for each is sent first.",
)

MESSAGES = (INSERT, UPDATE, DELETE, TRUNCATE)
