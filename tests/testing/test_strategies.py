"""The strategies derived from the declarations: exhaustive, in range, and everything they make builds."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hypothesis import HealthCheck, Phase, example, find, given, settings
from hypothesis.errors import NoSuchExample

from replwire import schema
from replwire.codec import Begin, Commit, EncodeError, StreamStart, Truncate, TupleColumn, WireMessage, walker
from replwire.codec.testing import strategies
from replwire.codec.testing.strategies import Case, Context
from replwire.codec.wire import reference

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")  # find() on long values

CLASSES = strategies.classes_of()
#: ``find`` without shrinking: the first example that takes the branch is enough.
#: The self-checks of the strategies run a quarter of the profile's examples (the properties run them all).
QUARTER = settings(deadline=None, max_examples=max(50, settings.default.max_examples // 4))
P1 = Context("logical", 1)
SEARCH = settings(max_examples=3000, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))


def test_every_walker_node_class_has_a_rule():
    assert set(strategies.HANDLED_NODES) == set(typing.get_args(walker.Node))


def test_an_unknown_node_is_refused():
    with pytest.raises(walker.UnknownConstruct):
        strategies.value(object(), Context("logical", 1), {})


def test_contexts_follow_the_declarations():
    assert len(strategies.all_contexts()) == 4 + 3 + len(schema.ENVELOPE)
    assert strategies.STREAM_FROM == 2
    assert [c.proto_version for c in strategies.contexts(StreamStart)] == [2, 2, 3, 3, 4, 4]
    assert {c.sender for c in strategies.contexts(reference.ENVELOPE_CLASSES["client"]["r"])} == {"client"}
    for context in strategies.all_contexts():  # the reference path accepts every context, and only those
        if context.layer == "logical":
            reference.check_context(context.proto_version, context.in_stream)
    with pytest.raises(ValueError, match="in_stream=True needs proto_version 2"):
        reference.check_context(strategies.STREAM_FROM - 1, True)
    with pytest.raises(ValueError, match="does not exist in proto 1"):
        strategies.messages(StreamStart, Context("logical", 1))


def test_message_attributes_are_the_walked_fields_less_tag_and_derived_counts():
    for cls in CLASSES:
        walked = [f.name for f in walker.layout(cls.spec).fields
                  if not isinstance(f.node, (walker.TagByte, walker.DerivedCount))]
        assert [f.name for f in dataclasses.fields(cls)] == walked
    with pytest.raises(TypeError):  # a derived count cannot even be given
        Truncate(options=0, relation_ids=[], num_relations=0)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_branch_is_reachable(cls):
    """Every context, conditional field present and absent, optional field given and not, character
    choice (every tuple column kind under every marker) and array empty and not is generated."""
    wanted = strategies.branches(cls)
    seen: set[str] = set()

    @settings(SEARCH, max_examples=100)
    @given(strategies.cases(cls))
    def collect(case):
        seen.update(strategies.branches_taken(case))

    collect()
    for branch in sorted(wanted - seen):  # the rare ones: search for each
        try:
            find(strategies.cases(cls), lambda case, b=branch: b in strategies.branches_taken(case), settings=SEARCH)
        except NoSuchExample:
            pytest.fail(f"never generated: {branch}")
        seen.add(branch)
    assert seen == wanted
    assert any(".kind = " in b for b in wanted) == (cls.__name__ in ("Insert", "Update", "Delete"))


def test_branches_cover_what_the_issue_names():
    insert, update, abort = (strategies.branches(reference.LOGICAL_CLASSES[t]) for t in "IUA")
    assert {f"Insert.new[].kind = {k!r}" for k in "nutb"} <= insert
    assert {"Insert.xid present", "Insert.xid absent", "Insert.new[].data present"} <= insert
    assert {"Update.key given", "Update.old present", "Update.old absent", "Update.old given"} <= update
    assert {"StreamAbort.abort_lsn given", "StreamAbort.abort_lsn absent", "StreamAbort.abort_time present"} <= abort


@QUARTER
@given(strategies.cases())
def test_taken_branches_are_declared_branches(case):
    assert strategies.branches_taken(case) <= strategies.branches(type(case.message))


@QUARTER
@given(strategies.cases())
def test_everything_generated_builds(case):
    assert strategies.fits(case)
    data = case.build()
    assert isinstance(data, bytes) and data[:1] == case.message.tag.encode()


@QUARTER
@given(strategies.cases())
def test_spans_tile_the_wire_and_hold_the_values(case):
    """The walker's model of a message lays out exactly the bytes construct builds."""
    data = case.build()
    position = 0
    for s in strategies.spans(case):
        if isinstance(s.node, walker.Record):
            continue
        assert s.offset == position, s
        chunk = data[s.offset:s.offset + s.size]
        if isinstance(s.node, walker.Int):
            assert int.from_bytes(chunk, "big", signed=s.node.signed) == s.value, s
        elif isinstance(s.node, walker.Text):
            assert chunk == s.value.encode("utf-8") + b"\0"
        elif s.role in ("tag", "marker") or isinstance(s.node, walker.CharOf):
            assert chunk == s.value.encode("ascii")
        elif isinstance(s.node, (walker.LengthPrefixed, walker.Rest)):
            assert chunk == s.value
        position += s.size
    assert position == len(data)


def _field_values(case: Case, kind: str) -> list:
    return [s.value for s in strategies.sites(case)
            if s.kind == kind and isinstance(s.node, walker.Int) and s.role == "value"]


@pytest.mark.parametrize("kind, low, high", [
    ("lsn", 0, 2**64 - 1), ("timestamp", -(2**63), 2**63 - 1), ("xid", 0, 2**32 - 1), ("oid", 0, 2**32 - 1),
])
def test_integers_reach_the_ends_of_their_wire_range(kind, low, high):
    for end in (low, high):
        find(strategies.cases(), lambda case, e=end: e in _field_values(case, kind), settings=SEARCH)
    assert isinstance(find(strategies.cases(), lambda case: bool(_field_values(case, kind)), settings=SEARCH)
                      .message, WireMessage)


@pytest.mark.parametrize("name, wanted", [
    ("empty", lambda t: t == ""),
    ("non-ASCII", lambda t: any(ord(c) > 0x7F for c in t)),
    ("outside the BMP", lambda t: any(ord(c) > 0xFFFF for c in t)),
    ("long", lambda t: len(t) >= 256),
])
def test_strings_cover(name, wanted):
    def has(case):
        return any(wanted(s.value) for s in strategies.sites(case) if isinstance(s.node, walker.Text) and s.present)

    case = find(strategies.cases(), has, settings=SEARCH)
    assert has(case)


def test_tuple_data_has_every_kind():
    columns = find(strategies.tuple_data(), lambda cols: {c.kind for c in cols} == set("nutb"), settings=SEARCH)
    assert all((c.data is None) == (c.kind in "nu") for c in columns)
    single = find(strategies.tuple_columns(), lambda c: c.kind == "b", settings=SEARCH)
    assert isinstance(single.data, bytes)


@settings(deadline=None, max_examples=30)
@given(strategies.envelope_frames("client"))
def test_envelope_frames(case):
    assert case.context == Context("envelope", sender="client")
    assert case.message.spec.layer == "envelope"
    assert case.context.parse(case.build()) == case.message


def test_case_filters():
    with pytest.raises(ValueError, match="no message class"):
        strategies.cases(StreamStart, proto_version=1)
    case = find(strategies.cases(proto_version=3, in_stream=True), lambda c: True, settings=SEARCH)
    assert case.context == Context("logical", 3, True)


def test_fits_knows_the_conditions():
    insert = reference.LOGICAL_CLASSES["I"]
    in_stream = Case(insert(xid=7, relation_id=1, new=[]), Context("logical", 2, True))
    assert strategies.fits(in_stream)
    assert not strategies.fits(Case(in_stream.message, Context("logical", 2, False)))  # an xid outside a stream
    assert not strategies.fits(Case(insert(relation_id=1, new=[]), Context("logical", 2, True)))
    abort = reference.LOGICAL_CLASSES["A"](xid=1, subxid=1, abort_lsn=5, abort_time=6)
    assert strategies.fits(Case(abort, Context("logical", 4)))
    assert not strategies.fits(Case(abort, Context("logical", 3)))
    with pytest.raises(EncodeError):
        Case(abort, Context("logical", 3)).build()
    missing = [TupleColumn(kind="t", data=None)]
    assert not strategies.fits(Case(insert(relation_id=1, new=missing), P1))
    assert not strategies.fits(Case(insert(relation_id=1, new=None), P1))
    assert not strategies.fits(Case(Begin(final_lsn=1, commit_time=2, xid=None), P1))
    assert strategies.fits(Case(Commit(flags=None, commit_lsn=1, end_lsn=2, commit_time=3), P1))  # None is 0 there


@QUARTER
@given(strategies.invalid_cases())
@example(strategies.Invalid(Case(Truncate(options=0, relation_ids=1), P1), "relation_ids", "not a list"))  # found
def test_sites_survive_invalid_messages(invalid):
    """The walk of a message never depends on its values being valid (fits is total)."""
    assert isinstance(strategies.fits(invalid.case), bool)
    if invalid.how in ("None for a required value", "a value where the condition is false",
                       "a protocol version without the message"):
        assert not strategies.fits(invalid.case)
