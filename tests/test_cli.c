/* The CLI contract: exit codes, --help on every command, inspect's verdicts. */
#include "testing.h"

#include <stdlib.h>
#include <sys/wait.h>

static char out[1 << 16];

/* Runs the wna16 binary with args; returns its exit status, output in out. */
static int run(const char *args) {
    const char *cli = getenv("WNA16_CLI");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", cli ? cli : "build/wna16", args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
    CHECK(run("--help") == 0 && strstr(out, "inspect"));
    CHECK(run("") == 2);
    CHECK(run("frobnicate") == 2 && strstr(out, "unknown command"));
    CHECK(run("--version") == 0 && strstr(out, "wna16 "));
    CHECK(run("inspect --help") == 0 && strstr(out, "usage: wna16 inspect"));
    CHECK(run("inspect") == 2);
    CHECK(run("inspect tests/data/ct/qwen3_moe_w4a16_g32 --tp x") == 2 && strstr(out, "--tp expects"));
    CHECK(run("inspect tests/data/ct/qwen3_moe_w4a16_g32") == 0);
    CHECK(strstr(out, "W4A16 sym g32") && strstr(out, "TP=1   ok") && strstr(out, "TP=2   REFUSED"));
    CHECK(run("inspect tests/data/ct/qwen3_moe_w4a16_g32 --tp 1") == 0);
    CHECK(run("inspect tests/data/ct/qwen3_moe_w4a16_g32 --tp 2") == 1 && strstr(out, "I_p=16"));
    CHECK(run("inspect tests/data/ct/qwen3_moe_w4a16_g32 --tp 1 --tp 2 --json") == 1 &&
          strstr(out, "\"loadable\": false") && strstr(out, "\"tp\": 2, \"ok\": false"));
    CHECK(run("inspect tests/data/ct/w4a16_sym_channel --tp 2 --json") == 0 && strstr(out, "\"loadable\": true"));
    CHECK(run("inspect tests/data/ct/actorder_group") != 0 &&
          strstr(out, "runtime activation ordering (actorder=group) is not supported; re-quantize "
                      "with actorder=static (or none): it gives the same accuracy with no runtime cost"));
    CHECK(run("inspect tests/data/ct/actorder_group --json") != 0 && strstr(out, "\"loadable\": false"));
    CHECK(run("inspect /nonexistent") == 1 && strstr(out, "ERR_IO"));
    TEST_MAIN_END();
}
