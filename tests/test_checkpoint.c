/* Checkpoints: dequantized weights equal compressed-tensors' own
 * decompression bit for bit (fixtures from tools/gen_ct_fixtures.py), the
 * refusal fixtures are refused, and every malformed model directory gives
 * its own status and a message naming what is wrong. */
#include "format/checkpoint.h"
#include "io/safetensors.h"
#include "testing.h"

#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

static wna16_ctx *ctx;
#define FIX "tests/data/ct/"

static void check_fixture(const char *name) {
    char dir[256], exp[300];
    snprintf(dir, sizeof dir, FIX "%s", name);
    snprintf(exp, sizeof exp, "%s/expected.safetensors", dir);
    wna16_checkpoint *ck = NULL;
    wna16_status s = wna16_checkpoint_open(ctx, dir, &ck);
    CHECK_MSG(s == WNA16_OK, "%s: %s %s", name, wna16_status_str(s), wna16_ctx_error(ctx));
    if (s != WNA16_OK) return;
    wna16_safetensors *want;
    CHECK(wna16_safetensors_open(ctx, exp, &want) == WNA16_OK);
    size_t n = wna16_safetensors_count(want), mismatched = 0;
    CHECK(n > 0);
    for (size_t i = 0; i < n; i++) {
        const wna16_tensor_view *v = wna16_safetensors_at(want, i);
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)(strlen(v->name) - strlen(".weight")),
                 v->name);
        uint16_t *got = malloc(v->nbytes);
        int64_t rows = 0, cols = 0;
        s = wna16_checkpoint_dequantize(ctx, ck, module, v->dtype, got, &rows, &cols);
        CHECK_MSG(s == WNA16_OK, "%s %s: %s", name, module, wna16_ctx_error(ctx));
        CHECK(rows == v->shape[0] && cols == v->shape[1]);
        if (s == WNA16_OK && memcmp(got, v->data, v->nbytes)) {
            mismatched++;
            fprintf(stderr, "%s: %s differs from compressed-tensors' decompression\n", name,
                    module);
        }
        free(got);
    }
    CHECK(mismatched == 0);
    wna16_safetensors_close(want);
    wna16_checkpoint_close(ck);
}

static void test_fixtures_bit_exact(void) {
    static const char *const ok[] = {
        "w4a16_sym_g32",     "w4a16_sym_g64",   "w4a16_sym_g128",      "w4a16_sym_channel",
        "w4a16_asym_g32",    "w4a16_asym_g128", "w4a16_asym_channel",  "w8a16_sym_g128",
        "w8a16_sym_channel", "w8a16_asym_g64",  "qwen3_moe_w4a16_g32", "g_idx_trivial",
        "gptq_v1_sym_g128",  "gptq_v1_asym_g64"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) check_fixture(ok[i]);
}

static void test_refusal_fixtures(void) {
    wna16_checkpoint *ck = NULL;
    CHECK_STATUS(ctx, wna16_checkpoint_open(ctx, FIX "actorder_group", &ck),
                 WNA16_ERR_RUNTIME_ACTORDER,
                 "runtime activation ordering (actorder=group) is not supported; re-quantize with "
                 "actorder=static (or none): it gives the same accuracy with no runtime cost");
    CHECK(ck == NULL);
    CHECK_STATUS(ctx, wna16_checkpoint_open(ctx, FIX "gptq_desc_act_nontrivial", &ck),
                 WNA16_ERR_RUNTIME_ACTORDER, "non-trivial g_idx");
    CHECK(strstr(wna16_ctx_error(ctx), "desc_act=true"));
}

static void test_inspect_moe(void) {
    wna16_checkpoint *ck = NULL;
    CHECK(wna16_checkpoint_open(ctx, FIX "qwen3_moe_w4a16_g32", &ck) == WNA16_OK);
    if (!ck) return;
    char *text = NULL;
    bool loadable = false;
    CHECK(wna16_checkpoint_report(ctx, ck, NULL, 0, false, &text, &loadable) == WNA16_OK);
    CHECK(loadable);
    CHECK(text && strstr(text, "Qwen3MoeForCausalLM") && strstr(text, "W4A16 sym g32") &&
          strstr(text, "8 per layer, top-2") && strstr(text, "TP=1   ok") &&
          strstr(text, "TP=2   REFUSED") && strstr(text, "I_p=16 (32 / 2)"));
    free(text);
    int tp2 = 2;
    CHECK(wna16_checkpoint_report(ctx, ck, &tp2, 1, true, &text, &loadable) == WNA16_OK);
    CHECK(!loadable);
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    CHECK(j != NULL);
    CHECK(json_integer_value(json_object_get(j, "num_experts")) == 8);
    json_t *sch = json_array_get(json_object_get(j, "schemes"), 0);
    CHECK(json_integer_value(json_object_get(sch, "modules")) == 56);
    CHECK(json_integer_value(json_object_get(sch, "group_size")) == 32);
    json_t *tp = json_array_get(json_object_get(j, "tp"), 0);
    CHECK(json_is_false(json_object_get(tp, "ok")));
    CHECK(json_array_size(json_object_get(j, "ignored")) == 3);
    json_decref(j);
    free(text);
    wna16_checkpoint_close(ck);
}

/* ---- malformed model directories ---------------------------------------- */

static char workdir[] = "/tmp/wna16_ck_XXXXXX";

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[65536];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

/* Fresh copy of a fixture as workdir/case. */
static const char *fresh(const char *fixture) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/case", workdir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(cmd) == 0);
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char from[512], to[600];
        snprintf(from, sizeof from, FIX "%s/%s", fixture, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        copy_file(from, to);
    }
    return dir;
}

static json_t *load_config(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    return json_load_file(p, 0, NULL);
}

static void save_config(const char *dir, json_t *cfg) {
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_dump_file(cfg, p, JSON_INDENT(2));
    json_decref(cfg);
}

static void write_text(const char *dir, const char *file, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
}

static json_t *qargs(json_t *cfg) {
    return json_object_get(
        json_object_get(
            json_object_get(json_object_get(cfg, "quantization_config"), "config_groups"),
            "group_0"),
        "weights");
}

/* Rewrites model.safetensors: tensor `name` is dropped (dtype < 0), or gets
 * new dtype/shape/data; `extra` may add one more tensor. */
typedef struct edit {
    const char *name;
    int dtype; /* -1 drop */
    int rank;
    int64_t shape[4];
    const void *data;
} edit;

static void rewrite(const char *dir, const edit *edits, size_t n_edits) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    wna16_safetensors *st;
    CHECK(wna16_safetensors_open(ctx, p, &st) == WNA16_OK);
    wna16_st_writer *w;
    CHECK(wna16_st_writer_create(ctx, &w) == WNA16_OK);
    bool used[8] = {0};
    for (size_t i = 0; i < wna16_safetensors_count(st); i++) {
        const wna16_tensor_view *v = wna16_safetensors_at(st, i);
        const edit *e = NULL;
        for (size_t j = 0; j < n_edits; j++)
            if (!strcmp(edits[j].name, v->name)) e = &edits[j], used[j] = true;
        if (!e)
            wna16_st_writer_add(ctx, w, v->name, v->dtype, v->rank, v->shape, v->data);
        else if (e->dtype >= 0)
            wna16_st_writer_add(ctx, w, v->name, (wna16_dtype)e->dtype, e->rank, e->shape,
                                e->data ? e->data : v->data);
    }
    for (size_t j = 0; j < n_edits; j++)
        if (!used[j] && edits[j].dtype >= 0)
            wna16_st_writer_add(ctx, w, edits[j].name, (wna16_dtype)edits[j].dtype, edits[j].rank,
                                edits[j].shape, edits[j].data);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.new", p);
    CHECK(wna16_st_writer_write(ctx, w, tmp) == WNA16_OK);
    wna16_st_writer_free(w);
    wna16_safetensors_close(st);
    rename(tmp, p);
}

static wna16_status try_open(const char *dir) {
    wna16_checkpoint *ck = NULL;
    wna16_status s = wna16_checkpoint_open(ctx, dir, &ck);
    wna16_checkpoint_close(ck);
    return s;
}

#define EXPECT(dir, status, substr) CHECK_STATUS(ctx, try_open(dir), status, substr)
#define SET(cfg, obj, key, value)   json_object_set_new(obj, key, value)

static void test_config_errors(void) {
    const char *d = fresh("w4a16_sym_g32");
    EXPECT(d, WNA16_OK, NULL);
    EXPECT("/nonexistent/model", WNA16_ERR_IO,
           "/nonexistent/model does not exist (No such file or directory); pass a Hugging Face "
           "model directory");
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", d);
    unlink(p);
    EXPECT(d, WNA16_ERR_IO, "has no config.json: it is not a Hugging Face model directory");
    write_text(d, "config.json", "{\"hidden_size\": 64,");
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "not valid JSON");
    write_text(d, "config.json", "{\"hidden_size\": 64, \"hidden_size\": 32}");
    EXPECT(d, WNA16_ERR_DUPLICATE_KEY, "duplicate");
    write_text(d, "config.json", "[1]");
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "not a JSON object");

    json_t *c;
    d = fresh("w4a16_sym_g32");
    c = load_config(d);
    SET(c, c, "hidden_size", json_integer(0));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "\"hidden_size\" is 0");
    d = fresh("w4a16_sym_g32");
    c = load_config(d);
    SET(c, c, "hidden_size", json_integer(-5));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "\"hidden_size\" is -5");
    d = fresh("w4a16_sym_g32");
    c = load_config(d);
    SET(c, c, "num_hidden_layers", json_string("one"));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "must be an integer");
    d = fresh("w4a16_sym_g32");
    c = load_config(d);
    SET(c, c, "num_key_value_heads", json_integer(3));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "num_key_value_heads");
    d = fresh("w4a16_sym_g32");
    c = load_config(d);
    SET(c, c, "head_dim", json_integer(33));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "head_dim 33 is odd");
    d = fresh("w4a16_sym_g32");
    c = load_config(d);
    SET(c, c, "hidden_size", json_integer(128));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "config.json implies");
    d = fresh("qwen3_moe_w4a16_g32");
    c = load_config(d);
    SET(c, c, "num_experts_per_tok", json_integer(9));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "num_experts_per_tok");
    d = fresh("qwen3_moe_w4a16_g32");
    c = load_config(d);
    SET(c, c, "num_local_experts", json_integer(4));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "is expert 4 but config.json has 4 experts");
    d = fresh("qwen3_moe_w4a16_g32");
    c = load_config(d);
    SET(c, c, "num_hidden_layers", json_integer(1));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_CONFIG_INVALID, "is in layer 1 but config.json has num_hidden_layers 1");
    d = fresh("qwen3_moe_w4a16_g32");
    c = load_config(d);
    SET(c, c, "moe_intermediate_size", json_integer(64));
    save_config(d, c);
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "experts.0");
}

static void test_quant_config_errors(void) {
    json_t *c;
    const char *d;
#define QCASE(fixture, mutate, status, substr)                                                     \
    do {                                                                                           \
        d = fresh(fixture);                                                                        \
        c = load_config(d);                                                                        \
        json_t *q = json_object_get(c, "quantization_config");                                     \
        json_t *w = qargs(c);                                                                      \
        (void)q, (void)w;                                                                          \
        mutate;                                                                                    \
        save_config(d, c);                                                                         \
        EXPECT(d, status, substr);                                                                 \
    } while (0)
    QCASE("w4a16_sym_g32", SET(c, w, "actorder", json_string("group")), WNA16_ERR_RUNTIME_ACTORDER,
          "re-quantize with actorder=static");
    QCASE("w4a16_sym_g32", SET(c, w, "actorder", json_string("dynamic")),
          WNA16_ERR_RUNTIME_ACTORDER, "actorder=dynamic");
    QCASE("w4a16_sym_g32", SET(c, w, "actorder", json_true()), WNA16_ERR_RUNTIME_ACTORDER,
          "actorder=true");
    QCASE("w4a16_sym_g32", SET(c, w, "actorder", json_string("static")), WNA16_OK, NULL);
    QCASE("w4a16_sym_g32", SET(c, w, "actorder", json_string("weight")), WNA16_OK, NULL);
    QCASE("w4a16_sym_g32", SET(c, w, "actorder", json_string("sideways")),
          WNA16_ERR_QUANT_CONFIG_INVALID, "unknown actorder");
    QCASE("w4a16_sym_g32", SET(c, w, "num_bits", json_integer(3)), WNA16_ERR_UNSUPPORTED_BITS,
          "num_bits=3");
    QCASE("w4a16_sym_g32", SET(c, w, "num_bits", json_integer(16)), WNA16_ERR_UNSUPPORTED_BITS,
          "num_bits=16");
    QCASE("w4a16_sym_g32", SET(c, w, "type", json_string("float")), WNA16_ERR_UNSUPPORTED_SCHEME,
          "not weight-only integer");
    QCASE("w4a16_sym_g32", SET(c, w, "type", json_string("posit")), WNA16_ERR_QUANT_CONFIG_INVALID,
          "type must be");
    QCASE("w4a16_sym_g32",
          (SET(c, w, "strategy", json_string("tensor")), SET(c, w, "group_size", json_null())),
          WNA16_ERR_UNSUPPORTED_SCHEME, "group or channelwise");
    QCASE("w4a16_sym_g32", SET(c, w, "strategy", json_string("channel")),
          WNA16_ERR_QUANT_CONFIG_INVALID, "contradicts strategy");
    QCASE("w4a16_sym_g32", SET(c, w, "strategy", json_string("diagonal")),
          WNA16_ERR_QUANT_CONFIG_INVALID, "unknown strategy");
    QCASE("w4a16_sym_g32", SET(c, w, "group_size", json_integer(0)), WNA16_ERR_GROUP_SIZE,
          "group_size 0 is invalid");
    QCASE("w4a16_sym_g32", SET(c, w, "group_size", json_integer(-2)), WNA16_ERR_GROUP_SIZE,
          "group_size -2");
    QCASE("w4a16_sym_g32", SET(c, w, "group_size", json_integer(48)), WNA16_ERR_GROUP_SIZE,
          "does not divide the input size");
    QCASE("w4a16_sym_g32", SET(c, w, "group_size", json_integer(16)), WNA16_ERR_SHAPE_MISMATCH,
          "weight_scale");
    QCASE("w4a16_sym_g32", SET(c, w, "symmetric", json_false()), WNA16_ERR_TENSOR_MISSING,
          "weight_zero_point' is missing");
    QCASE("w4a16_sym_g32", SET(c, q, "quant_method", json_string("awq")),
          WNA16_ERR_UNSUPPORTED_SCHEME, "quant_method \"awq\"");
    QCASE("w4a16_sym_g32", SET(c, q, "config_groups", json_object()),
          WNA16_ERR_QUANT_CONFIG_INVALID, "config_groups");
    QCASE("w4a16_sym_g32",
          SET(c, q, "ignore", json_pack("[ss]", "lm_head", "re:model.layers.0.self_attn.q_proj")),
          WNA16_ERR_QUANT_CONFIG_INVALID, "ignore list names it");
    QCASE("w4a16_sym_g32", SET(c, q, "ignore", json_pack("[s]", "re:([")),
          WNA16_ERR_QUANT_CONFIG_INVALID, "bad regex");
    QCASE("w4a16_sym_g32", SET(c, q, "ignore", json_array()), WNA16_ERR_TENSOR_MISSING,
          "lm_head.weight_packed' is missing");
    QCASE("w4a16_sym_g32",
          SET(c, json_object_get(json_object_get(q, "config_groups"), "group_0"), "targets",
              json_pack("[s]", "re:.*mlp")),
          WNA16_ERR_QUANT_CONFIG_INVALID, "no config group targets it");
    QCASE("w4a16_sym_g32",
          SET(c, json_object_get(json_object_get(q, "config_groups"), "group_0"), "format",
              json_string("marlin-24")),
          WNA16_ERR_UNSUPPORTED_SCHEME, "format \"marlin-24\"");
    QCASE("w4a16_sym_g32",
          SET(c, json_object_get(json_object_get(q, "config_groups"), "group_0"),
              "input_activations",
              json_pack("{s:i,s:s,s:b}", "num_bits", 8, "strategy", "token", "dynamic", 1)),
          WNA16_ERR_UNSUPPORTED_SCHEME, "not weight-only");
    QCASE("w4a16_sym_g32",
          (json_object_del(json_object_get(q, "config_groups"), "group_0"),
           json_object_set_new(json_object_get(q, "config_groups"), "W4A16",
                               json_pack("[s]", "Linear"))),
          WNA16_ERR_SHAPE_MISMATCH, "expected shape [64, 1], found BF16 [64, 4]");
    QCASE("w4a16_sym_g128",
          (json_object_del(json_object_get(q, "config_groups"), "group_0"),
           json_object_set_new(json_object_get(q, "config_groups"), "W4A16",
                               json_pack("[s]", "Linear"))),
          WNA16_OK, NULL);
    QCASE("w4a16_sym_g32",
          json_object_set_new(json_object_get(q, "config_groups"), "FANCY",
                              json_pack("[s]", "Linear")),
          WNA16_ERR_QUANT_CONFIG_INVALID, "not a known preset");
    QCASE("gptq_v1_sym_g128", SET(c, q, "checkpoint_format", json_string("marlin")),
          WNA16_ERR_UNSUPPORTED_SCHEME, "checkpoint_format \"marlin\"");
    QCASE("gptq_v1_sym_g128", SET(c, q, "bits", json_integer(3)), WNA16_ERR_UNSUPPORTED_BITS,
          "num_bits=3");
    QCASE("gptq_v1_sym_g128", SET(c, q, "group_size", json_integer(0)), WNA16_ERR_GROUP_SIZE,
          "GPTQ group_size 0");
    QCASE("gptq_v1_sym_g128", SET(c, q, "desc_act", json_true()), WNA16_OK,
          NULL); /* trivial g_idx: accepted */
#undef QCASE
}

static void test_tensor_errors(void) {
    const char *d;
    const char *Q = "model.layers.0.self_attn.q_proj";
    char name[256];
    /* missing tensors */
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_scale", Q);
    rewrite(d, (edit[]){{name, -1, 0, {0}, NULL}}, 1);
    EXPECT(d, WNA16_ERR_TENSOR_MISSING, "q_proj.weight_scale' is missing");
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_shape", Q);
    rewrite(d, (edit[]){{name, -1, 0, {0}, NULL}}, 1);
    EXPECT(d, WNA16_ERR_TENSOR_MISSING, "q_proj.weight_shape' is missing");
    d = fresh("w4a16_asym_g32");
    snprintf(name, sizeof name, "%s.weight_zero_point", Q);
    rewrite(d, (edit[]){{name, -1, 0, {0}, NULL}}, 1);
    EXPECT(d, WNA16_ERR_TENSOR_MISSING, "weight_zero_point' is missing");
    /* shapes */
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_packed", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I32, 2, {8, 64}, NULL}}, 1);
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "expected shape [64, 8], found I32 [8, 64]");
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_packed", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_F32, 2, {64, 8}, NULL}}, 1);
    EXPECT(d, WNA16_ERR_BAD_DTYPE, "dtype F32, expected I32");
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_scale", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_BF16, 2, {2, 64}, NULL}}, 1); /* transposed */
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "expected shape [64, 2], found BF16 [2, 64]");
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_scale", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I16, 2, {64, 2}, NULL}}, 1);
    EXPECT(d, WNA16_ERR_BAD_DTYPE, "dtype I16, expected BF16, F16 or F32");
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_scale", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_BF16, 2, {64, 1}, NULL}}, 1); /* one group short */
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "expected shape [64, 2]");
    static const int64_t shape_bad[2] = {64, 0};
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_shape", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I64, 1, {2}, shape_bad}}, 1);
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "expected positive sizes");
    static const int64_t shape_big[2] = {64, 128};
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_shape", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I64, 1, {2}, shape_big}}, 1);
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "expected shape [64, 16]");
    static const int32_t shape_i32[2] = {64, 64};
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_shape", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I32, 1, {2}, shape_i32}}, 1);
    EXPECT(d, WNA16_OK, NULL); /* I32 weight_shape is accepted (CT 0.8) */
    d = fresh("w4a16_asym_g32");
    snprintf(name, sizeof name, "%s.weight_zero_point", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I32, 2, {2, 8}, NULL}}, 1);
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "expected shape [8, 2]");
    /* bad scale values */
    static uint16_t scales[64 * 2];
    const uint16_t bad_values[] = {0x0000, 0x7fc0, 0x7f80, 0xbf80};
    const char *const bad_text[] = {"is 0", "is nan", "is inf", "is -1"};
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 128; j++) scales[j] = 0x3c00; /* 2^-7 */
        scales[77] = bad_values[i];
        d = fresh("w4a16_sym_g32");
        snprintf(name, sizeof name, "%s.weight_scale", Q);
        rewrite(d, (edit[]){{name, WNA16_DTYPE_BF16, 2, {64, 2}, scales}}, 1);
        EXPECT(d, WNA16_ERR_BAD_SCALE, bad_text[i]);
    }
    /* legacy unpacked I8 zero points: in range accepted, out of range refused */
    static int8_t zp[64 * 2];
    d = fresh("w4a16_asym_g32");
    snprintf(name, sizeof name, "%s.weight_zero_point", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I8, 2, {64, 2}, zp}}, 1);
    EXPECT(d, WNA16_OK, NULL);
    zp[5] = 9;
    d = fresh("w4a16_asym_g32");
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I8, 2, {64, 2}, zp}}, 1);
    EXPECT(d, WNA16_ERR_BAD_ZERO_POINT, "zero point #5 is 9, outside [-8, 7]");
    /* non-trivial g_idx without actorder in the config */
    static int32_t gidx[64];
    for (int c = 0; c < 64; c++) gidx[c] = c / 32;
    gidx[0] = 1, gidx[40] = 0;
    d = fresh("w4a16_sym_g32");
    snprintf(name, sizeof name, "%s.weight_g_idx", Q);
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I32, 1, {64}, gidx}}, 1);
    EXPECT(d, WNA16_ERR_RUNTIME_ACTORDER, "column 0 -> group 1");
    d = fresh("w4a16_sym_g32");
    rewrite(d, (edit[]){{name, WNA16_DTYPE_I32, 1, {32}, gidx}}, 1);
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "expected shape [64]");
    /* an expert missing from a layer */
    d = fresh("qwen3_moe_w4a16_g32");
    rewrite(d,
            (edit[]){{"model.layers.1.mlp.experts.5.down_proj.weight_packed", -1, 0, {0}, NULL},
                     {"model.layers.1.mlp.experts.5.down_proj.weight_scale", -1, 0, {0}, NULL},
                     {"model.layers.1.mlp.experts.5.down_proj.weight_shape", -1, 0, {0}, NULL}},
            3);
    EXPECT(d, WNA16_ERR_TENSOR_MISSING, "layer 1 expert 5 is missing its down projection");
    /* GPTQ qzeros of the wrong shape (asym) */
    d = fresh("gptq_v1_asym_g64");
    rewrite(d,
            (edit[]){{"model.layers.0.self_attn.q_proj.qzeros", WNA16_DTYPE_I32, 2, {2, 4}, NULL}},
            1);
    EXPECT(d, WNA16_ERR_SHAPE_MISMATCH, "qzeros");
}

/* The int4 GPTQ v1 fixture turned into int8 (qweight/qzeros of int8 shapes,
 * same scales). Legacy GPTQ stores zero - 1: stored 254 is zero 255 (taken),
 * stored 255 is zero 256 (refused, not wrapped to 0). */
static void gptq_v1_int8(const char *d, uint8_t last_zero) {
    static const struct {
        const char *proj;
        int64_t in, out;
    } mods[] = {{"self_attn.q_proj", 64, 64}, {"self_attn.k_proj", 64, 32},
                {"self_attn.v_proj", 64, 32}, {"self_attn.o_proj", 64, 64},
                {"mlp.gate_proj", 64, 128},   {"mlp.up_proj", 64, 128},
                {"mlp.down_proj", 128, 64}};
    static char names[7][2][96];
    static uint32_t qw[7][32 * 128], qz[7][2 * 32];
    edit e[7][2];
    for (int i = 0; i < 7; i++) {
        int64_t in = mods[i].in, out = mods[i].out, groups = in / 64;
        memset(qw[i], 0x80, sizeof qw[i]); /* every weight u = 128 */
        memset(qz[i], 0x7F, sizeof qz[i]); /* stored 127: zero 128 */
        if (i == 6) ((uint8_t *)qz[i])[groups * out - 1] = last_zero;
        snprintf(names[i][0], sizeof names[i][0], "model.layers.0.%s.qweight", mods[i].proj);
        snprintf(names[i][1], sizeof names[i][1], "model.layers.0.%s.qzeros", mods[i].proj);
        e[i][0] = (edit){names[i][0], WNA16_DTYPE_I32, 2, {in / 4, out}, qw[i]};
        e[i][1] = (edit){names[i][1], WNA16_DTYPE_I32, 2, {groups, out / 4}, qz[i]};
    }
    edit first[7] = {e[0][0], e[0][1], e[1][0], e[1][1], e[2][0], e[2][1], e[3][0]};
    edit rest[7] = {e[3][1], e[4][0], e[4][1], e[5][0], e[5][1], e[6][0], e[6][1]};
    rewrite(d, first, 7);
    rewrite(d, rest, 7);
    json_t *c = load_config(d);
    json_object_set_new(json_object_get(c, "quantization_config"), "bits", json_integer(8));
    save_config(d, c); /* takes the reference */
}

static void test_gptq_v1_int8_zero(void) {
    const char *d = fresh("gptq_v1_asym_g64");
    gptq_v1_int8(d, 254);
    EXPECT(d, WNA16_OK, NULL);
    d = fresh("gptq_v1_asym_g64");
    gptq_v1_int8(d, 255);
    EXPECT(d, WNA16_ERR_BAD_ZERO_POINT, "group 1, output 63 stores 255");
}

/* A path that is not a model directory is named for what it is, with
 * what to do: a GGUF file (or a directory holding only one), another file,
 * PyTorch .bin weights, no weights at all. */
static void test_not_a_model_dir(void) {
    const char *d = fresh("w4a16_sym_g32");
    char p[600];
    snprintf(p, sizeof p, "%s/model.gguf", d);
    FILE *f = fopen(p, "wb");
    fwrite("GGUF\3\0\0\0", 1, 8, f);
    fclose(f);
    EXPECT(p, WNA16_ERR_UNSUPPORTED, "model.gguf is a GGUF file; wna16 loads Hugging Face "
                                     "safetensors directories");
    snprintf(p, sizeof p, "%s/config.json", d);
    EXPECT(p, WNA16_ERR_IO, "config.json is a file, not a model directory");
    unlink(p);
    EXPECT(d, WNA16_ERR_UNSUPPORTED, "holds a GGUF file (model.gguf) and no config.json");
    d = fresh("w4a16_sym_g32");
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    char bin[600];
    snprintf(bin, sizeof bin, "%s/pytorch_model.bin", d);
    rename(p, bin);
    EXPECT(d, WNA16_ERR_SHARD_MISSING, "has PyTorch weights (pytorch_model.bin) but no "
                                       "model.safetensors: convert them");
    unlink(bin);
    EXPECT(d, WNA16_ERR_SHARD_MISSING, "has config.json but no weights");
}

static void test_index_errors(void) {
    const char *d = fresh("w4a16_sym_g32");
    char from[600], to[600];
    snprintf(from, sizeof from, "%s/model.safetensors", d);
    snprintf(to, sizeof to, "%s/model-00001-of-00001.safetensors", d);
    rename(from, to);
    EXPECT(d, WNA16_ERR_SHARD_MISSING, "neither model.safetensors");
    /* a valid index: every tensor mapped */
    wna16_safetensors *st;
    CHECK(wna16_safetensors_open(ctx, to, &st) == WNA16_OK);
    json_t *map = json_object();
    for (size_t i = 0; i < wna16_safetensors_count(st); i++)
        json_object_set_new(map, wna16_safetensors_at(st, i)->name,
                            json_string("model-00001-of-00001.safetensors"));
    wna16_safetensors_close(st);
    json_t *index = json_pack("{s:{s:i},s:O}", "metadata", "total_size", 1, "weight_map", map);
    char ip[600];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", d);
    json_dump_file(index, ip, 0);
    EXPECT(d, WNA16_OK, NULL);
    /* the index names a tensor no shard holds */
    json_object_set_new(map, "ghost.weight", json_string("model-00001-of-00001.safetensors"));
    json_dump_file(index, ip, 0);
    EXPECT(d, WNA16_ERR_INDEX_MISMATCH, "'ghost.weight'");
    json_object_del(map, "ghost.weight");
    /* a tensor in the shard the index does not list */
    json_object_del(map, "lm_head.weight");
    json_dump_file(index, ip, 0);
    EXPECT(d, WNA16_ERR_INDEX_MISMATCH,
           "'lm_head.weight' is in this shard but the index maps it to nothing");
    json_object_set_new(map, "lm_head.weight", json_string("model-00002-of-00002.safetensors"));
    json_dump_file(index, ip, 0);
    EXPECT(d, WNA16_ERR_SHARD_MISSING,
           "model-00002-of-00002.safetensors: shard named by the index is missing");
    json_object_set_new(map, "lm_head.weight", json_string("../../etc/passwd"));
    json_dump_file(index, ip, 0);
    EXPECT(d, WNA16_ERR_PATH_UNSAFE, "plain file names");
    json_object_set_new(map, "lm_head.weight", json_string("/abs/model.safetensors"));
    json_dump_file(index, ip, 0);
    EXPECT(d, WNA16_ERR_PATH_UNSAFE, "plain file names");
    json_object_set_new(map, "lm_head.weight", json_integer(3));
    json_dump_file(index, ip, 0);
    EXPECT(d, WNA16_ERR_INDEX_INVALID, "not a file name");
    json_decref(index);
    json_decref(map);
    write_text(d, "model.safetensors.index.json", "{\"metadata\": {}}");
    EXPECT(d, WNA16_ERR_INDEX_INVALID, "\"weight_map\" is missing");
    write_text(d, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"x\", \"a\": \"y\"}}");
    EXPECT(d, WNA16_ERR_DUPLICATE_KEY, "duplicate");
    write_text(d, "model.safetensors.index.json", "not json");
    EXPECT(d, WNA16_ERR_INDEX_INVALID, "not valid JSON");
    /* a corrupt shard reports the shard's own error */
    d = fresh("w4a16_sym_g32");
    snprintf(from, sizeof from, "%s/model.safetensors", d);
    struct stat sb;
    CHECK(stat(from, &sb) == 0 && truncate(from, sb.st_size - 10) == 0);
    EXPECT(d, WNA16_ERR_METADATA_INCOMPLETE_BUFFER, "model.safetensors");
}

int main(void) {
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    CHECK(mkdtemp(workdir) != NULL);
    test_fixtures_bit_exact();
    test_refusal_fixtures();
    test_inspect_moe();
    test_config_errors();
    test_not_a_model_dir();
    test_quant_config_errors();
    test_tensor_errors();
    test_index_errors();
    test_gptq_v1_int8_zero();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    if (system(cmd) != 0) fprintf(stderr, "could not clean %s\n", workdir);
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
