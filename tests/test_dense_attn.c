/* The dense bf16 dot, attention and fp32 -> bf16 leaves of every ISA level
 * this machine has, against their scalar references: the dense leaves and
 * the conversions are bitwise equal by construction (same summation order,
 * same rounding); attention agrees with a double-precision reference. Also
 * the dispatch: each level's table names its leaves, WNA16_ISA caps them
 * all (ctest runs this once more with WNA16_ISA=avx2 on x86, neon on
 * aarch64). The levels are this build's architecture's: ref and its
 * family's, lowest first. */
#include "core/common.h"
#include "core/pool.h"
#include "kernels/attn.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/ukernel.h"
#include "kernels/vec_math.h"
#include "testing.h"

#include <math.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static float frand(void) { return (float)((next_u64() >> 40) * 0x1.0p-24) * 2.0f - 1.0f; }

typedef struct leaf {
    const char *name;
    wna16_isa isa;            /* the level the leaf needs */
    wna16_dense_dot_fn dense; /* the level's own dense dot */
    wna16_dense_rows_fn rows; /* its dense row kernel and tiles (NULL: the dot) */
    wna16_dense_tiles_fn tiles;
    wna16_attn_fn attn;       /* its attention leaf and the head sizes it takes */
    int64_t attn_hd_mult;
    bool attn_bf16; /* the attention leaf rounds q and the weights to bf16 */
} leaf;

/* Each architecture's leaves exist in its builds only. */
static const leaf levels[] = {
    {"ref", WNA16_ISA_REF, wna16_dense_dot__ref, NULL, NULL, wna16_attn_group__ref, 2, false},
#if defined(__x86_64__) || defined(__i386__)
    {"avx2", WNA16_ISA_AVX2, wna16_dense_dot__avx2, wna16_dense_rows__avx2, wna16_dense_tiles__avx2,
     wna16_attn_group__avx2, 8, false},
    {"avx512", WNA16_ISA_AVX512, wna16_dense_dot__avx512, wna16_dense_rows__avx512,
     wna16_dense_tiles__avx512, wna16_attn_group__avx512, 16, false},
    /* the BF16 level keeps the AVX-512 dense leaves */
    {"avx512bf16", WNA16_ISA_AVX512BF16, wna16_dense_dot__avx512, wna16_dense_rows__avx512,
     wna16_dense_tiles__avx512, wna16_attn_group__avx512bf16, 32, true},
#elif defined(__aarch64__)
    {"neon", WNA16_ISA_NEON, wna16_dense_dot__neon, wna16_dense_rows__neon, wna16_dense_tiles__neon,
     wna16_attn_group__neon, 4, false},
    /* FEAT_BF16 keeps NEON's leaves */
    {"neonbf16", WNA16_ISA_NEONBF16, wna16_dense_dot__neon, wna16_dense_rows__neon,
     wna16_dense_tiles__neon, wna16_attn_group__neon, 4, false},
#endif
};
#define N_LEVELS (int)(sizeof levels / sizeof *levels)

static bool have(wna16_isa isa) { return wna16_isa_le(isa, wna16_isa_detected()); }

/* The tables of the levels this machine has whose dense row kernel (rows)
 * or tiles (!rows) are their own (a level that keeps a lower level's is
 * left out: the same leaf, tested once). Returns how many, into kt. */
static int dense_tables(bool rows, const wna16_kernel_table *kt[N_LEVELS]) {
    int n = 0;
    for (int l = 1; l < N_LEVELS; l++) {
        if (!have(levels[l].isa)) continue;
        const wna16_kernel_table *t = wna16_kernels_at(levels[l].isa);
        bool own = rows ? t->dense_rows && (n == 0 || kt[n - 1]->dense_rows != t->dense_rows)
                        : t->dense_tiles && (n == 0 || kt[n - 1]->dense_tiles != t->dense_tiles);
        if (own) kt[n++] = t;
    }
    return n;
}

typedef struct vec_ops_pair {
    const wna16_vec_ops *o[2]; /* the reference's, a level's */
} vec_ops_pair;

/* Every dense leaf, every m = 1..8, k around the 8- and 64-element steps,
 * x rows with an odd stride and unaligned: the reference's bits, and within
 * k·2^-23·Σ|x·w| of a double reference. */
static void test_dense_leaves(void) {
    static const int64_t ks[] = {1,  2,  7,  8,   9,   15,  16,   17,   31,
                                 63, 64, 65, 100, 127, 129, 2048, 2049, 2111};
    enum { KMAX = 2111, LDX = KMAX + 3 };
    static uint16_t w[KMAX];
    static float xbuf[8 * LDX + 1], a[8], b[8];
    float *x = xbuf + 1; /* not 32-byte aligned */
    for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
        int64_t k = ks[t];
        for (int64_t i = 0; i < k; i++) w[i] = wna16_f32_to_bf16(frand());
        for (int64_t i = 0; i < 8 * LDX; i++) x[i] = frand();
        for (int64_t m = 1; m <= 8; m++) {
            wna16_dense_dot__ref(w, k, x, LDX, m, a);
            for (int64_t i = 0; i < m; i++) {
                double ref = 0, mag = 0;
                for (int64_t c = 0; c < k; c++) {
                    double p = (double)x[i * LDX + c] * wna16_bf16_to_f32(w[c]);
                    ref += p, mag += fabs(p);
                }
                CHECK(fabs(a[i] - ref) <= (double)k * 0x1p-23 * mag + 1e-30);
            }
            for (int l = 1; l < N_LEVELS; l++) {
                if (!have(levels[l].isa)) continue;
                memset(b, 0xff, sizeof b);
                levels[l].dense(w, k, x, LDX, m, b);
                CHECK_MSG(!memcmp(a, b, (size_t)m * sizeof *a), "dense %s k=%lld m=%lld: %g vs %g",
                          levels[l].name, (long long)k, (long long)m, a[0], b[0]);
            }
        }
        /* each level's row kernel (m <= dense_rows_max_m): x packed once, the dot's bits,
         * the entries beside each row's output untouched; x as given and
         * rounded to bf16 (as a model's activations are: AVX2 packs it as
         * bf16 then) */
        const wna16_kernel_table *kts[N_LEVELS];
        int nr = dense_tables(true, kts);
        for (int round = 0; round < 2; round++) {
            if (round) /* every table saw x as given; now rounded */
                for (int64_t i = 0; i < 8 * LDX; i++) x[i] = wna16_bf16_to_f32(wna16_f32_to_bf16(x[i]));
            for (int r = 0; r < nr; r++) {
                const wna16_kernel_table *kt = kts[r];
                static _Alignas(64) float xq[6 * (KMAX + 64) + 256];
                float bias = 0.25f, y[6 * 3];
                for (int64_t m = 1; m <= kt->dense_rows_max_m; m++) {
                    CHECK(kt->dense_xq_bytes(m, k) <= sizeof xq && kt->dense_xq_bytes(m, k) % 256 == 0);
                    kt->dense_pack_xq(x, LDX, m, k, xq);
                    wna16_dense_dot__ref(w, k, x, LDX, m, a);
                    memset(y, 0xff, sizeof y);
                    kt->dense_rows(w, 1, k, k, &bias, m, xq, y, 3);
                    for (int64_t i = 0; i < m; i++)
                        CHECK_MSG(
                            y[3 * i] == a[i] + bias && ((uint32_t *)y)[3 * i + 1] == 0xffffffffu &&
                                ((uint32_t *)y)[3 * i + 2] == 0xffffffffu,
                            "dense rows %s k=%lld m=%lld row %lld: %g vs %g", wna16_isa_name(kt->isa),
                            (long long)k, (long long)m, (long long)i, y[3 * i], a[i] + bias);
                    for (int64_t i = m; i < 6; i++) CHECK(((uint32_t *)y)[3 * i] == 0xffffffffu);
                }
            }
        }
    }
}

/* The threaded GEMM at every level: the reference level's bits for 1 and 2
 * threads, with bias, m past one 8-row call (17), n past one 64 KiB share
 * chunk (328 rows at k = 100). */
static void test_dense_gemm(void) {
    enum { N = 700, K = 100, M = 17 };
    static uint16_t w[N * K];
    static float x[M * K], y0[M * N], y1[M * N], bias[N];
    for (int i = 0; i < N * K; i++) w[i] = wna16_f32_to_bf16(frand());
    for (int i = 0; i < M * K; i++) x[i] = frand();
    for (int i = 0; i < N; i++) bias[i] = frand();
    wna16_isa_set_cap(WNA16_ISA_REF);
    wna16_dense_gemm(w, N, K, K, bias, M, x, K, y0, N, 1);
    for (int l = 0; l < N_LEVELS; l++) {
        if (!have(levels[l].isa)) continue;
        wna16_isa_set_cap(levels[l].isa);
        for (int threads = 1; threads <= 2; threads++) {
            memset(y1, 0, sizeof y1);
            wna16_dense_gemm(w, N, K, K, bias, M, x, K, y1, N, threads);
            CHECK_MSG(!memcmp(y0, y1, sizeof y1), "dense gemm %s, %d threads", levels[l].name,
                      threads);
        }
    }
    wna16_isa_set_cap(WNA16_ISA_COUNT);
}

/* y of the reference order for every (row, output): the dot, + bias (or
 * + 0.0f, as dense_gemm adds). */
static void dense_ref(const uint16_t *w, int64_t n, int64_t k, int64_t ks, const float *bias,
                      int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t o = 0; o < n; o++) {
            float d;
            wna16_dense_dot__ref(w + o * ks, k, x + i * ldx, ldx, 1, &d);
            y[i * ldy + o] = d + (bias ? bias[o] : 0.0f);
        }
}

/* y (filled with 0xff bytes before the call) outside rows [0, m) x
 * outputs [0, n): untouched, up to one row past m. */
static bool untouched(const float *y, int64_t m, int64_t n, int64_t ldy) {
    const uint32_t *u = (const uint32_t *)y;
    for (int64_t i = 0; i <= m; i++)
        for (int64_t o = i < m ? n : 0; o < ldy; o++)
            if (u[i * ldy + o] != 0xffffffffu) return false;
    return true;
}

/* A level's tiles on m rows, called as dense_gemm calls them: x packed by
 * row blocks into xp (64-byte aligned), one chunk of n outputs. */
static void tiles_direct(const wna16_kernel_table *kt, const uint16_t *w, int64_t n, int64_t k,
                         int64_t ks, const float *bias, int64_t m, const float *x, int64_t ldx,
                         float *y, int64_t ldy, char *xp, void *ws) {
    int64_t rb = kt->dense_tile_rows;
    size_t xb = kt->dense_xp_bytes(k);
    for (int64_t b = 0; b * rb < m; b++)
        kt->dense_pack_x(x + b * rb * ldx, ldx, m - b * rb < rb ? m - b * rb : rb, k,
                         xp + (size_t)b * xb);
    kt->dense_tiles(w, n, k, ks, bias, m, xp, y, ldy, ws);
}

/* The tiled leaves of every level that has them (and dense_gemm through
 * them and the row kernels, every level, 1 and 2 threads) against the
 * reference bit for bit: m around the 4- and 8-row tiles and the 16-row
 * block, n around the 3- and 12-output groups (4-output quads) and a chunk,
 * k tails and more than one 2048-element k block, strided x, w and y, bias
 * or none, zero rows (products of -0). Entries of y past n, and rows past
 * m, stay untouched. */
static void test_dense_tiles(void) {
    static const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 33, 64};
    static const int64_t ns[] = {1, 2, 3, 4, 5, 11, 12, 13, 17, 25, 40, 49, 100};
    static const int64_t ks[] = {0, 1, 7, 63, 64, 65, 100, 2048, 2049, 4160};
    enum { MMAX = 64, NMAX = 100, KMAX = 4160, LDX = KMAX + 3, KS = KMAX + 5, LDY = NMAX + 5 };
    enum { YROWS = MMAX + 1 }; /* one row past the largest m */
    uint16_t *w = wna16_malloc(sizeof *w * NMAX * KS);
    float *x = wna16_malloc(sizeof *x * MMAX * LDX), *bias = wna16_malloc(sizeof *bias * NMAX);
    float *y0 = wna16_malloc(sizeof *y0 * YROWS * LDY),
          *y1 = wna16_malloc(sizeof *y1 * YROWS * LDY);
    for (int64_t i = 0; i < NMAX * KS; i++) w[i] = wna16_f32_to_bf16(frand());
    for (int64_t i = 0; i < MMAX * LDX; i++) x[i] = frand();
    for (int64_t i = 0; i < LDX; i++) x[2 * LDX + i] = 0.0f; /* row 2: -0 products */
    for (int64_t i = 0; i < NMAX; i++) bias[i] = frand();
    const wna16_kernel_table *kts[2 * N_LEVELS];
    int ntiled = dense_tables(false, kts);
    /* and the tiles a level takes for many rows (dense_big), called directly too */
    for (int t = 0, own = ntiled; t < own; t++)
        if (kts[t]->dense_big && kts[t]->dense_big->dense_tiles != kts[t]->dense_tiles) {
            bool seen = false;
            for (int u = 0; u < ntiled; u++) seen |= kts[u]->dense_tiles == kts[t]->dense_big->dense_tiles;
            if (!seen) kts[ntiled++] = kts[t]->dense_big;
        }
    CHECK(ntiled <= 2 * N_LEVELS);
    void *ws[2 * N_LEVELS] = {0}, *xheap[2 * N_LEVELS] = {0};
    char *xp[2 * N_LEVELS];
    for (int t = 0; t < ntiled; t++) {
        ws[t] = wna16_malloc(kts[t]->dense_tiles_ws(NMAX, KMAX));
        xheap[t] = wna16_malloc(kts[t]->dense_xp_bytes(KMAX) * MMAX + 64);
        xp[t] = (char *)(((uintptr_t)xheap[t] + 63) & ~(uintptr_t)63);
    }
    int cases = 0;
    for (size_t a = 0; a < sizeof ks / sizeof *ks; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof ms / sizeof *ms; c++) {
                int64_t k = ks[a], n = ns[b], m = ms[c];
                if (k > 2048 && (b + c) % 3) continue; /* the large k on a third of the cases */
                const float *bi = (a + b + c) % 2 ? bias : NULL;
                dense_ref(w, n, k, KS, bi, m, x, LDX, y0, LDY);
                cases++;
                for (int t = 0; t < ntiled && k > 0; t++) { /* (dense_gemm: the dot for k = 0) */
                    memset(y1, 0xff, sizeof *y1 * YROWS * LDY);
                    tiles_direct(kts[t], w, n, k, KS, bi, m, x, LDX, y1, LDY, xp[t], ws[t]);
                    for (int64_t i = 0; i < m; i++)
                        CHECK_MSG(!memcmp(y0 + i * LDY, y1 + i * LDY, sizeof *y0 * (size_t)n),
                                  "%s dense tiles m=%lld n=%lld k=%lld row %lld",
                                  wna16_isa_name(kts[t]->isa), (long long)m, (long long)n,
                                  (long long)k, (long long)i);
                    CHECK(untouched(y1, m, n, LDY));
                }
                if (k > 2048 || m % 4 == 2) continue; /* the gemm on a lighter set */
                wna16_tuning tu = WNA16_TUNING_DEFAULT;
                tu.dense_tile_min_m = (b + c) % 2 ? 0 : 9; /* tiles, or rows up to 8 */
                for (int l = 0; l < N_LEVELS; l++) {
                    if (!have(levels[l].isa)) continue;
                    wna16_isa_set_cap(levels[l].isa);
                    for (int threads = 1; threads <= 2; threads++) {
                        memset(y1, 0xff, sizeof *y1 * YROWS * LDY);
                        wna16_dense_gemm_tuned(&tu, w, n, k, KS, bi, m, x, LDX, y1, LDY, threads);
                        for (int64_t i = 0; i < m; i++)
                            CHECK_MSG(!memcmp(y0 + i * LDY, y1 + i * LDY, sizeof *y0 * (size_t)n),
                                      "dense gemm %s m=%lld n=%lld k=%lld %d threads",
                                      levels[l].name, (long long)m, (long long)n, (long long)k,
                                      threads);
                        CHECK(untouched(y1, m, n, LDY));
                    }
                }
                wna16_isa_set_cap(WNA16_ISA_COUNT);
            }
    CHECK(cases > 300);
    for (int t = 0; t < ntiled; t++) wna16_free(ws[t]), wna16_free(xheap[t]);
    wna16_free(w), wna16_free(x), wna16_free(bias), wna16_free(y0), wna16_free(y1);
}

/* |y - (Σ w·x + bias)| for one (row, output), over the fp32 rounding scale
 * of the terms: (k + 2) · 2^-24 · (Σ |w·x| + |bias|), in double. */
static double amx_error(const uint16_t *w, int64_t k, const float *x, float bias, float y) {
    double exact = bias, scale = fabs((double)bias);
    for (int64_t e = 0; e < k; e++) {
        double p = (double)wna16_bf16_to_f32(w[e]) * x[e];
        exact += p, scale += fabs(p);
    }
    double err = fabs((double)y - exact);
    return err == 0.0 ? 0.0 : err / ((double)(k + 2) * 0x1.0p-24 * scale);
}

/* The AMX tiles (the avx512bf16 table's dense_big where the CPU has AMX):
 * every (row, output) within fp32 rounding of the exact sum, around the
 * 16-row, 16- and 32-output and 32-k tails, strided, with bias or none;
 * y untouched elsewhere; an output's bits the same whatever rows share the
 * call and however the outputs are chunked; dense_gemm takes them from
 * WNA16_DENSE_AMX_MIN_M rows at the level with the same bits on 1 and 2
 * threads, and the reference's bits with AMX off. */
static void test_dense_amx(void) {
    if (!wna16_amx_set(1)) {
        printf("dense amx: skipped (no AMX-BF16, or the kernel withholds the tile state)\n");
        return;
    }
    const wna16_kernel_table *kt = wna16_kernels_at(WNA16_ISA_AVX512BF16);
    /* (the AMX table is the only dense_big of the avx512bf16 level itself:
     * the lanes tiles are the avx512 level's; the leaves are named only in
     * builds whose compiler has AMX) */
    if (!kt->dense_big || kt->dense_big->isa != WNA16_ISA_AVX512BF16) {
        printf("dense amx: skipped (level %s active)\n", wna16_isa_name(wna16_isa_active()));
        wna16_amx_set(-1);
        return;
    }
    kt = kt->dense_big;
    static const int64_t ms[] = {1, 2, 15, 16, 17, 33};
    static const int64_t ns[] = {1, 15, 16, 17, 31, 32, 33, 100};
    static const int64_t ks[] = {1, 31, 32, 33, 100, 2048, 2049};
    enum { MMAX = 33, NMAX = 100, KMAX = 2049, LDX = KMAX + 3, KS = KMAX + 5, LDY = NMAX + 5 };
    uint16_t *w = wna16_malloc(sizeof *w * NMAX * KS);
    float *x = wna16_malloc(sizeof *x * MMAX * LDX), *bias = wna16_malloc(sizeof *bias * NMAX);
    float *y0 = wna16_malloc(sizeof *y0 * (MMAX + 1) * LDY),
          *y1 = wna16_malloc(sizeof *y1 * (MMAX + 1) * LDY);
    void *ws = wna16_malloc(kt->dense_tiles_ws(NMAX, KMAX));
    void *xheap = wna16_malloc(kt->dense_xp_bytes(KMAX) * 3 + 64);
    char *xp = (char *)(((uintptr_t)xheap + 63) & ~(uintptr_t)63);
    /* magnitudes over 2^±20 so the three parts of x all matter */
    for (int64_t i = 0; i < NMAX * KS; i++)
        w[i] = wna16_f32_to_bf16(ldexpf(frand(), (int)(next_u64() % 9) - 4));
    for (int64_t i = 0; i < MMAX * LDX; i++) x[i] = ldexpf(frand(), (int)(next_u64() % 41) - 20);
    for (int64_t i = 0; i < LDX; i++) x[2 * LDX + i] = 0.0f;
    for (int64_t i = 0; i < NMAX; i++) bias[i] = frand();
    double worst = 0.0;
    int cases = 0;
    for (size_t a = 0; a < sizeof ks / sizeof *ks; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof ms / sizeof *ms; c++) {
                int64_t k = ks[a], n = ns[b], m = ms[c];
                const float *bi = (a + b + c) % 2 ? bias : NULL;
                memset(y0, 0xff, sizeof *y0 * (MMAX + 1) * LDY);
                tiles_direct(kt, w, n, k, KS, bi, m, x, LDX, y0, LDY, xp, ws);
                CHECK(untouched(y0, m, n, LDY));
                for (int64_t i = 0; i < m; i++)
                    for (int64_t o = 0; o < n; o++) {
                        double e = amx_error(w + o * KS, k, x + i * LDX, bi ? bi[o] : 0.0f,
                                             y0[i * LDY + o]);
                        if (e > worst) worst = e;
                    }
                /* the last row alone, its outputs from the second one on */
                if (m > 1 && n > 1) {
                    int64_t r = m - 1;
                    tiles_direct(kt, w + KS, n - 1, k, KS, bi ? bi + 1 : NULL, 1, x + r * LDX, LDX,
                                 y1, LDY, xp, ws);
                    CHECK_MSG(!memcmp(y0 + r * LDY + 1, y1, sizeof *y1 * (size_t)(n - 1)),
                              "amx row alone m=%lld n=%lld k=%lld", (long long)m, (long long)n,
                              (long long)k);
                }
                cases++;
            }
    CHECK_MSG(worst <= 1.0, "amx error %.3g of the fp32 rounding scale", worst);
    printf("dense amx: %d cases, worst error %.3f of (k + 2) 2^-24 sum|w x|\n", cases, worst);
    /* through dense_gemm at the level: the tiles' bits on 1 and 2 threads, the
     * reference's with AMX off */
    enum { N = 300, K = 777, M = 37 };
    wna16_isa_set_cap(WNA16_ISA_AVX512BF16);
    float *ya = wna16_malloc(sizeof *ya * M * N), *yb = wna16_malloc(sizeof *yb * M * N);
    uint16_t *wg = wna16_malloc(sizeof *wg * N * K);
    float *xg = wna16_malloc(sizeof *xg * M * K), *bg = wna16_malloc(sizeof *bg * N);
    for (int64_t i = 0; i < N * K; i++) wg[i] = wna16_f32_to_bf16(frand());
    for (int64_t i = 0; i < M * K; i++) xg[i] = frand();
    for (int64_t i = 0; i < N; i++) bg[i] = frand();
    void *xh = wna16_malloc(kt->dense_xp_bytes(K) * 3 + 64);
    char *xpg = (char *)(((uintptr_t)xh + 63) & ~(uintptr_t)63);
    void *wsg = wna16_malloc(kt->dense_tiles_ws(N, K));
    tiles_direct(kt, wg, N, K, K, bg, M, xg, K, ya, N, xpg, wsg);
    for (int threads = 1; threads <= 2; threads++) {
        memset(yb, 0, sizeof *yb * M * N);
        wna16_dense_gemm(wg, N, K, K, bg, M, xg, K, yb, N, threads);
        CHECK_MSG(!memcmp(ya, yb, sizeof *ya * M * N), "amx dense gemm, %d threads", threads);
        memset(yb, 0, sizeof *yb * N * WNA16_DENSE_AMX_MIN_M);
        wna16_dense_gemm(wg, N, K, K, bg, WNA16_DENSE_AMX_MIN_M, xg + 4 * K, K, yb, N, threads);
        CHECK_MSG(!memcmp(ya + 4 * N, yb, sizeof *ya * N * WNA16_DENSE_AMX_MIN_M),
                  "amx dense gemm from %d rows", WNA16_DENSE_AMX_MIN_M);
    }
    CHECK(!wna16_amx_set(0));
    dense_ref(wg, N, K, K, bg, M, xg, K, ya, N);
    wna16_dense_gemm(wg, N, K, K, bg, M, xg, K, yb, N, 2);
    CHECK_MSG(!memcmp(ya, yb, sizeof *ya * M * N), "dense gemm with AMX off: the reference");
    wna16_amx_set(-1);
    wna16_isa_set_cap(WNA16_ISA_COUNT);
    wna16_free(ya), wna16_free(yb), wna16_free(wg), wna16_free(xg), wna16_free(bg), wna16_free(xh),
        wna16_free(wsg);
    wna16_free(w), wna16_free(x), wna16_free(bias), wna16_free(y0), wna16_free(y1), wna16_free(ws),
        wna16_free(xheap);
}

/* The dense linear of a prefill-sized m (tiles at the default threshold)
 * on 1 and 2 threads and every level: the reference level's bits, and the
 * same bits for each row whatever rows share the call (batch invariance:
 * row r alone, or among m rows). */
static void test_dense_gemm_prefill(void) {
    enum { N = 300, K = 777, M = 70 };
    uint16_t *w = wna16_malloc(sizeof *w * N * K);
    float *x = wna16_malloc(sizeof *x * M * K), *bias = wna16_malloc(sizeof *bias * N);
    float *y0 = wna16_malloc(sizeof *y0 * M * N), *y1 = wna16_malloc(sizeof *y1 * M * N);
    for (int i = 0; i < N * K; i++) w[i] = wna16_f32_to_bf16(frand());
    for (int i = 0; i < M * K; i++) x[i] = frand();
    for (int i = 0; i < N; i++) bias[i] = frand();
    wna16_isa_set_cap(WNA16_ISA_REF);
    wna16_dense_gemm(w, N, K, K, bias, M, x, K, y0, N, 1);
    for (int l = 0; l < N_LEVELS; l++) {
        if (!have(levels[l].isa)) continue;
        wna16_isa_set_cap(levels[l].isa);
        for (int threads = 1; threads <= 2; threads++) {
            memset(y1, 0, sizeof *y1 * M * N);
            wna16_dense_gemm(w, N, K, K, bias, M, x, K, y1, N, threads);
            CHECK_MSG(!memcmp(y0, y1, sizeof *y1 * M * N), "dense prefill %s, %d threads",
                      levels[l].name, threads);
            for (int r = 0; r < M; r += 23) {
                wna16_dense_gemm(w, N, K, K, bias, 1, x + r * K, K, y1, N, threads);
                CHECK_MSG(!memcmp(y0 + r * N, y1, sizeof *y1 * N), "dense row %d alone %s", r,
                          levels[l].name);
            }
        }
    }
    wna16_isa_set_cap(WNA16_ISA_COUNT);
    wna16_free(w), wna16_free(x), wna16_free(bias), wna16_free(y0), wna16_free(y1);
}

/* Tuning lives in the context: two contexts, one taking the tiles from one
 * row and one never, used one after another, each take their own path (where
 * the level has tiles) and give the reference's bits; a NULL tuning and a
 * fresh context's take the level's threshold. */
static void test_dense_ctx_tuning(void) {
    enum { N = 40, K = 300, M = 8 };
    uint16_t *w = wna16_malloc(sizeof *w * N * K);
    float *x = wna16_malloc(sizeof *x * M * K), y0[M * N], ya[M * N], yb[M * N];
    for (int i = 0; i < N * K; i++) w[i] = wna16_f32_to_bf16(frand());
    for (int i = 0; i < M * K; i++) x[i] = frand();
    dense_ref(w, N, K, K, NULL, M, x, K, y0, N);
    wna16_ctx *a = NULL, *b = NULL;
    CHECK(wna16_ctx_create(&a) == WNA16_OK && wna16_ctx_create(&b) == WNA16_OK);
    wna16_ctx_tuning(a)->dense_tile_min_m = 1;
    wna16_ctx_tuning(b)->dense_tile_min_m = INT64_MAX;
    const wna16_tuning *ta = wna16_tuning_of(wna16_ctx_diag(a)),
                       *tb = wna16_tuning_of(wna16_ctx_diag(b));
    wna16_ctx *fresh = NULL;
    CHECK(wna16_ctx_create(&fresh) == WNA16_OK);
    int tiled_levels = 0;
    for (int l = 0; l < N_LEVELS; l++) {
        if (!have(levels[l].isa)) continue;
        wna16_isa_set_cap(levels[l].isa);
        bool has_tiles = wna16_kernels()->dense_tiles != NULL;
        int64_t level_min = wna16_kernels()->dense_tile_min_m;
        CHECK(wna16_dense_tile_min_m(ta) == 1 && wna16_dense_tile_min_m(tb) == INT64_MAX &&
              wna16_dense_tile_min_m(NULL) == level_min &&
              wna16_dense_tile_min_m(wna16_tuning_of(wna16_ctx_diag(fresh))) == level_min);
        CHECK_MSG(wna16_dense_tiled(ta, M, K) == has_tiles && !wna16_dense_tiled(tb, M, K) &&
                      wna16_dense_tiled(NULL, M, K) == (has_tiles && M >= level_min),
                  "dense path choice at %s", levels[l].name);
        tiled_levels += has_tiles;
        memset(ya, 0, sizeof ya);
        memset(yb, 0xff, sizeof yb);
        wna16_dense_gemm_tuned(ta, w, N, K, K, NULL, M, x, K, ya, N, 2);
        wna16_dense_gemm_tuned(tb, w, N, K, K, NULL, M, x, K, yb, N, 2);
        CHECK_MSG(!memcmp(y0, ya, sizeof ya) && !memcmp(y0, yb, sizeof yb),
                  "dense under two contexts at %s", levels[l].name);
    }
    wna16_isa_set_cap(WNA16_ISA_COUNT);
#if defined(__x86_64__)
    CHECK(!have(WNA16_ISA_AVX2) || tiled_levels > 0); /* the avx2 level has tiles */
#endif
    wna16_ctx_free(a), wna16_ctx_free(b), wna16_ctx_free(fresh);
    wna16_free(w), wna16_free(x);
}

/* A k so long that one round of packed x (8 MiB) holds a single 16-row
 * block: rows go in rounds, the last one partial; the reference's bits. */
static void test_dense_rounds(void) {
    enum { N = 7, K = 140001, M = 37 };
    uint16_t *w = wna16_malloc(sizeof *w * N * K);
    float *x = wna16_malloc(sizeof *x * M * K);
    float y0[M * N], y1[M * N];
    for (int i = 0; i < N * K; i++) w[i] = wna16_f32_to_bf16(frand());
    for (int i = 0; i < M * K; i++) x[i] = frand();
    dense_ref(w, N, K, K, NULL, M, x, K, y0, N);
    for (int threads = 1; threads <= 2; threads++) {
        memset(y1, 0, sizeof y1);
        wna16_dense_gemm(w, N, K, K, NULL, M, x, K, y1, N, threads);
        CHECK_MSG(!memcmp(y0, y1, sizeof y1), "dense rounds, %d threads", threads);
    }
    wna16_free(w), wna16_free(x);
}

/* fp32 -> bf16 at every level: the scalar's bits for NaNs (quiet and
 * signalling, either sign, payloads in the dropped bits only), infinities,
 * zeros, denormals, ties both ways, the overflow to inf, random bits; every
 * tail length around the vector widths. */
static void test_to_bf16(void) {
    static const uint32_t special[] = {
        0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7f80ffffu,
        0x7fffffffu, 0xffffffffu, 0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u,
        0x00000001u, 0x807fffffu, 0x00008000u, 0x00018000u, 0x3f808000u, 0x3f818000u,
        0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x477fe000u};
    enum { NS = sizeof special / sizeof *special, NMAX = 1000 };
    static float src[NMAX];
    static uint16_t want[NMAX], got[NMAX + 1];
    for (int i = 0; i < NMAX; i++) {
        uint32_t u = i < 4 * NS ? special[i % NS] : (uint32_t)next_u64();
        memcpy(&src[i], &u, sizeof u);
        want[i] = wna16_f32_to_bf16(src[i]);
    }
    for (int l = 0; l < N_LEVELS; l++) {
        if (!have(levels[l].isa)) continue;
        wna16_to_bf16_fn f = wna16_kernels_at(levels[l].isa)->to_bf16;
        for (int n = 0; n <= 40; n++)
            for (int off = 0; off < 3; off++) {
                memset(got, 0xa5, sizeof got);
                f(src + off, got, (size_t)n);
                CHECK_MSG(!memcmp(got, want + off, (size_t)n * sizeof *got) && got[n] == 0xa5a5,
                          "to_bf16 %s n=%d off=%d", levels[l].name, n, off);
            }
        memset(got, 0, sizeof got);
        f(src, got, NMAX);
        CHECK_MSG(!memcmp(got, want, sizeof want), "to_bf16 %s n=%d", levels[l].name, NMAX);
    }
}

static double bf16_round(double x) { return wna16_bf16_to_f32(wna16_f32_to_bf16((float)x)); }


enum { NMAX = 2050, HDMAX = 256, GMAX = 10, KMAX = (NMAX + 15) / 16 * 16, LDS = NMAX + 3 };
enum { NBLK = KMAX / 16, PBLK = NBLK + 5 }; /* logical blocks; physical ones (some unused) */

typedef struct attn_case {
    int64_t hd, n, g;
    float scale;
    float q[GMAX * HDMAX];
    uint16_t kb[HDMAX * KMAX], v[KMAX * HDMAX]; /* bf16 cache, logical order */
    /* the same cache paged: logical block b in physical block blocks[b] of
     * kp / vp, the blocks in a scrambled order, NaN in the unused ones (a
     * leaf that reads a block the table does not name fails) */
    uint16_t kp[HDMAX * 16 * PBLK], vp[HDMAX * 16 * PBLK];
    int32_t blocks[NBLK];
    wna16_attn_kv kv;
} attn_case;

/* Pages c's logical cache: physical block of b = (7 b + 3) mod PBLK (7 and
 * PBLK coprime), so neighbours are never adjacent. */
static void attn_page(attn_case *c) {
    int64_t hd = c->hd, bs = 16 * hd;
    for (size_t i = 0; i < sizeof c->kp / sizeof *c->kp; i++) c->kp[i] = c->vp[i] = 0x7fc0;
    for (int64_t b = 0; b < (c->n + 15) / 16; b++) {
        c->blocks[b] = (int32_t)((7 * b + 3) % PBLK);
        memcpy(c->kp + c->blocks[b] * bs, c->kb + b * bs, (size_t)bs * sizeof(uint16_t));
        memcpy(c->vp + c->blocks[b] * bs, c->v + b * bs, (size_t)bs * sizeof(uint16_t));
    }
    c->kv = (wna16_attn_kv){.k = c->kp, .v = c->vp, .blocks = c->blocks};
}

/* Random q and cache; NaN past n (a leaf that reads it there, even times a
 * zero weight, fails). */
static void attn_fill(attn_case *c) {
    int64_t hd = c->hd;
    for (int64_t i = 0; i < c->g * hd; i++) c->q[i] = 3 * frand();
    int64_t kend = (c->n + 15) / 16 * 16; /* the whole last block */
    for (int64_t i = 0; i < hd * kend; i++) c->kb[i] = wna16_f32_to_bf16(frand());
    for (int64_t i = 0; i < hd * kend; i++) c->v[i] = wna16_f32_to_bf16(frand());
    for (int64_t p = c->n; p < kend; p++)
        for (int64_t i = 0; i < hd; i++)
            c->kb[wna16_attn_k_index(p, i, hd)] = c->v[wna16_attn_v_index(p, i, hd)] = 0x7fc0;
    c->scale = 1.0f / sqrtf((float)hd);
    attn_page(c);
}

/* Head h's exact weights (double), with q and the weights taken to bf16 first
 * when bf16 (the BF16 leaf's inputs); wt: [n]. */
static void attn_weights(const attn_case *c, int64_t h, bool bf16, double *wt) {
    double mx = -1e300, sum = 0;
    for (int64_t p = 0; p < c->n; p++) {
        double d = 0;
        for (int64_t i = 0; i < c->hd; i++) {
            double qi = c->q[h * c->hd + i];
            d += (bf16 ? bf16_round(qi) : qi) *
                 wna16_bf16_to_f32(c->kb[wna16_attn_k_index(p, i, c->hd)]);
        }
        wt[p] = d * c->scale;
        mx = fmax(mx, wt[p]);
    }
    for (int64_t p = 0; p < c->n; p++) sum += wt[p] = exp(wt[p] - mx);
    for (int64_t p = 0; p < c->n; p++) wt[p] = (bf16 ? bf16_round(wt[p]) : wt[p]) / sum;
}

/* Leaf l's output against the double reference: the fp32 leaves (ref,
 * avx2, avx512) keep q and the softmax weights in fp32: within 1e-5. The
 * BF16 leaf rounds q and the weights to bf16: against a reference that
 * rounds them too, within 1e-5 plus 2^-7 of the weighted magnitude (a weight
 * can round the other way than the double reference's). */
static int attn_check(const attn_case *c, int l, const float *o, int worst) {
    static double wt[NMAX];
    bool bf16 = levels[l].attn_bf16;
    for (int64_t h = 0; h < c->g; h++) {
        attn_weights(c, h, bf16, wt);
        for (int64_t i = 0; i < c->hd; i++) {
            double ref = 0, mag = 0;
            for (int64_t p = 0; p < c->n; p++) {
                double vv = wna16_bf16_to_f32(c->v[wna16_attn_v_index(p, i, c->hd)]);
                ref += wt[p] * vv, mag += wt[p] * fabs(vv);
            }
            double got = o[h * c->hd + i];
            bool ok = fabs(got - ref) < 1e-5 + (bf16 ? 0x1p-7 * mag : 0);
            if (!ok && worst++ < 5)
                CHECK_MSG(ok, "attention %s hd=%lld n=%lld g=%lld h=%lld i=%lld: %g, ref %g",
                          levels[l].name, (long long)c->hd, (long long)c->n, (long long)c->g,
                          (long long)h, (long long)i, got, ref);
        }
    }
    return worst;
}

/* Every leaf on every head size it takes, through a scrambled block table
 * (a paged cache): positions across the 16-wide K
 * blocks and the 64-position chunks (one to many, the last partial), odd
 * counts (the last V pair half past n), long contexts; groups of 1 to 8
 * heads and past one 8-head block (10). */
static void test_attention(void) {
    static const int64_t hds[] = {8, 16, 24, 32, 48, 64, 128, 256};
    static const int64_t ns[] = {1,  2,   15,  16,  17,  33,  63,   64,
                                 65, 100, 127, 128, 129, 200, 1000, 2050};
    static const int64_t gs[] = {1, 2, 3, 4, 5, 6, 7, 8, 10};
    static attn_case c;
    static float s[GMAX * LDS], o[GMAX * HDMAX];
    int worst = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (size_t ti = 0; ti < sizeof ns / sizeof *ns; ti++)
            for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
                c.hd = hds[hi], c.n = ns[ti], c.g = gs[gi];
                /* the long contexts with a few group sizes: the double
                 * reference is the slow part */
                if (c.n >= 1000 && c.g != 1 && c.g != 4 && c.g != 8) continue;
                attn_fill(&c);
                for (int l = 0; l < N_LEVELS; l++) {
                    if (!have(levels[l].isa) || c.hd % levels[l].attn_hd_mult || c.hd > 256)
                        continue;
                    memset(o, 0xff, sizeof o);
                    levels[l].attn(c.q, c.g, &c.kv, c.n, c.hd, c.scale, s, LDS, o);
                    worst = attn_check(&c, l, o, worst);
                }
            }
    CHECK(worst == 0);
}

typedef struct attn_pair_job {
    int l;
    attn_case *c;
    float (*s)[GMAX * LDS], (*o)[GMAX * HDMAX];
} attn_pair_job;

static void attn_pair_thread(void *arg, int t, int nt) {
    const attn_pair_job *j = arg;
    for (int i = t; i < 2; i += nt)
        levels[j->l].attn(j->c[i].q, 8, &j->c[i].kv, j->c[i].n, 128, j->c[i].scale, j->s[i], LDS,
                          j->o[i]);
}

/* Two KV groups on two threads give the bits one thread gives them (a
 * leaf keeps no state between calls). */
static void test_attention_threads(void) {
    static attn_case c[2];
    static float s[2][GMAX * LDS], o1[2][GMAX * HDMAX], o2[2][GMAX * HDMAX];
    for (int l = 0; l < N_LEVELS; l++) {
        if (!have(levels[l].isa)) continue;
        for (int t = 0; t < 2; t++) {
            c[t].hd = 128, c[t].n = 300 + 77 * t, c[t].g = 8;
            attn_fill(&c[t]);
            levels[l].attn(c[t].q, 8, &c[t].kv, c[t].n, 128, c[t].scale, s[t], LDS, o1[t]);
        }
        attn_pair_job j = {l, c, s, o2};
        wna16_parallel(2, attn_pair_thread, &j);
        CHECK_MSG(!memcmp(o1, o2, sizeof o1), "attention %s on 2 threads", levels[l].name);
    }
}

/* Dispatch follows each cap: a level's dense, conversion and attention
 * leaves, and for a head size it does not take, the next level down's. */
static void test_dispatch(void) {
    wna16_isa det = wna16_isa_detected();
    const char *env = getenv("WNA16_ISA");
    wna16_isa cap;
    if (env && wna16_isa_parse(env, &cap)) CHECK(wna16_isa_le(wna16_isa_active(), cap));
    /* a level of another architecture caps to ref */
    for (int i = 0; i < WNA16_ISA_COUNT; i++)
        if (!wna16_isa_le((wna16_isa)i, det) && !wna16_isa_le(det, (wna16_isa)i)) {
            CHECK(wna16_isa_set_cap((wna16_isa)i) == WNA16_ISA_REF);
            CHECK(wna16_kernels() == wna16_kernels_at(WNA16_ISA_REF));
        }
    for (int l = 0; l < N_LEVELS; l++) {
        if (!have(levels[l].isa)) continue;
        wna16_isa a = wna16_isa_set_cap(levels[l].isa);
        CHECK(a == levels[l].isa);
        CHECK(wna16_dense_dot() == levels[l].dense);
        CHECK(wna16_kernels()->dense_dot == levels[l].dense);
        CHECK(wna16_kernels()->dense_rows == levels[l].rows);
        CHECK(wna16_kernels()->dense_tiles == levels[l].tiles);
        CHECK(!levels[l].tiles || wna16_dense_tile_min_m(NULL) == wna16_kernels()->dense_tile_min_m);
        /* attention: the highest level <= l whose leaf takes hd */
        static const int64_t hds[] = {2, 6, 8, 24, 48, 96, 128, 256, 264, 512};
        for (size_t i = 0; i < sizeof hds / sizeof *hds; i++) {
            int want = l;
            while (want > 0 && (hds[i] % levels[want].attn_hd_mult || hds[i] > 256)) want--;
            CHECK_MSG(wna16_attn_group(hds[i]) == levels[want].attn, "attn dispatch %s hd=%lld",
                      levels[l].name, (long long)hds[i]);
        }
        CHECK(wna16_kernels_at(levels[N_LEVELS - 1].isa) == wna16_kernels());
        CHECK(wna16_kernels_at(WNA16_ISA_COUNT) == wna16_kernels());
    }
    wna16_isa_set_cap(WNA16_ISA_COUNT);
    CHECK(wna16_isa_active() == det);
}

/* The vector-math leaves (kernels/vec_math.h) of every level this machine
 * has: the reference level's bits for each op at lengths around the 16-lane
 * step (and the experts' fours), with NaN and large inputs to silu; the
 * dispatch table's vec is the level's own (WNA16_ISA caps it). */
static void test_vec_math(void) {
    enum { H = 75, E = 11 };
    static float x0[H], x1[H], w[E * H], g[H], u[H], o[4][E], y[2][H];
    static uint16_t wb[E * H], act[2][H];
    static double yd[2][H], xd[H];
    for (int i = 0; i < H; i++) x0[i] = frand(), x1[i] = frand(), xd[i] = frand();
    for (int i = 0; i < E * H; i++) w[i] = frand(), wb[i] = wna16_f32_to_bf16(frand());
    for (int i = 0; i < H; i++) g[i] = 40.0f * frand(), u[i] = frand();
    g[3] = NAN, g[7] = 200.0f, g[9] = -200.0f;
    const wna16_vec_ops *ref = wna16_kernels_at(WNA16_ISA_REF)->vec;
    CHECK(ref == &wna16_vec_ops__ref);
    for (int l = 1; l < N_LEVELS; l++) {
        if (!have(levels[l].isa)) continue;
        const wna16_vec_ops *v = wna16_kernels_at(levels[l].isa)->vec;
        wna16_isa_set_cap(levels[l].isa);
        CHECK(wna16_vec() == v && v != ref);
        wna16_isa_set_cap(WNA16_ISA_COUNT);
        for (int n = 1; n <= H; n += 7) {
            const vec_ops_pair p = {{ref, v}};
            for (int k = 0; k < 2; k++) {
                float d = p.o[k]->moe_dot_f32(x0, x1, n);
                memcpy(&o[k][0], &d, sizeof d);
                p.o[k]->moe_dot_rows(x0, w, 1, E, n, o[2 + k]);
                p.o[k]->moe_silu_mul_bf16(g, u, n, act[k]);
                for (int i = 0; i < n; i++) y[k][i] = x1[i], yd[k][i] = xd[i];
                p.o[k]->axpy_neg(y[k], 0.37f, x0, n);
                p.o[k]->moe_axpy(y[k], -1.5f, u, n, false);
                p.o[k]->axpy_neg_d(yd[k], 0.37, xd, n);
            }
            CHECK_MSG(!memcmp(o[0], o[1], sizeof(float)) && !memcmp(o[2], o[3], (E - 1) * 4) &&
                          !memcmp(act[0], act[1], (size_t)n * 2) &&
                          !memcmp(y[0], y[1], (size_t)n * 4) && !memcmp(yd[0], yd[1], (size_t)n * 8),
                      "vec math %s n=%d", levels[l].name, n);
            p.o[0]->moe_dot_rows_bf16(x0, wb, 0, E, n, o[0]);
            p.o[1]->moe_dot_rows_bf16(x0, wb, 0, E, n, o[1]);
            p.o[0]->moe_dot_rows2(x0, x1, w, 2, E, n, o[2], o[3]);
            float r2[2][E];
            p.o[1]->moe_dot_rows2(x0, x1, w, 2, E, n, r2[0], r2[1]);
            CHECK_MSG(!memcmp(o[0], o[1], E * 4) && !memcmp(o[2], r2[0], (E - 2) * 4) &&
                          !memcmp(o[3], r2[1], (E - 2) * 4),
                      "vec dot rows %s n=%d", levels[l].name, n);
        }
        /* the quantizer's register tiles: 4 rows x 8/16/24 floats, 4/8/12 doubles */
        static float cf[2][4 * 30], bf[H * 30];
        static double cd[2][4 * 14], bd[H * 14], ad[4 * H];
        for (int i = 0; i < H * 30; i++) bf[i] = frand();
        for (int i = 0; i < H * 14; i++) bd[i] = frand();
        for (int i = 0; i < 4 * H; i++) ad[i] = frand();
        for (int nv = 1; nv <= 3; nv++)
            for (int sub = 0; sub < 2; sub++) {
                const vec_ops_pair p = {{ref, v}};
                for (int k = 0; k < 2; k++) {
                    for (int i = 0; i < 4 * 30; i++) cf[k][i] = x1[i % H];
                    for (int i = 0; i < 4 * 14; i++) cd[k][i] = xd[i % H];
                    p.o[k]->tile4_f32(cf[k], 30, w, H, bf, 30, H, nv, sub);
                    p.o[k]->tile4_sub_f64(cd[k], 14, ad, H, bd, 14, H, nv);
                }
                CHECK_MSG(!memcmp(cf[0], cf[1], sizeof cf[0]) && !memcmp(cd[0], cd[1], sizeof cd[0]),
                          "vec tiles %s nv=%d sub=%d", levels[l].name, nv, sub);
            }
    }
}

int main(void) {
    printf("detected %s, active %s\n", wna16_isa_name(wna16_isa_detected()),
           wna16_isa_name(wna16_isa_active()));
    test_dispatch();
    /* the reference's bits at every level: the AMX tiles (another order)
     * have their own test */
    wna16_amx_set(0);
    test_dense_leaves();
    test_dense_gemm();
    test_dense_tiles();
    test_dense_gemm_prefill();
    test_dense_rounds();
    test_dense_ctx_tuning();
    wna16_amx_set(-1);
    test_dense_amx();
    test_to_bf16();
    test_attention();
    test_attention_threads();
    test_vec_math();
    TEST_MAIN_END();
}
