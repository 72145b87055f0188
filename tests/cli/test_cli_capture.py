"""``replwire capture`` and ``replwire decode`` run as a user runs them, against real servers, including a
``kill -9`` of the capture in the middle of a workload."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from replwire.codec import LSN, Assembler, parse
from replwire.codec.io.capture_file import read_capture
from replwire.codec.io.positions import message_completes
from tests.support.capture import pgoutput_records

pytestmark = pytest.mark.server

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")


def replwire(*args, **kwargs):
    return subprocess.run([REPLWIRE, *map(str, args)], capture_output=True, text=True, timeout=120, **kwargs)


def make_table(conn, name):
    conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text, big text)")
    conn.execute(f"ALTER TABLE {name} ALTER COLUMN big SET STORAGE EXTERNAL")
    conn.execute(f"CREATE PUBLICATION {name}_pub FOR TABLE {name}")


def peek(conn, slot, proto, **options):
    args = ["proto_version", str(proto)] + [x for kv in options.items() for x in kv]
    return conn.execute("SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes("
                        "%s, NULL, NULL, VARIADIC %s::text[])", (slot, args)).fetchall()


def expected_changes(rows, proto):
    """(op, id) of every committed change, in commit order, from the SQL interface's rows."""
    assembler = Assembler(proto_version=proto, typed=False)
    out = []
    for item in assembler.feed_all(rows):
        for change in item.changes:
            row = change.new or change.key or change.old
            out.append((change.op, int(row["id"])))
    return out


def decoded(path, *more):
    result = replwire("decode", path, *more)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def test_capture_then_decode(pg18, tmp_path):
    out = tmp_path / "cli.rwcap"
    with pg18.connect() as conn:
        make_table(conn, "cli_t")
        conn.execute("SELECT pg_create_logical_replication_slot('cli_slot', 'pgoutput')")
        conn.execute("INSERT INTO cli_t VALUES (1, 'Grüße', repeat('x', 10000)), (2, NULL, 'small')")
        conn.execute("UPDATE cli_t SET v = 'changed' WHERE id = 1")  # big: unchanged TOAST
        conn.execute("DELETE FROM cli_t WHERE id = 2")
        conn.execute("TRUNCATE cli_t")
        end = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        result = replwire("capture", "--dsn", pg18.dsn, "--slot", "cli_slot", "--publication", "cli_t_pub",
                          "--no-create-slot", "--out", out, "--idle-exit", "1", "--sync-interval", "0.1")
        assert result.returncode == 0, result.stderr
        assert f"into {out}" in result.stderr and "flushed up to" in result.stderr
        confirmed = LSN(conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                     "WHERE slot_name = 'cli_slot'").fetchone()[0])
        assert confirmed >= end
    changes, summary = decoded(out)
    assert [(c["op"], c["table"]) for c in changes] == [("insert", "cli_t"), ("insert", "cli_t"),
                                                       ("update", "cli_t"), ("delete", "cli_t"),
                                                       ("truncate", "cli_t")]
    first, second, update, delete, truncate = changes
    assert first["new"] == {"id": 1, "v": "Grüße", "big": "x" * 10000}
    assert second["new"] == {"id": 2, "v": None, "big": "small"}
    assert update["new"] == {"id": 1, "v": "changed"} and update["unchanged_toast"] == ["big"]
    assert delete["key"] == {"id": 2}
    assert truncate["relations"] == ["public.cli_t"]
    assert first["commit_lsn"] and first["commit_time"].startswith("20") and first["xid"] > 0
    assert summary.strip().endswith("4 transactions, 5 changes from 1 file")

    table = replwire("decode", out, "--format", "table")
    assert table.returncode == 0
    update_row = next(line for line in table.stdout.splitlines() if line.startswith("update "))
    assert 'v="changed"' in update_row and update_row.endswith(" | big")


def test_decode_copy_csv_needs_a_protocol_version(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text('0/16B3748,787,\\x42000000000169e5a80002894463074dc800000313\n')
    result = replwire("decode", path)
    assert result.returncode == 2 and "--proto-version" in result.stderr


def test_decode_reports_bad_input_by_file_and_record(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text('0/1,1,\\x42000000000169e5a80002894463074dc800000313\n0/2,1,\\x4201\n')
    result = replwire("decode", path, "--proto-version", "1")
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {path}, record 1: Begin.final_lsn at offset 1")


STOPS = [("replication", signal.SIGKILL), ("sql", signal.SIGKILL), ("sql", signal.SIGTERM)]


@pytest.mark.parametrize("via, stop", STOPS, ids=["replication-kill-9", "sql-kill-9", "sql-sigterm"])
def test_kill_9_then_resume_loses_and_repeats_nothing(pg18, tmp_path, via, stop):
    out = tmp_path / "killed.rwcap"
    proto = 4
    name = f"kill_{via}_{int(stop)}"
    # the SQL functions cannot stream: the large transactions come whole, at their commits
    streaming = {"streaming": "on"} if via == "replication" else {}
    with pg18.connect() as conn:
        make_table(conn, name)
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{name}_slot",))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{name}_peek",))

        def workload():
            with pg18.connect() as w:
                for i in range(400):
                    if i % 100 == 50:  # a large transaction (streamed in blocks, over replication)
                        w.execute("BEGIN")
                        w.execute(f"INSERT INTO {name} SELECT g, repeat('s', 200), NULL "
                                  "FROM generate_series(%s, %s) g", (100000 * (i + 1), 100000 * (i + 1) + 3000))
                        w.execute("COMMIT")
                    w.execute(f"INSERT INTO {name} VALUES (%s, 'small', NULL)", (i,))
                    if i % 7 == 0:
                        w.execute(f"UPDATE {name} SET v = 'u' WHERE id = %s", (i,))
                    time.sleep(0.002)

        thread = threading.Thread(target=workload)
        command = [REPLWIRE, "capture", "--dsn", pg18.dsn, "--slot", f"{name}_slot", "--publication", f"{name}_pub",
                   "--no-create-slot", "--out", str(out), "--sync-interval", "0.05", "--via", via,
                   "--batch-size", "50", *(["--streaming", "on"] if streaming else [])]
        first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        thread.start()
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size > 200_000):
            assert time.monotonic() < deadline and first.poll() is None, "the capture wrote nothing"
            time.sleep(0.01)
        os.kill(first.pid, stop)
        first.wait(30)
        assert first.returncode == (-signal.SIGKILL if stop == signal.SIGKILL else 0), first.stderr.read()
        # the slot never confirms a position whose data is not in the file
        confirmed = LSN(conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                     "WHERE slot_name = %s", (f"{name}_slot",)).fetchone()[0])
        thread.join(120)
        all_rows = peek(conn, f"{name}_peek", proto, publication_names=f"{name}_pub", **streaming)
        must_have = {message_completes(parse(bytes(d), proto_version=proto, in_stream=False))
                     for _, _, d in all_rows if bytes(d)[:1] in (b"C", b"c")}
        must_have = {p for p in must_have if p is not None and p <= confirmed}
        with read_capture(out) as reader:
            in_file, in_stream, last = set(), False, None
            for record in pgoutput_records(reader):
                message = parse(record.data, proto_version=proto, in_stream=in_stream)
                in_stream = {"S": True, "E": False}.get(message.tag, in_stream)
                in_file.add(message_completes(message))
                last = message_completes(message)
        assert must_have <= in_file, sorted(must_have - in_file)[:5]
        if via == "sql" and stop == signal.SIGTERM:  # a clean stop: the file ends with what the slot confirmed
            assert last is not None and last <= confirmed and not {p for p in in_file - {None} if p > confirmed}

        second = subprocess.run(command + ["--idle-exit", "2"], capture_output=True, text=True, timeout=180)
        assert second.returncode == 0, second.stderr
        assert "resumed after" in second.stderr
        expected = expected_changes([(LSN(lsn), x, bytes(d)) for lsn, x, d in all_rows], proto)
        conn.execute("SELECT pg_drop_replication_slot(%s)", (f"{name}_peek",))
    changes, _ = decoded(out)
    got = [(c["op"], c["new"]["id"] if "new" in c else c["key"]["id"]) for c in changes]
    assert len(expected) > 4000
    assert got == expected  # every committed change, once, in commit order


def test_demo_runs_with_no_configuration():
    result = replwire("demo")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    path = next(line.split(": ", 1)[1] for line in lines if line.startswith("capture file: "))
    assert any(line.startswith("│ accounts │ 3 ") for line in lines)
    # the workload's one UPDATE that leaves a TOASTed value alone, and its two logical messages
    assert "; 1 unchanged TOAST value kept apart from NULL; " in result.stdout
    assert "; 2 logical messages; " in result.stdout
    # the capture file is alone in a directory of its own, and the output says how to remove it
    directory = os.path.dirname(path)
    assert os.listdir(directory) == [os.path.basename(path)]
    assert lines[-1].endswith(f"remove it when done with: rm -r {directory}")
    # what the demo's workload did, decoded again from its capture file by the decode command
    changes, summary = decoded(path)
    count = {}
    for change in changes:
        count[(change["table"], change["op"])] = count.get((change["table"], change["op"]), 0) + 1
    assert count == {("accounts", "insert"): 3, ("accounts", "update"): 1, ("accounts", "delete"): 1,
                     ("events", "insert"): 4000 + 10 + 1, ("events", "truncate"): 1, (None, "message"): 2}
    update = next(c for c in changes if c["op"] == "update")
    assert update["unchanged_toast"] == ["notes"] and "notes" not in update["new"]
    assert update["new"]["balance"] == "110.50"
    assert not any(c.get("new", {}).get("account") == 2 and c["new"]["id"] > 100000 for c in changes)
    os.remove(path)
    os.rmdir(os.path.dirname(path))


def slots(conn):
    return {row[0] for row in conn.execute("SELECT slot_name FROM pg_replication_slots")}


def test_capture_says_what_it_did_and_refuses_another_slot(pg18, tmp_path):
    out = tmp_path / "app.rwcap"
    with pg18.connect() as conn:
        make_table(conn, "cli_words")
        conn.execute("INSERT INTO cli_words VALUES (0, 'before the slot', NULL)")

        def capture(slot, *more):
            return replwire("capture", "--dsn", pg18.dsn, "--slot", slot, "--publication", "cli_words_pub",
                            "--out", out, "--idle-exit", "0.5", "--sync-interval", "0.05", *more)

        try:
            # a fresh run: nothing resumed, and one of everything in the singular
            first = capture("cli_words_app", "--snapshot")
            assert first.returncode == 0, first.stderr
            assert "snapshot at " in first.stderr and ": 1 table, 1 row; streaming" in first.stderr
            assert "resumed after" not in first.stderr
            conn.execute("INSERT INTO cli_words VALUES (1, 'one', NULL)")
            second = capture("cli_words_app")
            assert second.returncode == 0, second.stderr
            assert ", 1 transaction into " in second.stderr and "resumed after 6 records" in second.stderr
            # the slot mistyped: refused, with both names, and no slot created
            before = out.read_bytes()
            wrong = capture("cli_words_apq")
            assert wrong.returncode == 1, wrong.stderr
            assert wrong.stderr == (f"error: {out} was captured from slot 'cli_words_app', not 'cli_words_apq': "
                                    "resume it with --slot cli_words_app, or use another --out for a capture of "
                                    "slot 'cli_words_apq'\n")
            assert "cli_words_apq" not in slots(conn) and out.read_bytes() == before
            # a new file, with nothing to capture: fresh, in the plural
            other = replwire("capture", "--dsn", pg18.dsn, "--slot", "cli_words_new", "--publication",
                             "cli_words_pub", "--out", tmp_path / "new.rwcap", "--idle-exit", "0.3")
            assert other.returncode == 0, other.stderr
            assert "captured 0 messages (0 bytes), 0 transactions into " in other.stderr
            assert "resumed" not in other.stderr
        finally:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name LIKE 'cli_words%'")


@pytest.mark.parametrize("snapshot", [False, True], ids=["stream", "snapshot"])
def test_capture_output_problems_are_one_line_and_leave_no_slot(pg18, tmp_path, snapshot):
    notes = tmp_path / "notes.md"
    notes.write_text("# notes\n")
    missing = tmp_path / "nonexistent-dir" / "a.rwcap"
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS cli_out (id int PRIMARY KEY)")
        conn.execute("DROP PUBLICATION IF EXISTS cli_out_pub")
        conn.execute("CREATE PUBLICATION cli_out_pub FOR TABLE cli_out")
        for out, expected in [(notes, f"error: {notes} at offset 0: not a readable capture file header: "),
                              (missing, f"error: cannot create {missing}: the directory {missing.parent} does not "
                                        "exist\n")]:
            result = replwire("capture", "--dsn", pg18.dsn, "--slot", "cli_out_slot", "--publication", "cli_out_pub",
                              "--out", out, "--idle-exit", "0.1", *(["--snapshot"] if snapshot else []))
            assert result.returncode == 1, result.stderr
            assert result.stderr.startswith(expected) and result.stderr.count("\n") == 1, result.stderr
            assert "cli_out_slot" not in slots(conn)
        assert notes.read_text() == "# notes\n"


def test_capture_without_psycopg2_says_what_to_install(tmp_path):
    hide = "import sys; sys.modules['psycopg2'] = None; from replwire.codec.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", hide, "capture", "--dsn", "host=/nonexistent", "--slot", "s",
                             "--publication", "p", "--out", str(tmp_path / "x.rwcap")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == ("Error: replwire capture needs psycopg2, which is not installed: "
                             "pip install 'psycopg2-binary>=2.9' (replwire's 'live' extra)\n")
    assert not (tmp_path / "x.rwcap").exists()
