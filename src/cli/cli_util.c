#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

bool cli_parse_int(const char *flag, const char *text, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || errno || end == text || *end || v < min || v > max) {
        fprintf(stderr, "wna16: %s expects an integer in [%ld, %ld], got '%s'\n", flag, min, max,
                text ? text : "(nothing)");
        return false;
    }
    *out = v;
    return true;
}

int cli_fail(const char *cmd, wna16_ctx *ctx, wna16_status s) {
    fprintf(stderr, "wna16 %s: %s: %s\n", cmd, wna16_status_str(s), wna16_ctx_error(ctx));
    return 1;
}
