/* Entry points: limits, compiling each kind of spec, the GBNF builder for
 * composed grammars, and tool-call grammars. Every kind is lowered to GBNF
 * text first, so one parser and one compiler serve all of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/grammar_internal.h"

void grammar_limits_default(grammar_limits *l) {
    *l = (grammar_limits){
        .max_text = 1 << 20,
        .max_nfa_states = 200000,
        .max_dfa_states = 100000,
        .max_schema_depth = 64,
        .max_stack_depth = 1024,
        .max_stacks = 1024,
        .max_work = 16u << 20,
        .max_cache_bytes = (size_t)256 << 20,
    };
}

static void limits_resolve(const grammar_limits *in, grammar_limits *out) {
    grammar_limits_default(out);
    if (!in) return;
#define TAKE(f)                                                                                    \
    if (in->f) out->f = in->f
    TAKE(max_text);
    TAKE(max_nfa_states);
    TAKE(max_dfa_states);
    TAKE(max_schema_depth);
    TAKE(max_stack_depth);
    TAKE(max_stacks);
    TAKE(max_work);
    TAKE(max_cache_bytes);
#undef TAKE
}

/* -------------------------------------------------------------- builder */

static wna16_status b_keep(grammar_builder *b, wna16_diag *d, wna16_status st) {
    if (st && !b->err) {
        b->err = st;
        memcpy(b->err_diag.detail, d ? d->detail : "", sizeof b->err_diag.detail);
    }
    if (!st && b->text.failed && !b->err) {
        b->err = WNA16_ERR_OUT_OF_MEMORY;
        snprintf(b->err_diag.detail, sizeof b->err_diag.detail, "out of memory building a grammar");
        return wna16_fail(d, b->err, "out of memory building a grammar");
    }
    return st ? st : b->err;
}

static bool name_ok(const char *name) {
    if (!name || !*name) return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_'))
            return false;
    return true;
}

wna16_status grammar_builder_create(wna16_diag *d, const grammar_limits *limits,
                                    grammar_builder **out) {
    grammar_builder *b = wna16_calloc(1, sizeof *b);
    if (!b) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building a grammar");
    limits_resolve(limits, &b->lim);
    *out = b;
    return WNA16_OK;
}

void grammar_builder_free(grammar_builder *b) {
    if (!b) return;
    wna16_buf_free(&b->text);
    wna16_free(b);
}

wna16_status grammar_builder_add_rule(wna16_diag *d, grammar_builder *b, const char *name,
                                      const char *body) {
    if (b->err) return b->err;
    if (!name_ok(name))
        return b_keep(b, d, wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "bad rule name '%s'",
                                       name ? name : "(null)"));
    wna16_buf_printf(&b->text, "%s ::= %s\n", name, body);
    return b_keep(b, d, WNA16_OK);
}

wna16_status grammar_builder_add_json_schema(wna16_diag *d, grammar_builder *b, const char *name,
                                             const char *schema, size_t len, bool strict,
                                             grammar_json_ws ws) {
    if (b->err) return b->err;
    if (!name_ok(name))
        return b_keep(b, d, wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "bad rule name '%s'",
                                       name ? name : "(null)"));
    return b_keep(b, d, json_schema_to_gbnf(d, schema, len, strict, ws, name, &b->lim, &b->text));
}

wna16_status grammar_builder_add_json_object(wna16_diag *d, grammar_builder *b, const char *name,
                                             grammar_json_ws ws) {
    return grammar_builder_add_json_schema(d, b, name, NULL, 0, false, ws);
}

wna16_status grammar_builder_add_regex(wna16_diag *d, grammar_builder *b, const char *name,
                                       const char *regex, size_t len) {
    if (b->err) return b->err;
    if (!name_ok(name))
        return b_keep(b, d, wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "bad rule name '%s'",
                                       name ? name : "(null)"));
    wna16_buf_printf(&b->text, "%s ::= ", name);
    wna16_status st = regex_to_gbnf(d, regex, len, false, &b->lim, &b->text);
    wna16_buf_put(&b->text, "\n", 1);
    return b_keep(b, d, st);
}

const char *grammar_builder_text(const grammar_builder *b) { return b->text.data ? b->text.data : ""; }

static wna16_status compile_gbnf(wna16_diag *d, const char *text, size_t len, const char *root,
                                 const grammar_limits *lim, grammar **out) {
    gx_ast ast = {0};
    wna16_status st = gbnf_parse(d, text, len, lim, &ast);
    if (!st) st = grammar_from_ast(d, &ast, root, lim, out);
    gx_ast_free(&ast);
    if (!st && pthread_mutex_init(&(*out)->lock, NULL)) {
        grammar_free(*out);
        *out = NULL;
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "cannot make the grammar's lock");
    }
    if (!st) (*out)->lock_ready = true;
    return st;
}

wna16_status grammar_builder_compile(wna16_diag *d, grammar_builder *b, const char *root,
                                     grammar **out) {
    *out = NULL;
    if (b->err) {
        if (d) memcpy(d->detail, b->err_diag.detail, sizeof d->detail);
        return b->err;
    }
    /* generated text may pass the text limit that hand-written GBNF has */
    grammar_limits lim = b->lim;
    if (lim.max_text < b->text.len) lim.max_text = b->text.len;
    return compile_gbnf(d, grammar_builder_text(b), b->text.len, root, &lim, out);
}

/* ---------------------------------------------------------------- kinds */

static wna16_status compile_choice(wna16_diag *d, const grammar_spec *spec, const grammar_limits *lim,
                                   grammar **out) {
    if (!spec->n_choices)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "guided_choice needs at least one choice");
    wna16_buf t = {0};
    wna16_buf_put(&t, "root ::= ", 9);
    size_t total = 0;
    for (size_t i = 0; i < spec->n_choices; i++) {
        const char *c = spec->choices[i];
        if (!c) {
            wna16_buf_free(&t);
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "choice %zu is not a string", i);
        }
        size_t n = strlen(c);
        total += n;
        if (total > lim->max_text) {
            wna16_buf_free(&t);
            return wna16_fail(d, WNA16_ERR_LIMIT, "choices longer than %zu bytes in all", lim->max_text);
        }
        if (i) wna16_buf_put(&t, " | ", 3);
        grammar_gbnf_literal(&t, c, n);
    }
    wna16_buf_put(&t, "\n", 1);
    grammar_limits l2 = *lim;
    l2.max_text = t.len + 1;
    wna16_status st = t.failed ? wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory")
                               : compile_gbnf(d, t.data, t.len, "root", &l2, out);
    wna16_buf_free(&t);
    return st;
}

static wna16_status compile_via_builder(wna16_diag *d, const grammar_spec *spec,
                                        const grammar_limits *lim, grammar **out) {
    grammar_builder *b;
    WNA16_TRY(grammar_builder_create(d, lim, &b));
    if (spec->len > lim->max_text) {
        grammar_builder_free(b);
        return wna16_fail(d, WNA16_ERR_LIMIT, "%s of %zu bytes is over the limit of %zu",
                          spec->kind == GRAMMAR_REGEX ? "regex" : "schema", spec->len, lim->max_text);
    }
    wna16_status st;
    if (spec->kind == GRAMMAR_REGEX)
        st = grammar_builder_add_regex(d, b, "root", spec->text, spec->len);
    else if (spec->kind == GRAMMAR_JSON_SCHEMA)
        st = grammar_builder_add_json_schema(d, b, "root", spec->text, spec->len, spec->strict,
                                             spec->ws);
    else
        st = grammar_builder_add_json_object(d, b, "root", spec->ws);
    if (!st) st = grammar_builder_compile(d, b, "root", out);
    grammar_builder_free(b);
    return st;
}

wna16_status grammar_compile(wna16_diag *d, const grammar_spec *spec, grammar **out) {
    *out = NULL;
    grammar_limits lim;
    limits_resolve(spec->limits, &lim);
    if (spec->kind != GRAMMAR_CHOICE && spec->kind != GRAMMAR_JSON_OBJECT && !spec->text)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "the grammar spec has no text");
    switch (spec->kind) {
    case GRAMMAR_GBNF: return compile_gbnf(d, spec->text, spec->len, "root", &lim, out);
    case GRAMMAR_CHOICE: return compile_choice(d, spec, &lim, out);
    case GRAMMAR_REGEX:
    case GRAMMAR_JSON_SCHEMA:
    case GRAMMAR_JSON_OBJECT: return compile_via_builder(d, spec, &lim, out);
    }
    return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "unknown grammar kind %d", (int)spec->kind);
}
