/* wna16 perplexity: the log-likelihood of every token of a text under the
 * model, in windows of --ctx tokens that start every --stride tokens (the
 * Hugging Face sliding-window method; --stride = --ctx is llama-perplexity's
 * non-overlapping windows, scoring every token of each). */
#include "cli/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void perplexity_help(FILE *f) {
    fprintf(f,
            "usage: wna16 perplexity --model DIR (--file TEXT | --ids ID[,ID...]) [options]\n\n"
            "Perplexity of a UTF-8 text (tokenized with the model's tokenizer.json, special\n"
            "tokens applied as transformers' tokenizer(text) does) or of given token ids. The\n"
            "tokens are scored in windows of --ctx tokens beginning every --stride tokens; a\n"
            "window scores the tokens after the previous window's end (the first window\n"
            "scores all but its first token), each seeing up to ctx-1 tokens before it:\n"
            "the sliding-window method of transformers' perplexity guide.\n\n"
            "  --ctx N          window length in tokens (512, at most the model's context)\n"
            "  --stride S       window start step, 1..ctx (ctx: non-overlapping windows)\n"
            "  --tokenizer PATH tokenizer dir or tokenizer.json (default: the model dir)\n"
            "  --threads N      compute threads (all cores)\n"
            "  --tp N           tensor-parallel degree (threads backend)\n"
            "  --act-quant Q    the quantized linears' activations: none (16-bit, default)\n"
            "                   or int8 (W4A8: a scale per <=128 inputs; kernels.md)\n"
            "  --json           print the result as JSON\n\n"
            "Prints the perplexity exp(mean NLL) with its standard error (as llama-perplexity:\n"
            "ppl x the standard error of the mean NLL), the mean NLL in nats and the token\n"
            "counts. A progress bar over the scored tokens is drawn when stderr is a terminal.\n");
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *p = realloc(buf, 2 * cap + 1);
        if (!p) free(buf);
        buf = p;
        cap *= 2;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void draw_bar(double done, double total, double t0) {
    int width = 30, filled = (int)(width * done / (total > 0 ? total : 1));
    double el = cli_now() - t0, left = done > 0 ? el / done * (total - done) : 0;
    fprintf(stderr, "\rscore    [%.*s%*s] %.0f/%.0f tokens %.1fs", filled,
            "##############################", width - filled, "", done, total, el);
    if (done > 0 && done < total && left > 1) fprintf(stderr, ", ~%.0fs left ", left);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}

int wna16_cmd_perplexity(int argc, char **argv) {
    const char *dir = NULL, *file = NULL, *ids_text = NULL, *tok_path = NULL;
    long ctx_len = 512, stride = 0, threads = 0, tp = 1;
    int act_quant = WNA16_ACT_QUANT_NONE;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            perplexity_help(stdout);
            return 0;
        } else if (!strcmp(a, "--model") && next) dir = argv[++i];
        else if (!strcmp(a, "--file") && next) file = argv[++i];
        else if (!strcmp(a, "--ids") && next) ids_text = argv[++i];
        else if (!strcmp(a, "--tokenizer") && next) tok_path = argv[++i];
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--ctx")) {
            if (!cli_parse_int("--ctx", next, 2, 1 << 24, &ctx_len)) return 2;
            i++;
        } else if (!strcmp(a, "--stride")) {
            if (!cli_parse_int("--stride", next, 1, 1 << 24, &stride)) return 2;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int("--threads", next, 1, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--tp")) {
            if (!cli_parse_int("--tp", next, 1, 64, &tp)) return 2;
            i++;
        } else if (!strcmp(a, "--act-quant")) {
            if (!cli_parse_act_quant("--act-quant", next, &act_quant)) return 2;
            i++;
        } else {
            fprintf(stderr, "wna16 perplexity: unexpected argument '%s'\n", a);
            perplexity_help(stderr);
            return 2;
        }
    }
    if (!dir || (!file == !ids_text)) {
        fprintf(stderr, "wna16 perplexity: needs --model and one of --file or --ids\n");
        perplexity_help(stderr);
        return 2;
    }
    if (!stride) stride = ctx_len;
    if (stride > ctx_len) {
        fprintf(stderr, "wna16 perplexity: --stride %ld is longer than --ctx %ld (tokens would go "
                        "unscored)\n",
                stride, ctx_len);
        return 2;
    }
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    if (ids_text && !cli_parse_ids("perplexity", ids_text, &ids, &n, &cap)) {
        free(ids);
        return 2;
    }
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, !json);
    cli_catch_interrupts();
    wna16_status s = WNA16_OK;
    wna16_tokenizer *tok = NULL;
    char *text = NULL;
    size_t text_len = 0;
    int32_t *tids = NULL;
    if (file) {
        text = read_file(file, &text_len);
        if (!text) {
            fprintf(stderr, "wna16 perplexity: cannot read --file %s\n", file);
            wna16_ctx_free(ctx);
            return 1;
        }
        s = wna16_tokenizer_load(ctx, tok_path ? tok_path : dir, &tok);
        size_t nt = 0;
        if (s == WNA16_OK)
            s = wna16_tokenizer_encode(ctx, tok, text, text_len, WNA16_TOK_ADD_SPECIAL, &tids, &nt);
        if (s == WNA16_OK) {
            free(ids);
            ids = malloc((nt ? nt : 1) * sizeof *ids);
            if (ids) memcpy(ids, tids, nt * sizeof *ids);
            n = nt;
            if (!ids) s = wna16_ctx_set_error(ctx, WNA16_ERR_OUT_OF_MEMORY, "ids");
        }
    }
    if (s == WNA16_OK && n < 2)
        s = wna16_ctx_set_error(ctx, WNA16_ERR_INVALID_ARGUMENT,
                                "perplexity: %zu tokens; at least 2 are needed to score one", n);
    wna16_model *m = NULL;
    wna16_model_options mo;
    wna16_model_options_init(&mo);
    mo.tp = (int)tp;
    mo.threads = (int)threads;
    mo.context = ctx_len;
    mo.act_quant = act_quant;
    double t0 = cli_now();
    if (s == WNA16_OK) s = wna16_model_load(ctx, dir, &mo, &m);
    if (s == WNA16_OK && wna16_model_context(m) < ctx_len)
        s = wna16_ctx_set_error(ctx, WNA16_ERR_CONTEXT_OVERFLOW,
                                "perplexity: --ctx %ld is past the model's context of %lld",
                                ctx_len, (long long)wna16_model_context(m));
    float *lp = s == WNA16_OK ? malloc((size_t)ctx_len * sizeof *lp) : NULL;
    if (s == WNA16_OK && !lp) s = wna16_ctx_set_error(ctx, WNA16_ERR_OUT_OF_MEMORY, "lp");
    /* windows [begin, end) every stride; each scores (prev_end, end) except
     * the window's own first token */
    double sum = 0, sum2 = 0, t_score = cli_now();
    int64_t scored = 0, windows = 0, prev_end = 0, N = (int64_t)n;
    bool bar = !json && cli_progress_wanted();
    for (int64_t begin = 0; s == WNA16_OK && begin < N; begin += stride) {
        int64_t end = begin + ctx_len < N ? begin + ctx_len : N;
        int64_t from = prev_end > begin + 1 ? prev_end : begin + 1;
        s = wna16_model_logprobs(ctx, m, ids + begin, end - begin, lp, 0, NULL, NULL);
        for (int64_t t = from; s == WNA16_OK && t < end; t++) {
            double nll = -(double)lp[t - begin];
            sum += nll;
            sum2 += nll * nll;
            scored++;
        }
        windows++;
        prev_end = end;
        if (bar && s == WNA16_OK) draw_bar((double)end - 1, (double)N - 1, t_score);
        if (end == N) break;
    }
    double secs = cli_now() - t_score;
    int rc = 0;
    if (s != WNA16_OK) {
        rc = cli_fail("perplexity", ctx, s);
    } else {
        double mean = sum / (double)scored, ppl = exp(mean);
        double var = scored > 1 ? (sum2 / (double)scored - mean * mean) : 0;
        double se = scored > 1 && var > 0 ? sqrt(var / (double)(scored - 1)) : 0;
        if (json)
            printf("{\"perplexity\": %.9g, \"perplexity_stderr\": %.9g, \"nll_mean\": %.9g, "
                   "\"nll_stderr\": %.9g, \"tokens\": %lld, \"scored_tokens\": %lld, "
                   "\"windows\": %lld, \"ctx\": %ld, \"stride\": %ld, \"load_seconds\": %.9g, "
                   "\"seconds\": %.9g, \"tok_s\": %.9g}\n",
                   ppl, ppl * se, mean, se, (long long)N, (long long)scored, (long long)windows,
                   ctx_len, stride, t_score - t0, secs, secs > 0 ? (double)N / secs : 0);
        else
            printf("perplexity %.4f +/- %.4f (mean NLL %.6f nats over %lld tokens, %lld windows "
                   "of %ld, stride %ld; %.1fs, %.1f tok/s)\n",
                   ppl, ppl * se, mean, (long long)scored, (long long)windows, ctx_len, stride, secs,
                   secs > 0 ? (double)N / secs : 0);
    }
    free(lp);
    free(ids);
    wna16_free(tids);
    free(text);
    wna16_model_free(m);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    return rc;
}
