"""``replwire serve`` as a user runs it: a process that says where it listens, serves a libpq client the capture
file's messages, and refuses an address off loopback without a password."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import psycopg2
import psycopg2.extras

from replwire.codec import LSN, Begin, Commit, Insert, Relation, RelationColumn, Timestamp, TupleColumn, build
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter

REPLWIRE = [sys.executable, "-m", "replwire.codec.cli"]


def write_capture(path) -> list[bytes]:
    relation = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])
    stamp = Timestamp(800_000_000_000_000)
    messages = [Begin(final_lsn=LSN(0x2000), commit_time=stamp, xid=700), relation,
                Insert(relation_id=16384, new=[TupleColumn.text("1")]),
                Insert(relation_id=16384, new=[TupleColumn.text("2")]),
                Commit(flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2010), commit_time=stamp)]
    data = [build(m, proto_version=1) for m in messages]
    with CaptureWriter(path, CaptureHeader(proto_version=1, server_version=160004,
                                           options={"publication_names": "p"})) as writer:
        for lsn, payload in zip((0x1000, 0x1000, 0x1008, 0x1010, 0x2010), data):
            writer.append(lsn, 0, payload)
    return data


def receive(conninfo: str, count: int) -> list[bytes]:
    """The payloads of up to ``count`` messages a libpq replication client receives (20 s at most)."""
    conn = psycopg2.connect(conninfo, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        cur.start_replication(slot_name="s", decode=False, options={"proto_version": "1", "publication_names": "p"})
        received: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(received) < count and time.monotonic() < deadline:
            message = cur.read_message()
            if message is None:
                time.sleep(0.05)
                continue
            received.append(bytes(message.payload))
        return received
    finally:
        conn.close()


def test_serve_plays_a_capture_file_to_a_libpq_client(tmp_path):
    path = tmp_path / "tiny.rwcap"
    expected = write_capture(path)
    process = subprocess.Popen([*REPLWIRE, "serve", str(path), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert "serving 5 messages from 1 file (1 tables)" in first, first + process.stderr.read()
        assert "server_version 16.4, protocol versions 1 to 4" in first
        conninfo = process.stdout.readline().removeprefix("connect with: ").strip()
        assert re.fullmatch(r"host=127\.0\.0\.1 port=\d+ dbname=replwire user=replwire replication=database", conninfo)
        assert receive(conninfo, len(expected)) == expected
    finally:
        process.terminate()
        process.wait(10)


def test_serve_off_loopback_needs_a_password(tmp_path):
    path = tmp_path / "tiny.rwcap"
    write_capture(path)
    result = subprocess.run([*REPLWIRE, "serve", str(path), "--listen", "0.0.0.0:0"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "0.0.0.0 is not a loopback address" in result.stderr
    assert "needs a password" in result.stderr


def serve_and_receive(args: list[str], count: int) -> list[bytes]:
    process = subprocess.Popen([*REPLWIRE, "serve", *args, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert first.startswith("serving"), first + process.stderr.read()
        conninfo = process.stdout.readline().removeprefix("connect with: ").strip()
        return receive(conninfo, count)
    finally:
        process.terminate()
        process.wait(10)


def test_serve_plays_the_copy_csv_of_the_sql_interface(tmp_path):
    expected = write_capture(tmp_path / "tiny.rwcap")
    # what COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO STDOUT CSV writes
    csv = tmp_path / "tiny.csv"
    csv.write_text("".join(f"0/{0x1000 + 8 * i:X},700,\\x{data.hex()}\n" for i, data in enumerate(expected)))
    assert serve_and_receive([str(csv), "--proto-version", "1"], len(expected)) == expected
    refused = subprocess.run([*REPLWIRE, "serve", str(csv)], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert "is not a capture file: give the protocol version" in refused.stderr
