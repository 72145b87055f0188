"""``python -m bench.lakehouse``: ``replwire spark apply`` into Delta Lake and Iceberg tables, against ``apply
--format parquet``, against the rate at which ``replwire capture`` takes the changes from the server, and against
``replwire decode`` of the same file.

    python -m bench.lakehouse [--changes 1000000] [--quick] [--rounds 2] [--out bench/results/lakehouse.json]

A PostgreSQL 18 of its own (:class:`replwire.codec.testing.localserver.PgServer`) with one table of a
realistic mix of column types -- an int key, an int, a numeric, a timestamptz, a short text, a jsonb and a text
stored out of line (TOASTed) in one row of twenty -- a publication and a slot.  Segment A: 60% inserts, 30%
updates (the TOASTed text left as it is: sent as *unchanged TOAST*), 10% deletes of ``--changes``, in chunks of
6,000 rows (a transaction of inserts, one of updates of half of them, one of deletes of a sixth), captured into a
file by ``replwire capture --idle-exit 10`` run as a user runs it, a process of its own, once the changes are in
the slot: its rate is the capture's own (best of two slots that hold the same changes).  Segment B: 10% more
(half updates, a fifth deletes, the rest inserts), captured into a second file from the same slot.

Then, in this process, on one warm ``local[2]`` SparkSession (a first untimed run of each format on B alone
warms it), through the Python API (:func:`replwire.spark.jobs.apply`), each into a fresh ``OUT`` unless
stated, best of ``--rounds``:

* ``--format parquet`` of A, and of A+B (the whole state rewritten);
* ``--format delta``: A into a new table; the same inputs again on that table (nothing past its position: no
  commit, and the parts the first run applied are not decoded, ``OUT/_replwire_applied.json``); A+B onto a
  copy of the A table (B's changes merged); A+B from scratch;
* ``--format iceberg`` (pyiceberg's SQL catalog on SQLite in ``OUT``): the same four;
* the ``changes`` job of A, and of B, alone (decoding into per-table change rows, written as Parquet): the
  part of every apply above that is decoding, not folding or merging;
* ``replwire decode`` of A to ``/dev/null`` (a process of its own, JSON lines): the decoding alone, one core.

Last, the Delta and Iceberg tables of A+B (merged onto A, and from scratch), read back with ``deltalake`` and
``pyiceberg``, must have as many rows as ``SELECT count(*)`` on the server, and the same sum of ``qty``,
and of the TOASTed text's lengths: a benchmark whose result is wrong measures nothing.  Results go to
``bench/results/lakehouse.json`` (``--out``), which the docs' benchmark page renders.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from . import measure

RESULTS = pathlib.Path(__file__).parent / "results" / "lakehouse.json"
REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
#: rows per chunk of segment A: one transaction inserts them, one updates half, one deletes a sixth
CHUNK = 6_000
#: ``replwire capture --idle-exit``: seconds with nothing to capture before it stops (not counted in its rate);
#: long enough for the walsender to read its way from the slot's restart point to the segment's first change
IDLE_EXIT = 10.0
_CAPTURED = re.compile(r"captured (?:[\d,]+ snapshot rows? and )?([\d,]+) messages?")
TABLE = "public.items"

SCHEMA = """
CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL, price numeric(12,2), at timestamptz, note text,
    doc jsonb, body text);
ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE PUBLICATION pub FOR TABLE items;
SELECT pg_create_logical_replication_slot('bench', 'pgoutput');
SELECT pg_create_logical_replication_slot('bench_again', 'pgoutput');
"""
INSERT = """INSERT INTO items SELECT i, i %% 97, (i * 1.37)::numeric(12,2),
    TIMESTAMPTZ '2025-01-01 00:00+00' + i * INTERVAL '1 second', 'note ' || i,
    jsonb_build_object('id', i, 'tags', jsonb_build_array('a', i %% 5), 'ok', i %% 2 = 0),
    CASE WHEN i %% 20 = 0 THEN repeat(md5(i::text), 80) ELSE 'short ' || i END
    FROM generate_series(%(first)s::int, %(last)s::int) i"""
UPDATE = """UPDATE items SET qty = qty + 1, price = price + 0.5, at = at + INTERVAL '1 day',
    doc = doc || jsonb_build_object('seen', %(round)s::int)
    WHERE id BETWEEN %(first)s::int AND %(last)s::int AND id %% %(m)s::int = %(r)s::int"""
DELETE = "DELETE FROM items WHERE id BETWEEN %(first)s::int AND %(last)s::int AND id %% %(m)s::int = %(r)s::int"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def segment_a(conn: Any, inserts: int) -> int:
    """Segment A: ``inserts`` rows, half of them updated, a sixth deleted, chunk by chunk; the changes."""
    changes = 0
    for first in range(1, inserts + 1, CHUNK):
        last = min(inserts, first + CHUNK - 1)
        for sql, params in ((INSERT, {}), (UPDATE, {"round": 1, "m": 2, "r": 0}), (DELETE, {"m": 6, "r": 1})):
            with conn.transaction():
                changes += conn.execute(sql, {"first": first, "last": last, **params}).rowcount
    return changes


def segment_b(conn: Any, inserts: int, more: int) -> int:
    """Segment B: about ``more`` changes on top of A -- half updates (rows A left alone), a fifth deletes, the
    rest inserts -- in chunks as A's; the changes."""
    updates, deletes = more // 2, more // 5
    new = more - updates - deletes
    changes = 0
    # A left the ids of residue 3 (mod 6) unchanged, and of residue 2 updated once
    update_to, delete_to = min(inserts, 6 * updates), min(inserts, 6 * deletes)
    for first in range(1, max(update_to, delete_to) + 1, CHUNK):
        last = first + CHUNK - 1
        with conn.transaction():
            if first <= update_to:
                changes += conn.execute(UPDATE, {"first": first, "last": min(last, update_to), "round": 2, "m": 6,
                                                 "r": 3}).rowcount
            if first <= delete_to:
                changes += conn.execute(DELETE, {"first": first, "last": min(last, delete_to), "m": 6,
                                                 "r": 2}).rowcount
    for first in range(inserts + 1, inserts + new + 1, CHUNK):
        with conn.transaction():
            changes += conn.execute(INSERT, {"first": first, "last": min(inserts + new, first + CHUNK - 1)}).rowcount
    return changes


def capture(dsn: str, out: pathlib.Path, changes: int, slot: str = "bench") -> dict[str, Any]:
    """``replwire capture`` of the slot's changes into ``out``, as a user runs it, until it has been idle for
    :data:`IDLE_EXIT` seconds; its seconds without the idle wait, and its summary line.  Fewer messages than
    the segment's ``changes`` fail the benchmark (the capture stopped before the segment reached it)."""
    command = [REPLWIRE, "capture", "--dsn", dsn, "--slot", slot, "--publication", "pub", "--out", str(out),
               "--idle-exit", str(IDLE_EXIT)]
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"replwire capture failed: {done.stderr}")
    summary = done.stderr.strip().splitlines()[-1]
    found = _CAPTURED.search(summary)
    if found is None or int(found[1].replace(",", "")) < changes:
        raise SystemExit(f"replwire capture took fewer messages than the segment's {changes:,} changes: {summary}")
    return {"seconds": wall - IDLE_EXIT, "wall": wall, "bytes": out.stat().st_size, "summary": summary,
            "messages": int(found[1].replace(",", ""))}


def decode(path: pathlib.Path, rounds: int) -> float:
    """Best wall seconds of ``replwire decode path > /dev/null``."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        with open(os.devnull, "wb") as sink:
            subprocess.run([REPLWIRE, "decode", str(path)], stdout=sink, stderr=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - started)
    return best


def server_facts(conn: Any) -> dict[str, int]:
    row = conn.execute("SELECT count(*), coalesce(sum(qty), 0), coalesce(sum(length(body)), 0) FROM items").fetchone()
    return {"rows": row[0], "qty": int(row[1]), "body_chars": int(row[2])}


def arrow_facts(table: Any) -> dict[str, int]:
    import pyarrow.compute as pc

    lengths = pc.sum(pc.utf8_length(table.column("body"))).as_py() or 0
    return {"rows": table.num_rows, "qty": int(pc.sum(table.column("qty")).as_py() or 0), "body_chars": lengths}


def delta_table(out: str) -> Any:
    import deltalake

    return deltalake.DeltaTable(os.path.join(out, TABLE)).to_pyarrow_table(columns=["qty", "body"])


def iceberg_table(out: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("replwire", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}")
    return catalog.load_table(tuple(TABLE.split("."))).scan(selected_fields=("qty", "body")).to_arrow()


class Runs:
    """The timed runs, in one warm session; each a fresh directory under ``work`` unless it is given one."""

    def __init__(self, spark: Any, work: pathlib.Path, rounds: int) -> None:
        self.spark, self.work, self.rounds, self.count = spark, work, rounds, 0

    def fresh(self) -> str:
        self.count += 1
        path = self.work / f"out{self.count}"
        shutil.rmtree(path, ignore_errors=True)
        return str(path)

    def apply(self, paths: list[str], fmt: str, onto: list[str] | None = None
              ) -> tuple[float, list[float], list[str], Any]:
        """Best of the rounds of ``apply(paths)``, each into a fresh OUT, or with ``onto`` into the OUT of that
        round (one a run before made): its seconds, every round's, the OUT of each round (kept: the caller
        removes them) and the best round's summary."""
        from replwire.spark import jobs

        times: list[float] = []
        outs: list[str] = []
        best: tuple[float, Any] | None = None
        for round_ in range(self.rounds):
            out = onto[round_] if onto is not None else self.fresh()
            outs.append(out)
            started = time.perf_counter()
            summary = jobs.apply(self.spark, paths, out, format=fmt)
            seconds = time.perf_counter() - started
            times.append(seconds)
            if best is None or seconds < best[0]:
                best = (seconds, summary)
        assert best is not None
        return best[0], times, outs, best[1]

    def changes(self, paths: list[str]) -> tuple[float, list[float]]:
        from replwire.spark import jobs

        times = []
        for _ in range(self.rounds):
            out = self.fresh()
            started = time.perf_counter()
            jobs.changes(self.spark, paths, out)
            times.append(time.perf_counter() - started)
            shutil.rmtree(out, ignore_errors=True)
        return min(times), times


def how(summary: Any) -> str:
    done = summary.applied.get(TABLE)
    return f"{done.how}, {done.changes:,} changes applied" if done is not None else "no table"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lakehouse", description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000, help="segment A's changes (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="100,000 changes: about a minute")
    parser.add_argument("--rounds", type=int, default=2, help="best of this many runs each (default 2)")
    parser.add_argument("--major", type=int, default=18)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.changes = 100_000
    inserts = args.changes * 6 // 10
    from replwire.codec.testing.localserver import PgServer

    from .spark_pipeline import spark_session

    machine = measure.machine()
    work = pathlib.Path(tempfile.mkdtemp(prefix="replwire-lakehouse-bench-"))
    # big transactions decoded in memory, as a production server is set up to (the test servers' 64kB spill)
    server = PgServer.start(args.major, settings={"logical_decoding_work_mem": "256MB", "shared_buffers": "512MB"})
    spark = None
    try:
        raw: dict[str, Any] = {"load_before": os.getloadavg()[0], "changes_asked": args.changes,
                               "rounds": args.rounds, "major": args.major}
        with server.connect(autocommit=True) as conn:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            started = time.perf_counter()
            a_changes = segment_a(conn, inserts)
            raw["a_write_seconds"] = time.perf_counter() - started
            log(f"segment A: {a_changes:,} changes written in {raw['a_write_seconds']:.1f} s")
            path_a, path_b = work / "a.rwcap", work / "b.rwcap"
            # A twice, from two slots that hold the same changes: the best of the two (the second file dropped)
            raw["capture_a"] = capture(server.dsn, path_a, a_changes)
            again = capture(server.dsn, work / "a-again.rwcap", a_changes, slot="bench_again")
            conn.execute("SELECT pg_drop_replication_slot('bench_again')")
            (work / "a-again.rwcap").unlink()
            raw["capture_a_rounds"] = [raw["capture_a"]["seconds"], again["seconds"]]
            raw["capture_a"]["seconds"] = min(raw["capture_a_rounds"])
            log(f"capture A: {raw['capture_a']['seconds']:.1f} s: {raw['capture_a']['summary']}")
            started = time.perf_counter()
            b_changes = segment_b(conn, inserts, args.changes // 10)
            raw["b_write_seconds"] = time.perf_counter() - started
            raw["capture_b"] = capture(server.dsn, path_b, b_changes)
            log(f"segment B: {b_changes:,} changes; capture B: {raw['capture_b']['summary']}")
            facts = server_facts(conn)
        raw.update(a_changes=a_changes, b_changes=b_changes, server=facts)
        a, ab = [str(path_a)], [str(path_a), str(path_b)]

        raw["decode_a"] = decode(path_a, args.rounds)

        spark = spark_session("local[2]")
        runs = Runs(spark, work, args.rounds)
        from replwire.spark import jobs

        for fmt in ("parquet", "delta", "iceberg"):  # warm-up, untimed: the JVM, Python workers, the libraries
            jobs.apply(spark, [str(path_b)], runs.fresh(), format=fmt)
        rows: list[list[Any]] = []

        def add(run: str, inputs: str, applied: int, seconds: float, times: list[float], note: str) -> None:
            rate = round(applied / seconds) if applied else None
            rows.append([run, inputs, applied, round(seconds, 2), rate,
                         f"{note}; rounds: {', '.join(f'{t:.2f}' for t in times)} s"])
            log(f"{run:48} {inputs:4} {seconds:8.2f} s {rate or 0:>10,} changes/s  {note}")

        rate = a_changes / raw["capture_a"]["seconds"]
        rows.append(["replwire capture (from the slot)", "A", a_changes, round(raw["capture_a"]["seconds"], 2),
                     round(rate), f"{raw['capture_a']['bytes'] / 2**20:,.1f} MiB file, a process of its own, "
                                  f"after the changes were written (the --idle-exit wait not counted); best of two "
                                  f"slots: {', '.join(f'{t:.2f}' for t in raw['capture_a_rounds'])} s"])
        rows.append(["PostgreSQL writing segment A", "A", a_changes, round(raw["a_write_seconds"], 2),
                     round(a_changes / raw["a_write_seconds"]), f"{-(-inserts // CHUNK) * 3:,} transactions, "
                                                                "one client"])
        rows.append(["replwire decode > /dev/null", "A", a_changes, round(raw["decode_a"], 2),
                     round(a_changes / raw["decode_a"]), "JSON lines, one core: the decoding alone; best of "
                                                          f"{2 * args.rounds}, first and last in the run"])
        # the yardsticks of the decoding: measured first and again last (this machine's speed drifts), best kept
        decoding = {"A": runs.changes(a)[1], "B": runs.changes([str(path_b)])[1]}
        for label, paths, applied in (("A", a, a_changes), ("A+B", ab, a_changes + b_changes)):
            seconds, times, outs, _ = runs.apply(paths, "parquet")
            add("apply --format parquet", label, applied, seconds, times, "the whole state written")
            for out in outs:
                shutil.rmtree(out, ignore_errors=True)
        finals: dict[str, list[str]] = {}
        for fmt in ("delta", "iceberg"):
            seconds, times, outs, summary = runs.apply(a, fmt)
            add(f"apply --format {fmt}: new table", "A", a_changes, seconds, times, how(summary))
            seconds, times, _, summary = runs.apply(a, fmt, onto=outs)
            add(f"apply --format {fmt}: the same inputs again", "A", 0, seconds, times,
                f"onto the A table: {how(summary)}; {summary.changes.skipped} of {summary.changes.parts} parts "
                "not decoded")
            seconds, times, _, summary = runs.apply(ab, fmt, onto=outs)
            add(f"apply --format {fmt}: A+B onto the A table", "A+B", b_changes, seconds, times,
                f"{how(summary)}; {summary.changes.skipped} of {summary.changes.parts} parts not decoded")
            seconds, times, scratch, summary = runs.apply(ab, fmt)
            add(f"apply --format {fmt}: new table", "A+B", a_changes + b_changes, seconds, times, how(summary))
            finals[fmt] = [outs[-1], scratch[-1]]
            for out in outs[:-1] + scratch[:-1]:
                shutil.rmtree(out, ignore_errors=True)
        raw["decode_a"] = min(raw["decode_a"], decode(path_a, args.rounds))
        log(f"replwire decode A: {raw['decode_a']:.1f} s")
        decoding["A"] += runs.changes(a)[1]
        decoding["B"] += runs.changes([str(path_b)])[1]
        for segment, note, applied in (("A", "per-table change rows written as Parquet: every apply's first step",
                                        a_changes),
                                       ("B", "B alone: what a merge of B decodes (A's parts are skipped)",
                                        b_changes)):
            add("changes job (decode into change rows)", segment, applied, min(decoding[segment]),
                decoding[segment], f"{note}; first and last in the run")
        rows[3:3] = rows[-2:]  # after the decode row
        del rows[-2:]
        checks = {}
        for fmt, outs in finals.items():
            for name, out in zip(("onto A", "from scratch"), outs):
                got = arrow_facts(delta_table(out) if fmt == "delta" else iceberg_table(out))
                checks[f"{fmt}, A+B {name}"] = got
                if got != facts:
                    raise SystemExit(f"{fmt}, A+B {name}: the table has {got}, the server {facts}")
        log(f"checked: every table equals the server's count, sum(qty), sum(length(body)): {facts}")
        raw["checks"] = checks
        raw["load_after"] = os.getloadavg()[0]
    finally:
        if spark is not None:
            spark.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    parquet_a = next(r for r in rows if r[0] == "apply --format parquet" and r[1] == "A")[3]
    delta_a = next(r for r in rows if r[0] == "apply --format delta: new table" and r[1] == "A")[3]
    changes_a, changes_b = (next(r for r in rows if r[0].startswith("changes job") and r[1] == segment)[3]
                            for segment in ("A", "B"))
    merges = {fmt: next(r for r in rows if r[0] == f"apply --format {fmt}: A+B onto the A table")[3]
              for fmt in ("delta", "iceberg")}
    notes = [f"Segment A: {a_changes:,} changes ({inserts:,} inserts, {inserts // 2:,} updates, "
             f"{inserts // 6:,} deletes) into one table (int key, int, numeric, timestamptz, text, jsonb, and a text "
             f"stored out of line in one row of twenty, left unchanged by the updates); segment B: {b_changes:,} "
             f"more (updates, deletes, inserts); {facts['rows']:,} rows at the end. PostgreSQL {args.major}, "
             f"captured by replwire capture (protocol 4, text values) into two files of "
             f"{raw['capture_a']['bytes'] / 2**20:,.1f} and {raw['capture_b']['bytes'] / 2**20:,.1f} MiB.",
             "Spark local[2], one warm session (an untimed run of each format first), the Python API "
             "(replwire.spark.jobs.apply); each run into a new OUT, except the same inputs again and A+B onto the "
             "A table, each round on the table a round of the A new-table run made; best of "
             f"{args.rounds} rounds. 'changes applied' counts the changes the run had to apply: B's alone when "
             "they are merged onto the A table, none when the inputs are applied already.",
             f"Where the time goes: the changes job (decoding into change rows) takes {changes_a:.1f} s of A, "
             f"apply --format parquet {parquet_a:.1f} s, into a new Delta table {delta_a:.1f} s; of B, "
             f"{changes_b:.1f} s, against {merges['delta']:.1f} s for merging B onto the Delta table and "
             f"{merges['iceberg']:.1f} s onto the Iceberg one.",
             "Checked at the end: the Delta and Iceberg tables of A+B (merged onto A, and new), read back with "
             "deltalake and pyiceberg, have the server's count(*), sum(qty) and sum(length(body)).",
             f"Load average {raw['load_before']:.1f} before, {raw['load_after']:.1f} after (two cores)."]
    result = {"machine": machine, "date": machine["date"],
              "columns": ["run", "inputs", "changes applied", "seconds", "changes/s", "note"],
              "rows": rows, "notes": notes, "raw": raw}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
