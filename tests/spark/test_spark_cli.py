"""``replwire spark`` as users run it: from a script whose PATH's ``python3`` has no replwire, and with
``--master`` on a real Spark standalone cluster (a master and two workers, each its own JVM, on loopback)
whose Python has no replwire either: the jobs ship it, its compiled codec included, and write what
``local[2]`` writes."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from replwire.codec import (
    LSN,
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
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from tests.support.spark_cluster import standalone_cluster

pyspark = pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

CLI = [sys.executable, "-m", "replwire.codec.cli", "spark"]
AT = Timestamp(800_000_000_000_000)
TEXT = TupleColumn.text


def _relation(relation_id, name):
    return Relation(relation_id=relation_id, namespace="public", name=name, replica_identity="d", columns=[
        RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1),
        RelationColumn(flags=0, name="body", type_id=25, type_modifier=-1)])


def write_capture(path, transactions):
    """A capture file of ``transactions`` (lists of messages between a Begin and a Commit)."""
    lsn = 0x1000
    with CaptureWriter(path, CaptureHeader(proto_version=1, server_version=0, options={})) as writer:
        for xid, messages in enumerate(transactions, 100):
            end = lsn + len(messages) + 1
            whole = [Begin(final_lsn=LSN(end), commit_time=AT, xid=xid), *messages,
                     Commit(flags=0, commit_lsn=LSN(end), end_lsn=LSN(end + 8), commit_time=AT)]
            for i, message in enumerate(whole):
                writer.append(LSN(lsn + i), 0, build(message, proto_version=1))
            lsn = end + 16
    return str(path)


def env_without_pyspark_python(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", **extra}


def read_rows(directory):
    """The rows of a Parquet dataset, sorted (files in name order; Spark's and the jobs' own)."""
    table = pq.read_table(directory)
    names = table.column_names
    return names, sorted(table.to_pylist(), key=lambda row: json.dumps(row, sort_keys=True, default=str))


def small_capture(path):
    """Two tables, two transactions; :data:`SMALL_CHANGES` are their changes, worked by hand."""
    a, b = _relation(1, "a"), _relation(2, "b")
    return write_capture(path, [
        [a, b, Insert(relation_id=1, new=[TEXT("1"), TEXT("one")]), Insert(relation_id=1, new=[TEXT("2"), TEXT("two")]),
         Insert(relation_id=2, new=[TEXT("10"), TEXT("ten")])],
        [Update(relation_id=1, new=[TEXT("1"), TEXT("uno")]),
         Delete(relation_id=2, key=[TEXT("10"), TupleColumn.null()])]])


SMALL_CHANGES = {"public.a": [("insert", 1, "one"), ("insert", 2, "two"), ("update", 1, "uno")],
                 "public.b": [("delete", 10, None), ("insert", 10, "ten")]}


def test_cli_from_a_script_whose_python3_has_no_replwire(tmp_path):
    """Run as cron or a script would: PATH=/usr/bin:/bin (Debian's python3, no replwire) and no
    PYSPARK_PYTHON.  The local master's Python workers must be this interpreter."""
    path = small_capture(tmp_path / "in.rwc")
    env = env_without_pyspark_python(PATH="/usr/bin:/bin")
    out = tmp_path / "changes"
    run = subprocess.run([*CLI, "changes", path, "--out", str(out), "--master", "local[2]"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {name: sorted((r["op"], r["id"], r["body"]) for r in read_rows(out / name / "v1")[1])
            for name in SMALL_CHANGES}
    assert rows == SMALL_CHANGES
    # stdout: the summary table, from its title on; stderr (not a terminal): no progress bars, no log lines
    # (only the JVM's own warning of the incubator module Spark's launcher always adds)
    assert run.stdout.splitlines()[0].strip().startswith("replwire spark changes:"), run.stdout
    for noise in ("[Stage", " WARN ", "log4j", "log level"):
        assert noise not in run.stderr, run.stderr[-3000:]
    # a non-empty output directory is refused before Spark starts (the JVM would announce that module)
    again = subprocess.run([*CLI, "changes", path, "--out", str(out), "--master", "local[2]"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode != 0 and "not empty" in again.stderr
    assert "WARNING" not in again.stderr and "Traceback" not in again.stderr


# ---------------------------------------------------------------------------------------------------------
# a standalone cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Spark standalone master and two workers (1 core, 1 GB each) on loopback, whose Python cannot import
    replwire (:func:`tests.support.spark_cluster.standalone_cluster`).  Yields the master's URL, the
    environment to run the driver in and the directory under which the workers keep their executors' logs
    (``worker-<n>/<app>/<executor>/stderr``)."""
    root = tmp_path_factory.mktemp("cluster")
    with standalone_cluster(root, env_without_pyspark_python()) as (master, env, _):
        yield master, env, root


def _executor_lines(root, app):
    """The lines replwire wrote to the stderr of the executors of the application ``app`` (its id)."""
    return [line for path in sorted(glob.glob(str(root / "worker-*" / app / "*" / "stderr")))
            for line in open(path, encoding="utf-8", errors="replace").read().splitlines()
            if line.startswith("replwire: ")]


def test_cli_on_a_standalone_cluster_writes_what_local_writes(cluster, tmp_path):
    """``apply`` on the cluster, its executors on the compiled codec (shipped with the job), and ``changes``
    with the executors told to run the Python codec: both write what ``local[2]`` writes, and say which
    codec the executors ran, on the driver's stdout and in the executors' logs."""
    master, env, root = cluster
    a, b = _relation(1, "a"), _relation(2, "b")
    transactions = []
    for x in range(100):
        messages = [a, b] if x == 0 else []
        messages += [Insert(relation_id=1 + k % 2, new=[TEXT(str(x * 40 + k)), TEXT(f"row {x} {k}")])
                     for k in range(40)]
        if x:
            messages.append(Update(relation_id=1, new=[TEXT(str((x - 1) * 40)), TEXT("updated")]))
            messages.append(Delete(relation_id=2, key=[TEXT(str((x - 1) * 40 + 1)), TupleColumn.null()]))
        transactions.append(messages)
    path = write_capture(tmp_path / "in.rwc", transactions)

    def run(job, out, where, **extra):
        done = subprocess.run([*CLI, job, path, "--out", str(tmp_path / out), "--master", where,
                               "--partition-mb", "1"], capture_output=True, text=True, env={**env, **extra},
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        executors = [line for line in done.stdout.splitlines() if line.startswith("executors: ")]
        assert len(executors) == 1, done.stdout
        return tmp_path / out, executors[0]

    def app(before):
        """The id of the one application the workers started since ``before`` (their apps then)."""
        (started,) = {os.path.basename(p) for p in glob.glob(str(root / "worker-*" / "app-*"))} - before
        return started

    def apps():
        return {os.path.basename(p) for p in glob.glob(str(root / "worker-*" / "app-*"))}

    local, said = run("apply", "local", "local[2]")
    assert said == "executors: compiled codec on 1 of 1", said
    before = apps()
    on_cluster, said = run("apply", "cluster", master)
    # the tasks ran on one executor or both (as Spark placed them), each on the compiled codec
    assert re.fullmatch(r"executors: compiled codec on ([12]) of \1", said), said
    lines = _executor_lines(root, app(before))
    assert lines and all(re.fullmatch(r"replwire: executor \d on \S+ runs the compiled codec \(.*\)", line)
                         for line in lines), lines
    before = apps()
    # the fallback: an executor that does not run the compiled codec runs the Python one, and says why
    changes, said = run("changes", "cluster-changes", master,
                        PYSPARK_SUBMIT_ARGS="--conf spark.executorEnv.REPLWIRE_IMPL=python pyspark-shell")
    assert re.fullmatch(r"executors: compiled codec on 0 of ([12]); the Python codec on executor \d on .*"
                        r"\(REPLWIRE_IMPL=python in the executor's environment\)", said), said
    lines = _executor_lines(root, app(before))
    assert lines and all(line.endswith("runs the Python codec (the same results, slower): REPLWIRE_IMPL=python "
                                       "in the executor's environment") for line in lines), lines
    # 20 rows per table per transaction; one row of b deleted in each of the 99 later ones (worked by hand)
    assert len(read_rows(local / "public.a")[1]) == 2000 and len(read_rows(local / "public.b")[1]) == 1901
    for name in ("public.a", "public.b"):
        assert read_rows(on_cluster / name) == read_rows(local / name)
        for written in (on_cluster / "_changes", changes):
            assert read_rows(written / name / "v1") == read_rows(local / "_changes" / name / "v1")
    assert (json.loads((changes / "_replwire.json").read_text())
            == json.loads((local / "_changes" / "_replwire.json").read_text()))


DATA_SOURCE = """
import json, sys
from pyspark.sql import SparkSession
from replwire.spark import register
spark = SparkSession.builder.master(sys.argv[1]).getOrCreate()
register(spark)
source = spark.read.format("replwire")
typed = source.option("table", "public.a").load(sys.argv[2]).select("op", "id", "body").collect()
changes = spark.read.format("replwire").load(sys.argv[2]).groupBy("table", "op").count().collect()
print(json.dumps([sorted(map(list, typed)), sorted(map(list, changes))]))
spark.stop()
"""


def test_data_sources_on_a_standalone_cluster(cluster, tmp_path):
    """``register(spark)`` on a cluster's session: the batch source plans and reads with replwire shipped."""
    master, env, _ = cluster
    path = small_capture(tmp_path / "in.rwc")
    done = subprocess.run([sys.executable, "-c", DATA_SOURCE, master, path], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    typed, counts = json.loads(done.stdout.splitlines()[-1])
    assert [tuple(row) for row in typed] == SMALL_CHANGES["public.a"]
    assert counts == [["a", "insert", 2], ["a", "update", 1], ["b", "delete", 1], ["b", "insert", 1]]
