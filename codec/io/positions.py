"""What a captured message completes, read from its bytes without parsing it: the positions live capture
acknowledges.

Strategy: a capture acknowledges the end LSN of a commit, a prepare or a rollback, or the LSN of a
non-transactional message, and needs to know whether anything is in flight (a transaction, or a streamed
transaction between its blocks).  Parsing every message for that (a :class:`~replwire.codec.stream.decoder.
Decoder` feed) costs more than storing it, so :class:`PositionTracker` reads only the tag, the one LSN field
and, for Stream messages, the xid -- at offsets derived once from the walker's layouts of the declarations
(the fixed-size fields before them, with the streamed Xid counted where its condition holds) -- and follows
the stream state with the decoder's own :data:`~replwire.codec.stream.decoder.TRANSITIONS` table.  Which
field a message completes is :data:`COMPLETES`, by message name; :func:`message_completes` reads the same
fields from parsed messages.  A message the plan cannot read (unknown tag, too short, out of order) is
parsed after all, so its error is the parser's own, or a :class:`~replwire.codec.stream.decoder.
StreamStateError` naming it.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from ...schema import LOGICAL
from ...schema.message_spec import MessageSpec
from .. import walker
from ..messages import Message, WireMessage
from ..scalars import LSN
from ..stream.decoder import IDLE, STATES, STREAM, TRANSITIONS, StreamStateError
from ..wire.fast import parse

__all__ = ["COMPLETES", "PositionTracker", "Progress", "message_completes"]

#: The field holding the position each message completes, by message name (a Message only when it is not
#: transactional).
COMPLETES = {"Commit": "end_lsn", "StreamCommit": "end_lsn", "Prepare": "end_lsn", "StreamPrepare": "end_lsn",
             "CommitPrepared": "end_lsn", "RollbackPrepared": "rollback_end_lsn", "Message": "lsn"}
#: A Stream Start opens its xid's streamed transaction; these close it (a Stream Abort only when its subxid
#: is the transaction itself).
_OPENS, _CLOSES = "StreamStart", ("StreamCommit", "StreamPrepare", "StreamAbort")
#: The Message flag bit that makes it transactional (PostgreSQL's docs, Logical Replication Message Formats:
#: Message; ``logicalrep_write_message`` in ``src/backend/replication/logical/proto.c``).
_TRANSACTIONAL = 1


def message_completes(message: WireMessage) -> LSN | None:
    """The position a parsed message completes: once it is durable, the server may forget everything
    before it."""
    name = COMPLETES.get(type(message).__name__)
    if name is None or (isinstance(message, Message) and message.is_transactional):
        return None
    value: LSN = getattr(message, name)
    return value


@dataclass(frozen=True)
class _Entry:
    """How to read one message kind in one context: its name, where its position and xid fields are."""

    name: str
    position: int | None  # offset of the 8-byte LSN it completes
    xid: int | None  # offset of the 4-byte xid (Stream messages)
    subxid: int | None
    flags: int | None  # offset of a Message's flags byte
    size: int  # the bytes the reads above need


def _on_params(cond: walker.Condition) -> bool:
    """Whether a condition reads only parse parameters (so it holds or not for a whole context)."""
    if isinstance(cond, walker.AnyOf):
        return all(_on_params(part) for part in cond.parts)
    return (cond if isinstance(cond, walker.Ref) else cond.left).scope == "param"


def _offsets(spec: MessageSpec, params: dict[str, object]) -> dict[str, int]:
    """The offset of each field that starts at a fixed offset under ``params`` (until the first field whose
    size varies)."""
    out: dict[str, int] = {}
    offset = 0
    for f in walker.layout(spec).fields:
        node = f.node
        if isinstance(node, walker.When):
            if not _on_params(node.condition):
                break  # a condition on other fields: where the fields after it start varies
            if not walker.evaluate(node.condition, params, {}):
                continue
            node = node.node
        size = walker.fixed_size(node)
        out[f.name] = offset
        if size is None:
            break
        offset += size
    return out


def _entry(spec: MessageSpec, params: dict[str, object]) -> _Entry:
    at = _offsets(spec, params)
    name = spec.name
    field = COMPLETES.get(name)
    if field is not None and field not in at:
        raise walker.UnknownConstruct(f"{name}.{field} is not at a fixed offset")
    position = at[field] if field is not None else None
    needs_xid = name == _OPENS or name in _CLOSES
    if needs_xid and "xid" not in at:
        raise walker.UnknownConstruct(f"{name}.xid is not at a fixed offset")
    xid = at["xid"] if needs_xid else None
    subxid = at.get("subxid") if name == "StreamAbort" else None
    flags = at["flags"] if name == "Message" else None
    ends = [o + n for o, n in ((position, 8), (xid, 4), (subxid, 4), (flags, 1)) if o is not None]
    return _Entry(name, position, xid, subxid, flags, max(ends, default=1))


def _plan(proto_version: int, in_stream: bool) -> dict[int, _Entry]:
    params: dict[str, object] = {"proto_version": proto_version, "in_stream": in_stream}
    return {ord(tag): _entry(spec, params) for tag, spec in LOGICAL.items() if spec.min_proto <= proto_version}


_LSN = struct.Struct(">Q").unpack_from
_XID = struct.Struct(">L").unpack_from


class _Step(NamedTuple):
    """One message kind in one state: how to read it and where it leads (unpacked whole where it is used)."""

    size: int  # the bytes the reads below need
    following: str | None  # the next state (None: the kind cannot come in this state)
    position: int | None  # offset of the LSN it completes
    xid: int | None
    subxid: int | None
    flags: int | None  # offset of a Message's flags byte
    transactional: str | None  # the next state when the Message is transactional
    opens: bool  # it opens a streamed transaction (a Stream Start)


def _steps(proto_version: int) -> dict[str, dict[int, _Step]]:
    """For each stream state, the messages that may come in it and how to read them."""
    out: dict[str, dict[int, _Step]] = {}
    for state in STATES:
        plan = _plan(proto_version, state == STREAM)
        steps: dict[int, _Step] = {}
        for tag, e in plan.items():
            if e.flags is not None:
                following = TRANSITIONS.get((state, "Message(non-transactional)"))
                transactional = TRANSITIONS.get((state, "Message(transactional)"))
            else:
                following, transactional = TRANSITIONS.get((state, e.name)), None
            if following is not None or transactional is not None:
                steps[tag] = _Step(e.size, following, e.position, e.xid, e.subxid, e.flags, transactional,
                                   e.name == _OPENS)
        out[state] = steps
    return out


def _plain(steps: dict[str, dict[int, _Step]]) -> dict[str, dict[int, int]]:
    """For each state, the messages that change nothing the tracker follows (the state stays, no position, no
    xid, not a Message) -- the row changes inside a transaction, mostly -- with the bytes each needs."""
    return {state: {tag: step.size for tag, step in here.items()
                    if step.following == state and step.position is None and step.xid is None and step.flags is None}
            for state, here in steps.items()}


class PositionTracker:
    """Follows a pgoutput stream by its bytes just enough to know what each message completes and whether
    anything is in flight (see the module's docstring).  ``idle``: no transaction open and no streamed
    transaction between its blocks; ``index``: how many messages were fed."""

    def __init__(self, proto_version: int, encoding: str = "UTF8") -> None:
        self.proto_version, self.encoding = proto_version, encoding
        self._steps = _steps(proto_version)
        self._plains = _plain(self._steps)
        self._state = IDLE
        self._here = self._steps[IDLE]
        self._plain = self._plains[IDLE]
        self.open_streams: set[int] = set()
        self.index = 0

    @property
    def idle(self) -> bool:
        return self._state == IDLE and not self.open_streams

    @property
    def in_stream(self) -> bool:
        """Whether the messages fed next are inside a Stream Start...Stop block."""
        return self._state == STREAM

    def feed(self, data: bytes) -> int | None:
        """The position ``data`` (one pgoutput message) completes, as an ``int``, or ``None``."""
        if not data:  # PostgreSQL 10 to 14 can send an empty payload
            return None
        size = self._plain.get(data[0])
        if size is not None and len(data) >= size:  # (a shorter one fails below, with its error)
            self.index += 1
            return None
        step = self._here.get(data[0])
        if step is None or len(data) < step.size:
            self._fail(data)
            return None  # (not reached)
        _, following, position, xid, subxid, flags, transactional, opens = step
        if flags is not None and data[flags] & _TRANSACTIONAL:
            following, position = transactional, None
        if following is None:
            self._fail(data)
        self.index += 1
        if following != self._state:
            self._state = following  # type: ignore[assignment]
            self._here = self._steps[following]  # type: ignore[index]
            self._plain = self._plains[following]  # type: ignore[index]
        if xid is not None:
            number = _XID(data, xid)[0]
            if opens:
                self.open_streams.add(number)
            elif subxid is None or _XID(data, subxid)[0] == number:
                self.open_streams.discard(number)
        if position is None:
            return None
        completed: int = _LSN(data, position)[0]
        return completed

    def _fail(self, data: bytes) -> None:
        """Raise the parser's error for ``data`` or, when it parses, a StreamStateError."""
        state = self._state
        message = parse(data, proto_version=self.proto_version, in_stream=state == STREAM, encoding=self.encoding)
        raise StreamStateError(f"{type(message).__name__} cannot come in state {state!r}", index=self.index,
                               message=type(message).__name__, state=state)


@dataclass
class Progress:
    """What a running capture has done so far: what it received, made durable and acknowledged (by the positions
    above), and where the server's WAL ends."""

    messages: int = 0
    bytes: int = 0
    transactions: int = 0
    current_lsn: LSN = LSN(0)
    flushed_lsn: LSN = LSN(0)
    server_lsn: LSN = LSN(0)
    started: float = field(default_factory=time.monotonic)

    @property
    def lag_bytes(self) -> int:
        """How far the server's WAL end is ahead of what this capture has made durable."""
        return max(0, int(self.server_lsn) - int(self.flushed_lsn))
