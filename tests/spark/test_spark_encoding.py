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
    assert json.loads(changes[2].new) == {**row, "prix": str(row["prix"])}  # numeric as exact text

    table = spark.read.format("replwire").option("table", f"public.{said['table']}").load(path)
    assert table.columns[table.columns.index("id"):][:len(said["columns"])] == said["columns"]
    last = table.orderBy("commit_lsn").collect()[-1]
    assert (last["naïve"], last["étiquettes"], json.loads(last["doc"])) == (row["naïve"], row["étiquettes"], row["doc"])
    assert decimal.Decimal(str(last["prix"])) == row["prix"]
