/* Fuzz target (f): a whole tiny model directory. The input is split into
 * config.json and model.safetensors:
 *
 *   [u16 LE n][n bytes: config.json][rest: model.safetensors]
 *
 * (n is clamped to what is there). Both are written into a per-process
 * temporary directory (under /dev/shm when it exists, else $TMPDIR or /tmp),
 * which wna16_checkpoint_open then validates as a Hugging Face model
 * directory. When it opens, the `inspect` report is built for TP 1,2,4,8
 * (text and JSON: every module through the sharding plan) and every small
 * linear is dequantized, so a validation gap shows up as an out-of-bounds
 * read under ASan rather than passing silently. */
#include "fuzz_common.h"

#include "format/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

static char dir[256];
static char cfg_path[300], st_path[300];

static void cleanup(void) {
    unlink(cfg_path);
    unlink(st_path);
    rmdir(dir);
}

static void make_dir(void) {
    if (dir[0]) return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/wna16-fuzz-ck-XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    atexit(cleanup);
}

static void write_file(const char *path, const uint8_t *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

static void exercise(wna16_ctx *ctx, wna16_checkpoint *ck) {
    static const int tps[] = {1, 2, 4, 8};
    for (int json = 0; json < 2; json++) {
        char *text = NULL;
        bool loadable = false;
        wna16_status s = wna16_checkpoint_report(ctx, ck, tps, 4, json, &text, &loadable);
        FUZZ_CHECK(s == WNA16_OK || s == WNA16_ERR_OUT_OF_MEMORY);
        if (s == WNA16_OK) FUZZ_CHECK(text && text[0]);
        free(text);
    }
    /* the expert-parallel plan: made, or refused for this model's experts */
    for (int tp = 1; tp <= 2; tp++) {
        char *text = NULL;
        bool loadable = false;
        wna16_status s = wna16_checkpoint_report_ep(ctx, ck, 2, tp, tp == 2, &text, &loadable);
        FUZZ_CHECK(s == WNA16_OK || s == WNA16_ERR_OUT_OF_MEMORY ||
                   s == WNA16_ERR_INVALID_ARGUMENT || s == WNA16_ERR_UNSUPPORTED);
        if (s == WNA16_OK) FUZZ_CHECK(text && text[0]);
        free(text);
    }
    static float buf[1 << 16];
    for (size_t i = 0; i < ck->n_modules; i++) {
        const wna16_module *m = &ck->modules[i];
        if (m->kind == WNA16_MODULE_OTHER) continue;
        FUZZ_CHECK(m->out > 0 && m->in > 0);
        if (m->out > (1 << 16) / m->in) continue;
        int64_t rows = 0, cols = 0;
        wna16_status s = wna16_checkpoint_dequantize(ctx, ck, m->name, WNA16_DTYPE_F32, buf, &rows,
                                                     &cols);
        if (s == WNA16_OK) FUZZ_CHECK(rows == m->out && cols == m->in);
        s = wna16_checkpoint_dequantize(ctx, ck, m->name, WNA16_DTYPE_BF16, buf, NULL, NULL);
        (void)s;
    }
    for (size_t i = 0; i < ck->n_tensors; i++)
        FUZZ_CHECK(wna16_checkpoint_tensor(ck, ck->tensors[i]->name) == ck->tensors[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    make_dir();
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2) n = size - 2;
    write_file(cfg_path, data + 2, n);
    write_file(st_path, data + 2 + n, size - 2 - n);
    wna16_ctx *ctx = NULL;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 0;
    wna16_checkpoint *ck = NULL;
    wna16_status s = wna16_checkpoint_open(ctx, dir, &ck);
    fuzz_note(wna16_status_str(s), s);
    if (s == WNA16_OK) {
        FUZZ_CHECK(ck != NULL);
        exercise(ctx, ck);
    } else {
        FUZZ_CHECK(ck == NULL);
        FUZZ_CHECK(wna16_ctx_error(ctx)[0] != '\0');
    }
    wna16_checkpoint_close(ck);
    wna16_ctx_free(ctx);
    return 0;
}
