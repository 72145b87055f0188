/* The C twin of replwire.codec.io.copy_csv's reader: one ``lsn,xid,\x<hex>`` row of the COPY-CSV that
 * pg_logical_slot_peek_binary_changes writes, decoded into a buffer that grows to hold it. */

/* each byte's value as a hex digit, 16 for a byte that is none; and each pair of bytes' (the first the low
 * byte of the index) as the byte they spell, 0x100 for a pair that spells none */
static unsigned char HEX[256];
static uint16_t HEX_PAIR[65536];

static void hex_init(void)
{
    for (int c = 0; c < 256; c++) HEX[c] = (unsigned char)(hexval((unsigned)c) < 0 ? 16 : hexval((unsigned)c));
    for (int pair = 0; pair < 65536; pair++) {
        int high = HEX[pair & 0xFF], low = HEX[pair >> 8];
        HEX_PAIR[pair] = (uint16_t)(high > 15 || low > 15 ? 0x100 : high << 4 | low);
    }
}

/* The first bytes of hex[0:2 * bytes] decoded into out sixteen hex digits at a time, with SSE2 (which every
 * x86-64 has): how many bytes it decoded (a multiple of 8; the rest is the caller's, and all of it where
 * there is no SSE2), or -1 if a block held a non-digit.  A byte is a digit when (byte - '0') is under 10 as
 * an unsigned byte, a letter when ((byte | 0x20) - 'a') is under 6; its value is the one or the other + 10. */
static Py_ssize_t hex_words(const unsigned char *hex, unsigned char *out, Py_ssize_t bytes)
{
    Py_ssize_t done = 0;
#ifdef __SSE2__
    const __m128i zero = _mm_set1_epi8('0'), a = _mm_set1_epi8('a'), case_bit = _mm_set1_epi8(0x20);
    const __m128i nine = _mm_set1_epi8(9), five = _mm_set1_epi8(5), ten = _mm_set1_epi8(10);
    const __m128i low_bytes = _mm_set1_epi16(0xFF);
    for (; bytes - done >= 8; done += 8) {
        __m128i v = _mm_loadu_si128((const __m128i *)(hex + 2 * done));
        __m128i d = _mm_sub_epi8(v, zero), l = _mm_sub_epi8(_mm_or_si128(v, case_bit), a);
        __m128i is_digit = _mm_cmpeq_epi8(_mm_min_epu8(d, nine), d);
        __m128i is_letter = _mm_cmpeq_epi8(_mm_min_epu8(l, five), l);
        if (_mm_movemask_epi8(_mm_or_si128(is_digit, is_letter)) != 0xFFFF) return -1;
        __m128i nibbles = _mm_or_si128(_mm_and_si128(is_digit, d), _mm_andnot_si128(is_digit, _mm_add_epi8(l, ten)));
        /* each 16-bit lane holds a pair, its first digit (the high nibble) in the low byte */
        __m128i pairs = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(nibbles, low_bytes), 4),
                                     _mm_srli_epi16(nibbles, 8));
        _mm_storel_epi64((__m128i *)(out + done), _mm_packus_epi16(pairs, pairs));
    }
#else
    (void)hex; (void)out; (void)bytes;
#endif
    return done;
}

/* the hex digits s[0:k] of 1 to 8 characters as a number, or -1 */
static int64_t hex_number(const unsigned char *s, Py_ssize_t k)
{
    if (k < 1 || k > 8) return -1;
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        int h = hexval(s[i]);
        if (h < 0) return -1;
        v = (v << 4) | h;
    }
    return v;
}

/* one row ``lsn,xid,\x<hex>`` (s[0:k], its line end stripped) as _copy_csv_rows reads it: its LSN and its
 * data decoded into *row (which grows to hold it); 1, or 0 for a row of another form, -1 no memory */
static int csv_row(const unsigned char *s, Py_ssize_t k, uint64_t *lsn, unsigned char **row, Py_ssize_t *cap,
                   Py_ssize_t *size)
{
    const unsigned char *c1 = memchr(s, ',', (size_t)k);
    if (c1 == NULL) return 0;
    const unsigned char *c2 = memchr(c1 + 1, ',', (size_t)(k - (c1 + 1 - s)));
    if (c2 == NULL || memchr(c2 + 1, ',', (size_t)(k - (c2 + 1 - s))) != NULL) return 0;
    const unsigned char *slash = memchr(s, '/', (size_t)(c1 - s));
    if (slash == NULL) return 0;
    int64_t hi = hex_number(s, slash - s), lo = hex_number(slash + 1, c1 - slash - 1);
    if (hi < 0 || lo < 0) return 0;
    Py_ssize_t xid = c2 - c1 - 1;
    if (xid < 1 || xid > 10) return 0;
    for (const unsigned char *x = c1 + 1; x < c2; x++)
        if (*x < '0' || *x > '9') return 0;
    const unsigned char *hex = c2 + 1;
    Py_ssize_t digits = k - (hex - s);
    if (digits < 2 || hex[0] != '\\' || hex[1] != 'x') return 0;
    hex += 2;
    digits -= 2;
    if (digits % 2 || digits == 0) return 0;
    Py_ssize_t bytes = digits / 2;
    if (bytes > *cap) {
        unsigned char *grown = PyMem_Realloc(*row, (size_t)bytes);
        if (grown == NULL) return -1;
        *row = grown;
        *cap = bytes;
    }
    Py_ssize_t i = hex_words(hex, *row, bytes);
    if (i < 0) return 0;
    unsigned bad = 0;
    for (; i < bytes; i++) {  /* (the rest, each pair's byte from a table; a pair of non-digits marks bad) */
        unsigned byte = HEX_PAIR[hex[2 * i] | hex[2 * i + 1] << 8];
        bad |= byte;
        (*row)[i] = (unsigned char)byte;
    }
    if (bad & 0x100) return 0;
    *lsn = ((uint64_t)hi << 32) | (uint64_t)lo;
    *size = bytes;
    return 1;
}
