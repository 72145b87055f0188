"""Spark's sources read a capture in the client encoding it records (issue 17, item 7): a LATIN1 database on
a real server, captured over a LATIN1 connection, read through a real Spark session and compared with what
the server says the names and values are (a ``SELECT`` over a UTF8 connection)."""

from __future__ import annotations

import decimal
import json

import pytest

from replwire.codec import LSN
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from tests.support.encodings import PEEK, connect, latin1_workload

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")


def test_spark_reads_a_latin1_capture(spark, pg15, tmp_path):
    said = latin1_workload(pg15, "enc_latin1_spark", "enc_spark")
    with connect(pg15, "enc_latin1_spark", "LATIN1") as conn:
        encoding = conn.info.parameter_status("client_encoding")
        rows = conn.execute(PEEK.replace("data", "lsn::text, xid::text::bigint, data"), ("enc_spark",)).fetchall()
        conn.execute("SELECT pg_drop_replication_slot('enc_spark')")
    assert encoding == "LATIN1"
    path = str(tmp_path / "latin1.rwcap")
    with CaptureWriter(path, CaptureHeader(proto_version=3, client_encoding=encoding)) as writer:
        for lsn, xid, data in rows:
            writer.append(LSN(lsn), xid, bytes(data))
    row = dict(zip(said["columns"], said["row"]))

    changes = spark.read.format("replwire").load(path).orderBy("commit_lsn", "position").collect()
    assert [(c.op, c.table, c.prefix, c.origin, c.gid) for c in changes] == [
        ("insert", said["table"], None, said["origin"], None), ("message", None, "préfixe", None, None),
        ("update", said["table"], None, None, "gïd-1")]
    assert json.loads(changes[2].new) == {**row, "prix": str(row["prix"]),  # numeric as exact text
                                          "doc": json.dumps(row["doc"], ensure_ascii=False)}  # json: its text

    table = spark.read.format("replwire").option("table", f"public.{said['table']}").load(path)
    assert table.columns[table.columns.index("id"):][:len(said["columns"])] == said["columns"]
    last = table.orderBy("commit_lsn").collect()[-1]
    assert (last["naïve"], last["étiquettes"], json.loads(last["doc"])) == (row["naïve"], row["étiquettes"], row["doc"])
    assert decimal.Decimal(str(last["prix"])) == row["prix"]


def test_sql_ascii_capture_needs_an_encoding_and_is_read_in_it(spark, pg15, tmp_path):
    """A SQL_ASCII database's bytes are in no declared encoding, and Spark's strings and Parquet files hold
    Unicode only: without ``encoding`` the inputs are refused before anything runs (CLI: a usage error
    before Spark starts); with LATIN1, names and values are the server's bytes read as ISO 8859-1."""
    import pyarrow.parquet as pq

    from replwire.codec.io.capture_file import CaptureFileError
    from replwire.spark import jobs
    from tests.support.encodings import database

    dbname, slot = "enc_sql_ascii_spark", "enc_ascii_spark"
    database(pg15, dbname, "SQL_ASCII")
    with connect(pg15, dbname, "SQL_ASCII") as conn:
        conn.execute(b'CREATE TABLE "caf\xe9" (id int PRIMARY KEY, "na\xefve" text)')
        conn.execute(b'CREATE PUBLICATION pub FOR TABLE "caf\xe9"')
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute(b"""INSERT INTO "caf\xe9" VALUES (1, 'cr\xe8me \x80\xff'), (2, 'plain')""")
        conn.execute(b"""UPDATE "caf\xe9" SET "na\xefve" = 'g\xe2teau' WHERE id = 2""")
        encoding = conn.info.parameter_status("client_encoding")
        rows = conn.execute(PEEK.replace("data", "lsn::text, xid::text::bigint, data"), (slot,)).fetchall()
        # what the server says, as bytes
        table = conn.execute(b"""SELECT relname::text::bytea FROM pg_class
                                 WHERE oid = '"caf\xe9"'::regclass""").fetchone()[0]
        values = dict(conn.execute(b'SELECT id, "na\xefve"::bytea FROM "caf\xe9"').fetchall())
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert encoding == "SQL_ASCII" and table == b"caf\xe9"
    path = str(tmp_path / "ascii.rwcap")
    with CaptureWriter(path, CaptureHeader(proto_version=3, client_encoding=encoding)) as writer:
        for lsn, xid, data in rows:
            writer.append(LSN(lsn.decode()), xid, bytes(data))

    with pytest.raises(Exception, match="SQL_ASCII database.*LATIN1"):
        spark.read.format("replwire").load(path).collect()
    with pytest.raises(CaptureFileError, match="SQL_ASCII database"):
        jobs.apply(spark, [path], str(tmp_path / "refused"))
    assert not (tmp_path / "refused").exists()  # refused before anything was written

    out = tmp_path / "state"
    jobs.apply(spark, [path], str(out), encoding="LATIN1")
    name = "public." + table.decode("latin-1")
    [written] = [d for d in out.iterdir() if not d.name.startswith("_")]  # one table: its name escaped
    state = pq.read_table(written).to_pydict()
    summary = json.loads((out / "_changes" / "_replwire.json").read_text())
    assert [t["table"] for t in summary["tables"]] == [name]
    assert dict(zip(state["id"], state["na" + "\xef" + "ve"])) == {k: bytes(v).decode("latin-1")
                                                                  for k, v in values.items()}
    read = (spark.read.format("replwire").option("encoding", "LATIN1").option("table", name).load(path)
            .orderBy("commit_lsn", "position").collect())
    assert [(r["id"], r["na\xefve"]) for r in read] == [(1, "crème \x80ÿ"), (2, "plain"), (2, "gâteau")]


def test_spark_cli_refuses_sql_ascii_without_encoding_before_spark_starts(tmp_path):
    import os
    import subprocess
    import sys

    path = tmp_path / "ascii.rwcap"
    with CaptureWriter(path, CaptureHeader(proto_version=1, client_encoding="SQL_ASCII")):
        pass
    run = subprocess.run([sys.executable, "-m", "replwire.codec.cli", "spark", "changes", str(path), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert run.returncode == 2, run.stderr[-2000:]
    assert "SQL_ASCII database" in run.stderr and "--encoding" in run.stderr
    assert "incubator" not in run.stderr  # no JVM was started (every Spark start warns of its modules)
    assert not (tmp_path / "out").exists()
