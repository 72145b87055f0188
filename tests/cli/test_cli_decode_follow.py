"""``replwire decode --follow``: the committed changes of a capture file a running ``replwire capture`` is
writing, printed as they are committed, once; a record being written at the end waited for, not reported;
damage inside still an error; SIGTERM a clean end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from replwire.codec import LSN, Begin, Commit, Insert, Relation, build
from replwire.codec.io.capture_file import (
    CaptureFileError,
    CaptureHeader,
    CaptureWriter,
    encode_record,
    read_capture,
)
from replwire.codec.io.follow import Follower, whole_end
from replwire.codec.io.segments import open_inputs
from replwire.codec.messages import RelationColumn, TupleColumn
from replwire.codec.scalars import Timestamp
from tests.cli.test_cli_capture import REPLWIRE

NO_TRACEBACK = "Traceback"


def lines_of(path):
    with open(path, "rb") as handle:
        data = handle.read()
    return [json.loads(line) for line in data.split(b"\n")[:-1]]  # (a line still being written: not yet)


def wait_for(what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def stop_decode(decode, summary, quiet):
    """After ``quiet`` seconds in which nothing more comes, SIGTERM ``decode --follow``: it ends cleanly, its
    summary saying ``summary``."""
    time.sleep(quiet)
    decode.send_signal(signal.SIGTERM)
    assert decode.wait(10) == 0
    stderr = decode.stderr.read().decode()
    assert NO_TRACEBACK not in stderr and summary in stderr, stderr


def end(*processes):
    """SIGTERM each process still running (``None``: never started), and wait for it."""
    for process in processes:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(30)


@pytest.mark.server
def test_follow_prints_what_a_running_capture_commits_once(pg18, tmp_path):
    out, printed = tmp_path / "live.rwcap", tmp_path / "printed.jsonl"
    expected = []  # (op, id) in commit order: the writer commits them one after another
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE follow_t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION follow_pub FOR TABLE follow_t")
        conn.execute("SELECT pg_create_logical_replication_slot('follow_slot', 'pgoutput')")
        capture = subprocess.Popen([REPLWIRE, "capture", "--dsn", pg18.dsn, "--slot", "follow_slot",
                                    "--publication", "follow_pub", "--no-create-slot", "--streaming", "on",
                                    "--out", out, "--sync-interval", "0.05"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        decode = None
        try:
            wait_for(out.exists)
            for i in range(20):
                if i == 3:  # what is in the file by then is read first (the compiled path), then followed
                    decode = subprocess.Popen([REPLWIRE, "decode", "--follow", out], stdout=open(printed, "wb"),
                                              stderr=subprocess.PIPE)
                with conn.transaction():
                    conn.execute("INSERT INTO follow_t VALUES (%s, 'small')", (i,))
                    if i % 4 == 0:
                        conn.execute("UPDATE follow_t SET v = 'u' WHERE id = %s", (i,))
                expected += [("insert", i)] + ([("update", i)] if i % 4 == 0 else [])
                if i == 5:  # rolled back: never printed
                    with pytest.raises(ZeroDivisionError), conn.transaction():
                        conn.execute("INSERT INTO follow_t VALUES (-1, 'gone')")
                        raise ZeroDivisionError
                if i == 10:  # larger than logical_decoding_work_mem: streamed in blocks, with a savepoint undone
                    with conn.transaction():
                        conn.execute("INSERT INTO follow_t SELECT g, repeat('s', 100) "
                                     "FROM generate_series(1000, 3999) g")
                        with pytest.raises(ZeroDivisionError), conn.transaction():
                            conn.execute("INSERT INTO follow_t SELECT g, 'sub' FROM generate_series(5000, 5999) g")
                            raise ZeroDivisionError
                        conn.execute("INSERT INTO follow_t VALUES (4000, 'after')")
                    expected += [("insert", g) for g in range(1000, 4001)]
                if i == 12:  # printed before the capture stops: the follow is live
                    count = len(expected)
                    wait_for(lambda: len(lines_of(printed)) >= count)
            assert decode is not None
            wait_for(lambda: len(lines_of(printed)) >= len(expected))
            stop_decode(decode, "21 transactions", 0.3)
        finally:
            end(decode, capture)
    got = [(c["op"], (c.get("new") or c.get("key"))["id"]) for c in lines_of(printed)]
    assert got == expected  # every committed change, once, in commit order
    with read_capture(out) as reader:
        tags = {bytes(r[3][:1]) for r in reader.records(raw=True)}
    assert b"S" in tags and b"c" in tags  # the large one came streamed


@pytest.mark.server
def test_follow_goes_on_into_the_segments_a_rotating_capture_writes(pg15, tmp_path):
    """``decode --follow`` of the one segment a capture with rotation has written so far prints every change
    the capture writes into the segments that follow it, once each, in commit order."""
    from replwire.codec.io.rotation import segments

    out, printed = tmp_path / "app.rwcap", tmp_path / "printed.jsonl"
    with pg15.connect() as conn:
        conn.execute("CREATE TABLE rot_follow_t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION rot_follow_pub FOR TABLE rot_follow_t")
        conn.execute("SELECT pg_create_logical_replication_slot('rot_follow_slot', 'pgoutput')")
        capture = subprocess.Popen([REPLWIRE, "capture", "--dsn", pg15.dsn, "--slot", "rot_follow_slot",
                                    "--publication", "rot_follow_pub", "--no-create-slot", "--out", out,
                                    "--rotate-size", "8kB", "--sync-interval", "0.05"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        decode = None
        try:
            wait_for(lambda: len(segments(out)) == 1)
            (first,) = segments(out)
            decode = subprocess.Popen([REPLWIRE, "decode", "--follow", first[1]], stdout=open(printed, "wb"),
                                      stderr=subprocess.PIPE)
            for i in range(40):  # about 2 kB a transaction: a segment every few of them
                conn.execute("INSERT INTO rot_follow_t VALUES (%s, repeat('r', 2000))", (i,))
                if i % 10 == 9:
                    wait_for(lambda: len(lines_of(printed)) >= i + 1)  # printed while the capture goes on
            wait_for(lambda: len(lines_of(printed)) >= 40)
            stop_decode(decode, "40 transactions", 0.5)
        finally:
            end(decode, capture)
    assert len(segments(out)) >= 5
    assert [(c["op"], c["new"]["id"]) for c in lines_of(printed)] == [("insert", i) for i in range(40)]


def test_a_followed_segment_names_the_next_one_and_a_removed_one_is_an_error(tmp_path):
    from replwire.codec.io.follow import next_segment

    assert next_segment(tmp_path / "app.000009.rwcap", 9) == str(tmp_path / "app.000010.rwcap")
    assert next_segment(tmp_path / "app.000002", 2) == str(tmp_path / "app.000003")
    assert next_segment(tmp_path / "app.000002.rwcap", 3) is None  # (renamed: its name says another number)
    assert next_segment(tmp_path / "app.rwcap", None) is None
    path = tmp_path / "app.000002.rwcap"
    header = CaptureHeader(proto_version=1, segment=2, segment_start=LSN(0x100))
    with CaptureWriter(path, header) as writer:
        writer.append(0x100, 0, b"M")  # (any record)
    reading = Follower(poll=0.05).records(path)
    assert next(reading)[1] == 0x100
    os.remove(path)
    with pytest.raises(CaptureFileError, match="the segment was removed while it was followed"):
        next(reading)


def small_capture(path, transactions):
    """A capture file of ``transactions`` one-insert transactions; the records' bytes, each whole."""
    stamp = Timestamp(800_000_000_000_000)
    relation = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])
    records = []
    lsn = 0x1000
    for i in range(transactions):
        end = lsn + 0x100
        messages = [Begin(final_lsn=LSN(end), commit_time=stamp, xid=700 + i), relation,
                    Insert(relation_id=16384, new=[TupleColumn.text(str(i))]),
                    Commit(flags=0, commit_lsn=LSN(end), end_lsn=LSN(end + 8), commit_time=stamp)]
        for message in messages:
            records.append(encode_record(end if message.tag == "C" else lsn, 0, build(message, proto_version=1)))
        lsn = end + 8
    with CaptureWriter(path, CaptureHeader(proto_version=1, server_version=160004,
                                           options={"publication_names": "p"})):
        pass
    return records


def test_a_torn_tail_is_waited_for_and_damage_inside_is_an_error(tmp_path):
    path, printed = tmp_path / "torn.rwcap", tmp_path / "printed.jsonl"
    records = small_capture(path, 6)
    with open(path, "ab") as handle:
        handle.write(b"".join(records[:10]))  # two transactions, and the Begin and Relation of a third
        handle.write(records[10][:5])  # half a record (its Insert): being written
    header_end = os.path.getsize(path) - len(b"".join(records[:10])) - 5
    assert whole_end(path) == os.path.getsize(path) - 5
    assert open_inputs([path], growing=True)[0].size == os.path.getsize(path) - 5
    decode = subprocess.Popen([REPLWIRE, "decode", "--follow", path], stdout=open(printed, "wb"),
                              stderr=subprocess.PIPE)
    try:
        wait_for(lambda: len(lines_of(printed)) == 2)
        time.sleep(0.5)
        assert decode.poll() is None  # waiting, not failed
        with open(path, "ab") as handle:
            handle.write(records[10][5:] + b"".join(records[11:16]))  # the rest of it, and one more transaction
        wait_for(lambda: len(lines_of(printed)) == 4)
        assert [c["new"]["id"] for c in lines_of(printed)] == [0, 1, 2, 3]
        decode.send_signal(signal.SIGINT)
        assert decode.wait(10) == 0
        stderr = decode.stderr.read().decode()
        assert NO_TRACEBACK not in stderr and "warning" not in stderr and "4 transactions" in stderr, stderr
    finally:
        if decode.poll() is None:
            decode.kill()
    # damage inside (a changed byte with intact records after it) is an error, while following too
    data = bytearray(open(path, "rb").read())
    damaged = header_end + sum(map(len, records[:13])) + 20
    data[damaged] ^= 0xFF
    open(path, "wb").write(bytes(data))
    result = subprocess.run([REPLWIRE, "decode", "--follow", path], capture_output=True, text=True,
                            timeout=10)  # (no --idle-exit: the damage ends it)
    assert result.returncode == 1 and "damaged inside" in result.stderr, result.stderr
    assert [json.loads(line)["new"]["id"] for line in result.stdout.splitlines()] == [0, 1, 2]
    # --idle-exit at a torn tail nobody finishes: a warning, as without --follow
    open(path, "wb").write(bytes(data[:damaged]))
    result = subprocess.run([REPLWIRE, "decode", "--follow", "--idle-exit", "0.5", path], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 0 and "warning" in result.stderr, result.stderr


def test_the_follower_in_process(tmp_path):
    """The primitive the Spark jobs use: records as they come, from an offset; stop() ends it."""
    path = tmp_path / "grow.rwcap"
    records = small_capture(path, 3)
    start = os.path.getsize(path)
    with open(path, "ab") as handle:
        handle.write(b"".join(records[:4]) + records[4][:3])
    seen, stopping = [], []
    follower = Follower(poll=0.01, stop=lambda: bool(stopping), waiting=lambda: seen.append("wait"))
    reading = follower.records(path)
    got = []
    for record in reading:
        got.append(record)
        if len(got) == 4:
            assert reading.end == start + len(b"".join(records[:4]))
            with open(path, "ab") as handle:
                handle.write(records[4][3:] + b"".join(records[5:8]))
        if len(got) == 8:
            stopping.append(1)
    assert reading.tail is None and "wait" in seen and len(got) == 8
    assert [r[0] for r in got][0] == start
    assert whole_end(path, start) == whole_end(path) == reading.end


def streamed_capture(path):
    """A capture file (protocol 2) and its records: plain transactions 0 and 1 (records 0-6), a streamed
    transaction's first block, not stopped (7-8), then plain transaction 2 (9-11) and the stream again from
    its first block, committed (12-15)."""
    from replwire.codec.messages import StreamCommit, StreamStart, StreamStop

    stamp = Timestamp(800_000_000_000_000)
    relation = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])

    def plain(i, *more):
        end = LSN(0x1000 * (i + 1))
        return [(end, Begin(final_lsn=end, commit_time=stamp, xid=700 + i)), *more,
                (end, Insert(relation_id=16384, new=[TupleColumn.text(str(i))])),
                (end, Commit(flags=0, commit_lsn=end, end_lsn=LSN(end + 8), commit_time=stamp))]

    block = [(LSN(0x500), StreamStart(xid=900, first_segment=1)),
             (LSN(0x500), Insert(xid=900, relation_id=16384, new=[TupleColumn.text("100")]))]
    messages = [*plain(0, (LSN(0x1000), relation)), *plain(1), *block, *plain(2), *block,
                (LSN(0x500), StreamStop()),
                (LSN(0x9000), StreamCommit(xid=900, flags=0, commit_lsn=LSN(0x9000), end_lsn=LSN(0x9008),
                                           commit_time=stamp))]
    with CaptureWriter(path, CaptureHeader(proto_version=2, server_version=160004,
                                           options={"publication_names": "p", "streaming": "on"})):
        pass
    return [encode_record(lsn, 0, build(message, proto_version=2,
                                        in_stream=message.tag in "IR" and getattr(message, "xid", None) is not None))
            for lsn, message in messages]


def test_a_file_cut_back_by_its_writer_is_read_on_once(tmp_path):
    """``capture --via sql`` drops a transaction a batch ended inside of (to the end of the last whole one)
    and asks for it again; here a stream block's start: a follower that read it and sees the file cut
    drops it (the decoder is out of the block again), and prints each transaction once."""
    path, printed = tmp_path / "cut.rwcap", tmp_path / "printed.jsonl"
    records = streamed_capture(path)
    boundary = os.path.getsize(path) + len(b"".join(records[:7]))
    with open(path, "ab") as handle:
        handle.write(b"".join(records[:9]))  # two transactions, and the start of a stream block
    decode = subprocess.Popen([REPLWIRE, "decode", "--follow", path], stdout=open(printed, "wb"),
                              stderr=subprocess.PIPE)
    try:
        wait_for(lambda: len(lines_of(printed)) == 2)
        time.sleep(0.4)  # (it has read the block's start)
        os.truncate(path, boundary)  # cut back to the end of the second transaction
        time.sleep(0.6)  # (seen)
        with open(path, "ab") as handle:
            handle.write(b"".join(records[9:]))
        wait_for(lambda: len(lines_of(printed)) == 4)
        time.sleep(0.3)
        decode.send_signal(signal.SIGTERM)
        assert decode.wait(10) == 0, decode.stderr.read().decode()
        stderr = decode.stderr.read().decode()
        assert NO_TRACEBACK not in stderr and "4 transactions" in stderr, stderr
    finally:
        if decode.poll() is None:
            decode.kill()
    assert [c["new"]["id"] for c in lines_of(printed)] == [0, 1, 2, 100]


def test_a_stop_while_the_output_is_blocked_loses_nothing(tmp_path):
    """SIGTERM while decode waits on a full pipe: every line written still arrives, whole, then exit 0."""
    path = tmp_path / "blocked.rwcap"
    records = small_capture(path, 3000)
    with open(path, "ab") as handle:
        handle.write(b"".join(records))
    decode = subprocess.Popen([REPLWIRE, "decode", "--follow", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)  # (its output, ~600 KB, fills the pipe nobody reads yet)
        decode.send_signal(signal.SIGTERM)
        out, err = decode.communicate(timeout=20)
    finally:
        if decode.poll() is None:
            decode.kill()
    assert decode.returncode == 0 and "3000 transactions" in err.decode(), err.decode()
    assert [json.loads(line)["new"]["id"] for line in out.splitlines()] == list(range(3000))
