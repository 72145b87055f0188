"""The codec's properties, on messages and bytes made by the strategies derived from the declarations.

- ``parse(build(m)) == m`` for generated ``m``, in every context where ``m`` fits (and ``build`` refuses
  it with ``EncodeError`` in every other context);
- ``build(parse(b)) == b`` for every golden vector and real captured message;
- the decoder invariant (:func:`replwire.codec.testing.fuzz.check`, the fuzz target's own check) on damaged real
  messages and random bytes, and no allocation out of proportion to the input;
- the encoder invariant: invalid objects raise ``EncodeError`` naming the damaged field.

The checks are the fuzz harness's own (:mod:`replwire.codec.testing.fuzz`), so each property also runs the fast
codec against the reference path (same result, or same error and field).
Example counts come from the Hypothesis profile (``tests/conftest.py``; ``REPLWIRE_FUZZ_PROFILE=long``).
"""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import example, given

from replwire.codec import (
    CommitPrepared,
    Message,
    Relation,
    RelationColumn,
    Truncate,
    TupleColumn,
    Update,
    XLogData,
)
from replwire.codec.testing import fuzz, strategies
from replwire.codec.testing.strategies import Case, Context, Invalid
from replwire.codec.wire import reference
from tests.support.seeds import ALL, Seed

CODECS = fuzz.other_codecs()


def context_of(seed: Seed) -> Context:
    if seed.layer == "envelope":
        return Context("envelope", sender=seed.sender)
    return Context("logical", seed.proto_version, seed.in_stream)


SEEDS = [(context_of(s), s.data) for s in ALL]


@given(strategies.cases())
def test_parse_build_round_trip_in_every_context_it_fits(case):
    fuzz.check_case(case)  # and refused with EncodeError where it does not fit (e.g. an xid outside a stream)


@pytest.mark.parametrize("seed", ALL, ids=lambda s: s.name)
def test_every_vector_and_real_message_round_trips(seed):
    assert fuzz.check(context_of(seed), seed.data) is not None  # parses, and rebuilds to the same bytes


@given(strategies.mutants(SEEDS))
def test_decoder_returns_a_message_that_rebuilds_or_raises_decode_error(mutant):
    fuzz.check(*mutant)


#: Bytes a parse may allocate: a constant, plus this many per input byte (a Python object per field).
ALLOCATION_BASE, ALLOCATION_PER_BYTE = 64 * 1024, 256


@given(strategies.mutants(SEEDS))
def test_decoding_allocates_in_proportion_to_the_input(mutant):
    """Lengths and counts are never trusted: a lying one does not make the parser allocate for it."""
    context, data = mutant
    tracemalloc.start()
    try:
        for codec in (reference, *CODECS):
            try:
                context.parse(data, codec)
            except ValueError:
                pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= ALLOCATION_BASE + ALLOCATION_PER_BYTE * len(data), (peak, len(data))


def _damaged(message, context, field, how="found by fuzzing"):
    return Invalid(Case(message, context), field, how)


P1 = Context("logical", 1)


@given(strategies.invalid_cases())
# Findings of this property, kept as regressions: None for a required field let a TypeError out of build
# (Message.content, XLogData.data, Truncate.relation_ids); a float 0.0 passed as the always-zero flags.
@example(_damaged(Message(flags=0, lsn=1, prefix="", content=None), P1, "content"))
@example(_damaged(XLogData(data_start=1, wal_end=2, send_time=3, data=None), Context("envelope", sender="server"),
                  "data"))
@example(_damaged(Truncate(options=0, relation_ids=None), P1, "relation_ids"))
@example(_damaged(CommitPrepared(flags=0.0, commit_lsn=1, end_lsn=2, commit_time=3, xid=4, gid=""),
                  Context("logical", 3), "flags"))
# Always tried: an image the condition excludes (old beside key), and a String UTF-8 cannot hold.
@example(_damaged(Update(relation_id=1, key=[TupleColumn.null()], old=[], new=[]), P1, "old"))
@example(_damaged(Relation(relation_id=1, namespace="", name="", replica_identity="d",
                           columns=[RelationColumn(flags=0, name="\ud800", type_id=1, type_modifier=-1)]),
                  P1, "columns[0].name"))
def test_encoder_refuses_invalid_objects_naming_the_field(invalid):
    fuzz.check_invalid(invalid)
