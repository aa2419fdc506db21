/* OpenAI responses from a call's sequences (openai.h): the whole reply
 * (best_of ranked by cumulative logprob, tool calls and reasoning split
 * out) or server-sent events as the tokens come. */
#include "server/openai_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ------------------------------------------------------------- logprobs */

/* One token of completions' logprobs; lp NULL for a prompt's first token
 * (nothing predicts it: null logprob and top, as vLLM). text_offset counts
 * the bytes of the tokens before it in the returned text. */
static void completion_token(srv_api *a, json_t *arr[4], int32_t id, const srv_logprob *lp,
                             size_t *offset) {
    char *t = srv_token_text(a, id);
    json_array_append_new(arr[0], json_string(t));
    json_array_append_new(arr[1], lp ? json_real(lp->logprob) : json_null());
    json_t *top = lp ? json_object() : json_null();
    for (int k = 0; lp && k < lp->n_top; k++) {
        char *tt = srv_token_text(a, lp->top_ids[k]);
        json_object_set_new(top, tt, json_real(lp->top_logprobs[k]));
        free(tt);
    }
    json_array_append_new(arr[2], top);
    json_array_append_new(arr[3], json_integer((json_int_t)*offset));
    *offset += strlen(t);
    free(t);
}

/* The prompt's tokens first when it was scored (echo), then the generated. */
static json_t *completion_logprobs(srv_api *a, const srv_request *r, bool with_prompt,
                                   const srv_logprob *lp, int64_t n, size_t *offset) {
    json_t *arr[4] = {json_array(), json_array(), json_array(), json_array()};
    for (int64_t t = 0; with_prompt && t < r->n_prompt; t++)
        completion_token(a, arr, r->prompt[t], t ? &r->prompt_lps[t] : NULL, offset);
    for (int64_t i = 0; i < n; i++) completion_token(a, arr, lp[i].id, &lp[i], offset);
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", arr[0], "token_logprobs", arr[1],
                     "top_logprobs", arr[2], "text_offset", arr[3]);
}

static json_t *chat_logprobs(srv_api *a, const srv_logprob *lp, int64_t n) {
    json_t *content = json_array();
    for (int64_t i = 0; i < n; i++) {
        char *t = srv_token_text(a, lp[i].id);
        json_t *top = json_array();
        for (int k = 0; k < lp[i].n_top; k++) {
            char *tt = srv_token_text(a, lp[i].top_ids[k]);
            json_array_append_new(top, json_pack("{s:s, s:f}", "token", tt, "logprob",
                                                 (double)lp[i].top_logprobs[k]));
            free(tt);
        }
        json_array_append_new(content, json_pack("{s:s, s:f, s:o}", "token", t, "logprob",
                                                 (double)lp[i].logprob, "top_logprobs", top));
        free(t);
    }
    return json_pack("{s:o}", "content", content);
}

/* The logprobs of tokens not yet reported (NULL when none were asked);
 * with_prompt: the scored prompt's before them. Adds them to the score. */
static json_t *take_logprobs(srv_call *k, seq *q, bool with_prompt) {
    srv_request *r = q->r;
    if (r->params.top_logprobs < 0) return NULL;
    pthread_mutex_lock(&r->mu);
    int64_t from = r->lps_taken, n = r->n_lps - from;
    srv_logprob *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
    if (copy && n > 0) memcpy(copy, r->lps + from, (size_t)n * sizeof *copy);
    r->lps_taken = r->n_lps;
    pthread_mutex_unlock(&r->mu);
    for (int64_t i = 0; copy && i < n; i++) q->score += copy[i].logprob;
    json_t *j = !copy || k->hide_logprobs ? NULL
                : k->chat                 ? chat_logprobs(k->a, copy, n)
                         : completion_logprobs(k->a, r, with_prompt, copy, n, &q->text_offset);
    free(copy);
    return j;
}

/* vLLM's prompt_logprobs: null for the first token, then per position
 * {"id": {"logprob", "rank", "decoded_token"}} for the prompt's token and
 * the top k (rank: 1 for the most likely; null when beyond the top k). */
static json_t *prompt_logprobs_json(srv_api *a, const srv_request *r) {
    if (r->params.prompt_logprobs_k < 0 || !r->prompt_lps) return NULL;
    json_t *list = json_array();
    json_array_append_new(list, json_null());
    for (int64_t t = 1; t < r->n_prompt; t++) {
        const srv_logprob *lp = &r->prompt_lps[t];
        json_t *pos = json_object();
        int shown = lp->n_top < r->params.prompt_logprobs_k ? lp->n_top : r->params.prompt_logprobs_k;
        json_t *rank = json_null();
        for (int i = 0; i < lp->n_top; i++)
            if (lp->top_ids[i] == r->prompt[t]) rank = json_integer(i + 1);
        char key[16], *text = srv_token_text(a, r->prompt[t]);
        snprintf(key, sizeof key, "%d", r->prompt[t]);
        json_object_set_new(pos, key, json_pack("{s:f, s:o, s:s}", "logprob", (double)lp->logprob,
                                                "rank", rank, "decoded_token", text));
        free(text);
        for (int i = 0; i < shown; i++) {
            snprintf(key, sizeof key, "%d", lp->top_ids[i]);
            if (json_object_get(pos, key)) continue;
            text = srv_token_text(a, lp->top_ids[i]);
            json_object_set_new(pos, key, json_pack("{s:f, s:i, s:s}", "logprob",
                                                    (double)lp->top_logprobs[i], "rank", i + 1,
                                                    "decoded_token", text));
            free(text);
        }
        json_array_append_new(list, pos);
    }
    return list;
}

/* --------------------------------------------------------------- pieces */

static bool failed(const srv_request *r) {
    return !strcmp(r->finish_reason, "error") || !strcmp(r->finish_reason, "abort");
}

static const char *finish_reason(const srv_call *k, const seq *q) {
    if (!strcmp(q->r->finish_reason, "length")) return "length";
    return q->called && !k->named_tool ? "tool_calls" : "stop";
}

/* vLLM's stop_reason: the stop string, or the stop_token_ids id, that
 * ended the output; null for EOS and length. */
static json_t *stop_reason(const srv_request *r) {
    if (r->stop_str[0]) return json_string(r->stop_str);
    return r->stop_token >= 0 ? json_integer(r->stop_token) : json_null();
}

static json_t *usage_json(const srv_call *k) {
    json_int_t prompt = 0, completion = 0, cached = 0;
    for (int i = 0; i < k->n_seqs; i++) {
        const srv_request *r = k->s[i].r;
        completion += r->completion_tokens;
        if (i % k->best_of) continue; /* a prompt counts once */
        prompt += r->n_prompt;
        cached += r->cached_tokens;
    }
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", prompt, "completion_tokens",
                     completion, "total_tokens", prompt + completion, "prompt_tokens_details",
                     "cached_tokens", cached);
}

static json_t *envelope(const srv_call *k, const char *object, json_t *choices) {
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", k->id, "object", object, "created",
                     (json_int_t)k->created, "model", k->a->served_name, "choices", choices);
}

/* A fresh call id, as vLLM writes them: Mistral's templates refuse any id
 * but 9 letters and digits; the others get "chatcmpl-tool-" and 16 hex. */
static void tool_call_id(int format, char *id, size_t size) {
    static const char ALNUM[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[16] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)rand();
    if (format == WNA16_TOOLS_MISTRAL) {
        for (size_t i = 0; i < 9; i++) id[i] = ALNUM[r[i] % (sizeof ALNUM - 1)];
        id[9] = 0;
        return;
    }
    int n = snprintf(id, size, "chatcmpl-tool-");
    for (size_t i = 0; i < 8 && (size_t)n + 2 < size; i++)
        n += snprintf(id + n, size - (size_t)n, "%02x", r[i]);
}

static json_t *tool_calls_json(int format, const srv_tool_calls *c, bool stream) {
    json_t *list = json_array();
    for (size_t i = 0; i < c->n; i++) {
        char id[48];
        tool_call_id(format, id, sizeof id);
        json_t *call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                                 "function", "name", c->v[i].name, "arguments", c->v[i].arguments);
        if (stream) json_object_set_new(call, "index", json_integer((json_int_t)i));
        json_array_append_new(list, call);
    }
    return list;
}

/* ---------------------------------------------------------- whole reply */

/* How often a whole reply's wait asks whether its client is still there. */
#define CLIENT_CHECK_S 0.2

/* Waits for q's text; false when gone(user) said the client left first. */
static bool wait_text(seq *q, bool (*gone)(void *), void *user) {
    for (bool done = false; !done;) {
        char *t;
        size_t n;
        done = srv_request_wait(q->r, CLIENT_CHECK_S, &t, &n);
        if (t) srv_text_put(&q->all, t, n);
        free(t);
        if (!done && gone && gone(user)) return false;
    }
    return true;
}

/* The assistant's message: reasoning, content and tool calls split out. */
static json_t *chat_message(srv_call *k, seq *q) {
    const char *text = q->all.data ? q->all.data : "";
    srv_reasoning_split rs = {0};
    if (k->reasoning) srv_reasoning_parse(text, q->all.len, &rs);
    else rs.content = q->all.len ? strdup(text) : NULL;
    char *content = rs.content;
    srv_tool_calls calls = {0};
    if (k->tool_format >= 0 && rs.content &&
        srv_tools_parse(k->tool_format, rs.content, strlen(rs.content), &content, &calls))
        free(rs.content);
    else
        content = rs.content;
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content",
                          content ? json_string(content) : calls.n ? json_null() : json_string(""));
    if (k->reasoning && k->include_reasoning && rs.reasoning)
        json_object_set_new(m, "reasoning_content", json_string(rs.reasoning));
    if (calls.n) json_object_set_new(m, "tool_calls", tool_calls_json(k->tool_format, &calls, false));
    q->called = calls.n > 0;
    srv_tool_calls_free(&calls);
    free(content);
    free(rs.reasoning);
    return m;
}

static json_t *whole_choice(srv_call *k, seq *q, int index, json_t *lp) {
    srv_request *r = q->r;
    json_t *c;
    if (k->chat) {
        json_t *m = chat_message(k, q);
        c = json_pack("{s:i, s:o, s:o}", "index", index, "message", m, "logprobs",
                      lp ? lp : json_null());
    } else {
        srv_text text = {0};
        if (q->echo) srv_text_put(&text, q->echo, strlen(q->echo));
        srv_text_put(&text, q->all.data ? q->all.data : "", q->all.len);
        c = json_pack("{s:i, s:s, s:o}", "index", index, "text", text.data ? text.data : "",
                      "logprobs", lp ? lp : json_null());
        srv_text_free(&text);
        json_t *plp = prompt_logprobs_json(k->a, r);
        if (plp) json_object_set_new(c, "prompt_logprobs", plp);
    }
    json_object_set_new(c, "finish_reason", json_string(finish_reason(k, q)));
    json_object_set_new(c, "stop_reason", stop_reason(r));
    return c;
}

/* The prompt's n best sequences (by cumulative logprob when best_of > n). */
static void pick_best(srv_call *k, int prompt, int *best) {
    seq *s = k->s + prompt * k->best_of;
    for (int j = 0; j < k->n; j++) {
        int pick = -1;
        for (int i = 0; i < k->best_of; i++) {
            bool taken = false;
            for (int t = 0; t < j; t++) taken |= best[t] == i;
            if (!taken && (pick < 0 || s[i].score > s[pick].score)) pick = i;
        }
        best[j] = pick;
    }
}

int srv_call_whole(srv_call *k, bool (*gone)(void *), void *user, json_t **out) {
    *out = NULL;
    for (int i = 0; i < k->n_seqs; i++)
        if (!wait_text(&k->s[i], gone, user)) return 0;
    for (int i = 0; i < k->n_seqs; i++) {
        srv_request *r = k->s[i].r;
        if (failed(r)) {
            int status = !strcmp(r->finish_reason, "abort") ? 503 : 500;
            *out = srv_error_json(r->error[0] ? r->error : "generation failed", status);
            return status;
        }
    }
    json_t *choices = json_array();
    int *best = malloc((size_t)k->n * sizeof *best);
    if (!best) {
        json_decref(choices);
        *out = srv_error_json("out of memory", 503);
        return 503;
    }
    for (int p = 0; p < k->n_prompts; p++) {
        json_t *lps[SRV_MAX_CHOICES] = {0};
        for (int i = 0; i < k->best_of; i++) {
            seq *q = &k->s[p * k->best_of + i];
            lps[i] = take_logprobs(k, q, q->r->params.prompt_logprobs);
        }
        pick_best(k, p, best);
        for (int j = 0; j < k->n; j++) {
            int i = best[j];
            json_array_append_new(choices, whole_choice(k, &k->s[p * k->best_of + i],
                                                        p * k->n + j, lps[i]));
            lps[i] = NULL;
        }
        for (int i = 0; i < k->best_of; i++) json_decref(lps[i]);
    }
    free(best);
    json_t *j = envelope(k, k->chat ? "chat.completion" : "text_completion", choices);
    json_object_set_new(j, "usage", usage_json(k));
    json_t *plp = k->chat ? prompt_logprobs_json(k->a, k->s[0].r) : NULL;
    if (plp) json_object_set_new(j, "prompt_logprobs", plp);
    *out = j;
    return 200;
}

/* ------------------------------------------------------------- streaming */

/* Appends "data: <json>\n\n". */
static void sse(srv_call *k, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!s) return;
    srv_text_put(&k->out, "data: ", 6);
    srv_text_put(&k->out, s, strlen(s));
    srv_text_put(&k->out, "\n\n", 2);
    free(s);
}

static json_t *chunk_of(srv_call *k, json_t *choice) {
    json_t *list = json_array();
    json_array_append_new(list, choice);
    return envelope(k, k->chat ? "chat.completion.chunk" : "text_completion", list);
}

/* A chat delta (role first), or completions text. */
static void send_delta(srv_call *k, seq *q, int index, const srv_stream_delta *d, const char *text,
                       json_t *lp, const char *reason) {
    json_t *choice;
    if (k->chat) {
        json_t *delta = json_object();
        if (!q->sent_role) json_object_set_new(delta, "role", json_string("assistant"));
        if (d && d->reasoning.len && k->include_reasoning)
            json_object_set_new(delta, "reasoning_content", json_string(d->reasoning.data));
        if ((d && d->content.len) || (!q->sent_role && !(d && (d->reasoning.len || d->calls.n))))
            json_object_set_new(delta, "content",
                                json_string(d && d->content.len ? d->content.data : ""));
        if (d && d->calls.n) json_object_set_new(delta, "tool_calls", tool_calls_json(k->tool_format, &d->calls, true));
        q->sent_role = true;
        choice = json_pack("{s:i, s:o, s:o}", "index", index, "delta", delta, "logprobs",
                           lp ? lp : json_null());
    } else {
        choice = json_pack("{s:i, s:s, s:o}", "index", index, "text", text ? text : "", "logprobs",
                           lp ? lp : json_null());
    }
    json_object_set_new(choice, "finish_reason", reason ? json_string(reason) : json_null());
    if (reason) json_object_set_new(choice, "stop_reason", stop_reason(q->r));
    sse(k, chunk_of(k, choice));
}

/* What sequence i got since the last look (timeout: how long to wait). */
static bool seq_events(srv_call *k, int i, double timeout) {
    seq *q = &k->s[i];
    char *t;
    size_t n;
    bool done = srv_request_wait(q->r, timeout, &t, &n);
    bool any = t || done;
    if (q->echo_pending && any) { /* the engine scores the whole prompt before its first token */
        q->echo_pending = false;
        send_delta(k, q, i, NULL, q->echo,
                   completion_logprobs(k->a, q->r, true, NULL, 0, &q->text_offset), NULL);
    }
    if (k->chat) {
        srv_stream_delta d = {0};
        srv_stream_split_push(&q->split, t ? t : "", n, done, &d);
        q->called |= d.calls.n > 0;
        json_t *lp = t ? take_logprobs(k, q, false) : NULL;
        if (d.reasoning.len || d.content.len || d.calls.n || lp || !q->sent_role)
            send_delta(k, q, i, &d, NULL, lp, NULL);
        srv_stream_delta_clear(&d);
        srv_text_free(&d.reasoning);
        srv_text_free(&d.content);
    } else if (t) {
        send_delta(k, q, i, NULL, t, take_logprobs(k, q, false), NULL);
    }
    free(t);
    if (done && !failed(q->r)) send_delta(k, q, i, NULL, k->chat ? NULL : "", NULL, finish_reason(k, q));
    q->finished = done;
    return any;
}

static void stream_end(srv_call *k) {
    for (int i = 0; i < k->n_seqs; i++)
        if (failed(k->s[i].r)) {
            const srv_request *r = k->s[i].r;
            sse(k, srv_error_json(r->error[0] ? r->error : "generation failed", 500));
            break;
        }
    if (k->usage) {
        json_t *u = envelope(k, k->chat ? "chat.completion.chunk" : "text_completion", json_array());
        json_object_set_new(u, "usage", usage_json(k));
        sse(k, u);
    }
    srv_text_put(&k->out, "data: [DONE]\n\n", 14);
    k->ended = true;
}

static void next_events(srv_call *k) {
    bool any = false;
    int open = 0;
    for (int i = 0; i < k->n_seqs; i++) {
        if (k->s[i].finished) continue;
        open++;
        any |= seq_events(k, i, 0);
    }
    if (!open) {
        stream_end(k);
        return;
    }
    if (any) return;
    for (int i = 0; i < k->n_seqs; i++) /* nothing yet: wait on the first still open */
        if (!k->s[i].finished) {
            seq_events(k, i, k->n_seqs == 1 ? 0.25 : 0.02);
            return;
        }
}

bool srv_call_events(srv_call *k, const char **data, size_t *len) {
    k->out.len = 0;
    if (!k->started && !k->chat) {
        for (int i = 0; i < k->n_seqs; i++) { /* completions' echo comes first */
            seq *q = &k->s[i];
            if (q->echo && q->r->params.prompt_logprobs) q->echo_pending = true;
            else if (q->echo) send_delta(k, q, i, NULL, q->echo, NULL, NULL);
        }
    }
    k->started = true;
    while (!k->out.len && !k->ended) next_events(k);
    *data = k->out.data;
    *len = k->out.len;
    return k->out.len > 0;
}
