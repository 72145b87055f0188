"""The change DataFrame's batches with the compiled column path (``change_batches``: plain transactions'
columns written in C, ``codec/split/columns.c``) hold exactly the rows of the Python path
(``ChangeRows`` over ``decode_part``), row for row and value for value, in the same order -- and so do
the per-table batches (``table_batches``: plain transactions' tuples as cells from the same C, typed in
bulk) those of ``TableRows`` over ``decode_part``: on the
benchmark's synthetic stream and on random streams of every kind of transaction, cut into parts of many
sizes (transactions straddling the cuts), in both input forms, across a resume that sends transactions
again, with a torn tail, on drawn values (binary, not UTF-8, odd forms, commit times beyond datetime), and
on the streams real servers sent."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replwire.codec import (
    LSN,
    Begin,
    Commit,
    Delete,
    Insert,
    Origin,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    TupleColumn,
    Update,
    build,
)
from replwire.codec.io.segments import read_records
from replwire.codec.split import Shapes, columns, decode_part, open_inputs, plan
from replwire.codec.split.decode import PartDecoder
from replwire.codec.stream.values import ValueLoader
from replwire.codec.wire import fast
from replwire.spark import rows as spark_rows
from replwire.spark.rows import ChangeRows, batches, change_batches
from tests.split.test_partitions import StreamMaker, _relation
from tests.split.test_row_path import (
    FORMS,
    SUFFIX,
    interleaved_streams,
    streams,
    synthetic_rows,
    synthetic_rows_with_origins,
    write_stream,
)

COMPILED = fast.COMPILED is not None


def python_rows(part) -> pa.Table:
    """The reference: the Python path's rows of one part."""
    loader = ValueLoader(part.source.encoding)
    return pa.Table.from_batches(list(batches(ChangeRows(loader), decode_part(part, rows=False), 8192)),
                                 schema=spark_rows._CHANGES_ARROW)


def _exact(value):
    """``value`` with each float as its repr (NaN equal to NaN, -0.0 not equal to 0.0)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return [_exact(v) for v in value]
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_exact(v) for v in value)
    return value


def _tables_of(part, shapes, items):
    """Every table shape's rows of a part, in one pass over ``items`` (``decode_part``'s changes, or
    ``part_changes``' with cells), each fed to its shape's ``TableRows`` as the changes job feeds them."""
    rows = {}

    def collector(name, position):
        target = shapes.at(name, position)
        if target is None:
            return None
        key = (name, target.version)
        if key not in rows:
            rows[key] = spark_rows.TableRows(target, ValueLoader(part.source.encoding))
        return rows[key]
    for item in items:
        if isinstance(item, columns.ColumnRun):
            for schema, table, indices, position, _, widths in spark_rows.table_runs(item):
                target = collector(f"{schema}.{table}", position)
                if target is not None:
                    target.add_cells(item, indices, widths, position)
            continue
        change = item.change
        names = ([f"{s}.{t}" for s, t in change.relations] if change.op == "truncate"
                 else [] if change.op == "message" else [f"{change.schema}.{change.table}"])
        for name in names:
            target = collector(name, item.position)
            if target is not None:
                target.add(item)
    return {key: pa.Table.from_batches([r.batch()], schema=r.arrow) for key, r in rows.items()}


def assert_same_table_rows(inputs, part_bytes, size=8192):
    """Every part's per-table rows from the column path's cells equal the Python path's, for every table
    shape (one pass each, as the changes job makes them); and table_batches (the ``table`` option) gives
    the same rows of one shape."""
    result = plan(inputs, part_bytes=part_bytes)
    shapes = Shapes(result.relations)
    for part in result.parts:
        try:
            expected = _tables_of(part, shapes, decode_part(part, rows=False))
        except Exception as error:  # noqa: BLE001 - a stream the Python path fails on fails the same way
            with pytest.raises(type(error)):
                _tables_of(part, shapes, columns.part_changes(part, size, cells=True))
            continue
        got = _tables_of(part, shapes, columns.part_changes(part, size, cells=True))
        assert sorted(got) == sorted(expected), (part_bytes, part.number)
        for key, table in expected.items():
            got[key].validate(full=True)
            for name in table.column_names:
                assert _exact(got[key][name].to_pylist()) == _exact(table[name].to_pylist()), (
                    part_bytes, part.number, key, name)
        if expected:
            key, table = max(expected.items(), key=lambda item: item[1].num_rows)
            version = next(v for v in result.relations if (v.name, v.version) == key)

            def wanted(position, version=version):
                current = shapes.at(version.name, position)
                return current is not None and current.version == version.version
            batches = list(spark_rows.table_batches(part, version, wanted, size))
            one = pa.Table.from_batches(batches, schema=table.schema)
            assert _exact(one.to_pylist()) == _exact(table.to_pylist()), (part_bytes, part.number, key)


def streamed_rows(inputs, part_bytes, size=8192):
    """How many rows of streamed transactions the Python path gives over the parts, and how many of them
    come in the column path's runs (rows with a subxid), with JSON images and with cells (which may take
    more: a value the JSON writer does not write exactly is no matter to a cell)."""
    expected = taken = taken_cells = 0
    for part in plan(inputs, part_bytes=part_bytes).parts:
        expected += sum(bool(streamed) for streamed in python_rows(part)["streamed"].to_pylist())
        counts = []
        for cells in (False, True):
            runs = [r for r in columns.part_changes(part, size, cells=cells) if isinstance(r, columns.ColumnRun)]
            counts.append(sum(pa.Array.from_buffers(pa.int64(), r.rows, [
                None if r.buffers[columns.BUFFERS.index("subxid_ok")] is None
                else pa.py_buffer(r.buffers[columns.BUFFERS.index("subxid_ok")]),
                pa.py_buffer(r.buffers[columns.BUFFERS.index("subxid")])]).is_valid().sum().as_py() or 0
                for r in runs))
        taken += counts[0]
        taken_cells += counts[1]
    return expected, taken, taken_cells


def assert_router_as_python(part, size=8192):
    """After the column path over a part, the router and decoder are where the Python path leaves them: the
    streamed transactions the C took blocks, Stream Commits and Stream Aborts of are kept as the router
    keeps them, and the records it took counted."""
    path = columns._ColumnPath(part, size, False)
    list(path.run())
    reference = PartDecoder(part, rows=False)
    list(reference.decode(read_records(part.source, part.start, part.stop, raw=True)))
    got, expected = path.decoding.router.state(), reference.router.state()
    for state in (got, expected):
        state["decoder"].pop("last_message", None)
    assert got == expected, part.number


def assert_same_rows(inputs, sizes, *, size=8192, compiled_share=0.0):
    """Every part's rows from change_batches equal the Python path's, for each part size; with the last
    size, at least ``compiled_share`` of them from the column path.  Returns how many rows there were, and
    how many the column path wrote, with the last size."""
    for part_bytes in sizes:
        total = written = 0
        for part in plan(inputs, part_bytes=part_bytes).parts:
            expected = python_rows(part)
            got_batches = list(change_batches(part, size))
            for batch in got_batches:
                batch.validate(full=True)
                assert batch.schema == spark_rows._CHANGES_ARROW
            got = pa.Table.from_batches(got_batches, schema=spark_rows._CHANGES_ARROW)
            assert got.num_rows == expected.num_rows, (part_bytes, part.number)
            for name in expected.column_names:  # column by column, to name the one that differs
                assert got[name].to_pylist() == expected[name].to_pylist(), (part_bytes, part.number, name)
            total += expected.num_rows
            written += sum(r.rows for r in columns.part_changes(part, size) if isinstance(r, columns.ColumnRun))
        assert_same_table_rows(inputs, part_bytes, size)
    assert written >= compiled_share * total if COMPILED else written == 0
    return total, written


@pytest.mark.parametrize("form", FORMS)
def test_synthetic_stream_wherever_cut(tmp_path, form):
    rows = synthetic_rows(4_000)
    inputs = open_inputs([write_stream(tmp_path / f"s.{SUFFIX[form]}", rows, form, 1)], proto_version=1)
    total, _ = assert_same_rows(inputs, (700, 9_000, 1 << 30), compiled_share=0.9)
    assert total > 2_000


@pytest.mark.parametrize("seed", range(4))
def test_random_streams_of_every_kind_of_transaction(tmp_path, monkeypatch, seed):
    """Plain transactions between streamed, two-phase ones, Origins, Truncates, lone messages and shape
    changes (protocol 4): the column path, tried at every chance (not less often after tries that took
    nothing), takes the plain ones and the stream blocks without those between the others, and leaves the
    router as the Python path would."""
    monkeypatch.setattr(columns, "_TRIES", 1 << 30)
    rows = StreamMaker(seed).make(80)
    form = FORMS[seed % 2]
    path = write_stream(tmp_path / f"r.{SUFFIX[form]}", [(lsn, 0, data) for lsn, data in rows], form, 4)
    inputs = open_inputs([path], proto_version=4)
    total, written = assert_same_rows(inputs, (1, 400, 1 << 30))
    assert total > 50
    assert written > 0 or not COMPILED
    for cut in (400, 1 << 30):
        for part in plan(inputs, part_bytes=cut).parts:
            assert_router_as_python(part)
        expected, taken, cells = streamed_rows(inputs, cut)
        assert cells == taken  # (every value one the JSON writer writes)
        assert expected > 50 and (taken > 0 if COMPILED else taken == 0)  # streamed blocks among them taken


@pytest.mark.parametrize("worth", [1, 32])
def test_transactions_the_column_path_declines_between_those_it_takes(tmp_path, monkeypatch, worth):
    """Every third transaction has an Origin (the Python path's): the column path takes the others where it
    is tried -- at every chance (a try is worth it if it takes a record), or less often after tries that
    took few records."""
    monkeypatch.setattr(columns, "_WORTH", worth)
    rows = synthetic_rows_with_origins(3_000, lambda n: n % 3 == 0)
    path = write_stream(tmp_path / "origins.rwc", rows, "capture", 1)
    assert_same_rows(open_inputs([path]), (3_000, 1 << 30), compiled_share=0.5 if worth == 1 else 0.0)


def test_a_resume_gives_a_transaction_once(tmp_path):
    """The second file starts again at transactions the first holds: they have no outcome in its parts,
    and give no rows."""
    rows = synthetic_rows(3_000)
    again = next(i for i in range(1_000, 2_000) if rows[i][2][:1] == b"B")
    first = write_stream(tmp_path / "a.rwc", rows[:2_000], "capture", 1)
    second = write_stream(tmp_path / "b.rwc", rows[again:], "capture", 1)
    inputs = open_inputs([first, second])
    total, _ = assert_same_rows(inputs, (5_000, 1 << 30), compiled_share=0.8)
    whole = open_inputs([write_stream(tmp_path / "whole.rwc", rows, "capture", 1)])
    assert total == sum(python_rows(part).num_rows for part in plan(whole).parts)


def test_a_torn_tail_and_small_batches(tmp_path):
    rows = synthetic_rows(1_500)
    path = write_stream(tmp_path / "torn.rwc", rows, "capture", 1)
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # the last record cut short
    assert_same_rows(open_inputs([path]), (3_000, 1 << 30), size=5, compiled_share=0.8)


def test_caps_reads_and_the_python_path(tmp_path, monkeypatch):
    """Runs cut short by the text cap, reads smaller than a transaction, and no compiled codec at all: the
    same rows."""
    rows = synthetic_rows(1_500)
    inputs = open_inputs([write_stream(tmp_path / "s.csv", rows, "copy-csv", 1)], proto_version=1)
    monkeypatch.setattr(columns, "_MOST_TEXT", 300)
    monkeypatch.setattr(columns, "_CHUNK", 100)
    assert_same_rows(inputs, (1 << 30,), compiled_share=0.8)
    monkeypatch.setattr(columns, "_MOST", 150)  # every transaction longer than the column path may take
    assert_same_rows(inputs, (1 << 30,))
    monkeypatch.setattr(columns, "COMPILED", None)
    assert_same_rows(inputs, (1 << 30,))
    assert not any(isinstance(r, columns.ColumnRun) for part in plan(inputs).parts
                   for r in columns.part_changes(part))


def _streamed_transactions():
    """Protocol-4 rows of streamed transactions, as a server with ``streaming = on`` sends them, their
    blocks interleaved: one committed after a savepoint rolled back (a Stream Abort of a subtransaction)
    and a second block, which sends a Relation again; one aborted whole; one whose first block is sent
    again after a resume (two consecutive first segments: the second replaces it) and then committed; one
    with an Origin (the Python path's); one whose first block sends a Relation the decoder does not know
    yet (the Python path's) and whose second sends it again; one renaming a table (the Python path's);
    and plain transactions around them, which carry the first Relations."""
    rows = []
    lsn = 0x2000000

    def emit(message, in_stream=False):
        nonlocal lsn
        lsn += 40
        rows.append((lsn, 0, build(message, proto_version=4, in_stream=in_stream)))

    def insert(xid, n, rel=16385):
        return Insert(xid=xid, relation_id=rel, new=[TupleColumn.text(str(n)), TupleColumn.text(f"v{n}")])

    def block(top, first, changes):
        emit(StreamStart(xid=top, first_segment=first))
        for message in changes:
            emit(message, in_stream=True)
        emit(StreamStop())

    def commit(top):
        emit(StreamCommit(xid=top, flags=0, commit_lsn=LSN(lsn + 10), end_lsn=LSN(lsn + 20), commit_time=top * 1000))

    emit(Begin(final_lsn=LSN(lsn + 100), commit_time=5, xid=900))
    emit(_relation(16385, "t16385", 2))
    emit(_relation(16386, "t16386", 3))
    emit(insert(None, 0))
    emit(Commit(flags=0, commit_lsn=LSN(lsn + 10), end_lsn=LSN(lsn + 20), commit_time=5))
    three = [TupleColumn.text("1"), TupleColumn.unchanged_toast(), TupleColumn.null()]
    block(1000, 1, [insert(1000, 1), insert(1001, 2), Update(xid=1000, relation_id=16386, key=None, new=three)])
    block(2000, 1, [insert(2000, 3), insert(2001, 4)])  # (aborted below)
    block(3000, 1, [insert(3000, 5), insert(3000, 6)])  # (sent again below)
    emit(StreamAbort(xid=1000, subxid=1001, abort_lsn=LSN(lsn), abort_time=1))  # the savepoint rolled back
    block(1000, 0, [_relation(16385, "t16385", 2, 1000), insert(1002, 7),  # (its Relation sent again: the same)
                    Delete(xid=1000, relation_id=16386, key=[three[0], three[2], three[2]]), insert(1000, 8)])
    block(3000, 1, [insert(3000, 5), insert(3000, 6)])  # the resumed server sends it again from its start
    block(3000, 0, [insert(3000, 9)])
    emit(StreamAbort(xid=2000, subxid=2000, abort_lsn=LSN(lsn), abort_time=1))
    emit(StreamAbort(xid=4000, subxid=4000, abort_lsn=LSN(lsn), abort_time=1))  # nothing of it streamed here
    commit(1000)
    emit(Begin(final_lsn=LSN(lsn + 100), commit_time=6, xid=901))
    emit(insert(None, 10))
    emit(Commit(flags=0, commit_lsn=LSN(lsn + 10), end_lsn=LSN(lsn + 20), commit_time=6))
    emit(StreamStart(xid=5000, first_segment=1))
    emit(Origin(origin_lsn=LSN(77), name="upstream"), in_stream=True)
    emit(insert(5000, 11), in_stream=True)
    emit(StreamStop())
    block(5000, 0, [insert(5000, 12)])
    block(6000, 1, [_relation(16387, "t16387", 2, 6000), insert(6000, 13, 16387)])  # a new relation: Python's
    block(6000, 0, [_relation(16387, "t16387", 2, 6000), insert(6000, 14, 16387)])  # sent again: the C's
    commit(6000)
    commit(3000)
    renamed = Insert(xid=7000, relation_id=16386, new=[TupleColumn.text("15"), TupleColumn.null(), TupleColumn.null()])
    block(7000, 1, [_relation(16386, "renamed", 3, 7000), renamed])  # not the Relation the decoder has: Python's
    commit(7000)
    commit(5000)
    return rows


@pytest.mark.parametrize("form", FORMS)
def test_streamed_transactions(tmp_path, form):
    """The column path takes the stream blocks of streamed transactions -- their changes' facts from the
    outcome of their key, wherever their Stream Commit is, their subxid their own xid -- and leaves out
    what decode_part leaves out: a rolled-back subtransaction's changes, an aborted transaction's, a first
    block sent again; a block of a transaction with an Origin goes to the Python path, all of it.  Cut
    anywhere (a transaction's blocks and its commit in different parts), the rows are the Python path's;
    and every streamed row the column path could write, it wrote."""
    rows = _streamed_transactions()
    inputs = open_inputs([write_stream(tmp_path / f"s.{SUFFIX[form]}", rows, form, 4)], proto_version=4)
    for cut in (1, 150, 600, 1 << 30):
        assert_same_rows(inputs, (cut,))
        for part in plan(inputs, part_bytes=cut).parts:
            assert_router_as_python(part)
    expected, taken, cells = streamed_rows(inputs, 1 << 30)
    assert cells == taken
    # 1000: 1, 7, the update, delete, 8 (2 rolled back); 3000: 5, 6, 9 (the first 5, 6 replaced); 5000: 11,
    # 12; 6000: 13, 14; 7000: 15
    assert expected == 13
    assert taken == (9 if COMPILED else 0)  # all but 5000's (its Origin makes it the Python path's), 13, 15
    # a block a part's end cuts is the Python path's (it reads the rest in the next part): some of them
    assert streamed_rows(inputs, 1) == (13, 0, 0)
    expected, taken, cells = streamed_rows(inputs, 600)
    assert cells == taken and expected == 13
    assert 0 < taken <= 9 if COMPILED else taken == 0  # (3000's blocks whole in a part)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=streams(), form=st.sampled_from(FORMS), cut=st.sampled_from([1, 300, 1 << 30]))
def test_drawn_values(tmp_path_factory, rows, form, cut):
    """Values of every form (binary, not UTF-8, forms the C does not write, commit times datetime cannot
    hold): what the column path declines the Python path writes."""
    path = write_stream(tmp_path_factory.mktemp("drawn") / f"d.{SUFFIX[form]}", rows, form, 1)
    inputs = open_inputs([path], proto_version=1)
    try:
        expected = [python_rows(part) for part in plan(inputs, part_bytes=cut).parts]
    except Exception as error:  # noqa: BLE001 - a stream the Python path fails on fails the same way here
        with pytest.raises(type(error)):
            for part in plan(inputs, part_bytes=cut).parts:
                list(change_batches(part))
        return
    got = [pa.Table.from_batches(list(change_batches(part)), schema=spark_rows._CHANGES_ARROW)
           for part in plan(inputs, part_bytes=cut).parts]
    assert [t.to_pylist() for t in got] == [t.to_pylist() for t in expected]
    assert_same_table_rows(inputs, cut)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=interleaved_streams(), form=st.sampled_from(FORMS), cut=st.sampled_from([1, 300, 1 << 30]))
def test_drawn_streamed_transactions(tmp_path_factory, monkeypatch, rows, form, cut):
    """Streamed transactions whose blocks interleave, with plain and two-phase ones between them (drawn:
    subtransactions rolled back, whole transactions aborted, streamed ones prepared, Relations inside
    blocks -- the same one sent again, or the table changing shape --, logical messages and truncates in
    blocks): the rows are the Python path's, and the router after the column path is the Python path's.
    The column path is tried at every chance (a few blocks at a time between what it declines)."""
    monkeypatch.setattr(columns, "_TRIES", 1 << 30)
    path = write_stream(tmp_path_factory.mktemp("drawn") / f"s.{SUFFIX[form]}", rows, form, 4)
    inputs = open_inputs([path], proto_version=4)
    assert_same_rows(inputs, (cut,))
    for part in plan(inputs, part_bytes=cut).parts:
        assert_router_as_python(part)


@pytest.mark.server
def test_real_streams(pg_captures, tmp_path, monkeypatch):
    """What real servers sent, through every configuration: the same rows.  With ``streaming`` on or
    ``parallel`` (their workload streams large transactions, rolls savepoints back inside them and aborts
    one), the column path takes streamed rows -- tried at every chance, as the workload's streamed
    transactions are few among the rest -- and leaves the router as the Python path would.  (Their rolled
    back savepoints and aborts are in ``streamed_rows``' reference, the Python path's rows.)"""
    monkeypatch.setattr(columns, "_TRIES", 1 << 30)
    total = streamed = taken = 0
    for n, capture in enumerate(pg_captures.captures):
        path = write_stream(tmp_path / f"{n}.rwc", [(int(LSN(lsn)), xid, data) for lsn, xid, data in capture.rows],
                            "capture", capture.proto_version)
        inputs = open_inputs([path])
        total += assert_same_rows(inputs, (4096, 1 << 30))[0]
        if capture.options.get("streaming") in ("on", "parallel"):
            for part in plan(inputs, part_bytes=4096).parts:
                assert_router_as_python(part)
            expected, got, _ = streamed_rows(inputs, 1 << 30)
            streamed, taken = streamed + expected, taken + got
    assert total > 1000
    # (a block with a Relation -- every streamed transaction's first -- an Origin, a logical message, or of a
    # two-phase transaction is the Python path's: over a third of these rows, on PostgreSQL 15 and 18)
    assert streamed > 100 and (taken > streamed // 4 if COMPILED else taken == 0), (streamed, taken)
