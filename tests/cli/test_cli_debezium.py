"""``replwire decode --format debezium`` run as a user runs it, on the COPY-CSV of a real PostgreSQL 18
slot: one Debezium change-event value per line (the documented shapes are checked in
tests/stream/test_debezium.py; here, that the command prints them, for what the server reported)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from replwire.codec import LSN

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
PLACEHOLDER = "__debezium_unavailable_value"  # Debezium's unavailable.value.placeholder default


def replwire(*args):
    return subprocess.run([REPLWIRE, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_decode_help_names_the_debezium_format():
    result = replwire("decode", "--help")
    assert result.returncode == 0 and "jsonl|table|debezium" in result.stdout


@pytest.mark.server
def test_decode_format_debezium(pg18, tmp_path):
    path = tmp_path / "changes.csv"
    xids = []
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE dbzcli_t (id int PRIMARY KEY, v text, big text)")
        conn.execute("ALTER TABLE dbzcli_t ALTER COLUMN big SET STORAGE EXTERNAL")
        conn.execute("CREATE PUBLICATION dbzcli_pub FOR TABLE dbzcli_t")
        conn.execute("SELECT pg_create_logical_replication_slot('dbzcli_slot', 'pgoutput')")
        for statement in ["INSERT INTO dbzcli_t VALUES (1, 'Grüße', repeat('x', 10000)), (2, NULL, 'small')",
                          "UPDATE dbzcli_t SET v = 'changed' WHERE id = 1",  # big: unchanged TOAST
                          "DELETE FROM dbzcli_t WHERE id = 2",
                          "TRUNCATE dbzcli_t"]:
            with conn.transaction():
                xids.append(int(conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]))
                conn.execute(statement)
        with path.open("wb") as out, conn.cursor().copy(
                "COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes('dbzcli_slot', NULL, NULL, "
                "'proto_version', '4', 'publication_names', 'dbzcli_pub')) TO STDOUT WITH (FORMAT csv)") as copy:
            for data in copy:
                out.write(data)
        conn.execute("SELECT pg_drop_replication_slot('dbzcli_slot')")

    result = replwire("decode", path, "--proto-version", "4", "--format", "debezium")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[4] is None  # the delete's tombstone ("Tombstone events"; tombstones.on.delete: true)
    del events[4]
    assert [e["op"] for e in events] == ["c", "c", "u", "d", "t"]
    assert [e["source"]["txId"] for e in events] == [xids[0], xids[0], xids[1], xids[2], xids[3]]
    assert {(e["source"]["schema"], e["source"]["table"]) for e in events} == {("public", "dbzcli_t")}
    first, second, update, delete, truncate = events
    assert first["before"] is None and first["after"] == {"id": 1, "v": "Grüße", "big": "x" * 10000}
    assert second["after"] == {"id": 2, "v": None, "big": "small"}
    assert update["before"] is None and update["after"] == {"id": 1, "v": "changed", "big": PLACEHOLDER}
    assert update["unchanged_toast"] == ["big"]
    # "Replica identity": DEFAULT gives the primary key's old value; the other columns of the row are null
    assert delete["before"] == {"id": 2, "v": None, "big": None} and delete["after"] is None
    assert "before" not in truncate and "after" not in truncate
    assert result.stderr.strip().endswith("4 transactions, 5 changes from 1 file")  # (not the tombstone)

    # the same changes as the default JSON lines: at the same positions, with the same commit times
    plain = [json.loads(line) for line in replwire("decode", path, "--proto-version", "4").stdout.splitlines()]
    for event, change in zip(events, plain, strict=True):
        assert event["source"]["lsn"] == int(LSN(change["lsn"]))
        commit = dt.datetime.fromisoformat(change["commit_time"])
        assert event["source"]["ts_us"] == (commit - EPOCH) // dt.timedelta(microseconds=1)
        assert event["transaction"]["id"] == f"{change['xid']}:{int(LSN(change['commit_lsn']))}"
