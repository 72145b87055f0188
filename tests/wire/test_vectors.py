"""Golden vectors, both directions, and the errors of the invalid ones."""

import pytest

from replwire.codec import DecodeError
from tests.support.vectors import INVALID, VALID, expected_message


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_vector_parses_to_expected(vector):
    assert vector.parse() == expected_message(vector.expect)


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_vector_builds_to_wire(vector):
    assert vector.build(expected_message(vector.expect)) == vector.wire


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_vector_round_trips(vector):
    assert vector.build(vector.parse()) == vector.wire


@pytest.mark.parametrize("vector", INVALID, ids=lambda v: v.name)
def test_invalid_vector_error(vector):
    with pytest.raises(DecodeError) as caught:
        vector.parse()
    error = caught.value
    expected = vector.error
    assert error.offset == expected["offset"]
    assert error.field == expected["field"]
    assert expected["reason"] in error.reason
    if "tag" in expected:
        assert error.tag == expected["tag"]
    if vector.layer == "logical":
        assert error.proto_version == vector.ctx["proto_version"]
        if vector.wire:
            assert error.tag == chr(vector.wire[0])
    # The message says where and what in one line.
    text = str(error)
    assert f"at offset {expected['offset']}" in text
    if expected["field"]:
        assert expected["field"] in text


def test_vectors_cover_every_message_class():
    from replwire import schema

    covered = {v.expect["class"] for v in VALID}
    wanted = {spec.name for spec in schema.LOGICAL_MESSAGES}
    wanted |= {spec.name for specs in schema.ENVELOPE.values() for spec in specs.values()}
    assert wanted <= covered, wanted - covered


def test_vectors_cover_every_tuple_kind_and_marker():
    kinds, markers = set(), set()
    for v in VALID:
        for name in ("new", "old", "key"):
            columns = v.expect.get(name)
            if columns is not None:
                markers.add((v.expect["class"], name))
                kinds.update(c[0] for c in columns)
    assert kinds == {"n", "u", "t", "b"}
    assert {("Update", "key"), ("Update", "old"), ("Delete", "key"), ("Delete", "old"), ("Insert", "new")} <= markers
