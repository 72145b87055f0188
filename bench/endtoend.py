"""End to end from a live PostgreSQL under a write load: ``replwire capture`` draining a slot while pgbench
writes, then ``replwire decode`` on what it captured, with ``pg_recvlogical`` draining a second slot of the
same changes side by side as the server's own pace.

    python -m bench endtoend [--seconds 30] [--loads 2000/8,0/8,0/100] [--clients 2] [--out FILE]

Strategy: a PostgreSQL 18 of its own (:class:`~replwire.codec.testing.localserver.PgServer`) gets a table
of 100,000 rows, a publication of it and, per load, two fresh pgoutput slots.  Both clients start, as users
run them (processes of their own): ``replwire capture`` (protocol 4, its default ``--sync-interval``) and
``pg_recvlogical`` (protocol 4, to a file, fsync and status every second, its shortest).  Then pgbench runs
``--clients`` connections for ``--seconds``, each transaction inserting N rows and updating 2, at a set
rate of transactions per second; ``--loads`` lists the loads as ``RATE/N`` (rate 0: as fast as it goes).
Every half second the slots' lag is sampled: the server's WAL end (``pg_current_wal_lsn()``) minus each
slot's ``confirmed_flush_lsn``, and the walsender's ``flush_lag``.  Once the load ends, the WAL end is taken
and each client's drain ends when its slot has confirmed it; both are then stopped with SIGINT (capture's
final fsync and acknowledgement included); peak RSS is each process's ``VmHWM``.  ``replwire decode`` then
reads the capture file into ``wc -l``, which counts the changes (one line each).

Events are row changes.  A client's events/s is the changes over the time from the load's start until its
slot confirmed the final WAL end; the capture-then-decode figure is the changes over that time plus the
decode's.  The results file (default ``bench/results/endtoend.json``) is a generic results file
(:func:`bench.report.generic`), which the docs' benchmark page renders.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "endtoend.json")
REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
PUBLICATION = "bench_e2e_pub"
ROWS = 100_000
#: pgbench's transaction: ``inserts`` inserts and 2 updates (of rows that exist: the first ``ROWS``).
SCRIPT = """\\set id random(1, {rows} - 1)
BEGIN;
INSERT INTO bench_e2e (a, b) SELECT md5(g::text || :id), g FROM generate_series(1, {inserts}) g;
UPDATE bench_e2e SET b = b + 1, t = now() WHERE id IN (:id, :id + 1);
COMMIT;
"""
#: What pg_walstream (Rust) publishes end to end from a live server.
WALSTREAM = "177-209k events/s"
_LAG = ("SELECT s.slot_name, pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint, "
        "extract(epoch FROM r.flush_lag)::float8 FROM pg_replication_slots s "
        "LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = ANY(%s)")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def prepare(server: Any) -> None:
    with server.connect() as conn:
        conn.execute("CREATE TABLE bench_e2e (id bigserial PRIMARY KEY, a text, b int, t timestamptz DEFAULT now())")
        conn.execute("INSERT INTO bench_e2e (a, b) SELECT md5(g::text), g FROM generate_series(1, %s) g", (ROWS,))
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE bench_e2e")
        conn.execute("CHECKPOINT")


def wal_end(server: Any) -> int:
    with server.connect() as conn:
        return int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_flush_lsn(), '0/0')::bigint").fetchone()[0])


def high_water_mib(pid: int) -> float | None:
    """The peak resident set of process ``pid`` since its exec (``VmHWM``), or None when it is gone.  (Its
    ``ru_maxrss`` would count the benchmark's own memory, which the child held between fork and exec.)"""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Child:
    """A process of its own, whose peak RSS is watched while it runs and which is reaped with wait4."""

    def __init__(self, command: list[str], **kwargs: Any) -> None:
        self.process = subprocess.Popen(command, **kwargs)
        self.usage: resource.struct_rusage | None = None
        self.status: int | None = None
        self.peak_rss_mib = 0.0
        self._watch = threading.Thread(target=self._watching, daemon=True)
        self._watch.start()

    def _watching(self) -> None:
        while self.usage is None:
            peak = high_water_mib(self.process.pid)
            if peak is None:
                return
            self.peak_rss_mib = max(self.peak_rss_mib, peak)
            time.sleep(0.1)

    def wait(self) -> int:
        _, status, self.usage = os.wait4(self.process.pid, 0)
        self.status = status
        self.process.returncode = os.waitstatus_to_exitcode(status)
        return self.process.returncode

    def stop(self, timeout: float = 60) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        while self.usage is None:
            pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
            if pid:
                self.status, self.usage = status, usage
                self.process.returncode = os.waitstatus_to_exitcode(status)
                break
            peak = high_water_mib(self.process.pid)  # (a zombie has no memory left: only while it lives)
            if peak:
                self.peak_rss_mib = max(self.peak_rss_mib, peak)
            if time.monotonic() > deadline:
                self.process.kill()
                deadline = time.monotonic() + 10
            time.sleep(0.05)


class Sampler(threading.Thread):
    """The slots' lag every ``interval`` seconds: bytes behind the WAL end and the walsender's flush_lag."""

    def __init__(self, server: Any, slots: list[str], interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.server, self.slots, self.interval = server, slots, interval
        self.samples: dict[str, list[tuple[float, int, float | None]]] = {slot: [] for slot in slots}
        self.stopping = threading.Event()

    def run(self) -> None:
        with self.server.connect() as conn:
            while not self.stopping.wait(self.interval):
                now = time.perf_counter()
                for slot, behind, flush_lag in conn.execute(_LAG, (self.slots,)).fetchall():
                    self.samples[slot].append((now, int(behind), flush_lag))


def lag_summary(samples: list[tuple[float, int, float | None]], start: float, end: float) -> dict[str, float]:
    """The lag while the load ran: mean and max bytes behind, and the max walsender flush_lag."""
    during = [s for s in samples if start <= s[0] <= end]
    behind = [s[1] for s in during] or [0]
    lags = [s[2] for s in during if s[2] is not None]
    return {"mean_mib": sum(behind) / len(behind) / 2**20, "max_mib": max(behind) / 2**20,
            "max_flush_lag_s": max(lags) if lags else 0.0, "samples": len(during)}


def confirmed_at(server: Any, slots: list[str], target: int, timeout: float) -> dict[str, float]:
    """When each slot's confirmed position reached ``target`` (polled every 50 ms)."""
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    with server.connect() as conn:
        while len(done) < len(slots) and time.monotonic() < deadline:
            rows = conn.execute("SELECT slot_name, pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint "
                                "FROM pg_replication_slots WHERE slot_name = ANY(%s)", (slots,)).fetchall()
            now = time.perf_counter()
            for slot, confirmed in rows:
                if slot not in done and confirmed is not None and int(confirmed) >= target:
                    done[slot] = now
            time.sleep(0.05)
    return done


def one_load(server: Any, number: int, rate: int, inserts: int, seconds: int, clients: int,
             tmp: Path) -> dict[str, Any]:
    rw_slot, recv_slot = f"e2e_rw_{number}", f"e2e_recv_{number}"
    with server.connect() as conn:
        for slot in (rw_slot, recv_slot):
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    capture_file, recv_file = tmp / f"load{number}.rwcap", tmp / f"load{number}.recvlogical"
    capture = Child([REPLWIRE, "capture", "--dsn", server.dsn, "--slot", rw_slot, "--publication", PUBLICATION,
                     "--out", str(capture_file), "--no-create-slot", "--proto-version", "4"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recv = Child([str(server.bindir / "pg_recvlogical"), "-d", server.dsn, "--slot", recv_slot, "--start",
                  "-f", str(recv_file), "-o", "proto_version=4", "-o", f"publication_names={PUBLICATION}",
                  "-F", "1", "-s", "1", "--no-loop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    script = tmp / "load.sql"
    script.write_text(SCRIPT.format(rows=ROWS, inserts=inserts))
    sampler = Sampler(server, [rw_slot, recv_slot])
    sampler.start()
    time.sleep(1.0)  # both clients connected and streaming
    command = [str(server.bindir / "pgbench"), "-n", "-f", str(script), "-c", str(clients), "-j", str(clients),
               "-T", str(seconds), server.dsn]
    if rate:
        command[1:1] = ["-R", str(rate)]
    log(f"load {number}: pgbench {clients} clients for {seconds} s, {inserts} inserts and 2 updates a transaction, "
        f"{f'{rate:,} transactions/s' if rate else 'full speed'}; load average {os.getloadavg()[0]:.1f}")
    started = time.perf_counter()
    bench = subprocess.run(command, capture_output=True, text=True, check=True)
    ended = time.perf_counter()
    target = wal_end(server)
    done = confirmed_at(server, [rw_slot, recv_slot], target, timeout=600)
    sampler.stopping.set()
    sampler.join()
    capture.stop()
    recv.stop()
    if rw_slot not in done or recv_slot not in done:
        raise SystemExit(f"a client did not confirm the WAL end within 10 minutes: {done}")
    transactions = next(int(line.split()[-1].split("/")[0]) for line in bench.stdout.splitlines()
                        if line.startswith("number of transactions actually processed"))
    # decode, counted by wc -l
    decode_started = time.perf_counter()
    decoder = Child([REPLWIRE, "decode", str(capture_file)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    counter = subprocess.run(["wc", "-l"], stdin=decoder.process.stdout, capture_output=True, text=True, check=True)
    assert decoder.process.stdout is not None
    decoder.process.stdout.close()
    if decoder.wait() != 0:
        raise SystemExit(f"replwire decode failed ({decoder.status})")
    decode_seconds = time.perf_counter() - decode_started
    changes = int(counter.stdout.split()[0])
    result = {
        "rate": rate, "inserts": inserts, "seconds": seconds, "clients": clients, "transactions": transactions,
        "changes": changes,
        "load_seconds": ended - started, "load_changes_per_s": changes / (ended - started),
        "capture": {"seconds": done[rw_slot] - started, "after_load_s": done[rw_slot] - ended,
                    "peak_rss_mib": capture.peak_rss_mib, "file_mib": capture_file.stat().st_size / 2**20,
                    "lag": lag_summary(sampler.samples[rw_slot], started, ended)},
        "pg_recvlogical": {"seconds": done[recv_slot] - started, "after_load_s": done[recv_slot] - ended,
                           "peak_rss_mib": recv.peak_rss_mib, "file_mib": recv_file.stat().st_size / 2**20,
                           "lag": lag_summary(sampler.samples[recv_slot], started, ended)},
        "decode": {"seconds": decode_seconds, "peak_rss_mib": decoder.peak_rss_mib},
        "load_average_after": os.getloadavg()[0],
    }
    for name in ("capture", "pg_recvlogical"):
        part = result[name]
        log(f"  {name}: {changes / part['seconds']:,.0f} changes/s, done {part['after_load_s']:.1f} s after the "
            f"load; lag mean {part['lag']['mean_mib']:.1f} MiB, max {part['lag']['max_mib']:.1f} MiB, "
            f"flush_lag max {part['lag']['max_flush_lag_s']:.2f} s; peak RSS {part['peak_rss_mib']:.0f} MiB")
    log(f"  decode: {changes:,} changes in {decode_seconds:.2f} s = {changes / decode_seconds:,.0f}/s; "
        f"peak RSS {result['decode']['peak_rss_mib']:.0f} MiB; pgbench {transactions:,} transactions")
    with server.connect() as conn:
        for slot in (rw_slot, recv_slot):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    capture_file.unlink()
    recv_file.unlink()
    return result


def as_results(loads: list[dict[str, Any]], machine: dict[str, Any], load_before: float) -> dict[str, Any]:
    rows, targets = [], []
    for load in loads:
        changes = load["changes"]
        what = (f"{load['inserts']}+2 rows a transaction, "
                + (f"{load['rate']:,} transactions/s" if load["rate"] else "as fast as it goes"))
        capture, recv, decode = load["capture"], load["pg_recvlogical"], load["decode"]
        for name, part in (("replwire capture", capture), ("pg_recvlogical", recv)):
            rows.append([f"{name} ({what})", round(changes / part["seconds"]), round(part["after_load_s"], 1),
                         round(part["lag"]["mean_mib"], 1), round(part["lag"]["max_mib"], 1),
                         round(part["lag"]["max_flush_lag_s"], 2), round(part["peak_rss_mib"])])
        rows.append([f"replwire decode of that capture ({what})", round(changes / decode["seconds"]), None, None, None,
                     None, round(decode["peak_rss_mib"])])
        both = capture["seconds"] + decode["seconds"]
        rows.append([f"replwire capture, then decode ({what})", round(changes / both), None, None, None, None, None])
        targets.append({"name": f"capture vs pg_recvlogical, both draining live under the load ({what})",
                        "value": round(recv["seconds"] / capture["seconds"], 3), "at_least": 0.7,
                        "holds": recv["seconds"] / capture["seconds"] >= 0.7})
    notes = [f"pgbench on PostgreSQL 18, {loads[0]['clients']} clients for {loads[0]['seconds']} s per load; each "
             "transaction inserts N rows and updates 2 (an int8 key, a text, an int, a timestamptz each); "
             + "; ".join(f"load {i + 1}: {load['changes']:,} changes in {load['transactions']:,} transactions, "
                         f"{load['load_changes_per_s']:,.0f} changes/s written"
                         for i, load in enumerate(loads)) + ".",
             "Both clients drain their own slot of the same changes at the same time as the load, on the same two "
             "cores; events/s is the changes over the time from the load's start until the slot confirmed the "
             "final WAL end. Lag: the WAL end minus the slot's confirmed_flush_lsn, sampled every 0.5 s while the "
             "load ran; flush_lag from pg_stat_replication.",
             f"pg_walstream (Rust) publishes {WALSTREAM} end to end from a live server, on other hardware.",
             f"Load average {load_before:.1f} before, "
             + ", ".join(f"{load['load_average_after']:.1f}" for load in loads) + " after each load."]
    return {"machine": machine, "date": machine["date"],
            "columns": ["run", "events/s", "drained after load (s)", "mean lag (MiB)", "max lag (MiB)",
                        "max flush_lag (s)", "peak RSS (MiB)"],
            "rows": rows, "notes": notes, "targets": targets, "raw": {"loads": loads}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench endtoend", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--loads", default="2000/8,0/8,0/100",
                        help="the loads, comma-separated, each RATE/N: pgbench transactions per second (0: as fast "
                             "as it goes) of N inserts and 2 updates")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    from bench.measure import machine
    from replwire.codec.testing.localserver import PgServer

    measured_on = machine()
    load_before = os.getloadavg()[0]
    loads = []
    with PgServer.start(18) as server, tempfile.TemporaryDirectory(prefix="replwire-bench-e2e-") as tmp:
        prepare(server)
        for number, spec in enumerate(args.loads.split(",")):
            rate, inserts = (int(part) for part in spec.split("/"))
            loads.append(one_load(server, number, rate, inserts, args.seconds, args.clients, Path(tmp)))
    results = as_results(loads, measured_on, load_before)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump(results, handle, indent=1)
        handle.write("\n")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
