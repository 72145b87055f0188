"""Delta Lake tables kept up to date by ``apply --format delta``: each table's changes past the position it
holds, folded and written in one commit that records the new position.

Exactly once: every commit carries a Delta app transaction (``txn``): the app id names the stream (the
server's system identifier, database and slot, from the capture's header: :func:`stream_id`) and the version
is the commit LSN of the last transaction applied to the table.  Delta writes the data and the ``txn`` in
one log entry or not at all, so a table holds the changes up to its version and none after, whatever killed
the run before.  A run applies to each table only the changes whose commit LSN lies past the table's
version; running again on the same inputs changes nothing, and on the next segments applies just those.
(A backfill's rows at the table's version are applied again: a chunk's rows can be split by the end of a
capture file, and a row as the backfill read it is the key's row at that position, so applying it again
changes nothing.)

Per table, :func:`apply_table` folds those changes (:mod:`replwire.spark.fold`) and writes:

* **an append** when the changes only insert rows (and no column was dropped or changed type);
* **a merge** by key (the replica identity) when the table has a key, no TRUNCATE came, and its columns
  only grew: the folded rows of the keys the changes touched are updated or inserted, the keys they left
  without a row deleted, new columns added (Delta's schema merge).  An update that carried an unchanged
  TOASTed value keeps the target's value: the target's rows of those keys go into the fold first, as the
  rows the changes meet.
* **a rewrite** of the whole table otherwise: after a TRUNCATE (the folded rows are the table), for a table
  without a key (REPLICA IDENTITY FULL: rows are matched by their whole image, and can be equal), and when a
  column was dropped or changed type (Delta's schema is replaced; a changed column's values are cast to the
  new type, which a widening allows).

A column whose value the stream never carried (an unchanged TOASTed value of a row last written before the
capture began) is null and named in the row's ``_unchanged_toast`` (see :mod:`replwire.spark.jobs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DeltaTarget", "TableApplied", "apply_table", "need_deltalake", "stream_id"]

_APP = "replwire"
_STREAM = "replwire.stream"  # the commit info's key naming the stream (the app id), for a look from outside
_POSITION = "replwire.position"  # and the position the commit brought the table to, as an LSN's text
_ADDING = pa.array(["insert", "snapshot"])  # the ops of changes that only add rows


def stream_id(header: Any) -> str:
    """The app id of a stream: ``replwire:<system identifier>:<database>:<slot>`` from a capture file's
    header (``?`` for what it does not say; COPY-CSV inputs have no header)."""
    parts = (header.system_identifier, header.database, header.slot_name) if header is not None else ()
    return ":".join([_APP, *[p or "?" for p in parts]] if parts else [_APP, "?", "?", "?"])


@dataclass
class TableApplied:
    """What :func:`apply_table` did to one table: the position it holds now, how it was written
    (``"create"``, ``"append"``, ``"merge"``, ``"rewrite"``, or ``"none"`` when nothing lay past its position), the
    changes applied and the rows it has now."""

    position: int
    how: str
    changes: int
    rows: int


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
                keyed: bool, truncates: Sequence[tuple[int, int]], arrow_schema: pa.Schema) -> TableApplied:
    """Apply one table's ``changes`` (from :func:`replwire.spark.jobs.read_changes`: all of the stream's, in
    commit order) past ``target``'s position to it in one commit (see the module docstring).  ``key`` names
    the columns that identify a row (all ``columns`` when the table has no key: ``keyed`` false);
    ``truncates`` are the ``(commit_lsn, position)`` of the table's TRUNCATEs; ``arrow_schema`` is the
    table's current rows' (the fold's)."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    from .fold import fold_batches

    held = target.position
    if changes is not None and held is not None:
        lsn = changes.column(1)
        changes = changes.filter(pc.or_(pc.greater(lsn, held), pc.and_(pc.equal(lsn, held),
                                                                        pc.equal(changes.column(0), "backfill"))))
    truncates = [cut for cut in truncates if held is None or cut[0] > held]
    if changes is None or not changes.num_rows and not truncates:
        return TableApplied(held or 0, "none", 0, _rows(target))
    position = max(pc.max(changes.column(1)).as_py() or 0, *(cut[0] for cut in truncates), held or 0)
    commit = CommitProperties(app_transactions=[Transaction(target.app_id, position)],
                              custom_metadata={_STREAM: target.app_id, _POSITION: _lsn_text(position)})
    truncated = bool(truncates) or pc.any(pc.equal(changes.column(0), "truncate")).as_py()
    added, reshaped = _shape_change(target.table.schema() if target.table is not None else None, arrow_schema)
    adding = not pc.any(pc.invert(pc.is_in(changes.column(0), value_set=_ADDING))).as_py()
    if target.table is None or (adding and not truncated and not reshaped):
        how = "create" if target.table is None else "append"
        prior = None
    else:
        how = "rewrite" if truncated or not keyed or reshaped else "merge"
        prior = None if truncated else _prior_rows(target, changes, columns, key, arrow_schema,
                                                   whole=how == "rewrite")
    applied = changes.num_rows
    if prior is not None and prior.num_rows:
        changes = pa.concat_tables([_as_changes(prior, held or 0, columns, changes.schema), changes])
    rows = pa.Table.from_batches(list(fold_batches(changes.to_batches(), columns, key, truncates, arrow_schema)))
    if how == "create":
        write_deltalake(target.path, rows, mode="error", commit_properties=commit)
        return TableApplied(position, how, applied, rows.num_rows)
    table = target.table
    assert table is not None
    if how == "append":
        grown: Literal["merge"] | None = "merge" if added else None
        write_deltalake(table, rows, mode="append", schema_mode=grown, commit_properties=commit)
    elif how == "rewrite":
        write_deltalake(table, rows, mode="overwrite", schema_mode="overwrite", commit_properties=commit)
    else:
        source, flag = _merge_source(changes, rows, columns, key)
        on = " AND ".join(f"t.{_sql(k)} = s.{_sql(k)}" for k in key)
        table.merge(source, on, source_alias="s", target_alias="t", merge_schema=bool(added),
                    commit_properties=commit) \
            .when_matched_delete(predicate=f"s.{_sql(flag)}") \
            .when_matched_update_all(predicate=f"NOT s.{_sql(flag)}", except_cols=[flag]) \
            .when_not_matched_insert_all(predicate=f"NOT s.{_sql(flag)}", except_cols=[flag]) \
            .execute()
    return TableApplied(position, how, applied, _rows(DeltaTarget(target.path, target.app_id)))



def _lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


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


def _key_table(values: Sequence[pa.ChunkedArray | pa.Array], key: Sequence[str]) -> pa.Table:
    return pa.table(dict(zip(key, values)))


def _touched(changes: pa.Table, columns: Sequence[str], key: Sequence[str]) -> pa.Table:
    """The distinct keys ``changes`` name: their rows' keys and the old keys of key changes."""
    width = len(columns)
    rows = changes.filter(pc.not_equal(changes.column(0), "truncate"))
    new = _key_table([rows.column(3 + columns.index(k)) for k in key], key)
    before = rows.column(3 + width).combine_chunks()
    moved = before.filter(before.is_valid())
    parts = [new]
    if len(moved):
        parts.append(_key_table([moved.field(k) for k in key], key))
    return pa.concat_tables(parts).group_by(list(key)).aggregate([])


def _prior_rows(target: DeltaTarget, changes: pa.Table, columns: Sequence[str], key: Sequence[str],
                arrow_schema: pa.Schema, whole: bool) -> pa.Table | None:
    """The target's rows the fold must meet, in ``arrow_schema`` (columns added since are null, a changed
    column cast): all of them for a rewrite (``whole``), else those of the keys whose changes carry an
    unchanged TOASTed value."""
    assert target.table is not None
    dataset = target.table.to_pyarrow_dataset()
    if whole:
        found = dataset.to_table()
    else:
        width = len(columns)
        toasted = changes.filter(pc.fill_null(pc.greater(pc.list_value_length(changes.column(4 + width)), 0),
                                              False))
        if not toasted.num_rows:
            return None
        keys = _touched(toasted, columns, key)
        candidates = dataset.to_table(filter=_isin(key, keys))
        index = "_replwire_row"  # (a join takes only some types of column along: the key's and an index)
        while index in key:
            index = "_" + index
        rows = candidates.select(list(key)).append_column(index, pa.array(range(candidates.num_rows), pa.int64()))
        found = candidates.take(rows.join(keys, list(key), join_type="left semi").column(index))
    count = found.num_rows
    arrays = [found.column(f.name).cast(f.type) if f.name in found.column_names else pa.nulls(count, f.type)
              for f in arrow_schema]
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def _isin(key: Sequence[str], keys: pa.Table) -> Any:
    import pyarrow.dataset as ds

    condition = None
    for name in key:
        term = ds.field(name).isin(keys.column(name).combine_chunks())
        condition = term if condition is None else condition & term
    return condition


def _as_changes(prior: pa.Table, at: int, columns: Sequence[str], layout: pa.Schema) -> pa.Table:
    """The target's rows as changes that come before every change of the run (at ``at``, the target's
    position, position -1): a row as the stream's snapshot rows are, or, when some of its columns were never
    known, as an update that names them unchanged (so that they stay unknown)."""
    width, count = len(columns), prior.num_rows
    unknown = prior.column(width + 1)
    op = pc.if_else(pc.fill_null(pc.greater(pc.list_value_length(unknown), 0), False), "update", "snapshot")
    arrays = [op, pa.array([at] * count, layout.field(1).type), pa.array([-1] * count, layout.field(2).type),
              *[prior.column(i) for i in range(width)],
              pa.nulls(count, layout.field(3 + width).type),
              unknown.cast(layout.field(4 + width).type),
              prior.column(width).cast(layout.field(5 + width).type)]
    return pa.Table.from_arrays([a if isinstance(a, (pa.Array, pa.ChunkedArray)) else pa.array(a)
                                 for a in arrays], schema=layout)


def _merge_source(changes: pa.Table, rows: pa.Table, columns: Sequence[str],
                  key: Sequence[str]) -> tuple[pa.Table, str]:
    """The merge's source: the folded ``rows`` (to update or insert) and the keys ``changes`` left without a
    row (to delete), with a column that says which, and that column's name (one no column of the table
    has)."""
    flag = "_replwire_delete"
    while flag in rows.column_names:
        flag = "_" + flag
    gone = _touched(changes, columns, key).join(rows.select(list(key)), list(key), join_type="left anti")
    deletes = pa.Table.from_arrays(
        [gone.column(f.name).cast(f.type) if f.name in key else pa.nulls(gone.num_rows, f.type)
         for f in rows.schema], schema=rows.schema)
    source = pa.concat_tables([rows, deletes])
    marks = pa.array([False] * rows.num_rows + [True] * deletes.num_rows, pa.bool_())
    return source.append_column(flag, marks), flag

