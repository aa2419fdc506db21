/* Multi-head latent attention's weights (DeepSeek-V2/V3, Kimi-K2): q LoRA
 * (q_a_proj, q_a_layernorm, q_b_proj) or a plain q_proj, the compressed KV
 * (kv_a_proj_with_mqa, kv_a_layernorm), kv_b_proj that expands the latent
 * into every head's key and value, and o_proj. Heads split across TP ranks
 * (q_b, kv_b by heads, o_proj by its input); the latent is every rank's. */
#include "io/safetensors.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

static wna16_status norm_f32(wna16_diag *d, const wna16_checkpoint *ck, const char *name,
                             int64_t n, float **out) {
    const wna16_tensor_view *v = wna16_checkpoint_tensor(ck, name);
    if (!v) return wna16_fail(d, WNA16_ERR_TENSOR_MISSING, "%s: tensor '%s' is missing", ck->dir, name);
    if (wna16_view_numel(v) != n ||
        (v->dtype != WNA16_DTYPE_BF16 && v->dtype != WNA16_DTYPE_F16 && v->dtype != WNA16_DTYPE_F32))
        return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                          "%s: tensor '%s' must be %lld BF16, F16 or F32 values", ck->dir, name,
                          (long long)n);
    *out = wna16_malloc((size_t)n * sizeof(float));
    if (!*out) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s", name);
    for (int64_t i = 0; i < n; i++) (*out)[i] = wna16_view_float(v, i);
    return WNA16_OK;
}

static wna16_status lin(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r, int64_t L,
                        const char *proj, wna16_tp_role role, int64_t heads, int64_t out_n,
                        int64_t in_n, wna16_lin *out) {
    char name[256];
    snprintf(name, sizeof name, "%slayers.%lld.self_attn.%s", m->ck->text_prefix, (long long)L, proj);
    WNA16_TRY(wna16_lin_load(d, m->ck, name, role, heads, r->tp, r->tp_rank,
                             role != WNA16_TP_ROW || r->tp_rank == 0, out));
    if (out->n != out_n || out->k != in_n)
        return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                          "%s: '%s' of rank %d is [%lld, %lld]; the config needs [%lld, %lld]",
                          m->ck->dir, name, r->rank, (long long)out->n, (long long)out->k,
                          (long long)out_n, (long long)in_n);
    return WNA16_OK;
}

/* kv_b's weights as fp32, whatever their packing: its output for the
 * identity's rows (each output is one weight times 1), [kv_lora][rows]. */
static wna16_status kv_b_weights(wna16_diag *d, const wna16_model *m, const wna16_layer *ly,
                                 float *w) {
    int64_t R = ly->kv_b.k, n = ly->kv_b.n;
    uint16_t *eye = wna16_calloc((size_t)(R * R), sizeof *eye);
    float *eyef = wna16_calloc((size_t)(R * R), sizeof *eyef);
    wna16_status s = eye && eyef ? WNA16_OK
                                 : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "kv_b_proj copy");
    for (int64_t i = 0; s == WNA16_OK && i < R; i++) {
        eye[i * R + i] = wna16_f32_to_bf16(1.0f);
        eyef[i * R + i] = 1.0f;
    }
    if (s == WNA16_OK) s = wna16_lin_forward(d, &ly->kv_b, R, eye, eyef, R, w, n, m->threads);
    wna16_free(eye);
    wna16_free(eyef);
    return s;
}

/* kv_b_t (model.h): each head's key and value parts contiguous, so the
 * absorbed decode streams a head's weights in address order (a [kv_lora]
 * [rows] copy read one head at a time jumps a whole row per latent). */
static wna16_status kv_b_transpose(wna16_diag *d, const wna16_model *m, wna16_layer *ly,
                                   int64_t heads) {
    const wna16_mla *a = &m->feat.mla;
    int64_t R = ly->kv_b.k, n = ly->kv_b.n, kv = a->nope + a->v;
    float *w = wna16_malloc((size_t)(R * n) * sizeof *w);
    ly->kv_b_t = wna16_malloc((size_t)(R * n) * sizeof(float));
    wna16_status s = w && ly->kv_b_t ? kv_b_weights(d, m, ly, w)
                                     : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "kv_b_proj copy");
    for (int64_t h = 0; s == WNA16_OK && h < heads; h++) {
        float *key = ly->kv_b_t + h * R * kv, *val = key + R * a->nope;
        for (int64_t c = 0; c < R; c++) {
            const float *row = w + c * n + h * kv;
            memcpy(key + c * a->nope, row, (size_t)a->nope * sizeof *w);
            memcpy(val + c * a->v, row + a->nope, (size_t)a->v * sizeof *w);
        }
    }
    wna16_free(w);
    return s;
}

wna16_status wna16_mla_load(wna16_diag *d, wna16_model *m, wna16_rank_model *r, int64_t L) {
    wna16_layer *ly = &r->layers[L];
    const wna16_mla *a = &m->feat.mla;
    int64_t H = m->cfg.hidden_size, nh = m->cfg.num_heads, hp = r->heads;
    int64_t qk = a->nope + a->rope;
    char name[256];
    if (a->q_lora) {
        WNA16_TRY(lin(d, m, r, L, "q_a_proj", WNA16_TP_REPLICATED, 0, a->q_lora, H, &ly->q_a));
        snprintf(name, sizeof name, "%slayers.%lld.self_attn.q_a_layernorm.weight",
                 m->ck->text_prefix, (long long)L);
        WNA16_TRY(norm_f32(d, m->ck, name, a->q_lora, &ly->q_a_norm));
        WNA16_TRY(lin(d, m, r, L, "q_b_proj", WNA16_TP_QKV_Q, nh, hp * qk, a->q_lora, &ly->q_b));
    } else {
        WNA16_TRY(lin(d, m, r, L, "q_proj", WNA16_TP_QKV_Q, nh, hp * qk, H, &ly->q_b));
    }
    WNA16_TRY(lin(d, m, r, L, "kv_a_proj_with_mqa", WNA16_TP_REPLICATED, 0, a->kv_lora + a->rope,
                  H, &ly->kv_a));
    snprintf(name, sizeof name, "%slayers.%lld.self_attn.kv_a_layernorm.weight", m->ck->text_prefix,
             (long long)L);
    WNA16_TRY(norm_f32(d, m->ck, name, a->kv_lora, &ly->kv_a_norm));
    WNA16_TRY(lin(d, m, r, L, "kv_b_proj", WNA16_TP_QKV_Q, nh, hp * (a->nope + a->v), a->kv_lora,
                  &ly->kv_b));
    WNA16_TRY(lin(d, m, r, L, "o_proj", WNA16_TP_ROW, 0, H, hp * a->v, &ly->o));
    return kv_b_transpose(d, m, ly, hp);
}

void wna16_mla_free(wna16_layer *ly) {
    wna16_lin *lins[] = {&ly->q_a, &ly->q_b, &ly->kv_a, &ly->kv_b};
    for (size_t i = 0; i < sizeof lins / sizeof *lins; i++) wna16_lin_free(lins[i]);
    wna16_free(ly->q_a_norm);
    wna16_free(ly->kv_a_norm);
    wna16_free(ly->kv_b_t);
}
