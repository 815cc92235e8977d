/* trionsq.protocol._speedups: the per-message loops of parser.py, compiled, and CRC-32C for
 * crc32c.py (at the end). The replication log's loops are an extension of their own, beside
 * the log (trionsq/nsqd/replication/_log_loops.c).
 *
 * `frame_mpub` is the inner loop of `CommandParser._next_mpub` when the parser frames
 * messages (nsqd's publish hot path): it reads MPUB's ``[size][body]`` records from a buffer
 * and appends each as a message frame (frame header, timestamp, attempts 0, ID, body) to a
 * list, as `message.encode_new_frames` lays frames out. `scan_fins` is the loop of
 * `CommandParser.take_fins` (the delivery hot path: one FIN per message delivered): the IDs
 * of the ``FIN <16-byte ID>\n`` lines at the head of the input.
 *
 * Everything around them (MPUB's body size and count, taking IDs, errors, waiting for bytes;
 * what a FIN does) stays in parser.py, and so do the same loops in Python: parser.py uses
 * this module when it is built and importable, and its own loops otherwise (and under
 * TRIONSQ_PURE_PYTHON=1). Tests and fuzzers run both and check they agree byte for byte.
 *
 * Why C: in Python each loop costs about a dozen bytecode steps and intermediate `bytes` per
 * message (publishing, ~65 % of nsqd's time; delivering, ~40 % is FIN scanning:
 * docs/multicore.md); here it is one allocation and a copy or two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* Frame header: size (4), frame type (4), timestamp (8), attempts (2), ID (16). */
#define FRAME_PREFIX 34
#define FRAME_TYPE_MESSAGE 2
#define ID_HIGH_DIGITS 13

/* What stopped the loop (the first item of the result). */
enum { DONE = 0, NEED_BYTES = 1, IDS_USED = 2, BAD_SIZE = 3 };

static const char HEX[] = "0123456789abcdef";

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

PyDoc_STRVAR(frame_mpub_doc,
"frame_mpub(buf, pos, left, max_msg, timestamp, high, sequence, run_end, out)\n"
"--\n\n"
"Frame up to `left` MPUB records of `buf` from offset `pos`, appending each frame to `out`;\n"
"message k gets the ID `high` (13 hex digits) + the 3 hex digits of `sequence` + k.\n"
"Returns (status, pos, left, sequence, value): status DONE (left is 0), NEED_BYTES (value:\n"
"bytes needed from pos), IDS_USED (sequence reached run_end) or BAD_SIZE (value: the\n"
"record's size, not in 1..max_msg; pos is at that record).");

static PyObject *frame_mpub(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "frame_mpub takes 9 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t left = PyLong_AsSsize_t(args[2]);
    Py_ssize_t max_msg = PyLong_AsSsize_t(args[3]);
    long long timestamp = PyLong_AsLongLong(args[4]);
    Py_ssize_t sequence = PyLong_AsSsize_t(args[6]);
    Py_ssize_t run_end = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    PyObject *high = args[5];
    PyObject *out = args[8];
    if (!PyBytes_Check(high) || PyBytes_GET_SIZE(high) != ID_HIGH_DIGITS) {
        PyErr_SetString(PyExc_ValueError, "high must be 13 bytes");
        return NULL;
    }
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be a list");
        return NULL;
    }
    if (pos < 0 || left < 0 || sequence < 0 || run_end > 4096 || max_msg < 0) {
        PyErr_SetString(PyExc_ValueError, "argument out of range");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t n = view.len;

    /* The part of the header that is the same for every message of the call. */
    unsigned char head[FRAME_PREFIX];
    put_be32(head + 4, FRAME_TYPE_MESSAGE);
    unsigned long long ts = (unsigned long long)timestamp;
    put_be32(head + 8, (uint32_t)(ts >> 32));
    put_be32(head + 12, (uint32_t)ts);
    head[16] = head[17] = 0; /* attempts */
    memcpy(head + 18, PyBytes_AS_STRING(high), ID_HIGH_DIGITS);

    int status = DONE;
    long long value = 0;
    while (left > 0) {
        if (sequence >= run_end) {
            status = IDS_USED;
            break;
        }
        if (n - pos < 4) {
            status = NEED_BYTES;
            value = 4;
            break;
        }
        const unsigned char *p = buf + pos;
        int32_t size = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                                 ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
        if (size <= 0 || size > max_msg) {
            status = BAD_SIZE;
            value = size;
            break;
        }
        if (n - pos - 4 < size) {
            status = NEED_BYTES;
            value = 4 + (long long)size;
            break;
        }
        PyObject *frame = PyBytes_FromStringAndSize(NULL, FRAME_PREFIX + size);
        if (frame == NULL) {
            PyBuffer_Release(&view);
            return NULL;
        }
        unsigned char *f = (unsigned char *)PyBytes_AS_STRING(frame);
        memcpy(f, head, FRAME_PREFIX);
        put_be32(f, (uint32_t)(size + FRAME_PREFIX - 4));
        f[31] = HEX[(sequence >> 8) & 0xf];
        f[32] = HEX[(sequence >> 4) & 0xf];
        f[33] = HEX[sequence & 0xf];
        memcpy(f + FRAME_PREFIX, p + 4, (size_t)size);
        int failed = PyList_Append(out, frame);
        Py_DECREF(frame);
        if (failed) {
            PyBuffer_Release(&view);
            return NULL;
        }
        pos += 4 + size;
        sequence += 1;
        left -= 1;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(innnL)", status, pos, left, sequence, value);
}

#define FIN_LINE 21 /* "FIN " + 16-byte ID + "\n" */

PyDoc_STRVAR(scan_fins_doc,
"scan_fins(buf, pos)\n"
"--\n\n"
"The IDs of the consecutive ``FIN <16-byte ID>\\n`` lines of `buf` from offset `pos`, and\n"
"the offset after them: (ids, pos). A line whose ID holds a space or a newline, or ends in\n"
"a carriage return, ends the run (the general parser deals with it).");

static PyObject *scan_fins(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "scan_fins takes 2 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "pos must not be negative");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t n = view.len;
    PyObject *ids = PyList_New(0);
    if (ids == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    while (n - pos >= FIN_LINE) {
        const unsigned char *p = buf + pos;
        if (memcmp(p, "FIN ", 4) != 0 || p[20] != '\n' || p[19] == '\r' ||
            memchr(p + 4, ' ', 16) != NULL || memchr(p + 4, '\n', 16) != NULL) {
            break;
        }
        PyObject *id = PyBytes_FromStringAndSize((const char *)p + 4, 16);
        if (id == NULL || PyList_Append(ids, id) < 0) {
            Py_XDECREF(id);
            Py_DECREF(ids);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(id);
        pos += FIN_LINE;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", ids, pos);
}

/* CRC-32C (Castagnoli): `crc32c` below, for trionsq/protocol/crc32c.py; the code is shared
 * with the replication log's loops (trionsq/nsqd/replication/_log_loops.c). */
#include "crc32c_impl.h"

PyDoc_STRVAR(crc32c_doc, "crc32c(data, crc=0, /) -> int: CRC-32C of data, continuing crc.");

static PyObject *crc32c(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, crc=0)");
        return NULL;
    }
    unsigned long start = 0;
    if (nargs == 2) {
        start = PyLong_AsUnsignedLong(args[1]);
        if (start == (unsigned long)-1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t crc;
    if (view.len >= 4096) {
        Py_BEGIN_ALLOW_THREADS crc = crc32c_update((uint32_t)start, view.buf, view.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_update((uint32_t)start, view.buf, view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"frame_mpub", (PyCFunction)(void (*)(void))frame_mpub, METH_FASTCALL, frame_mpub_doc},
    {"scan_fins", (PyCFunction)(void (*)(void))scan_fins, METH_FASTCALL, scan_fins_doc},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_FASTCALL, crc32c_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_speedups",
    .m_doc = "trionsq's per-message loops, compiled (see _speedups.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc32c_init();
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "DONE", DONE) < 0 ||
        PyModule_AddIntConstant(module, "NEED_BYTES", NEED_BYTES) < 0 ||
        PyModule_AddIntConstant(module, "IDS_USED", IDS_USED) < 0 ||
        PyModule_AddIntConstant(module, "BAD_SIZE", BAD_SIZE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
