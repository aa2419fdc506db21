/* Fuzz target (h): an HTTP request body through the server's request
 * parsers (src/server/api.c): JSON text -> srv_parse_params and
 * srv_parse_extras (completions and chat), srv_parse_prompt_at,
 * srv_parse_chat_fields, as `wna16 serve` runs them on a body that is a
 * JSON object; and the raw bytes through the tool-call and reasoning
 * parsers (src/server/tool_parse.c), whole and streamed in two pieces,
 * which must agree. The first input byte picks the endpoint
 * (even: completions, odd: chat) and the vocabulary size (1 + byte % 64, so
 * token ids both in and out of range occur); the rest is the body. Every
 * outcome must be 0, 400 with a message, or 503 (memory); accepted values
 * lie in the documented ranges; parsed prompts hold ids in [0, vocab).
 * The same bytes, cut at NULs into Host, Origin, Authorization and
 * Content-Type headers, go through the caller checks (src/server/guard.c)
 * under each guard configuration: 0 or 403 with a message, CORS only for
 * a listed origin, the key only for its exact header. */
#include "fuzz_common.h"

#include "server/api.h"
#include "server/guard.h"
#include "server/tool_parse.h"

#include <math.h>

static void params_free(srv_params *p) {
    for (size_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    free(p->stop_ids);
    free(p->structured_spec);
    for (size_t i = 0; i < p->n_choices; i++) free(p->choices[i]);
    free(p->choices);
    free(p->bias_ids);
    free(p->bias);
}

/* Whole parse and the stream split (cut at `cut`) give the same content
 * and calls. */
static void check_tools(const char *text, size_t len, int format, size_t cut) {
    char *content = NULL;
    srv_tool_calls calls = {0};
    if (!srv_tools_parse(format, text, len, &content, &calls)) return;
    srv_stream_split sp;
    srv_stream_split_init(&sp, false, format);
    srv_stream_delta d = {0};
    srv_text got = {0};
    srv_stream_split_push(&sp, text, cut, false, &d);
    srv_text_put(&got, d.content.data ? d.content.data : "", d.content.len);
    srv_stream_delta_clear(&d);
    srv_stream_split_push(&sp, text + cut, len - cut, true, &d);
    srv_text_put(&got, d.content.data ? d.content.data : "", d.content.len);
    FUZZ_CHECK(got.len == (content ? strlen(content) : 0));
    FUZZ_CHECK(!content || !memcmp(got.data, content, got.len));
    FUZZ_CHECK(d.calls.n == calls.n);
    for (size_t i = 0; i < calls.n && i < d.calls.n; i++)
        FUZZ_CHECK(!strcmp(calls.v[i].name, d.calls.v[i].name) &&
                   !strcmp(calls.v[i].arguments, d.calls.v[i].arguments));
    srv_stream_delta_clear(&d);
    srv_text_free(&d.reasoning);
    srv_text_free(&d.content);
    srv_text_free(&got);
    srv_stream_split_free(&sp);
    srv_tool_calls_free(&calls);
    free(content);
}

static void check_raw(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    /* Replies reach the parsers as C strings: text ends at a NUL. */
    size_t n = strnlen(text, size);
    for (int f = 0; f < 3; f++) check_tools(text, n, f, n / 2);
    srv_reasoning_split rs;
    if (srv_reasoning_parse(text, size, &rs)) {
        free(rs.reasoning);
        free(rs.content);
    }
}

/* The next NUL-terminated piece of [*p, end), or NULL past the end. */
static const char *next_piece(const char **p, const char *end, char *buf, size_t cap) {
    if (*p >= end) return NULL;
    size_t n = strnlen(*p, (size_t)(end - *p));
    if (n >= cap) n = cap - 1;
    memcpy(buf, *p, n);
    buf[n] = 0;
    *p += strnlen(*p, (size_t)(end - *p)) + 1;
    return buf;
}

static void check_guard(const uint8_t *data, size_t size) {
    const char *p = (const char *)data, *end = p + size;
    char hb[512], ob[512], ab[512], tb[512];
    const char *host = next_piece(&p, end, hb, sizeof hb);
    const char *origin = next_piece(&p, end, ob, sizeof ob);
    const char *auth = next_piece(&p, end, ab, sizeof ab);
    const char *type = next_piece(&p, end, tb, sizeof tb);
    const srv_guard guards[] = {
        {.loopback = true},
        {.api_key = "k3y"},
        {.loopback = true, .allowed_hosts = "example.com, *.x,", .allowed_origins = "http://a:1"},
        {.allowed_hosts = "*", .allowed_origins = "*"},
    };
    for (size_t i = 0; i < sizeof guards / sizeof guards[0]; i++) {
        const srv_guard *g = &guards[i];
        char err[256] = "";
        bool cors = true;
        int rc = srv_guard_check(g, host, origin, &cors, err, sizeof err);
        FUZZ_CHECK(rc == 0 || rc == 403);
        FUZZ_CHECK(rc == 0 || (err[0] && strlen(err) < sizeof err));
        FUZZ_CHECK(!cors || (rc == 0 && origin && g->allowed_origins));
        bool key = srv_guard_key_ok(g, auth);
        FUZZ_CHECK(key == (!g->api_key || (auth && !strcmp(auth, "Bearer k3y"))));
    }
    bool json = srv_guard_json_type(type);
    FUZZ_CHECK(!json || (type && strlen(type) >= 16));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    if (size < 1) return 0;
    check_raw(data + 1, size - 1);
    check_guard(data, size);
    bool chat = data[0] & 1;
    int64_t vocab = 1 + (data[0] >> 1) % 64;
    json_error_t je;
    json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    char err[SRV_ERR_MAX] = "";
    srv_request_info info = {0};
    srv_params p = {0};
    p.top_logprobs = -1;
    int rc = srv_parse_params(body, chat, vocab, &info, &p, err);
    FUZZ_CHECK(rc == 0 || rc == 400 || rc == 503);
    if (rc == 400) FUZZ_CHECK(err[0] != 0);
    if (rc == 0) {
        FUZZ_CHECK(p.sampler.temperature >= 0 && p.sampler.temperature <= 100);
        FUZZ_CHECK(p.sampler.top_p >= 0 && p.sampler.top_p <= 1);
        FUZZ_CHECK(p.sampler.min_p >= 0 && p.sampler.min_p <= 1);
        FUZZ_CHECK(p.sampler.repetition_penalty > 0);
        FUZZ_CHECK(fabsf(p.presence_penalty) <= 2 && fabsf(p.frequency_penalty) <= 2);
        FUZZ_CHECK(p.sampler.top_k >= -1);
        /* 0 only where it means "score the prompt": completions with echo */
        FUZZ_CHECK(p.max_tokens == -1 || p.max_tokens >= 1 ||
                   (p.max_tokens == 0 && !chat && info.echo));
        FUZZ_CHECK(!p.prompt_logprobs || (info.echo && p.top_logprobs >= 0));
        FUZZ_CHECK(p.min_tokens >= 0);
        FUZZ_CHECK(p.top_logprobs >= -1 && p.top_logprobs <= 20);
        FUZZ_CHECK(p.n_stop <= 16);
        for (size_t i = 0; i < p.n_stop; i++) FUZZ_CHECK(p.stop[i] != NULL);
        for (size_t i = 0; i < p.n_stop_ids; i++)
            FUZZ_CHECK(p.stop_ids[i] >= 0 && p.stop_ids[i] < vocab);
        if (info.model) FUZZ_CHECK(json_is_string(json_object_get(body, "model")));
    }
    params_free(&p);
    p = (srv_params){0};
    err[0] = 0;
    if (rc == 0) {
        rc = srv_parse_extras(body, chat, vocab, &info, &p, err);
        FUZZ_CHECK(rc == 0 || rc == 400 || rc == 503);
        if (rc == 400) FUZZ_CHECK(err[0] != 0);
        if (rc == 0) {
            FUZZ_CHECK(info.best_of >= info.n && info.best_of <= SRV_MAX_CHOICES);
            for (size_t i = 0; i < p.n_bias; i++)
                FUZZ_CHECK(p.bias_ids[i] >= 0 && p.bias_ids[i] < vocab && fabsf(p.bias[i]) <= 100);
            if (p.structured.kind == WNA16_STRUCTURED_CHOICE) FUZZ_CHECK(p.n_choices >= 1);
        }
        params_free(&p);
        p = (srv_params){0};
        err[0] = 0;
    }
    if (chat) {
        rc = srv_parse_chat_fields(body, true, &info, err);
        FUZZ_CHECK(rc == 0 || rc == 400 || rc == 503);
        if (rc == 400) FUZZ_CHECK(err[0] != 0);
        if (rc == 0) FUZZ_CHECK(info.messages != NULL);
        srv_request_info_free(&info);
    } else {
        const char *text = NULL;
        int32_t *ids = NULL;
        int64_t n = 0;
        rc = srv_parse_prompt_at(body, 0, vocab, &text, &ids, &n, err);
        FUZZ_CHECK(rc == 0 || rc == 400 || rc == 503);
        if (rc == 400) FUZZ_CHECK(err[0] != 0);
        if (rc == 0) {
            FUZZ_CHECK((text != NULL) != (ids != NULL));
            if (ids) FUZZ_CHECK(n >= 1);
            for (int64_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
        }
        free(ids);
    }
    /* the error body for any status the server sends */
    json_t *e = srv_error_json(err[0] ? err : "x", rc ? rc : 500);
    FUZZ_CHECK(e != NULL);
    json_decref(e);
    json_decref(body);
    return 0;
}
