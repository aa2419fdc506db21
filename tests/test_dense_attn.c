/* The dense bf16 GEMV/GEMM and attention leaves against their scalar
 * references: the dense leaves are bitwise equal by construction (same
 * summation order); attention agrees with a double-precision reference. */
#include "core/common.h"
#include "kernels/attn.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "testing.h"

#include <math.h>

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * 0x1.0p-24) * 2.0f - 1.0f;
}

static void test_dense(void) {
    static const int64_t ks[] = {1, 15, 16, 17, 64, 100, 2048};
    static uint16_t w[4 * 2048];
    static float x[8 * 2048], a[8], b[8];
    for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
        int64_t k = ks[t];
        for (int64_t i = 0; i < 4 * k; i++) w[i] = wna16_f32_to_bf16(frand());
        for (int64_t i = 0; i < 8 * k; i++) x[i] = frand();
        for (int64_t m = 1; m <= 8; m++) {
            wna16_dense_dot__ref(w, k, x, k, m, a);
            wna16_dense_dot__avx512(w, k, x, k, m, b);
            CHECK_MSG(!memcmp(a, b, (size_t)m * sizeof *a), "dense k=%lld m=%lld", (long long)k,
                      (long long)m);
            for (int64_t i = 0; i < m; i++) {
                double ref = 0, mag = 0;
                for (int64_t c = 0; c < k; c++) {
                    double p = (double)x[i * k + c] * wna16_bf16_to_f32(w[c]);
                    ref += p, mag += fabs(p);
                }
                CHECK(fabs(a[i] - ref) <= (double)k * 0x1p-23 * mag + 1e-30);
            }
        }
    }
    /* the threaded GEMM gives the same bits for 1 and 2 threads, with bias */
    float y1[8 * 4] = {0}, y2[8 * 4] = {0}, bias[4] = {1, -2, 0.5f, 0};
    wna16_dense_gemm(w, 4, 100, 100, bias, 7, x, 100, y1, 4, 1);
    wna16_dense_gemm(w, 4, 100, 100, bias, 7, x, 100, y2, 4, 2);
    CHECK(!memcmp(y1, y2, sizeof y1));
}

static double bf16_round(double x) { return wna16_bf16_to_f32(wna16_f32_to_bf16((float)x)); }

/* Every leaf against a double reference: head groups (GQA) of 1 to 10,
 * positions across the 16-wide K blocks, the BF16 leaf's 64-position chunks
 * (one to four, the last one partial) and odd counts (the last V pair half
 * past n), NaN past n in the cache. The fp32 leaves (ref, avx512) keep
 * q and the softmax weights in fp32: within 1e-5. The BF16 leaf rounds q
 * and the weights to bf16: against a reference that rounds them too,
 * within 1e-5 plus 2^-7 of the weighted magnitude (a weight can round the
 * other way than the double reference's). */
static void test_attention(void) {
    static const int64_t hds[] = {16, 32, 48, 64, 128, 256};
    static const int64_t ns[] = {1, 2, 15, 16, 17, 33, 64, 65, 100, 127, 128, 129, 200};
    static const int64_t gs[] = {1, 3, 8, 10};
    enum { NMAX = 200, HDMAX = 256, GMAX = 10, KMAX = (NMAX + 15) / 16 * 16, LDS = NMAX + 3 };
    static float q[GMAX * HDMAX];
    static uint16_t kb[HDMAX * KMAX], v[KMAX * HDMAX]; /* bf16 cache */
    static float s1[GMAX * LDS], s2[GMAX * LDS], s3[GMAX * LDS];
    static float o1[GMAX * HDMAX], o2[GMAX * HDMAX], o3[GMAX * HDMAX];
    bool bf16 = wna16_isa_detected() >= WNA16_ISA_AVX512BF16;
    int worst = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (size_t ti = 0; ti < sizeof ns / sizeof *ns; ti++)
            for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
                int64_t hd = hds[hi], n = ns[ti], g = gs[gi];
                bool leaf3 = bf16 && hd % 32 == 0;
                for (int64_t i = 0; i < g * hd; i++) q[i] = 3 * frand();
                /* the whole last block, past n too: those entries must not count */
                for (int64_t i = 0; i < hd * KMAX; i++) kb[i] = wna16_f32_to_bf16(frand());
                for (int64_t i = 0; i < hd * KMAX; i++) v[i] = wna16_f32_to_bf16(frand());
                /* NaN past n: a leaf that reads it there, even times a zero weight, fails */
                for (int64_t p = n; p < KMAX; p++)
                    for (int64_t i = 0; i < hd; i++)
                        kb[wna16_attn_k_index(p, i, hd)] = v[wna16_attn_v_index(p, i, hd)] = 0x7fc0;
                float scale = 1.0f / sqrtf((float)hd);
                wna16_attn_group__ref(q, g, kb, v, n, hd, scale, s1, LDS, o1);
                wna16_attn_group__avx512(q, g, kb, v, n, hd, scale, s2, LDS, o2);
                if (leaf3) wna16_attn_group__avx512bf16(q, g, kb, v, n, hd, scale, s3, LDS, o3);
                for (int64_t h = 0; h < g; h++) {
                    double sc[NMAX], sc3[NMAX], mx = -1e300, mx3 = -1e300, sum = 0, sum3 = 0;
                    for (int64_t p = 0; p < n; p++) {
                        double d = 0, d3 = 0;
                        for (int64_t i = 0; i < hd; i++) {
                            double k = wna16_bf16_to_f32(kb[wna16_attn_k_index(p, i, hd)]);
                            d += (double)q[h * hd + i] * k;
                            d3 += bf16_round(q[h * hd + i]) * k;
                        }
                        sc[p] = d * scale;
                        sc3[p] = d3 * scale;
                        mx = fmax(mx, sc[p]);
                        mx3 = fmax(mx3, sc3[p]);
                    }
                    for (int64_t p = 0; p < n; p++) {
                        sum += sc[p] = exp(sc[p] - mx);
                        sum3 += sc3[p] = exp(sc3[p] - mx3);
                    }
                    for (int64_t i = 0; i < hd; i++) {
                        double ref = 0, ref3 = 0, mag3 = 0;
                        for (int64_t p = 0; p < n; p++) {
                            double vv = wna16_bf16_to_f32(v[wna16_attn_v_index(p, i, hd)]);
                            ref += sc[p] / sum * vv;
                            ref3 += bf16_round(sc3[p]) / sum3 * vv;
                            mag3 += sc3[p] / sum3 * fabs(vv);
                        }
                        float a = o1[h * hd + i], b = o2[h * hd + i], c = o3[h * hd + i];
                        bool ok = fabs(a - ref) < 1e-5 && fabs(b - ref) < 1e-5 &&
                                  (!leaf3 || fabs(c - ref3) < 1e-5 + 0x1p-7 * mag3);
                        worst += !ok;
                        if (!ok && worst < 5)
                            CHECK_MSG(ok,
                                      "attention hd=%lld n=%lld g=%lld h=%lld i=%lld: ref %g, "
                                      "scalar %g, avx512 %g; bf16 ref %g, avx512bf16 %g",
                                      (long long)hd, (long long)n, (long long)g, (long long)h,
                                      (long long)i, ref, a, b, ref3, leaf3 ? c : 0.0f);
                    }
                }
            }
    CHECK(worst == 0);
    /* dispatch follows the active level (WNA16_ISA may cap it) */
    wna16_isa act = wna16_isa_active();
    wna16_attn_fn a512 = act >= WNA16_ISA_AVX512 ? wna16_attn_group__avx512 : wna16_attn_group__ref;
    CHECK(wna16_attn_group(24) == wna16_attn_group__ref);
    CHECK(wna16_attn_group(48) == a512);
    CHECK(wna16_attn_group(128) ==
          (act >= WNA16_ISA_AVX512BF16 ? wna16_attn_group__avx512bf16 : a512));
}

int main(void) {
    if (wna16_isa_detected() < WNA16_ISA_AVX512) {
        printf("no AVX-512 on this CPU: only the references run\n");
        TEST_MAIN_END();
    }
    test_dense();
    test_attention();
    TEST_MAIN_END();
}
