/* What the quantizer's files share (docs/quantizer.md): the state of one
 * run (qrun) and the steps its files implement. quantize.c drives a run
 * (and does RTN); quantize_plan.c decides what is quantized; gptq.c
 * calibrates and runs sequential GPTQ layer by layer; quantize_out.c writes
 * the output checkpoint; quantize_module.c reads a module's weight and
 * records its errors, for all of them. */
#ifndef WNA16_QUANT_INTERNAL_H
#define WNA16_QUANT_INTERNAL_H

#include "core/clock.h"
#include "format/checkpoint.h"
#include "quant/quant.h"
#include "runtime/runtime.h"

#include <time.h>

struct wna16_model;

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

static inline double wna16_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A running phase: start with prof_begin, add with prof_end. */
typedef struct prof_mark {
    double wall, cpu;
} prof_mark;

static inline prof_mark prof_begin(void) { return (prof_mark){wna16_now(), wna16_cpu_now()}; }

static inline void prof_end(gptq_prof *p, int phase, prof_mark m) {
    p->wall[phase] += wna16_now() - m.wall;
    p->cpu[phase] += wna16_cpu_now() - m.cpu;
}

/* Time spent inside phase `from` (still running) that belongs to `to`. */
static inline void prof_move(gptq_prof *p, int from, int to, prof_mark m) {
    double w = wna16_now() - m.wall, c = wna16_cpu_now() - m.cpu;
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
    wna16_forward_hooks hooks; /* how the calibration passes see into the forward */
    float *x; /* [samples][seq][H] hidden states entering the layer */
    int64_t n_samples, seq, hidden;
    int64_t cur_sample;
    int phase; /* 0 capture, 1 propagate */
    float *h_attn, *h_o, *h_mlp, *h_down;
    int64_t k_o, k_down;
    uint16_t *mlp_rows; /* sparse layer: mlp_in of every token, bf16 [T][H] */
    struct moe_q *moe;  /* sparse layer: its quantized experts (override) */
    struct calib_state *calib;
    gptq_prof prof;
} qrun;

/* ------------------------------------------------ quantize_module.c */

/* The caller's abort callback (the CLI's answers Ctrl-C) stops between
 * layers, experts and samples. */
wna16_status wna16_qrun_check_abort(wna16_diag *d);
/* Reports done of total layers when the run reports progress. */
void wna16_qrun_progress(qrun *r, double done, int64_t total);
/* The module's weight as fp32 [out][in] (wna16_free). */
wna16_status wna16_qrun_read_weight(qrun *r, const wna16_module *m, float **out);
/* What the module is quantized to. */
wna16_qspec wna16_qrun_spec(const qrun *r, const wna16_module *m);
/* Adds a quantized module's errors (and its GPTQ loss) to the report. */
void wna16_qrun_record(qrun *r, const char *name, const float *w, const wna16_qlinear *q,
                       double loss);

/* -------------------------------------------------- quantize_plan.c */

/* The layer index in a tensor or module name ("model.layers.3.x"), or -1. */
int64_t wna16_quant_layer_of(const char *name);
/* Which linears are quantized (defaults, the ignore list, the group size
 * check) and the explicit ignore list of the report. */
wna16_status wna16_qrun_plan(qrun *r);
/* The planned module of that name, or NULL. */
const qmodule *wna16_qrun_find(const qrun *r, const char *name);

/* --------------------------------------------------- quantize_out.c */

/* Appends a quantized linear's tensors to the pending shard. */
wna16_status wna16_qrun_add_qlinear(qrun *r, const char *prefix, const wna16_qlinear *q);
/* Copies every tensor of layer L (-1: outside layers) that is not the
 * weight of a module being quantized. */
wna16_status wna16_qrun_pass_through(qrun *r, int64_t L);
/* Writes the pending shard to the temporary directory. */
wna16_status wna16_qrun_flush_shard(qrun *r);
/* Names the shards, writes the index, config.json and the copied files,
 * and renames the temporary directory to the output. */
wna16_status wna16_qrun_finish(qrun *r);

/* ------------------------------------------------------------ gptq.c */

/* Loads the calibration runtime and the first layer's inputs. */
wna16_status wna16_qrun_gptq_begin(qrun *r);
/* Calibrates, quantizes and propagates layer L. */
wna16_status wna16_qrun_gptq_layer(qrun *r, int64_t L);
/* Frees what calibration holds (and logs where GPTQ spent its time). */
void wna16_qrun_gptq_end(qrun *r);

#endif
