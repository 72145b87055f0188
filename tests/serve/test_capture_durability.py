"""``replwire capture`` never confirms a position past what is fsynced in its file, even where psycopg2 moves
the flush position by itself.

psycopg2 (``pqpath.c``, ``pq_read_replication_message``) takes a keepalive's WAL end as flushed when the
data message before it started at or below what the client confirmed -- and a walsender sends
``data_start`` 0 for a Relation, a Type, and a Begin or Stream Start followed by an Origin.  It reports that
position in the reply the keepalive asks for, from inside ``read_message()``, while what the capture
received before sits in its write batch.  ``replwire serve`` with ``keepalive_after_unpositioned`` puts a
keepalive exactly there; the served side kills the capture (SIGKILL) the moment a confirmation covers the
first transaction, and that transaction must then be in the file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from replwire.codec import (
    LSN,
    Begin,
    Commit,
    Insert,
    Relation,
    RelationColumn,
    Timestamp,
    TupleColumn,
)
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from replwire.codec.serve import Faults, Server, ServeSettings
from replwire.codec.serve.replay import Replay, Request
from replwire.codec.serve.server import Slots
from replwire.codec.serve.source import Source
from tests.support.capture import commit_ends

REPLWIRE = [sys.executable, "-m", "replwire.codec.cli"]
STAMP = Timestamp(800_000_000_000_000)


def relation(oid: int, name: str) -> Relation:
    return Relation(relation_id=oid, namespace="public", name=name, replica_identity="d",
                    columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])


def transaction(xid: int, oid: int, name: str, begin: int, commit: int) -> list:
    """A transaction inserting one row into table ``name``: Begin at ``begin``, Commit ending 16 past ``commit``."""
    return [(begin, Begin(final_lsn=LSN(commit), commit_time=STAMP, xid=xid)), (begin, relation(oid, name)),
            (begin + 8, Insert(relation_id=oid, new=[TupleColumn.text(str(xid))])),
            (commit + 16, Commit(flags=0, commit_lsn=LSN(commit), end_lsn=LSN(commit + 16), commit_time=STAMP))]


# The first transaction ends at 0/2010; the second starts at 0/2100 with a Relation the client does not have
# yet, which the walsender (and replwire serve) sends with data_start 0: the keepalive after it says 0/2100.
STREAM = transaction(700, 16384, "a", 0x1000, 0x2000) + transaction(701, 16385, "b", 0x2100, 0x3000)
FIRST_END = 0x2010


class WatchedSlots(Slots):
    """The server's slots, calling ``on_confirm`` with each confirmation before it takes it."""

    def __init__(self, on_confirm) -> None:
        super().__init__()
        self.on_confirm = on_confirm

    def confirm(self, slot: str, lsn: int) -> None:
        self.on_confirm(lsn)
        super().confirm(slot, lsn)


def test_served_frames_carry_the_walsenders_positions():
    """A Relation has no position (data_start 0), the changes and commits theirs: what the capture relies on."""
    source = Source.from_messages(STREAM, proto_version=1, server_version=160004,
                                  options={"publication_names": "p"})
    replay = Replay(source, Request.from_options({"proto_version": "1", "publication_names": "p"},
                                                 server_version=160004))
    frames = [(lsn, data[:1]) for lsn, data in replay.messages()]
    assert frames == [(0x1000, b"B"), (0, b"R"), (0x1008, b"I"), (0x2010, b"C"),
                      (0x2100, b"B"), (0, b"R"), (0x2108, b"I"), (0x3010, b"C")]


def test_capture_confirms_nothing_it_has_not_fsynced(tmp_path):
    out = tmp_path / "race.rwcap"
    source = Source.from_messages(STREAM, proto_version=1, server_version=160004,
                                  options={"publication_names": "p"})
    confirmed: list[int] = []
    killed = threading.Event()
    process: list[subprocess.Popen] = []

    def on_confirm(lsn: int) -> None:
        confirmed.append(lsn)
        if lsn >= FIRST_END and not killed.is_set():
            # the capture dies the moment the server hears the first transaction is safe
            os.kill(process[0].pid, signal.SIGKILL)
            process[0].wait()
            killed.set()

    server = Server(source, settings=ServeSettings(server_version=160004),
                    faults=Faults(keepalive_after_unpositioned=True))
    server.slots = WatchedSlots(on_confirm)
    with server:
        # a long sync interval: only what the capture makes durable on purpose is on disk
        process.append(subprocess.Popen(
            [*REPLWIRE, "capture", "--dsn", server.address.conninfo(), "--slot", "s", "--publication", "p",
             "--out", str(out), "--sync-interval", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
        if not killed.wait(60):
            process[0].kill()
            _, stderr = process[0].communicate()
            pytest.fail(f"no confirmation covered the first transaction: confirmed {confirmed}; capture: {stderr}")
    first = next(lsn for lsn in confirmed if lsn >= FIRST_END)
    durable = commit_ends(out)
    assert [end for end in durable if end <= first] == [FIRST_END], (
        f"the server was told {LSN(first)} is flushed, but the capture file holds only the commits ending at "
        f"{[str(LSN(e)) for e in durable]}")


@pytest.mark.server
def test_a_real_walsenders_positions_are_served_again(pg_captures, tmp_path):
    """Served as captured, every frame has the position the real walsender gave it: 0 for a Relation, a Type
    and a Begin (or Stream Start) before its Origin, the server's LSN for everything else."""
    assert pg_captures.walsender
    for live in pg_captures.walsender:
        frames = [(int.from_bytes(f[1:9], "big"), f[25:]) for f in live.frames if f[:1] == b"w"]
        path = tmp_path / f"{live.config}.rwcap"
        header = CaptureHeader(proto_version=live.proto_version, server_version=live.version_num,
                               options={k: v for k, v in live.options.items() if k != "proto_version"})
        with CaptureWriter(path, header) as writer:
            for lsn, data in frames:
                writer.append(lsn, 0, data)  # as replwire capture records them
        source = Source.from_captures([path])
        request = Request.from_options(live.options, server_version=live.version_num)
        served = list(Replay(source, request).messages())
        unpositioned = [chr(data[0]) for lsn, data in frames if lsn == 0]
        # the workload has Types, and a transaction and a streamed one with an origin
        assert set(unpositioned) == {"R", "Y", "B", "S"}, unpositioned
        assert {chr(data[0]) for lsn, data in served if lsn == 0} == set(unpositioned)
        assert all(lsn == 0 for lsn, data in served + frames if data[:1] in (b"R", b"Y"))
        assert [(lsn, data) for lsn, data in served if data[:1] not in b"RY"] == \
            [(lsn, data) for lsn, data in frames if data[:1] not in b"RY"]


@pytest.mark.server
def test_reassembled_frames_follow_the_walsenders_rule(pg_captures, tmp_path):
    """Reassembled for a protocol 1 client (no streaming, no two-phase), every Relation and Type, and every
    Begin an Origin follows, has no position; every other frame has one."""
    live = pg_captures.walsender[0]
    path = tmp_path / "live.rwcap"
    header = CaptureHeader(proto_version=live.proto_version, server_version=live.version_num,
                           options={k: v for k, v in live.options.items() if k != "proto_version"})
    with CaptureWriter(path, header) as writer:
        for frame in live.frames:
            if frame[:1] == b"w":
                writer.append(int.from_bytes(frame[1:9], "big"), 0, frame[25:])
    request = Request.from_options({"proto_version": "1", "publication_names": live.options["publication_names"],
                                    "binary": "true"}, server_version=live.version_num)
    served = list(Replay(Source.from_captures([path]), request).messages())
    tags = [data[:1] for _, data in served]
    assert b"O" in tags and b"R" in tags and b"S" not in tags
    for i, (lsn, data) in enumerate(served):
        before_origin = data[:1] == b"B" and i + 1 < len(served) and served[i + 1][1][:1] == b"O"
        assert (lsn == 0) == (data[:1] in (b"R", b"Y") or before_origin), (i, lsn, data[:1])
