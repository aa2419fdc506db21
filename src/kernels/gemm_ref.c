/* The f64 reference of a quantized linear (tests: the bound every kernel
 * meets is measured against it). */
#include "kernels/gemm.h"

#include "format/qweight.h"

void wna16_linear_ref_f64(const wna16_qweight *w, int64_t m, const float *x, int64_t ldx,
                          const float *bias, double *ref, double *sabs) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t o = 0; o < w->n; o++) {
            double s = 0, a = 0;
            for (int64_t c = 0; c < w->k; c++) {
                double v = (double)x[i * ldx + c] * (double)wna16_qweight_value(w, o, c);
                s += v;
                a += v < 0 ? -v : v;
            }
            if (bias) s += bias[o];
            ref[i * w->n + o] = s;
            if (sabs) sabs[i * w->n + o] = a;
        }
}
