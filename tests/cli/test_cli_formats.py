"""``replwire decode``'s output formats as consumers read them, on a real capture (``replwire capture`` of a
PostgreSQL 18 database of its own): Debezium's change events where they follow the connector's documented
behaviour (delete ``before``, tombstones, primary key changes, ``source.db``), one truncate line per table,
the table format printed as the changes come, and progress only on a terminal.

Expected values come from the server (its database's name, its tables' columns and primary keys) and from
Debezium's PostgreSQL connector documentation (https://debezium.io/documentation/reference/stable/connectors/
postgresql.html, sections "Replica identity", "_delete_ events", "Tombstone events", "Primary key updates",
"_truncate_ events", and the ``tombstones.on.delete`` property), never from replwire's own output.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys

import pytest
from psycopg.conninfo import make_conninfo

pytestmark = pytest.mark.server

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
DATABASE = "fmt_app"


def replwire(*args, **kwargs):
    return subprocess.run([REPLWIRE, *map(str, args)], capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def capture(pg18, tmp_path_factory):
    """A capture of a workload in database ``fmt_app``, and what the server says of its tables: each table's
    columns in order and its primary key columns."""
    out = tmp_path_factory.mktemp("formats") / "fmt.rwcap"
    with pg18.connect() as conn:
        conn.execute(f"CREATE DATABASE {DATABASE}")
    dsn = make_conninfo(pg18.dsn, dbname=DATABASE)
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE fmt_t (id int PRIMARY KEY, v text NOT NULL, w int)")  # REPLICA IDENTITY DEFAULT
        conn.execute("CREATE TABLE fmt_full (id int PRIMARY KEY, v text, big text)")
        conn.execute("ALTER TABLE fmt_full REPLICA IDENTITY FULL")
        conn.execute("ALTER TABLE fmt_full ALTER COLUMN big SET STORAGE EXTERNAL")  # out of line, unchanged
        conn.execute("CREATE TABLE fmt_u (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION fmt_pub FOR TABLE fmt_t, fmt_full, fmt_u")
        conn.execute("SELECT pg_create_logical_replication_slot('fmt_slot', 'pgoutput')")
        for statement in ["INSERT INTO fmt_t VALUES (1, 'a', 10), (2, 'b', 20);"
                          "INSERT INTO fmt_full VALUES (1, 'x', repeat('y', 10000)); INSERT INTO fmt_u VALUES (1)",
                          "UPDATE fmt_full SET v = 'z'",  # big: unchanged TOAST
                          "UPDATE fmt_t SET v = 'c' WHERE id = 1",  # key unchanged
                          "UPDATE fmt_t SET id = 3 WHERE id = 2",  # a primary key change
                          "DELETE FROM fmt_t WHERE id = 1",
                          "DELETE FROM fmt_full WHERE id = 1",
                          "TRUNCATE fmt_t, fmt_u"]:
            with conn.transaction():
                for part in statement.split(";"):
                    conn.execute(part)
        result = replwire("capture", "--dsn", dsn, "--slot", "fmt_slot", "--publication", "fmt_pub",
                          "--no-create-slot", "--out", out, "--idle-exit", "1", "--sync-interval", "0.1")
        assert result.returncode == 0, result.stderr
        database = conn.execute("SELECT current_database()").fetchone()[0]
        tables = {}
        for table in ("fmt_t", "fmt_full", "fmt_u"):
            columns = [r[0] for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum", (table,))]
            key = [r[0] for r in conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary", (table,))]
            tables[table] = (columns, key)
        conn.execute("SELECT pg_drop_replication_slot('fmt_slot')")
    return out, database, tables


def debezium(path, *more):
    result = replwire("decode", path, "--format", "debezium", *more)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_debezium_source_db_is_the_captured_database(capture):
    path, database, _ = capture
    events = [e for e in debezium(path) if e is not None]
    assert database == DATABASE and {e["source"]["db"] for e in events} == {database}


def test_debezium_delete_before_has_every_column_key_values_only(capture):
    """"Replica identity": under DEFAULT a delete's ``before`` holds the primary key's previous values; the
    connector's value schema has every column of the table, so the others are null.  Under FULL, every
    column's previous value."""
    path, _, tables = capture
    events = debezium(path)
    columns, key = tables["fmt_t"]
    [delete] = [e for e in events if e is not None and e["op"] == "d" and e["source"]["table"] == "fmt_t"
                and e.get("headers") is None]
    assert list(delete["before"]) == columns
    assert {c: v for c, v in delete["before"].items() if v is not None} == {k: 1 for k in key}
    assert delete["after"] is None
    [full] = [e for e in events if e is not None and e["op"] == "d" and e["source"]["table"] == "fmt_full"]
    assert full["before"] == {"id": 1, "v": "z", "big": "y" * 10000} and list(full["before"]) == tables["fmt_full"][0]


def test_debezium_full_identity_update_has_the_toasted_value(capture):
    """"Toasted values": under REPLICA IDENTITY FULL, TOAST column values are part of the before and after
    fields just like any other column (the server sends the old row whole; the new row leaves it out)."""
    path, _, _ = capture
    [update] = [e for e in debezium(path) if e is not None and e["op"] == "u" and e["source"]["table"] == "fmt_full"]
    assert update["before"] == {"id": 1, "v": "x", "big": "y" * 10000}
    assert update["after"] == {"id": 1, "v": "z", "big": "y" * 10000}
    assert "unchanged_toast" not in update
    plain = [json.loads(line) for line in replwire("decode", path).stdout.splitlines()]
    [line] = [c for c in plain if c["op"] == "update" and c["table"] == "fmt_full"]
    assert line["unchanged_toast"] == ["big"]  # the server did not send it in the new row


def test_debezium_tombstone_follows_each_delete(capture):
    """"Tombstone events": a delete is followed by an event with the same key and a null value (the JSON
    converter writes null); ``tombstones.on.delete=false`` leaves them out."""
    path, _, _ = capture
    events = debezium(path)
    deletes = [i for i, e in enumerate(events) if e is not None and e["op"] == "d"]
    assert len(deletes) == 3  # the key change's delete, and the two DELETEs
    assert [i for i, e in enumerate(events) if e is None] == [i + 1 for i in deletes]
    without = debezium(path, "--no-tombstones")
    assert None not in without
    assert [e["op"] for e in without] == [e["op"] for e in events if e is not None]


def test_debezium_primary_key_change_is_delete_tombstone_create(capture):
    """"Primary key updates": a DELETE event for the old key with the ``__debezium.newkey`` header, its
    tombstone, and a CREATE event for the new key with the ``__debezium.oldkey`` header -- in place of an
    update event; the update that keeps its key stays one ``u`` event."""
    path, _, tables = capture
    columns, key = tables["fmt_t"]
    events = debezium(path)
    # a tombstone (None) belongs to the delete before it
    tables_of = [e["source"]["table"] if e is not None else None for e in events]
    for i, table in enumerate(tables_of):
        if table is None:
            tables_of[i] = tables_of[i - 1]
    fmt_t = [e for e, table in zip(events, tables_of) if table == "fmt_t"]
    assert [None if e is None else e["op"] for e in fmt_t] == ["c", "c", "u", "d", None, "c", "d", None, "t"]
    update, delete, tombstone, create = fmt_t[2], fmt_t[3], fmt_t[4], fmt_t[5]
    assert update["after"] == {"id": 1, "v": "c", "w": 10} and update["before"] is None and "headers" not in update
    assert delete["before"] == {c: (2 if c in key else None) for c in columns} and delete["after"] is None
    assert delete["headers"] == {"__debezium.newkey": {"id": 3}}
    assert tombstone is None
    assert create["before"] is None and create["after"] == {"id": 3, "v": "b", "w": 20}
    assert create["headers"] == {"__debezium.oldkey": {"id": 2}}
    assert delete["source"]["lsn"] == create["source"]["lsn"]  # one UPDATE
    assert delete["source"]["txId"] == create["source"]["txId"]
    orders = [(e["transaction"]["total_order"], e["transaction"]["data_collection_order"]) for e in (delete, create)]
    assert orders == [(1, 1), (2, 2)]


def test_truncate_lines_one_per_table(capture):
    """A consumer that keeps the lines of one table sees that table's truncate."""
    path, _, tables = capture
    result = replwire("decode", path)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    truncates = [c for c in lines if c["op"] == "truncate"]
    assert [(c["schema"], c["table"]) for c in truncates] == [("public", "fmt_t"), ("public", "fmt_u")]
    assert result.stderr.strip().endswith(f"{len(lines) - 1} changes from 1 file")  # one TRUNCATE, two lines
    for c in truncates:
        assert c["cascade"] is False and c["restart_identity"] is False
        assert c["relations"] == ["public.fmt_t", "public.fmt_u"]
    assert [c["op"] for c in lines if c["table"] == "fmt_u"] == ["insert", "truncate"]
    assert len({c["lsn"] for c in truncates}) == 1  # one Truncate message


def test_table_format_one_line_per_change(capture):
    path, _, _ = capture
    result = replwire("decode", path, "--format", "table")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:4] == ["op", "table", "xid", "commit_lsn"]
    plain = [json.loads(line) for line in replwire("decode", path).stdout.splitlines()]
    assert [(r.split()[0], r.split()[1]) for r in rows] == [(c["op"], f"{c['schema']}.{c['table']}") for c in plain]
    assert "id=3" in rows[6] and 'v="b"' in rows[6]  # the key change, one update line


def test_progress_only_on_a_terminal(capture):
    """Progress goes to stderr when it is a terminal (a pty here), never to stdout, nor to a pipe."""
    path, _, _ = capture
    piped = replwire("decode", path)
    assert "decoding:" not in piped.stderr and "decoding:" not in piped.stdout
    main, secondary = pty.openpty()
    try:
        process = subprocess.Popen([REPLWIRE, "decode", str(path)], stdout=subprocess.PIPE, stderr=secondary)
        os.close(secondary)
        stdout, _ = process.communicate(timeout=120)
        shown = b""
        while select.select([main], [], [], 1)[0]:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the pty's other side closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main)
    assert process.returncode == 0
    assert b"decoding: " in shown and b"changes" in shown
    assert b"\r\x1b[K" in shown  # cleared before the summary
    assert shown.rstrip().endswith(b"from 1 file")
    assert b"decoding" not in stdout and stdout == piped.stdout.encode()
