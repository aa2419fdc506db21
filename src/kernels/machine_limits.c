#include "kernels/machine_limits.h"
#include "core/clock.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/pool.h"
#include "kernels/ukernel.h"

static uint64_t sink_u64; /* keeps the sums live */

typedef struct bw_job {
    uint64_t *buf;
    size_t words;
    uint64_t (*sum)(const void *, size_t, int);
    int reps;
    double best; /* thread 0's */
} bw_job;

/* Each thread sums its share of the buffer, all starting together; thread
 * 0 times each pass from barrier to barrier. */
static void bw_thread(void *arg, int t, int nt) {
    bw_job *j = arg;
    size_t w0 = j->words / (size_t)nt * (size_t)t, w1 = j->words / (size_t)nt * (size_t)(t + 1);
    for (size_t i = w0; i < w1; i++) j->buf[i] = i;
    for (int r = 0; r < j->reps * (j->sum ? 2 : 1); r++) {
        wna16_barrier();
        double t0 = wna16_now();
        uint64_t tot = 0;
        if (j->sum) {
            tot = j->sum(j->buf + w0, (w1 - w0) * sizeof *j->buf, r & 1);
        } else {
            uint64_t s[8] = {0};
            for (size_t i = w0; i < w1; i += 8)
                for (int k = 0; k < 8; k++) s[k] += j->buf[i + k];
            for (int k = 0; k < 8; k++) tot += s[k];
        }
        __atomic_fetch_add(&sink_u64, tot, __ATOMIC_RELAXED);
        wna16_barrier();
        double dt = wna16_now() - t0;
        if (t == 0 && dt < j->best) j->best = dt;
    }
}

double wna16_measure_read_bw(int n_threads, size_t bytes, int reps) {
    if (n_threads <= 0) n_threads = wna16_threads_default();
    size_t words = bytes / sizeof(uint64_t);
    words -= words % (size_t)(32 * n_threads);
    uint64_t (*sum)(const void *, size_t, int) = NULL;
#if defined(__x86_64__) || defined(__i386__) /* the leaves built for x86 targets only */
    wna16_isa isa = wna16_isa_active();
    sum = wna16_isa_le(WNA16_ISA_AVX512, isa) ? wna16_read_sum__avx512
          : wna16_isa_le(WNA16_ISA_AVX2, isa) ? wna16_read_sum__avx2
                                              : NULL;
#elif defined(__aarch64__)
    sum = wna16_isa_le(WNA16_ISA_NEON, wna16_isa_active()) ? wna16_read_sum__neon : NULL;
#endif
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, (size_t)2 << 20, words * sizeof *buf)) return 0.0;
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, words * sizeof *buf, MADV_HUGEPAGE); /* as packed weights do */
#endif
    bw_job j = {buf, words, sum, reps, 1e30};
    wna16_parallel(n_threads, bw_thread, &j);
    double best = j.best;
    free(buf);
    return (double)(words * sizeof(uint64_t)) / best * 1e-9;
}

#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
static uint32_t sink_f32_bits; /* keeps the loops live */

typedef struct peak_job {
    float (*loop)(int64_t);
    int64_t iters;
    double dt; /* thread 0's */
    int nt;
} peak_job;

/* Every thread runs the loop, all starting together; thread 0 times it
 * from barrier to barrier. */
static void peak_thread(void *arg, int t, int nt) {
    peak_job *j = arg;
    wna16_barrier();
    double t0 = wna16_now();
    float v = j->loop(j->iters);
    wna16_barrier();
    if (t == 0) {
        j->dt = wna16_now() - t0;
        j->nt = nt;
    }
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    __atomic_fetch_xor(&sink_f32_bits, bits, __ATOMIC_RELAXED);
}

/* The best of 5 timed runs of a register-resident loop on every thread:
 * 4 Mi iterations (~15-30 ms on hardware), fewer where a short trial says
 * that would take over ~50 ms (an emulator: qemu's soft-float BFDOT would
 * take minutes). */
static double peak(int n_threads, float (*loop)(int64_t), double flops_per_iter) {
    if (n_threads <= 0) n_threads = wna16_threads_default();
    const int64_t trial = 1 << 14;
    int64_t iters = 4 << 20;
    peak_job t = {loop, trial, 0, 1};
    wna16_parallel(n_threads, peak_thread, &t);
    if (t.dt > 0 && (double)iters / (double)trial * t.dt > 0.05)
        iters = (int64_t)((double)trial * 0.05 / t.dt) > trial
                    ? (int64_t)((double)trial * 0.05 / t.dt)
                    : trial;
    double best = 1e30;
    int ran = 1;
    for (int rep = 0; rep < 5; rep++) {
        peak_job j = {loop, iters, 0, 1};
        wna16_parallel(n_threads, peak_thread, &j);
        if (j.dt < best) best = j.dt, ran = j.nt;
    }
    return flops_per_iter * (double)iters * ran / best * 1e-9;
}

#if defined(__aarch64__)
/* aarch64: BFDOT at neonbf16, fp32 FMLA at neon (the leaves built for this
 * target only) */
double wna16_measure_bf16_peak(int n_threads) {
    if (!wna16_isa_le(WNA16_ISA_NEONBF16, wna16_isa_active())) return 0.0;
    return peak(n_threads, wna16_peak_bf16_loop__neonbf16, WNA16_PEAK_BF16_NEON_FLOPS);
}

double wna16_measure_fma_peak(int n_threads) {
    if (!wna16_isa_le(WNA16_ISA_NEON, wna16_isa_active())) return 0.0;
    return peak(n_threads, wna16_peak_fma_loop__neon, WNA16_PEAK_FMA_NEON_FLOPS);
}
#else
double wna16_measure_bf16_peak(int n_threads) {
    if (!wna16_isa_le(WNA16_ISA_AVX512BF16, wna16_isa_active())) return 0.0;
    return peak(n_threads, wna16_peak_bf16_loop__avx512bf16, WNA16_PEAK_BF16_FLOPS);
}

double wna16_measure_fma_peak(int n_threads) {
    wna16_isa isa = wna16_isa_active();
    if (wna16_isa_le(WNA16_ISA_AVX512, isa))
        return peak(n_threads, wna16_peak_fma_loop__avx512, WNA16_PEAK_FMA_AVX512_FLOPS);
    if (wna16_isa_le(WNA16_ISA_AVX2, isa))
        return peak(n_threads, wna16_peak_fma_loop__avx2, WNA16_PEAK_FMA_AVX2_FLOPS);
    return 0.0;
}
#endif
#else
/* No peak loop for this target yet: 0 means "unknown" to every caller. */
double wna16_measure_bf16_peak(int n_threads) {
    (void)n_threads;
    return 0.0;
}

double wna16_measure_fma_peak(int n_threads) {
    (void)n_threads;
    return 0.0;
}
#endif
