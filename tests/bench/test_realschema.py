"""``python -m bench realschema --quick`` captures its streams from a real PostgreSQL 18, finds that replwire
decode and the naive streaming-aware script print the same changes on each, and writes a results file the
docs' benchmark page renders."""

from __future__ import annotations

import collections
import json
import pathlib

import pytest

from bench import realschema, report, spark_realschema


def first_bytes(csv: pathlib.Path) -> collections.Counter:
    """How many messages of each tag the COPY-CSV stream holds."""
    tags: collections.Counter = collections.Counter()
    with csv.open() as rows:
        for row in rows:
            tags[chr(int(row.rstrip("\n").split(",")[2][2:4], 16))] += 1
    return tags


def identities(path: pathlib.Path, binary: bool = False) -> collections.Counter:
    """(op, table, id) of each change a JSON-lines output printed; the naive script's ids are the server's
    text (or, in binary mode, the hex of an int8)."""
    found: collections.Counter = collections.Counter()
    with path.open() as lines:
        for line in lines:
            change = json.loads(line)
            row = change.get("new") or change.get("old") or change.get("key")
            key = row["id"]
            found[change["op"], change["table"], int(key, 16) if binary and isinstance(key, str) else int(key)] += 1
    return found


@pytest.mark.server
def test_realschema_quick_run_agrees_with_the_naive_script(tmp_path):
    corpora, work, out = tmp_path / "corpora", tmp_path / "work", tmp_path / "realschema.json"
    assert realschema.main(["--quick", "--servers", "18", "--corpora", str(corpora), "--keep", str(work),
                            "--out", str(out)]) == 0
    data = report.load_generic(out)  # the docs page's form
    keys = [s.key for s in realschema.STREAMS]
    assert len(data["rows"]) == len(keys) == 7
    manifest = json.loads((corpora / "scale-0.01" / "manifest.json").read_text())["servers"]["18"]
    streams = manifest["streams"]
    for stream in realschema.STREAMS:
        entry = streams[stream.key]
        outputs = {name: work / "pg18" / realschema.output_name(stream.key, name)
                   for name in realschema.commands(pathlib.Path("x"), 1)}
        counts = {name: path.read_bytes().count(b"\n") for name, path in outputs.items()}
        assert len(set(counts.values())) == 1 and counts[realschema.MAIN_RUN] > 0, (stream.key, counts)
        if entry["expected_changes"] >= 0:  # what the workload committed
            assert counts[realschema.MAIN_RUN] == entry["expected_changes"], stream.key
        # the same changes, not only as many: op, table and key of each
        naive = identities(outputs[realschema.NAIVE_RUN], binary=stream.key == "d")
        assert naive == identities(outputs[realschema.MAIN_RUN]), stream.key
        assert naive == identities(outputs[realschema.PYTHON_RUN]), stream.key
    # (c): the rolled-back savepoint's rows (3001-4000) and the aborted transaction (10001-) are gone
    inserted = {key for op, _, key in identities(work / "pg18" / realschema.output_name("c", "naive script"))
                if op == "insert"}
    assert inserted == set(range(1, 3001)) | set(range(4001, 4301))
    # the streams carry what they are for
    tags = {key: first_bytes(corpora / "scale-0.01" / entry["file"]) for key, entry in streams.items()}
    assert {"S", "E", "c", "A"} <= set(tags["c"]) and {"S", "E", "c", "A"} <= set(tags["c'"])
    assert {"b", "P", "K", "r", "p", "O"} <= set(tags["e"])
    assert "S" not in tags["a"] and "S" not in tags["b"]
    # (f): old images with the TOASTed value, new ones without it (unchanged TOAST)
    updates = [json.loads(line) for line in (work / "pg18" / realschema.output_name("f", "naive script")).open()
               if '"update"' in line]
    assert updates and all(len(u["old"]["big"]) == 70 * 32 and "big" not in u["new"] for u in updates)
    # (b): the naive script's values are the server's text: row 1 as the server writes it, checked by hand
    row = next(json.loads(line)["new"] for line in (work / "pg18" / realschema.output_name("b", "naive script")).open()
               if '"insert"' in line and '"id": "1",' in line)
    assert row == manifest["probe"]
    assert row["ratio"] == "Infinity" and row["flag"] == "f" and row["tags"] == "{tag1,x1,z}"
    assert row["at"] == "2024-01-01 00:00:01+00" and row["span"] == "1 mon 1 day 01:01:01.5"
    assert row["blob"] == "\\xc4ca4238a0b923820dcc509a6f75849b" and row["amount"] == "79.19"
    names = [t["name"] for t in data["targets"]]
    assert len(names) == 7 + 7 + 4 and all(isinstance(t["holds"], bool) for t in data["targets"])
    assert "| (e) two-phase and Origin, PG 18 |" in report.generic(data)


@pytest.mark.server
def test_spark_realschema_quick_run(tmp_path):
    """``python -m bench spark-realschema`` on small (b) and (c) streams (captured here): its changes jobs
    write as many rows as ``replwire decode`` prints lines (it checks), and its results file renders."""
    pytest.importorskip("pyspark")
    corpora, out = tmp_path / "corpora", tmp_path / "spark_realschema.json"
    assert spark_realschema.main(["--scale", "0.01", "--rounds", "1", "--no-cluster", "--corpora", str(corpora),
                                  "--out", str(out)]) == 0
    data = report.load_generic(out)
    manifest = json.loads((corpora / "scale-0.01" / "manifest.json").read_text())["servers"]["18"]["streams"]
    assert [row[:2] for row in data["rows"]] == [[spark_realschema.LABELS[k], manifest[k]["expected_changes"]]
                                                  for k in ("b", "c")]
    assert all(isinstance(v, (int, float)) and v > 0 for row in data["rows"] for v in row[2:7])
    assert len(data["targets"]) == 4 and "## " not in report.generic(data)[:1]
