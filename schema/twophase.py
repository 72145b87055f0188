"""Two-phase commit: Begin Prepare ``b``, Prepare ``P``, Commit Prepared ``K``, Rollback Prepared ``r``,
Stream Prepare ``p`` (protocol 3, PostgreSQL 15, ``two_phase``).

Strategy: fixed layouts.  Begin Prepare has no flags byte; the others have one that is always 0.  Stream
Prepare shares Prepare's layout (its xid comes after the timestamps, unlike Stream Commit's).
"""

from .fields import Field, Lsn, String, Timestamp, Xid, ZeroFlags, field
from .message_spec import Family, message

__all__ = ["BEGIN_PREPARE", "COMMIT_PREPARED", "MESSAGES", "PREPARE", "ROLLBACK_PREPARED", "STREAM_PREPARE"]

GID_DOC = "Global identifier of the prepared transaction (the name given to PREPARE TRANSACTION)."
FLAGS_DOC = "Flags; none are defined, so this is always 0."


def prepare_fields() -> tuple[Field, ...]:
    """The layout Prepare and Stream Prepare share."""
    return (
        field("flags", ZeroFlags, FLAGS_DOC),
        field("prepare_lsn", Lsn, "LSN of the prepare record."),
        field("end_lsn", Lsn, "End LSN of the prepare record."),
        field("prepare_time", Timestamp, "Prepare time, in microseconds since 2000-01-01 UTC."),
        field("xid", Xid, "Xid of the transaction."),
        field("gid", String, GID_DOC),
    )


COMMON = Family(family="two_phase", min_proto=3, since_server=15, options=("two_phase",))

BEGIN_PREPARE = message(
    b"b", "BeginPrepare",
    field("prepare_lsn", Lsn, "LSN of the prepare record."),
    field("end_lsn", Lsn, "End LSN of the prepared transaction."),
    field("prepare_time", Timestamp, "Prepare time, in microseconds since 2000-01-01 UTC."),
    field("xid", Xid, "Xid of the transaction."),
    field("gid", String, GID_DOC),
    doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-BEGIN-PREPARE", **COMMON,
    doc="Starts a transaction that was prepared for two-phase commit; its changes follow, then Prepare.",
)

PREPARE = message(
    b"P", "Prepare",
    *prepare_fields(),
    doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-PREPARE", **COMMON,
    doc="Ends the prepared transaction started by Begin Prepare. Its outcome comes later, as Commit "
        "Prepared or Rollback Prepared.",
)

COMMIT_PREPARED = message(
    b"K", "CommitPrepared",
    field("flags", ZeroFlags, FLAGS_DOC),
    field("commit_lsn", Lsn, "LSN of the commit-prepared record."),
    field("end_lsn", Lsn, "End LSN of the commit-prepared record."),
    field("commit_time", Timestamp, "Commit time, in microseconds since 2000-01-01 UTC."),
    field("xid", Xid, "Xid of the transaction."),
    field("gid", String, GID_DOC),
    doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-COMMIT-PREPARED", **COMMON,
    doc="COMMIT PREPARED ran: the prepared transaction is committed.",
)

ROLLBACK_PREPARED = message(
    b"r", "RollbackPrepared",
    field("flags", ZeroFlags, FLAGS_DOC),
    field("prepare_end_lsn", Lsn, "End LSN of the prepared transaction."),
    field("rollback_end_lsn", Lsn, "End LSN of the rollback-prepared record."),
    field("prepare_time", Timestamp, "Prepare time, in microseconds since 2000-01-01 UTC."),
    field("rollback_time", Timestamp, "Rollback time, in microseconds since 2000-01-01 UTC."),
    field("xid", Xid, "Xid of the transaction."),
    field("gid", String, GID_DOC),
    doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-ROLLBACK-PREPARED", **COMMON,
    doc="ROLLBACK PREPARED ran: drop the prepared transaction.",
)

STREAM_PREPARE = message(
    b"p", "StreamPrepare",
    *prepare_fields(),
    doc_ref="PROTOCOL-LOGICALREP-MESSAGE-FORMATS-STREAM-PREPARE",
    family="two_phase", min_proto=3, since_server=15, options=("two_phase", "streaming"),
    doc="A streamed transaction was prepared: it ends the Stream Start...Stop blocks sent for it, and its "
        "outcome comes later as Commit Prepared or Rollback Prepared.",
)

MESSAGES = (BEGIN_PREPARE, PREPARE, COMMIT_PREPARED, ROLLBACK_PREPARED, STREAM_PREPARE)
