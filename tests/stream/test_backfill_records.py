"""A backfill's records in a capture file, read by every consumer: a chunk's rows come right after its closing
watermark, as ``"backfill"`` changes at the watermark's position, each replacing its key's row; the
watermarks themselves are not given; a chunk a resume sent again (its watermark repeated) is skipped with it.

The file is built by hand, message by message (replwire's encoder), so every expectation below is worked out
from the stream itself: table ``t`` (``id`` int key, ``v`` text) has rows 1 and 2 inserted before the
backfill, row 1 updated inside the chunk's window, rows 3 and 4 only in the table (written before the
capture);
the chunk, read in the window, holds every row as it is at the closing watermark; after it row 3 is updated
and row 2 deleted, then row 1 updated with its value left unchanged (an unchanged TOASTed value: the row's
value is the chunk's).  So the table ends as ``{1: "a2", 3: "c2", 4: "d"}``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from replwire.codec import (
    LSN,
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    RelationColumn,
    Timestamp,
    TupleColumn,
    Update,
    build,
)
from replwire.codec.decode import committed
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from replwire.codec.io.resume import resume
from replwire.codec.split import open_inputs, plan
from replwire.codec.split.decode import decode_part
from replwire.codec.stream import snapshot_records
from replwire.codec.stream.fold import fold
from replwire.schema.capture import BACKFILL_PREFIX

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
RELATION = Relation(relation_id=16390, namespace="public", name="t", replica_identity="d",
                    columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1),
                             RelationColumn(flags=0, name="v", type_id=25, type_modifier=-1)])
H = 0x300  # the closing watermark's position
TIME = Timestamp(1_000_000)


def _row(*values: str | None) -> list[TupleColumn]:
    return [TupleColumn(kind="n", data=None) if v is None else TupleColumn.text(v) for v in values]


def _transaction(xid: int, at: int, *changes) -> list[tuple[int, int, bytes]]:
    begin = Begin(final_lsn=LSN(at + 0x10), commit_time=TIME, xid=xid)
    commit = Commit(flags=0, commit_lsn=LSN(at + 0x10), end_lsn=LSN(at + 0x18), commit_time=TIME)
    return [(at, xid, build(begin, proto_version=1)),
            *((at + 8, xid, build(c, proto_version=1)) for c in changes),
            (at + 0x10, xid, build(commit, proto_version=1))]


def _watermark(at: int, kind: str) -> tuple[int, int, bytes]:
    message = Message(flags=0, lsn=LSN(at), prefix=BACKFILL_PREFIX, content=json.dumps({"v": 1, "k": kind}).encode())
    return (at, 0, build(message, proto_version=1))


def _chunk(at: int = H) -> list[tuple[int, int, bytes]]:
    rows = b"1\ta2\n2\tb\n3\tc\n4\td\n"
    return [(at, 0, snapshot_records.chunk_record(0, 0, RELATION, [], binary=False, rows=4, last=True, cursor="",
                                                  snapshot="700:702:", read_us=900, at_us=0)),
            (at, 0, snapshot_records.chunk_rows_record(RELATION.relation_id, False, 4, rows)),
            (at, 0, snapshot_records.run_end_record(0, RELATION.relation_id, 0, 1, 4))]


def records() -> list[tuple[int, int, bytes]]:
    return [*_transaction(700, 0x100, RELATION, Insert(relation_id=16390, new=_row("1", "a")),
                          Insert(relation_id=16390, new=_row("2", "b"))),
            _watermark(0x200, "low"),
            *_transaction(701, 0x210, Update(relation_id=16390, new=_row("1", "a2"))),
            _watermark(H, "high"),
            *_chunk(),
            *_transaction(702, 0x400, Update(relation_id=16390, new=_row("3", "c2")),
                          Delete(relation_id=16390, key=_row("2", None))),
            *_transaction(703, 0x500, Update(relation_id=16390, new=[TupleColumn.text("1"),
                                                                     TupleColumn.unchanged_toast()]))]


def write(path, items=None) -> None:
    with CaptureWriter(path, CaptureHeader(proto_version=1, options={"messages": "true"})) as writer:
        for lsn, xid, data in items if items is not None else records():
            writer.append(lsn, xid, data)


def _changes(paths) -> list:
    return [c for item in committed(open_inputs([str(p) for p in paths]))
            for c in (item.changes if hasattr(item, "changes") else [item])]


def _folded(changes) -> list:
    rows = [(c.op, 0, n, [c.new["id"], c.new["v"]] if c.new is not None else [c.key["id"], None],
             [c.key["id"]] if c.key is not None and c.op != "backfill" else None, c.unchanged_toast, None)
            for n, c in enumerate(changes)]
    return sorted(fold(rows, ["id", "v"], ["id"]))


def test_chunk_rows_come_at_their_watermark_and_replace_their_keys_rows(tmp_path):
    path = tmp_path / "b.rwcap"
    write(path)
    changes = _changes([path])
    assert [(c.op, int(c.lsn)) for c in changes] == [
        ("insert", 0x108), ("insert", 0x108), ("update", 0x218),
        ("backfill", H), ("backfill", H), ("backfill", H), ("backfill", H), ("update", 0x408), ("delete", 0x408),
        ("update", 0x508)]
    assert [c.new for c in changes if c.op == "backfill"] == [{"id": 1, "v": "a2"}, {"id": 2, "v": "b"},
                                                               {"id": 3, "v": "c"}, {"id": 4, "v": "d"}]
    assert _folded(changes) == [(1, "a2", None, None), (3, "c2", None, None), (4, "d", None, None)]


def test_a_file_given_twice_gives_each_chunk_once(tmp_path):
    first, again = tmp_path / "a.rwcap", tmp_path / "b.rwcap"
    write(first)
    write(again)
    changes = _changes([first, again])
    assert [c.op for c in changes].count("backfill") == 4


def test_split_decoding_gives_what_the_single_process_gives(tmp_path):
    # parts of any size (down to a record each) give the same changes in the same order, once each
    path, twice = tmp_path / "a.rwcap", tmp_path / "b.rwcap"
    write(path)
    write(twice)
    expected = [(c.op, int(c.lsn), c.new, c.key) for c in _changes([path])]
    for size in (1, 64, 1 << 20):
        inputs = open_inputs([str(path), str(twice)])
        parts = plan(inputs, part_bytes=size).parts
        got = [(d.change.op, int(d.change.lsn), d.change.new, d.change.key) for p in parts for d in decode_part(p)]
        assert got == expected, size


def test_the_watermarks_are_not_printed_and_chunk_rows_are_read_events(tmp_path):
    path = tmp_path / "b.rwcap"
    write(path)
    lines = subprocess.run([REPLWIRE, "decode", str(path)], capture_output=True, text=True, check=True).stdout
    printed = [json.loads(line) for line in lines.splitlines()]
    assert [p["op"] for p in printed] == ["insert", "insert", "update", *["backfill"] * 4, "update", "delete",
                                          "update"]
    assert [p["lsn"] for p in printed if p["op"] == "backfill"] == [str(LSN(H))] * 4
    events = subprocess.run([REPLWIRE, "decode", str(path), "--format", "debezium", "--no-tombstones"],
                            capture_output=True, text=True, check=True).stdout
    read = [e for e in map(json.loads, events.splitlines()) if e["op"] == "r"]
    assert [(e["after"], e["source"]["snapshot"], e["source"]["lsn"]) for e in read] == [
        ({"id": 1, "v": "a2"}, "incremental", H), ({"id": 2, "v": "b"}, "incremental", H),
        ({"id": 3, "v": "c"}, "incremental", H), ({"id": 4, "v": "d"}, "incremental", H)]
    assert all(e["op"] != "m" for e in map(json.loads, events.splitlines()))


@pytest.mark.parametrize("kept", [0, 1, 2])
def test_a_chunk_cut_short_keeps_whole_rows_and_resume_keeps_a_confirmed_chunk(tmp_path, kept):
    # the capture acknowledges a chunk's position once the chunk's records are durable: resume keeps them;
    # a file that ends inside a chunk (its end torn) gives the rows it has, each its key's row at the chunk
    path = tmp_path / "b.rwcap"
    items = records()
    end = items.index(_chunk()[0]) + 1 + kept
    write(path, items[:end])
    assert resume(str(path), LSN(H)).messages == 0
    assert [c.op for c in _changes([path])].count("backfill") == 4 * (kept >= 1)
    assert resume(str(path), LSN(H - 1)).messages == 1 + 1 + kept  # (the watermark and the chunk's records)


def test_backfill_records_are_laid_out_as_declared():
    # hand-written from the capture-format page: kind byte, then the fields big-endian, Strings NUL-ended
    chunk = snapshot_records.chunk_record(2, 5, RELATION, [], binary=True, rows=7, last=False, cursor='["41"]',
                                          snapshot="9:12:10", read_us=1500, at_us=3, refetch='[["2a"]]')
    relation = build(RELATION, proto_version=1)
    assert chunk == (b"\x08" + bytes.fromhex("00000002" "00000005" "00004006" "01" "0000000000000007" "00")
                     + b'["41"]\x00' + b'[["2a"]]\x00' + b"9:12:10\x00"
                     + bytes.fromhex("00000000000005dc" "0000000000000003" "0001")
                     + len(relation).to_bytes(4, "big") + relation)
    assert (b"".join(snapshot_records.chunk_rows_record(16390, False, 2, b"ab"))
            == b"\x09" + bytes.fromhex("00004006" "00" "00000002") + b"ab")
    assert (snapshot_records.run_end_record(2, 16390, 1, 4, 9, "why")
            == b"\x0a" + bytes.fromhex("00000002" "00004006" "01" "00000004" "0000000000000009") + b"why\x00")
    for data in (chunk, snapshot_records.run_end_record(2, 16390, 0, 1, 1)):
        assert snapshot_records.record_completes(data, 0x500) == 0x500
