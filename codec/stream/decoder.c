/* The C twin of replwire.codec.stream.decoder's checks of a row change: an Insert's, Update's or Delete's
 * fields found by the scan functions generated from the declarations (s_Insert, s_Update, s_Delete, see
 * replwire.codec.wire.gen.c_scan), and the decoder's check that every tuple is as wide as its Relation; and
 * the aborted subtransactions, whose changes the writers of runs leave out.
 * Hand-written C, put into the compiled codec's source by replwire.codec.wire.gen.c_module (before the
 * other twins, which use it). */

#define MOST(a, b) ((a) > (b) ? (a) : (b))

/* Where a scanned row change's parts lie in its Fields: its op (0 insert, 1 update, 2 delete), the streamed
 * xid's field (present only inside a stream block), the relation id's field, and the new, key and old
 * images' fields (-1: an image its kind cannot have). */
typedef struct {
    int op;
    Py_ssize_t xid, relation, new_, key, old;
} RowChange;

#define N_CHANGE MOST(N_Insert, MOST(N_Update, N_Delete))

/* a row change (d[0:n], its tag an Insert's, an Update's or a Delete's; ins: inside a stream block, where
 * it carries the streamed xid) scanned into F (N_CHANGE Fields): 1 (c set), 0 it does not scan */
static int scan_change(const unsigned char *d, Py_ssize_t n, int pv, int ins, Field *F, RowChange *c)
{
    if (d[0] == TAG_Insert) {
        if (!s_Insert(d, n, pv, ins, F)) return 0;
        *c = (RowChange){0, F_Insert_xid, F_Insert_relation_id, F_Insert_new, -1, -1};
    } else if (d[0] == TAG_Update) {
        if (!s_Update(d, n, pv, ins, F)) return 0;
        *c = (RowChange){1, F_Update_xid, F_Update_relation_id, F_Update_new, F_Update_key, F_Update_old};
    } else {
        if (!s_Delete(d, n, pv, ins, F)) return 0;
        *c = (RowChange){2, F_Delete_xid, F_Delete_relation_id, -1, F_Delete_key, F_Delete_old};
    }
    return 1;
}

/* the decoder's check: every tuple of the change as wide as its Relation (ncols columns) */
static int change_fits(const Field *F, const RowChange *c, Py_ssize_t ncols)
{
    const Py_ssize_t images[3] = {c->new_, c->key, c->old};
    for (int i = 0; i < 3; i++)
        if (images[i] >= 0 && F[images[i]].present && (Py_ssize_t)F[images[i]].v != ncols) return 0;
    return 1;
}

static int by_xid(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The subtransactions a run's writer leaves out (``dropped``: a set of xids, as the Assembler keeps the aborted
 * ones, or None) as a sorted array in *xids (PyMem; NULL for None), their number in *count: 0, or -1 with an
 * error set.  A value no uint32 holds is no change's subxid, and is left out. */
static int dropped_xids(PyObject *dropped, const char *who, uint32_t **xids, Py_ssize_t *count)
{
    *xids = NULL;
    *count = 0;
    if (dropped == Py_None) return 0;
    if (!PyAnySet_Check(dropped)) {
        PyErr_Format(PyExc_TypeError, "%s: dropped must be a set or None", who);
        return -1;
    }
    Py_ssize_t most = PySet_GET_SIZE(dropped);
    *xids = PyMem_Malloc((size_t)(most + 1) * sizeof(uint32_t));
    if (*xids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *items = PyObject_GetIter(dropped), *item;
    if (items == NULL) return -1;
    while ((item = PyIter_Next(items)) != NULL) {
        unsigned long long v = PyLong_Check(item) ? PyLong_AsUnsignedLongLong(item) : (unsigned long long)-1;
        Py_DECREF(item);
        if (PyErr_Occurred()) PyErr_Clear();
        if (v <= UINT32_MAX && *count < most) (*xids)[(*count)++] = (uint32_t)v;
    }
    Py_DECREF(items);
    if (PyErr_Occurred()) return -1;
    qsort(*xids, (size_t)*count, sizeof(uint32_t), by_xid);
    return 0;
}

/* whether xid is one of xids[0:count] (sorted) */
static int dropped_xid(const uint32_t *xids, Py_ssize_t count, uint32_t xid)
{
    return count && bsearch(&xid, xids, (size_t)count, sizeof(uint32_t), by_xid) != NULL;
}
