/* What a path given as a model is, when it is not a Hugging Face model
 * directory: the error names it (missing, a GGUF file, another file, a
 * directory without config.json or without weights) and what to do. */
#include "format/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static bool is_gguf_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    bool yes = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f) fclose(f);
    return yes;
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static bool has_file(const char *dir, const char *name) {
    char *p = wna16_asprintf("%s/%s", dir, name);
    struct stat sb;
    bool yes = p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
    wna16_free(p);
    return yes;
}

/* The first entry of dir whose name ends with tail, into out. */
static bool find_suffix(const char *dir, const char *tail, char *out, size_t cap) {
    DIR *dp = opendir(dir);
    if (!dp) return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(dp));)
        if (e->d_name[0] != '.' && ends_with(e->d_name, tail)) {
            snprintf(out, cap, "%s", e->d_name);
            found = true;
        }
    closedir(dp);
    return found;
}

#define GGUF_FIX                                                                                   \
    "wna16 loads Hugging Face safetensors directories: use the model's safetensors release, or "  \
    "convert the GGUF to one (transformers' from_pretrained(..., gguf_file=...) then "             \
    "save_pretrained)"

wna16_status wna16_ck_check_path(wna16_diag *d, const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return wna16_fail(d, WNA16_ERR_IO,
                          "%s does not exist (%s); pass a Hugging Face model directory "
                          "(config.json and the *.safetensors weights)",
                          dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        if (is_gguf_file(dir))
            return wna16_fail(d, WNA16_ERR_UNSUPPORTED, "%s is a GGUF file; " GGUF_FIX, dir);
        return wna16_fail(d, WNA16_ERR_IO,
                          "%s is a file, not a model directory; pass the directory that holds "
                          "config.json and the *.safetensors weights",
                          dir);
    }
    char name[256];
    if (!has_file(dir, "config.json")) {
        if (find_suffix(dir, ".gguf", name, sizeof name))
            return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                              "%s holds a GGUF file (%s) and no config.json; " GGUF_FIX, dir,
                              name);
        return wna16_fail(d, WNA16_ERR_IO,
                          "%s has no config.json: it is not a Hugging Face model directory; pass "
                          "the directory that holds config.json and the *.safetensors weights",
                          dir);
    }
    if (find_suffix(dir, ".safetensors", name, sizeof name) ||
        has_file(dir, "model.safetensors.index.json"))
        return WNA16_OK; /* shards and index are checked as they open */
    if (find_suffix(dir, ".bin", name, sizeof name))
        return wna16_fail(d, WNA16_ERR_SHARD_MISSING,
                          "%s has PyTorch weights (%s) but no model.safetensors: convert them "
                          "(transformers' from_pretrained, then save_pretrained, which writes "
                          "safetensors)",
                          dir, name);
    return wna16_fail(d, WNA16_ERR_SHARD_MISSING,
                      "%s has config.json but no weights (model.safetensors or "
                      "model.safetensors.index.json); download them into it",
                      dir);
}
