/* A program that uses an installed libwna16: loads the model directory given
 * as argv[1], feeds it a few token ids and prints the greedy next token and
 * the library's version. Built three ways by tests/install/run.sh. */
#include <wna16.h>

#include <stdio.h>
#include <stdlib.h>

static int fail(wna16_ctx *ctx, wna16_status s, const char *what) {
    fprintf(stderr, "%s: %s: %s\n", what, wna16_status_str(s), wna16_ctx_error(ctx));
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: consumer MODEL_DIR\n");
        return 2;
    }
    wna16_ctx *ctx = NULL;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    wna16_model_options o = {.threads = 1};
    wna16_model *m = NULL;
    wna16_status s = wna16_model_load(ctx, argv[1], &o, &m);
    if (s != WNA16_OK) return fail(ctx, s, "load");
    int64_t vocab = wna16_model_vocab_size(m);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    const int32_t ids[] = {1, 2, 3, 4};
    s = wna16_model_eval(ctx, m, ids, 4, logits);
    if (s != WNA16_OK) return fail(ctx, s, "eval");
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    printf("wna16 %s (%u): next %lld\n", wna16_version(), (unsigned)wna16_version_number(),
           (long long)best);
    free(logits);
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    return 0;
}
