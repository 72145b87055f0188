"""``python -m bench decode`` runs its four commands on one stream, finds they print the same lines, and writes
a results file the docs' benchmark page renders."""

from __future__ import annotations

import json

from bench import decode, report


def test_decode_benchmark_runs_and_writes_its_results(tmp_path, capsys):
    out = tmp_path / "decode.json"
    assert decode.main(["--messages", "3000", "--rounds", "1", "--keep", str(tmp_path / "work"), "--out",
                        str(out)]) == 0
    data = report.validate_generic(json.loads(out.read_text()))
    names = [row[0] for row in data["rows"]]
    assert names == ["replwire decode", "replwire decode, capture file", "replwire decode, Python codec",
                     "naive script"]
    outputs = sorted((tmp_path / "work").glob("*.jsonl"))
    assert len(outputs) == 4
    first = (tmp_path / "work" / "replwire_decode.jsonl").read_bytes()
    # every replwire run prints the same bytes; the naive script the same number of lines
    assert all(o.read_bytes() == first for o in outputs if not o.name.startswith("naive"))
    assert len({o.read_bytes().count(b"\n") for o in outputs}) == 1
    assert [t["name"] for t in data["targets"]] == ["replwire decode / naive script, wall clock",
                                                    "replwire decode / naive script, CPU time"]
    assert "replwire decode / naive script:" in capsys.readouterr().out
    assert "| replwire decode, capture file |" in report.generic(data)
