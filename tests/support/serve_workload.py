"""A workload for the serve tests: tables a subscriber can mirror, changes that exercise the hard parts of the
stream, captured live from a publisher; and the helpers that set up a subscriber and compare tables.

The workload (:data:`WORKLOAD`), run on the publisher after the slot exists, gives: TOASTed values and an
UPDATE that leaves them unchanged (``items.payload``, stored EXTERNAL so it is out of line); a large
transaction (streamed, ``logical_decoding_work_mem`` is 64 kB on the test servers) with a savepoint rolled
back in the middle; a large transaction rolled back as a whole; UPDATE and DELETE under REPLICA IDENTITY
FULL (``events``); TRUNCATE (``scratch``); a prepared transaction committed and one rolled back.
:func:`capture` reads a slot with ``replwire``'s live capture into a capture file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from replwire.codec.io.connection import CaptureSettings
from replwire.codec.io.live import LiveCapture
from replwire.codec.testing.localserver import conninfo

SCHEMA = [
    "CREATE TABLE items (id int PRIMARY KEY, name text, payload text)",
    "ALTER TABLE items ALTER COLUMN payload SET STORAGE EXTERNAL",
    "CREATE TABLE events (id bigint, kind text, amount numeric)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
    "CREATE TABLE scratch (id int PRIMARY KEY, note text)",
]
TABLES = {"items": "id", "events": "id, kind, amount", "scratch": "id"}

WORKLOAD = [
    "INSERT INTO items SELECT g, 'item ' || g, repeat(md5(g::text), 300) FROM generate_series(1, 20) g",
    "UPDATE items SET name = 'renamed ' || id WHERE id <= 10",  # payload unchanged: TOAST not sent
    ["INSERT INTO events SELECT g, 'kept', g * 1.5 FROM generate_series(1, 3000) g",
     "SAVEPOINT s1",
     "INSERT INTO events SELECT g, 'rolled back', 0 FROM generate_series(3001, 6000) g",
     "ROLLBACK TO SAVEPOINT s1",
     "INSERT INTO events SELECT g, 'after', g FROM generate_series(6001, 7000) g"],
    ["INSERT INTO items SELECT g, 'aborted', repeat('y', 200) FROM generate_series(1000, 4000) g",
     "ROLLBACK"],
    "UPDATE events SET amount = amount + 1 WHERE id <= 100",
    "DELETE FROM events WHERE id BETWEEN 101 AND 200",
    "INSERT INTO scratch SELECT g, 'before' FROM generate_series(1, 50) g",
    "TRUNCATE scratch",
    "INSERT INTO scratch VALUES (1, 'after truncate'), (2, 'two')",
    "UPDATE items SET payload = repeat('z', 5000) WHERE id = 11",
    "DELETE FROM items WHERE id > 15",
    ["INSERT INTO scratch VALUES (3, 'prepared, then committed')", "PREPARE TRANSACTION 'serve_kept'"],
    "COMMIT PREPARED 'serve_kept'",
    ["INSERT INTO scratch VALUES (4, 'prepared, then rolled back')", "PREPARE TRANSACTION 'serve_dropped'"],
    "ROLLBACK PREPARED 'serve_dropped'",
]


def create_database(server: Any, name: str) -> str:
    """A fresh database ``name`` on ``server`` (dropped first if it exists); its conninfo."""
    with server.connect() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return conninfo(host=str(server.socket_dir), port=str(server.port), user=server.superuser, dbname=name)


def run(dsn: str, statements: list[Any]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for step in statements:
            if isinstance(step, str):
                conn.execute(step)
                continue
            conn.execute("BEGIN")
            for statement in step:
                conn.execute(statement)
            if step[-1] != "ROLLBACK" and not step[-1].startswith("PREPARE TRANSACTION"):
                conn.execute("COMMIT")


def publisher(server: Any, name: str, *slots: str, two_phase: tuple[str, ...] = ()) -> str:
    """Set up the publisher database: schema, publication ``pub``, pgoutput slots (those in ``two_phase``
    with two-phase decoding); returns its conninfo."""
    dsn = create_database(server, name)
    run(dsn, SCHEMA + ["CREATE PUBLICATION pub FOR ALL TABLES"])
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for slot in slots:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                         (slot, slot in two_phase))
    return dsn


def drop_slot(dsn: str, slot: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def capture(dsn: str, slot: str, out: Path, *, proto: int, streaming: str | None = "on",
            two_phase: bool = False) -> Path:
    """Read everything in ``slot`` into the capture file ``out`` (live capture, until it is idle)."""
    settings = CaptureSettings(slot=slot, publication="pub", proto_version=proto, streaming=streaming,
                               two_phase=two_phase)
    LiveCapture(dsn, out, settings, create_slot=False, sync_interval=0.1).run(idle_exit=1.5)
    return out


def table_rows(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
                for table, order in TABLES.items()}


def subscribe(server: Any, name: str, conninfo: str, slot: str, *, streaming: str = "on",
              two_phase: bool = False) -> str:
    """A subscriber database ``name`` with the schema and a subscription to ``conninfo``'s ``pub``."""
    dsn = create_database(server, name)
    run(dsn, SCHEMA)
    # two_phase only when asked for: a PostgreSQL 14 subscriber knows no such parameter
    run(dsn, [f"CREATE SUBSCRIPTION sub_{name} CONNECTION '{conninfo}' PUBLICATION pub WITH (create_slot = false, "
              f"copy_data = false, streaming = {streaming}, slot_name = '{slot}'"
              + (", two_phase = true)" if two_phase else ")")])
    return dsn


def unsubscribe(dsn: str, name: str) -> None:
    run(dsn, [f"ALTER SUBSCRIPTION sub_{name} DISABLE", f"ALTER SUBSCRIPTION sub_{name} SET (slot_name = NONE)",
              f"DROP SUBSCRIPTION sub_{name}"])


def wait_equal(dsn: str, expected: Any, timeout: float = 90.0, read: Callable[[str], Any] = table_rows) -> Any:
    """Poll the subscriber's tables (as ``read`` reads them) until they equal ``expected`` (or the time runs
    out); the last read."""
    deadline = time.monotonic() + timeout
    rows = read(dsn)
    while rows != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        rows = read(dsn)
    return rows
