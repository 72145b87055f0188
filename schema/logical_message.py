"""The generic logical decoding message: Message ``M`` (PostgreSQL 14, with ``messages=true``).

Strategy: one layout; the content is length-prefixed raw bytes (no encoding conversion), its length
derived when building.  It carries the streamed-transaction Xid inside a Stream Start...Stop block.
pgoutput does not check the protocol version for ``messages``, so Message exists from protocol 1 on.
"""

from construct import this

from .fields import Int8, LengthPrefixedBytes, Lsn, String, Xid, field
from .message_spec import message
from .relation import STREAM_XID_DOC

__all__ = ["MESSAGE", "MESSAGES"]

MESSAGE = message(
    b"M", "Message",
    field("xid", Xid, STREAM_XID_DOC, since=2, when=this._params.in_stream),
    field("flags", Int8, "Flags: bit 0 set when the message is transactional."),
    field("lsn", Lsn, "LSN of the logical decoding message."),
    field("prefix", String, "Prefix given to pg_logical_emit_message."),
    field("content", LengthPrefixedBytes, "Content of the message, raw bytes (its Int32 length first)."),
    family="logical_message", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-MESSAGE",
    since_server=14, options=("messages",),
    doc="A message written with pg_logical_emit_message. A transactional one arrives inside its "
        "transaction (after a Begin); a non-transactional one on its own, outside any transaction.",
)

MESSAGES = (MESSAGE,)
