"""Debezium change events (:mod:`replwire.codec.stream.debezium`) of what a real PostgreSQL 18 server sent,
compared field by field with the shape of the example events in Debezium's PostgreSQL connector
documentation, and with facts the server reported while the workload ran (xids, WAL positions, clocks).

The documented shapes below are written from Debezium's docs page for the PostgreSQL connector
(https://debezium.io/documentation/reference/stable/connectors/postgresql.html; its source is
documentation/modules/ROOT/pages/connectors/postgresql.adoc in debezium/debezium), section by section.
"""

from __future__ import annotations

import base64
import json
import time

import pytest

from replwire.codec import LSN, Assembler
from replwire.codec.stream.assembler import Transaction
from replwire.codec.stream.debezium import UNAVAILABLE_VALUE, DebeziumEvents

pytestmark = pytest.mark.server

# -- The documented shapes --------------------------------------------------------------------------------------

_ROW = {"before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns"}
#: The payload keys of each documented example event ("Data change events": _create_, _update_, _delete_,
#: _truncate_ and _message_ events).  The truncate and message examples have no before/after.
DOCUMENTED_PAYLOAD_KEYS = {
    "c": _ROW,  # [[postgresql-create-events]]
    "u": _ROW,  # [[postgresql-update-events]]
    "d": _ROW,  # [[postgresql-delete-events]]
    "t": {"source", "op", "ts_ms", "ts_us", "ts_ns"},  # [[postgresql-truncate-events]]
    "m": {"source", "op", "ts_ms", "ts_us", "ts_ns", "message"},  # [[postgresql-message-events]]
}
#: "Valid values" of ``op`` listed under the create example; ``r`` (snapshot reads) replwire does not produce.
DOCUMENTED_OPS = {"c", "u", "d", "r", "t", "m"}
#: The ``source`` block of the create example, with the types of its values (the schema block above it gives
#: int64 for ts_ms/ts_us/ts_ns/txId/lsn/xmin, string for the rest).  The other examples leave out
#: ``sequence``; the non-transactional message example also ``txId`` (null: "``null`` for non-transactional
#: _message_ events").  ``snapshot``: the page's examples show a boolean, but the connector writes a string
#: enum ("true", "last", ... and the default "false": SchemaFactory.snapshotRecordSchema and
#: SnapshotRecord.toSource in Debezium's source; the SQL Server and Db2 pages show "snapshot": "true").
DOCUMENTED_SOURCE = {"version": str, "connector": str, "name": str, "ts_ms": int, "ts_us": int, "ts_ns": int,
                     "snapshot": str, "db": str, "sequence": str, "schema": str, "table": str, "txId": int,
                     "lsn": int, "xmin": type(None)}
#: "Change data event enrichment" under [[postgresql-transaction-metadata]]: the ``transaction`` block; the
#: schema (SchemaFactory.transactionBlockSchema) makes the orders int64.
DOCUMENTED_TRANSACTION = {"id": str, "total_order": int, "data_collection_order": int}
#: The message example's ``message`` block: the prefix, and the content bytes (base64 in JSON: "Ymfy").
DOCUMENTED_MESSAGE = {"prefix": str, "content": str}


def check_shape(event: dict, *, transactional: bool = True) -> None:
    """``event`` has the keys and value types of the documented example for its ``op``."""
    op = event["op"]
    assert op in DOCUMENTED_OPS and op != "r"
    extra = set(event) - DOCUMENTED_PAYLOAD_KEYS[op]
    assert extra == ({"transaction"} if transactional else set()) | ({"unchanged_toast"} & set(event)), event
    assert DOCUMENTED_PAYLOAD_KEYS[op] <= set(event)
    for key in ("ts_ms", "ts_us", "ts_ns"):
        assert type(event[key]) is int
    assert event["ts_ms"] == event["ts_us"] // 1000 and event["ts_ns"] // 1000 == event["ts_us"]
    if op in ("c", "u", "d"):
        assert event["before"] is None or isinstance(event["before"], dict)
        assert event["after"] is None or isinstance(event["after"], dict)
        if op == "c":
            assert event["before"] is None  # "the before field is null since this change event is for new content"
        assert (event["after"] is None) == (op == "d")  # delete: "the after field is null"
    source = event["source"]
    assert set(source) == set(DOCUMENTED_SOURCE), source
    for key, kind in DOCUMENTED_SOURCE.items():
        if key == "txId" and not transactional:
            assert source[key] is None
        else:
            assert type(source[key]) is kind, (key, source[key])
    assert source["connector"] == "postgresql" and source["snapshot"] == "false"
    assert source["ts_ms"] == source["ts_us"] // 1000 and source["ts_ns"] == source["ts_us"] * 1000
    # "The first value is always the last committed LSN, the second value is always the current LSN"
    # (the create example: "sequence": "[\"24023119\",\"24023128\"]" with "lsn": 24023128)
    sequence = json.loads(source["sequence"])
    assert len(sequence) == 2 and sequence[1] == str(source["lsn"])
    assert sequence[0] is None or int(sequence[0]) > 0
    if op == "m":
        assert source["schema"] == "" and source["table"] == ""  # "always "" for _message_ events"
    if transactional:
        assert {k: type(v) for k, v in event["transaction"].items()} == DOCUMENTED_TRANSACTION
    if op == "m":
        assert {k: type(v) for k, v in event["message"].items()} == DOCUMENTED_MESSAGE


# -- The workload -----------------------------------------------------------------------------------------------

BIG = "x" * 10_000  # stored out of line (STORAGE EXTERNAL: not compressed)
SLOT_OPTIONS = ["proto_version", "4", "publication_names", "dbz_pub", "messages", "true", "streaming", "on",
                "two_phase", "on"]


def clock_us(conn) -> int:
    return int(conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint").fetchone()[0])


def wal(conn) -> int:
    return int(LSN(conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]))


class Step:
    """What the server said about one step of the workload: its xid, the WAL around it, the clock around its
    commit."""

    def __init__(self, conn, name: str, statements: list[str], *, commit: str = "COMMIT", prepare: str = "") -> None:
        self.name = name
        self.wal_before = wal(conn)
        conn.execute("BEGIN")
        self.xid = int(conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0])
        for statement in statements:
            conn.execute(statement)
        if prepare:
            conn.execute(prepare)
            time.sleep(0.02)  # the commit time must not be the prepare time
        self.clock_before_commit = clock_us(conn)
        conn.execute(commit)
        self.clock_after_commit = clock_us(conn)
        self.wal_after = wal(conn)


@pytest.fixture(scope="module")
def workload(pg18):
    """The workload's steps (by name), the assembler's items of what the slot sent for it, and the WAL insert
    positions around the non-transactional message."""
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE dbz_t (id int PRIMARY KEY, v text, big text, n numeric, at timestamptz, "
                     "b bytea, j jsonb)")
        conn.execute("ALTER TABLE dbz_t ALTER COLUMN big SET STORAGE EXTERNAL")
        conn.execute("CREATE TABLE dbz_full (id int PRIMARY KEY, v text)")
        conn.execute("ALTER TABLE dbz_full REPLICA IDENTITY FULL")
        conn.execute("CREATE TABLE dbz_big (id int PRIMARY KEY, pad text)")
        conn.execute("CREATE PUBLICATION dbz_pub FOR TABLE dbz_t, dbz_full, dbz_big")
        conn.execute("SELECT pg_create_logical_replication_slot('dbz_slot', 'pgoutput', false, true)")
        steps = {step.name: step for step in [
            Step(conn, "create", [f"INSERT INTO dbz_t VALUES (1, 'Grüße', '{BIG}', 1.50, "
                                  "'2026-01-02 03:04:05.123456+00', '\\x01ff', '{\"a\": [1, null]}'), "
                                  "(2, NULL, 'small', NULL, NULL, NULL, NULL)",
                                  "INSERT INTO dbz_full VALUES (1, 'a')"]),
            Step(conn, "update", ["UPDATE dbz_t SET v = 'changed' WHERE id = 1", "UPDATE dbz_full SET v = 'b'"]),
            Step(conn, "delete", ["DELETE FROM dbz_t WHERE id = 2"]),
            Step(conn, "truncate", ["TRUNCATE dbz_t, dbz_full"]),
            Step(conn, "message", ["SELECT pg_logical_emit_message(true, 'dbz', 'hello')",
                                   "INSERT INTO dbz_full VALUES (5, 'with a message')"]),
        ]}
        lone_wal = wal(conn)
        conn.execute("SELECT pg_logical_emit_message(false, 'dbz', 'lone')")
        lone_wal = (lone_wal, wal(conn))
        steps["two_phase"] = Step(conn, "two_phase", ["INSERT INTO dbz_full VALUES (10, 'prepared')"],
                                  prepare="PREPARE TRANSACTION 'dbz_gid'", commit="COMMIT PREPARED 'dbz_gid'")
        steps["streamed"] = Step(conn, "streamed", [
            "INSERT INTO dbz_big SELECT i, repeat(md5(i::text), 4) FROM generate_series(1, 2000) i",
            "SAVEPOINT s1", "INSERT INTO dbz_big VALUES (5000, 'in a subtransaction')", "RELEASE SAVEPOINT s1",
            "UPDATE dbz_big SET pad = 'last' WHERE id = 1"])
        rows = conn.execute("SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes("
                            "'dbz_slot', NULL, NULL, VARIADIC %s::text[])", (SLOT_OPTIONS,)).fetchall()
        conn.execute("SELECT pg_drop_replication_slot('dbz_slot')")
    items = list(Assembler(proto_version=4).feed_all(rows))
    return steps, items, lone_wal


@pytest.fixture(scope="module")
def events(workload):
    """Every event, in order, as (event, the assembler item it came from), and the wall clock around making
    them."""
    _, items, _ = workload
    maker = DebeziumEvents("9.9.9")
    start = time.time_ns() // 1000
    # tombstones (None) left out: test_delete_event checks them
    out = [(event, item) for item in items for event in maker.events(item) if event is not None]
    return out, start, time.time_ns() // 1000


def of_step(events, step):
    """The events of the transaction whose xid the server gave for ``step``."""
    return [event for event, item in events[0] if isinstance(item, Transaction) and item.xid == step.xid]


def check_transaction(events, step, item_events) -> None:
    """Shape, and the source facts every event of ``step``'s transaction shares, against the server's."""
    _, start, end = events
    for event in item_events:
        check_shape(event)
        source = event["source"]
        assert source["txId"] == step.xid
        assert step.wal_before <= source["lsn"] <= step.wal_after
        assert step.clock_before_commit <= source["ts_us"] <= step.clock_after_commit  # the commit time
        assert start <= event["ts_us"] <= end  # the time the event was made
        assert source["version"] == "replwire-9.9.9" and source["name"] == "replwire" and source["db"] == ""
        assert event["transaction"]["id"].startswith(f"{step.xid}:")
    assert [e["transaction"]["total_order"] for e in item_events] == list(range(1, len(item_events) + 1))


def test_create_events(workload, events):
    steps, _, _ = workload
    first, second, full = of_step(events, steps["create"])
    check_transaction(events, steps["create"], [first, second, full])
    assert [e["op"] for e in (first, second, full)] == ["c", "c", "c"]
    assert (first["source"]["schema"], first["source"]["table"]) == ("public", "dbz_t")
    assert first["after"] == {"id": 1, "v": "Grüße", "big": BIG, "n": "1.50", "at": "2026-01-02T03:04:05.123456+00:00",
                              "b": "\\x01ff", "j": '{"a": [1, null]}'}  # json: its text, a string (as Debezium)
    assert second["after"] == {"id": 2, "v": None, "big": "small", "n": None, "at": None, "b": None, "j": None}
    assert full["after"] == {"id": 1, "v": "a"} and full["source"]["table"] == "dbz_full"
    assert [e["transaction"]["data_collection_order"] for e in (first, second, full)] == [1, 2, 1]
    assert first["source"]["lsn"] < second["source"]["lsn"] < full["source"]["lsn"]


def test_update_events_unchanged_toast(workload, events):
    steps, _, _ = workload
    toast, full = of_step(events, steps["update"])
    check_transaction(events, steps["update"], [toast, full])
    assert toast["op"] == full["op"] == "u"
    assert toast["before"] is None  # REPLICA IDENTITY DEFAULT, key unchanged: the server sends no old row
    assert toast["after"] == {"id": 1, "v": "changed", "big": UNAVAILABLE_VALUE, "n": "1.50",
                              "at": "2026-01-02T03:04:05.123456+00:00", "b": "\\x01ff", "j": '{"a": [1, null]}'}
    assert toast["unchanged_toast"] == ["big"]
    assert "unchanged_toast" not in full
    assert full["before"] == {"id": 1, "v": "a"} and full["after"] == {"id": 1, "v": "b"}  # REPLICA IDENTITY FULL


def test_delete_event(workload, events):
    steps, _, _ = workload
    [delete] = of_step(events, steps["delete"])
    check_transaction(events, steps["delete"], [delete])
    # "Replica identity": under DEFAULT, the primary key's old value; the value schema's other columns null
    assert delete["op"] == "d" and delete["after"] is None
    assert delete["before"] == {"id": 2, "v": None, "big": None, "n": None, "at": None, "b": None, "j": None}
    # "Tombstone events": the delete is followed by a tombstone (a null value), unless tombstones.on.delete=false
    _, items, _ = workload
    [item] = [i for i in items if isinstance(i, Transaction) and i.xid == steps["delete"].xid]
    assert [e is None for e in DebeziumEvents("9.9.9").events(item)] == [False, True]
    assert [e is None for e in DebeziumEvents("9.9.9", tombstones=False).events(item)] == [False]


def test_truncate_events_one_per_table(workload, events):
    steps, _, _ = workload
    truncates = of_step(events, steps["truncate"])
    check_transaction(events, steps["truncate"], truncates)
    assert [e["op"] for e in truncates] == ["t", "t"]
    assert sorted(e["source"]["table"] for e in truncates) == ["dbz_full", "dbz_t"]
    assert truncates[0]["source"]["lsn"] == truncates[1]["source"]["lsn"]  # one Truncate message
    assert [e["transaction"]["data_collection_order"] for e in truncates] == [1, 1]


def test_message_events(workload, events):
    steps, _, lone_wal = workload
    message, insert = of_step(events, steps["message"])
    check_transaction(events, steps["message"], [message, insert])
    assert message["op"] == "m" and message["message"] == {"prefix": "dbz",
                                                           "content": base64.b64encode(b"hello").decode()}
    assert insert["op"] == "c"
    [lone] = [event for event, item in events[0] if not isinstance(item, Transaction)]
    check_shape(lone, transactional=False)
    assert base64.b64decode(lone["message"]["content"]) == b"lone" and lone["message"]["prefix"] == "dbz"
    assert lone_wal[0] < lone["source"]["lsn"] <= lone_wal[1]  # the message record's end (decode.c: endptr)
    # no commit time: "the time at which the connector encounters the message"
    assert events[1] <= lone["source"]["ts_us"] <= events[2]


def test_two_phase_transaction(workload, events):
    steps, items, _ = workload
    [item] = [i for i in items if isinstance(i, Transaction) and i.xid == steps["two_phase"].xid]
    assert item.gid == "dbz_gid"
    [insert] = of_step(events, steps["two_phase"])
    check_transaction(events, steps["two_phase"], [insert])  # ts: COMMIT PREPARED's time, not PREPARE's
    assert insert["op"] == "c" and insert["after"] == {"id": 10, "v": "prepared"}


def test_streamed_transaction_with_a_subtransaction(workload, events):
    steps, items, _ = workload
    step = steps["streamed"]
    [item] = [i for i in items if isinstance(i, Transaction) and i.xid == step.xid]
    assert item.streamed and any(change.subxid != step.xid for change in item.changes)  # the savepoint's insert
    streamed = of_step(events, step)
    check_transaction(events, step, streamed)  # txId: the top-level xid throughout
    assert [e["op"] for e in streamed] == ["c"] * 2001 + ["u"]
    assert streamed[2000]["after"] == {"id": 5000, "pad": "in a subtransaction"}
    assert streamed[-1]["after"] == {"id": 1, "pad": "last"}
    assert streamed[-1]["transaction"]["data_collection_order"] == 2002


def test_sequence_starts_with_the_previous_commit(workload, events):
    steps, _, _ = workload
    previous, current = None, None
    for event, item in events[0]:
        if item is not current:
            if isinstance(current, Transaction):
                previous = str(int(current.commit_lsn))
            current = item
        assert json.loads(event["source"]["sequence"])[0] == previous
    first = of_step(events, steps["create"])[0]
    assert json.loads(first["source"]["sequence"])[0] is None  # nothing committed before it in this stream
    after_create = of_step(events, steps["update"])[0]  # the transaction printed after the create step's
    create_commit = int(json.loads(after_create["source"]["sequence"])[0])
    assert steps["create"].wal_before < create_commit <= steps["create"].wal_after
