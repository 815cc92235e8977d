/* CRC-32C (Castagnoli), the checksum of the replication log's and the disk queues' records
 * (trionsq/protocol/crc32c.py has the same in Python and the interface): the SSE4.2
 * instruction where the CPU has it (~10 GB/s), a table otherwise.
 *
 * Written once, compiled into each extension that needs it: included (every function
 * `static`) by trionsq/protocol/_speedups.c (the `crc32c` function Python calls) and by
 * trionsq/nsqd/replication/_log_loops.c (the log records' CRCs). Include it after
 * <Python.h> (it uses Py_ssize_t); each extension calls `crc32c_init` once, in its module
 * init, before `crc32c_update`.
 */
#ifndef TRIONSQ_CRC32C_IMPL_H
#define TRIONSQ_CRC32C_IMPL_H

#include <stdint.h>
#include <string.h>
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

#endif /* TRIONSQ_CRC32C_IMPL_H */
