"""The benchmark runs end to end on a tiny corpus and its report renders; the yardstick is a faithful codec.

Nothing here looks at a timing: only that every codec ran on every message, that the results file has the
documented shape, and that the Markdown and the SVG come out of it.
"""

from __future__ import annotations

import json
import pathlib
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import corpus, report, run, stream, yardstick  # noqa: E402
from seeds import ALL  # noqa: E402


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
    for codec in ("replwire-fast", "yardstick", "replwire-reference", "construct-compiled", "pypgoutput"):
        assert totals["parse", codec]["messages"] == results["corpora"]["synthetic/all"]["messages"]
        assert totals["parse", codec]["messages_per_s"] > 0
    assert totals["parse", "yardstick"]["ratio_to_yardstick"] == 1.0
    assert ("build", "pypgoutput") not in totals  # parse only
    assert {t["name"] for t in results["targets"]} == {t["name"] for t in run.TARGETS}
    assert [s["step"] for s in results["breakdown"]["steps"]][0] == "replwire-fast (public parse)"
    text = report.markdown(results)
    assert text.strip() == capsys.readouterr().out.strip()
    assert "| `replwire-fast` |" in text and "#### Targets" in text and "#### synthetic" in text
    chart = ET.fromstring(report.svg(results))
    assert chart.tag.endswith("svg")
    assert len(chart.findall("{http://www.w3.org/2000/svg}rect")) == len(totals)  # one bar per codec and op
