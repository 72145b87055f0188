"""The fuzz target of ``texts_typed`` (:mod:`replwire.codec.stream.fuzz`) on its seeds, every cut of them and
every flags byte: each is read or declined with the layout of its form, or refused where the form or the
decimal's precision and scale cannot be (the libFuzzer run under the sanitizers is ``make fuzz-compiled``)."""

from __future__ import annotations

from array import array

import pytest

from replwire.codec.stream import fuzz
from replwire.codec.wire.fast import COMPILED


@pytest.mark.parametrize("seed", fuzz.SEEDS, ids=range(len(fuzz.SEEDS)))
def test_seeds_cuts_and_flags(seed):
    for cut in range(len(seed) + 1):
        fuzz.fuzz_texts(seed[:cut])
    for flags in range(256):
        fuzz.fuzz_texts(seed[:1] + bytes([flags]) + seed[2:])
    fuzz.fuzz_texts(bytes([0]) + seed[1:])  # no such form
    fuzz.fuzz_texts(bytes([99]) + seed[1:])


@pytest.mark.skipif(COMPILED is None, reason="the compiled codec's reader (the Python codec has none)")
def test_each_seed_is_read_whole():
    """The seeds are in their forms but for the near misses among them: the reader takes all the others."""
    misses = (b"\xff", b"32768", b"1e-400")
    for seed in fuzz.SEEDS:
        items = [item for item in seed[2:].split(b"\0") if item not in misses]
        offsets = array("i", [sum(map(len, items[:n])) for n in range(len(items) + 1)])
        made = COMPILED.texts_typed(seed[0], len(items), 0, None, offsets.tobytes(), b"".join(items), 12, 2)
        assert made is not None, seed
