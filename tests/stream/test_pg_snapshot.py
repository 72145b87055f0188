"""``pg_current_snapshot()`` text and the visibility of 32-bit stream xids against it
(:mod:`replwire.codec.stream.pg_snapshot`), with hand-checked values around an xid wraparound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replwire.codec.stream.pg_snapshot import Snapshot

EPOCH = 1 << 32


def test_parse_and_print():
    s = Snapshot.parse("745:750:745,748")
    assert (s.xmin, s.xmax, s.xip) == (745, 750, frozenset({745, 748}))
    assert str(s) == "745:750:745,748"
    assert Snapshot.parse("750:750:") == Snapshot(750, 750, frozenset())
    assert str(Snapshot.parse(f"{3 * EPOCH + 5}:{3 * EPOCH + 9}:{3 * EPOCH + 7}")) == \
        f"{3 * EPOCH + 5}:{3 * EPOCH + 9}:{3 * EPOCH + 7}"


@pytest.mark.parametrize("text", ["", "1:2", "a:b:", "1:2:x", "5:4:", "5:9:3", "5:9:9", "1:2:3:4"])
def test_not_a_snapshot(text):
    with pytest.raises(ValueError):
        Snapshot.parse(text)


def test_visibility_of_committed_xids():
    s = Snapshot.parse("745:750:745,748")
    assert [x for x in range(740, 755) if s.sees(x)] == [740, 741, 742, 743, 744, 746, 747, 749]


def test_widen_across_a_wraparound():
    # xmin in epoch 1 just before its low 32 bits wrap; xids after the wrap are in epoch 2
    s = Snapshot(2 * EPOCH - 10, 2 * EPOCH + 5, frozenset({2 * EPOCH - 10, 2 * EPOCH + 3}))
    assert s.widen(EPOCH - 10) == 2 * EPOCH - 10
    assert s.widen(EPOCH - 1) == 2 * EPOCH - 1
    assert s.widen(3) == 2 * EPOCH + 3
    assert s.widen(7) == 2 * EPOCH + 7
    assert [s.sees(x) for x in (EPOCH - 10, EPOCH - 9, 3, 4, 5, 7)] == [False, True, False, True, False, False]
    # xmin just after a wrap: an xid from just before it belongs to the previous epoch
    t = Snapshot(5 * EPOCH + 4, 5 * EPOCH + 4, frozenset())
    assert t.widen(EPOCH - 2) == 5 * EPOCH - 2 and t.sees(EPOCH - 2) and not t.sees(4)
    # in epoch 0 there is no previous epoch
    assert Snapshot(3, 3, frozenset()).widen(EPOCH - 1) == EPOCH - 1


@given(st.integers(3, 2**40), st.integers(-(2**31) + 1, 2**31 - 1))
def test_widen_finds_the_xid8_within_half_the_xid_space_of_xmin(xmin, delta):
    full = xmin + delta
    if full < 0:
        return
    assert Snapshot(xmin, xmin, frozenset()).widen(full % EPOCH) == full


def test_widen_rejects_a_wider_value():
    with pytest.raises(ValueError):
        Snapshot(3, 3, frozenset()).widen(EPOCH)
