/* The compiled fold: CardState's rules (app/features/state.py) over columns of many cards.
 *
 * Per event, in log order: a txn_id still remembered by its card is Redelivered; else an
 * event older than the card's max_ts - L is Late; else it is Accepted, its integer primitives
 * (vector.LAYOUT order) are written, it joins the card's buffer (sorted by ts, then arrival)
 * and events older than max_ts - (max W + L) are evicted. The in-order path keeps running
 * sums, start pointers, monotonic max deques and value -> count maps (O(1) amortized); an
 * out-of-order event rescans its windows, is inserted, and the card's aggregates are rebuilt
 * from the buffer (O(buffer), as the Python state's memmove is). The layout (windows,
 * distinct features, since_prev windows, outliers counts) is given by the caller, derived from
 * the declaration. An outliers count scans its window's other events (O(window)).
 * Redelivery lookups go through each card's table of its buffered txn_id hashes: an absent
 * hash is exactly "not remembered"; a present one is confirmed by comparing the stored ids.
 * A batch is taken card by card (cards are independent; each card's events stay in log order).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 8
#define MAXF 4
#define MAXD 4
#define MAXS 8
#define MAXO 8
#define MAXFACTOR ((int64_t)1 << 31) /* an outliers factor's num and den are below this */
#define IDMAX 64
#define COMPACT_MIN 64

enum { ACCEPTED = 0, LATE = 1, REDELIVERED = 2 };

typedef struct { int64_t ts, amt; int32_t v[MAXF]; } Ev;  /* what the windows read: 32 bytes */
typedef struct { uint64_t h; uint8_t len; char id[IDMAX]; } Id;  /* parallel to Ev */

typedef struct { int32_t *key; int32_t *cnt; uint32_t cap, size; } IMap;
/* A card's remembered txn_id hashes -> count; key 0 = empty slot. */
typedef struct { uint64_t *key; uint32_t *cnt; uint64_t cap, size; } RMap;

typedef struct {
    Ev *ev;
    Id *ids;
    int64_t head, n, cap, max_ts;
    int64_t start[MAXW], sum[MAXW];
    int64_t *dq[MAXW];
    int64_t dqh[MAXW], dqn[MAXW], dqcap[MAXW];
    IMap cnt[MAXD];
    RMap rem;
} Card;

typedef struct {
    PyObject_HEAD
    int nw, nd, ns, no, nf, width;
    int64_t w[MAXW];
    int dfield[MAXD], dwin[MAXD], swin[MAXS];
    /* per outliers count: its window, the reference window's count slot, factor num / den */
    int owin[MAXO], oref[MAXO];
    int64_t onum[MAXO], oden[MAXO];
    int64_t lateness, maxw;
    Card *cards;
    int64_t ncards;
    int64_t live;
    IMap scratch;
} Folder;

/* --- small int -> count map (linear probing, backward-shift deletion) ------------------- */

static inline uint32_t ihash(int32_t k) {
    uint32_t h = (uint32_t)k;
    h ^= h >> 16; h *= 0x45d9f3bu; h ^= h >> 16; h *= 0x45d9f3bu; h ^= h >> 16;
    return h;
}

static int imap_alloc(IMap *m, uint32_t cap) {
    int32_t *key = malloc(sizeof(int32_t) * cap), *cnt = malloc(sizeof(int32_t) * cap);
    if (!key || !cnt) { free(key); free(cnt); return -1; }
    memset(key, 0xff, sizeof(int32_t) * cap);
    int32_t *ok = m->key, *oc = m->cnt;
    uint32_t ocap = m->cap;
    m->key = key; m->cnt = cnt; m->cap = cap; m->size = 0;
    for (uint32_t i = 0; i < ocap; i++) {
        if (ok[i] < 0) continue;
        uint32_t j = ihash(ok[i]) & (cap - 1);
        while (key[j] >= 0) j = (j + 1) & (cap - 1);
        key[j] = ok[i]; cnt[j] = oc[i]; m->size++;
    }
    free(ok); free(oc);
    return 0;
}

/* Adds one occurrence of k; returns the number of distinct keys, or -1 without memory. */
static int64_t imap_inc(IMap *m, int32_t k) {
    if ((m->size + 1) * 2 > m->cap && imap_alloc(m, m->cap ? m->cap * 2 : 8) < 0) return -1;
    uint32_t mask = m->cap - 1, i = ihash(k) & mask;
    while (m->key[i] >= 0) {
        if (m->key[i] == k) { m->cnt[i]++; return m->size; }
        i = (i + 1) & mask;
    }
    m->key[i] = k; m->cnt[i] = 1; m->size++;
    return m->size;
}

static void imap_dec(IMap *m, int32_t k) {
    uint32_t mask = m->cap - 1, i = ihash(k) & mask;
    while (m->key[i] != k) i = (i + 1) & mask;  /* present by construction */
    if (--m->cnt[i]) return;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (m->key[j] < 0) break;
        uint32_t home = ihash(m->key[j]) & mask;
        int stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        m->key[i] = m->key[j]; m->cnt[i] = m->cnt[j]; i = j;
    }
    m->key[i] = -1;
    m->size--;
}

static void imap_clear(IMap *m) {
    if (m->cap) memset(m->key, 0xff, sizeof(int32_t) * m->cap);
    m->size = 0;
}

static void imap_free(IMap *m) { free(m->key); free(m->cnt); m->key = m->cnt = NULL; m->cap = m->size = 0; }

/* --- hashing and the remembered txn_ids ----------------------------------------------- */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static inline uint64_t id_hash(const char *s, int len) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < len; i++) { h ^= (uint8_t)s[i]; h *= 0x100000001b3ULL; }
    return mix64(h);
}

static inline uint64_t rkey(uint64_t h) { return h ? h : 1; }

/* Open addressing, linear probing, backward-shift deletion. A key absent here is exactly "not
 * remembered"; a present one is confirmed against the card's stored ids. */
static int rmap_has(const RMap *m, uint64_t k) {
    if (!m->cap) return 0;
    for (uint64_t i = k & (m->cap - 1); m->key[i]; i = (i + 1) & (m->cap - 1))
        if (m->key[i] == k) return 1;
    return 0;
}

static int rmap_put(RMap *m, uint64_t k);

static int rmap_grow(RMap *m) {
    uint64_t cap = m->cap ? 2 * m->cap : 8;
    RMap old = *m;
    m->key = calloc(cap, sizeof(uint64_t));
    m->cnt = calloc(cap, sizeof(uint32_t));
    if (!m->key || !m->cnt) { free(m->key); free(m->cnt); *m = old; return -1; }
    m->cap = cap; m->size = 0;
    for (uint64_t i = 0; i < old.cap; i++)
        if (old.key[i]) {
            uint64_t j = old.key[i] & (cap - 1);
            while (m->key[j]) j = (j + 1) & (cap - 1);
            m->key[j] = old.key[i]; m->cnt[j] = old.cnt[i]; m->size++;
        }
    free(old.key); free(old.cnt);
    return 0;
}

static int rmap_put(RMap *m, uint64_t k) {
    if ((m->size + 1) * 2 > m->cap && rmap_grow(m) < 0) return -1;
    uint64_t i = k & (m->cap - 1);
    while (m->key[i] && m->key[i] != k) i = (i + 1) & (m->cap - 1);
    if (!m->key[i]) { m->key[i] = k; m->cnt[i] = 0; m->size++; }
    m->cnt[i]++;
    return 0;
}

static void rmap_del(RMap *m, uint64_t k) {
    uint64_t mask = m->cap - 1, i = k & mask;
    while (m->key[i] != k) i = (i + 1) & mask;  /* present by construction */
    if (--m->cnt[i]) return;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->key[j]) break;
        uint64_t home = m->key[j] & mask;
        int stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        m->key[i] = m->key[j]; m->cnt[i] = m->cnt[j]; i = j;
    }
    m->key[i] = 0;
    m->size--;
}

/* --- one card ---------------------------------------------------------------------------- */

static int64_t bisect_right(const Ev *ev, int64_t x, int64_t lo, int64_t hi) {
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (x < ev[mid].ts) hi = mid; else lo = mid + 1;
    }
    return lo;
}

static int dq_push(Card *c, int i, int64_t pos) {
    if (c->dqn[i] == c->dqcap[i]) {
        if (c->dqh[i] > 0) {
            memmove(c->dq[i], c->dq[i] + c->dqh[i], sizeof(int64_t) * (c->dqn[i] - c->dqh[i]));
            c->dqn[i] -= c->dqh[i]; c->dqh[i] = 0;
        }
        if (c->dqn[i] == c->dqcap[i]) {
            int64_t cap = c->dqcap[i] ? 2 * c->dqcap[i] : 8;
            int64_t *dq = realloc(c->dq[i], sizeof(int64_t) * cap);
            if (!dq) return -1;
            c->dq[i] = dq; c->dqcap[i] = cap;
        }
    }
    c->dq[i][c->dqn[i]++] = pos;
    return 0;
}

/* Aggregates of the windows ending at max_ts, recomputed from the buffer. */
static int rebuild(Folder *f, Card *c) {
    for (int i = 0; i < f->nw; i++) {
        int64_t s = bisect_right(c->ev, c->max_ts - f->w[i], c->head, c->n), total = 0;
        c->start[i] = s;
        c->dqh[i] = c->dqn[i] = 0;
        for (int64_t p = s; p < c->n; p++) {
            total += c->ev[p].amt;
            while (c->dqn[i] > 0 && c->ev[c->dq[i][c->dqn[i] - 1]].amt <= c->ev[p].amt) c->dqn[i]--;
            if (dq_push(c, i, p) < 0) return -1;
        }
        c->sum[i] = total;
    }
    for (int j = 0; j < f->nd; j++) {
        imap_clear(&c->cnt[j]);
        for (int64_t p = c->start[f->dwin[j]]; p < c->n; p++)
            if (imap_inc(&c->cnt[j], c->ev[p].v[f->dfield[j]]) < 0) return -1;
    }
    return 0;
}

/* The outliers counts of an event whose other events of window i are ev[lows[i] .. hi - 1]
 * and whose own window primitives are already in prims: those x with
 * den * amount(x) * count_ref > num * sum_ref, exactly. num, den < 2**31 and count_ref < 2**32
 * (a card's buffer is smaller), so both sides fit an __int128. */
static void outliers(const Folder *f, const Ev *ev, const int64_t *lows, int64_t hi,
                     int64_t *prims) {
    for (int o = 0; o < f->no; o++) {
        __int128 scale = (__int128)f->oden[o] * prims[f->oref[o]];
        __int128 bar = (__int128)f->onum[o] * prims[f->oref[o] + 1];
        int64_t count = 0;
        for (int64_t p = lows[f->owin[o]]; p < hi; p++) count += (__int128)ev[p].amt * scale > bar;
        prims[3 * f->nw + f->nd + f->ns + o] = count;
    }
}

static void append(Folder *f, Card *c, int64_t *prims, int64_t live, int *err) {
    Ev *ev = c->ev;
    int64_t n = c->n, ts = ev[n].ts, amt = ev[n].amt;
    for (int i = 0; i < f->nw; i++) {
        int64_t bound = ts - f->w[i], s = c->start[i], total = c->sum[i] + amt;
        while (s < n && ev[s].ts <= bound) {
            total -= ev[s].amt;
            for (int j = 0; j < f->nd; j++)
                if (f->dwin[j] == i) imap_dec(&c->cnt[j], ev[s].v[f->dfield[j]]);
            s++;
        }
        c->start[i] = s; c->sum[i] = total;
        while (c->dqn[i] > c->dqh[i] && ev[c->dq[i][c->dqh[i]]].ts <= bound) c->dqh[i]++;
        while (c->dqn[i] > c->dqh[i] && ev[c->dq[i][c->dqn[i] - 1]].amt <= amt) c->dqn[i]--;
        if (dq_push(c, i, n) < 0) { *err = 1; return; }
        prims[3 * i] = n + 1 - s;
        prims[3 * i + 1] = total;
        prims[3 * i + 2] = ev[c->dq[i][c->dqh[i]]].amt;
    }
    for (int j = 0; j < f->nd; j++) {
        int64_t k = imap_inc(&c->cnt[j], ev[n].v[f->dfield[j]]);
        if (k < 0) { *err = 1; return; }
        prims[3 * f->nw + j] = k;
    }
    int64_t prev = c->max_ts;
    for (int k = 0; k < f->ns; k++)
        prims[3 * f->nw + f->nd + k] = (live && prev > ts - f->w[f->swin[k]]) ? ts - prev : -1;
    outliers(f, ev, c->start, n, prims);  /* the window's other events: start[i] .. n - 1 */
    c->n = n + 1;
    c->max_ts = ts;
}

static void insert(Folder *f, Card *c, int64_t *prims, int *err) {
    Ev *ev = c->ev;
    Ev x = ev[c->n];  /* staged past the end by the caller, as its id */
    Id xid = c->ids[c->n];
    int64_t ts = x.ts, hi = bisect_right(ev, ts, c->head, c->n), lows[MAXW];
    for (int i = 0; i < f->nw; i++) {
        int64_t lo = bisect_right(ev, ts - f->w[i], c->head, hi), total = x.amt, mx = x.amt;
        lows[i] = lo;
        for (int64_t p = lo; p < hi; p++) { total += ev[p].amt; if (ev[p].amt > mx) mx = ev[p].amt; }
        prims[3 * i] = hi - lo + 1;
        prims[3 * i + 1] = total;
        prims[3 * i + 2] = mx;
    }
    for (int j = 0; j < f->nd; j++) {
        int fi = f->dfield[j];
        imap_clear(&f->scratch);
        for (int64_t p = lows[f->dwin[j]]; p < hi; p++)
            if (imap_inc(&f->scratch, ev[p].v[fi]) < 0) { *err = 1; return; }
        int64_t k = imap_inc(&f->scratch, x.v[fi]);
        if (k < 0) { *err = 1; return; }
        prims[3 * f->nw + j] = k;
    }
    for (int k = 0; k < f->ns; k++)
        prims[3 * f->nw + f->nd + k] = hi > lows[f->swin[k]] ? ts - ev[hi - 1].ts : -1;
    outliers(f, ev, lows, hi, prims);
    memmove(ev + hi + 1, ev + hi, sizeof(Ev) * (c->n - hi));
    memmove(c->ids + hi + 1, c->ids + hi, sizeof(Id) * (c->n - hi));
    ev[hi] = x;
    c->ids[hi] = xid;
    c->n++;
    if (rebuild(f, c) < 0) *err = 1;
}

static int evict(Folder *f, int64_t card, Card *c) {
    int64_t cutoff = c->max_ts - f->maxw - f->lateness;
    while (c->head < c->n && c->ev[c->head].ts < cutoff) {
        rmap_del(&c->rem, rkey(c->ids[c->head].h));
        f->live--;
        c->head++;
    }
    if (c->head >= COMPACT_MIN && 2 * c->head >= c->n) {
        memmove(c->ev, c->ev + c->head, sizeof(Ev) * (c->n - c->head));
        memmove(c->ids, c->ids + c->head, sizeof(Id) * (c->n - c->head));
        c->n -= c->head; c->head = 0;
        return rebuild(f, c);
    }
    return 0;
}

static int remembered(const Card *c, uint64_t h, const char *id, int len) {
    for (int64_t p = c->head; p < c->n; p++)
        if (c->ids[p].h == h && c->ids[p].len == len && memcmp(c->ids[p].id, id, len) == 0) return 1;
    return 0;
}

/* --- the Python type ----------------------------------------------------------------------- */

static int int_tuple(PyObject *seq, int64_t *out, int max, const char *what) {
    PyObject *t = PySequence_Fast(seq, what);
    if (!t) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(t);
    if (n > max) { Py_DECREF(t); PyErr_Format(PyExc_ValueError, "%s: at most %d", what, max); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(t, i));
        if (out[i] == -1 && PyErr_Occurred()) { Py_DECREF(t); return -1; }
    }
    Py_DECREF(t);
    return (int)n;
}

static int Folder_init(Folder *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"windows", "distinct_fields", "distinct_windows", "since_windows",
                         "fields", "allowed_lateness_ms", "outliers", NULL};
    PyObject *w, *df, *dw, *sw, *ol = NULL;
    int nf;
    long long lateness;
    int64_t buf[MAXS > MAXD ? MAXS : MAXD];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOiL|O", kw, &w, &df, &dw, &sw, &nf, &lateness,
                                     &ol))
        return -1;
    if ((self->nw = int_tuple(w, self->w, MAXW, "windows")) < 1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "windows: at least one");
        return -1;
    }
    if ((self->nd = int_tuple(df, buf, MAXD, "distinct_fields")) < 0) return -1;
    for (int j = 0; j < self->nd; j++) self->dfield[j] = (int)buf[j];
    if (int_tuple(dw, buf, MAXD, "distinct_windows") != self->nd) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "distinct lengths differ");
        return -1;
    }
    for (int j = 0; j < self->nd; j++) self->dwin[j] = (int)buf[j];
    if ((self->ns = int_tuple(sw, buf, MAXS, "since_windows")) < 0) return -1;
    for (int k = 0; k < self->ns; k++) self->swin[k] = (int)buf[k];
    if (nf < 0 || nf > MAXF || lateness < 0) {
        PyErr_SetString(PyExc_ValueError, "fields must be 0..4 and lateness >= 0");
        return -1;
    }
    for (int i = 0; i < self->nw; i++)
        if (self->w[i] <= 0 || (i && self->w[i] <= self->w[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "windows must be positive and ascending");
            return -1;
        }
    for (int j = 0; j < self->nd; j++)
        if (self->dfield[j] < 0 || self->dfield[j] >= nf || self->dwin[j] < 0 || self->dwin[j] >= self->nw) {
            PyErr_SetString(PyExc_ValueError, "distinct feature out of range");
            return -1;
        }
    for (int k = 0; k < self->ns; k++)
        if (self->swin[k] < 0 || self->swin[k] >= self->nw) {
            PyErr_SetString(PyExc_ValueError, "since_prev window out of range");
            return -1;
        }
    self->no = 0;
    if (ol) {
        PyObject *t = PySequence_Fast(ol, "outliers");
        if (!t) return -1;
        Py_ssize_t no = PySequence_Fast_GET_SIZE(t);
        if (no > MAXO) {
            Py_DECREF(t);
            PyErr_Format(PyExc_ValueError, "outliers: at most %d", MAXO);
            return -1;
        }
        for (Py_ssize_t o = 0; o < no; o++) {
            int64_t q[4];
            int got = int_tuple(PySequence_Fast_GET_ITEM(t, o), q, 4, "outliers entry");
            if (got != 4 || q[0] < 0 || q[0] >= self->nw || q[1] < 0 || q[1] >= self->nw
                || q[2] < 1 || q[2] >= MAXFACTOR || q[3] < 1 || q[3] >= MAXFACTOR) {
                Py_DECREF(t);
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "outliers: (window, reference window, num, "
                                    "den) in range, num and den in 1 .. 2**31 - 1");
                return -1;
            }
            self->owin[o] = (int)q[0]; self->oref[o] = 3 * (int)q[1];
            self->onum[o] = q[2]; self->oden[o] = q[3];
        }
        self->no = (int)no;
        Py_DECREF(t);
    }
    self->nf = nf;
    self->width = 3 * self->nw + self->nd + self->ns + self->no;
    self->lateness = lateness;
    self->maxw = self->w[self->nw - 1];
    return 0;
}

static void Folder_dealloc(Folder *self) {
    for (int64_t c = 0; c < self->ncards; c++) {
        Card *cd = &self->cards[c];
        free(cd->ev);
        free(cd->ids);
        free(cd->rem.key);
        free(cd->rem.cnt);
        for (int i = 0; i < MAXW; i++) free(cd->dq[i]);
        for (int j = 0; j < MAXD; j++) imap_free(&cd->cnt[j]);
    }
    free(self->cards);
    imap_free(&self->scratch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int grow_cards(Folder *f, int64_t need) {
    if (need <= f->ncards) return 0;
    int64_t cap = f->ncards ? f->ncards : 1024;
    while (cap < need) cap *= 2;
    Card *cards = realloc(f->cards, sizeof(Card) * cap);
    if (!cards) return -1;
    memset(cards + f->ncards, 0, sizeof(Card) * (cap - f->ncards));
    f->cards = cards; f->ncards = cap;
    return 0;
}

typedef struct { Py_buffer b; int used; } Buf;

static int get_buf(PyObject *o, Buf *b, Py_ssize_t itemsize, Py_ssize_t min_len, int writable,
                   const char *what) {
    if (PyObject_GetBuffer(o, &b->b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0) return -1;
    b->used = 1;
    if ((itemsize && b->b.len % itemsize) || b->b.len < min_len * (itemsize ? itemsize : 1)) {
        PyErr_Format(PyExc_ValueError, "%s: wrong size", what);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(fold_doc,
"fold(cards, ts, amounts, values, offsets, ids, status, prims) -> None\n\n"
"Apply n events in log order. cards: int32 card codes; ts, amounts: int64; values: one int32\n"
"code array per distinct field; offsets: n+1 int32 offsets into ids (utf-8 txn_ids, <= 64\n"
"bytes each); status: uint8 out (0 accepted, 1 late, 2 redelivered); prims: int64 out, width x\n"
"n (one row per primitive), written for accepted events only.");

static PyObject *Folder_fold(Folder *self, PyObject *args) {
    PyObject *oc, *ots, *oa, *ov, *oo, *oi, *ost, *op;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &oc, &ots, &oa, &ov, &oo, &oi, &ost, &op)) return NULL;
    Buf cb = {0}, tb = {0}, ab = {0}, vb[MAXF] = {{{0}}}, ob = {0}, ib = {0}, sb = {0}, pb = {0};
    PyObject *result = NULL;
    Py_ssize_t n;
    if (get_buf(oc, &cb, 4, 0, 0, "cards") < 0) goto done;
    n = cb.b.len / 4;
    if (get_buf(ots, &tb, 8, n, 0, "ts") < 0 || get_buf(oa, &ab, 8, n, 0, "amounts") < 0 ||
        get_buf(oo, &ob, 4, n + 1, 0, "offsets") < 0 || get_buf(oi, &ib, 0, 0, 0, "ids") < 0 ||
        get_buf(ost, &sb, 1, n, 1, "status") < 0 ||
        get_buf(op, &pb, 8, n * self->width, 1, "prims") < 0)
        goto done;
    if (!PyTuple_Check(ov) || PyTuple_GET_SIZE(ov) != self->nf) {
        PyErr_SetString(PyExc_ValueError, "values: one array per distinct field");
        goto done;
    }
    for (int fi = 0; fi < self->nf; fi++)
        if (get_buf(PyTuple_GET_ITEM(ov, fi), &vb[fi], 4, n, 0, "values") < 0) goto done;
    const int32_t *cards = cb.b.buf, *offs = ob.b.buf;
    const int64_t *ts = tb.b.buf, *amt = ab.b.buf;
    const char *ids = ib.b.buf;
    uint8_t *status = sb.b.buf;
    int64_t *prims = pb.b.buf;
    int32_t maxcard = -1;
    for (Py_ssize_t e = 0; e < n; e++) {
        if (cards[e] < 0) { PyErr_SetString(PyExc_ValueError, "negative card code"); goto done; }
        if (cards[e] > maxcard) maxcard = cards[e];
        if (offs[e + 1] < offs[e] || offs[e + 1] - offs[e] > IDMAX || offs[e + 1] > ib.b.len) {
            PyErr_SetString(PyExc_ValueError, "txn_id offsets out of range (or id over 64 bytes)");
            goto done;
        }
    }
    if (grow_cards(self, (int64_t)maxcard + 1) < 0) { PyErr_NoMemory(); goto done; }
    /* Cards are independent: take the batch card by card (each card's events in log order) so
     * that one card's state stays in cache while its events are folded. */
    int64_t *first = calloc((size_t)maxcard + 2, sizeof(int64_t));
    int64_t *order = malloc(sizeof(int64_t) * (n ? n : 1));
    int64_t *rows = malloc(sizeof(int64_t) * (n ? n : 1) * self->width);  /* in `order` */
    if (!first || !order || !rows) {
        free(first); free(order); free(rows); PyErr_NoMemory(); goto done;
    }
    for (Py_ssize_t e = 0; e < n; e++) first[cards[e] + 1]++;
    for (int64_t k = 0; k <= maxcard; k++) first[k + 1] += first[k];
    for (Py_ssize_t e = 0; e < n; e++) order[first[cards[e]]++] = e;
    free(first);
    first = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!first) { free(order); free(rows); PyErr_NoMemory(); goto done; }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t o = 0; o < n && !err; o++) {
        Py_ssize_t e = order[o];
        int64_t card = cards[e];
        Card *c = &self->cards[card];
        const char *id = ids + offs[e];
        int len = offs[e + 1] - offs[e];
        uint64_t h = id_hash(id, len);
        int64_t live = c->n - c->head, t = ts[e];
        uint64_t key = rkey(h);
        if (live && rmap_has(&c->rem, key) && remembered(c, h, id, len)) {
            status[e] = REDELIVERED;
            continue;
        }
        if (live && t < c->max_ts - self->lateness) { status[e] = LATE; continue; }
        if (c->n == c->cap) {
            int64_t cap = c->cap ? 2 * c->cap : 4;
            Ev *ev = realloc(c->ev, sizeof(Ev) * (cap + 1));  /* + 1: the staging slot */
            if (ev) c->ev = ev;
            Id *idv = ev ? realloc(c->ids, sizeof(Id) * (cap + 1)) : NULL;
            if (!idv) { err = 1; break; }
            c->ids = idv; c->cap = cap;
        }
        Ev *x = &c->ev[c->n];
        x->ts = t; x->amt = amt[e];
        Id *xi = &c->ids[c->n];
        xi->h = h; xi->len = (uint8_t)len;
        memcpy(xi->id, id, len);
        for (int fi = 0; fi < self->nf; fi++) x->v[fi] = ((const int32_t *)vb[fi].b.buf)[e];
        int64_t *p = rows + (int64_t)o * self->width;
        if (!live || t >= c->max_ts) append(self, c, p, live, &err);
        else insert(self, c, p, &err);
        if (err) break;
        if (rmap_put(&c->rem, key) < 0) { err = 1; break; }
        self->live++;
        if (evict(self, card, c) < 0) { err = 1; break; }
        status[e] = ACCEPTED;
    }
    if (!err) {  /* back to log order, by column: one row read, `width` sequential writes */
        for (Py_ssize_t o = 0; o < n; o++) first[order[o]] = o;  /* first: now the rank */
        for (Py_ssize_t e = 0; e < n; e++) {
            if (status[e] != ACCEPTED) continue;
            const int64_t *row = rows + first[e] * self->width;
            for (int k = 0; k < self->width; k++) prims[(int64_t)k * n + e] = row[k];
        }
    }
    Py_END_ALLOW_THREADS
    free(first);
    free(order);
    free(rows);
    if (err) { PyErr_NoMemory(); goto done; }
    result = Py_None;
    Py_INCREF(result);
done:
    if (cb.used) PyBuffer_Release(&cb.b);
    if (tb.used) PyBuffer_Release(&tb.b);
    if (ab.used) PyBuffer_Release(&ab.b);
    if (ob.used) PyBuffer_Release(&ob.b);
    if (ib.used) PyBuffer_Release(&ib.b);
    if (sb.used) PyBuffer_Release(&sb.b);
    if (pb.used) PyBuffer_Release(&pb.b);
    for (int fi = 0; fi < MAXF; fi++) if (vb[fi].used) PyBuffer_Release(&vb[fi].b);
    return result;
}

static PyObject *Folder_live(Folder *self, void *closure) { return PyLong_FromLongLong(self->live); }
static PyObject *Folder_width(Folder *self, void *closure) { return PyLong_FromLong(self->width); }

static PyMethodDef Folder_methods[] = {
    {"fold", (PyCFunction)Folder_fold, METH_VARARGS, fold_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Folder_getset[] = {
    {"live", (getter)Folder_live, NULL, "Buffered (accepted, not yet evicted) events, all cards.", NULL},
    {"width", (getter)Folder_width, NULL, "Integer primitives per event.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FolderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "app.features._fold.Folder",
    .tp_basicsize = sizeof(Folder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Every card's feature state, folded from columns (see the module source)."),
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Folder_init,
    .tp_dealloc = (destructor)Folder_dealloc,
    .tp_methods = Folder_methods,
    .tp_getset = Folder_getset,
};

static struct PyModuleDef fold_module = {
    PyModuleDef_HEAD_INIT, "_fold", "The compiled offline fold of app.features.", -1, NULL,
};

PyMODINIT_FUNC PyInit__fold(void) {
    if (PyType_Ready(&FolderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fold_module);
    if (!m) return NULL;
    Py_INCREF(&FolderType);
    if (PyModule_AddObject(m, "Folder", (PyObject *)&FolderType) < 0) {
        Py_DECREF(&FolderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
