/* The allocator replay's inner loop in C (vramscope.viewer.model._native.replay_core).
 *
 * Same rules, same results as the pure-Python state machine in
 * ``viewer/model/replay/state.py`` (``_State`` / ``_apply``), which stays the
 * reference and the fallback when this extension is not built; tests compare
 * the two on every bundled snapshot.  Why C: the replay is a sequential state
 * machine (split on alloc, merge on free), one dict lookup and a few list
 * operations per event in Python - about 1.4 us per event, 14 s for 10M
 * events.  Here it is a hash lookup and pointer updates.
 *
 * Data: blocks live in a slot array, linked per segment in address order
 * (prev/next), found by address through the hash map of common/i64map.h.
 * The allocator's rules (round_size, should_split) are common/allocator_rules.h.
 * Segments are few; they are kept sorted by address in a small array.
 * Layouts (segments + blocks in address order) are returned as tuples of
 * ``bytes`` columns that Python wraps with ``numpy.frombuffer``; inputs are
 * read through the buffer protocol, so numpy is not needed to build this.
 *
 * Nothing here trusts the trace: every lookup that can miss is checked and
 * counted as an inconsistency, exactly where the Python version counts one.
 *
 * Why one file over 500 lines: one translation unit, so the state machine, the
 * whole-trace scans and the curve passes share static inline helpers and export
 * nothing but the module; the Python reference it mirrors is split by purpose in
 * viewer/model/replay/ (state.py: blocks and segments; seed.py; curves.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/allocator_rules.h"
#include "common/buffers.h"
#include "common/growth.h"
#include "common/i64map.h"

enum { ALLOCATED = 0, PENDING = 1, FREE = 2 };
#define BEFORE_RECORDING (-1)
#define NONE (-1)

typedef struct {
    int64_t addr, size, requested, alloc;
    int32_t stack, seg, prev, next;
    int8_t state;
} Block;

typedef struct {
    int64_t addr, size, stream;
    int32_t pool, head, tail, nblocks;
    int32_t pos; /* its index in the order when last searched (may be stale: checked) */
    uint8_t small, expandable;
} Seg;

/* Out of memory in a helper: -1 up to new_state() or run(), which raise MemoryError once
 * they hold the GIL (common/growth.h); the state stays whole and usable. */
typedef struct {
    Block *b;
    int32_t nb, free_b, live_b;
    int64_t capb;
    Seg *s;
    int32_t ns, free_s;
    int64_t caps;
    int32_t *order; /* segment slots sorted by address */
    int32_t norder;
    int64_t caporder;
    I64Map by_addr; /* block address -> block slot */
    int64_t inconsistencies;
    AllocRules rules;
    int64_t *known_addr, *known_size;
    uint8_t *known_small;
    int32_t *known_pool;
    Py_ssize_t nknown;
    int32_t default_pool;
} St;

/* Room for one more block or segment slot (slots are int32). */
static int grow_slots(void **p, int64_t *cap, size_t item, int32_t n) {
    return n == INT32_MAX ? -1 : grow_array(p, cap, (int64_t)n + 1, item);
}

/* ------------------------------------------------------------------ blocks by address */
static inline int32_t h_get(const St *st, int64_t addr) {
    int64_t x;
    return i64map_get(&st->by_addr, addr, &x) ? (int32_t)x : -1;
}

static inline void h_del(St *st, int64_t addr) { i64map_pop(&st->by_addr, addr, NULL); }

/* ------------------------------------------------------------------ segments */
/* index in order of the last segment starting at or before addr, -1 if none */
static int32_t seg_index(St *st, int64_t addr) {
    int32_t lo = 0, hi = st->norder;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (st->s[st->order[mid]].addr <= addr) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0) st->s[st->order[lo - 1]].pos = lo - 1; /* for segment_of_block */
    return lo - 1;
}

static int32_t segment_containing(St *st, int64_t addr) {
    int32_t i = seg_index(st, addr);
    if (i < 0) return NONE;
    const Seg *g = &st->s[st->order[i]];
    return addr < g->addr + g->size ? st->order[i] : NONE;
}

/* segment_containing(addr) for the address of block x (-1: none), without the search where
 * the block's own segment is the answer: its place in the order (``pos``, as the last
 * search found it, checked to be current) is the search's answer exactly when the segment
 * starts at or before addr and the next one after it, the order being sorted by address.
 * Most events free or reuse a block: the search per event was most of the loop's time. */
static int32_t segment_of_block(St *st, int32_t x, int64_t addr) {
    if (x >= 0) {
        int32_t g = st->b[x].seg, j = st->s[g].pos;
        if (j >= 0 && j < st->norder && st->order[j] == g && st->s[g].addr <= addr &&
            (j + 1 == st->norder || st->s[st->order[j + 1]].addr > addr))
            return addr < st->s[g].addr + st->s[g].size ? g : NONE;
    }
    return segment_containing(st, addr);
}

/* ------------------------------------------------------------------ blocks */
static void unlink_block(St *st, int32_t x) {
    Block *b = &st->b[x];
    Seg *g = &st->s[b->seg];
    if (b->prev >= 0) st->b[b->prev].next = b->next;
    else g->head = b->next;
    if (b->next >= 0) st->b[b->next].prev = b->prev;
    else g->tail = b->prev;
    g->nblocks--;
}

static void drop_block(St *st, int32_t x) {
    unlink_block(st, x);
    h_del(st, st->b[x].addr);
    st->b[x].next = st->free_b;
    st->free_b = x;
    st->live_b--;
}

/* Insert block x into segment seg after block `after` (-1: at the head);
 * after == -2: find the place by address, walking back from the tail. */
static void link_block(St *st, int32_t seg, int32_t x, int32_t after) {
    Seg *g = &st->s[seg];
    Block *b = &st->b[x];
    /* A hint that would break address order (overlapping blocks of an inconsistent
     * trace) is ignored: the list stays sorted, like the Python reference's. */
    if (after >= 0 && (st->b[after].seg != seg || st->b[after].addr > b->addr ||
                       (st->b[after].next >= 0 && st->b[st->b[after].next].addr < b->addr)))
        after = -2;
    if (after == -1 && g->head >= 0 && st->b[g->head].addr < b->addr) after = -2;
    if (after == -2) {
        after = g->tail;
        while (after >= 0 && st->b[after].addr > b->addr) after = st->b[after].prev;
    }
    b->seg = seg;
    b->prev = after;
    b->next = after >= 0 ? st->b[after].next : g->head;
    if (b->next >= 0) st->b[b->next].prev = x;
    else g->tail = x;
    if (after >= 0) st->b[after].next = x;
    else g->head = x;
    g->nblocks++;
}

/* A new block; returns its slot or -1 (out of memory). */
static int32_t put_block(St *st, int64_t addr, int64_t size, int8_t state, int64_t requested,
                         int32_t stack, int64_t alloc, int32_t seg, int32_t after) {
    int32_t old = h_get(st, addr);
    if (old >= 0) { /* only in inconsistent traces: the newer block wins */
        if (old == after) after = -2;
        drop_block(st, old);
    }
    int32_t x;
    if (st->free_b >= 0) {
        x = st->free_b;
        st->free_b = st->b[x].next;
    } else {
        if (grow_slots((void **)&st->b, &st->capb, sizeof(Block), st->nb) < 0) return -1;
        x = st->nb++;
    }
    Block *b = &st->b[x];
    b->addr = addr;
    b->size = size;
    b->state = state;
    b->requested = requested;
    b->stack = stack;
    b->alloc = alloc;
    if (i64map_put(&st->by_addr, addr, x) < 0) return -1;
    link_block(st, seg, x, after);
    st->live_b++;
    return x;
}

static int add_segment(St *st, int64_t addr, int64_t size, int64_t stream, int small, int32_t pool,
                       int expandable);

static void remove_segment(St *st, int64_t addr) {
    int32_t i = seg_index(st, addr);
    if (i < 0 || st->s[st->order[i]].addr != addr) {
        st->inconsistencies++;
        return;
    }
    int32_t seg = st->order[i];
    for (int32_t x = st->s[seg].head; x >= 0;) {
        int32_t nx = st->b[x].next;
        if (st->b[x].state != FREE) st->inconsistencies++;
        h_del(st, st->b[x].addr);
        st->b[x].next = st->free_b;
        st->free_b = x;
        st->live_b--;
        x = nx;
    }
    memmove(st->order + i, st->order + i + 1, (size_t)(st->norder - i - 1) * sizeof(int32_t));
    st->norder--;
    st->s[seg].head = st->free_s; /* free list of segment slots through head */
    st->free_s = seg;
}

static int add_segment(St *st, int64_t addr, int64_t size, int64_t stream, int small, int32_t pool,
                       int expandable) {
    int32_t i = seg_index(st, addr);
    if (i >= 0 && st->s[st->order[i]].addr == addr) {
        remove_segment(st, addr);
        i = seg_index(st, addr);
    }
    /* Segments never overlap: one inside another is not added, one running into the
     * next is cut short (as the Python reference does). */
    if (i >= 0 && st->s[st->order[i]].addr + st->s[st->order[i]].size > addr) {
        st->inconsistencies++;
        return 0;
    }
    if (i + 1 < st->norder && addr + size > st->s[st->order[i + 1]].addr) {
        st->inconsistencies++;
        size = st->s[st->order[i + 1]].addr - addr;
    }
    int32_t seg;
    if (st->free_s >= 0) {
        seg = st->free_s;
        st->free_s = st->s[seg].head;
    } else {
        if (grow_slots((void **)&st->s, &st->caps, sizeof(Seg), st->ns) < 0) return -1;
        seg = st->ns++;
    }
    if (grow_slots((void **)&st->order, &st->caporder, sizeof(int32_t), st->norder) < 0) return -1;
    Seg *g = &st->s[seg];
    g->addr = addr;
    g->size = size;
    g->stream = stream;
    g->small = (uint8_t)(small != 0);
    g->pool = pool;
    g->expandable = (uint8_t)(expandable != 0);
    g->head = g->tail = -1;
    g->nblocks = 0;
    g->pos = -1;
    memmove(st->order + i + 2, st->order + i + 1, (size_t)(st->norder - i - 1) * sizeof(int32_t));
    st->order[i + 1] = seg;
    st->norder++;
    if (size && put_block(st, addr, size, FREE, 0, -1, BEFORE_RECORDING, seg, -1) < 0) return -1;
    return 0;
}

/* The block starting at addr, else the one containing it, split there.  ``known``: the
 * block at addr as the caller already looked it up (-1: none), or -2 to look it up here. */
static int32_t block_at_or_around(St *st, int64_t addr, int32_t known, int *err) {
    int32_t x = known >= -1 ? known : h_get(st, addr);
    if (x >= 0) return x;
    int32_t seg = segment_containing(st, addr);
    if (seg < 0) return NONE;
    int32_t outer = -1;
    for (int32_t y = st->s[seg].head; y >= 0 && st->b[y].addr <= addr; y = st->b[y].next) outer = y;
    if (outer < 0) return NONE;
    Block *o = &st->b[outer];
    if (addr >= o->addr + o->size) return NONE;
    st->inconsistencies++;
    int64_t head = addr - o->addr, tail = o->size - head;
    o->size = head;
    int8_t state = o->state;
    x = put_block(st, addr, tail, state, 0, -1, BEFORE_RECORDING, seg, outer);
    if (x < 0) *err = 1;
    return x;
}

static void merge(St *st, int32_t x) {
    Block *b = &st->b[x];
    int32_t nx = b->next;
    if (nx >= 0 && st->b[nx].state == FREE && b->addr + b->size == st->b[nx].addr) {
        b->size += st->b[nx].size;
        drop_block(st, nx);
    }
    int32_t pv = b->prev;
    if (pv >= 0 && st->b[pv].state == FREE && st->b[pv].addr + st->b[pv].size == b->addr) {
        st->b[pv].size += b->size;
        drop_block(st, x);
    }
}

/* Segment facts the trace does not carry, from the final snapshot (Known.lookup in
 * Python): the final segment with this address and size; for a mapped range, the final
 * mapped range containing it; else small when <= 2 MiB (never expandable), default pool. */
static int new_segment(St *st, int64_t addr, int64_t size, int64_t stream, int expandable) {
    if (size <= 0 || addr < 0 || addr > INT64_MAX - size) {
        st->inconsistencies++;
        return 0;
    }
    int small = size <= st->rules.small_buffer && !expandable;
    int32_t pool = st->default_pool;
    Py_ssize_t lo = 0, hi = st->nknown;
    while (lo < hi) { /* first known address > addr */
        Py_ssize_t mid = (lo + hi) / 2;
        if (st->known_addr[mid] <= addr) lo = mid + 1;
        else hi = mid;
    }
    Py_ssize_t i = lo - 1;
    if (i >= 0) {
        int64_t a = st->known_addr[i], s = st->known_size[i];
        if ((a == addr && s == size) || (expandable && addr - a < s)) {
            small = st->known_small[i];
            pool = st->known_pool[i];
        }
    }
    return add_segment(st, addr, size, stream, small, pool, expandable);
}

static int joinable(const St *st, int32_t g, int64_t stream) {
    return g >= 0 && st->s[g].expandable && st->s[g].stream == stream;
}

/* Blocks of segment `from` after block `after` (-1: all) move to the end of segment `to`. */
static void move_blocks(St *st, int32_t from, int32_t after, int32_t to) {
    Seg *f = &st->s[from], *t = &st->s[to];
    int32_t first = after >= 0 ? st->b[after].next : f->head;
    if (first < 0) return;
    int32_t last = f->tail, count = 0;
    for (int32_t y = first; y >= 0; y = st->b[y].next) {
        st->b[y].seg = to;
        count++;
    }
    if (after >= 0) st->b[after].next = -1;
    else f->head = -1;
    f->tail = after;
    f->nblocks -= count;
    st->b[first].prev = t->tail;
    if (t->tail >= 0) st->b[t->tail].next = first;
    else t->head = first;
    t->tail = last;
    t->nblocks += count;
}

/* Remove the segment at position i of the order (its blocks are gone or moved). */
static void drop_segment_at(St *st, int32_t i) {
    int32_t seg = st->order[i];
    memmove(st->order + i, st->order + i + 1, (size_t)(st->norder - i - 1) * sizeof(int32_t));
    st->norder--;
    st->s[seg].head = st->free_s;
    st->free_s = seg;
}

/* segment_map: join the mapped range ending at addr and the one starting at addr + size
 * (expandable, same stream), or start a new range (as _State.map). */
static int map_range(St *st, int64_t a, int64_t sz, int64_t stream) {
    if (sz <= 0 || a < 0 || a > INT64_MAX - sz) {
        st->inconsistencies++;
        return 0;
    }
    int32_t i = seg_index(st, a); /* last segment starting at or before a */
    int32_t left = i >= 0 ? st->order[i] : NONE;
    if ((left >= 0 && st->s[left].addr + st->s[left].size > a) ||
        (i + 1 < st->norder && st->s[st->order[i + 1]].addr < a + sz)) {
        st->inconsistencies++; /* mapped twice, or into the next segment */
        return 0;
    }
    if (left >= 0 && (st->s[left].addr + st->s[left].size != a || !joinable(st, left, stream)))
        left = NONE;
    int32_t right = i + 1 < st->norder && st->s[st->order[i + 1]].addr == a + sz ? st->order[i + 1] : NONE;
    if (!joinable(st, right, stream)) right = NONE;
    if (left < 0 && right < 0) return new_segment(st, a, sz, stream, 1);
    if (left < 0) { /* the range grows downwards: it starts at a now */
        st->s[right].addr = a;
        left = right;
        right = NONE;
    }
    st->s[left].size += sz;
    int32_t x = put_block(st, a, sz, FREE, 0, -1, BEFORE_RECORDING, left, -2);
    if (x < 0) return -1;
    if (right >= 0) { /* the gap between two ranges is filled: one range */
        st->s[left].size += st->s[right].size;
        move_blocks(st, right, -1, left);
        drop_segment_at(st, seg_index(st, st->s[right].addr));
    }
    merge(st, x);
    return 0;
}

/* segment_unmap: whole pages inside a free block; the block's ends stay mapped and a
 * hole in the middle splits the segment (as _State.unmap). */
static int unmap_range(St *st, int64_t a, int64_t sz) {
    int32_t g = segment_containing(st, a);
    if (g < 0 || sz <= 0 || a > INT64_MAX - sz) {
        st->inconsistencies++;
        return 0;
    }
    int32_t x = -1;
    for (int32_t y = st->s[g].head; y >= 0 && st->b[y].addr <= a; y = st->b[y].next) x = y;
    int64_t end = a + sz;
    if (x < 0 || st->b[x].state != FREE || st->b[x].addr + st->b[x].size < end) {
        st->inconsistencies++;
        return 0;
    }
    int64_t start = st->b[x].addr, tail = start + st->b[x].size - end;
    if (start < a) st->b[x].size = a - start;
    else drop_block(st, x);
    int64_t seg_end = st->s[g].addr + st->s[g].size;
    if (end < seg_end) { /* the mapped rest after the hole: a segment of its own */
        int32_t ng;
        if (st->free_s >= 0) {
            ng = st->free_s;
            st->free_s = st->s[ng].head;
        } else {
            if (grow_slots((void **)&st->s, &st->caps, sizeof(Seg), st->ns) < 0) return -1;
            ng = st->ns++;
        }
        if (grow_slots((void **)&st->order, &st->caporder, sizeof(int32_t), st->norder) < 0)
            return -1;
        Seg *o = &st->s[g], *n = &st->s[ng];
        *n = *o;
        n->addr = end;
        n->size = seg_end - end;
        n->head = n->tail = -1;
        n->nblocks = 0;
        int32_t keep = st->s[g].tail;
        while (keep >= 0 && st->b[keep].addr >= end) keep = st->b[keep].prev;
        move_blocks(st, g, keep, ng);
        int32_t gi = seg_index(st, st->s[g].addr);
        memmove(st->order + gi + 2, st->order + gi + 1, (size_t)(st->norder - gi - 1) * sizeof(int32_t));
        st->order[gi + 1] = ng;
        st->norder++;
        if (tail && put_block(st, end, tail, FREE, 0, -1, BEFORE_RECORDING, ng, -1) < 0) return -1;
    }
    if (a > st->s[g].addr) st->s[g].size = a - st->s[g].addr;
    else drop_segment_at(st, seg_index(st, st->s[g].addr));
    return 0;
}

/* ------------------------------------------------------------------ layouts */
static PyObject *layout(St *st) {
    int32_t ns = st->norder;
    int64_t nb = st->live_b;
    PyObject *cols[12] = {0};
    static const int width[12] = {8, 8, 8, 1, 4, 1, 8, 8, 8, 1, 4, 8};
    for (int c = 0; c < 12; c++) {
        cols[c] = PyBytes_FromStringAndSize(NULL, (c < 6 ? ns : nb) * width[c]);
        if (!cols[c]) {
            for (int d = 0; d < c; d++) Py_DECREF(cols[d]);
            return NULL;
        }
    }
    int64_t *sa = (int64_t *)PyBytes_AS_STRING(cols[0]), *ss = (int64_t *)PyBytes_AS_STRING(cols[1]);
    int64_t *sst = (int64_t *)PyBytes_AS_STRING(cols[2]);
    uint8_t *ssm = (uint8_t *)PyBytes_AS_STRING(cols[3]), *sex = (uint8_t *)PyBytes_AS_STRING(cols[5]);
    int32_t *sp = (int32_t *)PyBytes_AS_STRING(cols[4]);
    int64_t *ba = (int64_t *)PyBytes_AS_STRING(cols[6]), *bs = (int64_t *)PyBytes_AS_STRING(cols[7]);
    int64_t *br = (int64_t *)PyBytes_AS_STRING(cols[8]), *bal = (int64_t *)PyBytes_AS_STRING(cols[11]);
    int8_t *bst = (int8_t *)PyBytes_AS_STRING(cols[9]);
    int32_t *bsk = (int32_t *)PyBytes_AS_STRING(cols[10]);
    int64_t j = 0;
    for (int32_t i = 0; i < ns; i++) {
        const Seg *g = &st->s[st->order[i]];
        sa[i] = g->addr;
        ss[i] = g->size;
        sst[i] = g->stream;
        ssm[i] = g->small;
        sp[i] = g->pool;
        sex[i] = g->expandable;
        for (int32_t x = g->head; x >= 0 && j < nb; x = st->b[x].next, j++) {
            const Block *b = &st->b[x];
            ba[j] = b->addr;
            bs[j] = b->size;
            br[j] = b->requested;
            bst[j] = b->state;
            bsk[j] = b->stack;
            bal[j] = b->alloc;
        }
    }
    PyObject *t = PyTuple_New(12);
    if (!t) {
        for (int c = 0; c < 12; c++) Py_DECREF(cols[c]);
        return NULL;
    }
    for (int c = 0; c < 12; c++) PyTuple_SET_ITEM(t, c, cols[c]);
    return t;
}

/* ------------------------------------------------------------------ the state object */
static void st_free(St *st) {
    if (!st) return;
    free(st->b);
    free(st->s);
    free(st->order);
    i64map_free(&st->by_addr);
    free(st->known_addr);
    free(st->known_size);
    free(st->known_small);
    free(st->known_pool);
    free(st);
}

static void capsule_free(PyObject *cap) { st_free((St *)PyCapsule_GetPointer(cap, "replay_state")); }

#define NBUF_NEW 16
static const Py_ssize_t NEW_ITEM[NBUF_NEW] = {8, 8, 8, 1, 4, 1, 8, 8, 8, 1, 4, 8, 8, 8, 1, 4};
static const char *NEW_NAME[NBUF_NEW] = {"seg_addr", "seg_size", "seg_stream", "seg_small", "seg_pool",
                                         "seg_expandable", "blk_addr", "blk_size", "blk_requested",
                                         "blk_state", "blk_stack", "blk_alloc", "known_addr",
                                         "known_size", "known_small", "known_pool"};

/* new_state(layout columns x12, known_addr, known_size, known_small, known_pool, default_pool,
 *           rules (allocator_rules.native_rules: common/allocator_rules.h)) */
static PyObject *new_state(PyObject *self, PyObject *args) {
    PyObject *objs[NBUF_NEW];
    int default_pool;
    AllocRules rules;
    PyObject *o_rules;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOiO", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10],
                          &objs[11], &objs[12], &objs[13], &objs[14], &objs[15], &default_pool,
                          &o_rules))
        return NULL;
    if (rules_parse(&rules, o_rules) < 0) return NULL;
    Py_buffer v[NBUF_NEW];
    int got = 0;
    St *st = NULL;
    PyObject *result = NULL;
    for (; got < NBUF_NEW; got++)
        if (get_buf(objs[got], &v[got], NEW_ITEM[got], 0, NEW_NAME[got]) < 0) goto done;
    Py_ssize_t ns = v[0].len / 8, nb = v[6].len / 8, nk = v[12].len / 8;
    for (int c = 1; c < 6; c++)
        if (v[c].len / NEW_ITEM[c] != ns) goto ragged;
    for (int c = 7; c < 12; c++)
        if (v[c].len / NEW_ITEM[c] != nb) goto ragged;
    if (v[13].len / 8 != nk || v[14].len != nk || v[15].len / 4 != nk) goto ragged;
    if (ns > INT32_MAX / 2 || nb > INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "layout too large");
        goto done;
    }
    st = calloc(1, sizeof(St));
    if (!st) {
        PyErr_NoMemory();
        goto done;
    }
    st->free_b = st->free_s = -1;
    st->default_pool = default_pool;
    st->rules = rules;
    if (i64map_init(&st->by_addr, 4 * (nb + 64)) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    st->nknown = nk;
    st->known_addr = malloc((size_t)(nk ? nk : 1) * 8);
    st->known_size = malloc((size_t)(nk ? nk : 1) * 8);
    st->known_small = malloc((size_t)(nk ? nk : 1));
    st->known_pool = malloc((size_t)(nk ? nk : 1) * 4);
    if (!st->known_addr || !st->known_size || !st->known_small || !st->known_pool) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(st->known_addr, v[12].buf, (size_t)nk * 8);
    memcpy(st->known_size, v[13].buf, (size_t)nk * 8);
    memcpy(st->known_small, v[14].buf, (size_t)nk);
    memcpy(st->known_pool, v[15].buf, (size_t)nk * 4);
    const int64_t *sa = v[0].buf, *ss = v[1].buf, *sst = v[2].buf;
    const uint8_t *ssm = v[3].buf, *sex = v[5].buf;
    const int32_t *sp = v[4].buf;
    for (Py_ssize_t i = 0; i < ns; i++) {
        if (i && sa[i] <= sa[i - 1]) {
            PyErr_SetString(PyExc_ValueError, "segments are not sorted by address");
            goto done;
        }
        /* segments only: blocks come from the layout below, never a fresh free block */
        if (grow_slots((void **)&st->s, &st->caps, sizeof(Seg), st->ns) < 0 ||
            grow_slots((void **)&st->order, &st->caporder, sizeof(int32_t), st->norder) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        Seg *g = &st->s[st->ns];
        g->addr = sa[i];
        g->size = ss[i];
        g->stream = sst[i];
        g->small = ssm[i] != 0;
        g->pool = sp[i];
        g->expandable = sex[i] != 0;
        g->head = g->tail = -1;
        g->nblocks = 0;
        g->pos = -1;
        st->order[st->norder++] = st->ns++;
    }
    const int64_t *ba = v[6].buf, *bs = v[7].buf, *br = v[8].buf, *bal = v[11].buf;
    const int8_t *bst = v[9].buf;
    const int32_t *bsk = v[10].buf;
    Py_ssize_t si = 0;
    for (Py_ssize_t j = 0; j < nb; j++) {
        if (!ns) {
            PyErr_SetString(PyExc_ValueError, "blocks without segments");
            goto done;
        }
        /* the segment of a block: the last one starting at or before it (as searchsorted
         * right - 1 in Python; before the first segment wraps to the last, as there) */
        while (si + 1 < ns && sa[si + 1] <= ba[j]) si++;
        int32_t seg = sa[si] <= ba[j] ? (int32_t)si : (int32_t)(ns - 1);
        if (put_block(st, ba[j], bs[j], bst[j], br[j], bsk[j], bal[j], seg, -2) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    result = PyCapsule_New(st, "replay_state", capsule_free);
    if (result) st = NULL;
    goto done;
ragged:
    PyErr_SetString(PyExc_ValueError, "columns of different lengths");
done:
    release_bufs(v, got);
    st_free(st);
    return result;
}

static St *state_of(PyObject *cap) { return (St *)PyCapsule_GetPointer(cap, "replay_state"); }

/* run(state, action i8, addr i64, size i64, stack i32, stream i64, k0, keyframe_every,
 *     emit_at i64 (sorted global event indices), sizes_out i64 | None, pools_out i32 | None)
 * -> (keyframe layouts, emitted layouts); applies the events to the state. */
static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *cap, *o_act, *o_addr, *o_size, *o_stack, *o_stream, *o_emit, *o_sizes, *o_pools;
    long long k0, every;
    if (!PyArg_ParseTuple(args, "OOOOOOLLOOO", &cap, &o_act, &o_addr, &o_size, &o_stack, &o_stream,
                          &k0, &every, &o_emit, &o_sizes, &o_pools))
        return NULL;
    St *st = state_of(cap);
    if (!st) return NULL;
    Py_buffer v[8];
    int got = 0;
    PyObject *keyframes = NULL, *emitted = NULL, *result = NULL;
    PyObject *ins[6] = {o_act, o_addr, o_size, o_stack, o_stream, o_emit};
    static const Py_ssize_t item[6] = {1, 8, 8, 4, 8, 8};
    for (; got < 6; got++)
        if (get_buf(ins[got], &v[got], item[got], 0, "event column") < 0) goto done;
    Py_ssize_t n = v[0].len;
    if (v[1].len / 8 != n || v[2].len / 8 != n || v[3].len / 4 != n || v[4].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "event columns of different lengths");
        goto done;
    }
    int64_t *sizes = NULL;
    int32_t *pools = NULL;
    if (o_sizes != Py_None) {
        if (get_buf(o_sizes, &v[got], 8, 1, "sizes") < 0) goto done;
        sizes = v[got].buf;
        if (v[got++].len / 8 != n) goto short_out;
    }
    if (o_pools != Py_None) {
        if (get_buf(o_pools, &v[got], 4, 1, "pools") < 0) goto done;
        pools = v[got].buf;
        if (v[got++].len / 4 != n) goto short_out;
    }
    keyframes = PyList_New(0);
    emitted = PyList_New(0);
    if (!keyframes || !emitted) goto done;
    const int8_t *act = v[0].buf;
    const int64_t *addr = v[1].buf, *size = v[2].buf, *stream = v[4].buf, *emit = v[5].buf;
    const int32_t *stack = v[3].buf;
    Py_ssize_t nemit = v[5].len / 8, e = 0;
    while (e < nemit && emit[e] < k0) e++;
    int err = 0;
    /* The loop is plain C on the state and the columns: the GIL is let go for it and held
     * again only to make a layout (keyframes, emitted moments) and to raise.  Every exit
     * from the loop (goto done) passes through HOLD_GIL first; a helper's -1 is out of
     * memory (FAIL). */
    PyThreadState *ts = PyEval_SaveThread();
#define HOLD_GIL() do { if (ts) { PyEval_RestoreThread(ts); ts = NULL; } } while (0)
#define FAIL() do {                                                  \
        HOLD_GIL();                                                     \
        PyErr_NoMemory();                                               \
        goto done;                                                      \
    } while (0)
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t k = k0 + i, a = addr[i], sz = size[i], got_size = 0;
        int8_t ac = act[i];
        int32_t xa = -1; /* the block at a (frees: the one the event is about) */
        if (ac == 1 || ac == 2 || (pools && ac == 0)) xa = h_get(st, a);
        if (pools && (ac == 0 || ac == 1 || ac == 2 || ac == 4 || ac == 6)) {
            int32_t g = ac <= 2 ? segment_of_block(st, xa, a) : segment_containing(st, a);
            pools[i] = g >= 0 ? st->s[g].pool : -1;
        }
        switch (ac) {
        case 0: { /* alloc */
            int32_t x = block_at_or_around(st, a, pools ? xa : -2, &err);
            if (err) FAIL();
            int64_t want = rules_round_size(&st->rules, sz);
            if (x < 0) {
                st->inconsistencies++;
                got_size = want;
                break;
            }
            if (st->b[x].state != FREE) st->inconsistencies++;
            int64_t remaining = st->b[x].size - want;
            if (remaining < 0) st->inconsistencies++;
            else if (rules_should_split(&st->rules, remaining, want,
                                        st->s[st->b[x].seg].small || st->s[st->b[x].seg].expandable)) {
                if (put_block(st, a + want, remaining, FREE, 0, -1, BEFORE_RECORDING, st->b[x].seg, x) < 0)
                    FAIL();
                st->b[x].size = want;
            }
            Block *b = &st->b[x];
            b->state = ALLOCATED;
            b->requested = sz;
            b->stack = stack[i];
            b->alloc = k;
            got_size = b->size;
            break;
        }
        case 1: { /* free_requested */
            int32_t x = xa;
            if (x < 0 || st->b[x].state != ALLOCATED) {
                st->inconsistencies++;
                got_size = x >= 0 ? st->b[x].size : 0;
                break;
            }
            st->b[x].state = PENDING;
            got_size = st->b[x].size;
            break;
        }
        case 2: { /* free_completed */
            int32_t x = xa;
            if (x < 0 || st->b[x].state == FREE) {
                st->inconsistencies++;
                got_size = x >= 0 ? st->b[x].size : 0;
                break;
            }
            got_size = st->b[x].size;
            st->b[x].state = FREE;
            merge(st, x);
            break;
        }
        case 3:
            if (new_segment(st, a, sz, stream[i], 0) < 0) FAIL();
            break;
        case 4:
            remove_segment(st, a);
            break;
        case 5: /* segment_map */
            if (map_range(st, a, sz, stream[i]) < 0) FAIL();
            break;
        case 6: /* segment_unmap */
            if (unmap_range(st, a, sz) < 0) FAIL();
            break;
        default:
            break;
        }
        if (sizes) sizes[i] = got_size;
        if (pools && (ac == 3 || ac == 5)) {
            int32_t g = segment_containing(st, a);
            pools[i] = g >= 0 ? st->s[g].pool : -1;
        }
        if (every > 0 && (k + 1) % every == 0) {
            HOLD_GIL();
            PyObject *l = layout(st);
            if (!l || PyList_Append(keyframes, l) < 0) {
                Py_XDECREF(l);
                goto done;
            }
            Py_DECREF(l);
            ts = PyEval_SaveThread();
        }
        while (e < nemit && emit[e] <= k) {
            if (emit[e] == k) {
                HOLD_GIL();
                PyObject *l = layout(st);
                if (!l || PyList_Append(emitted, l) < 0) {
                    Py_XDECREF(l);
                    goto done;
                }
                Py_DECREF(l);
                ts = PyEval_SaveThread();
            }
            e++;
        }
    }
    HOLD_GIL();
    result = PyTuple_Pack(2, keyframes, emitted);
    goto done;
short_out:
    PyErr_SetString(PyExc_ValueError, "output column shorter than the events");
done:
    release_bufs(v, got);
    Py_XDECREF(keyframes);
    Py_XDECREF(emitted);
    return result;
#undef HOLD_GIL
#undef FAIL
}

static PyObject *get_layout(PyObject *self, PyObject *cap) {
    St *st = state_of(cap);
    return st ? layout(st) : NULL;
}

/* set_known(state, known_addr i64 (sorted), known_size i64, known_small u8, known_pool i32,
 *           default_pool): replace the segment facts (a live replay learns new segments). */
static PyObject *set_known(PyObject *self, PyObject *args) {
    PyObject *cap, *o[4];
    int default_pool;
    if (!PyArg_ParseTuple(args, "OOOOOi", &cap, &o[0], &o[1], &o[2], &o[3], &default_pool))
        return NULL;
    St *st = state_of(cap);
    if (!st) return NULL;
    static const Py_ssize_t item[4] = {8, 8, 1, 4};
    Py_buffer v[4];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 4; got++)
        if (get_buf(o[got], &v[got], item[got], 0, "known column") < 0) goto done;
    Py_ssize_t nk = v[0].len / 8;
    if (v[1].len / 8 != nk || v[2].len != nk || v[3].len / 4 != nk) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
        goto done;
    }
    int64_t *ka = malloc((size_t)(nk ? nk : 1) * 8), *ks = malloc((size_t)(nk ? nk : 1) * 8);
    uint8_t *ksm = malloc((size_t)(nk ? nk : 1));
    int32_t *kp = malloc((size_t)(nk ? nk : 1) * 4);
    if (!ka || !ks || !ksm || !kp) {
        free(ka);
        free(ks);
        free(ksm);
        free(kp);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(ka, v[0].buf, (size_t)nk * 8);
    memcpy(ks, v[1].buf, (size_t)nk * 8);
    memcpy(ksm, v[2].buf, (size_t)nk);
    memcpy(kp, v[3].buf, (size_t)nk * 4);
    free(st->known_addr);
    free(st->known_size);
    free(st->known_small);
    free(st->known_pool);
    st->known_addr = ka;
    st->known_size = ks;
    st->known_small = ksm;
    st->known_pool = kp;
    st->nknown = nk;
    st->default_pool = default_pool;
    result = Py_None;
    Py_INCREF(result);
done:
    release_bufs(v, got);
    return result;
}

static PyObject *get_inconsistencies(PyObject *self, PyObject *cap) {
    St *st = state_of(cap);
    return st ? PyLong_FromLongLong(st->inconsistencies) : NULL;
}

/* ------------------------------------------------------------------ whole-trace scans */
/* seed_scan(action i8, addr i64) -> (first-free event indices i64, allocated addresses i64)
 * For the seed: events whose address is first seen (among alloc / free events) by a free
 * (so the block was allocated before recording), and every address allocated in the window. */
static PyObject *seed_scan(PyObject *self, PyObject *args) {
    PyObject *o_act, *o_addr, *result = NULL, *firsts = NULL, *allocs = NULL;
    if (!PyArg_ParseTuple(args, "OO", &o_act, &o_addr)) return NULL;
    Py_buffer v[2];
    int got = 0;
    I64Map seen = {0}; /* address -> 1: allocated in the window | 2: first seen freed */
    I64Vec idx = {0};
    if (get_buf(o_act, &v[got], 1, 0, "action") < 0) goto done;
    got++;
    if (get_buf(o_addr, &v[got], 8, 0, "addr") < 0) goto done;
    got++;
    Py_ssize_t n = v[0].len;
    if (v[1].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
        goto done;
    }
    if (i64map_init(&seen, 1 << 12) < 0) goto nomem;
    const int8_t *act = v[0].buf;
    const int64_t *addr = v[1].buf;
    int oom = 0;
    Py_BEGIN_ALLOW_THREADS /* plain C on the held buffers: other threads run meanwhile */
    for (Py_ssize_t k = 0; k < n; k++) {
        int8_t a = act[k];
        if (a > 2 || a < 0) continue;
        int64_t flags;
        int known = i64map_get(&seen, addr[k], &flags);
        if (a == 0) {
            if (!known) flags = 0;
            if (!(flags & 1) && i64map_put(&seen, addr[k], flags | 1) < 0) {
                oom = 1;
                break;
            }
        } else if (!known) {
            if (i64map_put(&seen, addr[k], 2) < 0 || i64vec_push(&idx, k) < 0) {
                oom = 1;
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (oom) goto nomem;
    Py_ssize_t nalloc = 0;
    for (int64_t i = 0; i < seen.cap; i++)
        if (seen.used[i] && (seen.e[i].val & 1)) nalloc++;
    firsts = PyBytes_FromStringAndSize(idx.v ? (const char *)idx.v : "", idx.n * 8);
    allocs = PyBytes_FromStringAndSize(NULL, nalloc * 8);
    if (!firsts || !allocs) goto done;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(allocs);
    for (int64_t i = 0, j = 0; i < seen.cap; i++)
        if (seen.used[i] && (seen.e[i].val & 1)) out[j++] = seen.e[i].key;
    result = PyTuple_Pack(2, firsts, allocs);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    Py_XDECREF(firsts);
    Py_XDECREF(allocs);
    free(idx.v);
    i64map_free(&seen);
    release_bufs(v, got);
    return result;
}

/* link_lifetimes(action i8, addr i64, alloc_of i32 out, freed_at i32 out, free_requested_at i32 out)
 * Pairs every free with the latest allocation at its address (outputs pre-filled by the caller). */
static PyObject *link_lifetimes_impl(PyObject *args, int fill);
static PyObject *link_lifetimes(PyObject *self, PyObject *args) {
    return link_lifetimes_impl(args, 0);
}
/* link_lifetimes_fill: the same, writing every entry of the outputs (the caller passes
 * uninitialised memory: no 3 x n memset of fresh pages first). */
static PyObject *link_lifetimes_fill(PyObject *self, PyObject *args) {
    return link_lifetimes_impl(args, 1);
}
static PyObject *link_lifetimes_impl(PyObject *args, int fill) {
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    static const Py_ssize_t item[5] = {1, 8, 4, 4, 4};
    Py_buffer v[5];
    int got = 0;
    PyObject *result = NULL;
    I64Map live = {0}; /* address -> its latest allocation's event */
    for (; got < 5; got++)
        if (get_buf(o[got], &v[got], item[got], got >= 2, "lifetime column") < 0) goto done;
    Py_ssize_t n = v[0].len;
    if (n >= INT32_MAX || v[1].len / 8 != n || v[2].len / 4 != n || v[3].len / 4 != n ||
        v[4].len / 4 != n) {
        PyErr_SetString(PyExc_ValueError, "lifetime columns of different lengths");
        goto done;
    }
    if (i64map_init(&live, 1 << 12) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    const int8_t *act = v[0].buf;
    const int64_t *addr = v[1].buf;
    int32_t *alloc_of = v[2].buf, *freed_at = v[3].buf, *freq_at = v[4].buf;
    int oom = 0;
    /* Plain C over buffers the caller keeps alive: other Python threads (the categories'
     * phases) run meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        int8_t a = act[k];
        if (fill) {  /* defaults for k; later events only overwrite entries before them */
            alloc_of[k] = -1;
            freed_at[k] = (int32_t)n;
            freq_at[k] = (int32_t)n;
        }
        if (a == 0) {
            if (i64map_put(&live, addr[k], k) < 0) {
                oom = 1;
                break;
            }
        } else if (a == 1 || a == 2) {
            int64_t x = -1;
            i64map_get(&live, addr[k], &x);
            alloc_of[k] = (int32_t)x;
            if (x >= 0) {
                if (a == 1) freq_at[x] = (int32_t)k;
                else {
                    freed_at[x] = (int32_t)k;
                    i64map_pop(&live, addr[k], NULL);
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    release_bufs(v, got);
    i64map_free(&live);
    return result;
}

/* curves(action i8, block_size i64, size i64, starts (4 ints), out_requested, out_allocated,
 *        out_active, out_reserved (i64 or None)) -> ((peak, first event) x 4)
 * The allocator's counters after every event, in one pass (replay.curves is the reference). */
/* One event's effect on the four counters (requested, active, allocated, reserved),
 * shared by curves() and curve_blocks() so the two can never disagree.  Without a branch:
 * the actions interleave unpredictably, and a mispredicted switch per event was most of a
 * curve pass's time.  Each counter moves by its event's size or block size times -1, 0 or
 * +1 (COUNTER_SIGN, by action); unsigned, so that even a hostile trace's sums wrap (as the
 * allocator's int64 counters would) rather than overflow.  Actions outside 0..6 move
 * nothing. */
static const int8_t COUNTER_SIGN[7][4] = {
    /* requested, active, allocated, reserved */
    {1, 1, 1, 0},   /* 0 alloc */
    {0, -1, 0, 0},  /* 1 free_requested */
    {-1, 0, -1, 0}, /* 2 free_completed */
    {0, 0, 0, 1},   /* 3 segment_alloc */
    {0, 0, 0, -1},  /* 4 segment_free */
    {0, 0, 0, 1},   /* 5 segment_map */
    {0, 0, 0, -1},  /* 6 segment_unmap */
};

/* The step of counter J (a long long) for an event: SIGN is its COUNTER_SIGN row. */
#define COUNTER_STEP(c, sign, j, by_size, by_block)                                            \
    ((c) = (long long)((uint64_t)(c) + ((j) == 1 || (j) == 2 ? (by_block) : (by_size)) *       \
                                           (uint64_t)(int64_t)(sign)[j]))

/* Apply events [k, end) to the counters c0..c3, keeping each one's running maximum (best)
 * and the first event reaching it (at), with selects rather than branches; BODY(k) runs
 * after each event (stores the values where wanted).  Plain scalars, so the counters live in
 * registers: kept in arrays, every step went through memory. */
#define COUNTER_PASS(k, end, act, bs, sz, BODY)                                                \
    do {                                                                                       \
        static const int8_t none_[4] = {0, 0, 0, 0};                                           \
        for (; (k) < (end); (k)++) {                                                           \
            uint8_t a_ = (uint8_t)(act)[k];                                                    \
            const int8_t *sign_ = a_ <= 6 ? COUNTER_SIGN[a_] : none_;                         \
            uint64_t by_size_ = (uint64_t)(sz)[k], by_block_ = (uint64_t)(bs)[k];              \
            COUNTER_STEP(c0, sign_, 0, by_size_, by_block_);                                   \
            COUNTER_STEP(c1, sign_, 1, by_size_, by_block_);                                   \
            COUNTER_STEP(c2, sign_, 2, by_size_, by_block_);                                   \
            COUNTER_STEP(c3, sign_, 3, by_size_, by_block_);                                   \
            at0 = c0 > best0 ? (k) : at0; best0 = c0 > best0 ? c0 : best0;                     \
            at1 = c1 > best1 ? (k) : at1; best1 = c1 > best1 ? c1 : best1;                     \
            at2 = c2 > best2 ? (k) : at2; best2 = c2 > best2 ? c2 : best2;                     \
            at3 = c3 > best3 ? (k) : at3; best3 = c3 > best3 ? c3 : best3;                     \
            BODY;                                                                              \
        }                                                                                      \
    } while (0)

static PyObject *curves(PyObject *self, PyObject *args) {
    PyObject *o_act, *o_bs, *o_sz, *outs[4];
    long long c[4];
    if (!PyArg_ParseTuple(args, "OOO(LLLL)OOOO", &o_act, &o_bs, &o_sz, &c[0], &c[1], &c[2], &c[3],
                          &outs[0], &outs[1], &outs[2], &outs[3]))
        return NULL;
    Py_buffer v[7];
    int got = 0;
    PyObject *result = NULL;
    int64_t *out[4] = {0};
    if (get_buf(o_act, &v[got++], 1, 0, "action") < 0) { got--; goto done; }
    if (get_buf(o_bs, &v[got++], 8, 0, "block_size") < 0) { got--; goto done; }
    if (get_buf(o_sz, &v[got++], 8, 0, "size") < 0) { got--; goto done; }
    Py_ssize_t n = v[0].len;
    if (v[1].len / 8 != n || v[2].len / 8 != n) goto ragged;
    for (int j = 0; j < 4; j++) {
        if (outs[j] == Py_None) continue;
        if (get_buf(outs[j], &v[got++], 8, 1, "curve") < 0) { got--; goto done; }
        if (v[got - 1].len / 8 != n) goto ragged;
        out[j] = v[got - 1].buf;
    }
    const int8_t *act = v[0].buf;
    const int64_t *bs = v[1].buf, *sz = v[2].buf;
    long long c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    int64_t best0 = INT64_MIN, best1 = INT64_MIN, best2 = INT64_MIN, best3 = INT64_MIN;
    Py_ssize_t at0 = -1, at1 = -1, at2 = -1, at3 = -1, k = 0;
    Py_BEGIN_ALLOW_THREADS  /* plain C: other Python threads run meanwhile */
    if (!out[0] && !out[1] && !out[2] && !out[3]) {
        COUNTER_PASS(k, n, act, bs, sz, (void)0); /* the peaks alone */
    } else {
        int64_t scratch = 0, *o0 = out[0] ? out[0] : &scratch, *o1 = out[1] ? out[1] : &scratch,
                *o2 = out[2] ? out[2] : &scratch, *o3 = out[3] ? out[3] : &scratch;
        Py_ssize_t s0 = out[0] != NULL, s1 = out[1] != NULL, s2 = out[2] != NULL,
                   s3 = out[3] != NULL;
        COUNTER_PASS(k, n, act, bs, sz,
                     (o0[k * s0] = c0, o1[k * s1] = c1, o2[k * s2] = c2, o3[k * s3] = c3));
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("((LL)(LL)(LL)(LL))", (long long)best0, (long long)at0,
                           (long long)best1, (long long)at1, (long long)best2, (long long)at2,
                           (long long)best3, (long long)at3);
    goto done;
ragged:
    PyErr_SetString(PyExc_ValueError, "curve columns of different lengths");
done:
    release_bufs(v, got);
    return result;
}

/* curve_blocks(action i8, block_size i64, size i64, starts (4 ints), block,
 *              maxima x4 (i64, ceil(n / block) each), checkpoints x4 (i64, that + 1))
 * -> ((peak, first event) x 4).  The four curves summarised without storing them: the max
 * of every block of `block` events and the values before each block (and at the end). */
static PyObject *curve_blocks(PyObject *self, PyObject *args) {
    PyObject *o_act, *o_bs, *o_sz, *o_max[4], *o_chk[4];
    long long c[4], block;
    if (!PyArg_ParseTuple(args, "OOO(LLLL)LOOOOOOOO", &o_act, &o_bs, &o_sz, &c[0], &c[1], &c[2],
                          &c[3], &block, &o_max[0], &o_max[1], &o_max[2], &o_max[3], &o_chk[0],
                          &o_chk[1], &o_chk[2], &o_chk[3]))
        return NULL;
    Py_buffer v[11];
    int got = 0;
    PyObject *result = NULL;
    if (block <= 0) {
        PyErr_SetString(PyExc_ValueError, "block must be positive");
        return NULL;
    }
    if (get_buf(o_act, &v[got], 1, 0, "action") < 0) goto done;
    got++;
    if (get_buf(o_bs, &v[got], 8, 0, "block_size") < 0) goto done;
    got++;
    if (get_buf(o_sz, &v[got], 8, 0, "size") < 0) goto done;
    got++;
    Py_ssize_t n = v[0].len, nb = (n + block - 1) / block;
    if (v[1].len / 8 != n || v[2].len / 8 != n) goto ragged;
    int64_t *mx[4], *ck[4];
    for (int j = 0; j < 4; j++) {
        if (get_buf(o_max[j], &v[got], 8, 1, "maxima") < 0) goto done;
        mx[j] = v[got].buf;
        if (v[got++].len / 8 != nb) goto ragged;
    }
    for (int j = 0; j < 4; j++) {
        if (get_buf(o_chk[j], &v[got], 8, 1, "checkpoints") < 0) goto done;
        ck[j] = v[got].buf;
        if (v[got++].len / 8 != nb + 1) goto ragged;
    }
    const int8_t *act = v[0].buf;
    const int64_t *bs = v[1].buf, *sz = v[2].buf;
    long long c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    int64_t best0 = INT64_MIN, best1 = INT64_MIN, best2 = INT64_MIN, best3 = INT64_MIN;
    Py_ssize_t at0 = -1, at1 = -1, at2 = -1, at3 = -1;
    for (Py_ssize_t b = 0; b < nb; b++) {
        Py_ssize_t k = b * block, end = k + block < n ? k + block : n;
        ck[0][b] = c0, ck[1][b] = c1, ck[2][b] = c2, ck[3][b] = c3;
        int64_t m0 = INT64_MIN, m1 = INT64_MIN, m2 = INT64_MIN, m3 = INT64_MIN;
        COUNTER_PASS(k, end, act, bs, sz,
                     (m0 = c0 > m0 ? c0 : m0, m1 = c1 > m1 ? c1 : m1, m2 = c2 > m2 ? c2 : m2,
                      m3 = c3 > m3 ? c3 : m3));
        mx[0][b] = m0, mx[1][b] = m1, mx[2][b] = m2, mx[3][b] = m3;
    }
    ck[0][nb] = c0, ck[1][nb] = c1, ck[2][nb] = c2, ck[3][nb] = c3;
    result = Py_BuildValue("((LL)(LL)(LL)(LL))", (long long)best0, (long long)at0,
                           (long long)best1, (long long)at1, (long long)best2, (long long)at2,
                           (long long)best3, (long long)at3);
    goto done;
ragged:
    PyErr_SetString(PyExc_ValueError, "curve columns of the wrong length");
done:
    release_bufs(v, got);
    return result;
}

static PyMethodDef methods[] = {
    {"curve_blocks", curve_blocks, METH_VARARGS, "Block maxima and checkpoints of the four curves."},
    {"curves", curves, METH_VARARGS, "requested/allocated/active/reserved after each event, and peaks."},
    {"seed_scan", seed_scan, METH_VARARGS, "First-free events and allocated addresses (for the seed)."},
    {"link_lifetimes", link_lifetimes, METH_VARARGS, "Pair frees with allocations by address."},
    {"link_lifetimes_fill", link_lifetimes_fill, METH_VARARGS,
     "link_lifetimes writing every output entry (outputs need no pre-fill)."},
    {"new_state", new_state, METH_VARARGS, "Replay state from a layout (columns) and segment facts."},
    {"run", run, METH_VARARGS, "Apply events; returns (keyframe layouts, emitted layouts)."},
    {"layout", get_layout, METH_O, "The state's layout as a tuple of 12 bytes columns."},
    {"inconsistencies", get_inconsistencies, METH_O, "Events the state could not apply exactly."},
    {"set_known", set_known, METH_VARARGS, "Replace the segment facts of a state."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "replay_core",
                                    "The allocator replay's inner loop (see replay/state.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_replay_core(void) { return PyModule_Create(&module); }
