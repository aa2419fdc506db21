/* safetensors reader: mmap, zero-copy views, and every validation rule of
 * the reference crate (format-spec §1.4), in its order, with its error names. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct wna16_safetensors {
    char *label;               /* path or caller label, for messages */
    const uint8_t *base;       /* whole file */
    size_t size;
    void *mapping;             /* non-NULL when we own an mmap */
    size_t count;
    wna16_tensor_view *views;  /* offset order */
    const wna16_tensor_view **by_name; /* sorted by name, for lookup */
    json_t *metadata;          /* __metadata__ object or NULL */
    json_t *root;              /* the header JSON; views' names point into it */
    void **copies;             /* per view: its aligned copy, or NULL (zero-copy) */
};

static const char *const dtype_names[WNA16_DTYPE_COUNT] = {
    "BOOL", "F4",  "F6_E2M3", "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32",
    "U32", "F32", "C64", "F64", "I64", "U64"};
static const int dtype_bits[WNA16_DTYPE_COUNT] = {8,  4,  6,  6,  8,  8,  8,  8,  8,  8, 8,
                                                  16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64};

const char *wna16_dtype_name(wna16_dtype d) {
    return (unsigned)d < WNA16_DTYPE_COUNT ? dtype_names[d] : "?";
}
int wna16_dtype_bits(wna16_dtype d) { return (unsigned)d < WNA16_DTYPE_COUNT ? dtype_bits[d] : 0; }

bool wna16_dtype_parse(const char *s, wna16_dtype *out) {
    for (int i = 0; i < WNA16_DTYPE_COUNT; i++)
        if (!strcmp(s, dtype_names[i])) {
            *out = (wna16_dtype)i;
            return true;
        }
    return false;
}

bool wna16_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
        else return false;
        if (n - i < len) return false;
        for (size_t j = 1; j < len; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += len;
    }
    return true;
}

int64_t wna16_view_numel(const wna16_tensor_view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->shape[i];
    return n;
}

/* ---- parsing ---------------------------------------------------------- */

typedef struct entry {
    const char *name;
    wna16_dtype dtype;
    int rank;
    int64_t shape[WNA16_MAX_RANK];
    uint64_t begin, end;
} entry;

static wna16_status bad_json(wna16_diag *d, const char *label, const char *what, const char *name) {
    return wna16_fail(d, WNA16_ERR_INVALID_HEADER_DESERIALIZATION,
                      "%s: tensor '%s': %s; the header is not a valid safetensors table "
                      "(re-save the file with the safetensors library)",
                      label, name, what);
}

static bool json_nonneg_int(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static wna16_status parse_entry(wna16_diag *d, const char *label, const char *name,
                                const json_t *obj, entry *e) {
    if (!json_is_object(obj)) return bad_json(d, label, "entry is not an object", name);
    const json_t *dtype = json_object_get(obj, "dtype");
    const json_t *shape = json_object_get(obj, "shape");
    const json_t *offs = json_object_get(obj, "data_offsets");
    if (!dtype || !shape || !offs)
        return bad_json(d, label, "missing one of dtype, shape, data_offsets", name);
    if (!json_is_string(dtype)) return bad_json(d, label, "dtype is not a string", name);
    if (!wna16_dtype_parse(json_string_value(dtype), &e->dtype))
        return wna16_fail(d, WNA16_ERR_UNKNOWN_DTYPE,
                          "%s: tensor '%s': unknown dtype \"%s\" (expected one of BOOL, U8, I8, "
                          "F16, BF16, I32, F32, I64, ... spelled exactly)",
                          label, name, json_string_value(dtype));
    if (!json_is_array(shape)) return bad_json(d, label, "shape is not an array", name);
    size_t rank = json_array_size(shape);
    if (rank > WNA16_MAX_RANK) {
        char what[96];
        snprintf(what, sizeof what, "rank %zu exceeds the supported maximum %d", rank,
                 WNA16_MAX_RANK);
        return bad_json(d, label, what, name);
    }
    e->rank = (int)rank;
    for (size_t i = 0; i < rank; i++) {
        uint64_t dim;
        if (!json_nonneg_int(json_array_get(shape, i), &dim))
            return bad_json(d, label, "shape holds a value that is not a non-negative integer",
                            name);
        e->shape[i] = (int64_t)dim;
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !json_nonneg_int(json_array_get(offs, 0), &e->begin) ||
        !json_nonneg_int(json_array_get(offs, 1), &e->end))
        return bad_json(d, label, "data_offsets is not a pair of non-negative integers", name);
    e->name = name;
    return WNA16_OK;
}

static wna16_status parse_metadata(wna16_diag *d, const char *label, json_t *meta) {
    if (!json_is_object(meta))
        return wna16_fail(d, WNA16_ERR_INVALID_HEADER_DESERIALIZATION,
                          "%s: __metadata__ must be an object of strings", label);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return wna16_fail(d, WNA16_ERR_INVALID_HEADER_DESERIALIZATION,
                              "%s: __metadata__ value for '%s' is not a string", label, k);
    }
    return WNA16_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Rule 7 and 8: contiguous from 0, sizes exact, file exactly covered. */
static wna16_status check_layout(wna16_diag *d, const char *label, entry *es, size_t n,
                                 uint64_t data_size) {
    qsort(es, n, sizeof *es, cmp_offsets);
    uint64_t start = 0;
    for (size_t i = 0; i < n; i++) {
        entry *e = &es[i];
        if (e->begin != start || e->end < e->begin)
            return wna16_fail(d, WNA16_ERR_INVALID_OFFSET,
                              "%s: tensor '%s': data_offsets [%llu, %llu] but the next byte "
                              "expected is %llu (tensors must tile the data section from 0 with "
                              "no gap or overlap)",
                              label, e->name, (unsigned long long)e->begin,
                              (unsigned long long)e->end, (unsigned long long)start);
        uint64_t numel = 1, nbits;
        for (int j = 0; j < e->rank; j++)
            if (!wna16_mul_u64(numel, (uint64_t)e->shape[j], &numel))
                return wna16_fail(d, WNA16_ERR_VALIDATION_OVERFLOW,
                                  "%s: tensor '%s': shape product overflows 64 bits", label,
                                  e->name);
        if (!wna16_mul_u64(numel, (uint64_t)dtype_bits[e->dtype], &nbits) || numel > INT64_MAX)
            return wna16_fail(d, WNA16_ERR_VALIDATION_OVERFLOW,
                              "%s: tensor '%s': byte size overflows 64 bits", label, e->name);
        if (nbits % 8)
            return wna16_fail(d, WNA16_ERR_MISALIGNED_SLICE,
                              "%s: tensor '%s': %llu elements of %s are not a whole number of "
                              "bytes",
                              label, e->name, (unsigned long long)numel, dtype_names[e->dtype]);
        if (e->end - e->begin != nbits / 8)
            return wna16_fail(d, WNA16_ERR_TENSOR_INVALID_INFO,
                              "%s: tensor '%s': shape and dtype need %llu bytes but data_offsets "
                              "span %llu",
                              label, e->name, (unsigned long long)(nbits / 8),
                              (unsigned long long)(e->end - e->begin));
        start = e->end;
    }
    if (start != data_size)
        return wna16_fail(d, WNA16_ERR_METADATA_INCOMPLETE_BUFFER,
                          "%s: the tensors cover %llu bytes of data but the file holds %llu "
                          "(file truncated, or trailing bytes after the last tensor)",
                          label, (unsigned long long)start, (unsigned long long)data_size);
    return WNA16_OK;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp((*(const wna16_tensor_view *const *)a)->name,
                  (*(const wna16_tensor_view *const *)b)->name);
}

/* Views are read as arrays of their element type, which C requires to be
 * aligned. The reference writer's files always are (format-spec §1.5), but
 * other writers need not be, and a memory buffer may start anywhere: such a
 * tensor gets an aligned copy, owned by st (the rest stay zero-copy). */
static wna16_status align_view(wna16_diag *d, wna16_safetensors *st, size_t i) {
    wna16_tensor_view *v = &st->views[i];
    int bits = wna16_dtype_bits(v->dtype);
    size_t esize = bits >= 8 ? (size_t)bits / 8 : 1;
    if (v->nbytes == 0 || (uintptr_t)v->data % esize == 0) return WNA16_OK;
    if (!st->copies) {
        st->copies = wna16_calloc(st->count, sizeof *st->copies);
        if (!st->copies) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: copy table", st->label);
    }
    void *copy = wna16_malloc(v->nbytes);
    if (!copy)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                          "%s: tensor '%s' is not aligned to its %zu-byte elements in the "
                          "file, and an aligned copy of its %zu bytes could not be allocated "
                          "(re-saving with safetensors' save_file aligns every tensor)",
                          st->label, v->name, esize, v->nbytes);
    memcpy(copy, v->data, v->nbytes);
    st->copies[i] = copy;
    v->data = copy;
    return WNA16_OK;
}

static wna16_status build_views(wna16_diag *d, wna16_safetensors *st, const entry *es, size_t n,
                                const uint8_t *data) {
    st->views = wna16_calloc(n, sizeof *st->views);
    st->by_name = wna16_calloc(n, sizeof *st->by_name);
    if (!st->views || !st->by_name)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: %zu tensor entries", st->label, n);
    st->count = n;
    for (size_t i = 0; i < n; i++) {
        wna16_tensor_view *v = &st->views[i];
        v->name = es[i].name;
        v->dtype = es[i].dtype;
        v->rank = es[i].rank;
        memcpy(v->shape, es[i].shape, sizeof v->shape);
        v->data = data + es[i].begin;
        v->nbytes = (size_t)(es[i].end - es[i].begin);
        WNA16_TRY(align_view(d, st, i));
        st->by_name[i] = v;
    }
    qsort(st->by_name, n, sizeof *st->by_name, cmp_names);
    return WNA16_OK;
}

static wna16_status parse_json(wna16_diag *d, wna16_safetensors *st, const char *text,
                               size_t len, json_t **root_out) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return wna16_fail(d, WNA16_ERR_DUPLICATE_KEY,
                              "%s: header JSON: %s (each tensor name may appear once)", st->label,
                              jerr.text);
        return wna16_fail(d, WNA16_ERR_INVALID_HEADER_DESERIALIZATION,
                          "%s: header is not valid JSON: %s at byte %d", st->label, jerr.text,
                          jerr.position);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return wna16_fail(d, WNA16_ERR_INVALID_HEADER_DESERIALIZATION,
                          "%s: header JSON must be an object, found another value", st->label);
    }
    *root_out = root;
    return WNA16_OK;
}

static wna16_status parse_header(wna16_diag *d, wna16_safetensors *st) {
    if (st->size < 8)
        return wna16_fail(d, WNA16_ERR_HEADER_TOO_SMALL,
                          "%s: %zu bytes; a safetensors file starts with an 8-byte header length",
                          st->label, st->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | st->base[i];
    if (n > WNA16_ST_MAX_HEADER)
        return wna16_fail(d, WNA16_ERR_HEADER_TOO_LARGE,
                          "%s: header length %llu exceeds the 100000000-byte cap", st->label,
                          (unsigned long long)n);
    if (8 + n > st->size)
        return wna16_fail(d, WNA16_ERR_INVALID_HEADER_LENGTH,
                          "%s: header length %llu runs past the end of the %zu-byte file",
                          st->label, (unsigned long long)n, st->size);
    const char *text = (const char *)st->base + 8;
    if (!wna16_utf8_valid((const uint8_t *)text, (size_t)n))
        return wna16_fail(d, WNA16_ERR_INVALID_HEADER, "%s: header is not valid UTF-8",
                          st->label);
    json_t *root;
    WNA16_TRY(parse_json(d, st, text, (size_t)n, &root));
    st->root = root;
    size_t cap = json_object_size(root);
    entry *es = wna16_calloc(cap ? cap : 1, sizeof *es);
    if (!es) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: header table", st->label);
    size_t count = 0;
    const char *key;
    json_t *val;
    wna16_status s = WNA16_OK;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if ((s = parse_metadata(d, st->label, val)) != WNA16_OK) break;
            st->metadata = val;
            continue;
        }
        if ((s = parse_entry(d, st->label, key, val, &es[count])) != WNA16_OK) break;
        count++;
    }
    if (s == WNA16_OK) s = check_layout(d, st->label, es, count, st->size - 8 - n);
    if (s == WNA16_OK) s = build_views(d, st, es, count, st->base + 8 + n);
    wna16_free(es);
    return s;
}

static wna16_safetensors *alloc_handle(const char *label) {
    wna16_safetensors *o = wna16_calloc(1, sizeof *o);
    if (!o) return NULL;
    o->label = wna16_strdup(label ? label : "(memory)");
    if (!o->label) {
        wna16_free(o);
        return NULL;
    }
    return o;
}

wna16_status wna16_st_open_file(wna16_diag *d, const char *path, wna16_safetensors **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return wna16_fail(d, WNA16_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return wna16_fail(d, WNA16_ERR_IO, "%s: not a regular file", path);
    }
    wna16_safetensors *o = alloc_handle(path);
    if (!o) {
        close(fd);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: handle", path);
    }
    o->size = (size_t)sb.st_size;
    if (o->size > 0) {
        void *m = mmap(NULL, o->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            wna16_safetensors_close(o);
            return wna16_fail(d, WNA16_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        }
        o->mapping = m;
        o->base = m;
    } else {
        o->base = (const uint8_t *)"";
    }
    close(fd);
    wna16_status s = parse_header(d, o);
    if (s != WNA16_OK) {
        wna16_safetensors_close(o);
        return s;
    }
    *out = o;
    return WNA16_OK;
}

wna16_status wna16_safetensors_open(wna16_ctx *ctx, const char *path, wna16_safetensors **out) {
    if (!path || !out)
        return wna16_fail(wna16_ctx_diag(ctx), WNA16_ERR_INVALID_ARGUMENT, "NULL argument");
    wna16_diag_clear(wna16_ctx_diag(ctx));
    return wna16_st_open_file(wna16_ctx_diag(ctx), path, out);
}

wna16_status wna16_safetensors_open_memory(wna16_ctx *ctx, const void *data, size_t size,
                                           const char *label, wna16_safetensors **out) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!out || (!data && size))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "NULL argument");
    *out = NULL;
    wna16_diag_clear(d);
    wna16_safetensors *o = alloc_handle(label);
    if (!o) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "handle");
    o->base = size ? data : (const uint8_t *)"";
    o->size = size;
    wna16_status s = parse_header(d, o);
    if (s != WNA16_OK) {
        wna16_safetensors_close(o);
        return s;
    }
    *out = o;
    return WNA16_OK;
}

void wna16_safetensors_close(wna16_safetensors *st) {
    if (!st) return;
    if (st->mapping) munmap(st->mapping, st->size);
    for (size_t i = 0; st->copies && i < st->count; i++) wna16_free(st->copies[i]);
    wna16_free(st->copies);
    json_decref(st->root);
    wna16_free(st->views);
    wna16_free(st->by_name);
    wna16_free(st->label);
    wna16_free(st);
}

size_t wna16_safetensors_count(const wna16_safetensors *st) { return st ? st->count : 0; }

const wna16_tensor_view *wna16_safetensors_at(const wna16_safetensors *st, size_t i) {
    return st && i < st->count ? &st->views[i] : NULL;
}

const wna16_tensor_view *wna16_safetensors_find(const wna16_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    size_t lo = 0, hi = st->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->by_name[mid]->name, name);
        if (c == 0) return st->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *wna16_safetensors_metadata(const wna16_safetensors *st, const char *key) {
    if (!st || !st->metadata) return NULL;
    return json_string_value(json_object_get(st->metadata, key));
}

const char *wna16_st_path(const wna16_safetensors *st) { return st->label; }

void wna16_st_release_pages(const wna16_safetensors *st) {
    if (st && st->mapping && st->size) (void)madvise(st->mapping, st->size, MADV_DONTNEED);
}
