"""``replwire check``: every server prerequisite of ``replwire capture``, checked before anything is created.

Strategy: a shell over :func:`replwire.codec.io.preflight.check`, which returns one finding per prerequisite;
this prints each as ``ok|FAIL|warn  <what>: <found>; <what to change>`` and exits 1 when one failed.
"""

from __future__ import annotations

import click

from ._common import need_psycopg2

__all__ = ["check_command"]


@click.command("check")
@click.option("--dsn", required=True, help="libpq connection string of the database to capture.")
@click.option("--publication", required=True, help="The publication replwire capture is to read.")
@click.option("--slot", help="The slot replwire capture is to read (checked if it exists).")
def check_command(dsn: str, publication: str, slot: str | None) -> None:
    """Check every server prerequisite of replwire capture, creating nothing: wal_level, free replication slots
    and WAL senders, the role's REPLICATION attribute, a replication connection, the publication and the
    replica identity of its tables, and with --slot the slot.  Each prints as a line
    'ok|FAIL|warn  WHAT: FOUND; WHAT TO CHANGE'.

    Exit status: 0 nothing failed (warnings allowed); 1 a prerequisite failed (or the server cannot be reached);
    2 usage.
    """
    need_psycopg2("check")
    from ..io.connection import CaptureError
    from ..io.preflight import check

    try:
        findings = check(dsn, publication, slot)
    except CaptureError as error:
        raise click.ClickException(str(error)) from None
    for finding in findings:
        click.echo(finding.line())
    if any(finding.status == "FAIL" for finding in findings):
        raise SystemExit(1)
