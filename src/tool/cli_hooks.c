/* The tool's answers to the library's callbacks: log lines and progress bars
 * on stderr (bars only on a terminal), Ctrl-C as an abort request. The
 * library itself never prints. */
#include "tool/tool.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static wna16_log_level log_level = WNA16_LOG_WARN;
static bool quiet;
static volatile sig_atomic_t interrupted;

static const char *level_name(wna16_log_level level) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    return (unsigned)level < 4 ? names[level] : "log";
}

static void print_log(void *user, wna16_log_level level, const char *message) {
    (void)user;
    fprintf(stderr, "wna16: %s: %s\n", level_name(level), message);
}

static bool parse_level(const char *text, wna16_log_level *out) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    for (int i = 0; text && i < 4; i++)
        if (!strcmp(text, names[i]) || (i == 1 && !strcmp(text, "warn"))) {
            *out = (wna16_log_level)i;
            return true;
        }
    return false;
}

int cli_take_global_flags(int *argc, char **argv) {
    int kept = 1;
    for (int i = 1; i < *argc; i++) {
        if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = true;
            log_level = WNA16_LOG_ERROR;
        } else if (!strcmp(argv[i], "--log-level")) {
            if (!parse_level(i + 1 < *argc ? argv[i + 1] : NULL, &log_level)) {
                fprintf(stderr, "wna16: --log-level expects error, warning, info or debug, got '%s'\n",
                        i + 1 < *argc ? argv[i + 1] : "(nothing)");
                return 2;
            }
            i++;
        } else {
            argv[kept++] = argv[i];
        }
    }
    argv[kept] = NULL;
    *argc = kept;
    wna16_set_log(print_log, NULL, log_level);
    return -1;
}

/* One bar per kind of work, redrawn in place; a newline when it completes. */
static void draw_progress(void *user, const char *what, double done, double total) {
    static double t0;
    static const char *current;
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (current != what || done == 0) t0 = now, current = what;
    int width = 30, filled = (int)(width * done / (total > 0 ? total : 1));
    filled = filled < 0 ? 0 : filled > width ? width : filled;
    double elapsed = now - t0, left = done > 0 ? elapsed / done * (total - done) : 0;
    fprintf(stderr, "\r%-8s [%.*s%*s] %.*f/%.0f layers %.1fs", what, filled,
            "##############################", width - filled, "", done == (double)(int64_t)done ? 0 : 1,
            done, total, elapsed);
    if (done > 0 && done < total && left > 1) fprintf(stderr, ", ~%.0fs left ", left);
    if (done >= total) fputc('\n', stderr), current = NULL;
    fflush(stderr);
}

static bool abort_requested(void *user) {
    (void)user;
    return interrupted != 0;
}

static void on_interrupt(int sig) {
    (void)sig;
    interrupted = 1;
    signal(SIGINT, SIG_DFL); /* a second Ctrl-C kills at once */
    signal(SIGTERM, SIG_DFL);
}

bool cli_progress_wanted(void) { return !quiet && isatty(STDERR_FILENO); }

void cli_install_hooks(wna16_ctx *ctx, bool progress) {
    wna16_ctx_set_log(ctx, print_log, NULL, log_level);
    wna16_ctx_set_progress(ctx, progress && cli_progress_wanted() ? draw_progress : NULL, NULL);
    wna16_ctx_set_abort(ctx, abort_requested, NULL);
}

void cli_catch_interrupts(void) {
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
}

bool cli_quiet(void) { return quiet; }
