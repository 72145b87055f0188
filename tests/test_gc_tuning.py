"""The collector setting of split decoding: raised while a pass runs, restored after, also when passes overlap."""

from __future__ import annotations

import gc

from replwire.codec.gc_tuning import QUIET_THRESHOLDS, fewer_collections


def test_thresholds_are_raised_inside_and_restored_after_overlapping_users():
    before = gc.get_threshold()
    first, second = fewer_collections(), fewer_collections()
    first.__enter__()
    assert gc.get_threshold() == QUIET_THRESHOLDS
    second.__enter__()
    first.__exit__(None, None, None)  # the first to enter leaves first: the other is still decoding
    assert gc.get_threshold() == QUIET_THRESHOLDS
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before


def test_thresholds_are_restored_when_the_pass_fails():
    before = gc.get_threshold()
    try:
        with fewer_collections():
            raise RuntimeError("a bad record")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before
