#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"inspect", wna16_cmd_inspect, "describe a checkpoint and whether it shards at each TP degree"},
    {"demo", wna16_cmd_demo, "build a tiny Qwen3-MoE W4A16 model and run inspect + generate on it"},
    {"generate", wna16_cmd_generate, "stream a continuation of a prompt or a chat turn"},
    {"serve", wna16_cmd_serve, "serve the model over HTTP as OpenAI's API (continuous batching)"},
    {"synth", wna16_cmd_synth,
     "write a random-weight checkpoint with real shapes (demo, qwen3-30b-a3b)"},
    {"logits", wna16_cmd_logits, "print the last-position logits of a prompt of token ids"},
    {"perplexity", wna16_cmd_perplexity,
     "perplexity of a text (sliding windows), with its standard error"},
    {"bench", wna16_cmd_bench,
     "speed as fractions of this machine's limits (gemm, moe, model, comm)"},
    {"tokenize", wna16_cmd_tokenize, "encode text to token ids with a tokenizer.json"},
    {"detokenize", wna16_cmd_detokenize, "decode token ids to text with a tokenizer.json"},
    {"quantize", wna16_cmd_quantize,
     "quantize a bf16/fp16/fp32 model (GPTQ or RTN) to compressed-tensors"},
};

static void usage(FILE *f) {
    fprintf(f, "wna16 %s — WNA16 (int4/int8 weight, 16-bit activation) inference on CPU\n\n",
            wna16_version());
    fprintf(f, "usage: wna16 <command> [options]   (wna16 <command> --help for details)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nOptions for every command:\n"
               "  --quiet, -q          only errors on stderr (no progress bars, no summaries)\n"
               "  --log-level LEVEL    error, warning (default), info or debug\n"
               "Progress bars are drawn only when stderr is a terminal.\n");
}

int main(int argc, char **argv) {
    int rc = cli_take_global_flags(&argc, argv);
    if (rc >= 0) return rc;
    if (argc < 2 || cli_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("wna16 %s\n", wna16_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "wna16: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
