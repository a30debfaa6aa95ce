/* Buffer access shared by every extension in _native/ (included, one copy per module).
 *
 * get_buf: a C-contiguous buffer of ``o`` (writable when asked) whose length is a whole
 * number of ``item``-byte items; else -1 with a Python error naming ``what``, and
 * nothing held.
 *
 * release_bufs: release the first ``got`` buffers of ``v`` (those get_buf filled, in order). */
#ifndef VRAMSCOPE_NATIVE_BUFFERS_H
#define VRAMSCOPE_NATIVE_BUFFERS_H

#include <Python.h>

static int get_buf(PyObject *o, Py_buffer *v, Py_ssize_t item, int writable, const char *what) {
    if (PyObject_GetBuffer(o, v, writable ? (PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
                                          : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (v->len % item) {
        PyErr_Format(PyExc_ValueError, "%s: item size is not %zd bytes", what, item);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static inline void release_bufs(Py_buffer *v, int got) {
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
}

#endif
