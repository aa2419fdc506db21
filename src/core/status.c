#include "core/common.h"

#include <stdio.h>
#include <string.h>

#define WNA16_STR_(x) #x
#define WNA16_STR(x) WNA16_STR_(x)
/* From the header's numbers, the one place the version is written. */
const char *wna16_version(void) {
    return WNA16_STR(WNA16_VERSION_MAJOR) "." WNA16_STR(WNA16_VERSION_MINOR) "." WNA16_STR(
        WNA16_VERSION_PATCH);
}

int wna16_version_number(void) {
    return WNA16_VERSION_MAJOR * 10000 + WNA16_VERSION_MINOR * 100 + WNA16_VERSION_PATCH;
}

#define NAME(x) [WNA16_##x] = #x
static const char *const status_names[] = {
    NAME(OK),
    NAME(ERR_INVALID_ARGUMENT),
    NAME(ERR_OUT_OF_MEMORY),
    NAME(ERR_IO),
    NAME(ERR_UNSUPPORTED),
    NAME(ERR_INTERNAL),
    NAME(ERR_LIMIT),
    NAME(ERR_ABORTED),
    NAME(ERR_UNAVAILABLE),
    NAME(ERR_HEADER_TOO_SMALL),
    NAME(ERR_HEADER_TOO_LARGE),
    NAME(ERR_INVALID_HEADER_LENGTH),
    NAME(ERR_INVALID_HEADER),
    NAME(ERR_INVALID_HEADER_DESERIALIZATION),
    NAME(ERR_DUPLICATE_KEY),
    NAME(ERR_UNKNOWN_DTYPE),
    NAME(ERR_INVALID_OFFSET),
    NAME(ERR_VALIDATION_OVERFLOW),
    NAME(ERR_MISALIGNED_SLICE),
    NAME(ERR_TENSOR_INVALID_INFO),
    NAME(ERR_METADATA_INCOMPLETE_BUFFER),
    NAME(ERR_TENSOR_NOT_FOUND),
    NAME(ERR_INDEX_INVALID),
    NAME(ERR_SHARD_MISSING),
    NAME(ERR_PATH_UNSAFE),
    NAME(ERR_INDEX_MISMATCH),
    NAME(ERR_CONFIG_INVALID),
    NAME(ERR_QUANT_CONFIG_INVALID),
    NAME(ERR_RUNTIME_ACTORDER),
    NAME(ERR_SHAPE_MISMATCH),
    NAME(ERR_TENSOR_MISSING),
    NAME(ERR_GROUP_SIZE),
    NAME(ERR_UNSUPPORTED_BITS),
    NAME(ERR_UNSUPPORTED_SCHEME),
    NAME(ERR_BAD_SCALE),
    NAME(ERR_BAD_ZERO_POINT),
    NAME(ERR_BAD_DTYPE),
    NAME(ERR_TP_INDIVISIBLE),
    NAME(ERR_TOKENIZER_INVALID),
    NAME(ERR_TOKENIZER_REGEX),
    NAME(ERR_INVALID_UTF8),
    NAME(ERR_TOKEN_ID),
    NAME(ERR_CONTEXT_OVERFLOW),
    NAME(ERR_EXPERT_ID),
    NAME(ERR_COMM),
    NAME(ERR_PEER_FAILED),
};
#undef NAME

const char *wna16_status_str(wna16_status s) {
    size_t i = (size_t)s;
    if (i < sizeof status_names / sizeof status_names[0] && status_names[i])
        return status_names[i];
    return "UNKNOWN_STATUS";
}

wna16_status wna16_fail(wna16_diag *d, wna16_status status, const char *fmt, ...) {
    if (d) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->detail, sizeof d->detail, fmt, ap);
        va_end(ap);
    }
    return status;
}

wna16_status wna16_ctx_set_error(wna16_ctx *ctx, wna16_status status, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->diag.detail, sizeof ctx->diag.detail, fmt, ap);
        va_end(ap);
    }
    return status;
}

void wna16_diag_prefix(wna16_diag *d, const char *fmt, ...) {
    if (!d) return;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t plen = strlen(prefix), olen = strlen(d->detail);
    if (plen >= sizeof d->detail) plen = sizeof d->detail - 1;
    if (plen + olen >= sizeof d->detail) olen = sizeof d->detail - 1 - plen;
    memmove(d->detail + plen, d->detail, olen);
    memcpy(d->detail, prefix, plen);
    d->detail[plen + olen] = '\0';
}

void wna16_diag_clear(wna16_diag *d) {
    if (d) d->detail[0] = '\0';
}

wna16_status wna16_ctx_create(wna16_ctx **out) {
    if (!out) return WNA16_ERR_INVALID_ARGUMENT;
    *out = wna16_calloc(1, sizeof **out);
    if (!*out) return WNA16_ERR_OUT_OF_MEMORY;
    (*out)->diag.hooks = &(*out)->hooks;
    (*out)->tuning = WNA16_TUNING_DEFAULT;
    (*out)->hooks.tuning = &(*out)->tuning;
    return WNA16_OK;
}

const wna16_tuning *wna16_tuning_of(const wna16_diag *d) {
    static const wna16_tuning defaults = WNA16_TUNING_DEFAULT;
    return d && d->hooks && d->hooks->tuning ? d->hooks->tuning : &defaults;
}

void wna16_ctx_set_log(wna16_ctx *ctx, wna16_log_fn fn, void *user, wna16_log_level max_level) {
    if (!ctx) return;
    ctx->hooks.log = fn;
    ctx->hooks.log_user = user;
    ctx->hooks.log_level = max_level;
}

void wna16_ctx_set_progress(wna16_ctx *ctx, wna16_progress_fn fn, void *user) {
    if (!ctx) return;
    ctx->hooks.progress = fn;
    ctx->hooks.progress_user = user;
}

void wna16_ctx_set_abort(wna16_ctx *ctx, wna16_abort_fn fn, void *user) {
    if (!ctx) return;
    ctx->hooks.abort = fn;
    ctx->hooks.abort_user = user;
}

/* Set once by the embedding program before it starts threads. */
static wna16_hooks process_hooks;

void wna16_set_log(wna16_log_fn fn, void *user, wna16_log_level max_level) {
    process_hooks.log = fn;
    process_hooks.log_user = user;
    process_hooks.log_level = max_level;
}

void wna16_log(const wna16_diag *d, wna16_log_level level, const char *fmt, ...) {
    const wna16_hooks *h = d && d->hooks && d->hooks->log ? d->hooks : &process_hooks;
    if (!h->log || level > h->log_level) return;
    char text[WNA16_DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    h->log(h->log_user, level, text);
}

void wna16_progress(const wna16_diag *d, const char *what, double done, double total) {
    if (d && d->hooks && d->hooks->progress)
        d->hooks->progress(d->hooks->progress_user, what, done, total);
}

wna16_status wna16_check_abort(wna16_diag *d, const char *what) {
    if (!d || !d->hooks || !d->hooks->abort || !d->hooks->abort(d->hooks->abort_user))
        return WNA16_OK;
    return wna16_fail(d, WNA16_ERR_ABORTED, "%s: stopped by the abort callback", what);
}

void wna16_ctx_free(wna16_ctx *ctx) { wna16_free(ctx); }

const char *wna16_ctx_error(const wna16_ctx *ctx) { return ctx ? ctx->diag.detail : ""; }
