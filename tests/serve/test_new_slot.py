"""A client that makes its own slot is offered the whole stream.

postgres.js (the npm package ``postgres``) subscribes by creating a TEMPORARY slot and starting replication
at the slot's ``consistent_point``: the server's answer decides what it gets.  A server playing a stream
answers with where the stream starts, so such a client receives every transaction.  The test runs the real
postgres.js (installed from the npm registry into a temporary directory) against ``serve``, and checks the
rows it reports against the transactions the test built.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import time

import psycopg2
import psycopg2.extras
import pytest

from replwire.codec import LSN, Begin, Commit, Delete, Insert, Relation, RelationColumn, Timestamp, TupleColumn
from replwire.codec.serve import Server, ServeSettings, Source

POSTGRES_JS = "postgres@3.4.9"
PG_RECVLOGICAL = "/usr/lib/postgresql/15/bin/pg_recvlogical"

#: A Node script: subscribe with postgres.js to every change, print each as a JSON line, end after COUNT.
SUBSCRIBER = """
import postgres from 'postgres'
const [host, port, count] = process.argv.slice(2)
const sql = postgres({ host, port: Number(port), user: 'replwire', database: 'replwire', ssl: false,
                       publications: 'pub', connect_timeout: 20 })
let seen = 0
await sql.subscribe('*', (row, info) => {
  console.log(JSON.stringify({ command: info.command, table: info.relation.table, row }))
  if (++seen === Number(count)) sql.end({ timeout: 1 }).then(() => process.exit(0))
})
"""

STAMP = Timestamp(800_000_000_000_000)
RELATION = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                    columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1),
                             RelationColumn(flags=0, name="note", type_id=25, type_modifier=-1)])


def stream() -> list:
    """Three transactions at positions as a server's are (changes below their commit, the commit's end
    above it)."""
    return [
        (0x1000, Begin(final_lsn=LSN(0x1100), commit_time=STAMP, xid=700)), (0, RELATION),
        (0x1000, Insert(relation_id=16384, new=[TupleColumn.text("1"), TupleColumn.text("one")])),
        (0x1080, Insert(relation_id=16384, new=[TupleColumn.text("2"), TupleColumn.text("two")])),
        (0x1110, Commit(flags=0, commit_lsn=LSN(0x1100), end_lsn=LSN(0x1110), commit_time=STAMP)),
        (0x1200, Begin(final_lsn=LSN(0x1300), commit_time=STAMP, xid=701)),
        (0x1200, Delete(relation_id=16384, key=[TupleColumn.text("1"), TupleColumn.null()], old=None)),
        (0x1310, Commit(flags=0, commit_lsn=LSN(0x1300), end_lsn=LSN(0x1310), commit_time=STAMP)),
        (0x1400, Begin(final_lsn=LSN(0x1500), commit_time=STAMP, xid=702)),
        (0x1400, Insert(relation_id=16384, new=[TupleColumn.text("3"), TupleColumn.text("three")])),
        (0x1510, Commit(flags=0, commit_lsn=LSN(0x1500), end_lsn=LSN(0x1510), commit_time=STAMP)),
    ]


#: What the stream's changes are, as postgres.js reports them (int4 parsed to a number, a key-only delete
#: with the other columns null).
EXPECTED = [
    {"command": "insert", "table": "t", "row": {"id": 1, "note": "one"}},
    {"command": "insert", "table": "t", "row": {"id": 2, "note": "two"}},
    {"command": "delete", "table": "t", "row": {"id": 1, "note": None}},
    {"command": "insert", "table": "t", "row": {"id": 3, "note": "three"}},
]


@pytest.fixture(scope="module")
def postgres_js(tmp_path_factory):
    """A directory with postgres.js installed and the subscriber script in it."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run postgres.js")
    where = tmp_path_factory.mktemp("postgres-js")
    subprocess.run(["npm", "install", "--prefer-offline", "--no-audit", "--no-fund", "--silent", POSTGRES_JS],
                   cwd=where, check=True, timeout=300, capture_output=True)
    (where / "subscriber.mjs").write_text(SUBSCRIBER)
    return where


def source() -> Source:
    return Source.from_messages(stream(), proto_version=1, server_version=160000)


def test_postgres_js_receives_every_transaction(postgres_js):
    with Server(source(), settings=ServeSettings(160000)) as server:
        process = subprocess.Popen(["node", "subscriber.mjs", server.address.host, str(server.address.port),
                                    str(len(EXPECTED))], cwd=postgres_js, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            out, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        starts = list(server.starts)
    received = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert received == EXPECTED, err[-2000:]
    assert [start for _, start, _ in starts] == [0x1000]  # where the stream starts: its first position


def _stream_tags(cur, slot: str, start_lsn: str, commits: int, *, confirm: bool = False) -> bytes:
    """The first byte of each message START_REPLICATION at ``start_lsn`` sends, until ``commits`` commits
    or a second of silence; with ``confirm``, each commit's end is confirmed (flushed) as it arrives."""
    cur.start_replication(slot_name=slot, decode=False, start_lsn=start_lsn,
                          options={"proto_version": "1", "publication_names": "pub"})
    tags = b""
    deadline = time.monotonic() + 30
    quiet_since = time.monotonic()
    while tags.count(b"C") < commits and time.monotonic() < deadline:
        message = cur.read_message()
        if message is None:
            if time.monotonic() - quiet_since > 1.0 and commits == 0:
                break
            select.select([cur], [], [], 0.2)
            continue
        quiet_since = time.monotonic()
        payload = bytes(message.payload)
        tags += payload[:1]
        if confirm and payload[:1] == b"C":
            cur.send_feedback(flush_lsn=message.data_start, force=True)
    return tags


@contextlib.contextmanager
def _replication(server):
    """A cursor of a replication connection to ``server``, closed on leaving."""
    conn = psycopg2.connect(server.address.conninfo(), connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        yield conn.cursor()
    finally:
        conn.close()


def test_a_new_slot_is_consistent_where_the_stream_starts():
    """Over libpq: CREATE_REPLICATION_SLOT of a new name answers the stream's first position;
    START_REPLICATION there gets every transaction."""
    with Server(source(), settings=ServeSettings(160000)) as server:
        with _replication(server) as cur:
            cur.create_replication_slot("made", output_plugin="pgoutput")
            _, consistent_point, _, _ = cur.fetchone()
            assert consistent_point == "0/1000"
            tags = _stream_tags(cur, "made", consistent_point, 3)
    assert tags == b"BRIICBDCBIC"


def test_creating_a_slot_that_exists_is_refused_and_keeps_its_position():
    """The reviewer's sequence: create a slot, stream, confirm the end, reconnect, create it again (as
    ``pg_recvlogical --create-slot --if-not-exists --start`` does).  PostgreSQL answers 42710 and keeps the
    slot, so START_REPLICATION at 0/0 resumes after what was confirmed: nothing is sent again."""
    with Server(source(), settings=ServeSettings(160000)) as server:
        with _replication(server) as cur:
            cur.create_replication_slot("s", output_plugin="pgoutput")
            assert _stream_tags(cur, "s", "0/0", 3, confirm=True) == b"BRIICBDCBIC"
            deadline = time.monotonic() + 10
            while server.slots.get("s") < 0x1510 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert server.slots.get("s") == 0x1510
        with _replication(server) as cur:
            with pytest.raises(psycopg2.Error) as raised:
                cur.create_replication_slot("s", output_plugin="pgoutput")
            assert raised.value.pgcode == "42710"
            assert 'replication slot "s" already exists' in str(raised.value)
            assert _stream_tags(cur, "s", "0/0", 0) == b""
        assert server.slots.get("s") == 0x1510
        # a slot created and never confirmed on exists too; dropped, its name is new again
        with _replication(server) as cur:
            cur.create_replication_slot("fresh", output_plugin="pgoutput")
            with pytest.raises(psycopg2.Error) as raised:
                cur.create_replication_slot("fresh", output_plugin="pgoutput")
            assert raised.value.pgcode == "42710"
            cur.drop_replication_slot("s")
            cur.create_replication_slot("s", output_plugin="pgoutput")
            assert cur.fetchone()[1] == "0/1000"


def test_a_temporary_slot_lives_as_long_as_its_session():
    """A TEMPORARY slot's name is taken while the session that made it lives (another session's CREATE is
    refused, 42710), and free again once that session ends: PostgreSQL drops it then."""
    with Server(source(), settings=ServeSettings(160000)) as server:
        with _replication(server) as cur:
            cur.execute('CREATE_REPLICATION_SLOT "t" TEMPORARY LOGICAL pgoutput')
            assert cur.fetchone()[1] == "0/1000"
            with _replication(server) as other:
                with pytest.raises(psycopg2.Error) as raised:
                    other.execute('CREATE_REPLICATION_SLOT "t" TEMPORARY LOGICAL pgoutput')
                assert raised.value.pgcode == "42710"
            assert _stream_tags(cur, "t", "0/0", 3, confirm=True) == b"BRIICBDCBIC"
        deadline = time.monotonic() + 10
        while server.slots.get("t") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.slots.get("t") == 0  # (its confirmed position went with it)
        with _replication(server) as cur:
            cur.execute('CREATE_REPLICATION_SLOT "t" TEMPORARY LOGICAL pgoutput')
            assert cur.fetchone()[1] == "0/1000"
            assert _stream_tags(cur, "t", "0/1000", 3) == b"BRIICBDCBIC"


def test_pg_recvlogical_create_if_not_exists_resumes_after_what_it_confirmed():
    """``pg_recvlogical --create-slot --if-not-exists --start`` run twice: the first run creates the slot
    and writes the whole stream, confirming it; the second is told the slot exists (42710, which it takes
    as "go on") and starts it at 0/0 -- resumed after what was confirmed, it receives nothing."""
    if not os.access(PG_RECVLOGICAL, os.X_OK):
        pytest.skip(f"{PG_RECVLOGICAL} (Debian's postgresql-15) is needed")
    with Server(source(), settings=ServeSettings(150004, keepalive_interval=0.5)) as server:
        address = server.address
        command = [PG_RECVLOGICAL, "-h", address.host, "-p", str(address.port), "-U", "replwire",
                   "-d", "replwire", "--slot", "s", "--create-slot", "--if-not-exists", "--start",
                   "-P", "pgoutput", "-o", "proto_version=1", "-o", "publication_names=pub", "-f", "-",
                   "--no-loop", "-F", "0", "-s", "1", "-E", "0/1510"]
        first = subprocess.run(command, capture_output=True, timeout=60, env={**os.environ, "PGSSLMODE": "disable"})
        second = subprocess.run(command, capture_output=True, timeout=60, env={**os.environ, "PGSSLMODE": "disable"})
        starts = [start for _, start, _ in server.starts]
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    assert first.stdout.count(b"C") >= 3 and first.stdout.startswith(b"B")
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    assert second.stdout == b""
    assert starts == [0, 0x1510]
