"""``replwire capture`` is a service: under a workload, the server restarted (fast and immediate) and the
walsender terminated, one capture process reconnects by itself and its file holds every committed change
once -- judged against the server's own table -- and a capture that cannot go on (a full disk) says so in
one line, leaving a file that resumes.

These tests restart their own server (not the session's shared ones)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types

import pytest

from replwire.codec import LSN
from replwire.codec.io.capture_file import read_capture
from tests.io.test_capture_disk_full import disk  # noqa: F401, F811 -- the fixture
from tests.support.capture import commit_ends, pgoutput_records

pytestmark = pytest.mark.server

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")


def restart(srv, how: signal.Signals, until=None) -> None:
    """Stop the postmaster (SIGINT: fast, SIGQUIT: immediate) and start it again on the same data, once
    ``until()`` (if given) is true."""
    assert srv._proc is not None
    srv._proc.send_signal(how)
    srv._proc.wait(60)
    if until is not None:
        wait_for(until, "the capture to try again while the server is down")
    srv._launch()


def published(conn, table: str, *, slot: str | None = None, columns: str = "id int PRIMARY KEY, v text") -> None:
    """Create ``table`` (of ``columns``), the publication ``<table>_pub`` of it and, if ``slot`` is given, a
    pgoutput slot of that name."""
    conn.execute(f"CREATE TABLE {table} ({columns})")
    conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
    if slot is not None:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


class Lines(threading.Thread):
    """A process's stderr, read as it comes."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream, self.lines = stream, []

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def wait_for(condition, what: str, timeout: float = 90.0, process=None, stderr=None):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        said = f"; it said:\n{stderr.text}" if stderr is not None else ""
        if process is not None and process.poll() is not None:
            pytest.fail(f"the capture exited ({process.returncode}) while waiting for {what}{said}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}{said}")
        time.sleep(0.02)


def slot_state(srv, slot: str):
    """(active_pid, confirmed_flush_lsn) of ``slot``, or None when the server does not answer."""
    try:
        with srv.connect(connect_timeout=2) as conn:
            row = conn.execute("SELECT active_pid, confirmed_flush_lsn::text FROM pg_replication_slots "
                               "WHERE slot_name = %s", (slot,)).fetchone()
    except Exception:  # the server is down or starting up
        return None
    return None if row is None else (row[0], LSN(row[1]))


def wal_lsn(srv) -> LSN:
    with srv.connect() as conn:
        return LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


class Workload(threading.Thread):
    """Small transactions -- an insert of a new id, and every third an update of an earlier row -- and now and
    then a large one, on and on, riding out the server's restarts (a transaction whose outcome is unknown is
    run again: the insert skips a row that is there, the update is idempotent by its value)."""

    def __init__(self, srv, table: str, pace: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.srv, self.table, self.pace = srv, table, pace
        self.done = threading.Event()
        self.committed = 0

    def run(self) -> None:
        i = 0
        conn = None
        while not self.done.is_set():
            try:
                if conn is None:
                    conn = self.srv.connect(connect_timeout=2, application_name="workload")
                with conn.transaction():
                    if i % 500 == 250:
                        conn.execute(f"INSERT INTO {self.table} SELECT g, 'big' FROM generate_series(%s, %s) g "
                                     "ON CONFLICT DO NOTHING", (1_000_000 + i * 1000, 1_000_000 + i * 1000 + 999))
                    conn.execute(f"INSERT INTO {self.table} VALUES (%s, 'new') ON CONFLICT DO NOTHING", (i,))
                    if i % 3 == 0 and i:
                        conn.execute(f"UPDATE {self.table} SET v = %s WHERE id = %s", (f"updated by {i}", i // 2))
                i += 1
                self.committed = i
                if self.pace:
                    time.sleep(self.pace)  # (a pace the SQL functions keep up with: each call decodes again)
            except Exception:
                try:
                    if conn is not None:
                        conn.close()
                except Exception:
                    pass
                conn = None
                time.sleep(0.05)  # the server is restarting: try again
        if conn is not None:
            conn.close()


def table_rows(srv, table: str) -> dict[int, str]:
    with srv.connect() as conn:
        return dict(conn.execute(f"SELECT id, v FROM {table}").fetchall())


def applied(*paths) -> tuple[dict[int, str], list[int]]:
    """The table as the capture's decoded changes build it (of one file, or of segments in the order given),
    and every inserted id in order."""
    result = subprocess.run([REPLWIRE, "decode", *map(str, paths)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows: dict[int, str] = {}
    inserted = []
    for line in result.stdout.splitlines():
        change = json.loads(line)
        if change["op"] == "insert":
            inserted.append(change["new"]["id"])
            rows[change["new"]["id"]] = change["new"]["v"]
        elif change["op"] == "update":
            rows[change["new"]["id"]] = change["new"]["v"]
        elif change["op"] == "delete":
            del rows[change["key"]["id"]]
    return rows, inserted


def capture_backend(srv, slot: str, via: str) -> int | None:
    """The server process that reads ``slot`` for the capture: the walsender, or (``via`` sql) the backend of
    the connection that calls the SQL functions."""
    if via == "replication":
        state = slot_state(srv, slot)
        return state[0] if state is not None else None
    with srv.connect() as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> "
                            "pg_backend_pid() AND application_name <> 'workload' "
                            "AND application_name NOT LIKE 'replwire capture: %'").fetchall()  # (its helpers')
    return rows[0][0] if len(rows) == 1 else None


@pytest.mark.parametrize("via", ["replication", "sql"])
def test_capture_reconnects_through_restarts_and_a_terminated_walsender(own_server, tmp_path, via):
    srv, table, slot = own_server, f"recon_{via}", f"recon_{via}_slot"
    out = tmp_path / "recon.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
    capture = subprocess.Popen([REPLWIRE, "capture", "--dsn", srv.dsn, "--slot", slot, "--publication",
                                f"{table}_pub", "--no-create-slot", "--out", str(out), "--sync-interval", "0.05",
                                "--via", via, *(["--streaming", "on"] if via == "replication" else [])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = Lines(capture.stderr)
    stderr.start()
    workload = Workload(srv, table, pace=0.005 if via == "sql" else 0.0)
    workload.start()
    try:
        faults = [("terminate", None), ("fast restart", signal.SIGINT), ("immediate restart", signal.SIGQUIT),
                  ("terminate", None)]
        for name, how in faults:
            # the capture is streaming and has confirmed some of the workload
            mark = wal_lsn(srv)
            first = workload.committed
            wait_for(lambda: (s := slot_state(srv, slot)) is not None and s[1] > mark,
                     f"the capture to confirm past {mark} before the {name}", process=capture, stderr=stderr)
            backend = wait_for(lambda: capture_backend(srv, slot, via), "the capture's server process",
                               process=capture)
            if how is None:
                with srv.connect() as conn:
                    assert conn.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone()[0]
            elif how == signal.SIGQUIT:  # down until the capture has failed to connect and backed off
                tried = stderr.text.count("cannot connect to the server")
                restart(srv, how, until=lambda: stderr.text.count("cannot connect to the server") >= tried + 2)
            else:
                restart(srv, how)
            # the same process captures again, from another server process, and confirms what came after
            wait_for(lambda: workload.committed > first + 50, f"the workload to go on after the {name}")
            after = wal_lsn(srv)
            wait_for(lambda: (s := slot_state(srv, slot)) is not None and s[1] >= after
                     and capture_backend(srv, slot, via) not in (None, backend),
                     f"the capture to stream again after the {name}", process=capture, stderr=stderr)
    finally:
        workload.done.set()
        workload.join(60)
    end = wal_lsn(srv)
    wait_for(lambda: (s := slot_state(srv, slot)) is not None and s[1] >= end, "the capture to catch up",
             process=capture)
    capture.send_signal(signal.SIGTERM)  # what a service manager sends: a clean stop
    capture.wait(60)
    stderr.join(10)
    text = stderr.text
    assert capture.returncode == 0, text
    assert "Traceback" not in text
    assert text.count("reconnected: resuming from ") == len(faults), text
    # one line per attempt, the delay growing while the server was down
    assert "; reconnecting in 0.5 s (attempt 1)" in text and "; reconnecting in 1 s (attempt 2)" in text, text
    assert f", reconnected {len(faults)} times; flushed up to " in text, text
    # the summary counts what the file holds: what was cut off at a reconnection and received again is
    # counted once
    summary = re.search(r"^captured ([\d,]+) messages \(([\d,]+) bytes\), ([\d,]+) transactions into ", text,
                        re.MULTILINE)
    assert summary is not None, text
    assert tuple(int(group.replace(",", "")) for group in summary.groups()) == file_counts(out), text
    # the progress lines: elapsed time, messages and their rate
    assert re.search(r"^\d+:\d\d:\d\d [\d,]+ messages \([\d,]+/s\), ", text, re.MULTILINE), text
    rows, inserted = applied(out)
    expected = table_rows(srv, table)
    assert len(expected) > 1000 and workload.committed > 200
    assert len(inserted) == len(set(inserted)), "a change was captured twice"
    assert rows == expected


def file_counts(path) -> tuple[int, int, int]:
    """The messages, bytes and transactions (messages that complete a position) a capture file holds."""
    from replwire.codec import Decoder
    from replwire.codec.io.positions import message_completes

    messages = size = transactions = 0
    with read_capture(path) as reader:
        decoder = Decoder(proto_version=reader.header.proto_version, encoding=reader.header.client_encoding)
        for _, _, _, data in pgoutput_records(reader, raw=True):
            messages += 1
            size += len(data)
            if data and message_completes(decoder.feed(data)) is not None:  # (the Decoder knows the streams)
                transactions += 1
    return messages, size, transactions


def test_no_reconnect_exits_3_in_one_line(own_server, tmp_path):
    srv, table, slot = own_server, "norecon_t", "norecon_slot"
    out = tmp_path / "norecon.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
        conn.execute(f"INSERT INTO {table} VALUES (1, 'one')")
        mark = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
    capture = subprocess.Popen([REPLWIRE, "capture", "--dsn", srv.dsn, "--slot", slot, "--publication",
                                f"{table}_pub", "--no-create-slot", "--out", str(out), "--sync-interval", "0.05",
                                "--no-reconnect"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    walsender = wait_for(lambda: (s := slot_state(srv, slot)) is not None and s[0] is not None and s[1] >= mark
                         and s[0], "the capture to confirm the insert", process=capture)
    with srv.connect() as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (walsender,))
    _, stderr = capture.communicate(timeout=60)
    assert capture.returncode == 3, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in stderr and stderr.endswith("\n") and stderr.splitlines()[-1] == errors[0], stderr
    assert errors == ["error: lost the connection to the server: terminating connection due to administrator "
                      "command"], stderr
    with read_capture(out) as reader:
        assert "".join(chr(r.data[0]) for r in pgoutput_records(reader) if r.data[:1] != b"R") == "BIC"


def test_a_full_disk_ends_the_capture_with_a_file_that_resumes(own_server, tmp_path, disk):  # noqa: F811
    from replwire.codec.io.connection import CaptureSettings, CaptureWriteError
    from replwire.codec.io.live import LiveCapture

    srv, table, slot = own_server, "full_t", "full_slot"
    out = tmp_path / "full.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
        for i in range(1000):
            conn.execute(f"INSERT INTO {table} VALUES (%s, repeat('x', 200))", (i,))
    settings = CaptureSettings(slot=slot, publication=f"{table}_pub")
    LiveCapture(srv.dsn, out, settings, create_slot=False, sync_interval=0.05).run(idle_exit=0.5)
    with srv.connect() as conn:
        for i in range(1000, 3000):  # about 0.8 MB more: the disk fills in the middle
            conn.execute(f"INSERT INTO {table} VALUES (%s, repeat('x', 200))", (i,))
    disk.room = 300_000
    with pytest.raises(CaptureWriteError, match=rf"^cannot write {out}: No space left on device; the file was cut "
                       r"back to its last durable record \(offset \d+\)") as raised:
        LiveCapture(srv.dsn, out, settings, create_slot=False, sync_interval=0.05).run(idle_exit=5)
    assert raised.value.exit_status == 4 and disk.refused >= 1
    disk.room = None  # space comes back
    with read_capture(out) as reader:
        reading = reader.records(raw=True)
        assert sum(1 for _ in reading) > 0 and reading.tail is None  # nothing damaged, nothing torn
    ends = commit_ends(out)
    confirmed = slot_state(srv, slot)[1]
    assert 0 < len(ends) < 3000 and confirmed <= max(ends), "the slot confirmed what the file does not hold"
    LiveCapture(srv.dsn, out, settings, create_slot=False, sync_interval=0.05).run(idle_exit=1)
    rows, inserted = applied(out)
    assert len(inserted) == len(set(inserted)) == 3000
    assert rows == table_rows(srv, table)


def test_a_failed_first_capture_leaves_no_file(own_server, tmp_path):
    srv = own_server
    out = tmp_path / "first.rwcap"
    with srv.connect() as conn:
        conn.execute("CREATE ROLE first_norepl LOGIN")
        conn.execute("CREATE PUBLICATION first_pub")
        conn.execute("SELECT pg_create_logical_replication_slot('first_slot', 'pgoutput')")
    # the set-up passes (an ordinary connection), the replication connection is refused
    result = subprocess.run([REPLWIRE, "capture", "--dsn", f"{srv.dsn} user=first_norepl", "--slot", "first_slot",
                             "--publication", "first_pub", "--no-create-slot", "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: cannot open a replication connection: ") and "Traceback" not in \
        result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert not out.exists()


@pytest.mark.parametrize("how", ["sigterm", "sigint", "idle-exit"])
def test_a_stop_ends_a_capture_that_is_reconnecting(own_server, tmp_path, how):
    srv, table = own_server, "stopping_t"
    slot = f"stopping_{how.replace('-', '_')}"
    out = tmp_path / "stopping.rwcap"
    with srv.connect() as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id int PRIMARY KEY)")
        conn.execute(f"DROP PUBLICATION IF EXISTS {table}_pub")
        conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    command = [REPLWIRE, "capture", "--dsn", srv.dsn, "--slot", slot, "--publication", f"{table}_pub",
               "--no-create-slot", "--out", str(out), "--sync-interval", "0.05"]
    capture = subprocess.Popen(command + (["--idle-exit", "3"] if how == "idle-exit" else []),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = Lines(capture.stderr)
    stderr.start()
    wait_for(lambda: (s := slot_state(srv, slot)) is not None and s[0] is not None, "the capture to stream",
             process=capture)
    assert srv._proc is not None
    srv._proc.send_signal(signal.SIGINT)  # the server stops, and stays down
    srv._proc.wait(60)
    try:
        if how != "idle-exit":
            wait_for(lambda: "(attempt 2)" in stderr.text, "two attempts to reconnect", process=capture)
            capture.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
        capture.wait(60)
        stderr.join(10)
    finally:
        srv._launch()
    text = stderr.text
    assert capture.returncode == 0, text
    assert "Traceback" not in text and "error:" not in text, text
    assert "reconnecting in 0.5 s (attempt 1)" in text, text
    assert ("stopped while reconnecting" if how != "idle-exit" else "(--idle-exit), the last") in text, text
    assert "captured 0 messages" in text.splitlines()[-1], text


def test_the_summary_counts_the_snapshot_rows_and_progress_waits_for_a_first_message(own_server, tmp_path):
    srv, table, slot = own_server, "summary_t", "summary_slot"
    out = tmp_path / "summary.rwcap"
    with srv.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        conn.execute(f"INSERT INTO {table} SELECT generate_series(1, 1234)")
        conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
    # long enough idle for a progress line after the first (every 5 s when stderr is not a terminal)
    result = subprocess.run([REPLWIRE, "capture", "--snapshot", "--dsn", srv.dsn, "--slot", slot, "--publication",
                             f"{table}_pub", "--out", str(out), "--sync-interval", "0.05", "--idle-exit", "5.5"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    waiting = [line for line in lines if " waiting for changes; flushed " in line]
    assert len(waiting) >= 2 and all(line.split(" ")[0].count(":") == 2 for line in waiting), result.stderr
    assert "received 0/0" not in result.stderr
    assert lines[-1].startswith(f"captured 1,234 snapshot rows and 0 messages (0 bytes), 0 transactions into {out}")


def move(srv, port: int) -> None:
    """Restart the server on another port: a client of the old one cannot reach it (its socket file is named by
    the port), as if it were down, while the test can."""
    assert srv._proc is not None
    srv._proc.send_signal(signal.SIGINT)
    srv._proc.wait(60)
    with open(srv.data_dir / "postgresql.conf", "a", encoding="utf-8") as conf:
        conf.write(f"\nport = {port}\n")
    srv.port = port
    srv._launch()


@pytest.mark.parametrize("what", ["slot dropped", "login refused"])
def test_what_cannot_be_survived_ends_a_reconnecting_capture_in_one_line(own_server, tmp_path, what):
    srv = own_server
    name = what.replace(" ", "_")
    table, slot, out = f"fatal_{name}", f"fatal_{name}_slot", tmp_path / "fatal.rwcap"
    with srv.connect() as conn:
        published(conn, table, columns="id int PRIMARY KEY")
        conn.execute(f"CREATE ROLE {name}_user LOGIN REPLICATION SUPERUSER")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute(f"INSERT INTO {table} VALUES (1)")
        mark = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
    home = srv.port
    capture = subprocess.Popen([REPLWIRE, "capture", "--dsn", f"{srv.dsn} user={name}_user", "--slot", slot,
                                "--publication", f"{table}_pub", "--out", str(out), "--sync-interval", "0.05"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = Lines(capture.stderr)
    stderr.start()
    wait_for(lambda: (s := slot_state(srv, slot)) is not None and s[0] is not None and s[1] >= mark,
             "the capture to confirm the insert", process=capture, stderr=stderr)
    try:
        move(srv, home + 7)  # the capture loses its connection, and cannot reach the server meanwhile
        wait_for(lambda: "(attempt 2)" in stderr.text, "attempts to reconnect", process=capture, stderr=stderr)
        with srv.connect() as conn:
            if what == "slot dropped":
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            else:
                conn.execute(f"ALTER ROLE {name}_user NOLOGIN")
    finally:
        move(srv, home)
    capture.wait(90)
    stderr.join(10)
    text = stderr.text
    assert capture.returncode == 1, text
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in text and len(errors) == 1 and text.splitlines()[-1] == errors[0], text
    if what == "slot dropped":
        assert errors[0] == (f"error: replication slot '{slot}', which {out} was captured from, no longer exists: "
                             "the changes since the file's end are lost with it; start a new capture file (another "
                             "--out)"), text
        with srv.connect() as conn:  # not created again
            assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                                (slot,)).fetchone()[0] == 0
    else:
        assert errors[0].startswith("error: cannot connect to the server: ") and "not permitted to log in" in \
            errors[0], text
    with read_capture(out) as reader:  # the file keeps what was captured
        assert "".join(chr(r.data[0]) for r in pgoutput_records(reader) if r.data[:1] != b"R") == "BIC"


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of its own (root only), whose size the test sets with ``resize(bytes)``."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=10m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")

    def resize(size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True, capture_output=True)

    try:
        yield where, resize
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_a_real_full_disk_exits_4_in_one_line_and_the_same_command_resumes(own_server, small_disk):
    srv, table, slot = own_server, "tmpfs_t", "tmpfs_slot"
    where, resize = small_disk
    out = where / "c.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
        conn.execute(f"INSERT INTO {table} SELECT g, repeat('x', 200) FROM generate_series(1, 300) g")
    command = [REPLWIRE, "capture", "--dsn", srv.dsn, "--slot", slot, "--publication", f"{table}_pub",
               "--no-create-slot", "--out", str(out), "--sync-interval", "0.05"]
    first = subprocess.run(command + ["--idle-exit", "0.5"], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    with srv.connect() as conn:  # about 0.8 MB more, one row a transaction
        for i in range(301, 3301):
            conn.execute(f"INSERT INTO {table} VALUES (%s, repeat('y', 200))", (i,))
    resize(out.stat().st_size + 256 * 1024)  # the disk fills in the middle of them
    full = subprocess.run(command + ["--idle-exit", "5"], capture_output=True, text=True, timeout=120)
    assert full.returncode == 4, full.stderr
    assert "Traceback" not in full.stderr
    last = full.stderr.splitlines()[-1]
    assert last.startswith(f"error: cannot write {out}: No space left on device; the file was cut back to its "
                           "last durable record (offset "), full.stderr
    assert [line for line in full.stderr.splitlines() if line.startswith("error:")] == [last]
    durable = int(last.split("(offset ")[1].split(")")[0])
    assert out.stat().st_size == durable
    with read_capture(out) as reader:
        reading = reader.records(raw=True)
        assert sum(1 for _ in reading) and reading.tail is None
    ends = commit_ends(out)
    assert 1 <= len(ends) < 3001 and slot_state(srv, slot)[1] <= max(ends)  # (the first 300 rows: one transaction)
    resize(10 * 1024 * 1024)  # room again: the same command goes on
    again = subprocess.run(command + ["--idle-exit", "1"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "resumed after" in again.stderr, again.stderr
    rows, inserted = applied(out)
    assert len(inserted) == len(set(inserted)) == 3300
    assert rows == table_rows(srv, table)


def test_a_file_damaged_inside_exits_5_in_one_line(own_server, tmp_path):
    srv, table, slot = own_server, "damaged_t", "damaged_slot"
    out = tmp_path / "damaged.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot, columns="id int PRIMARY KEY")
        for i in range(3):
            conn.execute(f"INSERT INTO {table} VALUES (%s)", (i,))
    command = [REPLWIRE, "capture", "--dsn", srv.dsn, "--slot", slot, "--publication", f"{table}_pub",
               "--no-create-slot", "--out", str(out), "--sync-interval", "0.05", "--idle-exit", "0.5"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    with read_capture(out) as reader:
        insert = next(r for r in pgoutput_records(reader) if r.data[:1] == b"I")
    data = bytearray(out.read_bytes())
    data[insert.offset + 30] ^= 0xFF  # the first transaction's insert; the slot confirmed what follows it
    out.write_bytes(bytes(data))
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 5, again.stderr
    assert again.stderr.startswith(f"error: {out}: the record at offset {insert.offset} is damaged")
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
    assert out.read_bytes() == bytes(data)  # left as it is


def test_an_interrupt_in_the_middle_of_a_burst_acknowledges_nothing_after_the_file(own_server, tmp_path,
                                                                                    monkeypatch):
    """Ctrl-C (a KeyboardInterrupt, from Python) while a burst's records are being appended: nothing of the burst
    may be acknowledged unless it is in the file, and the file is whole."""
    from replwire.codec.io import capture_file
    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture

    srv, table, slot = own_server, "interrupt_t", "interrupt_slot"
    out = tmp_path / "interrupt.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
        for i in range(2000):
            conn.execute(f"INSERT INTO {table} VALUES (%s, 'v')", (i,))
    real = capture_file._Pending.add
    bursts = []

    def interrupted(pending, records):
        records = list(records)
        if len(records) > 10:
            bursts.append(len(records))
            if len(bursts) == 2:  # the second burst: half of it, a piece of the next record, and Ctrl-C
                real(pending, records[:len(records) // 2])
                pending.gathered += b"\x00" * 7
                raise KeyboardInterrupt
        real(pending, records)

    monkeypatch.setattr(capture_file._Pending, "add", interrupted)
    settings = CaptureSettings(slot=slot, publication=f"{table}_pub")
    LiveCapture(srv.dsn, out, settings, create_slot=False, sync_interval=0.05).run(idle_exit=5)
    assert len(bursts) == 2
    monkeypatch.setattr(capture_file._Pending, "add", real)
    with read_capture(out) as reader:
        reading = reader.records(raw=True)
        assert sum(1 for _ in reading) and reading.tail is None
    confirmed = slot_state(srv, slot)[1]
    assert confirmed <= max(commit_ends(out)), "the slot confirmed a transaction the file does not hold"
    LiveCapture(srv.dsn, out, settings, create_slot=False, sync_interval=0.05).run(idle_exit=1)
    rows, inserted = applied(out)
    assert len(inserted) == len(set(inserted)) == 2000
    assert rows == table_rows(srv, table)


class _Through:
    """A stand-in for a connection or a cursor (``target``): everything it does not define itself, the
    ``with`` block included, goes to the target."""

    def __init__(self, target) -> None:
        self._target = target

    def __getattr__(self, name):
        return getattr(self._target, name)

    def __enter__(self):
        self._target.__enter__()
        return self

    def __exit__(self, *exc):
        return self._target.__exit__(*exc)


class _Injecting(_Through):
    """A connection that hands out ``bogus`` once, right after the first Commit -- from the replication
    cursor's ``read_message`` or from the SQL functions' rows -- the seam where the server's messages arrive,
    so replwire's own refusal of one is tested without a server that sends it."""

    sent = False

    def __init__(self, conn, bogus: bytes) -> None:
        super().__init__(conn)
        self._bogus = bogus

    def cursor(self, *args, **kwargs):
        cur, bogus, injecting = self._target.cursor(*args, **kwargs), self._bogus, type(self)

        class Cursor(_Through):
            pending = None

            def fileno(self):
                return cur.fileno()

            def read_message(self):
                after = self.pending
                if after is not None:  # the fake, with a position after the Commit's
                    self.pending = None
                    return types.SimpleNamespace(payload=bogus, data_start=after.data_start + 64,
                                                 wal_end=after.wal_end)
                message = cur.read_message()
                if message is not None and message.payload[:1] == b"C" and not injecting.sent:
                    injecting.sent = True
                    self.pending = message
                return message

            def __iter__(self):
                for lsn, xid, data in cur:
                    yield lsn, xid, data
                    if bytes(data[:1]) == b"C" and not injecting.sent:
                        injecting.sent = True
                        yield str(LSN(LSN(lsn) + 64)), xid, bogus

        return Cursor(cur)


@pytest.mark.parametrize("via", ["replication", "sql"])
def test_a_message_replwire_cannot_decode_ends_the_capture_in_one_line_and_the_file_resumes(own_server, tmp_path,
                                                                                             monkeypatch, via):
    from click.testing import CliRunner

    from replwire.codec.cli.main import main
    from replwire.codec.io import live, sql_capture

    srv, table, slot = own_server, f"bogus_{via}", f"bogus_{via}_slot"
    out = tmp_path / "bogus.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
        conn.execute(f"INSERT INTO {table} VALUES (1, 'one')")
        first = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        conn.execute(f"INSERT INTO {table} VALUES (2, 'two')")
    real = live.connect

    class Injecting(_Injecting):
        sent = False

    def connect(dsn, *, replication=False):
        return Injecting(real(dsn, replication=replication), b"Zbogus")

    monkeypatch.setattr(live, "connect", connect)  # (each loop opens its connection with connect)
    monkeypatch.setattr(sql_capture, "connect", connect)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    args = ["capture", "--dsn", srv.dsn, "--slot", slot, "--publication", f"{table}_pub", "--no-create-slot",
            "--out", str(out), "--sync-interval", "0.05", "--idle-exit", "1", "--via", via]
    try:
        result = CliRunner().invoke(main, args)
        assert Injecting.sent
        text = result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), text
        assert result.exit_code == 1, text
        errors = [line for line in text.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and text.splitlines()[-1] == errors[0] and "reconnect" not in text, text
        assert errors[0].startswith("error: the server sent a message replwire cannot decode, at "), text
        assert "unknown message tag 'Z'" in errors[0], text
        with read_capture(out) as reader:  # nothing of it, and everything before it
            records = [r.data for r in pgoutput_records(reader)]
        assert b"Zbogus" not in records
        assert "".join(chr(r[0]) for r in records if r[:1] != b"R") == "BIC"
        assert slot_state(srv, slot)[1] >= first  # what came before it was acknowledged
        # the same command resumes the file (without the fake message) and captures what came after
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0 and result.exception is None, result.output
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    rows, inserted = applied(out)
    assert inserted == [1, 2] and rows == table_rows(srv, table)


@pytest.mark.parametrize("via", ["replication", "sql"])
def test_an_os_error_of_the_capture_s_own_is_not_a_lost_connection(own_server, tmp_path, via):
    """The progress callback's OSError (stderr a closed pipe) is neither a lost connection to reconnect from
    nor (through the SQL functions) a failed write to pass over: it ends the capture as itself, and the file
    resumes."""
    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture

    srv, table, slot = own_server, f"own_{via}", f"own_{via}_slot"
    out = tmp_path / "own.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
        conn.execute(f"INSERT INTO {table} VALUES (1, 'one')")
    calls = []

    def progress(_):
        calls.append(True)
        raise BrokenPipeError(32, "Broken pipe")

    settings = CaptureSettings(slot=slot, publication=f"{table}_pub")
    capture = LiveCapture(srv.dsn, out, settings, create_slot=False, sync_interval=0.05, via=via, progress=progress,
                          reconnect_delay=0.05)
    with pytest.raises(BrokenPipeError):
        capture.run(idle_exit=2)
    assert len(calls) == 1 and capture.reconnects == 0
    LiveCapture(srv.dsn, out, settings, create_slot=False, sync_interval=0.05, via=via).run(idle_exit=0.5)
    rows, inserted = applied(out)
    assert inserted == [1] and rows == table_rows(srv, table)


def test_the_sql_functions_count_a_transaction_cut_by_a_lost_connection_once(own_server, tmp_path, monkeypatch):
    """A call that ends inside a transaction (the connection lost while its rows came): the records after the
    last completed position are dropped, and the call after the reconnection sends them again; they are
    counted once."""
    import psycopg2

    from replwire.codec.io import sql_capture
    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture

    srv, table, slot = own_server, "sqlcut_t", "sqlcut_slot"
    out = tmp_path / "sqlcut.rwcap"
    with srv.connect() as conn:
        published(conn, table, slot=slot)
        for i in range(3):
            conn.execute(f"INSERT INTO {table} SELECT g, 'v' FROM generate_series(%s::int, %s::int) g",
                         (i * 3, i * 3 + 2))
    real, cut, calls = sql_capture.connect, [], []

    class Cutting(_Through):
        """The connection: lost after the second call's first two rows (the second transaction's Begin and
        first Insert: a call of one row reads one transaction), once."""

        def cursor(self, *args, **kwargs):
            cur, conn = self._target.cursor(*args, **kwargs), self._target

            class Cursor(_Through):
                def __iter__(self):
                    calls.append(True)
                    for number, row in enumerate(cur):
                        yield row
                        if len(calls) == 2 and number == 1 and not cut:  # the second call's Begin and Insert
                            cut.append(True)
                            conn.close()
                            raise psycopg2.OperationalError("server closed the connection unexpectedly")

            return Cursor(cur)

    monkeypatch.setattr(sql_capture, "connect",
                        lambda dsn, replication=False: Cutting(real(dsn, replication=replication)))
    settings = CaptureSettings(slot=slot, publication=f"{table}_pub")
    capture = LiveCapture(srv.dsn, out, settings, create_slot=False, sync_interval=0.05, via="sql",
                          batch_size=1, reconnect_delay=0.05)
    progress = capture.run(idle_exit=1)
    assert cut and capture.reconnects == 1
    assert (progress.messages, progress.bytes, progress.transactions) == file_counts(out)
    assert progress.transactions == 3
