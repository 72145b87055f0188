"""A column added with ``ADD COLUMN ... DEFAULT`` during a capture: the capture records the stored default
after the table's new Relation (``ColumnDefaults``), and ``spark apply`` gives it to every row the stream
has not sent since -- in Parquet, and in a Delta table that held the rows before -- so that the tables
equal ``SELECT *``; a volatile default (the server rewrote the table,
each row its own value) is said: by the capture as it sees the column added, and by ``apply``.
"""

from __future__ import annotations

import threading
import time

import pytest

from replwire.codec import LSN
from replwire.codec.io.capture_file import read_capture
from replwire.codec.io.connection import CaptureSettings
from replwire.codec.io.live import LiveCapture
from replwire.codec.stream import snapshot_records

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")

from tests.spark.test_spark import fresh_database  # noqa: E402


def _caught_up(conn, slot, timeout=60.0):
    end = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        confirmed = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                 (slot,)).fetchone()[0]
        if LSN(confirmed) >= end:
            return
        time.sleep(0.05)
    raise AssertionError("the capture did not catch up")


@pytest.mark.parametrize("via", ["replication", "sql"])
def test_apply_fills_a_column_added_with_a_default(spark, pg18, tmp_path, via):
    from replwire.spark import jobs

    tag = f"added_default_{via}"
    fresh_database(pg18, tag)
    out = tmp_path / "cap.rwcap"
    lake = str(tmp_path / "lake")
    said: list[str] = []
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (tag,))
        conn.execute("INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 50) i")
        capture = LiveCapture(f"{pg18.dsn} dbname={tag}", out, CaptureSettings(slot=tag, publication="pub"),
                              create_slot=False, sync_interval=0.05, log=said.append, via=via)
        stop = threading.Event()
        runner = threading.Thread(target=capture.run, kwargs={"stop": stop})
        runner.start()
        try:
            _caught_up(conn, tag)
            jobs.apply(spark, [str(out)], lake, format="delta")  # the Delta table's rows, before the column
            conn.execute("ALTER TABLE t ADD COLUMN extra int DEFAULT 7, "
                         "ADD COLUMN note text DEFAULT 'hello, \"world\" {x}'")
            conn.execute("UPDATE t SET v = 'changed' WHERE id <= 5")
            conn.execute("INSERT INTO t VALUES (100, 'new', 1, NULL)")
            _caught_up(conn, tag)
            conn.execute("VACUUM FULL t")  # the values written into the rows: the Relation sent again has none
            conn.execute("UPDATE t SET v = 'after vacuum' WHERE id = 8")
            _caught_up(conn, tag)
            conn.execute("ALTER TABLE t ADD COLUMN r float8 DEFAULT random()")  # rewritten: each row its own
            conn.execute("UPDATE t SET v = 'again' WHERE id = 6")
            _caught_up(conn, tag)
        finally:
            stop.set()
            runner.join(60)
        assert not runner.is_alive()
        conn.execute("SELECT pg_drop_replication_slot(%s)", (tag,))
        server = {row[0]: row for row in conn.execute("SELECT id, v, extra, note, r FROM t").fetchall()}
    with read_capture(out) as reader:
        defaults = [snapshot_records.parse_record(r.data) for r in reader.records()
                    if r.data[:1] == bytes((snapshot_records.DEFAULTS,))]
    by_record = [{c.name: (c.kind, c.value) for c in record.columns} for record in defaults]
    added = next(d for d in by_record if "extra" in d)  # after the Relation that has the new columns
    assert added == {"extra": (1, "7"), "note": (1, 'hello, "world" {x}')}
    assert any(d.get("extra") == (2, "") and "r" not in d for d in by_record)  # after VACUUM FULL
    assert by_record[-1]["r"] == (2, "")  # after the rewrite: no value stored
    assert any("t.r was added with a default the server wrote into each row" in line and "backfill" in line
               for line in said), said

    result = jobs.apply(spark, [str(out)], str(tmp_path / "state"))
    assert any(name.endswith("t.r") for name in result.changes.unknown_defaults)
    state = {row["id"]: row for row in spark.read.parquet(str(tmp_path / "state" / "public.t")).collect()}
    assert set(state) == set(server)
    for key, (_, v, extra, note, r) in server.items():
        row = state[key]
        assert (row["v"], row["extra"], row["note"]) == (v, extra, note), key
        assert row["r"] == (r if key == 6 else None), key  # the only row the stream sent after the rewrite

    import deltalake

    done = jobs.apply(spark, [str(out)], lake, format="delta")
    assert done.applied["public.t"].how == "rewrite"  # the rows it held get the stored default
    table = {row["id"]: row for row in deltalake.DeltaTable(f"{lake}/public.t").to_pyarrow_table().to_pylist()}
    assert set(table) == set(server)
    for key, (_, v, extra, note, r) in server.items():
        assert (table[key]["v"], table[key]["extra"], table[key]["note"]) == (v, extra, note), key
        assert table[key]["r"] == (r if key == 6 else None), key
