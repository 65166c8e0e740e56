/* The features.served rows of a batch as JSON, compiled: `encode_rows(items, scores,
 * model_version_json)` gives, per item, exactly the bytes msgspec writes for the served row
 * (app.stream.engine.served: `encode_served`), or None when some value is outside what this
 * writer handles (a string that would need escaping, a value of another type, an integer past
 * 64 bits): the caller then encodes the batch with msgspec. A row is ~1 kB of which 42 numbers;
 * msgspec took 3.7 us a row (a struct built per row, a type dispatch per value), this ~1.
 *
 * Numbers are written by msgspec's own routines, vendored unchanged in app/_vendor/msgspec
 * (its condensed ryu, `write_f64`: the shortest digits that read back as the same double, laid
 * out as 123.0, 1.5, 0.00012, 1.5e-7 or 1e16, non-finite as null; and yyjson's `write_u64`).
 * CPython's own shortest repr (`PyOS_double_to_string`) took 0.65 us a float, more than
 * msgspec's whole row. The tests hold the rows and the floats to the installed msgspec.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "ryu.h"

/* the feature keys: `{"name":` for the first, `,"name":` for the others */
static char **KEYS = NULL;
static Py_ssize_t *KEY_LENS = NULL;
static Py_ssize_t N_KEYS = -1;
static Py_ssize_t KEYS_TOTAL = 0; /* their lengths summed */

static PyObject *S_TXN, *S_SOURCE, *S_FEATURES, *S_REDELIVERED, *S_LABEL_CUT, *S_TXN_ID,
    *S_CARD_ID, *S_TS_MS, *S_PARTITION, *S_OFFSET;

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int reserve(Buf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 2048;
    while (cap < b->len + more) cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (!data) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const char *s, Py_ssize_t n) {
    if (reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static int put_i64(Buf *b, long long v) {
    if (reserve(b, 21) < 0) return -1;
    char *p = b->data + b->len;
    if (v < 0) {
        *p++ = '-';
        p = write_u64((uint64_t)0 - (uint64_t)v, p);
    } else {
        p = write_u64((uint64_t)v, p);
    }
    b->len = p - b->data;
    return 0;
}

/* 1: written; 0: not an int this writer handles (a bool, past 64 bits); -1: error */
static int put_int(Buf *b, PyObject *o) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return 0;
    if (v == -1 && PyErr_Occurred()) return -1;
    return put_i64(b, v) < 0 ? -1 : 1;
}

static int put_double(Buf *b, double x) {
    if (reserve(b, 24) < 0) return -1; /* write_f64 takes at most 24 bytes */
    b->len += write_f64(x, b->data + b->len, false);
    return 0;
}

/* 1: written; 0: not a str this writer writes unescaped; -1: error */
static int put_str(Buf *b, PyObject *o) {
    if (!PyUnicode_CheckExact(o) || !PyUnicode_IS_ASCII(o)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(o);
    const unsigned char *s = PyUnicode_1BYTE_DATA(o);
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == '"' || s[i] == '\\' || s[i] == 0x7f) return 0;
    if (reserve(b, n + 2) < 0) return -1;
    b->data[b->len++] = '"';
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len++] = '"';
    return 1;
}

/* `key`, then `obj.attr` by `writer`: 1 written, 0 not handled, -1 error */
static int field(Buf *b, const char *key, PyObject *obj, PyObject *attr,
                 int (*writer)(Buf *, PyObject *)) {
    if (put(b, key, (Py_ssize_t)strlen(key)) < 0) return -1;
    PyObject *value = PyObject_GetAttr(obj, attr);
    if (!value) return -1;
    int rc = writer(b, value);
    Py_DECREF(value);
    return rc;
}

#define PUT(call)                      \
    do {                               \
        if ((call) < 0) goto error;    \
    } while (0)
#define TRY(call)                      \
    do {                               \
        int r_ = (call);               \
        if (r_ < 0) goto error;        \
        if (r_ == 0) goto unhandled;   \
    } while (0)
#define LIT(s) put(&b, s, (Py_ssize_t)(sizeof(s) - 1))

static PyObject *encode_rows(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_rows(items, scores, model_version_json) takes 3 arguments");
        return NULL;
    }
    if (N_KEYS < 0) {
        PyErr_SetString(PyExc_RuntimeError, "configure(names) was not called");
        return NULL;
    }
    Py_buffer mv;
    if (PyObject_GetBuffer(args[2], &mv, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *items = PySequence_Fast(args[0], "items must be a sequence");
    PyObject *scores = items ? PySequence_Fast(args[1], "scores must be a sequence") : NULL;
    PyObject *out = NULL, *item = NULL, *txn = NULL, *source = NULL, *features = NULL,
             *value = NULL, *rows = NULL;
    Buf b = {NULL, 0, 0};
    if (!scores) goto error;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    if (PySequence_Fast_GET_SIZE(scores) != count) {
        PyErr_SetString(PyExc_ValueError, "items and scores differ in length");
        goto error;
    }
    rows = PyList_New(count);
    if (!rows) goto error;
    for (Py_ssize_t i = 0; i < count; i++) {
        item = PySequence_Fast_GET_ITEM(items, i);
        b.len = 0;
        if (!(txn = PyObject_GetAttr(item, S_TXN))) goto error;
        TRY(field(&b, "{\"txn_id\":", txn, S_TXN_ID, put_str));
        TRY(field(&b, ",\"card_id\":", txn, S_CARD_ID, put_str));
        TRY(field(&b, ",\"ts_ms\":", txn, S_TS_MS, put_int));
        Py_CLEAR(txn);
        if (!(source = PyObject_GetAttr(item, S_SOURCE))) goto error;
        TRY(field(&b, ",\"partition\":", source, S_PARTITION, put_int));
        TRY(field(&b, ",\"offset\":", source, S_OFFSET, put_int));
        Py_CLEAR(source);
        PUT(LIT(",\"features\":"));
        if (!(features = PyObject_GetAttr(item, S_FEATURES))) goto error;
        if (!PyTuple_CheckExact(features) || PyTuple_GET_SIZE(features) != N_KEYS)
            goto unhandled;
        /* room for every key and number at once: the loop writes without further checks */
        PUT(reserve(&b, KEYS_TOTAL + 24 * N_KEYS));
        for (Py_ssize_t j = 0; j < N_KEYS; j++) {
            memcpy(b.data + b.len, KEYS[j], KEY_LENS[j]);
            b.len += KEY_LENS[j];
            PyObject *f = PyTuple_GET_ITEM(features, j);
            if (PyFloat_CheckExact(f)) {
                b.len += write_f64(PyFloat_AS_DOUBLE(f), b.data + b.len, false);
                continue;
            }
            if (!PyLong_CheckExact(f)) goto unhandled;
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(f, &overflow);
            if (overflow) goto unhandled;
            if (v == -1 && PyErr_Occurred()) goto error;
            char *p = b.data + b.len;
            if (v < 0) {
                *p++ = '-';
                p = write_u64((uint64_t)0 - (uint64_t)v, p);
            } else {
                p = write_u64((uint64_t)v, p);
            }
            b.len = p - b.data;
        }
        Py_CLEAR(features);
        PUT(LIT("},\"score\":"));
        PyObject *score = PySequence_Fast_GET_ITEM(scores, i);
        if (score == Py_None) PUT(LIT("null"));
        else if (PyFloat_CheckExact(score)) PUT(put_double(&b, PyFloat_AS_DOUBLE(score)));
        else goto unhandled;
        PUT(LIT(",\"model_version\":"));
        PUT(put(&b, mv.buf, mv.len));
        PUT(LIT(",\"redelivered\":"));
        if (!(value = PyObject_GetAttr(item, S_REDELIVERED))) goto error;
        if (value == Py_True) PUT(LIT("true"));
        else if (value == Py_False) PUT(LIT("false"));
        else goto unhandled;
        Py_CLEAR(value);
        PUT(LIT(",\"label_cut_ms\":"));
        if (!(value = PyObject_GetAttr(item, S_LABEL_CUT))) goto error;
        if (value == Py_None) PUT(LIT("null"));
        else TRY(put_int(&b, value));
        Py_CLEAR(value);
        PUT(LIT("}"));
        PyObject *row = PyBytes_FromStringAndSize(b.data, b.len);
        if (!row) goto error;
        PyList_SET_ITEM(rows, i, row);
    }
    out = rows;
    rows = NULL;
    goto done;
unhandled:
    out = Py_NewRef(Py_None);
    goto done;
error:
    out = NULL;
done:
    Py_XDECREF(value);
    Py_XDECREF(features);
    Py_XDECREF(source);
    Py_XDECREF(txn);
    Py_XDECREF(rows);
    Py_XDECREF(scores);
    Py_XDECREF(items);
    PyBuffer_Release(&mv);
    PyMem_Free(b.data);
    return out;
}

static PyObject *write_float(PyObject *mod, PyObject *arg) {
    double x = PyFloat_AsDouble(arg);
    if (x == -1.0 && PyErr_Occurred()) return NULL;
    Buf b = {NULL, 0, 0};
    if (put_double(&b, x) < 0) {
        PyMem_Free(b.data);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(b.data, b.len);
    PyMem_Free(b.data);
    return out;
}

static void free_keys(void) {
    for (Py_ssize_t j = 0; j < N_KEYS; j++) PyMem_Free(KEYS[j]);
    PyMem_Free(KEYS);
    PyMem_Free(KEY_LENS);
    KEYS = NULL;
    KEY_LENS = NULL;
    N_KEYS = -1;
    KEYS_TOTAL = 0;
}

static PyObject *configure(PyObject *mod, PyObject *arg) {
    PyObject *names = PySequence_Fast(arg, "names must be a sequence of str");
    if (!names) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(names);
    free_keys();
    KEYS = PyMem_Calloc(n ? n : 1, sizeof(char *));
    KEY_LENS = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    if (!KEYS || !KEY_LENS) {
        Py_DECREF(names);
        PyErr_NoMemory();
        return NULL;
    }
    N_KEYS = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *name = PySequence_Fast_GET_ITEM(names, j);
        Buf b = {NULL, 0, 0};
        int ok = put(&b, j ? "," : "{", 1) == 0 ? put_str(&b, name) : -1;
        if (ok == 1) ok = put(&b, ":", 1) == 0 ? 1 : -1;
        if (ok != 1) {
            PyMem_Free(b.data);
            free_keys();
            Py_DECREF(names);
            if (ok == 0)
                PyErr_Format(PyExc_ValueError, "feature name %R needs escaping", name);
            return NULL;
        }
        KEYS[j] = b.data;
        KEY_LENS[j] = b.len;
        KEYS_TOTAL += b.len;
        N_KEYS = j + 1;
    }
    Py_DECREF(names);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_O,
     "configure(names): the feature names, in FEATURE_NAMES order"},
    {"encode_rows", (PyCFunction)(void (*)(void))encode_rows, METH_FASTCALL,
     "encode_rows(items, scores, model_version_json): the rows' JSON, or None (use msgspec)"},
    {"write_float", write_float, METH_O, "write_float(x): x as msgspec writes it (for tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_served", "features.served rows as JSON, compiled.", -1, methods,
};

PyMODINIT_FUNC PyInit__served(void) {
#define INTERN(var, s) \
    if (!(var = PyUnicode_InternFromString(s))) return NULL
    INTERN(S_TXN, "txn");
    INTERN(S_SOURCE, "source");
    INTERN(S_FEATURES, "features");
    INTERN(S_REDELIVERED, "redelivered");
    INTERN(S_LABEL_CUT, "label_cut_ms");
    INTERN(S_TXN_ID, "txn_id");
    INTERN(S_CARD_ID, "card_id");
    INTERN(S_TS_MS, "ts_ms");
    INTERN(S_PARTITION, "partition");
    INTERN(S_OFFSET, "offset");
#undef INTERN
    return PyModule_Create(&module);
}
