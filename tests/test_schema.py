"""The declarations themselves: complete metadata, unique tags, the registries and the classes agree."""

from __future__ import annotations

import tracemalloc

import pytest
from construct import Struct, this

from replwire import schema
from replwire.codec import DecodeError, parse
from replwire.codec.wire.reference import ENVELOPE_CLASSES, LOGICAL_CLASSES
from replwire.schema.constructs import Tag, When, render_condition
from replwire.schema.fields import Field
from replwire.schema.wire_error import WireError

ALL_SPECS = list(schema.LOGICAL_MESSAGES) + [s for specs in schema.ENVELOPE.values() for s in specs.values()]


def fields_of(struct: Struct):
    """Every Field of a declaration, nested records included."""
    for sc in struct.subcons:
        assert isinstance(sc, Field), f"unnamed or undocumented member {sc!r}"
        yield sc
        inner = sc.subcon
        while not isinstance(inner, Struct) and hasattr(inner, "subcon"):
            inner = inner.subcon
        if isinstance(inner, Struct):
            yield from fields_of(inner)


def test_every_logical_message_of_the_protocol_is_declared():
    assert sorted(schema.LOGICAL) == sorted("BCORYIUDTMSEcAbPKrp")
    assert sorted(schema.ENVELOPE["server"]) == ["k", "w"]
    assert sorted(schema.ENVELOPE["client"]) == ["h", "r"]


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.name)
def test_every_field_carries_its_metadata(spec):
    assert spec.doc and spec.doc_ref and spec.family
    for f in fields_of(spec.declaration):
        meta = f.meta
        assert meta.doc.strip(), f"{spec.name}.{f.name} has no description"
        assert meta.doc_ref and meta.doc_ref.startswith("PROTOCOL-"), f"{spec.name}.{f.name} has no anchor"
        assert meta.docs_url.startswith("https://www.postgresql.org/docs/current/protocol-")
        assert meta.spec_type.strip()
        assert spec.min_proto <= meta.since <= schema.MAX_PROTO_VERSION


@pytest.mark.parametrize("spec", schema.LOGICAL_MESSAGES, ids=lambda s: s.name)
def test_message_versions(spec):
    expected_min = {"S": 2, "E": 2, "c": 2, "A": 2, "b": 3, "P": 3, "K": 3, "r": 3, "p": 3}.get(spec.tag, 1)
    assert spec.min_proto == expected_min
    tag = spec.declaration.subcons[0]
    assert isinstance(tag.subcon, Tag) and tag.subcon.tag.decode() == spec.tag


def test_stream_xid_is_declared_exactly_on_the_messages_that_carry_it():
    carrying = {spec.tag for spec in schema.LOGICAL_MESSAGES
                if any(f.name == "xid" and isinstance(f.subcon, When) for f in spec.declaration.subcons)}
    assert carrying == set("RYIUDTM")


def test_classes_match_the_declarations():
    assert {t: c.spec for t, c in LOGICAL_CLASSES.items()} == schema.LOGICAL
    for sender, classes in ENVELOPE_CLASSES.items():
        assert {t: c.spec for t, c in classes.items()} == schema.ENVELOPE[sender]
    for cls in LOGICAL_CLASSES.values():
        assert cls.__name__ == cls.spec.name


@pytest.mark.parametrize("hex_data, proto", [
    ("49 00004001 4E 0001 74 7FFFFFFF 41", 1),      # a value claiming 2 GiB
    ("4D 01 000000000169E600 00 FFFFFFFF 41", 1),   # message content claiming 4 GiB
    ("49 00004001 4E FFFF 6E", 1),                  # 65535 columns announced, one present
    ("54 FFFFFFFF 00 00004001", 1),                 # 4294967295 relations announced, one present
    ("52 00004001 00 7400 64 FFFF 01 7800 00000017 FFFFFFFF", 1),
])
def test_lengths_and_counts_past_the_end_allocate_nothing_large(hex_data, proto):
    data = bytes.fromhex(hex_data.replace(" ", ""))
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="truncated"):
            parse(data, proto_version=proto)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"parsing {len(data)} bytes peaked at {peak} bytes"


# ---------------------------------------------------------------------------------------------------------
# the strict construct classes, used directly through the declarations


def build_insert(new: list) -> bytes:
    return schema.LOGICAL["I"].declaration.build({"tag": "I", "xid": None, "relation_id": 1, "new": new},
                                                 proto_version=1, in_stream=False)


def test_counted_builds_the_largest_int16_count():
    # PostgreSQL's docs (TupleData) and proto.c's logicalrep_read_tuple: TupleData is Int16 ncols, read as
    # unsigned 16-bit, then a kind byte per column ('n' = NULL, nothing follows); the docs' Insert is 'I',
    # OID relid, 'N', TupleData
    data = build_insert([{"kind": "n", "data": None}] * 65535)
    assert data == b"I" + b"\x00\x00\x00\x01" + b"N" + b"\xff\xff" + b"n" * 65535


def test_counted_refuses_more_items_than_its_int16_count_holds():
    with pytest.raises(WireError) as caught:
        build_insert([{"kind": "n", "data": None}] * 65536)
    assert caught.value.reason == "65536 items do not fit the Int16 count (at most 65535)"
    assert caught.value.replwire_path == ["new"]


def test_counted_refuses_too_many_relation_columns():
    # PostgreSQL's docs (Relation) and proto.c's logicalrep_write_attrs: Relation's ncols is an Int16 too
    column = {"flags": 0, "name": "a", "type_id": 23, "type_modifier": -1}
    relation = {"tag": "R", "xid": None, "relation_id": 1, "namespace": "public", "name": "t",
                "replica_identity": "d", "columns": [column] * 65536}
    with pytest.raises(WireError, match="65536 items do not fit the Int16 count") as caught:
        schema.LOGICAL["R"].declaration.build(relation, proto_version=1, in_stream=False)
    assert caught.value.replwire_path == ["columns"]


@pytest.mark.parametrize("cond, text", [
    ((this.kind == "t") | (this.kind == "b"), "(kind == 't') | (kind == 'b')"),
    (this.kind == "a'b", "kind == \"a'b\""),
    (this.kind == "this['x']", "kind == \"this['x']\""),  # a literal is not mistaken for a field
    (this._params.proto_version >= 4, "proto_version >= 4"),
    (this.key == None, "key == None"),  # noqa: E711 -- a construct expression
    (this._params.in_stream, "in_stream"),
])
def test_conditions_render_with_quoted_string_literals(cond, text):
    assert render_condition(cond) == text


def test_absent_field_error_quotes_the_kinds():
    # proto.c's logicalrep_read_tuple: only the 't' and 'b' kinds are followed by Int32 len and the bytes
    with pytest.raises(WireError) as caught:
        build_insert([{"kind": "n", "data": b"x"}])
    assert caught.value.reason == "must be None here: the field is absent unless (kind == 't') | (kind == 'b')"


# PostgreSQL's docs (Commit) and proto.c's logicalrep_write_commit: Commit is 'C', Int8 flags (always 0),
# LSN commit_lsn, LSN end_lsn, TS commit_time
COMMIT = schema.LOGICAL["C"].declaration
COMMIT_REST = {"tag": "C", "commit_lsn": 1, "end_lsn": 2, "commit_time": 3}
COMMIT_BYTES = b"C" + b"\x00" + (1).to_bytes(8, "big") + (2).to_bytes(8, "big") + (3).to_bytes(8, "big")


def test_must_be_zero_builds_zero():
    assert COMMIT.build({**COMMIT_REST, "flags": 0}, proto_version=1, in_stream=False) == COMMIT_BYTES


def test_must_be_zero_builds_zero_when_omitted():
    # construct's Struct passes None for an omitted Const-like field: that is the default, not a mistake
    assert COMMIT.build(COMMIT_REST, proto_version=1, in_stream=False) == COMMIT_BYTES


@pytest.mark.parametrize("flags, reason", [
    (0.0, "must be the int 0, got 0.0 (float)"),
    (False, "must be the int 0, got False (bool)"),
    ("0", "must be the int 0, got '0' (str)"),
    (1, "must be 0, got 1"),
])
def test_must_be_zero_refuses_anything_but_the_int_0(flags, reason):
    with pytest.raises(WireError) as caught:
        COMMIT.build({**COMMIT_REST, "flags": flags}, proto_version=1, in_stream=False)
    assert caught.value.reason == reason
    assert caught.value.replwire_path == ["flags"]
