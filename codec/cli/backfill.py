"""``replwire backfill``: ask the capture running on a slot to backfill tables, or say how its backfills stand.

Strategy: the request travels through the database, in the capture's own stream: a transactional logical
message of prefix ``replwire.backfill`` naming the slot and the tables (:func:`replwire.codec.io.backfill_state.
request`), which every capture of that database sees, ordered with the changes, and which the capture on that
slot takes (one started with ``--messages`` or ``--backfill``) -- also after a restart, as the request is in
its file.  It needs no table of its own and no privilege beyond ``EXECUTE`` on ``pg_logical_emit_message``.
``--status`` reads the capture file: each table's last run (chunks, rows, done or running) and the requests
not begun.
"""

from __future__ import annotations

import pathlib

import click

from ._common import need_psycopg2

__all__ = ["backfill_command"]


@click.command("backfill")
@click.argument("tables", nargs=-1, metavar="[SCHEMA.TABLE]...")
@click.option("--dsn", help="libpq connection string of the capture's database.")
@click.option("--slot", help="The slot of the capture to ask.")
@click.option("--status", "status_of", type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path),
              metavar="FILE", help="Say how the backfills of the capture file FILE stand, instead of asking.")
def backfill_command(tables: tuple[str, ...], dsn: str | None, slot: str | None,
                     status_of: pathlib.Path | None) -> None:
    """Ask the capture running on --slot to backfill TABLES (every published table when none is named): it
    copies them into its file while it streams, a chunk at a time (see replwire capture --backfill).  The
    request is a logical message in the database, which the capture sees in its stream; the capture must run
    with --messages or --backfill.  It returns at once: --status FILE says how the backfills stand.

    Exit status: 0 asked (or the status printed); 1 refused (no such slot in this database, a standby, no
    privilege); 2 usage.
    """
    if status_of is not None:
        if dsn or slot or tables:
            raise click.UsageError("--status FILE reads the file only: it takes no --dsn, --slot or tables")
        _status(status_of)
        return
    if not dsn or not slot:
        raise click.UsageError("asking a capture needs --dsn and --slot")
    need_psycopg2("backfill")
    import psycopg2

    from ...schema.capture import BACKFILL_PREFIX
    from ..io.backfill_state import request
    from ..io.connection import CaptureError, connect, server_error

    try:
        conn = connect(dsn)
    except CaptureError as error:
        raise click.ClickException(str(error)) from None
    try:
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("SELECT pg_is_in_recovery()")
        if cur.fetchone()[0]:
            raise click.ClickException("this server is a standby: a request is a logical message written into the "
                                       "WAL, which a standby cannot; ask on the primary")
        cur.execute("SELECT active_pid, plugin FROM pg_replication_slots WHERE slot_name = %s "
                    "AND database = current_database()", (slot,))
        found = cur.fetchone()
        if found is None:
            raise click.ClickException(f"no logical slot {slot!r} in this database: a capture sees the messages of "
                                       "its own database only (name the database of the capture's --dsn)")
        cur.execute("SELECT pg_logical_emit_message(true, %s, %s)::text", (BACKFILL_PREFIX, request(slot, tables)))
        (lsn,) = cur.fetchone()
    except psycopg2.Error as error:
        raise click.ClickException(f"cannot ask for the backfill: {server_error(error)}") from None
    finally:
        conn.close()
    what = ", ".join(tables) or "every published table"
    waiting = "" if found[0] is not None else " (no capture reads the slot now: the next one that does takes it)"
    click.echo(f"asked the capture on slot {slot!r} to backfill {what} (request at {lsn}){waiting}")


def _status(path: pathlib.Path) -> None:
    from ..io.backfill_state import status_lines
    from ..io.capture_file import CaptureFileError

    try:
        lines = status_lines(str(path))
    except CaptureFileError as error:
        raise click.ClickException(str(error)) from None
    for line in lines or [f"{path}: no backfill"]:
        click.echo(line)
