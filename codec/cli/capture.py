"""``replwire capture``: a logical replication slot captured into a capture file, until stopped.

Strategy: a shell over :class:`~replwire.codec.io.live.LiveCapture` (and, with ``--snapshot``,
:func:`~replwire.codec.io.snapshot.take_snapshot` first): it turns SIGTERM and Ctrl-C into a clean stop once
streaming, shows progress on stderr (a rewritten line on a terminal, a line every few seconds elsewhere),
runs the capture's :class:`~replwire.codec.io.metrics.CaptureMetrics` (the slot's guards, and with
``--metrics`` the HTTP endpoint), and maps the library's errors to the exit statuses its help lists.
"""

from __future__ import annotations

import pathlib
import re
import sys
from types import FrameType
from typing import TYPE_CHECKING

import click

from ..malloc_tuning import keep_freed_memory
from ._common import count_noun, need_psycopg2

if TYPE_CHECKING:
    from rich.console import Console

    from ..io.connection import CaptureSettings
    from ..io.snapshot import SnapshotResult

__all__ = ["capture_command"]

#: The units a SIZE may have, as PostgreSQL's settings take them (powers of 1024).
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """A SIZE option's bytes: ``1073741824``, ``512MB``, ``1GiB`` (kB, MB, GB, TB and KiB, ... are powers of
    1024)."""
    if value is None:
        return None
    match = re.fullmatch(r"(\d{1,15}(?:\.\d{1,6})?) ?(?:([kKmMgGtT])(?:i?[bB])?|[bB])?", value.strip())
    if match is None:
        raise click.BadParameter(f"{value!r} is not a size (e.g. 1GiB, 512MB, 1073741824)")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A DURATION option's seconds: ``30s``, ``15m``, ``1h``, ``1d`` (a plain number: seconds)."""
    from ..io.rotation import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@click.command("capture")
@click.option("--dsn", required=True, help="libpq connection string, e.g. 'host=/tmp port=5432 user=me dbname=app'.")
@click.option("--slot", required=True, help="Logical replication slot (created with pgoutput if missing).")
@click.option("--publication", required=True, help="Publication to capture.")
@click.option("--proto-version", type=click.IntRange(1, 4), help="Default: the highest the server supports.")
@click.option("--streaming", type=click.Choice(["on", "parallel"]), help="Stream large transactions.")
@click.option("--binary", is_flag=True, help="Ask for binary column values.")
@click.option("--messages", is_flag=True, help="Ask for pg_logical_emit_message messages.")
@click.option("--two-phase", is_flag=True, help="Ask for two-phase commit messages (the slot needs two_phase).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=pathlib.Path),
              help="Capture file; an existing one is resumed from the slot's confirmed position. With --rotate-*: "
                   "the name of a series of segments, OUT=app.rwcap writing app.000001.rwcap, app.000002.rwcap, ...")
@click.option("--rotate-size", callback=_size, metavar="SIZE",
              help="Go on in a new segment once the current one holds SIZE (e.g. 1GiB, 64MB), at the next "
                   "transaction boundary.")
@click.option("--rotate-time", callback=_duration, metavar="DURATION",
              help="Go on in a new segment once the current one is DURATION old (e.g. 30s, 15m, 1h, 1d) and holds "
                   "a transaction more, at the next transaction boundary.")
@click.option("--create-publication", is_flag=True, help="Create the publication FOR ALL TABLES if missing.")
@click.option("--no-create-slot", is_flag=True, help="Fail instead of creating a missing slot.")
@click.option("--idle-exit", type=click.FloatRange(min=0), help="Stop after this many seconds with nothing to capture.")
@click.option("--sync-interval", type=click.FloatRange(min=0.01), default=0.5, show_default=True,
              help="Seconds between fsyncs; positions are acknowledged only after one. With --via sql: seconds "
                   "between calls while there is nothing new.")
@click.option("--via", type=click.Choice(["replication", "sql"]), default="replication", show_default=True,
              help="Read the slot over the replication protocol, or with the SQL functions "
                   "(pg_logical_slot_peek_binary_changes, then pg_replication_slot_advance) over an ordinary "
                   "connection, for servers that refuse replication connections.")
@click.option("--batch-size", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="With --via sql: rows asked for per call (a transaction is never split, so a call can return "
                   "more).")
@click.option("--snapshot", "initial_snapshot", is_flag=True,
              help="First copy every table of the publication into OUT (an initial snapshot, consistent with a "
                   "new slot created with it), then stream the changes after it.")
@click.option("--backfill", "backfill", multiple=True, metavar="SCHEMA.TABLE",
              help="Copy this table into OUT while streaming, in chunks by key, each read in a short transaction "
                   "between two watermarks of the stream (repeatable; 'all': every published table). Turns on "
                   "--messages. Run again, the capture continues each table from its last chunk in OUT.")
@click.option("--backfill-budget", type=click.FloatRange(min=0.001), default=0.2, show_default=True,
              help="Seconds of reading a backfill chunk aims at: no transaction of the backfill lasts much longer.")
@click.option("--backfill-rate", type=click.FloatRange(min=1), metavar="ROWS",
              help="Read at most ROWS rows per second per table backfilled (default: as fast as the chunks go), "
                   "to spare a busy server.")
@click.option("--metrics", "metrics_at", metavar="[HOST:]PORT",
              help="Serve metrics (OpenMetrics/Prometheus text) at http://HOST:PORT/metrics; HOST is 127.0.0.1 "
                   "unless given (0.0.0.0:PORT: every interface).")
@click.option("--warn-safe-wal", callback=_size, metavar="SIZE",
              help="Warn when the slot's safe_wal_size (what the server may write before it removes WAL the "
                   "slot needs, under max_slot_wal_keep_size) falls under SIZE (default: 1GiB).")
@click.option("--failover", is_flag=True,
              help="PostgreSQL 17+: use a failover slot (created with FAILOVER, or made one), which a standby "
                   "with sync_replication_slots keeps in step; with a --dsn naming both servers and "
                   "target_session_attrs=read-write, the capture goes on from the promoted standby.")
@click.option("--no-reconnect", is_flag=True,
              help="Exit (status 3) when the connection to the server is lost, instead of reconnecting and "
                   "resuming by itself (like pg_recvlogical's --no-loop).")
def capture_command(dsn: str, slot: str, publication: str, proto_version: int | None, streaming: str | None,
                    binary: bool, messages: bool, two_phase: bool, out: pathlib.Path, create_publication: bool,
                    no_create_slot: bool, idle_exit: float | None, sync_interval: float, via: str,
                    batch_size: int, initial_snapshot: bool, backfill: tuple[str, ...], backfill_budget: float,
                    backfill_rate: float | None, metrics_at: str | None, warn_safe_wal: int | None,
                    no_reconnect: bool, failover: bool, rotate_size: int | None,
                    rotate_time: float | None) -> None:
    """Capture a logical replication slot into a capture file until Ctrl-C or SIGTERM (or --idle-exit).

    Only positions already fsynced to OUT are acknowledged to the server, so after a crash running the same
    command again continues where the server's slot stands, and the file holds every change once.  A lost
    connection (a server restart, a failover, the walsender terminated) is resumed the same way, by itself,
    after a growing delay (unless --no-reconnect).  With --snapshot the slot is created with an exported
    snapshot and every published table is copied first; a snapshot that was interrupted is taken again from
    the start by the same command.  With --backfill the tables named are copied while the capture streams,
    on any slot, a chunk at a time; run again, it continues from the last chunk in OUT.  The slot's state is
    read every 10 s, and a warning says when its WAL is at risk (--warn-safe-wal, wal_status unreserved or
    lost, an idle_replication_slot_timeout).  With --metrics the capture's counters and positions, and the
    slot's state, are served over HTTP.  With --rotate-size or --rotate-time OUT names a series of segments,
    one file after the other, each closed between two transactions; a restart continues in the newest.

    Exit status: 0 stopped (Ctrl-C, SIGTERM, --idle-exit); 1 refused or failed (server, slot, publication,
    settings, output checks); 2 usage; 3 connection lost or not made (with --no-reconnect, or at the start);
    4 OUT could not be written (a full disk: it is cut back to its last durable record); 5 OUT is damaged
    inside; 130 interrupted before streaming (during the snapshot, say) or by a second signal while
    reconnecting.
    """
    import signal
    import threading
    import time

    from rich.console import Console

    need_psycopg2("capture")
    from ..io.connection import CaptureError, CaptureSettings
    from ..io.live import LiveCapture
    from ..io.metrics import DEFAULT_WARN_SAFE_WAL, CaptureMetrics, parse_listen
    from ..io.positions import Progress

    try:
        listen = None if metrics_at is None else parse_listen(metrics_at)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'--metrics'") from None

    console = Console(stderr=True)
    shown = {"at": 0.0, "messages": 0, "bytes": 0, "transactions": 0}

    def report(progress: Progress) -> None:
        now = time.monotonic()
        if now - shown["at"] < (0.5 if console.is_terminal else 5.0):
            return
        elapsed = now - progress.started
        clock = f"{int(elapsed) // 3600}:{int(elapsed) % 3600 // 60:02d}:{int(elapsed) % 60:02d}"
        if progress.messages == 0 and progress.current_lsn == 0:
            line = f"{clock} waiting for changes; flushed {progress.flushed_lsn}"
        else:
            seconds = max(now - (shown["at"] or progress.started), 1e-6)  # (the rates since the last line)

            def rate(name: str, value: int) -> float:
                return max(0, value - shown[name]) / seconds

            line = (f"{clock} {count_noun(progress.messages, 'message')} ({rate('messages', progress.messages):,.0f}"
                    f"/s), {progress.bytes / 2**20:.1f} MiB ({rate('bytes', progress.bytes) / 2**20:,.1f} MiB/s), "
                    f"{count_noun(progress.transactions, 'transaction')} "
                    f"({rate('transactions', progress.transactions):,.0f}/s); received {progress.current_lsn}, "
                    f"flushed {progress.flushed_lsn}, lag {count_noun(progress.lag_bytes, 'byte')}")
        shown.update(at=now, messages=progress.messages, bytes=progress.bytes, transactions=progress.transactions)
        console.print(line, end="\r" if console.is_terminal else "\n", highlight=False, soft_wrap=True)

    def say(line: str) -> None:
        console.print(line, highlight=False, soft_wrap=True)

    # SIGTERM (what service managers send) is a stop like Ctrl-C.  Once streaming, the first one asks the loop
    # to stop after its last acknowledgement (also while it reconnects); a second one interrupts.
    stop = threading.Event()
    streaming_phase = {"on": False}

    def on_stop_signal(signum: int, frame: FrameType | None) -> None:
        if not streaming_phase["on"] or stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, on_stop_signal)
    signal.signal(signal.SIGINT, on_stop_signal)
    keep_freed_memory()  # (the blocks a capture writes and frees, reused: see replwire.codec.malloc_tuning)
    if initial_snapshot and via == "sql":
        raise click.UsageError("--snapshot needs a replication connection (the slot is created with an exported "
                               "snapshot); it cannot be used with --via sql")
    if initial_snapshot and no_create_slot:
        raise click.UsageError("--snapshot creates its slot: it cannot be used with --no-create-slot")
    if backfill and via == "sql":
        raise click.UsageError("--backfill needs a replication connection (its chunks are written as their "
                               "watermarks arrive); it cannot be used with --via sql")
    rotation = None
    if rotate_size is not None or rotate_time is not None:
        from ..io.rotation import Rotation

        if backfill:
            raise click.UsageError("--rotate-size and --rotate-time cannot be used with --backfill yet")
        if rotate_size is not None and rotate_size < 1:
            raise click.BadParameter("must be at least 1 byte", param_hint="'--rotate-size'")
        rotation = Rotation(size=rotate_size, age=rotate_time)
    settings = CaptureSettings(slot=slot, publication=publication, proto_version=proto_version, streaming=streaming,
                               binary=binary, messages=messages or bool(backfill), two_phase=two_phase)
    capture = LiveCapture(dsn, out, settings, create_slot=not (no_create_slot or initial_snapshot),
                          create_publication=create_publication, sync_interval=sync_interval, progress=report,
                          via=via, batch_size=batch_size, reconnect=not no_reconnect, log=say,
                          backfill=["all"] if "all" in backfill else list(backfill), backfill_budget=backfill_budget,
                          backfill_rate=backfill_rate, failover=failover, rotation=rotation)
    guard = DEFAULT_WARN_SAFE_WAL if warn_safe_wal is None else warn_safe_wal
    metrics = CaptureMetrics(capture, listen, warn_safe_wal=guard, log=say)  # (the guards, and what --metrics serves)
    taken = None  # the snapshot taken by this run (the stream after it is new, not resumed)
    try:
        capture.check_output()  # before anything is done on the server, the snapshot included
        try:
            metrics.start()
        except OSError as error:
            raise click.ClickException(f"cannot serve metrics on {metrics_at}: {error.strerror or error}"
                                       ) from None
        if initial_snapshot:
            if rotation is None:
                taken = _snapshot(console, dsn, out, settings, create_publication, failover)
            else:  # into segment 1; past it, the snapshot was complete (streaming came after it)
                from ..io.rotation import segment_path, segments

                if max((number for number, _ in segments(out)), default=1) == 1:
                    taken = _snapshot(console, dsn, pathlib.Path(segment_path(out, 1)), settings, create_publication,
                                      failover, segment=1)
        streaming_phase["on"] = True
        progress = capture.run(stop=stop, idle_exit=idle_exit)
    except CaptureError as error:
        if console.is_terminal:
            console.print()  # (after a progress line that ends in a carriage return)
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_status)
    except KeyboardInterrupt:  # (a second Ctrl-C, or one before streaming): what is in OUT is durable
        click.echo("interrupted", err=True)
        sys.exit(130)
    finally:
        metrics.stop()
    resumed = capture.resumed_records
    after = f", resumed after {count_noun(resumed, 'record')}" if resumed is not None and taken is None else ""
    rows = f"{taken.rows:,} snapshot row{'s' if taken.rows != 1 else ''} and " if taken is not None else ""
    again = f", reconnected {count_noun(capture.reconnects, 'time')}" if capture.reconnects else ""
    console.print(f"captured {rows}{count_noun(progress.messages, 'message')} ({count_noun(progress.bytes, 'byte')}), "
                  f"{count_noun(progress.transactions, 'transaction')} into {capture.out}{after}{again}; flushed up to "
                  f"{progress.flushed_lsn}", highlight=False, soft_wrap=True)


def _snapshot(console: Console, dsn: str, out: pathlib.Path, settings: CaptureSettings,
              create_publication: bool, failover: bool = False, segment: int | None = None
              ) -> SnapshotResult | None:
    """``capture --snapshot``'s first part: the snapshot, with each table's progress on stderr.  The
    :class:`~replwire.codec.io.snapshot.SnapshotResult` when it was taken now (``None``: the file's snapshot
    was complete already)."""
    from ..io.snapshot import TableProgress, take_snapshot

    def report(table: TableProgress) -> None:
        seconds = max(table.seconds, 1e-6)
        line = (f"snapshot {table.schema}.{table.table}: {table.rows:,} rows, {table.bytes / 2**20:.1f} MiB in "
                f"{table.seconds:.2f} s ({table.rows / seconds:,.0f} rows/s, {table.bytes / 2**20 / seconds:.1f} "
                f"MiB/s){', done' if table.done else ''}")
        console.print(line, highlight=False, soft_wrap=True)

    try:
        result = take_snapshot(dsn, out, settings, create_publication=create_publication, progress=report,
                               failover=failover, segment=segment)
    except KeyboardInterrupt:
        console.print("snapshot interrupted: run the same command again to take it again", highlight=False)
        sys.exit(130)
    if result.taken:
        again = " (an interrupted snapshot was dropped and taken again)" if result.retaken else ""
        console.print(f"snapshot at {result.lsn}: {count_noun(result.tables, 'table')}, {result.rows:,} "
                      f"row{'s' if result.rows != 1 else ''}{again}; streaming the changes after it",
                      highlight=False, soft_wrap=True)
    else:
        console.print(f"the snapshot at {result.lsn} in {out} is complete; resuming the changes after it",
                      highlight=False, soft_wrap=True)
    return result if result.taken else None
