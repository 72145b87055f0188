"""The Spark pipeline on a real Spark session (local[2]) and real PostgreSQL 15 and 18 servers: the batch
source equals the single-process assembler on every captured configuration; ``apply`` equals ``SELECT *``
on the server; the ``changes`` job's per-table datasets; the CLI."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import sys

import pytest

from replwire.codec import LSN, UNCHANGED_TOAST, Transaction
from replwire.codec.decode import committed
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from replwire.codec.split import open_inputs
from replwire.codec.stream import jsonl

pytestmark = pytest.mark.server
pyspark = pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402


def write_capture(path, rows, proto_version, options=None):
    with CaptureWriter(path, CaptureHeader(proto_version=proto_version, server_version=0,
                                           options=options or {})) as writer:
        for lsn, xid, data in rows:
            writer.append(LSN(lsn), xid, data)
    return str(path)


def _commit_time(transaction):
    try:
        return transaction.commit_time.to_datetime()
    except (ValueError, OverflowError):
        return None


def expected_rows(change, transaction):
    """One change as CHANGES rows, from the single-process Assembler's typed Change: one per JSON object
    ``replwire decode`` prints for it (a truncate: one per table), with the row images as those objects
    have them (jsonl's dict path), not the data source's own writer."""
    return [expected_row(change, transaction, shown) for shown in jsonl.change_objects(change, transaction)]


def expected_row(change, transaction, shown):
    t = transaction
    relation_id = change.relation_id
    if change.op == "truncate":  # the row of one of its tables
        relation_id = change.relation_ids[change.relations.index((shown["schema"], shown["table"]))]
    return {
        "op": change.op, "schema": shown["schema"], "table": shown["table"], "xid": t.xid if t else None,
        "subxid": change.subxid, "lsn": int(change.lsn) if change.lsn else None,
        "commit_lsn": int(t.commit_lsn) if t else None, "end_lsn": int(t.end_lsn) if t else None,
        "commit_time": _commit_time(t) if t else None, "position": 0, "relation_id": relation_id,
        **{name: jsonl.ENCODE(shown[name]) if name in shown else None for name in ("new", "old", "key")},
        "unchanged_toast": (None if change.new is None else
                            [n for n, v in change.new.items() if v is UNCHANGED_TOAST]),
        "truncated": shown.get("relations"), "cascade": change.cascade,
        "restart_identity": change.restart_identity, "prefix": change.prefix, "content": change.content,
        "transactional": change.transactional, "origin": t.origin[0] if t and t.origin else None,
        "gid": t.gid if t else None, "streamed": t.streamed if t else None}


def expected_changes(spark, paths):
    """The change rows of one single-process Assembler over ``paths`` (no Spark, no split)."""
    from replwire.spark.rows import CHANGES

    rows = []
    for item in committed(open_inputs(paths), typed=True):
        if isinstance(item, Transaction):
            rows += [row for change in item.changes for row in expected_rows(change, item)]
        else:
            rows += expected_rows(item, None)
    return spark.createDataFrame([tuple(r[f.name] for f in CHANGES.fields) for r in rows], CHANGES)


# Which captured configurations to run through Spark: every protocol version the server has, streaming (on and
# parallel), two-phase, binary, messages, origin (text mode is covered by the apply tests).
CONFIGS = ("v1-binary", "v2-stream", "v3-all", "v3-root-stream-two-phase", "v4-all")


def test_batch_source_equals_the_assembler_on_real_captures(spark, pg_captures, tmp_path):
    compared = 0
    configs = {c.config: c for c in pg_captures.captures}
    chosen = [configs[name] for name in CONFIGS if name in configs] or pg_captures.captures
    assert len(chosen) == 4, sorted(configs)
    for capture in chosen:
        path = write_capture(tmp_path / f"{capture.config}.rwc", capture.rows, capture.proto_version)
        # about eight parts, so transactions cross part boundaries, without a Spark task per 4 KiB
        part_bytes = max(4096, os.path.getsize(path) // 8)
        actual = (spark.read.format("replwire").option("partitionBytes", str(part_bytes)).option("minPartitions", "3")
                  .load(path))
        assert actual.rdd.getNumPartitions() >= 3, capture.config
        expected = [tuple(r) for r in expected_changes(spark, [path]).drop("position").collect()]
        assert expected, capture.config
        # the same rows in the assembler's order: by transaction end (a lone message's own LSN), then stream
        # position (equal lists in one order are equal as sets too: one Spark job per side, not two)
        ordered = [tuple(r) for r in actual.orderBy(F.coalesce("end_lsn", "lsn"), "position").drop("position")
                   .collect()]
        assert ordered == expected, capture.config
        compared += len(ordered)
    assert compared > 1000


# -- apply ------------------------------------------------------------------------------------------------------

ITEMS = """CREATE TABLE items (id int PRIMARY KEY, qty int2, big int8, price numeric(10,2), ratio numeric,
    f4 real, f8 double precision, ok bool, d date, ts timestamp, tstz timestamptz, raw bytea, tags text[],
    nums int4[], doc jsonb, uid uuid, note varchar(20), body text)"""
COLUMNS = ["id", "qty", "big", "price", "ratio", "f4", "f8", "ok", "d", "ts", "tstz", "raw", "tags", "nums",
           "doc", "uid", "note", "body"]


def fresh_database(server, name):
    with server.connect(autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")


def run_workload(conn, tag):
    conn.execute(ITEMS)
    conn.execute("ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL")  # TOASTed, uncompressed
    conn.execute("CREATE TABLE full_ident (a int, b text)")
    conn.execute("ALTER TABLE full_ident REPLICA IDENTITY FULL")
    conn.execute("CREATE TABLE trunc (id int PRIMARY KEY, v text)")
    conn.execute(f"CREATE PUBLICATION pub_{tag} FOR TABLE items, full_ident, trunc")
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"slot_{tag}",))
    conn.execute("""INSERT INTO items SELECT i, i % 100, i::bigint * 1000000007, i * 1.25, i / 7.0, i * 0.5, i * 0.25,
        i % 2 = 0, DATE '2024-01-01' + i, TIMESTAMP '2024-01-01 10:00' + i * INTERVAL '1 minute',
        TIMESTAMPTZ '2024-01-01 10:00+02' + i * INTERVAL '1 hour', decode(lpad(to_hex(i), 4, '0'), 'hex'),
        ARRAY['a' || i, NULL, 'c'], ARRAY[i, i + 1], jsonb_build_object('n', i, 'tags', ARRAY['x']),
        md5(i::text)::uuid, 'note ' || i, repeat('toast ' || i || ' ', 1500)
        FROM generate_series(1, 60) i""")
    conn.execute("UPDATE items SET price = 'NaN', ts = 'infinity', ratio = 'NaN' WHERE id = 2")
    conn.execute("UPDATE items SET qty = qty + 1, note = 'touched' WHERE id % 3 = 0")  # body: unchanged TOAST
    conn.execute("UPDATE items SET id = id + 1000 WHERE id = 9")  # a key change, body unchanged
    conn.execute("UPDATE items SET body = 'short now' WHERE id = 12")
    conn.execute("DELETE FROM items WHERE id % 5 = 0")
    with conn.transaction():
        conn.execute("INSERT INTO items (id, body) VALUES (500, 'kept')")
        try:
            with conn.transaction():  # a rolled-back savepoint
                conn.execute("INSERT INTO items (id, body) VALUES (501, 'rolled back')")
                raise RuntimeError
        except RuntimeError:
            pass
    try:
        with conn.transaction():
            conn.execute("INSERT INTO items (id) VALUES (502)")
            raise RuntimeError
    except RuntimeError:
        pass
    conn.execute("INSERT INTO items (id, qty, body) SELECT i, 1, repeat('big', 200) FROM generate_series(600, 900) i")
    conn.execute("INSERT INTO full_ident VALUES (1, 'a'), (1, 'a'), (2, 'b'), (3, NULL)")
    conn.execute("UPDATE full_ident SET b = 'c' WHERE a = 2")
    conn.execute("DELETE FROM full_ident WHERE a = 1")
    conn.execute("INSERT INTO trunc SELECT i, 'v' || i FROM generate_series(1, 10) i")
    conn.execute("TRUNCATE trunc")
    conn.execute("INSERT INTO trunc VALUES (1, 'after')")
    conn.execute("UPDATE trunc SET v = 'after, updated' WHERE id = 1")


def peek(conn, slot, proto_version, options):
    args = ["proto_version", str(proto_version)]
    for name, value in options.items():
        args += [name, value]
    return [(lsn, xid, bytes(data)) for lsn, xid, data in conn.execute(
        "SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
        "VARIADIC %s::text[])", (slot, args)).fetchall()]


def resume_point(rows, proto_version):
    """A Begin near the middle of ``rows`` with no streamed transaction open: where a capture resumed from
    the slot's confirmed position starts again."""
    from replwire.codec import Decoder, StreamAbort, StreamCommit, StreamPrepare, StreamStart

    decoder, open_streams, candidates = Decoder(proto_version), set(), []
    for index, (_, _, data) in enumerate(rows):
        message = decoder.feed(data)
        if isinstance(message, StreamStart):
            open_streams.add(message.xid)
        elif isinstance(message, (StreamCommit, StreamPrepare)) or (
                isinstance(message, StreamAbort) and message.xid == message.subxid):
            open_streams.discard(message.xid)
        elif data[:1] == b"B" and not open_streams:
            candidates.append(index)
    return min(candidates, key=lambda i: abs(i - len(rows) // 2))


def expected_items(spark, conn, schema):
    rows = conn.execute("""SELECT id, qty, big, CASE WHEN price <> 'NaN' THEN price END, ratio::text, f4, f8, ok,
        d, CASE WHEN isfinite(ts) THEN ts END, tstz, raw, tags, nums, doc::text, uid::text, note, md5(body),
        CASE WHEN price = 'NaN' THEN 'NaN' END, CASE WHEN NOT isfinite(ts) THEN ts::text END FROM items""").fetchall()
    data = []
    for row in rows:
        values = list(row[:18])
        odd = {k: v for k, v in (("price", row[18]), ("ts", row[19])) if v is not None}
        values.append(sorted(odd.items()) or None)
        data.append(values)
    return spark.createDataFrame(data, schema)


# text on PostgreSQL 18 only: the text path reads the same on both majors, and every other test covers 15 too
@pytest.mark.parametrize("major, proto_version, options", [
    (18, 1, {}), (18, 4, {"binary": "true", "streaming": "parallel"}), (15, 3, {"binary": "true", "streaming": "on"})],
    ids=["pg18-text-v1", "pg18-binary-stream-v4", "pg15-binary-stream-v3"])
def test_apply_equals_select_on_the_server(spark, request, monkeypatch, tmp_path, major, proto_version, options):
    from pyspark.sql import types as T

    from replwire.spark import jobs

    pg_server = request.getfixturevalue(f"pg{major}")
    tag = f"apply_{pg_server.major}_{proto_version}"
    fresh_database(pg_server, tag)
    with pg_server.connect(dbname=tag, autocommit=True) as conn:
        run_workload(conn, tag)
        rows = peek(conn, f"slot_{tag}", proto_version, {"publication_names": f"pub_{tag}", **options})
        assert any(r[2][:1] == b"S" for r in rows) == ("streaming" in options)
        cut = resume_point(rows, proto_version)  # two consecutive segments, as a resumed capture has them
        paths = [write_capture(tmp_path / "1.rwc", rows[:cut + 2], proto_version),
                 write_capture(tmp_path / "2.rwc", rows[cut:], proto_version)]
        # each table folded by one task that reads its files; and (on one variant) the tables whose integer key
        # no update changed (trunc) split by key over two such tasks, and every table spread by Spark over tasks
        for way in ("state", "split", "spread") if proto_version == 4 else ("state",):
            out = tmp_path / way
            with monkeypatch.context() as patch:
                patch.setattr(jobs, "ONE_TASK_BYTES", -1 if way == "spread" else jobs.ONE_TASK_BYTES)
                patch.setattr(jobs, "SPLIT_BYTES", -1 if way == "split" else jobs.SPLIT_BYTES)
                result = jobs.apply(spark, paths, str(out), part_bytes=64 << 10)
            assert result.rows["public.items"] > 0
            if way == "split":  # trunc by two tasks (items had a key change, full_ident has no key: one each)
                assert [len(list((out / f"public.{t}").glob("part-*.parquet"))) for t in ("trunc", "items")] == [2, 1]
            items = spark.read.parquet(str(out / "public.items"))
            schema = T.StructType([items.schema[c] for c in COLUMNS] + [T.StructField(
                "_unrepresentable", T.ArrayType(T.StructType([T.StructField("key", T.StringType(), False),
                                                              T.StructField("value", T.StringType(), False)]), False))])
            actual = items.select(*COLUMNS[:-1], F.md5("body").alias("body"),  # long values: compared by digest
                                  F.array_sort(F.map_entries("_unrepresentable")).alias("_unrepresentable"))
            assertDataFrameEqual(actual, expected_items(spark, conn, schema))
            assert items.where(F.col("_unchanged_toast").isNotNull()).count() == 0  # nothing unknown: all captured
            assert items.where("id = 1009").select("body").first()[0] == "toast 9 " * 1500  # over a key change
            for table, columns in (("full_ident", ["a", "b"]), ("trunc", ["id", "v"])):
                state = spark.read.parquet(str(out / f"public.{table}")).select(*columns)
                server = conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
                assertDataFrameEqual(state, spark.createDataFrame(server, state.schema))


def test_changes_job_writes_each_table_and_agrees_with_the_change_rows(spark, pg18, tmp_path):
    from replwire.spark.jobs import changes

    tag = "changes_job"
    fresh_database(pg18, tag)
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        run_workload(conn, tag)
        conn.execute("ALTER TABLE trunc ADD COLUMN extra int")  # a new shape: schema version 2
        conn.execute("INSERT INTO trunc VALUES (2, 'two', 2)")
        rows = peek(conn, f"slot_{tag}", 4, {"publication_names": f"pub_{tag}", "messages": "true"})
    path = write_capture(tmp_path / "all.rwc", rows, 4)
    out = tmp_path / "changes"
    summary = changes(spark, [path], str(out), part_bytes=32 << 10)
    manifest = json.loads((out / "_replwire.json").read_text())
    assert {(t["table"], t["version"]) for t in manifest["tables"]} >= {
        ("public.items", 1), ("public.full_ident", 1), ("public.trunc", 1), ("public.trunc", 2)}
    v2 = spark.read.parquet(str(out / "public.trunc" / "v2"))
    assert "extra" in v2.columns and v2.where("op = 'insert'").select("id", "extra").collect() == [(2, 2)]
    every = spark.read.format("replwire").load(path).where("op <> 'message'")
    per_table = None
    for entry in manifest["tables"]:
        if not entry["rows"]:
            continue
        df = spark.read.parquet(str(out / entry["path"])).select("op", "schema", "table", "xid", "lsn", "commit_lsn",
                                                                 "position")
        per_table = df if per_table is None else per_table.unionByName(df)
    # a truncate's rows: one per table it emptied, naming it, as the per-table rows have it
    truncates = every.where("op = 'truncate'").withColumn("t", F.concat_ws(".", "schema", "table"))
    expected = every.select("op", "schema", "table", "xid", "lsn", "commit_lsn", "position")
    assertDataFrameEqual(per_table, expected)
    assert summary.changes == expected.count()
    # What apply reads from the manifest instead of from the rows, against the change rows: each table's
    # TRUNCATEs, and whether an update carried an old key or image (items: its key change; full_ident: all)
    for name in ("public.items", "public.full_ident", "public.trunc"):
        entries = [t for t in manifest["tables"] if t["table"] == name]
        found = sorted(tuple(t) for e in entries for t in e["truncates"])
        assert found == sorted(tuple(r) for r in truncates.where(F.col("t") == name).select(
            "commit_lsn", "position").collect()), name
        old_images = every.where(F.concat_ws(".", "schema", "table") == name).where(
            "op = 'update' AND (old IS NOT NULL OR key IS NOT NULL)").count() > 0
        assert any(e["updates_with_old_image"] for e in entries) == old_images == (name != "public.trunc"), name
    assert len([t for e in manifest["tables"] if e["table"] == "public.trunc" for t in e["truncates"]]) == 1
    inserted = spark.read.parquet(str(out / "public.items" / "v1")).where("op = 'insert' AND id = 1")
    assert inserted.select("price", "tstz", "nums").first() == (
        decimal.Decimal("1.25"), dt.datetime(2024, 1, 1, 9, 0), [1, 2])  # 11:00+02 = 09:00 UTC


def test_apply_of_a_table_with_columns_named_like_the_meta_columns(spark, tmp_path):
    """A table may have an "op", a "position" or a "commit_lsn" column of its own: the change rows then call
    their meta columns "_op", ..., and apply folds by those, not by the table's columns."""
    from replwire.codec import (
        Begin,
        Commit,
        Delete,
        Insert,
        Relation,
        RelationColumn,
        Timestamp,
        TupleColumn,
        Update,
        build,
    )
    from replwire.spark.jobs import apply

    t = TupleColumn.text
    relation = Relation(relation_id=7, namespace="public", name="odd", replica_identity="d", columns=[
        RelationColumn(flags=1, name="op", type_id=23, type_modifier=-1),
        RelationColumn(flags=0, name="position", type_id=25, type_modifier=-1),
        RelationColumn(flags=0, name="commit_lsn", type_id=25, type_modifier=-1)])
    at = Timestamp(800_000_000_000_000)
    messages = [
        Begin(final_lsn=LSN(0x100), commit_time=at, xid=10), relation,
        Insert(relation_id=7, new=[t("1"), t("a"), t("x")]), Insert(relation_id=7, new=[t("2"), t("b"), t("y")]),
        Commit(flags=0, commit_lsn=LSN(0x100), end_lsn=LSN(0x110), commit_time=at),
        Begin(final_lsn=LSN(0x200), commit_time=at, xid=11),
        Update(relation_id=7, new=[t("1"), t("c"), TupleColumn.unchanged_toast()]),
        Delete(relation_id=7, key=[t("2"), TupleColumn.null(), TupleColumn.null()]),
        Commit(flags=0, commit_lsn=LSN(0x200), end_lsn=LSN(0x210), commit_time=at)]
    path = write_capture(tmp_path / "odd.rwc", [(0x100 + i, 0, build(m, proto_version=1))
                                                for i, m in enumerate(messages)], 1)
    result = apply(spark, [path], str(tmp_path / "state"))
    assert result.rows == {"public.odd": 1}
    state = spark.read.parquet(str(tmp_path / "state" / "public.odd"))
    # worked by hand: row 1 updated with its unchanged "commit_lsn" value carried over, row 2 deleted
    assert [tuple(r) for r in state.select("op", "position", "commit_lsn", "_unchanged_toast").collect()] == [
        (1, "c", "x", None)]


# A table with columns of its own named like the extra columns of the change rows and of apply's output: each
# extra column then takes leading underscores until its name is free.
CLASHING = """CREATE TABLE clash (id int PRIMARY KEY, op text, "Position" int, "_before" text,
    "_before_unchanged_toast" int, "_unchanged_toast" text, "__unchanged_toast" text, "_unrepresentable" text,
    n numeric(10,2), body text)"""
CLASH_COLUMNS = ["id", "op", "Position", "_before", "_before_unchanged_toast", "_unchanged_toast",
                 "__unchanged_toast", "_unrepresentable", "n", "body"]


def test_a_table_with_columns_named_like_the_extra_columns(spark, pg18, tmp_path):
    """The batch source with ``table``, the ``changes`` job and ``apply`` on a real table whose own columns are
    called ``op``, ``Position``, ``_before``, ``_before_unchanged_toast``, ``_unchanged_toast`` (and
    ``__unchanged_toast``) and ``_unrepresentable``: the table's columns hold the table's values, the extra
    columns are named ``_op``, ``_position`` (Spark ignores case), ``__before``, ``__before_unchanged_toast``,
    ``___unchanged_toast`` and ``__unrepresentable``."""
    import hashlib

    from replwire.spark.jobs import apply

    tag = "clash"
    fresh_database(pg18, tag)
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        conn.execute(CLASHING)
        conn.execute("ALTER TABLE clash ALTER COLUMN body SET STORAGE EXTERNAL")  # TOASTed, uncompressed
        conn.execute(f"CREATE PUBLICATION pub_{tag} FOR TABLE clash")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"slot_{tag}",))
        xids = []
        for statement in (
                """INSERT INTO clash VALUES
                    (1, 'one', 10, 'b1', 1, 'ut1', 'uu1', 'ur1', 1.5, repeat('toast 1 ', 1500)),
                    (2, 'two', 20, 'b2', 2, 'ut2', 'uu2', 'ur2', 2.5, repeat('toast 2 ', 1500)),
                    (3, 'three', 30, 'b3', 3, 'ut3', 'uu3', 'ur3', 'NaN', repeat('toast 3 ', 1500))""",
                "UPDATE clash SET id = 20 WHERE id = 2",  # a key change; body unchanged
                """UPDATE clash SET op = 'updated', "_before" = 'b3 now', "_unchanged_toast" = NULL
                    WHERE id = 3""",  # body unchanged
                "DELETE FROM clash WHERE id = 1"):
            with conn.transaction():
                xids.append(conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0])
                conn.execute(statement)
        rows = peek(conn, f"slot_{tag}", 1, {"publication_names": f"pub_{tag}"})
        server = conn.execute("SELECT * FROM clash").fetchall()
    path = write_capture(tmp_path / "clash.rwc", rows, 1)

    # (a) the typed change rows, worked out by hand: a key change and a delete carry the old key in
    # "__before"; an update leaving body alone lists it in "___unchanged_toast"; numeric NaN goes to
    # "__unrepresentable"
    def digest(text):
        return hashlib.md5(text.encode()).hexdigest()

    def old_key(id_):
        return (id_, *[None] * (len(CLASH_COLUMNS) - 1))

    d = decimal.Decimal
    expected_rows = [
        ("insert", xids[0], 1, "one", 10, "b1", 1, "ut1", "uu1", "ur1", d("1.50"), digest("toast 1 " * 1500),
         None, None, None, None),
        ("insert", xids[0], 2, "two", 20, "b2", 2, "ut2", "uu2", "ur2", d("2.50"), digest("toast 2 " * 1500),
         None, None, None, None),
        ("insert", xids[0], 3, "three", 30, "b3", 3, "ut3", "uu3", "ur3", None, digest("toast 3 " * 1500),
         None, None, None, [("n", "NaN")]),
        ("update", xids[1], 20, "two", 20, "b2", 2, "ut2", "uu2", "ur2", d("2.50"), None,
         old_key(2), None, ["body"], None),
        ("update", xids[2], 3, "updated", 30, "b3 now", 3, None, "uu3", "ur3", None, None,
         None, None, ["body"], [("n", "NaN")]),
        ("delete", xids[3], 1, *[None] * (len(CLASH_COLUMNS) - 1), old_key(1), None, None, None)]
    extra = ["__before", "__before_unchanged_toast", "___unchanged_toast", "__unrepresentable"]
    meta = ["_op", "schema", "table", "xid", "subxid", "lsn", "commit_lsn", "commit_time", "_position", "gid"]

    def check_change_rows(df):
        assert df.columns == meta + CLASH_COLUMNS + extra
        assert df.select("schema", "table").distinct().collect() == [("public", "clash")]
        actual = df.orderBy("commit_lsn", "_position").select(
            "_op", "xid", *CLASH_COLUMNS[:-1], F.md5("body").alias("body"), *extra[:3],
            F.array_sort(F.map_entries("__unrepresentable")).alias("__unrepresentable"))
        assertDataFrameEqual(actual, spark.createDataFrame(expected_rows, actual.schema), checkRowOrder=True)

    check_change_rows(spark.read.format("replwire").option("table", "public.clash").load(path))
    out = tmp_path / "state"
    apply(spark, [path], str(out))
    check_change_rows(spark.read.parquet(str(out / "_changes" / "public.clash" / "v1")))  # the changes job's rows

    # (b) apply's current rows equal SELECT * on the server, plus "__unrepresentable" (NaN's text where the
    # decimal column is null) and "___unchanged_toast" (null: every value was captured)
    state = spark.read.parquet(str(out / "public.clash"))
    assert state.columns == CLASH_COLUMNS + ["__unrepresentable", "___unchanged_toast"]
    actual = state.select(*CLASH_COLUMNS, F.array_sort(F.map_entries("__unrepresentable")).alias(
        "__unrepresentable"), "___unchanged_toast")
    n = CLASH_COLUMNS.index("n")
    expected = [(*r[:n], None, *r[n + 1:], [("n", "NaN")], None) if r[n].is_nan() else (*r, None, None)
                for r in server]
    assert sorted(r[0] for r in expected) == [3, 20]
    assertDataFrameEqual(actual, spark.createDataFrame(expected, actual.schema))


def test_extra_column_names_are_the_defaults_unless_the_table_has_them():
    from replwire.spark.rows import meta_names

    defaults = ["op", "schema", "table", "xid", "subxid", "lsn", "commit_lsn", "commit_time", "position", "gid",
                "_before", "_before_unchanged_toast", "_unchanged_toast", "_unrepresentable"]
    assert meta_names(["id", "body", "__before", "op_"]) == {name: name for name in defaults}
    names = meta_names(["position", "_position", "_before_unchanged_toast", "_unrepresentable",
                        "__unrepresentable"])
    assert names == {**{name: name for name in defaults}, "position": "__position",
                     "_before_unchanged_toast": "__before_unchanged_toast",
                     "_unrepresentable": "___unrepresentable"}
    # Spark resolves names ignoring case (spark.sql.caseSensitive is false by default)
    assert meta_names(["OP", "_Unchanged_Toast"]) == {**{name: name for name in defaults}, "op": "_op",
                                                      "_unchanged_toast": "__unchanged_toast"}


def _timestamp_fields(schema, prefix=""):
    """Every timestamp field of a pyarrow schema (or struct type), nested ones as ``outer.inner``."""
    import pyarrow as pa

    for field in schema:
        if pa.types.is_timestamp(field.type):
            yield prefix + field.name, field.type
        elif pa.types.is_struct(field.type):
            yield from _timestamp_fields(list(field.type), prefix + field.name + ".")


def test_xid_subxid_gid_and_parquet_timestamps_agree_across_outputs(spark, pg18, tmp_path):
    """On a real server's streamed transaction with savepoints and a two-phase one: the change DataFrame, the
    per-table rows (data source and the changes job's Parquet) give the top-level xid (pg_current_xact_id() in
    the transaction) as ``xid``, the inserting (sub)transaction (the row's xmin) as ``subxid`` for the streamed
    one, and the GID as ``gid``; both jobs' Parquet files, read with pyarrow, hold timestamps with time zone as
    ``timestamp[us, tz=UTC]`` (and ``timestamp`` columns as ``timestamp[us]``), with the server's values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from replwire.spark.jobs import apply
    from tests.support.xids import TABLE, expected, peek_options, run_xid_workload

    tag = "spark_xids"
    fresh_database(pg18, tag)
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        facts = run_xid_workload(conn, tag)
        options = peek_options(tag)
        rows = peek(conn, f"slot_{tag}", 4, dict(zip(options[2::2], options[3::2])))
        at, wall = conn.execute(f"SELECT at, wall FROM {TABLE} LIMIT 1").fetchone()
    assert any(r[2][:1] == b"S" for r in rows)  # the big transaction was streamed
    path = write_capture(tmp_path / "xids.rwc", rows, 4)
    want = sorted((i, *expected(facts, i)) for i in facts["part"])
    assert {w[2] for w in want if w[2] is not None} > {facts["top"]["streamed"]}  # subtransactions among them

    every = spark.read.format("replwire").load(path)
    got = every.select(F.get_json_object("new", "$.id").cast("int"), "xid", "subxid", "gid").collect()
    assert sorted(tuple(r) for r in got) == want
    per_table = spark.read.format("replwire").option("table", f"public.{TABLE}").load(path)
    assert sorted(tuple(r) for r in per_table.select("id", "xid", "subxid", "gid").collect()) == want

    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key)
    out = tmp_path / "state"
    apply(spark, [path], str(out))
    assert spark.conf.get(key) == before  # the session's own setting is back
    written = spark.read.parquet(str(out / "_changes" / f"public.{TABLE}" / "v1"))
    assert sorted(tuple(r) for r in written.select("id", "xid", "subxid", "gid").collect()) == want

    files = sorted(p for p in out.rglob("*.parquet"))
    assert {p.relative_to(out).parts[0] for p in files} == {"_changes", f"public.{TABLE}"}
    seen = set()
    for file in files:
        for name, kind in _timestamp_fields(pq.read_schema(file)):
            seen.add((file.relative_to(out).parts[0], name))
            zone = None if name.rsplit(".", 1)[-1] == "wall" else "UTC"
            assert kind == pa.timestamp("us", tz=zone), (file, name, kind)
    assert seen == {("_changes", n) for n in ("commit_time", "at", "wall", "_before.at", "_before.wall")} | {
        (f"public.{TABLE}", "at"), (f"public.{TABLE}", "wall")}
    state = pq.read_table(out / f"public.{TABLE}")
    assert state.num_rows == len(want)
    assert set(state.column("at").to_pylist()) == {at} and set(state.column("wall").to_pylist()) == {wall}


def test_cli_changes_and_apply(pg18, tmp_path):
    tag = "spark_cli"
    fresh_database(pg18, tag)
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        run_workload(conn, tag)
        rows = peek(conn, f"slot_{tag}", 1, {"publication_names": f"pub_{tag}"})
        expected = conn.execute("SELECT count(*) FROM items").fetchone()[0]
    csv_path = tmp_path / "rows.csv"
    csv_path.write_text("".join(f"{lsn},{xid},\\x{data.hex()}\n" for lsn, xid, data in rows))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    run = subprocess.run([sys.executable, "-m", "replwire.codec.cli", "spark", "apply", str(csv_path),
                          "--proto-version", "1", "--out", str(tmp_path / "state"), "--master", "local[2]",
                          "--table", "public.*", "--exclude-table", "full_*"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"public.items: {expected} rows" in run.stdout
    # the tables the filter leaves out are neither folded nor written
    assert "public.trunc: " in run.stdout and "full_ident" not in run.stdout
    assert sorted(name for name in os.listdir(tmp_path / "state") if not name.startswith("_")) == [
        "public.items", "public.trunc"]
    missing = subprocess.run([sys.executable, "-m", "replwire.codec.cli", "spark", "changes", str(csv_path),
                              "--out", str(tmp_path / "c")], capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode != 0 and "--proto-version" in missing.stderr
