/* The quantizer: compressed-tensors min-max RTN (bit-exact with
 * CT 0.20.1), GPTQ as llm-compressor runs it (static act-order), and the
 * pack-quantized checkpoint writer. docs/quantizer.md. Internal API. */
#ifndef WNA16_QUANT_QUANT_H
#define WNA16_QUANT_QUANT_H

#include "core/common.h"

#include <jansson.h>

/* What one linear is quantized to. */
typedef struct wna16_qspec {
    int bits;           /* 4 or 8 */
    bool symmetric;
    int64_t group_size; /* > 0: group; -1: channel (one group of k) */
    wna16_dtype dtype;  /* the weight (and scale) dtype: BF16, F16 or F32 */
} wna16_qspec;

/* Columns per group for a k-column weight. */
static inline int64_t wna16_qspec_gs(const wna16_qspec *s, int64_t k) {
    return s->group_size > 0 ? s->group_size : k;
}

/* A quantized linear: signed q [n][k], scales [n][g] (values exactly
 * representable in spec.dtype) and signed zero points [n][g] (0 when
 * symmetric). */
typedef struct wna16_qlinear {
    int64_t n, k, n_groups;
    wna16_qspec spec;
    int8_t *q;
    float *scale;
    int8_t *zp;
} wna16_qlinear;

wna16_status wna16_qlinear_alloc(wna16_diag *d, const wna16_qspec *s, int64_t n, int64_t k,
                                 wna16_qlinear *out);
void wna16_qlinear_free(wna16_qlinear *q);
/* Dequantized value (q - zp) * s rounded to the dtype, as compressed-tensors
 * decompresses. */
float wna16_qlinear_value(const wna16_qlinear *q, int64_t o, int64_t c);

/* Rounds an fp32 value to the dtype (f32-op-then-round emulation). */
float wna16_round_dtype(wna16_dtype t, float x);

/* compressed-tensors' memoryless min-max observer + calculate_qparams in the
 * weight dtype: scales and zero points of every group of w [n][k] (w holds
 * values exact in spec.dtype). */
void wna16_quant_params(const wna16_qspec *s, const float *w, int64_t n, int64_t k, float *scale,
                        int8_t *zp);
/* RTN: CT's quantize of w with the observer's params (bit-exact). */
void wna16_quant_rtn(const float *w, wna16_qlinear *out);

/* GPTQ options. */
typedef struct wna16_gptq_opts {
    double dampening;  /* fraction of mean(diag H); 0.01 by default */
    bool actorder;     /* static act-order */
    int64_t blocksize; /* 128 */
    int threads;       /* for wna16_gptq_factor_build; <= 0: all */
} wna16_gptq_opts;

/* The inverse-Hessian factor of one H, shareable by every weight with the
 * same calibration inputs (q/k/v, gate/up, all experts' gate/up). */
typedef struct wna16_gptq_factor {
    int64_t k;
    int64_t *perm; /* processing order (identity without act-order) */
    bool *dead;    /* [k] original column index: H_ii == 0 */
    float *u;      /* [k][ldu] upper Cholesky factor of H^-1 (permuted space) */
    int64_t ldu;   /* >= k: rows padded so that the sweep's column tiles spread over the cache */
    bool fallback; /* H not positive definite: U = I (RTN), as llm-compressor */
} wna16_gptq_factor;

/* Builds the factor from H [k][k] fp32 (symmetric; consumed: overwritten).
 * Steps (llm-compressor quantize_weight): perm = argsort(diag H) descending
 * (stable), dead columns -> H_ii = 1, damp = frac * mean(diag H) added,
 * L = chol(H), H^-1, U = chol(H^-1) upper. */
wna16_status wna16_gptq_factor_build(wna16_diag *d, float *h, int64_t k,
                                     const wna16_gptq_opts *o, wna16_gptq_factor *out);
void wna16_gptq_factor_free(wna16_gptq_factor *f);

/* GPTQ of w [n][k] (fp32 values of the original weight; not modified) with
 * params from the original weights (computed here, once, before the sweep).
 * out must be allocated for (n, k). *loss: llm-compressor's loss
 * (sum of (w-q)^2/d^2 / 2). n_threads <= 0: all. */
wna16_status wna16_gptq_quantize(wna16_diag *d, const float *w, const wna16_gptq_factor *f,
                                 const wna16_gptq_opts *o, wna16_qlinear *out, double *loss,
                                 int n_threads);

/* H[k][k] += scale * X^T X for X [rows][k] fp32, upper triangle (j >= i;
 * wna16_gptq_factor_build reads only it). Each entry adds its terms in token
 * order, the same bits at any thread count. Threaded over column tiles. */
void wna16_hessian_add(float *h, int64_t k, const float *x, int64_t rows, int64_t ldx,
                       float scale, int n_threads);

/* ------------------------------------------------------------ writing */

struct wna16_st_writer;
/* Adds P.weight_packed, P.weight_scale, P.weight_shape and (asymmetric)
 * P.weight_zero_point to the writer; the tensor bytes are allocated and
 * appended to *owned (freed by the caller with wna16_quant_owned_free). */
typedef struct wna16_owned {
    void **ptrs;
    size_t n, cap;
    size_t bytes;
} wna16_owned;
void *wna16_owned_alloc(wna16_owned *o, size_t bytes);
void wna16_owned_free(wna16_owned *o);
wna16_status wna16_quant_emit(wna16_diag *d, struct wna16_st_writer *w, const char *prefix,
                              const wna16_qlinear *q, wna16_owned *owned);

/* The compressed-tensors 0.20.1 quantization_config object (key set as CT
 * writes it; actorder "static" when set). ignore: the explicit names of
 * the linears left unquantized. */
json_t *wna16_quant_config_json(const wna16_qspec *s, bool actorder_static, const char *const *ignore,
                                size_t n_ignore);

/* json.dumps(v, indent=2, sort_keys=True) exactly as Python writes it
 * (ensure_ascii, repr floats). Malloc'd (wna16_free). */
char *wna16_pyjson_dumps(const json_t *v);

/* ------------------------------------------------------- the pipeline */

typedef struct wna16_quantize_opts {
    const char *src, *dst;
    int bits;               /* 4 or 8 */
    bool symmetric;
    int64_t group_size;     /* 32/64/128, or -1 channel */
    bool gptq;              /* else RTN */
    bool actorder;          /* static act-order (GPTQ) */
    double dampening;       /* 0.01 */
    const char *calib_ids;  /* token ids (whitespace/comma separated), or NULL */
    const char *calib_text; /* UTF-8 text tokenized with SRC's tokenizer.json, or NULL */
    bool calib_random;      /* seeded random ids */
    uint64_t seed;
    int64_t samples, seq_len;
    const char *const *ignore; /* extra patterns (name, or re:REGEX) */
    size_t n_ignore;
    bool progress;          /* report progress to the context's callback */
    int threads;            /* 0: all */
    size_t max_shard_bytes; /* 0: 2 GiB */
    bool skip_indivisible;  /* leave linears whose input the group size does not divide
                               unquantized (else the run is refused before any work) */
    bool moe_reference;     /* tests: propagate MoE layers through the quantizer's own
                               MoE math instead of the runtime's fused layer */
} wna16_quantize_opts;

/* Error summary per layer type ("self_attn.q_proj", "experts.down_proj"). */
typedef struct wna16_qstat {
    char type[48];
    int64_t modules;
    double werr, wref; /* sum ||W - W_hat||^2, sum ||W||^2 */
    double loss;       /* GPTQ loss (llm-compressor's "error"), 0 for RTN */
} wna16_qstat;

typedef struct wna16_quantize_report {
    wna16_qstat *types;
    size_t n_types;
    int64_t layers, modules_quantized;
    double *layer_seconds; /* [layers] */
    double seconds;
    size_t peak_rss_bytes;
    char **ignored; /* the explicit ignore list written */
    size_t n_ignored;
    int shards;
    int64_t calib_tokens;
} wna16_quantize_report;

/* Runs a quantization. The context's abort callback (the CLI answers
 * SIGINT/SIGTERM with it) stops the run at the next layer, expert or sample
 * boundary with WNA16_ERR_ABORTED, and the temporary directory is removed. */
wna16_status wna16_quantize(wna16_diag *d, const wna16_quantize_opts *o, wna16_quantize_report *rep);
void wna16_quantize_report_free(wna16_quantize_report *r);
/* Text or JSON summary (malloc'd, wna16_free). */
char *wna16_quantize_report_format(const wna16_quantize_report *r, bool json);

#endif
