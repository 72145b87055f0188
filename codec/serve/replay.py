"""The stream one client asked for: a source's messages re-encoded to the client's pgoutput options, from the
position it asked to start at.

Strategy: :class:`Request` is the client's ``START_REPLICATION`` options, read and refused as pgoutput
refuses them by the one options type (:class:`~replwire.codec.options.PgoutputOptions`), and refused too
when they ask for values the source does not hold (binary or text).  :class:`Replay` then walks the
source's segments lazily, in one of two ways:

* **as captured** -- when the client takes every form the source has (streamed transactions only if it asked
  for streaming, prepared ones only with ``two_phase``): each message is parsed with its segment's context
  and built again with the client's (protocol version, in-stream Xid, the parallel Stream Abort's tail).
  A transaction is sent or skipped as a whole, decided when it opens from the source's index
  (:meth:`~replwire.codec.serve.source.Source.scan`): skipped if it never completed in its segment, or if it
  ended before the *watermark* -- the higher of the position the client asked for and the end of the last
  transaction sent -- so nothing the client confirmed and nothing a resumed capture repeats is sent twice.
  A streamed transaction still open when its segment ends is closed with a Stream Abort (the next segment
  sends it again from its first block).
* **reassembled** -- otherwise: every segment goes through an :class:`~replwire.codec.Assembler`, and each
  committed transaction is sent as Begin, changes, Commit (a streamed transaction's aborted subtransactions
  are gone; a prepared one is sent at its Commit Prepared, as a server does for a client without two-phase),
  at the positions a walsender decoding without streaming gives them (the Begin its first change's, from
  PostgreSQL 15; see :meth:`Replay._transaction`).

Either way Relation (and Type) messages are sent when the client does not have the one in force -- before
the first change that needs it -- rather than copied: what the client holds is tracked per connection; and
again where the stream has one inside a transaction that was not streamed (pgoutput sends a Relation again
after an invalidation: a TRUNCATE, a schema change).  A
Relation sent inside a streamed transaction counts only once that transaction commits, and is forgotten
with a subtransaction that is rolled back (the subscriber discards what it spooled for it).  Logical
messages go only to a client that asked for ``messages``; transactions with an origin not to one that asked
for ``origin 'none'``.  Every frame carries the position a walsender gives it: a Relation, a Type, and a
Begin, Begin Prepare or Stream Start followed by an Origin carry none (0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

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
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    WireMessage,
)
from ..options import OptionsError, PgoutputOptions, boolean, streaming_mode
from ..scalars import LSN, Timestamp
from ..stream.assembler import Assembler, Change, Transaction
from ..stream.decoder import Decoder
from ..stream.routing import DROP, LONE, OPEN
from ..wire.fast import build
from .source import Segment, Source, Walk, resumed_decoder

__all__ = ["Replay", "Request", "RequestError"]

_ROWS = (Insert, Update, Delete)


#: A START_REPLICATION the server refuses: pgoutput's own options error, whose ``sqlstate`` is the code.
RequestError = OptionsError


@dataclass(frozen=True)
class Request(PgoutputOptions):
    """The pgoutput options a client asked for, checked as pgoutput checks them (:meth:`from_options`)."""

    proto_version: int = 1  # (always given: from_options refuses a request without it)

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, server_version: int) -> Request:
        """Check ``options`` as pgoutput does for a server of ``server_version``."""
        return cls.from_request(options, server_version=server_version)

    def check_source(self, source: Source) -> None:
        """Refuse what the source cannot give this client."""
        if self.binary and not source.binary:
            raise RequestError("binary values were asked for, but the stream served holds text values (it was "
                               "captured without binary): ask for text", "0A000")
        if source.binary and not self.binary:
            raise RequestError("the stream served holds binary values (it was captured with binary): ask for "
                               "binary = true", "0A000")


#: The tags of the messages pgoutput writes as a change's first, not last, write (``last_write`` false): a
#: Relation and a Type always, since the change they describe follows them.
_NOT_LAST = frozenset(b"RY")
#: The tags of the messages that are not their change's last write when an Origin follows them: Begin, Begin
#: Prepare and Stream Start.
_BEFORE_ORIGIN = frozenset(b"BbS")
_ORIGIN = ord("O")


def _walsender_positions(frames: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
    """``frames`` with the positions a walsender gives them: 0 (``InvalidXLogRecPtr``) for a write that is
    not the last of its change.  The walsender's ``WalSndPrepareWrite`` sends the LSN as ``data_start`` only
    for a change's last write; pgoutput writes a Relation and a Type, and a Begin, Begin Prepare or Stream
    Start that an Origin follows, as not the last.  A client must not take such a frame's position for one
    (psycopg2, for one, treats a frame at or below what it confirmed as confirmed)."""
    held: tuple[int, bytes] | None = None  # a Begin-like frame, until the next frame tells whether an Origin follows
    for lsn, data in frames:
        tag = data[0]
        if held is not None:
            yield (0 if tag == _ORIGIN else held[0]), held[1]
            held = None
        if tag in _BEFORE_ORIGIN:
            held = lsn, data
        else:
            yield (0 if tag in _NOT_LAST else lsn), data
    if held is not None:
        yield held


class Replay:
    """The messages for one client, lazily: iterate :meth:`messages` for ``(lsn, message bytes)``, ``lsn``
    the position of the frame (its XLogData ``data_start``: 0 for a frame that is not the last write of its
    change, as a walsender sends it).  ``position`` is the highest position every
    frame before which has been taken: what the client may be told the server's WAL end is (never the middle
    of a transaction it has not received in whole)."""

    def __init__(self, source: Source, request: Request, start: int = 0) -> None:
        self.source, self.request = source, request
        self.watermark = start
        self.position = start
        self.encoding = source.client_encoding
        self._sent: dict[int, Relation] = {}  # what the client holds, per relation OID
        self._types: dict[int, Type] = {}
        # relation and type OIDs the stream sent again: sent again before the next change that needs them
        self._stale: set[int] = set()
        self._stale_types: set[int] = set()
        # per streamed xid: relation OID -> (Relation, subxid it was sent with), until the transaction commits
        self._pending: dict[int, dict[int, tuple[Relation, int]]] = {}

    @property
    def reassembles(self) -> bool:
        """Whether transactions are reassembled (the client does not take some form the source has)."""
        streams = any(streaming_mode(s.options.get("streaming", "off")) != "off" for s in self.source.segments)
        two_phase = any(boolean("two_phase", s.options.get("two_phase", "false")) for s in self.source.segments)
        return (streams and self.request.streaming == "off") or (two_phase and not self.request.two_phase)

    def messages(self) -> Iterator[tuple[int, bytes]]:
        return _walsender_positions(self._frames())

    def _frames(self) -> Iterator[tuple[int, bytes]]:
        decoder: Decoder | None = None
        for number, segment in enumerate(self.source.segments):
            decoder = resumed_decoder(segment, decoder)
            if self.reassembles:
                yield from self._reassembled(segment, decoder)
            else:
                yield from self._as_captured(number, segment, decoder)

    # -- building ---------------------------------------------------------------------------------------

    def _build(self, message: WireMessage, in_stream: bool = False) -> bytes:
        return build(message, proto_version=self.request.proto_version, in_stream=in_stream, encoding=self.encoding)

    def _relations(self, relation: Relation, types: Mapping[int, Type], lsn: int, stream_xid: int | None,
                   subxid: int | None) -> Iterator[tuple[int, bytes]]:
        """The Type and Relation messages to send before a change of ``relation``, if the client lacks them."""
        relid = relation.relation_id
        pending = self._pending.get(stream_xid, {}) if stream_xid is not None else {}
        held = pending[relid][0] if relid in pending else self._sent.get(relid)
        plain = dataclasses.replace(relation, xid=None)
        if held == plain and relid not in self._stale:
            return
        self._stale.discard(relid)
        in_stream = stream_xid is not None
        xid = subxid if in_stream else None
        for column in relation.columns:
            kind = types.get(column.type_id)
            if kind is not None and (self._types.get(column.type_id) != dataclasses.replace(kind, xid=None)
                                     or column.type_id in self._stale_types):
                self._stale_types.discard(column.type_id)
                self._types[column.type_id] = dataclasses.replace(kind, xid=None)
                yield lsn, self._build(dataclasses.replace(kind, xid=xid), in_stream)
        if in_stream:
            assert stream_xid is not None and subxid is not None
            self._pending.setdefault(stream_xid, {})[relid] = (plain, subxid)
        else:
            self._sent[relid] = plain
        yield lsn, self._build(dataclasses.replace(relation, xid=xid), in_stream)

    def _change_relations(self, message: WireMessage, decoder_relations: Mapping[int, Relation],
                          types: Mapping[int, Type], lsn: int, stream_xid: int | None,
                          subxid: int | None) -> Iterator[tuple[int, bytes]]:
        if isinstance(message, _ROWS):
            yield from self._relations(decoder_relations[message.relation_id], types, lsn, stream_xid, subxid)
        elif isinstance(message, Truncate):
            for relid in message.relation_ids:
                yield from self._relations(decoder_relations[relid], types, lsn, stream_xid, subxid)

    def _commit_stream(self, xid: int) -> None:
        for relid, (relation, _) in self._pending.pop(xid, {}).items():
            self._sent[relid] = relation

    def _abort_stream(self, xid: int, subxid: int) -> None:
        if subxid == xid:
            self._pending.pop(xid, None)
            return
        pending = self._pending.get(xid, {})
        for relid in [r for r, (_, s) in pending.items() if s == subxid]:
            del pending[relid]

    def _stream_abort(self, message: StreamAbort, lsn: int) -> StreamAbort:
        """A Stream Abort in the client's form: with the abort LSN and time only for parallel streaming."""
        if self.request.streaming == "parallel":
            return dataclasses.replace(
                message, abort_lsn=message.abort_lsn if message.abort_lsn is not None else LSN(lsn),
                abort_time=message.abort_time if message.abort_time is not None else Timestamp(0))
        return dataclasses.replace(message, abort_lsn=None, abort_time=None)

    # -- as captured ------------------------------------------------------------------------------------

    def _as_captured(self, number: int, segment: Segment, decoder: Decoder) -> Iterator[tuple[int, bytes]]:
        """The segment's messages in the client's form, each transaction sent or skipped as a whole: decided
        when it opens, by its fate in the source's scan, under the key the segment's :class:`Walk` routes
        it by."""
        request, fates = self.request, self.source.scan().fates
        walk = Walk(segment, decoder)
        streams = walk.router.streams  # open streamed transactions: xid -> key
        sent: dict[int, bool] = {}  # open transactions by key: whether this client is sent it
        open_block: int | None = None  # the streamed xid whose block is open and sent
        last = self.position
        for lsn, message, in_stream, route in walk:
            self.position = max(self.position, last)  # every frame of the record before is taken
            last = lsn
            cls = message.__class__
            kind = route.kind if route is not None else None
            key = route.key if route is not None else None
            if kind is OPEN:
                assert key is not None and route is not None
                fate = fates.get((number, key))
                sent[key] = (fate is not None and fate.lsn >= self.watermark
                             and not (fate.origin and request.origin == "none"))
                if route.value is not None:  # (a streamed transaction sent again from its first block)
                    sent.pop(route.value, None)
            if cls is Begin or cls is BeginPrepare:
                if sent.get(cast(int, key), False):
                    yield lsn, self._build(message)
            elif cls is StreamStart:
                xid = cast(StreamStart, message).xid
                if sent.get(streams[xid], False):
                    open_block = xid
                    yield lsn, self._build(message)
            elif cls is StreamStop:
                if open_block is not None:
                    open_block = None
                    yield lsn, self._build(message)
            elif in_stream:
                if open_block is None:
                    continue
                if cls is Relation or cls is Type:
                    assert isinstance(message, (Relation, Type))
                    self._forget(message)  # (pgoutput sent it again here: so does a walsender)
                    continue
                if cls is Message and not request.messages:
                    continue
                if cls is Origin:
                    if request.origin == "any":
                        yield lsn, self._build(message, True)
                    continue
                subxid = getattr(message, "xid", None)
                yield from self._change_relations(message, decoder.relations, decoder.types, lsn, decoder.stream_xid,
                                                 subxid)
                yield lsn, self._build(message, True)
            elif cls is StreamAbort:
                assert isinstance(message, StreamAbort)
                was_sent = key is not None and sent.get(key, False)
                if kind is DROP:
                    sent.pop(cast(int, key), None)
                self._abort_stream(message.xid, message.subxid)
                if was_sent:
                    yield lsn, self._build(self._stream_abort(message, lsn))
            elif cls is StreamCommit or cls is StreamPrepare or cls is Commit or cls is Prepare:
                if key is not None and sent.pop(key, False):
                    if cls is StreamCommit or cls is StreamPrepare:
                        self._commit_stream(message.xid)  # type: ignore[attr-defined]
                    self.watermark = max(self.watermark, int(message.end_lsn))  # type: ignore[attr-defined]
                    yield lsn, self._build(message)
                elif cls is StreamCommit or cls is StreamPrepare:
                    self._pending.pop(message.xid, None)  # type: ignore[attr-defined]
            elif cls is CommitPrepared:
                assert isinstance(message, CommitPrepared)
                if message.commit_lsn >= self.watermark:
                    self.watermark = max(self.watermark, int(message.end_lsn))
                    yield lsn, self._build(message)
            elif cls is RollbackPrepared:
                assert isinstance(message, RollbackPrepared)
                if message.rollback_end_lsn > self.watermark:
                    self.watermark = max(self.watermark, int(message.rollback_end_lsn))
                    yield lsn, self._build(message)
            elif cls is Relation or cls is Type:
                # sent when a change needs it -- and again where pgoutput sent it again inside a transaction
                # (after an invalidation: a TRUNCATE, a schema change), as a walsender does
                if decoder.xid is not None:
                    assert isinstance(message, (Relation, Type))
                    self._forget(message)
            elif kind is LONE:  # a non-transactional logical message
                assert isinstance(message, Message)
                if request.messages and message.lsn >= self.watermark:
                    yield lsn, self._build(message)
            elif key is not None and sent.get(key, False):  # an Origin or a change of a transaction sent
                if cls is Origin:
                    if request.origin == "any":
                        yield lsn, self._build(message)
                    continue
                if cls is Message and not request.messages:
                    continue
                yield from self._change_relations(message, decoder.relations, decoder.types, lsn, None, None)
                yield lsn, self._build(message)
        self.position = max(self.position, last)
        # a streamed transaction left open by the segment's end is sent again from its start by the next one
        if open_block is not None:
            yield self.position, self._build(StreamStop())
        for xid, key in streams.items():
            if sent.get(key, False):
                self._pending.pop(xid, None)
                abort = StreamAbort(xid=xid, subxid=xid, abort_lsn=None, abort_time=None)
                yield self.position, self._build(self._stream_abort(abort, self.position))

    # -- reassembled ------------------------------------------------------------------------------------

    def _reassembled(self, segment: Segment, decoder: Decoder) -> Iterator[tuple[int, bytes]]:
        request = self.request
        assembler = Assembler(decoder, typed=False)
        last = self.position
        # per xid: the position of the transaction's first write (its Begin, Begin Prepare or first Stream
        # Start; the Origin's when one follows it), which is what a walsender sends with the Begin
        first: dict[int, int] = {}
        unplaced: int | None = None  # an xid whose first write was sent without a position
        # per xid of a transaction not streamed: the Relation and Type messages pgoutput sent again inside
        # it, each with the position of the change it came before (None until that change is read)
        again: dict[int, list[tuple[int | None, Relation | Type]]] = {}
        for lsn, data in segment.records():
            self.position = max(self.position, last)  # every frame of the record before is taken
            last = lsn
            items = assembler.feed(data, lsn=lsn)
            message = decoder.last_message
            if unplaced is not None:
                if isinstance(message, Origin) and lsn:
                    first[unplaced] = lsn
                unplaced = None
            if isinstance(message, (Relation, Type)) and decoder.xid is not None and not decoder.in_stream:
                again.setdefault(decoder.xid, []).append((None, message))
            elif lsn and decoder.xid in again:
                again[decoder.xid] = [(lsn if at is None else at, m) for at, m in again[decoder.xid]]
            if isinstance(message, (Begin, BeginPrepare, StreamStart)) and message.xid not in first:
                if lsn:
                    first[message.xid] = lsn
                else:
                    unplaced = message.xid
            elif isinstance(message, StreamAbort) and message.subxid == message.xid:
                first.pop(message.xid, None)
            elif isinstance(message, RollbackPrepared):
                first.pop(message.xid, None)
                again.pop(message.xid, None)
            for item in items:
                if isinstance(item, Change):  # a non-transactional logical message
                    assert isinstance(item.message, Message)
                    if request.messages and item.message.lsn >= self.watermark:
                        yield lsn, self._build(item.message)
                    continue
                assert item.xid is not None  # (only a snapshot's rows have none; the Assembler makes none)
                yield from self._transaction(item, assembler.decoder.relations, first.pop(item.xid, None),
                                             again.pop(item.xid, []))
        self.position = max(self.position, last)

    def _transaction(self, txn: Transaction, relations: Mapping[int, Relation], first: int | None,
                     again: list[tuple[int | None, Relation | Type]]) -> Iterator[tuple[int, bytes]]:
        """Begin, changes, Commit, at the positions a walsender decoding without streaming gives them: each
        change its own, the Commit its end, and the Begin -- from PostgreSQL 15, whose pgoutput sends it only
        with the first change it sends (and skips a transaction it sends no change of) -- that change's;
        before 15, the transaction's first write's (``first``: the ``first_lsn`` of the reorder buffer, what
        its Begin or first Stream Start was sent with).  Never the commit's: a client may confirm any position
        it received, and must not confirm a transaction it has only in part.  ``again``: the Relation and
        Type messages the stream sent again inside the transaction, sent again before the change they came
        before."""
        request = self.request
        assert txn.xid is not None  # only a snapshot's rows have none, and the Assembler makes no such transaction
        deferred = self.source.server_version >= 150000
        fallback = min(self.position, int(txn.commit_lsn))  # (a stream that does not say where a change is)
        with txn:
            if txn.commit_lsn < self.watermark or (txn.origin is not None and request.origin == "none"):
                return
            begun = False
            if not deferred:
                lsn = first
                if lsn is None or lsn > txn.commit_lsn:
                    lsn = next((int(c.lsn) for c in txn.changes if c.lsn and c.lsn < txn.commit_lsn), fallback)
                yield from self._begin(txn, lsn)
                begun = True
            for change in txn.changes:
                message = change.message
                assert message is not None
                if isinstance(message, Message) and not request.messages:
                    continue
                where = int(change.lsn) if change.lsn and change.lsn < txn.commit_lsn else fallback
                while again and (again[0][0] is None or again[0][0] <= where):
                    self._forget(again.pop(0)[1])
                if not begun:
                    yield from self._begin(txn, where)
                    begun = True
                schema: Any = change.row_schema
                if isinstance(message, _ROWS):
                    types = {t.type_id: t for t in schema.types if t is not None}
                    yield from self._relations(schema.relation, types, where, None, None)
                elif isinstance(message, Truncate):  # (its change has no row schema: the Relations now)
                    for relid in message.relation_ids:
                        yield from self._relations(relations[relid], {}, where, None, None)
                yield where, self._build(message)
            self.watermark = max(self.watermark, int(txn.end_lsn))
            if begun:
                yield int(txn.end_lsn), self._build(Commit(flags=0, commit_lsn=txn.commit_lsn, end_lsn=txn.end_lsn,
                                                           commit_time=txn.commit_time))

    def _forget(self, message: Relation | Type) -> None:
        """Count ``message`` as not held by the client: the next change that needs it sends it again."""
        if isinstance(message, Relation):
            self._stale.add(message.relation_id)
        else:
            self._stale_types.add(message.type_id)

    def _begin(self, txn: Transaction, lsn: int) -> Iterator[tuple[int, bytes]]:
        """The Begin (and Origin) of ``txn`` at ``lsn`` (the Begin's becomes 0 if an Origin follows)."""
        assert txn.xid is not None
        yield lsn, self._build(Begin(final_lsn=txn.commit_lsn, commit_time=txn.commit_time, xid=txn.xid))
        if txn.origin is not None and self.request.origin == "any":
            name, origin_lsn = txn.origin
            yield lsn, self._build(Origin(origin_lsn=origin_lsn, name=name))
