/* Contiguous shares with stealing from the back: how the kernels split a
 * range of work units (weight blocks, block pairs, output rows) over the
 * threads of one call.
 *
 * Thread t owns units [units*t/nt, units*(t+1)/nt) and takes them front to
 * back, so its weights stream in address order (the hardware prefetchers'
 * best case: contiguous shares streamed M=8 4-8 % faster than interleaved
 * chunks). A thread whose share is empty takes chunks from the back of the
 * fullest other share, so a thread slowed by the host (a busy sibling, a
 * preemption) costs the call at most one chunk of the other's time instead
 * of the rest of its share.
 *
 * Each share is one 64-bit word (lo | hi << 32) on its own cache line;
 * owner and thieves move its ends by compare-and-swap. */
#ifndef WNA16_CORE_SPLIT_H
#define WNA16_CORE_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct wna16_split_share {
    _Alignas(64) uint64_t lohi;
} wna16_split_share;

static inline uint64_t wna16_split_pack(int64_t lo, int64_t hi) {
    return (uint64_t)lo | (uint64_t)hi << 32;
}

/* units < 2^31 (callers pass block counts). */
static inline void wna16_split_init(wna16_split_share *s, int nt, int64_t units) {
    for (int t = 0; t < nt; t++) s[t].lohi = wna16_split_pack(units * t / nt, units * (t + 1) / nt);
}

/* Moves one end of share t by up to `chunk`: the front (own) or the back
 * (steal). False when the share is empty. */
static inline bool wna16_split_take(wna16_split_share *s, int t, int64_t chunk, bool back,
                                    int64_t *u0, int64_t *u1) {
    uint64_t cur = __atomic_load_n(&s[t].lohi, __ATOMIC_RELAXED);
    for (;;) {
        int64_t lo = (int64_t)(cur & 0xffffffffu), hi = (int64_t)(cur >> 32);
        if (lo >= hi) return false;
        int64_t n = hi - lo < chunk ? hi - lo : chunk;
        int64_t a = back ? hi - n : lo, b = back ? hi : lo + n;
        uint64_t next = back ? wna16_split_pack(lo, a) : wna16_split_pack(b, hi);
        if (__atomic_compare_exchange_n(&s[t].lohi, &cur, next, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            *u0 = a;
            *u1 = b;
            return true;
        }
    }
}

/* The next units [u0, u1) for thread t of the call's n shares: from its own
 * share, else from the back of the share with the most left (a share whose
 * thread the runtime did not start is all stolen). False when all are
 * empty. */
static inline bool wna16_split_next(wna16_split_share *s, int n, int t, int64_t chunk, int64_t *u0,
                                    int64_t *u1) {
    if (wna16_split_take(s, t, chunk, false, u0, u1)) return true;
    for (;;) {
        int victim = -1;
        int64_t most = 0;
        for (int v = 0; v < n; v++) {
            uint64_t c = __atomic_load_n(&s[v].lohi, __ATOMIC_RELAXED);
            int64_t left = (int64_t)(c >> 32) - (int64_t)(c & 0xffffffffu);
            if (v != t && left > most) most = left, victim = v;
        }
        if (victim < 0) return false;
        if (wna16_split_take(s, victim, chunk, true, u0, u1)) return true;
    }
}

#endif
