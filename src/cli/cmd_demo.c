/* `wna16 demo`: the README's first command. Builds a tiny Qwen3-MoE in
 * compressed-tensors W4A16 with the real Qwen3 tokenizer, inspects it, and
 * generates with TP=1 and TP=2, checking that both agree. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void demo_help(FILE *f) {
    fprintf(f, "usage: wna16 demo [--dir DIR] [--tokenizer DIR] [-n N] [--prompt TEXT]\n\n"
               "Builds a tiny random-weight Qwen3-MoE (W4A16, group 32) with the real Qwen3\n"
               "tokenizer in DIR (default demo-model), runs inspect on it, then greedy generation\n"
               "with TP=1 and TP=2 (ranks as threads), and checks that both give the same tokens.\n"
               "The weights are random, so the text is too: the demo shows the machinery.\n");
}

static bool quiet(void *user, const char *text, size_t len) {
    (void)user, (void)text, (void)len;
    return true;
}

static wna16_status run_tp(wna16_ctx *ctx, const char *dir, wna16_tokenizer *tok, int tp,
                           const int32_t *ids, size_t n_ids, long n, wna16_generate_result *r) {
    wna16_model *m = NULL;
    wna16_model_options mo = {.tp = tp, .context = 512};
    double t0 = cli_now();
    wna16_status s = wna16_model_load(ctx, dir, &mo, &m);
    if (s != WNA16_OK) return s;
    double load = cli_now() - t0;
    wna16_generate_options go = {.max_tokens = n, .on_text = quiet};
    s = wna16_generate(ctx, m, tok, ids, n_ids, &go, r);
    if (s == WNA16_OK) {
        printf("\n== generate, TP=%d (loaded in %.0f ms, %lld prompt tokens at %.0f tok/s, %lld "
               "generated at %.1f tok/s)\n",
               tp, load * 1e3, (long long)r->prompt_tokens,
               r->prefill_seconds > 0 ? (double)r->prompt_tokens / r->prefill_seconds : 0.0,
               (long long)r->generated,
               r->decode_seconds > 0 ? (double)r->generated / r->decode_seconds : 0.0);
        printf("%s\n", r->text);
    }
    wna16_model_free(m);
    return s;
}

static bool has_tokenizer(const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return access(path, R_OK) == 0;
}

/* The Qwen3 tokenizer: the repository's copy when run from its root, else
 * the one installed with the tool (<exe>/../share/wna16, wherever the
 * prefix was moved to, then the configured data directory). */
static const char *default_tokenizer(void) {
    static const char repo[] = "tests/data/tokenizer/qwen3";
    if (has_tokenizer(repo)) return repo;
    static char beside[1100];
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = '\0';
        snprintf(beside, sizeof beside, "%s/../share/wna16/tokenizer/qwen3", exe);
        if (has_tokenizer(beside)) return beside;
    }
#ifdef WNA16_DATA_DIR
    if (has_tokenizer(WNA16_DATA_DIR "/tokenizer/qwen3")) return WNA16_DATA_DIR "/tokenizer/qwen3";
#endif
    return repo;
}

int wna16_cmd_demo(int argc, char **argv) {
    const char *dir = "demo-model", *tokdir = NULL;
    const char *prompt = "Explain tensor parallelism in one sentence.";
    long n = 24;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(argv[i])) return demo_help(stdout), 0;
        else if (!strcmp(argv[i], "--dir") && v) dir = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && v) tokdir = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && v) prompt = argv[++i];
        else if (!strcmp(argv[i], "-n")) { if (!cli_parse_int("-n", v, 1, 4096, &n)) return 2; i++; }
        else {
            fprintf(stderr, "wna16 demo: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!tokdir) tokdir = default_tokenizer();
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, false);
    wna16_synth_options o;
    wna16_synth_options_init(&o);
    o.preset = "demo";
    printf("== building a tiny Qwen3-MoE (W4A16 g32) in %s\n", dir);
    wna16_status s = wna16_synth_write(ctx, &o, dir);
    if (s != WNA16_OK) return cli_fail("demo", ctx, s);
    if (!cli_copy_tokenizer("demo", tokdir, dir)) {
        fprintf(stderr, "wna16 demo: no Qwen3 tokenizer found; install wna16 (its data has one), run it from the repository root, or pass --tokenizer DIR\n");
        return 1;
    }
    wna16_checkpoint *ck = NULL;
    char *report = NULL;
    bool ok = false;
    int tps[2] = {1, 2};
    s = wna16_checkpoint_open(ctx, dir, &ck);
    if (s == WNA16_OK) s = wna16_checkpoint_report(ctx, ck, tps, 2, false, &report, &ok);
    if (s != WNA16_OK) return cli_fail("demo", ctx, s);
    printf("\n== inspect %s\n%s", dir, report);
    wna16_free(report);
    wna16_checkpoint_close(ck);
    wna16_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *chat = NULL;
    wna16_chat_message msg = {"user", prompt};
    s = wna16_tokenizer_load(ctx, dir, &tok);
    if (s == WNA16_OK) s = wna16_tokenizer_apply_chat(ctx, tok, &msg, 1, true, false, &chat);
    if (s == WNA16_OK) s = wna16_tokenizer_encode(ctx, tok, chat, strlen(chat), WNA16_TOK_PARSE_SPECIAL, &ids, &n_ids);
    printf("\n== prompt (chat formatted, %zu tokens): %s\n", n_ids, prompt);
    wna16_generate_result r1 = {0}, r2 = {0};
    if (s == WNA16_OK) s = run_tp(ctx, dir, tok, 1, ids, n_ids, n, &r1);
    if (s == WNA16_OK) s = run_tp(ctx, dir, tok, 2, ids, n_ids, n, &r2);
    int rc = 0;
    if (s != WNA16_OK) rc = cli_fail("demo", ctx, s);
    else {
        bool same = r1.generated == r2.generated &&
                    !memcmp(r1.ids, r2.ids, (size_t)r1.generated * sizeof *r1.ids);
        printf("\n== TP=1 and TP=2 %s: %lld tokens %s\n", same ? "agree" : "DISAGREE",
               (long long)r1.generated, same ? "identical" : "differ");
        rc = same ? 0 : 1;
    }
    wna16_free(chat);
    wna16_free(ids);
    wna16_generate_result_free(&r1);
    wna16_generate_result_free(&r2);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    return rc;
}
