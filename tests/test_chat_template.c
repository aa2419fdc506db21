/* Real chat templates through the Jinja interpreter (src/jinja/jinja.h):
 *  - byte equality with transformers' apply_chat_template over the goldens
 *    in tests/data/chat/NAME.json (scripts/dev/make_chat_goldens.py), refusals
 *    (raise_exception) included;
 *  - no crash on any prefix of every template.
 * The interpreter's own features, errors and limits: tests/test_jinja.c. */
#include "testing.h"
#include "jinja/jinja.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define CHAT "tests/data/chat/"

static const char *const GOLDENS[] = {"qwen3",        "qwen2.5", "llama3",     "llama3.2",
                                      "mistral_v0.1", "smollm2", "deepseek_v3"};

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
    test_prefixes();
    TEST_MAIN_END();
}
