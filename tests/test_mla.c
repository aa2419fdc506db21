/* DeepSeek-V3 (Kimi-K2's graph) on a tiny random model whose config
 * exercises what the family adds (tools/gen_deepseek_fixture.py:
 * transformers fp32 on the compressed-tensors decompression; routed experts
 * int4 g32, the rest bf16 through the ignore list): latent attention with q
 * LoRA, decoupled and interleaved RoPE, v_head_dim != the key's, YaRN with
 * its softmax mscale, a dense first layer, grouped sigmoid routing with a
 * correction bias and a shared expert. Last-position logits within 1 % of
 * max|logit|, the same 32 greedy tokens (decode in the absorbed form), TP=2
 * the same as TP=1, the absorbed decode within a bound of the expanded form
 * step for step, the cache holding (kv_lora + rope) values per token and
 * layer, and a prefix reused from the prefix cache giving the same logits.
 * DeepSeek-V2 (a plain q_proj, softmax group_limited_greedy routing, two
 * shared experts) against its own fixture the same way. */
#include "model/synth.h"
#include "runtime/runtime.h"
#include "fixture_ref.h"
#include "testing.h"
#include "wna16.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIR "tests/data/models/deepseek_v3_w4a16"

static wna16_ctx *ctx;

static wna16_model *load_dir(const char *dir, int tp) {
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.tp = tp;
    o.context = 128;
    wna16_model *m = NULL;
    wna16_status s = wna16_model_load(ctx, dir, &o, &m);
    CHECK_MSG(s == WNA16_OK, "%s TP=%d: %s %s", dir, tp, wna16_status_str(s), wna16_ctx_error(ctx));
    return m;
}

static wna16_model *load(int tp) { return load_dir(DIR, tp); }

/* The prompt, then the greedy tokens one at a time (no EOS stop); every
 * step's logits into steps[n_greedy][V] when non-NULL. */
static bool greedy(wna16_model *m, int32_t *out, float *steps) {
    float logits[V];
    wna16_model_reset(m);
    if (wna16_model_eval(ctx, m, prompt, (int64_t)n_prompt, logits) != WNA16_OK) return false;
    for (size_t i = 0; i < n_greedy; i++) {
        if (steps) memcpy(steps + i * V, logits, sizeof logits);
        out[i] = argmax(logits);
        if (i + 1 < n_greedy && wna16_model_eval(ctx, m, &out[i], 1, logits) != WNA16_OK)
            return false;
    }
    return true;
}

/* Layer 0's attention output (o_proj's bf16 input) of the first decode
 * step, absorbed and expanded, from the same state: equal but for a bf16
 * rounding of values that differ in fp32's last bits. */
typedef struct capture {
    float o_in[4 * 24];
    bool got;
} capture;

static void observe_o_in(void *user, int64_t layer, const char *what, int64_t rows, int64_t cols,
                         const float *x) {
    capture *c = user;
    if (layer == 0 && !strcmp(what, "o_in") && rows == 1 && cols == 4 * 24) {
        memcpy(c->o_in, x, sizeof c->o_in);
        c->got = true;
    }
}

static void check_first_decode(wna16_model *m) {
    capture cap[2] = {0};
    float logits[V];
    for (int expanded = 0; expanded < 2; expanded++) {
        wna16_forward_hooks h = {.user = &cap[expanded], .observe = observe_o_in,
                                 .last_layer = -1, .mla_expand_all = expanded};
        wna16_model_reset(m);
        CHECK(wna16_model_eval(ctx, m, prompt, (int64_t)n_prompt, logits) == WNA16_OK);
        wna16_runtime_set_hooks(m, &h);
        CHECK(wna16_model_eval(ctx, m, &want_greedy[0], 1, logits) == WNA16_OK);
        wna16_runtime_set_hooks(m, NULL);
    }
    CHECK(cap[0].got && cap[1].got);
    double worst = 0, top = 0;
    for (int i = 0; i < 4 * 24; i++) {
        worst = fmax(worst, fabs(cap[0].o_in[i] - cap[1].o_in[i]));
        top = fmax(top, fabs(cap[1].o_in[i]));
    }
    printf("first decode, layer 0 attention: absorbed - expanded %.2e of %.3f\n", worst, top);
    CHECK_MSG(top > 0 && worst <= top / 128, "absorbed attention off by %g of %g", worst, top);
}

static float steps_absorbed[N_MAX * V], steps_expanded[N_MAX * V];

static void check_reference(const char *dir) {
    CHECK_MSG(load_reference(dir), "%s/reference.json", dir);
    wna16_model *m = load_dir(dir, 1);
    if (!m) return;
    float logits[V];
    wna16_model_reset(m);
    CHECK(wna16_model_eval(ctx, m, prompt, (int64_t)n_prompt, logits) == WNA16_OK);
    double ref = max_abs(want_logits), diff = max_diff(logits, want_logits);
    printf("%s max|dlogit| %.5f (%.3f %% of max|logit| %.3f)\n", dir, diff,
           100 * diff / ref, ref);
    CHECK_MSG(diff <= 1e-2 * ref, "max|dlogit| %g > 1e-2 x %g", diff, ref);
    int32_t tokens[N_MAX], tokens2[N_MAX];
    CHECK(greedy(m, tokens, steps_absorbed));
    CHECK_MSG(!memcmp(tokens, want_greedy, n_greedy * sizeof *tokens),
              "greedy tokens differ from transformers");
    /* the same steps with every row expanded: the absorbed decode's bound */
    wna16_forward_hooks expand = {.last_layer = -1, .mla_expand_all = true};
    wna16_runtime_set_hooks(m, &expand);
    CHECK(greedy(m, tokens2, steps_expanded));
    wna16_runtime_set_hooks(m, NULL);
    double worst = 0;
    for (size_t i = 1; i < n_greedy; i++) {
        double d = max_diff(steps_absorbed + i * V, steps_expanded + i * V);
        worst = fmax(worst, d / max_abs(steps_expanded + i * V));
    }
    printf("absorbed vs expanded decode: worst max|dlogit| %.2e of max|logit|\n", worst);
    CHECK_MSG(worst <= 1e-2, "absorbed decode off the expanded form by %g", worst);
    check_first_decode(m);
    CHECK_MSG(!memcmp(tokens, tokens2, n_greedy * sizeof *tokens),
              "expanded decode's greedy tokens differ");
    /* the cache: (kv_lora + rope) bf16 values per token and layer */
    size_t per_block = wna16_kv_cache_block_bytes(m);
    CHECK_MSG(per_block == (size_t)3 * WNA16_KV_BLOCK * (32 + 8) * 2,
              "KV block bytes %zu; expected 3 layers x 16 x (32 + 8) x 2", per_block);
    wna16_model_free(m);
    m = load_dir(dir, 2);
    if (!m) return;
    CHECK(greedy(m, tokens2, NULL));
    CHECK_MSG(!memcmp(tokens, tokens2, n_greedy * sizeof *tokens), "TP=2 greedy differs from TP=1");
    CHECK_MSG(wna16_kv_cache_block_bytes(m) == 2 * per_block,
              "TP=2 keeps the latent on both ranks: %zu", wna16_kv_cache_block_bytes(m));
    wna16_model_free(m);
}

/* A paged cache of two sequences: the first's chunks and the second's
 * reuse of its prefix (blocks from the prefix cache) give the model's own
 * logits; decode rows of both sequences in one step (each absorbed). */
static void check_paged(void) {
    wna16_model *m = load(1);
    if (!m) return;
    wna16_kv_cache_options co;
    wna16_kv_cache_options_init(&co);
    co.max_seqs = 2;
    co.n_blocks = 8;
    co.prefix_caching = true;
    wna16_kv_cache *c = NULL;
    CHECK_STATUS(ctx, wna16_kv_cache_create(ctx, m, &co, &c), WNA16_OK, NULL);
    enum { N = 40, CHUNK = 8 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % V;
    float got[2 * V], want[V];
    bool same = true;
    wna16_model_reset(m);
    for (int at = 0; c && at < N; at += CHUNK) {
        wna16_batch_token rows[CHUNK];
        for (int j = 0; j < CHUNK; j++) rows[j] = (wna16_batch_token){ids[at + j], 0, j == CHUNK - 1};
        CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, CHUNK, got), WNA16_OK, NULL);
        CHECK_STATUS(ctx, wna16_model_eval(ctx, m, ids + at, CHUNK, want), WNA16_OK, NULL);
        same &= max_diff(got, want) <= 1e-5 * max_abs(want);
    }
    CHECK_MSG(same, "paged cache: logits differ from the model's own cache");
    int64_t reused = 0;
    CHECK_STATUS(ctx, wna16_kv_cache_seq_reuse(ctx, c, 1, ids, 36, &reused), WNA16_OK, NULL);
    CHECK_MSG(reused == 32, "prefix reuse of 36 tokens: %lld positions", (long long)reused);
    wna16_batch_token rows[4];
    for (int j = 0; j < 4; j++) rows[j] = (wna16_batch_token){ids[32 + j], 1, j == 3};
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, 4, got), WNA16_OK, NULL);
    wna16_model_reset(m);
    CHECK_STATUS(ctx, wna16_model_eval(ctx, m, ids, 36, want), WNA16_OK, NULL);
    CHECK_MSG(max_diff(got, want) <= 1e-5 * max_abs(want),
              "prefix-cached sequence differs by %g", max_diff(got, want));
    /* one decode row of each sequence in one step */
    wna16_batch_token two[2] = {{7, 0, true}, {9, 1, true}};
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, two, 2, got), WNA16_OK, NULL);
    int32_t seq0[N + 1], seq1[37];
    memcpy(seq0, ids, sizeof ids);
    seq0[N] = 7;
    memcpy(seq1, ids, 36 * sizeof *ids);
    seq1[36] = 9;
    wna16_model_reset(m);
    CHECK_STATUS(ctx, wna16_model_eval(ctx, m, seq0, N + 1, want), WNA16_OK, NULL);
    CHECK_MSG(max_diff(got, want) <= 2e-3 * max_abs(want), "batched decode, sequence 0");
    wna16_model_reset(m);
    CHECK_STATUS(ctx, wna16_model_eval(ctx, m, seq1, 37, want), WNA16_OK, NULL);
    CHECK_MSG(max_diff(got + V, want) <= 2e-3 * max_abs(want), "batched decode, sequence 1");
    wna16_kv_cache_free(c);
    wna16_model_free(m);
}

/* The fixture in build/ with config.json edited by a sed expression. */
static const char *edited_copy(const char *sed) {
    static const char *dir = "build/mla-case";
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s && cp " DIR "/* %s/ && sed -i -e '%s' %s/config.json", dir,
             dir, dir, sed, dir);
    CHECK(system(cmd) == 0);
    return dir;
}

/* fp8 block-quantized releases, a DeepSeek config without its latent
 * sizes, and routing it does not know are refused saying why. */
static void check_refusals(void) {
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.context = 64;
    wna16_model *m = NULL;
    const char *dir = edited_copy("s/\"quant_method\": \"compressed-tensors\"/\"quant_method\": "
                                  "\"fp8\", \"weight_block_size\": [128, 128]/");
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_ERR_UNSUPPORTED_SCHEME,
                 "quant_method \"fp8\" (block-quantized fp8 weights) is not supported");
    CHECK(m == NULL);
    dir = edited_copy("/\"kv_lora_rank\"/d");
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_ERR_SHAPE_MISMATCH,
                 "kv_b_proj' is [out=160, in=32] but config.json implies");
    CHECK(m == NULL);
    dir = edited_copy("s/\"n_group\": 4/\"topk_method\": \"bogus\", \"n_group\": 4/");
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_ERR_UNSUPPORTED,
                 "topk_method \"bogus\" is not supported (greedy, group_limited_greedy, noaux_tc)");
    CHECK(m == NULL);
    dir = edited_copy("s/\"n_group\": 4/\"n_group\": 3/");
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_ERR_INVALID_ARGUMENT,
                 "n_group must divide the experts");
    CHECK(m == NULL);
}

/* inspect reports the latent sizes and the cache's bytes per token, and
 * splits the heads at TP=2. */
static void check_inspect(void) {
    wna16_checkpoint *ck = NULL;
    CHECK_STATUS(ctx, wna16_checkpoint_open(ctx, DIR, &ck), WNA16_OK, NULL);
    if (!ck) return;
    char *text = NULL;
    bool ok = false;
    int tp[] = {1, 2};
    CHECK_STATUS(ctx, wna16_checkpoint_report(ctx, ck, tp, 2, false, &text, &ok), WNA16_OK, NULL);
    CHECK_MSG(ok && text && strstr(text, "KV latent 32, head dims nope 16 rope 8 v 24") &&
                  strstr(text, "KV cache        240 bytes per token"),
              "inspect: %s", text ? text : "(none)");
    wna16_free(text);
    wna16_checkpoint_close(ck);
}

/* The synth writer's DeepSeek layout (the kimi-k2 preset's, at small
 * sizes, with a plain q_proj): it loads, and TP=2 (heads and experts
 * split) decodes the tokens TP=1 does. The preset itself is Kimi-K2's. */
static void check_synth(void) {
    wna16_synth_spec o;
    CHECK(wna16_synth_spec_preset("kimi-k2", &o));
    CHECK(o.hidden == 7168 && o.experts == 384 && o.top_k == 8 && o.kv_lora == 512 &&
          o.rope == 64 && o.q_lora == 1536 && o.group_size == 32 && o.first_dense == 1);
    o.hidden = 128, o.layers = 3, o.heads = 4, o.kv_heads = 4, o.head_dim = 16;
    o.intermediate = 256, o.moe_intermediate = 64, o.experts = 8, o.top_k = 2;
    o.vocab = V, o.max_positions = 256, o.q_lora = 0, o.kv_lora = 64, o.nope = 32, o.rope = 16;
    o.v_head = 32, o.n_group = 4, o.topk_group = 2, o.layers_per_shard = 0;
    const char *dir = "build/mla-synth";
    CHECK(system("rm -rf build/mla-synth") == 0);
    wna16_diag d = {0};
    CHECK_MSG(wna16_synth_spec_write(&d, &o, dir) == WNA16_OK, "synth: %s", d.detail);
    int32_t tok[2][8];
    for (int tp = 1; tp <= 2; tp++) {
        wna16_model_options mo;
        wna16_model_options_init(&mo);
        mo.tp = tp;
        mo.context = 64;
        wna16_model *m = NULL;
        wna16_status s = wna16_model_load(ctx, dir, &mo, &m);
        CHECK_MSG(s == WNA16_OK, "synth TP=%d: %s", tp, wna16_ctx_error(ctx));
        if (!m) return;
        float logits[V];
        int32_t next = 1;
        wna16_model_reset(m);
        for (int i = 0; i < 8; i++) {
            CHECK(wna16_model_eval(ctx, m, &next, 1, logits) == WNA16_OK);
            tok[tp - 1][i] = next = argmax(logits);
        }
        wna16_model_free(m);
    }
    CHECK_MSG(!memcmp(tok[0], tok[1], sizeof tok[0]), "synth: TP=2 tokens differ from TP=1");
}

int main(void) {
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    /* V2: a plain q_proj, softmax group_limited_greedy routing, no renormalisation */
    check_reference("tests/data/models/deepseek_v2_w4a16");
    check_reference(DIR);
    check_paged();
    check_refusals();
    check_synth();
    check_inspect();
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
