/* This machine's limits, measured in-process, as the yardsticks the
 * benchmarks report fractions of (wna16 bench). */
#ifndef WNA16_KERNELS_MACHINE_LIMITS_H
#define WNA16_KERNELS_MACHINE_LIMITS_H

#include <stddef.h>

/* STREAM-style read bandwidth in GB/s (1e9 bytes/s): n_threads threads of
 * the library's pool each sum their contiguous part of a `bytes` buffer
 * (first-touched by the same thread), best of `reps` passes of each of two loops (plain
 * loads; loads plus an L2 prefetch 8 KiB ahead, as the decode kernel does),
 * alternating. Returns 0 if the buffer cannot be allocated. */
double wna16_measure_read_bw(int n_threads, size_t bytes, int reps);

/* Peak GFLOP/s of a register-resident loop on n_threads threads (best of
 * five): vdpbf16ps / BFDOT (2 flops per bf16 product-add), or fp32 FMA at
 * the widest level active (FMLA on aarch64). 0 when the active ISA level
 * lacks the instruction. */
double wna16_measure_bf16_peak(int n_threads);
double wna16_measure_fma_peak(int n_threads);

#endif
