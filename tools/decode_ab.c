/* Whole-model A/B of decode kernel variants (docs/performance.md, Model,
 * fourth session): loads a model once, prefills 128 tokens, then decodes in
 * 8-token windows, swapping the int4 bf16 decode kernel between variants in a
 * shuffled order every window (and re-prefilling every few windows), and
 * prints tok/s per variant. On a host whose bandwidth moves by 2x within
 * minutes, this resolved 1-2 % differences that single `bench model` runs
 * (one variant per process) could not.
 *
 * The variants are the decode kernel's source compiled with different -D
 * flags, each object's symbols prefixed v0_, v1_, ...; tools/decode_ab.sh
 * builds them and this driver and runs it:
 *   bash tools/decode_ab.sh MODEL_DIR WINDOWS "-DWNA16_DECODE_PREFETCH2=6144" \
 *        "-DWNA16_DECODE_PREFETCH2=8192"
 * Not part of the build or CI. */
#include "wna16.h"

#include "kernels/machine_limits.h"
#include "kernels/ukernel.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef NV
#define NV 2
#endif

#define DECL(v)                                                                                    \
    void v##_wna16_gemv_q4_bf16_4x32__avx512bf16(const wna16_block_layout *, const uint8_t *,      \
                                                 size_t, size_t, const void *, size_t, float *,    \
                                                 const uint8_t *);
DECL(v0)
DECL(v1)
#if NV > 2
DECL(v2)
#endif
#if NV > 3
DECL(v3)
#endif

static int32_t argmax(const float *v, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return (int32_t)b;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: decode_ab MODEL_DIR WINDOWS\n");
        return 2;
    }
    int windows = atoi(argv[2]);
    wna16_gemv2_fn fns[] = {
        v0_wna16_gemv_q4_bf16_4x32__avx512bf16,
        v1_wna16_gemv_q4_bf16_4x32__avx512bf16,
#if NV > 2
        v2_wna16_gemv_q4_bf16_4x32__avx512bf16,
#endif
#if NV > 3
        v3_wna16_gemv_q4_bf16_4x32__avx512bf16,
#endif
    };
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    wna16_model_options mo = {.threads = 2, .context = 4096, .progress = true};
    wna16_model *m;
    if (wna16_model_load(ctx, argv[1], &mo, &m) != WNA16_OK) {
        fprintf(stderr, "decode_ab: %s\n", wna16_ctx_error(ctx));
        return 1;
    }
    int64_t vocab = wna16_model_vocab_size(m);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    /* the table is const to the library; this dev tool swaps one entry */
    wna16_kernel_table *table = (wna16_kernel_table *)wna16_kernels();
    double seconds[NV] = {0}, bw = 0;
    long tokens[NV] = {0}, samples = 0;
    unsigned rs = 11;
    for (int w = 0; w < windows; w += 3 * NV) {
        int32_t ids[128];
        for (int i = 0; i < 128; i++) ids[i] = (int32_t)((i * 7919) % vocab);
        wna16_model_reset(m);
        wna16_model_eval(ctx, m, ids, 128, logits);
        int32_t id = argmax(logits, vocab);
        bw += wna16_measure_read_bw(2, (size_t)1 << 30, 1);
        samples++;
        for (int block = 0; block < 3; block++) {
            int order[NV];
            for (int v = 0; v < NV; v++) order[v] = v;
            for (int v = NV - 1; v > 0; v--) {
                rs = rs * 1103515245u + 12345u;
                int z = (int)((rs >> 16) % (unsigned)(v + 1)), t = order[v];
                order[v] = order[z], order[z] = t;
            }
            for (int i = 0; i < NV; i++) {
                int v = order[i];
                table->gemv_q4_bf16 = fns[v];
                double t0 = omp_get_wtime();
                for (int k = 0; k < 8; k++) {
                    wna16_model_eval(ctx, m, &id, 1, logits);
                    id = argmax(logits, vocab);
                }
                seconds[v] += omp_get_wtime() - t0;
                tokens[v] += 8;
            }
        }
    }
    printf("read bandwidth, mean of %ld samples: %.1f GB/s\n", samples, bw / (double)samples);
    for (int v = 0; v < NV; v++)
        printf("variant %d: %.2f tok/s (%ld tokens)\n", v, (double)tokens[v] / seconds[v],
               tokens[v]);
    free(logits);
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    return 0;
}
