"""mkdocs hook: the benchmark page's tables and chart, rendered from the committed results while the site builds.

``docs/benchmark.md`` holds the prose and two markers.  ``<!-- replwire:benchmark -->`` becomes the tables and
the bar chart of ``bench/results/latest.json`` (written by ``python -m bench``), through :mod:`bench.report`;
a missing or malformed file fails the build instead of leaving the page empty.  ``<!-- replwire:spark-benchmark
-->`` becomes a section with the table of ``bench/results/spark.json`` when that file exists, and nothing
when it does not; ``<!-- replwire:snapshot-benchmark -->`` likewise with ``bench/results/snapshot.json``, and
``<!-- replwire:decode-benchmark -->`` with ``bench/results/decode.json``, and ``<!-- replwire:endtoend-benchmark
-->`` with ``bench/results/endtoend.json``.
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


def spark_section(path: pathlib.Path | None = None) -> str:
    """The Spark pipeline's section, or ``""`` when its results file does not exist."""
    path = path or SPARK_RESULTS
    if not path.exists():
        return ""
    data = report.load_generic(path)
    return ("## Spark pipeline\n\n"
            f"The Spark pipeline benchmark's own results, from `bench/results/{path.name}`.\n\n"
            + report.generic(data))


def snapshot_section(path: pathlib.Path | None = None) -> str:
    """The initial snapshot's section (``python -m bench.snapshot``), or ``""`` when its results file does
    not exist."""
    path = path or SNAPSHOT_RESULTS
    if not path.exists():
        return ""
    data = report.load_generic(path)
    return ("## Initial snapshot\n\n"
            "`replwire capture --snapshot` against `COPY ... TO STDOUT` alone on the same table, side by side in "
            f"one run (`python -m bench.snapshot`), from `bench/results/{path.name}`.\n\n" + report.generic(data))


def decode_section(path: pathlib.Path | None = None) -> str:
    """``replwire decode`` end to end (``python -m bench decode``), or ``""`` when its results file does not
    exist."""
    path = path or DECODE_RESULTS
    if not path.exists():
        return ""
    data = report.load_generic(path)
    return ("## replwire decode, end to end\n\n"
            "`replwire decode` against `bench/naive_decode.py` — a decode-to-JSON script written by hand: `struct` "
            "parsing, a relation cache, per-transaction buffering, values left as text, one `json.dumps` per "
            "change, no checks — as whole processes on the same stream, side by side in one run (`python -m bench "
            f"decode`), from `bench/results/{path.name}`.\n\n" + report.generic(data))


def endtoend_section(path: pathlib.Path | None = None) -> str:
    """The live end-to-end section (``python -m bench endtoend``), or ``""`` when its results file does not
    exist."""
    path = path or ENDTOEND_RESULTS
    if not path.exists():
        return ""
    data = report.load_generic(path)
    return ("## End to end from a live server\n\n"
            "`replwire capture` draining a slot while pgbench writes, then `replwire decode` on its file, with "
            "`pg_recvlogical` draining a second slot of the same changes at the same time (`python -m bench "
            f"endtoend`), from `bench/results/{path.name}`.\n\n" + report.generic(data))


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown or SPARK_MARKER not in markdown:
        raise PluginError(f"replwire benchmark: {PAGE} must keep the markers {MARKER} and {SPARK_MARKER}")
    try:
        results = report.load(RESULTS)
        body = report.markdown(results, chart=report.svg(results))
        spark = spark_section()
        snapshot = snapshot_section()
        decode = decode_section()
        endtoend = endtoend_section()
    except report.ResultsError as error:
        raise PluginError(f"replwire benchmark: {error}") from error
    return (markdown.replace(MARKER, body).replace(SPARK_MARKER, spark).replace(SNAPSHOT_MARKER, snapshot)
            .replace(DECODE_MARKER, decode).replace(ENDTOEND_MARKER, endtoend))
