"""Building refuses invalid message objects with EncodeError, never dropping or truncating anything."""

import pytest

from replwire.codec import (
    LSN,
    Begin,
    BeginPrepare,
    Commit,
    Delete,
    EncodeError,
    Insert,
    Message,
    PrimaryKeepalive,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamStart,
    Truncate,
    TupleColumn,
    Update,
    build,
    build_envelope,
)

T = TupleColumn.text
NEW = [T("1")]


def begin(**overrides):
    values = dict(final_lsn=LSN("0/169E5A8"), commit_time=713876765625800, xid=787)
    values.update(overrides)
    return Begin(**values)


@pytest.mark.parametrize("message, ctx, field, reason", [
    (Insert(xid=5, relation_id=1, new=NEW), dict(proto_version=2), "xid", "absent unless in_stream"),
    (Insert(relation_id=1, new=NEW), dict(proto_version=2, in_stream=True), "xid", "a value is required"),
    (StreamAbort(xid=1, subxid=2, abort_lsn=10, abort_time=5), dict(proto_version=3), "abort_lsn",
     "absent unless proto_version >= 4"),
    (StreamAbort(xid=1, subxid=2, abort_lsn=10), dict(proto_version=4), "abort_time", "a value is required"),
    (StreamAbort(xid=1, subxid=2, abort_time=5), dict(proto_version=4), "abort_time", "absent unless"),
    (StreamStart(xid=1, first_segment=1), dict(proto_version=1), "tag", "exists from protocol version 2"),
    (BeginPrepare(prepare_lsn=1, end_lsn=2, prepare_time=3, xid=4, gid="g"), dict(proto_version=2), "tag",
     "exists from protocol version 3"),
    (Relation(relation_id=1, namespace="pub\0lic", name="t", replica_identity="d", columns=[]),
     dict(proto_version=1), "namespace", "cannot contain a NUL"),
    (Relation(relation_id=1, namespace="public", name="t", replica_identity="x", columns=[]),
     dict(proto_version=1), "replica_identity", "unknown replica identity 'x'"),
    (Relation(relation_id=1, namespace="public", name="t", replica_identity="d",
              columns=[RelationColumn(flags=0, name="a", type_id=23, type_modifier=-1),
                       RelationColumn(flags=0, name="b", type_id=2**32, type_modifier=-1)]),
     dict(proto_version=1), "columns[1].type_id", "out of range for unsigned 32-bit"),
    (Relation(relation_id=1, namespace="public", name="t", replica_identity="d", columns=[("a", 23)]),
     dict(proto_version=1), "columns[0]", "expected RelationColumn, got tuple"),
    (begin(xid=-1), dict(proto_version=1), "xid", "out of range"),
    (begin(final_lsn=2**64), dict(proto_version=1), "final_lsn", "out of range"),
    (begin(commit_time=2**63), dict(proto_version=1), "commit_time", "out of range for signed 64-bit"),
    (begin(xid="787"), dict(proto_version=1), "xid", "expected int, got str"),
    (begin(xid=True), dict(proto_version=1), "xid", "expected int, got bool"),
    (Commit(flags=1, commit_lsn=1, end_lsn=2, commit_time=3), dict(proto_version=1), "flags", "must be 0"),
    (Update(relation_id=1, key=NEW, old=NEW, new=NEW), dict(proto_version=1), "old", "absent unless key == None"),
    (Delete(relation_id=1), dict(proto_version=1), "old", "a value is required"),
    (Insert(relation_id=1, new=None), dict(proto_version=1), "new", "a value is required"),
    (Insert(relation_id=1, new=[TupleColumn(kind="n", data=b"x")]), dict(proto_version=1), "new[0].data",
     "absent unless (kind == 't') | (kind == 'b')"),
    (Insert(relation_id=1, new=[TupleColumn(kind="t", data=None)]), dict(proto_version=1), "new[0].data",
     "a value is required"),
    (Insert(relation_id=1, new=[T("a"), TupleColumn(kind="q", data=None)]), dict(proto_version=1),
     "new[1].kind", "unknown tuple column kind 'q'"),
    (Insert(relation_id=1, new=[TupleColumn(kind="t", data="text")]), dict(proto_version=1), "new[0].data",
     "expected bytes, got str"),
    (Insert(relation_id=1, new=[TupleColumn.null()] * 65536), dict(proto_version=1), "new",  # ncols is Int16
     "65536 items do not fit the Int16 count (at most 65535)"),
    (Relation(relation_id=1, namespace="public", name="t", replica_identity="d",
              columns=[RelationColumn(flags=0, name="a", type_id=23, type_modifier=-1)] * 65536),
     dict(proto_version=1), "columns", "65536 items do not fit the Int16 count (at most 65535)"),
    (Truncate(options=0, relation_ids=[1, -2]), dict(proto_version=1), "relation_ids[1]", "out of range"),
    (Message(flags=1, lsn=1, prefix="p", content="text"), dict(proto_version=1), "content", "expected bytes"),
])
def test_build_refuses(message, ctx, field, reason):
    with pytest.raises(EncodeError) as caught:
        build(message, **ctx)
    assert caught.value.field == field
    assert reason in caught.value.reason
    assert caught.value.message == type(message).__name__


def test_build_refuses_non_messages():
    with pytest.raises(EncodeError, match="expected a pgoutput message object, got bytes"):
        build(b"B", proto_version=1)
    with pytest.raises(EncodeError, match="expected a pgoutput message object, got PrimaryKeepalive"):
        build(PrimaryKeepalive(wal_end=1, send_time=2, reply_requested=0), proto_version=1)
    with pytest.raises(EncodeError, match="expected an envelope message object, got Begin"):
        build_envelope(begin())


@pytest.mark.parametrize("ctx, match", [
    (dict(proto_version=0), "proto_version must be an int from 1 to 4"),
    (dict(proto_version=5), "proto_version must be an int from 1 to 4"),
    (dict(proto_version="2"), "proto_version must be an int"),
    (dict(proto_version=1, in_stream=True), "in_stream=True needs proto_version 2"),
    (dict(proto_version=2, in_stream=1), "in_stream must be True or False"),
])
def test_context_is_checked(ctx, match):
    with pytest.raises(ValueError, match=match):
        build(begin(), **ctx)


def test_counts_are_derived_not_supplied():
    message = Truncate(options=1, relation_ids=[16385, 16386, 16387])
    data = build(message, proto_version=1)
    assert data[1:5] == (3).to_bytes(4, "big")
    assert not hasattr(message, "num_relations")
