"""mkdocs hook: the benchmark page's tables and chart, rendered from the committed results while the site builds.

``docs/benchmark.md`` holds the prose and two markers.  ``<!-- replwire:benchmark -->`` becomes the tables and
the bar chart of ``bench/results/latest.json`` (written by ``python -m bench``), through :mod:`bench.report`;
a missing or malformed file fails the build instead of leaving the page empty.  ``<!-- replwire:spark-benchmark
-->`` becomes a section with the table of ``bench/results/spark.json`` when that file exists, and nothing
when it does not; ``<!-- replwire:snapshot-benchmark -->`` likewise with ``bench/results/snapshot.json``, and
``<!-- replwire:decode-benchmark -->`` with ``bench/results/decode.json``, and ``<!-- replwire:endtoend-benchmark
-->`` with ``bench/results/endtoend.json``, and ``<!-- replwire:serve-benchmark -->`` with
``bench/results/serve.json``, and ``<!-- replwire:realschema-benchmark -->`` with ``bench/results/realschema.json``, and
``<!-- replwire:spark-realschema-benchmark -->`` with ``bench/results/spark_realschema.json``, and ``<!--
replwire:lakehouse-benchmark -->`` with ``bench/results/lakehouse.json``.
"""

from __future__ import annotations

import pathlib
import sys

from mkdocs.exceptions import PluginError

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a plain package at the repository root, never installed
    sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402

PAGE = "benchmark.md"
RESULTS = ROOT / "bench" / "results" / "latest.json"
SPARK_RESULTS = ROOT / "bench" / "results" / "spark.json"
MARKER = "<!-- replwire:benchmark -->"
SPARK_MARKER = "<!-- replwire:spark-benchmark -->"
SNAPSHOT_RESULTS = ROOT / "bench" / "results" / "snapshot.json"
SNAPSHOT_MARKER = "<!-- replwire:snapshot-benchmark -->"
DECODE_RESULTS = ROOT / "bench" / "results" / "decode.json"
DECODE_MARKER = "<!-- replwire:decode-benchmark -->"
ENDTOEND_RESULTS = ROOT / "bench" / "results" / "endtoend.json"
ENDTOEND_MARKER = "<!-- replwire:endtoend-benchmark -->"
SERVE_RESULTS = ROOT / "bench" / "results" / "serve.json"
SERVE_MARKER = "<!-- replwire:serve-benchmark -->"
REALSCHEMA_RESULTS = ROOT / "bench" / "results" / "realschema.json"
REALSCHEMA_MARKER = "<!-- replwire:realschema-benchmark -->"
SPARK_REALSCHEMA_RESULTS = ROOT / "bench" / "results" / "spark_realschema.json"
SPARK_REALSCHEMA_MARKER = "<!-- replwire:spark-realschema-benchmark -->"
LAKEHOUSE_RESULTS = ROOT / "bench" / "results" / "lakehouse.json"
LAKEHOUSE_MARKER = "<!-- replwire:lakehouse-benchmark -->"
LAKEHOUSE_FOLLOW_RESULTS = ROOT / "bench" / "results" / "lakehouse_follow.json"
LAKEHOUSE_FOLLOW_MARKER = "<!-- replwire:lakehouse-follow-benchmark -->"


def committed(results: dict, path: pathlib.Path) -> dict:
    """``results``, if it was measured on a committed state of replwire: the page shows no figure that no
    commit can reproduce (the benchmarks record ``replwire_commit`` with ``+uncommitted`` otherwise)."""
    machine = results.get("machine")
    commit = machine.get("replwire_commit") if isinstance(machine, dict) else None
    if isinstance(commit, str) and commit.endswith("+uncommitted"):
        raise report.ResultsError(f"{path.name}: measured on uncommitted changes ({commit}): run the benchmark "
                                  "again on a committed state")
    return results


def section(path: pathlib.Path, title: str, intro: str) -> str:
    """The section of one optional results file: ``title``, ``intro`` and the file's table, or ``""`` when
    the file does not exist."""
    if not path.exists():
        return ""
    return (f"## {title}\n\n{intro}, from `bench/results/{path.name}`.\n\n"
            + report.generic(committed(report.load_generic(path), path)))


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown or SPARK_MARKER not in markdown:
        raise PluginError(f"replwire benchmark: {PAGE} must keep the markers {MARKER} and {SPARK_MARKER}")
    try:
        results = committed(report.load(RESULTS), RESULTS)
        body = report.markdown(results, chart=report.svg(results))
        sections = {
            SPARK_MARKER: section(SPARK_RESULTS, "Spark pipeline", "The Spark pipeline benchmark's own results"),
            SNAPSHOT_MARKER: section(
                SNAPSHOT_RESULTS, "Snapshots and backfills",
                "`replwire capture --snapshot` and `--backfill` against `COPY ... TO STDOUT` alone on the same table, "
                "side by side in one run (`python -m bench.snapshot`)"),
            DECODE_MARKER: section(
                DECODE_RESULTS, "replwire decode, end to end",
                "`replwire decode` against `bench/naive_decode.py` — a decode-to-JSON script written by hand: "
                "`struct` parsing, a relation cache, per-transaction buffering, values left as text, one "
                "`json.dumps` per change, no checks — as whole processes on the same stream, side by side in one "
                "run (`python -m bench decode`)"),
            REALSCHEMA_MARKER: section(
                REALSCHEMA_RESULTS, "replwire decode on real schemas",
                "`replwire decode` (JSON lines, Debezium's format, and the pure-Python codec) against "
                "`bench/naive_stream_decode.py` — a streaming-aware decode-to-JSON script written by hand: "
                "`struct` parsing, changes buffered per transaction through streamed, aborted and prepared "
                "transactions, values left as the server's text, no checks — as whole processes on streams the "
                "benchmark captures from PostgreSQL 18 and 15: int/text, mixed column types (numeric, floats, "
                "json/jsonb, arrays, timestamps, bytea, uuid, interval), large streamed transactions with "
                "rolled-back savepoints and aborts, binary mode, two-phase with Origin, and REPLICA IDENTITY FULL "
                "with unchanged TOAST (`python -m bench realschema`)"),
            SPARK_REALSCHEMA_MARKER: section(
                SPARK_REALSCHEMA_RESULTS, "The Spark jobs on real schemas",
                "The `changes` and `apply` jobs, the change DataFrame and the per-table DataFrame on a warm "
                "`local[2]` session, and the `changes` job on a standalone cluster of two one-core workers whose "
                "Python has no replwire (shipped with the job), on the mixed-types and streamed streams of the "
                "real-schema suite, against `replwire decode`'s events per second on one core (`python -m bench "
                "spark-realschema`)"),
            LAKEHOUSE_MARKER: section(
                LAKEHOUSE_RESULTS, "Applying into Delta Lake and Iceberg",
                "`replwire spark apply --format delta` and `--format iceberg` of a capture of a million changes (60% "
                "inserts, 30% updates, 10% deletes into a table of int, numeric, timestamptz, text, jsonb and a "
                "TOASTed text) into new tables, the same inputs again, and a second capture of 10% more merged onto "
                "the tables, against `apply --format parquet`, against the rate at which `replwire capture` takes the "
                "changes from the server, and against `replwire decode` of the same file; on a warm `local[2]` "
                "session, the tables checked against the server's at the end (`python -m bench.lakehouse`)"),
            LAKEHOUSE_FOLLOW_MARKER: section(
                LAKEHOUSE_FOLLOW_RESULTS, "Delta tables following a running capture",
                "`replwire spark apply --follow --format delta` while `replwire capture` runs and a client writes "
                "at a steady offered load (a transaction every 0.1 s: half inserts, three tenths updates, a fifth "
                "deletes): how long after its commit each transaction is in the Delta table, and the table "
                "checked against the server's at the end (`python -m bench.lakehouse_follow`)"),
            ENDTOEND_MARKER: section(
                ENDTOEND_RESULTS, "End to end from a live server",
                "`replwire capture` draining a slot while pgbench writes, then `replwire decode` on its file, with "
                "`pg_recvlogical` draining a second slot of the same changes at the same time (`python -m bench "
                "endtoend`)"),
            SERVE_MARKER: section(
                SERVE_RESULTS, "replwire serve",
                "Messages per second of a generated stream re-encoded by `replwire serve`'s replay, and received by "
                "psycopg2's `LogicalReplicationConnection` over loopback (`python -m bench.serve`)"),
        }
    except report.ResultsError as error:
        raise PluginError(f"replwire benchmark: {error}") from error
    markdown = markdown.replace(MARKER, body)
    for marker, text in sections.items():
        markdown = markdown.replace(marker, text)
    return markdown
