"""The capture's acknowledgement positions read from message bytes, against the full parse and the Decoder's
stream state, on every stream real servers sent (SQL rows and live walsender streams: streaming on and
parallel, two-phase, messages), and on bytes it cannot read."""

from __future__ import annotations

import pytest

from replwire.codec import DecodeError
from replwire.codec.io.positions import PositionTracker, message_completes
from replwire.codec.messages import StreamAbort, StreamCommit, StreamPrepare, StreamStart
from replwire.codec.stream.decoder import IDLE, Decoder, StreamStateError


def reference(messages, proto_version):
    """(completed position, idle after it) per message, from the Decoder's parse and state."""
    decoder, open_streams, out = Decoder(proto_version), set(), []
    for data in messages:
        message = decoder.feed(data)
        if isinstance(message, StreamStart):
            open_streams.add(message.xid)
        elif isinstance(message, (StreamCommit, StreamPrepare)) or (
                isinstance(message, StreamAbort) and message.subxid == message.xid):
            open_streams.discard(message.xid)
        out.append((message_completes(message), decoder.state == IDLE and not open_streams))
    return out


def tracked(messages, proto_version):
    tracker = PositionTracker(proto_version)
    return [(tracker.feed(data), tracker.idle) for data in messages]


def test_positions_equal_the_decoders_on_real_streams(pg_captures):
    streams = [(c.config, c.proto_version, [data for _, _, data in c.rows]) for c in pg_captures.captures]
    streams += [(w.config, w.proto_version, [m for m in w.messages() if m]) for w in pg_captures.walsender]
    kinds = set()
    for config, proto, messages in streams:
        expected = reference(messages, proto)
        assert tracked(messages, proto) == expected, config
        kinds |= {chr(m[0]) for m, (position, _) in zip(messages, expected) if position is not None}
    assert kinds >= {"C", "M"}
    assert kinds >= {"c", "P", "K", "r", "p"}  # streamed, two-phase and streamed two-phase transactions too


def test_unreadable_bytes_raise_the_parsers_errors():
    commit = bytes.fromhex("4300000000000175ce10000000000175ce40000303c374f3c2b5")
    tracker = PositionTracker(1)
    with pytest.raises(DecodeError, match="Commit"):
        tracker.feed(commit[:12])  # cut short inside end_lsn
    with pytest.raises(DecodeError):
        tracker.feed(b"\xff")
    with pytest.raises(StreamStateError) as caught:
        tracker.feed(commit)  # a Commit with no Begin
    assert caught.value.message == "Commit" and caught.value.state == IDLE and caught.value.index == 0
    assert tracker.feed(b"") is None
