"""``replwire serve`` against real consumers: PostgreSQL 18 and 15 subscribers, psycopg2's replication
connection and ``pg_recvlogical``, fed a workload captured from PostgreSQL 15.

The publisher's tables are the independent truth: a subscriber applying the served stream must end with
exactly them (``events`` has no key, so a transaction applied twice shows as extra rows; the rolled-back
savepoint's and the aborted transaction's rows must not appear; unchanged TOAST must keep its value).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from replwire.codec import Assembler, Decoder, Relation, Transaction
from replwire.codec.io.capture_file import read_capture
from replwire.codec.serve import Faults, Replay, Request, Server, ServeSettings, Source
from tests.support import serve_workload as workload
from tests.support.capture import pgoutput_records

pytestmark = pytest.mark.server

SLOT = "serve_slot"
TWO_PHASE_SLOT = "serve_slot_2pc"


@pytest.fixture(scope="module")
def captured(pg15, tmp_path_factory):
    """The workload run on PG 15 and captured (protocol 3, streaming on); the publisher's tables after it."""
    dsn = workload.publisher(pg15, "serve_pub", SLOT, TWO_PHASE_SLOT, two_phase=(TWO_PHASE_SLOT,))
    try:
        workload.run(dsn, workload.WORKLOAD)
        expected = workload.table_rows(dsn)
        out = tmp_path_factory.mktemp("serve")
        path = workload.capture(dsn, SLOT, out / "pg15.rwcap", proto=3)
        workload.capture(dsn, TWO_PHASE_SLOT, out / "pg15-two-phase.rwcap", proto=3, two_phase=True)
    finally:
        workload.drop_slot(dsn, SLOT)
        workload.drop_slot(dsn, TWO_PHASE_SLOT)
    return path, expected


def _subscribed_tables(dsn: str) -> list[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return sorted(r[0] for r in conn.execute("SELECT srrelid::regclass::text FROM pg_subscription_rel"))


def capture_messages(path: Path) -> list[bytes]:
    with read_capture(path) as reader:
        return [record.data for record in pgoutput_records(reader)]


def committed(messages: list[bytes], proto_version: int) -> list[tuple]:
    """What the messages commit, as (xid-free) change tuples in order: the Assembler's reading."""
    assembler = Assembler(proto_version=proto_version)
    out = []
    for data in messages:
        for item in assembler.feed(data):
            if isinstance(item, Transaction):
                out += [(c.op, c.table, c.new, c.old, c.key) for c in item.changes]
    return out


def the_tags(captured_path: Path) -> set[str]:
    return {chr(data[0]) for data in capture_messages(captured_path)}


def test_the_capture_has_the_hard_parts(captured):
    path, _ = captured
    tags = the_tags(path)
    assert {"S", "E", "A", "c", "T", "U"} <= tags, tags  # streamed, a (sub)transaction aborted, truncate


@pytest.mark.parametrize(("major", "server_version", "proto", "streaming"),
                         [(18, 180000, 4, "on"), (15, 150000, 3, "on"), (18, 180000, 4, "parallel"),
                          (14, 140000, 2, "on"), (16, 160000, 4, "parallel"), (17, 170000, 4, "on")],
                         ids=["pg18-proto4", "pg15-proto3", "pg18-proto4-parallel", "pg14-proto2",
                              "pg16-proto4-parallel", "pg17-proto4"])
def test_a_subscriber_ends_equal_to_the_publisher(request, captured, major, server_version, proto, streaming):
    path, expected = captured
    subscriber = request.getfixturevalue(f"pg{major}")
    settings = ServeSettings(server_version=server_version)
    with Server(Source.from_captures([path]), settings=settings) as server:
        name = f"sub_equal_{major}_{streaming}"
        dsn = workload.subscribe(subscriber, name, server.address.conninfo(dbname="serve_pub"), SLOT,
                                 streaming=streaming)
        try:
            rows = workload.wait_equal(dsn, expected)
            # the publication's tables, asked again, are answered from the stream's Relation messages
            workload.run(dsn, [f"ALTER SUBSCRIPTION sub_{name} REFRESH PUBLICATION WITH (copy_data = false)"])
            subscribed = _subscribed_tables(dsn)
        finally:
            workload.unsubscribe(dsn, name)
    assert subscribed == sorted(workload.TABLES)
    assert rows == expected
    assert server.starts, "the subscriber never started streaming"
    (_, _, asked), *_ = server.starts
    assert (asked.proto_version, asked.streaming) == (proto, streaming)


# one subscriber major: the two-phase messages are the same in protocol 3 and 4, and
# test_a_subscriber_ends_equal_to_the_publisher covers both majors' subscribers
@pytest.mark.parametrize("major", [18])
def test_a_two_phase_subscriber_gets_prepared_transactions(request, captured, major):
    path, expected = captured
    two_phase = path.with_name("pg15-two-phase.rwcap")
    assert {b"b", b"P", b"K", b"r"} <= {m[:1] for m in capture_messages(two_phase)}
    subscriber = request.getfixturevalue(f"pg{major}")
    with Server(Source.from_captures([two_phase]), settings=ServeSettings(major * 10000)) as server:
        name = f"sub_two_phase_{major}"
        dsn = workload.subscribe(subscriber, name, server.address.conninfo(dbname="serve_pub"), TWO_PHASE_SLOT,
                                 two_phase=True)
        try:
            rows = workload.wait_equal(dsn, expected)
        finally:
            workload.unsubscribe(dsn, name)
    assert rows == expected
    assert server.starts[-1][2].two_phase


@contextlib.contextmanager
def quick_restarts(server):
    """The subscriber's apply worker started again 200 ms after its connection dropped, not after the default
    ``wal_retrieve_retry_interval`` of 5 s, which was most of the resume test's time on each major (its
    launcher reads the setting again on reload); the server's own setting again afterwards."""
    with server.connect(autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET wal_retrieve_retry_interval = '200ms'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        with server.connect(autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET wal_retrieve_retry_interval")
            conn.execute("SELECT pg_reload_conf()")


@pytest.mark.parametrize("major", [18, 15])
def test_a_subscriber_resumes_after_a_disconnect(request, captured, major):
    path, expected = captured
    subscriber = request.getfixturevalue(f"pg{major}")
    frames = len(capture_messages(path))
    faults = Faults(disconnect_after=frames // 2)
    settings = ServeSettings(server_version=major * 10000)
    with quick_restarts(subscriber), Server(Source.from_captures([path]), settings=settings, faults=faults) as server:
        name = f"sub_resume_{major}"
        dsn = workload.subscribe(subscriber, name, server.address.conninfo(dbname="serve_pub"), SLOT)
        try:
            rows = workload.wait_equal(dsn, expected, timeout=120)
        finally:
            workload.unsubscribe(dsn, name)
    assert len(server.starts) >= 2, "the subscriber did not reconnect"
    assert server.starts[1][1] > 0, "the second START_REPLICATION did not resume from a position"
    assert rows == expected


def psycopg2_consume(address, options, count, timeout=60.0):
    import select
    import time

    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(address.conninfo(dbname="serve_pub"),
                            connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        cur.start_replication(slot_name=SLOT, decode=False, options=options)
        received: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(received) < count and time.monotonic() < deadline:
            message = cur.read_message()
            if message is None:
                select.select([cur], [], [], 0.5)
                continue
            received.append(bytes(message.payload))
        return received
    finally:
        conn.close()


def served(source: Source, options: dict[str, str]) -> int:
    """How many messages the server sends a client asking with ``options`` (what the consumer waits for: a
    count it never reaches makes it wait out its whole timeout)."""
    return sum(1 for _ in Replay(source, Request.from_options(options, server_version=150000)).messages())


def relations(messages: list[bytes]) -> dict[int, Relation]:
    """The last Relation per relation OID that the messages hold (streamed Xid removed)."""
    decoder = Decoder(proto_version=3)
    for data in messages:
        decoder.feed(data)
    return {relid: dataclasses.replace(r, xid=None) for relid, r in decoder.relations.items()}


def without_schema(messages: list[bytes]) -> list[bytes]:
    """The messages but Relation and Type (sent when a client lacks them, so where may differ)."""
    return [m for m in messages if m[:1] not in (b"R", b"Y")]


def test_psycopg2_receives_the_capture_as_captured(captured):
    path, _ = captured
    messages = capture_messages(path)
    expected = without_schema(messages)
    source = Source.from_captures([path])
    options = {"proto_version": "3", "publication_names": "pub", "streaming": "on"}
    with Server(source) as server:
        received = psycopg2_consume(server.address, options, served(source, options))
    assert without_schema(received) == expected
    assert relations(received) == relations(messages)
    assert committed(received, 3) == committed(messages, 3)


def test_psycopg2_without_streaming_gets_transactions_reassembled(captured):
    path, _ = captured
    messages = capture_messages(path)
    want = committed(messages, 3)
    source = Source.from_captures([path])
    # a protocol 1 client: no streaming, so every streamed transaction comes whole, at its commit
    options = {"proto_version": "1", "publication_names": "pub"}
    with Server(source) as server:
        received = psycopg2_consume(server.address, options, served(source, options))
    tags = {chr(m[0]) for m in received}
    assert not tags & {"S", "E", "A", "c"}, tags
    assert committed(received, 1) == want


def test_a_capture_is_served_without_reading_it_into_memory(captured):
    import tracemalloc

    path, _ = captured
    request = Request.from_options({"proto_version": "3", "streaming": "on", "publication_names": "pub"},
                                   server_version=150000)
    # the file eight times over, as eight files of a resumed capture: read in turn, served once
    source = Source.from_captures([path] * 8)
    source.scan()
    tracemalloc.start()
    try:
        count = sum(1 for _ in Replay(source, request).messages())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 9000 < count < 10_000
    total = 8 * path.stat().st_size
    assert peak < total / 3, f"{peak} bytes at the peak while serving {total} bytes"


def test_pg_recvlogical_receives_what_psycopg2_does(pg15, captured, tmp_path):
    path, _ = captured
    messages = capture_messages(path)
    source = Source.from_captures([path])
    with Server(source, settings=ServeSettings(150000, keepalive_interval=1)) as server:
        options = {"proto_version": "3", "publication_names": "pub", "streaming": "on"}
        received = psycopg2_consume(server.address, options, served(source, options))
        end = server.source.scan().last_lsn
        endpos = f"--endpos={end >> 32:X}/{end & 0xFFFFFFFF:X}"
        out = tmp_path / "recvlogical.out"
        command = [str(pg15.bindir / "pg_recvlogical"), "-d", server.address.conninfo(dbname="serve_pub"),
                   "--slot", SLOT, "--start", "-f", str(out), "--no-loop", endpos,
                   "-o", "proto_version=3", "-o", "publication_names=pub", "-o", "streaming=on"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60,
                                env={**os.environ, "PGCONNECT_TIMEOUT": "10"})
    assert result.returncode == 0, result.stderr
    # pg_recvlogical writes each message followed by a newline
    assert out.read_bytes() == b"".join(m + b"\n" for m in received)
    assert without_schema(received) == without_schema(messages)


def split_as_resumed(path: Path, out: Path) -> list[Path]:
    """The capture as a resumed capture would hold it: a first file cut off inside a streamed transaction,
    and a second that starts over before it (so it repeats the transactions the first file holds whole,
    and the cut one from its first block)."""
    from replwire.codec.io.capture_file import CaptureWriter

    with read_capture(path) as reader:
        header = reader.header
        records = [(r.lsn, r.xid, r.data) for r in pgoutput_records(reader)]
    decoder = Decoder(proto_version=header.proto_version)
    streams: set[int] = set()
    resumable, inside = [], []
    for i, (_, _, data) in enumerate(records):
        message = decoder.feed(data)
        tag = data[:1]
        if tag == b"S" and message.first_segment:
            streams.add(message.xid)
        elif tag == b"c" or (tag == b"A" and message.subxid == message.xid):
            streams.discard(message.xid)
        if tag in (b"C", b"c") and decoder.state == "idle" and not streams:
            resumable.append(i)
        if streams and decoder.state == "stream":
            inside.append(i)
    # the first file ends inside a streamed transaction after the third that completes with nothing open;
    # the second starts over from the beginning (the slot's confirmed position had not moved)
    cut = next(i for i in inside if i > resumable[2])
    files = [out / "part1.rwcap", out / "part2.rwcap"]
    for name, part in zip(files, (records[:cut], records)):
        with CaptureWriter(name, header) as writer:
            for lsn, xid, data in part:
                writer.append(lsn, xid, data)
    return files


@pytest.mark.parametrize("options", [{"proto_version": "3", "streaming": "on"}, {"proto_version": "1"}],
                         ids=["as-captured", "reassembled"])
def test_a_resumed_capture_in_two_files_is_served_once(captured, tmp_path, options):
    path, _ = captured
    files = split_as_resumed(path, tmp_path)
    request = Request.from_options({**options, "publication_names": "pub"}, server_version=150000)
    served = [data for _, data in Replay(Source.from_captures(files), request).messages()]
    assert committed(served, request.proto_version) == committed(capture_messages(path), 3)
    # the two files hold more than the capture: what they repeat is not served again
    assert sum(len(capture_messages(f)) for f in files) > len(capture_messages(path))


def test_a_subscriber_applies_a_resumed_capture_once(pg18, captured, tmp_path):
    path, expected = captured
    files = split_as_resumed(path, tmp_path)
    with Server(Source.from_captures(files), settings=ServeSettings(180000)) as server:
        dsn = workload.subscribe(pg18, "sub_two_files", server.address.conninfo(dbname="serve_pub"), SLOT)
        try:
            rows = workload.wait_equal(dsn, expected)
        finally:
            workload.unsubscribe(dsn, "sub_two_files")
    assert rows == expected
