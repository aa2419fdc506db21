/* The CLI contract: exit codes, --help on every command, inspect's verdicts. */
#include "testing.h"

#include <stdlib.h>
#include <math.h>
#include <stdbool.h>
#include <sys/wait.h>

#include "tool/roofline.h"

/* The engine's roofline holds its limits to the steps it sees: a step faster
 * than its floor raises the limit it beat, so the floor never passes the
 * step's time, and a slower step leaves them. */
static void test_roofline_track(void) {
    srv_roofline r = {.read_gbs = 10, .peak_gflops = 100, .logit_peak_gflops = 50,
                      .dense_bytes = 1e9, .row_flops = 1e9, .logit_flops = 1e9};
    CHECK(fabs(srv_roofline_seconds(&r, 1, 1) - 0.1) < 1e-12); /* bytes: 0.1 s > 0.03 s */
    CHECK(fabs(srv_roofline_track(&r, 1, 1, -1, 0.2) - 0.1) < 1e-12 && r.read_gbs == 10);
    CHECK(fabs(srv_roofline_track(&r, 1, 1, -1, 0.05) - 0.05) < 1e-12);
    CHECK(fabs(r.read_gbs - 20) < 1e-9 && r.peak_gflops == 100);
    /* 100 rows: compute 100 * (1e9 / 100e9 + 1e9 / 50e9) = 3 s > 0.05 s of bytes */
    CHECK(fabs(srv_roofline_seconds(&r, 100, 100) - 3.0) < 1e-9);
    CHECK(fabs(srv_roofline_track(&r, 100, 100, -1, 1.5) - 1.5) < 1e-9);
    CHECK(fabs(r.peak_gflops - 200) < 1e-6 && fabs(r.logit_peak_gflops - 100) < 1e-6);
    srv_roofline none = {0};
    CHECK(srv_roofline_track(&none, 4, 4, -1, 0.1) == 0); /* no bandwidth: no estimate */
    /* routed experts: the bytes the step read when it knows them, the
     * uniform-routing estimate (-1) when not: 4 rows of top-2 among 8 experts
     * touch 8 * (1 - (3/4)^4) = 5.47 of them (5.47 GB of 8), a step that
     * read 2 GB of them is held to (1 + 2) / 20 s */
    srv_roofline moe = {.read_gbs = 20, .dense_bytes = 1e9, .expert_bytes = 8e9, .n_experts = 8,
                        .top_k = 2};
    double est = (1e9 + 8e9 * (1 - pow(0.75, 4))) / 20e9;
    CHECK(fabs(srv_roofline_track(&moe, 4, 4, -1, 10) - est) < 1e-9);
    CHECK(fabs(srv_roofline_track(&moe, 4, 4, 2e9, 10) - 0.15) < 1e-9 && moe.read_gbs == 20);
    /* a step of 0.1 s that read 2 GB of experts: 30 GB/s, the limit rises */
    CHECK(fabs(srv_roofline_track(&moe, 4, 4, 2e9, 0.1) - 0.1) < 1e-9 &&
          fabs(moe.read_gbs - 30) < 1e-9);
}

/* Every number after `key` in json (up to `end`, or the one after it) is <= 1. */
static bool fractions_at_most_1(const char *json, const char *key, const char *end) {
    int seen = 0;
    for (const char *p = json; (p = strstr(p, key)); seen++) {
        p += strlen(key);
        const char *stop = end ? strstr(p, end) : NULL;
        for (const char *v = p; v && *v && (!stop || v < stop);) {
            const char *colon = stop ? strstr(v, ": ") : v - 2;
            if (!colon || (stop && colon > stop)) break;
            char *after;
            double f = strtod(colon + 2, &after);
            if (after == colon + 2 || f > 1.0) return false;
            if (!stop) break;
            v = after;
        }
    }
    return seen > 0;
}

static char out[1 << 16];

/* Runs the wna16 tool with args; returns its exit status, output in out. */
static int run(const char *args) { return test_run_cli(args, out, sizeof out, 1); }

/* generate --json's "tokens": [...] list, copied into buf. */
static bool json_tokens(const char *json, char *buf, size_t cap) {
    const char *a = strstr(json, "\"tokens\": ["), *b = a ? strchr(a, ']') : NULL;
    if (!b || (size_t)(b - a) >= cap) return false;
    memcpy(buf, a, (size_t)(b - a));
    buf[b - a] = '\0';
    return true;
}

/* Each "--flag" of text not in `in` is appended to missing (space-separated). */
static void flags_missing(const char *text, const char *in, char *missing, size_t cap) {
    for (const char *p = text; (p = strstr(p, "--"));) {
        const char *q = p + 2;
        while ((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-') q++;
        if (p[2] == '-' || (p > text && p[-1] == '-')) { /* a link anchor, not a flag */
            p = q;
            continue;
        }
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)(q - p), p);
        bool found = false;
        for (const char *h = in; !found && (h = strstr(h, flag)); h++) {
            char next = h[strlen(flag)];
            found = !((next >= 'a' && next <= 'z') || (next >= '0' && next <= '9') || next == '-');
        }
        if (q - p > 2 && !found && strlen(missing) + strlen(flag) + 2 < cap) {
            strcat(missing, " ");
            strcat(missing, flag);
        }
        p = q;
    }
}

/* docs/cli.md's `wna16 inspect` rows and `inspect --help` name the same flags. */
static void test_inspect_help_matches_docs(void) {
    FILE *f = fopen("docs/cli.md", "r");
    CHECK(f != NULL);
    if (!f) return;
    static char doc[1 << 14], line[1 << 14];
    doc[0] = '\0';
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "| `wna16 inspect ", 17) && strlen(doc) + strlen(line) < sizeof doc)
            strcat(doc, line);
    fclose(f);
    CHECK(run("inspect --help") == 0);
    char undocumented[512] = "", unhelped[512] = "";
    flags_missing(out, doc, undocumented, sizeof undocumented);
    flags_missing(doc, out, unhelped, sizeof unhelped);
    CHECK_MSG(strstr(doc, "--ep") && !undocumented[0] && !unhelped[0],
              "inspect --help has flags docs/cli.md lacks:%s; docs/cli.md has flags --help lacks:%s",
              undocumented, unhelped);
}

int main(void) {
    test_roofline_track();
    test_inspect_help_matches_docs();
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
    /* expert parallelism plans what TP=2 refuses here: whole experts, split by rank */
    CHECK(run("inspect tests/data/ct/qwen3_moe_w4a16_g32 --ep 2") == 0 &&
          strstr(out, "EP=2 x TP=1: 2 ranks, 8 routed experts") && strstr(out, "0-3 (4)") &&
          strstr(out, "4-7 (4)") && strstr(out, "over all 2 ranks\n") && !strstr(out, "REFUSED"));
    CHECK(run("inspect tests/data/ct/qwen3_moe_w4a16_g32 --ep 2 --tp 2") == 0 &&
          strstr(out, "EP=2 x TP=2: 4 ranks") && strstr(out, "6-7 (2)") &&
          strstr(out, "at TP=2: ok") && !strstr(out, "I_p=16"));
    CHECK(run("inspect tests/data/models/deepseek_v3_w4a16 --ep 2 --tp 2 --json") == 0 &&
          strstr(out, "\"world\": 4") && strstr(out, "\"rank\": 3, \"group\": 1, \"tp_rank\": 1, "
                                                    "\"expert_begin\": 6, \"expert_count\": 2") &&
          strstr(out, "\"loadable\": true"));
    CHECK(run("inspect tests/data/models/deepseek_v3_w4a16 --ep 4") == 0 &&
          strstr(out, "over all 4 ranks (routed experts; shared experts from group 0)") &&
          strstr(out, "6-7 (2)"));
    CHECK(run("inspect tests/data/models/qwen3_moe_w4a16 --ep 3") == 0 && strstr(out, "0-2 (3)") &&
          strstr(out, "3-5 (3)") && strstr(out, "6-7 (2)"));
    CHECK(run("inspect tests/data/models/qwen3_moe_w4a16 --ep 16") == 1 &&
          strstr(out, "16 ranks for 8 routed experts"));
    CHECK(run("inspect tests/data/ct/w4a16_sym_channel --tp 2 --json") == 0 && strstr(out, "\"loadable\": true"));
    CHECK(run("inspect tests/data/ct/actorder_group") != 0 &&
          strstr(out, "runtime activation ordering (actorder=group) is not supported; re-quantize "
                      "with actorder=static (or none): it gives the same accuracy with no runtime cost"));
    CHECK(run("inspect tests/data/ct/actorder_group --json") != 0 && strstr(out, "\"loadable\": false"));
    CHECK(run("inspect /nonexistent") == 1 && strstr(out, "ERR_IO"));
    /* the demo: builds, inspects, generates at TP=1 and TP=2, and they agree */
    char dir[] = "/tmp/wna16_demo_XXXXXX", cmd[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(cmd, sizeof cmd, "demo --dir %s/model -n 8", dir);
    CHECK(run(cmd) == 0 && strstr(out, "TP=1 and TP=2 agree: 8 tokens identical") &&
          strstr(out, "W4A16 sym g32") && strstr(out, "TP=2   ok"));
    snprintf(cmd, sizeof cmd, "generate --model %s/model --chat hello -n 5 --json", dir);
    CHECK(run(cmd) == 0 && strstr(out, "\"generated_tokens\": 5") && strstr(out, "\"decode_tok_s\""));
    /* expert parallelism, ranks as threads: EP=2 and TP=2 x EP=2 greedy as TP=1 */
    static char tokens1[512];
    snprintf(cmd, sizeof cmd, "generate --model %s/model --prompt hello -n 8 --json", dir);
    CHECK(run(cmd) == 0 && json_tokens(out, tokens1, sizeof tokens1));
    for (int tp = 1; tp <= 2; tp++) {
        char got[512];
        snprintf(cmd, sizeof cmd,
                 "generate --model %s/model --prompt hello -n 8 --json --ep 2 --tp %d", dir, tp);
        bool ok = run(cmd) == 0 && strstr(out, "\"ep\": 2") &&
                  strstr(out, "\"backend\": \"threads\"") && json_tokens(out, got, sizeof got);
        CHECK_MSG(ok && !strcmp(got, tokens1), "generate --ep 2 --tp %d: %s", tp, out);
    }
    snprintf(cmd, sizeof cmd, "generate --model %s/model --prompt hello -n 4 --tp 2 --temp 0.8 --top-k 20 --seed 7", dir);
    CHECK(run(cmd) == 0 && strstr(out, "decode") && strstr(out, "tok/s"));
    CHECK(run("generate --help") == 0 && strstr(out, "--chat"));
    CHECK(run("generate --model x") == 2);
    snprintf(cmd, sizeof cmd, "generate --model %s/model --prompt hi --tp 3", dir);
    CHECK(run(cmd) == 1 && strstr(out, "ERR_TP_INDIVISIBLE"));
    /* synth with a tokenizer: generate runs on it; a missing tokenizer is an error */
    snprintf(cmd, sizeof cmd, "synth --out %s/synth --tokenizer tests/data/tokenizer/qwen3", dir);
    CHECK(run(cmd) == 0 && strstr(out, "with the tokenizer"));
    snprintf(cmd, sizeof cmd, "generate --model %s/synth --prompt hi -n 3 --json", dir);
    CHECK(run(cmd) == 0 && strstr(out, "\"generated_tokens\": 3"));
    snprintf(cmd, sizeof cmd, "synth --out %s/synth2 --tokenizer %s/none", dir, dir);
    CHECK(run(cmd) == 1 && strstr(out, "cannot copy") && strstr(out, "none/tokenizer.json"));
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    CHECK(run("synth --help") == 0 && strstr(out, "--tokenizer") && run("demo --help") == 0 &&
          run("logits --help") == 0);
    CHECK(run("logits --model tests/data/models/qwen3_w4a16 --ids 1,2,3 --top 1") == 0);
    /* bench step: one result per batch size, each with its roofline and phases */
    CHECK(run("bench step --help") == 0 && strstr(out, "roofline"));
    CHECK(run("bench step --model tests/data/models/qwen3_w4a16 --batch 1,3 --context 5 --steps 5 "
              "--breakdown --json") == 0);
    CHECK(strstr(out, "\"batch\": 1, \"step_ms\"") && strstr(out, "\"batch\": 3, \"step_ms\""));
    CHECK(strstr(out, "\"roofline_fraction\"") && strstr(out, "\"lm_head\"") &&
          strstr(out, "\"fraction_of_floor\"") && strstr(out, "]}\n"));
    /* no fraction above 1, whatever the probes measured */
    CHECK(fractions_at_most_1(out, "\"roofline_fraction\": ", NULL));
    CHECK(fractions_at_most_1(out, "\"fraction_of_floor\": {", "}"));
    CHECK(strstr(out, "\"routed_expert_bytes_per_step\": 0,")); /* a dense model */
    /* a MoE model: the routed experts its steps read, counted as they run */
    CHECK(run("bench step --model tests/data/models/qwen3_moe_w4a16 --batch 2 --context 5 "
              "--steps 4 --json") == 0);
    const char *eb = strstr(out, "\"routed_expert_bytes_per_step\": ");
    CHECK(eb && atof(eb + strlen("\"routed_expert_bytes_per_step\": ")) > 0);
    CHECK(fractions_at_most_1(out, "\"roofline_fraction\": ", NULL));
    TEST_MAIN_END();
}
