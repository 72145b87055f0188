"""Generate the fast codec's public entry points: ``parse``, ``build``, ``parse_envelope``, ``build_envelope``.

Strategy: the entry point tests for the common case (``bytes`` input, an exact ``int`` protocol version,
``in_stream`` exactly ``True`` or ``False``, the default encoding, UTF-8), then the tag byte (parsing) or the
class (building) of the :data:`HOT` messages, and runs their generated bodies inline: the same text as their
per-message functions, once per group of contexts whose functions are the same, so that the commonest
messages cost one Python call (the public one) and no table lookups.  Every other message goes through the
dispatch tables to its per-message function, and anything unusual (another kind of input, a context that
cannot be, another encoding, an unknown tag or class) to the ``*_other`` functions of
:mod:`replwire.codec.wire.runtime`, which check it as the reference does (and resolve the encoding).
Nothing here knows a message: the bodies come from :mod:`replwire.codec.wire.gen.parse` and
:mod:`replwire.codec.wire.gen.build`, the tags and classes from the declarations.  A generated entry point looks like::

    def parse(data, *, proto_version, in_stream=False, encoding='utf-8'):
        if data.__class__ is bytes and proto_version.__class__ is int and data and encoding == 'utf-8':
            _tag = data[0]
            if _tag == 73:
                if in_stream is False:
                    if 1 <= proto_version <= 4:
                        try:
                            ...                     # the body of parse_Insert_v1
                ...
            if in_stream is False:
                try:
                    _function = _PARSE_OUT[proto_version][_tag]
            ...
        return _parse_other(_PARSE, data, proto_version, in_stream, encoding)
"""

from __future__ import annotations

import textwrap
from typing import Any

from ....schema.encodings import UTF8
from ....schema.message_spec import MessageSpec
from .common import CLASSES, Lines, Namespace

__all__ = ["HOT", "SIGNATURES", "entry_points"]

#: The messages whose bodies the entry points carry inline, commonest first: Insert (most of the messages
#: of a real change stream) and the envelope frame that carries every message.  Each body inline adds its
#: local variables to the entry point's frame, which every call pays to set up and clear, so only the
#: messages that dominate real streams are inlined; the others cost one more call through the tables.
HOT = ("Insert", "XLogData")

#: The signatures of the entry points (:mod:`replwire.codec.wire.fast` checks its documented ones against them).
SIGNATURES = {
    "parse": f"data, *, proto_version, in_stream=False, encoding={UTF8!r}",
    "build": f"message, *, proto_version, in_stream=False, encoding={UTF8!r}",
    "parse_envelope": 'data, *, sender="server"',
    "build_envelope": "message",
}

Contexts = dict[tuple[Any, bool], str]  # (proto_version, in_stream) -> the function for the message there


def versions_test(versions: list[int]) -> str:
    """A test that ``proto_version`` (an exact int) is one of ``versions``."""
    versions = sorted(versions)
    if len(versions) == 1:
        return f"proto_version == {versions[0]}"
    if versions == list(range(versions[0], versions[-1] + 1)):
        return f"{versions[0]} <= proto_version <= {versions[-1]}"
    return f"proto_version in {tuple(versions)!r}"


def inline(out: Lines, function: str) -> None:
    """Emit the body of the generated ``function`` (its text) at the current depth."""
    body = textwrap.dedent(function.split("\n", 1)[1])
    for line in body.rstrip("\n").split("\n"):
        out(line)


def hot_logical(out: Lines, contexts: Contexts, functions: dict[str, str], closed: set[str]) -> None:
    """The inlined bodies of one message, by ``in_stream`` and then by groups of versions."""
    for i, in_stream in enumerate((False, True)):
        groups: dict[str, list[int]] = {}
        for (version, stream), name in sorted(contexts.items()):
            if stream is in_stream and name not in closed:
                groups.setdefault(name, []).append(version)
        if not groups:
            continue
        out(f"{'if' if i == 0 else 'elif'} in_stream is {in_stream}:")
        out.indent()
        for j, (name, versions) in enumerate(groups.items()):
            out(f"{'if' if j == 0 else 'elif'} {versions_test(versions)}:")
            out.indent()
            inline(out, functions[name])
            out.dedent()
        out.dedent()


def logical(kind: str, generated: Any, hot: list[MessageSpec], ns: Namespace) -> str:
    """``parse`` or ``build`` (``kind``) of the logical layer."""
    out = Lines()
    functions, closed = generated.functions, generated.closed
    if kind == "parse":
        tables = {key[2]: generated.parsers[key] for key in generated.parsers if key[0] == "logical"}
        out(f"def parse({SIGNATURES['parse']}):")
        out.indent()
        out(f"if data.__class__ is bytes and proto_version.__class__ is int and data and encoding == {UTF8!r}:")
        out.indent()
        out("_tag = data[0]")
    else:
        tables = {key[1]: {c.spec.tag: n for c, n in generated.builders[key].items()}
                  for key in generated.builders if key[0] == "logical"}
        out(f"def build({SIGNATURES['build']}):")
        out.indent()
        out(f"if proto_version.__class__ is int and encoding == {UTF8!r}:")
        out.indent()
        out("_cls = message.__class__")
    for i, spec in enumerate(hot):
        test = f"_tag == {ord(spec.tag)}" if kind == "parse" else f"_cls is {ns.cls(CLASSES[id(spec)])}"
        out(f"{'if' if i == 0 else 'elif'} {test}:")
        out.indent()
        hot_logical(out, {ctx: table[spec.tag] for ctx, table in tables.items()}, functions, closed)
        out.dedent()
    upper, key = kind.upper(), "_tag" if kind == "parse" else "_cls"
    for i, (in_stream, table) in enumerate(((False, f"_{upper}_OUT"), (True, f"_{upper}_IN"))):
        out(f"{'if' if i == 0 else 'elif'} in_stream is {in_stream}:")
        out("    try:")
        out(f"        _function = {table}[proto_version][{key}]")
        out("    except KeyError:")
        out("        _function = None")
    out("else:")
    out("    _function = None")
    out("if _function is not None:")
    out(f"    return _function({'data' if kind == 'parse' else 'message'}, proto_version, in_stream, encoding)")
    out.dedent()
    out(f"return _{kind}_other(_{upper}, {'data' if kind == 'parse' else 'message'}, proto_version, in_stream, "
        "encoding)")
    return out.text()


def envelope(kind: str, generated: Any, hot: list[MessageSpec], ns: Namespace) -> str:
    """``parse_envelope`` or ``build_envelope`` (``kind``)."""
    out = Lines()
    functions = generated.functions
    if kind == "parse":
        out(f"def parse_envelope({SIGNATURES['parse_envelope']}):")
        out.indent()
        out("if data.__class__ is bytes and data and sender.__class__ is str:")
        out.indent()
        out("_tag = data[0]")
        for key, table in generated.parsers.items():
            if key[0] != "envelope":
                continue
            for spec in hot:
                if spec.tag in table and table[spec.tag] not in generated.closed:
                    out(f"if _tag == {ord(spec.tag)} and sender == {key[1]!r}:")
                    out.indent()
                    inline(out, functions[table[spec.tag]])
                    out.dedent()
        out("try:")
        out("    _function = _PARSE_ENVELOPE[sender][_tag]")
        out("except KeyError:")
        out("    _function = None")
        out("if _function is not None:")
        out(f"    return _function(data, None, False, {UTF8!r})")
        out.dedent()
        out("return _parse_envelope_other(_PARSE_ENVELOPE, data, sender)")
        return out.text()
    out(f"def build_envelope({SIGNATURES['build_envelope']}):")
    out.indent()
    out("_cls = message.__class__")
    for key, table in generated.builders.items():
        if key[0] != "envelope":
            continue
        for cls, name in table.items():
            if any(cls.spec is spec for spec in hot) and name not in generated.closed:
                out(f"if _cls is {ns.cls(cls)}:")
                out.indent()
                inline(out, functions[name])
                out.dedent()
    out("try:")
    out("    _function = _BUILD_ENVELOPE[_cls]")
    out("except KeyError:")
    out("    return _build_envelope_other(message)")
    out(f"return _function(message, None, False, {UTF8!r})")
    return out.text()


def entry_points(generated: Any, ns: Namespace, logical_specs: list[MessageSpec],
                 envelope_specs: list[MessageSpec]) -> list[str]:
    """The four entry points' source."""
    order = {name: i for i, name in enumerate(HOT)}
    unknown = set(HOT) - {s.name for s in logical_specs + envelope_specs}
    if unknown:
        raise ValueError(f"HOT names messages that are not declared: {sorted(unknown)}")
    hot_logical_specs = sorted((s for s in logical_specs if s.name in order), key=lambda s: order[s.name])
    hot_envelope_specs = [s for s in envelope_specs if s.name in order]
    return [logical("parse", generated, hot_logical_specs, ns), logical("build", generated, hot_logical_specs, ns),
            envelope("parse", generated, hot_envelope_specs, ns), envelope("build", generated, hot_envelope_specs, ns)]
