/* The regions of a device list, parsed on C threads without the GIL
 * (part of sections.c: see there).  Over 500 lines on purpose: the event grammar
 * and the region-local tables it fills (stacks, strings, first appearances) are
 * read and changed together. */

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
    return grow_array(ptr, cap, need, item) < 0 ? sec_fail(S, "out of memory") : 0;
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
    Win win;
} W;   /* a worker's cursor */

/* strlen of FIELD_NAMES / ACTIONS (snapparse.c), filled by lens_init() */
static int FIELD_LEN[F_OTHER];
static int ACTION_LEN[N_ACTIONS];

static void lens_init(void) {
    for (int i = 0; i < F_OTHER; i++) FIELD_LEN[i] = (int)strlen(FIELD_NAMES[i]);
    for (int i = 0; i < N_ACTIONS; i++) ACTION_LEN[i] = (int)strlen(ACTIONS[i]);
}

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
    if (n) memcpy(R->fid + R->nfid, ids, (size_t)n * sizeof(int64_t));
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
            /* a placeholder until the list is complete (a reference to it from
             * inside it must not wait for itself) */
            st_rel(&S->memo[w->memo], M_BUILDING);
            w->memo++;
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
        win_to(b, &w->win, pos);
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
        win_start(S->p->buf, &w.win, S->p->file_mapped, w.R->start.pos, w.R->endpos);
        int rc = region_events(&w);
        win_end(S->p->buf, &w.win);
        if (rc < 0) break;
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

