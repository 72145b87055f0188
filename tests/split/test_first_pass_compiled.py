"""The compiled first pass (``skim_run`` of the compiled codec, read by ``skim.Skimmer.run``) plans
exactly what the Python reading plans: parts (bounds, records, router state, outcomes, repeated lone
messages, rolled-back subtransactions), table shapes, counts, tails and errors, on every real-server
capture in both forms, the benchmark's synthetic stream, random streams of every transaction kind
(streamed, two-phase, Origin, Truncate, shape changes), a snapshot section, resumed inputs that send
transactions again, torn and corrupt tails, records longer than a run, and files still being written.
The Python path is the reference (held to a single Assembler by :mod:`tests.split.test_partitions`)."""

from __future__ import annotations

import pytest

from bench import corpus
from replwire.codec import LSN, Begin, Commit, Insert, Message, TupleColumn, build
from replwire.codec.io.capture_file import CaptureFileError
from replwire.codec.split import open_inputs, plan, skim
from replwire.codec.stream import snapshot_records
from replwire.codec.wire import fast
from tests.split.test_partitions import (
    StreamMaker,
    _opened_then_grown,
    _relation,
    _resumed_and_damaged,
    out_of_order_captures,
    write_capture,
)

pytestmark = pytest.mark.skipif(fast.COMPILED is None, reason="the compiled codec is not built")

SIZES = ((1, 1), (97, 1), (4096, 1), (1 << 30, 1), (1 << 30, 8))


class Counting:
    """The compiled codec, counting the runs ``skim_run`` reads and those it declines."""

    def __init__(self, module):
        self.module, self.read, self.declined = module, 0, 0

    def skim_run(self, *args):
        result = self.module.skim_run(*args)
        self.read += result[0] == 0
        self.declined += result[0] == 1
        return result


def facts(result):
    return ([(p.number, p.source.index, p.start, p.stop, p.state, dict(p.outcomes), p.repeated_lone, p.records,
              p.dropped_subxacts) for p in result.parts],
            [(v.name, v.version, v.position, v.relation, v.types) for v in result.relations],
            result.records, result.transactions, result.repeated,
            [(path, t.offset, t.reason, t.size) for path, t in result.tails])


def outcome(inputs, **kwargs):
    """The plan's facts, or the error it raised (class and text)."""
    try:
        return facts(plan(inputs, **kwargs))
    except Exception as error:  # noqa: BLE001 -- compared between the two paths
        return type(error), str(error)


def same(monkeypatch, inputs, sizes=SIZES):
    """The compiled and the Python first pass plan alike at every part size; how many runs the compiled one
    read and declined."""
    counting = Counting(fast.COMPILED)
    for part_bytes, min_parts in sizes:
        with monkeypatch.context() as patch:
            patch.setattr(skim, "COMPILED", None)
            expected = outcome(inputs, part_bytes=part_bytes, min_parts=min_parts)
        with monkeypatch.context() as patch:
            patch.setattr(skim, "COMPILED", counting)
            got = outcome(inputs, part_bytes=part_bytes, min_parts=min_parts)
        assert got == expected, (part_bytes, min_parts)
    return counting


def write_csv(path, rows):
    path.write_text("".join(f"{LSN(lsn)},{xid},\\x{data.hex()}\n" for lsn, xid, data in rows))
    return path


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("form", ["capture", "copy-csv"])
def test_random_streams(monkeypatch, tmp_path, seed, form):
    rows = StreamMaker(seed).make()
    if form == "capture":
        inputs = open_inputs([write_capture(tmp_path / "a.rwc", rows)])
    else:
        inputs = open_inputs([write_csv(tmp_path / "a.csv", [(lsn, 0, data) for lsn, data in rows])], proto_version=4)
    counting = same(monkeypatch, inputs)
    assert counting.read and not counting.declined


@pytest.mark.parametrize("form", ["capture", "copy-csv"])
def test_the_synthetic_stream(monkeypatch, tmp_path, form):
    rows = [(0x1_6000_0000 + 40 * i, 1000 + i, item.data) for i, item in enumerate(corpus.synthetic(6000).items)]
    if form == "capture":
        path = write_capture(tmp_path / "s.rwc", [(lsn, data) for lsn, _, data in rows], proto_version=1)
        inputs = open_inputs([path])
    else:
        inputs = open_inputs([write_csv(tmp_path / "s.csv", rows)], proto_version=1)
    counting = same(monkeypatch, inputs, sizes=((1, 1), (5000, 1), (1 << 30, 8), (1 << 30, 1)))
    assert counting.read > 8 and not counting.declined


@pytest.mark.server
def test_real_captures(monkeypatch, pg_captures, tmp_path):
    read = 0
    for n, capture in enumerate(pg_captures.captures):
        rows = [(int(LSN(lsn)), xid, data) for lsn, xid, data in capture.rows]
        path = write_capture(tmp_path / f"{n}.rwc", [(lsn, data) for lsn, _, data in rows],
                             proto_version=capture.proto_version)
        csv = write_csv(tmp_path / f"{n}.csv", rows)
        for inputs in (open_inputs([path]), open_inputs([csv], proto_version=capture.proto_version)):
            read += same(monkeypatch, inputs, sizes=((512, 1), (1 << 30, 4))).read
    assert read > 10


def test_resumed_inputs_send_transactions_again(monkeypatch, tmp_path):
    """A second file that starts again inside the first one's plain transactions (they are repeated), and
    a file that holds a stretch of them twice over (their end LSNs go down within one run)."""
    maker = StreamMaker(99)
    maker.make(40)
    maker.prepare_share = 0
    stretch = []
    for _ in range(8):
        stretch.append(len(maker.rows))
        maker.plain()
    maker.prepare_share = 0.2
    rows = maker.make(40)
    replay, cut = stretch[2], stretch[6]
    inputs = open_inputs([write_capture(tmp_path / "1.rwc", rows[:cut + 2]),
                          write_capture(tmp_path / "2.rwc", rows[replay:])])
    same(monkeypatch, inputs)
    twice = rows[:stretch[6]] + rows[stretch[1]:]
    inputs = open_inputs([write_capture(tmp_path / "twice.rwc", twice)])
    result = plan(inputs, part_bytes=1 << 30)
    assert result.repeated >= 5
    same(monkeypatch, inputs)
    # plain transactions only, one sent again between two later ones (in one block of them)
    ends = [base + end for base in range(0x1000, 0x21000, 0x1000)
            for end in (0x300, 0x400, 0x300, 0x380, 0x500, 0x500, 0x600)]
    stream = [(0x100, build(m, proto_version=1)) for m in (
        Begin(final_lsn=LSN(0x101), commit_time=1, xid=699), _relation(16385, "t", 1),
        Commit(flags=0, commit_lsn=LSN(0x101), end_lsn=LSN(0x102), commit_time=1))]
    insert = build(Insert(relation_id=16385, new=[TupleColumn.text("1")]), proto_version=1)
    for n, end in enumerate(ends):
        stream += [(end - 2, build(Begin(final_lsn=LSN(end - 1), commit_time=1, xid=700 + n), proto_version=1)),
                   *[(end - 2, insert)] * (n % 3),
                   (end - 1, build(Commit(flags=0, commit_lsn=LSN(end - 1), end_lsn=LSN(end), commit_time=1),
                                   proto_version=1))]
    inputs = open_inputs([write_capture(tmp_path / "down.rwc", stream, proto_version=1)])
    assert plan(inputs).repeated == 3 * 32
    same(monkeypatch, inputs)


@pytest.mark.parametrize("seed", range(3))
def test_torn_and_corrupt_tails(monkeypatch, tmp_path, seed):
    inputs = _resumed_and_damaged(tmp_path, seed)  # three segments, the third with a byte flipped
    counting = same(monkeypatch, inputs)
    assert counting.declined
    path = inputs[0].path
    data = open(path, "rb").read()
    for cut in (len(data) - 3, len(data) * 2 // 3 + seed, inputs[0].first + 5):
        torn = tmp_path / f"torn{cut}.rwc"
        torn.write_bytes(data[:cut])
        same(monkeypatch, open_inputs([torn]))
        csv = tmp_path / f"torn{cut}.csv"
        lines = "".join(f"{LSN(lsn)},0,\\x{d.hex()}\n" for lsn, d in StreamMaker(seed).make(30)).encode()
        csv.write_bytes(lines[:len(lines) * 2 // 3 + seed])  # a last row cut short: an error, named alike
        same(monkeypatch, open_inputs([csv], proto_version=4))


def test_a_snapshot_section_and_records_longer_than_a_run(monkeypatch, tmp_path):
    relation = _relation(16385, "t", 2)
    section = [snapshot_records.begin_record("slot", False), snapshot_records.slot_record(LSN(0x100), "00000003-1"),
               snapshot_records.table_record(relation, []),
               *(snapshot_records.rows_record(16385, False, 2, b"1\tx\n2\ty\n" * 3000) for _ in range(3)),
               snapshot_records.table_end_record(16385, 6), snapshot_records.end_record(LSN(0x100), 1, 6)]
    rows = [(0, data) for data in section]
    lsn = 0x200
    for i in range(40):
        big = b"x" * (100_000 if i % 7 == 0 else 10)
        for message in (Begin(final_lsn=LSN(lsn + 3), commit_time=5, xid=900 + i),
                        Insert(relation_id=16385, new=[TupleColumn.text(str(i)), TupleColumn.text("v")]),
                        Message(xid=None, flags=1, lsn=LSN(lsn + 1), prefix="p", content=big) if i % 3 == 0
                        else Insert(relation_id=16385, new=[TupleColumn.text(str(i)), TupleColumn.text("w")]),
                        Commit(flags=0, commit_lsn=LSN(lsn + 3), end_lsn=LSN(lsn + 4), commit_time=5)):
            rows.append((lsn, build(message, proto_version=2)))
            lsn += 1
        lsn += 10
    inputs = open_inputs([write_capture(tmp_path / "a.rwc", rows, proto_version=2)])
    assert any(r.name == "public.t" for r in plan(inputs).relations)
    counting = same(monkeypatch, inputs, sizes=((1, 1), (3000, 1), (50_000, 1), (1 << 30, 1), (1 << 30, 16)))
    assert counting.read and not counting.declined


def test_a_capture_still_being_written_goes_to_the_python_reading(monkeypatch, tmp_path):
    # a file that grew since open_inputs is read by the Python path, as big as it was opened (skim's
    # Skimmer): no run reaches C, so what this compares is that choice, not the compiled reading
    inputs, _ = _opened_then_grown(tmp_path)
    counting = same(monkeypatch, inputs, sizes=((400, 1), (1 << 30, 1)))
    assert (counting.read, counting.declined) == (0, 0)


def test_stream_errors(monkeypatch, tmp_path):
    """A stream out of order raises the decoder's error alike, also where the Begin comes in a block of plain
    transactions."""
    for path in out_of_order_captures(tmp_path).values():
        with monkeypatch.context() as patch:
            patch.setattr(skim, "COMPILED", None)
            expected = outcome(open_inputs([path]))
        assert isinstance(expected[0], type)  # an error
        same(monkeypatch, open_inputs([path]), sizes=((1, 1), (1 << 30, 1)))


def runs_of(monkeypatch, inputs, unit, compiled):
    """Every run :func:`skim.runs_here` reads of ``inputs``, ``unit`` bytes at a time, by the compiled reading
    (else the Python one): each run's bounds, records, items, row counts and tail, then the error that ended
    the reading (class and text), if one did."""
    got = []
    with monkeypatch.context() as patch:
        if not compiled:
            patch.setattr(skim, "COMPILED", None)
        try:
            for run in skim.runs_here(inputs, unit):
                tail = run.tail and (run.tail.offset, run.tail.reason, run.tail.size)
                got.append((run.start, run.stop, run.records, run.controls, run.rows, tail))
        except Exception as error:  # noqa: BLE001 -- compared between the two paths
            got.append((type(error), str(error)))
    return got


def runs_alike(monkeypatch, inputs, unit):
    """The compiled and the Python reading read ``inputs`` in the same runs, step by step, and end alike."""
    expected = runs_of(monkeypatch, inputs, unit, compiled=False)
    assert runs_of(monkeypatch, inputs, unit, compiled=True) == expected, unit
    return expected


def _csv_text(rows):
    return "".join(f"{LSN(lsn)},{xid},\\x{data.hex()}\n" for lsn, xid, data in rows).encode()


def _long_transactions(transactions=3, changes=300):
    """Plain transactions of ``changes`` row changes each (several 4 KiB units each), a Relation first."""
    rows = [(0x100, 699, build(Begin(final_lsn=LSN(0x101), commit_time=1, xid=699), proto_version=4)),
            (0x100, 699, build(_relation(16385, "t", 2), proto_version=4)),
            (0x101, 699, build(Commit(flags=0, commit_lsn=LSN(0x101), end_lsn=LSN(0x102), commit_time=1),
                               proto_version=4))]
    lsn = 0x1000
    for t in range(transactions):
        xid = 700 + t
        rows.append((lsn, xid, build(Begin(final_lsn=LSN(lsn + changes + 1), commit_time=1, xid=xid), proto_version=4)))
        for i in range(changes):
            lsn += 1
            rows.append((lsn, xid, build(Insert(relation_id=16385, new=[TupleColumn.text(str(i)),
                                                                         TupleColumn.text("v" * (i % 40))]),
                                         proto_version=4)))
        lsn += 1
        rows.append((lsn, xid, build(Commit(flags=0, commit_lsn=LSN(lsn), end_lsn=LSN(lsn + 1), commit_time=1),
                                     proto_version=4)))
        lsn += 10
    return rows


def _run_starts(monkeypatch, path, unit):
    """Where the runs of ``unit`` bytes start in the intact COPY-CSV file at ``path``."""
    return [run[0] for run in runs_of(monkeypatch, open_inputs([path], proto_version=4), unit, compiled=False)]


def test_a_torn_csv_line_right_after_a_run_fails_the_run_it_starts(monkeypatch, tmp_path):
    """The smallest case: a row, then a line cut short that starts where the first run (of 1 byte) ends.
    That line is the next run's (runs hold the rows that start below their end): the first run is read, the
    rows in it decoded, and the next one raises what the torn line is."""
    path = tmp_path / "torn.csv"
    path.write_bytes(b"0/10,0,\\x49\n0/1")  # an Insert's tag byte, then a torn row
    inputs = open_inputs([path], proto_version=4)
    runs = runs_alike(monkeypatch, inputs, 1)
    assert runs[0] == (0, 12, 1, [], [1], None)
    assert runs[1][0] is CaptureFileError and "at offset 12: not an (lsn, xid, data) row" in runs[1][1]
    assert len(runs) == 2


@pytest.mark.parametrize("unit", [4096, 1000])
@pytest.mark.parametrize("seed", range(2))
def test_torn_csv_tails_cut_around_every_read_unit(monkeypatch, tmp_path, seed, unit):
    """A COPY-CSV input (random transactions, or long plain ones over several 4 KiB units) cut at every offset
    around where each run of ``unit`` bytes starts -- the line before it, the run's first line, into its
    second --, so that the last line is torn inside a transaction that crosses the run's start: the compiled
    and the Python reading read the same runs, step by step, and end with the same error or tail."""
    if seed == 0:
        rows = [(lsn, 0, data) for lsn, data in StreamMaker(seed).make(40)]
    else:
        rows = _long_transactions()
    text = _csv_text(rows)
    whole = write_csv(tmp_path / "whole.csv", rows)
    path = tmp_path / "cut.csv"
    starts = _run_starts(monkeypatch, whole, unit)[1:]
    compared = 0
    for begin in starts[:: max(1, len(starts) // 6)]:
        after = text.index(b"\n", text.index(b"\n", begin) + 1) + 1  # the end of the run's second line
        for cut in range(max(1, text.rindex(b"\n", 0, begin - 1) + 1), min(after + 1, len(text))):
            path.write_bytes(text[:cut])
            runs_alike(monkeypatch, open_inputs([path], proto_version=4), unit)
            compared += 1
    assert compared > 200


def test_a_stream_error_in_the_run_before_a_torn_csv_line(monkeypatch, tmp_path):
    """A Begin inside an open transaction in the run just before the torn last line: the first pass raises
    the stream error (the run that holds it is read before the torn line's), in C and in Python alike, though
    the Python reading reads the torn line to find where that run ends."""
    begin = [build(Begin(final_lsn=LSN(0x9000), commit_time=1, xid=800 + i), proto_version=4) for i in range(200)]
    insert = build(Insert(relation_id=16385, new=[TupleColumn.text("x" * 40)]), proto_version=4)
    rows = [(0x200, 700, begin[0]), *((0x201 + i, 700, insert) for i in range(400)),
            *((0x600 + i, 800 + i, begin[i]) for i in range(1, 200))]
    text = _csv_text(rows)
    whole = write_csv(tmp_path / "whole.csv", rows)
    # a unit of 4096 bytes, as plan makes it for parts of 32 KiB: the runs start where they do in the whole file
    stray = len(_csv_text(rows[:401]))  # where the first Begin inside the open transaction is
    start = next(s for s in _run_starts(monkeypatch, whole, 4096) if s > stray)
    path = tmp_path / "cut.csv"
    assert start > 32768  # (so that plan's parts of 32 KiB are 32 KiB, and its runs 4 KiB)
    for cut in range(start + 1, text.index(b"\n", start)):
        path.write_bytes(text[:cut])
        inputs = open_inputs([path], proto_version=4)
        same(monkeypatch, inputs, sizes=((32768, 1),))
        assert outcome(inputs, part_bytes=32768)[0].__name__ == "StreamStateError"
