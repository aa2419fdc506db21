/* The Jinja chat-template interpreter (src/tokenizer/jinja.h):
 *  - byte equality with transformers' apply_chat_template over the goldens
 *    in tests/data/chat/NAME.json (scripts/dev/make_chat_goldens.py), refusals
 *    (raise_exception) included;
 *  - error values: unsupported constructs with their line, syntax errors,
 *    the caps on depth, steps, output and memory;
 *  - no crash on any prefix of every template. */
#include "testing.h"
#include "jinja/jinja.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define CHAT "tests/data/chat/"

static const char *const GOLDENS[] = {"qwen3",        "qwen2.5", "llama3",     "llama3.2",
                                      "mistral_v0.1", "smollm2", "deepseek_v3"};

/* Renders src with vars (a JSON text, NULL for none). */
static wna16_status render(const char *src, const char *vars_json, char **out, wna16_diag *d) {
    json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : NULL;
    memset(d, 0, sizeof *d);
    wna16_status s = wna16_jinja_render(d, src, vars, out);
    json_decref(vars);
    return s;
}

#define EXPECT_RENDER(src, vars, want)                                                             \
    do {                                                                                           \
        wna16_diag d_;                                                                             \
        char *out_ = NULL;                                                                         \
        wna16_status s_ = render(src, vars, &out_, &d_);                                           \
        CHECK_MSG(s_ == WNA16_OK && !strcmp(out_, want), "%s -> %s / %s", src,                     \
                  out_ ? out_ : "(null)", d_.detail);                                              \
        wna16_free(out_);                                                                          \
    } while (0)

#define EXPECT_FAIL(src, vars, want, substr)                                                       \
    do {                                                                                           \
        wna16_diag d_;                                                                             \
        char *out_ = (char *)1;                                                                    \
        wna16_status s_ = render(src, vars, &out_, &d_);                                           \
        CHECK_MSG(s_ == (want) && out_ == NULL && strstr(d_.detail, substr),                       \
                  "%.60s -> %s \"%s\" (want %s \"%s\")", src, wna16_status_str(s_), d_.detail,     \
                  wna16_status_str(want), substr);                                                 \
    } while (0)

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

static void test_semantics(void) {
    /* whitespace: trim_blocks, lstrip_blocks, '-' and '+' */
    EXPECT_RENDER("  {% if true %}\nx\n  {% endif %}\ny", NULL, "x\ny");
    EXPECT_RENDER("a  {%- if true -%}  b  {%- endif -%}  c", NULL, "abc");
    EXPECT_RENDER("  {%+ if true %}x{% endif %}", NULL, "  x");
    EXPECT_RENDER("{# c #}\nx{#- c -#}  y", NULL, "xy");
    EXPECT_RENDER("{{ 'a' }}\n", NULL, "a"); /* the trailing newline goes */
    EXPECT_RENDER("{{ \"{{ not a tag }}\" ~ '%}' }}", NULL, "{{ not a tag }}%}");
    /* scoping: a loop body's sets do not survive it; namespaces do */
    EXPECT_RENDER("{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}"
                  "[{{ x }}]",
                  NULL, "0102[0]");
    EXPECT_RENDER("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
                  "{% endfor %}{{ ns.n }}",
                  NULL, "6");
    EXPECT_RENDER("{% for m in ms %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.first }}"
                  "{{ loop.last }}{{ loop.length }};{% endfor %}",
                  "{\"ms\": [1, 2]}", "11TrueFalse2;20FalseTrue2;");
    EXPECT_RENDER("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT_RENDER("{% for x in 'abc' if x != 'b' %}{{ loop.index }}{{ x }}{% endfor %}", NULL,
                  "1a2c");
    EXPECT_RENDER("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                  "{\"d\": {\"b\": 2, \"a\": 1}}", "b=2;a=1;");
    EXPECT_RENDER("{% macro f(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}",
                  NULL, "<1B><12>");
    EXPECT_RENDER("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}"
                  "{% continue %}{% endif %}{{ i }}{% endfor %}",
                  NULL, "02");
    /* undefined: empty, falsy, not defined; its attribute is an error, as in jinja2 */
    EXPECT_RENDER("[{{ nope }}]{{ nope is defined }}{{ nope|length }}{{ nope|default('d') }}", NULL,
                  "[]False0d");
    EXPECT_RENDER("{{ m.nope is defined }}{{ m['nope'] }}", "{\"m\": {}}", "False");
    /* expressions */
    EXPECT_RENDER("{{ s[::-1] }} {{ s[1:] }} {{ s[-2:] }} {{ s[:-1] }} {{ 'é€😀'[1] }}",
                  "{\"s\": \"abcd\"}", "dcba bcd cd abc €");
    EXPECT_RENDER(
        "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 0.1 + 0.2 }}"
        " {{ 1e16 }} {{ 1e-5 }}",
        NULL, "3 -4 2 3.5 1024 0.30000000000000004 1e+16 1e-05");
    EXPECT_RENDER("{{ 'a' in 'cat' }}{{ 2 not in [1, 2] }}{{ 1 < 2 < 3 }}{{ 'x' if 0 else 'y' }}"
                  "{{ none }}{{ true }}",
                  NULL, "TrueFalseTrueyNoneTrue");
    EXPECT_RENDER("{{ [1, 'a', none, (2,)] }}{{ {'k': [1.5]} }}", NULL,
                  "[1, 'a', None, (2,)]{'k': [1.5]}");
    /* filters and methods */
    EXPECT_RENDER("{{ '  x '|trim }}|{{ 'hello world-x'|title }}|{{ 'they\\'re'.title() }}|"
                  "{{ 'ß'|upper }}|{{ 'aBc'|capitalize }}",
                  NULL, "x|Hello World-X|They'Re|SS|Abc");
    EXPECT_RENDER("{{ d|tojson }} {{ d|tojson(indent=2) }} {{ 'é\"\\n'|tojson }}",
                  "{\"d\": {\"b\": [1, null], \"a\": true}}",
                  "{\"b\": [1, null], \"a\": true} {\n  \"b\": [\n    1,\n    null\n  ],\n  "
                  "\"a\": true\n} \"é\\\"\\n\"");
    EXPECT_RENDER("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join(',') }}"
                  "{{ ms|rejectattr('role', 'eq', 'user')|list|length }}"
                  "{{ ms|map(attribute='role')|unique|list }}",
                  "{\"ms\": [{\"role\": \"user\", \"c\": 1}, {\"role\": \"bot\", \"c\": 2}, "
                  "{\"role\": \"user\", \"c\": 3}]}",
                  "1,31['user', 'bot']");
    EXPECT_RENDER("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'xxaxx'.strip('x') }}"
                  "{{ 'a-b'.replace('-', '+') }}{{ 'Hi'.startswith(('x', 'H')) }}",
                  NULL, "['a', 'b', '', 'c']['a', 'b']aa+bTrue");
    EXPECT_RENDER("{{ d.get('a') }}{{ d.get('z', 0) }}{{ d.keys()|list }}{{ d|items|list }}",
                  "{\"d\": {\"a\": 1}}", "10['a'][('a', 1)]");
    EXPECT_RENDER("{{ [3, 1, 2]|sort }}{{ [3, 1, 2]|sort(reverse=true)|first }}{{ 'ab'|reverse }}"
                  "{{ '42'|int + 1 }}{{ 'x'|int }}{{ 3|string ~ 'x' }}",
                  NULL,
                  "[1, 2, 3]3ba430"
                  "3x");
    EXPECT_RENDER("{{ strftime_now('%d %b %Y') }}", NULL, "26 Jul 2024");
}

static void test_errors(void) {
    EXPECT_FAIL("line one\n{{ x | xyz }}", NULL, WNA16_ERR_UNSUPPORTED,
                "chat template line 2: filter \"xyz\" is not supported");
    EXPECT_FAIL("{% raw %}x{% endraw %}", NULL, WNA16_ERR_UNSUPPORTED,
                "tag \"raw\" is not supported");
    EXPECT_FAIL("{{ x is odd2 }}", NULL, WNA16_ERR_UNSUPPORTED, "test \"odd2\" is not supported");
    EXPECT_FAIL("{{ '%s' % 1 }}", NULL, WNA16_ERR_UNSUPPORTED, "formatting");
    EXPECT_FAIL("\n\n{{ raise_exception('Conversation roles must alternate') }}", NULL,
                WNA16_ERR_INVALID_ARGUMENT,
                "line 3: the template raised an error: Conversation roles must alternate");
    EXPECT_FAIL("{{ x", NULL, WNA16_ERR_INVALID_ARGUMENT, "line 1: unterminated {{ ... }} tag");
    EXPECT_FAIL("a\n{% if x", NULL, WNA16_ERR_INVALID_ARGUMENT, "line 2: unterminated {% ... %}");
    EXPECT_FAIL("{# never closed", NULL, WNA16_ERR_INVALID_ARGUMENT, "unterminated {# ... #}");
    EXPECT_FAIL("{% if x %}body", NULL, WNA16_ERR_INVALID_ARGUMENT, "expected '{% endif %}'");
    EXPECT_FAIL("{% endfor %}", NULL, WNA16_ERR_INVALID_ARGUMENT, "unexpected '{% endfor %}'");
    EXPECT_FAIL("{{ 'abc }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "unterminated string");
    EXPECT_FAIL("{{ (1 }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "unbalanced");
    EXPECT_FAIL("{{ (1 + }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "unbalanced");
    EXPECT_FAIL("{{ 1 + }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "syntax error: expected an expression");
    EXPECT_FAIL("{{ x.y }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "'x' is undefined");
    EXPECT_FAIL("{{ 'a' + 1 }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "unsupported operand types");
    EXPECT_FAIL("{{ 1 // 0 }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "division by zero");
    EXPECT_FAIL("{% break %}", NULL, WNA16_ERR_INVALID_ARGUMENT, "outside of a loop");
    EXPECT_FAIL("{% set x.y = 1 %}", NULL, WNA16_ERR_INVALID_ARGUMENT, "non-namespace");
}

static char *repeat(const char *unit, size_t times, const char *middle, const char *tail) {
    size_t u = strlen(unit), t = strlen(tail), m = strlen(middle);
    char *s = malloc(u * times * 2 + m + t + 1);
    size_t k = 0;
    for (size_t i = 0; i < times; i++) memcpy(s + k, unit, u), k += u;
    memcpy(s + k, middle, m), k += m;
    for (size_t i = 0; i < times; i++) memcpy(s + k, tail, t), k += t;
    s[k] = 0;
    return s;
}

static void test_limits(void) {
    char *deep = repeat("(", 100000, "1", ")");
    char *tpl = malloc(strlen(deep) + 16);
    sprintf(tpl, "{{ %s }}", deep);
    EXPECT_FAIL(tpl, NULL, WNA16_ERR_LIMIT, "nested deeper than");
    free(tpl), free(deep);
    deep = repeat("{% if true %}", 5000, "x", "{% endif %}");
    EXPECT_FAIL(deep, NULL, WNA16_ERR_LIMIT, "nested deeper than");
    free(deep);
    deep = repeat("1 + ", 100000, "1", "");
    tpl = malloc(strlen(deep) + 16);
    sprintf(tpl, "{{ %s }}", deep);
    EXPECT_FAIL(tpl, NULL, WNA16_ERR_LIMIT, "deeper than");
    free(tpl), free(deep);
    EXPECT_FAIL("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, WNA16_ERR_LIMIT,
                "deeper than");
    EXPECT_FAIL("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}"
                "{% endfor %}",
                NULL, WNA16_ERR_LIMIT, "steps");
    EXPECT_FAIL("{{ range(1000000000)|length }}", NULL, WNA16_ERR_LIMIT, "range of more than");
    EXPECT_FAIL("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", NULL, WNA16_ERR_LIMIT,
                "over 16 MiB");
    EXPECT_FAIL("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}"
                "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                NULL, WNA16_ERR_LIMIT, "MiB");
    EXPECT_FAIL("{{ 'x' * 100000000 }}", NULL, WNA16_ERR_LIMIT, "repetition");
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

int main(void) {
    test_goldens();
    test_semantics();
    test_errors();
    test_limits();
    test_prefixes();
    TEST_MAIN_END();
}
