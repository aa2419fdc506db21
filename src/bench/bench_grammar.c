/* `wna16 bench grammar`: what constrained decoding (src/grammar) costs per
 * decode step at a real vocabulary. For a JSON-schema case and a GBNF case
 * it compiles the grammar, tokenizes a valid output with the tokenizer,
 * and times the mask of every step along it (checking that each token of
 * the output is allowed): a first pass with the grammar's mask cache empty
 * (a new grammar) and a second with it filled (the same grammar again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/common.h"
#include "grammar/grammar.h"
#include "kernels/gemm.h"

static const char bench_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\"},"
    "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 150},"
    "\"email\": {\"type\": \"string\", \"format\": \"email\"},"
    "\"role\": {\"enum\": [\"admin\", \"user\", \"guest\"]},"
    "\"address\": {\"type\": \"object\", \"properties\": {"
    "  \"street\": {\"type\": \"string\"}, \"city\": {\"type\": \"string\"},"
    "  \"zip\": {\"type\": \"string\", \"pattern\": \"^[0-9]{5}$\"}},"
    "  \"required\": [\"street\", \"city\"]},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 8},"
    "\"scores\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}},"
    "\"active\": {\"type\": \"boolean\"}},"
    "\"required\": [\"name\", \"age\", \"role\", \"address\", \"tags\", \"active\"],"
    "\"additionalProperties\": false}";

static const char bench_schema_output[] =
    "{\n  \"name\": \"Ada Lovelace\",\n  \"age\": 36,\n  \"email\": \"ada@example.org\",\n"
    "  \"role\": \"admin\",\n  \"address\": {\n    \"street\": \"12 St James's Square\",\n"
    "    \"city\": \"London\",\n    \"zip\": \"10115\"\n  },\n"
    "  \"tags\": [\"mathematics\", \"poetry\", \"analytical engines\", \"Bernoulli numbers\"],\n"
    "  \"scores\": [9.5, 8.25, 10, -0.5e3],\n  \"active\": true\n}";

static const char bench_gbnf[] =
    "root   ::= stmt (\"\\n\" stmt)*\n"
    "stmt   ::= ident \" = \" expr \";\"\n"
    "expr   ::= term (ws [-+] ws term)*\n"
    "term   ::= factor (ws [*/] ws factor)*\n"
    "factor ::= number | ident | call | \"(\" ws expr ws \")\"\n"
    "call   ::= ident \"(\" ws (expr (ws \",\" ws expr)*)? ws \")\"\n"
    "ident  ::= [a-z_] [a-z0-9_]*\n"
    "number ::= [0-9]+ (\".\" [0-9]+)?\n"
    "ws     ::= \" \"?\n";

static const char bench_gbnf_output[] =
    "total = price * (1 + tax_rate) - discount;\n"
    "area = 3.14159 * r * r;\n"
    "x = (a + b) / (c - d * 2);\n"
    "distance = sqrt(dx * dx + dy * dy) + max(0, offset - 1.5);\n"
    "score = weight_a * f(x, y, z) + weight_b * g(h(x), 2) - penalty / (1 + count);";

static void grammar_bench_help(FILE *f) {
    fprintf(f,
            "usage: wna16 bench grammar [--tokenizer PATH] [--logits N] [--schema FILE\n"
            "                           --schema-output FILE] [--gbnf FILE --gbnf-output FILE]\n"
            "                           [--model DIR] [--json]\n\n"
            "Times constrained decoding (docs/grammar.md) at a real vocabulary: builds the\n"
            "token trie of the tokenizer (default tests/data/tokenizer/qwen3, padded to\n"
            "--logits N, default 151936), then for a JSON-schema case and a GBNF case\n"
            "compiles the grammar and walks the tokens of a valid output, timing the token\n"
            "mask of every step: once with the grammar's mask cache empty (cold: a grammar\n"
            "seen for the first time) and once filled (warm: the same grammar again).\n"
            "Reports compile ms and per-step ms (median, p99, max) of what the engine does each\n"
            "step: fill the mask and apply it to a row of --logits floats. With --model DIR it\n"
            "also times that model's one-token decode step (median of 32, after 8 warm-up\n"
            "steps) and gives the mask's share of a step (the worse of the median cold and\n"
            "warm per-step times, and the cold p99). The built-in cases\n"
            "are a nested object schema (strings, integer range, enum, format, pattern,\n"
            "arrays) and an expression-language GBNF; --schema/--gbnf replace them with a\n"
            "file and a valid output for it.\n");
}

typedef struct gcase {
    const char *name;
    grammar_kind kind;
    char *spec, *output;
    double compile_ms, vocab_ms;
    double cold[3], warm[3]; /* median, p99, max */
    size_t steps, states;
} gcase;

/* The mask's per-step time over a decode step: the worse median (cold or
 * warm), or the cold p99. */
static double share(const gcase *c, double step_ms, bool p99) {
    double t = p99 ? c->cold[1] : c->cold[0] > c->warm[0] ? c->cold[0] : c->warm[0];
    return step_ms > 0 ? t / step_ms : 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void percentiles(double *t, size_t n, double out[3]) {
    qsort(t, n, sizeof *t, cmp_d);
    out[0] = n ? t[n / 2] : 0;
    out[1] = n ? t[(size_t)((double)(n - 1) * 0.99 + 0.5)] : 0;
    out[2] = n ? t[n - 1] : 0;
}

/* One pass over the output's tokens; false (with a message) when the
 * grammar refuses the output. */
static bool walk(const grammar *g, const grammar_vocab *v, const int32_t *ids, size_t n,
                 double *t, const char *name) {
    wna16_diag d = {0};
    grammar_matcher *m;
    if (grammar_matcher_create(&d, g, v, &m)) {
        fprintf(stderr, "wna16 bench grammar: %s: %s\n", name, d.detail);
        return false;
    }
    uint64_t *mask = malloc(grammar_mask_words(v) * sizeof *mask);
    float *row = calloc(grammar_vocab_n_logits(v), sizeof *row);
    bool ok = mask && row;
    for (size_t i = 0; ok && i < n; i++) {
        double t0 = cli_now();
        if (grammar_matcher_fill_mask(&d, m, mask)) {
            fprintf(stderr, "wna16 bench grammar: %s: step %zu: %s\n", name, i, d.detail);
            ok = false;
            break;
        }
        grammar_mask_apply(mask, row, grammar_vocab_n_logits(v));
        t[i] = (cli_now() - t0) * 1e3;
        if (!(mask[ids[i] >> 6] >> (ids[i] & 63) & 1) || grammar_matcher_accept(&d, m, ids[i])) {
            fprintf(stderr, "wna16 bench grammar: %s: the output's token %zu (id %d) is refused\n",
                    name, i, (int)ids[i]);
            ok = false;
        }
    }
    if (ok && !grammar_matcher_can_end(m)) {
        fprintf(stderr, "wna16 bench grammar: %s: the output is not complete for the grammar\n", name);
        ok = false;
    }
    free(mask);
    free(row);
    grammar_matcher_free(m);
    return ok;
}

static bool run_case(wna16_ctx *ctx, wna16_tokenizer *tok, const grammar_vocab *v, gcase *c) {
    wna16_diag d = {0};
    grammar_spec spec = {.kind = c->kind, .text = c->spec, .len = strlen(c->spec), .strict = true};
    grammar *g;
    double t0 = cli_now();
    if (grammar_compile(&d, &spec, &g)) {
        fprintf(stderr, "wna16 bench grammar: %s: %s\n", c->name, d.detail);
        return false;
    }
    c->compile_ms = (cli_now() - t0) * 1e3;
    grammar_stats(g, NULL, &c->states, NULL);
    int32_t *ids;
    size_t n;
    if (wna16_tokenizer_encode(ctx, tok, c->output, strlen(c->output), 0, &ids, &n)) {
        fprintf(stderr, "wna16 bench grammar: %s\n", wna16_ctx_error(ctx));
        grammar_free(g);
        return false;
    }
    double *t = malloc((n ? n : 1) * sizeof *t);
    bool ok = t && walk(g, v, ids, n, t, c->name);
    if (ok) percentiles(t, n, c->cold);
    ok = ok && walk(g, v, ids, n, t, c->name);
    if (ok) percentiles(t, n, c->warm);
    c->steps = n;
    free(t);
    free(ids);
    grammar_free(g);
    return ok;
}

/* The median ms of a one-token decode step of the model at DIR; < 0 when
 * it cannot run (the message is printed). */
static double decode_step_ms(wna16_ctx *ctx, const char *dir) {
    wna16_model *m = NULL;
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.context = 64;
    if (wna16_model_load(ctx, dir, &o, &m)) {
        fprintf(stderr, "wna16 bench grammar: --model %s: %s\n", dir, wna16_ctx_error(ctx));
        return -1;
    }
    int64_t V = wna16_model_vocab_size(m);
    float *logits = malloc((size_t)V * sizeof *logits);
    double t[32];
    bool ok = logits != NULL;
    for (int i = 0; ok && i < 40; i++) {
        int32_t id = (int32_t)(i * 7919 % (V > 1000 ? 1000 : V));
        double t0 = cli_now();
        ok = wna16_model_eval(ctx, m, &id, 1, logits) == WNA16_OK;
        if (i >= 8) t[i - 8] = (cli_now() - t0) * 1e3;
    }
    if (!ok) fprintf(stderr, "wna16 bench grammar: --model %s: %s\n", dir, wna16_ctx_error(ctx));
    free(logits);
    wna16_model_free(m);
    if (!ok) return -1;
    double pc[3];
    percentiles(t, 32, pc);
    return pc[0];
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "wna16 bench grammar: cannot open %s\n", path);
        return NULL;
    }
    wna16_buf b = {0};
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) wna16_buf_put(&b, chunk, got);
    fclose(f);
    wna16_buf_put(&b, "", 0);
    if (b.failed) {
        wna16_buf_free(&b);
        return NULL;
    }
    return b.data;
}

static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(out, cap, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    if (f) fclose(f);
}

int wna16_bench_grammar(int argc, char **argv) {
    const char *tok_path = "tests/data/tokenizer/qwen3", *files[4] = {NULL, NULL, NULL, NULL};
    const char *flags[4] = {"--schema", "--schema-output", "--gbnf", "--gbnf-output"};
    long logits = 151936;
    bool json = false;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int f = -1;
        for (int k = 0; k < 4; k++)
            if (!strcmp(a, flags[k])) f = k;
        if (cli_is_help(a)) {
            grammar_bench_help(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--model") && val) {
            model = argv[++i];
        } else if (!strcmp(a, "--tokenizer") && val) {
            tok_path = argv[++i];
        } else if (!strcmp(a, "--logits")) {
            if (!cli_parse_int(a, val, 1, 1 << 24, &logits)) return 2;
            i++;
        } else if (f >= 0 && val) {
            files[f] = argv[++i];
        } else {
            fprintf(stderr, "wna16 bench grammar: unknown or incomplete flag '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!files[0] != !files[1] || !files[2] != !files[3]) {
        fprintf(stderr, "wna16 bench grammar: --schema and --gbnf each need their valid output "
                        "(--schema-output, --gbnf-output)\n");
        return 2;
    }
    gcase cases[2] = {{.name = "json_schema", .kind = GRAMMAR_JSON_SCHEMA},
                      {.name = "gbnf", .kind = GRAMMAR_GBNF}};
    const char *builtin[4] = {bench_schema, bench_schema_output, bench_gbnf, bench_gbnf_output};
    int rc = 1;
    for (int k = 0; k < 4; k++) {
        char *s = files[k] ? read_file(files[k]) : wna16_strdup(builtin[k]);
        if (k % 2 == 0)
            cases[k / 2].spec = s;
        else
            cases[k / 2].output = s;
    }
    wna16_ctx *ctx = NULL;
    wna16_tokenizer *tok = NULL;
    grammar_vocab *v = NULL;
    wna16_diag d = {0};
    for (int k = 0; k < 2; k++)
        if (!cases[k].spec || !cases[k].output) goto out;
    if (wna16_ctx_create(&ctx) || wna16_tokenizer_load(ctx, tok_path, &tok)) {
        fprintf(stderr, "wna16 bench grammar: %s (pass --tokenizer PATH)\n",
                ctx ? wna16_ctx_error(ctx) : "out of memory");
        goto out;
    }
    wna16_tokenizer_info info;
    wna16_tokenizer_get_info(tok, &info);
    int32_t stop = info.eos_id;
    double t0 = cli_now();
    if (grammar_vocab_create(&d, tok, (size_t)logits, &stop, stop >= 0, 0, &v)) {
        fprintf(stderr, "wna16 bench grammar: %s\n", d.detail);
        goto out;
    }
    double vocab_ms = (cli_now() - t0) * 1e3;
    for (int k = 0; k < 2; k++)
        if (!run_case(ctx, tok, v, &cases[k])) goto out;
    double step_ms = model ? decode_step_ms(ctx, model) : 0;
    if (step_ms < 0) goto out;
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    const char *isa = wna16_isa_name(wna16_isa_active());
    if (json) {
        printf("{\"cpu\": ");
        cli_print_json_string(stdout, cpu);
        printf(", \"isa\": \"%s\", \"tokenizer\": ", isa);
        cli_print_json_string(stdout, tok_path);
        printf(", \"logits\": %ld, \"trie_nodes\": %zu, \"vocab_ms\": %.9g, \"cases\": [", logits,
               grammar_vocab_trie_nodes(v), vocab_ms);
        for (int k = 0; k < 2; k++) {
            gcase *c = &cases[k];
            printf("%s{\"case\": \"%s\", \"dfa_states\": %zu, \"compile_ms\": %.9g, \"steps\": %zu, "
                   "\"cold_ms\": {\"median\": %.9g, \"p99\": %.9g, \"max\": %.9g}, "
                   "\"warm_ms\": {\"median\": %.9g, \"p99\": %.9g, \"max\": %.9g}}",
                   k ? ", " : "", c->name, c->states, c->compile_ms, c->steps, c->cold[0], c->cold[1],
                   c->cold[2], c->warm[0], c->warm[1], c->warm[2]);
        }
        printf("]");
        if (model) {
            printf(", \"model\": ");
            cli_print_json_string(stdout, model);
            printf(", \"decode_step_ms\": %.9g, \"fractions\": [", step_ms);
            for (int k = 0; k < 2; k++)
                printf("%s{\"case\": \"%s\", \"median\": %.9g, \"cold_p99\": %.9g}", k ? ", " : "",
                       cases[k].name, share(&cases[k], step_ms, false), share(&cases[k], step_ms, true));
            printf("]");
        }
        printf("}\n");
    } else {
        printf("cpu: %s (portable C; kernels at %s)\n", cpu, isa);
        printf("vocabulary: %s, %ld logits, trie of %zu nodes built in %.1f ms\n", tok_path, logits,
               grammar_vocab_trie_nodes(v), vocab_ms);
        printf("%-12s %8s %7s %6s | %-26s | %-26s\n", "case", "compile", "states", "steps",
               "cold mask ms: median p99 max", "warm mask ms: median p99 max");
        for (int k = 0; k < 2; k++) {
            gcase *c = &cases[k];
            printf("%-12s %6.2fms %7zu %6zu | %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f\n", c->name,
                   c->compile_ms, c->states, c->steps, c->cold[0], c->cold[1], c->cold[2],
                   c->warm[0], c->warm[1], c->warm[2]);
        }
        if (model) {
            printf("decode step of %s: %.3f ms; mask share of a step:", model, step_ms);
            for (int k = 0; k < 2; k++)
                printf(" %s %.1f%% (cold p99 %.1f%%)%s", cases[k].name,
                       100 * share(&cases[k], step_ms, false), 100 * share(&cases[k], step_ms, true),
                       k ? "\n" : ";");
        }
    }
    rc = 0;
out:
    for (int k = 0; k < 2; k++) {
        free(cases[k].spec);
        free(cases[k].output);
    }
    grammar_vocab_free(v);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    return rc;
}
