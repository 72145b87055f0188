/* The C twin of replwire.codec.stream.jsonl's RowJson: a row image's JSON object written from its wire
 * columns, each value in text or binary format as the Python writer writes the typed value, by a plan per
 * relation (rows_plan) that says how each column's values go (the ways of replwire.codec.wire.gen.row_ways);
 * rows_row for tuples the codec parsed, put_row for tuples in the input's bytes (the row path of decode and
 * the Spark change columns).  Where a value has a form it does not write exactly, it says so and the
 * Python writer writes the row.  Text in the client encoding (text values, json, arrays' elements) is read in
 * the plan's encoding (ENC_*: UTF-8, LATIN1, SQL_ASCII) and written as UTF-8.  Every read is bounds-checked;
 * the only memory it takes is the output and an array element's unescaped text (at most the array's). */

typedef struct {
    PyObject *key;   /* bytes: the column's name as a JSON string and ':' */
    int kind;        /* ROW_* */
    int is_key;      /* part of the replica identity key */
    PyObject *call;  /* ROW_CALL: the text's JSON (str) from its bytes */
    PyObject *name;  /* str: the column's name (for unchanged_toast lists) */
    int binary;      /* BIN_*: how a binary ('b') value is written in C, 0 not (the row is declined) */
    uint32_t element;  /* BIN_ARRAY: the element type's OID, which array_send's header must name */
} PlanColumn;

typedef struct {
    Py_ssize_t ncols;
    int enc;             /* ENC_*: what the text values are in, and the form their JSON is written in */
    PyObject *start[3];  /* bytes: the start of a line, up to "xid": -- insert, update, delete */
    PlanColumn cols[1];
} Plan;

/* How a column's text values are written (ROW_*): as a JSON string, an integer, a bool, through the plan's
 * Python function; or, for the types that have a way of their own, in C where the text has the form the server
 * prints (what the Python conversion of replwire.codec.stream.jsonl gives exactly), else through the function.
 * How its binary values are (BIN_*): by the type, where they fit the layout and the JSON is what the Python
 * writer gives the typed value.  An array's way is ROW_ARRAY (BIN_ARRAY) plus its element's.  The enums are
 * generated before this file from replwire.codec.wire.gen.row_ways. */

static const char *PLAN_NAME = "replwire.rows.plan";

static void plan_free(PyObject *capsule)
{
    Plan *plan = PyCapsule_GetPointer(capsule, PLAN_NAME);
    if (plan == NULL) return;
    for (int i = 0; i < 3; i++) Py_XDECREF(plan->start[i]);
    for (Py_ssize_t i = 0; i < plan->ncols; i++) {
        Py_XDECREF(plan->cols[i].key);
        Py_XDECREF(plan->cols[i].call);
        Py_XDECREF(plan->cols[i].name);
    }
    PyMem_Free(plan);
}

/* rows_plan(starts, columns[, encoding]): starts a tuple of 3 bytes, columns a tuple of (key, kind, is_key,
 * call, name[, binary, element]), encoding what the values' text is in (ENC_*, UTF-8 if not given); the keys
 * and starts are written as they are, so they are given in the form the plan's text is written in */
static PyObject *c_rows_plan(PyObject *self, PyObject *args)
{
    PyObject *starts, *columns;
    int enc = ENC_UTF8;
    if (!PyArg_ParseTuple(args, "O!O!|i:rows_plan", &PyTuple_Type, &starts, &PyTuple_Type, &columns, &enc))
        return NULL;
    if (PyTuple_GET_SIZE(starts) != 3) {
        PyErr_SetString(PyExc_ValueError, "rows_plan: three line starts");
        return NULL;
    }
    if (enc < 0 || enc > ENC_LAST) {
        PyErr_SetString(PyExc_ValueError, "rows_plan: not an encoding of the row writer");
        return NULL;
    }
    Py_ssize_t ncols = PyTuple_GET_SIZE(columns);
    Plan *plan = PyMem_Calloc(1, sizeof(Plan) + (size_t)(ncols > 0 ? ncols : 1) * sizeof(PlanColumn));
    if (plan == NULL) return PyErr_NoMemory();
    plan->ncols = 0;
    plan->enc = enc;
    PyObject *capsule = PyCapsule_New(plan, PLAN_NAME, plan_free);
    if (capsule == NULL) {
        PyMem_Free(plan);
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        PyObject *s = PyTuple_GET_ITEM(starts, i);
        if (!PyBytes_Check(s)) goto bad;
        plan->start[i] = Py_NewRef(s);
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *key, *call, *name;
        int kind, is_key, binary = 0;
        unsigned int element = 0;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(columns, i), "O!ipOU|iI:rows_plan column", &PyBytes_Type, &key, &kind,
                              &is_key, &call, &name, &binary, &element)) goto fail;
        int known = (kind >= ROW_STRING && kind <= ROW_LAST) || (kind > ROW_ARRAY && array_element(kind - ROW_ARRAY));
        if (!known || (kind >= ROW_CALL && !PyCallable_Check(call))) goto bad;
        if (binary < 0 || (binary > BIN_LAST && !(binary > BIN_ARRAY && binary <= BIN_ARRAY + BIN_LAST))) goto bad;
        plan->cols[i].binary = binary;
        plan->cols[i].element = element;
        plan->cols[i].key = Py_NewRef(key);
        plan->cols[i].kind = kind;
        plan->cols[i].is_key = is_key;
        plan->cols[i].call = Py_NewRef(call);
        plan->cols[i].name = Py_NewRef(name);
        plan->ncols = i + 1;
    }
    return capsule;
bad:
    PyErr_SetString(PyExc_ValueError, "rows_plan: not a row plan");
fail:
    Py_DECREF(capsule);
    return NULL;
}

static int out_init(Buf *b, Py_ssize_t cap)
{
    b->p = PyMem_Malloc((size_t)cap);
    if (b->p == NULL) return -1;
    b->len = 0;
    b->cap = cap;
    return 0;
}

static void out_free(Buf *b)
{
    if (b->p != b->small) PyMem_Free(b->p);
    b->p = NULL;
}

#define PUT(b, s, k) do { if (put_bytes((b), (const char *)(s), (Py_ssize_t)(k))) goto nomem; } while (0)
#define PUTS(b, s) PUT(b, s, sizeof(s) - 1)
#define PUTO(b, o) PUT(b, PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o))

/* the hex digits of v (uppercase, no leading zeros) ending at end; where they start */
static char *hex_digits(char *end, uint32_t v)
{
    static const char digit[] = "0123456789ABCDEF";
    do {
        *--end = digit[v & 15];
        v >>= 4;
    } while (v);
    return end;
}

/* an LSN as its "X/X" text, quoted (two calls a change: no printf) */
static int put_lsn(Buf *b, uint64_t v)
{
    char text[20], *end = text + sizeof text;
    char *p = end;
    *--p = '"';
    p = hex_digits(p, (uint32_t)(v & 0xFFFFFFFFu));
    *--p = '/';
    p = hex_digits(p, (uint32_t)(v >> 32));
    *--p = '"';
    return put_bytes(b, p, end - p);
}

/* v in decimal */
static int put_u64(Buf *b, uint64_t v)
{
    char text[24], *end = text + sizeof text;
    char *p = end;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return put_bytes(b, p, end - p);
}

/* v in decimal, signed */
static int put_i64(Buf *b, int64_t v)
{
    if (v >= 0) return put_u64(b, (uint64_t)v);
    return put_bytes(b, "-", 1) || put_u64(b, (uint64_t)0 - (uint64_t)v);
}

/* civil date of a day count from 1970-01-01 (H. Hinnant's days_from_civil, inverted) */
static void civil(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t year = (int64_t)yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = year + (*m <= 2);
}

/* a commit time (microseconds since 2000-01-01 UTC) as json_value writes it: the ISO 8601 string of the
 * datetime in UTC, or the integer where datetime cannot hold it (years 1-9999) */
static int put_time(Buf *b, int64_t us)
{
    char text[48];
    int k;
    const int64_t day = INT64_C(86400000000);
    int64_t days = us / day, rest = us % day;
    if (rest < 0) {
        rest += day;
        days -= 1;
    }
    int64_t y = 0;
    unsigned m = 0, d = 0;
    int in_range = days > -INT64_C(1000000) && days < INT64_C(3000000);
    if (in_range) {
        civil(days + 10957, &y, &m, &d);  /* 10957 days from 1970-01-01 to 2000-01-01 */
        in_range = y >= 1 && y <= 9999;
    }
    if (!in_range) {
        k = snprintf(text, sizeof text, "%lld", (long long)us);
        return put_bytes(b, text, k);
    }
    int64_t secs = rest / 1000000, micro = rest % 1000000;
    k = snprintf(text, sizeof text, "\"%04d-%02u-%02uT%02d:%02d:%02d", (int)y, m, d, (int)(secs / 3600),
                 (int)(secs / 60 % 60), (int)(secs % 60));
    if (micro) k += snprintf(text + k, sizeof text - (size_t)k, ".%06d", (int)micro);
    k += snprintf(text + k, sizeof text - (size_t)k, "+00:00\"");
    return put_bytes(b, text, k);
}

/* text in the client encoding enc (ENC_*) as the JSON string json.encoder.encode_basestring writes
 * (ensure_ascii=False) of what it decodes to, in UTF-8: UTF-8 checked and copied; LATIN1's bytes 0x80-0xFF
 * (U+0080-U+00FF) as their two bytes of UTF-8; SQL_ASCII's (the surrogates U+DC80-U+DCFF, which encode_basestring
 * leaves as they are) as the JSON escapes \udc80-\udcff that a text stream with errors="backslashreplace"
 * writes of them (ENC_SQL_ASCII), or as the three bytes "surrogatepass" writes (ENC_SQL_ASCII_SURROGATES).
 * 1 written, 0 not valid UTF-8 (only UTF-8 can be invalid), -1 no memory */
static int put_string(Buf *b, const unsigned char *s, Py_ssize_t k, int enc)
{
    static const char hex[] = "0123456789abcdef";
    if (put_bytes(b, "\"", 1)) return -1;
    Py_ssize_t i = 0, run = 0;
    while (i < k) {
        if (k - i >= 8) {  /* eight bytes at a time while none needs a look */
            uint64_t word;
            memcpy(&word, s + i, 8);
            const uint64_t ones = UINT64_C(0x0101010101010101), highs = UINT64_C(0x8080808080808080);
            if (!(word & highs)) {  /* all ASCII: then a high bit below says a byte was under 0x20, or the
                                     * quote, or the backslash (no borrow crosses bytes otherwise) */
                uint64_t quote = word ^ (ones * '"'), backslash = word ^ (ones * '\\');
                if (!(((word - ones * 0x20) | (quote - ones) | (backslash - ones)) & highs)) {
                    i += 8;
                    continue;
                }
            }
        }
        unsigned c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0x80 && enc == ENC_UTF8) {
            Py_ssize_t u = utf8_length(s + i, k - i);
            if (u == 0) return 0;
            i += u;
            continue;
        }
        if (put_bytes(b, (const char *)s + run, i - run)) return -1;
        if (c >= 0x80) {  /* one byte, one character: U+0080-U+00FF, or U+DC80-U+DCFF */
            char text[6] = {'\\', 'u', 'd', 'c', hex[c >> 4], hex[c & 15]};
            int e = 6;
            if (enc == ENC_LATIN1) {
                text[0] = (char)(0xC0 | (c >> 6));
                text[1] = (char)(0x80 | (c & 0x3F));
                e = 2;
            } else if (enc == ENC_SQL_ASCII_SURROGATES) {
                text[0] = (char)0xED;
                text[1] = (char)(0xB0 | (c >> 6));
                text[2] = (char)(0x80 | (c & 0x3F));
                e = 3;
            }
            if (put_bytes(b, text, e)) return -1;
            run = ++i;
            continue;
        }
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        int e = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
            e = 6;
        }
        if (put_bytes(b, esc, e)) return -1;
        run = ++i;
    }
    if (put_bytes(b, (const char *)s + run, k - run) || put_bytes(b, "\"", 1)) return -1;
    return 1;
}

/* an integer's text as str(int(text)) writes it, where that is the text itself: 1, or 0 for another form */
static int plain_integer(const unsigned char *s, Py_ssize_t k)
{
    Py_ssize_t i = k > 1 && s[0] == '-';  /* (an empty text has no s[0]) */
    if (k - i < 1 || k > 20) return 0;
    if (s[i] == '0' && k - i > 1) return 0;
    if (s[i] == '0' && i) return 0;  /* -0 */
    for (; i < k; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* a hex digit's value, or -1 */
static inline int hexval(unsigned c)
{
    if (c >= '0' && c <= '9') return (int)(c - '0');
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    return -1;
}

static inline int digits(const unsigned char *s, Py_ssize_t k)
{
    for (Py_ssize_t i = 0; i < k; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static inline int number(const unsigned char *s, Py_ssize_t k)
{
    int v = 0;
    for (Py_ssize_t i = 0; i < k; i++) v = v * 10 + (s[i] - '0');
    return v;
}

/* numeric text -?(0|[1-9][0-9]*)(.[0-9]+)? that str(Decimal(text)) writes back as it is (no exponent form:
 * the adjusted exponent at least -6) */
static int plain_numeric(const unsigned char *s, Py_ssize_t k)
{
    Py_ssize_t i = k > 1 && s[0] == '-', dot = -1;
    if (k > 1000) return 0;
    for (Py_ssize_t j = i; j < k; j++) {
        if (s[j] == '.' && dot < 0) dot = j;
        else if (s[j] < '0' || s[j] > '9') return 0;
    }
    Py_ssize_t whole = (dot < 0 ? k : dot) - i;
    if (whole < 1 || (whole > 1 && s[i] == '0') || dot == k - 1) return 0;
    if (dot < 0) return 1;
    Py_ssize_t fraction = k - dot - 1, first = i;  /* the coefficient: the digits without leading zeros */
    while (first < k && (s[first] == '0' || s[first] == '.')) first++;
    Py_ssize_t coefficient = 0;
    for (Py_ssize_t j = first; j < k; j++) coefficient += s[j] != '.';
    if (coefficient == 0) coefficient = 1;
    return -fraction + coefficient - 1 >= -6;
}

static int days_in(int year, int month)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (month == 2 && (year % 4 == 0 && (year % 100 != 0 || year % 400 == 0))) return 29;
    return days[month - 1];
}

/* YYYY-MM-DD, a date datetime.date takes (years 1-9999) */
static int valid_date(const unsigned char *s)
{
    if (!digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2)) return 0;
    int year = number(s, 4), month = number(s + 5, 2), day = number(s + 8, 2);
    return year >= 1 && month >= 1 && month <= 12 && day >= 1 && day <= days_in(year, month);
}

/* HH:MM:SS[.f{1,6}] at s[0:k] as time.isoformat() writes it (the fraction to six digits, left out when it
 * is zero): 1 written, 0 another form */
static int put_clock(Buf *b, const unsigned char *s, Py_ssize_t k)
{
    if (k < 8 || !digits(s, 2) || s[2] != ':' || !digits(s + 3, 2) || s[5] != ':' || !digits(s + 6, 2)) return 0;
    if (number(s, 2) > 23 || number(s + 3, 2) > 59 || number(s + 6, 2) > 59) return 0;
    char fraction[8] = ".000000";
    int nonzero = 0;
    if (k > 8) {
        if (s[8] != '.' || k - 9 < 1 || k - 9 > 6 || !digits(s + 9, k - 9)) return 0;
        for (Py_ssize_t i = 9; i < k; i++) {
            fraction[i - 8] = (char)s[i];
            nonzero |= s[i] != '0';
        }
    }
    if (put_bytes(b, (const char *)s, 8)) return -1;
    if (nonzero && put_bytes(b, fraction, 7)) return -1;
    return 1;
}

/* a float as json_value and the JSON encoder write it: repr's shortest form, "NaN", "Infinity", "-Infinity" */
static int put_double(Buf *b, double v)
{
    if (isnan(v)) return put_bytes(b, "\"NaN\"", 5) ? -1 : 1;
    if (isinf(v)) return (v > 0 ? put_bytes(b, "\"Infinity\"", 10) : put_bytes(b, "\"-Infinity\"", 11)) ? -1 : 1;
    char *shortest = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (shortest == NULL) return -1;
    int r = put_bytes(b, shortest, (Py_ssize_t)strlen(shortest)) ? -1 : 1;
    PyMem_Free(shortest);
    return r;
}

/* float4/float8 text as the JSON of float(text): repr's shortest form, "NaN", "Infinity", "-Infinity";
 * 1 written, 0 another form (spaces, underscores: float() takes them, the function writes them).  A text
 * that overflows (a number past DBL_MAX, not infinity's spelling) is declined: psycopg's loader fails on it,
 * so the typed value is the text (and the load of an array holding it fails). */
static int put_float(Buf *b, const unsigned char *s, Py_ssize_t k)
{
    char text[64];
    if (k < 1 || k >= (Py_ssize_t)sizeof text) return 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        unsigned c = s[i];
        if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E' || c == 'N'
              || c == 'a' || c == 'I' || c == 'n' || c == 'f' || c == 'i' || c == 't' || c == 'y'))
            return 0;
        text[i] = (char)c;
    }
    text[k] = 0;
    char *end = NULL;
    double v = PyOS_string_to_double(text, &end, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (end != text + k) return 0;
    if (isinf(v) && ((text[0] == '-' || text[0] == '+' ? text[1] : text[0]) | 0x20) != 'i') return 0;
    return put_double(b, v);
}

/* an interval of these parts as the ISO 8601 duration interval_iso writes, a JSON string; 0 for a
 * microsecond count of INT64_MIN that is not -infinity's (its magnitude has no int64) */
static int put_iso_interval(Buf *b, int64_t months, int64_t days, int64_t micro)
{
    if (months == INT32_MAX && days == INT32_MAX && micro == INT64_MAX)
        return put_bytes(b, "\"infinity\"", 10) ? -1 : 1;
    if (months == INT32_MIN && days == INT32_MIN && micro == INT64_MIN)
        return put_bytes(b, "\"-infinity\"", 11) ? -1 : 1;
    if (micro == INT64_MIN) return 0;
    char text[160];
    int n = 0;
    text[n++] = '"';
    if (!months && !days && !micro) {
        memcpy(text + n, "PT0S", 4);
        n += 4;
    } else {
        text[n++] = 'P';
        int64_t years = months / 12;  /* (C's truncating division: each part has its source's sign) */
        months %= 12;
        if (years) n += snprintf(text + n, sizeof text - (size_t)n, "%lldY", (long long)years);
        if (months) n += snprintf(text + n, sizeof text - (size_t)n, "%lldM", (long long)months);
        if (days) n += snprintf(text + n, sizeof text - (size_t)n, "%lldD", (long long)days);
        if (micro) {
            const char *sign = micro < 0 ? "-" : "";
            int64_t rest = micro < 0 ? -micro : micro;
            int64_t h = rest / INT64_C(3600000000), m = rest / 60000000 % 60, sec = rest / 1000000 % 60,
                    f = rest % 1000000;
            text[n++] = 'T';
            if (h) n += snprintf(text + n, sizeof text - (size_t)n, "%s%lldH", sign, (long long)h);
            if (m) n += snprintf(text + n, sizeof text - (size_t)n, "%s%lldM", sign, (long long)m);
            if (f) {
                n += snprintf(text + n, sizeof text - (size_t)n, "%s%lld.%06lld", sign, (long long)sec, (long long)f);
                while (text[n - 1] == '0') n--;
                text[n++] = 'S';
            } else if (sec) {
                n += snprintf(text + n, sizeof text - (size_t)n, "%s%lldS", sign, (long long)sec);
            }
        }
    }
    text[n++] = '"';
    return put_bytes(b, text, n) ? -1 : 1;
}

/* an optionally signed decimal number of 1 to 9 digits at s[*i] (advanced past it), or 0 for none */
static int interval_number(const unsigned char *s, Py_ssize_t k, Py_ssize_t *i, int64_t *v, int sign)
{
    Py_ssize_t j = *i;
    int negative = 0;
    if (sign && j < k && (s[j] == '-' || s[j] == '+')) negative = s[j++] == '-';
    Py_ssize_t first = j;
    int64_t n = 0;
    while (j < k && s[j] >= '0' && s[j] <= '9' && j - first < 10) n = n * 10 + (s[j++] - '0');
    if (j == first || j - first > 9 || (j < k && s[j] >= '0' && s[j] <= '9')) return 0;
    *v = negative ? -n : n;
    *i = j;
    return 1;
}

/* interval_out's text in the postgres style ("1 year 2 mons -3 days +04:05:06.789"; each part optional,
 * in that order, as interval_parts reads it) as the ISO 8601 duration interval_iso writes, a JSON string;
 * 1 written, 0 another form (the ISO style, numbers of ten digits or more: the function writes those) */
static int put_interval(Buf *b, const unsigned char *s, Py_ssize_t k)
{
    static const char *const units[3][2] = {{"year", "years"}, {"mon", "mons"}, {"day", "days"}};
    if (k == 8 && memcmp(s, "infinity", 8) == 0) return put_bytes(b, "\"infinity\"", 10) ? -1 : 1;
    if (k == 9 && memcmp(s, "-infinity", 9) == 0) return put_bytes(b, "\"-infinity\"", 11) ? -1 : 1;
    if (k < 1) return 0;
    int64_t part[3] = {0, 0, 0}, micro = 0;
    Py_ssize_t i = 0;
    int unit = 0;
    while (i < k) {
        Py_ssize_t start = i;
        int64_t v;
        if (!interval_number(s, k, &i, &v, 1)) return 0;
        if (i < k && s[i] == ' ') {  /* a count and its unit */
            i++;
            int found = 0;
            for (; unit < 3 && !found; unit++)
                for (int plural = 1; plural >= 0 && !found; plural--) {
                    size_t n = strlen(units[unit][plural]);
                    if ((Py_ssize_t)n <= k - i && memcmp(s + i, units[unit][plural], n) == 0
                        && (i + (Py_ssize_t)n == k || s[i + (Py_ssize_t)n] == ' ')) {
                        part[unit] = v;
                        i += (Py_ssize_t)n;
                        found = 1;
                    }
                }
            if (!found) return 0;
            if (i < k) {
                i++;  /* the space before the next part */
                if (i == k) return 0;
            }
            continue;
        }
        /* the time: [+-]H:MM:SS[.f{1,6}], last */
        i = start;
        int negative = 0;
        if (s[i] == '-' || s[i] == '+') negative = s[i++] == '-';
        int64_t hours;
        if (!interval_number(s, k, &i, &hours, 0)) return 0;
        if (k - i < 6 || s[i] != ':' || !digits(s + i + 1, 2) || s[i + 3] != ':' || !digits(s + i + 4, 2)) return 0;
        int64_t minutes = number(s + i + 1, 2), seconds = number(s + i + 4, 2), fraction = 0;
        i += 6;
        if (i < k) {
            Py_ssize_t n = k - i - 1;
            if (s[i] != '.' || n < 1 || n > 6 || !digits(s + i + 1, n)) return 0;
            fraction = number(s + i + 1, n);
            for (Py_ssize_t z = n; z < 6; z++) fraction *= 10;
            i = k;
        }
        micro = ((hours * 60 + minutes) * 60 + seconds) * 1000000 + fraction;
        if (negative) micro = -micro;
    }
    return put_iso_interval(b, part[0] * 12 + part[1], part[2], micro);
}

static int put_scalar(Buf *b, int kind, const unsigned char *s, Py_ssize_t k, int enc);

/* the most nesting an array of array_out's may have (PostgreSQL's MAXDIM) */
#define ARRAY_DEPTH 6

/* array_out's text ({1,2}, {{"a b",NULL},{c,"d\"e"}}: elements separated by commas, quoted where they must
 * be, NULL unquoted for a null) as the JSON list of its elements' values, each written as the element's way
 * writes it, its strings' text in enc; 1 written, 0 another form (dimension bounds, another delimiter, spaces:
 * the function writes those), -1 no memory */
static int put_array(Buf *b, int way, const unsigned char *s, Py_ssize_t k, int enc)
{
    Py_ssize_t i = 0;
    int depth = 0;
    unsigned char small[256];
    unsigned char *scratch = small;
    Py_ssize_t cap = (Py_ssize_t)sizeof small;
    int r = 0;
    if (k < 2 || s[0] != '{') return 0;
    while (i < k) {
        unsigned c = s[i];
        if (c == '{') {
            if (++depth > ARRAY_DEPTH) goto other;
            if (put_bytes(b, "[", 1)) goto nomem;
            i++;
            continue;
        } else if (c == '}') {
            if (depth-- == 0) goto other;
            if (put_bytes(b, "]", 1)) goto nomem;
            i++;
            if (depth == 0) break;
        } else {
            if (depth == 0) goto other;
            if (c == '"') {  /* a quoted element: \\ and \" escaped */
                Py_ssize_t n = 0;
                i++;
                while (i < k && s[i] != '"') {
                    if (s[i] == '\\' && (++i == k || (s[i] != '"' && s[i] != '\\'))) goto other;
                    if (n == cap) {  /* (an element is shorter than the array's text: at most k bytes) */
                        Py_ssize_t more = cap * 2 < k ? cap * 2 : k;
                        unsigned char *grown = scratch == small ? PyMem_Malloc((size_t)more)
                                                                : PyMem_Realloc(scratch, (size_t)more);
                        if (grown == NULL) goto nomem;
                        if (scratch == small) memcpy(grown, small, sizeof small);
                        scratch = grown;
                        cap = more;
                    }
                    scratch[n++] = s[i++];
                }
                if (i == k) goto other;
                i++;
                r = put_scalar(b, way, scratch, n, enc);
            } else {  /* unquoted: up to the next comma or brace */
                Py_ssize_t start = i;
                while (i < k && s[i] != ',' && s[i] != '}' && s[i] != '{' && s[i] != '"' && s[i] != '\\'
                       && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' && s[i] != '\v' && s[i] != '\f')
                    i++;
                if (i == start || (i < k && s[i] != ',' && s[i] != '}')) goto other;
                if (i - start == 4 && memcmp(s + start, "NULL", 4) == 0) r = put_bytes(b, "null", 4) ? -1 : 1;
                else r = put_scalar(b, way, s + start, i - start, enc);
            }
            if (r != 1) goto done;
            if (i < k && s[i] == '}') continue;
        }
        /* after an element or a closed list: a comma, then another element or list */
        if (i < k && s[i] == ',') {
            if (put_bytes(b, ",", 1)) goto nomem;
            i++;
            if (i == k || s[i] == '}' || s[i] == ',') goto other;
        } else if (i < k && s[i] != '}') {
            goto other;
        }
    }
    r = depth == 0 && i == k ? 1 : 0;
    goto done;
other:
    r = 0;
    goto done;
nomem:
    r = -1;
done:
    if (scratch != small) PyMem_Free(scratch);
    return r;
}

/* a value of one of the types written in C where its text has the server's form (an array's strings in enc):
 * 1 written, 0 another form (the plan's function writes it), -1 no memory */
static int put_typed(Buf *b, int kind, const unsigned char *s, Py_ssize_t k, int enc)
{
    Py_ssize_t mark = b->len;
    int r = 0;
    if (kind > ROW_ARRAY) {
        r = put_array(b, kind - ROW_ARRAY, s, k, enc);
        if (r == 0) b->len = mark;
        return r;
    }
    switch (kind) {
    case ROW_FLOAT:
        r = put_float(b, s, k);
        break;
    case ROW_INTERVAL:
        r = put_interval(b, s, k);
        break;
    case ROW_NUMERIC:
        if (!plain_numeric(s, k)) return 0;
        r = put_bytes(b, "\"", 1) || put_bytes(b, (const char *)s, k) || put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    case ROW_UUID:
        if (k != 36) return 0;
        for (Py_ssize_t i = 0; i < 36; i++) {
            int hyphen = i == 8 || i == 13 || i == 18 || i == 23;
            if (hyphen ? s[i] != '-' : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
        }
        r = put_bytes(b, "\"", 1) || put_bytes(b, (const char *)s, k) || put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    case ROW_BYTEA:
        if (k < 2 || s[0] != '\\' || s[1] != 'x' || (k - 2) % 2) return 0;
        if (put_bytes(b, "\"\\\\x", 4)) return -1;
        for (Py_ssize_t i = 2; i < k; i++) {
            if (hexval(s[i]) < 0) {
                b->len = mark;
                return 0;
            }
            char lower = (char)(s[i] >= 'A' && s[i] <= 'F' ? s[i] + 32 : s[i]);
            if (put_bytes(b, &lower, 1)) return -1;
        }
        r = put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    case ROW_DATE:
        if (k != 10 || !valid_date(s)) return 0;
        r = put_bytes(b, "\"", 1) || put_bytes(b, (const char *)s, k) || put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    case ROW_TIME:
        if (put_bytes(b, "\"", 1)) return -1;
        r = put_clock(b, s, k);
        if (r == 1) r = put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    case ROW_TIMESTAMP:
    case ROW_TIMESTAMPTZ: {
        Py_ssize_t end = k;
        if (kind == ROW_TIMESTAMPTZ) {  /* only UTC (+00, +00:00, +00:00:00): another offset moves the time */
            if (k >= 3 && memcmp(s + k - 3, "+00", 3) == 0) end = k - 3;
            else if (k >= 6 && memcmp(s + k - 6, "+00:00", 6) == 0) end = k - 6;
            else if (k >= 9 && memcmp(s + k - 9, "+00:00:00", 9) == 0) end = k - 9;
            else return 0;
        }
        if (end < 19 || s[10] != ' ' || !valid_date(s)) return 0;
        if (put_bytes(b, "\"", 1) || put_bytes(b, (const char *)s, 10) || put_bytes(b, "T", 1)) return -1;
        r = put_clock(b, s + 11, end - 11);
        if (r == 1 && kind == ROW_TIMESTAMPTZ) r = put_bytes(b, "+00:00", 6) ? -1 : 1;
        if (r == 1) r = put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    }
    }
    if (r == 0) b->len = mark;
    return r;
}

static inline int64_t be_signed(const unsigned char *d, int size)
{
    uint64_t v = 0;
    for (int i = 0; i < size; i++) v = (v << 8) | d[i];
    if (size < 8 && (v >> (size * 8 - 1)) & 1) v |= ~UINT64_C(0) << (size * 8);
    return (int64_t)v;
}

/* a binary float4 as float4() of value_types loads it: the fewest significant digits (found by the same
 * bisection over 1-9) whose decimal reads back as the same single, as a float; NaN, infinities and zeros
 * as they are */
static int put_float4(Buf *b, const unsigned char *d)
{
    uint32_t bits = (uint32_t)be_signed(d, 4);
    float single;
    memcpy(&single, &bits, 4);
    double value = single;
    if (isnan(value) || isinf(value) || value == 0) return put_double(b, value);
    int low = 1, high = 9;
    double found = 0;
    while (low <= high) {
        int digits = low < high ? (low + high) / 2 : low;
        char *text = PyOS_double_to_string(value, 'g', digits, 0, NULL);
        if (text == NULL) return -1;
        double back = PyOS_string_to_double(text, NULL, NULL);
        PyMem_Free(text);
        if (back == -1.0 && PyErr_Occurred()) return -1;
        if (low == high) {
            found = back;
            break;
        }
        if (fabs(back) > FLT_MAX) return 0;  /* struct.pack refuses it: float4() raises, the Python path says */
        float again = (float)back;
        uint32_t again_bits;
        memcpy(&again_bits, &again, 4);
        if (again_bits == bits) high = digits;
        else low = digits + 1;
    }
    return put_double(b, found);
}

/* a date of days since 1970-01-01 as date.isoformat() writes it, quoted; 0 outside years 1-9999 */
static int put_day(Buf *b, int64_t days)
{
    int64_t y;
    unsigned m, d;
    if (days < -INT64_C(800000) || days > INT64_C(3000000)) return 0;
    civil(days, &y, &m, &d);
    if (y < 1 || y > 9999) return 0;
    char text[16];
    int k = snprintf(text, sizeof text, "%04d-%02u-%02u", (int)y, m, d);
    return put_bytes(b, text, k) ? -1 : 1;
}

/* microseconds of a day as time.isoformat() writes them (the fraction only where it is not zero) */
static int put_day_time(Buf *b, int64_t us)
{
    char text[24];
    int64_t secs = us / 1000000, micro = us % 1000000;
    int k = snprintf(text, sizeof text, "%02d:%02d:%02d", (int)(secs / 3600), (int)(secs / 60 % 60), (int)(secs % 60));
    if (micro) k += snprintf(text + k, sizeof text - (size_t)k, ".%06d", (int)micro);
    return put_bytes(b, text, k) ? -1 : 1;
}

/* numeric_send's form (ndigits, weight, sign, dscale, then base-10000 digits; its layout checked) as the
 * Decimal's 'f' format json_value writes: dscale decimals; 0 for a form the server does not send (a digit
 * over 9999, nonzero digits past dscale, a negative zero, another sign) */
static int put_numeric(Buf *b, const unsigned char *d, Py_ssize_t n)
{
    int ndigits = (int)be_signed(d, 2) & 0xFFFF, weight = (int)be_signed(d + 2, 2);
    unsigned sign = (unsigned)be_signed(d + 4, 2) & 0xFFFF, dscale = (unsigned)be_signed(d + 6, 2) & 0xFFFF;
    if (sign == 0xC000) return put_bytes(b, "\"NaN\"", 5) ? -1 : 1;
    if (sign == 0xD000) return put_bytes(b, "\"Infinity\"", 10) ? -1 : 1;
    if (sign == 0xF000) return put_bytes(b, "\"-Infinity\"", 11) ? -1 : 1;
    if ((sign != 0 && sign != 0x4000) || dscale > 0x3FFF || n != 8 + 2 * (Py_ssize_t)ndigits) return 0;
    if (weight < -1000 || weight > 1000) return 0;
    const unsigned char *digit = d + 8;
    int nonzero = 0;
    for (int i = 0; i < ndigits; i++) {
        unsigned v = (unsigned)(digit[2 * i] << 8 | digit[2 * i + 1]);
        if (v > 9999) return 0;
        nonzero |= v != 0;
        /* digit i stands for 10000^(weight - i): its last decimal place is 4 * (i - weight) */
        if (v && 4 * (i - weight) > (int)dscale) {
            int extra = 4 * (i - weight) - (int)dscale;  /* its lowest places past dscale must be zero */
            unsigned step = 1;
            for (int e = 0; e < extra && e < 4; e++) step *= 10;
            if (extra >= 4 || v % step) return 0;
        }
    }
    if (sign == 0x4000 && !nonzero) return 0;
    if (weight >= 0 && (ndigits > 0 ? (digit[0] | digit[1]) == 0 : weight > 0)) return 0;  /* a leading zero group */
    if (put_bytes(b, "\"", 1) || (sign == 0x4000 && put_bytes(b, "-", 1))) return -1;
    char group[8];
    if (weight < 0) {
        if (put_bytes(b, "0", 1)) return -1;
    } else {
        for (int i = 0; i <= weight; i++) {
            unsigned v = i < ndigits ? (unsigned)(digit[2 * i] << 8 | digit[2 * i + 1]) : 0;
            int k = snprintf(group, sizeof group, i == 0 ? "%u" : "%04u", v);
            if (put_bytes(b, group, k)) return -1;
        }
    }
    if (dscale) {
        if (put_bytes(b, ".", 1)) return -1;
        unsigned written = 0;
        for (int i = weight + 1; written < dscale; i++) {
            unsigned v = i >= 0 && i < ndigits ? (unsigned)(digit[2 * i] << 8 | digit[2 * i + 1]) : 0;
            snprintf(group, sizeof group, "%04u", v);
            unsigned k = dscale - written < 4 ? dscale - written : 4;
            if (put_bytes(b, group, (Py_ssize_t)k)) return -1;
            written += k;
        }
    }
    return put_bytes(b, "\"", 1) ? -1 : 1;
}

static int put_binary(Buf *b, int way, uint32_t element, const unsigned char *d, Py_ssize_t n, int depth, int enc);

/* array_send's form (ndim, has-nulls, element OID, per dimension its length and lower bound, then each
 * element as an int32 length, -1 for NULL, and its bytes) as the nested JSON lists of its elements,
 * row-major; 0 for anything that does not fit the layout exactly (the Python path keeps it whole) */
static int put_binary_array(Buf *b, int way, uint32_t element, const unsigned char *d, Py_ssize_t n, int depth,
                            int enc)
{
    if (n < 12 || depth > 0) return 0;
    int64_t ndim = be_signed(d, 4);
    if (ndim == 0) return n == 12 ? (put_bytes(b, "[]", 2) ? -1 : 1) : 0;
    if (ndim < 1 || ndim > ARRAY_DEPTH || (uint32_t)be_signed(d + 8, 4) != element || n < 12 + 8 * ndim) return 0;
    int64_t dims[ARRAY_DEPTH], count = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = be_signed(d + 12 + 8 * i, 4);
        if (dims[i] < 1 || dims[i] > n) return 0;
        count *= dims[i];
        if (count > n) return 0;  /* every element takes at least its 4-byte length */
    }
    Py_ssize_t at = 12 + 8 * (Py_ssize_t)ndim;
    int64_t index[ARRAY_DEPTH] = {0};
    for (int i = 0; i < ndim; i++)
        if (put_bytes(b, "[", 1)) return -1;
    for (int64_t e = 0; e < count; e++) {
        if (e) {  /* close the lists this element ends, open the next ones */
            int closed = 0;
            for (int i = (int)ndim - 1; i >= 0; i--) {
                if (++index[i] < dims[i]) break;
                index[i] = 0;
                closed++;
            }
            for (int i = 0; i < closed; i++)
                if (put_bytes(b, "]", 1)) return -1;
            if (put_bytes(b, ",", 1)) return -1;
            for (int i = 0; i < closed; i++)
                if (put_bytes(b, "[", 1)) return -1;
        }
        if (n - at < 4) return 0;
        int64_t length = be_signed(d + at, 4);
        at += 4;
        if (length == -1) {
            if (put_bytes(b, "null", 4)) return -1;
            continue;
        }
        if (length < 0 || length > n - at) return 0;
        int r = put_binary(b, way, 0, d + at, (Py_ssize_t)length, depth + 1, enc);
        if (r != 1) return r;
        at += (Py_ssize_t)length;
    }
    for (int i = 0; i < ndim; i++)
        if (put_bytes(b, "]", 1)) return -1;
    return at == n ? 1 : 0;
}

/* one binary value of a way written in C (text and json in enc): 1 written, 0 declined (the Python path
 * writes it), -1 no memory */
static int put_binary(Buf *b, int way, uint32_t element, const unsigned char *d, Py_ssize_t n, int depth, int enc)
{
    static const char hex[] = "0123456789abcdef";
    Py_ssize_t mark = b->len;
    char text[48];
    int k, r = 0;
    if (way > BIN_ARRAY) {
        r = put_binary_array(b, way - BIN_ARRAY, element, d, n, depth, enc);
        if (r == 0) b->len = mark;
        return r;
    }
    switch (way) {
    case BIN_INT2:
    case BIN_INT4:
    case BIN_INT8: {
        int width = way == BIN_INT2 ? 2 : way == BIN_INT4 ? 4 : 8;
        if (n != width) return 0;
        return put_i64(b, be_signed(d, width)) ? -1 : 1;
    }
    case BIN_BOOL:
        if (n != 1) return 0;
        return (d[0] ? put_bytes(b, "true", 4) : put_bytes(b, "false", 5)) ? -1 : 1;
    case BIN_FLOAT4:
        return n == 4 ? put_float4(b, d) : 0;
    case BIN_FLOAT8: {
        if (n != 8) return 0;
        uint64_t bits = (uint64_t)be_signed(d, 8);
        double v;
        memcpy(&v, &bits, 8);
        return put_double(b, v);
    }
    case BIN_TEXT:
        r = put_string(b, d, n, enc);
        break;
    case BIN_JSONB:
        if (n < 1 || d[0] != 1) return 0;
        r = put_string(b, d + 1, n - 1, enc);
        break;
    case BIN_BYTEA:
        if (put_bytes(b, "\"\\\\x", 4)) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            char pair[2] = {hex[d[i] >> 4], hex[d[i] & 15]};
            if (put_bytes(b, pair, 2)) return -1;
        }
        return put_bytes(b, "\"", 1) ? -1 : 1;
    case BIN_UUID:
        if (n != 16) return 0;
        k = 0;
        text[k++] = '"';
        for (int i = 0; i < 16; i++) {
            if (i == 4 || i == 6 || i == 8 || i == 10) text[k++] = '-';
            text[k++] = hex[d[i] >> 4];
            text[k++] = hex[d[i] & 15];
        }
        text[k++] = '"';
        return put_bytes(b, text, k) ? -1 : 1;
    case BIN_DATE: {
        if (n != 4) return 0;
        int64_t days = be_signed(d, 4);
        if (days == INT32_MAX) return put_bytes(b, "\"infinity\"", 10) ? -1 : 1;
        if (days == INT32_MIN) return put_bytes(b, "\"-infinity\"", 11) ? -1 : 1;
        if (put_bytes(b, "\"", 1)) return -1;
        r = put_day(b, days + 10957);  /* 10957 days from 1970-01-01 to 2000-01-01 */
        if (r == 1) r = put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    }
    case BIN_TIMESTAMP:
    case BIN_TIMESTAMPTZ: {
        if (n != 8) return 0;
        int64_t us = be_signed(d, 8);
        if (us == INT64_MAX) return put_bytes(b, "\"infinity\"", 10) ? -1 : 1;
        if (us == INT64_MIN) return put_bytes(b, "\"-infinity\"", 11) ? -1 : 1;
        const int64_t day = INT64_C(86400000000);
        int64_t days = us / day, rest = us % day;
        if (rest < 0) {
            rest += day;
            days -= 1;
        }
        if (put_bytes(b, "\"", 1)) return -1;
        r = put_day(b, days + 10957);
        if (r == 1) r = put_bytes(b, "T", 1) ? -1 : put_day_time(b, rest);
        if (r == 1 && way == BIN_TIMESTAMPTZ) r = put_bytes(b, "+00:00", 6) ? -1 : 1;
        if (r == 1) r = put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    }
    case BIN_TIME: {
        if (n != 8) return 0;
        int64_t us = be_signed(d, 8);
        if (us < 0 || us >= INT64_C(86400000000)) return 0;
        if (put_bytes(b, "\"", 1)) return -1;
        r = put_day_time(b, us);
        if (r == 1) r = put_bytes(b, "\"", 1) ? -1 : 1;
        break;
    }
    case BIN_INTERVAL:
        if (n != 16) return 0;
        return put_iso_interval(b, be_signed(d + 12, 4), be_signed(d + 8, 4), be_signed(d, 8));
    case BIN_NUMERIC:
        if (n < 8) return 0;
        r = put_numeric(b, d, n);
        break;
    }
    if (r == 0) b->len = mark;
    return r;
}

/* a text value (an array's element, or a column's) of a way written in C, a string's text in enc: 1 written,
 * 0 declined, -1 no memory */
static int put_scalar(Buf *b, int kind, const unsigned char *s, Py_ssize_t k, int enc)
{
    switch (kind) {
    case ROW_STRING:
        return put_string(b, s, k, enc);
    case ROW_INT:
        if (!plain_integer(s, k)) return 0;
        return put_bytes(b, (const char *)s, k) ? -1 : 1;
    case ROW_BOOL:
        if (k == 1 && s[0] == 't') return put_bytes(b, "true", 4) ? -1 : 1;
        if (k == 1 && s[0] == 'f') return put_bytes(b, "false", 5) ? -1 : 1;
        return 0;
    case ROW_FLOAT:
        return put_float(b, s, k);
    default:
        return put_typed(b, kind, s, k, enc);
    }
}

/* the text a plan's function gave (a str) in the form enc writes: UTF-8; a SQL_ASCII text's surrogates as
 * the JSON escapes or the bytes that form writes (see put_string).  1 written, 0 not a str it writes (an
 * error cleared), -1 no memory */
static int put_text(Buf *b, PyObject *text, int enc)
{
    Py_ssize_t size;
    const char *utf8 = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &size) : NULL;
    if (utf8 != NULL) return put_bytes(b, utf8, size) ? -1 : 1;
    PyErr_Clear();
    if (!PyUnicode_Check(text) || (enc != ENC_SQL_ASCII && enc != ENC_SQL_ASCII_SURROGATES)) return 0;
    PyObject *encoded = PyUnicode_AsEncodedString(text, "utf-8",
                                                  enc == ENC_SQL_ASCII ? "backslashreplace" : "surrogatepass");
    if (encoded == NULL) {
        PyErr_Clear();
        return 0;
    }
    int r = put_bytes(b, PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded)) ? -1 : 1;
    Py_DECREF(encoded);
    return r;
}

/* one text value of column c, its text in enc: 1 written, 0 declined, -1 an error */
static int put_value(Buf *b, const PlanColumn *c, const unsigned char *s, Py_ssize_t k, int enc)
{
    if (c->kind > ROW_CALL) {
        int r = put_typed(b, c->kind, s, k, enc);
        if (r != 0) return r;
    }
    switch (c->kind) {
    case ROW_STRING:
        return put_string(b, s, k, enc);
    case ROW_INT:
        if (!plain_integer(s, k)) return 0;
        return put_bytes(b, (const char *)s, k) ? -1 : 1;
    case ROW_BOOL:  /* boolout's t and f; another text (boolin's true, yes, on, ...) through the function */
        if (k == 1 && s[0] == 't') return put_bytes(b, "true", 4) ? -1 : 1;
        if (k == 1 && s[0] == 'f') return put_bytes(b, "false", 5) ? -1 : 1;
        /* fall through */
    default: {
        PyObject *data = PyBytes_FromStringAndSize((const char *)s, k);
        if (data == NULL) return -1;
        PyObject *text = PyObject_CallOneArg(c->call, data);
        Py_DECREF(data);
        if (text == NULL) {  /* the Python path raises it again, in its place */
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;  /* (KeyboardInterrupt: now) */
            PyErr_Clear();
            return 0;
        }
        int result = put_text(b, text, enc);
        Py_DECREF(text);
        return result;
    }
    }
}

/* a row image (the TupleData whose items start at ``at``, count columns) as RowJson writes it: 1 written,
 * 0 declined, -1 an error; unchanged TOASTed columns go to toasted (when not NULL).  Debezium's events
 * write theirs with two more: an unchanged TOASTed value taken from the TupleData at ``fill`` (the old row
 * of REPLICA IDENTITY FULL; -1: none), else written as ``placeholder`` (a JSON value; NULL: left out). */
static int put_row(Buf *b, const Plan *plan, const unsigned char *d, Py_ssize_t n, Py_ssize_t at,
                   Py_ssize_t count, int only_keys, Py_ssize_t fill, const char *placeholder, Py_ssize_t *toasted,
                   Py_ssize_t *ntoasted)
{
    Field col[N_TupleColumn], old[N_TupleColumn];
    int first = 1;
    if (put_bytes(b, "{", 1)) return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        at = r_TupleColumn(d, n, at, col);
        if (at < 0) return 0;
        const Field *use = col;
        if (fill >= 0) {
            fill = r_TupleColumn(d, n, fill, old);
            if (fill < 0) return 0;
            if ((int)col[F_TupleColumn_kind].v == 'u') use = old;
        }
        const PlanColumn *c = &plan->cols[i];
        if (only_keys && !c->is_key) continue;
        int kind = (int)use[F_TupleColumn_kind].v;
        if (kind == 'u') {
            if (toasted != NULL) toasted[(*ntoasted)++] = i;
            if (placeholder == NULL) continue;
        }
        if (kind == 'b' && !c->binary) return 0;
        if ((!first && put_bytes(b, ",", 1)) || put_bytes(b, PyBytes_AS_STRING(c->key), PyBytes_GET_SIZE(c->key)))
            return -1;
        first = 0;
        if (kind == 'u' || kind == 'n') {
            const char *text = kind == 'u' ? placeholder : "null";
            if (put_bytes(b, text, (Py_ssize_t)strlen(text))) return -1;
            continue;
        }
        const unsigned char *value = d + use[F_TupleColumn_data].at;
        Py_ssize_t size = use[F_TupleColumn_data].len;
        int r = kind == 'b' ? put_binary(b, c->binary, c->element, value, size, 0, plan->enc)
                            : put_value(b, c, value, size, plan->enc);
        if (r != 1) return r;
    }
    return put_bytes(b, "}", 1) ? -1 : 1;
}

/* rows_row(plan, columns, only_keys, toasted) -> str or None: the JSON object of a row image given as the
 * list of TupleColumn objects the codec parsed (RowJson's call), the names of its unchanged TOASTed
 * columns appended to the list toasted (unless None); None where the row path does not take it (a binary
 * value, a value of a form it does not write, anything not exactly as the parse makes it): RowJson's
 * Python writer then writes it, or raises its error. */
static PyObject *c_rows_row(PyObject *self, PyObject *args)
{
    PyObject *capsule, *columns, *toasted;
    int only_keys;
    if (!PyArg_ParseTuple(args, "OOpO:rows_row", &capsule, &columns, &only_keys, &toasted)) return NULL;
    Plan *plan = PyCapsule_GetPointer(capsule, PLAN_NAME);
    if (plan == NULL) return NULL;
    if (!READY || !PyList_CheckExact(columns) || (toasted != Py_None && !PyList_CheckExact(toasted)))
        Py_RETURN_NONE;
    Py_ssize_t count = PyList_GET_SIZE(columns), ntoasted = 0;
    if (count > plan->ncols) count = plan->ncols;
    Py_ssize_t *marks = PyMem_Malloc((size_t)(count > 0 ? count : 1) * sizeof(Py_ssize_t));
    Buf b = {0};
    PyObject *result = NULL;
    int first = 1;
    if (marks == NULL || out_init(&b, 256)) goto nomem;
    PUTS(&b, "{");
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *column = PyList_GET_ITEM(columns, i);
        if (Py_TYPE(column) != K_TupleColumn) goto decline;
        const PlanColumn *c = &plan->cols[i];
        if (only_keys && !c->is_key) continue;
        PyObject *kind = SLOT(column, O_TupleColumn_kind), *data = SLOT(column, O_TupleColumn_data);
        if (kind == NULL || !PyUnicode_Check(kind) || PyUnicode_GET_LENGTH(kind) != 1) goto decline;
        Py_UCS4 k = PyUnicode_READ_CHAR(kind, 0);
        if (k == 'u') {
            if (toasted != Py_None) marks[ntoasted++] = i;
            continue;
        }
        if (k != 'n' && ((k != 't' && (k != 'b' || !c->binary)) || data == NULL || !PyBytes_CheckExact(data)))
            goto decline;
        if (!first) PUTS(&b, ",");
        first = 0;
        PUTO(&b, c->key);
        if (k == 'n') {
            PUTS(&b, "null");
            continue;
        }
        const unsigned char *value = (const unsigned char *)PyBytes_AS_STRING(data);
        int r = k == 'b' ? put_binary(&b, c->binary, c->element, value, PyBytes_GET_SIZE(data), 0, plan->enc)
                         : put_value(&b, c, value, PyBytes_GET_SIZE(data), plan->enc);
        if (r < 0) goto nomem;
        if (r == 0) goto decline;
    }
    PUTS(&b, "}");
    /* (a SQL_ASCII plan's surrogates back as the same str; none of another's: its text is strict UTF-8) */
    result = PyUnicode_DecodeUTF8(b.p, b.len, plan->enc == ENC_SQL_ASCII_SURROGATES ? "surrogatepass" : NULL);
    if (result == NULL) goto done;
    for (Py_ssize_t i = 0; i < ntoasted; i++)
        if (PyList_Append(toasted, plan->cols[marks[i]].name) < 0) {
            Py_CLEAR(result);
            goto done;
        }
    goto done;
decline:
    result = Py_NewRef(Py_None);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    PyMem_Free(marks);
    out_free(&b);
    return result;
}
