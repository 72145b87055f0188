"""The benchmark runs end to end on a tiny corpus and its report renders; the yardstick is a faithful codec.

Nothing here looks at a timing: only that every codec ran on every message, that the results file has the
documented shape, that a malformed one is refused, and that the Markdown, the SVG and the docs page come
out of it.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import pathlib
import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import markdown as python_markdown
import pytest
from mkdocs.exceptions import PluginError

from bench import corpus, report, run, stream, yardstick
from tests.support.seeds import ALL

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed", [s for s in ALL if s.sender in (None, "server")], ids=lambda s: s.name)
def test_yardstick_round_trips_every_stored_message(seed):
    if seed.layer == "envelope":
        assert yardstick.build_envelope(yardstick.parse_envelope(seed.data)) == seed.data
    else:
        message = yardstick.parse(seed.data, seed.proto_version, seed.in_stream)
        assert yardstick.build(message, seed.proto_version, seed.in_stream) == seed.data


def test_synthetic_corpus_is_the_documented_mix():
    mix = corpus.synthetic(3_000)
    tags = mix.summary()["tags"]
    assert set(tags) == {"B", "C", "R", "I", "U", "D"}
    assert tags["I"] > tags["U"] > tags["D"] and tags["B"] == tags["C"]
    assert all(item.proto_version == 1 and not item.in_stream for item in mix.items)
    assert all(corpus.pypgoutput_subset(item) for item in mix.items)


def test_stream_file_decodes_one_message_at_a_time(tmp_path):
    items = corpus.synthetic(500).items
    path = tmp_path / "stream.rwb"
    written = stream.write_stream(path, items, 200_000)
    assert written == path.stat().st_size >= 200_000
    result = stream.decode(path)
    assert result["messages"] % len(items) == 0 and result["messages"] >= len(items)
    assert result["peak_rss_bytes"] > 0


def test_benchmark_runs_and_reports(tmp_path, capsys):
    out = tmp_path / "results.json"
    assert run.main(["--messages", "300", "--rounds", "1", "--no-real", "--stream-gib", "0", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["format"] == "replwire-bench/1"
    assert {"date", "python", "cpu", "cpus"} <= set(results["machine"])
    assert not results["left_out"] and not results["declined"]
    totals = {(r["op"], r["codec"]): r for r in results["results"] if r["family"] == "all"}
    for codec in ("replwire-fast", "replwire-python", "yardstick", "replwire-reference", "construct-compiled",
                  "pypgoutput"):
        assert totals["parse", codec]["messages"] == results["corpora"]["synthetic/all"]["messages"]
        assert totals["parse", codec]["messages_per_s"] > 0
    assert totals["parse", "yardstick"]["ratio_to_yardstick"] == 1.0
    assert ("build", "pypgoutput") not in totals  # parse only
    assert {t["name"] for t in results["targets"]} == {t["name"] for t in run.TARGETS}
    assert [s["step"] for s in results["breakdown"]["steps"]][0] == "replwire-fast (public parse)"
    text = report.markdown(results)
    assert text.strip() == capsys.readouterr().out.strip()
    assert "| `replwire-fast` |" in text and "\n## Targets\n" in text and "\n### synthetic: " in text
    chart = ET.fromstring(report.svg(results))
    assert chart.tag.endswith("svg")
    assert len(chart.findall("{http://www.w3.org/2000/svg}rect")) == len(totals)  # one bar per codec and op


# ---------------------------------------------------------------------------------------------------------
# the results files and the docs page


def html_tables(text: str) -> list[list[list[str]]]:
    """The tables of a Markdown text as rows of cell texts (header row first), as Python-Markdown renders them."""
    html = python_markdown.markdown(text, extensions=["tables", "md_in_html"])
    root = ET.fromstring(f"<root>{html}</root>")
    return [[["".join(cell.itertext()) for cell in row] for row in table.iter("tr")] for table in root.iter("table")]


def load_hook():
    spec = importlib.util.spec_from_file_location("benchmark_hook", ROOT / "docs" / "hooks" / "benchmark.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


SPARK = {
    "machine": {"cpu": "Test CPU 9000", "cores": 2, "spark": "4.0.1"},
    "date": "2026-01-02T03:04:05+00:00",
    "columns": ["stage", "rows", "seconds", "ok"],
    "rows": [["decode", 1200000, 12.5, True], ["apply | merge", 3, None, False]],
    "notes": ["local[2] session", "a <b>bold</b> claim"],
}


def test_generic_results_render_as_one_table_with_notes():
    text = report.generic(report.validate_generic(copy.deepcopy(SPARK)))
    [table] = html_tables(text)
    assert table == [["stage", "rows", "seconds", "ok"],
                     ["decode", "1,200,000", "12.5", "yes"],
                     ["apply | merge", "3", "—", "no"]]
    html = python_markdown.markdown(text, extensions=["tables"])
    assert "Test CPU 9000" in html and "2026-01-02" in html
    assert "<li>local[2] session</li>" in html
    assert "<b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html  # text from the file stays text


def test_generic_results_name_the_missed_targets_and_read_as_words():
    data = copy.deepcopy(SPARK)
    data["machine"].update(memory_bytes=25_276_510_208, load_average_at_start=[0.83, 1.13, 1.24])
    data["targets"] = [{"name": "two cores twice as fast", "value": 1.62, "at_least": 1.6, "holds": True},
                       {"name": "one core as fast as the Decoder", "value": 0.322, "at_least": 0.5, "holds": False}]
    text = report.generic(report.validate_generic(data))
    assert "25.3 GB RAM" in text and "25276510208" not in text and "memory_bytes" not in text
    assert "load average at start: 0.83" in text and "0.83, 1.13" not in text
    [missed] = [line for line in text.splitlines() if "Missed" in line]
    assert "one core as fast as the Decoder, measured 0.32× for at least 0.50×" in missed
    assert "two cores twice as fast" not in missed
    assert "- one core as fast as the Decoder: 0.32×, for at least 0.50×: **missed**" in text
    data["targets"][1].update(value=0.5, holds=True)
    assert "All 2 targets were met." in report.generic(report.validate_generic(data))


@pytest.mark.parametrize("change", [
    lambda d: d.update(targets={"name": "x"}),
    lambda d: d.update(targets=[{"name": "x", "value": 1.0, "holds": True}]),
    lambda d: d.update(targets=[{"name": "x", "value": True, "at_least": 1.0, "holds": True}]),
    lambda d: d.update(targets=[{"name": "x", "value": 1.0, "at_least": 1.0, "holds": "yes"}]),
], ids=["not-a-list", "no-at-least", "bool-value", "holds-text"])
def test_malformed_generic_targets_are_refused(change):
    data = copy.deepcopy(SPARK)
    change(data)
    with pytest.raises(report.ResultsError, match="targets"):
        report.validate_generic(data)


@pytest.mark.parametrize("change", [
    lambda d: d.pop("rows"),
    lambda d: d.pop("notes"),
    lambda d: d.update(columns="stage,rows"),
    lambda d: d.update(columns=[]),
    lambda d: d["rows"][1].pop(),
    lambda d: d["rows"].append({"stage": "x"}),
    lambda d: d["rows"][0].__setitem__(1, [1, 2]),
    lambda d: d["rows"][0].__setitem__(2, float("nan")),
    lambda d: d.update(date="yesterday"),
    lambda d: d.update(machine=None),
    lambda d: d["notes"].append(7),
], ids=["no-rows", "no-notes", "columns-text", "no-columns", "short-row", "row-object", "list-cell", "nan",
        "bad-date", "no-machine", "note-number"])
def test_malformed_generic_results_are_refused(change):
    data = copy.deepcopy(SPARK)
    change(data)
    with pytest.raises(report.ResultsError):
        report.validate_generic(data)


def test_committed_results_file_has_the_documented_shape():
    results = report.load(run.RESULTS)
    assert {"date", "cpu", "cpus", "python", "os"} <= set(results["machine"])
    assert results["stream"] is not None and results["targets"]


@pytest.mark.parametrize("change, where", [
    (lambda r: r.pop("machine"), "missing 'machine'"),
    (lambda r: r["machine"].pop("os"), "machine: missing 'os'"),
    (lambda r: r["machine"].update(date="last week"), "machine.date"),
    (lambda r: r.update(format="replwire-bench/0"), "format"),
    (lambda r: r.update(results=[]), "no rows"),
    (lambda r: r["results"][3].update(messages_per_s=None), "results[3].messages_per_s"),
    (lambda r: r["results"][2].update(op="encode"), "results[2].op"),
    (lambda r: r["results"][1].pop("ratio_to_yardstick"), "results[1]: missing 'ratio_to_yardstick'"),
    (lambda r: r["targets"][0].update(holds="yes"), "targets[0].holds"),
    (lambda r: r["stream"].pop("peak_rss_bytes"), "stream: missing 'peak_rss_bytes'"),
])
def test_malformed_results_are_refused_with_the_field(change, where):
    results = json.loads(run.RESULTS.read_text())
    report.validate(copy.deepcopy(results))
    change(results)
    with pytest.raises(report.ResultsError, match=re.escape(where)):
        report.validate(results)


def test_missing_or_broken_results_file_is_an_error(tmp_path):
    with pytest.raises(report.ResultsError, match="python -m bench"):
        report.load(tmp_path / "latest.json")
    (tmp_path / "latest.json").write_text('{"format": "replwire-bench/1", ')
    with pytest.raises(report.ResultsError, match="not JSON"):
        report.load(tmp_path / "latest.json")


def page():
    """The docs page's source and a stand-in for mkdocs' page object."""
    source = (ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8")
    return source, SimpleNamespace(file=SimpleNamespace(src_uri="benchmark.md"))


def test_docs_page_renders_the_committed_results():
    hook = load_hook()
    source, benchmark_page = page()
    results = report.load(hook.RESULTS)
    text = hook.on_page_markdown(source, benchmark_page, {}, None)
    assert "<!-- replwire:" not in text
    tables = html_tables(text)
    by_codec = {(r["corpus"], r["subset"], r["op"], r["codec"]): r for r in results["results"] if r["family"] == "all"}
    for key, row in by_codec.items():
        codec = key[3]
        assert any([f"{codec}", f"{row['messages_per_s']:,.0f}"] == cells[:2] for t in tables for cells in t), key
    assert any(t[0][0] == "target" and len(t) == 1 + len(results["targets"]) for t in tables)
    html = python_markdown.markdown(text, extensions=["tables", "md_in_html"])
    root = ET.fromstring(f"<root>{html}</root>")
    [chart] = root.iter("{http://www.w3.org/2000/svg}svg")
    assert len(chart.findall("{http://www.w3.org/2000/svg}rect")) == len(by_codec)
    assert results["machine"]["cpu"] in html and results["machine"]["os"] in html
    assert results["machine"]["python"] in html and results["machine"]["date"][:10] in html
    assert "python -m bench" in html
    assert not re.search(r"\bissue \d", html, flags=re.I), "the page speaks of the project's issue numbers"
    missed = [t for t in results["targets"] if not t["holds"]]
    assert (f"All {len(results['targets'])} targets were met." in html) == (not missed)


def test_docs_page_says_which_targets_were_missed(tmp_path, monkeypatch):
    hook = load_hook()
    source, benchmark_page = page()
    results = json.loads(hook.RESULTS.read_text())
    results["targets"][1].update(value=0.75, holds=False)  # below its 0.8× floor
    monkeypatch.setattr(hook, "RESULTS", tmp_path / "latest.json")
    hook.RESULTS.write_text(json.dumps(results))
    text = hook.on_page_markdown(source, benchmark_page, {}, None)
    [sentence] = [line for line in text.splitlines() if line.startswith("The speed targets")]
    t = results["targets"][1]
    assert f"Missed 1 of {len(results['targets'])} targets: {t['name']} on the real, pypgoutput-subset corpus, " \
           "measured 0.75×." in sentence
    assert any(row[-1] == "no: missed" for table in html_tables(text) for row in table)


def test_docs_page_spark_section_only_when_its_file_exists(tmp_path, monkeypatch):
    hook = load_hook()
    source, benchmark_page = page()
    monkeypatch.setattr(hook, "SPARK_RESULTS", tmp_path / "spark.json")
    assert "## Spark pipeline" not in hook.on_page_markdown(source, benchmark_page, {}, None)
    (tmp_path / "spark.json").write_text(json.dumps(SPARK))
    text = hook.on_page_markdown(source, benchmark_page, {}, None)
    assert "## Spark pipeline" in text
    assert ["stage", "rows", "seconds", "ok"] in [t[0] for t in html_tables(text)]
    (tmp_path / "spark.json").write_text(json.dumps({**SPARK, "rows": [["too", "short"]]}))
    with pytest.raises(PluginError, match="rows"):
        hook.on_page_markdown(source, benchmark_page, {}, None)


def test_docs_build_fails_without_results(tmp_path, monkeypatch):
    hook = load_hook()
    source, benchmark_page = page()
    monkeypatch.setattr(hook, "RESULTS", tmp_path / "latest.json")
    with pytest.raises(PluginError, match="python -m bench"):
        hook.on_page_markdown(source, benchmark_page, {}, None)
    (tmp_path / "latest.json").write_text("[]")
    with pytest.raises(PluginError, match="JSON object"):
        hook.on_page_markdown(source, benchmark_page, {}, None)
    with pytest.raises(PluginError, match="markers"):
        hook.on_page_markdown("# Benchmark\n", benchmark_page, {}, None)
    other = SimpleNamespace(file=SimpleNamespace(src_uri="index.md"))
    assert hook.on_page_markdown("# Home\n", other, {}, None) == "# Home\n"


@pytest.mark.server
def test_snapshot_benchmark_runs_and_reports(tmp_path, capsys):
    from bench import snapshot

    out = tmp_path / "snapshot.json"
    assert snapshot.main(["--mb", "4", "--rounds", "1", "--dead", "500", "--out", str(out)]) == 0
    results = report.load_generic(out)  # the docs page's form
    raw = results["raw"]
    for form in ("text", "binary"):
        copied = (raw[form]["snapshot"]["rows"], raw[form]["copy"]["rows"], raw[form]["backfill"]["rows"],
                  raw[form]["by_key"]["rows"])  # (the chunks by key alone: every row once, as the COPY's)
        assert copied == (raw["rows"],) * 4
        assert raw[form]["ratio"] > 0 and raw[form]["peak_rss_mib"] > 0 and raw[form]["backfill"]["chunks"] >= 1
        assert raw[form]["by_key"]["chunks"] == raw[form]["backfill"]["chunks"]
        assert raw[form]["by_key"]["mib"] == pytest.approx(raw[form]["copy"]["mib"], abs=0.01)
    assert len(results["rows"]) == 11 and len(results["targets"]) == 8
    # the snapshot's transaction holds the xmin horizon: nothing deleted meanwhile is removable, all after
    assert raw["xmin"] == {"ran_during": 1, "dead_unremovable_during": 500, "dead_unremovable_after": 0,
                           "deleted": 500}
    assert "x of COPY" in capsys.readouterr().out
    assert "| replwire capture --snapshot, text |" in report.generic(results)
    assert "| replwire capture --backfill, binary |" in report.generic(results)
    assert "| chunks by key alone, text |" in report.generic(results)
