"""``python -m bench endtoend`` runs on a small load and reports what both clients drained."""

from __future__ import annotations

import pytest

from bench import endtoend, report


@pytest.mark.server
def test_endtoend_benchmark_runs_and_reports(tmp_path):
    out = tmp_path / "endtoend.json"
    assert endtoend.main(["--seconds", "2", "--loads", "300/4,0/4", "--out", str(out)]) == 0
    results = report.load_generic(out)  # the docs page's form
    loads = results["raw"]["loads"]
    assert [(load["rate"], load["inserts"]) for load in loads] == [(300, 4), (0, 4)]
    for load in loads:
        # every change pgbench committed (4 inserts and 2 updates a transaction, by pgbench's own count) was
        # captured and decoded, once
        assert load["transactions"] > 0 and load["changes"] == load["transactions"] * 6
        for client in ("capture", "pg_recvlogical"):
            assert load[client]["seconds"] >= load["load_seconds"] > 0
            assert load[client]["peak_rss_mib"] > 0 and load[client]["lag"]["samples"] > 0
        assert load["decode"]["seconds"] > 0 and load["decode"]["peak_rss_mib"] > 0
    assert len(results["rows"]) == 8 and len(results["targets"]) == 2
    assert "| replwire capture, then decode (4+2 rows a transaction, as fast as it goes) |" in report.generic(results)
