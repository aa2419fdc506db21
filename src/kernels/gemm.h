/* WNA16 linear layer: y[M,N] = x[M,K] · Wᵀ (+ bias) with int4/int8 weights
 * repacked once at load into the kernel layout (docs/kernels.md).
 *
 * Internal API (not in the public header). Shape-time and data-time are
 * split: wna16_linear_pack() builds an immutable packed weight once; the
 * gemm calls only read it, so one packed weight may be used by many threads
 * at the same time (e.g. the MoE scheduler threading over experts and calling
 * wna16_linear_gemm_range() with its own scratch).
 *
 * Numerics (the contract every ISA meets, see docs/kernels.md §Numerics):
 *  - activations are widened to fp32 (bf16/fp16 exactly), weights are the
 *    exact integers q = u - zero; per group g and output o the kernel forms
 *    P_g = Σ_{k∈g} a_k·q_k in fp32, then C = fma(P_g, scale_g, C) in group
 *    order, then y = round_out(C + bias). Every output element has one fixed
 *    reduction order that does not depend on the thread count or the N range.
 *  - the order of the sum inside P_g depends on the ISA and on the M regime
 *    (decode vs prefill); with integer-exact data all of them are bitwise
 *    equal to the scalar reference.
 */
#ifndef WNA16_KERNELS_GEMM_H
#define WNA16_KERNELS_GEMM_H

#include "core/common.h"
#include "format/qweight.h"

/* Output channels per packed block (register width of the kernels). */
#define WNA16_LINEAR_NR 16

/* ISA levels. Each level but ref belongs to one architecture family (x86:
 * avx2 < avx512 < avx512bf16; aarch64: neon < neonbf16) and is a superset
 * of the lower levels of its family; ref is below every level. Levels of
 * different families are not comparable, so never compare the values with
 * < or >=: use wna16_isa_le / wna16_isa_min. The x86 values are unchanged
 * from before the aarch64 levels existed. */
typedef enum wna16_isa {
    WNA16_ISA_REF = 0,
    WNA16_ISA_AVX2 = 1,       /* AVX2 + FMA + F16C */
    WNA16_ISA_AVX512 = 2,     /* AVX-512 F/BW/VL/DQ */
    WNA16_ISA_AVX512BF16 = 3, /* + AVX512_BF16 (vdpbf16ps) */
    WNA16_ISA_NEON = 4,       /* Armv8 Advanced SIMD (fp32 FMA): every aarch64 CPU */
    WNA16_ISA_NEONBF16 = 5,   /* + FEAT_BF16 (BFDOT, BFMMLA) */
    WNA16_ISA_COUNT
} wna16_isa;

/* "ref", "avx2", "avx512", "avx512bf16", "neon", "neonbf16"; NULL for an
 * out-of-range value. */
const char *wna16_isa_name(wna16_isa isa);
/* Parses a name as above; false if unknown. */
bool wna16_isa_parse(const char *name, wna16_isa *out);
/* a <= b: a is ref, or a and b are of one family and b includes a. */
bool wna16_isa_le(wna16_isa a, wna16_isa b);
/* The highest level <= both a and b: the lower of the two within one
 * family, ref across families (an x86 level asked for on aarch64, or a
 * neon level on x86). */
wna16_isa wna16_isa_min(wna16_isa a, wna16_isa b);
/* The next level below isa in its family (ref below the lowest; ref for
 * ref). */
wna16_isa wna16_isa_lower(wna16_isa isa);
/* Best level this CPU and OS support (x86: cpuid + XGETBV; aarch64:
 * getauxval's HWCAP/HWCAP2), ignoring any cap. */
wna16_isa wna16_isa_detected(void);
/* Level the kernels use now: wna16_isa_min(detected, cap). The cap starts
 * from the WNA16_ISA environment variable (unset: no cap; unknown name:
 * ignored with a warning on stderr; a level of another architecture: ref,
 * with a warning). */
wna16_isa wna16_isa_active(void);
/* Caps the level in-process (tests loop over every level); returns the level
 * now active (wna16_isa_min(detected, cap); cap >= WNA16_ISA_COUNT: no cap,
 * the detected level). Not thread-safe against running gemms. */
wna16_isa wna16_isa_set_cap(wna16_isa cap);
/* Whether the bf16-dot levels (avx512bf16, neonbf16) run bf16 activations
 * on their bf16-dot kernels (true) or on the integer kernels of the level
 * below (false; docs/kernels.md §Integer activations): the machine's
 * default says which is faster there (on x86: Intel cores run vdpbf16ps at
 * a quarter of the fp32 FMA's flops and the int16 kernels win; AMD's run it
 * at full rate), the WNA16_BF16_DOT environment variable (0 or 1) overrides
 * it, and so does wna16_bf16_dot_set (on < 0: back to the machine's
 * default; returns the setting now in force; not thread-safe against
 * running gemms). Weights packed under one setting run under the other. */
bool wna16_bf16_dot(void);
bool wna16_bf16_dot_set(int on);
/* Whether the int16 leaves use vpdpwssd where the CPU has it (AVX_VNNI for
 * the avx2 leaves, AVX512_VNNI for the avx512 ones): the same int32 sums in
 * fewer instructions, so the same bits. On by default where present; the
 * WNA16_VNNI environment variable (0 or 1) and wna16_vnni_set (on < 0: the
 * default) turn it off for comparisons and tests; returns the setting in
 * force (false without the instructions). Not thread-safe against gemms. */
bool wna16_vnni(void);
bool wna16_vnni_set(int on);
/* Whether the dense linear takes the AMX tiles (kernels/dense.h) at the
 * avx512bf16 level from WNA16_DENSE_AMX_MIN_M rows, where the CPU has
 * AMX-BF16 and the kernel grants the tile state: fp32 sums of the exact
 * products like the other paths, in another order, so the last bits differ
 * from the vector tiles'. On by default where present; the WNA16_AMX
 * environment variable (0 or 1) and wna16_amx_set (on < 0: the default)
 * turn it off; returns the setting in force. Not thread-safe against gemms. */
bool wna16_amx(void);
bool wna16_amx_set(int on);
/* dst[i] = wna16_f32_to_bf16(src[i]), i < n, on the active level's vectors
 * (same bits): activations rounded for the kernels, GEMM outputs. */
void wna16_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);

typedef struct wna16_packed_linear wna16_packed_linear;

/* Repacks a canonical weight, under the tuning d carries (wna16_tuning_of:
 * its pack_interleave and value_pack shape the bytes, its decode_max_m and
 * act_int8 are recorded for every gemm on the result: with act_int8, bf16
 * activations are quantized to int8 per sub-block, docs/kernels.md §Int8
 * activations; F16 and F32 activations keep the float paths). Errors:
 * WNA16_ERR_UNSUPPORTED (act_int8 at a level without the integer kernels),
 * WNA16_ERR_INVALID_ARGUMENT (NULL, n or k <= 0, inconsistent strides),
 * WNA16_ERR_UNSUPPORTED_BITS (bits not 4/8),
 * WNA16_ERR_GROUP_SIZE (group size not 32, 64, 128 or k; k not a multiple of
 * it), WNA16_ERR_BAD_ZERO_POINT (zero point > 2^bits; 2^bits itself is legacy
 * GPTQ's overflowed zero and is taken),
 * WNA16_ERR_OUT_OF_MEMORY. Scales are copied as fp32 (they are not checked
 * here: the loader validates them). */
wna16_status wna16_linear_pack(wna16_diag *d, const wna16_qweight *w, wna16_packed_linear **out);
void wna16_linear_free(wna16_packed_linear *pl);
/* One packed weight (with parts[0]'s recorded tuning) whose output rows are
 * those of parts[0], then parts[1],
 * ... (e.g. q|k|v: one GEMM streams all three): the parts must share k,
 * bits, group size and symmetry, and all but the last must have n a
 * multiple of WNA16_LINEAR_NR (each part keeps whole blocks). Returns
 * WNA16_ERR_INVALID_ARGUMENT when they do not (the caller keeps them apart),
 * WNA16_ERR_OUT_OF_MEMORY. The parts are unchanged. */
wna16_status wna16_linear_concat(wna16_diag *d, const wna16_packed_linear *const *parts, size_t n,
                                 wna16_packed_linear **out);
/* Moves the packed data of the non-NULL entries of pls[0..n) into one new
 * huge-page arena (wna16_huge_alloc), back to back, and frees their own
 * buffers. Returns the arena, which the caller frees with wna16_huge_free(
 * arena, *arena_bytes) after freeing the weights, or NULL (nothing to move,
 * or no memory: the weights then keep their own buffers, still valid). */
void *wna16_linear_gather(wna16_packed_linear *const *pls, size_t n, size_t *arena_bytes);
/* A deep copy, recorded tuning included (benchmarks rotate copies to keep
 * weights cold). */
wna16_status wna16_linear_clone(wna16_diag *d, const wna16_packed_linear *pl,
                                wna16_packed_linear **out);

/* Shape and footprint queries. */
int64_t wna16_linear_n(const wna16_packed_linear *pl);
int64_t wna16_linear_k(const wna16_packed_linear *pl);
int wna16_linear_bits(const wna16_packed_linear *pl);
int64_t wna16_linear_group_size(const wna16_packed_linear *pl);
bool wna16_linear_symmetric(const wna16_packed_linear *pl);
/* The packed blocks keep the scales as bf16 (every scale was bf16-exact). */
bool wna16_linear_scales_bf16(const wna16_packed_linear *pl);
/* Bytes of the packed weight (weights + scales + zero points, padding
 * included): what a decode step streams from memory. */
size_t wna16_linear_packed_bytes(const wna16_packed_linear *pl);
/* Starts bringing in pl's descriptor and the first lines of its packed data
 * (prefetches only; no effect on results). For a caller that knows which of
 * many cold weights it will use next (the MoE layer after routing): the
 * descriptors' cache misses then overlap instead of coming one at a time
 * when the work is planned. */
void wna16_linear_prefetch(const wna16_packed_linear *pl);
/* Bytes of the whole object (packed_bytes plus the header). */
size_t wna16_linear_footprint(const wna16_packed_linear *pl);

/* Inverse of pack: u[n][k] unsigned values, scales[n][n_groups] fp32,
 * zeros[n][n_groups] unsigned zero points (2^(bits-1) when symmetric).
 * Any output may be NULL. */
void wna16_linear_unpack(const wna16_packed_linear *pl, uint8_t *u, float *scales, uint8_t *zeros);

/* y[i][o] = round_y(Σ_c x[i][c]·w[o][c] + bias[o]) for i < m, o < n.
 * x: m rows of k elements, row stride ldx elements, dtype xt (BF16, F16, F32).
 * y: m rows of n elements, row stride ldy, dtype yt (BF16, F16, F32).
 * bias: NULL, or n elements of dtype bt (F32 or yt).
 * n_threads: threads over N blocks (<= 0: wna16_threads_default()).
 * Results are bitwise identical for every n_threads. m == 0 is a no-op.
 * Errors: WNA16_ERR_INVALID_ARGUMENT (NULL pointers, m < 0, ldx < k,
 * ldy < n, x and y overlapping), WNA16_ERR_BAD_DTYPE, WNA16_ERR_OUT_OF_MEMORY
 * (scratch), WNA16_ERR_UNSUPPORTED (pl packed for int8 activations, bf16 x,
 * and the active level without the integer kernels). y is not read. */
wna16_status wna16_linear_gemm(wna16_diag *d, const wna16_packed_linear *pl, int64_t m,
                               const void *x, wna16_dtype xt, int64_t ldx, void *y, wna16_dtype yt,
                               int64_t ldy, const void *bias, wna16_dtype bt, int n_threads);

/* Scratch bytes wna16_linear_gemm_range() needs for m rows (any N range). */
size_t wna16_linear_scratch_bytes(const wna16_packed_linear *pl, int64_t m);

/* Single-threaded, on the calling thread: computes only output columns
 * [n_begin, n_end) of y (y, ldy and bias still address the full row; only
 * those columns are written). n_begin must be a multiple of WNA16_LINEAR_NR
 * (split N on block boundaries: wna16_linear_split() does it), n_end <= n.
 * scratch: at least wna16_linear_scratch_bytes(pl, m) bytes, 64-byte aligned,
 * or NULL to allocate one for this call. Each column gets exactly the bits
 * wna16_linear_gemm() gives it. Errors as wna16_linear_gemm, plus
 * WNA16_ERR_INVALID_ARGUMENT for a bad range or a short/misaligned scratch. */
wna16_status wna16_linear_gemm_range(wna16_diag *d, const wna16_packed_linear *pl, int64_t n_begin,
                                     int64_t n_end, int64_t m, const void *x, wna16_dtype xt,
                                     int64_t ldx, void *y, wna16_dtype yt, int64_t ldy,
                                     const void *bias, wna16_dtype bt, void *scratch,
                                     size_t scratch_bytes);

/* Part `part` of `parts` of [0, n), on block boundaries, as even as blocks
 * allow: [*n_begin, *n_end) (possibly empty). */
void wna16_linear_split(const wna16_packed_linear *pl, int part, int parts, int64_t *n_begin,
                        int64_t *n_end);

/* The path a gemm on pl takes for m rows of activations of dtype xt at the
 * active ISA level: "f32_gemv", "f32_pair", "bf16_gemv", "bf16_small",
 * "bf16_panel", "i16_gemv", "i16_panel", "amx_panel" or (int8 activations)
 * "a8_gemv" (docs/kernels.md §Regimes); NULL
 * for a NULL pl or m < 1. Which one depends on the level and on the
 * decode_max_m pl was packed under; the bits do not. For tests and
 * benches. */
const char *wna16_linear_path(const wna16_packed_linear *pl, int64_t m, wna16_dtype xt);
/* The tuning pl was packed under (wna16_tuning, core/common.h): its
 * decode_max_m (< 0: the default) and the pair interleave of its blocks
 * (1 or 2). */
int64_t wna16_linear_decode_max_m(const wna16_packed_linear *pl);
int wna16_linear_interleave(const wna16_packed_linear *pl);

/* The packed bytes (wna16_linear_packed_bytes of them), for tests. */
const uint8_t *wna16_linear_data(const wna16_packed_linear *pl);

/* Reference dot in double from the canonical weight (tests, bench checks):
 * ref[i][o] = Σ_c x[i][c]·w[o][c] (+ bias[o]), and sabs[i][o] = Σ|x·w|
 * (sabs may be NULL). x is fp32 here. */
void wna16_linear_ref_f64(const wna16_qweight *w, int64_t m, const float *x, int64_t ldx,
                          const float *bias, double *ref, double *sabs);

#endif
