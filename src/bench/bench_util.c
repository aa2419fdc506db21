/* Helpers only the benchmarks need: --isa, --seconds and the read
 * bandwidth sampled between rounds. */
#include "bench/bench.h"
#include "kernels/gemm.h"
#include "kernels/machine_limits.h"

#include <stdio.h>
#include <stdlib.h>

bool cli_parse_seconds(const char *cmd, const char *flag, const char *text, double *out) {
    *out = text ? atof(text) : 0;
    if (*out > 0 && *out < 100) return true;
    fprintf(stderr, "wna16 %s: %s expects seconds in (0, 100)\n", cmd, flag);
    return false;
}

double cli_frac(double frac, const char *what) {
    if (!(frac > 1.0)) return frac;
    fprintf(stderr,
            "wna16 bench: %s ran at %.3f of the limit measured in this run: the probe is slower "
            "than this kernel (kernels/machine_limits.c misses a faster way); reported as 1\n",
            what, frac);
    return 1.0;
}

size_t cli_probe_bytes(void) {
    size_t bytes = 2 * wna16_llc_bytes(NULL), lo = (size_t)256 << 20, hi = (size_t)1 << 30;
    return bytes < lo ? lo : bytes > hi ? hi : bytes;
}

static double bw_sample(int threads) { return wna16_measure_read_bw(threads, (size_t)1 << 30, 2); }

void cli_bw_rounds_start(cli_bw_rounds *r, int threads) {
    r->threads = threads;
    r->prev = r->lo = r->hi = bw_sample(threads);
}

double cli_bw_rounds_next(cli_bw_rounds *r) {
    double next = bw_sample(r->threads), held = 0.5 * (r->prev + next);
    r->lo = next < r->lo ? next : r->lo;
    r->hi = next > r->hi ? next : r->hi;
    r->prev = next;
    return held;
}

bool cli_set_isa(const char *cmd, const char *text) {
    wna16_isa isa;
    if (!text || !wna16_isa_parse(text, &isa)) {
        fprintf(stderr, "wna16 %s: --isa takes ref, avx2, avx512, avx512bf16, neon or neonbf16\n",
                cmd);
        return false;
    }
    wna16_isa_set_cap(isa);
    return true;
}
