/* `wna16 quantize`: a bf16/fp16/fp32 model directory in, a compressed-tensors
 * pack-quantized checkpoint out (RTN or sequential GPTQ). Layer by layer:
 * only one layer's quantized weights and the calibration hidden states are
 * held; unchanged tensors are copied from the mapping. The output is built
 * in DST.tmp-XXXXXX and renamed to DST when complete. docs/quantizer.md. */
#include "core/pool.h"
#include "format/checkpoint.h"
#include "io/safetensors.h"
#include "kernels/machine_limits.h"
#include "model/model.h"
#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ utilities */


/* The caller's abort callback (the CLI's answers Ctrl-C) stops between layers. */
static wna16_status check_interrupt(wna16_diag *d) {
    WNA16_TRY(wna16_check_abort(d, "quantize"));
    return WNA16_OK;
}

static int64_t layer_of(const char *name) {
    const char *p = strstr(name, "layers.");
    if (!p || (p != name && p[-1] != '.')) return -1;
    char *end;
    long v = strtol(p + 7, &end, 10);
    return end != p + 7 && *end == '.' ? v : -1;
}

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* "model.layers.3.mlp.experts.7.down_proj" -> "mlp.experts.down_proj" */
static void type_of(const char *name, char *out, size_t n) {
    const char *p = strstr(name, "layers.");
    if (p && layer_of(name) >= 0) {
        p = strchr(p + 7, '.');
        p = p ? p + 1 : name;
    } else {
        p = name;
    }
    size_t j = 0;
    while (*p && j + 1 < n) {
        if (*p >= '0' && *p <= '9' && j && out[j - 1] == '.') {
            while (*p >= '0' && *p <= '9') p++;
            if (*p == '.') p++;
            continue;
        }
        out[j++] = *p++;
    }
    out[j] = 0;
}

/* Python re.match semantics (anchored at the start) for "re:" patterns,
 * equality otherwise. */
static wna16_status pattern_match(wna16_diag *d, const char *pat, const char *name, bool *hit) {
    if (strncmp(pat, "re:", 3)) {
        *hit = !strcmp(pat, name);
        return WNA16_OK;
    }
    int err;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)(pat + 3), PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED | PCRE2_UTF,
                                     &err, &off, NULL);
    if (!code) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "--ignore: bad regex \"%s\" at offset %zu", pat, (size_t)off);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    int rc = md ? pcre2_match(code, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) : -1;
    *hit = rc >= 0;
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    return WNA16_OK;
}

static size_t peak_rss(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

static wna16_status copy_file(wna16_diag *d, const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) return WNA16_OK; /* optional file */
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return wna16_fail(d, WNA16_ERR_IO, "%s: %s", to, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) ok = ok && fwrite(buf, 1, n, out) == n;
    ok = !ferror(in) && ok;
    fclose(in);
    ok = fclose(out) == 0 && ok;
    return ok ? WNA16_OK : wna16_fail(d, WNA16_ERR_IO, "copying %s to %s failed", from, to);
}

static wna16_status write_text(wna16_diag *d, const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return wna16_fail(d, WNA16_ERR_IO, "%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok ? WNA16_OK : wna16_fail(d, WNA16_ERR_IO, "%s: write failed", path);
}

/* ---------------------------------------------------------------- state */

typedef struct qmodule {
    const wna16_module *m;
    bool quantize;
    int64_t layer;
} qmodule;

typedef struct shard_entry {
    char *name;
    int shard;
} shard_entry;

/* Where GPTQ spends its time (wall and process CPU seconds per phase),
 * logged at info level when the run ends. */
enum { PH_FORWARD, PH_HESSIAN, PH_FACTOR, PH_SWEEP, PH_PROPAGATE, PH_N };

typedef struct gptq_prof {
    double wall[PH_N], cpu[PH_N];
} gptq_prof;

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A running phase: start with prof_begin, add with prof_end. */
typedef struct prof_mark {
    double wall, cpu;
} prof_mark;

static prof_mark prof_begin(void) { return (prof_mark){wna16_now(), cpu_now()}; }

static void prof_end(gptq_prof *p, int phase, prof_mark m) {
    p->wall[phase] += wna16_now() - m.wall;
    p->cpu[phase] += cpu_now() - m.cpu;
}

/* Time spent inside phase `from` (still running) that belongs to `to`. */
static void prof_move(gptq_prof *p, int from, int to, prof_mark m) {
    double w = wna16_now() - m.wall, c = cpu_now() - m.cpu;
    p->wall[to] += w, p->cpu[to] += c;
    p->wall[from] -= w, p->cpu[from] -= c;
}

typedef struct qrun {
    wna16_diag *d;
    const wna16_quantize_opts *o;
    wna16_checkpoint *ck;
    char *tmpdir;
    qmodule *mods;
    size_t n_mods;
    /* the pending shard */
    wna16_st_writer *w;
    wna16_owned owned;
    size_t pending_bytes;
    int n_shards;
    shard_entry *map;
    size_t n_map, cap_map;
    size_t total_bytes;
    wna16_quantize_report *rep;
    double t0;
    int threads;
    wna16_gptq_opts gopts;
    /* GPTQ calibration */
    wna16_model *model;
    float *x;          /* [samples][seq][H] hidden states entering the layer */
    int64_t n_samples, seq, hidden;
    int64_t cur_sample;
    int phase;         /* 0 capture, 1 propagate */
    float *h_attn, *h_o, *h_mlp, *h_down;
    int64_t k_o, k_down;
    uint16_t *mlp_rows; /* sparse layer: mlp_in of every token, bf16 [T][H] */
    struct moe_q *moe;  /* sparse layer: its quantized experts (override) */
    struct calib_state *calib;
    gptq_prof prof;
} qrun;

typedef struct calib_state {
    int32_t *ids; /* [samples][seq] */
} calib_state;

static wna16_status flush_shard(qrun *r) {
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

static wna16_status add_tensor(qrun *r, const char *name, wna16_dtype dt, int rank, const int64_t *shape,
                               const void *data, size_t nbytes) {
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

static wna16_status add_qlinear(qrun *r, const char *prefix, const wna16_qlinear *q) {
    wna16_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    if (!r->w) WNA16_TRY(wna16_st_writer_create(&ctx, &r->w));
    size_t before = r->owned.bytes;
    WNA16_TRY(wna16_quant_emit(r->d, r->w, prefix, q, &r->owned));
    static const char *const sfx[] = {"weight_packed", "weight_scale", "weight_shape", "weight_zero_point"};
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

static const qmodule *find_mod(const qrun *r, const char *name) {
    size_t lo = 0, hi = r->n_mods;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(r->mods[mid].m->name, name);
        if (!c) return &r->mods[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Passes through every tensor of layer L (-1: outside layers) that is not
 * the weight of a module being quantized. */
static wna16_status pass_through(qrun *r, int64_t L) {
    for (size_t i = 0; i < r->ck->n_tensors; i++) {
        const wna16_tensor_view *v = r->ck->tensors[i];
        if (layer_of(v->name) != L) continue;
        if (ends_with(v->name, ".weight")) {
            char prefix[512];
            size_t n = strlen(v->name) - 7;
            if (n >= sizeof prefix) n = sizeof prefix - 1;
            memcpy(prefix, v->name, n);
            prefix[n] = 0;
            const qmodule *q = find_mod(r, prefix);
            if (q && q->quantize) continue;
        }
        WNA16_TRY(add_tensor(r, v->name, v->dtype, v->rank, v->shape, v->data, v->nbytes));
    }
    return WNA16_OK;
}

static wna16_qstat *stat_for(qrun *r, const char *name) {
    char type[48];
    type_of(name, type, sizeof type);
    wna16_quantize_report *rep = r->rep;
    for (size_t i = 0; i < rep->n_types; i++)
        if (!strcmp(rep->types[i].type, type)) return &rep->types[i];
    wna16_qstat *t = wna16_realloc(rep->types, (rep->n_types + 1) * sizeof *t);
    if (!t) return NULL;
    rep->types = t;
    t = &rep->types[rep->n_types++];
    memset(t, 0, sizeof *t);
    snprintf(t->type, sizeof t->type, "%s", type);
    return t;
}

static void record(qrun *r, const char *name, const float *w, const wna16_qlinear *q, double loss) {
    wna16_qstat *t = stat_for(r, name);
    if (!t) return;
    double e = 0, ref = 0;
    for (int64_t o = 0; o < q->n; o++)
        for (int64_t c = 0; c < q->k; c++) {
            double a = w[o * q->k + c], b = wna16_qlinear_value(q, o, c);
            e += (a - b) * (a - b);
            ref += a * a;
        }
    t->modules++;
    t->werr += e;
    t->wref += ref;
    t->loss += loss;
    r->rep->modules_quantized++;
}

static wna16_status read_weight(qrun *r, const wna16_module *m, float **out) {
    int64_t n = m->out * m->in;
    *out = wna16_malloc((size_t)n * sizeof(float));
    if (!*out) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "%s: weight [%lld, %lld]", m->name,
                                 (long long)m->out, (long long)m->in);
    for (int64_t i = 0; i < n; i++) (*out)[i] = wna16_view_float(m->weight, i);
    return WNA16_OK;
}

static wna16_qspec spec_for(const qrun *r, const wna16_module *m) {
    wna16_qspec s = {.bits = r->o->bits, .symmetric = r->o->symmetric,
                     .group_size = r->o->group_size, .dtype = m->weight->dtype};
    return s;
}

static void progress(qrun *r, double done, int64_t total) {
    if (r->o->progress) wna16_progress(r->d, "quantize", done, (double)total);
}

/* ----------------------------------------------------------------- RTN */

static wna16_status rtn_module(qrun *r, const qmodule *qm) {
    float *w;
    WNA16_TRY(read_weight(r, qm->m, &w));
    wna16_qspec s = spec_for(r, qm->m);
    wna16_qlinear q;
    wna16_status st = wna16_qlinear_alloc(r->d, &s, qm->m->out, qm->m->in, &q);
    if (st == WNA16_OK) {
        wna16_quant_rtn(w, &q);
        record(r, qm->m->name, w, &q, 0);
        st = add_qlinear(r, qm->m->name, &q);
    }
    wna16_qlinear_free(&q);
    wna16_free(w);
    return st;
}

/* -------------------------------------------------------------- GPTQ */

#include "quant/quantize_gptq.inc"

/* ----------------------------------------------------------- the driver */

static int cmp_mod(const void *a, const void *b) {
    return strcmp(((const qmodule *)a)->m->name, ((const qmodule *)b)->m->name);
}

static bool indivisible(const qmodule *q, int64_t gs) {
    return q->quantize && gs > 0 && q->m->in % gs;
}

/* The group sizes --group-size takes that divide the input of every linear
 * to quantize ("32, 64 or -1 (channelwise)"; -1 always does). */
static void list_working_sizes(const qrun *r, wna16_buf *b) {
    static const int64_t sizes[] = {32, 64, 128};
    int shown = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        bool ok = true;
        for (size_t i = 0; ok && i < r->n_mods; i++) ok = !indivisible(&r->mods[i], sizes[k]);
        if (ok) wna16_buf_printf(b, "%s%lld", shown++ ? ", " : "", (long long)sizes[k]);
    }
    wna16_buf_printf(b, shown ? " or -1 (channelwise)" : "only -1 (channelwise)");
}

/* Layers in order, the rest (layer -1: lm_head, ...) after them. */
static int cmp_layer_first(const void *a, const void *b) {
    const qmodule *x = *(const qmodule *const *)a, *y = *(const qmodule *const *)b;
    int64_t lx = x->layer < 0 ? INT64_MAX : x->layer, ly = y->layer < 0 ? INT64_MAX : y->layer;
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x->m->name, y->m->name);
}

/* The offending linears, summarised so that the error stays one readable
 * line on a model with hundreds: all of them when few, else the count and
 * the first linear of each distinct input size (at most 3). */
static wna16_status list_indivisible(const qrun *r, int64_t gs, size_t n_bad, wna16_buf *b) {
    enum { SHOW_ALL = 4, EXAMPLES = 3 };
    const qmodule **bad = wna16_calloc(n_bad, sizeof *bad);
    if (!bad) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "group size check");
    size_t n = 0, shown = 0;
    for (size_t i = 0; i < r->n_mods; i++)
        if (indivisible(&r->mods[i], gs)) bad[n++] = &r->mods[i];
    qsort(bad, n, sizeof *bad, cmp_layer_first);
    bool all = n <= SHOW_ALL;
    int64_t seen[EXAMPLES];
    if (!all) wna16_buf_printf(b, "%zu linears such as ", n);
    for (size_t i = 0; i < n && (all || shown < EXAMPLES); i++) {
        bool dup = false;
        for (size_t k = 0; !all && k < shown; k++) dup |= seen[k] == bad[i]->m->in;
        if (dup) continue;
        if (!all) seen[shown] = bad[i]->m->in;
        wna16_buf_printf(b, "%s%s (in %lld)", shown++ ? ", " : "", bad[i]->m->name, (long long)bad[i]->m->in);
    }
    wna16_free(bad);
    return WNA16_OK;
}

/* A group size must divide a linear's input features. Refused up front with
 * one error naming the linears and the sizes that would work (as
 * llm-compressor refuses), unless the caller asked to leave them
 * unquantized: then they join the ignore list with one warning. */
static wna16_status check_divisible(qrun *r) {
    int64_t gs = r->o->group_size;
    size_t n_bad = 0;
    for (size_t i = 0; i < r->n_mods; i++) n_bad += indivisible(&r->mods[i], gs);
    if (!n_bad) return WNA16_OK;
    wna16_buf b = {0};
    WNA16_TRY(list_indivisible(r, gs, n_bad, &b));
    if (r->o->skip_indivisible) {
        for (size_t i = 0; i < r->n_mods; i++)
            if (indivisible(&r->mods[i], gs)) r->mods[i].quantize = false;
        if (!b.failed)
            wna16_log(r->d, WNA16_LOG_WARN,
                      "group size %lld does not divide the input features of %s: left unquantized "
                      "(in the ignore list)",
                      (long long)gs, b.data);
        wna16_buf_free(&b);
        return WNA16_OK;
    }
    wna16_buf_printf(&b, "; group sizes that divide every input: ");
    list_working_sizes(r, &b);
    wna16_status s = b.failed ? wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "group size check")
                              : wna16_fail(r->d, WNA16_ERR_GROUP_SIZE,
                                           "%s: group size %lld does not divide the input features of %s; "
                                           "or leave those linears unquantized with --skip-indivisible",
                                           r->o->src, (long long)gs, b.data);
    wna16_buf_free(&b);
    return s;
}

static wna16_status plan(qrun *r) {
    const wna16_quantize_opts *o = r->o;
    static const char *const defaults[] = {"lm_head", "re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$",
                                           "re:.*block_sparse_moe.gate$"};
    r->mods = wna16_calloc(r->ck->n_modules + 1, sizeof *r->mods);
    if (!r->mods) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "modules");
    for (size_t i = 0; i < r->ck->n_modules; i++) {
        const wna16_module *m = &r->ck->modules[i];
        if (m->kind == WNA16_MODULE_PACKED || m->kind == WNA16_MODULE_GPTQ)
            return wna16_fail(r->d, WNA16_ERR_UNSUPPORTED,
                              "%s: module '%s' is already quantized; quantize the original "
                              "bf16/fp16/fp32 model",
                              o->src, m->name);
        if (m->kind != WNA16_MODULE_DENSE) continue;
        if (m->weight->dtype != WNA16_DTYPE_BF16 && m->weight->dtype != WNA16_DTYPE_F16 &&
            m->weight->dtype != WNA16_DTYPE_F32)
            return wna16_fail(r->d, WNA16_ERR_BAD_DTYPE, "%s: '%s.weight' is %s; expected BF16, F16 or F32",
                              o->src, m->name, wna16_dtype_name(m->weight->dtype));
        qmodule *q = &r->mods[r->n_mods++];
        q->m = m;
        q->layer = layer_of(m->name);
        q->quantize = true;
        bool hit = false;
        for (size_t p = 0; !hit && p < sizeof defaults / sizeof *defaults; p++)
            WNA16_TRY(pattern_match(r->d, defaults[p], m->name, &hit));
        for (size_t p = 0; !hit && p < o->n_ignore; p++) WNA16_TRY(pattern_match(r->d, o->ignore[p], m->name, &hit));
        if (hit) q->quantize = false;
    }
    qsort(r->mods, r->n_mods, sizeof *r->mods, cmp_mod);
    WNA16_TRY(check_divisible(r));
    /* the explicit ignore list: layers in order, then the rest (lm_head) */
    wna16_quantize_report *rep = r->rep;
    rep->ignored = wna16_calloc(r->n_mods + 2, sizeof *rep->ignored);
    if (!rep->ignored) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "ignore list");
    for (int64_t L = 0; L < r->ck->config.num_layers; L++)
        for (size_t i = 0; i < r->n_mods; i++)
            if (!r->mods[i].quantize && r->mods[i].layer == L)
                rep->ignored[rep->n_ignored++] = wna16_strdup(r->mods[i].m->name);
    for (size_t i = 0; i < r->n_mods; i++)
        if (!r->mods[i].quantize && (r->mods[i].layer < 0 || r->mods[i].layer >= r->ck->config.num_layers))
            rep->ignored[rep->n_ignored++] = wna16_strdup(r->mods[i].m->name);
    /* a tied lm_head has no tensor but is still an unquantized Linear module,
     * which compressed-tensors lists */
    if (!wna16_checkpoint_tensor(r->ck, "lm_head.weight") && r->ck->config.tie_word_embeddings)
        rep->ignored[rep->n_ignored++] = wna16_strdup("lm_head");
    for (size_t i = 0; i < rep->n_ignored; i++)
        if (!rep->ignored[i]) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "ignore list");
    return WNA16_OK;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const shard_entry *)a)->name, ((const shard_entry *)b)->name);
}

static wna16_status finish(qrun *r) {
    const wna16_quantize_opts *o = r->o;
    WNA16_TRY(flush_shard(r));
    r->rep->shards = r->n_shards;
    char *from = NULL, *to = NULL;
    for (int i = 1; i <= r->n_shards; i++) {
        from = wna16_asprintf("%s/part-%05d.safetensors", r->tmpdir, i);
        to = r->n_shards == 1 ? wna16_asprintf("%s/model.safetensors", r->tmpdir)
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
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", r->map[i].shard + 1, r->n_shards);
            json_object_set_new(wm, r->map[i].name, json_string(name));
        }
        json_object_set_new(idx, "metadata", meta);
        json_object_set_new(idx, "weight_map", wm);
        char *text = wna16_pyjson_dumps(idx);
        json_decref(idx);
        char *path = wna16_asprintf("%s/model.safetensors.index.json", r->tmpdir);
        char *nl = text ? wna16_asprintf("%s\n", text) : NULL;
        wna16_status s = text && path && nl ? write_text(r->d, path, nl)
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
                                                (const char *const *)r->rep->ignored, r->rep->n_ignored));
    char *text = wna16_pyjson_dumps(cfg);
    json_decref(cfg);
    char *path = wna16_asprintf("%s/config.json", r->tmpdir);
    wna16_status st = text && path ? write_text(r->d, path, text)
                                   : wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "config");
    wna16_free(text);
    wna16_free(path);
    WNA16_TRY(st);
    static const char *const extra[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "vocab.json", "merges.txt",
                                        "tokenizer.model", "chat_template.jinja", "added_tokens.json"};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) {
        char *a = wna16_asprintf("%s/%s", o->src, extra[i]), *b = wna16_asprintf("%s/%s", r->tmpdir, extra[i]);
        st = a && b ? copy_file(r->d, a, b) : wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "path");
        wna16_free(a);
        wna16_free(b);
        WNA16_TRY(st);
    }
    mode_t mask = umask(0);
    umask(mask);
    chmod(r->tmpdir, 0777 & ~mask); /* mkdtemp made it 0700 */
    if (rename(r->tmpdir, o->dst))
        return wna16_fail(r->d, WNA16_ERR_IO, "renaming %s to %s: %s", r->tmpdir, o->dst, strerror(errno));
    return WNA16_OK;
}

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
    WNA16_TRY(plan(r));
    struct stat sb;
    if (stat(o->dst, &sb) == 0)
        return wna16_fail(r->d, WNA16_ERR_INVALID_ARGUMENT, "%s already exists; remove it or choose another --out",
                          o->dst);
    r->tmpdir = wna16_asprintf("%s.tmp-XXXXXX", o->dst);
    if (!r->tmpdir) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "path");
    if (!mkdtemp(r->tmpdir)) {
        wna16_free(r->tmpdir);
        r->tmpdir = NULL;
        return wna16_fail(r->d, WNA16_ERR_IO, "cannot create %s.tmp-XXXXXX: %s", o->dst, strerror(errno));
    }
    int64_t layers = r->ck->config.num_layers;
    r->rep->layers = layers;
    r->rep->layer_seconds = wna16_calloc((size_t)layers + 1, sizeof(double));
    if (!r->rep->layer_seconds) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "report");
    size_t cap = o->max_shard_bytes ? o->max_shard_bytes : (size_t)2 << 30;
    WNA16_TRY(pass_through(r, -1));
    for (size_t i = 0; i < r->n_mods; i++)
        if (r->mods[i].layer < 0 && r->mods[i].quantize) WNA16_TRY(rtn_module(r, &r->mods[i]));
    if (o->gptq) WNA16_TRY(gptq_begin(r));
    progress(r, 0.0, layers);
    for (int64_t L = 0; L < layers; L++) {
        WNA16_TRY(check_interrupt(r->d));
        double t = wna16_now();
        WNA16_TRY(pass_through(r, L));
        if (o->gptq) {
            WNA16_TRY(gptq_layer(r, L));
        } else {
            for (size_t i = 0, n = 0; i < r->n_mods; i++)
                if (r->mods[i].layer == L && r->mods[i].quantize) {
                    WNA16_TRY(rtn_module(r, &r->mods[i]));
                    if (++n % 16 == 0) wna16_ck_release_pages(r->ck);
                }
        }
        if (r->pending_bytes >= cap) WNA16_TRY(flush_shard(r));
        wna16_ck_release_pages(r->ck); /* the source pages this layer touched */
        r->rep->layer_seconds[L] = wna16_now() - t;
        progress(r, (double)(L + 1), layers);
    }
    return finish(r);
}

static void remove_tree(const char *dir) {
    /* only what this run writes: flat files */
    static const char *const names[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "vocab.json", "merges.txt",
                                        "tokenizer.model", "chat_template.jinja", "added_tokens.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char *p = wna16_asprintf("%s/%s", dir, names[i]);
        if (p) unlink(p);
        wna16_free(p);
    }
    for (int i = 1; i < 100000; i++) {
        char *p = wna16_asprintf("%s/part-%05d.safetensors", dir, i);
        int rc = p ? unlink(p) : -1;
        wna16_free(p);
        if (rc) break;
    }
    rmdir(dir);
}

wna16_status wna16_quantize(wna16_diag *d, const wna16_quantize_opts *o, wna16_quantize_report *rep) {
    memset(rep, 0, sizeof *rep);
    if (!o || !o->src || !o->dst) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "quantize: --model and --out are required");
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
                                .actorder = o->actorder, .blocksize = 128, .threads = r.threads};
    wna16_status s = run(&r);
    gptq_end(&r);
    if (s != WNA16_OK && r.tmpdir) {
        wna16_st_writer_free(r.w);
        r.w = NULL;
        remove_tree(r.tmpdir);
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
        wna16_buf_printf(&b, "{\"layers\": %lld, \"modules_quantized\": %lld, \"seconds\": %.3f, "
                             "\"seconds_per_layer\": %.3f, \"peak_rss_bytes\": %zu, \"shards\": %d, "
                             "\"calib_tokens\": %lld, \"types\": [",
                         (long long)r->layers, (long long)r->modules_quantized, r->seconds, mean,
                         r->peak_rss_bytes, r->shards, (long long)r->calib_tokens);
        for (size_t i = 0; i < r->n_types; i++) {
            const wna16_qstat *t = &r->types[i];
            wna16_buf_printf(&b, "%s{\"type\": \"%s\", \"modules\": %lld, \"rel_weight_error\": %.6e, \"gptq_loss\": %.6e}",
                             i ? ", " : "", t->type, (long long)t->modules, t->wref > 0 ? t->werr / t->wref : 0,
                             t->loss);
        }
        wna16_buf_printf(&b, "], \"ignored\": [");
        for (size_t i = 0; i < r->n_ignored; i++) wna16_buf_printf(&b, "%s\"%s\"", i ? ", " : "", r->ignored[i]);
        wna16_buf_printf(&b, "]}\n");
    } else {
        wna16_buf_printf(&b, "quantized %lld modules in %lld layers: %.1f s (%.2f s/layer), peak RSS %.1f MiB, %d shard%s\n",
                         (long long)r->modules_quantized, (long long)r->layers, r->seconds, mean,
                         (double)r->peak_rss_bytes / 1048576.0, r->shards, r->shards == 1 ? "" : "s");
        if (r->calib_tokens) wna16_buf_printf(&b, "calibration: %lld tokens\n", (long long)r->calib_tokens);
        wna16_buf_printf(&b, "%-32s %8s %18s %14s\n", "layer type", "modules", "rel. weight error", "GPTQ loss");
        for (size_t i = 0; i < r->n_types; i++) {
            const wna16_qstat *t = &r->types[i];
            wna16_buf_printf(&b, "%-32s %8lld %18.4e %14.4e\n", t->type, (long long)t->modules,
                             t->wref > 0 ? t->werr / t->wref : 0, t->loss);
        }
        wna16_buf_printf(&b, "left unquantized: %zu module%s", r->n_ignored, r->n_ignored == 1 ? "" : "s");
        for (size_t i = 0; i < r->n_ignored && i < 4; i++) wna16_buf_printf(&b, "%s%s", i ? ", " : " (", r->ignored[i]);
        wna16_buf_printf(&b, "%s\n", r->n_ignored > 4 ? ", ...)" : r->n_ignored ? ")" : "");
    }
    if (b.failed) {
        wna16_buf_free(&b);
        return NULL;
    }
    return b.data;
}
