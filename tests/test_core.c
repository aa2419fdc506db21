#include "core/common.h"
#include "core/split.h"
#include "format/qweight.h"

#include "testing.h"
#include <omp.h>

static void test_status_names(void) {
    CHECK(!strcmp(wna16_status_str(WNA16_OK), "OK"));
    CHECK(!strcmp(wna16_status_str(WNA16_ERR_DUPLICATE_KEY), "ERR_DUPLICATE_KEY"));
    CHECK(!strcmp(wna16_status_str((wna16_status)9999), "UNKNOWN_STATUS"));
    /* every pinned value in the header has a name */
    for (int s = 0; s <= WNA16_ERR_PEER_FAILED; s++) {
        const char *n = wna16_status_str((wna16_status)s);
        CHECK(n != NULL);
    }
}

static void test_half_conversions(void) {
    CHECK(wna16_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(wna16_f32_to_bf16(0.25f) == 0x3e80);
    /* round half to even: 1 + 2^-8 is a tie between 1 and 1+2^-7 -> 1 */
    CHECK(wna16_f32_to_bf16(1.00390625f) == 0x3f80);
    CHECK(wna16_f32_to_bf16(1.01171875f) == 0x3f82); /* 1+3*2^-8 -> up to even */
    CHECK(wna16_f16_to_f32(0x3c00) == 1.0f);
    CHECK(wna16_f16_to_f32(0x0001) == 5.9604644775390625e-8f);
    CHECK(wna16_f32_to_f16(1.0f) == 0x3c00);
    CHECK(wna16_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(wna16_f32_to_f16(1e6f) == 0x7c00);
    CHECK(wna16_f32_to_f16(-2.0f) == 0xc000);
    for (uint32_t h = 0; h < 0x7c00; h++)
        CHECK(wna16_f32_to_f16(wna16_f16_to_f32((uint16_t)h)) == h);
}

/* format-spec §7.4 packing words and §7.5 worked example. */
static void test_pack_vectors(void) {
    uint32_t w[2];
    int8_t a[] = {1, 2, 3, 4};
    wna16_pack_rows(a, 1, 4, 4, w);
    CHECK(w[0] == 0x0000CBA9u);
    int8_t b[] = {-8, -7, -6, -5, -4, -3, -2, -1};
    wna16_pack_rows(b, 1, 8, 4, w);
    CHECK(w[0] == 0x76543210u);
    int8_t c[] = {-8, -7, -1, 0, 1, 2, 6, 7};
    wna16_pack_rows(c, 1, 8, 4, w);
    CHECK(w[0] == 0xFEA98710u);
    int8_t d[9] = {5, 5, 5, 5, 5, 5, 5, 5, 5};
    wna16_pack_rows(d, 1, 9, 4, w);
    CHECK(w[0] == 0xDDDDDDDDu && w[1] == 0x0000000Du);
    int8_t e[] = {1, 2, 3, 4};
    wna16_pack_rows(e, 1, 4, 8, w);
    CHECK(w[0] == 0x84838281u);
    int8_t f[] = {-128, -127, -126, -125};
    wna16_pack_rows(f, 1, 4, 8, w);
    CHECK(w[0] == 0x03020100u);
    int8_t sym[] = {4, -8, 0, 1, -2, 6, 0, 0};
    wna16_pack_rows(sym, 1, 8, 4, w);
    CHECK(w[0] == 0x88E6980Cu);
    int8_t asym[] = {7, -8, -2, -2, 2, -4, 0, 6};
    wna16_pack_rows(asym, 1, 8, 4, w);
    CHECK(w[0] == 0xE84A660Fu);
    int8_t zp[] = {-2, -1, 0, 1, 2, 3, -8, 7};
    wna16_pack_zero_points(zp, 8, 1, 4, w);
    CHECK(w[0] == 0xF0BA9876u);
    /* 3-bit dense stream (only the packer; 3-bit weights are refused at load) */
    int8_t t[32];
    uint32_t w3[3];
    for (int i = 0; i < 32; i++) t[i] = (int8_t)(i % 8 - 4);
    wna16_pack_rows(t, 1, 32, 3, w3);
    CHECK(w3[0] == 0x88FAC688u && w3[1] == 0xC688FAC6u && w3[2] == 0xFAC688FAu);
}

static void test_dequant_example(void) {
    /* §7.5 asymmetric: dequant (q - zp) * s = [2.25,-1.5,0,0,1,-0.5,0.5,2] */
    int8_t q[] = {7, -8, -2, -2, 2, -4, 0, 6};
    uint32_t packed;
    wna16_pack_rows(q, 1, 8, 4, &packed);
    float scale = 0.25f;
    uint8_t zero = 6; /* zp -2 + 8 */
    wna16_qweight w = {.n = 1,
                       .k = 8,
                       .bits = 4,
                       .group_size = 8,
                       .n_groups = 1,
                       .symmetric = false,
                       .packed = &packed,
                       .row_words = 1,
                       .scales = &scale,
                       .scale_stride = 1,
                       .zeros = &zero,
                       .zero_stride = 1,
                       .scale_dtype = WNA16_DTYPE_BF16};
    float out[8];
    wna16_dequant_ref_f32(&w, out);
    const float want[] = {2.25f, -1.5f, 0, 0, 1.0f, -0.5f, 0.5f, 2.0f};
    for (int i = 0; i < 8; i++) CHECK(out[i] == want[i]);
}

/* Every unit is taken exactly once, however many of the shares' threads
 * run (the runtime may start fewer than asked: their shares are stolen),
 * and a share's owner takes its units front to back. */
static void test_split(void) {
    enum { MAXU = 1000 };
    static int taken[MAXU];
    const int64_t sizes[] = {0, 1, 7, 64, 999};
    for (int si = 0; si < 5; si++)
        for (int n = 1; n <= 5; n++)
            for (int64_t chunk = 1; chunk <= 7; chunk += 3)
                for (int run = 1; run <= n; run++) {
                    int64_t units = sizes[si];
                    wna16_split_share sh[5];
                    wna16_split_init(sh, n, units);
                    memset(taken, 0, sizeof taken);
                    int out_of_order = 0;
#pragma omp parallel num_threads(run)
                    {
                        int t = omp_get_thread_num();
                        int64_t u0, u1, own_next = units * t / n;
                        while (wna16_split_next(sh, n, t, chunk, &u0, &u1)) {
                            bool own = u0 >= units * t / n && u1 <= units * (t + 1) / n;
                            if (own && u0 != own_next)
                                __atomic_fetch_add(&out_of_order, 1, __ATOMIC_RELAXED);
                            if (own) own_next = u1;
                            for (int64_t u = u0; u < u1; u++)
                                __atomic_fetch_add(&taken[u], 1, __ATOMIC_RELAXED);
                        }
                    }
                    int wrong = 0;
                    for (int64_t u = 0; u < units; u++) wrong += taken[u] != 1;
                    CHECK_MSG(wrong == 0 && out_of_order == 0,
                              "%lld units, %d shares, %d threads, chunk %lld: %d taken other "
                              "than once, %d out of order",
                              (long long)units, n, run, (long long)chunk, wrong, out_of_order);
                }
}

static void test_huge_alloc(void) {
    size_t bytes = (3u << 20) + 5;
    uint8_t *p = wna16_huge_alloc(bytes);
    CHECK(p && ((uintptr_t)p & ((2u << 20) - 1)) == 0);
    size_t nonzero = 0;
    for (size_t i = 0; p && i < bytes; i += 4096) nonzero += p[i] != 0;
    CHECK(nonzero == 0);
    if (p) memset(p, 7, bytes); /* all of it is writable */
    /* populating and collapsing onto huge pages keep the contents (whether
     * the kernel could collapse is its business) */
    wna16_populate(p + 1, bytes - 1);
    (void)wna16_huge_collapse(p, bytes);
    size_t kept = 0;
    for (size_t i = 0; p && i < bytes; i += 4093) kept += p[i] == 7;
    CHECK(kept == (bytes + 4092) / 4093);
    wna16_huge_free(p, bytes);
    CHECK(wna16_huge_alloc(0) == NULL);
    CHECK(wna16_huge_alloc(SIZE_MAX) == NULL);
    wna16_huge_free(NULL, 1);
    /* the fitted variant: aligned, zeroed, all of it writable */
    p = wna16_huge_alloc_fit(bytes);
    CHECK(p && ((uintptr_t)p & ((2u << 20) - 1)) == 0);
    nonzero = 0;
    for (size_t i = 0; p && i < bytes; i += 4096) nonzero += p[i] != 0;
    CHECK(nonzero == 0);
    if (p) memset(p, 7, bytes);
    wna16_huge_free(p, bytes);
    CHECK(wna16_huge_alloc_fit(0) == NULL);
}

int main(void) {
    test_status_names();
    test_half_conversions();
    test_pack_vectors();
    test_dequant_example();
    test_huge_alloc();
    test_split();
    TEST_MAIN_END();
}
