"""``replwire serve`` as a user runs it: a process that says where it listens, serves a libpq client the capture
file's messages, refuses an address off loopback without a password, and injects the faults its flags ask for
(seen on the wire by a client of the protocol's own frames)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg2
import psycopg2.extras
import pytest

from replwire.codec import LSN, Begin, Commit, Insert, Relation, RelationColumn, Timestamp, TupleColumn, build
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from tests.support.walsender import WalSender, WalSenderError, keepalive_fields, xlogdata_fields

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


def stopped(process: subprocess.Popen) -> str:
    """What a serving ``process``, stopped now, wrote to stderr (reading it first would wait for ever)."""
    process.terminate()
    return process.communicate(timeout=10)[1]


def test_serve_plays_a_capture_file_to_a_libpq_client(tmp_path):
    path = tmp_path / "tiny.rwcap"
    expected = write_capture(path)
    process = subprocess.Popen([*REPLWIRE, "serve", str(path), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert "serving 5 messages from 1 file (1 table) on 127.0.0.1:" in first, first + stopped(process)
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


def test_serve_refuses_an_empty_password(tmp_path):
    """``--password ''`` is no password: refused, rather than taken as one that lets it listen off loopback."""
    path = tmp_path / "tiny.rwcap"
    write_capture(path)
    process = subprocess.Popen([*REPLWIRE, "serve", str(path), "--password", "", "--listen", "0.0.0.0:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()  # (empty when it exits; "serving ..." if it serves)
        assert first == "", f"it serves: {first}"
        assert process.wait(60) == 2
        assert "empty password" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(10)


@contextlib.contextmanager
def serving(args: list[str]) -> Iterator[str]:
    """A ``replwire serve`` process serving ``args`` on a free loopback port: its conninfo."""
    process = subprocess.Popen([*REPLWIRE, "serve", *args, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert first.startswith("serving"), first + process.stderr.read()
        yield process.stdout.readline().removeprefix("connect with: ").strip()
    finally:
        process.terminate()
        process.wait(10)


def serve_and_receive(args: list[str], count: int) -> list[bytes]:
    with serving(args) as conninfo:
        return receive(conninfo, count)


def frames_until_closed(conninfo: str, limit: int = 50) -> tuple[list[bytes], str]:
    """The CopyData payloads (XLogData and keepalives) a replication client receives, until the server closes
    the connection (or ``limit`` frames, or 3 s without one): the frames and why they ended."""
    port = int(re.search(r"port=(\d+)", conninfo).group(1))
    frames: list[bytes] = []
    with WalSender(("127.0.0.1", port), "replwire", "replwire", timeout=20) as client:
        client.start_replication("s", {"proto_version": "1", "publication_names": "p"})
        try:
            while len(frames) < limit:
                frame = client.read_frame(3)
                if frame is None:
                    return frames, "quiet"
                frames.append(frame)
        except WalSenderError as error:
            return frames, str(error)
    return frames, "limit"


@pytest.mark.parametrize("flag", [False, True], ids=["plain", "keepalive-after-unpositioned"])
def test_serve_keepalive_after_unpositioned_follows_each_frame_without_a_position(tmp_path, flag):
    """With the flag, every XLogData message sent without a position (data_start 0: the Relation here, as a
    walsender sends it) is followed at once by a keepalive asking for a reply; without it, by the next
    message."""
    expected = write_capture(tmp_path / "tiny.rwcap")
    args = [str(tmp_path / "tiny.rwcap"), *(["--keepalive-after-unpositioned"] if flag else [])]
    with serving(args) as conninfo:
        frames, _ = frames_until_closed(conninfo)
    data = [xlogdata_fields(f) for f in frames if f[:1] == b"w"]
    assert [d.data for d in data] == expected
    assert [d.data_start for d in data] == [0x1000, 0, 0x1008, 0x1010, 0x2010]
    after = [frames[i + 1][:1] + (b"r" if frames[i + 1][:1] == b"k" and keepalive_fields(frames[i + 1]).reply_requested
                                  else b"")
             for i, frame in enumerate(frames[:-1]) if frame[:1] == b"w" and xlogdata_fields(frame).data_start == 0]
    assert after == ([b"kr"] if flag else [b"w"])


def test_serve_disconnect_after_drops_the_connection_after_that_many_messages(tmp_path):
    expected = write_capture(tmp_path / "tiny.rwcap")
    with serving([str(tmp_path / "tiny.rwcap"), "--disconnect-after", "3"]) as conninfo:
        frames, ended = frames_until_closed(conninfo)
        # once: the next connection gets the whole stream
        again, _ = frames_until_closed(conninfo)
    assert [xlogdata_fields(f).data for f in frames if f[:1] == b"w"] == expected[:3]
    assert "closed" in ended
    assert [xlogdata_fields(f).data for f in again if f[:1] == b"w"] == expected


def test_serve_plays_the_copy_csv_of_the_sql_interface(tmp_path):
    expected = write_capture(tmp_path / "tiny.rwcap")
    # what COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO STDOUT CSV writes
    csv = tmp_path / "tiny.csv"
    csv.write_text("".join(f"0/{0x1000 + 8 * i:X},700,\\x{data.hex()}\n" for i, data in enumerate(expected)))
    assert serve_and_receive([str(csv), "--proto-version", "1"], len(expected)) == expected
    refused = subprocess.run([*REPLWIRE, "serve", str(csv)], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2  # a usage error, as in decode
    assert (f"{csv} is not a capture file: to read it as the COPY-CSV of pg_logical_slot_peek_binary_changes, "
            "give --proto-version") in refused.stderr


def test_serve_copy_csv_without_a_protocol_version_is_refused_as_decode_refuses_it(tmp_path):
    (tmp_path / "notes.md").write_text("# notes\n")
    serve, decode = (subprocess.run([*REPLWIRE, command, "notes.md"], capture_output=True, text=True, timeout=60,
                                    cwd=tmp_path) for command in ("serve", "decode"))
    assert serve.returncode == decode.returncode == 2
    assert serve.stderr.splitlines()[-1] == decode.stderr.splitlines()[-1] == (
        "Error: notes.md is not a capture file: to read it as the COPY-CSV of pg_logical_slot_peek_binary_changes, "
        "give --proto-version with the protocol version it was read with")


def test_source_of_copy_csv_without_a_protocol_version_names_the_option_and_the_argument(tmp_path):
    from replwire.codec.serve import Source, SourceError

    (tmp_path / "notes.md").write_text("# notes\n")
    with pytest.raises(SourceError, match=r"notes\.md is not a capture file: give the protocol version it was read "
                                          r"with \(--proto-version; proto_version= from Python\) to serve it as "
                                          r"COPY-CSV$"):
        Source.from_captures([tmp_path / "notes.md"])


def serve_usage_error(*args: str) -> str:
    result = subprocess.run([*REPLWIRE, "serve", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    return result.stderr.splitlines()[-1]


def test_serve_says_what_is_wrong_with_its_arguments(tmp_path):
    path = tmp_path / "tiny.rwcap"
    write_capture(path)
    assert serve_usage_error(str(path), "--generate", "5") == (
        "Error: give capture FILES to serve, or --generate N, not both")
    assert serve_usage_error() == "Error: give capture FILES to serve, or --generate N"
    assert serve_usage_error(str(path), "--listen", "127.0.0.1:99999") == (
        "Error: Invalid value for --listen: port 99999 is out of range (0-65535; 0: any free port)")
    assert serve_usage_error(str(path), "--listen", "127.0.0.1") == (
        "Error: Invalid value for --listen: expected HOST:PORT, e.g. 127.0.0.1:5433, not '127.0.0.1'")


def test_serve_generated_says_what_it_serves_in_one_parenthesis():
    process = subprocess.Popen([*REPLWIRE, "serve", "--generate", "5", "--seed", "7", "--listen", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = iter(process.stdout.readline, "")
        banner = next((line for line in lines if line.startswith("serving")), "")
        expected = r"serving \d+ messages from 5 generated transactions \(seed 7, \d tables?\) on 127\.0\.0\.1:\d+: "
        assert re.match(expected, banner), banner + stopped(process)
    finally:
        process.terminate()
        process.wait(10)
