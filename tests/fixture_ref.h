/* A fixture's transformers reference (reference.json beside the model, made
 * by the tools/gen_*_fixture.py scripts): the prompt, the last position's
 * logits over a vocabulary of V, and the greedy continuation; with the
 * comparisons the model tests take of them. One test file includes it. */
#ifndef WNA16_TESTS_FIXTURE_REF_H
#define WNA16_TESTS_FIXTURE_REF_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum { V = 512, N_MAX = 64 };

static int32_t prompt[N_MAX], want_greedy[N_MAX];
static size_t n_prompt, n_greedy;
static float want_logits[V];

static bool load_reference(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    if (!root) return false;
    json_t *p = json_object_get(root, "prompt_ids"), *l = json_object_get(root, "logits_last"),
           *g = json_object_get(root, "greedy_new_tokens");
    n_prompt = json_array_size(p);
    n_greedy = json_array_size(g);
    bool ok = n_prompt <= N_MAX && n_greedy <= N_MAX && json_array_size(l) == V;
    for (size_t i = 0; ok && i < n_prompt; i++)
        prompt[i] = (int32_t)json_integer_value(json_array_get(p, i));
    for (size_t i = 0; ok && i < V; i++)
        want_logits[i] = (float)json_number_value(json_array_get(l, i));
    for (size_t i = 0; ok && i < n_greedy; i++)
        want_greedy[i] = (int32_t)json_integer_value(json_array_get(g, i));
    json_decref(root);
    return ok;
}

static int32_t argmax(const float *v) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static double max_abs(const float *v) {
    double m = 0;
    for (int i = 0; i < V; i++) m = fmax(m, fabs(v[i]));
    return m;
}

static double max_diff(const float *a, const float *b) {
    double m = 0;
    for (int i = 0; i < V; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

#endif
