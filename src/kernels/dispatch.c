/* CPU feature detection and the kernel table. Compiled without ISA flags:
 * nothing here may execute an instruction the CPU might lack. */
#include "kernels/ukernel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define WNA16_X86 1
#if defined(WNA16_HAVE_AMX) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define WNA16_AMX_LEAVES 1
#endif
#elif defined(__aarch64__)
#include <sys/auxv.h>
#define WNA16_AARCH64 1
/* (older headers lack them; the kernel's values) */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif
#endif

static const char *const isa_names[WNA16_ISA_COUNT] = {
    [WNA16_ISA_REF] = "ref",
    [WNA16_ISA_AVX2] = "avx2",
    [WNA16_ISA_AVX512] = "avx512",
    [WNA16_ISA_AVX512BF16] = "avx512bf16",
    [WNA16_ISA_NEON] = "neon",
    [WNA16_ISA_NEONBF16] = "neonbf16",
};

/* The architecture family of a level (0: ref, which is in every family). */
enum { FAMILY_ANY, FAMILY_X86, FAMILY_AARCH64 };
static int isa_family(wna16_isa isa) {
    switch (isa) {
    case WNA16_ISA_AVX2:
    case WNA16_ISA_AVX512:
    case WNA16_ISA_AVX512BF16:
        return FAMILY_X86;
    case WNA16_ISA_NEON:
    case WNA16_ISA_NEONBF16:
        return FAMILY_AARCH64;
    default:
        return FAMILY_ANY;
    }
}

/* Within a family the enum's order is the inclusion order (each family's
 * levels are consecutive values, lowest first). */
bool wna16_isa_le(wna16_isa a, wna16_isa b) {
    if (a == WNA16_ISA_REF) return true;
    return isa_family(a) == isa_family(b) && a <= b;
}

wna16_isa wna16_isa_min(wna16_isa a, wna16_isa b) {
    if (wna16_isa_le(a, b)) return a;
    if (wna16_isa_le(b, a)) return b;
    return WNA16_ISA_REF;
}

wna16_isa wna16_isa_lower(wna16_isa isa) {
    wna16_isa below = (wna16_isa)(isa - 1);
    return isa != WNA16_ISA_REF && isa_family(below) == isa_family(isa) ? below : WNA16_ISA_REF;
}

const char *wna16_isa_name(wna16_isa isa) {
    return (unsigned)isa < WNA16_ISA_COUNT ? isa_names[isa] : NULL;
}

bool wna16_isa_parse(const char *name, wna16_isa *out) {
    for (int i = 0; i < WNA16_ISA_COUNT; i++)
        if (name && !strcmp(name, isa_names[i])) {
            *out = (wna16_isa)i;
            return true;
        }
    return false;
}

#ifdef WNA16_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static wna16_isa detect(void) {
#ifdef WNA16_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return WNA16_ISA_REF;
    bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
    bool avx = c & (1u << 28);
    if (!osxsave || !avx) return WNA16_ISA_REF;
    uint64_t xcr0 = xgetbv0();
    bool ymm_state = (xcr0 & 0x6) == 0x6;           /* SSE + AVX state */
    bool zmm_state = (xcr0 & 0xe6) == 0xe6;         /* + opmask, ZMM_Hi256, Hi16_ZMM */
    if (!ymm_state) return WNA16_ISA_REF;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return WNA16_ISA_REF;
    bool avx2 = b & (1u << 5);
    bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
         avx512vl = b & (1u << 31);
    if (!(avx2 && fma && f16c)) return WNA16_ISA_REF;
    if (!(zmm_state && avx512f && avx512dq && avx512bw && avx512vl)) return WNA16_ISA_AVX2;
    unsigned a1 = 0, b1, c1, d1;
    __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    bool bf16 = a1 & (1u << 5);
    return bf16 ? WNA16_ISA_AVX512BF16 : WNA16_ISA_AVX512;
#elif defined(WNA16_AARCH64)
    /* Advanced SIMD is architectural on aarch64 Linux; the check keeps a
     * kernel that says otherwise on the reference */
    if (!(getauxval(AT_HWCAP) & HWCAP_ASIMD)) return WNA16_ISA_REF;
    return getauxval(AT_HWCAP2) & HWCAP2_BF16 ? WNA16_ISA_NEONBF16 : WNA16_ISA_NEON;
#else
    return WNA16_ISA_REF;
#endif
}

const wna16_wfmt_traits wna16_wfmts[WNA16_WFMTS] = {
    [WNA16_WFMT_Q4] = {.bits = 4, .unit_k = 8, .unit_kpairs = 4, .word_vals = 8, .sym_zero = 8},
    [WNA16_WFMT_Q8] = {.bits = 8, .unit_k = 4, .unit_kpairs = 2, .word_vals = 4, .sym_zero = 128},
};

static wna16_kernel_table tables[WNA16_ISA_COUNT];
/* The bf16-dot levels without their bf16-dot kernels (wna16_bf16_dot false) */
static wna16_kernel_table no_dot[WNA16_ISA_COUNT];
static bool bf16_dot_default = true, bf16_dot_on = true;
/* VNNI: which the CPU has, and whether the int16 leaves use it */
static bool has_avx_vnni, has_avx512_vnni, vnni_on;
/* AMX: whether the CPU has it and the kernel gave this process the tile
 * state, and whether the dense linear uses it */
static bool has_amx, has_amx_int8, amx_on;
static wna16_isa detected = WNA16_ISA_REF;
/* The level the kernels run at. wna16_isa_set_cap may change it while
 * other threads read it: an atomic int, relaxed (it guards no other data;
 * the tables are filled before pthread_once returns). */
static _Atomic int active = WNA16_ISA_REF;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#ifdef WNA16_X86
static void fill_x86(wna16_kernel_table ref);
#endif
#ifdef WNA16_AARCH64
static void fill_aarch64(wna16_kernel_table ref);
#endif

/* Reference first, then each level overrides what it provides (BLIS-style). */
static void fill_tables(void) {
    wna16_kernel_table t = {
        .isa = WNA16_ISA_REF,
        .to_bf16 = wna16_to_bf16__ref,
        .quant_i16 = wna16_quant_i16__ref,
        .absmax_bf16 = wna16_absmax_bf16__ref,
        .quant_i8 = wna16_quant_i8__ref,
        .gemv_f32 = {wna16_gemv_q4_f32_4x16__ref, wna16_gemv_q8_f32_4x16__ref},
        .gemv_f32_mr = 4,
        .dense_dot = wna16_dense_dot__ref,
        .attn_group = wna16_attn_group__ref,
        .attn_hd_mult = 2,
        .attn_hd_max = INT64_MAX,
        .vec = &wna16_vec_ops__ref,
    };
    /* every level starts as the reference: the other family's levels are
     * never active here (wna16_isa_min), and a target without leaves
     * (CMakeLists.txt builds none) detects ref */
    for (int i = 0; i < WNA16_ISA_COUNT; i++) tables[i] = t;
#ifdef WNA16_X86
    fill_x86(t);
#endif
#ifdef WNA16_AARCH64
    fill_aarch64(t);
#endif
}

#ifdef WNA16_X86
static void fill_x86(wna16_kernel_table t) {
    t.isa = WNA16_ISA_AVX2;
    t.to_bf16 = wna16_to_bf16__avx2;
    t.quant_i16 = wna16_quant_i16__avx2;
    t.absmax_bf16 = wna16_absmax_bf16__avx2;
    t.quant_i8 = wna16_quant_i8__avx2;
    t.dense_dot = wna16_dense_dot__avx2;
    t.dense_tiles = wna16_dense_tiles__avx2;
    t.dense_tiles_ws = wna16_dense_tiles_ws__avx2;
    t.dense_pack_x = wna16_dense_pack_x__avx2;
    t.dense_xp_bytes = wna16_dense_xp_bytes__avx2;
    t.dense_tile_rows = 16;
    t.dense_tile_min_m = WNA16_DENSE_TILE_MIN_M_AVX2;
    t.dense_rows = wna16_dense_rows__avx2;
    t.dense_rows_max_m = 4;
    t.dense_pack_xq = wna16_dense_pack_xq__avx2;
    t.dense_xq_bytes = wna16_dense_xq_bytes__avx2;
    t.attn_group = wna16_attn_group__avx2;
    t.vec = &wna16_vec_ops__avx2;
    t.attn_hd_mult = 8;
    t.attn_hd_max = 256;
    t.gemv_f32[WNA16_WFMT_Q4] = wna16_gemv_q4_f32_2x16__avx2;
    t.gemv_f32[WNA16_WFMT_Q8] = wna16_gemv_q8_f32_2x16__avx2;
    t.gemv_f32_mr = 2;
    t.gemv_i16[WNA16_WFMT_Q4] = wna16_gemv_q4_i16_4x16__avx2;
    t.gemv_i16[WNA16_WFMT_Q8] = wna16_gemv_q8_i16_4x16__avx2;
    t.gemv_i16_mr = 4;
    t.gemv_i16_max_m = 4;
    t.dequant_i16[WNA16_WFMT_Q4] = wna16_dequant_q4_i16_16__avx2;
    t.dequant_i16[WNA16_WFMT_Q8] = wna16_dequant_q8_i16_16__avx2;
    t.gemm_i16 = wna16_gemm_i16_6x16__avx2;
    t.gemm_i16_mr = WNA16_I16_TILE_AVX2;
    t.gemv_a8 = wna16_gemv_q4_a8_8x32__avx2;
    tables[WNA16_ISA_AVX2] = t;
    t.isa = WNA16_ISA_AVX512;
    t.to_bf16 = wna16_to_bf16__avx512;
    t.quant_i16 = wna16_quant_i16__avx512;
    t.absmax_bf16 = wna16_absmax_bf16__avx512;
    t.quant_i8 = wna16_quant_i8__avx512;
    t.gemv_f32[WNA16_WFMT_Q4] = wna16_gemv_q4_f32_4x16__avx512;
    t.gemv_f32[WNA16_WFMT_Q8] = wna16_gemv_q8_f32_4x16__avx512;
    t.gemv_f32_mr = 4;
    t.gemv2_f32[WNA16_WFMT_Q4] = wna16_gemv_q4_f32_2x32__avx512;
    t.gemv2_f32[WNA16_WFMT_Q8] = wna16_gemv_q8_f32_2x32__avx512;
    t.gemv2_f32_mr = 2;
    /* bf16 activations as int16 on 512 bits, both blocks of a pair */
    t.gemv2_i16[WNA16_WFMT_Q4] = wna16_gemv_q4_i16_4x32__avx512;
    t.gemv2_i16[WNA16_WFMT_Q8] = wna16_gemv_q8_i16_4x32__avx512;
    t.dequant_i16[WNA16_WFMT_Q4] = wna16_dequant_q4_i16_16__avx512;
    t.dequant_i16[WNA16_WFMT_Q8] = wna16_dequant_q8_i16_16__avx512;
    t.gemm_i16 = wna16_gemm_i16_12x16__avx512;
    t.gemm2_i16 = wna16_gemm2_i16_12x32__avx512;
    t.gemm_i16_mr = WNA16_I16_TILE_AVX512;
    t.gemv_a8 = wna16_gemv_q4_a8_8x32__avx512;
    t.dense_dot = wna16_dense_dot__avx512;
    t.dense_tiles = wna16_dense_tiles__avx512;
    t.dense_tiles_ws = wna16_dense_tiles_ws__avx512;
    t.dense_pack_x = wna16_dense_pack_x__avx512;
    t.dense_xp_bytes = wna16_dense_xp_bytes__avx512;
    t.dense_tile_rows = 8;
    t.dense_tile_min_m = WNA16_DENSE_TILE_MIN_M_AVX512;
    t.dense_rows = wna16_dense_rows__avx512;
    t.dense_rows_max_m = 6;
    /* from 24 rows the tiles with the outputs in the lanes, whose weights
     * widened and transposed once per call pay off over enough rows (Xeon
     * guest, 2 threads, lm_head K 2048 x N 151936: m = 16 70 against 63-65
     * ms, 24 85 against 87-92, 32 99-104 against 117 (and AVX2's tiles, the
     * big ones before: 137-140), 64 166-169 against 242-245; N 4096, m =
     * 128: 7.6 against 11.4-11.6 ms) */
    static wna16_kernel_table lanes;
    lanes = (wna16_kernel_table){.isa = WNA16_ISA_AVX512,
                                 .dense_tiles = wna16_dense_lanes__avx512,
                                 .dense_tiles_ws = wna16_dense_lanes_ws__avx512,
                                 .dense_pack_x = wna16_dense_lanes_pack_x__avx512,
                                 .dense_xp_bytes = wna16_dense_lanes_xp_bytes__avx512,
                                 .dense_tile_rows = 16,
                                 .dense_tile_outputs = 48};
    t.dense_big = &lanes;
    t.dense_big_min_m = 24;
    t.dense_pack_xq = wna16_dense_pack_xq__avx512;
    t.dense_xq_bytes = wna16_dense_xq_bytes__avx512;
    t.attn_group = wna16_attn_group__avx512;
    t.vec = &wna16_vec_ops__avx512;
    t.attn_hd_mult = 16;
    tables[WNA16_ISA_AVX512] = t;
    t.isa = WNA16_ISA_AVX512BF16;
    t.gemv_bf16[WNA16_WFMT_Q4] = wna16_gemv_q4_bf16_4x32__avx512bf16;
    t.gemv_bf16[WNA16_WFMT_Q8] = wna16_gemv_q8_bf16_4x32__avx512bf16;
    t.gemv_bf16_mr = 4;
    t.gemv2_bf16[WNA16_WFMT_Q4] = wna16_gemv_q4_bf16_8x32__avx512bf16;
    t.gemv2_bf16[WNA16_WFMT_Q8] = wna16_gemv_q8_bf16_8x32__avx512bf16;
    t.gemv2_bf16_mr = 8;
    t.gemv2_bf16_mr_max = 10;
    t.dequant_bf16[WNA16_WFMT_Q4] = wna16_dequant_q4_bf16_16__avx512bf16;
    t.dequant_bf16[WNA16_WFMT_Q8] = wna16_dequant_q8_bf16_16__avx512bf16;
    t.gemm_bf16 = wna16_gemm_bf16_12x32__avx512bf16;
    t.gemm_mr = 12;
    t.attn_group = wna16_attn_group__avx512bf16;
    t.attn_hd_mult = 32;
    tables[WNA16_ISA_AVX512BF16] = t;
}
#endif

#ifdef WNA16_AARCH64
static void fill_aarch64(wna16_kernel_table t) {
    t.isa = WNA16_ISA_NEON;
    t.to_bf16 = wna16_to_bf16__neon;
    t.gemv_f32[WNA16_WFMT_Q4] = wna16_gemv_q4_f32_4x16__neon;
    t.gemv_f32[WNA16_WFMT_Q8] = wna16_gemv_q8_f32_4x16__neon;
    t.gemv_f32_mr = 4;
    /* bf16 activations as int16 (smlal), AVX2's design: the weights stay
     * integers (not measured on hardware yet; qemu only) */
    t.gemv_i16[WNA16_WFMT_Q4] = wna16_gemv_q4_i16_4x16__neon;
    t.gemv_i16[WNA16_WFMT_Q8] = wna16_gemv_q8_i16_4x16__neon;
    t.gemv_i16_mr = 4;
    t.gemv_i16_max_m = 4;
    t.dequant_i16[WNA16_WFMT_Q4] = wna16_dequant_q4_i16_16__neon;
    t.dequant_i16[WNA16_WFMT_Q8] = wna16_dequant_q8_i16_16__neon;
    t.gemm_i16 = wna16_gemm_i16_6x16__neon;
    t.gemm_i16_mr = WNA16_I16_TILE_NEON;
    t.dense_dot = wna16_dense_dot__neon;
    t.dense_tiles = wna16_dense_tiles__neon;
    t.dense_tiles_ws = wna16_dense_tiles_ws__neon;
    t.dense_pack_x = wna16_dense_pack_x__neon;
    t.dense_xp_bytes = wna16_dense_xp_bytes__neon;
    t.dense_tile_rows = 16;
    t.dense_tile_min_m = WNA16_DENSE_TILE_MIN_M_NEON;
    t.dense_rows = wna16_dense_rows__neon;
    t.dense_rows_max_m = 4;
    t.dense_pack_xq = wna16_dense_pack_xq__neon;
    t.dense_xq_bytes = wna16_dense_xq_bytes__neon;
    t.attn_group = wna16_attn_group__neon;
    t.attn_hd_mult = 4;
    t.attn_hd_max = 256;
    t.vec = &wna16_vec_ops__neon;
    tables[WNA16_ISA_NEON] = t;
    /* FEAT_BF16: BFDOT/BFMMLA on the bf16 weight integers, the
     * AVX512BF16 paths (a bf16 dot wins over the int16 leaves, which stay
     * in the table: gemm.c takes them only without gemv_bf16) */
    t.isa = WNA16_ISA_NEONBF16;
    t.gemv_bf16[WNA16_WFMT_Q4] = wna16_gemv_q4_bf16_4x32__neonbf16;
    t.gemv_bf16[WNA16_WFMT_Q8] = wna16_gemv_q8_bf16_4x32__neonbf16;
    t.gemv_bf16_mr = 4;
    t.gemv2_bf16[WNA16_WFMT_Q4] = wna16_gemv_q4_bf16_6x32__neonbf16;
    t.gemv2_bf16[WNA16_WFMT_Q8] = wna16_gemv_q8_bf16_6x32__neonbf16;
    t.gemv2_bf16_mr = 6;
    t.gemv2_bf16_mr_max = 8;
    t.dequant_bf16[WNA16_WFMT_Q4] = wna16_dequant_q4_bf16_16__neonbf16;
    t.dequant_bf16[WNA16_WFMT_Q8] = wna16_dequant_q8_bf16_16__neonbf16;
    t.gemm_bf16 = wna16_gemm_bf16_8x32__neonbf16;
    t.gemm_mr = WNA16_BF16_TILE_NEON;
    tables[WNA16_ISA_NEONBF16] = t;
}
#endif

/* Intel's AVX-512 BF16 cores (a 2-vCPU Xeon guest: vdpbf16ps 0.5/cycle
 * against 2 FMAs and 1 vpmaddwd per cycle) run the int16 kernels faster at
 * every m; AMD's (Zen 5) run vdpbf16ps at full rate. */
static bool bf16_dot_preferred(void) {
#ifdef WNA16_X86
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u && d == 0x49656e69u &&
        c == 0x6c65746eu) /* "GenuineIntel" */
        return false;
#endif
    return true;
}

static void fill_no_dot(void) {
    for (int i = 0; i < WNA16_ISA_COUNT; i++) {
        wna16_kernel_table t = tables[i];
        if (t.gemv_i16[WNA16_WFMT_Q4] && t.dequant_i16[WNA16_WFMT_Q4] && t.gemm_i16) {
            memset(t.gemv_bf16, 0, sizeof t.gemv_bf16);
            memset(t.gemv2_bf16, 0, sizeof t.gemv2_bf16);
            memset(t.dequant_bf16, 0, sizeof t.dequant_bf16);
            t.gemm_bf16 = NULL;
        }
        no_dot[i] = t;
    }
}

/* The int16 leaves' VNNI variants into the levels that have them. */
static void apply_vnni(void) {
#ifdef WNA16_X86
    for (int i = 0; i < WNA16_ISA_COUNT; i++) {
        wna16_kernel_table *t = &tables[i];
        if (!vnni_on || !wna16_isa_le(WNA16_ISA_AVX2, (wna16_isa)i)) continue;
        if (has_avx_vnni) {
            t->gemv_i16[WNA16_WFMT_Q4] = wna16_gemv_q4_i16_4x16__avxvnni;
            t->gemv_i16[WNA16_WFMT_Q8] = wna16_gemv_q8_i16_4x16__avxvnni;
            t->gemv_a8 = wna16_gemv_q4_a8_8x32__avxvnni;
        }
        /* With VNNI the streaming kernel, 4-row tiles over a block while it
         * is in L1, beats dequantizing a panel up to ~20 rows (Xeon guest, 2
         * threads, int4 g128, K 2048: N 5120 m = 8 701 -> 445-453 us, 16 963
         * -> 788-836, 20 1147 -> 1002; N 1536 m = 5 205 -> 127; at 24 even,
         * at 32 the panel wins; the avx2 level 1.5-2x at m = 5-16). Without
         * VNNI the panel keeps m > 4 (not measured on such cores here). */
        if (has_avx_vnni || (has_avx512_vnni && wna16_isa_le(WNA16_ISA_AVX512, (wna16_isa)i)))
            t->gemv_i16_max_m = 20;
        if (has_avx512_vnni && wna16_isa_le(WNA16_ISA_AVX512, (wna16_isa)i)) {
            t->gemv2_i16[WNA16_WFMT_Q4] = wna16_gemv_q4_i16_4x32__avx512vnni;
            t->gemv2_i16[WNA16_WFMT_Q8] = wna16_gemv_q8_i16_4x32__avx512vnni;
            t->gemm_i16 = wna16_gemm_i16_12x16__avx512vnni;
            t->gemm2_i16 = wna16_gemm2_i16_12x32__avx512vnni;
            t->gemv_a8 = wna16_gemv_q4_a8_8x32__avx512vnni;
        }
    }
#endif
}

/* The AMX kernels into the avx512bf16 table: the dense tiles from
 * WNA16_DENSE_AMX_MIN_M rows (the lm_head and routers of batched steps and
 * prefill; fewer rows keep the row kernel, at the memory's speed already),
 * in place of both vector tiles; and the quantized linear's panel regime. */
static void apply_amx(void) {
#ifdef WNA16_AMX_LEAVES
    static wna16_kernel_table amx;
    amx = (wna16_kernel_table){.isa = WNA16_ISA_AVX512BF16,
                               .dense_tiles = wna16_dense_tiles__amx,
                               .dense_tiles_ws = wna16_dense_tiles_ws__amx,
                               .dense_pack_x = wna16_dense_pack_x__amx,
                               .dense_xp_bytes = wna16_dense_xp_bytes__amx,
                               .dense_tile_rows = 16,
                               .dense_tile_outputs = 32};
    if (!amx_on) return;
    wna16_kernel_table *t = &tables[WNA16_ISA_AVX512BF16];
    t->dense_big = &amx;
    t->dense_big_min_m = WNA16_DENSE_AMX_MIN_M;
    if (t->dense_tile_min_m > WNA16_DENSE_AMX_MIN_M) t->dense_tile_min_m = WNA16_DENSE_AMX_MIN_M;
    if (has_amx_int8) {
        t->gemm_amx = wna16_gemm_i8_16x32__amx;
        t->amx_tiles = wna16_amx_tiles__amx;
        t->gemm_amx_min_m = WNA16_GEMM_AMX_MIN_M;
    }
#endif
}

/* The tables for the current switches. */
static void build_tables(void) {
    fill_tables();
    apply_vnni();
    apply_amx();
    fill_no_dot();
}

static void detect_vnni(void) {
#ifdef WNA16_X86
    unsigned a, b, c, d;
    /* the levels' own checks (XGETBV included) come first: VNNI only adds */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) has_avx512_vnni = c & (1u << 11);
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) has_avx_vnni = a & (1u << 4);
#endif
    vnni_on = has_avx_vnni || has_avx512_vnni;
}

/* AMX-TILE and AMX-BF16 (cpuid 7.0 edx bits 24, 22; AMX-INT8, bit 25, and
 * AVX512_VBMI, ecx bit 1, which its weight repacking uses, for the
 * quantized linears' panel), the tile state in
 * XCR0 (bits 17, 18), and Linux's permission to use it (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, process-wide; a kernel
 * without it refuses and the dense linear keeps its vector tiles). */
static void detect_amx(void) {
#ifdef WNA16_AMX_LEAVES
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return; /* OSXSAVE */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (!(d & (1u << 24)) || !(d & (1u << 22))) return;
    if ((xgetbv0() & (3ull << 17)) != (3ull << 17)) return;
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    has_amx = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    has_amx_int8 = has_amx && (d & (1u << 25)) && (c & (1u << 1));
#endif
    amx_on = has_amx;
}

static void init(void) {
    detect_vnni();
    const char *vn = getenv("WNA16_VNNI");
    if (vn && !strcmp(vn, "0")) vnni_on = false;
    else if (vn && *vn && strcmp(vn, "1"))
        wna16_log(NULL, WNA16_LOG_WARN, "WNA16_VNNI='%s' is not 0 or 1; ignored", vn);
    detect_amx();
    const char *amx = getenv("WNA16_AMX");
    if (amx && !strcmp(amx, "0")) amx_on = false;
    else if (amx && *amx && strcmp(amx, "1"))
        wna16_log(NULL, WNA16_LOG_WARN, "WNA16_AMX='%s' is not 0 or 1; ignored", amx);
    build_tables();
    detected = detect();
    atomic_store_explicit(&active, detected, memory_order_relaxed);
    bf16_dot_default = bf16_dot_on = bf16_dot_preferred();
    const char *dot = getenv("WNA16_BF16_DOT");
    if (dot && (!strcmp(dot, "0") || !strcmp(dot, "1"))) bf16_dot_on = dot[0] == '1';
    else if (dot && *dot)
        wna16_log(NULL, WNA16_LOG_WARN, "WNA16_BF16_DOT='%s' is not 0 or 1; ignored", dot);
    const char *env = getenv("WNA16_ISA");
    if (env && *env) {
        wna16_isa cap;
        if (wna16_isa_parse(env, &cap)) {
            /* a level of the other architecture caps to ref: the only
             * level below it that this machine has */
            atomic_store_explicit(&active, wna16_isa_min(cap, detected), memory_order_relaxed);
            if (!wna16_isa_le(cap, detected) && !wna16_isa_le(detected, cap))
                wna16_log(NULL, WNA16_LOG_WARN,
                          "WNA16_ISA='%s' is a level of another architecture than this "
                          "machine's (%s); running the reference kernels",
                          env, isa_names[detected]);
        } else {
            wna16_log(NULL, WNA16_LOG_WARN,
                      "WNA16_ISA='%s' is not one of ref, avx2, avx512, avx512bf16, neon, "
                      "neonbf16; ignored",
                      env);
        }
    }
}

wna16_isa wna16_isa_detected(void) {
    pthread_once(&once, init);
    return detected;
}

static wna16_isa load_active(void) {
    return (wna16_isa)atomic_load_explicit(&active, memory_order_relaxed);
}

wna16_isa wna16_isa_active(void) {
    pthread_once(&once, init);
    return load_active();
}

wna16_isa wna16_isa_set_cap(wna16_isa cap) {
    pthread_once(&once, init);
    wna16_isa isa = (unsigned)cap >= WNA16_ISA_COUNT ? detected : wna16_isa_min(cap, detected);
    atomic_store_explicit(&active, isa, memory_order_relaxed);
    return isa;
}

bool wna16_vnni(void) {
    pthread_once(&once, init);
    return vnni_on;
}

bool wna16_vnni_set(int on) {
    pthread_once(&once, init);
    bool have = has_avx_vnni || has_avx512_vnni;
    vnni_on = have && (on < 0 || on != 0);
    build_tables();
    return vnni_on;
}

bool wna16_amx(void) {
    pthread_once(&once, init);
    return amx_on;
}

bool wna16_amx_set(int on) {
    pthread_once(&once, init);
    amx_on = has_amx && (on < 0 || on != 0);
    build_tables();
    return amx_on;
}

bool wna16_bf16_dot(void) {
    pthread_once(&once, init);
    return bf16_dot_on;
}

bool wna16_bf16_dot_set(int on) {
    pthread_once(&once, init);
    bf16_dot_on = on < 0 ? bf16_dot_default : on != 0;
    return bf16_dot_on;
}

const wna16_kernel_table *wna16_kernels(void) {
    pthread_once(&once, init);
    wna16_isa now = load_active();
    return bf16_dot_on ? &tables[now] : &no_dot[now];
}

const wna16_kernel_table *wna16_kernels_at(wna16_isa isa) {
    pthread_once(&once, init);
    wna16_isa now = load_active();
    wna16_isa i = (unsigned)isa < WNA16_ISA_COUNT ? wna16_isa_min(isa, now) : now;
    return bf16_dot_on ? &tables[i] : &no_dot[i];
}

const wna16_vec_ops *wna16_vec(void) { return wna16_kernels()->vec; }

void wna16_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n) {
    wna16_kernels()->to_bf16(src, dst, n);
}
