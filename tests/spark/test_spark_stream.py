"""The streaming source (``spark.readStream.format("replwire")``) on a real Spark session (local[2]) and real
PostgreSQL servers: a query stopped in the middle of a workload, failed in the middle of a micro-batch and
restarted from its checkpoint delivers every committed change exactly once, and the slot never moves past what
the sink has committed.

What the sink should hold is worked out without the source: a second pgoutput slot created before the workload,
peeked once and run through one :class:`~replwire.codec.Assembler`, and -- independently of replwire -- a
``test_decoding`` slot, the server's own account of what was committed.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter

import pytest

from replwire.codec import LSN, Assembler, Transaction
from replwire.codec.split import Decoded, Outcome

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")
import psycopg  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.errors import StreamingQueryException  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402

from replwire.spark.rows import CHANGES, ChangeRows  # noqa: E402
from replwire.spark.stream import ReplwireStreamReader, StreamError  # noqa: E402

PREFIX = "replwire-stream-test"
#: Hang guard for a query run (never an assertion about how long anything takes).
RUN_TIMEOUT = 120
#: The maxChanges option of the queries: a few micro-batches per part of the workload.
MAX_CHANGES = 40


# -- the workload --------------------------------------------------------------------------------------------


class Names:
    def __init__(self, major: int) -> None:
        self.items, self.side = f"stream_items_{major}", f"stream_side_{major}"
        self.publication, self.slot = f"stream_pub_{major}", f"stream_slot_{major}"
        self.check, self.decoding = f"stream_check_{major}", f"stream_decoding_{major}"


def workload(conn, names: Names, part: int, marker: bool = False, large: bool = False) -> None:
    """Every kind of change, and transactions whose changes must never arrive (label 'rolled back'); with
    ``large``, a transaction bigger than a micro-batch's limit."""
    items, base = names.items, part * 1000

    def insert(key: int, label: str) -> None:
        conn.execute(f"INSERT INTO {items} VALUES (%s, %s, %s, now())", (key, label, f"{key}.25"))

    for i in range(4):
        insert(base + i, f"part {part} row {i} ü")
    with conn.transaction():
        for i in range(10, 18):
            insert(base + i, f"part {part} batch {i}")
        conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (PREFIX, f"part {part} inside"))
    if large:
        with conn.transaction():
            for i in range(100, 100 + MAX_CHANGES + 5):
                insert(base + i, f"part {part} large {i}")
    conn.execute(f"UPDATE {items} SET label = label || ' updated', amount = amount * 2 WHERE id BETWEEN %s AND %s",
                 (base, base + 2))
    conn.execute(f"DELETE FROM {items} WHERE id = %s", (base + 3,))
    with conn.transaction():
        insert(base + 50, "rolled back")
        raise psycopg.Rollback()
    with conn.transaction():
        insert(base + 60, f"part {part} around a savepoint")
        with conn.transaction():
            insert(base + 61, "rolled back")
            raise psycopg.Rollback()
        insert(base + 62, f"part {part} after the savepoint")
    conn.execute("BEGIN")
    insert(base + 70, f"part {part} prepared")
    conn.execute(f"PREPARE TRANSACTION 'stream_{items}_{part}_c'")
    conn.execute("BEGIN")
    insert(base + 71, "rolled back")
    conn.execute(f"PREPARE TRANSACTION 'stream_{items}_{part}_r'")
    insert(base + 72, f"part {part} while two are prepared")
    conn.execute(f"COMMIT PREPARED 'stream_{items}_{part}_c'")
    conn.execute(f"ROLLBACK PREPARED 'stream_{items}_{part}_r'")
    conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (PREFIX, f"part {part} outside"))
    with conn.transaction():
        conn.execute(f"INSERT INTO {names.side} SELECT g FROM generate_series(%s::int, %s::int) AS g", (base, base + 4))
    conn.execute(f"TRUNCATE {names.side}")
    for i in range(20, 26):  # a few more small transactions, so that stopping lands among them
        insert(base + i, f"part {part} tail {i}")
        if marker and i == 23:  # more rows than a micro-batch's limit (MAX_CHANGES) into the part
            insert(base + 500, "boom")


# -- what the sink should hold -------------------------------------------------------------------------------


def peek_arguments(major: int, binary: bool) -> tuple[int, list[str]]:
    proto = 4 if major >= 16 else 3
    args = ["proto_version", str(proto), "publication_names", f"stream_pub_{major}", "messages", "true"]
    return proto, args + (["binary", "true"] if binary else [])


def expected_changes(spark, conn, names: Names, proto: int, args: list[str]):
    """The change rows of the check slot through one Assembler: every committed change, each once."""
    rows = conn.execute("SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                        "VARIADIC %s::text[])", (names.check, args)).fetchall()
    assembler, collected = Assembler(proto_version=proto), ChangeRows()
    for lsn, data in rows:
        for item in assembler.feed(bytes(data), lsn=LSN(lsn)):
            if isinstance(item, Transaction):
                outcome = Outcome(item.xid, item.commit_lsn, item.end_lsn, item.commit_time)
                for index, change in enumerate(item.changes):
                    collected.add(Decoded(index, change, outcome))
            else:
                collected.add(Decoded(0, item, None))
    return spark.createDataFrame(pa.Table.from_batches([collected.batch()]))


def server_account(conn, names: Names) -> Counter:
    """What test_decoding says was committed: (xid, op, what) for each change of the two tables and each
    logical message of the test."""
    out: Counter = Counter()
    mine = {f"public.{names.items}", f"public.{names.side}"}
    for xid, data in conn.execute("SELECT xid::text::bigint, data FROM pg_logical_slot_peek_changes(%s, NULL, NULL)",
                                  (names.decoding,)):
        change = re.match(r"table (.+?): (INSERT|UPDATE|DELETE|TRUNCATE): (.*)", data)
        if change:
            tables, op, rest = change[1].split(", "), change[2].lower(), change[3]
            if not mine & set(tables):
                continue
            if op == "truncate":
                out[(xid, op, tuple(sorted(tables)))] += 1
            else:
                out[(xid, op, (tables[0], int(re.search(r"\bid\[integer\]:(-?\d+)", rest)[1])))] += 1
            continue
        message = re.match(r"message: transactional: (\d) prefix: (.*?), sz: \d+ content:(.*)", data, re.S)
        if message and message[2] == PREFIX:
            out[(xid if message[1] == "1" else None, "message", message[3])] += 1
    return out


def sink_account(rows) -> Counter:
    out: Counter = Counter()
    for row in rows:
        if row.op == "truncate":  # a row per table it emptied: the statement counted once, at its first table's
            if f"{row.schema}.{row.table}" == row.truncated[0]:
                out[(row.xid, row.op, tuple(sorted(row.truncated)))] += 1
        elif row.op == "message":
            out[(row.xid, row.op, bytes(row.content).decode())] += 1
        else:
            image = json.loads(row.new if row.op != "delete" else row.key)
            out[(row.xid, row.op, (f"{row.schema}.{row.table}", image["id"]))] += 1
    return out


# -- the query and its checkpoint ----------------------------------------------------------------------------


def start_query(spark, options: dict[str, str], out: str, checkpoint: str, flag: str, available_now: bool):
    """The change rows into a Parquet sink; a row labelled 'boom' fails its micro-batch while ``flag`` exists."""

    def go_on(new):
        if new is not None and '"label":"boom"' in new and os.path.exists(flag):
            raise RuntimeError("failure injected by the test")
        return True

    changes = spark.readStream.format("replwire").options(**options).load()
    changes = changes.filter(F.udf(go_on, "boolean")(F.col("new")))
    writer = (changes.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    return writer.start()


def batch_end(checkpoint: str, batch: int) -> LSN:
    """The source offset Spark planned micro-batch ``batch`` to end at (its offset log entry's last line)."""
    with open(os.path.join(checkpoint, "offsets", str(batch))) as handle:
        return LSN(json.loads(handle.read().splitlines()[-1])["lsn"])


def last_batch(directory: str) -> int | None:
    """The highest batch number logged in a Spark log directory (``commits`` or ``_spark_metadata``)."""
    if not os.path.isdir(directory):
        return None
    numbers = [int(name.split(".")[0]) for name in os.listdir(directory) if name.split(".")[0].isdigit()]
    return max(numbers, default=None)


def wait(query, condition, invariant) -> None:
    """Wait until ``condition()`` holds while the query runs, checking ``invariant()`` all along (the deadline
    is a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        invariant()
        if condition():
            return
        assert query.exception() is None
        assert time.monotonic() < deadline, "the query did not get there"
        time.sleep(0.1)


def committed_end(checkpoint: str, start: LSN) -> LSN:
    """Where the micro-batches in the query's commit log end (``start`` before the first)."""
    committed = last_batch(os.path.join(checkpoint, "commits"))
    return batch_end(checkpoint, committed) if committed is not None else start


def slot_behind_commits(conn, names: Names, checkpoint: str, start: LSN) -> LSN:
    """The slot's confirmed position, checked: never past the micro-batches Spark has committed.  The slot is
    read first: Spark logs a commit before the source moves the slot, so this order cannot race."""
    confirmed = slot_position(conn, names.slot)
    end = committed_end(checkpoint, start)
    assert start <= confirmed <= end
    return end


def slot_position(conn, slot: str) -> LSN:
    return LSN(conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone()[0])


def check_phase(spark, conn, names: Names, proto, args, out, checkpoint, start: LSN):
    """After a run: the slot is not past what Spark committed, and the sink holds exactly the changes of the
    micro-batches it committed.  Returns the end of the last committed micro-batch, and the sink's rows."""
    end = slot_behind_commits(conn, names, checkpoint, start)
    # the file sink commits its batch just before the query's commit log: a stop can fall in between
    written = last_batch(os.path.join(out, "_spark_metadata"))
    sink_end = batch_end(checkpoint, written) if written is not None else start
    assert end <= sink_end
    expected = expected_changes(spark, conn, names, proto, args)
    upto = expected.filter(F.coalesce("end_lsn", "lsn") <= F.lit(int(sink_end)))
    sink = spark.read.schema(CHANGES).parquet(out) if written is not None else spark.createDataFrame([], CHANGES)
    assertDataFrameEqual(sink, upto)
    return end, sink.collect()


# -- the test --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("major,binary", [(18, False), (15, True)], ids=["pg18", "pg15-binary"])
def test_stream_stopped_failed_and_restarted_delivers_each_committed_change_once(spark, request, tmp_path, major,
                                                                                  binary):
    server = request.getfixturevalue(f"pg{major}")
    names = Names(major)
    proto, args = peek_arguments(major, binary)
    out, checkpoint, flag = str(tmp_path / "sink"), str(tmp_path / "checkpoint"), str(tmp_path / "fail")
    options = {"dsn": server.dsn, "slot": names.slot, "publication": names.publication, "createSlot": "true",
               "messages": "true", "binary": str(binary).lower(), "maxChanges": str(MAX_CHANGES)}
    with server.connect() as conn:
        conn.execute(f"CREATE TABLE {names.items} (id int PRIMARY KEY, label text, amount numeric(12, 2), "
                     "at timestamptz)")
        conn.execute(f"CREATE TABLE {names.side} (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {names.publication} FOR TABLE {names.items}, {names.side}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (names.check,))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (names.decoding,))
        try:
            # Run 1: a running query, started on nothing (it creates the slot), stopped in the middle of the
            # workload.
            query = start_query(spark, options, out, checkpoint, flag, available_now=False)
            # the slot is listed as soon as its creation begins; its position is set once it is consistent
            wait(query, lambda: conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s "
                                             "AND confirmed_flush_lsn IS NOT NULL", (names.slot,)).fetchone(),
                 lambda: None)
            start = slot_position(conn, names.slot)
            assert start >= slot_position(conn, names.check)
            workload(conn, names, 1)
            wait(query, lambda: sum(p["numInputRows"] for p in query.recentProgress),
                 lambda: slot_behind_commits(conn, names, checkpoint, start))
            workload(conn, names, 2)
            query.stop()
            first, sink = check_phase(spark, conn, names, proto, args, out, checkpoint, start)
            assert sink and first > start

            # Run 2: more workload while stopped; the query fails in the micro-batch holding the 'boom' row.
            workload(conn, names, 3, marker=True)
            open(flag, "w").close()
            query = start_query(spark, options, out, checkpoint, flag, available_now=True)
            with pytest.raises(StreamingQueryException, match="failure injected by the test"):
                query.awaitTermination(RUN_TIMEOUT)
            second, sink = check_phase(spark, conn, names, proto, args, out, checkpoint, start)
            assert second > first
            assert not [row for row in sink if row.new and '"boom"' in row.new]

            # Run 3: more workload; from the checkpoint again, to the end.
            os.remove(flag)
            workload(conn, names, 4, large=True)
            query = start_query(spark, options, out, checkpoint, flag, available_now=True)
            assert query.awaitTermination(RUN_TIMEOUT)
            assert query.exception() is None
            last, sink = check_phase(spark, conn, names, proto, args, out, checkpoint, start)

            # Everything committed, each once; nothing rolled back; as the server itself tells it.
            expected = expected_changes(spark, conn, names, proto, args)
            assert last >= expected.agg(F.max(F.coalesce("end_lsn", "lsn"))).first()[0]
            assert len(sink) == expected.count()
            assert [row for row in sink if row.new and '"boom"' in row.new]
            assert not [row for row in sink if row.new and "rolled back" in row.new]
            assert sink_account(sink) == server_account(conn, names)
            assert len({(row.end_lsn or row.lsn, row.position) for row in sink}) == len(sink)
        finally:
            for running in spark.streams.active:
                running.stop()
            for slot in (names.check, names.decoding, names.slot):
                conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                             "WHERE slot_name = %s", (slot,))


# -- the reader's offsets, without Spark -----------------------------------------------------------------------


def reader(server, names: Names, **options: str) -> ReplwireStreamReader:
    return ReplwireStreamReader({"dsn": server.dsn, "slot": names.slot, "publication": names.publication,
                                 **options}, CHANGES)


def read_all(source: ReplwireStreamReader, start: dict, end: dict) -> list[dict]:
    rows: list[dict] = []
    for part in source.partitions(start, end):
        for batch in source.read(part):
            rows += batch.to_pylist()
    return rows


def test_offsets_are_whole_transactions_within_the_limit(pg18):
    names = Names(18)
    names.slot, names.publication = "stream_offsets", "stream_offsets_pub"
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE stream_offsets (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION stream_offsets_pub FOR TABLE stream_offsets")
        try:
            source = reader(pg18, names, createSlot="true")
            start = source.initialOffset()
            assert source.latestOffset(start, ReadMaxRows(5)) == start  # nothing yet
            conn.execute("INSERT INTO stream_offsets VALUES (1)")  # B R I C: 4 rows
            with conn.transaction():  # 20 changes, more than the limit: a micro-batch of its own
                conn.execute("INSERT INTO stream_offsets SELECT g FROM generate_series(2, 21) AS g")
            conn.execute("INSERT INTO stream_offsets VALUES (22)")
            first = source.latestOffset(start, ReadMaxRows(5))
            assert [r["new"] for r in read_all(source, start, first)] == ['{"id":1}']
            second = source.latestOffset(first, ReadMaxRows(5))  # the slot has not moved: it is still at start
            assert [json.loads(r["new"])["id"] for r in read_all(source, first, second)] == list(range(2, 22))
            assert [r["position"] for r in read_all(source, first, second)] == list(range(20))
            everything = source.latestOffset(start, ReadAllAvailable())
            source.commit(first)
            assert slot_position(conn, names.slot) == LSN(first["lsn"])
            # most rows the peek returns now are before the start offset: the reader asks again for more
            third = source.latestOffset(second, ReadMaxRows(5))
            assert [r["new"] for r in read_all(source, second, third)] == ['{"id":22}']
            assert source.latestOffset(third, ReadMaxRows(5)) == third
            assert source.latestOffset(first, ReadAllAvailable()) == third == everything
            # a micro-batch read again (after a failure) gets the same rows
            assert read_all(source, first, second) == read_all(source, first, second)
            source.commit(third)
            with pytest.raises(StreamError, match="past the query's offset"):
                source.latestOffset(second, ReadMaxRows(5))
            # a slot dropped under the query is made again (createSlot), but where it is made: refused too
            conn.execute("SELECT pg_drop_replication_slot('stream_offsets')")
            with pytest.raises(StreamError, match="past the query's offset"):
                source.latestOffset(third, ReadMaxRows(5))
        finally:
            conn.execute("SELECT pg_drop_replication_slot('stream_offsets')")


def test_wal_holding_nothing_for_the_slot_is_passed_over(pg18):
    names = Names(18)
    names.slot, names.publication = "stream_idle", "stream_idle_pub"
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE stream_idle (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE stream_idle_other (id int PRIMARY KEY, pad text)")
        conn.execute("CREATE PUBLICATION stream_idle_pub FOR TABLE stream_idle")
        try:
            eager = reader(pg18, names, createSlot="true", idleAdvanceBytes="0")
            start = eager.initialOffset()
            conn.execute("INSERT INTO stream_idle_other SELECT g, repeat('x', 100) FROM generate_series(1, 1000) g")
            after = LSN(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])
            assert reader(pg18, names).latestOffset(start, ReadAllAvailable()) == start  # 16 MiB by default
            moved = eager.latestOffset(start, ReadAllAvailable())
            assert after <= LSN(moved["lsn"])
            assert read_all(eager, start, moved) == []
            eager.commit(moved)
            conn.execute("INSERT INTO stream_idle VALUES (1)")
            latest = eager.latestOffset(moved, ReadMaxRows(100))
            assert [r["new"] for r in read_all(eager, moved, latest)] == ['{"id":1}']
        finally:
            conn.execute("SELECT pg_drop_replication_slot('stream_idle')")


def test_refused_configurations(pg18):
    names = Names(18)
    names.slot, names.publication = "stream_refused", "stream_refused_pub"
    with pytest.raises(ValueError, match="streaming"):
        reader(pg18, names, streaming="on")
    with pytest.raises(ValueError, match="dsn"):
        ReplwireStreamReader({"slot": "x", "publication": "y"}, CHANGES)
    with pytest.raises(StreamError, match="does not exist"):
        reader(pg18, names).initialOffset()
    with pg18.connect() as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('stream_refused', 'pgoutput', false, true)")
        try:
            with pytest.raises(StreamError, match="two_phase"):
                reader(pg18, names).initialOffset()
        finally:
            conn.execute("SELECT pg_drop_replication_slot('stream_refused')")
