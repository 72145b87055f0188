"""Row images as JSON text: :class:`replwire.codec.stream.jsonl.RowJson` (straight from the wire columns) writes
exactly what ``replwire decode`` writes for the same tuple through the typed values (``ValueLoader.load_row``,
``json_value``, the JSON encoder) -- on random tuples of many column types, and on every tuple that real
PostgreSQL 15 and 18 servers sent in the captured workload."""

from __future__ import annotations

import datetime as dt
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replwire.codec import Decoder, Delete, Insert, Relation, RelationColumn, TupleColumn, Type, Update
from replwire.codec.stream import jsonl
from replwire.codec.stream.value_types import UNCHANGED_TOAST
from replwire.codec.stream.values import RowSchema, ValueLoader

LOADER = ValueLoader()
ROW_JSON = jsonl.RowJson(LOADER)


def dict_path(schema: RowSchema, columns, only_keys: bool = False) -> str:
    """The typed row as ``replwire decode`` writes it: load_row, json_value per value, the JSON encoder."""
    return jsonl.ENCODE(jsonl._row(LOADER.load_row(schema, columns, only_keys=only_keys)))


TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | TEXT,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                           max_leaves=6)
DOMAIN_OF_TEXT = 60000  # a type the server describes with a Type message (a domain over text, say)

# type OID -> strategy of (kind, wire bytes) for a value of that type
VALUES = {
    25: st.one_of(TEXT.map(lambda s: ("t", s.encode())), TEXT.map(lambda s: ("b", s.encode()))),
    1043: TEXT.map(lambda s: ("t", s.encode())),
    1042: TEXT.map(lambda s: ("t", s.encode())),
    19: TEXT.map(lambda s: ("t", s.encode())),
    DOMAIN_OF_TEXT: TEXT.map(lambda s: ("t", s.encode())),
    99999: TEXT.map(lambda s: ("t", s.encode())),  # an unknown type: kept as text
    21: st.integers(-2**15, 2**15 - 1).map(lambda i: ("t", str(i).encode())),
    23: st.one_of(st.integers(-2**31, 2**31 - 1).map(lambda i: ("t", str(i).encode())),
                  st.integers(-2**31, 2**31 - 1).map(lambda i: ("b", struct.pack(">i", i)))),
    20: st.integers(-2**63, 2**63 - 1).map(lambda i: ("t", str(i).encode())),
    16: st.sampled_from([("t", b"t"), ("t", b"f"), ("b", b"\x01"), ("b", b"\x00")]),
    1700: st.one_of(st.decimals(allow_nan=False, allow_infinity=False, places=3).map(lambda d: ("t", str(d).encode())),
                    st.sampled_from([("t", b"NaN"), ("t", b"Infinity"), ("t", b"-Infinity")])),
    701: st.one_of(st.floats(allow_nan=False, allow_infinity=False).map(lambda f: ("t", repr(f).encode())),
                   st.sampled_from([("t", b"NaN"), ("t", b"Infinity"), ("t", b"-Infinity")])),
    1082: st.one_of(st.dates().map(lambda d: ("t", d.isoformat().encode())),
                    st.sampled_from([("t", b"infinity"), ("t", b"-infinity")])),
    1114: st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)).map(
        lambda d: ("t", d.isoformat(" ").encode())),
    3802: JSON_VALUES.map(lambda v: ("t", json.dumps(v, ensure_ascii=False).encode())),
    114: JSON_VALUES.map(lambda v: ("t", json.dumps(v, indent=1).encode())),
    17: st.one_of(st.binary(max_size=8).map(lambda b: ("t", b"\\x" + b.hex().encode())),
                  st.binary(max_size=8).map(lambda b: ("t", b"\\x" + b.hex().upper().encode())),
                  st.sampled_from([("t", b"\\x0"), ("t", b"\\x00 11"), ("t", b"\\000")])),
    700: st.one_of(st.floats(width=32, allow_nan=False).map(lambda f: ("t", repr(f).encode())),
                   st.sampled_from([("t", b"NaN"), ("t", b"1e+20"), ("t", b"-0")])),
    1083: st.one_of(st.times().map(lambda t: ("t", t.isoformat().encode())),
                    st.sampled_from([("t", b"24:00:00"), ("t", b"12:00:00.1234567")])),
    1184: st.tuples(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
                    st.sampled_from(["+00", "+05:30", "-08", "+01:02:03", "+14"])).map(
        lambda p: ("t", (p[0].isoformat(" ") + p[1]).encode())),
    2950: st.one_of(st.uuids().map(lambda u: ("t", str(u).encode())),
                    st.uuids().map(lambda u: ("t", str(u).upper().encode()))),
}


@st.composite
def tuples(draw):
    type_ids = draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=8))
    names = draw(st.lists(TEXT.filter(bool), min_size=len(type_ids), max_size=len(type_ids), unique=True))
    columns = [RelationColumn(flags=draw(st.sampled_from([0, 1])), name=n, type_id=t, type_modifier=-1)
               for n, t in zip(names, type_ids)]  # a table's column names are unique
    relation = Relation(xid=None, relation_id=1, namespace="public", name="t", replica_identity="d",
                        columns=columns)
    types = tuple(Type(xid=None, type_id=DOMAIN_OF_TEXT, namespace="pg_catalog", name="text")
                  if t == DOMAIN_OF_TEXT else None for t in type_ids)
    values = []
    for t in type_ids:
        kind = draw(st.sampled_from(["value", "value", "value", "n", "u"]))
        if kind == "value":
            kind, data = draw(VALUES[t])
            values.append(TupleColumn(kind=kind, data=data))
        else:
            values.append(TupleColumn(kind=kind, data=None))
    return RowSchema(relation, types), values


@given(tuples(), st.booleans())
def test_row_json_writes_what_the_typed_row_encodes_to(row, only_keys):
    schema, columns = row
    assert ROW_JSON(schema, columns, only_keys=only_keys) == dict_path(schema, columns, only_keys)


@given(tuples(), st.booleans())
def test_row_json_names_the_unchanged_toast_columns_the_typed_row_marks(row, only_keys):
    schema, columns = row
    toasted: list[str] = []
    ROW_JSON(schema, columns, only_keys=only_keys, toasted=toasted)
    typed = LOADER.load_row(schema, columns, only_keys=only_keys)
    assert toasted == [name for name, value in typed.items() if value is UNCHANGED_TOAST]


def test_row_json_keeps_unchanged_toast_out_and_writes_null_for_null():
    relation = Relation(xid=None, relation_id=1, namespace="public", name="t", replica_identity="d", columns=[
        RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1),
        RelationColumn(flags=0, name="body", type_id=25, type_modifier=-1),
        RelationColumn(flags=0, name='say "hi"', type_id=25, type_modifier=-1)])
    schema = RowSchema(relation, (None, None, None))
    columns = [TupleColumn(kind="t", data=b"7"), TupleColumn(kind="u", data=None), TupleColumn(kind="n", data=None)]
    # hand-written: the key, no "body" (not sent), SQL NULL as null, the quote in a name escaped
    assert ROW_JSON(schema, columns) == '{"id":7,"say \\"hi\\"":null}'
    assert ROW_JSON(schema, columns, only_keys=True) == '{"id":7}'
    toasted: list[str] = []
    ROW_JSON(schema, columns, toasted=toasted)
    assert toasted == ["body"]


@pytest.mark.server
def test_row_json_equals_the_typed_path_on_every_real_tuple(pg_captures):
    compared = 0
    for capture in pg_captures.captures:
        decoder = Decoder(proto_version=capture.proto_version)
        for _, _, data in capture.rows:
            message = decoder.feed(data)
            if not isinstance(message, (Insert, Update, Delete)):
                continue
            relation = decoder.relations[message.relation_id]
            schema = RowSchema(relation, tuple(decoder.types.get(c.type_id) for c in relation.columns))
            for name in ("new", "old", "key"):
                columns = getattr(message, name, None)
                if columns is None:
                    continue
                for only_keys in (False, True):
                    assert ROW_JSON(schema, columns, only_keys=only_keys) == dict_path(schema, columns, only_keys), (
                        capture.config, name, message)
                    compared += 1
    assert compared > 1000
