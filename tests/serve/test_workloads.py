"""Generated streams: the same seed gives the same stream, the stream is valid by construction, and a real
subscriber -- PostgreSQL's apply worker checking replwire's encoder on inputs no workload produced -- ends
with exactly what replwire's Assembler says the stream commits."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest

from replwire.codec import UNCHANGED_TOAST, Assembler, Decoder, Transaction, build
from replwire.codec.serve import Replay, Request, Server, ServeSettings, Source
from replwire.codec.testing.workloads import DDL, generate
from tests.support import serve_workload as workload

COUNT = 60


def built(stream) -> list[bytes]:
    decoder = Decoder(proto_version=stream.proto_version)
    out = []
    for _, message in stream.messages:
        in_stream = decoder.in_stream
        decoder.accept(message)
        out.append(build(message, proto_version=stream.proto_version, in_stream=in_stream))
    return out


def committed_tables(stream) -> dict[str, dict[int, tuple]]:
    """The tables as the Assembler's committed changes leave them (an unchanged TOAST value keeps the old)."""
    tables: dict[str, dict[int, tuple]] = {"gen_a": {}, "gen_b": {}}
    assembler = Assembler(proto_version=stream.proto_version)
    for data in built(stream):
        for item in assembler.feed(data):
            if not isinstance(item, Transaction):
                continue
            for change in item.changes:
                if change.op == "truncate":
                    for _, name in change.relations:
                        tables[name].clear()
                    continue
                if change.op == "message":
                    continue
                rows = tables[change.table]
                if change.op == "delete":
                    del rows[change.key["id"]]
                    continue
                old = rows.get(change.new["id"], ())
                new = tuple(old[i] if value is UNCHANGED_TOAST else value
                            for i, value in enumerate(change.new.values()))
                rows[change.new["id"]] = new
    return tables


def test_the_same_seed_gives_the_same_stream():
    assert generate(20, 5).messages == generate(20, 5).messages
    assert generate(20, 5).messages != generate(20, 6).messages


def test_a_generated_stream_has_the_hard_parts_and_decodes():
    stream = generate(COUNT, 1)
    kinds = Counter(type(m).__name__ for _, m in stream.messages)
    assert {"Begin", "StreamStart", "StreamCommit", "StreamAbort", "Truncate", "Update", "Delete"} <= set(kinds)
    assert any(getattr(m, "subxid", None) not in (None, getattr(m, "xid", None)) for _, m in stream.messages)
    assert any(c.kind == "u" for _, m in stream.messages for c in (getattr(m, "new", None) or []))
    tables = committed_tables(stream)
    assert tables["gen_a"] and tables["gen_b"]


@pytest.mark.server
@pytest.mark.parametrize(("major", "server_version"), [(18, 180000), (15, 150000)], ids=["pg18-proto4", "pg15-proto3"])
def test_a_subscriber_applies_generated_transactions_as_the_assembler_commits_them(request, major, server_version):
    subscriber = request.getfixturevalue(f"pg{major}")
    stream = generate(COUNT, 2)
    expected = committed_tables(stream)
    source = Source.from_messages(stream.messages, proto_version=stream.proto_version, options=stream.options)
    name = f"sub_generated_{major}"
    with Server(source, settings=ServeSettings(server_version)) as server:
        dsn = _subscribe(subscriber, name, server)
        try:
            rows = workload.wait_equal(dsn, expected, read=_read)
        finally:
            workload.unsubscribe(dsn, name)
    assert rows == expected


def _subscribe(subscriber, name: str, server: Server) -> str:
    """A subscriber database ``name`` with the generated tables, subscribed to ``server``."""
    dsn = workload.create_database(subscriber, name)
    workload.run(dsn, DDL)
    workload.run(dsn, [f"CREATE SUBSCRIPTION sub_{name} CONNECTION '{server.address.conninfo(dbname='gen')}' "
                       f"PUBLICATION pub WITH (create_slot = false, copy_data = false, streaming = on, "
                       f"slot_name = 'generated')"])
    return dsn


def _read(dsn: str) -> dict[str, dict[int, tuple]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        a = {row[0]: (row[0], row[1], row[2], row[3]) for row in conn.execute("SELECT * FROM gen_a")}
        b = {row[0]: (row[0], row[1], row[2]) for row in conn.execute("SELECT * FROM gen_b")}
    return {"gen_a": a, "gen_b": b}



def _rolled_back_relation_stream():
    """A streamed transaction whose first change of gen_b is in a subtransaction that is rolled back, and
    whose top level then writes gen_b: the Relation the client got inside the rolled-back subtransaction is
    gone with it (a subscriber discards what it spooled for it), so it must come again."""
    from replwire.codec import LSN, Insert, StreamAbort, StreamCommit, StreamStart, StreamStop, Timestamp, TupleColumn
    from replwire.codec.testing.workloads import GEN_A, GEN_B

    def text(*values):
        return [TupleColumn.text(v) for v in values]

    when = Timestamp(820_000_000_000_000)
    return [
        (LSN(0x1000), StreamStart(xid=900, first_segment=1)),
        (LSN(0x1010), Insert(xid=900, relation_id=GEN_A.relation_id, new=text("1", "a", "1.5", "p"))),
        (LSN(0x1020), StreamStop()),
        (LSN(0x1030), StreamStart(xid=900, first_segment=0)),
        (LSN(0x1040), Insert(xid=901, relation_id=GEN_B.relation_id, new=text("7", "rolled back", "t"))),
        (LSN(0x1050), StreamStop()),
        (LSN(0x1060), StreamAbort(xid=900, subxid=901, abort_lsn=None, abort_time=None)),
        (LSN(0x1070), StreamStart(xid=900, first_segment=0)),
        (LSN(0x1080), Insert(xid=900, relation_id=GEN_B.relation_id, new=text("8", "kept", "f"))),
        (LSN(0x1090), StreamStop()),
        (LSN(0x10B0), StreamCommit(xid=900, flags=0, commit_lsn=LSN(0x10A0), end_lsn=LSN(0x10B0), commit_time=when)),
    ], [GEN_A, GEN_B]


def _with_relations(pairs, relations):
    """The pairs with the Relations a stream needs, in the first block (as a server sends them)."""
    from dataclasses import replace

    first, *rest = pairs
    return [first, *((first[0], replace(r, xid=900)) for r in relations), *rest]


def test_a_relation_sent_in_a_rolled_back_subtransaction_is_sent_again():
    pairs, relations = _rolled_back_relation_stream()
    source = Source.from_messages(_with_relations(pairs, relations), proto_version=4, options={"streaming": "on"})
    request = Request.from_options({"proto_version": "4", "streaming": "on", "publication_names": "p"},
                                   server_version=180000)
    tags = [data[:1] + (data[5:9] if data[:1] == b"R" else b"") for _, data in Replay(source, request).messages()]
    gen_b = b"R" + (16502).to_bytes(4, "big")
    assert tags.count(gen_b) == 2
    assert tags.index(gen_b) < tags.index(b"A") < len(tags) - 1 - tags[::-1].index(gen_b)


@pytest.mark.server
def test_a_subscriber_applies_a_change_after_a_rolled_back_relation(pg18):
    pairs, relations = _rolled_back_relation_stream()
    source = Source.from_messages(_with_relations(pairs, relations), proto_version=4, options={"streaming": "on"})
    name = "sub_rolled_back_relation"
    expected = {"gen_a": {1: (1, "a", Decimal("1.5"), "p")}, "gen_b": {8: (8, "kept", False)}}
    with Server(source, settings=ServeSettings(180000)) as server:
        dsn = _subscribe(pg18, name, server)
        try:
            rows = workload.wait_equal(dsn, expected, read=_read)
        finally:
            workload.unsubscribe(dsn, name)
    assert rows == expected
