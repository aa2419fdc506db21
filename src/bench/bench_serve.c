/* `wna16 bench serve`: a load generator for an OpenAI-compatible server, as
 * `vllm bench serve` is. C client threads each keep one connection (libcurl
 * easy handles, keep-alive) and send streaming /v1/completions requests with
 * random token-id prompts (fixed seed) and "ignore_eos", so that every
 * request generates exactly --output-len tokens. Reports request and token
 * throughput and time-to-first-token, time-per-output-token, inter-token
 * (between streamed chunks) and end-to-end latency percentiles. Against
 * `wna16 serve` it also reads /metrics before and after the run: the
 * engine's decode steps, their forward time and their roofline (bytes of
 * distinct weights / read bandwidth, or FLOPs / peak, with the limits the
 * server measured at start), so the run reports the fraction of the
 * roofline its decode steps reached. HTTP is libcurl's; this file only
 * splits the server-sent events into "data:" lines. */
#include "bench/bench.h"

#ifdef WNA16_HAVE_CURL
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: wna16 bench serve --url URL [--concurrency C] [--requests R] [--input-len I]\n"
        "                         [--output-len O] [--seed S] [--temperature T] [--model NAME]\n"
        "                         [--api-key KEY] [--timeout S] [--json]\n\n"
        "Load-tests a running OpenAI-compatible server (wna16 serve, or vLLM) at URL\n"
        "(http://HOST:PORT): C clients (default 1), each on one kept-alive connection, send R\n"
        "(default 32) streaming POST /v1/completions requests between them, each a prompt of I\n"
        "(default 128) random token ids (fixed --seed, default 0) and \"max_tokens\": O (default\n"
        "32) with \"ignore_eos\" and \"min_tokens\" so that each generates exactly O tokens\n"
        "(--temperature, default 0: greedy). One warm-up request runs first, untimed.\n"
        "Reports requests/s, output and total tokens/s, and the mean, median, p90 and p99 of\n"
        "TTFT (time to the first streamed text), TPOT ((latency - TTFT) / (O - 1)), ITL (time\n"
        "between streamed chunks) and E2EL (end-to-end latency). Against wna16 serve it also\n"
        "reads /metrics before and after: the run's decode steps (every row a next token),\n"
        "their mean rows, forward ms and roofline ms (max(bytes of distinct weights / read\n"
        "bandwidth, FLOPs / peak), limits measured by the server at start), and\n"
        "roofline_fraction = roofline / forward time. --model defaults to the server's first\n"
        "model; --api-key (or WNA16_API_KEY) is sent as a bearer token. A request fails when\n"
        "it gets an HTTP error, an error event, or nothing within --timeout seconds (default\n"
        "600); any failure makes the exit status 1. Flags also answer to vLLM's names:\n"
        "--base-url, --max-concurrency, --num-prompts, --random-input-len,\n"
        "--random-output-len.\n\n"
        "example:\n"
        "  wna16 serve --model ./model --port 8000 &\n"
        "  wna16 bench serve --url http://127.0.0.1:8000 --concurrency 4 --requests 64 \\\n"
        "      --input-len 128 --output-len 32 --json\n");
}

typedef struct bs_args {
    const char *url, *model, *api_key;
    long concurrency, requests, input_len, output_len;
    unsigned long long seed;
    double temperature, timeout_s;
    bool json;
} bs_args;

/* One request's outcome. */
typedef struct bs_result {
    bool ok;
    double start, ttft, e2el;
    int64_t out_tokens, chunks;
    char error[256];
} bs_result;

typedef struct bs_run {
    const bs_args *a;
    char model[256];
    int64_t vocab;
    atomic_long next;
    bs_result *res;
    pthread_mutex_t mu; /* itl */
    double *itl;
    size_t n_itl, cap_itl;
} bs_run;

/* ---------------------------------------------------------------- http */

typedef struct bs_body {
    char *p;
    size_t n, cap;
} bs_body;

static bool body_add(bs_body *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return false;
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

static size_t collect(char *data, size_t size, size_t n, void *cls) {
    return body_add(cls, data, size * n) ? size * n : 0;
}

static struct curl_slist *headers(const bs_args *a, bool json_body) {
    struct curl_slist *h = NULL;
    /* no "Expect: 100-continue" round trip before a large body */
    if (json_body) h = curl_slist_append(h, "Content-Type: application/json");
    if (json_body) h = curl_slist_append(h, "Expect:");
    if (a->api_key) {
        char auth[600];
        snprintf(auth, sizeof auth, "Authorization: Bearer %.500s", a->api_key);
        h = curl_slist_append(h, auth);
    }
    return h;
}

/* The server's error message from an OpenAI error body (or its start). */
static void error_message(const char *body, char *out, size_t cap) {
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    if (!m) m = json_string_value(json_object_get(j, "message"));
    snprintf(out, cap, "%.200s", m ? m : body && body[0] ? body : "(empty body)");
    json_decref(j);
}

/* GET url+path into *b; false with err set on a transport or HTTP error. */
static bool http_get(const bs_args *a, const char *path, bs_body *b, char *err, size_t cap) {
    char url[1200];
    snprintf(url, sizeof url, "%s%s", a->url, path);
    CURL *c = curl_easy_init();
    if (!c) return snprintf(err, cap, "libcurl could not start"), false;
    struct curl_slist *h = headers(a, false);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        snprintf(err, cap, "cannot reach %s: %s", url, curl_easy_strerror(rc));
        return false;
    }
    if (status != 200) {
        char m[256];
        error_message(b->p, m, sizeof m);
        snprintf(err, cap, "GET %.300s: HTTP %ld: %.200s", url, status, m);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------- requests */

typedef struct bs_stream {
    bs_run *run;
    bs_result *r;
    bs_body line; /* the event being received */
    bs_body raw;  /* the start of the body, for an HTTP error's message */
    double last;
    double *itl;
    size_t n_itl, cap_itl;
    bool done;
} bs_stream;

static void event(bs_stream *s, const char *data) {
    if (!strcmp(data, "[DONE]")) {
        s->done = true;
        return;
    }
    json_t *j = json_loads(data, 0, NULL);
    if (!j) return;
    json_t *err = json_object_get(j, "error");
    if (err && !s->r->error[0]) {
        const char *m = json_string_value(json_object_get(err, "message"));
        snprintf(s->r->error, sizeof s->r->error, "error event: %.200s", m ? m : "(no message)");
    }
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    if (text && text[0]) {
        double now = cli_now();
        if (!s->r->chunks)
            s->r->ttft = now - s->r->start;
        else if (s->n_itl < s->cap_itl)
            s->itl[s->n_itl++] = now - s->last;
        s->last = now;
        s->r->chunks++;
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u))
        s->r->out_tokens = (int64_t)json_integer_value(json_object_get(u, "completion_tokens"));
    json_decref(j);
}

/* Server-sent events: "data: <payload>" lines, events ended by a blank line. */
static size_t on_data(char *data, size_t size, size_t n, void *cls) {
    bs_stream *s = cls;
    size_t len = size * n;
    if (s->raw.n < 4096) body_add(&s->raw, data, len < 4096 ? len : 4096);
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n') {
            if (!body_add(&s->line, &data[i], 1)) return 0;
            continue;
        }
        if (s->line.n && s->line.p[s->line.n - 1] == '\r') s->line.p[--s->line.n] = '\0';
        if (s->line.n > 5 && !strncmp(s->line.p, "data:", 5))
            event(s, s->line.p + 5 + (s->line.p[5] == ' '));
        s->line.n = 0;
    }
    return len;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Request idx's body: its own random prompt (seed, idx). */
static char *request_body(const bs_run *run, long idx, long output_len) {
    const bs_args *a = run->a;
    json_t *ids = json_array();
    uint64_t x = a->seed * 0x100000001b3ull + (uint64_t)idx;
    for (long i = 0; i < a->input_len; i++)
        json_array_append_new(ids, json_integer((json_int_t)(splitmix(&x) % (uint64_t)run->vocab)));
    json_t *b = json_pack("{s:s, s:o, s:I, s:I, s:b, s:f, s:b, s:{s:b}}", "model", run->model,
                          "prompt", ids, "max_tokens", (json_int_t)output_len, "min_tokens",
                          (json_int_t)output_len, "ignore_eos", 1, "temperature", a->temperature,
                          "stream", 1, "stream_options", "include_usage", 1);
    char *s = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    return s;
}

/* Sends one request on c and fills r (and, when itl, its chunk gaps). */
static void send_one(bs_run *run, CURL *c, long idx, long output_len, bs_result *r, bool itl) {
    const bs_args *a = run->a;
    memset(r, 0, sizeof *r);
    char *body = request_body(run, idx, output_len);
    if (!body) {
        snprintf(r->error, sizeof r->error, "out of memory");
        return;
    }
    char url[1200];
    snprintf(url, sizeof url, "%s/v1/completions", a->url);
    struct curl_slist *h = headers(a, true);
    bs_stream s = {.run = run, .r = r};
    s.cap_itl = itl && output_len > 1 ? (size_t)output_len : 0;
    s.itl = s.cap_itl ? malloc(s.cap_itl * sizeof *s.itl) : NULL;
    if (s.cap_itl && !s.itl) s.cap_itl = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(a->timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    r->start = cli_now();
    CURLcode rc = curl_easy_perform(c);
    r->e2el = cli_now() - r->start;
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        snprintf(r->error, sizeof r->error, "%.150s: %.90s", url, curl_easy_strerror(rc));
    } else if (status != 200) {
        char m[256];
        error_message(s.raw.p, m, sizeof m);
        snprintf(r->error, sizeof r->error, "HTTP %ld: %.200s", status, m);
    } else if (!r->error[0] && !s.done) {
        snprintf(r->error, sizeof r->error, "the stream ended without data: [DONE]");
    } else if (!r->error[0] && !r->chunks) {
        snprintf(r->error, sizeof r->error, "the stream held no text");
    }
    r->ok = !r->error[0];
    if (!r->out_tokens) r->out_tokens = r->chunks; /* a server without usage */
    if (r->ok && s.n_itl) {
        pthread_mutex_lock(&run->mu);
        if (run->n_itl + s.n_itl > run->cap_itl) {
            size_t cap = run->cap_itl ? run->cap_itl : 1024;
            while (cap < run->n_itl + s.n_itl) cap *= 2;
            double *q = realloc(run->itl, cap * sizeof *q);
            if (q) run->itl = q, run->cap_itl = cap;
        }
        if (run->n_itl + s.n_itl <= run->cap_itl) {
            memcpy(run->itl + run->n_itl, s.itl, s.n_itl * sizeof *s.itl);
            run->n_itl += s.n_itl;
        }
        pthread_mutex_unlock(&run->mu);
    }
    curl_slist_free_all(h);
    free(s.itl);
    free(s.line.p);
    free(s.raw.p);
    free(body);
}

static void *client(void *cls) {
    bs_run *run = cls;
    CURL *c = curl_easy_init();
    for (;;) {
        long i = atomic_fetch_add(&run->next, 1);
        if (i >= run->a->requests) break;
        if (!c) {
            snprintf(run->res[i].error, sizeof run->res[i].error, "libcurl could not start");
            continue;
        }
        send_one(run, c, i, run->a->output_len, &run->res[i], true);
    }
    if (c) curl_easy_cleanup(c);
    return NULL;
}

/* ---------------------------------------------------------------- stats */

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

typedef struct bs_stat {
    double mean, median, p90, p99;
    size_t n;
} bs_stat;

/* Percentiles with linear interpolation between closest ranks (numpy's
 * default, as vLLM reports them); v is sorted in place. */
static bs_stat stat_of(double *v, size_t n) {
    bs_stat s = {0};
    s.n = n;
    if (!n) return s;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    s.mean = sum / (double)n;
    double q[3] = {0.5, 0.9, 0.99}, *out[3] = {&s.median, &s.p90, &s.p99};
    for (int k = 0; k < 3; k++) {
        double pos = q[k] * (double)(n - 1);
        size_t lo = (size_t)pos, hi = lo + 1 < n ? lo + 1 : lo;
        *out[k] = v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
    }
    return s;
}

/* ------------------------------------------------------------- /metrics */

typedef struct bs_metrics {
    bool have;
    double steps, step_s, decode_steps, decode_rows, decode_s, roof_s, read_gbs, peak;
} bs_metrics;

static double metric(const char *text, const char *name, bool *found) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ') {
            *found = true;
            return atof(p + n + 1);
        }
    return 0;
}

static bs_metrics read_metrics(const bs_args *a) {
    bs_metrics m = {0};
    bs_body b = {0};
    char err[512];
    if (!http_get(a, "/metrics", &b, err, sizeof err) || !b.p) {
        free(b.p);
        return m;
    }
    bool f = false;
    m.steps = metric(b.p, "wna16:steps_total", &f);
    m.have = f;
    m.step_s = metric(b.p, "wna16:step_seconds_total", &f);
    m.decode_steps = metric(b.p, "wna16:decode_steps_total", &f);
    m.decode_rows = metric(b.p, "wna16:decode_step_rows_total", &f);
    m.decode_s = metric(b.p, "wna16:decode_step_seconds_total", &f);
    m.roof_s = metric(b.p, "wna16:decode_step_roofline_seconds_total", &f);
    m.read_gbs = metric(b.p, "wna16:machine_read_bandwidth_gbs", &f);
    m.peak = metric(b.p, "wna16:machine_peak_gflops", &f);
    free(b.p);
    return m;
}

/* ----------------------------------------------------------------- main */

static const char *value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "wna16 bench serve: %s needs a value (see wna16 bench serve --help)\n",
                argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int parse(int argc, char **argv, bs_args *a) {
    *a = (bs_args){.concurrency = 1,
                   .requests = 32,
                   .input_len = 128,
                   .output_len = 32,
                   .timeout_s = 600,
                   .api_key = getenv("WNA16_API_KEY")};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        if (cli_is_help(f)) {
            usage(stdout);
            return 0;
        }
        long *l = !strcmp(f, "--concurrency") || !strcmp(f, "--max-concurrency")  ? &a->concurrency
                  : !strcmp(f, "--requests") || !strcmp(f, "--num-prompts")       ? &a->requests
                  : !strcmp(f, "--input-len") || !strcmp(f, "--random-input-len") ? &a->input_len
                  : !strcmp(f, "--output-len") || !strcmp(f, "--random-output-len") ? &a->output_len
                                                                                    : NULL;
        if (l) {
            if (!(v = value(argc, argv, &i)) || !cli_parse_int(f, v, 1, 1 << 24, l)) return 2;
        } else if (!strcmp(f, "--url") || !strcmp(f, "--base-url")) {
            if (!(a->url = value(argc, argv, &i))) return 2;
        } else if (!strcmp(f, "--model")) {
            if (!(a->model = value(argc, argv, &i))) return 2;
        } else if (!strcmp(f, "--api-key")) {
            if (!(a->api_key = value(argc, argv, &i))) return 2;
        } else if (!strcmp(f, "--seed")) {
            if (!(v = value(argc, argv, &i)) || !cli_parse_u64(f, v, &a->seed)) return 2;
        } else if (!strcmp(f, "--temperature")) {
            if (!(v = value(argc, argv, &i)) || !cli_parse_double(f, v, 0, 100, &a->temperature))
                return 2;
        } else if (!strcmp(f, "--timeout")) {
            if (!(v = value(argc, argv, &i)) || !cli_parse_double(f, v, 0.001, 1e6, &a->timeout_s))
                return 2;
        } else if (!strcmp(f, "--json")) {
            a->json = true;
        } else {
            fprintf(stderr, "wna16 bench serve: unknown flag %s (see wna16 bench serve --help)\n",
                    f);
            return 2;
        }
    }
    if (!a->url) {
        fprintf(stderr, "wna16 bench serve: --url URL is required, e.g. --url "
                        "http://127.0.0.1:8000 (see wna16 bench serve --help)\n");
        return 2;
    }
    if (strncmp(a->url, "http://", 7) && strncmp(a->url, "https://", 8)) {
        fprintf(stderr,
                "wna16 bench serve: --url %s: expected http://HOST:PORT or https://HOST:PORT\n",
                a->url);
        return 2;
    }
    if (strlen(a->url) > 1000) {
        fprintf(stderr, "wna16 bench serve: --url is over 1000 characters\n");
        return 2;
    }
    return -1;
}

/* The model's name, context and vocabulary from GET /v1/models. */
static bool server_info(bs_run *run, int64_t *context, char *err, size_t cap) {
    const bs_args *a = run->a;
    bs_body b = {0};
    if (!http_get(a, "/v1/models", &b, err, cap)) {
        free(b.p);
        return false;
    }
    json_t *j = b.p ? json_loads(b.p, 0, NULL) : NULL;
    json_t *m0 = json_array_get(json_object_get(j, "data"), 0);
    const char *id = json_string_value(json_object_get(m0, "id"));
    bool ok = id || a->model;
    if (!ok) snprintf(err, cap, "GET %s/v1/models: no model in the answer", a->url);
    snprintf(run->model, sizeof run->model, "%s", a->model ? a->model : id ? id : "");
    json_t *ml = json_object_get(m0, "max_model_len"), *vs = json_object_get(m0, "vocab_size");
    *context = json_is_integer(ml) ? (int64_t)json_integer_value(ml) : 0;
    /* a server that does not say (vLLM): ids below 1000 are in every vocabulary */
    run->vocab = json_is_integer(vs) && json_integer_value(vs) > 0 ? json_integer_value(vs) : 1000;
    json_decref(j);
    free(b.p);
    return ok;
}

static void print_stat_json(FILE *f, const char *name, bs_stat s) {
    fprintf(f,
            ", \"mean_%s_ms\": %.9g, \"median_%s_ms\": %.9g, \"p90_%s_ms\": %.9g, "
            "\"p99_%s_ms\": %.9g",
            name, 1e3 * s.mean, name, 1e3 * s.median, name, 1e3 * s.p90, name, 1e3 * s.p99);
}

static void print_stat_text(FILE *f, const char *title, bs_stat s) {
    fprintf(f, "%-6s ms   mean %9.3f  median %9.3f  p90 %9.3f  p99 %9.3f  (n %zu)\n", title,
            1e3 * s.mean, 1e3 * s.median, 1e3 * s.p90, 1e3 * s.p99, s.n);
}

static int report(const bs_run *run, double duration, const bs_metrics *m0, const bs_metrics *m1) {
    const bs_args *a = run->a;
    long R = a->requests, ok = 0, short_out = 0;
    int64_t in_tok = 0, out_tok = 0;
    double *ttft = malloc((size_t)R * sizeof *ttft), *tpot = malloc((size_t)R * sizeof *tpot),
           *e2el = malloc((size_t)R * sizeof *e2el);
    double *itl = malloc((run->n_itl ? run->n_itl : 1) * sizeof *itl);
    if (!ttft || !tpot || !e2el || !itl) {
        fprintf(stderr, "wna16 bench serve: out of memory\n");
        free(ttft), free(tpot), free(e2el), free(itl);
        return 1;
    }
    size_t n_tpot = 0;
    const char *first_error = NULL;
    for (long i = 0; i < R; i++) {
        const bs_result *r = &run->res[i];
        if (!r->ok) {
            if (!first_error) first_error = r->error;
            continue;
        }
        ttft[ok] = r->ttft, e2el[ok] = r->e2el;
        ok++;
        in_tok += a->input_len;
        out_tok += r->out_tokens;
        if (r->out_tokens != a->output_len) short_out++;
        if (r->out_tokens > 1) tpot[n_tpot++] = (r->e2el - r->ttft) / (double)(r->out_tokens - 1);
    }
    if (run->n_itl) memcpy(itl, run->itl, run->n_itl * sizeof *itl);
    bs_stat s_ttft = stat_of(ttft, (size_t)ok), s_tpot = stat_of(tpot, n_tpot),
            s_itl = stat_of(itl, run->n_itl), s_e2el = stat_of(e2el, (size_t)ok);
    double dec_steps = m1->decode_steps - m0->decode_steps, dec_s = m1->decode_s - m0->decode_s,
           roof_s = m1->roof_s - m0->roof_s, rows = m1->decode_rows - m0->decode_rows,
           steps = m1->steps - m0->steps, step_s = m1->step_s - m0->step_s;
    bool server = m0->have && m1->have && dec_steps > 0;
    double fraction = server && dec_s > 0 && roof_s > 0 ? roof_s / dec_s : 0;
    if (a->json) {
        printf("{\"url\": \"%s\", \"model\": \"%s\", \"concurrency\": %ld, \"num_prompts\": %ld, "
               "\"input_len\": %ld, \"output_len\": %ld, \"seed\": %llu, \"completed\": %ld, "
               "\"failed\": %ld, \"short_outputs\": %ld, \"duration\": %.9g, "
               "\"total_input_tokens\": %lld, \"total_output_tokens\": %lld, "
               "\"request_throughput\": %.9g, \"output_throughput\": %.9g, "
               "\"total_token_throughput\": %.9g",
               a->url, run->model, a->concurrency, R, a->input_len, a->output_len, a->seed, ok,
               R - ok, short_out, duration, (long long)in_tok, (long long)out_tok,
               (double)ok / duration, (double)out_tok / duration,
               (double)(in_tok + out_tok) / duration);
        print_stat_json(stdout, "ttft", s_ttft);
        print_stat_json(stdout, "tpot", s_tpot);
        print_stat_json(stdout, "itl", s_itl);
        print_stat_json(stdout, "e2el", s_e2el);
        if (server)
            printf(", \"server\": {\"steps\": %.9g, \"step_ms\": %.9g, \"decode_steps\": %.9g, "
                   "\"mean_decode_rows\": %.9g, \"decode_step_ms\": %.9g, "
                   "\"decode_roofline_ms\": %.9g, \"roofline_fraction\": %.9g, "
                   "\"read_gbs\": %.9g, \"peak_gflops\": %.9g}",
                   steps, steps > 0 ? 1e3 * step_s / steps : 0, dec_steps, rows / dec_steps,
                   1e3 * dec_s / dec_steps, 1e3 * roof_s / dec_steps, fraction, m1->read_gbs,
                   m1->peak);
        else
            printf(", \"server\": null");
        printf(", \"first_error\": ");
        if (first_error) {
            json_t *e = json_string(first_error);
            char *t = e ? json_dumps(e, JSON_ENCODE_ANY) : NULL;
            printf("%s", t ? t : "\"?\"");
            free(t);
            json_decref(e);
        } else {
            printf("null");
        }
        printf("}\n");
    } else {
        printf("bench serve: %s, model %s, %ld clients, %ld requests of %ld prompt + %ld output "
               "tokens (seed %llu)\n",
               a->url, run->model, a->concurrency, R, a->input_len, a->output_len, a->seed);
        printf("completed %ld, failed %ld in %.3f s: %.3f requests/s, %.2f output tok/s, %.2f "
               "total tok/s\n",
               ok, R - ok, duration, (double)ok / duration, (double)out_tok / duration,
               (double)(in_tok + out_tok) / duration);
        print_stat_text(stdout, "TTFT", s_ttft);
        print_stat_text(stdout, "TPOT", s_tpot);
        print_stat_text(stdout, "ITL", s_itl);
        print_stat_text(stdout, "E2EL", s_e2el);
        if (server)
            printf("server: %.0f decode steps of %.2f rows on average, forward %.3f ms/step, "
                   "roofline %.3f ms/step = %.1f%% of the roofline (read %.2f GB/s, peak %.1f "
                   "GFLOP/s); all %.0f steps %.3f ms on average\n",
                   dec_steps, rows / dec_steps, 1e3 * dec_s / dec_steps, 1e3 * roof_s / dec_steps,
                   100 * fraction, m1->read_gbs, m1->peak, steps,
                   steps > 0 ? 1e3 * step_s / steps : 0);
        else
            printf("server: no wna16 step metrics at %s/metrics (not wna16 serve)\n", a->url);
    }
    if (short_out)
        fprintf(stderr,
                "wna16 bench serve: warning: %ld requests generated other than %ld tokens (does "
                "the server honour ignore_eos?)\n",
                short_out, a->output_len);
    if (first_error)
        fprintf(stderr, "wna16 bench serve: %ld of %ld requests failed; the first: %s\n", R - ok, R,
                first_error);
    free(ttft), free(tpot), free(e2el), free(itl);
    return first_error ? 1 : 0;
}

int wna16_bench_serve(int argc, char **argv) {
    bs_args a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0) return rc;
    char url[1001];
    snprintf(url, sizeof url, "%s", a.url);
    for (size_t n = strlen(url); n && url[n - 1] == '/'; n--) url[n - 1] = '\0';
    a.url = url;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "wna16 bench serve: libcurl could not start\n");
        return 1;
    }
    bs_run run = {.a = &a};
    pthread_mutex_init(&run.mu, NULL);
    char err[1400];
    int64_t context = 0;
    rc = 1;
    if (!server_info(&run, &context, err, sizeof err)) {
        fprintf(stderr, "wna16 bench serve: %s\n", err);
        goto out;
    }
    if (context && a.input_len + a.output_len > context) {
        fprintf(stderr,
                "wna16 bench serve: --input-len %ld + --output-len %ld is over the server's "
                "max_model_len %lld\n",
                a.input_len, a.output_len, (long long)context);
        rc = 2;
        goto out;
    }
    run.res = calloc((size_t)a.requests, sizeof *run.res);
    pthread_t *th = calloc((size_t)a.concurrency, sizeof *th);
    if (!run.res || !th) {
        free(th);
        fprintf(stderr, "wna16 bench serve: out of memory\n");
        goto out;
    }
    /* warm-up: untimed, and a request that cannot succeed stops here */
    CURL *c = curl_easy_init();
    bs_result warm;
    if (c) send_one(&run, c, -1, a.output_len < 2 ? a.output_len : 2, &warm, false);
    if (c) curl_easy_cleanup(c);
    if (!c || !warm.ok) {
        fprintf(stderr, "wna16 bench serve: the warm-up request failed: %s\n",
                c ? warm.error : "libcurl could not start");
        free(th);
        goto out;
    }
    bs_metrics m0 = read_metrics(&a);
    double t0 = cli_now();
    long started = 0;
    for (long i = 0; i < a.concurrency && i < a.requests; i++, started++)
        if (pthread_create(&th[i], NULL, client, &run)) break;
    if (!started) {
        fprintf(stderr, "wna16 bench serve: cannot start client threads\n");
        free(th);
        goto out;
    }
    for (long i = 0; i < started; i++) pthread_join(th[i], NULL);
    double duration = cli_now() - t0;
    free(th);
    bs_metrics m1 = read_metrics(&a);
    rc = report(&run, duration, &m0, &m1);
out:
    free(run.res);
    free(run.itl);
    pthread_mutex_destroy(&run.mu);
    curl_global_cleanup();
    return rc;
}

#else

int wna16_bench_serve(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            printf("usage: wna16 bench serve --url URL ... (this wna16 was built without "
                   "libcurl: install libcurl4-openssl-dev, as scripts/setup.sh does, and "
                   "rebuild)\n");
            return 0;
        }
    fprintf(stderr, "wna16 bench serve: this wna16 was built without libcurl; install "
                    "libcurl4-openssl-dev (scripts/setup.sh does) and rebuild\n");
    return 1;
}

#endif
