#include "core/common.h"

wna16_status wna16_checkpoint_open(wna16_ctx *ctx, const char *dir, wna16_checkpoint **out) {
    (void)dir;
    *out = NULL;
    return wna16_fail(wna16_ctx_diag(ctx), WNA16_ERR_UNSUPPORTED, "not implemented yet");
}
void wna16_checkpoint_close(wna16_checkpoint *ck) { (void)ck; }
wna16_status wna16_checkpoint_report(wna16_ctx *ctx, const wna16_checkpoint *ck, const int *tp,
                                     int n_tp, bool json, char **out_text, bool *loadable) {
    (void)ctx, (void)ck, (void)tp, (void)n_tp, (void)json, (void)out_text, (void)loadable;
    return WNA16_ERR_UNSUPPORTED;
}
