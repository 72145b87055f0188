/* The C twin of replwire.codec.stream.values for many values at once: the server texts of one column, given
 * as the buffers of an Arrow binary array, read into the buffers of the Arrow array of their type (the
 * Spark typed columns of replwire.spark.types read them so) -- where every one is in the form the type's
 * output function writes (the forms of replwire.codec.wire.gen.text_forms), to the value the Python reading
 * gives; else None, and the caller reads them in Python.  Every read is bounds-checked (the offsets against
 * the data, the validity against the count); the output is the values' buffers and nothing more. */

/* days from 1970-01-01 of a civil date (civil's inverse) */
static int64_t days_from(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* -?[0-9]{1,19} as an int64 in [least, most]: 1, or 0 for another form or a value out of the range */
static int text_integer(const unsigned char *s, Py_ssize_t k, int64_t least, int64_t most, int64_t *out)
{
    Py_ssize_t i = k > 0 && s[0] == '-';
    if (k - i < 1 || k - i > 19 || !digits(s + i, k - i)) return 0;
    uint64_t v = 0;
    for (Py_ssize_t j = i; j < k; j++) v = v * 10 + (uint64_t)(s[j] - '0');  /* (19 digits fit) */
    if (i ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return 0;
    *out = i ? (int64_t)(0 - v) : (int64_t)v;
    return *out >= least && *out <= most;
}

/* float8out's forms (-?[0-9]+(.[0-9]+)?(e[-+][0-9]+)?, NaN, Infinity, -Infinity) as float() reads them: 1, or
 * 0 for another form or a finite text past a double's range */
static int text_double(const unsigned char *s, Py_ssize_t k, double *out)
{
    char text[64];
    if (k == 3 && memcmp(s, "NaN", 3) == 0) {
        *out = Py_NAN;
        return 1;
    }
    if ((k == 8 && memcmp(s, "Infinity", 8) == 0) || (k == 9 && memcmp(s, "-Infinity", 9) == 0)) {
        *out = s[0] == '-' ? -Py_HUGE_VAL : Py_HUGE_VAL;
        return 1;
    }
    if (k < 1 || k >= (Py_ssize_t)sizeof text) return 0;
    Py_ssize_t i = s[0] == '-', start = i;
    while (i < k && s[i] >= '0' && s[i] <= '9') i++;
    if (i == start) return 0;
    if (i < k && s[i] == '.') {
        start = ++i;
        while (i < k && s[i] >= '0' && s[i] <= '9') i++;
        if (i == start) return 0;
    }
    if (i < k && s[i] == 'e') {
        if (++i >= k || (s[i] != '-' && s[i] != '+')) return 0;
        start = ++i;
        while (i < k && s[i] >= '0' && s[i] <= '9') i++;
        if (i == start) return 0;
    }
    if (i != k) return 0;
    memcpy(text, s, (size_t)k);
    text[k] = 0;
    char *end = NULL;
    double v = PyOS_string_to_double(text, &end, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (end != text + k || isinf(v)) return 0;
    *out = v;
    return 1;
}

/* YYYY-MM-DD HH:MM:SS[.f{1,6}] (years 1-9999) as microseconds from 1970-01-01: 1, or 0 another form */
static int text_timestamp(const unsigned char *s, Py_ssize_t k, int64_t *out)
{
    if (k < 19 || s[10] != ' ' || !valid_date(s)) return 0;
    const unsigned char *t = s + 11;
    if (!digits(t, 2) || t[2] != ':' || !digits(t + 3, 2) || t[5] != ':' || !digits(t + 6, 2)) return 0;
    int hours = number(t, 2), minutes = number(t + 3, 2), seconds = number(t + 6, 2);
    if (hours > 23 || minutes > 59 || seconds > 59) return 0;
    int64_t fraction = 0;
    if (k > 19) {
        Py_ssize_t n = k - 20;
        if (s[19] != '.' || n < 1 || n > 6 || !digits(s + 20, n)) return 0;
        fraction = number(s + 20, n);
        for (Py_ssize_t z = n; z < 6; z++) fraction *= 10;
    }
    int64_t days = days_from(number(s, 4), (unsigned)number(s + 5, 2), (unsigned)number(s + 8, 2));
    *out = ((days * 24 + hours) * 60 + minutes) * INT64_C(60000000) + seconds * INT64_C(1000000) + fraction;
    return 1;
}

/* a timestamp with a [+-]HH or [+-]HH:MM offset as microseconds from 1970-01-01 UTC, within the instants a
 * datetime holds in UTC (years 1-9999): 1, or 0 another form or out of them */
static int text_timestamptz(const unsigned char *s, Py_ssize_t k, int64_t *out)
{
    Py_ssize_t zone = k >= 3 && (s[k - 3] == '+' || s[k - 3] == '-') ? k - 3
                      : k >= 6 && (s[k - 6] == '+' || s[k - 6] == '-') && s[k - 3] == ':' ? k - 6 : -1;
    if (zone < 19 || !digits(s + zone + 1, 2) || (k - zone == 6 && !digits(s + zone + 4, 2))) return 0;
    int hours = number(s + zone + 1, 2), minutes = k - zone == 6 ? number(s + zone + 4, 2) : 0;
    if (hours > 23 || minutes > 59) return 0;
    int64_t local;
    if (!text_timestamp(s, zone, &local)) return 0;
    int64_t offset = (hours * 60 + minutes) * INT64_C(60000000);
    *out = s[zone] == '-' ? local + offset : local - offset;
    return *out >= INT64_C(-62135596800000000) && *out <= INT64_C(253402300799999999);
}

/* numeric_out's -?[0-9]+(.[0-9]+)? as the unscaled value of a decimal128(precision, scale): 1, or 0 another
 * form, more fraction digits than scale, or more digits than precision */
static int text_decimal(const unsigned char *s, Py_ssize_t k, int precision, int scale, __int128 *out)
{
    Py_ssize_t i = k > 0 && s[0] == '-', dot = -1;
    for (Py_ssize_t j = i; j < k; j++) {
        if (s[j] == '.' && dot < 0) dot = j;
        else if (s[j] < '0' || s[j] > '9') return 0;
    }
    Py_ssize_t whole = (dot < 0 ? k : dot) - i, fraction = dot < 0 ? 0 : k - dot - 1;
    if (whole < 1 || (dot >= 0 && fraction < 1) || fraction > scale) return 0;
    Py_ssize_t first = i;
    while (first < i + whole - 1 && s[first] == '0') first++;  /* (leading zeros count for nothing) */
    if (i + whole - first + scale > precision) return 0;
    __int128 v = 0;
    for (Py_ssize_t j = first; j < k; j++)
        if (s[j] != '.') v = v * 10 + (s[j] - '0');
    for (Py_ssize_t z = fraction; z < scale; z++) v *= 10;
    *out = i ? -v : v;
    return 1;
}

/* texts_typed(form, count, offset, validity, offsets, data[, precision, scale]) -> (validity, values, text)
 * or None: the ``count`` values from ``offset`` of an Arrow binary array (``validity`` its bitmap or None,
 * ``offsets`` its int32 offsets, ``data`` its bytes) read as ``form`` (FORM_*; decimal128 with ``precision``
 * and ``scale``): the result's validity bitmap (None where no value is null), its values buffer (for
 * hex_bytes and interval the int32 offsets, ``text`` then the bytes, else ``text`` None).  None where a value
 * is in another form (the caller reads them in Python). */
static PyObject *c_texts_typed(PyObject *self, PyObject *args)
{
    int form, precision = 0, scale = 0;
    Py_ssize_t count, offset;
    PyObject *validity;
    Py_buffer offs, data, valid = {0};
    if (!PyArg_ParseTuple(args, "innOy*y*|ii:texts_typed", &form, &count, &offset, &validity, &offs, &data,
                          &precision, &scale))
        return NULL;
    PyObject *result = NULL;
    Buf values = {0}, text = {0}, bits = {0};
    int has_valid = validity != Py_None, nulls = 0, variable = form == FORM_HEX_BYTES || form == FORM_INTERVAL;
    if (has_valid && PyObject_GetBuffer(validity, &valid, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&offs);
        PyBuffer_Release(&data);
        return NULL;
    }
    const int32_t *at = offs.buf;
    const unsigned char *d = data.buf, *v = valid.buf;
    if (form < 1 || form > FORM_LAST || count < 0 || offset < 0 || count > PY_SSIZE_T_MAX / 16 - offset - 1
        || offs.len / 4 < offset + count + 1 || (has_valid && valid.len * 8 < offset + count)
        || (form == FORM_DECIMAL128 && (precision < 1 || precision > 38 || scale < 0 || scale > precision))) {
        PyErr_SetString(PyExc_ValueError, "texts_typed: not the buffers of a binary array, or no such form");
        goto done;
    }
    static const int WIDTH[] = {0, 2, 4, 8, 4, 8, 0, 4, 8, 8, 16, 4, 4};
    Py_ssize_t width = WIDTH[form];
    if (out_init(&values, form == FORM_BOOL ? count / 8 + 1 : (count + variable) * width + 1)
        || out_init(&bits, count / 8 + 1) || (variable && out_init(&text, 64)))
        goto nomem;
    memset(values.p, 0, (size_t)values.cap);
    memset(bits.p, 0, (size_t)bits.cap);
    if (variable) ((int32_t *)values.p)[0] = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t j = offset + i;
        int32_t start = at[j], end = at[j + 1];
        if (start < 0 || end < start || (Py_ssize_t)end > data.len) {
            PyErr_SetString(PyExc_ValueError, "texts_typed: offsets past the data");
            goto done;
        }
        if (has_valid && !(v[j / 8] >> (j % 8) & 1)) {
            nulls = 1;
            if (variable) ((int32_t *)values.p)[i + 1] = (int32_t)text.len;
            continue;
        }
        bits.p[i / 8] |= (char)(1 << (i % 8));
        const unsigned char *s = d + start;
        Py_ssize_t k = end - start;
        char *slot = values.p + i * width;
        int64_t n;
        double f;
        switch (form) {
        case FORM_INT16:
        case FORM_INT32:
        case FORM_INT64: {
            int64_t most = form == FORM_INT16 ? INT16_MAX : form == FORM_INT32 ? INT32_MAX : INT64_MAX;
            if (!text_integer(s, k, -most - 1, most, &n)) goto decline;
            if (form == FORM_INT16) *(int16_t *)slot = (int16_t)n;
            else if (form == FORM_INT32) *(int32_t *)slot = (int32_t)n;
            else *(int64_t *)slot = n;
            break;
        }
        case FORM_FLOAT32:  /* (rounded to the nearest single, as Arrow narrows a double; past the singles, declined) */
            if (!text_double(s, k, &f) || (isfinite(f) && isinf((float)f))) goto decline;
            *(float *)slot = (float)f;
            break;
        case FORM_FLOAT64:
            if (!text_double(s, k, &f)) goto decline;
            *(double *)slot = f;
            break;
        case FORM_BOOL:
            if (k != 1 || (s[0] != 't' && s[0] != 'f')) goto decline;
            if (s[0] == 't') values.p[i / 8] |= (char)(1 << (i % 8));
            break;
        case FORM_DATE32:
            if (k != 10 || !valid_date(s)) goto decline;
            *(int32_t *)slot = (int32_t)days_from(number(s, 4), (unsigned)number(s + 5, 2), (unsigned)number(s + 8, 2));
            break;
        case FORM_TIMESTAMP:
            if (!text_timestamp(s, k, &n)) goto decline;
            *(int64_t *)slot = n;
            break;
        case FORM_TIMESTAMPTZ:
            if (!text_timestamptz(s, k, &n)) goto decline;
            *(int64_t *)slot = n;
            break;
        case FORM_DECIMAL128: {
            __int128 unscaled;
            if (!text_decimal(s, k, precision, scale, &unscaled)) goto decline;
            memcpy(slot, &unscaled, 16);  /* (native order: little-endian, as Arrow's) */
            break;
        }
        case FORM_HEX_BYTES:
            if (k < 2 || s[0] != '\\' || s[1] != 'x' || (k - 2) % 2) goto decline;
            if ((k - 2) / 2 > text.cap - text.len && grow(&text, (k - 2) / 2)) goto nomem;
            for (Py_ssize_t c = 2; c < k; c += 2) {
                int high = hexval(s[c]), low = hexval(s[c + 1]);
                if (high < 0 || low < 0) goto decline;
                text.p[text.len++] = (char)(high << 4 | low);
            }
            break;
        case FORM_INTERVAL: {
            Py_ssize_t mark = text.len;
            int r = put_interval(&text, s, k);  /* (a JSON string: its quotes are taken off) */
            if (r < 0) goto nomem;
            if (r == 0) goto decline;
            memmove(text.p + mark, text.p + mark + 1, (size_t)(text.len - mark - 2));
            text.len -= 2;
            break;
        }
        }
        if (variable) {
            if (text.len > INT32_MAX) goto decline;
            ((int32_t *)values.p)[i + 1] = (int32_t)text.len;
        }
    }
    {
        Py_ssize_t size = form == FORM_BOOL ? (count + 7) / 8 : (count + variable) * width;
        PyObject *made[3] = {nulls ? PyBytes_FromStringAndSize(bits.p, (count + 7) / 8) : Py_NewRef(Py_None),
                             PyBytes_FromStringAndSize(values.p, size),
                             variable ? PyBytes_FromStringAndSize(text.p, text.len) : Py_NewRef(Py_None)};
        if (made[0] != NULL && made[1] != NULL && made[2] != NULL) result = PyTuple_Pack(3, made[0], made[1], made[2]);
        for (int m = 0; m < 3; m++) Py_XDECREF(made[m]);
    }
    goto done;
decline:
    result = Py_NewRef(Py_None);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    if (values.p != NULL) out_free(&values);
    if (text.p != NULL) out_free(&text);
    if (bits.p != NULL) out_free(&bits);
    if (has_valid) PyBuffer_Release(&valid);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&data);
    return result;
}
