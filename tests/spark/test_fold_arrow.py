"""The fold of ``apply`` on Arrow (:func:`replwire.spark.fold.fold_batches`) against the change-by-change fold
(:func:`replwire.codec.stream.fold.fold`, whose rules tests/stream/test_fold.py checks by hand and the apply
tests against ``SELECT *`` on real servers), on change sequences a server can send: a key is inserted only when
no row holds it, an update names its row by its new key or (a key change) its old key, a delete carries its
row's key, TRUNCATEs are in the rows or only announced, a backfill's rows replace their key's row; unchanged
TOASTed values, unrepresentable values, tables without a key (every row kept, REPLICA IDENTITY FULL), batches
of any size and both forms of the unrepresentable column (JSON from Spark, a map from the change files).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replwire.codec.stream.fold import fold
from replwire.spark.fold import fold_batches

COLUMNS = ["id", "k2", "v", "t"]
TYPES = [pa.int64(), pa.string(), pa.string(), pa.string()]
OUT = pa.schema([*(pa.field(c, t) for c, t in zip(COLUMNS, TYPES)),
                 pa.field("_unrepresentable", pa.map_(pa.string(), pa.string())),
                 pa.field("_unchanged_toast", pa.list_(pa.string()))])


def layout(changes, key, odd_as_map: bool, size: int) -> list[pa.RecordBatch]:
    """``changes`` (the change-by-change fold's tuples) as batches of ``size`` rows in fold_batches' layout."""
    odd_type = pa.map_(pa.string(), pa.string()) if odd_as_map else pa.string()
    key_type = pa.struct([pa.field(k, TYPES[COLUMNS.index(k)]) for k in key])
    arrays = [pa.array([c[0] for c in changes], pa.string()), pa.array([c[1] for c in changes], pa.int64()),
              pa.array([c[2] for c in changes], pa.int64()),
              *[pa.array([c[3][i] for c in changes], TYPES[i]) for i in range(len(COLUMNS))],
              pa.array([dict(zip(key, c[4])) if c[4] is not None else None for c in changes], key_type),
              pa.array([c[5] for c in changes], pa.list_(pa.string())),
              pa.array([(sorted(c[6].items()) if odd_as_map else json.dumps(c[6])) if c[6] is not None else None
                        for c in changes], odd_type)]
    table = pa.Table.from_arrays(arrays, names=[f"f{i}" for i in range(len(arrays))])
    return table.to_batches(max_chunksize=size) if len(table) else []


def canonical(rows) -> list:
    """Rows as sorted (values..., unrepresentable items, unknown columns) tuples."""
    width = len(COLUMNS)
    return sorted(((tuple(r[:width]), tuple(sorted((r[width + 1] or {}).items())), tuple(r[width] or ()))
                   for r in rows), key=repr)


def arrow_rows(batches) -> list:
    table = pa.Table.from_batches(list(batches), OUT)
    return [(*[row[c] for c in COLUMNS], row["_unchanged_toast"], dict(row["_unrepresentable"] or []) or None)
            for row in table.to_pylist()]


@st.composite
def streams(draw):
    """(key, changes, truncates announced but not in the rows)."""
    key = draw(st.sampled_from([["id"], ["id", "k2"], COLUMNS]))
    keyless = key == COLUMNS  # REPLICA IDENTITY FULL: rows can be equal, updates match their whole old image
    ids, k2s, texts = st.integers(0, 4), st.sampled_from(["a", "b"]), st.sampled_from([None, "x", "y", "z"])
    live: list[tuple] = []
    changes, announced = [], []
    for position in range(draw(st.integers(0, 40))):
        lsn = position // 3
        op = draw(st.sampled_from(["insert", "insert", "update", "update", "delete", "truncate", "backfill"]))
        odd = draw(st.none() | st.just({"v": "NaN"}))
        if op == "truncate":
            live.clear()
            if draw(st.booleans()):
                announced.append((lsn, position))
            else:
                changes.append(("truncate", lsn, position, (None,) * 4, None, None, None))
            continue
        row = (draw(ids), draw(k2s), draw(texts), draw(texts))
        ident = row if keyless else tuple(row[COLUMNS.index(k)] for k in key)
        if op == "backfill":  # a row a backfill read (tables with a key): the key's row as it is there
            if keyless:
                continue
            live = [r for r in live if tuple(r[COLUMNS.index(k)] for k in key) != ident]
            live.append(row)
            changes.append(("backfill", lsn, position, row, None, None, odd))
            continue
        if op == "insert":
            if not keyless and any(tuple(r[COLUMNS.index(k)] for k in key) == ident for r in live):
                continue  # the server refuses a second row with the key
            live.append(row)
            changes.append(("insert", lsn, position, row, None, None, odd))
            continue
        if keyless:  # the whole old image: often a row that is there
            old = draw(st.sampled_from(live)) if live and draw(st.booleans()) else (draw(ids), draw(k2s), None, "x")
        elif live and draw(st.integers(0, 3)) == 0:  # a key change (or an old key sent with an unchanged key)
            old = tuple(draw(st.sampled_from(live))[COLUMNS.index(k)] for k in key)
            if old != ident and any(tuple(r[COLUMNS.index(k)] for k in key) == ident for r in live):
                continue
        else:
            old = None
        matches = old if old is not None else ident
        live = [r for r in live if (r if keyless else tuple(r[COLUMNS.index(k)] for k in key)) != matches]
        if op == "delete":
            values = old if keyless and old is not None else tuple(
                (matches[key.index(c)] if c in key else None) for c in COLUMNS)
            changes.append(("delete", lsn, position, values, matches, None, None))
            continue
        toast = draw(st.none() | st.lists(st.sampled_from(["v", "t"]), unique=True))
        if toast:
            row = tuple(None if c in toast else value for c, value in zip(COLUMNS, row))
        live.append(row)
        changes.append(("update", lsn, position, row, old, toast, odd))
    return key, changes, announced


@settings(max_examples=400, deadline=None)
@given(streams(), st.booleans(), st.integers(1, 7))
def test_arrow_fold_equals_the_change_by_change_fold(stream, odd_as_map, size):
    key, changes, announced = stream
    expected = canonical(fold(iter(changes), COLUMNS, key, announced))
    got = canonical(arrow_rows(fold_batches(layout(changes, key, odd_as_map, size), COLUMNS, key, announced, OUT)))
    assert got == expected


@pytest.mark.parametrize("odd_as_map", [False, True])
def test_arrow_fold_of_a_hand_made_stream(odd_as_map):
    """Worked out by hand: a plain key's last change wins, a TOASTed update keeps its row's value or leaves it
    unknown, a delete removes, a TRUNCATE empties."""
    changes = [
        ("insert", 1, 1, (1, "a", "v1", "T1"), None, None, None),
        ("insert", 1, 2, (2, "a", "v2", "T2"), None, None, {"v": "NaN"}),
        ("insert", 1, 3, (9, "a", "gone", None), None, None, None),
        ("truncate", 2, 4, (None,) * 4, None, None, None),
        ("insert", 3, 5, (1, "a", "w1", "U1"), None, None, None),
        ("update", 3, 6, (1, "a", "w1b", None), None, ["t"], None),  # t kept: U1
        ("update", 4, 7, (3, "a", "w3", None), None, ["t"], None),  # a row from before: t unknown
        ("insert", 4, 8, (4, "a", "w4", "T4"), None, None, {"t": "Infinity"}),
        ("update", 5, 9, (4, "a", "w4b", "T4b"), None, [], None),
        ("insert", 5, 10, (5, "a", "w5", None), None, None, None),
        ("delete", 6, 11, (5, "a", None, None), (5,), None, None),
    ]
    rows = canonical(arrow_rows(fold_batches(layout(changes, ["id"], odd_as_map, 4), COLUMNS, ["id"], [], OUT)))
    assert rows == [((1, "a", "w1b", "U1"), (), ()), ((3, "a", "w3", None), (), ("t",)),
                    ((4, "a", "w4b", "T4b"), (), ())]


def test_arrow_fold_of_nothing_is_an_empty_batch_of_the_schema():
    batches = list(fold_batches([], COLUMNS, ["id"], [], OUT))
    assert [b.num_rows for b in batches] == [0] and batches[0].schema == OUT


def test_a_backfill_row_replaces_its_keys_row_among_inserts_only():
    """Inserts and a backfill's rows, no update or delete: each key keeps one row, the backfill's (a table
    whose rows the stream inserted, then backfilled)."""
    changes = [
        ("snapshot", 1, 1, (1, "a", "old", None), None, None, None),
        ("insert", 2, 2, (2, "a", "inserted", None), None, None, None),
        ("backfill", 3, 3, (1, "a", "read", None), None, None, None),
        ("backfill", 3, 4, (2, "a", "read", None), None, None, None),
    ]
    for size in (1, 4):
        rows = canonical(arrow_rows(fold_batches(layout(changes, ["id"], True, size), COLUMNS, ["id"], [], OUT)))
        assert rows == [((1, "a", "read", None), (), ()), ((2, "a", "read", None), (), ())]
