"""The current rows of a table, folded from its committed changes in commit order: what ``apply`` computes.

Rules, per row identity (the values of the ``key`` columns -- the replica identity; all columns for a table
with REPLICA IDENTITY FULL): an insert -- or a row of the initial snapshot, which comes first, at the
snapshot's LSN -- sets the row; a row a backfill read (at its chunk's position) replaces its key's row, or
sets it; an update replaces the row its old key names (the key
of its new image when it carried no old one), so a key change moves the row; a delete removes it; a
TRUNCATE empties the table.  An unchanged TOASTed value -- the server sends "unchanged" instead of a large
value an update did not touch -- keeps the value the row had (and its unrepresentable text, if it had
one); when the fold has not seen the row before (it was last written before the capture began), the value
is unknown: the column is named in the row's ``unknown`` and its value stays None.  Rows of a table
without a key can be equal: the fold keeps each, and an update or delete meets the first of them.

Strategy: plain Python values in, plain tuples out, so any engine can feed it (Spark hands it one table's
rows, or one hash range of its keys, per task; see :mod:`replwire.spark.jobs`).  A row of the state is one
tuple, ``(*values, unknown, unrepresentable)``: tuples of plain values are what the cyclic garbage
collector stops tracking, and :func:`~replwire.codec.gc_tuning.fewer_collections` makes it walk the state
less often while the fold runs.  ``state`` holds the first row of each identity, ``more`` the later ones.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..gc_tuning import fewer_collections

__all__ = ["Change", "fold"]

#: One committed change: ``(op, commit_lsn, position, new, old, unchanged_toast, unrepresentable)``.
#:
#: * ``op``: ``"insert"``, ``"update"``, ``"delete"``, ``"truncate"``, ``"snapshot"`` (a row of the initial
#:   snapshot: folded as an insert) or ``"backfill"`` (a row a backfill read: it replaces its key's row);
#: * ``commit_lsn``, ``position``: the change's place in the stream (its transaction's commit LSN, its index
#:   in the transaction), which orders the changes;
#: * ``new``: the values of the table's columns (for a delete without an old key: at least its key values);
#: * ``old``: the old image's values of the ``key`` columns, in ``key``'s order, or None when the change
#:   carried no old key or old image;
#: * ``unchanged_toast``: the names of the columns whose value is an unchanged TOASTed value (None or empty
#:   when there are none);
#: * ``unrepresentable``: column name -> the server's text of a value the engine cannot represent (None or
#:   empty when there are none).
Change = tuple[str, int, int, Sequence[Any], Sequence[Any] | None, Sequence[str] | None, Mapping[str, str] | None]


def fold(changes: Iterable[Change], columns: Sequence[str], key: Sequence[str],
         truncates: Iterable[tuple[int, int]] = ()) -> list[tuple[Any, ...]]:
    """The current rows of a table from its ``changes``, in commit order (see :data:`Change` and the module
    docstring for the rules).

    ``columns`` names the values of a change's ``new`` image, ``key`` the columns that identify a row.
    ``truncates`` are the ``(commit_lsn, position)`` of TRUNCATEs the caller knows of but does not pass in
    ``changes`` (when the changes of a table are spread over several folds by key, each must hear of every
    TRUNCATE): the state is emptied before the first change at or after each.

    Each row returned is a tuple ``(*values, unknown, unrepresentable)``: the values of ``columns``; the
    sorted names of the columns whose value is unknown (an unchanged TOASTed value of a row the fold had
    not seen), or None; the unrepresentable values (column name -> server text, a dict), or None.  Rows
    come in the order their identities were first set, equal rows together.
    """
    width = len(columns)
    index = {name: i for i, name in enumerate(columns)}
    ident = operator.itemgetter(*[index[k] for k in key])  # a value, or a tuple for a key of several columns
    old_ident = operator.itemgetter(*range(len(key)))  # the same from the old image's key values
    state: dict[Any, tuple[Any, ...]] = {}
    more: dict[Any, list[tuple[Any, ...]]] = {}
    cuts = iter(sorted(truncates))
    cut = next(cuts, None)

    with fewer_collections():
        for op, lsn, position, new, old, toast, odd in changes:
            while cut is not None and cut <= (lsn, position):
                state.clear()
                more.clear()
                cut = next(cuts, None)
            if op == "insert" or op == "snapshot":
                row = (*new, None, odd or None)
            elif op == "backfill":  # the key's row as it is here: it replaces what the key had
                row = (*new, None, odd or None)
                found = ident(row)
                more.pop(found, None)
                state[found] = row
                continue
            elif op == "truncate":
                state.clear()
                more.clear()
                continue
            else:
                found = old_ident(old) if old is not None else ident(new)
                previous = state.get(found)
                if previous is not None:
                    later = more.get(found)
                    if later:
                        state[found] = later.pop(0)
                        if not later:
                            del more[found]
                    else:
                        del state[found]
                if op == "delete":
                    continue
                if not toast:
                    row = (*new, None, odd or None)
                else:  # unchanged TOASTed values keep what the row had
                    values = list(new)
                    kept = dict(odd) if odd else {}
                    unknown: set[str] = set()
                    for name in toast:
                        i = index[name]
                        if previous is not None and (previous[width] is None or name not in previous[width]):
                            values[i] = previous[i]
                            if previous[width + 1] is not None and name in previous[width + 1]:
                                kept[name] = previous[width + 1][name]
                        else:
                            unknown.add(name)
                    row = (*values, tuple(sorted(unknown)) or None, kept or None)
            found = ident(row)
            if found in state:
                more.setdefault(found, []).append(row)
            else:
                state[found] = row
        if cut is not None:  # a TRUNCATE after the last change handed over (met by another fold)
            state.clear()
            more.clear()
    if not more:
        return list(state.values())
    rows: list[tuple[Any, ...]] = []
    for found, row in state.items():
        rows.append(row)
        rows.extend(more.get(found, ()))
    return rows
