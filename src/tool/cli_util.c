#include "tool/tool.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static bool copy_file(const char *cmd, const char *from_dir, const char *to_dir, const char *name) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    FILE *in = fopen(a, "rb"), *out = in ? fopen(b, "wb") : NULL;
    char buf[1 << 16];
    size_t n;
    bool ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    if (in) fclose(in);
    if (out && fclose(out)) ok = false;
    if (!ok) fprintf(stderr, "wna16 %s: cannot copy %s to %s\n", cmd, a, to_dir);
    return ok;
}

/* tokenizer.json, or a tiktoken.model (Kimi) where there is none. */
bool cli_copy_tokenizer(const char *cmd, const char *from_dir, const char *to_dir) {
    char json[1024], tt[1024];
    snprintf(json, sizeof json, "%s/tokenizer.json", from_dir);
    snprintf(tt, sizeof tt, "%s/tiktoken.model", from_dir);
    FILE *f = fopen(json, "rb"), *g = f ? NULL : fopen(tt, "rb");
    const char *name = g ? "tiktoken.model" : "tokenizer.json";
    if (f) fclose(f);
    if (g) fclose(g);
    return copy_file(cmd, from_dir, to_dir, name) &&
           copy_file(cmd, from_dir, to_dir, "tokenizer_config.json");
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cli_status_mib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n)) kib = strtod(line + n, NULL);
    if (f) fclose(f);
    return kib / 1024.0;
}

double cli_peak_rss_mib(void) { return cli_status_mib("VmHWM:"); }

void cli_print_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

bool cli_parse_double(const char *flag, const char *text, double min, double max, double *out) {
    char *end = NULL;
    errno = 0;
    double v = text ? strtod(text, &end) : 0;
    /* !(v >= min) also refuses NaN, which every comparison would let through */
    if (!text || errno || end == text || *end || !isfinite(v) || !(v >= min) || !(v <= max)) {
        fprintf(stderr, "wna16: %s expects a number in [%g, %g], got '%s'\n", flag, min, max,
                text ? text : "(nothing)");
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u64(const char *flag, const char *text, unsigned long long *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = text && *text != '-' ? strtoull(text, &end, 10) : 0;
    if (!text || *text == '-' || errno || end == text || *end) {
        fprintf(stderr, "wna16: %s expects a non-negative integer, got '%s'\n", flag,
                text ? text : "(nothing)");
        return false;
    }
    *out = v;
    return true;
}

static const char *skip_spaces(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    return p;
}

/* One id at p; NULL when there is none or it is out of int32 range. */
static const char *parse_one_id(const char *p, int32_t *id) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < INT32_MIN || v > INT32_MAX) return NULL;
    *id = (int32_t)v;
    return end;
}

static bool push_id(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
    if (*n == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 64;
        int32_t *grown = realloc(*ids, grown_cap * sizeof **ids);
        if (!grown) return false;
        *ids = grown;
        *cap = grown_cap;
    }
    (*ids)[(*n)++] = id;
    return true;
}

bool cli_parse_ids(const char *cmd, const char *text, int32_t **ids, size_t *n, size_t *cap) {
    const char *p = skip_spaces(text);
    bool bracket = *p == '[';
    if (bracket) p = skip_spaces(p + 1);
    bool need_id = true; /* at the start and after a comma an id must follow */
    while (*p && !(bracket && *p == ']')) {
        int32_t id;
        const char *end = parse_one_id(p, &id);
        if (!end || (*end && !strchr(" \t\n,]", *end))) {
            fprintf(stderr, "wna16 %s: '%s' is not a list of token ids (at '%.16s')\n", cmd, text, p);
            return false;
        }
        if (!push_id(ids, n, cap, id)) {
            fprintf(stderr, "wna16 %s: out of memory\n", cmd);
            return false;
        }
        p = skip_spaces(end);
        need_id = *p == ',';
        if (need_id) p = skip_spaces(p + 1);
    }
    bool closed = bracket && *p == ']';
    if (closed) p = skip_spaces(p + 1);
    if (need_id || *p || bracket != closed) {
        fprintf(stderr, "wna16 %s: '%s' is not a list of token ids (%s)\n", cmd, text,
                need_id ? "an id is missing" : "text after the list");
        return false;
    }
    return true;
}

bool cli_parse_list(const char *flag, const char *text, long lo, long hi, long *out, int *n,
                    int cap) {
    *n = 0;
    if (!text) return cli_parse_int(flag, NULL, lo, hi, out);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == cap || !cli_parse_int(flag, tok, lo, hi, &out[*n])) return false;
        (*n)++;
    }
    return *n > 0;
}

bool cli_parse_act_quant(const char *flag, const char *text, int *out) {
    if (text && !strcmp(text, "none")) {
        *out = WNA16_ACT_QUANT_NONE;
        return true;
    }
    if (text && !strcmp(text, "int8")) {
        *out = WNA16_ACT_QUANT_INT8;
        return true;
    }
    fprintf(stderr, "wna16: %s expects none (16-bit activations) or int8, got '%s'\n", flag,
            text ? text : "(nothing)");
    return false;
}
