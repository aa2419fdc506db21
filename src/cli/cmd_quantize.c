/* wna16 quantize: RTN or GPTQ (static act-order) to a compressed-tensors
 * pack-quantized checkpoint. docs/quantizer.md. */
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quantize_help(FILE *f) {
    fprintf(f,
            "usage: wna16 quantize --model SRC_DIR --out DST_DIR [options]\n\n"
            "Quantizes a bf16/fp16/fp32 safetensors text model (any architecture wna16 runs:\n"
            "docs/models.md) to a compressed-tensors pack-quantized checkpoint that vLLM, transformers\n"
            "and wna16 load. The output is built in DST_DIR.tmp-XXXXXX and renamed when complete.\n\n"
            "  --scheme W4A16|W4A16_ASYM|W8A16   weights int4 sym / int4 asym / int8 sym (W4A16)\n"
            "  --group-size 32|64|128|-1         columns per scale group; -1 = channelwise (128)\n"
            "  --method gptq|rtn                 GPTQ (sequential, llm-compressor's algorithm) or\n"
            "                                    compressed-tensors min-max round-to-nearest (gptq)\n"
            "  --actorder static|none            GPTQ column order by decreasing diag(H); groups\n"
            "                                    stay contiguous, no g_idx is written (static)\n"
            "  --dampening F                     GPTQ dampening fraction of mean(diag H) (0.01)\n"
            "  --calib-random                    calibrate on seeded random token ids (worse than\n"
            "                                    RTN on real text; GPTQ without calibration data\n"
            "                                    is refused unless this is given)\n"
            "  --calib-ids FILE                  calibrate on token ids from FILE (whitespace or\n"
            "                                    comma separated), cut into --seq-len samples\n"
            "  --calib FILE.txt                  calibrate on UTF-8 text, tokenized with the model's\n"
            "                                    tokenizer.json, cut into --seq-len samples\n"
            "  --seed N                          seed for --calib-random (0)\n"
            "  --samples N                       calibration sequences (128)\n"
            "  --seq-len L                       tokens per sequence (512, capped at the model's\n"
            "                                    max_position_embeddings)\n"
            "  --ignore PATTERN...               more linears to leave unquantized: a module name,\n"
            "                                    or re:REGEX (matched at the start, like re.match).\n"
            "                                    Always ignored: lm_head, re:.*mlp.gate$,\n"
            "                                    re:.*mlp.shared_expert_gate$, re:.*block_sparse_moe.gate$\n"
            "  --skip-indivisible                leave linears whose input features the group size\n"
            "                                    does not divide unquantized (without it such a\n"
            "                                    group size is refused, naming the sizes that work)\n"
            "  --max-shard-size MiB              start a new shard past this size (2048)\n"
            "  --threads N                       compute threads (all cores)\n"
            "  --no-progress                     no progress bar\n"
            "  --json                            print the summary as JSON\n");
}


int wna16_cmd_quantize(int argc, char **argv) {
    wna16_quantize_options o;
    wna16_quantize_options_init(&o);
    const char **ignore = calloc((size_t)argc + 1, sizeof *ignore);
    bool json = false, progress = true;
    long v;
    if (!ignore) return 1;
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            quantize_help(stdout);
            free(ignore);
            return 0;
        } else if (!strcmp(a, "--model") && next) o.model = argv[++i];
        else if (!strcmp(a, "--out") && next) o.output = argv[++i];
        else if (!strcmp(a, "--scheme") && next) {
            i++;
            if (!strcmp(next, "W4A16") || !strcmp(next, "W4A16_ASYM") || !strcmp(next, "W8A16"))
                o.scheme = next;
            else {
                fprintf(stderr, "wna16 quantize: --scheme %s: expected W4A16, W4A16_ASYM or W8A16\n", next);
                goto out;
            }
        } else if (!strcmp(a, "--group-size") && next) {
            i++;
            if (!strcmp(next, "-1")) o.group_size = -1;
            else if (!strcmp(next, "32") || !strcmp(next, "64") || !strcmp(next, "128")) o.group_size = atoi(next);
            else {
                fprintf(stderr, "wna16 quantize: --group-size %s: expected 32, 64, 128 or -1\n", next);
                goto out;
            }
        } else if (!strcmp(a, "--method") && next) {
            i++;
            if (!strcmp(next, "gptq") || !strcmp(next, "rtn")) o.method = next;
            else {
                fprintf(stderr, "wna16 quantize: --method %s: expected gptq or rtn\n", next);
                goto out;
            }
        } else if (!strcmp(a, "--actorder") && next) {
            i++;
            /* group and dynamic: the library's refusal says what to use instead */
            if (!strcmp(next, "static") || !strcmp(next, "weight") || !strcmp(next, "none") ||
                !strcmp(next, "group") || !strcmp(next, "dynamic"))
                o.actorder = next;
            else {
                fprintf(stderr, "wna16 quantize: --actorder %s: expected static or none\n", next);
                goto out;
            }
        } else if (!strcmp(a, "--dampening") && next) {
            char *end;
            o.dampening = strtod(argv[++i], &end);
            if (*end || !(o.dampening > 0) || o.dampening >= 1) {
                fprintf(stderr, "wna16 quantize: --dampening %s: expected a fraction in (0, 1)\n", next);
                goto out;
            }
        } else if (!strcmp(a, "--calib-random")) {
            o.calib_ids = o.calib_text = NULL;
            o.calib_random = true;
        } else if (!strcmp(a, "--calib-ids") && next) {
            o.calib_ids = argv[++i];
            o.calib_text = NULL;
            o.calib_random = false;
        } else if (!strcmp(a, "--calib") && next) {
            o.calib_text = argv[++i];
            o.calib_ids = NULL;
            o.calib_random = false;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_int("--seed", next, 0, 2147483647L, &v)) goto out;
            o.seed = (uint64_t)v;
            i++;
        } else if (!strcmp(a, "--samples")) {
            if (!cli_parse_int("--samples", next, 1, 1 << 20, &v)) goto out;
            o.num_samples = v;
            i++;
        } else if (!strcmp(a, "--seq-len")) {
            if (!cli_parse_int("--seq-len", next, 1, 1 << 20, &v)) goto out;
            o.seq_len = v;
            i++;
        } else if (!strcmp(a, "--max-shard-size")) {
            if (!cli_parse_int("--max-shard-size", next, 1, 1 << 30, &v)) goto out;
            o.max_shard_bytes = (size_t)v << 20;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int("--threads", next, 1, 1024, &v)) goto out;
            o.threads = (int)v;
            i++;
        } else if (!strcmp(a, "--ignore") && next) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) ignore[o.n_ignore++] = argv[++i];
        } else if (!strcmp(a, "--skip-indivisible")) {
            o.skip_indivisible = true;
        } else if (!strcmp(a, "--no-progress")) {
            progress = false;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else {
            fprintf(stderr, "wna16 quantize: unexpected argument '%s'\n", a);
            quantize_help(stderr);
            goto out;
        }
    }
    if (!o.model || !o.output) {
        fprintf(stderr, "wna16 quantize: --model and --out are required\n");
        quantize_help(stderr);
        goto out;
    }
    o.ignore = ignore;
    wna16_ctx *ctx = NULL;
    if (wna16_ctx_create(&ctx) != WNA16_OK) {
        rc = 1;
        goto out;
    }
    cli_install_hooks(ctx, progress);
    cli_catch_interrupts();
    o.report_text = !json;
    char *report = NULL;
    wna16_status s = wna16_quantize_model(ctx, &o, &report);
    if (s != WNA16_OK) {
        rc = cli_fail("quantize", ctx, s);
        if (s == WNA16_ERR_RUNTIME_ACTORDER) rc = 2; /* refused flag: a usage error */
    } else {
        fputs(report, stdout);
        if (!json) printf("wrote %s\n", o.output);
        rc = 0;
    }
    wna16_free(report);
    wna16_ctx_free(ctx);
out:
    free(ignore);
    return rc;
}
