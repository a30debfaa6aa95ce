/* Parallel trace sections of the snapshot parser (#included by ../snapparse.c).
 *
 * A device's trace list is most of a snapshot file: millions of event dicts of a
 * fixed shape.  When the whole input is in memory (a bytes object or an mmapped
 * file) and threads are allowed, the VM hands such a list to this code the moment
 * it meets its first item:
 *
 * 1. skim: one pass over the list's bytes without building anything (the GIL
 *    released) finds where the list ends, counts the memo entries and the
 *    containers it defines, checks every item is an event dict of the form
 *    ``EMPTY_DICT [memo] MARK key value ... SETITEMS`` and notes a checkpoint
 *    (byte, memo index, event index, batch depth) every CKPT_EVERY events;
 * 2. regions: the checkpoints cut the list into regions, parsed by C threads that
 *    never touch a Python object.  Each event's fields go straight into their row
 *    of the columns (reserved once, at their final size).  Memo entries defined
 *    in a region are published into the shared memo as tagged byte offsets
 *    (strings, frame dicts) or as (region, local stack) handles (frame lists); a
 *    region that refers to an entry of an earlier region not yet published waits
 *    for it (regions only ever wait for earlier ones, which never wait for later
 *    ones);
 * 3. merge (the GIL held, in file order): each region's local stacks and strings
 *    become the parser's own (frame dicts materialised from their bytes, the same
 *    hash-consing as the serial VM), their first appearances recorded in event
 *    order, and the local handles in the columns rewritten.
 *
 * The result is the serial VM's by construction: the same rows in the same order,
 * the same stack and string handles, the same first-seen order.  Whatever this
 * code does not model exactly (another opcode, a value the schema would warn
 * about, an unpublished kind of memo entry, ...) abandons the attempt before
 * anything is committed and the serial VM parses the list as before: it then
 * decides (including falling back to the Python parser).
 */
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#define CKPT_EVERY 4096
#define SEC_MIN_EVENTS 65536   /* smaller lists: the serial VM (threads cost more than they save) */

typedef struct { int64_t pos, memo, event; int depth; } Ckpt;

/* -------------------------------------------------------------------- skim */

/* Length of the argument of op at s (n: bytes left after the op), or -1: an
 * opcode the skim does not model (the serial VM decides). */
static inline int64_t op_arglen(int op, const unsigned char *s, int64_t n) {
    switch (op) {
    case 0x28: case 0x29: case 0x5D: case 0x7D: case 0x4E: case 0x88: case 0x89: case 0x94:
    case 0x65: case 0x61: case 0x75: case 0x73: case 0x74: case 0x85: case 0x86: case 0x87:
    case 0x6C: case 0x64: case 0x31: case 0x32: case 0x8F: case 0x90: case 0x91:
        return 0;
    case 0x4B: case 0x68: case 0x71: return 1;
    case 0x4D: return 2;
    case 0x4A: case 0x6A: case 0x72: return 4;
    case 0x47: return 8;
    case 0x95: { if (n < 8) return -1; int64_t k = (int64_t)rd64(s); return k < 0 || k > n - 8 ? -1 : 8; }
    case 0x8A: case 0x8C: case 0x43: case 0x55: return n < 1 ? -1 : 1 + (int64_t)s[0];
    case 0x8B: { if (n < 4) return -1; int64_t k = (int32_t)rd32(s); return k < 0 ? -1 : 4 + k; }
    case 0x58: case 0x42: case 0x54: { if (n < 4) return -1; int64_t k = (int32_t)rd32(s); return k < 0 ? -1 : 4 + k; }
    case 0x8D: case 0x8E: case 0x96: { if (n < 8) return -1; int64_t k = (int64_t)rd64(s); return k < 0 || k > n ? -1 : 8 + k; }
    default: return -1;
    }
}

/* FRAME opcodes (a length hint every 64 KiB, at any opcode boundary) are stepped
 * over wherever an opcode is read; the skim checked their lengths. */
static inline int64_t nf(const unsigned char *b, int64_t pos) {
    while (b[pos] == 0x95) pos += 9;
    return pos;
}

typedef struct {
    int64_t end, memo_end, events, containers;
    Ckpt *ck; int64_t nck, ckcap;
} Skim;

/* One stretch of a device list's items, skimmed by one thread. */
typedef struct {
    P *p;
    int64_t start, stop;   /* where to begin (an event or the list's first item); where the next
                              chunk begins (-1: none) */
    int depth0;            /* marks open above the list at start: 0, or 1 inside a batch */
    int64_t memo;          /* memo index at start (absolute for the first chunk, else 0) */
    int absolute;          /* the first chunk: BINPUT indices can be checked */
    int64_t max_events;    /* stop after this many events (-1: no limit) */
    int64_t every;         /* a checkpoint every this many events */
    int64_t populate_to;   /* map the input's pages up to here first (0: no) */
    int result;            /* 0: the list ends at end; 1: landed on stop; 2: max_events; -1: no */
    int64_t end, events, containers;
    int depth_end;
    Ckpt *ck; int64_t nck, ckcap;
} Chunk;

#define SKIM_FAIL do { c->result = -1; return NULL; } while (0)

/* Walk the items of a device list without building anything: memo entries,
 * containers and events counted, a checkpoint every CKPT_EVERY events, every item
 * checked to be an event dict EMPTY_DICT [memo] MARK ... SETITEMS. */
static void *skim_chunk(void *arg) {
    Chunk *c = arg;
    const unsigned char *b = c->p->buf;
    int64_t n = c->p->end, ev = 0, containers = 0, pos = c->start, memo = c->memo;
#ifdef __linux__
    if (c->populate_to > c->start) {
        /* map this chunk's pages of a file mapping in one call, in parallel with the
         * other chunks (instead of a page fault every 4 KiB); EINVAL before Linux 5.14 */
        uintptr_t a0 = (uintptr_t)(b + c->start) & ~(uintptr_t)4095;
        uintptr_t a1 = (uintptr_t)(b + c->populate_to);
        madvise((void *)a0, a1 - a0, 22 /* MADV_POPULATE_READ */);
    }
#endif
    int depth = c->depth0;
    for (;;) {
        if (pos >= n) SKIM_FAIL;
        if (c->stop >= 0 && pos >= c->stop) {
            if (pos != c->stop || depth != 1) SKIM_FAIL;   /* a false start of the next chunk */
            c->result = 1;
            break;
        }
        int op = b[pos];
        if (op == 0x95) {
            if (pos + 9 > n || op_arglen(op, b + pos + 1, n - pos - 1) < 0) SKIM_FAIL;
            pos += 9;
            continue;
        }
        if (depth == 0 && op == 0x28) { depth = 1; pos++; continue; }
        if (depth == 1 && op == 0x65) { depth = 0; pos++; continue; }
        if (op != 0x7D) {
            if (depth == 0) { c->result = 0; break; }   /* the list's items are over */
            SKIM_FAIL;
        }
        if (ev == c->max_events) { c->result = 2; break; }
        /* an event dict */
        if (ev % c->every == 0) {
            if (c->nck == c->ckcap) {
                int64_t nc = c->ckcap ? c->ckcap * 2 : 256;
                Ckpt *q = PyMem_RawRealloc(c->ck, (size_t)nc * sizeof(Ckpt));
                if (!q) SKIM_FAIL;
                c->ck = q; c->ckcap = nc;
            }
            Ckpt *k = &c->ck[c->nck++];
            k->pos = pos; k->memo = memo; k->event = ev; k->depth = depth;
        }
        ev++; containers++; pos++;
        int inner = 0;  /* marks open inside the event */
        int started = 0;
        for (;;) {
            if (pos >= n) SKIM_FAIL;
            op = b[pos++];
            int64_t a = op_arglen(op, b + pos, n - pos);
            if (a < 0 || pos + a > n) SKIM_FAIL;
            switch (op) {
            case 0x94: memo++; break;
            case 0x71: if (!c->absolute || b[pos] != memo) SKIM_FAIL; memo++; break;
            case 0x72: if (!c->absolute || (int64_t)rd32(b + pos) != memo) SKIM_FAIL; memo++; break;
            case 0x28: inner++; started = 1; break;
            case 0x65: case 0x75: case 0x74: case 0x6C: case 0x64: case 0x31: case 0x90: case 0x91:
                if (--inner < 0) SKIM_FAIL;
                break;
            case 0x5D: case 0x7D: containers++; break;
            case 0x30: case 0x2E: SKIM_FAIL;
            default: break;
            }
            pos += a;
            if (started && inner == 0) {
                if (op != 0x75) SKIM_FAIL;   /* the event's own SETITEMS */
                break;
            }
            if (!started && op != 0x94 && op != 0x71 && op != 0x72 && op != 0x28 && op != 0x95) SKIM_FAIL;
        }
        if (depth == 0) {   /* a batch of one: APPEND */
            while (pos + 9 <= n && b[pos] == 0x95 && op_arglen(0x95, b + pos + 1, n - pos - 1) >= 0) pos += 9;
            if (pos >= n || b[pos] != 0x61) SKIM_FAIL;
            pos++;
        }
    }
    if (c->result == 0 && depth != 0) SKIM_FAIL;
    c->end = pos; c->memo = memo; c->events = ev; c->containers = containers; c->depth_end = depth;
    return NULL;
}

/* The opening bytes every event after the first shares (EMPTY_DICT, its memo op,
 * MARK, a memo reference to the first key): where the other chunks start. */
static int64_t event_pattern(P *p, int64_t pos0, int64_t memo0, unsigned char *pat) {
    Chunk c = {0};
    c.p = p; c.start = pos0; c.stop = -1; c.memo = memo0; c.absolute = 1; c.max_events = 2; c.every = CKPT_EVERY;
    skim_chunk(&c);
    int64_t at = c.nck ? -1 : -1;
    PyMem_RawFree(c.ck);
    if (c.result != 2) return 0;
    at = c.end;   /* the third event: its head is the pattern (the first two define the keys) */
    const unsigned char *b = p->buf;
    int64_t k = 0, q = at;
    if (q + 12 > p->end || b[q] != 0x7D) return 0;
    pat[k++] = b[q++];
    if (b[q] == 0x94) pat[k++] = b[q++]; else return 0;
    if (b[q] == 0x28) pat[k++] = b[q++]; else return 0;
    if (b[q] == 0x68) { memcpy(pat + k, b + q, 2); k += 2; }
    else if (b[q] == 0x6A) { memcpy(pat + k, b + q, 5); k += 5; }
    else return 0;
    return k;
}

/* Skim a device list's items from pos0: in parallel chunks when the events share an
 * opening (each chunk must land exactly where the next begins, so every start is a
 * true event boundary), else in one pass.  0: s filled; -1: not splittable. */
static int skim(P *p, int64_t pos0, int64_t memo0, Skim *s) {
    unsigned char pat[16];
    int64_t plen = p->threads > 1 ? event_pattern(p, pos0, memo0, pat) : 0;
    int nt = plen ? p->threads : 1;
    int64_t span = p->end - pos0;
    /* chunks of at least 1 MiB (a test's tiny section minimum: 4 KiB, to exercise them) */
    int shift = p->sec_min < CKPT_EVERY ? 12 : 20;
    if (span < ((int64_t)nt << shift)) nt = (int)(span >> shift) > 1 ? (int)(span >> shift) : 1;
    if (!plen) nt = 1;
    Chunk *ch = PyMem_RawCalloc((size_t)nt, sizeof(Chunk));
    if (!ch) return -1;
    int m = 0;
    for (int t = 0; t < nt; t++) {
        Chunk *c = &ch[m];
        c->p = p; c->max_events = -1; c->stop = -1;
        c->every = p->sec_min < CKPT_EVERY ? p->sec_min : CKPT_EVERY;
        if (t == 0) { c->start = pos0; c->depth0 = 0; c->memo = memo0; c->absolute = 1; }
        else {
            int64_t from = pos0 + span / nt * t;
            if (from <= ch[m - 1].start) continue;
            const unsigned char *f = memmem(p->buf + from, (size_t)(p->end - from), pat, (size_t)plen);
            if (!f) break;
            c->start = f - p->buf; c->depth0 = 1;
            ch[m - 1].stop = c->start;
        }
        m++;
    }
    if (m > 1)
        for (int t = 0; t < m; t++) ch[t].populate_to = t + 1 < m ? ch[t + 1].start : p->end;
    pthread_t tid[256];
    int started = 0;
    for (int t = 1; t < m && t < 256; t++) {
        if (pthread_create(&tid[started], NULL, skim_chunk, &ch[t]) != 0) break;
        started++;
    }
    skim_chunk(&ch[0]);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    int ok = 0, last = -1;
    if (started == m - 1) {
        for (int t = 0; t < m; t++) {
            if (ch[t].result < 0) break;
            if (ch[t].result == 0) { last = t; break; }
        }
        ok = last >= 0;
    }
    if (ok) {
        int64_t memo = memo0, ev = 0, nck = 0;
        for (int t = 0; t <= last; t++) nck += ch[t].nck;
        s->ck = PyMem_RawMalloc((size_t)(nck ? nck : 1) * sizeof(Ckpt));
        if (!s->ck) ok = 0;
        s->containers = 0;
        for (int t = 0; ok && t <= last; t++) {
            int64_t base = t ? memo : 0;
            for (int64_t i = 0; i < ch[t].nck; i++) {
                Ckpt k = ch[t].ck[i];
                k.memo += base; k.event += ev;
                s->ck[s->nck++] = k;
            }
            memo = ch[t].memo + base;
            ev += ch[t].events;
            s->containers += ch[t].containers;
        }
        s->end = ch[last].end; s->memo_end = memo; s->events = ev;
    }
    for (int t = 0; t < m; t++) PyMem_RawFree(ch[t].ck);
    PyMem_RawFree(ch);
    return ok ? 0 : -1;
}

/* -------------------------------------------------------------------- regions */

typedef struct {
    /* local stacks (inline frame lists): frame ids (memo indices of frame dicts) */
    int64_t *fid; int64_t nfid, fidcap;
    int64_t *soff; int64_t nst, soffcap;     /* stack h: fid[soff[h] .. soff[h+1]) */
    uint64_t *shv; int64_t shvcap; int64_t *sht; int64_t shcap;   /* hash of own stacks: handle+1 */
    /* local strings (cc / um): byte offset and length of the text */
    int64_t *sto; int64_t *stl; int64_t nstr, strcap, stlcap;
    int64_t *sthk; int64_t sthcap;
    int64_t *pmk; int32_t *pmv; int64_t pmcap, pmn;   /* prefix list memo index -> local stack */
    /* first appearances in event order: stack local*2, string local*2+1 */
    int32_t *fs; int64_t nfs, fscap;
    uint8_t *sseen; int64_t sseencap; uint8_t *strseen; int64_t strseencap;
    int64_t *gmap; int32_t *gstr;   /* merge: local -> global */
    int64_t tmp_n, tmp_cap; int64_t *tmp;
    Ckpt start; int64_t endpos; int enddepth;
    volatile int done;
} Region;

typedef struct {
    P *p;
    Region *r; int64_t nr;
    int64_t next;                  /* next region to take (atomic) */
    int64_t memo0, memo_end;       /* the section's memo indices */
    uint64_t *memo;
    int64_t row0, events;          /* the section's column rows */
    int32_t dev;
    volatile int abort;
    const char *why;
    int64_t done_bytes;            /* progress (atomic) */
} Sec;

static inline uint64_t ld_acq(uint64_t *a) { return __atomic_load_n(a, __ATOMIC_ACQUIRE); }
static inline void st_rel(uint64_t *a, uint64_t v) { __atomic_store_n(a, v, __ATOMIC_RELEASE); }

static int sec_fail(Sec *S, const char *why) {
    if (!__atomic_exchange_n(&S->abort, 1, __ATOMIC_ACQ_REL)) S->why = why;
    return -1;
}

static int rgrow(Sec *S, void **ptr, int64_t *cap, int64_t need, size_t item) {
    if (need <= *cap) return 0;
    int64_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = PyMem_RawRealloc(*ptr, (size_t)nc * item);
    if (!q) return sec_fail(S, "out of memory");
    *ptr = q; *cap = nc;
    return 0;
}

/* rgrow for flag arrays: the new bytes are zero. */
static int rgrow0(Sec *S, uint8_t **ptr, int64_t *cap, int64_t need) {
    int64_t old = *cap;
    if (rgrow(S, (void **)ptr, cap, need, 1) < 0) return -1;
    if (*cap > old) memset(*ptr + old, 0, (size_t)(*cap - old));
    return 0;
}

/* The memo entry idx, waiting for an earlier region to publish it; 0: abort.
 * ``limit``: the reader's own next memo index (an entry at or after it does not
 * exist yet at this point of the file). */
static uint64_t memo_wait(Sec *S, int64_t idx, int64_t limit) {
    if (idx >= limit) { sec_fail(S, "memo key not found"); return 0; }
    uint64_t e = ld_acq(&S->memo[idx]);
    int spins = 0;
    while (!e) {
        if (S->abort) return 0;
        if (++spins > 64) {   /* a string an earlier region has not reached yet: rare */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
        e = ld_acq(&S->memo[idx]);
    }
    return e;
}

typedef struct { const unsigned char *s; int64_t k; } Bytes;

/* A string at pos (inline, published if memoized, or a memo reference). */
static int rd_str(Sec *S, int64_t *pos, Bytes *out, int64_t limit) {
    P *p = S->p;
    const unsigned char *b = p->buf;
    int64_t at = nf(b, *pos), n = p->end;
    int op = b[at];
    if (op == 0x68 || op == 0x6A) {
        int64_t idx = op == 0x68 ? b[at + 1] : (int64_t)rd32(b + at + 1);
        *pos = at + (op == 0x68 ? 2 : 5);
        uint64_t e = memo_wait(S, idx, limit);
        if (!e) return -1;
        if ((e & 7u) == 0) {
            PyObject *o = (PyObject *)(uintptr_t)e;
            if (!PyUnicode_CheckExact(o) || !PyUnicode_IS_COMPACT_ASCII(o)) return sec_fail(S, "a non-ASCII prefix string");
            out->s = (const unsigned char *)PyUnicode_DATA(o); out->k = PyUnicode_GET_LENGTH(o);
            return 0;
        }
        if ((e & 7u) != M_OFFSET) return sec_fail(S, "a memo reference that is not a string");
        int64_t sp = (int64_t)(e >> 3);
        int64_t sop = b[sp];
        if (sop == 0x8C) { out->k = b[sp + 1]; out->s = b + sp + 2; }
        else if (sop == 0x58) { out->k = rd32(b + sp + 1); out->s = b + sp + 5; }
        else if (sop == 0x8D) { out->k = (int64_t)rd64(b + sp + 1); out->s = b + sp + 9; }
        else return sec_fail(S, "a memo reference that is not a string");
        return 0;
    }
    int64_t hdr;
    if (op == 0x8C) { out->k = b[at + 1]; hdr = 2; }
    else if (op == 0x58) { out->k = rd32(b + at + 1); hdr = 5; }
    else if (op == 0x8D) { out->k = (int64_t)rd64(b + at + 1); hdr = 9; }
    else return sec_fail(S, "a value that is not a string");
    out->s = b + at + hdr;
    int64_t nx = nf(b, at + hdr + out->k);
    if (nx < n && (b[nx] == 0x94 || b[nx] == 0x71 || b[nx] == 0x72)) {
        /* the skim checked the memo index is the next one: count ours */
        int64_t idx;
        if (b[nx] == 0x94) { idx = -1; nx += 1; }
        else if (b[nx] == 0x71) { idx = b[nx + 1]; nx += 2; }
        else { idx = rd32(b + nx + 1); nx += 5; }
        (void)idx;   /* the skim checked it is the next index */
        *pos = nx;
        return 1;    /* the caller publishes it: it knows the index */
    }
    *pos = nx;
    return 0;
}

typedef struct {
    Sec *S; Region *R; int rid; int64_t memo;
    int64_t kidx[64]; int8_t kval[64];   /* memo index of a key string -> field */
    int64_t aidx[64]; int8_t aval[64];   /* memo index of an action string -> action */
} W;   /* a worker's cursor */

static const int FIELD_LEN[] = {6, 4, 4, 6, 7, 6, 15, 13, 11};
static const int ACTION_LEN[] = {5, 14, 14, 13, 12, 11, 13, 3, 8};

/* A memo reference at pos (BINGET / LONG_BINGET): its index, else -1. */
static inline int64_t get_idx(const unsigned char *b, int64_t pos) {
    if (b[pos] == 0x68) return b[pos + 1];
    if (b[pos] == 0x6A) return (int64_t)rd32(b + pos + 1);
    return -1;
}

static int match_name(Bytes t, const char *const *names, const int *lens, int n) {
    for (int i = 0; i < n; i++)
        if (t.k == lens[i] && memcmp(t.s, names[i], (size_t)t.k) == 0) return i;
    return -1;
}

/* Publish the next memo entry of this region (a memo op at *pos, if there is one). */
static inline int memo_op(W *w, int64_t *pos, uint64_t entry) {
    const unsigned char *b = w->S->p->buf;
    *pos = nf(b, *pos);
    int op = b[*pos];
    if (op == 0x94) { *pos += 1; }
    else if (op == 0x71) { *pos += 2; }
    else if (op == 0x72) { *pos += 5; }
    else return 0;
    st_rel(&w->S->memo[w->memo], entry);
    w->memo++;
    return 1;
}

static int rd_string_value(W *w, int64_t *pos, Bytes *out) {
    int64_t start = *pos = nf(w->S->p->buf, *pos);
    int r = rd_str(w->S, pos, out, w->memo);
    if (r < 0) return -1;
    if (r == 1) {
        /* rd_str stepped over the memo op: publish it now */
        st_rel(&w->S->memo[w->memo], ((uint64_t)start << 3) | M_OFFSET);
        w->memo++;
    }
    return 0;
}

/* An int of an event field (BININT*, LONG1 up to 8 bytes); 0: ok, 1: another value. */
static int rd_int(const unsigned char *b, int64_t *pos, int64_t *out) {
    int64_t at = *pos = nf(b, *pos);
    switch (b[at]) {
    case 0x4B: *out = b[at + 1]; *pos = at + 2; return 0;
    case 0x4D: *out = b[at + 1] | (b[at + 2] << 8); *pos = at + 3; return 0;
    case 0x4A: *out = (int32_t)rd32(b + at + 1); *pos = at + 5; return 0;
    case 0x8A: {
        int64_t k = b[at + 1];
        if (k > 8) return 1;
        const unsigned char *s = b + at + 2;
        uint64_t x = 0;
        for (int64_t i = 0; i < k; i++) x |= (uint64_t)s[i] << (8 * i);
        if (k && k < 8 && (s[k - 1] & 0x80)) x |= ~(uint64_t)0 << (8 * k);
        *out = (int64_t)x; *pos = at + 2 + k;
        return 0;
    }
    default: return 1;
    }
}

/* Skip a plain value inside a frame dict (strings published when memoized). */
static int skip_plain(W *w, int64_t *pos) {
    const unsigned char *b = w->S->p->buf;
    *pos = nf(b, *pos);
    int op = b[*pos];
    if (op == 0x8C || op == 0x58 || op == 0x8D) { Bytes t; return rd_string_value(w, pos, &t); }
    if (op == 0x68 || op == 0x6A) {   /* materialised later: it must exist by now */
        if (get_idx(b, *pos) >= w->memo) return sec_fail(w->S, "memo key not found");
        *pos += op == 0x68 ? 2 : 5;
        return 0;
    }
    if (op == 0x4E || op == 0x88 || op == 0x89) { *pos += 1; return 0; }
    if (op == 0x47) { *pos += 9; return 0; }
    if (op == 0x4B || op == 0x4D || op == 0x4A || op == 0x8A) {
        int64_t x;
        if (rd_int(b, pos, &x) == 0) return 0;
        if (op == 0x8A) { *pos += 2 + b[*pos + 1]; return 0; }
    }
    return sec_fail(w->S, "a frame value the parallel parser does not model");
}

/* A frame dict defined inline: published as its byte offset; its memo index is its id. */
static int frame_dict(W *w, int64_t *pos, int64_t *fid) {
    const unsigned char *b = w->S->p->buf;
    int64_t start = *pos;
    *pos += 1;
    int64_t idx = w->memo;
    if (!memo_op(w, pos, ((uint64_t)start << 3) | M_OFFSET)) return sec_fail(w->S, "a frame dict without a memo entry");
    *fid = idx;
    *pos = nf(b, *pos);
    if (b[*pos] != 0x28) return 0;   /* an empty dict */
    *pos += 1;
    while (b[*pos = nf(b, *pos)] != 0x75) {
        if (skip_plain(w, pos) < 0 || skip_plain(w, pos) < 0) return -1;
    }
    *pos += 1;
    return 0;
}

static uint64_t hash_ids(const int64_t *a, int64_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) { h ^= (uint64_t)a[i]; h *= 1099511628211ULL; h ^= h >> 29; }
    return h;
}

static int64_t local_new_stack(W *w, const int64_t *ids, int64_t n) {
    Region *R = w->R; Sec *S = w->S;
    if (rgrow(S, (void **)&R->soff, &R->soffcap, R->nst + 2, sizeof(int64_t)) < 0) return -1;
    if (rgrow(S, (void **)&R->fid, &R->fidcap, R->nfid + n, sizeof(int64_t)) < 0) return -1;
    if (R->nst == 0) R->soff[0] = 0;
    memcpy(R->fid + R->nfid, ids, (size_t)n * sizeof(int64_t));
    R->nfid += n;
    R->soff[R->nst + 1] = R->nfid;
    return R->nst++;
}

/* Intern an own stack (frame ids) in the region: its local handle. */
static int64_t local_intern(W *w, const int64_t *ids, int64_t n) {
    Region *R = w->R; Sec *S = w->S;
    if ((R->nst + 1) * 2 > R->shcap) {
        int64_t nc = R->shcap ? R->shcap * 2 : 1024;
        int64_t *t = PyMem_RawCalloc((size_t)nc, sizeof(int64_t));
        if (!t) return sec_fail(S, "out of memory");
        for (int64_t i = 0; i < R->shcap; i++) {
            int64_t h = R->sht[i];
            if (!h) continue;
            int64_t j = (int64_t)(R->shv[h - 1] & (uint64_t)(nc - 1));
            while (t[j]) j = (j + 1) & (nc - 1);
            t[j] = h;
        }
        PyMem_RawFree(R->sht); R->sht = t; R->shcap = nc;
    }
    uint64_t hv = hash_ids(ids, n);
    int64_t j = (int64_t)(hv & (uint64_t)(R->shcap - 1));
    while (R->sht[j]) {
        int64_t h = R->sht[j] - 1;
        if (R->shv[h] == hv && R->soff[h + 1] - R->soff[h] == n &&
            (n == 0 || memcmp(R->fid + R->soff[h], ids, (size_t)n * sizeof(int64_t)) == 0))
            return h;
        j = (j + 1) & (R->shcap - 1);
    }
    if (rgrow(S, (void **)&R->shv, &R->shvcap, R->nst + 1, sizeof(uint64_t)) < 0) return -1;
    int64_t h = local_new_stack(w, ids, n);
    if (h < 0) return -1;
    R->shv[h] = hv;
    R->sht[j] = h + 1;
    return h;
}

/* A frame id from a memo reference: a frame dict of the prefix (a Python dict) or of
 * a section (a published offset of an EMPTY_DICT). */
static int ref_frame(W *w, int64_t idx, int64_t *fid) {
    /* never waits: whatever the entry is, the merge materialises it and the stack's
     * interning refuses a non-dict exactly as the serial VM does */
    if (idx >= w->memo) return sec_fail(w->S, "memo key not found");
    *fid = idx;
    return 0;
}

/* A list built before the section (torch shares the frame lists of segments' blocks
 * with their trace events): a local stack {-2, memo index} per region, interned by
 * the merge as the serial VM interns an observed list. */
static int prefix_list(W *w, int64_t idx, int32_t *out) {
    Region *R = w->R; Sec *S = w->S;
    uint64_t e = S->memo[idx];
    /* M_STACK: a frame list of an earlier section, already one of the parser's stacks */
    if ((e & 7u) != M_STACK && ((e & 7u) != 0 || !(PyList_CheckExact((PyObject *)(uintptr_t)e) ||
                                  PyTuple_CheckExact((PyObject *)(uintptr_t)e))))
        return sec_fail(S, "event frames from a memo entry that is not a list");
    if ((R->pmn + 1) * 2 > R->pmcap) {
        int64_t nc = R->pmcap ? R->pmcap * 2 : 256;
        int64_t *nk = PyMem_RawCalloc((size_t)nc, sizeof(int64_t));
        int32_t *nv = PyMem_RawCalloc((size_t)nc, sizeof(int32_t));
        if (!nk || !nv) { PyMem_RawFree(nk); PyMem_RawFree(nv); return sec_fail(S, "out of memory"); }
        for (int64_t i = 0; i < R->pmcap; i++) {
            if (!R->pmk[i]) continue;
            int64_t j = (int64_t)(((uint64_t)(R->pmk[i] - 1) * 0x9E3779B97F4A7C15ULL) >> 17) & (nc - 1);
            while (nk[j]) j = (j + 1) & (nc - 1);
            nk[j] = R->pmk[i]; nv[j] = R->pmv[i];
        }
        PyMem_RawFree(R->pmk); PyMem_RawFree(R->pmv);
        R->pmk = nk; R->pmv = nv; R->pmcap = nc;
    }
    int64_t j = (int64_t)(((uint64_t)idx * 0x9E3779B97F4A7C15ULL) >> 17) & (R->pmcap - 1);
    while (R->pmk[j]) {
        if (R->pmk[j] == idx + 1) { *out = R->pmv[j]; return 0; }
        j = (j + 1) & (R->pmcap - 1);
    }
    int64_t ids[2] = {-2, idx};
    if ((e & 7u) == M_STACK) { ids[0] = -3; ids[1] = (int64_t)(e >> 3); }
    int64_t h = local_new_stack(w, ids, 2);
    if (h < 0) return -1;
    if (h > MAX_HANDLE) return sec_fail(S, "too many stacks");
    R->pmk[j] = idx + 1; R->pmv[j] = (int32_t)h; R->pmn++;
    *out = (int32_t)h;
    return 0;
}

/* The frames value of an event: its local stack handle (-1: None). */
static int rd_frames(W *w, int64_t *pos, int32_t *out) {
    Sec *S = w->S;
    const unsigned char *b = S->p->buf;
    *pos = nf(b, *pos);
    int op = b[*pos];
    if (op == 0x4E) { *pos += 1; *out = -1; return 0; }
    if (op == 0x68 || op == 0x6A) {
        int64_t idx = op == 0x68 ? b[*pos + 1] : (int64_t)rd32(b + *pos + 1);
        *pos += op == 0x68 ? 2 : 5;
        if (idx >= w->memo) return sec_fail(S, "memo key not found");
        if (idx < S->memo0) return prefix_list(w, idx, out);
        if (idx > 0x7ffffff0LL) return sec_fail(S, "too many memo entries");
        /* A list defined earlier in the section (this region's or another's, maybe
         * not complete yet): its memo index, -(idx + 2), resolved by the merge; never
         * waits.  Its first appearance is its defining event's (dicts have unique
         * keys, checked below: that event used it). */
        *out = (int32_t)(-(idx + 2));
        return 0;
    }
    if (op != 0x5D) return sec_fail(S, "event frames that are not a list");
    int64_t start = *pos;
    (void)start;
    *pos += 1;
    int64_t lidx = w->memo;
    int memoized = 0;
    {
        int mo = b[*pos = nf(b, *pos)];
        if (mo == 0x94 || mo == 0x71 || mo == 0x72) {
            memoized = 1;
            *pos += mo == 0x94 ? 1 : mo == 0x71 ? 2 : 5;
            w->memo++;   /* published below, once the list is complete */
        }
    }
    Region *R = w->R;
    R->tmp_n = 0;
    for (;;) {
        int o = b[*pos = nf(b, *pos)];
        int batch = 0;
        if (o == 0x28) { batch = 1; *pos += 1; }
        else if (o == 0x68 || o == 0x6A) {
            /* one item and APPEND, or (no item) the event's next key */
            if (b[nf(b, *pos + (o == 0x68 ? 2 : 5))] != 0x61) break;
        } else if (o != 0x7D) break;
        for (;;) {
            o = b[*pos = nf(b, *pos)];
            int64_t fid;
            if (o == 0x7D) { if (frame_dict(w, pos, &fid) < 0) return -1; }
            else if (o == 0x68 || o == 0x6A) {
                int64_t idx = o == 0x68 ? b[*pos + 1] : (int64_t)rd32(b + *pos + 1);
                *pos += o == 0x68 ? 2 : 5;
                if (ref_frame(w, idx, &fid) < 0) return -1;
            } else break;
            if (rgrow(S, (void **)&R->tmp, &R->tmp_cap, R->tmp_n + 1, sizeof(int64_t)) < 0) return -1;
            R->tmp[R->tmp_n++] = fid;
            if (!batch) break;
        }
        *pos = nf(b, *pos);
        if (batch) { if (b[*pos] != 0x65) return sec_fail(S, "a frame list the parallel parser does not model"); *pos += 1; }
        else { if (b[*pos] != 0x61) return sec_fail(S, "a frame list the parallel parser does not model"); *pos += 1; }
    }
    int64_t h = local_intern(w, R->tmp, R->tmp_n);
    if (h < 0) return -1;
    if (h > MAX_HANDLE) return sec_fail(S, "too many stacks");
    if (memoized) {
        st_rel(&S->memo[lidx], ((((uint64_t)w->rid << 32) | (uint64_t)h) << 3) | M_FLIST);
    }
    *out = (int32_t)h;
    return 0;
}

static int local_string(W *w, Bytes t, int32_t *out) {
    Region *R = w->R; Sec *S = w->S;
    if ((R->nstr + 1) * 2 > R->sthcap) {
        int64_t nc = R->sthcap ? R->sthcap * 2 : 256;
        int64_t *nt = PyMem_RawCalloc((size_t)nc, sizeof(int64_t));
        if (!nt) return sec_fail(S, "out of memory");
        for (int64_t i = 0; i < R->sthcap; i++) {
            int64_t h = R->sthk[i];
            if (!h) continue;
            const unsigned char *s = S->p->buf + R->sto[h - 1];
            uint64_t hv = 1469598103934665603ULL;
            for (int64_t k = 0; k < R->stl[h - 1]; k++) hv = (hv ^ s[k]) * 1099511628211ULL;
            int64_t j = (int64_t)(hv & (uint64_t)(nc - 1));
            while (nt[j]) j = (j + 1) & (nc - 1);
            nt[j] = h;
        }
        PyMem_RawFree(R->sthk); R->sthk = nt; R->sthcap = nc;
    }
    uint64_t hv = 1469598103934665603ULL;
    for (int64_t k = 0; k < t.k; k++) hv = (hv ^ t.s[k]) * 1099511628211ULL;
    int64_t j = (int64_t)(hv & (uint64_t)(R->sthcap - 1));
    while (R->sthk[j]) {
        int64_t h = R->sthk[j] - 1;
        if (R->stl[h] == t.k && memcmp(S->p->buf + R->sto[h], t.s, (size_t)t.k) == 0) { *out = (int32_t)h; return 0; }
        j = (j + 1) & (R->sthcap - 1);
    }
    if (t.s < S->p->buf || t.s > S->p->buf + S->p->end) return sec_fail(S, "a prefix string as an event context");
    if (rgrow(S, (void **)&R->sto, &R->strcap, R->nstr + 1, sizeof(int64_t)) < 0) return -1;
    if (rgrow(S, (void **)&R->stl, &R->stlcap, R->nstr + 1, sizeof(int64_t)) < 0) return -1;
    R->sto[R->nstr] = t.s - S->p->buf; R->stl[R->nstr] = t.k;
    R->sthk[j] = R->nstr + 1;
    *out = (int32_t)R->nstr++;
    return 0;
}

static int fs_push(W *w, int32_t code) {
    Region *R = w->R;
    if (rgrow(w->S, (void **)&R->fs, &R->fscap, R->nfs + 1, sizeof(int32_t)) < 0) return -1;
    R->fs[R->nfs++] = code;
    return 0;
}

static int ctx_value(W *w, int64_t *pos, const char *skip, int32_t *out) {
    const unsigned char *b = w->S->p->buf;
    *pos = nf(b, *pos);
    if (b[*pos] == 0x4E) { *pos += 1; *out = -1; return 0; }
    Bytes t;
    if (rd_string_value(w, pos, &t) < 0) return -1;
    size_t sk = strlen(skip);
    if ((size_t)t.k == sk && memcmp(t.s, skip, sk) == 0) { *out = -1; return 0; }
    /* the serial VM decodes with surrogatepass: leave anything but ASCII to it */
    for (int64_t i = 0; i < t.k; i++) if (t.s[i] & 0x80) return sec_fail(w->S, "a non-ASCII event context");
    return local_string(w, t, out);
}

#define COL(NAME, T) (((T *)S->p->NAME.data)[row])

static int region_events(W *w) {
    Sec *S = w->S; Region *R = w->R; P *p = S->p;
    const unsigned char *b = p->buf;
    int64_t pos = R->start.pos, row = S->row0 + R->start.event;
    int depth = R->start.depth;
    int64_t ticks = 0;
    for (;;) {
        pos = nf(b, pos);
        if (pos >= R->endpos && depth == R->enddepth) break;
        if (S->abort) return -1;
        int op = b[pos];
        if (depth == 0 && op == 0x28) { depth = 1; pos++; continue; }
        if (depth == 1 && op == 0x65) { depth = 0; pos++; continue; }
        if (op != 0x7D || pos >= R->endpos) return sec_fail(S, "a region that does not end at its checkpoint");
        pos++;
        int64_t ev_start = pos - 1;
        memo_op(w, &pos, M_EVENT);
        (void)ev_start;
        pos = nf(b, pos);
        if (b[pos] != 0x28) return sec_fail(S, "an event without items");
        pos++;
        int64_t addr = 0, size = 0, stream = 0, time_us = -1, dfree = -1;
        int action = -1, has_size = 0;
        unsigned seen = 0;
        int32_t stack = -1, cc = -1, um = -1;
        while (b[pos = nf(b, pos)] != 0x75) {
            int f;
            int64_t gi = get_idx(b, pos);
            if (gi >= 0 && w->kidx[gi & 63] == gi + 1) { f = w->kval[gi & 63]; pos += b[pos] == 0x68 ? 2 : 5; }
            else {
                Bytes key;
                if (rd_string_value(w, &pos, &key) < 0) return -1;
                f = match_name(key, FIELD_NAMES, FIELD_LEN, F_OTHER);
                if (f < 0) return sec_fail(S, "an event key the compiled parser does not know");
                if (gi >= 0) { w->kidx[gi & 63] = gi + 1; w->kval[gi & 63] = (int8_t)f; }
            }
            /* a pickled dict has unique keys (a crafted one: the serial VM decides) */
            if (seen & (1u << f)) return sec_fail(S, "an event with a repeated key");
            seen |= 1u << f;
            int64_t x;
            switch (f) {
            case F_ACTION: {
                pos = nf(b, pos);
                gi = get_idx(b, pos);
                if (gi >= 0 && w->aidx[gi & 63] == gi + 1) { action = w->aval[gi & 63]; pos += b[pos] == 0x68 ? 2 : 5; break; }
                Bytes v;
                if (b[pos] == 0x4E || rd_string_value(w, &pos, &v) < 0) return sec_fail(S, "an event action that is not a string");
                action = match_name(v, ACTIONS, ACTION_LEN, N_ACTIONS);
                if (action < 0) return sec_fail(S, "an unknown event action");
                if (gi >= 0) { w->aidx[gi & 63] = gi + 1; w->aval[gi & 63] = (int8_t)action; }
                break;
            }
            case F_ADDR: if (rd_int(b, &pos, &x) || x < 0) return sec_fail(S, "an odd address"); addr = x; break;
            case F_SIZE: if (rd_int(b, &pos, &x) || x < 0) return sec_fail(S, "an odd size"); size = x; has_size = 1; break;
            case F_STREAM: if (rd_int(b, &pos, &x) || x == INT64_MIN) return sec_fail(S, "an odd stream"); stream = x; break;
            case F_TIME: if (rd_int(b, &pos, &x) || x == INT64_MIN) return sec_fail(S, "an odd time"); time_us = x; break;
            case F_FREE: if (rd_int(b, &pos, &x) || x == INT64_MIN) return sec_fail(S, "an odd device_free"); dfree = x; break;
            case F_FRAMES: if (rd_frames(w, &pos, &stack) < 0) return -1; break;
            case F_CC: if (ctx_value(w, &pos, "N/A", &cc) < 0) return -1; break;
            case F_UM: if (ctx_value(w, &pos, "", &um) < 0) return -1; break;
            default: return sec_fail(S, "an event key the compiled parser does not know");
            }
        }
        pos = nf(b, pos + 1);
        if (depth == 0) { if (b[pos] != 0x61) return sec_fail(S, "a batch of one without APPEND"); pos++; }
        if (action < 0 || !has_size) return sec_fail(S, "an event without an action or a size");
        /* first appearances in the serial VM's order: the stack, compile_context, user_metadata */
        if (stack >= 0) {   /* an inline list (a reference, < -1, was seen where defined) */
            if (rgrow0(S, &R->sseen, &R->sseencap, R->nst) < 0) return -1;
            if (!R->sseen[stack]) { R->sseen[stack] = 1; if (fs_push(w, stack * 2) < 0) return -1; }
        }
        if (cc >= 0 || um >= 0) {
            if (rgrow0(S, &R->strseen, &R->strseencap, R->nstr) < 0) return -1;
            if (cc >= 0 && !R->strseen[cc]) { R->strseen[cc] = 1; if (fs_push(w, cc * 2 + 1) < 0) return -1; }
            if (um >= 0 && !R->strseen[um]) { R->strseen[um] = 1; if (fs_push(w, um * 2 + 1) < 0) return -1; }
        }
        COL(c_dev, int32_t) = S->dev; COL(c_act, int8_t) = (int8_t)action;
        COL(c_addr, int64_t) = addr; COL(c_size, int64_t) = size; COL(c_stream, int64_t) = stream;
        COL(c_time, int64_t) = time_us; COL(c_stack, int32_t) = stack; COL(c_free, int64_t) = dfree;
        COL(c_cc, int32_t) = cc; COL(c_um, int32_t) = um;
        row++;
        (void)ticks;
    }
    if (pos != R->endpos) return sec_fail(S, "a region that does not end at its checkpoint");
    __atomic_fetch_add(&S->done_bytes, R->endpos - R->start.pos, __ATOMIC_RELAXED);
    return 0;
}

/* -------------------------------------------------------------------- threads */

static void *worker_main(void *arg) {
    Sec *S = arg;
    for (;;) {
        int64_t k = __atomic_fetch_add(&S->next, 1, __ATOMIC_ACQ_REL);
        if (k >= S->nr || S->abort) break;
        W w;
        memset(&w, 0, sizeof(w));
        w.S = S; w.R = &S->r[k]; w.rid = (int)k; w.memo = S->r[k].start.memo;
        if (region_events(&w) < 0) break;
        if (w.memo != (k + 1 < S->nr ? S->r[k + 1].start.memo : S->memo_end)) {
            sec_fail(S, "a region's memo entries do not add up");
            break;
        }
    }
    return NULL;
}

static void region_free(Region *R) {
    PyMem_RawFree(R->fid); PyMem_RawFree(R->soff); PyMem_RawFree(R->shv); PyMem_RawFree(R->sht);
PyMem_RawFree(R->sto); PyMem_RawFree(R->stl);
    PyMem_RawFree(R->sthk); PyMem_RawFree(R->pmk); PyMem_RawFree(R->pmv); PyMem_RawFree(R->fs); PyMem_RawFree(R->sseen); PyMem_RawFree(R->strseen);
    PyMem_RawFree(R->gmap); PyMem_RawFree(R->gstr); PyMem_RawFree(R->tmp);
}

/* -------------------------------------------------------------------- materialising */

/* Section memo entries the serial VM (or the merge) needs as Python objects:
 * built once from their bytes, owned here.  Open addressing: memo index -> object. */
static PyObject *mat_get(P *p, int64_t idx) {
    if (!p->matcap) return NULL;
    int64_t j = (int64_t)(((uint64_t)idx * 0x9E3779B97F4A7C15ULL) >> 20) & (p->matcap - 1);
    while (p->matk[j]) {
        if (p->matk[j] == idx + 1) return p->matv[j];
        j = (j + 1) & (p->matcap - 1);
    }
    return NULL;
}

static int mat_put(P *p, int64_t idx, PyObject *o) {   /* steals o */
    if ((p->matn + 1) * 2 > p->matcap) {
        int64_t nc = p->matcap ? p->matcap * 2 : 1024;
        int64_t *nk = PyMem_RawCalloc((size_t)nc, sizeof(int64_t));
        PyObject **nv = PyMem_RawCalloc((size_t)nc, sizeof(PyObject *));
        if (!nk || !nv) { PyMem_RawFree(nk); PyMem_RawFree(nv); Py_DECREF(o); return fallback(p, "out of memory"); }
        for (int64_t i = 0; i < p->matcap; i++) {
            if (!p->matk[i]) continue;
            int64_t j = (int64_t)(((uint64_t)(p->matk[i] - 1) * 0x9E3779B97F4A7C15ULL) >> 20) & (nc - 1);
            while (nk[j]) j = (j + 1) & (nc - 1);
            nk[j] = p->matk[i]; nv[j] = p->matv[i];
        }
        PyMem_RawFree(p->matk); PyMem_RawFree(p->matv);
        p->matk = nk; p->matv = nv; p->matcap = nc;
    }
    int64_t j = (int64_t)(((uint64_t)idx * 0x9E3779B97F4A7C15ULL) >> 20) & (p->matcap - 1);
    while (p->matk[j]) j = (j + 1) & (p->matcap - 1);
    p->matk[j] = idx + 1; p->matv[j] = o; p->matn++;
    return 0;
}

static PyObject *materialize(P *p, int64_t idx, int depth);

/* A plain value at *pos (a string, int, float, None, bool or memo reference) as
 * the serial VM builds it; a new reference.  ``memo``: the memo index the next
 * memo op defines. */
static PyObject *mat_value(P *p, int64_t *pos, int64_t *memo, int depth) {
    const unsigned char *b = p->buf;
    int64_t at = *pos = nf(p->buf, *pos);
    int op = b[at];
    PyObject *o = NULL;
    int64_t k;
    switch (op) {
    case 0x8C: k = b[at + 1]; o = make_str(p, b + at + 2, k); *pos = at + 2 + k; break;
    case 0x58: k = rd32(b + at + 1); o = make_str(p, b + at + 5, k); *pos = at + 5 + k; break;
    case 0x8D: k = (int64_t)rd64(b + at + 1); o = make_str(p, b + at + 9, k); *pos = at + 9 + k; break;
    case 0x68: case 0x6A: {
        int64_t idx = op == 0x68 ? b[at + 1] : (int64_t)rd32(b + at + 1);
        *pos = at + (op == 0x68 ? 2 : 5);
        o = materialize(p, idx, depth + 1);
        Py_XINCREF(o);
        return o;
    }
    case 0x4E: *pos = at + 1; return Py_NewRef(Py_None);
    case 0x88: *pos = at + 1; return Py_NewRef(Py_True);
    case 0x89: *pos = at + 1; return Py_NewRef(Py_False);
    case 0x47: {
        unsigned char le[8];
        for (int i = 0; i < 8; i++) le[i] = b[at + 8 - i];
        double d; memcpy(&d, le, 8);
        *pos = at + 9;
        return PyFloat_FromDouble(d);
    }
    case 0x4B: case 0x4D: case 0x4A: {
        int64_t x; rd_int(b, pos, &x);
        return PyLong_FromLongLong(x);
    }
    case 0x8A: {
        k = b[at + 1];
        *pos = at + 2 + k;
        if (k <= 8) { int64_t x; int64_t q = at; rd_int(b, &q, &x); return PyLong_FromLongLong(x); }
        return long_from_bytes(b + at + 2, k);
    }
    default:
        fallback(p, "a section value that cannot be materialised");
        return NULL;
    }
    if (!o) return NULL;
    *pos = nf(b, *pos);
    int mo = b[*pos];
    if (mo == 0x94 || mo == 0x71 || mo == 0x72) {
        *pos += mo == 0x94 ? 1 : mo == 0x71 ? 2 : 5;
        if (!mat_get(p, *memo)) { Py_INCREF(o); if (mat_put(p, *memo, o) < 0) { Py_DECREF(o); return NULL; } }
        (*memo)++;
    }
    return o;
}

/* The Python object of memo entry idx (prefix: the memo's; section: built from its
 * bytes); borrowed.  NULL with a fallback: a kind the serial VM would refuse here. */
static PyObject *materialize(P *p, int64_t idx, int depth) {
    if (idx < 0 || idx >= p->mlen) { fallback(p, "memo key not found"); return NULL; }
    uint64_t e = p->memo[idx];
    if ((e & 7u) == 0) return (PyObject *)(uintptr_t)e;
    if ((e & 7u) != M_OFFSET) { fallback(p, "a memo reference to an event or trace list"); return NULL; }
    PyObject *have = mat_get(p, idx);
    if (have) return have;
    if (depth > 50) { fallback(p, "deep memo references"); return NULL; }
    int64_t pos = (int64_t)(e >> 3), memo = idx;
    const unsigned char *b = p->buf;
    if (b[pos] != 0x7D) {
        PyObject *o = mat_value(p, &pos, &memo, depth);   /* a string: mat_value keeps it */
        if (!o) return NULL;
        Py_DECREF(o);
        return mat_get(p, idx);
    }
    PyObject *d = PyDict_New();
    if (!d) { pyerr(p); return NULL; }
    if (mat_put(p, idx, d) < 0) return NULL;
    pos = nf(b, pos + 1);
    int mo = b[pos];
    pos += mo == 0x94 ? 1 : mo == 0x71 ? 2 : 5;
    memo = idx + 1;
    pos = nf(b, pos);
    if (b[pos] != 0x28) return d;
    pos++;
    while (b[pos = nf(b, pos)] != 0x75) {
        PyObject *ko = mat_value(p, &pos, &memo, depth);
        PyObject *vo = ko ? mat_value(p, &pos, &memo, depth) : NULL;
        int r = vo ? PyDict_SetItem(d, ko, vo) : -1;
        Py_XDECREF(ko); Py_XDECREF(vo);
        if (r < 0) { if (p->status == ST_OK) pyerr(p); return NULL; }
    }
    return d;
}

/* -------------------------------------------------------------------- merge */

/* Serial, the GIL held, in file order: each region's stacks interned as the serial
 * VM interns them, first appearances recorded in event order, strings made the
 * parser's own. */
static int merge(P *p, Sec *S) {
    PyObject **items = NULL; int64_t icap = 0;
    for (int64_t k = 0; k < S->nr; k++) {
        Region *R = &S->r[k];
        R->gmap = PyMem_RawMalloc((size_t)(R->nst ? R->nst : 1) * sizeof(int64_t));
        R->gstr = PyMem_RawMalloc((size_t)(R->nstr ? R->nstr : 1) * sizeof(int32_t));
        if (!R->gmap || !R->gstr) { PyMem_RawFree(items); return fallback(p, "out of memory"); }
        for (int64_t h = 0; h < R->nst; h++) {
            int64_t a = R->soff[h], n = R->soff[h + 1] - a;
            if (n == 2 && R->fid[a] == -3) { R->gmap[h] = R->fid[a + 1]; continue; }
            if (n == 2 && R->fid[a] == -2) {   /* a list from before the section */
                int64_t g;
                if (observed_list_stack(p, (PyObject *)(uintptr_t)p->memo[R->fid[a + 1]], &g) < 0) {
                    PyMem_RawFree(items); return -1;
                }
                R->gmap[h] = g;
                continue;
            }
            if (grow(p, (void **)&items, &icap, n + 1, sizeof(PyObject *)) < 0) { PyMem_RawFree(items); return -1; }
            for (int64_t i = 0; i < n; i++) {
                items[i] = materialize(p, R->fid[a + i], 0);
                if (!items[i]) { PyMem_RawFree(items); return -1; }
            }
            int64_t g = intern_stack(p, items, n);
            if (g < 0) { PyMem_RawFree(items); return -1; }
            if (g > MAX_HANDLE) { PyMem_RawFree(items); return fallback(p, "too many stacks"); }
            R->gmap[h] = g;
        }
        for (int64_t s = 0; s < R->nstr; s++) R->gstr[s] = -1;
        for (int64_t i = 0; i < R->nfs; i++) {
            int32_t code = R->fs[i];
            if (!(code & 1)) {
                int64_t g = R->gmap[code >> 1];
                if (!p->sseen[g]) { p->sseen[g] = 1; if (first_seen(p, (int32_t)(g * 2)) < 0) { PyMem_RawFree(items); return -1; } }
            } else {
                int64_t s = code >> 1;
                PyObject *o = PyUnicode_DecodeUTF8((const char *)p->buf + R->sto[s], (Py_ssize_t)R->stl[s], "surrogatepass");
                if (!o) { PyMem_RawFree(items); return pyerr(p); }
                int32_t h;
                int r = string_handle(p, o, "\x01", &h);   /* the skips were settled in the region */
                Py_DECREF(o);
                if (r < 0) { PyMem_RawFree(items); return -1; }
                R->gstr[s] = h;
            }
        }
    }
    PyMem_RawFree(items);
    return 0;
}

/* In parallel after the merge: a region's rows get the parser's handles; a list
 * reference must name a frame list of the section (else: the serial VM would have
 * handed the file to the Python parser too). */
static void *remap_main(void *arg) {
    Sec *S = arg;
    P *p = S->p;
    for (;;) {
        int64_t k = __atomic_fetch_add(&S->next, 1, __ATOMIC_ACQ_REL);
        if (k >= S->nr) break;
        Region *R = &S->r[k];
        int64_t r0 = S->row0 + R->start.event;
        int64_t r1 = k + 1 < S->nr ? S->row0 + S->r[k + 1].start.event : S->row0 + S->events;
        int32_t *st = (int32_t *)p->c_stack.data, *cc = (int32_t *)p->c_cc.data, *um = (int32_t *)p->c_um.data;
        for (int64_t i = r0; i < r1; i++) {
            int32_t v = st[i];
            if (v >= 0) st[i] = (int32_t)R->gmap[v];
            else if (v < -1) {
                /* another region may be turning its M_FLIST entries into M_STACK ones
                 * meanwhile (below): either form names the same stack */
                uint64_t e = __atomic_load_n(&S->memo[-(int64_t)v - 2], __ATOMIC_RELAXED);
                uint64_t x = e >> 3;
                if ((e & 7u) == M_STACK) st[i] = (int32_t)x;
                else if ((e & 7u) != M_FLIST || (int64_t)(x >> 32) > k) { sec_fail(S, "event frames that are not a frame list"); break; }
                else st[i] = (int32_t)S->r[x >> 32].gmap[x & 0xffffffffu];
            }
            if (cc[i] >= 0) cc[i] = R->gstr[cc[i]];
            if (um[i] >= 0) um[i] = R->gstr[um[i]];
        }
        /* the region's frame lists become stacks of the parser (for later GETs) */
        int64_t m1 = k + 1 < S->nr ? S->r[k + 1].start.memo : S->memo_end;
        for (int64_t i = R->start.memo; i < m1; i++) {
            uint64_t e = S->memo[i];
            if ((e & 7u) != M_FLIST) continue;
            uint64_t x = e >> 3;
            if ((int64_t)(x >> 32) > k) { sec_fail(S, "a frame list from a later region"); break; }
            __atomic_store_n(&S->memo[i], ((uint64_t)S->r[x >> 32].gmap[x & 0xffffffffu] << 3) | M_STACK,
                             __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static int run_threads(Sec *S, void *(*fn)(void *), int nt) {
    pthread_t tid[256];
    int started = 0;
    S->next = 0;
    for (int t = 0; t < nt && t < 256; t++) {
        if (pthread_create(&tid[t], NULL, fn, S) != 0) break;
        started++;
    }
    if (!started) fn(S);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    return started;
}

/* -------------------------------------------------------------------- driver */

static int reserve(P *p, Col *c, int64_t n) {
    if (n <= c->cap) return 0;
    void *q = xrealloc(c->data, (size_t)n * c->itemsize);
    if (!q) return fallback(p, "out of memory");
    c->data = q; c->cap = n;
#ifdef MADV_HUGEPAGE
    /* fewer page faults while the rows are written (first touch dominates on some hosts) */
    size_t bytes = (size_t)n * c->itemsize;
    uintptr_t a = ((uintptr_t)q + 4095) & ~(uintptr_t)4095;
    if (bytes > (4u << 20)) madvise((void *)a, bytes - (a - (uintptr_t)q), MADV_HUGEPAGE);
#endif
    return 0;
}

/* Parse the device list on top of the stack (its items start at p->pos) in parallel.
 * 1: done, p->pos is after its items; 0: not attempted or abandoned (nothing
 * changed: the serial VM goes on); -1: an error (status set). */
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static int run_section(P *p) {
    double t0 = now_s();
    (void)t0;
    Val *top = frame_top(p);
    if (!top || top->k != K_DEVLIST || p->reader || p->threads < 2 || top->aux < p->last_dev) return 0;
    Skim sk = {0};
    int64_t pos0 = p->pos, memo0 = p->mlen;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = skim(p, pos0, memo0, &sk);
    Py_END_ALLOW_THREADS
    double t1 = now_s();
    if (getenv("SNAPPARSE_DEBUG")) fprintf(stderr, "skim %.3f s: %d events %lld end %lld\n", t1 - t0, ok, (long long)sk.events, (long long)sk.end);
    if (ok < 0 || sk.events < p->sec_min || sk.events > 0x7fffffffLL ||
        p->containers + sk.containers > p->budget || p->c_act.n + sk.events > 0x7fffffffLL) {
        PyMem_RawFree(sk.ck);
        return 0;
    }
    /* columns at their final size (rows written in place by the regions) */
    int64_t row0 = p->c_act.n, rows = row0 + sk.events;
    Col *cols[] = {&p->c_dev, &p->c_act, &p->c_addr, &p->c_size, &p->c_stream, &p->c_time,
                   &p->c_stack, &p->c_free, &p->c_cc, &p->c_um};
    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
        if (reserve(p, cols[i], rows) < 0) { PyMem_RawFree(sk.ck); return -1; }
    /* A fresh memo (calloc: zero pages the regions fault in, in parallel, where a
     * memset would touch them all here); 0 = not published yet. */
    {
        int64_t cap = sk.memo_end + sk.memo_end / 8 + 1024;
        uint64_t *m = PyMem_RawCalloc((size_t)cap, sizeof(uint64_t));
        if (!m) { PyMem_RawFree(sk.ck); return fallback(p, "out of memory"); }
        if (memo0) memcpy(m, p->memo, (size_t)memo0 * sizeof(uint64_t));
        PyMem_RawFree(p->memo);
        p->memo = m; p->mcap2 = cap;
    }
    /* regions: a few per thread (they differ in cost), cut at checkpoints */
    int64_t want = (int64_t)p->threads * 4;
    if (want > sk.nck) want = sk.nck;
    Sec S = {0};
    S.p = p; S.memo = p->memo; S.memo0 = memo0; S.memo_end = sk.memo_end; S.events = sk.events; S.row0 = row0; S.dev = (int32_t)top->aux;
    S.r = PyMem_RawCalloc((size_t)want, sizeof(Region));
    if (!S.r) { PyMem_RawFree(sk.ck); return fallback(p, "out of memory"); }
    for (int64_t k = 0; k < want; k++) {
        int64_t c = sk.nck * k / want;
        S.r[k].start = sk.ck[c];
    }
    S.nr = want;
    for (int64_t k = 0; k < want; k++) {
        S.r[k].endpos = k + 1 < want ? S.r[k + 1].start.pos : sk.end;
        S.r[k].enddepth = k + 1 < want ? S.r[k + 1].start.depth : 0;
    }
    PyMem_RawFree(sk.ck);
    int nt = p->threads < want ? p->threads : (int)want;
    pthread_t tid[256];
    int started = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int t = 0; t < nt && t < 256; t++) {
        if (pthread_create(&tid[t], NULL, worker_main, &S) != 0) break;
        started++;
    }
    if (!started) sec_fail(&S, "no threads");
    Py_END_ALLOW_THREADS
    /* the caller's thread waits, reporting progress (a cancel aborts the workers) */
    int cancelled = 0;
    for (int t = 0; t < started; t++) {
        for (;;) {
            int done;
            Py_BEGIN_ALLOW_THREADS
            struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L; if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            done = pthread_timedjoin_np(tid[t], NULL, &ts) == 0;
            Py_END_ALLOW_THREADS
            if (done) break;
            if (!cancelled && p->progress && p->progress != Py_None) {
                int64_t at = pos0 + __atomic_load_n(&S.done_bytes, __ATOMIC_RELAXED);
                PyObject *r = PyObject_CallFunction(p->progress, "d", p->n ? (double)at / (double)p->n : 1.0);
                if (!r) { cancelled = 1; sec_fail(&S, "cancelled"); }
                else Py_DECREF(r);
            }
        }
    }
    int result;
    double t2 = now_s();
    if (getenv("SNAPPARSE_DEBUG")) fprintf(stderr, "regions %.3f s section: %lld events, %lld regions, %d threads, abort=%d (%s)\n", t2 - t1, (long long)sk.events, (long long)S.nr, started, S.abort, S.abort ? S.why : "");
    if (cancelled) { p->status = ST_PYERR; result = -1; }
    else if (S.abort) result = 0;
    else {
        for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) cols[i]->n = rows;
        /* the section's memo entries become the parser's (tagged; materialised on use) */
        p->mlen = sk.memo_end;
        p->containers += sk.containers;
        if (merge(p, &S) < 0) result = -1;
        else {
            Py_BEGIN_ALLOW_THREADS
            run_threads(&S, remap_main, nt);
            Py_END_ALLOW_THREADS
            if (S.abort) result = fallback(p, S.why);
            else { p->pos = sk.end; p->last_dev = S.dev; p->sections_done++; result = 1; }
        }
    }
    if (result == 0) {   /* abandoned: the serial VM parses the list */
        for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) cols[i]->n = row0;
        p->mlen = memo0;
    }
    for (int64_t k = 0; k < S.nr; k++) region_free(&S.r[k]);
    PyMem_RawFree(S.r);
    if (getenv("SNAPPARSE_DEBUG")) fprintf(stderr, "merge %.3f s\n", now_s() - t2);
    return result;
}
