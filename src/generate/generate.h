/* Sampling's companions, shared by every front end through the engine:
 * log-probabilities of a row of logits (logprob.c) and the output processor
 * that turns sampled tokens into text (output.c). */
#ifndef WNA16_GENERATE_GENERATE_H
#define WNA16_GENERATE_GENERATE_H

#include "core/common.h"

/* log p(id) under logits[0..V) (log-softmax in double) and the top k ids
 * (k <= 20), most likely first, ties to the lower id; NaN logits never
 * count. O(V log k): one pass for the sum, one heap of k for the top. */
void wna16_logprob_row(const float *logits, int64_t V, int32_t id, int k,
                       wna16_token_logprob *out);

/* What decides a sequence's end and its text. */
typedef struct wna16_output_rules {
    const int32_t *eos; /* the model's EOS ids (ignored with ignore_eos) */
    size_t n_eos;
    const int32_t *stop_ids;
    size_t n_stop_ids;
    char **stop; /* stop strings */
    size_t n_stop;
    bool ignore_eos, include_stop_str, skip_special;
    int64_t min_tokens, max_tokens;
} wna16_output_rules;

/* One sequence's output: its text so far, what was released of it, and
 * what ended it. */
typedef struct wna16_output {
    const wna16_output_rules *rules;
    const wna16_tokenizer *tok; /* NULL: ids only */
    wna16_detok_stream *detok;
    wna16_buf text;  /* generated text (without a stop string unless included) */
    size_t released; /* bytes of text handed out */
    size_t hold;     /* longest stop string - 1: bytes held back while one may begin */
    int64_t generated;
    wna16_finish_reason finish;
    const char *stop_str;
    int32_t stop_token;
} wna16_output;

wna16_status wna16_output_init(wna16_ctx *ctx, wna16_output *o, const wna16_tokenizer *tok,
                               const wna16_output_rules *rules);
void wna16_output_free(wna16_output *o);
/* Takes one sampled token; context_left: positions the sequence may still
 * grow by after it. Sets o->finish when it ended the sequence. */
wna16_status wna16_output_push(wna16_ctx *ctx, wna16_output *o, int32_t id, int64_t context_left);
/* Ends the sequence now (finish "stop"; stop_token the id that ended it,
 * or -1), its held text released. */
wna16_status wna16_output_end(wna16_ctx *ctx, wna16_output *o, int32_t stop_token);
/* Text ready to hand out (all of it once finished); marks it released. */
void wna16_output_take(wna16_output *o, const char **text, size_t *len);

#endif
