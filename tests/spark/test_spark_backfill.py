"""A backfill's rows on a real Spark session (local[2]): the ``changes`` job writes them as op ``backfill`` rows
at their chunk's position, and ``apply`` -- each way it folds a table -- lets each replace its key's row, and
fills a later unchanged TOASTed value from it.  The capture file and its hand-worked result are those of
:mod:`tests.stream.test_backfill_records`."""

from __future__ import annotations

import pytest

from tests.stream.test_backfill_records import H, write

pyspark = pytest.importorskip("pyspark")


@pytest.mark.parametrize("way", ["one task", "split", "spread"])
def test_apply_lets_a_chunk_row_replace_its_keys_row(spark, tmp_path, monkeypatch, way):
    from replwire.spark import jobs

    path = tmp_path / "b.rwcap"
    write(path)
    monkeypatch.setattr(jobs, "ONE_TASK_BYTES", -1 if way == "spread" else jobs.ONE_TASK_BYTES)
    monkeypatch.setattr(jobs, "SPLIT_BYTES", -1 if way == "split" else jobs.SPLIT_BYTES)
    result = jobs.apply(spark, [str(path)], str(tmp_path / "state"))
    assert result.rows == {"public.t": 3}
    state = spark.read.parquet(str(tmp_path / "state" / "public.t"))
    assert sorted(tuple(r) for r in state.select("id", "v", "_unchanged_toast").collect()) == [
        (1, "a2", None), (3, "c2", None), (4, "d", None)]


def test_the_changes_job_writes_chunk_rows_at_their_watermark(spark, tmp_path):
    from replwire.spark import jobs

    path = tmp_path / "b.rwcap"
    write(path)
    jobs.changes(spark, [str(path)], str(tmp_path / "changes"))
    rows = spark.read.parquet(str(tmp_path / "changes" / "public.t" / "v1")).where("op = 'backfill'")
    assert sorted((r.id, r.v, r.commit_lsn) for r in rows.collect()) == [(1, "a2", H), (2, "b", H), (3, "c", H),
                                                                          (4, "d", H)]
    frame = spark.read.format("replwire").load(str(path)).where("op = 'backfill'")
    assert sorted(r.new for r in frame.collect()) == ['{"id":1,"v":"a2"}', '{"id":2,"v":"b"}', '{"id":3,"v":"c"}',
                                                      '{"id":4,"v":"d"}']


def test_the_backfills_own_messages_are_no_changes(spark, tmp_path):
    # a run's start marker: a transactional message of the backfill's prefix, in a transaction of its own
    import json

    from replwire.codec import LSN, Begin, Commit, Message, build
    from replwire.schema.capture import BACKFILL_PREFIX
    from replwire.spark import jobs
    from tests.stream.test_backfill_records import TIME, records

    marker = Message(flags=1, lsn=LSN(0x608), prefix=BACKFILL_PREFIX, content=json.dumps({"k": "xid"}).encode())
    items = [*records(), (0x600, 704, build(Begin(final_lsn=LSN(0x610), commit_time=TIME, xid=704), proto_version=1)),
             (0x608, 704, build(marker, proto_version=1)),
             (0x610, 704, build(Commit(flags=0, commit_lsn=LSN(0x610), end_lsn=LSN(0x618), commit_time=TIME),
                                proto_version=1))]
    path = tmp_path / "b.rwcap"
    write(path, items)
    result = jobs.changes(spark, [str(path)], str(tmp_path / "changes"))
    assert result.messages == 0
    assert spark.read.format("replwire").load(str(path)).where("op = 'message'").count() == 0
