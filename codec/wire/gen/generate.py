"""Generate the fast codec's Python source from the walker's layout model of every declaration.

For each message and each parse context (protocol version 1-4, inside or outside a Stream Start...Stop
block; the envelope has one context) this module writes one parse function and one build function as
plain Python: precomputed ``struct`` formats for the runs of fixed-size fields, integer offsets into the
input ``bytes``, no stream objects, message objects filled in directly.  Then the four public entry points,
which carry the bodies of the commonest messages inline (:mod:`replwire.codec.wire.gen.entry`).
:mod:`replwire.codec.wire.fast` compiles the result at import; ``python -m replwire.codec.wire.gen.generate`` prints it.

Strategy: partial evaluation of the layout.  The context is known when a function is generated, so
conditions on ``proto_version`` and ``in_stream`` and the version gate of the tag are decided here, not at
run time.  Conditions on earlier fields are decided by *forking*: where a field that a later condition
reads is a one-of-a-few character (a tuple column's ``kind``), an optional marked record (Update's
``key``) or a tail (Stream Abort's ``abort_lsn``), the rest of the record is generated once per
possibility, with the condition settled in each branch.  Every parse makes new objects (records are
mutable, so none is shared between messages; only an immutable LSN or Timestamp may serve two fields of
one message).

The generated code only decides *whether* its input is valid: every check the declarations imply is
there, but on any failure it raises ``_Decline`` (or lets ``struct.error``, ``IndexError``, ...
propagate), and the function hands the input to :mod:`replwire.codec.wire.interpreter`, which works out the
exact error -- or the result, when the fast path was merely cautious (a ``bytearray`` value, an ``int``
subclass).  Nothing is written per message: every function comes from the walker's nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .... import schema
from ....schema.core import MessageSpec
from ... import walker
from .build import BuildGen
from .common import CLASSES, ENVELOPE_CONTEXT, LOGICAL_CONTEXTS, Ctx, Namespace, gate_open
from .entry import entry_points
from .parse import ParseGen

# ---------------------------------------------------------------------------------------------------------
# the module


@dataclass
class Generated:
    """The generated source, its globals, and the function names per context and message."""

    source: str
    namespace: Namespace
    #: parse function name per (layer, sender or None, context) and tag
    parsers: dict[tuple, dict[str, str]] = field(default_factory=dict)
    #: build function name per (layer, context) and message class
    builders: dict[tuple, dict[type, str]] = field(default_factory=dict)
    #: the spec of each layout constant name
    layouts: dict[str, MessageSpec] = field(default_factory=dict)
    #: the text of each generated per-message function, by name
    functions: dict[str, str] = field(default_factory=dict)
    #: the functions of messages that do not exist in their context (their protocol version)
    closed: set[str] = field(default_factory=set)


def generate() -> Generated:
    """Generate the whole fast codec."""
    ns = Namespace()
    chunks: list[str] = []
    bodies: dict[str, str] = {}  # body text (with a placeholder name) -> function name
    result = Generated("", ns)

    def emit(kind: str, spec: MessageSpec, ctx: Ctx, make: Callable[[str], str], is_open: bool) -> str:
        placeholder = "__NAME__"
        body = make(placeholder)
        name = bodies.get(body)
        if name is None:
            name = f"{kind}_{spec.name}_{ctx.suffix}"
            bodies[body] = name
            chunks.append(body.replace(placeholder, name))
            result.functions[name] = chunks[-1]
            if not is_open:
                result.closed.add(name)
        return name

    layouts: dict[int, walker.Layout] = {}

    def add(specs: list[MessageSpec], key_parse: tuple, key_build: tuple, ctx: Ctx) -> None:
        parsers = result.parsers.setdefault(key_parse, {})
        builders = result.builders.setdefault(key_build, {})
        for spec in specs:
            lay = layouts.get(id(spec)) or layouts.setdefault(id(spec), walker.layout(spec))
            spec_name = ns.add(("spec", spec.name, spec.layer), "_S", lambda: spec)
            result.layouts[spec_name] = spec
            is_open = gate_open(lay, ctx)
            parsers[spec.tag] = emit("parse", spec, ctx, lambda fn: ParseGen(lay, ctx, ns, spec_name).function(fn),
                                     is_open)
            builders[CLASSES[id(spec)]] = emit(
                "build", spec, ctx, lambda fn: BuildGen(lay, ctx, ns, spec_name).function(fn), is_open)

    for version, in_stream in LOGICAL_CONTEXTS:
        ctx = Ctx(version, in_stream)
        add(list(schema.LOGICAL_MESSAGES), ("logical", None, (version, in_stream)), ("logical", (version, in_stream)),
            ctx)
    for sender, specs in schema.ENVELOPE.items():
        add(list(specs.values()), ("envelope", sender, ENVELOPE_CONTEXT), ("envelope", ENVELOPE_CONTEXT),
            Ctx(*ENVELOPE_CONTEXT))
    chunks += entry_points(result, ns, list(schema.LOGICAL_MESSAGES),
                           [spec for specs in schema.ENVELOPE.values() for spec in specs.values()])
    header = ('"""Generated by replwire.codec.wire.gen.generate from the declarations in replwire.schema: '
              'do not edit."""'
              "\n\n")
    result.source = header + "\n\n".join(chunks)
    return result


def main() -> None:  # pragma: no cover - a debugging aid
    print(generate().source)


if __name__ == "__main__":  # pragma: no cover
    main()
