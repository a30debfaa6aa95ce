/* The memory categories' passes over every event, in C
 * (vramscope.viewer.model._native.catcore).
 *
 * Same results as the numpy code in viewer/model/categories/ (lean.py,
 * iterations.py), which stays the reference and the fallback when this
 * extension is not built; tests compare the two exactly
 * (tests/model/test_categories_native.py).  Why C: at 10M events every numpy
 * step over the events makes one or more fresh 10-80 MB temporaries (a mask, an
 * index array, a cast), and on a cold open each one pays its page faults - more
 * than the arithmetic.  Here one pass reads the event columns and writes only
 * the columns the classification keeps.  Every pass lets go of the GIL (the
 * caller keeps the buffers alive), so the allocations' pass runs on a second
 * thread while the phases are found.
 *
 * Inputs are read through the buffer protocol (no numpy headers); small
 * results are returned as ``bytes`` that Python wraps with ``numpy.frombuffer``.
 *
 * Why one file over 500 lines: one translation unit, so every pass shares the buffer
 * helpers as static functions and the module exports nothing else; each pass is short and
 * mirrors one numpy function named in its comment.  The address hash map and the growable
 * arrays are the ones of common/ (i64map.h, growth.h): a pass that runs out of memory
 * notes it and raises MemoryError once it holds the GIL again.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buffers.h"
#include "common/growth.h"
#include "common/i64map.h"

enum { A_ALLOC = 0, A_FREE_REQUESTED = 1, A_FREE_COMPLETED = 2 };
/* Phases and evidence (categories/iterations.py, stack_kinds.py). */
enum { PH_OTHER = 0, PH_FORWARD = 1, PH_BACKWARD = 2, PH_OPTIMIZER = 3, USER_CODE = 9 };
enum { EV_FORWARD = 1, EV_BACKWARD = 2, EV_OPTIMIZER = 3, EV_ZERO_GRAD = 4, EV_PARAM_INIT = 5,
       EV_USER = 6 };

/* Buffers taken in order and released together. */
typedef struct {
    Py_buffer v[16];
    int got;
} Bufs;

static int take(Bufs *b, PyObject *o, Py_ssize_t item, int writable, const char *what) {
    if (get_buf(o, &b->v[b->got], item, writable, what) < 0) return -1;
    b->got++;
    return 0;
}

/* bytes of a buffer that may be NULL when empty (Py_BuildValue would make None of it). */
static PyObject *bytes_of(const void *p, Py_ssize_t len) {
    return PyBytes_FromStringAndSize(p ? (const char *)p : "", len);
}

static PyObject *pair(PyObject *a, PyObject *b) {
    if (!a || !b) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    PyObject *t = PyTuple_Pack(2, a, b);
    Py_DECREF(a);
    Py_DECREF(b);
    return t;
}

static void release(Bufs *b) {
    release_bufs(b->v, b->got);
}

/* count_action(action i8, value) -> number of events with that action. */
static PyObject *count_action(PyObject *self, PyObject *args) {
    PyObject *o;
    int value;
    if (!PyArg_ParseTuple(args, "Oi", &o, &value)) return NULL;
    Bufs b = {.got = 0};
    if (take(&b, o, 1, 0, "action") < 0) return NULL;
    const int8_t *act = b.v[0].buf;
    Py_ssize_t n = b.v[0].len, count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) count += act[k] == value;
    Py_END_ALLOW_THREADS
    release(&b);
    return PyLong_FromSsize_t(count);
}

/* alloc_lifetimes(action i8, addr i64, size i64, stack i32,
 *                 out_start i64, out_end i64, out_requested i64, out_stack i32)
 *   -> (orphan events bytes(i64), orphan addresses bytes(i64))
 * Per allocation event (outputs hold exactly one entry per ALLOC, in order): its event,
 * the event of the free_completed at its address that ends it (n: never), its requested
 * bytes and stack.  A free_completed with no live allocation at its address is an orphan
 * (a block from before recording): returned for the caller to pair with those blocks.
 * Pairing as categories/lean.py through replay link_lifetimes: by address, in order; a
 * second alloc at a live address takes it over. */
static PyObject *alloc_lifetimes(PyObject *self, PyObject *args) {
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7]))
        return NULL;
    static const Py_ssize_t item[8] = {1, 8, 8, 4, 8, 8, 8, 4};
    static const char *name[8] = {"action", "addr", "size", "stack", "start", "end",
                                  "requested", "stack out"};
    Bufs b = {.got = 0};
    PyObject *result = NULL;
    I64Map map = {0};
    I64Vec ok = {0}, oa = {0};
    for (int i = 0; i < 8; i++)
        if (take(&b, o[i], item[i], i >= 4, name[i]) < 0) goto done;
    Py_ssize_t n = b.v[0].len, m = b.v[4].len / 8;
    if (b.v[1].len / 8 != n || b.v[2].len / 8 != n || b.v[3].len / 4 != n ||
        b.v[5].len / 8 != m || b.v[6].len / 8 != m || b.v[7].len / 4 != m) {
        PyErr_SetString(PyExc_ValueError, "alloc_lifetimes: columns of different lengths");
        goto done;
    }
    if (i64map_init(&map, 1 << 12) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    const int8_t *act = b.v[0].buf;
    const int64_t *addr = b.v[1].buf, *size = b.v[2].buf;
    const int32_t *stack = b.v[3].buf;
    int64_t *start = b.v[4].buf, *end = b.v[5].buf, *req = b.v[6].buf;
    int32_t *stk = b.v[7].buf;
    int err = 0;  /* 1: out of memory, 2: more allocations than outputs */
    Py_ssize_t j = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        int8_t a = act[k];
        if (a == A_ALLOC) {
            if (j >= m) {
                err = 2;
                break;
            }
            start[j] = k;
            end[j] = n;
            req[j] = size[k];
            stk[j] = stack[k];
            if (i64map_put(&map, addr[k], j) < 0) {
                err = 1;
                break;
            }
            j++;
        } else if (a == A_FREE_COMPLETED) {
            int64_t x;
            if (i64map_pop(&map, addr[k], &x)) end[x] = k;
            else if (i64vec_push(&ok, k) < 0 || i64vec_push(&oa, addr[k]) < 0) {
                err = 1;
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (err == 1) {
        PyErr_NoMemory();
        goto done;
    }
    if (err == 2 || j != m) {
        PyErr_SetString(PyExc_ValueError, "alloc_lifetimes: outputs do not hold one entry "
                        "per allocation");
        goto done;
    }
    result = pair(bytes_of(ok.v, ok.n * 8), bytes_of(oa.v, oa.n * 8));
done:
    release(&b);
    i64map_free(&map);
    free(ok.v);
    free(oa.v);
    return result;
}

/* phases(action i8, stack i32, stack_code i8 (one per stack + a last one for stack -1:
 *        evidence | guessed << 4), forced i64 (lo, hi, phase triples, applied in order),
 *        out_evidence i8, out_guessed u8, out_phase i8)
 *   -> (run starts bytes(i64), run phases bytes(i8)): the runs of equal phases written
 * = iterations.event_evidence + fill_phases: the evidence of each alloc's / requested
 * free's stack, then the phase of every event from the runs of strong evidence around
 * it (see fill_phases for the rules); and runs() of the phases.  The phase column is the scratch for each event's
 * evidence code until the runs are known. */
static PyObject *phases(PyObject *self, PyObject *args) {
    PyObject *o[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6]))
        return NULL;
    static const Py_ssize_t item[7] = {1, 4, 1, 8, 1, 1, 1};
    static const char *name[7] = {"action", "stack", "stack_code", "forced", "evidence",
                                  "guessed", "phase"};
    Bufs b = {.got = 0};
    PyObject *result = NULL;
    I64Vec at = {0}, rc = {0};
    int64_t *prev = NULL, *ms = NULL;  /* ms, mv: the merged runs (start, phase) */
    char *mv = NULL;
    Py_ssize_t w = 0;
    for (int i = 0; i < 7; i++)
        if (take(&b, o[i], item[i], i >= 4, name[i]) < 0) goto done;
    Py_ssize_t n = b.v[0].len, ns = b.v[2].len, nf = b.v[3].len / 8;
    if (b.v[1].len / 4 != n || b.v[4].len != n || b.v[5].len != n || b.v[6].len != n ||
        nf % 3 || ns < 1) {
        PyErr_SetString(PyExc_ValueError, "phases: columns of different lengths");
        goto done;
    }
    const int8_t *act = b.v[0].buf, *scode = b.v[2].buf;
    const int32_t *stack = b.v[1].buf;
    const int64_t *forced = b.v[3].buf;
    int8_t *ev = b.v[4].buf, *phase = b.v[6].buf;
    uint8_t *guessed = b.v[5].buf;
    int8_t lut[16];
    for (int i = 0; i < 16; i++) lut[i] = -1;
    lut[EV_FORWARD] = PH_FORWARD;
    lut[EV_BACKWARD] = PH_BACKWARD;
    lut[EV_OPTIMIZER] = PH_OPTIMIZER;
    lut[EV_PARAM_INIT] = PH_OTHER;
    lut[EV_ZERO_GRAD] = PH_OTHER;
    lut[EV_USER] = USER_CODE;
    int err = 0;  /* 1: out of memory, 2: a stack index out of range */
    Py_BEGIN_ALLOW_THREADS
    /* 1. Evidence, guessed, and the code of each event (in the phase column). */
    for (Py_ssize_t k = 0; k < n; k++) {
        int8_t got = 0;
        int8_t a = act[k];
        int64_t s = stack[k];
        if (s < 0) s += ns;  /* numpy's negative indexing: -1 is the last entry */
        if (s < 0 || s >= ns) {
            err = 2;
            break;
        }
        if (a == A_ALLOC || a == A_FREE_REQUESTED) got = scode[s];
        guessed[k] = got >= 16;
        got &= 15;
        ev[k] = got;
        phase[k] = lut[got];
    }
    /* 2. Annotation ranges override the evidence. */
    for (Py_ssize_t i = 0; !err && i < nf; i += 3) {
        int64_t lo = forced[i], hi = forced[i + 1];
        if (lo < 0) lo = 0;
        if (hi > n) hi = n;
        if (hi > lo) memset(phase + lo, (int8_t)forced[i + 2], (size_t)(hi - lo));
    }
    /* 3. Runs of equal codes among the events that have one (code >= 0). */
    int last = -1;
    for (Py_ssize_t k = 0; !err && k < n; k++) {
        int c = phase[k];
        if (c < 0 || c == last) continue;
        if (i64vec_push(&at, k) < 0 || i64vec_push(&rc, c) < 0) {
            err = 1;
            break;
        }
        last = c;
    }
    /* 4. Each run's phase: a strong run keeps its own; a run of the user's code takes
     * the rule of the strong runs around it (iterations._rule). */
    Py_ssize_t r = at.n;
    if (!err && r) {
        prev = malloc((size_t)r * sizeof *prev);
        if (!prev) err = 1;
    }
    if (!err && r) {
        int64_t p = -1;
        for (Py_ssize_t i = 0; i < r; i++) {
            if (rc.v[i] != USER_CODE) p = rc.v[i];
            prev[i] = p;  /* the phase of the last strong run at or before i (-1: none) */
        }
        int64_t q = -1;
        for (Py_ssize_t i = r - 1; i >= 0; i--) {
            if (rc.v[i] != USER_CODE) {
                q = rc.v[i];
                continue;
            }
            int64_t pp = prev[i], v = PH_OTHER;
            if (pp == PH_FORWARD && q == PH_BACKWARD) v = PH_FORWARD;
            else if (pp == q && pp != PH_FORWARD && pp >= 0) v = pp;
            rc.v[i] = v;
        }
        /* 5. Every event takes its run's phase (events before the first run: other). */
        memset(phase, PH_OTHER, (size_t)at.v[0]);
        for (Py_ssize_t i = 0; i < r; i++) {
            int64_t lo = at.v[i], hi = i + 1 < r ? at.v[i + 1] : n;
            memset(phase + lo, (int8_t)rc.v[i], (size_t)(hi - lo));
        }
    } else if (!err) {
        memset(phase, PH_OTHER, (size_t)n);
    }
    /* 6. The runs of equal phases of the column just written (runs() of it). */
    if (!err && n) {
        ms = malloc((size_t)(r + 1) * sizeof *ms);
        mv = malloc((size_t)(r + 1));
        if (!ms || !mv) err = 1;
    }
    if (!err && n) {
        if (!r || at.v[0] > 0) {
            ms[w] = 0;
            mv[w++] = PH_OTHER;
        }
        for (Py_ssize_t i = 0; i < r; i++)
            if (!w || mv[w - 1] != (char)rc.v[i]) {
                ms[w] = at.v[i];
                mv[w++] = (char)rc.v[i];
            }
    }
    Py_END_ALLOW_THREADS
    if (err == 1) PyErr_NoMemory();
    else if (err == 2) PyErr_SetString(PyExc_IndexError, "phases: a stack index out of range");
    else result = pair(bytes_of(ms, w * 8), bytes_of(mv, w));
done:
    release(&b);
    free(at.v);
    free(rc.v);
    free(prev);
    free(ms);
    free(mv);
    return result;
}

/* runs(values i8) -> (starts bytes(i64), values bytes(i8)): the runs of equal values. */
static PyObject *runs(PyObject *self, PyObject *args) {
    PyObject *o;
    if (!PyArg_ParseTuple(args, "O", &o)) return NULL;
    Bufs b = {.got = 0};
    if (take(&b, o, 1, 0, "values") < 0) return NULL;
    const int8_t *x = b.v[0].buf;
    Py_ssize_t n = b.v[0].len;
    I64Vec at = {0};
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++)
        if ((k == 0 || x[k] != x[k - 1]) && i64vec_push(&at, k) < 0) {
            err = 1;
            break;
        }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    char *vals = NULL;
    if (err || (at.n && !(vals = malloc((size_t)at.n)))) {
        PyErr_NoMemory();
    } else {
        for (Py_ssize_t i = 0; i < at.n; i++) vals[i] = (char)x[at.v[i]];
        result = pair(bytes_of(at.v, at.n * 8), bytes_of(vals, at.n));
    }
    release(&b);
    free(at.v);
    free(vals);
    return result;
}

/* spans_any(values i8, value, lo i64 (sorted), end) -> bytes (one 0/1 per span)
 * = numpy.logical_or.reduceat(values[:end] == value, lo): span i is [lo_i, lo_i+1)
 * (the last one up to end); where lo_i >= lo_i+1, just the event lo_i. */
static PyObject *spans_any(PyObject *self, PyObject *args) {
    PyObject *o_x, *o_lo;
    int value;
    Py_ssize_t end;
    if (!PyArg_ParseTuple(args, "OiOn", &o_x, &value, &o_lo, &end)) return NULL;
    Bufs b = {.got = 0};
    if (take(&b, o_x, 1, 0, "values") < 0 || take(&b, o_lo, 8, 0, "lo") < 0) {
        release(&b);
        return NULL;
    }
    const int8_t *x = b.v[0].buf;
    const int64_t *lo = b.v[1].buf;
    Py_ssize_t k = b.v[1].len / 8;
    PyObject *result = NULL;
    if (end > b.v[0].len || end < 0) {
        PyErr_SetString(PyExc_ValueError, "spans_any: end past the values");
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++)
        if (lo[i] < 0 || lo[i] >= end) {
            PyErr_SetString(PyExc_IndexError, "spans_any: span start out of range");
            goto done;
        }
    result = PyBytes_FromStringAndSize(NULL, k);
    if (!result) goto done;
    char *out = PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t a = lo[i], z = i + 1 < k ? lo[i + 1] : end;
        if (z <= a) z = a + 1;
        char hit = 0;
        for (Py_ssize_t e = a; e < z; e++)
            if (x[e] == value) {
                hit = 1;
                break;
            }
        out[i] = hit;
    }
    Py_END_ALLOW_THREADS
done:
    release(&b);
    return result;
}

/* next_equal(values i8, value, queries i64) -> bytes(i64): per query q the first event
 * e >= q with values[e] == value (n when none) = searchsorted over the positions of
 * ``value`` without those positions.  Sorted queries cost one pass in all (the answer
 * of the query before is reused while it is still ahead). */
static PyObject *next_equal(PyObject *self, PyObject *args) {
    PyObject *o_x, *o_q;
    int value;
    if (!PyArg_ParseTuple(args, "OiO", &o_x, &value, &o_q)) return NULL;
    Bufs b = {.got = 0};
    if (take(&b, o_x, 1, 0, "values") < 0 || take(&b, o_q, 8, 0, "queries") < 0) {
        release(&b);
        return NULL;
    }
    const int8_t *x = b.v[0].buf;
    const int64_t *q = b.v[1].buf;
    Py_ssize_t n = b.v[0].len, k = b.v[1].len / 8;
    PyObject *result = PyBytes_FromStringAndSize(NULL, k * 8);
    if (result) {
        int64_t *out = (int64_t *)PyBytes_AS_STRING(result);
        Py_BEGIN_ALLOW_THREADS
        int64_t lq = -1, la = -1;  /* the last query and its answer (none yet) */
        for (Py_ssize_t i = 0; i < k; i++) {
            int64_t from = q[i] < 0 ? 0 : q[i];
            if (lq >= 0 && from >= lq && from <= la) {
                out[i] = la;
                continue;
            }
            int64_t e = from;
            while (e < n && x[e] != value) e++;
            out[i] = e < n ? e : n;
            lq = from;
            la = out[i];
        }
        Py_END_ALLOW_THREADS
    }
    release(&b);
    return result;
}

/* span_peaks(action i8, size i64, start, lo i64, hi i64) -> (top bytes(i64), peak bytes(i64))
 * The requested-bytes curve (replay curves: +size at an alloc, -size at a free_completed,
 * from ``start``) without storing it: per span [lo_i, hi_i) (sorted, non-overlapping,
 * non-empty) its maximum and the first event at it. */
static PyObject *span_peaks(PyObject *self, PyObject *args) {
    PyObject *o_act, *o_size, *o_lo, *o_hi;
    long long c;
    if (!PyArg_ParseTuple(args, "OOLOO", &o_act, &o_size, &c, &o_lo, &o_hi)) return NULL;
    Bufs b = {.got = 0};
    PyObject *result = NULL;
    int64_t *top = NULL, *peak = NULL;
    if (take(&b, o_act, 1, 0, "action") < 0 || take(&b, o_size, 8, 0, "size") < 0 ||
        take(&b, o_lo, 8, 0, "lo") < 0 || take(&b, o_hi, 8, 0, "hi") < 0)
        goto done;
    Py_ssize_t n = b.v[0].len, k = b.v[2].len / 8;
    const int8_t *act = b.v[0].buf;
    const int64_t *size = b.v[1].buf, *lo = b.v[2].buf, *hi = b.v[3].buf;
    if (b.v[1].len / 8 != n || b.v[3].len / 8 != k) {
        PyErr_SetString(PyExc_ValueError, "span_peaks: columns of different lengths");
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++)
        if (lo[i] < 0 || hi[i] <= lo[i] || hi[i] > n || (i && lo[i] < hi[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "span_peaks: spans not sorted, disjoint, "
                            "non-empty and inside the trace");
            goto done;
        }
    top = malloc((size_t)(k ? k : 1) * sizeof *top);
    peak = malloc((size_t)(k ? k : 1) * sizeof *peak);
    if (!top || !peak) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t j = 0, stop = k ? hi[k - 1] : 0;
    for (Py_ssize_t i = 0; i < k; i++) top[i] = INT64_MIN;
    for (Py_ssize_t e = 0; e < stop; e++) {
        int8_t a = act[e];
        if (a == A_ALLOC) c += size[e];
        else if (a == A_FREE_COMPLETED) c -= size[e];
        while (hi[j] <= e) j++;  /* e < stop = hi[k - 1]: j stays < k */
        if (e >= lo[j] && c > top[j]) {  /* strictly: the first event keeps the peak */
            top[j] = c;
            peak[j] = e;
        }
    }
    Py_END_ALLOW_THREADS
    result = pair(bytes_of(top, k * 8), bytes_of(peak, k * 8));
done:
    release(&b);
    free(top);
    free(peak);
    return result;
}

/* unique_inverse(values i64) -> (sorted distinct values bytes(i64), inverse bytes(i64))
 * = numpy.unique(values, return_inverse=True) by hashing: linear in the values, for the
 * few distinct sizes of hundreds of thousands of gradients (numpy sorts them all). */
static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static PyObject *unique_inverse(PyObject *self, PyObject *args) {
    PyObject *o;
    if (!PyArg_ParseTuple(args, "O", &o)) return NULL;
    Bufs b = {.got = 0};
    if (take(&b, o, 8, 0, "values") < 0) return NULL;
    const int64_t *x = b.v[0].buf;
    Py_ssize_t m = b.v[0].len / 8;
    PyObject *result = NULL, *inv = PyBytes_FromStringAndSize(NULL, m * 8);
    I64Map map = {0};
    I64Vec keys = {0};
    int err = inv ? 0 : 2;
    if (!err && i64map_init(&map, 1 << 6) < 0) err = 1;
    if (!err) {
        int64_t *out = (int64_t *)PyBytes_AS_STRING(inv);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < m && !err; i++)  /* distinct values, first seen */
            if (!i64map_has(&map, x[i]) &&
                (i64vec_push(&keys, x[i]) < 0 || i64map_put(&map, x[i], 0) < 0))
                err = 1;
        if (!err) {
            qsort(keys.v, (size_t)keys.n, sizeof *keys.v, cmp_i64);
            /* ranks: every key is there already, so no put can fail */
            for (Py_ssize_t r = 0; r < keys.n; r++) i64map_put(&map, keys.v[r], r);
            for (Py_ssize_t i = 0; i < m; i++) i64map_get(&map, x[i], &out[i]);
        }
        Py_END_ALLOW_THREADS
    }
    if (err == 1) PyErr_NoMemory();
    if (!err) {
        PyObject *u = bytes_of(keys.v, keys.n * 8);
        Py_INCREF(inv);
        result = pair(u, inv);
    }
    Py_XDECREF(inv);
    release(&b);
    i64map_free(&map);
    free(keys.v);
    return result;
}

/* -- classify_window: the reasons of the allocations made in the window ------------------ */

/* Rules, in the order of the reason ids the caller passes (classify.WINDOW_REASONS). */
enum { R_WORKSPACE, R_OPT_INIT, R_OPT_SURVIVES, R_TEMP_OPT, R_GRAD_ACC, R_GRAD_GUESS, R_GRAD,
       R_TEMP_BWD, R_PARAM_APPLY, R_PARAM_INIT, R_ACT_GUESS, R_ACT_KEPT, R_ACT_SAVED,
       R_ACT_OUTPUT, R_TEMP_FWD, R_INPUT_USER, R_INPUT_LIFETIME, R_TEMP_OTHER, R_UNK_SETUP,
       R_UNK_OTHER, R_UNK_NO_ITER, N_RULES };

/* classify_window(start i64, end i64, stack i32, kinds i32 (per stack + a last 0),
 *                 phase i8, evidence i8, guessed u8, run_ends i64, b_starts i64,
 *                 it_lo i64, it_end i64, reason_ids i16 (N_RULES), reason i16 (out),
 *                 (n, it_span_end, k_workspace, k_opt_init, k_accumulate_grad, k_apply))
 *   -> True, or False (nothing written) when the allocations made in the window are not
 *      in event order (the caller then takes the numpy path).
 * = classify.classify's rules for every allocation made in the window (start >= 0):
 * library workspaces, then by the phase it was made in: optimizer step, backward,
 * forward, other - each a first-match list of rules (see classify.py, the reference).
 * Allocations from before recording (start < 0) are left as they are. */
static PyObject *classify_window(PyObject *self, PyObject *args) {
    PyObject *o[13];
    long long n, it_span_end, k_ws, k_opt_init, k_acc, k_apply;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOO(LLLLLL)", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &n,
                          &it_span_end, &k_ws, &k_opt_init, &k_acc, &k_apply))
        return NULL;
    static const Py_ssize_t item[13] = {8, 8, 4, 4, 1, 1, 1, 8, 8, 8, 8, 2, 2};
    static const char *name[13] = {"start", "end", "stack", "kinds", "phase", "evidence",
                                   "guessed", "run_ends", "b_starts", "it_lo", "it_end",
                                   "reason_ids", "reason"};
    Bufs b = {.got = 0};
    PyObject *result = NULL;
    for (int i = 0; i < 13; i++)
        if (take(&b, o[i], item[i], i == 12, name[i]) < 0) goto done;
    Py_ssize_t m = b.v[0].len / 8, ns = b.v[3].len / 4, nr = b.v[7].len / 8,
               nb = b.v[8].len / 8, ni = b.v[9].len / 8;
    if (b.v[1].len / 8 != m || b.v[2].len / 4 != m || b.v[12].len / 2 != m ||
        b.v[4].len != n || b.v[5].len != n || b.v[6].len != n || b.v[10].len / 8 != ni ||
        b.v[11].len / 2 != N_RULES || ns < 1 || nr < 1) {
        PyErr_SetString(PyExc_ValueError, "classify_window: columns of different lengths");
        goto done;
    }
    const int64_t *start = b.v[0].buf, *end = b.v[1].buf, *run_ends = b.v[7].buf,
                  *b_starts = b.v[8].buf, *it_lo = b.v[9].buf, *it_end = b.v[10].buf;
    const int32_t *stack = b.v[2].buf, *kinds = b.v[3].buf;
    const int8_t *phase = b.v[4].buf, *evid = b.v[5].buf;
    const uint8_t *guessed = b.v[6].buf;
    const int16_t *rid = b.v[11].buf;
    int16_t *reason = b.v[12].buf;
    /* In event order? (next_f below walks forward once) */
    int64_t prev = -1;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (start[i] < 0) continue;
        if (start[i] < prev || start[i] >= n) {
            if (start[i] >= n) PyErr_SetString(PyExc_IndexError, "classify_window: an "
                                               "allocation after the last event");
            else result = Py_NewRef(Py_False);
            goto done;
        }
        prev = start[i];
    }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    /* The starts rise, so every lookup walks forward: the run of phases holding s, the
     * next backward run, the iteration span holding s, the next forward evidence. */
    Py_ssize_t ri = 0, bj = 0, ij = 0, fk = 0;
    int64_t next_f = -1;  /* the first forward-evidence event >= the last query, or n */
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t s = start[i];
        if (s < 0) continue;
        int64_t e = end[i], st = stack[i];
        if (st < 0) st += ns;
        if (st < 0 || st >= ns) {
            err = 2;
            break;
        }
        int64_t k = kinds[st];
        int r;
        if (k & k_ws) {
            reason[i] = rid[R_WORKSPACE];
            continue;
        }
        int8_t ph = phase[s];
        /* The exclusive end of the run of equal phases that holds s (the last run ends
         * at n > s). */
        while (run_ends[ri] <= s) ri++;
        int64_t run_end = run_ends[ri];
        int8_t ev = evid[s];
        if (ph == PH_OPTIMIZER) {
            int kept = e > run_end || e >= n;
            r = (k & k_opt_init) && kept ? R_OPT_INIT : kept ? R_OPT_SURVIVES : R_TEMP_OPT;
        } else if (ph == PH_BACKWARD) {
            int survives = e > run_end;
            if (!survives && e >= n && ni) {
                /* Alive at the end, from an iteration that ended before the recording did
                 * (the closing frees carry no evidence: the run reaches the end). */
                while (ij < ni && it_lo[ij] <= s) ij++;
                Py_ssize_t own = ij - 1;
                survives = own >= 0 && s < it_span_end && it_end[own] < n - 1;
            }
            r = survives && (k & k_acc) ? R_GRAD_ACC
                : survives && guessed[s] ? R_GRAD_GUESS
                : survives ? R_GRAD : R_TEMP_BWD;
        } else if (ev == EV_PARAM_INIT) {  /* forward or other: made by a module's setup */
            r = (k & k_apply) ? R_PARAM_APPLY : R_PARAM_INIT;
        } else if (ph == PH_FORWARD) {
            while (bj < nb && b_starts[bj] < s + 1) bj++;
            int64_t next_b = bj < nb ? b_starts[bj] : n;
            int has_b = next_b < n, saved = has_b && e > next_b;
            int kept = 0;
            if (saved && ni) {
                /* IterationOf: the span holding s (-1 outside every span). */
                while (ij < ni && it_lo[ij] <= s) ij++;
                Py_ssize_t own = ij - 1;
                kept = own >= 0 && s < it_span_end && e > it_end[own] + 1;
            }
            r = saved && guessed[s] ? R_ACT_GUESS
                : kept ? R_ACT_KEPT
                : saved ? R_ACT_SAVED
                : !has_b && (e > run_end || e >= n) ? R_ACT_OUTPUT : R_TEMP_FWD;
        } else {
            if (next_f < s + 1) {  /* walk on from the last answer */
                int64_t x = s + 1;
                while (x < n && evid[x] != EV_FORWARD) x++;
                next_f = x;
            }
            int64_t limit = n + 1;
            if (ni) {
                int64_t at = next_f < n - 1 ? next_f : n - 1;
                while (fk < ni && it_lo[fk] <= at) fk++;
                Py_ssize_t it = fk - 1;
                if (!(it >= 0 && at < it_span_end)) it = -1;
                Py_ssize_t nxt = (it > 0 ? it : 0) + 1;
                limit = (nxt < ni ? it_end[nxt] : n) + 1;
            }
            int into = next_f < n && e > next_f && e <= limit;
            r = into && ev == EV_USER ? R_INPUT_USER
                : into && ev == 0 ? R_INPUT_LIFETIME
                : e <= run_end ? R_TEMP_OTHER
                : !ni ? R_UNK_NO_ITER
                : s < it_lo[0] && e > it_lo[0] ? R_UNK_SETUP : R_UNK_OTHER;
        }
        reason[i] = rid[r];
    }
    Py_END_ALLOW_THREADS
    if (err) PyErr_SetString(PyExc_IndexError, "classify_window: a stack index out of range");
    else result = Py_NewRef(Py_True);
done:
    release(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"count_action", count_action, METH_VARARGS, "Events with the given action."},
    {"alloc_lifetimes", alloc_lifetimes, METH_VARARGS,
     "Per allocation: event, end, requested bytes, stack; and the orphan frees."},
    {"phases", phases, METH_VARARGS, "Evidence, guessed and phase of every event."},
    {"runs", runs, METH_VARARGS, "Runs of equal int8 values: starts and values."},
    {"spans_any", spans_any, METH_VARARGS, "logical_or.reduceat(values == value, lo)."},
    {"next_equal", next_equal, METH_VARARGS, "First event >= each query holding a value."},
    {"unique_inverse", unique_inverse, METH_VARARGS,
     "numpy.unique(values, return_inverse=True) of int64 values, by hashing."},
    {"classify_window", classify_window, METH_VARARGS,
     "The reasons of the allocations made in the window (classify.py's rules)."},
    {"span_peaks", span_peaks, METH_VARARGS,
     "Maximum of the requested curve, and the first event at it, per span."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "catcore",
                                    "The memory categories' passes over every event.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_catcore(void) { return PyModule_Create(&module); }
