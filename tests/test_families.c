/* The dense families beyond Llama/Qwen3 on tiny random models whose configs
 * exercise what each adds (tools/gen_family_fixtures.py: transformers fp32
 * on the same weights): Qwen2 (q/k/v biases, YaRN), Mistral (a sliding
 * window shorter than the prompt), Gemma 3 (sandwich norms, GeGLU, q/k
 * norms, local/global layers with their own RoPE), Gemma 2 (soft-capping)
 * and Phi-3 (fused projections, LongRoPE past the original context,
 * partial rotary), bf16, compressed-tensors W4A16 and GPTQ v1 (the same
 * integers as W4A16: its reference): last-position logits within 1 % of
 * max|logit|, the same 32 greedy tokens, and TP=2 the same as TP=1. A fused
 * projection that cannot split is refused up front, naming its part. */
#include "core/common.h"
#include "parallel/shard.h"
#include "testing.h"
#include "wna16.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static wna16_ctx *ctx;

typedef struct reference {
    json_t *root;
    int32_t prompt[64];
    size_t n_prompt;
    float logits[4096];
    size_t vocab;
    int32_t greedy[64];
    size_t n_greedy;
} reference;

static bool load_reference(const char *dir, reference *r) {
    char path[512];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    r->root = json_load_file(path, 0, NULL);
    if (!r->root) return false;
    json_t *p = json_object_get(r->root, "prompt_ids"),
           *l = json_object_get(r->root, "logits_last"),
           *g = json_object_get(r->root, "greedy_new_tokens");
    r->n_prompt = json_array_size(p);
    r->vocab = json_array_size(l);
    r->n_greedy = json_array_size(g);
    if (r->n_prompt > 64 || r->vocab > 4096 || r->n_greedy > 64) return false;
    for (size_t i = 0; i < r->n_prompt; i++)
        r->prompt[i] = (int32_t)json_integer_value(json_array_get(p, i));
    for (size_t i = 0; i < r->vocab; i++)
        r->logits[i] = (float)json_number_value(json_array_get(l, i));
    for (size_t i = 0; i < r->n_greedy; i++)
        r->greedy[i] = (int32_t)json_integer_value(json_array_get(g, i));
    return true;
}

static int32_t argmax(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

/* Greedy continuation without EOS stops, as the reference was made. */
static bool greedy(wna16_model *m, const reference *r, float *logits, int32_t *out) {
    wna16_model_reset(m);
    if (wna16_model_eval(ctx, m, r->prompt, (int64_t)r->n_prompt, logits) != WNA16_OK) return false;
    for (size_t i = 0; i < r->n_greedy; i++) {
        out[i] = argmax(logits, r->vocab);
        if (i + 1 < r->n_greedy && wna16_model_eval(ctx, m, &out[i], 1, logits) != WNA16_OK)
            return false;
    }
    return true;
}

static void check_family(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/data/models/%s", name);
    reference r;
    CHECK_MSG(load_reference(dir, &r), "%s: reference.json", name);
    wna16_model *m = NULL;
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.tp = 1;
    o.context = 128;
    wna16_status s = wna16_model_load(ctx, dir, &o, &m);
    CHECK_MSG(s == WNA16_OK, "%s: %s %s", name, wna16_status_str(s), wna16_ctx_error(ctx));
    if (s != WNA16_OK) {
        json_decref(r.root);
        return;
    }
    float logits[4096];
    int32_t tokens[64], tokens2[64];
    wna16_model_reset(m);
    CHECK(wna16_model_eval(ctx, m, r.prompt, (int64_t)r.n_prompt, logits) == WNA16_OK);
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < r.vocab; i++) {
        max_ref = fmax(max_ref, fabs(r.logits[i]));
        max_diff = fmax(max_diff, fabs(logits[i] - r.logits[i]));
    }
    printf("%-14s max|dlogit| %.5f (%.3f %% of max|logit| %.3f)\n", name, max_diff,
           100 * max_diff / max_ref, max_ref);
    CHECK_MSG(max_diff <= 1e-2 * max_ref, "%s: max|dlogit| %g > 1e-2 x %g", name, max_diff,
              max_ref);
    CHECK(greedy(m, &r, logits, tokens));
    CHECK_MSG(!memcmp(tokens, r.greedy, r.n_greedy * sizeof *tokens),
              "%s: greedy tokens differ from transformers", name);
    wna16_model_free(m);
    o.tp = 2;
    s = wna16_model_load(ctx, dir, &o, &m);
    CHECK_MSG(s == WNA16_OK, "%s TP=2: %s", name, wna16_ctx_error(ctx));
    if (s == WNA16_OK) {
        CHECK(greedy(m, &r, logits, tokens2));
        CHECK_MSG(!memcmp(tokens, tokens2, r.n_greedy * sizeof *tokens),
                  "%s: TP=2 greedy differs from TP=1", name);
        wna16_model_free(m);
    }
    json_decref(r.root);
}

/* Phi-3's fused projections are planned part by part, with the refusals
 * of unfused ones naming the part: an asymmetric int4 gate_up_proj with
 * I = 24 splits at TP=2 into 12 rows a rank, which cut a word of eight
 * packed zero points; at TP=3 its 8 rows a rank are whole words. */
static void check_fused_split(void) {
    wna16_diag d = {0};
    wna16_shard_request r = {.layer = "model.layers.0.mlp.gate_up_proj",
                             .role = WNA16_TP_MERGED_COLUMN, .out = 48, .in = 64, .bits = 4,
                             .group_size = 32, .symmetric = false, .tp = 2, .rank = 0,
                             .part_begin = 24, .part_rows = 24, .part = "up"};
    wna16_shard_slice s;
    CHECK(wna16_shard_plan(&d, &r, &s) == WNA16_ERR_TP_INDIVISIBLE);
    CHECK_MSG(strstr(d.detail, "gate_up_proj' (merged column-parallel, its up part") &&
                  strstr(d.detail, "use a TP degree that leaves a multiple of 8"),
              "refusal: %s", d.detail);
    r.tp = 3;
    for (int rank = 0; rank < 3; rank++) {
        r.rank = rank;
        CHECK(wna16_shard_plan(&d, &r, &s) == WNA16_OK);
        CHECK(s.row_begin == 24 + 8 * rank && s.row_count == 8 && s.zp_row_begin == 3 + rank &&
              s.zp_row_count == 1);
    }
    r.role = WNA16_TP_FUSED_GATE_UP; /* the whole fused weight is never planned as one */
    r.part_rows = 0;
    CHECK(wna16_shard_plan(&d, &r, &s) == WNA16_ERR_INVALID_ARGUMENT);
    /* a loaded model: Phi-3's 4 q heads of qkv_proj do not split over 8 ranks */
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.context = 64;
    o.tp = 8;
    wna16_model *m = NULL;
    CHECK_STATUS(ctx, wna16_model_load(ctx, "tests/data/models/phi3_bf16", &o, &m),
                 WNA16_ERR_TP_INDIVISIBLE, "qkv_proj' (qkv (q heads), its q part");
    CHECK(m == NULL);
}

/* A copy of the llama_bf16 fixture in build/, with config.json's
 * architecture and generation_config.json replaced. */
static const char *fixture_copy(const char *arch, const char *gen_config) {
    static const char *dir = "build/families-case";
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s && cp tests/data/models/llama_bf16/* %s/ && sed -i "
             "'s/LlamaForCausalLM/%s/' %s/config.json",
             dir, dir, dir, arch, dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s/generation_config.json", dir);
    FILE *f = fopen(cmd, "w");
    if (f) {
        fputs(gen_config, f);
        fclose(f);
    }
    return dir;
}

/* generation_config.json's sampling keys reach wna16_model_generation_defaults;
 * a bad one fails the load naming the key. */
static void check_generation_defaults(void) {
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.context = 32;
    wna16_model *m = NULL;
    const char *dir = fixture_copy("LlamaForCausalLM",
                                   "{\"do_sample\": true, \"temperature\": 0.7, \"top_p\": 0.8, "
                                   "\"top_k\": 20, \"repetition_penalty\": 1.1, \"eos_token_id\": 2}");
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_OK, NULL);
    if (m) {
        wna16_generation_defaults g;
        wna16_model_generation_defaults(m, &g);
        CHECK(g.set == (WNA16_GEN_TEMPERATURE | WNA16_GEN_TOP_P | WNA16_GEN_TOP_K |
                        WNA16_GEN_REPETITION_PENALTY | WNA16_GEN_DO_SAMPLE));
        CHECK(g.do_sample && g.sampler.temperature == 0.7f && g.sampler.top_p == 0.8f &&
              g.sampler.top_k == 20 && g.sampler.repetition_penalty == 1.1f &&
              g.sampler.min_p == 0.0f);
        wna16_model_free(m);
    }
    dir = fixture_copy("LlamaForCausalLM", "{\"eos_token_id\": 2}");
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_OK, NULL);
    if (m) {
        wna16_generation_defaults g;
        wna16_model_generation_defaults(m, &g);
        CHECK(g.set == 0 && !g.do_sample && g.sampler.temperature == 0.0f &&
              g.sampler.top_k == -1 && g.sampler.top_p == 1.0f);
        wna16_model_free(m);
    }
    dir = fixture_copy("LlamaForCausalLM", "{\"top_p\": 2}");
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_ERR_CONFIG_INVALID,
                 "generation_config.json: \"top_p\" must be a number in [0, 1]");
    CHECK(m == NULL);
}

/* inspect and load agree: an architecture load refuses is not loadable
 * for inspect either (exit 1, the supported list shown). */
static void check_inspect_agrees(void) {
    const char *dir = fixture_copy("GPT2LMHeadModel", "{}");
    char args[600], out[8192];
    snprintf(args, sizeof args, "inspect %s", dir);
    int rc = test_run_cli(args, out, sizeof out, 0);
    CHECK_MSG(rc == 1 && strstr(out, "NOT SUPPORTED: wna16 runs Qwen3MoeForCausalLM"),
              "inspect of a GPT2LMHeadModel exits %d: %s", rc, out);
    snprintf(args, sizeof args, "inspect --json %s", dir);
    rc = test_run_cli(args, out, sizeof out, 0);
    CHECK_MSG(rc == 1 && strstr(out, "\"architecture_supported\": false") &&
                  strstr(out, "\"loadable\": false"),
              "inspect --json: %s", out);
    wna16_model_options o;
    wna16_model_options_init(&o);
    wna16_model *m = NULL;
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_ERR_UNSUPPORTED,
                 "architecture \"GPT2LMHeadModel\" is not supported (Qwen3MoeForCausalLM");
    /* the multimodal checkpoint's text model runs; wna16 quantize refuses it */
    snprintf(args, sizeof args,
             "quantize --model tests/data/models/gemma3_mm_bf16 --out build/families-mm-q "
             "--group-size 32 --method rtn --no-progress");
    rc = test_run_cli(args, out, sizeof out, 1);
    CHECK_MSG(rc != 0 && strstr(out, "is a multimodal checkpoint (Gemma3ForConditionalGeneration); "
                                     "wna16 quantize takes text models only"),
              "quantize of a multimodal checkpoint exits %d: %s", rc, out);
    snprintf(args, sizeof args, "inspect tests/data/models/phi3_w4a16 --tp 1");
    CHECK_MSG(test_run_cli(args, out, sizeof out, 0) == 0, "inspect phi3: %s", out);
}

/* Mistral's every layer attends over a window of 8: through a paged cache
 * a sequence keeps only the blocks of the next query's window (and the one
 * before it), its logits equal the model's own full cache's step for step,
 * and a second sequence reusing a prefix from the prefix cache (blocks the
 * first one gave back) computes the same logits again. */
static void check_window_blocks(void) {
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.context = 128;
    wna16_model *m = NULL;
    CHECK_STATUS(ctx, wna16_model_load(ctx, "tests/data/models/mistral_bf16", &o, &m), WNA16_OK,
                 NULL);
    if (!m) return;
    wna16_kv_cache_options co;
    wna16_kv_cache_options_init(&co);
    co.max_seqs = 2;
    co.n_blocks = 8;
    co.prefix_caching = true;
    wna16_kv_cache *c = NULL;
    CHECK_STATUS(ctx, wna16_kv_cache_create(ctx, m, &co, &c), WNA16_OK, NULL);
    enum { N = 100, CHUNK = 8, V = 512 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % V;
    float got[V], want[V];
    bool same = true;
    int64_t most_used = 0;
    wna16_model_reset(m);
    for (int at = 0; c && at < N; at += CHUNK) {
        wna16_batch_token rows[CHUNK];
        for (int j = 0; j < CHUNK; j++) rows[j] = (wna16_batch_token){ids[at + j], 0, j == CHUNK - 1};
        CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, CHUNK, got), WNA16_OK, NULL);
        CHECK_STATUS(ctx, wna16_model_eval(ctx, m, ids + at, CHUNK, want), WNA16_OK, NULL);
        same &= !memcmp(got, want, sizeof got);
        wna16_kv_cache_stats st;
        wna16_kv_cache_get_stats(c, &st);
        if (st.blocks_used > most_used) most_used = st.blocks_used;
        if (at + CHUNK > N - CHUNK) break;
    }
    CHECK_MSG(same, "windowed paged cache: logits differ from the full cache");
    CHECK_MSG(most_used <= 3, "a 96-position sequence with window 8 held %lld blocks",
              (long long)most_used);
    int64_t reused = 0;
    CHECK_STATUS(ctx, wna16_kv_cache_seq_reuse(ctx, c, 1, ids, 40, &reused), WNA16_OK, NULL);
    CHECK_MSG(reused == 32, "prefix reuse of 40 tokens: %lld positions", (long long)reused);
    wna16_batch_token rows[8];
    for (int j = 0; j < 8; j++) rows[j] = (wna16_batch_token){ids[32 + j], 1, j == 7};
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, 8, got), WNA16_OK, NULL);
    wna16_model_reset(m);
    CHECK_STATUS(ctx, wna16_model_eval(ctx, m, ids, 40, want), WNA16_OK, NULL);
    CHECK_MSG(!memcmp(got, want, sizeof got), "prefix-cached windowed sequence differs");
    wna16_kv_cache_free(c);
    wna16_model_free(m);
}

int main(void) {
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    static const char *const names[] = {
        "qwen2_bf16",   "qwen2_w4a16",   "qwen2_gptq",  "mistral_bf16", "mistral_w4a16",
        "mistral_gptq", "gemma3_bf16",   "gemma3_w4a16", "gemma3_gptq", "gemma2_bf16",
        "gemma2_w4a16", "gemma2_gptq",   "phi3_bf16",   "phi3_w4a16",   "phi3_gptq",
        "gemma3_mm_bf16", /* Gemma3ForConditionalGeneration: its text model */
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) check_family(names[i]);
    check_fused_split();
    check_generation_defaults();
    check_window_blocks();
    check_inspect_agrees();
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
