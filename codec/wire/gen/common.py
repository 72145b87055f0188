"""The pieces the fast codec's two generators share: the generated module's globals, what is known about
a field at generation time, conditions decided early or tested late, and how objects are made.

Strategy: small helpers over the walker's model (:mod:`replwire.codec.walker`), used by
:mod:`replwire.codec.wire.gen.parse` and :mod:`replwire.codec.wire.gen.build`; see
:mod:`replwire.codec.wire.gen.python_codec` for the whole picture.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .... import schema
from ....schema.encodings import UTF8
from ... import walker
from ...messages import Record as RecordBase
from ...messages import WireMessage
from ...scalars import LSN, Timestamp
from ...walker import AnyOf, CharOf, Compare, DerivedCount, FieldNode, Int, Record, Ref, TagByte, When, Zero

__all__ = [
    "ARGS", "CLASSES", "Ctx", "ENVELOPE_CONTEXT", "Known", "LOGICAL_CONTEXTS", "Lines", "Namespace", "branch_order",
    "context_args", "fixed_format", "gate_open", "make_object", "python_values", "record_class", "referenced",
    "runtime", "static", "value_fields",
]

#: The parse contexts of the logical layer: (proto_version, in_stream).
LOGICAL_CONTEXTS = tuple((v, s) for v in range(1, schema.MAX_PROTO_VERSION + 1) for s in (False, True)
                         if v >= 2 or not s)
#: The envelope's only context.
ENVELOPE_CONTEXT = (None, False)
#: The parameters of a generated parse function (a build function's first is ``message``): the names of
#: the public ``parse``'s, so that a function's body reads the same inlined in the public entry point.
#: ``encoding`` is the Python codec of the Strings (the public entry points inline only for UTF-8).
ARGS = ("data", "proto_version", "in_stream", "encoding")

CLASSES = {id(cls.spec): cls for cls in WireMessage.__subclasses__()}
RECORD_CLASSES = {name: cls for cls in RecordBase.__subclasses__()
                  for name, struct_ in schema.RECORDS.items() if cls._declaration is struct_}


class Namespace:
    """The constants of the generated module: every one the code refers to, each defined once, by the
    Python expression that makes it (written at the top of the module, after its imports)."""

    def __init__(self) -> None:
        self.sources: dict[str, str] = {}
        self.modules: set[str] = set()
        self._names: dict[Any, str] = {}

    def add(self, key: Any, prefix: str, source: str) -> str:
        name = self._names.get(key)
        if name is None:
            name = f"{prefix}{len(self._names)}"
            self._names[key] = name
            self.sources[name] = source
        return name

    def unpacker(self, fmt: str) -> str:
        return self.add(("unpack", fmt), "_U", f"_struct.Struct({'>' + fmt!r}).unpack_from")

    def packer(self, fmt: str) -> str:
        return self.add(("pack", fmt), "_P", f"_struct.Struct({'>' + fmt!r}).pack")

    def const(self, value: bytes | str | int) -> str:
        return self.add(("const", type(value), value), "_C", repr(value))

    def cls(self, cls: type) -> str:
        """A class, imported from its module (which must be an absolute module of replwire)."""
        self.modules.add(cls.__module__)
        return self.add(("class", cls), "_K", f"{module_alias(cls.__module__)}.{cls.__qualname__}")

    def spec(self, cls: type) -> str:
        """The declaration of a message class."""
        return self.add(("spec", cls), "_S", f"{self.cls(cls)}.spec")

    def char_table(self, choices: str) -> str:
        """A tuple mapping each byte value to its character when it is one of ``choices``, else ``None``."""
        return self.add(("chars", choices), "_T",
                        f"tuple(chr(b) if chr(b) in {choices!r} else None for b in range(256))")

    def char_bytes(self, choices: str) -> str:
        """A dict mapping each character of ``choices`` to its byte value."""
        return self.add(("charbytes", choices), "_B", repr({c: ord(c) for c in choices}))

    def imports(self) -> list[str]:
        """The import statements of the modules the constants come from."""
        return [f"import {module} as {module_alias(module)}" for module in sorted(self.modules)]

    def definitions(self) -> list[str]:
        return [f"{name} = {source}" for name, source in self.sources.items()]


def module_alias(module: str) -> str:
    """The name a module is imported under in the generated module: ``replwire.codec.messages`` is
    ``_messages``."""
    return "_" + module.rsplit(".", 1)[-1]


# ---------------------------------------------------------------------------------------------------------
# what the generator knows about a field


_UNKNOWN = object()


@dataclass
class Known:
    """What is known at generation time about one field's value: nothing, present (``some``), or a constant."""

    value: Any = _UNKNOWN
    some: bool = False

    @property
    def constant(self) -> bool:
        return self.value is not _UNKNOWN


def static(cond: walker.Condition, params: dict[str, Any], known: dict[str, Known]) -> bool | None:
    """The condition's value if it is decided by the context and what is known, else ``None``."""
    if isinstance(cond, AnyOf):
        parts = [static(p, params, known) for p in cond.parts]
        if True in parts:
            return True
        return False if all(p is False for p in parts) else None
    ref = cond if isinstance(cond, Ref) else cond.left
    if ref.scope == "param":
        return walker.evaluate(cond, params, {})
    k = known.get(ref.name, Known())
    if k.constant:
        return walker.evaluate(cond, params, {ref.name: k.value})
    if k.some and isinstance(cond, Compare) and cond.right is None and cond.op in ("==", "!="):
        return cond.op == "!="
    return None


def runtime(cond: walker.Condition, names: dict[str, str]) -> str:
    """The condition as a Python expression over the local variables ``names`` of the fields."""
    if isinstance(cond, AnyOf):
        return " or ".join(f"({runtime(p, names)})" for p in cond.parts)
    if isinstance(cond, Ref):
        return f"bool({names[cond.name]})"
    op = {"==": "is" if cond.right is None else "==", "!=": "is not" if cond.right is None else "!="}.get(
        cond.op, cond.op)
    return f"{names[cond.left.name]} {op} {cond.right!r}"


def referenced(fields: tuple[FieldNode, ...]) -> set[str]:
    """The sibling fields that the conditions of ``fields`` read."""
    names: set[str] = set()
    for f in fields:
        for n in walker.iter_nodes(f.node):
            if isinstance(n, When):
                names |= {r.name for r in _refs(n.condition) if r.scope == "field"}
    return names


def branch_order(name: str, choices: str, later: tuple[FieldNode, ...], ctx: Ctx) -> list[str]:
    """The choices of a character field, those under which more of the ``later`` fields are present first
    (so the value-carrying tuple column kinds are tested before NULL and unchanged-TOAST)."""
    conditional = [f.node for f in later if isinstance(f.node, When)]

    def present(choice: str) -> int:
        known = {name: Known(value=choice)}
        return sum(static(n.condition, ctx.params, known) is not False for n in conditional)

    return sorted(choices, key=lambda c: -present(c))


def _refs(cond: walker.Condition) -> Iterator[Ref]:
    if isinstance(cond, AnyOf):
        for part in cond.parts:
            yield from _refs(part)
    else:
        yield cond if isinstance(cond, Ref) else cond.left


def value_fields(record: Record) -> list[FieldNode]:
    """The fields that are attributes of the record's class (see ``messages.value_fields``)."""
    return [f for f in record.fields if f.meta.value not in ("tag", "count")]


def fixed_format(n: Int | Zero | DerivedCount | CharOf) -> str:
    """The ``struct`` format character of a node read as one integer."""
    if isinstance(n, Int):
        return n.format
    if isinstance(n, (Zero, DerivedCount)):
        return n.int.format
    return "B"


def record_class(record: Record) -> type[RecordBase]:
    """The class of a repeated record: a declared record (``schema.RECORDS``) has one, found by its name; an
    unnamed one has none and raises :class:`~replwire.codec.walker.UnknownConstruct`."""
    if record.name is None:
        raise walker.UnknownConstruct(f"the generators cannot make an unnamed record: {record!r}")
    return RECORD_CLASSES[record.name]


def record_maker(cls: type[object]) -> str:
    """How generated code makes an instance of ``cls`` without running its ``__init__``.

    ``"attrs"``: a new object whose slots are set one by one (the slotted dataclasses of messages and
    records); ``"init"``: the class's own constructor (when it has a ``__post_init__``).  Either way the
    instance is the same as one made by the constructor.  (Not an instance of an unfrozen twin class whose
    ``__class__`` is then assigned: CPython gives such an instance a dict of its own, which makes every later
    attribute read slower and the object larger.)
    """
    if hasattr(cls, "__post_init__"):
        return "init"
    if cls.__setattr__ is not object.__setattr__:
        raise TypeError(f"{cls.__name__} overrides __setattr__; the generated code cannot fill it in")
    return "attrs"


# ---------------------------------------------------------------------------------------------------------
# source text


class Lines:
    """Indented source lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def indent(self) -> Lines:
        self.depth += 1
        return self

    def dedent(self) -> None:
        self.depth -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


@dataclass
class Ctx:
    proto_version: int | None
    in_stream: bool

    @property
    def params(self) -> dict[str, Any]:
        return {"proto_version": self.proto_version, "in_stream": self.in_stream}

    @property
    def suffix(self) -> str:
        if self.proto_version is None:
            return "env"
        return f"v{self.proto_version}{'s' if self.in_stream else ''}"


def context_args(ctx: Ctx) -> str:
    """The context as a generated function passes it on (to the interpreter): its parameters, or for the
    envelope, whose functions may be inlined where those names are not bound, the constants."""
    if ctx.proto_version is None:
        return f"None, {ctx.in_stream!r}, {UTF8!r}"
    return ", ".join(ARGS[1:])


def gate_open(layout: walker.Layout, ctx: Ctx) -> bool:
    """Whether the message exists in the context's protocol version."""
    tag = layout.fields[0].node
    assert isinstance(tag, TagByte)
    return tag.min_proto is None or ctx.proto_version is None or ctx.proto_version >= tag.min_proto


def make_object(out: Lines, ns: Namespace, cls: type, values: list[tuple[str, str]], var: str) -> None:
    """Emit code that leaves a ``cls`` instance with ``values`` (name, expression) in ``var``."""
    how = record_maker(cls)
    if how == "init":
        args = ", ".join(f"{name}={expr}" for name, expr in values)
        out(f"{var} = {ns.cls(cls)}({args})")
        return
    out(f"{var} = _new({ns.cls(cls)})")
    for name, expr in values:
        out(f"{var}.{name} = {expr}")


def convert(meta_value: str, expr: str, ns: Namespace) -> str:
    """The Python value of a wire value, as the message classes convert it (LSN, Timestamp)."""
    if expr == "None":
        return expr
    if meta_value == "lsn":
        return f"_inew({ns.cls(LSN)}, {expr})"
    if meta_value == "timestamp":
        return f"_inew({ns.cls(Timestamp)}, {expr})"
    return expr


def python_values(out: Lines, ns: Namespace, fields: list[FieldNode],
                  wire: dict[str, str]) -> list[tuple[str, str]]:
    """(name, expression of the Python value) of each field, from the expressions of their wire values.

    An LSN or Timestamp equal to that of the previous field of its kind shares its object (they are
    immutable ints, and making one costs more than comparing two): in logical replication every XLogData
    frame's ``wal_end`` is its ``data_start``.
    """
    kinds = [f.meta.value for f in fields if wire[f.name] != "None"]
    last: dict[str, tuple[str, str]] = {}  # kind -> (wire expression, local holding the object)
    values = []
    for f in fields:
        kind, expr = f.meta.value, wire[f.name]
        value = convert(kind, expr, ns)
        if kind in ("lsn", "timestamp") and expr != "None":
            kinds.remove(kind)
            if kind in last:
                value = f"{last[kind][1]} if {expr} == {last[kind][0]} else {value}"
            if kind in kinds:  # a later field of the kind compares with this one
                out(f"c_{f.name} = {value}")
                value = f"c_{f.name}"
                last[kind] = (expr, value)
        values.append((f.name, value))
    return values
