"""The Quickstart and Server set-up pages, run as a reader would: their SQL and shell commands, as printed,
against a PostgreSQL server of the test's own whose ``pg_hba.conf`` admits the capture role the way the
set-up page says (an ordinary line for the database, no ``replication`` line), and the tables Spark writes
compared with ``SELECT *`` on that server."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from replwire.codec.testing.localserver import PgServer, conninfo

pytest.importorskip("pyspark")
psycopg = pytest.importorskip("psycopg")
pq = pytest.importorskip("pyarrow.parquet")

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide"
QUICKSTART = (DOCS / "quickstart.md").read_text(encoding="utf-8")
SERVER = (DOCS / "server.md").read_text(encoding="utf-8")


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


@pytest.fixture(scope="module")
def server():
    srv = PgServer.start(15)
    try:
        with srv.connect() as conn:
            conn.execute("CREATE DATABASE app")
        # only the superuser, and the capture role to its database with a password: no `replication` line
        (srv.data_dir / "pg_hba.conf").write_text(
            f"local all {srv.superuser} trust\nlocal app cdc scram-sha-256\n", encoding="utf-8")
        with srv.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")
        yield srv
    finally:
        srv.stop()


def app(srv: PgServer) -> psycopg.Connection:
    return psycopg.connect(conninfo(host=str(srv.socket_dir), port=str(srv.port), user=srv.superuser,
                                    dbname="app"), autocommit=True)


#: The page's ``--idle-exit 10`` (a reader's margin, for a server across a network) as this test runs it: the
#: test's server is on this machine, and every write is committed before the capture starts, so the capture
#: has nothing to wait for after the first seconds.  The option, its spelling and its meaning are the page's;
#: only the ten seconds of nothing that end each of the two runs (20 s of this test's 31) are shorter.
IDLE_EXIT = ("--idle-exit 10", "--idle-exit 2")


def run_sh(block: str, cwd: pathlib.Path, dsn: str) -> subprocess.CompletedProcess[str]:
    script = re.sub(r'^export DSN=".*"\n', "", block, flags=re.M)  # the reader's DSN: the test server's
    script = script.replace(*IDLE_EXIT)
    assert "$DSN" in script or "DSN" not in block
    env = {**os.environ, "DSN": dsn, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_quickstart_as_printed(server, tmp_path):
    sql = blocks(QUICKSTART, "sql")
    sh = blocks(QUICKSTART, "sh")
    assert len(sql) == 3 and len(sh) == 3
    assert IDLE_EXIT[0] in sh[0]  # (the capture's option as the page prints it: this test shortens its wait)
    dsn = conninfo(host=str(server.socket_dir), port=str(server.port), dbname="app", user="cdc",
                   password="change-me")
    with app(server) as conn:  # the reader's database: a table with a key, one without
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, total numeric(10,2),"
                     " placed timestamptz)")
        conn.execute("INSERT INTO orders SELECT g, 'c' || g % 7, g * 1.5,"
                     " timestamptz '2026-11-01 00:00+00' + g * interval '1 hour' FROM generate_series(1, 500) g")
        conn.execute("CREATE TABLE audit (at timestamptz, note text)")
        conn.execute("INSERT INTO audit VALUES ('2026-11-01 00:00+00', 'one')")
        for statement in sql[:2]:  # 1. prepare the server, 2. a role and a publication
            conn.execute(statement)

    run_sh(sh[0], tmp_path, dsn)  # 3. capture: snapshot, then the stream, ending when idle
    with app(server) as conn:
        conn.execute("UPDATE orders SET total = total + 1 WHERE id <= 10")
        conn.execute("DELETE FROM orders WHERE id > 490")
        conn.execute("INSERT INTO orders VALUES (9000, 'new', 9.99, '2026-11-28 10:00+00')")
        conn.execute("INSERT INTO audit VALUES ('2026-11-02 00:00+00', 'two')")
    again = run_sh(sh[0], tmp_path, dsn)  # the same command again continues the same file
    assert "complete; resuming" in again.stderr

    first = run_sh(sh[1], tmp_path, dsn).stdout.splitlines()  # 4. decode
    assert len(first) == 3
    shown = json.loads(blocks(QUICKSTART, "json")[0])
    assert all(list(json.loads(line)) == list(shown) for line in first)
    every = subprocess.run([sys.executable, "-m", "replwire.codec.cli", "decode", "app.rwcap"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    row = next(json.loads(line) for line in every if '"table":"orders"' in line)  # the page's row, id 1
    assert {**row, "lsn": None} == {**shown, "lsn": None}

    run_sh(sh[2], tmp_path, dsn)  # 5. Spark
    orders = pq.read_table(tmp_path / "state" / "public.orders").to_pylist()
    with app(server) as conn:
        expected = conn.execute("SELECT id, customer, total, placed FROM orders ORDER BY id").fetchall()
        audit = conn.execute("SELECT at, note FROM audit ORDER BY at").fetchall()
    got = sorted((r["id"], r["customer"], decimal.Decimal(str(r["total"])), r["placed"]) for r in orders)
    assert [(i, c, t, p.astimezone(dt.timezone.utc)) for i, c, t, p in expected] == \
        [(i, c, t, p.astimezone(dt.timezone.utc)) for i, c, t, p in got]
    got_audit = sorted((r["at"], r["note"]) for r in pq.read_table(tmp_path / "state" / "public.audit").to_pylist())
    assert audit == got_audit

    # Server set-up: the table without a replica identity is the one its query lists; the slot shows
    listed, slots = (blocks(SERVER, "sql")[i] for i in (2, 3))
    with app(server) as conn:
        assert conn.execute(listed).fetchall() == [("public.audit",)]
        assert [row[0] for row in conn.execute(slots).fetchall()] == ["app_slot"]
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):  # what the page warns of
            conn.execute("UPDATE audit SET note = 'x'")
        conn.execute(sql[2])  # 6. clean up
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
