/* `wna16 quantize`: a bf16/fp16/fp32 model directory in, a compressed-tensors
 * pack-quantized checkpoint out (RTN or sequential GPTQ). Layer by layer:
 * only one layer's quantized weights and the calibration hidden states are
 * held; unchanged tensors are copied from the mapping. The output is built
 * in DST.tmp-XXXXXX and renamed to DST when complete. docs/quantizer.md. */
#include "core/fs.h"
#include "core/pool.h"
#include "runtime/runtime.h"
#include "quant/quant_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t peak_rss(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

/* ----------------------------------------------------------------- RTN */

static wna16_status rtn_module(qrun *r, const qmodule *qm) {
    float *w;
    WNA16_TRY(wna16_qrun_read_weight(r, qm->m, &w));
    wna16_qspec s = wna16_qrun_spec(r, qm->m);
    wna16_qlinear q;
    wna16_status st = wna16_qlinear_alloc(r->d, &s, qm->m->out, qm->m->in, &q);
    if (st == WNA16_OK) {
        wna16_quant_rtn(w, &q);
        wna16_qrun_record(r, qm->m->name, w, &q, 0);
        st = wna16_qrun_add_qlinear(r, qm->m->name, &q);
    }
    wna16_qlinear_free(&q);
    wna16_free(w);
    return st;
}

/* ----------------------------------------------------------- the driver */

static wna16_status run(qrun *r) {
    const wna16_quantize_opts *o = r->o;
    wna16_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    wna16_status s = wna16_checkpoint_open(&ctx, o->src, &r->ck);
    if (s != WNA16_OK) return wna16_fail(r->d, s, "%s", ctx.diag.detail);
    if (r->ck->qconfig.method != WNA16_QMETHOD_NONE)
        return wna16_fail(r->d, WNA16_ERR_UNSUPPORTED,
                          "%s is already quantized (quantization_config present); quantize the "
                          "original bf16/fp16/fp32 model",
                          o->src);
    if (strcmp(r->ck->text_prefix, "model."))
        return wna16_fail(r->d, WNA16_ERR_UNSUPPORTED,
                          "%s is a multimodal checkpoint (%s); wna16 quantize takes text models "
                          "only: quantize its language model with llm-compressor, or a text-only "
                          "release",
                          o->src, r->ck->config.architecture);
    WNA16_TRY(wna16_qrun_plan(r));
    struct stat sb;
    if (stat(o->dst, &sb) == 0)
        return wna16_fail(r->d, WNA16_ERR_INVALID_ARGUMENT,
                          "%s already exists; remove it or choose another --out", o->dst);
    r->tmpdir = wna16_asprintf("%s.tmp-XXXXXX", o->dst);
    if (!r->tmpdir) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "path");
    if (!mkdtemp(r->tmpdir)) {
        wna16_free(r->tmpdir);
        r->tmpdir = NULL;
        return wna16_fail(r->d, WNA16_ERR_IO, "cannot create %s.tmp-XXXXXX: %s", o->dst,
                          strerror(errno));
    }
    int64_t layers = r->ck->config.num_layers;
    r->rep->layers = layers;
    r->rep->layer_seconds = wna16_calloc((size_t)layers + 1, sizeof(double));
    if (!r->rep->layer_seconds) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "report");
    size_t cap = o->max_shard_bytes ? o->max_shard_bytes : (size_t)2 << 30;
    WNA16_TRY(wna16_qrun_pass_through(r, -1));
    for (size_t i = 0; i < r->n_mods; i++)
        if (r->mods[i].layer < 0 && r->mods[i].quantize) WNA16_TRY(rtn_module(r, &r->mods[i]));
    if (o->gptq) WNA16_TRY(wna16_qrun_gptq_begin(r));
    wna16_qrun_progress(r, 0.0, layers);
    for (int64_t L = 0; L < layers; L++) {
        WNA16_TRY(wna16_qrun_check_abort(r->d));
        double t = wna16_now();
        WNA16_TRY(wna16_qrun_pass_through(r, L));
        if (o->gptq) {
            WNA16_TRY(wna16_qrun_gptq_layer(r, L));
        } else {
            for (size_t i = 0, n = 0; i < r->n_mods; i++)
                if (r->mods[i].layer == L && r->mods[i].quantize) {
                    WNA16_TRY(rtn_module(r, &r->mods[i]));
                    if (++n % 16 == 0) wna16_ck_release_pages(r->ck);
                }
        }
        if (r->pending_bytes >= cap) WNA16_TRY(wna16_qrun_flush_shard(r));
        wna16_ck_release_pages(r->ck); /* the source pages this layer touched */
        r->rep->layer_seconds[L] = wna16_now() - t;
        wna16_qrun_progress(r, (double)(L + 1), layers);
    }
    return wna16_qrun_finish(r);
}

wna16_status wna16_quantize(wna16_diag *d, const wna16_quantize_opts *o,
                            wna16_quantize_report *rep) {
    memset(rep, 0, sizeof *rep);
    if (!o || !o->src || !o->dst)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "quantize: --model and --out are required");
    if ((o->bits != 4 && o->bits != 8))
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_BITS, "quantize: %d bits (4 or 8)", o->bits);
    if (o->group_size != -1 && o->group_size != 32 && o->group_size != 64 && o->group_size != 128)
        return wna16_fail(d, WNA16_ERR_GROUP_SIZE, "quantize: group size %lld (32, 64, 128 or -1)",
                          (long long)o->group_size);
    qrun r;
    memset(&r, 0, sizeof r);
    r.d = d;
    r.o = o;
    r.rep = rep;
    r.t0 = wna16_now();
    r.threads = o->threads > 0 ? o->threads : wna16_threads_default();
    r.gopts = (wna16_gptq_opts){.dampening = o->dampening > 0 ? o->dampening : 0.01,
                                .actorder = o->actorder,
                                .blocksize = 128,
                                .threads = r.threads};
    wna16_status s = run(&r);
    wna16_qrun_gptq_end(&r);
    if (s != WNA16_OK && r.tmpdir) {
        wna16_st_writer_free(r.w);
        r.w = NULL;
        wna16_remove_flat_dir(r.tmpdir);
    }
    wna16_st_writer_free(r.w);
    wna16_owned_free(&r.owned);
    for (size_t i = 0; i < r.n_map; i++) wna16_free(r.map[i].name);
    wna16_free(r.map);
    wna16_free(r.mods);
    wna16_free(r.tmpdir);
    wna16_checkpoint_close(r.ck);
    rep->seconds = wna16_now() - r.t0;
    rep->peak_rss_bytes = peak_rss();
    return s;
}

void wna16_quantize_report_free(wna16_quantize_report *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_ignored; i++) wna16_free(r->ignored[i]);
    wna16_free(r->ignored);
    wna16_free(r->types);
    wna16_free(r->layer_seconds);
    memset(r, 0, sizeof *r);
}

char *wna16_quantize_report_format(const wna16_quantize_report *r, bool json) {
    wna16_buf b = {0};
    double mean = 0;
    for (int64_t L = 0; L < r->layers; L++) mean += r->layer_seconds[L];
    mean = r->layers ? mean / (double)r->layers : 0;
    if (json) {
        wna16_buf_printf(&b,
                         "{\"layers\": %lld, \"modules_quantized\": %lld, \"seconds\": %.3f, "
                         "\"seconds_per_layer\": %.3f, \"peak_rss_bytes\": %zu, \"shards\": %d, "
                         "\"calib_tokens\": %lld, \"types\": [",
                         (long long)r->layers, (long long)r->modules_quantized, r->seconds, mean,
                         r->peak_rss_bytes, r->shards, (long long)r->calib_tokens);
        for (size_t i = 0; i < r->n_types; i++) {
            const wna16_qstat *t = &r->types[i];
            wna16_buf_printf(&b,
                             "%s{\"type\": \"%s\", \"modules\": %lld, \"rel_weight_error\": %.6e, "
                             "\"gptq_loss\": %.6e}",
                             i ? ", " : "", t->type, (long long)t->modules,
                             t->wref > 0 ? t->werr / t->wref : 0, t->loss);
        }
        wna16_buf_printf(&b, "], \"ignored\": [");
        for (size_t i = 0; i < r->n_ignored; i++)
            wna16_buf_printf(&b, "%s\"%s\"", i ? ", " : "", r->ignored[i]);
        wna16_buf_printf(&b, "]}\n");
    } else {
        wna16_buf_printf(&b,
                         "quantized %lld modules in %lld layers: %.1f s (%.2f s/layer), peak RSS "
                         "%.1f MiB, %d shard%s\n",
                         (long long)r->modules_quantized, (long long)r->layers, r->seconds, mean,
                         (double)r->peak_rss_bytes / 1048576.0, r->shards,
                         r->shards == 1 ? "" : "s");
        if (r->calib_tokens)
            wna16_buf_printf(&b, "calibration: %lld tokens\n", (long long)r->calib_tokens);
        wna16_buf_printf(&b, "%-32s %8s %18s %14s\n", "layer type", "modules", "rel. weight error",
                         "GPTQ loss");
        for (size_t i = 0; i < r->n_types; i++) {
            const wna16_qstat *t = &r->types[i];
            wna16_buf_printf(&b, "%-32s %8lld %18.4e %14.4e\n", t->type, (long long)t->modules,
                             t->wref > 0 ? t->werr / t->wref : 0, t->loss);
        }
        wna16_buf_printf(&b, "left unquantized: %zu module%s", r->n_ignored,
                         r->n_ignored == 1 ? "" : "s");
        for (size_t i = 0; i < r->n_ignored && i < 4; i++)
            wna16_buf_printf(&b, "%s%s", i ? ", " : " (", r->ignored[i]);
        wna16_buf_printf(&b, "%s\n", r->n_ignored > 4 ? ", ...)" : r->n_ignored ? ")" : "");
    }
    if (b.failed) {
        wna16_buf_free(&b);
        return NULL;
    }
    return b.data;
}
