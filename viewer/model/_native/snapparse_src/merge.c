/* Materialising section memo entries, the merge in file order and the
 * parallel remap of the rows (part of sections.c: see there). */

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

