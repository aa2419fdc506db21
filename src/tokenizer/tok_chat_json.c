/* Chat prompts from OpenAI-shaped JSON (wna16_tokenizer_apply_chat_json):
 * the messages normalized as vLLM hands them to a chat template (text
 * parts joined, tool-call arguments as objects), tools and the caller's
 * template kwargs, rendered by the model's own Jinja template. */
#include "jinja/jinja.h"
#include "tokenizer/tok_internal.h"

#include <jansson.h>
#include <string.h>

void wna16_chat_options_init(wna16_chat_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->add_generation_prompt = true;
}

static bool role_ok(const char *r) {
    return r && (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") ||
                 !strcmp(r, "tool"));
}

/* content: a string, null (""), or text parts joined with "\n". */
static wna16_status content_of(wna16_diag *d, size_t i, const json_t *c, json_t **out) {
    if (!c || json_is_null(c)) return (*out = json_string("")) ? WNA16_OK : WNA16_ERR_OUT_OF_MEMORY;
    if (json_is_string(c)) return (*out = json_copy((json_t *)c)) ? WNA16_OK : WNA16_ERR_OUT_OF_MEMORY;
    if (!json_is_array(c))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "messages[%zu].content must be a string, null or a list of parts", i);
    wna16_buf b = {0};
    for (size_t j = 0; j < json_array_size(c); j++) {
        const json_t *part = json_array_get(c, j);
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *t = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(t)) {
            wna16_buf_free(&b);
            return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                              "messages[%zu].content[%zu]: a part of type '%.40s'; only "
                              "{\"type\": \"text\", \"text\": ...} parts are supported (a "
                              "text-only model)",
                              i, j, type ? type : "(none)");
        }
        if (j) wna16_buf_put(&b, "\n", 1);
        wna16_buf_put(&b, json_string_value(t), json_string_length(t));
    }
    *out = json_stringn(b.data ? b.data : "", b.len);
    wna16_buf_free(&b);
    return *out ? WNA16_OK : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "apply_chat");
}

/* tool_calls with each function's arguments as an object (templates write
 * them with tojson; vLLM parses the string the same way). */
static wna16_status tool_calls_of(wna16_diag *d, size_t i, const json_t *tc, json_t **out) {
    if (!json_is_array(tc))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "messages[%zu].tool_calls must be a list",
                          i);
    json_t *calls = json_deep_copy(tc);
    if (!calls) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "apply_chat");
    for (size_t j = 0; j < json_array_size(calls); j++) {
        json_t *f = json_object_get(json_array_get(calls, j), "function");
        if (!json_is_object(f) || !json_is_string(json_object_get(f, "name"))) {
            json_decref(calls);
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "messages[%zu].tool_calls[%zu] needs a \"function\" with a string "
                              "\"name\"",
                              i, j);
        }
        json_t *a = json_object_get(f, "arguments");
        if (!json_is_string(a)) continue;
        json_error_t je;
        json_t *obj = json_loads(json_string_value(a), JSON_DECODE_ANY, &je);
        if (!obj) {
            json_decref(calls);
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "messages[%zu].tool_calls[%zu].function.arguments is not JSON (%s)",
                              i, j, je.text);
        }
        json_object_set_new(f, "arguments", obj);
    }
    *out = calls;
    return WNA16_OK;
}

static wna16_status message_of(wna16_diag *d, size_t i, const json_t *m, json_t **out) {
    if (!json_is_object(m))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "messages[%zu] must be an object", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role_ok(role))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "messages[%zu].role is \"%.40s\"; expected system, user, assistant or "
                          "tool",
                          i, role ? role : "(none)");
    json_t *msg = json_pack("{s:s}", "role", role), *v = NULL;
    if (!msg) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "apply_chat");
    wna16_status s = content_of(d, i, json_object_get(m, "content"), &v);
    if (s == WNA16_OK) json_object_set_new(msg, "content", v);
    const json_t *tc = json_object_get(m, "tool_calls");
    if (s == WNA16_OK && tc && !json_is_null(tc)) {
        s = tool_calls_of(d, i, tc, &v);
        if (s == WNA16_OK) json_object_set_new(msg, "tool_calls", v);
    }
    const char *pass[] = {"tool_call_id", "name", "reasoning_content"};
    for (size_t k = 0; s == WNA16_OK && k < sizeof pass / sizeof *pass; k++) {
        const json_t *x = json_object_get(m, pass[k]);
        if (!x || json_is_null(x)) continue;
        if (!json_is_string(x))
            s = wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "messages[%zu].%s must be a string", i,
                           pass[k]);
        else
            json_object_set(msg, pass[k], (json_t *)x);
    }
    if (s != WNA16_OK) {
        json_decref(msg);
        return s == WNA16_ERR_OUT_OF_MEMORY ? wna16_fail(d, s, "apply_chat") : s;
    }
    *out = msg;
    return WNA16_OK;
}

static wna16_status parse_json(wna16_diag *d, const char *what, const char *text, json_t **out) {
    json_error_t je;
    *out = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!*out)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "apply_chat: %s is not JSON (line %d: %s)",
                          what, je.line, je.text);
    return WNA16_OK;
}

static wna16_status messages_of(wna16_diag *d, const char *text, json_t **out) {
    json_t *in;
    WNA16_TRY(parse_json(d, "messages", text, &in));
    wna16_status s = json_is_array(in) ? WNA16_OK
                                       : wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                                                    "apply_chat: messages must be a JSON list");
    json_t *msgs = s == WNA16_OK ? json_array() : NULL;
    for (size_t i = 0; s == WNA16_OK && i < json_array_size(in); i++) {
        json_t *m = NULL;
        s = message_of(d, i, json_array_get(in, i), &m);
        if (s == WNA16_OK) json_array_append_new(msgs, m);
    }
    json_decref(in);
    if (s != WNA16_OK) json_decref(msgs);
    else *out = msgs;
    return s;
}

/* The caller's kwargs may not replace what the call itself sets. */
static wna16_status add_kwargs(wna16_diag *d, json_t *vars, const char *text) {
    json_t *kw;
    WNA16_TRY(parse_json(d, "chat_template_kwargs", text, &kw));
    wna16_status s = json_is_object(kw) ? WNA16_OK
                                        : wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                                                     "chat_template_kwargs must be a JSON object");
    /* special tokens may be overridden, as transformers' kwargs override
     * its special_tokens_map */
    static const char *const reserved[] = {"messages", "tools", "add_generation_prompt"};
    for (size_t i = 0; s == WNA16_OK && i < sizeof reserved / sizeof *reserved; i++)
        if (json_object_get(kw, reserved[i]))
            s = wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                           "chat_template_kwargs may not set '%s' (the request's own field sets "
                           "it)",
                           reserved[i]);
    if (s == WNA16_OK && json_object_update(vars, kw))
        s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "apply_chat");
    json_decref(kw);
    return s;
}

static wna16_status add_tools(wna16_diag *d, json_t *vars, const char *text, const char *tpl) {
    json_t *tools;
    WNA16_TRY(parse_json(d, "tools", text, &tools));
    if (!json_is_array(tools)) {
        json_decref(tools);
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "apply_chat: tools must be a JSON list");
    }
    if (json_array_size(tools) && !strstr(tpl, "tools")) {
        json_decref(tools);
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "this model's chat template does not render tools, so the model would "
                          "never see them; serve it with a template that does (--chat-template)");
    }
    json_object_set_new(vars, "tools", json_array_size(tools) ? tools : json_null());
    if (!json_array_size(tools)) json_decref(tools);
    return WNA16_OK;
}

wna16_status wna16_tokenizer_apply_chat_json(wna16_ctx *ctx, const wna16_tokenizer *tok,
                                             const char *messages_json,
                                             const wna16_chat_options *options, char **text) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_diag_clear(d);
    if (!tok || !messages_json || !text)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "apply_chat: tok, messages and text are required");
    *text = NULL;
    wna16_chat_options o;
    if (options) WNA16_TRY(wna16_options_take(d, "chat options", &o, sizeof o, options));
    else wna16_chat_options_init(&o);
    const char *tpl = o.chat_template ? o.chat_template : tok->chat_template;
    if (!tpl)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "apply_chat: %s: no chat_template in tokenizer_config.json and no "
                          "chat_template.jinja beside it (a base model?); give a template "
                          "(--chat-template) or format the prompt yourself",
                          tok->path);
    json_t *vars = NULL, *msgs = NULL;
    WNA16_TRY(messages_of(d, messages_json, &msgs));
    wna16_status s = tok_chat_vars(d, tok, o.add_generation_prompt, &vars);
    if (s == WNA16_OK) json_object_set_new(vars, "messages", msgs);
    else json_decref(msgs);
    if (s == WNA16_OK && o.tools) s = add_tools(d, vars, o.tools, tpl);
    if (s == WNA16_OK && o.template_kwargs) s = add_kwargs(d, vars, o.template_kwargs);
    if (s == WNA16_OK) {
        s = wna16_jinja_render(d, tpl, vars, text);
        if (s != WNA16_OK) wna16_diag_prefix(d, "apply_chat: %s: ", tok->path);
    }
    json_decref(vars);
    return s;
}
