/* The paged KV cache's block bookkeeping (runtime/kv_blocks.h): blocks come
 * from and return to the free list, reservation is all-or-nothing, shared
 * prefix blocks are reference counted, bad requests are refused with their
 * message. */
#include "runtime/kv_blocks.h"
#include "testing.h"

#define CHECK_FAIL(expr, want, substr)                                                             \
    do {                                                                                           \
        wna16_diag_clear(&d);                                                                      \
        CHECK((expr) == (want));                                                                   \
        CHECK_MSG(strstr(d.detail, substr) != NULL, "detail \"%s\"", d.detail);                    \
    } while (0)

static wna16_diag d;

/* Every block is either free exactly once or held: no leak, no double free. */
static int pool_consistent(const wna16_kv_pool *p) {
    int32_t held = 0;
    for (int32_t b = 0; b < p->n_blocks; b++) held += p->refs[b] > 0;
    for (int32_t i = 0; i < p->n_free; i++)
        if (p->refs[p->free_list[i]] != 0) return 0;
    return held + p->n_free == p->n_blocks;
}

static void test_reserve_release(void) {
    wna16_kv_pool p;
    CHECK(wna16_kv_pool_init(&d, &p, 8) == WNA16_OK);
    wna16_kv_seq a = {0}, b = {0};
    CHECK(wna16_kv_seq_reserve(&d, &p, &a, 1) == WNA16_OK);
    CHECK(a.n_blocks == 1 && a.table[0] == 0 && p.n_free == 7);
    /* Filling the first block takes no new one; the 17th position does. */
    CHECK(wna16_kv_seq_reserve(&d, &p, &a, WNA16_KV_BLOCK) == WNA16_OK);
    CHECK(a.n_blocks == 1);
    CHECK(wna16_kv_seq_reserve(&d, &p, &a, WNA16_KV_BLOCK + 1) == WNA16_OK);
    CHECK(a.n_blocks == 2 && a.positions == WNA16_KV_BLOCK + 1);
    CHECK(wna16_kv_seq_reserve(&d, &p, &b, 6 * WNA16_KV_BLOCK) == WNA16_OK);
    CHECK(p.n_free == 0 && pool_consistent(&p));
    /* Exhausted: the refusal changes nothing, so a scheduler can preempt. */
    CHECK_FAIL(wna16_kv_seq_reserve(&d, &p, &a, 3 * WNA16_KV_BLOCK), WNA16_ERR_LIMIT,
               "1 more blocks needed, 0 free");
    CHECK(a.n_blocks == 2 && a.positions == WNA16_KV_BLOCK + 1 && p.n_free == 0);
    wna16_kv_seq_release(&p, &b);
    CHECK(p.n_free == 6 && b.n_blocks == 0 && b.table == NULL && pool_consistent(&p));
    CHECK(wna16_kv_seq_reserve(&d, &p, &a, 3 * WNA16_KV_BLOCK) == WNA16_OK);
    CHECK(a.n_blocks == 3 && pool_consistent(&p));
    wna16_kv_seq_release(&p, &a);
    CHECK(p.n_free == 8 && pool_consistent(&p));
    wna16_kv_pool_destroy(&p);
}

static void test_share(void) {
    wna16_kv_pool p;
    CHECK(wna16_kv_pool_init(&d, &p, 6) == WNA16_OK);
    wna16_kv_seq a = {0}, b = {0};
    CHECK(wna16_kv_seq_reserve(&d, &p, &a, 2 * WNA16_KV_BLOCK + 5) == WNA16_OK);
    CHECK(wna16_kv_seq_share(&d, &p, &a, 2, &b) == WNA16_OK);
    CHECK(b.n_blocks == 2 && b.table[0] == a.table[0] && b.table[1] == a.table[1]);
    CHECK(p.refs[a.table[0]] == 2 && p.refs[a.table[2]] == 1 && p.n_free == 3);
    /* b's own continuation takes a fresh block, not a's partly filled one. */
    CHECK(wna16_kv_seq_reserve(&d, &p, &b, 2 * WNA16_KV_BLOCK + 1) == WNA16_OK);
    CHECK(b.table[2] != a.table[2] && p.n_free == 2);
    /* The shared blocks stay held until their last holder lets go. */
    wna16_kv_seq_release(&p, &a);
    CHECK(p.n_free == 3 && p.refs[b.table[0]] == 1 && pool_consistent(&p));
    wna16_kv_seq_release(&p, &b);
    CHECK(p.n_free == 6 && pool_consistent(&p));
    wna16_kv_pool_destroy(&p);
}

static void test_refusals(void) {
    wna16_kv_pool p;
    CHECK_FAIL(wna16_kv_pool_init(&d, &p, 0), WNA16_ERR_INVALID_ARGUMENT, "0 blocks");
    CHECK(wna16_kv_pool_init(&d, &p, 2) == WNA16_OK);
    wna16_kv_seq a = {0}, b = {0};
    CHECK_FAIL(wna16_kv_seq_reserve(&d, &p, &a, -1), WNA16_ERR_LIMIT, "do not fit");
    CHECK_FAIL(wna16_kv_seq_reserve(&d, &p, &a, 2 * WNA16_KV_BLOCK + 1), WNA16_ERR_LIMIT,
               "do not fit in 2 blocks");
    CHECK(wna16_kv_seq_reserve(&d, &p, &a, WNA16_KV_BLOCK + 3) == WNA16_OK);
    /* The second block is partly filled: sharing it is refused. */
    CHECK_FAIL(wna16_kv_seq_share(&d, &p, &a, 2, &b), WNA16_ERR_INVALID_ARGUMENT,
               "2 full blocks asked");
    CHECK_FAIL(wna16_kv_seq_share(&d, &p, &a, -1, &b), WNA16_ERR_INVALID_ARGUMENT, "full blocks");
    CHECK(wna16_kv_seq_share(&d, &p, &a, 1, &b) == WNA16_OK);
    CHECK_FAIL(wna16_kv_seq_share(&d, &p, &a, 1, &b), WNA16_ERR_INVALID_ARGUMENT, "used sequence");
    CHECK(p.refs[a.table[0]] == 2);
    wna16_kv_seq_release(&p, &a);
    wna16_kv_seq_release(&p, &b);
    CHECK(p.n_free == 2 && pool_consistent(&p));
    wna16_kv_pool_destroy(&p);
}

int main(void) {
    test_reserve_release();
    test_share();
    test_refusals();
    TEST_MAIN_END();
}
