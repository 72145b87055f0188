"""Generate C scan functions: a message's layout checked exactly as its C parse function checks it, with its
fields' places noted in a C array instead of made into Python objects.

Strategy: the same walk as :mod:`replwire.codec.wire.gen.c_parse` (it is its subclass: only where the values
go differs).  A scan function fills one :c:type:`Field` per field of the message (``N_<Class>`` of them),
indexed by the ``F_<Class>_<field>`` constants: ``v`` an integer's value, a character's byte or an array's
count; ``at`` and ``len`` where a byte string (or an array's first item) is in the input; ``present``
whether an optional field is there.  ``TAG_<Class>`` is a message's tag byte.  An array of records is
checked item by item with the record's own scan function (``r_<Record>``), which the reader of the array
calls again to walk its items; so the layout of every message and record a scan reads comes from the
declarations, and no C outside the generated code knows an offset.  A scan function returns 1 for exactly
the input its message's parse function accepts, else 0, and allocates nothing::

    static int s_Insert(const unsigned char *d, Py_ssize_t n, int pv, int ins, Field *F)
    static Py_ssize_t r_TupleColumn(const unsigned char *d, Py_ssize_t n, Py_ssize_t p, Field *F)

It serves the compiled row path (the hand-written C of :mod:`replwire.codec.wire.gen.c_module` that writes
JSON lines), which needs only the messages of :data:`SCANNED`.
"""

from __future__ import annotations

from ... import walker
from ...walker import FieldNode, Int, Record, TagByte
from .c_common import c_ident
from .c_parse import CParseGen
from .common import CLASSES, record_class

__all__ = ["generate"]

#: The messages the compiled row path and column path scan.
SCANNED = ("Begin", "Commit", "Origin", "Insert", "Update", "Delete", "BeginPrepare", "Prepare", "CommitPrepared",
           "RollbackPrepared", "StreamStart", "StreamStop", "StreamCommit", "StreamAbort", "Relation")


#: What the scans of text fields check them with (and the row writer its text values): strict UTF-8, as
#: Python's decoder (and so the parse functions' PyUnicode_DecodeUTF8) takes it.
UTF8 = r"""/* the length of the valid UTF-8 sequence at s (as Python's strict decoder takes it), or 0 */
static inline Py_ssize_t utf8_length(const unsigned char *s, Py_ssize_t left)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return left >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;   /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0;  /* a surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;   /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0;  /* beyond U+10FFFF */
        return 4;
    }
    return 0;
}

/* whether s[0:k] is valid UTF-8 */
static int utf8_valid(const unsigned char *s, Py_ssize_t k)
{
    for (Py_ssize_t i = 0; i < k;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t u = utf8_length(s + i, k - i);
        if (u == 0) return 0;
        i += u;
    }
    return 1;
}"""


def field_index(cls: type, name: str) -> str:
    """The C constant of the index of ``cls``'s field ``name`` in a scan's ``Field`` array."""
    return f"F_{c_ident(cls.__name__)}_{c_ident(name)}"


class CScanGen(CParseGen):
    """The C scan function of one message or record (see the module docstring)."""

    def __init__(self, layout: walker.Layout | None, records: dict[str, str] | None = None) -> None:
        super().__init__(layout)  # type: ignore[arg-type]  # None for a record's scan (see record_function)
        self.indices: dict[type, list[str]] = {}
        self.tags: dict[type, str] = {}
        self.records = records if records is not None else {}  # record scan functions by name, made once

    def function(self) -> str:
        spec = self.layout.spec
        out = self.out
        cls = CLASSES[id(spec)]
        tag = self.layout.fields[0].node
        assert isinstance(tag, TagByte)
        self.tags[cls] = tag.tag
        count = self.index_of(cls, self.layout.record)
        out(f"static int s_{c_ident(spec.name)}(const unsigned char *d, Py_ssize_t n, int pv, int ins, Field *F)")
        out("{")
        out.indent()
        out("Py_ssize_t p = 1;")
        out("(void)pv; (void)ins;")
        out(f"memset(F, 0, {count} * sizeof(Field));")
        if tag.min_proto is not None:
            out(f"if (pv < {tag.min_proto}) return 0;")
        if not self.record(self.layout.record, cls, "F"):
            out("if (p != n) goto fail;")
        out("return 1;")
        out.dedent()
        out("fail:")
        out("    return 0;")
        out("}")
        return out.text()

    def record_function(self, record: Record) -> str:
        """The scan of one item of a repeated record: from ``p``, the position after it, or -1."""
        cls = record_class(record)
        out = self.out
        count = self.index_of(cls, record)
        out(f"static Py_ssize_t r_{c_ident(cls.__name__)}(const unsigned char *d, Py_ssize_t n, Py_ssize_t p, "
            f"Field *F)")
        out("{")
        out.indent()
        out(f"memset(F, 0, {count} * sizeof(Field));")
        if self.record(record, cls, "F"):
            raise walker.UnknownConstruct("the C scan generator cannot repeat a record ending in a rest")
        out("return p;")
        out.dedent()
        out("fail:")
        out("    return -1;")
        out("}")
        return out.text()

    def index_of(self, cls: type, record: Record) -> int:
        names = [f.name for f in record.fields if f.meta.value != "tag"]
        self.indices[cls] = names
        return len(names)

    def defines(self) -> list[str]:
        """The constants of the functions made: ``F_<Class>_<field>``, ``N_<Class>`` (the size of the Field
        array a scan fills) and a message's ``TAG_<Class>`` (its tag byte)."""
        out = [f"#define {field_index(cls, name)} {i}" for cls, names in self.indices.items()
               for i, name in enumerate(names)]
        out += [f"#define N_{c_ident(cls.__name__)} {len(names)}" for cls, names in self.indices.items()]
        return out + [f"#define TAG_{c_ident(cls.__name__)} {ord(tag)}  /* {tag!r} */"
                      for cls, tag in self.tags.items()]

    # -- where the values go: the Field array

    def put(self, f: FieldNode, cls: type, obj: str, **values: str) -> None:
        index = f"{obj}[{field_index(cls, f.name)}]"
        for name, value in values.items():
            self.out(f"{index}.{name} = {value};")

    def put_int(self, f: FieldNode, cls: type, obj: str, var: str, i: Int) -> None:
        if f.meta.value != "count":
            self.put(f, cls, obj, v=f"(uint64_t){var}", present="1")

    def put_char(self, f: FieldNode, cls: type, obj: str, var: str) -> None:
        self.put(f, cls, obj, v=f"(uint64_t){var}", present="1")

    def put_text(self, f: FieldNode, cls: type, obj: str, end: str) -> None:
        # the parse function decodes it as strict UTF-8, and fails where that fails
        self.out(f"if (!utf8_valid(d + p, {end} - (d + p))) goto fail;")
        self.put(f, cls, obj, at="p", len=f"{end} - (d + p)", present="1")

    def put_bytes(self, f: FieldNode, cls: type, obj: str, length: str) -> None:
        self.put(f, cls, obj, at="p", len=length, present="1")

    def put_none(self, f: FieldNode, cls: type, obj: str) -> None:
        self.put(f, cls, obj, present="0")

    def array(self, f: FieldNode, item: walker.Node, count: str, cls: type, obj: str) -> None:
        if not isinstance(item, Record):
            raise walker.UnknownConstruct(f"the C scan generator cannot repeat {item!r}")
        out = self.out
        least = walker.min_size(item)
        out(f"if ((uint64_t){count} > (uint64_t)(n - p){f' / {least}' if least > 1 else ''}) goto fail;")
        self.put(f, cls, obj, v=f"(uint64_t){count}", at="p", present="1")
        rcls = record_class(item)
        name = f"r_{c_ident(rcls.__name__)}"
        if name not in self.records:
            maker = CScanGen(None, self.records)
            self.records[name] = ""  # a record that holds itself is made once
            self.records[name] = maker.record_function(item)
            self.indices.update(maker.indices)
        idx, scratch = self.names("x"), self.names("f")
        out("{")
        out.indent()
        out(f"Field {scratch}[{len([g for g in item.fields if g.meta.value != 'tag'])}];")
        out(f"for (Py_ssize_t {idx} = 0; {idx} < (Py_ssize_t){count}; {idx}++) {{")
        out(f"    p = {name}(d, n, p, {scratch});")
        out("    if (p < 0) goto fail;")
        out("}")
        out.dedent()
        out("}")


def generate() -> tuple[list[str], list[str]]:
    """The ``F_`` constants and the scan functions (records' first) of :data:`SCANNED`."""
    from .... import schema

    records: dict[str, str] = {}
    functions, defines = [], []
    for spec in schema.LOGICAL_MESSAGES:
        if spec.name in SCANNED:
            gen = CScanGen(walker.layout(spec), records)
            functions.append(gen.function())
            defines += gen.defines()
    defines = list(dict.fromkeys(defines))
    return defines, [UTF8, *records.values(), *functions]
