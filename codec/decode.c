/* The C twin of replwire.codec.decode's row path: the records of a pgoutput stream (COPY-CSV rows or capture
 * file records, read by the readers' twins) to the JSON lines of ``replwire decode``.
 *
 * Hand-written C, put into the compiled codec's source by replwire.codec.wire.gen.c_module after the twins
 * whose pieces it uses: the decoder's (a row change scanned and checked), the JSON writer's (its rows) and
 * the readers' (the next record).  It knows no message layout: every message is read by the scan functions
 * generated from the declarations (s_Begin, s_Commit, s_Origin and the decoder twin's).  What is written
 * here is the order of a plain transaction (Begin, an Origin right after it, row changes, Commit), and each
 * change's line around its row images, the Commit's keys in the middle.
 *
 * rows_run takes whole transactions only: every message one of those, every relation known (a plan from
 * rows_plan), every tuple as wide as its relation, every value of a form the JSON writer writes exactly as
 * the Python writer does.  At anything else -- a Relation, a streamed block, a two-phase transaction, a
 * value of another form, a row that is not (lsn, xid, data), a capture record that is torn or fails its
 * checksum, bytes that do not scan, text that is not UTF-8 -- it stops at the start of that transaction (or
 * row) and says so; the caller hands that input to the Python path, which gives the exact result or the
 * exact error.  The only memory it takes is the decoded row (at most half the input row) and the output
 * (proportional to the input). */

/* One change buffered until its Commit: its line up to the "lsn" value in tx[begin:split], the rest from
 * its first row image on in tx[split:end]; the Commit's keys go between the two. */
typedef struct {
    Py_ssize_t begin, split, end;
} Pending;

typedef struct {
    Buf tx;
    Pending *pending;
    Py_ssize_t npending, cap;
    Py_ssize_t *toasted;
    Py_ssize_t toasted_cap;
} Scratch;

/* the JSON line of a scanned row change (d[0:n], fields F) by plan, buffered in w: 1, 0 declined, -1 an
 * error */
static int put_change(Scratch *w, const Plan *plan, const Field *F, const RowChange *rc,
                      const unsigned char *d, Py_ssize_t n, uint64_t xid, uint64_t lsn)
{
    const int op = rc->op;
    const Py_ssize_t key = rc->key, old = rc->old, new_ = rc->new_;
    if (!change_fits(F, rc, plan->ncols)) return 0;
    if (w->npending == w->cap) {
        Py_ssize_t cap = w->cap ? w->cap * 2 : 64;
        Pending *grown = PyMem_Realloc(w->pending, (size_t)cap * sizeof(Pending));
        if (grown == NULL) return -1;
        w->pending = grown;
        w->cap = cap;
    }
    if (plan->ncols > w->toasted_cap) {
        Py_ssize_t *grown = PyMem_Realloc(w->toasted, (size_t)plan->ncols * sizeof(Py_ssize_t));
        if (grown == NULL) return -1;
        w->toasted = grown;
        w->toasted_cap = plan->ncols;
    }
    Buf *b = &w->tx;
    Pending *line = &w->pending[w->npending];
    line->begin = b->len;
    PUTO(b, plan->start[op]);
    if (put_u64(b, xid)) goto nomem;
    PUTS(b, ",\"lsn\":");
    if (lsn) {
        if (put_lsn(b, lsn)) goto nomem;
    } else PUTS(b, "null");
    line->split = b->len;
    Py_ssize_t ntoasted = 0;
    int r = 1;
    if (new_ >= 0) {
        PUTS(b, ",\"new\":");
        r = put_row(b, plan, d, n, F[new_].at, plan->ncols, 0, w->toasted, &ntoasted);
    }
    if (r == 1 && key >= 0 && F[key].present) {
        PUTS(b, ",\"key\":");
        r = put_row(b, plan, d, n, F[key].at, plan->ncols, 1, NULL, NULL);
    } else if (r == 1 && old >= 0 && F[old].present) {
        PUTS(b, ",\"old\":");
        r = put_row(b, plan, d, n, F[old].at, plan->ncols, 0, NULL, NULL);
        if (r == 1) {
            PUTS(b, ",\"key\":");
            r = put_row(b, plan, d, n, F[old].at, plan->ncols, 1, NULL, NULL);
        }
    }
    if (r != 1) return r;
    if (ntoasted) {
        PUTS(b, ",\"unchanged_toast\":[");
        for (Py_ssize_t i = 0; i < ntoasted; i++) {
            PyObject *name = plan->cols[w->toasted[i]].key;
            if (i) PUTS(b, ",");
            PUT(b, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name) - 1);  /* the key without its ':' */
        }
        PUTS(b, "]");
    }
    PUTS(b, "}\n");
    line->end = b->len;
    w->npending++;
    return 1;
nomem:
    return -1;
}

/* one row change (d[0:n], its tag an Insert's, an Update's or a Delete's) of a transaction with xid, at
 * lsn: 1 buffered, 0 declined, -1 an error */
static int change(Scratch *w, PyObject *plans, int pv, const unsigned char *d, Py_ssize_t n, uint64_t xid,
                  uint64_t lsn)
{
    Field F[N_CHANGE];
    RowChange rc;
    if (!scan_change(d, n, pv, F, &rc)) return 0;
    PyObject *oid = PyLong_FromUnsignedLongLong(F[rc.relation].v);
    if (oid == NULL) return -1;
    PyObject *capsule = PyDict_GetItemWithError(plans, oid);
    Py_DECREF(oid);
    if (capsule == NULL) return PyErr_Occurred() ? -1 : 0;
    Plan *plan = PyCapsule_GetPointer(capsule, PLAN_NAME);
    if (plan == NULL) return -1;
    /* a strong reference: put_row runs the plan's converters (Python code), which may drop plans' entry */
    Py_INCREF(capsule);
    int r = put_change(w, plan, F, &rc, d, n, xid, lsn);
    Py_DECREF(capsule);
    return r;
}

/* rows_run(data, final, plans, proto_version, last_end, frame) -> (consumed, lines, records, transactions,
 * changes, repeated, last_end, declined): the whole transactions of the records in data -- COPY-CSV rows, or
 * capture file records laid out as ``frame`` says (a tuple of the Frame's fields) -- (``final``: data ends
 * at the end of the input, so a last row without a line end is whole), their JSON lines in lines (bytes,
 * UTF-8: written as they are to a UTF-8 stream, not decoded and encoded again); consumed
 * is where the rows not taken start, declined whether the row there is one for the Python path (else more
 * input is needed).  last_end is the end LSN of the last transaction printed (-1: none); a transaction
 * ending at or before it is counted in repeated, not printed. */
static PyObject *c_rows_run(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int final, pv;
    PyObject *plans, *framing;
    long long last_in;
    Frame frame = {0};
    if (!PyArg_ParseTuple(args, "y*pO!iLO:rows_run", &view, &final, &PyDict_Type, &plans, &pv, &last_in, &framing))
        return NULL;
    int capture = framing != Py_None;
    if (capture && frame_of(framing, &frame, "rows_run") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (capture && CRC_TABLE[0][1] == 0) crc_init();
    if (HEX['f'] != 15) hex_init();
    const unsigned char *s = view.buf;
    Py_ssize_t size = view.len, pos = 0, row_cap = 0;
    Py_ssize_t records = 0, transactions = 0, changes = 0, repeated = 0;
    int have_last = last_in >= 0, declined = 0;
    uint64_t last_end = have_last ? (uint64_t)last_in : 0;
    unsigned char *row = NULL;
    Scratch w = {0};
    Buf out = {0}, origin = {0};
    PyObject *result = NULL;
    if (out_init(&out, size / 2 + 256) || out_init(&w.tx, 4096) || out_init(&origin, 64)) goto nomem;
    while (pos < size) {
        Py_ssize_t at = pos, taken = 0;
        int state = 0;  /* 0 before the Begin, 1 inside */
        uint64_t xid = 0;
        w.tx.len = 0;
        w.npending = 0;
        origin.len = 0;  /* the Origin's name as a JSON string, if one came right after the Begin */
        for (;;) {
            if (at >= size) goto more;
            uint64_t lsn;
            Py_ssize_t n, end;
            const unsigned char *d;
            int r = next_record(capture ? &frame : NULL, s, size, at, final, &lsn, &d, &n, &end, &row, &row_cap);
            if (r < 0) goto nomem;
            if (r == 2) goto more;
            if (r == 0 || n == 0) goto decline;  /* (a torn tail or a bad record: the Python reader's) */
            Field F[MOST(N_Begin, N_Commit)];
            taken++;
            at = end;
            if (state == 0) {
                if (d[0] != TAG_Begin || !s_Begin(d, n, pv, 0, F)) goto decline;
                xid = F[F_Begin_xid].v;
                state = 1;
                continue;
            }
            if (d[0] == TAG_Origin && taken == 2) {  /* (the record after the Begin) */
                Field O[N_Origin];
                if (!s_Origin(d, n, pv, 0, O)) goto decline;
                r = put_string(&origin, d + O[F_Origin_name].at, O[F_Origin_name].len);
                if (r < 0) goto nomem;
                if (r == 0) goto decline;
                continue;
            }
            if (d[0] == TAG_Insert || d[0] == TAG_Update || d[0] == TAG_Delete) {
                r = change(&w, plans, pv, d, n, xid, lsn);
                if (r < 0) goto nomem;
                if (r == 0) goto decline;
                continue;
            }
            if (d[0] != TAG_Commit || !s_Commit(d, n, pv, 0, F)) goto decline;
            /* the Commit: print the transaction, unless a resume sent it again */
            uint64_t end_lsn = F[F_Commit_end_lsn].v;
            if (end_lsn > (uint64_t)INT64_MAX) goto decline;  /* beyond what last_end passes */
            records += taken;
            pos = at;
            transactions++;
            if (have_last && end_lsn <= last_end) {
                repeated++;
                break;
            }
            have_last = 1;
            last_end = end_lsn;
            Buf tail;
            tail.p = tail.small;
            tail.len = 0;
            tail.cap = sizeof tail.small;
            PUTS(&tail, ",\"commit_lsn\":");
            if (put_lsn(&tail, F[F_Commit_commit_lsn].v)) goto nomem;
            PUTS(&tail, ",\"commit_time\":");
            if (put_time(&tail, (int64_t)F[F_Commit_commit_time].v)) goto nomem;
            if (origin.len) {
                PUTS(&tail, ",\"origin\":");
                PUT(&tail, origin.p, origin.len);
            }
            for (Py_ssize_t i = 0; i < w.npending; i++) {
                Pending *line = &w.pending[i];
                if (put_bytes(&out, w.tx.p + line->begin, line->split - line->begin)
                    || put_bytes(&out, tail.p, tail.len)
                    || put_bytes(&out, w.tx.p + line->split, line->end - line->split)) {
                    out_free(&tail);
                    goto nomem;
                }
            }
            out_free(&tail);
            changes += w.npending;
            break;
        }
        continue;
    decline:
        declined = 1;
    more:
        break;
    }
    transactions -= repeated;
    PyObject *lines = PyBytes_FromStringAndSize(out.p, out.len);  /* (UTF-8: what a text stream would write) */
    if (lines == NULL) goto done;
    result = Py_BuildValue("(nNnnnnLi)", pos, lines, records, transactions, changes, repeated,
                           have_last ? (long long)last_end : -1LL, declined);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    PyMem_Free(row);
    out_free(&out);
    out_free(&w.tx);
    out_free(&origin);
    PyMem_Free(w.pending);
    PyMem_Free(w.toasted);
    PyBuffer_Release(&view);
    return result;
}
