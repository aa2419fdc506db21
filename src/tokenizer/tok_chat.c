/* tokenizer_config.json (special-token roles, chat template) and the
 * ChatML prompt formats we recognise. No Jinja: a template is matched by
 * its distinctive strings, and the recognised formats are rendered in C. */
#include "tokenizer/tok_internal.h"

#include <jansson.h>
#include <string.h>

#define QWEN25_DEFAULT_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

/* A special-token field is a string, an AddedToken object {"content": ...}
 * or null. Returns its id, or -1. */
static wna16_status role_token(wna16_diag *d, wna16_tokenizer *t, const char *path,
                               const json_t *root, const char *key, int32_t *out) {
    const json_t *v = json_object_get(root, key);
    *out = -1;
    if (!v || json_is_null(v)) return WNA16_OK;
    const char *s =
        json_is_object(v) ? json_string_value(json_object_get(v, "content")) : json_string_value(v);
    if (!s)
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: field %s: expected a token string or {\"content\": ...}; fix "
                          "the file or remove the field",
                          path, key);
    *out = wna16_tokenizer_token_id(t, s);
    if (*out < 0)
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: field %s names \"%.80s\", which is not a token of %s; the config "
                          "and tokenizer.json do not belong together",
                          path, key, s, t->path);
    return WNA16_OK;
}

/* chat_template is a string or a list of {"name", "template"}; we take the
 * one named "default", else the first. */
static const char *pick_template(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (!json_is_array(v)) return NULL;
    const char *first = NULL;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *tpl = json_string_value(json_object_get(e, "template"));
        if (!first) first = tpl;
        if (name && tpl && !strcmp(name, "default")) return tpl;
    }
    return first;
}

wna16_status tok_load_config(wna16_diag *d, wna16_tokenizer *t, const char *path) {
    json_error_t err;
    /* INT_AS_REAL: configs hold model_max_length values like 1e30 written as
     * integers, which jansson's 64-bit integers reject; we read no numbers. */
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                          "%s: not a JSON object (line %d, column %d: %s); fix or remove "
                          "tokenizer_config.json",
                          path, err.line, err.column, root ? "top level" : err.text);
    }
    wna16_status s = role_token(d, t, path, root, "bos_token", &t->bos_id);
    if (s == WNA16_OK) s = role_token(d, t, path, root, "eos_token", &t->eos_id);
    if (s == WNA16_OK) s = role_token(d, t, path, root, "pad_token", &t->pad_id);
    t->add_bos = json_is_true(json_object_get(root, "add_bos_token"));
    t->add_eos = json_is_true(json_object_get(root, "add_eos_token"));
    const char *tpl = pick_template(json_object_get(root, "chat_template"));
    if (s == WNA16_OK && tpl && !(t->chat_template = wna16_strdup(tpl)))
        s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    json_decref(root);
    return s;
}

static wna16_chat_format detect_format(const wna16_tokenizer *t) {
    const char *tpl = t->chat_template;
    if (!tpl || !strstr(tpl, "<|im_start|>") || !strstr(tpl, "<|im_end|>")) return WNA16_CHAT_NONE;
    return strstr(tpl, "enable_thinking") ? WNA16_CHAT_QWEN3 : WNA16_CHAT_CHATML;
}

void wna16_tokenizer_get_info(const wna16_tokenizer *tok, wna16_tokenizer_info *info) {
    memset(info, 0, sizeof *info);
    info->bos_id = info->eos_id = info->pad_id = -1;
    if (!tok) return;
    info->vocab_size = tok->vocab_size;
    info->id_limit = tok->n_ids;
    info->bos_id = tok->bos_id;
    info->eos_id = tok->eos_id;
    info->pad_id = tok->pad_id;
    info->add_bos = tok->add_bos;
    info->add_eos = tok->add_eos;
    info->chat_format = detect_format(tok);
}

/* ------------------------------------------------------------ rendering */

static void put(wna16_buf *b, const char *s) { wna16_buf_put(b, s, strlen(s)); }

/* Python's str.strip/lstrip/rstrip('\n') on [*s, *e). */
static void strip_nl(const char **s, const char **e, bool left, bool right) {
    while (left && *s < *e && **s == '\n') (*s)++;
    while (right && *e > *s && (*e)[-1] == '\n') (*e)--;
}

static const char *find_last(const char *s, const char *needle) {
    const char *last = NULL;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) last = p;
    return last;
}

/* Qwen3: the assistant turn splits reasoning out of "<think>..</think>"
 * and shows it only for turns after the last real user query. */
static void qwen3_assistant(wna16_buf *b, const char *content, bool show_think, bool is_last) {
    const char *c = content, *ce = content + strlen(content);
    const char *r = "", *re = r;
    const char *close = strstr(content, "</think>");
    if (close) {
        c = find_last(content, "</think>") + strlen("</think>");
        strip_nl(&c, &ce, true, false);
        r = content, re = close;
        strip_nl(&r, &re, false, true);
        /* .split('<think>')[-1] within the text before the first </think> */
        for (const char *p = r; p + 7 <= re; p++)
            if (!memcmp(p, "<think>", 7)) r = p + 7;
        strip_nl(&r, &re, true, false);
    }
    put(b, "<|im_start|>assistant\n");
    if (show_think && (is_last || re > r)) {
        strip_nl(&r, &re, true, true);
        put(b, "<think>\n");
        wna16_buf_put(b, r, (size_t)(re - r));
        put(b, "\n</think>\n\n");
        strip_nl(&c, &ce, true, false);
    }
    wna16_buf_put(b, c, (size_t)(ce - c));
    put(b, "<|im_end|>\n");
}

static bool is_tool_response(const char *s) {
    size_t n = strlen(s);
    return n >= 15 + 16 && !strncmp(s, "<tool_response>", 15) &&
           !strcmp(s + n - 16, "</tool_response>");
}

static wna16_status check_messages(wna16_diag *d, const wna16_chat_message *m, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role;
        if (!r || !m[i].content)
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "apply_chat: messages[%zu] has a NULL role or content", i);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "apply_chat: messages[%zu].role is \"%.40s\"; expected system, "
                              "user, assistant or tool",
                              i, r);
    }
    return WNA16_OK;
}

static void render(wna16_buf *b, wna16_chat_format f, bool default_system,
                   const wna16_chat_message *m, size_t n) {
    /* Qwen3's last_query_index: the last user turn that is not a tool response. */
    size_t last_query = n ? n - 1 : 0;
    for (size_t k = n; k-- > 0;)
        if (!strcmp(m[k].role, "user") && !is_tool_response(m[k].content)) {
            last_query = k;
            break;
        }
    if (default_system && (!n || strcmp(m[0].role, "system")))
        put(b, "<|im_start|>system\n" QWEN25_DEFAULT_SYSTEM "<|im_end|>\n");
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role;
        if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(m[i - 1].role, "tool")) put(b, "<|im_start|>user");
            put(b, "\n<tool_response>\n");
            put(b, m[i].content);
            put(b, "\n</tool_response>");
            if (i + 1 == n || strcmp(m[i + 1].role, "tool")) put(b, "<|im_end|>\n");
        } else if (f == WNA16_CHAT_QWEN3 && !strcmp(role, "assistant")) {
            qwen3_assistant(b, m[i].content, i > last_query, i + 1 == n);
        } else {
            wna16_buf_printf(b, "<|im_start|>%s\n", role);
            put(b, m[i].content);
            put(b, "<|im_end|>\n");
        }
    }
}

wna16_status wna16_tokenizer_apply_chat(wna16_ctx *ctx, const wna16_tokenizer *tok,
                                        const wna16_chat_message *messages, size_t n_messages,
                                        bool add_generation_prompt, bool enable_thinking,
                                        char **text) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!tok || (!messages && n_messages) || !text)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "apply_chat: tok, messages and text are required");
    *text = NULL;
    wna16_chat_format f = detect_format(tok);
    if (f == WNA16_CHAT_NONE)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "apply_chat: %s: %s; only ChatML templates (Qwen2/2.5/3, "
                          "<|im_start|>...<|im_end|>) are recognised; format the prompt yourself",
                          tok->path,
                          tok->chat_template ? "the chat_template in tokenizer_config.json is "
                                               "not a recognised format"
                                             : "no chat_template in tokenizer_config.json");
    WNA16_TRY(check_messages(d, messages, n_messages));
    wna16_buf b = {0};
    bool default_system =
        f == WNA16_CHAT_CHATML && strstr(tok->chat_template, QWEN25_DEFAULT_SYSTEM);
    render(&b, f, default_system, messages, n_messages);
    if (add_generation_prompt) {
        put(&b, "<|im_start|>assistant\n");
        if (f == WNA16_CHAT_QWEN3 && !enable_thinking) put(&b, "<think>\n\n</think>\n\n");
    }
    wna16_buf_put(&b, "", 0);
    if (b.failed) {
        wna16_buf_free(&b);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "apply_chat: out of memory");
    }
    *text = b.data;
    return WNA16_OK;
}
