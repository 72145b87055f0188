"""``replwire spark`` as users run it: from a script whose PATH's ``python3`` has no replwire."""

from __future__ import annotations

import json
import os
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

