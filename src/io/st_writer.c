/* safetensors writer with the reference crate's canonical layout
 * (format-spec §1.5): tensors sorted by dtype descending then name, compact
 * JSON with __metadata__ first, header padded with spaces to a multiple of 8.
 * Files are written to a temporary name and renamed, so an interrupted
 * write never leaves a file that looks whole. */
#include "io/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct wr_tensor {
    char *name;
    wna16_dtype dtype;
    int rank;
    int64_t shape[WNA16_MAX_RANK];
    const void *data;
    size_t nbytes;
} wr_tensor;

typedef struct wr_meta {
    char *key, *value;
} wr_meta;

struct wna16_st_writer {
    wr_tensor *tensors;
    size_t count, cap;
    wr_meta *meta;
    size_t n_meta;
};

wna16_status wna16_st_writer_create(wna16_ctx *ctx, wna16_st_writer **out) {
    if (!out) return wna16_fail(wna16_ctx_diag(ctx), WNA16_ERR_INVALID_ARGUMENT, "NULL out");
    *out = wna16_calloc(1, sizeof **out);
    return *out ? WNA16_OK : wna16_fail(wna16_ctx_diag(ctx), WNA16_ERR_OUT_OF_MEMORY, "writer");
}

void wna16_st_writer_free(wna16_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->count; i++) wna16_free(w->tensors[i].name);
    for (size_t i = 0; i < w->n_meta; i++) {
        wna16_free(w->meta[i].key);
        wna16_free(w->meta[i].value);
    }
    wna16_free(w->tensors);
    wna16_free(w->meta);
    wna16_free(w);
}

wna16_status wna16_st_writer_add(wna16_ctx *ctx, wna16_st_writer *w, const char *name,
                                 wna16_dtype dtype, int rank, const int64_t *shape,
                                 const void *data) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!w || !name || (unsigned)dtype >= WNA16_DTYPE_COUNT || rank < 0 || rank > WNA16_MAX_RANK ||
        (rank && !shape) || !strcmp(name, "__metadata__"))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "writer: bad tensor '%s'",
                          name ? name : "(null)");
    for (size_t i = 0; i < w->count; i++)
        if (!strcmp(w->tensors[i].name, name))
            return wna16_fail(d, WNA16_ERR_DUPLICATE_KEY, "writer: tensor '%s' added twice", name);
    uint64_t numel = 1, nbits;
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0 || !wna16_mul_u64(numel, (uint64_t)shape[i], &numel))
            return wna16_fail(d, WNA16_ERR_VALIDATION_OVERFLOW, "writer: tensor '%s' shape", name);
    if (!wna16_mul_u64(numel, (uint64_t)wna16_dtype_bits(dtype), &nbits) || nbits % 8)
        return wna16_fail(d, WNA16_ERR_MISALIGNED_SLICE,
                          "writer: tensor '%s' is not a whole number of bytes", name);
    if (w->count == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        wr_tensor *t = wna16_realloc(w->tensors, cap * sizeof *t);
        if (!t) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "writer table");
        w->tensors = t;
        w->cap = cap;
    }
    wr_tensor *t = &w->tensors[w->count];
    memset(t, 0, sizeof *t);
    if (!(t->name = wna16_strdup(name))) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "name");
    t->dtype = dtype;
    t->rank = rank;
    if (rank) memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
    t->data = data;
    t->nbytes = (size_t)(nbits / 8);
    w->count++;
    return WNA16_OK;
}

wna16_status wna16_st_writer_metadata(wna16_ctx *ctx, wna16_st_writer *w, const char *key,
                                      const char *value) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!w || !key || !value) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "NULL argument");
    wr_meta *m = wna16_realloc(w->meta, (w->n_meta + 1) * sizeof *m);
    if (!m) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "metadata");
    w->meta = m;
    m[w->n_meta].key = wna16_strdup(key);
    m[w->n_meta].value = wna16_strdup(value);
    w->n_meta++;
    if (!m[w->n_meta - 1].key || !m[w->n_meta - 1].value)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "metadata");
    return WNA16_OK;
}

/* JSON string escaping as serde_json writes it. */
static void put_json_string(wna16_buf *b, const char *s) {
    wna16_buf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': wna16_buf_put(b, "\\\"", 2); break;
        case '\\': wna16_buf_put(b, "\\\\", 2); break;
        case '\n': wna16_buf_put(b, "\\n", 2); break;
        case '\r': wna16_buf_put(b, "\\r", 2); break;
        case '\t': wna16_buf_put(b, "\\t", 2); break;
        case '\b': wna16_buf_put(b, "\\b", 2); break;
        case '\f': wna16_buf_put(b, "\\f", 2); break;
        default:
            if (*p < 0x20) wna16_buf_printf(b, "\\u%04x", *p);
            else wna16_buf_put(b, (const char *)p, 1);
        }
    }
    wna16_buf_put(b, "\"", 1);
}

static int cmp_writer_order(const void *a, const void *b) {
    const wr_tensor *x = a, *y = b;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void build_header(wna16_st_writer *w, wna16_buf *h) {
    if (w->count) qsort(w->tensors, w->count, sizeof *w->tensors, cmp_writer_order);
    wna16_buf_put(h, "{", 1);
    bool first = true;
    if (w->n_meta) {
        wna16_buf_printf(h, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i) wna16_buf_put(h, ",", 1);
            put_json_string(h, w->meta[i].key);
            wna16_buf_put(h, ":", 1);
            put_json_string(h, w->meta[i].value);
        }
        wna16_buf_put(h, "}", 1);
        first = false;
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->count; i++) {
        const wr_tensor *t = &w->tensors[i];
        if (!first) wna16_buf_put(h, ",", 1);
        first = false;
        put_json_string(h, t->name);
        wna16_buf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", wna16_dtype_name(t->dtype));
        for (int j = 0; j < t->rank; j++)
            wna16_buf_printf(h, "%s%lld", j ? "," : "", (long long)t->shape[j]);
        wna16_buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                         (unsigned long long)(offset + t->nbytes));
        offset += t->nbytes;
    }
    wna16_buf_put(h, "}", 1);
    while (h->len % 8) wna16_buf_put(h, " ", 1);
}

static void put_u64_le(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

wna16_status wna16_st_writer_serialize(wna16_ctx *ctx, wna16_st_writer *w, uint8_t **out,
                                       size_t *out_size) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!w || !out || !out_size) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "NULL argument");
    wna16_buf h = {0};
    build_header(w, &h);
    if (h.failed) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "writer header");
    if (h.len > WNA16_ST_MAX_HEADER) {
        wna16_buf_free(&h);
        return wna16_fail(d, WNA16_ERR_HEADER_TOO_LARGE, "writer: header of %zu bytes", h.len);
    }
    size_t total = 8 + h.len;
    for (size_t i = 0; i < w->count; i++) total += w->tensors[i].nbytes;
    uint8_t *buf = wna16_malloc(total);
    if (!buf) {
        wna16_buf_free(&h);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "writer: %zu bytes", total);
    }
    put_u64_le(buf, h.len);
    memcpy(buf + 8, h.data, h.len);
    size_t pos = 8 + h.len;
    for (size_t i = 0; i < w->count; i++) {
        if (w->tensors[i].nbytes) memcpy(buf + pos, w->tensors[i].data, w->tensors[i].nbytes);
        pos += w->tensors[i].nbytes;
    }
    wna16_buf_free(&h);
    *out = buf;
    *out_size = total;
    return WNA16_OK;
}

wna16_status wna16_st_writer_write(wna16_ctx *ctx, wna16_st_writer *w, const char *path) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!w || !path) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "NULL argument");
    wna16_buf h = {0};
    build_header(w, &h);
    if (h.failed) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "writer header");
    char *tmp = wna16_asprintf("%s.tmp.%ld", path, (long)getpid());
    FILE *f = tmp ? fopen(tmp, "wb") : NULL;
    if (!f) {
        wna16_status s = wna16_fail(d, WNA16_ERR_IO, "%s: cannot create: %s", tmp ? tmp : path,
                                    strerror(errno));
        wna16_free(tmp);
        wna16_buf_free(&h);
        return s;
    }
    uint8_t len[8];
    put_u64_le(len, h.len);
    bool ok = fwrite(len, 1, 8, f) == 8 && fwrite(h.data, 1, h.len, f) == h.len;
    for (size_t i = 0; ok && i < w->count; i++)
        ok = !w->tensors[i].nbytes ||
             fwrite(w->tensors[i].data, 1, w->tensors[i].nbytes, f) == w->tensors[i].nbytes;
    ok = (fflush(f) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    wna16_buf_free(&h);
    if (!ok || rename(tmp, path) != 0) {
        wna16_status s = wna16_fail(d, WNA16_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        wna16_free(tmp);
        return s;
    }
    wna16_free(tmp);
    return WNA16_OK;
}
