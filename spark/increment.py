"""What a lakehouse table must be given to catch up with the stream: one table's changes past the position
it holds, folded into rows to write and keys to delete, and how to write them.  The sinks
(:mod:`replwire.spark.delta`) only do the table library's part.

Exactly once: a sink records, in the commit that writes a table's data, the commit LSN of the last
transaction applied to it (its *position*).  :func:`increment` takes the changes whose commit LSN lies past
that position -- and a backfill's rows at it: a chunk's rows can be split by the end of a capture file, and
a row as the backfill read it is the key's row at that position, so applying it again changes nothing.

How a table catches up (:attr:`Increment.how`):

* ``"create"``: the table does not exist yet; ``rows`` are all of it.
* ``"append"``: the changes only add rows (inserts, snapshot rows), no column was dropped or changed type;
  ``rows`` are appended.
* ``"merge"``: a table with a key, no TRUNCATE, columns only added: ``rows`` replace (or add) the rows of
  their keys, and the rows of the keys in ``deleted`` are removed.  An update that carried an unchanged
  TOASTed value keeps the table's value: the table's rows of those keys (``read_rows``) go into the fold
  first, as the rows the changes meet.
* ``"rewrite"``: after a TRUNCATE (``rows`` are the table), for a table without a key (REPLICA IDENTITY
  FULL: rows are matched by their whole image, and can be equal: the table's rows are read and folded
  with the changes), and when the sink cannot change the table's columns in place.

A column whose value the stream never carried (an unchanged TOASTed value of a row last written before
the capture began) is null and named in the row's ``_unchanged_toast`` (see :mod:`replwire.spark.jobs`);
the table's rows read back keep that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .fold import fold_batches

__all__ = ["Applied", "Increment", "increment", "only_keys", "stream_id"]

_ADDING = pa.array(["insert", "snapshot"])  # the ops of changes that only add rows

#: ``read_rows(keys)``: the table's rows whose key is among ``keys`` (a table of the key columns), or all
#: of them for ``None``, in any schema that has the columns it still has.
ReadRows = Callable[[pa.Table | None], pa.Table]


def stream_id(header: Any) -> str:
    """A stream's name, ``replwire:<system identifier>:<database>:<slot>``, from a capture file's header
    (``?`` for what it does not say; COPY-CSV inputs have no header): what a sink records its position
    under."""
    parts = (header.system_identifier, header.database, header.slot_name) if header is not None else (None,) * 3
    return ":".join(["replwire", *[p or "?" for p in parts]])


@dataclass
class Increment:
    """What a table must be given (see the module docstring): ``how``; the folded ``rows`` to write (of the
    fold's schema); for a merge, the keys to delete (a table of the key columns); the ``position`` the table
    holds once written; the number of ``changes`` applied."""

    how: str
    rows: pa.Table
    deleted: pa.Table | None
    position: int
    changes: int


@dataclass
class Applied:
    """What a sink did to one table: the position it holds now, how it was written (:attr:`Increment.how`,
    or ``"none"`` when nothing lay past its position), the changes applied and the rows it has now."""

    position: int
    how: str
    changes: int
    rows: int


def increment(changes: pa.Table | None, truncates: Sequence[tuple[int, int]], held: int | None,
              columns: Sequence[str], key: Sequence[str], keyed: bool, arrow_schema: pa.Schema, *,
              exists: bool, reshaped: bool, read_rows: ReadRows, fill: Mapping[str, Any] | None = None
              ) -> Increment | None:
    """What the table needs to hold the changes past ``held`` (its position; ``None`` when it has none), or
    ``None`` when nothing lies past it.

    ``changes`` are one table's change rows (:func:`replwire.spark.dataset.read_changes`: all of the stream's,
    in commit order), ``truncates`` the ``(commit_lsn, position)`` of its TRUNCATEs; ``key`` names the
    columns that identify a row (all ``columns`` when the table has no key: ``keyed`` false);
    ``arrow_schema`` is the table's current rows' (the fold's).  ``exists`` says whether the table exists,
    ``reshaped`` whether the sink must rewrite it to change its columns; ``read_rows`` reads its rows.
    ``fill`` gives the value (an Arrow scalar) of a column added with a stored default, for the table's rows
    that lack the column: the sink makes such a table rewritten."""
    if changes is not None and held is not None:
        lsn = changes.column(1)
        changes = changes.filter(pc.or_(pc.greater(lsn, held), pc.and_(pc.equal(lsn, held),
                                                                        pc.equal(changes.column(0), "backfill"))))
    truncates = [cut for cut in truncates if held is None or cut[0] > held]
    if changes is None or not changes.num_rows and not truncates:
        return None
    position = max(pc.max(changes.column(1)).as_py() or 0, *(cut[0] for cut in truncates), held or 0)
    truncated = bool(truncates) or pc.any(pc.equal(changes.column(0), "truncate")).as_py()
    adding = not pc.any(pc.invert(pc.is_in(changes.column(0), value_set=_ADDING))).as_py()
    prior = None
    if not exists or (adding and not truncated and not reshaped):
        how = "append" if exists else "create"
    else:
        how = "rewrite" if truncated or not keyed or reshaped else "merge"
        if not truncated:
            prior = _prior_rows(read_rows, changes, columns, key, arrow_schema, whole=how == "rewrite",
                                fill=fill or {})
    applied = changes.num_rows
    if prior is not None and prior.num_rows:
        changes = pa.concat_tables([_as_changes(prior, held or 0, columns, changes.schema), changes])
    rows = pa.Table.from_batches(list(fold_batches(changes.to_batches(), columns, key, truncates, arrow_schema)))
    deleted = None
    if how == "merge":
        deleted = _touched(changes, columns, key).join(rows.select(list(key)), list(key), join_type="left anti")
    return Increment(how, rows, deleted, position, applied)


def _touched(changes: pa.Table, columns: Sequence[str], key: Sequence[str]) -> pa.Table:
    """The distinct keys ``changes`` name: their rows' keys and the old keys of key changes."""
    width = len(columns)
    rows = changes.filter(pc.not_equal(changes.column(0), "truncate"))
    parts = [pa.table({k: rows.column(3 + columns.index(k)) for k in key})]
    before = rows.column(3 + width).combine_chunks()
    moved = before.filter(before.is_valid())
    if len(moved):
        parts.append(pa.table({k: moved.field(k) for k in key}))
    return pa.concat_tables(parts).group_by(list(key)).aggregate([])


def _prior_rows(read_rows: ReadRows, changes: pa.Table, columns: Sequence[str], key: Sequence[str],
                arrow_schema: pa.Schema, whole: bool, fill: Mapping[str, Any]) -> pa.Table | None:
    """The table's rows the fold must meet, in ``arrow_schema`` (a column added since is its ``fill`` value or
    null, a changed column cast): all of them for a rewrite (``whole``), else those of the keys whose changes
    carry an unchanged TOASTed value."""
    if whole:
        found = read_rows(None)
    else:
        width = len(columns)
        toasted = changes.filter(pc.fill_null(pc.greater(pc.list_value_length(changes.column(4 + width)), 0),
                                              False))
        if not toasted.num_rows:
            return None
        found = read_rows(_touched(toasted, columns, key))
    count = found.num_rows
    arrays = [found.column(f.name).cast(f.type) if f.name in found.column_names else
              pa.repeat(fill[f.name].cast(f.type), count) if f.name in fill else pa.nulls(count, f.type)
              for f in arrow_schema]
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def only_keys(rows: pa.Table, key: Sequence[str], keys: pa.Table, *, among: bool = True) -> pa.Table:
    """Those of ``rows`` whose key is among ``keys`` (for a ``read_rows`` whose filter is looser), or with
    ``among`` false, those whose key is not."""
    index = "_replwire_row"  # (a join takes only some types of column along: the key's and an index)
    while index in key:
        index = "_" + index
    numbered = rows.select(list(key)).append_column(index, pa.array(range(rows.num_rows), pa.int64()))
    joined = numbered.join(keys, list(key), join_type="left semi" if among else "left anti")
    return rows.take(joined.column(index))


def _as_changes(prior: pa.Table, at: int, columns: Sequence[str], layout: pa.Schema) -> pa.Table:
    """The table's rows as changes that come before every change of the run (at ``at``, the table's
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
    return pa.Table.from_arrays(arrays, schema=layout)
