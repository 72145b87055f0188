"""The compiled codec and the generated Python codec are the same codec, and the right one is chosen.

The compiled entry points (:mod:`replwire.codec.wire._compiled`) run on the same input as the generated
Python ones (:mod:`replwire.codec.wire._generated`) and must give the same outcome, compared strictly as
in ``test_fast_equivalence`` (types all the way down; for errors the class, reason, offset, field, tag,
message and protocol version): every golden vector, every stored real-server message in every context,
every prefix, truncation and extension of them, damaged bytes, and the valid and invalid message objects
the strategies draw.  The entry points count the calls that ran one of their C functions (``_ran``) and
those that went to Python (``_forwarded``), and the tests say which comparison reached C:

* valid input in the common context (UTF-8, bytes, a declared tag or class) runs in C and stays there: the
  comparison is C's message or bytes against Python's;
* invalid input runs C's checks, which decline it (never a message for bytes Python rejects), and the
  error is then the Python codec's, by construction: the comparison shows C declines everything Python
  rejects, and that nothing C accepts is rejected by Python (a mutant either case);
* other encodings never run C (the entry points forward them whole): that comparison checks the routing.

Then the choice at import: ``REPLWIRE_IMPL``, a stale or missing extension (in fresh interpreters).

The whole suite runs on the compiled codec by default and again, in part, with ``REPLWIRE_IMPL=python``
(see the Makefile); in that run this module has nothing to compare and is skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given

from replwire import schema
from replwire.codec.testing import strategies
from replwire.codec.testing.strategies import Context
from replwire.codec.wire import _generated, fast
from replwire.schema.encodings import UTF8, text_codec
from tests.support.seeds import ALL
from tests.support.vectors import INVALID, VALID
from tests.wire.test_fast_equivalence import CONTEXTS, context_of, outcome, shape, vector_context

if os.environ.get("REPLWIRE_IMPL") == "python":
    pytest.skip("the Python codec is forced: nothing compiled to compare", allow_module_level=True)

compiled: Any = fast._COMPILED
COMPILED = SimpleNamespace(**{name: getattr(compiled, name, None)
                              for name in ("parse", "build", "parse_envelope", "build_envelope")})


def test_the_compiled_codec_is_built_and_in_use():
    # the suite's set-up builds it (REPLWIRE_BUILD_C=1 in CI): its absence is a failure, not a skip
    assert fast.IMPL == "c" and compiled is not None
    from replwire import codec

    assert codec.parse is compiled.parse and codec.build_envelope is compiled.build_envelope


ENTRIES = {"parse": 0, "build": 1, "parse_envelope": 2, "build_envelope": 3}


class Counted:
    """What the compiled entry points did inside the ``with`` block: per entry point, how many calls ran one
    of its C functions (``ran``) and how many went to the Python codec (``forwarded``)."""

    def __enter__(self) -> Counted:
        self._ran, self._forwarded = compiled._ran(), compiled._forwarded()
        return self

    def __exit__(self, *exc: object) -> None:
        ran, forwarded = compiled._ran(), compiled._forwarded()
        self.ran = dict(zip(ENTRIES, (a - b for a, b in zip(ran, self._ran))))
        self.forwarded = dict(zip(ENTRIES, (a - b for a, b in zip(forwarded, self._forwarded))))


def parse_runs_c(context: Context, data: bytes) -> bool:
    """Whether the compiled entry point runs a C function on ``data`` rather than forwarding it at once
    (``logical_context`` and the tag tables of c_module.py)."""
    if not data:
        return False
    if context.layer == "envelope":
        return chr(data[0]) in schema.ENVELOPE[context.sender or "server"]
    assert context.proto_version is not None
    return (text_codec(context.encoding) == UTF8 and 1 <= context.proto_version <= schema.MAX_PROTO_VERSION
            and not (context.in_stream and context.proto_version < 2) and chr(data[0]) in schema.LOGICAL)


def entry(context: Context, parse: bool) -> str:
    return ("parse" if parse else "build") + ("_envelope" if context.layer == "envelope" else "")


def declined_in_c(context: Context, data: bytes, counted: Counted) -> None:
    """The one compiled call of ``counted`` ran C's checks on ``data`` when it should, and went to Python."""
    name = entry(context, parse=True)
    assert counted.ran[name] == (1 if parse_runs_c(context, data) else 0), (context, data.hex())
    assert counted.forwarded[name] == 1


class StaysInC:
    """Asserts that the compiled entry points forwarded nothing to Python inside the ``with`` block."""

    def __enter__(self) -> None:
        self.before = compiled._forwarded()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            assert compiled._forwarded() == self.before, "valid input went to the Python codec"


def parse_both(context: Context, data: bytes) -> tuple[tuple, tuple]:
    return outcome(lambda: context.parse(data, _generated)), outcome(lambda: context.parse(data, COMPILED))


def build_both(context: Context, message: Any) -> tuple[tuple, tuple]:
    return outcome(lambda: context.build(message, _generated)), outcome(lambda: context.build(message, COMPILED))


def same_round_trip(context: Context, data: bytes) -> None:
    with StaysInC():
        theirs, ours = parse_both(context, data)
        assert ours == theirs and ours[0] == "ok", ours
        message = context.parse(data, COMPILED)
        assert build_both(context, message) == (("ok", shape(data)),) * 2


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_valid_vector_same_message_and_bytes(vector):
    same_round_trip(vector_context(vector), vector.wire)


@pytest.mark.parametrize("vector", INVALID, ids=lambda v: v.name)
def test_invalid_vector_same_error(vector):
    with Counted() as counted:
        theirs, ours = parse_both(vector_context(vector), vector.wire)
    assert theirs[0] == "DecodeError"
    assert ours == theirs
    declined_in_c(vector_context(vector), vector.wire, counted)


def test_invalid_vectors_mostly_reach_c():
    # the invalid vectors' comparisons above are C's checks against Python's, not Python against itself
    reached = [v for v in INVALID if parse_runs_c(vector_context(v), v.wire)]
    assert len(reached) >= len(INVALID) * 3 // 4, (len(reached), len(INVALID))


def test_stored_messages_same_in_every_context():
    for seed in ALL:
        same_round_trip(context_of(seed), seed.data)
        for context in CONTEXTS:
            theirs, ours = parse_both(context, seed.data)
            assert ours == theirs, (seed.name, context)


def test_every_prefix_truncation_and_extension_same_outcome():
    for seed in ALL:
        context = context_of(seed)
        for length in range(len(seed.data)):
            with Counted() as counted:
                theirs, ours = parse_both(context, seed.data[:length])
            assert ours == theirs, (seed.name, length)
            if theirs[0] != "ok":
                declined_in_c(context, seed.data[:length], counted)
        for extra in (b"\x00", b"\xff", b"N", b"t\x00\x00\x00\x01x", b"\x7f\xff\xff\xff", seed.data):
            with Counted() as counted:
                theirs, ours = parse_both(context, seed.data + extra)
            assert ours == theirs, (seed.name, extra)
            if theirs[0] != "ok":
                declined_in_c(context, seed.data + extra, counted)


SEEDS = [(context_of(s), s.data) for s in ALL]


@given(strategies.mutants(SEEDS))
def test_mutated_bytes_same_outcome(mutant):
    context, data = mutant
    with Counted() as counted:
        theirs, ours = parse_both(context, data)
    assert ours == theirs
    name = entry(context, parse=True)
    assert counted.ran[name] == (1 if parse_runs_c(context, data) else 0)
    if ours[0] != "ok":
        assert counted.forwarded[name] == 1
    if ours[0] == "ok":
        assert build_both(context, context.parse(data, COMPILED)) == (("ok", shape(data)),) * 2


@given(strategies.cases())
def test_generated_messages_same_bytes_in_every_context(case):
    if case.context.encoding == strategies.UTF8 or case.context.layer == "envelope":
        with StaysInC():
            theirs, ours = build_both(case.context, case.message)
            assert ours == theirs and ours[0] == "ok"
            data = case.context.build(case.message, COMPILED)
            assert parse_both(case.context, data) == (("ok", shape(case.message)),) * 2
    for context in strategies.contexts(type(case.message)):
        assert build_both(context, case.message)[1] == build_both(context, case.message)[0]


@given(strategies.cases(encoding="LATIN1"))
def test_other_encodings_go_to_the_python_codec(case):
    # C runs UTF-8 only: in another encoding the compiled entry points forward the call whole, so the
    # outcomes are Python's by construction; what this checks is that no C function runs on them
    with Counted() as counted:
        theirs, ours = build_both(case.context, case.message)
        assert ours == theirs and ours[0] == "ok"
        data = case.context.build(case.message, COMPILED)
        assert parse_both(case.context, data) == (("ok", shape(case.message)),) * 2
    if case.context.layer == "logical":
        assert counted.ran == dict.fromkeys(ENTRIES, 0), counted.ran


@given(strategies.invalid_cases())
def test_invalid_message_objects_same_error(invalid):
    context = invalid.case.context
    with Counted() as counted:
        theirs, ours = build_both(context, invalid.case.message)
    assert theirs[0] == "EncodeError"
    assert ours == theirs
    name = entry(context, parse=False)
    assert counted.forwarded[name] == 1  # C never builds bytes for a message Python refuses


def test_every_declared_message_has_c_functions():
    from replwire.codec.wire.gen import c_module

    source = c_module.generate()
    for spec in (*schema.LOGICAL_MESSAGES, *(s for side in schema.ENVELOPE.values() for s in side.values())):
        assert f"p_{spec.name}(const unsigned char *d" in source and f"b_{spec.name}(PyObject *m" in source
        assert f"[{ord(spec.tag)}] = p_{spec.name}" in source


# ---------------------------------------------------------------------------------------------------------
# which codec an import gets


def import_codec(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter after the set-up lines in it, with ``env`` added."""
    environment = {k: v for k, v in os.environ.items() if k != "REPLWIRE_IMPL"} | env
    return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                          text=True, env=environment, timeout=120)


SHOW = "from replwire.codec.wire import fast; print(fast.IMPL, type(fast.parse).__name__)"
STALE = textwrap.dedent("""
    import sys, types
    fake = types.ModuleType("replwire.codec.wire.gen.fingerprint")
    fake.fingerprint = lambda: "0" * 32  # what the installed files would hash to after a change
    import replwire.schema  # the package first, then the fake module in place of the real one
    sys.modules[fake.__name__] = fake
""")
MISSING = textwrap.dedent("""
    import sys
    sys.modules["replwire.codec.wire._compiled"] = None  # as if it were never built
""")


def test_default_and_forced_choices():
    assert import_codec(SHOW).stdout.split() == ["c", "builtin_function_or_method"]
    assert import_codec(SHOW, REPLWIRE_IMPL="c").stdout.split() == ["c", "builtin_function_or_method"]
    assert import_codec(SHOW, REPLWIRE_IMPL="python").stdout.split() == ["python", "function"]
    wrong = import_codec(SHOW, REPLWIRE_IMPL="rust")
    assert wrong.returncode != 0 and "ImportError: REPLWIRE_IMPL='rust': expected 'c' or 'python'" in wrong.stderr


def test_a_stale_extension_is_refused_with_a_warning():
    result = import_codec(STALE + SHOW)
    assert result.stdout.split() == ["python", "function"], result.stderr
    assert "CompiledCodecWarning: the compiled codec is stale" in result.stderr
    assert "reinstall replwire to rebuild it; using the Python codec" in result.stderr
    forced = import_codec(STALE + SHOW, REPLWIRE_IMPL="c")
    assert forced.returncode != 0 and "ImportError: REPLWIRE_IMPL=c: the compiled codec is stale" in forced.stderr


def test_a_missing_extension_means_the_python_codec_quietly_or_an_error_when_forced():
    result = import_codec(MISSING + SHOW)
    assert result.stdout.split() == ["python", "function"] and "Warning" not in result.stderr, result.stderr
    forced = import_codec(MISSING + SHOW, REPLWIRE_IMPL="c")
    assert forced.returncode != 0
    assert "ImportError: REPLWIRE_IMPL=c: the compiled codec is not built" in forced.stderr
