/* The C twin of replwire.codec.split.columns: the plain transactions and the stream blocks of streamed
 * transactions of COPY-CSV rows or capture file records as the column buffers of the change rows
 * (replwire.spark.rows), not as JSON lines.
 *
 * Hand-written C, put into the compiled codec's source by replwire.codec.wire.gen.c_module after the twins
 * whose pieces it uses: the readers' (next_record), the decoder's (scan_change, change_fits) and the JSON
 * writer's (put_row, the Plan capsule).
 * It takes what rows_run takes, but for an Origin -- whole plain transactions, Begin, row changes, Commit, every
 * relation with a plan, every value one the row writer writes exactly as the Python writer does -- and, given
 * the router's open streamed transactions, whole Stream Start ... Stream Stop blocks of row changes alike and
 * the Stream Commits and Stream Aborts between them, keeping the router's dict of open streamed transactions
 * as the router would (and the Relations a streamed transaction sends again, the same as the decoder's); it
 * stops at the start of anything else, which the caller hands to the Python path
 * (replwire.codec.split.decode_part).  A transaction whose key (the position of its Begin, or of its first
 * Stream Start) is not in the part's outcomes, or a change whose xid the part dropped, gives no rows, as in
 * decode_part; a streamed change's facts are those given for its key (a streamed transaction in outcomes
 * without them -- origin, two-phase -- is declined).  The buffers are Arrow's: values in native byte order,
 * int32 offsets, validity bitmaps (None where no value is null).  Every read is bounds-checked (the scans,
 * the record reads); the output is proportional to the input, and a call stops taking transactions once the
 * rows or the text it wrote pass the caps given (a transaction that alone would pass 2 GiB of text is
 * declined). */

/* the column buffers (K_ names, K_VALIDITY, K_TEXT) come from replwire.codec.wire.gen.column_buffers */

/* a commit time's range that datetime holds (years 1-9999, microseconds from 2000-01-01), and the shift to
 * microseconds from 1970-01-01 */
#define TIME_FIRST INT64_C(-63082281600000000)
#define TIME_LAST INT64_C(252455615999999999)
#define TIME_SHIFT INT64_C(946684800000000)

typedef struct {
    Buf b[K_COUNT];
    Py_ssize_t rows, names, cells;
} Columns;

static int col_put(Columns *c, int k, const void *v, Py_ssize_t size)
{
    return put_bytes(&c->b[k], (const char *)v, size);
}

static int col_i64(Columns *c, int k, int64_t v) { return col_put(c, k, &v, 8); }
static int col_i32(Columns *c, int k, int32_t v) { return col_put(c, k, &v, 4); }
static int col_ok(Columns *c, int k, int ok)
{
    char v = (char)ok;
    return col_put(c, k, &v, 1);
}

/* the end of a text buffer as the next offset (its size checked against int32 by the caller) */
static int col_end(Columns *c, int off, int text)
{
    return col_i32(c, off, (int32_t)c->b[text].len);
}

/* the buffers' lengths at the start of a transaction, to go back to */
typedef struct {
    Py_ssize_t len[K_COUNT], rows, names, cells;
} Mark;

static void col_mark(const Columns *c, Mark *m)
{
    for (int k = 0; k < K_COUNT; k++) m->len[k] = c->b[k].len;
    m->rows = c->rows;
    m->names = c->names;
    m->cells = c->cells;
}

static void col_back(Columns *c, const Mark *m)
{
    for (int k = 0; k < K_COUNT; k++) c->b[k].len = m->len[k];
    c->rows = m->rows;
    c->names = m->names;
    c->cells = m->cells;
}

/* whether a text buffer, or the list of unchanged TOASTed columns' names (its int32 offsets count names,
 * and a name may be empty), is past what int32 offsets reach */
static int col_too_big(const Columns *c)
{
    for (size_t i = 0; i < sizeof K_TEXT / sizeof K_TEXT[0]; i++)
        if (c->b[K_TEXT[i]].len > INT32_MAX) return 1;
    return c->names > INT32_MAX || c->cells > INT32_MAX;
}

static Py_ssize_t col_text(const Columns *c)
{
    Py_ssize_t most = 0;
    for (size_t i = 0; i < sizeof K_TEXT / sizeof K_TEXT[0]; i++) most = MOST(most, c->b[K_TEXT[i]].len);
    return most;
}

/* The plan of the last relation looked up (rows of one relation tend to come together). */
typedef struct {
    uint64_t oid;
    int known;
    Plan *plan;
    PyObject *capsule;  /* a strong reference: plan lives while converters (Python code) run */
    int32_t slot;
} Looked;

/* plans' entry for relation oid (oid -> (capsule, slot[, relation])), borrowed: the entry, NULL for none
 * (*error set if it is an error) */
static PyObject *plan_entry(PyObject *plans, uint64_t oid, int *error)
{
    *error = 0;
    PyObject *key = PyLong_FromUnsignedLongLong(oid);
    if (key == NULL) {
        *error = 1;
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(plans, key);
    Py_DECREF(key);
    if (entry == NULL) {
        *error = PyErr_Occurred() != NULL;
        return NULL;
    }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 2 || PyTuple_GET_SIZE(entry) > 3) {
        PyErr_SetString(PyExc_ValueError, "rows_columns: a plan is (capsule, slot[, relation])");
        *error = 1;
        return NULL;
    }
    return entry;
}

/* the plan and slot of relation oid from plans: 1, 0 none, -1 an error */
static int look_up(Looked *l, PyObject *plans, uint64_t oid)
{
    if (l->known && l->oid == oid) return 1;
    int error;
    PyObject *entry = plan_entry(plans, oid, &error);
    if (entry == NULL) return error ? -1 : 0;
    Plan *plan = PyCapsule_GetPointer(PyTuple_GET_ITEM(entry, 0), PLAN_NAME);
    if (plan == NULL) return -1;
    long slot = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
    if (slot == -1 && PyErr_Occurred()) return -1;
    if (slot < 0 || slot > INT32_MAX / 3) {
        PyErr_SetString(PyExc_ValueError, "rows_columns: a slot out of range");
        return -1;
    }
    Py_XSETREF(l->capsule, Py_NewRef(PyTuple_GET_ITEM(entry, 0)));
    l->oid = oid;
    l->known = 1;
    l->plan = plan;
    l->slot = (int32_t)slot;
    return 1;
}

/* the count columns of the tuple at d[at:n] as cells: each column's kind (n, u, t or b) and its bytes (none
 * for n and u); where they start as the row's at-buffer ``k``; 1, 0 declined (cut short, an unknown kind),
 * -1 an error */
static int column_cells(Columns *c, int k, const unsigned char *d, Py_ssize_t n, Py_ssize_t at, Py_ssize_t count)
{
    Field col[N_TupleColumn];
    if (col_i32(c, k, (int32_t)c->cells)) return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        at = r_TupleColumn(d, n, at, col);
        if (at < 0) return 0;
        char kind = (char)col[F_TupleColumn_kind].v;
        if (kind != 'n' && kind != 'u' && kind != 't' && kind != 'b') return 0;
        if (col_put(c, K_CELL_KIND, &kind, 1)) return -1;
        if ((kind == 't' || kind == 'b')
            && col_put(c, K_CELL, d + col[F_TupleColumn_data].at, col[F_TupleColumn_data].len))
            return -1;
        if (col_end(c, K_CELL_OFF, K_CELL)) return -1;
        c->cells++;
    }
    return 1;
}

/* one row change (d[0:n], its tag an Insert's, an Update's or a Delete's; ins: inside a stream block, where
 * it carries its xid, set in *xid) at lsn and position: its row written (the transaction's facts come after
 * it), as JSON images or, with ``cells``, as cells (the new tuple's and the old or key tuple's; the JSON
 * images empty, unchanged_toast empty lists); 1, 0 declined, -1 an error */
static int column_change(Columns *c, Looked *l, PyObject *plans, int pv, int ins, const unsigned char *d,
                         Py_ssize_t n, uint64_t lsn, int64_t position, int cells, Py_ssize_t **toasted,
                         Py_ssize_t *toasted_cap, uint64_t *xid)
{
    Field F[N_CHANGE];
    RowChange rc;
    if (!scan_change(d, n, pv, ins, F, &rc)) return 0;
    if (ins) {
        if (!F[rc.xid].present) return 0;
        *xid = F[rc.xid].v;
    }
    const int op = rc.op;
    const Py_ssize_t relation = rc.relation, key = rc.key, old = rc.old, new_ = rc.new_;
    if (lsn > (uint64_t)INT64_MAX) return 0;  /* an int64 column cannot hold it: the Python path says so */
    int r = look_up(l, plans, F[relation].v);
    if (r != 1) return r;
    Plan *plan = l->plan;
    if (!change_fits(F, &rc, plan->ncols)) return 0;
    if (plan->ncols > *toasted_cap) {
        Py_ssize_t *grown = PyMem_Realloc(*toasted, (size_t)plan->ncols * sizeof(Py_ssize_t));
        if (grown == NULL) return -1;
        *toasted = grown;
        *toasted_cap = plan->ncols;
    }
    if (col_i32(c, K_SHAPE, l->slot * 3 + op) || col_i64(c, K_LSN, (int64_t)lsn) || col_ok(c, K_LSN_OK, lsn != 0)
        || col_i64(c, K_POSITION, position))
        return -1;
    Py_ssize_t ntoasted = 0;
    int has[3] = {0, 0, 0};  /* new, old, key */
    r = 1;
    if (cells) {
        Py_ssize_t before = key >= 0 && F[key].present ? key : old >= 0 && F[old].present ? old : -1;
        has[0] = new_ >= 0;
        has[1] = before == old && before >= 0;
        has[2] = before >= 0;
        r = new_ >= 0 ? column_cells(c, K_NEW_AT, d, n, F[new_].at, plan->ncols) : col_i32(c, K_NEW_AT, -1) ? -1 : 1;
        if (r == 1)
            r = before >= 0 ? column_cells(c, K_OLD_AT, d, n, F[before].at, plan->ncols)
                            : col_i32(c, K_OLD_AT, -1) ? -1 : 1;
    } else if (new_ >= 0) {
        r = put_row(&c->b[K_NEW], plan, d, n, F[new_].at, plan->ncols, 0, -1, NULL, *toasted, &ntoasted);
        has[0] = 1;
    }
    if (r == 1 && key >= 0 && F[key].present) {
        r = put_row(&c->b[K_KEY], plan, d, n, F[key].at, plan->ncols, 1, -1, NULL, NULL, NULL);
        has[2] = 1;
    } else if (r == 1 && old >= 0 && F[old].present) {
        r = put_row(&c->b[K_OLD], plan, d, n, F[old].at, plan->ncols, 0, -1, NULL, NULL, NULL);
        if (r == 1) r = put_row(&c->b[K_KEY], plan, d, n, F[old].at, plan->ncols, 1, -1, NULL, NULL, NULL);
        has[1] = has[2] = 1;
    }
    if (r != 1) return r;
    static const int OK[3] = {K_NEW_OK, K_OLD_OK, K_KEY_OK}, OFF[3] = {K_NEW_OFF, K_OLD_OFF, K_KEY_OFF},
                     TEXT[3] = {K_NEW, K_OLD, K_KEY};
    for (int i = 0; i < 3; i++)
        if (col_ok(c, OK[i], has[i]) || col_end(c, OFF[i], TEXT[i])) return -1;
    /* unchanged_toast: the names (a list, empty or not) where there is a new row, else null */
    for (Py_ssize_t i = 0; i < ntoasted; i++) {
        Py_ssize_t size;
        const char *name = PyUnicode_AsUTF8AndSize(plan->cols[(*toasted)[i]].name, &size);
        if (name == NULL) return -1;
        if (col_put(c, K_NAME, name, size) || col_end(c, K_NAME_OFF, K_NAME)) return -1;
    }
    c->names += ntoasted;
    if (col_ok(c, K_TOAST_OK, has[0]) || col_i32(c, K_TOAST_OFF, (int32_t)c->names)) return -1;
    c->rows++;
    return 1;
}

/* the transaction's facts for its rows from ``first`` on: xid, commit LSN, end LSN, commit time, and the
 * rows' subxid (a streamed transaction's change's xid; ``streamed`` false: none) */
static int column_facts(Columns *c, Py_ssize_t first, uint64_t xid, uint64_t commit_lsn, uint64_t end_lsn,
                        int64_t time, int streamed, uint64_t subxid)
{
    int valid = time >= TIME_FIRST && time <= TIME_LAST;
    int64_t unix_time = valid ? time + TIME_SHIFT : 0;
    for (Py_ssize_t i = first; i < c->rows; i++)
        if (col_i64(c, K_XID, (int64_t)xid) || col_i64(c, K_COMMIT_LSN, (int64_t)commit_lsn)
            || col_i64(c, K_END_LSN, (int64_t)end_lsn) || col_i64(c, K_COMMIT_TIME, unix_time) || col_ok(c, K_TIME_OK, valid)
            || col_i64(c, K_SUBXID, streamed ? (int64_t)subxid : 0) || col_ok(c, K_SUBXID_OK, streamed))
            return -1;
    return 0;
}

/* whether decode_part gives the rows of the transaction at key with xid: its outcome is in ``outcomes``
 * and its xid not among the dropped subtransactions of it; 1, 0, -1 an error */
static int column_wanted(PyObject *outcomes, PyObject *dropped, int64_t key, uint64_t xid)
{
    PyObject *k = PyLong_FromLongLong(key);
    if (k == NULL) return -1;
    int r = PyDict_Contains(outcomes, k);
    if (r == 1 && PyDict_GET_SIZE(dropped)) {
        PyObject *subxacts = PyDict_GetItemWithError(dropped, k);
        if (subxacts != NULL) {
            Py_INCREF(subxacts);  /* (borrowed; the containment test may run Python code) */
            PyObject *x = PyLong_FromUnsignedLongLong(xid);
            int in = x == NULL ? -1 : PySequence_Contains(subxacts, x);
            Py_XDECREF(x);
            Py_DECREF(subxacts);
            r = in < 0 ? -1 : !in;
        } else if (PyErr_Occurred()) r = -1;
    }
    Py_DECREF(k);
    return r;
}

/* the int64 facts of the streamed transaction at key k from facts (key -> (xid, commit LSN, end LSN, commit
 * time)): 1 (set), 0 none there, or ones an int64 column cannot hold (the Python path's), -1 an error */
static int stream_facts(PyObject *facts, PyObject *k, uint64_t *xid, uint64_t *commit_lsn, uint64_t *end_lsn,
                        int64_t *time)
{
    PyObject *entry = PyDict_GetItemWithError(facts, k);
    if (entry == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) {
        PyErr_SetString(PyExc_ValueError, "rows_columns: facts are (xid, commit_lsn, end_lsn, commit_time)");
        return -1;
    }
    uint64_t *words[3] = {xid, commit_lsn, end_lsn};
    for (int i = 0; i < 3; i++) {
        unsigned long long v = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(entry, i));
        if (v == (unsigned long long)-1 && PyErr_Occurred()) goto out_of_range;
        if (v > (unsigned long long)INT64_MAX) return 0;
        *words[i] = v;
    }
    long long t = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 3));
    if (t == -1 && PyErr_Occurred()) goto out_of_range;
    *time = t;
    return 1;
out_of_range:
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
    PyErr_Clear();
    return 0;
}

/* The transaction a Stream Start of xid (first: its first_segment flag) at position opens or goes on, keyed
 * as the router keys it: a first segment (also one sent again after a resume) or an xid streams does not
 * hold opens it, its key the position (*fresh: streams takes it at the block's Stream Stop), else its key is
 * the one streams holds.  And what of its changes decode_part gives: none unless its key is in outcomes
 * (*wanted), then with its facts, and not those of the subtransactions dropped holds for it (*subxacts, a
 * new reference, or NULL for none).  1, 0 declined (a transaction in outcomes without facts: one with an
 * origin, or two-phase), -1 an error */
typedef struct {
    int64_t key;
    int fresh, wanted;
    PyObject *subxacts;
    uint64_t xid, commit_lsn, end_lsn;
    int64_t time;
} Block;

static int stream_open(Block *b, PyObject *streams, PyObject *outcomes, PyObject *dropped, PyObject *facts,
                       uint64_t xid, int first, int64_t position)
{
    PyObject *x = PyLong_FromUnsignedLongLong(xid);
    if (x == NULL) return -1;
    PyObject *held = PyDict_GetItemWithError(streams, x);
    Py_DECREF(x);
    if (held == NULL && PyErr_Occurred()) return -1;
    b->fresh = first || held == NULL;
    if (b->fresh) {
        b->key = position;
    } else {
        long long key = PyLong_AsLongLong(held);
        if (key == -1 && PyErr_Occurred()) return -1;
        b->key = key;
    }
    PyObject *k = PyLong_FromLongLong(b->key);
    if (k == NULL) return -1;
    int r = b->wanted = PyDict_Contains(outcomes, k);
    if (r == 1) r = stream_facts(facts, k, &b->xid, &b->commit_lsn, &b->end_lsn, &b->time);
    if (r == 1 && PyDict_GET_SIZE(dropped)) {
        b->subxacts = PyDict_GetItemWithError(dropped, k);
        if (b->subxacts != NULL) Py_INCREF(b->subxacts);
        else if (PyErr_Occurred()) r = -1;
    }
    Py_DECREF(k);
    return r < 0 ? -1 : b->wanted ? r : 1;
}

/* a Stream Commit's or Stream Abort's (commit) end of the streamed transaction of xid in streams, as the
 * router ends it: a Stream Commit's and a top-level Stream Abort's (subxid the xid) take it out (a Stream
 * Abort of an xid streams does not hold changes nothing).  1, 0 declined (a Stream Commit of an xid
 * streams does not hold: the Python path says what it is), -1 an error */
static int stream_end(PyObject *streams, int commit, uint64_t xid, uint64_t subxid)
{
    PyObject *x = PyLong_FromUnsignedLongLong(xid);
    if (x == NULL) return -1;
    int r = PyDict_Contains(streams, x);
    if (r == 1 && (commit || subxid == xid)) r = PyDict_DelItem(streams, x) < 0 ? -1 : 1;
    else if (r == 0) r = !commit;
    Py_DECREF(x);
    return r;
}

/* Whether the Relation message d[0:n] of a stream block (its tag, the streamed xid, then the rest) is the
 * one the plan of its relation was made for: the rest is byte for byte that of the Relation message the
 * plans' entry holds (its third item: the relation as sent outside a stream, the tag then the rest), so
 * that the plan and the decoder's caches stay what they are.  1, 0 not (or no such entry: the Python
 * path's), -1 an error */
static int stream_relation(PyObject *plans, int pv, const unsigned char *d, Py_ssize_t n)
{
    Field F[N_Relation];
    if (!s_Relation(d, n, pv, 1, F) || !F[F_Relation_xid].present) return 0;
    int error;
    PyObject *entry = plan_entry(plans, F[F_Relation_relation_id].v, &error);
    if (entry == NULL) return error ? -1 : 0;
    if (PyTuple_GET_SIZE(entry) != 3 || !PyBytes_Check(PyTuple_GET_ITEM(entry, 2))) return 0;
    PyObject *sent = PyTuple_GET_ITEM(entry, 2);
    const Py_ssize_t m = PyBytes_GET_SIZE(sent);
    /* (n >= 5: the scan read the tag and the xid) */
    return m >= 1 && n == m + 4 && memcmp(d + 5, PyBytes_AS_STRING(sent) + 1, (size_t)(m - 1)) == 0;
}

/* streams[xid] = key */
static int stream_put(PyObject *streams, uint64_t xid, int64_t key)
{
    PyObject *x = PyLong_FromUnsignedLongLong(xid), *k = PyLong_FromLongLong(key);
    int r = x == NULL || k == NULL ? -1 : PyDict_SetItem(streams, x, k);
    Py_XDECREF(x);
    Py_XDECREF(k);
    return r;
}

/* a buffer as bytes, a validity buffer as its bitmap (None when every row is valid) */
static PyObject *column_bytes(const Columns *c, int k)
{
    const Buf *b = &c->b[k];
    int validity = 0;
    for (size_t i = 0; i < sizeof K_VALIDITY / sizeof K_VALIDITY[0]; i++) validity |= K_VALIDITY[i] == k;
    if (!validity) return PyBytes_FromStringAndSize(b->p, b->len);
    Py_ssize_t all = 1;
    for (Py_ssize_t i = 0; i < b->len; i++) all &= b->p[i];
    if (all) Py_RETURN_NONE;
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (b->len + 7) / 8);
    if (bits == NULL) return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(bits);
    memset(p, 0, (size_t)PyBytes_GET_SIZE(bits));
    for (Py_ssize_t i = 0; i < b->len; i++)
        if (b->p[i]) p[i >> 3] |= (unsigned char)(1u << (i & 7));
    return bits;
}

/* rows_columns(data, final, plans, proto_version, frame, origin, outcomes, dropped, max_rows, max_text[,
 * cells[, streams, facts[, relations]]]) ->
 * (consumed, records, rows, declined, buffers): the whole plain transactions at the start of data -- COPY-CSV
 * rows, or capture records laid out as ``frame`` says (see rows_run; ``final``: data ends the input) -- and,
 * given ``streams`` and ``facts``, the whole stream blocks of streamed transactions and their Stream Commits
 * and Stream Aborts, as the change rows' column buffers (a tuple in the order of the K_ enum; with ``cells``,
 * the row images as cells: per row the index of its new tuple's first cell and its old or key tuple's, -1
 * for none, and per cell its kind and its bytes, every tuple of a relation as many cells as its plan has
 * columns); plans maps a relation id to (its rows_plan capsule, its slot: a row's shape is slot * 3 + 0
 * insert, 1 update, 2 delete); origin is the position of data's first byte (a row's position is origin plus
 * its record's offset in data, a transaction's key that of its Begin); outcomes and dropped are the part's
 * (decode_part).  ``streams`` is the router's (top-level xid -> key of the open streamed transactions), kept
 * as the router keeps it over the records taken; ``facts`` maps the key of each streamed transaction in
 * outcomes that the column path may write (no origin, not two-phase) to its (xid, commit LSN, end LSN,
 * commit time): a streamed change's facts are its transaction's outcome's, its subxid its own xid.  Given
 * ``relations`` (a list), a block may hold Relation messages that a plan's entry holds as its third item
 * (see stream_relation): each one taken is appended to it (its bytes), for the caller's decoder.  It
 * stops after the transaction or block that reaches max_rows rows or max_text bytes of any text buffer.
 * consumed is where the records not taken start, records how many were taken, declined whether the record
 * there is one for the Python path (else more input is needed, or a cap was reached). */
static PyObject *c_rows_columns(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int final, pv;
    PyObject *plans, *framing, *outcomes, *dropped, *streams = NULL, *facts = NULL, *relations = NULL;
    long long origin;
    Py_ssize_t max_rows, max_text;
    int cells = 0;
    Frame frame = {0};
    if (!PyArg_ParseTuple(args, "y*pO!iOLO!O!nn|pO!O!O!:rows_columns", &view, &final, &PyDict_Type, &plans, &pv,
                          &framing, &origin, &PyDict_Type, &outcomes, &PyDict_Type, &dropped, &max_rows, &max_text,
                          &cells, &PyDict_Type, &streams, &PyDict_Type, &facts, &PyList_Type, &relations))
        return NULL;
    int capture = framing != Py_None;
    if (capture && frame_of(framing, &frame, "rows_columns") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (origin < 0 || origin > INT64_MAX - view.len) {
        PyErr_SetString(PyExc_ValueError, "rows_columns: origin out of range");
        PyBuffer_Release(&view);
        return NULL;
    }
    /* stream blocks only where both are given, and the protocol has them (the decoder refuses them before 2) */
    const int streaming = streams != NULL && facts != NULL && pv >= 2;
    if (capture && CRC_TABLE[0][1] == 0) crc_init();
    if (HEX['f'] != 15) hex_init();
    const unsigned char *s = view.buf;
    Py_ssize_t size = view.len, pos = 0, row_cap = 0, records = 0, toasted_cap = 0;
    int declined = 0;
    unsigned char *row = NULL;
    Py_ssize_t *toasted = NULL;
    Looked looked = {0};
    Columns c = {0};
    Block block = {0};
    PyObject *result = NULL;
    for (int k = 0; k < K_COUNT; k++)
        if (out_init(&c.b[k], 4096)) goto nomem;
    static const int OFFSETS[] = {K_NEW_OFF, K_OLD_OFF, K_KEY_OFF, K_TOAST_OFF, K_NAME_OFF, K_CELL_OFF};
    for (size_t i = 0; i < sizeof OFFSETS / sizeof OFFSETS[0]; i++)
        if (col_i32(&c, OFFSETS[i], 0)) goto nomem;
    while (pos < size && c.rows < max_rows && col_text(&c) < max_text) {
        Py_ssize_t at = pos, taken = 0;
        int opened = 0;  /* 1 a plain transaction, 2 a stream block */
        uint64_t xid = 0;
        int64_t key = 0;
        Mark mark;
        col_mark(&c, &mark);
        const Py_ssize_t remembered = relations != NULL ? PyList_GET_SIZE(relations) : 0;
        Py_CLEAR(block.subxacts);
        for (;;) {
            if (at >= size) {
                if (final && opened) goto decline;  /* a transaction the input cuts: the Python path's */
                goto more;
            }
            uint64_t lsn;
            Py_ssize_t n, end;
            const unsigned char *d;
            int r = next_record(capture ? &frame : NULL, s, size, at, final, &lsn, &d, &n, &end, &row, &row_cap);
            if (r < 0) goto nomem;
            if (r == 2) goto more;
            if (r == 0 || n == 0) goto decline;  /* (a torn tail or a bad record: the Python reader's) */
            Field F[MOST(MOST(N_Begin, N_Commit), MOST(N_StreamStart, MOST(N_StreamCommit, N_StreamAbort)))];
            int64_t position = (int64_t)origin + at;
            taken++;
            at = end;
            if (!opened) {
                if (d[0] == TAG_Begin && s_Begin(d, n, pv, 0, F)) {
                    xid = F[F_Begin_xid].v;
                    key = position;
                    opened = 1;
                    continue;
                }
                if (!streaming) goto decline;
                if (d[0] == TAG_StreamStart && s_StreamStart(d, n, pv, 0, F)) {
                    xid = F[F_StreamStart_xid].v;
                    r = stream_open(&block, streams, outcomes, dropped, facts, xid, F[F_StreamStart_first_segment].v != 0,
                                    position);
                    if (r < 0) goto nomem;
                    if (r == 0) goto decline;
                    opened = 2;
                    continue;
                }
                int commit = d[0] == TAG_StreamCommit;
                if (commit ? s_StreamCommit(d, n, pv, 0, F) : d[0] == TAG_StreamAbort && s_StreamAbort(d, n, pv, 0, F)) {
                    r = stream_end(streams, commit, commit ? F[F_StreamCommit_xid].v : F[F_StreamAbort_xid].v,
                                   commit ? 0 : F[F_StreamAbort_subxid].v);
                    if (r < 0) goto nomem;
                    if (r == 0) goto decline;
                    records += taken;
                    pos = at;
                    break;
                }
                goto decline;
            }
            if (d[0] == TAG_Insert || d[0] == TAG_Update || d[0] == TAG_Delete) {
                Mark before;
                if (opened == 2) col_mark(&c, &before);
                uint64_t subxid = 0;
                r = column_change(&c, &looked, plans, pv, opened == 2, d, n, lsn, position, cells, &toasted,
                                  &toasted_cap, &subxid);
                if (r < 0) goto nomem;
                if (r == 0) goto decline;
                if (col_too_big(&c)) {  /* past int32 offsets: the Python path takes it, if it comes first */
                    if (pos == 0) goto decline;
                    goto more;
                }
                if (opened == 2) {  /* a streamed change: its facts now, or no row */
                    int keep = block.wanted;
                    if (keep && block.subxacts != NULL) {
                        PyObject *x = PyLong_FromUnsignedLongLong(subxid);
                        int in = x == NULL ? -1 : PySequence_Contains(block.subxacts, x);
                        Py_XDECREF(x);
                        if (in < 0) goto nomem;
                        keep = !in;
                    }
                    if (!keep) col_back(&c, &before);
                    else if (column_facts(&c, c.rows - 1, block.xid, block.commit_lsn, block.end_lsn, block.time, 1,
                                          subxid))
                        goto nomem;
                }
                continue;
            }
            if (opened == 2 && d[0] == TAG_Relation && relations != NULL) {
                /* the Relation a streamed transaction sends again, as the decoder has it: for the decoder's
                 * cache (the caller's), no change to the plans */
                r = stream_relation(plans, pv, d, n);
                if (r < 0) goto nomem;
                if (r == 0) goto decline;
                PyObject *sent = PyBytes_FromStringAndSize((const char *)d, n);
                if (sent == NULL || PyList_Append(relations, sent) < 0) {
                    Py_XDECREF(sent);
                    goto nomem;
                }
                Py_DECREF(sent);
                continue;
            }
            if (opened == 2) {
                if (d[0] != TAG_StreamStop || !s_StreamStop(d, n, pv, 1, F)) goto decline;
                if (block.fresh && stream_put(streams, xid, block.key) < 0) goto nomem;
                records += taken;
                pos = at;
                break;
            }
            if (d[0] != TAG_Commit || !s_Commit(d, n, pv, 0, F)) goto decline;
            uint64_t commit_lsn = F[F_Commit_commit_lsn].v, end_lsn = F[F_Commit_end_lsn].v;
            if (commit_lsn > (uint64_t)INT64_MAX || end_lsn > (uint64_t)INT64_MAX) goto decline;
            r = column_wanted(outcomes, dropped, key, xid);
            if (r < 0) goto nomem;
            if (r == 0) col_back(&c, &mark);  /* sent again after a resume, or dropped: no rows */
            else if (column_facts(&c, mark.rows, xid, commit_lsn, end_lsn, (int64_t)F[F_Commit_commit_time].v, 0, 0))
                goto nomem;
            records += taken;
            pos = at;
            break;
        }
        continue;
    decline:
        declined = 1;
    more:
        col_back(&c, &mark);
        if (relations != NULL && PyList_SetSlice(relations, remembered, PyList_GET_SIZE(relations), NULL) < 0)
            goto nomem;
        break;
    }
    PyObject *buffers = PyTuple_New(K_COUNT);
    if (buffers == NULL) goto done;
    for (int k = 0; k < K_COUNT; k++) {
        PyObject *b = column_bytes(&c, k);
        if (b == NULL) {
            Py_DECREF(buffers);
            goto done;
        }
        PyTuple_SET_ITEM(buffers, k, b);
    }
    result = Py_BuildValue("(nnniN)", pos, records, c.rows, declined, buffers);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    Py_XDECREF(block.subxacts);
    PyMem_Free(row);
    PyMem_Free(toasted);
    Py_XDECREF(looked.capsule);
    for (int k = 0; k < K_COUNT; k++)
        if (c.b[k].p != NULL) out_free(&c.b[k]);
    PyBuffer_Release(&view);
    return result;
}
