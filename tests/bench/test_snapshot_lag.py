"""The snapshot benchmark's lag measurement: how commits are matched to the slot's samples, how the lags are
summed up and rendered, and one small run against a server of its own.

Nothing here looks at a timing beyond its sign: only that every commit of the writer is found in the capture
file and confirmed, and that the rows come out in the generic results file the docs page renders.
"""

from __future__ import annotations

import tempfile

import pytest

from bench import report, snapshot


def test_a_commit_is_durable_at_the_first_sample_that_confirmed_its_end():
    samples = [(10.0, 500, 100), (10.5, 600, 250), (11.0, 700, 240), (11.5, 800, 400)]
    commits = [(1, 9.0), (2, 10.2), (3, 10.9), (4, 11.1), (5, 11.2)]
    ends = {1: 100, 2: 250, 3: 300, 4: 400, 5: 401}  # 5: never confirmed; 6 (not committed) is ignored
    lags, missing = snapshot.commit_lags(commits, ends, samples)
    # (the sample at 11.0 went back to 240: the confirmed position is taken as its running maximum)
    assert lags == pytest.approx([1.0, 0.3, 0.6, 0.4])
    assert missing == 1


def test_a_commit_missing_from_the_file_is_counted_apart():
    lags, missing = snapshot.commit_lags([(7, 1.0)], {}, [(2.0, 10, 10)])
    assert (lags, missing) == ([], 1)
    lags, missing = snapshot.commit_lags([(7, 1.0)], {7: 5}, [])
    assert (lags, missing) == ([], 1)


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert snapshot.percentiles(values) == {"p50": 50.0, "p99": 99.0, "max": 100.0, "n": 100}
    assert snapshot.percentiles([3.0]) == {"p50": 3.0, "p99": 3.0, "max": 3.0, "n": 1}
    assert snapshot.percentiles([])["n"] == 0


def _part(p50: float, unconfirmed: int = 0) -> dict:
    return {"lag_s": {"p50": p50, "p99": 0.5, "max": 0.6, "n": 1000},
            "behind_bytes": {"p50": 4096.0, "p99": 65536.0, "max": 70000.0, "n": 250}, "commits": 1000,
            "unconfirmed": unconfirmed, "samples": 250, "load_seconds": 5.0, "commits_per_s": 200.0,
            "peak_rss_mib": 60.0}


def test_the_lag_rows_render_in_the_generic_results():
    lag = {"rate": 200.0, "rows_per_transaction": 5, "sample_interval": 0.02, "rounds": 1,
           "baseline": _part(0.25),
           "backfill": {**_part(0.3, unconfirmed=2), "rows": 1000, "chunks": 3, "seconds": 2.0, "file_mib": 1.0,
                        "wall": 4.0}}
    rows = snapshot._lag_rows(lag, {"seconds": 1.0, "rows": 1000, "mib": 1.0})
    assert [row[0] for row in rows] == ["replwire capture --backfill under load, text",
                                        "commit to durable, no backfill (baseline)",
                                        "commit to durable, during the backfill"]
    assert rows[0][1:5] == [2.0, 500, 0.5, 0.5]
    assert "lag p50 250 ms, p99 500 ms, max 600 ms over 1,000 commits" in rows[1][-1]
    assert "2 never confirmed" in rows[2][-1] and "never" not in rows[1][-1]
    assert "WAL behind p50 4 KiB, p99 64 KiB" in rows[1][-1]
    data = {"machine": "test", "date": "2026-01-01T00:00:00+00:00", "columns": ["run", "seconds", "rows/s", "MiB/s",
            "× of COPY", "peak RSS (MiB)", "note"], "rows": rows, "notes": [snapshot._LAG_NOTE]}
    assert "| commit to durable, during the backfill | — |" in report.generic(report.validate_generic(data))


@pytest.mark.server
def test_lag_is_measured_during_a_backfill_and_without_one():
    from replwire.codec.testing.localserver import PgServer

    server = PgServer.start(18)
    try:
        table_rows, _ = snapshot.make_table(server.dsn, 24)  # (a backfill long enough to sample)
        snapshot.make_load(server.dsn)
        with tempfile.TemporaryDirectory() as directory:
            lag = snapshot.lag(server.dsn, directory, rounds=1, rate=100.0, rows=2, interval=0.02)
    finally:
        server.stop()
    during, baseline = lag["backfill"], lag["baseline"]
    assert during["rows"] == table_rows and during["chunks"] >= 1
    for part in (during, baseline):
        # every commit of the writer was found in the capture file and confirmed by the slot
        assert part["commits"] > 0 and part["unconfirmed"] == 0 and part["lag_s"]["n"] == part["commits"]
        assert 0 < part["lag_s"]["p50"] <= part["lag_s"]["p99"] <= part["lag_s"]["max"]
        assert part["behind_bytes"]["n"] > 0
    # the baseline ran the same load for as long as the backfill's did
    assert baseline["load_seconds"] == pytest.approx(during["load_seconds"], abs=0.1)
