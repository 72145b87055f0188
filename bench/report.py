"""Render a benchmark results file as Markdown tables and an SVG bar chart (for the docs page).

    python -m bench.report [bench/results/latest.json] [--svg chart.svg]   (Markdown on stdout)

:func:`load` reads and checks a results file (:class:`ResultsError` for a missing or malformed one);
:func:`markdown` gives the machine and date, per corpus the parse and the build tables (messages/s, MB/s,
ratio to the yardstick, peak RSS) and the per-family tables, the targets, the streaming check and where the
time goes; :func:`svg` a horizontal bar chart of messages/s per codec, corpus and operation.  Both take the
parsed JSON (see ``bench/README.md`` for its shape) and nothing else.  :func:`generic` renders any other
results file of the documented generic shape (the Spark pipeline's ``bench/results/spark.json``) as a table.

Strategy: plain string building, no plotting library; the chart's scale is shared by all bars so that
lengths compare across corpora.  A file is checked before anything is rendered, so that a broken file fails
the docs build with the path of the bad field instead of rendering an empty page.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
from datetime import datetime
from html import escape
from typing import Any

FORMAT = "replwire-bench/1"
CODEC_ORDER = ["replwire-fast", "replwire-python", "yardstick", "pypgoutput", "construct-compiled",
               "replwire-reference"]
COLORS = {"replwire-fast": "#2b6cb0", "replwire-python": "#63b3ed", "yardstick": "#718096", "pypgoutput": "#dd6b20",
          "construct-compiled": "#38a169", "replwire-reference": "#805ad5"}
OPS = ("parse", "build")


class ResultsError(ValueError):
    """A results file that is missing, is not JSON, or does not have the documented shape."""


# ---------------------------------------------------------------------------------------------------------
# checking


def _need(value: Any, where: str, kind: type | tuple[type, ...], what: str, *, positive: bool = False) -> Any:
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if ok and isinstance(value, (int, float)) and not isinstance(value, bool):
        ok = math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        raise ResultsError(f"{where}: expected {what}, got {value!r}")
    return value


def _key(obj: dict, key: str, where: str, kind: type | tuple[type, ...], what: str, *,
         positive: bool = False) -> Any:
    path = f"{where}.{key}" if where else key
    if key not in obj:
        raise ResultsError(f"{where or 'results file'}: missing {key!r}")
    return _need(obj[key], path, kind, what, positive=positive)


_NUMBER = (int, float)


def _date(value: str, where: str) -> None:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ResultsError(f"{where}: expected an ISO 8601 date, got {value!r}") from None


def validate(results: Any) -> dict[str, Any]:
    """Check that ``results`` has the shape ``bench/README.md`` documents; return it, or raise
    :class:`ResultsError` naming the first bad field."""
    _need(results, "results file", dict, "a JSON object")
    if results.get("format") != FORMAT:
        raise ResultsError(f"format: expected {FORMAT!r}, got {results.get('format')!r}")
    _key(results, "command", "", str, "the command line")
    machine = _key(results, "machine", "", dict, "an object")
    for key in ("date", "python", "implementation", "platform", "os", "cpu"):
        _key(machine, key, "machine", str, "text")
    _date(machine["date"], "machine.date")
    _key(machine, "cpus", "machine", int, "a positive integer", positive=True)
    _key(results, "corpora", "", dict, "an object")
    rows = _key(results, "results", "", list, "a list")
    if not rows:
        raise ResultsError("results: no rows")
    for i, row in enumerate(rows):
        where = f"results[{i}]"
        _need(row, where, dict, "an object")
        for key in ("corpus", "subset", "family", "codec"):
            _key(row, key, where, str, "text")
        if _key(row, "op", where, str, "text") not in OPS:
            raise ResultsError(f"{where}.op: expected 'parse' or 'build', got {row['op']!r}")
        for key in ("messages", "bytes", "peak_rss_bytes"):
            _key(row, key, where, int, "a positive integer", positive=True)
        _key(row, "rss_before_bytes", where, int, "a byte count")
        for key in ("seconds", "messages_per_s", "mb_per_s"):
            _key(row, key, where, _NUMBER, "a positive number", positive=True)
        if row.get("ratio_to_yardstick") is not None:
            _key(row, "ratio_to_yardstick", where, _NUMBER, "a positive number or null", positive=True)
        elif "ratio_to_yardstick" not in row:
            raise ResultsError(f"{where}: missing 'ratio_to_yardstick'")
    if not any(r["codec"] == "replwire-fast" and r["family"] == "all" for r in rows):
        raise ResultsError("results: no totals (family 'all') for replwire-fast")
    for i, target in enumerate(_key(results, "targets", "", list, "a list")):
        where = f"targets[{i}]"
        _need(target, where, dict, "an object")
        for key in ("name", "corpus", "subset"):
            _key(target, key, where, str, "text")
        _key(target, "value", where, _NUMBER, "a number")
        _key(target, "holds", where, bool, "true or false")
    stream = results.get("stream")
    if stream is not None:
        _need(stream, "stream", dict, "an object or null")
        for key in ("file_bytes", "messages", "peak_rss_bytes", "limit_bytes", "rss_at_start_bytes"):
            _key(stream, key, "stream", int, "a positive integer", positive=True)
        for key in ("messages_per_s", "mb_per_s"):
            _key(stream, key, "stream", _NUMBER, "a positive number", positive=True)
        _key(stream, "holds", "stream", bool, "true or false")
    return results


def load(path: pathlib.Path) -> dict[str, Any]:
    """Read and check a results file of :data:`FORMAT`."""
    return validate(_read(path))


def _read(path: pathlib.Path) -> Any:
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ResultsError(f"{path}: cannot read it ({error.strerror or error}); run `python -m bench`") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path}: not JSON ({error})") from None


# ---------------------------------------------------------------------------------------------------------
# the benchmark's own results


def _order(codec: str) -> int:
    return CODEC_ORDER.index(codec) if codec in CODEC_ORDER else len(CODEC_ORDER)


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def _suites(results: dict[str, Any]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for r in results["results"]:
        key = (r["corpus"], r["subset"])
        if key not in seen:
            seen.append(key)
    return seen


def _rows(results: dict[str, Any], corpus: str, subset: str, family: str = "all") -> dict[tuple[str, str], dict]:
    return {(r["op"], r["codec"]): r for r in results["results"]
            if r["corpus"] == corpus and r["subset"] == subset and r["family"] == family}


def _suite_title(corpus: str, subset: str) -> str:
    return corpus if subset == "all" else f"{corpus}, {subset}"


def _bytes(count: float) -> str:
    """A byte count in decimal units, as a person reads it: ``25.3 GB``."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:,.0f} bytes"


def _when(value: str) -> str:
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M %Z").strip()


def machine_rows(machine: dict[str, Any]) -> list[tuple[str, str]]:
    """What a run's ``machine`` object says, as (label, readable text) rows: the keys ``python -m bench``
    writes in words and units, any other key as its name and value."""
    m = dict(machine)
    rows = []
    if "date" in m:
        rows.append(("date of the run", _when(m.pop("date"))))
    if "cpu" in m:
        cores = f", {m.pop('cpus')} cores (logical CPUs)" if "cpus" in m else ""
        memory = f", {_bytes(m.pop('memory_bytes'))} RAM" if m.get("memory_bytes") else ""
        rows.append(("CPU", f"{_text(m.pop('cpu'))}{cores}{memory}"))
    if "python" in m:
        rows.append(("Python", _text(f"{m.pop('implementation', '')} {m.pop('python')}".strip())))
    if "os" in m:
        rows.append(("OS", _text(m.pop("os")) + (f" ({_text(m.pop('platform'))})" if "platform" in m else "")))
    if "replwire_commit" in m:
        rows.append(("replwire", f"commit `{m.pop('replwire_commit') or '?'}`"))
    load = m.pop("load_average_at_start", None)
    if load:
        rows.append(("load average at start", f"{load[0]:.2f}"))
    for key, value in m.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else "—" if value is None else str(value)
        rows.append((_text(key.replace("_", " ")), _text(shown)))
    return rows


def _two_columns(rows: list[tuple[str, str]]) -> list[str]:
    return ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows] + [""]


def machine_table(results: dict[str, Any]) -> list[str]:
    seconds = results.get("seconds")
    command = f"`{results['command'].strip()}`" + (
        f", {seconds / 60:.1f} minutes" if isinstance(seconds, (int, float)) else "")
    return _two_columns([*machine_rows(results["machine"]), ("command", command)])


def missed_words(missed: list[str], total: int) -> str:
    """One sentence: which of ``total`` targets were missed (``missed`` describes each), or that none was."""
    if not missed:
        return f"All {total} targets were met." if total > 1 else "The target was met."
    return (f"Missed {len(missed)} of {total} targets: " if total > 1 else "Missed the target: ") \
        + "; ".join(missed) + "."


def markdown(results: dict[str, Any], chart: str | None = None) -> str:
    """The results as Markdown: ``##`` sections, ``###`` per corpus; ``chart`` (an SVG) goes above the tables."""
    out = ["## The run", ""] + machine_table(results)
    out += ["## Throughput", "",
            "Each codec parses every message of the corpus (results thrown away), then builds every message "
            "from its own parsed objects; the best of the rounds counts. × yardstick is the ratio of "
            "messages/s to the hand-written `struct` codec's on the same messages in the same run.", ""]
    if chart:
        out += ['<div class="replwire-bench-chart">', chart.strip(), "</div>", ""]
    for corpus, subset in _suites(results):
        summary = results["corpora"].get(f"{corpus}/{subset}", {})
        out += [f"### {_suite_title(corpus, subset)}: {summary.get('messages', 0):,} messages, "
                f"{summary.get('bytes', 0) / 1e6:.1f} MB", ""]
        if summary.get("description"):
            out += [summary["description"] + ".", ""]
        rows = _rows(results, corpus, subset)
        for op in OPS:
            codecs = sorted((c for o, c in rows if o == op), key=_order)
            if not codecs:
                continue
            out += [f"**{op}**", "",
                    "| codec | messages/s | MB/s | × yardstick | peak RSS (MB) | of it, the run's own (MB) |",
                    "|---|--:|--:|--:|--:|--:|"]
            for codec in codecs:
                r = rows[op, codec]
                own = max(r["peak_rss_bytes"] - r["rss_before_bytes"], 0)
                out.append(f"| `{codec}` | {_rate(r['messages_per_s'])} | {r['mb_per_s']:.1f} | "
                           f"{_ratio(r['ratio_to_yardstick'])} | {_mib(r['peak_rss_bytes'])} | {own / 2**20:,.1f} |")
            out.append("")
        families = [f for f in dict.fromkeys(r["family"] for r in results["results"]
                                            if r["corpus"] == corpus and r["subset"] == subset) if f != "all"]
        if len(families) > 1:
            codecs = sorted({c for _, c in rows}, key=_order)
            for op in OPS:
                lines = []
                for family in families:
                    frows = _rows(results, corpus, subset, family)
                    count = next((r["messages"] for (o, _), r in frows.items() if o == op), None)
                    if count is None:
                        continue
                    cells = ["—" if (op, c) not in frows else
                             f"{_rate(frows[op, c]['messages_per_s'])} ({_ratio(frows[op, c]['ratio_to_yardstick'])})"
                             for c in codecs]
                    lines.append(f"| {family} | {count:,} | " + " | ".join(cells) + " |")
                if lines:
                    out += [f"**{op}, per message family**: messages/s (× yardstick)", "",
                            "| family | messages | " + " | ".join(f"`{c}`" for c in codecs) + " |",
                            "|---|--:|" + "--:|" * len(codecs)] + lines + [""]
    out += ["Peak RSS: the process's high-water mark during the codec's best run, which includes the corpus and "
            "the prepared inputs the benchmark holds; the run's own: how far it rose during that run. The "
            "streaming check below is the memory measurement that matters.", ""]
    if results["targets"]:
        targets = results["targets"]
        missed = [f"{t['name']} on the {_suite_title(t['corpus'], t['subset'])} corpus, measured "
                  f"{t['value']:.2f}×" for t in targets if not t["holds"]]
        out += ["## Targets", "", "The speed targets, as ratios of messages/s measured in the same run. "
                + missed_words(missed, len(targets)), "",
                "| target | corpus | measured | met |", "|---|---|--:|:-:|"]
        for t in targets:
            out.append(f"| {t['name']} | {_suite_title(t['corpus'], t['subset'])} | {t['value']:.2f}× | "
                       f"{'yes' if t['holds'] else '**no: missed**'} |")
        out.append("")
    s = results.get("stream")
    if s:
        out += ["## Streaming a 1 GB capture", "",
                "Both corpora written over and over to one file, which a fresh interpreter decodes one message at "
                "a time with `replwire.codec.parse`, keeping nothing.", "",
                "| file | messages | messages/s | MB/s | RSS at start (MB) | peak RSS (MB) | limit (MB) | met |",
                "|--:|--:|--:|--:|--:|--:|--:|:-:|",
                f"| {s['file_bytes'] / 2**30:.2f} GiB | {s['messages']:,} | {_rate(s['messages_per_s'])} | "
                f"{s['mb_per_s']:.1f} | {_mib(s['rss_at_start_bytes'])} | {_mib(s['peak_rss_bytes'])} | "
                f"{_mib(s['limit_bytes'])} | {'yes' if s['holds'] else '**no: missed**'} |", ""]
    b = results.get("breakdown")
    prof = results.get("profile")
    if b or prof:
        out += ["## Where the time goes", ""]
    if b:
        out += [f"`replwire-fast` parse on the {b['corpus']} corpus, by taking parts away:", "",
                "| step | ns per message | share of `parse` |", "|---|--:|--:|"]
        for step in b["steps"]:
            out.append(f"| {step['step']} | {step['ns_per_message']:,.0f} | {step['share_of_public']:.0%} |")
        out.append("")
    for op in OPS:
        p = (prof or {}).get(op)
        if not p:
            continue
        out += [f"`replwire-fast` {op}, cProfile, one pass over the synthetic corpus (profiling overhead inflates "
                "the builtins' share):", "",
                "| function | calls | own time (s) | share |", "|---|--:|--:|--:|"]
        for e in p["top"][:10]:
            out.append(f"| `{e['function']}` | {e['calls']:,} | {e['tottime_s']:.3f} | {e['share']:.0%} |")
        out.append("")
    if results.get("left_out"):
        out += ["Left out after failing the sanity check: " + "; ".join(
            f"{suite}: {codec} ({why[:120]})" for suite, codecs in results["left_out"].items()
            for codec, why in codecs.items()), ""]
    return "\n".join(out)


def svg(results: dict[str, Any], width: int = 760) -> str:
    """A horizontal bar chart of messages/s, one group per corpus and operation."""
    groups = []
    for corpus, subset in _suites(results):
        rows = _rows(results, corpus, subset)
        for op in OPS:
            bars = sorted(((c, r) for (o, c), r in rows.items() if o == op), key=lambda cr: _order(cr[0]))
            if bars:
                label = f"{corpus}{'' if subset == 'all' else ' (' + subset + ')'} — {op}"
                groups.append((label, bars))
    top = max((r["messages_per_s"] for _, bars in groups for _, r in bars), default=1.0)
    left, right, bar, gap, head = 170, 150, 16, 4, 22
    height = 40 + sum(head + len(bars) * (bar + gap) + 8 for _, bars in groups)
    scale = (width - left - right) / top
    title = f"Messages per second ({results['machine']['date'][:10]}, {results['machine']['cpu']})"
    parts = [f'<svg class="replwire-bench" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" style="max-width: 100%; height: auto" font-family="sans-serif" '
             f'font-size="12" role="img" aria-label="{escape(title)}">',
             f'<text x="10" y="20" font-size="14" font-weight="bold" fill="currentColor">{escape(title)}</text>']
    y = 36
    for label, bars in groups:
        parts.append(f'<text x="10" y="{y + 14}" font-weight="bold" fill="currentColor">{escape(label)}</text>')
        y += head
        for codec, r in bars:
            length = max(1.0, r["messages_per_s"] * scale)
            ratio = r["ratio_to_yardstick"]
            note = f"{r['messages_per_s']:,.0f}/s" + (f"  ({ratio:.2f}×)" if ratio is not None else "")
            parts.append(f'<text x="{left - 6}" y="{y + bar - 4}" text-anchor="end" fill="currentColor">'
                         f'{escape(codec)}</text>')
            parts.append(f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar}" '
                         f'fill="{COLORS.get(codec, "#999")}"><title>{escape(codec)}: {escape(note)}</title></rect>')
            parts.append(f'<text x="{left + length + 6:.1f}" y="{y + bar - 4}" fill="currentColor">'
                         f'{escape(note)}</text>')
            y += bar + gap
        y += 8
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------------------
# other results files: {"machine", "date", "columns", "rows", "notes"} and optionally "targets"


GENERIC_KEYS = ("machine", "date", "columns", "rows", "notes")


def validate_generic(data: Any, name: str = "results") -> dict[str, Any]:
    """Check a generic results file: ``machine`` (text or an object of plain values), ``date`` (ISO 8601),
    ``columns`` (names), ``rows`` (lists as long as ``columns``, of text, numbers, booleans or null),
    ``notes`` (text) and, optionally, ``targets`` (``name``, ``value``, ``at_least``, ``holds``)."""
    _need(data, name, dict, "a JSON object")
    for key in GENERIC_KEYS:
        if key not in data:
            raise ResultsError(f"{name}: missing {key!r}")
    machine = data["machine"]
    if isinstance(machine, dict):
        for key, value in machine.items():
            if not isinstance(value, (str, int, float, bool, list)) and value is not None:
                raise ResultsError(f"{name}.machine.{key}: expected a plain value, got {value!r}")
    else:
        _need(machine, f"{name}.machine", str, "text or an object")
    _need(data["date"], f"{name}.date", str, "text")
    _date(data["date"], f"{name}.date")
    columns = _need(data["columns"], f"{name}.columns", list, "a list of column names")
    if not columns:
        raise ResultsError(f"{name}.columns: no columns")
    for i, column in enumerate(columns):
        _need(column, f"{name}.columns[{i}]", str, "text")
    for i, row in enumerate(_need(data["rows"], f"{name}.rows", list, "a list of rows")):
        _need(row, f"{name}.rows[{i}]", list, "a list")
        if len(row) != len(columns):
            raise ResultsError(f"{name}.rows[{i}]: {len(row)} cells for {len(columns)} columns")
        for j, cell in enumerate(row):
            if cell is not None and not isinstance(cell, (str, int, float)):
                raise ResultsError(f"{name}.rows[{i}][{j}]: expected text, a number or null, got {cell!r}")
            if isinstance(cell, float) and not math.isfinite(cell):
                raise ResultsError(f"{name}.rows[{i}][{j}]: expected a finite number, got {cell!r}")
    for i, note in enumerate(_need(data["notes"], f"{name}.notes", list, "a list of notes")):
        _need(note, f"{name}.notes[{i}]", str, "text")
    for i, target in enumerate(_need(data.get("targets", []), f"{name}.targets", list, "a list of targets")):
        where = f"{name}.targets[{i}]"
        _need(target, where, dict, "an object")
        _key(target, "name", where, str, "text")
        for key in ("value", "at_least"):
            if isinstance(_key(target, key, where, _NUMBER, "a number"), bool):
                raise ResultsError(f"{where}.{key}: expected a number, got {target[key]!r}")
        _key(target, "holds", where, bool, "true or false")
    return data


def load_generic(path: pathlib.Path) -> dict[str, Any]:
    return validate_generic(_read(path), pathlib.Path(path).name)


def _text(value: Any) -> str:
    """Plain text for a Markdown table cell: HTML escaped, no pipes or line breaks."""
    return escape(str(value), quote=False).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _cell(value: Any) -> str:
    """A value as the file has it (no rounding: the file decides the precision), with thousands separators."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:,}"
    return _text(value)


def generic(data: dict[str, Any]) -> str:
    """A generic results file (checked with :func:`validate_generic`) as Markdown: date and machine in a
    sentence, one table with its columns and rows (numbers aligned right), its notes as a list, then its
    targets as a list, the missed ones named in words."""
    machine = data["machine"]
    if isinstance(machine, dict):
        machine = "; ".join(f"{label}: {text}" for label, text in machine_rows(machine)
                            if label != "date of the run")
    else:
        machine = _text(machine)
    out = [f"Measured {_when(data['date'])} on {machine}.", ""]
    numeric = [bool(data["rows"]) and all(row[j] is None or (isinstance(row[j], (int, float))
                                                           and not isinstance(row[j], bool)) for row in data["rows"])
               for j in range(len(data["columns"]))]
    out += ["| " + " | ".join(_text(c) for c in data["columns"]) + " |",
           "|" + "".join("--:|" if n else "---|" for n in numeric)]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in data["rows"]]
    out.append("")
    out += [f"- {_text(note)}" for note in data["notes"]]
    targets = data.get("targets", [])
    if targets:
        missed = [f"{_text(t['name'])}, measured {t['value']:.2f}× for at least {t['at_least']:.2f}×"
                  for t in targets if not t["holds"]]
        out += ["", "**Targets.** " + missed_words(missed, len(targets)), ""]
        out += [f"- {_text(t['name'])}: {t['value']:.2f}×, for at least {t['at_least']:.2f}×: "
                f"{'met' if t['holds'] else '**missed**'}" for t in targets]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report")
    parser.add_argument("results", nargs="?", type=pathlib.Path,
                        default=pathlib.Path(__file__).parent / "results" / "latest.json")
    parser.add_argument("--svg", type=pathlib.Path, help="also write the bar chart here")
    args = parser.parse_args(argv)
    try:
        results = load(args.results)
    except ResultsError as error:
        parser.error(str(error))
    print(markdown(results))
    if args.svg:
        args.svg.write_text(svg(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
