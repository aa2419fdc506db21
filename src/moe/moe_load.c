/* Loading one TP rank of a MoE layer from an opened checkpoint: per-expert
 * compressed-tensors (or GPTQ) modules -> this rank's slices (the sharding
 * plan) -> fused, repacked w13 and w2. Every expert is planned before
 * anything is allocated, so an indivisible split is refused up front. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/pool.h"
#include "format/checkpoint.h"
#include "moe/moe_internal.h"
#include "parallel/shard.h"

typedef struct names {
    const char *gate, *up, *down;
} names;

static const names qwen = {"gate_proj", "up_proj", "down_proj"};
static const names mixtral = {"w1", "w3", "w2"};

static bool quantized(const wna16_module *m) {
    return m->kind == WNA16_MODULE_PACKED || m->kind == WNA16_MODULE_GPTQ;
}

static wna16_status find(wna16_diag *d, const wna16_checkpoint *ck, const char *name,
                         const wna16_module **out) {
    *out = wna16_ck_module(ck, name);
    if (!*out)
        return wna16_fail(d, WNA16_ERR_TENSOR_MISSING, "%s: MoE module '%s' is missing", ck->dir,
                          name);
    if (!quantized(*out))
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                          "%s: MoE module '%s' is not WNA16-quantized (it is %s); the fused MoE "
                          "layer runs int4/int8 experts only",
                          ck->dir, name, (*out)->ignored ? "in the ignore list" : "unquantized");
    return WNA16_OK;
}

static wna16_status plan(wna16_diag *d, const wna16_checkpoint *ck, const wna16_module *m,
                         int64_t want_out, int64_t want_in, int tp, int rank,
                         wna16_shard_slice *s) {
    if (m->out != want_out || m->in != want_in)
        return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                          "%s: '%s' is [%lld, %lld]; the MoE config needs [%lld, %lld]", ck->dir,
                          m->name, (long long)m->out, (long long)m->in, (long long)want_out,
                          (long long)want_in);
    bool channel = m->scheme >= 0 && (size_t)m->scheme < ck->qconfig.n_schemes &&
                   ck->qconfig.schemes[m->scheme].weights.strategy == WNA16_QSTRAT_CHANNEL;
    wna16_shard_request r = {.layer = m->name,
                             .role = m->role,
                             .out = m->out,
                             .in = m->in,
                             .bits = m->bits,
                             .group_size = channel ? -1 : m->group_size,
                             .symmetric = m->symmetric,
                             .tp = tp,
                             .rank = rank};
    return wna16_shard_plan(d, &r, s);
}

typedef struct mlp_mods {
    const wna16_module *gate, *up, *down;
    wna16_shard_slice sg, su, sd;
} mlp_mods;

static wna16_status plan_mlp(wna16_diag *d, const wna16_checkpoint *ck, const char *base,
                             const names *nm, int64_t H, int64_t I, int tp, int rank, mlp_mods *m) {
    char name[512];
    snprintf(name, sizeof name, "%s.%s", base, nm->gate);
    WNA16_TRY(find(d, ck, name, &m->gate));
    snprintf(name, sizeof name, "%s.%s", base, nm->up);
    WNA16_TRY(find(d, ck, name, &m->up));
    snprintf(name, sizeof name, "%s.%s", base, nm->down);
    WNA16_TRY(find(d, ck, name, &m->down));
    WNA16_TRY(plan(d, ck, m->gate, I, H, tp, rank, &m->sg));
    WNA16_TRY(plan(d, ck, m->up, I, H, tp, rank, &m->su));
    WNA16_TRY(plan(d, ck, m->down, H, I, tp, rank, &m->sd));
    return WNA16_OK;
}

static wna16_status load_mlp(wna16_diag *d, const wna16_checkpoint *ck, wna16_moe_layer *L,
                             int64_t e, const mlp_mods *m, const float *shared_gate) {
    wna16_qweight g, u, dn;
    void *og = NULL, *ou = NULL, *od = NULL;
    wna16_status st = wna16_ck_qweight(d, ck, m->gate, &m->sg, &g, &og);
    if (st == WNA16_OK) st = wna16_ck_qweight(d, ck, m->up, &m->su, &u, &ou);
    if (st == WNA16_OK) st = wna16_ck_qweight(d, ck, m->down, &m->sd, &dn, &od);
    /* a channelwise weight sliced along K keeps one scale per row: its one
     * group spans this rank's columns (the canonical form says group == k) */
    if (st == WNA16_OK && dn.n_groups == 1) dn.group_size = dn.k;
    if (st == WNA16_OK)
        st = e < L->cfg.num_experts ? wna16_moe_layer_set_expert(d, L, e, &g, &u, &dn)
                                    : wna16_moe_layer_set_shared(d, L, &g, &u, &dn, shared_gate);
    if (st != WNA16_OK) wna16_diag_prefix(d, "%s (expert %lld): ", m->gate->name, (long long)e);
    wna16_free(og);
    wna16_free(ou);
    wna16_free(od);
    return st;
}

/* Experts [begin, begin + n) on nt threads: they are independent (each repack owns its
 * temporaries and its slot of L), so the threads take them in index order.
 * The failure reported is the one of the lowest expert, whatever the
 * thread count: an expert is handed out only after every lower one, and
 * none after a failure below it. */
typedef struct experts_job {
    wna16_diag *d;
    const wna16_checkpoint *ck;
    wna16_moe_layer *L;
    const mlp_mods *mods; /* indexed by expert */
    int64_t begin;        /* experts [begin, begin + n) */
    int64_t first_bad;
    wna16_status first_st;
    pthread_mutex_t lock;
    wna16_hooks tuning; /* the load's tuning (experts are packed under it), not its callbacks */
} experts_job;

static void load_expert_range(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    experts_job *j = arg;
    for (int64_t e = j->begin + i0; e < j->begin + i1; e++) {
        if (__atomic_load_n(&j->first_bad, __ATOMIC_RELAXED) < e) continue;
        wna16_diag local = {.hooks = &j->tuning};
        wna16_status st = load_mlp(&local, j->ck, j->L, e, &j->mods[e], NULL);
        if (st == WNA16_OK) continue;
        pthread_mutex_lock(&j->lock);
        if (e < j->first_bad) {
            __atomic_store_n(&j->first_bad, e, __ATOMIC_RELAXED);
            j->first_st = st;
            if (j->d) memcpy(j->d->detail, local.detail, sizeof j->d->detail); /* not its hooks */
        }
        pthread_mutex_unlock(&j->lock);
    }
}

static wna16_status load_experts(wna16_diag *d, const wna16_checkpoint *ck, wna16_moe_layer *L,
                                 const mlp_mods *mods, int64_t begin, int64_t n, int nt) {
    experts_job j = {d,        ck, L, mods, begin, begin + n, WNA16_OK, PTHREAD_MUTEX_INITIALIZER,
                     {.tuning = wna16_tuning_of(d)}};
    wna16_parallel_for_dynamic(nt, n, 1, load_expert_range, &j);
    return j.first_st;
}

/* A float tensor [rows, cols] (BF16/F16/F32) as fp32. */
static wna16_status read_floats(wna16_diag *d, const wna16_checkpoint *ck, const char *name,
                                int64_t rows, int64_t cols, bool required, float **out) {
    *out = NULL;
    const wna16_tensor_view *v = wna16_checkpoint_tensor(ck, name);
    if (!v) {
        if (!required) return WNA16_OK;
        return wna16_fail(d, WNA16_ERR_TENSOR_MISSING, "%s: tensor '%s' is missing", ck->dir, name);
    }
    if (v->dtype != WNA16_DTYPE_BF16 && v->dtype != WNA16_DTYPE_F16 && v->dtype != WNA16_DTYPE_F32)
        return wna16_fail(d, WNA16_ERR_BAD_DTYPE, "%s: '%s' is %s; expected BF16, F16 or F32",
                          ck->dir, name, wna16_dtype_name(v->dtype));
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->shape[i];
    bool ok = rows == 1 ? (n == cols && (v->rank == 1 || (v->rank == 2 && v->shape[0] == 1)))
                        : (v->rank == 2 && v->shape[0] == rows && v->shape[1] == cols);
    if (!ok)
        return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                          "%s: '%s' has %lld elements (rank %d); expected [%lld, %lld]", ck->dir,
                          name, (long long)n, v->rank, (long long)rows, (long long)cols);
    float *f = wna16_malloc((size_t)n * sizeof(float));
    if (!f) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: %lld floats", name, (long long)n);
    for (int64_t i = 0; i < n; i++) f[i] = wna16_view_float(v, i);
    *out = f;
    return WNA16_OK;
}

wna16_status wna16_moe_layer_load(wna16_diag *d, const wna16_checkpoint *ck, const char *prefix,
                                  const wna16_moe_config *cfg, int tp, int rank, int n_threads,
                                  wna16_moe_layer **out) {
    if (!out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe load: out is NULL");
    *out = NULL;
    if (!ck || !prefix) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe load: NULL argument");
    WNA16_TRY(wna16_moe_check_config(d, cfg));
    if (tp < 1 || rank < 0 || rank >= tp)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe load: rank %d of tp %d", rank, tp);
    int64_t E = cfg->num_experts, H = cfg->hidden, I = cfg->intermediate;
    char name[512];
    /* naming: Qwen/DeepSeek experts.E.{gate,up,down}_proj, or Mixtral experts.E.{w1,w3,w2} */
    const names *nm = &qwen;
    snprintf(name, sizeof name, "%s.experts.0.%s", prefix, qwen.gate);
    if (!wna16_ck_module(ck, name)) {
        snprintf(name, sizeof name, "%s.experts.0.%s", prefix, mixtral.gate);
        if (wna16_ck_module(ck, name)) nm = &mixtral;
    }
    /* plan every expert (and the shared one) before allocating anything */
    mlp_mods *mods = wna16_calloc((size_t)(E + 1), sizeof *mods);
    if (!mods)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe load: %lld experts", (long long)E);
    /* expert parallel: only this rank's experts, whole */
    int64_t e0 = cfg->expert_count ? cfg->expert_begin : 0;
    int64_t ne = cfg->expert_count ? cfg->expert_count : E;
    int etp = cfg->expert_count ? 1 : tp, erank = cfg->expert_count ? 0 : rank;
    wna16_status st = WNA16_OK;
    for (int64_t e = e0; e < e0 + ne && st == WNA16_OK; e++) {
        snprintf(name, sizeof name, "%s.experts.%lld", prefix, (long long)e);
        st = plan_mlp(d, ck, name, nm, H, I, etp, erank, &mods[e]);
    }
    if (st == WNA16_OK && cfg->shared_intermediate) {
        snprintf(name, sizeof name, "%s.shared_expert", prefix);
        st = plan_mlp(d, ck, name, &qwen, H, cfg->shared_intermediate, tp, rank, &mods[E]);
    }
    float *router = NULL, *bias = NULL, *sgate = NULL;
    if (st == WNA16_OK) {
        snprintf(name, sizeof name, "%s.gate.weight", prefix);
        st = read_floats(d, ck, name, E, H, true, &router);
    }
    if (st == WNA16_OK) {
        snprintf(name, sizeof name, "%s.gate.e_score_correction_bias", prefix);
        st = read_floats(d, ck, name, 1, E, false, &bias);
    }
    if (st == WNA16_OK && cfg->shared_expert_gate) {
        snprintf(name, sizeof name, "%s.shared_expert_gate.weight", prefix);
        st = read_floats(d, ck, name, 1, H, true, &sgate);
    }
    wna16_moe_layer *L = NULL;
    if (st == WNA16_OK) st = wna16_moe_layer_create(d, cfg, tp, rank, &L);
    if (st == WNA16_OK) st = wna16_moe_layer_set_router(d, L, router, bias);
    if (st == WNA16_OK)
        st = load_experts(d, ck, L, mods, e0, ne,
                          n_threads > 0 ? n_threads : wna16_threads_default());
    if (st == WNA16_OK && cfg->shared_intermediate) st = load_mlp(d, ck, L, E, &mods[E], sgate);
    wna16_free(mods);
    wna16_free(router);
    wna16_free(bias);
    wna16_free(sgate);
    if (st != WNA16_OK) {
        wna16_moe_layer_free(L);
        return st;
    }
    wna16_moe_layer_compact(L);
    *out = L;
    return WNA16_OK;
}
