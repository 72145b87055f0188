"""Schema messages: Relation ``R`` and Type ``Y`` (protocol 1, PostgreSQL 10).

Strategy: both carry the streamed-transaction Xid right after the tag, present exactly inside a
Stream Start...Stop block (``this._params.in_stream``).  A Relation's columns are a counted array of
:data:`RELATION_COLUMN` records; the count is derived when building.
"""

from construct import this

from .constructs import Char
from .fields import Int8, Int16, Oid, SignedInt32, String, WireType, Xid, counted, field, record
from .message_spec import message

__all__ = ["MESSAGES", "RELATION", "RELATION_COLUMN", "STREAM_XID_DOC", "TYPE"]

STREAM_XID_DOC = ("Xid of the (sub)transaction that made the change; present exactly inside a Stream "
                  "Start...Stop block of a streamed transaction.")

RELATION_COLUMN = record(
    field("flags", Int8, "Column flags: bit 0 set when the column is part of the replica identity key "
                         "(every column under REPLICA IDENTITY FULL). No other bit is defined."),
    field("name", String, "Name of the column."),
    field("type_id", Oid, "OID of the column's data type (it may be a domain)."),
    field("type_modifier", SignedInt32, "Type modifier of the column (atttypmod); -1 when there is none."),
    doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-RELATION",
)

REPLICA_IDENTITY = WireType(Char("dnfi", "replica identity"), "Int8", "char")

RELATION = message(
    b"R", "Relation",
    field("xid", Xid, STREAM_XID_DOC, since=2, when=this._params.in_stream),
    field("relation_id", Oid, "OID of the relation."),
    field("namespace", String, "Namespace (schema) of the relation; the empty string means pg_catalog."),
    field("name", String, "Name of the relation."),
    field("replica_identity", REPLICA_IDENTITY,
          "Replica identity setting of the relation, the pg_class.relreplident character: 'd' default, "
          "'n' nothing, 'f' full, 'i' index."),
    counted("columns", Int16, RELATION_COLUMN, "RelationColumn",
            "The published columns, in the order tuple data uses. Dropped columns and (before PostgreSQL "
            "18) generated columns are never sent; with a column list only the listed ones are."),
    family="schema", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-RELATION",
    doc="Describes a published table. Sent before the first change to the table in a session, again "
        "after any change to its definition, and once per streamed transaction. Under "
        "publish_via_partition_root both the root's and the partition's Relation are sent, root first.",
)

TYPE = message(
    b"Y", "Type",
    field("xid", Xid, STREAM_XID_DOC, since=2, when=this._params.in_stream),
    field("type_id", Oid, "OID of the column's data type; for a domain this is the domain's OID."),
    field("namespace", String, "Namespace of the base type; the empty string means pg_catalog."),
    field("name", String, "Name of the base type (for a domain, the type the domain is based on)."),
    family="schema", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-TYPE",
    doc="Describes a user-defined data type (an enum, a domain, a composite type) before the Relation "
        "that uses it. Built-in types never get one.",
)

MESSAGES = (RELATION, TYPE)
