"""COPY's rows cut into records -- text rows in one piece (``text_cuts``), rows one each (``row_cuts``): the
contract on hand-checked vectors and on drawn data, the compiled twins equal to the Python ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replwire.codec.stream import snapshot_records
from replwire.codec.wire.fast import COMPILED

NOT_BUILT = pytest.mark.skipif(COMPILED is None, reason="the compiled codec is not built here")
TWINS = [pytest.param(snapshot_records._text_cuts, id="python"),
         pytest.param(COMPILED.text_cuts if COMPILED is not None else None, id="compiled", marks=NOT_BUILT)]
ROW_TWINS = [pytest.param(snapshot_records._row_cuts, id="python"),
             pytest.param(COMPILED.row_cuts if COMPILED is not None else None, id="compiled", marks=NOT_BUILT)]


@pytest.mark.parametrize("cuts", TWINS)
@pytest.mark.parametrize(("data", "most", "expected"), [
    (b"", 5, []),
    (b"ab\ncd\nef\n", 3, [(1, 3), (1, 6), (1, 9)]),  # each line reaches 3 bytes on its own
    (b"ab\ncd\nef\n", 4, [(2, 6), (1, 9)]),  # two lines reach 4; the last one is what is left
    (b"ab\ncd\nef\n", 100, [(3, 9)]),
    (b"ab\ncd\nef\n", 1, [(1, 3), (1, 6), (1, 9)]),
    (b"\n\n\n", 2, [(2, 2), (1, 3)]),
    (b"ab\ncd", 2, [(1, 3), (0, 5)]),  # what follows the last newline ends the last cut, as no line
    (b"abcd", 2, [(0, 4)]),
])
def test_cuts_on_hand_checked_vectors(cuts, data, most, expected):
    assert cuts(data, most) == expected


@pytest.mark.parametrize("cuts", TWINS)
def test_a_cut_of_no_bytes_is_refused(cuts):
    for most in (0, -1):
        with pytest.raises(ValueError, match="most must be at least 1"):
            cuts(b"a\n", most)


@NOT_BUILT
@settings(max_examples=400, deadline=None)
@given(data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\\n", b"\t"]), max_size=200).map(b"".join),
       most=st.integers(min_value=1, max_value=40))
def test_the_compiled_cuts_are_the_python_ones_and_keep_the_contract(data, most):
    got = COMPILED.text_cuts(data, most)
    assert got == snapshot_records._text_cuts(data, most)
    assert COMPILED.text_cuts(memoryview(data), most) == got
    start = 0
    for number, (lines, end) in enumerate(got):
        piece = data[start:end]
        assert lines == piece.count(b"\n")
        last = number == len(got) - 1
        if not last:  # it reaches most bytes with its last line, not before
            assert piece.endswith(b"\n") and len(piece) >= most
            if lines > 1:
                assert len(piece[:piece.rindex(b"\n", 0, len(piece) - 1) + 1]) < most
        start = end
    assert start == len(data)


@pytest.mark.parametrize("cuts", ROW_TWINS)
@pytest.mark.parametrize(("rows", "most", "expected"), [
    ([], 5, []),
    ([b"ab", b"cde", b"f"], 2, [(1, 2), (1, 5), (1, 6)]),  # each row reaches 2 bytes on its own; the last is left
    ([b"ab", b"cde", b"f"], 4, [(2, 5), (1, 6)]),
    ([b"ab", b"cde", b"f"], 100, [(3, 6)]),
    ([b"", b"", b"abc", b""], 3, [(3, 3), (1, 3)]),  # empty rows count as rows
    ([b"abcdef"], 1, [(1, 6)]),
])
def test_row_cuts_on_hand_checked_vectors(cuts, rows, most, expected):
    assert cuts(rows, most) == expected


@pytest.mark.parametrize("cuts", ROW_TWINS)
def test_a_row_cut_of_no_bytes_is_refused(cuts):
    with pytest.raises(ValueError, match="most must be at least 1"):
        cuts([b"a"], 0)


@NOT_BUILT
def test_the_compiled_row_cuts_take_bytes_rows_only():
    with pytest.raises(TypeError, match="row 1 is str, not bytes"):
        COMPILED.row_cuts([b"a", "b"], 1)


@NOT_BUILT
@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.binary(max_size=12), max_size=60), most=st.integers(min_value=1, max_value=40))
def test_the_compiled_row_cuts_are_the_python_ones_and_keep_the_contract(rows, most):
    got = COMPILED.row_cuts(rows, most)
    assert got == snapshot_records._row_cuts(rows, most)
    first = 0
    for number, (count, end) in enumerate(got):
        piece = rows[first:first + count]
        assert count >= 1 and sum(map(len, rows[:first + count])) == end
        if number < len(got) - 1:  # it reaches most bytes with its last row, not before
            assert sum(map(len, piece)) >= most > sum(map(len, piece[:-1]))
        first += count
    assert first == len(rows)
