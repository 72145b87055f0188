/* The C twin of replwire.codec.split.skim, the first pass of split decoding: a run of capture file records or
 * COPY-CSV rows reduced to what replwire.codec.split.first_pass's merge needs of it.
 *
 * Hand-written C, put into the compiled codec's source by replwire.codec.wire.gen.c_module after the twins
 * whose helpers it uses: a capture record's framing (Frame, capture_record, crc32_of), a COPY-CSV row
 * (csv_row), and the scans
 * generated from the declarations (s_Begin, s_Commit).  skim_run gives exactly what the Python reading
 * (Skimmer.skim) and take_run give for the same run: the records that are not row changes, the row
 * changes between them counted, and the plain transactions (a Begin, row changes, its Commit) gathered
 * into blocks of consecutive ones, their numbers in columns.  At anything it does not take as the Python
 * path would -- a capture record that is torn or fails its checksum, a row that is not (lsn, xid, data) --
 * it declines the whole run, and the Python path reads it (and reports the tail or raises the error).
 * Every read is bounds-checked (capture_record, csv_row, the scans); the memory it takes is the run's
 * output, proportional to its input. */

/* one plain transaction: where its Begin is, the row changes inside, and its Begin's and Commit's numbers */
typedef struct {
    uint64_t offset, inside, xid, commit_lsn, end_lsn, commit_time;
} SkimTx;

typedef struct {
    SkimTx *tx;
    Py_ssize_t n, cap;
    Py_ssize_t messages;     /* records of the block: Begins, Commits, row changes inside and between */
    int ordered;             /* every end LSN above the one before */
    PyObject *begin;         /* (offset, lsn, data) of the block's first Begin; NULL: no block open */
} SkimBlock;

/* the numbers of a block's transactions as bytes of native 8-byte words: column c of all of them (kept 0),
 * or, for kept 1, of those with row changes inside, the offset becoming the key (base | offset) */
static PyObject *skim_column(const SkimBlock *b, int c, int kept, uint64_t base)
{
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < b->n; i++) count += !kept || b->tx[i].inside;
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * 8);
    if (out == NULL) return NULL;
    char *w = PyBytes_AS_STRING(out);  /* (words stored with memcpy: no alignment or aliasing assumed) */
    for (Py_ssize_t i = 0, j = 0; i < b->n; i++) {
        const SkimTx *t = &b->tx[i];
        if (kept && !t->inside) continue;
        const uint64_t v[6] = {kept ? (base | t->offset) : t->offset, t->inside, t->xid, t->commit_lsn, t->end_lsn,
                               t->commit_time};
        memcpy(w + 8 * j++, &v[c], 8);
    }
    return out;
}

/* the open block as the item take_run makes: (offset, lsn, data) of its first Begin, the number of
 * transactions, of records, whether the end LSNs go up, the first and last end LSN, the columns of all of
 * them (offset, inside, xid, commit_lsn, end_lsn, commit_time) and those of the transactions with row
 * changes (key, xid, commit_lsn, end_lsn, commit_time); appended to controls and closed.  0, or -1 */
static int skim_close(SkimBlock *b, PyObject *controls, uint64_t base)
{
    if (b->begin == NULL) return 0;
    PyObject *full = PyTuple_New(6), *kept = PyTuple_New(5), *item = NULL;
    if (full == NULL || kept == NULL) goto fail;
    for (int c = 0; c < 6; c++) {
        PyObject *column = skim_column(b, c, 0, base);
        if (column == NULL) goto fail;
        PyTuple_SET_ITEM(full, c, column);
    }
    static const int KEPT[5] = {0, 2, 3, 4, 5};
    for (int c = 0; c < 5; c++) {
        PyObject *column = skim_column(b, KEPT[c], 1, base);
        if (column == NULL) goto fail;
        PyTuple_SET_ITEM(kept, c, column);
    }
    item = Py_BuildValue("(OOOnnOKKNN)", PyTuple_GET_ITEM(b->begin, 0), PyTuple_GET_ITEM(b->begin, 1),
                         PyTuple_GET_ITEM(b->begin, 2), b->n, b->messages, b->ordered ? Py_True : Py_False,
                         (unsigned long long)b->tx[0].end_lsn, (unsigned long long)b->tx[b->n - 1].end_lsn, full, kept);
    full = kept = NULL;
    if (item == NULL || PyList_Append(controls, item) < 0) goto fail;
    Py_DECREF(item);
    Py_CLEAR(b->begin);
    b->n = 0;
    return 0;
fail:
    Py_XDECREF(full);
    Py_XDECREF(kept);
    Py_XDECREF(item);
    return -1;
}

/* append the row count before the next item, then the item (a new reference, or NULL: no memory) */
static int skim_item(SkimBlock *b, PyObject *controls, PyObject *rows, uint64_t base, Py_ssize_t before,
                     PyObject *item)
{
    if (item == NULL || skim_close(b, controls, base) < 0) {
        Py_XDECREF(item);
        return -1;
    }
    PyObject *count = PyLong_FromSsize_t(before);
    int r = count == NULL || PyList_Append(rows, count) < 0 || PyList_Append(controls, item) < 0 ? -1 : 0;
    Py_XDECREF(count);
    Py_DECREF(item);
    return r;
}

/* a plain transaction (its Begin item begin, a new reference) after ``before`` row changes: into the open
 * block, or the first of a new one */
static int skim_plain(SkimBlock *b, PyObject *controls, PyObject *rows, uint64_t base, Py_ssize_t before,
                      PyObject *begin, const SkimTx *tx)
{
    if (begin == NULL) return -1;
    if (b->begin != NULL) {
        Py_DECREF(begin);
        b->messages += before;
        if (tx->end_lsn <= b->tx[b->n - 1].end_lsn) b->ordered = 0;
    } else {
        PyObject *count = PyLong_FromSsize_t(before);
        int r = count == NULL || PyList_Append(rows, count) < 0 ? -1 : 0;
        Py_XDECREF(count);
        if (r < 0) {
            Py_DECREF(begin);
            return -1;
        }
        b->begin = begin;
        b->messages = 0;
        b->ordered = 1;
    }
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 256;
        SkimTx *grown = PyMem_Realloc(b->tx, (size_t)cap * sizeof(SkimTx));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->tx = grown;
        b->cap = cap;
    }
    b->tx[b->n++] = *tx;
    b->messages += (Py_ssize_t)tx->inside + 2;
    return 0;
}

/* skim_run(data, final, frame, proto_version, row_tags, start, limit, base) -> (status, end, records,
 * controls, rows): the records of data -- capture records laid out as frame says, or COPY-CSV rows when
 * frame is None -- that start below limit, data being the input's bytes from offset start (final: up to its
 * end).  status 0: read, end where the next run starts (relative to data), records how many, controls and
 * rows as take_run makes them (offsets absolute: start added; keys base | offset).  status 1: declined,
 * the Python path reads this run.  status 2: the record at a position below limit goes on past data: end
 * is how many bytes of data are needed at least (0: not known, for a row). */
static PyObject *c_skim_run(PyObject *self, PyObject *args)
{
    Py_buffer view, tags;
    int final, pv;
    PyObject *framing;
    Py_ssize_t start, limit;
    unsigned long long base_in;
    Frame frame = {0};
    if (!PyArg_ParseTuple(args, "y*pOiy*nnK:skim_run", &view, &final, &framing, &pv, &tags, &start, &limit, &base_in))
        return NULL;
    int capture = framing != Py_None;
    if (capture && frame_of(framing, &frame, "skim_run") < 0) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&tags);
        return NULL;
    }
    if (start < 0 || start > PY_SSIZE_T_MAX - view.len) {  /* (offsets start + pos: no overflow, none negative) */
        PyErr_SetString(PyExc_ValueError, "skim_run: start out of range");
        PyBuffer_Release(&view);
        PyBuffer_Release(&tags);
        return NULL;
    }
    if (capture && CRC_TABLE[0][1] == 0) crc_init();
    if (!capture && HEX['f'] != 15) hex_init();
    unsigned char is_row[256] = {0};
    for (Py_ssize_t i = 0; i < tags.len; i++) is_row[((const unsigned char *)tags.buf)[i]] = 1;
    PyBuffer_Release(&tags);
    const unsigned char *s = view.buf;
    const uint64_t base = (uint64_t)base_in;
    Py_ssize_t size = view.len, pos = 0, records = 0, run = 0, row_cap = 0, need = 0;
    if (limit > size && final) limit = size;
    int status = 0;
    unsigned char *row = NULL;
    SkimBlock block = {0};
    /* a Begin not yet closed: its item, its xid and the row changes before it */
    PyObject *begin = NULL, *result = NULL;
    uint64_t begin_offset = 0, begin_xid = 0;
    Py_ssize_t begin_before = 0;
    PyObject *controls = PyList_New(0), *rows = PyList_New(0);
    if (controls == NULL || rows == NULL) goto error;
    while (pos < limit) {
        uint64_t lsn;
        Py_ssize_t n, end;
        const unsigned char *d;
        if (pos >= size) {
            status = 2;  /* (the caller gives at least limit bytes, or all there are) */
            need = limit;
            break;
        }
        int r = next_record(capture ? &frame : NULL, s, size, pos, final, &lsn, &d, &n, &end, &row, &row_cap);
        if (r < 0) goto nomem;
        if (r == 0) goto decline;  /* (a torn tail or a bad record: the Python reader's) */
        if (r == 2) {
            status = 2;
            if (capture) {  /* how much the record needs, when its head is there to say */
                uint64_t length = size - pos >= frame.head ? rd_be(s + pos + frame.len_at, frame.len_size) : 0;
                need = length > (uint64_t)(PY_SSIZE_T_MAX / 2 - size) ? PY_SSIZE_T_MAX / 2
                                                                      : pos + frame.head + frame.crc_size + (Py_ssize_t)length;
            }
            break;
        }
        const uint64_t offset = (uint64_t)(start + pos);
        records++;
        pos = end;
        if (n && is_row[d[0]]) {
            run++;
            continue;
        }
        Field F[MOST(N_Begin, N_Commit)];
        if (begin != NULL) {
            if (n && d[0] == TAG_Commit && s_Commit(d, n, pv, 0, F)) {
                SkimTx tx = {begin_offset, (uint64_t)run, begin_xid, F[F_Commit_commit_lsn].v,
                             F[F_Commit_end_lsn].v, F[F_Commit_commit_time].v};
                PyObject *opened = begin;
                begin = NULL;
                if (skim_plain(&block, controls, rows, base, begin_before, opened, &tx) < 0) goto error;
                run = 0;
                continue;
            }
            PyObject *opened = begin;  /* not a plain transaction: its Begin is decoded like the rest */
            begin = NULL;
            if (skim_item(&block, controls, rows, base, begin_before, opened) < 0) goto error;
        }
        PyObject *item = Py_BuildValue("(KKy#)", (unsigned long long)offset, (unsigned long long)lsn, d, n);
        if (n && d[0] == TAG_Begin && s_Begin(d, n, pv, 0, F)) {
            if (item == NULL) goto error;
            begin = item;
            begin_offset = offset;
            begin_xid = F[F_Begin_xid].v;
            begin_before = run;
            run = 0;
            continue;
        }
        if (skim_item(&block, controls, rows, base, run, item) < 0) goto error;
        run = 0;
    }
    if (status == 0) {
        if (begin != NULL) {
            PyObject *opened = begin;
            begin = NULL;
            if (skim_item(&block, controls, rows, base, begin_before, opened) < 0) goto error;
        }
        if (skim_close(&block, controls, base) < 0) goto error;
        PyObject *count = PyLong_FromSsize_t(run);
        if (count == NULL || PyList_Append(rows, count) < 0) {
            Py_XDECREF(count);
            goto error;
        }
        Py_DECREF(count);
        result = Py_BuildValue("(innOO)", 0, pos, records, controls, rows);
    } else {
        result = Py_BuildValue("(inn[][])", 2, need, (Py_ssize_t)0);
    }
    goto done;
decline:
    result = Py_BuildValue("(inn[][])", 1, pos, (Py_ssize_t)0);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
error:
    result = NULL;
done:
    Py_XDECREF(begin);
    Py_XDECREF(block.begin);
    PyMem_Free(block.tx);
    Py_XDECREF(controls);
    Py_XDECREF(rows);
    PyMem_Free(row);
    PyBuffer_Release(&view);
    return result;
}
