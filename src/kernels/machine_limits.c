#include "kernels/machine_limits.h"
#include "core/clock.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/pool.h"
#include "kernels/ukernel.h"

static uint64_t sink_u64; /* keeps the sums live */

typedef uint64_t (*read_sum_fn)(const void *, size_t, int, int);

/* One way of reading the buffer: the load width (the leaf), streams per
 * thread and software prefetch distance. Which is fastest depends on the
 * machine (on a 2-vCPU Xeon guest, 64-byte loads with a prefetch 0.5-1 KiB
 * ahead read 36-37 GB/s, 8 KiB ahead 29, none 27; on the Zen guests 8 KiB
 * ahead was best), so the probe tries them all and keeps the fastest: a
 * kernel that reads faster than the probe means a way is missing here. */
typedef struct bw_variant {
    read_sum_fn sum; /* NULL: plain C */
    int streams, prefetch;
} bw_variant;

#define BW_VARIANTS_MAX 12

static int bw_variants(bw_variant *v) {
    int n = 0;
    read_sum_fn leaves[2] = {NULL, NULL};
#if defined(__x86_64__) || defined(__i386__) /* the leaves built for x86 targets only */
    wna16_isa isa = wna16_isa_active();
    if (wna16_isa_le(WNA16_ISA_AVX512, isa)) leaves[0] = wna16_read_sum__avx512;
    if (wna16_isa_le(WNA16_ISA_AVX2, isa)) leaves[leaves[0] ? 1 : 0] = wna16_read_sum__avx2;
#elif defined(__aarch64__)
    if (wna16_isa_le(WNA16_ISA_NEON, wna16_isa_active())) leaves[0] = wna16_read_sum__neon;
#endif
    if (!leaves[0]) {
        v[n++] = (bw_variant){NULL, 1, 0};
        return n;
    }
    static const int shapes[][2] = {{1, 0},    {1, 512},  {1, 1024}, {1, 2048},
                                    {1, 8192}, {2, 1024}, {4, 512}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        v[n++] = (bw_variant){leaves[0], shapes[i][0], shapes[i][1]};
    if (leaves[1]) { /* the narrower loads, plain and with the kernels' usual prefetch */
        v[n++] = (bw_variant){leaves[1], 1, 0};
        v[n++] = (bw_variant){leaves[1], 1, 1024};
    }
    return n;
}

typedef struct bw_job {
    uint64_t *buf;
    size_t words;
    const bw_variant *v;
    const int *order; /* variant of each pass */
    int passes;
    double best[BW_VARIANTS_MAX]; /* thread 0's, per variant */
} bw_job;

/* Each thread sums its share of the buffer, all starting together; thread
 * 0 times each pass from barrier to barrier. */
static void bw_thread(void *arg, int t, int nt) {
    bw_job *j = arg;
    size_t w0 = j->words / (size_t)nt * (size_t)t, w1 = j->words / (size_t)nt * (size_t)(t + 1);
    for (size_t i = w0; i < w1; i++) j->buf[i] = i;
    for (int r = 0; r < j->passes; r++) {
        const bw_variant *v = &j->v[j->order[r]];
        wna16_barrier();
        double t0 = wna16_now();
        uint64_t tot = 0;
        if (v->sum) {
            tot = v->sum(j->buf + w0, (w1 - w0) * sizeof *j->buf, v->streams, v->prefetch);
        } else {
            uint64_t s[8] = {0};
            for (size_t i = w0; i < w1; i += 8)
                for (int k = 0; k < 8; k++) s[k] += j->buf[i + k];
            for (int k = 0; k < 8; k++) tot += s[k];
        }
        __atomic_fetch_add(&sink_u64, tot, __ATOMIC_RELAXED);
        wna16_barrier();
        double dt = wna16_now() - t0;
        if (t == 0 && dt < j->best[j->order[r]]) j->best[j->order[r]] = dt;
    }
}

/* The fastest variant so far (per thread count): later calls run it `reps`
 * times and one other variant once, in turn, so a change of the machine's
 * best is noticed without paying for every variant every time. */
static struct {
    int threads, best, next, n; /* n: variants when it was found (0: none yet) */
} bw_memo;
static pthread_mutex_t bw_memo_mu = PTHREAD_MUTEX_INITIALIZER;

double wna16_measure_read_bw(int n_threads, size_t bytes, int reps) {
    if (n_threads <= 0) n_threads = wna16_threads_default();
    if (reps < 1) reps = 1;
    bw_variant v[BW_VARIANTS_MAX];
    int nv = bw_variants(v);
    /* whole 256-byte steps of up to 4 streams on every thread */
    size_t words = bytes / sizeof(uint64_t);
    words -= words % (size_t)(128 * n_threads);
    int order[BW_VARIANTS_MAX * 8 + 1], passes = 0;
    if (reps > 8) reps = 8;
    pthread_mutex_lock(&bw_memo_mu);
    bool known = bw_memo.n == nv && bw_memo.threads == n_threads;
    if (!known) {
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < nv; i++) order[passes++] = i;
    } else {
        for (int r = 0; r < reps; r++) order[passes++] = bw_memo.best;
        if (nv > 1) {
            bw_memo.next = (bw_memo.next + 1) % nv;
            if (bw_memo.next == bw_memo.best) bw_memo.next = (bw_memo.next + 1) % nv;
            order[passes++] = bw_memo.next;
        }
    }
    pthread_mutex_unlock(&bw_memo_mu);
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, (size_t)2 << 20, words * sizeof *buf)) return 0.0;
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, words * sizeof *buf, MADV_HUGEPAGE); /* as packed weights do */
#endif
    bw_job j = {.buf = buf, .words = words, .v = v, .order = order, .passes = passes};
    for (int i = 0; i < BW_VARIANTS_MAX; i++) j.best[i] = 1e30;
    wna16_parallel(n_threads, bw_thread, &j);
    free(buf);
    int best = order[0];
    for (int i = 0; i < nv; i++)
        if (j.best[i] < j.best[best]) best = i;
    pthread_mutex_lock(&bw_memo_mu);
    bw_memo.threads = n_threads, bw_memo.n = nv, bw_memo.best = best;
    pthread_mutex_unlock(&bw_memo_mu);
    return (double)(words * sizeof(uint64_t)) / j.best[best] * 1e-9;
}

/* The last-level cache as the CPU reports it: the largest data or unified
 * cache level of cpu0 in sysfs (what lscpu shows), else the C library's
 * figure, else 32 MiB. */
static size_t sysfs_llc(void) {
    size_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], buf[64];
        long level = 0, size = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fgets(buf, sizeof buf, f)) level = strtol(buf, NULL, 10);
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if ((f = fopen(path, "r"))) {
            bool instr = fgets(buf, sizeof buf, f) && !strncmp(buf, "Instruction", 11);
            fclose(f);
            if (instr) continue;
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r"))) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end = NULL;
            size = strtol(buf, &end, 10);
            if (end && (*end == 'K' || *end == 'k')) size <<= 10;
            else if (end && *end == 'M') size <<= 20;
            else if (end && *end == 'G') size <<= 30;
        }
        fclose(f);
        if (size > 0 && level >= best_level) best = (size_t)size, best_level = (int)level;
    }
    return best;
}

size_t wna16_llc_bytes(const char **source) {
    size_t v = sysfs_llc();
    const char *src = "sysfs";
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (!v) {
        long c = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (c > 0) v = (size_t)c, src = "sysconf";
    }
#endif
    if (!v) v = (size_t)32 << 20, src = "assumed";
    if (source) *source = src;
    return v;
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

/* (the NEON int16 leaves' smlal peak is not measured: 0, unknown) */
double wna16_measure_i16_peak(int n_threads) {
    (void)n_threads;
    return 0.0;
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

double wna16_measure_i16_peak(int n_threads) {
    wna16_isa isa = wna16_isa_active();
    if (wna16_isa_le(WNA16_ISA_AVX512, isa))
        return peak(n_threads, wna16_peak_i16_loop__avx512, WNA16_PEAK_I16_AVX512_FLOPS);
    if (wna16_kernels()->gemv_i16[WNA16_WFMT_Q4] == wna16_gemv_q4_i16_4x16__avxvnni)
        return peak(n_threads, wna16_peak_i16_loop__avxvnni, WNA16_PEAK_I16_AVX2_FLOPS);
    if (wna16_isa_le(WNA16_ISA_AVX2, isa))
        return peak(n_threads, wna16_peak_i16_loop__avx2, WNA16_PEAK_I16_AVX2_FLOPS);
    return 0.0;
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

double wna16_measure_i16_peak(int n_threads) {
    (void)n_threads;
    return 0.0;
}
#endif

double wna16_measure_dense_peak(int n_threads, const char **kind) {
#ifdef WNA16_HAVE_AMX
    const wna16_kernel_table *t = wna16_kernels();
    if (wna16_amx() && t->dense_big && t->dense_big->dense_tiles == wna16_dense_tiles__amx) {
        *kind = "amx_bf16";
        return peak(n_threads, wna16_peak_amx_loop__amx, WNA16_PEAK_AMX_FLOPS / 3);
    }
#endif
    double p = wna16_measure_fma_peak(n_threads);
    *kind = p > 0 ? "fp32_fma" : NULL;
    return p;
}

/* An int8-activation leaf, with the loop of its own products, that loop's
 * flops per iteration and the name the benches give the peak. */
struct i8_leaf {
    wna16_gemv_a8_fn leaf;
    float (*loop)(int64_t);
    double flops;
    const char *kind;
};

#if defined(__x86_64__) || defined(__i386__)
static const struct i8_leaf i8_leaves[] = {
    {wna16_gemv_q4_a8_8x32__avx512vnni, wna16_peak_i8_loop__avx512vnni, WNA16_PEAK_I8_AVX512_FLOPS,
     "int8_vnni"},
    {wna16_gemv_q4_a8_8x32__avxvnni, wna16_peak_i8_loop__avxvnni, WNA16_PEAK_I8_AVX2_FLOPS,
     "int8_vnni"},
    {wna16_gemv_q4_a8_8x32__avx512, wna16_peak_i8_loop__avx512, WNA16_PEAK_I8_AVX512_FLOPS, "int8"},
    {wna16_gemv_q4_a8_8x32__avx2, wna16_peak_i8_loop__avx2, WNA16_PEAK_I8_AVX2_DOT2_FLOPS, "int8"},
};
#endif

/* The active level's int8 leaf's entry, or NULL. */
static const struct i8_leaf *active_i8_leaf(void) {
#if defined(__x86_64__) || defined(__i386__)
    wna16_gemv_a8_fn leaf = wna16_kernels()->gemv_a8;
    for (size_t i = 0; leaf && i < sizeof i8_leaves / sizeof *i8_leaves; i++)
        if (i8_leaves[i].leaf == leaf) return &i8_leaves[i];
#endif
    return NULL;
}

double wna16_measure_i8_peak(int n_threads) {
    const struct i8_leaf *l = active_i8_leaf();
    return l ? peak(n_threads, l->loop, l->flops) : 0.0;
}

double wna16_measure_amx_i8_peak(int n_threads) {
#ifdef WNA16_HAVE_AMX
    if (wna16_kernels()->gemm_amx)
        return peak(n_threads, wna16_peak_amx_i8_loop__amx, WNA16_PEAK_AMX_I8_FLOPS);
#endif
    (void)n_threads;
    return 0.0;
}

double wna16_measure_linear_peak_a8(int n_threads, const char **kind) {
    const wna16_kernel_table *t = wna16_kernels();
    double p;
    *kind = NULL;
    if ((p = wna16_measure_amx_i8_peak(n_threads)) > 0)
        *kind = "amx_int8";
    else if ((p = wna16_measure_i8_peak(n_threads)) > 0)
        *kind = active_i8_leaf()->kind;
    else if (t->gemv_i16[WNA16_WFMT_Q4] && (p = wna16_measure_i16_peak(n_threads)) > 0)
        *kind = "int16";
    return p;
}

double wna16_measure_linear_peak(int n_threads, const char **kind) {
    const wna16_kernel_table *t = wna16_kernels();
    double p = 0;
    *kind = NULL;
#ifdef WNA16_HAVE_AMX
    if (t->gemm_amx) {
        *kind = "amx_bf16";
        return peak(n_threads, wna16_peak_amx_loop__amx, WNA16_PEAK_AMX_FLOPS);
    }
#endif
    if (t->gemv_bf16[WNA16_WFMT_Q4] && (p = wna16_measure_bf16_peak(n_threads)) > 0)
        *kind = "bf16";
    else if (t->gemv_i16[WNA16_WFMT_Q4] && (p = wna16_measure_i16_peak(n_threads)) > 0)
        *kind = "int16";
    else if ((p = wna16_measure_fma_peak(n_threads)) > 0)
        *kind = "fp32_fma";
    return p;
}
