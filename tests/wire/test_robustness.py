"""Every strict prefix of a valid message is refused, and so is a valid message with a byte appended.

Seeds are the golden vectors and the stored real-server corpus.  Mutated and random input (bit flips,
truncation, extension, splicing, corrupted length and count fields) is the property tests' business:
``tests/wire/test_properties.py``, with the mutations derived from the declarations in
``replwire.codec.testing.strategies``.
"""

from __future__ import annotations

import pytest

from replwire.codec import DecodeError, StreamAbort, XLogData, build, build_envelope, parse, parse_envelope
from tests.support.seeds import ALL, Seed


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
