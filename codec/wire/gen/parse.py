"""Generate one fast parse function for one message in one parse context.

Strategy: walk the layout's fields in wire order keeping a :class:`State`: the read position as a variable
plus a constant offset (so runs of fixed fields need no arithmetic at run time), the pending run of fixed
fields (flushed as one ``struct.unpack_from`` when something of variable size comes), and what is known
about each field so far.  Optional parts (marked records, tails, conditions left open) fork the rest of
the record, so later conditions are settled in each branch.  Every check of the declarations is emitted;
a failing one raises ``_Decline``.  The generated function looks like::

    def parse_Insert_v1(data, proto_version, in_stream, encoding):
        try:
            n = len(data)
            v_relation_id, v_new_m, v_new_c = _U3(data, 1)
            if v_new_m != 78: raise _Decline
            ...
        except _DECLINE:
            return _parse_slow(_S7, data, proto_version, in_stream, encoding)
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from ... import walker
from ...walker import (
    ArrayOf,
    CharOf,
    CountedArray,
    DerivedCount,
    FieldNode,
    IfBytesRemain,
    Int,
    LengthPrefixed,
    MarkedBy,
    Record,
    Rest,
    TagByte,
    Text,
    When,
    Zero,
)
from .common import (
    ARGS,
    CLASSES,
    Ctx,
    Known,
    Lines,
    Namespace,
    branch_order,
    context_args,
    fixed_format,
    gate_open,
    make_object,
    python_values,
    record_class,
    referenced,
    runtime,
    static,
    value_fields,
)

__all__ = ["ParseGen"]


@dataclass
class State:
    """Where the generated code is: position ``base + off`` (``base`` a variable, or ``None`` for an absolute
    offset), the fixed fields read but not yet unpacked, and what is known about the fields so far."""

    base: str | None
    off: int
    run: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (format, variable, checks)
    known: dict[str, Known] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)  # field -> expression of its wire value
    at_end: bool = False
    #: a slice may have run past the end; the final ``p != n`` (or a check before a Rest) catches it
    unchecked: bool = False

    def copy(self) -> State:
        return State(self.base, self.off, list(self.run), dict(self.known), dict(self.values), self.at_end,
                     self.unchecked)

    def pos(self, extra: int = 0) -> str:
        off = self.off + extra
        if self.base is None:
            return str(off)
        return f"{self.base} + {off}" if off else self.base


Continue = Callable[[State], None]


class ParseGen:
    """The parse function of one layout in one context (see the module docstring)."""

    def __init__(self, layout: walker.Layout, ctx: Ctx, ns: Namespace, spec_name: str) -> None:
        self.layout = layout
        self.ctx = ctx
        self.ns = ns
        self.spec_name = spec_name
        self.out = Lines()
        self.names: dict[str, int] = {}

    def var(self, name: str) -> str:
        count = self.names.get(name, 0)
        self.names[name] = count + 1
        return f"v_{name}" if not count else f"v_{name}{count + 1}"

    def function(self, name: str) -> str:
        out = self.out
        out(f"def {name}({', '.join(ARGS)}):")
        out.indent()
        out("try:")
        out.indent()
        if not gate_open(self.layout, self.ctx):
            out("raise _Decline")
        else:
            out("n = len(data)")
            self.fields(self.layout.fields, 0, State(None, 1), self.finish_message)
        out.dedent()
        out("except _DECLINE:")
        out(f"    return _parse_slow({self.spec_name}, data, {context_args(self.ctx)})")
        return out.text()

    # -- positions and runs ------------------------------------------------------------------------------

    def flush(self, st: State) -> None:
        """Unpack the pending run of fixed fields with one precomputed ``struct`` format."""
        if not st.run:
            return
        fmt = "".join(f for f, _, _ in st.run)
        targets = [v for _, v, _ in st.run]
        if fmt == "B":
            self.out(f"{targets[0]} = data[{st.pos()}]")
        else:
            self.out(f"{', '.join(targets)}, = {self.ns.unpacker(fmt)}(data, {st.pos()})")
        st.off += struct.calcsize(">" + fmt)
        for _, _, checks in st.run:
            for check in checks:
                self.out(check)
        st.run.clear()

    def materialize(self, st: State) -> None:
        """Put the position in ``p`` (before a loop, at the end of an element)."""
        self.flush(st)
        if st.base == "p" and st.off:
            self.out(f"p += {st.off}")
        elif st.base != "p":
            self.out(f"p = {st.pos()}")
        st.base, st.off = "p", 0

    # -- fields ------------------------------------------------------------------------------------------

    def fields(self, fields: tuple[FieldNode, ...], index: int, st: State, finish: Continue) -> None:
        """Emit ``fields[index:]``, then ``finish``; a field that forks continues in each branch itself."""
        for i in range(index, len(fields)):
            f = fields[i]

            def cont(branch: State, i: int = i) -> None:
                self.fields(fields, i + 1, branch, finish)

            if self.node(f.name, f.node, st, cont, fields[i + 1:]):
                return
        finish(st)

    def node(self, name: str, n: walker.Node, st: State, cont: Continue,
             later: tuple[FieldNode, ...]) -> bool:
        """Emit one field's node; True when it forked (and so already emitted the rest via ``cont``).

        ``later`` are the fields after it in its record (whose conditions may read it).
        """
        out = self.out
        if isinstance(n, TagByte):  # checked by the dispatch on the first byte; the state starts after it
            return False
        if isinstance(n, (Int, DerivedCount)):
            var = self.var(name)
            st.run.append((fixed_format(n), var, []))
            return self.known(st, name, var, Known(some=True))
        if isinstance(n, Zero):
            var = self.var(name)
            st.run.append((n.int.format, var, [f"if {var}: raise _Decline"]))
            return self.known(st, name, "0", Known(value=0))
        if isinstance(n, CharOf):
            return self.char(name, n, st, cont, later)
        if isinstance(n, Text):
            var = self.var(name)
            self.flush(st)
            end = f"{var}_e"
            out(f"{end} = data.index(0, {st.pos()})")
            out(f"{var} = data[{st.pos()}:{end}].decode(encoding)")
            st.base, st.off = end, 1
            return self.known(st, name, var, Known(some=True))
        if isinstance(n, LengthPrefixed):
            var = self.var(name)
            st.run.append((n.length.format, f"{var}_n", []))
            self.flush(st)
            # No bounds check here: a length past the end leaves the position past the end, where the next
            # read fails (IndexError, struct.error, ValueError) or the final check does (see State).
            end = f"{var}_q"
            out(f"{end} = {st.pos()} + {var}_n")
            out(f"{var} = data[{st.pos()}:{end}]")
            st.base, st.off, st.unchecked = end, 0, True
            return self.known(st, name, var, Known(some=True))
        if isinstance(n, Rest):
            var = self.var(name)
            self.flush(st)
            if st.unchecked:
                out(f"if {st.pos()} > n: raise _Decline")
            out(f"{var} = data[{st.pos()}:]")
            st.base, st.off, st.at_end = "n", 0, True
            return self.known(st, name, var, Known(some=True))
        if isinstance(n, When):
            decided = static(n.condition, self.ctx.params, st.known)
            if decided is True:
                return self.node(name, n.node, st, cont, later)
            if decided is False:
                return self.known(st, name, "None", Known(value=None))
            self.flush(st)
            return self.fork(f"{runtime(n.condition, st.values)}", name, n.node, st, cont, later, 0)
        if isinstance(n, IfBytesRemain):
            self.flush(st)
            return self.fork(f"{st.pos()} < n", name, n.node, st, cont, later, 0)
        if isinstance(n, MarkedBy):
            if n.optional:
                self.flush(st)
                return self.fork(f"data[{st.pos()}] == {ord(n.marker)}", name, n.node, st, cont, later, 1)
            marker = f"v_{name}_m"
            st.run.append(("B", marker, [f"if {marker} != {ord(n.marker)}: raise _Decline"]))
            return self.node(name, n.node, st, cont, later)
        if isinstance(n, CountedArray):
            var = self.var(name)
            st.run.append((n.count.format, f"{var}_c", []))
            self.flush(st)
            return self.array(name, var, n.item, f"{var}_c", st)
        if isinstance(n, ArrayOf):
            self.flush(st)
            return self.array(name, self.var(name), n.item, st.values[n.count_field], st)
        raise walker.UnknownConstruct(f"the parse generator does not know {n!r}")

    def known(self, st: State, name: str, expr: str, known: Known) -> bool:
        st.values[name] = expr
        st.known[name] = known
        return False

    def fork(self, test: str, name: str, inner: walker.Node, st: State, cont: Continue,
             later: tuple[FieldNode, ...], skip: int) -> bool:
        """``if test``: the field is present (after ``skip`` marker bytes); else it is ``None``.  The rest of
        the record is emitted in both branches."""
        out = self.out
        out(f"if {test}:")
        out.indent()
        present = st.copy()
        present.off += skip
        if not self.node(name, inner, present, cont, later):
            cont(present)
        out.dedent()
        out("else:")
        out.indent()
        absent = st.copy()
        self.known(absent, name, "None", Known(value=None))
        cont(absent)
        out.dedent()
        return True

    def char(self, name: str, n: CharOf, st: State, cont: Continue, later: tuple[FieldNode, ...]) -> bool:
        var = self.var(name)
        if name not in referenced(later):
            st.run.append(("B", f"{var}_b", [f"{var} = {self.ns.char_table(n.choices)}[{var}_b]",
                                             f"if {var} is None: raise _Decline"]))
            return self.known(st, name, var, Known(some=True))
        st.run.append(("B", var, []))
        self.flush(st)
        for i, choice in enumerate(branch_order(name, n.choices, later, self.ctx)):
            self.out(f"{'if' if i == 0 else 'elif'} {var} == {ord(choice)}:")
            self.out.indent()
            branch = st.copy()
            self.known(branch, name, repr(choice), Known(value=choice))
            cont(branch)
            self.out.dedent()
        self.out("else:")
        self.out("    raise _Decline")
        return True

    # -- arrays and records ------------------------------------------------------------------------------

    def array(self, name: str, var: str, item: walker.Node, count: str, st: State) -> bool:
        out = self.out
        if isinstance(item, Int):
            end = f"{var}_q"
            out(f"{end} = {st.pos()} + {count} * {item.size}")
            out(f"if {end} > n: raise _Decline")
            out(f"{var} = list(_unpack_from('>%d{item.format}' % {count}, data, {st.pos()}))")
            st.base, st.off = end, 0
            return self.known(st, name, var, Known(some=True))
        if not isinstance(item, Record):
            raise walker.UnknownConstruct(f"the parse generator cannot repeat {item!r}")
        self.materialize(st)
        least = walker.min_size(item)
        if least:  # a count that cannot fit in the bytes left is a lie: refuse before looping
            out(f"if {count}{f' * {least}' if least > 1 else ''} > n - p: raise _Decline")
        # filled in by index: cheaper than appending
        out(f"{var} = [None] * {count}")
        out(f"for {var}_i in range({count}):")
        out.indent()
        self.fields(item.fields, 0, State("p", 0), lambda s: self.finish_item(item, s, f"{var}[{var}_i]"))
        out.dedent()
        st.unchecked = True
        return self.known(st, name, var, Known(some=True))

    def finish_item(self, item: Record, st: State, target: str) -> None:
        self.materialize(st)
        cls = record_class(item)
        make_object(self.out, self.ns, cls, python_values(self.out, self.ns, value_fields(item), st.values), "o")
        self.out(f"{target} = o")

    def finish_message(self, st: State) -> None:
        self.flush(st)
        if not st.at_end:
            self.out(f"if {st.pos()} != n: raise _Decline")
        cls = CLASSES[id(self.layout.spec)]
        make_object(self.out, self.ns, cls, python_values(self.out, self.ns, value_fields(self.layout.record),
                                                          st.values), "o")
        self.out("return o")

