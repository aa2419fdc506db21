/* JSON Schema to GBNF (docs/grammar.md §JSON Schema). Objects are written
 * with their properties in the schema's order (required ones always,
 * optional ones maybe), then any additional properties; every other
 * keyword either shapes the grammar or, when it is outside the subset, is
 * refused with its name and location. Annotations (title, description,
 * default, examples, ...) are read and change nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/grammar_internal.h"

#define NEED_VALUE  1u
#define NEED_STRING 2u
#define NEED_NUMBER 4u
#define NEED_INT    8u
#define MAX_COUNT   4096 /* minItems, maxItems, minLength, maxLength */

typedef struct sref {
    char *ref, *rule;
} sref;

typedef struct sgen {
    wna16_diag *d;
    const grammar_limits *lim;
    json_t *root;
    const char *name;
    wna16_buf *out; /* rule definitions */
    bool flexible, strict;
    unsigned counter, need;
    sref *refs;
    size_t n_refs;
    size_t depth;
    wna16_status st;
} sgen;

static bool s_fail(sgen *g, wna16_status st, const char *path, const char *fmt, const char *arg) {
    if (!g->st) {
        char what[512];
        snprintf(what, sizeof what, fmt, arg);
        g->st = wna16_fail(g->d, st, "JSON Schema at %s: %s", path, what);
    }
    return false;
}

static bool unsupported(sgen *g, const char *path, const char *key) {
    return s_fail(g, WNA16_ERR_UNSUPPORTED, path,
                  "keyword '%s' is not supported (docs/grammar.md lists the JSON Schema subset)",
                  key);
}

/* A fresh helper rule name, name-N. */
static void fresh(sgen *g, char *buf, size_t cap) {
    snprintf(buf, cap, "%s-%u", g->name, ++g->counter);
}

static void define(sgen *g, const char *rule, const wna16_buf *body) {
    wna16_buf_printf(g->out, "%s ::= %s\n", rule, body->data ? body->data : "\"\"");
}

static void put(wna16_buf *b, const char *s) { wna16_buf_put(b, s, strlen(s)); }

static void ws(sgen *g, wna16_buf *e) { wna16_buf_printf(e, " %s-ws ", g->name); }

/* A JSON text as a literal (compact serialization). */
static void json_literal(wna16_buf *e, const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        e->failed = true;
        return;
    }
    grammar_gbnf_literal(e, s, strlen(s));
    free(s);
}

static void path_join(char *out, size_t cap, const char *path, const char *key) {
    snprintf(out, cap, "%s/%s", path, key);
}

/* ------------------------------------------------------------ keywords */

static const char *const k_annotations[] = {"title", "description", "$schema", "$id", "$comment",
                                            "default", "examples", "deprecated", "readOnly",
                                            "writeOnly", "$anchor", "contentMediaType", NULL};
static const char *const k_supported[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs",
    "definitions", "pattern", "format", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "uniqueItems", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

static bool check_keywords(sgen *g, json_t *s, const char *path) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(k_annotations, k) || in_list(k_supported, k)) continue;
        return unsupported(g, path, k);
    }
    v = json_object_get(s, "uniqueItems");
    if (v && json_is_true(v)) return unsupported(g, path, "uniqueItems");
    return true;
}

static bool has_any(json_t *s, const char *const *keys) {
    for (; *keys; keys++)
        if (json_object_get(s, *keys)) return true;
    return false;
}

static bool get_count(sgen *g, json_t *s, const char *key, const char *path, int64_t *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "'%s' must be a non-negative integer", key);
    if (json_integer_value(v) > MAX_COUNT)
        return s_fail(g, WNA16_ERR_UNSUPPORTED, path, "'%s' over 4096 is not supported", key);
    *out = json_integer_value(v);
    return true;
}

/* ----------------------------------------------------------- the parts */

static bool gen(sgen *g, json_t *s, const char *path, wna16_buf *e);

static bool gen_ref(sgen *g, const char *ref, const char *path, wna16_buf *e) {
    for (size_t i = 0; i < g->n_refs; i++)
        if (!strcmp(g->refs[i].ref, ref)) {
            put(e, g->refs[i].rule);
            return true;
        }
    if (strcmp(ref, "#") && strncmp(ref, "#/", 2))
        return s_fail(g, WNA16_ERR_UNSUPPORTED, path,
                      "$ref '%s' is not supported (only local references #/...)", ref);
    /* resolve the JSON pointer */
    json_t *t = g->root;
    const char *p = ref + 1;
    while (t && *p == '/') {
        p++;
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char key[256];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 1 < sizeof key; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                key[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                key[k++] = p[i];
            }
        }
        key[k] = '\0';
        t = json_is_object(t) ? json_object_get(t, key)
            : json_is_array(t) ? json_array_get(t, (size_t)strtoul(key, NULL, 10))
                               : NULL;
        p += n;
    }
    if (!t) return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "$ref '%s' points at nothing", ref);
    if (g->n_refs >= 1024) return s_fail(g, WNA16_ERR_LIMIT, path, "more than %s $ref targets", "1024");
    sref *nr = wna16_realloc(g->refs, (g->n_refs + 1) * sizeof *nr);
    if (!nr) return s_fail(g, WNA16_ERR_OUT_OF_MEMORY, path, "%s", "out of memory");
    g->refs = nr;
    char rule[128];
    fresh(g, rule, sizeof rule);
    g->refs[g->n_refs] = (sref){wna16_strdup(ref), wna16_strdup(rule)};
    if (!g->refs[g->n_refs].ref || !g->refs[g->n_refs].rule)
        return s_fail(g, WNA16_ERR_OUT_OF_MEMORY, path, "%s", "out of memory");
    g->n_refs++;
    wna16_buf body = {0};
    bool ok = gen(g, t, ref, &body);
    if (ok) define(g, rule, &body);
    wna16_buf_free(&body);
    put(e, rule);
    return ok;
}

/* Integers in [lo, hi] of the same number of digits, no leading zeros
 * except the number 0 (the classic digit-by-digit split). */
static void digits_range(wna16_buf *e, const char *lo, const char *hi, size_t n) {
    if (n == 1) {
        if (lo[0] == hi[0])
            wna16_buf_printf(e, "\"%c\"", lo[0]);
        else
            wna16_buf_printf(e, "[%c-%c]", lo[0], hi[0]);
        return;
    }
    if (lo[0] == hi[0]) {
        wna16_buf_printf(e, "\"%c\" ", lo[0]);
        digits_range(e, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_zeros = strspn(lo + 1, "0") == n - 1, hi_nines = strspn(hi + 1, "9") == n - 1;
    put(e, "(");
    char lo_first = lo[0], hi_first = hi[0];
    if (!lo_zeros) {
        char nines[24];
        memset(nines, '9', n - 1);
        wna16_buf_printf(e, "\"%c\" ", lo[0]);
        digits_range(e, lo + 1, nines, n - 1);
        put(e, " | ");
        lo_first++;
    }
    if (!hi_nines) hi_first--;
    if (lo_first <= hi_first)
        wna16_buf_printf(e, "[%c-%c] [0-9]{%zu} | ", lo_first, hi_first, n - 1);
    if (!hi_nines) {
        char zeros[24];
        memset(zeros, '0', n - 1);
        wna16_buf_printf(e, "\"%c\" ", hi[0]);
        digits_range(e, zeros, hi + 1, n - 1);
    } else {
        e->len -= 3; /* the last " | " */
    }
    put(e, ")");
}

/* Non-negative integers in [lo, hi] (hi < 0: no upper bound). */
static void uint_range(wna16_buf *e, int64_t lo, int64_t hi) {
    char a[24], b[24], x[24], y[24];
    int la = snprintf(a, sizeof a, "%lld", (long long)lo);
    int lb = hi >= 0 ? snprintf(b, sizeof b, "%lld", (long long)hi) : la;
    put(e, "(");
    for (int n = la; n <= lb; n++) {
        if (n == la)
            memcpy(x, a, (size_t)n + 1);
        else
            x[0] = '1', memset(x + 1, '0', (size_t)n - 1), x[n] = '\0';
        if (hi >= 0 && n == lb)
            memcpy(y, b, (size_t)n + 1);
        else
            memset(y, '9', (size_t)n), y[n] = '\0';
        if (n > la) put(e, " | ");
        digits_range(e, x, y, (size_t)n);
    }
    if (hi < 0 && la < 18) wna16_buf_printf(e, " | [1-9] [0-9]{%d,17}", la);
    put(e, ")");
}

static bool gen_integer(sgen *g, json_t *s, const char *path, wna16_buf *e) {
    const char *keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    bool bounded = false;
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, keys[i]);
        if (!v) continue;
        if (!json_is_number(v))
            return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "'%s' must be a number", keys[i]);
        double x = json_number_value(v);
        if (x < -9e15 || x > 9e15)
            return s_fail(g, WNA16_ERR_UNSUPPORTED, path, "'%s' beyond +-9e15 is not supported", keys[i]);
        int64_t b = i == 0 ? (int64_t)ceil(x)
                    : i == 1 ? (int64_t)floor(x)
                    : i == 2 ? (int64_t)floor(x) + 1
                             : (int64_t)ceil(x) - 1;
        if (i % 2 == 0 && b > lo) lo = b;
        if (i % 2 == 1 && b < hi) hi = b;
        bounded = true;
    }
    if (!bounded) {
        g->need |= NEED_INT;
        wna16_buf_printf(e, "%s-integer", g->name);
        return true;
    }
    if (lo > hi) return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "the integer range is empty");
    put(e, "(");
    bool any = false;
    if (lo < 0) { /* negative part: "-" and [max(1, -hi), -lo] */
        put(e, "\"-\" ");
        uint_range(e, hi < 0 ? -hi : 1, lo == INT64_MIN ? -1 : -lo);
        any = true;
    }
    if (hi >= 0) {
        if (any) put(e, " | ");
        uint_range(e, lo < 0 ? 0 : lo, hi == INT64_MAX ? -1 : hi);
    }
    put(e, ")");
    return true;
}

static bool gen_number(sgen *g, json_t *s, const char *path, wna16_buf *e) {
    const char *keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; keys[i]; i++)
        if (json_object_get(s, keys[i]))
            return s_fail(g, WNA16_ERR_UNSUPPORTED, path,
                          "'%s' is supported for integers only, not numbers", keys[i]);
    g->need |= NEED_NUMBER;
    wna16_buf_printf(e, "%s-number", g->name);
    return true;
}

static const struct {
    const char *name, *body;
} k_formats[] = {
    {"date", "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\") (\".\" [0-9]{1,9})? "
             "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
    {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
             "[0-9a-fA-F]{12}"},
    {"email", "[A-Za-z0-9._%+-]{1,64} \"@\" [A-Za-z0-9-]{1,63} (\".\" [A-Za-z0-9-]{1,63}){1,8}"},
    {"ipv4", "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]) (\".\" (\"25\" "
             "[0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9])){3}"},
};

static bool gen_string(sgen *g, json_t *s, const char *path, wna16_buf *e) {
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    int64_t min = 0, max = -1;
    if (!get_count(g, s, "minLength", path, &min) || !get_count(g, s, "maxLength", path, &max))
        return false;
    bool counted = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if ((pat != NULL) + (fmt != NULL) + counted > 1)
        return s_fail(g, WNA16_ERR_UNSUPPORTED, path, "%s",
                      "pattern, format and minLength/maxLength together are not supported");
    if (max >= 0 && max < min)
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "maxLength < minLength");
    if (pat) {
        if (!json_is_string(pat))
            return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'pattern' must be a string");
        put(e, "\"\\\"\" ");
        wna16_status st = regex_to_gbnf(g->d, json_string_value(pat), json_string_length(pat),
                                        REGEX_JSON_STRING | REGEX_SEARCH, g->lim, e);
        if (st) {
            g->st = st;
            wna16_diag_prefix(g->d, "JSON Schema at %s: pattern: ", path);
            return false;
        }
        put(e, " \"\\\"\"");
        return true;
    }
    if (fmt) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
        const char *body = NULL;
        for (size_t i = 0; i < sizeof k_formats / sizeof k_formats[0]; i++)
            if (!strcmp(f, k_formats[i].name)) body = k_formats[i].body;
        if (!strcmp(f, "date-time")) {
            wna16_buf_printf(e, "\"\\\"\" (%s) \"T\" (%s) \"\\\"\"", k_formats[0].body,
                             k_formats[1].body);
            return true;
        }
        if (!body)
            return s_fail(g, WNA16_ERR_UNSUPPORTED, path,
                          "format '%s' is not supported (date, time, date-time, uuid, email, ipv4)", f);
        wna16_buf_printf(e, "\"\\\"\" (%s) \"\\\"\"", body);
        return true;
    }
    g->need |= NEED_STRING;
    if (!counted) {
        wna16_buf_printf(e, "%s-string", g->name);
    } else if (max < 0) {
        wna16_buf_printf(e, "\"\\\"\" %s-char{%lld,} \"\\\"\"", g->name, (long long)min);
    } else {
        wna16_buf_printf(e, "\"\\\"\" %s-char{%lld,%lld} \"\\\"\"", g->name, (long long)min,
                         (long long)max);
    }
    return true;
}

/* ---------------------------------------------------------- objects */

/* Rules for a JSON string (with its quotes) that is none of keys[]: the
 * text walks a trie of the keys and must leave it (with a plain character)
 * or end where no key ends. Escapes are only allowed once off the trie, so
 * no escaped spelling can rebuild a key. keys are sorted. */
static void gen_other_key(sgen *g, const char **keys, size_t n, size_t off, const char *rule) {
    wna16_buf b = {0};
    bool ends_here = false;
    for (size_t i = 0; i < n; i++) ends_here |= strlen(keys[i]) == off;
    if (!ends_here) put(&b, "\"\\\"\" | ");
    put(&b, "[^\"\\\\\\x00-\\x1F");
    /* the first character of each continuing key leaves the class */
    size_t i = 0;
    char child_rules[64][128];
    uint32_t child_cp[64];
    size_t n_child = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = strlen(keys[i]);
        if (len == off || !grammar_utf8_decode((const uint8_t *)keys[i] + off, len - off, &cp)) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && strlen(keys[j]) > off && !memcmp(keys[j] + off, keys[i] + off, 1) &&
               !strncmp(keys[j] + off, keys[i] + off, grammar_utf8_encode(cp, (uint8_t[4]){0})))
            j++;
        if (cp >= 0x20 && cp != '"' && cp != '\\' && n_child < 64) {
            gbnf_put_cp(&b, cp, true);
            child_cp[n_child] = cp;
            fresh(g, child_rules[n_child], sizeof child_rules[0]);
            uint8_t u[4];
            gen_other_key(g, keys + i, j - i, off + grammar_utf8_encode(cp, u), child_rules[n_child]);
            n_child++;
        }
        i = j;
    }
    wna16_buf_printf(&b, "] %s-char* \"\\\"\"", g->name);
    for (size_t c = 0; c < n_child; c++) {
        put(&b, " | \"");
        gbnf_put_cp(&b, child_cp[c], false);
        wna16_buf_printf(&b, "\" %s", child_rules[c]);
    }
    define(g, rule, &b);
    wna16_buf_free(&b);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct prop {
    const char *key;
    json_t *schema;
    bool required;
} prop;

static bool collect_props(sgen *g, json_t *s, const char *path, prop **out, size_t *n) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    if (props && !json_is_object(props))
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'properties' must be an object");
    if (req && !json_is_array(req))
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'required' must be an array");
    size_t cap = (props ? json_object_size(props) : 0) + (req ? json_array_size(req) : 0);
    prop *p = wna16_calloc(cap ? cap : 1, sizeof *p);
    if (!p) return s_fail(g, WNA16_ERR_OUT_OF_MEMORY, path, "%s", "out of memory");
    size_t k = 0;
    const char *key;
    json_t *v;
    json_object_foreach(props, key, v) p[k++] = (prop){key, v, false};
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            wna16_free(p);
            return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'required' must list strings");
        }
        size_t j = 0;
        while (j < k && strcmp(p[j].key, json_string_value(r))) j++;
        if (j == k) p[k++] = (prop){json_string_value(r), json_true(), true};
        p[j].required = true;
    }
    *out = p;
    *n = k;
    return true;
}

static bool gen_object(sgen *g, json_t *s, const char *path, wna16_buf *e) {
    prop *p;
    size_t n;
    if (!collect_props(g, s, path, &p, &n)) return false;
    json_t *addl = json_object_get(s, "additionalProperties");
    bool extra = addl ? !json_is_false(addl) : !g->strict;
    if (addl && !json_is_boolean(addl) && !json_is_object(addl)) {
        wna16_free(p);
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s",
                      "'additionalProperties' must be a boolean or a schema");
    }
    char sub[512], (*pr)[128] = wna16_calloc(n + 1, sizeof *pr), (*tail)[128] = wna16_calloc(n + 1, sizeof *tail);
    char xrule[128] = "", xtail[128] = "";
    bool ok = pr && tail;
    if (!ok) s_fail(g, WNA16_ERR_OUT_OF_MEMORY, path, "%s", "out of memory");
    for (size_t i = 0; ok && i < n; i++) { /* name ::= "\"key\"" ws ":" ws value */
        wna16_buf b = {0};
        json_t *k = json_string(p[i].key);
        json_literal(&b, k);
        json_decref(k);
        ws(g, &b);
        put(&b, "\":\"");
        ws(g, &b);
        snprintf(sub, sizeof sub, "%s/properties/%s", path, p[i].key);
        ok = gen(g, p[i].schema, sub, &b);
        fresh(g, pr[i], sizeof pr[i]);
        if (ok) define(g, pr[i], &b);
        wna16_buf_free(&b);
    }
    if (ok && extra) { /* xrule ::= other-key ws ":" ws value; xtail ::= (ws "," ws xrule)* */
        const char **keys = wna16_malloc((n ? n : 1) * sizeof *keys);
        ok = keys != NULL;
        for (size_t i = 0; ok && i < n; i++) keys[i] = p[i].key;
        if (ok) qsort(keys, n, sizeof *keys, cmp_str);
        char krule[128];
        fresh(g, krule, sizeof krule);
        g->need |= NEED_STRING;
        if (ok && n) {
            char inner[128];
            fresh(g, inner, sizeof inner);
            gen_other_key(g, keys, n, 0, inner);
            wna16_buf b = {0};
            wna16_buf_printf(&b, "\"\\\"\" %s", inner);
            define(g, krule, &b);
            wna16_buf_free(&b);
        } else if (ok) {
            g->need |= NEED_STRING;
            wna16_buf b = {0};
            wna16_buf_printf(&b, "%s-string", g->name);
            define(g, krule, &b);
            wna16_buf_free(&b);
        }
        wna16_free(keys);
        wna16_buf b = {0};
        put(&b, krule);
        ws(g, &b);
        put(&b, "\":\"");
        ws(g, &b);
        path_join(sub, sizeof sub, path, "additionalProperties");
        if (ok) ok = gen(g, addl && json_is_object(addl) ? addl : json_true(), sub, &b);
        fresh(g, xrule, sizeof xrule);
        if (ok) define(g, xrule, &b);
        b.len = 0;
        wna16_buf_printf(&b, "(%s-ws \",\" %s-ws %s)*", g->name, g->name, xrule);
        fresh(g, xtail, sizeof xtail);
        define(g, xtail, &b);
        wna16_buf_free(&b);
    }
    /* tail[i]: the properties from i on, each after a comma */
    for (size_t i = n + 1; ok && i-- > 0;) {
        wna16_buf b = {0};
        if (i == n) {
            put(&b, extra ? xtail : "\"\"");
        } else {
            wna16_buf_printf(&b, "%s(%s-ws \",\" %s-ws %s)%s %s", p[i].required ? "" : "", g->name,
                             g->name, pr[i], p[i].required ? "" : "?", tail[i + 1]);
        }
        fresh(g, tail[i], sizeof tail[i]);
        define(g, tail[i], &b);
        wna16_buf_free(&b);
    }
    if (ok) { /* the first property present is j: all before it are optional */
        put(e, "\"{\"");
        ws(g, e);
        put(e, "(");
        bool all_optional = true, first = true;
        for (size_t j = 0; j < n && all_optional; j++) {
            wna16_buf_printf(e, "%s%s %s", first ? "" : " | ", pr[j], tail[j + 1]);
            first = false;
            all_optional = !p[j].required;
        }
        if (all_optional && extra) {
            wna16_buf_printf(e, "%s%s %s", first ? "" : " | ", xrule, xtail);
            first = false;
        }
        if (all_optional) wna16_buf_printf(e, "%s\"\"", first ? "" : " | ");
        put(e, ")");
        ws(g, e);
        put(e, "\"}\"");
    }
    wna16_free(p);
    wna16_free(pr);
    wna16_free(tail);
    return ok;
}

/* ------------------------------------------------------------ arrays */

static bool gen_array(sgen *g, json_t *s, const char *path, wna16_buf *e) {
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    if (items && json_is_array(items)) { /* draft 4-2019 tuples */
        if (prefix) return unsupported(g, path, "items (an array) with prefixItems");
        prefix = items;
        items = NULL;
    }
    if (prefix && !json_is_array(prefix))
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'prefixItems' must be an array");
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'items' must be a schema");
    int64_t min = 0, max = -1;
    if (!get_count(g, s, "minItems", path, &min) || !get_count(g, s, "maxItems", path, &max)) return false;
    size_t k = prefix ? json_array_size(prefix) : 0;
    char sub[512], item[128] = "", sep[128];
    snprintf(sep, sizeof sep, "%s-ws \",\" %s-ws", g->name, g->name);
    bool rest = !(items && json_is_false(items)) && (max < 0 || (int64_t)k < max);
    if (rest) {
        wna16_buf b = {0};
        path_join(sub, sizeof sub, path, "items");
        bool ok = gen(g, items ? items : json_true(), sub, &b);
        fresh(g, item, sizeof item);
        if (ok) define(g, item, &b);
        wna16_buf_free(&b);
        if (!ok) return false;
    }
    /* the elements after the prefix */
    wna16_buf r = {0};
    if (rest) {
        int64_t rmin = min > (int64_t)k ? min - (int64_t)k : 0, rmax = max < 0 ? -1 : max - (int64_t)k;
        if (k == 0) {
            wna16_buf_printf(&r, "(%s (%s %s){%lld,", item, sep, item, (long long)(rmin ? rmin - 1 : 0));
            if (rmax >= 0)
                wna16_buf_printf(&r, "%lld})%s", (long long)(rmax - 1), rmin ? "" : "?");
            else
                wna16_buf_printf(&r, "})%s", rmin ? "" : "?");
        } else {
            wna16_buf_printf(&r, "(%s %s){%lld,", sep, item, (long long)rmin);
            if (rmax >= 0)
                wna16_buf_printf(&r, "%lld}", (long long)rmax);
            else
                put(&r, "}");
        }
    } else {
        put(&r, "\"\"");
    }
    char tail[128];
    fresh(g, tail, sizeof tail);
    define(g, tail, &r);
    wna16_buf_free(&r);
    for (size_t i = k; i-- > 0;) { /* prefix element i, then what follows it */
        if (max >= 0 && (int64_t)i >= max) continue;
        wna16_buf b = {0};
        char idx[48];
        snprintf(idx, sizeof idx, "prefixItems/%zu", i);
        path_join(sub, sizeof sub, path, idx);
        put(&b, "(");
        if (i) wna16_buf_printf(&b, "%s ", sep);
        bool ok = gen(g, json_array_get(prefix, i), sub, &b);
        wna16_buf_printf(&b, " %s)%s", tail, (int64_t)i >= min ? "?" : "");
        fresh(g, tail, sizeof tail);
        if (ok) define(g, tail, &b);
        wna16_buf_free(&b);
        if (!ok) return false;
    }
    put(e, "\"[\"");
    ws(g, e);
    put(e, tail);
    ws(g, e);
    put(e, "\"]\"");
    return true;
}

/* --------------------------------------------------------- dispatcher */

static bool type_matches(const json_t *v, const char *t) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(int64_t)json_real_value(v));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static bool value_fits_type(const json_t *v, const json_t *type) {
    if (!type) return true;
    if (json_is_string(type)) return type_matches(v, json_string_value(type));
    for (size_t i = 0; i < json_array_size(type); i++)
        if (json_is_string(json_array_get(type, i)) &&
            type_matches(v, json_string_value(json_array_get(type, i))))
            return true;
    return false;
}

static bool gen_enum(sgen *g, json_t *s, const char *path, wna16_buf *e) {
    json_t *en = json_object_get(s, "enum"), *type = json_object_get(s, "type");
    if (json_object_get(s, "const")) {
        if (en) return unsupported(g, path, "enum together with const");
        json_literal(e, json_object_get(s, "const"));
        return true;
    }
    if (!json_is_array(en) || !json_array_size(en))
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'enum' must be a non-empty array");
    size_t used = 0;
    put(e, "(");
    for (size_t i = 0; i < json_array_size(en); i++) {
        json_t *v = json_array_get(en, i);
        if (!value_fits_type(v, type)) continue; /* not of the schema's type: never valid */
        if (used++) put(e, " | ");
        json_literal(e, v);
    }
    put(e, ")");
    if (!used)
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "no 'enum' value has the schema's type");
    return true;
}

static const char *const k_value_keywords[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "prefixItems", "minItems", "maxItems", "pattern", "format", "minLength", "maxLength",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static bool gen_combinator(sgen *g, json_t *s, const char *path, const char *kw, wna16_buf *e) {
    json_t *list = json_object_get(s, kw);
    for (const char *const *k = k_value_keywords; *k; k++)
        if (json_object_get(s, *k)) {
            char both[96];
            snprintf(both, sizeof both, "%s together with %s", kw, *k);
            return unsupported(g, path, both);
        }
    if (!json_is_array(list) || !json_array_size(list))
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "'%s' must be a non-empty array", kw);
    if (!strcmp(kw, "allOf") && json_array_size(list) > 1)
        return unsupported(g, path, "allOf with more than one schema");
    put(e, "(");
    for (size_t i = 0; i < json_array_size(list); i++) {
        char sub[512], idx[48];
        snprintf(idx, sizeof idx, "%s/%zu", kw, i);
        path_join(sub, sizeof sub, path, idx);
        if (i) put(e, " | ");
        if (!gen(g, json_array_get(list, i), sub, e)) return false;
    }
    put(e, ")");
    return true;
}

static bool gen_type(sgen *g, json_t *s, const char *t, const char *path, wna16_buf *e) {
    if (!strcmp(t, "object")) return gen_object(g, s, path, e);
    if (!strcmp(t, "array")) return gen_array(g, s, path, e);
    if (!strcmp(t, "string")) return gen_string(g, s, path, e);
    if (!strcmp(t, "integer")) return gen_integer(g, s, path, e);
    if (!strcmp(t, "number")) return gen_number(g, s, path, e);
    if (!strcmp(t, "boolean")) return put(e, "(\"true\" | \"false\")"), true;
    if (!strcmp(t, "null")) return put(e, "\"null\""), true;
    return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "unknown type '%s'", t);
}

static const char *infer_type(json_t *s) {
    static const char *const obj[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arr[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
    static const char *const str[] = {"pattern", "format", "minLength", "maxLength", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    if (has_any(s, obj)) return "object";
    if (has_any(s, arr)) return "array";
    if (has_any(s, str)) return "string";
    if (has_any(s, num)) return "number";
    return NULL;
}

static bool gen(sgen *g, json_t *s, const char *path, wna16_buf *e) {
    if (g->st) return false;
    if (json_is_true(s)) {
        g->need |= NEED_VALUE;
        wna16_buf_printf(e, "%s-value", g->name);
        return true;
    }
    if (json_is_false(s))
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "schema false admits no value");
    if (!json_is_object(s))
        return s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "a schema must be an object or a boolean");
    if (++g->depth > g->lim->max_schema_depth) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", g->lim->max_schema_depth);
        return s_fail(g, WNA16_ERR_LIMIT, path, "schemas nested more than %s deep", lim);
    }
    bool ok = check_keywords(g, s, path);
    json_t *ref = json_object_get(s, "$ref"), *type = json_object_get(s, "type");
    if (!ok) {
    } else if (ref) {
        for (const char *const *k = k_value_keywords; ok && *k; k++)
            if (json_object_get(s, *k)) {
                char both[96];
                snprintf(both, sizeof both, "$ref together with %s", *k);
                ok = unsupported(g, path, both);
            }
        if (ok && !json_is_string(ref))
            ok = s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'$ref' must be a string");
        if (ok) ok = gen_ref(g, json_string_value(ref), path, e);
    } else if (json_object_get(s, "anyOf")) {
        ok = json_object_get(s, "oneOf") || json_object_get(s, "allOf")
                 ? unsupported(g, path, "anyOf together with oneOf or allOf")
                 : gen_combinator(g, s, path, "anyOf", e);
    } else if (json_object_get(s, "oneOf")) {
        ok = json_object_get(s, "allOf") ? unsupported(g, path, "oneOf together with allOf")
                                         : gen_combinator(g, s, path, "oneOf", e);
    } else if (json_object_get(s, "allOf")) {
        ok = gen_combinator(g, s, path, "allOf", e);
    } else if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        ok = gen_enum(g, s, path, e);
    } else if (json_is_string(type)) {
        ok = gen_type(g, s, json_string_value(type), path, e);
    } else if (json_is_array(type) && json_array_size(type)) {
        put(e, "(");
        for (size_t i = 0; ok && i < json_array_size(type); i++) {
            json_t *t = json_array_get(type, i);
            if (i) put(e, " | ");
            ok = json_is_string(t) ? gen_type(g, s, json_string_value(t), path, e)
                                   : s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'type' must list strings");
        }
        put(e, ")");
    } else if (type) {
        ok = s_fail(g, WNA16_ERR_INVALID_ARGUMENT, path, "%s", "'type' must be a string or an array");
    } else if (infer_type(s)) {
        ok = gen_type(g, s, infer_type(s), path, e);
    } else {
        g->need |= NEED_VALUE;
        wna16_buf_printf(e, "%s-value", g->name);
    }
    g->depth--;
    return ok && !g->st;
}

/* The shared pieces every schema grammar may use. Numbers keep to what
 * every JSON parser reads exactly: an integer part of at most 18 digits (a
 * 64-bit integer) and an exponent of at most 2 digits (a finite double). */
static void gen_primitives(sgen *g) {
    const char *n = g->name;
    wna16_buf *o = g->out;
    unsigned need = g->need;
    if (need & NEED_VALUE) need |= NEED_STRING | NEED_NUMBER;
    wna16_buf_printf(o, "%s-ws ::= %s\n", n, g->flexible ? "(\" \" | \"\\n\" [ \\t]{0,20})?" : "\"\"");
    if (need & NEED_STRING) {
        /* \u escapes spell neither NUL nor a surrogate, which many parsers refuse */
        wna16_buf_printf(o,
                         "%s-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" %s-u4)\n"
                         "%s-u4 ::= \"0\" (\"0\" (\"0\" [1-9a-fA-F] | [1-9a-fA-F] [0-9a-fA-F]) | "
                         "[1-9a-fA-F] [0-9a-fA-F]{2}) | [1-9a-cA-C] [0-9a-fA-F]{3} | [dD] [0-7] "
                         "[0-9a-fA-F]{2} | [e-fE-F] [0-9a-fA-F]{3}\n"
                         "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n",
                         n, n, n, n, n);
    }
    if (need & NEED_NUMBER)
        wna16_buf_printf(o, "%s-number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,17}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,2})?\n", n);
    if (need & NEED_INT) wna16_buf_printf(o, "%s-integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,17})\n", n);
    if (need & NEED_VALUE) {
        wna16_buf_printf(o,
                         "%s-value ::= %s-object | %s-array | %s-string | %s-number | \"true\" | "
                         "\"false\" | \"null\"\n"
                         "%s-object ::= \"{\" %s-ws (%s-string %s-ws \":\" %s-ws %s-value (%s-ws \",\" "
                         "%s-ws %s-string %s-ws \":\" %s-ws %s-value)*)? %s-ws \"}\"\n"
                         "%s-array ::= \"[\" %s-ws (%s-value (%s-ws \",\" %s-ws %s-value)*)? %s-ws \"]\"\n",
                         n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n);
    }
}

wna16_status json_schema_to_gbnf(wna16_diag *d, const char *schema, size_t len, bool strict,
                                 grammar_json_ws ws_mode, const char *name,
                                 const grammar_limits *lim, wna16_buf *out) {
    sgen g = {.d = d, .lim = lim, .name = name, .out = out, .strict = strict,
              .flexible = ws_mode == GRAMMAR_WS_FLEXIBLE};
    wna16_buf e = {0};
    if (!schema) { /* any JSON object */
        g.need |= NEED_VALUE;
        wna16_buf_printf(out, "%s ::= %s-object\n", name, name);
        gen_primitives(&g);
        return out->failed ? wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory") : WNA16_OK;
    }
    if (len > lim->max_text)
        return wna16_fail(d, WNA16_ERR_LIMIT, "schema of %zu bytes is over the limit of %zu", len,
                          lim->max_text);
    json_error_t err;
    g.root = json_loadb(schema, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!g.root)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "the JSON schema is not valid JSON: line %d, column %d: %s", err.line,
                          err.column, err.text);
    if (gen(&g, g.root, "#", &e)) {
        wna16_buf_printf(out, "%s ::= %s\n", name, e.data);
        gen_primitives(&g);
    }
    wna16_buf_free(&e);
    for (size_t i = 0; i < g.n_refs; i++) {
        wna16_free(g.refs[i].ref);
        wna16_free(g.refs[i].rule);
    }
    wna16_free(g.refs);
    json_decref(g.root);
    if (!g.st && (out->failed || e.failed))
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building the schema's grammar");
    return g.st;
}
