"""The initial snapshot and the backfill against ``COPY ... TO STDOUT`` alone, on the same table, side by side.

Strategy: a PostgreSQL of its own (:class:`~replwire.codec.testing.localserver.PgServer`, 18 by default)
gets one table of about ``--mb`` MB (an int8 key, text, an int, a timestamptz and a numeric per row).  The
floor is the same ``COPY (SELECT <columns> FROM ONLY t) TO STDOUT`` the snapshot runs, read by psycopg2 into
a sink that only counts bytes; then ``replwire capture --snapshot`` runs as a user runs it (a process of
its own, ``--idle-exit 0``), text and ``--binary``, and its table time comes from its own progress line;
then ``replwire capture --backfill public.t`` on a new slot the same way (its rate from its ``done`` line:
rows over the run's time, chunks' round trips and waits for their watermarks included); then the table read
by key alone, in as many chunks as that backfill read, into the same counter (:func:`key_chunks`: what the
server's reading by key costs, before any of the capture's).  Peak RSS is each child's ``ru_maxrss``.
Each runs ``--rounds`` times, alternating, and the best of each is kept.

It also measures what each costs the server: while a snapshot (then a backfill) runs, a second table has
``--dead`` rows deleted and is vacuumed (during a backfill, once the chunk open at the delete ended), and
VACUUM VERBOSE reports how many dead rows it could not remove (the snapshot's one transaction holds the xmin
horizon; a backfill's chunks hold it for one chunk each), and again after it.

And what a backfill costs the changes streamed meanwhile: the capture's lag under a concurrent write load,
during a backfill and without one.  A writer thread commits small transactions into another table, ``load``
(``--tx-rows`` rows each, 5 by default), at a fixed offered rate (``--rate``, 200 a second by default; open
loop: the i-th transaction is due i/rate seconds after the first and sent at once when late, so a slow
server or capture does not lower the load it is measured under).  Each is one round trip, an INSERT and
``SELECT txid_current()`` in one simple query, which PostgreSQL runs as one transaction and answers after its
commit; the client's ``time.monotonic()`` when the answer comes is the commit's time.  The capture runs on
a new slot of the publication ``lag`` (``t`` and ``load``; ``pub`` stays ``t`` alone): first ``replwire
capture --backfill public.t`` with the writer on from the moment a walsender holds the slot until the
backfill's ``done`` line, then, as the baseline, ``replwire capture`` with no backfill (and so without the
``--messages`` that ``--backfill`` turns on) under the same load for as long.  Both stop with ``--idle-exit
2`` once the writer stopped; their other settings are the defaults, ``--sync-interval 0.5`` included.

*Commit to durable*, the lag: for each of the writer's commits, the time from its commit to the first sample
of ``pg_replication_slots`` (a thread reads it every ``--sample-ms``, 20 ms by default, timing each sample
when its answer comes) whose ``confirmed_flush_lsn`` is at least that transaction's end LSN.  The end LSNs
are exact: read afterwards from the capture file itself (each Begin's xid, its Commit's ``end_lsn``, the
position the capture acknowledges for it), not guessed from ``pg_current_wal_lsn()`` after the commit, which
other WAL (the backfill's watermarks, a checkpoint) can push past it.  The capture acknowledges a position
only once the file holding it is fsynced, and fsyncs at most every ``--sync-interval`` while changes keep
coming (``codec/io/live.py``), so the lag includes: the walsender decoding the commit and sending it, the
capture reading it and writing its burst of records into the file (a backfill's chunk rows go into the same
file, right after their high watermark), the wait for the next fsync (up to 0.5 s: about 0.25 s on average
under a steady load, which is the baseline's floor; for the last commit before a pause in the changes up to
0.2 s more, the capture's wait on its socket) and the fsync itself, the acknowledgement reaching the
walsender, and up to one sampling interval (it is an upper bound to within that).  The server runs with
``fsync = off`` (:class:`~replwire.codec.testing.localserver.PgServer`'s setting); the capture's fsync is
real.  A commit never confirmed (or missing from the file) is counted apart, not as a lag.  *WAL behind*:
``pg_current_wal_lsn()`` minus ``confirmed_flush_lsn`` in the samples taken while the writer ran.  Both are
reported as p50, p99 and max over every commit (every sample) of every round, with the backfill's own rate
under the load (rows over its run's time, from its ``done`` line).

    python -m bench.snapshot [--mb 1024] [--major 18] [--rounds 2] [--dead 50000] [--rate 200] [--tx-rows 5]
                             [--sample-ms 20] [--out FILE]

``--rate 0`` leaves the lag measurement out.

The results file (default ``bench/results/snapshot.json``) is a generic results file
(:func:`bench.report.generic`), which the docs' benchmark page renders.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "snapshot.json")
#: The targets: the snapshot at least half as fast as COPY alone, and under 200 MiB of peak RSS.
RATIO_AT_LEAST, RSS_MIB_AT_MOST = 0.5, 200.0
REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
_DONE = re.compile(r"snapshot public\.t: ([\d,]+) rows, ([\d.]+) MiB in ([\d.]+) s .*done")
_BACKFILLED = re.compile(r"backfill public\.t: done, ([\d,]+) rows in ([\d,]+) chunks \(([\d,]+) rows/s")
#: The longest the horizon measure waits for the transactions open at its delete to end before its VACUUM.
_HELD_WAIT = 2.0
_DEAD = re.compile(r"(\d+) are dead but not yet removable")
#: The lag runs' --idle-exit: longer than any pause of the writer's, so the capture stops only once it stopped.
_IDLE_EXIT = 2.0


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


def key_chunks(dsn: str, binary: bool, rows: int, per_chunk: int) -> dict[str, float]:
    """The table read as a backfill reads it, alone: chunks of ``per_chunk`` rows in key order, each
    ``COPY (SELECT ... WHERE id > <last> ORDER BY id LIMIT n)`` in a short repeatable-read transaction, into
    the same byte counter as :func:`copy_floor` -- the server's cost of reading by key, before any of the
    capture's (the ids are dense, so each chunk's cursor is known without reading its last row)."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    sink = _Sink()
    started = time.perf_counter()
    for after in range(0, rows, per_chunk):
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.copy_expert(f"COPY (SELECT id, a, b, c, d FROM ONLY public.t WHERE id > {after} ORDER BY id LIMIT "
                        f"{per_chunk}) TO STDOUT" + (" (FORMAT binary)" if binary else ""), sink)
        cur.execute("COMMIT")
    seconds = time.perf_counter() - started
    conn.close()
    chunks = -(-rows // per_chunk)
    # (as copy_floor's: one data message a row, the binary form's trailer in one more, a chunk's each)
    return {"seconds": seconds, "rows": sink.rows - chunks * binary, "mib": sink.bytes / 2**20, "chunks": chunks}


class _Capture:
    """One ``replwire capture`` on a slot of its own into a new file in ``directory``, started as a user starts
    it (a process of its own, stderr read for its progress lines)."""

    def __init__(self, dsn: str, slot: str, directory: str, options: list[str], publication: str = "pub") -> None:
        self.dsn, self.slot = dsn, slot
        self.out = os.path.join(directory, f"{slot}.rwcap")
        command = [REPLWIRE, "capture", "--dsn", dsn, "--slot", slot, "--publication", publication, "--out", self.out,
                   *options]
        self.started = time.perf_counter()
        self.child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.wall = self.peak_rss_mib = 0.0

    def finish(self, failed: str, on_line: Callable[[str], None] | None = None) -> str:
        """Its stderr once it exited (``on_line`` is called with each line as it comes), its ``wall`` time and
        ``peak_rss_mib`` (``ru_maxrss``) set; a ``SystemExit`` saying ``failed`` and the stderr when it failed."""
        assert self.child.stderr is not None
        lines = []
        with self.child.stderr:
            for line in self.child.stderr:
                lines.append(line)
                if on_line is not None:
                    on_line(line)
        _, status, usage = os.wait4(self.child.pid, 0)
        self.wall = time.perf_counter() - self.started
        self.child.returncode = os.waitstatus_to_exitcode(status)
        self.peak_rss_mib = usage.ru_maxrss / 1024
        stderr = "".join(lines)
        if self.child.returncode:
            raise SystemExit(f"{failed}: {stderr}")
        return stderr

    def discard(self) -> float:
        """The file's size in MiB, once the file is removed and the slot dropped."""
        size = os.path.getsize(self.out)
        os.remove(self.out)
        _drop(self.dsn, self.slot)
        return size / 2**20


def snapshot(dsn: str, binary: bool, slot: str, directory: str) -> dict[str, float]:
    capture = _Capture(dsn, slot, directory, ["--snapshot", "--idle-exit", "0", *(["--binary"] if binary else [])])
    stderr = capture.finish("replwire capture failed")
    found = _DONE.search(stderr)
    if found is None:
        raise SystemExit(f"no progress line for table t in: {stderr}")
    rows, mib, seconds = int(found[1].replace(",", "")), float(found[2]), max(float(found[3]), 0.01)
    file_mib = capture.discard()
    return {"seconds": seconds, "wall": capture.wall, "rows": rows, "mib": mib, "peak_rss_mib": capture.peak_rss_mib,
            "file_mib": file_mib}


def backfill(dsn: str, binary: bool, slot: str, directory: str) -> dict[str, float]:
    capture = _Capture(dsn, slot, directory, ["--backfill", "public.t", "--idle-exit", "0",
                                              *(["--binary"] if binary else [])])
    stderr = capture.finish("replwire capture --backfill failed")
    found = _BACKFILLED.search(stderr)
    if found is None:
        raise SystemExit(f"no done line for table t in: {stderr}")
    rows, chunks, rate = (int(found[i].replace(",", "")) for i in (1, 2, 3))
    file_mib = capture.discard()
    return {"seconds": rows / max(rate, 1), "wall": capture.wall, "rows": rows, "chunks": chunks, "mib": file_mib,
            "peak_rss_mib": capture.peak_rss_mib, "file_mib": file_mib}


def _drop(dsn: str, slot: str) -> None:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    conn.cursor().execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    conn.close()


def xmin_horizon(dsn: str, dead: int, directory: str, copier: Any = None,
                 waiting_for: str | None = None) -> dict[str, int]:
    """Dead rows of another table that VACUUM cannot remove while a snapshot (or ``copier``, run as
    :func:`snapshot` is) runs, and after it; with ``waiting_for`` (an ``application_name`` prefix), VACUUM
    during the copy runs once the copier's transactions open at the delete ended."""
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
    if waiting_for is not None:
        # a backfill's chunk that began before the delete holds the rows back until it ends, and no longer:
        # VACUUM once the copier's transactions open at the delete ended (or after _HELD_WAIT seconds)
        cur.execute("SELECT clock_timestamp()")
        (deleted_at,) = cur.fetchone()
        waited = time.monotonic()
        while time.monotonic() - waited < _HELD_WAIT:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE xact_start < %s AND application_name LIKE %s",
                        (deleted_at, waiting_for + "%"))
            if not cur.fetchone()[0]:
                break
            time.sleep(0.005)
        result["waited_ms"] = round((time.monotonic() - waited) * 1000)
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


def make_load(dsn: str) -> None:
    """The writer's table ``load`` and the publication ``lag`` of it and ``t`` (``pub``, which the other
    measurements capture, stays ``t`` alone)."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE TABLE load (n int8, i int4, v text, PRIMARY KEY (n, i))")
    cur.execute("CREATE PUBLICATION lag FOR TABLE t, load")
    conn.close()


class _Sampler(threading.Thread):
    """The slot's positions every ``interval`` seconds, once it exists: ``(time, WAL end, confirmed_flush_lsn)``,
    the time (``time.monotonic()``) taken when the answer came; ``active`` is set once a walsender holds the
    slot (the capture streams)."""

    def __init__(self, dsn: str, slot: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.dsn, self.slot, self.interval = dsn, slot, interval
        self.samples: list[tuple[float, int, int]] = []
        self.active, self.stop = threading.Event(), threading.Event()

    def run(self) -> None:
        import psycopg2

        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        cur = conn.cursor()
        try:
            while not self.stop.is_set():
                cur.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8, "
                            "(confirmed_flush_lsn - '0/0'::pg_lsn)::int8, active_pid IS NOT NULL "
                            "FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
                row = cur.fetchone()
                now = time.monotonic()
                if row is not None and row[1] is not None:
                    self.samples.append((now, row[0], row[1]))
                    if row[2]:
                        self.active.set()
                self.stop.wait(self.interval)
        finally:
            conn.close()


class _Writer(threading.Thread):
    """The concurrent load: once ``go`` is set, a transaction of ``rows`` rows into ``load`` every ``1 / rate``
    seconds (open loop: the i-th is due ``i / rate`` s after the first and sent at once when it is late), until
    ``stop`` or for ``seconds``.  Each is one round trip: an INSERT and ``SELECT txid_current()`` in one simple
    query, which PostgreSQL runs as one transaction and answers after its commit.  ``commits`` holds each one's
    ``(xid, time.monotonic() when the answer came)``; ``began`` and ``ended`` bound the load."""

    def __init__(self, dsn: str, rate: float, rows: int, go: threading.Event, seconds: float | None = None) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rate, self.rows, self.go, self.seconds = dsn, rate, rows, go, seconds
        self.stop = threading.Event()
        self.commits: list[tuple[int, float]] = []
        self.began = self.ended = 0.0
        self.failure: BaseException | None = None

    def run(self) -> None:
        import psycopg2

        try:
            conn = psycopg2.connect(self.dsn)
            conn.autocommit = True
            cur = conn.cursor()
            cur.execute("SELECT coalesce(max(n), -1) + 1 FROM load")
            first = cur.fetchone()[0]
            while not self.go.wait(0.01):
                if self.stop.is_set():
                    return
            self.began = time.monotonic()
            i = 0
            while not self.stop.is_set():
                due = i / self.rate
                if self.seconds is not None and due >= self.seconds:
                    break
                late = time.monotonic() - self.began
                if due > late and self.stop.wait(due - late):
                    break
                cur.execute("INSERT INTO load SELECT %s, g, md5((%s * 100 + g)::text) FROM generate_series(1, %s) g; "
                            "SELECT txid_current()", (first + i, first + i, self.rows))
                self.commits.append((cur.fetchone()[0] & 0xFFFFFFFF, time.monotonic()))
                i += 1
            conn.close()
        except BaseException as error:  # (said by lag_run)
            self.failure = error
        finally:
            self.ended = time.monotonic()


def commit_ends(path: str) -> dict[int, int]:
    """The end LSN of each transaction in the capture file ``path``, by xid (from its Begin and its Commit):
    the position the capture acknowledges once the transaction is durably in the file."""
    from replwire.codec import parse
    from replwire.codec.io.capture_file import read_capture
    from replwire.codec.messages import Begin, Commit

    ends: dict[int, int] = {}
    xid: int | None = None
    with read_capture(path) as reader:
        proto, encoding = reader.header.proto_version, reader.header.client_encoding
        skip = frozenset(range(256)) - {ord("B"), ord("C")}  # (everything but Begin and Commit only counted)
        for _, _, _, data, _ in reader.records(raw=True, skip=skip):
            message = parse(data, proto_version=proto, encoding=encoding)
            if isinstance(message, Begin):
                xid = message.xid
            elif isinstance(message, Commit) and xid is not None:
                ends[xid] = int(message.end_lsn)
                xid = None
    return ends


def commit_lags(commits: list[tuple[int, float]], ends: dict[int, int],
                samples: list[tuple[float, int, int]]) -> tuple[list[float], int]:
    """Each commit's lag, in seconds: from its commit (``commits``: ``(xid, time)``) to the first sample whose
    confirmed_flush_lsn had reached its end LSN (``ends``, by xid); and how many commits never got there (or
    are not in the file)."""
    times, confirmed, highest = [], [], 0
    for at, _, flushed in samples:
        highest = max(highest, flushed)  # (it never goes back; a running maximum keeps the search sound)
        times.append(at)
        confirmed.append(highest)
    lags: list[float] = []
    missing = 0
    for xid, at in commits:
        end = ends.get(xid)
        found = len(confirmed) if end is None else bisect.bisect_left(confirmed, end)
        if found == len(confirmed):
            missing += 1
        else:
            lags.append(max(0.0, times[found] - at))
    return lags, missing


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99 (nearest rank) and max of ``values``, and how many there were."""
    if not values:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0, "n": 0}
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p * len(ordered)) - 1)]

    return {"p50": rank(0.5), "p99": rank(0.99), "max": ordered[-1], "n": len(ordered)}


def lag_run(dsn: str, slot: str, directory: str, *, rate: float, rows: int, interval: float,
            seconds: float | None = None) -> dict[str, Any]:
    """One capture under the writer's load, on the publication ``lag``: with ``seconds``, a plain ``replwire
    capture`` (the baseline) while the writer runs that long; without, ``replwire capture --backfill public.t``
    while the writer runs until the backfill's ``done`` line.  Both stop on ``--idle-exit`` once the writer
    stopped.  What each commit's lag was, the bytes of WAL the slot was behind while the writer ran (both as
    :func:`percentiles`), and the capture's and the backfill's own figures."""
    options = ["--idle-exit", str(_IDLE_EXIT)] + ([] if seconds is not None else ["--backfill", "public.t"])
    sampler = _Sampler(dsn, slot, interval)
    writer = _Writer(dsn, rate, rows, sampler.active, seconds)
    sampler.start()
    writer.start()
    try:
        capture = _Capture(dsn, slot, directory, options, publication="lag")
        stderr = capture.finish("replwire capture under load failed",
                                lambda line: writer.stop.set() if _BACKFILLED.search(line) else None)
    finally:
        writer.stop.set()
        writer.join()
        sampler.stop.set()
        sampler.join()
    if writer.failure is not None:
        raise SystemExit(f"the writer failed: {writer.failure}")
    if not writer.commits:
        raise SystemExit(f"the writer committed nothing while the capture ran: {stderr}")
    ends = commit_ends(capture.out)
    lags, missing = commit_lags(writer.commits, ends, sampler.samples)
    behind = [float(end - flushed) for at, end, flushed in sampler.samples if writer.began <= at <= writer.ended]
    load = writer.ended - writer.began
    result: dict[str, Any] = {
        "lags": lags, "behind": behind, "commits": len(writer.commits), "unconfirmed": missing,
        "load_seconds": load, "commits_per_s": len(writer.commits) / max(load, 1e-6), "samples": len(behind),
        "peak_rss_mib": capture.peak_rss_mib, "wall": capture.wall}
    if seconds is None:
        found = _BACKFILLED.search(stderr)
        if found is None:
            raise SystemExit(f"no done line for table t in: {stderr}")
        done_rows, chunks, done_rate = (int(found[i].replace(",", "")) for i in (1, 2, 3))
        result.update({"rows": done_rows, "chunks": chunks, "seconds": done_rows / max(done_rate, 1)})
    result["file_mib"] = capture.discard()
    return result


def lag(dsn: str, directory: str, rounds: int, rate: float, rows: int, interval: float) -> dict[str, Any]:
    """:func:`lag_run` ``rounds`` times in pairs: during a backfill, then the baseline for as long as that
    backfill's load ran.  The lags of every round pooled (:func:`percentiles`); the backfill's rate under load
    is its best round's, as the other rows'."""
    runs: dict[str, list[dict[str, Any]]] = {"backfill": [], "baseline": []}
    for round_ in range(rounds):
        during = lag_run(dsn, f"lag_backfill_{round_}", directory, rate=rate, rows=rows, interval=interval)
        runs["backfill"].append(during)
        runs["baseline"].append(lag_run(dsn, f"lag_baseline_{round_}", directory, rate=rate, rows=rows,
                                        interval=interval, seconds=during["load_seconds"]))
    result: dict[str, Any] = {"rate": rate, "rows_per_transaction": rows, "sample_interval": interval,
                              "rounds": rounds}
    for name, done in runs.items():
        part = {"lag_s": percentiles([x for run in done for x in run["lags"]]),
                "behind_bytes": percentiles([x for run in done for x in run["behind"]]),
                **{key: sum(run[key] for run in done) for key in ("commits", "unconfirmed", "samples")},
                "load_seconds": sum(run["load_seconds"] for run in done),
                "peak_rss_mib": max(run["peak_rss_mib"] for run in done)}
        part["commits_per_s"] = part["commits"] / max(part["load_seconds"], 1e-6)
        if name == "backfill":
            best = min(done, key=lambda r: r["seconds"])
            part.update({key: best[key] for key in ("rows", "chunks", "seconds", "file_mib", "wall")})
        result[name] = part
    return result


#: What the lag rows measure (the docstring says it at length).
_LAG_NOTE = ("Commit to durable: for each of the writer's commits, from its commit (the client's clock when the "
             "server answered) to the first sample of pg_replication_slots in which the capture's slot had confirmed "
             "that commit's end LSN (the capture confirms only what it fsynced, at most every --sync-interval, 0.5 s); "
             "WAL behind: pg_current_wal_lsn() minus the slot's confirmed_flush_lsn in those samples, while the writer "
             "ran.  The baseline is a plain replwire capture of the same load for as long.")


def _lag_text(part: dict[str, Any], rate: float) -> str:
    """One run's lags in words (a part of :func:`lag`'s result)."""
    ms = {key: part["lag_s"][key] * 1000 for key in ("p50", "p99", "max")}
    kib = {key: part["behind_bytes"][key] / 1024 for key in ("p50", "p99", "max")}
    never = f"; {part['unconfirmed']:,} never confirmed" if part["unconfirmed"] else ""
    return (f"lag p50 {ms['p50']:,.0f} ms, p99 {ms['p99']:,.0f} ms, max {ms['max']:,.0f} ms over "
            f"{part['commits']:,} commits ({part['commits_per_s']:,.0f}/s of {rate:g} offered, "
            f"{part['load_seconds']:.1f} s){never}; WAL behind p50 {kib['p50']:,.0f} KiB, p99 {kib['p99']:,.0f} KiB, "
            f"max {kib['max']:,.0f} KiB")


def _lag_rows(lag: dict[str, Any], copy: dict[str, float]) -> list[list[Any]]:
    """The rows of :func:`lag`'s measurements: the backfill's rate under the load, and each run's lags."""
    during = lag["backfill"]
    load = (f"{lag['rate']:g} transactions/s of {lag['rows_per_transaction']} rows into another table, sampled every "
            f"{lag['sample_interval'] * 1000:g} ms")
    rows: list[list[Any]] = [[
        "replwire capture --backfill under load, text", round(during["seconds"], 2),
        round(during["rows"] / during["seconds"]), round(during["file_mib"] / during["seconds"], 1),
        round(copy["seconds"] / during["seconds"], 2), round(during["peak_rss_mib"]),
        f"{during['chunks']:,} chunks while the writer committed {load}; whole command {during['wall']:.1f} s"]]
    for name, part in (("no backfill (baseline)", lag["baseline"]), ("during the backfill", during)):
        rows.append([f"commit to durable, {name}", None, None, None, None, round(part["peak_rss_mib"]),
                     _lag_text(part, lag["rate"])])
    return rows


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
        if "by_key" in raw[form]:
            keyed = raw[form]["by_key"]
            rows.append([f"chunks by key alone, {form}", round(keyed["seconds"], 2),
                         round(keyed["rows"] / keyed["seconds"]), round(keyed["mib"] / keyed["seconds"], 1),
                         round(copy["seconds"] / keyed["seconds"], 2), None,
                         f"{keyed['chunks']:,} chunks as the backfill's, each a COPY of ORDER BY id LIMIT n in a "
                         "transaction of its own, into the byte counter: the server's reading by key, no capture"])
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
    if "lag" in raw:
        rows += _lag_rows(raw["lag"], raw["text"]["copy"])
        notes.append(_LAG_NOTE)
    xmin = raw["xmin"]
    notes += [f"One table of {raw['rows']:,} rows, {raw['table_mib']:,.0f} MiB on disk, PostgreSQL {raw['major']}; "
              f"best of {raw.get('rounds', 2)} rounds each, COPY and snapshot alternating; load average "
              f"{raw['load_before']:.1f} before, {raw['load_after']:.1f} after (two cores shared with other work).",
              f"xmin horizon: of {xmin['deleted']:,} rows deleted from another table while the snapshot ran, "
              f"{xmin['dead_unremovable_during']:,} stayed as dead rows VACUUM could not remove; after it, "
              f"{xmin['dead_unremovable_after']:,}."]
    if raw.get("xmin_backfill", {}).get("ran_during"):
        during = raw["xmin_backfill"]["dead_unremovable_during"]
        waited = raw["xmin_backfill"].get("waited_ms", 0)
        notes.append(f"While a backfill of the table ran instead, {during:,} of them stayed, with VACUUM run once "
                     f"the chunk open at the delete ended, {waited:,} ms after it (its chunks' transactions last "
                     "one chunk each).")
    return {"machine": machine, "date": machine["date"], "columns": ["run", "seconds", "rows/s", "MiB/s",
                                                                      "× of COPY", "peak RSS (MiB)", "note"],
            "rows": rows, "notes": notes, "targets": targets, "raw": raw}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="table size in MB of COPY text (default 1024)")
    parser.add_argument("--major", type=int, default=18)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dead", type=int, default=50_000)
    parser.add_argument("--rate", type=float, default=200.0,
                        help="the lag measurement's writer: transactions a second (default 200; 0: no lag measurement)")
    parser.add_argument("--tx-rows", type=int, default=5, help="rows per writer transaction (default 5)")
    parser.add_argument("--sample-ms", type=float, default=20.0,
                        help="milliseconds between two samples of the slot's position (default 20)")
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
                floors, snaps, backs, keyed = [], [], [], []
                for round_ in range(args.rounds):
                    floors.append(copy_floor(server.dsn, binary))
                    snaps.append(snapshot(server.dsn, binary, f"bench_{form}_{round_}", directory))
                    backs.append(backfill(server.dsn, binary, f"bench_backfill_{form}_{round_}", directory))
                    keyed.append(key_chunks(server.dsn, binary, rows, -(-rows // backs[-1]["chunks"])))
                floor = min(floors, key=lambda r: r["seconds"])
                snap = min(snaps, key=lambda r: r["seconds"])
                back = min(backs, key=lambda r: r["seconds"])
                back["peak_rss_mib"] = max(b["peak_rss_mib"] for b in backs)
                ratio = floor["seconds"] / snap["seconds"]
                results[form] = {"copy": floor, "snapshot": snap, "ratio": ratio, "backfill": back,
                                 "by_key": min(keyed, key=lambda r: r["seconds"]),
                                 "peak_rss_mib": max(s["peak_rss_mib"] for s in snaps)}
                keyed = results[form]["by_key"]
                print(f"{form:6}: chunks by key alone {keyed['seconds']:.2f} s = "
                      f"{floor['seconds'] / keyed['seconds']:.2f}x of COPY", flush=True)
                print(f"{form:6}: backfill {back['seconds']:.2f} s ({back['rows'] / back['seconds']:,.0f} rows/s, "
                      f"{back['chunks']:,} chunks) = {floor['seconds'] / back['seconds']:.2f}x of COPY; peak RSS "
                      f"{back['peak_rss_mib']:.0f} MiB", flush=True)
                print(f"{form:6}: COPY alone {floor['seconds']:.2f} s ({floor['rows'] / floor['seconds']:,.0f} rows/s, "
                      f"{floor['mib'] / floor['seconds']:.0f} MiB/s); snapshot {snap['seconds']:.2f} s "
                      f"({snap['rows'] / snap['seconds']:,.0f} rows/s, {snap['mib'] / snap['seconds']:.0f} MiB/s, "
                      f"whole command {snap['wall']:.2f} s) = {ratio:.2f}x of COPY; peak RSS "
                      f"{results[form]['peak_rss_mib']:.0f} MiB; file {snap['file_mib']:,.0f} MiB; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            if args.rate > 0:
                make_load(server.dsn)
                results["lag"] = lag(server.dsn, directory, args.rounds, args.rate, args.tx_rows, args.sample_ms / 1000)
                for name in ("baseline", "backfill"):
                    print(f"lag, {name:8}: {_lag_text(results['lag'][name], args.rate)}", flush=True)
                under = results["lag"]["backfill"]
                print(f"lag: the backfill under load {under['seconds']:.2f} s ({under['rows'] / under['seconds']:,.0f} "
                      f"rows/s, {under['chunks']:,} chunks); load {os.getloadavg()[0]:.1f}", flush=True)
            results["xmin"] = xmin_horizon(server.dsn, args.dead, directory)
            results["xmin_backfill"] = xmin_horizon(server.dsn, args.dead, directory, backfill,
                                                    waiting_for="replwire backfill")
            print(f"xmin horizon: {results['xmin_backfill']['dead_unremovable_during']:,} of {args.dead:,} dead rows "
                  f"unremovable by VACUUM during the backfill, run {results['xmin_backfill']['waited_ms']:,} ms after "
                  "the delete", flush=True)
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
