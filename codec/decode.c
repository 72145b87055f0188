/* The C twin of replwire.codec.decode's row path: the records of a pgoutput stream (COPY-CSV rows or capture
 * file records, read by the readers' twins) to the JSON lines of ``replwire decode``.
 *
 * Hand-written C, put into the compiled codec's source by replwire.codec.wire.gen.c_module after the twins
 * whose pieces it uses: the decoder's (a row change scanned and checked), the JSON writer's (its rows) and
 * the readers' (the next record).  It knows no message layout: every message is read by the scan functions
 * generated from the declarations (s_Begin, s_Commit, s_Origin, the two-phase ones and the decoder
 * twin's).  What is written here is the order of a plain transaction (Begin, an Origin right after it, row
 * changes, Commit) or of a two-phase one committed at once (Begin Prepare ... Prepare, Commit Prepared), and
 * each change's line around its row images, the Commit's keys in the middle.
 *
 * Two entry points share it.  rows_run takes whole plain transactions and writes their lines.  rows_body
 * takes the row changes inside a transaction the Python side holds open -- a stream block's, a prepared
 * transaction's, a plain one rows_run left -- and renders their lines as a run, which the Python side keeps
 * in that transaction's buffer (spilling it to disk with the rest) and rows_join finishes once it commits,
 * leaving out the subtransactions aborted meanwhile; the Python side follows the transactions, so nothing is
 * read twice when the two take turns.
 *
 * Each takes only what it writes exactly as the Python writer does: every relation known (a plan from
 * rows_plan), every tuple as wide as its relation, every value of a form the JSON writer writes in C or
 * through the plan's function.  At anything else -- a Relation, a stream block's start or end, a two-phase
 * transaction's ends, a value of another form, a row that is not (lsn, xid, data), a capture record that is
 * torn or fails its checksum, bytes that do not scan, text not valid in its encoding -- rows_run stops at the start
 * of that transaction, rows_body at that record, and says so; the caller hands that input to the Python
 * path, which gives the exact result or the exact error.  The only memory they take is the decoded row (at
 * most half the input row) and the output (proportional to the input). */

/* One change buffered until its Commit: its line up to the "lsn" value in tx[begin:split], the rest from
 * its first row image on in tx[split:end]; the Commit's keys go between the two. */
typedef struct {
    Py_ssize_t begin, split, end;
} Pending;

typedef struct {
    Buf tx;
    Pending *pending;
    Py_ssize_t npending, cap;
    Py_ssize_t events;  /* Debezium's: the changes whose events tx holds (a run, see DEBEZIUM_HEAD) */
    Py_ssize_t *toasted;
    Py_ssize_t toasted_cap;
} Scratch;

/* room in w for the unchanged TOASTed columns of a row of plan's relation: 0, -1 no memory */
static int toast_room(Scratch *w, const Plan *plan)
{
    if (plan->ncols <= w->toasted_cap) return 0;
    Py_ssize_t *grown = PyMem_Realloc(w->toasted, (size_t)plan->ncols * sizeof(Py_ssize_t));
    if (grown == NULL) return -1;
    w->toasted = grown;
    w->toasted_cap = plan->ncols;
    return 0;
}

/* the rest of a scanned row change's line (d[0:n], fields F) by plan, from its first row image on: "new",
 * "key" or "old" and "key", "unchanged_toast", the end; appended to b: 1, 0 declined, -1 an error */
static int put_images(Buf *b, Scratch *w, const Plan *plan, const Field *F, const RowChange *rc,
                      const unsigned char *d, Py_ssize_t n)
{
    const Py_ssize_t key = rc->key, old = rc->old, new_ = rc->new_;
    if (toast_room(w, plan)) return -1;
    Py_ssize_t ntoasted = 0;
    int r = 1;
    if (new_ >= 0) {
        PUTS(b, ",\"new\":");
        r = put_row(b, plan, d, n, F[new_].at, plan->ncols, 0, -1, NULL, w->toasted, &ntoasted);
    }
    if (r == 1 && key >= 0 && F[key].present) {
        PUTS(b, ",\"key\":");
        r = put_row(b, plan, d, n, F[key].at, plan->ncols, 1, -1, NULL, NULL, NULL);
    } else if (r == 1 && old >= 0 && F[old].present) {
        PUTS(b, ",\"old\":");
        r = put_row(b, plan, d, n, F[old].at, plan->ncols, 0, -1, NULL, NULL, NULL);
        if (r == 1) {
            PUTS(b, ",\"key\":");
            r = put_row(b, plan, d, n, F[old].at, plan->ncols, 1, -1, NULL, NULL, NULL);
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
    return 1;
nomem:
    return -1;
}

/* ,"lsn": and a change's LSN (0: none) */
static int put_lsn_key(Buf *b, uint64_t lsn)
{
    PUTS(b, ",\"lsn\":");
    if (lsn) return put_lsn(b, lsn);
    PUTS(b, "null");
    return 0;
nomem:
    return -1;
}

/* the JSON line of a scanned row change (d[0:n], fields F) of a plain transaction with xid, by plan,
 * buffered in w until the Commit: 1, 0 declined, -1 an error */
static int put_change(Scratch *w, const Plan *plan, const Field *F, const RowChange *rc,
                      const unsigned char *d, Py_ssize_t n, uint64_t xid, uint64_t lsn)
{
    if (!change_fits(F, rc, plan->ncols)) return 0;
    if (w->npending == w->cap) {
        Py_ssize_t cap = w->cap ? w->cap * 2 : 64;
        Pending *grown = PyMem_Realloc(w->pending, (size_t)cap * sizeof(Pending));
        if (grown == NULL) return -1;
        w->pending = grown;
        w->cap = cap;
    }
    Buf *b = &w->tx;
    Pending *line = &w->pending[w->npending];
    line->begin = b->len;
    PUTO(b, plan->start[rc->op]);
    if (put_u64(b, xid) || put_lsn_key(b, lsn)) goto nomem;
    line->split = b->len;
    int r = put_images(b, w, plan, F, rc, d, n);
    if (r != 1) return r;
    line->end = b->len;
    w->npending++;
    return 1;
nomem:
    return -1;
}

/* the plan of a scanned row change's relation, a strong reference (write_change runs the plan's converters,
 * Python code, which may drop plans' entry): the capsule with *plan set, or NULL -- an error set, or none:
 * a relation without a plan.  A relation whose changes are left out (a table filter's, see
 * replwire.codec.decode) has an int for its plan, the number of its columns: that int is returned, *plan set
 * to NULL and *skip_cols to the number (else -1). */
static PyObject *plan_of(PyObject *plans, const Field *F, const RowChange *rc, const Plan **plan,
                         Py_ssize_t *skip_cols)
{
    PyObject *oid = PyLong_FromUnsignedLongLong(F[rc->relation].v);
    if (oid == NULL) return NULL;
    PyObject *capsule = PyDict_GetItemWithError(plans, oid);
    Py_DECREF(oid);
    if (capsule == NULL) return NULL;
    *skip_cols = -1;
    if (PyLong_CheckExact(capsule)) {
        Py_ssize_t ncols = PyLong_AsSsize_t(capsule);
        if (ncols < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "rows_run: a skipped relation's columns");
            return NULL;
        }
        *plan = NULL;
        *skip_cols = ncols;
        return Py_NewRef(capsule);
    }
    *plan = PyCapsule_GetPointer(capsule, PLAN_NAME);
    if (*plan == NULL) return NULL;
    return Py_NewRef(capsule);
}

/* one row change (d[0:n], its tag an Insert's, an Update's or a Delete's) of a plain transaction with xid,
 * at lsn, buffered as its JSON line or (debezium) its event's record: 1 buffered, 2 left out (its relation's
 * plan says so, and the change is one the Python path would take: as wide as the relation), 0 declined, -1
 * an error */
static int change(Scratch *w, PyObject *plans, int pv, const unsigned char *d, Py_ssize_t n, uint64_t xid,
                  uint64_t lsn, int debezium)
{
    Field F[N_CHANGE];
    RowChange rc;
    const Plan *plan;
    Py_ssize_t skip_cols;
    if (!scan_change(d, n, pv, 0, F, &rc)) return 0;
    PyObject *capsule = plan_of(plans, F, &rc, &plan, &skip_cols);
    if (capsule == NULL) return PyErr_Occurred() ? -1 : 0;
    int r;
    if (plan == NULL) r = change_fits(F, &rc, skip_cols) ? 2 : 0;
    else if (!debezium) r = put_change(w, plan, F, &rc, d, n, xid, lsn);
    else if (!change_fits(F, &rc, plan->ncols)) r = 0;
    else {
        const Py_ssize_t at = w->tx.len;
        r = toast_room(w, plan) ? -1 : put_event_record(&w->tx, plan, F, &rc, d, n, lsn, 0, w->toasted);
        if (r == 1) w->events++;
        else w->tx.len = at;
    }
    Py_DECREF(capsule);
    return r;
}

/* What rows_run writes Debezium's events with: the source block's start, up to the commit's "ts_ms" value,
 * and its middle, from "snapshot" to the opening of "sequence"'s text; whether a delete is followed by a
 * tombstone; the commit LSN of the last transaction whose events were written (have_last: one was). */
typedef struct {
    Py_buffer start, mid;
    int on, tombstones, have_last;
    uint64_t last;
} Events;

#define PG_EPOCH_US 946684800000000LL  /* 2000-01-01 00:00:00 UTC in microseconds since 1970 */

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* the events of a plain transaction (its run in w->tx) with xid, committed at commit_lsn and commit_us
 * (microseconds since 1970), appended to out: 0, -1 an error */
static int put_transaction_events(Buf *out, Events *ev, const Scratch *w, uint64_t xid, uint64_t commit_lsn,
                                  int64_t commit_us)
{
    Buf head = {0}, ids = {0};
    int r = -1;
    PyObject *per_table = PyDict_New();
    if (per_table == NULL || out_init(&head, 256) || out_init(&ids, 64)) goto nomem;
    PUT(&head, ev->start.buf, ev->start.len);
    if (put_i64(&head, floor_div(commit_us, 1000))) goto nomem;
    PUTS(&head, ",\"ts_us\":");
    if (put_i64(&head, commit_us)) goto nomem;
    PUTS(&head, ",\"ts_ns\":");
    if (put_i64(&head, commit_us * 1000)) goto nomem;
    PUT(&head, ev->mid.buf, ev->mid.len);
    if (ev->have_last) {
        PUTS(&head, "\\\"");
        if (put_u64(&head, ev->last)) goto nomem;
        PUTS(&head, "\\\",");
    } else PUTS(&head, "null,");
    if (put_u64(&ids, xid)) goto nomem;  /* the xid, then the transaction block up to total_order's value */
    const Py_ssize_t nx = ids.len;
    PUTS(&ids, ",\"transaction\":{\"id\":\"");
    if (put_u64(&ids, xid)) goto nomem;
    PUTS(&ids, ":");
    if (put_u64(&ids, commit_lsn)) goto nomem;
    PUTS(&ids, "\",\"total_order\":");
    Py_ssize_t total = 0;
    r = put_events(out, (const unsigned char *)w->tx.p, w->tx.len, head.p, head.len, ids.p, nx, ids.p + nx,
                   ids.len - nx, NULL, 0, per_table, &total, ev->tombstones);
    ev->have_last = 1;
    ev->last = commit_lsn;
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    Py_XDECREF(per_table);
    out_free(&head);
    out_free(&ids);
    return r;
}

/* What rows_run and rows_body say of the record at s[at:size] where they stop: 0 (None given) they did not
 * decline it (more input is needed, or a cap was reached); else the record itself, where it reads as the
 * Python reader reads it -- (lsn, data, size): the caller hands it to the Python path without reading it
 * again -- or 1: the Python reader reads from there (a torn or bad record, a row that is not (lsn, xid,
 * data)).  A new reference, or NULL with an error set. */
static PyObject *declined_record(const Frame *frame, const unsigned char *s, Py_ssize_t size, Py_ssize_t at,
                                 int final, int declined, unsigned char **row, Py_ssize_t *row_cap)
{
    uint64_t lsn;
    Py_ssize_t n, end;
    const unsigned char *d;
    if (!declined || at >= size) return PyLong_FromLong(declined);
    int r = next_record(frame, s, size, at, final, &lsn, &d, &n, &end, row, row_cap);
    if (r < 0) return PyErr_NoMemory();
    if (r != 1) return PyLong_FromLong(1);
    return Py_BuildValue("(Ky#n)", (unsigned long long)lsn, (const char *)d, n, end - at);
}

/* rows_run(data, final, plans, proto_version, last_end, frame, events[, two_phase[, encoding]]) -> (consumed, lines,
 * records, transactions, changes, repeated, last_end, declined, last_commit): the whole transactions of the
 * records in
 * data -- COPY-CSV rows, or capture file records laid out as ``frame`` says (a tuple of the Frame's fields) --
 * (``final``: data ends at the end of the input, so a last row without a line end is whole), their JSON
 * lines in lines (bytes, UTF-8: written as they are to a UTF-8 stream, not decoded and encoded again), or
 * with ``events`` -- None, or (start, mid, tombstones, last_commit) as Events has them (last_commit -1: none)
 * and plans of Debezium's form -- their Debezium events; consumed is where the rows not taken start,
 * declined what declined_record says of the record there (declined: a transaction for the Python path
 * starts there).  last_end is the end LSN of the last transaction printed (-1: none); a transaction ending
 * at or before it is counted in repeated, not printed.  A relation whose plan is an int (its number of
 * columns) is left out: its changes are passed over, and a transaction whose every change was is neither
 * printed nor counted (as the Python path's table filter does).  last_commit is the commit LSN of the last
 * transaction whose events were written (-1: none).  With ``two_phase`` (no prepared transaction waits for
 * its Commit Prepared on the Python side, so a Prepare's gid is free), a two-phase transaction whose Commit
 * Prepared comes right after its Prepare -- Begin Prepare, an Origin right after it, row changes, Prepare,
 * Commit Prepared of the same gid and xid (or xid 0) -- is taken whole as well: the Commit Prepared's LSNs
 * and time are its commit's, and its lines carry its gid, as the Python path writes the Transaction it
 * makes of it; one whose Rollback Prepared of the same gid comes right after its Prepare is taken and
 * prints nothing; any other record after the Prepare leaves the transaction to the Python path.  A Prepare
 * and a Rollback Prepared complete positions too, which the caller's reach of the stream must count (a
 * capture's start is checked against it): last_end is raised to the later of the two ends of one taken
 * -- no transaction printed later ends before it, the stream being in the order of its ends -- and a
 * Commit Prepared's end, which last_end then holds, is past its Prepare's.  ``encoding`` (ENC_*, UTF-8 if not
 * given) is what an Origin's name and a gid are in, written as the plans' text is (put_string). */
static PyObject *c_rows_run(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int final, pv, two_phase = 0, enc = ENC_UTF8;
    PyObject *plans, *framing, *events;
    long long last_in, last_commit = -1;
    Frame frame = {0};
    Events ev = {0};
    if (!PyArg_ParseTuple(args, "y*pO!iLOO|pi:rows_run", &view, &final, &PyDict_Type, &plans, &pv, &last_in, &framing,
                          &events, &two_phase, &enc))
        return NULL;
    if (enc < 0 || enc > ENC_LAST) {
        PyErr_SetString(PyExc_ValueError, "rows_run: not an encoding of the row writer");
        PyBuffer_Release(&view);
        return NULL;
    }
    int capture = framing != Py_None;
    if (events != Py_None) {
        if (!PyTuple_Check(events)) PyErr_SetString(PyExc_TypeError, "rows_run: events must be a tuple or None");
        if (PyErr_Occurred() || !PyArg_ParseTuple(events, "y*y*pL:rows_run events", &ev.start, &ev.mid,
                                                  &ev.tombstones, &last_commit)) {
            PyBuffer_Release(&view);
            return NULL;
        }
        ev.on = 1;
        ev.have_last = last_commit >= 0;
        ev.last = (uint64_t)last_commit;
    }
    if (capture && frame_of(framing, &frame, "rows_run") < 0) {
        if (ev.on) {
            PyBuffer_Release(&ev.start);
            PyBuffer_Release(&ev.mid);
        }
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
    /* the Origin's name, the Commit's keys, a Prepare's gid as it is and as a JSON string */
    Buf out = {0}, origin = {0}, tail = {0}, gid = {0}, gid_json = {0};
    PyObject *result = NULL;
    /* (the output grows as it is written: a try that declines at once must not cost a big allocation) */
    if (out_init(&out, 1 << 16) || out_init(&w.tx, 4096) || out_init(&origin, 64) || out_init(&tail, 256)
        || out_init(&gid, 64) || out_init(&gid_json, 64))
        goto nomem;
    while (pos < size) {
        Py_ssize_t at = pos, taken = 0;
        int state = 0;  /* 0 before the Begin, 1 inside, 2 after a Prepare (waiting for its Commit Prepared) */
        int prepared = 0;  /* a two-phase transaction: Begin Prepare ... Prepare, Commit Prepared */
        uint64_t xid = 0, commit_lsn = 0, end_lsn = 0, prepare_end = 0;
        int64_t commit_time = 0;
        Py_ssize_t left_out = 0;  /* its changes of relations left out (a table filter's) */
        w.tx.len = 0;
        w.npending = w.events = 0;
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
                if (d[0] == TAG_BeginPrepare && two_phase) {
                    Field P[N_BeginPrepare];
                    if (!s_BeginPrepare(d, n, pv, 0, P)) goto decline;
                    xid = P[F_BeginPrepare_xid].v;
                    prepared = 1;
                } else {
                    if (d[0] != TAG_Begin || !s_Begin(d, n, pv, 0, F)) goto decline;
                    xid = F[F_Begin_xid].v;
                }
                state = 1;
                continue;
            }
            if (state == 2 && d[0] == TAG_RollbackPrepared) {  /* rolled back at once: nothing to print */
                Field R[N_RollbackPrepared];
                if (!s_RollbackPrepared(d, n, pv, 0, R)) goto decline;
                const Field *g = &R[F_RollbackPrepared_gid];
                if (g->len != gid.len || memcmp(d + g->at, gid.p, (size_t)gid.len) != 0) goto decline;
                uint64_t reach = R[F_RollbackPrepared_rollback_end_lsn].v;
                if (prepare_end > reach) reach = prepare_end;
                if (reach > (uint64_t)INT64_MAX) goto decline;  /* beyond what last_end passes */
                records += taken;
                pos = at;
                if (!have_last || reach > last_end) {
                    have_last = 1;
                    last_end = reach;
                }
                break;
            }
            if (state == 2) {  /* else only its Commit Prepared, of the same gid and xid, may follow the Prepare */
                Field K[N_CommitPrepared];
                if (d[0] != TAG_CommitPrepared || !s_CommitPrepared(d, n, pv, 0, K)) goto decline;
                const Field *g = &K[F_CommitPrepared_gid];
                if (g->len != gid.len || memcmp(d + g->at, gid.p, (size_t)gid.len) != 0) goto decline;
                if (K[F_CommitPrepared_xid].v != 0 && K[F_CommitPrepared_xid].v != xid) goto decline;
                commit_lsn = K[F_CommitPrepared_commit_lsn].v;
                end_lsn = K[F_CommitPrepared_end_lsn].v;
                commit_time = (int64_t)K[F_CommitPrepared_commit_time].v;
                goto commit;
            }
            if (d[0] == TAG_Origin && taken == 2) {  /* (the record after the Begin) */
                Field O[N_Origin];
                if (!s_Origin(d, n, pv, 0, O)) goto decline;
                r = put_string(&origin, d + O[F_Origin_name].at, O[F_Origin_name].len, enc);
                if (r < 0) goto nomem;
                if (r == 0) goto decline;
                continue;
            }
            if (d[0] == TAG_Insert || d[0] == TAG_Update || d[0] == TAG_Delete) {
                r = change(&w, plans, pv, d, n, xid, lsn, ev.on);
                if (r < 0) goto nomem;
                if (r == 0) goto decline;
                if (r == 2) left_out++;
                continue;
            }
            if (prepared) {  /* the Prepare: its gid kept for the Commit Prepared that must follow */
                Field P[N_Prepare];
                if (d[0] != TAG_Prepare || !s_Prepare(d, n, pv, 0, P)) goto decline;
                gid.len = gid_json.len = 0;  /* (copied: a COPY-CSV row is decoded into row, which the next
                                              * record reuses) */
                PUT(&gid, d + P[F_Prepare_gid].at, P[F_Prepare_gid].len);
                prepare_end = P[F_Prepare_end_lsn].v;
                r = put_string(&gid_json, d + P[F_Prepare_gid].at, P[F_Prepare_gid].len, enc);
                if (r < 0) goto nomem;
                if (r == 0) goto decline;
                state = 2;
                continue;
            }
            if (d[0] != TAG_Commit || !s_Commit(d, n, pv, 0, F)) goto decline;
            commit_lsn = F[F_Commit_commit_lsn].v;
            end_lsn = F[F_Commit_end_lsn].v;
            commit_time = (int64_t)F[F_Commit_commit_time].v;
        commit:
            /* the Commit (or Commit Prepared): print the transaction, unless a resume sent it again */
            if (end_lsn > (uint64_t)INT64_MAX) goto decline;  /* beyond what last_end passes */
            /* (its events' times in ns: int64) */
            if (ev.on && (commit_lsn > (uint64_t)INT64_MAX || commit_time > INT64_MAX / 1000 - PG_EPOCH_US
                          || commit_time < INT64_MIN / 1000 + PG_EPOCH_US))
                goto decline;
            records += taken;
            pos = at;
            transactions++;
            if (have_last && end_lsn <= last_end) {
                repeated++;
                break;
            }
            have_last = 1;
            last_end = end_lsn;
            if (left_out && (ev.on ? w.events : w.npending) == 0) {  /* every change left out: not printed, */
                transactions--;                                      /* nor counted (as the Python path does) */
                break;
            }
            if (ev.on) {
                if (put_transaction_events(&out, &ev, &w, xid, commit_lsn, commit_time + PG_EPOCH_US))
                    goto done;
                changes += w.events;
                break;
            }
            tail.len = 0;
            PUTS(&tail, ",\"commit_lsn\":");
            if (put_lsn(&tail, commit_lsn)) goto nomem;
            PUTS(&tail, ",\"commit_time\":");
            if (put_time(&tail, commit_time)) goto nomem;
            if (origin.len) {
                PUTS(&tail, ",\"origin\":");
                PUT(&tail, origin.p, origin.len);
            }
            if (prepared) {
                PUTS(&tail, ",\"gid\":");
                PUT(&tail, gid_json.p, gid_json.len);
            }
            for (Py_ssize_t i = 0; i < w.npending; i++) {
                Pending *line = &w.pending[i];
                if (put_bytes(&out, w.tx.p + line->begin, line->split - line->begin)
                    || put_bytes(&out, tail.p, tail.len)
                    || put_bytes(&out, w.tx.p + line->split, line->end - line->split))
                    goto nomem;
            }
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
    PyObject *at = declined_record(capture ? &frame : NULL, s, size, pos, final, declined, &row, &row_cap);
    if (at == NULL) {
        Py_DECREF(lines);
        goto done;
    }
    result = Py_BuildValue("(nNnnnnLNL)", pos, lines, records, transactions, changes, repeated,
                           have_last ? (long long)last_end : -1LL, at, ev.have_last ? (long long)ev.last : -1LL);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    PyMem_Free(row);
    out_free(&out);
    out_free(&w.tx);
    out_free(&origin);
    out_free(&tail);
    out_free(&gid);
    out_free(&gid_json);
    PyMem_Free(w.pending);
    PyMem_Free(w.toasted);
    PyBuffer_Release(&view);
    if (ev.on) {
        PyBuffer_Release(&ev.start);
        PyBuffer_Release(&ev.mid);
    }
    return result;
}

/* A run: the lines of row changes of a transaction not yet committed (its body, or a stream block's part of
 * it), as rows_body renders them and rows_join finishes them once it commits.  Each line is a record of
 * RUN_HEAD -- four uint32: the subtransaction that made it (0 outside a stream block) and the lengths of its
 * three pieces -- then the pieces: its start (up to "xid":), ",\"lsn\":" and its LSN, and the rest (",\"subxid\":"
 * in a stream block, the row images, the end and its newline).  rows_join puts the transaction's xid after
 * the start and its commit keys after the LSN. */
#define RUN_HEAD (4 * (Py_ssize_t)sizeof(uint32_t))
/* the most a run holds before rows_body hands it over (the next changes go to a run of their own) */
#define RUN_MOST ((Py_ssize_t)4 << 20)

/* a scanned row change (d[0:n], fields F) at lsn as a run's record appended to b, by plan: 1, 0 declined
 * (b may hold part of it), -1 an error */
static int put_run_line(Buf *b, Scratch *w, const Plan *plan, const Field *F, const RowChange *rc,
                        const unsigned char *d, Py_ssize_t n, uint64_t lsn, int streamed, uint32_t subxid)
{
    const Py_ssize_t at = b->len;
    uint32_t head[4] = {subxid, 0, 0, 0};
    PUT(b, head, RUN_HEAD);
    PUTO(b, plan->start[rc->op]);
    const Py_ssize_t start = b->len;
    if (put_lsn_key(b, lsn)) goto nomem;
    const Py_ssize_t lsn_end = b->len;
    if (streamed) {
        PUTS(b, ",\"subxid\":");
        if (put_u64(b, subxid)) goto nomem;
    }
    int r = put_images(b, w, plan, F, rc, d, n);
    if (r != 1) return r;
    if (b->len - lsn_end > (Py_ssize_t)UINT32_MAX) return 0;  /* (more than a record's length holds) */
    head[1] = (uint32_t)(start - at - RUN_HEAD);
    head[2] = (uint32_t)(lsn_end - start);
    head[3] = (uint32_t)(b->len - lsn_end);
    memcpy(b->p + at, head, sizeof head);
    return 1;
nomem:
    return -1;
}

/* subxids[subxid] += count: 0, -1 an error */
static int count_subxid(PyObject *subxids, uint32_t subxid, Py_ssize_t count)
{
    if (count == 0) return 0;
    PyObject *key = PyLong_FromUnsignedLong(subxid);
    if (key == NULL) return -1;
    PyObject *had = PyDict_GetItemWithError(subxids, key);
    Py_ssize_t before = 0;
    if (had != NULL) before = PyLong_AsSsize_t(had);
    PyObject *now = (had == NULL && PyErr_Occurred()) || before < 0 ? NULL : PyLong_FromSsize_t(before + count);
    int r = now == NULL ? -1 : PyDict_SetItem(subxids, key, now);
    Py_DECREF(key);
    Py_XDECREF(now);
    return r;
}

/* rows_body(data, final, plans, proto_version, streamed, frame, debezium) -> (consumed, run, records,
 * subxids, declined): the row changes at the start of the records in data (laid out as for rows_run) -- the
 * body of the transaction, or the stream block (``streamed``: each carries the streamed xid), open there --
 * as a run (bytes, see RUN_HEAD; with ``debezium``, of their Debezium events, see DEBEZIUM_HEAD and the
 * plans' form there) of at most about RUN_MOST bytes, and how many each subtransaction made ({subxid:
 * count}; subxid 0 outside a stream block).  It stops at the first record that is not a row change, or that
 * it declines as rows_run does (declined: what declined_record says of it, for the Python path), or where
 * more input is needed or the run is full (declined 0). */
static PyObject *c_rows_body(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int final, pv, streamed, debezium;
    PyObject *plans, *framing;
    Frame frame = {0};
    if (!PyArg_ParseTuple(args, "y*pO!ipOp:rows_body", &view, &final, &PyDict_Type, &plans, &pv, &streamed,
                          &framing, &debezium))
        return NULL;
    int capture = framing != Py_None;
    if (capture && frame_of(framing, &frame, "rows_body") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (capture && CRC_TABLE[0][1] == 0) crc_init();
    if (HEX['f'] != 15) hex_init();
    const unsigned char *s = view.buf;
    Py_ssize_t size = view.len, pos = 0, row_cap = 0, records = 0, same = 0;
    uint32_t last = 0;  /* the subtransaction of the last ``same`` changes, not yet counted in subxids */
    int declined = 0;
    unsigned char *row = NULL;
    Scratch w = {0};
    Buf *b = &w.tx;
    PyObject *result = NULL, *subxids = PyDict_New();
    if (subxids == NULL || out_init(b, 4096)) goto nomem;
    while (pos < size && b->len < RUN_MOST) {
        uint64_t lsn;
        Py_ssize_t n, end;
        const unsigned char *d;
        int r = next_record(capture ? &frame : NULL, s, size, pos, final, &lsn, &d, &n, &end, &row, &row_cap);
        if (r < 0) goto nomem;
        if (r == 2) break;
        Field F[N_CHANGE];
        RowChange rc;
        const Plan *plan;
        Py_ssize_t skip_cols;
        if (r == 0 || n == 0 || (d[0] != TAG_Insert && d[0] != TAG_Update && d[0] != TAG_Delete)
            || !scan_change(d, n, pv, streamed, F, &rc)) {
            declined = 1;
            break;
        }
        PyObject *capsule = plan_of(plans, F, &rc, &plan, &skip_cols);
        if (capsule == NULL) {
            if (PyErr_Occurred()) goto done;
            declined = 1;
            break;
        }
        if (plan == NULL) {  /* a relation left out: its changes here go to the Python side, which leaves them out */
            Py_DECREF(capsule);
            declined = 1;
            break;
        }
        const Py_ssize_t at = b->len;
        const uint32_t subxid = streamed ? (uint32_t)F[rc.xid].v : 0;
        if (!change_fits(F, &rc, plan->ncols)) r = 0;
        else if (!debezium) r = put_run_line(b, &w, plan, F, &rc, d, n, lsn, streamed, subxid);
        else r = toast_room(&w, plan) ? -1 : put_event_record(b, plan, F, &rc, d, n, lsn, subxid, w.toasted);
        Py_DECREF(capsule);
        if (r < 0) goto nomem;
        if (r == 0) {
            b->len = at;
            declined = 1;
            break;
        }
        if (subxid != last && same) {
            if (count_subxid(subxids, last, same)) goto done;
            same = 0;
        }
        last = subxid;
        same++;
        records++;
        pos = end;
    }
    if (count_subxid(subxids, last, same)) goto done;
    PyObject *run = PyBytes_FromStringAndSize(b->p, b->len);
    if (run == NULL) goto done;
    PyObject *at = declined_record(capture ? &frame : NULL, s, size, pos, final, declined, &row, &row_cap);
    if (at == NULL) {
        Py_DECREF(run);
        goto done;
    }
    result = Py_BuildValue("(nNnON)", pos, run, records, subxids, at);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    Py_XDECREF(subxids);
    PyMem_Free(row);
    out_free(b);
    PyMem_Free(w.toasted);
    PyBuffer_Release(&view);
    return result;
}

/* the record of run r[0:size] at *at: its head (subxid, lengths) and its end set, 1; 0 at the run's end;
 * -1 not a record of a run (a ValueError set) */
static int run_record(const unsigned char *r, Py_ssize_t size, Py_ssize_t *at, uint32_t head[4])
{
    if (*at == size) return 0;
    if (size - *at < RUN_HEAD) goto bad;
    memcpy(head, r + *at, RUN_HEAD);
    Py_ssize_t body = (Py_ssize_t)head[1] + (Py_ssize_t)head[2] + (Py_ssize_t)head[3];
    if (body > size - *at - RUN_HEAD) goto bad;
    *at += RUN_HEAD;
    return 1;
bad:
    PyErr_SetString(PyExc_ValueError, "rows_join: not a run of rows_body");
    return -1;
}

/* rows_join(run, xid, tail, dropped) -> bytes: the JSON lines of a run (rows_body's), each with the
 * transaction's xid after its start and its commit keys (``tail``: from ,"commit_lsn": on, as JsonLines
 * writes them) after its LSN, in UTF-8; the lines of the subtransactions in ``dropped`` (a set of ints, or
 * None) left out. */
static PyObject *c_rows_join(PyObject *self, PyObject *args)
{
    Py_buffer run, xid, tail;
    PyObject *dropped, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*O:rows_join", &run, &xid, &tail, &dropped)) return NULL;
    uint32_t *skip = NULL;
    Py_ssize_t nskip = 0;
    if (dropped_xids(dropped, "rows_join", &skip, &nskip)) goto done;
    const unsigned char *r = run.buf;
    uint32_t head[4];
    Py_ssize_t at = 0, total = 0;
    int got;
    while ((got = run_record(r, run.len, &at, head)) == 1) {  /* the size of the lines kept */
        at += (Py_ssize_t)head[1] + head[2] + head[3];
        if (dropped_xid(skip, nskip, head[0])) continue;
        Py_ssize_t line = (Py_ssize_t)head[1] + head[2] + head[3];
        if (total > PY_SSIZE_T_MAX - line - xid.len - tail.len) {
            PyErr_NoMemory();
            goto done;
        }
        total += line + xid.len + tail.len;
    }
    if (got < 0) goto done;
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto done;
    char *o = PyBytes_AS_STRING(result);
    at = 0;
    while (run_record(r, run.len, &at, head) == 1) {
        const unsigned char *p = r + at;
        at += (Py_ssize_t)head[1] + head[2] + head[3];
        if (dropped_xid(skip, nskip, head[0])) continue;
        memcpy(o, p, head[1]);
        o += head[1];
        memcpy(o, xid.buf, (size_t)xid.len);
        o += xid.len;
        memcpy(o, p + head[1], head[2]);
        o += head[2];
        memcpy(o, tail.buf, (size_t)tail.len);
        o += tail.len;
        memcpy(o, p + head[1] + head[2], head[3]);
        o += head[3];
    }
done:
    PyMem_Free(skip);
    PyBuffer_Release(&run);
    PyBuffer_Release(&xid);
    PyBuffer_Release(&tail);
    return result;
}
