"""Re-encoding for what a client asks, on every configuration the test servers were captured with (every
protocol version, streaming on and parallel, two-phase, binary, messages, origin): whatever a client asks
for, what is served commits what the capture commits, by the Assembler's reading -- as captured when the
client takes every form the capture has, reassembled when it does not."""

from __future__ import annotations

import pytest

from replwire.codec import LSN, Assembler, Change, Transaction
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from replwire.codec.serve import Replay, Request, RequestError, Source

pytestmark = pytest.mark.server


def outcome(messages: list[bytes], proto_version: int) -> list[tuple]:
    """Committed changes (typed values) and non-transactional messages, in order."""
    assembler = Assembler(proto_version=proto_version)
    out: list[tuple] = []
    for data in messages:
        for item in assembler.feed(data):
            if isinstance(item, Transaction):
                out.append(("commit",))  # (a prepared transaction reassembled for a client has no gid)
                # (repr: NaN values compare unequal to themselves)
                out += [(c.op, c.table, repr((c.new, c.old, c.key)), c.prefix, c.content) for c in item.changes]
            elif isinstance(item, Change):
                out.append(("message", item.prefix, item.content))
    return out


def requests_for(capture) -> list[dict[str, str]]:
    """What clients ask: the capture's own options; a protocol 1 client; the highest everything."""
    binary = {"binary": "true"} if capture.options.get("binary") == "true" else {}
    highest = 4 if capture.version_num >= 160000 else 3
    streaming = "parallel" if highest == 4 else "on"
    return [
        {"proto_version": str(capture.proto_version), **capture.options},
        {"proto_version": "1", **binary},
        {"proto_version": str(highest), "streaming": streaming, "two_phase": "true", "messages": "true", **binary},
        {"proto_version": "2", "streaming": "on", "messages": "true", **binary},
    ]


def test_every_capture_served_for_every_client_commits_what_it_commits(pg_captures, tmp_path):
    checked = 0
    for capture in pg_captures.captures:
        if not capture.rows:
            continue
        path = tmp_path / f"{capture.config}.rwcap"
        options = dict(capture.options)
        with CaptureWriter(path, CaptureHeader(proto_version=capture.proto_version,
                                               server_version=capture.version_num, options=options)) as writer:
            for lsn, xid, data in capture.rows:
                writer.append(int(_lsn(lsn)), xid, data)
        source = Source.from_captures([path])
        original = [data for _, _, data in capture.rows]
        for asked in requests_for(capture):
            asked = {**asked, "publication_names": "pub"}
            try:
                request = Request.from_options(asked, server_version=capture.version_num)
            except RequestError:
                continue  # a client this server's version would refuse too
            replay = Replay(source, request)
            served = [data for _, data in replay.messages()]
            want = outcome(original, capture.proto_version)
            got = outcome(served, request.proto_version)
            assert _without_messages(got, request) == _without_messages(want, request), (capture.config, asked)
            checked += 1
    assert checked >= 20


def _without_messages(items: list[tuple], request: Request) -> list[tuple]:
    """``items`` without logical messages if the client did not ask for them -- and then without the
    transactions left empty (a walsender from PostgreSQL 15 on sends no Begin and Commit for a transaction
    it sends nothing of)."""
    if request.messages:
        return items
    kept = [i for i in items if i[0] != "message"]
    return [i for n, i in enumerate(kept) if i[0] != "commit" or (n + 1 < len(kept) and kept[n + 1][0] != "commit")]


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def test_a_capture_with_a_snapshot_section_serves_its_stream_only(pg_captures, tmp_path):
    from replwire.codec.messages import Relation, RelationColumn
    from replwire.codec.stream import snapshot_records

    capture = next(c for c in pg_captures.captures if c.rows)
    plain, with_snapshot = tmp_path / "plain.rwcap", tmp_path / "snapshot.rwcap"
    relation = Relation(relation_id=1, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])
    section = [snapshot_records.begin_record("s", False), snapshot_records.slot_record(LSN(0x10), "x"),
               snapshot_records.table_record(relation, []), snapshot_records.rows_record(1, False, 2, b"1\n2\n"),
               snapshot_records.table_end_record(1, 2), snapshot_records.end_record(LSN(0x10), 1, 2)]
    for path, first in ((plain, []), (with_snapshot, section)):
        with CaptureWriter(path, CaptureHeader(proto_version=capture.proto_version,
                                               server_version=capture.version_num,
                                               options=dict(capture.options))) as writer:
            for data in first:
                writer.append(0x10, 0, data)
            for lsn, xid, data in capture.rows:
                writer.append(int(_lsn(lsn)), xid, data)
    served = [list(Source.from_captures([p]).segments[0].records()) for p in (plain, with_snapshot)]
    assert served[1] == served[0] and served[0]
    assert Source.from_captures([with_snapshot]).scan() is not None
