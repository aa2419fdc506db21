#include "core/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The cap is read once; 0 means no cap. It exists so that fuzzers and tests
 * can prove a huge declared size is refused before it is allocated. */
static size_t alloc_cap(void) {
    static size_t cap = (size_t)-1; /* atomic: threads allocate while loading */
    size_t c = __atomic_load_n(&cap, __ATOMIC_RELAXED);
    if (c == (size_t)-1) {
        const char *e = getenv("WNA16_MAX_ALLOC");
        c = e ? (size_t)strtoull(e, NULL, 10) : 0;
        __atomic_store_n(&cap, c, __ATOMIC_RELAXED);
    }
    return c;
}

static bool over_cap(size_t n) {
    size_t cap = alloc_cap();
    return cap != 0 && n > cap;
}

void *wna16_malloc(size_t n) { return over_cap(n) ? NULL : malloc(n ? n : 1); }

void *wna16_calloc(size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total) || over_cap(total)) return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *wna16_realloc(void *p, size_t n) { return over_cap(n) ? NULL : realloc(p, n ? n : 1); }

void wna16_free(void *p) { free(p); }

#define HUGE_PAGE ((size_t)2 << 20)

static size_t huge_round(size_t bytes) { return (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1); }

/* A 2 MiB-aligned anonymous mapping of huge_round(bytes), its first
 * `advise` bytes asked for as transparent huge pages. */
static void *map_aligned(size_t bytes, size_t advise) {
    if (bytes == 0 || bytes > SIZE_MAX - 2 * HUGE_PAGE || over_cap(bytes)) return NULL;
    size_t size = huge_round(bytes), span = size + HUGE_PAGE;
    uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    /* keep the 2 MiB-aligned part, hand the ends back */
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + span > p + size) munmap(p + size, (size_t)(raw + span - (p + size)));
#ifdef MADV_HUGEPAGE
    if (advise) (void)madvise(p, advise, MADV_HUGEPAGE); /* advisory */
#else
    (void)advise;
#endif
    return p;
}

void *wna16_huge_alloc(size_t bytes) { return map_aligned(bytes, huge_round(bytes)); }

void *wna16_huge_alloc_fit(size_t bytes) { return map_aligned(bytes, bytes & ~(HUGE_PAGE - 1)); }

void wna16_huge_free(void *p, size_t bytes) {
    if (p) munmap(p, huge_round(bytes));
}

/* Linux 6.1's value; glibc's headers before 2.37 lack the name (a kernel
 * without it answers EINVAL) */
#if defined(__linux__) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25
#endif

bool wna16_huge_collapse(void *p, size_t bytes) {
#ifdef MADV_COLLAPSE
    uintptr_t b = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    uintptr_t e = ((uintptr_t)p + bytes) & ~(uintptr_t)(HUGE_PAGE - 1);
    if (!p || e <= b) return true;
    /* EINVAL: a kernel without it */
    return madvise((void *)b, e - b, MADV_COLLAPSE) == 0 || errno == EINVAL;
#else
    (void)p, (void)bytes;
    return true;
#endif
}

void wna16_prefault(const void *p, size_t bytes) {
    if (!p || !bytes) return;
    const size_t page = 4096;
    uintptr_t b = (uintptr_t)p & ~(uintptr_t)(page - 1), e = (uintptr_t)p + bytes;
#ifdef MADV_POPULATE_READ
    if (madvise((void *)b, e - b, MADV_POPULATE_READ) == 0) return;
#endif
    /* older kernels: one read per page */
    unsigned sum = 0;
    for (uintptr_t a = (uintptr_t)p; a < e; a = (a & ~(uintptr_t)(page - 1)) + page)
        sum += *(const volatile unsigned char *)a;
    (void)sum;
}

void wna16_populate(void *p, size_t bytes) {
    if (!p || !bytes) return;
#ifdef MADV_POPULATE_WRITE
    uintptr_t b = (uintptr_t)p & ~(uintptr_t)4095, e = (uintptr_t)p + bytes;
    /* short of memory (ENOMEM) it stays lazy: the pages fault in when used */
    if (madvise((void *)b, e - b, MADV_POPULATE_WRITE) == 0 || errno != EINVAL) return;
#endif
    /* kernels without it: write each page's first byte back */
    volatile unsigned char *c = p;
    for (size_t off = 0; off < bytes; off = (off & ~(size_t)4095) + 4096) c[off] = c[off];
}

char *wna16_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *r = wna16_malloc(n);
    if (r) memcpy(r, s, n);
    return r;
}

char *wna16_asprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *r = wna16_malloc((size_t)n + 1);
    if (!r) return NULL;
    va_start(ap, fmt);
    vsnprintf(r, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return r;
}

void wna16_buf_put(wna16_buf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = wna16_realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void wna16_buf_printf(wna16_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        wna16_buf_put(b, small, (size_t)n);
        return;
    }
    char *big = wna16_malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    wna16_buf_put(b, big, (size_t)n);
    wna16_free(big);
}

void wna16_buf_free(wna16_buf *b) {
    wna16_free(b->data);
    memset(b, 0, sizeof *b);
}

float wna16_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    union {
        uint32_t u;
        float f;
    } v;
    if (exp == 0) {
        /* zero or subnormal: value = mant * 2^-24, exact in fp32 */
        float f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31)
        v.u = sign | 0x7f800000u | (mant << 13);
    else
        v.u = sign | ((exp + 112) << 23) | (mant << 13);
    return v.f;
}

uint16_t wna16_f32_to_f16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    uint32_t sign = (v.u >> 16) & 0x8000u;
    uint32_t absu = v.u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to Inf */
    if (absu < 0x38800000u) {
        /* subnormal half: round(x / 2^-24) to nearest even via fp32 magic */
        union {
            uint32_t u;
            float f;
        } a = {.u = absu};
        float scaled = a.f * 16777216.0f; /* exact: power of two */
        /* nearbyint in default mode is round-half-even */
        uint32_t m = (uint32_t)__builtin_rintf(scaled);
        return (uint16_t)(sign | m);
    }
    uint32_t mant_rounding = 0xfffu + ((absu >> 13) & 1u);
    absu += mant_rounding;
    return (uint16_t)(sign | (((absu >> 23) - 112) << 10) | ((absu >> 13) & 0x3ffu));
}
