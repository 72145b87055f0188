"""Live capture against real servers: what it stores, what it acknowledges, and surviving a kill -9."""

from __future__ import annotations

import threading
import time

import pytest

from replwire.codec.capture_file import read_capture
from replwire.codec.live import CaptureError, CaptureSettings, LiveCapture, completed_position, resume_point
from replwire.codec import LSN, parse

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


@pytest.mark.parametrize("major", [15, 18])
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
        runner = threading.Thread(target=capture.run, kwargs={"idle_exit": 1.5})
        runner.start()
        for i in range(20):
            conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (i, f"row {i} ü"))
        conn.execute(f"UPDATE {table} SET v = 'updated' WHERE id < 5")
        conn.execute("SELECT pg_logical_emit_message(false, 'live', 'not in a transaction')")
        conn.execute(f"DELETE FROM {table} WHERE id >= 15")
        end = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        runner.join(60)
        assert not runner.is_alive()
        options = CaptureSettings(slot=peek, publication=f"{table}_pub", messages=True).options(server.version_num)
        expected = sql_changes(conn, peek, settings.protocol(server.version_num), options)
        confirmed = LSN(conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                     "WHERE slot_name = %s", (slot,)).fetchone()[0])
        conn.execute("SELECT pg_drop_replication_slot(%s)", (peek,))
    with read_capture(tmp_path / "live.rwcap") as reader:
        records = list(reader)
        assert reader.tail is None
        assert reader.header.server_version == server.version_num
    assert [r.data for r in records] == [data for _, data in expected]
    # one Relation; 20 single-row transactions (B I C); an UPDATE and a DELETE of 5 rows; the message
    assert len(records) == 1 + 20 * 3 + (2 + 5) + 1 + (2 + 5)
    assert "".join(chr(r.data[0]) for r in records[:4]) == "BRIC"
    # every record at the LSN the SQL interface reports for it, except the 0/0 of non-final writes
    for record, (lsn, data) in zip(records, expected):
        assert record.lsn in (lsn, 0)
    # acknowledged: at least the end of the last transaction, never beyond what the server has
    last_complete = max(p for p in (completed_position(parse(d, proto_version=reader.header.proto_version))
                                    for _, d in expected) if p is not None)
    assert last_complete <= confirmed <= end


def test_unknown_publication_is_a_clear_error(pg18, tmp_path):
    settings = CaptureSettings(slot="nope_slot", publication="no_such_publication")
    with pytest.raises(CaptureError, match="publication 'no_such_publication' does not exist"):
        LiveCapture(pg18.dsn, tmp_path / "x.rwcap", settings).run(idle_exit=0.1)


def test_settings_are_checked_against_the_server():
    with pytest.raises(CaptureError, match="streaming=parallel needs protocol 4"):
        CaptureSettings(slot="s", publication="p", proto_version=3, streaming="parallel").options(180000)
    with pytest.raises(CaptureError, match="supports protocol versions 1 to 3"):
        CaptureSettings(slot="s", publication="p", proto_version=4).options(150000)
    assert CaptureSettings(slot="s", publication="p", streaming="on").options(150000)["streaming"] == "true"
