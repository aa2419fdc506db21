/* tokenizer_config.json (special-token roles, chat template), the
 * chat_template.jinja file, and chat prompts: the model's own Jinja template
 * rendered by our interpreter (jinja.h) with the variables transformers'
 * apply_chat_template gives it. */
#include "jinja/jinja.h"
#include "tokenizer/tok_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* A chat template larger than this is not a chat template. */
#define TOK_MAX_TEMPLATE (4u << 20)

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

/* transformers (5.x) reads chat_template.jinja beside tokenizer.json and
 * lets it take priority over tokenizer_config.json's chat_template. */
wna16_status tok_load_chat_template_file(wna16_diag *d, wna16_tokenizer *t) {
    const char *slash = strrchr(t->path, '/');
    int dirlen = slash ? (int)(slash - t->path) : 1;
    char *path = wna16_asprintf("%.*s/chat_template.jinja", dirlen, slash ? t->path : ".");
    if (!path) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    FILE *f = fopen(path, "rb");
    if (!f) {
        int err = errno;
        wna16_status s = err == ENOENT || err == ENOTDIR
                             ? WNA16_OK
                             : wna16_fail(d, WNA16_ERR_IO, "%s: %s", path, strerror(err));
        wna16_free(path);
        return s;
    }
    char *text = wna16_malloc(TOK_MAX_TEMPLATE + 1);
    size_t n = text ? fread(text, 1, TOK_MAX_TEMPLATE + 1, f) : 0;
    bool read_error = text && ferror(f);
    fclose(f);
    wna16_status s = WNA16_OK;
    if (!text)
        s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
    else if (read_error)
        s = wna16_fail(d, WNA16_ERR_IO, "%s: read error", path);
    else if (n > TOK_MAX_TEMPLATE)
        s = wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID, "%s: over %u MiB; not a chat template", path,
                       TOK_MAX_TEMPLATE >> 20);
    else if (memchr(text, 0, n) || wna16_utf8_check((const uint8_t *)text, n) != n)
        s = wna16_fail(d, WNA16_ERR_TOKENIZER_INVALID,
                       "%s: not UTF-8 text (a NUL byte or an invalid sequence at offset %zu)", path,
                       memchr(text, 0, n) ? (size_t)((char *)memchr(text, 0, n) - text)
                                          : wna16_utf8_check((const uint8_t *)text, n));
    if (s == WNA16_OK) {
        text[n] = 0;
        wna16_free(t->chat_template);
        t->chat_template = text;
        text = NULL;
    }
    wna16_free(text);
    wna16_free(path);
    return s;
}

/* The format family, for wna16_tokenizer_info; rendering does not depend
 * on it (every template goes through the interpreter). */
static wna16_chat_format detect_format(const wna16_tokenizer *t) {
    const char *tpl = t->chat_template;
    if (!tpl) return WNA16_CHAT_NONE;
    if (!strstr(tpl, "<|im_start|>") || !strstr(tpl, "<|im_end|>")) return WNA16_CHAT_JINJA;
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

const char *wna16_tokenizer_chat_template(const wna16_tokenizer *tok) {
    return tok ? tok->chat_template : NULL;
}

/* ------------------------------------------------------------ rendering */

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

/* A special token's string for the template, when the config names one
 * (transformers passes special_tokens_map: only the tokens that are set). */
static int set_token(json_t *vars, const wna16_tokenizer *t, const char *key, int32_t id) {
    const char *s = id >= 0 ? wna16_tokenizer_token_str(t, id) : NULL;
    return s ? json_object_set_new(vars, key, json_string(s)) : 0;
}

/* The variables transformers' apply_chat_template renders with, less the
 * messages: tools and documents (None), add_generation_prompt and the
 * special tokens. */
wna16_status tok_chat_vars(wna16_diag *d, const wna16_tokenizer *t, bool gen, json_t **out) {
    json_t *vars = json_object();
    int bad = !vars || json_object_set_new(vars, "tools", json_null()) ||
              json_object_set_new(vars, "documents", json_null()) ||
              json_object_set_new(vars, "add_generation_prompt", json_boolean(gen)) ||
              set_token(vars, t, "bos_token", t->bos_id) ||
              set_token(vars, t, "eos_token", t->eos_id) || set_token(vars, t, "pad_token", t->pad_id);
    if (bad) {
        json_decref(vars);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "apply_chat: out of memory");
    }
    *out = vars;
    return WNA16_OK;
}

/* The messages (role, content), and our enable_thinking (always given:
 * true renders as if absent in the templates that read it, Qwen3's among
 * them). */
static wna16_status chat_vars(wna16_diag *d, const wna16_tokenizer *t, const wna16_chat_message *m,
                              size_t n, bool gen, bool think, json_t **out) {
    json_t *vars = NULL, *msgs = json_array();
    WNA16_TRY(tok_chat_vars(d, t, gen, &vars));
    int bad = !msgs || json_object_set_new(vars, "messages", msgs) ||
              json_object_set_new(vars, "enable_thinking", json_boolean(think));
    for (size_t i = 0; !bad && i < n; i++) {
        json_t *content = json_string(m[i].content);
        if (!content) {
            json_decref(vars);
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "apply_chat: messages[%zu].content is not valid UTF-8", i);
        }
        bad = json_array_append_new(msgs,
                                    json_pack("{s:s,s:o}", "role", m[i].role, "content", content));
    }
    if (bad) {
        json_decref(vars);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "apply_chat: out of memory");
    }
    *out = vars;
    return WNA16_OK;
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
    if (!tok->chat_template)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "apply_chat: %s: no chat_template in tokenizer_config.json and no "
                          "chat_template.jinja beside it (a base model?); format the prompt "
                          "yourself",
                          tok->path);
    WNA16_TRY(check_messages(d, messages, n_messages));
    json_t *vars = NULL;
    WNA16_TRY(
        chat_vars(d, tok, messages, n_messages, add_generation_prompt, enable_thinking, &vars));
    wna16_status s = wna16_jinja_render(d, tok->chat_template, vars, text);
    json_decref(vars);
    if (s != WNA16_OK) wna16_diag_prefix(d, "apply_chat: %s: ", tok->path);
    return s;
}
