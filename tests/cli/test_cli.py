"""The ``replwire`` command, run as a user runs it."""

import os
import shutil
import subprocess
import sys

#: the console script installed beside this interpreter (the one the tests run under)
REPLWIRE = shutil.which("replwire", path=os.path.dirname(sys.executable)) or "replwire"


def run(*args):
    return subprocess.run([REPLWIRE, *args], capture_output=True, text=True)


def test_parse_prints_the_message():
    result = run("parse", "42 000000000169E5A8 0002894463074DC8 00000313")
    assert result.returncode == 0
    assert result.stdout.strip() == (
        "Begin(final_lsn=LSN('0/169E5A8'), commit_time=Timestamp('2022-08-15T11:06:05.625800+00:00'), xid=787)")


def test_parse_in_stream_and_envelope():
    assert run("parse", "45", "--proto-version", "2", "--in-stream").stdout.strip() == "StreamStop()"
    result = run("parse", "6B000000000169E5D80002894463074DC801", "--envelope", "server")
    assert result.stdout.startswith("PrimaryKeepalive(wal_end=LSN('0/169E5D8')")


def test_parse_bad_bytes_is_a_one_line_error():
    result = run("parse", "4201")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: Begin.final_lsn at offset 1 (tag 'B', proto 1): truncated: needed 8 bytes, 1 available")
    assert "Traceback" not in result.stderr


def test_parse_bad_hex_is_a_usage_error():
    result = run("parse", "4G")
    assert result.returncode == 2
    assert "HEX is not hexadecimal" in result.stderr


def test_capture_via_sql_refuses_streaming_before_connecting(tmp_path):
    out = tmp_path / "x.rwcap"
    result = run("capture", "--dsn", "host=/nonexistent", "--slot", "s", "--publication", "p", "--out", str(out),
                 "--via", "sql", "--streaming", "on")
    assert result.returncode == 1
    assert result.stderr.startswith("error: streaming cannot be used with the SQL functions")
    assert not out.exists()


def test_capture_via_must_be_known(tmp_path):
    result = run("capture", "--dsn", "x", "--slot", "s", "--publication", "p", "--out", str(tmp_path / "x"),
                 "--via", "copy")
    assert result.returncode == 2 and "'copy' is not one of 'replication', 'sql'" in result.stderr
