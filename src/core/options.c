/* Options structs that can grow (include/wna16.h: struct_size): the one
 * place that reads a caller's struct by the size it declares, and the
 * _init functions that set it. */
#include "core/common.h"

#include <string.h>

wna16_status wna16_options_take(wna16_diag *d, const char *what, void *dst, size_t lib_size,
                                const void *src) {
    memset(dst, 0, lib_size);
    if (!src) {
        memcpy(dst, &lib_size, sizeof lib_size);
        return WNA16_OK;
    }
    size_t n;
    memcpy(&n, src, sizeof n); /* struct_size is every options struct's first member */
    if (n == 0) n = lib_size;
    if (n < sizeof n || n > lib_size)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "%s: struct_size %zu, but this libwna16 (%s) knows %zu bytes: %s", what,
                          n, wna16_version(), lib_size,
                          n > lib_size ? "the program was compiled against a newer wna16.h than "
                                         "the library it runs with; install the matching library"
                                       : "set it with the struct's _init function");
    memcpy(dst, src, n);
    memcpy(dst, &lib_size, sizeof lib_size);
    return WNA16_OK;
}

void wna16_model_options_init(wna16_model_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

void wna16_sampler_options_init(wna16_sampler_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->top_p = 1.0f;
    o->top_k = -1;
    o->repetition_penalty = 1.0f;
}

void wna16_generate_options_init(wna16_generate_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->max_tokens = 16;
    wna16_sampler_options_init(&o->sampler);
}
