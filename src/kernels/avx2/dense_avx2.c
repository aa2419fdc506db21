/* AVX2 + FMA dense bf16 dot (kernels/dense.h), bitwise equal to the
 * reference: element c accumulates into partial c % 64, here lane c % 8 of
 * accumulator vector (c / 8) % 8, and the fold is the reference's.
 *
 * Up to 4 rows share each weight vector (one load and widening, then one
 * FMA per row) without breaking that order: rows x 8 vectors of partials
 * do not fit in 16 registers, so the rows run in passes, each over a subset
 * of the 8 accumulator vectors (all 8 for one row, 4 for two, 2 for three or
 * four: 6-8 independent FMA chains in registers, and the two vectors that
 * share an x line in the same pass). A pass reads only the weight and x
 * vectors of its partials, so every weight vector is still read and widened
 * once for all its rows; the passes after the first find the weight row
 * (k bf16, 4 KiB at k = 2048) in L1. More rows go in two groups. */
#include "kernels/dense.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* Software prefetch distance into L2, as the AVX-512 leaf's (its comment
 * has the measurements): the weights stream once per call (lm_head at
 * decode) and run on into the next rows. */
#define DENSE_PREFETCH 6144

INLINE __m256 bf16x8(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* Lanes [0, left) of a vector at the end of k, zero past it (maskload does
 * not touch the masked lanes' memory; the bf16 go through a zeroed copy). */
INLINE __m256i tail_mask(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
INLINE __m256 bf16x8_tail(const uint16_t *p, int64_t left) {
    uint16_t buf[8] = {0};
    memcpy(buf, p, (size_t)(left < 8 ? left : 8) * sizeof *p);
    return bf16x8(buf);
}

/* The reference's fold of the 64 partials of one row: vectors
 * ((0+2)+(4+6)) + ((1+3)+(5+7)) (its 16-lane (0+1)+(2+3) step), then
 * lanes 4, 2, 1. */
INLINE float fold(const __m256 a[8]) {
    __m256 even = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[4], a[6]));
    __m256 odd = _mm256_add_ps(_mm256_add_ps(a[1], a[3]), _mm256_add_ps(a[5], a[7]));
    __m256 v = _mm256_add_ps(even, odd);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* Partial vectors [j0, j0 + P) of MR rows over all of k into part[i][j].
 * Only the pass with j0 == 0 prefetches: it walks every 64-element step,
 * and the others follow it over lines now in L1 or L2. */
INLINE void dot_pass(const uint16_t *w, int64_t k, const float *x, int64_t ldx, const int MR,
                     const int P, int j0, __m256 part[][8]) {
    __m256 acc[4][8];
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < P; p++) acc[i][p] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
        if (j0 == 0) {
            _mm_prefetch((const char *)(w + c) + DENSE_PREFETCH, _MM_HINT_T1);
            _mm_prefetch((const char *)(w + c) + DENSE_PREFETCH + 64, _MM_HINT_T1);
        }
        for (int p = 0; p < P; p++) {
            int64_t cj = c + 8 * (j0 + p);
            __m256 wv = bf16x8(w + cj);
            for (int i = 0; i < MR; i++)
                acc[i][p] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + cj), wv, acc[i][p]);
        }
    }
    /* the last, partial 64-step: a masked lane adds 0·0 */
    for (int p = 0; p < P; p++) {
        int64_t cj = c + 8 * (j0 + p);
        if (cj >= k) continue;
        __m256i mask = tail_mask(k - cj);
        __m256 wv = bf16x8_tail(w + cj, k - cj);
        for (int i = 0; i < MR; i++)
            acc[i][p] = _mm256_fmadd_ps(_mm256_maskload_ps(x + i * ldx + cj, mask), wv, acc[i][p]);
    }
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < P; p++) part[i][j0 + p] = acc[i][p];
}

INLINE void dot_rows(const uint16_t *w, int64_t k, const float *x, int64_t ldx, const int MR,
                     float *out) {
    const int P = MR == 1 ? 8 : MR == 2 ? 4 : 2; /* MR <= 4; MR x P <= 8 chains */
    __m256 part[4][8];
    for (int j0 = 0; j0 < 8; j0 += P) dot_pass(w, k, x, ldx, MR, P, j0, part);
    for (int i = 0; i < MR; i++) out[i] = fold(part[i]);
}

void wna16_dense_dot__avx2(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                           float *out) {
    /* 5-8 rows: two groups of at most 4, each weight vector widened twice
     * (the second time from L1). One group would take one partial vector
     * per pass, and the two passes that share each x line were 16 lines of
     * x per L1 set apart (rows 8 KiB apart alias): it ran 34 GFLOP/s at
     * m = 8, the two groups 74 (lm_head shape, 2 threads). */
    if (m > 4) {
        int64_t h = (m + 1) / 2;
        wna16_dense_dot__avx2(w, k, x, ldx, h, out);
        wna16_dense_dot__avx2(w, k, x + h * ldx, ldx, m - h, out + h);
        return;
    }
    switch (m) {
    case 1:
        dot_rows(w, k, x, ldx, 1, out);
        break;
    case 2:
        dot_rows(w, k, x, ldx, 2, out);
        break;
    case 3:
        dot_rows(w, k, x, ldx, 3, out);
        break;
    case 4:
        dot_rows(w, k, x, ldx, 4, out);
        break;
    default:
        break; /* m <= 0 computes nothing */
    }
}
