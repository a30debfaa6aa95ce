/* The caching allocator's size rules for every extension in _native/ (included, one copy
 * per module): viewer/model/core/allocator_rules.py in C, with its conventions.
 *
 * The numbers are not declared here: each state receives them from Python
 * (allocator_rules.native_rules: max_split_size, max_non_split_rounding, the 16
 * roundup_power2_divisions classes and NATIVE_SIZES), so the rules have one home.
 * max_split_size is unsigned; NO_LIMIT (SIZE_MAX, as the allocator's own default)
 * means unlimited.  Division class i holds sizes in [2**i MiB, 2**(i+1) MiB), the last
 * one open-ended; 0 or 1 means plain rounding to min_block. */
#ifndef VRAMSCOPE_NATIVE_ALLOCATOR_RULES_H
#define VRAMSCOPE_NATIVE_ALLOCATOR_RULES_H

#include <Python.h>
#include <stdint.h>

#define NO_LIMIT UINT64_MAX
#define ROUNDUP_INTERVALS 16

typedef struct {
    uint64_t max_split, max_non_split;
    int64_t div[ROUNDUP_INTERVALS];
    int64_t min_block, small_size, small_buffer, large_buffer, min_large_alloc, round_large;
} AllocRules;

static inline int rules_bitlen(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

/* rules_parse: ``o`` = (max_split u64, max_non_split u64, divisions (16 ints >= 0),
 * (min_block, small_size, small_buffer, large_buffer, min_large_alloc, round_large)).
 * 0, or -1 with a Python error (the GIL is held). */
static int rules_parse(AllocRules *r, PyObject *o) {
    unsigned long long max_split, max_non_split;
    long long sz[6];
    PyObject *divs;
    if (!PyArg_ParseTuple(o, "KKO(LLLLLL)", &max_split, &max_non_split, &divs, &sz[0], &sz[1],
                          &sz[2], &sz[3], &sz[4], &sz[5]))
        return -1;
    for (int i = 0; i < 6; i++)
        if (sz[i] <= 0) {
            PyErr_SetString(PyExc_ValueError, "the allocator's sizes must be positive");
            return -1;
        }
    *r = (AllocRules){.max_split = max_split, .max_non_split = max_non_split, .min_block = sz[0],
                      .small_size = sz[1], .small_buffer = sz[2], .large_buffer = sz[3],
                      .min_large_alloc = sz[4], .round_large = sz[5]};
    PyObject *seq = PySequence_Fast(divs, "divisions must be a sequence");
    if (!seq) return -1;
    int ok = PySequence_Fast_GET_SIZE(seq) == ROUNDUP_INTERVALS;
    if (!ok) PyErr_SetString(PyExc_ValueError, "16 divisions expected");
    for (int i = 0; ok && i < ROUNDUP_INTERVALS; i++) {
        long long d = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        ok = d >= 0;
        if (!ok && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "divisions out of range");
        r->div[i] = d;
    }
    Py_DECREF(seq);
    return ok ? 0 : -1;
}

/* round_size: the block size the allocator reserves for a request of ``size`` bytes. */
static inline int64_t rules_round_size(const AllocRules *r, int64_t size) {
    if (size < r->min_block) return r->min_block;
    int index = rules_bitlen((uint64_t)size) - 1 - 20;
    if (index < 0) index = 0;
    if (index > ROUNDUP_INTERVALS - 1) index = ROUNDUP_INTERVALS - 1;
    int64_t d = r->div[index];
    /* size > min_block * d, without overflow for any d (size >= min_block >= 1 here) */
    if (d > 1 && d <= (size - 1) / r->min_block) { /* roundup_power2_next_division */
        if ((size & (size - 1)) == 0) return size;
        int64_t floor_ = (int64_t)1 << (rules_bitlen((uint64_t)size) - 1);
        int64_t step = floor_ >> (rules_bitlen((uint64_t)d) - 1);
        if (step == 0) return floor_ << 1;
        int64_t base = size & ~(step - 1);
        return base == size ? size : base + step;
    }
    return r->min_block * ((size + r->min_block - 1) / r->min_block);
}

/* segment_size_for: the cudaMalloc the allocator attempts when no cached block fits. */
static inline int64_t rules_segment_size_for(const AllocRules *r, int64_t rounded) {
    if (rounded <= r->small_size) return r->small_buffer;
    if (rounded < r->min_large_alloc) return r->large_buffer;
    return r->round_large * ((rounded + r->round_large - 1) / r->round_large);
}

/* should_split: whether a free block serving a ``rounded`` request is split, leaving
 * ``remaining`` bytes free. */
static inline int rules_should_split(const AllocRules *r, int64_t remaining, int64_t rounded,
                                     int small_or_expandable) {
    if (small_or_expandable) return remaining >= r->min_block;
    return (uint64_t)rounded < r->max_split && remaining > r->small_size;
}

/* may_serve: whether the best-fit search may hand a free block of ``block`` bytes to a
 * ``rounded`` request (the sum is taken in 128 bits: max_non_split may be NO_LIMIT). */
static inline int rules_may_serve(const AllocRules *r, int64_t block, int64_t rounded) {
    if (block < rounded) return 0;
    uint64_t ms = r->max_split;
    if ((uint64_t)rounded < ms && ms <= (uint64_t)block) return 0;
    return !((uint64_t)rounded >= ms &&
             (unsigned __int128)(uint64_t)block >= (unsigned __int128)(uint64_t)rounded + r->max_non_split);
}

#endif
