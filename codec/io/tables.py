"""The published tables as a copy of them reads them: the initial snapshot's and a backfill's.

Strategy: one query of ``pg_publication_tables`` gives the tables of a publication with their row filters
(PostgreSQL 15+) and published column lists; per table its columns, in attnum order, with the key flags
pgoutput would send (the replica identity index's columns, the primary key's by default, every column under
``REPLICA IDENTITY FULL``), and the Type messages of its user-defined column types.  A :class:`Table` is what
a copy needs of one: its Relation, exactly as pgoutput would describe it, and the ``COPY`` that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..messages import Relation, RelationColumn, Type
from ..options import quote_identifier
from ..stream import snapshot_records
from .connection import CaptureError

__all__ = ["BINARY_TRAILER", "Table", "after_binary_header", "check_select", "published_tables", "type_message"]

#: The first OID of objects not created by initdb's bootstrap: pgoutput sends a Type message for these.
_FIRST_GENBKI_OID = 10000
#: ``COPY ... (FORMAT binary)``'s last data message: a field count of -1 (a row never has one).
BINARY_TRAILER = b"\xff\xff"


def after_binary_header(data: bytes, name: str) -> bytes:
    """The first data message of ``COPY ... (FORMAT binary)`` of table ``name`` without the header that starts
    it (signature, flags, header extension): the first row, or nothing."""
    if data[:11] != snapshot_records.BINARY_HEADER[:11] or len(data) < 19:
        raise CaptureError(f"COPY of {name} did not start with the binary header")
    return data[19 + int.from_bytes(data[15:19], "big"):]


@dataclass(frozen=True)
class Table:
    """One published table as a copy reads it: its Relation (published columns, key flags), the
    Type messages of its user-defined column types, its row filter, and whether it is partitioned."""

    relation: Relation
    types: tuple[Type, ...]
    row_filter: str | None
    partitioned: bool

    @property
    def name(self) -> str:
        return f"{quote_identifier(self.relation.namespace or 'pg_catalog')}.{quote_identifier(self.relation.name)}"

    def copy_sql(self, binary: bool) -> str:
        columns = ", ".join(quote_identifier(c.name) for c in self.relation.columns)
        where = f" WHERE {self.row_filter}" if self.row_filter else ""
        only = "" if self.partitioned else "ONLY "
        return (f"COPY (SELECT {columns} FROM {only}{self.name}{where}) TO STDOUT"
                + (" (FORMAT binary)" if binary else ""))


def published_tables(cur: Any, publication: str, server_version: int) -> list[Table]:
    """The tables the publication publishes, with their published columns, key flags and row filters."""
    if server_version >= 150000:
        cur.execute("SELECT c.oid, pt.schemaname, pt.tablename, pt.attnames, pt.rowfilter, c.relreplident, "
                    "c.relkind FROM pg_publication_tables pt JOIN pg_namespace n ON n.nspname = pt.schemaname "
                    "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename "
                    "WHERE pt.pubname = %s ORDER BY 2, 3", (publication,))
    else:
        cur.execute("SELECT c.oid, pt.schemaname, pt.tablename, NULL, NULL, c.relreplident, c.relkind "
                    "FROM pg_publication_tables pt JOIN pg_namespace n ON n.nspname = pt.schemaname "
                    "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename "
                    "WHERE pt.pubname = %s ORDER BY 2, 3", (publication,))
    found = cur.fetchall()
    tables = []
    for oid, schema, name, attnames, row_filter, identity, relkind in found:
        # The published columns, in attnum order: the column list's, else every column that is not dropped
        # (nor, before PostgreSQL 18 or without a column list there, generated); a key column is one of the
        # replica identity index's (the primary key's by default), every column under REPLICA IDENTITY FULL.
        cur.execute("SELECT a.attname, a.atttypid, a.atttypmod, t.typtype, "
                    "%(full)s OR a.attnum = ANY(ARRAY(SELECT unnest(i.indkey) FROM pg_index i "
                    "  WHERE i.indrelid = a.attrelid AND CASE %(identity)s WHEN 'd' THEN i.indisprimary "
                    "  WHEN 'i' THEN i.indisreplident ELSE false END)) "
                    "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                    "WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped "
                    "AND (%(names)s::name[] IS NULL AND a.attgenerated = '' OR a.attname = ANY(%(names)s::name[])) "
                    "ORDER BY a.attnum",
                    {"full": identity == "f", "identity": identity, "oid": oid, "names": attnames})
        columns: list[RelationColumn] = []
        types: list[Type] = []
        for attname, type_id, modifier, _, key in cur.fetchall():
            columns.append(RelationColumn(flags=1 if key else 0, name=attname, type_id=type_id,
                                          type_modifier=modifier))
            if type_id >= _FIRST_GENBKI_OID and all(t.type_id != type_id for t in types):
                types.append(type_message(cur, type_id))
        relation = Relation(relation_id=oid, namespace="" if schema == "pg_catalog" else schema, name=name,
                            replica_identity=identity, columns=columns)
        tables.append(Table(relation, tuple(types), row_filter, relkind == "p"))
    return tables


def type_message(cur: Any, type_id: int) -> Type:
    """The Type message pgoutput sends for a user-defined type: its OID, and the namespace and name of its
    base type (a domain's, followed down to a type that is not a domain)."""
    base = type_id
    while True:
        cur.execute("SELECT n.nspname, t.typname, t.typtype, t.typbasetype FROM pg_type t "
                    "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s", (base,))
        namespace, name, typtype, basetype = cur.fetchone()
        if typtype != "d":
            return Type(type_id=type_id, namespace="" if namespace == "pg_catalog" else namespace, name=name)
        base = basetype


def check_select(cur: Any, tables: list[Table], what: str) -> None:
    """Every published column of ``tables`` must be readable by this user (``what`` needs them: "the
    snapshot", ...)."""
    missing = []
    for table in tables:
        cur.execute("SELECT bool_and(has_column_privilege(%s, c, 'SELECT')) FROM unnest(%s::text[]) AS c",
                    (table.relation.relation_id, [c.name for c in table.relation.columns]))
        if cur.fetchone()[0] is False:
            missing.append(table.name)
    if missing:
        cur.execute("SELECT current_user")
        user = cur.fetchone()[0]
        raise CaptureError(f"user {user!r} may not SELECT from {', '.join(missing)}, which {what} must copy "
                           f"(GRANT SELECT ON ... TO {quote_identifier(user)})")
