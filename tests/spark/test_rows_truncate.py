"""The change table's rows of a TRUNCATE (:class:`replwire.spark.rows.ChangeRows`): one per table it emptied,
naming the table as ``replwire decode``'s lines do, so a filter on ``table`` keeps its truncates.  The
tables, their order and their OIDs are the server's (PostgreSQL 18); no Spark session is needed."""

from __future__ import annotations

import pytest

from replwire.codec import Assembler, Transaction
from replwire.codec.split import Decoded
from replwire.codec.stream.outcome import Outcome

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")
from replwire.spark.rows import ChangeRows  # noqa: E402


def test_truncate_rows_one_per_table(pg18):
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE trows_a (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE trows_b (id int PRIMARY KEY, a int REFERENCES trows_a)")
        conn.execute("CREATE PUBLICATION trows_pub FOR TABLE trows_a, trows_b")
        conn.execute("SELECT pg_create_logical_replication_slot('trows_slot', 'pgoutput')")
        conn.execute("INSERT INTO trows_a VALUES (1)")
        conn.execute("TRUNCATE trows_a CASCADE")  # trows_b is reached through CASCADE
        oids = {name: int(conn.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0])
                for name in ("trows_a", "trows_b")}
        rows = conn.execute("SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes("
                            "'trows_slot', NULL, NULL, 'proto_version', '1', 'publication_names', 'trows_pub')"
                            ).fetchall()
        conn.execute("SELECT pg_drop_replication_slot('trows_slot')")
    collector = ChangeRows()
    position = 0
    for item in Assembler(proto_version=1).feed_all(rows):
        assert isinstance(item, Transaction)
        outcome = Outcome(item.xid, item.commit_lsn, item.end_lsn, item.commit_time)
        for change in item.changes:
            position += 1
            collector.add(Decoded(position, change, outcome))
    batch = collector.batch().to_pylist()
    truncates = [r for r in batch if r["op"] == "truncate"]
    assert sorted((r["schema"], r["table"], r["relation_id"]) for r in truncates) == [
        ("public", "trows_a", oids["trows_a"]), ("public", "trows_b", oids["trows_b"])]
    for row in truncates:
        assert sorted(row["truncated"]) == ["public.trows_a", "public.trows_b"]
        assert row["cascade"] is True and row["restart_identity"] is False
        assert row["position"] == truncates[0]["position"]  # one Truncate message
    assert [r["op"] for r in batch if r["table"] == "trows_b"] == ["truncate"]
