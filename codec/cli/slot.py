"""``replwire slot list|drop``: the server's logical replication slots, with their lag and the WAL they hold;
and a slot dropped.

Strategy: shells over :func:`replwire.codec.io.preflight.list_slots` and :func:`~replwire.codec.io.preflight.
drop_slot`; ``list`` prints an aligned table (or ``--json``), ``drop`` refuses an active slot unless forced.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import click

from ._common import need_psycopg2

__all__ = ["slot_command"]


@click.group("slot")
def slot_command() -> None:
    """List or drop the server's logical replication slots."""


#: The table's columns: heading, the key of the row's dict, and whether it is a number (aligned right).  The
#: positions (LSNs) and the PostgreSQL 17 flags are in --json; the table fits a terminal.
_COLUMNS = (("slot", "slot_name", False), ("plugin", "plugin", False), ("database", "database", False),
            ("active", "active", False), ("lag", "lag_bytes", True), ("retained", "retained_bytes", True),
            ("wal_status", "wal_status", False), ("safe_wal_size", "safe_wal_size", True),
            ("inactive for", "inactive_since", True))


def _size(value: int) -> str:
    """Bytes as a person reads them: ``184 B``, ``36.2 MiB``."""
    if value < 1024:
        return f"{value} B"
    size, unit = value / 1024, "KiB"
    for larger in ("MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, larger
    return f"{size:.1f} {unit}"


def _age(since: str, now: datetime.datetime) -> str:
    """How long ago the ISO time ``since`` was: ``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 04 h``."""
    seconds = max(0, int((now - datetime.datetime.fromisoformat(since)).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds // 60 % 60:02d} min"
    return f"{seconds // 86400} d {seconds // 3600 % 24:02d} h"


def _cell(key: str, row: dict[str, Any], now: datetime.datetime) -> str:
    value = row.get(key)
    if key == "active":
        return f"pid {row['active_pid']}" if value else "no"
    if value is None:
        return "-"
    if key in ("lag_bytes", "retained_bytes", "safe_wal_size"):
        return _size(int(value))
    if key == "inactive_since":
        return _age(str(value), now)
    return str(value)


def table(rows: list[dict[str, Any]], now: datetime.datetime | None = None) -> list[str]:
    """``rows`` (:meth:`SlotRow.as_dict`) as the lines of an aligned text table, with the columns the server
    has (``inactive for`` only when the rows hold ``inactive_since``, from PostgreSQL 17); sizes in binary
    units, the time a slot has been inactive as an age from ``now``."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    columns = [c for c in _COLUMNS if c[1] in ("active",) or any(c[1] in row for row in rows)]
    cells = [[heading for heading, _, _ in columns]] + [[_cell(key, row, now) for _, key, _ in columns]
                                                         for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return ["  ".join(text.rjust(width) if number and n else text.ljust(width)
                      for text, width, (_, _, number) in zip(line, widths, columns)).rstrip()
            for n, line in enumerate(cells)]


@slot_command.command("list")
@click.option("--dsn", required=True, help="libpq connection string of the server.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per slot.")
def list_command(dsn: str, as_json: bool) -> None:
    """List the logical replication slots of the server: plugin, database, whether active (and the walsender's
    pid), lag (from confirmed_flush_lsn to the server's WAL end), retained (the WAL held from restart_lsn),
    wal_status, safe_wal_size and, from PostgreSQL 17, how long it has been inactive.  --json adds
    restart_lsn, confirmed_flush_lsn and, from PostgreSQL 17, inactive_since, failover and synced, with
    sizes in bytes.

    Exit status: 0 listed; 1 failed (the server cannot be reached, no privilege); 2 usage.
    """
    need_psycopg2("slot")
    from ..io.connection import CaptureError
    from ..io.preflight import list_slots

    try:
        rows = [row.as_dict() for row in list_slots(dsn)]
    except CaptureError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo("no logical replication slots on this server")
    else:
        for line in table(rows):
            click.echo(line)


@slot_command.command("drop")
@click.argument("slot")
@click.option("--dsn", required=True, help="libpq connection string of the server.")
@click.option("--force", is_flag=True, help="Terminate the walsender reading the slot (pg_terminate_backend), "
                                            "then drop it.")
def drop_command(slot: str, dsn: str, force: bool) -> None:
    """Drop the replication slot SLOT, and with it the WAL it holds.  An active slot (a client reads it) is
    refused unless --force, which terminates the walsender reading it first.

    Exit status: 0 dropped; 1 refused or failed (no such slot, active without --force, no privilege, the server
    cannot be reached); 2 usage.
    """
    need_psycopg2("slot")
    from ..io.connection import CaptureError
    from ..io.preflight import drop_slot

    try:
        terminated = drop_slot(dsn, slot, force=force)
    except CaptureError as error:
        raise click.ClickException(str(error)) from None
    how = f" (terminated walsender pid {terminated})" if terminated is not None else ""
    click.echo(f"dropped slot {slot!r}{how}")
