"""Bad input never escapes as anything but DecodeError, and whatever parses rebuilds to the same bytes.

Seeds are the golden vectors and the stored real-server corpus; the property test mutates them
(bit flips, truncation, extension, splicing, corrupted length and count fields) and also feeds random
bytes, under every protocol version and stream state.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replwire.codec import DecodeError, StreamAbort, WireMessage, XLogData, build, build_envelope, parse, parse_envelope
from seeds import ALL, Seed


def run(seed: Seed, data: bytes, proto_version: int | None = None, in_stream: bool | None = None):
    if seed.layer == "envelope":
        return parse_envelope(data, sender=seed.sender)
    return parse(data, proto_version=proto_version or seed.proto_version,
                 in_stream=seed.in_stream if in_stream is None else in_stream)


def rebuild(seed: Seed, message, proto_version=None, in_stream=None) -> bytes:
    if seed.layer == "envelope":
        return build_envelope(message)
    return build(message, proto_version=proto_version or seed.proto_version,
                 in_stream=seed.in_stream if in_stream is None else in_stream)


def prefix_may_parse(seed: Seed, length: int) -> bool:
    """Where the protocol itself makes a prefix a complete message: an XLogData whose payload is cut
    (the payload is whatever follows the 25-byte header), and the 9-byte form of a 25-byte Stream Abort."""
    full = run(seed, seed.data)
    if isinstance(full, XLogData):
        return length >= 25
    if isinstance(full, StreamAbort):
        return length == 9
    return False


@pytest.mark.parametrize("seed", ALL, ids=lambda s: s.name)
def test_every_strict_prefix_raises(seed):
    for length in range(len(seed.data)):
        prefix = seed.data[:length]
        if prefix_may_parse(seed, length):
            assert rebuild(seed, run(seed, prefix)) == prefix
            continue
        with pytest.raises(DecodeError):
            run(seed, prefix)


@pytest.mark.parametrize("seed", ALL, ids=lambda s: s.name)
def test_appended_byte_raises(seed):
    for extra in (b"\x00", b"\xff", b"N"):
        if isinstance(run(seed, seed.data), XLogData):
            assert run(seed, seed.data + extra).data.endswith(extra)
            continue
        with pytest.raises(DecodeError):
            run(seed, seed.data + extra)


def _mutate(draw, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "extend", "splice", "int32", "int16", "set"]))
        if kind == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        elif kind == "extend":
            data += draw(st.binary(min_size=1, max_size=16))
        elif kind == "splice":
            other = draw(st.sampled_from(ALL)).data
            i = draw(st.integers(0, len(data)))
            j = draw(st.integers(0, len(other)))
            data[i:] = other[j:]
        elif kind in ("int32", "int16") and len(data) > 4:
            width = 4 if kind == "int32" else 2
            i = draw(st.integers(1, len(data) - width))
            value = draw(st.sampled_from([0, 1, 2**(8 * width) - 1, 2**(8 * width - 1), 2**(8 * width - 1) - 1]))
            data[i:i + width] = value.to_bytes(width, "big")
        elif kind == "set" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.sampled_from(b"nutbKONBCRYIUDTMSEcAbPKrpwkh\x00\xff"))
    return bytes(data)


@st.composite
def mutated(draw):
    seed = draw(st.sampled_from(ALL))
    data = draw(st.one_of(st.binary(max_size=64), st.just(None)))
    if data is None:
        data = _mutate(draw, seed.data)
    proto = draw(st.integers(1, 4))
    in_stream = draw(st.booleans()) if proto >= 2 else False
    return seed, data, proto, in_stream


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_input_parses_or_raises_decode_error(case):
    seed, data, proto, in_stream = case
    try:
        message = run(seed, data, proto, in_stream)
    except DecodeError as error:
        assert 0 <= error.offset <= len(data)
        return
    assert isinstance(message, WireMessage)
    # Whatever is accepted rebuilds to exactly the bytes it came from.
    assert rebuild(seed, message, proto, in_stream) == data


@pytest.mark.parametrize("seed", [s for s in ALL if "#" in s.name], ids=lambda s: s.name)
def test_stored_real_messages_round_trip(seed):
    assert rebuild(seed, run(seed, seed.data)) == seed.data
