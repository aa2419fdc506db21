/* What every step of a run does with one module: reads its weight, says
 * what it is quantized to, records its errors in the report; and the run's
 * progress and abort checks. */
#include "quant/quant_internal.h"

#include <stdio.h>
#include <string.h>

/* The caller's abort callback (the CLI's answers Ctrl-C) stops between layers. */
wna16_status wna16_qrun_check_abort(wna16_diag *d) {
    WNA16_TRY(wna16_check_abort(d, "quantize"));
    return WNA16_OK;
}

/* "model.layers.3.mlp.experts.7.down_proj" -> "mlp.experts.down_proj" */
static void type_of(const char *name, char *out, size_t n) {
    const char *p = strstr(name, "layers.");
    if (p && wna16_quant_layer_of(name) >= 0) {
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

void wna16_qrun_record(qrun *r, const char *name, const float *w, const wna16_qlinear *q,
                       double loss) {
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

wna16_status wna16_qrun_read_weight(qrun *r, const wna16_module *m, float **out) {
    int64_t n = m->out * m->in;
    *out = wna16_malloc((size_t)n * sizeof(float));
    if (!*out)
        return wna16_fail(r->d, WNA16_ERR_OUT_OF_MEMORY, "%s: weight [%lld, %lld]", m->name,
                          (long long)m->out, (long long)m->in);
    for (int64_t i = 0; i < n; i++) (*out)[i] = wna16_view_float(m->weight, i);
    return WNA16_OK;
}

wna16_qspec wna16_qrun_spec(const qrun *r, const wna16_module *m) {
    wna16_qspec s = {.bits = r->o->bits,
                     .symmetric = r->o->symmetric,
                     .group_size = r->o->group_size,
                     .dtype = m->weight->dtype};
    return s;
}

void wna16_qrun_progress(qrun *r, double done, int64_t total) {
    if (r->o->progress) wna16_progress(r->d, "quantize", done, (double)total);
}
