"""COPY-CSV inputs have no framing but their line breaks: a line is bounded by what a row can hold, and one
that does not start like a row is refused at once, naming the file and the line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from replwire.codec.io import copy_csv
from replwire.codec.io.capture_file import CaptureFileError
from replwire.codec.io.copy_csv import read_copy_csv

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
BEGIN = "0/1,2,\\x42000000000169e5a80002894463074dc800000313\n"  # one row: a Begin, as the server wrote it


def test_the_bound_is_a_bytea_in_hex():
    # the data column is a bytea, which PostgreSQL holds to 1 GB (MaxAllocSize = 0x3fffffff bytes)
    assert copy_csv.MAX_CSV_LINE == len("FFFFFFFF/FFFFFFFF,4294967295,\\x") + 2 * 0x3FFFFFFF + 2


def test_a_line_without_a_break_that_is_no_row_is_refused_at_once(tmp_path):
    path = tmp_path / "blob.csv"
    path.write_bytes(BEGIN.encode() + b"PK\x03\x04" + bytes(range(11, 256)) * 8192)  # no "\n" after the row
    result = subprocess.run([REPLWIRE, "decode", str(path), "--proto-version", "1"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr == (f"error: {path} at offset {len(BEGIN)}: line 2 is not an (lsn, xid, data) row: its "
                             f"first 65536 bytes have no line break\n")


def test_a_row_longer_than_a_row_can_be_is_refused_after_the_rows_before_it(tmp_path, monkeypatch):
    monkeypatch.setattr(copy_csv, "MAX_CSV_LINE", 1 << 20, raising=False)  # (the real bound is 2 GiB)
    path = tmp_path / "long.csv"
    path.write_text(BEGIN + "0/2,2,\\x" + "ab" * (1 << 20))
    reading = read_copy_csv(path, raw=True)
    assert next(reading)[:3] == (0, 1, 2)
    with pytest.raises(CaptureFileError, match=rf"long\.csv at offset {len(BEGIN)}: line 2 is longer than a row can be "
                                               r"\(1048576 bytes: the data column, a bytea, holds at most 1 GB\)"):
        next(reading)
