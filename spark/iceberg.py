"""Apache Iceberg tables kept up to date by ``apply --format iceberg``: each table's changes past the position
it holds (:mod:`replwire.spark.increment`), written in one catalog commit that records the new position.

The tables: the source table ``schema.table`` is the Iceberg table ``table`` in the namespace ``schema``, so
tables of the same name in different schemas stay apart; or, when a ``namespace`` is given, in that one (the
snapshots name their source table, ``replwire.table``: a table that holds another source table's changes is
refused).  The catalog is any pyiceberg loads from a URI (``sqlite:``/``postgresql:`` a SQL catalog,
``http:`` a REST one), named :data:`CATALOG`; by default a SQL catalog in ``OUT/catalog.db`` with ``OUT`` as
its warehouse.

Exactly once: the snapshots a run commits to a table carry, in their summary, the stream
(:func:`~replwire.spark.increment.stream_id`, ``replwire.stream``), the table's new position, the commit LSN
of the last transaction applied to it (``replwire.position``, as an LSN's text), and the source table.  A
run's writes to a table -- its schema change, the rows deleted, the rows added -- are one pyiceberg
transaction, one catalog commit: the table holds all of them or none, whatever killed the run.  The position
a table holds is that of the newest snapshot of its current history that names the stream (other writers,
compaction say, may have committed after it).

The writes: ``create`` creates the table with its rows (one commit too); ``append`` appends them; ``merge``
deletes the rows of every key it touches (those of the rows and the deleted keys) and appends the rows (of
a key of several columns, the filter catches the rows of every combination of the keys' values: those not
of a key touched are appended again); ``rewrite`` overwrites the table.  Iceberg changes columns in place:
a column added is added, a dropped one dropped, a type widened (int to long, float to double, a decimal's
precision) promoted, each in the same commit as the data; a column whose type changed otherwise is dropped
and added again with the table rewritten, and so does a column added with a default the capture recorded
(the rows before it are given the value).  The table's columns are all optional (a source column's NOT
NULL can come and go).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from replwire.codec.scalars import LSN

from .increment import Applied, increment, only_keys

__all__ = ["CATALOG", "IcebergTarget", "apply_table", "catalog", "identifier", "need_pyiceberg"]

CATALOG = "replwire"  # the catalog's name (a SQL catalog keeps its tables under it)
_STREAM = "replwire.stream"  # the snapshot summary's key naming the stream
_POSITION = "replwire.position"  # and the position the snapshot brought the table to, as an LSN's text
_TABLE = "replwire.table"  # and the source table, schema.table


def need_pyiceberg() -> None:
    """Raise :class:`ValueError` saying what to install when the ``pyiceberg`` package is missing."""
    try:
        import pyiceberg  # noqa: F401
    except ImportError as error:
        from replwire.codec.errors import install_hint

        raise ValueError(f"--format iceberg needs the pyiceberg package: {install_hint('lakehouse')}") from error


def catalog(out: str, uri: str | None = None) -> Any:
    """The catalog at ``uri`` (default: a SQL catalog in ``out/catalog.db``), its warehouse ``out``."""
    from pyiceberg.catalog import load_catalog

    where = pathlib.Path(out).absolute()
    return load_catalog(CATALOG, uri=uri or f"sqlite:///{os.path.join(where, 'catalog.db')}",
                        warehouse=where.as_uri())


def identifier(schema: str, table: str, namespace: str | None) -> tuple[str, str]:
    """The Iceberg table of the source table ``schema.table``: ``table`` in the namespace ``schema``, or in
    ``namespace`` when one is given."""
    return namespace or schema, table


class IcebergTarget:
    """The Iceberg table ``identifier`` in ``catalog`` of the source table ``source`` (``schema.table``), for
    the stream ``app_id``."""

    def __init__(self, catalog: Any, identifier: tuple[str, ...], app_id: str, source: str) -> None:
        self.catalog, self.identifier, self.app_id, self.source = catalog, identifier, app_id, source
        self.name = ".".join(identifier)
        self.table = catalog.load_table(identifier) if catalog.table_exists(identifier) else None
        found = [summary for summary in self._summaries() if summary.get(_STREAM) == app_id and _POSITION in summary]
        self.position: int | None = int(LSN(found[0][_POSITION])) if found else None
        self._held = found[0].get(_TABLE) if found else None  # the source table it holds

    def _summaries(self) -> list[dict[str, str]]:
        """The summary properties of the table's snapshots, newest first, along its current history."""
        from pyiceberg.table.snapshots import ancestors_of

        if self.table is None:
            return []
        return [dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}
                for snapshot in ancestors_of(self.table.current_snapshot(), self.table.metadata)]

    def foreign(self) -> str | None:
        """Why the table cannot take this stream's changes, or ``None``: it holds another stream's, or was not
        written by ``apply``."""
        if self._held not in (None, self.source):
            return f"{self.name} holds the changes of the source table {self._held}, not of {self.source}"
        if self.table is None or self.position is not None:
            return None
        streams = {summary[_STREAM] for summary in self._summaries() if _STREAM in summary}
        if streams:
            return (f"{self.name} holds the changes of another stream ({', '.join(sorted(streams))}), not of "
                    f"{self.app_id}")
        return f"{self.name} is an Iceberg table that replwire apply did not write"


def apply_table(changes: pa.Table | None, target: IcebergTarget, columns: Sequence[str], key: Sequence[str],
                keyed: bool, truncates: Sequence[tuple[int, int]], arrow_schema: pa.Schema,
                fill: Mapping[str, Any] | None = None) -> Applied:
    """Apply one table's ``changes`` past ``target``'s position to it in one catalog commit (the arguments as
    :func:`~replwire.spark.increment.increment` takes them).  A column added with a stored default (in
    ``fill``) makes the table rewritten, its rows given the value."""
    wanted = pa.schema([field.with_nullable(True) for field in arrow_schema])
    table = target.table
    changed = _changed(table.schema() if table is not None else None, wanted)
    added = [] if table is None else [f.name for f in wanted if f.name not in table.schema().column_names]
    step = increment(changes, truncates, target.position, columns, key, keyed, arrow_schema,
                     exists=table is not None, reshaped=bool(changed) or any(name in (fill or {}) for name in added),
                     read_rows=lambda keys: _read_rows(target, key, keys), fill=fill)
    if step is None:
        return Applied(target.position or 0, "none", 0, _rows(table))
    summary = {_STREAM: target.app_id, _POSITION: str(LSN(step.position)), _TABLE: target.source}
    rows = step.rows.cast(wanted)
    if table is None:
        target.catalog.create_namespace_if_not_exists(target.identifier[:-1])
        transaction = target.catalog.create_table_transaction(target.identifier, schema=wanted)
    else:
        transaction = table.transaction()
    with transaction as tx:  # one catalog commit, when the block ends
        if table is not None:
            _evolve(tx, table.schema(), wanted, changed)
        if step.how == "rewrite":
            tx.overwrite(rows, snapshot_properties=summary)
        else:
            if step.how == "merge":  # the rows of the keys touched go, the folded rows come
                assert step.deleted is not None and table is not None
                keys = pa.concat_tables([rows.select(list(key)),
                                         step.deleted.select(list(key)).cast(rows.select(list(key)).schema)])
                caught = _key_filter(keys, key)
                if len(key) > 1:  # the filter is looser: the rows it catches beyond the keys go back
                    others = only_keys(table.scan(row_filter=caught).to_arrow(), key, keys, among=False)
                    rows = pa.concat_tables([rows, _conform(others, wanted)])
                tx.delete(caught, snapshot_properties=summary)
            tx.append(rows, snapshot_properties=summary)  # (no rows: still a snapshot, with the position)
    return Applied(step.position, step.how, step.changes, _rows(target.catalog.load_table(target.identifier)))


def _changed(existing: Any, wanted: pa.Schema) -> list[str]:
    """The columns of the table's ``existing`` (Iceberg) schema whose type in ``wanted`` is neither theirs
    nor one Iceberg promotes theirs to in place."""
    if existing is None:
        return []
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.schema import promote

    after = {field.name: field.field_type for field in _as_iceberg(wanted).fields}
    changed = []
    for field in existing.fields:
        kind = after.get(field.name)
        if kind is None or _shape(kind) == _shape(field.field_type):
            continue
        try:
            promoted = promote(field.field_type, kind)
        except ResolveError:
            promoted = None
        if promoted != kind:
            changed.append(field.name)
    return changed


def _shape(kind: Any) -> Any:
    """An Iceberg type as comparable apart from its nested fields' ids."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(kind, ListType):
        return "list", kind.element_required, _shape(kind.element_type)
    if isinstance(kind, MapType):
        return "map", kind.value_required, _shape(kind.key_type), _shape(kind.value_type)
    if isinstance(kind, StructType):
        return "struct", tuple((f.name, f.required, _shape(f.field_type)) for f in kind.fields)
    return kind


def _as_iceberg(schema: pa.Schema) -> Any:
    from pyiceberg.catalog import Catalog

    return Catalog._convert_schema_if_needed(schema)


def _evolve(tx: Any, existing: Any, wanted: pa.Schema, changed: list[str]) -> None:
    """Bring the table's columns to ``wanted``, in ``tx``: the dropped columns and the ``changed`` ones
    dropped, the new ones (and the changed ones again) added where ``wanted`` has them, types widened."""
    names = [field.name for field in wanted]
    gone = [field.name for field in existing.fields if field.name not in names or field.name in changed]
    if gone:
        with tx.update_schema() as update:
            for name in gone:
                update.delete_column(name)
    kept = {field.name for field in existing.fields} - set(gone)
    if kept == set(names) and all(_shape(existing.find_field(f.name).field_type) == _shape(f.field_type)
                                  for f in _as_iceberg(wanted).fields):
        return
    with tx.update_schema() as update:
        update.union_by_name(wanted)
        for at, name in enumerate(names):
            if name not in kept:  # a new column goes where the source table has it
                if at:
                    update.move_after(name, names[at - 1])
                else:
                    update.move_first(name)


def _key_filter(keys: pa.Table, key: Sequence[str]) -> Any:
    """An Iceberg filter that catches the rows of ``keys``: their values of each key column.  Exact for a
    key of one column; of several, it catches as well the rows that combine values of different keys (an
    exact filter of thousands of terms crashes pyarrow's evaluation)."""
    And, In = _expressions("And", "In")
    condition: Any = None
    for name in key:
        term = In(name, [_literal(v) for v in keys.column(name).combine_chunks().unique().to_pylist()])
        condition = term if condition is None else And(condition, term)
    return condition


def _conform(rows: pa.Table, wanted: pa.Schema) -> pa.Table:
    """Rows read from the table as of ``wanted``: a column added since null, a widened one cast."""
    count = rows.num_rows
    return pa.Table.from_arrays([rows.column(f.name).cast(f.type) if f.name in rows.column_names
                                 else pa.nulls(count, f.type) for f in wanted], schema=wanted)


def _expressions(*names: str) -> list[Any]:
    """pyiceberg's filter expressions (typed ``Any``: mypy takes their constructors for pydantic's)."""
    from pyiceberg import expressions

    return [getattr(expressions, name) for name in names]


def _literal(value: Any) -> Any:
    """A key's value as an Iceberg literal takes it: dates and times as the numbers Iceberg keeps."""
    import datetime

    if isinstance(value, datetime.datetime):
        epoch = datetime.datetime(1970, 1, 1, tzinfo=value.tzinfo)
        return (value - epoch) // datetime.timedelta(microseconds=1)
    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days
    return value


def _rows(table: Any) -> int:
    return 0 if table is None else int(table.scan().count())


def _read_rows(target: IcebergTarget, key: Sequence[str], keys: pa.Table | None) -> pa.Table:
    """The table's rows of ``keys`` (all for ``None``): files skipped by their key statistics, then the rows
    picked exactly."""
    assert target.table is not None
    if keys is None:
        return target.table.scan().to_arrow()
    return only_keys(target.table.scan(row_filter=_key_filter(keys, key)).to_arrow(), key, keys)
