/* The what-if allocator model over columns: viewer/model/whatif/simulator.py in C.
 *
 * The Python model (simulator.py, blocks.py, release.py, expandable.py, run.py) is the
 * reference: every rule here is a transcription of one there, in the same order, so the
 * results equal it to the byte (tests/model/test_whatif_native.py compares them).
 *
 * Blocks live in one array of slots (reused after a merge or a release; a generation
 * counter per slot makes a stale handle inert, as a dead Block object is in Python: a
 * block only dies free, so neither its alloc nor its pending flag is set).  A pool's free
 * list is a sorted array of (stream, size, address) keys - the Python keys' order - and its
 * unmapped list of (stream, address).  Segments (cudaMalloc'd) are sorted by address.  Memory is bounded
 * by the live blocks, plus one handle (8 bytes) per request and the output curves.
 *
 * Anything the Python model would raise on (a missing key: an inconsistent trace), and
 * running out of memory, stops the run through die() (the one longjmp, back to run() or
 * new()) with ValueError; native_sim.py then runs the Python model, which raises or
 * answers as the reference does.  The allocator's rules, the hash map of build_requests
 * and the growable arrays are common/'s (allocator_rules.h, i64map.h, growth.h).
 *
 * API: new(...) -> state; run(state, start, stop) fills the curves for requests
 * [start, stop) without the GIL; result(state) -> tuple.  See native_sim.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/allocator_rules.h"
#include "common/buffers.h"
#include "common/growth.h"
#include "common/i64map.h"

#define TOTAL_MAX (1LL << 62)  /* reserved bytes past this: the Python model answers */

typedef unsigned __int128 u128;

typedef struct {
    int32_t sidx, slot;
    uint64_t size, ptr;  /* unmapped lists: size 0 */
} Ent;

typedef struct {
    Ent *e;
    int64_t n, cap;
} List;

typedef struct {
    List fr, un;  /* free mapped blocks; unmapped blocks */
    int64_t gc_calls;
    int small;
    int32_t priv;  /* private pool index, -1 ordinary */
} Pool;

typedef struct {
    int64_t ptr, size, gc_base;
    int32_t prev, next, es, pool, sidx, pend;
    uint32_t gen;
    uint8_t alloc, pending, mapped, live;
} Blk;

typedef struct {
    int64_t ptr, size;
    int32_t pool;
    int32_t head;  /* 1: the segment has blocks (Python: segments[ptr] is not None) */
} Seg;

typedef struct {
    int64_t base, page, reserve;
    int32_t sidx, pool, alive;
} Es;

typedef struct {
    int64_t ptr;
    int32_t slot;
} Pair;

typedef struct {
    /* settings */
    AllocRules r;
    int expandable, set_fraction, gc_on;
    int64_t allowed, gc_threshold, reserve_bytes, synth;
    int64_t a_alloc, a_free, a_map, a_unmap;
    /* pools: id = private index * 2 + small */
    int32_t npriv, default_p;
    Pool *pools;
    int64_t *streams;
    int32_t nstreams;
    int64_t *privs;
    /* blocks */
    Blk *b;
    int32_t nb, capb;
    int32_t *freeslots;
    int32_t nfree, capfree;
    Seg *seg;
    int64_t nseg, capseg;
    Es *es;
    int32_t nes, capes;
    int32_t *pend;
    int64_t npend, cappend;
    int32_t *freeable;
    int32_t nfreeable, capfreeable;
    int32_t *tmp;  /* snapshots of a free list (release_blocks, garbage_collect) */
    int64_t captmp;
    Pair *pairs;  /* pending blocks by address (complete_pending) */
    int64_t cappairs;
    /* hints, sorted by tag (stable) */
    int64_t *h_tag, *h_addr, *h_size;
    int8_t *h_act;
    uint8_t *h_used;
    int64_t nh;
    /* requests (borrowed buffers) */
    Py_buffer vk, vs, vst, vp, vr, vres, val;
    int nviews;
    const int8_t *kind;
    const int64_t *size, *stream, *ref;
    const int32_t *rpool;
    int64_t n;
    int64_t *out_res, *out_alloc;
    int32_t *hslot;
    uint32_t *hgen;
    int32_t *islot;
    uint32_t *igen;
    int64_t ninit;
    /* counters */
    int64_t total, allocated, n_alloc, n_free, retries, tag;
    int64_t peak_res, peak_res_at, peak_alloc, free_pk, largest_pk, reserved_before;
    I64Vec ev, oom, avoided;  /* ev: 4 per event; oom: 6 per OOM */
    jmp_buf jb;
    char err[160];
} St;

#define B(k) (s->b[(k)])

static void die(St *s, const char *msg) {
    snprintf(s->err, sizeof s->err, "%s", msg);
    longjmp(s->jb, 1);
}

/* Growth (common/growth.h) inside a simulation: out of memory ends it like any other
 * failure, through die. */
static void *grow_arr(St *s, void *p, int64_t *cap, int64_t need, size_t item) {
    if (grow_array(&p, cap, need, item) < 0) die(s, "out of memory");
    return p;
}

/* Sorted arrays of ``item``-byte entries (free lists, segments): open_gap makes room at
 * index ``j`` of ``n`` entries (growing the array, which it returns; the caller fills the
 * entry and counts it), close_gap removes entry ``j`` of ``n`` (the caller uncounts it). */
static void *open_gap(St *s, void *arr, int64_t *cap, int64_t n, int64_t j, size_t item) {
    char *a = grow_arr(s, arr, cap, n + 1, item);
    memmove(a + (size_t)(j + 1) * item, a + (size_t)j * item, (size_t)(n - j) * item);
    return a;
}

static void close_gap(void *arr, int64_t n, int64_t j, size_t item) {
    char *a = arr;
    memmove(a + (size_t)j * item, a + (size_t)(j + 1) * item, (size_t)(n - j - 1) * item);
}

static void vec_push(St *s, I64Vec *v, int64_t x) {
    if (i64vec_push(v, x) < 0) die(s, "out of memory");
}

/* -- sorted lists ------------------------------------------------------------------- */
static inline int ent_less(const Ent *e, int32_t sidx, uint64_t size, uint64_t ptr) {
    /* Bitwise, not short-circuit: no branch to mispredict inside the search below. */
    return (e->sidx < sidx) |
           ((e->sidx == sidx) & ((e->size < size) | ((e->size == size) & (e->ptr < ptr))));
}

/* First of the ``n`` entries at ``e`` that is >= (sidx, size, ptr).  Branch-free halving
 * (the step is a conditional move): the free lists are searched several times per request
 * and their keys come in no order a branch predictor could learn. */
static int64_t bisect_n(const Ent *e, int64_t n, int32_t sidx, uint64_t size, uint64_t ptr) {
    if (n == 0) return 0;
    const Ent *base = e;
    while (n > 1) {
        int64_t half = n >> 1;
        base = ent_less(&base[half], sidx, size, ptr) ? base + half : base;
        n -= half;
    }
    return (base - e) + ent_less(base, sidx, size, ptr);
}

/* First entry >= (sidx, size, ptr). */
static int64_t lbisect(const List *l, int32_t sidx, uint64_t size, uint64_t ptr) {
    return bisect_n(l->e, l->n, sidx, size, ptr);
}

static inline int ent_is(const Ent *e, int32_t sidx, uint64_t size, uint64_t ptr) {
    return e->sidx == sidx && e->size == size && e->ptr == ptr;
}

static void list_insert(St *s, List *l, int32_t sidx, uint64_t size, uint64_t ptr, int32_t slot) {
    int64_t j = lbisect(l, sidx, size, ptr);
    if (j < l->n && ent_is(&l->e[j], sidx, size, ptr)) die(s, "two free blocks share a key");
    l->e = open_gap(s, l->e, &l->cap, l->n, j, sizeof(Ent));
    l->e[j].sidx = sidx;
    l->e[j].size = size;
    l->e[j].ptr = ptr;
    l->e[j].slot = slot;
    l->n++;
}

static void list_remove(St *s, List *l, int32_t sidx, uint64_t size, uint64_t ptr) {
    int64_t j = lbisect(l, sidx, size, ptr);
    if (j == l->n || !ent_is(&l->e[j], sidx, size, ptr)) die(s, "a block is not in its list");
    close_gap(l->e, l->n, j, sizeof(Ent));
    l->n--;
}

/* Entry ``j`` given the smaller key (sidx, size, ptr): moved down to its place, as a
 * removal and an insertion would leave the list, with one short move of the entries in
 * between instead of two of the whole tail. */
static void list_rekey_down(St *s, List *l, int64_t j, int32_t sidx, uint64_t size, uint64_t ptr) {
    /* Entries before j are below the old key, those after it above: the place is among
     * the first j, and only there can the key be taken already. */
    int64_t to = bisect_n(l->e, j, sidx, size, ptr);
    if (to < j && ent_is(&l->e[to], sidx, size, ptr)) die(s, "two free blocks share a key");
    int32_t slot = l->e[j].slot;
    memmove(&l->e[to + 1], &l->e[to], (size_t)(j - to) * sizeof(Ent));
    l->e[to].sidx = sidx;
    l->e[to].size = size;
    l->e[to].ptr = ptr;
    l->e[to].slot = slot;
}

static uint64_t size_key(St *s, int64_t size) {
    if (size < 0) die(s, "a negative block size");
    return (uint64_t)size;
}

static uint64_t addr_key(St *s, int64_t ptr) {
    if (ptr < 0) die(s, "a negative address");
    return (uint64_t)ptr;
}

static void pool_insert(St *s, int32_t pool, int32_t k) {
    Pool *P = &s->pools[pool];
    B(k).gc_base = P->gc_calls;
    list_insert(s, &P->fr, B(k).sidx, size_key(s, B(k).size), addr_key(s, B(k).ptr), k);
}

static void pool_remove(St *s, int32_t pool, int32_t k) {
    list_remove(s, &s->pools[pool].fr, B(k).sidx, size_key(s, B(k).size), addr_key(s, B(k).ptr));
}

static void pool_uinsert(St *s, int32_t pool, int32_t k) {
    list_insert(s, &s->pools[pool].un, B(k).sidx, 0, addr_key(s, B(k).ptr), k);
}

static void pool_uremove(St *s, int32_t pool, int32_t k) {
    list_remove(s, &s->pools[pool].un, B(k).sidx, 0, addr_key(s, B(k).ptr));
}

static inline int32_t ent_sidx(const Ent *e) { return e->sidx; }

/* -- blocks ------------------------------------------------------------------------- */
static int32_t blk_new(St *s, int64_t ptr, int64_t size, int32_t sidx, int32_t pool, int32_t es,
                       int mapped) {
    int32_t k;
    if (s->nfree) {
        k = s->freeslots[--s->nfree];
    } else {
        if (s->nb == INT32_MAX) die(s, "too many blocks");
        int64_t cap = s->capb;
        s->b = grow_arr(s, s->b, &cap, (int64_t)s->nb + 1, sizeof(Blk));
        s->capb = (int32_t)(cap > INT32_MAX ? INT32_MAX : cap);
        k = s->nb++;
        s->b[k].gen = 0;
    }
    Blk *x = &s->b[k];
    x->ptr = ptr;
    x->size = size;
    x->gc_base = 0;
    x->prev = x->next = -1;
    x->es = es;
    x->pool = pool;
    x->sidx = sidx;
    x->pend = -1;
    x->alloc = x->pending = 0;
    x->mapped = (uint8_t)mapped;
    x->live = 1;
    return k;
}

static void blk_kill(St *s, int32_t k) {
    B(k).live = 0;
    B(k).gen++;
    int64_t cap = s->capfree;
    s->freeslots = grow_arr(s, s->freeslots, &cap, (int64_t)s->nfree + 1, sizeof(int32_t));
    s->capfree = (int32_t)cap;
    s->freeslots[s->nfree++] = k;
}

static void event(St *s, int64_t act, int64_t ptr, int64_t size) {
    vec_push(s, &s->ev, s->tag);
    vec_push(s, &s->ev, act);
    vec_push(s, &s->ev, ptr);
    vec_push(s, &s->ev, size);
}

/* -- segments (sorted by address, never overlapping) ------------------------------------ */
static int64_t seg_bisect(St *s, int64_t ptr) {  /* first segment with address >= ptr */
    int64_t a = 0, z = s->nseg;
    while (a < z) {
        int64_t m = (a + z) >> 1;
        if (s->seg[m].ptr < ptr) a = m + 1;
        else z = m;
    }
    return a;
}

static void seg_insert(St *s, int64_t ptr, int64_t size, int32_t pool, int head) {
    int64_t j = seg_bisect(s, ptr);
    if ((j < s->nseg && s->seg[j].ptr < ptr + size) || (j < s->nseg && s->seg[j].ptr == ptr) ||
        (j > 0 && s->seg[j - 1].ptr + s->seg[j - 1].size > ptr))
        die(s, "segments overlap");
    s->seg = open_gap(s, s->seg, &s->capseg, s->nseg, j, sizeof(Seg));
    s->seg[j].ptr = ptr;
    s->seg[j].size = size;
    s->seg[j].pool = pool;
    s->seg[j].head = head;
    s->nseg++;
}

static Seg *seg_find(St *s, int64_t ptr) {
    int64_t j = seg_bisect(s, ptr);
    return j < s->nseg && s->seg[j].ptr == ptr ? &s->seg[j] : NULL;
}

static void seg_pop(St *s, int64_t ptr) {
    int64_t j = seg_bisect(s, ptr);
    if (j < s->nseg && s->seg[j].ptr == ptr) {
        close_gap(s->seg, s->nseg, j, sizeof(Seg));
        s->nseg--;
    }
}

static int overlaps(St *s, int64_t ptr, int64_t size) {
    int64_t end = ptr + size;
    int64_t j = seg_bisect(s, end);  /* segments before j start before end */
    if (j > 0 && ptr < s->seg[j - 1].ptr + s->seg[j - 1].size) return 1;
    for (int32_t e = 0; e < s->nes; e++) {
        Es *x = &s->es[e];
        if (x->alive && x->base < end && ptr < x->base + x->reserve) return 1;
    }
    return 0;
}

static int32_t es_new(St *s, int64_t base, int64_t page, int64_t reserve, int32_t sidx,
                      int32_t pool) {
    int64_t cap = s->capes;
    s->es = grow_arr(s, s->es, &cap, (int64_t)s->nes + 1, sizeof(Es));
    s->capes = (int32_t)cap;
    Es *x = &s->es[s->nes];
    x->base = base;
    x->page = page;
    x->reserve = reserve;
    x->sidx = sidx;
    x->pool = pool;
    x->alive = 1;
    return s->nes++;
}

/* -- arithmetic --------------------------------------------------------------------- */
static inline int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b) != 0 && ((a < 0) != (b < 0))) q--;
    return q;
}

static inline int64_t ceildiv(int64_t a, int64_t b) { return -floordiv(-a, b); }

static inline int bitlen(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

/* -- hints (recorded addresses) ----------------------------------------------------- */
static void cut_reservations(St *s, int64_t addr) {
    for (int32_t e = 0; e < s->nes; e++) {
        Es *x = &s->es[e];
        if (!x->alive || !(x->base < addr && addr < x->base + x->reserve)) continue;
        List *u = &s->pools[x->pool].un;
        int32_t tail = -1;
        for (int64_t j = 0; j < u->n; j++) {
            int32_t k = u->e[j].slot;
            if (B(k).es == e && B(k).next < 0) {
                tail = k;
                break;
            }
        }
        if (tail < 0 || B(tail).ptr > addr) continue;
        x->reserve = addr - x->base;
        if (B(tail).ptr == addr) {
            pool_uremove(s, x->pool, tail);
            if (B(tail).prev >= 0) B(B(tail).prev).next = -1;
            blk_kill(s, tail);
        } else {
            B(tail).size = addr - B(tail).ptr;
        }
    }
}

/* The first recorded segment event of the current request (the hints are sorted by tag). */
static int64_t first_hint(const St *s) {
    int64_t a = 0, z = s->nh;
    while (a < z) {
        int64_t m = (a + z) >> 1;
        if (s->h_tag[m] < s->tag) a = m + 1;
        else z = m;
    }
    return a;
}

static int64_t address(St *s, int64_t action, int64_t size) {
    for (int64_t j = first_hint(s); j < s->nh && s->h_tag[j] == s->tag; j++) {
        if (s->h_act[j] != action || s->h_used[j]) continue;
        if (action == s->a_alloc && s->h_size[j] != size) continue;
        int64_t span = action == s->a_alloc ? size : s->reserve_bytes;
        if (action == s->a_map) cut_reservations(s, s->h_addr[j]);
        if (!overlaps(s, s->h_addr[j], span)) {
            s->h_used[j] = 1;
            return s->h_addr[j];
        }
    }
    int64_t ptr = s->synth;
    int64_t lp = s->r.large_buffer;
    s->synth += ceildiv(size, lp) * lp + lp;
    return ptr;
}

/* -- free, merge -------------------------------------------------------------------- */
static void merge(St *s, int32_t dst, int32_t src) {
    if (src < 0) return;
    if (B(src).alloc || B(src).pending || B(dst).mapped != B(src).mapped) return;
    if (B(src).mapped) pool_remove(s, B(src).pool, src);
    else pool_uremove(s, B(src).pool, src);
    if (B(dst).prev == src) {
        B(dst).ptr = B(src).ptr;
        B(dst).prev = B(src).prev;
        if (B(dst).prev >= 0) B(B(dst).prev).next = dst;
    } else {
        B(dst).next = B(src).next;
        if (B(dst).next >= 0) B(B(dst).next).prev = dst;
    }
    B(dst).size += B(src).size;
    blk_kill(s, src);
}

static void free_block(St *s, int32_t k) {
    merge(s, k, B(k).prev);
    merge(s, k, B(k).next);
    pool_insert(s, B(k).pool, k);
}

static void pend_add(St *s, int32_t k) {
    if (B(k).pend >= 0) return;
    s->pend = grow_arr(s, s->pend, &s->cappend, s->npend + 1, sizeof(int32_t));
    B(k).pend = (int32_t)s->npend;
    s->pend[s->npend++] = k;
}

static void pend_discard(St *s, int32_t k) {
    int32_t at = B(k).pend;
    if (at < 0) return;
    int32_t last = s->pend[--s->npend];
    s->pend[at] = last;
    B(last).pend = at;
    B(k).pend = -1;
}

/* -- release (release.py) ----------------------------------------------------------- */
static void release_block(St *s, int32_t k) {
    s->n_free++;
    event(s, s->a_free, B(k).ptr, B(k).size);
    s->total -= B(k).size;
    pool_remove(s, B(k).pool, k);
    seg_pop(s, B(k).ptr);
    blk_kill(s, k);
}

static inline int whole(St *s, int32_t k) {
    return B(k).prev < 0 && B(k).next < 0 && B(k).es < 0;
}

static int release_available(St *s, int32_t pool, int64_t size, int32_t sidx) {
    if (s->r.max_split == NO_LIMIT) return 0;
    uint64_t want = (uint64_t)size > s->r.max_split ? (uint64_t)size : s->r.max_split;
    List *l = &s->pools[pool].fr;
    int64_t j = lbisect(l, sidx, want, 0);
    if (j == l->n || ent_sidx(&l->e[j]) != sidx) {
        if (j == 0) return 0;
        u128 released = 0;
        j--;
        while (released < want) {
            int32_t k = l->e[j].slot;
            if ((uint64_t)B(k).size < s->r.max_split || B(k).sidx != sidx || !whole(s, k)) break;
            released += (uint64_t)B(k).size;
            if (j != 0) {
                j--;
                release_block(s, k);
            } else {
                release_block(s, k);
                break;
            }
        }
        return released >= want;
    }
    int32_t k = l->e[j].slot;
    if (!whole(s, k)) return 0;
    release_block(s, k);
    return 1;
}

static int cmp_pair(const void *pa, const void *pb) {
    const Pair *a = pa, *b = pb;
    if (a->ptr != b->ptr) return a->ptr < b->ptr ? -1 : 1;
    return a->slot < b->slot ? -1 : a->slot > b->slot;
}

/* complete_pending: every pending free completes, by address (synchronize_and_free_events). */
static void complete_pending(St *s) {
    if (!s->npend) return;
    int64_t n = s->npend;
    s->pairs = grow_arr(s, s->pairs, &s->cappairs, n, sizeof(Pair));
    for (int64_t i = 0; i < n; i++) {
        s->pairs[i].ptr = B(s->pend[i]).ptr;
        s->pairs[i].slot = s->pend[i];
        B(s->pend[i]).pend = -1;
    }
    qsort(s->pairs, (size_t)n, sizeof(Pair), cmp_pair);
    s->npend = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t k = s->pairs[i].slot;
        B(k).pending = 0;
        free_block(s, k);
    }
}

static void unmap_block(St *s, int32_t k);

static void release_blocks(St *s, int32_t pool) {
    List *l = &s->pools[pool].fr;
    int64_t n = l->n;
    if (!n) return;
    s->tmp = grow_arr(s, s->tmp, &s->captmp, 2 * n, sizeof(int32_t));
    int32_t *snap = s->tmp, *to_unmap = s->tmp + n;
    int64_t nu = 0;
    for (int64_t j = 0; j < n; j++) snap[j] = l->e[j].slot;
    for (int64_t j = 0; j < n; j++) {
        int32_t k = snap[j];
        if (B(k).es >= 0) to_unmap[nu++] = k;
        else if (B(k).prev < 0 && B(k).next < 0) release_block(s, k);
    }
    for (int64_t j = 0; j < nu; j++) {
        int32_t k = to_unmap[j];
        if (!B(k).live) die(s, "a block to unmap is gone");
        unmap_block(s, k);
        if (B(k).prev < 0 && B(k).next < 0 && !B(k).mapped) {
            pool_uremove(s, pool, k);
            s->es[B(k).es].alive = 0;
            blk_kill(s, k);
        }
    }
}

static void release_cached(St *s) {
    complete_pending(s);
    if (s->default_p >= 0) {
        release_blocks(s, s->default_p * 2 + 0);
        release_blocks(s, s->default_p * 2 + 1);
    }
    for (int32_t i = 0; i < s->nfreeable; i++) {
        release_blocks(s, s->freeable[i] * 2 + 1);
        release_blocks(s, s->freeable[i] * 2 + 0);
    }
}

static void empty_cache(St *s) {
    for (int64_t j = first_hint(s); j < s->nh && s->h_tag[j] == s->tag; j++) {
        if (s->h_act[j] != s->a_free) continue;
        Seg *g = seg_find(s, s->h_addr[j]);
        if (!g || !g->head) continue;
        int32_t p = g->pool / 2;
        if (s->privs[p] < 0) continue;
        int found = 0;
        for (int32_t i = 0; i < s->nfreeable; i++) found |= s->freeable[i] == p;
        if (found) continue;
        int64_t cap = s->capfreeable;
        s->freeable = grow_arr(s, s->freeable, &cap, (int64_t)s->nfreeable + 1, sizeof(int32_t));
        s->capfreeable = (int32_t)cap;
        s->freeable[s->nfreeable++] = p;
    }
    release_cached(s);
}

static void garbage_collect(St *s) {
    int64_t threshold = s->gc_threshold;
    if (s->total <= threshold) return;
    int64_t target = s->total - threshold;
    if (s->default_p < 0) return;
    int32_t pool = s->default_p * 2;
    List *l = &s->pools[pool].fr;
    int64_t calls = s->pools[pool].gc_calls;
    int64_t total_age = 0, count = 0;
    for (int64_t j = 0; j < l->n; j++) {
        int32_t k = l->e[j].slot;
        if (B(k).prev < 0 && B(k).next < 0) {
            total_age += calls - B(k).gc_base;
            count++;
        }
    }
    if (count == 0) return;
    int64_t reclaimed = 0;
    int freed = 1;
    while (reclaimed < target && freed && count > 0) {
        double threshold_age = (double)total_age / (double)count;
        freed = 0;
        int64_t n = l->n;
        s->tmp = grow_arr(s, s->tmp, &s->captmp, n, sizeof(int32_t));
        int32_t *snap = s->tmp;
        for (int64_t j = 0; j < n; j++) snap[j] = l->e[j].slot;
        for (int64_t j = 0; j < n; j++) {
            int32_t c = snap[j];
            if (!B(c).live || B(c).prev >= 0 || B(c).next >= 0 || B(c).es >= 0) continue;
            int64_t age = calls - B(c).gc_base;
            if ((double)age >= threshold_age) {
                freed = 1;
                reclaimed += B(c).size;
                total_age -= age;
                count--;
                release_block(s, c);
            }
        }
    }
}

/* -- expandable segments (expandable.py) ---------------------------------------------- */
static void map_block(St *s, int32_t k, int64_t size) {
    if (k < 0 || B(k).es < 0) die(s, "no block to map");
    Es *x = &s->es[B(k).es];
    int64_t base = x->base, page = x->page;
    int64_t begin = floordiv(B(k).ptr - base, page);
    int64_t end = ceildiv(B(k).ptr + size - base, page);
    int64_t mapped = (end - begin) * page;
    int32_t pool = B(k).pool;
    pool_uremove(s, pool, k);
    B(k).mapped = 1;
    int64_t ptr = B(k).ptr;
    if (mapped < B(k).size) {
        int32_t rest = blk_new(s, B(k).ptr + mapped, B(k).size - mapped, B(k).sidx, pool, B(k).es,
                               0);
        B(rest).prev = k;
        B(rest).next = B(k).next;
        if (B(k).next >= 0) B(B(k).next).prev = rest;
        B(k).next = rest;
        pool_uinsert(s, pool, rest);
        B(k).size = mapped;
    }
    merge(s, k, B(k).prev);
    merge(s, k, B(k).next);
    pool_insert(s, pool, k);
    s->total += mapped;
    if (s->total > TOTAL_MAX || mapped > TOTAL_MAX) die(s, "reserved bytes out of range");
    s->n_alloc++;
    event(s, s->a_map, ptr, mapped);
}

static void unmap_block(St *s, int32_t k) {
    Es *x = &s->es[B(k).es];
    int64_t base = x->base, page = x->page;
    int64_t begin = ceildiv(B(k).ptr - base, page);
    int64_t end = floordiv(B(k).ptr + B(k).size - base, page);
    if (begin >= end) return;
    int32_t pool = B(k).pool, es = B(k).es;
    pool_remove(s, pool, k);
    int64_t uptr = base + begin * page, usize = (end - begin) * page;
    int64_t before = uptr - B(k).ptr;
    if (before > 0) {
        int32_t bf = blk_new(s, B(k).ptr, before, B(k).sidx, pool, es, 1);
        B(bf).prev = B(k).prev;
        B(bf).next = k;
        if (B(k).prev >= 0) B(B(k).prev).next = bf;
        B(k).prev = bf;
        pool_insert(s, pool, bf);
    }
    int64_t after = B(k).size - before - usize;
    if (after > 0) {
        int32_t af = blk_new(s, uptr + usize, after, B(k).sidx, pool, es, 1);
        B(af).prev = k;
        B(af).next = B(k).next;
        if (B(k).next >= 0) B(B(k).next).prev = af;
        B(k).next = af;
        pool_insert(s, pool, af);
    }
    B(k).ptr = uptr;
    B(k).size = usize;
    B(k).mapped = 0;
    merge(s, k, B(k).prev);
    merge(s, k, B(k).next);
    pool_uinsert(s, pool, k);
    s->total -= usize;
    s->n_free++;
    event(s, s->a_unmap, uptr, usize);
}

static inline int free_here(St *s, int32_t k) {
    return k >= 0 && !B(k).alloc && !B(k).pending;
}

static int32_t find_expandable(St *s, int32_t pool, int32_t sidx, int64_t size) {
    List *u = &s->pools[pool].un;
    for (int64_t j = lbisect(u, sidx, 0, 0); j < u->n && u->e[j].sidx == sidx; j++) {
        int32_t c = u->e[j].slot;
        if (free_here(s, B(c).prev)) c = B(c).prev;
        int64_t got = 0;
        int32_t x = c;
        while (got < size && free_here(s, x)) {
            got += B(x).size;
            x = B(x).next;
        }
        if (got >= size) return c;
    }
    int64_t page = s->pools[pool].small ? s->r.small_buffer : s->r.large_buffer;
    int64_t reserve = ceildiv(s->reserve_bytes, page) * page;
    int64_t base = address(s, s->a_map, reserve);
    int32_t e = es_new(s, base, page, reserve, sidx, pool);
    int32_t c = blk_new(s, base, reserve, sidx, pool, e, 0);
    pool_uinsert(s, pool, c);
    return c;
}

static int32_t allocate_expandable(St *s, int32_t pool, int32_t sidx, int64_t size) {
    int32_t c = find_expandable(s, pool, sidx, size);
    if (!B(c).mapped) map_block(s, c, B(c).size < size ? B(c).size : size);
    while (B(c).size < size) {
        int32_t nc = B(c).next;
        if (nc < 0) die(s, "no block after an expandable block");
        int64_t want = size - B(c).size;
        map_block(s, nc, want < B(nc).size ? want : B(nc).size);
        c = nc;
    }
    pool_remove(s, pool, c);
    return c;
}

/* -- malloc (simulator.py) ------------------------------------------------------------- */
static int64_t grow_size(St *s, int32_t x) {
    int32_t nx = B(x).next;
    return B(x).size + (nx >= 0 && !B(nx).mapped ? B(nx).size : 0);
}

/* The cached block best fit takes, left in its free list at index ``*at`` (alloc_found
 * takes it out), or -1. */
static int32_t get_free_block(St *s, int32_t pool, int64_t size, int32_t sidx, int64_t *at) {
    Pool *P = &s->pools[pool];
    if (s->gc_on) P->gc_calls++;
    List *l = &P->fr;
    int64_t j = lbisect(l, sidx, (uint64_t)size, 0);
    int64_t n = l->n;
    if (j == n || ent_sidx(&l->e[j]) != sidx) return -1;
    int32_t k = l->e[j].slot;
    int64_t kj = j;
    if (B(k).es >= 0) {
        if (s->expandable) {
            j++;
            while (B(k).es >= 0 && j < n && ent_sidx(&l->e[j]) == sidx) {
                int32_t c = l->e[j].slot;
                if (grow_size(s, c) >= grow_size(s, k)) break;
                k = c;
                kj = j;
                j++;
            }
        } else {
            while (B(k).es >= 0) {
                j++;
                if (j == n || ent_sidx(&l->e[j]) != sidx) return -1;
                k = l->e[j].slot;
                kj = j;
            }
        }
    }
    if (!rules_may_serve(&s->r, B(k).size, size)) return -1;
    *at = kj;
    return k;
}

static int32_t alloc_block(St *s, int32_t pool, int64_t size, int64_t alloc_size, int32_t sidx,
                           int retry) {
    if (retry) s->retries++;
    if (s->set_fraction && s->total + alloc_size > s->allowed) return -1;
    if (s->expandable) return allocate_expandable(s, pool, sidx, size);
    int64_t ptr = address(s, s->a_alloc, alloc_size);
    int32_t k = blk_new(s, ptr, alloc_size, sidx, pool, -1, 1);
    seg_insert(s, ptr, alloc_size, pool, 1);
    s->total += alloc_size;
    if (s->total > TOTAL_MAX || alloc_size > TOTAL_MAX) die(s, "reserved bytes out of range");
    s->n_alloc++;
    event(s, s->a_alloc, ptr, alloc_size);
    return k;
}

/* Block ``k`` serves the request: split when the rules say so.  ``at``: its index in the
 * pool's free list when it is still there (get_free_block), else -1. */
static int32_t alloc_found(St *s, int32_t pool, int32_t k, int64_t size, int32_t sidx,
                           int64_t at) {
    int64_t remaining = B(k).size - size;
    if (rules_should_split(&s->r, remaining, size, s->pools[pool].small || s->expandable)) {
        int32_t nb = blk_new(s, B(k).ptr, size, sidx, pool, B(k).es, 1);
        B(nb).prev = B(k).prev;
        if (B(nb).prev >= 0) B(B(nb).prev).next = nb;
        B(nb).next = k;
        B(k).prev = nb;
        B(k).ptr += size;
        B(k).size -= size;
        if (at >= 0) {  /* the remainder's key is smaller: pool_remove + pool_insert, at once */
            Pool *P = &s->pools[pool];
            B(k).gc_base = P->gc_calls;
            list_rekey_down(s, &P->fr, at, B(k).sidx, size_key(s, B(k).size),
                            addr_key(s, B(k).ptr));
        } else {
            pool_insert(s, pool, k);
        }
        k = nb;
    } else if (at >= 0) {
        List *l = &s->pools[pool].fr;
        close_gap(l->e, l->n, at, sizeof(Ent));
        l->n--;
    }
    B(k).alloc = 1;
    s->allocated += B(k).size;
    return k;
}

static int32_t sim_malloc(St *s, int64_t req, int32_t sidx, int32_t p) {
    int64_t size = rules_round_size(&s->r, req);
    int32_t pool = p * 2 + (size <= s->r.small_size);
    int64_t alloc_size = rules_segment_size_for(&s->r, size);
    int64_t at = -1;
    int32_t k = get_free_block(s, pool, size, sidx, &at);
    if (k < 0) {
        if (s->gc_on) garbage_collect(s);
        k = alloc_block(s, pool, size, alloc_size, sidx, 0);
        if (k < 0 && release_available(s, pool, size, sidx))
            k = alloc_block(s, pool, size, alloc_size, sidx, 0);
        if (k < 0 && s->privs[p] < 0) {
            release_cached(s);
            k = alloc_block(s, pool, size, alloc_size, sidx, 1);
        }
        if (k < 0) return -1;
        at = -1;
    }
    return alloc_found(s, pool, k, size, sidx, at);
}

/* -- inspection ---------------------------------------------------------------------- */
static void free_stats(St *s, int64_t *total, int64_t *largest) {
    int64_t t = 0, m = 0;
    for (int32_t p = 0; p < s->npriv * 2; p++) {
        List *l = &s->pools[p].fr;
        for (int64_t j = 0; j < l->n; j++) {
            int64_t sz = (int64_t)l->e[j].size;
            t += sz;
            if (sz > m) m = sz;
        }
    }
    *total = t;
    *largest = m;
}

static void free_for(St *s, int32_t pool, int32_t sidx, int64_t *total, int64_t *largest) {
    List *l = &s->pools[pool].fr;
    int64_t t = 0, m = 0;
    for (int64_t j = lbisect(l, sidx, 0, 0); j < l->n && ent_sidx(&l->e[j]) == sidx; j++) {
        int64_t sz = (int64_t)l->e[j].size;
        t += sz;
        if (sz > m) m = sz;
    }
    *total = t;
    *largest = m;
}

static int32_t index_of(const int64_t *table, int32_t n, int64_t v) {
    int32_t a = 0, z = n;
    while (a < z) {
        int32_t m = (a + z) >> 1;
        if (table[m] < v) a = m + 1;
        else z = m;
    }
    return a;
}

static void record_oom(St *s, int64_t i, int recorded, int32_t sidx, int32_t p) {
    int64_t size = rules_round_size(&s->r, s->size[i]);
    int64_t fr, lg;
    free_for(s, p * 2 + (size <= s->r.small_size), sidx, &fr, &lg);
    vec_push(s, &s->oom, i);
    vec_push(s, &s->oom, fr);
    vec_push(s, &s->oom, lg);
    vec_push(s, &s->oom, s->total);
    vec_push(s, &s->oom, s->allocated);
    vec_push(s, &s->oom, recorded);
}

/* The block a free refers to: -1 when none (a failed or unknown allocation, or a block
 * that has since died: inert, as its Python object would be). */
static int32_t resolve(St *s, int64_t r) {
    int32_t slot;
    uint32_t gen;
    if (r >= 0) {
        if (r >= s->n) die(s, "a free refers past the last request");
        slot = s->hslot[r];
        gen = s->hgen[r];
    } else {
        int64_t j = -r - 2;
        if (j < 0) j += s->ninit;  /* Python's negative index */
        if (j < 0 || j >= s->ninit) die(s, "a free refers to no block of the layout");
        slot = s->islot[j];
        gen = s->igen[j];
    }
    if (slot < 0 || B(slot).gen != gen) return -1;
    return slot;
}

static void run_range(St *s, int64_t start, int64_t stop) {
    for (int64_t i = start; i < stop; i++) {
        int k8 = s->kind[i];
        s->tag = i;
        if (k8 == 0) {  /* ALLOC */
            int32_t sidx = index_of(s->streams, s->nstreams, s->stream[i]);
            int32_t p = index_of(s->privs, s->npriv, s->rpool[i]);
            int32_t b = sim_malloc(s, s->size[i], sidx, p);
            if (b < 0) {
                record_oom(s, i, 0, sidx, p);
            } else {
                s->hslot[i] = b;
                s->hgen[i] = B(b).gen;
                if (s->allocated > s->peak_alloc) s->peak_alloc = s->allocated;
            }
        } else if (k8 <= 3) {  /* FREE, FREE_REQ, FREE_DONE */
            int32_t b = resolve(s, s->ref[i]);
            if (b >= 0) {
                if (k8 == 1) {
                    if (B(b).alloc) {
                        B(b).alloc = 0;
                        s->allocated -= B(b).size;
                        free_block(s, b);
                    }
                } else if (k8 == 2) {
                    if (B(b).alloc) {
                        B(b).alloc = 0;
                        s->allocated -= B(b).size;
                        B(b).pending = 1;
                        pend_add(s, b);
                    }
                } else if (B(b).pending) {
                    B(b).pending = 0;
                    pend_discard(s, b);
                    free_block(s, b);
                }
            }
        } else if (k8 == 4) {  /* OOM */
            int32_t sidx = index_of(s->streams, s->nstreams, s->stream[i]);
            int32_t p = index_of(s->privs, s->npriv, s->rpool[i]);
            int32_t b = sim_malloc(s, s->size[i], sidx, p);
            if (b < 0) {
                record_oom(s, i, 1, sidx, p);
            } else {
                vec_push(s, &s->avoided, i);
                if (s->allocated > s->peak_alloc) s->peak_alloc = s->allocated;
                B(b).alloc = 0;
                s->allocated -= B(b).size;
                free_block(s, b);
            }
        } else {  /* EMPTY_CACHE */
            empty_cache(s);
        }
        s->out_res[i] = s->total;
        s->out_alloc[i] = s->allocated;
        if (s->total > s->peak_res) {
            s->peak_res = s->total;
            s->peak_res_at = i;
            free_stats(s, &s->free_pk, &s->largest_pk);
        }
    }
}

/* -- seeding (run.py _seed) ------------------------------------------------------------ */
/* Blocks of one initial segment, in row order: states 0 allocated, 1 pending, 2 free. */
static void lay_blocks(St *s, int32_t pool, int32_t sidx, int32_t es, const int64_t *rows,
                       int64_t nrows, const int64_t *bptr, const int64_t *bsize,
                       const int8_t *bstate, int32_t *first, int32_t *last) {
    int32_t prev = -1;
    *first = -1;
    for (int64_t r = 0; r < nrows; r++) {
        int64_t j = rows[r];
        int32_t k = blk_new(s, bptr[j], bsize[j], sidx, pool, es, 1);
        if (bstate[j] == 0) {
            B(k).alloc = 1;
            s->allocated += bsize[j];
        } else if (bstate[j] == 1) {
            B(k).pending = 1;
            pend_add(s, k);
        }
        if (bstate[j] == 0 || bstate[j] == 1) {
            s->islot[j] = k;
            s->igen[j] = B(k).gen;
        }
        B(k).prev = prev;
        if (prev >= 0) B(prev).next = k;
        else *first = k;
        prev = k;
    }
    *last = prev;
    for (int32_t k = *first; k >= 0; k = B(k).next)
        if (!B(k).alloc && !B(k).pending) pool_insert(s, pool, k);
}

/* -- Python interface ---------------------------------------------------------------- */
static void st_free(St *s) {
    if (!s) return;
    for (int i = 0; i < s->nviews; i++) {
        Py_buffer *v[] = {&s->vk, &s->vs, &s->vst, &s->vp, &s->vr, &s->vres, &s->val};
        PyBuffer_Release(v[i]);
    }
    if (s->pools)
        for (int32_t p = 0; p < s->npriv * 2; p++) {
            free(s->pools[p].fr.e);
            free(s->pools[p].un.e);
        }
    free(s->pools);
    free(s->streams);
    free(s->privs);
    free(s->b);
    free(s->freeslots);
    free(s->seg);
    free(s->es);
    free(s->pend);
    free(s->freeable);
    free(s->tmp);
    free(s->pairs);
    free(s->h_tag);
    free(s->h_addr);
    free(s->h_size);
    free(s->h_act);
    free(s->h_used);
    free(s->hslot);
    free(s->hgen);
    free(s->islot);
    free(s->igen);
    free(s->ev.v);
    free(s->oom.v);
    free(s->avoided.v);
    free(s);
}

static void capsule_free(PyObject *cap) { st_free((St *)PyCapsule_GetPointer(cap, "whatif_state")); }

static int copy_col(PyObject *o, Py_ssize_t item, const char *what, void **dst, Py_ssize_t *n) {
    Py_buffer v;
    if (get_buf(o, &v, item, 0, what) < 0) return -1;
    *n = v.len / item;
    *dst = malloc((size_t)(v.len ? v.len : 1));
    if (!*dst) {
        PyBuffer_Release(&v);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(*dst, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return 0;
}

/* new(settings, requests, hints, seed)
 *   settings: (rules (allocator_rules.native_rules: common/allocator_rules.h), expandable,
 *              set_fraction, gc_on, allowed, gc_threshold_bytes, reserve_bytes, synth_base,
 *              (seg_alloc, seg_free, seg_map, seg_unmap))
 *   requests: (kind i8, size i64, stream i64, pool i32, ref i64, reserved_out i64 (writable),
 *              allocated_out i64 (writable), streams i64 (sorted), privates i64 (sorted))
 *   hints: (tag i64, action i8, addr i64, size i64), sorted by tag (stable)
 *   seed: (seg_ptr i64, seg_size i64, seg_sidx i32, seg_priv i32 (index), seg_small u8,
 *          seg_exp u8, blk_ptr i64, blk_size i64, blk_state i8, rows i64 (grouped by segment),
 *          seg_start i64 (n_segments + 1)) */
static PyObject *new_state(PyObject *self, PyObject *args) {
    PyObject *settings, *reqs, *hints, *seed;
    if (!PyArg_ParseTuple(args, "OOOO", &settings, &reqs, &hints, &seed)) return NULL;
    PyObject *o_rules;
    AllocRules rules;
    int expandable, set_fraction, gc_on;
    long long allowed, gc_threshold, reserve_bytes, synth;
    long long acts[4];
    if (!PyArg_ParseTuple(settings, "OpppLLLL(LLLL)", &o_rules, &expandable, &set_fraction,
                          &gc_on, &allowed, &gc_threshold, &reserve_bytes, &synth, &acts[0],
                          &acts[1], &acts[2], &acts[3]))
        return NULL;
    if (rules_parse(&rules, o_rules) < 0) return NULL;
    St *s = calloc(1, sizeof(St));
    if (!s) return PyErr_NoMemory();
    s->r = rules;
    s->expandable = expandable;
    s->set_fraction = set_fraction;
    s->gc_on = gc_on;
    s->allowed = allowed;
    s->gc_threshold = gc_threshold;
    s->reserve_bytes = reserve_bytes;
    s->synth = synth;
    s->a_alloc = acts[0];
    s->a_free = acts[1];
    s->a_map = acts[2];
    s->a_unmap = acts[3];
    s->default_p = -1;

    /* requests */
    PyObject *o[9];
    if (!PyArg_ParseTuple(reqs, "OOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8]))
        goto fail;
    Py_buffer *views[] = {&s->vk, &s->vs, &s->vst, &s->vp, &s->vr, &s->vres, &s->val};
    static const Py_ssize_t item[] = {1, 8, 8, 4, 8, 8, 8};
    static const char *names[] = {"kind", "size", "stream", "pool", "ref", "reserved",
                                  "allocated"};
    for (int i = 0; i < 7; i++) {
        if (get_buf(o[i], views[i], item[i], i >= 5, names[i]) < 0) goto fail;
        s->nviews++;
    }
    s->n = s->vk.len;
    for (int i = 1; i < 7; i++)
        if (views[i]->len / item[i] != s->n) {
            PyErr_SetString(PyExc_ValueError, "request columns of different lengths");
            goto fail;
        }
    s->kind = s->vk.buf;
    s->size = s->vs.buf;
    s->stream = s->vst.buf;
    s->rpool = s->vp.buf;
    s->ref = s->vr.buf;
    s->out_res = s->vres.buf;
    s->out_alloc = s->val.buf;
    Py_ssize_t ns, np_;
    if (copy_col(o[7], 8, "streams", (void **)&s->streams, &ns) < 0) goto fail;
    if (copy_col(o[8], 8, "privates", (void **)&s->privs, &np_) < 0) goto fail;
    if (ns >= (1 << 15) || np_ >= (1 << 20) || np_ < 1) {
        PyErr_SetString(PyExc_ValueError, "too many streams or pools");
        goto fail;
    }
    s->nstreams = (int32_t)ns;
    s->npriv = (int32_t)np_;
    s->pools = calloc((size_t)np_ * 2, sizeof(Pool));
    if (!s->pools) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int32_t p = 0; p < s->npriv; p++) {
        if (s->privs[p] == -1) s->default_p = p;
        for (int sm = 0; sm < 2; sm++) {
            s->pools[p * 2 + sm].small = sm;
            s->pools[p * 2 + sm].priv = (int32_t)s->privs[p];
        }
    }
    s->hslot = malloc((size_t)(s->n ? s->n : 1) * sizeof(int32_t));
    s->hgen = malloc((size_t)(s->n ? s->n : 1) * sizeof(uint32_t));
    if (!s->hslot || !s->hgen) {
        PyErr_NoMemory();
        goto fail;
    }
    memset(s->hslot, 0xff, (size_t)(s->n ? s->n : 1) * sizeof(int32_t));

    /* hints */
    PyObject *h[4];
    if (!PyArg_ParseTuple(hints, "OOOO", &h[0], &h[1], &h[2], &h[3])) goto fail;
    Py_ssize_t n0, n1, n2, n3;
    if (copy_col(h[0], 8, "hint tag", (void **)&s->h_tag, &n0) < 0 ||
        copy_col(h[1], 1, "hint action", (void **)&s->h_act, &n1) < 0 ||
        copy_col(h[2], 8, "hint addr", (void **)&s->h_addr, &n2) < 0 ||
        copy_col(h[3], 8, "hint size", (void **)&s->h_size, &n3) < 0)
        goto fail;
    if (n1 != n0 || n2 != n0 || n3 != n0) {
        PyErr_SetString(PyExc_ValueError, "hint columns of different lengths");
        goto fail;
    }
    s->nh = n0;
    s->h_used = calloc((size_t)(n0 ? n0 : 1), 1);
    if (!s->h_used) {
        PyErr_NoMemory();
        goto fail;
    }

    /* seed */
    PyObject *d[11];
    if (!PyArg_ParseTuple(seed, "OOOOOOOOOOO", &d[0], &d[1], &d[2], &d[3], &d[4], &d[5], &d[6],
                          &d[7], &d[8], &d[9], &d[10]))
        goto fail;
    static const Py_ssize_t ditem[] = {8, 8, 4, 4, 1, 1, 8, 8, 1, 8, 8};
    void *col[11] = {0};
    Py_ssize_t len[11];
    int ok = 1;
    for (int i = 0; i < 11 && ok; i++)
        if (copy_col(d[i], ditem[i], "seed", &col[i], &len[i]) < 0) ok = 0;
    if (ok) {
        Py_ssize_t nseg = len[0], nblk = len[6];
        for (int i = 1; i < 6; i++) ok &= len[i] == nseg;
        ok &= len[7] == nblk && len[8] == nblk && len[9] == nblk && len[10] == nseg + 1;
        if (!ok) PyErr_SetString(PyExc_ValueError, "seed columns of different lengths");
        if (ok) {
            s->ninit = nblk;
            s->islot = malloc((size_t)(nblk ? nblk : 1) * sizeof(int32_t));
            s->igen = malloc((size_t)(nblk ? nblk : 1) * sizeof(uint32_t));
            if (!s->islot || !s->igen) {
                PyErr_NoMemory();
                ok = 0;
            } else {
                memset(s->islot, 0xff, (size_t)(nblk ? nblk : 1) * sizeof(int32_t));
            }
        }
        if (ok && setjmp(s->jb)) {
            PyErr_SetString(PyExc_ValueError, s->err);
            ok = 0;
        } else if (ok) {
            const int64_t *sp = col[0], *ss = col[1], *bp = col[6], *bs = col[7], *rows = col[9],
                          *start = col[10];
            const int32_t *ssi = col[2], *spr = col[3];
            const uint8_t *ssm = col[4], *sex = col[5];
            const int8_t *bst = col[8];
            for (Py_ssize_t g = 0; g < nseg; g++) {
                if (start[g] < 0 || start[g + 1] < start[g] || start[g + 1] > nblk ||
                    spr[g] < 0 || spr[g] >= s->npriv || ssi[g] < 0 || ssi[g] >= s->nstreams)
                    die(s, "bad seed");
                for (int64_t r = start[g]; r < start[g + 1]; r++)
                    if (rows[r] < 0 || rows[r] >= nblk) die(s, "bad seed row");
                int32_t pool = spr[g] * 2 + (ssm[g] != 0);
                int32_t first, last;
                if (sex[g]) {
                    int64_t page = ssm[g] ? s->r.small_buffer : s->r.large_buffer;
                    int32_t e = es_new(s, sp[g], page, s->reserve_bytes, ssi[g], pool);
                    lay_blocks(s, pool, ssi[g], e, rows + start[g], start[g + 1] - start[g], bp,
                               bs, bst, &first, &last);
                    s->total += ss[g];
                    int64_t cursor = sp[g] + ss[g], end = sp[g] + s->reserve_bytes;
                    if (end > cursor) {
                        int32_t t = blk_new(s, cursor, end - cursor, ssi[g], pool, e, 0);
                        B(t).prev = last;
                        if (last >= 0) B(last).next = t;
                        pool_uinsert(s, pool, t);
                    }
                } else {
                    seg_insert(s, sp[g], ss[g], pool, start[g + 1] > start[g]);
                    s->total += ss[g];
                    lay_blocks(s, pool, ssi[g], -1, rows + start[g], start[g + 1] - start[g], bp,
                               bs, bst, &first, &last);
                }
            }
        }
    }
    for (int i = 0; i < 11; i++) free(col[i]);
    if (!ok) goto fail;
    s->peak_res = s->total;
    s->peak_res_at = -1;
    s->reserved_before = s->total;
    s->peak_alloc = s->allocated;
    free_stats(s, &s->free_pk, &s->largest_pk);
    PyObject *cap = PyCapsule_New(s, "whatif_state", capsule_free);
    if (!cap) goto fail;
    return cap;
fail:
    st_free(s);
    return NULL;
}

/* run(state, start, stop): requests [start, stop), without the GIL. */
static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *cap;
    long long start, stop;
    if (!PyArg_ParseTuple(args, "OLL", &cap, &start, &stop)) return NULL;
    St *s = PyCapsule_GetPointer(cap, "whatif_state");
    if (!s) return NULL;
    if (s->err[0]) {
        PyErr_SetString(PyExc_ValueError, s->err);
        return NULL;
    }
    if (start < 0 || stop > s->n || start > stop) {
        PyErr_SetString(PyExc_ValueError, "request range out of bounds");
        return NULL;
    }
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    if (setjmp(s->jb)) failed = 1;
    else run_range(s, start, stop);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_Format(PyExc_ValueError, "%s (request %lld)", s->err, (long long)s->tag);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *bytes_of(const int64_t *v, int64_t n) {
    return PyBytes_FromStringAndSize((const char *)v, (Py_ssize_t)(n * 8));
}

/* result(state) -> (counters tuple, events bytes (4 i64 each), ooms bytes (6 i64 each),
 *                   avoided bytes, final segments bytes (4 i64 each: ptr, size, small, exp)) */
static PyObject *result(PyObject *self, PyObject *args) {
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    St *s = PyCapsule_GetPointer(cap, "whatif_state");
    if (!s) return NULL;
    if (s->err[0]) {
        PyErr_SetString(PyExc_ValueError, s->err);
        return NULL;
    }
    /* The final segments, 4 int64 each (ptr, size, small, expandable).  No setjmp here:
     * a failed growth is a MemoryError, and nothing needs to survive a longjmp. */
    I64Vec fs = {0};
    int oom = 0;
#define SEGMENT(ptr, size, small, exp)                                              \
    oom = oom || i64vec_push(&fs, ptr) < 0 || i64vec_push(&fs, size) < 0 ||       \
          i64vec_push(&fs, small) < 0 || i64vec_push(&fs, exp) < 0
    for (int64_t g = 0; g < s->nseg; g++)
        if (s->seg[g].head) SEGMENT(s->seg[g].ptr, s->seg[g].size, s->pools[s->seg[g].pool].small, 0);
    for (int32_t e = 0; e < s->nes; e++) {
        Es *x = &s->es[e];
        if (!x->alive) continue;
        List *u = &s->pools[x->pool].un;
        int32_t k = -1;
        for (int64_t j = 0; j < u->n; j++)
            if (B(u->e[j].slot).es == e) {
                k = u->e[j].slot;
                break;
            }
        if (k < 0) continue;  /* as _block_at: no unmapped block, nothing listed */
        while (B(k).prev >= 0) k = B(k).prev;
        int small = s->pools[x->pool].small;
        int64_t run_start = 0, run = 0;
        int in_run = 0;
        for (; k >= 0; k = B(k).next) {
            if (B(k).mapped) {
                if (!in_run) {
                    in_run = 1;
                    run_start = B(k).ptr;
                    run = 0;
                }
                run += B(k).size;
            } else if (in_run) {
                SEGMENT(run_start, run, small, 1);
                in_run = 0;
            }
        }
        if (in_run) SEGMENT(run_start, run, small, 1);
    }
#undef SEGMENT
    if (oom) {
        free(fs.v);
        return PyErr_NoMemory();
    }
    PyObject *out = Py_BuildValue(
        "(LLLLLLLLL)NNNN", (long long)s->peak_res, (long long)s->peak_res_at,
        (long long)s->peak_alloc, (long long)s->free_pk, (long long)s->largest_pk,
        (long long)s->n_alloc, (long long)s->n_free, (long long)s->retries,
        (long long)s->reserved_before, bytes_of(s->ev.v, s->ev.n), bytes_of(s->oom.v, s->oom.n),
        bytes_of(s->avoided.v, s->avoided.n), bytes_of(fs.v, fs.n));
    free(fs.v);
    return out;
}

/* ------------------------------------------------------------ the request stream (requests.py)
 *
 * build_requests(columns, initial_blk_addr, pool_lut, program, outputs) -> (rows, answers)
 *   columns: (action i8, addr i64, size i64, stream i64, pool i32): one device's trace
 *   initial_blk_addr i64: the blocks of the layout before the window
 *   pool_lut i32: per Snapshot.pools index, the request's pool (-1 ordinary, else the index)
 *   program i64: the release events (segment_free / unmap) that were the program's
 *                empty_cache, ascending (requests.py judges them: a few events)
 *   outputs: (kind i8, size i64, stream i64, pool i32, ref i64, event i64) of at least as
 *            many rows as events, and (seg_tag i64, seg_action i8, seg_addr i64,
 *            seg_size i64) of exactly one row per segment event; writable.
 * The loop of requests.build_requests_reference, its three dicts by address as hash maps
 * (common/i64map.h: a key's value overwritten in place, as a dict's is); without the GIL. */

enum { A_ALLOC = 0, A_FREE_REQ = 1, A_FREE_DONE = 2, A_SEG_ALLOC = 3, A_SEG_FREE = 4,
       A_SEG_MAP = 5, A_SEG_UNMAP = 6, A_OOM = 7 };
enum { R_ALLOC = 0, R_FREE = 1, R_FREE_REQ = 2, R_FREE_DONE = 3, R_OOM = 4, R_EMPTY = 5 };

static PyObject *build_requests(PyObject *self, PyObject *args) {
    PyObject *cols, *o_init, *o_lut, *o_prog, *outs, *segouts;
    if (!PyArg_ParseTuple(args, "OOOOOO", &cols, &o_init, &o_lut, &o_prog, &outs, &segouts))
        return NULL;
    PyObject *o[15];
    if (!PyArg_ParseTuple(cols, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    if (!PyArg_ParseTuple(outs, "OOOOOO", &o[8], &o[9], &o[10], &o[11], &o[12], &o[13]))
        return NULL;
    PyObject *so[4];
    if (!PyArg_ParseTuple(segouts, "OOOO", &so[0], &so[1], &so[2], &so[3])) return NULL;
    o[5] = o_init;
    o[6] = o_lut;
    o[7] = o_prog;
    static const Py_ssize_t item[] = {1, 8, 8, 8, 4, 8, 4, 8, 1, 8, 8, 4, 8, 8};
    static const char *names[] = {"action", "addr", "size", "stream", "pool", "initial",
                                  "pool_lut", "program", "kind", "size", "stream", "pool",
                                  "ref", "event"};
    static const Py_ssize_t sitem[] = {8, 1, 8, 8};
    static const char *snames[] = {"seg_tag", "seg_action", "seg_addr", "seg_size"};
    Py_buffer v[18];
    int got = 0;
    PyObject *result = NULL;
    I64Map live = {0}, pending = {0}, init = {0};
    for (int i = 0; i < 14; i++) {
        if (get_buf(o[i], &v[got], item[i], i >= 8, names[i]) < 0) goto done;
        got++;
    }
    for (int i = 0; i < 4; i++) {
        if (get_buf(so[i], &v[got], sitem[i], 1, snames[i]) < 0) goto done;
        got++;
    }
    int64_t n = v[0].len;
    for (int i = 1; i < 5; i++)
        if (v[i].len / item[i] != n) {
            PyErr_SetString(PyExc_ValueError, "event columns of different lengths");
            goto done;
        }
    for (int i = 8; i < 14; i++)
        if (v[i].len / item[i] < n) {
            PyErr_SetString(PyExc_ValueError, "request columns shorter than the events");
            goto done;
        }
    int64_t nseg_cap = v[14].len / 8;
    for (int i = 15; i < 18; i++)
        if (v[i].len / sitem[i - 14] != nseg_cap) {
            PyErr_SetString(PyExc_ValueError, "answer columns of different lengths");
            goto done;
        }
    const int8_t *act = v[0].buf;
    const int64_t *addr = v[1].buf, *size = v[2].buf, *stream = v[3].buf;
    const int32_t *evpool = v[4].buf, *lut = v[6].buf;
    const int64_t *iaddr = v[5].buf, *prog = v[7].buf;
    int64_t ninit = v[5].len / 8, nlut = v[6].len / 4, nprog = v[7].len / 8;
    int8_t *kind = v[8].buf;
    int64_t *osize = v[9].buf, *ostream = v[10].buf, *oref = v[12].buf, *oevent = v[13].buf;
    int32_t *opool = v[11].buf;
    int64_t *tag = v[14].buf, *saddr = v[16].buf, *ssize = v[17].buf;
    int8_t *sact = v[15].buf;
    if (i64map_init(&live, 1024) < 0 || i64map_init(&pending, 64) < 0
            || i64map_init(&init, 2 * ninit + 16) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    int oom = 0, bad = 0;
    int64_t rows = 0, nseg = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t j = 0; j < ninit && !oom; j++)
        oom = i64map_put(&init, iaddr[j], j) < 0;  /* the last block at an address wins */
    int64_t wait_lo = 0, nwait = 0, p = 0;
    int in_empty = 0;
    for (int64_t k = 0; k < n && !oom && !bad; k++) {
        int a8 = act[k];
        int64_t a = addr[k], r;
        switch (a8) {
        case A_ALLOC:
        case A_OOM:
            if (a8 == A_ALLOC) {
                int32_t pl = evpool[k];
                kind[rows] = R_ALLOC;
                opool[rows] = (pl < 0 || pl >= nlut) ? -1 : lut[pl];
                if (i64map_put(&live, a, rows) < 0) oom = 1;
            } else {
                kind[rows] = R_OOM;
                opool[rows] = -1;
            }
            osize[rows] = size[k];
            ostream[rows] = stream[k];
            oref[rows] = -1;
            oevent[rows] = k;
            if (nwait) {
                for (int64_t j = wait_lo; j < nseg; j++)
                    if (tag[j] == -1) tag[j] = rows;
                nwait = 0;
            }
            wait_lo = nseg;
            rows++;
            in_empty = 0;
            break;
        case A_FREE_REQ: {
            if (!i64map_pop(&live, a, &r)) {
                int64_t j;
                r = i64map_pop(&init, a, &j) ? -2 - j : -1;
            }
            if (r == -1) break;
            int immediate = k + 1 < n && act[k + 1] == A_FREE_DONE && addr[k + 1] == a;
            kind[rows] = immediate ? R_FREE : R_FREE_REQ;
            osize[rows] = size[k];
            ostream[rows] = stream[k];
            opool[rows] = -1;
            oref[rows] = r;
            oevent[rows] = k;
            rows++;
            if (!immediate && i64map_put(&pending, a, r) < 0) oom = 1;
            in_empty = 0;
            break;
        }
        case A_FREE_DONE:
            if (k > 0 && act[k - 1] == A_FREE_REQ && addr[k - 1] == a && !i64map_has(&pending, a))
                break;  /* the completion of an immediate FREE */
            if (!i64map_pop(&pending, a, &r)) {  /* pending since before the window */
                int64_t j;
                r = i64map_pop(&init, a, &j) ? -2 - j : -1;
            }
            if (r == -1) break;
            kind[rows] = R_FREE_DONE;
            osize[rows] = size[k];
            ostream[rows] = stream[k];
            opool[rows] = -1;
            oref[rows] = r;
            oevent[rows] = k;
            rows++;
            break;
        case A_SEG_ALLOC:
        case A_SEG_FREE:
        case A_SEG_MAP:
        case A_SEG_UNMAP: {
            if (nseg >= nseg_cap) {
                bad = 1;
                break;
            }
            sact[nseg] = (int8_t)a8;
            saddr[nseg] = a;
            ssize[nseg] = size[k];
            while (p < nprog && prog[p] < k) p++;
            int program = p < nprog && prog[p] == k;
            if ((a8 == A_SEG_FREE || a8 == A_SEG_UNMAP) && program) {
                if (!in_empty) {
                    kind[rows] = R_EMPTY;
                    osize[rows] = 0;
                    ostream[rows] = stream[k];
                    opool[rows] = -1;
                    oref[rows] = -1;
                    oevent[rows] = k;
                    rows++;
                    in_empty = 1;
                }
                tag[nseg] = rows - 1;
            } else {
                tag[nseg] = -1;
                nwait++;
            }
            nseg++;
            break;
        }
        default:
            break;
        }
    }
    if (nwait)  /* answers after the last allocation (an interrupted malloc): past the end */
        for (int64_t j = wait_lo; j < nseg; j++)
            if (tag[j] == -1) tag[j] = rows;
    Py_END_ALLOW_THREADS
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "more segment events than answer rows");
        goto done;
    }
    result = Py_BuildValue("(LL)", (long long)rows, (long long)nseg);
done:
    i64map_free(&live);
    i64map_free(&pending);
    i64map_free(&init);
    release_bufs(v, got);
    return result;
}

static PyMethodDef methods[] = {
    {"new", new_state, METH_VARARGS, "A what-if allocator state over request columns."},
    {"run", run, METH_VARARGS, "Answer requests [start, stop) (releases the GIL)."},
    {"result", result, METH_VARARGS, "Counters, events, OOMs, avoided OOMs, final segments."},
    {"build_requests", build_requests, METH_VARARGS,
     "One device's request stream from its trace columns (requests.py's loop)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "whatif_core",
                                    "The what-if allocator model over columns.", -1, methods};

PyMODINIT_FUNC PyInit_whatif_core(void) {
    return PyModule_Create(&module);
}
