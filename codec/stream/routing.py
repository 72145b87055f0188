"""Which transaction each message belongs to, and what becomes of each transaction.

Strategy: one small state machine, shared by everything that turns a message stream into committed
transactions -- the single-process :class:`~replwire.codec.Assembler`, and the split decoding of
:mod:`replwire.codec.split` that the Spark data source runs in parallel.  A transaction is named by a
*key*: the stream position of the message that opened it (its Begin, Begin Prepare, or first Stream
Start).  Positions are whatever the caller counts in -- the assembler counts messages, the split decoder
uses ``(input << 48) | byte offset`` -- so two readers that start at different places in the same stream
still give every transaction the same key.

:meth:`Router.route` takes one message the :class:`~replwire.codec.Decoder` has just accepted and returns
one :class:`Route` saying what it means for the buffers: a change to append (with its subtransaction xid),
a transaction opened, committed, prepared, dropped, a subtransaction dropped, an origin, a lone
(non-transactional) logical message -- or ``None`` for messages that only feed the decoder's caches.
The router holds no changes; what to keep is the caller's business.  Its state is small and picklable
(:meth:`Router.state`), which is what lets a reader start in the middle of a stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    Prepare,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    Truncate,
    Update,
    WireMessage,
)
from .decoder import Decoder

__all__ = ["CHANGE", "COMMIT", "DROP", "DROP_SUBXACT", "LONE", "OPEN", "ORIGIN", "PREPARE", "Route", "Router"]

#: Route kinds.
CHANGE, LONE, OPEN, ORIGIN, COMMIT, PREPARE, DROP, DROP_SUBXACT = (
    "change", "lone", "open", "origin", "commit", "prepare", "drop", "drop_subxact")

DML = (Insert, Update, Delete, Truncate, Message)


@dataclass(slots=True)
class Route:  # not frozen: a frozen dataclass is three times as slow to make, and one is made per message
    """What one message means for the transaction buffers.

    ``kind`` is one of the module's constants; ``key`` the transaction it concerns (``None`` for
    :data:`LONE`); ``value``: the subtransaction xid of a :data:`CHANGE` or :data:`DROP_SUBXACT`, the
    ``(name, origin_lsn)`` of an :data:`ORIGIN`, the Commit / Stream Commit / Commit Prepared message of a
    :data:`COMMIT`, the Prepare / Stream Prepare of a :data:`PREPARE`, the key of the streamed transaction
    an :data:`OPEN` replaces (its first block sent again after a resume), whether an :data:`OPEN` is
    streamed is ``streamed``.
    """

    kind: str
    key: int | None = None
    value: Any = None
    streamed: bool = False


class Router:
    """Tracks the open, streamed and prepared transactions of one stream by key (see the module docstring).

    ``decoder`` must be the decoder that accepted each message just before it is routed.  A Stream Commit,
    Stream Prepare or Commit Prepared of a transaction the router never saw open is out of order
    (:class:`~replwire.codec.stream.decoder.StreamStateError`) -- unless ``strict`` is false: then it routes to
    ``None``, for a reader of a stream that may start anywhere (``replwire serve`` plays a capture whose slot
    prepared a transaction before the capture started, and reads each captured session on its own).
    """

    def __init__(self, decoder: Decoder, *, strict: bool = True) -> None:
        self.decoder = decoder
        self.strict = strict
        self.current: int | None = None  # the open Begin...Commit or Begin Prepare...Prepare transaction
        self.current_xid: int | None = None
        self.streams: dict[int, int] = {}  # open streamed transactions: top-level xid -> key
        self.prepared: dict[str, int] = {}  # prepared transactions waiting for Commit/Rollback Prepared

    def route(self, message: WireMessage, position: int, in_stream: bool) -> Route | None:
        """Route one accepted message; ``in_stream`` is whether a stream block was open when it arrived."""
        if isinstance(message, DML):
            if isinstance(message, Message) and not message.is_transactional:
                return Route(LONE)
            if in_stream:
                assert self.decoder.stream_xid is not None  # in a stream block: its Stream Start set the xid
                return Route(CHANGE, self.streams[self.decoder.stream_xid], message.xid)
            return Route(CHANGE, self.current, self.current_xid)
        if isinstance(message, (Begin, BeginPrepare)):
            self.current, self.current_xid = position, message.xid
            return Route(OPEN, position)
        if isinstance(message, StreamStart):
            replaced = self.streams.get(message.xid) if message.is_first_segment else None
            if replaced is not None or message.xid not in self.streams:
                self.streams[message.xid] = position
                return Route(OPEN, position, replaced, streamed=True)
            return None
        if isinstance(message, Origin):
            key: int | None
            if self.decoder.in_stream:
                assert self.decoder.stream_xid is not None  # in a stream block: its Stream Start set the xid
                key = self.streams[self.decoder.stream_xid]
            else:
                key = self.current
            return Route(ORIGIN, key, (message.name, message.origin_lsn)) if key is not None else None
        if isinstance(message, Commit):
            key, self.current, self.current_xid = self.current, None, None
            return Route(COMMIT, key, message)
        if isinstance(message, Prepare):
            key, self.current, self.current_xid = self.current, None, None
            assert key is not None  # the decoder accepted the Prepare: a Begin Prepare opened the transaction
            self.prepared[message.gid] = key
            return Route(PREPARE, key, message)
        if isinstance(message, StreamCommit):
            key = self._take_stream(message)
            return Route(COMMIT, key, message) if key is not None else None
        if isinstance(message, StreamPrepare):
            key = self._take_stream(message)
            if key is None:
                return None
            self.prepared[message.gid] = key
            return Route(PREPARE, key, message)
        if isinstance(message, StreamAbort):
            key = self.streams.get(message.xid)
            if key is None:  # an abort of a transaction that streamed nothing we saw: nothing to drop
                return None
            if message.subxid == message.xid:
                del self.streams[message.xid]
                return Route(DROP, key)
            return Route(DROP_SUBXACT, key, message.subxid)
        if isinstance(message, CommitPrepared):
            key = self.prepared.pop(message.gid, None)
            if key is None:
                if not self.strict:
                    return None
                raise self.decoder.fail(message, index=self.decoder.index - 1, reason=(
                    f"CommitPrepared for gid {message.gid!r}, which was never prepared in this stream (its "
                    f"Prepare came before the decoder started?)"))
            return Route(COMMIT, key, message)
        if isinstance(message, RollbackPrepared):
            key = self.prepared.pop(message.gid, None)
            return Route(DROP, key) if key is not None else None
        return None

    def _take_stream(self, message: StreamCommit | StreamPrepare) -> int | None:
        key = self.streams.pop(message.xid, None)
        if key is None and self.strict:
            raise self.decoder.fail(message, index=self.decoder.index - 1, reason=(
                f"{type(message).__name__} for xid {message.xid}, which has no streamed changes here (no Stream "
                f"Start for it came before)"))
        return key

    def resume(self) -> int | None:
        """The stream goes on from a resumed capture: the open (non-streamed) transaction will be sent again
        from its start, so it is dropped; its key is returned.  Also resumes the decoder."""
        key, self.current, self.current_xid = self.current, None, None
        self.decoder.resume()
        return key

    # -- a reader that starts in the middle of a stream ----------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything a router and its decoder need to go on from here (picklable: plain values and
        message objects)."""
        d = self.decoder
        return {"decoder": {"proto_version": d.proto_version, "encoding": d.encoding, "state": d.state,
                            "relations": dict(d.relations), "types": dict(d.types), "types_version": d.types_version,
                            "index": d.index, "stream_xid": d.stream_xid, "xid": d.xid, "opened_at": d.opened_at},
                "current": self.current, "current_xid": self.current_xid, "streams": dict(self.streams),
                "prepared": dict(self.prepared)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Router:
        """A router (with its own decoder) that goes on from :meth:`state`."""
        decoder = Decoder(proto_version=state["decoder"]["proto_version"])
        for name, value in state["decoder"].items():
            setattr(decoder, name, dict(value) if isinstance(value, dict) else value)
        router = cls(decoder)
        router.current, router.current_xid = state["current"], state["current_xid"]
        router.streams, router.prepared = dict(state["streams"]), dict(state["prepared"])
        return router
