"""Generate one C build function per message, for every context, from the walker's layout model.

Strategy: the function reads the message's slots (borrowed references), then walks the layout's fields in
wire order, appending to a growing buffer.  Each value gets the guard of the generated Python code: its
exact class (``int``, ``LSN`` or ``Timestamp`` for integers, ``str``, ``bytes``, ``list`` or ``tuple``, the
record class), its range for the field's width, UTF-8 without NUL for a String, ``None`` for what the
context leaves out.  Any failed guard returns -1, "not the common case", and the caller hands the message
to the generated Python code, which builds it or raises the exact error::

    static int b_Insert(PyObject *m, int pv, int ins, Buf *b) {
        PyObject *a_xid = SLOT(m, O_Insert_xid);
        ...
        if (put_byte(b, 73)) return -1;
        ...
        return 0;
    }
"""

from __future__ import annotations

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
from .c_common import C_INT, CGen, Scope, condition, int_literal
from .common import CLASSES, record_class, value_fields

__all__ = ["CBuildGen"]


class CBuildGen(CGen):
    """The C build function of one message (see the module docstring)."""

    def function(self) -> str:
        spec = self.layout.spec
        out = self.out
        cls = CLASSES[id(spec)]
        tag = self.layout.fields[0].node
        assert isinstance(tag, TagByte)
        out(f"static int b_{spec.name}(PyObject *m, int pv, int ins, Buf *b)")
        out("{")
        out.indent()
        out("(void)pv; (void)ins;")
        if tag.min_proto is not None:
            out(f"if (pv < {tag.min_proto}) return -1;")
        self.record(self.layout.record, cls, "m")
        out("return 0;")
        out.dedent()
        out("}")
        return out.text()

    def record(self, record: Record, cls: type, obj: str) -> None:
        values: dict[str, str] = {}
        for f in value_fields(record):
            var = self.names("a")
            values[f.name] = var
            self.out(f"PyObject *{var} = SLOT({obj}, {self.use(cls, f.name)});")
            self.out(f"if ({var} == NULL) return -1;")
        scope = Scope()
        for f in record.fields:
            self.field(f, f.node, values, scope)

    def put_int(self, i: Int, value: str) -> None:
        """Check the Python int ``value`` (exact class, range) and append it."""
        ctype, high, low = C_INT[i.format]
        var = self.names("i")
        self.out(f"{ctype} {var};")
        if ctype == "uint64_t":
            self.out(f"if (get_u64({value}, {int_literal(high)}, &{var})) return -1;")
        else:
            self.out(f"if (get_i64({value}, {int_literal(low, True)}, {int_literal(high, True)}, &{var})) return -1;")
        self.out(f"if (put{i.size}(b, (uint64_t){var})) return -1;")

    def put_count(self, i: Int, count: str) -> None:
        _, high, _ = C_INT[i.format]
        self.out(f"if ((uint64_t){count} > {int_literal(high)}) return -1;")
        self.out(f"if (put{i.size}(b, (uint64_t){count})) return -1;")

    def field(self, f: FieldNode, n: walker.Node, values: dict[str, str], scope: Scope) -> None:
        out, name = self.out, f.name
        v = values.get(name, "Py_None")
        if isinstance(n, TagByte):
            out(f"if (put1(b, {ord(n.tag)})) return -1;")
            return
        if isinstance(n, Int):
            self.put_int(n, v)
            scope.present[name] = "1"
            return
        if isinstance(n, Zero):
            out(f"if ({v} != Py_None && {v} != ZERO) return -1;")
            out(f"if (put{n.int.size}(b, 0)) return -1;")
            scope.present[name] = "1"
            return
        if isinstance(n, DerivedCount):
            of = values[n.of]
            out(f"if (!PyList_CheckExact({of}) && !PyTuple_CheckExact({of})) return -1;")
            self.put_count(n.int, f"Py_SIZE({of})")
            return
        if isinstance(n, CharOf):
            var = self.names("c")
            out(f"if (!PyUnicode_CheckExact({v}) || PyUnicode_GET_LENGTH({v}) != 1) return -1;")
            out(f"Py_UCS4 {var} = PyUnicode_READ_CHAR({v}, 0);")
            tests = " && ".join(f"{var} != {ord(c)}" for c in n.choices)
            out(f"if ({tests}) return -1;")
            out(f"if (put1(b, {var})) return -1;")
            scope.chars[name] = var
            scope.present[name] = "1"
            return
        if isinstance(n, Text):
            s, k = self.names("s"), self.names("k")
            out(f"if (!PyUnicode_CheckExact({v})) return -1;")
            out(f"Py_ssize_t {k};")
            out(f"const char *{s} = PyUnicode_AsUTF8AndSize({v}, &{k});")
            out(f"if ({s} == NULL || memchr({s}, 0, (size_t){k}) != NULL) return -1;")
            out(f"if (put_bytes(b, {s}, {k}) || put1(b, 0)) return -1;")
            scope.present[name] = "1"
            return
        if isinstance(n, (LengthPrefixed, Rest)):
            out(f"if (!PyBytes_CheckExact({v})) return -1;")
            if isinstance(n, LengthPrefixed):
                self.put_count(n.length, f"PyBytes_GET_SIZE({v})")
            out(f"if (put_bytes(b, PyBytes_AS_STRING({v}), PyBytes_GET_SIZE({v}))) return -1;")
            scope.present[name] = "1"
            return
        if isinstance(n, When):
            var = self.names("h")
            present = self.names("h")
            out(f"int {var} = {condition(n.condition, scope)}, {present} = 0;")
            out(f"if ({var}) {{")
            out.indent()
            self.field(f, n.node, values, scope)
            out(f"{present} = {scope.present.get(name, '1')};")
            out.dedent()
            out(f"}} else if ({v} != Py_None) return -1;")
            out(f"(void){present};")
            scope.present[name] = present
            return
        if isinstance(n, IfBytesRemain) or (isinstance(n, MarkedBy) and n.optional):
            var = self.names("h")
            out(f"int {var} = {v} != Py_None;")
            out(f"if ({var}) {{")
            out.indent()
            if isinstance(n, MarkedBy):
                out(f"if (put1(b, {ord(n.marker)})) return -1;")
            self.field(f, n.node, values, scope)
            out.dedent()
            out("}")
            scope.present[name] = var
            return
        if isinstance(n, MarkedBy):
            out(f"if (put1(b, {ord(n.marker)})) return -1;")
            self.field(f, n.node, values, scope)
            return
        if isinstance(n, (CountedArray, ArrayOf)):
            out(f"if (!PyList_CheckExact({v}) && !PyTuple_CheckExact({v})) return -1;")
            if isinstance(n, CountedArray):
                self.put_count(n.count, f"Py_SIZE({v})")
            self.array(n.item, v)
            scope.present[name] = "1"
            return
        raise walker.UnknownConstruct(f"the C build generator does not know {n!r}")

    def array(self, item: walker.Node, seq: str) -> None:
        out = self.out
        items, idx = self.names("q"), self.names("x")
        out(f"PyObject **{items} = PySequence_Fast_ITEMS({seq});")
        out(f"for (Py_ssize_t {idx} = 0; {idx} < Py_SIZE({seq}); {idx}++) {{")
        out.indent()
        if isinstance(item, Int):
            self.put_int(item, f"{items}[{idx}]")
        elif isinstance(item, Record):
            rcls = record_class(item)
            rec = self.names("r")
            out(f"PyObject *{rec} = {items}[{idx}];")
            out(f"if (Py_TYPE({rec}) != {self.use(rcls)}) return -1;")
            self.record(item, rcls, rec)
        else:
            raise walker.UnknownConstruct(f"the C build generator cannot repeat {item!r}")
        out.dedent()
        out("}")
