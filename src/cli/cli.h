/* Sub-commands of the `wna16` tool. Each lives in cmd_<name>.c, parses its
 * own flags, prints --help, and returns the process exit status. The
 * commands use the public API only (wna16.h); the helpers they share with
 * the benchmarks are in src/tool, `wna16 bench` in src/bench. */
#ifndef WNA16_CLI_H
#define WNA16_CLI_H

#include "bench/bench.h"
#include "tool/tool.h"
#include "wna16.h"

int wna16_cmd_inspect(int argc, char **argv);
int wna16_cmd_logits(int argc, char **argv);
int wna16_cmd_generate(int argc, char **argv);
int wna16_cmd_synth(int argc, char **argv);
int wna16_cmd_demo(int argc, char **argv);
int wna16_cmd_tokenize(int argc, char **argv);
int wna16_cmd_detokenize(int argc, char **argv);
int wna16_cmd_quantize(int argc, char **argv);
int wna16_cmd_serve(int argc, char **argv);
int wna16_cmd_perplexity(int argc, char **argv);

#endif
