/* This machine's limits, measured in-process, as the yardsticks the
 * benchmarks report fractions of (wna16 bench). */
#ifndef WNA16_KERNELS_MACHINE_LIMITS_H
#define WNA16_KERNELS_MACHINE_LIMITS_H

#include <stddef.h>

/* STREAM-style read bandwidth in GB/s (1e9 bytes/s): n_threads pool
 * threads each sum their contiguous part of a `bytes` buffer (first-touched
 * by the same thread), the best pass of several ways of reading it (load
 * widths, 1-4 streams per thread, software prefetch none or 0.5-8 KiB
 * ahead). The first call runs every way `reps` times (at most 8); later
 * calls on as many threads run the fastest so far `reps` times and one
 * other way once, in turn. Returns 0 if the buffer cannot be allocated. */
double wna16_measure_read_bw(int n_threads, size_t bytes, int reps);

/* Peak GFLOP/s of a register-resident loop on n_threads threads (best of
 * five): vdpbf16ps / BFDOT (2 flops per bf16 product-add), or fp32 FMA at
 * the widest level active (FMLA on aarch64). 0 when the active ISA level
 * lacks the instruction. */
double wna16_measure_bf16_peak(int n_threads);
double wna16_measure_fma_peak(int n_threads);
/* The int16 paths' multiply-add (vpmaddwd + vpaddd, 2 products per 32-bit
 * lane, 4 flops) at the widest x86 level active; 0 elsewhere. */
double wna16_measure_i16_peak(int n_threads);
/* The peak of the arithmetic the int4/int8 linears run bf16 activations on
 * at the active level: the AMX tile products where the level takes them
 * for the panel regime, else the bf16 dot, the int16 multiply-add, or the
 * fp32 FMA; *kind names it ("amx_bf16", "bf16", "int16", "fp32_fma"; NULL:
 * none, 0). */
double wna16_measure_linear_peak(int n_threads, const char **kind);
/* The int8 activations' multiply-adds: vpdpbusd where the active level has
 * the VNNI leaf (4 products per 32-bit lane), and the AMX-INT8 tile
 * product where the level takes it; 0 where not. */
double wna16_measure_i8_peak(int n_threads);
double wna16_measure_amx_i8_peak(int n_threads);
/* The same for linears packed for int8 activations (kernels/gemm.h
 * act_int8): the AMX-INT8 tile products where the level takes them
 * ("amx_int8"), else the level's int8 leaf's products: vpdpbusd
 * ("int8_vnni") or vpmaddubsw + vpmaddwd ("int8"), else the int16
 * multiply-add the int16 leaves run them on
 * ("int16"; NULL and 0: none). */
double wna16_measure_linear_peak_a8(int n_threads, const char **kind);

/* The peak of the arithmetic the dense bf16 linear runs on from its tile
 * threshold: with the AMX tiles in force (kernels/gemm.h wna16_amx), the
 * tile products' rate over 3 (x is split into three bf16 parts, so three
 * products per useful one; kind "amx_bf16"), else the fp32 FMA's
 * ("fp32_fma"; NULL and 0: none). */
double wna16_measure_dense_peak(int n_threads, const char **kind);

/* Bytes of the last-level cache as the CPU reports it (sysfs, as lscpu;
 * else sysconf; else 32 MiB); *source ("sysfs", "sysconf", "assumed") when
 * not NULL. */
size_t wna16_llc_bytes(const char **source);

#endif
