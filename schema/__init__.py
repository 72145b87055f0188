"""The PostgreSQL logical replication wire format, declared once with construct.

Every pgoutput message (protocol versions 1 to 4) and every walsender envelope message is one
:class:`~replwire.schema.message_spec.MessageSpec` whose ``declaration`` is a construct ``Struct``; the
version- and state-dependent fields are conditions inside it on the parse context (``proto_version``,
``in_stream``).  The registries below are built from the family modules, never written out twice.
This package imports construct only.
"""

from . import capture, dml, envelope, logical_message, relation, stream, transaction, twophase
from .fields import FieldMeta
from .message_spec import MessageSpec
from .versions import PROTO_FIRST_SERVER, highest_proto_version

#: Highest pgoutput protocol version (PostgreSQL 16 and later).
MAX_PROTO_VERSION = max(PROTO_FIRST_SERVER)

#: Every pgoutput message, in the order of the PostgreSQL documentation's families.
LOGICAL_MESSAGES: tuple[MessageSpec, ...] = (
    transaction.MESSAGES + relation.MESSAGES + dml.MESSAGES + logical_message.MESSAGES
    + stream.MESSAGES + twophase.MESSAGES
)

#: pgoutput messages by tag.
LOGICAL: dict[str, MessageSpec] = {spec.tag: spec for spec in LOGICAL_MESSAGES}

#: Envelope messages by tag, per sender (the two directions reuse letters of the logical layer).
ENVELOPE: dict[str, dict[str, MessageSpec]] = {
    "server": {spec.tag: spec for spec in envelope.SERVER_MESSAGES},
    "client": {spec.tag: spec for spec in envelope.CLIENT_MESSAGES},
}

#: The capture file format: its header and its records (see :mod:`replwire.schema.capture`).
CAPTURE_FILE = {"Header": capture.HEADER, "Record": capture.RECORD}

#: Nested records by the name the codec gives their values.
RECORDS = {"RelationColumn": relation.RELATION_COLUMN, "TupleColumn": dml.TUPLE_COLUMN,
           "CaptureOption": capture.OPTION, "CaptureHeader": capture.HEADER_FIELDS,
           "CaptureRecord": capture.RECORD_FIELDS}

assert len(LOGICAL) == len(LOGICAL_MESSAGES), "two logical messages share a tag"

__all__ = ["CAPTURE_FILE", "ENVELOPE", "LOGICAL", "LOGICAL_MESSAGES", "MAX_PROTO_VERSION", "PROTO_FIRST_SERVER",
           "RECORDS", "FieldMeta", "MessageSpec", "highest_proto_version"]
