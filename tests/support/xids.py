"""A workload whose changes come from subtransactions, with what the server says about each row's transaction.

:func:`run_xid_workload` creates a table and a slot (``two_phase`` on) in a database of its own, then commits:

* ``streamed``: a transaction larger than ``logical_decoding_work_mem`` (64 kB on the test servers), so the
  server streams it while it runs, with rows inserted by the top-level transaction, a rolled-back savepoint,
  rows inserted after that rollback (in a new subtransaction: ``ROLLBACK TO`` keeps the savepoint open), and
  a released savepoint;
* ``two_phase``: a small transaction with a released savepoint, prepared as ``GID`` and then committed;
* ``plain``: a small transaction with rows after a rolled-back savepoint.

The expected values come from the server, not from replwire: the top-level xid is ``pg_current_xact_id()``
taken inside each transaction, and the xid of the (sub)transaction that inserted a row is that row's
``xmin``.
"""

from __future__ import annotations

from typing import Any

GID = "xid-workload-gid"
TABLE = "xid_t"
#: The table: a timestamp with and one without time zone too, for the Parquet timestamp checks.
CREATE = f"""CREATE TABLE {TABLE} (id int PRIMARY KEY, part text, v text,
    at timestamptz DEFAULT '2024-05-06 07:08:09.123456+02', wall timestamp DEFAULT '2024-05-06 07:08:09.123456')"""


def _insert(conn: Any, first: int, last: int, part: str) -> None:
    conn.execute(f"INSERT INTO {TABLE} (id, part, v) SELECT g, %s, repeat('v', 60) "
                 "FROM generate_series(%s::int, %s::int) g", (part, first, last))


def _top_xid(conn: Any) -> int:
    return int(conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0])


def run_xid_workload(conn: Any, tag: str) -> dict[str, Any]:
    """Run the workload on ``conn`` (autocommit) with publication ``pub_<tag>`` and slot ``slot_<tag>``;
    return ``{"top": {part: top-level xid}, "xmin": {id: xmin}, "part": {id: part}}`` for the committed rows."""
    conn.execute(CREATE)
    conn.execute(f"CREATE PUBLICATION pub_{tag} FOR TABLE {TABLE}")
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, true)", (f"slot_{tag}",))
    top = {}
    with conn.transaction():
        top["streamed"] = _top_xid(conn)
        _insert(conn, 1, 1500, "streamed")
        conn.execute("SAVEPOINT a")
        _insert(conn, 100_001, 100_500, "streamed")  # rolled back
        conn.execute("ROLLBACK TO SAVEPOINT a")
        _insert(conn, 2001, 2500, "streamed")  # after the rollback: a new subtransaction of savepoint a
        conn.execute("SAVEPOINT b")
        _insert(conn, 3001, 3500, "streamed")
        conn.execute("RELEASE SAVEPOINT b")
    conn.execute("BEGIN")
    top["two_phase"] = _top_xid(conn)
    _insert(conn, 4001, 4003, "two_phase")
    conn.execute("SAVEPOINT c")
    _insert(conn, 4004, 4006, "two_phase")
    conn.execute("RELEASE SAVEPOINT c")
    conn.execute(f"PREPARE TRANSACTION '{GID}'")
    conn.execute(f"COMMIT PREPARED '{GID}'")
    with conn.transaction():
        top["plain"] = _top_xid(conn)
        conn.execute("SAVEPOINT d")
        _insert(conn, 5001, 5003, "plain")
        conn.execute("ROLLBACK TO SAVEPOINT d")
        _insert(conn, 5004, 5006, "plain")
    rows = conn.execute(f"SELECT id, part, xmin::text::bigint FROM {TABLE}").fetchall()
    return {"top": top, "xmin": {i: x for i, _, x in rows}, "part": {i: p for i, p, _ in rows}}


def peek_options(tag: str) -> list[str]:
    """The pgoutput options of the slot's SQL-interface peek: protocol 4, streaming, two-phase."""
    return ["proto_version", "4", "publication_names", f"pub_{tag}", "streaming", "on", "two_phase", "on"]


def expected(facts: dict[str, Any], row_id: int) -> tuple[int, int | None, str | None]:
    """``(xid, subxid, gid)`` of the change that inserted row ``row_id``: the top-level xid; the xid of the
    (sub)transaction that inserted it for the streamed transaction (the only one the server streams), else
    None; the GID for the two-phase transaction."""
    part = facts["part"][row_id]
    return (facts["top"][part], facts["xmin"][row_id] if part == "streamed" else None,
            GID if part == "two_phase" else None)
