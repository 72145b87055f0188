"""``replwire capture --snapshot`` against real PostgreSQL 15 and 18: rows that were there before the capture,
writes while the snapshot runs, SIGKILL in the snapshot and in the stream, and the errors it reports."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from replwire.codec import LSN
from replwire.codec.io.snapshot import section_state
from replwire.codec.stream import snapshot_records
from tests.conftest import ALL_MAJORS
from tests.support.snapshot import (
    REPLWIRE,
    capture_command,
    database,
    drop_slots,
    folded,
    rows_of,
    run,
    selected,
    slot_of,
    wait_for,
)

pytestmark = pytest.mark.server

TYPES = ("id int PRIMARY KEY, t text, arr int[], tarr text[], j jsonb, n numeric, ts timestamptz, b bytea, "
         "u uuid, f float8, d date, bo bool")
#: Rows of every type, one in ten with a TOASTed (stored out of line, incompressible) text of 20 kB.
FILL_TYPES = ("INSERT INTO types_t SELECT g, CASE WHEN g %% 10 = 0 "
              "THEN (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 640) i) "
              "ELSE 'short ' || g || E'\\t\\n\\\\ é' END, ARRAY[g, NULL, -g], "
              "ARRAY['a b', NULL, E'q\"\\\\'], jsonb_build_object('g', g, 'nested', jsonb_build_array(1, 'x')), "
              "g / 7.0, '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 hour', "
              "decode(md5(g::text), 'hex'), md5(g::text)::uuid, g / 3.0, '2000-01-01'::date + g, g %% 2 = 0 "
              "FROM generate_series(%s::int, %s::int) g")


def make_schema(dsn: str, big_rows: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a_big (id int PRIMARY KEY, pad text)")
        conn.execute("INSERT INTO a_big SELECT g, repeat('x', 80) FROM generate_series(1, %s) g", (big_rows,))
        conn.execute(f"CREATE TABLE types_t ({TYPES})")
        conn.execute("ALTER TABLE types_t ALTER COLUMN t SET STORAGE EXTERNAL")
        conn.execute(FILL_TYPES, (1, 300))
        conn.execute("CREATE TABLE keyless (a int, b text)")
        conn.execute("INSERT INTO keyless VALUES (1, 'same'), (1, 'same'), (2, NULL)")
        conn.execute("CREATE TABLE trunc (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO trunc SELECT g, 'before' FROM generate_series(1, 50) g")
        conn.execute("CREATE TABLE filtered (id int PRIMARY KEY, v text, secret text)")
        conn.execute("INSERT INTO filtered SELECT g, 'v' || g, 'hidden' FROM generate_series(1, 40) g")
        conn.execute("CREATE TABLE unpublished (id int PRIMARY KEY)")
        conn.execute("INSERT INTO unpublished VALUES (1)")
        conn.execute("CREATE TABLE z_stream (id serial PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE a_big, types_t, keyless, trunc, z_stream, "
                     "filtered (id, v) WHERE (id % 2 = 0)")


class Inserter(threading.Thread):
    """Small transactions committing one after another, as fast as they can, until stopped: some commit
    just before the slot's consistent point, some just after, some while the copy runs."""

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.dsn, self.stop = dsn, threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            while not self.stop.is_set():
                conn.execute("INSERT INTO z_stream (v) VALUES ('x')")


def writes(dsn: str, rounds: int = 3) -> None:
    """Every kind of write, on rows that were there before the capture and on new ones."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for r in range(rounds):
            # updates that leave the TOASTed text unchanged ('u'), on rows the stream never saw before
            conn.execute("UPDATE types_t SET n = n + 1, arr = arr || %s WHERE id %% 5 = %s", (r, r))
            conn.execute("DELETE FROM types_t WHERE id %% 11 = %s", (r,))
            conn.execute(FILL_TYPES, (1000 + 100 * r, 1000 + 100 * r + 20))
            conn.execute("INSERT INTO keyless VALUES (%s, 'new'), (1, 'same')", (r,))
            conn.execute("UPDATE filtered SET id = id + 1000 WHERE id = %s", (2 * r + 2,))  # leaves the filter
            conn.execute("UPDATE filtered SET v = 'changed' WHERE id = %s", (2 * r + 11,))  # odd: stays out
            conn.execute("UPDATE filtered SET id = id + 2001 WHERE id = %s", (2 * r + 21,))  # odd -> even: enters
            with conn.transaction():  # rolled back: none of it may show
                conn.execute("INSERT INTO trunc VALUES (%s, 'rolled back')", (900 + r,))
                conn.execute("UPDATE types_t SET t = 'rolled back' WHERE id = 10")
                raise psycopg.Rollback()
            if r == 0:
                conn.execute("TRUNCATE trunc")  # waits for the snapshot's ACCESS SHARE lock
            conn.execute("INSERT INTO trunc VALUES (%s, 'after')", (100 + r,))
            time.sleep(0.05)


EXPECTED = {
    "public.a_big": "SELECT * FROM a_big",
    "public.types_t": "SELECT * FROM types_t",
    "public.keyless": "SELECT * FROM keyless",
    "public.trunc": "SELECT * FROM trunc",
    "public.filtered": "SELECT id, v FROM filtered WHERE id % 2 = 0",
    "public.z_stream": "SELECT * FROM z_stream",
}


def check_exact(dsn: str, paths, big_rows: int) -> None:
    tables, snapshot_rows = folded(paths)
    assert "public.unpublished" not in tables
    for name, query in EXPECTED.items():
        assert rows_of(tables.get(name, [])) == selected(dsn, query), name
    # a_big: nobody writes it; each of its rows once, as a snapshot row
    ids = collections.Counter(c.new["id"] for c in snapshot_rows if c.table == "a_big")
    assert len(ids) == big_rows and set(ids.values()) == {1}
    # no pre-existing row of any table more than once in the snapshot
    for table in ("types_t", "keyless", "trunc", "filtered"):
        seen = collections.Counter(repr(sorted(c.new.items(), key=repr)) for c in snapshot_rows if c.table == table)
        if table != "keyless":
            assert set(seen.values()) <= {1}, table
    assert collections.Counter(c.table for c in snapshot_rows)["keyless"] == 3
    # the filtered table's snapshot has its published columns and its row filter
    assert {c.new["id"] % 2 for c in snapshot_rows if c.table == "filtered"} == {0}
    assert all(set(c.new) == {"id", "v"} for c in snapshot_rows if c.table == "filtered")


# each value format once, on the two majors of the suite (Debian's 15 and the wheel's 18): the copy's text and
# binary forms are the same on every major; what differs between majors, the slot's creation with a snapshot
# and the stream after it, is in both variants here and, on every major 14 to 18, in the light test
# test_a_crash_just_after_the_slot_was_created_is_taken_again below -- so a third major here (it was 17, 35 s
# a run) repeats this long workload without proving anything the light test does not (the project's rule:
# variants that differ only by the major run on one or two majors)
@pytest.mark.parametrize("major, binary", [(18, False), (15, True)], ids=["18-text", "15-binary"])
def test_snapshot_with_writes_during_it_folds_to_select_star(major, binary, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")
    dsn = database(server, "snap")
    big = 600_000  # (a copy long enough that the writes start while it runs, on a fast machine too)
    make_schema(dsn, big)
    out = tmp_path / "snap.rwcap"
    command = capture_command(dsn, out, slot_of(dsn), "pub", "--idle-exit", "2", *(["--binary"] if binary else []))
    inserter = Inserter(dsn)
    inserter.start()
    capture = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: section_state(str(out)).lsn is not None or capture.poll() is not None, what="the slot")
    during = section_state(str(out)).state == "interrupted"  # the writes start while the copy runs
    worker = threading.Thread(target=writes, args=(dsn,))
    worker.start()
    worker.join(120)
    inserter.stop.set()
    inserter.join(30)
    _, stderr = capture.communicate(timeout=300)
    assert capture.returncode == 0, stderr
    assert during
    assert "snapshot public.a_big: 600,000 rows" in stderr and "done" in stderr  # progress per table
    assert section_state(str(out)).state == "complete"
    # decode (all of its output) and decode --format debezium (its first event) run in processes of their own
    # while check_exact folds the file in this one: the machine's other core does them meanwhile (one after
    # the other, the three took 10 + 8 + 10 s of this test's 34); debezium's process is ended once its first
    # event is read, which is all it is asked for (its stdout a pipe read no further: it waits there)
    decoded, errors = tmp_path / "decoded.jsonl", tmp_path / "decode.err"
    with open(decoded, "wb") as sink, open(errors, "wb") as sink_errors:
        decoding = subprocess.Popen([REPLWIRE, "decode", str(out)], stdout=sink, stderr=sink_errors)
    debezium = subprocess.Popen([REPLWIRE, "decode", str(out), "--format", "debezium"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    try:
        check_exact(dsn, [out], big)
        assert decoding.wait(300) == 0, errors.read_text()
        assert debezium.stdout is not None
        first_event = debezium.stdout.readline()
    finally:
        for process in (decoding, debezium):
            if process.poll() is None:
                process.kill()
            process.wait(30)
        if debezium.stdout is not None:
            debezium.stdout.close()
    # decode prints the snapshot's rows as op "snapshot", typed like inserts, at the snapshot's LSN
    with open(decoded, encoding="utf-8") as lines:
        objects = [json.loads(line) for line in lines]
    decoded.unlink()  # (about 100 MB of JSON lines: not left in the run's temporary directory)
    snap = [o for o in objects if o["op"] == "snapshot"]
    assert len(snap) == big + 300 + 3 + 50 + 20 + sum(1 for o in snap if o["table"] == "z_stream")
    first = next(o for o in snap if o["table"] == "types_t" and o["new"]["id"] == 10)
    assert first["new"]["arr"] == [10, None, -10] and json.loads(first["new"]["j"]) == {"g": 10, "nested": [1, "x"]}
    assert first["new"]["n"] == "1.4285714285714286" and len(first["new"]["t"]) == 20480
    assert len({o["lsn"] for o in snap}) == 1 and objects.index(snap[-1]) == len(snap) - 1  # all first
    event = json.loads(first_event)
    assert event["op"] == "r" and event["source"]["snapshot"] == "true" and event["before"] is None
    drop_slots(dsn)


# one major: what is killed is replwire's capture, and the slot's creation and the snapshot's copy on both
# majors are in the test above
@pytest.mark.parametrize("major", [18])
def test_sigkill_in_the_snapshot_and_in_the_stream_then_again_is_exact(major, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")
    dsn = database(server, "kill")
    big = 600_000
    make_schema(dsn, big)
    out = tmp_path / "killed.rwcap"
    command = capture_command(dsn, out, slot_of(dsn), "pub")
    # 1. SIGKILL while the snapshot copies a_big
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: out.exists() and out.stat().st_size > 4 << 20, what="rows in the file")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    assert section_state(str(out)).state == "interrupted"
    partial = run([REPLWIRE, "decode", str(out)])  # what is there decodes, with a warning that it is partial
    assert partial.returncode == 0 and "the snapshot was interrupted" in partial.stderr
    # 2. again: the slot is dropped, the section cut and taken again; SIGKILL in the stream while writes run
    worker = threading.Thread(target=writes, args=(dsn, 6))
    second = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: section_state(str(out)).state == "complete", timeout=120, what="the snapshot")
    snapshot_end = out.stat().st_size
    worker.start()
    # killed in the stream: once the file holds streamed records after the complete snapshot
    wait_for(lambda: out.stat().st_size > snapshot_end + 4096, timeout=120, what="streamed records")
    os.kill(second.pid, signal.SIGKILL)
    second.wait(30)
    assert "taken again" in second.stderr.read()
    worker.join(120)
    # 3. again: resumes the stream after the complete snapshot
    third = run([*command, "--idle-exit", "2"])
    assert third.returncode == 0, third.stderr
    assert "is complete; resuming" in third.stderr
    check_exact(dsn, [out], big)
    drop_slots(dsn)


def test_errors_are_clear(pg18, tmp_path):
    import psycopg

    dsn = database(pg18, "errs")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        conn.execute("CREATE PUBLICATION empty_pub")
        conn.execute("SELECT pg_create_logical_replication_slot('taken', 'pgoutput')")
        conn.execute("DROP ROLE IF EXISTS snap_reader")
        conn.execute("CREATE ROLE snap_reader LOGIN REPLICATION")

    def fails(*args: str, out: str = "e.rwcap", user_dsn: str = dsn, code: int = 1) -> str:
        result = run(capture_command(user_dsn, tmp_path / out, *args, "--idle-exit", "0.5"))
        assert result.returncode == code, result.stderr
        return result.stderr

    assert "publication 'empty_pub' publishes no tables" in fails("s1", "empty_pub")
    # the set-up's errors read as live capture's (one set-up serves both)
    assert ("publication 'no_pub' does not exist (create it with CREATE PUBLICATION, or have it created FOR ALL "
            "TABLES with --create-publication, create_publication=True from Python)") in fails("s1", "no_pub")
    nowhere = fails("s1", "pub", user_dsn=f"host={tmp_path} port=1 dbname=postgres", code=3)  # (may come up)
    assert "cannot connect to the server: " in nowhere and "(check the DSN)" in nowhere
    assert "slot 'taken' already exists: a snapshot needs a new slot" in fails("taken", "pub")
    assert "cannot be used with --via sql" in fails("s2", "pub", "--via", "sql", code=2)
    assert "cannot be used with --no-create-slot" in fails("s2", "pub", "--no-create-slot", code=2)
    assert "user 'snap_reader' may not SELECT from \"public\".\"t\"" in fails(
        "s3", "pub", user_dsn=f"{dsn} user=snap_reader")
    # no slot was left behind by the refusals
    with psycopg.connect(dsn, autocommit=True) as conn:
        slots = {r[0] for r in conn.execute("SELECT slot_name FROM pg_replication_slots")}
    assert not slots & {"s1", "s2", "s3"}
    # a complete snapshot whose slot was dropped: its changes since are lost, so it is refused
    ok = run(capture_command(dsn, tmp_path / "done.rwcap", "s4", "pub", "--idle-exit", "0.5"))
    assert ok.returncode == 0, ok.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('s4')")
    assert "is complete, but its slot 's4' no longer exists" in fails("s4", "pub", out="done.rwcap")
    # a capture file without a snapshot is not given one
    plain = run([REPLWIRE, "capture", "--dsn", dsn, "--slot", "s5", "--publication", "pub", "--out",
                 str(tmp_path / "plain.rwcap"), "--idle-exit", "0.5"])
    assert plain.returncode == 0, plain.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (2)")
    run([REPLWIRE, "capture", "--dsn", dsn, "--slot", "s5", "--publication", "pub", "--out",
         str(tmp_path / "plain.rwcap"), "--idle-exit", "0.5"])
    assert "already holds a capture without a snapshot" in fails("s6", "pub", out="plain.rwcap")
    # refused before the publication is created, as before the slot is
    assert "was captured with other settings" in fails("s6", "new_pub", "--create-publication", out="plain.rwcap")
    assert "slot 'taken' already exists" in fails("taken", "new_pub", "--create-publication")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_publication WHERE pubname = 'new_pub'").fetchone()[0] == 0
    (tmp_path / "junk.rwcap").write_bytes(b"not a capture file at all")
    assert "not a replwire file" in fails("s7", "pub", out="junk.rwcap")
    drop_slots(dsn)


def test_copy_rows_read_as_postgresql_writes_them():
    # COPY's text form, as PostgreSQL's documentation gives it: backslash escapes, \N for NULL
    rows = list(snapshot_records.text_rows(b"a\\tb\\\\c\\nd\t\\N\t\\101\\x42\n", 3))
    assert [[(c.kind, c.data) for c in row] for row in rows] == [[("t", b"a\tb\\c\nd"), ("n", None), ("t", b"AB")]]
    with pytest.raises(snapshot_records.SnapshotError, match="row 0 .* has 2 fields, the table 3"):
        list(snapshot_records.text_rows(b"a\tb\n", 3))
    with pytest.raises(snapshot_records.SnapshotError, match="whole line"):
        list(snapshot_records.text_rows(b"a\tb", 2))
    # binary: Int16 field count, then per field an Int32 length (-1: NULL) and the bytes
    data = bytes.fromhex("0002" "00000004 0000002a" "ffffffff")
    rows = list(snapshot_records.binary_rows(data, 2))
    assert [[(c.kind, c.data) for c in row] for row in rows] == [[("b", b"\x00\x00\x00\x2a"), ("n", None)]]
    for damaged, message in [(data[:-2], "cut short"), (bytes.fromhex("0001" "7fffffff") + b"x", "runs past"),
                             (bytes.fromhex("0003"), "has 3 fields")]:
        with pytest.raises(snapshot_records.SnapshotError, match=message):
            list(snapshot_records.binary_rows(damaged, 2 if message != "runs past" else 1))


# every major: the slot's creation with a snapshot is spelled differently before PostgreSQL 15
@pytest.mark.parametrize("major", ALL_MAJORS)
def test_a_crash_just_after_the_slot_was_created_is_taken_again(major, request, tmp_path):
    import psycopg

    from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
    from replwire.codec.io.connection import CaptureSettings

    server = request.getfixturevalue(f"pg{major}")
    dsn = database(server, "early")
    slot = slot_of(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t SELECT generate_series(1, 100)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        # what a capture killed right after CREATE_REPLICATION_SLOT leaves: the file's SnapshotBegin, the slot
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("INSERT INTO t VALUES (101)")  # after the slot: in its stream, and in a new snapshot
        encoding = conn.execute("SHOW client_encoding").fetchone()[0]
    settings = CaptureSettings(slot=slot, publication="pub")
    header = CaptureHeader(proto_version=settings.protocol(server.version_num), server_version=server.version_num,
                           options=settings.options(server.version_num), client_encoding=encoding)
    out = tmp_path / "early.rwcap"
    with CaptureWriter(out, header) as writer:
        writer.append(0, 0, snapshot_records.begin_record(slot, False))
    result = run(capture_command(dsn, out, slot, "pub", "--idle-exit", "1"))
    assert result.returncode == 0, result.stderr
    assert "taken again" in result.stderr
    tables, snapshot_rows = folded([out])
    assert rows_of(tables["public.t"]) == selected(dsn, "SELECT * FROM t")
    assert sorted(c.new["id"] for c in snapshot_rows) == list(range(1, 102))  # each once, 101 included
    drop_slots(dsn)


def test_snapshot_records_are_laid_out_as_declared():
    # hand-written from the capture-format page: kind byte, then the fields big-endian, Strings NUL-ended
    assert snapshot_records.begin_record("s", True) == b"\x01s\x00\x01"
    slot = snapshot_records.slot_record(LSN(0x16B3748), "00000003-2")
    assert slot == b"\x02" + bytes.fromhex("00000000016B3748") + b"00000003-2\x00"
    assert (b"".join(snapshot_records.rows_record(16385, True, 2, b"ab"))
            == b"\x04" + bytes.fromhex("00004001" "01" "00000002") + b"ab")
    assert snapshot_records.table_end_record(16385, 7) == b"\x05" + bytes.fromhex("00004001" "0000000000000007")
    end = snapshot_records.end_record(LSN(0x10), 1, 7)
    assert end == b"\x06" + bytes.fromhex("0000000000000010" "00000001" "0000000000000007")
    parsed = snapshot_records.parse_record(b"".join(snapshot_records.rows_record(16385, False, 1, b"x\n")))
    assert (parsed.relation_id, parsed.binary, parsed.rows, parsed.data) == (16385, 0, 1, b"x\n")
    assert snapshot_records.record_completes(snapshot_records.end_record(LSN(0x10), 1, 7), 0x10) == 0x10
    assert snapshot_records.record_completes(snapshot_records.begin_record("s", False), 0) is None
    with pytest.raises(snapshot_records.SnapshotError, match="SnapshotEnd"):
        snapshot_records.parse_record(b"\x06\x00")
    with pytest.raises(snapshot_records.SnapshotError, match="not a snapshot record"):
        snapshot_records.parse_record(b"B")
