/* Options structs that grow without breaking callers (struct_size and the
 * _init functions, include/wna16.h) and wna16_free for what the library
 * hands out. */
#include <stddef.h>
#include <stdint.h>

#include "testing.h"
#include "wna16.h"

static const char *const MODEL = "tests/data/models/qwen3_w4a16";

static void test_init_defaults(void) {
    wna16_model_options mo;
    memset(&mo, 0xab, sizeof mo);
    wna16_model_options_init(&mo);
    CHECK(mo.struct_size == sizeof mo && mo.tp == 0 && mo.threads == 0 && mo.context == 0 &&
          mo.comm == NULL);
    wna16_sampler_options so;
    memset(&so, 0xab, sizeof so);
    wna16_sampler_options_init(&so);
    CHECK(so.struct_size == sizeof so && so.temperature == 0 && so.top_p == 1 && so.top_k == -1 &&
          so.min_p == 0 && so.repetition_penalty == 1 && so.seed == 0);
    wna16_generate_options go;
    memset(&go, 0xab, sizeof go);
    wna16_generate_options_init(&go);
    CHECK(go.struct_size == sizeof go && go.max_tokens == 16 && go.n_stop == 0 && !go.stop &&
          !go.on_text && go.sampler.struct_size == sizeof so && go.sampler.top_k == -1);
    wna16_model_options_init(NULL); /* ignored */
}

static void test_sizes(void) {
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    /* a header newer than the library: refused, saying what to do */
    wna16_sampler_options so;
    wna16_sampler_options_init(&so);
    so.struct_size = sizeof so + 8;
    CHECK_STATUS(ctx, wna16_sampler_check(ctx, &so), WNA16_ERR_INVALID_ARGUMENT,
                 "compiled against a newer wna16.h");
    float logits[4] = {0, 3, 1, 2};
    uint64_t rng = 1;
    CHECK(wna16_sample(&so, logits, 4, NULL, 0, &rng) == -1);
    so.struct_size = 3; /* not even the size field */
    CHECK_STATUS(ctx, wna16_sampler_check(ctx, &so), WNA16_ERR_INVALID_ARGUMENT, "struct_size 3");
    /* an older caller: fields past its struct_size are not read (top_k and
     * seed come after repetition_penalty), so garbage there is harmless */
    wna16_sampler_options_init(&so);
    so.top_k = -7;
    CHECK_STATUS(ctx, wna16_sampler_check(ctx, &so), WNA16_ERR_INVALID_ARGUMENT, "top_k -7");
    so.struct_size = offsetof(wna16_sampler_options, top_k);
    CHECK_STATUS(ctx, wna16_sampler_check(ctx, &so), WNA16_OK, NULL);
    CHECK(wna16_sample(&so, logits, 4, NULL, 0, &rng) == 1);
    /* 0: this header's layout (zeroed structs keep working) */
    wna16_sampler_options zero = {0};
    CHECK_STATUS(ctx, wna16_sampler_check(ctx, &zero), WNA16_OK, NULL);

    wna16_model_options mo;
    wna16_model_options_init(&mo);
    mo.struct_size = sizeof mo * 2;
    wna16_model *m = NULL;
    CHECK_STATUS(ctx, wna16_model_load(ctx, MODEL, &mo, &m), WNA16_ERR_INVALID_ARGUMENT,
                 "model options: struct_size");
    CHECK(m == NULL);
    wna16_model_options_init(&mo);
    mo.threads = 1;
    CHECK_STATUS(ctx, wna16_model_load(ctx, MODEL, &mo, &m), WNA16_OK, NULL);
    wna16_model_free(m);
    CHECK_STATUS(ctx, wna16_model_load(ctx, MODEL, NULL, &m), WNA16_OK, NULL); /* NULL: defaults */
    wna16_model_free(m);
    CHECK_STATUS(ctx, wna16_model_load(ctx, MODEL, &mo, &m), WNA16_OK, NULL);
    wna16_generate_options go;
    wna16_generate_options_init(&go);
    go.max_tokens = 3;
    wna16_generate_result r;
    const int32_t prompt[] = {1, 2, 3};
    CHECK_STATUS(ctx, wna16_generate(ctx, m, NULL, prompt, 3, &go, &r), WNA16_OK, NULL);
    CHECK(r.generated == 3);
    wna16_generate_result_free(&r);
    go.struct_size = sizeof go + 1;
    CHECK_STATUS(ctx, wna16_generate(ctx, m, NULL, prompt, 3, &go, &r), WNA16_ERR_INVALID_ARGUMENT,
                 "generate options: struct_size");
    wna16_model_free(m);
    wna16_ctx_free(ctx);
}

static void test_free(void) {
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    wna16_tokenizer *tok = NULL;
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, "tests/data/tokenizer/qwen3", &tok), WNA16_OK, NULL);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_STATUS(ctx, wna16_tokenizer_encode(ctx, tok, "hello world", 11, 0, &ids, &n), WNA16_OK, NULL);
    CHECK(n == 2);
    char *text = NULL;
    CHECK_STATUS(ctx, wna16_tokenizer_decode(ctx, tok, ids, n, false, &text, NULL), WNA16_OK, NULL);
    CHECK(text && !strcmp(text, "hello world"));
    wna16_free(ids);
    wna16_free(text);
    wna16_free(NULL);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
}

static void test_quantize(void) {
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    char dir[] = "/tmp/wna16_test_qapi_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char out[sizeof dir + 8];
    snprintf(out, sizeof out, "%s/q", dir);
    wna16_quantize_options qo;
    wna16_quantize_options_init(&qo);
    CHECK(qo.struct_size == sizeof qo && !strcmp(qo.scheme, "W4A16") && qo.group_size == 128 &&
          !strcmp(qo.method, "gptq") && qo.num_samples == 128);
    qo.model = "tests/data/models/qwen3_bf16";
    qo.output = out;
    qo.scheme = "W4A8";
    CHECK_STATUS(ctx, wna16_quantize_model(ctx, &qo, NULL), WNA16_ERR_INVALID_ARGUMENT,
                 "scheme \"W4A8\"");
    qo.scheme = NULL; /* default */
    qo.actorder = "group";
    CHECK_STATUS(ctx, wna16_quantize_model(ctx, &qo, NULL), WNA16_ERR_RUNTIME_ACTORDER, "actorder");
    qo.actorder = NULL;
    qo.method = "rtn";
    qo.group_size = 32;
    qo.num_samples = 2;
    qo.seq_len = 16;
    char *report = NULL;
    CHECK_STATUS(ctx, wna16_quantize_model(ctx, &qo, &report), WNA16_OK, NULL);
    CHECK(report && strchr(report, '{') && strstr(report, "modules_quantized"));
    wna16_free(report);
    wna16_model *m = NULL;
    CHECK_STATUS(ctx, wna16_model_load(ctx, out, NULL, &m), WNA16_OK, NULL);
    wna16_model_free(m);
    /* the text summary `wna16 quantize` prints */
    snprintf(out, sizeof out, "%s/t", dir);
    qo.report_text = true;
    CHECK_STATUS(ctx, wna16_quantize_model(ctx, &qo, &report), WNA16_OK, NULL);
    CHECK(report && !strchr(report, '{') && strstr(report, "layer type") &&
          strstr(report, "left unquantized"));
    wna16_free(report);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    wna16_ctx_free(ctx);
}

/* What front ends report between library calls, the library's way. */
static void test_ctx_set_error(void) {
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_ctx_set_error(ctx, WNA16_ERR_OUT_OF_MEMORY, "logits: %d floats", 7),
                 WNA16_ERR_OUT_OF_MEMORY, "logits: 7 floats");
    CHECK(wna16_ctx_set_error(NULL, WNA16_ERR_IO, "x") == WNA16_ERR_IO);
    wna16_ctx_free(ctx);
}

static void test_synth(void) {
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    char dir[] = "/tmp/wna16_test_synth_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    wna16_synth_options so;
    memset(&so, 0xab, sizeof so);
    wna16_synth_options_init(&so);
    CHECK(so.struct_size == sizeof so && !strcmp(so.preset, "demo") && so.layers == 0 &&
          so.bits == 0 && so.group_size == 0 && so.seed == -1 && !so.asymmetric && !so.dense);
    so.preset = "nope";
    CHECK_STATUS(ctx, wna16_synth_write(ctx, &so, dir), WNA16_ERR_INVALID_ARGUMENT,
                 "preset \"nope\": expected demo, qwen3-30b-a3b or kimi-k2");
    so.preset = "kimi-k2";
    so.dense = true;
    CHECK_STATUS(ctx, wna16_synth_write(ctx, &so, dir), WNA16_ERR_INVALID_ARGUMENT,
                 "--dense writes a Qwen3ForCausalLM; preset \"kimi-k2\" is a MoE of its own");
    so.dense = false;
    so.preset = NULL; /* the default */
    so.bits = 5;
    CHECK_STATUS(ctx, wna16_synth_write(ctx, &so, dir), WNA16_ERR_INVALID_ARGUMENT,
                 "5 bits: expected 4, 8 or 16");
    so.bits = 8;
    so.group_size = -2;
    CHECK_STATUS(ctx, wna16_synth_write(ctx, &so, dir), WNA16_ERR_INVALID_ARGUMENT,
                 "group size -2");
    so.group_size = 0;
    so.layers = -1;
    CHECK_STATUS(ctx, wna16_synth_write(ctx, &so, dir), WNA16_ERR_INVALID_ARGUMENT,
                 "layers -1");
    CHECK_STATUS(ctx, wna16_synth_write(ctx, &so, NULL), WNA16_ERR_INVALID_ARGUMENT,
                 "no output directory");
    /* one W8A16 layer with a chosen seed loads */
    so.layers = 1;
    so.seed = 0;
    CHECK_STATUS(ctx, wna16_synth_write(ctx, &so, dir), WNA16_OK, NULL);
    wna16_model *m = NULL;
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, NULL, &m), WNA16_OK, NULL);
    wna16_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    wna16_ctx_free(ctx);
}

int main(void) {
    test_ctx_set_error();
    test_synth();
    test_quantize();
    test_init_defaults();
    test_sizes();
    test_free();
    TEST_MAIN_END();
}
