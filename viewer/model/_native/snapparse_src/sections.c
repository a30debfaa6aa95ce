/* Parallel trace sections of the snapshot parser (#included by ../snapparse.c,
 * which includes the parts in order: skim.c, regions.c, merge.c, then this file's
 * driver, run_section()).
 *
 * A device's trace list is most of a snapshot file: millions of event dicts of a
 * fixed shape.  When the whole input is in memory (a bytes object or a mapped
 * file) and threads are allowed, the VM hands such a list to run_section() the
 * moment it meets its first item:
 *
 * 1. skim (skim.c): one pass over the list's bytes without building anything
 *    (the GIL released; in chunks on all threads, each of which must end exactly
 *    where the next begins) finds where the list ends, counts the memo entries
 *    and containers it defines, checks every item is an event dict of the form
 *    ``EMPTY_DICT [memo] MARK key value ... SETITEMS`` and notes a checkpoint
 *    (byte, memo index, event index, batch depth) every CKPT_EVERY events;
 * 2. regions (regions.c): the checkpoints cut the list into regions, parsed by C
 *    threads that never touch a Python object.  Each event's fields go straight
 *    into their row of the columns (reserved once, at their final size).  Memo
 *    entries a region defines are published in the shared memo as tagged byte
 *    offsets (strings, frame dicts) or (region, local stack) handles (frame
 *    lists).  A reference to a frame list is kept as its memo index and resolved
 *    by the merge; only a string of an earlier region not published yet is
 *    waited for (regions only ever wait for earlier ones, which never wait);
 * 3. merge (merge.c; the GIL held, in file order): each region's local stacks
 *    and strings become the parser's own (frame dicts materialised from their
 *    bytes, lists shared with the segments interned as the serial VM interns
 *    them), first appearances recorded in event order; then, on all threads
 *    again, the rows get the parser's handles and the section's frame lists
 *    become frozen stacks (M_STACK) that the serial VM and later sections use.
 *
 * The result is the serial VM's by construction: the same rows in the same order,
 * the same stack and string handles, the same first-seen order (tested with a
 * region boundary at every event, and fuzzed).  Whatever this code does not
 * model exactly (another opcode, a value the schema would warn about, a repeated
 * key, ...) abandons the attempt before anything is committed and the serial VM
 * parses the list as before: it then decides (including falling back to the
 * Python parser).  A mapped file is read through sliding windows (Win, skim.c)
 * so its pages never count whole in the process's memory.
 */
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#define CKPT_EVERY 4096
#define SEC_MIN_EVENTS 65536   /* smaller lists: the serial VM (threads cost more than they save) */

typedef struct { int64_t pos, memo, event; int depth; } Ckpt;

#include "skim.c"
#include "regions.c"
#include "merge.c"

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
    lens_init();   /* before any thread reads the tables */
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
#ifdef MADV_HUGEPAGE
        if (cap > (1 << 19)) {   /* fewer page faults (the pages are still zero) */
            uintptr_t a = ((uintptr_t)m + 4095) & ~(uintptr_t)4095;
            madvise((void *)a, (size_t)cap * sizeof(uint64_t) - (a - (uintptr_t)m), MADV_HUGEPAGE);
        }
#endif
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

