/* Serves N prompts at once through wna16_engine: every prompt is added,
 * then steps run until none is left, each printing what it produced. Prints
 * one JSON line per request at the end: its id, tokens and text.
 *
 *   cc engine_demo.c $(pkg-config --cflags --libs wna16) -o engine_demo
 *   ./engine_demo MODEL_DIR MAX_TOKENS "first prompt" "second prompt" ...
 */
#include <wna16.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reply {
    int32_t tokens[4096];
    size_t n_tokens;
    char *text;
    size_t len;
    const char *finish;
} reply;

static int fail(wna16_ctx *ctx, const char *what) {
    fprintf(stderr, "engine_demo: %s: %s\n", what, wna16_ctx_error(ctx));
    return 1;
}

/* Appends one step's output of a request to its reply. */
static void take(reply *r, const wna16_request_output *o) {
    for (size_t i = 0; i < o->n_tokens && r->n_tokens < 4096; i++)
        r->tokens[r->n_tokens++] = o->token_ids[i];
    char *t = realloc(r->text, r->len + o->text_len + 1);
    if (!t) return;
    memcpy(t + r->len, o->text, o->text_len);
    r->len += o->text_len;
    t[r->len] = '\0';
    r->text = t;
    if (o->finished) r->finish = wna16_finish_reason_str(o->finish_reason);
}

static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: engine_demo MODEL_DIR MAX_TOKENS PROMPT...\n");
        return 2;
    }
    int n = argc - 3;
    wna16_ctx *ctx = NULL;
    wna16_model *m = NULL;
    wna16_tokenizer *tok = NULL;
    wna16_engine *e = NULL;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    if (wna16_model_load(ctx, argv[1], NULL, &m) != WNA16_OK) return fail(ctx, "load");
    if (wna16_tokenizer_load(ctx, argv[1], &tok) != WNA16_OK) return fail(ctx, "tokenizer");
    wna16_engine_options eo;
    wna16_engine_options_init(&eo);
    eo.tokenizer = tok;
    if (wna16_engine_create(ctx, m, &eo, &e) != WNA16_OK) return fail(ctx, "engine");

    reply *replies = calloc((size_t)n, sizeof *replies);
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    p.max_tokens = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", i);
        wna16_prompt prompt = {.text = argv[3 + i]};
        if (wna16_engine_add_request(ctx, e, id, &prompt, &p, NULL, NULL) != WNA16_OK)
            return fail(ctx, "add_request");
    }
    while (wna16_engine_has_unfinished(e)) {
        const wna16_request_output *outs;
        size_t k;
        if (wna16_engine_step(ctx, e, &outs, &k) != WNA16_OK) return fail(ctx, "step");
        for (size_t i = 0; i < k; i++) take(&replies[atoi(outs[i].request_id)], &outs[i]);
    }
    for (int i = 0; i < n; i++) {
        printf("{\"id\": %d, \"finish_reason\": \"%s\", \"tokens\": [", i, replies[i].finish);
        for (size_t t = 0; t < replies[i].n_tokens; t++)
            printf("%s%d", t ? ", " : "", replies[i].tokens[t]);
        printf("], \"text\": ");
        print_json_string(replies[i].text ? replies[i].text : "");
        printf("}\n");
        free(replies[i].text);
    }
    free(replies);
    wna16_engine_free(e);
    wna16_tokenizer_free(tok);
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    return 0;
}
