/* The C twin of replwire.codec.io.segments' record reader: the next record of an input, a COPY-CSV row
 * or a capture file record. */

/* The record at s[at:size] -- a capture record laid out as ``frame`` says, or with frame NULL a COPY-CSV
 * row -- as the compiled paths read it: 1 (its LSN, its data d[0:n] -- a CSV row's decoded into *row -- and
 * where the next starts, end, set), 0 one they do not take (a corrupt record, a record the input's end cuts
 * when final, a row that is not (lsn, xid, data): the Python reader reports or raises it), 2 more input is
 * needed to tell, -1 no memory. */
static int next_record(const Frame *frame, const unsigned char *s, Py_ssize_t size, Py_ssize_t at, int final,
                       uint64_t *lsn, const unsigned char **d, Py_ssize_t *n, Py_ssize_t *end,
                       unsigned char **row, Py_ssize_t *row_cap)
{
    if (frame != NULL) {
        Py_ssize_t k;
        int r = capture_record(frame, s + at, size - at, lsn, d, n, &k);
        if (r == 2) return final ? 0 : 2;
        if (r == 1) *end = at + k;
        return r;
    }
    const unsigned char *nl = memchr(s + at, '\n', (size_t)(size - at));
    if (nl == NULL && !final) return 2;
    *end = nl ? nl - s + 1 : size;
    Py_ssize_t k = *end - at;
    while (k > 0 && (s[at + k - 1] == '\n' || s[at + k - 1] == '\r')) k--;
    int r = csv_row(s + at, k, lsn, row, row_cap, n);
    if (r == 1) *d = *row;
    return r;
}
