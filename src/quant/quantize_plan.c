/* Planning a quantization run: which linears are quantized (the default
 * ignore patterns, the caller's, the group size check) and the explicit
 * ignore list the output's config names. */
#include "quant/quant_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

int64_t wna16_quant_layer_of(const char *name) {
    const char *p = strstr(name, "layers.");
    if (!p || (p != name && p[-1] != '.')) return -1;
    char *end;
    long v = strtol(p + 7, &end, 10);
    return end != p + 7 && *end == '.' ? v : -1;
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
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)(pat + 3), PCRE2_ZERO_TERMINATED,
                                     PCRE2_ANCHORED | PCRE2_UTF, &err, &off, NULL);
    if (!code)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "--ignore: bad regex \"%s\" at offset %zu",
                          pat, (size_t)off);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    int rc = md ? pcre2_match(code, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) : -1;
    *hit = rc >= 0;
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    return WNA16_OK;
}

const qmodule *wna16_qrun_find(const qrun *r, const char *name) {
    size_t lo = 0, hi = r->n_mods;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(r->mods[mid].m->name, name);
        if (!c) return &r->mods[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

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
        wna16_buf_printf(b, "%s%s (in %lld)", shown++ ? ", " : "", bad[i]->m->name,
                         (long long)bad[i]->m->in);
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
    wna16_status s =
        b.failed ? wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "group size check")
                 : wna16_fail(r->d, WNA16_ERR_GROUP_SIZE,
                              "%s: group size %lld does not divide the input features of %s; "
                              "or leave those linears unquantized with --skip-indivisible",
                              r->o->src, (long long)gs, b.data);
    wna16_buf_free(&b);
    return s;
}

wna16_status wna16_qrun_plan(qrun *r) {
    const wna16_quantize_opts *o = r->o;
    static const char *const defaults[] = {
        "lm_head", "re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$", "re:.*block_sparse_moe.gate$"};
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
            return wna16_fail(r->d, WNA16_ERR_BAD_DTYPE,
                              "%s: '%s.weight' is %s; expected BF16, F16 or F32", o->src, m->name,
                              wna16_dtype_name(m->weight->dtype));
        qmodule *q = &r->mods[r->n_mods++];
        q->m = m;
        q->layer = wna16_quant_layer_of(m->name);
        q->quantize = true;
        bool hit = false;
        for (size_t p = 0; !hit && p < sizeof defaults / sizeof *defaults; p++)
            WNA16_TRY(pattern_match(r->d, defaults[p], m->name, &hit));
        for (size_t p = 0; !hit && p < o->n_ignore; p++)
            WNA16_TRY(pattern_match(r->d, o->ignore[p], m->name, &hit));
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
        if (!r->mods[i].quantize &&
            (r->mods[i].layer < 0 || r->mods[i].layer >= r->ck->config.num_layers))
            rep->ignored[rep->n_ignored++] = wna16_strdup(r->mods[i].m->name);
    /* a tied lm_head has no tensor but is still an unquantized Linear module,
     * which compressed-tensors lists */
    if (!wna16_checkpoint_tensor(r->ck, "lm_head.weight") && r->ck->config.tie_word_embeddings)
        rep->ignored[rep->n_ignored++] = wna16_strdup("lm_head");
    for (size_t i = 0; i < rep->n_ignored; i++)
        if (!rep->ignored[i]) return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "ignore list");
    return WNA16_OK;
}
