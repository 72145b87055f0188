"""Generate the compiled codec's C source: the extension module ``replwire.codec.wire._compiled``.

The module holds one C parse and one C build function per declared message
(:mod:`replwire.codec.wire.gen.c_parse`, :mod:`replwire.codec.wire.gen.c_build`), the tag tables, and the
four public entry points, ``parse``, ``build``, ``parse_envelope`` and ``build_envelope``, with the
signatures and documentation of :mod:`replwire.codec.wire.fast`'s.  An entry point takes the common case
(``bytes`` input, an exact ``int`` protocol version 1-4, ``in_stream`` exactly ``True`` or ``False``, UTF-8,
a known tag or class) in C; everything else, and everything the C function declines (any input that is not
exactly one valid message, any message its guards do not prove valid), it forwards, arguments unchanged, to
the generated Python entry point of :mod:`replwire.codec.wire._generated`.  So the results and the errors
(class, message, offset, field) are the Python codec's by construction, and the C only has to be right
about valid input.

The source is written at build time by ``setup.py`` (``python -m replwire.codec.wire.gen.c_module PATH``
writes it by hand) and never committed.  It carries the :func:`~replwire.codec.wire.gen.fingerprint.fingerprint`
of the files it is generated from; :mod:`replwire.codec.wire.fast` refuses an extension whose fingerprint
is not the installed files'.  ``_init`` (called by :mod:`replwire.codec.wire.fast`) hands the module the
message classes, whose slot offsets it looks up and checks, and the Python entry points it forwards to.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from .... import schema
from ....schema.encodings import UTF8
from ....schema.message_spec import MessageSpec
from ... import walker
from . import c_scan, column_buffers, row_ways, text_forms
from .c_build import CBuildGen
from .c_common import class_var, slot
from .c_parse import CParseGen
from .common import CLASSES
from .entry import HOT, SIGNATURES
from .fingerprint import fingerprint

__all__ = ["docstring", "generate"]

#: The module's name, and the name its entry points report as their module (the one that exports them).
MODULE = "replwire.codec.wire._compiled"
EXPORTED_BY = "replwire.codec.wire.fast"
FAST = Path(__file__).resolve().parent.parent / "fast.py"
#: The hand-written C of the compiled codec: each file the twin of the Python module beside it, whose work it
#: does faster (the stream decoder's row change checks, the JSON writer's rows, the cuts of COPY's rows into
#: records, the readers of COPY-CSV rows, capture records and an input's records, the first pass and the
#: change columns of split decoding, decode's row path), put into the source after the generated code in this
#: order: each uses only what the twins before it define (the order of the package's layers; the layers test
#: holds it to them).
TWINS = ("stream/decoder.c", "stream/jsonl.c", "stream/debezium.c", "stream/values.c", "stream/snapshot_records.c",
         "io/copy_csv.c", "io/capture_file.c", "io/segments.c", "split/skim.c", "split/columns.c", "decode.c")
CODEC = Path(__file__).resolve().parent.parent.parent

#: What a scan function notes of one field (see :mod:`replwire.codec.wire.gen.c_scan`).
FIELD = """typedef struct {
    uint64_t v;
    Py_ssize_t at, len;
    int present;
} Field;"""

PRELUDE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#if PY_VERSION_HEX < 0x030B0000
#include <longintrepr.h>
#endif
#include <stdint.h>
#include <string.h>
#include <float.h>
#include <math.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static PyTypeObject *LSN_T, *TS_T;
static PyObject *ZERO, *FALLBACK[4], *S_PROTO, *S_STREAM, *S_ENCODING, *S_SENDER;
static int READY;

/* reads: the caller has checked that the bytes are there */
static inline uint64_t rd1(const unsigned char *s) { return s[0]; }
static inline uint64_t rd2(const unsigned char *s) { return ((uint64_t)s[0] << 8) | s[1]; }
static inline uint64_t rd4(const unsigned char *s)
{
    return ((uint64_t)s[0] << 24) | ((uint64_t)s[1] << 16) | ((uint64_t)s[2] << 8) | s[3];
}
static inline uint64_t rd8(const unsigned char *s) { return (rd4(s) << 32) | rd4(s + 4); }

#define NEED(k) do { if ((Py_ssize_t)(k) > n - p) goto fail; } while (0)
#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))
#define SET(obj, off, value) do { \
        PyObject *set_v_ = (value); \
        if (set_v_ == NULL) goto fail; \
        PyObject *set_old_ = SLOT(obj, off); \
        SLOT(obj, off) = set_v_; \
        Py_XDECREF(set_old_); \
    } while (0)

static PyObject *new_object(PyTypeObject *type) { return type->tp_alloc(type, 0); }

/* an instance of the int subclass type (LSN, Timestamp) equal to the int value (a new reference, stolen):
 * what int.__new__(type, value) makes; before Python 3.12, the same copy of the digits without the call */
static PyObject *int_subclass(PyTypeObject *type, PyObject *value)
{
    if (value == NULL) return NULL;
#if PY_VERSION_HEX < 0x030C0000
    Py_ssize_t size = Py_SIZE(value), digits = size < 0 ? -size : size;
    PyObject *made = type->tp_alloc(type, digits ? digits : 1);
    if (made != NULL) {
        Py_SET_SIZE(made, size);
        memcpy(((PyLongObject *)made)->ob_digit, ((PyLongObject *)value)->ob_digit, (size_t)digits * sizeof(digit));
    }
    Py_DECREF(value);
    return made;
#else
    PyObject *args = PyTuple_Pack(1, value);
    Py_DECREF(value);
    if (args == NULL) return NULL;
    PyObject *result = PyLong_Type.tp_new(type, args, NULL);
    Py_DECREF(args);
    return result;
#endif
}
static PyObject *make_lsn(uint64_t v) { return int_subclass(LSN_T, PyLong_FromUnsignedLongLong(v)); }
static PyObject *make_timestamp(int64_t v) { return int_subclass(TS_T, PyLong_FromLongLong(v)); }

/* the output of a build: a buffer on the stack that moves to the heap when it outgrows it */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char small[512];
} Buf;

static int grow(Buf *b, Py_ssize_t k)
{
    if (k > PY_SSIZE_T_MAX / 2 - b->len) return -1;
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->len + k) cap = b->len + k;
    char *p = b->p == b->small ? PyMem_Malloc((size_t)cap) : PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) return -1;
    if (b->p == b->small) memcpy(p, b->small, (size_t)b->len);
    b->p = p;
    b->cap = cap;
    return 0;
}
static inline int put_bytes(Buf *b, const char *s, Py_ssize_t k)
{
    if (k > b->cap - b->len && grow(b, k)) return -1;
    memcpy(b->p + b->len, s, (size_t)k);
    b->len += k;
    return 0;
}
static inline int put_be(Buf *b, uint64_t v, int size)
{
    if (size > b->cap - b->len && grow(b, size)) return -1;
    for (int i = size - 1; i >= 0; i--) {
        b->p[b->len + i] = (char)(v & 0xFF);
        v >>= 8;
    }
    b->len += size;
    return 0;
}
static inline int put1(Buf *b, uint64_t v) { return put_be(b, v, 1); }
static inline int put2(Buf *b, uint64_t v) { return put_be(b, v, 2); }
static inline int put4(Buf *b, uint64_t v) { return put_be(b, v, 4); }
static inline int put8(Buf *b, uint64_t v) { return put_be(b, v, 8); }

/* an integer value of a message: exactly int, LSN or Timestamp (as the Python codec's guard), in range */
static inline int is_int(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    return t == &PyLong_Type || t == LSN_T || t == TS_T;
}
static int get_u64(PyObject *v, uint64_t high, uint64_t *out)
{
    if (!is_int(v)) return -1;
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (x > high) return -1;
    *out = x;
    return 0;
}
static int get_i64(PyObject *v, int64_t low, int64_t high, int64_t *out)
{
    if (!is_int(v)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    if (x < low || x > high) return -1;
    *out = x;
    return 0;
}

static int same_name(PyObject *key, PyObject *name)
{
    return key == name || PyUnicode_Compare(key, name) == 0;
}

static int set_class(PyObject *classes, const char *name, PyTypeObject **out)
{
    PyObject *cls = PyDict_GetItemString(classes, name);
    if (cls == NULL || !PyType_Check(cls) || ((PyTypeObject *)cls)->tp_itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "_init: no class %s", name);
        return -1;
    }
    Py_INCREF(cls);
    Py_XSETREF(*out, (PyTypeObject *)cls);
    return 0;
}

/* the offset of a slot of a class, checked to be an object slot */
static int set_slot(PyTypeObject *cls, const char *name, Py_ssize_t *out)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)cls, name);
    if (descr == NULL) return -1;
    int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type)
             && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX
             && !(((PyMemberDescrObject *)descr)->d_member->flags & READONLY);
    if (ok) *out = ((PyMemberDescrObject *)descr)->d_member->offset;
    Py_DECREF(descr);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "_init: %s.%s is not a slot", cls->tp_name, name);
        return -1;
    }
    return 0;
}

typedef PyObject *(*parse_fn)(const unsigned char *, Py_ssize_t, int, int);
typedef int (*build_fn)(PyObject *, int, int, Buf *);

/* the bytes the build function fn makes of m, or NULL: not the common case */
static PyObject *run_build(build_fn fn, PyObject *m, int pv, int ins)
{
    Buf b;
    b.p = b.small;
    b.len = 0;
    b.cap = sizeof b.small;
    int failed = fn(m, pv, ins, &b);
    PyObject *result = failed ? NULL : PyBytes_FromStringAndSize(b.p, b.len);
    if (b.p != b.small) PyMem_Free(b.p);
    return result;
}
"""

ENTRIES = r"""
/* how many calls of each entry point went to the Python codec (``_forwarded()``), and how many ran one of
   the C functions, whether it then returned or declined (``_ran()``): what the tests count to know that a
   comparison reached C */
static Py_ssize_t FORWARDED[4], RAN[4];

static PyObject *c_forwarded(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(nnnn)", FORWARDED[0], FORWARDED[1], FORWARDED[2], FORWARDED[3]);
}

static PyObject *c_ran(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(nnnn)", RAN[0], RAN[1], RAN[2], RAN[3]);
}

static PyObject *forward(int which, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FORWARDED[which]++;
    return PyObject_Vectorcall(FALLBACK[which], args, nargsf, kwnames);
}

/* the context of a logical call: 0 when it is the common case (pv, ins set), -1 to forward */
static int logical_context(Py_ssize_t nargs, PyObject *const *args, PyObject *kwnames, int *pv, int *ins)
{
    if (!READY || nargs != 1 || kwnames == NULL) return -1;
    PyObject *version = NULL, *stream = Py_False, *encoding = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
        if (same_name(key, S_PROTO)) version = value;
        else if (same_name(key, S_STREAM)) stream = value;
        else if (same_name(key, S_ENCODING)) encoding = value;
        else return -1;
    }
    if (version == NULL || !PyLong_CheckExact(version)) return -1;
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(version, &overflow);
    if (overflow || v < 1 || v > MAX_PROTO) return -1;
    if (stream != Py_True && stream != Py_False) return -1;
    if (stream == Py_True && v < 2) return -1;
    if (encoding != NULL && !(PyUnicode_CheckExact(encoding)
                              && PyUnicode_CompareWithASCIIString(encoding, UTF8) == 0)) return -1;
    *pv = (int)v;
    *ins = stream == Py_True;
    return 0;
}

static PyObject *c_parse(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int pv, ins;
    if (logical_context(nargs, args, kwnames, &pv, &ins) == 0 && PyBytes_CheckExact(args[0])) {
        const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(args[0]);
        Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
        parse_fn fn = n > 0 ? PARSE_LOGICAL[d[0]] : NULL;
        if (fn != NULL) {
            RAN[0]++;
            PyObject *result = fn(d, n, pv, ins);
            if (result != NULL) return result;
            PyErr_Clear();
        }
    }
    return forward(0, args, nargsf, kwnames);
}

static PyObject *c_build(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int pv, ins;
    if (logical_context(nargs, args, kwnames, &pv, &ins) == 0) {
        build_fn fn = build_logical(Py_TYPE(args[0]));
        if (fn != NULL) {
            RAN[1]++;
            PyObject *result = run_build(fn, args[0], pv, ins);
            if (result != NULL) return result;
            PyErr_Clear();
        }
    }
    return forward(1, args, nargsf, kwnames);
}

static PyObject *c_parse_envelope(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!READY || nargs != 1 || !PyBytes_CheckExact(args[0]) || PyBytes_GET_SIZE(args[0]) == 0) goto slow;
    int client = 0;
    if (kwnames != NULL) {
        if (PyTuple_GET_SIZE(kwnames) != 1 || !same_name(PyTuple_GET_ITEM(kwnames, 0), S_SENDER)) goto slow;
        PyObject *sender = args[1];
        if (!PyUnicode_CheckExact(sender)) goto slow;
        if (PyUnicode_CompareWithASCIIString(sender, "client") == 0) client = 1;
        else if (PyUnicode_CompareWithASCIIString(sender, "server") != 0) goto slow;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    parse_fn fn = client ? PARSE_CLIENT[d[0]] : PARSE_SERVER[d[0]];
    if (fn != NULL) {
        RAN[2]++;
        PyObject *result = fn(d, n, 0, 0);
        if (result != NULL) return result;
        PyErr_Clear();
    }
slow:
    return forward(2, args, nargsf, kwnames);
}

static PyObject *c_build_envelope(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (READY && nargs == 1 && kwnames == NULL) {
        build_fn fn = build_envelope(Py_TYPE(args[0]));
        if (fn != NULL) {
            RAN[3]++;
            PyObject *result = run_build(fn, args[0], 0, 0);
            if (result != NULL) return result;
            PyErr_Clear();
        }
    }
    return forward(3, args, nargsf, kwnames);
}

static PyObject *c_init(PyObject *self, PyObject *args)
{
    PyObject *classes, *lsn, *ts, *f0, *f1, *f2, *f3;
    READY = 0;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOO:_init", &PyDict_Type, &classes, &PyType_Type, &lsn, &PyType_Type,
                          &ts, &f0, &f1, &f2, &f3)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)lsn, &PyLong_Type) || !PyType_IsSubtype((PyTypeObject *)ts, &PyLong_Type)) {
        PyErr_SetString(PyExc_TypeError, "_init: LSN and Timestamp must be int subclasses");
        return NULL;
    }
    Py_INCREF(lsn);
    Py_XSETREF(LSN_T, (PyTypeObject *)lsn);
    Py_INCREF(ts);
    Py_XSETREF(TS_T, (PyTypeObject *)ts);
    PyObject *fallbacks[4] = {f0, f1, f2, f3};
    for (int i = 0; i < 4; i++) {
        Py_INCREF(fallbacks[i]);
        Py_XSETREF(FALLBACK[i], fallbacks[i]);
    }
    if (init_classes(classes)) return NULL;
    READY = 1;
    Py_RETURN_NONE;
}
"""


def docstring(name: str) -> str:
    """The docstring of the documented entry point ``name`` in :mod:`replwire.codec.wire.fast`, read from
    its source (importing it would load this module), with the text signature ``inspect`` reads."""
    tree = ast.parse(FAST.read_text(encoding="utf-8"))
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)
    doc = ast.get_docstring(function) or ""
    return f"{name}({SIGNATURES[name]})\n--\n\n{doc}"


def c_string(text: str) -> str:
    return '"' + text.encode("utf-8").decode("ascii", "backslashreplace").replace("\\", "\\\\").replace(
        '"', '\\"').replace("\n", "\\n") + '"'


def generate() -> str:
    """The whole C source of the compiled codec."""
    logical = list(schema.LOGICAL_MESSAGES)
    envelope = {sender: list(specs.values()) for sender, specs in schema.ENVELOPE.items()}
    specs: list[MessageSpec] = logical + [s for group in envelope.values() for s in group]
    parts = [f"/* The compiled codec, generated from the declarations by {__name__}: do not edit. */", PRELUDE,
             f"#define MAX_PROTO {schema.MAX_PROTO_VERSION}", f"#define UTF8 {c_string(UTF8)}",
             f'#define FINGERPRINT "{fingerprint()}"']
    slots: dict[type, set[str]] = {}
    functions = []
    for spec in specs:
        lay = walker.layout(spec)
        for gen in (CParseGen(lay), CBuildGen(lay)):
            functions.append(gen.function())
            for cls, names in gen.classes.items():
                slots.setdefault(cls, set()).update(names)
    classes = sorted(slots, key=lambda c: c.__name__)
    for cls in classes:
        parts.append(f"static PyTypeObject *{class_var(cls)};")
        parts += [f"static Py_ssize_t {slot(cls, name)};" for name in sorted(slots[cls])]
    parts += functions
    defines, scans = c_scan.generate()
    parts += [FIELD, "\n".join(defines), *scans, row_ways.c_enums(), text_forms.c_enums(),
              column_buffers.c_enums(), *((CODEC / twin).read_text(encoding="utf-8") for twin in TWINS)]
    parts.append(parse_table("PARSE_LOGICAL", logical))
    for sender, group in envelope.items():
        parts.append(parse_table(f"PARSE_{sender.upper()}", group))
    hot = {name: i for i, name in enumerate(HOT)}
    parts.append(build_dispatch("build_logical", sorted(logical, key=lambda s: hot.get(s.name, len(hot)))))
    parts.append(build_dispatch("build_envelope", [s for group in envelope.values() for s in group]))
    init = ["static int init_classes(PyObject *classes)", "{"]
    for cls in classes:
        init.append(f'    if (set_class(classes, "{cls.__name__}", &{class_var(cls)})) return -1;')
        init += [f'    if (set_slot({class_var(cls)}, "{name}", &{slot(cls, name)})) return -1;'
                 for name in sorted(slots[cls])]
    init += ["    return 0;", "}"]
    parts.append("\n".join(init))
    parts.append(ENTRIES)
    parts.append(module_definition())
    return "\n\n".join(parts) + "\n"


def parse_table(name: str, specs: list[MessageSpec]) -> str:
    entries = ",\n".join(f"    [{ord(s.tag)}] = p_{s.name}" for s in specs)
    return f"static const parse_fn {name}[256] = {{\n{entries},\n}};"


def build_dispatch(name: str, specs: list[MessageSpec]) -> str:
    lines = [f"static build_fn {name}(PyTypeObject *type)", "{"]
    lines += [f"    if (type == {class_var(CLASSES[id(s)])}) return b_{s.name};" for s in specs]
    lines += ["    return NULL;", "}"]
    return "\n".join(lines)


def module_definition() -> str:
    entries = ("parse", "build", "parse_envelope", "build_envelope")
    methods = "\n".join(
        f'    {{"{e}", (PyCFunction)(void (*)(void))c_{e}, METH_FASTCALL | METH_KEYWORDS, {c_string(docstring(e))}}},'
        for e in entries)
    return f"""
static PyMethodDef ENTRY_METHODS[] = {{
{methods}
    {{NULL, NULL, 0, NULL}}
}};

static PyMethodDef MODULE_METHODS[] = {{
    {{"_init", c_init, METH_VARARGS, "Hand the module the message classes and the Python entry points."}},
    {{"rows_plan", c_rows_plan, METH_VARARGS, "A relation's plan for rows_run (see codec/stream/jsonl.c)."}},
    {{"texts_typed", c_texts_typed, METH_VARARGS,
      "Many server texts of one column read into typed Arrow buffers (see codec/stream/values.c)."}},
    {{"text_cuts", c_text_cuts, METH_VARARGS,
      "Where COPY's text rows are cut into records (see codec/stream/snapshot_records.c)."}},
    {{"row_cuts", c_row_cuts, METH_VARARGS,
      "Where a list of rows, joined, is cut into records (see codec/stream/snapshot_records.c)."}},
    {{"rows_run", c_rows_run, METH_VARARGS,
      "JSON lines of the plain transactions of COPY-CSV rows or capture records (see codec/decode.c)."}},
    {{"rows_body", c_rows_body, METH_VARARGS,
      "The row changes of an open transaction or stream block as a run of lines (see codec/decode.c)."}},
    {{"rows_join", c_rows_join, METH_VARARGS,
      "A run's JSON lines, with its transaction's xid and commit keys (see codec/decode.c)."}},
    {{"rows_join_debezium", c_rows_join_debezium, METH_VARARGS,
      "A Debezium run's event lines, with its transaction's keys (see codec/stream/debezium.c)."}},
    {{"rows_row", c_rows_row, METH_VARARGS, "A row image of parsed tuple columns as JSON (see codec/stream/jsonl.c)."}},
    {{"skim_run", c_skim_run, METH_VARARGS,
      "A run of records as the first pass of split decoding needs it (see codec/split/skim.c)."}},
    {{"rows_columns", c_rows_columns, METH_VARARGS,
      "The change rows' column buffers of the plain and streamed transactions of records (see "
      "codec/split/columns.c)."}},
    {{"_forwarded", c_forwarded, METH_NOARGS,
      "How many calls of parse, build, parse_envelope, build_envelope went to the Python codec."}},
    {{"_ran", c_ran, METH_NOARGS,
      "How many calls of parse, build, parse_envelope, build_envelope ran a C function of a message."}},
    {{NULL, NULL, 0, NULL}}
}};

static struct PyModuleDef MODULE_DEF = {{
    PyModuleDef_HEAD_INIT, "{MODULE}", "The compiled codec (generated from the declarations).", -1,
    MODULE_METHODS, NULL, NULL, NULL, NULL,
}};

PyMODINIT_FUNC PyInit__compiled(void)
{{
    PyObject *module = PyModule_Create(&MODULE_DEF);
    if (module == NULL) return NULL;
    PyObject *owner = PyUnicode_FromString("{EXPORTED_BY}");
    if (owner == NULL) goto fail;
    for (PyMethodDef *def = ENTRY_METHODS; def->ml_name != NULL; def++) {{
        PyObject *function = PyCFunction_NewEx(def, NULL, owner);
        if (function == NULL || PyModule_AddObject(module, def->ml_name, function) < 0) {{
            Py_XDECREF(function);
            Py_DECREF(owner);
            goto fail;
        }}
    }}
    Py_DECREF(owner);
    ZERO = PyLong_FromLong(0);
    S_PROTO = PyUnicode_InternFromString("proto_version");
    S_STREAM = PyUnicode_InternFromString("in_stream");
    S_ENCODING = PyUnicode_InternFromString("encoding");
    S_SENDER = PyUnicode_InternFromString("sender");
    if (ZERO == NULL || S_PROTO == NULL || S_STREAM == NULL || S_ENCODING == NULL || S_SENDER == NULL) goto fail;
    if (PyModule_AddStringConstant(module, "FINGERPRINT", FINGERPRINT) < 0) goto fail;
    return module;
fail:
    Py_DECREF(module);
    return NULL;
}}
"""


def write(path: Path) -> bool:
    """Write the C source to ``path``; whether it changed."""
    source = generate()
    if path.exists() and path.read_text(encoding="utf-8") == source:
        return False
    path.write_text(source, encoding="utf-8")
    return True


if __name__ == "__main__":
    target = Path(sys.argv[1])
    print(f"{'wrote' if write(target) else 'up to date:'} {target}")
