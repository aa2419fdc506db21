/* Fuzz target: the Jinja subset interpreter (src/jinja/jinja.h) with
 * fuzzed variables as well as a fuzzed template. The input is the template
 * up to its first NUL, then the variables as JSON text (an object; text
 * that does not parse as one renders with no variables). Every outcome must
 * be OK with text, or a refusal with a detail and one of the statuses
 * jinja.h documents; output stays under the 16 MiB cap; a template that is
 * valid UTF-8 renders valid UTF-8 (jansson gives only valid strings); and a
 * second render of the same input gives the same status and bytes (no state
 * survives a render). The steps budget bounds each input's time. */
#include "fuzz_common.h"

#include "core/utf8.h"
#include "jinja/jinja.h"

static wna16_status render(const char *src, const json_t *vars, char **out, wna16_diag *d) {
    memset(d, 0, sizeof *d);
    *out = (char *)1;
    wna16_status s = wna16_jinja_render(d, src, vars, out);
    FUZZ_CHECK(s == WNA16_OK ? *out != NULL : *out == NULL && d->detail[0] != 0);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    setenv("WNA16_CHAT_NOW", "1721995200", 1);
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    size_t srcn = strlen(src);
    json_t *vars = NULL;
    if (srcn < size) {
        vars = json_loadb(src + srcn + 1, size - srcn - 1, JSON_DECODE_ANY, NULL);
        if (vars && !json_is_object(vars)) json_decref(vars), vars = NULL;
    }
    wna16_diag d, d2;
    char *out, *again;
    wna16_status s = render(src, vars, &out, &d);
    fuzz_note(wna16_status_str(s), s);
    if (s == WNA16_OK) {
        size_t n = strlen(out);
        FUZZ_CHECK(n <= JINJA_MAX_OUTPUT);
        if (wna16_utf8_check((const uint8_t *)src, srcn) == srcn)
            FUZZ_CHECK(wna16_utf8_check((const uint8_t *)out, n) == n);
    } else {
        FUZZ_CHECK(s == WNA16_ERR_INVALID_ARGUMENT || s == WNA16_ERR_UNSUPPORTED ||
                   s == WNA16_ERR_LIMIT || s == WNA16_ERR_OUT_OF_MEMORY);
    }
    wna16_status s2 = render(src, vars, &again, &d2);
    FUZZ_CHECK(s2 == s);
    if (s == WNA16_OK) FUZZ_CHECK(!strcmp(out, again));
    else if (s != WNA16_ERR_OUT_OF_MEMORY) FUZZ_CHECK(!strcmp(d.detail, d2.detail));
    if (s == WNA16_OK) wna16_free(out), wna16_free(again);
    json_decref(vars);
    free(src);
    return 0;
}
