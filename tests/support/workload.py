"""A scripted workload that makes pgoutput produce every message kind, run once per test server.

Two phases, because publications must exist before the slots are created (pgoutput looks them up through the
slot's historic snapshot):

1. :func:`setup_schema` (before the slots): types, tables, publications, a replication origin. Nothing of it is
   decoded.
2. :func:`run_workload` (after the slots): the DML below. It returns a dict of *facts* (xids, message LSNs,
   origin data, ...) the tests can check against the captures independently of any parser.

Which statement produces which message kind (``[X]`` = carries the streamed xid when inside S…E)
--------------------------------------------------------------------------------------------------

================================  ================================================================================
workload step (``facts["xids"]``)  pgoutput messages
================================  ================================================================================
all_types                          B, Y (mood, _mood, posint → base ``int4``, pair), R, I×4, U, D, C. Values: NULLs,
                                   '' , non-ASCII, NaN/±Infinity, 'infinity' dates, arrays, json/jsonb, money,
                                   bit/varbit, aclitem (no send function: stays ``t`` under ``binary``).
ri_default / ri_full /             R (replident d/f/i), I, U (no old / ``K`` / ``O``), D (``K`` / ``O``), C.
ri_index                           ri_default gets ``ALTER TABLE ADD COLUMN`` mid-transaction → second R.
ri_nothing                         R (replident n), I only: a table with REPLICA IDENTITY NOTHING cannot be in a
                                   publication that publishes UPDATE/DELETE (the server rejects the UPDATE), so it
                                   sits in a publication with ``publish = 'insert, truncate'``; its UPDATE and
                                   DELETE run but are not published (test_decoding still shows them).
toast_insert / toast_update /      TOAST: 'u' (unchanged-toast) in the new tuple of an UPDATE that leaves the
toast_full_update / ...            10 kB incompressible value alone; under FULL the 'O' tuple holds the whole value.
truncate_*                         T with option bits 0 (two relations), 1 (CASCADE, lists the FK child),
                                   2 (RESTART IDENTITY), 3 (both).
partitioned                        R/I/U/D on the leaves; cross-partition UPDATE = D on old leaf + I on new leaf.
                                   With ``replwire_pub_root`` (publish_via_partition_root): R(root), R(leaf), root OID.
msg_tx / msg_bin                   B, M (flags 1), C. ``messages 'true'`` only.
msg_nontx (+ in aborted txn)       M (flags 0) alone, outside any B…C or S…E; also when its txn rolls back. SQL
                                   ``xid`` column: 0, or the enclosing transaction's xid if it had one.
big_commit                         > logical_decoding_work_mem: streamed S…E (first_segment 1 then 0) … c with
                                   ``streaming``; B…C otherwise (spilled). Contains a transactional M (with [X])
                                   and a non-transactional M (outside S…E), and Y, R, I, U, D on all_types and a T
                                   (all with [X]). A small transaction of another session
                                   (interleaved) commits in the middle of it.
big_abort                          streamed then A (subxid = xid); the SQL interface of PG18 skips it as already
                                   aborted (docs/reference/quirks.md), the live walsender capture (with ``sync``) shows
                                   it on both servers; nothing without streaming.
savepoint                          big subtransaction rolled back: A (subxid ≠ xid) between stream blocks, then c.
                                   Without streaming: B, I (rows outside the savepoint only), C.
origin_small / origin_big          B, O (origin lsn, name), …, C; streamed: S, O (lsn 0/0), … c. Dropped with
                                   ``origin 'none'`` (PG16+). Begin/Commit carry the origin timestamp.
prepared_* (two_phase configs)     b … P then K (COMMIT PREPARED) or r (ROLLBACK PREPARED); a large prepared
                                   transaction with streaming: S…E … p, then K or r. PG18's SQL interface sends
                                   the large rolled-back one as b, P (no changes), r. Without two_phase: B … C at
                                   COMMIT PREPARED, nothing (or a streamed A) for ROLLBACK PREPARED.
unpublished                        nothing on PG15+ (empty transactions are skipped). Same for ``sync_marker``
                                   (only written when a ``sync`` hook is given).
================================  ================================================================================
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

import psycopg

__all__ = [
    "PUBLICATION", "PUBLICATION_NOTHING", "PUBLICATION_ROOT", "DEFAULT_PUBLICATIONS", "ROOT_PUBLICATIONS",
    "ORIGIN_NAME", "BIG_ROWS", "TOAST_LENGTH", "GIDS", "setup_schema", "run_workload",
]

PUBLICATION = "replwire_pub"
PUBLICATION_NOTHING = "replwire_pub_nothing"
PUBLICATION_ROOT = "replwire_pub_root"
#: publication_names for ordinary captures, and for the publish_via_partition_root ones.
DEFAULT_PUBLICATIONS = (PUBLICATION, PUBLICATION_NOTHING)
ROOT_PUBLICATIONS = (PUBLICATION_ROOT, PUBLICATION_NOTHING)

ORIGIN_NAME = "replwire_origin"
#: Rows in each large transaction: well above logical_decoding_work_mem = 64kB (roughly 4 stream segments).
BIG_ROWS = 1500
#: Length of the incompressible TOASTed text value.
TOAST_LENGTH = 10_000
NON_ASCII = "Grüße 日本 🐘"

#: Global transaction identifiers of the two-phase transactions, by workload step.
GIDS = {
    "prepared_small_commit": "replwire: small commit ü",
    "prepared_small_rollback": "replwire_small_rollback",
    "prepared_big_commit": "replwire_big_commit",
    "prepared_big_rollback": "replwire_big_rollback",
}

#: Published tables (all except ri_nothing and unpublished).
PUBLISHED_TABLES = (
    "all_types", "ri_default", "ri_full", "ri_index", "toasty", "toasty_full", "trunc_parent", "trunc_child",
    "trunc_a", "trunc_b", "trunc_seq", "parted", "bulk", "origin_tab", "tp_tab",
)

_SCHEMA = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'très');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TYPE pair AS (a integer, b text);

CREATE TABLE all_types (
    id int PRIMARY KEY,
    c_int2 int2, c_int4 int4, c_int8 int8,
    c_numeric numeric, c_numeric_12_3 numeric(12,3),
    c_float4 float4, c_float8 float8,
    c_bool bool,
    c_text text, c_varchar varchar(20), c_char char(5),
    c_bytea bytea,
    c_date date, c_time time, c_timetz timetz, c_timestamp timestamp, c_timestamptz timestamptz,
    c_interval interval, c_uuid uuid, c_json json, c_jsonb jsonb,
    c_inet inet, c_cidr cidr, c_macaddr macaddr,
    c_int4_arr int4[], c_text_arr text[],
    c_money money, c_bit bit(4), c_varbit varbit,
    c_mood mood, c_mood_arr mood[], c_posint posint, c_pair pair,
    c_oid oid, c_point point, c_aclitem aclitem
);

CREATE TABLE ri_default (id int PRIMARY KEY, val text, note text);
CREATE TABLE ri_full (id int, val text, note text);
ALTER TABLE ri_full REPLICA IDENTITY FULL;
CREATE TABLE ri_index (id int NOT NULL, code text NOT NULL, val text);
CREATE UNIQUE INDEX ri_index_code ON ri_index (code);
ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_code;
CREATE TABLE ri_nothing (id int, val text);
ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING;

CREATE TABLE toasty (id int PRIMARY KEY, big text, small int);
CREATE TABLE toasty_full (id int, big text, small int);
ALTER TABLE toasty_full REPLICA IDENTITY FULL;

CREATE TABLE trunc_parent (id serial PRIMARY KEY, v text);
CREATE TABLE trunc_child (id int PRIMARY KEY, parent_id int REFERENCES trunc_parent (id));
CREATE TABLE trunc_a (id int PRIMARY KEY);
CREATE TABLE trunc_b (id int PRIMARY KEY);
CREATE TABLE trunc_seq (id serial PRIMARY KEY, v text);

CREATE TABLE parted (id int, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu');
CREATE TABLE parted_us PARTITION OF parted FOR VALUES IN ('us');

CREATE TABLE bulk (id int PRIMARY KEY, batch text, payload text);
CREATE TABLE origin_tab (id int PRIMARY KEY, v text);
CREATE TABLE tp_tab (id int PRIMARY KEY, gid text, payload text);
CREATE TABLE unpublished (id int PRIMARY KEY, v text);
CREATE TABLE sync_marker (id serial PRIMARY KEY, at timestamptz DEFAULT now());
"""


def setup_schema(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Create types, tables, publications and the replication origin (run **before** creating slots).

    Returns ``{"types": {name: oid}, "tables": {name: oid}}`` for the user types (``mood``, ``_mood``,
    ``posint``, ``pair``) and every table, partitions included.
    """
    conn.execute(_SCHEMA)
    tables = ", ".join(PUBLISHED_TABLES)
    conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {tables}")
    conn.execute(f"CREATE PUBLICATION {PUBLICATION_NOTHING} FOR TABLE ri_nothing WITH (publish = 'insert, truncate')")
    conn.execute(f"CREATE PUBLICATION {PUBLICATION_ROOT} FOR TABLE {tables} WITH (publish_via_partition_root = true)")
    conn.execute("SELECT pg_replication_origin_create(%s)", (ORIGIN_NAME,))
    types = dict(conn.execute(
        "SELECT typname, oid::int8 FROM pg_type WHERE typname IN ('mood', '_mood', 'posint', 'pair')"
    ).fetchall())
    rels = dict(conn.execute(
        "SELECT relname, oid::int8 FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')"
    ).fetchall())
    return {"types": types, "tables": rels}


def _random_text(n: int, seed: int) -> str:
    """Incompressible (for pglz) ASCII text of length n, reproducible from ``seed``."""
    rnd = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"
    return "".join(rnd.choice(alphabet) for _ in range(n))


class _Recorder:
    """Runs explicit transactions on one autocommit connection and records their xids."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.xids: dict[str, int] = {}
        self.aborted: dict[str, int] = {}

    def begin(self, name: str) -> int:
        self.conn.execute("BEGIN")
        row = self.conn.execute("SELECT txid_current()").fetchone()
        assert row is not None
        xid = int(row[0]) & 0xFFFFFFFF
        self.xids[name] = xid
        return xid

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self, name: str) -> None:
        self.conn.execute("ROLLBACK")
        self.aborted[name] = self.xids.pop(name)

    def txn(self, name: str, *statements: str | tuple[str, tuple[Any, ...]]) -> int:
        xid = self.begin(name)
        for st in statements:
            if isinstance(st, tuple):
                self.conn.execute(st[0], st[1])
            else:
                self.conn.execute(st)
        self.commit()
        return xid


def _emit(conn: psycopg.Connection[Any], messages: list[dict[str, Any]], name: str, transactional: bool,
          prefix: str, content: bytes | str) -> None:
    """pg_logical_emit_message(...) and record what it returned."""
    cast = "text" if isinstance(content, str) else "bytea"
    row = conn.execute(f"SELECT pg_logical_emit_message(%s, %s::text, %s::{cast})::text",
                       (transactional, prefix, content)).fetchone()
    assert row is not None
    messages.append({
        "name": name,
        "transactional": transactional,
        "prefix": prefix,
        "content": content.encode("utf-8") if isinstance(content, str) else bytes(content),
        "lsn": row[0],
    })


def run_workload(server: Any, sync: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run the DML workload on ``server`` (a :class:`tests.pgserver.PgServer`); return the facts.

    ``sync`` is called at the points where a concurrently running walsender must have decoded everything so far
    for the full streaming pattern to appear (before the ROLLBACK of the large aborted transaction, before
    ROLLBACK TO the large savepoint, before ROLLBACK PREPARED of the large prepared transaction): the
    caller's function should force a WAL flush and wait until its walsenders have sent up to it. Without
    ``sync`` the workload never waits.

    Facts (all plain Python values):

    * ``xids``: ``{step: xid}`` of committed transactions (including committed prepared ones);
      ``aborted_xids``: ``{step: xid}`` of rolled-back ones (ROLLBACK and ROLLBACK PREPARED).
    * ``messages``: list of ``{name, transactional, prefix, content (bytes), lsn (text), xid}`` in emission
      order, with the LSN ``pg_logical_emit_message`` returned (it equals the message's LSN on the wire and the
      SQL row's ``lsn``). ``xid`` is the xid of the transaction the message was emitted in, or None when that
      transaction had none. A non-transactional message emitted inside a transaction with an xid carries that
      xid in the SQL interface's ``xid`` column (not 0). ``rolled_back: True`` marks the transactional message
      of a rolled-back transaction (never decoded).
    * ``origin``: ``{name, steps: {step: {"origin_lsn": text, "origin_time": aware datetime}}}``.
    * ``prepared``: ``{step: {"gid", "xid", "outcome": "commit"|"rollback", "rows"}}``.
    * ``toast``: ``{"length", "value_prefix"}``; ``big_rows``; ``end_lsn``: ``pg_current_wal_lsn()`` at the end.
    * ``nothing_ops``: the operations run on ri_nothing (only the INSERT is published).
    """
    facts: dict[str, Any] = {"messages": [], "prepared": {}, "big_rows": BIG_ROWS}
    messages: list[dict[str, Any]] = facts["messages"]
    with server.connect() as conn, server.connect() as conn2:
        rec = _Recorder(conn)

        # -- all common column types ------------------------------------------------------------------------
        acl = conn.execute("SELECT format('%I=r/%I', current_user, current_user)").fetchone()[0]  # type: ignore[index]
        rec.txn(
            "all_types",
            ("""INSERT INTO all_types VALUES
                (1, 32767, 2147483647, 9223372036854775807, 12345678901234567890.123456789, 123456789.123,
                 3.14, 2.718281828459045, true, %s, 'varchar ü', 'ab', '\\x00010203fffe'::bytea,
                 '2024-02-29', '23:59:59.999999', '12:00:00+05:30', '2024-02-29 12:34:56.789',
                 '2024-02-29 12:34:56.789+00', '1 year 2 mons 3 days 04:05:06.7',
                 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2, {"b": null}], "ü": "日本"}',
                 '{"a": [1, 2, {"b": null}], "ü": "日本"}', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03',
                 '{1,2,NULL,-4}', %s, 12.34, B'1010', B'101', 'happy', '{sad,très}', 42, ROW(7, 'x y'),
                 4294967295, '(1.5,-2)', %s::aclitem)""",
             (NON_ASCII, ["a b", "c,d", '"q"', None, "", "ü"], acl)),
            "INSERT INTO all_types (id) VALUES (2)",
            """INSERT INTO all_types VALUES
                (3, -32768, -2147483648, -9223372036854775808, 'NaN', 'NaN', 'NaN', '-Infinity', false,
                 '', '', '', ''::bytea, 'infinity', '00:00', '00:00+00', '-infinity', 'infinity',
                 '-1 days -00:00:01', '00000000-0000-0000-0000-000000000000', '""', '[]', '::1', '::/0',
                 'ff:ff:ff:ff:ff:ff', '{}', '{}', -0.01, B'0000', B'', 'sad', '{}', 1, ROW(NULL, NULL),
                 0, '(0,0)', NULL)""",
            ("""INSERT INTO all_types (id, c_numeric, c_float4, c_float8, c_text, c_json, c_int4_arr, c_pair)
                VALUES (4, '-Infinity', 'Infinity', 1e-300, %s, '{"k": "it''s"}', '{{1,2},{3,4}}',
                        ROW(-1, 'quote " and \\ backslash'))""",
             ("it's a \\ \"quote\"\nnewline\ttab " + NON_ASCII,)),
            "UPDATE all_types SET c_text = 'updated ✓', c_int4 = c_int4 - 1 WHERE id = 1",
            "DELETE FROM all_types WHERE id = 2",
        )

        # -- replica identities -----------------------------------------------------------------------------
        rec.txn(
            "ri_default",
            "INSERT INTO ri_default VALUES (1, 'one', NULL), (2, 'two', 'n2')",
            "UPDATE ri_default SET val = 'one+' WHERE id = 1",  # key unchanged: no old tuple
            "UPDATE ri_default SET id = 20 WHERE id = 2",  # key changed: 'K' old key
            "ALTER TABLE ri_default ADD COLUMN extra int",  # Relation sent again
            "INSERT INTO ri_default VALUES (3, 'three', NULL, 33)",
            "DELETE FROM ri_default WHERE id = 1",
        )
        rec.txn(
            "ri_full",
            "INSERT INTO ri_full VALUES (1, 'one', NULL), (2, 'two', 'n2')",
            "UPDATE ri_full SET val = 'one+' WHERE id = 1",
            "DELETE FROM ri_full WHERE id = 2",
        )
        rec.txn(
            "ri_index",
            "INSERT INTO ri_index VALUES (1, 'c1', 'v1'), (2, 'c2', NULL)",
            "UPDATE ri_index SET val = 'v1+' WHERE code = 'c1'",  # index column unchanged
            "UPDATE ri_index SET code = 'c2+' WHERE code = 'c2'",  # index column changed: 'K'
            "DELETE FROM ri_index WHERE code = 'c1'",
        )
        rec.txn(
            "ri_nothing",
            "INSERT INTO ri_nothing VALUES (1, 'one'), (2, 'two')",
            "UPDATE ri_nothing SET val = 'one+' WHERE id = 1",
            "DELETE FROM ri_nothing WHERE id = 2",
        )
        facts["nothing_ops"] = ["INSERT", "UPDATE", "DELETE"]

        # -- TOAST ------------------------------------------------------------------------------------------
        big1 = _random_text(TOAST_LENGTH, 1)
        big2 = _random_text(TOAST_LENGTH, 2)
        facts["toast"] = {"length": TOAST_LENGTH, "value_prefix": big1[:32], "new_value_prefix": big2[:32]}
        rec.txn("toast_insert", ("INSERT INTO toasty VALUES (1, %s, 1)", (big1,)),
                ("INSERT INTO toasty_full VALUES (1, %s, 1)", (big1,)))
        rec.txn("toast_update", "UPDATE toasty SET small = 2 WHERE id = 1")  # big unchanged: 'u'
        rec.txn("toast_full_update", "UPDATE toasty_full SET small = 2 WHERE id = 1")  # 'O' full old, 'u' new
        rec.txn("toast_update_big", ("UPDATE toasty SET big = %s WHERE id = 1", (big2,)))
        rec.txn("toast_delete", "DELETE FROM toasty WHERE id = 1", "DELETE FROM toasty_full WHERE id = 1")

        # -- TRUNCATE ---------------------------------------------------------------------------------------
        rec.txn(
            "truncate_fill",
            "INSERT INTO trunc_parent (v) VALUES ('p1'), ('p2')",
            "INSERT INTO trunc_child VALUES (1, 1), (2, 2)",
            "INSERT INTO trunc_a VALUES (1)", "INSERT INTO trunc_b VALUES (1)",
            "INSERT INTO trunc_seq (v) VALUES ('s1')",
        )
        rec.txn("truncate_plain", "TRUNCATE trunc_a, trunc_b")  # flags 0, two relids
        rec.txn("truncate_cascade", "TRUNCATE trunc_parent CASCADE")  # flags 1, parent + child
        rec.txn("truncate_restart", "TRUNCATE trunc_seq RESTART IDENTITY")  # flags 2
        rec.txn(
            "truncate_refill",
            "INSERT INTO trunc_parent (v) VALUES ('p3')",
            "INSERT INTO trunc_child SELECT 3, max(id) FROM trunc_parent",
        )
        rec.txn("truncate_restart_cascade", "TRUNCATE trunc_parent RESTART IDENTITY CASCADE")  # flags 3

        # -- partitions -------------------------------------------------------------------------------------
        rec.txn(
            "partitioned",
            "INSERT INTO parted VALUES (1, 'eu', 'a'), (2, 'us', 'b'), (3, 'eu', 'c')",
            "UPDATE parted SET v = 'a+' WHERE id = 1",
            "UPDATE parted SET region = 'us' WHERE id = 3",  # cross-partition: D + I
            "DELETE FROM parted WHERE id = 2",
        )

        # -- logical decoding messages ----------------------------------------------------------------------
        rec.begin("msg_tx")
        _emit(conn, messages, "msg_tx", True, "replwire.tx", "hello")
        messages[-1]["xid"] = rec.xids["msg_tx"]
        rec.commit()
        _emit(conn, messages, "msg_nontx", False, "replwire.nontx", NON_ASCII)
        messages[-1]["xid"] = None
        rec.begin("msg_bin")
        _emit(conn, messages, "msg_bin", True, "replwire.bin", b"\x00\x01\xfe\xff")
        _emit(conn, messages, "msg_empty", True, "replwire.empty", b"")
        messages[-2]["xid"] = messages[-1]["xid"] = rec.xids["msg_bin"]
        rec.commit()
        rec.begin("msg_aborted")
        conn.execute("INSERT INTO bulk VALUES (-1, 'msg_aborted', 'rolled back')")
        _emit(conn, messages, "msg_tx_in_aborted", True, "replwire.lost", "never decoded")
        messages[-1]["xid"] = rec.xids["msg_aborted"]
        messages[-1]["rolled_back"] = True
        _emit(conn, messages, "msg_nontx_in_aborted", False, "replwire.nontx", "survives rollback")
        messages[-1]["xid"] = rec.xids["msg_aborted"]
        rec.rollback("msg_aborted")

        # -- large transactions -----------------------------------------------------------------------------
        half = BIG_ROWS // 2
        fill = "SELECT g, %s, repeat(md5(g::text), 3) FROM generate_series(%s::int, %s::int) g"
        rec.begin("big_commit")
        conn.execute("INSERT INTO bulk " + fill, ("big_commit", 1, half))
        _emit(conn, messages, "msg_nontx_in_big", False, "replwire.nontx", "outside the stream")
        messages[-1]["xid"] = rec.xids["big_commit"]
        # another session commits while big_commit is open: its B…C lands between stream blocks
        rec2 = _Recorder(conn2)
        rec2.txn("interleaved", "INSERT INTO bulk VALUES (-2, 'interleaved', 'small')")
        conn.execute("INSERT INTO bulk " + fill, ("big_commit", half + 1, BIG_ROWS))
        # inside the stream: user types (Type and Relation carry the Xid), Update, Delete and Truncate
        conn.execute("INSERT INTO all_types (id, c_mood, c_posint, c_pair, c_text) "
                     "VALUES (1000, 'très', 7, ROW(1, 'in'), 'streamed')")
        conn.execute("UPDATE all_types SET c_mood = 'ok' WHERE id = 1000")
        conn.execute("DELETE FROM all_types WHERE id = 1000")
        conn.execute("TRUNCATE trunc_b")
        _emit(conn, messages, "msg_tx_in_big", True, "replwire.stream", "inside the stream")
        messages[-1]["xid"] = rec.xids["big_commit"]
        rec.commit()
        rec.xids["interleaved"] = rec2.xids["interleaved"]

        rec.begin("big_abort")
        conn.execute("INSERT INTO bulk " + fill, ("big_abort", 10001, 10000 + BIG_ROWS))
        if sync:
            sync()
        rec.rollback("big_abort")

        rec.begin("savepoint")
        conn.execute("INSERT INTO bulk VALUES (20001, 'savepoint', 'before')")
        conn.execute("SAVEPOINT s1")
        conn.execute("INSERT INTO bulk " + fill, ("savepoint_rolled_back", 20002, 20001 + BIG_ROWS))
        if sync:
            sync()
        conn.execute("ROLLBACK TO SAVEPOINT s1")
        conn.execute("INSERT INTO bulk VALUES (30001, 'savepoint', 'after'), (30002, 'savepoint', 'after')")
        rec.commit()

        # -- replication origin -----------------------------------------------------------------------------
        origin_steps: dict[str, dict[str, Any]] = {}
        conn2.execute("SELECT pg_replication_origin_session_setup(%s)", (ORIGIN_NAME,))
        try:
            for step, lsn, when, rows in (
                ("origin_small", "0/ABCDEF", dt.datetime(2021, 2, 3, 4, 5, 6, 789012, tzinfo=dt.timezone.utc), 2),
                ("origin_big", "0/ABCDF0", dt.datetime(2022, 3, 4, 5, 6, 7, 890123, tzinfo=dt.timezone.utc), BIG_ROWS),
            ):
                rec2.begin(step)
                conn2.execute("SELECT pg_replication_origin_xact_setup(%s, %s)", (lsn, when))
                base = 1000 if step == "origin_small" else 100000
                conn2.execute("INSERT INTO origin_tab SELECT g, repeat('o', 80) "
                              "FROM generate_series(%s::int, %s::int) g",
                              (base, base + rows - 1))
                rec2.commit()
                rec.xids[step] = rec2.xids[step]
                origin_steps[step] = {"origin_lsn": lsn, "origin_time": when}
        finally:
            conn2.execute("SELECT pg_replication_origin_session_reset()")
        facts["origin"] = {"name": ORIGIN_NAME, "steps": origin_steps}

        # -- two-phase commit -------------------------------------------------------------------------------
        for step, rows, outcome in (
            ("prepared_small_commit", 2, "commit"),
            ("prepared_small_rollback", 2, "rollback"),
            ("prepared_big_commit", BIG_ROWS, "commit"),
            ("prepared_big_rollback", BIG_ROWS, "rollback"),
        ):
            gid = GIDS[step]
            base = {"prepared_small_commit": 1, "prepared_small_rollback": 100,
                    "prepared_big_commit": 10000, "prepared_big_rollback": 20000}[step]
            xid = rec.begin(step)
            conn.execute("INSERT INTO tp_tab SELECT g, %s, repeat(md5(g::text), 3) "
                         "FROM generate_series(%s::int, %s::int) g",
                         (gid, base, base + rows - 1))
            conn.execute("PREPARE TRANSACTION %s" % _literal(gid))
            if outcome == "commit":
                conn.execute("COMMIT PREPARED %s" % _literal(gid))
            else:
                if sync and rows > 2:
                    sync()
                conn.execute("ROLLBACK PREPARED %s" % _literal(gid))
                rec.aborted[step] = rec.xids.pop(step)
            facts["prepared"][step] = {"gid": gid, "xid": xid, "outcome": outcome, "rows": rows}

        # -- a transaction with nothing published ------------------------------------------------------------
        rec.txn("unpublished", "INSERT INTO unpublished VALUES (1, 'x')")

        facts["xids"] = rec.xids
        facts["aborted_xids"] = rec.aborted
        facts["end_lsn"] = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]
    return facts


def _literal(s: str) -> str:
    """A SQL string literal (PREPARE TRANSACTION takes no bind parameters)."""
    return "'" + s.replace("'", "''") + "'"
