"""``replwire check`` and ``replwire slot list|drop`` against real servers: a healthy database passes check, and
each broken prerequisite fails it by name (wal_level on a server started with ``wal_level=replica``, a user
refused by pg_hba.conf, a keyless table in a FOR ALL TABLES publication, a role without REPLICATION, a slot of
another plugin); slot list shows a slot's lag as the server's own numbers bound it (PostgreSQL 15 and 18, whose
columns differ); slot drop drops, refuses an active slot naming its walsender, and with --force terminates the
walsender and drops it."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.conftest import ALL_MAJORS
from tests.support.snapshot import REPLWIRE, database, run, wait_for

pytestmark = pytest.mark.server

SCHEMA = [
    "CREATE TABLE keyed (id int PRIMARY KEY, v text)",
    "CREATE TABLE keyless (a int, b text)",
    "CREATE TABLE whole (a int, b text)",
    "ALTER TABLE whole REPLICA IDENTITY FULL",
    "CREATE TABLE byindex (a int NOT NULL, b text)",
    "CREATE UNIQUE INDEX byindex_a ON byindex (a)",
    "ALTER TABLE byindex REPLICA IDENTITY USING INDEX byindex_a",
    "CREATE TABLE nothing (id int PRIMARY KEY)",
    "ALTER TABLE nothing REPLICA IDENTITY NOTHING",
    "CREATE TABLE parted (a int, b text) PARTITION BY RANGE (a)",
    "CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (10)",
    "CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (10) TO (20)",
    "ALTER TABLE parted_2 REPLICA IDENTITY FULL",
    "CREATE PUBLICATION pub FOR TABLE keyed, whole",
    "CREATE PUBLICATION allpub FOR ALL TABLES",
    "CREATE PUBLICATION rooted FOR TABLE parted, byindex WITH (publish_via_partition_root = true)",
    "CREATE PUBLICATION inserts FOR ALL TABLES WITH (publish = 'insert')",
]


def _db(server, prefix: str) -> str:
    import psycopg

    dsn = database(server, prefix)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)
    return dsn


@pytest.fixture(scope="module")
def dsn18(pg18):
    return _db(pg18, "ops")


def sql(dsn: str, query: str, *params):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


def check(dsn: str, *more: str):
    result = run([REPLWIRE, "check", "--dsn", dsn, *more], timeout=60)
    lines = result.stdout.splitlines()
    return result, lines, [line for line in lines if line.startswith("FAIL")]


def test_check_passes_on_a_healthy_database(dsn18):
    result, lines, failed = check(dsn18, "--publication", "pub", "--slot", "ops_absent")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not failed
    assert "ok    wal_level: logical" in lines
    assert "ok    publication pub: exists, 2 tables" in lines
    assert "ok    replica identity: every published table has one (2 tables)" in lines
    assert any(line.startswith("ok    replication connection: accepted (walsender pid ") for line in lines)
    assert any(line.startswith("ok    role ") for line in lines)
    assert "ok    slot ops_absent: absent (replwire capture creates it, with pgoutput)" in lines
    # a publication without updates and deletes needs no replica identity, even of the keyless table
    result, lines, failed = check(dsn18, "--publication", "inserts")
    assert result.returncode == 0 and not failed, result.stdout


def test_check_fails_a_keyless_table_of_a_for_all_tables_publication(dsn18):
    result, lines, failed = check(dsn18, "--publication", "allpub")
    assert result.returncode == 1, result.stdout + result.stderr
    assert [line.split(":")[0] for line in failed] == ["FAIL  replica identity of public.keyless",
                                                       "FAIL  replica identity of public.nothing",
                                                       "FAIL  replica identity of public.parted_1"]
    assert "no primary key and REPLICA IDENTITY DEFAULT" in failed[0]
    assert failed[0].endswith("; ALTER TABLE public.keyless REPLICA IDENTITY FULL (or add a primary key, or "
                              "REPLICA IDENTITY USING INDEX of a unique index on NOT NULL columns)")
    assert ": REPLICA IDENTITY NOTHING: " in failed[1]
    assert "ok    publication allpub: exists, FOR ALL TABLES, 7 tables" in lines
    # a partitioned table published through its root is checked in its partitions
    result, lines, failed = check(dsn18, "--publication", "rooted")
    assert [line.split(":")[0] for line in failed] == ["FAIL  replica identity of public.parted_1"], lines
    assert "ok    publication rooted: exists, 2 tables" in lines


def test_check_fails_a_missing_publication(dsn18):
    result, lines, failed = check(dsn18, "--publication", "nope")
    assert result.returncode == 1
    assert len(failed) == 1 and failed[0].startswith("FAIL  publication nope: does not exist in database ops_")
    assert "CREATE PUBLICATION nope FOR ALL TABLES" in failed[0]


def test_check_fails_a_role_without_replication(dsn18):
    sql(dsn18, "DO $$ BEGIN CREATE ROLE ops_norep LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    result, lines, failed = check(dsn18 + " user=ops_norep", "--publication", "pub")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL  role ops_norep: neither REPLICATION nor superuser; ALTER ROLE ops_norep REPLICATION (as a " \
           "superuser)" in failed
    refused = [line for line in failed if line.startswith("FAIL  replication connection: ")]
    assert len(refused) == 1, failed  # the server's words, and what to change
    assert "FATAL:  permission denied to start WAL sender" in refused[0], refused
    assert refused[0].endswith("; give the role REPLICATION (ALTER ROLE ... REPLICATION)"), refused
    assert len(failed) == 2, failed  # (nothing else fails: the publication is readable by anyone)


def test_check_fails_wal_level_replica_and_a_pg_hba_refusal():
    from replwire.codec.testing.localserver import PgServer

    with PgServer.start(18, settings={"wal_level": "replica"}) as server:
        dsn = _db(server, "ops")
        result, lines, failed = check(dsn, "--publication", "pub")
        assert result.returncode == 1, result.stdout + result.stderr
        assert failed == ["FAIL  wal_level: replica; set wal_level = logical (ALTER SYSTEM SET wal_level = logical) "
                          "and restart the server"]
        # the same server refusing the user in pg_hba.conf: said in the server's words, with what to change
        sql(dsn, "CREATE ROLE ops_cdc LOGIN REPLICATION")
        (server.data_dir / "pg_hba.conf").write_text("local all postgres trust\n", encoding="utf-8")
        sql(dsn, "SELECT pg_reload_conf()")
        time.sleep(0.2)
        result, lines, failed = check(dsn + " user=ops_cdc", "--publication", "pub")
    assert result.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("FAIL  connection: "), lines
    assert 'FATAL:  no pg_hba.conf entry for host "[local]", user "ops_cdc", database "ops_' in lines[0]
    assert lines[0].endswith("; allow this user, database and host in pg_hba.conf (a logical replication "
                             "connection matches the lines of its database, not the 'replication' ones) and reload "
                             "the server"), lines


def _slot(dsn: str, name: str, plugin: str = "pgoutput") -> None:
    sql(dsn, "SELECT pg_create_logical_replication_slot(%s, %s)", name, plugin)


def lsn(text: str) -> int:
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def slot_list(dsn: str, *more: str):
    result = run([REPLWIRE, "slot", "list", "--dsn", dsn, *more], timeout=60)
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.parametrize("major", ALL_MAJORS)
def test_slot_list_shows_the_lag(major, request):
    server = request.getfixturevalue(f"pg{major}")
    dsn = database(server, "opslist")
    name = "ops_list_" + dsn.rsplit("_", 1)[1]
    _slot(dsn, name)
    try:
        sql(dsn, "CREATE TABLE t (id int PRIMARY KEY, v text)")
        sql(dsn, "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g")
        ((restart, confirmed, database_name, before, retained_before),) = sql(
            dsn, "SELECT restart_lsn::text, confirmed_flush_lsn::text, database, "
                 "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, "
                 "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                 "FROM pg_replication_slots WHERE slot_name = %s", name)
        rows = json.loads(slot_list(dsn, "--json").stdout)
        ((after, retained_after),) = sql(
            dsn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, "
                 "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                 "FROM pg_replication_slots WHERE slot_name = %s", name)
        (row,) = [r for r in rows if r["slot_name"] == name]
        assert before > 200_000  # (the writes: the slot lags by them)
        assert before <= row["lag_bytes"] <= after
        assert retained_before <= row["retained_bytes"] <= retained_after
        assert row["retained_bytes"] - row["lag_bytes"] == lsn(confirmed) - lsn(restart)  # (the same WAL end)
        assert (row["plugin"], row["database"], row["active"], row["active_pid"]) == ("pgoutput", database_name,
                                                                                      False, None)
        assert (row["restart_lsn"], row["confirmed_flush_lsn"]) == (restart, confirmed)
        assert row["wal_status"] == "reserved" and isinstance(row["safe_wal_size"], (int, type(None)))
        newer = {"inactive_since", "failover", "synced"}
        if major >= 17:
            assert newer <= set(row) and row["failover"] is False and row["synced"] is False
            assert row["inactive_since"] is not None
        else:
            assert not newer & set(row)
        retained_query = ("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots "
                          "WHERE slot_name = %s")
        ((low,),) = sql(dsn, retained_query, name)
        lines = slot_list(dsn).stdout.splitlines()
        ((high,),) = sql(dsn, retained_query, name)  # (the server's WAL may move meanwhile)
        assert lines[0].split() == ["slot", "plugin", "database", "active", "lag", "retained", "wal_status",
                                    "safe_wal_size", *(["inactive", "for"] if major >= 17 else [])]
        (line,) = [line for line in lines if line.startswith(name + " ")]
        cells = re.split(r"\s{2,}", line.strip())
        assert cells[:4] == [name, "pgoutput", database_name, "no"] and cells[6] == "reserved", cells
        number, unit = cells[5].split()  # (retained, in binary units)
        scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[unit]
        assert low - 0.05 * scale <= float(number) * scale <= high + 0.05 * scale, (cells, low, high)
        if major >= 17:  # (inactive since it was created: seconds, an age)
            assert re.fullmatch(r"\d+ s|\d+ min", cells[8]), cells
        if major >= 17:
            assert line.rstrip().endswith(" s") or line.rstrip().endswith(" min"), line  # (inactive: just now)
    finally:
        sql(dsn, "SELECT pg_drop_replication_slot(%s)", name)


def drop(dsn: str, *more: str):
    return run([REPLWIRE, "slot", "drop", "--dsn", dsn, *more], timeout=60)


def test_slot_drop_drops_and_names_a_missing_slot(dsn18):
    _slot(dsn18, "ops_drop")
    result = drop(dsn18, "ops_drop")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "dropped slot 'ops_drop'"
    assert sql(dsn18, "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'ops_drop'") == []
    result = drop(dsn18, "ops_drop")
    assert result.returncode == 1
    assert "no replication slot 'ops_drop' on this server" in result.stderr


def test_slot_drop_refuses_an_active_slot_and_force_drops_it(dsn18):
    import psycopg2
    import psycopg2.extras

    _slot(dsn18, "ops_active")
    _slot(dsn18, "ops_decoding", "test_decoding")
    reader = psycopg2.connect(dsn18, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        reader.cursor().start_replication(slot_name="ops_active", decode=False,
                                          options={"proto_version": "1", "publication_names": "pub"})
        wait_for(lambda: sql(dsn18, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'ops_active'")
                 [0][0] is not None, timeout=20, what="the slot to be active")
        ((pid,),) = sql(dsn18, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'ops_active'")
        # check: a slot in use elsewhere is a warning; one of another plugin a failure
        result, lines, failed = check(dsn18, "--publication", "pub", "--slot", "ops_active")
        assert result.returncode == 0, result.stdout
        assert f"warn  slot ops_active in use: active for walsender pid {pid}; a capture cannot read it while " \
               "another client does: stop that client" in lines
        result, lines, failed = check(dsn18, "--publication", "pub", "--slot", "ops_decoding")
        assert result.returncode == 1 and len(failed) == 1
        assert failed[0].startswith("FAIL  slot ops_decoding: exists, plugin test_decoding, database ops_")

        result = drop(dsn18, "ops_active")
        assert result.returncode == 1
        assert f"slot 'ops_active' is active: walsender pid {pid} is reading it" in result.stderr
        assert f"--force to terminate the walsender (pg_terminate_backend({pid}))" in result.stderr
        assert sql(dsn18, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'ops_active'") == [(pid,)]

        result = drop(dsn18, "ops_active", "--force")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"dropped slot 'ops_active' (terminated walsender pid {pid})"
        assert sql(dsn18, "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'ops_active'") == []
        deadline = time.monotonic() + 10
        while sql(dsn18, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sql(dsn18, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid) == []
    finally:
        reader.close()
        sql(dsn18, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                   "WHERE slot_name IN ('ops_active', 'ops_decoding') AND NOT active")
