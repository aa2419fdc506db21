/*
 * wna16 — weight-only quantized (int4/int8 weights, 16-bit activations)
 * inference on CPU. This is the one public header of libwna16.
 *
 * Conventions (see docs/architecture.md):
 *  - Every fallible call returns a wna16_status. WNA16_OK is 0.
 *  - Calls that can fail with a detail take a wna16_ctx; after a failure
 *    wna16_ctx_error(ctx) names the file, tensor, expected vs found, and the
 *    fix. Status values are pinned: never renumber, only append.
 *  - Handles are opaque; every open/create call has a close/free that
 *    accepts NULL.
 *  - Sizes are int64_t; shapes follow PyTorch order ([out, in] for weights).
 */
#ifndef WNA16_H
#define WNA16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WNA16_BUILDING) && defined(__GNUC__)
#define WNA16_API __attribute__((visibility("default")))
#else
#define WNA16_API
#endif

#define WNA16_VERSION_MAJOR 0
#define WNA16_VERSION_MINOR 1
#define WNA16_VERSION_PATCH 0
/* The version of this header; the library's own, at run time, is below.
 * The shared library's SONAME carries the major: libwna16.so.MAJOR. */
#define WNA16_VERSION_NUMBER (WNA16_VERSION_MAJOR * 10000 + WNA16_VERSION_MINOR * 100 + WNA16_VERSION_PATCH)
/* "MAJOR.MINOR.PATCH" and MAJOR * 10000 + MINOR * 100 + PATCH of the library. */
WNA16_API const char *wna16_version(void);
WNA16_API int wna16_version_number(void);

/* ---------------------------------------------------------------- status */

/* Pinned numeric values, grouped by layer. docs/errors.md lists each one,
 * what triggers it and the test that proves it. */
typedef enum wna16_status {
    WNA16_OK = 0,
    /* generic */
    WNA16_ERR_INVALID_ARGUMENT = 1,
    WNA16_ERR_OUT_OF_MEMORY = 2,
    WNA16_ERR_IO = 3,
    WNA16_ERR_UNSUPPORTED = 4,
    WNA16_ERR_INTERNAL = 5,
    WNA16_ERR_LIMIT = 6, /* an allocation or size cap was hit */
    WNA16_ERR_ABORTED = 7, /* the context's abort callback asked to stop */
    WNA16_ERR_UNAVAILABLE = 8, /* an engine that is shutting down, or whose model failed */
    /* safetensors container (format-spec §1.4, same names as the reference crate) */
    WNA16_ERR_HEADER_TOO_SMALL = 10,
    WNA16_ERR_HEADER_TOO_LARGE = 11,
    WNA16_ERR_INVALID_HEADER_LENGTH = 12,
    WNA16_ERR_INVALID_HEADER = 13,                 /* not UTF-8 */
    WNA16_ERR_INVALID_HEADER_DESERIALIZATION = 14, /* not JSON of the right shape */
    WNA16_ERR_DUPLICATE_KEY = 15,
    WNA16_ERR_UNKNOWN_DTYPE = 16,
    WNA16_ERR_INVALID_OFFSET = 17,
    WNA16_ERR_VALIDATION_OVERFLOW = 18,
    WNA16_ERR_MISALIGNED_SLICE = 19,
    WNA16_ERR_TENSOR_INVALID_INFO = 20,
    WNA16_ERR_METADATA_INCOMPLETE_BUFFER = 21,
    WNA16_ERR_TENSOR_NOT_FOUND = 22,
    /* sharded checkpoints and model directories */
    WNA16_ERR_INDEX_INVALID = 30,
    WNA16_ERR_SHARD_MISSING = 31,
    WNA16_ERR_PATH_UNSAFE = 32,
    WNA16_ERR_INDEX_MISMATCH = 33,
    /* configs and quantization metadata */
    WNA16_ERR_CONFIG_INVALID = 40,
    WNA16_ERR_QUANT_CONFIG_INVALID = 41,
    WNA16_ERR_RUNTIME_ACTORDER = 42, /* actorder=group/dynamic, or a non-trivial g_idx */
    WNA16_ERR_SHAPE_MISMATCH = 43,
    WNA16_ERR_TENSOR_MISSING = 44,
    WNA16_ERR_GROUP_SIZE = 45,
    WNA16_ERR_UNSUPPORTED_BITS = 46,
    WNA16_ERR_UNSUPPORTED_SCHEME = 47, /* type, strategy or format we do not run */
    WNA16_ERR_BAD_SCALE = 48,          /* zero, negative, NaN or Inf scale */
    WNA16_ERR_BAD_ZERO_POINT = 49,
    WNA16_ERR_BAD_DTYPE = 50, /* a known dtype where another is required */
    /* tensor-parallel sharding plan */
    WNA16_ERR_TP_INDIVISIBLE = 60,
    /* tokenizer */
    WNA16_ERR_TOKENIZER_INVALID = 70,
    WNA16_ERR_TOKENIZER_REGEX = 71,
    WNA16_ERR_INVALID_UTF8 = 72,
    WNA16_ERR_TOKEN_ID = 73,
    /* runtime */
    WNA16_ERR_CONTEXT_OVERFLOW = 80,
    WNA16_ERR_EXPERT_ID = 81,
    /* distributed */
    WNA16_ERR_COMM = 90,
    WNA16_ERR_PEER_FAILED = 91,
} wna16_status;

/* The enum's name without the WNA16_ prefix, e.g. "ERR_DUPLICATE_KEY"; never NULL. */
WNA16_API const char *wna16_status_str(wna16_status s);

/* Frees memory the library returned to the caller (strings and arrays the
 * calls below hand out through char ** or int32_t ** arguments). Use it
 * rather than free(): the library may be built against another C runtime
 * or allocator than its caller. NULL is ignored. */
WNA16_API void wna16_free(void *p);

/* Options structs (wna16_model_options, wna16_sampler_options,
 * wna16_generate_options, wna16_quantize_options, wna16_synth_options) begin with struct_size so
 * they can grow without breaking callers: fill them with their _init
 * function, which sets struct_size and the defaults, then set the fields you
 * want. The library reads only the first struct_size bytes (the fields an
 * older caller does not know keep their defaults of 0); 0 means this
 * header's layout, so a zeroed struct keeps working; a struct_size larger
 * than the library knows (a header newer than the library) is refused with
 * WNA16_ERR_INVALID_ARGUMENT. */

/* --------------------------------------------------------------- context */

/* A context carries the error detail of the last failed call made with it,
 * the callbacks set on it and its kernel tuning. Not thread-safe: use one
 * per thread. */
typedef struct wna16_ctx wna16_ctx;

WNA16_API wna16_status wna16_ctx_create(wna16_ctx **out);
WNA16_API void wna16_ctx_free(wna16_ctx *ctx);
/* Detail of the last failure ("" after success). Valid until the next call. */
WNA16_API const char *wna16_ctx_error(const wna16_ctx *ctx);

/* The library never prints and never exits: what it has to say goes to the
 * callbacks its caller installs (none by default, so nothing is said).
 * Callbacks run on the calling thread, never from the library's workers. */
typedef enum wna16_log_level {
    WNA16_LOG_ERROR = 0,
    WNA16_LOG_WARN = 1,
    WNA16_LOG_INFO = 2,
    WNA16_LOG_DEBUG = 3,
} wna16_log_level;
/* message: one line, no trailing newline. */
typedef void (*wna16_log_fn)(void *user, wna16_log_level level, const char *message);
/* Long work reports done of total layers: what is "load", "quantize" or
 * "synth". done grows from 0 and equals total once, at the end; quantize
 * reports fractions of a layer while a MoE layer's experts run. */
typedef void (*wna16_progress_fn)(void *user, const char *what, double done, double total);
/* Asked between steps of long work (load: per layer, quantize: per layer,
 * generate: per token); returning true stops it with WNA16_ERR_ABORTED. */
typedef bool (*wna16_abort_fn)(void *user);

/* Messages at max_level and more severe go to fn (NULL: none). */
WNA16_API void wna16_ctx_set_log(wna16_ctx *ctx, wna16_log_fn fn, void *user,
                                 wna16_log_level max_level);
WNA16_API void wna16_ctx_set_progress(wna16_ctx *ctx, wna16_progress_fn fn, void *user);
WNA16_API void wna16_ctx_set_abort(wna16_ctx *ctx, wna16_abort_fn fn, void *user);
/* Process-wide log callback for what is said outside any context (an
 * unrecognised WNA16_ISA value, read at the first kernel call). */
WNA16_API void wna16_set_log(wna16_log_fn fn, void *user, wna16_log_level max_level);

/* For front ends (the wna16 tool) that refuse something between library
 * calls and report it the way the library reports its own failures: sets
 * ctx's detail (wna16_ctx_error) to the formatted text and returns status.
 * A NULL ctx only returns status. */
WNA16_API wna16_status wna16_ctx_set_error(wna16_ctx *ctx, wna16_status status, const char *fmt,
                                           ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ----------------------------------------------------------------- dtypes */

/* safetensors dtypes in the reference crate's enum order (format-spec §1.3):
 * the writer sorts by this order, descending. */
typedef enum wna16_dtype {
    WNA16_DTYPE_BOOL = 0,
    WNA16_DTYPE_F4,
    WNA16_DTYPE_F6_E2M3,
    WNA16_DTYPE_F6_E3M2,
    WNA16_DTYPE_U8,
    WNA16_DTYPE_I8,
    WNA16_DTYPE_F8_E5M2,
    WNA16_DTYPE_F8_E4M3,
    WNA16_DTYPE_F8_E8M0,
    WNA16_DTYPE_F8_E4M3FNUZ,
    WNA16_DTYPE_F8_E5M2FNUZ,
    WNA16_DTYPE_I16,
    WNA16_DTYPE_U16,
    WNA16_DTYPE_F16,
    WNA16_DTYPE_BF16,
    WNA16_DTYPE_I32,
    WNA16_DTYPE_U32,
    WNA16_DTYPE_F32,
    WNA16_DTYPE_C64,
    WNA16_DTYPE_F64,
    WNA16_DTYPE_I64,
    WNA16_DTYPE_U64,
    WNA16_DTYPE_COUNT
} wna16_dtype;

WNA16_API const char *wna16_dtype_name(wna16_dtype d);
WNA16_API int wna16_dtype_bits(wna16_dtype d);

/* ------------------------------------------------------------ safetensors */

#define WNA16_MAX_RANK 8

/* A view of one tensor: zero-copy inside the mapped file when the tensor is
 * aligned to its element size there (every file the reference writer makes),
 * else an aligned copy the reader owns. */
typedef struct wna16_tensor_view {
    const char *name;
    wna16_dtype dtype;
    int rank;
    int64_t shape[WNA16_MAX_RANK];
    const void *data; /* aligned to the element size; little-endian, row-major */
    size_t nbytes;
} wna16_tensor_view;

typedef struct wna16_safetensors wna16_safetensors;

/* Maps a file and validates it fully (every rule of format-spec §1.4). */
WNA16_API wna16_status wna16_safetensors_open(wna16_ctx *ctx, const char *path,
                                              wna16_safetensors **out);
/* Same, over a caller-owned buffer (not copied; must outlive the handle). */
WNA16_API wna16_status wna16_safetensors_open_memory(wna16_ctx *ctx, const void *data,
                                                     size_t size, const char *label,
                                                     wna16_safetensors **out);
WNA16_API void wna16_safetensors_close(wna16_safetensors *st);
WNA16_API size_t wna16_safetensors_count(const wna16_safetensors *st);
/* Tensors in offset order. */
WNA16_API const wna16_tensor_view *wna16_safetensors_at(const wna16_safetensors *st, size_t i);
/* NULL when absent. */
WNA16_API const wna16_tensor_view *wna16_safetensors_find(const wna16_safetensors *st,
                                                          const char *name);
/* __metadata__ value for key, or NULL. */
WNA16_API const char *wna16_safetensors_metadata(const wna16_safetensors *st, const char *key);

/* Writer: collects tensors, then writes the canonical byte layout of the
 * reference writer (format-spec §1.5) to a temporary name and renames. */
typedef struct wna16_st_writer wna16_st_writer;
WNA16_API wna16_status wna16_st_writer_create(wna16_ctx *ctx, wna16_st_writer **out);
WNA16_API void wna16_st_writer_free(wna16_st_writer *w);
WNA16_API wna16_status wna16_st_writer_add(wna16_ctx *ctx, wna16_st_writer *w,
                                           const char *name, wna16_dtype dtype, int rank,
                                           const int64_t *shape, const void *data);
WNA16_API wna16_status wna16_st_writer_metadata(wna16_ctx *ctx, wna16_st_writer *w,
                                                const char *key, const char *value);
WNA16_API wna16_status wna16_st_writer_write(wna16_ctx *ctx, wna16_st_writer *w,
                                             const char *path);
/* Serialises into a buffer the caller frees with wna16_free(). */
WNA16_API wna16_status wna16_st_writer_serialize(wna16_ctx *ctx, wna16_st_writer *w,
                                                 uint8_t **out, size_t *out_size);

/* ---------------------------------------------------------- checkpoints */

/* A Hugging Face model directory: config.json, the quantization config,
 * and every safetensors shard (through model.safetensors.index.json when
 * present). Opening validates the whole checkpoint before any compute. */
typedef struct wna16_checkpoint wna16_checkpoint;

WNA16_API wna16_status wna16_checkpoint_open(wna16_ctx *ctx, const char *dir,
                                             wna16_checkpoint **out);
WNA16_API void wna16_checkpoint_close(wna16_checkpoint *ck);
/* Looks a tensor up across all shards; NULL when absent. */
WNA16_API const wna16_tensor_view *wna16_checkpoint_tensor(const wna16_checkpoint *ck,
                                                           const char *name);

/* Dequantizes the quantized module with this prefix (e.g.
 * "model.layers.0.mlp.experts.3.down_proj") to fp32 [out, in], or to bf16
 * bits when dtype == WNA16_DTYPE_BF16. out must hold out*in elements. */
WNA16_API wna16_status wna16_checkpoint_dequantize(wna16_ctx *ctx, const wna16_checkpoint *ck,
                                                   const char *module, wna16_dtype dtype,
                                                   void *out, int64_t *out_rows,
                                                   int64_t *out_cols);

/* Writes the `inspect` report (text, or JSON when json is true) for the TP
 * degrees given (or 1,2,4,8 when n_tp == 0); free *out_text with
 * wna16_free. *loadable is set when every asked degree is accepted. */
WNA16_API wna16_status wna16_checkpoint_report(wna16_ctx *ctx, const wna16_checkpoint *ck,
                                               const int *tp, int n_tp, bool json,
                                               char **out_text, bool *loadable);
/* The `inspect --ep` report: the expert-parallel plan of ep groups of tp
 * ranks (docs/distributed.md): each rank's routed experts, its bytes, the
 * combine, and the tensor-parallel verdict of everything but the routed
 * experts. A plan that cannot be made (ep or tp < 1, more ranks than routed
 * experts, a model without them) is refused: WNA16_ERR_INVALID_ARGUMENT or
 * WNA16_ERR_UNSUPPORTED with the sizes and the fix. *loadable: the plan is
 * accepted. */
WNA16_API wna16_status wna16_checkpoint_report_ep(wna16_ctx *ctx, const wna16_checkpoint *ck,
                                                  int ep, int tp, bool json, char **out_text,
                                                  bool *loadable);

/* ------------------------------------------------------------ distributed */

/* A communicator between tensor-parallel ranks (docs/distributed.md). Every
 * collective is made by all ranks, in the same order. Ranks in one process
 * (wna16_model_options.tp without .comm) use an internal threads backend;
 * one rank per process uses MPI. */
typedef struct wna16_comm wna16_comm;

/* True when the MPI plug-in (libwna16-mpi.so, built when an MPI
 * implementation is found at configure time) can be loaded: the core
 * library has no MPI dependency of its own. It is looked for at
 * $WNA16_MPI_PLUGIN, beside libwna16.so, beside the executable and in
 * <exe>/../lib, then on the loader's search path. */
WNA16_API bool wna16_mpi_built(void);
/* True when the environment says this process was started by an MPI
 * launcher (mpirun/mpiexec/srun: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK,
 * MPI_LOCALNRANKS or MV2_COMM_WORLD_SIZE is set). */
WNA16_API bool wna16_mpi_launched(void);
/* Initializes MPI (MPI_Init_thread asking for MPI_THREAD_SERIALIZED: one
 * thread at a time makes MPI calls, e.g. a server's engine thread after the
 * main thread loaded the model) unless the program already did, and returns
 * a communicator over a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN.
 * A collective that does not complete within WNA16_MPI_TIMEOUT seconds
 * (default 20; waits for rank 0's next request and the agreement after
 * loading use WNA16_MPI_IDLE_TIMEOUT, default 600; 0 disables either) fails
 * with PEER_FAILED naming the rank and the stalled collective; the
 * communicator is then broken (every later collective fails the same way)
 * and the process should exit. The all-reduce sums in rank order,
 * bit-identical to the threads backend. Errors: UNSUPPORTED (the plug-in
 * cannot be loaded; the detail says why and where it looked), COMM (MPI
 * failed, or the library gives a thread level below SERIALIZED). Free with
 * wna16_comm_free, which calls MPI_Finalize when this call initialized MPI. */
WNA16_API wna16_status wna16_comm_mpi_world(wna16_ctx *ctx, int *argc, char ***argv,
                                            wna16_comm **out);
WNA16_API int wna16_comm_size(const wna16_comm *c);
WNA16_API int wna16_comm_rank(const wna16_comm *c);
/* "single", "threads" or "mpi". */
WNA16_API const char *wna16_comm_backend(const wna16_comm *c);
WNA16_API void wna16_comm_free(wna16_comm *c);
/* Collective agreement on an outcome: each rank passes its own status (its
 * detail in ctx); every rank returns the first failing status in rank order,
 * with ctx's detail set to "rank R: <that rank's detail>" on every rank. */
WNA16_API wna16_status wna16_comm_check(wna16_ctx *ctx, wna16_comm *c, wna16_status mine);
/* Collective: copies root's bytes into every rank's buf. */
WNA16_API wna16_status wna16_comm_bcast(wna16_ctx *ctx, wna16_comm *c, void *buf, size_t bytes,
                                        int root);

/* Time spent inside collectives, as seen by one rank. For the all-reduce it
 * includes waiting for the slowest rank to arrive. */
typedef struct wna16_comm_stats {
    uint64_t all_reduce_calls, all_reduce_bytes; /* bytes of fp32 reduced (one rank's buffer) */
    double all_reduce_seconds;
    uint64_t broadcast_calls;
    double broadcast_seconds;
} wna16_comm_stats;
WNA16_API void wna16_comm_get_stats(const wna16_comm *c, wna16_comm_stats *out);
WNA16_API void wna16_comm_reset_stats(wna16_comm *c);

/* ------------------------------------------------------------------ model */

/* A loaded model: every tensor-parallel rank's shards (TP ranks run as
 * threads of this process), or, distributed, this process's rank only; the
 * KV cache, and the sampling state. */
typedef struct wna16_model wna16_model;

typedef struct wna16_model_options {
    size_t struct_size; /* sizeof(wna16_model_options), set by wna16_model_options_init */
    int tp;           /* tensor-parallel degree (1 when 0) */
    int threads;      /* compute threads in all (all cores when 0) */
    int64_t context;  /* KV cache length in tokens (min(4096, max_position_embeddings) when 0) */
    /* Distributed (one TP rank per process): when non-NULL, this process is
     * rank wna16_comm_rank(comm) of comm's size ranks; tp must be 0 or equal
     * that size, and threads counts this process's threads (default: the
     * cores this process may run on, shared among the ranks on this host).
     * The model then maps the checkpoint but reads and repacks only this
     * rank's slices, and borrows comm (free it after the model). See
     * wna16_model_follow for how the ranks run. */
    wna16_comm *comm;
    /* Expert parallelism (docs/distributed.md): ep groups of tp ranks, ep x
     * tp ranks in all (threads of this process, or with comm, that many
     * processes: comm's size must be ep x tp, and tp is then 1 when 0). Each
     * rank holds only its block of the routed experts, whole; attention,
     * dense MLPs and shared experts are split at degree tp inside each
     * group. 0 or 1: none. Refused (WNA16_ERR_UNSUPPORTED) for a model
     * without routed experts, and (INVALID_ARGUMENT) for more ranks than
     * routed experts or a communicator of another size. */
    int ep;
    /* The quantized linears' activations (docs/kernels.md §Int8
     * activations): WNA16_ACT_QUANT_NONE (0, the default) keeps them 16-bit
     * (WNA16); WNA16_ACT_QUANT_INT8 quantizes them to int8 as they come,
     * one scale per 128 inputs at most (W4A8, as llama.cpp's q8 activation
     * blocks; vLLM's W4A8 scales per token): faster where the linears are
     * compute-bound (AMX-INT8), at some accuracy (docs/models.md). Refused
     * (WNA16_ERR_UNSUPPORTED) on a level without the integer kernels (ref),
     * (INVALID_ARGUMENT) for another value. Unquantized (bf16) linears,
     * attention and the KV cache are unchanged. */
    int act_quant;
} wna16_model_options;
typedef enum wna16_act_quant { WNA16_ACT_QUANT_NONE = 0, WNA16_ACT_QUANT_INT8 = 1 } wna16_act_quant;
/* Zeroes *o and sets struct_size: every default (one rank, all cores, the
 * default context). */
WNA16_API void wna16_model_options_init(wna16_model_options *o);

/* Opens and validates the checkpoint in dir, checks that it shards at
 * options->tp (WNA16_ERR_TP_INDIVISIBLE otherwise), and repacks its weights.
 * Distributed (options->comm): collective; the whole plan is checked before
 * any rank allocates and the ranks agree on the outcome, so a refusal or an
 * error on any rank makes every rank return the same status and detail
 * ("rank R: ...").
 * Architectures: Qwen3MoeForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM,
 * MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen2ForCausalLM,
 * MistralForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM
 * (WNA16_ERR_UNSUPPORTED otherwise; docs/models.md). */
WNA16_API wna16_status wna16_model_load(wna16_ctx *ctx, const char *dir,
                                        const wna16_model_options *options, wna16_model **out);
WNA16_API void wna16_model_free(wna16_model *m);
WNA16_API int64_t wna16_model_vocab_size(const wna16_model *m);
WNA16_API int64_t wna16_model_context(const wna16_model *m);
/* Compute threads the model runs on, all ranks of this process together. */
WNA16_API int wna16_model_threads(const wna16_model *m);
/* Bytes of weights in the checkpoint (all ranks). */
WNA16_API size_t wna16_model_weight_bytes(const wna16_model *m);
/* Bytes of routed experts' weights the forwards have read since the model
 * was loaded, all ranks of this process together (a step's: the difference
 * across it); -1 where other processes hold ranks (distributed). */
WNA16_API int64_t wna16_model_routed_expert_bytes(const wna16_model *m);
/* End-of-sequence ids from generation_config.json and config.json. */
WNA16_API size_t wna16_model_eos(const wna16_model *m, const int32_t **ids);
/* Forgets the KV cache: the next call starts a new sequence. */
WNA16_API void wna16_model_reset(wna16_model *m);
/* Feeds ids (one batched prefill pass for n > 1) after what the cache holds;
 * writes the last position's logits (vocab floats) when logits != NULL.
 * WNA16_ERR_CONTEXT_OVERFLOW when the cache cannot hold them,
 * WNA16_ERR_TOKEN_ID for an id outside the vocabulary. */
WNA16_API wna16_status wna16_model_eval(wna16_ctx *ctx, wna16_model *m, const int32_t *ids,
                                        int64_t n, float *logits);

/* Scores a given sequence (perplexity, echo with logprobs): starts a new
 * sequence (the model's cache is reset before and after), runs ids[0..n)
 * and writes logprobs[t] = log p(ids[t] | ids[0..t)) for t in [1, n), the
 * log-softmax of the model's fp32 logits over its whole vocabulary
 * (accumulated in double); logprobs[0] = 0, nothing predicts the first
 * token. With top_k > 0, top_ids and top_logprobs ([n][top_k]) get the
 * top_k most likely tokens at each position, most likely first (row 0: ids
 * -1, logprobs -INFINITY). Reports progress as "score" (positions done of
 * n - 1) and honours the abort callback between chunks of 128 positions.
 * Distributed models: rank 0 calls it, as wna16_model_eval. Errors:
 * INVALID_ARGUMENT, TOKEN_ID, CONTEXT_OVERFLOW (n past the model's
 * context: score windows), OUT_OF_MEMORY, ABORTED, and the forward's own. */
WNA16_API wna16_status wna16_model_logprobs(wna16_ctx *ctx, wna16_model *m, const int32_t *ids,
                                            int64_t n, float *logprobs, int top_k,
                                            int32_t *top_ids, float *top_logprobs);

/* ---------------------------------------------- KV caches and batched steps */

/* A paged KV cache over one model, for many sequences at once (serving):
 * its memory is cut into blocks of WNA16_KV_BLOCK_SIZE positions, handed to
 * sequences as they grow; a sequence's blocks need not be contiguous. The
 * model's weights are only read through it, and wna16_model_eval keeps its
 * own single-sequence cache. Evaluations through one model run one at a
 * time (the caller serialises them). Distributed models: rank 0 creates,
 * evaluates and frees caches (each step sends its rows and block tables to
 * the other ranks, which keep mirrors inside wna16_model_follow); at most 7
 * at a time. */
typedef struct wna16_kv_cache wna16_kv_cache;

#define WNA16_KV_BLOCK_SIZE 16

typedef struct wna16_kv_cache_options {
    size_t struct_size;       /* sizeof(wna16_kv_cache_options), set by _init */
    int32_t max_seqs;         /* sequence ids are [0, max_seqs) (256 when 0) */
    int64_t n_blocks;         /* blocks (when 0: as many as memory_bytes holds) */
    size_t memory_bytes;      /* when n_blocks is 0 (and this is 0: one full context per
                               * 4 sequences, at least one context) */
    int64_t max_batch_tokens; /* rows one wna16_batch_eval takes (512 when 0) */
    bool prefix_caching;      /* keep full blocks' content for reuse (wna16_kv_cache_seq_reuse) */
} wna16_kv_cache_options;
WNA16_API void wna16_kv_cache_options_init(wna16_kv_cache_options *o);
/* Errors: INVALID_ARGUMENT (also: a distributed model's rank other than 0),
 * LIMIT (fewer blocks than one position; 7 caches on a distributed model),
 * OUT_OF_MEMORY (on any rank), COMM/PEER_FAILED. */
WNA16_API wna16_status wna16_kv_cache_create(wna16_ctx *ctx, wna16_model *m,
                                             const wna16_kv_cache_options *options,
                                             wna16_kv_cache **out);
WNA16_API void wna16_kv_cache_free(wna16_kv_cache *c);
/* Bytes one block takes (all ranks of this process). */
WNA16_API size_t wna16_kv_cache_block_bytes(const wna16_model *m);

typedef struct wna16_kv_cache_stats {
    int64_t blocks, blocks_used; /* used: held by a sequence */
    int64_t blocks_cached;       /* held by none, content kept (prefix cache) */
    int64_t prefix_queries, prefix_hits; /* blocks looked up and found by seq_reuse */
} wna16_kv_cache_stats;
WNA16_API void wna16_kv_cache_get_stats(const wna16_kv_cache *c, wna16_kv_cache_stats *out);
/* Positions sequence seq holds (0 for an unknown id). */
WNA16_API int64_t wna16_kv_cache_seq_len(const wna16_kv_cache *c, int32_t seq);
/* Forgets seq's positions (its blocks go back to the cache). */
WNA16_API void wna16_kv_cache_seq_drop(wna16_kv_cache *c, int32_t seq);
/* Prefix caching: seq (empty) takes over the cached blocks that hold the
 * longest run of whole blocks of tokens[0..n) (always leaving at least the
 * last token to evaluate); *reused gets the positions it now holds, which
 * the caller does not evaluate again. Blocks are keyed by their tokens and
 * everything before them, compared exactly. Without prefix_caching *reused
 * is 0. Errors: INVALID_ARGUMENT (seq not empty or out of range). */
WNA16_API wna16_status wna16_kv_cache_seq_reuse(wna16_ctx *ctx, wna16_kv_cache *c, int32_t seq,
                                                const int32_t *tokens, int64_t n,
                                                int64_t *reused);

/* One row of a batched step: token id appended to sequence seq (at the
 * position after what seq holds and after the step's earlier rows of seq);
 * logits: write this row's logits. */
typedef struct wna16_batch_token {
    int32_t id;
    int32_t seq;
    bool logits;
} wna16_batch_token;

/* One forward step over n rows of any sequences: decode tokens and prompt
 * chunks mixed (a prompt's rows in order). Writes vocab floats per row with
 * logits set, in row order, to logits. A row's result does not depend on
 * the other rows. Errors (nothing is changed): INVALID_ARGUMENT (seq out of
 * range, n over max_batch_tokens), TOKEN_ID, CONTEXT_OVERFLOW (a sequence
 * past the model's context), LIMIT (too few free blocks for the step: drop
 * a sequence and try again), and the forward's own. */
WNA16_API wna16_status wna16_batch_eval(wna16_ctx *ctx, wna16_model *m, wna16_kv_cache *c,
                                        const wna16_batch_token *rows, int64_t n, float *logits);

/* Distributed models: rank 0 drives. wna16_model_eval, wna16_model_reset,
 * wna16_generate, wna16_batch_eval and the KV cache calls are made on rank 0
 * only; each forward step broadcasts its rows (and their block tables) to
 * the other ranks, which run their slices of the same step (logits exist on
 * rank 0 only). Every other rank calls wna16_model_follow, which serves rank
 * 0's steps until rank 0 calls wna16_model_release (or frees the
 * model), then returns WNA16_OK. A failed forward fails on every rank. On a
 * model that is not distributed both calls do nothing. */
WNA16_API wna16_status wna16_model_follow(wna16_ctx *ctx, wna16_model *m);
/* why: WNA16_OK, or the status of a failure on rank 0 (its detail taken from
 * ctx), which wna16_model_follow then returns on every rank with that detail. */
WNA16_API wna16_status wna16_model_release(wna16_ctx *ctx, wna16_model *m, wna16_status why);
/* Bytes this process allocated for its rank(s): repacked (or copied)
 * weights and the KV cache; mapped, zero-copy tensors are not counted. */
WNA16_API size_t wna16_model_rank_bytes(const wna16_model *m);
/* This process's rank (0 unless distributed), the TP degree and the
 * expert-parallel degree (1 without). */
WNA16_API int wna16_model_rank(const wna16_model *m);
WNA16_API int wna16_model_tp(const wna16_model *m);
WNA16_API int wna16_model_ep(const wna16_model *m);
/* Rank 0's collective counters (all-reduce time and calls); reset with
 * wna16_model_reset_comm_stats. */
WNA16_API void wna16_model_comm_stats(const wna16_model *m, wna16_comm_stats *out);
WNA16_API void wna16_model_reset_comm_stats(wna16_model *m);

/* Sampling (applied in this order: repetition penalty, temperature, top-k,
 * top-p, min-p). A zeroed struct is greedy with every filter off:
 * temperature 0 (or below 1e-5) is greedy; top_p 0 or 1, min_p 0, top_k 0 or
 * -1 and repetition_penalty 0 or 1 are off. */
typedef struct wna16_sampler_options {
    size_t struct_size; /* sizeof(wna16_sampler_options), set by wna16_sampler_options_init */
    float temperature, top_p, min_p, repetition_penalty;
    int top_k;
    uint64_t seed;
} wna16_sampler_options;
/* Greedy, every filter off (temperature 0, top_p 1, top_k -1, min_p 0,
 * repetition_penalty 1), seed 0. */
WNA16_API void wna16_sampler_options_init(wna16_sampler_options *o);

/* WNA16_ERR_INVALID_ARGUMENT, naming the field, when an option is NaN,
 * infinite, negative or out of its range (top_p and min_p in [0, 1],
 * top_k >= -1). wna16_generate checks its options with it. */
WNA16_API wna16_status wna16_sampler_check(wna16_ctx *ctx, const wna16_sampler_options *o);

/* The sampling defaults a checkpoint ships in generation_config.json
 * (transformers' keys temperature, top_p, top_k, min_p,
 * repetition_penalty and do_sample), for a front end to apply where a
 * request leaves a field unset. `set` has a WNA16_GEN_* bit for each key
 * the file gives; fields it does not give keep wna16_sampler_options_init's
 * values. do_sample false (the transformers default) means the file asks
 * for greedy decoding whatever its other keys say. A key of the wrong type
 * or out of range fails wna16_model_load (WNA16_ERR_CONFIG_INVALID, naming
 * the file and key). */
enum {
    WNA16_GEN_TEMPERATURE = 1,
    WNA16_GEN_TOP_P = 2,
    WNA16_GEN_TOP_K = 4,
    WNA16_GEN_MIN_P = 8,
    WNA16_GEN_REPETITION_PENALTY = 16,
    WNA16_GEN_DO_SAMPLE = 32
};
typedef struct wna16_generation_defaults {
    wna16_sampler_options sampler;
    bool do_sample;
    unsigned set; /* WNA16_GEN_* bits */
} wna16_generation_defaults;
WNA16_API void wna16_model_generation_defaults(const wna16_model *m,
                                               wna16_generation_defaults *out);

/* Picks the next token from logits (modified in place). history holds the
 * ids seen so far, for the repetition penalty. NaN logits never win.
 * Returns -1 (never a made-up id) when the options fail wna16_sampler_check,
 * memory runs out, or no logit is a number above -inf. */
WNA16_API int32_t wna16_sample(const wna16_sampler_options *o, float *logits, int64_t vocab,
                               const int32_t *history, size_t n_history, uint64_t *rng_state);
/* -------------------------------------------------------------- tokenizer */

/* Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (Qwen2/3,
 * Llama-3, GPT-2 style), exact to the `tokenizers` library (docs/tokenizer.md).
 * A tokenizer is immutable after loading except for its word cache and regex
 * match buffers, so use one tokenizer per thread for concurrent encoding.
 * Decoding and the read-only queries may run concurrently. */
typedef struct wna16_tokenizer wna16_tokenizer;

/* Loads PATH: a directory holding tokenizer.json (and optionally
 * tokenizer_config.json), or the tokenizer.json file itself (its sibling
 * tokenizer_config.json is read when present). Free with wna16_tokenizer_free.
 * Errors: IO (missing file), TOKENIZER_INVALID (not JSON, duplicate keys,
 * missing model, merges naming unknown tokens, ids out of range, ...),
 * TOKENIZER_REGEX (a Split pattern that does not compile), UNSUPPORTED
 * (a model, normalizer or pre-tokenizer type other than byte-level BPE's),
 * OUT_OF_MEMORY / LIMIT. */
WNA16_API wna16_status wna16_tokenizer_load(wna16_ctx *ctx, const char *path,
                                            wna16_tokenizer **out);
WNA16_API void wna16_tokenizer_free(wna16_tokenizer *tok);

/* Encode flags. */
#define WNA16_TOK_ADD_SPECIAL 1u   /* apply the post-processor (e.g. a BOS prefix) */
#define WNA16_TOK_PARSE_SPECIAL 2u /* special added tokens in the text become their ids;
                                      without it they are encoded as plain text
                                      (non-special added tokens always match) */

/* Encodes len bytes of UTF-8 text (NUL bytes allowed). *ids is a malloc'd
 * array of *n_ids ids (NULL when empty); free it with wna16_free(). HF's
 * tokenizer.encode(text) corresponds to flags ADD_SPECIAL|PARSE_SPECIAL.
 * Errors: INVALID_UTF8 (names the offset; nothing is replaced),
 * INVALID_ARGUMENT, OUT_OF_MEMORY, LIMIT (one pre-token over 512 MiB),
 * TOKENIZER_REGEX (regex engine failure). */
WNA16_API wna16_status wna16_tokenizer_encode(wna16_ctx *ctx, wna16_tokenizer *tok,
                                              const char *text, size_t len, unsigned flags,
                                              int32_t **ids, size_t *n_ids);

/* Decodes ids to text, as HF's tokenizer.decode: byte sequences that are not
 * valid UTF-8 become U+FFFD. skip_special drops special added tokens.
 * *text is malloc'd and NUL-terminated (free with wna16_free()); *len may be NULL.
 * Errors: TOKEN_ID (an id the tokenizer does not have), OUT_OF_MEMORY. */
WNA16_API wna16_status wna16_tokenizer_decode(wna16_ctx *ctx, const wna16_tokenizer *tok,
                                              const int32_t *ids, size_t n_ids,
                                              bool skip_special, char **text, size_t *len);

/* Incremental decoding for streaming generation: push one id at a time and
 * get back only complete UTF-8 text; bytes of a character split across
 * tokens are held until it completes (or turn into U+FFFD once they cannot).
 * The concatenation of every push and the final flush equals
 * wna16_tokenizer_decode of the whole sequence. The stream borrows tok. */
typedef struct wna16_detok_stream wna16_detok_stream;
WNA16_API wna16_status wna16_detok_stream_create(wna16_ctx *ctx, const wna16_tokenizer *tok,
                                                 bool skip_special, wna16_detok_stream **out);
/* *text (NUL-terminated, *len bytes, possibly empty) is owned by the stream
 * and valid until its next call. Errors: TOKEN_ID, OUT_OF_MEMORY. */
WNA16_API wna16_status wna16_detok_stream_push(wna16_ctx *ctx, wna16_detok_stream *s,
                                               int32_t id, const char **text, size_t *len);
/* Emits held bytes (as U+FFFD) and resets the stream for a new sequence. */
WNA16_API wna16_status wna16_detok_stream_flush(wna16_ctx *ctx, wna16_detok_stream *s,
                                                const char **text, size_t *len);
WNA16_API void wna16_detok_stream_free(wna16_detok_stream *s);

/* The family of the model's chat template (tokenizer_config.json's
 * chat_template, or chat_template.jinja). Every template is rendered by the
 * same Jinja interpreter; this only tells what kind was found. */
typedef enum wna16_chat_format {
    WNA16_CHAT_NONE = 0,   /* no template */
    WNA16_CHAT_CHATML = 1, /* <|im_start|>role\ncontent<|im_end|>\n (Qwen2/2.5, SmolLM2) */
    WNA16_CHAT_QWEN3 = 2,  /* ChatML with Qwen3's <think> handling */
    WNA16_CHAT_JINJA = 3,  /* any other template (Llama 3, Mistral, DeepSeek-V3, ...) */
} wna16_chat_format;

typedef struct wna16_tokenizer_info {
    size_t vocab_size;      /* distinct ids: model vocabulary plus added tokens */
    size_t id_limit;        /* largest id + 1 */
    int32_t bos_id, eos_id; /* from tokenizer_config.json; -1 when none */
    int32_t pad_id;         /* -1 when none */
    bool add_bos, add_eos;  /* tokenizer_config.json add_bos_token / add_eos_token */
    wna16_chat_format chat_format;
} wna16_tokenizer_info;

WNA16_API void wna16_tokenizer_get_info(const wna16_tokenizer *tok, wna16_tokenizer_info *info);
/* Distinct ids (same as info.vocab_size). */
WNA16_API size_t wna16_tokenizer_vocab_size(const wna16_tokenizer *tok);
/* Id of an added token ("<|im_end|>") or of a vocabulary entry spelled in
 * the model's alphabet ("Ġthe"); -1 when there is none. */
WNA16_API int32_t wna16_tokenizer_token_id(const wna16_tokenizer *tok, const char *token);
/* The token's string (added-token content or vocabulary entry), or NULL for
 * an unknown id. Owned by the tokenizer. */
WNA16_API const char *wna16_tokenizer_token_str(const wna16_tokenizer *tok, int32_t id);
/* True for added tokens marked special (decode's skip_special drops them). */
WNA16_API bool wna16_tokenizer_is_special(const wna16_tokenizer *tok, int32_t id);
/* The model's chat template text (chat_template.jinja, or
 * tokenizer_config.json's chat_template), or NULL when it has none. Owned
 * by the tokenizer. */
WNA16_API const char *wna16_tokenizer_chat_template(const wna16_tokenizer *tok);

typedef struct wna16_chat_message {
    const char *role;    /* "system", "user", "assistant" or "tool" */
    const char *content; /* UTF-8, NUL-terminated */
} wna16_chat_message;

/* Renders messages as the model's chat prompt: the model's own Jinja chat
 * template (tokenizer_config.json's chat_template, or a chat_template.jinja
 * beside tokenizer.json, which wins as in transformers) through wna16's
 * Jinja interpreter, byte-identical to transformers'
 * apply_chat_template(tokenize=False) with the same arguments (docs/models.md
 * lists the templates tested so). The template sees messages (role,
 * content), add_generation_prompt, enable_thinking, tools = documents = None
 * and the config's bos_token/eos_token/pad_token. With Qwen3 and
 * enable_thinking false, add_generation_prompt appends the empty think block
 * "<think>\n\n</think>\n\n". *text is malloc'd (free with wna16_free());
 * encode it with WNA16_TOK_PARSE_SPECIAL. Errors: UNSUPPORTED (no template,
 * or a Jinja construct the interpreter lacks: the message names it and its
 * line), INVALID_ARGUMENT (unknown role, NULL content, a template syntax
 * error, or the template's own raise_exception, e.g. Mistral's "roles must
 * alternate": the message carries it), LIMIT, OUT_OF_MEMORY. */
WNA16_API wna16_status wna16_tokenizer_apply_chat(wna16_ctx *ctx, const wna16_tokenizer *tok,
                                                  const wna16_chat_message *messages,
                                                  size_t n_messages, bool add_generation_prompt,
                                                  bool enable_thinking, char **text);

/* Chat prompts from OpenAI-shaped JSON, with everything vLLM's chat
 * completions pass to the template. A zeroed field takes the default in
 * brackets. */
typedef struct wna16_chat_options {
    size_t struct_size;         /* sizeof(wna16_chat_options), set by wna16_chat_options_init */
    bool add_generation_prompt; /* [true] */
    /* A JSON list of tools in OpenAI's shape ({"type": "function",
     * "function": {"name", "description", "parameters"}}), rendered by the
     * template as transformers' apply_chat_template(tools=...) does [NULL:
     * none]. A template that never reads `tools` is refused (UNSUPPORTED)
     * rather than dropping them. */
    const char *tools;
    /* A JSON object of further template variables (vLLM's
     * chat_template_kwargs, e.g. {"enable_thinking": false}) [NULL: none,
     * so the template's own defaults hold]. */
    const char *template_kwargs;
    /* A Jinja template used instead of the model's [NULL] */
    const char *chat_template;
} wna16_chat_options;
WNA16_API void wna16_chat_options_init(wna16_chat_options *o);

/* Renders messages_json, a JSON list of OpenAI chat messages, as the
 * model's chat prompt: role ("system", "user", "assistant", "tool"),
 * content (a string, null, or a list of {"type": "text", "text"} parts,
 * joined with "\n" as vLLM does), and the assistant's tool_calls (each
 * function's "arguments" JSON string given to the template as an object,
 * as vLLM does), tool_call_id and name passed through. Byte-identical to
 * transformers' apply_chat_template(tokenize=False) with the same
 * arguments. *text as wna16_tokenizer_apply_chat's. Errors: as
 * wna16_tokenizer_apply_chat's, and INVALID_ARGUMENT for malformed JSON or
 * a message field of the wrong type (named with its index), or a
 * template_kwargs key the call sets itself (messages, tools,
 * add_generation_prompt; the special tokens may be overridden, as in
 * transformers);
 * UNSUPPORTED for a content part other than text, and tools given to a
 * template without them. */
WNA16_API wna16_status wna16_tokenizer_apply_chat_json(wna16_ctx *ctx, const wna16_tokenizer *tok,
                                                       const char *messages_json,
                                                       const wna16_chat_options *options,
                                                       char **text);

/* ------------------------------------------------------------- generation */

typedef struct wna16_generate_options {
    size_t struct_size; /* sizeof(wna16_generate_options), set by wna16_generate_options_init */
    int64_t max_tokens;
    wna16_sampler_options sampler;
    const char *const *stop; /* stop strings (matched on the decoded text) */
    size_t n_stop;
    /* Streamed text, in order, never splitting a UTF-8 character or a
     * possible stop string; return false to stop. May be NULL. */
    bool (*on_text)(void *user, const char *text, size_t len);
    void *user;
} wna16_generate_options;
/* max_tokens 16 (vLLM's default), greedy sampling (wna16_sampler_options_init),
 * no stop strings, no callback. */
WNA16_API void wna16_generate_options_init(wna16_generate_options *o);

typedef struct wna16_generate_result {
    int32_t *ids;       /* generated ids (the EOS id included when it ended the run) */
    int64_t generated;  /* number of ids */
    char *text;         /* decoded text (without special tokens; "" with no tokenizer) */
    int64_t prompt_tokens;
    double prefill_seconds, decode_seconds;
    const char *stop_reason; /* "eos", "stop", "length" or "callback" */
} wna16_generate_result;

/* One request through an engine of one sequence (wna16_engine: the same
 * scheduler, sampling and output processing as a served request): prefills
 * the prompt in one pass, then samples up to max_tokens, stopping on the
 * model's EOS ids or a stop string. tok may be NULL (ids only). The model's
 * own cache is not used. Free the result with wna16_generate_result_free. */
WNA16_API wna16_status wna16_generate(wna16_ctx *ctx, wna16_model *m, const wna16_tokenizer *tok,
                                      const int32_t *prompt, size_t n_prompt,
                                      const wna16_generate_options *options,
                                      wna16_generate_result *result);
WNA16_API void wna16_generate_result_free(wna16_generate_result *r);

/* ----------------------------------------------------------------- engine */

/* The serving engine, as vLLM's LLMEngine: many requests at once over one
 * model, run by continuous batching (each step takes every running
 * sequence's next token, then prompt chunks up to a token budget), a paged
 * KV cache with prefix caching, and preemption by recompute when blocks run
 * out. One output processor turns sampled tokens into text (incremental
 * detokenization, stop strings held back until they cannot match, stop
 * token ids, EOS from generation_config.json, min_tokens, logprobs); the
 * CLI, the server and the Python package all run on it.
 *
 * Two ways to drive it: call wna16_engine_step until
 * wna16_engine_has_unfinished is false (one thread), or wna16_engine_start
 * a thread of its own and get each request's outputs through the callback
 * given with it (servers). add_request, abort, metrics and status may be
 * called from any thread in either mode. Evaluations through one model run
 * one at a time: while an engine runs, use the model through it only. */
typedef struct wna16_engine wna16_engine;

typedef struct wna16_engine_options {
    size_t struct_size;  /* sizeof(wna16_engine_options), set by wna16_engine_options_init */
    /* Needed for text and chat prompts, text outputs and stop strings; NULL:
     * token ids in and out only. Borrowed: it must outlive the engine. */
    const wna16_tokenizer *tokenizer;
    int max_num_seqs;                /* sequences running at once [256] */
    int64_t max_num_batched_tokens;  /* rows per step [512] */
    int64_t max_waiting;             /* requests queued beyond the running ones (< 0: any
                                      * number) [-1] */
    size_t kv_cache_memory;          /* KV cache bytes [one context per 4 sequences, at most 4 GiB] */
    int64_t kv_cache_blocks;         /* or an exact number of blocks (tests) */
    bool enable_prefix_caching;      /* [true] */
    /* The floor of a decode step of `rows` rows (logit_rows of them with
     * logits) whose routed experts read expert_bytes (-1: not known) and
     * whose forward took `seconds`, in seconds, for wna16_engine_metrics'
     * roofline; NULL: none. */
    double (*step_floor)(void *user, int64_t rows, int64_t logit_rows, double expert_bytes,
                         double seconds);
    void *step_floor_user;
} wna16_engine_options;
WNA16_API void wna16_engine_options_init(wna16_engine_options *o);

/* Creates the engine and its KV cache over m (which must outlive it).
 * Errors: INVALID_ARGUMENT, OUT_OF_MEMORY, LIMIT (a KV cache that holds no
 * block), and those of wna16_kv_cache_create. */
WNA16_API wna16_status wna16_engine_create(wna16_ctx *ctx, wna16_model *m,
                                           const wna16_engine_options *options,
                                           wna16_engine **out);
/* Stops the engine's thread (aborting what runs) and frees it. NULL is ignored. */
WNA16_API void wna16_engine_free(wna16_engine *e);

/* Structured outputs (docs/grammar.md): the output is constrained, token by
 * token, to the strings of a format. At each step every token whose bytes
 * would leave the format gets -inf; EOS is allowed exactly when the output
 * so far is a whole string of it, and the output ends (finish "stop") once
 * nothing but the end is possible. The format decides the end: with one,
 * ignore_eos and min_tokens do not keep the output going past it, and a
 * stop_token_id is refused like any token outside the format (the model's
 * EOS ids are the format's end). */
typedef enum wna16_structured_kind {
    WNA16_STRUCTURED_NONE = 0,
    WNA16_STRUCTURED_JSON_OBJECT = 1, /* any JSON object */
    WNA16_STRUCTURED_JSON_SCHEMA = 2, /* spec: a JSON Schema (the subset of docs/grammar.md) */
    WNA16_STRUCTURED_REGEX = 3,       /* spec: a regular expression the whole output matches */
    WNA16_STRUCTURED_CHOICE = 4,      /* choices: the output is exactly one of them */
    WNA16_STRUCTURED_GRAMMAR = 5,     /* spec: llama.cpp GBNF; the start rule is root */
    /* spec: a JSON list of OpenAI tools ({"type": "function", "function":
     * {"name", "parameters"}}, or the inner objects): one call of one of
     * them (several with parallel_tool_calls) in tool_format's syntax, its
     * arguments valid for the tool's parameters schema */
    WNA16_STRUCTURED_TOOL_CALLS = 6,
} wna16_structured_kind;

/* A model family's tool-call syntax (vLLM's --tool-call-parser names). */
typedef enum wna16_tool_format {
    WNA16_TOOLS_HERMES = 0,      /* <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call> (Qwen) */
    WNA16_TOOLS_LLAMA3_JSON = 1, /* {"name": N, "parameters": {...}} (Llama 3.x); several: "; " */
    WNA16_TOOLS_MISTRAL = 2,     /* [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] */
} wna16_tool_format;

typedef struct wna16_structured_output {
    wna16_structured_kind kind; /* NONE [default]: free text */
    const char *spec;           /* JSON_SCHEMA, REGEX, GRAMMAR, TOOL_CALLS (UTF-8) */
    const char *const *choices; /* CHOICE */
    size_t n_choices;
    /* JSON_SCHEMA and TOOL_CALLS: an object schema without
     * additionalProperties admits no other keys (OpenAI's strict mode) */
    bool strict;
    bool compact_json; /* JSON_OBJECT, JSON_SCHEMA: no whitespace between tokens */
    wna16_tool_format tool_format;
    bool parallel_tool_calls; /* TOOL_CALLS: one or more calls (false: exactly one) */
} wna16_structured_output;

/* What a request asks for, as vLLM's SamplingParams. */
typedef struct wna16_sampling_params {
    size_t struct_size;  /* sizeof(wna16_sampling_params), set by wna16_sampling_params_init */
    int64_t max_tokens;  /* [16]; < 0: the rest of the context */
    int64_t min_tokens;  /* no EOS, stop id or stop string ends it before this many [0] */
    wna16_sampler_options sampler; /* temperature, top_p, top_k, min_p, repetition_penalty, seed */
    float presence_penalty, frequency_penalty; /* OpenAI's, over the generated tokens [0] */
    const char *const *stop;       /* stop strings, matched on the text (copied) */
    size_t n_stop;
    const int32_t *stop_token_ids; /* (copied) */
    size_t n_stop_token_ids;
    bool ignore_eos;
    bool include_stop_str_in_output;
    bool skip_special_tokens;      /* in the text [true] */
    int logprobs;        /* -1: none [default]; 0..20: the sampled token's and this many more */
    int prompt_logprobs; /* -1: none [default]; 0..20: every prompt token's (scored from its
                          * first token: the prefix cache is not used for it) */
    /* The output's format [none]; compiled when the request is added (its
     * errors: INVALID_ARGUMENT for malformed or too large a spec,
     * UNSUPPORTED for a construct outside the subset, both naming it). */
    wna16_structured_output structured;
    /* OpenAI's logit_bias: logit_bias[i] in [-100, 100] added to token
     * logit_bias_ids[i]'s logit before sampling (copied) */
    const int32_t *logit_bias_ids;
    const float *logit_bias;
    size_t n_logit_bias;
} wna16_sampling_params;
/* max_tokens 16, greedy, no stop strings, logprobs off, skip_special_tokens. */
WNA16_API void wna16_sampling_params_init(wna16_sampling_params *p);

/* A request's prompt: token ids, or text (encoded with the engine's
 * tokenizer, its special tokens parsed and BOS added as the tokenizer
 * does), or chat messages (rendered by the model's chat template with
 * add_generation_prompt, then encoded). Exactly one of the three. */
typedef struct wna16_prompt {
    const int32_t *ids;
    size_t n_ids;
    const char *text;
    const wna16_chat_message *messages;
    size_t n_messages;
    bool enable_thinking; /* chat: the template's enable_thinking */
} wna16_prompt;

typedef enum wna16_finish_reason {
    WNA16_FINISH_NONE = 0,   /* still running */
    WNA16_FINISH_STOP = 1,   /* EOS, a stop token id or a stop string */
    WNA16_FINISH_LENGTH = 2, /* max_tokens, or the model's context */
    WNA16_FINISH_ABORT = 3,  /* wna16_engine_abort, or the engine shut down */
    WNA16_FINISH_ERROR = 4,  /* the step failed (error says why) */
} wna16_finish_reason;
/* "stop", "length", "abort", "error" (NULL for NONE). */
WNA16_API const char *wna16_finish_reason_str(wna16_finish_reason r);

/* One token's log-probabilities under the model (log-softmax of its
 * logits over the whole vocabulary, before any penalty or filter). */
typedef struct wna16_token_logprob {
    int32_t id;
    float logprob;
    int n_top; /* the most likely tokens, most likely first */
    int32_t top_ids[20];
    float top_logprobs[20];
} wna16_token_logprob;

/* What a request got in one step. Everything it points to is valid until
 * the next step of the engine (in a callback: until the callback returns). */
typedef struct wna16_request_output {
    const char *request_id;
    void *user;                /* as given to wna16_engine_add_request */
    const int32_t *token_ids;  /* generated this step (the stop token included) */
    size_t n_tokens;
    const char *text;          /* new text (NUL-terminated): never a part of a UTF-8
                                * character or of what may begin a stop string */
    size_t text_len;
    const wna16_token_logprob *logprobs; /* [n_tokens] when asked, else NULL */
    /* prompt logprobs scored this step: [n_prompt_logprobs] for prompt
     * positions from prompt_logprobs_start on (position 0 has none) */
    const wna16_token_logprob *prompt_logprobs;
    size_t n_prompt_logprobs;
    int64_t prompt_logprobs_start;
    bool finished;
    wna16_finish_reason finish_reason;
    const char *stop_str;      /* the stop string that ended it, or NULL */
    int32_t stop_token;        /* the EOS or stop id that ended it, or -1 */
    const char *error;         /* FINISH_ERROR / FINISH_ABORT: why (may be "") */
    int64_t prompt_tokens, completion_tokens, cached_tokens;
} wna16_request_output;

/* Called on the engine's step thread for each output of the request;
 * finished is set once, on the last call. */
typedef void (*wna16_output_fn)(void *user, const wna16_request_output *out);

/* Queues a request. request_id (copied) names it in outputs and for
 * wna16_engine_abort: unique among the unfinished ones. on_output (may be
 * NULL) gets its outputs; they are also returned by wna16_engine_step.
 * Errors: INVALID_ARGUMENT (a bad field, named; an empty prompt; a duplicate
 * id), TOKEN_ID, CONTEXT_OVERFLOW (the prompt and max_tokens exceed the
 * context, or more KV blocks than the cache has: it can never run; the
 * detail is vLLM's message), LIMIT (max_waiting requests already wait: retry
 * later), UNAVAILABLE (the engine is shutting down or its model failed),
 * UNSUPPORTED (a chat prompt and no chat template), and the tokenizer's. */
WNA16_API wna16_status wna16_engine_add_request(wna16_ctx *ctx, wna16_engine *e,
                                                const char *request_id,
                                                const wna16_prompt *prompt,
                                                const wna16_sampling_params *params,
                                                wna16_output_fn on_output, void *user);
/* Aborts a request (it finishes with FINISH_ABORT at the next step; its
 * blocks are freed then). Errors: INVALID_ARGUMENT (no unfinished request
 * has this id). */
WNA16_API wna16_status wna16_engine_abort(wna16_ctx *ctx, wna16_engine *e,
                                          const char *request_id);
/* Runs one scheduled step (when there is work) and returns the outputs of
 * the requests it advanced (*outputs valid until the next step; *n may be
 * 0). Not with wna16_engine_start. Errors: INVALID_ARGUMENT (started), and
 * UNAVAILABLE once the model has failed for good (the detail says why;
 * every request then finished with FINISH_ERROR). A step whose forward
 * fails otherwise finishes its requests with FINISH_ERROR and returns OK. */
WNA16_API wna16_status wna16_engine_step(wna16_ctx *ctx, wna16_engine *e,
                                         const wna16_request_output **outputs, size_t *n);
/* True while any request is waiting or running. */
WNA16_API bool wna16_engine_has_unfinished(wna16_engine *e);

/* Runs steps on a thread of the engine's own until wna16_engine_stop;
 * outputs go to each request's callback only. */
WNA16_API wna16_status wna16_engine_start(wna16_ctx *ctx, wna16_engine *e);
/* Stops taking requests (UNAVAILABLE), lets what runs finish for up to
 * drain_seconds, aborts the rest ("shutting down") and joins the thread.
 * On an engine that was not started: aborts every request. */
WNA16_API void wna16_engine_stop(wna16_engine *e, double drain_seconds);

typedef struct wna16_engine_metrics {
    int num_requests_running, num_requests_waiting;
    wna16_kv_cache_stats kv;
    int64_t prompt_tokens, generation_tokens;
    int64_t requests_finished[5]; /* by wna16_finish_reason (STOP, LENGTH, ABORT, ERROR) */
    int64_t preemptions;
    int64_t steps, decode_steps, decode_rows; /* decode steps: every row a next token */
    double step_seconds;            /* wall time of all steps (forward, sampling, outputs) */
    double decode_seconds;          /* forward time of the decode steps */
    double decode_roofline_seconds; /* their floor (options.step_floor) */
} wna16_engine_metrics;
WNA16_API void wna16_engine_get_metrics(wna16_engine *e, wna16_engine_metrics *out);
/* OK while the engine can run; once its model has failed for good (a
 * distributed model's ranks lost each other), that status, with why in
 * msg (n bytes). */
WNA16_API wna16_status wna16_engine_status(wna16_engine *e, char *msg, size_t n);
/* The model's context: a prompt plus max_tokens must fit in it. */
WNA16_API int64_t wna16_engine_context(const wna16_engine *e);

/* --------------------------------------------------------------- quantize */

/* Quantizing an unquantized (bf16/fp16/fp32) Hugging Face model into a
 * compressed-tensors pack-quantized checkpoint vLLM loads, as `wna16
 * quantize` does (docs/cli.md; the same names as llm-compressor's). A
 * zeroed field takes the default in brackets. */
typedef struct wna16_quantize_options {
    size_t struct_size;   /* sizeof(wna16_quantize_options), set by wna16_quantize_options_init */
    const char *model;    /* the source directory (required) */
    const char *output;   /* the directory to write (required) */
    const char *scheme;   /* "W4A16" [default], "W4A16_ASYM" or "W8A16" */
    int64_t group_size;   /* 32, 64, 128 [default] or -1 (per output channel) */
    const char *method;   /* "gptq" [default] or "rtn" */
    const char *actorder; /* GPTQ's static act-order: "static" [default] or "none" */
    double dampening;     /* GPTQ's dampening fraction [0.01] */
    const char *calib_text; /* calibration text, tokenized with the model's tokenizer */
    const char *calib_ids;  /* or token ids (comma or whitespace separated) */
    uint64_t seed;          /* for random calibration ids [0] */
    int64_t num_samples, seq_len; /* calibration sequences [128] of seq_len tokens [512] */
    const char *const *ignore;    /* more linears to leave unquantized (name, or re:REGEX) */
    size_t n_ignore;
    int threads;            /* [all cores] */
    size_t max_shard_bytes; /* [2 GiB] */
    /* A group size that does not divide a linear's input features is refused
     * up front (WNA16_ERR_GROUP_SIZE, naming the linears and the sizes that
     * would work); true leaves such linears unquantized instead [false]. */
    bool skip_indivisible;
    /* The summary *report gets: JSON, as `wna16 quantize --json` prints it
     * [false], or the text table `wna16 quantize` prints (true). */
    bool report_text;
    /* GPTQ on seeded random token ids when neither calib_text nor calib_ids
     * is given [false: such a GPTQ run is refused (INVALID_ARGUMENT): on
     * random ids it comes out worse than RTN] */
    bool calib_random;
} wna16_quantize_options;
WNA16_API void wna16_quantize_options_init(wna16_quantize_options *o);
/* Quantizes o->model into o->output, reporting progress and honouring the
 * abort callback of ctx (between layers). *report (may be NULL) gets the
 * summary (o->report_text; free with wna16_free). */
WNA16_API wna16_status wna16_quantize_model(wna16_ctx *ctx, const wna16_quantize_options *o,
                                            char **report);

/* -------------------------------------------------- synthetic checkpoints */

/* Random-weight checkpoints with real shapes, as `wna16 synth` and `wna16
 * demo` write them (compressed-tensors pack-quantized, or bf16): for trying
 * the tool and measuring speed without downloading a model. A field left at
 * its _init value (in brackets) takes the preset's. */
typedef struct wna16_synth_options {
    size_t struct_size; /* sizeof(wna16_synth_options), set by wna16_synth_options_init */
    const char *preset; /* "demo" [default]: a tiny Qwen3-MoE with Qwen3's vocabulary;
                           "qwen3-30b-a3b": that model's shapes, W4A16 group 128;
                           "kimi-k2": Kimi-K2's (DeepseekV3ForCausalLM), routed experts
                           W4A16 group 32, the rest bf16 (cut it with layers) */
    int64_t layers;     /* [0: the preset's] */
    int bits;           /* 4, 8 or 16 (unquantized bf16) [0: the preset's] */
    int64_t group_size; /* > 0, or -1 (per output channel) [0: the preset's] */
    bool asymmetric;    /* with zero points [false: symmetric] */
    bool dense;         /* a Qwen3ForCausalLM, without experts [false] */
    int64_t seed;       /* the weights' seed, >= 0 [-1: the preset's] */
} wna16_synth_options;
WNA16_API void wna16_synth_options_init(wna16_synth_options *o);
/* Writes config.json, generation_config.json and the safetensors shards
 * into dir (created if needed), reporting progress as "synth". Errors:
 * INVALID_ARGUMENT (an unknown preset; bits other than 4, 8 or 16; a
 * negative layer count; a group size below -1), IO. */
WNA16_API wna16_status wna16_synth_write(wna16_ctx *ctx, const wna16_synth_options *o,
                                         const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* WNA16_H */
