"""The initial snapshot and the backfill against ``COPY ... TO STDOUT`` alone, on the same table, side by side.

Strategy: a PostgreSQL of its own (:class:`~replwire.codec.testing.localserver.PgServer`, 18 by default)
gets one table of about ``--mb`` MB (an int8 key, text, an int, a timestamptz and a numeric per row).  The
floor is the same ``COPY (SELECT <columns> FROM ONLY t) TO STDOUT`` the snapshot runs, read by psycopg2 into
a sink that only counts bytes; then ``replwire capture --snapshot`` runs as a user runs it (a process of
its own, ``--idle-exit 0``), text and ``--binary``, and its table time comes from its own progress line;
then ``replwire capture --backfill public.t`` on a new slot the same way (its rate from its ``done`` line:
rows over the run's time, chunks' round trips and waits for their watermarks included).  Peak RSS is each
child's ``ru_maxrss``.  Each runs ``--rounds`` times, alternating, and the best of each is kept.

It also measures what each costs the server: while a snapshot (then a backfill) runs, a second table has
``--dead`` rows deleted and is vacuumed; VACUUM VERBOSE reports how many dead rows it could not remove (the
snapshot's one transaction holds the xmin horizon; a backfill's chunks hold it for one chunk each), and
again after it.

    python -m bench.snapshot [--mb 1024] [--major 18] [--rounds 2] [--dead 50000] [--out FILE]

The results file (default ``bench/results/snapshot.json``) is a generic results file
(:func:`bench.report.generic`), which the docs' benchmark page renders.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "snapshot.json")
#: The targets: the snapshot at least half as fast as COPY alone, and under 200 MiB of peak RSS.
RATIO_AT_LEAST, RSS_MIB_AT_MOST = 0.5, 200.0
REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
_DONE = re.compile(r"snapshot public\.t: ([\d,]+) rows, ([\d.]+) MiB in ([\d.]+) s .*done")
_BACKFILLED = re.compile(r"backfill public\.t: done, ([\d,]+) rows in ([\d,]+) chunks \(([\d,]+) rows/s")
_DEAD = re.compile(r"(\d+) are dead but not yet removable")


class _Sink:
    """What COPY writes into: bytes counted, nothing kept."""

    def __init__(self) -> None:
        self.bytes = self.rows = 0

    def write(self, data: Any) -> int:
        self.bytes += len(data)
        self.rows += 1
        return len(data)


def make_table(dsn: str, mb: int) -> tuple[int, int]:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE TABLE t (id int8 PRIMARY KEY, a text, b int4, c timestamptz, d numeric)")
    rows = mb * 2**20 // 250  # about 250 bytes a row, as COPY's text writes it
    step = 200_000
    for start in range(0, rows, step):
        cur.execute("INSERT INTO t SELECT g, repeat(md5(g::text), 6), g %% 1000, "
                    "'2024-01-01'::timestamptz + g * interval '1 second', g / 7.0 "
                    "FROM generate_series(%s::int8, %s::int8) g", (start + 1, min(rows, start + step)))
    cur.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    cur.execute("CREATE PUBLICATION pub FOR TABLE t")
    cur.execute("VACUUM ANALYZE t")
    cur.execute("SELECT pg_total_relation_size('t')")
    size = cur.fetchone()[0]
    conn.close()
    return rows, size


def copy_floor(dsn: str, binary: bool) -> dict[str, float]:
    import psycopg2

    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    sink = _Sink()
    started = time.perf_counter()
    cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    sql = "COPY (SELECT id, a, b, c, d FROM ONLY public.t) TO STDOUT" + (" (FORMAT binary)" if binary else "")
    cur.copy_expert(sql, sink)
    cur.execute("COMMIT")
    seconds = time.perf_counter() - started
    conn.close()
    # one COPY data message a row; the binary form's trailer comes in one more
    return {"seconds": seconds, "rows": sink.rows - binary, "mib": sink.bytes / 2**20}


def snapshot(dsn: str, binary: bool, slot: str, directory: str) -> dict[str, float]:
    out = os.path.join(directory, f"{slot}.rwcap")
    command = [REPLWIRE, "capture", "--dsn", dsn, "--slot", slot, "--publication", "pub", "--out", out, "--snapshot",
               "--idle-exit", "0", *(["--binary"] if binary else [])]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"replwire capture failed: {stderr}")
    found = _DONE.search(stderr)
    if found is None:
        raise SystemExit(f"no progress line for table t in: {stderr}")
    rows, mib, seconds = int(found[1].replace(",", "")), float(found[2]), max(float(found[3]), 0.01)
    size = os.path.getsize(out)
    os.remove(out)
    _drop(dsn, slot)
    return {"seconds": seconds, "wall": wall, "rows": rows, "mib": mib, "peak_rss_mib": usage.ru_maxrss / 1024,
            "file_mib": size / 2**20}


def backfill(dsn: str, binary: bool, slot: str, directory: str) -> dict[str, float]:
    out = os.path.join(directory, f"{slot}.rwcap")
    command = [REPLWIRE, "capture", "--dsn", dsn, "--slot", slot, "--publication", "pub", "--out", out,
               "--backfill", "public.t", "--idle-exit", "0", *(["--binary"] if binary else [])]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"replwire capture --backfill failed: {stderr}")
    found = _BACKFILLED.search(stderr)
    if found is None:
        raise SystemExit(f"no done line for table t in: {stderr}")
    rows, chunks, rate = (int(found[i].replace(",", "")) for i in (1, 2, 3))
    size = os.path.getsize(out)
    os.remove(out)
    _drop(dsn, slot)
    return {"seconds": rows / max(rate, 1), "wall": wall, "rows": rows, "chunks": chunks, "mib": size / 2**20,
            "peak_rss_mib": usage.ru_maxrss / 1024, "file_mib": size / 2**20}


def _drop(dsn: str, slot: str) -> None:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    conn.cursor().execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    conn.close()


def xmin_horizon(dsn: str, dead: int, directory: str, copier: Any = None) -> dict[str, int]:
    """Dead rows of another table that VACUUM cannot remove while a snapshot (or ``copier``, run as
    :func:`snapshot` is) runs, and after it."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("TRUNCATE other")
    cur.execute("INSERT INTO other SELECT g, 'x' FROM generate_series(1, %s) g", (dead,))
    cur.execute("VACUUM other")
    result: dict[str, int] = {}
    runner = threading.Thread(target=copier or snapshot, args=(dsn, False, "horizon", directory))
    runner.start()
    deadline = time.monotonic() + 120
    while runner.is_alive():  # until the copy runs
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY (SELECT%%'")
        if cur.fetchone()[0] or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    cur.execute("DELETE FROM other")
    result["ran_during"] = int(runner.is_alive())  # (a copy over before the rows were deleted says nothing)
    del conn.notices[:]
    cur.execute("VACUUM (VERBOSE) other")
    during = _DEAD.search("".join(conn.notices))
    result["dead_unremovable_during"] = int(during[1]) if during else -1
    runner.join()
    del conn.notices[:]
    cur.execute("VACUUM (VERBOSE) other")
    after = _DEAD.search("".join(conn.notices))
    result["dead_unremovable_after"] = int(after[1]) if after else -1
    result["deleted"] = dead
    conn.close()
    return result


def as_results(raw: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    """The measurements of :func:`main` as a generic results file."""
    rows, notes, targets = [], [], []
    for form in ("text", "binary"):
        copy, snap, peak = raw[form]["copy"], raw[form]["snapshot"], raw[form]["peak_rss_mib"]
        rows.append([f"COPY alone, {form}", round(copy["seconds"], 2), round(copy["rows"] / copy["seconds"]),
                     round(copy["mib"] / copy["seconds"], 1), 1.0, None, "psycopg2 copy_expert into a byte counter"])
        rows.append([f"replwire capture --snapshot, {form}", round(snap["seconds"], 2),
                     round(snap["rows"] / snap["seconds"]), round(snap["mib"] / snap["seconds"], 1),
                     round(raw[form]["ratio"], 2), round(peak),
                     f"the table's copy into the file, fsync included; whole command {snap['wall']:.1f} s"])
        targets.append({"name": f"snapshot vs COPY alone, {form}", "value": round(raw[form]["ratio"], 3),
                        "at_least": RATIO_AT_LEAST, "holds": raw[form]["ratio"] >= RATIO_AT_LEAST})
        targets.append({"name": f"peak RSS under {RSS_MIB_AT_MOST:.0f} MiB, {form} (the limit over the peak)",
                        "value": round(RSS_MIB_AT_MOST / peak, 3), "at_least": 1.0, "holds": peak < RSS_MIB_AT_MOST})
        if "backfill" in raw[form]:
            back = raw[form]["backfill"]
            ratio = copy["seconds"] / back["seconds"]
            rows.append([f"replwire capture --backfill, {form}", round(back["seconds"], 2),
                         round(back["rows"] / back["seconds"]), round(back["mib"] / back["seconds"], 1),
                         round(ratio, 2), round(back["peak_rss_mib"]),
                         f"{back['chunks']:,} chunks of 0.2 s of reading, on a new slot; whole command "
                         f"{back['wall']:.1f} s"])
            targets.append({"name": f"backfill vs COPY alone, {form}", "value": round(ratio, 3),
                            "at_least": RATIO_AT_LEAST, "holds": ratio >= RATIO_AT_LEAST})
            targets.append({"name": f"backfill's peak RSS under {RSS_MIB_AT_MOST:.0f} MiB, {form} (the limit over "
                                    "the peak)", "value": round(RSS_MIB_AT_MOST / back["peak_rss_mib"], 3),
                            "at_least": 1.0, "holds": back["peak_rss_mib"] < RSS_MIB_AT_MOST})
    xmin = raw["xmin"]
    notes += [f"One table of {raw['rows']:,} rows, {raw['table_mib']:,.0f} MiB on disk, PostgreSQL {raw['major']}; "
              f"best of {raw.get('rounds', 2)} rounds each, COPY and snapshot alternating; load average "
              f"{raw['load_before']:.1f} before, {raw['load_after']:.1f} after (two cores shared with other work).",
              f"xmin horizon: of {xmin['deleted']:,} rows deleted from another table while the snapshot ran, "
              f"{xmin['dead_unremovable_during']:,} stayed as dead rows VACUUM could not remove; after it, "
              f"{xmin['dead_unremovable_after']:,}."]
    if raw.get("xmin_backfill", {}).get("ran_during"):
        during = raw["xmin_backfill"]["dead_unremovable_during"]
        notes.append(f"While a backfill of the table ran instead, {during:,} of them stayed (its chunks' transactions "
                     "last one chunk each).")
    return {"machine": machine, "date": machine["date"], "columns": ["run", "seconds", "rows/s", "MiB/s",
                                                                      "× of COPY", "peak RSS (MiB)", "note"],
            "rows": rows, "notes": notes, "targets": targets, "raw": raw}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="table size in MB of COPY text (default 1024)")
    parser.add_argument("--major", type=int, default=18)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dead", type=int, default=50_000)
    parser.add_argument("--out", default=RESULTS, help=f"the results file (default {RESULTS})")
    args = parser.parse_args(argv)

    from bench.measure import machine
    from replwire.codec.testing.localserver import PgServer

    measured_on = machine()
    server = PgServer.start(args.major)
    try:
        started = time.perf_counter()
        rows, size = make_table(server.dsn, args.mb)
        print(f"table t: {rows:,} rows, {size / 2**20:,.0f} MiB on disk (made in "
              f"{time.perf_counter() - started:.0f} s); load {os.getloadavg()[0]:.1f}", flush=True)
        results: dict[str, Any] = {"rows": rows, "table_mib": size / 2**20, "major": args.major,
                                   "load_before": os.getloadavg()[0], "rounds": args.rounds}
        with tempfile.TemporaryDirectory() as directory:
            for form, binary in (("text", False), ("binary", True)):
                floors, snaps, backs = [], [], []
                for round_ in range(args.rounds):
                    floors.append(copy_floor(server.dsn, binary))
                    snaps.append(snapshot(server.dsn, binary, f"bench_{form}_{round_}", directory))
                    backs.append(backfill(server.dsn, binary, f"bench_backfill_{form}_{round_}", directory))
                floor = min(floors, key=lambda r: r["seconds"])
                snap = min(snaps, key=lambda r: r["seconds"])
                back = min(backs, key=lambda r: r["seconds"])
                back["peak_rss_mib"] = max(b["peak_rss_mib"] for b in backs)
                ratio = floor["seconds"] / snap["seconds"]
                results[form] = {"copy": floor, "snapshot": snap, "ratio": ratio, "backfill": back,
                                 "peak_rss_mib": max(s["peak_rss_mib"] for s in snaps)}
                print(f"{form:6}: backfill {back['seconds']:.2f} s ({back['rows'] / back['seconds']:,.0f} rows/s, "
                      f"{back['chunks']:,} chunks) = {floor['seconds'] / back['seconds']:.2f}x of COPY; peak RSS "
                      f"{back['peak_rss_mib']:.0f} MiB", flush=True)
                print(f"{form:6}: COPY alone {floor['seconds']:.2f} s ({floor['rows'] / floor['seconds']:,.0f} rows/s, "
                      f"{floor['mib'] / floor['seconds']:.0f} MiB/s); snapshot {snap['seconds']:.2f} s "
                      f"({snap['rows'] / snap['seconds']:,.0f} rows/s, {snap['mib'] / snap['seconds']:.0f} MiB/s, "
                      f"whole command {snap['wall']:.2f} s) = {ratio:.2f}x of COPY; peak RSS "
                      f"{results[form]['peak_rss_mib']:.0f} MiB; file {snap['file_mib']:,.0f} MiB; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            results["xmin"] = xmin_horizon(server.dsn, args.dead, directory)
            results["xmin_backfill"] = xmin_horizon(server.dsn, args.dead, directory, backfill)
            print(f"xmin horizon: {results['xmin_backfill']['dead_unremovable_during']:,} of {args.dead:,} dead rows "
                  "unremovable by VACUUM during the backfill", flush=True)
            print(f"xmin horizon: {results['xmin']['dead_unremovable_during']:,} of {args.dead:,} dead rows of another "
                  f"table unremovable by VACUUM during the snapshot, {results['xmin']['dead_unremovable_after']:,} "
                  "after it", flush=True)
        results["load_after"] = os.getloadavg()[0]
    finally:
        server.stop()
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(as_results(results, measured_on), handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
