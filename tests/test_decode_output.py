"""What ``replwire decode`` writes, called as a function: its lines in each format, its counts, and the order of
its output and what its caller hears (a torn end, a damaged record, progress), without the command line."""

from __future__ import annotations

import io
import json

import pytest

from replwire.codec import LSN, Begin, Commit, Insert, Relation, RelationColumn, Timestamp, TupleColumn, build
from replwire.codec.decode import RecordError, committed
from replwire.codec.decode_output import BATCH, write_changes
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from replwire.codec.split import open_inputs
from replwire.codec.stream import jsonl

STAMP = Timestamp(800_000_000_000_000)
RELATION = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                    columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])


def write_capture(path, sizes) -> None:
    """A capture file of one transaction per size in ``sizes``, each inserting that many rows."""
    with CaptureWriter(path, CaptureHeader(proto_version=1, server_version=160004, database="app",
                                           options={"publication_names": "p"})) as writer:
        lsn, xid = 0x1000, 700
        for size in sizes:
            commit = LSN(lsn + 8 * (size + 2))
            messages = [Begin(final_lsn=commit, commit_time=STAMP, xid=xid), RELATION,
                        *(Insert(relation_id=16384, new=[TupleColumn.text(str(n))]) for n in range(size)),
                        Commit(flags=0, commit_lsn=commit, end_lsn=LSN(commit + 8), commit_time=STAMP)]
            for message in messages:
                writer.append(LSN(lsn), xid, build(message, proto_version=1))
                lsn += 8
            lsn, xid = commit + 16, xid + 1


class Writes(io.StringIO):
    """A text stream that keeps each write apart, and says when it was flushed."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.events = events

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)

    def flush(self) -> None:
        self.events.append(f"flushed {self.getvalue().count(chr(10))} lines")


@pytest.mark.parametrize("output_format", ["jsonl", "table", "debezium"])
def test_every_committed_change_is_written_in_its_format_and_counted(tmp_path, output_format):
    write_capture(tmp_path / "a.rwcap", [2, 1, 3])
    inputs = open_inputs([tmp_path / "a.rwcap"])
    out = io.StringIO()
    counts = write_changes(inputs, out, output_format, version="9.9.9")
    assert (counts.transactions, counts.changes, counts.repeated, counts.damaged) == (3, 6, 0, [])
    lines = out.getvalue().splitlines()
    if output_format == "jsonl":
        assert lines == [jsonl.ENCODE(o) for item in committed(inputs) for o in jsonl.objects(item)]
    elif output_format == "table":
        assert lines[0].split() == ["op", "table", "xid", "commit_lsn", "values", "|", "unchanged", "TOAST"]
        assert [line.split()[:3] for line in lines[1:]] == [["insert", "public.t", str(xid)] for xid in
                                                            (700, 700, 701, 702, 702, 702)]
    else:
        events = [json.loads(line) for line in lines]
        assert [(e["op"], e["after"]["id"], e["source"]["db"], e["source"]["version"]) for e in events] == [
            ("c", n, "app", "replwire-9.9.9") for n in (0, 1, 0, 0, 1, 2)]


def test_lines_go_out_in_batches(tmp_path):
    write_capture(tmp_path / "a.rwcap", [BATCH + 10])
    out = Writes([])
    counts = write_changes(open_inputs([tmp_path / "a.rwcap"]), out, "table")  # (not the compiled row path)
    assert counts.changes == BATCH + 10
    assert [text.count("\n") for text in out.writes] == [BATCH + 1, 10]  # the header shares the first line


def test_the_output_is_flushed_and_progress_cleared_before_the_caller_hears_of_a_torn_end(tmp_path):
    write_capture(tmp_path / "a.rwcap", [2, 2])
    (tmp_path / "torn.rwcap").write_bytes((tmp_path / "a.rwcap").read_bytes()[:-5])
    events: list[str] = []

    class Shown:
        def show(self, transactions: int, changes: int) -> None:
            events.append(f"shown {transactions}/{changes}")

        def clear(self) -> None:
            events.append("cleared")

    counts = write_changes(open_inputs([tmp_path / "torn.rwcap"]), Writes(events), "table", progress=Shown(),
                           tail=lambda path, problem: events.append(f"tail {problem.intact_from}"))
    assert events == ["shown 1/2", "flushed 3 lines", "cleared", "tail None", "flushed 3 lines", "cleared"]
    assert (counts.transactions, counts.damaged) == (1, [])


def test_a_file_damaged_inside_is_counted_after_what_came_before_it(tmp_path):
    write_capture(tmp_path / "a.rwcap", [1, 1, 1])
    data = bytearray((tmp_path / "a.rwcap").read_bytes())
    data[len(data) // 2] ^= 0xFF  # a record of the second transaction: those after it are intact
    (tmp_path / "a.rwcap").write_bytes(bytes(data))
    heard = []
    out = io.StringIO()
    counts = write_changes(open_inputs([tmp_path / "a.rwcap"]), out, "jsonl",
                           tail=lambda path, problem: heard.append((path, out.getvalue().count("\n"))))
    assert heard == [(str(tmp_path / "a.rwcap"), 1)] and counts.damaged == [str(tmp_path / "a.rwcap")]


def test_a_record_that_does_not_decode_is_raised_after_the_lines_before_it(tmp_path):
    write_capture(tmp_path / "a.rwcap", [1])
    header = CaptureHeader(proto_version=1, server_version=160004, options={"publication_names": "p"})
    with CaptureWriter(tmp_path / "a.rwcap", header) as writer:
        writer.append(LSN(0x9000), 0, b"Z")  # (a new writer on the file appends)
    out = io.StringIO()
    with pytest.raises(RecordError, match="unknown message tag 'Z'"):
        write_changes(open_inputs([tmp_path / "a.rwcap"]), out, "table")
    assert out.getvalue().count("\n") == 2  # the header and the first transaction's row


def test_an_unknown_format_is_refused(tmp_path):
    write_capture(tmp_path / "a.rwcap", [1])
    with pytest.raises(ValueError, match="jsonl, table, debezium, not 'csv'"):
        write_changes(open_inputs([tmp_path / "a.rwcap"]), io.StringIO(), "csv")
