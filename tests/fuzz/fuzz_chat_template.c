/* Fuzz target (g): chat template text through the Jinja interpreter
 * (src/tokenizer/jinja.h), rendered with a small fixed conversation. The
 * whole input is the template (up to its first NUL). Every outcome must be
 * OK with text, or a refusal with a detail and one of the statuses jinja.h
 * documents; output stays under the 16 MiB cap; and a template that is
 * valid UTF-8 renders valid UTF-8 (slices, strips and escapes never cut a
 * character). The steps budget bounds each input's time. */
#include "fuzz_common.h"

#include "jinja/jinja.h"
#include "core/utf8.h"

static json_t *vars;

static void vars_once(void) {
    if (vars) return;
    vars = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                      "{\"role\": \"user\", \"content\": \"Hi {{ x }} \\u00e9\\ud83d\\ude00\\n\"}, "
                      "{\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nYo\"}], "
                      "\"add_generation_prompt\": true, \"enable_thinking\": false, "
                      "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"tools\": null, "
                      "\"documents\": null}",
                      0, NULL);
    FUZZ_CHECK(vars != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    vars_once();
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    setenv("WNA16_CHAT_NOW", "1721995200", 1);
    wna16_diag d = {0};
    char *out = (char *)1;
    wna16_status s = wna16_jinja_render(&d, src, vars, &out);
    fuzz_note(wna16_status_str(s), s);
    if (s == WNA16_OK) {
        FUZZ_CHECK(out != NULL);
        size_t n = strlen(out);
        FUZZ_CHECK(n <= JINJA_MAX_OUTPUT);
        size_t srcn = strlen(src);
        if (wna16_utf8_check((const uint8_t *)src, srcn) == srcn)
            FUZZ_CHECK(wna16_utf8_check((const uint8_t *)out, n) == n);
        wna16_free(out);
    } else {
        FUZZ_CHECK(out == NULL);
        FUZZ_CHECK(d.detail[0] != 0);
        FUZZ_CHECK(s == WNA16_ERR_INVALID_ARGUMENT || s == WNA16_ERR_UNSUPPORTED ||
                   s == WNA16_ERR_LIMIT || s == WNA16_ERR_OUT_OF_MEMORY);
    }
    free(src);
    return 0;
}
