"""Helpers of the initial snapshot's tests: a database of its own per test, the capture command, and the
tables a capture folds to (:mod:`replwire.codec.stream.fold`) next to what ``SELECT`` says they hold."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from replwire.codec.decode import committed
from replwire.codec.split import open_inputs
from replwire.codec.stream.assembler import Transaction
from replwire.codec.stream.fold import fold
from replwire.codec.stream.value_types import UNCHANGED_TOAST

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")


def database(server: Any, prefix: str) -> str:
    """A new database on ``server``; returns its conninfo."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with server.connect() as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{server.dsn} dbname={name}"


def slot_of(dsn: str) -> str:
    """A slot name of the test's own (slots are per cluster, not per database)."""
    return "slot_" + dsn.rsplit("dbname=", 1)[1]


def drop_slots(dsn: str) -> None:
    """Drop the test database's slots (they would hold the shared server's WAL)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = current_database() AND NOT active")


def capture_command(dsn: str, out: Any, slot: str, publication: str, *more: str) -> list[str]:
    return [REPLWIRE, "capture", "--dsn", dsn, "--slot", slot, "--publication", publication, "--out", str(out),
            "--snapshot", "--sync-interval", "0.05", *more]


def run(command: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout)


def wait_for(predicate: Any, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def folded(paths: Sequence[Any]) -> tuple[dict[str, list[tuple[Any, ...]]], list[Any]]:
    """Every table's rows as the capture folds them (snapshot rows first, then the changes by commit), and
    the snapshot changes in the order decode gives them.  A table without key columns is keyed by all its
    columns."""
    changes: dict[str, list[Any]] = {}
    shapes: dict[str, tuple[list[str], list[str]]] = {}
    snapshot_rows = []
    position = 0

    def add(change: Any, commit_lsn: int) -> None:
        nonlocal position
        position += 1
        if change.op == "truncate":
            for schema, table in change.relations:
                changes.setdefault(f"{schema}.{table}", []).append(("truncate", commit_lsn, position, (), None,
                                                                    None, None))
            return
        if change.op == "message":
            return
        name = f"{change.schema}.{change.table}"
        columns = [c.name for c in change.relation.columns]
        key = [c.name for c in change.relation.columns if c.flags & 1] or columns
        shapes[name] = (columns, key)
        image = change.new if change.new is not None else (change.key or change.old)
        new = [None if image.get(c) is UNCHANGED_TOAST else image.get(c) for c in columns]
        old_row = change.key if change.key is not None else change.old
        old = [old_row[k] for k in key] if old_row is not None and change.op != "insert" else None
        toast = [c for c in columns if (change.new or {}).get(c) is UNCHANGED_TOAST]
        changes.setdefault(name, []).append((change.op, commit_lsn, position, new, old, toast, None))

    for item in committed(open_inputs(paths)):
        if isinstance(item, Transaction):
            for change in item.changes:
                add(change, int(item.commit_lsn))
        elif item.op == "snapshot":
            snapshot_rows.append(item)
            add(item, int(item.lsn))
        elif item.op == "backfill":  # (a row at its chunk's position: folded as its key's row there)
            add(item, int(item.lsn))
    tables = {}
    for name, table_changes in changes.items():
        if name not in shapes:
            tables[name] = []
            continue
        columns, key = shapes[name]
        ordered = sorted(table_changes, key=lambda c: (c[1], c[2]))
        tables[name] = fold(ordered, columns, key)
    return tables, snapshot_rows


def rows_of(folded_rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The values of folded rows, every one known (no unknown unchanged-TOAST value), sorted."""
    for row in folded_rows:
        assert row[-2] is None, f"a value was left unknown: {row[-2]} of {row[:2]}"
    return sorted((row[:-2] for row in folded_rows), key=repr)


def selected(dsn: str, query: str) -> list[tuple[Any, ...]]:
    """The rows of ``query`` as psycopg loads them, but json and jsonb as the server's text (``JsonText``,
    what replwire's typed values are), so they compare exactly."""
    import psycopg
    from psycopg.adapt import Loader

    from replwire.codec.stream.value_types import JsonText

    class JsonTextLoader(Loader):
        def load(self, data: Any) -> JsonText:
            return JsonText(bytes(data).decode("utf-8"))

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in ("json", "jsonb"):
            conn.adapters.register_loader(name, JsonTextLoader)
        return sorted((tuple(r) for r in conn.execute(query).fetchall()), key=repr)
