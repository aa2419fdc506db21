/* The Jinja subset interpreter (src/jinja/jinja.h) on its own: the
 * features chat templates use, every kind of error with its status and
 * message (syntax, runtime, outside the subset), and the caps on depth,
 * steps, output and memory. Real templates against transformers:
 * tests/test_chat_template.c. */
#include "jinja/jinja.h"
#include "testing.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

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

/* What chat templates use beyond test_semantics' basics. */
static void test_features(void) {
    /* tests */
    EXPECT_RENDER("{{ 3 is odd }}{{ 4 is even }}{{ 6 is divisibleby 3 }}{{ none is none }}"
                  "{{ 'a' is string }}{{ 1 is number }}{{ [1] is iterable }}{{ {} is mapping }}"
                  "{{ 'AB' is upper }}{{ 'ab' is lower }}{{ [] is sequence }}",
                  NULL, "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
    EXPECT_RENDER("{{ 2 is eq 2 }}{{ 2 is ne 3 }}{{ 2 is lt 3 }}{{ 2 is ge 2 }}{{ x is undefined }}"
                  "{{ true is boolean }}{{ none is not none }}",
                  NULL, "TrueTrueTrueTrueTrueTrueFalse");
    /* loop variables and helpers */
    EXPECT_RENDER("{% for i in 'abc' %}{{ loop.index0 }}{{ loop.revindex }}"
                  "{{ loop.previtem|default('-') }}{{ loop.nextitem|default('-') }}"
                  "{{ loop.cycle('x', 'y') }};{% endfor %}",
                  NULL, "03-bx;12acy;21b-x;");
    EXPECT_RENDER("{% for a in [1] %}{% for b in [2] %}{{ loop.depth }}{{ loop.depth0 }}"
                  "{% endfor %}{% endfor %}",
                  NULL, "10"); /* depth counts recursive loops only, as in jinja2 */
    /* unpacking, tuples and dict literals */
    EXPECT_RENDER("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }},{% endfor %}"
                  "{% set x, y = 5, 6 %}{{ x * y }}",
                  NULL, "3,7,30");
    EXPECT_RENDER("{{ dict(a=1)['a'] }}{{ {'b': 1, 'a': 2}['a'] }}", NULL, "12");
    /* block set and the generation block */
    EXPECT_RENDER("{% set t %}<{{ 1 + 1 }}>{% endset %}{{ t|length }}{{ t }}", NULL, "3<2>");
    EXPECT_RENDER("{% generation %}kept{% endgeneration %}", NULL, "kept");
    /* string escapes and numbers */
    EXPECT_RENDER("{{ '\\u00e9\\x41\\n'|length }}", NULL, "3");
    EXPECT_RENDER("{{ 1.0 }} {{ 10 / 4 }} {{ 2 ** -1 }} {{ 7 % 2.5 }} {{ 1e300 * 1e300 }}", NULL,
                  "1.0 2.5 0.5 2.0 inf");
    /* more filters and methods */
    EXPECT_RENDER("{{ [1, 2, 3]|select('odd')|list }}{{ [1, 2, 3]|reject('odd')|list }}"
                  "{{ [-1]|map('abs')|list }}{{ 'x'|center(3) if false else 'ok' }}",
                  NULL, "[1, 3][2][1]ok");
    EXPECT_RENDER(
        "{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|{{ 'AbC'.lower() }}|{{ 'ab'.upper() }}|"
        "{{ 'a b'.capitalize() }}|{{ 'ab'.endswith('b') }}",
        NULL, "x | x|abc|AB|A b|True");
    EXPECT_RENDER("{{ d.items()|list }}{{ d.values()|list }}{{ d|length }}{{ 'b' in d }}",
                  "{\"d\": {\"a\": 1, \"b\": [2]}}", "[('a', 1), ('b', [2])][1, [2]]2True");
    EXPECT_RENDER("{{ '%.2f'|format(1) if false else 'skip' }}{{ [1, 2]|first }}{{ [1, 2]|last }}"
                  "{{ '1.5'|float + 1 }}{{ [3, 1]|min if false else 'm' }}",
                  NULL, "skip122.5m");
    EXPECT_RENDER("{{ x|tojson(separators=(',', ':')) }}{{ x|tojson(sort_keys=true) }}",
                  "{\"x\": {\"b\": 1, \"a\": [true, null, 1.5]}}",
                  "{\"b\":1,\"a\":[true,null,1.5]}{\"a\": [true, null, 1.5], \"b\": 1}");
    EXPECT_RENDER("{{ 'x'|tojson(indent='\\t') }}{{ [1]|tojson(indent=1) }}", NULL,
                  "\"x\"[\n 1\n]");
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
    EXPECT_FAIL("{% set () = 1 %}", NULL, WNA16_ERR_INVALID_ARGUMENT, "a name to assign to");
    EXPECT_FAIL("{% for () in x %}{% endfor %}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "a name to assign to");
}

/* Runtime errors Jinja would raise too, and the rest of the subset's
 * refusals: each with its status and message. */
static void test_runtime_errors(void) {
    EXPECT_FAIL("{% set x = 1 %}{{ x() }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "line 1: 'int' object is not callable");
    EXPECT_FAIL("{% for i in 1 %}{% endfor %}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "'int' object is not iterable");
    EXPECT_RENDER("[{{ 1[0] }}]", NULL, "[]"); /* an item of a number: undefined, as in jinja2 */
    EXPECT_FAIL("{{ 1[0:1] }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "'int' object is not subscriptable");
    EXPECT_FAIL("{{ 1 in 2 }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "argument of type 'int' is not iterable");
    EXPECT_FAIL("{{ 'a'|abs }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "bad operand type for abs(): 'str'");
    EXPECT_FAIL("{{ -'a' }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "bad operand type for unary -: 'str'");
    EXPECT_FAIL("{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "cannot unpack 3 values into 2 names");
    EXPECT_FAIL("{{ 3 is divisibleby 0 }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "divisibleby needs non-zero integers");
    EXPECT_FAIL("{{ 1|items }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "expected a mapping, not int");
    EXPECT_FAIL("{{ {}.get() }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "get needs a key");
    EXPECT_FAIL("{% for i in [1] %}{{ loop.cycle() }}{% endfor %}", NULL,
                WNA16_ERR_INVALID_ARGUMENT, "loop.cycle needs arguments");
    EXPECT_FAIL("{{ [1]|map }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "map needs attribute= or a filter name");
    EXPECT_FAIL("{{ namespace(1) }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "namespace/dict take keyword arguments");
    EXPECT_FAIL("{{ 1|length }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "object of type 'int' has no len()");
    EXPECT_FAIL("{{ 'a' is odd }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "odd/even need an integer");
    EXPECT_FAIL("{{ range() }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "range takes 1 to 3 integers");
    EXPECT_FAIL("{{ range(1, 2, 0) }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "range() arg 3 must not be zero");
    EXPECT_FAIL("{{ 'a'|replace('a') }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "replace needs old and new");
    EXPECT_FAIL("{{ 'a'.replace(1, 2) }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "replace needs two strings");
    EXPECT_FAIL("{{ []|selectattr }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "selectattr/rejectattr need an attribute name");
    EXPECT_FAIL("{{ 'ab'[::0] }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "slice step cannot be zero");
    EXPECT_FAIL("{{ 'a'.split('') }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "split: empty separator");
    EXPECT_FAIL("{{ 'a'.split(1) }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "split expects a string, not int");
    EXPECT_FAIL("{{ strftime_now() }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "strftime_now needs a format string");
    EXPECT_FAIL("{{ 1 is eq }}", NULL, WNA16_ERR_INVALID_ARGUMENT, "test \"eq\" needs an argument");
    EXPECT_FAIL("{{ 'a'.startswith() }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "startswith needs an argument");
    EXPECT_FAIL("{{ 1|tojson(indent=1.5) }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "tojson: indent must be an int or a string");
    EXPECT_FAIL("{{ 1|tojson(separators=1) }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "tojson: separators must be two strings");
    EXPECT_FAIL("{% macro m() %}{% endmacro %}{{ m|tojson }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "is not JSON serializable");
    /* outside the subset */
    EXPECT_FAIL("{{ 9223372036854775807 + 1 }}", NULL, WNA16_ERR_UNSUPPORTED,
                "integer arithmetic beyond 64 bits");
    EXPECT_FAIL("{{ 99999999999999999999 }}", NULL, WNA16_ERR_UNSUPPORTED,
                "line 1: integer literal beyond 64 bits");
    EXPECT_FAIL("{% for i in [1] %}{{ loop.changed(i) }}{% endfor %}", NULL, WNA16_ERR_UNSUPPORTED,
                "loop.changed is not supported");
    EXPECT_FAIL("{{ 'a'.zfill(3) }}", NULL, WNA16_ERR_UNSUPPORTED,
                "method \"zfill\" of a str is not supported");
    EXPECT_FAIL("{{ 'x'|tojson(ensure_ascii=true) }}", NULL, WNA16_ERR_UNSUPPORTED,
                "tojson(ensure_ascii=true) is not supported");
    EXPECT_FAIL("{{ '\\N{DASH}' }}", NULL, WNA16_ERR_UNSUPPORTED,
                "\\N{...} string escapes are not supported");
    EXPECT_FAIL("{{ '\\ud800' }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "string escape is not a Unicode scalar value");
    EXPECT_FAIL("{{ '\\x4' }}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "truncated \\x, \\u or \\U escape");
    EXPECT_FAIL("{% if %}{% endif %}", NULL, WNA16_ERR_INVALID_ARGUMENT,
                "syntax error: expected an expression");
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

/* Limits the goldens never reach: values nested past 64 levels, and
 * builtins that would build more than the output cap. */
static void test_value_limits(void) {
    char *deep = repeat("[", 70, "1", "]");
    char vars[512];
    snprintf(vars, sizeof vars, "{\"x\": %s}", deep);
    EXPECT_FAIL("{{ x }}", vars, WNA16_ERR_LIMIT, "chat template variables nested deeper than 64");
    char *tpl = malloc(strlen(deep) + 32);
    sprintf(tpl, "{{ %s|tojson }}", deep);
    EXPECT_FAIL(tpl, NULL, WNA16_ERR_LIMIT, "tojson: a value nested deeper than 64");
    sprintf(tpl, "{{ %s }}", deep);
    EXPECT_FAIL(tpl, NULL, WNA16_ERR_LIMIT, "a value nested deeper than 64 levels");
    free(tpl), free(deep);
    EXPECT_FAIL("{{ range(1000000)|join('x' * 20) }}", NULL, WNA16_ERR_LIMIT,
                "join builds more than 16 MiB");
    EXPECT_FAIL("{{ ('x' * 1000000)|replace('x', 'x' * 20) }}", NULL, WNA16_ERR_LIMIT,
                "replace builds more than 16 MiB");
    EXPECT_FAIL("{{ range(1000000)|list|tojson(indent=20) }}", NULL, WNA16_ERR_LIMIT,
                "tojson builds more than 16 MiB");
}

int main(void) {
    setenv("WNA16_CHAT_NOW", "1721995200", 1); /* 26 Jul 2024 */
    test_semantics();
    test_features();
    test_errors();
    test_runtime_errors();
    test_limits();
    test_value_limits();
    TEST_MAIN_END();
}
