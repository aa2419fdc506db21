/* Real chat templates through the Jinja interpreter (src/jinja/jinja.h):
 *  - byte equality with transformers' apply_chat_template over the goldens
 *    in tests/data/chat/NAME.json (scripts/dev/make_chat_goldens.py), refusals
 *    (raise_exception) included;
 *  - no crash on any prefix of every template.
 * The interpreter's own features, errors and limits: tests/test_jinja.c. */
#include "testing.h"
#include "jinja/jinja.h"
#include "wna16.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define CHAT "tests/data/chat/"

static const char *const GOLDENS[] = {"qwen3",        "qwen2.5", "llama3",     "llama3.2",
                                      "mistral_v0.1", "smollm2", "deepseek_v3", "mistral_v3"};

static void run_golden(const char *name, size_t *cases, size_t *equal) {
    char path[256];
    snprintf(path, sizeof path, CHAT "%s.json", name);
    json_error_t err;
    json_t *doc = json_load_file(path, 0, &err);
    CHECK_MSG(doc != NULL, "%s: %s", path, err.text);
    const char *tpl = json_string_value(json_object_get(doc, "template"));
    const json_t *list = json_object_get(doc, "cases");
    CHECK(tpl && json_array_size(list) > 0);
    for (size_t i = 0; tpl && i < json_array_size(list); i++) {
        const json_t *c = json_array_get(list, i);
        const char *want = json_string_value(json_object_get(c, "text"));
        const char *refusal = json_string_value(json_object_get(c, "error"));
        wna16_diag d = {0};
        char *out = NULL;
        wna16_status s = wna16_jinja_render(&d, tpl, json_object_get(c, "vars"), &out);
        bool ok = want ? s == WNA16_OK && !strcmp(out, want)
                       : s == WNA16_ERR_INVALID_ARGUMENT && refusal && strstr(d.detail, refusal);
        CHECK_MSG(ok, "%s case %zu:\n--- ours (%s)\n%s\n--- transformers\n%s", name, i,
                  wna16_status_str(s), out ? out : d.detail, want ? want : refusal);
        (*cases)++;
        *equal += ok;
        wna16_free(out);
    }
    json_decref(doc);
}

static void test_goldens(void) {
    setenv("WNA16_CHAT_NOW", "1721995200", 1); /* 26 Jul 2024, as the goldens */
    for (size_t i = 0; i < sizeof GOLDENS / sizeof *GOLDENS; i++) {
        size_t cases = 0, equal = 0;
        run_golden(GOLDENS[i], &cases, &equal);
        printf("%-13s %zu/%zu cases byte-equal to transformers\n", GOLDENS[i], equal, cases);
    }
}

/* Every prefix of every golden template renders or fails cleanly. */
static void test_prefixes(void) {
    size_t total = 0;
    for (size_t g = 0; g < sizeof GOLDENS / sizeof *GOLDENS; g++) {
        char path[256];
        snprintf(path, sizeof path, CHAT "%s.json", GOLDENS[g]);
        json_t *doc = json_load_file(path, 0, NULL);
        const char *tpl = json_string_value(json_object_get(doc, "template"));
        const json_t *vars =
            json_object_get(json_array_get(json_object_get(doc, "cases"), 2), "vars");
        size_t n = tpl ? strlen(tpl) : 0;
        char *buf = malloc(n + 1);
        for (size_t k = 0; tpl && k <= n; k++, total++) {
            memcpy(buf, tpl, k);
            buf[k] = 0;
            wna16_diag d = {0};
            char *out = NULL;
            wna16_status s = wna16_jinja_render(&d, buf, vars, &out);
            CHECK_MSG((s == WNA16_OK) == (out != NULL) && (s == WNA16_OK || d.detail[0]),
                      "%s prefix %zu: %s", GOLDENS[g], k, wna16_status_str(s));
            wna16_free(out);
        }
        free(buf);
        json_decref(doc);
    }
    printf("prefixes: %zu rendered or refused cleanly\n", total);
}

/* The golden messages as a client sends them: tool-call arguments as a
 * JSON string (the call gives the template an object). */
static char *client_messages(const json_t *msgs) {
    json_t *m = json_deep_copy(msgs);
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *calls = json_object_get(json_array_get(m, i), "tool_calls");
        for (size_t j = 0; j < json_array_size(calls); j++) {
            json_t *f = json_object_get(json_array_get(calls, j), "function");
            char *a = json_dumps(json_object_get(f, "arguments"), JSON_COMPACT);
            json_object_set_new(f, "arguments", json_string(a));
            free(a);
        }
    }
    char *text = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return text;
}

/* A golden's template kwargs: enable_thinking and the special tokens it
 * was rendered with (they override the tokenizer's, as in transformers). */
static char *golden_kwargs(const json_t *vars) {
    json_t *kw = json_object();
    const char *keys[] = {"enable_thinking", "bos_token", "eos_token"};
    for (size_t k = 0; k < 3; k++)
        if (json_object_get(vars, keys[k]))
            json_object_set(kw, keys[k], json_object_get(vars, keys[k]));
    char *text = json_object_size(kw) ? json_dumps(kw, JSON_COMPACT) : NULL;
    json_decref(kw);
    return text;
}

/* wna16_tokenizer_apply_chat_json over the goldens of templates that take
 * tools (tools offered, a tool call and its result, Qwen3's enable_thinking
 * as a template kwarg), each golden's template given as chat_template: the
 * same bytes as transformers. */
static void json_golden(wna16_ctx *ctx, wna16_tokenizer *tok, const char *name, size_t *with_tools) {
    char path[256];
    snprintf(path, sizeof path, CHAT "%s.json", name);
    json_t *doc = json_load_file(path, 0, NULL);
    const char *tpl = json_string_value(json_object_get(doc, "template"));
    const json_t *list = json_object_get(doc, "cases");
    size_t equal = 0, n = 0;
    for (size_t i = 0; tpl && i < json_array_size(list); i++) {
        const json_t *vars = json_object_get(json_array_get(list, i), "vars");
        const char *want = json_string_value(json_object_get(json_array_get(list, i), "text"));
        if (!want) continue;
        char *msgs = client_messages(json_object_get(vars, "messages"));
        const json_t *tools = json_object_get(vars, "tools");
        char *tools_text = json_is_array(tools) ? json_dumps(tools, JSON_COMPACT) : NULL;
        char *kw = golden_kwargs(vars);
        wna16_chat_options o;
        wna16_chat_options_init(&o);
        o.add_generation_prompt = json_is_true(json_object_get(vars, "add_generation_prompt"));
        o.tools = tools_text;
        o.template_kwargs = kw;
        o.chat_template = tpl;
        char *out = NULL;
        wna16_status s = wna16_tokenizer_apply_chat_json(ctx, tok, msgs, &o, &out);
        /* transformers drops tools a template never reads; we refuse them */
        bool refuse = tools_text && !strstr(tpl, "tools");
        bool ok = refuse ? s == WNA16_ERR_UNSUPPORTED && strstr(wna16_ctx_error(ctx), "does not render tools")
                         : s == WNA16_OK && !strcmp(out, want);
        CHECK_MSG(ok, "%s case %zu through the JSON call:\n--- ours (%s)\n%s\n--- transformers\n%s",
                  name, i, wna16_status_str(s), out ? out : wna16_ctx_error(ctx), want);
        equal += ok;
        n++;
        *with_tools += tools_text != NULL || strstr(msgs, "tool_calls") != NULL;
        wna16_free(out);
        free(tools_text);
        free(kw);
        free(msgs);
    }
    printf("%s JSON messages: %zu/%zu as transformers (tools a template never reads: refused)\n", name, equal, n);
    CHECK(n > 0);
    json_decref(doc);
}

static void test_json_api(void) {
    wna16_ctx *ctx;
    wna16_tokenizer *tok = NULL;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return;
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, "tests/data/tokenizer/qwen3", &tok), WNA16_OK, NULL);
    size_t with_tools = 0;
    const char *names[] = {"qwen3", "qwen2.5", "llama3.2", "llama3", "smollm2", "mistral_v3"};
    for (size_t g = 0; tok && g < sizeof names / sizeof *names; g++)
        json_golden(ctx, tok, names[g], &with_tools);
    printf("cases with tools or tool calls: %zu\n", with_tools);
    CHECK(with_tools >= 10);
    /* refusals, each naming its cause */
    char *out = NULL;
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat_json(ctx, tok, "[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]", NULL, &out),
                 WNA16_ERR_UNSUPPORTED, "image_url");
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat_json(ctx, tok, "[{\"role\": \"robot\", \"content\": \"x\"}]", NULL, &out),
                 WNA16_ERR_INVALID_ARGUMENT, "messages[0].role");
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat_json(ctx, tok, "{\"role\": 1}", NULL, &out),
                 WNA16_ERR_INVALID_ARGUMENT, "must be a JSON list");
    wna16_chat_options o;
    wna16_chat_options_init(&o);
    o.template_kwargs = "{\"messages\": []}";
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat_json(ctx, tok, "[]", &o, &out),
                 WNA16_ERR_INVALID_ARGUMENT, "may not set 'messages'");
    wna16_chat_options_init(&o);
    o.tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]";
    o.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat_json(ctx, tok, "[{\"role\": \"user\", \"content\": \"x\"}]", &o, &out),
                 WNA16_ERR_UNSUPPORTED, "does not render tools");
    o.tools = NULL;
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat_json(ctx, tok, "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}]", &o, &out),
                 WNA16_OK, NULL);
    CHECK(out && !strcmp(out, "a\nb"));
    wna16_free(out);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
}

int main(void) {
    test_goldens();
    test_json_api();
    test_prefixes();
    TEST_MAIN_END();
}
