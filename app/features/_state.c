/* One card's online feature state, compiled: the twin of app.features.state.CardState.
 *
 * Same rules, same outcomes, same bytes (to_bytes / from_bytes are interchangeable with the
 * Python class, which stays the readable definition and the oracle the tests compare against).
 * What differs is only how it is held: the buffer is C arrays (ts, amount, primitives, the
 * txn_id and distinct-field strings with their hashes), the max deques are C ring buffers of
 * (ts, amount) pairs, and the per-window distinct counts are dicts str -> int as in Python.
 * The object holds only str and int references (no cycles), so the collector never tracks it.
 * Remembered txn_ids are the buffered ones, found by a scan of their cached hashes.
 *
 * The strings section of to_bytes is also kept ready, one text per column (the buffered
 * events' txn_ids, each field's values: UTF-8, each one NUL-terminated), extended by every
 * in-order event and cut at the head by eviction: a snapshot then copies contiguous bytes
 * instead of visiting one str object per event and column (those visits, mostly cache misses
 * on a card's older events, were half a snapshot's cost). An out-of-order insert marks the
 * texts stale; the next to_bytes rebuilds them from the objects, as it always did before.
 *
 * The layout (windows, distinct features, since_prev windows, outliers counts, the
 * signature), the outcome classes and `vector.derive` are handed over once by `configure`
 * (app/features/state.py), so the declaration stays the only place a feature exists and
 * derive the one derivation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the card state format is little-endian; this build assumes a little-endian host"
#endif

#define MAXW 8
#define MAXF 4
#define MAXD 8
#define MAXS 8
#define MAXO 8
#define MAXWIDTH (MAXW * 3 + MAXD + MAXS + MAXO) /* primitives per event, at most */
#define MAXFACTOR ((int64_t)1 << 31) /* an outliers factor's num and den are below this */
#define MAXM MAXW
#define MAXP 64
#define HEADER 17 /* "<BIqI": version, signature, max_ts, events */

typedef struct { int64_t ts, amt; } Pair;
typedef struct { Pair *buf; Py_ssize_t head, len, cap; } Deque; /* cap: 0 or a power of two */
typedef struct { char *buf; Py_ssize_t off, len, cap; } Text; /* bytes buf[off .. off + len) */

static struct {
    int ready;
    int nw, nf, nd, ns, no, width, version;
    uint32_t signature;
    int64_t w[MAXW], maxw, sw[MAXS];
    int dfield[MAXD], dwin[MAXD], swin[MAXS];
    /* per outliers count: its window, the reference window's count slot, factor num / den */
    int owin[MAXO], oref[MAXO];
    int64_t onum[MAXO], oden[MAXO];
    Py_ssize_t compact_min;
    PyObject *accepted, *late, *redelivered, *derive;
    /* derive's plan (app.features.vector.DERIVE_PLAN): mean slots, ratio -> mean, pick order */
    int nm, nr, np, mslot[MAXM], rmean[MAXM], pick[MAXP];
    PyObject *fields[MAXF], *s_txn_id, *s_ts_ms, *s_amount_minor;
} L;

typedef struct {
    PyObject_HEAD
    int64_t max_ts;
    Py_ssize_t n, head, cap; /* n counts the evicted head slots until compaction */
    int64_t *ts, *amt, *prims;
    PyObject **txn, **vals; /* vals: nf per event, event-major */
    Py_hash_t *hash;
    Py_ssize_t start[MAXW];
    int64_t sum[MAXW];
    Deque q[MAXW];
    PyObject *counts[MAXD];
    /* text[0]: the txn_ids of events head .. n - 1, text[1 + f]: field f's values, each
     * NUL-terminated; valid while text_ok (see the top of the file) */
    Text text[1 + MAXF];
    int text_ok;
} State;

static PyTypeObject StateType;

/* --- ring buffer of (ts, amount) ------------------------------------------------------- */

static int dq_push(Deque *d, int64_t ts, int64_t amt) {
    if (d->len == d->cap) {
        Py_ssize_t cap = d->cap ? 2 * d->cap : 4;
        Pair *buf = PyMem_Malloc(cap * sizeof(Pair));
        if (!buf) { PyErr_NoMemory(); return -1; }
        for (Py_ssize_t k = 0; k < d->len; k++) buf[k] = d->buf[(d->head + k) & (d->cap - 1)];
        PyMem_Free(d->buf);
        d->buf = buf; d->head = 0; d->cap = cap;
    }
    d->buf[(d->head + d->len) & (d->cap - 1)] = (Pair){ts, amt};
    d->len++;
    return 0;
}

static inline Pair *dq_at(Deque *d, Py_ssize_t k) { return &d->buf[(d->head + k) & (d->cap - 1)]; }
static inline void dq_popleft(Deque *d) { d->head = (d->head + 1) & (d->cap - 1); d->len--; }

/* --- the strings section's texts -------------------------------------------------------- */

/* Append `len` bytes and a NUL. */
static int text_put(Text *t, const char *u, Py_ssize_t len) {
    Py_ssize_t need = t->len + len + 1;
    if (t->off + need > t->cap) {
        if (t->off) { memmove(t->buf, t->buf + t->off, t->len); t->off = 0; }
        if (need > t->cap) {
            /* 1.5x growth from 16 bytes: a card holds a few events, and a column of
             * two-letter countries should not sit in a block sized for txn_ids */
            Py_ssize_t cap = t->cap ? t->cap : 16;
            while (cap < need) cap += cap / 2;
            cap = (cap + 7) & ~(Py_ssize_t)7;
            char *buf = PyMem_Realloc(t->buf, cap);
            if (!buf) { PyErr_NoMemory(); return -1; }
            t->buf = buf; t->cap = cap;
        }
    }
    memcpy(t->buf + t->off + t->len, u, len);
    t->buf[t->off + t->len + len] = 0;
    t->len += len + 1;
    return 0;
}

/* Drop the first k strings. */
static void text_drop(Text *t, Py_ssize_t k) {
    const char *p = t->buf + t->off, *end = p + t->len;
    for (; k > 0 && p < end; k--) p = (const char *)memchr(p, 0, end - p) + 1;
    t->len = end - p;
    t->off = t->len ? p - t->buf : 0;
}

static int text_put_str(Text *t, PyObject *str) {
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(str, &len);
    return u ? text_put(t, u, len) : -1;
}

/* The column's str objects of events head .. n - 1 (col 0: txn_ids, 1 + f: field f). */
static PyObject **column(State *s, int col, Py_ssize_t *stride) {
    *stride = col ? L.nf : 1;
    return col ? s->vals + (col - 1) : s->txn;
}

/* The texts from the str objects (after an out-of-order insert, or a failed append). */
static int text_rebuild(State *s) {
    for (int c = 0; c < 1 + L.nf; c++) {
        Text *t = &s->text[c];
        Py_ssize_t stride;
        PyObject **strs = column(s, c, &stride);
        t->off = t->len = 0;
        for (Py_ssize_t k = s->head; k < s->n; k++)
            if (text_put_str(t, strs[k * stride]) < 0) return -1;
    }
    s->text_ok = 1;
    return 0;
}

/* A new last event's strings onto the texts; on any failure the texts go stale instead (the
 * next to_bytes rebuilds them, or raises what it always raised). */
static void text_append(State *s, PyObject *tid, PyObject **vals) {
    if (!s->text_ok) return;
    int bad = text_put_str(&s->text[0], tid) < 0;
    for (int f = 0; !bad && f < L.nf; f++) bad = text_put_str(&s->text[1 + f], vals[f]) < 0;
    if (bad) { PyErr_Clear(); s->text_ok = 0; }
}

/* --- helpers ---------------------------------------------------------------------------- */

static int64_t as_i64(PyObject *o, const char *what) {
    int64_t v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
    }
    return v;
}

static int grow(State *s, Py_ssize_t need) {
    if (need <= s->cap) return 0;
    Py_ssize_t cap = s->cap ? s->cap : 4;
    while (cap < need) cap *= 2;
    int64_t *ts = PyMem_Realloc(s->ts, cap * sizeof(int64_t));
    if (ts) s->ts = ts;
    int64_t *amt = PyMem_Realloc(s->amt, cap * sizeof(int64_t));
    if (amt) s->amt = amt;
    int64_t *prims = PyMem_Realloc(s->prims, cap * L.width * sizeof(int64_t));
    if (prims) s->prims = prims;
    PyObject **txn = PyMem_Realloc(s->txn, cap * sizeof(PyObject *));
    if (txn) s->txn = txn;
    PyObject **vals = PyMem_Realloc(s->vals, cap * L.nf * sizeof(PyObject *));
    if (vals) s->vals = vals;
    Py_hash_t *hash = PyMem_Realloc(s->hash, cap * sizeof(Py_hash_t));
    if (hash) s->hash = hash;
    if (!ts || !amt || !prims || !txn || !vals || !hash) { PyErr_NoMemory(); return -1; }
    s->cap = cap;
    return 0;
}

/* Drop the evicted head slots (their references) and give back a buffer much too large. */
static void compact(State *s) {
    Py_ssize_t h = s->head, live = s->n - h;
    if (!h) return;
    for (Py_ssize_t k = 0; k < h; k++) Py_DECREF(s->txn[k]);
    for (Py_ssize_t k = 0; k < h * L.nf; k++) Py_DECREF(s->vals[k]);
    memmove(s->ts, s->ts + h, live * sizeof(int64_t));
    memmove(s->amt, s->amt + h, live * sizeof(int64_t));
    memmove(s->prims, s->prims + h * L.width, live * L.width * sizeof(int64_t));
    memmove(s->txn, s->txn + h, live * sizeof(PyObject *));
    memmove(s->vals, s->vals + h * L.nf, live * L.nf * sizeof(PyObject *));
    memmove(s->hash, s->hash + h, live * sizeof(Py_hash_t));
    for (int i = 0; i < L.nw; i++) s->start[i] -= h;
    s->n = live;
    s->head = 0;
    if (s->cap <= 16 || live * 4 > s->cap) return;
    /* a card past its busy spell: smaller blocks (a realloc that fails keeps a larger, still
     * valid one, so every array holds at least the new capacity either way) */
    Py_ssize_t cap = 4;
    while (cap < 2 * live) cap *= 2;
    void *p;
    if ((p = PyMem_Realloc(s->ts, cap * sizeof(int64_t)))) s->ts = p;
    if ((p = PyMem_Realloc(s->amt, cap * sizeof(int64_t)))) s->amt = p;
    if ((p = PyMem_Realloc(s->prims, cap * L.width * sizeof(int64_t)))) s->prims = p;
    if ((p = PyMem_Realloc(s->txn, cap * sizeof(PyObject *)))) s->txn = p;
    if ((p = PyMem_Realloc(s->vals, cap * L.nf * sizeof(PyObject *)))) s->vals = p;
    if ((p = PyMem_Realloc(s->hash, cap * sizeof(Py_hash_t)))) s->hash = p;
    s->cap = cap;
    for (int c = 0; c < 1 + L.nf; c++) {
        Text *t = &s->text[c];
        if (t->cap <= 256 || 4 * t->len > t->cap) continue;
        memmove(t->buf, t->buf + t->off, t->len);
        t->off = 0;
        Py_ssize_t tcap = (t->len + t->len / 2 + 7) & ~(Py_ssize_t)7;
        if ((p = PyMem_Realloc(t->buf, tcap))) { t->buf = p; t->cap = tcap; }
    }
    /* a dict never shrinks on deletes: copies sized for the values still counted */
    for (int j = 0; j < L.nd; j++) {
        PyObject *d = PyDict_Copy(s->counts[j]);
        if (d) Py_SETREF(s->counts[j], d);
        else PyErr_Clear();  /* no memory for a smaller one: keep the larger */
    }
}

static void evict(State *s, int64_t cutoff) {
    Py_ssize_t h = s->head;
    while (h < s->n && s->ts[h] < cutoff) h++;
    if (s->text_ok && h > s->head)
        for (int c = 0; c < 1 + L.nf; c++) text_drop(&s->text[c], h - s->head);
    s->head = h;
    if (h >= L.compact_min && 2 * h >= s->n) compact(s);
}

/* Position of a remembered (buffered) txn_id, -1 if none, -2 on error. */
static Py_ssize_t find(State *s, PyObject *tid, Py_hash_t h) {
    for (Py_ssize_t k = s->head; k < s->n; k++) {
        if (s->hash[k] != h) continue;
        int eq = PyObject_RichCompareBool(s->txn[k], tid, Py_EQ);
        if (eq < 0) return -2;
        if (eq) return k;
    }
    return -1;
}

static int count_add(PyObject *dict, PyObject *key, long delta) {
    PyObject *cur = PyDict_GetItemWithError(dict, key);
    if (!cur && PyErr_Occurred()) return -1;
    long v = (cur ? PyLong_AsLong(cur) : 0) + delta;
    if (v == 0) return PyDict_DelItem(dict, key);
    PyObject *nv = PyLong_FromLong(v);
    if (!nv) return -1;
    int rc = PyDict_SetItem(dict, key, nv);
    Py_DECREF(nv);
    return rc;
}

#define EXACT ((int64_t)1 << 53)

/* vector.derive, bit for bit, where every operand is an exact double (|x| <= 2**53): there
 * Python's int / int is one correctly rounded IEEE division, as here. Anything else (a sum past
 * 2**53, a zero count or mean: Python raises) goes to the Python derive. NULL with no error set:
 * take the Python path. */
static PyObject *derive_fast(const int64_t *prims, int64_t amt) {
    double means[MAXM], ratios[MAXM];
    if (amt > EXACT || amt < -EXACT) return NULL;
    for (int m = 0; m < L.nm; m++) {
        int64_t count = prims[L.mslot[m]], total = prims[L.mslot[m] + 1];
        if (count == 0 || count > EXACT || count < -EXACT || total > EXACT || total < -EXACT)
            return NULL;
        means[m] = (double)total / (double)count;
    }
    for (int r = 0; r < L.nr; r++) {
        double mean = means[L.rmean[r]];
        if (mean == 0.0) return NULL;
        ratios[r] = (double)amt / mean;
    }
    PyObject *out = PyTuple_New(L.np);
    if (!out) return NULL;
    for (int k = 0; k < L.np; k++) {
        int at = L.pick[k];
        PyObject *v = at < L.width ? PyLong_FromLongLong(prims[at])
                    : at < L.width + L.nm ? PyFloat_FromDouble(means[at - L.width])
                    : PyFloat_FromDouble(ratios[at - L.width - L.nm]);
        if (!v) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, k, v);
    }
    PyObject_GC_UnTrack(out); /* numbers only: in no cycle (see `untracked`) */
    return out;
}

static PyObject *features_of(const int64_t *prims, int64_t amt_value, PyObject *amt_obj) {
    PyObject *fast = derive_fast(prims, amt_value);
    if (fast || PyErr_Occurred()) return fast;
    PyObject *list = PyList_New(L.width);
    if (!list) return NULL;
    for (int k = 0; k < L.width; k++) {
        PyObject *v = PyLong_FromLongLong(prims[k]);
        if (!v) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, k, v);
    }
    PyObject *amt = amt_obj ? Py_NewRef(amt_obj) : PyLong_FromLongLong(amt_value);
    if (!amt) { Py_DECREF(list); return NULL; }
    PyObject *out = PyObject_CallFunctionObjArgs(L.derive, list, amt, NULL);
    Py_DECREF(list);
    Py_DECREF(amt);
    return out;
}

/* _state.derive(primitives, amount): what the state serves for them (the tests hold it to
 * vector.derive). */
static PyObject *derive_py(PyObject *mod, PyObject *args) {
    PyObject *seq, *amt_obj;
    if (!PyArg_ParseTuple(args, "OO", &seq, &amt_obj)) return NULL;
    if (!L.ready) { PyErr_SetString(PyExc_RuntimeError, "not configured"); return NULL; }
    PyObject *t = PySequence_Tuple(seq);
    if (!t) return NULL;
    if (PyTuple_GET_SIZE(t) != L.width) {
        Py_DECREF(t);
        PyErr_Format(PyExc_ValueError, "%d primitives expected", L.width);
        return NULL;
    }
    int64_t prims[MAXWIDTH];
    for (int k = 0; k < L.width; k++) {
        prims[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, k));
        if (prims[k] == -1 && PyErr_Occurred()) { Py_DECREF(t); return NULL; }
    }
    Py_DECREF(t);
    int64_t amt = PyLong_AsLongLong(amt_obj);
    if (amt == -1 && PyErr_Occurred()) return NULL;
    return features_of(prims, amt, amt_obj);
}

static PyObject *first_features(State *s, Py_ssize_t pos) {
    return features_of(s->prims + pos * L.width, s->amt[pos], NULL);
}

/* Write an event into slot `at` (free: past the end, or opened by a memmove). */
static void put(State *s, Py_ssize_t at, PyObject *tid, Py_hash_t h, int64_t ts, int64_t amt,
                const int64_t *prims, PyObject **vals) {
    s->ts[at] = ts;
    s->amt[at] = amt;
    memcpy(s->prims + at * L.width, prims, L.width * sizeof(int64_t));
    s->txn[at] = Py_NewRef(tid);
    s->hash[at] = h;
    for (int f = 0; f < L.nf; f++) s->vals[at * L.nf + f] = Py_NewRef(vals[f]);
    s->n++;
}

/* The outliers counts of an event whose other events of window i are positions lows[i] ..
 * hi - 1 and whose own window primitives are already in prims: those x with
 * den * amount(x) * count_ref > num * sum_ref, exactly. num, den < 2**31 and count_ref < 2**32
 * (a state holds fewer events), so both sides fit an __int128. */
static void outliers(const State *s, const Py_ssize_t *lows, Py_ssize_t hi, int64_t *prims) {
    for (int o = 0; o < L.no; o++) {
        __int128 scale = (__int128)L.oden[o] * prims[L.oref[o]];
        __int128 bar = (__int128)L.onum[o] * prims[L.oref[o] + 1];
        int64_t count = 0;
        for (Py_ssize_t k = lows[L.owin[o]]; k < hi; k++)
            count += (__int128)s->amt[k] * scale > bar;
        prims[3 * L.nw + L.nd + L.ns + o] = count;
    }
}

/* --- in order: O(1) amortized (outliers counts: a scan of their windows) ----------------- */

static int append(State *s, PyObject *tid, Py_hash_t h, int64_t ts, int64_t amt,
                  PyObject **vals, Py_ssize_t live, int64_t *prims) {
    if (grow(s, s->n + 1) < 0) return -1;
    Py_ssize_t n = s->n;
    int64_t sums[MAXW];
    for (int i = 0; i < L.nw; i++) {
        if (__builtin_add_overflow(s->sum[i], amt, &sums[i])) {
            PyErr_SetString(PyExc_OverflowError, "card state: a window's sum exceeds int64");
            return -1;
        }
    }
    for (int i = 0; i < L.nw; i++) {
        int64_t bound = ts - L.w[i];
        Py_ssize_t st = s->start[i];
        int64_t total = sums[i];
        while (st < n && s->ts[st] <= bound) {
            total -= s->amt[st];
            for (int j = 0; j < L.nd; j++) {
                if (L.dwin[j] == i && count_add(s->counts[j], s->vals[st * L.nf + L.dfield[j]], -1) < 0)
                    return -1;
            }
            st++;
        }
        s->start[i] = st;
        s->sum[i] = total;
        Deque *q = &s->q[i];
        while (q->len && dq_at(q, 0)->ts <= bound) dq_popleft(q);
        while (q->len && dq_at(q, q->len - 1)->amt <= amt) q->len--;
        if (dq_push(q, ts, amt) < 0) return -1;
        prims[3 * i] = n + 1 - st;
        prims[3 * i + 1] = total;
        prims[3 * i + 2] = dq_at(q, 0)->amt;
    }
    for (int j = 0; j < L.nd; j++) {
        if (count_add(s->counts[j], vals[L.dfield[j]], 1) < 0) return -1;
        prims[3 * L.nw + j] = PyDict_GET_SIZE(s->counts[j]);
    }
    int64_t prev = s->max_ts;
    for (int k = 0; k < L.ns; k++)
        prims[3 * L.nw + L.nd + k] = (live && prev > ts - L.sw[k]) ? ts - prev : -1;
    outliers(s, s->start, n, prims); /* the window's other events: start[i] .. n - 1 */
    put(s, n, tid, h, ts, amt, prims, vals);
    text_append(s, tid, vals);
    s->max_ts = ts;
    return 0;
}

/* --- out of order (within L): rescan ------------------------------------------------------ */

static Py_ssize_t bisect_right(const int64_t *a, int64_t x, Py_ssize_t lo, Py_ssize_t hi) {
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (x < a[mid]) hi = mid; else lo = mid + 1;
    }
    return lo;
}

/* Add an event with ts < max_ts to the running aggregates of the windows at max_ts. */
static int fold_in_past(State *s, int64_t ts, int64_t amt, PyObject **vals) {
    for (int i = 0; i < L.nw; i++) {
        if (ts <= s->max_ts - L.w[i]) { s->start[i]++; continue; }
        if (__builtin_add_overflow(s->sum[i], amt, &s->sum[i])) {
            PyErr_SetString(PyExc_OverflowError, "card state: a window's sum exceeds int64");
            return -1;
        }
        for (int j = 0; j < L.nd; j++)
            if (L.dwin[j] == i && count_add(s->counts[j], vals[L.dfield[j]], 1) < 0) return -1;
        /* deque invariant: an entry stays iff larger than every later event in the window;
           entries with ts <= τ precede the new event (it goes after equal timestamps) */
        Deque *q = &s->q[i];
        Py_ssize_t len = q->len, k = 0, kept = 0;
        Pair *old = PyMem_Malloc((len + 1) * sizeof(Pair));
        if (!old) { PyErr_NoMemory(); return -1; }
        for (Py_ssize_t e = 0; e < len; e++) old[e] = *dq_at(q, e);
        while (k < len && old[k].ts <= ts) k++;
        Pair *out = old; /* filtered in place: kept entries never overtake the read index */
        for (Py_ssize_t e = 0; e < k; e++) if (old[e].amt > amt) out[kept++] = old[e];
        int add = (k == len) || amt > old[k].amt;
        Py_ssize_t later = len - k;
        memmove(out + kept + add, old + k, later * sizeof(Pair));
        if (add) out[kept] = (Pair){ts, amt};
        q->head = 0; q->len = 0;
        for (Py_ssize_t e = 0; e < kept + add + later; e++) {
            if (dq_push(q, out[e].ts, out[e].amt) < 0) { PyMem_Free(old); return -1; }
        }
        PyMem_Free(old);
    }
    return 0;
}

static int insert(State *s, PyObject *tid, Py_hash_t h, int64_t ts, int64_t amt,
                  PyObject **vals, int64_t *prims) {
    if (grow(s, s->n + 1) < 0) return -1;
    Py_ssize_t hd = s->head, n = s->n;
    Py_ssize_t hi = bisect_right(s->ts, ts, hd, n); /* every buffered event with ts <= τ came first */
    Py_ssize_t lows[MAXW];
    for (int i = 0; i < L.nw; i++) {
        Py_ssize_t lo = lows[i] = bisect_right(s->ts, ts - L.w[i], hd, hi);
        int64_t total = amt, mx = amt;
        for (Py_ssize_t k = lo; k < hi; k++) {
            if (__builtin_add_overflow(total, s->amt[k], &total)) {
                PyErr_SetString(PyExc_OverflowError, "card state: a window's sum exceeds int64");
                return -1;
            }
            if (s->amt[k] > mx) mx = s->amt[k];
        }
        prims[3 * i] = hi - lo + 1;
        prims[3 * i + 1] = total;
        prims[3 * i + 2] = mx;
    }
    for (int j = 0; j < L.nd; j++) {
        PyObject *seen = PySet_New(NULL);
        if (!seen) return -1;
        int fi = L.dfield[j];
        for (Py_ssize_t k = lows[L.dwin[j]]; k < hi; k++) {
            if (PySet_Add(seen, s->vals[k * L.nf + fi]) < 0) { Py_DECREF(seen); return -1; }
        }
        if (PySet_Add(seen, vals[fi]) < 0) { Py_DECREF(seen); return -1; }
        prims[3 * L.nw + j] = PySet_GET_SIZE(seen);
        Py_DECREF(seen);
    }
    for (int k = 0; k < L.ns; k++)
        prims[3 * L.nw + L.nd + k] = hi > lows[L.swin[k]] ? ts - s->ts[hi - 1] : -1;
    outliers(s, lows, hi, prims);
    Py_ssize_t tail = n - hi;
    memmove(s->ts + hi + 1, s->ts + hi, tail * sizeof(int64_t));
    memmove(s->amt + hi + 1, s->amt + hi, tail * sizeof(int64_t));
    memmove(s->prims + (hi + 1) * L.width, s->prims + hi * L.width, tail * L.width * sizeof(int64_t));
    memmove(s->txn + hi + 1, s->txn + hi, tail * sizeof(PyObject *));
    memmove(s->hash + hi + 1, s->hash + hi, tail * sizeof(Py_hash_t));
    memmove(s->vals + (hi + 1) * L.nf, s->vals + hi * L.nf, tail * L.nf * sizeof(PyObject *));
    put(s, hi, tid, h, ts, amt, prims, vals);
    s->text_ok = 0; /* rebuilt by the next to_bytes */
    return fold_in_past(s, ts, amt, vals);
}

/* --- the type ----------------------------------------------------------------------------- */

static PyObject *state_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (!L.ready) {
        PyErr_SetString(PyExc_RuntimeError, "app.features._state is not configured");
        return NULL;
    }
    if ((args && PyTuple_GET_SIZE(args)) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "CardState() takes no arguments");
        return NULL;
    }
    State *s = (State *)type->tp_alloc(type, 0);
    if (!s) return NULL;
    s->text_ok = 1; /* no events: empty texts */
    for (int j = 0; j < L.nd; j++) {
        if (!(s->counts[j] = PyDict_New())) { Py_DECREF(s); return NULL; }
    }
    return (PyObject *)s;
}

static void state_dealloc(State *s) {
    for (Py_ssize_t k = 0; k < s->n; k++) Py_DECREF(s->txn[k]);
    for (Py_ssize_t k = 0; k < s->n * L.nf; k++) Py_DECREF(s->vals[k]);
    PyMem_Free(s->ts); PyMem_Free(s->amt); PyMem_Free(s->prims);
    PyMem_Free(s->txn); PyMem_Free(s->vals); PyMem_Free(s->hash);
    for (int i = 0; i < L.nw; i++) PyMem_Free(s->q[i].buf);
    for (int c = 0; c < 1 + MAXF; c++) PyMem_Free(s->text[c].buf);
    for (int j = 0; j < L.nd; j++) Py_XDECREF(s->counts[j]);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *state_empty(PyObject *cls, PyObject *unused) {
    return state_new((PyTypeObject *)cls, NULL, NULL);
}

static Py_ssize_t state_len(State *s) { return s->n - s->head; }

static PyObject *state_max_ts(State *s, void *unused) {
    if (s->n - s->head == 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(s->max_ts);
}

static int has_nul(PyObject *str) {
    if (!PyUnicode_Check(str)) {
        PyErr_Format(PyExc_TypeError, "ids must be str, got %.100s", Py_TYPE(str)->tp_name);
        return -1;
    }
    if (PyUnicode_FindChar(str, 0, 0, PyUnicode_GET_LENGTH(str), 1) >= 0) {
        PyErr_SetString(PyExc_ValueError,
                        "ids must not contain NUL (validate with the transaction contract)");
        return -1;
    }
    return 0;
}

static PyObject *apply_txn(State *s, PyObject *txn, int64_t lateness) {
    PyObject *tid = NULL, *ts_obj = NULL, *amt_obj = NULL, *vals[MAXF] = {NULL};
    PyObject *result = NULL;
    int64_t prims[MAXWIDTH];
    if (!(tid = PyObject_GetAttr(txn, L.s_txn_id))) goto done;
    Py_hash_t h = PyObject_Hash(tid);
    if (h == -1) goto done;
    Py_ssize_t pos = find(s, tid, h);
    if (pos == -2) goto done;
    if (pos >= 0) {
        PyObject *features = first_features(s, pos);
        if (features) result = PyObject_CallOneArg(L.redelivered, features);
        Py_XDECREF(features);
        goto done;
    }
    if (!(ts_obj = PyObject_GetAttr(txn, L.s_ts_ms))) goto done;
    int64_t ts = as_i64(ts_obj, "ts_ms");
    if (ts == -1 && PyErr_Occurred()) goto done;
    Py_ssize_t live = s->n - s->head;
    int64_t floor;
    if (live && !__builtin_sub_overflow(s->max_ts, lateness, &floor) && ts < floor) {
        int64_t behind = s->max_ts - ts;
        PyObject *reason = PyUnicode_FromFormat(
            "ts %lld is %lld ms behind the card's max_ts %lld (allowed lateness %lld ms)",
            (long long)ts, (long long)behind, (long long)s->max_ts, (long long)lateness);
        if (!reason) goto done;
        result = PyObject_CallFunction(L.late, "NL", reason, (long long)behind);
        goto done;
    }
    for (int f = 0; f < L.nf; f++)
        if (!(vals[f] = PyObject_GetAttr(txn, L.fields[f]))) goto done;
    if (has_nul(tid) < 0) goto done;
    for (int f = 0; f < L.nf; f++)
        if (has_nul(vals[f]) < 0) goto done;
    if (!(amt_obj = PyObject_GetAttr(txn, L.s_amount_minor))) goto done;
    int64_t amt = as_i64(amt_obj, "amount_minor");
    if (amt == -1 && PyErr_Occurred()) goto done;
    int rc = (!live || ts >= s->max_ts) ? append(s, tid, h, ts, amt, vals, live, prims)
                                        : insert(s, tid, h, ts, amt, vals, prims);
    if (rc < 0) goto done;
    int64_t cutoff;
    if (__builtin_sub_overflow(s->max_ts - L.maxw, lateness, &cutoff)) cutoff = INT64_MIN;
    evict(s, cutoff);
    PyObject *features = features_of(prims, amt, amt_obj);
    if (features) result = PyObject_CallOneArg(L.accepted, features);
    Py_XDECREF(features);
done:
    Py_XDECREF(tid); Py_XDECREF(ts_obj); Py_XDECREF(amt_obj);
    for (int f = 0; f < L.nf; f++) Py_XDECREF(vals[f]);
    return result;
}

static PyObject *state_apply(State *s, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char msg[] = "apply(txn, *, allowed_lateness_ms)";
    if (nargs != 1 || !kwnames || PyTuple_GET_SIZE(kwnames) != 1) {
        PyErr_Format(PyExc_TypeError, "%s takes one transaction and its lateness by keyword", msg);
        return NULL;
    }
    PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
    if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, "allowed_lateness_ms")) {
        PyErr_Format(PyExc_TypeError, "%s: unexpected keyword %R", msg, name);
        return NULL;
    }
    int64_t lateness = as_i64(args[1], "allowed_lateness_ms");
    if (lateness == -1 && PyErr_Occurred()) return NULL;
    if (lateness < 0) {
        PyErr_Format(PyExc_ValueError, "allowed_lateness_ms must be >= 0, got %lld",
                     (long long)lateness);
        return NULL;
    }
    return apply_txn(s, args[0], lateness);
}

static PyObject *state_recall(State *s, PyObject *tid) {
    Py_hash_t h = PyObject_Hash(tid);
    if (h == -1) return NULL;
    Py_ssize_t pos = find(s, tid, h);
    if (pos == -2) return NULL;
    if (pos < 0) Py_RETURN_NONE;
    return first_features(s, pos);
}

static inline char *put_u32(char *p, uint32_t v) { memcpy(p, &v, 4); return p + 4; }

/* Format 2's primitive columns: column c of events `from` .. `from + n - 1` in the narrowest
 * signed width (1, 2, 4 or 8 bytes) that holds all its values (1 when there are none). */
static void prim_widths(const State *s, Py_ssize_t from, Py_ssize_t n, unsigned char *widths) {
    /* x fits w bytes iff x ^ (x >> 63) (its magnitude bits) < 2**(8w - 1): OR them per column
     * in one pass over the rows, branch-free */
    uint64_t mag[MAXWIDTH] = {0};
    const int w = L.width;
    for (Py_ssize_t k = 0; k < n; k++) {
        const int64_t *row = s->prims + (from + k) * w;
        for (int c = 0; c < w; c++) mag[c] |= (uint64_t)(row[c] ^ (row[c] >> 63));
    }
    for (int c = 0; c < w; c++)
        widths[c] = mag[c] < 0x80 ? 1 : mag[c] < 0x8000 ? 2 : mag[c] < 0x80000000u ? 4 : 8;
}

static char *put_columns(char *p, const State *s, Py_ssize_t from, Py_ssize_t n,
                         const unsigned char *widths) {
    for (int c = 0; c < L.width; c++) {
        const int64_t *v = s->prims + from * L.width + c;
        switch (widths[c]) {
        case 1: for (Py_ssize_t k = 0; k < n; k++) { int8_t x = (int8_t)v[k * L.width]; memcpy(p, &x, 1); p += 1; } break;
        case 2: for (Py_ssize_t k = 0; k < n; k++) { int16_t x = (int16_t)v[k * L.width]; memcpy(p, &x, 2); p += 2; } break;
        case 4: for (Py_ssize_t k = 0; k < n; k++) { int32_t x = (int32_t)v[k * L.width]; memcpy(p, &x, 4); p += 4; } break;
        default: for (Py_ssize_t k = 0; k < n; k++) { memcpy(p, &v[k * L.width], 8); p += 8; } break;
        }
    }
    return p;
}

/* The inverse of put_columns, into s->prims[0 .. n * width). */
static const char *get_columns(const char *p, State *s, Py_ssize_t n, const unsigned char *widths) {
    for (int c = 0; c < L.width; c++) {
        int64_t *v = s->prims + c;
        switch (widths[c]) {
        case 1: for (Py_ssize_t k = 0; k < n; k++) { int8_t x; memcpy(&x, p, 1); p += 1; v[k * L.width] = x; } break;
        case 2: for (Py_ssize_t k = 0; k < n; k++) { int16_t x; memcpy(&x, p, 2); p += 2; v[k * L.width] = x; } break;
        case 4: for (Py_ssize_t k = 0; k < n; k++) { int32_t x; memcpy(&x, p, 4); p += 4; v[k * L.width] = x; } break;
        default: for (Py_ssize_t k = 0; k < n; k++) { memcpy(&v[k * L.width], p, 8); p += 8; } break;
        }
    }
    return p;
}

/* to_bytes(prefix=b""): the state's bytes, after `prefix` when one is given (the card record's
 * position: one allocation and one copy for the whole record). */
static PyObject *state_to_bytes(State *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "to_bytes(prefix=b'') takes at most one argument");
        return NULL;
    }
    const char *pre = NULL;
    Py_ssize_t plen = 0;
    if (nargs && PyBytes_AsStringAndSize(args[0], (char **)&pre, &plen) < 0) return NULL;
    Py_ssize_t h = s->head, n = s->n - h, pairs = 0;
    Py_ssize_t slen[1 + MAXF];
    if (!s->text_ok && text_rebuild(s) < 0) return NULL;
    for (int c = 0; c < 1 + L.nf; c++) slen[c] = n ? s->text[c].len - 1 : 0; /* no last NUL */
    for (int i = 0; i < L.nw; i++) pairs += s->q[i].len;
    unsigned char widths[MAXWIDTH];
    prim_widths(s, h, n, widths);
    Py_ssize_t row = 0;
    for (int c = 0; c < L.width; c++) row += widths[c];
    Py_ssize_t size = HEADER + 4 * (L.nw + 1 + L.nf) + L.width + n * (16 + row) + 16 * pairs;
    for (int f = 0; f < 1 + L.nf; f++) size += slen[f];
    PyObject *out = PyBytes_FromStringAndSize(NULL, plen + size);
    if (!out) return NULL;
    char *p = PyBytes_AS_STRING(out);
    if (plen) { memcpy(p, pre, plen); p += plen; }
    int64_t max_ts = n ? s->max_ts : 0;
    *p++ = (char)L.version;
    p = put_u32(p, L.signature);
    memcpy(p, &max_ts, 8); p += 8;
    p = put_u32(p, (uint32_t)n);
    for (int i = 0; i < L.nw; i++) p = put_u32(p, (uint32_t)s->q[i].len);
    for (int f = 0; f < 1 + L.nf; f++) p = put_u32(p, (uint32_t)slen[f]);
    memcpy(p, widths, L.width); p += L.width;
    memcpy(p, s->ts + h, 8 * n); p += 8 * n;
    memcpy(p, s->amt + h, 8 * n); p += 8 * n;
    p = put_columns(p, s, h, n, widths);
    for (int i = 0; i < L.nw; i++) {
        for (Py_ssize_t k = 0; k < s->q[i].len; k++) { memcpy(p, dq_at(&s->q[i], k), 16); p += 16; }
    }
    for (int c = 0; c < 1 + L.nf; c++) {
        if (slen[c]) memcpy(p, s->text[c].buf + s->text[c].off, slen[c]);
        p += slen[c];
    }
    return out;
}

/* Split `len` bytes at NULs into exactly `n` str objects written `stride` apart. */
static int split_strings(const char *data, Py_ssize_t len, Py_ssize_t n, PyObject **dst,
                         Py_ssize_t stride, Py_ssize_t *got) {
    Py_ssize_t k = 0, from = 0;
    for (Py_ssize_t at = 0; at <= len; at++) {
        if (at < len && data[at]) continue;
        PyObject *str = PyUnicode_DecodeUTF8(data + from, at - from, NULL);
        if (!str) {
            for (Py_ssize_t m = 0; m < Py_MIN(k, n); m++) Py_DECREF(dst[m * stride]);
            return -1;
        }
        if (k < n) dst[k * stride] = str; else Py_DECREF(str);
        k++;
        from = at + 1;
    }
    *got = k;
    return 0;
}

static PyObject *state_from_bytes(PyObject *cls, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    State *s = NULL;
    const char *data = view.buf;
    Py_ssize_t size = view.len, fixed = HEADER + 4 * (L.nw + 1 + L.nf);
    if (size < fixed) {
        PyErr_Format(PyExc_ValueError, "card state: %zd bytes is too short", size);
        goto fail;
    }
    uint32_t signature, n32, lens[MAXW + 1 + MAXF];
    int64_t max_ts;
    memcpy(&signature, data + 1, 4);
    memcpy(&max_ts, data + 5, 8);
    memcpy(&n32, data + 13, 4);
    int version = (unsigned char)data[0];
    if (version != L.version && version != 1) { /* 1: primitives all int64, event-major */
        PyErr_Format(PyExc_ValueError, "card state: format %d is not %d", version, L.version);
        goto fail;
    }
    if (signature != L.signature) {
        PyErr_SetString(PyExc_ValueError,
                        "card state: written under another feature declaration; rebuild it");
        goto fail;
    }
    memcpy(lens, data + HEADER, 4 * (L.nw + 1 + L.nf));
    unsigned char widths[MAXWIDTH];
    int64_t row = 0;
    if (version == 1) {
        memset(widths, 8, sizeof widths);
    } else {
        if (size < fixed + L.width) {
            PyErr_SetString(PyExc_ValueError, "card state: lengths do not add up (truncated or corrupt)");
            goto fail;
        }
        memcpy(widths, data + fixed, L.width);
        fixed += L.width;
    }
    for (int c = 0; c < L.width; c++) {
        if (widths[c] != 1 && widths[c] != 2 && widths[c] != 4 && widths[c] != 8) {
            PyErr_SetString(PyExc_ValueError, "card state: primitive widths are not 1, 2, 4 or 8 bytes");
            goto fail;
        }
        row += widths[c];
    }
    int64_t n = n32, want = fixed + n * (16 + row);
    for (int k = 0; k < L.nw; k++) want += 16 * (int64_t)lens[k];
    for (int k = 0; k < 1 + L.nf; k++) want += lens[L.nw + k];
    if (want != size) {
        PyErr_SetString(PyExc_ValueError, "card state: lengths do not add up (truncated or corrupt)");
        goto fail;
    }
    if (!(s = (State *)state_new((PyTypeObject *)cls, NULL, NULL))) goto fail;
    if (grow(s, n) < 0) goto fail;
    const char *p = data + fixed;
    memcpy(s->ts, p, 8 * n); p += 8 * n;
    memcpy(s->amt, p, 8 * n); p += 8 * n;
    if (version == 1) { memcpy(s->prims, p, 8 * n * L.width); p += 8 * n * L.width; }
    else p = get_columns(p, s, n, widths);
    for (int i = 0; i < L.nw; i++) {
        for (uint32_t k = 0; k < lens[i]; k++) {
            Pair pr;
            memcpy(&pr, p, 16); p += 16;
            if (dq_push(&s->q[i], pr.ts, pr.amt) < 0) goto fail;
        }
    }
    /* strings: the txn_ids, then each field's values; all n of each or the state is refused */
    Py_ssize_t got[1 + MAXF];
    int bad = 0;
    for (int f = 0; f < 1 + L.nf; f++) {
        PyObject **dst = f ? s->vals + (f - 1) : s->txn;
        Py_ssize_t stride = f ? L.nf : 1;
        Py_ssize_t len = lens[L.nw + f];
        got[f] = 0;
        if (n && split_strings(p, len, n, dst, stride, &got[f]) < 0) {
            got[f] = 0;
            for (int g = 0; g < f; g++) { /* free what earlier columns made */
                PyObject **prev = g ? s->vals + (g - 1) : s->txn;
                for (Py_ssize_t k = 0; k < Py_MIN(got[g], n); k++) Py_DECREF(prev[k * (g ? L.nf : 1)]);
            }
            goto fail;
        }
        if (n && got[f] != n) bad = 1;
        p += len;
    }
    if (bad) {
        for (int f = 0; f < 1 + L.nf; f++) {
            PyObject **dst = f ? s->vals + (f - 1) : s->txn;
            for (Py_ssize_t k = 0; k < Py_MIN(got[f], n); k++) Py_DECREF(dst[k * (f ? L.nf : 1)]);
        }
        PyErr_SetString(PyExc_ValueError, "card state: string columns do not match the event count");
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if ((s->hash[k] = PyObject_Hash(s->txn[k])) == -1) { s->n = n; goto fail; }
    }
    s->n = n;
    if (n) { /* the texts are the section as read, each string NUL-terminated */
        const char *q = data + fixed + n * (16 + row);
        for (int i = 0; i < L.nw; i++) q += 16 * (Py_ssize_t)lens[i];
        for (int c = 0; c < 1 + L.nf; c++) {
            Py_ssize_t len = lens[L.nw + c];
            if (text_put(&s->text[c], q, len) < 0) { PyErr_Clear(); s->text_ok = 0; break; }
            q += len;
        }
    }
    s->max_ts = max_ts;
    for (int i = 0; i < L.nw; i++) {
        Py_ssize_t st = s->start[i] = bisect_right(s->ts, max_ts - L.w[i], 0, n);
        int64_t total = 0;
        for (Py_ssize_t k = st; k < n; k++) {
            if (__builtin_add_overflow(total, s->amt[k], &total)) {
                PyErr_SetString(PyExc_OverflowError, "card state: a window's sum exceeds int64");
                goto fail;
            }
        }
        s->sum[i] = total;
    }
    for (int j = 0; j < L.nd; j++) {
        for (Py_ssize_t k = s->start[L.dwin[j]]; k < n; k++)
            if (count_add(s->counts[j], s->vals[k * L.nf + L.dfield[j]], 1) < 0) goto fail;
    }
    PyBuffer_Release(&view);
    return (PyObject *)s;
fail:
    Py_XDECREF(s);
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *state_sizeof(State *s, PyObject *unused) {
    Py_ssize_t size = sizeof(State) + s->cap * (8 * (2 + L.width) + sizeof(PyObject *) * (1 + L.nf)
                                               + sizeof(Py_hash_t));
    for (int i = 0; i < L.nw; i++) size += s->q[i].cap * sizeof(Pair);
    for (int c = 0; c < 1 + L.nf; c++) size += s->text[c].cap;
    return PyLong_FromSsize_t(size);
}

static PyMethodDef state_methods[] = {
    {"empty", (PyCFunction)state_empty, METH_NOARGS | METH_CLASS, "The state of a card never seen."},
    {"apply", (PyCFunction)(void (*)(void))state_apply, METH_FASTCALL | METH_KEYWORDS,
     "Score one transaction of this card, in the card's log order, and fold it in if new."},
    {"recall", (PyCFunction)state_recall, METH_O,
     "The features `txn_id` was first served with, while it is still remembered."},
    {"to_bytes", (PyCFunction)(void (*)(void))state_to_bytes, METH_FASTCALL,
     "The state as compact, versioned bytes (after `prefix`, when given)."},
    {"from_bytes", (PyCFunction)state_from_bytes, METH_O | METH_CLASS,
     "Restore a state written by `to_bytes`; raise ValueError for anything else."},
    {"__sizeof__", (PyCFunction)state_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef state_getset[] = {
    {"max_ts", (getter)state_max_ts, NULL, "Largest ts accepted so far, None for a card never seen.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods state_as_sequence = {.sq_length = (lenfunc)state_len};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "app.features._state.CardState",
    .tp_basicsize = sizeof(State),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One card's online feature state, compiled (see app.features.state.CardState).",
    .tp_new = state_new,
    .tp_dealloc = (destructor)state_dealloc,
    .tp_methods = state_methods,
    .tp_getset = state_getset,
    .tp_as_sequence = &state_as_sequence,
};

/* --- configure ------------------------------------------------------------------------------- */

static int int_tuple(PyObject *t, int64_t *dst, int max, const char *what) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) > max) {
        PyErr_Format(PyExc_ValueError, "%s: a tuple of at most %d ints", what, max);
        return -1;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(t); k++) {
        dst[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, k));
        if (dst[k] == -1 && PyErr_Occurred()) return -1;
    }
    return (int)PyTuple_GET_SIZE(t);
}

static PyObject *configure(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"windows", "distinct_fields", "distinct_windows", "since_windows",
                             "fields", "signature", "version", "compact_min", "accepted", "late",
                             "redelivered", "derive", "derive_plan", "outliers", NULL};
    PyObject *windows, *dfields, *dwins, *swins, *fields, *acc, *late, *red, *derive, *plan;
    PyObject *outl;
    unsigned long long signature;
    int version;
    Py_ssize_t compact_min;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "$OOOOOKinOOOOOO", kwlist, &windows, &dfields,
                                     &dwins, &swins, &fields, &signature, &version, &compact_min,
                                     &acc, &late, &red, &derive, &plan, &outl))
        return NULL;
    if (L.ready) {
        PyErr_SetString(PyExc_RuntimeError, "app.features._state is configured once");
        return NULL;
    }
    int64_t df[MAXD], dw[MAXD], sw[MAXS];
    int nw = int_tuple(windows, L.w, MAXW, "windows");
    int nd = nw < 0 ? -1 : int_tuple(dfields, df, MAXD, "distinct_fields");
    int nd2 = nd < 0 ? -1 : int_tuple(dwins, dw, MAXD, "distinct_windows");
    int ns = nd2 < 0 ? -1 : int_tuple(swins, sw, MAXS, "since_windows");
    if (ns < 0) return NULL;
    if (nw < 1 || nd != nd2 || !PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) > MAXF
        || compact_min < 1) {
        PyErr_SetString(PyExc_ValueError, "configure: inconsistent layout");
        return NULL;
    }
    L.nw = nw; L.nd = nd; L.ns = ns; L.nf = (int)PyTuple_GET_SIZE(fields);
    for (int j = 0; j < nd; j++) {
        if (df[j] < 0 || df[j] >= L.nf || dw[j] < 0 || dw[j] >= nw) {
            PyErr_SetString(PyExc_ValueError, "configure: a distinct feature outside the layout");
            return NULL;
        }
        L.dfield[j] = (int)df[j]; L.dwin[j] = (int)dw[j];
    }
    for (int k = 0; k < ns; k++) {
        if (sw[k] < 0 || sw[k] >= nw) {
            PyErr_SetString(PyExc_ValueError, "configure: a since window outside the layout");
            return NULL;
        }
        L.swin[k] = (int)sw[k]; L.sw[k] = L.w[sw[k]];
    }
    if (!PyTuple_Check(outl) || PyTuple_GET_SIZE(outl) > MAXO) {
        PyErr_Format(PyExc_ValueError, "outliers: a tuple of at most %d (window, reference, "
                     "num, den) tuples", MAXO);
        return NULL;
    }
    int no = (int)PyTuple_GET_SIZE(outl);
    for (int o = 0; o < no; o++) {
        int64_t q[4];
        if (int_tuple(PyTuple_GET_ITEM(outl, o), q, 4, "outliers entry") != 4) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "outliers: (window, reference, num, den)");
            return NULL;
        }
        if (q[0] < 0 || q[0] >= nw || q[1] < 0 || q[1] >= nw || q[2] < 1 || q[2] >= MAXFACTOR
            || q[3] < 1 || q[3] >= MAXFACTOR) {
            PyErr_SetString(PyExc_ValueError, "configure: an outliers count outside the layout "
                            "(or a factor not in 1 .. 2**31 - 1)");
            return NULL;
        }
        L.owin[o] = (int)q[0]; L.oref[o] = 3 * (int)q[1]; L.onum[o] = q[2]; L.oden[o] = q[3];
    }
    L.no = no;
    L.maxw = L.w[nw - 1];
    L.width = 3 * nw + nd + ns + no;
    int64_t ms[MAXM], rm[MAXM], pk[MAXP];
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 3) {
        PyErr_SetString(PyExc_ValueError, "derive_plan: (means, ratios, pick)");
        return NULL;
    }
    int nm = int_tuple(PyTuple_GET_ITEM(plan, 0), ms, MAXM, "derive_plan means");
    int nr = nm < 0 ? -1 : int_tuple(PyTuple_GET_ITEM(plan, 1), rm, MAXM, "derive_plan ratios");
    int np = nr < 0 ? -1 : int_tuple(PyTuple_GET_ITEM(plan, 2), pk, MAXP, "derive_plan pick");
    if (np < 0) return NULL;
    for (int m = 0; m < nm; m++) {
        if (ms[m] < 0 || ms[m] + 1 >= L.width) {
            PyErr_SetString(PyExc_ValueError, "derive_plan: a mean slot outside the layout");
            return NULL;
        }
        L.mslot[m] = (int)ms[m];
    }
    for (int r = 0; r < nr; r++) {
        if (rm[r] < 0 || rm[r] >= nm) {
            PyErr_SetString(PyExc_ValueError, "derive_plan: a ratio of no mean");
            return NULL;
        }
        L.rmean[r] = (int)rm[r];
    }
    for (int k = 0; k < np; k++) {
        if (pk[k] < 0 || pk[k] >= L.width + nm + nr) {
            PyErr_SetString(PyExc_ValueError, "derive_plan: a pick outside the extended vector");
            return NULL;
        }
        L.pick[k] = (int)pk[k];
    }
    L.nm = nm; L.nr = nr; L.np = np;
    L.signature = (uint32_t)signature;
    L.version = version;
    L.compact_min = compact_min;
    for (int f = 0; f < L.nf; f++) {
        PyObject *name = PyTuple_GET_ITEM(fields, f);
        if (!PyUnicode_Check(name)) { PyErr_SetString(PyExc_TypeError, "fields: names"); return NULL; }
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        L.fields[f] = name;
    }
    L.accepted = Py_NewRef(acc); L.late = Py_NewRef(late);
    L.redelivered = Py_NewRef(red); L.derive = Py_NewRef(derive);
    L.s_txn_id = PyUnicode_InternFromString("txn_id");
    L.s_ts_ms = PyUnicode_InternFromString("ts_ms");
    L.s_amount_minor = PyUnicode_InternFromString("amount_minor");
    if (!L.s_txn_id || !L.s_ts_ms || !L.s_amount_minor) return NULL;
    L.ready = 1;
    Py_RETURN_NONE;
}

static PyObject *set_compact_min(PyObject *mod, PyObject *arg) {
    Py_ssize_t v = PyLong_AsSsize_t(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    if (v < 1) { PyErr_SetString(PyExc_ValueError, "compact_min must be >= 1"); return NULL; }
    Py_ssize_t old = L.compact_min;
    L.compact_min = v;
    return PyLong_FromSsize_t(old);
}

/* fill_matrix(vectors, out): the model input from feature vectors (app.scoring.scorer's
 * features_matrix): N rows of F numbers (tuples or lists; ints, bools and floats) into `out`, a
 * writable C-contiguous float32 buffer of exactly N * F items. Each value goes through double
 * (exact for every integer below 2**53, correctly rounded above, as float() does) and is then
 * rounded once to float, as numpy's float64 -> float32 cast. Returns the index of the first row
 * holding a non-finite value, -1 when there is none; ValueError when a row's width or the
 * buffer's size is not F, TypeError for a value that is not a number. */
static PyObject *fill_matrix(PyObject *mod, PyObject *args) {
    PyObject *vectors;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "Ow*", &vectors, &out)) return NULL;
    PyObject *seq = PySequence_Fast(vectors, "fill_matrix: vectors must be a sequence");
    if (!seq) { PyBuffer_Release(&out); return NULL; }
    Py_ssize_t rows = PySequence_Fast_GET_SIZE(seq), bad = -1, width = 0;
    if (rows > 0) width = (out.len / (Py_ssize_t)sizeof(float)) / rows;
    if (rows > 0 && (width == 0 || width * rows * (Py_ssize_t)sizeof(float) != out.len)) {
        PyErr_Format(PyExc_ValueError, "fill_matrix: %zd bytes do not hold %zd rows of floats",
                     out.len, rows);
        goto fail;
    }
    float *dst = (float *)out.buf;
    for (Py_ssize_t i = 0; i < rows; i++) {
        PyObject *row = PySequence_Fast_GET_ITEM(seq, i);
        PyObject **items;
        Py_ssize_t n;
        if (PyTuple_Check(row)) { items = &PyTuple_GET_ITEM(row, 0); n = PyTuple_GET_SIZE(row); }
        else if (PyList_Check(row)) { items = &PyList_GET_ITEM(row, 0); n = PyList_GET_SIZE(row); }
        else { PyErr_Format(PyExc_TypeError, "feature vector %zd is not a tuple or list", i); goto fail; }
        if (n != width) {
            PyErr_Format(PyExc_ValueError, "feature vector %zd has %zd values, expected %zd", i, n, width);
            goto fail;
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *v = items[j];
            double d;
            if (PyFloat_CheckExact(v)) d = PyFloat_AS_DOUBLE(v);
            else if (PyLong_Check(v) || PyFloat_Check(v)) {
                d = PyLong_Check(v) ? PyLong_AsDouble(v) : PyFloat_AsDouble(v);
                if (d == -1.0 && PyErr_Occurred()) goto fail;
            } else {
                PyErr_Format(PyExc_TypeError, "feature vector %zd holds a %.100s, not a number",
                             i, Py_TYPE(v)->tp_name);
                goto fail;
            }
            if (bad < 0 && !isfinite(d)) bad = i;
            *dst++ = (float)d;
        }
    }
    Py_DECREF(seq);
    PyBuffer_Release(&out);
    return PyLong_FromSsize_t(bad);
fail:
    Py_DECREF(seq);
    PyBuffer_Release(&out);
    return NULL;
}

/* A vector of numbers only (exact ints and floats) cannot be part of a reference cycle: the
 * collector need not track it (CPython itself untracks such a tuple, but only once a collection
 * has scanned it: every served vector would count towards the next young collection first). */
static PyObject *untracked(PyObject *tuple) {
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(tuple, i);
        if (!PyLong_CheckExact(v) && !PyFloat_CheckExact(v)) return tuple;
    }
    if (PyObject_GC_IsTracked(tuple)) PyObject_GC_UnTrack(tuple);
    return tuple;
}

static PyObject *joined(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "joined(card, merchant) takes two tuples");
        return NULL;
    }
    Py_ssize_t a = PyTuple_GET_SIZE(args[0]), b = PyTuple_GET_SIZE(args[1]);
    PyObject *out = PyTuple_New(a + b);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < a; i++)
        PyTuple_SET_ITEM(out, i, Py_NewRef(PyTuple_GET_ITEM(args[0], i)));
    for (Py_ssize_t i = 0; i < b; i++)
        PyTuple_SET_ITEM(out, a + i, Py_NewRef(PyTuple_GET_ITEM(args[1], i)));
    return untracked(out);
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Hand over the layout, the outcome classes and derive (once, from app.features.state)."},
    {"derive", derive_py, METH_VARARGS,
     "The feature vector the state serves for (primitives, amount): vector.derive's values."},
    {"set_compact_min", set_compact_min, METH_O,
     "Evicted slots kept before compaction (tests); returns the previous value."},
    {"joined", (PyCFunction)(void (*)(void))joined, METH_FASTCALL,
     "joined(card, merchant): card + merchant, a tuple the collector does not track when it "
     "holds only ints and floats (it cannot be in a cycle)."},
    {"fill_matrix", fill_matrix, METH_VARARGS,
     "Feature vectors into a float32 buffer, rounded once through double; the first "
     "non-finite row, or -1."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "app.features._state",
    "One card's online feature state, compiled (the twin of app.features.state.CardState).",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__state(void) {
    if (PyType_Ready(&StateType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "CardState", (PyObject *)&StateType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
