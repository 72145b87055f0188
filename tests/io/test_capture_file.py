"""Capture files: exact layout, round trip, torn and corrupt tails, appending, and the COPY-CSV form."""

from __future__ import annotations

import io
import os
import tracemalloc
import zlib

import pytest

from replwire.codec.io import capture_file
from replwire.codec.io.capture_file import (
    CaptureFileError,
    CaptureHeader,
    CaptureWriter,
    read_capture,
)
from replwire.codec.io.copy_csv import read_copy_csv
from replwire.schema import capture as capture_layout

HEADER = CaptureHeader(proto_version=4, server_version=180006, options={"streaming": "parallel"})
MESSAGES = [(0x169E5A8 + i, 700 + i, bytes([0x49]) + i.to_bytes(4, "big") * (i + 1)) for i in range(10)]


def write(path, messages=MESSAGES, header=HEADER):
    with CaptureWriter(path, header) as writer:
        for lsn, xid, data in messages:
            writer.append(lsn, xid, data)


@pytest.mark.parametrize("version, readable", [(1, True), (2, True), (3, True), (4, True), (5, True), (6, False),
                                               (0, False)])
def test_format_versions_1_to_5_are_read(tmp_path, version, readable):
    path = tmp_path / "v.rwcap"
    write(path, header=CaptureHeader(proto_version=4, format_version=version))
    if readable:
        with read_capture(path) as reader:
            assert reader.header.format_version == version
            assert [r.data for r in reader.records()] == [d for _, _, d in MESSAGES]
    else:
        match = f"format version {version} is not supported .*reads 1, 2, 3, 4, 5\\)"
        with pytest.raises(CaptureFileError, match=match):
            read_capture(path)


def test_layout_is_as_declared(tmp_path):
    path = tmp_path / "c.rwcap"
    with CaptureWriter(path, CaptureHeader(proto_version=2, server_version=150018, options={})) as writer:
        writer.confirm(0x169E5A0, at_start=True)
        writer.append(0x169E5A8, 787, b"E")
        writer.confirm(0x169E5B0)
    raw = path.read_bytes()
    # header: magic, format 5, server 150018, proto 2, no options, CRC-32 of those bytes (zlib's)
    head = b"RWCAP\r\n\x1a" + bytes.fromhex("0005" "00024a02" "02" "0000")
    assert raw[:len(head)] == head
    assert raw[len(head):len(head) + 4] == zlib.crc32(head).to_bytes(4, "big")
    # records: lsn, xid, length-prefixed message, CRC-32; a SlotConfirmed's message is 0x07, the LSN, at_start
    bodies = [bytes.fromhex("000000000169E5A0" "00000000" "0000000a" "07" "000000000169E5A0" "01"),
              bytes.fromhex("000000000169E5A8" "00000313" "00000001") + b"E",
              bytes.fromhex("000000000169E5B0" "00000000" "0000000a" "07" "000000000169E5B0" "00")]
    assert raw[len(head) + 4:] == b"".join(body + zlib.crc32(body).to_bytes(4, "big") for body in bodies)


def test_a_file_of_format_version_2_gets_no_slot_confirmed_records(tmp_path):
    """Continued by this replwire, a version 2 file stays readable by the replwire that wrote it."""
    path = tmp_path / "v2.rwcap"
    write(path, header=CaptureHeader(proto_version=4, format_version=2))
    with CaptureWriter(path, CaptureHeader(proto_version=4)) as writer:
        writer.confirm(0x100, at_start=True)
        writer.append(0x200, 0, b"E")
    with read_capture(path) as reader:
        assert reader.header.format_version == 2
        assert [r.data for r in reader.records()] == [d for _, _, d in MESSAGES] + [b"E"]


def test_round_trip(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path)
    with read_capture(path) as reader:
        assert reader.header == HEADER
        reading = reader.records()
        records = list(reading)
        assert reading.tail is None and reading.end == os.path.getsize(path)
    assert [(r.lsn, r.xid, r.data) for r in records] == MESSAGES


@pytest.mark.parametrize("cut", [1, 4, 12, 16, 20])
def test_torn_tail_is_reported_and_the_rest_kept(tmp_path, cut):
    path = tmp_path / "c.rwcap"
    write(path)
    with read_capture(path) as reader:
        starts = [r.offset for r in reader.records()]
    size = os.path.getsize(path)
    os.truncate(path, size - cut)
    with read_capture(path) as reader:
        reading = reader.records()
        records = list(reading)
        assert [(r.lsn, r.xid, r.data) for r in records] == MESSAGES[:-1]
        assert reading.tail is not None and reading.tail.offset == starts[-1] == reading.end
        assert "cut short" in reading.tail.reason or "checksum" in reading.tail.reason
        assert str(reading.tail).startswith(f"{size - cut - starts[-1]} bytes after offset {starts[-1]}")


def test_a_file_cut_while_it_is_read_reports_a_torn_tail(tmp_path):
    """A capture file cut after its reader opened it (a capture run cutting an interrupted snapshot section
    while another process reads the file): the records still there are read, the first one missing is the
    reading's tail."""
    path = tmp_path / "c.rwcap"
    write(path)
    with read_capture(path) as reader:
        starts = [r.offset for r in reader.records()]
    with read_capture(path) as reader:
        os.truncate(path, starts[-1] + 20)  # the last record's head is there, its message and CRC are not
        reading = reader.records(raw=True)
        records = list(reading)
        assert [(lsn, xid, data) for _, lsn, xid, data in records] == MESSAGES[:-1]
        assert reading.tail is not None and reading.tail.offset == starts[-1] == reading.end
        assert "cut short" in reading.tail.reason


def test_corrupt_record_stops_reading_there(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path)
    with read_capture(path) as reader:
        starts = [r.offset for r in reader.records()]
    raw = bytearray(path.read_bytes())
    raw[starts[5] + 17] ^= 0x01  # inside the sixth record's message
    path.write_bytes(bytes(raw))
    with read_capture(path) as reader:
        reading = reader.records()
        assert len(list(reading)) == 5
        assert reading.tail.offset == starts[5] and "checksum mismatch" in reading.tail.reason


def test_a_lying_length_allocates_nothing_large(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path, MESSAGES[:1])
    raw = bytearray(path.read_bytes())
    with read_capture(path) as reader:
        (record,) = list(reader.records())
    raw[record.offset + 12:record.offset + 16] = (2**31 - 1).to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    tracemalloc.start()
    try:
        with read_capture(path) as reader:
            reading = reader.records()
            assert list(reading) == []
            assert reading.tail.offset == record.offset
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
        reading = reader.records()
        records = [(r.lsn, r.xid, r.data) for r in reading]
        assert reading.tail is None
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
                                            (b"RWCAP\r\n\x1a\x00\x06\x00\x00\x00\x00\x01\x00\x00"
                                             + zlib.crc32(b"RWCAP\r\n\x1a\x00\x06\x00\x00\x00\x00\x01\x00\x00")
                                             .to_bytes(4, "big"), "format version 6 is not supported")])
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
    assert [(str(r.lsn), r.xid, r.data) for r in records] == [(str(lsn), int(xid), bytes(data))
                                                              for lsn, xid, data in rows]
    assert [chr(r.data[0]) for r in records] == ["B", "R", "I", "I", "C"]


# ---------------------------------------------------------------------------------------------------------
# the fast record reader against construct's parse of the same declaration


def construct_records(path):
    """The records of a capture file as construct's parse of ``schema.capture.RECORD`` reads them: a list of
    (offset, lsn, xid, data), then (where reading stopped, the tail's reason or None)."""
    from construct import ConstructError

    from replwire.codec.io.capture_file import _reason
    from replwire.schema import capture as layout

    raw = path.read_bytes()
    stream = io.BytesIO(raw)
    layout.HEADER.parse_stream(stream)
    out = []
    while stream.tell() < len(raw):
        start = stream.tell()
        try:
            record = layout.RECORD.parse_stream(stream)["record"]
        except ConstructError as error:
            return out, (start, _reason(error))
        out.append((start, record.lsn, record.xid, record.data))
    return out, (len(raw), None)


def fast_records(path):
    with read_capture(path) as reader:
        reading = reader.records()
        out = [(r.offset, r.lsn, r.xid, r.data) for r in reading]
        return out, (reading.end, reading.tail.reason if reading.tail else None)


VARIED = [(0, 0, b""), (1, 2**32 - 1, b"B"), (2**64 - 1, 7, bytes(range(256)) * 3), (0x169E5A8, 787, b"E" * 70_000),
          (5, 6, b"x" * 5)] + [(100 + i, i, bytes([65 + i % 26]) * (i % 9)) for i in range(12)]


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_fast_reader_agrees_with_construct_on_damaged_files(tmp_path, monkeypatch, chunk):
    import replwire.codec.io.capture_file as capture_file

    monkeypatch.setattr(capture_file, "CHUNK", chunk)  # records cut across chunks, or read whole
    path = tmp_path / "c.rwcap"
    write(path, VARIED)
    good = path.read_bytes()
    expected, end = construct_records(path)
    assert fast_records(path) == (expected, end) and end == (len(good), None)
    assert [r[1:] for r in expected] == VARIED
    starts = [r[0] for r in expected]
    damaged = []
    for cut in range(starts[-3], len(good)):  # torn inside each of the last three records
        damaged.append(good[:cut])
    for at in range(starts[2], starts[3]):  # every byte of one record flipped (head, data and CRC)
        damaged.append(good[:at] + bytes([good[at] ^ 0x5A]) + good[at + 1:])
    length_at = starts[5] + 12
    for length in (0, 4, 6, 2**31 - 1, 2**32 - 1, len(good)):  # lying lengths, short and long
        damaged.append(good[:length_at] + length.to_bytes(4, "big") + good[length_at + 4:])
    for number, content in enumerate(damaged):
        path.write_bytes(content)
        expected, end = construct_records(path)
        assert fast_records(path) == (expected, end), number
        assert end[1] in (None, "record cut short") or end[1].startswith("checksum mismatch: stored")


def test_records_in_ranges_cover_the_file_once(tmp_path, monkeypatch):
    import replwire.codec.io.capture_file as capture_file

    monkeypatch.setattr(capture_file, "CHUNK", 100)
    path = tmp_path / "c.rwcap"
    write(path, VARIED)
    with read_capture(path) as reader:
        reading = reader.records()
        whole = list(reading)
        assert reading.tail is None and reading.end == reader.size
        # split at every third record boundary, and once in the middle of a record
        bounds = [reader.header_end] + [r.offset for r in whole[3::3]] + [reader.size]
        parts = [list(reader.records(a, b)) for a, b in zip(bounds, bounds[1:])]
        assert [r for part in parts for r in part] == whole
        assert all(part for part in parts)
        middle = whole[3].offset + 5  # a stop inside record 3: it starts before the stop, so it is in range
        reading = reader.records(stop=middle)
        assert list(reading) == whole[:4]
        assert reading.end == whole[4].offset
        assert list(reader.records(whole[4].offset)) == whole[4:]
        reading = reader.records(reader.size)
        assert list(reading) == [] and reading.tail is None
        with pytest.raises(ValueError, match="outside the records"):
            reader.records(reader.header_end - 1)
        with pytest.raises(ValueError, match="outside the records"):
            reader.records(reader.size + 1)
        # two ranges read in turn, one record at a time: each reads its own positions
        first, second = reader.records(stop=whole[2].offset), reader.records(whole[10].offset)
        assert [next(first), next(second), next(first), next(second)] == [whole[0], whole[10], whole[1], whole[11]]


def test_ranges_report_a_torn_tail_each_for_itself(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path, VARIED)
    with read_capture(path) as reader:
        whole = list(reader.records())
    os.truncate(path, os.path.getsize(path) - 2)
    with read_capture(path) as reader:
        torn = reader.records(whole[-3].offset)
        assert list(torn) == whole[-3:-1]
        assert torn.tail.offset == whole[-1].offset and torn.tail.reason == "record cut short"
        assert torn.end == whole[-1].offset
        before = reader.records(whole[-3].offset, whole[-1].offset)
        assert list(before) == whole[-3:-1] and before.tail is None and before.end == whole[-1].offset
        assert torn.tail.offset == whole[-1].offset  # what one reading found is not undone by another
        # read in turn, one record at a time: each reports its own end as it goes
        first, second = reader.records(stop=whole[2].offset), reader.records(whole[-2].offset)
        assert (next(first), next(second)) == (whole[0], whole[-2])
        assert (first.end, second.end) == (whole[1].offset, whole[-1].offset)
        assert (list(first), list(second)) == ([whole[1]], [])
        assert (first.tail, second.tail.offset) == (None, whole[-1].offset)


def test_a_reading_can_own_the_reader_and_skip_needs_raw(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path)
    reader = read_capture(path)
    with pytest.raises(ValueError, match="raw=True"):
        reader.records(skip=frozenset(b"I"))
    reading = reader.records(raw=True, closing=True)
    assert [r[1:] for r in reading] == MESSAGES and reader._file.closed
    reader = read_capture(path)
    reading = reader.records(closing=True)
    next(reading)
    reading.close()  # stopped early
    assert reader._file.closed
    reader = read_capture(path)
    reader.records(closing=True).close()  # stopped before the first record
    assert reader._file.closed


@pytest.mark.parametrize("chunk", [1, 64, 1 << 20])
def test_skim_counts_the_skipped_records_and_yields_the_rest(tmp_path, monkeypatch, chunk):
    import replwire.codec.io.capture_file as capture_file

    monkeypatch.setattr(capture_file, "CHUNK", chunk)
    path = tmp_path / "c.rwcap"
    write(path, VARIED)
    skip = frozenset(b"ABCDEFGHKLx")  # an empty record is never skipped: it has no first byte

    def expected(records):  # (offset, lsn, xid, data, skipped just before) of the kept, then those after
        out, before = [], 0
        for r in records:
            if r.data[:1] and r.data[0] in skip:
                before += 1
            else:
                out.append((r.offset, int(r.lsn), r.xid, r.data, before))
                before = 0
        return out, before

    with read_capture(path) as reader:
        whole = list(reader.records())
        reading = reader.records(raw=True, skip=skip)
        kept = list(reading)
        assert (kept, reading.skipped) == expected(whole) and reading.tail is None
        assert 0 < len(kept) < len(whole) and reading.skipped > 0  # both kinds, and skipped ones at the end
        # a range: records that start in it, as records() gives them
        reading = reader.records(whole[3].offset, whole[12].offset + 1, raw=True, skip=skip)
        kept = list(reading)
        assert (kept, reading.skipped) == expected(whole[3:13]) and reading.end == whole[13].offset
    raw = bytearray(path.read_bytes())
    raw[whole[-4].offset + 16] ^= 0xFF  # a damaged record: reading stops there, the skipped ones before it told
    path.write_bytes(bytes(raw))
    with read_capture(path) as reader:
        reading = reader.records(raw=True, skip=skip)
        kept = list(reading)
        assert (kept, reading.skipped) == expected(whole[:-4])
        assert "checksum mismatch" in reading.tail.reason and reading.tail.offset == whole[-4].offset


class CountingFile:
    def __init__(self, file):
        self.file, self.read_bytes = file, 0

    def seek(self, offset):
        return self.file.seek(offset)

    def read(self, n):
        data = self.file.read(n)
        self.read_bytes += len(data)
        return data

    def close(self):
        self.file.close()


def test_rewind_drops_what_was_appended_after_the_mark(tmp_path):
    path = tmp_path / "c.rwcap"
    with CaptureWriter(path, HEADER) as writer:
        for lsn, xid, data in MESSAGES[:3]:
            writer.append(lsn, xid, data)
        mark = writer.mark()
        for lsn, xid, data in MESSAGES[3:]:
            writer.append(lsn, xid, data)
        writer.sync()
        writer.rewind(mark)
        assert writer.last_lsn == MESSAGES[2][0]
        writer.append(1, 2, b"E")
    with read_capture(path) as reader:
        reading = reader.records()
        assert [(r.lsn, r.xid, r.data) for r in reading] == MESSAGES[:3] + [(1, 2, b"E")] and reading.tail is None


def test_rewind_within_what_is_gathered_and_across_a_written_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(capture_file, "BATCH", 100)  # a few records per batch
    path = tmp_path / "c.rwcap"
    records = [(i, i, b"I" + bytes(i % 37)) for i in range(1, 60)]
    with CaptureWriter(path, HEADER) as writer:
        for lsn, xid, data in records[:20]:
            writer.append(lsn, xid, data)
        mark = writer.mark()
        writer.append(*records[20])  # gathered, not written
        writer.rewind(mark)
        assert writer.mark() == mark
        for lsn, xid, data in records[20:40]:
            writer.append(lsn, xid, data)
        mark = writer.mark()
        for lsn, xid, data in records[40:]:  # several batches written after the mark
            writer.append(lsn, xid, data)
        assert writer._file.tell() > mark[0]  # batches were written after the mark
        writer.rewind(mark)
        writer.append(1, 2, b"E")
    with read_capture(path) as reader:
        reading = reader.records()
        assert [(r.lsn, r.xid, r.data) for r in reading] == records[:40] + [(1, 2, b"E")] and reading.tail is None


@pytest.mark.parametrize("record", [(0, 0, b""), (1, 2, b"B"), (2**64 - 1, 2**32 - 1, bytes(range(256)) * 300)])
def test_records_are_encoded_as_construct_builds_the_declaration(record):
    lsn, xid, data = record
    expected = capture_layout.RECORD.build({"record": {"lsn": lsn, "xid": xid, "data": data}})
    assert capture_file.encode_record(lsn, xid, data) == expected


def test_a_range_reads_little_past_its_stop(tmp_path):
    """Reading a small range of a large file reads about the range, not a whole chunk past it (the first
    pass reads runs of a few KB when asked for many partitions)."""
    path = tmp_path / "c.rwcap"
    write(path, [(i, i, b"I" + bytes(40)) for i in range(50_000)])  # about 3 MB
    with read_capture(path) as reader:
        whole = [r.offset for r in reader.records()]
        reader._file = counting = CountingFile(reader._file)
        assert [r[0] for r in reader.records(whole[100], whole[110], raw=True)] == whole[100:110]
        assert [r[0] for r in reader.records(whole[200], whole[210], raw=True, skip=frozenset(b"B"))] == whole[200:210]
        assert counting.read_bytes < 2 * (whole[110] - whole[100]) + 64


def test_opening_reads_the_header_not_the_file(tmp_path):
    path = tmp_path / "c.rwcap"
    write(path, [(i, i, b"I" + bytes(1000)) for i in range(20_000)])  # about 20 MB
    tracemalloc.start()
    try:
        with read_capture(path) as reader:
            assert reader.header == HEADER
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_a_header_longer_than_the_first_read_is_read_whole(tmp_path):
    header = CaptureHeader(proto_version=1, options={"publication_names": '"' + "p" * 200_000 + '"'})
    path = tmp_path / "c.rwcap"
    write(path, MESSAGES, header)
    with read_capture(path) as reader:
        assert reader.header == header
        assert [(r.lsn, r.xid, r.data) for r in reader.records()] == MESSAGES


@pytest.mark.parametrize("cuts", [(0,), (5,), (1, 70_000), (70_000, 140_000, 140_001)])
def test_a_record_in_pieces_is_the_record_of_its_bytes(cuts):
    data = bytes(range(256)) * 800  # 204,800 bytes: pieces on either side of the size written as it is
    bounds = [0, *cuts, len(data)]
    pieces = tuple(memoryview(data)[a:b] for a, b in zip(bounds, bounds[1:]))
    expected = capture_layout.RECORD.build({"record": {"lsn": 7, "xid": 9, "data": data}})
    assert capture_file.encode_record(7, 9, pieces) == expected
    assert capture_file.record_size(pieces) == len(data)


def _records_in_pieces():
    big = bytes(range(256)) * 400  # 102,400 bytes: written from where it is, not gathered
    return [(1, 2, b"S" * 10), (3, 4, (b"P", memoryview(big))), (5, 6, b"T" * 20),
            (7, 8, (memoryview(big)[:70_000], b"mid", memoryview(big)[70_000:])), (9, 10, b"U")]


def test_large_pieces_reach_the_file_whole_through_short_writes(tmp_path, monkeypatch):
    writes = []

    class Short(io.FileIO):
        def write(self, data) -> int:  # at most 9,999 bytes a call, as a kernel may write
            writes.append(len(data))
            return super().write(memoryview(data)[:9_999])

    monkeypatch.setattr(capture_file, "open", lambda path, mode, buffering=-1: Short(path, mode.replace("b", "")),
                        raising=False)
    path = tmp_path / "c.rwcap"
    records = _records_in_pieces()
    with CaptureWriter(path, HEADER) as writer:
        writer.extend(records)
        writer.sync()
    assert len(writes) > 20 and 102_400 in writes  # a large piece handed to the file as it is, then the rest
    with read_capture(path) as reader:
        reading = reader.records()
        assert ([(r.lsn, r.xid, r.data) for r in reading]
                == [(lsn, xid, b"".join(data) if isinstance(data, tuple) else data) for lsn, xid, data in records])
        assert reading.tail is None


def test_rewind_and_an_interrupted_write_with_large_pieces_gathered(tmp_path, monkeypatch):
    path = tmp_path / "c.rwcap"
    records = _records_in_pieces()
    expected = [(lsn, xid, b"".join(data) if isinstance(data, tuple) else data) for lsn, xid, data in records]
    with CaptureWriter(path, HEADER) as writer:
        writer.extend(records[:2])
        mark = writer.mark()
        writer.extend(records[2:])  # a large piece gathered after the mark, none written yet
        assert writer._file.tell() < mark[0]
        writer.rewind(mark)
        assert writer.mark() == mark
        writer.extend(records[2:])

        real = writer._file

        class Interrupted:  # some bytes reach the file, then Ctrl-C
            def __getattr__(self, name):
                return getattr(real, name)

            def write(self, data) -> int:
                real.write(bytes(data)[:100])
                raise KeyboardInterrupt

        writer._file = Interrupted()
        with pytest.raises(KeyboardInterrupt):
            writer.sync()
        writer._file = real
        writer.sync()  # the batch is written whole, from where the interrupted write began
    with read_capture(path) as reader:
        reading = reader.records()
        assert [(r.lsn, r.xid, r.data) for r in reading] == expected and reading.tail is None
