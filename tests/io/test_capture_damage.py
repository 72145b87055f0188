"""A capture file damaged inside -- a changed byte, a changed length, with intact records after it -- told
apart from one torn at its end (an interrupted write), and never cut where that would lose what the server
will not send again: the reader says where intact records start again, appending refuses, resuming refuses
when the records after the damage were confirmed, ``replwire decode`` and ``replwire spark changes`` print
what comes before the damage and exit 1, ``replwire serve`` refuses to serve the file as if it ended there."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from replwire.codec import LSN, Begin, Commit, Insert, Relation, RelationColumn, Timestamp, TupleColumn, build
from replwire.codec.io import capture_file
from replwire.codec.io.capture_file import CaptureFileError, CaptureHeader, CaptureWriter, read_capture
from replwire.codec.io.connection import CaptureError
from replwire.codec.io.resume import resume_point

REPLWIRE = [sys.executable, "-m", "replwire.codec.cli"]
STAMP = Timestamp(800_000_000_000_000)
#: The end LSN of transaction n (from 0) of :func:`write_transactions`.
END = [0x1000 * (n + 1) + 0x10 for n in range(6)]


def write_transactions(path, count=6):
    """A protocol-1 capture of ``count`` transactions, each a Begin, an Insert of row n and a Commit ending
    at ``END[n]`` (the first with the Relation); the offsets of every record."""
    relation = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])
    with CaptureWriter(path, CaptureHeader(proto_version=1, server_version=180000)) as writer:
        for n in range(count):
            commit = END[n] - 0x10
            messages = [Begin(final_lsn=LSN(commit), commit_time=STAMP, xid=700 + n), *([relation] if n == 0 else []),
                        Insert(relation_id=16384, new=[TupleColumn.text(str(n))]),
                        Commit(flags=0, commit_lsn=LSN(commit), end_lsn=LSN(END[n]), commit_time=STAMP)]
            for i, message in enumerate(messages):
                writer.append(commit - 0x100 + i if i < len(messages) - 1 else END[n], 0,
                              build(message, proto_version=1))
    with read_capture(path) as reader:
        return [offset for offset, *_ in reader.records(raw=True)]


def damage(path, at, mask=0x01):
    raw = bytearray(path.read_bytes())
    raw[at] ^= mask
    path.write_bytes(bytes(raw))


def damaged_and_torn(tmp_path):
    """Two copies of :func:`write_transactions`' file: one with transaction 2's Insert damaged, one torn
    inside its last record; and the offsets of the records."""
    path, torn = tmp_path / "c.rwcap", tmp_path / "torn.rwcap"
    starts = write_transactions(path)
    torn.write_bytes(path.read_bytes()[:-3])
    damage(path, starts[8] + 20)
    return path, torn, starts


def tail_of(path):
    with read_capture(path) as reader:
        reading = reader.records(raw=True)
        records = list(reading)
    return len(records), reading.tail


# -- reading --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where, mask", [(20, 0x01), (12, 0x40), (15, 0x03), (0, 0x80)],
                         ids=["message byte", "length, longer than the file", "length, a little off", "lsn"])
def test_damage_inside_says_where_intact_records_start_again(tmp_path, where, mask):
    path = tmp_path / "c.rwcap"
    starts = write_transactions(path)
    damage(path, starts[5] + where, mask)  # the second transaction's Insert
    read, tail = tail_of(path)
    assert read == 5 and tail.offset == starts[5]
    assert tail.intact_from == starts[6]
    assert str(tail).startswith(f"the record at offset {starts[5]} is damaged (")
    assert f"intact records follow it from offset {starts[6]}: the file is damaged inside" in str(tail)


@pytest.mark.parametrize("end", ["cut", "zeros", "garbage"])
def test_a_torn_end_has_no_intact_records_after_it(tmp_path, end):
    """Cut inside the last record, or followed by zeros or bytes that are no record (as an interrupted write
    can leave the end of a file): a torn tail, as before."""
    path = tmp_path / "c.rwcap"
    starts = write_transactions(path)
    size = path.stat().st_size
    if end == "cut":
        os.truncate(path, size - 3)
    else:
        with open(path, "ab") as handle:
            handle.write(bytes(4096) if end == "zeros" else bytes(range(256)) * 16)
    read, tail = tail_of(path)
    assert tail.intact_from is None
    assert tail.offset == (starts[-1] if end == "cut" else size)
    assert "a torn or corrupt tail; everything before it is intact" in str(tail)


def test_the_search_for_intact_records_is_bounded(tmp_path, monkeypatch):
    """Past the window, intact records are not looked for (nor beyond what the budget lets it checksum)."""
    path = tmp_path / "c.rwcap"
    starts = write_transactions(path)
    damage(path, starts[5] + 12, 0x40)  # the length: found by the search only
    monkeypatch.setattr(capture_file, "RESYNC_WINDOW", starts[6] - starts[5] - 2)
    assert tail_of(path)[1].intact_from is None
    monkeypatch.setattr(capture_file, "RESYNC_WINDOW", 4 << 20)
    monkeypatch.setattr(capture_file, "RESYNC_BUDGET", 16)
    assert tail_of(path)[1].intact_from is None
    monkeypatch.setattr(capture_file, "RESYNC_BUDGET", 256 << 20)
    assert tail_of(path)[1].intact_from == starts[6]


# -- appending and resuming -----------------------------------------------------------------------------------


def test_appending_to_a_file_damaged_inside_is_refused_and_leaves_it_whole(tmp_path):
    path = tmp_path / "c.rwcap"
    starts = write_transactions(path)
    damage(path, starts[5] + 20)
    before = path.read_bytes()
    with pytest.raises(CaptureFileError, match=rf"cannot append: the record at offset {starts[5]} is damaged .* "
                                               "cutting the file there would drop them") as raised:
        CaptureWriter(path, CaptureHeader(proto_version=1, server_version=180000))
    assert path.read_bytes() == before
    # told apart by its kind, not its words (capture exits 5 for it), also after crossing a process boundary
    assert raised.value.damaged_inside and pickle.loads(pickle.dumps(raised.value)).damaged_inside
    assert not CaptureFileError(str(path), "not a readable capture file header").damaged_inside


def test_resuming_a_file_that_holds_a_message_replwire_cannot_decode_is_a_clear_error(tmp_path):
    """A file an older replwire wrote a refused message into (it treated the refusal as a lost connection): the
    resume says where, as a CaptureError (exit 1), instead of a DecodeError's traceback."""
    path = tmp_path / "c.rwcap"
    write_transactions(path, 2)
    with CaptureWriter(path, CaptureHeader(proto_version=1, server_version=180000)) as writer:
        at = writer.mark()[0]
        writer.append(END[1] + 0x100, 0, b"Zbogus")
    with pytest.raises(CaptureError, match=rf"^{path}: the record at offset {at} holds a message replwire cannot "
                                           r"decode \(.*unknown message tag 'Z'\)") as raised:
        resume_point(str(path), LSN(END[0]))
    assert raised.value.exit_status == 1


def test_resuming_tells_what_it_cuts_off(tmp_path):
    """What a reconnection takes back from the capture's counts: the records after the cut, their bytes, and
    the transactions they complete."""
    from replwire.codec.io.resume import resume

    path = tmp_path / "c.rwcap"
    starts = write_transactions(path)
    with read_capture(path) as reader:
        sizes = [len(data) for *_, data in reader.records(raw=True)]
    found = resume(str(path), LSN(END[2]))  # transactions 3 to 5 come again: 3 records each
    assert (found.cut, found.kept) == (starts[10], 10)
    assert (found.messages, found.bytes, found.transactions) == (9, sum(sizes[10:]), 3)


def test_resuming_refuses_to_cut_off_records_the_slot_confirmed(tmp_path):
    path = tmp_path / "c.rwcap"
    starts = write_transactions(path)
    damage(path, starts[5] + 20)  # transaction 1's Insert
    # the slot confirmed transaction 3: the damage is in what the server will not send again
    with pytest.raises(CaptureError, match=rf"confirmed \(up to {LSN(END[3])}, confirmed {LSN(END[3])}\)"):
        resume_point(str(path), LSN(END[3]))
    with pytest.raises(CaptureError, match="the server will not send again"):
        resume_point(str(path), LSN(END[1]))  # its own Commit, after the damage, was confirmed
    # the slot confirmed transaction 0 only: everything after it comes again, the cut loses nothing
    assert resume_point(str(path), LSN(END[0])) == (starts[4], 4)


# -- the commands ---------------------------------------------------------------------------------------------


def test_decode_prints_what_comes_before_the_damage_and_exits_1(tmp_path):
    path, torn, starts = damaged_and_torn(tmp_path)
    result = subprocess.run([*REPLWIRE, "decode", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert [json.loads(line)["new"]["id"] for line in result.stdout.splitlines()] == [0, 1]
    assert f"error: {path}: the record at offset {starts[8]} is damaged" in result.stderr
    assert "2 transactions, 2 changes from 1 file" in result.stderr
    result = subprocess.run([*REPLWIRE, "decode", str(torn)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and f"warning: {torn}: " in result.stderr
    assert [json.loads(line)["new"]["id"] for line in result.stdout.splitlines()] == [0, 1, 2, 3, 4]


def test_spark_changes_writes_what_comes_before_the_damage_and_exits_1(tmp_path):
    pytest.importorskip("pyspark")
    import pyarrow.parquet as pq

    path = tmp_path / "c.rwcap"
    starts = write_transactions(path)
    damage(path, starts[8] + 20)
    out = tmp_path / "changes"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    result = subprocess.run([*REPLWIRE, "spark", "changes", str(path), "--out", str(out), "--master", "local[1]"],
                            capture_output=True, text=True, timeout=300, env={**env, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"error: {path}: the record at offset {starts[8]} is damaged" in result.stderr
    assert sorted(row["id"] for row in pq.read_table(out / "public.t" / "v1").to_pylist()) == [0, 1]


def test_serve_refuses_a_file_damaged_inside_and_serves_a_torn_one(tmp_path):
    from replwire.codec.serve.source import Source, SourceError

    path, torn, starts = damaged_and_torn(tmp_path)
    with pytest.raises(SourceError, match=rf"c.rwcap: the record at offset {starts[8]} is damaged"):
        Source.from_captures([path]).scan()
    result = subprocess.run([*REPLWIRE, "serve", str(path), "--listen", "127.0.0.1:0"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1 and "the file is damaged inside" in result.stderr, result.stderr
    assert Source.from_captures([torn]).scan().messages == len(starts) - 1


def test_the_spark_source_fails_on_a_file_damaged_inside_and_reads_a_torn_one(spark, tmp_path):
    from replwire.spark import register

    register(spark)
    path, torn, starts = damaged_and_torn(tmp_path)
    with pytest.raises(Exception, match=rf"the record at offset {starts[8]} is damaged"):
        spark.read.format("replwire").load(str(path)).collect()
    rows = spark.read.format("replwire").load(str(torn)).collect()
    assert sorted(json.loads(row.new)["id"] for row in rows) == [0, 1, 2, 3, 4]
