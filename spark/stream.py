"""The ``replwire`` streaming source: committed changes from a live logical replication slot, exactly once.

>>> from replwire.spark import register
>>> register(spark)  # doctest: +SKIP
>>> changes = (spark.readStream.format("replwire")
...            .option("dsn", "host=/var/run/postgresql dbname=app")
...            .option("slot", "app_spark").option("publication", "app_pub")
...            .option("createSlot", "true").option("maxChanges", "50000").load())  # doctest: +SKIP
>>> query = (changes.writeStream.format("parquet").option("path", "lake/changes")
...          .option("checkpointLocation", "lake/_checkpoints/changes").start())  # doctest: +SKIP

The rows are those of ``spark.read.format("replwire")`` (:data:`replwire.spark.rows.CHANGES`): one per
committed change of the publication's tables, and one per logical message with ``messages``.

Strategy: an offset is a position in the WAL, ``{"lsn": "0/16B3748"}``, and every offset the source hands out
is a *completed* position -- the end LSN of a transaction's commit record (or of a non-transactional logical
message's record), or WAL that holds nothing for this slot -- never a place inside a transaction or a commit
record: logical decoding skips a transaction whose commit record starts before the slot's confirmed position,
so a position inside one would lose it.  Only the SQL functions are used, over ordinary connections:

* :meth:`~ReplwireStreamReader.latestOffset` peeks at the slot (``pg_logical_slot_peek_binary_changes``,
  which leaves it where it is) and reads only the Commit and Message rows of the result, with their row
  numbers, to find the last completed position within ``maxChanges`` rows after the start.  The server
  returns whole transactions (its row limit is checked at commits), so a transaction larger than the limit
  still makes one micro-batch of its own.
* :meth:`~ReplwireStreamReader.read` (one Spark partition per micro-batch: a slot is one ordered stream)
  peeks again up to the batch's end, runs the rows through one :class:`~replwire.codec.Assembler`, keeps
  the transactions and messages whose position is in ``(start, end]`` and yields them as Arrow batches
  (:class:`~replwire.spark.rows.ChangeRows`).  The slot is never ahead of ``start`` here, so a micro-batch
  read again after a failure gets the same rows.
* :meth:`~ReplwireStreamReader.commit` moves the slot (``pg_replication_slot_advance``) to a batch's end.
  Spark calls it only once the batch is in the query's commit log, so a query restarted from its checkpoint
  finds every change it has not committed still in the slot, and none twice.  Spark calls it for a batch
  when it plans the next one, so a query that stopped (or has nothing new) leaves the slot at the end of
  the batch before its last committed one: the checkpoint's commit log holds the last; a query restarted
  from it starts there, and the changes of that batch, still in the slot, are skipped (their positions are
  not after the start offset).  The slot holds that batch's WAL meanwhile, nothing more.

``position`` is the change's index within its transaction (0, 1, ...; 0 for a non-transactional message),
so ``coalesce(end_lsn, lsn), position`` orders and identifies the changes of the whole stream, however
they were cut into micro-batches.  ``Trigger.AvailableNow`` is supported: the query stops at the WAL
position current when it started.

Every peek decodes the slot's WAL from its confirmed position again, and Spark commits a batch only when it
plans the next one, so each change is decoded about three times: twice while planning, once while reading.

Not supported: ``streaming`` (each peek would send a large transaction still in progress again: leave it
off, the server spills such a transaction to disk and sends it once, at its commit) and slots created with
``two_phase`` (a prepared transaction would hold every later one back until it is decided; without it, a
two-phase transaction arrives whole at COMMIT PREPARED, and not at all after ROLLBACK PREPARED).

Options:

``dsn`` (required)
    libpq connection string of the database the slot belongs to.
``slot`` (required)
    The logical replication slot (plugin ``pgoutput``) this query alone reads and advances.
``publication`` (required)
    The publication to decode (its name as created, quoted for pgoutput here).
``protoVersion``
    pgoutput protocol version (default: the highest the server supports, as ``replwire capture``).
``binary``, ``messages``
    ``true`` to ask pgoutput for binary values / logical messages (default ``false``).
``createSlot``
    ``true`` to create the slot when it does not exist (default ``false``: a missing slot is an error).
``maxChanges``
    At most about this many rows peeked per micro-batch (Begin, Relation and Commit rows count); at least
    one whole transaction.  Default: everything available.
``encoding``
    For a ``SQL_ASCII`` database, whose bytes are in no declared encoding (which Spark's strings cannot
    hold), the encoding to read them in: ``UTF8``, or ``LATIN1``, which keeps every byte.  Needed for such
    a database; any other is read in the connection's client encoding.
``idleAdvanceBytes``
    When everything up to the server's WAL end has been read and at least this many bytes of WAL hold
    nothing for this slot (other tables, other databases), the offset moves over them anyway, so the slot
    does not hold that WAL; each such move is an empty micro-batch.  Default 16 MiB.
``records``
    ``true`` for the slot's rows as the server sends them (:func:`records_schema`) instead of change rows:
    what :class:`replwire.spark.writer.LakehouseWriter` applies to Delta or Iceberg tables.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from replwire.codec.errors import ReplwireError
from replwire.codec.io.segments import text_encoding
from replwire.codec.io.slot import SlotError, check_slot, server_version, wal_end
from replwire.codec.options import OptionsError, PgoutputOptions, as_arguments
from replwire.codec.scalars import LSN

from .options import Options

__all__ = ["LsnRange", "ReplwireStreamReader", "StreamError", "StreamOptions", "records_schema"]

_BATCH_ROWS = 8192
_PEEK = "pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, VARIADIC %s::text[])"
#: The Commit and Message rows of a peek (the only ones that complete a position), with their row numbers;
#: the last row always comes too, so ``total`` is known.
_MARKS = ("SELECT n, total, data FROM (SELECT n, count(*) OVER () AS total, data FROM " + _PEEK
          + " WITH ORDINALITY AS peeked(lsn, xid, data, n)) AS counted"
          " WHERE substr(data, 1, 1) IN ('\\x43'::bytea, '\\x4d'::bytea) OR n = total")


class StreamError(ReplwireError, RuntimeError):
    """The slot cannot be read as asked: missing, another plugin, moved past the query's offset, ..."""


@dataclass(frozen=True)
class StreamOptions:
    """The options of ``spark.readStream.format("replwire")``, checked (see the module docstring)."""

    dsn: str
    slot: str
    publication: str
    proto_version: int | None = None
    binary: bool = False
    messages: bool = False
    create_slot: bool = False
    max_changes: int | None = None
    idle_advance_bytes: int = 16 * 2**20
    encoding: str | None = None
    records: bool = False

    @classmethod
    def parse(cls, options: Any) -> StreamOptions:
        given = Options(options)
        missing = [name for name in ("dsn", "slot", "publication") if not given.get(name)]
        if missing:
            raise ValueError(f"replwire: readStream needs the option{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(missing)}")
        if given.get("path") or given.get("paths") or given.get("table"):
            raise ValueError("replwire: readStream reads a live slot (options dsn, slot, publication); it takes no "
                             "input paths and no table option (filter the change rows on schema and table)")
        if given.boolean("streaming", False):
            raise ValueError("replwire: readStream cannot use streaming: every peek at the slot would send a "
                             "transaction still in progress again; leave it off (the server spills a large "
                             "transaction to disk and sends it once, at its commit)")
        idle = given.integer("idleAdvanceBytes", cls.idle_advance_bytes, 0)
        assert idle is not None
        return cls(dsn=str(given.get("dsn")), slot=str(given.get("slot")), publication=str(given.get("publication")),
                   proto_version=given.integer("protoVersion", None, 1), binary=given.boolean("binary", False),
                   messages=given.boolean("messages", False), create_slot=given.boolean("createSlot", False),
                   max_changes=given.integer("maxChanges", None, 1), idle_advance_bytes=idle,
                   encoding=given.get("encoding"), records=given.boolean("records", False))

    def pgoutput(self, server_version: int) -> dict[str, str]:
        """The pgoutput options for this server (``proto_version`` among them)."""
        asked = PgoutputOptions(self.proto_version, (self.publication,), binary=self.binary, messages=self.messages)
        try:
            return asked.for_server(server_version)
        except OptionsError as error:
            raise ValueError(f"replwire: {error}") from None

    def peek_arguments(self, server_version: int) -> tuple[int, list[str]]:
        """The protocol version and the pgoutput options (as the peek's variadic text array) for this server."""
        options = self.pgoutput(server_version)
        return int(options["proto_version"]), as_arguments(options)


class LsnRange(InputPartition):
    """One micro-batch: the completed positions in ``(start, end]``, how to peek at the slot, and the client
    encoding of what it sends."""

    def __init__(self, start: int, end: int, proto_version: int, arguments: list[str], encoding: str) -> None:
        super().__init__(0)
        self.start, self.end = start, end
        self.proto_version, self.arguments, self.encoding = proto_version, arguments, encoding


def _lsn(offset: dict[str, Any]) -> LSN:
    try:
        return LSN(offset["lsn"])
    except (KeyError, TypeError, ValueError):
        raise StreamError(f"replwire: not a replwire stream offset: {offset!r}") from None


def _offset(lsn: int) -> dict[str, str]:
    return {"lsn": str(LSN(lsn))}


class ReplwireStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets, planning and commits on the driver; :meth:`read` on an executor (see the module docstring).

    Holds no connection between calls: each call opens one, and closes it before it returns.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = StreamOptions.parse(options)
        self.schema = schema
        self._peek: tuple[int, list[str]] | None = None  # protocol version and peek arguments, once known
        self._encoding = "UTF8"  # what names and text values are read in (the connections' client encoding)
        self._target: LSN | None = None  # Trigger.AvailableNow: where this run of the query stops

    # -- the driver ---------------------------------------------------------------------------------------

    def _connect(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(self.options.dsn, autocommit=True)
        except psycopg.Error as error:
            raise StreamError(f"replwire: cannot connect: {str(error).strip()}") from None

    def _slot(self, conn: Any, start: LSN | None = None) -> LSN:
        """The slot's confirmed position, after checking the slot (creating it with ``createSlot``); an error
        when it has moved past ``start``, the offset the query goes on from."""
        slot = self.options.slot
        with conn.cursor() as cur:
            if self._peek is None:
                self._peek = self.options.peek_arguments(server_version(cur))
                try:
                    self._encoding = text_encoding(conn.info.parameter_status("client_encoding") or "UTF8",
                                                   self.options.encoding, need_text=True)
                except ValueError as error:
                    raise StreamError(f"replwire: slot {slot!r}: {error}") from None
            try:
                # A slot created now is at the current WAL position: past the offset of a query that had read
                # the slot before.
                position = check_slot(cur, slot, two_phase=False, create=self.options.create_slot,
                                      hint="(create it, or set the option createSlot to true)")
            except SlotError as error:
                raise StreamError(f"replwire: {error}") from None
        if start is not None and position > start:
            raise StreamError(f"replwire: slot {slot!r} is confirmed up to {position}, past the query's offset "
                              f"{start}: the changes in between are gone (was the slot advanced by something "
                              "else, or is another query reading it?)")
        return position

    def initialOffset(self) -> dict[str, str]:
        """A new query starts at the slot's confirmed position."""
        with self._connect() as conn:
            return _offset(self._slot(conn))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_changes is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_changes)

    def prepareForTriggerAvailableNow(self) -> None:
        with self._connect() as conn, conn.cursor() as cur:
            self._target = wal_end(cur)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, str]:
        """The last completed position after ``start`` within the read limit; ``start`` when there is none."""
        begin = _lsn(start)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        target = self._target
        with self._connect() as conn:
            self._slot(conn, begin)
            assert self._peek is not None
            proto, arguments = self._peek
            with conn.cursor() as cur:
                server_end = wal_end(cur)
            if target is not None:
                server_end = min(server_end, target)
            ask = max_rows
            while True:
                marks, total = _marks(conn, self.options.slot, target, ask, proto, arguments, self._encoding)
                before = max((n for n, position in marks if position <= begin), default=0)
                # the server stops at the first commit at or past the row limit: all of WAL was read if it did not
                cut = ask is not None and total >= ask
                if cut and max_rows is not None and total - before < max_rows:
                    ask = before + max_rows  # most rows were before start (the slot lags one batch): ask again
                    continue
                break
        fresh = [(n - before, position) for n, position in marks
                 if position > begin and (target is None or position <= target)]
        latest = begin
        if fresh:
            within = [position for rows, position in fresh if max_rows is None or rows <= max_rows]
            latest = within[-1] if within else fresh[0][1]
        everything = not cut and (not fresh or latest == fresh[-1][1])
        if everything and server_end > latest and server_end - latest >= self.options.idle_advance_bytes:
            latest = server_end  # nothing for this slot up to there: let the server forget that WAL
        return _offset(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[LsnRange]:
        begin, stop = _lsn(start), _lsn(end)
        if stop <= begin:
            return []
        if self._peek is None:  # a restarted query replays a planned batch before asking for offsets
            with self._connect() as conn:
                self._slot(conn, begin)
        assert self._peek is not None
        return [LsnRange(int(begin), int(stop), *self._peek, self._encoding)]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has committed everything up to ``end``: the slot may forget it."""
        target = _lsn(end)
        with self._connect() as conn:
            if self._slot(conn) < target:
                conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.options.slot, str(target)))

    # -- an executor ---------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from replwire.codec.stream.values import ValueLoader

        from .rows import ChangeRows, batches

        assert isinstance(partition, LsnRange)  # Spark hands back the partitions that partitions() made
        if self.options.records:
            yield from _record_batches(self._records(partition))
            return
        yield from batches(ChangeRows(ValueLoader(partition.encoding)), self._changes(partition), _BATCH_ROWS)

    def _peeked(self, part: LsnRange) -> Iterator[tuple[LSN, int, bytes]]:
        """The slot's rows up to ``part.end``: ``(lsn, xid, data)``."""
        import psycopg

        start, end = LSN(part.start), LSN(part.end)
        # One transaction, for as long as the rows are read: a server-side cursor hands a large batch over in
        # pieces while Spark takes the Arrow batches.
        with psycopg.connect(self.options.dsn) as conn:
            self._slot(conn, start)
            with conn.cursor(name="replwire_stream") as cur:
                cur.itersize = 2000
                cur.execute("SELECT lsn::text, xid::text::bigint, data FROM " + _PEEK,
                            (self.options.slot, str(end), None, part.arguments))
                for lsn, xid, data in cur:
                    yield LSN(lsn), xid or 0, bytes(data)

    def _records(self, part: LsnRange) -> Iterator[tuple[int, int, bytes]]:
        """The rows of ``part`` (:func:`records_schema`): those of the transactions whose commit completes a position in
        ``(start, end]``, and such non-transactional messages.  The server sends a table's Relation (and its
        types' Type) message once per read of the slot, before its first change, maybe inside a transaction
        before ``start``: such messages are kept, and given right after the Begin of the next transaction
        kept, so that the rows decode on their own."""
        from replwire.codec import parse
        from replwire.codec.io.positions import message_completes

        start, end = part.start, part.end
        held: list[tuple[int, int, bytes]] = []  # the open transaction's rows
        schema: dict[tuple[int, int], tuple[int, int, bytes]] = {}  # Relation/Type rows of transactions not kept
        for lsn, xid, data in self._peeked(part):
            tag = data[:1]
            if tag == b"B":
                held = [(lsn, xid, data)]
            elif tag == b"M" and not held:  # a non-transactional message
                position = message_completes(parse(data, proto_version=part.proto_version, encoding=part.encoding))
                if position is not None and start < position <= end:
                    yield lsn, xid, data
            elif tag == b"C":
                held.append((lsn, xid, data))
                position = message_completes(parse(data, proto_version=part.proto_version, encoding=part.encoding))
                if position is not None and start < position <= end:
                    yield held[0]
                    for *_, message in schema.values():  # (at the Begin's position: inside it)
                        yield held[0][0], held[0][1], message
                    schema.clear()
                    yield from held[1:]
                else:
                    for row in held:
                        if row[2][:1] in (b"R", b"Y"):
                            schema[row[2][0], int.from_bytes(row[2][1:5], "big")] = row
                held = []
            else:
                held.append((lsn, xid, data))

    def _changes(self, part: LsnRange) -> Iterator[Any]:
        """The committed changes of ``part``, in commit order (:class:`~replwire.codec.split.Decoded`)."""
        from replwire.codec import Assembler, Transaction
        from replwire.codec.split import Decoded, Outcome

        # ChangeRows reads the wire tuples
        assembler = Assembler(proto_version=part.proto_version, encoding=part.encoding, typed=False)
        start, end = LSN(part.start), LSN(part.end)
        for lsn, _, data in self._peeked(part):
            for item in assembler.feed(data, lsn=lsn):
                if not isinstance(item, Transaction):  # a non-transactional logical message
                    if item.lsn is not None and start < item.lsn <= end:
                        yield Decoded(0, item, None)
                    continue
                with item:
                    if not start < item.end_lsn <= end:
                        continue
                    outcome = Outcome(item.xid, item.commit_lsn, item.end_lsn, item.commit_time, item.origin,
                                      item.gid, item.prepare_lsn, item.prepare_time, item.streamed)
                    for index, change in enumerate(item.changes):
                        yield Decoded(index, change, outcome)


def records_schema() -> StructType:
    """The Spark schema of ``spark.readStream.format("replwire").option("records", "true")``: the slot's rows
    as ``pg_logical_slot_peek_binary_changes`` returns them, ``n`` numbering them in stream order (see
    :meth:`ReplwireStreamReader._records`)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField("n", T.LongType(), False), T.StructField("lsn", T.LongType(), False),
                         T.StructField("xid", T.LongType(), False), T.StructField("data", T.BinaryType(), False)])


def _record_batches(rows: Iterator[tuple[int, int, bytes]]) -> Iterator[Any]:
    """``rows`` as Arrow record batches of :func:`records_schema`, of at most 8192 rows or about 16 MiB."""
    import pyarrow as pa

    schema = pa.schema([pa.field("n", pa.int64(), False), pa.field("lsn", pa.int64(), False),
                        pa.field("xid", pa.int64(), False), pa.field("data", pa.binary(), False)])
    n, size = 0, 0
    lsns: list[int] = []
    xids: list[int] = []
    datas: list[bytes] = []

    def batch() -> Any:
        return pa.RecordBatch.from_arrays([pa.array(range(n, n + len(datas)), pa.int64()), pa.array(lsns, pa.int64()),
                                           pa.array(xids, pa.int64()), pa.array(datas, pa.binary())], schema=schema)

    for lsn, xid, data in rows:
        lsns.append(int(lsn))
        xids.append(xid)
        datas.append(data)
        size += len(data)
        if len(datas) >= _BATCH_ROWS or size >= 16 << 20:
            yield batch()
            n, lsns, xids, datas, size = n + len(datas), [], [], [], 0
    if datas:
        yield batch()


def _marks(conn: Any, slot: str, upto: LSN | None, rows: int | None, proto: int,
           arguments: list[str], encoding: str) -> tuple[list[tuple[int, LSN]], int]:
    """Peek at the slot (up to ``upto``, about ``rows`` rows): the row number and position of each row that
    completes a position, and the number of rows."""
    from replwire.codec import parse
    from replwire.codec.io.positions import message_completes

    marks: list[tuple[int, LSN]] = []
    total = 0
    rows_read = conn.execute(_MARKS, (slot, str(upto) if upto is not None else None, rows, arguments))
    for n, total, data in rows_read:  # noqa: B007 - the last row's total is returned
        data = bytes(data)
        if data[:1] in (b"C", b"M"):
            position = message_completes(parse(data, proto_version=proto, encoding=encoding))
            if position is not None:
                marks.append((n, position))
    return marks, total
