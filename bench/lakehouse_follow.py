"""``python -m bench.lakehouse_follow``: ``replwire spark apply --follow`` keeping a Delta table up to date while
``replwire capture`` runs and a client writes at a steady offered load: how far behind the table is.

    python -m bench.lakehouse_follow [--rates 1000,5000,20000,50000] [--seconds 30] [--out FILE]

A PostgreSQL 18 of its own with the table of :mod:`bench.lakehouse` (an int key, an int, a numeric, a
timestamptz, a short text, a jsonb and a TOASTed text in one row of twenty), 100,000 rows in it before the
capture starts.  ``replwire capture`` (default ``--sync-interval``, 0.5 s) and ``replwire spark apply --follow
--format delta --interval 0.5 --master local[2]`` run as a user runs them, processes of their own, on the
machine's cores beside the server and the client.  For each offered load (changes per second), the client
commits one transaction every 0.1 s for ``--seconds`` -- half inserts, three tenths updates of rows written
before, a fifth deletes of the oldest rows -- and notes, inside each transaction before its commit, the WAL
insert position (at most the commit's LSN, and past every change of the transactions before it).  A sampler
reads the Delta table's position (its app-transaction version, the commit LSN of the last transaction it
holds) every 0.1 s: a transaction is in the table from the first sample whose position reaches its noted
one.  Its *lag* is that sample's time minus the moment its commit returned to the client.

Per load: the changes written and the rate the client reached, the lag's median, 95th percentile and maximum,
how many rounds of ``apply --follow`` applied something, and, once the load stops and the table has caught
up, the table's rows against ``SELECT count(*)`` (a benchmark whose result is wrong measures nothing).
Results go to ``bench/results/lakehouse_follow.json`` (``--out``), which the docs' benchmark page renders.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from . import measure
from .lakehouse import INSERT, REPLWIRE, SCHEMA, log

RESULTS = pathlib.Path(__file__).parent / "results" / "lakehouse_follow.json"
TICK = 0.1  # seconds between the client's transactions
PRELOAD = 100_000  # rows in the table before the capture starts
UPDATE = """UPDATE items SET qty = qty + 1, at = at + INTERVAL '1 second', doc = doc || '{"seen": true}'
    WHERE id BETWEEN %(first)s AND %(last)s"""
DELETE = "DELETE FROM items WHERE id BETWEEN %(first)s AND %(last)s"


class Sampler(threading.Thread):
    """Reads the Delta table's position every :data:`TICK` seconds: ``(monotonic time, position)`` pairs."""

    def __init__(self, path: str, app_id: str) -> None:
        super().__init__(daemon=True)
        self.path, self.app_id = path, app_id
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def position(self) -> int:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.path):
            return 0
        return DeltaTable(self.path).transaction_version(self.app_id) or 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), self.position()))
            time.sleep(TICK)


def offer(conn: Any, rate: int, seconds: float, ids: list[int]) -> list[tuple[float, int]]:
    """One transaction every :data:`TICK` s for ``seconds``, of about ``rate * TICK`` changes; per
    transaction, the moment its commit returned and the WAL insert position noted before it.  ``ids`` is
    ``[lowest id still there, next new id]``, kept up to date."""
    per = max(1, round(rate * TICK))
    inserts, updates = max(1, per // 2), per * 3 // 10
    deletes = per - inserts - updates
    noted: list[tuple[float, int]] = []
    start = time.monotonic()
    tick = 0
    while time.monotonic() - start < seconds:
        low, new = ids
        with conn.transaction():
            conn.execute(INSERT, {"first": new, "last": new + inserts - 1})
            if updates:
                conn.execute(UPDATE, {"first": new - updates - inserts, "last": new - inserts - 1})
            if deletes:
                conn.execute(DELETE, {"first": low, "last": low + deletes - 1})
            at = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0]
        noted.append((time.monotonic(), int(at)))
        ids[:] = [low + deletes, new + inserts]
        tick += 1
        pause = start + tick * TICK - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    return noted


def lags(noted: list[tuple[float, int]], samples: list[tuple[float, int]]) -> list[float]:
    """Each transaction's lag: the first sample that reaches its position, minus its commit (``inf`` when
    none does)."""
    out = []
    for committed, position in noted:
        seen = next((at for at, held in samples if at >= committed and held >= position), None)
        out.append(seen - committed if seen is not None else float("inf"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lakehouse_follow", description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="1000,5000,20000,50000", help="offered loads, changes per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of load per rate (default 30)")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    from replwire.codec.testing.localserver import PgServer

    work = pathlib.Path(tempfile.mkdtemp(prefix="replwire-follow-bench-"))
    server = PgServer.start(18, settings={"logical_decoding_work_mem": "256MB", "shared_buffers": "512MB"})
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    processes: list[subprocess.Popen[str]] = []
    rows: list[list[Any]] = []
    raw: dict[str, Any] = {"load_before": os.getloadavg()[0], "seconds": args.seconds, "rates": rates}
    try:
        with server.connect(autocommit=True) as conn:
            for statement in SCHEMA.split(";"):
                if statement.strip() and "bench_again" not in statement:
                    conn.execute(statement)
            with conn.transaction():
                conn.execute(INSERT, {"first": 1, "last": PRELOAD})
                preloaded = int(conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0])
            system, database = conn.execute("SELECT system_identifier::text, current_database() "
                                            "FROM pg_control_system()").fetchone()
            capture_file, lake = work / "app.rwcap", work / "lake"
            processes.append(subprocess.Popen(
                [REPLWIRE, "capture", "--dsn", server.dsn, "--slot", "bench", "--publication", "pub", "--out",
                 str(capture_file)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            while not capture_file.exists():
                time.sleep(0.05)
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "replwire.codec.cli", "spark", "apply", str(capture_file), "--out", str(lake),
                 "--format", "delta", "--follow", "--interval", "0.5", "--master", "local[2]"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
            sampler = Sampler(str(lake / "public.items"), f"replwire:{system}:{database}:bench")
            sampler.start()
            ids = [1, PRELOAD + 1]
            deadline = time.monotonic() + 300
            while (not sampler.samples or sampler.samples[-1][1] < preloaded) and time.monotonic() < deadline:
                time.sleep(0.2)
            log(f"preload of {PRELOAD:,} rows applied")
            for rate in rates:
                started = time.monotonic()
                noted = offer(conn, rate, args.seconds, ids)
                written = time.monotonic() - started
                last = noted[-1][1]
                deadline = time.monotonic() + 300
                while sampler.samples[-1][1] < last and time.monotonic() < deadline:
                    time.sleep(0.2)
                caught_up = time.monotonic() - started - written
                found = lags(noted, list(sampler.samples))
                ordered = sorted(found)
                per = max(1, round(rate * TICK))
                changes = per * len(noted)
                p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
                rows.append([f"{rate:,}", len(noted), changes, round(changes / written),
                             round(statistics.median(ordered), 2), round(p95, 2), round(ordered[-1], 2),
                             f"caught up {caught_up:.1f} s after the load stopped"])
                log(f"{rate:>7,} changes/s offered: {changes / written:,.0f} written, lag median "
                    f"{statistics.median(ordered):.2f} s, p95 {p95:.2f} s, max {ordered[-1]:.2f} s")
                raw[f"lags_{rate}"] = [round(x, 3) for x in found]
            server_rows = conn.execute("SELECT count(*) FROM items").fetchone()[0]
        sampler.stop.set()
        sampler.join()
        from deltalake import DeltaTable

        lake_rows = DeltaTable(str(lake / "public.items")).to_pyarrow_table(columns=["id"]).num_rows
        if lake_rows != server_rows:
            raise SystemExit(f"the Delta table has {lake_rows:,} rows, the server {server_rows:,}")
        follow = processes[1]
        follow.send_signal(signal.SIGTERM)
        _, err = follow.communicate(timeout=120)
        raw["follow_rounds"] = sum(1 for line in err.splitlines() if "changes applied to" in line)
        raw["follow_stderr_tail"] = err.splitlines()[-3:]
        raw["rows"] = {"server": server_rows, "delta": lake_rows}
        raw["load_after"] = os.getloadavg()[0]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
        server.stop()
    results = {
        "machine": measure.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "columns": ["offered (changes/s)", "transactions", "changes", "written (changes/s)", "lag median (s)",
                    "lag p95 (s)", "lag max (s)", "note"],
        "rows": rows,
        "notes": [f"PostgreSQL 18, {PRELOAD:,} rows before the capture; capture and apply --follow --format delta "
                  f"--interval 0.5 --master local[2] as processes of their own, on the same two cores as the "
                  f"server and the client; {args.seconds:.0f} s of load per rate; at the end the Delta table had "
                  f"the server's {raw['rows']['server']:,} rows; {raw['follow_rounds']} rounds of apply --follow "
                  f"applied changes"],
        "raw": raw,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
