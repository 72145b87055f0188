"""The shared walker knows every construct class the schema uses, and refuses any other."""

from __future__ import annotations

import construct
import pytest
from construct import Container, this

from replwire import schema
from replwire.codec import walker
from replwire.schema import constructs, fields

SPECS = list(schema.LOGICAL_MESSAGES) + [s for specs in schema.ENVELOPE.values() for s in specs.values()]


def construct_classes(c, seen=None):
    """Every construct class reachable from ``c`` by construct's own attributes."""
    seen = set() if seen is None else seen
    if id(c) in seen or not isinstance(c, construct.Construct):
        return set()
    seen.add(id(c))
    found = {type(c)}
    for attr in ("subcon", "thensubcon", "elsesubcon", "countfield", "lengthfield"):
        if attr in vars(c) or attr in ("thensubcon", "elsesubcon"):
            found |= construct_classes(getattr(c, attr, None), seen)
    for sub in getattr(c, "subcons", []):
        found |= construct_classes(sub, seen)
    return found


def test_walker_knows_every_construct_class_in_the_schema():
    used = set().union(*(construct_classes(spec.declaration) for spec in SPECS),
                       *(construct_classes(d) for d in schema.CAPTURE_FILE.values()))
    unknown = used - set(walker.KNOWN_CONSTRUCTS)
    assert not unknown, unknown
    assert {constructs.Tag, constructs.When, constructs.Tail, constructs.Marked, constructs.Counted, constructs.Items,
            constructs.PgString, constructs.Char, constructs.MustBeZero, constructs.Magic, constructs.Crc32} <= used


def test_capture_file_declarations_walk():
    header = walker.node(schema.CAPTURE_FILE["Header"])
    record = walker.node(schema.CAPTURE_FILE["Record"])
    assert isinstance(header.fields[0].node, walker.Checksummed)
    assert header.fields[0].node.node.name == "CaptureHeader"
    assert isinstance(header.fields[0].node.node.fields[0].node, walker.MagicBytes)
    assert [f.name for f in record.fields[0].node.node.fields] == ["lsn", "xid", "data"]
    assert walker.min_size(record) == 8 + 4 + 4 + 4


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_declaration_walks(spec):
    layout = walker.layout(spec)
    assert layout.fields[0].name == "tag"
    assert isinstance(layout.fields[0].node, walker.TagByte)
    assert [f.name for f in layout.fields] == [sc.name for sc in spec.declaration.subcons]


@pytest.mark.parametrize("unknown", [
    construct.Enum(construct.Int8ub, a=1),
    construct.Switch(this.x, {1: construct.Int8ub}),
    construct.Optional(construct.Int8ub),
    construct.Int32ul,
    construct.Prefixed(construct.Int8ub, construct.Int8ub),
])
def test_walker_refuses_unknown_constructs(unknown):
    with pytest.raises(walker.UnknownConstruct):
        walker.node(unknown)
    with pytest.raises(walker.UnknownConstruct):
        walker.node(construct.Struct(fields.field("x", fields.WireType(unknown, "?", "int"), "doc")))


def test_unnamed_members_are_refused():
    with pytest.raises(walker.UnknownConstruct, match="must be a Field"):
        walker.node(construct.Struct("x" / construct.Int8ub))


@pytest.mark.parametrize("expr, params, fields", [
    (this._params.in_stream, {"in_stream": True}, {}),
    (this._params.in_stream, {"in_stream": False}, {}),
    (this._params.proto_version >= 4, {"proto_version": 3}, {}),
    (this._params.proto_version >= 4, {"proto_version": 4}, {}),
    (this.key == None, {}, {"key": None}),  # noqa: E711
    (this.key == None, {}, {"key": [1]}),  # noqa: E711
    ((this.kind == "t") | (this.kind == "b"), {}, {"kind": "b"}),
    ((this.kind == "t") | (this.kind == "b"), {}, {"kind": "n"}),
])
def test_conditions_evaluate_as_construct_does(expr, params, fields):
    context = Container(_params=Container(params), **fields)
    assert walker.evaluate(walker.condition(expr), params, fields) == bool(expr(context))


def test_conditions_keep_the_declarations_text():
    # the interpreter's build errors and the docs quote a condition as the construct reference does
    texts = {f"{spec.name}.{f.name}": f.node.text for spec in SPECS for f in walker.layout(spec).fields
             if isinstance(f.node, walker.When)}
    assert texts["Insert.xid"] == "in_stream"
    assert texts["Update.old"] == "key == None"
    assert texts["StreamAbort.abort_lsn"] == "proto_version >= 4"
    assert texts["StreamAbort.abort_time"] == "abort_lsn != None"
    tuple_column = walker.node(schema.RECORDS["TupleColumn"])
    assert tuple_column.name == "TupleColumn"
    assert tuple_column.fields[1].node.text == "(kind == 't') | (kind == 'b')"
    for spec in SPECS:
        for f in spec.declaration.subcons:
            if isinstance(f.subcon, constructs.When):
                assert texts[f"{spec.name}.{f.name}"] == constructs.render_condition(f.subcon.condfunc)


def test_fixed_sizes():
    assert walker.fixed_size(walker.layout(schema.LOGICAL["B"]).record) == 21
    assert walker.fixed_size(walker.layout(schema.LOGICAL["C"]).record) == 26
    assert walker.fixed_size(walker.layout(schema.ENVELOPE["server"]["k"]).record) == 18
    assert walker.fixed_size(walker.layout(schema.ENVELOPE["client"]["r"]).record) == 34
    assert walker.fixed_size(walker.layout(schema.LOGICAL["R"]).record) is None


@pytest.mark.parametrize("tag, smallest", [("R", 10), ("I", 8), ("U", 8), ("D", 8), ("T", 6), ("M", 15), ("A", 9),
                                           ("E", 1), ("b", 30)])
def test_min_sizes(tag, smallest):
    # hand-counted: e.g. Relation = tag 1 + relid 4 + two empty Strings 2 + replident 1 + count 2
    assert walker.min_size(walker.layout(schema.LOGICAL[tag]).record) == smallest
