/* The C twin of replwire.codec.stream.debezium's lines: a row change's Debezium event written from its wire
 * tuples, as DebeziumEvents.lines writes it.  Hand-written C, put into the compiled codec's source by
 * replwire.codec.wire.gen.c_module after the JSON writer's twin, whose row writing it uses.
 *
 * The events of the row changes inside a transaction are rendered as a run (rows_body with debezium set, in
 * codec/decode.c) while the transaction is open: per change its op, LSN, table (the source block's
 * "schema", "table" and "txId" keys, which the Debezium plan holds where a JSON lines plan holds its line
 * starts), before, after and unchanged TOAST.  rows_join_debezium writes the events once the transaction
 * commits: the source block of the commit, the transaction's xid, the time each event is made, and the
 * transaction block with its total and per-table orders, which go on from the Python writer's counts.
 * The changes DebeziumEvents.lines leaves to the typed dicts are declined: an update that sent its old key
 * (a key change is split in three), an old key with values outside the key, a value the row writer does
 * not write (and a relation with two columns of one name, which gets no plan). */

/* Debezium's unavailable.value.placeholder default, as a JSON string */
#define PLACEHOLDER "\"__debezium_unavailable_value\""

/* A row image as an event's before or after (DebeziumEvents._image): every column of the TupleData whose
 * items start at ``at``, as put_row writes it, but an unchanged TOASTed value taken from the TupleData at
 * ``fill`` (the old row of REPLICA IDENTITY FULL; -1: none) or else written as the placeholder, its
 * column's index then appended to toasted (when not NULL).  1 written, 0 declined, -1 an error. */
static int put_image(Buf *b, const Plan *plan, const unsigned char *d, Py_ssize_t n, Py_ssize_t at,
                     Py_ssize_t fill, Py_ssize_t *toasted, Py_ssize_t *ntoasted)
{
    return put_row(b, plan, d, n, at, plan->ncols, 0, fill, PLACEHOLDER, toasted, ntoasted);
}

/* whether every column of the TupleData at ``at`` outside the replica identity key is NULL (a delete's old key,
 * which becomes "before" with every column of the table): 1, 0 not (or it does not read) */
static int only_key_values(const Plan *plan, const unsigned char *d, Py_ssize_t n, Py_ssize_t at)
{
    Field col[N_TupleColumn];
    for (Py_ssize_t i = 0; i < plan->ncols; i++) {
        at = r_TupleColumn(d, n, at, col);
        if (at < 0) return 0;
        if (!plan->cols[i].is_key && (int)col[F_TupleColumn_kind].v != 'n') return 0;
    }
    return 1;
}

/* An event's record in a run: DEBEZIUM_HEAD -- eight uint32: the subtransaction that made it, the op
 * ('c', 'u', 'd'), the LSN's low and high halves (0: none), and the lengths of the table's keys, before,
 * after and the unchanged TOAST key (",\"unchanged_toast\":[...]", or nothing) -- then those four. */
#define DEBEZIUM_HEAD (8 * (Py_ssize_t)sizeof(uint32_t))

/* a scanned row change (d[0:n], fields F, its relation's Debezium plan) at lsn as a run's record appended to
 * b; toasted has room for the relation's columns.  1, 0 declined (b may hold part of it), -1 an error */
static int put_event_record(Buf *b, const Plan *plan, const Field *F, const RowChange *rc, const unsigned char *d,
                            Py_ssize_t n, uint64_t lsn, uint32_t subxid, Py_ssize_t *toasted)
{
    static const char OPS[3] = {'c', 'u', 'd'};
    const Py_ssize_t at = b->len;
    const int key = rc->key >= 0 && F[rc->key].present, old = rc->old >= 0 && F[rc->old].present;
    uint32_t head[8] = {subxid, (uint32_t)OPS[rc->op], (uint32_t)lsn, (uint32_t)(lsn >> 32), 0, 0, 0, 0};
    Py_ssize_t ntoasted = 0, mark;
    int r = 1;
    if (rc->op == 1 && key) return 0;  /* an update that sent its old key: perhaps a key change, split in three */
    if (rc->op == 2 && key && !only_key_values(plan, d, n, F[rc->key].at)) return 0;
    if (put_bytes(b, (const char *)head, DEBEZIUM_HEAD)) return -1;
    PyObject *names = plan->start[0];
    if (put_bytes(b, PyBytes_AS_STRING(names), PyBytes_GET_SIZE(names))) return -1;
    mark = b->len;
    if (rc->op == 0 || (rc->op == 1 && !old)) {  /* an insert, an update with no old row: after only */
        if (put_bytes(b, "null", 4)) return -1;
        head[5] = 4;
        r = put_image(b, plan, d, n, F[rc->new_].at, -1, toasted, &ntoasted);
    } else if (rc->op == 1) {  /* an update with the old row: the new row's unchanged TOAST taken from it */
        r = put_image(b, plan, d, n, F[rc->old].at, -1, NULL, NULL);
        head[5] = (uint32_t)(b->len - mark);
        if (r == 1) r = put_image(b, plan, d, n, F[rc->new_].at, F[rc->old].at, toasted, &ntoasted);
    } else {  /* a delete: before only, from the old row or the old key (every column) */
        if (key || old) r = put_image(b, plan, d, n, F[key ? rc->key : rc->old].at, -1, NULL, NULL);
        else if (put_bytes(b, "null", 4)) return -1;
        head[5] = (uint32_t)(b->len - mark);
        if (r == 1 && put_bytes(b, "null", 4)) return -1;
    }
    if (r != 1) return r;
    if (b->len - at > (Py_ssize_t)UINT32_MAX) return 0;  /* (more than a record's lengths hold) */
    head[6] = (uint32_t)(b->len - mark - head[5]);
    mark = b->len;
    if (ntoasted) {
        if (put_bytes(b, ",\"unchanged_toast\":[", 20)) return -1;
        for (Py_ssize_t i = 0; i < ntoasted; i++) {
            PyObject *name = plan->cols[toasted[i]].key;
            if ((i && put_bytes(b, ",", 1)) || put_bytes(b, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name) - 1))
                return -1;  /* (the key without its ':') */
        }
        if (put_bytes(b, "]", 1)) return -1;
    }
    head[4] = (uint32_t)PyBytes_GET_SIZE(names);
    head[7] = (uint32_t)(b->len - mark);
    memcpy(b->p + at, head, sizeof head);
    return 1;
}

/* the event record of run r[0:size] at *at: its head set and *at moved past it, 1; 0 at the run's end; -1
 * not a record of a Debezium run (a ValueError set) */
static int event_record(const unsigned char *r, Py_ssize_t size, Py_ssize_t *at, uint32_t head[8])
{
    if (*at == size) return 0;
    if (size - *at < DEBEZIUM_HEAD) goto bad;
    memcpy(head, r + *at, DEBEZIUM_HEAD);
    Py_ssize_t body = (Py_ssize_t)head[4] + head[5] + head[6] + head[7];
    if (body > size - *at - DEBEZIUM_HEAD || (head[1] != 'c' && head[1] != 'u' && head[1] != 'd')) goto bad;
    *at += DEBEZIUM_HEAD + body;
    return 1;
bad:
    PyErr_SetString(PyExc_ValueError, "rows_join_debezium: not a Debezium run of rows_body");
    return -1;
}

/* the time now in microseconds since 1970, as time.time_ns() // 1000 */
static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* per_table[table] += 1 (table: the names of an event's table, decoded): the new count, or -1 with an error */
static Py_ssize_t count_event(PyObject *per_table, const char *names, Py_ssize_t k)
{
    PyObject *table = PyUnicode_DecodeUTF8(names, k, "strict");
    if (table == NULL) return -1;
    PyObject *had = PyDict_GetItemWithError(per_table, table);
    Py_ssize_t count = had == NULL ? (PyErr_Occurred() ? -2 : 0) : PyLong_AsSsize_t(had);
    PyObject *now = count < 0 ? NULL : PyLong_FromSsize_t(count + 1);
    int r = now == NULL ? -1 : PyDict_SetItem(per_table, table, now);
    Py_DECREF(table);
    Py_XDECREF(now);
    return r < 0 ? -1 : count + 1;
}

/* per_table[table] = count (table: as count_event has it): 0, or -1 with an error */
static int set_count(PyObject *per_table, const char *names, Py_ssize_t k, Py_ssize_t count)
{
    PyObject *table = PyUnicode_DecodeUTF8(names, k, "strict");
    if (table == NULL) return -1;
    PyObject *now = PyLong_FromSsize_t(count);
    int r = now == NULL ? -1 : PyDict_SetItem(per_table, table, now);
    Py_DECREF(table);
    Py_XDECREF(now);
    return r;
}

/* The events of a Debezium run r[0:size] appended to out as rows_join_debezium writes them (see there):
 * head[0:nh], xid[0:nx], tail[0:nt] as there, the subtransactions skip[0:nskip] (sorted) left out, *total
 * and per_table counted on.  0, or -1 with an error set (a ValueError: not a Debezium run). */
static int put_events(Buf *out, const unsigned char *r, Py_ssize_t size, const char *head, Py_ssize_t nh,
                      const char *xid, Py_ssize_t nx, const char *tail, Py_ssize_t nt, const uint32_t *skip,
                      Py_ssize_t nskip, PyObject *per_table, Py_ssize_t *total, int tombstones)
{
    uint32_t h[8];
    Py_ssize_t at = 0;
    int got;
    /* the table of the last events, its names in r (events of one table come in runs): counted here, and put
     * in per_table when another table's event comes and at the end, not once per event */
    const char *last = NULL;
    Py_ssize_t last_len = 0, last_count = 0;
    for (;;) {
        const Py_ssize_t start = at;
        got = event_record(r, size, &at, h);
        if (got <= 0) break;
        if (dropped_xid(skip, nskip, h[0])) continue;
        const char *names = (const char *)r + start + DEBEZIUM_HEAD, *before = names + h[4], *after = before + h[5],
                   *toast = after + h[6];
        const uint64_t lsn = (uint64_t)h[2] | ((uint64_t)h[3] << 32);
        Py_ssize_t count;
        if (last != NULL && last_len == (Py_ssize_t)h[4] && memcmp(last, names, h[4]) == 0)
            count = ++last_count;
        else {
            if (last != NULL && set_count(per_table, last, last_len, last_count) < 0) return -1;
            count = count_event(per_table, names, h[4]);
            if (count < 0) return -1;
            last = names;
            last_len = h[4];
            last_count = count;
        }
        ++*total;
        PUTS(out, "{\"before\":");
        PUT(out, before, h[5]);
        PUTS(out, ",\"after\":");
        PUT(out, after, h[6]);
        PUT(out, head, nh);
        if (lsn) {
            PUTS(out, "\\\"");
            if (put_u64(out, lsn)) goto nomem;
            PUTS(out, "\\\"]\"");
        } else PUTS(out, "null]\"");
        PUT(out, names, h[4]);
        PUT(out, xid, nx);
        PUTS(out, ",\"lsn\":");
        if (lsn) {
            if (put_u64(out, lsn)) goto nomem;
        } else PUTS(out, "null");
        PUTS(out, ",\"xmin\":null},\"op\":\"");
        char op = (char)h[1];
        PUT(out, &op, 1);
        const int64_t now = now_us();
        PUTS(out, "\",\"ts_ms\":");
        if (put_i64(out, now / 1000)) goto nomem;
        PUTS(out, ",\"ts_us\":");
        if (put_i64(out, now)) goto nomem;
        PUTS(out, ",\"ts_ns\":");
        if (put_i64(out, now * 1000)) goto nomem;
        PUT(out, toast, h[7]);
        PUT(out, tail, nt);
        if (put_i64(out, *total)) goto nomem;
        PUTS(out, ",\"data_collection_order\":");
        if (put_i64(out, count)) goto nomem;
        PUTS(out, "}}\n");
        if (op == 'd' && tombstones) PUTS(out, "null\n");
    }
    if (got == 0 && last != NULL && set_count(per_table, last, last_len, last_count) < 0) return -1;
    return got;
nomem:
    PyErr_NoMemory();
    return -1;
}

/* rows_join_debezium(run, head, xid, tail, dropped, per_table, total, tombstones) -> (bytes, total): the
 * event lines of a Debezium run (rows_body's, debezium set) as DebeziumEvents.lines writes them, in UTF-8,
 * each ending in a newline: ``head`` the source block up to "sequence"'s change LSN, ``xid`` the
 * transaction's (its text), ``tail`` the transaction block up to total_order's value; the events of the
 * subtransactions in ``dropped`` (a set of ints, or None) left out; ``total`` the events of the transaction
 * before these, ``per_table`` (a dict, updated) its events per table (by the table's source keys, str);
 * a delete followed by a tombstone (null) if ``tombstones``.  Gives the lines and the new total. */
static PyObject *c_rows_join_debezium(PyObject *self, PyObject *args)
{
    Py_buffer run, head, xid, tail;
    PyObject *dropped, *per_table, *result = NULL;
    Py_ssize_t total;
    int tombstones;
    if (!PyArg_ParseTuple(args, "y*y*y*y*OO!np:rows_join_debezium", &run, &head, &xid, &tail, &dropped,
                          &PyDict_Type, &per_table, &total, &tombstones))
        return NULL;
    uint32_t *skip = NULL;
    Py_ssize_t nskip = 0;
    Buf b = {0};
    if (dropped_xids(dropped, "rows_join_debezium", &skip, &nskip)) goto done;
    if (out_init(&b, run.len + run.len / 2 + 64)) {
        PyErr_NoMemory();
        goto done;
    }
    if (put_events(&b, run.buf, run.len, head.buf, head.len, xid.buf, xid.len, tail.buf, tail.len, skip, nskip,
                   per_table, &total, tombstones) == 0) {
        PyObject *lines = PyBytes_FromStringAndSize(b.p, b.len);
        if (lines != NULL) result = Py_BuildValue("(Nn)", lines, total);
    }
done:
    out_free(&b);
    PyMem_Free(skip);
    PyBuffer_Release(&run);
    PyBuffer_Release(&head);
    PyBuffer_Release(&xid);
    PyBuffer_Release(&tail);
    return result;
}
