"""The fuzz target of serve's protocol core holds on its seeds and on random bytes, and reports a session that
breaks its invariant."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replwire.codec.serve import fuzz
from replwire.codec.serve.walsender import Session


@pytest.mark.parametrize("seed", fuzz.SEEDS, ids=range(len(fuzz.SEEDS)))
def test_the_seeds_hold(seed):
    fuzz.fuzz_session(seed)


@given(st.binary(max_size=300))
def test_random_client_bytes_hold(data):
    fuzz.fuzz_session(data)


@given(st.sampled_from([2, 3, 6]), st.binary(max_size=200))
def test_random_bytes_after_a_startup_hold(flags, data):
    fuzz.fuzz_session(bytes([flags, len(data) // 2]) + data)


def test_a_session_that_raises_is_a_finding(monkeypatch):
    def broken(self, data, now):
        raise KeyError("broken")

    monkeypatch.setattr(Session, "receive", broken)
    with pytest.raises(KeyError):
        fuzz.fuzz_session(fuzz.SEEDS[0])


def test_the_seeds_start_the_corpus_of_the_target(tmp_path):
    from replwire.codec.testing.fuzz import target_seeds, write_corpus

    seeds = target_seeds("replwire.codec.serve.fuzz:fuzz_session")
    assert seeds == fuzz.SEEDS
    assert write_corpus(tmp_path, seeds) == len(set(fuzz.SEEDS))
    assert sorted(p.read_bytes() for p in tmp_path.iterdir()) == sorted(set(fuzz.SEEDS))
