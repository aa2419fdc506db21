/* A tiny test harness: CHECK records a failure and continues, so one run
 * shows every broken case; main returns non-zero if anything failed. */
#ifndef WNA16_TESTING_H
#define WNA16_TESTING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int test_failures;
static int test_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Asserts a status and that the context's detail contains a substring. */
static inline int test_contains(const char *hay, const char *needle) {
    return !needle || strstr(hay, needle) != NULL;
}

#define CHECK_STATUS(ctx, expr, want, substr)                                                      \
    do {                                                                                           \
        wna16_status got_ = (expr);                                                                \
        test_checks++;                                                                             \
        const char *detail_ = wna16_ctx_error(ctx);                                                \
        if (got_ != (want) || !test_contains(detail_, substr)) {                                   \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: %s -> %s (want %s), detail \"%s\" (want \"%s\")\n", __FILE__,  \
                    __LINE__, #expr, wna16_status_str(got_), wna16_status_str(want), detail_,      \
                    (const char *)(substr) ? (const char *)(substr) : "");                         \
        }                                                                                          \
    } while (0)

/* Runs the wna16 tool (WNA16_CLI, set by ctest, else build/wna16) with args;
 * its stdout (and stderr when with_stderr) goes to out. Returns the exit
 * status, -1 when it could not run. */
static inline int test_run_cli(const char *args, char *out, size_t cap, int with_stderr) {
    const char *cli = getenv("WNA16_CLI");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s", cli ? cli : "build/wna16", args,
             with_stderr ? "2>&1" : "2>/dev/null");
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define TEST_MAIN_END()                                                                            \
    do {                                                                                           \
        printf("%d checks, %d failed\n", test_checks, test_failures);                              \
        return test_failures ? 1 : 0;                                                              \
    } while (0)

#endif
