"""The codecs the benchmark runs side by side, behind one small interface.

* ``replwire-fast``: ``replwire.codec.parse``/``build``, the public entry points: the compiled codec when it
  is built (``replwire.codec.wire.fast.IMPL == "c"``), else the generated Python codec;
* ``replwire-python``: the generated Python codec's entry points (``replwire.codec.wire._generated``), what
  ``REPLWIRE_IMPL=python`` gives;
* ``replwire-reference``: ``replwire.codec.wire.reference`` (construct, interpreted, with replwire's checks);
* ``construct-compiled``: construct's own ``compile()`` of the same declarations (``Container`` results;
  builds from the dicts ``WireMessage.to_wire`` gives);
* ``pypgoutput``: ``pypgoutput==0.0.3``'s decoder classes (parse only; protocol 1 subset);
* ``yardstick``: the hand-written ``struct`` decoder and encoder in :mod:`bench.yardstick`.

Strategy: each codec gives a ``parse_loop`` and a ``build_loop`` that run over a corpus's context groups
(:meth:`bench.corpus.Corpus.groups`) and throw the results away, so the timed code is one tight loop per
codec with no adapter in between; ``prepare_build`` turns the corpus into the codec's own input objects
(untimed).  A codec that cannot handle a family says so with :attr:`Codec.families`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replwire import schema
from replwire.codec.wire import _generated, fast, reference

from . import yardstick

Groups = list[tuple[Any, bool, list[Any]]]


@dataclass(frozen=True)
class Codec:
    name: str
    parse_loop: Callable[[Groups], None]
    prepare_build: Callable[[Groups], Groups] | None
    build_loop: Callable[[Groups], None] | None
    build_one: Callable[[Any, bool, Any], bytes] | None = None  # for the untimed sanity check
    families: frozenset[str] | None = None  # None: every family
    slow: bool = False  # run fewer rounds

    def handles(self, family: str) -> bool:
        return self.families is None or family in self.families


def _replwire(module: Any) -> tuple[Callable, Callable, Callable]:
    def parse_loop(groups: Groups) -> None:
        parse, parse_envelope = module.parse, module.parse_envelope
        for proto_version, in_stream, datas in groups:
            if proto_version is None:
                for data in datas:
                    parse_envelope(data, sender="server")
            else:
                for data in datas:
                    parse(data, proto_version=proto_version, in_stream=in_stream)

    def prepare(groups: Groups) -> Groups:
        out = []
        for proto_version, in_stream, datas in groups:
            if proto_version is None:
                out.append((None, False, [module.parse_envelope(d, sender="server") for d in datas]))
            else:
                out.append((proto_version, in_stream,
                            [module.parse(d, proto_version=proto_version, in_stream=in_stream) for d in datas]))
        return out

    def build_loop(groups: Groups) -> None:
        build, build_envelope = module.build, module.build_envelope
        for proto_version, in_stream, messages in groups:
            if proto_version is None:
                for message in messages:
                    build_envelope(message)
            else:
                for message in messages:
                    build(message, proto_version=proto_version, in_stream=in_stream)

    def build_one(proto_version: Any, in_stream: bool, message: Any) -> bytes:
        if proto_version is None:
            return module.build_envelope(message)
        return module.build(message, proto_version=proto_version, in_stream=in_stream)

    return parse_loop, prepare, build_loop, build_one


def _construct_compiled() -> tuple[Callable, Callable, Callable]:
    logical = {ord(tag): spec.declaration.compile() for tag, spec in schema.LOGICAL.items()}
    envelope = {ord(tag): spec.declaration.compile() for tag, spec in schema.ENVELOPE["server"].items()}

    def parse_loop(groups: Groups) -> None:
        for proto_version, in_stream, datas in groups:
            table = envelope if proto_version is None else logical
            for data in datas:
                table[data[0]].parse(data, proto_version=proto_version, in_stream=in_stream)

    def prepare(groups: Groups) -> Groups:
        out = []
        for proto_version, in_stream, datas in groups:
            if proto_version is None:
                dicts = [(d[0], reference.parse_envelope(d, sender="server").to_wire()) for d in datas]
            else:
                dicts = [(d[0], reference.parse(d, proto_version=proto_version, in_stream=in_stream).to_wire())
                         for d in datas]
            out.append((proto_version, in_stream, dicts))
        return out

    def build_loop(groups: Groups) -> None:
        for proto_version, in_stream, dicts in groups:
            table = envelope if proto_version is None else logical
            for tag, values in dicts:
                table[tag].build(values, proto_version=proto_version, in_stream=in_stream)

    def build_one(proto_version: Any, in_stream: bool, obj: Any) -> bytes:
        table = envelope if proto_version is None else logical
        return table[obj[0]].build(obj[1], proto_version=proto_version, in_stream=in_stream)

    return parse_loop, prepare, build_loop, build_one


def _pypgoutput() -> Callable:
    import pypgoutput  # noqa: PLC0415 - the bench extra

    classes = {ord("B"): pypgoutput.Begin, ord("C"): pypgoutput.Commit, ord("R"): pypgoutput.Relation,
               ord("I"): pypgoutput.Insert, ord("U"): pypgoutput.Update, ord("D"): pypgoutput.Delete,
               ord("T"): pypgoutput.Truncate}

    def parse_loop(groups: Groups) -> None:
        for _, _, datas in groups:
            for data in datas:
                classes[data[0]](data)

    return parse_loop


def _yardstick() -> tuple[Callable, Callable, Callable]:
    def parse_loop(groups: Groups) -> None:
        parse, parse_envelope = yardstick.parse, yardstick.parse_envelope
        for proto_version, in_stream, datas in groups:
            if proto_version is None:
                for data in datas:
                    parse_envelope(data)
            else:
                for data in datas:
                    parse(data, proto_version, in_stream)

    def prepare(groups: Groups) -> Groups:
        return [(v, s, [yardstick.parse_envelope(d) if v is None else yardstick.parse(d, v, s) for d in datas])
                for v, s, datas in groups]

    def build_loop(groups: Groups) -> None:
        build, build_envelope = yardstick.build, yardstick.build_envelope
        for proto_version, in_stream, messages in groups:
            if proto_version is None:
                for message in messages:
                    build_envelope(message)
            else:
                for message in messages:
                    build(message, proto_version, in_stream)

    def build_one(proto_version: Any, in_stream: bool, message: Any) -> bytes:
        if proto_version is None:
            return yardstick.build_envelope(message)
        return yardstick.build(message, proto_version, in_stream)

    return parse_loop, prepare, build_loop, build_one


def all_codecs() -> list[Codec]:
    codecs = [
        Codec("replwire-fast", *_replwire(fast)),
        Codec("replwire-python", *_replwire(_generated)),
        Codec("yardstick", *_yardstick()),
        Codec("replwire-reference", *_replwire(reference), slow=True),
        Codec("construct-compiled", *_construct_compiled(), slow=True),
    ]
    try:
        codecs.append(Codec("pypgoutput", _pypgoutput(), None, None, None,
                            families=frozenset({"transaction", "schema", "dml"})))
    except ImportError:  # the bench extra is not installed: reported as missing
        pass
    return codecs


def check(codec: Codec, groups: Groups) -> str | None:
    """A quick sanity check before timing: ``build(parse(b)) == b`` on every message (untimed); the first
    problem in words, or ``None``."""
    if codec.prepare_build is None:
        try:
            codec.parse_loop(groups)
        except Exception as error:  # noqa: BLE001 - reported, the codec is left out
            return f"parse failed: {error!r}"
        return None
    try:
        built = codec.prepare_build(groups)
    except Exception as error:  # noqa: BLE001
        return f"parse failed: {error!r}"
    for (v, s, datas), (_, _, objects) in zip(groups, built):
        for data, obj in zip(datas, objects):
            try:
                again = codec.build_one(v, s, obj)  # type: ignore[misc]
            except Exception as error:  # noqa: BLE001
                return f"build failed on {data.hex()}: {error!r}"
            if again != data:
                return f"{data.hex()} rebuilt as {again.hex()}"
    return None
