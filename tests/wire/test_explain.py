"""``explain`` covers every byte of a message exactly once, in order, with the right field names."""

import pytest

from replwire.codec import DecodeError
from replwire.codec.wire.explain import explain
from tests.support.seeds import ALL


def explain_seed(seed):
    if seed.layer == "envelope":
        return explain(seed.data, sender=seed.sender)
    return explain(seed.data, proto_version=seed.proto_version, in_stream=seed.in_stream)


@pytest.mark.parametrize("seed", ALL, ids=lambda s: s.name)
def test_segments_cover_every_byte_once(seed):
    explanation = explain_seed(seed)
    position = 0
    for segment in explanation.segments:
        assert segment.start == position and segment.end > segment.start
        assert segment.raw == seed.data[segment.start:segment.end]
        position = segment.end
    assert position == len(seed.data)
    assert b"".join(s.raw for s in explanation.segments) == seed.data


def test_update_with_key_is_explained_field_by_field():
    data = bytes.fromhex("55000040014b000274000000013" "16e4e0002740000000132740000000178")
    segments = explain(data, proto_version=1).segments
    assert [(s.start, s.path, s.value) for s in segments] == [
        (0, "tag", "'U'"),
        (1, "relation_id", "16385"),
        (5, "key", "marker 'K', count 2"),
        (8, "key[0].kind", "'t'"),
        (9, "key[0].data", "1 byte: 1"),
        (14, "key[1].kind", "'n'"),
        (15, "new", "marker 'N', count 2"),
        (18, "new[0].kind", "'t'"),
        (19, "new[0].data", "1 byte: 2"),
        (24, "new[1].kind", "'t'"),
        (25, "new[1].data", "1 byte: x"),
    ]
    assert segments[2].header and not segments[3].header
    # a value of two bytes: Insert, relation 16385, one text column "ab" (written by hand)
    segments = explain(bytes.fromhex("4900004001" "4e0001" "7400000002" "6162"), proto_version=1).segments
    assert [(s.start, s.path, s.value) for s in segments][-1] == (9, "new[0].data", "2 bytes: ab")


def test_values_are_shown_as_the_protocol_means_them():
    text = explain(bytes.fromhex("6B000000000169E5D80002894463074DC801"), sender="server").text()
    assert "wal_end" in text and "0/169E5D8" in text
    assert "2022-08-15T11:06:05.625800+00:00" in text


def test_explaining_bad_bytes_raises_the_parse_error():
    with pytest.raises(DecodeError) as caught:
        explain(bytes.fromhex("4201"), proto_version=1)
    assert caught.value.field == "final_lsn" and caught.value.offset == 1
