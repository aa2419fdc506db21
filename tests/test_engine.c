/* The engine (wna16_engine) on a fixture model: a batch of requests gives
 * each the tokens it gets alone (and that wna16_generate gives); requests
 * refused before they queue, with their messages; abort; logprobs against a
 * brute-force log-softmax; the background thread with callbacks and its
 * drain; metrics. And the output processor's rules (stop strings held back,
 * min_tokens, whole UTF-8 characters) on the real Qwen3 tokenizer. */
#include "engine/engine_internal.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MODEL "tests/data/models/qwen3_w4a16"
#define N 6
#define MAXT 8

typedef struct got {
    int32_t ids[64];
    int n;
    wna16_finish_reason finish;
    int outputs;
} got;

static void collect(got *g, const wna16_request_output *o) {
    for (size_t i = 0; i < o->n_tokens; i++) g->ids[g->n++] = o->token_ids[i];
    g->outputs++;
    if (o->finished) g->finish = o->finish_reason;
}

static void run_all(wna16_ctx *ctx, wna16_engine *e, got *g) {
    while (wna16_engine_has_unfinished(e)) {
        const wna16_request_output *outs;
        size_t n;
        CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK);
        for (size_t i = 0; i < n; i++) collect(&g[atoi(outs[i].request_id)], &outs[i]);
    }
}

static void prompt_of(int i, int32_t *ids, size_t *n) {
    *n = 3 + (size_t)i * 5;
    for (size_t t = 0; t < *n; t++) ids[t] = (int32_t)((i * 37 + t * 11) % 500 + 1);
}

static void test_batch_equals_alone(wna16_ctx *ctx, wna16_model *m) {
    wna16_engine *e = NULL;
    CHECK(wna16_engine_create(ctx, m, NULL, &e) == WNA16_OK);
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    p.max_tokens = MAXT;
    got batch[N] = {0};
    for (int i = 0; i < N; i++) {
        int32_t ids[64];
        size_t n;
        prompt_of(i, ids, &n);
        char id[8];
        snprintf(id, sizeof id, "%d", i);
        wna16_prompt pr = {.ids = ids, .n_ids = n};
        CHECK(wna16_engine_add_request(ctx, e, id, &pr, &p, NULL, NULL) == WNA16_OK);
    }
    run_all(ctx, e, batch);
    wna16_engine_metrics met;
    wna16_engine_get_metrics(e, &met);
    CHECK(met.generation_tokens == N * MAXT && met.requests_finished[WNA16_FINISH_LENGTH] == N);
    CHECK(met.num_requests_running == 0 && met.kv.blocks_used == 0 && met.steps >= MAXT);
    for (int i = 0; i < N; i++) {
        int32_t ids[64];
        size_t n;
        prompt_of(i, ids, &n);
        got alone[1] = {0};
        wna16_prompt pr = {.ids = ids, .n_ids = n};
        CHECK(wna16_engine_add_request(ctx, e, "0", &pr, &p, NULL, NULL) == WNA16_OK);
        run_all(ctx, e, alone);
        wna16_generate_options go;
        wna16_generate_options_init(&go);
        go.max_tokens = MAXT;
        wna16_generate_result r;
        CHECK(wna16_generate(ctx, m, NULL, ids, n, &go, &r) == WNA16_OK);
        CHECK(batch[i].finish == WNA16_FINISH_LENGTH && batch[i].n == MAXT && alone[0].n == MAXT);
        CHECK(!memcmp(batch[i].ids, alone[0].ids, MAXT * sizeof(int32_t)));
        CHECK(r.generated == MAXT && !memcmp(r.ids, batch[i].ids, MAXT * sizeof(int32_t)));
        wna16_generate_result_free(&r);
    }
    wna16_engine_free(e);
}

/* Penalties from the running tables equal the definition applied by brute
 * force over the whole history: presence and frequency over the generated
 * ids, then the repetition penalty once per distinct id of the prompt and
 * the output (transformers' rule: positive logits divided, negative ones
 * multiplied), bitwise, NaN left alone. */
static void test_penalty_tables(void) {
    enum { V = 97, NP = 40, NG = 300 };
    engine_request r = {0};
    wna16_sampling_params_init(&r.params);
    r.params.presence_penalty = 0.4f;
    r.params.frequency_penalty = 0.3f;
    r.params.sampler.repetition_penalty = 1.7f;
    int32_t hist[NP + NG];
    for (int i = 0; i < NP + NG; i++) hist[i] = (int32_t)((i * 7919 + i * i) % (V - 10));
    r.toks = hist;
    r.n_toks = NP;
    wna16_diag d = {0};
    CHECK(engine_penalties_init(&d, &r) == WNA16_OK);
    for (int i = NP; i < NP + NG; i++) CHECK(engine_penalties_add(&r, hist[i]));
    float got[V], want[V];
    for (int i = 0; i < V; i++) got[i] = want[i] = (float)((i * 37) % 23) - 11.5f;
    got[5] = want[5] = NAN;
    engine_apply_penalties(&r, got, V);
    int count[V] = {0};
    bool seen[V] = {0};
    for (int i = NP; i < NP + NG; i++) count[hist[i]]++;
    for (int i = 0; i < V; i++)
        if (count[i]) want[i] -= 0.3f * (float)count[i] + 0.4f;
    for (int i = 0; i < NP + NG; i++) {
        int32_t id = hist[i];
        if (seen[id] || isnan(want[id])) continue;
        seen[id] = true;
        want[id] = want[id] > 0 ? want[id] / 1.7f : want[id] * 1.7f;
    }
    CHECK(isnan(got[5]));
    got[5] = want[5] = 0;
    CHECK(!memcmp(got, want, sizeof got));
    engine_counts_free(&r.counts);
    engine_counts_free(&r.seen);
}

static void test_refusals(wna16_ctx *ctx, wna16_model *m) {
    wna16_engine_options o;
    wna16_engine_options_init(&o);
    o.max_num_seqs = 1;
    o.max_waiting = 0;
    wna16_engine *e = NULL;
    CHECK(wna16_engine_create(ctx, m, &o, &e) == WNA16_OK);
    int32_t ids[4] = {1, 2, 3, 4}, bad = 100000;
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    wna16_prompt pr = {.ids = ids, .n_ids = 4}, none = {.ids = ids, .n_ids = 0};
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "a", &none, &p, NULL, NULL),
                 WNA16_ERR_INVALID_ARGUMENT, "the prompt is empty");
    wna16_prompt oov = {.ids = &bad, .n_ids = 1};
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "a", &oov, &p, NULL, NULL),
                 WNA16_ERR_TOKEN_ID, "outside the vocabulary");
    wna16_prompt text = {.text = "hello"};
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "a", &text, &p, NULL, NULL),
                 WNA16_ERR_INVALID_ARGUMENT, "needs the engine's tokenizer");
    wna16_prompt two = {.ids = ids, .n_ids = 4, .text = "x"};
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "a", &two, &p, NULL, NULL),
                 WNA16_ERR_INVALID_ARGUMENT, "exactly one");
    p.max_tokens = wna16_model_context(m);
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "a", &pr, &p, NULL, NULL),
                 WNA16_ERR_CONTEXT_OVERFLOW, "maximum context length");
    p.max_tokens = 4;
    p.logprobs = 21;
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "a", &pr, &p, NULL, NULL),
                 WNA16_ERR_INVALID_ARGUMENT, "logprobs 21");
    p.logprobs = -1;
    p.sampler.top_p = 2;
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "a", &pr, &p, NULL, NULL),
                 WNA16_ERR_INVALID_ARGUMENT, "top_p");
    p.sampler.top_p = 1;
    CHECK(wna16_engine_add_request(ctx, e, "a", &pr, &p, NULL, NULL) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "b", &pr, &p, NULL, NULL), WNA16_ERR_LIMIT,
                 "retry later");
    CHECK_STATUS(ctx, wna16_engine_abort(ctx, e, "zz"), WNA16_ERR_INVALID_ARGUMENT,
                 "no unfinished request");
    /* an abort ends it at the next step, its blocks back */
    got g[1] = {0};
    const wna16_request_output *outs;
    size_t n;
    CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK && n == 1 && !outs[0].finished);
    CHECK(wna16_engine_abort(ctx, e, "a") == WNA16_OK);
    CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK && n == 1);
    collect(g, &outs[0]);
    CHECK(g[0].finish == WNA16_FINISH_ABORT && !wna16_engine_has_unfinished(e));
    wna16_engine_metrics met;
    wna16_engine_get_metrics(e, &met);
    CHECK(met.kv.blocks_used == 0 && met.requests_finished[WNA16_FINISH_ABORT] == 1);
    wna16_engine_stop(e, 0);
    CHECK_STATUS(ctx, wna16_engine_add_request(ctx, e, "c", &pr, &p, NULL, NULL),
                 WNA16_ERR_UNAVAILABLE, "shutting down");
    wna16_engine_free(e);
}

/* Fair engine time: while a sequence decodes, a long prompt_logprobs
 * request adds one logits row per DECODE_ROWS_PER_SCORED_ROW decode rows to
 * a step, at least one (instead of PROMPT_LP_ROWS), still advances every step, and
 * gets every position scored; alone it scores PROMPT_LP_ROWS a step. */
static void test_scored_prompt_bounded_while_decoding(wna16_ctx *ctx, wna16_model *m) {
    wna16_engine *e = NULL;
    CHECK(wna16_engine_create(ctx, m, NULL, &e) == WNA16_OK);
    if (!e) return;
    wna16_sampling_params dec, sc;
    wna16_sampling_params_init(&dec);
    dec.max_tokens = 120;
    dec.ignore_eos = true;
    wna16_sampling_params_init(&sc);
    sc.max_tokens = 1;
    sc.prompt_logprobs = 5;
    int32_t a[5] = {11, 12, 13, 14, 15}, b[200];
    for (int i = 0; i < 200; i++) b[i] = (int32_t)(i * 13 % 400 + 1);
    wna16_prompt pa = {.ids = a, .n_ids = 5}, pb = {.ids = b, .n_ids = 200};
    CHECK(wna16_engine_add_request(ctx, e, "0", &pa, &dec, NULL, NULL) == WNA16_OK);
    const wna16_request_output *outs;
    size_t n;
    CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK); /* a's prompt: now it decodes */
    CHECK(wna16_engine_add_request(ctx, e, "1", &pb, &sc, NULL, NULL) == WNA16_OK);
    int64_t scored_steps = 0, plps = 0, most = 0;
    bool b_done = false;
    while (wna16_engine_has_unfinished(e)) {
        CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK);
        int64_t D = e->step_decode_rows, L = e->step_prompt_logit_rows;
        if (D > 0) {
            int64_t bound = D / DECODE_ROWS_PER_SCORED_ROW;
            CHECK(L <= (bound > 0 ? bound : 1));
            scored_steps += L > 0;
            if (L > most) most = L;
        }
        for (size_t i = 0; i < n; i++)
            if (!strcmp(outs[i].request_id, "1")) {
                plps += (int64_t)outs[i].n_prompt_logprobs;
                b_done = b_done || outs[i].finished;
            }
    }
    /* b went ahead beside a's 120 tokens, one scored row per step */
    CHECK(b_done && scored_steps >= 100 && most == 1);
    CHECK(plps == 199);
    /* beside 8 decoding sequences, 8 / DECODE_ROWS_PER_SCORED_ROW a step */
    char ids[8][4];
    for (int i = 0; i < 8; i++) {
        snprintf(ids[i], sizeof ids[i], "d%d", i);
        CHECK(wna16_engine_add_request(ctx, e, ids[i], &pa, &dec, NULL, NULL) == WNA16_OK);
    }
    CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK); /* their prompts */
    CHECK(wna16_engine_add_request(ctx, e, "3", &pb, &sc, NULL, NULL) == WNA16_OK);
    most = 0;
    for (int s = 0; s < 20; s++) {
        CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK);
        CHECK(e->step_decode_rows == 8);
        if (e->step_prompt_logit_rows > most) most = e->step_prompt_logit_rows;
    }
    CHECK(most == 8 / DECODE_ROWS_PER_SCORED_ROW);
    while (wna16_engine_has_unfinished(e)) CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK);
    /* alone, a scored prompt takes PROMPT_LP_ROWS positions a step */
    CHECK(wna16_engine_add_request(ctx, e, "2", &pb, &sc, NULL, NULL) == WNA16_OK);
    CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK);
    CHECK(e->step_decode_rows == 0 && e->step_prompt_logit_rows == PROMPT_LP_ROWS);
    while (wna16_engine_has_unfinished(e)) CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK);
    wna16_engine_free(e);
}

/* The chosen token's and the top logprobs equal a brute-force log-softmax. */
static void test_logprobs(wna16_ctx *ctx, wna16_model *m) {
    wna16_engine *e = NULL;
    CHECK(wna16_engine_create(ctx, m, NULL, &e) == WNA16_OK);
    int32_t ids[5] = {5, 6, 7, 8, 9};
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    p.max_tokens = 1;
    p.logprobs = 5;
    wna16_prompt pr = {.ids = ids, .n_ids = 5};
    CHECK(wna16_engine_add_request(ctx, e, "0", &pr, &p, NULL, NULL) == WNA16_OK);
    const wna16_request_output *outs;
    size_t n = 0;
    while (!n) CHECK(wna16_engine_step(ctx, e, &outs, &n) == WNA16_OK);
    CHECK(n == 1 && outs[0].logprobs && outs[0].n_tokens == 1);
    int64_t V = wna16_model_vocab_size(m);
    float *logits = malloc((size_t)V * sizeof *logits);
    wna16_model_reset(m);
    CHECK(wna16_model_eval(ctx, m, ids, 5, logits) == WNA16_OK);
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int64_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    const wna16_token_logprob *lp = &outs[0].logprobs[0];
    CHECK(lp->id == outs[0].token_ids[0] && lp->n_top == 5);
    CHECK(fabs(lp->logprob - (logits[lp->id] - mx - log(sum))) < 1e-5);
    for (int k = 0; k < 5; k++) { /* the k-th largest, by counting those above it */
        int above = 0;
        for (int64_t i = 0; i < V; i++)
            above += logits[i] > logits[lp->top_ids[k]] ||
                     (logits[i] == logits[lp->top_ids[k]] && i < lp->top_ids[k]);
        CHECK(above == k);
        CHECK(fabs(lp->top_logprobs[k] - (logits[lp->top_ids[k]] - mx - log(sum))) < 1e-5);
    }
    CHECK(lp->top_ids[0] == lp->id); /* greedy */
    free(logits);
    wna16_engine_free(e);
}

static void on_out(void *user, const wna16_request_output *o) { collect(user, o); }

static void test_background(wna16_ctx *ctx, wna16_model *m) {
    wna16_engine *e = NULL;
    CHECK(wna16_engine_create(ctx, m, NULL, &e) == WNA16_OK);
    CHECK(wna16_engine_start(ctx, e) == WNA16_OK);
    const wna16_request_output *outs;
    size_t n;
    CHECK_STATUS(ctx, wna16_engine_step(ctx, e, &outs, &n), WNA16_ERR_INVALID_ARGUMENT,
                 "its own thread");
    got g[3] = {0};
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    p.max_tokens = 5;
    int32_t ids[3] = {3, 4, 5};
    wna16_prompt pr = {.ids = ids, .n_ids = 3};
    for (int i = 0; i < 3; i++) {
        char id[4];
        snprintf(id, sizeof id, "%d", i);
        CHECK(wna16_engine_add_request(ctx, e, id, &pr, &p, on_out, &g[i]) == WNA16_OK);
    }
    wna16_engine_stop(e, 30); /* drains: every request finishes */
    for (int i = 0; i < 3; i++)
        CHECK(g[i].finish == WNA16_FINISH_LENGTH && g[i].n == 5 &&
              !memcmp(g[i].ids, g[0].ids, 5 * sizeof(int32_t)));
    char msg[64];
    CHECK(wna16_engine_status(e, msg, sizeof msg) == WNA16_OK && !msg[0]);
    wna16_engine_free(e);
}

/* The decode steps' floors see the routed experts each step read: on a MoE
 * model more than none and no more than its weights, adding up to what the
 * model counted over those steps; on a dense model none. */
typedef struct floors {
    int steps;
    double bytes, min_bytes;
} floors;

static double record_floor(void *user, int64_t rows, int64_t logit_rows, double expert_bytes,
                           double seconds) {
    floors *f = user;
    CHECK(rows >= 1 && logit_rows == rows && seconds > 0);
    f->steps++;
    f->bytes += expert_bytes;
    if (expert_bytes < f->min_bytes) f->min_bytes = expert_bytes;
    return 0;
}

static void routed_bytes_case(wna16_ctx *ctx, const char *dir, bool moe) {
    wna16_model *m = NULL;
    CHECK(wna16_model_load(ctx, dir, NULL, &m) == WNA16_OK);
    if (!m) return;
    floors f = {.min_bytes = 1e300};
    wna16_engine_options o;
    wna16_engine_options_init(&o);
    o.step_floor = record_floor;
    o.step_floor_user = &f;
    wna16_engine *e = NULL;
    CHECK(wna16_engine_create(ctx, m, &o, &e) == WNA16_OK);
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    p.max_tokens = 4;
    got g[2] = {0};
    for (int i = 0; i < 2; i++) {
        int32_t ids[MAXT];
        size_t n;
        prompt_of(i, ids, &n);
        wna16_prompt pr = {.ids = ids, .n_ids = n};
        char id[4];
        snprintf(id, sizeof id, "%d", i);
        CHECK(wna16_engine_add_request(ctx, e, id, &pr, &p, NULL, NULL) == WNA16_OK);
    }
    int64_t before = wna16_model_routed_expert_bytes(m);
    run_all(ctx, e, g);
    int64_t read = wna16_model_routed_expert_bytes(m) - before;
    CHECK_MSG(f.steps >= 3, "%d decode steps", f.steps);
    if (moe)
        CHECK_MSG(f.min_bytes > 0 && f.bytes <= (double)read &&
                      f.min_bytes <= (double)wna16_model_weight_bytes(m),
                  "%s: least %.0f, decode %.0f of %lld bytes", dir, f.min_bytes, f.bytes,
                  (long long)read);
    else
        CHECK(f.bytes == 0 && read == 0);
    wna16_engine_free(e);
    wna16_model_free(m);
}

static void test_routed_bytes(wna16_ctx *ctx) {
    routed_bytes_case(ctx, "tests/data/models/qwen3_moe_w4a16", true);
    routed_bytes_case(ctx, MODEL, false);
}

/* ------------------------------------------------------ output processor */

static void push_text(wna16_ctx *ctx, const wna16_tokenizer *tok, wna16_output *o,
                      const char *text, wna16_buf *released) {
    int32_t *ids;
    size_t n;
    CHECK(wna16_tokenizer_encode(ctx, (wna16_tokenizer *)tok, text, strlen(text), 0, &ids, &n) ==
          WNA16_OK);
    for (size_t i = 0; i < n && !o->finish; i++) {
        CHECK(wna16_output_push(ctx, o, ids[i], 100) == WNA16_OK);
        const char *t;
        size_t len;
        wna16_output_take(o, &t, &len);
        /* never the start of a possible stop string, never half a character */
        CHECK(len == 0 || ((unsigned char)t[len - 1] & 0xC0) != 0xC0);
        wna16_buf_put(released, t, len);
    }
    wna16_free(ids);
}

static void test_output_processor(wna16_ctx *ctx) {
    wna16_tokenizer *tok = NULL;
    CHECK(wna16_tokenizer_load(ctx, "tests/data/tokenizer/qwen3", &tok) == WNA16_OK);
    char *stops[] = {"STOP here", "zz"};
    wna16_output_rules r = {.stop = stops, .n_stop = 2, .skip_special = true, .max_tokens = 100};
    wna16_output o;
    wna16_buf out = {0};
    CHECK(wna16_output_init(ctx, &o, tok, &r) == WNA16_OK);
    push_text(ctx, tok, &o, "héllo wörld ✓ then STOP here and more", &out);
    CHECK(o.finish == WNA16_FINISH_STOP && o.stop_str == stops[0]);
    const char *t;
    size_t len;
    wna16_output_take(&o, &t, &len);
    wna16_buf_put(&out, t, len);
    CHECK(out.data && !strcmp(out.data, "héllo wörld ✓ then "));
    wna16_output_free(&o);
    /* min_tokens: a stop string before it does not end the text */
    out.len = 0;
    r.min_tokens = 50;
    r.include_stop_str = true;
    CHECK(wna16_output_init(ctx, &o, tok, &r) == WNA16_OK);
    push_text(ctx, tok, &o, "a zz b", &out);
    CHECK(o.finish == WNA16_FINISH_NONE);
    r.min_tokens = 0;
    push_text(ctx, tok, &o, " c zz d", &out);
    CHECK(o.finish == WNA16_FINISH_STOP && o.stop_str == stops[1]);
    wna16_output_take(&o, &t, &len);
    wna16_buf_put(&out, t, len);
    CHECK_MSG(out.data && !strcmp(out.data, "a zz b c zz"), "got [%s]", out.data); /* included, first match after it */
    wna16_output_free(&o);
    wna16_buf_free(&out);
    wna16_tokenizer_free(tok);
}

int main(void) {
    wna16_ctx *ctx = NULL;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    wna16_model *m = NULL;
    CHECK(wna16_model_load(ctx, MODEL, NULL, &m) == WNA16_OK);
    if (m) {
        test_batch_equals_alone(ctx, m);
        test_refusals(ctx, m);
        test_logprobs(ctx, m);
        test_scored_prompt_bounded_while_decoding(ctx, m);
        test_background(ctx, m);
    }
    test_routed_bytes(ctx);
    test_output_processor(ctx);
    test_penalty_tables();
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
