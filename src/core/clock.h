/* The library's clock: seconds on a monotonic clock, for timings it
 * reports (generate, comm stats, quantize) and the benchmarks. */
#ifndef WNA16_CORE_CLOCK_H
#define WNA16_CORE_CLOCK_H

double wna16_now(void);

#endif
