"""The stateful Decoder: stream state, caches, and clear errors for out-of-order input."""

from __future__ import annotations

import pickle

import pytest

from replwire.codec import (
    LSN,
    Begin,
    BeginPrepare,
    Commit,
    DecodeError,
    Decoder,
    Delete,
    Insert,
    Message,
    PrimaryKeepalive,
    Relation,
    RelationColumn,
    StreamCommit,
    StreamStart,
    StreamStateError,
    StreamStop,
    Truncate,
    TupleColumn,
    Type,
    Update,
    XLogData,
    build,
    build_envelope,
    messages,
)
from replwire.codec.stream import decoder as decoder_module


def relation(relation_id=16385, names=("id", "v"), **kw):
    cols = [RelationColumn(flags=1 if i == 0 else 0, name=n, type_id=23 if i == 0 else 25, type_modifier=-1)
            for i, n in enumerate(names)]
    return Relation(relation_id=relation_id, namespace="public", name="t", replica_identity="d", columns=cols, **kw)


def row(*values):
    return [TupleColumn.null() if v is None else TupleColumn.text(str(v)) for v in values]


def wire(message, proto=2, in_stream=False):
    return build(message, proto_version=proto, in_stream=in_stream)


BEGIN = Begin(final_lsn=LSN("0/100"), commit_time=0, xid=700)
COMMIT = Commit(commit_lsn=LSN("0/100"), end_lsn=LSN("0/130"), commit_time=0)


def test_feed_tracks_stream_blocks_and_parses_the_xid_inside():
    dec = Decoder(proto_version=2)
    assert dec.state == "idle" and not dec.in_stream
    start = dec.feed(wire(StreamStart(xid=800, first_segment=1)))
    assert dec.in_stream and dec.stream_xid == 800 and start.is_first_segment
    rel = dec.feed(wire(relation(xid=801), in_stream=True))
    assert rel.xid == 801 and dec.relations[16385] is rel
    insert = dec.feed(wire(Insert(xid=801, relation_id=16385, new=row(1, "a")), in_stream=True))
    assert insert.xid == 801 and insert.new[1].data == b"a"
    dec.feed(wire(StreamStop()))
    assert not dec.in_stream and dec.stream_xid is None and dec.state == "idle"
    commit = dec.feed(wire(StreamCommit(xid=800, commit_lsn=1, end_lsn=2, commit_time=0)))
    assert commit.xid == 800 and dec.index == 5


def test_a_relation_message_replaces_the_previous_one_and_types_are_cached():
    dec = Decoder(proto_version=1)
    dec.feed(wire(BEGIN, 1))
    first = dec.feed(wire(relation(), 1))
    dec.feed(wire(Type(type_id=16390, namespace="", name="int4"), 1))
    second = dec.feed(wire(relation(names=("id", "v", "extra")), 1))
    assert dec.relations == {16385: second} and first != second
    assert dec.types[16390].name == "int4"
    # the new relation is in force: a 3-column tuple is accepted, a 2-column one is not
    dec.feed(wire(Insert(relation_id=16385, new=row(1, "a", None)), 1))
    with pytest.raises(StreamStateError, match=r"message #5 \(Insert.*new tuple has 2 columns but Relation "
                                               r"public.t \(16385\) has 3"):
        dec.feed(wire(Insert(relation_id=16385, new=row(1, "a")), 1))


@pytest.mark.parametrize("messages_before, bad, pattern", [
    ([], StreamStop(), r"message #0 \(StreamStop, in state 'idle'\): StreamStop without an open StreamStart"),
    ([], Commit(commit_lsn=1, end_lsn=2, commit_time=0), r"message #0 \(Commit.*Commit without an open Begin"),
    ([BEGIN], Insert(relation_id=99, new=row(1)), r"message #1 \(Insert.*relation 99 is unknown"),
    ([BEGIN], Truncate(options=0, relation_ids=[5, 6]), r"message #1 \(Truncate.*relations 5, 6 unknown"),
    ([BEGIN], BEGIN, r"message #1 \(Begin, in state 'transaction'\): Begin inside an open transaction "
                     r"\(opened by message #0\)"),
    ([], Insert(relation_id=99, new=row(1)), r"Insert outside a transaction"),
    ([BEGIN], StreamStart(xid=1, first_segment=1), r"StreamStart inside an open transaction"),
    ([BEGIN, relation()], Update(relation_id=16385, key=row(1), new=row(1, "x")),
     r"key tuple has 1 columns but Relation public.t \(16385\) has 2"),
    ([BEGIN, relation()], Delete(relation_id=16385, old=row(1, 2, 3)), r"old tuple has 3 columns"),
    ([], Message(flags=1, lsn=1, prefix="p", content=b""), r"Message\(transactional\) outside a transaction"),
    ([BEGIN], Message(flags=0, lsn=1, prefix="p", content=b""), r"Message\(non-transactional\) inside an open"),
])
def test_out_of_order_input_is_a_clear_error(messages_before, bad, pattern):
    dec = Decoder(proto_version=2)
    for message in messages_before:
        dec.feed(wire(message))
    state, index = dec.state, dec.index
    with pytest.raises(StreamStateError, match=pattern) as raised:
        dec.feed(wire(bad))
    assert raised.value.index == index and raised.value.message == type(bad).__name__
    assert isinstance(raised.value, ValueError)
    assert dec.state == state and dec.index == index  # nothing changed
    assert str(pickle.loads(pickle.dumps(raised.value))) == str(raised.value)


@pytest.mark.parametrize("opening", [
    [BEGIN],
    [BeginPrepare(prepare_lsn=LSN("0/100"), end_lsn=LSN("0/130"), prepare_time=0, xid=700, gid="g")],
    [StreamStart(xid=700, first_segment=1)],
])
def test_row_changes_take_the_short_way_with_the_same_effects(monkeypatch, opening):
    """Row changes inside a transaction, a prepare or a stream block are checked without the general path's
    lookups; with that short way closed (every row change through the general path), the same stream must
    leave the decoder exactly as it does, message by message, and fail the same way."""
    changes = [Insert(relation_id=16385, new=row(1, "a")), Update(relation_id=16385, key=row(1, None), new=row(2, "b")),
               Update(relation_id=16385, new=row(2, "c")), Delete(relation_id=16385, old=row(2, "c")),
               Delete(relation_id=16385, key=row(2, None))]
    bad = [Insert(relation_id=16385, new=row(1)), Insert(relation_id=99, new=row(1, "a")),
           Delete(relation_id=16385, old=row(1, 2, 3))]
    stream = [*opening, relation(), *changes]
    if isinstance(opening[0], StreamStart):  # inside a stream block each message carries the (sub)xid
        stream, bad = ([m if m is opening[0] else type(m)(**{**{f: getattr(m, f) for f in m.__slots__}, "xid": 701})
                        for m in ms] for ms in (stream, bad))

    def run():
        dec = Decoder(proto_version=4)
        seen = []
        for message in stream:
            out = dec.feed(wire(message, 4, in_stream=dec.in_stream))
            seen.append((out, dec.state, dec.index, dec.xid, dec.stream_xid, dec.last_message is out,
                         dec.last_data, dict(dec.relations), dict(dec.types)))
        for message in bad:
            with pytest.raises(StreamStateError) as raised:
                dec.feed(wire(message, 4, in_stream=dec.in_stream))
            seen.append((str(raised.value), dec.state, dec.index))
        return seen

    short = run()
    monkeypatch.setattr(decoder_module, "_ROW_STATES", frozenset())
    assert run() == short
    assert [s[1] for s in short[-len(bad) - len(changes) - 1:-len(bad)]] == [short[0][1]] * (len(changes) + 1)
    assert "has 2" in short[-3][0] and "relation 99 is unknown" in short[-2][0] and "old tuple has 3" in short[-1][0]


def test_stream_start_needs_protocol_2():
    dec = Decoder(proto_version=1)
    with pytest.raises((DecodeError, StreamStateError), match="protocol version 2|protocol 2"):
        dec.feed(wire(StreamStart(xid=1, first_segment=1), 2))
    with pytest.raises(StreamStateError, match="streaming needs protocol 2"):
        dec.accept(StreamStart(xid=1, first_segment=1))
    assert not dec.in_stream


def test_a_parse_error_leaves_the_state_alone_and_says_where_in_the_stream():
    dec = Decoder(proto_version=2)
    dec.feed(wire(BEGIN))
    with pytest.raises(DecodeError) as raised:
        dec.feed(b"I\x00\x00")
    assert "message #1 of the stream" in "\n".join(getattr(raised.value, "__notes__", []))
    assert dec.state == "transaction" and dec.index == 1


def test_feed_frame_feeds_xlogdata_and_returns_keepalives_as_they_are():
    dec = Decoder(proto_version=1)
    payload = wire(BEGIN, 1)
    frame = dec.feed_frame(build_envelope(XLogData(data_start=0x100, wal_end=0x100, send_time=5, data=payload)))
    assert isinstance(frame, XLogData) and frame.data == payload
    assert dec.last_message == BEGIN and dec.state == "transaction"
    keepalive = dec.feed_frame(build_envelope(PrimaryKeepalive(wal_end=0x200, send_time=6, reply_requested=1)))
    assert isinstance(keepalive, PrimaryKeepalive) and keepalive.reply_requested == 1
    empty = dec.feed_frame(build_envelope(XLogData(data_start=0, wal_end=0, send_time=7, data=b"")))
    assert empty.data == b"" and dec.last_message is None and dec.index == 1  # PG10-14's empty payload


def test_accept_runs_parsed_messages_through_the_same_checks():
    dec = Decoder(proto_version=2)
    dec.accept(BEGIN)
    with pytest.raises(StreamStateError, match="relation 1 is unknown"):
        dec.accept(Insert(relation_id=1, new=row(1)))
    with pytest.raises(TypeError):
        dec.accept(XLogData(data_start=0, wal_end=0, send_time=0, data=b""))


def test_the_transition_table_covers_every_logical_message():
    events = {event for _, event in decoder_module.TRANSITIONS}
    classes = {cls.__name__ for cls in messages.WireMessage.__subclasses__() if cls.spec.layer == "logical"}
    expected = (classes - {"Message"}) | {"Message(transactional)", "Message(non-transactional)"}
    assert events == expected
    targets = {target for target in decoder_module.TRANSITIONS.values()}
    assert targets == set(decoder_module.STATES)
    # every state can be left, and every non-idle state only by its closer (or staying)
    for state in decoder_module.STATES:
        assert any(s == state and t != state for (s, _), t in decoder_module.TRANSITIONS.items()) or state == "idle"


def test_the_state_diagram_is_drawn_from_the_table():
    svg = decoder_module.state_diagram_svg()
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    for state in decoder_module.STATES:
        assert f">{state}</text>" in svg
    for (state, event), target in decoder_module.TRANSITIONS.items():
        if state != target:
            assert event in svg
    assert svg.count("<line") == len({(s, t) for (s, _), t in decoder_module.TRANSITIONS.items() if s != t})


def test_bad_protocol_version_is_refused():
    with pytest.raises(ValueError):
        Decoder(proto_version=5)


def test_skipped_messages_count_in_the_positions_of_the_messages_after_them():
    """A reader that passes over row changes without feeding them (the first pass of split decoding) says
    how many; errors and the position of the opening message then name the right message."""
    dec = Decoder(proto_version=2)
    dec.feed(wire(BEGIN))
    assert dec.opened_at == 0
    dec.skip(5)  # five row changes read elsewhere
    assert dec.index == 6 and dec.state == "transaction"
    with pytest.raises(StreamStateError) as raised:
        dec.feed(wire(BEGIN))
    assert raised.value.index == 6 and "opened by message #0" in str(raised.value)
    with pytest.raises(ValueError):
        dec.skip(-1)
    assert dec.index == 6
