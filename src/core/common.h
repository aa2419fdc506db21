/* Internal helpers shared by every portable module: error detail, checked
 * arithmetic, allocation. No ISA intrinsics here. */
#ifndef WNA16_CORE_COMMON_H
#define WNA16_CORE_COMMON_H

#include "core/clock.h"
#include "wna16.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WNA16_DETAIL_MAX 2048

/* Kernel tuning knobs (benchmarks compare paths with them, tests force
 * each path). A context holds one (wna16_ctx_tuning); internals reach it
 * through the wna16_diag they are handed, beside the callbacks
 * (wna16_tuning_of: d->hooks->tuning). Nothing here but act_int8 changes
 * a result's bits, only the path that computes it. Each knob acts where
 * the object it shapes is made or the call that reads it runs:
 *  - pack_interleave, value_pack, decode_max_m, act_int8: read by
 *    wna16_linear_pack (kernels/gemm.h); the packed linear records
 *    interleave, decode_max_m and act_int8, so every later gemm on it,
 *    whatever diag it is handed (a TP rank's, a MoE worker's), takes the
 *    path of the context that packed it; clones and concatenations keep their source's.
 *  - dense_tile_min_m: read by each wna16_dense_gemm_tuned call
 *    (kernels/dense.h). */
typedef struct wna16_tuning {
    /* bf16 activations: m <= this takes the streaming kernels, larger m the
     * dequantized panel (docs/kernels.md §Regimes); 0 forces the panel;
     * < 0: the default (no limit; on levels with int16 activations, their
     * table's gemv_i16_max_m). */
    int64_t decode_max_m;
    /* wna16_dense_gemm_tuned takes the level's tiled kernel from this many
     * rows (the per-output dot below); < 0: the level's dense_tile_min_m. */
    int64_t dense_tile_min_m;
    /* Block pairs of packed weights interleaved line by line (2) or not (1);
     * any other value: 2 when the active kernel table has 32-wide kernels,
     * else 1. Every kernel reads either layout. */
    int pack_interleave;
    /* Test knob: pack every value through the per-value placement instead
     * of whole source words (the same bytes; test_gemm compares them). */
    bool value_pack;
    /* The one knob that changes results: the quantized linears packed under
     * it take their bf16 activations as int8 (W4A8,
     * wna16_model_options.act_quant), recorded like decode_max_m. */
    bool act_int8;
} wna16_tuning;

/* Every knob at its default. */
#define WNA16_TUNING_DEFAULT                                                                       \
    ((wna16_tuning){.decode_max_m = -1,                                                            \
                    .dense_tile_min_m = -1,                                                        \
                    .pack_interleave = -1,                                                         \
                    .value_pack = false,                                                           \
                    .act_int8 = false})

/* What the caller set on the context: its callbacks (wna16_ctx_set_log/
 * progress/abort) and its kernel tuning (wna16_ctx_tuning). */
typedef struct wna16_hooks {
    wna16_log_fn log;
    void *log_user;
    wna16_log_level log_level;
    wna16_progress_fn progress;
    void *progress_user;
    wna16_abort_fn abort;
    void *abort_user;
    const wna16_tuning *tuning; /* NULL: the defaults */
} wna16_hooks;

/* Where a failing call writes its human-readable detail. Every internal
 * function that can fail on user data takes one (NULL is allowed). */
typedef struct wna16_diag {
    char detail[WNA16_DETAIL_MAX];
    const wna16_hooks *hooks; /* the context's callbacks and tuning; NULL for none */
} wna16_diag;

struct wna16_ctx {
    wna16_diag diag;
    wna16_hooks hooks;
    wna16_tuning tuning; /* WNA16_TUNING_DEFAULT from wna16_ctx_create */
};

#if defined(__GNUC__)
#define WNA16_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define WNA16_PRINTF(f, a)
#endif

/* Records the detail and returns status, so callers write
 *   return wna16_fail(d, WNA16_ERR_X, "tensor %s: ...", name); */
wna16_status wna16_fail(wna16_diag *d, wna16_status status, const char *fmt, ...)
    WNA16_PRINTF(3, 4);
/* Prefixes the existing detail with more context ("file.safetensors: ..."). */
void wna16_diag_prefix(wna16_diag *d, const char *fmt, ...) WNA16_PRINTF(2, 3);
void wna16_diag_clear(wna16_diag *d);

/* Says something through the context's log callback (or the process-wide
 * one when d has none); nothing when neither is set. */
void wna16_log(const wna16_diag *d, wna16_log_level level, const char *fmt, ...)
    WNA16_PRINTF(3, 4);
/* Reports progress to the context's callback, if any. */
void wna16_progress(const wna16_diag *d, const char *what, double done, double total);
/* WNA16_ERR_ABORTED (with a detail naming what) when the abort callback asks
 * to stop, else WNA16_OK. */
wna16_status wna16_check_abort(wna16_diag *d, const char *what);

static inline wna16_diag *wna16_ctx_diag(wna16_ctx *ctx) { return ctx ? &ctx->diag : NULL; }
/* The context's tuning, to change its knobs (NULL for a NULL context). Not
 * thread-safe against calls running on the context. */
static inline wna16_tuning *wna16_ctx_tuning(wna16_ctx *ctx) { return ctx ? &ctx->tuning : NULL; }
/* The tuning d carries, or the defaults (d NULL or without one). */
const wna16_tuning *wna16_tuning_of(const wna16_diag *d);

/* Returns s from the enclosing function when it is not OK. */
#define WNA16_TRY(expr)                                                                            \
    do {                                                                                           \
        wna16_status wna16_try_s_ = (expr);                                                        \
        if (wna16_try_s_ != WNA16_OK) return wna16_try_s_;                                         \
    } while (0)

/* Overflow-checked size arithmetic: false on overflow. */
static inline bool wna16_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

/* Copies the caller's options struct src (NULL: all defaults) into dst,
 * the library's layout of lib_size bytes, by the struct_size it declares
 * (include/wna16.h); what names the struct in the error. */
wna16_status wna16_options_take(wna16_diag *d, const char *what, void *dst, size_t lib_size,
                                const void *src);

/* Allocation wrappers. A process-wide cap (WNA16_MAX_ALLOC env, bytes)
 * turns an absurd declared size into WNA16_ERR_LIMIT instead of an OOM kill;
 * tests can also make the n-th allocation fail. */
void *wna16_malloc(size_t n);
void *wna16_calloc(size_t count, size_t size);
void *wna16_realloc(void *p, size_t n);
void wna16_free(void *p);
char *wna16_strdup(const char *s);
/* Page-aligned anonymous memory for long-lived weights, asking the kernel for
 * 2 MiB transparent huge pages (madvise; a no-op where THP is off). Streams
 * that cross 4 KiB pages lose the hardware prefetcher and walk the TLB at
 * every page, which costs decode ~10 % of its bandwidth. Zero-filled. Free
 * with the same byte count. NULL on failure or over the cap. */
void *wna16_huge_alloc(size_t bytes);
/* The same, but only the whole 2 MiB pages inside `bytes` are huge: the
 * tail stays in 4 KiB pages, so a 2.1 MiB buffer does not hold 4 MiB. */
void *wna16_huge_alloc_fit(size_t bytes);
void wna16_huge_free(void *p, size_t bytes);
/* Asks the kernel to move [p, p + bytes)'s whole 2 MiB pages that fell back
 * to 4 KiB pages at fault time (memory fragmented by the page cache while a
 * checkpoint streamed in) onto huge pages now (MADV_COLLAPSE). False when
 * some could not move (no free huge pages, pages busy); true when done or
 * where the kernel has no such call. */
bool wna16_huge_collapse(void *p, size_t bytes);
/* Brings the pages of a read-only file mapping [p, p + bytes) in now (and
 * maps them): for views read a little at a time later (embedding rows),
 * which would otherwise wait on the disk for pages evicted while the load
 * streamed the rest of the checkpoint. */
void wna16_prefault(const void *p, size_t bytes);
/* Faults in writable anonymous memory [p, p + bytes) now (contents kept;
 * short of memory, the pages stay to fault in when used): for a buffer that
 * will be written all over soon, so that the page faults (and the zeroing of
 * 2 MiB pages) are paid at load time, not in the first forward pass. */
void wna16_populate(void *p, size_t bytes);
/* printf into a fresh malloc'd string. */
char *wna16_asprintf(const char *fmt, ...) WNA16_PRINTF(1, 2);

/* A growable text buffer for reports and JSON. */
typedef struct wna16_buf {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed; data is truncated */
} wna16_buf;
void wna16_buf_printf(wna16_buf *b, const char *fmt, ...) WNA16_PRINTF(2, 3);
void wna16_buf_put(wna16_buf *b, const char *s, size_t n);
void wna16_buf_free(wna16_buf *b);

/* bf16/fp16 <-> fp32 (round to nearest even; NaN stays NaN). */
static inline float wna16_bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}
static inline uint16_t wna16_f32_to_bf16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + rounding) >> 16);
}
/* v survives the round trip through bf16 (a value a bf16 tensor can hold). */
static inline bool wna16_bf16_exact(float v) {
    return wna16_bf16_to_f32(wna16_f32_to_bf16(v)) == v;
}
float wna16_f16_to_f32(uint16_t h);
uint16_t wna16_f32_to_f16(float f);

/* The refusal text for runtime activation ordering, the same wherever a
 * checkpoint or a request asks for it. */
#define WNA16_ACTORDER_FIX                                                                         \
    "runtime activation ordering (actorder=group) is not supported; re-quantize with "             \
    "actorder=static (or none): it gives the same accuracy with no runtime cost"

#endif
