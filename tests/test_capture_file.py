"""Capture files: exact layout, round trip, torn and corrupt tails, appending, and the COPY-CSV form."""

from __future__ import annotations

import os
import tracemalloc
import zlib

import pytest

from replwire.codec.capture_file import (
    CaptureFileError,
    CaptureHeader,
    CaptureWriter,
    read_capture,
    read_copy_csv,
)

HEADER = CaptureHeader(proto_version=4, server_version=180006, options={"streaming": "parallel"})
MESSAGES = [(0x169E5A8 + i, 700 + i, bytes([0x49]) + i.to_bytes(4, "big") * (i + 1)) for i in range(10)]


def write(path, messages=MESSAGES, header=HEADER):
    with CaptureWriter(path, header) as writer:
        for lsn, xid, data in messages:
            writer.append(lsn, xid, data)


def test_layout_is_as_declared(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path, [(0x169E5A8, 787, b"E")], CaptureHeader(proto_version=2, server_version=150018, options={}))
    raw = path.read_bytes()
    # header: magic, format 1, server 150018, proto 2, no options, CRC-32 of those bytes (zlib's)
    head = b"RWCAP\r\n\x1a" + bytes.fromhex("0001" "00024a02" "02" "0000")
    assert raw[:len(head)] == head
    assert raw[len(head):len(head) + 4] == zlib.crc32(head).to_bytes(4, "big")
    # record: lsn, xid, length-prefixed message, CRC-32
    body = bytes.fromhex("000000000169E5A8" "00000313" "00000001") + b"E"
    assert raw[len(head) + 4:] == body + zlib.crc32(body).to_bytes(4, "big")


def test_round_trip(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path)
    with read_capture(path) as reader:
        assert reader.header == HEADER
        records = list(reader)
        assert reader.tail is None and reader.valid_end == os.path.getsize(path)
    assert [(r.lsn, r.xid, r.data) for r in records] == MESSAGES


@pytest.mark.parametrize("cut", [1, 4, 12, 16, 20])
def test_torn_tail_is_reported_and_the_rest_kept(tmp_path, cut):
    path = tmp_path / "c.rwcap"
    write(path)
    with read_capture(path) as reader:
        starts = [r.offset for r in reader]
    size = os.path.getsize(path)
    os.truncate(path, size - cut)
    with read_capture(path) as reader:
        records = list(reader)
        assert [(r.lsn, r.xid, r.data) for r in records] == MESSAGES[:-1]
        assert reader.tail is not None and reader.tail.offset == starts[-1]
        assert "cut short" in reader.tail.reason or "checksum" in reader.tail.reason
        assert str(reader.tail).startswith(f"{size - cut - starts[-1]} bytes after offset {starts[-1]}")


def test_corrupt_record_stops_reading_there(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path)
    with read_capture(path) as reader:
        starts = [r.offset for r in reader]
    raw = bytearray(path.read_bytes())
    raw[starts[5] + 17] ^= 0x01  # inside the sixth record's message
    path.write_bytes(bytes(raw))
    with read_capture(path) as reader:
        assert len(list(reader)) == 5
        assert reader.tail.offset == starts[5] and "checksum mismatch" in reader.tail.reason


def test_a_lying_length_allocates_nothing_large(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path, MESSAGES[:1])
    raw = bytearray(path.read_bytes())
    with read_capture(path) as reader:
        (record,) = list(reader)
    raw[record.offset + 12:record.offset + 16] = (2**31 - 1).to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    tracemalloc.start()
    try:
        with read_capture(path) as reader:
            assert list(reader) == []
            assert reader.tail.offset == record.offset
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_appending_continues_after_a_torn_tail(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path)
    os.truncate(path, os.path.getsize(path) - 3)
    with CaptureWriter(path, HEADER) as writer:
        assert writer.recovered is not None
        assert writer.last_lsn == MESSAGES[-2][0]
        writer.append(1, 2, b"E")
    with read_capture(path) as reader:
        records = [(r.lsn, r.xid, r.data) for r in reader]
        assert reader.tail is None
    assert records == MESSAGES[:-1] + [(1, 2, b"E")]


def test_appending_with_another_context_is_refused(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path)
    with pytest.raises(CaptureFileError, match="cannot append"):
        CaptureWriter(path, CaptureHeader(proto_version=4, options={"streaming": "on"}))


@pytest.mark.parametrize("content, match", [(b"", "not a readable capture file"),
                                            (b"PGCOPY\n\xff\r\n\x00", "not a replwire file"),
                                            (b"RWCAP\r\n\x1a\x00\x01\x00\x00\x00\x00\x01\x00\x00" + bytes(4),
                                             "checksum mismatch"),
                                            (b"RWCAP\r\n\x1a\x00\x02\x00\x00\x00\x00\x01\x00\x00"
                                             + zlib.crc32(b"RWCAP\r\n\x1a\x00\x02\x00\x00\x00\x00\x01\x00\x00")
                                             .to_bytes(4, "big"), "format version 2 is not supported")])
def test_not_a_capture_file(tmp_path, content, match):
    path = tmp_path / "c.rwcap"
    path.write_bytes(content)
    with pytest.raises(CaptureFileError, match=match):
        read_capture(path)


@pytest.mark.server
def test_copy_csv_form_reads_what_the_server_wrote(pg18, tmp_path):
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE copy_csv (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION copy_csv_pub FOR TABLE copy_csv")
        conn.execute("SELECT pg_create_logical_replication_slot('copy_csv_slot', 'pgoutput')")
        conn.execute("INSERT INTO copy_csv VALUES (1, 'a,\"b\"'), (2, NULL)")
        query = ("SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes('copy_csv_slot', NULL, NULL, "
                 "'proto_version', '1', 'publication_names', 'copy_csv_pub')")
        rows = conn.execute(query).fetchall()
        path = tmp_path / "changes.csv"
        with conn.cursor().copy(f"COPY ({query}) TO STDOUT WITH (FORMAT csv)") as copy, open(path, "wb") as out:
            for chunk in copy:
                out.write(chunk)
        conn.execute("SELECT pg_drop_replication_slot('copy_csv_slot')")
    records = list(read_copy_csv(path))
    assert [(str(r.lsn), r.xid, r.data) for r in records] == [(str(lsn), int(xid), bytes(data)) for lsn, xid, data in rows]
    assert [chr(r.data[0]) for r in records] == ["B", "R", "I", "I", "C"]
