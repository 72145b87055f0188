"""Every message captured from real PostgreSQL 14 to 18 servers parses to the right class, builds back to
the identical bytes, and means what an independent source says it means:

* tuple values and the order of changes in every committed transaction: the server's own ``test_decoding``
  output for the same WAL (binary ``b`` values: the type's send function applied by the server to
  test_decoding's text);
* Relation and Type messages: ``pg_class``, ``pg_attribute``, ``pg_index`` and ``pg_type``;
* commit times: ``pg_xact_commit_timestamp``; Commit end LSNs and Message LSNs: the SQL rows' ``lsn``;
* Message contents: what ``pg_logical_emit_message`` was given and returned;
* envelope frames: read raw from a walsender, and our own Standby status update accepted by it.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest

from replwire.codec import (
    LSN,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    HotStandbyFeedback,
    Insert,
    Message,
    Prepare,
    PrimaryKeepalive,
    Relation,
    RollbackPrepared,
    StandbyStatusUpdate,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Timestamp,
    Truncate,
    Type,
    Update,
    XLogData,
    build,
    build_envelope,
    parse,
    parse_envelope,
)
from tests.conftest import ALL_IDS, ALL_MAJORS
from tests.support.capture import UNCHANGED_TOAST, max_proto_version, parse_test_decoding
from tests.support.testdecoding import (
    Binary,
    check_binary_values,
    compare_values,
    leaf_to_root_map,
    published_changes,
    published_only,
    td_transactions,
)
from tests.support.walsender import WalSender, pgoutput_slot

pytestmark = pytest.mark.server

# The checks whose meaning is the same on every major also run on PostgreSQL 14, 16 and 17 (a capture of each
# takes about a second).  Two-phase messages and the walsender captures start at 15.
every_major = pytest.mark.parametrize("pg_captures", ALL_MAJORS, ids=ALL_IDS, indirect=True)
from_15 = pytest.mark.parametrize("pg_captures", [m for m in ALL_MAJORS if m >= 15],
                                  ids=[i for m, i in zip(ALL_MAJORS, ALL_IDS) if m >= 15], indirect=True)


@dataclass(frozen=True)
class Decoded:
    lsn: str
    row_xid: int
    data: bytes
    message: Any
    in_stream: bool


def decode(proto_version: int, payloads) -> list[tuple[bytes, Any, bool]]:
    """Parse a sequence of pgoutput messages, tracking the Stream Start...Stop state as a consumer must."""
    in_stream = False
    out = []
    for data in payloads:
        message = parse(data, proto_version=proto_version, in_stream=in_stream)
        out.append((data, message, in_stream))
        if isinstance(message, StreamStart):
            in_stream = True
        elif isinstance(message, StreamStop):
            in_stream = False
    assert not in_stream, "the capture ended inside a stream block"
    return out


_DECODED: dict[int, tuple[Any, list[Decoded]]] = {}


def decoded_rows(capture) -> list[Decoded]:
    """The capture's rows, parsed (once per session: the captures live as long as the servers)."""
    cached = _DECODED.get(id(capture))
    if cached is None or cached[0] is not capture:
        parsed = decode(capture.proto_version, [data for _, _, data in capture.rows])
        cached = _DECODED[id(capture)] = (capture, [Decoded(lsn, xid, data, message, in_stream)
                                                    for (lsn, xid, _), (data, message, in_stream)
                                                    in zip(capture.rows, parsed)])
    return cached[1]


@every_major
def test_every_captured_message_round_trips(pg_captures):
    counts = Counter()
    for capture in pg_captures.captures:
        for row in decoded_rows(capture):
            assert row.message.tag == chr(row.data[0])
            rebuilt = build(row.message, proto_version=capture.proto_version, in_stream=row.in_stream)
            assert rebuilt == row.data, (capture.config, row.message)
            counts[capture.proto_version] += 1
    # every protocol version the server supports was captured, each with real traffic
    expected_versions = set(range(1, max_proto_version(pg_captures.version_num) + 1))
    assert set(counts) == expected_versions
    assert min(counts.values()) > 100


@from_15
def test_captures_cover_every_message_and_variant(pg_captures):
    seen = set()
    for capture in pg_captures.captures:
        for row in decoded_rows(capture):
            m = row.message
            seen.add(type(m).__name__)
            if getattr(m, "xid", None) is not None and row.in_stream:
                seen.add(f"{type(m).__name__}+xid")
            if isinstance(m, (Insert, Update, Delete)):
                for name in ("key", "old", "new"):
                    columns = getattr(m, name, None)
                    if columns is not None:
                        seen.add(f"{type(m).__name__}.{name}")
                        seen.update(f"kind:{c.kind}" for c in columns)
            if isinstance(m, Update) and m.key is None and m.old is None:
                seen.add("Update.no_old")
            if isinstance(m, StreamAbort):
                seen.add(f"StreamAbort.{'tail' if m.abort_lsn is not None else 'short'}")
                seen.add(f"StreamAbort.{'sub' if m.is_subtransaction else 'top'}" if pg_captures.major == 15 else "")
    for name in ["Begin", "Commit", "Origin", "Relation", "Type", "Insert", "Update", "Delete", "Truncate",
                 "Message", "StreamStart", "StreamStop", "StreamCommit", "StreamAbort", "BeginPrepare", "Prepare",
                 "CommitPrepared", "RollbackPrepared", "StreamPrepare", "Relation+xid", "Type+xid", "Insert+xid",
                 "Update+xid", "Delete+xid", "Truncate+xid", "Message+xid", "Update.key", "Update.old",
                 "Update.new", "Update.no_old", "Delete.key", "Delete.old", "kind:n", "kind:u", "kind:t", "kind:b",
                 "StreamAbort.short"]:
        assert name in seen, name
    if pg_captures.major >= 16:
        assert "StreamAbort.tail" in seen
    else:
        assert {"StreamAbort.sub", "StreamAbort.top"} <= seen


# ---------------------------------------------------------------------------------------------------------
# tuple values and change order against test_decoding


def table_name(relation: Relation) -> str:
    return f"{relation.namespace or 'pg_catalog'}.{relation.name}"


def columns(relation: Relation, tuple_columns, *, drop_nulls: bool = False):
    assert len(tuple_columns) == len(relation.columns), "tuple width differs from its Relation"
    out = []
    for meta, column in zip(relation.columns, tuple_columns):
        if column.kind == "n":
            if not drop_nulls:
                out.append((meta.name, None))
        elif column.kind == "u":
            out.append((meta.name, UNCHANGED_TOAST))
        elif column.kind == "t":
            out.append((meta.name, column.data.decode("utf-8")))
        else:
            out.append((meta.name, Binary(meta.type_id, meta.type_modifier, column.data)))
    return tuple(out)


def pgoutput_transactions(rows: list[Decoded]):
    """Committed transactions (xid -> changes in order) and non-transactional messages, assembled from the
    messages alone: streamed blocks buffered per top-level xid, aborted (sub)transactions dropped, prepared
    transactions held until COMMIT PREPARED."""
    relations: dict[int, Relation] = {}
    committed: dict[int, list] = {}
    loose_messages = []
    current: list | None = None
    current_xid = None
    streams: dict[int, list] = {}
    stream_xid = None
    prepared: dict[str, tuple[int, list]] = {}
    for row in rows:
        m = row.message
        if isinstance(m, Relation):
            relations[m.relation_id] = m
        elif isinstance(m, (Begin, BeginPrepare)):
            current, current_xid = [], m.xid
        elif isinstance(m, Commit):
            committed[current_xid] = current
            current = None
        elif isinstance(m, Prepare):
            prepared[m.gid] = (m.xid, current)
            current = None
        elif isinstance(m, CommitPrepared):
            xid, changes = prepared.pop(m.gid)
            committed[xid] = changes
        elif isinstance(m, RollbackPrepared):
            prepared.pop(m.gid, None)
        elif isinstance(m, StreamStart):
            stream_xid = m.xid
            streams.setdefault(m.xid, [])
        elif isinstance(m, StreamCommit):
            committed[m.xid] = [change for _, change in streams.pop(m.xid)]
        elif isinstance(m, StreamPrepare):
            prepared[m.gid] = (m.xid, [change for _, change in streams.pop(m.xid)])
        elif isinstance(m, StreamAbort):
            if m.subxid == m.xid:
                streams.pop(m.xid, None)
            else:
                streams[m.xid] = [(sub, c) for sub, c in streams.get(m.xid, []) if sub != m.subxid]
        else:
            change = None
            if isinstance(m, Insert):
                rel = relations[m.relation_id]
                change = ("INSERT", table_name(rel), None, columns(rel, m.new))
            elif isinstance(m, Update):
                rel = relations[m.relation_id]
                before = m.key if m.key is not None else m.old
                change = ("UPDATE", table_name(rel), None if before is None else columns(rel, before, drop_nulls=True),
                          columns(rel, m.new))
            elif isinstance(m, Delete):
                rel = relations[m.relation_id]
                before = m.key if m.key is not None else m.old
                change = ("DELETE", table_name(rel), columns(rel, before, drop_nulls=True), None)
            elif isinstance(m, Truncate):
                names = tuple(sorted(table_name(relations[r]) for r in m.relation_ids))
                change = ("TRUNCATE", names, m.cascade, m.restart_identity)
            elif isinstance(m, Message):
                change = ("MESSAGE", m.prefix, m.content, m.is_transactional)
                if not m.is_transactional:
                    assert not row.in_stream and current is None
                    loose_messages.append(change)
                    continue
            if change is None:
                continue
            if row.in_stream:
                streams[stream_xid].append((m.xid, change))
            else:
                assert current is not None, f"{type(m).__name__} outside a transaction"
                current.append(change)
    assert not streams and current is None
    return committed, loose_messages


@every_major
def test_tuple_values_and_order_match_test_decoding(pg_captures, server):
    records = parse_test_decoding(pg_captures.test_decoding)
    checked_changes = checked_binary = 0
    with server.connect() as conn:
        root_map = leaf_to_root_map(conn)
        for capture in pg_captures.captures:
            via_root = "root" in capture.config  # read through the publish_via_partition_root publication
            pg_committed, pg_loose = pgoutput_transactions(decoded_rows(capture))
            td_committed, td_loose = td_transactions(records, leaf_to_root=root_map if via_root else {})
            published = published_changes(conn, capture.options["publication_names"])
            skip_xids = set()
            if capture.options.get("origin") == "none":
                skip_xids = {xid for step, xid in pg_captures.facts["xids"].items() if step.startswith("origin")}
            messages_on = capture.options.get("messages") == "true"
            pending = []
            for xid in sorted(set(td_committed) | set(pg_committed)):
                td_changes = [c if c[0] == "MESSAGE" else published_only(c, published)
                              for c in td_committed.get(xid, []) if c[0] != "MESSAGE" or messages_on]
                td_changes = [c for c in td_changes if c is not None]
                if xid in skip_xids:
                    assert xid not in pg_committed, f"{capture.config}: origin 'none' transaction {xid} was sent"
                    continue
                if not td_changes and xid not in pg_committed:
                    continue
                pg_changes = pg_committed.get(xid)
                assert pg_changes is not None, f"{capture.config}: transaction {xid} missing"
                assert len(pg_changes) == len(td_changes), (capture.config, xid)
                for pg_change, td_change in zip(pg_changes, td_changes):
                    compare_values(pg_change, td_change, pending)
                checked_changes += len(pg_changes)
            if messages_on:
                assert pg_loose == td_loose, capture.config
            else:
                assert pg_loose == []
            checked_binary += check_binary_values(conn, pending)
    assert checked_changes > 1000 and checked_binary > 50, (checked_changes, checked_binary)


# ---------------------------------------------------------------------------------------------------------
# schema messages against the catalogs


@every_major
def test_relation_messages_match_the_catalog(pg_captures, server):
    last: dict[int, Relation] = {}
    for capture in pg_captures.captures:
        for row in decoded_rows(capture):
            if isinstance(row.message, Relation):
                last[row.message.relation_id] = row.message
    assert len(last) >= 8
    with server.connect() as conn:
        for relation_id, rel in last.items():
            namespace, name, replident = conn.execute(
                "SELECT n.nspname, c.relname, c.relreplident FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s", (relation_id,)).fetchone()
            assert (rel.namespace, rel.name, rel.replica_identity) == (namespace, name, replident)
            attributes = conn.execute(
                "SELECT attname, atttypid::int, atttypmod FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped AND attgenerated = '' ORDER BY attnum", (relation_id,)).fetchall()
            assert [(c.name, c.type_id, c.type_modifier) for c in rel.columns] == attributes
            if replident == "f":
                key = {a for a, _, _ in attributes}
            elif replident == "n":
                key = set()
            else:
                which = "indisprimary" if replident == "d" else "indisreplident"
                key = {r[0] for r in conn.execute(
                    f"SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                    f"AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.{which}", (relation_id,))}
            assert {c.name for c in rel.columns if c.is_key} == key, rel.name


@every_major
def test_type_messages_match_pg_type(pg_captures, server):
    types = {}
    for capture in pg_captures.captures:
        for row in decoded_rows(capture):
            if isinstance(row.message, Type):
                types[row.message.type_id] = row.message
    assert len(types) >= 3
    with server.connect() as conn:
        for type_id, message in types.items():
            base = conn.execute("SELECT CASE WHEN typtype = 'd' THEN typbasetype ELSE oid END FROM pg_type "
                                "WHERE oid = %s", (type_id,)).fetchone()[0]
            namespace, name = conn.execute(
                "SELECT CASE WHEN n.nspname = 'pg_catalog' THEN '' ELSE n.nspname END, t.typname FROM pg_type t "
                "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s", (base,)).fetchone()
            assert (message.namespace, message.name) == (namespace, name)
        domains = conn.execute("SELECT count(*) FROM pg_type WHERE typtype = 'd' AND oid = ANY(%s)",
                               (list(types),)).fetchone()[0]
        assert domains >= 1  # the domain's Type message names its base type


# ---------------------------------------------------------------------------------------------------------
# times, LSNs and logical messages


@every_major
def test_commit_times_and_lsns(pg_captures, server):
    commits = {}  # xid -> commit_time from the message stream
    checked_rows = 0
    for capture in pg_captures.captures:
        begin = None
        for row in decoded_rows(capture):
            m = row.message
            if isinstance(m, Begin):
                begin = m
                commits.setdefault(m.xid, set()).add(m.commit_time)
            elif isinstance(m, Commit):
                assert m.commit_lsn == begin.final_lsn and m.commit_time == begin.commit_time
                assert LSN(row.lsn) == m.end_lsn  # the SQL row of a Commit is at its end LSN
                checked_rows += 1
            elif isinstance(m, (StreamCommit, CommitPrepared)):
                commits.setdefault(m.xid, set()).add(m.commit_time)
            elif isinstance(m, Message):
                assert LSN(row.lsn) == m.lsn
                checked_rows += 1
    with server.connect() as conn:
        for xid, times in commits.items():
            (server_time,) = conn.execute("SELECT pg_xact_commit_timestamp(%s::text::xid)", (str(xid),)).fetchone()
            assert times == {Timestamp(server_time)}, xid
    assert len(commits) > 10 and checked_rows > 50


@every_major
def test_messages_match_what_was_emitted(pg_captures):
    emitted = [m for m in pg_captures.facts["messages"] if not m.get("rolled_back")]
    for capture in pg_captures.captures:
        if capture.options.get("messages") != "true":
            continue
        seen = [row.message for row in decoded_rows(capture) if isinstance(row.message, Message)]
        by_lsn = {m.lsn: m for m in seen}
        for fact in emitted:
            if capture.options.get("origin") == "none" and fact.get("origin"):
                continue
            message = by_lsn.get(LSN(fact["lsn"]))
            if message is None and not fact["transactional"]:
                pytest.fail(f"{capture.config}: non-transactional message {fact['name']} missing")
            if message is None:
                continue  # transactional in an aborted transaction, or streamed and aborted
            assert message.prefix == fact["prefix"]
            assert message.content == fact["content"]
            assert message.is_transactional == fact["transactional"]
        assert {m.lsn for m in seen} <= {LSN(f["lsn"]) for f in pg_captures.facts["messages"]}


# ---------------------------------------------------------------------------------------------------------
# the envelope, over a real walsender


@from_15
def test_walsender_frames_round_trip(pg_captures):
    assert pg_captures.walsender
    for capture in pg_captures.walsender:
        keepalives = xlog = 0
        payloads = []
        for frame in capture.frames:
            message = parse_envelope(frame, sender="server")
            assert build_envelope(message) == frame
            if isinstance(message, XLogData):
                xlog += 1
                assert message.data_start == message.wal_end
                payloads.append(message.data)
            else:
                assert isinstance(message, PrimaryKeepalive)
                keepalives += 1
        for data, message, in_stream in decode(capture.proto_version, payloads):
            assert build(message, proto_version=capture.proto_version, in_stream=in_stream) == data
        assert xlog > 100 and keepalives >= 1


@pytest.mark.parametrize("pg_server", ALL_MAJORS, ids=ALL_IDS, indirect=True)
def test_built_client_messages_are_accepted_by_the_server(pg_server):
    slot = "rw_client_messages"
    with pg_server.connect() as conn, pgoutput_slot(conn, slot, "client_msgs") as publication:
        conn.execute("INSERT INTO client_msgs SELECT generate_series(1, 3)")
        target = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        with WalSender.connect(pg_server) as ws:
            ws.start_replication(slot, {"proto_version": "1", "publication_names": f'"{publication}"'})
            frames = [parse_envelope(f, sender="server") for f in ws.collect(target, timeout=15)]
            commit_end = [parse(f.data, proto_version=1) for f in frames if isinstance(f, XLogData)][-1].end_lsn
            now = Timestamp.from_datetime(datetime.now(timezone.utc))
            ws.send_copy_data(build_envelope(HotStandbyFeedback(send_time=now, xmin=0, xmin_epoch=0,
                                                                catalog_xmin=0, catalog_xmin_epoch=0)))
            ws.send_copy_data(build_envelope(StandbyStatusUpdate(
                write_lsn=commit_end, flush_lsn=commit_end, apply_lsn=commit_end, send_time=now,
                reply_requested=1)))
            # reply_requested=1: the server answers with a keepalive, so it read both frames to the end
            reply = ws.read_frame(10)
            assert reply is not None and isinstance(parse_envelope(reply, sender="server"), PrimaryKeepalive)
            deadline = time.monotonic() + 10
            while LSN(conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                   "WHERE slot_name = %s", (slot,)).fetchone()[0]) != commit_end:
                assert time.monotonic() < deadline, "the status update did not advance the slot"
                time.sleep(0.01)
            ws.end_copy()
