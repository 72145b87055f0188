"""A what-if for a design decision: the fast codec with records that are not frozen.

replwire's records (``TupleColumn``, ``RelationColumn``) are frozen dataclasses.  CPython 3.11 can fill
in such an object only through ``object.__setattr__`` (about 200 ns for a two-field record, against
about 75 ns for plain attribute stores), and a CDC message is mostly tuple columns, so that one choice
costs the parser about a quarter of its speed.  This module generates the fast codec again from the same
declarations with the records replaced by unfrozen look-alikes (same fields, plain dataclasses), so the
benchmark can show, in the same run, what the choice costs.  Its objects are *not* replwire's -- it is a
measurement, never part of the codec -- and it is labelled as such wherever it appears.

Strategy: the generator asks :func:`replwire.codec.fastgen_common.record_maker` how to make each record
class; an unfrozen class gets plain attribute stores.  The look-alikes are swapped into the generator's
record registry only while it generates, and the result is compiled into a private namespace.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Iterator

from replwire.codec import fast, fastgen, fastgen_common

from .codecs import Codec, Groups, _replwire

WHAT_IF = "what-if: unfrozen records"


def unfrozen_twin(cls: type) -> type:
    """A plain keyword-only dataclass with the fields of the frozen record class ``cls``."""
    fields = [(f.name, f.type) for f in dataclasses.fields(cls)]

    def from_wire(twin: type, raw: dict[str, Any]) -> Any:  # for the shared constant records
        return twin(**{name: raw[name] for name, _ in fields})

    return dataclasses.make_dataclass(f"{cls.__name__}Unfrozen", fields, kw_only=True,
                                      namespace={"_from_wire": classmethod(from_wire)})


@contextmanager
def unfrozen_records() -> Iterator[dict[str, type]]:
    registry = fastgen_common.RECORD_CLASSES
    saved = dict(registry)
    twins = {name: unfrozen_twin(cls) for name, cls in saved.items()}
    registry.update(twins)
    try:
        yield twins
    finally:
        registry.clear()
        registry.update(saved)


def codec() -> Codec:
    """The what-if codec: replwire's own public functions over the what-if generated functions."""
    api = SimpleNamespace()
    tables = module_globals()
    for name in ("parse", "build", "parse_envelope", "build_envelope"):
        original = getattr(fast, name)
        twin = types.FunctionType(original.__code__, tables, name, original.__defaults__, original.__closure__)
        twin.__kwdefaults__ = original.__kwdefaults__
        setattr(api, name, twin)
    return Codec(WHAT_IF, *_replwire(api), what_if=True)


@functools.lru_cache(maxsize=None)
def module_globals() -> dict[str, Any]:
    """Globals for :mod:`replwire.codec.fast`'s functions with the what-if dispatch tables in them."""
    with unfrozen_records():
        generated = fastgen.generate()
    namespace: dict[str, Any] = dict(generated.namespace.values)
    namespace.update(fast.runtime_globals())
    exec(compile(generated.source, "<bench.whatif: generated>", "exec"), namespace)  # noqa: S102

    def parse_table(key: tuple) -> list[Any]:
        table: list[Any] = [None] * 256
        for tag, name in generated.parsers[key].items():
            table[ord(tag)] = namespace[name]
        return table

    def build_table(key: tuple) -> dict[type, Any]:
        return {cls: namespace[name] for cls, name in generated.builders[key].items()}

    # replwire's own parse/build/parse_envelope/build_envelope -- the same code -- over these tables
    tables = dict(vars(fast))
    for in_stream in (False, True):
        suffix = "_IN" if in_stream else "_OUT"
        tables["_PARSE" + suffix] = {v: parse_table(("logical", None, (v, s)))
                                     for v, s in fastgen.LOGICAL_CONTEXTS if s == in_stream}
        tables["_BUILD" + suffix] = {v: build_table(("logical", (v, s)))
                                     for v, s in fastgen.LOGICAL_CONTEXTS if s == in_stream}
    tables["_PARSE_ENVELOPE"] = {sender: parse_table(("envelope", sender, fastgen.ENVELOPE_CONTEXT))
                                 for sender in ("server", "client")}
    tables["_BUILD_ENVELOPE"] = build_table(("envelope", fastgen.ENVELOPE_CONTEXT))
    return tables


def direct_parse_loop(tables: dict[str, Any]):
    """A parse loop that calls the generated functions of ``tables`` (a fast-module globals dict) straight
    from the dispatch tables, without the public ``parse`` around them (for the breakdown)."""
    out, inn, envelope = tables["_PARSE_OUT"], tables["_PARSE_IN"], tables["_PARSE_ENVELOPE"]["server"]

    def loop(groups: Groups) -> None:
        for proto_version, in_stream, datas in groups:
            table = envelope if proto_version is None else (inn if in_stream else out)[proto_version]
            for data in datas:
                table[data[0]](data, proto_version, in_stream)

    return loop
