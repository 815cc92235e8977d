/* trionsq.protocol._speedups: the per-message loops of parser.py, compiled, and three of the
 * replication log's (replication_log.py: a replicated topic's publish path and the scan of
 * its IDs, at the end).
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

/* -- the replication log's records (trionsq/nsqd/replication_log.py) ----------------------
 *
 * A record is ``[4-byte length][8-byte due time][framed message][4-byte CRC-32C]``, the
 * length counting the due time, the frame and the CRC, the CRC covering the length, the due
 * time and the frame (everything before it in the record). Every message of a replicated
 * topic is written as one, on the primary and on each member, so these are per-message loops
 * too: `encode_log_records` computes the CRC, `count_log_records` and `scan_log_ids` check it.
 */
#define LOG_HEAD 12
#define LOG_CRC 4
/* The smallest length a record can have: its due time and its CRC. */
#define LOG_LENGTH_MIN (8 + LOG_CRC)

static uint32_t crc32c_update(uint32_t crc, const unsigned char *p, Py_ssize_t n);

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

/* CRC-32C (Castagnoli), the checksum of the replication log's and the disk queues' records
 * (trionsq/protocol/crc32c.py has the same in Python and the interface): the SSE4.2
 * instruction where the CPU has it (~10 GB/s), a table otherwise. */
#include <stdint.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_SSE42_PATH 1
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p,
                                                               Py_ssize_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n-- > 0) {
        c32 = _mm_crc32_u8(c32, *p++);
    }
    return c32;
}
#endif

static uint32_t crc32c_table[256];
static int crc32c_use_sse42 = 0;

static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        crc32c_table[i] = c;
    }
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    crc32c_use_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc32c_update(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
    crc = ~crc;
#ifdef HAVE_SSE42_PATH
    if (crc32c_use_sse42) {
        return ~crc32c_sse42(crc, p, n);
    }
#endif
    while (n-- > 0) {
        crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    }
    return ~crc;
}

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
    {"encode_log_records", (PyCFunction)(void (*)(void))encode_log_records, METH_FASTCALL,
     encode_log_records_doc},
    {"count_log_records", (PyCFunction)(void (*)(void))count_log_records, METH_FASTCALL,
     count_log_records_doc},
    {"scan_log_ids", (PyCFunction)(void (*)(void))scan_log_ids, METH_FASTCALL, scan_log_ids_doc},
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
