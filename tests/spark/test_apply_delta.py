"""``apply --format delta``: a real server's changes, captured in three segments (:mod:`tests.spark.lakehouse`),
applied segment by segment into Delta tables, which -- read back with ``deltalake``, not with replwire --
equal ``SELECT *`` on the server after each; a replayed run changes nothing, and a run killed in the middle
of a commit and run again ends equal, each position committed once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from tests.spark.lakehouse import QUERIES, arrow_rows, captured_segments, data_files, write_segment  # noqa: E402
from tests.spark.test_spark import fresh_database, peek  # noqa: E402


def delta_rows(path, names):
    return arrow_rows(deltalake.DeltaTable(path).to_pyarrow_table(), names)


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
            # the earlier segments' parts were applied whole by the run before: not decoded again
            assert (result.changes.skipped > 0) == (len(paths) > 1), result.changes
            hows.append({table: done.how for table, done in result.applied.items()})
            again = jobs.apply(spark, paths, out, format="delta")  # the same inputs again: nothing to do
            assert {done.how for done in again.applied.values()} == {"none"}
            assert again.changes.skipped == again.changes.parts
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
    # a table dropped from the lake is made again whole: the parts the mark says were applied are decoded
    shutil.rmtree(os.path.join(out, "public.logs"))
    again = jobs.apply(spark, paths, out, format="delta")
    assert again.applied["public.logs"].how == "create" and again.changes.skipped == 0
    assert_equal(out, tables)
    if major == 15:  # (the same on both)
        # a run that left tables out marks only its own: a run with them all decodes what they lack
        from replwire.codec.stream.tables import TableFilter

        part = str(tmp_path / "part")
        jobs.apply(spark, paths, part, format="delta", tables=TableFilter(["orders"]))
        assert sorted(os.listdir(part)) == ["_replwire_applied.json", "public.orders"]
        whole = jobs.apply(spark, paths, part, format="delta")
        assert whole.changes.skipped == 0
        assert_equal(part, tables)


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
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "replwire.codec.cli", "spark", "apply", *paths, "--out", out,
               "--format", "delta", "--master", "local[2]"]
    in_a_commit = False
    for _ in range(4):  # a small table can be written and committed between two looks: then kill again
        before = data_files(out)
        run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        hit: set[str] = set()
        try:
            deadline = time.monotonic() + 240
            while run.poll() is None and time.monotonic() < deadline:
                new = data_files(out) - before
                if new:  # a table's new data is being written
                    run.send_signal(signal.SIGKILL)
                    hit = {os.path.basename(os.path.dirname(path)).removeprefix("public.") for path in new}
                    break
            run.wait(30)
            assert run.returncode == -signal.SIGKILL, run.stderr.read()[-3000:] if run.stderr else ""
        finally:
            if run.poll() is None:
                run.kill()
            if run.stderr:
                run.stderr.close()
        # killed before the commit of a table whose data it wrote: the table still holds the first segment only
        if any(len(history(out, name)) == 1 for name in hit):
            in_a_commit = True
            break
    assert in_a_commit, "no kill came between a table's data files and its commit"
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
