/* WNA16 linear GEMM: repack round trip, argument errors, and every ISA level
 * of this machine against a double reference over a generated case matrix,
 * in the integer-exact regime (bitwise) and the rounding-bounded regime
 * (docs/kernels.md §Testing); bitwise identity across thread counts and N
 * ranges. WNA16_TEST_QUICK=1 trims the matrix (sanitizer builds). */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "core/common.h"
#include "format/qweight.h"
#include "kernels/gemm.h"
#include "kernels/ukernel.h"
#include "testing.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static int rnd_int(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }
static float rnd_unit(void) { return (float)((rnd() & 0xffffff) / 16777216.0 * 2.0 - 1.0); }

/* A test weight: owns its canonical arrays. */
typedef struct tweight {
    wna16_qweight w;
    uint32_t *packed;
    float *scales;
    uint8_t *zeros;
    uint8_t *u; /* [n][k] */
} tweight;

static void tweight_free(tweight *t) {
    free(t->packed);
    free(t->scales);
    free(t->zeros);
    free(t->u);
}

/* exact: small integer weights and power-of-two scales. gs = 0: channelwise. */
static void make_weight(tweight *t, int64_t n, int64_t k, int bits, int64_t gs, bool sym,
                        bool exact) {
    memset(t, 0, sizeof *t);
    static unsigned calls; /* every other random weight has fp16 scales: both packed layouts */
    bool f16_scales = !exact && (calls++ & 1);
    if (gs == 0) gs = k;
    int64_t ng = k / gs, row_words = (k * bits + 31) / 32;
    int maxu = (1 << bits) - 1, half = 1 << (bits - 1);
    t->u = malloc((size_t)(n * k));
    t->scales = malloc((size_t)(n * ng) * sizeof(float));
    t->zeros = sym ? NULL : malloc((size_t)(n * ng));
    int8_t *q = malloc((size_t)(n * k));
    for (int64_t o = 0; o < n; o++)
        for (int64_t g = 0; g < ng; g++) {
            /* int4 zero points include 16: legacy GPTQ's overflowed zero (stored 15 + 1) */
            int z = sym ? half : rnd_int(0, bits == 4 ? maxu + 1 : maxu);
            if (!sym) t->zeros[o * ng + g] = (uint8_t)z;
            float s;
            if (exact)
                s = ldexpf(1.0f, rnd_int(-2, 1));
            else if (f16_scales) /* GPTQ: fp16 scales, kept fp32 in the packed blocks */
                s = wna16_f16_to_f32(wna16_f32_to_f16(0.001f + 0.02f * (rnd_unit() + 1.0f)));
            else /* compressed-tensors: bf16 scales, kept bf16 */
                s = wna16_bf16_to_f32(wna16_f32_to_bf16(0.001f + 0.02f * (rnd_unit() + 1.0f)));
            t->scales[o * ng + g] = s;
            for (int64_t c = g * gs; c < (g + 1) * gs; c++) {
                int u = rnd_int(0, maxu);
                if (exact && bits == 8) u = z + rnd_int(-16, 16);
                if (u < 0) u = 0;
                if (u > maxu) u = maxu;
                t->u[o * k + c] = (uint8_t)u;
                q[o * k + c] = (int8_t)(u - half);
            }
        }
    t->packed = calloc((size_t)(n * row_words), 4);
    wna16_pack_rows(q, n, k, bits, t->packed);
    free(q);
    t->w = (wna16_qweight){.n = n,
                           .k = k,
                           .bits = bits,
                           .group_size = gs,
                           .n_groups = ng,
                           .symmetric = sym,
                           .packed = t->packed,
                           .row_words = row_words,
                           .scales = t->scales,
                           .scale_stride = ng,
                           .zeros = t->zeros,
                           .zero_stride = ng,
                           .scale_dtype = WNA16_DTYPE_BF16};
}

static size_t dsize(wna16_dtype t) { return t == WNA16_DTYPE_F32 ? 4 : 2; }
static float round_to(wna16_dtype t, float v) {
    if (t == WNA16_DTYPE_BF16) return wna16_bf16_to_f32(wna16_f32_to_bf16(v));
    if (t == WNA16_DTYPE_F16) return wna16_f16_to_f32(wna16_f32_to_f16(v));
    return v;
}
static void put(void *p, wna16_dtype t, int64_t i, float v) {
    if (t == WNA16_DTYPE_BF16)
        ((uint16_t *)p)[i] = wna16_f32_to_bf16(v);
    else if (t == WNA16_DTYPE_F16)
        ((uint16_t *)p)[i] = wna16_f32_to_f16(v);
    else
        ((float *)p)[i] = v;
}
static float get(const void *p, wna16_dtype t, int64_t i) {
    if (t == WNA16_DTYPE_BF16) return wna16_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == WNA16_DTYPE_F16) return wna16_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}
static double u_out(wna16_dtype t) {
    return t == WNA16_DTYPE_BF16 ? 0x1p-9 : t == WNA16_DTYPE_F16 ? 0x1p-11 : 0x1p-24;
}

static const char *dname(wna16_dtype t) {
    return t == WNA16_DTYPE_BF16 ? "bf16" : t == WNA16_DTYPE_F16 ? "f16" : "f32";
}

/* Packs w under tuning tu, handed in a diag as a context hands its own. */
static wna16_status pack_tuned(const wna16_tuning *tu, const wna16_qweight *w,
                               wna16_packed_linear **out) {
    wna16_hooks h = {.tuning = tu};
    wna16_diag d = {.hooks = &h};
    return wna16_linear_pack(&d, w, out);
}

/* Whether the active level has a panel path for bf16 activations of this
 * format (a bf16 dot with its micro-kernel, or int16 activations). */
static bool level_has_panel(wna16_wfmt f) {
    const wna16_kernel_table *kt = wna16_kernels();
    return kt->gemv_bf16[f] ? kt->gemm_bf16 != NULL : kt->gemv_i16[f] != NULL;
}
static const wna16_dtype dts[3] = {WNA16_DTYPE_BF16, WNA16_DTYPE_F16, WNA16_DTYPE_F32};
static int n_cases, n_runs;
static wna16_isa isa_max;

/* The levels tested: ref up to isa_max within its family (the other
 * architecture's levels are not this machine's). */
#define FOR_LEVELS(lvl)                                                                            \
    for (int lvl = 0; lvl < WNA16_ISA_COUNT; lvl++)                                                \
        if (wna16_isa_le((wna16_isa)lvl, isa_max))

static int n_levels(void) {
    int n = 0;
    FOR_LEVELS(l) n++;
    return n;
}

static void test_roundtrip(void) {
    for (int ilv = 1; ilv <= 2; ilv++)
        for (int bits = 4; bits <= 8; bits += 4)
            for (int sym = 0; sym < 2; sym++) {
                wna16_tuning tu = WNA16_TUNING_DEFAULT;
                tu.pack_interleave = ilv;
                int64_t shapes[][3] = {
                    {1, 1, 0}, {17, 33, 0}, {33, 64, 32}, {16, 384, 128}, {50, 192, 64}};
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                    tweight t;
                    make_weight(&t, shapes[s][0], shapes[s][1], bits, shapes[s][2], sym, false);
                    wna16_packed_linear *pl = NULL;
                    CHECK(pack_tuned(&tu, &t.w, &pl) == WNA16_OK);
                    if (!pl) continue;
                    CHECK(wna16_linear_interleave(pl) == ilv);
                    int64_t n = t.w.n, k = t.w.k, ng = t.w.n_groups;
                    uint8_t *u = malloc((size_t)(n * k)), *z = malloc((size_t)(n * ng));
                    float *sc = malloc((size_t)(n * ng) * 4);
                    wna16_linear_unpack(pl, u, sc, z);
                    bool bf16_exact = true;
                    for (int64_t i = 0; i < n * ng; i++)
                        bf16_exact &=
                            wna16_bf16_to_f32(wna16_f32_to_bf16(t.scales[i])) == t.scales[i];
                    CHECK_MSG(wna16_linear_scales_bf16(pl) == bf16_exact,
                              "scales bf16-exact %d, packed as bf16 %d", bf16_exact,
                              wna16_linear_scales_bf16(pl));
                    CHECK(!memcmp(u, t.u, (size_t)(n * k)));
                    CHECK(!memcmp(sc, t.scales, (size_t)(n * ng) * 4));
                    bool zok = true;
                    for (int64_t i = 0; i < n * ng; i++)
                        zok &= z[i] == (sym ? (1 << (bits - 1)) : t.zeros[i]);
                    CHECK(zok);
                    /* dequantize-from-packed equals the reference dequantizer bitwise */
                    float *ref = malloc((size_t)(n * k) * 4);
                    wna16_dequant_ref_f32(&t.w, ref);
                    bool dok = true;
                    for (int64_t o = 0; o < n; o++)
                        for (int64_t c = 0; c < k; c++) {
                            int64_t g = c / t.w.group_size;
                            float v =
                                (float)((int)u[o * k + c] - (int)z[o * ng + g]) * sc[o * ng + g];
                            dok &= v == ref[o * k + c];
                        }
                    CHECK(dok);
                    CHECK(wna16_linear_n(pl) == n && wna16_linear_k(pl) == k &&
                          wna16_linear_bits(pl) == bits && wna16_linear_symmetric(pl) == (bool)sym);
                    CHECK(wna16_linear_packed_bytes(pl) >= (size_t)(n * k * bits / 8));
                    CHECK(wna16_linear_footprint(pl) > wna16_linear_packed_bytes(pl));
                    free(u);
                    free(z);
                    free(sc);
                    free(ref);
                    wna16_linear_free(pl);
                    tweight_free(&t);
                }
            }
}

/* The word-at-a-time repack writes the bytes the per-value one does: every
 * bit width, symmetry, interleave and group size, ragged n and k, and
 * column offsets (a TP slice of a row) on and off word boundaries. */
static void test_pack_paths(void) {
    static const int64_t shapes[][3] = {{16, 64, 32}, {37, 256, 64}, {5, 384, 128},
                                        {33, 40, 0},  {16, 33, 0},   {64, 512, 128}};
    int compared = 0, word_path = 0;
    for (int ilv = 1; ilv <= 2; ilv++)
        for (int bits = 4; bits <= 8; bits += 4)
            for (int sym = 0; sym < 2; sym++)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                    for (int64_t off = 0; off < 3; off++) {
                        wna16_tuning tu = WNA16_TUNING_DEFAULT;
                        tu.pack_interleave = ilv;
                        tweight t;
                        make_weight(&t, shapes[s][0], shapes[s][1], bits, shapes[s][2], sym, false);
                        /* off 1: skip one word of columns, off 2: half a word (value path) */
                        int64_t skip = off == 0 ? 0 : off == 1 ? 32 / bits : 16 / bits;
                        wna16_qweight w = t.w;
                        if (skip) { /* channelwise over the remaining columns */
                            w.col_offset = skip;
                            w.k -= skip;
                            w.group_size = w.k;
                            w.n_groups = 1;
                        }
                        wna16_packed_linear *a = NULL, *b = NULL;
                        tu.value_pack = true;
                        CHECK(pack_tuned(&tu, &w, &a) == WNA16_OK);
                        tu.value_pack = false;
                        CHECK(pack_tuned(&tu, &w, &b) == WNA16_OK);
                        if (a && b) {
                            size_t na = wna16_linear_packed_bytes(a);
                            CHECK_MSG(na == wna16_linear_packed_bytes(b) &&
                                          !memcmp(wna16_linear_data(a), wna16_linear_data(b), na),
                                      "int%d %s ilv %d [%lld, %lld] g%lld col_offset %lld: the "
                                      "word and value repacks differ",
                                      bits, sym ? "sym" : "asym", ilv, (long long)w.n,
                                      (long long)w.k, (long long)w.group_size,
                                      (long long)w.col_offset);
                            /* and the values are the canonical ones */
                            uint8_t *u = malloc((size_t)(w.n * w.k)),
                                    *z = malloc((size_t)(w.n * w.n_groups));
                            float *sc = malloc((size_t)(w.n * w.n_groups) * 4);
                            wna16_linear_unpack(b, u, sc, z);
                            bool same = true;
                            for (int64_t o = 0; o < w.n; o++)
                                for (int64_t c = 0; c < w.k; c++)
                                    same &= u[o * w.k + c] == t.u[o * t.w.k + c + skip];
                            CHECK(same);
                            free(u);
                            free(z);
                            free(sc);
                            compared++;
                            word_path += skip * bits % 32 == 0 && w.k % (32 / bits) == 0;
                        }
                        wna16_linear_free(a);
                        wna16_linear_free(b);
                        tweight_free(&t);
                    }
    CHECK(compared == 2 * 2 * 2 * 6 * 3 && word_path > compared / 3);
}

static void test_errors(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_diag *d = &((struct wna16_ctx *)ctx)->diag;
    tweight t;
    make_weight(&t, 20, 256, 4, 64, true, false);
    wna16_packed_linear *pl = NULL;
    wna16_qweight w = t.w;
    w.group_size = 16;
    w.n_groups = 16;
    CHECK_STATUS(ctx, wna16_linear_pack(d, &w, &pl), WNA16_ERR_GROUP_SIZE, "group size 16");
    w = t.w;
    w.k = 250;
    w.n_groups = 250 / 64;
    CHECK_STATUS(ctx, wna16_linear_pack(d, &w, &pl), WNA16_ERR_GROUP_SIZE, "multiple");
    w = t.w;
    w.bits = 3;
    CHECK_STATUS(ctx, wna16_linear_pack(d, &w, &pl), WNA16_ERR_UNSUPPORTED_BITS, "3-bit");
    w = t.w;
    w.n = 0;
    CHECK_STATUS(ctx, wna16_linear_pack(d, &w, &pl), WNA16_ERR_INVALID_ARGUMENT, "shape");
    CHECK_STATUS(ctx, wna16_linear_pack(d, NULL, &pl), WNA16_ERR_INVALID_ARGUMENT, "NULL");
    uint8_t badz[20 * 4];
    memset(badz, 3, sizeof badz);
    badz[7] = 17;
    w = t.w;
    w.zeros = badz;
    w.zero_stride = 4;
    w.symmetric = false;
    CHECK_STATUS(ctx, wna16_linear_pack(d, &w, &pl), WNA16_ERR_BAD_ZERO_POINT,
                 "zero point 17 at [1, 3] is above 2^4");
    CHECK(pl == NULL);
    wna16_linear_free(NULL);

    CHECK(wna16_linear_pack(d, &t.w, &pl) == WNA16_OK);
    float x[3 * 256], y[3 * 20];
    for (int i = 0; i < 3 * 256; i++) x[i] = 1.0f;
    for (int i = 0; i < 3 * 20; i++) y[i] = -7.0f;
    /* M = 0 is a no-op that does not touch y, even with NULL pointers */
    CHECK(wna16_linear_gemm(d, pl, 0, NULL, WNA16_DTYPE_F32, 256, NULL, WNA16_DTYPE_F32, 20, NULL,
                            WNA16_DTYPE_F32, 2) == WNA16_OK);
    CHECK(wna16_linear_gemm(d, pl, 0, x, WNA16_DTYPE_F32, 256, y, WNA16_DTYPE_F32, 20, NULL,
                            WNA16_DTYPE_F32, 2) == WNA16_OK);
    CHECK(y[0] == -7.0f);
    /* an empty N range is a no-op too */
    CHECK(wna16_linear_gemm_range(d, pl, 16, 16, 3, x, WNA16_DTYPE_F32, 256, y, WNA16_DTYPE_F32, 20,
                                  NULL, WNA16_DTYPE_F32, NULL, 0) == WNA16_OK);
    CHECK(y[16] == -7.0f);
    CHECK_STATUS(ctx,
                 wna16_linear_gemm(d, pl, 3, x, WNA16_DTYPE_I8, 256, y, WNA16_DTYPE_F32, 20, NULL,
                                   WNA16_DTYPE_F32, 1),
                 WNA16_ERR_BAD_DTYPE, "other");
    CHECK_STATUS(ctx,
                 wna16_linear_gemm(d, pl, 3, x, WNA16_DTYPE_F32, 256, y, WNA16_DTYPE_F32, 20, x,
                                   WNA16_DTYPE_BF16, 1),
                 WNA16_ERR_BAD_DTYPE, "bias");
    CHECK_STATUS(ctx,
                 wna16_linear_gemm(d, pl, 3, x, WNA16_DTYPE_F32, 255, y, WNA16_DTYPE_F32, 20, NULL,
                                   WNA16_DTYPE_F32, 1),
                 WNA16_ERR_INVALID_ARGUMENT, "ldx");
    CHECK_STATUS(ctx,
                 wna16_linear_gemm(d, pl, -1, x, WNA16_DTYPE_F32, 256, y, WNA16_DTYPE_F32, 20, NULL,
                                   WNA16_DTYPE_F32, 1),
                 WNA16_ERR_INVALID_ARGUMENT, "m = -1");
    CHECK_STATUS(ctx,
                 wna16_linear_gemm(d, pl, 1, x, WNA16_DTYPE_F32, 256, x + 100, WNA16_DTYPE_F32, 20,
                                   NULL, WNA16_DTYPE_F32, 1),
                 WNA16_ERR_INVALID_ARGUMENT, "overlap");
    CHECK_STATUS(ctx,
                 wna16_linear_gemm(d, NULL, 1, x, WNA16_DTYPE_F32, 256, y, WNA16_DTYPE_F32, 20,
                                   NULL, WNA16_DTYPE_F32, 1),
                 WNA16_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_STATUS(ctx,
                 wna16_linear_gemm_range(d, pl, 8, 20, 3, x, WNA16_DTYPE_F32, 256, y,
                                         WNA16_DTYPE_F32, 20, NULL, WNA16_DTYPE_F32, NULL, 0),
                 WNA16_ERR_INVALID_ARGUMENT, "multiple of 16");
    CHECK_STATUS(ctx,
                 wna16_linear_gemm_range(d, pl, 0, 21, 3, x, WNA16_DTYPE_F32, 256, y,
                                         WNA16_DTYPE_F32, 20, NULL, WNA16_DTYPE_F32, NULL, 0),
                 WNA16_ERR_INVALID_ARGUMENT, "range");
    static _Alignas(64) uint8_t small[64];
    CHECK_STATUS(ctx,
                 wna16_linear_gemm_range(d, pl, 0, 20, 3, x, WNA16_DTYPE_F32, 256, y,
                                         WNA16_DTYPE_F32, 20, NULL, WNA16_DTYPE_F32, small,
                                         sizeof small),
                 WNA16_ERR_INVALID_ARGUMENT, "scratch");
    /* NaN in one activation row poisons that row only, on every ISA */
    FOR_LEVELS(lvl) {
        wna16_isa_set_cap((wna16_isa)lvl);
        for (int xi = 0; xi < 3; xi++) {
            uint16_t xb[3 * 256];
            float xf[3 * 256];
            for (int i = 0; i < 3 * 256; i++) xf[i] = 0.5f;
            xf[256 + 17] = NAN;
            for (int i = 0; i < 3 * 256; i++)
                put(xi == 2 ? (void *)xf : (void *)xb, dts[xi], i, xf[i]);
            CHECK(wna16_linear_gemm(d, pl, 3, xi == 2 ? (void *)xf : (void *)xb, dts[xi], 256, y,
                                    WNA16_DTYPE_F32, 20, NULL, WNA16_DTYPE_F32, 2) == WNA16_OK);
            CHECK_MSG(!isnan(y[0]) && isnan(y[20]) && isnan(y[39]) && !isnan(y[40]), "isa %s x %s",
                      wna16_isa_name((wna16_isa)lvl), dname(dts[xi]));
        }
    }
    wna16_isa_set_cap(isa_max);
    wna16_linear_free(pl);
    tweight_free(&t);
    wna16_ctx_free(ctx);
}

static void test_isa_and_clone(void) {
    for (int i = 0; i < WNA16_ISA_COUNT; i++) {
        wna16_isa got;
        CHECK(wna16_isa_parse(wna16_isa_name((wna16_isa)i), &got) && got == (wna16_isa)i);
        wna16_isa act = wna16_isa_set_cap((wna16_isa)i);
        wna16_isa det = wna16_isa_detected();
        CHECK(act == wna16_isa_min((wna16_isa)i, det));
        CHECK(wna16_isa_active() == act);
        /* within a family the lower level; across families ref */
        CHECK(wna16_isa_le(act, det) && wna16_isa_le(act, (wna16_isa)i));
        CHECK(wna16_isa_le((wna16_isa)i, det) ? act == (wna16_isa)i
              : wna16_isa_le(det, (wna16_isa)i) ? act == det
                                                 : act == WNA16_ISA_REF);
        CHECK(wna16_isa_le(wna16_isa_lower((wna16_isa)i), (wna16_isa)i));
        CHECK(i == WNA16_ISA_REF ? wna16_isa_lower((wna16_isa)i) == WNA16_ISA_REF
                                 : wna16_isa_lower((wna16_isa)i) != (wna16_isa)i);
    }
    /* the families: x86 and aarch64 levels are not comparable */
    CHECK(wna16_isa_le(WNA16_ISA_AVX2, WNA16_ISA_AVX512BF16) &&
          !wna16_isa_le(WNA16_ISA_AVX512, WNA16_ISA_AVX2));
    CHECK(wna16_isa_le(WNA16_ISA_NEON, WNA16_ISA_NEONBF16) &&
          !wna16_isa_le(WNA16_ISA_NEONBF16, WNA16_ISA_NEON));
    CHECK(!wna16_isa_le(WNA16_ISA_AVX2, WNA16_ISA_NEONBF16) &&
          !wna16_isa_le(WNA16_ISA_NEON, WNA16_ISA_AVX512BF16));
    CHECK(wna16_isa_min(WNA16_ISA_AVX512BF16, WNA16_ISA_NEONBF16) == WNA16_ISA_REF);
    CHECK(wna16_isa_min(WNA16_ISA_AVX512BF16, WNA16_ISA_AVX2) == WNA16_ISA_AVX2);
    CHECK(wna16_isa_lower(WNA16_ISA_NEON) == WNA16_ISA_REF &&
          wna16_isa_lower(WNA16_ISA_NEONBF16) == WNA16_ISA_NEON &&
          wna16_isa_lower(WNA16_ISA_AVX2) == WNA16_ISA_REF);
    wna16_isa dummy;
    CHECK(!wna16_isa_parse("sse9", &dummy) && !wna16_isa_parse(NULL, &dummy));
    CHECK(wna16_isa_name(WNA16_ISA_COUNT) == NULL);
    CHECK(wna16_isa_set_cap(WNA16_ISA_COUNT) == wna16_isa_detected());
    wna16_isa_set_cap(isa_max);

    tweight t;
    make_weight(&t, 40, 192, 4, 64, false, false);
    wna16_packed_linear *pl = NULL, *cl = NULL;
    CHECK(wna16_linear_pack(NULL, &t.w, &pl) == WNA16_OK);
    CHECK(wna16_linear_clone(NULL, pl, &cl) == WNA16_OK);
    uint16_t x[5 * 192], y1[5 * 40], y2[5 * 40];
    for (int i = 0; i < 5 * 192; i++) x[i] = wna16_f32_to_bf16(rnd_unit());
    CHECK(wna16_linear_gemm(NULL, pl, 5, x, WNA16_DTYPE_BF16, 192, y1, WNA16_DTYPE_BF16, 40, NULL,
                            WNA16_DTYPE_F32, 2) == WNA16_OK);
    CHECK(wna16_linear_gemm(NULL, cl, 5, x, WNA16_DTYPE_BF16, 192, y2, WNA16_DTYPE_BF16, 40, NULL,
                            WNA16_DTYPE_F32, 1) == WNA16_OK);
    CHECK(!memcmp(y1, y2, sizeof y1));
    CHECK(wna16_linear_packed_bytes(cl) == wna16_linear_packed_bytes(pl));
    /* gathered into one huge-page arena (NULL entries skipped): same bits */
    wna16_packed_linear *both[] = {pl, NULL, cl};
    size_t arena_bytes = 1;
    uint8_t *arena = wna16_linear_gather(both, 3, &arena_bytes);
    CHECK(arena && ((uintptr_t)arena & ((2u << 20) - 1)) == 0);
    CHECK(arena_bytes >= 2 * wna16_linear_packed_bytes(pl));
    CHECK(wna16_linear_gemm(NULL, cl, 5, x, WNA16_DTYPE_BF16, 192, y2, WNA16_DTYPE_BF16, 40, NULL,
                            WNA16_DTYPE_F32, 2) == WNA16_OK);
    CHECK(!memcmp(y1, y2, sizeof y1));
    memset(y2, 0, sizeof y2);
    CHECK(wna16_linear_gemm(NULL, pl, 5, x, WNA16_DTYPE_BF16, 192, y2, WNA16_DTYPE_BF16, 40, NULL,
                            WNA16_DTYPE_F32, 1) == WNA16_OK);
    CHECK(!memcmp(y1, y2, sizeof y1));
    size_t gathered = arena_bytes;
    wna16_packed_linear *none[] = {NULL};
    CHECK(wna16_linear_gather(none, 1, &arena_bytes) == NULL && arena_bytes == 0);
    wna16_linear_free(cl);
    wna16_linear_free(pl);
    wna16_huge_free(arena, gathered);
    tweight_free(&t);
}

/* q|k|v-style fusion: the concatenation computes exactly each part's rows
 * (3 blocks, 1, then a partial one: with interleaved pairs the second and
 * third parts' blocks change sides of their pairs). */
static void test_concat(int ilv) {
    static const int64_t rows[] = {48, 16, 21}; /* whole blocks, then a partial last part */
    wna16_tuning tu = WNA16_TUNING_DEFAULT;
    tu.pack_interleave = ilv;
    tweight t[3];
    wna16_packed_linear *p[3] = {0}, *cat = NULL;
    for (int i = 0; i < 3; i++) {
        make_weight(&t[i], rows[i], 256, 4, 128, i != 1, true);
        t[i].w.symmetric = true; /* the layout must agree: all symmetric */
        t[i].w.zeros = NULL;
        CHECK(pack_tuned(&tu, &t[i].w, &p[i]) == WNA16_OK);
    }
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_diag *D = &((struct wna16_ctx *)ctx)->diag;
    const wna16_packed_linear *parts[3] = {p[0], p[1], p[2]};
    CHECK(wna16_linear_concat(D, parts, 3, &cat) == WNA16_OK);
    CHECK(cat && wna16_linear_n(cat) == 48 + 16 + 21 && wna16_linear_k(cat) == 256);
    CHECK(cat && wna16_linear_interleave(cat) == ilv);
    uint16_t x[3 * 256], y[3 * 85], yp[3 * 48];
    for (int i = 0; i < 3 * 256; i++) x[i] = wna16_f32_to_bf16((float)(i % 7) - 3.0f);
    CHECK(cat && wna16_linear_gemm(NULL, cat, 3, x, WNA16_DTYPE_BF16, 256, y, WNA16_DTYPE_BF16, 85,
                                   NULL, WNA16_DTYPE_F32, 2) == WNA16_OK);
    for (int i = 0, o = 0; i < 3; o += (int)rows[i], i++) {
        CHECK(wna16_linear_gemm(NULL, p[i], 3, x, WNA16_DTYPE_BF16, 256, yp, WNA16_DTYPE_BF16,
                                rows[i], NULL, WNA16_DTYPE_F32, 1) == WNA16_OK);
        for (int r = 0; r < 3; r++)
            CHECK_MSG(!memcmp(y + r * 85 + o, yp + r * rows[i], (size_t)rows[i] * 2),
                      "concat part %d row %d", i, r);
    }
    wna16_linear_free(cat);
    /* a part that is not whole blocks, except the last, is refused */
    const wna16_packed_linear *bad[2] = {p[2], p[0]};
    CHECK(wna16_linear_concat(D, bad, 2, &cat) == WNA16_ERR_INVALID_ARGUMENT && cat == NULL);
    CHECK(strstr(wna16_ctx_error(ctx), "not whole 16-row blocks"));
    /* so is a part packed differently (8-bit) */
    tweight t8;
    wna16_packed_linear *p8 = NULL;
    make_weight(&t8, 16, 256, 8, 128, true, true);
    CHECK(pack_tuned(&tu, &t8.w, &p8) == WNA16_OK);
    const wna16_packed_linear *mixed[2] = {p[1], p8};
    CHECK(wna16_linear_concat(D, mixed, 2, &cat) == WNA16_ERR_INVALID_ARGUMENT);
    CHECK(strstr(wna16_ctx_error(ctx), "packed differently"));
    wna16_linear_free(p8);
    tweight_free(&t8);
    wna16_ctx_free(ctx);
    for (int i = 0; i < 3; i++) {
        wna16_linear_free(p[i]);
        tweight_free(&t[i]);
    }
}

/* Tuning lives in the context: two contexts with different knobs, used one
 * after another, each pack and compute with their own (b's decode_max_m 0:
 * the panel path at m = 3 where the level has one; b's interleave the other
 * one), the bits of all of them equal the exact reference, and a weight
 * packed under a after b was used has a's tuning again. */
static void test_ctx_tuning(void) {
    wna16_ctx *a = NULL, *b = NULL;
    CHECK(wna16_ctx_create(&a) == WNA16_OK && wna16_ctx_create(&b) == WNA16_OK);
    if (!a || !b) return;
    wna16_tuning *ta = wna16_ctx_tuning(a), *tb = wna16_ctx_tuning(b);
    CHECK(ta->decode_max_m < 0 && ta->dense_tile_min_m < 0 && !ta->value_pack);
    CHECK(wna16_tuning_of(wna16_ctx_diag(a)) == ta && wna16_tuning_of(NULL)->decode_max_m < 0);
    enum { M = 3, N = 40, K = 256 };
    tweight t;
    make_weight(&t, N, K, 4, 64, false, true);
    wna16_packed_linear *pa = NULL, *pb = NULL, *pa2 = NULL, *pbc = NULL;
    CHECK(wna16_linear_pack(wna16_ctx_diag(a), &t.w, &pa) == WNA16_OK);
    int ilv_default = pa ? wna16_linear_interleave(pa) : 1;
    tb->decode_max_m = 0;
    tb->pack_interleave = 3 - ilv_default;
    CHECK(wna16_linear_pack(wna16_ctx_diag(b), &t.w, &pb) == WNA16_OK);
    CHECK(wna16_linear_pack(wna16_ctx_diag(a), &t.w, &pa2) == WNA16_OK);
    if (!pa || !pb || !pa2) goto done;
    CHECK(wna16_linear_clone(wna16_ctx_diag(a), pb, &pbc) == WNA16_OK && pbc);
    if (!pbc) goto done;
    CHECK(wna16_linear_decode_max_m(pa) < 0 && wna16_linear_decode_max_m(pa2) < 0);
    CHECK(wna16_linear_decode_max_m(pb) == 0 && wna16_linear_decode_max_m(pbc) == 0);
    CHECK(wna16_linear_interleave(pa2) == ilv_default &&
          wna16_linear_interleave(pb) == 3 - ilv_default &&
          wna16_linear_interleave(pbc) == 3 - ilv_default);
    uint16_t x[M * K], ya[M * N], yb[M * N], ya2[M * N], ybc[M * N];
    float xf[M * K];
    for (int i = 0; i < M * K; i++) {
        xf[i] = (float)rnd_int(-4, 4);
        x[i] = wna16_f32_to_bf16(xf[i]);
    }
    double ref[M * N];
    wna16_linear_ref_f64(&t.w, M, xf, K, NULL, ref, NULL);
    int differ = 0;
    FOR_LEVELS(lvl) {
        wna16_isa_set_cap((wna16_isa)lvl);
        const char *pth_a = wna16_linear_path(pa, M, WNA16_DTYPE_BF16),
                   *pth_b = wna16_linear_path(pb, M, WNA16_DTYPE_BF16);
        bool panel = level_has_panel(WNA16_WFMT_Q4);
        CHECK_MSG(pth_a && pth_b && !strstr(pth_a, "panel") &&
                      (strstr(pth_b, "panel") != NULL) == panel &&
                      !strcmp(pth_a, wna16_linear_path(pa2, M, WNA16_DTYPE_BF16)) &&
                      !strcmp(pth_b, wna16_linear_path(pbc, M, WNA16_DTYPE_BF16)),
                  "isa %s: paths %s (a) and %s (b)", wna16_isa_name((wna16_isa)lvl),
                  pth_a ? pth_a : "NULL", pth_b ? pth_b : "NULL");
        differ += pth_a && pth_b && strcmp(pth_a, pth_b) != 0;
        /* one after another, each under its own context */
        CHECK(wna16_linear_gemm(wna16_ctx_diag(a), pa, M, x, WNA16_DTYPE_BF16, K, ya,
                                WNA16_DTYPE_BF16, N, NULL, WNA16_DTYPE_F32, 2) == WNA16_OK);
        CHECK(wna16_linear_gemm(wna16_ctx_diag(b), pb, M, x, WNA16_DTYPE_BF16, K, yb,
                                WNA16_DTYPE_BF16, N, NULL, WNA16_DTYPE_F32, 2) == WNA16_OK);
        CHECK(wna16_linear_gemm(wna16_ctx_diag(a), pa2, M, x, WNA16_DTYPE_BF16, K, ya2,
                                WNA16_DTYPE_BF16, N, NULL, WNA16_DTYPE_F32, 1) == WNA16_OK);
        CHECK(wna16_linear_gemm(NULL, pbc, M, x, WNA16_DTYPE_BF16, K, ybc, WNA16_DTYPE_BF16, N,
                                NULL, WNA16_DTYPE_F32, 1) == WNA16_OK);
        bool exact = true;
        for (int i = 0; i < M * N; i++) exact &= ya[i] == wna16_f32_to_bf16((float)ref[i]);
        CHECK_MSG(exact && !memcmp(ya, yb, sizeof ya) && !memcmp(ya, ya2, sizeof ya) &&
                      !memcmp(ya, ybc, sizeof ya),
                  "isa %s: the two contexts' results differ", wna16_isa_name((wna16_isa)lvl));
    }
    wna16_isa_set_cap(isa_max);
    /* the panel is not the reference level's: a machine with more took b's path somewhere */
    CHECK(isa_max == WNA16_ISA_REF || !level_has_panel(WNA16_WFMT_Q4) || differ > 0);
done:
    wna16_linear_free(pa);
    wna16_linear_free(pb);
    wna16_linear_free(pa2);
    wna16_linear_free(pbc);
    tweight_free(&t);
    wna16_ctx_free(a);
    wna16_ctx_free(b);
}

/* The end of the integer paths' sub-block that starts at input c0: at most
 * 128 k from the start of its group (channelwise: of the padded row). */
static int64_t sub_block_end(const wna16_qweight *w, int64_t c0) {
    int64_t kp = (w->k + 7) / 8 * 8;
    int64_t gsp = w->n_groups == 1 ? kp : w->group_size, sbk = gsp < 128 ? gsp : 128;
    int64_t g = c0 / gsp, s = (c0 - g * gsp) / sbk;
    int64_t c1 = g * gsp + (s + 1) * sbk;
    if (c1 > (g + 1) * gsp) c1 = (g + 1) * gsp;
    return c1 < w->k ? c1 : w->k;
}

/* The int16-activation paths' own rounding (docs/kernels.md §Integer
 * activations): each activation is rounded to 2^-15 of the largest |a| of
 * its sub-block (at most 128 k from the start of its group), so an output
 * may move by up to 2^-15 Σ_c |w(o, c)| max_sub(c) beyond the fp32 bound.
 * bound[i][o] gets that term for the n outputs of the m rows. */
static void i16_bound(const wna16_qweight *w, int64_t m, const float *x, int64_t ldx,
                      double *bound) {
    double *mx = malloc((size_t)w->k * sizeof(double));
    for (int64_t i = 0; i < m; i++) {
        for (int64_t c0 = 0; c0 < w->k;) {
            int64_t c1 = sub_block_end(w, c0);
            double v = 0;
            for (int64_t c = c0; c < c1; c++) v = fmax(v, fabs(x[i * ldx + c]));
            for (int64_t c = c0; c < c1; c++) mx[c] = v;
            c0 = c1;
        }
        for (int64_t o = 0; o < w->n; o++) {
            double b = 0;
            for (int64_t c = 0; c < w->k; c++) b += fabs(wna16_qweight_value(w, o, c)) * mx[c];
            bound[i * w->n + o] = b * 0x1p-15;
        }
    }
    free(mx);
}

/* Random activations spread over 2^±60 with zeros among them (the int16
 * paths' exponents per sub-block) instead of [-1, 1). */
static bool x_wide = false;
/* The decode_max_m run_case packs under (0: the panel path at every m);
 * n_forced: its runs that the panel path took. */
static int64_t case_decode_max_m = -1;
static int n_forced;
/* runs the AMX panel took */
static int n_amx;

/* One case: all ISA levels, 1 and 2 threads, and the range API, against the
 * double reference. */
static void run_case(int64_t m, int64_t n, int64_t k, int bits, int64_t gs, bool sym, bool exact,
                     wna16_dtype xt, wna16_dtype yt, int bias_kind /* 0 none, 1 f32, 2 yt */,
                     bool odd_strides) {
    n_cases++;
    tweight t;
    make_weight(&t, n, k, bits, gs, sym, exact);
    wna16_packed_linear *pl = NULL;
    /* every third case packs blocks one after another, the others in
     * interleaved pairs (the default with 32-wide kernels); every ISA level
     * reads either */
    wna16_tuning tu = WNA16_TUNING_DEFAULT;
    tu.pack_interleave = n_cases % 3 ? 2 : 1;
    tu.decode_max_m = case_decode_max_m;
    wna16_status pst = pack_tuned(&tu, &t.w, &pl);
    if (pst != WNA16_OK) {
        CHECK_MSG(0, "pack failed n=%lld k=%lld", (long long)n, (long long)k);
        tweight_free(&t);
        return;
    }
    int64_t ldx = odd_strides ? k + 3 : k, ldy = odd_strides ? n + 5 : n;
    size_t xs = dsize(xt), ys = dsize(yt);
    /* +1 element: x and y start unaligned when odd_strides */
    uint8_t *xbuf = malloc((size_t)(m * ldx + 1) * xs), *xp = xbuf + (odd_strides ? xs : 0);
    float *xf = malloc((size_t)(m * ldx) * 4);
    for (int64_t i = 0; i < m * ldx; i++) {
        float v = exact ? (float)rnd_int(-4, 4) : rnd_unit();
        if (x_wide && !exact) v = ldexpf(v, rnd_int(-60, 60)) * (rnd() % 7 == 0 ? 0.0f : 1.0f);
        v = round_to(xt, v);
        xf[i] = v;
        put(xp, xt, i, v);
    }
    float *bf = NULL;
    void *bias = NULL;
    wna16_dtype bt = bias_kind == 2 ? yt : WNA16_DTYPE_F32;
    if (bias_kind) {
        bf = malloc((size_t)n * 4);
        bias = malloc((size_t)n * 4);
        for (int64_t o = 0; o < n; o++) {
            float v = round_to(bt, exact ? (float)rnd_int(-8, 8) : rnd_unit());
            bf[o] = v;
            put(bias, bt, o, v);
        }
    }
    double *ref = malloc((size_t)(m * n) * sizeof(double)), *sabs = malloc((size_t)(m * n) * 8);
    wna16_linear_ref_f64(&t.w, m, xf, ldx, bf, ref, sabs);
    double *ib = malloc((size_t)(m * n) * sizeof(double));
    i16_bound(&t.w, m, xf, ldx, ib);
    size_t ybytes = (size_t)(m * ldy + 1) * ys;
    uint8_t *y1 = malloc(ybytes), *y2 = malloc(ybytes), *y3 = malloc(ybytes);
    FOR_LEVELS(lvl) {
        wna16_isa_set_cap((wna16_isa)lvl);
        memset(y1, 0xA5, ybytes);
        memset(y2, 0x5A, ybytes);
        memset(y3, 0x33, ybytes);
        uint8_t *yp1 = y1 + (odd_strides ? ys : 0), *yp2 = y2 + (odd_strides ? ys : 0),
                *yp3 = y3 + (odd_strides ? ys : 0);
        n_runs++;
        CHECK(wna16_linear_gemm(NULL, pl, m, xp, xt, ldx, yp1, yt, ldy, bias, bt, 1) == WNA16_OK);
        CHECK(wna16_linear_gemm(NULL, pl, m, xp, xt, ldx, yp2, yt, ldy, bias, bt, 2) == WNA16_OK);
        /* the MoE-style caller: three N ranges with caller-owned scratch */
        size_t sb = wna16_linear_scratch_bytes(pl, m);
        void *scr = aligned_alloc(64, (sb + 63) / 64 * 64);
        for (int part = 0; part < 3; part++) {
            int64_t nb, ne;
            wna16_linear_split(pl, part, 3, &nb, &ne);
            CHECK(wna16_linear_gemm_range(NULL, pl, nb, ne, m, xp, xt, ldx, yp3, yt, ldy, bias, bt,
                                          scr, sb) == WNA16_OK);
        }
        free(scr);
        if (case_decode_max_m == 0 && xt == WNA16_DTYPE_BF16) {
            /* the packed weight took its tuning along: the panel, where the
             * level has one */
            const char *path = wna16_linear_path(pl, m, xt);
            bool panel = path && strstr(path, "panel");
            CHECK_MSG(panel == level_has_panel(wna16_wfmt_of(bits)), "isa %s m=%lld int%d: path %s",
                      wna16_isa_name((wna16_isa)lvl), (long long)m, bits, path ? path : "NULL");
            n_forced += panel;
        }
        const char *taken = wna16_linear_path(pl, m, xt);
        if (taken && !strcmp(taken, "amx_panel")) {
            /* the AMX panel gives the int16 leaves' bits */
            n_amx++;
            uint8_t *y4 = malloc(ybytes), *yp4 = y4 + (odd_strides ? ys : 0);
            memcpy(y4, y1, ybytes);
            CHECK(!wna16_amx_set(0));
            CHECK(wna16_linear_gemm(NULL, pl, m, xp, xt, ldx, yp4, yt, ldy, bias, bt, 2) ==
                  WNA16_OK);
            CHECK(wna16_amx_set(1));
            CHECK_MSG(!memcmp(y1, y4, ybytes), "amx panel vs int16 m=%lld n=%lld k=%lld gs=%lld",
                      (long long)m, (long long)n, (long long)k, (long long)gs);
            free(y4);
        }
        int bad = 0, bad_thr = 0;
        double worst = 0;
        const wna16_kernel_table *kt = wna16_kernels();
        bool i16 = xt == WNA16_DTYPE_BF16 && kt->gemv_i16[WNA16_WFMT_Q4] && !kt->gemv_bf16[WNA16_WFMT_Q4];
        for (int64_t i = 0; i < m; i++)
            for (int64_t o = 0; o < n; o++) {
                int64_t at = i * ldy + o;
                if (memcmp(yp1 + at * ys, yp2 + at * ys, ys) ||
                    memcmp(yp1 + at * ys, yp3 + at * ys, ys))
                    bad_thr++;
                double r = ref[i * n + o], got = get(yp1, yt, at);
                if (exact) {
                    float want = round_to(yt, (float)r);
                    if (memcmp(&want, &(float){round_to(yt, (float)got)}, 4) || want != (float)got)
                        bad++;
                } else {
                    double tol = 2 * u_out(yt) * fabs(r) +
                                 ((double)k * 0x1p-24 + 2 * u_out(yt)) * sabs[i * n + o] + 1e-30 +
                                 (i16 ? ib[i * n + o] : 0);
                    double err = fabs(got - r);
                    if (!(err <= tol)) bad++;
                    if (tol > 0 && err / tol > worst) worst = err / tol;
                }
            }
        /* padding between rows is never written */
        bool pad_ok = true;
        if (odd_strides)
            for (int64_t i = 0; i < m; i++)
                for (int64_t o = n; o < ldy && i * ldy + o < m * ldy; o++)
                    pad_ok &= yp1[(i * ldy + o) * ys] == 0xA5;
        CHECK_MSG(bad == 0 && bad_thr == 0 && pad_ok,
                  "isa %s m=%lld n=%lld k=%lld bits=%d gs=%lld %s %s x=%s y=%s bias=%d: "
                  "%d wrong, %d differ across threads/ranges, pad %d (worst err/tol %.3g)",
                  wna16_isa_name((wna16_isa)lvl), (long long)m, (long long)n, (long long)k, bits,
                  (long long)gs, sym ? "sym" : "asym", exact ? "exact" : "random", dname(xt),
                  dname(yt), bias_kind, bad, bad_thr, pad_ok, worst);
    }
    wna16_isa_set_cap(isa_max);
    free(y1);
    free(y2);
    free(y3);
    free(ref);
    free(ib);
    free(sabs);
    free(xbuf);
    free(xf);
    free(bf);
    free(bias);
    wna16_linear_free(pl);
    tweight_free(&t);
}

static void test_matrix(bool quick) {
    /* 9, 10, 17, 18: small-batch tiles of 9-10 rows (a remainder spread) */
    static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 17, 18, 64, 255};
    const size_t n_ms = sizeof Ms / sizeof Ms[0];
    static const int64_t Ns[] = {1, 15, 16, 17, 31, 32, 33, 48, 50};
    static const int64_t Ks_cw[] = {1, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 64, 65, 100};
    static const int64_t gss[] = {32, 64, 128, 0};
    int combo = 0;
    for (int bits = 4; bits <= 8; bits += 4)
        for (int sym = 0; sym < 2; sym++)
            for (size_t gi = 0; gi < 4; gi++) {
                int64_t gs = gss[gi];
                int64_t Ks[14];
                size_t nk = 0;
                if (gs) {
                    Ks[nk++] = gs;
                    Ks[nk++] = 2 * gs;
                    Ks[nk++] = 3 * gs; /* 96: not a multiple of 64 */
                } else {
                    for (; nk < 14; nk++) Ks[nk] = Ks_cw[nk];
                }
                /* every N x K edge, M rotating through the list */
                for (size_t ni = 0; ni < 9; ni++)
                    for (size_t ki = 0; ki < nk; ki++) {
                        if (quick && (ni + ki) % 3) continue;
                        int c = combo++;
                        int64_t m = Ms[(size_t)c % n_ms];
                        if (m == 255 && quick) m = 17;
                        run_case(m, Ns[ni], Ks[ki], bits, gs, sym, c % 2 == 0, dts[c % 3],
                                 dts[(c / 3) % 3], c % 4 == 3 ? 0 : (c % 4), c % 5 == 0);
                    }
                /* every M with both regimes on a ragged shape */
                for (size_t mi = 0; mi < n_ms; mi++) {
                    if (quick && mi % 3) continue;
                    int c = combo++;
                    int64_t k = gs ? 2 * gs : 65;
                    for (int ex = 0; ex < 2; ex++)
                        run_case(Ms[mi], 33, k, bits, gs, sym, ex, dts[c % 3], dts[(c + ex) % 3],
                                 c % 3, mi % 2);
                }
            }
    /* every activation x output dtype pair, both regimes, decode and prefill M */
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 3; yi++)
            for (int ex = 0; ex < 2; ex++) {
                run_case(1, 40, 256, 4, 128, true, ex, dts[xi], dts[yi], 1, false);
                run_case(13, 40, 256, 8, 64, false, ex, dts[xi], dts[yi], 2, true);
            }
    /* channelwise rows longer than one 128-k sub-block, and activations of
     * every magnitude: the int16 paths sum sub-blocks of different exponents */
    for (int bits = 4; bits <= 8; bits += 4)
        for (int wide = 0; wide < 2; wide++) {
            x_wide = wide;
            static const int64_t mw[] = {1, 3, 7, 64};
            for (int mi = 0; mi < 4; mi++) {
                if (quick && mi % 2) continue;
                run_case(mw[mi], 33, 300, bits, 0, mi % 2, !wide && mi % 2, WNA16_DTYPE_BF16,
                         wide ? WNA16_DTYPE_BF16 : dts[mi % 3], mi % 3, false); /* f16 overflows */
                run_case(mw[mi], 20, 1000, bits, 0, mi % 2 == 0, false, WNA16_DTYPE_BF16,
                         WNA16_DTYPE_F32, 0, false);
                run_case(mw[mi], 40, 384, bits, 128, mi % 2, false, WNA16_DTYPE_BF16,
                         WNA16_DTYPE_F32, 1, false);
            }
            x_wide = false;
        }
    /* the panel micro-kernel for every row-tile height (forced for small m) */
    case_decode_max_m = 0;
    for (int64_t m = 1; m <= 24; m += (m < 13 ? 1 : 5)) {
        run_case(m, 40, 256, 4, 64, m % 2, m % 3 != 0, WNA16_DTYPE_BF16, dts[m % 3], m % 3,
                 m % 4 == 1);
        run_case(m, 17, 72, 8, 0, m % 2 == 0, m % 3 == 0, WNA16_DTYPE_BF16, dts[(m + 1) % 3],
                 (m + 1) % 3, false);
    }
    run_case(64, 48, 1024, 4, 128, true, false, WNA16_DTYPE_BF16, WNA16_DTYPE_BF16, 0, false);
    case_decode_max_m = -1;
    bool any_panel = false;
    FOR_LEVELS(lvl) {
        wna16_isa_set_cap((wna16_isa)lvl);
        any_panel |= level_has_panel(WNA16_WFMT_Q4);
    }
    wna16_isa_set_cap(isa_max);
    CHECK_MSG(any_panel ? n_forced > 0 : n_forced == 0, "%d runs forced onto a panel", n_forced);
    /* larger: several panel chunks and several N blocks per thread */
    run_case(17, 80, 1024, 4, 32, true, false, WNA16_DTYPE_BF16, WNA16_DTYPE_BF16, 0, false);
    run_case(29, 100, 1024, 4, 128, false, true, WNA16_DTYPE_BF16, WNA16_DTYPE_F32, 1, false);
    run_case(130, 48, 512, 4, 32, true, false, WNA16_DTYPE_BF16, WNA16_DTYPE_BF16, 2, false);
    run_case(300, 40, 1024, 4, 64, false, false, WNA16_DTYPE_BF16, WNA16_DTYPE_BF16, 0, false);
    run_case(300, 40, 1024, 8, 128, true, true, WNA16_DTYPE_BF16, WNA16_DTYPE_F32, 1, true);
    /* channelwise int4 rows of several 128-k sub-blocks (the AMX panel sums
     * them per row in its partial buffer), one tile of rows and two */
    run_case(7, 40, 512, 4, 0, true, false, WNA16_DTYPE_BF16, WNA16_DTYPE_BF16, 0, false);
    run_case(20, 33, 384, 4, 0, false, true, WNA16_DTYPE_BF16, WNA16_DTYPE_F32, 1, true);
    /* activations past the private-copy size: one copy packed by all threads */
    run_case(300, 40, 1024, 4, 64, true, false, WNA16_DTYPE_F32, WNA16_DTYPE_BF16, 1, false);
    run_case(3, 100, 1030, 8, 0, true, false, WNA16_DTYPE_BF16, WNA16_DTYPE_F16, 0, false);
    run_case(40, 64, 1030, 4, 0, false, true, WNA16_DTYPE_BF16, WNA16_DTYPE_BF16, 1, false);
}

/* Every level's int16 activation quantizer gives the reference's a', inv
 * and sum: magnitudes from denormal (the exponent cap) to near FLT_MAX,
 * values spread over 2^100 (many a' halves: ties to even), one binade, the
 * top of the range (every |a'| 32640: a bf16 never rounds to 2^15), zeros,
 * NaN and infinities (inv NaN), every tail length, zeros past n. */
static void test_quant_i16(void) {
    enum { N = 160 };
    uint32_t r = 777;
    for (int kind = 0; kind < 7; kind++)
        for (int64_t n = 0; n <= 130; n += n < 40 ? 1 : 9) {
            uint16_t x[N];
            for (int64_t i = 0; i < n; i++) {
                r = r * 1664525u + 1013904223u;
                int ex = kind == 1   ? 1 + (int)(r >> 28)
                         : kind == 2 ? 250 - (int)(r >> 29)
                                     : 60 + (int)(r >> 26) % 100;
                uint16_t mant = (uint16_t)((r >> 8) & 0x7f);
                x[i] = (uint16_t)((r & 1) << 15 | ex << 7 | mant);
            }
            if (kind == 3) /* one binade, [1, 2): every a' exact */
                for (int64_t i = 0; i < n; i++) x[i] = (uint16_t)(0x3f80 | (x[i] & 0x807f));
            if (kind == 4)
                for (int64_t i = 0; i < n; i++) x[i] = (uint16_t)((i & 1) << 15); /* ±0 */
            if (kind == 5 && n > 0) x[(n * 7) / 8] = (r & 2) ? 0x7fc1 : 0xff80;   /* NaN, -inf */
            if (kind == 6)
                for (int64_t i = 0; i < n; i++)
                    x[i] = (uint16_t)(0x477f | (x[i] & 0x8000)); /* ±65280 */
            FOR_LEVELS(lvl) {
                const wna16_kernel_table *t = wna16_kernels_at((wna16_isa)lvl);
                int16_t want[N], got[N];
                float inv_w, inv_g;
                int32_t sum_w, sum_g;
                int64_t len = n + (n % 3) * 5;
                memset(got, 0x55, sizeof got);
                wna16_quant_i16__ref(x, n, len, want, &inv_w, &sum_w);
                t->quant_i16(x, n, len, got, &inv_g, &sum_g);
                CHECK_MSG(!memcmp(want, got, (size_t)len * 2) && sum_w == sum_g &&
                              (isnan(inv_w) ? isnan(inv_g) : inv_w == inv_g),
                          "isa %s kind %d n=%lld", wna16_isa_name((wna16_isa)lvl), kind,
                          (long long)n);
                CHECK(got[len] == 0x5555); /* nothing past len */
            }
        }
}

/* The int8 activations' leaves: every level's absmax and quantizer give
 * the reference's bits (ties, the clamp's edge, zeros, non-finite bits,
 * every tail), and write nothing past n. */
static void test_quant_i8(void) {
    enum { N = 160 };
    uint32_t r = 4242;
    for (int kind = 0; kind < 5; kind++)
        for (int64_t n = 0; n <= 130; n += n < 40 ? 1 : 9) {
            uint16_t x[N];
            for (int64_t i = 0; i < n; i++) {
                r = r * 1664525u + 1013904223u;
                x[i] = (uint16_t)((r & 1) << 15 | (100 + (int)(r >> 27)) << 7 | ((r >> 8) & 0x7f));
            }
            if (kind == 1) /* small integers: x * 127 / 8 lands on every tie */
                for (int64_t i = 0; i < n; i++)
                    x[i] = wna16_f32_to_bf16((float)((int)(x[i] % 17) - 8));
            if (kind == 2)
                for (int64_t i = 0; i < n; i++) x[i] = (uint16_t)((i & 1) << 15); /* ±0 */
            if (kind == 3 && n > 0) x[(n * 5) / 8] = (r & 2) ? 0x7fc1 : 0xff80; /* NaN, -inf */
            FOR_LEVELS(lvl) {
                const wna16_kernel_table *t = wna16_kernels_at((wna16_isa)lvl);
                uint16_t top = wna16_absmax_bf16__ref(x, n);
                CHECK_MSG(t->absmax_bf16(x, n) == top, "isa %s kind %d n=%lld: absmax",
                          wna16_isa_name((wna16_isa)lvl), kind, (long long)n);
                if (top >= 0x7f80 || top == 0) continue;
                /* kind 4: a scale a little above 127 / amax, so the clamp acts */
                float rs = 127.0f / wna16_bf16_to_f32(top) * (kind == 4 ? 1.004f : 1.0f);
                int8_t want[N + 1], got[N + 1];
                memset(got, 0x55, sizeof got);
                int32_t sw = wna16_quant_i8__ref(x, n, rs, want);
                int32_t sg = t->quant_i8(x, n, rs, got);
                CHECK_MSG(!memcmp(want, got, (size_t)n) && sw == sg && got[n] == 0x55,
                          "isa %s kind %d n=%lld: quant", wna16_isa_name((wna16_isa)lvl), kind,
                          (long long)n);
            }
        }
}

/* The int8 activations' arithmetic in double (docs/kernels.md §Int8
 * activations): each sub-block (at most 128 k from its group's start) of a
 * row as q = rint(a * (127 / amax)) in fp32, worth amax / 127 each; ref =
 * Σ (amax / 127) q w, sabs = Σ |that|. */
static void a8_ref(const wna16_qweight *w, int64_t m, const uint16_t *x, int64_t ldx, double *ref,
                   double *sabs) {
    double *xq = malloc((size_t)w->k * sizeof(double));
    for (int64_t i = 0; i < m; i++) {
        for (int64_t c0 = 0; c0 < w->k;) {
            int64_t c1 = sub_block_end(w, c0);
            float amax = 0;
            for (int64_t c = c0; c < c1; c++)
                amax = fmaxf(amax, fabsf(wna16_bf16_to_f32(x[i * ldx + c])));
            float rs = amax > 0 ? 127.0f / amax : 0.0f, unit = amax / 127.0f;
            for (int64_t c = c0; c < c1; c++) {
                float v = wna16_bf16_to_f32(x[i * ldx + c]) * rs;
                xq[c] = (double)nearbyintf(v) * unit;
            }
            c0 = c1;
        }
        for (int64_t o = 0; o < w->n; o++) {
            double acc = 0, sa = 0;
            for (int64_t c = 0; c < w->k; c++) {
                double t = xq[c] * wna16_qweight_value(w, o, c);
                acc += t;
                sa += fabs(t);
            }
            ref[i * w->n + o] = acc;
            sabs[i * w->n + o] = sa;
        }
    }
    free(xq);
}

/* Weights packed for int8 activations: every level with the integer
 * kernels, both regimes, 1 and 2 threads, the range API and each row alone
 * give one set of bits, within fp32 rounding of a8_ref; a row with a NaN
 * comes out NaN and leaves the others alone; the reference level refuses
 * them at pack and at gemm time, naming the level. */
static int n_a8;      /* runs on the int8 activations' own leaf (a8_gemv) */
static int n_a8_avx2; /* of them, the avx2 level's */

static void test_act_int8(void) {
    static const struct { int64_t m, n, k, gs; int bits; bool sym; } cs[] = {
        {1, 48, 128, 32, 4, true},   {3, 32, 576, 64, 4, false}, {5, 80, 256, 128, 4, true},
        {8, 48, 256, 0, 4, true},    {17, 64, 512, 128, 4, false}, {40, 48, 128, 64, 4, true},
        {6, 32, 128, 32, 8, false},  {24, 48, 256, 128, 8, true},
        /* whole 16-row AMX tiles, two 64-k tile steps a sub-block */
        {32, 48, 512, 128, 4, false}, {48, 32, 256, 0, 4, true},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        for (int forced = 0; forced < 2; forced++) {
            int64_t m = cs[ci].m, n = cs[ci].n, k = cs[ci].k;
            tweight t;
            make_weight(&t, n, k, cs[ci].bits, cs[ci].gs, cs[ci].sym, false);
            wna16_tuning tu = WNA16_TUNING_DEFAULT;
            tu.act_int8 = true;
            tu.decode_max_m = forced ? 0 : -1;
            wna16_packed_linear *pl = NULL;
            if (pack_tuned(&tu, &t.w, &pl) != WNA16_OK) {
                CHECK_MSG(0, "pack a8 case %zu", ci);
                tweight_free(&t);
                continue;
            }
            uint16_t *x = malloc((size_t)(m * k) * 2);
            for (int64_t i = 0; i < m * k; i++) x[i] = wna16_f32_to_bf16(rnd_unit() * 3.0f);
            if (m > 2) x[1 * k + k / 3] = 0x7fc0; /* a NaN in row 1 */
            double *ref = malloc((size_t)(m * n) * 8), *sabs = malloc((size_t)(m * n) * 8);
            a8_ref(&t.w, m, x, k, ref, sabs);
            float *first = NULL, *y = malloc((size_t)(m * n) * 4), *y1 = malloc((size_t)n * 4);
            FOR_LEVELS(lvl) {
                wna16_isa_set_cap((wna16_isa)lvl);
                if (!wna16_kernels()->gemv_i16[wna16_wfmt_of(cs[ci].bits)]) {
                    wna16_diag d = {0};
                    CHECK(wna16_linear_gemm(&d, pl, m, x, WNA16_DTYPE_BF16, k, y,
                                            WNA16_DTYPE_F32, n, NULL, WNA16_DTYPE_F32,
                                            1) == WNA16_ERR_UNSUPPORTED);
                    CHECK_MSG(strstr(d.detail, wna16_isa_name((wna16_isa)lvl)) &&
                                  strstr(d.detail, "int8 activations"),
                              "%s", d.detail);
                    wna16_packed_linear *no = NULL;
                    wna16_hooks h = {.tuning = &tu};
                    wna16_diag dp = {.hooks = &h};
                    CHECK(wna16_linear_pack(&dp, &t.w, &no) == WNA16_ERR_UNSUPPORTED && !no);
                    CHECK_MSG(strstr(dp.detail, "int8 activations need the integer kernels"),
                              "%s", dp.detail);
                    continue;
                }
                const char *path = wna16_linear_path(pl, m, WNA16_DTYPE_BF16);
                n_a8 += path && !strcmp(path, "a8_gemv");
                n_a8_avx2 += lvl == WNA16_ISA_AVX2 && path && !strcmp(path, "a8_gemv");
                /* a level with an int8 leaf runs int4 on it below AMX */
                if (cs[ci].bits == 4 && wna16_kernels()->gemv_a8 && path && !strstr(path, "amx"))
                    CHECK_MSG(!strcmp(path, "a8_gemv"), "isa %s m=%lld: int8 took %s, not its leaf",
                              wna16_isa_name((wna16_isa)lvl), (long long)m, path);
                CHECK_MSG(path && (strstr(path, "i16") || strstr(path, "amx") ||
                                   !strcmp(path, "a8_gemv")),
                          "isa %s m=%lld: int8 activations took %s",
                          wna16_isa_name((wna16_isa)lvl), (long long)m, path ? path : "NULL");
                for (int nt = 1; nt <= 2; nt++) {
                    CHECK(wna16_linear_gemm(NULL, pl, m, x, WNA16_DTYPE_BF16, k, y,
                                            WNA16_DTYPE_F32, n, NULL, WNA16_DTYPE_F32,
                                            nt) == WNA16_OK);
                    if (!first) {
                        first = malloc((size_t)(m * n) * 4);
                        memcpy(first, y, (size_t)(m * n) * 4);
                    }
                    CHECK_MSG(!memcmp(first, y, (size_t)(m * n) * 4),
                              "case %zu isa %s threads %d: bits differ", ci,
                              wna16_isa_name((wna16_isa)lvl), nt);
                }
                for (int64_t i = 0; i < m; i += m > 4 ? m / 3 : 1) {
                    CHECK(wna16_linear_gemm(NULL, pl, 1, x + i * k, WNA16_DTYPE_BF16, k, y1,
                                            WNA16_DTYPE_F32, n, NULL, WNA16_DTYPE_F32,
                                            1) == WNA16_OK);
                    CHECK_MSG(!memcmp(y1, y + i * n, (size_t)n * 4),
                              "case %zu isa %s row %lld alone", ci,
                              wna16_isa_name((wna16_isa)lvl), (long long)i);
                }
            }
            wna16_isa_set_cap(isa_max);
            int bad = 0;
            for (int64_t i = 0; first && i < m; i++)
                for (int64_t o = 0; o < n; o++) {
                    double got = first[i * n + o], r = ref[i * n + o];
                    if (m > 2 && i == 1) {
                        bad += !isnan(got);
                        continue;
                    }
                    double tol = 2 * 0x1p-24 * fabs(r) + ((double)k * 0x1p-24) * sabs[i * n + o];
                    bad += !(fabs(got - r) <= tol + 1e-30);
                }
            CHECK_MSG(bad == 0, "case %zu forced %d: %d outputs off the int8 reference", ci, forced,
                      bad);
            free(first);
            free(y);
            free(y1);
            free(x);
            free(ref);
            free(sabs);
            wna16_linear_free(pl);
            tweight_free(&t);
        }
}

/* The epilogue's vector bf16 rounding gives the scalar's bits: ties both
 * ways, carries into the exponent, infinities, NaNs of both signs (quieted,
 * payload kept), denormals (not flushed), and every length's tail. */
static void test_to_bf16(void) {
    enum { N = 200 };
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u,
                                       0x3f80ffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                       0x7f800001u, 0xffc00001u, 0x7fbfffffu, 0x00000001u,
                                       0x807fffffu, 0x00400000u, 0x3f7fff80u, 0xc0000000u};
    float src[N];
    uint32_t r = 12345;
    for (int i = 0; i < N; i++) {
        uint32_t u = i < 16 ? special[i] : (r = r * 1664525u + 1013904223u);
        memcpy(&src[i], &u, 4);
    }
    if (!wna16_isa_le(WNA16_ISA_AVX512, wna16_isa_detected())) return;
    for (size_t n = 0; n <= N; n += n < 40 ? 1 : 37) {
        uint16_t got[N + 1], want[N + 1];
        got[n] = want[n] = 0xabcd; /* nothing past n is written */
        for (size_t i = 0; i < n; i++) want[i] = wna16_f32_to_bf16(src[i]);
#if defined(__x86_64__) || defined(__i386__) /* the leaf exists in x86 builds only */
        wna16_to_bf16__avx512(src, got, n);
#else
        wna16_to_bf16__ref(src, got, n);
#endif
        CHECK_MSG(!memcmp(got, want, (n + 1) * 2), "%zu values", n);
    }
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    const char *q = getenv("WNA16_TEST_QUICK");
    bool quick = q && *q && strcmp(q, "0");
    isa_max = wna16_isa_active();
    printf("ISA levels tested: ref..%s, %d levels (detected %s)\n", wna16_isa_name(isa_max),
           n_levels(),
           wna16_isa_name(wna16_isa_detected()));
    test_to_bf16();
    test_quant_i16();
    test_quant_i8();
    test_roundtrip();
    /* a bf16-dot level runs bf16 activations on its bf16-dot kernels or on
     * the int16 ones (wna16_bf16_dot), and the int16 leaves run with or
     * without VNNI where the CPU has it (wna16_vnni): every combination,
     * the machine's defaults first */
    bool has_dot = isa_max == WNA16_ISA_AVX512BF16 || isa_max == WNA16_ISA_NEONBF16;
    bool dot0 = wna16_bf16_dot(), vnni0 = wna16_vnni(), amx0 = wna16_amx();
    for (int pass = 0; pass < 4; pass++) {
        bool dot = pass & 1 ? !dot0 : dot0, vnni = pass & 2 ? !vnni0 : vnni0;
        if ((pass & 1) && !has_dot) continue;
        if ((pass & 2) && wna16_vnni_set(!vnni0) != !vnni0) continue; /* no VNNI here */
        CHECK(wna16_bf16_dot_set(dot) == dot && wna16_vnni_set(vnni) == vnni);
        /* where the CPU has AMX, its panel replaces the level's own: those
         * run with AMX off in the mixed passes */
        bool amx = wna16_amx_set(pass == 0 || pass == 3 ? -1 : 0);
        int amx_before = n_amx;
        if (pass)
            printf("bf16 dot %s, VNNI %s, AMX %s:\n", dot ? "on" : "off", vnni ? "on" : "off",
                   amx ? "on" : "off");
        test_pack_paths();
        test_isa_and_clone();
        test_concat(1);
        test_concat(2);
        test_ctx_tuning();
        test_errors();
        test_matrix(quick);
        int a8_before = n_a8, a8_avx2_before = n_a8_avx2;
        if (!quick || pass == 0) test_act_int8(); /* (sanitizers: the defaults' pass) */
        printf("%d cases, %d gemm runs per thread count over %d ISA levels (%d on AMX); int8 "
               "activations: %d runs on the int8 leaf (%d at avx2)\n",
               n_cases, n_runs, n_levels(), n_amx - amx_before, n_a8 - a8_before,
               n_a8_avx2 - a8_avx2_before);
        /* (AMX takes the int16 activations only: not with the bf16 dot) */
        CHECK(amx == (n_amx > amx_before) ||
              (amx && (isa_max != WNA16_ISA_AVX512BF16 || dot)));
    }
    CHECK(wna16_amx_set(-1) == amx0);
    CHECK(wna16_vnni_set(-1) == vnni0);
    CHECK(wna16_bf16_dot_set(-1) == dot0);
    TEST_MAIN_END();
}
