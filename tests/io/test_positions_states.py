"""The position tracker's shortcut for messages that change nothing it follows (row changes inside a
transaction) holds only in the states where the stream allows them."""

from __future__ import annotations

import pytest

from replwire.codec import (
    LSN,
    Begin,
    Commit,
    DecodeError,
    Insert,
    StreamStart,
    StreamStop,
    Timestamp,
    TupleColumn,
    build,
)
from replwire.codec.io.positions import PositionTracker
from replwire.codec.stream.decoder import StreamStateError

STAMP = Timestamp(800_000_000_000_000)


def test_a_row_change_is_taken_inside_a_transaction_and_refused_outside():
    insert = build(Insert(relation_id=1, new=[TupleColumn.text("1")]), proto_version=4)
    tracker = PositionTracker(4)
    with pytest.raises(StreamStateError) as caught:
        tracker.feed(insert)  # no transaction open
    assert caught.value.message == "Insert" and caught.value.index == 0
    tracker = PositionTracker(4)
    assert tracker.feed(build(Begin(final_lsn=LSN(0x2000), commit_time=STAMP, xid=7), proto_version=4)) is None
    assert [tracker.feed(insert) for _ in range(3)] == [None, None, None]
    assert not tracker.idle and tracker.index == 4
    commit = Commit(flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2010), commit_time=STAMP)
    assert tracker.feed(build(commit, proto_version=4)) == 0x2010
    assert tracker.idle
    with pytest.raises(StreamStateError):
        tracker.feed(insert)  # closed again


def test_a_streamed_row_change_is_taken_only_in_a_block():
    streamed = build(Insert(xid=9, relation_id=1, new=[TupleColumn.text("1")]), proto_version=4, in_stream=True)
    tracker = PositionTracker(4)
    tracker.feed(build(StreamStart(xid=9, first_segment=1), proto_version=4))
    assert tracker.feed(streamed) is None
    tracker.feed(build(StreamStop(), proto_version=4))
    assert not tracker.idle  # the streamed transaction is still open between its blocks
    with pytest.raises((StreamStateError, DecodeError)):
        tracker.feed(streamed)  # between blocks no change may come (read outside a block, it does not parse)
