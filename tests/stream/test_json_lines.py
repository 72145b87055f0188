"""JSON lines straight from the wire (:class:`replwire.codec.stream.jsonl.JsonLines`, what ``replwire decode``
prints) are byte for byte the JSON of the typed objects (:func:`replwire.codec.stream.jsonl.objects`: values
loaded by psycopg, then ``json_value``, then the JSON encoder) -- on every stream real PostgreSQL 15 and 18
servers sent (every protocol version and option set: binary, streaming, two-phase, messages, origins,
truncates), in memory and spilled to disk, and on the benchmark's synthetic stream."""

from __future__ import annotations

import pytest

from bench import corpus
from replwire.codec import LSN
from replwire.codec.stream import jsonl
from replwire.codec.stream.assembler import Assembler, Transaction


def typed_lines(messages, proto_version, **kwargs):
    """The reference: the typed objects, encoded."""
    assembler = Assembler(proto_version=proto_version, **kwargs)
    return [jsonl.ENCODE(obj) for data, lsn in messages for item in assembler.feed(data, lsn)
            for obj in jsonl.objects(item)]


def wire_lines(messages, proto_version, **kwargs):
    assembler = Assembler(proto_version=proto_version, rows=False, **kwargs)
    lines = jsonl.JsonLines()
    out = []
    for data, lsn in messages:
        for item in assembler.feed(data, lsn):
            if isinstance(item, Transaction):
                assert all(change.new is None and change.key is None for change in item.changes)  # no row dicts
            out += lines(item)
    return out


@pytest.mark.server
@pytest.mark.parametrize("spill", [False, True])
def test_lines_equal_the_typed_objects_on_real_streams(pg_captures, spill):
    kwargs = {"spill_threshold": 0} if spill else {}
    compared, kinds = 0, set()
    for capture in pg_captures.captures:
        messages = [(data, int(LSN(lsn)) or None) for lsn, _, data in capture.rows]
        expected = typed_lines(messages, capture.proto_version, **kwargs)
        assert wire_lines(messages, capture.proto_version, **kwargs) == expected, capture.config
        compared += len(expected)
        kinds |= {line.split('"', 4)[3] for line in expected}
    assert compared > 1000
    assert kinds == {"insert", "update", "delete", "truncate", "message"}


def test_lines_equal_the_typed_objects_on_the_synthetic_stream():
    messages = [(item.data, 0x1_6000_0000 + 40 * i) for i, item in enumerate(corpus.synthetic(20_000).items)]
    expected = typed_lines(messages, 1)
    assert len(expected) > 10_000
    assert wire_lines(messages, 1) == expected
    assert any('"unchanged_toast":' in line for line in expected) and any('"key":' in line for line in expected)
