"""The transaction assembler: committed transactions, with typed changes, from a stream of pgoutput messages.

Strategy: every message goes through a :class:`~replwire.codec.Decoder` (the assembler owns one, or shares
the caller's), which checks the order and keeps the Relation and Type caches.  Each data change is then
appended to the buffer of the transaction it belongs to -- the open Begin...Commit or Begin Prepare...Prepare
transaction, or, inside a Stream Start...Stop block, the streamed top-level xid's buffer, tagged with the
subtransaction xid the message carries.  A buffer entry is the parsed message (in its out-of-stream form:
no streamed Xid), its LSN, the subtransaction xid, and a reference to the
:class:`~replwire.codec.stream.values.RowSchema` (Relation and Type messages) in force when it arrived, so a
Relation re-sent mid-transaction (ALTER TABLE) applies to the later changes only.  A message is parsed once.

A buffer whose entries pass ``spill_threshold`` bytes (wire bytes plus what the parsed objects cost) moves
them to an anonymous temporary file as records of ``flags, schema index, subxid, lsn, length, message
bytes`` (the message's wire bytes, out-of-stream form; never pickle) and appends there from then on.
Outcomes: Commit / Stream Commit / Commit Prepared emit a :class:`Transaction`; Stream Abort of a
subtransaction marks that subxid dropped (its entries are skipped, in memory right away, on disk and in
rendered runs when read back, and its changes that come after the abort are not buffered); a top-level Stream
Abort or Rollback Prepared discards the buffer; Prepare / Stream Prepare park it under its gid.  Changes are
typed only when the committed transaction is read, one at a time (a spilled one parsed back from its file), so
a spilled transaction is never all in memory: :attr:`Transaction.changes` is a lazy sequence.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, overload

from ...schema.encodings import UTF8
from ..errors import DecodeError
from ..messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Prepare,
    Relation,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    Truncate,
    Type,
    Update,
    WireMessage,
    XLogData,
)
from ..scalars import LSN
from ..wire.fast import build, parse
from .decoder import IDLE, STREAM, TRANSACTION, Decoder
from .decoder import PREPARE as PREPARING
from .outcome import Outcome
from .routing import CHANGE, COMMIT, DROP, DROP_SUBXACT, LONE, OPEN, ORIGIN, PREPARE, Router
from .values import RowSchema, ValueLoader, untyped_row

__all__ = ["Assembler", "Change", "ChangeMaker", "Changes", "Rendered", "Transaction", "relation_namespace"]

#: Bytes counted per buffered change on top of its wire bytes (the entry and the message object), and per
#: tuple column (its TupleColumn and data object): what the parsed message costs in memory.
ENTRY_OVERHEAD = 240
COLUMN_OVERHEAD = 96
_RECORD = struct.Struct(">BIIQI")  # flags (bit 0: has lsn, bit 1: Rendered), schema index, subxid, lsn, length
_RENDERED = 2
_NO_SCHEMA = 0xFFFFFFFF
_DML = (Insert, Update, Delete, Truncate, Message)
_OPENERS = (Begin, BeginPrepare, StreamStart)  # the messages that open a transaction
_WITH_XID = (Relation, Type, *_DML)  # the messages that carry the streamed Xid inside a Stream block


@dataclass(slots=True)
class Change:
    """One committed change, or a non-transactional logical message.

    ``op`` is ``insert``, ``update``, ``delete``, ``truncate`` or ``message``.  ``new``/``old``/``key`` map
    column names to typed values (``UNCHANGED_TOAST`` for a value the server did not send; ``None`` is SQL
    NULL): ``key`` holds only the replica-identity key columns of the old row (from a ``K`` tuple, or from
    the ``O`` tuple under REPLICA IDENTITY FULL), ``old`` the full old row (``O`` only).  ``xid`` is the
    top-level transaction's xid (``None`` for a non-transactional message), as in ``replwire decode``'s JSON
    lines and the Spark rows; ``subxid`` is, for a change of a streamed transaction, the xid of the
    (sub)transaction that made it, as its message carried it (``None`` otherwise: outside streaming the
    server does not say).  ``lsn`` is the position given to :meth:`Assembler.add` with the message.  A row
    of a capture file's initial snapshot is a change with ``op`` ``snapshot`` and ``new`` only
    (:mod:`replwire.codec.stream.snapshot_records`).
    """

    op: str
    schema: str | None = None
    table: str | None = None
    relation_id: int | None = None
    lsn: LSN | None = None
    xid: int | None = None
    subxid: int | None = None
    new: dict[str, Any] | None = None
    old: dict[str, Any] | None = None
    key: dict[str, Any] | None = None
    relations: list[tuple[str, str]] | None = None
    relation_ids: list[int] | None = None
    options: int | None = None
    cascade: bool | None = None
    restart_identity: bool | None = None
    prefix: str | None = None
    content: bytes | None = None
    transactional: bool | None = None
    #: The wire message the change came from (Insert, Update, Delete, Truncate or Message; xid removed).
    message: WireMessage | None = field(default=None, repr=False, compare=False)
    #: The Relation message in force when the change arrived (column types and key flags).
    relation: Relation | None = field(default=None, repr=False, compare=False)
    #: What the values of ``message``'s tuples are read with (:class:`~replwire.codec.stream.values.RowSchema`: the
    #: Relation and the Type messages in force when the change arrived); ``None`` for Truncate and Message.
    row_schema: Any = field(default=None, repr=False, compare=False)

    @property
    def unchanged_toast(self) -> list[str]:
        """The columns of ``new`` whose value was not sent (unchanged TOAST)."""
        from .value_types import UNCHANGED_TOAST

        return [name for name, value in (self.new or {}).items() if value is UNCHANGED_TOAST]


class Rendered:
    """Row changes a writer rendered itself, kept in their transaction's buffer as they are: ``data``, opaque
    to the assembler (a run of the compiled row path's JSON lines or Debezium events, see
    :mod:`replwire.codec.decode`), ``count``
    changes, ``subxids`` how many of them each subtransaction made (:meth:`Assembler.add_rendered`).
    :meth:`Changes.wire` gives it in its place among the changes, ``dropped`` then naming the subtransactions
    aborted since, whose changes the writer leaves out.  No :class:`Change` can be made of it."""

    __slots__ = ("count", "data", "dropped", "subxids")

    def __init__(self, data: bytes, count: int = 0, subxids: dict[int, int] | None = None) -> None:
        self.data, self.count, self.subxids = data, count, subxids or {}
        self.dropped: set[int] = set()


class Changes(Sequence[Change]):
    """The changes of a committed transaction, in order, read lazily.

    Iterating parses and types one change at a time (from memory, or from the spill file of a large
    transaction), so a transaction larger than memory can be consumed; ``len()`` is known up front; indexing
    works too (a spilled transaction builds a table of record offsets on first use).  Equal to a list with
    the same changes.
    """

    def __init__(self, buffer: _Buffer, assembler: Assembler) -> None:
        self._buffer = buffer
        self._assembler = assembler
        self._offsets: list[int] | None = None
        self._cache: list[Change] | None = None

    def __len__(self) -> int:
        return self._buffer.count

    def __iter__(self) -> Iterator[Change]:
        if self._cache is not None:
            yield from self._cache
            return
        for entry in self._buffer.entries():
            yield self._assembler._change(entry, self._buffer)

    def wire(self) -> Iterator[tuple[WireMessage | Rendered, Any, int | None, int]]:
        """The changes as ``(message, schema, lsn, subxid)``, without :class:`Change` objects: the wire
        message (out-of-stream form), what its values are read with (as :attr:`Change.row_schema`; a tuple of
        Relations for a Truncate, ``None`` for a logical message), its LSN (an ``int``, or ``None``) and the
        subtransaction xid (as :attr:`Change.xid`).  For writers that read the wire tuples themselves; the
        changes a writer rendered itself come as the :class:`Rendered` it added (schema and LSN ``None``)."""
        buffer, parse_data = self._buffer, self._assembler._parse_data
        schemas = buffer.schemas
        for index, subxid, lsn, item in (buffer.memory if buffer.file is None else buffer.entries()):
            if item.__class__ is Rendered:
                item.dropped = buffer.dropped
                yield item, None, None, subxid
                continue
            message = parse_data(item) if isinstance(item, bytes) else item
            yield message, schemas[index] if index != _NO_SCHEMA else None, lsn, subxid

    @overload
    def __getitem__(self, index: int) -> Change: ...

    @overload
    def __getitem__(self, index: slice) -> list[Change]: ...

    def __getitem__(self, index: int | slice) -> Change | list[Change]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("change index out of range")
        if self._buffer.file is None:
            if self._cache is None:
                self._cache = list(self)
            return self._cache[index]
        if self._offsets is None:
            self._offsets = list(self._buffer.offsets())
        return self._assembler._change(self._buffer.read_at(self._offsets[index]), self._buffer)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Changes, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        where = "spilled to disk" if self._buffer.file is not None else "in memory"
        return f"<Changes: {len(self)} change{'s' if len(self) != 1 else ''}, {where}>"

    @property
    def spilled(self) -> bool:
        """Whether this transaction was spilled to a temporary file."""
        return self._buffer.file is not None

    def close(self) -> None:
        """Release the spill file (iteration afterwards raises)."""
        self._buffer.close()


@dataclass
class Transaction(Outcome):
    """A committed transaction: its facts (see :class:`~replwire.codec.stream.outcome.Outcome`) and its
    ``changes``."""

    changes: Changes = field(repr=False, kw_only=True)

    def close(self) -> None:
        """Release the spill file early (it is also released when the transaction is garbage-collected)."""
        self.changes.close()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Buffer:
    """The changes of one open (or prepared) transaction: entries in memory, then in a spill file."""

    def __init__(self, xid: int, threshold: int, spill_dir: str | None, streamed: bool,
                 encode: Any = None) -> None:
        self.xid = xid
        self.encode = encode  # a parsed message's wire bytes, for the spill file
        self.threshold = threshold
        self.spill_dir = spill_dir
        self.streamed = streamed
        # schema index, subxid, lsn, message (parsed; from the spill file: its bytes)
        self.memory: list[tuple[int, int, int | None, Any]] = []
        self.size = 0
        self.count = 0
        self.file: BinaryIO | None = None
        self.schemas: list[RowSchema | tuple[Relation, ...] | None] = []
        self._schema_index: dict[int, int] = {}
        self.dropped: set[int] = set()  # aborted subtransactions (spilled entries skipped on read)
        self.per_subxid: dict[int, int] = {}
        self.origin: tuple[str, LSN] | None = None
        self.prepare: Prepare | StreamPrepare | None = None

    def schema_index(self, schema: Any) -> int:
        if schema is None:
            return _NO_SCHEMA
        index = self._schema_index.get(id(schema))
        if index is None:
            index = self._schema_index[id(schema)] = len(self.schemas)
            self.schemas.append(schema)
        return index

    def add(self, schema: Any, subxid: int, lsn: int | None, message: WireMessage, cost: int) -> None:
        """Buffer ``message``, which costs about ``cost`` bytes in memory (:func:`_cost`); a change of a
        subtransaction aborted before it is dropped (:meth:`drop_subtransaction`)."""
        if subxid in self.dropped:
            return
        self.count += 1
        self.per_subxid[subxid] = self.per_subxid.get(subxid, 0) + 1
        self._keep((self.schema_index(schema), subxid, lsn, message), cost)

    def add_rendered(self, rendered: Rendered) -> None:
        """Buffer changes a writer rendered itself; those of a subtransaction aborted before them are not
        counted (the writer leaves them out: :attr:`Rendered.dropped`)."""
        dropped = self.dropped
        for subxid, count in rendered.subxids.items():
            if subxid in dropped:
                continue
            self.count += count
            self.per_subxid[subxid] = self.per_subxid.get(subxid, 0) + count
        self._keep((_NO_SCHEMA, 0, None, rendered), len(rendered.data) + ENTRY_OVERHEAD)

    def _keep(self, entry: tuple[int, int, int | None, Any], cost: int) -> None:
        if self.file is not None:
            self._write(entry)
            return
        self.memory.append(entry)
        self.size += cost
        if self.size > self.threshold:
            self.spill()

    def spill(self) -> None:
        """Move the entries in memory to the spill file, and buffer there from now on."""
        import tempfile  # (here: most runs never spill, and tempfile with what it imports is 3 ms of start-up)

        self.file = tempfile.TemporaryFile(prefix="replwire-txn-", dir=self.spill_dir)  # noqa: SIM115
        for item in self.memory:
            self._write(item)
        self.memory = []
        self.size = 0

    def _write(self, entry: tuple[int, int, int | None, Any]) -> None:
        index, subxid, lsn, message = entry
        rendered = message.__class__ is Rendered
        data = message.data if rendered else self.encode(message)
        assert self.file is not None
        self.file.write(_RECORD.pack((lsn is not None) | (_RENDERED if rendered else 0), index, subxid, lsn or 0,
                                     len(data)))
        self.file.write(data)

    def drop_subtransaction(self, subxid: int) -> None:
        """Drop the changes of an aborted subtransaction: those buffered (in memory at once; in the spill
        file and in Rendered runs where read), and any that come after the abort (:meth:`add`), wherever
        the buffer is -- one rule for memory, spill file and rendered runs."""
        self.dropped.add(subxid)  # (skipped where read from the spill file, and by the writer of Rendered changes)
        removed = self.per_subxid.pop(subxid, 0)
        if not removed:
            return
        self.count -= removed
        if self.file is None:
            kept = [e for e in self.memory if e[1] != subxid]
            self.size = max(0, self.size - sum(_cost(e[3]) for e in self.memory if e[1] == subxid))  # (about)
            self.memory = kept

    def entries(self) -> Iterator[tuple[int, int, int | None, Any]]:
        if self.file is None:
            yield from self.memory
            return
        for offset in self.offsets():
            yield self.read_at(offset)

    def offsets(self) -> Iterator[int]:
        """Offsets of the records to read (dropped subtransactions skipped)."""
        if self.file is None:
            raise ValueError("the transaction's spill file is closed")
        self.file.flush()
        end = self.file.seek(0, 2)
        position = 0
        while position < end:
            self.file.seek(position)
            header = self.file.read(_RECORD.size)
            _, _, subxid, _, length = _RECORD.unpack(header)
            if subxid not in self.dropped:
                yield position
            position += _RECORD.size + length

    def read_at(self, offset: int) -> tuple[int, int, int | None, bytes | Rendered]:
        assert self.file is not None
        self.file.seek(offset)
        flags, index, subxid, lsn, length = _RECORD.unpack(self.file.read(_RECORD.size))
        data = self.file.read(length)
        if len(data) != length:
            raise OSError(f"spill file truncated at offset {offset}")
        return index, subxid, (lsn if flags & 1 else None), Rendered(data) if flags & _RENDERED else data

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        self.memory = []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class Assembler:
    """Turn pgoutput messages into committed transactions (sans-I/O; the only file it touches is the
    anonymous spill file of a transaction larger than ``spill_threshold``).

    From a list of message bytes to committed transactions::

        asm = Assembler(proto_version=2)
        for data in rows:
            for item in asm.feed(data): ...

    Args:
        decoder: the :class:`~replwire.codec.Decoder` whose caches to use; by default the assembler makes
            its own with ``proto_version``.  Messages handed to :meth:`add` go through this decoder
            (unless they are the message it just decoded), so feed each message once, to either.
        proto_version: for the assembler's own decoder.
        encoding: for the assembler's own decoder: the connection's client encoding (see
            :class:`~replwire.codec.Decoder`).  Values are read in the decoder's encoding.
        spill_threshold: bytes of buffered changes (wire bytes plus :data:`ENTRY_OVERHEAD` each) per
            transaction before it moves to a temporary file.
        spill_dir: where the temporary files go (default: the system's temporary directory).
        typed: load values through psycopg (default); ``False`` gives ``str`` for text and ``bytes`` for
            binary columns and needs no psycopg.
        rows: make the row dicts of each change (default); ``False`` leaves ``new``/``old``/``key`` unset, for
            callers that read the wire tuples of ``Change.message`` (or :meth:`Changes.wire`) themselves.
    """

    def __init__(self, decoder: Decoder | None = None, *, proto_version: int = 4, encoding: str = UTF8,
                 spill_threshold: int = 64 * 2**20, spill_dir: str | None = None, typed: bool = True,
                 rows: bool = True) -> None:
        self.decoder = decoder if decoder is not None else Decoder(proto_version=proto_version, encoding=encoding)
        if spill_threshold < 0:
            raise ValueError("spill_threshold must be >= 0")
        self.spill_threshold = spill_threshold
        self.spill_dir = spill_dir
        self._maker = ChangeMaker(typed=typed and rows, rows=rows, encoding=self.decoder.encoding)
        self._router = Router(self.decoder)
        self._buffers: dict[int, _Buffer] = {}  # open, streamed and prepared transactions by routing key
        self._last_added: WireMessage | None = None
        # the RowSchema of the last row change feed took in one go, and the decoder's types_version then
        self._last_schema: RowSchema | None = None
        self._last_types = -1
        self._parse = parse
        self._build = build

    # -- input ---------------------------------------------------------------------------------------------

    def feed(self, data: bytes, lsn: int | None = None) -> list[Transaction | Change]:
        """Decode one pgoutput message and add it; the items it completes (see :meth:`add`)."""
        decoder = self.decoder
        if data.__class__ is bytes and data and data[0] in _ROW_TAGS and decoder.state in _ROW_STATES \
                and decoder.__class__ is Decoder:
            # the commonest message: a row change inside a transaction, taken in one go (what Decoder.feed
            # and add do for it, without the Route and the calls) where it is the common case -- a known
            # relation, every tuple as wide as its Relation, an open transaction in memory; anything else
            # takes their way
            in_stream = decoder.state == STREAM
            message: Any
            try:
                message = decoder._parse(data, proto_version=decoder.proto_version, in_stream=in_stream,
                                         encoding=decoder.encoding)
            except DecodeError:  # (Decoder.feed parses it again and raises, noting where)
                return self.add(decoder.feed(data), lsn=lsn)
            cls = message.__class__
            relation = decoder.relations.get(message.relation_id)
            if cls is Insert:
                new = message.new
                columns = len(new) if new is not None else -1
                fits = relation is not None and columns == len(relation.columns)
            elif relation is not None and cls in _TUPLE_NAMES:
                width, columns, fits = len(relation.columns), 0, True
                for name in _TUPLE_NAMES[cls]:
                    tuple_ = getattr(message, name)
                    if tuple_ is not None:
                        fits = fits and len(tuple_) == width
                        columns += width
            else:
                fits = False
            if fits:
                router = self._router
                if in_stream:
                    key = router.streams.get(decoder.stream_xid)  # type: ignore[arg-type]
                    subxid = message.xid
                else:
                    key = router.current
                    subxid = router.current_xid
                buffer = self._buffers.get(key)  # type: ignore[arg-type]
                if buffer is not None and buffer.file is None and not (buffer.dropped and subxid in buffer.dropped):
                    # -- accepted (Decoder.accept), routed to the open transaction (Router.route), buffered (add)
                    decoder.index += 1
                    decoder.last_message = self._last_added = message
                    decoder.last_data = data
                    schema = self._last_schema
                    if schema is None or schema.relation is not relation or \
                            self._last_types != decoder.types_version:
                        schema = self._last_schema = self._maker.row_schema(decoder, message.relation_id)
                        self._last_types = decoder.types_version
                    if in_stream:
                        if cls is Insert:  # (the commonest: _insert_out_of_stream inline)
                            copy = _new(Insert)
                            copy.xid, copy.relation_id, copy.new = None, message.relation_id, message.new
                            message = copy
                        else:
                            message = _OUT_OF_STREAM[cls](message)
                    buffer.count += 1
                    per_subxid = buffer.per_subxid
                    per_subxid[subxid] = per_subxid.get(subxid, 0) + 1
                    index = buffer._schema_index.get(id(schema))
                    if index is None:
                        index = buffer.schema_index(schema)
                    buffer.memory.append((index, subxid, lsn, message))
                    buffer.size += len(data) + ENTRY_OVERHEAD + COLUMN_OVERHEAD * columns
                    if buffer.size > buffer.threshold:
                        buffer.spill()
                    return []
            decoder.accept(message)  # (what Decoder.feed does after its parse)
            decoder.last_data = data
            return self.add(message, lsn=lsn)
        if data.__class__ is bytes and data and data[0] in _BEGIN_COMMIT and decoder.__class__ is Decoder:
            # a Begin between transactions, a Commit of the open one: the same, in one go
            opens = data[0] == 66
            if decoder.state == (IDLE if opens else TRANSACTION):
                try:
                    message = decoder._parse(data, proto_version=decoder.proto_version, in_stream=False,
                                             encoding=decoder.encoding)
                except DecodeError:  # (Decoder.feed parses it again and raises, noting where)
                    return self.add(decoder.feed(data), lsn=lsn)
                router = self._router
                if opens and message.__class__ is Begin:
                    # Decoder.accept: idle -> transaction; Router.route: OPEN at the next position; add: a buffer
                    decoder.opened_at = decoder.index
                    decoder.xid = message.xid
                    decoder.state = TRANSACTION
                    decoder.index += 1
                    decoder.last_message = self._last_added = message
                    decoder.last_data = data
                    router.current, router.current_xid = decoder.index, message.xid
                    self._buffers[decoder.index] = _Buffer(message.xid, self.spill_threshold, self.spill_dir,
                                                           streamed=False, encode=self._encode)
                    return []
                key = router.current
                if not opens and message.__class__ is Commit and key in self._buffers:
                    # Decoder.accept: transaction -> idle; Router.route: COMMIT of the open one; add: it
                    decoder.stream_xid = decoder.xid = decoder.opened_at = None
                    decoder.state = IDLE
                    decoder.index += 1
                    decoder.last_message = self._last_added = message
                    decoder.last_data = data
                    router.current = router.current_xid = None
                    return [self._transaction(self._buffers.pop(key), message)]
                decoder.accept(message)
                decoder.last_data = data
                return self.add(message, lsn=lsn)
        message = decoder.feed(data)
        return self.add(message, lsn=lsn)

    def feed_frame(self, payload: bytes) -> list[Transaction | Change]:
        """Decode one walsender CopyData payload; an XLogData's message is added with the frame's LSN
        (``None`` for the 0/0 of non-final writes), a keepalive completes nothing."""
        frame = self.decoder.feed_frame(payload)
        if not isinstance(frame, XLogData) or self.decoder.last_message is None:
            return []
        return self.add(self.decoder.last_message, lsn=frame.wal_end or None)

    def feed_all(self, rows: Iterable[bytes | tuple[Any, ...]]) -> Iterator[Transaction | Change]:
        """Every item completed by ``rows``: message bytes, or ``(lsn, xid, data)`` SQL-interface rows."""
        for row in rows:
            if isinstance(row, (bytes, bytearray, memoryview)):
                yield from self.feed(bytes(row))
            else:
                lsn, _, data = row
                yield from self.feed(bytes(data), lsn=LSN(lsn) if isinstance(lsn, str) else lsn)

    def resume(self) -> None:
        """The messages that follow come from a resumed capture (a second capture file, or the same slot read
        again): a transaction still open here is dropped, because the server sends it again from its start.
        A streamed transaction is started over when its first block comes again."""
        dropped = self._router.resume()
        if dropped is not None:
            self._buffers.pop(dropped).close()

    def add(self, message: WireMessage, lsn: int | None = None) -> list[Transaction | Change]:
        """Add one message (in stream order); return the items it completes, in order: a
        :class:`Transaction` for a commit, a :class:`Change` for a non-transactional logical message,
        nothing for everything else."""
        decoder = self.decoder
        if message is decoder.last_message and decoder.last_data is not None and message is not self._last_added:
            in_stream = isinstance(message, _WITH_XID) and message.xid is not None
        else:
            in_stream = decoder.in_stream
            decoder.accept(message)
        self._last_added = message
        route = self._router.route(message, decoder.index, in_stream)
        if route is None:
            return []
        kind, key, buffers = route.kind, route.key, self._buffers
        if kind is LONE:
            return [self._maker.change(message, None, LSN(lsn) if lsn is not None else None, None)]
        assert key is not None  # every route but a lone message's names its transaction (Router.route)
        if kind is CHANGE:
            schema = self._maker.schema_for(decoder, message)
            data = decoder.last_data if message is decoder.last_message else None
            if isinstance(message, _DML) and message.xid is not None:
                message = _out_of_stream(message)
            buffers[key].add(schema, route.value, lsn, message, _cost(message, data))
        elif kind is OPEN:
            if route.value is not None:  # a streamed transaction sent again from its first block: start over
                buffers.pop(route.value).close()
            assert isinstance(message, _OPENERS)  # only these open a transaction (Router.route)
            buffers[key] = _Buffer(message.xid, self.spill_threshold, self.spill_dir, streamed=route.streamed,
                                   encode=self._encode)
        elif kind is ORIGIN:
            buffer = buffers[key]
            if buffer.origin is None:
                buffer.origin = route.value
        elif kind is COMMIT:
            return [self._transaction(buffers.pop(key), route.value)]
        elif kind is PREPARE:
            buffers[key].prepare = route.value
        elif kind is DROP:
            buffers.pop(key).close()
        elif kind is DROP_SUBXACT:
            buffers[key].drop_subtransaction(route.value)
        return []

    def add_rendered(self, rendered: Rendered) -> None:
        """Add ``rendered.count`` row changes a writer rendered itself (:class:`Rendered`) to the transaction
        open now -- a Begin's, a Begin Prepare's, or the streamed one whose block is open -- as the next
        messages of the stream, which the decoder counts without being fed: row changes it would have
        accepted, which leave its state and caches as they are.  The writer reads them back from
        :meth:`Changes.wire` when the transaction commits."""
        decoder, router = self.decoder, self._router
        if decoder.in_stream:
            assert decoder.stream_xid is not None  # in a stream block: its Stream Start set the xid
            key = router.streams[decoder.stream_xid]
        elif router.current is not None and decoder.state != IDLE:
            key = router.current
        else:
            raise ValueError("no transaction is open to add rendered changes to")
        decoder.skip(rendered.count)
        self._buffers[key].add_rendered(rendered)

    # -- output --------------------------------------------------------------------------------------------

    def _transaction(self, buffer: _Buffer, commit: Commit | StreamCommit | CommitPrepared) -> Transaction:
        prepare = buffer.prepare
        return Transaction(
            xid=getattr(commit, "xid", None) or buffer.xid, commit_lsn=commit.commit_lsn, end_lsn=commit.end_lsn,
            commit_time=commit.commit_time, changes=Changes(buffer, self), origin=buffer.origin,
            gid=getattr(commit, "gid", None), prepare_lsn=prepare.prepare_lsn if prepare else None,
            prepare_time=prepare.prepare_time if prepare else None, streamed=buffer.streamed)

    def _change(self, entry: tuple[int, int, int | None, Any], buffer: _Buffer) -> Change:
        index, subxid, lsn, item = entry
        if item.__class__ is Rendered:
            raise TypeError("changes a writer rendered itself (Assembler.add_rendered) make no Change objects: "
                            "read them with Changes.wire()")
        message = self._parse_data(item) if isinstance(item, bytes) else item
        schema = buffer.schemas[index] if index != _NO_SCHEMA else None
        return self._maker.change(message, schema, LSN(lsn) if lsn is not None else None, buffer.xid,
                                  subxid if buffer.streamed else None)

    def _parse_data(self, data: bytes) -> WireMessage:
        """A change read back from a spill file."""
        return self._parse(data, proto_version=self.decoder.proto_version, encoding=self.decoder.encoding)

    def _encode(self, message: WireMessage) -> bytes:
        """A buffered change's wire bytes, for the spill file."""
        return self._build(message, proto_version=self.decoder.proto_version, encoding=self.decoder.encoding)

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def open_transactions(self) -> int:
        """Transactions buffered and not yet decided: the open one, open streamed ones, prepared ones."""
        return len(self._buffers)

    @property
    def prepared_waiting(self) -> bool:
        """Whether a prepared transaction waits for its Commit Prepared or Rollback Prepared (a writer that
        takes a two-phase transaction whole, Prepare and Commit Prepared in one go, may do so only while none
        does: a second Prepare of one gid would replace the first)."""
        return bool(self._router.prepared)

    @property
    def buffered_bytes(self) -> int:
        """Bytes held in memory (not spilled) by the buffered transactions."""
        return sum(b.size for b in self._buffers.values())


class ChangeMaker:
    """Makes :class:`Change` objects from change messages: the part of the assembler that the split decoding
    of :mod:`replwire.codec.split` shares.

    :meth:`schema_for` fixes, when a change arrives, the Relation and Type messages its values will be read
    with; :meth:`change` makes the change (values typed through psycopg, or untyped with ``typed=False``).
    With ``rows=False`` it leaves ``new``/``old``/``key`` unset, for callers that read the wire tuples of
    ``Change.message`` themselves.  Text is read in the client ``encoding``.
    """

    def __init__(self, *, typed: bool = True, rows: bool = True, encoding: str = UTF8) -> None:
        self.encoding = encoding
        self.loader = ValueLoader(encoding) if typed else None
        self.rows = rows
        self._schemas: dict[tuple[int, int], RowSchema] = {}

    def schema_for(self, decoder: Decoder, message: WireMessage) -> Any:
        """What reading ``message``'s values needs, from ``decoder``'s caches now: a :class:`RowSchema`, a
        tuple of Relations for a Truncate, ``None`` for a logical message."""
        if message.__class__ not in _OPS:
            if isinstance(message, Message):
                return None
            assert isinstance(message, Truncate)  # the change messages: Insert, Update, Delete, Truncate, Message
            return tuple(decoder.relations[r] for r in message.relation_ids)
        return self.row_schema(decoder, message.relation_id)

    def row_schema(self, decoder: Decoder, relation_id: int) -> RowSchema:
        """The :class:`RowSchema` of the relation ``relation_id`` from ``decoder``'s caches now."""
        relation = decoder.relations[relation_id]
        key = (id(relation), decoder.types_version)
        schema = self._schemas.get(key)
        if schema is None or schema.relation is not relation:
            schema = RowSchema(relation, tuple(decoder.types.get(c.type_id) for c in relation.columns))
            if len(self._schemas) > 4096:
                self._schemas.clear()
            self._schemas[key] = schema
        return schema

    def row(self, schema: RowSchema, columns: Any, only_keys: bool = False) -> dict[str, Any] | None:
        if columns is None:
            return None
        if self.loader is None:
            return untyped_row(schema, columns, only_keys=only_keys, encoding=self.encoding)
        return self.loader.load_row(schema, columns, only_keys=only_keys)

    def change(self, message: WireMessage, schema: Any, lsn: LSN | None, xid: int | None,
               subxid: int | None = None) -> Change:
        """The :class:`Change` of ``message`` (read with ``schema`` from :meth:`schema_for`), made by the
        top-level transaction ``xid`` and, in a streamed transaction, the (sub)transaction ``subxid``."""
        op = _OPS.get(message.__class__)
        if op is not None:
            relation = schema.relation
            # positional, in Change's field order: half the cost of keywords, and one is made per change
            change = Change(op, relation_namespace(relation), relation.name, relation.relation_id, lsn, xid,
                            subxid, None, None, None, None, None, None, None, None, None, None, None, message,
                            relation, schema)
            if not self.rows:
                return change
            return self._rows(change, schema, message)
        if isinstance(message, Message):
            return Change("message", lsn=lsn, xid=xid, subxid=subxid, prefix=message.prefix, content=message.content,
                          transactional=message.is_transactional, message=message)
        if isinstance(message, Truncate):
            return Change("truncate", lsn=lsn, xid=xid, subxid=subxid,
                          relations=[(relation_namespace(r), r.name) for r in schema],
                          relation_ids=list(message.relation_ids), options=message.options,
                          cascade=message.cascade, restart_identity=message.restart_identity, message=message)
        raise TypeError(f"not a change message: {type(message).__name__}")

    def _rows(self, change: Change, schema: RowSchema, message: WireMessage) -> Change:
        relation = schema.relation
        change.new = self.row(schema, getattr(message, "new", None))
        key, old = getattr(message, "key", None), getattr(message, "old", None)
        if key is not None:
            change.key = self.row(schema, key, only_keys=True)
        elif old is not None:
            change.old = old_row = self.row(schema, old)
            assert old_row is not None  # old is not None
            change.key = {c.name: old_row[c.name] for c in relation.columns if c.flags & 1}
        return change


_OPS = {Insert: "insert", Update: "update", Delete: "delete"}


def _out_of_stream(message: Any) -> Any:
    """A streamed change without its Xid, the form it has outside a stream: what ``dataclasses.replace(message,
    xid=None)`` gives, field by field, without building its keyword arguments and calling ``__init__`` (which
    only sets the fields) for each change of a streamed transaction."""
    copy = object.__new__(message.__class__)
    for name, _, _ in message._fields:
        setattr(copy, name, getattr(message, name))
    copy.xid = None
    return copy


def _cost(message: Any, data: bytes | None = None) -> int:
    """About how many bytes a buffered change costs in memory: its wire bytes (``data``, or as many as its
    tuples' data and lengths take), :data:`ENTRY_OVERHEAD`, and :data:`COLUMN_OVERHEAD` per tuple column."""
    cls = message.__class__
    if data is not None and cls in _TUPLE_NAMES:
        columns = 0
        for name in _TUPLE_NAMES[cls]:
            tuple_ = getattr(message, name)
            if tuple_ is not None:
                columns += len(tuple_)
        return len(data) + ENTRY_OVERHEAD + COLUMN_OVERHEAD * columns
    columns = 0
    size = 8 + len(getattr(message, "content", b"") or b"")
    for name in ("new", "old", "key"):
        tuple_ = getattr(message, name, None)
        if tuple_:
            columns += len(tuple_)
            size += sum(len(c.data) + 5 for c in tuple_ if c.data is not None)
    return size + ENTRY_OVERHEAD + COLUMN_OVERHEAD * columns


_TUPLE_NAMES = {Insert: ("new",), Update: ("key", "old", "new"), Delete: ("key", "old")}
_new = object.__new__
#: The tags of Begin and Commit (:meth:`Assembler.feed` takes them in one go too).
_BEGIN_COMMIT = frozenset(b"BC")
#: The tags of the row changes (:meth:`Assembler.feed` takes them in one go).
_ROW_TAGS = frozenset(b"IUD")
#: The decoder states a row change may come in (every one but idle).
_ROW_STATES = frozenset((TRANSACTION, PREPARING, STREAM))


def _insert_out_of_stream(message: Any) -> Any:
    copy = object.__new__(Insert)
    copy.xid, copy.relation_id, copy.new = None, message.relation_id, message.new
    return copy


def _update_out_of_stream(message: Any) -> Any:
    copy = object.__new__(Update)
    copy.xid, copy.relation_id, copy.key, copy.old, copy.new = (None, message.relation_id, message.key, message.old,
                                                                message.new)
    return copy


def _delete_out_of_stream(message: Any) -> Any:
    copy = object.__new__(Delete)
    copy.xid, copy.relation_id, copy.key, copy.old = None, message.relation_id, message.key, message.old
    return copy


#: :func:`_out_of_stream` of each row change, field by field.
_OUT_OF_STREAM = {Insert: _insert_out_of_stream, Update: _update_out_of_stream, Delete: _delete_out_of_stream}


def relation_namespace(relation: Relation) -> str:
    """The schema a relation's changes name: its namespace, or ``pg_catalog``, which pgoutput sends as an
    empty namespace."""
    return relation.namespace or "pg_catalog"
