"""The generated fast codec and the construct reference path are the same codec.

Both are run on the same input and must give the same outcome, compared strictly: the same message
classes and the same value types all the way down (``LSN``, ``Timestamp``, ``None`` for absent fields,
the record classes), the same bytes, or the same exception -- for ``DecodeError`` the same reason, offset,
field path, tag, message and protocol version; for ``EncodeError`` the same reason, field and message.
Inputs: every golden vector (valid and invalid), every stored real-server message in every context,
every strict prefix and extension of them, the damaged bytes of ``replwire.codec.testing.strategies.mutants``,
and the valid and invalid message objects the strategies draw.  Valid input must also stay on the fast
path: the generated code hands nothing valid to the interpreter.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given

from replwire import schema
from replwire.codec import (
    LSN,
    Begin,
    Commit,
    DecodeError,
    Delete,
    EncodeError,
    Insert,
    Message,
    Relation,
    RelationColumn,
    StreamAbort,
    Truncate,
    TupleColumn,
    Update,
    XLogData,
)
from replwire.codec.testing import strategies
from replwire.codec.testing.strategies import Context
from replwire.codec.wire import fast, reference
from replwire.codec.wire.gen import python_codec as fastgen
from replwire.codec.wire.gen.common import ENVELOPE_CONTEXT, LOGICAL_CONTEXTS
from tests.support.seeds import ALL, Seed
from tests.support.vectors import INVALID, VALID, Vector

CONTEXTS = strategies.all_contexts()


# ---------------------------------------------------------------------------------------------------------
# comparing outcomes


def shape(value: Any) -> Any:
    """A value with the type of everything in it, for an equality that also compares types."""
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(shape(v) for v in value))
    if dataclasses.is_dataclass(value):  # fields and getattr: vars() would give the object a dict
        return (type(value), tuple((f.name, shape(getattr(value, f.name))) for f in dataclasses.fields(value)))
    return (type(value), value)


def outcome(call: Callable[[], Any]) -> tuple:
    try:
        value = call()
    except DecodeError as error:
        return ("DecodeError", error.reason, error.offset, error.field, error.tag, error.message, error.proto_version)
    except EncodeError as error:
        return ("EncodeError", error.reason, error.field, error.message)
    except Exception as error:  # noqa: BLE001 - any other exception must be the same one too
        return (type(error).__name__, str(error))
    return ("ok", shape(value))


def parse_both(context: Context, data: bytes) -> tuple[tuple, tuple]:
    return outcome(lambda: context.parse(data, reference)), outcome(lambda: context.parse(data, fast))


def build_both(context: Context, message: Any) -> tuple[tuple, tuple]:
    return outcome(lambda: context.build(message, reference)), outcome(lambda: context.build(message, fast))


def context_of(seed: Seed) -> Context:
    if seed.layer == "envelope":
        return Context("envelope", sender=seed.sender)
    return Context("logical", seed.proto_version, seed.in_stream)


def vector_context(vector: Vector) -> Context:
    if vector.layer == "envelope":
        return Context("envelope", sender=vector.sender)
    return Context("logical", vector.ctx["proto_version"], vector.ctx["in_stream"])


class NoDeclines:
    """Asserts that the fast path handled everything itself inside the ``with`` block: the generated Python
    code declined nothing to the interpreter, and, when the compiled codec is in use (then ``fast``'s entry
    points are C), it forwarded nothing to the generated Python code: otherwise, under the compiled codec,
    an unchanged ``DECLINED`` would say nothing."""

    def __enter__(self) -> None:
        self.before = dict(fast.DECLINED)
        self.forwarded = fast._COMPILED._forwarded() if fast._COMPILED is not None else None

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            assert dict(fast.DECLINED) == self.before, "valid input went to the interpreter"
            if self.forwarded is not None:
                assert fast._COMPILED._forwarded() == self.forwarded, "valid input went to the Python codec"


def assert_same_round_trip(context: Context, data: bytes) -> None:
    theirs, ours = parse_both(context, data)
    assert ours == theirs
    assert ours[0] == "ok", ours
    message = context.parse(data, fast)
    assert build_both(context, message) == (("ok", shape(data)),) * 2


# ---------------------------------------------------------------------------------------------------------
# golden vectors and stored captures


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_valid_vector_same_message_and_bytes(vector):
    with NoDeclines():
        assert_same_round_trip(vector_context(vector), vector.wire)


@pytest.mark.parametrize("vector", INVALID, ids=lambda v: v.name)
def test_invalid_vector_same_error(vector):
    theirs, ours = parse_both(vector_context(vector), vector.wire)
    assert theirs[0] == "DecodeError"
    assert ours == theirs


@pytest.mark.parametrize("seed", ALL, ids=lambda s: s.name)
def test_stored_message_same_in_every_context(seed):
    with NoDeclines():
        assert_same_round_trip(context_of(seed), seed.data)
    for context in CONTEXTS:  # elsewhere it may parse differently, or not at all: the same either way
        assert parse_both(context, seed.data)[1] == parse_both(context, seed.data)[0]


@pytest.mark.parametrize("seed", ALL, ids=lambda s: s.name)
def test_every_prefix_and_extension_same_outcome(seed):
    context = context_of(seed)
    for length in range(len(seed.data)):
        theirs, ours = parse_both(context, seed.data[:length])
        assert ours == theirs, length
    for extra in (b"\x00", b"\xff", b"N", b"t\x00\x00\x00\x01x", seed.data):
        theirs, ours = parse_both(context, seed.data + extra)
        assert ours == theirs, extra


# ---------------------------------------------------------------------------------------------------------
# generated input


SEEDS = [(context_of(s), s.data) for s in ALL]


@given(strategies.mutants(SEEDS))
def test_mutated_bytes_same_outcome(mutant):
    context, data = mutant
    theirs, ours = parse_both(context, data)
    assert ours == theirs
    if ours[0] == "ok":
        message = context.parse(data, fast)
        assert build_both(context, message) == (("ok", shape(data)),) * 2


@given(strategies.cases())
def test_generated_messages_same_bytes_in_every_context(case):
    with NoDeclines():
        theirs, ours = build_both(case.context, case.message)
        assert ours == theirs and ours[0] == "ok"
        data = case.context.build(case.message, fast)
        assert parse_both(case.context, data) == (("ok", shape(case.message)),) * 2
    for context in strategies.contexts(type(case.message)):
        theirs, ours = build_both(context, case.message)
        assert ours == theirs


@given(strategies.invalid_cases())
def test_invalid_message_objects_same_error(invalid):
    theirs, ours = build_both(invalid.case.context, invalid.case.message)
    assert theirs[0] == "EncodeError"
    assert ours == theirs


# ---------------------------------------------------------------------------------------------------------
# what the fast path is careful about


class Small(enum.IntEnum):
    ONE = 1


class Text(str):
    pass


class Data(bytes):
    pass


class MyInsert(Insert):
    pass


class MyColumn(TupleColumn):
    pass


T = TupleColumn.text
P1 = Context("logical", 1)
P2S = Context("logical", 2, True)
P4 = Context("logical", 4)
SERVER = Context("envelope", sender="server")

UNUSUAL = [
    (P1, Begin(final_lsn=1, commit_time=2, xid=True)),                       # bool is not an int here
    (P1, Begin(final_lsn=Small.ONE, commit_time=2, xid=3)),                  # an int subclass is
    (P1, Begin(final_lsn=1.0, commit_time=2, xid=3)),
    (P1, Begin(final_lsn=2**64, commit_time=2, xid=3)),
    (P1, Begin(final_lsn=-1, commit_time=2, xid=3)),
    (P1, Begin(final_lsn=None, commit_time=2, xid=3)),
    (P1, Commit(flags=False, commit_lsn=1, end_lsn=2, commit_time=3)),
    (P1, Commit(flags=None, commit_lsn=1, end_lsn=2, commit_time=3)),
    (P1, Commit(flags=0.0, commit_lsn=1, end_lsn=2, commit_time=3)),
    (P1, Commit(flags=LSN(0), commit_lsn=1, end_lsn=2, commit_time=3)),
    (P1, Insert(relation_id=1, new=(T("a"), T("b")))),                        # a tuple is a list here
    (P1, Insert(relation_id=1, new=[TupleColumn(kind=chr(116), data=b"x")])),  # a kind not interned
    (P1, Insert(relation_id=1, new=[TupleColumn(kind=Text("t"), data=b"x")])),
    (P1, Insert(relation_id=1, new=[TupleColumn(kind="tt", data=b"x")])),
    (P1, Insert(relation_id=1, new=[TupleColumn(kind=b"t", data=b"x")])),
    (P1, Insert(relation_id=1, new=[TupleColumn(kind="t", data=bytearray(b"x"))])),
    (P1, Insert(relation_id=1, new=[TupleColumn(kind="t", data=memoryview(b"x"))])),
    (P1, Insert(relation_id=1, new=[TupleColumn(kind="t", data=Data(b"x"))])),
    (P1, Insert(relation_id=1, new=[TupleColumn(kind="t", data="x")])),
    (P1, Insert(relation_id=1, new=[TupleColumn(kind="n", data=b"")])),
    (P1, Insert(relation_id=1, new=[MyColumn(kind="t", data=b"x")])),        # a subclass of the record
    (P1, Insert(relation_id=1, new=[("t", b"x")])),
    (P1, MyInsert(relation_id=1, new=[T("x")])),                             # a subclass of the message
    (P1, Insert(relation_id=1, new=[TupleColumn.null()] * 65536)),           # a count too big for Int16
    (P1, Insert(relation_id=1, new=[TupleColumn.null()] * 65535)),           # and the largest that fits
    (P1, Relation(relation_id=1, namespace="public", name="t", replica_identity="d",
                  columns=[RelationColumn(flags=0, name="a", type_id=23, type_modifier=-1)] * 65536)),
    (P1, Relation(relation_id=1, namespace=Text("public"), name="t", replica_identity="d", columns=[])),
    (P1, Relation(relation_id=1, namespace="pub\0lic", name="t", replica_identity="d", columns=[])),
    (P1, Relation(relation_id=1, namespace="\udc80", name="t", replica_identity="d", columns=[])),
    (P1, Relation(relation_id=1, namespace="ns", name="t", replica_identity=chr(100), columns=[
        RelationColumn(flags=1, name="é", type_id=23, type_modifier=-1)])),
    (P1, Update(relation_id=1, key=[T("1")], old=[T("1")], new=[T("2")])),
    (P1, Update(relation_id=1, old=[], new=[])),
    (P1, Delete(relation_id=1)),
    (P1, Truncate(options=0, relation_ids=(1, 2))),
    (P1, Truncate(options=0, relation_ids=[1, True])),
    (P1, Truncate(options=0, relation_ids=None)),
    (P1, Message(flags=1, lsn=2, prefix="p", content=bytearray(b"c"))),
    (P1, Message(flags=1, lsn=2, prefix="p", content=None)),
    (P2S, Insert(relation_id=1, new=[T("x")])),                               # the xid is missing
    (P1, Insert(xid=5, relation_id=1, new=[T("x")])),                         # and here it must be
    (P4, StreamAbort(xid=1, subxid=2, abort_lsn=3)),
    (P4, StreamAbort(xid=1, subxid=2, abort_time=3)),
    (P1, StreamAbort(xid=1, subxid=2)),
    (SERVER, XLogData(data_start=1, wal_end=2, send_time=3, data=bytearray(b"d"))),
    (SERVER, Begin(final_lsn=1, commit_time=2, xid=3)),
    (P1, XLogData(data_start=1, wal_end=2, send_time=3, data=b"")),
]


@pytest.mark.parametrize("context, message", UNUSUAL, ids=lambda x: repr(x)[:60])
def test_unusual_values_same_outcome(context, message):
    theirs, ours = build_both(context, message)
    assert ours == theirs


@pytest.mark.parametrize("call", [
    lambda codec: codec.parse(b"B", proto_version=True),
    lambda codec: codec.parse(b"B", proto_version=2.0),
    lambda codec: codec.parse(b"B", proto_version=5),
    lambda codec: codec.parse(b"B", proto_version=1, in_stream=True),
    lambda codec: codec.parse(b"B", proto_version=2, in_stream=1),
    lambda codec: codec.parse(b"B", proto_version=[2]),
    lambda codec: codec.parse("B", proto_version=1),
    lambda codec: codec.parse(b"", proto_version=1),
    lambda codec: codec.parse(b"\xff", proto_version=3),
    lambda codec: codec.parse(bytearray(bytes.fromhex("42000000000169e5a80002894463074dc800000313")), proto_version=1),
    lambda codec: codec.parse(memoryview(bytes.fromhex("42000000000169e5a80002894463074dc800000313")), proto_version=1),
    lambda codec: codec.parse(bytes.fromhex("42000000000169e5a80002894463074dc800000313"), proto_version=Small.ONE),
    lambda codec: codec.parse_envelope(b"k", sender="nobody"),
    lambda codec: codec.parse_envelope(b"", sender="client"),
    lambda codec: codec.parse_envelope(b"w", sender=None),
    lambda codec: codec.parse_envelope(1, sender="server"),
    lambda codec: codec.build(b"B", proto_version=1),
    lambda codec: codec.build(Begin(final_lsn=1, commit_time=2, xid=3), proto_version=0),
    lambda codec: codec.build(Begin(final_lsn=1, commit_time=2, xid=3), proto_version=2, in_stream=None),
    lambda codec: codec.build(XLogData(data_start=1, wal_end=2, send_time=3, data=b""), proto_version=1),
    lambda codec: codec.build_envelope(Begin(final_lsn=1, commit_time=2, xid=3)),
    # the messages whose bodies the entry points carry inline, in contexts that cannot be
    lambda codec: codec.parse(bytes.fromhex("49000000014e00016e"), proto_version=5),
    lambda codec: codec.parse(bytes.fromhex("49000000014e00016e"), proto_version=2, in_stream=1),
    lambda codec: codec.parse(bytes.fromhex("49000000014e00016e"), proto_version=1, in_stream=True),
    lambda codec: codec.parse(Data(bytes.fromhex("49000000014e00016e")), proto_version=1),
    lambda codec: codec.build(Insert(relation_id=1, new=[]), proto_version=5),
    lambda codec: codec.build(Insert(relation_id=1, new=[]), proto_version=Small.ONE),
    lambda codec: codec.build(Insert(xid=2, relation_id=1, new=[]), proto_version=1, in_stream=True),
    lambda codec: codec.build(Insert(relation_id=1, new=[]), proto_version=2, in_stream=0),
    lambda codec: codec.parse_envelope(bytes.fromhex("77" + "00" * 24), sender=Text("server")),
    lambda codec: codec.parse_envelope(bytes.fromhex("77" + "00" * 24), sender="client"),
    lambda codec: codec.parse_envelope(Data(bytes.fromhex("77" + "00" * 24))),
], ids=lambda c: str(c.__code__.co_firstlineno))
def test_calling_errors_same(call):
    assert outcome(lambda: call(fast)) == outcome(lambda: call(reference))


# ---------------------------------------------------------------------------------------------------------
# the generated code itself


def test_every_message_has_a_generated_function_in_every_context():
    generated = fastgen.generate()
    for version, in_stream in LOGICAL_CONTEXTS:
        assert set(generated.parsers["logical", None, (version, in_stream)]) == set(schema.LOGICAL)
        assert {c.spec.tag for c in generated.builders["logical", (version, in_stream)]} == set(schema.LOGICAL)
    for sender, specs in schema.ENVELOPE.items():
        assert set(generated.parsers["envelope", sender, ENVELOPE_CONTEXT]) == set(specs)


def test_the_committed_generated_module_is_what_the_generator_writes():
    # a change to the declarations or the generator must come with the regenerated module
    assert pathlib.Path(fast.FILENAME) == fastgen.MODULE
    committed = fastgen.MODULE.read_text(encoding="utf-8")
    assert fastgen.generate().source == committed, (
        f"{fastgen.MODULE.name} is not what the generator writes: run `{fastgen.COMMAND}` and commit it")


def test_entry_points_are_generated_with_the_documented_signatures():
    import inspect
    import pickle

    for name in ("parse", "build", "parse_envelope", "build_envelope"):
        function = getattr(fast, name)
        model = inspect.signature(getattr(reference, name))
        assert function.__module__ == "replwire.codec.wire.fast" and function.__doc__
        if fast.IMPL == "c":  # a C function: the signature without the annotations
            from replwire.codec.wire.gen import c_module

            assert function.__doc__ == c_module.docstring(name).split("\n--\n\n", 1)[1]
            assert inspect.signature(function) == model.replace(
                parameters=[p.replace(annotation=p.empty) for p in model.parameters.values()],
                return_annotation=model.empty)
        else:
            assert function.__code__.co_filename == fast.FILENAME
            assert inspect.signature(function) == model
        assert pickle.loads(pickle.dumps(function)) is function


def test_generated_source_is_shown_in_tracebacks():
    import traceback

    with pytest.raises(ValueError) as caught:
        fast.parse(b"B", proto_version=0)
    frames = traceback.extract_tb(caught.value.__traceback__)
    generated = [frame for frame in frames if frame.filename == fast.FILENAME]
    assert generated and generated[0].name == "parse"
    assert generated[0].line.startswith("return _parse_other(")


def test_parsed_objects_store_attributes_like_constructed_ones():
    """Objects made by the fast path are like objects made by their constructors: slots, no dict of their
    own (which would make every later attribute read slower)."""
    message = fast.parse(bytes.fromhex("49000040014e0002740000000131" "6e"), proto_version=1)
    assert message.new == [T("1"), TupleColumn.null()]
    for obj in (message, *message.new):
        assert not any(isinstance(r, dict) for r in gc.get_referents(obj)), obj
