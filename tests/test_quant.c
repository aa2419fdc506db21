/* The quantizer: RTN bit for bit against compressed-tensors'
 * own compression (tests/data/rtn), GPTQ against llm-compressor's
 * quantize_weight on fixed W and X (tests/data/gptq, tools/gen_gptq_fixture.py),
 * the Python-style JSON writer, and end-to-end GPTQ checkpoints that load. */
#include "format/checkpoint.h"
#include "io/safetensors.h"
#include "quant/quant.h"
#include "testing.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[len] = 0;
    if (n) *n = (size_t)len;
    return buf;
}

static bool same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static char tmp_root[256];

static void test_rtn_fixtures(void) {
    static const struct {
        const char *dir;
        int bits;
        bool sym;
        int64_t gs;
    } cases[] = {
        {"w4a16_g128", 4, true, 128},
        {"w4a16_asym_g128", 4, false, 128},
        {"w8a16_g128", 8, true, 128},
        {"w4a16_g32", 4, true, 32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[512], a[600], b[600];
        snprintf(out, sizeof out, "%s/%s", tmp_root, cases[i].dir);
        wna16_quantize_opts o = {.src = "tests/data/rtn/base_bf16", .dst = out, .bits = cases[i].bits,
                                 .symmetric = cases[i].sym, .group_size = cases[i].gs};
        wna16_quantize_report rep;
        wna16_diag d = {0};
        wna16_status s = wna16_quantize(&d, &o, &rep);
        CHECK_MSG(s == WNA16_OK, "%s: %s", cases[i].dir, d.detail);
        CHECK(rep.modules_quantized == 7 && rep.n_ignored == 1 && !strcmp(rep.ignored[0], "lm_head"));
        wna16_quantize_report_free(&rep);
        static const char *const files[] = {"model.safetensors", "config.json", "generation_config.json"};
        for (int f = 0; f < 3; f++) {
            snprintf(a, sizeof a, "%s/%s", out, files[f]);
            snprintf(b, sizeof b, "tests/data/rtn/%s/%s", cases[i].dir, files[f]);
            CHECK_MSG(same_file(a, b), "%s differs from compressed-tensors' %s", a, b);
        }
        /* quantization_config equal as JSON too */
        snprintf(a, sizeof a, "%s/config.json", out);
        snprintf(b, sizeof b, "tests/data/rtn/%s/config.json", cases[i].dir);
        json_t *ja = json_load_file(a, 0, NULL), *jb = json_load_file(b, 0, NULL);
        CHECK(ja && jb && json_equal(json_object_get(ja, "quantization_config"),
                                     json_object_get(jb, "quantization_config")));
        json_decref(ja);
        json_decref(jb);
        /* and every tensor byte-identical, read back through the reader */
        wna16_ctx *ctx;
        wna16_ctx_create(&ctx);
        wna16_safetensors *x = NULL, *y = NULL;
        snprintf(a, sizeof a, "%s/model.safetensors", out);
        snprintf(b, sizeof b, "tests/data/rtn/%s/model.safetensors", cases[i].dir);
        CHECK(wna16_safetensors_open(ctx, a, &x) == WNA16_OK);
        CHECK(wna16_safetensors_open(ctx, b, &y) == WNA16_OK);
        if (x && y) {
            CHECK(wna16_safetensors_count(x) == wna16_safetensors_count(y));
            for (size_t t = 0; t < wna16_safetensors_count(y); t++) {
                const wna16_tensor_view *vy = wna16_safetensors_at(y, t);
                const wna16_tensor_view *vx = wna16_safetensors_find(x, vy->name);
                CHECK_MSG(vx && vx->dtype == vy->dtype && vx->nbytes == vy->nbytes &&
                              !memcmp(vx->data, vy->data, vy->nbytes),
                          "%s: tensor %s", cases[i].dir, vy->name);
            }
        }
        wna16_safetensors_close(x);
        wna16_safetensors_close(y);
        wna16_ctx_free(ctx);
        rm_dir(out);
    }
}

/* Channelwise: the weights args are CT's (tests/data/ct/w4a16_asym_channel). */
static void test_channel_config(void) {
    char out[512], a[600];
    snprintf(out, sizeof out, "%s/channel", tmp_root);
    wna16_quantize_opts o = {.src = "tests/data/rtn/base_bf16", .dst = out, .bits = 4, .symmetric = false,
                             .group_size = -1};
    wna16_quantize_report rep;
    wna16_diag d = {0};
    CHECK_MSG(wna16_quantize(&d, &o, &rep) == WNA16_OK, "%s", d.detail);
    wna16_quantize_report_free(&rep);
    snprintf(a, sizeof a, "%s/config.json", out);
    json_t *ja = json_load_file(a, 0, NULL), *jb = json_load_file("tests/data/ct/w4a16_asym_channel/config.json", 0, NULL);
    const char *path[] = {"quantization_config", "config_groups", "group_0", "weights"};
    const json_t *wa = ja, *wb = jb;
    for (int i = 0; i < 4; i++) wa = json_object_get(wa, path[i]), wb = json_object_get(wb, path[i]);
    CHECK(wa && wb && json_equal(wa, wb));
    json_decref(ja);
    json_decref(jb);
    wna16_checkpoint *ck = NULL;
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    CHECK_STATUS(ctx, wna16_checkpoint_open(ctx, out, &ck), WNA16_OK, "");
    wna16_checkpoint_close(ck);
    wna16_ctx_free(ctx);
    rm_dir(out);
}

/* Tied embeddings: no lm_head tensor, yet CT lists the (tied) lm_head Linear
 * in the ignore list (checked with tools/check_rtn_ct.py); so do we. */
static void test_tied(void) {
    char dir[512], out[512], p[700];
    snprintf(dir, sizeof dir, "%s/tied", tmp_root);
    snprintf(out, sizeof out, "%s/tied_q", tmp_root);
    mkdir(dir, 0755);
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_safetensors *st = NULL;
    CHECK(wna16_safetensors_open(ctx, "tests/data/rtn/base_bf16/model.safetensors", &st) == WNA16_OK);
    wna16_st_writer *w = NULL;
    CHECK(wna16_st_writer_create(ctx, &w) == WNA16_OK);
    for (size_t i = 0; st && w && i < wna16_safetensors_count(st); i++) {
        const wna16_tensor_view *v = wna16_safetensors_at(st, i);
        if (strcmp(v->name, "lm_head.weight")) wna16_st_writer_add(ctx, w, v->name, v->dtype, v->rank, v->shape, v->data);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(w && wna16_st_writer_write(ctx, w, p) == WNA16_OK);
    wna16_st_writer_free(w);
    wna16_safetensors_close(st);
    json_t *cfg = json_load_file("tests/data/rtn/base_bf16/config.json", 0, NULL);
    json_object_set_new(cfg, "tie_word_embeddings", json_true());
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_dump_file(cfg, p, 0);
    json_decref(cfg);
    wna16_quantize_opts o = {.src = dir, .dst = out, .bits = 4, .symmetric = true, .group_size = 128};
    wna16_quantize_report rep;
    wna16_diag d = {0};
    CHECK_MSG(wna16_quantize(&d, &o, &rep) == WNA16_OK, "%s", d.detail);
    CHECK(rep.n_ignored == 1 && !strcmp(rep.ignored[0], "lm_head"));
    wna16_quantize_report_free(&rep);
    wna16_model *m = NULL;
    wna16_model_options mo = {.tp = 1, .threads = 1};
    CHECK_STATUS(ctx, wna16_model_load(ctx, out, &mo, &m), WNA16_OK, "");
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    rm_dir(out);
    rm_dir(dir);
}

static double out_err(const float *w, const float *wh, const float *x, int64_t n, int64_t k, int64_t t) {
    double e = 0;
    for (int64_t o = 0; o < n; o++)
        for (int64_t s = 0; s < t; s++) {
            double acc = 0;
            for (int64_t c = 0; c < k; c++) acc += ((double)w[o * k + c] - wh[o * k + c]) * x[s * k + c];
            e += acc * acc;
        }
    return e;
}

static void test_gptq_fixture(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_safetensors *st = NULL;
    CHECK(wna16_safetensors_open(ctx, "tests/data/gptq/gptq.safetensors", &st) == WNA16_OK);
    if (!st) {
        wna16_ctx_free(ctx);
        return;
    }
    const wna16_tensor_view *vw = wna16_safetensors_find(st, "w"), *vx = wna16_safetensors_find(st, "x");
    CHECK(vw && vx && vw->rank == 2 && vx->rank == 2 && vw->shape[1] == vx->shape[1]);
    int64_t n = vw->shape[0], k = vw->shape[1], t = vx->shape[0];
    float *w = malloc((size_t)(n * k) * 4), *x = malloc((size_t)(t * k) * 4), *wh = malloc((size_t)(n * k) * 4);
    float *ref = malloc((size_t)(n * k) * 4), *h = malloc((size_t)(k * k) * 4);
    for (int64_t i = 0; i < n * k; i++) w[i] = wna16_view_float(vw, i);
    for (int64_t i = 0; i < t * k; i++) x[i] = wna16_view_float(vx, i);
    static const char *const cases[] = {"w4_sym_g128_static", "w4_sym_g32_static", "w4_asym_g64_static",
                                        "w4_sym_g128_none", "w8_sym_channel_static"};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char key[128];
        snprintf(key, sizeof key, "%s.args", cases[c]);
        json_t *args = json_loads(wna16_safetensors_metadata(st, key), 0, NULL);
        CHECK(args != NULL);
        if (!args) continue;
        wna16_qspec spec = {.bits = (int)json_integer_value(json_object_get(args, "num_bits")),
                            .symmetric = json_is_true(json_object_get(args, "symmetric")),
                            .group_size = json_integer_value(json_object_get(args, "group_size")),
                            .dtype = WNA16_DTYPE_BF16};
        wna16_gptq_opts go = {.dampening = 0.01, .blocksize = 128,
                              .actorder = !strcmp(json_string_value(json_object_get(args, "actorder")), "static")};
        json_decref(args);
        snprintf(key, sizeof key, "%s.err_gptq", cases[c]);
        double e_llmc = strtod(wna16_safetensors_metadata(st, key), NULL);
        snprintf(key, sizeof key, "%s.err_rtn", cases[c]);
        double e_rtn_llmc = strtod(wna16_safetensors_metadata(st, key), NULL);
        snprintf(key, sizeof key, "%s.w_hat", cases[c]);
        const wna16_tensor_view *vr = wna16_safetensors_find(st, key);
        CHECK(vr && wna16_view_numel(vr) == n * k);
        for (int64_t i = 0; vr && i < n * k; i++) ref[i] = wna16_view_float(vr, i);
        /* H = 2 X^T X / 1 sample, as llm-compressor accumulates it */
        memset(h, 0, (size_t)(k * k) * 4);
        wna16_hessian_add(h, k, x, t, k, 2.0f, 0);
        wna16_gptq_factor f;
        wna16_diag d = {0};
        CHECK(wna16_gptq_factor_build(&d, h, k, &go, &f) == WNA16_OK);
        CHECK(!f.fallback);
        CHECK(f.dead[7]); /* column 7 of X is all zero */
        wna16_qlinear q, qr;
        CHECK(wna16_qlinear_alloc(&d, &spec, n, k, &q) == WNA16_OK);
        CHECK(wna16_qlinear_alloc(&d, &spec, n, k, &qr) == WNA16_OK);
        double loss;
        CHECK(wna16_gptq_quantize(&d, w, &f, &go, &q, &loss, 0) == WNA16_OK);
        wna16_quant_rtn(w, &qr);
        int64_t same = 0;
        for (int64_t o = 0; o < n; o++)
            for (int64_t i = 0; i < k; i++) {
                wh[o * k + i] = wna16_qlinear_value(&q, o, i);
                same += wh[o * k + i] == ref[o * k + i];
            }
        double e = out_err(w, wh, x, n, k, t);
        for (int64_t o = 0; o < n; o++)
            for (int64_t i = 0; i < k; i++) wh[o * k + i] = wna16_qlinear_value(&qr, o, i);
        double e_rtn = out_err(w, wh, x, n, k, t);
        double e_ref = out_err(w, ref, x, n, k, t);
        printf("%-24s ||WX-W^X||^2: ours %.5g, llm-compressor %.5g (%+.2f%%), RTN %.5g (ours/RTN %.3f); "
               "%.1f%% of weights identical to llm-compressor's\n",
               cases[c], e, e_llmc, 100.0 * (e / e_llmc - 1), e_rtn, e / e_rtn,
               100.0 * (double)same / (double)(n * k));
        CHECK_MSG(fabs(e_ref / e_llmc - 1) < 1e-6, "fixture self-check %g vs %g", e_ref, e_llmc);
        CHECK_MSG(fabs(e / e_llmc - 1) <= 0.02, "%s: %g vs llm-compressor %g", cases[c], e, e_llmc);
        /* in practice every weight matches (same fp32 sweep order, same bf16 QDQ) */
        CHECK_MSG(same >= n * k * 99 / 100, "%s: only %lld of %lld weights match llm-compressor's",
                  cases[c], (long long)same, (long long)(n * k));
        CHECK_MSG(e <= 0.8 * e_rtn, "%s: GPTQ %g not 20%% below RTN %g", cases[c], e, e_rtn);
        CHECK_MSG(fabs(e_rtn / e_rtn_llmc - 1) < 1e-9, "%s: RTN %g vs CT %g", cases[c], e_rtn, e_rtn_llmc);
        /* dead column: quantized to zero */
        for (int64_t o = 0; o < n; o++) CHECK(wna16_qlinear_value(&q, o, 7) == 0.0f);
        wna16_qlinear_free(&q);
        wna16_qlinear_free(&qr);
        wna16_gptq_factor_free(&f);
    }
    /* a singular H that Cholesky rejects falls back to RTN (U = I) */
    {
        int64_t kk = 32;
        float *hh = calloc((size_t)(kk * kk), 4);
        for (int64_t i = 0; i < kk; i++) hh[i * kk + i] = -1.0f;
        wna16_gptq_opts go = {.dampening = 0.01, .blocksize = 128, .actorder = true};
        wna16_gptq_factor f;
        wna16_diag d = {0};
        CHECK(wna16_gptq_factor_build(&d, hh, kk, &go, &f) == WNA16_OK);
        CHECK(f.fallback && f.u[0] == 1.0f && f.u[1] == 0.0f);
        wna16_gptq_factor_free(&f);
        free(hh);
    }
    free(w);
    free(x);
    free(wh);
    free(ref);
    free(h);
    wna16_safetensors_close(st);
    wna16_ctx_free(ctx);
}

static void test_pyjson(void) {
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"[1e-06]", "[\n  1e-06\n]"},
        {"[10000.0]", "[\n  10000.0\n]"},
        {"[0.02, 0.0, -0.0]", "[\n  0.02,\n  0.0,\n  -0.0\n]"},
        {"[1e16, 1.5e-07, 0.0001, 123.25, 1e300]", "[\n  1e+16,\n  1.5e-07,\n  0.0001,\n  123.25,\n  1e+300\n]"},
        {"{\"b\": {}, \"a\": [], \"c\": \"\\u00e9\\n\\\"\", \"d\": null}",
         "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": \"\\u00e9\\n\\\"\",\n  \"d\": null\n}"},
        {"{\"x\": [true, false, 3, \"\\ud83d\\ude00\"]}",
         "{\n  \"x\": [\n    true,\n    false,\n    3,\n    \"\\ud83d\\ude00\"\n  ]\n}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *v = json_loads(cases[i].in, JSON_DECODE_ANY, NULL);
        char *s = v ? wna16_pyjson_dumps(v) : NULL;
        CHECK_MSG(s && !strcmp(s, cases[i].out), "%s -> %s", cases[i].in, s ? s : "(null)");
        wna16_free(s);
        json_decref(v);
    }
}

static void test_gptq_end_to_end(void) {
    char out[512], path[600];
    snprintf(out, sizeof out, "%s/gptq", tmp_root);
    const char *ign[] = {"re:.*v_proj$"};
    wna16_quantize_opts o = {.src = "tests/data/rtn/base_bf16", .dst = out, .bits = 4, .symmetric = false,
                             .group_size = 32, .gptq = true, .actorder = true, .dampening = 0.01,
                             .calib_random = true, .seed = 7, .samples = 4, .seq_len = 32,
                             .ignore = ign, .n_ignore = 1, .threads = 2};
    wna16_quantize_report rep;
    wna16_diag d = {0};
    CHECK_MSG(wna16_quantize(&d, &o, &rep) == WNA16_OK, "%s", d.detail);
    CHECK(rep.modules_quantized == 6 && rep.n_ignored == 2);
    CHECK(rep.n_ignored == 2 && !strcmp(rep.ignored[0], "model.layers.0.self_attn.v_proj") &&
          !strcmp(rep.ignored[1], "lm_head"));
    CHECK(rep.calib_tokens == 128);
    char *text = wna16_quantize_report_format(&rep, true);
    json_t *js = text ? json_loads(text, 0, NULL) : NULL;
    CHECK_MSG(js && json_integer_value(json_object_get(js, "modules_quantized")) == 6, "%s", text ? text : "");
    json_decref(js);
    wna16_free(text);
    wna16_quantize_report_free(&rep);
    /* the checkpoint opens, its config says static act-order, it runs */
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_checkpoint *ck = NULL;
    CHECK_STATUS(ctx, wna16_checkpoint_open(ctx, out, &ck), WNA16_OK, "");
    if (ck) {
        CHECK(ck->qconfig.n_schemes == 1 && ck->qconfig.schemes[0].weights.actorder == WNA16_ACTORDER_WEIGHT);
        const wna16_module *v = wna16_ck_module(ck, "model.layers.0.self_attn.v_proj");
        CHECK(v && v->kind == WNA16_MODULE_DENSE);
        const wna16_module *q = wna16_ck_module(ck, "model.layers.0.self_attn.q_proj");
        CHECK(q && q->kind == WNA16_MODULE_PACKED && q->group_size == 32 && !q->symmetric);
        wna16_checkpoint_close(ck);
    }
    wna16_model *mq = NULL, *mb = NULL;
    wna16_model_options mo = {.tp = 1, .threads = 1};
    CHECK(wna16_model_load(ctx, out, &mo, &mq) == WNA16_OK);
    CHECK(wna16_model_load(ctx, "tests/data/rtn/base_bf16", &mo, &mb) == WNA16_OK);
    if (mq && mb) {
        int32_t ids[] = {1, 5, 9, 2, 30, 17};
        float lq[32], lb[32];
        CHECK(wna16_model_eval(ctx, mq, ids, 6, lq) == WNA16_OK);
        CHECK(wna16_model_eval(ctx, mb, ids, 6, lb) == WNA16_OK);
        double num = 0, den = 0;
        for (int i = 0; i < 32; i++) {
            num += (lq[i] - lb[i]) * (lq[i] - lb[i]);
            den += lb[i] * lb[i];
        }
        CHECK_MSG(num / den < 0.05, "relative logit error %g", num / den);
    }
    wna16_model_free(mq);
    wna16_model_free(mb);
    wna16_ctx_free(ctx);
    /* an existing output is refused; nothing is left behind on failure */
    wna16_diag d2 = {0};
    CHECK(wna16_quantize(&d2, &o, &rep) == WNA16_ERR_INVALID_ARGUMENT && strstr(d2.detail, "already exists"));
    wna16_quantize_report_free(&rep);
    rm_dir(out);
    snprintf(path, sizeof path, "%s/bad_ids.txt", tmp_root);
    FILE *f = fopen(path, "w");
    fputs("1 2 3 99999\n", f);
    fclose(f);
    o.calib_ids = path;
    o.calib_random = false;
    CHECK(wna16_quantize(&d2, &o, &rep) == WNA16_ERR_TOKEN_ID);
    wna16_quantize_report_free(&rep);
    struct stat sb;
    CHECK(stat(out, &sb) != 0);
    DIR *dd = opendir(tmp_root);
    int leftovers = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)))
        if (strstr(e->d_name, ".tmp-")) leftovers++;
    if (dd) closedir(dd);
    CHECK(leftovers == 0);
    unlink(path);
}

static void test_cli(void) {
    char buf[8192], args[1024];
    if (!getenv("WNA16_CLI")) return;
    CHECK(test_run_cli("quantize --help", buf, sizeof buf, 1) == 0 && strstr(buf, "--actorder"));
    snprintf(args, sizeof args, "quantize --model tests/data/rtn/base_bf16 --out %s/x --actorder group", tmp_root);
    CHECK(test_run_cli(args, buf, sizeof buf, 1) == 2 && strstr(buf, WNA16_ACTORDER_FIX));
    snprintf(args, sizeof args, "quantize --model tests/data/ct/w4a16_sym_g128 --out %s/x --method rtn", tmp_root);
    CHECK(test_run_cli(args, buf, sizeof buf, 1) == 1 && strstr(buf, "already quantized"));
    snprintf(args, sizeof args,
             "quantize --model tests/data/rtn/base_bf16 --out %s/cli --method rtn --scheme W8A16 --json --no-progress",
             tmp_root);
    CHECK(test_run_cli(args, buf, sizeof buf, 1) == 0 && strstr(buf, "\"modules_quantized\": 7"));
    char a[600];
    snprintf(a, sizeof a, "%s/cli/model.safetensors", tmp_root);
    CHECK(same_file(a, "tests/data/rtn/w8a16_g128/model.safetensors"));
    snprintf(a, sizeof a, "%s/cli", tmp_root);
    rm_dir(a);
}

/* Every architecture: RTN equals compressed-tensors' RTN of the same bf16
 * model (tests/data/models/<arch>_w4a16 were made by CT from <arch>_bf16),
 * and a GPTQ checkpoint loads and runs. */
static void test_architectures(void) {
    static const char *const archs[] = {"qwen3", "llama", "mixtral", "qwen2_moe", "qwen3_moe"};
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        char src[256], ref[256], out[512], a[700], b[700];
        snprintf(src, sizeof src, "tests/data/models/%s_bf16", archs[i]);
        snprintf(ref, sizeof ref, "tests/data/models/%s_w4a16", archs[i]);
        snprintf(out, sizeof out, "%s/%s", tmp_root, archs[i]);
        wna16_quantize_opts o = {.src = src, .dst = out, .bits = 4, .symmetric = true, .group_size = 32};
        wna16_quantize_report rep;
        wna16_diag d = {0};
        CHECK_MSG(wna16_quantize(&d, &o, &rep) == WNA16_OK, "%s: %s", archs[i], d.detail);
        wna16_quantize_report_free(&rep);
        static const char *const files[] = {"model.safetensors", "config.json"};
        for (int f = 0; f < 2; f++) {
            snprintf(a, sizeof a, "%s/%s", out, files[f]);
            snprintf(b, sizeof b, "%s/%s", ref, files[f]);
            CHECK_MSG(same_file(a, b), "%s differs from compressed-tensors' %s", a, b);
        }
        struct stat sb;
        CHECK(stat(out, &sb) == 0 && (sb.st_mode & 0055) != 0); /* not mkdtemp's 0700 */
        rm_dir(out);
        wna16_quantize_opts g = {.src = src, .dst = out, .bits = 4, .symmetric = true, .group_size = 32,
                                 .gptq = true, .actorder = true, .dampening = 0.01, .calib_random = true,
                                 .samples = 4, .seq_len = 32, .threads = 2};
        CHECK_MSG(wna16_quantize(&d, &g, &rep) == WNA16_OK, "%s GPTQ: %s", archs[i], d.detail);
        wna16_quantize_report_free(&rep);
        wna16_ctx *ctx;
        wna16_ctx_create(&ctx);
        wna16_model *m = NULL;
        wna16_model_options mo = {.tp = 1, .threads = 1};
        CHECK_STATUS(ctx, wna16_model_load(ctx, out, &mo, &m), WNA16_OK, "");
        if (m) {
            int32_t ids[] = {1, 5, 9, 2, 30, 17};
            float *lg = malloc((size_t)wna16_model_vocab_size(m) * sizeof *lg);
            CHECK(wna16_model_eval(ctx, m, ids, 6, lg) == WNA16_OK);
            bool finite = true;
            for (int64_t v = 0; v < wna16_model_vocab_size(m); v++) finite &= isfinite(lg[v]) != 0;
            CHECK(finite);
            free(lg);
        }
        wna16_model_free(m);
        wna16_ctx_free(ctx);
        rm_dir(out);
    }
}

/* MoE: every expert GPTQ'd (down_proj from its own quantized gate/up on all
 * tokens), the router left out, and the checkpoint runs in the fused MoE layer. */
static void test_gptq_moe(void) {
    char out[512];
    snprintf(out, sizeof out, "%s/moe", tmp_root);
    wna16_quantize_opts o = {.src = "tests/data/quant/tiny_moe", .dst = out, .bits = 4, .symmetric = true,
                             .group_size = 32, .gptq = true, .actorder = true, .dampening = 0.01,
                             .calib_random = true, .samples = 4, .seq_len = 32, .threads = 2};
    wna16_quantize_report rep;
    wna16_diag d = {0};
    CHECK_MSG(wna16_quantize(&d, &o, &rep) == WNA16_OK, "%s", d.detail);
    CHECK(rep.modules_quantized == 4 + 8 * 3);
    CHECK(rep.n_ignored == 2 && !strcmp(rep.ignored[0], "model.layers.0.mlp.gate") &&
          !strcmp(rep.ignored[1], "lm_head"));
    bool down = false;
    for (size_t i = 0; i < rep.n_types; i++)
        if (!strcmp(rep.types[i].type, "mlp.experts.down_proj"))
            down = rep.types[i].modules == 8 && rep.types[i].loss > 0;
    CHECK(down);
    wna16_quantize_report_free(&rep);
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_model *m = NULL;
    wna16_model_options mo = {.tp = 1, .threads = 1};
    CHECK_STATUS(ctx, wna16_model_load(ctx, out, &mo, &m), WNA16_OK, "");
    if (m) {
        int32_t ids[] = {1, 5, 9, 2, 30, 17};
        float lg[64];
        CHECK(wna16_model_eval(ctx, m, ids, 6, lg) == WNA16_OK);
        bool finite = true;
        for (int i = 0; i < 64; i++) finite &= isfinite(lg[i]) != 0;
        CHECK(finite);
    }
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    rm_dir(out);
}

/* --calib FILE.txt: tokenized with the model's tokenizer.json; a 2-layer
 * model exercises the sequential propagation (the `synth` demo at bf16). */
static void test_calib_text(void) {
    char buf[8192], args[2048], dir[512], out[512];
    if (!getenv("WNA16_CLI")) return;
    snprintf(dir, sizeof dir, "%s/demo16", tmp_root);
    snprintf(out, sizeof out, "%s/demo16q", tmp_root);
    snprintf(args, sizeof args, "synth --out %s --bits 16 --dense", dir);
    CHECK(test_run_cli(args, buf, sizeof buf, 1) == 0);
    snprintf(args, sizeof args, "%s/tokenizer.json", dir);
    size_t n;
    char *tj = slurp("tests/data/tokenizer/qwen3/tokenizer.json", &n);
    FILE *f = fopen(args, "wb");
    if (f && tj) fwrite(tj, 1, n, f);
    if (f) fclose(f);
    free(tj);
    snprintf(args, sizeof args,
             "quantize --model %s --out %s --calib README.md --samples 4 --seq-len 64 --no-progress --json",
             dir, out);
    CHECK_MSG(test_run_cli(args, buf, sizeof buf, 1) == 0 && strstr(buf, "\"calib_tokens\": 256") &&
                  strstr(buf, "\"modules_quantized\": 14"),
              "%s", buf);
    snprintf(args, sizeof args, "logits --model %s --ids 1,2,3 --top 3", out);
    char one[1024];
    CHECK(test_run_cli(args, one, sizeof one, 1) == 0);
    /* the same run in 1 MiB shards: an index, the same tensors, the same logits */
    char out2[600];
    snprintf(out2, sizeof out2, "%s2", out);
    snprintf(args, sizeof args,
             "quantize --model %s --out %s --calib README.md --samples 4 --seq-len 64 --no-progress "
             "--max-shard-size 1",
             dir, out2);
    CHECK(test_run_cli(args, buf, sizeof buf, 1) == 0 && strstr(buf, "2 shards"));
    char p[700];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", out2);
    json_t *idx = json_load_file(p, 0, NULL);
    const json_t *wm = json_object_get(idx, "weight_map");
    CHECK(json_object_size(wm) > 0 &&
          !strcmp(json_string_value(json_object_get(wm, "model.layers.1.mlp.down_proj.weight_packed")),
                  "model-00002-of-00002.safetensors") &&
          !strcmp(json_string_value(json_object_get(wm, "lm_head.weight")), "model-00001-of-00002.safetensors"));
    json_decref(idx);
    snprintf(args, sizeof args, "logits --model %s --ids 1,2,3 --top 3", out2);
    char two[1024];
    CHECK(test_run_cli(args, two, sizeof two, 1) == 0 && !strcmp(one, two));
    rm_dir(out2);
    rm_dir(out);
    rm_dir(dir);
}

/* MoE propagation: the runtime's fused MoE layer (what inference runs) and
 * the quantizer's own reference MoE math give the next layer the same inputs,
 * so both runs write (nearly) the same layer-1 weights. */
static void test_moe_propagation(void) {
    static const char *const archs[] = {"qwen3_moe", "mixtral", "qwen2_moe"};
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        char src[256], out[2][512], p[1100];
        snprintf(src, sizeof src, "tests/data/models/%s_bf16", archs[i]);
        wna16_safetensors *st[2] = {NULL, NULL};
        for (int ref = 0; ref < 2; ref++) {
            snprintf(out[ref], sizeof out[ref], "%s/%s_prop%d", tmp_root, archs[i], ref);
            wna16_quantize_opts g = {.src = src, .dst = out[ref], .bits = 4, .symmetric = true, .group_size = 32,
                                     .gptq = true, .actorder = true, .dampening = 0.01, .calib_random = true,
                                     .samples = 4, .seq_len = 32, .threads = 2, .moe_reference = ref == 1};
            wna16_quantize_report rep;
            wna16_diag d = {0};
            CHECK_MSG(wna16_quantize(&d, &g, &rep) == WNA16_OK, "%s: %s", archs[i], d.detail);
            wna16_quantize_report_free(&rep);
            snprintf(p, sizeof p, "%s/model.safetensors", out[ref]);
            wna16_st_open_file(NULL, p, &st[ref]);
        }
        CHECK(st[0] && st[1]);
        int64_t words = 0, same = 0;
        for (size_t t = 0; st[0] && st[1] && t < wna16_safetensors_count(st[0]); t++) {
            const wna16_tensor_view *a = wna16_safetensors_at(st[0], t);
            const wna16_tensor_view *b = wna16_safetensors_find(st[1], a->name);
            CHECK(b && b->nbytes == a->nbytes);
            if (!b || !strstr(a->name, "layers.1.") || !strstr(a->name, "weight_packed")) continue;
            for (size_t w = 0; w < a->nbytes / 4; w++, words++)
                same += ((const uint32_t *)a->data)[w] == ((const uint32_t *)b->data)[w];
        }
        printf("%s: layer-1 packed words equal with fused vs reference MoE propagation: %.2f%%\n", archs[i],
               words ? 100.0 * (double)same / (double)words : 0.0);
        CHECK(words > 0 && same >= words * 95 / 100);
        wna16_safetensors_close(st[0]);
        wna16_safetensors_close(st[1]);
        rm_dir(out[0]);
        rm_dir(out[1]);
    }
}

/* A group size that does not divide a linear's input features is refused
 * before any work, with one error naming the linears (summarised) and the
 * sizes that would work; skip_indivisible leaves them unquantized instead. */
static void test_indivisible(void) {
    char out[512];
    snprintf(out, sizeof out, "%s/indiv", tmp_root);
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_quantize_options o;
    wna16_quantize_options_init(&o);
    o.model = "tests/data/models/llama_bf16"; /* hidden 64, intermediate 128, 2 layers */
    o.output = out;
    o.method = "rtn";
    o.group_size = 128;
    CHECK_STATUS(ctx, wna16_quantize_model(ctx, &o, NULL), WNA16_ERR_GROUP_SIZE,
                 "group size 128 does not divide the input features of 12 linears such as "
                 "model.layers.0.mlp.gate_proj (in 64)");
    CHECK_MSG(strstr(wna16_ctx_error(ctx), "sizes that divide every input: 32, 64 or -1 (channelwise)") &&
                  strstr(wna16_ctx_error(ctx), "--skip-indivisible"),
              "%s", wna16_ctx_error(ctx));
    struct stat sb;
    CHECK(stat(out, &sb) != 0); /* refused up front: nothing written */
    /* two input sizes (64, and 32 for the experts' w2): one example of each */
    o.model = "tests/data/models/mixtral_bf16";
    CHECK_STATUS(ctx, wna16_quantize_model(ctx, &o, NULL), WNA16_ERR_GROUP_SIZE,
                 "such as model.layers.0.block_sparse_moe.experts.0.w1 (in 64), "
                 "model.layers.0.block_sparse_moe.experts.0.w2 (in 32); group sizes that divide every "
                 "input: 32 or -1");
    o.model = "tests/data/models/llama_bf16";
    o.skip_indivisible = true;
    char *rep = NULL;
    CHECK_STATUS(ctx, wna16_quantize_model(ctx, &o, &rep), WNA16_OK, "");
    CHECK_MSG(rep && strstr(rep, "\"modules_quantized\": 2"), "%s", rep ? rep : "");
    wna16_free(rep);
    wna16_ctx_free(ctx);
    rm_dir(out);
}

/* The unblocked forms of the Hessian and of the factor (no act-order, no
 * dead columns): the row-by-row AXPY Hessian, the textbook Cholesky of the
 * reversed, damped H and the row-by-row inverse. */
static void naive_hessian(float *h, int64_t k, const float *x, int64_t rows, float scale) {
    for (int64_t t = 0; t < rows; t++)
        for (int64_t i = 0; i < k; i++) {
            float a = x[t * k + i] * scale;
            for (int64_t j = i; j < k; j++) h[i * k + j] += a * x[t * k + j];
        }
}

static void naive_factor(const float *h, int64_t k, double damp_frac, float *u) {
    double *a = calloc((size_t)(k * k), sizeof *a), *x = calloc((size_t)(k * k), sizeof *x), mean = 0;
    for (int64_t i = 0; i < k; i++) /* reversed, from the upper triangle */
        for (int64_t j = 0; j < k; j++)
            a[(k - 1 - i) * k + (k - 1 - j)] = h[(i < j ? i : j) * k + (i < j ? j : i)];
    for (int64_t i = 0; i < k; i++) mean += a[i * k + i];
    for (int64_t i = 0; i < k; i++) a[i * k + i] += damp_frac * (mean / (double)k);
    for (int64_t j = 0; j < k; j++) {
        double sd = a[j * k + j];
        for (int64_t p = 0; p < j; p++) sd -= a[j * k + p] * a[j * k + p];
        a[j * k + j] = sqrt(sd);
        for (int64_t i = j + 1; i < k; i++) {
            double acc = a[i * k + j];
            for (int64_t p = 0; p < j; p++) acc -= a[i * k + p] * a[j * k + p];
            a[i * k + j] = acc / a[j * k + j];
        }
    }
    for (int64_t i = 0; i < k; i++) {
        x[i * k + i] = 1.0;
        for (int64_t p = 0; p < i; p++)
            for (int64_t c = 0; c <= p; c++) x[i * k + c] -= a[i * k + p] * x[p * k + c];
        for (int64_t c = 0; c <= i; c++) x[i * k + c] *= 1.0 / a[i * k + i];
    }
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) u[i * k + j] = j >= i ? (float)x[(k - 1 - i) * k + (k - 1 - j)] : 0.0f;
    free(a);
    free(x);
}

/* The register-tiled Hessian and factor give the unblocked forms' bits at
 * sizes with every edge (rows and columns off the tile and block sizes, a
 * partial token pass) and at one and two threads. */
static void test_tiled_bits(void) {
    static const int64_t ks[] = {37, 150, 200, 300};
    for (size_t c = 0; c < sizeof ks / sizeof *ks; c++) {
        int64_t k = ks[c], rows = 2 * k + 45;
        float *x = malloc((size_t)(rows * k) * 4), *h = calloc((size_t)(k * k), 4);
        float *hr = calloc((size_t)(k * k), 4), *ur = malloc((size_t)(k * k) * 4);
        uint64_t st = 0x1234567ull + (uint64_t)k;
        for (int64_t i = 0; i < rows * k; i++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            x[i] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.5);
        }
        naive_hessian(hr, k, x, rows, 0.125f);
        naive_factor(hr, k, 0.01, ur);
        for (int nt = 1; nt <= 2; nt++) {
            memset(h, 0, (size_t)(k * k) * 4);
            wna16_hessian_add(h, k, x, rows / 2, k, 0.125f, nt);
            wna16_hessian_add(h, k, x + rows / 2 * k, rows - rows / 2, k, 0.125f, nt);
            bool same = true;
            for (int64_t i = 0; i < k; i++)
                for (int64_t j = i; j < k; j++) same &= !memcmp(&h[i * k + j], &hr[i * k + j], 4);
            CHECK_MSG(same, "tiled Hessian k=%lld threads=%d differs from the AXPY form", (long long)k, nt);
        }
        wna16_gptq_opts go = {.dampening = 0.01, .blocksize = 128, .actorder = false};
        wna16_gptq_factor f;
        wna16_diag d = {0};
        CHECK(wna16_gptq_factor_build(&d, h, k, &go, &f) == WNA16_OK);
        bool same = !f.fallback && f.ldu >= k;
        for (int64_t i = 0; same && i < k; i++) same = !memcmp(f.u + i * f.ldu, ur + i * k, (size_t)k * 4);
        CHECK_MSG(same, "blocked factor k=%lld differs from the unblocked one", (long long)k);
        wna16_gptq_factor_free(&f);
        free(x), free(h), free(hr), free(ur);
    }
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/wna16_test_quant_XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    test_pyjson();
    test_rtn_fixtures();
    test_channel_config();
    test_tied();
    test_gptq_fixture();
    test_tiled_bits();
    test_gptq_end_to_end();
    test_cli();
    test_gptq_moe();
    test_architectures();
    test_moe_propagation();
    test_calib_text();
    test_indivisible();
    rm_dir(tmp_root);
    TEST_MAIN_END();
}
