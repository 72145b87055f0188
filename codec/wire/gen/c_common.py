"""What the compiled codec's two C generators share: C names, integer reads and writes, conditions.

Strategy: the C generators (:mod:`replwire.codec.wire.gen.c_parse`, :mod:`replwire.codec.wire.gen.c_build`)
write one function per message that serves every context: the protocol version and ``in_stream`` are C
arguments and the declarations' conditions are tested at run time, so the C stays small (the compiler folds
what it can).  A field that a later condition reads keeps a C variable: its presence (for ``x == None``
and ``x != None``) or its byte (for ``kind == 't'``).  Anything else in a condition is a construct these
generators do not know (:class:`~replwire.codec.walker.UnknownConstruct`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import walker
from ...walker import AnyOf, Int, Ref
from .common import Lines

__all__ = ["CGen", "C_INT", "Scope", "c_ident", "class_var", "condition", "int_literal", "read_int", "slot"]

#: C type, maximum and minimum of each ``struct`` integer format.
C_INT = {
    "B": ("uint64_t", 0xFF, 0), "H": ("uint64_t", 0xFFFF, 0), "L": ("uint64_t", 0xFFFFFFFF, 0),
    "Q": ("uint64_t", 0xFFFFFFFFFFFFFFFF, 0),
    "b": ("int64_t", 0x7F, -0x80), "h": ("int64_t", 0x7FFF, -0x8000), "l": ("int64_t", 0x7FFFFFFF, -0x80000000),
    "q": ("int64_t", 0x7FFFFFFFFFFFFFFF, -0x8000000000000000),
}
#: The C type a signed integer of each size is read as before widening.
SIGNED = {1: "int8_t", 2: "int16_t", 4: "int32_t", 8: "int64_t"}


def c_ident(name: str) -> str:
    """A C identifier for a Python name (message, class and field names are identifiers already)."""
    if not name.isidentifier():
        raise walker.UnknownConstruct(f"not an identifier: {name!r}")
    return name


def read_int(n: Int, at: str) -> str:
    """A C expression reading the big-endian integer ``n`` at ``at`` (a ``const unsigned char *``)."""
    raw = f"rd{n.size}({at})"
    return f"(int64_t)({SIGNED[n.size]}){raw}" if n.signed else raw


def int_literal(value: int, signed: bool = False) -> str:
    """A C integer constant of ``value``: ``int64_t`` when ``signed`` (or negative), else ``uint64_t``."""
    if value < 0:
        return f"(-INT64_C({-(value + 1)}) - 1)"
    return f"INT64_C({value})" if signed else f"UINT64_C({value})"


@dataclass
class Scope:
    """The C variables of the fields of one record seen so far, by field name: presence flags, character
    bytes and integers (what the declarations' conditions and counts read)."""

    present: dict[str, str] = field(default_factory=dict)
    chars: dict[str, str] = field(default_factory=dict)
    ints: dict[str, str] = field(default_factory=dict)
    signed: set[str] = field(default_factory=set)  # the integers among ``ints`` that may be negative


def condition(cond: walker.Condition, scope: Scope) -> str:
    """The C expression of a condition; ``pv`` and ``ins`` are the context's parameters."""
    if isinstance(cond, AnyOf):
        return "(" + " || ".join(condition(part, scope) for part in cond.parts) + ")"
    if isinstance(cond, Ref):
        if cond.scope == "param":
            return {"in_stream": "ins", "proto_version": "pv"}[cond.name]
        raise walker.UnknownConstruct(f"the C generators cannot test the truth of the field {cond.name!r}")
    ref, op, right = cond.left, cond.op, cond.right
    if ref.scope == "param":
        if not isinstance(right, int) or isinstance(right, bool):
            raise walker.UnknownConstruct(f"unsupported condition {cond!r}")
        return f"({ {'in_stream': 'ins', 'proto_version': 'pv'}[ref.name]} {op} {right})"
    if right is None and op in ("==", "!="):
        return f"({'!' if op == '==' else ''}{scope.present[ref.name]})"
    if isinstance(right, str) and len(right) == 1 and op in ("==", "!=") and ref.name in scope.chars:
        return f"({scope.chars[ref.name]} {op} {ord(right)})"
    if isinstance(right, int) and not isinstance(right, bool) and ref.name in scope.ints:
        return f"({scope.ints[ref.name]} {op} {int_literal(right)})"
    raise walker.UnknownConstruct(f"the C generators cannot test {cond!r}")


class Names:
    """Unique C local names."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"


def slot(cls: type, name: str) -> str:
    """The C variable holding the offset of ``cls``'s slot ``name``."""
    return f"O_{c_ident(cls.__name__)}_{c_ident(name)}"


def class_var(cls: type) -> str:
    """The C variable holding the type object of ``cls``."""
    return f"K_{c_ident(cls.__name__)}"


class CGen:
    """What a C generator of one message's function keeps: its output, its local names, and the classes and
    slots it uses (which the module declares)."""

    def __init__(self, layout: walker.Layout) -> None:
        self.layout = layout
        self.out = Lines()
        self.names = Names()
        self.classes: dict[type, set[str]] = {}

    def use(self, cls: type, name: str | None = None) -> str:
        """The C variable of ``cls``'s slot ``name`` (of ``cls`` itself without a name), noted as used."""
        names = self.classes.setdefault(cls, set())
        if name is not None:
            names.add(name)
            return slot(cls, name)
        return class_var(cls)
