/* The public quantize call (include/wna16.h: wna16_quantize_model): the
 * caller's growable options, checked and mapped onto the quantizer's own. */
#include "quant/quant.h"

#include <string.h>

static wna16_status map_scheme(wna16_diag *d, const char *scheme, wna16_quantize_opts *q) {
    if (!scheme || !strcmp(scheme, "W4A16")) q->bits = 4, q->symmetric = true;
    else if (!strcmp(scheme, "W4A16_ASYM")) q->bits = 4, q->symmetric = false;
    else if (!strcmp(scheme, "W8A16")) q->bits = 8, q->symmetric = true;
    else
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "quantize: scheme \"%s\": expected W4A16, W4A16_ASYM or W8A16", scheme);
    return WNA16_OK;
}

static wna16_status map_method(wna16_diag *d, const wna16_quantize_options *o,
                               wna16_quantize_opts *q) {
    if (!o->method || !strcmp(o->method, "gptq")) q->gptq = true;
    else if (!strcmp(o->method, "rtn")) q->gptq = false;
    else
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "quantize: method \"%s\": expected gptq or rtn", o->method);
    if (!o->actorder || !strcmp(o->actorder, "static") || !strcmp(o->actorder, "weight"))
        q->actorder = q->gptq;
    else if (!strcmp(o->actorder, "none")) q->actorder = false;
    else if (!strcmp(o->actorder, "group") || !strcmp(o->actorder, "dynamic"))
        return wna16_fail(d, WNA16_ERR_RUNTIME_ACTORDER, "quantize: actorder \"%s\": %s",
                          o->actorder, WNA16_ACTORDER_FIX);
    else
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "quantize: actorder \"%s\": expected static or none", o->actorder);
    if (!(o->dampening >= 0 && o->dampening < 1))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "quantize: dampening %g: expected a fraction in (0, 1)", o->dampening);
    q->dampening = o->dampening > 0 ? o->dampening : 0.01;
    return WNA16_OK;
}

static wna16_status map_options(wna16_diag *d, const wna16_quantize_options *o,
                                wna16_quantize_opts *q) {
    if (!o->model || !o->output)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "quantize: model and output are required");
    if (o->num_samples < 0 || o->seq_len < 0 || o->threads < 0 || (o->n_ignore && !o->ignore))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "quantize: negative num_samples, seq_len or threads, or n_ignore "
                          "without ignore");
    *q = (wna16_quantize_opts){.src = o->model,
                               .dst = o->output,
                               .group_size = o->group_size ? o->group_size : 128,
                               .calib_ids = o->calib_ids,
                               .calib_text = o->calib_ids ? NULL : o->calib_text,
                               .calib_random = !o->calib_ids && !o->calib_text,
                               .seed = o->seed,
                               .samples = o->num_samples ? o->num_samples : 128,
                               .seq_len = o->seq_len ? o->seq_len : 512,
                               .ignore = o->ignore,
                               .n_ignore = o->n_ignore,
                               .progress = true,
                               .threads = o->threads,
                               .max_shard_bytes = o->max_shard_bytes,
                               .skip_indivisible = o->skip_indivisible};
    WNA16_TRY(map_scheme(d, o->scheme, q));
    WNA16_TRY(map_method(d, o, q));
    if (q->gptq && q->calib_random && !o->calib_random)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "quantize: GPTQ needs calibration data: on random token ids it comes "
                          "out worse than round-to-nearest; pass text in the model's domain "
                          "(--calib FILE.txt), or --method rtn, or --calib-random to calibrate "
                          "on random ids anyway");
    return WNA16_OK;
}

void wna16_quantize_options_init(wna16_quantize_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->scheme = "W4A16";
    o->group_size = 128;
    o->method = "gptq";
    o->actorder = "static";
    o->dampening = 0.01;
    o->num_samples = 128;
    o->seq_len = 512;
}

wna16_status wna16_quantize_model(wna16_ctx *ctx, const wna16_quantize_options *options,
                                  char **report) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (report) *report = NULL;
    if (!options) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "quantize: NULL options");
    wna16_quantize_options o;
    WNA16_TRY(wna16_options_take(d, "quantize options", &o, sizeof o, options));
    wna16_quantize_opts q;
    WNA16_TRY(map_options(d, &o, &q));
    wna16_quantize_report rep;
    wna16_status s = wna16_quantize(d, &q, &rep);
    if (s == WNA16_OK && report) {
        *report = wna16_quantize_report_format(&rep, !o.report_text);
        if (!*report) s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "quantize: the report");
    }
    wna16_quantize_report_free(&rep);
    return s;
}
