"""A capture that starts with the initial snapshot, on a real Spark session (local[2]) and real PostgreSQL 15
and 18: the batch source gives the snapshot's rows as op ``snapshot``, ``changes`` writes them to the
per-table datasets, and ``apply`` equals ``SELECT *`` on the server with no value left unknown -- also for
rows written before the capture whose TOASTed value a later update left unchanged."""

from __future__ import annotations

import subprocess
import threading

import pytest

from tests.spark.test_spark import COLUMNS, ITEMS, expected_items
from tests.support.snapshot import capture_command, database, drop_slots, slot_of, wait_for

pytestmark = pytest.mark.server
pyspark = pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402


def prepare(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ITEMS)
        conn.execute("ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL")  # TOASTed, uncompressed
        conn.execute("""INSERT INTO items SELECT i, i % 100, i::bigint * 1000000007, i * 1.25, i / 7.0, i * 0.5,
            i * 0.25, i % 2 = 0, DATE '2024-01-01' + i, TIMESTAMP '2024-01-01 10:00' + i * INTERVAL '1 minute',
            TIMESTAMPTZ '2024-01-01 10:00+02' + i * INTERVAL '1 hour', decode(lpad(to_hex(i), 4, '0'), 'hex'),
            ARRAY['a' || i, NULL, 'c'], ARRAY[i, i + 1], jsonb_build_object('n', i, 'tags', ARRAY['x']),
            md5(i::text)::uuid, 'note ' || i, repeat('toast ' || i || ' ', 1500)
            FROM generate_series(1, 3000) i""")
        conn.execute("UPDATE items SET price = 'NaN', ts = 'infinity', ratio = 'NaN' WHERE id = 2")
        conn.execute("CREATE TABLE keyless (a int, b text)")
        conn.execute("INSERT INTO keyless VALUES (1, 'same'), (1, 'same'), (2, NULL)")
        conn.execute("CREATE TABLE trunc (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO trunc SELECT i, 'before' FROM generate_series(1, 30) i")
        conn.execute("CREATE TABLE untouched (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO untouched SELECT i, 'v' || i FROM generate_series(1, 2000) i")
        conn.execute("CREATE PUBLICATION pub FOR TABLE items, keyless, trunc, untouched")


def writes(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        # rows from before the capture, updated with their TOASTed body left alone ('u')
        conn.execute("UPDATE items SET qty = qty + 1, note = 'touched' WHERE id % 3 = 0")
        conn.execute("UPDATE items SET id = id + 10000 WHERE id = 9")  # a key change, body unchanged
        conn.execute("DELETE FROM items WHERE id % 5 = 0")
        conn.execute("INSERT INTO items (id, qty, body) SELECT i, 1, repeat('new', 100) "
                     "FROM generate_series(5000, 5100) i")
        with conn.transaction():
            conn.execute("UPDATE items SET body = 'rolled back' WHERE id = 1")
            raise psycopg.Rollback()
        conn.execute("INSERT INTO keyless VALUES (3, 'new'), (1, 'same')")
        conn.execute("TRUNCATE trunc")
        conn.execute("INSERT INTO trunc VALUES (1, 'after')")


# each major once, each copy format once: the snapshot is taken alike on both majors
@pytest.mark.parametrize("major, binary", [(18, False), (15, True)], ids=["pg18-text", "pg15-binary"])
def test_apply_of_a_snapshot_capture_equals_select_on_the_server(spark, request, tmp_path, major, binary):
    import psycopg

    from replwire.spark.jobs import apply

    pg_server = request.getfixturevalue(f"pg{major}")
    dsn = database(pg_server, "spark_snap")
    prepare(dsn)
    out = tmp_path / "snap.rwcap"
    capture = subprocess.Popen(capture_command(dsn, out, slot_of(dsn), "pub", "--idle-exit", "2",
                                               *(["--binary"] if binary else [])),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # this test's slot: other tests' slots on the same cluster say nothing of this capture
        wait_for(lambda: conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                                      (slot_of(dsn),)).fetchone()[0] > 0
                 or capture.poll() is not None, what="the slot")
    worker = threading.Thread(target=writes, args=(dsn,))
    worker.start()
    worker.join(120)
    _, stderr = capture.communicate(timeout=300)
    assert capture.returncode == 0, stderr

    # the batch source: the snapshot's rows come first, as op "snapshot", at the snapshot's LSN
    # 4 MiB parts: several, with the snapshot section spanning them, and not a Spark task per 64 KiB of TOAST
    source = spark.read.format("replwire").option("partitionBytes", str(4 << 20)).load(str(out))
    counts = {r["table"]: r["count"] for r in source.where("op = 'snapshot'").groupBy("table").count().collect()}
    assert counts == {"items": 3000, "keyless": 3, "trunc": 30, "untouched": 2000}
    assert source.where("op = 'snapshot'").select("commit_lsn").distinct().count() == 1
    assert source.where("op = 'snapshot' AND new IS NULL").count() == 0
    # no transaction made them: no xid, as replwire decode prints them
    assert source.where("op = 'snapshot' AND (xid IS NOT NULL OR subxid IS NOT NULL)").count() == 0

    result = apply(spark, [str(out)], str(tmp_path / "state"), part_bytes=4 << 20)
    assert result.changes.rows["public.untouched"] == {1: 2000}  # the changes job wrote the snapshot rows
    with psycopg.connect(dsn, autocommit=True) as conn:
        items = spark.read.parquet(str(tmp_path / "state" / "public.items"))
        schema = T.StructType([items.schema[c] for c in COLUMNS] + [T.StructField(
            "_unrepresentable", T.ArrayType(T.StructType([T.StructField("key", T.StringType(), False),
                                                          T.StructField("value", T.StringType(), False)]), False))])
        actual = items.select(*COLUMNS[:-1], F.md5("body").alias("body"),
                              F.array_sort(F.map_entries("_unrepresentable")).alias("_unrepresentable"))
        assertDataFrameEqual(actual, expected_items(spark, conn, schema))
        assert items.where(F.col("_unchanged_toast").isNotNull()).count() == 0  # nothing unknown
        assert items.where("id = 10009").select("body").first()[0] == "toast 9 " * 1500
        for table, columns in (("keyless", ["a", "b"]), ("trunc", ["id", "v"]), ("untouched", ["id", "v"])):
            state = spark.read.parquet(str(tmp_path / "state" / f"public.{table}"))
            assert state.where(F.col("_unchanged_toast").isNotNull()).count() == 0
            server = conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            shown = state.select(*columns)
            assertDataFrameEqual(shown, spark.createDataFrame(server, shown.schema))
    drop_slots(dsn)
