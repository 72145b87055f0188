"""Delta Lake tables kept up to date by ``apply --format delta``: each table's changes past the position it
holds (:mod:`replwire.spark.increment`), written in one commit that records the new position.

Exactly once: every commit carries a Delta app transaction (``txn``) whose app id names the stream
(:func:`~replwire.spark.increment.stream_id`) and whose version is the table's new position, the commit LSN
of the last transaction applied to it.  Delta writes the data and the ``txn`` in one log entry or not at
all, so a table holds the changes up to its version and none after, whatever killed the run before.  The
commit info also carries the stream and the position as text (``replwire.stream``, ``replwire.position``),
for a look from outside.

The writes: ``create`` and ``append`` write the rows; ``merge`` is one Delta merge by key whose source is the
rows (updated or inserted) and the deleted keys (a column says which); ``rewrite`` overwrites the table and
its schema.  Columns added to the source table are added by Delta's schema merge; a dropped column or a
changed type makes the table rewritten (Delta keeps neither in place without column mapping).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from replwire.codec.scalars import LSN

from .increment import Applied, increment, only_keys

__all__ = ["DeltaTarget", "apply_table", "need_deltalake"]

_STREAM = "replwire.stream"  # the commit info's key naming the stream (the app id), for a look from outside
_POSITION = "replwire.position"  # and the position the commit brought the table to, as an LSN's text


class DeltaTarget:
    """One source table's Delta table at ``path``, for the stream ``app_id``."""

    def __init__(self, path: str, app_id: str) -> None:
        from deltalake import DeltaTable

        self.path, self.app_id = path, app_id
        self.table = DeltaTable(path) if DeltaTable.is_deltatable(path) else None
        self.position = self.table.transaction_version(app_id) if self.table is not None else None

    def foreign(self) -> str | None:
        """Why the table cannot take this stream's changes, or ``None``: it holds another stream's, or was not
        written by ``apply``."""
        if self.table is None or self.position is not None:
            return None
        streams = {str(entry[_STREAM]) for entry in self.table.history() if _STREAM in entry}
        if streams:
            return (f"{self.path} holds the changes of another stream ({', '.join(sorted(streams))}), not of "
                    f"{self.app_id}")
        return f"{self.path} is a Delta table that replwire apply did not write"


def need_deltalake() -> None:
    """Raise :class:`ValueError` saying what to install when the ``deltalake`` package is missing."""
    try:
        import deltalake  # noqa: F401
    except ImportError as error:
        from replwire.codec.errors import install_hint

        raise ValueError(f"--format delta needs the deltalake package: {install_hint('lakehouse')}") from error


def apply_table(changes: pa.Table | None, target: DeltaTarget, columns: Sequence[str], key: Sequence[str],
                keyed: bool, truncates: Sequence[tuple[int, int]], arrow_schema: pa.Schema,
                fill: Mapping[str, Any] | None = None) -> Applied:
    """Apply one table's ``changes`` past ``target``'s position to it in one commit (the arguments as
    :func:`~replwire.spark.increment.increment` takes them).  A column added with a stored default (in
    ``fill``) makes the table rewritten, its rows given the value."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    added, reshaped = _shape_change(target.table.schema() if target.table is not None else None, arrow_schema)
    reshaped = reshaped or any(name in (fill or {}) for name in added)
    step = increment(changes, truncates, target.position, columns, key, keyed, arrow_schema,
                     exists=target.table is not None, reshaped=reshaped,
                     read_rows=lambda keys: _read_rows(target, key, keys), fill=fill)
    if step is None:
        return Applied(target.position or 0, "none", 0, _rows(target))
    commit = CommitProperties(app_transactions=[Transaction(target.app_id, step.position)],
                              custom_metadata={_STREAM: target.app_id, _POSITION: str(LSN(step.position))})
    rows = step.rows
    if step.how == "create":
        write_deltalake(target.path, rows, mode="error", commit_properties=commit)
        return Applied(step.position, step.how, step.changes, rows.num_rows)
    table = target.table
    assert table is not None
    if step.how == "append":
        grown: Literal["merge"] | None = "merge" if added else None
        write_deltalake(table, rows, mode="append", schema_mode=grown, commit_properties=commit)
    elif step.how == "rewrite":
        write_deltalake(table, rows, mode="overwrite", schema_mode="overwrite", commit_properties=commit)
    else:
        assert step.deleted is not None
        source, flag = _merge_source(rows, step.deleted, key)
        on = " AND ".join(f"t.{_sql(k)} = s.{_sql(k)}" for k in key)
        table.merge(source, on, source_alias="s", target_alias="t", merge_schema=bool(added),
                    commit_properties=commit) \
            .when_matched_delete(predicate=f"s.{_sql(flag)}") \
            .when_matched_update_all(predicate=f"NOT s.{_sql(flag)}", except_cols=[flag]) \
            .when_not_matched_insert_all(predicate=f"NOT s.{_sql(flag)}", except_cols=[flag]) \
            .execute()
    return Applied(step.position, step.how, step.changes, _rows(DeltaTarget(target.path, target.app_id)))


def _sql(name: str) -> str:
    """A column name quoted for the predicates of a Delta merge."""
    return '"' + name.replace('"', '""') + '"'


def _rows(target: DeltaTarget) -> int:
    if target.table is None:
        return 0
    return int(target.table.to_pyarrow_dataset().count_rows())


def _shape_change(existing: Any, wanted: pa.Schema) -> tuple[list[str], bool]:
    """The columns ``wanted`` adds to the target's ``existing`` (Delta) schema, and whether it drops one or
    changes one's type (compared as Delta types: Delta reads some Arrow types back as others of the same
    meaning)."""
    if existing is None:
        return [], False
    from deltalake import Schema

    before = {f.name: f.type for f in existing.fields}
    after = {f.name: f.type for f in Schema.from_arrow(wanted).fields}
    added = [name for name in after if name not in before]
    reshaped = any(name not in after or after[name] != kind for name, kind in before.items())
    return added, reshaped


def _read_rows(target: DeltaTarget, key: Sequence[str], keys: pa.Table | None) -> pa.Table:
    """The table's rows of ``keys`` (all for ``None``): files skipped by their key statistics, then the rows
    picked exactly."""
    import pyarrow.dataset as ds

    assert target.table is not None
    dataset = target.table.to_pyarrow_dataset()
    if keys is None:
        return dataset.to_table()
    condition = None
    for name in key:
        term = ds.field(name).isin(keys.column(name).combine_chunks())
        condition = term if condition is None else condition & term
    return only_keys(dataset.to_table(filter=condition), key, keys)


def _merge_source(rows: pa.Table, deleted: pa.Table, key: Sequence[str]) -> tuple[pa.Table, str]:
    """The merge's source: the folded ``rows`` (to update or insert) and the ``deleted`` keys, with a column
    that says which, and that column's name (one no column of the table has)."""
    flag = "_replwire_delete"
    while flag in rows.column_names:
        flag = "_" + flag
    deletes = pa.Table.from_arrays(
        [deleted.column(f.name).cast(f.type) if f.name in key else pa.nulls(deleted.num_rows, f.type)
         for f in rows.schema], schema=rows.schema)
    source = pa.concat_tables([rows, deletes])
    marks = pa.array([False] * rows.num_rows + [True] * deletes.num_rows, pa.bool_())
    return source.append_column(flag, marks), flag
