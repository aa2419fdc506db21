/* `wna16 serve`: an OpenAI-compatible server (src/server, docs/serving.md).
 * Flags are named as `vllm serve` names them. */
#include "cli/cli.h"

#ifdef WNA16_HAVE_HTTP
#include "server/requests.h"
#include "server/http.h"
#include "server/tool_parse.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <time.h>

typedef struct serve_args {
    const char *dir, *host, *api_key, *name, *tokenizer;
    const char *tool_parser, *reasoning_parser, *chat_template, *generation_config;
    const char *allowed_hosts, *allowed_origins;
    long port, tp, ep, threads, max_seqs, max_len, batched, max_waiting, blocks;
    long max_logprobs, max_messages, max_prompt_bytes, max_stop, max_stop_bytes;
    long idle_timeout, max_conns, max_conns_client;
    double kv_gib, drain_s, max_body_mib;
    bool prefix, mpi, tp_given;
    int act_quant;
} serve_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: wna16 serve --model DIR [--host 127.0.0.1] [--port 8000] [--tp N] [--threads N]\n"
            "                   [--ep N] [--max-num-seqs N] [--max-model-len N] [--kv-cache-memory GiB]\n"
            "                   [--num-kv-blocks N] [--api-key KEY] [--served-model-name NAME]\n"
            "                   [--max-num-batched-tokens N] [--no-enable-prefix-caching]\n"
            "                   [--enable-prefix-caching] [--max-waiting N] [--drain-timeout S]\n"
            "                   [--max-body-mib M] [--tokenizer DIR] [--mpi]\n"
            "                   [--chat-template FILE] [--tool-call-parser NAME]\n"
            "                   [--enable-auto-tool-choice] [--reasoning-parser qwen3]\n"
            "                   [--generation-config auto|vllm] [--act-quant none|int8]\n"
            "  request limits:  [--max-logprobs N] [--max-chat-messages N] [--max-prompt-bytes N]\n"
            "                   [--max-stop-strings N] [--max-stop-bytes N]\n"
            "  connections:     [--timeout-keep-alive S] [--max-connections N]\n"
            "                   [--max-connections-per-client N]\n"
            "  browsers:        [--allowed-hosts LIST] [--allowed-origins LIST]\n\n"
            "Serves the model over HTTP as OpenAI's API does: POST /v1/completions and\n"
            "/v1/chat/completions (\"stream\": true for server-sent events), GET /v1/models,\n"
            "/health and /metrics (Prometheus), POST /tokenize and /detokenize. Requests are\n"
            "batched continuously over a paged KV cache: each step runs every decoding\n"
            "sequence's next token and prompt chunks up to --max-num-batched-tokens (256).\n"
            "--max-num-seqs (64) sequences run at once, --max-waiting (256) more wait; beyond\n"
            "that a request gets 503. --kv-cache-memory sets the KV cache size (default: room for\n"
            "max-num-seqs / 4 full contexts, at most 4 GiB, at least one context); when it runs\n"
            "short the newest sequence is preempted and recomputed later. Prefix caching (on by\n"
            "default) reuses the KV blocks of shared prompt prefixes. --num-kv-blocks gives an exact\n"
            "block count (tests).\n\n"
            "Limits per request (400 beyond them): --max-logprobs (20) logprobs, top_logprobs and\n"
            "prompt_logprobs; --max-chat-messages (4096) messages; --max-prompt-bytes (1048576)\n"
            "bytes of the text prompts or of all message contents together; --max-stop-strings\n"
            "(16) stop strings of at most --max-stop-bytes (4096) bytes each; bodies over\n"
            "--max-body-mib (4) get 413. Connections: one with no byte in or out for\n"
            "--timeout-keep-alive (5) seconds is closed (idle keep-alive, unfinished headers or\n"
            "body); at most --max-connections (1000) at once, --max-connections-per-client (256)\n"
            "from one address. A whole (non-streamed) reply whose client closed its connection is\n"
            "aborted, as a stream is.\n\n"
            "--api-key (or the WNA16_API_KEY environment variable) makes every endpoint but\n"
            "/health and the pages ask for \"Authorization: Bearer KEY\" (the pages ask the user\n"
            "for the key). Without a key on a loopback --host, requests must name a loopback Host\n"
            "and a browser's Origin must be the server's own: --allowed-hosts NAME,... and\n"
            "--allowed-origins http://HOST:PORT,... (\"*\": any; those origins get CORS headers)\n"
            "let others in. POST bodies must be Content-Type: application/json (else 415). --port 0\n"
            "picks a free port. SIGTERM or Ctrl-C drains: new requests and /health get 503, running\n"
            "ones finish (up to --drain-timeout, 30 s; what still runs then is aborted and\n"
            "answered), then the server exits. In a browser, http://HOST:PORT/ is a chat page and\n"
            "/stats a live view of /metrics (built in; no network needed). At start it measures\n"
            "the read bandwidth and compute peak for the per-step roofline in /metrics (wna16\n"
            "bench serve reads it).\n\n"
            "Under mpirun (or with --mpi) each process is one tensor-parallel rank (--tp must equal\n"
            "the number of processes, or be left out): rank 0 listens, tokenizes, schedules and\n"
            "samples, and drives the other ranks' slices of every batched step\n"
            "(docs/serving.md). Send SIGTERM to rank 0 (or to mpirun) to drain.\n"
            "--ep N runs N expert-parallel groups of --tp ranks, each rank holding its block of\n"
            "the routed experts (under MPI, N x tp processes; --tp then defaults to 1;\n"
            "docs/distributed.md).\n\n"
            "--act-quant int8 gives the quantized linears int8 activations, a scale per 128\n"
            "inputs at most (W4A8: faster batched steps and prefill where VNNI or AMX-INT8\n"
            "computes them, at some accuracy; docs/kernels.md); the default none keeps them\n"
            "16-bit.\n\n"
            "Chat: --chat-template FILE replaces the model's Jinja chat template. Tools are\n"
            "rendered by the template and the reply's calls parsed by --tool-call-parser (hermes,\n"
            "llama3_json or mistral; by default the one the template shows, else tools are\n"
            "refused); tool_choice \"required\" or a named function is enforced by constrained\n"
            "decoding. --enable-auto-tool-choice is accepted for vLLM's command lines (tool_choice\n"
            "\"auto\" is always on). --reasoning-parser qwen3 returns the <think> block as\n"
            "reasoning_content. --generation-config auto (the default) applies\n"
            "generation_config.json's temperature, top_p, top_k, min_p and repetition_penalty\n"
            "where a request leaves them unset; vllm ignores them.\n\n"
            "example:\n"
            "  wna16 serve --model ./model --port 8000 &\n"
            "  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\\n"
            "       -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'\n"
            "  mpirun -np 2 wna16 serve --model ./model --port 8000     # TP=2, a process per rank\n");
}

static const char *value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "wna16 serve: %s needs a value (see wna16 serve --help)\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int parse_long(int argc, char **argv, int *i, long lo, long hi, long *out) {
    const char *flag = argv[*i], *v = value(argc, argv, i);
    return v && cli_parse_int(flag, v, lo, hi, out) ? 0 : 2;
}

static int parse_flag(int argc, char **argv, int *i, serve_args *a) {
    const char *f = argv[*i];
#define LONGF(name, lo, hi, field) \
    if (!strcmp(f, name)) return parse_long(argc, argv, i, lo, hi, &a->field);
#define STRF(name, field) \
    if (!strcmp(f, name)) return (a->field = value(argc, argv, i)) ? 0 : 2;
    STRF("--model", dir)
    STRF("--host", host)
    STRF("--api-key", api_key)
    STRF("--served-model-name", name)
    STRF("--tokenizer", tokenizer)
    STRF("--chat-template", chat_template)
    STRF("--tool-call-parser", tool_parser)
    STRF("--reasoning-parser", reasoning_parser)
    STRF("--generation-config", generation_config)
    STRF("--allowed-hosts", allowed_hosts)
    STRF("--allowed-origins", allowed_origins)
    if (!strcmp(f, "--enable-auto-tool-choice")) return 0;
    if (!strcmp(f, "--act-quant")) {
        const char *v = value(argc, argv, i);
        return v && cli_parse_act_quant(f, v, &a->act_quant) ? 0 : 2;
    }
    LONGF("--port", 0, 65535, port)
    if (!strcmp(f, "--tp")) {
        a->tp_given = true;
        return parse_long(argc, argv, i, 1, 64, &a->tp);
    }
    LONGF("--ep", 1, 64, ep)
    if (!strcmp(f, "--mpi")) return a->mpi = true, 0;
    LONGF("--threads", 1, 4096, threads)
    LONGF("--max-num-seqs", 1, 4096, max_seqs)
    LONGF("--max-model-len", 16, 1 << 24, max_len)
    LONGF("--max-num-batched-tokens", 1, 1 << 16, batched)
    LONGF("--max-waiting", 0, 1 << 20, max_waiting)
    LONGF("--num-kv-blocks", 1, 1 << 26, blocks)
    LONGF("--max-logprobs", 0, 20, max_logprobs)
    LONGF("--max-chat-messages", 1, 1 << 24, max_messages)
    LONGF("--max-prompt-bytes", 1, 1L << 40, max_prompt_bytes)
    LONGF("--max-stop-strings", 0, 1024, max_stop)
    LONGF("--max-stop-bytes", 1, 1 << 20, max_stop_bytes)
    LONGF("--timeout-keep-alive", 1, 86400, idle_timeout)
    LONGF("--max-connections", 1, 1 << 20, max_conns)
    LONGF("--max-connections-per-client", 1, 1 << 20, max_conns_client)
    if (!strcmp(f, "--kv-cache-memory") || !strcmp(f, "--drain-timeout") ||
        !strcmp(f, "--max-body-mib")) {
        const char *v = value(argc, argv, i);
        double *out = f[2] == 'k' ? &a->kv_gib : f[2] == 'd' ? &a->drain_s : &a->max_body_mib;
        return v && cli_parse_double(f, v, 1e-6, 1e6, out) ? 0 : 2;
    }
    if (!strcmp(f, "--enable-prefix-caching")) return a->prefix = true, 0;
    if (!strcmp(f, "--no-enable-prefix-caching")) return a->prefix = false, 0;
    fprintf(stderr, "wna16 serve: unknown flag %s (see wna16 serve --help)\n", f);
    return 2;
}

static int parse(int argc, char **argv, serve_args *a) {
    srv_limits lim = SRV_LIMITS_DEFAULT;
    *a = (serve_args){.host = "127.0.0.1", .port = 8000, .tp = 1, .ep = 1, .max_seqs = 64, .batched = 256,
                      .max_waiting = 256, .drain_s = 30, .max_body_mib = 4, .prefix = true,
                      .max_logprobs = lim.max_logprobs, .max_messages = (long)lim.max_messages,
                      .max_prompt_bytes = (long)lim.max_prompt_bytes,
                      .max_stop = (long)lim.max_stop, .max_stop_bytes = (long)lim.max_stop_bytes,
                      .idle_timeout = 5, .max_conns = 1000, .max_conns_client = 256};
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        }
        int rc = parse_flag(argc, argv, &i, a);
        if (rc) return rc;
    }
    if (!a->dir) {
        fprintf(stderr, "wna16 serve: --model DIR is required (see wna16 serve --help)\n");
        return 2;
    }
    if (a->tool_parser && srv_tool_format_from_name(a->tool_parser) < 0) {
        fprintf(stderr, "wna16 serve: --tool-call-parser %s: expected hermes, llama3_json or "
                        "mistral\n", a->tool_parser);
        return 2;
    }
    if (a->reasoning_parser && strcmp(a->reasoning_parser, "qwen3")) {
        fprintf(stderr, "wna16 serve: --reasoning-parser %s: expected qwen3\n", a->reasoning_parser);
        return 2;
    }
    if (a->generation_config && strcmp(a->generation_config, "auto") &&
        strcmp(a->generation_config, "vllm")) {
        fprintf(stderr, "wna16 serve: --generation-config %s: expected auto or vllm\n",
                a->generation_config);
        return 2;
    }
    if (!a->api_key) a->api_key = getenv("WNA16_API_KEY");
    if (!a->name) a->name = a->dir;
    return -1;
}

/* The KV cache's bytes: --kv-cache-memory, else max-num-seqs / 4 contexts
 * capped at 4 GiB, never less than one context. */
static size_t kv_bytes(const serve_args *a, const wna16_model *m) {
    size_t ctx_bytes = (size_t)((wna16_model_context(m) + WNA16_KV_BLOCK_SIZE - 1) /
                                WNA16_KV_BLOCK_SIZE) *
                       wna16_kv_cache_block_bytes(m);
    if (a->kv_gib > 0) return (size_t)(a->kv_gib * 1073741824.0);
    size_t want = ctx_bytes * (size_t)((a->max_seqs + 3) / 4), cap = (size_t)4 << 30;
    if (want > cap) want = cap;
    return want < ctx_bytes ? ctx_bytes : want;
}

/* Waits for SIGTERM or SIGINT (blocked in every thread), or for the engine
 * to fail for good (then false, and why). */
static bool wait_for_signal(srv_engine *e, char *why, size_t n) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    struct timespec tick = {0, 200 * 1000 * 1000};
    while (sigtimedwait(&set, NULL, &tick) < 0)
        if (srv_engine_dead(e, why, n)) return false;
    return true;
}

/* The machine's limits for the per-step roofline: read bandwidth (twice
 * the last-level cache, 256 MiB to 1 GiB) and compute peaks (the quantized
 * linears', and the fp32 FMA's for lm_head), measured now on the threads the
 * forward runs on; under MPI by every rank at once, summed. The engine
 * raises them to any decode step's faster rate (srv_roofline_track). */
typedef struct serve_limits {
    double read_gbs, peak_gflops, dense_gflops;
    const char *kind;
} serve_limits;

static serve_limits measure_limits(wna16_comm *comm, const wna16_model *m, int act_quant) {
    serve_limits l = {0};
    cli_machine_limits(comm, wna16_model_threads(m), cli_probe_bytes(), act_quant, &l.read_gbs,
                       &l.peak_gflops, &l.kind);
    l.dense_gflops = cli_dense_peak(comm, wna16_model_threads(m));
    return l;
}

/* The engine's per-step roofline (/metrics): the model's weight bytes and
 * FLOPs against the machine's limits. */
static srv_roofline roofline(const wna16_model *m, const serve_limits *l) {
    cli_model_costs c;
    cli_model_costs_get(m, &c);
    const char *kind = l->kind;
    srv_roofline r = {
        .read_gbs = l->read_gbs,
        .peak_gflops = l->peak_gflops,
        .logit_peak_gflops = l->dense_gflops,
        .dense_bytes = c.dense_bytes,
        .expert_bytes = c.expert_bytes,
        .n_experts = (double)c.n_experts,
        .top_k = (double)c.top_k,
        .row_flops =
            2 * (c.dense_params +
                 (c.n_experts ? c.expert_params * (double)c.top_k / (double)c.n_experts : 0)),
        .logit_flops = 2 * c.head_params};
    fprintf(stderr,
            "wna16 serve: machine read bandwidth %.2f GB/s, %s peak %.1f GFLOP/s; a one-row "
            "decode step's roofline %.3f ms\n",
            r.read_gbs, kind ? kind : "no", r.peak_gflops, 1e3 * srv_roofline_seconds(&r, 1, 1));
    return r;
}

/* --chat-template's text (malloc'd), NULL with a message when unreadable. */
static char *read_template(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = f ? malloc(4u << 20) : NULL;
    size_t n = text ? fread(text, 1, (4u << 20) - 1, f) : 0;
    bool ok = text && !ferror(f) && n < (4u << 20) - 1 && !memchr(text, 0, n);
    if (f) fclose(f);
    if (!ok) {
        fprintf(stderr, "wna16 serve: --chat-template %s: %s\n", path,
                !f ? "cannot open it" : "not a text file under 4 MiB");
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* The chat side of the server: the template, the tool-call format (the
 * flag's, else the one the template shows), reasoning, sampling defaults. */
static void chat_options(const serve_args *a, const wna16_model *m, const wna16_tokenizer *tok,
                         const char *tpl, srv_http_options *ho) {
    ho->chat_template = tpl;
    ho->tool_format = a->tool_parser ? srv_tool_format_from_name(a->tool_parser)
                                     : srv_tool_format_detect(tpl ? tpl : wna16_tokenizer_chat_template(tok));
    ho->reasoning = a->reasoning_parser != NULL;
    if (!a->generation_config || !strcmp(a->generation_config, "auto"))
        wna16_model_generation_defaults(m, &ho->gen);
    ho->gen.set &= ~(unsigned)WNA16_GEN_DO_SAMPLE; /* as vLLM: the five keys only */
    fprintf(stderr, "wna16 serve: tool-call parser %s%s, reasoning parser %s\n",
            srv_tool_format_name(ho->tool_format), a->tool_parser ? "" : " (from the template)",
            a->reasoning_parser ? a->reasoning_parser : "none");
}

/* Seconds the last answers get after the drain, before connections close. */
#define DRAIN_GRACE_S 5.0

/* A connection is a descriptor: the soft limit goes up to what
 * --max-connections needs (and the model's files), within the hard limit. */
static void raise_open_files(unsigned conns) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    rlim_t want = (rlim_t)conns + 256;
    if (rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want)
        fprintf(stderr, "wna16 serve: open files are limited to %llu; --max-connections %u may "
                        "not be reached (raise ulimit -n)\n",
                (unsigned long long)rl.rlim_cur, conns);
}

static int run(const serve_args *a, wna16_ctx *ctx, wna16_model *m, wna16_tokenizer *tok,
               const serve_limits *l) {
    char *tpl = a->chat_template ? read_template(a->chat_template) : NULL;
    if (a->chat_template && !tpl) return 2;
    srv_engine_options eo = {.max_num_seqs = (int)a->max_seqs,
                             .max_batched_tokens = a->batched,
                             .max_waiting = a->max_waiting,
                             .kv_bytes = a->blocks ? 0 : kv_bytes(a, m),
                             .kv_blocks = a->blocks,
                             .prefix_caching = a->prefix,
                             .roofline = roofline(m, l)};
    srv_engine *e = NULL;
    wna16_status s = srv_engine_start(ctx, m, tok, &eo, &e);
    if (s != WNA16_OK) {
        free(tpl);
        return cli_fail("serve", ctx, s);
    }
    srv_http_options ho = {.host = a->host, .port = (int)a->port, .api_key = a->api_key,
                           .served_name = a->name, .model_dir = a->dir,
                           .max_body_bytes = (size_t)(a->max_body_mib * 1048576.0),
                           .created = (long long)time(NULL),
                           .limits = {.max_logprobs = (int)a->max_logprobs,
                                      .max_messages = (size_t)a->max_messages,
                                      .max_prompt_bytes = (size_t)a->max_prompt_bytes,
                                      .max_stop = (size_t)a->max_stop,
                                      .max_stop_bytes = (size_t)a->max_stop_bytes},
                           .allowed_hosts = a->allowed_hosts,
                           .allowed_origins = a->allowed_origins,
                           .idle_timeout_s = (unsigned)a->idle_timeout,
                           .max_connections = (unsigned)a->max_conns,
                           .max_connections_per_client = (unsigned)a->max_conns_client};
    chat_options(a, m, tok, tpl, &ho);
    raise_open_files(ho.max_connections);
    srv_http *h = NULL;
    char err[512];
    if (srv_http_start(&ho, e, tok, wna16_model_vocab_size(m), &h, err, sizeof err)) {
        fprintf(stderr, "wna16 serve: %s\n", err);
        srv_engine_stop(e, 0);
        free(tpl);
        return 1;
    }
    fprintf(stderr, "wna16 serve: %s as \"%s\", max-model-len %lld, KV cache %.1f MiB%s\n",
            a->dir, a->name, (long long)wna16_model_context(m),
            (double)(eo.kv_blocks ? (size_t)eo.kv_blocks * wna16_kv_cache_block_bytes(m)
                                  : eo.kv_bytes) / 1048576.0,
            a->prefix ? ", prefix caching" : "");
    fprintf(stderr, "wna16 serve: listening on http://%s:%d\n", a->host, srv_http_port(h));
    char why[256];
    bool asked = wait_for_signal(e, why, sizeof why);
    if (!asked) fprintf(stderr, "wna16 serve: stopping: %s\n", why);
    fprintf(stderr, "wna16 serve: draining (up to %.0f s)\n", a->drain_s);
    srv_http_drain(h);
    double until = srv_now() + a->drain_s;
    int running = 0, waiting = 0;
    do {
        srv_engine_load(e, &running, &waiting);
        if (!running && !waiting && !srv_http_in_flight(h)) break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    } while (srv_now() < until);
    /* what still runs is aborted; its clients get their answers (503, or an
     * error event) before the connections close */
    srv_engine_halt(e, 0);
    srv_http_stop(h, DRAIN_GRACE_S);
    srv_engine_stop(e, 0);
    free(tpl);
    fprintf(stderr, "wna16 serve: stopped\n");
    return asked ? 0 : 1;
}

/* Tokenizer (rank 0) and model (every rank), agreed on under MPI. */
static wna16_status load(const serve_args *a, wna16_ctx *ctx, wna16_comm *comm, bool lead,
                         wna16_tokenizer **tok, wna16_model **m) {
    wna16_status s =
        lead ? wna16_tokenizer_load(ctx, a->tokenizer ? a->tokenizer : a->dir, tok) : WNA16_OK;
    if (comm) s = wna16_comm_check(ctx, comm, s);
    wna16_model_options mo;
    wna16_model_options_init(&mo);
    mo.tp = (int)a->tp;
    mo.ep = (int)a->ep;
    mo.threads = (int)a->threads;
    mo.context = a->max_len;
    mo.comm = comm;
    mo.act_quant = a->act_quant;
    return s == WNA16_OK ? wna16_model_load(ctx, a->dir, &mo, m) : s;
}

int wna16_cmd_serve(int argc, char **argv) {
    serve_args a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0) return rc;
    /* the signals are taken by wait_for_signal only: block them before any
     * thread starts, and let a write to a closed socket be an error */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* a server's other ranks wait for rank 0's next step as long as no
     * request comes: no idle limit unless the user set one */
    setenv("WNA16_MPI_IDLE_TIMEOUT", "0", 0);
    wna16_comm *comm = NULL;
    rc = cli_dist_start("serve", a.mpi, a.ep, &a.tp, a.tp_given, &comm);
    if (rc >= 0) return rc;
    bool lead = !comm || wna16_comm_rank(comm) == 0; /* listens, schedules, samples */
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) {
        wna16_comm_free(comm);
        return 1;
    }
    cli_install_hooks(ctx, lead);
    wna16_tokenizer *tok = NULL;
    wna16_model *m = NULL;
    wna16_status s = load(&a, ctx, comm, lead, &tok, &m);
    serve_limits lim = {0};
    if (s == WNA16_OK) lim = measure_limits(comm, m, a.act_quant);
    if (s != WNA16_OK) {
        rc = cli_fail("serve", ctx, s);
    } else if (lead) {
        rc = run(&a, ctx, m, tok, &lim);
        /* the other ranks return: 0 after a clean stop, else with the failure */
        wna16_model_release(ctx, m, rc ? WNA16_ERR_ABORTED : WNA16_OK);
    } else {
        s = wna16_model_follow(ctx, m);
        rc = s == WNA16_OK || s == WNA16_ERR_ABORTED ? (s != WNA16_OK) : cli_fail("serve", ctx, s);
    }
    wna16_model_free(m);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    wna16_comm_free(comm);
    return rc;
}

#else

int wna16_cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "wna16 serve: this wna16 was built without libmicrohttpd; install "
                    "libmicrohttpd-dev (scripts/setup.sh does) and rebuild\n");
    return 1;
}

#endif
