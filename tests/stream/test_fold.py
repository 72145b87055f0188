"""The fold of ``apply`` (:func:`replwire.codec.stream.fold.fold`) on hand-made changes.

Each case lists the changes in commit order, as a fold is handed them, and the current rows worked out by
hand from the rules of :mod:`replwire.codec.stream.fold`'s docstring: an insert sets the row, an update
replaces the row its old key (or, without an old image, its new key) names, an unchanged TOASTed value
keeps the value the row had (and its unrepresentable text), or is unknown if the row was never seen, a
delete removes the row, a TRUNCATE empties the table.
"""

from __future__ import annotations

from replwire.codec.stream.fold import fold as fold_changes


def fold(columns, key, changes, truncates=()):
    """Run the fold over ``changes`` -- (op, commit_lsn, position, values, old key or None, unchanged TOAST
    names or None, unrepresentable dict or None), handed over as an iterator; the current rows as sorted
    (values..., unrepresentable items, unknown columns) tuples."""
    width = len(columns)
    rows = fold_changes(iter(changes), columns, key, list(truncates))
    for row in rows:
        assert len(row) == width + 2
        assert row[width] is None or (row[width] and list(row[width]) == sorted(row[width]))
        assert row[width + 1] is None or (isinstance(row[width + 1], dict) and row[width + 1])
    return sorted((*row[:width], tuple(sorted((row[width + 1] or {}).items())), tuple(row[width] or ()))
                  for row in rows)


COLUMNS = ["id", "v", "n", "t"]


def test_fold_insert_update_delete_and_unchanged_toast():
    changes = [
        ("insert", 10, 1, (1, "a", "1.5", "T1"), None, None, None),
        ("insert", 10, 2, (2, "b", None, "T2"), None, None, {"n": "NaN"}),
        ("update", 11, 3, (1, "a2", "1.5", None), None, ["t"], None),  # t unchanged: keeps T1
        ("update", 12, 4, (20, "b2", None, None), (2,), ["n", "t"], None),  # key 2 -> 20, n and t unchanged
        ("insert", 12, 5, (3, "c", None, "T3"), None, None, None),
        ("delete", 13, 6, (1, None, None, None), None, None, None),
        ("update", 13, 7, (4, "d", "4", None), None, ["t"], None),  # row from before the capture: t unknown
        ("update", 14, 8, (4, "d2", "4", None), None, ["t"], None),  # still unknown
        ("update", 14, 9, (3, "c2", None, None), None, [], {"n": "Infinity"}),  # no unchanged TOAST
    ]
    assert fold(COLUMNS, ["id"], changes) == [
        (3, "c2", None, None, (("n", "Infinity"),), ()),
        (4, "d2", "4", None, (), ("t",)),
        (20, "b2", None, "T2", (("n", "NaN"),), ()),
    ]


def test_fold_key_changes_chain_and_reuse_of_a_key():
    changes = [
        ("insert", 1, 1, (1, "a", None, "T"), None, None, None),
        ("update", 2, 2, (2, "a", None, None), (1,), ["t"], None),  # 1 -> 2
        ("update", 3, 3, (3, "a", None, None), (2,), ["t"], None),  # 2 -> 3
        ("insert", 4, 4, (1, "again", None, "U"), None, None, None),  # key 1 free again
        ("delete", 5, 5, (None, None, None, None), (3,), None, None),  # delete with the old key only
    ]
    assert fold(COLUMNS, ["id"], changes) == [(1, "again", None, "U", (), ())]


def test_fold_truncate_seen_by_the_task_and_announced_to_it():
    changes = [
        ("insert", 1, 1, (1, "a", None, "T1"), None, None, None),
        ("insert", 1, 2, (2, "b", None, "T2"), None, None, None),
        ("truncate", 2, 3, (None, None, None, None), None, None, None),
        ("insert", 3, 4, (3, "c", None, "T3"), None, None, None),
        ("update", 3, 5, (2, "b2", None, None), None, ["t"], None),  # its row went with the TRUNCATE
    ]
    after = [(2, "b2", None, None, (), ("t",)), (3, "c", None, "T3", (), ())]
    assert fold(COLUMNS, ["id"], changes) == after  # the task meets the TRUNCATE row
    without_it = [c for c in changes if c[0] != "truncate"]  # another task got it: only its place is told
    assert fold(COLUMNS, ["id"], without_it, truncates=[(2, 3)]) == after
    assert fold(COLUMNS, ["id"], without_it) == [  # not told: nothing emptied
        (1, "a", None, "T1", (), ()), (2, "b2", None, "T2", (), ()), (3, "c", None, "T3", (), ())]
    # a fold whose keys have no change after the TRUNCATE another fold met: emptied all the same
    assert fold(COLUMNS, ["id"], changes[:2], truncates=[(2, 3)]) == []


def test_fold_replica_identity_full_matches_whole_old_images_one_row_at_a_time():
    columns = ["a", "b"]
    changes = [
        ("insert", 1, 1, (1, "x"), None, None, None),
        ("insert", 1, 2, (1, "x"), None, None, None),  # the same row twice
        ("insert", 1, 3, (2, "y"), None, None, None),
        ("insert", 1, 4, (3, None), None, None, None),
        ("delete", 2, 5, (None, None), (1, "x"), None, None),  # one of the two
        ("update", 3, 6, (2, "z"), (2, "y"), None, None),
        ("update", 3, 7, (3, "w"), (3, None), None, None),  # a NULL in the old image matches a NULL
        ("delete", 4, 8, (None, None), (2, "y"), None, None),  # no such row any more: nothing
    ]
    assert fold(columns, columns, changes) == [
        (1, "x", (), ()), (2, "z", (), ()), (3, "w", (), ())]


def test_fold_of_nothing_is_no_rows():
    assert fold(COLUMNS, ["id"], []) == []


def test_fold_leaves_the_changes_it_is_handed_as_they_were():
    odd = {"n": "NaN"}
    changes = [
        ("insert", 1, 1, (1, "a", None, None), None, None, {"t": "x"}),
        ("update", 2, 2, (1, "b", None, None), None, ["t"], odd),  # t's text comes from the insert
    ]
    assert fold(COLUMNS, ["id"], changes) == [(1, "b", None, None, (("n", "NaN"), ("t", "x")), ())]
    assert odd == {"n": "NaN"}
