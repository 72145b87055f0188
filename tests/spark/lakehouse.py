"""The workload of the lakehouse apply tests (``apply --format delta`` and ``iceberg``): a real server's
changes in three segments, each captured into a file of its own, and the server's tables after each.

The workload: a keyed table with TOASTed values (updates that leave them unchanged, in a later segment than
the row's insert, and over a key change), deletes, a column added, then its type widened and another
column dropped; a table under REPLICA IDENTITY FULL with equal rows; a TRUNCATE and refill; a table
without a key that only inserts; a transaction big enough to be streamed.
"""

from __future__ import annotations

import datetime
import hashlib
import os
from collections import Counter

from replwire.codec import LSN
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from tests.spark.test_spark import peek

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

QUERIES = {  # each table as the server has it, with values as the lakehouse table holds them
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


def arrow_rows(table, names):
    """The rows of an Arrow ``table`` read back from a lakehouse table, as :func:`server_rows` has them."""
    import json

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


def delta_tables(out):
    """Each table of :data:`QUERIES` as a Delta table under ``out`` (``None`` for one not there yet)."""
    from deltalake import DeltaTable

    found = {}
    for table in QUERIES:
        path = os.path.join(out, f"public.{table}")
        found[table] = DeltaTable(path) if DeltaTable.is_deltatable(path) else None
    return found


def delta_differences(out, expected):
    """The tables under ``out`` that differ from ``expected`` (:func:`server_rows` of each), a table not there
    yet or without every expected column included."""
    found, differ = delta_tables(out), []
    for table, (names, rows) in expected.items():
        rows_now = found[table].to_pyarrow_table() if found[table] is not None else None
        if rows_now is None or not set(names) <= set(rows_now.column_names) or arrow_rows(rows_now, names) != rows:
            differ.append(table)
    return differ


def data_files(out):
    """The files in the tables' directories under ``out`` (data files, and those being written), not their
    logs'."""
    found = set()
    for table in QUERIES:
        path = os.path.join(out, f"public.{table}")
        if os.path.isdir(path):
            found.update(entry.path for entry in os.scandir(path) if entry.is_file())
    return found
