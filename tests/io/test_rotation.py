"""``replwire capture --rotate-size / --rotate-time``: a capture written into a series of segments, each closed
between two transactions; killed (SIGKILL) and restarted, and restarted on a slot that stands before its
newest segment, it loses and doubles nothing -- judged against the server's own table and by the positions
each segment completes -- and ``replwire decode`` reads the segments given in any order as one stream,
refusing one left out in the middle; with --snapshot, the snapshot is the first segment's."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest
from click.testing import CliRunner

from replwire.codec import LSN
from replwire.codec.cli.main import main
from replwire.codec.io.capture_file import read_capture
from replwire.codec.io.positions import PositionTracker
from replwire.codec.io.rotation import parse_duration, segment_number, segment_path, segments
from replwire.codec.stream import snapshot_records
from tests.io.test_capture_reconnect import (
    REPLWIRE,
    Lines,
    Workload,
    applied,
    published,
    slot_state,
    table_rows,
    wait_for,
    wal_lsn,
)

pytestmark = pytest.mark.server


def capture(srv, slot: str, table: str, out, *options: str, wait: bool = False) -> subprocess.Popen:
    """``replwire capture`` of ``table``'s publication into the series ``out`` (run to its end with ``wait``)."""
    create = () if "--snapshot" in options else ("--no-create-slot",)
    process = subprocess.Popen([REPLWIRE, "capture", "--dsn", srv.dsn, "--slot", slot, "--publication",
                                f"{table}_pub", "--out", str(out), "--sync-interval", "0.05", *create, *options],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if wait:
        _, process.said = process.communicate(timeout=60)  # type: ignore[attr-defined]
        assert process.returncode == 0, process.said  # type: ignore[attr-defined]
    return process


def check_series(out, counts: list[int] | None = None) -> list[str]:
    """The segments of ``out``, checked: numbered 1, 2, ... as their headers say, each starting where the one
    before it ends (its first record the SlotConfirmed of its start), each holding whole transactions only
    (the last may end in the middle of one: what the server sends again), and no position completed twice in
    the series.  Returns their paths; ``counts`` gets how many positions each completes."""
    found = segments(out)
    assert [number for number, _ in found] == list(range(1, len(found) + 1)), found
    completed: list[int] = []
    reach = -1
    for number, path in found:
        with read_capture(path) as reader:
            header = reader.header
            assert header.segment == number
            tracker = PositionTracker(header.proto_version, header.client_encoding)
            records = list(reader.records(raw=True))
        if header.segment_start is None:  # the first segment, with a snapshot
            assert number == 1 and records[0][3][0] == snapshot_records.BEGIN
        else:
            first = snapshot_records.parse_record(records[0][3])
            assert records[0][3][0] == snapshot_records.CONFIRMED and first.at_start, f"segment {number}'s start"
            assert first.lsn == header.segment_start, f"segment {number} starts at {header.segment_start}, its " \
                                                      f"first record says {LSN(first.lsn)}"
        if number > 1:
            assert header.segment_start == reach, f"segment {number} starts at {header.segment_start}, not {LSN(reach)}"
        before = len(completed)
        for _, _, _, data in records:
            if data[0] == snapshot_records.CONFIRMED:
                reach = max(reach, snapshot_records.parse_record(data).lsn)
                continue
            if data[0] in snapshot_records.KINDS:
                continue
            position = tracker.feed(data)  # (a segment that starts inside a transaction fails here)
            if position is not None:
                completed.append(position)
                reach = max(reach, position)
        if counts is not None:
            counts.append(len(completed) - before)
        if number < len(found):
            assert tracker.idle, f"segment {number} ends inside a transaction"
    assert len(completed) == len(set(completed)), "a transaction is in two segments, or twice in one"
    assert completed == sorted(completed)
    return [path for _, path in found]


@pytest.mark.parametrize("via", ["replication", "sql"])
def test_rotation_under_sigkill_loses_and_doubles_nothing(pg18, tmp_path, via):
    srv, table, slot = pg18, f"rot_kill_{via}", f"rot_kill_{via}_slot"
    out = tmp_path / "app.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
    command = ("--rotate-size", "64kB", "--via", via)
    workload = Workload(srv, table, pace=0.002 if via == "sql" else 0.0)
    workload.start()
    try:
        first = capture(srv, slot, table, out, *command)
        # killed in the middle of a segment, with records after what the slot confirmed
        wait_for(lambda: len(found := segments(out)) >= 2 and os.path.getsize(found[-1][1]) > 24 * 1024,
                 "two segments, the last one a third full", process=first)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed_at = len(segments(out))
        again = capture(srv, slot, table, out, *command)
        stderr = Lines(again.stderr)
        stderr.start()
        wait_for(lambda: len(segments(out)) >= killed_at + 2, "two more segments", process=again, stderr=stderr)
    finally:
        workload.done.set()
        workload.join(60)
    end = wal_lsn(srv)
    wait_for(lambda: (s := slot_state(srv, slot)) is not None and s[1] >= end, "the capture to catch up",
             process=again, stderr=stderr)
    again.send_signal(signal.SIGTERM)
    again.wait(30)
    stderr.join(10)
    assert again.returncode == 0, stderr.text
    assert "rotated: segment" in stderr.text and ", resumed after " in stderr.text, stderr.text
    paths = check_series(out)
    assert not os.path.exists(out)  # (the name of the series, never a file of it)
    if via == "replication":  # (the SQL functions' calls return what they read: a backlog after the restart)
        assert all(os.path.getsize(path) < 64 * 1024 + 80 * 1024 for path in paths[:-1])  # (a big one over at most)
    for path in (paths[1], paths[-2]):  # each segment decodes alone (the server sent its Relations again)
        result = subprocess.run([REPLWIRE, "decode", path], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stdout, result.stderr
    random.Random(7).shuffle(paths)
    rows, inserted = applied(*paths)
    assert len(inserted) == len(set(inserted)), "a change was captured twice"
    assert rows == table_rows(srv, table) and len(rows) > 1000

    # a segment left out in the middle is refused, naming it
    middle = segment_path(out, 2)
    result = subprocess.run([REPLWIRE, "decode", *(p for p in paths if p != middle)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and not result.stdout
    assert "segment 2 is missing between" in result.stderr and "(segment 1)" in result.stderr, result.stderr


def test_a_restart_on_a_slot_before_the_newest_segment_goes_back_to_the_one_that_holds_it(pg18, tmp_path):
    """The acknowledgement of a segment's start lost with the process: the slot stands in an older segment.
    The newer ones hold only what the server sends again; the capture goes back, and nothing is doubled."""
    srv, table, slot = pg18, "rot_back", "rot_back_slot"
    out = tmp_path / "back.rwcap"
    command = ("--rotate-size", "4kB", "--idle-exit", "0.3")

    def load(start: int) -> None:
        with srv.connect() as conn:
            for i in range(start, start + 60):
                conn.execute(f"INSERT INTO {table} VALUES (%s, 'v')", (i,))
                conn.commit()

    with srv.connect() as conn:
        published(conn, table, slot=slot)
    load(0)
    capture(srv, slot, table, out, *command, wait=True)
    with srv.connect() as conn:  # the slot as it stands now, kept aside
        conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s)", (slot, f"{slot}_kept"))
    held = len(segments(out))
    load(1000)
    capture(srv, slot, table, out, *command, wait=True)
    assert len(segments(out)) > held + 1
    with srv.connect() as conn:  # the slot goes back to where it was
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s)", (f"{slot}_kept", slot))
        conn.execute("SELECT pg_drop_replication_slot(%s)", (f"{slot}_kept",))
    load(2000)
    newest = segments(out)[-1][1]
    said = capture(srv, slot, table, out, *command, wait=True).said  # type: ignore[attr-defined]
    paths = check_series(out)
    rows, inserted = applied(*reversed(paths))
    assert len(inserted) == len(set(inserted)) == 180
    assert rows == table_rows(srv, table)
    assert (f"before {segment_path(out, held + 1)}, " in said and f"{newest} started: removed" in said
            and f"; resuming {segment_path(out, held)}\n" in said), said


def test_a_snapshot_goes_into_the_first_segment(pg18, tmp_path):
    srv, table, slot = pg18, "rot_snap", "rot_snap_slot"
    out = tmp_path / "snap.rwcap"
    command = ("--snapshot", "--rotate-size", "4kB", "--idle-exit", "0.3")
    with srv.connect() as conn:
        published(conn, table)
        conn.execute(f"INSERT INTO {table} SELECT g, 'before' FROM generate_series(1, 300) g")
    said = capture(srv, slot, table, out, *command, wait=True).said  # type: ignore[attr-defined]
    assert "snapshot at " in said and [number for number, _ in segments(out)] == [1], said
    with srv.connect() as conn:
        for i in range(1000, 1060):
            conn.execute(f"INSERT INTO {table} VALUES (%s, 'after')", (i,))
            conn.commit()
    for _ in range(2):  # (the same command again: past segment 1, no snapshot is looked for)
        said = capture(srv, slot, table, out, *command, wait=True).said  # type: ignore[attr-defined]
    assert "snapshot at " not in said and len(segments(out)) > 2, said
    paths = check_series(out)
    result = subprocess.run([REPLWIRE, "decode", *reversed(paths)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = {change["new"]["id"]: change["new"]["v"] for change in map(json.loads, result.stdout.splitlines())}
    assert rows == table_rows(srv, table) and len(rows) == 360


def test_rotation_by_time_starts_a_segment_only_with_something_in_it(pg18, tmp_path):
    srv, table, slot = pg18, "rot_time", "rot_time_slot"
    out = tmp_path / "time"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
    process = capture(srv, slot, table, out, "--rotate-time", "0.2s", "--idle-exit", "1.5")
    with srv.connect() as conn:
        for i in range(4):
            conn.execute(f"INSERT INTO {table} VALUES (%s, 'v')", (i,))
            conn.commit()
            time.sleep(0.35)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    counts: list[int] = []
    paths = check_series(out, counts)
    # a segment per transaction or so (fewer when the machine is slow), none empty but the one opened after
    # the last: not one more while idle
    assert 2 <= len(paths) <= 5 and all(counts[:-1]), (counts, err)
    assert [segment_number(out, p) for p in paths] == list(range(1, len(paths) + 1))
    assert os.path.basename(paths[0]) == "time.000001"
    rows, inserted = applied(*paths[::-1])
    assert sorted(inserted) == [0, 1, 2, 3] and rows == table_rows(srv, table)


def test_rotation_options_are_parsed_and_refused_where_they_cannot_work(tmp_path):
    assert [parse_duration(t) for t in ("30s", "15m", "1h", "1d", "2", "0.5s")] == [30, 900, 3600, 86400, 2, 0.5]
    for bad in ("", "1w", "-1s", "0s", "1 hour"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    base = ["capture", "--dsn", "host=/nonexistent", "--slot", "s", "--publication", "p", "--out",
            str(tmp_path / "x.rwcap")]
    for extra, said in ((["--rotate-time", "1w"], "not a duration"), (["--rotate-size", "lots"], "not a size"),
                        (["--rotate-size", "1MB", "--backfill", "all"], "cannot be used with --backfill")):
        result = CliRunner().invoke(main, base + extra)
        assert result.exit_code == 2 and said in result.output, result.output
    (tmp_path / "x.rwcap").write_bytes(b"RWCAP")  # a capture without rotation under the series' name
    result = subprocess.run([REPLWIRE, *base, "--rotate-size", "1MB"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "x.000001.rwcap, x.000002.rwcap, ..." in result.stderr, result.stderr
