#include "kernels/machine_limits.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels/ukernel.h"

double wna16_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile uint64_t sink_u64;

double wna16_measure_read_bw(int n_threads, size_t bytes, int reps) {
    if (n_threads <= 0) n_threads = omp_get_max_threads();
    size_t words = bytes / sizeof(uint64_t);
    words -= words % (size_t)(32 * n_threads);
    uint64_t (*sum)(const void *, size_t, int) = NULL;
#if defined(__x86_64__) || defined(__i386__) /* the leaves built for x86 targets only */
    wna16_isa isa = wna16_isa_active();
    sum = wna16_isa_le(WNA16_ISA_AVX512, isa) ? wna16_read_sum__avx512
          : wna16_isa_le(WNA16_ISA_AVX2, isa) ? wna16_read_sum__avx2
                                              : NULL;
#endif
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, (size_t)2 << 20, words * sizeof *buf)) return 0.0;
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, words * sizeof *buf, MADV_HUGEPAGE); /* as packed weights do */
#endif
    double best = 1e30;
#pragma omp parallel num_threads(n_threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t w0 = words / (size_t)nt * (size_t)t, w1 = words / (size_t)nt * (size_t)(t + 1);
        for (size_t i = w0; i < w1; i++) buf[i] = i;
        for (int r = 0; r < reps * (sum ? 2 : 1); r++) {
#pragma omp barrier
            double t0 = wna16_now();
            uint64_t tot = 0;
            if (sum) {
                tot = sum(buf + w0, (w1 - w0) * sizeof *buf, r & 1);
            } else {
                uint64_t s[8] = {0};
                for (size_t i = w0; i < w1; i += 8)
                    for (int j = 0; j < 8; j++) s[j] += buf[i + j];
                for (int j = 0; j < 8; j++) tot += s[j];
            }
            sink_u64 += tot;
#pragma omp barrier
#pragma omp master
            {
                double dt = wna16_now() - t0;
                if (dt < best) best = dt;
            }
        }
    }
    free(buf);
    return (double)(words * sizeof(uint64_t)) / best * 1e-9;
}

#if defined(__x86_64__) || defined(__i386__)
static volatile float sink_f32;

/* The best of 5 timed runs of a register-resident loop on every thread. */
static double peak(int n_threads, float (*loop)(int64_t), double flops_per_iter) {
    if (n_threads <= 0) n_threads = omp_get_max_threads();
    const int64_t iters = 4 << 20;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = 0, dt = 0;
#pragma omp parallel num_threads(n_threads)
        {
#pragma omp barrier
#pragma omp master
            t0 = wna16_now();
            sink_f32 += loop(iters);
#pragma omp barrier
#pragma omp master
            dt = wna16_now() - t0;
        }
        if (dt < best) best = dt;
    }
    return flops_per_iter * (double)iters * n_threads / best * 1e-9;
}

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
