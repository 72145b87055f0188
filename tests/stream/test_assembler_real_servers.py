"""The Assembler on real PostgreSQL 15 and 18 output, against independent sources:

* committed transactions and their changes (same transactions, same order, same values in text form):
  the server's own ``test_decoding`` output for the same WAL; binary ``b`` values: the server's send
  function applied to test_decoding's text (helpers in ``tests/support/testdecoding.py``);
* aborted transactions and rolled-back savepoints contribute nothing: the workload's facts (xids, batches);
* commit LSN/end LSN/commit time/origin: the SQL rows' ``lsn``, ``pg_xact_commit_timestamp`` and the
  workload's origin facts;
* typed values: what psycopg returns for a ``SELECT`` of the same rows, column by column, in the same format
  (text captures against a text cursor, binary captures against a binary cursor);
* the live walsender captures (fed frame by frame) give the same committed transactions as the SQL capture
  of the same options, and a spilled run gives the same as an in-memory one.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from replwire.codec import (
    INFINITY,
    LSN,
    NEG_INFINITY,
    UNCHANGED_TOAST,
    Assembler,
    Change,
    Timestamp,
    Transaction,
)
from replwire.codec.stream.value_types import Interval, JsonText
from tests.support.capture import UNCHANGED_TOAST as TD_UNCHANGED_TOAST
from tests.support.capture import parse_test_decoding
from tests.support.testdecoding import (
    Binary,
    check_binary_values,
    compare_values,
    leaf_to_root_map,
    published_changes,
    published_only,
    td_transactions,
)

pytestmark = pytest.mark.server


def assemble(capture, **kwargs) -> tuple[list[Transaction], list[Change], list[tuple[Any, str]]]:
    """Committed transactions, loose messages, and for each transaction the SQL row that completed it."""
    asm = Assembler(proto_version=capture.proto_version, **kwargs)
    transactions, loose, completing = [], [], []
    for lsn, _, data in capture.rows:
        for item in asm.feed(data, lsn=LSN(lsn)):
            if isinstance(item, Transaction):
                transactions.append(item)
                completing.append((item, lsn))
            else:
                loose.append(item)
    assert asm.open_transactions == 0, capture.config
    return transactions, loose, completing


def _text_columns(change: Change, row: dict | None, *, drop_nulls: bool = False):
    if row is None:
        return None
    out = []
    types = {c.name: c for c in change.relation.columns}
    for name, value in row.items():
        if value is None:
            if not drop_nulls:
                out.append((name, None))
        elif value is UNCHANGED_TOAST:
            out.append((name, TD_UNCHANGED_TOAST))
        elif isinstance(value, bytes):
            out.append((name, Binary(types[name].type_id, types[name].type_modifier, value)))
        else:
            out.append((name, value))
    return tuple(out)


def as_td_shape(transactions: list[Transaction]) -> dict[int, list]:
    """The assembler's output in the shape ``td_transactions`` gives test_decoding's (untyped values)."""
    out: dict[int, list] = {}
    for txn in transactions:
        changes = []
        for c in txn.changes:
            if c.op == "message":
                changes.append(("MESSAGE", c.prefix, c.content, c.transactional))
            elif c.op == "truncate":
                changes.append(("TRUNCATE", tuple(sorted(f"{s}.{t}" for s, t in c.relations)), c.cascade,
                                c.restart_identity))
            else:
                before = c.key if c.old is None else c.old
                changes.append((c.op.upper(), f"{c.schema}.{c.table}",
                                _text_columns(c, before, drop_nulls=True), _text_columns(c, c.new)))
        assert txn.xid not in out, f"transaction {txn.xid} emitted twice"
        out[txn.xid] = changes
    return out


def test_committed_changes_equal_test_decoding(pg_captures, server):
    records = parse_test_decoding(pg_captures.test_decoding)
    checked_changes = checked_binary = 0
    with server.connect() as conn:
        root_map = leaf_to_root_map(conn)
        for capture in pg_captures.captures:
            transactions, loose, _ = assemble(capture, typed=False)
            ours = as_td_shape(transactions)
            td_committed, td_loose = td_transactions(records, leaf_to_root=root_map if "root" in capture.config else {})
            published = published_changes(conn, capture.options["publication_names"])
            skip = set()
            if capture.options.get("origin") == "none":
                skip = {xid for step, xid in pg_captures.facts["xids"].items() if step.startswith("origin")}
            messages_on = capture.options.get("messages") == "true"
            pending: list = []
            # same transactions, in the same (commit) order
            expected_order = []
            for xid, changes in td_committed.items():
                kept = [c if c[0] == "MESSAGE" else published_only(c, published)
                        for c in changes if c[0] != "MESSAGE" or messages_on]
                kept = [c for c in kept if c is not None]
                if xid in skip:
                    assert xid not in ours, f"{capture.config}: origin 'none' transaction {xid} was emitted"
                    continue
                if kept or xid in ours:
                    expected_order.append(xid)
                    assert xid in ours, f"{capture.config}: committed transaction {xid} missing"
                    assert len(ours[xid]) == len(kept), (capture.config, xid)
                    for mine, theirs in zip(ours[xid], kept):
                        compare_values(mine, theirs, pending)
                    checked_changes += len(kept)
            assert [t.xid for t in transactions] == [x for x in expected_order], capture.config
            td_loose_kept = td_loose if messages_on else []
            assert [("MESSAGE", c.prefix, c.content, c.transactional) for c in loose] == td_loose_kept
            checked_binary += check_binary_values(conn, pending)
    assert checked_changes > 3000 and checked_binary > 50, (checked_changes, checked_binary)


def test_aborted_work_contributes_nothing(pg_captures):
    facts = pg_captures.facts
    aborted = set(facts["aborted_xids"].values())
    lost_batches = {"big_abort", "savepoint_rolled_back", "msg_aborted"}
    lost_gids = {p["gid"] for p in facts["prepared"].values() if p["outcome"] == "rollback"}
    for capture in pg_captures.captures:
        transactions, _, _ = assemble(capture)
        assert not aborted & {t.xid for t in transactions}, capture.config
        savepoint_rows = []
        for txn in transactions:
            assert txn.gid not in lost_gids
            for change in txn.changes:
                for row in (change.new, change.old, change.key):
                    if row and row.get("batch") in lost_batches:
                        pytest.fail(f"{capture.config}: a row of {row['batch']} was emitted")
                    if row and change.table == "bulk" and row.get("batch") == "savepoint":
                        savepoint_rows.append(row["id"])
                    if row and change.table == "tp_tab":
                        assert row["gid"] not in lost_gids
        # the savepoint transaction: the row before and the rows after the rolled-back savepoint, in order
        assert savepoint_rows == [20001, 30001, 30002], capture.config


def test_transaction_positions_times_and_origins(pg_captures, server):
    facts = pg_captures.facts
    origin_xids = {facts["xids"][step]: step for step in facts["origin"]["steps"]}
    times: dict[int, Timestamp] = {}
    for capture in pg_captures.captures:
        transactions, _, completing = assemble(capture, typed=False)
        for txn, row_lsn in completing:
            # the SQL row of Commit / Stream Commit / Commit Prepared is at the transaction's end LSN
            assert txn.end_lsn == LSN(row_lsn), capture.config
            assert txn.commit_lsn < txn.end_lsn
            assert times.setdefault(txn.xid, txn.commit_time) == txn.commit_time
            if txn.xid in origin_xids:
                step = facts["origin"]["steps"][origin_xids[txn.xid]]
                name, origin_lsn = txn.origin
                assert name == facts["origin"]["name"]
                assert origin_lsn in (LSN(step["origin_lsn"]), LSN(0))  # 0/0 after a Stream Start (§10.3)
                assert txn.commit_time == Timestamp(step["origin_time"])
            else:
                assert txn.origin is None
            prepared = [p for p in facts["prepared"].values() if p["xid"] == txn.xid]
            if capture.options.get("two_phase") == "true" and prepared:
                assert txn.gid == prepared[0]["gid"] and txn.prepare_lsn is not None
            else:
                assert txn.gid is None
            for change in txn.changes:
                assert change.lsn is not None and change.lsn <= txn.end_lsn
    with server.connect() as conn:
        for xid, commit_time in times.items():
            (server_time,) = conn.execute("SELECT pg_xact_commit_timestamp(%s::text::xid)", (str(xid),)).fetchone()
            assert Timestamp(server_time) == commit_time, xid
    assert len(times) > 15


def test_walsender_frames_assemble_like_the_sql_capture(pg_captures):
    by_options = {tuple(sorted(c.options.items())): c for c in pg_captures.captures}
    for live in pg_captures.walsender:
        asm = Assembler(proto_version=live.proto_version, typed=False)
        transactions = [item for frame in live.frames for item in asm.feed_frame(frame)
                        if isinstance(item, Transaction)]
        twin = next(c for key, c in by_options.items()
                    if {k: v for k, v in key if (k, v) != ("origin", "any")} == dict(live.options))
        sql_transactions, _, _ = assemble(twin, typed=False)
        assert as_td_shape(transactions) == as_td_shape(sql_transactions), live.config
        assert not set(pg_captures.facts["aborted_xids"].values()) & {t.xid for t in transactions}


def test_spilled_transactions_equal_in_memory_ones(pg_captures, tmp_path):
    for name in ("v3-all", "v2-stream", "v1"):
        capture = pg_captures.by_config()[name]
        memory, _, _ = assemble(capture)
        spilled, _, _ = assemble(capture, spill_threshold=4096, spill_dir=str(tmp_path))
        assert any(t.changes.spilled for t in spilled) and not any(t.changes.spilled for t in memory)
        # repr: NaN values are never equal to themselves
        assert [(t.xid, t.commit_lsn, t.end_lsn, [repr(c) for c in t.changes]) for t in spilled] == \
               [(t.xid, t.commit_lsn, t.end_lsn, [repr(c) for c in t.changes]) for t in memory], name
        assert list(tmp_path.iterdir()) == []  # anonymous temporary files: nothing left behind


# ---------------------------------------------------------------------------------------------------------
# typed values against psycopg's SELECT


def _same(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, Interval):  # psycopg's SELECT folds a month into 30 days, ours keeps the parts apart
        return isinstance(theirs, dt.timedelta) and ours.timedelta() == theirs  # (the parts: test_values_lossless)
    if isinstance(ours, JsonText):  # the server's text, which psycopg's SELECT parses
        return ours.load() == theirs
    if isinstance(ours, int) and isinstance(theirs, bytes):  # binary money: cash_send's int64, which psycopg leaves
        return len(theirs) == 8 and ours == int.from_bytes(theirs, "big", signed=True)
    if isinstance(ours, float) and isinstance(theirs, float) and ours != theirs:  # binary float4: the shortest
        return struct.pack(">f", ours) == struct.pack(">f", theirs)  # decimal of the same single, not its double
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(_same(o, t) for o, t in zip(ours, theirs))
    if isinstance(theirs, float) and math.isnan(theirs):
        return isinstance(ours, float) and math.isnan(ours)
    if isinstance(theirs, Decimal) and theirs.is_nan():
        return isinstance(ours, Decimal) and ours.is_nan()
    if isinstance(theirs, (list, dict)):
        return ours == theirs
    return type(ours) is type(theirs) and ours == theirs


def _check_one(conn, binary: bool, column: str, row_id: int, ours: Any) -> str:
    (text,) = conn.execute(f"SELECT {column}::text FROM all_types WHERE id = %s", (row_id,)).fetchone()
    if ours in (INFINITY, NEG_INFINITY):
        assert str(ours) == text, (column, row_id)
        return "infinity"
    try:
        with conn.transaction():
            (value,) = conn.cursor(binary=binary).execute(
                f"SELECT {column} FROM all_types WHERE id = %s", (row_id,)).fetchone()
    except psycopg.Error:  # no binary output function: pgoutput sent text, compare with the text
        assert ours == text, (column, row_id)
        return "text"
    assert _same(ours, value), (column, row_id, ours, value)
    return "select"


def _final_rows(transactions: list[Transaction], table: str) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for txn in transactions:
        for change in txn.changes:
            if change.table != table:
                continue
            if change.op == "insert":
                rows[change.new["id"]] = change.new
            elif change.op == "update":
                old_id = (change.key or change.old or change.new)["id"]
                previous = rows.pop(old_id)
                rows[change.new["id"]] = {k: previous[k] if v is UNCHANGED_TOAST else v for k, v in change.new.items()}
            elif change.op == "delete":
                del rows[(change.key or change.old)["id"]]
    return rows


@pytest.mark.parametrize("config, binary", [("v1", False), ("v1-binary", True), ("v3-all", True),
                                            ("v2-stream", False)])
def test_typed_values_equal_psycopg_select(pg_captures, server, config, binary):
    capture = pg_captures.by_config()[config]
    transactions, _, _ = assemble(capture)
    rows = _final_rows(transactions, "all_types")
    checked: dict[str, set[str]] = {}
    with server.connect() as conn:
        columns = [r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'all_types'::regclass AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum")]
        ids = [r[0] for r in conn.execute("SELECT id FROM all_types ORDER BY id")]
        assert sorted(rows) == ids
        for column in columns:
            kinds = checked.setdefault(column, set())
            try:
                with conn.transaction():
                    selected = conn.cursor(binary=binary).execute(
                        f"SELECT id, {column} FROM all_types ORDER BY id").fetchall()
            except psycopg.Error:
                # psycopg cannot load a value (±infinity dates), or the type has no binary output
                # (aclitem): row by row, against the server's text or psycopg's value
                for row_id in ids:
                    kinds.add(_check_one(conn, binary, column, row_id, rows[row_id][column]))
                continue
            for row_id, value in selected:
                ours = rows[row_id][column]
                assert _same(ours, value), (config, column, row_id, ours, value)
                kinds.add("select")
    assert set(checked) == set(columns) and all(checked.values())
    # the special values are really there
    assert rows[3]["c_date"] is INFINITY and rows[3]["c_timestamp"] is NEG_INFINITY
    assert rows[3]["c_timestamptz"] is INFINITY
    assert rows[3]["c_numeric"].is_nan() and rows[4]["c_numeric"] == Decimal("-Infinity")
    assert rows[1]["c_posint"] == 42 and isinstance(rows[1]["c_numeric"], Decimal)
