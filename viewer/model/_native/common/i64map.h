/* The int64 -> int64 hash map of every extension in _native/ (included, one copy per
 * module): addresses to blocks, allocations or flags.
 *
 * Open addressing with linear probing at a load of at most one half, Fibonacci hashing
 * (the top bits of key * 2**64/phi), backward-shift deletion (no tombstones: probe chains
 * stay short however many keys come and go).  A put overwrites the value of a key already
 * there, as a dict's item assignment does.  Failures follow growth.h: -1, the map whole.
 * Iterate over the slots i < cap with used[i]. */
#ifndef VRAMSCOPE_NATIVE_I64MAP_H
#define VRAMSCOPE_NATIVE_I64MAP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t key, val;
} I64Entry;

typedef struct {
    I64Entry *e;
    uint8_t *used;
    int64_t count, cap; /* cap: a power of two */
    int bits;
} I64Map;

static void i64map_free(I64Map *m) {
    free(m->e);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* An empty map of at least ``min_cap`` slots (16 at least).  0, or -1 with *m empty. */
static int i64map_init(I64Map *m, int64_t min_cap) {
    memset(m, 0, sizeof *m);
    int bits = 4;
    while (bits < 62 && ((int64_t)1 << bits) < min_cap) bits++;
    m->bits = bits;
    m->cap = (int64_t)1 << bits;
    m->e = malloc((size_t)m->cap * sizeof(I64Entry));
    m->used = calloc((size_t)m->cap, 1);
    if (!m->e || !m->used) {
        i64map_free(m);
        return -1;
    }
    return 0;
}

static inline int64_t i64map_home(const I64Map *m, int64_t key) {
    return (int64_t)(((uint64_t)key * 0x9E3779B97F4A7C15ULL) >> (64 - m->bits));
}

/* The slot holding ``key``, or the empty slot where it would go. */
static inline int64_t i64map_slot(const I64Map *m, int64_t key) {
    int64_t mask = m->cap - 1, i = i64map_home(m, key);
    while (m->used[i] && m->e[i].key != key) i = (i + 1) & mask;
    return i;
}

static inline int i64map_has(const I64Map *m, int64_t key) {
    return m->used[i64map_slot(m, key)];
}

/* 1 and the value of ``key`` in *val, or 0 when absent. */
static inline int i64map_get(const I64Map *m, int64_t key, int64_t *val) {
    int64_t i = i64map_slot(m, key);
    if (!m->used[i]) return 0;
    *val = m->e[i].val;
    return 1;
}

static int i64map_put(I64Map *m, int64_t key, int64_t val) {
    if ((m->count + 1) * 2 > m->cap) {
        I64Map g;
        if (i64map_init(&g, m->cap * 2) < 0) return -1;
        for (int64_t i = 0; i < m->cap; i++)
            if (m->used[i]) {
                int64_t j = i64map_slot(&g, m->e[i].key);
                g.used[j] = 1;
                g.e[j] = m->e[i];
            }
        g.count = m->count;
        i64map_free(m);
        *m = g;
    }
    int64_t i = i64map_slot(m, key);
    if (!m->used[i]) {
        m->used[i] = 1;
        m->e[i].key = key;
        m->count++;
    }
    m->e[i].val = val;
    return 0;
}

/* Remove ``key``: 1 and its value in *val (when val is not NULL), or 0 when absent. */
static int i64map_pop(I64Map *m, int64_t key, int64_t *val) {
    int64_t mask = m->cap - 1, i = i64map_slot(m, key);
    if (!m->used[i]) return 0;
    if (val) *val = m->e[i].val;
    m->count--;
    for (int64_t j = i;;) {
        j = (j + 1) & mask;
        if (!m->used[j]) break;
        int64_t home = i64map_home(m, m->e[j].key);
        /* the entry at j may fill the hole at i when its home is not cyclically in (i, j] */
        if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
            m->e[i] = m->e[j];
            i = j;
        }
    }
    m->used[i] = 0;
    return 1;
}

#endif
