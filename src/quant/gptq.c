/* Sequential GPTQ calibration.
 *
 * The model runtime is loaded once (tp 1, MoE layers deferred). Hidden
 * states of every calibration sample entering layer L are kept in r->x.
 * For layer L:
 *  1. capture pass: the runtime runs layer L alone from r->x (the hooks'
 *     start_x, first_layer = last_layer = L) with the original weights; the capture hook
 *     accumulates H = 2/N_samples * sum x x^T for attn_in (q/k/v), o_in,
 *     mlp_in (gate/up, every expert's gate/up, the shared expert) and
 *     down_in (dense down_proj) — as llm-compressor calibrates a whole
 *     decoder layer in one pass before compressing it;
 *  2. every linear of the layer is GPTQ'd (one inverse-Hessian factor per
 *     distinct input); MoE: each expert's down_proj Hessian comes from its
 *     own quantized gate/up run on ALL calibration tokens;
 *  3. the quantized weights replace the layer's (dense linears in the
 *     runtime; MoE layers through mlp_override with the quantized experts),
 *     and a propagation pass writes the layer's outputs back into r->x. */
#include "core/pool.h"
#include "io/safetensors.h"
#include "runtime/runtime.h"
#include "quant/quant_internal.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The calibration token ids. */
typedef struct calib_state {
    int32_t *ids; /* [samples][seq] */
} calib_state;

typedef struct moe_q {
    int64_t E, I, topk, SI;
    bool renorm;
    wna16_moe_config cfg;        /* routing as inference routes */
    float *router;               /* [E][H] */
    float *shared_gate;          /* [H] or NULL */
    wna16_lin *gate, *up, *down; /* [E + 1]: index E = shared expert */
    /* When every expert is quantized: the runtime's own fused MoE layer with
     * the quantized experts, so propagation uses inference's numerics; the
     * per-expert lins are then dropped as soon as each expert is done. */
    wna16_moe_layer *fused;
} moe_q;

static void moe_q_free(moe_q *m) {
    if (!m) return;
    for (int64_t e = 0; m->gate && e <= m->E; e++) {
        wna16_lin_free(&m->gate[e]);
        wna16_lin_free(&m->up[e]);
        wna16_lin_free(&m->down[e]);
    }
    wna16_free(m->gate);
    wna16_free(m->up);
    wna16_free(m->down);
    wna16_free(m->router);
    wna16_free(m->shared_gate);
    wna16_moe_layer_free(m->fused);
    wna16_free(m);
}

/* The canonical view of a quantized linear (packed rows and unsigned zero
 * points built into *owned; free with wna16_free). */
static wna16_status qweight_of(wna16_diag *d, const wna16_qlinear *q, wna16_qweight *w,
                               void **owned) {
    int b = q->spec.bits;
    int64_t rw = (q->k * b + 31) / 32, ng = q->n_groups;
    size_t pb = (size_t)(q->n * rw) * 4;
    uint8_t *buf = wna16_malloc(pb + (q->spec.symmetric ? 0 : (size_t)(q->n * ng)));
    if (!buf) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "packing a quantized weight");
    uint32_t *packed = (uint32_t *)buf;
    uint8_t *zeros = q->spec.symmetric ? NULL : buf + pb;
    wna16_pack_rows(q->q, q->n, q->k, b, packed);
    for (int64_t i = 0; zeros && i < q->n * ng; i++)
        zeros[i] = (uint8_t)(q->zp[i] + (1 << (b - 1)));
    *w = (wna16_qweight){.n = q->n,
                         .k = q->k,
                         .bits = b,
                         .group_size = q->k / ng,
                         .n_groups = ng,
                         .symmetric = q->spec.symmetric,
                         .packed = packed,
                         .row_words = rw,
                         .scales = q->scale,
                         .scale_stride = ng,
                         .zeros = zeros,
                         .zero_stride = ng,
                         .scale_dtype = q->spec.dtype};
    *owned = buf;
    return WNA16_OK;
}

static wna16_status pack_qlinear(wna16_diag *d, const wna16_qlinear *q, wna16_packed_linear **out) {
    wna16_qweight w;
    void *owned;
    WNA16_TRY(qweight_of(d, q, &w, &owned));
    wna16_status s = wna16_linear_pack(d, &w, out);
    wna16_free(owned);
    return s;
}

/* Replaces a runtime linear by the quantized weight (bias kept). */
static wna16_status install(wna16_diag *d, wna16_lin *l, const wna16_qlinear *q) {
    wna16_packed_linear *pl;
    WNA16_TRY(pack_qlinear(d, q, &pl));
    wna16_linear_free(l->q);
    wna16_lin_free_dense(l);
    l->q = pl;
    l->n = q->n;
    l->k = q->k;
    return WNA16_OK;
}

static float *gptq_hess(qrun *r, const char *what, int64_t cols, bool *fresh);

static void on_capture(void *user, int64_t layer, const char *what, int64_t rows, int64_t cols,
                       const float *x) {
    qrun *r = user;
    (void)layer;
    if (r->phase == 1) {
        if (!strcmp(what, "layer_out"))
            memcpy(r->x + r->cur_sample * r->seq * r->hidden, x,
                   (size_t)(rows * cols) * sizeof(float));
        return;
    }
    if (!strcmp(what, "layer_out")) return;
    bool fresh;
    float *h = gptq_hess(r, what, cols, &fresh);
    if (!h) return;
    prof_mark pm = prof_begin();
    wna16_hessian_add(h, cols, x, rows, cols, 2.0f / (float)r->n_samples, r->threads);
    /* run_layer books the whole capture pass as the forward: move this out */
    prof_move(&r->prof, PH_FORWARD, PH_HESSIAN, pm);
    if (!strcmp(what, "mlp_in") && r->mlp_rows)
        for (int64_t i = 0; i < rows * cols; i++)
            r->mlp_rows[r->cur_sample * r->seq * cols + i] = wna16_f32_to_bf16(x[i]);
}

/* One H per input kind, allocated at its first capture in a layer. */
static float *gptq_hess(qrun *r, const char *what, int64_t cols, bool *fresh) {
    float **slot = !strcmp(what, "attn_in")   ? &r->h_attn
                   : !strcmp(what, "o_in")    ? &r->h_o
                   : !strcmp(what, "mlp_in")  ? &r->h_mlp
                   : !strcmp(what, "down_in") ? &r->h_down
                                              : NULL;
    if (!slot) return NULL;
    *fresh = !*slot;
    if (!*slot) {
        *slot = wna16_calloc((size_t)(cols * cols), sizeof(float));
        if (slot == &r->h_o) r->k_o = cols;
        if (slot == &r->h_down) r->k_down = cols;
    }
    return *slot;
}

static void silu_mul(const float *g, const float *u, int64_t n, uint16_t *hb, float *hf) {
    for (int64_t i = 0; i < n; i++) {
        float v = g[i] / (1.0f + expf(-g[i])) * u[i];
        hb[i] = wna16_f32_to_bf16(v);
        hf[i] = wna16_bf16_to_f32(hb[i]);
    }
}

/* gate/up -> silu*up -> down on rows of x (bf16 + fp32 copies, stride H);
 * out [rows][H] (overwritten). */
static wna16_status expert_forward(qrun *r, const wna16_lin *g, const wna16_lin *u,
                                   const wna16_lin *dn, int64_t rows, const uint16_t *xb,
                                   const float *xf, float *out) {
    int64_t H = r->hidden, I = g->n;
    float *gb = wna16_malloc((size_t)(rows * I) * sizeof(float));
    float *ub = wna16_malloc((size_t)(rows * I) * sizeof(float));
    uint16_t *ab = wna16_malloc((size_t)(rows * I) * sizeof(uint16_t));
    float *af = wna16_malloc((size_t)(rows * I) * sizeof(float));
    wna16_status s = gb && ub && ab && af
                         ? WNA16_OK
                         : wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "expert scratch");
    if (s == WNA16_OK) s = wna16_lin_forward(r->d, g, rows, xb, xf, H, gb, I, r->threads);
    if (s == WNA16_OK) s = wna16_lin_forward(r->d, u, rows, xb, xf, H, ub, I, r->threads);
    if (s == WNA16_OK) {
        silu_mul(gb, ub, rows * I, ab, af);
        s = wna16_lin_forward(r->d, dn, rows, ab, af, I, out, H, r->threads);
    }
    wna16_free(gb);
    wna16_free(ub);
    wna16_free(ab);
    wna16_free(af);
    return s;
}

typedef struct logits_job {
    const moe_q *m;
    int64_t H;
    const float *xf;
    float *lg;
} logits_job;

/* Router logits of rows [t0, t1) in fp32 (the checkpoint's router). */
static void router_logits(void *arg, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const logits_job *j = arg;
    const moe_q *m = j->m;
    int64_t H = j->H, E = m->cfg.num_experts;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t e = 0; e < E; e++) {
            float acc = 0;
            for (int64_t h = 0; h < H; h++) acc += j->xf[t * H + h] * m->router[e * H + h];
            j->lg[t * E + e] = acc;
        }
}

/* The MoE MLP of a calibrated layer: the runtime's routing (moe/), the
 * quantized experts, the shared expert with its sigmoid gate. */
static wna16_status moe_override(void *user, int64_t layer, int64_t rows, const uint16_t *x,
                                 float *y) {
    qrun *r = user;
    (void)layer;
    int64_t H = r->hidden;
    memset(y, 0, (size_t)(rows * H) * sizeof(float));
    if (r->phase == 0 || !r->moe) return WNA16_OK; /* capture pass: output unused */
    moe_q *m = r->moe;
    float *xf = wna16_malloc((size_t)(rows * H) * sizeof(float));
    float *lg = wna16_malloc((size_t)(rows * m->E) * sizeof(float));
    int32_t *ids = wna16_malloc((size_t)(rows * m->topk) * sizeof(int32_t));
    float *wt = wna16_malloc((size_t)(rows * m->topk) * sizeof(float));
    uint16_t *gx = wna16_malloc((size_t)(rows * H) * sizeof(uint16_t));
    float *gxf = wna16_malloc((size_t)(rows * H) * sizeof(float));
    float *eo = wna16_malloc((size_t)(rows * H) * sizeof(float));
    int64_t *tok = wna16_malloc((size_t)rows * sizeof(int64_t));
    float *tw = wna16_malloc((size_t)rows * sizeof(float));
    wna16_status s = xf && lg && ids && wt && gx && gxf && eo && tok && tw
                         ? WNA16_OK
                         : wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "MoE calibration scratch");
    if (s == WNA16_OK) {
        for (int64_t i = 0; i < rows * H; i++) xf[i] = wna16_bf16_to_f32(x[i]);
        logits_job lj = {m, H, xf, lg};
        wna16_parallel_for(r->threads, rows, router_logits, &lj);
        s = wna16_moe_route(r->d, &m->cfg, rows, lg, NULL, ids, wt);
    }
    for (int64_t e = 0; s == WNA16_OK && e < m->E; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < rows; t++)
            for (int64_t j = 0; j < m->topk; j++)
                if (ids[t * m->topk + j] == e) {
                    tok[n] = t;
                    tw[n] = wt[t * m->topk + j];
                    memcpy(gx + n * H, x + t * H, (size_t)H * sizeof(uint16_t));
                    memcpy(gxf + n * H, xf + t * H, (size_t)H * sizeof(float));
                    n++;
                }
        if (!n) continue;
        s = expert_forward(r, &m->gate[e], &m->up[e], &m->down[e], n, gx, gxf, eo);
        for (int64_t i = 0; s == WNA16_OK && i < n; i++)
            for (int64_t h = 0; h < H; h++) y[tok[i] * H + h] += tw[i] * eo[i * H + h];
    }
    if (s == WNA16_OK && m->SI) {
        s = expert_forward(r, &m->gate[m->E], &m->up[m->E], &m->down[m->E], rows, x, xf, eo);
        for (int64_t t = 0; s == WNA16_OK && t < rows; t++) {
            float g = 1.0f;
            if (m->shared_gate) {
                float acc = 0;
                for (int64_t h = 0; h < H; h++) acc += xf[t * H + h] * m->shared_gate[h];
                g = 1.0f / (1.0f + expf(-acc));
            }
            for (int64_t h = 0; h < H; h++) y[t * H + h] += g * eo[t * H + h];
        }
    }
    wna16_free(xf);
    wna16_free(lg);
    wna16_free(ids);
    wna16_free(wt);
    wna16_free(gx);
    wna16_free(gxf);
    wna16_free(eo);
    wna16_free(tok);
    wna16_free(tw);
    return s;
}

/* Text calibration: the file is tokenized with the model's tokenizer.json
 * (no special tokens added) and the ids are cut into --seq-len samples. */
static wna16_status read_text_ids(qrun *r, int32_t **ids, size_t *n) {
    const wna16_quantize_opts *o = r->o;
    FILE *f = fopen(o->calib_text, "rb");
    if (!f) return wna16_fail(r->d, WNA16_ERR_IO, "%s: %s", o->calib_text, strerror(errno));
    wna16_buf b = {0};
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) wna16_buf_put(&b, chunk, got);
    fclose(f);
    if (b.failed) {
        wna16_buf_free(&b);
        return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "%s", o->calib_text);
    }
    wna16_ctx *ctx = NULL;
    wna16_tokenizer *tok = NULL;
    wna16_status s = wna16_ctx_create(&ctx);
    if (s == WNA16_OK) s = wna16_tokenizer_load(ctx, o->src, &tok);
    if (s == WNA16_OK) s = wna16_tokenizer_encode(ctx, tok, b.data ? b.data : "", b.len, 0, ids, n);
    if (s != WNA16_OK)
        s = wna16_fail(r->d, s, "--calib %s: %s", o->calib_text,
                       ctx ? wna16_ctx_error(ctx) : "out of memory");
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    wna16_buf_free(&b);
    return s;
}

static wna16_status read_ids(qrun *r, int32_t *ids, int64_t vocab) {
    const wna16_quantize_opts *o = r->o;
    int64_t need = r->n_samples * r->seq;
    if (!o->calib_ids && !o->calib_text) {
        uint64_t st = o->seed ? o->seed : 0x9e3779b97f4a7c15ull;
        for (int64_t i = 0; i < need; i++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            ids[i] = (int32_t)(st % (uint64_t)vocab);
        }
        return WNA16_OK;
    }
    const char *label = o->calib_text ? o->calib_text : o->calib_ids;
    int64_t n = 0;
    if (o->calib_text) {
        int32_t *all = NULL;
        size_t n_all = 0;
        WNA16_TRY(read_text_ids(r, &all, &n_all));
        for (size_t i = 0; i < n_all && n < need; i++) {
            if (all[i] < 0 || all[i] >= vocab) {
                free(all);
                return wna16_fail(r->d, WNA16_ERR_TOKEN_ID,
                                  "%s: token id %d outside the model's vocabulary [0, %lld)", label,
                                  all[i], (long long)vocab);
            }
            ids[n++] = all[i];
        }
        free(all);
    } else {
        FILE *f = fopen(o->calib_ids, "r");
        if (!f) return wna16_fail(r->d, WNA16_ERR_IO, "%s: %s", o->calib_ids, strerror(errno));
        long v;
        while (n < need && fscanf(f, " %ld ,", &v) == 1) {
            if (v < 0 || v >= vocab) {
                fclose(f);
                return wna16_fail(r->d, WNA16_ERR_TOKEN_ID,
                                  "%s: token id %ld outside the vocabulary [0, %lld)", label, v,
                                  (long long)vocab);
            }
            ids[n++] = (int32_t)v;
        }
        fclose(f);
    }
    if (n < r->seq)
        return wna16_fail(r->d, WNA16_ERR_INVALID_ARGUMENT,
                          "%s: %lld tokens; need at least --seq-len %lld", label, (long long)n,
                          (long long)r->seq);
    r->n_samples = n / r->seq; /* whole samples only */
    return WNA16_OK;
}

wna16_status wna16_qrun_gptq_begin(qrun *r) {
    const wna16_quantize_opts *o = r->o;
    int64_t maxpos = r->ck->config.max_position_embeddings;
    r->seq = o->seq_len > 0 ? o->seq_len : 512;
    if (maxpos > 0 && r->seq > maxpos) r->seq = maxpos;
    r->n_samples = o->samples > 0 ? o->samples : 128;
    wna16_model_options mo = {.tp = 1, .threads = r->threads, .context = r->seq};
    WNA16_TRY(wna16_model_load_calib(r->d, o->src, &mo, &r->model));
    r->hidden = r->model->cfg.hidden_size;
    int64_t H = r->hidden, V = r->model->cfg.vocab_size;
    calib_state *cs = wna16_calloc(1, sizeof *cs);
    if (!cs) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "calibration");
    cs->ids = wna16_malloc((size_t)(r->n_samples * r->seq) * sizeof(int32_t));
    r->calib = cs;
    if (!cs->ids) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "calibration ids");
    WNA16_TRY(read_ids(r, cs->ids, V));
    int64_t T = r->n_samples * r->seq;
    r->rep->calib_tokens = T;
    r->x = wna16_malloc((size_t)(T * H) * sizeof(float));
    if (!r->x)
        return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY,
                          "calibration hidden states: %lld tokens x %lld (%.1f GiB); use fewer "
                          "--samples or a shorter --seq-len",
                          (long long)T, (long long)H, (double)T * (double)H * 4 / 1073741824.0);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            r->x[t * H + h] = wna16_bf16_to_f32(r->model->embed[(int64_t)cs->ids[t] * H + h]);
    r->hooks = (wna16_forward_hooks){
        .user = r, .observe = on_capture, .mlp_override = moe_override, .last_layer = -1};
    wna16_runtime_set_hooks(r->model, &r->hooks);
    return WNA16_OK;
}

static void gptq_free_layer(qrun *r) {
    wna16_free(r->h_attn);
    wna16_free(r->h_o);
    wna16_free(r->h_mlp);
    wna16_free(r->h_down);
    r->h_attn = r->h_o = r->h_mlp = r->h_down = NULL;
    wna16_free(r->mlp_rows);
    r->mlp_rows = NULL;
    moe_q_free(r->moe);
    r->moe = NULL;
}

void wna16_qrun_gptq_end(qrun *r) {
    if (r->model) {
        const gptq_prof *p = &r->prof;
        wna16_log(r->d, WNA16_LOG_INFO,
                  "GPTQ time, wall/CPU s: calibration forward %.1f/%.1f, Hessian %.1f/%.1f, "
                  "factor %.1f/%.1f, sweep %.1f/%.1f, propagation %.1f/%.1f",
                  p->wall[PH_FORWARD], p->cpu[PH_FORWARD], p->wall[PH_HESSIAN], p->cpu[PH_HESSIAN],
                  p->wall[PH_FACTOR], p->cpu[PH_FACTOR], p->wall[PH_SWEEP], p->cpu[PH_SWEEP],
                  p->wall[PH_PROPAGATE], p->cpu[PH_PROPAGATE]);
    }
    gptq_free_layer(r);
    if (r->calib) {
        wna16_free(r->calib->ids);
        wna16_free(r->calib);
        r->calib = NULL;
    }
    wna16_free(r->x);
    r->x = NULL;
    wna16_model_free(r->model);
    r->model = NULL;
}

static wna16_status run_layer(qrun *r, int64_t L, int phase) {
    prof_mark pm = prof_begin();
    r->phase = phase;
    wna16_model *m = r->model;
    for (int64_t s = 0; s < r->n_samples; s++) {
        WNA16_TRY(wna16_qrun_check_abort(r->d));
        r->cur_sample = s;
        wna16_model_reset(m);
        r->hooks.start_x = r->x + s * r->seq * r->hidden;
        r->hooks.first_layer = r->hooks.last_layer = L;
        r->hooks.observe_only = phase == 0; /* the capture pass needs no down_proj output */
        WNA16_TRY(wna16_exec_seq0(r->d, m, r->calib->ids + s * r->seq, r->seq, NULL));
    }
    r->hooks.start_x = NULL;
    r->hooks.last_layer = -1;
    r->hooks.observe_only = false;
    prof_end(&r->prof, phase ? PH_PROPAGATE : PH_FORWARD, pm);
    return WNA16_OK;
}

/* The factor of one H (built on first use; H is consumed). */
typedef struct factor_slot {
    float **h;
    wna16_gptq_factor f;
    bool built;
} factor_slot;

static wna16_status factor_get(qrun *r, factor_slot *fs, int64_t k, const wna16_gptq_factor **out) {
    if (!fs->built) {
        if (!*fs->h) return wna16_fail(r->d, WNA16_ERR_INTERNAL, "no calibration inputs captured");
        prof_mark pm = prof_begin();
        WNA16_TRY(wna16_gptq_factor_build(r->d, *fs->h, k, &r->gopts, &fs->f));
        prof_end(&r->prof, PH_FACTOR, pm);
        fs->built = true;
        if (fs->f.fallback)
            fprintf(stderr, "\nwna16 quantize: Hessian not positive definite; falling back to RTN "
                            "for this input\n");
    }
    *out = &fs->f;
    return WNA16_OK;
}

/* GPTQ of one module; *q is left allocated for the caller. */
static wna16_status gptq_module(qrun *r, const wna16_module *mod, const wna16_gptq_factor *f,
                                wna16_qlinear *q) {
    float *w;
    WNA16_TRY(wna16_qrun_read_weight(r, mod, &w));
    wna16_qspec s = wna16_qrun_spec(r, mod);
    double loss = 0;
    wna16_status st = wna16_qlinear_alloc(r->d, &s, mod->out, mod->in, q);
    prof_mark pm = prof_begin();
    if (st == WNA16_OK) st = wna16_gptq_quantize(r->d, w, f, &r->gopts, q, &loss, r->threads);
    prof_end(&r->prof, PH_SWEEP, pm);
    if (st == WNA16_OK) {
        wna16_qrun_record(r, mod->name, w, q, loss);
        st = wna16_qrun_add_qlinear(r, mod->name, q);
    }
    wna16_free(w);
    return st;
}

/* A runtime linear for a module (quantized, or the dense weight when the
 * module is left unquantized). */
static wna16_status lin_for(qrun *r, const char *name, const wna16_qlinear *q, wna16_lin *out) {
    memset(out, 0, sizeof *out);
    if (q && q->q) return install(r->d, out, q);
    return wna16_lin_load(r->d, r->ck, name, WNA16_TP_REPLICATED, 0, 1, 0, true, out);
}

static wna16_status gptq_sparse(qrun *r, int64_t L, factor_slot *mlp_f) {
    const wna16_model_config *c = &r->ck->config;
    const char *pfx = r->model->arch->mlp_prefix;
    bool mixtral = !strcmp(pfx, "block_sparse_moe");
    const char *gn = mixtral ? "w1" : "gate_proj", *un = mixtral ? "w3" : "up_proj",
               *dn = mixtral ? "w2" : "down_proj";
    moe_q *m = r->moe = wna16_calloc(1, sizeof *m);
    if (!m) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "MoE");
    int64_t H = r->hidden, T = r->n_samples * r->seq;
    m->E = c->num_experts;
    m->topk = c->num_experts_per_tok;
    const json_t *nt = json_object_get(r->ck->config_json, "norm_topk_prob");
    m->renorm = json_is_boolean(nt) ? json_is_true(nt) : r->model->arch->default_norm_topk;
    m->gate = wna16_calloc((size_t)m->E + 1, sizeof(wna16_lin));
    m->up = wna16_calloc((size_t)m->E + 1, sizeof(wna16_lin));
    m->down = wna16_calloc((size_t)m->E + 1, sizeof(wna16_lin));
    m->router = wna16_malloc((size_t)(m->E * H) * sizeof(float));
    if (!m->gate || !m->up || !m->down || !m->router)
        return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "MoE");
    char name[256];
    snprintf(name, sizeof name, "model.layers.%lld.%s.gate.weight", (long long)L, pfx);
    const wna16_tensor_view *rv = wna16_checkpoint_tensor(r->ck, name);
    if (!rv || wna16_view_numel(rv) != m->E * H)
        return wna16_fail(r->d, WNA16_ERR_TENSOR_MISSING, "%s: router '%s' missing or mis-shaped",
                          r->o->src, name);
    for (int64_t i = 0; i < m->E * H; i++) m->router[i] = wna16_view_float(rv, i);
    snprintf(name, sizeof name, "model.layers.%lld.%s.shared_expert_gate.weight", (long long)L,
             pfx);
    rv = wna16_checkpoint_tensor(r->ck, name);
    if (rv && wna16_view_numel(rv) == H) {
        m->shared_gate = wna16_malloc((size_t)H * sizeof(float));
        if (!m->shared_gate) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "MoE");
        for (int64_t i = 0; i < H; i++) m->shared_gate[i] = wna16_view_float(rv, i);
    }
    snprintf(name, sizeof name, "model.layers.%lld.%s.shared_expert.%s", (long long)L, pfx, gn);
    bool shared = wna16_qrun_find(r, name) != NULL;
    /* the fused layer needs every expert quantized */
    bool all_q = !r->o->moe_reference;
    char pre[200];
    snprintf(pre, sizeof pre, "model.layers.%lld.%s.", (long long)L, pfx);
    for (size_t i = 0; all_q && i < r->n_mods; i++)
        if (!strncmp(r->mods[i].m->name, pre, strlen(pre)) &&
            (strstr(r->mods[i].m->name, ".experts.") ||
             strstr(r->mods[i].m->name, ".shared_expert.")) &&
            !r->mods[i].quantize)
            all_q = false;
    m->cfg = (wna16_moe_config){
        .hidden = H,
        .intermediate = c->moe_intermediate_size,
        .num_experts = m->E,
        .top_k = m->topk,
        .scoring = WNA16_MOE_SOFTMAX,
        .renormalize = m->renorm,
        .routed_scaling_factor =
            (float)(json_is_number(json_object_get(r->ck->config_json, "routed_scaling_factor"))
                        ? json_number_value(
                              json_object_get(r->ck->config_json, "routed_scaling_factor"))
                        : 1.0),
        .shared_intermediate =
            r->model->arch->shared_expert ? c->shared_expert_intermediate_size : 0,
        .shared_expert_gate = r->model->arch->shared_expert,
    };
    if (all_q) {
        wna16_status cs = wna16_moe_layer_create(r->d, &m->cfg, 1, 0, &m->fused);
        if (cs == WNA16_OK) cs = wna16_moe_layer_set_router(r->d, m->fused, m->router, NULL);
        if (cs != WNA16_OK) return cs;
    }
    const int64_t CH = 512; /* tokens per chunk for the down_proj inputs */
    float *gb = NULL, *ub = NULL, *af = NULL, *xf = NULL;
    uint16_t *ab = NULL;
    wna16_status st = WNA16_OK;
    for (int64_t e = 0; st == WNA16_OK && e < m->E + (shared ? 1 : 0); e++) {
        char base[200], gname[256], uname[256], dname[256];
        if (e < m->E)
            snprintf(base, sizeof base, "model.layers.%lld.%s.experts.%lld", (long long)L, pfx,
                     (long long)e);
        else
            snprintf(base, sizeof base, "model.layers.%lld.%s.shared_expert", (long long)L, pfx);
        snprintf(gname, sizeof gname, "%s.%s", base, gn);
        snprintf(uname, sizeof uname, "%s.%s", base, un);
        snprintf(dname, sizeof dname, "%s.%s", base, dn);
        if ((st = wna16_qrun_check_abort(r->d)) != WNA16_OK) break;
        const qmodule *qg = wna16_qrun_find(r, gname), *qu = wna16_qrun_find(r, uname),
                      *qd = wna16_qrun_find(r, dname);
        if (!qg || !qu || !qd)
            return wna16_fail(r->d, WNA16_ERR_TENSOR_MISSING, "%s: expert '%s' is incomplete",
                              r->o->src, base);
        wna16_qlinear q, qgu[2];
        memset(qgu, 0, sizeof qgu);
        const wna16_gptq_factor *f = NULL;
        for (int which = 0; which < 2 && st == WNA16_OK; which++) {
            const qmodule *qm = which ? qu : qg;
            if (qm->quantize) {
                st = factor_get(r, mlp_f, H, &f);
                if (st == WNA16_OK) st = gptq_module(r, qm->m, f, &qgu[which]);
            }
            if (st == WNA16_OK)
                st = lin_for(r, qm->m->name, &qgu[which], which ? &m->up[e] : &m->gate[e]);
        }
        if (st != WNA16_OK) {
            wna16_qlinear_free(&qgu[0]);
            wna16_qlinear_free(&qgu[1]);
            break;
        }
        int64_t I = m->gate[e].n;
        if (e == m->E) m->SI = I;
        if (qd->quantize) {
            /* down_proj inputs: silu(gate_q x) * up_q x on every token */
            float *hd = wna16_calloc((size_t)(I * I), sizeof(float));
            wna16_free(gb), wna16_free(ub), wna16_free(af), wna16_free(ab), wna16_free(xf);
            gb = wna16_malloc((size_t)(CH * I) * sizeof(float));
            ub = wna16_malloc((size_t)(CH * I) * sizeof(float));
            af = wna16_malloc((size_t)(CH * I) * sizeof(float));
            ab = wna16_malloc((size_t)(CH * I) * sizeof(uint16_t));
            xf = wna16_malloc((size_t)(CH * H) * sizeof(float));
            if (!hd || !gb || !ub || !af || !ab || !xf) {
                wna16_free(hd);
                st = wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "expert down_proj Hessian");
                break;
            }
            for (int64_t t0 = 0; st == WNA16_OK && t0 < T; t0 += CH) {
                int64_t n = t0 + CH <= T ? CH : T - t0;
                const uint16_t *xb = r->mlp_rows + t0 * H;
                for (int64_t i = 0; i < n * H; i++) xf[i] = wna16_bf16_to_f32(xb[i]);
                st = wna16_lin_forward(r->d, &m->gate[e], n, xb, xf, H, gb, I, r->threads);
                if (st == WNA16_OK)
                    st = wna16_lin_forward(r->d, &m->up[e], n, xb, xf, H, ub, I, r->threads);
                if (st != WNA16_OK) break;
                silu_mul(gb, ub, n * I, ab, af);
                prof_mark pm = prof_begin();
                wna16_hessian_add(hd, I, af, n, I, 2.0f / (float)r->n_samples, r->threads);
                prof_end(&r->prof, PH_HESSIAN, pm);
            }
            factor_slot ds = {.h = &hd};
            if (st == WNA16_OK) st = factor_get(r, &ds, I, &f);
            memset(&q, 0, sizeof q);
            if (st == WNA16_OK) st = gptq_module(r, qd->m, f, &q);
            if (st == WNA16_OK && m->fused) {
                wna16_qweight wg, wu, wd;
                void *og = NULL, *ou = NULL, *od = NULL;
                st = qweight_of(r->d, &qgu[0], &wg, &og);
                if (st == WNA16_OK) st = qweight_of(r->d, &qgu[1], &wu, &ou);
                if (st == WNA16_OK) st = qweight_of(r->d, &q, &wd, &od);
                if (st == WNA16_OK)
                    st = e < m->E ? wna16_moe_layer_set_expert(r->d, m->fused, e, &wg, &wu, &wd)
                                  : wna16_moe_layer_set_shared(r->d, m->fused, &wg, &wu, &wd,
                                                               m->shared_gate);
                wna16_free(og), wna16_free(ou), wna16_free(od);
                /* the fused layer has its own copy */
                wna16_lin_free(&m->gate[e]);
                wna16_lin_free(&m->up[e]);
            } else if (st == WNA16_OK) {
                st = lin_for(r, dname, &q, &m->down[e]);
            }
            wna16_qlinear_free(&q);
            wna16_gptq_factor_free(&ds.f);
            wna16_free(hd);
        } else {
            st = lin_for(r, dname, NULL, &m->down[e]);
        }
        wna16_qlinear_free(&qgu[0]);
        wna16_qlinear_free(&qgu[1]);
        if (e % 8 == 7) wna16_ck_release_pages(r->ck); /* expert pages read so far */
        if (e % 8 == 7 || e + 1 == m->E)
            wna16_qrun_progress(r, (double)L + (double)(e + 1) / (double)(m->E + 1), c->num_layers);
    }
    wna16_free(gb), wna16_free(ub), wna16_free(af), wna16_free(ab), wna16_free(xf);
    return st;
}

static wna16_status gptq_layer_loaded(qrun *r, int64_t L) {
    wna16_layer *ly = &r->model->ranks[0].layers[L];
    int64_t T = r->n_samples * r->seq;
    if (ly->sparse) {
        r->mlp_rows = wna16_malloc((size_t)(T * r->hidden) * sizeof(uint16_t));
        if (!r->mlp_rows)
            return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "MoE calibration inputs");
    }
    WNA16_TRY(run_layer(r, L, 0));
    if ((!r->h_attn || !r->h_mlp) && !r->h_o)
        return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "Hessians");
    factor_slot fa = {.h = &r->h_attn}, fo = {.h = &r->h_o}, fm = {.h = &r->h_mlp},
                fd = {.h = &r->h_down};
    static const struct {
        const char *tail;
        int slot; /* 0 attn_in, 1 o_in, 2 mlp_in, 3 down_in */
        size_t off;
    } dense[] = {
        {"self_attn.q_proj", 0, offsetof(wna16_layer, q)},
        {"self_attn.k_proj", 0, offsetof(wna16_layer, k)},
        {"self_attn.v_proj", 0, offsetof(wna16_layer, v)},
        {"self_attn.o_proj", 1, offsetof(wna16_layer, o)},
        {"mlp.gate_proj", 2, offsetof(wna16_layer, gate)},
        {"mlp.up_proj", 2, offsetof(wna16_layer, up)},
        {"mlp.down_proj", 3, offsetof(wna16_layer, down)},
    };
    factor_slot *slots[] = {&fa, &fo, &fm, &fd};
    wna16_status st = WNA16_OK;
    for (size_t i = 0; st == WNA16_OK && i < sizeof dense / sizeof *dense; i++) {
        if (ly->sparse && dense[i].slot >= 2) continue;
        char name[256];
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)L, dense[i].tail);
        const qmodule *qm = wna16_qrun_find(r, name);
        if (!qm || !qm->quantize) continue;
        const wna16_gptq_factor *f = NULL;
        int64_t k = qm->m->in;
        st = factor_get(r, slots[dense[i].slot], k, &f);
        wna16_qlinear q;
        memset(&q, 0, sizeof q);
        if (st == WNA16_OK) st = gptq_module(r, qm->m, f, &q);
        if (st == WNA16_OK) st = install(r->d, (wna16_lin *)((char *)ly + dense[i].off), &q);
        wna16_qlinear_free(&q);
    }
    if (st == WNA16_OK && ly->sparse) st = gptq_sparse(r, L, &fm);
    for (int i = 0; i < 4; i++) wna16_gptq_factor_free(&slots[i]->f);
    if (st == WNA16_OK && r->moe && r->moe->fused) ly->moe = r->moe->fused;
    /* propagation: the next layer's inputs (the last layer has none) */
    if (st == WNA16_OK && L + 1 < r->ck->config.num_layers) st = run_layer(r, L, 1);
    ly->moe = NULL; /* owned by r->moe */
    gptq_free_layer(r);
    return st;
}

wna16_status wna16_qrun_gptq_layer(qrun *r, int64_t L) {
    WNA16_TRY(wna16_model_load_layer(r->d, r->model, L));
    wna16_status st = gptq_layer_loaded(r, L);
    /* this layer never runs again: release its weights and the source pages */
    wna16_model_free_layer(r->model, L);
    wna16_ck_release_pages(r->model->ck);
    return st;
}
