"""Render a benchmark results file as Markdown tables and an SVG bar chart (for the docs page).

    python -m bench.report [bench/results/latest.json] [--svg chart.svg]   (Markdown on stdout)

:func:`markdown` gives the machine and date, the totals per corpus (messages/s, MB/s, ratio to the
yardstick, peak RSS; parse and build), the per-family breakdown, the targets, the streaming check and the
top of the profile; :func:`svg` a horizontal bar chart of messages/s per codec and corpus.  Both take the
parsed JSON (see ``bench/README.md`` for its shape) and nothing else.

Strategy: plain string building, no plotting library; the chart's scale is shared by all bars so that
lengths compare across corpora.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from html import escape
from typing import Any

CODEC_ORDER = ["replwire-fast", "yardstick", "pypgoutput", "construct-compiled", "replwire-reference"]
COLORS = {"replwire-fast": "#2b6cb0", "yardstick": "#718096", "pypgoutput": "#dd6b20",
          "construct-compiled": "#38a169", "replwire-reference": "#805ad5"}


def _order(codec: str) -> int:
    return CODEC_ORDER.index(codec) if codec in CODEC_ORDER else len(CODEC_ORDER)


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


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


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    memory = f", {m['memory_bytes'] / 2**30:.0f} GiB RAM" if m.get("memory_bytes") else ""
    out = [f"Measured {m['date']} on {m['cpu']} ({m['cpus']} CPUs{memory}), {m['implementation']} {m['python']}, "
           f"{m['platform']}; replwire {m.get('replwire_commit') or '?'}. Command: `{results['command'].strip()}`.",
           ""]
    for corpus, subset in _suites(results):
        summary = results["corpora"].get(f"{corpus}/{subset}", {})
        title = corpus if subset == "all" else f"{corpus}, {subset}"
        out.append(f"#### {title}: {summary.get('messages', 0):,} messages, {summary.get('bytes', 0) / 1e6:.1f} MB")
        out.append("")
        if summary.get("description"):
            out += [summary["description"] + ".", ""]
        out.append("| codec | parse msg/s | parse MB/s | parse × yardstick | build msg/s | build MB/s "
                   "| build × yardstick | peak RSS (MB) | of it, the run's own (MB) |")
        out.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        rows = _rows(results, corpus, subset)
        for codec in sorted({c for _, c in rows}, key=_order):
            p, b = rows.get(("parse", codec)), rows.get(("build", codec))
            top = max((r for r in (p, b) if r), key=lambda r: r["peak_rss_bytes"])
            own = max(r["peak_rss_bytes"] - r.get("rss_before_bytes", r["peak_rss_bytes"]) for r in (p, b) if r)
            cells = [f"`{codec}`"]
            for r in (p, b):
                cells += ([_rate(r["messages_per_s"]), f"{r['mb_per_s']:.1f}", _ratio(r["ratio_to_yardstick"])]
                          if r else ["—", "—", "—"])
            cells += [f"{top['peak_rss_bytes'] / 2**20:,.0f}", f"{max(own, 0) / 2**20:,.1f}"]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        out.append("Peak RSS: the process's high-water mark during the codec's best run (corpus and prepared "
                   "inputs included); the run's own: how far it rose during that run.")
        out.append("")
        families = [f for f in dict.fromkeys(r["family"] for r in results["results"]
                                            if r["corpus"] == corpus and r["subset"] == subset) if f != "all"]
        if len(families) > 1:
            codecs = sorted({c for _, c in rows}, key=_order)
            out.append("| family | op | messages | " + " | ".join(f"`{c}`" for c in codecs) + " |")
            out.append("|---|---|--:|" + "--:|" * len(codecs))
            for family in families:
                frows = _rows(results, corpus, subset, family)
                for op in ("parse", "build"):
                    cells = []
                    count = next((r["messages"] for (o, _), r in frows.items() if o == op), None)
                    if count is None:
                        continue
                    for codec in codecs:
                        r = frows.get((op, codec))
                        cells.append("—" if r is None else f"{_rate(r['messages_per_s'])} ({_ratio(r['ratio_to_yardstick'])})")
                    out.append(f"| {family} | {op} | {count:,} | " + " | ".join(cells) + " |")
            out.append("")
            out.append("Per family: messages/s (ratio to the yardstick).")
            out.append("")
    if results.get("targets"):
        out += ["#### Targets", "", "| target | corpus | measured | holds |", "|---|---|--:|:-:|"]
        for t in results["targets"]:
            where = t["corpus"] if t["subset"] == "all" else f"{t['corpus']}, {t['subset']}"
            out.append(f"| {t['name']} | {where} | {t['value']:.2f}× | {'yes' if t['holds'] else '**no**'} |")
        out.append("")
    s = results.get("stream")
    if s:
        out += ["#### Streaming", "",
                f"Decoding a {s['file_bytes'] / 2**30:.2f} GiB capture file ({s['messages']:,} messages) one message "
                f"at a time in a fresh process: {_rate(s['messages_per_s'])} messages/s, {s['mb_per_s']:.1f} MB/s, "
                f"peak RSS {s['peak_rss_bytes'] / 2**20:.0f} MB (at start {s['rss_at_start_bytes'] / 2**20:.0f} MB; "
                f"limit {s['limit_bytes'] / 2**20:.0f} MB: {'holds' if s['holds'] else '**exceeded**'}).", ""]
    b = results.get("breakdown")
    if b:
        out += [f"#### Where `replwire-fast` parse time goes ({b['corpus']} corpus, by taking parts away)", "",
                "| step | ns per message | share of `parse` |", "|---|--:|--:|"]
        for step in b["steps"]:
            out.append(f"| {step['step']} | {step['ns_per_message']:,.0f} | {step['share_of_public']:.0%} |")
        out.append("")
    prof = results.get("profile")
    if prof:
        for op in ("parse", "build"):
            p = prof.get(op)
            if not p:
                continue
            out += [f"#### Where `replwire-fast` {op} time goes (cProfile, one pass over the synthetic corpus; "
                    f"profiling overhead inflates the builtins' share)", "",
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
        for op in ("parse", "build"):
            bars = sorted(((c, r) for (o, c), r in rows.items() if o == op), key=lambda cr: _order(cr[0]))
            if bars:
                label = f"{corpus}{'' if subset == 'all' else ' (' + subset + ')'} — {op}"
                groups.append((label, bars))
    top = max((r["messages_per_s"] for _, bars in groups for _, r in bars), default=1.0)
    left, right, bar, gap, head = 170, 150, 16, 4, 22
    height = 40 + sum(head + len(bars) * (bar + gap) + 8 for _, bars in groups)
    scale = (width - left - right) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
             f'<text x="10" y="20" font-size="14" font-weight="bold">Messages per second '
             f'({escape(results["machine"]["date"][:10])}, {escape(results["machine"]["cpu"])})</text>']
    y = 36
    for label, bars in groups:
        parts.append(f'<text x="10" y="{y + 14}" font-weight="bold">{escape(label)}</text>')
        y += head
        for codec, r in bars:
            length = max(1.0, r["messages_per_s"] * scale)
            ratio = r["ratio_to_yardstick"]
            note = f"{r['messages_per_s']:,.0f}/s" + (f"  ({ratio:.2f}×)" if ratio is not None else "")
            parts.append(f'<text x="{left - 6}" y="{y + bar - 4}" text-anchor="end">{escape(codec)}</text>')
            parts.append(f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar}" '
                         f'fill="{COLORS.get(codec, "#999")}"><title>{escape(codec)}: {escape(note)}</title></rect>')
            parts.append(f'<text x="{left + length + 6:.1f}" y="{y + bar - 4}">{escape(note)}</text>')
            y += bar + gap
        y += 8
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report")
    parser.add_argument("results", nargs="?", type=pathlib.Path,
                        default=pathlib.Path(__file__).parent / "results" / "latest.json")
    parser.add_argument("--svg", type=pathlib.Path, help="also write the bar chart here")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    print(markdown(results))
    if args.svg:
        args.svg.write_text(svg(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
