/* TEMPORARY: placeholders until the fused MoE layer lands (branch moe). */
#include "moe/moe.h"

wna16_status wna16_moe_layer_load(wna16_diag *d, const struct wna16_checkpoint *ck,
                                  const char *prefix, const wna16_moe_config *cfg, int tp,
                                  int rank, wna16_moe_layer **out) {
    (void)ck, (void)cfg, (void)tp, (void)rank;
    *out = NULL;
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED, "%s: MoE layers are not available yet", prefix);
}
void wna16_moe_layer_free(wna16_moe_layer *layer) { (void)layer; }
size_t wna16_moe_layer_bytes(const wna16_moe_layer *layer) { (void)layer; return 0; }
wna16_status wna16_moe_layer_forward(wna16_diag *d, const wna16_moe_layer *layer, int64_t tokens,
                                     const uint16_t *x, int64_t ldx, float *y, int n_threads) {
    (void)layer, (void)tokens, (void)x, (void)ldx, (void)y, (void)n_threads;
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED, "MoE");
}
