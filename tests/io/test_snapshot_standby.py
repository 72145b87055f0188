"""``replwire capture --snapshot`` against a hot standby of a real PostgreSQL 15 and 18 (started with
``pg_basebackup``): refused before anything is created, with a message saying to use the primary."""

from __future__ import annotations

import pytest

from tests.support.snapshot import capture_command, run

pytestmark = pytest.mark.server


@pytest.mark.parametrize("major", [15, 18])
def test_snapshot_on_a_standby_is_refused(major, tmp_path):
    from replwire.codec.testing.localserver import PgServer

    with PgServer.start(major) as primary:
        with primary.connect() as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
            conn.execute("INSERT INTO t VALUES (1)")
            conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        with primary.start_standby() as standby:
            with standby.connect() as conn:
                # the standby is one, and has the publication (so the refusal is the standby's, not a lookup's)
                assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
                assert conn.execute("SELECT count(*) FROM pg_publication WHERE pubname = 'pub'").fetchone() == (1,)
            out = tmp_path / "s.rwcap"
            result = run(capture_command(standby.dsn, out, "snap", "pub", "--idle-exit", "0.5"), timeout=120)
            assert result.returncode == 1, result.stderr
            assert ("the server is a standby (in recovery): take the snapshot from the primary, with --dsn naming "
                    "it") in result.stderr
            # nothing was created: no slot on either server, no capture file
            for server in (standby, primary):
                with server.connect() as conn:
                    assert conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall() == []
            assert not out.exists()
