/* Growable arrays for every extension in _native/ (included, one copy per module), and
 * the one way their failures travel.
 *
 * grow_array: room for ``need`` items of ``item`` bytes in ``*arr`` (capacity ``*cap``,
 * doubled from 16).  0, or -1 when memory runs out (or the size would not fit a size_t):
 * then ``*arr`` and ``*cap`` are as they were, so the caller's data stays whole.
 *
 * The convention: a helper that fails returns -1 (never touching Python: the loops run
 * without the GIL), every caller passes the -1 up, and the module's entry point, holding
 * the GIL again, raises (MemoryError for a failed growth) or, in snapparse, hands the file
 * to the Python parser.  The what-if model is the one exception on the way up: its
 * helpers end a simulation through its single abort path (die), since there any failure
 * means that the Python model answers instead.
 *
 * A module that allocates otherwise (snapparse: PyMem_Raw*) defines NATIVE_REALLOC first. */
#ifndef VRAMSCOPE_NATIVE_GROWTH_H
#define VRAMSCOPE_NATIVE_GROWTH_H

#include <stdint.h>
#include <stdlib.h>

#ifndef NATIVE_REALLOC
#define NATIVE_REALLOC realloc
#endif

static int grow_array(void **arr, int64_t *cap, int64_t need, size_t item) {
    if (need <= *cap) return 0;
    int64_t c = *cap > 0 ? *cap : 16;
    while (c < need) {
        if (c > INT64_MAX / 2) return -1;
        c *= 2;
    }
    if ((uint64_t)c > SIZE_MAX / item) return -1;
    void *q = NATIVE_REALLOC(*arr, (size_t)c * item);
    if (!q) return -1;
    *arr = q;
    *cap = c;
    return 0;
}

/* A growable array of int64 (results whose count is not known ahead). */
typedef struct {
    int64_t *v;
    int64_t n, cap;
} I64Vec;

static inline int i64vec_push(I64Vec *a, int64_t x) {
    if (a->n == a->cap && grow_array((void **)&a->v, &a->cap, a->n + 1, sizeof(int64_t)) < 0)
        return -1;
    a->v[a->n++] = x;
    return 0;
}

#endif
