"""The stream side of a backfill: which changes of a table fall inside a chunk's watermark window, and the
chunk's rows with those changes applied.

A backfill copies a table in chunks while the capture streams.  Each chunk is read in a short repeatable-read
transaction whose snapshot S the reader records (``pg_current_snapshot()``), between two non-transactional
logical messages, the watermarks L (low) and H (high), which pgoutput sends at their own WAL position:
after every transaction whose commit record comes before them and before every one whose commit record comes
after.  The rows the chunk read are then written into the capture at H, as an upsert of each key.  For that
to be exact, each chunk row must be the key's row *at H*; :class:`Window` makes it so.  It is fed every
pgoutput message of the stream, in order, and:

* buffers, per open transaction, the inserts, updates and deletes of the tracked tables (plain transactions
  from Begin to Commit; streamed ones per xid, dropping a subtransaction's changes at its Stream Abort and all
  of them at the transaction's own; two-phase ones from Begin Prepare until Commit Prepared, dropped at
  Rollback Prepared).  A streamed or prepared transaction that was already open when the table was tracked
  is *untracked*: its earlier changes are unknown, so it counts as touching the table;
* follows the watermarks of its own session: a *start* message (``k: "start"``, ``t``: the relation OID)
  starts a table's run at position B; *low* opens a window and *high* closes it;
* on each commit after B that touched a tracked table, records its xid (``touched``, kept while a later
  snapshot could still miss it) and, when a window is open, the transaction and its changes in the window
  list W, in commit order; it also keeps the xids of all commits after B until the run's first chunk is
  accepted (guard 2);
* at :meth:`Window.close` (the caller's, after H) decides with S:

  - **redo** when a transaction that touched the table committed after B but before L -- in an earlier
    window too -- and S does not see it (guard 1: WAL commit order is not visibility order, so a chunk can
    miss a commit that precedes L); when the run's first chunk has an in-progress transaction that
    ``pg_xact_status`` called committed but that did not commit after B (guard 2: it committed before B,
    where nothing was tracked); when an untracked transaction of W is one S does not see; when one of W's
    invisible updates names its row by an unchanged TOASTed key; or when their changes have a shape
    (Relation) other than the chunk's (the caller re-reads the table and tracks it again);
  - **truncated** when a TRUNCATE of the table committed after B: the run ends, the stream has the rest;
  - **accepted** otherwise, with the rows: the chunk's rows with the changes of W's transactions that S does
    not see applied in stream order, as the fold applies them (an insert sets a key, an update moves or
    replaces its row with unchanged TOASTed values taken from the chunk's row, a delete removes it).  Keys are
    the key columns' raw bytes, exactly as both sides carry them (the server's output text in text mode, its
    send format in binary mode), so no value is decoded.  When nothing of W needs applying -- the common case
    -- the rows come back as given, neither parsed nor copied.  A transaction whose changes passed the
    window's memory limit keeps only the keys they touched: those keys are dropped from the rows, left to the
    stream, and read again (the refetch list).

Per-key, the transactions S sees are a prefix of those that touched the key in stream order (they hold the
key's row or index lock until they are visible), so those S misses and that commit before H are exactly W's
invisible ones, once the guards have excluded any before L.  A key move whose new image has unchanged TOASTed
values and whose old row was not in the chunk cannot be completed from the stream: its new key goes on the
refetch list, as does every such move committed during the run outside a window.

The watermark content is JSON: ``{"v": 1, "k": "start"|"low"|"high", "s": SESSION, "r": RUN, "t": OID,
"c": CHUNK}`` under the prefix :data:`PREFIX`; a transactional ``{"v": 1, "k": "xid", "s": SESSION}`` is
reported at its transaction's commit (the run's start waits for it).  Messages of other sessions -- every
slot of the database sees every message -- are ignored.  One :class:`Window` serves one session: after a
reconnection the stream is sent again from a confirmed position and the capture starts a new session.

Use, per session (feed it from the session's first message): :meth:`Window.track` a table (its Relation as
the chunks read it), emit B, wait for the xid marker's commit and for :meth:`Window.under_way` to be False
(an untracked transaction that commits after the first chunk could have moved a key out of the refetch
list's sight); then per chunk emit L, read, emit H, and when :meth:`Window.feed` returns the high
watermark call :meth:`Window.close` with the rows and the snapshot.  At the end of a run,
:meth:`Window.take_refetch` gives the keys still to read again, and :meth:`Window.untrack` ends it.

Strategy: sans-I/O and cheap on the messages it does not need.  Only the tag, the relation OID (at an offset
derived from the declarations) and, for transaction control, a parse of the control message are read; row
changes are parsed only for tracked tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from struct import Struct
from typing import Any

from ...schema import LOGICAL
from .. import walker
from ..messages import (
    Begin,
    BeginPrepare,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    Truncate,
    TupleColumn,
    Update,
)
from ..wire.fast import parse
from .pg_snapshot import Snapshot

__all__ = ["PREFIX", "Key", "Verdict", "Watermark", "Window"]

#: The logical decoding message prefix of backfill watermarks and markers.
PREFIX = "replwire.backfill"

#: A row's identity: the raw bytes of its key columns, in the table's column order.
Key = tuple[bytes | None, ...]
Row = Sequence[TupleColumn]

_MASK32 = 0xFFFFFFFF
_UINT32 = Struct(">L").unpack_from


@dataclass(frozen=True)
class Watermark:
    """A watermark or marker of this session seen in the stream (what :meth:`Window.feed` returns).

    ``kind`` is ``"start"``, ``"low"``, ``"high"`` or ``"xid"`` (the commit of the transaction that carried
    the transactional marker); ``lsn`` its position (the message's own LSN; for ``"xid"`` the ``lsn`` the
    commit was fed with); ``run``, ``chunk``, ``relation_id`` from the content when present; ``content`` the
    whole JSON object."""

    kind: str
    lsn: int
    run: Any
    chunk: Any
    relation_id: int | None
    content: dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    """What :meth:`Window.close` decided for a chunk.

    ``outcome``: ``"accepted"`` (write ``rows`` at H), ``"redo"`` (read the chunk again; ``reason`` says why:
    ``"guard-1"``, ``"guard-2"``, ``"untracked"``, ``"toasted-key"``, ``"relation"``) or ``"truncated"`` (the
    table was truncated after B: the run ends, write nothing).  ``rows``: the chunk's rows (the very sequence
    given when nothing was applied) or, when ``applied`` window changes were applied, new rows.
    ``refetch``: keys to read again at the end of the run (key moves whose new image has unchanged TOASTed
    values), collected since the previous accepted chunk; ``None`` stands for a NULL key column."""

    outcome: str
    reason: str | None = None
    rows: Sequence[Row] = ()
    refetch: tuple[Key, ...] = ()
    applied: int = 0

    @property
    def accepted(self) -> bool:
        return self.outcome == "accepted"


@dataclass
class _Event:
    """One buffered row change of a tracked table: the message, its (sub)transaction xid (streamed only) and
    the shape of the table the stream declared when it came."""

    message: Insert | Update | Delete
    subxid: int | None
    shape: tuple[Any, ...] | None

    @property
    def relation_id(self) -> int:
        return self.message.relation_id


@dataclass
class _Touch:
    """What is kept of a row change once its transaction's buffer passed the limit: the keys it touched (old
    and new), the new key of a key move with unchanged TOASTed values, and whether it named its row by an
    unchanged TOASTed key (then it has no keys)."""

    relation_id: int
    subxid: int | None
    keys: tuple[Key, ...]
    moved: Key | None
    toasted_key: bool


def _touch(event: _Event, keys: tuple[int, ...]) -> _Touch:
    m = event.message
    old = None if isinstance(m, Insert) else m.key if m.key is not None else m.old
    new_key = tuple(m.new[i].data for i in keys) if not isinstance(m, Delete) else None
    old_key = tuple(old[i].data for i in keys) if old is not None else None
    if isinstance(m, Update) and old is None and any(m.new[i].kind == "u" for i in keys):
        return _Touch(m.relation_id, event.subxid, (), None, True)
    moved = new_key if (isinstance(m, Update) and old_key is not None and old_key != new_key
                        and any(c.kind == "u" for c in m.new)) else None
    return _Touch(m.relation_id, event.subxid, tuple(dict.fromkeys(k for k in (old_key, new_key) if k is not None)),
                  moved, False)


@dataclass
class _Txn:
    """A transaction being buffered: where it was opened (the index of its Begin, Begin Prepare or first
    streamed block; ``complete`` False when its first block was not seen), its changes and TRUNCATEs of
    tracked tables, its aborted subtransactions, and whether it carried this session's xid marker."""

    opened: int
    complete: bool = True
    events: list[_Event | _Touch] = field(default_factory=list)
    size: int = 0  # the wire bytes of the changes buffered whole
    over: bool = False  # past the window's limit: changes kept as _Touch
    truncates: set[tuple[int, int | None]] = field(default_factory=set)  # (relation OID, subxid)
    aborted: set[int] = field(default_factory=set)
    marker: dict[str, Any] | None = None


@dataclass
class _Committed:
    """A committed transaction of a window: its top-level xid, its changes of the window's table, and
    whether it was already open when the table was tracked (``untracked``: its earlier changes are
    unknown)."""

    xid: int
    events: list[_Event | _Touch]
    untracked: bool


@dataclass
class _Run:
    """One table's run: its shape as the chunks read it, and what the guards need since B."""

    relation: Relation
    keys: tuple[int, ...]
    shape: tuple[Any, ...]
    tracked_at: int  # the index of the next message when the table was tracked
    started: int | None = None  # the index of B
    run: Any = None
    since_b: set[int] | None = None  # xids of all commits since B, until chunk 1 is accepted
    # xids of commits since B that touched the table (in a window or not), until a snapshot has seen them
    touched: set[int] = field(default_factory=set)
    truncated: bool = False
    refetch: dict[Key, None] = field(default_factory=dict)


@dataclass
class _Open:
    """The current window: its run and chunk, its L and H, the touched xids as of L (guard 1), and W."""

    run: _Run
    chunk: Any
    low: int
    before: frozenset[int]
    high: int | None = None
    committed: list[_Committed] = field(default_factory=list)


def _shape(relation: Relation) -> tuple[Any, ...]:
    """What a change's tuples depend on: each column's name, type, modifier and key flag."""
    return tuple((c.name, c.type_id, c.type_modifier, c.flags & 1) for c in relation.columns)


def _same_shape(event: _Event | _Touch, shape: tuple[Any, ...]) -> bool:
    """Whether a change's tuples fit the chunk's columns: the stream's Relation when one was seen, else the
    tuple's width."""
    if isinstance(event, _Touch):
        return True  # (keys only)
    if event.shape is not None:
        return event.shape == shape
    m = event.message
    tuple_ = m.new if not isinstance(m, Delete) else (m.key if m.key is not None else m.old)
    return tuple_ is not None and len(tuple_) == len(shape)


def _offset(tag: str, name: str, proto_version: int, in_stream: bool) -> int | None:
    """The offset of field ``name`` of message ``tag`` when it is at a fixed offset, else None (from the
    declarations' layout: the fixed-size fields before it, with the streamed Xid where its condition holds)."""
    params: dict[str, object] = {"proto_version": proto_version, "in_stream": in_stream}
    offset = 0
    for f in walker.layout(LOGICAL[tag]).fields:
        node = f.node
        if isinstance(node, walker.When):
            try:
                holds = walker.evaluate(node.condition, params, {})
            except KeyError:
                return None  # a condition on another field: what follows moves
            if not holds:
                continue
            node = node.node
        if f.name == name:
            return offset
        size = walker.fixed_size(node)
        if size is None:
            return None
        offset += size
    return None


class Window:
    """Follows one capture session's stream for its backfill runs (see the module docstring).

    ``session``: this capture's session id, as the watermarks carry it (``"s"``); ``proto_version`` and
    ``encoding``: the stream's protocol version and client encoding; ``limit``: the wire bytes of a transaction's
    tracked changes kept whole.  Past it only their keys are kept, and an invisible transaction of W then leaves the
    keys it touched to the stream (they are dropped from the rows) and puts them on the refetch list.
    """

    def __init__(self, session: Any, proto_version: int, limit: int = 64 << 20, encoding: str = "UTF8") -> None:
        self.session = session
        self.proto_version, self.encoding = proto_version, encoding
        self.limit = limit
        self._runs: dict[int, _Run] = {}
        self._by_run: dict[Any, _Run] = {}
        self._started: dict[int, _Run] = {}  # the runs past their B, by relation OID
        self._shapes: dict[int, tuple[Any, ...]] = {}  # the stream's last Relation of each tracked table
        self._window: _Open | None = None
        self._index = 0
        self._in_stream = False
        self._current: _Txn | None = None  # the open plain or prepared transaction (None: not buffered)
        self._current_xid: int | None = None
        self._current_gid: str | None = None
        self._marker: dict[str, Any] | None = None  # an xid marker in a transaction not buffered
        self._stream_xid: int | None = None
        self._streams: dict[int, _Txn] = {}
        self._prepared: dict[str, _Txn] = {}
        self._relation_at = {s: {t: _offset(t, "relation_id", proto_version, s) for t in "IUDR"}
                             for s in (False, True)}

    def _parse(self, data: bytes, in_stream: bool = False) -> Any:
        return parse(data, proto_version=self.proto_version, in_stream=in_stream, encoding=self.encoding)

    # ---- the caller's side

    def track(self, relation: Relation) -> None:
        """Backfill the table ``relation`` describes (its columns as the chunks read them; its key: the
        columns flagged as key).  Its run starts at this session's next start watermark naming its OID;
        tracking it again with a new shape (after a redo for ``"relation"``) keeps the run's state."""
        keys = tuple(i for i, c in enumerate(relation.columns) if c.flags & 1)
        if not keys:
            raise ValueError(f"relation {relation.relation_id} has no key column: a backfill needs one")
        run = self._runs.get(relation.relation_id)
        if run is None:
            self._runs[relation.relation_id] = _Run(relation, keys, _shape(relation), self._index)
        else:
            run.relation, run.keys, run.shape = relation, keys, _shape(relation)

    def untrack(self, relation_id: int) -> None:
        """End the table's run (done, truncated or abandoned): its changes are no longer buffered."""
        run = self._runs.pop(relation_id, None)
        self._started.pop(relation_id, None)
        if run is not None:
            self._by_run = {k: v for k, v in self._by_run.items() if v is not run}
            if self._window is not None and self._window.run is run:
                self._window = None

    def truncated(self, relation_id: int) -> bool:
        """Whether a TRUNCATE of the table committed since its run's B."""
        run = self._runs.get(relation_id)
        return run is not None and run.truncated

    def take_refetch(self, relation_id: int) -> list[Key]:
        """The keys put on the refetch list since the last accepted chunk (at the end of a run), now
        forgotten."""
        run = self._runs.get(relation_id)
        if run is None:
            return []
        keys = list(run.refetch)
        run.refetch.clear()
        return keys

    def under_way(self, relation_id: int) -> bool:
        """Whether a streamed or prepared transaction that was open when the table was tracked is still open.
        Its changes before then are unknown, so if it commits after the run's first low watermark a key move
        of it with unchanged TOASTed values could be missed by the refetch list: the caller waits for this to
        be False before the first chunk (as it waits for the start's xid marker).  A transaction prepared
        before this window's stream began is not known here (``pg_prepared_xacts`` lists it)."""
        run = self._runs[relation_id]
        return any(not t.complete or t.opened < run.tracked_at
                   for t in (*self._streams.values(), *self._prepared.values()))

    @property
    def window_open(self) -> bool:
        """Whether a low watermark was seen and its high one not yet."""
        return self._window is not None and self._window.high is None

    # ---- the stream

    def feed(self, lsn: int, data: bytes) -> Watermark | None:
        """Follow one pgoutput message (the payload of one XLogData, at WAL position ``lsn``); return the
        watermark or marker of this session it is, or completes, else None."""
        index = self._index
        self._index += 1
        if not data:
            return None
        tag = data[0]
        if tag in b"IUD":
            if self._runs:
                self._row_change(data)
            return None
        if tag == 0x42:  # B: Begin
            self._open_plain(self._parse(data) if self._runs else None, index)
            return None
        if tag == 0x43:  # C: Commit
            return self._end_plain(lsn)
        if tag == 0x53:  # S: Stream Start
            self._stream_start(data, index)
            return None
        if tag == 0x45:  # E: Stream Stop
            self._in_stream, self._stream_xid = False, None
            return None
        if tag == 0x52:  # R: Relation
            at = self._relation_at[self._in_stream]["R"]
            if at is not None and len(data) >= at + 4 and _UINT32(data, at)[0] in self._runs:
                message = self._parse(data, self._in_stream)
                assert isinstance(message, Relation)
                self._shapes[message.relation_id] = _shape(message)
            return None
        if tag in b"MbPKrcAp" or (tag == 0x54 and self._runs):  # T: Truncate
            return self._control(self._parse(data, self._in_stream), lsn,
                                 index)
        return None  # Origin, Type and anything else: nothing a window needs

    def _row_change(self, data: bytes) -> None:
        at = self._relation_at[self._in_stream][chr(data[0])]
        if at is not None and len(data) >= at + 4 and _UINT32(data, at)[0] not in self._runs:
            return
        txn = self._streams.get(self._stream_xid) if self._stream_xid is not None else self._current
        if txn is None:
            return
        message = self._parse(data, self._in_stream)
        assert isinstance(message, (Insert, Update, Delete))
        if message.relation_id in self._runs:
            subxid = message.xid if self._in_stream else None
            if subxid is not None and subxid in txn.aborted:
                return
            event = _Event(message, subxid, self._shapes.get(message.relation_id))
            if txn.over:
                txn.events.append(_touch(event, self._runs[message.relation_id].keys))
                return
            txn.events.append(event)
            txn.size += len(data)
            if txn.size > self.limit:
                txn.over = True
                txn.events = [_touch(e, self._runs[e.relation_id].keys) if isinstance(e, _Event) else e
                              for e in txn.events if e.relation_id in self._runs]

    def _open_plain(self, begin: Any, index: int) -> None:
        self._marker = None
        if isinstance(begin, Begin):
            self._current, self._current_xid, self._current_gid = _Txn(index), begin.xid, None
        else:
            self._current = self._current_xid = self._current_gid = None

    def _end_plain(self, lsn: int) -> Watermark | None:
        txn, xid = self._current, self._current_xid
        marker, self._marker = self._marker, None
        self._current = self._current_xid = None
        if xid is None:
            return self._marked(marker, lsn)
        return self._commit(xid, txn, lsn)

    def _stream_start(self, data: bytes, index: int) -> None:
        message = self._parse(data)
        assert isinstance(message, StreamStart)
        self._in_stream, self._stream_xid = True, message.xid
        if message.is_first_segment:
            self._streams[message.xid] = _Txn(index)
        elif message.xid not in self._streams:
            self._streams[message.xid] = _Txn(index, complete=False)

    def _control(self, message: Any, lsn: int, index: int) -> Watermark | None:
        if isinstance(message, Message):
            return self._message(message, index)
        if isinstance(message, Truncate):
            txn = self._streams.get(self._stream_xid) if self._stream_xid is not None else self._current
            if txn is not None:
                txn.truncates.update((r, message.xid) for r in message.relation_ids if r in self._runs)
            return None
        if isinstance(message, StreamCommit):
            return self._commit(message.xid, self._streams.pop(message.xid, None), lsn)
        if isinstance(message, StreamAbort):
            if message.subxid == message.xid:
                self._streams.pop(message.xid, None)
            else:
                txn = self._streams.get(message.xid)
                if txn is not None:
                    txn.aborted.add(message.subxid)
                    txn.events = [e for e in txn.events if e.subxid != message.subxid]
                    txn.truncates = {t for t in txn.truncates if t[1] != message.subxid}
            return None
        if isinstance(message, StreamPrepare):
            txn = self._streams.pop(message.xid, None)
            if txn is not None:
                self._prepared[message.gid] = txn
            return None
        if isinstance(message, BeginPrepare):
            self._marker = None
            self._current, self._current_xid, self._current_gid = _Txn(index), message.xid, message.gid
            return None
        if isinstance(message, Prepare):
            if self._current is not None and self._current_gid is not None:
                self._current.marker = self._marker
                self._prepared[self._current_gid] = self._current
            self._current = self._current_xid = self._current_gid = None
            self._marker = None
            return None
        if isinstance(message, CommitPrepared):
            return self._commit(message.xid, self._prepared.pop(message.gid, None), lsn)
        if isinstance(message, RollbackPrepared):
            self._prepared.pop(message.gid, None)
        return None

    def _message(self, message: Message, index: int) -> Watermark | None:
        if message.prefix != PREFIX:
            return None
        try:
            content = json.loads(bytes(message.content))
        except ValueError:
            return None
        if not isinstance(content, dict) or content.get("v") != 1 or content.get("s") != self.session:
            return None
        kind = content.get("k")
        if message.is_transactional:
            if kind == "xid":
                txn = self._streams.get(self._stream_xid) if self._stream_xid is not None else self._current
                if txn is not None:
                    txn.marker = content
                else:
                    self._marker = content
            return None
        run_id, chunk, oid = content.get("r"), content.get("c"), content.get("t")
        if kind == "start":
            run = self._runs.get(oid) if isinstance(oid, int) else None
            if run is None:
                return None
            run.started, run.run = index, run_id
            run.since_b, run.touched, run.truncated = set(), set(), False
            self._by_run = {k: v for k, v in self._by_run.items() if v is not run}
            self._by_run[run_id] = run
            self._started[run.relation.relation_id] = run
        elif kind == "low":
            run = self._by_run.get(run_id)
            if run is None:
                return None
            self._window = _Open(run, chunk, int(message.lsn), frozenset(run.touched))
        elif kind == "high":
            window = self._window
            if window is None or window.high is not None or window.run.run != run_id or window.chunk != chunk:
                return None
            window.high = int(message.lsn)
        else:
            return None
        return Watermark(kind, int(message.lsn), run_id, chunk, oid if isinstance(oid, int) else None, content)

    def _marked(self, marker: dict[str, Any] | None, lsn: int) -> Watermark | None:
        if marker is None:
            return None
        return Watermark("xid", lsn, marker.get("r"), marker.get("c"), None, marker)

    def _commit(self, xid: int, txn: _Txn | None, lsn: int) -> Watermark | None:
        """A transaction committed: record it for each started run it concerns."""
        window = self._window if self._window is not None and self._window.high is None else None
        for oid, run in self._started.items():
            assert run.started is not None
            if run.since_b is not None:
                run.since_b.add(xid)
            untracked = txn is None or not txn.complete or txn.opened < run.tracked_at
            events = [e for e in txn.events if e.relation_id == oid] if txn is not None else []
            if txn is not None and any(r == oid for r, _ in txn.truncates):
                run.truncated = True
            elif not (untracked or events):
                continue
            run.touched.add(xid)
            if window is not None and window.run is run:
                window.committed.append(_Committed(xid, events, untracked))
            else:
                self._moves_to_refetch(run, events)
        return self._marked(txn.marker if txn is not None else None, lsn)

    # ---- at H

    def close(self, rows: Sequence[Row], snapshot: str | Snapshot,
              committed_xip: Iterable[int | str] | None = None) -> Verdict:
        """Decide for the chunk of the window H closed: ``rows`` as read (each a sequence of raw columns in the
        tracked relation's column order), ``snapshot`` the read's ``pg_current_snapshot()`` (text or parsed),
        ``committed_xip`` the xid8 values of its in-progress list that ``pg_xact_status`` called committed
        (needed until the run's first chunk is accepted).  See :class:`Verdict`."""
        window = self._window
        if window is None or window.high is None:
            raise ValueError("close() needs a window whose high watermark was fed")
        self._window = None
        run = window.run
        s = snapshot if isinstance(snapshot, Snapshot) else Snapshot.parse(snapshot)
        verdict = self._decide(run, window, rows, s, committed_xip)
        run.touched = {x for x in run.touched if not s.sees(x)}
        if verdict.accepted:
            run.since_b = None
        return verdict

    def _decide(self, run: _Run, window: _Open, rows: Sequence[Row], s: Snapshot,
                committed_xip: Iterable[int | str] | None) -> Verdict:
        def redo(reason: str) -> Verdict:
            for c in window.committed:
                self._moves_to_refetch(run, c.events)
            return Verdict("redo", reason)

        if run.truncated:
            return Verdict("truncated")
        if run.since_b is not None:
            if committed_xip is None:
                raise ValueError("the run's first chunk needs committed_xip (guard 2)")
            if any(int(x) & _MASK32 not in run.since_b for x in committed_xip):
                return redo("guard-2")
        if any(not s.sees(x) for x in window.before):
            return redo("guard-1")
        invisible = self._invisible(window, s)
        if any(c.untracked for c in invisible):
            return redo("untracked")
        events = [e for c in invisible for e in c.events]
        for e in events:
            if not _same_shape(e, run.shape):
                return redo("relation")
            if isinstance(e, _Touch):
                if e.toasted_key:
                    return redo("toasted-key")
                continue
            m = e.message
            if (isinstance(m, Update) and m.key is None and m.old is None
                    and any(m.new[i].kind == "u" for i in run.keys)):
                return redo("toasted-key")
        for c in window.committed:
            if s.sees(c.xid):
                self._moves_to_refetch(run, c.events)
        if events:
            rows = self._apply(run, rows, events)
        refetch = tuple(run.refetch)
        run.refetch.clear()
        return Verdict("accepted", None, rows, refetch, len(events))

    @staticmethod
    def _invisible(window: _Open, s: Snapshot) -> list[_Committed]:
        """The transactions of W that the chunk's snapshot does not see, in commit order."""
        return [c for c in window.committed if not s.sees(c.xid)]

    def _apply(self, run: _Run, rows: Sequence[Row], events: list[_Event | _Touch]) -> list[Row]:
        """The chunk's rows with ``events`` applied in order, by key (see the module docstring); a key a
        :class:`_Touch` names is left to the stream and read again."""
        keys = run.keys
        state: dict[Key, Row] = {tuple(row[i].data for i in keys): row for row in rows}
        for e in events:
            if isinstance(e, _Touch):
                for key in e.keys:
                    state.pop(key, None)
                    run.refetch[key] = None
                continue
            m = e.message
            if isinstance(m, Insert):
                state[tuple(m.new[i].data for i in keys)] = m.new
                continue
            old = m.key if m.key is not None else m.old
            if isinstance(m, Delete):
                if old is not None:
                    state.pop(tuple(old[i].data for i in keys), None)
                continue
            new_key = tuple(m.new[i].data for i in keys)
            old_key = tuple(old[i].data for i in keys) if old is not None else new_key
            row = state.get(old_key) if old_key == new_key else state.pop(old_key, None)  # (a row stays in place)
            unchanged = any(c.kind == "u" for c in m.new)
            if row is not None:
                state[new_key] = [row[i] if c.kind == "u" else c for i, c in enumerate(m.new)] if unchanged else m.new
            elif unchanged and old_key != new_key:
                run.refetch[new_key] = None
        return list(state.values())

    @staticmethod
    def _moves_to_refetch(run: _Run, events: list[_Event | _Touch]) -> None:
        """Put on the run's refetch list the new key of every key move among ``events`` whose new image has
        unchanged TOASTed values (see the module docstring)."""
        for e in events:
            if isinstance(e, _Touch):
                if e.moved is not None:
                    run.refetch[e.moved] = None
                continue
            m = e.message
            if isinstance(m, Update) and (m.key is not None or m.old is not None) and any(
                    c.kind == "u" for c in m.new):
                old = m.key if m.key is not None else m.old
                assert old is not None
                new_key = tuple(m.new[i].data for i in run.keys)
                if tuple(old[i].data for i in run.keys) != new_key:
                    run.refetch[new_key] = None
