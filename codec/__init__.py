"""replwire's runtime: parse and build pgoutput messages and walsender envelope frames.

``parse`` and ``parse_envelope`` return a [WireMessage][replwire.codec.messages.WireMessage]: narrow it
with ``isinstance`` (or a ``match`` class pattern) before reading a message class's fields, and a type
checker knows them too.

Examples:
    >>> from replwire.codec import parse, build, Begin, LSN, Timestamp
    >>> msg = parse(bytes.fromhex("42000000000169e5a80002894463074dc800000313"), proto_version=1)
    >>> msg
    Begin(final_lsn=LSN('0/169E5A8'), commit_time=Timestamp('2022-08-15T11:06:05.625800+00:00'), xid=787)
    >>> build(msg, proto_version=1).hex()
    '42000000000169e5a80002894463074dc800000313'
    >>> if isinstance(msg, Begin):
    ...     print(msg.final_lsn, msg.commit_time.to_datetime().year, msg.xid)
    0/169E5A8 2022 787
"""

from typing import TYPE_CHECKING, Any

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
from .scalars import LSN, Timestamp
from .stream.assembler import Assembler, Change, Changes, Transaction
from .stream.decoder import Decoder, StreamStateError
from .stream.value_types import INFINITY, NEG_INFINITY, UNCHANGED_TOAST, RawValue
from .stream.values import TypedValuesUnavailable
from .wire.fast import build, build_envelope, parse, parse_envelope  # the generated fast codec; see .reference

if TYPE_CHECKING:
    from .serve import Faults, ServerAddress, serving

__all__ = [
    "LSN", "Begin", "BeginPrepare", "Commit", "CommitPrepared", "DecodeError", "Delete", "EncodeError",
    "HotStandbyFeedback", "Insert", "Message", "Origin", "Prepare", "PrimaryKeepalive", "Relation",
    "RelationColumn", "ReplwireError", "RollbackPrepared", "StandbyStatusUpdate", "StreamAbort",
    "StreamCommit", "StreamPrepare", "StreamStart", "StreamStop", "Timestamp", "Truncate", "TupleColumn",
    "Type", "Update", "WireMessage", "XLogData", "build", "build_envelope", "parse", "parse_envelope",
    "Assembler", "Change", "Changes", "Decoder", "INFINITY", "NEG_INFINITY", "RawValue", "StreamStateError",
    "Transaction", "TypedValuesUnavailable", "UNCHANGED_TOAST", "Faults", "ServerAddress", "serving",
]


def __getattr__(name: str) -> Any:
    """``Faults``, ``ServerAddress`` and ``serving`` (:mod:`replwire.codec.serve`), imported when first asked
    for: a command that serves nothing does not load the server."""
    if name in ("Faults", "ServerAddress", "serving"):
        from . import serve

        return getattr(serve, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
