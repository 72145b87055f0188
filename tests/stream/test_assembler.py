"""The transaction assembler on hand-built message sequences: plain, streamed (subtransaction and top-level
aborts, interleaving, the parallel form), two-phase (plain and streamed), non-transactional messages,
spilling to disk, schema changes mid-transaction, TOAST and old-key tuples."""

from __future__ import annotations

import pytest

from replwire.codec import (
    LSN,
    UNCHANGED_TOAST,
    Assembler,
    Begin,
    BeginPrepare,
    Change,
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
    Timestamp,
    Transaction,
    Truncate,
    TupleColumn,
    Update,
    XLogData,
    build,
    build_envelope,
)

REL = 16385


def relation(names=("id", "v"), replica_identity="d", relation_id=REL, name="t", xid=None):
    cols = [RelationColumn(flags=1 if (i == 0 or replica_identity == "f") else 0, name=n,
                           type_id=23 if i == 0 else 25, type_modifier=-1) for i, n in enumerate(names)]
    return Relation(xid=xid, relation_id=relation_id, namespace="public", name=name,
                    replica_identity=replica_identity, columns=cols)


def row(*values):
    out = []
    for v in values:
        if v is None:
            out.append(TupleColumn.null())
        elif v is UNCHANGED_TOAST:
            out.append(TupleColumn.unchanged_toast())
        else:
            out.append(TupleColumn.text(str(v)))
    return out


def ins(i, v="x", xid=None):
    return Insert(xid=xid, relation_id=REL, new=row(i, v))


def begin(xid, lsn=0x1000):
    return Begin(final_lsn=LSN(lsn), commit_time=1000 + xid, xid=xid)


def commit(lsn=0x1000, end=0x1030, time=0):
    return Commit(commit_lsn=LSN(lsn), end_lsn=LSN(end), commit_time=time)


def s_start(xid, first=0):
    return StreamStart(xid=xid, first_segment=first)


def s_commit(xid, lsn=0x2000):
    return StreamCommit(xid=xid, commit_lsn=LSN(lsn), end_lsn=LSN(lsn + 0x30), commit_time=77)


def run(sequence, proto=4, typed=True, **kwargs):
    """Feed ``sequence`` as bytes (built with the right in_stream flag) with an LSN per message."""
    asm = Assembler(proto_version=proto, typed=typed, **kwargs)
    out, in_stream = [], False
    for position, message in enumerate(sequence):
        data = build(message, proto_version=proto, in_stream=in_stream)
        out += asm.feed(data, lsn=0x100 + position)
        if isinstance(message, StreamStart):
            in_stream = True
        elif isinstance(message, StreamStop):
            in_stream = False
    return asm, out


def ids(transaction):
    return [c.new["id"] if c.new else (c.key or c.old)["id"] for c in transaction.changes]


def test_plain_transaction():
    asm, out = run([begin(700), relation(), ins(1, "a"), Update(relation_id=REL, new=row(1, "b")),
                    Delete(relation_id=REL, key=row(1, None)), commit(0x1000, 0x1030, 99)])
    (txn,) = out
    assert isinstance(txn, Transaction)
    assert (txn.xid, txn.commit_lsn, txn.end_lsn, txn.commit_time) == (700, LSN(0x1000), LSN(0x1030), 99)
    assert txn.origin is None and txn.gid is None and not txn.streamed and len(txn.changes) == 3
    first, second, third = txn.changes
    assert first == Change("insert", schema="public", table="t", relation_id=REL, lsn=LSN(0x102), xid=700,
                           new={"id": 1, "v": "a"})
    assert second.op == "update" and second.new == {"id": 1, "v": "b"} and second.key is None and second.old is None
    assert third.op == "delete" and third.key == {"id": 1} and third.new is None and third.old is None
    assert asm.open_transactions == 0


def test_message_objects_and_a_shared_decoder():
    dec = Decoder(proto_version=1)
    asm = Assembler(dec)
    out = []
    for message in [begin(5), relation(), ins(1)]:
        out += asm.add(dec.feed(build(message, proto_version=1)))  # fed to the decoder, then added
    out += asm.add(commit())  # a message object the decoder has not seen: add() runs it through
    (txn,) = out
    assert ids(txn) == [1] and dec.state == "idle" and dec.index == 4


def test_streamed_transaction_drops_an_aborted_subtransaction_and_keeps_order():
    sequence = [
        s_start(800, 1), relation(xid=800), ins(1, xid=800), ins(2, xid=801), StreamStop(),
        begin(900), relation(), ins(50), commit(0x1500, 0x1530),  # a small transaction between the blocks
        s_start(800), ins(3, xid=801), ins(4, xid=802), ins(5, xid=800), StreamStop(),
        StreamAbort(xid=800, subxid=801),
        s_start(800), ins(6, xid=800), StreamStop(),
        s_commit(800),
    ]
    asm, out = run(sequence)
    small, big = out
    assert small.xid == 900 and ids(small) == [50]
    assert big.xid == 800 and big.streamed and ids(big) == [1, 4, 5, 6]
    assert [c.xid for c in big.changes] == [800, 800, 800, 800]  # the top-level transaction
    assert [c.subxid for c in big.changes] == [800, 802, 800, 800]  # the (sub)transaction that made it
    assert all(c.subxid is None for c in small.changes)  # not streamed: the server does not say
    assert (big.commit_lsn, big.end_lsn, big.commit_time) == (LSN(0x2000), LSN(0x2030), 77)
    assert asm.open_transactions == 0


def test_a_streamed_transaction_sent_again_from_its_first_block_starts_over():
    # a resumed capture: the server sends an unconfirmed streamed transaction again from the beginning
    sequence = [
        s_start(800, 1), relation(xid=800), ins(1, xid=800), ins(2, xid=800), StreamStop(),
        begin(900), relation(), ins(50), commit(0x1500, 0x1530),
        s_start(800, 1), relation(xid=800), ins(1, xid=800), ins(2, xid=800), StreamStop(),
        s_start(800), ins(3, xid=800), StreamStop(),
        s_commit(800),
    ]
    _, out = run(sequence)
    small, big = out
    assert ids(small) == [50] and ids(big) == [1, 2, 3]


def test_top_level_stream_abort_drops_everything_and_the_parallel_form_too():
    sequence = [
        s_start(800, 1), relation(xid=800), ins(1, xid=800), StreamStop(),
        s_start(810, 1), relation(xid=810), ins(2, xid=810), ins(3, xid=811), StreamStop(),
        StreamAbort(xid=800, subxid=800),
        StreamAbort(xid=810, subxid=811, abort_lsn=LSN(0x3000), abort_time=5),  # parallel streaming tail
        s_commit(810),
    ]
    asm, out = run(sequence)
    (txn,) = out
    assert txn.xid == 810 and ids(txn) == [2]
    assert asm.open_transactions == 0


def test_two_phase_held_until_commit_prepared_and_discarded_on_rollback():
    sequence = [
        BeginPrepare(prepare_lsn=LSN(0x100), end_lsn=LSN(0x130), prepare_time=3, xid=900, gid="g1"),
        relation(), ins(1),
        Prepare(prepare_lsn=LSN(0x100), end_lsn=LSN(0x130), prepare_time=3, xid=900, gid="g1"),
        BeginPrepare(prepare_lsn=LSN(0x200), end_lsn=LSN(0x230), prepare_time=4, xid=901, gid="g2"),
        ins(2),
        Prepare(prepare_lsn=LSN(0x200), end_lsn=LSN(0x230), prepare_time=4, xid=901, gid="g2"),
        RollbackPrepared(prepare_end_lsn=LSN(0x230), rollback_end_lsn=LSN(0x260), prepare_time=4, rollback_time=6,
                         xid=901, gid="g2"),
    ]
    asm, out = run(sequence)
    assert out == [] and asm.open_transactions == 1  # g1 prepared, not yet committed
    out = asm.add(CommitPrepared(commit_lsn=LSN(0x300), end_lsn=LSN(0x330), commit_time=9, xid=900, gid="g1"))
    (txn,) = out
    assert (txn.xid, txn.gid, txn.commit_lsn, txn.end_lsn, txn.commit_time) == (900, "g1", 0x300, 0x330, 9)
    assert (txn.prepare_lsn, txn.prepare_time) == (0x100, 3) and ids(txn) == [1]
    assert asm.open_transactions == 0


def test_streamed_prepare_then_commit_prepared():
    sequence = [
        s_start(950, 1), Origin(origin_lsn=LSN(0), name="upstream"), relation(xid=950), ins(1, xid=950),
        ins(2, xid=951), StreamStop(),
        StreamAbort(xid=950, subxid=951),
        StreamPrepare(prepare_lsn=LSN(0x500), end_lsn=LSN(0x530), prepare_time=1, xid=950, gid="big"),
        CommitPrepared(commit_lsn=LSN(0x600), end_lsn=LSN(0x630), commit_time=2, xid=950, gid="big"),
    ]
    _, out = run(sequence)
    (txn,) = out
    assert txn.gid == "big" and txn.streamed and ids(txn) == [1] and txn.origin == ("upstream", LSN(0))


def test_commit_prepared_for_an_unknown_gid_is_a_clear_error():
    asm = Assembler(proto_version=3)
    with pytest.raises(StreamStateError, match=r"message #0 \(CommitPrepared.*gid 'nope'.*never prepared"):
        asm.add(CommitPrepared(commit_lsn=1, end_lsn=2, commit_time=0, xid=1, gid="nope"))


def test_stream_commit_without_stream_is_a_clear_error():
    asm = Assembler(proto_version=2)
    with pytest.raises(StreamStateError, match=r"StreamCommit for xid 5, which has no streamed changes"):
        asm.add(s_commit(5))


def test_non_transactional_message_is_emitted_at_once_and_transactional_ones_with_the_commit():
    sequence = [
        Message(flags=0, lsn=LSN(0x50), prefix="nontx", content=b"\x00now"),
        s_start(800, 1), Message(xid=800, flags=1, lsn=LSN(0x60), prefix="tx", content=b"later"), StreamStop(),
        Message(flags=0, lsn=LSN(0x70), prefix="nontx2", content=b""),
        s_commit(800),
    ]
    _, out = run(sequence)
    loose1, loose2, txn = out
    assert loose1 == Change("message", lsn=LSN(0x100), prefix="nontx", content=b"\x00now", transactional=False)
    assert loose2.prefix == "nontx2"
    (inside,) = txn.changes
    assert (inside.op, inside.prefix, inside.content, inside.transactional, inside.xid) == \
           ("message", "tx", b"later", True, 800)


def test_truncate_lists_its_relations():
    _, out = run([begin(1), relation(), relation(relation_id=REL + 1, name="u"),
                  Truncate(options=3, relation_ids=[REL, REL + 1]), commit()])
    (change,) = out[0].changes
    assert change.op == "truncate" and change.relations == [("public", "t"), ("public", "u")]
    assert change.cascade and change.restart_identity and change.options == 3 and change.relation_ids == [REL, REL + 1]


def test_a_relation_resent_mid_transaction_applies_to_later_changes_only():
    sequence = [begin(1), relation(), ins(1, "a"), relation(names=("id", "v", "extra")),
                Insert(relation_id=REL, new=row(2, "b", 3)), commit()]
    for threshold in (64 * 2**20, 0):  # in memory and spilled
        _, out = run(sequence, spill_threshold=threshold)
        first, second = out[0].changes
        assert first.new == {"id": 1, "v": "a"} and second.new == {"id": 2, "v": "b", "extra": "3"}


def test_unchanged_toast_is_a_marker_never_none_and_old_key_has_only_key_columns():
    sequence = [begin(1), relation(("id", "big", "small")),
                Update(relation_id=REL, key=row(1, None, None), new=row(2, UNCHANGED_TOAST, None)),
                relation(("id", "big", "small"), replica_identity="f"),
                Update(relation_id=REL, old=row(2, "long", None), new=row(2, UNCHANGED_TOAST, "s")),
                Delete(relation_id=REL, old=row(2, "long", "s")), commit()]
    _, out = run(sequence)
    key_update, full_update, full_delete = out[0].changes
    assert key_update.key == {"id": 1}  # non-key columns of a 'K' tuple are not reported
    assert key_update.new["big"] is UNCHANGED_TOAST and key_update.new["small"] is None
    assert key_update.new["big"] is not None and key_update.unchanged_toast == ["big"]
    assert full_update.old == {"id": 2, "big": "long", "small": None}
    assert full_update.key == {"id": 2, "big": "long", "small": None}  # FULL: every column is key
    assert full_delete.old == {"id": 2, "big": "long", "small": "s"} and full_delete.new is None


def test_origin_is_reported():
    _, out = run([begin(1), Origin(origin_lsn=LSN("0/ABCDEF"), name="upstream"), relation(), ins(1), commit()])
    assert out[0].origin == ("upstream", LSN("0/ABCDEF"))


def test_large_transactions_spill_and_read_back_identically(tmp_path):
    sequence = [s_start(800, 1), relation(xid=800)]
    sequence += [ins(i, "v" * 100, xid=800 + i % 3) for i in range(300)]
    sequence += [StreamStop(), StreamAbort(xid=800, subxid=801), s_start(800)]
    sequence += [ins(1000 + i, xid=802) for i in range(5)]
    sequence += [StreamStop(), s_commit(800)]
    _, in_memory = run(sequence)
    asm, spilled = run(sequence, spill_threshold=2000, spill_dir=str(tmp_path))
    assert spilled[0].changes.spilled and not in_memory[0].changes.spilled
    expected = [i for i in range(300) if i % 3 != 1] + [1000 + i for i in range(5)]
    assert ids(spilled[0]) == ids(in_memory[0]) == expected
    assert len(spilled[0].changes) == len(expected)
    assert spilled[0].changes == list(in_memory[0].changes)
    assert spilled[0].changes[-1].new["id"] == 1004 and spilled[0].changes[1].new["id"] == 2
    assert asm.buffered_bytes == 0
    assert list(tmp_path.iterdir()) == []  # anonymous temporary files
    spilled[0].close()
    with pytest.raises(ValueError):
        list(spilled[0].changes)


def test_memory_stays_under_the_threshold_while_buffering():
    asm = Assembler(proto_version=2, spill_threshold=10_000, typed=False)
    asm.feed(build(s_start(800, 1), proto_version=2))
    asm.feed(build(relation(xid=800), proto_version=2, in_stream=True))
    for i in range(2000):
        asm.feed(build(ins(i, "y" * 50, xid=800), proto_version=2, in_stream=True))
        assert asm.buffered_bytes <= 10_000
    asm.feed(build(StreamStop(), proto_version=2))
    (txn,) = asm.feed(build(s_commit(800), proto_version=2))
    assert txn.changes.spilled and len(txn.changes) == 2000 and txn.changes[1999].new["id"] == "1999"


def test_feed_frame_uses_the_frame_lsn():
    asm = Assembler(proto_version=1)
    out = []
    for lsn, message in [(0x100, begin(1)), (0, relation()), (0x120, ins(1)), (0x150, commit(0x140, 0x150))]:
        out += asm.feed_frame(build_envelope(XLogData(data_start=lsn, wal_end=lsn, send_time=0,
                                                      data=build(message, proto_version=1))))
    (txn,) = out
    assert txn.changes[0].lsn == LSN(0x120)


def test_untyped_values_need_no_psycopg():
    _, out = run([begin(1), relation(), ins(7, "z"), commit()], typed=False)
    assert out[0].changes[0].new == {"id": "7", "v": "z"}


def test_resume_drops_an_incomplete_transaction_and_keeps_the_caches():
    asm = Assembler(proto_version=2)
    for message in [begin(5), relation(), ins(1)]:
        assert asm.feed(build(message, proto_version=2)) == []
    asm.resume()  # the rest comes from a resumed capture: transaction 5 is sent again, whole
    out = []
    for message in [begin(5), ins(1), ins(2), commit()]:
        out += asm.feed(build(message, proto_version=2))
    (txn,) = out
    assert ids(txn) == [1, 2] and asm.decoder.state == "idle"


@pytest.mark.parametrize("spill_threshold", [0, 1 << 20])
def test_rendered_changes_keep_their_place_and_their_subtransactions(spill_threshold):
    """Changes a writer rendered itself (``add_rendered``) sit in their transaction's buffer among the parsed
    ones, in memory or in the spill file, counted as changes; a subtransaction aborted between blocks is named
    in their ``dropped``; they make no Change objects, and need an open transaction."""
    from replwire.codec.stream.assembler import Rendered

    relation = Relation(xid=5, relation_id=9, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])
    asm = Assembler(proto_version=4, spill_threshold=spill_threshold)
    with pytest.raises(ValueError, match="no transaction is open"):
        asm.add_rendered(Rendered(b"x", 1, {0: 1}))
    asm.add(StreamStart(xid=5, first_segment=1))
    asm.add(relation)
    asm.add(Insert(xid=5, relation_id=9, new=[TupleColumn.text("1")]))
    position = asm.decoder.index
    asm.add_rendered(Rendered(b"rendered bytes", 3, {5: 1, 6: 2}))
    assert asm.decoder.index == position + 3  # (counted as messages of the stream)
    asm.add(Insert(xid=6, relation_id=9, new=[TupleColumn.text("2")]))
    asm.add(StreamStop())
    asm.add(StreamAbort(xid=5, subxid=6, abort_lsn=None, abort_time=None))
    [txn] = asm.add(StreamCommit(xid=5, flags=0, commit_lsn=LSN(0x900), end_lsn=LSN(0x910), commit_time=Timestamp(1)))
    assert len(txn.changes) == 2  # the parsed insert of 5, the rendered change of 5
    assert txn.changes.spilled == (spill_threshold == 0)
    wire = list(txn.changes.wire())
    assert [type(m).__name__ for m, *_ in wire] == ["Insert", "Rendered"]
    rendered = wire[1][0]
    assert rendered.data == b"rendered bytes" and rendered.dropped == {6}
    with pytest.raises(TypeError, match="make no Change objects"):
        list(txn.changes)
