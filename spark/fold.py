"""The fold of ``apply`` on Arrow batches: one table's change rows in commit order in, its current rows out.

:func:`replwire.codec.stream.fold.fold` states the rules and applies them change by change.  Most keys need
none of its state: a key none of whose changes is an update carrying an unchanged TOASTed value ends as its
last change says -- the row of its last insert or update, or no row after a delete.  So :func:`fold_batches`
sorts the changes by key and commit order in Arrow, takes each such key's last change at once, and hands
only the changes of the other keys to :func:`~replwire.codec.stream.fold.fold`, which is exact for any key
(their rows do not meet the others').  What the sort cannot decide goes to that fold whole: an update that
carried an old key or old image (a key change, or REPLICA IDENTITY FULL, whose rows are matched by their
old image), a table whose key is all its columns (its rows can be equal, and each is kept), and key types
Arrow does not sort.  A TRUNCATE empties the table: only the changes from the last one on are folded.

A batch holds ``op, commit_lsn, position``, the table's ``columns``, ``_before`` (the old image's ``key``
columns), ``_unchanged_toast`` and ``_unrepresentable`` (as a JSON object), in that order, whatever their
names.  The rows handed back have ``arrow_schema``: the ``columns``, then the unrepresentable values (a
map), then the unknown columns (see :mod:`~replwire.codec.stream.fold`), whatever their names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from functools import reduce
from itertools import chain, repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replwire.codec.stream.fold import fold

__all__ = ["fold_batches"]

BATCH_ROWS = 1 << 16  # rows per Arrow batch handed back
_SETS = ("insert", "snapshot", "backfill", "update")  # the ops whose row a key keeps when it is the key's last
_REPLACING = pa.array(["update", "delete", "backfill"])  # the ops that replace or remove a row a key had


def fold_batches(batches: Iterable[pa.RecordBatch], columns: Sequence[str], key: Sequence[str],
                 truncates: Sequence[tuple[int, int]], arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The current rows of the change rows ``batches`` (in commit order, laid out as the module docstring
    says), as batches of ``arrow_schema``.  ``truncates`` are the ``(commit_lsn, position)`` of TRUNCATEs of
    the table that ``batches`` may not hold themselves (see :func:`~replwire.codec.stream.fold.fold`)."""
    gathered = list(batches)
    parts: list[pa.Table] = []
    if gathered:
        table = _from_last_truncate(pa.Table.from_batches(gathered), truncates)
        folded = _by_key(table, columns, key)
        if folded is None:
            rest = table
        else:
            last, rest = folded
            parts.append(_as_rows(last, len(columns), arrow_schema))
        if rest.num_rows:
            parts.append(_changes_folded(rest, columns, key, arrow_schema))
    rows = pa.concat_tables(parts) if parts else arrow_schema.empty_table()
    yield from rows.to_batches(BATCH_ROWS) or [pa.RecordBatch.from_pylist([], arrow_schema)]


def _from_last_truncate(table: pa.Table, truncates: Sequence[tuple[int, int]]) -> pa.Table:
    """The changes after the last TRUNCATE (of ``truncates`` and of the truncate rows), truncates dropped."""
    op, lsn, position = table.column(0), table.column(1), table.column(2)
    truncated = pc.equal(op, "truncate")
    cuts = list(truncates)
    if pc.any(truncated).as_py():
        cuts += [(row["lsn"], row["position"]) for row in
                 pa.table({"lsn": lsn, "position": position}).filter(truncated).to_pylist()]
    keep = pc.invert(truncated)
    if cuts:  # the state is emptied before the first change at or after each cut
        at, where = max(cuts)
        keep = pc.and_(keep, pc.or_(pc.greater(lsn, at), pc.and_(pc.equal(lsn, at), pc.greater_equal(position, where))))
    return table.filter(keep) if not pc.all(keep).as_py() else table


def _by_key(table: pa.Table, columns: Sequence[str], key: Sequence[str]) -> tuple[pa.Table, pa.Table] | None:
    """The last change of each key whose changes are all plain (no update with an unchanged TOASTed value),
    where it sets a row, and the changes of the other keys in commit order; ``None`` when the whole table
    must go to the change-by-change fold (see the module docstring)."""
    width = len(columns)
    op, toast = table.column(0), table.column(4 + width)
    updates = pc.equal(op, "update")
    if not pc.any(pc.is_in(op, value_set=_REPLACING)).as_py():  # inserts only: every row stays, equal ones too
        return table, table.slice(0, 0)
    if len(set(key)) >= width:
        return None
    moved = pc.and_(updates, table.column(3 + width).is_valid())
    if pc.any(moved).as_py():
        return None
    n = table.num_rows
    keys = pa.table({f"k{i}": table.column(3 + columns.index(name)) for i, name in enumerate(key)})
    keys = keys.append_column("at", pa.array(range(n), pa.int64()))
    try:
        order = pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in keys.column_names])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return None
    ordered = keys.take(order)
    starts = pa.array([True])  # where each key's changes start in the sorted order
    if n > 1:
        starts = pa.concat_arrays([starts, reduce(pc.or_, [_unlike(ordered.column(i).combine_chunks())
                                                           for i in range(len(key))])])
    firsts = pc.indices_nonzero(starts).cast(pa.int64())
    lasts = pa.concat_arrays([pc.subtract(firsts.slice(1), 1), pa.array([n - 1], pa.int64())])
    # per key, how many of its changes carry unchanged TOASTed values: from a running count
    toasted = pc.fill_null(pc.greater(pc.list_value_length(toast), 0), False).take(order).cast(pa.int64())
    running = pc.cumulative_sum(toasted)
    counts = pc.add(pc.subtract(running.take(lasts), running.take(firsts)), toasted.take(firsts))
    plain = pc.equal(counts, 0)
    at = ordered.column("at").combine_chunks()
    winners = at.take(lasts.filter(plain))
    winners = winners.filter(pc.is_in(op.take(winners).combine_chunks(), value_set=pa.array(_SETS)))
    key_of = pc.subtract(pc.cumulative_sum(starts.cast(pa.int64())), 1)  # each sorted change's key number
    rest = at.filter(pc.invert(plain.take(key_of)))
    return table.take(winners), table.take(rest.take(pc.array_sort_indices(rest)))


def _unlike(values: pa.Array) -> pa.Array:
    """Whether each value but the first differs from the one before it (null beside null is alike, null beside
    a value not)."""
    before, after = values.slice(0, len(values) - 1), values.slice(1)
    unlike = pc.not_equal(after, before)
    return pc.if_else(pc.is_null(unlike), pc.not_equal(pc.is_null(after), pc.is_null(before)), unlike)


def _as_rows(changes: pa.Table, width: int, arrow_schema: pa.Schema) -> pa.Table:
    """Rows of ``arrow_schema`` from the changes that set them (no unknown columns: none was TOASTed)."""
    types = arrow_schema.types
    arrays = [changes.column(3 + i).cast(types[i]) for i in range(width)]
    texts = changes.column(5 + width)
    if texts.null_count == len(texts):
        arrays.append(pa.nulls(len(texts), types[width]))
    elif pa.types.is_map(texts.type):
        arrays.append(texts.cast(types[width]))
    else:
        arrays.append(pa.array([_items(values) for values in _unrepresentable(texts)], types[width]))
    arrays.append(pa.nulls(len(texts), types[width + 1]))
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def _unrepresentable(column: pa.Array) -> list[dict[str, str] | None]:
    """The values of an ``_unrepresentable`` column: a map (the change files), or JSON objects (from Spark,
    which hands a string to Python several times faster than a map)."""
    if pa.types.is_map(column.type):
        return [dict(items) if items else None for items in column.to_pylist()]
    return [json.loads(text) if text else None for text in column.to_pylist()]


def _items(values: dict[str, str] | None) -> list[tuple[str, str]] | None:
    return sorted(values.items()) if values else None


def _changes_folded(table: pa.Table, columns: Sequence[str], key: Sequence[str], arrow_schema: pa.Schema) -> pa.Table:
    """:func:`~replwire.codec.stream.fold.fold` of ``table``'s changes (in commit order), as rows of
    ``arrow_schema``."""
    width = len(columns)
    def changes(batch: pa.RecordBatch) -> Iterator[Any]:
        before, odd = batch.column(3 + width), batch.column(5 + width)
        # most batches carry no old key and nothing unrepresentable: no per-row work for those
        olds: Iterable[Any] = repeat(None) if before.null_count == len(before) else [
            old if valid else None for valid, old in
            zip(before.is_valid().to_pylist(), zip(*[f.to_pylist() for f in before.flatten()]))]
        odds: Iterable[Any] = repeat(None) if odd.null_count == len(odd) else _unrepresentable(odd)
        return zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), batch.column(2).to_pylist(),
                   zip(*[batch.column(3 + i).to_pylist() for i in range(width)]), olds,
                   batch.column(4 + width).to_pylist(), odds)

    rows = fold(chain.from_iterable(map(changes, table.to_batches())), columns, key)
    types = arrow_schema.types  # by place: a table may have columns named like the last two
    values = list(zip(*rows)) if rows else [()] * (width + 2)
    arrays = [pa.array(values[i], type=types[i]) for i in range(width)]
    arrays.append(pa.array([_items(o) for o in values[width + 1]], type=types[width]))
    arrays.append(pa.array([list(u) if u else None for u in values[width]], type=types[width + 1]))
    return pa.Table.from_arrays(arrays, schema=arrow_schema)
