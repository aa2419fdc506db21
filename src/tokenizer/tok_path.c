/* What a path given as a tokenizer is, when it holds no tokenizer.json
 * (nor tiktoken.model):
 * the error names it (missing, a GGUF file, a directory without the file)
 * and what to do. */
#include "tokenizer/tok_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static bool gguf_magic(const char *path) {
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    bool yes = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f) fclose(f);
    return yes;
}

static bool has(const char *dir, const char *name) {
    char *p = wna16_asprintf("%s/%s", dir, name);
    struct stat sb;
    bool yes = p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
    wna16_free(p);
    return yes;
}

wna16_status tok_check_path(wna16_diag *d, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return wna16_fail(d, WNA16_ERR_IO,
                          "%s does not exist (%s); pass a Hugging Face model directory (with "
                          "tokenizer.json) or the path of a tokenizer.json",
                          path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        if (gguf_magic(path))
            return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                              "%s is a GGUF file; wna16 reads a Hugging Face tokenizer.json: use "
                              "the model's Hugging Face release, or convert the GGUF to one "
                              "(transformers' from_pretrained(..., gguf_file=...) then "
                              "save_pretrained)",
                              path);
        return WNA16_OK;
    }
    if (has(path, "tokenizer.json") || has(path, "tiktoken.model")) return WNA16_OK;
    if (has(path, "config.json"))
        return wna16_fail(d, WNA16_ERR_IO,
                          "%s has config.json but neither tokenizer.json nor tiktoken.model; "
                          "copy the model's tokenizer file into it, or name a tokenizer.json "
                          "elsewhere",
                          path);
    return wna16_fail(d, WNA16_ERR_IO,
                      "%s has neither tokenizer.json nor tiktoken.model (nor config.json): it is "
                      "not a Hugging Face model directory; pass the model's directory or the "
                      "path of a tokenizer.json",
                      path);
}
