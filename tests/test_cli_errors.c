/* Every failure is an error: each command fed each class of bad argument
 * (unknown flag, missing value, not a number, NaN/inf, out of range, a path
 * that is not there, a malformed id list, ids outside the vocabulary, invalid
 * UTF-8, more tokens than the context) exits non-zero with a message on
 * stderr, and prints nothing that could pass for a result on stdout. */
#include "testing.h"

#include <stdlib.h>
#include <unistd.h>

static char out[1 << 16], err[1 << 16];

/* Runs the tool; stdout into out, stderr into err. Returns the exit status. */
static int run2(const char *args) {
    const char *cli = getenv("WNA16_CLI");
    char errpath[] = "/tmp/wna16_cli_err_XXXXXX";
    int fd = mkstemp(errpath);
    if (fd < 0) return -1;
    close(fd);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>%s", cli ? cli : "build/wna16", args, errpath);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = '\0';
    int st = p ? pclose(p) : -1;
    FILE *e = fopen(errpath, "rb");
    n = e ? fread(err, 1, sizeof err - 1, e) : 0;
    err[n] = '\0';
    if (e) fclose(e);
    unlink(errpath);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

typedef struct bad_case {
    const char *args;  /* %1$s = a model dir with a tokenizer, %2$s = a scratch dir */
    int want_rc;       /* the exit status (1 = runtime error, 2 = usage) */
    const char *want;  /* a substring of stderr */
} bad_case;

#define QW "tests/data/models/qwen3_w4a16"

static const bad_case cases[] = {
    /* failures that must never exit 0 */
    {"generate --model %1$s --prompt hello -n 5000", 1, "ERR_CONTEXT_OVERFLOW"},
    {"generate --model %1$s --prompt \"$(printf '\\377\\376')\" -n 5", 1, "ERR_INVALID_UTF8"},
    {"logits --model " QW " --ids 5000", 1, "token id 5000 at position 0 is outside the vocabulary"},
    {"logits --model " QW " --ids -1", 1, "token id -1"},
    {"logits --model " QW " --ids -1 --top 3", 1, "ERR_TOKEN_ID"},
    {"generate --model %1$s --prompt hello -n 5 --temp nan", 2, "--temp expects a number"},
    {"detokenize --tokenizer %1$s 1,,2", 2, "is not a list of token ids"},
    /* generate: every class */
    {"generate --model %1$s --prompt hi --bogus", 2, "unexpected argument '--bogus'"},
    {"generate --model %1$s --prompt", 2, "unexpected argument '--prompt'"},
    {"generate --model %1$s --prompt hi -n x", 2, "-n expects an integer"},
    {"generate --model %1$s --prompt hi -n -3", 2, "-n expects an integer"},
    {"generate --model %1$s --prompt hi --temp inf", 2, "--temp expects"},
    {"generate --model %1$s --prompt hi --temp -1", 2, "--temp expects"},
    {"generate --model %1$s --prompt hi --top-p 0", 2, "--top-p expects"},
    {"generate --model %1$s --prompt hi --top-p 1.5", 2, "--top-p expects"},
    {"generate --model %1$s --prompt hi --min-p nan", 2, "--min-p expects"},
    {"generate --model %1$s --prompt hi --repeat-penalty 0", 2, "--repeat-penalty expects"},
    {"generate --model %1$s --prompt hi --top-k -1", 2, "--top-k expects"},
    {"generate --model %1$s --prompt hi --seed -4", 2, "--seed expects"},
    /* expert parallelism (--ep) on every command that loads a model */
    {"generate --model %1$s --prompt hi --ep 0", 2, "--ep expects"},
    {"generate --model %1$s --prompt hi --ep 16", 1,
     "ERR_INVALID_ARGUMENT: --ep 16 x --tp 1 is 16 ranks for 8 routed experts"},
    {"logits --model " QW " --ids 1 --ep 65", 2, "--ep expects"},
    {"logits --model tests/data/models/deepseek_v3_w4a16 --ids 1 --ep 9", 1,
     "9 ranks for 8 routed experts: a rank would own no expert; use --ep 8 or less"},
    {"logits --model tests/data/models/mixtral_bf16 --ids 1 --ep 2", 1,
     "runs WNA16-quantized experts, and this model's experts are unquantized"},
    {"bench model --model " QW " --ep x", 2, "--ep expects"},
    {"bench model --model " QW " --ep 2", 1, "needs routed experts"},
    {"serve --model " QW " --ep 0", 2, "--ep"},
    /* --act-quant on every command that loads a model */
    {"generate --model %1$s --prompt hi --act-quant int4", 2, "--act-quant expects none"},
    {"logits --model " QW " --ids 1 --act-quant", 2, "--act-quant expects none"},
    {"perplexity --model " QW " --ids 1,2 --act-quant fp8", 2, "--act-quant expects none"},
    {"bench model --model " QW " --act-quant INT8", 2, "--act-quant expects none"},
    {"bench step --model " QW " --act-quant 8", 2, "--act-quant expects none"},
    {"serve --model " QW " --act-quant w8a8", 2, "--act-quant expects none"},
    {"generate --model %1$s --prompt hi --seed 12x", 2, "--seed expects"},
    {"generate --model %1$s --prompt hi --ctx 0", 2, "--ctx expects"},
    {"generate --model %1$s --prompt hi --threads 0", 2, "--threads expects"},
    {"generate --model %2$s/none --prompt hi", 1, "ERR_IO"},
    {"generate --model %1$s --prompt hi --tokenizer %2$s/none", 1, "ERR_IO"},
    {"generate --model %1$s --prompt hi --ctx 1", 1, "ERR_CONTEXT_OVERFLOW"},
    {"generate --model %1$s --prompt hi --chat hi", 2, "exactly one of --prompt or --chat"},
    /* logits */
    {"logits --model " QW " --ids 1,,2", 2, "is not a list of token ids"},
    {"logits --model " QW " --ids 1,2,", 2, "an id is missing"},
    {"logits --model " QW " --ids abc", 2, "is not a list of token ids"},
    {"logits --model " QW " --ids 99999999999", 2, "is not a list of token ids"},
    {"logits --model " QW " --ids ''", 2, "is not a list of token ids"},
    {"logits --model " QW " --ids 1 --top 0", 2, "--top expects"},
    {"logits --model " QW " --ids 1 --bogus", 2, "unexpected argument"},
    {"logits --model %2$s/none --ids 1", 1, "ERR_IO"},
    /* tokenize / detokenize */
    {"tokenize --tokenizer %1$s --text \"$(printf '\\303')\"", 1, "ERR_INVALID_UTF8"},
    {"tokenize --tokenizer %2$s/none --text hi", 1, "ERR_IO"},
    {"tokenize --tokenizer %1$s --file %2$s/none", 1, "cannot open"},
    {"tokenize --tokenizer %1$s --text hi --bogus", 2, "unexpected argument"},
    {"detokenize --tokenizer %1$s 1 99999999", 1, "ERR_TOKEN_ID"},
    {"detokenize --tokenizer %1$s -- -5", 2, "is not a list of token ids"},
    {"detokenize --tokenizer %1$s -5", 1, "ERR_TOKEN_ID"},
    {"detokenize --tokenizer %1$s 1x", 2, "is not a list of token ids"},
    {"detokenize --tokenizer %1$s '[1, 2'", 2, "is not a list of token ids"},
    /* inspect */
    {"inspect %2$s/none", 1, "ERR_IO"},
    {"inspect " QW " --tp 0", 2, "--tp expects"},
    {"inspect " QW " --bogus", 2, "unexpected"},
    {"inspect " QW " --ep 0", 2, "--ep expects"},
    {"inspect " QW " --ep 2 --ep 2", 2, "--ep given twice"},
    {"inspect " QW " --ep 2 --tp 1 --tp 2", 2, "give --tp once"},
    {"inspect " QW " --ep 2", 1, "ERR_UNSUPPORTED: expert parallelism (--ep 2) needs routed experts"},
    {"inspect " QW " --ep 2 --json", 1, "use --tp alone"},
    {"inspect tests/data/models/qwen3_moe_w4a16 --ep 9", 1,
     "ERR_INVALID_ARGUMENT: --ep 9 x --tp 1 is 9 ranks for 8 routed experts: a rank would own no "
     "expert; use --ep 8 or less with --tp 1"},
    {"inspect tests/data/models/deepseek_v3_w4a16 --ep 3 --tp 3", 1, "use --ep 2 or less with --tp 3"},
    /* synth / demo */
    {"synth --out %2$s/s1 --layers 0", 2, "--layers expects"},
    {"synth --out %2$s/s2 --bits 5", 2, "--bits must be 4, 8 or 16"},
    {"synth --out %2$s/s3 --preset nope", 2, "preset"},
    {"synth --out %2$s/s4 --bogus", 2, "unexpected"},
    {"demo -n -1", 2, "-n expects"},
    {"demo --bogus", 2, "unexpected"},
    /* quantize */
    {"quantize --model %2$s/none --out %2$s/q --calib-random", 1, "ERR_IO"},
    {"quantize --model " QW " --out %2$s/q", 1, "GPTQ needs calibration data"},
    {"quantize --model " QW " --out %2$s/q --group-size 48", 2, "--group-size 48"},
    {"quantize --model " QW " --out %2$s/q --dampening nan", 2, "--dampening nan"},
    {"quantize --model " QW " --out %2$s/q --samples 0", 2, "--samples expects"},
    {"quantize --model " QW " --out %2$s/q --scheme W3A16", 2, "--scheme W3A16"},
    {"quantize --model " QW " --out %2$s/q --actorder group", 2, "actorder"},
    /* hidden 64: the default group size 128 does not divide it */
    {"quantize --model tests/data/models/llama_bf16 --out %2$s/q --method rtn", 1,
     "group sizes that divide every input: 32, 64 or -1 (channelwise); or leave those linears "
     "unquantized with --skip-indivisible"},
    /* bench */
    {"bench gemm --m 0", 2, "--m"},
    {"bench gemm --bits 5", 2, "--bits"},
    {"bench gemm --isa sse9", 2, "--isa takes ref"},
    {"bench gemm --bogus", 2, "unexpected"},
    {"bench dense --m 0", 2, "--m"},
    {"bench dense --k 5,x", 2, "--k"},
    {"bench dense --isa sse9", 2, "--isa takes ref"},
    {"bench dense --bogus", 2, "unexpected"},
    {"bench moe --tokens x", 2, "--tokens"},
    {"bench moe --bogus", 2, "unexpected"},
    {"bench moe --isa sse9", 2, "--isa takes ref"},
    {"bench model --model " QW " --isa sse9", 2, "--isa takes ref"},
    {"bench step --model " QW " --isa", 2, "--isa takes ref"},
    {"bench model --model %2$s/none", 1, "ERR_IO"},
    {"bench model --model " QW " --prompt 0", 2, "--prompt"},
    {"bench model --model " QW " --prompt 5000", 1, "ERR_CONTEXT_OVERFLOW"},
    {"bench step --model %2$s/none", 1, "ERR_IO"},
    {"bench step --model " QW " --batch 0", 2, "--batch"},
    {"bench step --model " QW " --steps x", 2, "--steps"},
    {"bench step --model " QW " --context 5000", 1, "ERR_CONTEXT_OVERFLOW"},
    {"bench step", 2, "usage: wna16 bench step"},
    {"bench comm --tp 0", 2, "--tp"},
    {"bench nothing", 2, "nothing"},
    /* options of every command */
    {"--log-level loud inspect " QW, 2, "--log-level expects error, warning, info or debug"},
    {"inspect " QW " --log-level", 2, "--log-level expects"},
};

int main(void) {
    char dir[] = "/tmp/wna16_clierr_XXXXXX", args[2048], model[1100];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(model, sizeof model, "%s/model", dir);
    snprintf(args, sizeof args, "synth --out %s --tokenizer tests/data/tokenizer/qwen3", model);
    CHECK(run2(args) == 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char inner[1800];
        snprintf(inner, sizeof inner, cases[i].args, model, dir);
        int rc = run2(inner);
        /* a tool built without the HTTP server (the aarch64 cross build)
         * refuses serve before it reads the flags */
        if (!strncmp(inner, "serve", 5) && strstr(err, "built without libmicrohttpd")) continue;
        CHECK_MSG(rc == cases[i].want_rc && strstr(err, cases[i].want),
                  "'%s': exit %d (want %d), stderr \"%.300s\" (want \"%s\")", inner, rc,
                  cases[i].want_rc, err, cases[i].want);
        /* a refusal prints no result: nothing on stdout but a usage text */
        CHECK_MSG(out[0] == '\0' || strstr(out, "usage:"), "'%s' printed to stdout: \"%.200s\"",
                  inner, out);
    }
    /* the library says nothing itself: its warning comes through the tool's
     * log callback, --quiet silences it, and with stderr not a terminal no
     * progress bar is drawn */
    snprintf(args, sizeof args, "logits --model " QW " --ids 1 --top 1");
    setenv("WNA16_ISA", "bogus", 1);
    CHECK(run2(args) == 0 && strstr(err, "wna16: warning: WNA16_ISA='bogus' is not one of"));
    snprintf(args, sizeof args, "logits --model " QW " --ids 1 --top 1 --quiet");
    CHECK(run2(args) == 0 && err[0] == '\0');
    /* int8 activations at a level without the integer kernels: refused at
     * load, with the fix */
    setenv("WNA16_ISA", "ref", 1);
    snprintf(args, sizeof args, "logits --model " QW " --ids 1 --top 1 --act-quant int8");
    CHECK_MSG(run2(args) == 1 && strstr(err, "ERR_UNSUPPORTED") &&
                  strstr(err, "int8 activations need the integer kernels, which the ref level "
                              "lacks; run at an x86 (AVX2 or above) or aarch64 level"),
              "%s", err);
    unsetenv("WNA16_ISA");
    snprintf(args, sizeof args, "generate --model %s --prompt hi -n 2", model);
    CHECK(run2(args) == 0 && !strstr(err, "[#") && strstr(err, "loaded"));
    snprintf(args, sizeof args, "generate --model %s --prompt hi -n 2 -q", model);
    CHECK(run2(args) == 0 && err[0] == '\0' && out[0]);
    /* a model larger than the memory left is refused before loading, with
     * the estimate and what to do */
    setenv("WNA16_MEMORY_LIMIT", "1000000", 1);
    snprintf(args, sizeof args, "generate --model %s --prompt hi -n 2", model);
    CHECK_MSG(run2(args) == 1 && strstr(err, "ERR_OUT_OF_MEMORY") &&
                  strstr(err, "GiB of memory here (its weights) but 0.00 GiB is available "
                              "(WNA16_MEMORY_LIMIT); free memory") &&
                  !strstr(err, "loaded") && out[0] == '\0',
              "stderr \"%.300s\"", err);
    setenv("WNA16_MEMORY_LIMIT", "100000000000", 1);
    CHECK(run2(args) == 0 && strstr(err, "loaded"));
    unsetenv("WNA16_MEMORY_LIMIT");
    snprintf(args, sizeof args, "rm -rf %s", dir);
    CHECK(system(args) == 0);
    TEST_MAIN_END();
}
