"""Transaction framing: Begin ``B``, Commit ``C`` and Origin ``O`` (protocol 1, PostgreSQL 10).

Strategy: plain fixed layouts.  The only rule beyond the layout is Commit's flags byte, which PostgreSQL
always sends as 0 and whose reader rejects anything else (:data:`ZeroFlags`).
"""

from .fields import Lsn, String, Timestamp, Xid, ZeroFlags, field
from .message_spec import message

__all__ = ["BEGIN", "COMMIT", "MESSAGES", "ORIGIN"]

BEGIN = message(
    b"B", "Begin",
    field("final_lsn", Lsn, "LSN of the commit record of the transaction; equal to the Commit's commit_lsn."),
    field("commit_time", Timestamp, "Commit time of the transaction, in microseconds since 2000-01-01 UTC."),
    field("xid", Xid, "Xid of the (top-level) transaction."),
    family="transaction", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-BEGIN",
    doc="Starts a transaction that is sent whole after it committed. PostgreSQL 15 and later send it only "
        "when the transaction has at least one published change; PostgreSQL 10 to 14 send it for every "
        "decoded transaction.",
)

COMMIT = message(
    b"C", "Commit",
    field("flags", ZeroFlags, "Flags; none are defined, so this is always 0."),
    field("commit_lsn", Lsn, "LSN of the commit record; equal to the Begin's final_lsn."),
    field("end_lsn", Lsn, "End LSN of the commit record: the position to confirm as flushed once the "
                          "transaction is durably stored."),
    field("commit_time", Timestamp, "Commit time of the transaction, in microseconds since 2000-01-01 UTC."),
    family="transaction", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-COMMIT",
    doc="Ends a transaction started by Begin.",
)

ORIGIN = message(
    b"O", "Origin",
    field("origin_lsn", Lsn, "LSN of the commit on the origin node; 0/0 when sent after a Stream Start."),
    field("name", String, "Name of the replication origin."),
    family="transaction", doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-ORIGIN",
    doc="Names the replication origin of the transaction. pgoutput sends at most one per transaction: "
        "right after Begin, after Begin Prepare, or after the first Stream Start of a streamed "
        "transaction, and only when the transaction has an origin whose name can be looked up.",
)

MESSAGES = (BEGIN, COMMIT, ORIGIN)
