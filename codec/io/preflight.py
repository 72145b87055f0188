"""What operating a capture asks of the server: every prerequisite of ``replwire capture`` checked before
anything is created (:func:`check`), the logical replication slots listed (:func:`list_slots`) and one dropped
(:func:`drop_slot`) -- the SQL of ``replwire check`` and ``replwire slot``.

Strategy: each function takes a DSN, opens its own connections with :func:`~replwire.codec.io.connection.
connect` and returns structured results (:class:`Finding`, :class:`SlotRow`); the commands only format them.
Columns that exist on some server versions only are asked for by ``server_version_num``.  Errors are
:class:`~replwire.codec.io.connection.CaptureError` (:class:`SlotNotFound`, :class:`SlotActive` for the two a
caller tells apart), naming what failed and what to do.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..options import quote_identifier
from .connection import CaptureError, connect, server_error

__all__ = ["Finding", "SlotActive", "SlotNotFound", "SlotRow", "check", "drop_slot", "list_slots"]


def _ident(name: str) -> str:
    """``name`` as SQL spells it: bare when it is a plain lower-case word, quoted otherwise."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else quote_identifier(name)


@dataclass(frozen=True)
class Finding:
    """One prerequisite as found: ``status`` ``"ok"``, ``"warn"`` or ``"FAIL"``; ``what`` was checked; what was
    ``found``; and ``change``, what to change (empty when nothing needs to)."""

    status: str
    what: str
    found: str
    change: str = ""

    def line(self) -> str:
        """``ok|FAIL|warn  <what>: <found>; <what to change>`` (without the last part when there is nothing)."""
        return f"{self.status:<4}  {self.what}: {self.found}{'; ' + self.change if self.change else ''}"


def _settings(cur: Any, names: tuple[str, ...]) -> dict[str, str]:
    cur.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", (list(names),))
    return {name: setting for name, setting in cur.fetchall()}


def _wal_level(cur: Any) -> list[Finding]:
    found = _settings(cur, ("wal_level", "effective_wal_level"))
    level, effective = found.get("wal_level", "?"), found.get("effective_wal_level")
    fix = "set wal_level = logical (ALTER SYSTEM SET wal_level = logical) and restart the server"
    if effective is None:
        return [Finding("ok", "wal_level", level) if level == "logical" else Finding("FAIL", "wal_level", level, fix)]
    text = f"{level} (effective_wal_level {effective})"
    if effective == "logical" or level == "logical":
        return [Finding("ok", "wal_level", text)]
    if level == "replica":  # (the server raises it to logical when the first logical slot is created)
        return [Finding("warn", "wal_level", text, "logical decoding is enabled when the first logical slot is "
                        "created; to have it always, " + fix)]
    return [Finding("FAIL", "wal_level", text, fix)]


def _capacity(cur: Any, slot_exists: bool) -> list[Finding]:
    limits = _settings(cur, ("max_replication_slots", "max_wal_senders"))
    cur.execute("SELECT count(*) FROM pg_replication_slots")
    slots = int(cur.fetchone()[0])
    cur.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'")
    senders = int(cur.fetchone()[0])
    findings = []
    max_slots = int(limits.get("max_replication_slots", "0"))
    free = max_slots - slots
    text = f"{free} free (max_replication_slots {max_slots}, {slots} used)"
    if free > 0 or slot_exists:
        findings.append(Finding("ok", "replication slots", text + (", the slot exists" if free <= 0 else "")))
    else:
        findings.append(Finding("FAIL", "replication slots", text, "drop unused slots (replwire slot list, replwire "
                                "slot drop) or raise max_replication_slots and restart the server"))
    max_senders = int(limits.get("max_wal_senders", "0"))
    free = max_senders - senders
    text = f"{free} free (max_wal_senders {max_senders}, {senders} active)"
    if free > 0:
        findings.append(Finding("ok", "WAL senders", text))
    else:
        findings.append(Finding("FAIL", "WAL senders", text, "stop a replication client or raise max_wal_senders "
                                "and restart the server"))
    return findings


def _role(cur: Any) -> list[Finding]:
    cur.execute("SELECT current_user, rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user")
    user, superuser, replication = cur.fetchone()
    if superuser:
        return [Finding("ok", f"role {user}", "superuser")]
    if replication:
        return [Finding("ok", f"role {user}", "REPLICATION")]
    return [Finding("FAIL", f"role {user}", "neither REPLICATION nor superuser",
                    f"ALTER ROLE {_ident(user)} REPLICATION (as a superuser)")]


#: What to change for a pg_hba.conf refusal.
_HBA_FIX = ("allow this user, database and host in pg_hba.conf (a logical replication connection matches the lines "
            "of its database, not the 'replication' ones) and reload the server")


def _replication_connection(dsn: str) -> list[Finding]:
    try:
        conn = connect(dsn, replication=True)
    except CaptureError as error:  # (the server's words, without connect()'s own)
        text = str(error).removeprefix("cannot open a replication connection: ").split(" (it needs a user", 1)[0]
        if "pg_hba.conf" in text:
            fix = _HBA_FIX
        elif "max_wal_senders" in text and "exceeds" in text:
            fix = "stop a replication client or raise max_wal_senders"
        elif "permission denied" in text or "must be" in text:
            fix = "give the role REPLICATION (ALTER ROLE ... REPLICATION)"
        else:
            fix = "check the DSN and the server's log"
        return [Finding("FAIL", "replication connection", text, fix)]
    try:
        pid = conn.get_backend_pid()
    finally:
        conn.close()
    return [Finding("ok", "replication connection", f"accepted (walsender pid {pid})")]


#: Published tables whose UPDATE and DELETE the server refuses while the publication publishes them: no
#: replica identity (NOTHING, DEFAULT without a primary key, USING INDEX of an index that is gone).  A
#: partitioned table is checked in its partitions (the server checks the partition a row is in).
_NO_IDENTITY = """
WITH published AS (
    SELECT DISTINCT coalesce(tree.relid, c.oid) AS relid  -- (no tree: a table that is not partitioned)
    FROM pg_publication_tables AS t
    JOIN pg_namespace AS n ON n.nspname = t.schemaname
    JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = t.tablename
    LEFT JOIN LATERAL pg_partition_tree(c.oid) AS tree ON tree.isleaf
    WHERE t.pubname = %s
)
SELECT n.nspname, c.relname, c.relreplident::text
FROM published AS p
JOIN pg_class AS c ON c.oid = p.relid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND (
    c.relreplident = 'n'
    OR (c.relreplident = 'd' AND NOT EXISTS (SELECT 1 FROM pg_index AS i WHERE i.indrelid = c.oid AND i.indisprimary))
    OR (c.relreplident = 'i' AND NOT EXISTS (SELECT 1 FROM pg_index AS i WHERE i.indrelid = c.oid
                                                                          AND i.indisreplident)))
ORDER BY 1, 2
"""


def _publication(cur: Any, publication: str) -> list[Finding]:
    cur.execute("SELECT puballtables, pubupdate, pubdelete FROM pg_publication WHERE pubname = %s", (publication,))
    row = cur.fetchone()
    what = f"publication {publication}"
    if row is None:
        cur.execute("SELECT current_database()")
        return [Finding("FAIL", what, f"does not exist in database {cur.fetchone()[0]}",
                        f"CREATE PUBLICATION {_ident(publication)} FOR ALL TABLES (or FOR TABLE ...), or "
                        "run replwire capture with --create-publication")]
    all_tables, update, delete = row
    cur.execute("SELECT count(*) FROM pg_publication_tables WHERE pubname = %s", (publication,))
    count = int(cur.fetchone()[0])
    tables = f"{count} table{'s' if count != 1 else ''}"
    findings = [Finding("ok" if count else "warn", what,
                        f"exists, {'FOR ALL TABLES, ' if all_tables else ''}{tables}",
                        "" if count else "add tables to it (ALTER PUBLICATION ... ADD TABLE ...)")]
    published = [op for op, on in (("update", update), ("delete", delete)) if on]
    if not published:
        findings.append(Finding("ok", "replica identity", "the publication publishes no update or delete"))
        return findings
    cur.execute(_NO_IDENTITY, (publication,))
    failing = cur.fetchall()
    for schema, table, identity in failing:
        name = f"{_ident(schema)}.{_ident(table)}"
        found = {"n": "REPLICA IDENTITY NOTHING", "d": "no primary key and REPLICA IDENTITY DEFAULT",
                 "i": "REPLICA IDENTITY USING INDEX of an index that no longer exists"}[identity]
        findings.append(Finding("FAIL", f"replica identity of {name}",
                                f"{found}: the server refuses its {' and '.join(u.upper() for u in published)} "
                                "while the publication publishes them",
                                f"ALTER TABLE {name} REPLICA IDENTITY FULL (or add a primary key, or REPLICA "
                                "IDENTITY USING INDEX of a unique index on NOT NULL columns)"))
    if not failing:
        findings.append(Finding("ok", "replica identity", f"every published table has one ({tables})"))
    return findings


def _slot(cur: Any, slot: str, row: Any) -> list[Finding]:
    what = f"slot {slot}"
    if row is None:
        return [Finding("ok", what, "absent (replwire capture creates it, with pgoutput)")]
    plugin, slot_type, database, active_pid, wal_status, here = row
    findings = []
    if slot_type != "logical":
        findings.append(Finding("FAIL", what, "a physical slot", "choose another --slot name"))
        return findings
    found = f"exists, plugin {plugin}, database {database}"
    if plugin != "pgoutput":
        findings.append(Finding("FAIL", what, found, f"replwire reads pgoutput slots: choose another --slot name, or "
                                f"drop this one (replwire slot drop {slot})"))
    elif database != here:
        findings.append(Finding("FAIL", what, found, f"a slot decodes its own database only: connect to "
                                f"{database}, or choose another --slot name"))
    elif wal_status == "lost":
        findings.append(Finding("FAIL", what, found + ", wal_status lost (the WAL it needs was removed)",
                                f"drop it (replwire slot drop {slot}) and capture from a new slot"))
    else:
        findings.append(Finding("ok", what, found))
    if active_pid is not None:
        findings.append(Finding("warn", f"{what} in use", f"active for walsender pid {active_pid}",
                                "a capture cannot read it while another client does: stop that client"))
    return findings


def _failover(cur: Any, slot: str) -> list[Finding]:
    """PostgreSQL 17+: a warning when the server has a physical standby (a physical slot) but the slot is not
    a failover slot, or when it is one but ``synchronized_standby_slots`` is empty (a capture may then confirm
    changes the standby has not received: after a failover they are gone from the promoted standby)."""
    cur.execute("SELECT current_setting('server_version_num')::int >= 170000")
    if not cur.fetchone()[0]:
        return []
    cur.execute("SELECT s.failover, current_setting('synchronized_standby_slots'), (SELECT string_agg(slot_name, "
                "', ') FROM pg_replication_slots WHERE slot_type = 'physical') FROM pg_replication_slots AS s "
                "WHERE slot_name = %s", (slot,))
    failover, standby_slots, physical = cur.fetchone()
    what = f"slot {slot} failover"
    if not failover:
        if not physical:
            return []
        return [Finding("warn", what, f"off, and the server has physical slots ({physical})",
                        "a standby does not keep this slot: after a failover it is gone; capture with --failover "
                        "(it makes the slot a failover slot) and set sync_replication_slots = on on the standby")]
    if not standby_slots:
        return [Finding("warn", what, "on, but synchronized_standby_slots is empty",
                        "set synchronized_standby_slots to the standby's physical slot (primary_slot_name), so the "
                        "capture never gets changes the standby has not received")]
    return [Finding("ok", what, f"on (synchronized_standby_slots {standby_slots})")]


def check(dsn: str, publication: str, slot: str | None = None) -> list[Finding]:
    """Every server prerequisite of ``replwire capture --publication publication [--slot slot]``, in order:
    ``wal_level``, free replication slots and WAL senders, the role's REPLICATION, a replication connection,
    the publication and its tables' replica identity, and with ``slot`` the slot.  Nothing is created.  A
    server that cannot be reached at all is a single ``FAIL`` finding."""
    import psycopg2

    try:
        conn = connect(dsn)
    except CaptureError as error:
        text = str(error).removeprefix("cannot connect to the server: ").removesuffix(" (check the DSN)")
        return [Finding("FAIL", "connection", text, _HBA_FIX if "pg_hba.conf" in text else "check the DSN")]
    try:
        conn.autocommit = True
        cur = conn.cursor()
        slot_row = None
        if slot is not None:
            cur.execute("SELECT plugin, slot_type, database, active_pid, to_jsonb(s) ->> 'wal_status', "
                        "current_database() FROM pg_replication_slots AS s WHERE slot_name = %s", (slot,))
            slot_row = cur.fetchone()
        findings = _wal_level(cur) + _capacity(cur, slot_row is not None) + _role(cur)
        findings += _replication_connection(dsn)
        findings += _publication(cur, publication)
        if slot is not None:
            findings += _slot(cur, slot, slot_row)
            if slot_row is not None and slot_row[1] == "logical":
                findings += _failover(cur, slot)
    except psycopg2.Error as error:
        raise CaptureError(f"cannot check the server: {server_error(error)}") from None
    finally:
        conn.close()
    return findings


@dataclass(frozen=True)
class SlotRow:
    """A logical replication slot as ``pg_replication_slots`` shows it, with its lag (bytes from its confirmed
    position to the server's WAL end) and the WAL it retains (bytes from its restart position); ``extra``:
    the columns of newer servers (``inactive_since``, ``failover``, ``synced`` from PostgreSQL 17)."""

    name: str
    plugin: str | None
    database: str | None
    active: bool
    active_pid: int | None
    restart_lsn: str | None
    confirmed_flush_lsn: str | None
    lag_bytes: int | None
    retained_bytes: int | None
    wal_status: str | None
    safe_wal_size: int | None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready values (numbers as numbers; timestamps in ISO 8601)."""
        row = {"slot_name": self.name, "plugin": self.plugin, "database": self.database, "active": self.active,
               "active_pid": self.active_pid, "restart_lsn": self.restart_lsn,
               "confirmed_flush_lsn": self.confirmed_flush_lsn, "lag_bytes": self.lag_bytes,
               "retained_bytes": self.retained_bytes, "wal_status": self.wal_status,
               "safe_wal_size": self.safe_wal_size}
        for key, value in self.extra.items():
            row[key] = value.isoformat() if hasattr(value, "isoformat") else value
        return row


#: The server's WAL end: where it writes (where it has replayed to, on a standby).
_WAL_NOW = "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END"
#: The columns of newer servers, by the server_version_num they appear in.
_NEWER = (("inactive_since", 170000), ("failover", 170000), ("synced", 170000))


def list_slots(dsn: str) -> list[SlotRow]:
    """The server's logical replication slots, by name."""
    import psycopg2

    conn = connect(dsn)
    try:
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("SELECT current_setting('server_version_num')::int")
        version = int(cur.fetchone()[0])
        newer = [name for name, since in _NEWER if version >= since]
        cur.execute(
            "SELECT slot_name, plugin, database, active, active_pid, restart_lsn::text, confirmed_flush_lsn::text, "
            "pg_wal_lsn_diff(w.now, confirmed_flush_lsn)::bigint, pg_wal_lsn_diff(w.now, restart_lsn)::bigint, "
            f"wal_status, safe_wal_size{''.join(', ' + name for name in newer)} "
            f"FROM pg_replication_slots, (SELECT {_WAL_NOW} AS now) AS w "
            "WHERE slot_type = 'logical' ORDER BY slot_name")
        rows = cur.fetchall()
    except psycopg2.Error as error:
        raise CaptureError(f"cannot list the slots: {server_error(error)}") from None
    finally:
        conn.close()
    return [SlotRow(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[10],
                    dict(zip(newer, row[11:]))) for row in rows]


class SlotNotFound(CaptureError):
    """No replication slot of that name on the server."""


class SlotActive(CaptureError):
    """The slot is in use by a walsender (``pid``), and dropping it was not forced."""

    def __init__(self, message: str, pid: int) -> None:
        super().__init__(message)
        self.pid = pid


def drop_slot(dsn: str, slot: str, *, force: bool = False, timeout: float = 10.0) -> int | None:
    """Drop the replication slot ``slot``; returns the pid of the walsender terminated to drop it (``force``),
    or ``None``.  Without ``force`` an active slot is :class:`SlotActive`; with it, the walsender that holds it
    is terminated (``pg_terminate_backend``) -- again if its client reconnects -- until the drop succeeds or
    ``timeout`` seconds pass.  A missing slot is :class:`SlotNotFound`."""
    import psycopg2
    import psycopg2.errors

    conn = connect(dsn)
    terminated: int | None = None
    try:
        conn.autocommit = True
        cur = conn.cursor()
        deadline = time.monotonic() + timeout
        while True:
            cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            row = cur.fetchone()
            if row is None:
                if terminated is not None:  # (its client dropped it: a temporary slot, say)
                    return terminated
                raise SlotNotFound(f"no replication slot {slot!r} on this server (replwire slot list shows the slots)")
            pid = row[0]
            if pid is not None:
                if not force:
                    raise SlotActive(f"slot {slot!r} is active: walsender pid {pid} is reading it; stop its client "
                                     "first (a replwire capture: Ctrl-C or SIGTERM), or give --force to terminate "
                                     f"the walsender (pg_terminate_backend({pid})) and drop the slot", pid)
                cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
                terminated = int(pid)
            try:
                cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                return terminated
            except psycopg2.errors.ObjectInUse:  # (the walsender is still exiting, or its client came back)
                if time.monotonic() > deadline:
                    raise CaptureError(f"slot {slot!r} is still active after {timeout:g} s of terminating its "
                                       "walsender: its client keeps reconnecting; stop it") from None
                time.sleep(0.05)
            except psycopg2.errors.UndefinedObject:
                if terminated is not None:
                    return terminated
                raise SlotNotFound(f"no replication slot {slot!r} on this server (replwire slot list shows the "
                                   "slots)") from None
    except psycopg2.Error as error:
        raise CaptureError(f"cannot drop slot {slot!r}: {server_error(error)}") from None
    finally:
        conn.close()
