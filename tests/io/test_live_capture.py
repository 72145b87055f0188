"""Live capture against real servers: what it stores, what it acknowledges, and surviving a kill -9."""

from __future__ import annotations

import threading
import time

import pytest

from replwire.codec import LSN, Assembler, Transaction, parse
from replwire.codec.io.capture_file import read_capture
from replwire.codec.io.connection import CaptureError, CaptureSettings
from replwire.codec.io.live import LiveCapture
from replwire.codec.io.positions import message_completes
from replwire.codec.stream import snapshot_records
from tests.conftest import ALL_MAJORS
from tests.support.capture import pgoutput_records

pytestmark = pytest.mark.server


def sql_changes(conn, slot, proto_version, options):
    args = ["proto_version", str(proto_version)]
    for name, value in options.items():
        args += [name, value]
    rows = conn.execute("SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                        "VARIADIC %s::text[])", (slot, args)).fetchall()
    return [(LSN(lsn), bytes(data)) for lsn, data in rows]


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("major", ALL_MAJORS)
def test_live_capture_stores_what_the_sql_interface_sees(major, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")
    table, slot, peek = f"live_{major}", f"live_slot_{major}", f"live_peek_{major}"
    with server.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (peek,))
        settings = CaptureSettings(slot=slot, publication=f"{table}_pub", messages=True)
        capture = LiveCapture(server.dsn, tmp_path / "live.rwcap", settings, create_slot=False, sync_interval=0.1)
        stop = threading.Event()
        runner = threading.Thread(target=capture.run, kwargs={"stop": stop})
        runner.start()
        for i in range(20):
            conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (i, f"row {i} ü"))
        conn.execute(f"UPDATE {table} SET v = 'updated' WHERE id < 5")
        conn.execute("SELECT pg_logical_emit_message(false, 'live', 'not in a transaction')")
        conn.execute(f"DELETE FROM {table} WHERE id >= 15")
        end = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        wait_for(lambda: confirmed_lsn(conn, slot) >= end, timeout=60)  # all of it acknowledged, so in the file
        stop.set()
        runner.join(60)
        assert not runner.is_alive()
        wal_flushed = LSN(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])
        options = CaptureSettings(slot=peek, publication=f"{table}_pub", messages=True).options(server.version_num)
        expected = sql_changes(conn, peek, settings.protocol(server.version_num), options)
        confirmed = LSN(conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                     "WHERE slot_name = %s", (slot,)).fetchone()[0])
        conn.execute("SELECT pg_drop_replication_slot(%s)", (peek,))
    with read_capture(tmp_path / "live.rwcap") as reader:
        reading = reader.records()
        records = [r for r in reading if r.data[:1] == b"" or r.data[0] not in snapshot_records.KINDS]
        assert reading.tail is None
        assert reader.header.server_version == server.version_num
    assert [r.data for r in records] == [data for _, data in expected]
    # one Relation; 20 single-row transactions (B I C); an UPDATE and a DELETE of 5 rows; the message
    assert len(records) == 1 + 20 * 3 + (2 + 5) + 1 + (2 + 5)
    assert "".join(chr(r.data[0]) for r in records[:4]) == "BRIC"
    # every record at the LSN the SQL interface reports for it, except the 0/0 of non-final writes
    for record, (lsn, _) in zip(records, expected):
        assert record.lsn in (lsn, 0)
    # acknowledged: at least the end of the last transaction, never beyond what the server has flushed.  (The
    # server goes on writing WAL of its own after the last statement -- a standby snapshot, a prune of a page
    # read -- and an idle capture acknowledges it too, so the bound is the WAL flushed after the capture ended.)
    last_complete = max(p for p in (message_completes(parse(d, proto_version=reader.header.proto_version))
                                    for _, d in expected) if p is not None)
    assert end <= wal_flushed
    assert last_complete <= confirmed <= wal_flushed


@pytest.mark.parametrize("major", ALL_MAJORS)
def test_the_slot_holds_the_final_acknowledgement_when_run_returns(major, request, tmp_path):
    # A long sync interval: the only acknowledgement of the last commit is the one sent as the capture ends.
    # Closing the connection does not wait for the walsender to take it, so run() must wait until the slot
    # is released; each round starts a capture on the slot straight after the previous one returned.
    server = request.getfixturevalue(f"pg{major}")
    table, slot = f"final_ack_{major}", f"final_ack_slot_{major}"
    out = tmp_path / "final.rwcap"
    with server.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        settings = CaptureSettings(slot=slot, publication=f"{table}_pub")
        for round_ in range(4):
            for i in range(3):
                conn.execute(f"INSERT INTO {table} VALUES (%s)", (10 * round_ + i,))
            progress = LiveCapture(server.dsn, out, settings, create_slot=False, sync_interval=30).run(idle_exit=0.3)
            active, confirmed = conn.execute("SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots "
                                             "WHERE slot_name = %s", (slot,)).fetchone()
            with read_capture(out) as reader:
                data = [r.data for r in pgoutput_records(reader)]
                ends = [message_completes(parse(d, proto_version=reader.header.proto_version)) for d in data]
            last_commit = max(p for p in ends if p is not None)
            assert "".join(chr(d[0]) for d in data if d[:1] != b"R") == "BIC" * 3 * (round_ + 1)
            assert not active, f"round {round_}: the walsender still holds the slot"
            assert LSN(confirmed) >= last_commit, f"round {round_}"
            assert progress.flushed_lsn >= last_commit
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_set_up_failures_are_clear_errors(pg18, tmp_path):
    settings = CaptureSettings(slot="nope_slot", publication="no_such_publication")
    with pytest.raises(CaptureError, match=r"^publication 'no_such_publication' does not exist \(create it with "
                       r"CREATE PUBLICATION, or have it created FOR ALL TABLES with --create-publication, "
                       r"create_publication=True from Python\)$"):
        LiveCapture(pg18.dsn, tmp_path / "x.rwcap", settings).run(idle_exit=0.1)
    # no server listens there: the server's own words, on one line, and what to check
    nowhere = f"host={tmp_path} port=1 dbname=postgres"
    with pytest.raises(CaptureError, match=r"^cannot connect to the server: .*No such file or directory.* \(check "
                       r"the DSN\)$") as raised:
        LiveCapture(nowhere, tmp_path / "y.rwcap", settings).run(idle_exit=0.1)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "x.rwcap").exists() and not (tmp_path / "y.rwcap").exists()
    # a user without the REPLICATION attribute: the slot cannot be created, nor read over replication
    with pg18.connect() as conn:
        conn.execute("DROP ROLE IF EXISTS no_repl")
        conn.execute("CREATE ROLE no_repl LOGIN")
        conn.execute("CREATE PUBLICATION no_repl_pub")
        conn.execute("SELECT pg_create_logical_replication_slot('no_repl_slot', 'pgoutput')")
    try:
        plain = f"{pg18.dsn} user=no_repl"
        missing = CaptureSettings(slot="no_repl_new", publication="no_repl_pub")
        with pytest.raises(CaptureError, match=r"^cannot check or create slot 'no_repl_new': .*replication"):
            LiveCapture(plain, tmp_path / "z.rwcap", missing).run(idle_exit=0.1)
        existing = CaptureSettings(slot="no_repl_slot", publication="no_repl_pub")
        with pytest.raises(CaptureError, match=r"^cannot open a replication connection: .* \(it needs a user with "
                           r"the REPLICATION attribute and a free walsender, max_wal_senders\)$"):
            LiveCapture(plain, tmp_path / "z.rwcap", existing, create_slot=False).run(idle_exit=0.1)
    finally:
        with pg18.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot('no_repl_slot')")
            conn.execute("DROP PUBLICATION no_repl_pub")
            conn.execute("DROP ROLE no_repl")


# from PostgreSQL 15: it checks a two_phase slot, an option pgoutput has from 15 (a 14 gets "unrecognized pgoutput
# option: two_phase" from replwire's own check, before anything reaches the server)
@pytest.mark.parametrize("major", [m for m in ALL_MAJORS if m >= 15])
def test_slot_checks_are_clear_errors(major, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")

    def capture(slot, **settings):
        settings = CaptureSettings(slot=slot, publication="checks_pub", **settings)
        LiveCapture(server.dsn, tmp_path / f"{slot}.rwcap", settings, create_slot=False).run(idle_exit=0.1)

    with server.connect() as conn:
        conn.execute("CREATE PUBLICATION checks_pub FOR ALL TABLES")
        conn.execute("SELECT pg_create_physical_replication_slot('checks_physical')")
        conn.execute("SELECT pg_create_logical_replication_slot('checks_decoding', 'test_decoding')")
        conn.execute("SELECT pg_create_logical_replication_slot('checks_one_phase', 'pgoutput')")
        try:
            with pytest.raises(CaptureError, match="replication slot 'checks_missing' does not exist"):
                capture("checks_missing")
            with pytest.raises(CaptureError, match=r"slot 'checks_physical' uses no plugin \(a physical slot\), "
                                                   "not pgoutput"):
                capture("checks_physical")
            with pytest.raises(CaptureError, match="slot 'checks_decoding' uses test_decoding, not pgoutput"):
                capture("checks_decoding")
            with pytest.raises(CaptureError, match="slot 'checks_one_phase' was not created with two_phase"):
                capture("checks_one_phase", two_phase=True)
            settings = CaptureSettings(slot="checks_two_phase", publication="checks_pub", two_phase=True)
            LiveCapture(server.dsn, tmp_path / "created.rwcap", settings).run(idle_exit=0.1)  # created as asked
            assert conn.execute("SELECT plugin, to_jsonb(s) ->> 'two_phase' FROM pg_replication_slots AS s "
                                "WHERE slot_name = 'checks_two_phase'").fetchone() == ("pgoutput", "true")
        finally:
            for slot in ("checks_physical", "checks_decoding", "checks_one_phase", "checks_two_phase"):
                conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                             "WHERE slot_name = %s", (slot,))
            conn.execute("DROP PUBLICATION checks_pub")


def test_settings_are_checked_against_the_server():
    with pytest.raises(CaptureError, match="requested proto_version=3 does not support parallel streaming, need 4"):
        CaptureSettings(slot="s", publication="p", proto_version=3, streaming="parallel").options(180000)
    with pytest.raises(CaptureError, match="client sent proto_version=4 but server only supports protocol 3 or lower"):
        CaptureSettings(slot="s", publication="p", proto_version=4).options(150000)
    assert CaptureSettings(slot="s", publication="p", streaming="on").options(150000)["streaming"] == "true"


# ---------------------------------------------------------------------------------------------------------
# --via sql: pg_logical_slot_peek_binary_changes, then pg_replication_slot_advance


def committed(rows, proto):
    """Every committed transaction (end LSN, xid, changes) and non-transactional message, decoded from
    (lsn, data) rows by the assembler (untyped: the server's text forms)."""
    out = []
    for item in Assembler(proto_version=proto, typed=False).feed_all((lsn, None, data) for lsn, data in rows):
        if isinstance(item, Transaction):
            out.append((item.end_lsn, item.xid, list(item.changes)))
        else:
            out.append((item.lsn, None, [item]))
    return out


def confirmed_lsn(conn, slot):
    return LSN(conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone()[0])


def completed_in_file(path, proto):
    """The completed positions of the records in the file as it is now (no streaming: no Stream blocks)."""
    with read_capture(path) as reader:
        return {message_completes(parse(r.data, proto_version=proto)) for r in pgoutput_records(reader)} - {None}


@pytest.mark.parametrize("major", ALL_MAJORS)
def test_sql_capture_stores_what_the_sql_interface_sees(major, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")
    table, slot, peek = f"sql_{major}", f"sql_slot_{major}", f"sql_peek_{major}"
    out = tmp_path / "sql.rwcap"
    with server.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (peek,))
        settings = CaptureSettings(slot=slot, publication=f"{table}_pub", messages=True)
        proto = settings.protocol(server.version_num)
        # a small batch: many calls, each its own pgoutput session, some cut right after a transaction
        capture = LiveCapture(server.dsn, out, settings, create_slot=False, sync_interval=0.05, via="sql",
                              batch_size=7)
        stop = threading.Event()
        runner = threading.Thread(target=capture.run, kwargs={"stop": stop})
        runner.start()
        seen = []  # (the slot's confirmed position, then the completed positions in the file right after)

        def watch():
            with server.connect() as watcher:
                while runner.is_alive():
                    position = confirmed_lsn(watcher, slot)
                    seen.append((position, completed_in_file(out, proto)))
                    time.sleep(0.01)

        wait_for(out.exists)
        watching = threading.Thread(target=watch)
        watching.start()
        for i in range(40):
            time.sleep(0.02)
            conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (i, f"row {i} ü"))
            if i % 10 == 5:
                with conn.transaction():  # a larger transaction: one call returns all of it
                    conn.execute(f"INSERT INTO {table} SELECT g, 'bulk' FROM generate_series(%s::int, %s::int) g",
                                 (1000 * i, 1000 * i + 300))
                    conn.execute(f"UPDATE {table} SET v = 'bulk updated' WHERE id = %s", (1000 * i,))
            if i % 10 == 7:
                try:
                    with conn.transaction():
                        conn.execute(f"INSERT INTO {table} VALUES (-1, 'rolled back')")
                        raise RuntimeError
                except RuntimeError:
                    pass
                conn.execute("SELECT pg_logical_emit_message(false, 'sql', 'not in a transaction')")
        conn.execute(f"UPDATE {table} SET v = 'updated' WHERE id < 5")
        conn.execute(f"DELETE FROM {table} WHERE id >= 35 AND id < 1000")
        end = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        wait_for(lambda: confirmed_lsn(conn, slot) >= end, timeout=60)  # all of it acknowledged, so in the file
        stop.set()
        runner.join(60)
        watching.join(10)
        assert not runner.is_alive()
        wal_flushed = LSN(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])
        expected = sql_changes(conn, peek, proto, settings.options(server.version_num))
        confirmed = confirmed_lsn(conn, slot)
        conn.execute("SELECT pg_drop_replication_slot(%s)", (peek,))
    with read_capture(out) as reader:
        reading = reader.records()
        records = [r for r in reading if r.data[:1] == b"" or r.data[0] not in snapshot_records.KINDS]
        assert reading.tail is None and reader.header.server_version == server.version_num
    # the same rows as one call of the SQL interface, with the same LSNs, except that every call repeats the
    # Relation messages its changes need
    body = [(r.lsn, r.data) for r in records if r.data[:1] != b"R"]
    assert body == [(lsn, data) for lsn, data in expected if data[:1] != b"R"]
    assert {r.data for r in records if r.data[:1] == b"R"} == {d for _, d in expected if d[:1] == b"R"}
    assert sum(r.data[:1] == b"R" for r in records) > 1
    assert all(r.xid for r in records if r.data[:1] in b"BICUD")  # the xid column is stored too
    # and decoded: the same committed transactions and messages, the rolled-back ones nowhere
    decoded = committed([(r.lsn, r.data) for r in records], proto)
    assert decoded == committed(expected, proto)
    assert len(decoded) == 40 + 4 + 4 + 2 and not any(c.new and c.new["id"] == "-1" for *_, cs in decoded for c in cs)
    # the slot moved past everything (and past no WAL the server had not flushed when the capture ended: see
    # above), and at no moment past a transaction that was not in the file
    completed = sorted({p for p in (message_completes(parse(d, proto_version=proto)) for _, d in expected) if p})
    assert end <= wal_flushed
    assert completed[-1] <= confirmed <= wal_flushed
    assert len({position for position, _ in seen}) > 10
    for position, in_file in seen:
        assert {p for p in completed if p <= position} <= in_file, position


def test_sql_capture_of_an_idle_slot_does_not_hold_wal(pg18, tmp_path):
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE sql_idle (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE sql_idle_other (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION sql_idle_pub FOR TABLE sql_idle")
        conn.execute("SELECT pg_create_logical_replication_slot('sql_idle_slot', 'pgoutput')")
        conn.execute("INSERT INTO sql_idle_other SELECT generate_series(1, 1000)")  # not published
        end = LSN(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])
        settings = CaptureSettings(slot="sql_idle_slot", publication="sql_idle_pub")
        progress = LiveCapture(pg18.dsn, tmp_path / "idle.rwcap", settings, create_slot=False, via="sql",
                               sync_interval=0.05).run(idle_exit=0.3)
        assert confirmed_lsn(conn, "sql_idle_slot") >= end and progress.flushed_lsn >= end
        assert progress.messages == 0
        conn.execute("INSERT INTO sql_idle VALUES (1)")  # and what comes next is still captured
        LiveCapture(pg18.dsn, tmp_path / "idle.rwcap", settings, create_slot=False, via="sql",
                    sync_interval=0.05).run(idle_exit=0.3)
        conn.execute("SELECT pg_drop_replication_slot('sql_idle_slot')")
    with read_capture(tmp_path / "idle.rwcap") as reader:
        assert "".join(chr(r.data[0]) for r in pgoutput_records(reader)) == "BRIC"


def test_sql_capture_refuses_streaming(tmp_path):
    settings = CaptureSettings(slot="s", publication="p", streaming="on")
    with pytest.raises(CaptureError, match="streaming cannot be used with the SQL functions"):
        LiveCapture("host=/nonexistent", tmp_path / "x.rwcap", settings, via="sql").run()
    assert not (tmp_path / "x.rwcap").exists()
