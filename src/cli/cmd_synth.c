#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static void synth_help(FILE *f) {
    fprintf(
        f,
        "usage: wna16 synth --out DIR [--preset demo|qwen3-30b-a3b|kimi-k2] [--layers N]\n"
        "                   [--bits 4|8|16] [--group N] [--asym] [--dense] [--seed S]\n"
        "                   [--tokenizer DIR]\n\n"
        "Writes a random-weight checkpoint with real shapes as compressed-tensors\n"
        "pack-quantized (or bf16 with --bits 16): the embedded demo model, the exact\n"
        "Qwen3-30B-A3B shapes (W4A16 g128), or Kimi-K2's (DeepseekV3ForCausalLM: routed\n"
        "experts W4A16 g32, the rest bf16; ~10 GB a MoE layer, so cut it: --layers 2 is\n"
        "the dense layer and one MoE layer, ~14 GB) for speed measurements without\n"
        "downloading anything; --layers cuts a preset. --dense writes a Qwen3ForCausalLM\n"
        "instead. --tokenizer DIR copies DIR's tokenizer.json and tokenizer_config.json\n"
        "beside it, so that `wna16 generate` runs on it (demo and qwen3-30b-a3b have\n"
        "Qwen3's vocabulary: from the repository root, --tokenizer tests/data/tokenizer/qwen3).\n");
}

int wna16_cmd_synth(int argc, char **argv) {
    const char *out = NULL, *preset = "demo", *tokdir = NULL;
    long layers = 0, bits = 0, group = 0, seed = -1;
    bool asym = false, dense = false;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(argv[i])) return synth_help(stdout), 0;
        else if (!strcmp(argv[i], "--out") && v) out = argv[++i];
        else if (!strcmp(argv[i], "--preset") && v) preset = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && v)
            tokdir = argv[++i];
        else if (!strcmp(argv[i], "--layers")) { if (!cli_parse_int("--layers", v, 1, 4096, &layers)) return 2; i++; }
        else if (!strcmp(argv[i], "--bits")) { if (!cli_parse_int("--bits", v, 4, 16, &bits)) return 2; i++; }
        else if (!strcmp(argv[i], "--group")) { if (!cli_parse_int("--group", v, -1, 1 << 20, &group)) return 2; i++; }
        else if (!strcmp(argv[i], "--seed")) { if (!cli_parse_int("--seed", v, 0, 1L << 40, &seed)) return 2; i++; }
        else if (!strcmp(argv[i], "--asym")) asym = true;
        else if (!strcmp(argv[i], "--dense")) dense = true;
        else {
            fprintf(stderr, "wna16 synth: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!out) {
        synth_help(stderr);
        return 2;
    }
    if (bits && bits != 4 && bits != 8 && bits != 16) {
        fprintf(stderr, "wna16 synth: --bits must be 4, 8 or 16\n");
        return 2;
    }
    wna16_synth_options o;
    wna16_synth_options_init(&o);
    o.preset = preset;
    o.layers = layers;
    o.bits = (int)bits;
    o.group_size = group;
    o.seed = seed;
    o.dense = dense;
    o.asymmetric = asym;
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, true);
    wna16_status s = wna16_synth_write(ctx, &o, out);
    int rc = s == WNA16_OK ? 0 : cli_fail("synth", ctx, s);
    if (s == WNA16_ERR_INVALID_ARGUMENT) rc = 2; /* a flag's value the library refused */
    if (!rc && tokdir && !cli_copy_tokenizer("synth", tokdir, out)) rc = 1;
    if (!rc) fprintf(stderr, "wrote %s%s\n", out, tokdir ? " (with the tokenizer)" : "");
    wna16_ctx_free(ctx);
    return rc;
}
