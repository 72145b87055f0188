"""``apply --format delta``: a real server's changes, captured in three segments, applied segment by segment
into Delta tables, which -- read back with ``deltalake``, not with replwire -- equal ``SELECT *`` on the
server after each; a replayed run changes nothing, and a run killed in the middle of a commit and run again
ends equal, each position committed once.

The workload: a keyed table with TOASTed values (updates that leave them unchanged, in a later segment than
the row's insert, and over a key change), deletes, a column added, then its type widened and another
column dropped; a table under REPLICA IDENTITY FULL with equal rows; a TRUNCATE and refill; a table
without a key that only inserts; a transaction big enough to be streamed.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from replwire.codec import LSN
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from tests.spark.test_spark import fresh_database, peek  # noqa: E402

SEGMENTS = [
    # 1: the tables, their first rows
    """CREATE TABLE orders (id int PRIMARY KEY, qty int, price numeric(10,2), ts timestamptz, doc jsonb,
           raw bytea, tags text[], body text);
       ALTER TABLE orders ALTER COLUMN body SET STORAGE EXTERNAL;
       CREATE TABLE pairs (a int, b text);
       ALTER TABLE pairs REPLICA IDENTITY FULL;
       CREATE TABLE trunc (id int PRIMARY KEY, v text);
       CREATE TABLE logs (at int, line text);
       CREATE PUBLICATION pub_{tag} FOR TABLE orders, pairs, trunc, logs;
       SELECT pg_create_logical_replication_slot('slot_{tag}', 'pgoutput');
       INSERT INTO orders SELECT i, i % 7, i * 1.25, TIMESTAMPTZ '2024-01-01 10:00+02' + i * INTERVAL '1 hour',
           jsonb_build_object('n', i), decode(lpad(to_hex(i), 4, '0'), 'hex'), ARRAY['t' || i, NULL],
           repeat('toast ' || i || ' ', 1500) FROM generate_series(1, 300) i;
       UPDATE orders SET qty = qty + 1 WHERE id % 10 = 0;
       DELETE FROM orders WHERE id % 25 = 0;
       INSERT INTO pairs VALUES (1, 'a'), (1, 'a'), (2, 'b'), (3, NULL);
       INSERT INTO trunc SELECT i, 'v' || i FROM generate_series(1, 20) i;
       INSERT INTO logs SELECT i, 'line ' || i FROM generate_series(1, 50) i""",
    # 2: unchanged TOASTed values of rows the first segment wrote; a key change; a column added; TRUNCATE
    """UPDATE orders SET qty = qty + 100 WHERE id % 3 = 0;
       UPDATE orders SET id = id + 1000 WHERE id IN (7, 11);
       UPDATE orders SET body = 'short ' || id WHERE id = 13;
       DELETE FROM orders WHERE id % 17 = 0;
       ALTER TABLE orders ADD COLUMN extra int;
       INSERT INTO orders (id, qty, extra, body) SELECT i, 1, i, repeat('new ', 1000)
           FROM generate_series(2000, 5000) i;
       UPDATE orders SET extra = 5 WHERE id BETWEEN 1 AND 40;
       UPDATE pairs SET b = 'c' WHERE a = 2;
       DELETE FROM pairs WHERE a = 1;
       INSERT INTO pairs VALUES (4, 'd'), (4, 'd');
       TRUNCATE trunc;
       INSERT INTO trunc SELECT i, 'again ' || i FROM generate_series(5, 30) i;
       INSERT INTO logs SELECT i, 'line ' || i FROM generate_series(51, 80) i""",
    # 3: a widening type change and a dropped column (the target is rewritten), more unchanged TOAST
    """ALTER TABLE orders ALTER COLUMN qty TYPE bigint;
       ALTER TABLE orders DROP COLUMN price;
       UPDATE orders SET qty = qty * 10000000000 WHERE id % 4 = 0;
       UPDATE orders SET id = id + 10000 WHERE id = 1007;
       DELETE FROM orders WHERE id BETWEEN 3000 AND 3100;
       UPDATE pairs SET b = 'e' WHERE a = 4;
       UPDATE trunc SET v = v || ' updated' WHERE id % 2 = 0;
       DELETE FROM trunc WHERE id = 5;
       INSERT INTO logs SELECT i, 'line ' || i FROM generate_series(81, 90) i""",
]

QUERIES = {  # each table as the server has it, with values as the Delta table holds them
    "orders": "SELECT * FROM orders",
    "pairs": "SELECT a, b FROM pairs",
    "trunc": "SELECT id, v FROM trunc",
    "logs": "SELECT at, line FROM logs",
}


def _normal(value):
    if isinstance(value, str) and len(value) > 200:  # long values: compared by digest
        return hashlib.md5(value.encode()).hexdigest()
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:  # the same instant, one zone
        return value.astimezone(datetime.timezone.utc)
    return value


def server_rows(conn, table):
    cur = conn.execute(QUERIES[table])
    names = [d.name for d in cur.description]
    rows = Counter()
    for row in cur.fetchall():
        rows[tuple(sorted((n, repr(_normal(v))) for n, v in zip(names, row)))] += 1
    return names, rows


def delta_rows(path, names):
    import json

    table = deltalake.DeltaTable(path).to_pyarrow_table()
    assert set(names) <= set(table.column_names)
    rows = Counter()
    for row in table.select(names).to_pylist():
        values = {n: json.loads(v) if n == "doc" and v is not None else v for n, v in row.items()}
        rows[tuple(sorted((n, repr(_normal(v))) for n, v in values.items()))] += 1
    return rows


def write_segment(path, rows, proto_version, options, system_identifier="7000000000000000001"):
    header = CaptureHeader(proto_version=proto_version, server_version=0, options=options,
                           slot_name="slot_delta", system_identifier=system_identifier, database="delta")
    with CaptureWriter(path, header) as writer:
        for lsn, xid, data in rows:
            writer.append(LSN(lsn), xid, data)
    return str(path)


def captured_segments(conn, tag, tmp_path, proto_version, options):
    """Run the workload's segments, each captured into a file of its own (the slot's changes since the
    last); after each, the server's tables.  Yields (the files so far, the tables)."""
    paths, seen = [], 0
    for number, sql in enumerate(SEGMENTS, 1):
        for statement in sql.format(tag=tag).split(";"):
            conn.execute(statement)
        rows = peek(conn, f"slot_{tag}", proto_version, {"publication_names": f"pub_{tag}", **options})
        paths.append(write_segment(tmp_path / f"{number}.rwc", rows[seen:], proto_version, options))
        seen = len(rows)
        yield list(paths), {table: server_rows(conn, table) for table in QUERIES}


def assert_equal(out, tables):
    for table, (names, expected) in tables.items():
        got = delta_rows(os.path.join(out, f"public.{table}"), names)
        assert got == expected, f"{table}: {sum((got - expected).values())} rows too many, " \
                                f"{sum((expected - got).values())} missing"


def history(out, table):
    """The positions of the commits that applied changes to a table, oldest first."""
    entries = deltalake.DeltaTable(os.path.join(out, f"public.{table}")).history()
    return [entry["replwire.position"] for entry in reversed(entries) if "replwire.position" in entry]


@pytest.mark.parametrize("major, proto_version, options", [
    (18, 4, {"binary": "true", "streaming": "parallel"}), (15, 1, {})], ids=["pg18-binary-stream-v4", "pg15-text-v1"])
def test_delta_apply_segment_by_segment_equals_the_server(spark, request, tmp_path, major, proto_version, options):
    from replwire.spark import jobs

    server = request.getfixturevalue(f"pg{major}")
    tag = f"delta_{major}"
    fresh_database(server, tag)
    out = str(tmp_path / "lake")
    with server.connect(dbname=tag, autocommit=True) as conn:
        conn.execute("SET logical_decoding_work_mem = '64kB'")  # the big insert is streamed
        hows = []
        for paths, tables in captured_segments(conn, tag, tmp_path, proto_version, options):
            result = jobs.apply(spark, paths, out, format="delta", part_bytes=256 << 10)
            assert_equal(out, tables)
            hows.append({table: done.how for table, done in result.applied.items()})
            again = jobs.apply(spark, paths, out, format="delta")  # the same inputs again: nothing to do
            assert {done.how for done in again.applied.values()} == {"none"}
            assert_equal(out, tables)
        # another server's stream into the same tables: refused before anything is written
        rows = peek(conn, f"slot_{tag}", proto_version, {"publication_names": f"pub_{tag}", **options})
        foreign = write_segment(tmp_path / "other.rwc", rows, proto_version, options, "7000000000000000002")
        with pytest.raises(ValueError, match="holds the changes of another stream"):
            jobs.apply(spark, [foreign], out, format="delta")
        assert_equal(out, tables)
    assert hows[0] == {"public.orders": "create", "public.pairs": "create", "public.trunc": "create",
                       "public.logs": "create"}
    assert hows[1] == {"public.orders": "merge", "public.pairs": "rewrite", "public.trunc": "rewrite",
                       "public.logs": "append"}
    assert hows[2]["public.orders"] == "rewrite" and hows[2]["public.trunc"] == "merge"
    for table in QUERIES:
        positions = history(out, table)
        assert len(positions) == len(set(positions)) == 3, (table, positions)


def _data_files(out):
    """The files in the tables' directories (data files, and those being written), not their logs'."""
    found = set()
    for table in QUERIES:
        with os.scandir(os.path.join(out, f"public.{table}")) as entries:
            found.update(entry.path for entry in entries if entry.is_file())
    return found


def test_delta_apply_killed_in_a_commit_and_run_again_ends_equal(spark, pg18, tmp_path):
    """``replwire spark apply --format delta`` killed (SIGKILL) once it has begun to write a table's new data
    files, before the commit that names them; run again, the tables equal the server, and no position was
    committed twice."""
    from replwire.spark import jobs

    tag = "delta_kill"
    fresh_database(pg18, tag)
    out = str(tmp_path / "lake")
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        segments = list(captured_segments(conn, tag, tmp_path, 1, {}))
    jobs.apply(spark, segments[0][0], out, format="delta")
    paths, tables = segments[-1]
    before = _data_files(out)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "replwire.codec.cli", "spark", "apply", *paths, "--out", out,
               "--format", "delta", "--master", "local[2]"]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    hit: set[str] = set()
    try:
        deadline = time.monotonic() + 240
        while run.poll() is None and time.monotonic() < deadline:
            new = _data_files(out) - before
            if new:  # a table's new data is being written: its commit has not happened yet
                run.send_signal(signal.SIGKILL)
                hit = {os.path.basename(os.path.dirname(path)) for path in new}
                break
        run.wait(30)
        assert run.returncode == -signal.SIGKILL, run.stderr.read()[-3000:] if run.stderr else ""
        for name in hit:  # killed in the middle: the table still holds the first segment only
            assert len(history(out, name.removeprefix("public."))) == 1, name
    finally:
        if run.poll() is None:
            run.kill()
        if run.stdout:
            run.stdout.close()
        if run.stderr:
            run.stderr.close()
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_equal(out, tables)
    for table in QUERIES:
        positions = history(out, table)
        assert len(positions) == len(set(positions)) == 2, (table, positions)


def test_a_delta_table_apply_did_not_write_is_refused(tmp_path):
    import pyarrow as pa

    from replwire.spark.delta import DeltaTarget

    path = str(tmp_path / "public.t")
    deltalake.write_deltalake(path, pa.table({"id": [1]}))
    assert "replwire apply did not write" in DeltaTarget(path, "replwire:1:db:slot").foreign()
    assert DeltaTarget(str(tmp_path / "public.new"), "replwire:1:db:slot").foreign() is None
