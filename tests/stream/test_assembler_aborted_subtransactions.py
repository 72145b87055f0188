"""A subtransaction's changes that come after its Stream Abort: dropped, whether the transaction's buffer is
in memory, spilled to its file, or holds runs the compiled row path rendered (one rule everywhere)."""

from __future__ import annotations

import pytest

from replwire.codec import LSN, Relation, StreamAbort, StreamCommit, StreamStart, StreamStop, Timestamp, build
from replwire.codec.stream.assembler import Assembler, Rendered
from tests.stream.test_assembler import ins, relation


def _sequence():
    return [
        StreamStart(xid=800, first_segment=1), relation(xid=800), ins(1, xid=800), ins(2, xid=801), StreamStop(),
        StreamAbort(xid=800, subxid=801, abort_lsn=None, abort_time=None),
        StreamStart(xid=800, first_segment=0), ins(3, xid=801), ins(4, xid=800), StreamStop(),
        # a subtransaction aborted before it made any change here: its later changes are dropped too
        StreamAbort(xid=800, subxid=803, abort_lsn=None, abort_time=None),
        StreamStart(xid=800, first_segment=0), ins(5, xid=803), ins(6, xid=802), StreamStop(),
        StreamCommit(xid=800, flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2030), commit_time=Timestamp(77)),
    ]


@pytest.mark.parametrize("spill_threshold", [64 * 2**20, 0])
@pytest.mark.parametrize("fed", [True, False])
def test_changes_after_a_subtransactions_abort_are_dropped(spill_threshold, fed):
    """In memory and spilled, through feed's fast path (bytes) and add (parsed messages): the same changes,
    and as many as len() says."""
    asm = Assembler(proto_version=4, spill_threshold=spill_threshold)
    out = []
    for message in _sequence():
        if fed:
            in_stream = isinstance(message, Relation) or getattr(message, "relation_id", None) is not None
            out += asm.feed(build(message, proto_version=4, in_stream=in_stream))
        else:
            out += asm.add(message)
    (txn,) = out
    assert txn.changes.spilled == (spill_threshold == 0)
    assert [c.new["id"] for c in txn.changes] == [1, 4, 6]
    assert len(txn.changes) == 3
    assert [c.subxid for c in txn.changes] == [800, 800, 802]


@pytest.mark.parametrize("spill_threshold", [64 * 2**20, 0])
def test_rendered_changes_after_a_subtransactions_abort_are_not_counted(spill_threshold):
    """A rendered run after the abort: its lines of the aborted subtransaction are left out by the writer
    (``dropped``) and not counted."""
    asm = Assembler(proto_version=4, spill_threshold=spill_threshold)
    for message in _sequence()[:6]:  # up to the first abort
        asm.add(message)
    asm.add(StreamStart(xid=800, first_segment=0))
    asm.add_rendered(Rendered(b"run", 3, {801: 2, 800: 1}))
    asm.add(StreamStop())
    [txn] = asm.add(StreamCommit(xid=800, flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2030),
                                 commit_time=Timestamp(77)))
    assert len(txn.changes) == 2  # the insert of 800 before, the rendered one of 800
    rendered = [m for m, *_ in txn.changes.wire() if isinstance(m, Rendered)]
    assert len(rendered) == 1 and rendered[0].dropped == {801}
