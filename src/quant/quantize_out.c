/* The output checkpoint of a quantization run: tensors go to shards in a
 * temporary directory (DST.tmp-XXXXXX), then the shards are named, the
 * index, config.json and the source's other files are written beside them,
 * and the directory is renamed to DST. */
#include "core/fs.h"
#include "io/safetensors.h"
#include "quant/quant_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

wna16_status wna16_qrun_flush_shard(qrun *r) {
    if (!r->w) return WNA16_OK;
    wna16_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    wna16_status s = wna16_st_writer_metadata(&ctx, r->w, "format", "pt");
    char *path = wna16_asprintf("%s/part-%05d.safetensors", r->tmpdir, r->n_shards + 1);
    if (s == WNA16_OK && !path) s = wna16_fail(&ctx.diag, WNA16_ERR_OUT_OF_MEMORY, "path");
    if (s == WNA16_OK) s = wna16_st_writer_write(&ctx, r->w, path);
    wna16_free(path);
    wna16_st_writer_free(r->w);
    r->w = NULL;
    wna16_owned_free(&r->owned);
    r->pending_bytes = 0;
    r->n_shards++;
    if (s != WNA16_OK) return wna16_fail(r->d, s, "%s", ctx.diag.detail);
    return WNA16_OK;
}

static wna16_status add_tensor(qrun *r, const char *name, wna16_dtype dt, int rank,
                               const int64_t *shape, const void *data, size_t nbytes) {
    wna16_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    if (!r->w) WNA16_TRY(wna16_st_writer_create(&ctx, &r->w));
    wna16_status s = wna16_st_writer_add(&ctx, r->w, name, dt, rank, shape, data);
    if (s != WNA16_OK) return wna16_fail(r->d, s, "%s", ctx.diag.detail);
    if (r->n_map == r->cap_map) {
        size_t cap = r->cap_map ? r->cap_map * 2 : 256;
        shard_entry *m = wna16_realloc(r->map, cap * sizeof *m);
        if (!m) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "weight map");
        r->map = m;
        r->cap_map = cap;
    }
    r->map[r->n_map].name = wna16_strdup(name);
    if (!r->map[r->n_map].name) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "weight map");
    r->map[r->n_map++].shard = r->n_shards;
    r->pending_bytes += nbytes;
    r->total_bytes += nbytes;
    return WNA16_OK;
}

wna16_status wna16_qrun_add_qlinear(qrun *r, const char *prefix, const wna16_qlinear *q) {
    wna16_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    if (!r->w) WNA16_TRY(wna16_st_writer_create(&ctx, &r->w));
    size_t before = r->owned.bytes;
    WNA16_TRY(wna16_quant_emit(r->d, r->w, prefix, q, &r->owned));
    static const char *const sfx[] = {"weight_packed", "weight_scale", "weight_shape",
                                      "weight_zero_point"};
    for (int i = 0; i < (q->spec.symmetric ? 3 : 4); i++) {
        if (r->n_map == r->cap_map) {
            size_t cap = r->cap_map ? r->cap_map * 2 : 256;
            shard_entry *m = wna16_realloc(r->map, cap * sizeof *m);
            if (!m) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "weight map");
            r->map = m;
            r->cap_map = cap;
        }
        r->map[r->n_map].name = wna16_asprintf("%s.%s", prefix, sfx[i]);
        if (!r->map[r->n_map].name) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "weight map");
        r->map[r->n_map++].shard = r->n_shards;
    }
    r->pending_bytes += r->owned.bytes - before;
    r->total_bytes += r->owned.bytes - before;
    return WNA16_OK;
}

/* Passes through every tensor of layer L (-1: outside layers) that is not
 * the weight of a module being quantized. */
wna16_status wna16_qrun_pass_through(qrun *r, int64_t L) {
    for (size_t i = 0; i < r->ck->n_tensors; i++) {
        const wna16_tensor_view *v = r->ck->tensors[i];
        if (wna16_quant_layer_of(v->name) != L) continue;
        if (ends_with(v->name, ".weight")) {
            char prefix[512];
            size_t n = strlen(v->name) - 7;
            if (n >= sizeof prefix) n = sizeof prefix - 1;
            memcpy(prefix, v->name, n);
            prefix[n] = 0;
            const qmodule *q = wna16_qrun_find(r, prefix);
            if (q && q->quantize) continue;
        }
        WNA16_TRY(add_tensor(r, v->name, v->dtype, v->rank, v->shape, v->data, v->nbytes));
    }
    return WNA16_OK;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const shard_entry *)a)->name, ((const shard_entry *)b)->name);
}

wna16_status wna16_qrun_finish(qrun *r) {
    const wna16_quantize_opts *o = r->o;
    WNA16_TRY(wna16_qrun_flush_shard(r));
    r->rep->shards = r->n_shards;
    char *from = NULL, *to = NULL;
    for (int i = 1; i <= r->n_shards; i++) {
        from = wna16_asprintf("%s/part-%05d.safetensors", r->tmpdir, i);
        to = r->n_shards == 1
                 ? wna16_asprintf("%s/model.safetensors", r->tmpdir)
                 : wna16_asprintf("%s/model-%05d-of-%05d.safetensors", r->tmpdir, i, r->n_shards);
        int rc = from && to ? rename(from, to) : -1;
        wna16_free(from);
        wna16_free(to);
        if (rc) return wna16_fail(r->d, WNA16_ERR_IO, "renaming shard %d: %s", i, strerror(errno));
    }
    if (r->n_shards > 1) {
        qsort(r->map, r->n_map, sizeof *r->map, cmp_entry);
        json_t *idx = json_object(), *meta = json_object(), *wm = json_object();
        json_object_set_new(meta, "total_size", json_integer((json_int_t)r->total_bytes));
        for (size_t i = 0; i < r->n_map; i++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", r->map[i].shard + 1,
                     r->n_shards);
            json_object_set_new(wm, r->map[i].name, json_string(name));
        }
        json_object_set_new(idx, "metadata", meta);
        json_object_set_new(idx, "weight_map", wm);
        char *text = wna16_pyjson_dumps(idx);
        json_decref(idx);
        char *path = wna16_asprintf("%s/model.safetensors.index.json", r->tmpdir);
        char *nl = text ? wna16_asprintf("%s\n", text) : NULL;
        wna16_status s = text && path && nl ? wna16_write_text(r->d, path, nl)
                                            : wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "index");
        wna16_free(text);
        wna16_free(path);
        wna16_free(nl);
        WNA16_TRY(s);
    }
    /* config.json: the source config plus quantization_config */
    json_t *cfg = json_deep_copy(r->ck->config_json);
    wna16_qspec s = {.bits = o->bits, .symmetric = o->symmetric, .group_size = o->group_size};
    json_object_set_new(cfg, "quantization_config",
                        wna16_quant_config_json(&s, o->gptq && o->actorder,
                                                (const char *const *)r->rep->ignored,
                                                r->rep->n_ignored));
    char *text = wna16_pyjson_dumps(cfg);
    json_decref(cfg);
    char *path = wna16_asprintf("%s/config.json", r->tmpdir);
    wna16_status st = text && path ? wna16_write_text(r->d, path, text)
                                   : wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "config");
    wna16_free(text);
    wna16_free(path);
    WNA16_TRY(st);
    static const char *const extra[] = {
        "generation_config.json",  "tokenizer.json",      "tokenizer_config.json",
        "special_tokens_map.json", "vocab.json",          "merges.txt",
        "tokenizer.model",         "chat_template.jinja", "added_tokens.json",
        "tiktoken.model"};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) {
        char *a = wna16_asprintf("%s/%s", o->src, extra[i]),
             *b = wna16_asprintf("%s/%s", r->tmpdir, extra[i]);
        st = a && b ? wna16_copy_file_if_present(r->d, a, b)
                    : wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "path");
        wna16_free(a);
        wna16_free(b);
        WNA16_TRY(st);
    }
    mode_t mask = umask(0);
    umask(mask);
    chmod(r->tmpdir, 0777 & ~mask); /* mkdtemp made it 0700 */
    if (rename(r->tmpdir, o->dst))
        return wna16_fail(r->d, WNA16_ERR_IO, "renaming %s to %s: %s", r->tmpdir, o->dst,
                          strerror(errno));
    return WNA16_OK;
}
