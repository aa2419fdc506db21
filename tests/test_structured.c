/* Structured outputs and logit bias through the engine (wna16_engine with
 * wna16_sampling_params.structured / logit_bias) on the random-weight demo
 * model (Qwen3's tokenizer, 151,936 logits): whatever the weights, every
 * reply is a string of its format (a JSON Schema, a regex, a choice, a
 * GBNF grammar, Hermes tool calls), ends when the format does, and a
 * logit bias moves the greedy token; malformed and unsupported formats and
 * biases are refused at add_request, naming the problem. */
#include "testing.h"
#include "wna16.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static wna16_ctx *ctx;
static wna16_engine *engine;
static wna16_tokenizer *tok;

typedef struct reply {
    char text[8192];
    size_t len;
    int32_t first_token;
    bool finished;
    wna16_finish_reason reason;
    char error[256];
} reply;

static void on_out(void *user, const wna16_request_output *o) {
    reply *r = user;
    if (o->n_tokens && r->first_token < 0 && r->len == 0) r->first_token = o->token_ids[0];
    if (r->len + o->text_len < sizeof r->text) {
        memcpy(r->text + r->len, o->text, o->text_len);
        r->len += o->text_len;
        r->text[r->len] = '\0';
    }
    if (o->finished) {
        r->finished = true;
        r->reason = o->finish_reason;
        snprintf(r->error, sizeof r->error, "%s", o->error ? o->error : "");
    }
}

static void run_all(void) {
    while (wna16_engine_has_unfinished(engine)) {
        const wna16_request_output *outs;
        size_t n;
        if (wna16_engine_step(ctx, engine, &outs, &n) != WNA16_OK) return;
    }
}

static wna16_status add(const char *id, const char *prompt, const wna16_sampling_params *p,
                        reply *r) {
    memset(r, 0, sizeof *r);
    r->first_token = -1;
    wna16_prompt pr = {.text = prompt};
    return wna16_engine_add_request(ctx, engine, id, &pr, p, on_out, r);
}

static void params(wna16_sampling_params *p, wna16_structured_kind kind, const char *spec,
                   int64_t max_tokens) {
    wna16_sampling_params_init(p);
    p->max_tokens = max_tokens;
    p->structured.kind = kind;
    p->structured.spec = spec;
    p->structured.strict = true;
}

/* Bounded strings and arrays: a random model closes a string only when
 * the format leaves it nothing else. */
static const char *SCHEMA =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"maxLength\": 8},"
    "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120},"
    "\"color\": {\"enum\": [\"red\", \"green\", \"blue\"]},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 4}, "
    "\"maxItems\": 3},"
    "\"address\": {\"type\": \"object\", \"properties\": {\"zip\": {\"type\": \"string\", "
    "\"pattern\": \"^[0-9]{5}$\"}}, \"required\": [\"zip\"]}},"
    "\"required\": [\"name\", \"age\", \"color\", \"tags\", \"address\"]}";

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static void check_schema_reply(const reply *r, int i) {
    CHECK_MSG(r->finished && r->reason == WNA16_FINISH_STOP, "reply %d: reason %d (%s)", i,
              (int)r->reason, r->error);
    json_error_t je;
    json_t *j = json_loads(r->text, 0, &je);
    CHECK_MSG(json_is_object(j), "reply %d is not a JSON object: %s", i, r->text);
    if (!json_is_object(j)) return;
    CHECK(json_object_size(j) == 5);
    const char *name = json_string_value(json_object_get(j, "name"));
    CHECK(name && utf8_chars(name) <= 8);
    json_t *age = json_object_get(j, "age");
    CHECK(json_is_integer(age) && json_integer_value(age) >= 0 && json_integer_value(age) <= 120);
    const char *color = json_string_value(json_object_get(j, "color"));
    CHECK(color && (!strcmp(color, "red") || !strcmp(color, "green") || !strcmp(color, "blue")));
    json_t *tags = json_object_get(j, "tags");
    CHECK(json_is_array(tags) && json_array_size(tags) <= 3);
    const char *zip = json_string_value(json_object_get(json_object_get(j, "address"), "zip"));
    CHECK(zip && strlen(zip) == 5 && strspn(zip, "0123456789") == 5);
    json_decref(j);
}

static void test_json_schema(void) {
    wna16_sampling_params p;
    reply r[4];
    const char *prompts[] = {"Describe a person as JSON.", "Hello", "{", "A B C D"};
    for (int i = 0; i < 4; i++) {
        params(&p, WNA16_STRUCTURED_JSON_SCHEMA, SCHEMA, 400);
        p.structured.compact_json = i == 3;
        if (i == 2) p.sampler.temperature = 1.0f, p.sampler.seed = 7;
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        CHECK_STATUS(ctx, add(id, prompts[i], &p, &r[i]), WNA16_OK, NULL);
    }
    run_all();
    for (int i = 0; i < 4; i++) check_schema_reply(&r[i], i);
    CHECK(!strchr(r[3].text, ' ') && !strchr(r[3].text, '\n')); /* compact */
}

static void test_other_kinds(void) {
    wna16_sampling_params p;
    reply rx, ch, gb, obj, tc;
    params(&p, WNA16_STRUCTURED_REGEX, "(yes|no)-[0-9]{3}", 40);
    CHECK_STATUS(ctx, add("regex", "Answer:", &p, &rx), WNA16_OK, NULL);
    const char *choices[] = {"alpha", "beta gamma", "δέλτα"};
    params(&p, WNA16_STRUCTURED_CHOICE, NULL, 40);
    p.structured.choices = choices;
    p.structured.n_choices = 3;
    CHECK_STATUS(ctx, add("choice", "Pick one:", &p, &ch), WNA16_OK, NULL);
    params(&p, WNA16_STRUCTURED_GRAMMAR, "root ::= \"x=\" num (\"+\" num){0,3}\nnum ::= [1-9][0-9]{0,2}",
           40);
    CHECK_STATUS(ctx, add("gbnf", "Sum:", &p, &gb), WNA16_OK, NULL);
    params(&p, WNA16_STRUCTURED_JSON_OBJECT, NULL, 300);
    p.structured.compact_json = true;
    p.logit_bias_ids = (const int32_t[]){1, 90}; /* '"' and '{' must not break the format */
    p.logit_bias = (const float[]){100, -100};
    p.n_logit_bias = 2;
    CHECK_STATUS(ctx, add("object", "Any object:", &p, &obj), WNA16_OK, NULL);
    params(&p, WNA16_STRUCTURED_TOOL_CALLS,
           "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
           "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", "
           "\"maxLength\": 6}}, \"required\": [\"city\"]}}}]",
           200);
    CHECK_STATUS(ctx, add("tools", "Weather?", &p, &tc), WNA16_OK, NULL);
    run_all();
    CHECK_MSG(rx.reason == WNA16_FINISH_STOP &&
                  ((!strncmp(rx.text, "yes-", 4) && strlen(rx.text) == 7) ||
                   (!strncmp(rx.text, "no-", 3) && strlen(rx.text) == 6)),
              "regex reply \"%s\"", rx.text);
    CHECK_MSG(!strcmp(ch.text, "alpha") || !strcmp(ch.text, "beta gamma") ||
                  !strcmp(ch.text, "δέλτα"),
              "choice reply \"%s\"", ch.text);
    CHECK_MSG(!strncmp(gb.text, "x=", 2) && gb.text[2] >= '1' && gb.text[2] <= '9' &&
                  strspn(gb.text + 2, "0123456789+") == strlen(gb.text) - 2,
              "gbnf reply \"%s\"", gb.text);
    json_t *j = json_loads(obj.text, 0, NULL);
    CHECK_MSG(json_is_object(j) || obj.reason == WNA16_FINISH_LENGTH, "object reply \"%s\"",
              obj.text);
    json_decref(j);
    const char *open = "<tool_call>\n", *close = "\n</tool_call>";
    size_t n = strlen(tc.text);
    CHECK_MSG(tc.reason == WNA16_FINISH_STOP && !strncmp(tc.text, open, strlen(open)) &&
                  n > strlen(open) + strlen(close) && !strcmp(tc.text + n - strlen(close), close),
              "tool-call reply \"%s\"", tc.text);
    if (n > strlen(open) + strlen(close)) {
        char body[4096];
        snprintf(body, sizeof body, "%.*s", (int)(n - strlen(open) - strlen(close)),
                 tc.text + strlen(open));
        json_t *call = json_loads(body, 0, NULL);
        CHECK_MSG(call && !strcmp(json_string_value(json_object_get(call, "name")) ?: "",
                                  "get_weather") &&
                      json_is_string(json_object_get(json_object_get(call, "arguments"), "city")),
                  "tool call \"%s\"", body);
        json_decref(call);
    }
}

/* A bias of -100 on the greedy first token makes another one first; +100
 * on a token makes it first. */
static void test_logit_bias(void) {
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    p.max_tokens = 1;
    reply a, b, c;
    CHECK_STATUS(ctx, add("plain", "The capital of France is", &p, &a), WNA16_OK, NULL);
    run_all();
    int32_t greedy = a.first_token;
    CHECK(greedy >= 0);
    p.logit_bias_ids = &greedy;
    p.logit_bias = (const float[]){-100};
    p.n_logit_bias = 1;
    CHECK_STATUS(ctx, add("down", "The capital of France is", &p, &b), WNA16_OK, NULL);
    int32_t pick = 12345;
    wna16_sampling_params q = p;
    q.logit_bias_ids = &pick;
    q.logit_bias = (const float[]){100};
    CHECK_STATUS(ctx, add("up", "The capital of France is", &q, &c), WNA16_OK, NULL);
    run_all();
    CHECK(b.first_token >= 0 && b.first_token != greedy);
    CHECK(c.first_token == pick);
}

static void test_refusals(void) {
    wna16_sampling_params p;
    reply r;
    params(&p, WNA16_STRUCTURED_JSON_SCHEMA, "{\"type\": \"object\", \"if\": {}}", 8);
    CHECK_STATUS(ctx, add("bad1", "x", &p, &r), WNA16_ERR_UNSUPPORTED, "keyword 'if'");
    params(&p, WNA16_STRUCTURED_JSON_SCHEMA, "{not json", 8);
    CHECK_STATUS(ctx, add("bad2", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "structured output");
    params(&p, WNA16_STRUCTURED_REGEX, "(?=a)b", 8);
    CHECK_STATUS(ctx, add("bad3", "x", &p, &r), WNA16_ERR_UNSUPPORTED, NULL);
    params(&p, WNA16_STRUCTURED_GRAMMAR, "root ::= root \"a\" | \"b\"", 8);
    CHECK_STATUS(ctx, add("bad4", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "left recursion");
    params(&p, WNA16_STRUCTURED_REGEX, "(a|b)*a(a|b){20}", 8);
    CHECK_STATUS(ctx, add("bad5", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "DFA");
    params(&p, WNA16_STRUCTURED_CHOICE, NULL, 8);
    CHECK_STATUS(ctx, add("bad6", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "at least one");
    params(&p, WNA16_STRUCTURED_TOOL_CALLS, "[{\"type\": \"function\"}]", 8);
    CHECK_STATUS(ctx, add("bad7", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "no \"name\"");
    params(&p, WNA16_STRUCTURED_JSON_SCHEMA, NULL, 8);
    CHECK_STATUS(ctx, add("bad8", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "NULL");
    params(&p, (wna16_structured_kind)42, "x", 8);
    CHECK_STATUS(ctx, add("bad9", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "unknown kind");
    wna16_sampling_params_init(&p);
    int32_t id = 5;
    p.logit_bias_ids = &id;
    p.logit_bias = (const float[]){150};
    p.n_logit_bias = 1;
    CHECK_STATUS(ctx, add("bias1", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "[-100, 100]");
    id = 1 << 30;
    p.logit_bias = (const float[]){1};
    CHECK_STATUS(ctx, add("bias2", "x", &p, &r), WNA16_ERR_INVALID_ARGUMENT, "outside the vocabulary");
    CHECK(!wna16_engine_has_unfinished(engine));
}

int main(void) {
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    char dir[] = "/tmp/wna16-structured-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    wna16_synth_options so;
    wna16_synth_options_init(&so);
    so.layers = 2;
    wna16_model *m = NULL;
    wna16_status s = wna16_synth_write(ctx, &so, dir);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cp tests/data/tokenizer/qwen3/tokenizer*.json %s/", dir);
    if (s == WNA16_OK && system(cmd) != 0) s = WNA16_ERR_IO;
    if (s == WNA16_OK) s = wna16_tokenizer_load(ctx, dir, &tok);
    wna16_model_options mo;
    wna16_model_options_init(&mo);
    mo.context = 1024;
    if (s == WNA16_OK) s = wna16_model_load(ctx, dir, &mo, &m);
    wna16_engine_options eo;
    wna16_engine_options_init(&eo);
    eo.tokenizer = tok;
    eo.max_num_seqs = 8;
    if (s == WNA16_OK) s = wna16_engine_create(ctx, m, &eo, &engine);
    CHECK_MSG(s == WNA16_OK, "setup: %s", wna16_ctx_error(ctx));
    if (s == WNA16_OK) {
        test_json_schema();
        test_other_kinds();
        test_logit_bias();
        test_refusals();
    }
    wna16_engine_free(engine);
    wna16_model_free(m);
    wna16_tokenizer_free(tok);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
