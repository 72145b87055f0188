"""The yardstick: a plain hand-written pgoutput decoder and encoder, with ``struct`` and nothing else.

It is what a careful programmer writes by hand for speed: one function per message, precompiled
``struct`` formats read at integer offsets of the input ``bytes`` (one call per run of fixed fields), one
small ``__slots__`` object per message and one per tuple column, LSNs and timestamps left as plain ints,
Strings decoded from UTF-8.  It checks nothing beyond what ``struct`` and ``bytes.decode`` check on their
own: no trailing bytes, no must-be-zero flags, no marker or kind validation, no protocol-version gates.
The benchmark's ratios are measured against it.

Strategy: ``parse(data, proto_version, in_stream)`` dispatches on the tag byte through a dict of
functions; ``build(message, proto_version, in_stream)`` on the object's class.  Written by hand, not
derived from replwire's declarations, so it is an independent reference point (and does not share
replwire's mistakes).
"""

from __future__ import annotations

import struct

_L = struct.Struct(">L").unpack_from
_Q = struct.Struct(">Q").unpack_from
_LBH = struct.Struct(">LBH").unpack_from
_QqL = struct.Struct(">QqL").unpack_from
_BQQq = struct.Struct(">BQQq").unpack_from
_QQq = struct.Struct(">QQq").unpack_from
_QQqL = struct.Struct(">QQqL").unpack_from
_BQQqL = struct.Struct(">BQQqL").unpack_from
_BQQqqL = struct.Struct(">BQQqqL").unpack_from
_LB = struct.Struct(">LB").unpack_from
_LL = struct.Struct(">LL").unpack_from
_LBQQq = struct.Struct(">LBQQq").unpack_from
_LLQq = struct.Struct(">LLQq").unpack_from
_BQ = struct.Struct(">BQ").unpack_from
_QqB = struct.Struct(">QqB").unpack_from

_pB = struct.Struct(">B").pack
_pBL = struct.Struct(">BL").pack
_pBLBH = struct.Struct(">BLBH").pack
_pBLLBH = struct.Struct(">BLLBH").pack
_pL = struct.Struct(">L").pack
_pLl = struct.Struct(">Ll").pack
_pBQqL = struct.Struct(">BQqL").pack
_pBBQQq = struct.Struct(">BBQQq").pack
_pBQ = struct.Struct(">BQ").pack
_pBLBQQq = struct.Struct(">BLBQQq").pack
_pBLL_ = struct.Struct(">BLL").pack
_pBLLQq = struct.Struct(">BLLQq").pack
_pBQQqL = struct.Struct(">BQQqL").pack
_pBBQQqL = struct.Struct(">BBQQqL").pack
_pBBQQqqL = struct.Struct(">BBQQqqL").pack
_pBQQq_ = struct.Struct(">BQQq").pack
_pBQqB = struct.Struct(">BQqB").pack


# ---------------------------------------------------------------------------------------------------------
# the objects


class Column:
    __slots__ = ("kind", "data")

    def __init__(self, kind, data):
        self.kind = kind
        self.data = data


class RelationColumn:
    __slots__ = ("flags", "name", "type_id", "type_modifier")

    def __init__(self, flags, name, type_id, type_modifier):
        self.flags = flags
        self.name = name
        self.type_id = type_id
        self.type_modifier = type_modifier


class Begin:
    __slots__ = ("final_lsn", "commit_time", "xid")

    def __init__(self, final_lsn, commit_time, xid):
        self.final_lsn = final_lsn
        self.commit_time = commit_time
        self.xid = xid


class Commit:
    __slots__ = ("flags", "commit_lsn", "end_lsn", "commit_time")

    def __init__(self, flags, commit_lsn, end_lsn, commit_time):
        self.flags = flags
        self.commit_lsn = commit_lsn
        self.end_lsn = end_lsn
        self.commit_time = commit_time


class Origin:
    __slots__ = ("origin_lsn", "name")

    def __init__(self, origin_lsn, name):
        self.origin_lsn = origin_lsn
        self.name = name


class Relation:
    __slots__ = ("xid", "relation_id", "namespace", "name", "replica_identity", "columns")

    def __init__(self, xid, relation_id, namespace, name, replica_identity, columns):
        self.xid = xid
        self.relation_id = relation_id
        self.namespace = namespace
        self.name = name
        self.replica_identity = replica_identity
        self.columns = columns


class Type:
    __slots__ = ("xid", "type_id", "namespace", "name")

    def __init__(self, xid, type_id, namespace, name):
        self.xid = xid
        self.type_id = type_id
        self.namespace = namespace
        self.name = name


class Insert:
    __slots__ = ("xid", "relation_id", "new")

    def __init__(self, xid, relation_id, new):
        self.xid = xid
        self.relation_id = relation_id
        self.new = new


class Update:
    __slots__ = ("xid", "relation_id", "key", "old", "new")

    def __init__(self, xid, relation_id, key, old, new):
        self.xid = xid
        self.relation_id = relation_id
        self.key = key
        self.old = old
        self.new = new


class Delete:
    __slots__ = ("xid", "relation_id", "key", "old")

    def __init__(self, xid, relation_id, key, old):
        self.xid = xid
        self.relation_id = relation_id
        self.key = key
        self.old = old


class Truncate:
    __slots__ = ("xid", "options", "relation_ids")

    def __init__(self, xid, options, relation_ids):
        self.xid = xid
        self.options = options
        self.relation_ids = relation_ids


class Message:
    __slots__ = ("xid", "flags", "lsn", "prefix", "content")

    def __init__(self, xid, flags, lsn, prefix, content):
        self.xid = xid
        self.flags = flags
        self.lsn = lsn
        self.prefix = prefix
        self.content = content


class StreamStart:
    __slots__ = ("xid", "first_segment")

    def __init__(self, xid, first_segment):
        self.xid = xid
        self.first_segment = first_segment


class StreamStop:
    __slots__ = ()


class StreamCommit:
    __slots__ = ("xid", "flags", "commit_lsn", "end_lsn", "commit_time")

    def __init__(self, xid, flags, commit_lsn, end_lsn, commit_time):
        self.xid = xid
        self.flags = flags
        self.commit_lsn = commit_lsn
        self.end_lsn = end_lsn
        self.commit_time = commit_time


class StreamAbort:
    __slots__ = ("xid", "subxid", "abort_lsn", "abort_time")

    def __init__(self, xid, subxid, abort_lsn, abort_time):
        self.xid = xid
        self.subxid = subxid
        self.abort_lsn = abort_lsn
        self.abort_time = abort_time


class TwoPhase:
    """Begin Prepare (flags None), Prepare, Commit Prepared, Stream Prepare: ``tag`` tells them apart."""

    __slots__ = ("tag", "flags", "lsn", "end_lsn", "time", "xid", "gid")

    def __init__(self, tag, flags, lsn, end_lsn, time, xid, gid):
        self.tag = tag
        self.flags = flags
        self.lsn = lsn
        self.end_lsn = end_lsn
        self.time = time
        self.xid = xid
        self.gid = gid


class RollbackPrepared:
    __slots__ = ("flags", "prepare_end_lsn", "rollback_end_lsn", "prepare_time", "rollback_time", "xid", "gid")

    def __init__(self, flags, prepare_end_lsn, rollback_end_lsn, prepare_time, rollback_time, xid, gid):
        self.flags = flags
        self.prepare_end_lsn = prepare_end_lsn
        self.rollback_end_lsn = rollback_end_lsn
        self.prepare_time = prepare_time
        self.rollback_time = rollback_time
        self.xid = xid
        self.gid = gid


class XLogData:
    __slots__ = ("data_start", "wal_end", "send_time", "data")

    def __init__(self, data_start, wal_end, send_time, data):
        self.data_start = data_start
        self.wal_end = wal_end
        self.send_time = send_time
        self.data = data


class PrimaryKeepalive:
    __slots__ = ("wal_end", "send_time", "reply_requested")

    def __init__(self, wal_end, send_time, reply_requested):
        self.wal_end = wal_end
        self.send_time = send_time
        self.reply_requested = reply_requested


# ---------------------------------------------------------------------------------------------------------
# parsing


def _columns(buf, p, count):
    columns = []
    append = columns.append
    for _ in range(count):
        kind = buf[p]
        if kind == 116:
            (size,) = _L(buf, p + 1)
            p += 5
            append(Column("t", buf[p:p + size]))
            p += size
        elif kind == 110:
            append(Column("n", None))
            p += 1
        elif kind == 117:
            append(Column("u", None))
            p += 1
        else:
            (size,) = _L(buf, p + 1)
            p += 5
            append(Column("b", buf[p:p + size]))
            p += size
    return columns, p


def _string(buf, p):
    end = buf.index(0, p)
    return buf[p:end].decode(), end + 1


def _begin(buf, ins):
    final_lsn, commit_time, xid = _QqL(buf, 1)
    return Begin(final_lsn, commit_time, xid)


def _commit(buf, ins):
    flags, commit_lsn, end_lsn, commit_time = _BQQq(buf, 1)
    return Commit(flags, commit_lsn, end_lsn, commit_time)


def _origin(buf, ins):
    (lsn,) = _Q(buf, 1)
    name, _ = _string(buf, 9)
    return Origin(lsn, name)


def _relation(buf, ins):
    xid = None
    p = 1
    if ins:
        (xid,) = _L(buf, 1)
        p = 5
    (relation_id,) = _L(buf, p)
    namespace, p = _string(buf, p + 4)
    name, p = _string(buf, p)
    replica_identity = chr(buf[p])
    (count,) = struct.unpack_from(">H", buf, p + 1)
    p += 3
    columns = []
    for _ in range(count):
        flags = buf[p]
        column, p = _string(buf, p + 1)
        type_id, type_modifier = struct.unpack_from(">Ll", buf, p)
        p += 8
        columns.append(RelationColumn(flags, column, type_id, type_modifier))
    return Relation(xid, relation_id, namespace, name, replica_identity, columns)


def _type(buf, ins):
    xid = None
    p = 1
    if ins:
        (xid,) = _L(buf, 1)
        p = 5
    (type_id,) = _L(buf, p)
    namespace, p = _string(buf, p + 4)
    name, p = _string(buf, p)
    return Type(xid, type_id, namespace, name)


def _insert(buf, ins):
    xid = None
    p = 1
    if ins:
        (xid,) = _L(buf, 1)
        p = 5
    relation_id, _, count = _LBH(buf, p)
    new, p = _columns(buf, p + 7, count)
    return Insert(xid, relation_id, new)


def _update(buf, ins):
    xid = None
    p = 1
    if ins:
        (xid,) = _L(buf, 1)
        p = 5
    relation_id, marker = _LB(buf, p)
    p += 5
    key = old = None
    if marker == 75 or marker == 79:
        (count,) = struct.unpack_from(">H", buf, p)
        image, p = _columns(buf, p + 2, count)
        if marker == 75:
            key = image
        else:
            old = image
        p += 1  # the 'N'
    (count,) = struct.unpack_from(">H", buf, p)
    new, p = _columns(buf, p + 2, count)
    return Update(xid, relation_id, key, old, new)


def _delete(buf, ins):
    xid = None
    p = 1
    if ins:
        (xid,) = _L(buf, 1)
        p = 5
    relation_id, marker, count = _LBH(buf, p)
    image, p = _columns(buf, p + 7, count)
    if marker == 75:
        return Delete(xid, relation_id, image, None)
    return Delete(xid, relation_id, None, image)


def _truncate(buf, ins):
    xid = None
    p = 1
    if ins:
        (xid,) = _L(buf, 1)
        p = 5
    count, options = _LB(buf, p)
    ids = list(struct.unpack_from(">%dL" % count, buf, p + 5))
    return Truncate(xid, options, ids)


def _message(buf, ins):
    xid = None
    p = 1
    if ins:
        (xid,) = _L(buf, 1)
        p = 5
    flags, lsn = _BQ(buf, p)
    prefix, p = _string(buf, p + 9)
    (size,) = _L(buf, p)
    return Message(xid, flags, lsn, prefix, buf[p + 4:p + 4 + size])


def _stream_start(buf, ins):
    xid, first = _LB(buf, 1)
    return StreamStart(xid, first)


def _stream_stop(buf, ins):
    return StreamStop()


def _stream_commit(buf, ins):
    xid, flags, commit_lsn, end_lsn, commit_time = _LBQQq(buf, 1)
    return StreamCommit(xid, flags, commit_lsn, end_lsn, commit_time)


def _stream_abort(buf, ins):
    if len(buf) > 9:
        xid, subxid, lsn, time = _LLQq(buf, 1)
        return StreamAbort(xid, subxid, lsn, time)
    xid, subxid = _LL(buf, 1)
    return StreamAbort(xid, subxid, None, None)


def _begin_prepare(buf, ins):
    lsn, end_lsn, time, xid = _QQqL(buf, 1)
    gid, _ = _string(buf, 29)
    return TwoPhase("b", None, lsn, end_lsn, time, xid, gid)


def _prepare_like(tag):
    def parse(buf, ins):
        flags, lsn, end_lsn, time, xid = _BQQqL(buf, 1)
        gid, _ = _string(buf, 30)
        return TwoPhase(tag, flags, lsn, end_lsn, time, xid, gid)
    return parse


def _rollback_prepared(buf, ins):
    flags, end_lsn, rollback_end_lsn, prepare_time, rollback_time, xid = _BQQqqL(buf, 1)
    gid, _ = _string(buf, 38)
    return RollbackPrepared(flags, end_lsn, rollback_end_lsn, prepare_time, rollback_time, xid, gid)


_PARSERS = {
    66: _begin, 67: _commit, 79: _origin, 82: _relation, 89: _type, 73: _insert, 85: _update, 68: _delete,
    84: _truncate, 77: _message, 83: _stream_start, 69: _stream_stop, 99: _stream_commit, 65: _stream_abort,
    98: _begin_prepare, 80: _prepare_like("P"), 75: _prepare_like("K"), 114: _rollback_prepared,
    112: _prepare_like("p"),
}


def parse(data, proto_version, in_stream):
    """Decode one pgoutput message."""
    return _PARSERS[data[0]](data, in_stream)


def parse_envelope(data):
    """Decode one server CopyData payload (XLogData or keepalive)."""
    if data[0] == 119:
        data_start, wal_end, send_time = _QQq(data, 1)
        return XLogData(data_start, wal_end, send_time, data[25:])
    return PrimaryKeepalive(*_QqB(data, 1))


# ---------------------------------------------------------------------------------------------------------
# building


def _tuple(parts, columns):
    append = parts.append
    for c in columns:
        kind = c.kind
        if kind == "t":
            append(_pBL(116, len(c.data)))
            append(c.data)
        elif kind == "n":
            append(b"n")
        elif kind == "u":
            append(b"u")
        else:
            append(_pBL(98, len(c.data)))
            append(c.data)


def _with_xid(tag, m, ins):
    return _pBL(tag, m.xid) if ins else _pB(tag)


def _build_begin(m, ins):
    return _pBQqL(66, m.final_lsn, m.commit_time, m.xid)


def _build_commit(m, ins):
    return _pBBQQq(67, 0, m.commit_lsn, m.end_lsn, m.commit_time)


def _build_origin(m, ins):
    return _pBQ(79, m.origin_lsn) + m.name.encode() + b"\0"


def _build_relation(m, ins):
    parts = [_with_xid(82, m, ins), _pL(m.relation_id), m.namespace.encode(), b"\0", m.name.encode(), b"\0",
             struct.pack(">BH", ord(m.replica_identity), len(m.columns))]
    for c in m.columns:
        parts.append(_pB(c.flags))
        parts.append(c.name.encode())
        parts.append(b"\0")
        parts.append(_pLl(c.type_id, c.type_modifier))
    return b"".join(parts)


def _build_type(m, ins):
    return b"".join((_with_xid(89, m, ins), _pL(m.type_id), m.namespace.encode(), b"\0", m.name.encode(), b"\0"))


def _build_insert(m, ins):
    if ins:
        parts = [_pBLLBH(73, m.xid, m.relation_id, 78, len(m.new))]
    else:
        parts = [_pBLBH(73, m.relation_id, 78, len(m.new))]
    _tuple(parts, m.new)
    return b"".join(parts)


def _build_update(m, ins):
    parts = [_with_xid(85, m, ins), _pL(m.relation_id)]
    for marker, image in ((b"K", m.key), (b"O", m.old)):
        if image is not None:
            parts.append(marker + struct.pack(">H", len(image)))
            _tuple(parts, image)
    parts.append(b"N" + struct.pack(">H", len(m.new)))
    _tuple(parts, m.new)
    return b"".join(parts)


def _build_delete(m, ins):
    marker, image = (b"K", m.key) if m.key is not None else (b"O", m.old)
    parts = [_with_xid(68, m, ins), _pL(m.relation_id), marker, struct.pack(">H", len(image))]
    _tuple(parts, image)
    return b"".join(parts)


def _build_truncate(m, ins):
    ids = m.relation_ids
    return b"".join((_with_xid(84, m, ins), struct.pack(">LB", len(ids), m.options),
                     struct.pack(">%dL" % len(ids), *ids)))


def _build_message(m, ins):
    return b"".join((_with_xid(77, m, ins), struct.pack(">BQ", m.flags, m.lsn), m.prefix.encode(), b"\0",
                     _pL(len(m.content)), m.content))


def _build_stream_start(m, ins):
    return struct.pack(">BLB", 83, m.xid, m.first_segment)


def _build_stream_stop(m, ins):
    return b"E"


def _build_stream_commit(m, ins):
    return _pBLBQQq(99, m.xid, 0, m.commit_lsn, m.end_lsn, m.commit_time)


def _build_stream_abort(m, ins):
    if m.abort_lsn is None:
        return _pBLL_(65, m.xid, m.subxid)
    return _pBLLQq(65, m.xid, m.subxid, m.abort_lsn, m.abort_time)


def _build_two_phase(m, ins):
    if m.flags is None:
        head = _pBQQqL(98, m.lsn, m.end_lsn, m.time, m.xid)
    else:
        head = _pBBQQqL(ord(m.tag), m.flags, m.lsn, m.end_lsn, m.time, m.xid)
    return head + m.gid.encode() + b"\0"


def _build_rollback_prepared(m, ins):
    return _pBBQQqqL(114, m.flags, m.prepare_end_lsn, m.rollback_end_lsn, m.prepare_time, m.rollback_time,
                     m.xid) + m.gid.encode() + b"\0"


_BUILDERS = {
    Begin: _build_begin, Commit: _build_commit, Origin: _build_origin, Relation: _build_relation,
    Type: _build_type, Insert: _build_insert, Update: _build_update, Delete: _build_delete,
    Truncate: _build_truncate, Message: _build_message, StreamStart: _build_stream_start,
    StreamStop: _build_stream_stop, StreamCommit: _build_stream_commit, StreamAbort: _build_stream_abort,
    TwoPhase: _build_two_phase, RollbackPrepared: _build_rollback_prepared,
}


def build(message, proto_version, in_stream):
    """Encode one pgoutput message."""
    return _BUILDERS[message.__class__](message, in_stream)


def build_envelope(message):
    """Encode one server CopyData payload."""
    if message.__class__ is XLogData:
        return _pBQQq_(119, message.data_start, message.wal_end, message.send_time) + message.data
    return _pBQqB(107, message.wal_end, message.send_time, message.reply_requested)
