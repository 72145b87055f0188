"""The streaming source into Delta tables with :class:`replwire.spark.LakehouseWriter`: a running query (its own
process, its own JVM) killed (SIGKILL) twice while it writes, restarted from its checkpoint each time, then
drained with ``availableNow``: the tables equal ``SELECT *`` and every position is committed once.  (The
source moves the slot only after Spark's commit log holds the batch, which is after the writer returned:
a slot confirmed before the tables' commit would lose changes at a kill.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from tests.spark.lakehouse import QUERIES, SEGMENTS, data_files, delta_differences, delta_tables, server_rows  # noqa: E402
from tests.spark.test_spark import fresh_database  # noqa: E402

QUERY = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    from replwire.spark import LakehouseWriter, register

    options, out, mode = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    register(spark)
    writer = (spark.readStream.format("replwire").options(**options).load().writeStream
              .foreachBatch(LakehouseWriter(out, format="delta", options=options))
              .option("checkpointLocation", out + "/_checkpoint"))
    if mode == "drain":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    writer.start().awaitTermination()
""")


def test_streaming_query_into_delta_killed_twice_ends_equal(pg18, tmp_path):
    tag = "lake_stream"
    fresh_database(pg18, tag)
    out = str(tmp_path / "lake")
    options = {"dsn": f"{pg18.dsn} dbname={tag}", "slot": f"slot_{tag}", "publication": f"pub_{tag}",
               "binary": "true", "records": "true"}
    script = tmp_path / "query.py"
    script.write_text(QUERY)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

    def start(mode="run"):
        return subprocess.Popen([sys.executable, str(script), json.dumps(options), out, mode],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)

    with pg18.connect(dbname=tag, autocommit=True) as conn:
        for statement in SEGMENTS[0].format(tag=tag).split(";"):
            conn.execute(statement)
        running = start()
        try:
            kills = 0
            for number, sql in enumerate(SEGMENTS[1:], 2):
                before = data_files(out)
                for statement in sql.format(tag=tag).split(";"):
                    conn.execute(statement)
                # killed once it has begun to write new data (or, if that is not seen in time, after)
                deadline = time.monotonic() + 90
                while not data_files(out) - before and time.monotonic() < deadline:
                    time.sleep(0.005)
                running.send_signal(signal.SIGKILL)
                running.wait(30)
                kills += running.returncode == -signal.SIGKILL
                running.stderr.close()
                running = start("drain" if number == len(SEGMENTS) else "run")
            assert kills == 2
            _, err = running.communicate(timeout=300)
            assert running.returncode == 0, err[-3000:]
            expected = {table: server_rows(conn, table) for table in QUERIES}
            assert not delta_differences(out, expected)
        finally:
            if running.poll() is None:
                running.kill()
                running.wait(30)
    for table, found in delta_tables(out).items():
        positions = [entry["replwire.position"] for entry in found.history() if "replwire.position" in entry]
        assert len(positions) == len(set(positions)), (table, positions)
    assert not os.listdir(os.path.join(out, "_batches"))


def test_records_carry_the_relations_a_batch_needs(pg18):
    """The server sends a table's Relation once per read of the slot, before the table's first change: here in
    a transaction before the micro-batch's start, which the batch leaves out.  The records give it again
    inside the batch's first transaction, so the batch decodes on its own."""
    from replwire.codec import Decoder, Insert, Relation
    from replwire.spark.stream import ReplwireStreamReader, records_schema

    tag = "lake_records"
    fresh_database(pg18, tag)
    dsn = f"{pg18.dsn} dbname={tag}"
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE u (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION pub_{tag} FOR TABLE t, u")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"slot_{tag}",))
        conn.execute("INSERT INTO t VALUES (1, 'before the batch')")
        conn.execute("INSERT INTO u VALUES (1)")
        start = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        conn.execute("INSERT INTO t VALUES (2, 'in the batch')")
        conn.execute("INSERT INTO u VALUES (2)")
    reader = ReplwireStreamReader({"dsn": dsn, "slot": f"slot_{tag}", "publication": f"pub_{tag}",
                                   "records": "true"}, records_schema())
    end = reader.latestOffset({"lsn": start}, reader.getDefaultReadLimit())
    rows = [row for part in reader.partitions({"lsn": start}, end) for batch in reader.read(part)
            for row in batch.to_pylist()]
    assert [row["n"] for row in rows] == list(range(len(rows)))
    decoder = Decoder(proto_version=4)
    messages = [decoder.feed(row["data"]) for row in rows]  # raises on an Insert of an unknown relation
    relations = [m.name for m in messages if isinstance(m, Relation)]
    inserted = [(decoder.relations[m.relation_id].name, m.new[0].data) for m in messages
                if isinstance(m, Insert)]
    assert sorted(relations) == ["t", "u"] and inserted == [("t", b"2"), ("u", b"2")]
