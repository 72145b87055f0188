"""The server side of reading a logical replication slot: the publication and the slot checked (or created),
the server's version and its WAL end -- the SQL and its checks, once, for every reader of a slot.

Strategy: every function takes a DB-API cursor of an ordinary connection in autocommit mode (a psycopg2
cursor, as live capture uses, or a psycopg 3 one, as the Spark streaming source uses): only ``execute(sql,
params)`` and ``fetchone()`` are called, and the SQL uses ``%s`` parameters, which both drivers take.  A check
that fails raises :class:`SlotError`; each reader turns it into its own error class.  Nothing here keeps a
connection or any state.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import ReplwireError
from ..options import quote_identifier
from ..scalars import LSN

__all__ = ["FAILOVER_VERSION", "Cursor", "SlotError", "check_publication", "check_slot", "has_failover",
           "server_version", "wal_end"]

#: The first ``server_version_num`` with failover slots (a logical slot a standby synchronises: PostgreSQL 17).
FAILOVER_VERSION = 170000


class SlotError(ReplwireError, RuntimeError):
    """The server, its publication or its slot is not as the reader needs them."""


class Cursor(Protocol):
    """What is used of a DB-API cursor (psycopg2's and psycopg 3's both fit)."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...

    def fetchone(self) -> Any: ...


#: The slot, as the checks need it: ``two_phase`` and ``failover`` through JSON, as the columns exist from
#: PostgreSQL 15 and 17 only.
_SLOT = ("SELECT plugin, confirmed_flush_lsn::text, to_jsonb(s) ->> 'two_phase' = 'true', database, "
         "current_database(), to_jsonb(s) ->> 'failover' = 'true' FROM pg_replication_slots AS s "
         "WHERE slot_name = %s")
#: The WAL position a read of the slot through the SQL functions reaches at least, when taken just before it
#: (the replay position on a standby).
_WAL_END = ("SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
            "ELSE pg_current_wal_flush_lsn() END)::text")


def server_version(cur: Cursor) -> int:
    """The server's ``server_version_num`` (``160004`` for 16.4)."""
    cur.execute("SELECT current_setting('server_version_num')::int")
    return int(cur.fetchone()[0])


def wal_end(cur: Cursor) -> LSN:
    """Where the server's WAL ends (flushed; replayed, on a standby): a read of the slot through the SQL
    functions started after this call reads at least up to here."""
    cur.execute(_WAL_END)
    return LSN(cur.fetchone()[0])


def check_publication(cur: Cursor, publication: str, *, create: bool = False, hint: str = "") -> None:
    """Check that ``publication`` exists; with ``create``, create it ``FOR ALL TABLES`` when it does not.
    ``hint`` ends the error for a missing one (how the reader's user gets it created)."""
    cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
    if cur.fetchone() is not None:
        return
    if not create:
        raise SlotError(f"publication {publication!r} does not exist{' ' if hint else ''}{hint}")
    cur.execute(f"CREATE PUBLICATION {quote_identifier(publication)} FOR ALL TABLES")


def slot_exists(cur: Cursor, slot: str) -> bool:
    """Whether the replication slot ``slot`` exists."""
    cur.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    return cur.fetchone() is not None


def check_slot(cur: Cursor, slot: str, *, two_phase: bool | None = None, create: bool = False,
               hint: str = "", failover: bool = False) -> LSN:
    """The confirmed position of the logical replication slot ``slot``, after checking that it decodes with
    pgoutput, in this database, with two-phase decoding as asked: ``two_phase`` True needs a slot created
    with two_phase, False one created without, None takes either.  With ``create``, a missing slot is
    created (with two_phase when ``two_phase`` is True, as a failover slot with ``failover``: PostgreSQL 17+)
    at the current WAL position, which is returned; without, ``hint`` ends the error for a missing one.
    With ``failover`` an existing slot must be a failover slot (:func:`has_failover` tells; the error says
    how to make it one)."""
    cur.execute(_SLOT, (slot,))
    row = cur.fetchone()
    if row is None:
        if not create:
            raise SlotError(f"replication slot {slot!r} does not exist{' ' if hint else ''}{hint}")
        if two_phase or failover:
            cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput', false, %s"
                        + (", true)" if failover else ")"), (slot, bool(two_phase)))
        else:
            cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        return LSN(cur.fetchone()[0])
    plugin, confirmed, slot_two_phase, database, here, slot_failover = row
    if plugin != "pgoutput":
        raise SlotError(f"slot {slot!r} uses {plugin or 'no plugin (a physical slot)'}, not pgoutput")
    if two_phase and not slot_two_phase:
        raise SlotError(f"slot {slot!r} was not created with two_phase")
    if two_phase is False and slot_two_phase:
        raise SlotError(f"slot {slot!r} was created with two_phase, which makes the server send a prepared "
                        "transaction at PREPARE; this source needs it at COMMIT PREPARED (use a slot without "
                        "two_phase)")
    if database != here:
        raise SlotError(f"slot {slot!r} belongs to database {database!r}, not {here!r}")
    if failover and not slot_failover:
        raise SlotError(f"slot {slot!r} is not a failover slot (it was created without FAILOVER): make it one "
                        f"with ALTER_REPLICATION_SLOT {quote_identifier(slot)} (FAILOVER true) over a replication "
                        "connection (psql 'dbname=... replication=database'), or drop it and let the capture "
                        "create it")
    return LSN(confirmed or "0/0")


def has_failover(cur: Cursor, slot: str) -> bool | None:
    """Whether the slot ``slot`` is a failover slot (``None``: no such slot)."""
    cur.execute("SELECT to_jsonb(s) ->> 'failover' = 'true' FROM pg_replication_slots AS s WHERE slot_name = %s",
                (slot,))
    row = cur.fetchone()
    return None if row is None else bool(row[0])
