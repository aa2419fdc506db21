/* Fuzz target (h): an HTTP request body through the server's request
 * parsers (src/server/api.c): JSON text -> srv_parse_params (completions and
 * chat), srv_parse_prompt, srv_parse_messages, as `wna16 serve` runs them on
 * a body that is a JSON object. The first input byte picks the endpoint
 * (even: completions, odd: chat) and the vocabulary size (1 + byte % 64, so
 * token ids both in and out of range occur); the rest is the body. Every
 * outcome must be 0, 400 with a message, or 503 (memory); accepted values
 * lie in the documented ranges; parsed prompts hold ids in [0, vocab). */
#include "fuzz_common.h"

#include "server/api.h"

#include <math.h>

static void params_free(srv_params *p) {
    for (size_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    free(p->stop_ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    if (size < 1) return 0;
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
    err[0] = 0;
    if (chat) {
        wna16_chat_message *m = NULL;
        size_t n = 0;
        rc = srv_parse_messages(body, &m, &n, err);
        FUZZ_CHECK(rc == 0 || rc == 400 || rc == 503);
        if (rc == 400) FUZZ_CHECK(err[0] != 0);
        if (rc == 0) {
            FUZZ_CHECK(n >= 1 && n == json_array_size(json_object_get(body, "messages")));
            for (size_t i = 0; i < n; i++) FUZZ_CHECK(m[i].role && m[i].content);
        }
        srv_messages_free(m, n);
    } else {
        const char *text = NULL;
        int32_t *ids = NULL;
        int64_t n = 0;
        rc = srv_parse_prompt(body, vocab, &text, &ids, &n, err);
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
