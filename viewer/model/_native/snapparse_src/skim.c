/* The skim of a device list and the sliding windows over a mapped file
 * (part of sections.c: see there). */

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

/* Opcodes the skim steps over without looking at them: their argument length
 * (memo references, fixed-size ints and floats, argument-less ones that neither
 * open nor close a mark, memoize or make a container); -1: the others. */
static int8_t SKIP_LEN[256];

static void skip_len_init(void) {
    static int done;
    if (done) return;
    for (int i = 0; i < 256; i++) SKIP_LEN[i] = -1;
    const unsigned char zero[] = {0x4E, 0x88, 0x89, 0x29, 0x85, 0x86, 0x87, 0x61, 0x73, 0x32};
    for (size_t i = 0; i < sizeof(zero); i++) SKIP_LEN[zero[i]] = 0;
    SKIP_LEN[0x4B] = 1; SKIP_LEN[0x68] = 1; SKIP_LEN[0x4D] = 2;
    SKIP_LEN[0x4A] = 4; SKIP_LEN[0x6A] = 4; SKIP_LEN[0x47] = 8;
    done = 1;
}

/* FRAME opcodes (a length hint every 64 KiB, at any opcode boundary) are stepped
 * over wherever an opcode is read; the skim checked their lengths. */
static inline int64_t nf(const unsigned char *b, int64_t pos) {
    while (b[pos] == 0x95) pos += 9;
    return pos;
}

/* A sliding window over a file mapping (``parse(..., file_mapped=1)``): the pages
 * ahead are mapped in one call (MADV_POPULATE_READ: no page fault every 4 KiB) and
 * those behind unmapped again (MADV_DONTNEED: the page cache keeps them; a later
 * read maps them back), so the file never counts whole in the process's memory.
 * Never used on other input: DONTNEED would zero anonymous memory. */
#define WIN_STEP (8LL << 20)

typedef struct { int64_t lo, hi, limit, next; int on; } Win;   /* mapped: [lo, hi), hi <= limit */

static inline void win_to(const unsigned char *b, Win *w, int64_t pos) {
    if (!w->on || pos < w->next) return;
#ifdef __linux__
    int64_t drop = (pos - (1 << 20)) & ~(int64_t)4095;
    if (drop > w->lo) { madvise((void *)(b + w->lo), (size_t)(drop - w->lo), MADV_DONTNEED); w->lo = drop; }
    int64_t from = w->hi & ~(int64_t)4095, to = w->hi + WIN_STEP;
    if (to > w->limit) to = w->limit;
    if (to > from) madvise((void *)(b + from), (size_t)(to - from), 22 /* MADV_POPULATE_READ */);
    if (to > w->hi) w->hi = to;
#endif
    w->next = w->hi >= w->limit ? INT64_MAX : w->hi - (1 << 20);
}

static inline void win_start(const unsigned char *b, Win *w, int on, int64_t pos, int64_t limit) {
    w->on = on; w->lo = pos & ~(int64_t)4095; w->hi = w->lo; w->limit = limit; w->next = 0;
    win_to(b, w, pos);
}

static inline void win_end(const unsigned char *b, Win *w) {
#ifdef __linux__
    if (w->on) {
        int64_t hi = (w->hi < w->limit ? w->hi : w->limit) & ~(int64_t)4095;   /* never past the mapping */
        if (hi > w->lo) madvise((void *)(b + w->lo), (size_t)(hi - w->lo), MADV_DONTNEED);
    }
#endif
    w->on = 0;
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
    int result;            /* 0: the list ends at end; 1: landed on stop; 2: max_events; -1: no */
    int64_t end, events, containers;
    int depth_end;
    Ckpt *ck; int64_t nck, ckcap;
} Chunk;

#define SKIM_FAIL do { win_end(b, &win); c->result = -1; return NULL; } while (0)

/* Walk the items of a device list without building anything: memo entries,
 * containers and events counted, a checkpoint every CKPT_EVERY events, every item
 * checked to be an event dict EMPTY_DICT [memo] MARK ... SETITEMS. */
static void *skim_chunk(void *arg) {
    Chunk *c = arg;
    const unsigned char *b = c->p->buf;
    int64_t n = c->p->end, ev = 0, containers = 0, pos = c->start, memo = c->memo;
    Win win;
    win_start(b, &win, c->p->file_mapped, pos, c->stop >= 0 ? c->stop : n);
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
        win_to(b, &win, pos);
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
        /* the event's head: memo ops (and FRAMEs) up to its MARK */
        for (;;) {
            if (pos >= n) SKIM_FAIL;
            op = b[pos];
            if (op == 0x94) { memo++; pos++; }
            else if (op == 0x71) { if (!c->absolute || pos + 2 > n || b[pos + 1] != memo) SKIM_FAIL; memo++; pos += 2; }
            else if (op == 0x72) { if (!c->absolute || pos + 5 > n || (int64_t)rd32(b + pos + 1) != memo) SKIM_FAIL; memo++; pos += 5; }
            else if (op == 0x95) { if (op_arglen(op, b + pos + 1, n - pos - 1) < 0 || pos + 9 > n) SKIM_FAIL; pos += 9; }
            else break;
        }
        if (op != 0x28) SKIM_FAIL;
        pos++;
        /* its body, to the SETITEMS that closes that MARK: most opcodes are memo
         * references and ints of a fixed length (one table look-up each) */
        int inner = 1;
        for (;;) {
            if (pos >= n) SKIM_FAIL;
            op = b[pos++];
            int fl = SKIP_LEN[op];
            if (fl >= 0) { pos += fl; continue; }
            int64_t a = op_arglen(op, b + pos, n - pos);
            if (a < 0 || pos + a > n) SKIM_FAIL;
            switch (op) {
            case 0x94: memo++; break;
            case 0x71: if (!c->absolute || b[pos] != memo) SKIM_FAIL; memo++; break;
            case 0x72: if (!c->absolute || (int64_t)rd32(b + pos) != memo) SKIM_FAIL; memo++; break;
            case 0x28: inner++; break;
            case 0x65: case 0x75: case 0x74: case 0x6C: case 0x64: case 0x31: case 0x90: case 0x91:
                inner--;
                break;
            case 0x5D: case 0x7D: containers++; break;
            case 0x30: case 0x2E: SKIM_FAIL;
            default: break;
            }
            pos += a;
            if (inner == 0) {
                if (op != 0x75) SKIM_FAIL;   /* the event's own SETITEMS */
                break;
            }
        }
        if (pos > n) SKIM_FAIL;
        if (depth == 0) {   /* a batch of one: APPEND */
            while (pos + 9 <= n && b[pos] == 0x95 && op_arglen(0x95, b + pos + 1, n - pos - 1) >= 0) pos += 9;
            if (pos >= n || b[pos] != 0x61) SKIM_FAIL;
            pos++;
        }
    }
    win_end(b, &win);
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
    skip_len_init();   /* here, before any thread reads it */
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

