"""The walsender envelope: the CopyData payloads of a logical replication connection.

Strategy: a layer of its own, because its tags collide with the logical messages' (``r`` is Rollback
Prepared there and Standby status update here).  The server sends XLogData ``w`` (one logical message
each) and Primary keepalive ``k``; the client sends Standby status update ``r`` and Hot standby feedback
``h``.
"""

from .fields import DOCS_REPLICATION, Int8, Int32, Lsn, RestBytes, Timestamp, Xid, field
from .message_spec import Family, message

__all__ = [
    "CLIENT_MESSAGES", "HOT_STANDBY_FEEDBACK", "PRIMARY_KEEPALIVE", "SERVER_MESSAGES", "STANDBY_STATUS_UPDATE",
    "XLOG_DATA",
]

COMMON = Family(layer="envelope", docs_page=DOCS_REPLICATION, family="envelope")

XLOG_DATA = message(
    b"w", "XLogData",
    field("data_start", Lsn, "Start of the WAL data in this message. For logical replication it is the "
                             "write position of the output plugin's callback, or 0/0 for a write that is "
                             "not the last of its callback (Relation, Type, a Begin followed by Origin)."),
    field("wal_end", Lsn, "Current end of WAL on the server; for logical replication equal to data_start."),
    field("send_time", Timestamp, "Server clock at the time of sending, in microseconds since 2000-01-01 UTC."),
    field("data", RestBytes, "The payload: exactly one logical replication message (possibly empty on "
                             "PostgreSQL 10 to 14)."),
    doc_ref="PROTOCOL-REPLICATION-XLOGDATA", **COMMON,
    doc="Server to client: carries one logical replication message.",
)

PRIMARY_KEEPALIVE = message(
    b"k", "PrimaryKeepalive",
    field("wal_end", Lsn, "Current end of WAL on the server (what the walsender has sent up to)."),
    field("send_time", Timestamp, "Server clock at the time of sending, in microseconds since 2000-01-01 UTC."),
    field("reply_requested", Int8, "1 when the client should reply immediately (with a Standby status "
                                   "update), else 0."),
    doc_ref="PROTOCOL-REPLICATION-PRIMARY-KEEPALIVE-MESSAGE", **COMMON,
    doc="Server to client: a heartbeat, also telling the client how far WAL has been sent.",
)

STANDBY_STATUS_UPDATE = message(
    b"r", "StandbyStatusUpdate",
    field("write_lsn", Lsn, "Last WAL position received and written by the client, plus one."),
    field("flush_lsn", Lsn, "Last WAL position durably stored by the client, plus one; for a logical "
                            "slot, a non-zero value advances its confirmed_flush_lsn."),
    field("apply_lsn", Lsn, "Last WAL position applied by the client, plus one."),
    field("send_time", Timestamp, "Client clock at the time of sending, in microseconds since 2000-01-01 UTC."),
    field("reply_requested", Int8, "1 to ask the server to reply immediately (with a keepalive), else 0."),
    doc_ref="PROTOCOL-REPLICATION-STANDBY-STATUS-UPDATE", **COMMON,
    doc="Client to server: reports progress and acknowledges (flushes) positions.",
)

HOT_STANDBY_FEEDBACK = message(
    b"h", "HotStandbyFeedback",
    field("send_time", Timestamp, "Client clock at the time of sending, in microseconds since 2000-01-01 UTC."),
    field("xmin", Xid, "The client's current global xmin, or 0 for none."),
    field("xmin_epoch", Int32, "Epoch of xmin."),
    field("catalog_xmin", Xid, "Lowest catalog_xmin of any slot on the client, or 0 for none."),
    field("catalog_xmin_epoch", Int32, "Epoch of catalog_xmin."),
    doc_ref="PROTOCOL-REPLICATION-HOT-STANDBY-FEEDBACK-MESSAGE", **COMMON,
    doc="Client to server: the oldest transactions the client still needs (used by physical standbys).",
)

SERVER_MESSAGES = (XLOG_DATA, PRIMARY_KEEPALIVE)
CLIENT_MESSAGES = (STANDBY_STATUS_UPDATE, HOT_STANDBY_FEEDBACK)
