/* The snapshot pickle parser in C (vramscope.viewer.model._native.snapparse).
 *
 * A restricted pickle VM with the same rules as ``viewer/model/io/safe_pickle.py``
 * (builtin types only; GLOBAL/REDUCE/BUILD/INST/OBJ/NEWOBJ/EXT/persistent ids/
 * out-of-band buffers refused before anything happens; lengths checked against
 * the remaining input; container budget; iterative, no recursion), which stays
 * the reference and the fallback.  What makes it fast: the trace events of
 * ``device_traces`` never become Python objects.  An event dict is a C record
 * whose fields go straight into growable columns; the frame lists it points at
 * are hash-consed by the identity of their (memoized) frame dicts, so a million
 * events cost a million column rows, not a million dicts.  Everything else
 * (segments, blocks, frame dicts, settings, annotations: thousands of objects)
 * is built as ordinary Python objects and goes through the same Python schema
 * code as the fallback path.
 *
 * Exactness by refusal: whenever the input does anything this fast path does
 * not model exactly (an odd key, a value the schema would warn about, a memo
 * reference to an event, an unknown or protocol-0 opcode, a malformed
 * structure), parse() returns ("fallback", reason) and the caller runs the
 * pure-Python path from the start, which gives the reference result or error.
 * The only errors reported from here are those the Python VM would report at
 * the same byte: a refused opcode and truncation.
 *
 * Input is a bytes-like object, or a file's readinto() plus its total size:
 * an uncompressed file streams through a 1 MiB buffer.  With the whole input in
 * memory (bytes, or a mapped file) and threads > 1, each big device trace list is
 * parsed on that many threads (snapparse_src/sections.c), with the same result.
 *
 * Event keys: only those in FIELD_NAMES are modelled; any other key (a newer
 * torch's field) sends the file to the Python parser rather than being dropped
 * (the parallel regions apply the same rule).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* the parser's memory is PyMem_Raw*'s (freed as such, also by the section threads) */
#define NATIVE_REALLOC PyMem_RawRealloc
#include "common/growth.h"

#define STACK_LIMIT 50000000LL          /* safe_pickle.STACK_LIMIT */
#define C_STACK_CAP 16000000LL          /* beyond this, let the Python VM decide */
#define CONTAINER_BUDGET_BYTES_PER 8
#define CONTAINER_BUDGET_FLOOR 1000000LL
#define PROGRESS_EVERY (1LL << 20)
#define CHUNK (1 << 20)
#define MAX_DEVICES 65536
#define MAX_HANDLE 0x3ffffffeLL   /* stack/string handles: (handle << 1) | kind fits an int32 */

/* ------------------------------------------------------------------ values */

/* The event keys this parser models (FIELD_NAMES below).  Any other key in a trace
 * event makes the whole file go to the Python parser: KNOWN KEYS ONLY. */

enum { K_OBJ = 0, K_INT, K_EVENT, K_VLIST, K_TRACES, K_DEVLIST };

typedef struct {
    union { int64_t i; PyObject *o; } u;
    int32_t aux;   /* event slot / devlist id; K_OBJ: 1 = borrowed from the memo */
    int32_t k;
} Val;

/* Memo references are pushed borrowed (no INCREF/DECREF per GET: the memo keeps
 * them alive, and a PUT over a live entry hands the file to the Python VM). */
#define BORROWED 1

/* memo entries: a PyObject* (8-aligned, low bits 0) or a tagged handle */
#define M_EVENT 1u     /* an event record: any GET falls back */
#define M_VLIST 2u     /* (index << 3) | 2 */
#define M_POISON 3u    /* the traces list or a device list */

enum { F_ACTION = 0, F_ADDR, F_SIZE, F_STREAM, F_TIME, F_FRAMES, F_CC, F_UM, F_FREE, F_OTHER, F_N };
static const char *FIELD_NAMES[] = {"action", "addr", "size", "stream", "time_us", "frames",
                                    "compile_context", "user_metadata", "device_free"};
static const char *ACTIONS[] = {"alloc", "free_requested", "free_completed", "segment_alloc",
                                "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"};
#define N_ACTIONS 9

typedef struct {
    int64_t addr, size, stream, time_us, device_free;
    int32_t stack;          /* raw stack handle, -1: none */
    int8_t action;          /* -1: missing */
    int8_t has_size, has_addr;
    PyObject *cc, *um;      /* owned or NULL */
    int in_use;
} Event;

typedef struct { char *data; int64_t n, cap; int itemsize; } Col;

typedef struct { PyObject **items; int64_t n, cap; int64_t vl; } Building;

enum { ST_OK = 0, ST_FALLBACK, ST_TRUNC, ST_REFUSED, ST_PYERR };

typedef struct {
    /* input */
    const unsigned char *buf;
    int64_t pos, end;      /* offsets into buf */
    int64_t off;           /* absolute offset of buf[0] */
    int64_t n;             /* total input size */
    PyObject *reader;
    unsigned char *own;
    int64_t owncap;
    int reader_eof;
    PyObject *progress;
    int64_t next_progress;
    /* VM */
    Val *st; int64_t sp, scap;
    int64_t *marks; int64_t nm, mcap;
    uint64_t *memo; int64_t mlen, mcap2;
    int64_t containers, budget;
    int status;
    const char *reason;
    int refused_op; int64_t refused_at;
    /* schema context */
    PyObject *root, *traces;
    PyObject **devlists; int64_t ndev, devcap;
    int64_t last_dev;
    Event *ev; int64_t nev, evcap; int64_t *evfree; int64_t nfree, evfreecap;
    int32_t *vl; int64_t nvl, vlcap;       /* >=0 frozen stack handle; -1 fresh empty; <=-2 building slot */
    Building *bld; int64_t nbld, bldcap; int64_t *bldfree; int64_t nbldfree, bldfreecap;
    /* raw stacks: hash-consed tuples of frame dict pointers (owned refs) */
    PyObject **sarena; int64_t sarn, sarcap;
    int64_t *soff; int64_t nstacks, soffcap;
    int64_t *shash; int64_t shcap;         /* open addressing: handle+1, 0 empty */
    uint64_t *shval; int64_t shvalcap;
    uint8_t *sseen; int64_t sseencap;
    /* real lists/tuples used as event frames: pointer -> handle */
    PyObject **olkey; int32_t *olval; int64_t olcap, oln;
    /* strings of compile_context / user_metadata */
    PyObject *str_ids, *str_list;
    /* short-string dedup cache */
    PyObject *scache[4096];
    /* key cache: pointer -> field; action cache: pointer -> action */
    PyObject *kkey[64]; int kfield[64];
    PyObject *akey[64]; int aval[64];
    PyObject *skip_obj[2];   /* the last "N/A" and "" seen */
    /* parallel sections (snapparse_src/sections.c) */
    int threads, sec_pending;
    int64_t sec_min, sections_done;
    int file_mapped;   /* the input is a read-only file mapping (see Win in sections.c) */
    int64_t *matk; PyObject **matv; int64_t matcap, matn;   /* materialised section entries */
    /* columns */
    Col c_dev, c_act, c_addr, c_size, c_stream, c_time, c_stack, c_free, c_cc, c_um, c_first;
} P;

static PyTypeObject ColumnType;
static PyObject *materialize(P *p, int64_t idx, int depth);
#define M_OFFSET 4u   /* (byte offset << 3) | 4: a string or a frame dict defined in a section */
#define M_FLIST 5u    /* (((region << 32) | local stack) << 3) | 5: a frame list of a section */
#define M_STACK 6u    /* (stack handle << 3) | 6: that frame list once merged */
#define M_BUILDING 7u /* a section's frame list still being parsed */

/* ------------------------------------------------------------------ helpers */

static int fallback(P *p, const char *why) {
    if (p->status == ST_OK) { p->status = ST_FALLBACK; p->reason = why; }
    return -1;
}

static int pyerr(P *p) {
    /* A Python exception from our own allocation or a hash: the Python VM
     * decides what it means.  Exceptions from the progress callback are kept. */
    if (PyErr_ExceptionMatches(PyExc_MemoryError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
        PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_OverflowError) ||
        PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) || PyErr_ExceptionMatches(PyExc_RecursionError)) {
        PyErr_Clear();
        return fallback(p, "python error in a value");
    }
    p->status = ST_PYERR;
    return -1;
}

static void *xrealloc(void *ptr, size_t size) { return PyMem_RawRealloc(ptr, size ? size : 1); }

/* Out of memory: the Python parser reads the file (common/growth.h). */
static int grow(P *p, void **ptr, int64_t *cap, int64_t need, size_t item) {
    return grow_array(ptr, cap, need, item) < 0 ? fallback(p, "out of memory") : 0;
}

#define COL_PUSH(NAME, T) \
    static inline int NAME(P *p, Col *c, T v) { \
        if (__builtin_expect(c->n == c->cap, 0) && \
            grow(p, (void **)&c->data, &c->cap, c->n + 1, sizeof(T)) < 0) return -1; \
        ((T *)c->data)[c->n++] = v; \
        return 0; \
    }
COL_PUSH(push64, int64_t)
COL_PUSH(push32, int32_t)
COL_PUSH(push8, int8_t)

static inline void val_release(Val *v) {
    if (((v->k == K_OBJ && v->aux != BORROWED) || v->k == K_TRACES || v->k == K_DEVLIST) && v->u.o)
        Py_DECREF(v->u.o);
    v->u.o = NULL;
}

static void event_free(P *p, int64_t slot);

static inline void val_drop(P *p, Val *v) {
    if (v->k == K_EVENT) event_free(p, v->aux);
    val_release(v);
}

/* A new reference to a Python object for a value going into a Python container. */
static PyObject *to_obj(P *p, Val *v) {
    if (v->k == K_OBJ) {
        PyObject *o = v->u.o;
        if (v->aux == BORROWED) Py_INCREF(o);
        v->u.o = NULL; v->k = K_INT; v->aux = 0;
        return o;
    }
    if (v->k == K_INT) {
        PyObject *o = PyLong_FromLongLong(v->u.i);
        if (!o) pyerr(p);
        return o;
    }
    fallback(p, "an event or trace list used as a plain value");
    return NULL;
}

/* ------------------------------------------------------------------ input */

static int fill(P *p, int64_t k) {
    /* make buf[pos .. pos+k) available; 1: ok, -1: error (status set) */
    if (p->pos + k <= p->end) return 1;
    if (p->off + p->pos + k > p->n) { if (p->status == ST_OK) p->status = ST_TRUNC; return -1; }
    if (!p->reader) { if (p->status == ST_OK) p->status = ST_TRUNC; return -1; }
    int64_t have = p->end - p->pos;
    if (p->pos > 0) {
        memmove(p->own, p->own + p->pos, (size_t)have);
        p->off += p->pos; p->pos = 0; p->end = have;
    }
    int64_t want = k > CHUNK ? k : CHUNK;
    if (want > p->owncap) {
        /* grows only to what the file really holds (k <= remaining, checked above) */
        int64_t nc = p->owncap * 2 > want ? p->owncap * 2 : want;
        unsigned char *q = xrealloc(p->own, (size_t)nc);
        if (!q) return fallback(p, "out of memory");
        p->own = q; p->owncap = nc;
    }
    p->buf = p->own;
    while (p->end < k) {
        int64_t room = p->owncap - p->end;
        if (room > CHUNK) room = CHUNK;
        /* readinto(memoryview) straight into our buffer: no bytes object per chunk */
        PyObject *view = PyMemoryView_FromMemory((char *)p->own + p->end, (Py_ssize_t)room, PyBUF_WRITE);
        if (!view) { p->status = ST_PYERR; return -1; }
        PyObject *res = PyObject_CallOneArg(p->reader, view);
        Py_DECREF(view);
        if (!res) { p->status = ST_PYERR; return -1; }
        Py_ssize_t got = res == Py_None ? 0 : PyLong_AsSsize_t(res);
        Py_DECREF(res);
        if (got == -1 && PyErr_Occurred()) { p->status = ST_PYERR; return -1; }
        if (got < 0 || got > room) return fallback(p, "readinto gave an odd count");
        if (got == 0) return fallback(p, "the file changed while it was read");
        p->end += got;
    }
    return 1;
}

#define NEED(k) do { if (p->pos + (k) > p->end && fill(p, (k)) < 0) goto out; } while (0)

static int progress_tick(P *p) {
    int64_t at = p->off + p->pos;
    if (at < p->next_progress || !p->progress || p->progress == Py_None) return 0;
    p->next_progress = at + PROGRESS_EVERY;
    PyObject *r = PyObject_CallFunction(p->progress, "d", p->n ? (double)at / (double)p->n : 1.0);
    if (!r) { p->status = ST_PYERR; return -1; }
    Py_DECREF(r);
    return 0;
}

/* ------------------------------------------------------------------ stack */

static int stack_grow(P *p) {
    if (p->sp >= C_STACK_CAP) return fallback(p, "stack too big for the fast path");
    return grow(p, (void **)&p->st, &p->scap, p->sp + 1, sizeof(Val));
}

/* Fields are stored one by one: building a Val and copying it whole makes
 * the compiler store two halves and reload 16 bytes (a store-forwarding stall
 * that cost a fifth of the parse). */
static inline int push(P *p, Val v) {
    if (__builtin_expect(p->sp == p->scap, 0) && stack_grow(p) < 0) { val_drop(p, &v); return -1; }
    Val *d = &p->st[p->sp++];
    d->u.i = v.u.i; d->aux = v.aux; d->k = v.k;
    return 0;
}

static inline int push_obj(P *p, PyObject *o) {
    if (!o) return pyerr(p);
    if (__builtin_expect(p->sp == p->scap, 0) && stack_grow(p) < 0) { Py_DECREF(o); return -1; }
    Val *d = &p->st[p->sp++];
    d->u.o = o; d->aux = 0; d->k = K_OBJ;
    return 0;
}

static inline int push_int(P *p, int64_t i) {
    if (__builtin_expect(p->sp == p->scap, 0) && stack_grow(p) < 0) return -1;
    Val *d = &p->st[p->sp++];
    d->u.i = i; d->aux = 0; d->k = K_INT;
    return 0;
}

static inline int64_t frame_start(P *p) { return p->nm ? p->marks[p->nm - 1] : 0; }
static inline int64_t frame_len(P *p) { return p->sp - frame_start(p); }

static Val *frame_top(P *p) { return frame_len(p) > 0 ? &p->st[p->sp - 1] : NULL; }

/* after pop_mark: the top of the (now current) parent frame, below the items */
static Val *below(P *p, int64_t fs) { return fs > frame_start(p) ? &p->st[fs - 1] : NULL; }

static Val *mark_base(P *p) {
    if (!p->nm) return NULL;
    int64_t fs = p->marks[p->nm - 1];
    int64_t parent = p->nm > 1 ? p->marks[p->nm - 2] : 0;
    return fs > parent ? &p->st[fs - 1] : NULL;
}

/* ------------------------------------------------------------------ memo */

static int memo_entry(P *p, Val *v, uint64_t *out) {
    switch (v->k) {
    case K_OBJ: Py_INCREF(v->u.o); *out = (uint64_t)(uintptr_t)v->u.o; return 0;
    case K_INT: {
        /* rare: store the int object and keep the stack value as it is */
        PyObject *o = PyLong_FromLongLong(v->u.i);
        if (!o) return pyerr(p);
        *out = (uint64_t)(uintptr_t)o; return 0;
    }
    case K_EVENT: *out = M_EVENT; return 0;
    case K_VLIST: *out = ((uint64_t)v->u.i << 3) | M_VLIST; return 0;
    default: *out = M_POISON; return 0;
    }
}

static void memo_release(uint64_t e) {
    if (e && !(e & 7u)) Py_DECREF((PyObject *)(uintptr_t)e);
}

static int memo_put(P *p, uint64_t key) {
    Val *top = frame_top(p);
    if (!top) return fallback(p, "memo put on an empty stack");
    if ((int64_t)key > p->mlen) return fallback(p, "sparse memo key");
    uint64_t e = 0;
    if (memo_entry(p, top, &e) < 0) return -1;
    if ((int64_t)key < p->mlen) { memo_release(e); return fallback(p, "a memo entry written twice"); }
    if (p->mlen == p->mcap2 && grow(p, (void **)&p->memo, &p->mcap2, p->mlen + 1, sizeof(uint64_t)) < 0) {
        memo_release(e); return -1;
    }
    p->memo[p->mlen++] = e;
    return 0;
}

static inline int memo_get(P *p, uint64_t key) {
    if ((int64_t)key >= p->mlen) return fallback(p, "memo key not found");
    uint64_t e = p->memo[key];
    if (!(e & 7u)) {
        if (__builtin_expect(p->sp == p->scap, 0) && stack_grow(p) < 0) return -1;
        Val *d = &p->st[p->sp++];
        d->u.o = (PyObject *)(uintptr_t)e; d->aux = BORROWED; d->k = K_OBJ;
        return 0;
    }
    if ((e & 7u) == M_VLIST) { Val v; v.u.i = (int64_t)(e >> 3); v.k = K_VLIST; v.aux = 0; return push(p, v); }
    if ((e & 7u) == M_STACK) {   /* a frame list a parallel section defined: frozen */
        if (grow(p, (void **)&p->vl, &p->vlcap, p->nvl + 1, sizeof(int32_t)) < 0) return -1;
        p->vl[p->nvl] = (int32_t)(e >> 3);
        Val v; v.u.i = p->nvl++; v.k = K_VLIST; v.aux = 0;
        return push(p, v);
    }
    if ((e & 7u) == M_OFFSET) {   /* a string or frame dict a parallel section defined */
        PyObject *o = materialize(p, (int64_t)key, 0);
        if (!o) return -1;
        if (__builtin_expect(p->sp == p->scap, 0) && stack_grow(p) < 0) return -1;
        Val *d = &p->st[p->sp++];
        d->u.o = o; d->aux = BORROWED; d->k = K_OBJ;
        return 0;
    }
    return fallback(p, "a memo reference to an event or trace list");
}

/* ------------------------------------------------------------------ strings */

static PyObject *make_str(P *p, const unsigned char *s, int64_t k) {
    if (k <= 32) {
        uint32_t h = 2166136261u;
        for (int64_t i = 0; i < k; i++) h = (h ^ s[i]) * 16777619u;
        h = (h ^ (uint32_t)k) & 4095u;
        PyObject *c = p->scache[h];
        if (c && PyUnicode_IS_COMPACT_ASCII(c) && PyUnicode_GET_LENGTH(c) == k &&
            memcmp(PyUnicode_DATA(c), s, (size_t)k) == 0) {
            Py_INCREF(c); return c;
        }
        PyObject *o = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)k, "surrogatepass");
        if (o && PyUnicode_IS_COMPACT_ASCII(o)) {
            Py_XDECREF(p->scache[h]); Py_INCREF(o); p->scache[h] = o;
        }
        return o;
    }
    return PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)k, "surrogatepass");
}

/* ------------------------------------------------------------------ raw stacks */

static uint64_t hash_ptrs(PyObject **a, int64_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) { h ^= (uint64_t)(uintptr_t)a[i] >> 4; h *= 1099511628211ULL; h ^= h >> 29; }
    return h;
}

static int stacks_rehash(P *p) {
    int64_t nc = p->shcap ? p->shcap * 2 : 1024;
    int64_t *t = PyMem_RawCalloc((size_t)nc, sizeof(int64_t));
    if (!t) return fallback(p, "out of memory");
    for (int64_t i = 0; i < p->shcap; i++) {
        int64_t h = p->shash[i];
        if (!h) continue;
        uint64_t hv = p->shval[h - 1];
        int64_t j = (int64_t)(hv & (uint64_t)(nc - 1));
        while (t[j]) j = (j + 1) & (nc - 1);
        t[j] = h;
    }
    PyMem_RawFree(p->shash);
    p->shash = t; p->shcap = nc;
    return 0;
}

/* Hash-cons a frame list (items: borrowed refs to dicts); returns the handle. */
static int64_t intern_stack(P *p, PyObject **items, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!PyDict_CheckExact(items[i])) { fallback(p, "a stack frame that is not a dict"); return -1; }
    if ((p->nstacks + 1) * 2 > p->shcap && stacks_rehash(p) < 0) return -1;
    uint64_t hv = hash_ptrs(items, n);
    int64_t j = (int64_t)(hv & (uint64_t)(p->shcap - 1));
    while (p->shash[j]) {
        int64_t h = p->shash[j] - 1;
        if (p->shval[h] == hv && p->soff[h + 1] - p->soff[h] == n && (n == 0 ||
            memcmp(p->sarena + p->soff[h], items, (size_t)n * sizeof(PyObject *)) == 0))
            return h;
        j = (j + 1) & (p->shcap - 1);
    }
    int64_t h = p->nstacks;
    if (grow(p, (void **)&p->sarena, &p->sarcap, p->sarn + n, sizeof(PyObject *)) < 0) return -1;
    if (grow(p, (void **)&p->soff, &p->soffcap, h + 2, sizeof(int64_t)) < 0) return -1;
    if (grow(p, (void **)&p->shval, &p->shvalcap, h + 1, sizeof(uint64_t)) < 0) return -1;
    if (grow(p, (void **)&p->sseen, &p->sseencap, h + 1, 1) < 0) return -1;
    if (h == 0) p->soff[0] = 0;
    for (int64_t i = 0; i < n; i++) { Py_INCREF(items[i]); p->sarena[p->sarn++] = items[i]; }
    p->soff[h + 1] = p->sarn;
    p->shval[h] = hv;
    p->sseen[h] = 0;
    p->shash[j] = h + 1;
    p->nstacks++;
    return h;
}

/* vlist index -> frozen stack handle (freezes a list still being built) */
static int64_t vlist_freeze(P *p, int64_t idx) {
    int32_t s = p->vl[idx];
    if (s >= 0) return s;
    int64_t h;
    if (s == -1) {
        h = intern_stack(p, NULL, 0);
    } else {
        Building *b = &p->bld[-s - 2];
        h = intern_stack(p, b->items, b->n);
        for (int64_t i = 0; i < b->n; i++) Py_DECREF(b->items[i]);
        b->n = 0; b->vl = -1;
        if (grow(p, (void **)&p->bldfree, &p->bldfreecap, p->nbldfree + 1, sizeof(int64_t)) < 0) return -1;
        p->bldfree[p->nbldfree++] = -s - 2;
    }
    if (h < 0) return -1;
    if (h > MAX_HANDLE) { fallback(p, "too many stacks"); return -1; }
    p->vl[idx] = (int32_t)h;
    return h;
}

static int vlist_append(P *p, int64_t idx, Val *v) {
    int32_t s = p->vl[idx];
    if (s >= 0) return fallback(p, "a frame list changed after an event used it");
    if (v->k != K_OBJ || !PyDict_CheckExact(v->u.o)) return fallback(p, "a stack frame that is not a dict");
    if (s == -1) {
        int64_t slot;
        if (p->nbldfree) slot = p->bldfree[--p->nbldfree];
        else {
            if (grow(p, (void **)&p->bld, &p->bldcap, p->nbld + 1, sizeof(Building)) < 0) return -1;
            slot = p->nbld++;
            p->bld[slot].items = NULL; p->bld[slot].cap = 0; p->bld[slot].n = 0;
        }
        p->bld[slot].vl = idx;
        p->vl[idx] = (int32_t)(-slot - 2);
        s = p->vl[idx];
    }
    Building *b = &p->bld[-s - 2];
    if (grow(p, (void **)&b->items, &b->cap, b->n + 1, sizeof(PyObject *)) < 0) return -1;
    if (v->aux == BORROWED) Py_INCREF(v->u.o);
    b->items[b->n++] = v->u.o;   /* owned from here */
    v->u.o = NULL; v->k = K_INT; v->aux = 0;
    return 0;
}

static int observed_list_stack(P *p, PyObject *o, int64_t *out) {
    /* a real list or tuple used as an event's frames: hash-cons its content;
     * lists are remembered so a later change falls back */
    if (p->oln * 2 >= p->olcap) {
        int64_t nc = p->olcap ? p->olcap * 2 : 256;
        PyObject **nk = PyMem_RawCalloc((size_t)nc, sizeof(PyObject *));
        int32_t *nv = PyMem_RawCalloc((size_t)nc, sizeof(int32_t));
        if (!nk || !nv) { PyMem_RawFree(nk); PyMem_RawFree(nv); return fallback(p, "out of memory"); }
        for (int64_t i = 0; i < p->olcap; i++) {
            if (!p->olkey[i]) continue;
            int64_t j = (int64_t)(((uintptr_t)p->olkey[i] >> 4) & (uintptr_t)(nc - 1));
            while (nk[j]) j = (j + 1) & (nc - 1);
            nk[j] = p->olkey[i]; nv[j] = p->olval[i];
        }
        PyMem_RawFree(p->olkey); PyMem_RawFree(p->olval);
        p->olkey = nk; p->olval = nv; p->olcap = nc;
    }
    int64_t j = (int64_t)(((uintptr_t)o >> 4) & (uintptr_t)(p->olcap - 1));
    while (p->olkey[j]) {
        if (p->olkey[j] == o) { *out = p->olval[j]; return 0; }
        j = (j + 1) & (p->olcap - 1);
    }
    PyObject **items = PySequence_Fast_ITEMS(o);
    int64_t h = intern_stack(p, items, PySequence_Fast_GET_SIZE(o));
    if (h < 0) return -1;
    if (h > MAX_HANDLE) return fallback(p, "too many stacks");
    Py_INCREF(o);   /* keeps the pointer unique while we remember it */
    p->olkey[j] = o; p->olval[j] = (int32_t)h; p->oln++;
    *out = h;
    return 0;
}

static int is_observed(P *p, PyObject *o) {
    if (!p->oln) return 0;
    int64_t j = (int64_t)(((uintptr_t)o >> 4) & (uintptr_t)(p->olcap - 1));
    while (p->olkey[j]) { if (p->olkey[j] == o) return 1; j = (j + 1) & (p->olcap - 1); }
    return 0;
}

/* ------------------------------------------------------------------ events */

static int64_t event_new(P *p) {
    int64_t slot;
    if (p->nfree) slot = p->evfree[--p->nfree];
    else {
        if (grow(p, (void **)&p->ev, &p->evcap, p->nev + 1, sizeof(Event)) < 0) return -1;
        slot = p->nev++;
    }
    Event *e = &p->ev[slot];
    memset(e, 0, sizeof(Event));
    e->in_use = 1; e->action = -1; e->stack = -1; e->time_us = -1; e->device_free = -1;
    e->has_addr = 1;   /* e.get("addr", 0) */
    return slot;
}

static void event_free(P *p, int64_t slot) {
    Event *e = &p->ev[slot];
    if (!e->in_use) return;
    Py_CLEAR(e->cc); Py_CLEAR(e->um);
    e->in_use = 0;
    if (grow(p, (void **)&p->evfree, &p->evfreecap, p->nfree + 1, sizeof(int64_t)) == 0)
        p->evfree[p->nfree++] = slot;
}

/* 64-slot direct-mapped caches keyed by object address (Fibonacci hashing) */
#define PTR_SLOT(o) ((int)(((uint64_t)(uintptr_t)(o) * 0x9E3779B97F4A7C15ULL) >> 58))

static int key_field(P *p, PyObject *key) {
    int j = PTR_SLOT(key);
    if (p->kkey[j] == key) return p->kfield[j];
    if (!PyUnicode_CheckExact(key)) return -1;
    int f = F_OTHER;
    for (int i = 0; i < F_OTHER; i++)
        if (PyUnicode_CompareWithASCIIString(key, FIELD_NAMES[i]) == 0) { f = i; break; }
    Py_XDECREF(p->kkey[j]); Py_INCREF(key);
    p->kkey[j] = key; p->kfield[j] = f;
    return f;
}

/* _uint: a non-negative int64 from an int (floats are left to the Python path) */
static int val_uint(Val *v, int64_t *out) {
    if (v->k == K_INT) { if (v->u.i < 0) return 0; *out = v->u.i; return 1; }
    return 0;
}

/* _sint: an int in [-INT64_MAX, INT64_MAX], else the default (no warning) */
static int val_sint(P *p, Val *v, int64_t dflt, int64_t *out) {
    if (v->k == K_INT) { *out = v->u.i == INT64_MIN ? dflt : v->u.i; return 0; }
    if (v->k == K_OBJ && (PyLong_CheckExact(v->u.o) || PyFloat_CheckExact(v->u.o) ||
                          PyUnicode_CheckExact(v->u.o) || v->u.o == Py_None || PyBool_Check(v->u.o) ||
                          PyDict_CheckExact(v->u.o) || PyList_CheckExact(v->u.o) ||
                          PyTuple_CheckExact(v->u.o) || PyBytes_CheckExact(v->u.o))) {
        *out = dflt;   /* a big int, float, bool, None, ...: not an int64 */
        return 0;
    }
    return fallback(p, "an odd value in an event");
}

static int event_set(P *p, int64_t slot, Val *key, Val *val) {
    Event *e = &p->ev[slot];
    if (key->k != K_OBJ || !PyUnicode_CheckExact(key->u.o)) return fallback(p, "an event key that is not a string");
    int f = key_field(p, key->u.o);
    int64_t x;
    switch (f) {
    case F_ACTION: {
        if (val->k != K_OBJ || !PyUnicode_CheckExact(val->u.o)) return fallback(p, "an event action that is not a string");
        int j = PTR_SLOT(val->u.o), a = -1;
        if (p->akey[j] == val->u.o) a = p->aval[j];
        else {
            for (int i = 0; i < N_ACTIONS; i++)
                if (PyUnicode_CompareWithASCIIString(val->u.o, ACTIONS[i]) == 0) { a = i; break; }
            Py_XDECREF(p->akey[j]); Py_INCREF(val->u.o);
            p->akey[j] = val->u.o; p->aval[j] = a;
        }
        if (a < 0) return fallback(p, "an unknown event action");
        e->action = (int8_t)a;
        return 0;
    }
    case F_ADDR: if (!val_uint(val, &x)) return fallback(p, "an event address that is not a uint64"); e->addr = x; e->has_addr = 1; return 0;
    case F_SIZE: if (!val_uint(val, &x)) return fallback(p, "an event size that is not a uint64"); e->size = x; e->has_size = 1; return 0;
    case F_STREAM: return val_sint(p, val, 0, &e->stream);
    case F_TIME: return val_sint(p, val, -1, &e->time_us);
    case F_FREE: return val_sint(p, val, -1, &e->device_free);
    case F_FRAMES: {
        int64_t h = -1;
        if (val->k == K_VLIST) { h = vlist_freeze(p, val->u.i); if (h < 0) return -1; }
        else if (val->k == K_OBJ && val->u.o == Py_None) h = -1;
        else if (val->k == K_OBJ && (PyList_CheckExact(val->u.o) || PyTuple_CheckExact(val->u.o))) {
            if (observed_list_stack(p, val->u.o, &h) < 0) return -1;
        } else return fallback(p, "event frames that are not a list");
        e->stack = (int32_t)h;
        return 0;
    }
    case F_CC: case F_UM: {
        PyObject *o = NULL;
        if (val->k == K_OBJ && val->u.o == Py_None) o = NULL;
        else if (val->k == K_OBJ && PyUnicode_CheckExact(val->u.o)) { o = val->u.o; Py_INCREF(o); }
        else return fallback(p, "an event context that is not a string");
        if (f == F_CC) Py_XSETREF(e->cc, o); else Py_XSETREF(e->um, o);
        return 0;
    }
    case F_OTHER:
        /* A key this parser does not know (a newer torch's field): the Python path
         * decides what it means, rather than this one silently dropping it. */
        return fallback(p, "an event key the compiled parser does not know");
    default: return -1;
    }
}

static int first_seen(P *p, int32_t code) { return push32(p, &p->c_first, code); }

static int string_handle(P *p, PyObject *s, const char *skip, int32_t *out) {
    if (!s) { *out = -1; return 0; }
    /* "N/A" and "" are the common values: short strings are deduplicated, so a
     * pointer test settles them almost always */
    int which = skip[0] ? 0 : 1;
    if (s == p->skip_obj[which]) { *out = -1; return 0; }
    if (PyUnicode_CompareWithASCIIString(s, skip) == 0) {
        Py_XSETREF(p->skip_obj[which], Py_NewRef(s));
        *out = -1; return 0;
    }
    PyObject *h = PyDict_GetItemWithError(p->str_ids, s);
    if (h) { *out = (int32_t)PyLong_AsLong(h); return 0; }
    if (PyErr_Occurred()) return pyerr(p);
    Py_ssize_t n = PyList_GET_SIZE(p->str_list);
    if (n > MAX_HANDLE) return fallback(p, "too many strings");
    PyObject *num = PyLong_FromSsize_t(n);
    if (!num || PyDict_SetItem(p->str_ids, s, num) < 0 || PyList_Append(p->str_list, s) < 0) {
        Py_XDECREF(num); return pyerr(p);
    }
    Py_DECREF(num);
    *out = (int32_t)n;
    return first_seen(p, (int32_t)(n * 2 + 1));
}

static int event_commit(P *p, int64_t slot, int32_t dev) {
    Event *e = &p->ev[slot];
    if (e->action < 0) return fallback(p, "an event without an action");
    if (!e->has_size) return fallback(p, "an event without a size");
    if (dev < p->last_dev) return fallback(p, "device lists out of order");
    p->last_dev = dev;
    if (e->stack >= 0 && !p->sseen[e->stack]) {
        p->sseen[e->stack] = 1;
        if (first_seen(p, e->stack * 2) < 0) return -1;
    }
    int32_t cc, um;
    if (string_handle(p, e->cc, "N/A", &cc) < 0) return -1;
    if (string_handle(p, e->um, "", &um) < 0) return -1;
    if (push32(p, &p->c_dev, dev) < 0 || push8(p, &p->c_act, e->action) < 0 ||
        push64(p, &p->c_addr, e->addr) < 0 || push64(p, &p->c_size, e->size) < 0 ||
        push64(p, &p->c_stream, e->stream) < 0 || push64(p, &p->c_time, e->time_us) < 0 ||
        push32(p, &p->c_stack, e->stack) < 0 || push64(p, &p->c_free, e->device_free) < 0 ||
        push32(p, &p->c_cc, cc) < 0 || push32(p, &p->c_um, um) < 0)
        return -1;
    event_free(p, slot);
    return 0;
}

/* ------------------------------------------------------------------ containers */

static int new_container(P *p) {
    if (++p->containers > p->budget) return fallback(p, "container budget");
    return 0;
}

/* append value v (consumed) to the list-like target t */
static int append_to(P *p, Val *t, Val *v) {
    switch (t->k) {
    case K_OBJ: {
        if (!PyList_CheckExact(t->u.o)) return fallback(p, "APPEND on something that is not a list");
        if (is_observed(p, t->u.o)) return fallback(p, "a frame list changed after an event used it");
        PyObject *o = to_obj(p, v);
        if (!o) return -1;
        int r = PyList_Append(t->u.o, o);
        Py_DECREF(o);
        return r < 0 ? pyerr(p) : 0;
    }
    case K_TRACES: {
        if (v->k != K_DEVLIST) return fallback(p, "a device trace that is not a list");
        int r = PyList_Append(t->u.o, v->u.o);
        val_release(v); v->k = K_INT;
        return r < 0 ? pyerr(p) : 0;
    }
    case K_DEVLIST:
        if (v->k != K_EVENT) return fallback(p, "a trace entry that is not a new dict");
        v->k = K_INT;
        return event_commit(p, v->aux, t->aux);
    case K_VLIST: return vlist_append(p, t->u.i, v);
    default: return fallback(p, "APPEND on something that is not a list");
    }
}

static int setitem_to(P *p, Val *t, Val *k, Val *v) {
    if (t->k == K_EVENT) return event_set(p, t->aux, k, v);
    if (t->k != K_OBJ || !PyDict_CheckExact(t->u.o)) return fallback(p, "SETITEM on something that is not a dict");
    if (v->k == K_TRACES && t->u.o != p->root) return fallback(p, "the trace list outside the snapshot dict");
    PyObject *ko = to_obj(p, k);
    if (!ko) return -1;
    PyObject *vo;
    if (v->k == K_TRACES) { vo = v->u.o; v->u.o = NULL; v->k = K_INT; }
    else vo = to_obj(p, v);
    if (!vo) { Py_DECREF(ko); return -1; }
    int r = PyDict_SetItem(t->u.o, ko, vo);
    Py_DECREF(ko); Py_DECREF(vo);
    return r < 0 ? pyerr(p) : 0;
}

/* pop the current frame: items st[fs..sp) stay in place for the caller, who
 * must consume them and then call drop_frame() */
static int pop_mark(P *p, int64_t *fs) {
    if (!p->nm) return fallback(p, "pop_mark without a mark");
    *fs = p->marks[--p->nm];
    return 0;
}

static void drop_range(P *p, int64_t from) {
    while (p->sp > from) val_drop(p, &p->st[--p->sp]);
}

static PyObject *items_tuple(P *p, int64_t fs) {
    PyObject *t = PyTuple_New((Py_ssize_t)(p->sp - fs));
    if (!t) { pyerr(p); return NULL; }
    for (int64_t i = fs; i < p->sp; i++) {
        PyObject *o = to_obj(p, &p->st[i]);
        if (!o) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i - fs, o);
    }
    return t;
}

static PyObject *items_list(P *p, int64_t fs) {
    PyObject *t = PyList_New((Py_ssize_t)(p->sp - fs));
    if (!t) { pyerr(p); return NULL; }
    for (int64_t i = fs; i < p->sp; i++) {
        PyObject *o = to_obj(p, &p->st[i]);
        if (!o) { Py_DECREF(t); return NULL; }
        PyList_SET_ITEM(t, i - fs, o);
    }
    return t;
}

/* ------------------------------------------------------------------ the loop */

static inline uint32_t rd32(const unsigned char *s) { return (uint32_t)s[0] | ((uint32_t)s[1] << 8) | ((uint32_t)s[2] << 16) | ((uint32_t)s[3] << 24); }
static inline uint64_t rd64(const unsigned char *s) { return (uint64_t)rd32(s) | ((uint64_t)rd32(s + 4) << 32); }

static const char *refused_name(int op) {
    switch (op) {
    case 'c': return "GLOBAL"; case 0x93: return "STACK_GLOBAL"; case 'R': return "REDUCE";
    case 'b': return "BUILD"; case 'i': return "INST"; case 'o': return "OBJ";
    case 0x81: return "NEWOBJ"; case 0x92: return "NEWOBJ_EX"; case 0x82: return "EXT1";
    case 0x83: return "EXT2"; case 0x84: return "EXT4"; case 'P': return "PERSID";
    case 'Q': return "BINPERSID"; case 0x97: return "NEXT_BUFFER"; case 0x98: return "READONLY_BUFFER";
    default: return NULL;
    }
}

/* int.from_bytes(s, "little", signed=True) for k > 8 */
static PyObject *long_from_bytes(const unsigned char *s, int64_t k) {
    PyObject *b = PyBytes_FromStringAndSize((const char *)s, (Py_ssize_t)k);
    if (!b) return NULL;
    PyObject *r = PyObject_CallMethod((PyObject *)&PyLong_Type, "from_bytes", "Os", b, "little");
    Py_DECREF(b);
    if (!r) return NULL;
    /* signed: subtract 2**(8k) when the top bit is set */
    if (s[k - 1] & 0x80) {
        PyObject *one = PyLong_FromLong(1), *sh = PyLong_FromLongLong(8 * k);
        PyObject *big = (one && sh) ? PyNumber_Lshift(one, sh) : NULL;
        PyObject *res = big ? PyNumber_Subtract(r, big) : NULL;
        Py_XDECREF(one); Py_XDECREF(sh); Py_XDECREF(big); Py_DECREF(r);
        return res;
    }
    return r;
}

static int push_long(P *p, const unsigned char *s, int64_t k) {
    if (k <= 8) {
        uint64_t x = 0;
        for (int64_t i = 0; i < k; i++) x |= (uint64_t)s[i] << (8 * i);
        if (k && k < 8 && (s[k - 1] & 0x80)) x |= ~(uint64_t)0 << (8 * k);
        return push_int(p, (int64_t)x);
    }
    PyObject *o = long_from_bytes(s, k);
    if (o) {
        /* a non-minimal encoding of an int64 is still an int64 */
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow && !(v == -1 && PyErr_Occurred())) { Py_DECREF(o); return push_int(p, (int64_t)v); }
        PyErr_Clear();
    }
    return push_obj(p, o);
}

#if defined(__linux__)
#include "snapparse_src/sections.c"
#else
/* Parallel sections use pthreads and Linux's madvise: elsewhere every list is
 * parsed by the serial VM (the same answer), and no section memo entry exists. */
#define SEC_MIN_EVENTS 65536
static int run_section(P *p) { (void)p; return 0; }
static PyObject *materialize(P *p, int64_t idx, int depth) {
    (void)idx; (void)depth;
    fallback(p, "a memo reference to an event or trace list");
    return NULL;
}
#endif

static int run(P *p) {
    for (;;) {
        if (p->pos >= p->end) { if (fill(p, 1) < 0) return -1; }
        if (__builtin_expect(p->sec_pending, 0)) {
            /* a device list was just created: once its memo op is past, its items
             * may be parsed in parallel (snapparse_src/sections.c) */
            int op0 = p->buf[p->pos];
            if (op0 != 0x94 && op0 != 0x71 && op0 != 0x72) {
                p->sec_pending = 0;
                if ((op0 == 0x28 || op0 == 0x7D) && run_section(p) < 0) return -1;
                if (p->pos >= p->end) { if (fill(p, 1) < 0) return -1; }
            }
        }
        int op = p->buf[p->pos++];
        const unsigned char *s;
        int64_t k, fs;
        switch (op) {
        case 0x68: /* BINGET */
            NEED(1); k = p->buf[p->pos]; p->pos += 1;
            if (memo_get(p, (uint64_t)k) < 0) return -1;
            break;
        case 0x6A: /* LONG_BINGET */
            NEED(4); k = rd32(p->buf + p->pos); p->pos += 4;
            if (memo_get(p, (uint64_t)k) < 0) return -1;
            break;
        case 0x94: /* MEMOIZE */
            if (memo_put(p, (uint64_t)p->mlen) < 0) return -1;
            break;
        case 0x71: /* BINPUT */
            NEED(1); k = p->buf[p->pos]; p->pos += 1;
            if (memo_put(p, (uint64_t)k) < 0) return -1;
            break;
        case 0x72: /* LONG_BINPUT */
            NEED(4); k = rd32(p->buf + p->pos); p->pos += 4;
            if (memo_put(p, (uint64_t)k) < 0) return -1;
            break;
        case 0x28: /* MARK */
            if (grow(p, (void **)&p->marks, &p->mcap, p->nm + 1, sizeof(int64_t)) < 0) return -1;
            p->marks[p->nm++] = p->sp;
            if (progress_tick(p) < 0) return -1;
            if (p->nm > STACK_LIMIT) return fallback(p, "deep nesting");
            break;
        case 0x7D: { /* EMPTY_DICT */
            if (new_container(p) < 0) return -1;
            Val *base = mark_base(p), *top = frame_top(p);
            if ((base && base->k == K_DEVLIST) || (top && top->k == K_DEVLIST)) {
                int64_t slot = event_new(p);
                if (slot < 0) return -1;
                if (slot > 0x7ffffffeLL) return fallback(p, "too many open events");
                Val v; v.u.i = 0; v.k = K_EVENT; v.aux = (int32_t)slot;
                if (push(p, v) < 0) return -1;
                break;
            }
            PyObject *d = PyDict_New();
            if (!d) return pyerr(p);
            int is_root = !p->root && p->sp == 0 && p->nm == 0;
            if (push_obj(p, d) < 0) return -1;
            if (is_root) { Py_INCREF(d); p->root = d; }   /* the snapshot dict, if this is one */
            break;
        }
        case 0x5D: { /* EMPTY_LIST */
            if (new_container(p) < 0) return -1;
            Val *base = mark_base(p), *top = frame_top(p);
            Val v; v.aux = 0;
            if (!p->traces && p->root && top && top->k == K_OBJ && PyUnicode_CheckExact(top->u.o) &&
                PyUnicode_CompareWithASCIIString(top->u.o, "device_traces") == 0) {
                PyObject *l = PyList_New(0);
                if (!l) return pyerr(p);
                Py_INCREF(l); p->traces = l;
                v.u.o = l; v.k = K_TRACES;
            } else if ((base && base->k == K_TRACES) || (top && top->k == K_TRACES)) {
                PyObject *l = PyList_New(0);
                if (!l) return pyerr(p);
                if (p->ndev >= MAX_DEVICES) { Py_DECREF(l); return fallback(p, "too many device traces"); }
                if (grow(p, (void **)&p->devlists, &p->devcap, p->ndev + 1, sizeof(PyObject *)) < 0) { Py_DECREF(l); return -1; }
                Py_INCREF(l); p->devlists[p->ndev] = l;
                v.u.o = l; v.k = K_DEVLIST; v.aux = (int32_t)p->ndev++;
                p->sec_pending = p->threads > 1;
            } else if ((base && base->k == K_EVENT) ||
                       (top && top->k == K_OBJ && frame_len(p) >= 2 && p->st[p->sp - 2].k == K_EVENT)) {
                if (grow(p, (void **)&p->vl, &p->vlcap, p->nvl + 1, sizeof(int32_t)) < 0) return -1;
                p->vl[p->nvl] = -1;
                v.u.i = p->nvl++; v.k = K_VLIST;
            } else {
                PyObject *l = PyList_New(0);
                if (!l) return pyerr(p);
                v.u.o = l; v.k = K_OBJ;
            }
            if (push(p, v) < 0) return -1;
            break;
        }
        case 0x75: { /* SETITEMS */
            if (pop_mark(p, &fs) < 0) return -1;
            Val *t = below(p, fs);
            if (!t) return fallback(p, "SETITEMS on an empty stack");
            if ((p->sp - fs) % 2) return fallback(p, "SETITEMS with an odd number of items");
            if (t->k != K_EVENT && (t->k != K_OBJ || !PyDict_CheckExact(t->u.o)))
                return fallback(p, "SETITEMS on something that is not a dict");
            for (int64_t i = fs; i < p->sp; i += 2)
                if (setitem_to(p, t, &p->st[i], &p->st[i + 1]) < 0) return -1;
            drop_range(p, fs);
            break;
        }
        case 0x73: /* SETITEM */
            if (frame_len(p) < 3) return fallback(p, "SETITEM on a short stack");
            if (setitem_to(p, &p->st[p->sp - 3], &p->st[p->sp - 2], &p->st[p->sp - 1]) < 0) return -1;
            drop_range(p, p->sp - 2);
            break;
        case 0x65: { /* APPENDS */
            if (pop_mark(p, &fs) < 0) return -1;
            Val *t = below(p, fs);
            if (!t) return fallback(p, "APPENDS on an empty stack");
            if (!(t->k == K_TRACES || t->k == K_DEVLIST || t->k == K_VLIST ||
                  (t->k == K_OBJ && PyList_CheckExact(t->u.o))))
                return fallback(p, "APPENDS on something that is not a list");  /* even with no items */
            for (int64_t i = fs; i < p->sp; i++)
                if (append_to(p, t, &p->st[i]) < 0) return -1;
            drop_range(p, fs);
            break;
        }
        case 0x61: /* APPEND */
            if (frame_len(p) < 2) return fallback(p, "APPEND on a short stack");
            if (append_to(p, &p->st[p->sp - 2], &p->st[p->sp - 1]) < 0) return -1;
            drop_range(p, p->sp - 1);
            break;
        case 0x8C: /* SHORT_BINUNICODE */
            NEED(1); k = p->buf[p->pos];
            NEED(1 + k); s = p->buf + p->pos + 1; p->pos += 1 + k;
            if (push_obj(p, make_str(p, s, k)) < 0) return -1;
            break;
        case 0x58: /* BINUNICODE */
            NEED(4); k = rd32(p->buf + p->pos);
            NEED(4 + k); s = p->buf + p->pos + 4; p->pos += 4 + k;
            if (push_obj(p, make_str(p, s, k)) < 0) return -1;
            break;
        case 0x8D: /* BINUNICODE8 */
            NEED(8); k = (int64_t)rd64(p->buf + p->pos);
            if (k < 0 || k > p->n) { p->status = ST_TRUNC; return -1; }
            NEED(8 + k); s = p->buf + p->pos + 8; p->pos += 8 + k;
            if (push_obj(p, make_str(p, s, k)) < 0) return -1;
            break;
        case 0x4B: /* BININT1 */
            NEED(1); k = p->buf[p->pos]; p->pos += 1;
            if (push_int(p, k) < 0) return -1;
            break;
        case 0x4D: /* BININT2 */
            NEED(2); k = p->buf[p->pos] | (p->buf[p->pos + 1] << 8); p->pos += 2;
            if (push_int(p, k) < 0) return -1;
            break;
        case 0x4A: /* BININT */
            NEED(4); k = (int32_t)rd32(p->buf + p->pos); p->pos += 4;
            if (push_int(p, k) < 0) return -1;
            break;
        case 0x8A: /* LONG1 */
            NEED(1); k = p->buf[p->pos];
            NEED(1 + k); s = p->buf + p->pos + 1; p->pos += 1 + k;
            if (push_long(p, s, k) < 0) return -1;
            break;
        case 0x8B: /* LONG4 */
            NEED(4); k = (int32_t)rd32(p->buf + p->pos);
            if (k < 0) { p->status = ST_TRUNC; return -1; }
            NEED(4 + k); s = p->buf + p->pos + 4; p->pos += 4 + k;
            if (push_long(p, s, k) < 0) return -1;
            break;
        case 0x95: /* FRAME: a length hint */
            NEED(8); k = (int64_t)rd64(p->buf + p->pos); p->pos += 8;
            if (k < 0 || p->off + p->pos + k > p->n) { p->status = ST_TRUNC; return -1; }
            if (progress_tick(p) < 0) return -1;
            break;
        case 0x89: case 0x88: case 0x4E: /* NEWFALSE NEWTRUE NONE */
            if (push_obj(p, Py_NewRef(op == 0x88 ? Py_True : op == 0x89 ? Py_False : Py_None)) < 0) return -1;
            if (frame_len(p) > STACK_LIMIT) return fallback(p, "stack too deep");
            break;
        case 0x29: /* EMPTY_TUPLE */
            if (push_obj(p, PyTuple_New(0)) < 0) return -1;
            break;
        case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
            int64_t m = op - 0x84;
            if (frame_len(p) < m) return fallback(p, "TUPLE on a short stack");
            fs = p->sp - m;
            PyObject *t = items_tuple(p, fs);
            if (!t) return -1;
            drop_range(p, fs);
            if (push_obj(p, t) < 0) return -1;
            break;
        }
        case 0x74: { /* TUPLE */
            if (pop_mark(p, &fs) < 0) return -1;
            PyObject *t = items_tuple(p, fs);
            if (!t) return -1;
            drop_range(p, fs);
            if (push_obj(p, t) < 0) return -1;
            break;
        }
        case 0x6C: { /* LIST */
            if (pop_mark(p, &fs) < 0) return -1;
            PyObject *t = items_list(p, fs);
            if (!t) return -1;
            drop_range(p, fs);
            p->containers++;
            if (push_obj(p, t) < 0) return -1;
            break;
        }
        case 0x64: { /* DICT */
            if (pop_mark(p, &fs) < 0) return -1;
            if ((p->sp - fs) % 2) return fallback(p, "DICT with an odd number of items");
            PyObject *d = PyDict_New();
            if (!d) return pyerr(p);
            for (int64_t i = fs; i < p->sp; i += 2) {
                PyObject *ko = to_obj(p, &p->st[i]);
                PyObject *vo = ko ? to_obj(p, &p->st[i + 1]) : NULL;
                int r = vo ? PyDict_SetItem(d, ko, vo) : -1;
                Py_XDECREF(ko); Py_XDECREF(vo);
                if (r < 0) { Py_DECREF(d); return p->status ? -1 : pyerr(p); }
            }
            drop_range(p, fs);
            p->containers++;
            if (push_obj(p, d) < 0) return -1;
            break;
        }
        case 0x8F: /* EMPTY_SET */
            if (new_container(p) < 0) return -1;
            if (push_obj(p, PySet_New(NULL)) < 0) return -1;
            break;
        case 0x90: { /* ADDITEMS */
            if (pop_mark(p, &fs) < 0) return -1;
            Val *t = below(p, fs);
            if (!t || t->k != K_OBJ || !PySet_CheckExact(t->u.o)) return fallback(p, "ADDITEMS on something that is not a set");
            for (int64_t i = fs; i < p->sp; i++) {
                PyObject *o = to_obj(p, &p->st[i]);
                if (!o) return -1;
                int r = PySet_Add(t->u.o, o);
                Py_DECREF(o);
                if (r < 0) return pyerr(p);
            }
            drop_range(p, fs);
            break;
        }
        case 0x91: { /* FROZENSET */
            if (pop_mark(p, &fs) < 0) return -1;
            PyObject *l = items_list(p, fs);
            if (!l) return -1;
            drop_range(p, fs);
            PyObject *f = PyFrozenSet_New(l);
            Py_DECREF(l);
            if (push_obj(p, f) < 0) return -1;
            break;
        }
        case 0x43: /* SHORT_BINBYTES */
            NEED(1); k = p->buf[p->pos];
            NEED(1 + k); s = p->buf + p->pos + 1; p->pos += 1 + k;
            if (push_obj(p, PyBytes_FromStringAndSize((const char *)s, k)) < 0) return -1;
            break;
        case 0x42: /* BINBYTES */
            NEED(4); k = rd32(p->buf + p->pos);
            NEED(4 + k); s = p->buf + p->pos + 4; p->pos += 4 + k;
            if (push_obj(p, PyBytes_FromStringAndSize((const char *)s, k)) < 0) return -1;
            break;
        case 0x8E: case 0x96: /* BINBYTES8 BYTEARRAY8 */
            NEED(8); k = (int64_t)rd64(p->buf + p->pos);
            if (k < 0 || k > p->n) { p->status = ST_TRUNC; return -1; }
            NEED(8 + k); s = p->buf + p->pos + 8; p->pos += 8 + k;
            if (op == 0x8E) { if (push_obj(p, PyBytes_FromStringAndSize((const char *)s, k)) < 0) return -1; }
            else if (push_obj(p, PyByteArray_FromStringAndSize((const char *)s, k)) < 0) return -1;
            break;
        case 0x55: /* SHORT_BINSTRING */
            NEED(1); k = p->buf[p->pos];
            NEED(1 + k); s = p->buf + p->pos + 1; p->pos += 1 + k;
            if (push_obj(p, PyUnicode_DecodeASCII((const char *)s, k, NULL)) < 0) return -1;
            break;
        case 0x54: /* BINSTRING */
            NEED(4); k = (int32_t)rd32(p->buf + p->pos);
            if (k < 0) { p->status = ST_TRUNC; return -1; }
            NEED(4 + k); s = p->buf + p->pos + 4; p->pos += 4 + k;
            if (push_obj(p, PyUnicode_DecodeASCII((const char *)s, k, NULL)) < 0) return -1;
            break;
        case 0x47: { /* BINFLOAT */
            NEED(8);
            s = p->buf + p->pos; p->pos += 8;
            unsigned char le[8];
            for (int i = 0; i < 8; i++) le[i] = s[7 - i];
            double d; memcpy(&d, le, 8);
            if (push_obj(p, PyFloat_FromDouble(d)) < 0) return -1;
            break;
        }
        case 0x30: /* POP */
            if (frame_len(p) > 0) drop_range(p, p->sp - 1);
            else { if (pop_mark(p, &fs) < 0) return -1; }
            break;
        case 0x31: /* POP_MARK */
            if (pop_mark(p, &fs) < 0) return -1;
            drop_range(p, fs);
            break;
        case 0x32: { /* DUP */
            Val *t = frame_top(p);
            if (!t) return fallback(p, "DUP on an empty stack");
            if (t->k == K_OBJ) { Py_INCREF(t->u.o); if (push_obj(p, t->u.o) < 0) return -1; }
            else if (t->k == K_INT) { if (push_int(p, t->u.i) < 0) return -1; }
            else return fallback(p, "DUP of an event or trace list");
            break;
        }
        case 0x80: /* PROTO */
            NEED(1); k = p->buf[p->pos]; p->pos += 1;
            if (k > 5) return fallback(p, "unsupported protocol");
            break;
        case 0x2E: /* STOP */
            if (p->nm || p->sp != 1) return fallback(p, "unbalanced stack at the end");
            if (p->st[0].k != K_OBJ) return fallback(p, "the result is an event or trace list");
            return 0;
        default: {
            const char *name = refused_name(op);
            if (name) {
                p->status = ST_REFUSED; p->refused_op = op; p->refused_at = p->off + p->pos - 1;
                return -1;
            }
            return fallback(p, "an opcode the fast path leaves to the Python parser");
        }
        }
    }
out:
    return -1;
}

/* ------------------------------------------------------------------ Column type */

typedef struct { PyObject_HEAD char *data; Py_ssize_t n; int itemsize; char fmt[2]; } Column;

static void column_dealloc(Column *c) { PyMem_RawFree(c->data); Py_TYPE(c)->tp_free((PyObject *)c); }

static int column_getbuffer(Column *c, Py_buffer *view, int flags) {
    /* plain bytes, writable: numpy.frombuffer(col, dtype) gives the typed array */
    return PyBuffer_FillInfo(view, (PyObject *)c, c->data, c->n * c->itemsize, 0, flags);
}

static PyBufferProcs column_as_buffer = {(getbufferproc)column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "snapparse.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_buffer = &column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column of parsed values (buffer protocol; numpy.frombuffer it).",
};

static PyObject *column_take(Col *c, const char *fmt) {
    Column *o = PyObject_New(Column, &ColumnType);
    if (!o) return NULL;
    char *d = c->data;
    if (c->n < c->cap) { char *q = PyMem_RawRealloc(d, (size_t)(c->n ? c->n : 1) * c->itemsize); if (q) d = q; }
    o->data = d; o->n = (Py_ssize_t)c->n; o->itemsize = c->itemsize; o->fmt[0] = fmt[0]; o->fmt[1] = 0;
    c->data = NULL; c->n = c->cap = 0;
    return (PyObject *)o;
}

/* ------------------------------------------------------------------ entry */

static void p_free(P *p) {
    while (p->sp) val_drop(p, &p->st[--p->sp]);
    PyMem_RawFree(p->st); PyMem_RawFree(p->marks);
    for (int64_t i = 0; i < p->mlen; i++) memo_release(p->memo[i]);
    PyMem_RawFree(p->memo);
    for (int64_t i = 0; i < p->nev; i++) if (p->ev[i].in_use) { Py_CLEAR(p->ev[i].cc); Py_CLEAR(p->ev[i].um); }
    PyMem_RawFree(p->ev); PyMem_RawFree(p->evfree);
    PyMem_RawFree(p->vl);
    for (int64_t i = 0; i < p->nbld; i++) {
        if (p->bld[i].vl >= 0) for (int64_t j = 0; j < p->bld[i].n; j++) Py_DECREF(p->bld[i].items[j]);
        PyMem_RawFree(p->bld[i].items);
    }
    PyMem_RawFree(p->bld); PyMem_RawFree(p->bldfree);
    for (int64_t i = 0; i < p->sarn; i++) Py_DECREF(p->sarena[i]);
    PyMem_RawFree(p->sarena); PyMem_RawFree(p->soff); PyMem_RawFree(p->shash); PyMem_RawFree(p->shval);
    PyMem_RawFree(p->sseen);
    for (int64_t i = 0; i < p->olcap; i++) Py_XDECREF(p->olkey[i]);
    PyMem_RawFree(p->olkey); PyMem_RawFree(p->olval);
    for (int64_t i = 0; i < p->ndev; i++) Py_DECREF(p->devlists[i]);
    PyMem_RawFree(p->devlists);
    Py_XDECREF(p->root); Py_XDECREF(p->traces);
    Py_XDECREF(p->str_ids); Py_XDECREF(p->str_list);
    for (int i = 0; i < 4096; i++) Py_XDECREF(p->scache[i]);
    for (int i = 0; i < 64; i++) { Py_XDECREF(p->kkey[i]); Py_XDECREF(p->akey[i]); }
    Py_XDECREF(p->skip_obj[0]); Py_XDECREF(p->skip_obj[1]);
    Col *cols[] = {&p->c_dev, &p->c_act, &p->c_addr, &p->c_size, &p->c_stream, &p->c_time,
                   &p->c_stack, &p->c_free, &p->c_cc, &p->c_um, &p->c_first};
    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) PyMem_RawFree(cols[i]->data);
    PyMem_RawFree(p->own);
    for (int64_t i = 0; i < p->matcap; i++) if (p->matk[i]) Py_DECREF(p->matv[i]);
    PyMem_RawFree(p->matk); PyMem_RawFree(p->matv);
}

static PyObject *build_result(P *p) {
    PyObject *result = p->st[0].u.o;
    int has_trace = p->traces != NULL || p->ndev > 0 || p->c_act.n > 0;
    if (!has_trace) return Py_BuildValue("(sOO)", "ok", result, Py_None);
    /* the trace list must be the snapshot dict's 'device_traces', holding
     * exactly the device lists in the order they were built */
    if (result != p->root || !p->traces) { fallback(p, "trace lists outside the snapshot dict"); return NULL; }
    PyObject *got, *key = PyUnicode_FromString("device_traces");
    if (!key) { pyerr(p); return NULL; }
    got = PyDict_GetItemWithError(p->root, key);
    Py_DECREF(key);
    if (got != p->traces) { PyErr_Clear(); fallback(p, "device_traces replaced"); return NULL; }
    if (PyList_GET_SIZE(p->traces) != p->ndev) { fallback(p, "device lists missing"); return NULL; }
    for (int64_t i = 0; i < p->ndev; i++)
        if (PyList_GET_ITEM(p->traces, i) != p->devlists[i]) { fallback(p, "device lists reordered"); return NULL; }
    PyObject *stacks = PyList_New((Py_ssize_t)p->nstacks);
    if (!stacks) { pyerr(p); return NULL; }
    for (int64_t h = 0; h < p->nstacks; h++) {
        int64_t a = p->soff[h], b = p->soff[h + 1];
        PyObject *l = PyList_New((Py_ssize_t)(b - a));
        if (!l) { Py_DECREF(stacks); pyerr(p); return NULL; }
        for (int64_t i = a; i < b; i++) { Py_INCREF(p->sarena[i]); PyList_SET_ITEM(l, i - a, p->sarena[i]); }
        PyList_SET_ITEM(stacks, h, l);
    }
    PyObject *cols = Py_BuildValue(
        "{sNsNsNsNsNsNsNsNsNsNsN}",
        "device", column_take(&p->c_dev, "i"), "action", column_take(&p->c_act, "b"),
        "addr", column_take(&p->c_addr, "q"), "size", column_take(&p->c_size, "q"),
        "stream", column_take(&p->c_stream, "q"), "time_us", column_take(&p->c_time, "q"),
        "stack", column_take(&p->c_stack, "i"), "device_free", column_take(&p->c_free, "q"),
        "compile_context", column_take(&p->c_cc, "i"), "user_metadata", column_take(&p->c_um, "i"),
        "first_seen", column_take(&p->c_first, "i"));
    if (!cols) { Py_DECREF(stacks); pyerr(p); return NULL; }
    PyObject *native = Py_BuildValue("{sNsOsOsnsn}", "columns", cols, "stacks", stacks,
                                     "strings", p->str_list, "devices", (Py_ssize_t)p->ndev,
                                     "parallel", (Py_ssize_t)p->sections_done);
    Py_DECREF(stacks);
    if (!native) { pyerr(p); return NULL; }
    PyObject *r = Py_BuildValue("(sON)", "ok", result, native);
    return r;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    PyObject *src, *progress = Py_None;
    long long total = -1;
    int threads = 1;
    long long sec_min = SEC_MIN_EVENTS;
    int file_mapped = 0;
    if (!PyArg_ParseTuple(args, "O|LOiLp", &src, &total, &progress, &threads, &sec_min, &file_mapped))
        return NULL;
    P *p = PyMem_RawCalloc(1, sizeof(P));
    if (!p) return PyErr_NoMemory();
    Py_buffer view; int have_view = 0;
    p->c_dev.itemsize = 4; p->c_act.itemsize = 1; p->c_addr.itemsize = 8; p->c_size.itemsize = 8;
    p->c_stream.itemsize = 8; p->c_time.itemsize = 8; p->c_stack.itemsize = 4; p->c_free.itemsize = 8;
    p->c_cc.itemsize = 4; p->c_um.itemsize = 4; p->c_first.itemsize = 4;
    p->last_dev = 0;
    p->threads = threads < 1 ? 1 : threads > 256 ? 256 : threads;
    p->sec_min = sec_min < 1 ? 1 : sec_min;
    /* only ever a real mmap object: unmapping pages of anything else loses data */
    p->file_mapped = file_mapped && strcmp(Py_TYPE(src)->tp_name, "mmap.mmap") == 0;
    p->progress = progress;
    p->next_progress = PROGRESS_EVERY;
    if (PyObject_CheckBuffer(src)) {
        if (PyObject_GetBuffer(src, &view, PyBUF_SIMPLE) < 0) { PyMem_RawFree(p); return NULL; }
        have_view = 1;
        p->buf = view.buf; p->end = view.len; p->n = view.len;
    } else {
        if (total < 0) { PyMem_RawFree(p); PyErr_SetString(PyExc_ValueError, "a reader needs the total size"); return NULL; }
        p->reader = src; p->n = total;
        p->own = PyMem_RawMalloc(CHUNK); p->owncap = CHUNK;
        if (!p->own) { PyMem_RawFree(p); return PyErr_NoMemory(); }
        p->buf = p->own;
    }
    p->budget = CONTAINER_BUDGET_FLOOR + p->n / CONTAINER_BUDGET_BYTES_PER;
    p->str_ids = PyDict_New(); p->str_list = PyList_New(0);
    PyObject *ret = NULL;
    if (!p->str_ids || !p->str_list) { p->status = ST_PYERR; }
    else if (p->n == 0) { p->status = ST_TRUNC; }
    else if (run(p) == 0) {
        ret = build_result(p);
        if (!ret && p->status == ST_OK) p->status = ST_PYERR;
    }
    if (!ret) {
        switch (p->status) {
        case ST_FALLBACK: PyErr_Clear(); ret = Py_BuildValue("(ss)", "fallback", p->reason); break;
        case ST_TRUNC: PyErr_Clear(); ret = Py_BuildValue("(s)", "truncated"); break;
        case ST_REFUSED: PyErr_Clear(); ret = Py_BuildValue("(ssL)", "refused", refused_name(p->refused_op), (long long)p->refused_at); break;
        default: if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "snapparse failed"); break;
        }
    }
    /* drop the stack's reference to the result before freeing our state */
    p_free(p);
    if (have_view) PyBuffer_Release(&view);
    PyMem_RawFree(p);
    return ret;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(data | readinto, total_size=-1, progress=None, threads=1, min_events=65536, "
     "file_mapped=False) -> "
     "('ok', obj, native | None) | "
     "('fallback', reason) | ('truncated',) | ('refused', opname, byte)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "snapparse",
                                    "Restricted streaming snapshot pickle parser (see snapparse.c).", -1, methods};

PyMODINIT_FUNC PyInit_snapparse(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    return PyModule_Create(&module);
}
