"""``replwire decode`` on changes made by subtransactions, on the COPY-CSV of a real PostgreSQL 18 slot: ``xid`` is
the top-level transaction's xid (``pg_current_xact_id()`` in the transaction), ``subxid`` the xid of the
(sub)transaction that made a streamed change (the row's ``xmin``), ``gid`` the two-phase identifier; and the
summary on stderr counts in the singular when there is one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.xids import expected, peek_options, run_xid_workload

pytestmark = pytest.mark.server

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")


def replwire(*args):
    return subprocess.run([REPLWIRE, *map(str, args)], capture_output=True, text=True, timeout=120)


def copy_csv(conn, slot, options, path):
    with path.open("wb") as out, conn.cursor().copy(
            "COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, VARIADIC %s::text[]))"
            " TO STDOUT WITH (FORMAT csv)", (slot, options)) as copy:
        for data in copy:
            out.write(data)


def test_decode_xid_is_the_top_level_transaction_and_subxid_the_subtransaction(pg18, tmp_path):
    with pg18.connect(autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS cli_xids")
        admin.execute("CREATE DATABASE cli_xids")
    path = tmp_path / "changes.csv"
    with pg18.connect(dbname="cli_xids") as conn:
        facts = run_xid_workload(conn, "cli_xids")
        copy_csv(conn, "slot_cli_xids", peek_options("cli_xids"), path)
        conn.execute("SELECT pg_drop_replication_slot('slot_cli_xids')")
    result = replwire("decode", path, "--proto-version", "4")
    assert result.returncode == 0, result.stderr
    changes = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(c["new"]["id"] for c in changes) == sorted(facts["part"])  # the rolled-back rows are not there
    for change in changes:
        xid, subxid, gid = expected(facts, change["new"]["id"])
        assert (change["xid"], change.get("subxid"), change.get("gid")) == (xid, subxid, gid), change["new"]["id"]
    # the streamed transaction's rows come from the top-level transaction and from two subtransactions
    assert {c["subxid"] for c in changes if "subxid" in c} == {facts["top"]["streamed"]} | {
        facts["xmin"][2001], facts["xmin"][3001]}
    assert facts["xmin"][2001] != facts["top"]["streamed"] != facts["xmin"][3001]
    assert result.stderr.strip().endswith(f"3 transactions, {len(changes)} changes from 1 file")


def test_decode_summary_counts_one_in_the_singular(pg18, tmp_path):
    path = tmp_path / "one.csv"
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE one_t (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION one_pub FOR TABLE one_t")
        conn.execute("SELECT pg_create_logical_replication_slot('one_slot', 'pgoutput')")
        conn.execute("INSERT INTO one_t VALUES (1)")
        copy_csv(conn, "one_slot", ["proto_version", "1", "publication_names", "one_pub"], path)
        conn.execute("SELECT pg_drop_replication_slot('one_slot')")
    result = replwire("decode", path, "--proto-version", "1")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "1 transaction, 1 change from 1 file"
