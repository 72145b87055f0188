"""Streamed transactions: Stream Start ``S``, Stream Stop ``E``, Stream Commit ``c``, Stream Abort ``A``.

Strategy: protocol 2 and later (PostgreSQL 14, ``streaming`` on or parallel).  A large transaction is
sent in S...E blocks before it ends, and then ends with Stream Commit or Stream Abort, always sent outside
any block.  Stream Abort has a tail (abort LSN and time) only under ``streaming=parallel``, which needs
protocol 4; the payload length is the only thing on the wire that tells the two forms apart, so the tail
is a :class:`~replwire.schema.constructs.Tail` guarded by the protocol version.
"""

from construct import this

from .constructs import Tail
from .fields import Int8, Lsn, Timestamp, Xid, ZeroFlags, field
from .message_spec import message

__all__ = ["MESSAGES", "STREAM_ABORT", "STREAM_COMMIT", "STREAM_START", "STREAM_STOP"]

STREAM_START = message(
    b"S", "StreamStart",
    field("xid", Xid, "Xid of the top-level transaction being streamed."),
    field("first_segment", Int8, "1 for the first block of this transaction, 0 for later ones."),
    family="stream", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-STREAM-START",
    min_proto=2, since_server=14, options=("streaming",),
    doc="Opens a block of changes of a transaction still in progress. Until the matching Stream Stop, "
        "Relation, Type, Insert, Update, Delete, Truncate and Message carry the Xid of the "
        "(sub)transaction after their tag.",
)

STREAM_STOP = message(
    b"E", "StreamStop",
    family="stream", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-STREAM-STOP",
    min_proto=2, since_server=14, options=("streaming",),
    doc="Closes the block opened by Stream Start. The message is the tag alone.",
)

STREAM_COMMIT = message(
    b"c", "StreamCommit",
    field("xid", Xid, "Xid of the top-level transaction."),
    field("flags", ZeroFlags, "Flags; none are defined, so this is always 0."),
    field("commit_lsn", Lsn, "LSN of the commit record."),
    field("end_lsn", Lsn, "End LSN of the commit record: the position to confirm as flushed."),
    field("commit_time", Timestamp, "Commit time of the transaction, in microseconds since 2000-01-01 UTC."),
    family="stream", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-STREAM-COMMIT",
    min_proto=2, since_server=14, options=("streaming",),
    doc="The streamed transaction committed: everything streamed for it, less the subtransactions "
        "aborted on the way, is now durable.",
)

STREAM_ABORT = message(
    b"A", "StreamAbort",
    field("xid", Xid, "Xid of the top-level transaction."),
    field("subxid", Xid, "Xid of the aborted subtransaction; equal to xid when the whole transaction "
                         "aborted."),
    field("abort_lsn", Lsn, "LSN of the abort record. Sent only with streaming=parallel (protocol 4, "
                            "PostgreSQL 16), where it is present exactly when the payload is 25 bytes "
                            "long.", since=4, when=this._params.proto_version >= 4, wrap=Tail),
    field("abort_time", Timestamp, "Time of the abort, in microseconds since 2000-01-01 UTC; present "
                                   "together with abort_lsn.", since=4, when=this.abort_lsn != None),  # noqa: E711
    family="stream", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-STREAM-ABORT",
    min_proto=2, since_server=14, options=("streaming",),
    doc="A streamed transaction (subxid == xid) or one of its subtransactions (subxid != xid) aborted: "
        "drop what was streamed for it.",
)

MESSAGES = (STREAM_START, STREAM_STOP, STREAM_COMMIT, STREAM_ABORT)
