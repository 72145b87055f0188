"""The stored defaults of a table's columns, read from the catalog when the stream announces the table's shape,
for the capture file's ``ColumnDefaults`` records (:data:`~replwire.schema.capture.COLUMN_DEFAULTS`).

Why: ``ALTER TABLE ... ADD COLUMN c ... DEFAULT v`` (a default that is not volatile) rewrites nothing: the
server stores ``v`` in ``pg_attribute.attmissingval``, and every row that existed then reads ``c = v``.  The
stream never carries those values until a row changes, so without them a reader of the capture would have
``c`` null in those rows.  With a volatile default (``random()``, ``clock_timestamp()``) the server rewrites
the table, each row gets its own value, and no value is stored: the record says so (kind 2), and the capture
warns that the column's values are only to be had by a backfill of the table.

Strategy: after each Relation message the capture hands it to :meth:`ColumnDefaults.after_relation`, which
asks the catalog (on an ordinary connection of its own, opened on first use, autocommit, each statement
bounded by a timeout) for the published columns with a default or a stored one, and gives the record to
write right after the Relation -- unless the table's defaults are what this capture last wrote for it.
A column is *added* when a Relation of its table lacked it earlier in this capture's run; a kind 2 column
so added is warned about once.  A catalog that cannot be read costs the record, not the capture: it warns
once and goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ReplwireError
from ..messages import Relation
from ..stream import snapshot_records
from ..wire.fast import parse
from .connection import CaptureError, connect, server_error

__all__ = ["ColumnDefaults"]

#: The columns of a table with a default or a stored one: name, whether one is stored, its text.  A stored
#: default is a one-element array of the column's type; its element's text is the value's (an array column's
#: element is itself an array: the text of ``text[]``'s element is the array's text).
_QUERY = """SELECT a.attname, a.atthasmissing, (a.attmissingval::text::text[])[1]
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND (a.atthasdef OR a.atthasmissing)"""


class ColumnDefaults:
    """Reads the defaults of the tables the stream announces (see the module docstring).  ``say`` prints a
    warning; ``proto_version`` and ``encoding`` are the stream's."""

    def __init__(self, dsn: str, proto_version: int, encoding: str, say: Callable[[str], None]) -> None:
        self.dsn, self.proto_version, self.encoding, self.say = dsn, proto_version, encoding, say
        self._conn: Any = None
        self._written: dict[int, bytes] = {}  # relation id -> the last record written for it
        self._columns: dict[int, set[str]] = {}  # relation id -> every column its Relations had in this run
        self._warned: set[tuple[int, str]] = set()
        self._failed = False  # (warned about a failure to read the catalog)

    def after_relation(self, data: bytes, in_stream: bool) -> bytes | None:
        """The ``ColumnDefaults`` record to write right after the Relation message ``data``, or ``None``."""
        try:
            relation = parse(data, proto_version=self.proto_version, in_stream=in_stream, encoding=self.encoding)
        except ReplwireError:
            return None  # (the stream's own reading reports it)
        if not isinstance(relation, Relation):
            return None
        oid, names = relation.relation_id, [c.name for c in relation.columns]
        seen = self._columns.get(oid)
        self._columns[oid] = (seen or set()) | set(names)
        found = self._read(oid)
        if found is None:
            return None
        columns = [(name, 1 if stored and value is not None else 2, value if stored and value is not None else "")
                   for name, stored, value in found if name in names]
        for name, kind, _ in columns:
            if kind == 2 and seen is not None and name not in seen and (oid, name) not in self._warned:
                self._warned.add((oid, name))
                table = f"{relation.namespace or 'pg_catalog'}.{relation.name}"
                self.say(f"warning: {table}.{name} was added with a default the server wrote into each row (a "
                         "volatile default, or the table rewritten since): the stream does not carry those "
                         f"values; a backfill of {table} does (replwire backfill)")
        if not columns:
            return None
        record = snapshot_records.defaults_record(oid, columns)
        if self._written.get(oid) == record:
            return None
        self._written[oid] = record
        return record

    def _read(self, oid: int) -> list[tuple[str, bool, str | None]] | None:
        try:
            if self._conn is None:
                self._conn = connect(self.dsn)
                self._conn.autocommit = True
                with self._conn.cursor() as cur:
                    cur.execute("SET application_name = 'replwire capture: column defaults'")
                    cur.execute("SET statement_timeout = '5s'")
            with self._conn.cursor() as cur:
                cur.execute(_QUERY, (oid,))
                return [(str(name), bool(stored), value) for name, stored, value in cur.fetchall()]
        except Exception as error:  # noqa: BLE001 (any failure of the catalog's reading: tried again next time)
            self.close()
            if not self._failed:
                self._failed = True
                why = str(error) if isinstance(error, CaptureError) else server_error(error)
                self.say(f"warning: cannot read the tables' column defaults ({why}): a column added with a "
                         "default is null in the rows the stream has not sent since")
            return None

    def forget(self) -> None:
        """Forget which records were written (the file was cut back: the next Relations get theirs again)."""
        self._written.clear()

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
