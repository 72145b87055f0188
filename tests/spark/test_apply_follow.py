"""``replwire spark apply --follow``: Delta tables that follow a capture a running ``replwire capture`` is still
writing, killed (SIGKILL) while applying and started again, end equal to the server, every position committed
once; SIGTERM ends the loop cleanly.  (Killed at every other moment: the batch apply's tests; the loop only
runs it again.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from tests.spark.lakehouse import QUERIES, SEGMENTS, data_files, delta_differences, delta_tables, server_rows  # noqa: E402
from tests.spark.test_spark import fresh_database  # noqa: E402
from tests.support.snapshot import REPLWIRE, wait_for  # noqa: E402


def _until_equal(out, expected, timeout, what):
    """Wait for the tables to equal ``expected``, looking twice a second (reading them back takes a core)."""
    deadline = time.monotonic() + timeout
    while delta_differences(out, expected):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_delta_tables_follow_a_growing_capture_through_a_kill(pg18, tmp_path):
    tag = "follow"
    fresh_database(pg18, tag)
    dsn = f"{pg18.dsn} dbname={tag}"
    capture_file, out = tmp_path / "app.rwc", str(tmp_path / "lake")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    follow = [sys.executable, "-m", "replwire.codec.cli", "spark", "apply", str(capture_file), "--out", out,
              "--format", "delta", "--follow", "--interval", "0.2", "--master", "local[2]"]
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        conn.execute("SET logical_decoding_work_mem = '64kB'")  # the big insert is streamed
        for statement in SEGMENTS[0].format(tag=tag).split(";"):
            conn.execute(statement)
        capture = subprocess.Popen([REPLWIRE, "capture", "--dsn", dsn, "--slot", f"slot_{tag}", "--publication",
                                    f"pub_{tag}", "--out", str(capture_file), "--proto-version", "4", "--binary",
                                    "--streaming", "parallel", "--sync-interval", "0.1"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        running = None
        try:
            wait_for(capture_file.exists, 30, "the capture file")
            running = subprocess.Popen(follow, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            expected = {table: server_rows(conn, table) for table in QUERIES}
            _until_equal(out, expected, 120, "the first segment applied")
            before = data_files(out)
            for statement in SEGMENTS[1].format(tag=tag).split(";"):
                conn.execute(statement)
            # killed once it has begun to write new data (or, if it is done before that is seen, after)
            deadline = time.monotonic() + 60
            while not data_files(out) - before and time.monotonic() < deadline:
                time.sleep(0.005)
            running.send_signal(signal.SIGKILL)
            running.wait(30)
            assert running.returncode == -signal.SIGKILL
            running.stderr.close()
            running = subprocess.Popen(follow, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            for statement in SEGMENTS[2].format(tag=tag).split(";"):
                conn.execute(statement)
            expected = {table: server_rows(conn, table) for table in QUERIES}
            _until_equal(out, expected, 180, "every segment applied")
            running.send_signal(signal.SIGTERM)
            _, err = running.communicate(timeout=60)
            assert running.returncode == 0, err[-3000:]
            assert "stopping after this round" in err
        finally:
            for process in (running, capture):
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(30)
                    except subprocess.TimeoutExpired:
                        process.kill()
            capture.stderr.close()
    for table, found in delta_tables(out).items():
        positions = [entry["replwire.position"] for entry in found.history() if "replwire.position" in entry]
        assert len(positions) == len(set(positions)), (table, positions)


def test_follow_needs_a_lakehouse_format(tmp_path):
    capture_file = tmp_path / "app.rwc"
    capture_file.write_bytes(b"")
    result = subprocess.run([sys.executable, "-m", "replwire.codec.cli", "spark", "apply", str(capture_file),
                             "--out", str(tmp_path / "lake"), "--follow"], capture_output=True, text=True)
    assert result.returncode == 2 and "--format delta or iceberg" in result.stderr


def test_a_round_is_run_only_for_more_than_confirmations(tmp_path):
    """``follow`` looks at what a capture file gained since its last look: the slot confirmations an idle
    capture appends make no round; anything else does, a record still being written only once whole."""
    from replwire.codec import LSN, Begin, Timestamp, build
    from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter, encode_record
    from replwire.codec.split import open_inputs
    from replwire.spark.lakehouse import _news

    path = tmp_path / "app.rwc"
    looked: dict = {}
    with CaptureWriter(path, CaptureHeader(proto_version=1, server_version=180000)) as writer:
        writer.confirm(LSN(0x100), at_start=True)
        writer.sync()
        assert _news(open_inputs([path]), looked)  # the first look
        assert not _news(open_inputs([path]), looked)
        writer.confirm(LSN(0x200))
        writer.sync()
        assert not _news(open_inputs([path]), looked)  # only a confirmation
        begin = build(Begin(final_lsn=LSN(0x300), commit_time=Timestamp(0), xid=7), proto_version=1)
        writer.append(LSN(0x300), 7, begin)
        writer.sync()
    assert _news(open_inputs([path]), looked)
    assert not _news(open_inputs([path]), looked)
    record = encode_record(LSN(0x400), 8, begin)
    with open(path, "ab") as handle:
        handle.write(record[:5])  # a record still being written
    assert not _news(open_inputs([path]), looked)
    with open(path, "ab") as handle:
        handle.write(record[5:])
    assert _news(open_inputs([path]), looked)


def test_the_inputs_grow_by_the_segments_a_rotating_capture_goes_on_in(tmp_path):
    from replwire.codec import LSN
    from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
    from replwire.codec.io.rotation import segment_path
    from replwire.spark.lakehouse import with_next_segments

    pattern = tmp_path / "app.rwcap"
    for number in (1, 2, 3, 5):  # (4 missing: the series goes on no further than 3, as far as it is there)
        header = CaptureHeader(proto_version=1, segment=number, segment_start=LSN(number * 0x100))
        CaptureWriter(segment_path(pattern, number), header).close()
    CaptureWriter(tmp_path / "plain.rwcap", CaptureHeader(proto_version=1)).close()
    assert with_next_segments(segment_path(pattern, 1)) == [segment_path(pattern, 2), segment_path(pattern, 3)]
    assert with_next_segments(segment_path(pattern, 3)) == []
    assert with_next_segments(str(tmp_path / "plain.rwcap")) == []
