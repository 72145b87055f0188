"""Generate one fast build function for one message in one context.

Strategy: read every attribute of the message once, then walk the layout's fields in wire order.  Each
value gets the cheapest guard that proves the reference would accept it (its exact class; ``struct``
refuses out-of-range integers by itself), and fixed-size fields gather into runs packed with one
precomputed ``struct`` format (a String's NUL terminator is the format's pad byte); variable parts are
appended as they are.  Optional parts and the fields later conditions read fork the rest of the record,
as in :mod:`replwire.codec.wire.gen.parse`.  Anything the guards do not prove valid raises ``_Decline``,
and the message goes to :mod:`replwire.codec.wire.interpreter`, which builds it or raises the reference's
:class:`~replwire.codec.errors.EncodeError`::

    def build_Insert_v1(message, proto_version, in_stream, encoding):
        try:
            v_xid = message.xid
            ...
            if v_relation_id.__class__ not in _INTS: raise _Decline
            ...
            return b"".join(parts)
        except _DECLINE_BUILD:
            return _build_slow(message, proto_version, in_stream, encoding)
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from ... import walker
from ...scalars import LSN, Timestamp
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
    Ctx,
    Known,
    Lines,
    Namespace,
    branch_order,
    context_args,
    fixed_format,
    gate_open,
    record_class,
    referenced,
    runtime,
    static,
    value_fields,
)

__all__ = ["BuildGen"]


@dataclass
class State:
    """The pending run of fixed fields (format, argument expression or ``None`` for a pad byte), the pieces
    of the output so far, and what is known about the fields so far.

    ``pieces`` are expressions joined at the end (``a + b``), until a loop needs a ``parts`` list that
    grows at run time; then ``pieces`` is ``None`` and pieces go to ``parts.append(...)``, called as a
    method: CPython specializes that call for lists, and not a call through a bound ``append`` kept in a
    variable.
    """

    values: dict[str, str]  # field -> local variable holding its value
    run: list[tuple[str, str | None]] = field(default_factory=list)
    pieces: list[str] | None = field(default_factory=list)
    known: dict[str, Known] = field(default_factory=dict)

    def copy(self) -> State:
        pieces = None if self.pieces is None else list(self.pieces)
        return State(dict(self.values), list(self.run), pieces, dict(self.known))


Continue = Callable[[State], None]

#: Lengths below this get their packed header from a table instead of a struct.pack call.
HEADERS = 512


class BuildGen:
    """The build function of one layout in one context (see the module docstring)."""

    def __init__(self, layout: walker.Layout, ctx: Ctx, ns: Namespace, spec_name: str) -> None:
        self.layout = layout
        self.ctx = ctx
        self.ns = ns
        self.spec_name = spec_name
        self.out = Lines()
        self.loops = 0

    def function(self, name: str) -> str:
        out = self.out
        out(f"def {name}(message, {', '.join(ARGS[1:])}):")
        out.indent()
        out("try:")
        out.indent()
        if not gate_open(self.layout, self.ctx):
            out("raise _Decline")
        else:
            values = {}
            for f in value_fields(self.layout.record):
                values[f.name] = f"v_{f.name}"
                out(f"v_{f.name} = message.{f.name}")
            self.fields(self.layout.fields, 0, State(values), self.finish_message)
        out.dedent()
        out("except _DECLINE_BUILD:")
        out(f"    return _build_slow(message, {context_args(self.ctx)})")
        return out.text()

    # -- runs --------------------------------------------------------------------------------------------

    def flush(self, st: State) -> None:
        """Pack the pending run into one piece of the output."""
        if not st.run:
            return
        fmt = "".join(f for f, _ in st.run)
        args = [a for _, a in st.run if a is not None]
        st.run = []
        variable = [a for a in args if not a.isdigit()]
        if not variable:
            expr = self.ns.const(struct.pack(">" + fmt, *map(int, args)))
        elif len(variable) == 1 and variable[0].startswith("len(") and struct.calcsize(">" + fmt) <= 8:
            # constants and one small length (a tuple column's kind and size): a precomputed header
            table = self.header_table(fmt, args)
            size = f"{variable[0][4:-1]}_len"
            self.out(f"{size} = {variable[0]}")
            packed = ", ".join(size if a == variable[0] else a for a in args)
            expr = f"({table}[{size}] if {size} < {HEADERS} else {self.ns.packer(fmt)}({packed}))"
        else:
            expr = f"{self.ns.packer(fmt)}({', '.join(args)})"
        self.piece(st, expr)

    def piece(self, st: State, expr: str) -> None:
        if st.pieces is None:
            self.out(f"parts.append({expr})")
        else:
            st.pieces.append(expr)

    def header_table(self, fmt: str, args: list[str]) -> str:
        """The packed run for every length below :data:`HEADERS` (the other arguments are constants)."""
        packed = ", ".join(a if a.isdigit() else "size" for a in args)
        source = f"tuple(_struct.pack({'>' + fmt!r}, {packed}) for size in range({HEADERS}))"
        return self.ns.add(("headers", fmt, tuple(a if a.isdigit() else "*" for a in args)), "_H", source)

    def start_parts(self, st: State) -> None:
        """From here on the output grows at run time (a loop follows): a ``parts`` list."""
        self.flush(st)
        if st.pieces is not None:
            self.out(f"parts = [{', '.join(st.pieces)}]")
            st.pieces = None

    def append(self, st: State, expr: str) -> None:
        self.flush(st)
        self.piece(st, expr)

    def finish_message(self, st: State) -> None:
        self.flush(st)
        if st.pieces is None:
            self.out("return b''.join(parts)")
        elif len(st.pieces) <= 3:
            self.out(f"return {' + '.join(st.pieces)}")
        else:
            self.out(f"return b''.join(({', '.join(st.pieces)}))")

    # -- fields ------------------------------------------------------------------------------------------

    def fields(self, fields: tuple[FieldNode, ...], index: int, st: State, finish: Continue) -> None:
        for i in range(index, len(fields)):
            f = fields[i]

            def cont(branch: State, i: int = i) -> None:
                self.fields(fields, i + 1, branch, finish)

            if self.node(f.name, f.node, st, cont, fields[i + 1:], f.meta.value):
                return
        finish(st)

    def guard(self, test: str) -> None:
        self.out(f"if {test}: raise _Decline")

    def node(self, name: str, n: walker.Node, st: State, cont: Continue, later: tuple[FieldNode, ...],
             kind: str) -> bool:
        """Emit one field's node; True when it forked (and so already emitted the rest via ``cont``).

        ``later`` are the fields after it in its record; ``kind`` is its ``FieldMeta.value``.
        """
        v = st.values.get(name, "None")
        if isinstance(n, TagByte):
            st.run.append(("B", str(ord(n.tag))))
            return False
        if isinstance(n, Int):  # the usual class first; bool and other int-likes go to the interpreter
            usual = {"lsn": self.ns.cls(LSN), "timestamp": self.ns.cls(Timestamp)}.get(kind, "int")
            self.guard(f"{v}.__class__ is not {usual} and {v}.__class__ not in _INTS")
            st.run.append((n.format, v))
            return self.known(st, name, Known(some=True))
        if isinstance(n, Zero):
            self.guard(f"{v} is not None and {v} is not _ZERO")
            st.run.append((n.int.format, "0"))
            return self.known(st, name, Known(value=0))
        if isinstance(n, DerivedCount):
            of = st.values[n.of]
            self.guard(f"{of}.__class__ is not list and {of}.__class__ is not tuple")
            st.run.append((fixed_format(n), f"len({of})"))
            return False
        if isinstance(n, CharOf):
            return self.char(name, n, v, st, cont, later)
        if isinstance(n, Text):
            self.guard(f"{v}.__class__ is not str")
            self.out(f"{v}_r = {v}.encode(encoding)")
            self.guard(f"0 in {v}_r")
            self.append(st, f"{v}_r")
            st.run.append(("x", None))  # the NUL terminator: a pad byte of the next run
            return self.known(st, name, Known(some=True))
        if isinstance(n, LengthPrefixed):
            self.guard(f"{v}.__class__ is not bytes")
            st.run.append((n.length.format, f"len({v})"))
            self.append(st, v)
            return self.known(st, name, Known(some=True))
        if isinstance(n, Rest):
            self.guard(f"{v}.__class__ is not bytes")
            self.append(st, v)
            return self.known(st, name, Known(some=True))
        if isinstance(n, When):
            decided = static(n.condition, self.ctx.params, st.known)
            if decided is True:
                return self.node(name, n.node, st, cont, later, kind)
            if decided is False:
                self.guard(f"{v} is not None")
                return self.known(st, name, Known(value=None))
            return self.fork(runtime(n.condition, st.values), name, n.node, st, cont, later, kind, True)
        if isinstance(n, IfBytesRemain) or (isinstance(n, MarkedBy) and n.optional):
            marker = n.marker if isinstance(n, MarkedBy) else None
            return self.fork(f"{v} is not None", name, n.node, st, cont, later, kind, False, marker)
        if isinstance(n, MarkedBy):
            st.run.append(("B", str(ord(n.marker))))
            return self.node(name, n.node, st, cont, later, kind)
        if isinstance(n, CountedArray):
            self.guard(f"{v}.__class__ is not list and {v}.__class__ is not tuple")
            st.run.append((n.count.format, f"len({v})"))
            return self.array(name, n.item, v, st)
        if isinstance(n, ArrayOf):  # the count was packed by its DerivedCount field, which checked the list
            return self.array(name, n.item, v, st)
        raise walker.UnknownConstruct(f"the build generator does not know {n!r}")

    def known(self, st: State, name: str, known: Known) -> bool:
        st.known[name] = known
        return False

    def fork(self, test: str, name: str, inner: walker.Node, st: State, cont: Continue,
             later: tuple[FieldNode, ...], kind: str, absent_check: bool, marker: str | None = None) -> bool:
        """``if test``: build the field (``inner``, after its one-byte ``marker`` if it has one); else it is
        absent (and must be ``None`` when ``absent_check``).  The rest is emitted in both branches."""
        out = self.out
        out(f"if {test}:")
        out.indent()
        present = st.copy()
        if marker is not None:
            present.run.append(("B", str(ord(marker))))
        if not self.node(name, inner, present, cont, later, kind):
            cont(present)
        out.dedent()
        out("else:")
        out.indent()
        absent = st.copy()
        if absent_check:
            self.guard(f"{st.values.get(name, 'None')} is not None")
        self.known(absent, name, Known(value=None))
        cont(absent)
        out.dedent()
        return True

    def char(self, name: str, n: CharOf, v: str, st: State, cont: Continue,
             later: tuple[FieldNode, ...]) -> bool:
        if name not in referenced(later):
            table = self.ns.char_bytes(n.choices)
            self.out(f"{v}_b = {table}.get({v}) if {v}.__class__ is str else None")
            self.guard(f"{v}_b is None")
            st.run.append(("B", f"{v}_b"))
            return self.known(st, name, Known(some=True))
        # Compared by identity with the interned characters: string literals are interned, so the kinds of
        # TupleColumn.text() and of parsed columns match at the first test.  Any other str equal to one
        # of them is interned and tested again; anything else falls through to _Decline.
        order = branch_order(name, n.choices, later, self.ctx)
        consts = {c: self.ns.add(("interned", c), "_I", f"_sys.intern({c!r})") for c in order}
        table = self.ns.add(("intern-table", n.choices), "_N",
                            f"{{_sys.intern(c): _sys.intern(c) for c in {n.choices!r}}}")
        self.dispatch(name, v, order, consts, st, cont)
        self.out("else:")
        self.out.indent()
        self.out(f"{v} = {table}.get({v}) if {v}.__class__ is str else None")
        self.dispatch(name, v, order, consts, st, cont)
        self.out("else:")
        self.out("    raise _Decline")
        self.out.dedent()
        return True

    def dispatch(self, name: str, v: str, order: list[str], consts: dict[str, str], st: State,
                 cont: Continue) -> None:
        for i, choice in enumerate(order):
            self.out(f"{'if' if i == 0 else 'elif'} {v} is {consts[choice]}:")
            self.out.indent()
            branch = st.copy()
            branch.run.append(("B", str(ord(choice))))
            self.known(branch, name, Known(value=choice))
            cont(branch)
            self.out.dedent()

    # -- arrays ------------------------------------------------------------------------------------------

    def array(self, name: str, item: walker.Node, v: str, st: State) -> bool:
        out = self.out
        if isinstance(item, Int):
            out(f"for x in {v}:")
            out("    if x.__class__ is not int and x.__class__ not in _INTS: raise _Decline")
            self.append(st, f"_pack('>%d{item.format}' % len({v}), *{v})")
            return self.known(st, name, Known(some=True))
        if not isinstance(item, Record):
            raise walker.UnknownConstruct(f"the build generator cannot repeat {item!r}")
        self.start_parts(st)
        self.loops += 1
        c = f"c{self.loops}"
        cls = record_class(item)
        out(f"for {c} in {v}:")
        out.indent()
        self.guard(f"{c}.__class__ is not {self.ns.cls(cls)}")
        values = {}
        for f in value_fields(item):
            values[f.name] = f"{c}_{f.name}"
            out(f"{c}_{f.name} = {c}.{f.name}")
        self.fields(item.fields, 0, State(values, pieces=None), self.flush)
        out.dedent()
        return self.known(st, name, Known(some=True))
