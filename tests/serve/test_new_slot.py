"""A client that makes its own slot is offered the whole stream.

postgres.js (the npm package ``postgres``) subscribes by creating a TEMPORARY slot and starting replication
at the slot's ``consistent_point``: the server's answer decides what it gets.  A server playing a stream
answers with where the stream starts, so such a client receives every transaction.  The test runs the real
postgres.js (installed from the npm registry into a temporary directory) against ``serve``, and checks the
rows it reports against the transactions the test built.
"""

from __future__ import annotations

import json
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


def test_a_new_slot_is_consistent_where_the_stream_starts():
    """Over libpq: CREATE_REPLICATION_SLOT answers the stream's first position, whatever an earlier client
    confirmed on that slot name; START_REPLICATION there gets every transaction."""
    with Server(source(), settings=ServeSettings(160000)) as server:
        server.slots.confirm("made", 0x1510)  # (a client before confirmed everything on this name)
        conn = psycopg2.connect(server.address.conninfo(),
                                connection_factory=psycopg2.extras.LogicalReplicationConnection)
        try:
            cur = conn.cursor()
            cur.create_replication_slot("made", output_plugin="pgoutput")
            _, consistent_point, _, _ = cur.fetchone()
            assert consistent_point == "0/1000"
            cur.start_replication(slot_name="made", decode=False, start_lsn=consistent_point,
                                  options={"proto_version": "1", "publication_names": "pub"})
            tags = b""
            deadline = time.monotonic() + 30
            while tags.count(b"C") < 3 and time.monotonic() < deadline:
                message = cur.read_message()
                if message is None:
                    select.select([cur], [], [], 1.0)
                    continue
                tags += bytes(message.payload)[:1]
        finally:
            conn.close()
    assert tags == b"BRIICBDCBIC"
