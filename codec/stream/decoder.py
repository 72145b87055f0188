"""The stateful, sans-I/O stream decoder: pgoutput messages in, one at a time, in order.

Strategy: a pgoutput message cannot be parsed on its own -- whether it starts with the streamed Xid
depends on whether a Stream Start...Stop block is open, and its tuples mean something only next to the
last Relation message for their relation.  :class:`Decoder` keeps exactly that state (what a pgoutput consumer
must remember, as PostgreSQL's own ``src/backend/replication/logical/worker.c`` does):
where in the stream it is (:data:`TRANSITIONS`, a table from ``(state, event)`` to the next state, which is
also what the docs' state diagram is drawn from), the relation cache (a Relation replaces the previous one
for its OID), the Type cache, and the negotiated protocol version.  Every message is checked against that
state *before* the state changes, and anything out of order -- an event the table has no entry for, a DML
for an unknown relation, a tuple whose width differs from its Relation -- raises :class:`StreamStateError`
naming the message's position in the stream, its class and what was expected.  No sockets, no files: bytes
in, message objects out; :meth:`Decoder.feed_frame` takes walsender CopyData payloads too.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from ...schema.encodings import UTF8, text_codec
from ..errors import DecodeError, ReplwireError
from ..messages import (
    Begin,
    BeginPrepare,
    Delete,
    Insert,
    Message,
    PrimaryKeepalive,
    Relation,
    StreamStart,
    Truncate,
    Type,
    Update,
    WireMessage,
    XLogData,
)
from ..wire.fast import parse, parse_envelope

__all__ = ["IDLE", "PREPARE", "STATES", "STREAM", "TRANSACTION", "TRANSITIONS", "Decoder", "StreamStateError",
           "event_name", "state_diagram_svg"]

#: Between transactions (also before the first message).
IDLE = "idle"
#: Inside Begin ... Commit.
TRANSACTION = "transaction"
#: Inside Begin Prepare ... Prepare.
PREPARE = "prepare"
#: Inside Stream Start ... Stream Stop.
STREAM = "stream"
STATES = (IDLE, TRANSACTION, PREPARE, STREAM)

_BODY = ("Origin", "Relation", "Type", "Insert", "Update", "Delete", "Truncate", "Message(transactional)")

#: ``(state, event) -> next state``.  An event is a message class name, with Message split into
#: ``Message(transactional)`` and ``Message(non-transactional)``.  A pair missing from the table is out of order.
TRANSITIONS: dict[tuple[str, str], str] = {
    (IDLE, "Begin"): TRANSACTION,
    (IDLE, "BeginPrepare"): PREPARE,
    (IDLE, "StreamStart"): STREAM,
    (IDLE, "StreamCommit"): IDLE,
    (IDLE, "StreamAbort"): IDLE,
    (IDLE, "StreamPrepare"): IDLE,
    (IDLE, "CommitPrepared"): IDLE,
    (IDLE, "RollbackPrepared"): IDLE,
    (IDLE, "Message(non-transactional)"): IDLE,
    **{(TRANSACTION, event): TRANSACTION for event in _BODY},
    (TRANSACTION, "Commit"): IDLE,
    **{(PREPARE, event): PREPARE for event in _BODY},
    (PREPARE, "Prepare"): IDLE,
    **{(STREAM, event): STREAM for event in _BODY},
    (STREAM, "StreamStop"): IDLE,
}

#: The tuples each row change may carry, by class: what :meth:`Decoder.accept` checks against the Relation.
_TUPLES = {cls: tuple(p for p in ("key", "old", "new") if p in cls.__slots__) for cls in (Insert, Update, Delete)}
#: The states a row change leaves as they are (every state but idle), from :data:`TRANSITIONS`.
_ROW_STATES = frozenset(s for s in STATES if all(TRANSITIONS.get((s, cls.__name__)) == s for cls in _TUPLES))

#: What opens and what closes each non-idle state (for error messages).
_CLOSER = {TRANSACTION: "Commit", PREPARE: "Prepare", STREAM: "StreamStop"}


def event_name(message: WireMessage) -> str:
    """The :data:`TRANSITIONS` event of a message."""
    name = type(message).__name__
    if isinstance(message, Message):
        return "Message(transactional)" if message.is_transactional else "Message(non-transactional)"
    return name


class StreamStateError(ReplwireError, ValueError):
    """A well-formed message that is out of order for the stream so far.

    Attributes:
        index: the message's position in the stream (0 for the first message fed).
        message: the message class name.
        state: the decoder's state when the message arrived (``idle``, ``transaction``, ``prepare``,
            ``stream``).
        reason: what is wrong.
    """

    def __init__(self, reason: str, *, index: int, message: str, state: str) -> None:
        self.reason = reason
        self.index = index
        self.message = message
        self.state = state
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"message #{self.index} ({self.message}, in state {self.state!r}): {self.reason}"

    def __reduce__(self) -> tuple[Callable[..., StreamStateError], tuple[object, ...]]:
        return (_rebuild_state_error, (self.reason, self.index, self.message, self.state))


def _rebuild_state_error(reason: str, index: int, message: str, state: str) -> StreamStateError:
    return StreamStateError(reason, index=index, message=message, state=state)


def _expected(state: str) -> str:
    events = sorted(e for (s, e) in TRANSITIONS if s == state)
    return ", ".join(events)


class Decoder:
    """Feed pgoutput messages one at a time; get message objects back, checked against the stream state.

    >>> from replwire.codec import Decoder
    >>> dec = Decoder(proto_version=2)
    >>> dec.feed(bytes.fromhex("53000002f001")).xid, dec.in_stream
    (752, True)

    Attributes:
        proto_version: the protocol version negotiated with ``START_REPLICATION`` (1-4).
        encoding: the Python codec of the connection's client encoding, which the messages' Strings are in
            (given as PostgreSQL's name or Python's, see :func:`replwire.codec.parse`; UTF-8 by default).
        state: ``idle``, ``transaction``, ``prepare`` or ``stream`` (see :data:`TRANSITIONS`).
        relations: the last Relation message per relation OID.
        types: the last Type message per type OID.
        index: how many messages have been fed (the next message's position).
        stream_xid: the top-level xid of the open Stream Start block, else ``None``.
        xid: the xid of the open Begin / Begin Prepare transaction, else ``None``.
        opened_at: the position (:attr:`index`) of the message that opened the current transaction, prepare
            or stream block, else ``None`` (named in errors; part of the state a reader resumes from).
        last_message: the message the last successful :meth:`feed` (or :meth:`feed_frame`) returned.
        last_data: its bytes (``None`` when it came through :meth:`accept`).
        types_version: increases whenever a Type message changes :attr:`types`.
    """

    def __init__(self, proto_version: int = 4, encoding: str = UTF8) -> None:
        if isinstance(proto_version, bool) or not isinstance(proto_version, int) or not 1 <= proto_version <= 4:
            raise ValueError(f"proto_version must be an int from 1 to 4, got {proto_version!r}")
        self.proto_version = proto_version
        self.encoding = text_codec(encoding)
        self.state = IDLE
        self.relations: dict[int, Relation] = {}
        self.types: dict[int, Type] = {}
        self.types_version = 0
        self.index = 0
        self.stream_xid: int | None = None
        self.xid: int | None = None
        self.last_message: WireMessage | None = None
        self.last_data: bytes | None = None
        self.opened_at: int | None = None
        self._parse: Callable[..., WireMessage] = parse
        self._parse_envelope: Callable[..., WireMessage] = parse_envelope

    def resume(self) -> None:
        """The messages that follow come from a stream resumed at a position the server confirmed: whatever
        was open (a transaction, a prepare, a stream block) will be sent again from its start, so forget it.
        The relation and type caches stay."""
        self.state = IDLE
        self.stream_xid = self.xid = self.opened_at = None

    def remember(self, message: Relation | Type) -> None:
        """Take a Relation or Type message into the caches, as accepting it in a stream does (also for the
        ones a capture file's snapshot section holds, outside any transaction)."""
        if isinstance(message, Relation):
            self.relations[message.relation_id] = message
        else:
            if self.types.get(message.type_id) != message:
                self.types_version += 1
            self.types[message.type_id] = message

    def skip(self, count: int) -> None:
        """Count ``count`` messages that were passed over without being fed -- row changes a reader knows
        leave the state as it is -- so that the positions of the messages fed after them stay right."""
        if count < 0:
            raise ValueError(f"cannot skip a negative number of messages ({count})")
        self.index += count

    @property
    def in_stream(self) -> bool:
        """Whether a Stream Start ... Stream Stop block is open (the next message carries the streamed Xid)."""
        return self.state == STREAM

    def feed(self, data: bytes) -> WireMessage:
        """Parse one pgoutput message (the bytes of one XLogData payload or SQL-interface row), check it
        against the stream state, update the state and caches, and return it.

        Raises :class:`~replwire.codec.DecodeError` for bytes that are not a message (the stream state is
        unchanged) and :class:`StreamStateError` for a message that is out of order.
        """
        try:
            message = self._parse(data, proto_version=self.proto_version, in_stream=self.state == STREAM,
                                  encoding=self.encoding)
        except DecodeError as error:
            if hasattr(error, "add_note"):
                error.add_note(f"message #{self.index} of the stream (decoder state {self.state!r})")
            raise
        self.accept(message)
        self.last_data = bytes(data)
        return message

    def feed_frame(self, payload: bytes) -> WireMessage:
        """Take one CopyData payload from a walsender.  An XLogData frame's message is fed (and left in
        :attr:`last_message`; a zero-length payload, which PG10-14 can send, feeds nothing and leaves it
        ``None``); the frame itself is returned, keepalives as they are."""
        frame = self._parse_envelope(payload, sender="server")
        if isinstance(frame, XLogData):
            if frame.data:
                self.feed(frame.data)
            else:
                self.last_message = self.last_data = None
        elif not isinstance(frame, PrimaryKeepalive):  # pragma: no cover - the envelope has no third kind yet
            raise DecodeError(f"unexpected server frame {type(frame).__name__}", offset=0, tag=frame.tag)
        return frame

    def fail(self, message: WireMessage, reason: str, *, index: int | None = None) -> StreamStateError:
        """The error for ``message`` (at position ``index``, by default the current one) being out of order."""
        return StreamStateError(reason, index=self.index if index is None else index,
                                message=type(message).__name__, state=self.state)

    def accept(self, message: WireMessage) -> WireMessage:
        """Run an already parsed message through the state checks and caches (what :meth:`feed` does after
        parsing).  Use it for messages from elsewhere, e.g. built ones."""
        if message.__class__ in _TUPLES and self.state in _ROW_STATES and self._row_problem(message) is None:
            # the commonest message, where it may come and fitting its Relation: nothing else changes
            self.index += 1
            self.last_message = message
            self.last_data = None
            return message
        if not isinstance(message, WireMessage) or message.spec.layer != "logical":
            raise TypeError(f"expected a pgoutput message object, got {type(message).__name__}")
        event = event_name(message)
        following = TRANSITIONS.get((self.state, event))
        if following is None:
            raise self.fail(message, self._out_of_order(event))
        self._check(message)
        # -- accepted: update the state and caches
        if isinstance(message, (Relation, Type)):
            self.remember(message)
        if following != self.state:
            if following == IDLE:
                self.stream_xid = self.xid = self.opened_at = None
            else:
                self.opened_at = self.index
                if isinstance(message, StreamStart):
                    self.stream_xid = message.xid
                else:
                    assert isinstance(message, (Begin, BeginPrepare))  # the other openers (TRANSITIONS)
                    self.xid = message.xid
        self.state = following
        self.index += 1
        self.last_message = message
        self.last_data = None
        return message

    def _out_of_order(self, event: str) -> str:
        if self.state == IDLE:
            if event in _BODY:
                return f"{event} outside a transaction (expected one of: {_expected(IDLE)})"
            if event in _CLOSER.values():
                return f"{event} without an open {_opener(event)}"
            return f"{event} cannot come here (expected one of: {_expected(IDLE)})"
        opened = f"opened by message #{self.opened_at}"
        return (f"{event} inside an open {self.state} ({opened}); expected one of: {_expected(self.state)}, "
                f"and {_CLOSER[self.state]} to close it")

    def _check(self, message: WireMessage) -> None:
        """Checks that need the caches (the transition table has already allowed the event)."""
        if isinstance(message, StreamStart) and self.proto_version < 2:
            raise self.fail(message, f"streaming needs protocol 2 or later (this stream is protocol "
                                     f"{self.proto_version})")
        if isinstance(message, (Insert, Update, Delete)):  # (a subclass of one too)
            problem = self._row_problem(message)
            if problem is not None:
                raise self.fail(message, problem)
        elif isinstance(message, Truncate):
            unknown = [r for r in message.relation_ids if r not in self.relations]
            if unknown:
                raise self.fail(message, f"relation{'s' if len(unknown) > 1 else ''} "
                                         f"{', '.join(map(str, unknown))} unknown: no Relation message came before")

    def _row_problem(self, message: Insert | Update | Delete) -> str | None:
        """What is wrong with a row change given the relation cache: an unknown relation, or a tuple whose
        width is not its Relation's (``None``: nothing)."""
        relation = self.relations.get(message.relation_id)
        if relation is None:
            return f"relation {message.relation_id} is unknown: no Relation message for it came before"
        width = len(relation.columns)
        for part in _TUPLES.get(message.__class__, ("key", "old", "new")):
            columns = getattr(message, part, None)
            if columns is not None and len(columns) != width:
                return (f"{part} tuple has {len(columns)} columns but Relation "
                        f"{relation.namespace or 'pg_catalog'}.{relation.name} ({message.relation_id}) has {width}")
        return None


def _opener(closer: str) -> str:
    return {"Commit": "Begin", "Prepare": "BeginPrepare", "StreamStop": "StreamStart"}.get(closer, "block")


# ---------------------------------------------------------------------------------------------------------
# the state diagram, drawn from TRANSITIONS

def state_diagram_svg() -> str:
    """An SVG drawing of :data:`TRANSITIONS`: the idle state on the left with its self-loop events listed
    inside, every other state on the right, and one arrow per state change labelled with its events."""
    loops: dict[str, list[str]] = {s: [] for s in STATES}
    moves: dict[tuple[str, str], list[str]] = {}
    for (state, event), following in TRANSITIONS.items():
        if state == following:
            loops[state].append(event)
        else:
            moves.setdefault((state, following), []).append(event)
    others = [s for s in STATES if s != IDLE]
    row, top = 150, 30
    width, height = 760, top + row * len(others) + 40
    idle_x, idle_w = 20, 250
    box_x, box_w, box_h = 500, 240, 96
    out = [f'<svg class="replwire-states" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="Decoder state diagram">',
           '<defs><marker id="state-arrow" markerWidth="10" markerHeight="10" refX="9" refY="5" orient="auto" '
           'markerUnits="userSpaceOnUse"><path d="M0,0 L10,5 L0,10 z" fill="#37474f"/></marker></defs>']

    def box(x: float, y: float, w: float, h: float, name: str, lines: list[str]) -> None:
        out.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{w}" height="{h}" rx="10" fill="#e3f2fd" '
                   f'stroke="#37474f" stroke-width="1.5"/>')
        out.append(f'<text x="{x + w / 2:.0f}" y="{y + 22:.0f}" font-size="15" font-weight="bold" '
                   f'text-anchor="middle" fill="#102027">{name}</text>')
        for k, line in enumerate(lines):
            out.append(f'<text x="{x + w / 2:.0f}" y="{y + 42 + 14 * k:.0f}" font-size="11" text-anchor="middle" '
                       f'fill="#102027">{html.escape(line)}</text>')

    def loop_lines(state: str) -> list[str]:
        events = loops[state]
        if sorted(events) == sorted(_BODY):
            return ["stays on: the body messages", "(Origin, Relation, Type, Insert, Update,",
                    "Delete, Truncate, Message(transactional))"]
        return ["stays on:", *events] if events else []

    idle_h = row * len(others) - 40
    box(idle_x, top, idle_w, idle_h, IDLE, loop_lines(IDLE))
    for i, state in enumerate(others):
        y = top + row * i + (row - 40 - box_h) / 2
        box(box_x, y, box_w, box_h, state, loop_lines(state))
        middle = y + box_h / 2
        for source, target, dy, anchor in ((IDLE, state, -14, -6), (state, IDLE, 14, 18)):
            events = moves.get((source, target), [])
            if not events:
                continue
            x1, x2 = (idle_x + idle_w, box_x) if source == IDLE else (box_x, idle_x + idle_w)
            out.append(f'<line x1="{x1}" y1="{middle + dy:.0f}" x2="{x2}" y2="{middle + dy:.0f}" stroke="#37474f" '
                       f'stroke-width="1.5" marker-end="url(#state-arrow)"/>')
            out.append(f'<text x="{(x1 + x2) / 2:.0f}" y="{middle + dy + anchor:.0f}" font-size="12" '
                       f'text-anchor="middle" fill="currentColor">{html.escape(" / ".join(events))}</text>')
    out.append("</svg>")
    return "".join(out)
