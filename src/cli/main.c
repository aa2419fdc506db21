#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"inspect", wna16_cmd_inspect, "describe a checkpoint and whether it shards at each TP degree"},
    {"bench", wna16_cmd_bench, "microbenchmarks as fractions of this machine's limits (gemm)"},
};

static void usage(FILE *f) {
    fprintf(f, "wna16 %s — WNA16 (int4/int8 weight, 16-bit activation) inference on CPU\n\n",
            wna16_version());
    fprintf(f, "usage: wna16 <command> [options]   (wna16 <command> --help for details)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
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
