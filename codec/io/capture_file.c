/* The C twin of replwire.codec.io.capture_file's record reader: a capture file record laid out as its
 * plan says (replwire.codec.io.record_plan), its checksum checked. */

/* Where a capture record's parts lie, as replwire.codec.io.record_plan's plan derives them from the
 * declaration (schema/capture.py) and hands them over: the head's size, the offset and size of its LSN
 * and of the data's length in it, then the data, then the CRC-32 (zlib's) of head and data. */
typedef struct {
    Py_ssize_t head, lsn_at, lsn_size, len_at, len_size, crc_size;
} Frame;

/* The most a record's head may be: the frame's offsets are checked by subtraction from it (an offset near
 * PY_SSIZE_T_MAX must not wrap past the check), and head + crc_size + pos stays far from overflowing. */
#define FRAME_MOST_HEAD ((Py_ssize_t)1 << 20)

/* a frame from its tuple (head, lsn_at, lsn_size, len_at, len_size, crc_size): 0, or -1 with a ValueError
 * naming ``who`` (or the argument error) set */
static int frame_of(PyObject *framing, Frame *f, const char *who)
{
    if (!PyTuple_Check(framing) || !PyArg_ParseTuple(framing, "nnnnnn", &f->head, &f->lsn_at, &f->lsn_size,
                                                     &f->len_at, &f->len_size, &f->crc_size)
        || f->lsn_size < 1 || f->lsn_size > 8 || f->len_size < 1 || f->len_size > 8 || f->crc_size != 4
        || f->head < 1 || f->head > FRAME_MOST_HEAD || f->lsn_at < 0 || f->len_at < 0
        || f->lsn_at > f->head - f->lsn_size || f->len_at > f->head - f->len_size) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: not a record frame", who);
        return -1;
    }
    return 0;
}

/* CRC-32 (zlib's: the reflected polynomial 0xEDB88320), eight bytes a step: CRC_TABLE[0] is the byte-wise
 * table, CRC_TABLE[j] that of a byte followed by j zero bytes */
static uint32_t CRC_TABLE[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        CRC_TABLE[0][i] = c;
    }
    for (int j = 1; j < 8; j++)
        for (int i = 0; i < 256; i++)
            CRC_TABLE[j][i] = (CRC_TABLE[j - 1][i] >> 8) ^ CRC_TABLE[0][CRC_TABLE[j - 1][i] & 0xFF];
}

static uint32_t crc32_of(const unsigned char *s, Py_ssize_t k)
{
    uint32_t c = 0xFFFFFFFFu;
    Py_ssize_t i = 0;
    for (; i + 8 <= k; i += 8) {
        uint32_t lo = c ^ ((uint32_t)s[i] | (uint32_t)s[i + 1] << 8 | (uint32_t)s[i + 2] << 16 | (uint32_t)s[i + 3] << 24);
        uint32_t hi = (uint32_t)s[i + 4] | (uint32_t)s[i + 5] << 8 | (uint32_t)s[i + 6] << 16 | (uint32_t)s[i + 7] << 24;
        c = CRC_TABLE[7][lo & 0xFF] ^ CRC_TABLE[6][(lo >> 8) & 0xFF] ^ CRC_TABLE[5][(lo >> 16) & 0xFF]
            ^ CRC_TABLE[4][lo >> 24] ^ CRC_TABLE[3][hi & 0xFF] ^ CRC_TABLE[2][(hi >> 8) & 0xFF]
            ^ CRC_TABLE[1][(hi >> 16) & 0xFF] ^ CRC_TABLE[0][hi >> 24];
    }
    for (; i < k; i++) c = CRC_TABLE[0][(c ^ s[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint64_t rd_be(const unsigned char *s, Py_ssize_t size)
{
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < size; i++) v = (v << 8) | s[i];
    return v;
}

/* the capture record at s[0:k]: 1 (its LSN, data and size set), 0 a record the row path does not take
 * (corrupt: the Python reader reports it), 2 more input is needed to tell */
static int capture_record(const Frame *f, const unsigned char *s, Py_ssize_t k, uint64_t *lsn,
                          const unsigned char **data, Py_ssize_t *n, Py_ssize_t *size)
{
    if (k < f->head + f->crc_size) return 2;
    uint64_t length = rd_be(s + f->len_at, f->len_size);
    if (length > (uint64_t)(k - f->head - f->crc_size)) return 2;
    Py_ssize_t end = f->head + (Py_ssize_t)length;
    if (crc32_of(s, end) != (uint32_t)rd_be(s + end, f->crc_size)) return 0;
    *lsn = rd_be(s + f->lsn_at, f->lsn_size);
    *data = s + f->head;
    *n = (Py_ssize_t)length;
    *size = end + f->crc_size;
    return 1;
}
