"""Split decoding (replwire.codec.split) gives exactly what one Assembler gives, wherever the stream is
cut: on random hand-built streams with every transaction outcome, on streams split over several resumed
files, on the COPY-CSV form, and on every real-server capture."""

from __future__ import annotations

import pickle
import random

import pytest

from replwire.codec import (
    LSN,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Message,
    Origin,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStateError,
    StreamStop,
    Transaction,
    Truncate,
    TupleColumn,
    Update,
    build,
)
from replwire.codec.decode import committed
from replwire.codec.io.capture_file import CaptureFileError, CaptureHeader, CaptureWriter, read_capture
from replwire.codec.split import decode_part, first_pass, open_inputs, plan
from tests.support.capture import pgoutput_records

# -- comparing the two ways ----------------------------------------------------------------------------------


def _facts(change, outcome):
    row = (change.op, change.schema, change.table, change.relation_id, change.lsn, change.xid, change.subxid,
           change.new, change.old, change.key, change.relations, change.prefix, change.content, change.transactional)
    if outcome is None:
        return row + (None,)
    return row + ((outcome.xid, outcome.commit_lsn, outcome.end_lsn, outcome.commit_time, outcome.origin,
                   outcome.gid, outcome.prepare_lsn, outcome.prepare_time, outcome.streamed),)


def single_process(inputs):
    out = []
    for item in committed(inputs, typed=False):
        if isinstance(item, Transaction):
            outcome = item
            for change in item.changes:
                out.append(_facts(change, outcome))
        else:
            out.append(_facts(item, None))
    return out


def split(inputs, **kwargs):
    result = plan(inputs, **kwargs)
    decoded = [d for part in result.parts for d in decode_part(part, typed=False)]
    order = {}
    for d in decoded:  # emission order: by the end of the transaction (or the lone message's LSN)
        order.setdefault(id(d.outcome) if d.outcome else d.position,
                         d.outcome.end_lsn if d.outcome else (d.change.lsn or 0))
    decoded.sort(key=lambda d: (order[id(d.outcome) if d.outcome else d.position], d.position))
    return [_facts(d.change, d.outcome) for d in decoded], result


def assert_same_wherever_cut(inputs, sizes=(1, 97, 1000, 1 << 30)):
    expected = single_process(inputs)
    assert expected, "the stream has committed changes"
    for size in sizes:
        got, result = split(inputs, part_bytes=size)
        assert got == expected, f"part_bytes={size}: {len(result.parts)} parts"
    return expected


# -- random streams ------------------------------------------------------------------------------------------


def _relation(rel_id, name, ncols, xid=None):
    return Relation(xid=xid, relation_id=rel_id, namespace="public", name=name, replica_identity="d",
                    columns=[RelationColumn(flags=1 if i == 0 else 0, name=f"c{i}", type_id=23 if i == 0 else 25,
                                            type_modifier=-1) for i in range(ncols)])


class StreamMaker:
    """A random but valid protocol-4 message stream: plain, streamed (interleaved, subtransaction and
    top-level aborts), two-phase (plain and streamed; committed and rolled back), lone messages, Origin,
    Truncate, and tables whose shape changes mid-stream."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.lsn = 0x1000000
        self.xid = 1000
        self.rows: list[tuple[int, bytes]] = []
        self.width = {16385: 2, 16386: 3}
        self.known: set[int] = set()
        self.prepare_share = 0.2

    def emit(self, message, in_stream=False):
        self.lsn += self.rng.randint(8, 200)
        self.rows.append((self.lsn, build(message, proto_version=4, in_stream=in_stream)))

    def relation(self, rel_id, xid=None):
        if rel_id not in self.known or self.rng.random() < 0.05:
            if self.rng.random() < 0.3:
                self.width[rel_id] += 1  # ALTER TABLE ADD COLUMN
            self.known.add(rel_id)
            self.emit(_relation(rel_id, f"t{rel_id}", self.width[rel_id], xid), in_stream=xid is not None)

    def row(self, rel_id):
        values = []
        for i in range(self.width[rel_id]):
            r = self.rng.random()
            values.append(TupleColumn.null() if r < 0.1 else TupleColumn.unchanged_toast() if r < 0.15 and i
                          else TupleColumn.text(str(self.rng.randint(0, 99))))
        return values

    def change(self, xid=None):
        rel_id = self.rng.choice([16385, 16386])
        self.relation(rel_id, xid)
        kind = self.rng.random()
        stream = xid is not None
        if kind < 0.5:
            message = Insert(xid=xid, relation_id=rel_id, new=self.row(rel_id))
        elif kind < 0.75:
            message = Update(xid=xid, relation_id=rel_id, key=self.row(rel_id) if self.rng.random() < 0.3 else None,
                             new=self.row(rel_id))
        elif kind < 0.9:
            message = Delete(xid=xid, relation_id=rel_id, key=self.row(rel_id))
        elif kind < 0.95:
            message = Truncate(xid=xid, relation_ids=[rel_id], options=0)
        else:
            message = Message(xid=xid, flags=1, lsn=LSN(self.lsn), prefix="p", content=b"tx")
        self.emit(message, in_stream=stream)

    def plain(self):
        self.xid += 1
        prepared = self.rng.random() < self.prepare_share
        gid = f"g{self.xid}"
        self.emit(BeginPrepare(prepare_lsn=LSN(self.lsn + 500), end_lsn=LSN(self.lsn + 550), prepare_time=5,
                                xid=self.xid, gid=gid) if prepared
                   else Begin(final_lsn=LSN(self.lsn + 500), commit_time=self.xid, xid=self.xid))
        if self.rng.random() < 0.2:
            self.emit(Origin(origin_lsn=LSN(77), name="upstream"))
        for _ in range(self.rng.randint(0, 5)):
            self.change()
        end = self.lsn + 600
        if prepared:
            self.emit(Prepare(flags=0, prepare_lsn=LSN(self.lsn + 10), end_lsn=LSN(end), prepare_time=6,
                              xid=self.xid, gid=gid))
            return ("prepared", gid, self.xid)
        self.emit(Commit(flags=0, commit_lsn=LSN(self.lsn + 10), end_lsn=LSN(end), commit_time=self.xid))
        return None

    def streamed(self):
        self.xid += 1
        top = self.xid
        subs = [top]
        first = 1
        for _ in range(self.rng.randint(1, 3)):
            self.emit(StreamStart(xid=top, first_segment=first), in_stream=False)
            first = 0
            for _ in range(self.rng.randint(1, 4)):
                if self.rng.random() < 0.3:
                    self.xid += 1
                    subs.append(self.xid)
                self.change(xid=self.rng.choice(subs))
            self.emit(StreamStop())
            if len(subs) > 1 and self.rng.random() < 0.4:
                sub = subs.pop(self.rng.randrange(1, len(subs)))
                self.emit(StreamAbort(xid=top, subxid=sub, abort_lsn=LSN(self.lsn), abort_time=1))
        fate = self.rng.random()
        if fate < 0.15:
            self.emit(StreamAbort(xid=top, subxid=top, abort_lsn=LSN(self.lsn), abort_time=1))
        elif fate < 0.3:
            gid = f"g{top}"
            self.emit(StreamPrepare(flags=0, prepare_lsn=LSN(self.lsn + 10), end_lsn=LSN(self.lsn + 20),
                                    prepare_time=3, xid=top, gid=gid))
            return ("prepared", gid, top)
        else:
            self.emit(StreamCommit(xid=top, flags=0, commit_lsn=LSN(self.lsn + 10), end_lsn=LSN(self.lsn + 20),
                                   commit_time=top))
        return None

    def make(self, transactions=60):
        prepared = []
        for _ in range(transactions):
            r = self.rng.random()
            if r < 0.1:
                self.emit(Message(xid=None, flags=0, lsn=LSN(self.lsn), prefix="lone", content=b"hi"))
            outcome = self.streamed() if r > 0.6 else self.plain()
            if outcome:
                prepared.append(outcome)
            if prepared and self.rng.random() < 0.3:
                _, gid, xid = prepared.pop(0)
                end = self.lsn + 40
                if self.rng.random() < 0.75:
                    self.emit(CommitPrepared(flags=0, commit_lsn=LSN(self.lsn + 20), end_lsn=LSN(end),
                                             commit_time=9, xid=xid, gid=gid))
                else:
                    self.emit(RollbackPrepared(flags=0, prepare_end_lsn=LSN(self.lsn), rollback_end_lsn=LSN(end),
                                               prepare_time=1, rollback_time=2, xid=xid, gid=gid))
        return self.rows


def write_capture(path, rows, proto_version=4):
    with CaptureWriter(path, CaptureHeader(proto_version=proto_version, server_version=180000)) as writer:
        for lsn, data in rows:
            writer.append(lsn, 0, data)
    return path


@pytest.mark.parametrize("seed", range(12))
def test_split_decoding_equals_the_assembler_on_random_streams(tmp_path, seed):
    rows = StreamMaker(seed).make()
    inputs = open_inputs([write_capture(tmp_path / "a.rwc", rows)])
    assert_same_wherever_cut(inputs)


def test_parts_decode_the_same_after_travelling_pickled(tmp_path):
    """Spark sends each part to a worker pickled (its outcomes packed into plain lists): nothing is lost."""
    rows = StreamMaker(21).make()
    result = plan(open_inputs([write_capture(tmp_path / "a.rwc", rows)]), part_bytes=500)
    assert len(result.parts) > 3 and any(part.dropped_subxacts for part in result.parts)
    for part in result.parts:
        travelled = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(part))))  # twice: packed stays packed
        assert dict(travelled.outcomes) == part.outcomes and travelled.repeated_lone == part.repeated_lone
        assert travelled.dropped_subxacts == part.dropped_subxacts
        assert [(d.position, _facts(d.change, d.outcome)) for d in decode_part(travelled, typed=False)] == [
            (d.position, _facts(d.change, d.outcome)) for d in decode_part(part, typed=False)]


def test_a_stream_over_resumed_files_is_decoded_once(tmp_path):
    """The second file starts again at a transaction the first file already holds (a capture resumed from
    the slot's confirmed position, which was behind) and cuts the first file's last transaction short."""
    maker = StreamMaker(99)
    maker.make(40)
    maker.prepare_share = 0
    stretch = []
    for _ in range(8):  # plain transactions: what a resumed walsender may send again
        stretch.append(len(maker.rows))
        maker.plain()
    maker.prepare_share = 0.2
    rows = maker.make(40)
    replay, cut = stretch[2], stretch[6]
    first = rows[:cut + 2]  # the cut-off file ends inside a transaction
    second = rows[replay:]
    inputs = open_inputs([write_capture(tmp_path / "1.rwc", first), write_capture(tmp_path / "2.rwc", second)])
    expected = assert_same_wherever_cut(inputs)
    whole = single_process(open_inputs([write_capture(tmp_path / "whole.rwc", rows)]))
    assert expected == whole


def test_copy_csv_input_is_split_at_line_boundaries(tmp_path):
    rows = StreamMaker(7).make()
    csv_path = tmp_path / "rows.csv"
    csv_path.write_text("".join(f"{LSN(lsn)},{0},\\x{data.hex()}\n" for lsn, data in rows))
    inputs = open_inputs([csv_path], proto_version=4)
    expected = assert_same_wherever_cut(inputs, sizes=(1, 500, 1 << 30))
    assert expected == single_process(open_inputs([write_capture(tmp_path / "a.rwc", rows)]))


def test_copy_csv_needs_a_protocol_version_and_a_bad_row_is_named(tmp_path):
    csv_path = tmp_path / "rows.csv"
    csv_path.write_text("0/10,5,\\x49\nnot a row\n")
    with pytest.raises(CaptureFileError, match="not a capture file: to read it as the COPY-CSV .* give the protocol"):
        open_inputs([csv_path])
    inputs = open_inputs([csv_path], proto_version=1)
    with pytest.raises(CaptureFileError, match=r"rows.csv at offset 12: not an \(lsn, xid, data\) row"):
        plan(inputs)


def test_parts_respect_the_requested_size_and_cover_every_record(tmp_path):
    rows = StreamMaker(3).make()
    path = write_capture(tmp_path / "a.rwc", rows)
    inputs = open_inputs([path])
    result = plan(inputs, part_bytes=2000)
    assert result.records == len(rows)
    assert sum(p.records for p in result.parts) == len(rows)
    assert result.parts[0].start == inputs[0].first and result.parts[-1].stop == inputs[0].size
    for a, b in zip(result.parts, result.parts[1:]):
        assert a.stop == b.start
    assert len(result.parts) >= inputs[0].size // 2000 - 1
    # parts are cut where runs of about an eighth of the size start (records of up to `longest` bytes)
    longest = max(len(d) for _, d in rows) + 64
    assert max(p.size for p in result.parts) < 2000 + 2000 // 8 + longest
    assert min(p.size for p in result.parts[:-1]) > 2000 - 2000 // 8 - longest
    # asked for four: four of about a quarter each, the last not left with what the others did not take
    quarters = plan(inputs, part_bytes=1 << 30, min_parts=4).parts
    quarter = (inputs[0].size - inputs[0].first) // 4
    assert len(quarters) == 4 and all(abs(p.size - quarter) < quarter // 8 + longest for p in quarters)


def test_the_first_pass_reports_progress_through_every_input(tmp_path, monkeypatch):
    monkeypatch.setattr(first_pass, "_PROGRESS_BYTES", 1000)
    maker = StreamMaker(11)
    rows = maker.make()
    middle = next(i for i in range(len(rows) // 2, len(rows)) if rows[i][1][:1] == b"B")  # between transactions
    inputs = open_inputs([write_capture(tmp_path / "1.rwc", rows[:middle]),
                          write_capture(tmp_path / "2.rwc", rows[middle:])])
    total = sum(i.size - i.first for i in inputs)
    heard = []
    plan(inputs, progress=lambda done, of: heard.append((done, of)))
    assert all(of == total for _, of in heard)
    assert heard[-1] == (total, total)
    done = [d for d, _ in heard]
    assert done == sorted(done) and len(done) >= total // 1000 - len(inputs)  # every 1000 bytes, give or take a record
    assert max(b - a for a, b in zip(done, done[1:])) < 1000 + max(len(d) for _, d in rows) + 64


def test_relation_versions_count_shape_changes(tmp_path):
    rows = []
    lsn = 0x100
    for width in (2, 2, 3, 3, 2):
        for message in (Begin(final_lsn=LSN(lsn), commit_time=1, xid=5), _relation(16385, "t", width),
                        Commit(flags=0, commit_lsn=LSN(lsn), end_lsn=LSN(lsn + 1), commit_time=1)):
            rows.append((lsn, build(message, proto_version=1)))
            lsn += 10
    result = plan(open_inputs([write_capture(tmp_path / "a.rwc", rows, proto_version=1)]))
    assert [(v.name, v.version, len(v.relation.columns)) for v in result.relations] == [
        ("public.t", 1, 2), ("public.t", 2, 3), ("public.t", 3, 2)]


def test_a_torn_tail_is_reported_and_the_rest_decoded(tmp_path):
    rows = StreamMaker(5).make()
    path = write_capture(tmp_path / "a.rwc", rows)
    whole = single_process(open_inputs([path]))
    with open(path, "ab") as handle:
        handle.write(b"RWREC\x00garbage")
    inputs = open_inputs([path])
    result = plan(inputs)
    assert len(result.tails) == 1 and result.tails[0][0] == str(path)
    assert split(inputs, part_bytes=300)[0] == whole


# -- the first pass over awkward inputs ----------------------------------------------------------------------


def _plan_facts(result):
    return ([(p.number, p.source.index, p.start, p.stop, p.state, dict(p.outcomes), p.repeated_lone, p.records)
             for p in result.parts],
            [(v.name, v.version, v.position, v.relation, v.types) for v in result.relations],
            result.records, result.transactions, result.repeated,
            [(path, t.offset, t.reason) for path, t in result.tails])


def _resumed_and_damaged(tmp_path, seed):
    """Three segments of one stream (cut before a Begin), the third damaged by one byte past its middle (its
    records end there)."""
    rows = StreamMaker(seed).make(120)
    a, b = (next(i for i in range(n, len(rows)) if rows[i][1][:1] == b"B")
            for n in (len(rows) // 3, 2 * len(rows) // 3))
    paths = [write_capture(tmp_path / "1.rwc", rows[:a]), write_capture(tmp_path / "2.rwc", rows[a:b]),
             write_capture(tmp_path / "3.rwc", rows[b:])]
    data = bytearray(paths[2].read_bytes())
    data[len(data) * 3 // 5 + seed] ^= 0x5A
    paths[2].write_bytes(bytes(data))
    return open_inputs(paths)


@pytest.mark.parametrize("seed", range(3))
def test_resumed_segments_and_a_damaged_one_plan_wherever_cut(tmp_path, seed):
    """Over several segments, the third damaged, the plan names the damaged input and cuts as asked."""
    inputs = _resumed_and_damaged(tmp_path, seed)
    for size in (1, 300, 5000, 1 << 30):
        here = plan(inputs, part_bytes=size)
        assert here.tails and here.tails[0][0] == inputs[2].path
        assert len(here.parts) >= (3 if size >= 5000 else 30)


def _opened_then_grown(tmp_path):
    """The inputs of a capture file opened with half a stream's transactions in it, the rest appended since
    (a capture still running), and how many rows it had when opened."""
    rows = StreamMaker(5).make(120)
    half = next(i for i in range(len(rows) // 2, len(rows)) if rows[i][1][:1] == b"B")
    path = write_capture(tmp_path / "a.rwc", rows[:half])
    inputs = open_inputs([path])
    with CaptureWriter(path, CaptureHeader(proto_version=4, server_version=180000)) as writer:
        for lsn, data in rows[half:]:
            writer.append(lsn, 0, data)
    return inputs, half


def test_a_capture_still_being_written_is_planned_as_big_as_it_was_opened(tmp_path):
    """Records appended after open_inputs (a capture still running) are not read: the plan covers the file
    as open_inputs found it."""
    inputs, half = _opened_then_grown(tmp_path)
    for size in (400, 1 << 30):
        here = plan(inputs, part_bytes=size)
        assert here.records == half and here.parts[-1].stop == inputs[0].size
        assert all(p.start <= p.stop for p in here.parts)


def out_of_order_captures(tmp_path):
    """Protocol-1 captures of streams out of order, by name: a Begin inside an open transaction (read ahead as
    a plain transaction, also after a block of plain ones), a Commit without a Begin, an empty message after
    the error."""
    def message(m):
        return build(m, proto_version=1)

    begin = lambda xid: message(Begin(final_lsn=LSN(0x200), commit_time=1, xid=xid))  # noqa: E731
    commit = message(Commit(flags=0, commit_lsn=LSN(0x200), end_lsn=LSN(0x201), commit_time=1))
    insert = message(Insert(relation_id=16385, new=[TupleColumn(kind="t", data=b"1")]))
    relation = message(_relation(16385, "t", 1))
    streams = {
        "begin twice": [begin(7), relation, insert, begin(8), insert, commit, commit],
        "begin twice, then more": [begin(7), relation, insert, begin(8), insert, commit, begin(9), commit, commit],
        "commit alone": [begin(7), relation, insert, commit, commit],
        "commit alone, then more": [begin(7), relation, insert, commit, commit, begin(8), commit],
        "begin twice, then an empty message": [relation, begin(7), begin(8), commit, b"", begin(9), insert],
    }
    return {name: write_capture(tmp_path / f"{name}.rwc", [(0x100 + i, data) for i, data in enumerate(stream)],
                                proto_version=1)
            for name, stream in streams.items()}


def test_the_first_pass_raises_what_the_reader_and_the_decoder_raise(tmp_path):
    """A bad COPY-CSV row is an error naming the file and offset (and it survives pickling, as errors from
    Spark's executors must); a stream out of order raises the decoder's error, also where a Begin is read
    ahead by the scan."""
    rows = StreamMaker(4).make()
    csv_path = tmp_path / "rows.csv"
    text = "".join(f"{LSN(lsn)},{0},\\x{data.hex()}\n" for lsn, data in rows)
    csv_path.write_text(text + "0/1,0,\\x4\n")
    inputs = open_inputs([csv_path], proto_version=4)
    match = rf"rows.csv at offset {len(text)}: not an \(lsn, xid, data\) row"
    noted = CaptureFileError("rows.csv", "not a row", 12)
    noted.add_note("in part 3")
    travelled = pickle.loads(pickle.dumps(noted))  # as an executor's error reaches the driver
    assert (str(travelled), travelled.offset, travelled.__notes__) == ("rows.csv at offset 12: not a row", 12,
                                                                       ["in part 3"])
    with pytest.raises(CaptureFileError, match=match):
        plan(inputs, part_bytes=400)

    for name, path in out_of_order_captures(tmp_path).items():
        decoder = Decoder(proto_version=1)
        with pytest.raises(StreamStateError) as expected:
            with read_capture(path) as reader:
                for record in pgoutput_records(reader):
                    decoder.feed(record.data)
        with pytest.raises(StreamStateError) as raised:
            plan(open_inputs([path]))
        assert str(raised.value) == str(expected.value), name


# -- real servers ----------------------------------------------------------------------------------------------


@pytest.mark.server
def test_split_decoding_equals_the_assembler_on_real_captures(pg_captures, tmp_path):
    checked = 0
    for capture in pg_captures.captures:
        rows = [(LSN(lsn), data) for lsn, _, data in capture.rows]
        path = write_capture(tmp_path / f"{capture.config}.rwc", rows, proto_version=capture.proto_version)
        inputs = open_inputs([path])
        expected = assert_same_wherever_cut(inputs, sizes=(1, 4096, 1 << 30))
        checked += len(expected)
    assert checked > 1000


@pytest.mark.parametrize("seed", range(4))
def test_a_part_tells_the_commit_lsns_of_its_changes(tmp_path, seed):
    """``Part.commits()`` bounds the commit LSN of every change the part decodes to, and a part whose changes
    are not all in transactions (lone logical messages) says so (``outside``): what ``apply`` relies on to
    leave out the parts a lakehouse table holds already."""
    rows = StreamMaker(seed).make()
    result = plan(open_inputs([write_capture(tmp_path / "a.rwc", rows)]), part_bytes=700)
    assert len(result.parts) > 3
    lone = 0
    for part in result.parts:
        travelled = pickle.loads(pickle.dumps(part))
        assert travelled.commits() == part.commits() and travelled.outside == part.outside
        lsns = [int(d.outcome.commit_lsn) for d in decode_part(part, typed=False) if d.outcome is not None]
        alone = [d for d in decode_part(part, typed=False) if d.outcome is None]
        lone += len(alone)
        assert part.outside or not alone, part.number
        if lsns:
            low, high = part.commits()
            assert low <= min(lsns) and max(lsns) <= high, part.number
    assert lone, "the streams hold lone messages"
