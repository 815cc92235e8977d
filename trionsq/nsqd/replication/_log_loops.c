/* trionsq.nsqd.replication._log_loops: three of the replication log's per-message loops
 * (log.py: a replicated topic's publish path and the scan of its IDs), compiled.
 *
 * A record is ``[4-byte length][8-byte due time][framed message][4-byte CRC-32C]``, the
 * length counting the due time, the frame and the CRC, the CRC covering the length, the due
 * time and the frame (everything before it in the record). Every message of a replicated
 * topic is written as one, on the primary and on each member, so these are per-message loops
 * too: `encode_log_records` computes the CRC, `count_log_records` and `scan_log_ids` check it.
 *
 * The same loops in Python are log.py's: it uses this module when it is built and
 * importable, and its own loops otherwise (and under TRIONSQ_PURE_PYTHON=1). Tests run both
 * and check they agree. The CRC-32C code is shared with trionsq/protocol/_speedups.c
 * (trionsq/protocol/crc32c_impl.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../../protocol/crc32c_impl.h"

/* Message frame header: size (4), frame type (4), timestamp (8), attempts (2), ID (16). */
#define FRAME_PREFIX 34

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

#define LOG_HEAD 12
#define LOG_CRC 4
/* The smallest length a record can have: its due time and its CRC. */
#define LOG_LENGTH_MIN (8 + LOG_CRC)

static void put_be64(unsigned char *p, unsigned long long v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

PyDoc_STRVAR(encode_log_records_doc,
"encode_log_records(frames, due)\n"
"--\n\n"
"The log records of the message frames of the list `frames` (bytes), each with the due\n"
"time `due` (Unix ns, 0: now) and its CRC-32C, concatenated.");

static PyObject *encode_log_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode_log_records takes 2 arguments");
        return NULL;
    }
    PyObject *frames = args[0];
    if (!PyList_Check(frames)) {
        PyErr_SetString(PyExc_TypeError, "frames must be a list");
        return NULL;
    }
    unsigned long long due = PyLong_AsUnsignedLongLong(args[1]);
    if (due == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(frames);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *frame = PyList_GET_ITEM(frames, i);
        if (!PyBytes_Check(frame)) {
            PyErr_SetString(PyExc_TypeError, "frames must hold bytes");
            return NULL;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(frame);
        if (size > 0xFFFFFFF0 - LOG_LENGTH_MIN ||
            total > PY_SSIZE_T_MAX - LOG_HEAD - LOG_CRC - size) {
            PyErr_SetString(PyExc_ValueError, "frame too large");
            return NULL;
        }
        total += LOG_HEAD + size + LOG_CRC;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *frame = PyList_GET_ITEM(frames, i);
        Py_ssize_t size = PyBytes_GET_SIZE(frame);
        put_be32(p, (uint32_t)(size + LOG_LENGTH_MIN));
        put_be64(p + 4, due);
        memcpy(p + LOG_HEAD, PyBytes_AS_STRING(frame), (size_t)size);
        put_be32(p + LOG_HEAD + size, crc32c_update(0, p, LOG_HEAD + size));
        p += LOG_HEAD + size + LOG_CRC;
    }
    return out;
}

static inline uint32_t get_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
           (uint32_t)p[3];
}

/* The end of the whole, intact log record at `pos` of `buf` (`n` bytes), or -1 if none is
 * there: too few bytes for its head, a length below `min_length` (or too small for the due
 * time and the CRC), one running past the end, or a CRC that does not match. */
static inline Py_ssize_t log_record_end(const unsigned char *buf, Py_ssize_t n, Py_ssize_t pos,
                                        Py_ssize_t min_length) {
    if (n - pos < LOG_HEAD) {
        return -1;
    }
    const unsigned char *p = buf + pos;
    Py_ssize_t length = (Py_ssize_t)get_be32(p);
    if (length < min_length || length < LOG_LENGTH_MIN || n - pos - 4 < length) {
        return -1;
    }
    if (crc32c_update(0, p, length) != get_be32(p + length)) {
        return -1;
    }
    return pos + 4 + length;
}

/* The arguments of the log scans, (buf, min_length): 0 with `*min_length` set, or -1 with an
 * exception. */
static int log_args(const char *name, PyObject *const *args, Py_ssize_t nargs,
                    Py_ssize_t *min_length) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s takes 2 arguments", name);
        return -1;
    }
    *min_length = PyLong_AsSsize_t(args[1]);
    if (*min_length == -1 && PyErr_Occurred()) {
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(count_log_records_doc,
"count_log_records(buf, min_length)\n"
"--\n\n"
"How many whole, intact log records `buf` holds from its start, and the offset after them:\n"
"(count, pos). The count stops at a record whose length is below `min_length` (or 12) or\n"
"runs past the end, or whose CRC-32C does not match.");

static PyObject *count_log_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_ssize_t min_length;
    if (log_args("count_log_records", args, nargs, &min_length) < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    Py_ssize_t count = 0;
    Py_ssize_t end;
    while ((end = log_record_end(view.buf, view.len, pos, min_length)) >= 0) {
        pos = end;
        count += 1;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", count, pos);
}

PyDoc_STRVAR(scan_log_ids_doc,
"scan_log_ids(buf, min_length)\n"
"--\n\n"
"The message IDs of the whole log records `buf` holds from its start, and the offset after\n"
"them: (ids, pos), stopping as `count_log_records` does.");

static PyObject *scan_log_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_ssize_t min_length;
    if (log_args("scan_log_ids", args, nargs, &min_length) < 0) {
        return NULL;
    }
    if (min_length < LOG_HEAD - 4 + FRAME_PREFIX + LOG_CRC) {
        PyErr_SetString(PyExc_ValueError, "min_length too small to hold an ID");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *ids = PyList_New(0);
    if (ids == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t pos = 0;
    Py_ssize_t end;
    while ((end = log_record_end(buf, view.len, pos, min_length)) >= 0) {
        /* The frame's ID: after the record head, at the end of the frame prefix. */
        PyObject *id = PyBytes_FromStringAndSize(
            (const char *)buf + pos + LOG_HEAD + FRAME_PREFIX - 16, 16);
        if (id == NULL || PyList_Append(ids, id) < 0) {
            Py_XDECREF(id);
            Py_DECREF(ids);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(id);
        pos = end;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", ids, pos);
}

static PyMethodDef methods[] = {
    {"encode_log_records", (PyCFunction)(void (*)(void))encode_log_records, METH_FASTCALL,
     encode_log_records_doc},
    {"count_log_records", (PyCFunction)(void (*)(void))count_log_records, METH_FASTCALL,
     count_log_records_doc},
    {"scan_log_ids", (PyCFunction)(void (*)(void))scan_log_ids, METH_FASTCALL, scan_log_ids_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_log_loops",
    .m_doc = "The replication log's per-message loops, compiled (see _log_loops.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__log_loops(void) {
    crc32c_init();
    return PyModule_Create(&module_def);
}
