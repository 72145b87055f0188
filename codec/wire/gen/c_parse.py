"""Generate one C parse function per message, for every context, from the walker's layout model.

Strategy: the function reads the input ``d[0:n]`` forwards with a position ``p``; before every read it checks
that the bytes are there (``NEED``), and before making a list it checks that the count cannot exceed what
the bytes left could hold, so nothing is allocated beyond the input.  The message object is made first
and every value goes into its slot as soon as it is made (a list goes in before its items), so on any
failure one ``Py_DECREF`` of the message frees everything.  The function returns a new message, or
``NULL`` with no guarantee about the error state: "not the common case", and the caller hands the input
to the generated Python code, which returns the exact result or raises the exact error.  It accepts only
what that code accepts, and makes the same objects (the same classes, values and the same one-character
strings for the kinds)::

    static PyObject *p_Insert(const unsigned char *d, Py_ssize_t n, int pv, int ins) {
        Py_ssize_t p = 1;
        PyObject *m = new_object(K_TupleInsert);
        ...
        NEED(4); SET(m, O_Insert_relation_id, PyLong_FromUnsignedLongLong(rd4(d + p))); p += 4;
        ...
        if (p != n) goto fail;
        return m;
    fail:
        Py_DECREF(m);
        return NULL;
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
from .c_common import CGen, Scope, c_ident, condition, read_int
from .common import CLASSES, record_class

__all__ = ["CParseGen"]


def make_value(kind: str, cvar: str, n: Int) -> str:
    """The C expression of the Python value of an integer field (as the message classes convert it)."""
    if kind == "lsn":
        return f"make_lsn({cvar})"
    if kind == "timestamp":
        return f"make_timestamp((int64_t){cvar})"
    return f"PyLong_FromLongLong({cvar})" if n.signed else f"PyLong_FromUnsignedLongLong({cvar})"


class CParseGen(CGen):
    """The C parse function of one message (see the module docstring)."""

    def function(self) -> str:
        spec = self.layout.spec
        out = self.out
        cls = CLASSES[id(spec)]
        tag = self.layout.fields[0].node
        assert isinstance(tag, TagByte)
        out(f"static PyObject *p_{c_ident(spec.name)}(const unsigned char *d, Py_ssize_t n, int pv, int ins)")
        out("{")
        out.indent()
        out("Py_ssize_t p = 1;")
        out("(void)pv; (void)ins;")
        if tag.min_proto is not None:
            out(f"if (pv < {tag.min_proto}) return NULL;")
        out(f"PyObject *m = new_object({self.use(cls)});")
        out("if (m == NULL) return NULL;")
        at_end = self.record(self.layout.record, cls, "m")
        if not at_end:
            out("if (p != n) goto fail;")
        out("return m;")
        out.dedent()
        out("fail:")
        out("    Py_DECREF(m);")
        out("    return NULL;")
        out("}")
        return out.text()

    def record(self, record: Record, cls: type, obj: str) -> bool:
        """Emit the fields of ``record`` into the object ``obj`` of class ``cls``; whether the input is
        used up (a Rest field came last)."""
        scope = Scope()
        at_end = False
        for f in record.fields:
            at_end = self.field(f, f.node, cls, obj, scope)
        return at_end

    def set(self, f: FieldNode, cls: type, obj: str, value: str) -> None:
        if f.meta.value in ("tag", "count"):
            return
        self.out(f"SET({obj}, {self.use(cls, f.name)}, {value});")

    # -- where the values go: into the message object's slots (the scan generator stores them elsewhere)

    def put_int(self, f: FieldNode, cls: type, obj: str, var: str, i: Int) -> None:
        """Store the integer field ``f`` read into the C variable ``var``."""
        self.set(f, cls, obj, make_value(f.meta.value, var, i))

    def put_char(self, f: FieldNode, cls: type, obj: str, var: str) -> None:
        """Store the one-character field ``f`` read into ``var``."""
        self.set(f, cls, obj, f"PyUnicode_FromOrdinal({var})")

    def put_text(self, f: FieldNode, cls: type, obj: str, end: str) -> None:
        """Store the NUL-terminated text field ``f`` at ``p`` (its NUL at ``end``)."""
        self.set(f, cls, obj, f"PyUnicode_DecodeUTF8((const char *)d + p, {end} - (d + p), NULL)")

    def put_bytes(self, f: FieldNode, cls: type, obj: str, length: str) -> None:
        """Store the ``length`` bytes at ``p`` of the field ``f``."""
        self.set(f, cls, obj, f"PyBytes_FromStringAndSize((const char *)d + p, {length})")

    def put_none(self, f: FieldNode, cls: type, obj: str) -> None:
        """Store the absence of the optional field ``f``."""
        self.set(f, cls, obj, "Py_NewRef(Py_None)")

    def read_int(self, i: Int, prefix: str) -> str:
        """Emit the bounds-checked read of the integer ``i`` at ``p`` into a new C variable; its name."""
        var = self.names(prefix)
        self.out(f"NEED({i.size});")
        self.out(f"{'int64_t' if i.signed else 'uint64_t'} {var} = {read_int(i, 'd + p')};")
        self.out(f"p += {i.size};")
        return var

    def field(self, f: FieldNode, n: walker.Node, cls: type, obj: str, scope: Scope) -> bool:
        """Emit one node of the field ``f``; whether it reads to the end of the input."""
        out, name = self.out, f.name
        if isinstance(n, TagByte):
            return False
        if isinstance(n, (Int, Zero, DerivedCount)):
            i = n if isinstance(n, Int) else n.int
            var = self.read_int(i, "i")
            scope.ints[name] = var
            if i.signed:
                scope.signed.add(name)
            scope.present[name] = "1"
            if isinstance(n, Zero):
                out(f"if ({var} != 0) goto fail;")
            self.put_int(f, cls, obj, var, i)
            return False
        if isinstance(n, CharOf):
            var = self.names("c")
            out("NEED(1);")
            out(f"int {var} = d[p++];")
            tests = " && ".join(f"{var} != {ord(c)}" for c in n.choices)
            out(f"if ({tests}) goto fail;")
            scope.chars[name] = var
            scope.present[name] = "1"
            self.put_char(f, cls, obj, var)
            return False
        if isinstance(n, Text):
            var = self.names("z")
            out(f"const unsigned char *{var} = p < n ? memchr(d + p, 0, (size_t)(n - p)) : NULL;")
            out(f"if ({var} == NULL) goto fail;")
            self.put_text(f, cls, obj, var)
            out(f"p = ({var} - d) + 1;")
            scope.present[name] = "1"
            return False
        if isinstance(n, LengthPrefixed):
            i = n.length
            var = self.read_int(i, "n")
            if i.signed:
                out(f"if ({var} < 0) goto fail;")
            out(f"if ({var} > (uint64_t)(n - p)) goto fail;")
            self.put_bytes(f, cls, obj, f"(Py_ssize_t){var}")
            out(f"p += (Py_ssize_t){var};")
            scope.present[name] = "1"
            return False
        if isinstance(n, Rest):
            self.put_bytes(f, cls, obj, "n - p")
            out("p = n;")
            scope.present[name] = "1"
            return True
        if isinstance(n, (When, IfBytesRemain)) or (isinstance(n, MarkedBy) and n.optional):
            var = self.names("h")
            if isinstance(n, When):
                out(f"int {var} = {condition(n.condition, scope)};")
            elif isinstance(n, IfBytesRemain):
                out(f"int {var} = p < n;")
            else:
                out("NEED(1);")  # the generated Python reads the marker's place: it must be there
                out(f"int {var} = d[p] == {ord(n.marker)};")
            present = self.names("h")
            out(f"int {present} = 0;")
            out(f"if ({var}) {{")
            out.indent()
            if isinstance(n, MarkedBy):
                out("p += 1;")
            at_end = self.field(f, n.node, cls, obj, scope)
            out(f"{present} = {scope.present.get(name, '1')};")
            out.dedent()
            out("} else {")
            out.indent()
            self.put_none(f, cls, obj)
            out.dedent()
            out("}")
            out(f"(void){present};")
            scope.present[name] = present
            if at_end:  # a Rest under a condition: the end is reached on one branch only
                raise walker.UnknownConstruct(f"the C parse generator cannot read a conditional rest ({name})")
            return False
        if isinstance(n, MarkedBy):
            out("NEED(1);")
            out(f"if (d[p] != {ord(n.marker)}) goto fail;")
            out("p += 1;")
            return self.field(f, n.node, cls, obj, scope)
        if isinstance(n, CountedArray):
            i = n.count
            var = self.read_int(i, "k")
            if i.signed:
                out(f"if ({var} < 0) goto fail;")
            self.array(f, n.item, var, cls, obj)
            scope.present[name] = "1"
            return False
        if isinstance(n, ArrayOf):
            var = scope.ints[n.count_field]
            if n.count_field in scope.signed:
                self.out(f"if ({var} < 0) goto fail;")
            self.array(f, n.item, var, cls, obj)
            scope.present[name] = "1"
            return False
        raise walker.UnknownConstruct(f"the C parse generator does not know {n!r}")

    def array(self, f: FieldNode, item: walker.Node, count: str, cls: type, obj: str) -> None:
        out = self.out
        least = walker.min_size(item)
        # a count that cannot fit in the bytes left is a lie: refuse it before allocating anything
        out(f"if ((uint64_t){count} > (uint64_t)(n - p){f' / {least}' if least > 1 else ''}) goto fail;")
        lst = self.names("l")
        out(f"PyObject *{lst} = PyList_New((Py_ssize_t){count});")
        out(f"if ({lst} == NULL) goto fail;")
        self.set(f, cls, obj, lst)
        idx = self.names("x")
        out(f"for (Py_ssize_t {idx} = 0; {idx} < (Py_ssize_t){count}; {idx}++) {{")
        out.indent()
        if isinstance(item, Int):
            var = self.read_int(item, "i")
            value = self.names("v")
            out(f"PyObject *{value} = {make_value('', var, item)};")
            out(f"if ({value} == NULL) goto fail;")
            out(f"PyList_SET_ITEM({lst}, {idx}, {value});")
        elif isinstance(item, Record):
            rcls = record_class(item)
            rec = self.names("r")
            out(f"PyObject *{rec} = new_object({self.use(rcls)});")
            out(f"if ({rec} == NULL) goto fail;")
            out(f"PyList_SET_ITEM({lst}, {idx}, {rec});")
            if self.record(item, rcls, rec):
                raise walker.UnknownConstruct("the C parse generator cannot repeat a record ending in a rest")
        else:
            raise walker.UnknownConstruct(f"the C parse generator cannot repeat {item!r}")
        out.dedent()
        out("}")
