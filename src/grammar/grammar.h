/* Constrained decoding (docs/grammar.md): a request's output format is
 * compiled into a grammar over bytes (JSON Schema, regex, a choice of
 * strings, llama.cpp's GBNF), and a matcher per request gives, at each
 * decode step, the set of token ids whose bytes keep the output a prefix of
 * a string of the grammar.
 *
 *   grammar_vocab *v;   grammar_vocab_create(d, tok, n_logits, stops, n_stops, 0, &v);
 *   grammar *g;         grammar_compile(d, &spec, &g);
 *   grammar_matcher *m; grammar_matcher_create(d, g, v, &m);
 *   each step: grammar_matcher_fill_mask(d, m, mask); grammar_mask_apply(mask, logits, n);
 *              sample id; grammar_matcher_accept(d, m, id);
 *
 * Everything here eats untrusted input: compiling and matching are bounded
 * in work and memory (grammar_limits), and a failure is a wna16_status with
 * a detail naming the construct (INVALID_ARGUMENT: malformed input;
 * UNSUPPORTED: a keyword or construct outside the subset; LIMIT: a bound
 * was hit). A grammar is immutable after compiling except for its mask
 * cache, which is guarded: matchers on several threads may share one. A
 * matcher is used by one thread at a time. */
#ifndef WNA16_GRAMMAR_H
#define WNA16_GRAMMAR_H

#include "core/common.h"

typedef struct grammar grammar;
typedef struct grammar_vocab grammar_vocab;
typedef struct grammar_matcher grammar_matcher;

/* ------------------------------------------------------------- limits */

/* Bounds on the work and memory that one input may cost. Zero fields take
 * the defaults (grammar_limits_default). */
typedef struct grammar_limits {
    size_t max_text;          /* bytes of schema / regex / GBNF text (1 MiB) */
    size_t max_nfa_states;    /* per compiled rule, after repetitions expand (200k) */
    size_t max_dfa_states;    /* all rules together (100k) */
    size_t max_schema_depth;  /* nesting of schemas and $ref chains (64) */
    size_t max_stack_depth;   /* frames of a parse stack; deeper parses are not
                                 offered (the language is cut there) (1024) */
    size_t max_stacks;        /* parse stacks alive at once (ambiguity) (1024) */
    size_t max_work;          /* parser expansions per matcher call (4M) */
    size_t max_cache_bytes;   /* mask cache per grammar (256 MiB) */
} grammar_limits;

void grammar_limits_default(grammar_limits *l);

/* ------------------------------------------------------------ compile */

typedef enum grammar_kind {
    GRAMMAR_JSON_OBJECT, /* any JSON object */
    GRAMMAR_JSON_SCHEMA, /* text: a JSON Schema (the subset of docs/grammar.md) */
    GRAMMAR_REGEX,       /* text: a regular expression matched against the whole output */
    GRAMMAR_CHOICE,      /* choices: the output is exactly one of them */
    GRAMMAR_GBNF,        /* text: llama.cpp GBNF; the start rule is `root` */
} grammar_kind;

/* How JSON is laid out between tokens (JSON_OBJECT, JSON_SCHEMA and the
 * schema parts of tool calls). FLEXIBLE allows one space, or a newline and
 * up to 20 spaces or tabs, around every structural character: enough for
 * compact and indented output, never an endless run of whitespace. */
typedef enum grammar_json_ws { GRAMMAR_WS_FLEXIBLE, GRAMMAR_WS_COMPACT } grammar_json_ws;

typedef struct grammar_spec {
    grammar_kind kind;
    const char *text; /* JSON_SCHEMA, REGEX, GBNF */
    size_t len;
    const char *const *choices; /* CHOICE: UTF-8 strings */
    size_t n_choices;
    grammar_json_ws ws;
    /* JSON_SCHEMA: an object without additionalProperties admits no other
     * keys (OpenAI's strict mode, and XGrammar's default); false: the JSON
     * Schema default (any other key). additionalProperties set explicitly
     * always wins. */
    bool strict;
    const grammar_limits *limits; /* NULL: defaults */
} grammar_spec;

wna16_status grammar_compile(wna16_diag *d, const grammar_spec *spec, grammar **out);
void grammar_free(grammar *g);

/* Number of compiled rules and DFA states (for reports and tests). */
void grammar_stats(const grammar *g, size_t *rules, size_t *states, size_t *byte_classes);

/* -------------------------------------------- composition (GBNF builder) */

/* Grammars made of parts: literal text, JSON-schema values, regexes, and
 * GBNF written by hand, assembled as GBNF rules and compiled at the end.
 * Each add_* function defines rule `name` (and helper rules whose names
 * start with `name-`). Errors are kept: the first one is returned by
 * grammar_builder_compile (and every add_* returns it too). */
typedef struct grammar_builder grammar_builder;

wna16_status grammar_builder_create(wna16_diag *d, const grammar_limits *limits,
                                    grammar_builder **out);
void grammar_builder_free(grammar_builder *b);
/* name ::= body, body in GBNF syntax (rule references, literals, ...). */
wna16_status grammar_builder_add_rule(wna16_diag *d, grammar_builder *b, const char *name,
                                      const char *body);
wna16_status grammar_builder_add_json_schema(wna16_diag *d, grammar_builder *b, const char *name,
                                             const char *schema, size_t len, bool strict,
                                             grammar_json_ws ws);
/* Any JSON object (schema NULL in add_json_schema means the same). */
wna16_status grammar_builder_add_json_object(wna16_diag *d, grammar_builder *b, const char *name,
                                             grammar_json_ws ws);
wna16_status grammar_builder_add_regex(wna16_diag *d, grammar_builder *b, const char *name,
                                       const char *regex, size_t len);
/* Appends text to out as a GBNF string literal ("..." with escapes). */
void grammar_gbnf_literal(wna16_buf *out, const char *text, size_t len);
/* The assembled GBNF text (NUL-terminated, owned by the builder). */
const char *grammar_builder_text(const grammar_builder *b);
wna16_status grammar_builder_compile(wna16_diag *d, grammar_builder *b, const char *root,
                                     grammar **out);

/* Tool calls in a model family's syntax, one or more (parallel) or exactly
 * one, each naming one of the tools with arguments valid for its
 * parameters schema (NULL: any JSON object):
 *   HERMES       <tool_call>\n{"name": "N", "arguments": {...}}\n</tool_call>   (Qwen, Hermes)
 *   LLAMA3_JSON  {"name": "N", "parameters": {...}}                             (one call)
 *   MISTRAL      [TOOL_CALLS][{"name": "N", "arguments": {...}}, ...]
 * Parallel HERMES calls are separated by "\n"; parallel LLAMA3_JSON calls
 * by ";" (as Llama 3.2's template shows them). */
typedef enum grammar_tool_format {
    GRAMMAR_TOOLS_HERMES,
    GRAMMAR_TOOLS_LLAMA3_JSON,
    GRAMMAR_TOOLS_MISTRAL,
} grammar_tool_format;

typedef struct grammar_tool {
    const char *name;
    const char *parameters; /* JSON Schema text, or NULL */
} grammar_tool;

wna16_status grammar_compile_tool_calls(wna16_diag *d, grammar_tool_format format,
                                        const grammar_tool *tools, size_t n_tools, bool parallel,
                                        bool strict, const grammar_limits *limits,
                                        grammar **out);

/* ---------------------------------------------------------- vocabulary */

/* Non-special added tokens (Qwen's <tool_call>, <think>) count as their
 * text; without it every added token is left out of grammars. Special
 * tokens are never allowed inside a grammar. */
#define GRAMMAR_VOCAB_ADDED_AS_TEXT 1u

/* Every token's bytes as the decoder writes them in the middle of a text
 * (byte-level BPE through the GPT-2 byte alphabet; byte-fallback <0xNN>
 * tokens as their byte, `▁` as a space), and a trie over them, built once
 * per tokenizer. n_logits (>= the tokenizer's ids) sizes the masks: ids
 * past the tokenizer's are never allowed. stop_ids are allowed exactly when
 * the grammar can end. */
wna16_status grammar_vocab_create(wna16_diag *d, const wna16_tokenizer *tok, size_t n_logits,
                                  const int32_t *stop_ids, size_t n_stops, unsigned flags,
                                  grammar_vocab **out);
/* The same from raw byte strings (tokens[i] NULL: a token that is never
 * allowed); for tests and tools. */
wna16_status grammar_vocab_from_bytes(wna16_diag *d, const char *const *tokens,
                                      const size_t *lens, size_t n_tokens, size_t n_logits,
                                      const int32_t *stop_ids, size_t n_stops,
                                      grammar_vocab **out);
void grammar_vocab_free(grammar_vocab *v);
size_t grammar_vocab_n_logits(const grammar_vocab *v);
/* A token's bytes (NULL with *len 0 when it has none in grammars). */
const char *grammar_vocab_token(const grammar_vocab *v, int32_t id, size_t *len);
bool grammar_vocab_is_stop(const grammar_vocab *v, int32_t id);
/* Nodes of the token trie (for reports). */
size_t grammar_vocab_trie_nodes(const grammar_vocab *v);

/* -------------------------------------------------------------- matcher */

wna16_status grammar_matcher_create(wna16_diag *d, const grammar *g, const grammar_vocab *v,
                                    grammar_matcher **out);
void grammar_matcher_free(grammar_matcher *m);
/* Back to the start of the grammar. */
void grammar_matcher_reset(grammar_matcher *m);
wna16_status grammar_matcher_clone(wna16_diag *d, const grammar_matcher *m,
                                   grammar_matcher **out);

/* 64-bit words of a mask: (n_logits + 63) / 64. Bit i of word i / 64 set:
 * token i is allowed. */
size_t grammar_mask_words(const grammar_vocab *v);
/* Fills mask (grammar_mask_words words) for the current state. A finished
 * matcher allows only the stop tokens. LIMIT when the grammar's parse
 * exploded (the detail says which bound). */
wna16_status grammar_matcher_fill_mask(wna16_diag *d, grammar_matcher *m, uint64_t *mask);
/* logits[i] = -INFINITY for every token the mask refuses. */
void grammar_mask_apply(const uint64_t *mask, float *logits, size_t n_logits);

/* Advances by one token. INVALID_ARGUMENT (and no change) for a token the
 * mask would refuse; a stop token is accepted when the grammar can end, and
 * finishes the matcher. */
wna16_status grammar_matcher_accept(wna16_diag *d, grammar_matcher *m, int32_t token);
/* Advances by raw bytes (forced text, tests); INVALID_ARGUMENT and no change
 * when they leave the grammar. */
wna16_status grammar_matcher_accept_bytes(wna16_diag *d, grammar_matcher *m, const char *s,
                                          size_t n);
/* Whether the bytes fit here (a prefix of the grammar's strings follows),
 * without advancing: the byte-by-byte reference the masks are tested
 * against. */
wna16_status grammar_matcher_check_bytes(wna16_diag *d, grammar_matcher *m, const char *s, size_t n,
                                         bool *fits);
/* The text so far is a whole string of the grammar (a stop token would be
 * accepted). */
bool grammar_matcher_can_end(const grammar_matcher *m);
/* A stop token was accepted, or nothing but the end is possible. */
bool grammar_matcher_is_finished(const grammar_matcher *m);

#endif
