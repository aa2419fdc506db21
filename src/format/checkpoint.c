/* Opening a model directory: config.json, the quantization config, and the
 * safetensors shards (with the index checked both ways). Module discovery
 * and validation are in modules.c; all of it runs before any compute. */
#include "format/checkpoint.h"

#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

wna16_status wna16_ck_discover_modules(wna16_diag *d, wna16_checkpoint *ck);

static char *join_path(const char *dir, const char *name) {
    return wna16_asprintf("%s/%s", dir, name);
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static wna16_status load_json_file(wna16_diag *d, const char *path, wna16_status bad,
                                   json_t **out) {
    json_error_t err;
    *out = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (*out) return WNA16_OK;
    if (!file_exists(path))
        return wna16_fail(d, bad == WNA16_ERR_CONFIG_INVALID ? WNA16_ERR_IO : bad,
                          "%s: cannot read: %s", path, strerror(errno ? errno : ENOENT));
    if (json_error_code(&err) == json_error_duplicate_key)
        return wna16_fail(d, WNA16_ERR_DUPLICATE_KEY, "%s: %s (line %d)", path, err.text, err.line);
    return wna16_fail(d, bad, "%s: not valid JSON: %s (line %d, column %d)", path, err.text,
                      err.line, err.column);
}

static wna16_status load_configs(wna16_diag *d, wna16_checkpoint *ck) {
    char *path = join_path(ck->dir, "config.json");
    if (!path) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "path");
    wna16_status s = load_json_file(d, path, WNA16_ERR_CONFIG_INVALID, &ck->config_json);
    if (s == WNA16_OK) s = wna16_model_config_parse(d, path, ck->config_json, &ck->config);
    if (s != WNA16_OK) {
        wna16_free(path);
        return s;
    }
    const json_t *qc = json_object_get(ck->config_json, "quantization_config");
    if (qc) {
        s = wna16_qconfig_parse(d, path, qc, &ck->qconfig);
        wna16_free(path);
        return s;
    }
    wna16_free(path);
    /* legacy GPTQ keeps its config beside config.json */
    static const char *const legacy[] = {"quantize_config.json", "quant_config.json"};
    for (size_t i = 0; i < 2; i++) {
        char *p = join_path(ck->dir, legacy[i]);
        if (!p) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "path");
        if (file_exists(p)) {
            json_t *root;
            s = load_json_file(d, p, WNA16_ERR_QUANT_CONFIG_INVALID, &root);
            if (s == WNA16_OK) {
                s = wna16_qconfig_parse(d, p, root, &ck->qconfig);
                json_decref(root);
            }
            wna16_free(p);
            return s;
        }
        wna16_free(p);
    }
    return WNA16_OK; /* an unquantized model */
}

/* Shard names come from a file we did not write: only plain file names. */
static bool safe_shard_name(const char *name) {
    return name[0] && name[0] != '.' && !strchr(name, '/') && !strchr(name, '\\');
}

static wna16_status open_shard(wna16_diag *d, wna16_checkpoint *ck, const char *name) {
    for (size_t i = 0; i < ck->n_shards; i++) {
        const char *p = wna16_st_path(ck->shards[i]);
        const char *base = strrchr(p, '/');
        if (!strcmp(base ? base + 1 : p, name)) return WNA16_OK;
    }
    char *path = join_path(ck->dir, name);
    if (!path) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "path");
    wna16_safetensors **shards = wna16_realloc(ck->shards, (ck->n_shards + 1) * sizeof *shards);
    if (!shards) {
        wna16_free(path);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "shards");
    }
    ck->shards = shards;
    if (!file_exists(path)) {
        wna16_status s = wna16_fail(d, WNA16_ERR_SHARD_MISSING,
                                    "%s: shard named by the index is missing (re-download the "
                                    "checkpoint, or fix model.safetensors.index.json)",
                                    path);
        wna16_free(path);
        return s;
    }
    wna16_status s = wna16_st_open_file(d, path, &ck->shards[ck->n_shards]);
    wna16_free(path);
    if (s == WNA16_OK) ck->n_shards++;
    return s;
}

static wna16_status open_indexed(wna16_diag *d, wna16_checkpoint *ck, const char *index_path,
                                 json_t **map_out) {
    json_t *root;
    WNA16_TRY(load_json_file(d, index_path, WNA16_ERR_INDEX_INVALID, &root));
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        json_decref(root);
        return wna16_fail(d, WNA16_ERR_INDEX_INVALID, "%s: \"weight_map\" is missing or not an object",
                          index_path);
    }
    const char *tensor;
    json_t *file;
    wna16_status s = WNA16_OK;
    json_object_foreach(map, tensor, file) {
        if (!json_is_string(file)) {
            s = wna16_fail(d, WNA16_ERR_INDEX_INVALID, "%s: weight_map[\"%s\"] is not a file name",
                           index_path, tensor);
            break;
        }
        if (!safe_shard_name(json_string_value(file))) {
            s = wna16_fail(d, WNA16_ERR_PATH_UNSAFE,
                           "%s: weight_map[\"%s\"] names \"%s\"; shards must be plain file names "
                           "inside the model directory",
                           index_path, tensor, json_string_value(file));
            break;
        }
        if ((s = open_shard(d, ck, json_string_value(file))) != WNA16_OK) break;
    }
    json_incref(map);
    json_decref(root);
    *map_out = map;
    return s;
}

static int cmp_view_names(const void *a, const void *b) {
    return strcmp((*(const wna16_tensor_view *const *)a)->name,
                  (*(const wna16_tensor_view *const *)b)->name);
}

static const char *shard_base(const wna16_safetensors *st) {
    const char *p = wna16_st_path(st), *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* All tensors of all shards in one sorted table; the index, when present,
 * must agree with the shards both ways. */
static wna16_status build_tensor_table(wna16_diag *d, wna16_checkpoint *ck, const json_t *map) {
    size_t total = 0;
    for (size_t i = 0; i < ck->n_shards; i++) total += wna16_safetensors_count(ck->shards[i]);
    ck->tensors = wna16_calloc(total ? total : 1, sizeof *ck->tensors);
    if (!ck->tensors) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "tensor table");
    for (size_t i = 0; i < ck->n_shards; i++)
        for (size_t j = 0; j < wna16_safetensors_count(ck->shards[i]); j++) {
            const wna16_tensor_view *v = wna16_safetensors_at(ck->shards[i], j);
            if (map) {
                const char *want = json_string_value(json_object_get(map, v->name));
                if (!want || strcmp(want, shard_base(ck->shards[i])))
                    return wna16_fail(d, WNA16_ERR_INDEX_MISMATCH,
                                      "%s: tensor '%s' is in this shard but the index maps it to "
                                      "%s (regenerate model.safetensors.index.json)",
                                      wna16_st_path(ck->shards[i]), v->name,
                                      want ? want : "nothing");
            }
            ck->tensors[ck->n_tensors++] = v;
        }
    qsort(ck->tensors, ck->n_tensors, sizeof *ck->tensors, cmp_view_names);
    for (size_t i = 1; i < ck->n_tensors; i++)
        if (!strcmp(ck->tensors[i - 1]->name, ck->tensors[i]->name))
            return wna16_fail(d, WNA16_ERR_DUPLICATE_KEY,
                              "%s: tensor '%s' appears in two shards", ck->dir,
                              ck->tensors[i]->name);
    if (map) {
        const char *tensor;
        json_t *file;
        json_object_foreach((json_t *)map, tensor, file) {
            if (!wna16_checkpoint_tensor(ck, tensor))
                return wna16_fail(d, WNA16_ERR_INDEX_MISMATCH,
                                  "%s: the index maps tensor '%s' to %s, which does not hold it",
                                  ck->dir, tensor, json_string_value(file));
        }
    }
    return WNA16_OK;
}

static wna16_status open_shards(wna16_diag *d, wna16_checkpoint *ck) {
    char *index = join_path(ck->dir, "model.safetensors.index.json");
    if (!index) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "path");
    json_t *map = NULL;
    wna16_status s;
    if (file_exists(index)) {
        s = open_indexed(d, ck, index, &map);
    } else {
        char *single = join_path(ck->dir, "model.safetensors");
        if (!single) s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "path");
        else if (!file_exists(single))
            s = wna16_fail(d, WNA16_ERR_SHARD_MISSING,
                           "%s: neither model.safetensors nor model.safetensors.index.json "
                           "exists; is this a Hugging Face model directory?",
                           ck->dir);
        else s = open_shard(d, ck, "model.safetensors");
        wna16_free(single);
    }
    wna16_free(index);
    if (s == WNA16_OK) s = build_tensor_table(d, ck, map);
    json_decref(map);
    return s;
}

/* A multimodal checkpoint (config.json with a text_config) keeps its
 * language model under a prefix of its own; a text model under "model.". */
static void find_text_prefix(wna16_checkpoint *ck) {
    static const char *const prefixes[] = {"language_model.model.", "model.language_model."};
    snprintf(ck->text_prefix, sizeof ck->text_prefix, "model.");
    if (!json_is_object(json_object_get(ck->config_json, "text_config"))) return;
    for (size_t i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (wna16_checkpoint_tensor(ck, name))
            snprintf(ck->text_prefix, sizeof ck->text_prefix, "%s", prefixes[i]);
    }
}

wna16_status wna16_checkpoint_open(wna16_ctx *ctx, const char *dir, wna16_checkpoint **out) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!dir || !out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "NULL argument");
    *out = NULL;
    wna16_diag_clear(d);
    WNA16_TRY(wna16_ck_check_path(d, dir));
    wna16_checkpoint *ck = wna16_calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = wna16_strdup(dir))) {
        wna16_free(ck);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "checkpoint");
    }
    wna16_status s = load_configs(d, ck);
    if (s == WNA16_OK) s = open_shards(d, ck);
    if (s == WNA16_OK) find_text_prefix(ck);
    if (s == WNA16_OK) s = wna16_ck_discover_modules(d, ck);
    if (s != WNA16_OK) {
        wna16_checkpoint_close(ck);
        return s;
    }
    *out = ck;
    return WNA16_OK;
}

void wna16_checkpoint_close(wna16_checkpoint *ck) {
    if (!ck) return;
    for (size_t i = 0; i < ck->n_modules; i++) wna16_free(ck->modules[i].name);
    wna16_free(ck->modules);
    wna16_free(ck->tensors);
    for (size_t i = 0; i < ck->n_shards; i++) wna16_safetensors_close(ck->shards[i]);
    wna16_free(ck->shards);
    wna16_qconfig_free(&ck->qconfig);
    json_decref(ck->config_json);
    wna16_free(ck->dir);
    wna16_free(ck);
}

const wna16_tensor_view *wna16_checkpoint_tensor(const wna16_checkpoint *ck, const char *name) {
    if (!ck || !name) return NULL;
    size_t lo = 0, hi = ck->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->tensors[mid]->name, name);
        if (!c) return ck->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const wna16_module *wna16_ck_module(const wna16_checkpoint *ck, const char *name) {
    size_t lo = 0, hi = ck->n_modules;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->modules[mid].name, name);
        if (!c) return &ck->modules[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

void wna16_ck_release_pages(const wna16_checkpoint *ck) {
    for (size_t i = 0; ck && i < ck->n_shards; i++) wna16_st_release_pages(ck->shards[i]);
}

void wna16_ck_drop_cache(const wna16_checkpoint *ck) {
    wna16_ck_release_pages(ck);
    for (size_t i = 0; ck && i < ck->n_shards; i++) {
        int fd = open(wna16_st_path(ck->shards[i]), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* advisory */
        close(fd);
    }
}
