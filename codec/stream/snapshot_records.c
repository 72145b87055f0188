/* The C twin of replwire.codec.stream.snapshot_records's cuts of COPY's rows into records. */

/* text_cuts(data, most): the cuts of COPY's text rows ``data`` into records of at least ``most`` bytes, as
 * (lines, end) tuples: a cut ends with the first line that takes it to ``most`` bytes past the cut before,
 * the last one at the data's end.  The newlines are looked for without the GIL (the buffer is held). */
static PyObject *c_text_cuts(PyObject *self, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t most;
    if (!PyArg_ParseTuple(args, "y*n:text_cuts", &data, &most)) return NULL;
    if (most < 1) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "text_cuts: most must be at least 1");
        return NULL;
    }
    /* (grown as cuts are found: each holds at least one byte of the data) */
    Py_ssize_t room = 64, count = 0, *cuts = PyMem_RawMalloc(sizeof(Py_ssize_t) * 2 * (size_t)room);
    int nomem = cuts == NULL;
    const char *s = data.buf, *p = s, *end = s + data.len;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t start = 0, lines = 0;
    while (!nomem && start < data.len) {
        const char *newline = memchr(p, '\n', (size_t)(end - p));
        p = newline == NULL ? end : newline + 1;  /* (no newline: what follows the last one ends the last cut) */
        lines += newline != NULL;
        if ((p - s) - start < most && p != end) continue;
        if (count == room) {
            Py_ssize_t *more = PyMem_RawRealloc(cuts, sizeof(Py_ssize_t) * 4 * (size_t)room);
            if (more == NULL) { nomem = 1; break; }
            cuts = more, room *= 2;
        }
        cuts[2 * count] = lines, cuts[2 * count + 1] = p - s, count++;
        lines = 0, start = p - s;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyObject *result = nomem ? PyErr_NoMemory() : PyList_New(count);
    for (Py_ssize_t i = 0; result != NULL && i < count; i++) {
        PyObject *cut = Py_BuildValue("(nn)", cuts[2 * i], cuts[2 * i + 1]);
        if (cut == NULL) Py_CLEAR(result);
        else PyList_SET_ITEM(result, i, cut);
    }
    PyMem_RawFree(cuts);
    return result;
}

/* row_cuts(rows, most): the cuts of a list of rows (bytes, one row each), joined, into records of at least
 * ``most`` bytes, as (rows, end) tuples: a cut ends with the first row that takes it to ``most`` bytes past
 * the cut before, the last one with the last row. */
static PyObject *c_row_cuts(PyObject *self, PyObject *args)
{
    PyObject *rows;
    Py_ssize_t most;
    if (!PyArg_ParseTuple(args, "O!n:row_cuts", &PyList_Type, &rows, &most)) return NULL;
    if (most < 1) {
        PyErr_SetString(PyExc_ValueError, "row_cuts: most must be at least 1");
        return NULL;
    }
    PyObject *result = PyList_New(0);
    Py_ssize_t at = 0, start = 0, count = 0;
    for (Py_ssize_t i = 0; result != NULL && i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyBytes_Check(row)) {
            PyErr_Format(PyExc_TypeError, "row_cuts: row %zd is %.100s, not bytes", i, Py_TYPE(row)->tp_name);
            Py_CLEAR(result);
            break;
        }
        at += PyBytes_GET_SIZE(row), count++;  /* (the rows are in memory: their sum fits) */
        if (at - start >= most || i == PyList_GET_SIZE(rows) - 1) {
            PyObject *cut = Py_BuildValue("(nn)", count, at);
            if (cut == NULL || PyList_Append(result, cut) < 0) Py_CLEAR(result);
            Py_XDECREF(cut);
            start = at, count = 0;
        }
    }
    return result;
}
