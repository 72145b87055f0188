"""``replwire capture --backfill`` against real PostgreSQL 15 and 18: tables copied in chunks while the capture
streams and a writer changes them, folded with the stream to exactly ``SELECT *``; the refusals; and a chunk
whose window holds a change its snapshot cannot see, applied (and, with the window's apply taken out, the
result wrong: the test can fail)."""

from __future__ import annotations

import random
import subprocess
import threading
import time

import pytest

from replwire.codec.io.backfill_state import HeldRun, read_state
from tests.support.snapshot import REPLWIRE, database, drop_slots, folded, rows_of, run, selected, slot_of, wait_for

pytestmark = pytest.mark.server

SCHEMA = [
    "CREATE TABLE big (id int PRIMARY KEY, v text, n int)",
    "INSERT INTO big SELECT g, 'v' || g, g FROM generate_series(1, %(big)s) g",
    "CREATE TABLE toasty (id int PRIMARY KEY, body text, note text)",
    "ALTER TABLE toasty ALTER COLUMN body SET STORAGE EXTERNAL",  # TOASTed uncompressed: 'u' in updates
    "INSERT INTO toasty SELECT g, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 200) ELSE 'short' END, 'n' "
    "FROM generate_series(1, 3000) g",
    "CREATE TABLE multi (a text, b int, v text, PRIMARY KEY (a, b))",
    "INSERT INTO multi SELECT 'k' || (g % 50), g, 'm' FROM generate_series(1, 4000) g",
    "CREATE TABLE keyless (a int, b text)",
    "CREATE TABLE whole (id int PRIMARY KEY, v text)",
    "ALTER TABLE whole REPLICA IDENTITY FULL",
    "CREATE TABLE unpublished (id int PRIMARY KEY)",
    "CREATE PUBLICATION pub FOR TABLE big, toasty, multi, keyless, whole",
]
EXPECTED = {"public.big": "SELECT * FROM big", "public.toasty": "SELECT * FROM toasty",
            "public.multi": "SELECT * FROM multi"}


def make_schema(dsn: str, big: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement, {"big": big} if "%(big)s" in statement else None)


def command(dsn: str, out, *more: str) -> list[str]:
    return [REPLWIRE, "capture", "--dsn", dsn, "--slot", slot_of(dsn), "--publication", "pub", "--out", str(out),
            "--sync-interval", "0.05", *more]


class Writer(threading.Thread):
    """Changes the tables until stopped: updates (the TOASTed body left alone), key moves, deletes, inserts,
    a transaction held open across chunks, rolled-back ones, and a TRUNCATE of ``multi`` and its refill."""

    def __init__(self, dsn: str, big: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.big, self.stop, self.rounds = dsn, big, threading.Event(), 0

    def run(self) -> None:
        import psycopg

        rng = random.Random(11)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                self.rounds += 1
                i = rng.randrange(1, self.big)
                conn.execute("UPDATE big SET v = v || '+', n = n + 1 WHERE id = %s", (i,))
                conn.execute("UPDATE big SET id = id + 10000000 WHERE id = %s", (rng.randrange(1, self.big),))
                conn.execute("DELETE FROM big WHERE id = %s", (rng.randrange(1, self.big),))
                conn.execute("INSERT INTO big VALUES (%s, 'new', 0) ON CONFLICT DO NOTHING",
                             (rng.randrange(1, self.big),))
                conn.execute("UPDATE toasty SET note = note || '+' WHERE id = %s", (rng.randrange(1, 3000),))
                conn.execute("DELETE FROM toasty WHERE id = %s", (rng.randrange(1, 3000),))
                conn.execute("UPDATE multi SET v = v || '+' WHERE b = %s", (rng.randrange(1, 4000),))
                with conn.transaction():
                    conn.execute("UPDATE big SET v = 'rolled back' WHERE id = %s", (i,))
                    raise psycopg.Rollback()
                if self.rounds % 15 == 0:  # one transaction held open across several chunks
                    with conn.transaction():
                        conn.execute("UPDATE big SET v = 'long' WHERE id BETWEEN %s AND %s", (i, i + 50))
                        conn.execute("INSERT INTO toasty VALUES (%s, repeat('z', 9000), 'long') "
                                     "ON CONFLICT DO NOTHING", (5000 + self.rounds,))
                        time.sleep(0.3)
                if self.rounds == 25:
                    conn.execute("TRUNCATE multi")
                    conn.execute("INSERT INTO multi SELECT 'r' || g, g, 'refill' FROM generate_series(1, 200) g")
                time.sleep(0.002)


# each major once, each value format once
@pytest.mark.parametrize("major, binary", [(18, False), (15, True)], ids=["18-text", "15-binary"])
def test_backfill_with_concurrent_writes_folds_to_select_star(major, binary, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")
    dsn = database(server, "bf")
    big = 150_000
    make_schema(dsn, big)
    out = tmp_path / "bf.rwcap"
    writer = Writer(dsn, big)
    writer.start()  # (before the capture, until after the backfills: they run while the tables change)
    capture = subprocess.Popen(command(dsn, out, "--backfill", "public.big", "--backfill", "public.toasty",
                                       "--backfill", "public.multi", "--backfill-budget", "0.001", "--idle-exit", "2",
                                       *(["--binary"] if binary else [])),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def ended() -> bool:
        held = runs_in(out) if out.exists() else {}
        return len(held) == 3 and all(run.ended for run in held.values()) and writer.rounds > 30

    wait_for(lambda: capture.poll() is not None or ended(), timeout=240, what="the backfills' ends")
    writer.stop.set()
    writer.join(60)
    _, stderr = capture.communicate(timeout=240)
    assert capture.returncode == 0, stderr
    assert "backfill public.big: done, " in stderr
    held = runs_in(out)
    assert held[_oid(dsn, "big")].chunk > 20  # chunks: many windows, each with the writer's changes around it
    tables, _ = folded([out])
    for name, query in EXPECTED.items():
        assert rows_of(tables.get(name, [])) == selected(dsn, query), name
    # decode prints the chunks' rows as "backfill" changes and none of the backfill's own messages
    for output in ("jsonl", "debezium"):
        printed = run([REPLWIRE, "decode", str(out), "--format", output])
        assert printed.returncode == 0, printed.stderr
        assert "replwire.backfill" not in printed.stdout
        assert printed.stdout.count('"backfill"' if output == "jsonl" else '"incremental"') >= big // 2
    drop_slots(dsn)


NONE = HeldRun(-1)  # (a table with no run in the file yet)


def runs_in(path) -> dict[int, HeldRun]:
    return read_state(str(path)).runs


def _oid(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT %s::regclass::oid", (table,)).fetchone()[0]


def test_what_cannot_be_backfilled_is_refused_before_streaming(pg18, tmp_path):
    dsn = database(pg18, "bfno")
    make_schema(dsn, 10)
    for table, message in (("public.unpublished", "public.unpublished is not in publication 'pub'"),
                           ("public.keyless", "public.keyless has no primary key or replica identity index"),
                           ("public.whole", "public.whole has REPLICA IDENTITY FULL")):
        result = run(command(dsn, tmp_path / f"{table}.rwcap", "--backfill", table, "--idle-exit", "1"))
        assert result.returncode == 1 and message in result.stderr, result.stderr
    usage = run(command(dsn, tmp_path / "sql.rwcap", "--backfill", "public.big", "--via", "sql"))
    assert usage.returncode == 2 and "--backfill needs a replication connection" in usage.stderr
    drop_slots(dsn)


@pytest.mark.parametrize("planted", [False, True], ids=["window-applied", "planted-fault"])
def test_a_change_the_chunks_snapshot_misses_is_applied_at_its_watermark(pg18, tmp_path, monkeypatch, planted):
    """Deterministic: a transaction updates a row of the second chunk before that chunk is read and commits
    after the read, before its high watermark; the chunk's snapshot does not see it, so the chunk row is the
    old one, and only the window's apply makes the row written at H the new one (which the stream's update,
    before H, already set: the chunk must not take it back)."""
    import psycopg

    from replwire.codec.io import backfill as module
    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture
    from replwire.codec.stream.backfill_window import Window

    dsn = database(pg18, "bfwin")
    make_schema(dsn, 5000)
    held = psycopg.connect(dsn)
    emitted = module.Backfill._emit

    def emit(self, cur, transactional, content, flush=False):
        if content.get("k") == "low" and content.get("c") == 1:  # before the second chunk's read
            held.execute("UPDATE big SET v = 'missed by the snapshot' WHERE id = 150")
        if content.get("k") == "high" and content.get("c") == 1:  # after it, before its H
            held.commit()
        emitted(self, cur, transactional, content, flush)

    monkeypatch.setattr(module.Backfill, "_emit", emit)
    monkeypatch.setattr(module, "FIRST_ROWS", 100)
    monkeypatch.setattr(module, "LEAST_ROWS", 100)
    monkeypatch.setattr(module, "MOST_ROWS", 100)  # chunks of 100 rows: the second holds id 150
    if planted:
        monkeypatch.setattr(Window, "_apply", lambda self, run, rows, events: list(rows))
    out = tmp_path / "win.rwcap"
    settings = CaptureSettings(slot=slot_of(dsn), publication="pub", messages=True)
    capture = LiveCapture(dsn, out, settings, sync_interval=0.05, backfill=["public.big"])
    capture.run(idle_exit=1.5)
    held.close()
    tables, _ = folded([out])
    got = dict(row[:2] for row in rows_of(tables["public.big"]))
    assert len(got) == 5000
    if planted:
        assert got[150] == "v150"  # the chunk took back what the stream's update set: wrong, as planted
    else:
        assert got[150] == "missed by the snapshot"
        assert rows_of(tables["public.big"]) == selected(dsn, "SELECT * FROM big")
    drop_slots(dsn)


@pytest.mark.parametrize("planted", [False, True], ids=["dropped", "planted-fault"])
def test_a_chunk_read_ahead_of_one_read_again_is_dropped(pg18, tmp_path, monkeypatch, planted):
    """Deterministic: the window has the third chunk read again (a verdict planted by the test, as one on a
    changed table shape would be) while the fourth, read ahead of it, is on its way.  The fourth is dropped
    and read again after the third: each chunk number is in the file once and in order, and with a writer
    changing the table all along, the file folds to the table."""
    from replwire.codec.io import backfill as module
    from replwire.codec.io.capture_file import read_capture
    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture
    from replwire.codec.stream import snapshot_records
    from replwire.codec.stream.backfill_window import Verdict, Window

    dsn = database(pg18, "bfahead")
    make_schema(dsn, 3000)
    emitted, closed = module.Backfill._emit, Window.close
    seen: list[tuple[str, int]] = []

    def emit(self, cur, transactional, content, flush=False):
        if content.get("k") in ("low", "high"):
            seen.append((content["k"], content["c"]))
        emitted(self, cur, transactional, content, flush)

    def close(self, rows, snapshot, committed_xip=None):
        chunk = self._window.chunk
        verdict = closed(self, rows, snapshot, committed_xip)
        return Verdict("redo", "planted") if chunk == 2 and seen.count(("high", 2)) == 1 else verdict

    monkeypatch.setattr(module.Backfill, "_emit", emit)
    monkeypatch.setattr(Window, "close", close)
    monkeypatch.setattr(module, "FIRST_ROWS", 200)
    monkeypatch.setattr(module, "LEAST_ROWS", 200)
    monkeypatch.setattr(module, "MOST_ROWS", 200)
    if planted:  # the chunks read after one read again are kept
        monkeypatch.setattr(module.Backfill, "_dropping", property(lambda self: set(), lambda self, value: None),
                            raising=False)
    out = tmp_path / "ahead.rwcap"
    stop = threading.Event()

    def write() -> None:  # (updates, deletes and inserts all over the table while it is read)
        import psycopg

        rng = random.Random(5)
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set() and seen.count(("high", 9)) == 0:  # (until the backfill's last chunks)
                conn.execute("UPDATE big SET v = v || '+' WHERE id = %s", (rng.randrange(1, 3000),))
                conn.execute("DELETE FROM big WHERE id = %s", (rng.randrange(1, 3000),))
                conn.execute("INSERT INTO big VALUES (%s, 'new', 0) ON CONFLICT DO NOTHING", (rng.randrange(1, 3000),))
                time.sleep(0.002)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        settings = CaptureSettings(slot=slot_of(dsn), publication="pub", messages=True)
        capture = LiveCapture(dsn, out, settings, sync_interval=0.05, backfill=["public.big"])
        capture.run(idle_exit=1.5)
    finally:
        stop.set()
        writer.join()
    # chunk 3 was read ahead of chunk 2's verdict, and both were read again after it
    assert seen[4:10] == [("low", 2), ("high", 2), ("low", 3), ("high", 3), ("low", 2), ("high", 2)], seen[:12]
    chunks = []
    with read_capture(str(out)) as reader:
        for record in reader.records():
            if record.data[:1] == bytes((snapshot_records.CHUNK,)):
                chunks.append(snapshot_records.parse_record(record.data).chunk)
    if planted:
        assert chunks[:5] == [0, 1, 3, 2, 3], chunks  # the dropped chunk written, then read and written again
        return
    assert chunks == list(range(len(chunks))) and len(chunks) >= 15, chunks
    capture = LiveCapture(dsn, out, settings, sync_interval=0.05)  # (the writer's last changes)
    capture.run(idle_exit=1.0)
    tables, _ = folded([out])
    assert rows_of(tables["public.big"]) == selected(dsn, "SELECT * FROM big")
    drop_slots(dsn)


def test_sigkill_in_the_middle_of_a_backfill_then_again_continues_it(pg18, tmp_path):
    import os
    import signal

    from replwire.codec.io.capture_file import read_capture
    from replwire.codec.stream import snapshot_records

    dsn = database(pg18, "bfkill")
    big = 100_000
    make_schema(dsn, big)
    out = tmp_path / "killed.rwcap"
    backfill = command(dsn, out, "--backfill", "public.big", "--backfill-budget", "0.001",
                       "--backfill-rate", "20000")  # (five seconds of reading: killed well inside it)
    writer = Writer(dsn, big)
    writer.start()
    first = subprocess.Popen(backfill, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        oid = _oid(dsn, "big")
        wait_for(lambda: out.exists() and runs_in(out).get(oid, NONE).chunk >= 10, timeout=120,
                 what="ten chunks in the file")
        time.sleep(0.2)  # (several sync intervals: chunks acknowledged to the server, which a restart keeps)
    finally:  # (also when the wait fails: no capture left running on the session's server)
        os.kill(first.pid, signal.SIGKILL)
    killed_us = int((time.time() - 946684800) * 1e6)
    first.wait(30)
    assert not runs_in(out)[oid].ended  # (killed in the middle)
    second = subprocess.Popen([*backfill, "--idle-exit", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    wait_for(lambda: second.poll() is not None or (runs_in(out).get(oid, NONE).ended
                                                    and writer.rounds > 30), timeout=240, what="the backfill's end")
    writer.stop.set()
    writer.join(60)
    _, stderr = second.communicate(timeout=240)
    assert second.returncode == 0, stderr
    # one run, its chunks numbered on from the first capture's that the slot confirmed: not started again
    chunks = []
    with read_capture(str(out)) as reader:
        for _, _, _, data in reader.records(raw=True):
            if data[:1] == bytes((snapshot_records.CHUNK,)):
                fields = snapshot_records.parse_record(data)
                chunks.append((fields.run, fields.chunk, fields.at_us))
    assert len({run for run, _, _ in chunks}) == 1
    assert [chunk for _, chunk, _ in chunks] == list(range(len(chunks)))
    assert sum(at < killed_us for _, _, at in chunks) >= 10  # (read by the first capture, kept, continued)
    tables, _ = folded([out])
    assert rows_of(tables["public.big"]) == selected(dsn, "SELECT * FROM big")
    drop_slots(dsn)


@pytest.mark.parametrize("planted", [False, True], ids=["read-again", "planted-fault"])
def test_a_row_moved_into_keys_already_read_is_read_again_at_the_end(pg18, tmp_path, monkeypatch, planted):
    """A key change moves a row whose TOASTed body it leaves unchanged from keys not read yet to keys already
    read: the stream's update carries no body, and the fold never saw the old row, so only reading the moved
    row again at the run's end gives its body (with that taken out, the body stays unknown)."""
    import psycopg

    from replwire.codec.io import backfill as module
    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture
    from replwire.codec.stream.backfill_window import Window

    dsn = database(pg18, "bfmove")
    make_schema(dsn, 10)
    emitted = module.Backfill._emit

    def emit(self, cur, transactional, content, flush=False):
        if content.get("k") == "low" and content.get("c") == 2:  # between chunks 1 and 2, outside any window
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE toasty SET id = -1, note = 'moved' WHERE id = 2950")
        emitted(self, cur, transactional, content, flush)

    monkeypatch.setattr(module.Backfill, "_emit", emit)
    for name in ("FIRST_ROWS", "LEAST_ROWS", "MOST_ROWS"):
        monkeypatch.setattr(module, name, 100)
    if planted:
        monkeypatch.setattr(Window, "_moves_to_refetch", staticmethod(lambda run, events: None))
    out = tmp_path / "move.rwcap"
    settings = CaptureSettings(slot=slot_of(dsn), publication="pub", messages=True)
    LiveCapture(dsn, out, settings, sync_interval=0.05, backfill=["public.toasty"]).run(idle_exit=1.5)
    tables, _ = folded([out])
    moved = next(row for row in tables["public.toasty"] if row[0] == -1)
    if planted:
        assert moved[1] is None and moved[-2] == ("body",)  # unknown: nothing read the moved row again
    else:
        assert moved[1] == selected(dsn, "SELECT body FROM toasty WHERE id = -1")[0][0]
        assert rows_of(tables["public.toasty"]) == selected(dsn, "SELECT * FROM toasty")
    drop_slots(dsn)


def test_a_transaction_prepared_before_the_run_is_waited_for(pg18, tmp_path):
    """With two-phase messages on, a transaction prepared before the capture's stream began is one the
    window never saw begin: the run's first chunk waits until it is committed (or rolled back)."""
    import psycopg

    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture

    dsn = database(pg18, "bfprep")
    make_schema(dsn, 500)
    with psycopg.connect(dsn, autocommit=True) as conn:  # (the slot first: its creation waits for it too)
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, true)", (slot_of(dsn),))
        conn.execute("BEGIN")
        conn.execute("UPDATE big SET v = 'prepared' WHERE id = 5")
        conn.execute("PREPARE TRANSACTION 'bf_prepared'")
    said: list[str] = []
    settings = CaptureSettings(slot=slot_of(dsn), publication="pub", messages=True, two_phase=True)
    capture = LiveCapture(dsn, tmp_path / "prep.rwcap", settings, sync_interval=0.05, backfill=["public.big"],
                          log=said.append)
    running = threading.Thread(target=capture.run, kwargs={"idle_exit": 1.5})
    running.start()
    wait_for(lambda: any("(1 prepared)" in line for line in said), what="the run waiting for the prepared one")
    assert not runs_in(tmp_path / "prep.rwcap")  # (no chunk read while it waits)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("COMMIT PREPARED 'bf_prepared'")
    running.join(120)
    assert any("backfill public.big: done, 500 rows" in line for line in said), said
    tables, _ = folded([tmp_path / "prep.rwcap"])
    assert rows_of(tables["public.big"]) == selected(dsn, "SELECT * FROM big")
    drop_slots(dsn)


def test_no_backfill_transaction_holds_vacuum_back_longer_than_a_chunk(pg18, tmp_path):
    """While a table is backfilled, no transaction of the capture's lasts much longer than the chunk budget
    (sampled from pg_stat_activity), and rows deleted from another table meanwhile are removable by VACUUM
    before the backfill ends (an exported snapshot's copy keeps them all)."""
    import psycopg

    dsn = database(pg18, "bfvac")
    make_schema(dsn, 300_000)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE victim (id int PRIMARY KEY)")
        conn.execute("INSERT INTO victim SELECT generate_series(1, 20000)")
    out = tmp_path / "vac.rwcap"
    capture = subprocess.Popen(command(dsn, out, "--backfill", "public.big", "--backfill-budget", "0.05",
                                       "--idle-exit", "1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    oldest, removed = 0.0, None
    oid = _oid(dsn, "big")
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_for(lambda: out.exists() and runs_in(out).get(oid, NONE).chunk >= 3, timeout=120,
                 what="the backfill under way")
        conn.execute("DELETE FROM victim")
        while capture.poll() is None and not runs_in(out)[oid].ended:
            age = conn.execute("SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) "
                               "FROM pg_stat_activity WHERE application_name LIKE 'replwire backfill%' "
                               "AND xact_start IS NOT NULL").fetchone()[0]
            oldest = max(oldest, float(age))
            if removed is None:
                notices: list[str] = []
                conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
                conn.execute("VACUUM (VERBOSE) victim")
                found = [n for n in notices if "removed" in n and "tuples" in n] or notices
                text = " ".join(found)
                if "20000 removed" in text.replace(",", ""):
                    removed = text
            time.sleep(0.02)
    _, stderr = capture.communicate(timeout=240)
    assert capture.returncode == 0, stderr
    assert removed is not None, "VACUUM could not remove the deleted rows while the backfill ran"
    assert oldest < 1.0, oldest  # (the budget is 0.05 s of reading; a chunk's transaction ends with it)
    drop_slots(dsn)


def test_a_backfill_after_add_column_default_fills_the_column(pg18, tmp_path):
    """ADD COLUMN ... DEFAULT writes no row, so the stream never carries the default of the rows no change
    touched since; a backfill of the table after it reads every row with it."""
    import psycopg

    dsn = database(pg18, "bfadd")
    make_schema(dsn, 2000)
    out = tmp_path / "add.rwcap"
    first = run(command(dsn, out, "--idle-exit", "1", "--messages"))  # a capture without the column
    assert first.returncode == 0, first.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE big ADD COLUMN extra int DEFAULT 7")
        conn.execute("UPDATE big SET v = 'after' WHERE id = 3")
    again = run(command(dsn, out, "--idle-exit", "1", "--backfill", "public.big"))
    assert again.returncode == 0, again.stderr
    tables, _ = folded([out])
    rows = rows_of(tables["public.big"])
    assert rows == selected(dsn, "SELECT * FROM big") and {row[3] for row in rows} == {7}
    drop_slots(dsn)


def test_backfill_rate_throttles_and_progress_says_how_far(pg18, tmp_path):
    """--backfill-rate ROWS: the run reads no faster than ROWS rows a second (its first second's rows aside),
    and its progress lines say the rows of the planner's estimate and the time left."""
    import psycopg

    dsn = database(pg18, "bfrate")
    make_schema(dsn, 14_000)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE big")
    out = tmp_path / "rate.rwcap"
    started = time.monotonic()
    done = run(command(dsn, out, "--idle-exit", "0.5", "--backfill", "public.big", "--backfill-rate", "2000"))
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert elapsed >= (14_000 - 2000) / 2000, elapsed  # (reading 12,000 rows past the first second's)
    progress = [line for line in done.stderr.splitlines() if "backfill public.big: " in line and " of ~" in line]
    assert progress and " of ~14,000 rows (" in progress[0] and " left)" in progress[0], done.stderr
    assert "backfill public.big: done, 14,000 rows in " in done.stderr
    tables, _ = folded([out])
    assert rows_of(tables["public.big"]) == selected(dsn, "SELECT * FROM big")
    drop_slots(dsn)


def test_replwire_backfill_asks_the_running_capture_and_status_reads_the_file(pg18, tmp_path):
    dsn = database(pg18, "bfask")
    make_schema(dsn, 20_000)
    out = tmp_path / "ask.rwcap"
    capture = subprocess.Popen(command(dsn, out, "--messages", "--idle-exit", "2"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    wait_for(lambda: out.exists() and out.stat().st_size > 0, what="the capture file")
    asked = run([REPLWIRE, "backfill", "--dsn", dsn, "--slot", slot_of(dsn), "public.big", "public.toasty"])
    assert asked.returncode == 0, asked.stderr
    assert f"asked the capture on slot '{slot_of(dsn)}' to backfill public.big, public.toasty" in asked.stdout
    refused = run([REPLWIRE, "backfill", "--dsn", dsn, "--slot", slot_of(dsn), "public.keyless"])
    assert refused.returncode == 0, refused.stderr  # (asked: the capture is what refuses it)
    big, toasty = _oid(dsn, "big"), _oid(dsn, "toasty")
    wait_for(lambda: all(runs_in(out).get(oid, NONE).ended for oid in (big, toasty))
             and any(r.refused for r in read_state(str(out)).requests),
             timeout=120, what="the backfills asked for, and the refusal")
    status = run([REPLWIRE, "backfill", "--status", str(out)])
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].startswith("public.big: done, run 0: 20,000 rows in ") and "rows/s of reading" in lines[0]
    assert lines[1].startswith("public.toasty: done, run 1: 3,000 rows in ")
    assert lines[2].startswith("public.keyless: refused: public.keyless has no primary key or replica identity")
    assert len(lines) == 3
    _, stderr = capture.communicate(timeout=120)
    assert capture.returncode == 0, stderr
    assert "backfill request for public.keyless refused: public.keyless has no primary key" in stderr
    tables, _ = folded([out])
    for name in ("public.big", "public.toasty"):
        assert rows_of(tables[name]) == selected(dsn, EXPECTED[name]), name
    nowhere = run([REPLWIRE, "backfill", "--dsn", dsn, "--slot", "no_such_slot", "public.big"])
    assert nowhere.returncode == 1 and "no logical slot 'no_such_slot' in this database" in nowhere.stderr
    drop_slots(dsn)
