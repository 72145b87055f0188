"""replwire's runtime: parse and build pgoutput messages and walsender envelope frames.

>>> from replwire.codec import parse, build, Begin, LSN, Timestamp
>>> msg = parse(bytes.fromhex("42000000000169e5a80002894463074dc800000313"), proto_version=1)
>>> msg
Begin(final_lsn=LSN('0/169E5A8'), commit_time=Timestamp('2022-08-15T11:06:05.625800+00:00'), xid=787)
>>> build(msg, proto_version=1).hex()
'42000000000169e5a80002894463074dc800000313'
"""

from .errors import DecodeError, EncodeError, ReplwireError
from .messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    HotStandbyFeedback,
    Insert,
    Message,
    Origin,
    Prepare,
    PrimaryKeepalive,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StandbyStatusUpdate,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleColumn,
    Type,
    Update,
    WireMessage,
    XLogData,
)
from .fast import build, build_envelope, parse, parse_envelope  # the generated fast codec; see .reference
from .scalars import LSN, Timestamp
from .decoder import Decoder, StreamStateError  # noqa: E402 - after parse/build: the decoder binds them
from .assembler import Assembler, Change, Changes, Transaction  # noqa: E402
from .values import INFINITY, NEG_INFINITY, UNCHANGED_TOAST, RawValue, TypedValuesUnavailable  # noqa: E402

__all__ = [
    "LSN", "Begin", "BeginPrepare", "Commit", "CommitPrepared", "DecodeError", "Delete", "EncodeError",
    "HotStandbyFeedback", "Insert", "Message", "Origin", "Prepare", "PrimaryKeepalive", "Relation",
    "RelationColumn", "ReplwireError", "RollbackPrepared", "StandbyStatusUpdate", "StreamAbort",
    "StreamCommit", "StreamPrepare", "StreamStart", "StreamStop", "Timestamp", "Truncate", "TupleColumn",
    "Type", "Update", "WireMessage", "XLogData", "build", "build_envelope", "parse", "parse_envelope",
    "Assembler", "Change", "Changes", "Decoder", "INFINITY", "NEG_INFINITY", "RawValue", "StreamStateError",
    "Transaction", "TypedValuesUnavailable", "UNCHANGED_TOAST",
]
