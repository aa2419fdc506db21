/* The fused WNA16 MoE layer: construction and the forward pass.
 *
 * Forward (docs/moe.md): router logits (fp32) -> top-k -> a counting sort of
 * the (token, expert) pairs by expert -> per active expert, one w13 GEMM over
 * all of its tokens (gate|up in one packed matrix) -> silu(gate)*up rounded
 * to bf16 -> one w2 GEMM -> the routing-weighted sum per token in top-k
 * order, plus the shared expert. Work items are (expert, N-range) pairs run
 * by the pool's threads from a dynamic queue; every output column is computed by
 * exactly one kernel call whose rows and bits do not depend on the thread
 * count, so results are bitwise identical for any n_threads. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "moe/moe_internal.h"
#include "parallel/shard.h"

/* Rows per kernel call: 0 = all of an expert's tokens in one call (the
 * kernels tile the rows themselves, and weights are then decoded once per
 * N-range). A positive value splits them (a tuning knob for kernels whose
 * small-m path is limited). */
#define MOE_ROWS_PER_CALL 0

/* ------------------------------------------------------------ layer */

static int64_t slots(const wna16_moe_layer *L) { return L->cfg.num_experts + 1; }

wna16_status wna16_moe_layer_create(wna16_diag *d, const wna16_moe_config *cfg, int tp, int rank,
                                    wna16_moe_layer **out) {
    if (!out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe create: out is NULL");
    *out = NULL;
    WNA16_TRY(wna16_moe_check_config(d, cfg));
    if (tp < 1 || rank < 0 || rank >= tp)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe create: rank %d of tp %d", rank, tp);
    /* the divisibility checks are the sharding plan's (unquantized request:
     * the quantization-specific ones run when the weights are set/loaded) */
    bool whole = cfg->expert_count > 0; /* expert parallel: routed experts not split */
    wna16_shard_request req = {.layer = "moe experts (w2)",
                               .role = WNA16_TP_MOE_W2,
                               .out = cfg->hidden,
                               .in = cfg->intermediate,
                               .bits = 16,
                               .tp = whole ? 1 : tp,
                               .rank = whole ? 0 : rank};
    wna16_shard_slice sl;
    WNA16_TRY(wna16_shard_plan(d, &req, &sl));
    int64_t sip = 0;
    if (cfg->shared_intermediate) {
        req.layer = "moe shared expert (down)";
        req.role = WNA16_TP_ROW;
        req.in = cfg->shared_intermediate;
        req.tp = tp;
        req.rank = rank;
        WNA16_TRY(wna16_shard_plan(d, &req, &sl));
        sip = sl.col_count;
    }
    wna16_moe_layer *L = wna16_calloc(1, sizeof *L);
    if (!L) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe create: layer");
    L->cfg = *cfg;
    L->tp = tp;
    L->rank = rank;
    L->ip = whole ? cfg->intermediate : cfg->intermediate / tp;
    L->sip = sip;
    int64_t E = cfg->num_experts, H = cfg->hidden;
    /* huge pages: decode reads the whole router (1 MiB for Qwen3-30B-A3B) cold
     * every layer; from 4 KiB pages the routing step took 46 us per layer in
     * the model, from huge pages 26 */
    L->router = wna16_huge_alloc((size_t)(E * H) * sizeof(float));
    L->w13 = wna16_calloc((size_t)(E + 1), sizeof *L->w13);
    L->w2 = wna16_calloc((size_t)(E + 1), sizeof *L->w2);
    if (!L->router || !L->w13 || !L->w2) {
        wna16_moe_layer_free(L);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe create: %lld x %lld router",
                          (long long)E, (long long)H);
    }
    *out = L;
    return WNA16_OK;
}

void wna16_moe_layer_free(wna16_moe_layer *L) {
    if (!L) return;
    if (L->w13)
        for (int64_t e = 0; e < slots(L); e++) wna16_linear_free(L->w13[e]);
    if (L->w2)
        for (int64_t e = 0; e < slots(L); e++) wna16_linear_free(L->w2[e]);
    wna16_free(L->w13);
    wna16_free(L->w2);
    wna16_huge_free(L->arena, L->arena_bytes);
    wna16_huge_free(L->router, (size_t)(L->cfg.num_experts * L->cfg.hidden) * sizeof(float));
    wna16_huge_free(L->router16, (size_t)(L->cfg.num_experts * L->cfg.hidden) * sizeof(uint16_t));
    wna16_free(L->bias);
    wna16_free(L->shared_gate);
    wna16_free(L);
}

const wna16_moe_config *wna16_moe_layer_config(const wna16_moe_layer *L) { return &L->cfg; }
int64_t wna16_moe_layer_ip(const wna16_moe_layer *L) { return L->ip; }
int64_t wna16_moe_layer_shared_ip(const wna16_moe_layer *L) { return L->sip; }

size_t wna16_moe_layer_expert_bytes(const wna16_moe_layer *L, int64_t e) {
    if (!L || e < 0 || e >= slots(L)) return 0;
    size_t b = 0;
    if (L->w13[e]) b += wna16_linear_packed_bytes(L->w13[e]);
    if (L->w2[e]) b += wna16_linear_packed_bytes(L->w2[e]);
    return b;
}

size_t wna16_moe_layer_bytes(const wna16_moe_layer *L) {
    size_t b = 0;
    for (int64_t e = 0; L && e < slots(L); e++) b += wna16_moe_layer_expert_bytes(L, e);
    return b;
}

/* router16 when every router value is bf16-exact (it came from a bf16
 * checkpoint): decode reads 512 KiB per layer instead of 1 MiB, same bits.
 * Huge pages, like the fp32 router (read cold every layer). */
static wna16_status set_router16(wna16_diag *d, wna16_moe_layer *L) {
    size_t n = (size_t)(L->cfg.num_experts * L->cfg.hidden);
    bool exact = true;
    for (size_t i = 0; i < n && exact; i++) exact = wna16_bf16_exact(L->router[i]);
    if (!exact) {
        wna16_huge_free(L->router16, n * sizeof(uint16_t));
        L->router16 = NULL;
        return WNA16_OK;
    }
    if (!L->router16) L->router16 = wna16_huge_alloc(n * sizeof(uint16_t));
    if (!L->router16) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe router: bf16 copy");
    for (size_t i = 0; i < n; i++) L->router16[i] = wna16_f32_to_bf16(L->router[i]);
    return WNA16_OK;
}

wna16_status wna16_moe_layer_set_router(wna16_diag *d, wna16_moe_layer *L, const float *router,
                                        const float *bias) {
    if (!L || !router) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe set_router: NULL");
    int64_t E = L->cfg.num_experts;
    if (bias && !L->bias) {
        L->bias = wna16_malloc((size_t)E * sizeof(float));
        if (!L->bias) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe set_router: bias");
    }
    memcpy(L->router, router, (size_t)(E * L->cfg.hidden) * sizeof(float));
    WNA16_TRY(set_router16(d, L));
    if (bias)
        memcpy(L->bias, bias, (size_t)E * sizeof(float));
    else {
        wna16_free(L->bias);
        L->bias = NULL;
    }
    return WNA16_OK;
}

wna16_status wna16_moe_layer_set_packed(wna16_diag *d, wna16_moe_layer *L, int64_t e,
                                        wna16_packed_linear *w13, wna16_packed_linear *w2) {
    wna16_status st = WNA16_OK;
    if (!L || !w13 || !w2 || e < 0 || e >= slots(L) || (e == L->cfg.num_experts && !L->sip)) {
        st = wna16_fail(d, WNA16_ERR_EXPERT_ID, "moe set expert %lld: outside [0, %lld)%s",
                        (long long)e, L ? (long long)L->cfg.num_experts : 0LL,
                        L && L->sip ? " (or the shared expert)" : "");
        if (!L || !w13 || !w2)
            st = wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe set expert: NULL");
    } else {
        int64_t ip = e == L->cfg.num_experts ? L->sip : L->ip, H = L->cfg.hidden;
        if (wna16_linear_n(w13) != 2 * ip || wna16_linear_k(w13) != H || wna16_linear_n(w2) != H ||
            wna16_linear_k(w2) != ip)
            st = wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                            "moe expert %lld: w13 [%lld, %lld] and w2 [%lld, %lld]; this rank "
                            "needs [%lld, %lld] and [%lld, %lld]",
                            (long long)e, (long long)wna16_linear_n(w13),
                            (long long)wna16_linear_k(w13), (long long)wna16_linear_n(w2),
                            (long long)wna16_linear_k(w2), (long long)(2 * ip), (long long)H,
                            (long long)H, (long long)ip);
    }
    if (st != WNA16_OK) {
        wna16_linear_free(w13);
        wna16_linear_free(w2);
        return st;
    }
    wna16_linear_free(L->w13[e]);
    wna16_linear_free(L->w2[e]);
    L->w13[e] = w13;
    L->w2[e] = w2;
    return WNA16_OK;
}

/* gate [I_p, H] and up [I_p, H] into one canonical [2 I_p, H] weight. */
static wna16_status fuse_w13(wna16_diag *d, const wna16_qweight *g, const wna16_qweight *u,
                             wna16_qweight *out, void **owned) {
    *owned = NULL;
    if (g->n != u->n || g->k != u->k || g->bits != u->bits || g->group_size != u->group_size ||
        g->n_groups != u->n_groups || g->symmetric != u->symmetric ||
        (g->zeros == NULL) != (u->zeros == NULL))
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                          "gate [%lld, %lld] int%d g%lld %s and up [%lld, %lld] int%d g%lld %s "
                          "differ; the fused w13 needs one scheme and shape",
                          (long long)g->n, (long long)g->k, g->bits, (long long)g->group_size,
                          g->symmetric ? "sym" : "asym", (long long)u->n, (long long)u->k, u->bits,
                          (long long)u->group_size, u->symmetric ? "sym" : "asym");
    int64_t n = 2 * g->n, k = g->k, ng = g->n_groups, rw = (k * g->bits + 31) / 32;
    size_t pb = (size_t)(n * rw) * 4, sb = (size_t)(n * ng) * 4,
           zb = g->zeros ? (size_t)(n * ng) : 0;
    uint8_t *mem = wna16_calloc(1, pb + sb + zb);
    if (!mem) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "fused w13: %zu bytes", pb + sb + zb);
    uint32_t *packed = (uint32_t *)mem;
    float *scales = (float *)(mem + pb);
    uint8_t *zeros = g->zeros ? mem + pb + sb : NULL;
    for (int64_t o = 0; o < n; o++) {
        const wna16_qweight *s = o < g->n ? g : u;
        int64_t r = o < g->n ? o : o - g->n;
        uint32_t *dst = packed + o * rw;
        if (s->col_offset == 0) {
            memcpy(dst, s->packed + r * s->row_words, (size_t)rw * 4);
            if ((k * s->bits) % 32) /* clear bits past k */
                dst[rw - 1] &= (1u << ((k * s->bits) % 32)) - 1u;
        } else {
            for (int64_t c = 0; c < k; c++) {
                uint64_t bit = (uint64_t)c * (uint64_t)s->bits;
                uint64_t v = wna16_qweight_u(s, r, c);
                dst[bit >> 5] |= (uint32_t)(v << (bit & 31));
                if ((bit & 31) + (uint64_t)s->bits > 32)
                    dst[(bit >> 5) + 1] |= (uint32_t)(v >> (32 - (bit & 31)));
            }
        }
        for (int64_t gi = 0; gi < ng; gi++) {
            scales[o * ng + gi] = s->scales[r * s->scale_stride + gi];
            if (zeros) zeros[o * ng + gi] = s->zeros[r * s->zero_stride + gi];
        }
    }
    *out = (wna16_qweight){.n = n,
                           .k = k,
                           .bits = g->bits,
                           .group_size = g->group_size,
                           .n_groups = ng,
                           .symmetric = g->symmetric,
                           .packed = packed,
                           .row_words = rw,
                           .col_offset = 0,
                           .scales = scales,
                           .scale_stride = ng,
                           .zeros = zeros,
                           .zero_stride = ng,
                           .scale_dtype = g->scale_dtype};
    *owned = mem;
    return WNA16_OK;
}

static wna16_status set_mlp(wna16_diag *d, wna16_moe_layer *L, int64_t e, const wna16_qweight *gate,
                            const wna16_qweight *up, const wna16_qweight *down) {
    if (!L || !gate || !up || !down)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe set expert: NULL");
    wna16_qweight w13;
    void *owned;
    WNA16_TRY(fuse_w13(d, gate, up, &w13, &owned));
    wna16_packed_linear *p13 = NULL, *p2 = NULL;
    wna16_status st = wna16_linear_pack(d, &w13, &p13);
    wna16_free(owned);
    if (st == WNA16_OK) st = wna16_linear_pack(d, down, &p2);
    if (st != WNA16_OK) {
        wna16_linear_free(p13);
        return st;
    }
    return wna16_moe_layer_set_packed(d, L, e, p13, p2);
}

wna16_status wna16_moe_layer_set_expert(wna16_diag *d, wna16_moe_layer *L, int64_t e,
                                        const wna16_qweight *gate, const wna16_qweight *up,
                                        const wna16_qweight *down) {
    if (L && (e < 0 || e >= L->cfg.num_experts))
        return wna16_fail(d, WNA16_ERR_EXPERT_ID, "moe set expert %lld: outside [0, %lld)",
                          (long long)e, (long long)L->cfg.num_experts);
    if (L && !wna16_moe_owns(L, e))
        return wna16_fail(d, WNA16_ERR_EXPERT_ID,
                          "moe set expert %lld: this rank owns experts [%lld, %lld) only",
                          (long long)e, (long long)L->cfg.expert_begin,
                          (long long)(L->cfg.expert_begin + L->cfg.expert_count));
    return set_mlp(d, L, e, gate, up, down);
}

wna16_status wna16_moe_layer_set_shared(wna16_diag *d, wna16_moe_layer *L,
                                        const wna16_qweight *gate, const wna16_qweight *up,
                                        const wna16_qweight *down, const float *gate_weight) {
    if (!L) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe set shared: NULL layer");
    if (!L->sip)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "moe set shared: the config has no shared expert");
    if (L->cfg.shared_expert_gate != (gate_weight != NULL))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "moe set shared: the config %s a shared_expert_gate but %s given",
                          L->cfg.shared_expert_gate ? "has" : "has no",
                          gate_weight ? "one was" : "none was");
    if (gate_weight) {
        float *g = wna16_malloc((size_t)L->cfg.hidden * sizeof(float));
        if (!g) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe set shared: gate");
        memcpy(g, gate_weight, (size_t)L->cfg.hidden * sizeof(float));
        wna16_free(L->shared_gate);
        L->shared_gate = g;
    }
    return set_mlp(d, L, L->cfg.num_experts, gate, up, down);
}

void wna16_moe_layer_compact(wna16_moe_layer *L) {
    if (!L) return;
    int64_t n = slots(L);
    wna16_packed_linear **all = wna16_malloc((size_t)(2 * n) * sizeof *all);
    if (!all) return;
    for (int64_t e = 0; e < n; e++) {
        all[2 * e] = L->w13[e];
        all[2 * e + 1] = L->w2[e];
    }
    size_t bytes;
    void *arena = wna16_linear_gather(all, (size_t)(2 * n), &bytes);
    wna16_free(all);
    if (!arena) return;
    /* weights gathered by an earlier call now live in the new arena */
    wna16_huge_free(L->arena, L->arena_bytes);
    L->arena = arena;
    L->arena_bytes = bytes;
}

bool wna16_moe_layer_collapse(const wna16_moe_layer *L) {
    size_t n = (size_t)(L->cfg.num_experts * L->cfg.hidden);
    bool ok = wna16_huge_collapse(L->arena, L->arena_bytes);
    ok &= wna16_huge_collapse(L->router, n * sizeof(float));
    return ok & wna16_huge_collapse(L->router16, n * sizeof(uint16_t));
}

static float *dup_floats(const float *p, int64_t n) {
    if (!p) return NULL;
    float *q = wna16_malloc((size_t)n * sizeof(float));
    if (q) memcpy(q, p, (size_t)n * sizeof(float));
    return q;
}

wna16_status wna16_moe_layer_clone(wna16_diag *d, const wna16_moe_layer *L, wna16_moe_layer **out) {
    if (!L || !out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe clone: NULL");
    WNA16_TRY(wna16_moe_layer_create(d, &L->cfg, L->tp, L->rank, out));
    wna16_moe_layer *c = *out;
    memcpy(c->router, L->router, (size_t)(L->cfg.num_experts * L->cfg.hidden) * sizeof(float));
    wna16_status rs = set_router16(d, c); /* the same router: the same choice */
    c->bias = dup_floats(L->bias, L->cfg.num_experts);
    c->shared_gate = dup_floats(L->shared_gate, L->cfg.hidden);
    wna16_status st = rs != WNA16_OK ? rs
                      : (L->bias && !c->bias) || (L->shared_gate && !c->shared_gate)
                          ? wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe clone")
                          : WNA16_OK;
    for (int64_t e = 0; e < slots(L) && st == WNA16_OK; e++) {
        if (L->w13[e]) st = wna16_linear_clone(d, L->w13[e], &c->w13[e]);
        if (L->w2[e] && st == WNA16_OK) st = wna16_linear_clone(d, L->w2[e], &c->w2[e]);
    }
    if (st != WNA16_OK) {
        wna16_moe_layer_free(c);
        *out = NULL;
        return st;
    }
    wna16_moe_layer_compact(c);
    return st;
}

/* ------------------------------------------------------------ workspace */

struct wna16_moe_workspace {
    void *mem;
    size_t cap;
    size_t routed_bytes; /* the routed experts' weights the last forward read */
};

size_t wna16_moe_workspace_routed_bytes(const wna16_moe_workspace *ws) {
    return ws ? ws->routed_bytes : 0;
}

void wna16_moe_workspace_free(wna16_moe_workspace *ws) {
    if (!ws) return;
    wna16_free(ws->mem);
    wna16_free(ws);
}

static wna16_status ws_reserve(wna16_diag *d, wna16_moe_workspace **wsp, size_t bytes,
                               uint8_t **base) {
    wna16_moe_workspace *ws = *wsp;
    if (!ws) {
        ws = wna16_calloc(1, sizeof *ws);
        if (!ws) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe workspace");
        *wsp = ws;
    }
    if (ws->cap < bytes) {
        wna16_free(ws->mem);
        ws->cap = 0;
        ws->mem = wna16_malloc(bytes + 64);
        if (!ws->mem)
            return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe workspace: %zu bytes", bytes);
        ws->cap = bytes;
    }
    *base = (uint8_t *)(((uintptr_t)ws->mem + 63) & ~(uintptr_t)63);
    return WNA16_OK;
}

/* A bump layout over one arena: first pass sizes, second pass assigns. */
typedef struct carve {
    uint8_t *base;
    size_t off;
} carve;

static void *take(carve *c, size_t bytes) {
    void *p = c->base && bytes ? c->base + c->off : NULL;
    c->off += (bytes + 63) & ~(size_t)63;
    return p;
}

/* ------------------------------------------------------------ forward */

typedef struct item {
    int32_t slot;
    int32_t phase; /* 0: w13, 1: w2 */
    int64_t n0, n1;
    double cost;
    int64_t order; /* w2: queue position of the expert's last w13 item */
} item;

static int cmp_item(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
    if (x->phase == 1 && x->order != y->order) return x->order < y->order ? -1 : 1;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
    return (x->n0 > y->n0) - (x->n0 < y->n0);
}

static int64_t rows_per_call(int64_t m) {
    return MOE_ROWS_PER_CALL > 0 && m > MOE_ROWS_PER_CALL ? MOE_ROWS_PER_CALL : m;
}

/* Part q of np of [0, n) on boundaries of two 16-channel blocks (the
 * kernels' 32-wide unit), as even as that allows. */
static void split_pairs(int64_t n, int64_t q, int64_t np, int64_t *n0, int64_t *n1) {
    int64_t units = (n + 2 * WNA16_LINEAR_NR - 1) / (2 * WNA16_LINEAR_NR);
    int64_t u0 = units * q / np, u1 = units * (q + 1) / np;
    *n0 = u0 * 2 * WNA16_LINEAR_NR;
    *n1 = u1 * 2 * WNA16_LINEAR_NR < n ? u1 * 2 * WNA16_LINEAR_NR : n;
    if (*n1 < *n0) *n1 = *n0;
}

typedef struct fwd {
    const wna16_moe_layer *L;
    int64_t T, K, E, X, H, P, Pr;
    const uint16_t *x;
    int64_t ldx;
    const float *wts, *sg;
    float *y;
    /* arena */
    int64_t *cnt, *off, *pos;
    int32_t *pair_tok;
    float *h13, *out2;
    int64_t *h13_off; /* per slot, in elements */
    item *items;
    int64_t n_items, n_w13;
    int64_t *need13; /* per slot: its w13 items */
    uint8_t *scratch;
    size_t scratch_bytes, kernel_bytes; /* per thread: all, and the kernels' part */
    size_t xbuf_off, abuf_off;          /* private gathered rows and activations */
    /* scheduler state (atomics) */
    int64_t next, done_w2, next_comb;
    int64_t *done13;
} fwd;

static int64_t slot_ip(const fwd *f, int64_t s) { return s == f->E ? f->L->sip : f->L->ip; }

/* Spins until *v reaches want (acquire). The waits are for another thread
 * finishing an item, normally microseconds: yielding early would hand the
 * core to another process for a whole scheduler tick, so it spins ~1 ms
 * before it starts yielding (for when threads outnumber cores). */
static void wait_for(const int64_t *v, int64_t want) {
    for (uint32_t spins = 0; __atomic_load_n(v, __ATOMIC_ACQUIRE) < want; spins++) {
        if (spins > (1u << 15)) sched_yield();
#if defined(__x86_64__) || defined(__i386__)
        else
            __builtin_ia32_pause();
#endif
    }
}

/* One work item on this thread. w13: gather the expert's rows, one GEMM
 * over columns [n0, n1) of gate|up. w2 (after all of the expert's w13
 * items): silu(gate)*up of its rows, one GEMM over columns [n0, n1). */
static wna16_status run_item(wna16_diag *d, const fwd *f, const item *it, uint8_t *scratch) {
    int64_t s = it->slot, m = f->cnt[s], r0 = f->off[s], ip = slot_ip(f, s), rpc = rows_per_call(m);
    const float *h13 = f->h13 + f->h13_off[s];
    wna16_status st = WNA16_OK;
    if (it->phase == 0) {
        uint16_t *xb = (uint16_t *)(scratch + f->xbuf_off);
        for (int64_t r = 0; r < m; r++)
            memcpy(xb + r * f->H, f->x + (int64_t)f->pair_tok[r0 + r] * f->ldx, (size_t)f->H * 2);
        for (int64_t r = 0; r < m && st == WNA16_OK; r += rpc) {
            int64_t rows = m - r < rpc ? m - r : rpc;
            st = wna16_linear_gemm_range(d, f->L->w13[s], it->n0, it->n1, rows, xb + r * f->H,
                                         WNA16_DTYPE_BF16, f->H, (float *)h13 + r * 2 * ip,
                                         WNA16_DTYPE_F32, 2 * ip, NULL, WNA16_DTYPE_F32, scratch,
                                         f->kernel_bytes);
        }
        return st;
    }
    uint16_t *ab = (uint16_t *)(scratch + f->abuf_off);
    for (int64_t r = 0; r < m; r++)
        wna16_moe_silu_mul_bf16(h13 + r * 2 * ip, h13 + r * 2 * ip + ip, ip, ab + r * ip);
    for (int64_t r = 0; r < m && st == WNA16_OK; r += rpc) {
        int64_t rows = m - r < rpc ? m - r : rpc;
        st = wna16_linear_gemm_range(d, f->L->w2[s], it->n0, it->n1, rows, ab + r * ip,
                                     WNA16_DTYPE_BF16, ip, f->out2 + (r0 + r) * f->H,
                                     WNA16_DTYPE_F32, f->H, NULL, WNA16_DTYPE_F32, scratch,
                                     f->kernel_bytes);
    }
    return st;
}

/* y[t] = the routed experts' weighted outputs in top-k order (pairs of
 * experts another rank owns, pos -1, left out), then the shared expert;
 * zeros when none of them is here. */
static void combine_token(const fwd *f, int64_t t) {
    float *yt = f->y + t * f->H;
    bool first = true;
    for (int64_t j = 0; j < f->K; j++) {
        int64_t p = f->pos[t * f->K + j];
        if (p < 0) continue;
        wna16_moe_axpy(yt, f->wts[t * f->K + j], f->out2 + p * f->H, f->H, first);
        first = false;
    }
    if (f->L->sip) {
        wna16_moe_axpy(yt, f->sg ? f->sg[t] : 1.0f, f->out2 + (f->Pr + t) * f->H, f->H, first);
        first = false;
    }
    if (first) memset(yt, 0, (size_t)f->H * sizeof(float));
}

/* No barriers between phases: threads take items from one queue (w13 items
 * first, then w2 items in the order their experts' w13 items finish); a w2
 * item waits only for its own expert, the combine only for the last w2
 * item. A thread that is descheduled while holding nothing delays no one. */
typedef struct queue_job {
    fwd *f;
    int64_t n_w2, comb_chunk;
    wna16_status *status;
    wna16_diag *d;
    pthread_mutex_t lock; /* the first failure's detail */
} queue_job;

static void queue_thread(void *arg, int tid, int nt) {
    (void)nt;
    queue_job *q = arg;
    fwd *f = q->f;
    uint8_t *scratch = f->scratch + (size_t)tid * f->scratch_bytes;
    wna16_diag local = {0};
    wna16_status mine = WNA16_OK;
    for (;;) {
        int64_t i = __atomic_fetch_add(&f->next, 1, __ATOMIC_RELAXED);
        if (i >= f->n_items) break;
        const item *it = &f->items[i];
        if (it->phase == 1) wait_for(&f->done13[it->slot], f->need13[it->slot]);
        if (mine == WNA16_OK) mine = run_item(&local, f, it, scratch);
        __atomic_fetch_add(it->phase == 0 ? &f->done13[it->slot] : &f->done_w2, 1,
                           __ATOMIC_RELEASE);
    }
    wait_for(&f->done_w2, q->n_w2);
    for (;;) {
        int64_t t0 = __atomic_fetch_add(&f->next_comb, q->comb_chunk, __ATOMIC_RELAXED);
        if (t0 >= f->T) break;
        int64_t t1 = t0 + q->comb_chunk < f->T ? t0 + q->comb_chunk : f->T;
        for (int64_t t = t0; t < t1; t++) combine_token(f, t);
    }
    if (mine != WNA16_OK) {
        pthread_mutex_lock(&q->lock);
        if (*q->status == WNA16_OK) {
            *q->status = mine;
            if (q->d) memcpy(q->d->detail, local.detail, sizeof q->d->detail); /* not its hooks */
        }
        pthread_mutex_unlock(&q->lock);
    }
}

static void run_queue(fwd *f, int nt, wna16_status *status, wna16_diag *d) {
    queue_job q = {f, f->n_items - f->n_w13, f->T / (4 * (int64_t)nt) + 1, status, d,
                   PTHREAD_MUTEX_INITIALIZER};
    wna16_parallel(nt, queue_thread, &q);
}

static wna16_status check_ids(wna16_diag *d, const wna16_moe_layer *L, int64_t T,
                              const int32_t *ids) {
    int64_t K = L->cfg.top_k, E = L->cfg.num_experts;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            int32_t e = ids[t * K + j];
            if (e < 0 || e >= E)
                return wna16_fail(d, WNA16_ERR_EXPERT_ID,
                                  "moe: token %lld slot %lld routes to expert %d outside [0, %lld)",
                                  (long long)t, (long long)j, (int)e, (long long)E);
            for (int64_t i = 0; i < j; i++)
                if (ids[t * K + i] == e)
                    return wna16_fail(d, WNA16_ERR_EXPERT_ID,
                                      "moe: token %lld routes to expert %d twice (slots %lld and "
                                      "%lld); top-k ids must be distinct",
                                      (long long)t, (int)e, (long long)i, (long long)j);
            if (wna16_moe_owns(L, e) && (!L->w13[e] || !L->w2[e]))
                return wna16_fail(d, WNA16_ERR_TENSOR_MISSING,
                                  "moe: expert %d has no weights on this rank", (int)e);
        }
    return WNA16_OK;
}

static size_t al64(size_t v) { return (v + 63) & ~(size_t)63; }

/* The expert part, routing given; sg: shared gate per token (or NULL). */
static wna16_status forward_core(wna16_diag *d, const wna16_moe_layer *L, wna16_moe_workspace **wsp,
                                 int64_t T, const uint16_t *x, int64_t ldx, const int32_t *ids,
                                 const float *wts, const float *sg, float *y, int nt) {
    fwd f = {.L = L,
             .T = T,
             .K = L->cfg.top_k,
             .E = L->cfg.num_experts,
             .H = L->cfg.hidden,
             .x = x,
             .ldx = ldx,
             .wts = wts,
             .sg = sg,
             .y = y};
    f.X = f.E + (L->sip ? 1 : 0);
    f.Pr = T * f.K;
    f.P = f.Pr + (L->sip ? T : 0);
    if (L->sip && (!L->w13[f.E] || !L->w2[f.E]))
        return wna16_fail(d, WNA16_ERR_TENSOR_MISSING, "moe: the shared expert has no weights");
    /* counts first: they size the scratch */
    int64_t *cnt = wna16_calloc((size_t)(f.E + 1), sizeof *cnt);
    if (!cnt) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe: counts");
    for (int64_t p = 0; p < f.Pr; p++)
        if (wna16_moe_owns(L, ids[p])) cnt[ids[p]]++;
    if (L->sip) cnt[f.E] = T;
    int64_t active = 0, m_max = 0, ip_max = L->ip > L->sip ? L->ip : L->sip;
    size_t kbytes = 0, routed_bytes = 0;
    for (int64_t s = 0; s < f.X; s++) {
        if (!cnt[s]) continue;
        active++;
        if (s < f.E) routed_bytes += wna16_moe_layer_expert_bytes(L, s);
        if (cnt[s] > m_max) m_max = cnt[s];
        int64_t rows = rows_per_call(cnt[s]);
        size_t a = wna16_linear_scratch_bytes(L->w13[s], rows);
        size_t b = wna16_linear_scratch_bytes(L->w2[s], rows);
        if (a > kbytes) kbytes = a;
        if (b > kbytes) kbytes = b;
    }
    f.kernel_bytes = al64(kbytes);
    f.xbuf_off = f.kernel_bytes;
    f.abuf_off = f.xbuf_off + al64((size_t)(m_max * f.H) * 2);
    f.scratch_bytes = f.abuf_off + al64((size_t)(m_max * ip_max) * 2);
    /* N-range parts per expert: at least two items per thread and matrix
     * (decode with 8 active experts and 2 threads: whole matrices, 16 items;
     * fewer active experts than that: each matrix split) */
    int64_t want = active ? (2 * (int64_t)nt + active - 1) / active : 1;
    if (want < 1) want = 1;
    int64_t max_items = 2 * active * want;

    int64_t sip = L->sip, ip = L->ip;
    carve c = {0};
    for (int pass = 0; pass < 2; pass++) {
        c.off = 0;
        f.cnt = cnt;
        f.off = take(&c, (size_t)(f.E + 2) * sizeof(int64_t));
        f.pos = take(&c, (size_t)f.Pr * sizeof(int64_t));
        f.pair_tok = take(&c, (size_t)f.P * sizeof(int32_t));
        f.h13_off = take(&c, (size_t)(f.E + 1) * sizeof(int64_t));
        f.need13 = take(&c, (size_t)(f.E + 1) * sizeof(int64_t));
        f.done13 = take(&c, (size_t)(f.E + 1) * sizeof(int64_t));
        f.items = take(&c, (size_t)max_items * sizeof(item));
        f.h13 = take(&c, (size_t)(f.Pr * 2 * ip + T * 2 * sip) * 4);
        f.out2 = take(&c, (size_t)(f.P * f.H) * 4);
        f.scratch = take(&c, f.scratch_bytes * (size_t)nt);
        if (pass == 0) {
            wna16_status st = ws_reserve(d, wsp, c.off, &c.base);
            if (st != WNA16_OK) {
                wna16_free(cnt);
                return st;
            }
            (*wsp)->routed_bytes = routed_bytes;
        }
    }
    /* counting sort of the pairs by expert, tokens ascending within one */
    f.off[0] = 0;
    for (int64_t s = 0; s < f.E; s++) f.off[s + 1] = f.off[s] + cnt[s];
    f.off[f.E] = f.Pr; /* the shared expert's rows follow all T * K pair slots */
    f.off[f.E + 1] = f.Pr + cnt[f.E];
    int64_t *cur = f.done13; /* borrowed as the fill cursor, zeroed below */
    for (int64_t s = 0; s <= f.E; s++) cur[s] = f.off[s];
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < f.K; j++) {
            int32_t e = ids[t * f.K + j];
            int64_t p = wna16_moe_owns(L, e) ? cur[e]++ : -1;
            if (p >= 0) f.pair_tok[p] = (int32_t)t;
            f.pos[t * f.K + j] = p;
        }
    for (int64_t t = 0; t < T && L->sip; t++) f.pair_tok[f.Pr + t] = (int32_t)t;
    for (int64_t s = 0; s <= f.E; s++) {
        f.h13_off[s] = s < f.E ? f.off[s] * 2 * ip : f.Pr * 2 * ip;
        f.need13[s] = f.done13[s] = 0;
    }
    /* work items: w13 largest first, then w2 in the order their experts' w13 items end */
    int64_t n = 0;
    for (int ph = 0; ph < 2; ph++)
        for (int64_t s = 0; s < f.X; s++) {
            if (!cnt[s]) continue;
            const wna16_packed_linear *pl = ph == 0 ? L->w13[s] : L->w2[s];
            int64_t units = (wna16_linear_n(pl) + 2 * WNA16_LINEAR_NR - 1) / (2 * WNA16_LINEAR_NR);
            int64_t np = want > units / 4 ? units / 4 : want; /* >= 4 units (128 channels) each */
            if (np < 1) np = 1;
            for (int64_t q = 0; q < np; q++) {
                item *it = &f.items[n];
                split_pairs(wna16_linear_n(pl), q, np, &it->n0, &it->n1);
                if (it->n1 <= it->n0) continue;
                it->slot = (int32_t)s;
                it->phase = ph;
                it->cost =
                    (double)(it->n1 - it->n0) * (double)wna16_linear_k(pl) * (double)(cnt[s] + 4);
                it->order = 0;
                if (ph == 0) f.need13[s]++;
                n++;
            }
            if (ph == 0) f.n_w13 = n;
        }
    f.n_items = n;
    if (f.n_w13 > 0) /* none: a rank that owns none of the routed experts */
        qsort(f.items, (size_t)f.n_w13, sizeof(item), cmp_item);
    int64_t *last = f.done13; /* borrowed again: position of each expert's last w13 item */
    for (int64_t i = 0; i < f.n_w13; i++) last[f.items[i].slot] = i;
    for (int64_t i = f.n_w13; i < n; i++) f.items[i].order = last[f.items[i].slot];
    if (n > f.n_w13) qsort(f.items + f.n_w13, (size_t)(n - f.n_w13), sizeof(item), cmp_item);
    for (int64_t s = 0; s <= f.E; s++) f.done13[s] = 0;
    f.next = f.done_w2 = f.next_comb = 0;
    wna16_status status = WNA16_OK;
    run_queue(&f, nt, &status, d);
    wna16_free(cnt);
    return status;
}

static wna16_status check_forward(wna16_diag *d, const wna16_moe_layer *L, int64_t T,
                                  const uint16_t *x, int64_t ldx, const float *y) {
    if (!L) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe forward: layer is NULL");
    if (T < 0 || T > INT32_MAX)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe forward: %lld tokens", (long long)T);
    if (T && (!x || !y || ldx < L->cfg.hidden))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "moe forward: x or y NULL, or ldx %lld < hidden %lld", (long long)ldx,
                          (long long)L->cfg.hidden);
    return WNA16_OK;
}

static int threads_of(int n_threads) { return n_threads > 0 ? n_threads : wna16_threads_default(); }

/* Router logits, routing and the shared gate for tokens [0, T): arrays in a
 * separate allocation (they live across forward_core). */
typedef struct routing {
    float *logits, *wts, *sg;
    int32_t *ids;
    void *mem;
} routing;

/* Router logits for tokens [t0, t0 + n) (n = 1 or 2), x widened into xf. */
static void logits_rows(const wna16_moe_layer *L, const uint16_t *x, int64_t ldx, int64_t t0, int n,
                        float *xf, float *logits) {
    int64_t E = L->cfg.num_experts, H = L->cfg.hidden;
    for (int i = 0; i < n; i++)
        for (int64_t h = 0; h < H; h++) xf[i * H + h] = wna16_bf16_to_f32(x[(t0 + i) * ldx + h]);
    if (n == 2)
        wna16_moe_dot_rows2(xf, xf + H, L->router, 0, E, H, logits + t0 * E, logits + (t0 + 1) * E);
    else
        wna16_moe_dot_rows(xf, L->router, 0, E, H, logits + t0 * E);
}

static bool parallel_router(const wna16_moe_layer *L, int nt, int64_t T) {
    return nt > 1 && T > 1 && T * L->cfg.num_experts * L->cfg.hidden >= (1 << 22);
}

/* The shared expert's sigmoid gate for one token (fp32 row xf). */
static float shared_gate(const wna16_moe_layer *L, const float *xf) {
    float g = wna16_moe_dot_f32(xf, L->shared_gate, L->cfg.hidden);
    return 1.0f / (1.0f + expf(-g));
}

void wna16_moe_layer_router_part(const wna16_moe_layer *L, int part, int parts, const void **p,
                                 size_t *bytes) {
    *p = NULL;
    *bytes = 0;
    if (!L || parts < 1 || part < 0 || part >= parts || (!L->router16 && !L->router)) return;
    size_t n = (size_t)(L->cfg.num_experts * L->cfg.hidden);
    size_t total = L->router16 ? n * sizeof(uint16_t) : n * sizeof(float);
    const uint8_t *base = L->router16 ? (const void *)L->router16 : (const void *)L->router;
    size_t lines = (total + 63) / 64;
    size_t l0 = lines * (size_t)part / (size_t)parts,
           l1 = lines * (size_t)(part + 1) / (size_t)parts;
    size_t b0 = l0 * 64, b1 = l1 * 64 < total ? l1 * 64 : total;
    *p = base + b0;
    *bytes = b1 > b0 ? b1 - b0 : 0;
}

void wna16_moe_layer_prefetch_router(const wna16_moe_layer *L, int part, int parts) {
    const void *p;
    size_t bytes;
    wna16_moe_layer_router_part(L, part, parts, &p, &bytes);
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, 2);
}

/* One token (decode): the router is a 1 MiB fp32 read per layer (512 KiB
 * from router16), so the threads split the experts (in fours, so every logit has the bits of the
 * single-thread dot), then one thread picks the top-k. */
typedef struct route_job {
    const wna16_moe_layer *L;
    const uint16_t *x;
    int64_t ldx, T;
    bool route;
    uint8_t *thread_base;
    size_t per_thread, rs;
    routing *r;
} route_job;

static void decode_routing_thread(void *arg, int t, int n) {
    const route_job *j = arg;
    const wna16_moe_layer *L = j->L;
    routing *r = j->r;
    int64_t E = L->cfg.num_experts, H = L->cfg.hidden, quads = (E + 3) / 4;
    uint8_t *mine = j->thread_base + j->per_thread * (size_t)t;
    float *xf = (float *)(mine + j->rs);
    int64_t e0 = quads * t / n * 4, e1 = quads * (t + 1) / n * 4;
    if (e1 > E) e1 = E;
    for (int64_t h = 0; h < H; h++) xf[h] = wna16_bf16_to_f32(j->x[h]);
    if (e0 < e1) {
        if (L->router16)
            wna16_moe_dot_rows_bf16(xf, L->router16, e0, e1, H, r->logits + e0);
        else
            wna16_moe_dot_rows(xf, L->router, e0, e1, H, r->logits + e0);
    }
    wna16_barrier();
    if (t == 0) {
        wna16_moe_route_rows(&L->cfg, 0, 1, r->logits, L->bias, r->ids, r->wts, mine);
        if (L->shared_gate) r->sg[0] = shared_gate(L, xf);
    }
}

static void decode_routing(const wna16_moe_layer *L, const uint16_t *x, int nt,
                           uint8_t *thread_base, size_t per_thread, size_t rs, routing *r) {
    route_job j = {.L = L, .x = x, .thread_base = thread_base, .per_thread = per_thread, .rs = rs,
                   .r = r};
    wna16_parallel(nt, decode_routing_thread, &j);
}

/* A few tokens touch a few experts: their descriptors (cold, one layer of
 * 128 among 48) are read while the work is planned, one cache miss after
 * another (~2 us per decode layer); asked for together right after the
 * routing (and the check of its ids), they arrive in the time of one. */
static void prefetch_experts(const wna16_moe_layer *L, const int32_t *ids, int64_t T) {
    if (T > 4) return;
    for (int64_t p = 0; p < T * L->cfg.top_k; p++) {
        const wna16_packed_linear *w13 = L->w13[ids[p]], *w2 = L->w2[ids[p]];
        if (w13) wna16_linear_prefetch(w13);
        if (w2) wna16_linear_prefetch(w2);
    }
}

/* Token pairs [q0, q1): their router logits, routing and shared gate, in
 * the thread's own scratch. */
static void route_pairs(void *arg, int64_t q0, int64_t q1, int tid) {
    const route_job *j = arg;
    const wna16_moe_layer *L = j->L;
    routing *r = j->r;
    int64_t H = L->cfg.hidden, T = j->T;
    uint8_t *mine = j->thread_base + j->per_thread * (size_t)tid;
    float *xf = (float *)(mine + j->rs);
    for (int64_t q = q0; q < q1; q++) {
        int64_t t0 = 2 * q;
        int n = t0 + 1 < T ? 2 : 1;
        if (j->route) {
            logits_rows(L, j->x, j->ldx, t0, n, xf, r->logits);
            wna16_moe_route_rows(&L->cfg, t0, t0 + n, r->logits, L->bias, r->ids, r->wts, mine);
        }
        for (int i = 0; i < n && L->shared_gate; i++) {
            if (!j->route)
                for (int64_t h = 0; h < H; h++)
                    xf[i * H + h] = wna16_bf16_to_f32(j->x[(t0 + i) * j->ldx + h]);
            r->sg[t0 + i] = shared_gate(L, xf + i * H);
        }
    }
}

static wna16_status compute_routing(wna16_diag *d, const wna16_moe_layer *L, int64_t T,
                                    const uint16_t *x, int64_t ldx, bool route, int nt,
                                    routing *r) {
    int64_t E = L->cfg.num_experts, K = L->cfg.top_k, H = L->cfg.hidden;
    size_t rs = (wna16_moe_route_scratch(&L->cfg) + 63) & ~(size_t)63;
    size_t per_thread = rs + (size_t)H * 8;
    carve c = {0};
    for (int pass = 0; pass < 2; pass++) {
        c.off = 0;
        r->logits = take(&c, route ? (size_t)(T * E) * 4 : 0);
        r->wts = take(&c, route ? (size_t)(T * K) * 4 : 0);
        r->ids = take(&c, route ? (size_t)(T * K) * 4 : 0);
        r->sg = take(&c, L->shared_gate ? (size_t)T * 4 : 0);
        take(&c, per_thread * (size_t)nt);
        if (pass == 0) {
            r->mem = wna16_malloc(c.off + 64);
            if (!r->mem)
                return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe routing: %zu bytes", c.off);
            c.base = (uint8_t *)(((uintptr_t)r->mem + 63) & ~(uintptr_t)63);
        }
    }
    uint8_t *thread_base = c.base + c.off - per_thread * (size_t)nt;
    if (!route && !L->shared_gate) return WNA16_OK;
    if (T == 1 && nt > 1 && route) {
        decode_routing(L, x, nt, thread_base, per_thread, rs, r);
        return WNA16_OK;
    }
    route_job j = {L, x, ldx, T, route, thread_base, per_thread, rs, r};
    wna16_parallel_for(parallel_router(L, nt, T) ? nt : 1, (T + 1) / 2, route_pairs, &j);
    return WNA16_OK;
}

typedef struct logits_job {
    const wna16_moe_layer *L;
    const uint16_t *x;
    int64_t ldx, T;
    float *xf, *logits;
} logits_job;

static void logits_pairs(void *arg, int64_t q0, int64_t q1, int tid) {
    const logits_job *j = arg;
    float *xf = j->xf + 2 * j->L->cfg.hidden * tid;
    for (int64_t q = q0; q < q1; q++)
        logits_rows(j->L, j->x, j->ldx, 2 * q, 2 * q + 1 < j->T ? 2 : 1, xf, j->logits);
}

wna16_status wna16_moe_layer_logits(wna16_diag *d, const wna16_moe_layer *L, int64_t T,
                                    const uint16_t *x, int64_t ldx, float *logits, int n_threads) {
    WNA16_TRY(check_forward(d, L, T, x, ldx, logits));
    int nt = threads_of(n_threads);
    int64_t H = L->cfg.hidden, pairs = (T + 1) / 2;
    float *xf = wna16_malloc((size_t)(2 * H * nt) * 4);
    if (!xf) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe logits");
    logits_job j = {L, x, ldx, T, xf, logits};
    wna16_parallel_for(parallel_router(L, nt, T) ? nt : 1, pairs, logits_pairs, &j);
    wna16_free(xf);
    return WNA16_OK;
}

wna16_status wna16_moe_layer_forward_ws(wna16_diag *d, const wna16_moe_layer *L,
                                        wna16_moe_workspace **ws, int64_t T, const uint16_t *x,
                                        int64_t ldx, float *y, int n_threads) {
    WNA16_TRY(check_forward(d, L, T, x, ldx, y));
    if (!ws) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe forward: ws is NULL");
    if (!T) return WNA16_OK;
    int nt = threads_of(n_threads);
    routing r;
    WNA16_TRY(compute_routing(d, L, T, x, ldx, true, nt, &r));
    wna16_status st = check_ids(d, L, T, r.ids);
    if (st == WNA16_OK) prefetch_experts(L, r.ids, T); /* ids in range: checked */
    if (st == WNA16_OK) st = forward_core(d, L, ws, T, x, ldx, r.ids, r.wts, r.sg, y, nt);
    wna16_free(r.mem);
    return st;
}

wna16_status wna16_moe_layer_forward(wna16_diag *d, const wna16_moe_layer *L, int64_t T,
                                     const uint16_t *x, int64_t ldx, float *y, int n_threads) {
    wna16_moe_workspace *ws = NULL;
    wna16_status st = wna16_moe_layer_forward_ws(d, L, &ws, T, x, ldx, y, n_threads);
    wna16_moe_workspace_free(ws);
    return st;
}

wna16_status wna16_moe_layer_forward_routed(wna16_diag *d, const wna16_moe_layer *L,
                                            wna16_moe_workspace **ws, int64_t T, const uint16_t *x,
                                            int64_t ldx, const int32_t *ids, const float *wts,
                                            float *y, int n_threads) {
    WNA16_TRY(check_forward(d, L, T, x, ldx, y));
    if (!T) return WNA16_OK;
    if (!ids || !wts)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe forward: ids or weights NULL");
    WNA16_TRY(check_ids(d, L, T, ids));
    int nt = threads_of(n_threads);
    wna16_moe_workspace *tmp = NULL;
    routing r;
    WNA16_TRY(compute_routing(d, L, T, x, ldx, false, nt, &r));
    wna16_status st = forward_core(d, L, ws ? ws : &tmp, T, x, ldx, ids, wts, r.sg, y, nt);
    wna16_free(r.mem);
    wna16_moe_workspace_free(tmp);
    return st;
}
