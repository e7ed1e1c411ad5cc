# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled fast path: v2 records straight into the buffers of Arrow's layout.

The twin of the pure-Python table builder (``arrow._RecordColumns`` over
``default_records.read_record_columns``): the same wire grammar and batch layout
(``default_records``; the C constants below are pinned to it by tests), the same
records-table columns (``arrow.RECORDS_SCHEMA``), but no Python object per record.
This module does not import pyarrow: it writes plain buffers, and ``kafkalog.arrow``
makes them Arrow arrays (``arrow.FastSink``), without a copy.

- :meth:`RecordColumns.scan_run` frames runs of *regular* v2 data batches in C:
  header fields, CRC-32C (SSE4.2, three interleaved streams, where the CPU has
  it; a table otherwise), lz4 and zstd payloads inflated by the system's liblz4 /
  libzstd where they load (other codecs through ``codecs.decompress``), records
  parsed into the columns. Its batches-table rows come from the ``batch_row`` it is
  given (``arrow.batch_row``, as on the pure path).
- :meth:`RecordColumns.add_v2` takes one v2 batch the Python reader framed, and
  :meth:`RecordColumns.add_batch` the Record objects of one it decoded (v0/v1,
  or whatever the C parser left to it).
- Column data is written into buffers of this module (:class:`_Buf`, 64-byte
  aligned as Arrow aligns its own), which :meth:`RecordColumns.flush` hands over
  per column in Arrow's buffer layout; Arrow reads them through the buffer
  protocol and holds them as long as a table does. When a table is freed its big
  buffers' memory is kept (up to ``spare_limit()`` bytes) for the next chunk.
  Batch lineage is kept once per batch and written out row by row at
  :meth:`RecordColumns.flush`.

This module only handles the regular case. Whenever a batch is not exactly what
the format allows (a control batch, a CRC mismatch, an offset regression, a size
or length that does not fit, a varint wider than its type, bytes left over, a
header key that is not UTF-8, an int64 overflow near the edges), the batch is
rolled back and left to the pure-Python reader, which produces the finding. So
the two paths cannot disagree on findings, and the tests check that they agree
on tables.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset
from libc.stdint cimport uint32_t

cdef extern from *:
    """
    #include <string.h>
    #include <stdint.h>
    #if defined(__x86_64__)
    #include <nmmintrin.h>
    /* The crc32 instruction takes 3 cycles but can start every cycle, so one
       dependency chain runs at a third of its speed. Blocks of 3 x KL_LONG
       (then 3 x KL_SHORT) bytes are taken as three independent streams, and
       the three registers joined afterwards: a CRC register is linear in its
       input, so the register after A|B is the register after A advanced over
       |B| zero bytes, xor the register after B started from zero. Advancing
       over a fixed number of zeros is a linear map of 32 bits, tabulated at
       import (kl_crc_shift_init) as four byte-indexed tables. */
    #define KL_LONG 4096
    #define KL_SHORT 256
    static uint32_t kl_shift_long[4][256], kl_shift_short[4][256];
    static inline uint32_t kl_shift(uint32_t t[4][256], uint32_t c) {
        return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
    }
    __attribute__((target("sse4.2")))
    static void kl_crc_shift_init(uint32_t t[4][256], size_t zeros) {
        uint32_t bit[32];
        for (int i = 0; i < 32; i++) {  /* where each single register bit goes */
            uint64_t c = (uint64_t)1 << i;
            for (size_t k = 0; k < zeros / 8; k++) c = _mm_crc32_u64(c, 0);
            bit[i] = (uint32_t)c;
        }
        for (int k = 0; k < 4; k++)
            for (int b = 0; b < 256; b++) {
                uint32_t v = 0;
                for (int j = 0; j < 8; j++) if (b & (1 << j)) v ^= bit[8 * k + j];
                t[k][b] = v;
            }
    }
    __attribute__((target("sse4.2")))
    static inline uint64_t kl_crc3(uint64_t c0, const uint8_t **pp, size_t len, uint32_t t[4][256]) {
        /* one block of 3 x len bytes: three streams, then joined */
        const uint8_t *p = *pp, *end = p + len;
        uint64_t c1 = 0, c2 = 0, a, b, d;
        do {
            memcpy(&a, p, 8); memcpy(&b, p + len, 8); memcpy(&d, p + 2 * len, 8);
            c0 = _mm_crc32_u64(c0, a); c1 = _mm_crc32_u64(c1, b); c2 = _mm_crc32_u64(c2, d);
            p += 8;
        } while (p < end);
        c0 = kl_shift(t, (uint32_t)c0) ^ c1;
        c0 = kl_shift(t, (uint32_t)c0) ^ c2;
        *pp = p + 2 * len;
        return c0;
    }
    __attribute__((target("sse4.2")))
    static uint32_t kl_crc32c_hw(const uint8_t *p, size_t n) {
        uint64_t crc = 0xFFFFFFFFu;
        for (; n >= 3 * KL_LONG; n -= 3 * KL_LONG) crc = kl_crc3(crc, &p, KL_LONG, kl_shift_long);
        for (; n >= 3 * KL_SHORT; n -= 3 * KL_SHORT) crc = kl_crc3(crc, &p, KL_SHORT, kl_shift_short);
        while (n >= 8) { uint64_t v; memcpy(&v, p, 8); crc = _mm_crc32_u64(crc, v); p += 8; n -= 8; }
        uint32_t c = (uint32_t)crc;
        while (n--) c = _mm_crc32_u8(c, *p++);
        return ~c;
    }
    #endif
    static uint32_t kl_crc_table[256];
    static int kl_crc_hw = -1;
    static void kl_crc32c_init(void) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            kl_crc_table[i] = c;
        }
    #if defined(__x86_64__)
        kl_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        if (kl_crc_hw) {
            kl_crc_shift_init(kl_shift_long, KL_LONG);
            kl_crc_shift_init(kl_shift_short, KL_SHORT);
        }
    #else
        kl_crc_hw = 0;
    #endif
    }
    static uint32_t kl_crc32c_sw(const uint8_t *p, size_t n) {
        uint32_t c = 0xFFFFFFFFu;
        while (n--) c = kl_crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
        return ~c;
    }
    static uint32_t kl_crc32c(const uint8_t *p, size_t n, int force_sw) {
    #if defined(__x86_64__)
        if (kl_crc_hw && !force_sw) return kl_crc32c_hw(p, n);
    #endif
        return kl_crc32c_sw(p, n);
    }
    static inline int64_t kl_be64(const uint8_t *p) {
        uint64_t v = 0; for (int i = 0; i < 8; i++) v = (v << 8) | p[i]; return (int64_t)v;
    }
    static inline int32_t kl_be32(const uint8_t *p) {
        return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
    }
    /* copy n <= 16 bytes with at most two fixed-size, possibly overlapping
       moves that stay inside [src, src + n): cheaper than a call to memcpy */
    static inline void kl_copy_small(char *dst, const uint8_t *src, size_t n) {
        uint64_t a, b; uint32_t c, d;
        if (n >= 8) { memcpy(&a, src, 8); memcpy(&b, src + n - 8, 8);
                      memcpy(dst, &a, 8); memcpy(dst + n - 8, &b, 8); }
        else if (n >= 4) { memcpy(&c, src, 4); memcpy(&d, src + n - 4, 4);
                           memcpy(dst, &c, 4); memcpy(dst + n - 4, &d, 4); }
        else { for (size_t i = 0; i < n; i++) dst[i] = (char)src[i]; }
    }
    static inline int16_t kl_be16(const uint8_t *p) {
        return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
    }
    """
    void kl_crc32c_init() noexcept nogil
    uint32_t kl_crc32c(const uint8_t* p, size_t n, int force_sw) noexcept nogil
    int64_t kl_be64(const uint8_t* p) noexcept nogil
    int32_t kl_be32(const uint8_t* p) noexcept nogil
    int16_t kl_be16(const uint8_t* p) noexcept nogil
    void kl_copy_small(char* dst, const uint8_t* src, size_t n) noexcept nogil

kl_crc32c_init()


cdef extern from *:
    """
    /* LZ4 frames and zstd streams, inflated by the system's liblz4 / libzstd.
       They are loaded with dlopen at import (Debian ships them with apt and
       systemd; their -dev headers are not needed: the few stable entry points
       are declared here). Without them the Python codecs decompress. */
    #include <dlfcn.h>
    #include <stdlib.h>
    typedef size_t (*kl_lz4f_create_t)(void **ctx, unsigned version);
    typedef size_t (*kl_lz4f_decompress_t)(void *ctx, void *dst, size_t *dst_size,
                                           const void *src, size_t *src_size, const void *opts);
    typedef size_t (*kl_lz4f_free_t)(void *ctx);
    typedef unsigned (*kl_lz4f_is_error_t)(size_t code);
    typedef struct { const void *src; size_t size; size_t pos; } kl_zstd_in;
    typedef struct { void *dst; size_t size; size_t pos; } kl_zstd_out;
    typedef void *(*kl_zstd_create_t)(void);
    typedef size_t (*kl_zstd_stream_t)(void *ctx, kl_zstd_out *out, kl_zstd_in *in);
    typedef size_t (*kl_zstd_reset_t)(void *ctx, int how);
    typedef unsigned (*kl_zstd_is_error_t)(size_t code);
    static kl_lz4f_decompress_t kl_lz4f_decompress;
    static kl_lz4f_create_t kl_lz4f_create;
    static kl_lz4f_free_t kl_lz4f_free;
    static kl_lz4f_is_error_t kl_lz4f_is_error;
    static void *kl_lz4_ctx;
    static kl_zstd_stream_t kl_zstd_stream;
    static kl_zstd_reset_t kl_zstd_reset;
    static kl_zstd_is_error_t kl_zstd_is_error;
    static void *kl_zstd_ctx;

    /* bit 3 (lz4) and bit 4 (zstd), as Kafka's codec ids: which ones are here */
    static int kl_codecs_init(void) {
        int have = 0;
        void *lib = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            kl_lz4f_create = (kl_lz4f_create_t)dlsym(lib, "LZ4F_createDecompressionContext");
            kl_lz4f_free = (kl_lz4f_free_t)dlsym(lib, "LZ4F_freeDecompressionContext");
            kl_lz4f_decompress = (kl_lz4f_decompress_t)dlsym(lib, "LZ4F_decompress");
            kl_lz4f_is_error = (kl_lz4f_is_error_t)dlsym(lib, "LZ4F_isError");
            /* 100: LZ4F_VERSION, the frame API's version since lz4 r128 */
            if (kl_lz4f_create && kl_lz4f_free && kl_lz4f_decompress && kl_lz4f_is_error
                    && !kl_lz4f_is_error(kl_lz4f_create(&kl_lz4_ctx, 100)) && kl_lz4_ctx)
                have |= 1 << 3;
        }
        lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            kl_zstd_create_t create = (kl_zstd_create_t)dlsym(lib, "ZSTD_createDCtx");
            kl_zstd_stream = (kl_zstd_stream_t)dlsym(lib, "ZSTD_decompressStream");
            kl_zstd_reset = (kl_zstd_reset_t)dlsym(lib, "ZSTD_DCtx_reset");
            kl_zstd_is_error = (kl_zstd_is_error_t)dlsym(lib, "ZSTD_isError");
            if (create && kl_zstd_stream && kl_zstd_reset && kl_zstd_is_error
                    && (kl_zstd_ctx = create()) != NULL)
                have |= 1 << 4;
        }
        return have;
    }

    /* Grow *out (capacity *cap) for more output, never past limit + 1 bytes
       (one byte more than the limit is how "too big" is seen). 0, or -1. */
    static int kl_grow(char **out, size_t *cap, size_t limit) {
        size_t want = *cap < 65536 ? 65536 : *cap * 2;
        if (*cap >= limit + 1) return -1;
        if (want > limit + 1) want = limit + 1;
        char *p = (char *)realloc(*out, want);
        if (!p) return -1;
        *out = p; *cap = want;
        return 0;
    }

    /* Inflate n bytes of a Kafka lz4 (codec 3) or zstd (codec 4) payload into
       *out (grown as needed). The length, or -1 where the Python codec must
       decide: an error, truncation, more than limit bytes, a missing library.
       Concatenated frames are decoded one after the other, as the Python
       codecs do; the context is reset after every use. The GIL is held (one
       context per process). */
    static Py_ssize_t kl_inflate(int codec, const uint8_t *src, size_t n, size_t limit,
                                 char **out, size_t *cap) {
        size_t in_pos = 0, out_pos = 0;
        if (codec == 3 && kl_lz4_ctx) {
            while (in_pos < n) {
                for (;;) {
                    if (out_pos == *cap && kl_grow(out, cap, limit) < 0) goto lz4_fail;
                    size_t dst = *cap - out_pos, got = n - in_pos;
                    size_t r = kl_lz4f_decompress(kl_lz4_ctx, *out + out_pos, &dst,
                                                  src + in_pos, &got, NULL);
                    if (kl_lz4f_is_error(r)) goto lz4_fail;
                    in_pos += got; out_pos += dst;
                    if (out_pos > limit) goto lz4_fail;
                    if (r == 0) break;  /* the frame is complete */
                    if (in_pos == n && out_pos < *cap) goto lz4_fail;  /* truncated */
                    if (got == 0 && dst == 0 && out_pos < *cap) goto lz4_fail;
                }
            }
            return (Py_ssize_t)out_pos;
        lz4_fail:
            /* a fresh context: LZ4F_resetDecompressionContext (1.9.4) keeps the
               remaining content size of a frame left unfinished, and the next
               frame without a content size then fails with frameSize_wrong */
            kl_lz4f_free(kl_lz4_ctx);
            kl_lz4_ctx = NULL;
            if (kl_lz4f_is_error(kl_lz4f_create(&kl_lz4_ctx, 100))) kl_lz4_ctx = NULL;
            return -1;
        }
        if (codec == 4 && kl_zstd_ctx) {
            kl_zstd_in in = {src, n, 0};
            kl_zstd_out o;
            size_t r = 0;
            while (in.pos < n || r != 0) {
                if (out_pos == *cap && kl_grow(out, cap, limit) < 0) goto zstd_fail;
                o.dst = *out; o.size = *cap; o.pos = out_pos;
                size_t before = in.pos;
                r = kl_zstd_stream(kl_zstd_ctx, &o, &in);
                if (kl_zstd_is_error(r)) goto zstd_fail;
                int progress = o.pos != out_pos || in.pos != before;
                out_pos = o.pos;
                if (out_pos > limit) goto zstd_fail;
                if (r != 0 && in.pos == n && out_pos < *cap) goto zstd_fail;  /* truncated */
                if (!progress && out_pos < *cap) goto zstd_fail;
            }
            kl_zstd_reset(kl_zstd_ctx, 1);  /* ZSTD_reset_session_only */
            return (Py_ssize_t)out_pos;
        zstd_fail:
            kl_zstd_reset(kl_zstd_ctx, 1);
            return -1;
        }
        return -1;
    }
    """
    int kl_codecs_init() noexcept
    Py_ssize_t kl_inflate(int codec, const uint8_t* src, size_t n, size_t limit,
                          char** out, size_t* cap) noexcept

from libc.stdlib cimport free
from cpython cimport array
from cpython.buffer cimport PyBuffer_FillInfo

cdef extern from *:
    """
    #include <stdlib.h>
    #include <sys/mman.h>
    /* Memory for buffers, aligned as Arrow aligns its own (64 bytes); a big one (2 MiB
       and more) on a 2 MiB boundary, with the kernel asked for transparent huge pages
       there: one fault and one zeroing per 2 MiB written, not one per 4 KiB (buffers
       from Arrow's memory pool, before, faulted about as rarely: a first decode of
       bench_fast's small/none took ~650 faults, ~6,700 here, ~14,700 without this). */
    #define KL_HUGE ((size_t)2 << 20)
    static void *kl_allocate(size_t size) {
        void *p = NULL;
        if (posix_memalign(&p, size >= KL_HUGE ? KL_HUGE : 64, size) != 0)
            return NULL;
    #ifdef MADV_HUGEPAGE
        if (size >= KL_HUGE)
            madvise(p, size, MADV_HUGEPAGE);
    #endif
        return p;
    }
    """
    void* kl_allocate(size_t size) nogil

#: Kafka codec ids the system's C libraries inflate here (the rest go to kafkalog.codecs)
cdef int _C_CODEC_BITS = kl_codecs_init()
C_CODECS = frozenset(c for c in (3, 4) if _C_CODEC_BITS & (1 << c))


cdef class _Inflater:
    """One reusable output buffer for :c:func:`kl_inflate`."""

    cdef char* out
    cdef size_t cap

    def __cinit__(self):
        self.out = NULL
        self.cap = 0

    def __dealloc__(self):
        free(self.out)

    cdef Py_ssize_t inflate(self, int codec, const uint8_t* src, size_t n, size_t limit) noexcept:
        return kl_inflate(codec, src, n, limit, &self.out, &self.cap)

    cdef void trim(self) noexcept:
        """Give back a buffer a rare huge batch grew (batches are ~1 MiB by default)."""
        if self.cap > (16 << 20):
            free(self.out)
            self.out = NULL
            self.cap = 0


cdef _Inflater _INFLATER = _Inflater()


def inflate(int codec, const uint8_t[::1] data, size_t limit):
    """``data`` inflated by the C libraries (codec 3 lz4 or 4 zstd, v2
    framing), or None where :func:`kafkalog.codecs.decompress` must decide.
    For tests: the fast path uses the same code on every compressed batch."""
    cdef _Inflater inflater = _Inflater()
    cdef Py_ssize_t n = inflater.inflate(codec, &data[0] if data.shape[0] else NULL,
                                         data.shape[0], limit)
    if n < 0:
        return None
    return inflater.out[:n] if n else b""


def crc32c(const uint8_t[::1] data, bint software=False):
    """CRC-32C as the fast path computes it (hardware where the CPU has it;
    ``software`` forces the table twin). Tests compare both with ``crc32c``."""
    return kl_crc32c(&data[0] if data.shape[0] else NULL, data.shape[0], software)


from .model import CREATE_TIME, LOG_APPEND_TIME

# The v2 batch layout of ``default_records`` (its HEADER and *_OFFSET constants, derived the
# same way) as C constants, so the C compiler folds them; V2_LAYOUT exports them and
# tests/test_accel.py pins them to ``default_records``.
cdef enum:
    BASE_OFFSET_OFFSET = 0
    LENGTH_OFFSET = BASE_OFFSET_OFFSET + 8
    PARTITION_LEADER_EPOCH_OFFSET = LENGTH_OFFSET + 4
    MAGIC_OFFSET = PARTITION_LEADER_EPOCH_OFFSET + 4
    CRC_OFFSET = MAGIC_OFFSET + 1
    CRC_LENGTH = 4
    ATTRIBUTES_OFFSET = CRC_OFFSET + CRC_LENGTH
    LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + 2
    BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + 4
    MAX_TIMESTAMP_OFFSET = BASE_TIMESTAMP_OFFSET + 8
    PRODUCER_ID_OFFSET = MAX_TIMESTAMP_OFFSET + 8
    PRODUCER_EPOCH_OFFSET = PRODUCER_ID_OFFSET + 8
    BASE_SEQUENCE_OFFSET = PRODUCER_EPOCH_OFFSET + 2
    RECORDS_COUNT_OFFSET = BASE_SEQUENCE_OFFSET + 4
    RECORDS_OFFSET = RECORDS_COUNT_OFFSET + 4
    LOG_OVERHEAD = LENGTH_OFFSET + 4
    MIN_LENGTH = RECORDS_OFFSET - LOG_OVERHEAD
    COMPRESSION_CODEC_MASK = 0x07
    TIMESTAMP_TYPE_MASK = 0x08
    TRANSACTIONAL_FLAG_MASK = 0x10
    CONTROL_FLAG_MASK = 0x20
    DELETE_HORIZON_FLAG_MASK = 0x40

cdef enum:
    # int64s in a row of frame_v2: len(log_reader.FRAME_COLUMNS) (the tests compare the
    # rows with the pure loop's)
    FRAME_WIDTH = 8


def frame_v2(const uint8_t[::1] buf, Py_ssize_t pos, int64_t base, int64_t max_size,
             array.array out):
    """Frame consecutive v2 batches of ``buf`` from ``pos``: the compiled twin of the
    loop of ``log_reader.frame``, which decides everything else. Per batch, a row of
    ``log_reader.FRAME_COLUMNS`` in their order is appended to ``out`` (an
    ``array('q')``): position + ``base``, size, magic, base offset, last offset, stored
    CRC, whether the CRC verifies, 1 (the base offset is known). Stops at the first
    entry that is not a plausible, complete v2 batch whose last offset stays in int64;
    returns the position reached."""
    cdef Py_ssize_t n = buf.shape[0], used = len(out), cap
    cdef const uint8_t* d = &buf[0] if n else NULL
    cdef int64_t size, end, first, delta
    cdef int64_t top = 0x7FFFFFFFFFFFFFFF
    cdef uint32_t crc
    cdef int64_t* row
    cdef bint full = True
    if out.typecode != "q":
        raise TypeError(f"frame_v2: rows go into an array('q'), not array({out.typecode!r})")
    while full:
        # room for the rows of batches 64 times the smallest (more come in another round)
        cap = used + FRAME_WIDTH * ((n - pos) // (LOG_OVERHEAD + MIN_LENGTH) // 64 + 1024)
        array.resize(out, cap)
        full = False
        with nogil:
            while n - pos > MAGIC_OFFSET and d[pos + MAGIC_OFFSET] == 2:
                if used == cap:
                    full = True
                    break
                size = kl_be32(d + pos + LENGTH_OFFSET)
                end = pos + LOG_OVERHEAD + size
                if size < MIN_LENGTH or size > max_size or end > n:
                    break
                first = kl_be64(d + pos + BASE_OFFSET_OFFSET)
                delta = kl_be32(d + pos + LAST_OFFSET_DELTA_OFFSET)
                if (delta > 0 and first > top - delta) or (delta < 0 and first < -top - 1 - delta):
                    break  # the last offset leaves int64: Python's twin decides
                crc = <uint32_t>kl_be32(d + pos + CRC_OFFSET)
                row = <int64_t*>out.data.as_longlongs + used
                row[0] = base + pos
                row[1] = end - pos
                row[2] = 2
                row[3] = first
                row[4] = first + delta
                row[5] = crc
                row[6] = kl_crc32c(d + pos + ATTRIBUTES_OFFSET,
                                   <size_t>(end - pos - ATTRIBUTES_OFFSET), 0) == crc
                row[7] = 1
                used += FRAME_WIDTH
                pos = end
    array.resize(out, used)
    return pos


V2_LAYOUT = {
    "BASE_OFFSET_OFFSET": BASE_OFFSET_OFFSET, "LENGTH_OFFSET": LENGTH_OFFSET,
    "PARTITION_LEADER_EPOCH_OFFSET": PARTITION_LEADER_EPOCH_OFFSET, "MAGIC_OFFSET": MAGIC_OFFSET,
    "CRC_OFFSET": CRC_OFFSET, "CRC_LENGTH": CRC_LENGTH, "ATTRIBUTES_OFFSET": ATTRIBUTES_OFFSET,
    "LAST_OFFSET_DELTA_OFFSET": LAST_OFFSET_DELTA_OFFSET,
    "BASE_TIMESTAMP_OFFSET": BASE_TIMESTAMP_OFFSET, "MAX_TIMESTAMP_OFFSET": MAX_TIMESTAMP_OFFSET,
    "PRODUCER_ID_OFFSET": PRODUCER_ID_OFFSET, "PRODUCER_EPOCH_OFFSET": PRODUCER_EPOCH_OFFSET,
    "BASE_SEQUENCE_OFFSET": BASE_SEQUENCE_OFFSET, "RECORDS_COUNT_OFFSET": RECORDS_COUNT_OFFSET,
    "RECORDS_OFFSET": RECORDS_OFFSET, "LOG_OVERHEAD": LOG_OVERHEAD, "MIN_LENGTH": MIN_LENGTH,
    "COMPRESSION_CODEC_MASK": COMPRESSION_CODEC_MASK, "TIMESTAMP_TYPE_MASK": TIMESTAMP_TYPE_MASK,
    "TRANSACTIONAL_FLAG_MASK": TRANSACTIONAL_FLAG_MASK, "CONTROL_FLAG_MASK": CONTROL_FLAG_MASK,
    "DELETE_HORIZON_FLAG_MASK": DELETE_HORIZON_FLAG_MASK,
}

cdef int64_t INT64_MAX = 0x7FFFFFFFFFFFFFFF
cdef int64_t INT64_MIN = -INT64_MAX - 1
cdef int64_t INT32_MAX = 0x7FFFFFFF
cdef int64_t BINARY_LIMIT = 0x7FFFFFFF  # int32 offsets of Arrow binary/string

_TS_NAMES = (b"CreateTime", b"LogAppendTime", None)  # index: the codes below
_CODEC_NAMES = (b"none", b"gzip", b"snappy", b"lz4", b"zstd")
_CODEC_STR = ("none", "gzip", "snappy", "lz4", "zstd")
_TS_CODES = {"CreateTime": 0, "LogAppendTime": 1, None: 2}
_CODEC_CODES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
cdef int8_t _TS_NULL = 2  # _TS_CODES[None]: a v0 record has no timestamp type


#: Memory of buffers of at least SPARE_MIN bytes that freed tables (or a buffer that
#: grew) gave back, for the next chunk or call: (allocated bytes, address), oldest
#: first. The allocator would give big blocks' pages back to the kernel, and every
#: 4 KiB written again is then a page fault: on a VM several microseconds each, a
#: third of a call's time or more.
cdef list _spare = []
cdef Py_ssize_t _spare_bytes = 0
cdef Py_ssize_t _spare_limit = 128 << 20
SPARE_MIN = 64 << 10
cdef Py_ssize_t _SPARE_MIN = SPARE_MIN


def spare_limit(object limit=None):
    """The most bytes kept for reuse (``limit``: set it; 0 frees them and keeps none)."""
    global _spare_limit
    if limit is not None:
        if limit < 0:
            raise ValueError("spare_limit: limit must be >= 0")
        _spare_limit = limit
        while _spare_bytes > _spare_limit:
            _drop_oldest()
    return _spare_limit


def spare_bytes():
    """Bytes kept for reuse now."""
    return _spare_bytes


cdef void _drop_oldest():
    global _spare_bytes
    room, address = _spare.pop(0)
    free(<void*><uintptr_t>address)
    _spare_bytes -= room


cdef void _release(char* p, Py_ssize_t room):
    """Memory no one uses any more (``room`` bytes at ``p``): kept for reuse if it is
    big enough and fits the limit, else freed."""
    global _spare_bytes
    if p == NULL:
        return
    if _spare is None or room < _SPARE_MIN or room > _spare_limit:
        free(p)
        return
    while _spare and _spare_bytes + room > _spare_limit:
        _drop_oldest()
    _spare.append((room, <uintptr_t>p))
    _spare_bytes += room


cdef char* _allocate(Py_ssize_t size) except NULL:
    cdef void* p = kl_allocate(<size_t>size)
    if p == NULL:
        raise MemoryError(f"kafkalog: cannot allocate {size} bytes")
    return <char*>p


cdef class _Buf:
    """A growable byte buffer, and then a column's buffer without a copy.

    :meth:`buffer` ends the writing and hands the object itself over; it is read
    through the buffer protocol (read-only; ``kafkalog.arrow`` wraps it with
    ``pyarrow.py_buffer``), and Arrow holds it as long as a table needs it. When
    nothing holds it any more its memory goes to :func:`_release` (kept for the next
    buffers when big). One that grows to ``SPARE_MIN`` bytes or more starts from
    kept memory where some fits: its pages are mapped, so writing them costs no
    page fault.
    """

    cdef char* p
    cdef Py_ssize_t n
    cdef Py_ssize_t cap  # bytes that may be written: what was reserved
    cdef Py_ssize_t room  # bytes allocated (kept memory can have more than cap)
    cdef bint spent  # handed over: nothing is written after that

    def __cinit__(self):
        self.cap = self.room = 4096
        self.p = _allocate(self.room)
        self.n = 0
        self.spent = False

    def __dealloc__(self):
        _release(self.p, self.room)
        self.p = NULL

    def __getbuffer__(self, Py_buffer* view, int flags):
        if not self.spent:
            raise BufferError("kafkalog: a buffer is read before it is written whole")
        PyBuffer_FillInfo(view, self, self.p, self.n, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass

    cdef inline int reserve(self, Py_ssize_t extra) except -1:
        if self.n + extra > self.cap:
            return self._grow(self.n + extra)
        return 0

    cdef int _grow(self, Py_ssize_t want) except -1:
        """Room for ``want`` bytes (twice the reservation at least)."""
        global _spare_bytes
        cdef Py_ssize_t i, best = -1, room, best_room = 0
        cdef char* p
        if self.spent:
            raise RuntimeError("kafkalog: a buffer was written after it went into a table")
        if want < 2 * self.cap:
            want = 2 * self.cap
        if want > self.room:
            # the smallest kept memory that fits, not more than 4x too big (a small
            # need leaves the big ones to the big needs), else a new allocation
            if want >= _SPARE_MIN:
                for i in range(len(_spare)):
                    room = _spare[i][0]
                    if want <= room <= 4 * want and (best < 0 or room < best_room):
                        best, best_room = i, room
            if best >= 0:
                _, address = _spare.pop(best)
                _spare_bytes -= best_room
                p = <char*><uintptr_t>address
            else:
                p = _allocate(want)
                best_room = want
            memcpy(p, self.p, self.n)
            _release(self.p, self.room)  # (kept if big: the next buffers grow into it)
            self.p, self.room = p, best_room
        self.cap = want
        return 0

    cdef inline void put_i64(self, int64_t v) noexcept:
        (<int64_t*>(self.p + self.n))[0] = v
        self.n += 8

    cdef inline void put_i32(self, int32_t v) noexcept:
        (<int32_t*>(self.p + self.n))[0] = v
        self.n += 4

    cdef _Buf buffer(self):
        """The bytes written, for a column: this object, spent."""
        if self.spent:
            raise RuntimeError("kafkalog: a buffer went into a table twice")
        self.spent = True
        return self


cdef class _Binary:
    """Offsets (int32) and data of a binary or string column, and its nulls.

    Nulls are rare, so their row numbers are listed (``nulls``, int32) and
    the validity bitmap is made at :meth:`array` time, only if there are any.
    """

    cdef _Buf offsets
    cdef _Buf data
    cdef _Buf nulls
    cdef public Py_ssize_t count

    def __cinit__(self):
        self.offsets = _Buf()
        self.data = _Buf()
        self.nulls = _Buf()
        self.count = 0
        self.offsets.reserve(4)
        self.offsets.put_i32(0)

    cdef int put(self, const uint8_t* src, Py_ssize_t length) except -1:
        # one value (length -1: null), through the same cursor as the hot loop
        cdef _Out o
        _open(self, &o, 1, length if length > 0 else 0)
        _put(&o, src, length)
        _commit(self, &o)
        return 0

    cdef tuple buffers(self, Py_ssize_t n):
        """The column of ``n`` values in Arrow's layout: (validity bitmap or None,
        int32 offsets, data)."""
        cdef Py_ssize_t k, row, nnulls = self.nulls.n // 4
        cdef const int32_t* nulls = <const int32_t*>self.nulls.p
        cdef _Buf bits
        validity = None
        if nnulls:
            bits = _Buf()
            bits.reserve(n // 8 + 1)
            memset(bits.p, 0xFF, n // 8 + 1)
            bits.n = (n + 7) // 8
            for k in range(nnulls):
                row = nulls[k]
                bits.p[row >> 3] &= <char>~(1 << (row & 7))
            validity = bits.buffer()
        return (validity, self.offsets.buffer(), self.data.buffer())


cdef inline int _varint(const uint8_t* d, Py_ssize_t end, Py_ssize_t* pos, int max_bytes,
                        int64_t* out) noexcept nogil:
    """Zigzag varint (max_bytes 5) or varlong (10); -1 where Python raises."""
    cdef uint64_t result = 0
    cdef Py_ssize_t p = pos[0]
    cdef uint8_t b
    cdef int i
    for i in range(max_bytes):
        if p >= end:
            return -1
        b = d[p]
        p += 1
        if i == 9 and (b & 0x7F) > 1:
            return -1  # wider than 64 bits
        result |= (<uint64_t>(b & 0x7F)) << (7 * i)
        if not (b & 0x80):
            if max_bytes == 5 and (result >> 32):
                return -1  # wider than 32 bits
            pos[0] = p
            out[0] = <int64_t>((result >> 1) ^ (0 - (result & 1)))
            return 0
    return -1


cdef inline int _vi(const uint8_t* d, Py_ssize_t end, Py_ssize_t* pos, int max_bytes,
                    int64_t* out) noexcept nogil:
    """:func:`_varint` with the one- and two-byte cases inlined."""
    cdef Py_ssize_t p = pos[0]
    cdef uint64_t r
    if p + 1 < end:
        r = d[p]
        if r < 0x80:
            pos[0] = p + 1
            out[0] = <int64_t>((r >> 1) ^ (0 - (r & 1)))
            return 0
        if d[p + 1] < 0x80:
            r = (r & 0x7F) | (<uint64_t>d[p + 1] << 7)
            pos[0] = p + 2
            out[0] = <int64_t>((r >> 1) ^ (0 - (r & 1)))
            return 0
    return _varint(d, end, pos, max_bytes, out)


cdef inline bint _utf8_ok(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Strict UTF-8, as Python's decoder: no overlongs, surrogates or > U+10FFFF."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
        elif 0xC2 <= c <= 0xDF:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif 0xE0 <= c <= 0xEF:
            if i + 2 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return False
            if c == 0xE0 and c1 < 0xA0:
                return False  # overlong
            if c == 0xED and c1 >= 0xA0:
                return False  # surrogate
            i += 3
        elif 0xF0 <= c <= 0xF4:
            if i + 3 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            if c == 0xF0 and c1 < 0x90:
                return False  # overlong
            if c == 0xF4 and c1 >= 0x90:
                return False  # above U+10FFFF
            i += 4
        else:
            return False
    return True


cdef inline int64_t _sequence(int64_t base, int64_t delta) noexcept nogil:
    # model.increment_sequence
    if base < 0:
        return -1
    if base > INT32_MAX - delta:
        return delta - (INT32_MAX - base) - 1
    return base + delta


cdef struct _Out:
    # a write cursor into a _Binary: nothing is visible until _commit
    int32_t* offsets  # entry i + 1 is written for value i
    char* data
    int32_t* nulls  # row numbers of null values
    Py_ssize_t nvals
    Py_ssize_t nnulls
    int32_t ndata


cdef inline int _open(_Binary col, _Out* o, Py_ssize_t values, Py_ssize_t data) except -1:
    col.offsets.reserve(4 * values)
    col.data.reserve(data)
    col.nulls.reserve(4 * values)
    o.offsets = <int32_t*>col.offsets.p
    o.data = col.data.p
    o.nulls = <int32_t*>col.nulls.p
    o.nvals = col.count
    o.nnulls = col.nulls.n // 4
    o.ndata = <int32_t>col.data.n
    return 0


cdef inline void _put(_Out* o, const uint8_t* src, int64_t length) noexcept nogil:
    cdef Py_ssize_t i = o.nvals
    cdef char* dst
    if length >= 0:
        dst = o.data + o.ndata
        if length <= 16:  # keys, header names: a call to memcpy costs more than the copy
            kl_copy_small(dst, src, length)
        else:
            memcpy(dst, src, length)
        o.ndata += <int32_t>length
    else:
        o.nulls[o.nnulls] = <int32_t>i
        o.nnulls += 1
    o.offsets[i + 1] = o.ndata
    o.nvals = i + 1


cdef inline int _nullable(const uint8_t* d, Py_ssize_t end, Py_ssize_t* pos, _Out* o) noexcept nogil:
    """A varint length (-1: null) and that many bytes, into ``o``; -1 where
    the length is malformed or runs past ``end``."""
    cdef int64_t n
    if _vi(d, end, pos, 5, &n) < 0 or n < -1 or pos[0] + n > end:
        return -1
    _put(o, d + pos[0], n)
    if n > 0:
        pos[0] += n
    return 0


cdef inline void _commit(_Binary col, _Out* o) noexcept:
    col.offsets.n = 4 * (o.nvals + 1)
    col.data.n = o.ndata
    col.nulls.n = 4 * o.nnulls
    col.count = o.nvals


cdef struct Run:
    # one batch's lineage: the same for its ``count`` rows
    Py_ssize_t count
    int64_t position
    int64_t base_offset
    int64_t last_offset
    int64_t producer_id
    int64_t base_sequence
    int32_t leader_epoch
    int16_t producer_epoch
    int8_t magic
    int8_t codec
    int8_t ts_type
    int8_t txn
    int8_t crc
    int8_t v2


cdef class RecordColumns:
    """The records table in Arrow's memory layout.

    Per record only offset, timestamp, key, value and headers are written;
    the batch lineage is kept once per batch (:c:type:`Run`) and expanded into
    its columns at :meth:`flush`, as are the timestamp validity and sequence.
    """

    cdef public Py_ssize_t rows
    cdef public Py_ssize_t nbytes
    #: scan_run stopped at a batch whose values would not fit the buffer
    #: :meth:`expect` sized: flush before more is added
    cdef public bint no_room
    cdef bint dictionary  # timestamp_type and compression as int8 codes, not strings
    cdef _Buf runs, offset, ts, hlist
    cdef _Binary key, value, hkey, hvalue
    cdef Py_ssize_t expected
    cdef Py_ssize_t expected_rows
    cdef Py_ssize_t last_values  # value bytes of the chunk flushed last

    def __init__(self, bint dictionary):
        self.dictionary = dictionary
        self.expected = 0
        self.expected_rows = 0
        self.last_values = 0
        self._reset()

    def expect(self, Py_ssize_t nbytes, Py_ssize_t max_rows=0):
        """Size the buffers for about ``nbytes`` of records (and at most
        ``max_rows`` rows), now and after each flush. Growing a buffer by
        doubling copies it into fresh pages every time, which costs more than
        the decoding (page faults); one reservation of the right size does not.
        Nor should it be far too big: the allocator takes big blocks from the
        OS and gives them back when freed, and the kernel's transparent huge
        pages zero 2 MiB at the first byte written, so every block costs.
        After the first flush the value buffer follows the last chunk's value
        bytes (a quarter more); a chunk that needs more ends early (``no_room``)."""
        self.expected = nbytes
        self.expected_rows = max_rows
        self._presize()

    cdef int _presize(self) except -1:
        cdef Py_ssize_t n = self.expected, rows, values
        if n <= 0:
            return 0
        rows = n // 64  # records of 64 bytes and more on average; more rows grow the buffers
        if 0 < self.expected_rows < rows:
            rows = self.expected_rows + 2048  # a chunk ends past max_rows, at its batch's end
        values = n
        if 0 < self.last_values < n:
            values = min(n, self.last_values + self.last_values // 4 + 65536)
        self.value.data.reserve(values)
        self.key.data.reserve(min(n // 8, 32 * rows))
        self.value.offsets.reserve(4 * rows + 4)
        self.key.offsets.reserve(4 * rows + 4)
        self.hlist.reserve(4 * rows + 4)
        self.offset.reserve(8 * rows)
        self.ts.reserve(8 * rows)
        return 0

    def _reset(self):
        self.rows = 0
        self.nbytes = 0
        self.no_room = False
        self.runs = _Buf()
        self.offset = _Buf()
        self.ts = _Buf()
        self.key = _Binary()
        self.value = _Binary()
        self.hkey = _Binary()
        self.hvalue = _Binary()
        self.hlist = _Buf()
        self.hlist.reserve(4)
        self.hlist.put_i32(0)
        self._presize()

    cdef int _add_run(self, Py_ssize_t count, int64_t position, int64_t base_offset,
                      int64_t last_offset, int64_t producer_id, int64_t base_sequence,
                      int64_t leader_epoch, int64_t producer_epoch, int magic, int codec,
                      int ts_type, bint txn, int crc, bint v2) except -1:
        cdef Run* r
        self.runs.reserve(sizeof(Run))
        r = <Run*>(self.runs.p + self.runs.n)
        r.count = count
        r.position = position
        r.base_offset = base_offset
        r.last_offset = last_offset
        r.producer_id = producer_id
        r.base_sequence = base_sequence
        r.leader_epoch = <int32_t>leader_epoch
        r.producer_epoch = <int16_t>producer_epoch
        r.magic = <int8_t>magic
        r.codec = <int8_t>codec
        r.ts_type = <int8_t>ts_type
        r.txn = 1 if txn else 0
        r.crc = <int8_t>crc
        r.v2 = 1 if v2 else 0
        self.runs.n += sizeof(Run)
        return 0

    def add_v2(self, const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset,
               int64_t last_offset, int64_t base_timestamp, int64_t max_timestamp,
               bint log_append, int64_t position, Py_ssize_t size, str compression,
               int64_t producer_id, int producer_epoch, int64_t base_sequence,
               int64_t leader_epoch, bint transactional, object crc_valid):
        """Append the ``count`` records of one v2 batch; -1 (and nothing
        appended) where the pure-Python reader must decide."""
        cdef Py_ssize_t end = data.shape[0]
        if compression not in _CODEC_CODES:
            return -1
        return self._parse_v2(
            &data[0] if end > 0 else NULL, end, count, base_offset, last_offset,
            base_timestamp, max_timestamp, log_append, position, size,
            _CODEC_CODES[compression], producer_id, producer_epoch, base_sequence, leader_epoch,
            transactional, 2 if crc_valid is None else (1 if crc_valid else 0))

    cdef Py_ssize_t _parse_v2(self, const uint8_t* d, Py_ssize_t end, Py_ssize_t count,
                              int64_t base_offset, int64_t last_offset, int64_t base_timestamp,
                              int64_t max_timestamp, bint log_append, int64_t position,
                              Py_ssize_t size, int codec, int64_t producer_id,
                              int64_t producer_epoch, int64_t base_sequence, int64_t leader_epoch,
                              bint transactional, int crc_code) except -2:
        """The records of one v2 batch into the columns: ``count``, or -1 with
        nothing appended. ``end`` bytes bound everything the records can add,
        so buffers are reserved once; the loop writes through cursors that
        are committed only when the whole batch parsed.
        """
        cdef Py_ssize_t pos = 0, record_end, i, h, max_headers = end // 2 + 1
        cdef int64_t length, ts_delta, offset_delta, hcount, hk
        cdef int64_t* off_out
        cdef int64_t* ts_out
        cdef int32_t* hl_out
        cdef _Out key, value, hkey, hvalue
        if count < 0 or count * 7 > end:
            return -1
        if not (INT64_MIN + (1 << 31) <= base_offset <= INT64_MAX - (1 << 31)):
            return -1
        if self.key.data.n + end > BINARY_LIMIT or self.hkey.data.n + end > BINARY_LIMIT \
                or self.value.data.n + end > BINARY_LIMIT or self.hvalue.data.n + end > BINARY_LIMIT:
            return -1
        self.offset.reserve(8 * count)
        self.ts.reserve(8 * count)
        self.hlist.reserve(4 * count)
        _open(self.key, &key, count, end)
        _open(self.value, &value, count, end)
        _open(self.hkey, &hkey, max_headers, end)
        _open(self.hvalue, &hvalue, max_headers, end)
        off_out = <int64_t*>(self.offset.p + self.offset.n)
        ts_out = <int64_t*>(self.ts.p + self.ts.n)
        hl_out = <int32_t*>(self.hlist.p + self.hlist.n)
        for i in range(count):
            if _vi(d, end, &pos, 5, &length) < 0:
                return -1
            record_end = pos + length
            if length < 6 or record_end > end:
                return -1
            pos += 1  # attributes
            if _vi(d, record_end, &pos, 10, &ts_delta) < 0 \
                    or _vi(d, record_end, &pos, 5, &offset_delta) < 0:
                return -1
            if (ts_delta > 0 and base_timestamp > INT64_MAX - ts_delta) or \
                    (ts_delta < 0 and base_timestamp < INT64_MIN - ts_delta):
                return -1
            if _nullable(d, record_end, &pos, &key) < 0 or _nullable(d, record_end, &pos, &value) < 0:
                return -1
            if _vi(d, record_end, &pos, 5, &hcount) < 0 or hcount < 0 \
                    or hcount * 2 > record_end - pos:
                return -1
            for h in range(hcount):
                if _vi(d, record_end, &pos, 5, &hk) < 0 or hk < 0 or pos + hk > record_end \
                        or not _utf8_ok(d + pos, hk):
                    return -1
                _put(&hkey, d + pos, hk)
                pos += hk
                if _nullable(d, record_end, &pos, &hvalue) < 0:
                    return -1
            if pos != record_end:
                return -1
            hl_out[i] = <int32_t>hkey.nvals
            off_out[i] = base_offset + offset_delta
            ts_out[i] = max_timestamp if log_append else base_timestamp + ts_delta
        if pos != end:
            return -1
        # the batch parsed whole: commit the cursors
        self.offset.n += 8 * count
        self.ts.n += 8 * count
        self.hlist.n += 4 * count
        _commit(self.key, &key)
        _commit(self.value, &value)
        _commit(self.hkey, &hkey)
        _commit(self.hvalue, &hvalue)
        self._add_run(count, position, base_offset, last_offset, producer_id, base_sequence,
                      leader_epoch, producer_epoch, 2, codec,
                      1 if log_append else 0, transactional, crc_code, True)
        self.rows += count
        self.nbytes += size
        return count

    def scan_run(self, buf, const uint8_t[::1] view, Py_ssize_t pos, int64_t base,
                 bint verify_crc, limits, object prev_last, object decompress, list rows,
                 object batch_row, Py_ssize_t stop_rows, Py_ssize_t stop_bytes):
        """Consume consecutive *regular* v2 data batches from ``pos``.

        Regular: plausible size that fits, magic 2, not a control batch, a
        known codec that decompresses within the limits, CRC verified (when
        asked), offset above ``prev_last``, records that parse exactly. The
        first entry that is anything else is left to the Python reader, which
        then reports findings exactly as it always does. Returns
        ``(new_pos, prev_last)``; appends one batches-table row per batch to
        ``rows``, made by ``batch_row`` (unless ``rows`` is None). Stops once ``stop_rows`` rows or
        ``stop_bytes`` bytes of batches are held, or (after :meth:`expect`)
        before a batch whose values would not fit the value buffer
        (``no_room``), so the caller can flush.
        """
        cdef Py_ssize_t n = view.shape[0], size, end, count
        cdef const uint8_t* d = &view[0] if n > 0 else NULL
        cdef const uint8_t* h
        cdef const uint8_t* payload
        cdef Py_ssize_t payload_len
        cdef int64_t base_offset, last_offset, base_ts, max_ts, pid, prev = 0
        cdef int32_t leader_epoch, lod, bseq
        cdef int16_t attributes, pepoch
        cdef uint32_t crc, computed = 0
        cdef int codec
        cdef bint has_prev = prev_last is not None, log_append
        cdef Py_ssize_t max_entry = limits.max_entry_size - LOG_OVERHEAD
        cdef Py_ssize_t max_records = limits.max_records_per_batch
        cdef object max_inflated = limits.max_decompressed_size
        cdef const uint8_t[::1] inflated
        cdef size_t c_limit = max_inflated
        cdef int c_codecs = _C_CODEC_BITS
        if has_prev:
            prev = prev_last
        while pos + MAGIC_OFFSET < n and self.rows < stop_rows and self.nbytes < stop_bytes:
            h = d + pos
            size = kl_be32(h + LENGTH_OFFSET)
            end = pos + LOG_OVERHEAD + size
            if h[MAGIC_OFFSET] != 2 or size < MIN_LENGTH or size > max_entry or end > n:
                break
            base_offset = kl_be64(h + BASE_OFFSET_OFFSET)
            leader_epoch = kl_be32(h + PARTITION_LEADER_EPOCH_OFFSET)
            crc = <uint32_t>kl_be32(h + CRC_OFFSET)
            attributes = kl_be16(h + ATTRIBUTES_OFFSET)
            lod = kl_be32(h + LAST_OFFSET_DELTA_OFFSET)
            base_ts = kl_be64(h + BASE_TIMESTAMP_OFFSET)
            max_ts = kl_be64(h + MAX_TIMESTAMP_OFFSET)
            pid = kl_be64(h + PRODUCER_ID_OFFSET)
            pepoch = kl_be16(h + PRODUCER_EPOCH_OFFSET)
            bseq = kl_be32(h + BASE_SEQUENCE_OFFSET)
            count = kl_be32(h + RECORDS_COUNT_OFFSET)
            codec = attributes & COMPRESSION_CODEC_MASK
            if attributes & CONTROL_FLAG_MASK or codec > 4 or count > max_records:
                break  # control batches, unknown codecs, limits: the Python reader
            if not (INT64_MIN + (1 << 31) <= base_offset <= INT64_MAX - (1 << 31)):
                break
            last_offset = base_offset + lod
            if has_prev and base_offset <= prev:
                break  # offset_regression is the Python reader's finding
            if verify_crc:
                computed = kl_crc32c(h + ATTRIBUTES_OFFSET,
                                     size + LOG_OVERHEAD - ATTRIBUTES_OFFSET, 0)
                if computed != crc:
                    break
            log_append = (attributes & TIMESTAMP_TYPE_MASK) != 0
            if codec == 0:
                payload = h + RECORDS_OFFSET
                payload_len = size - MIN_LENGTH
            else:
                payload_len = -1
                if c_codecs & (1 << codec):
                    payload_len = _INFLATER.inflate(codec, h + RECORDS_OFFSET, size - MIN_LENGTH,
                                                    c_limit)
                    payload = <const uint8_t*>_INFLATER.out
                if payload_len < 0:  # no C library, or the Python codec must decide
                    try:
                        inflated = decompress(codec, buf[pos + RECORDS_OFFSET : end], 2,
                                              max_inflated)
                    except Exception:
                        break  # the Python reader decompresses again and reports it
                    payload_len = inflated.shape[0]
                    payload = &inflated[0] if payload_len > 0 else NULL
            if self.expected > 0 and self.rows > 0 \
                    and self.value.data.n + payload_len > self.value.data.cap:
                # compressed batches inflate past what expect() reserved from
                # the input size: growing would copy every value into fresh
                # pages, so this chunk ends here (the batch starts the next)
                self.no_room = True
                break
            if self._parse_v2(payload, payload_len, count, base_offset, last_offset, base_ts,
                              max_ts, log_append, base + pos, size + LOG_OVERHEAD, codec, pid,
                              pepoch, bseq, leader_epoch,
                              (attributes & TRANSACTIONAL_FLAG_MASK) != 0,
                              1 if verify_crc else 2) < 0:
                break
            if rows is not None:
                rows.append(batch_row(
                    base + pos, size + LOG_OVERHEAD, 2, base_offset, last_offset, count, crc,
                    computed if verify_crc else None, attributes, _CODEC_STR[codec],
                    LOG_APPEND_TIME if log_append else CREATE_TIME, base_ts, max_ts,
                    leader_epoch, pid, pepoch, bseq, lod,
                    (attributes & TRANSACTIONAL_FLAG_MASK) != 0, False,
                    (attributes & DELETE_HORIZON_FLAG_MASK) != 0))
            prev = last_offset
            has_prev = True
            pos = end
        _INFLATER.trim()
        return pos, (prev if has_prev else None)


    def add_batch(self, batch):
        """Append a Batch decoded by the pure-Python reader (its Record objects)."""
        cdef Py_ssize_t n = len(batch.records)
        is_v2 = batch.magic == 2
        crc_valid = batch.crc_valid
        self.offset.reserve(8 * n)
        self.ts.reserve(8 * n)
        self.hlist.reserve(4 * n)
        for r in batch.records:
            _put_py_bytes(self.key, r.key)
            _put_py_bytes(self.value, r.value)
            for hkey, hvalue in r.headers:
                _put_py_bytes(self.hkey, hkey.encode("utf-8"))
                _put_py_bytes(self.hvalue, hvalue)
            self.hlist.put_i32(<int32_t>self.hkey.count)
            self.offset.put_i64(r.offset)
            self.ts.put_i64(-1 if r.timestamp is None else r.timestamp)
        self._add_run(
            n, batch.position, batch.base_offset, batch.last_offset,
            batch.producer_id if is_v2 else 0, batch.base_sequence if is_v2 else -1,
            batch.partition_leader_epoch if is_v2 else 0, batch.producer_epoch if is_v2 else 0,
            batch.magic, _CODEC_CODES[batch.compression], _TS_CODES[batch.timestamp_type],
            batch.is_transactional, 2 if crc_valid is None else (1 if crc_valid else 0), is_v2,
        )
        self.rows += n
        self.nbytes += batch.size

    def flush(self):
        """The rows held so far, ``(rows, columns)``; starts afresh.

        ``columns`` maps each records-table column's name to its buffers in
        Arrow's layout for its type, validity bitmap (or None) first: (validity,
        data) for fixed-width columns and dictionary codes (int8, ``dictionary``),
        (validity, int32 offsets, data) for binary and string ones; ``headers`` is
        (int32 list offsets, keys, values), each of those ``(count, validity,
        offsets, data)``. ``kafkalog.arrow.FastSink`` makes them a RecordBatch.

        Batch lineage is one value per batch (run) here and is written out
        row by row, with the sequence (it follows the offset) and the
        timestamp validity (-1 is null), into buffers of this module (which
        start from kept memory, see :class:`_Buf`).
        """
        cdef Py_ssize_t n = self.rows, nruns = self.runs.n // sizeof(Run)
        cdef Py_ssize_t i, j, start = 0, stop
        cdef Run* runs = <Run*>self.runs.p
        cdef Run r
        cdef const int64_t* offsets = <const int64_t*>self.offset.p
        cdef const int64_t* tss = <const int64_t*>self.ts.p
        cdef bint all_v2 = True, any_null_crc = False, dictionary
        cdef _Buf position = _Buf(), base_off = _Buf(), last_off = _Buf(), producer_id = _Buf()
        cdef _Buf producer_epoch = _Buf(), leader_epoch = _Buf(), magic = _Buf(), sequence = _Buf()
        cdef _Buf ts_code = _Buf(), codec = _Buf(), txn = _Buf(), crc = _Buf(), crc_known = _Buf()
        cdef _Buf row_v2 = _Buf(), ts_valid = _Buf(), ts_known
        cdef int64_t* p_pos
        cdef int64_t* p_base
        cdef int64_t* p_last
        cdef int64_t* p_pid
        cdef int16_t* p_epoch
        cdef int32_t* p_leader
        cdef int32_t* p_seq
        cdef int8_t* p_magic
        cdef int8_t* p_ts
        cdef int8_t* p_codec
        cdef uint8_t* p_txn
        cdef uint8_t* p_crc
        cdef uint8_t* p_known
        cdef uint8_t* p_rv2
        cdef uint8_t* p_tsv
        cdef Py_ssize_t nbits = n // 8 + 1
        for b, width in ((position, 8), (base_off, 8), (last_off, 8), (producer_id, 8),
                         (producer_epoch, 2), (leader_epoch, 4), (sequence, 4), (magic, 1),
                         (ts_code, 1), (codec, 1)):
            (<_Buf>b).reserve(width * n + 8)
            (<_Buf>b).n = width * n
        for b in (txn, crc, crc_known, row_v2, ts_valid):
            (<_Buf>b).reserve(nbits)
            memset((<_Buf>b).p, 0, nbits)
            (<_Buf>b).n = (n + 7) // 8
        p_pos = <int64_t*>position.p; p_base = <int64_t*>base_off.p
        p_last = <int64_t*>last_off.p; p_pid = <int64_t*>producer_id.p
        p_epoch = <int16_t*>producer_epoch.p; p_leader = <int32_t*>leader_epoch.p
        p_seq = <int32_t*>sequence.p; p_magic = <int8_t*>magic.p
        p_ts = <int8_t*>ts_code.p; p_codec = <int8_t*>codec.p
        p_txn = <uint8_t*>txn.p; p_crc = <uint8_t*>crc.p; p_known = <uint8_t*>crc_known.p
        p_rv2 = <uint8_t*>row_v2.p; p_tsv = <uint8_t*>ts_valid.p
        for i in range(nruns):
            r = runs[i]
            stop = start + r.count
            if not r.v2:
                all_v2 = False
            if r.crc == 2:
                any_null_crc = True
            for j in range(start, stop):
                p_pos[j] = r.position
                p_base[j] = r.base_offset
                p_last[j] = r.last_offset
                p_pid[j] = r.producer_id
                p_epoch[j] = r.producer_epoch
                p_leader[j] = r.leader_epoch
                p_seq[j] = <int32_t>_sequence(r.base_sequence, offsets[j] - r.base_offset)
                p_magic[j] = r.magic
                p_ts[j] = r.ts_type
                p_codec[j] = r.codec
                if r.txn:
                    p_txn[j >> 3] |= <uint8_t>(1 << (j & 7))
                if r.crc == 1:
                    p_crc[j >> 3] |= <uint8_t>(1 << (j & 7))
                if r.crc != 2:
                    p_known[j >> 3] |= <uint8_t>(1 << (j & 7))
                if r.v2:
                    p_rv2[j >> 3] |= <uint8_t>(1 << (j & 7))
            start = stop
        for j in range(n):
            if tss[j] != -1:
                p_tsv[j >> 3] |= <uint8_t>(1 << (j & 7))

        v2_bits = None if all_v2 else row_v2.buffer()  # v0/v1 rows: no producer fields
        if self.dictionary:  # stream(dictionary=True): codes, no string per row
            ts_known = _Buf()
            ts_known.reserve(nbits)
            memset(ts_known.p, 0, nbits)
            ts_known.n = (n + 7) // 8
            p_known = <uint8_t*>ts_known.p
            any_null_ts = False
            for j in range(n):
                if p_ts[j] == _TS_NULL:
                    p_ts[j] = 0
                    any_null_ts = True
                else:
                    p_known[j >> 3] |= <uint8_t>(1 << (j & 7))
            ts_column = (ts_known.buffer() if any_null_ts else None, ts_code.buffer())
            codec_column = (None, codec.buffer())
        else:
            ts_column = _strings(p_ts, n, _TS_NAMES)
            codec_column = _strings(p_codec, n, _CODEC_NAMES)
        columns = {
            "offset": (None, self.offset.buffer()),
            "timestamp": (ts_valid.buffer(), self.ts.buffer()),
            "timestamp_type": ts_column,
            "key": self.key.buffers(n),
            "value": self.value.buffers(n),
            "headers": (self.hlist.buffer(),
                        (self.hkey.count, *self.hkey.buffers(self.hkey.count)),
                        (self.hvalue.count, *self.hvalue.buffers(self.hvalue.count))),
            "batch_position": (None, position.buffer()),
            "batch_base_offset": (None, base_off.buffer()),
            "batch_last_offset": (None, last_off.buffer()),
            "magic": (None, magic.buffer()),
            "compression": codec_column,
            "producer_id": (v2_bits, producer_id.buffer()),
            "producer_epoch": (v2_bits, producer_epoch.buffer()),
            "sequence": (v2_bits, sequence.buffer()),
            "partition_leader_epoch": (v2_bits, leader_epoch.buffer()),
            "is_transactional": (None, txn.buffer()),
            "crc_valid": (crc_known.buffer() if any_null_crc else None, crc.buffer()),
        }
        self.last_values = self.value.data.n
        self._reset()
        return n, columns


cdef inline int _put_py_bytes(_Binary col, object value) except -1:
    cdef const uint8_t[::1] view
    if value is None:
        col.put(NULL, -1)
    elif len(value) == 0:
        col.put(NULL, 0)
    else:
        view = value
        col.put(&view[0], view.shape[0])
    return 0


cdef tuple _strings(const int8_t* codes, Py_ssize_t n, tuple names):
    """A string column's buffers (:meth:`_Binary.buffers`) from one-byte codes into
    ``names`` (None: null)."""
    cdef _Binary col = _Binary()
    cdef _Out o
    cdef Py_ssize_t i, longest = max(len(x) for x in names if x is not None)
    cdef const uint8_t* ptrs[8]
    cdef int64_t lens[8]
    cdef Py_ssize_t k
    for k, name in enumerate(names):
        if name is None:
            ptrs[k] = NULL
            lens[k] = -1
        else:
            ptrs[k] = <const uint8_t*><char*>name
            lens[k] = len(name)
    _open(col, &o, n, n * longest)
    for i in range(n):
        _put(&o, ptrs[codes[i]], lens[codes[i]])
    _commit(col, &o)
    return col.buffers(n)
