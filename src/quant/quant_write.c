/* What the quantizer writes: pack-quantized tensors (format-spec §3), the
 * compressed-tensors 0.20.1 quantization_config, and JSON exactly as
 * Python's json.dumps(indent=2, sort_keys=True) spells it. */
#include "format/qweight.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *wna16_owned_alloc(wna16_owned *o, size_t bytes) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        void **p = wna16_realloc(o->ptrs, cap * sizeof *p);
        if (!p) return NULL;
        o->ptrs = p;
        o->cap = cap;
    }
    void *m = wna16_malloc(bytes ? bytes : 1);
    if (m) {
        o->ptrs[o->n++] = m;
        o->bytes += bytes;
    }
    return m;
}

void wna16_owned_free(wna16_owned *o) {
    for (size_t i = 0; i < o->n; i++) wna16_free(o->ptrs[i]);
    wna16_free(o->ptrs);
    memset(o, 0, sizeof *o);
}

wna16_status wna16_quant_emit(wna16_diag *d, wna16_st_writer *w, const char *prefix,
                              const wna16_qlinear *q, wna16_owned *owned) {
    int b = q->spec.bits;
    int64_t n = q->n, k = q->k, ng = q->n_groups;
    int64_t row_words = (k * b + 31) / 32;
    uint32_t *packed = wna16_owned_alloc(owned, (size_t)(n * row_words) * 4);
    size_t sb = q->spec.dtype == WNA16_DTYPE_F32 ? 4 : 2;
    void *scale = wna16_owned_alloc(owned, (size_t)(n * ng) * sb);
    int64_t *shape = wna16_owned_alloc(owned, 2 * sizeof(int64_t));
    if (!packed || !scale || !shape) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: packed", prefix);
    wna16_pack_rows(q->q, n, k, b, packed);
    for (int64_t i = 0; i < n * ng; i++) {
        if (q->spec.dtype == WNA16_DTYPE_BF16) ((uint16_t *)scale)[i] = wna16_f32_to_bf16(q->scale[i]);
        else if (q->spec.dtype == WNA16_DTYPE_F16) ((uint16_t *)scale)[i] = wna16_f32_to_f16(q->scale[i]);
        else ((float *)scale)[i] = q->scale[i];
    }
    shape[0] = n;
    shape[1] = k;
    char name[512];
    wna16_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    int64_t sh[2];
    wna16_status st;
#define ADD(suffix, dt, rank, data)                                                                \
    do {                                                                                           \
        snprintf(name, sizeof name, "%s.%s", prefix, suffix);                                      \
        st = wna16_st_writer_add(&ctx, w, name, dt, rank, sh, data);                               \
        if (st != WNA16_OK) return wna16_fail(d, st, "%s", ctx.diag.detail);                       \
    } while (0)
    sh[0] = n, sh[1] = row_words;
    ADD("weight_packed", WNA16_DTYPE_I32, 2, packed);
    sh[0] = n, sh[1] = ng;
    ADD("weight_scale", q->spec.dtype, 2, scale);
    sh[0] = 2;
    ADD("weight_shape", WNA16_DTYPE_I64, 1, shape);
    if (!q->spec.symmetric) {
        int64_t zrows = (n * b + 31) / 32;
        uint32_t *zp = wna16_owned_alloc(owned, (size_t)(zrows * ng) * 4);
        if (!zp) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: zero points", prefix);
        wna16_pack_zero_points(q->zp, n, ng, b, zp);
        sh[0] = zrows, sh[1] = ng;
        ADD("weight_zero_point", WNA16_DTYPE_I32, 2, zp);
    }
#undef ADD
    return WNA16_OK;
}

json_t *wna16_quant_config_json(const wna16_qspec *s, bool actorder_static, const char *const *ignore,
                                size_t n_ignore) {
    json_t *wargs = json_object();
    if (actorder_static) json_object_set_new(wargs, "actorder", json_string("static"));
    json_object_set_new(wargs, "dynamic", json_false());
    /* channelwise: "group_size": null, as CT writes it for a scheme built with the field
     * given (tests/data/ct/w4a16_asym_channel) */
    json_object_set_new(wargs, "group_size", s->group_size > 0 ? json_integer(s->group_size) : json_null());
    json_object_set_new(wargs, "num_bits", json_integer(s->bits));
    json_object_set_new(wargs, "strategy", json_string(s->group_size > 0 ? "group" : "channel"));
    json_object_set_new(wargs, "symmetric", json_boolean(s->symmetric));
    json_object_set_new(wargs, "type", json_string("int"));
    json_t *g0 = json_object();
    json_object_set_new(g0, "format", json_string("pack-quantized"));
    json_object_set_new(g0, "input_activations", json_null());
    json_object_set_new(g0, "output_activations", json_null());
    json_t *targets = json_array();
    json_array_append_new(targets, json_string("Linear"));
    json_object_set_new(g0, "targets", targets);
    json_object_set_new(g0, "weights", wargs);
    json_t *groups = json_object();
    json_object_set_new(groups, "group_0", g0);
    json_t *qc = json_object();
    json_object_set_new(qc, "config_groups", groups);
    json_object_set_new(qc, "format", json_string("pack-quantized"));
    json_object_set_new(qc, "global_compression_ratio", json_null());
    json_t *ig = json_array();
    for (size_t i = 0; i < n_ignore; i++) json_array_append_new(ig, json_string(ignore[i]));
    json_object_set_new(qc, "ignore", ig);
    json_object_set_new(qc, "kv_cache_scheme", json_null());
    json_object_set_new(qc, "moe_sparsity_config", json_null());
    json_object_set_new(qc, "quant_method", json_string("compressed-tensors"));
    json_object_set_new(qc, "quantization_status", json_string("compressed"));
    json_object_set_new(qc, "sparsity_config", json_object());
    json_object_set_new(qc, "transform_config", json_object());
    json_object_set_new(qc, "version", json_string("0.20.1"));
    return qc;
}

/* ------------------------------------------------- Python-style JSON dump */

/* repr(float): the shortest digits that round-trip, fixed notation for
 * decimal exponents in [-4, 16), else d.ddde+XX. */
static void put_float(wna16_buf *b, double v) {
    if (isnan(v)) return wna16_buf_printf(b, "NaN");
    if (isinf(v)) return wna16_buf_printf(b, v > 0 ? "Infinity" : "-Infinity");
    char e[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    const char *s = e;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    if (neg) wna16_buf_put(b, "-", 1);
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            wna16_buf_printf(b, "0.");
            for (int i = 0; i < -exp - 1; i++) wna16_buf_put(b, "0", 1);
            wna16_buf_printf(b, "%s", digits);
        } else if (nd <= exp + 1) {
            wna16_buf_printf(b, "%s", digits);
            for (int i = nd; i < exp + 1; i++) wna16_buf_put(b, "0", 1);
            wna16_buf_printf(b, ".0");
        } else {
            wna16_buf_put(b, digits, (size_t)exp + 1);
            wna16_buf_printf(b, ".%s", digits + exp + 1);
        }
    } else {
        wna16_buf_put(b, digits, 1);
        if (nd > 1) wna16_buf_printf(b, ".%s", digits + 1);
        wna16_buf_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static void put_string(wna16_buf *b, const char *s, size_t n) {
    wna16_buf_put(b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t c = u[i];
        size_t len = 1;
        if (c >= 0xf0 && i + 3 < n + 0) {
            c = ((c & 7u) << 18) | ((u[i + 1] & 63u) << 12) | ((u[i + 2] & 63u) << 6) | (u[i + 3] & 63u);
            len = 4;
        } else if (c >= 0xe0 && i + 2 < n) {
            c = ((c & 15u) << 12) | ((u[i + 1] & 63u) << 6) | (u[i + 2] & 63u);
            len = 3;
        } else if (c >= 0xc0 && i + 1 < n) {
            c = ((c & 31u) << 6) | (u[i + 1] & 63u);
            len = 2;
        }
        i += len;
        switch (c) {
        case '"': wna16_buf_printf(b, "\\\""); continue;
        case '\\': wna16_buf_printf(b, "\\\\"); continue;
        case '\n': wna16_buf_printf(b, "\\n"); continue;
        case '\r': wna16_buf_printf(b, "\\r"); continue;
        case '\t': wna16_buf_printf(b, "\\t"); continue;
        case '\b': wna16_buf_printf(b, "\\b"); continue;
        case '\f': wna16_buf_printf(b, "\\f"); continue;
        default: break;
        }
        if (c < 0x20 || (c >= 0x7f && c < 0x10000)) {
            if (c == 0x7f) wna16_buf_put(b, "\x7f", 1);
            else wna16_buf_printf(b, "\\u%04x", c);
        } else if (c >= 0x10000) {
            c -= 0x10000;
            wna16_buf_printf(b, "\\u%04x\\u%04x", 0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
        } else {
            char ch = (char)c;
            wna16_buf_put(b, &ch, 1);
        }
    }
    wna16_buf_put(b, "\"", 1);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void indent(wna16_buf *b, int level) {
    wna16_buf_put(b, "\n", 1);
    for (int i = 0; i < level * 2; i++) wna16_buf_put(b, " ", 1);
}

static void dump(wna16_buf *b, const json_t *v, int level) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v);
        if (!n) return wna16_buf_printf(b, "{}");
        const char **keys = wna16_malloc(n * sizeof *keys);
        if (!keys) {
            b->failed = true;
            return;
        }
        size_t i = 0;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) keys[i++] = key;
        qsort(keys, n, sizeof *keys, cmp_str);
        wna16_buf_put(b, "{", 1);
        for (i = 0; i < n; i++) {
            indent(b, level + 1);
            put_string(b, keys[i], strlen(keys[i]));
            wna16_buf_put(b, ": ", 2);
            dump(b, json_object_get(v, keys[i]), level + 1);
            if (i + 1 < n) wna16_buf_put(b, ",", 1);
        }
        indent(b, level);
        wna16_buf_put(b, "}", 1);
        wna16_free(keys);
        return;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (!n) return wna16_buf_printf(b, "[]");
        wna16_buf_put(b, "[", 1);
        for (size_t i = 0; i < n; i++) {
            indent(b, level + 1);
            dump(b, json_array_get(v, i), level + 1);
            if (i + 1 < n) wna16_buf_put(b, ",", 1);
        }
        indent(b, level);
        wna16_buf_put(b, "]", 1);
        return;
    }
    case JSON_STRING: return put_string(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: return wna16_buf_printf(b, "%lld", (long long)json_integer_value(v));
    case JSON_REAL: return put_float(b, json_real_value(v));
    case JSON_TRUE: return wna16_buf_printf(b, "true");
    case JSON_FALSE: return wna16_buf_printf(b, "false");
    default: return wna16_buf_printf(b, "null");
    }
}

char *wna16_pyjson_dumps(const json_t *v) {
    wna16_buf b = {0};
    dump(&b, v, 0);
    wna16_buf_put(&b, "", 0);
    if (b.failed) {
        wna16_buf_free(&b);
        return NULL;
    }
    char *out = wna16_malloc(b.len + 1);
    if (out) {
        memcpy(out, b.data ? b.data : "", b.len);
        out[b.len] = 0;
    }
    wna16_buf_free(&b);
    return out;
}
