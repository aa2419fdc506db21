/* Internal view of an opened checkpoint: every tensor across shards, every
 * module with its role and resolved scheme, already validated. */
#ifndef WNA16_FORMAT_CHECKPOINT_H
#define WNA16_FORMAT_CHECKPOINT_H

#include "format/config.h"
#include "format/qweight.h"
#include "parallel/ep_plan.h"
#include "parallel/shard.h"

typedef enum wna16_module_kind {
    WNA16_MODULE_OTHER = 0, /* norms, embeddings, anything not a linear */
    WNA16_MODULE_DENSE,     /* an unquantized linear: P.weight [out, in] */
    WNA16_MODULE_PACKED,    /* compressed-tensors pack-quantized */
    WNA16_MODULE_GPTQ,      /* legacy GPTQ qweight/qzeros/scales */
} wna16_module_kind;

typedef struct wna16_module {
    char *name;
    wna16_module_kind kind;
    wna16_tp_role role;
    int layer;   /* -1 when not in a decoder layer */
    int expert;  /* -1 when not an expert */
    int scheme;  /* index into qconfig.schemes, -1 if unquantized */
    bool ignored;
    int64_t out, in;
    int bits;
    int64_t group_size; /* columns per group (== in for channelwise); 0 unquantized */
    bool symmetric;
    const wna16_tensor_view *weight, *packed, *scale, *zero, *g_idx, *shape, *bias;
} wna16_module;

struct wna16_checkpoint {
    char *dir;
    /* where the text model's tensors are: "model." ("model.layers.0..."), or
     * a multimodal checkpoint's language model ("language_model.model.",
     * "model.language_model."), whose other modules (vision tower,
     * projector) are not loaded */
    char text_prefix[32];
    json_t *config_json;
    wna16_model_config config;
    wna16_qconfig qconfig;
    wna16_safetensors **shards;
    size_t n_shards;
    const wna16_tensor_view **tensors; /* all tensors, sorted by name */
    size_t n_tensors;
    wna16_module *modules; /* sorted by name */
    size_t n_modules;
};

/* Refuses, naming what it is and what to do, a path that is not a Hugging
 * Face model directory with config.json and safetensors weights: missing,
 * a GGUF file, another file, a directory without config.json (or holding
 * only a GGUF) or without weights (or with PyTorch .bin ones). */
wna16_status wna16_ck_check_path(wna16_diag *d, const char *dir);

const wna16_module *wna16_ck_module(const wna16_checkpoint *ck, const char *name);

/* Canonical weight for a module (optionally one TP rank's slice). The qweight
 * points into the mapping where it can; *owned holds what had to be built
 * (fp32 scales, unpacked zero points, a transposed GPTQ qweight): free it
 * with wna16_free after the qweight is no longer used. */
wna16_status wna16_ck_qweight(wna16_diag *d, const wna16_checkpoint *ck, const wna16_module *m,
                              const wna16_shard_slice *slice, wna16_qweight *out, void **owned);

/* The sharding request for module m at TP degree tp, rank `rank` (role,
 * sizes, and the declared group size: channelwise is -1 even when one group
 * spans K, as vLLM decides). */
wna16_shard_request wna16_ck_shard_request(const wna16_checkpoint *ck, const wna16_module *m,
                                           int tp, int rank);

/* The requests module m's plan is made of: the module's own, or one per
 * part of a fused projection (q, k, v of a qkv_proj; gate, up of a
 * gate_up_proj), each on its rows of the module. Returns how many (<= 3). */
size_t wna16_ck_shard_parts(const wna16_checkpoint *ck, const wna16_module *m, int tp, int rank,
                            wna16_shard_request out[3]);

/* The checkpoint bytes one rank holds under an expert-parallel plan: its
 * routed experts whole (*expert_bytes), and (*other_bytes) its
 * tensor-parallel share, at the plan's TP degree, of every other linear
 * plus every other tensor whole (norms, embeddings, lm_head, routers). */
void wna16_ck_ep_rank_bytes(const wna16_checkpoint *ck, const wna16_ep_plan *p,
                            int64_t *expert_bytes, int64_t *other_bytes);

/* Drops this process's resident pages of every shard mapping (views stay
 * valid): a distributed rank calls it after repacking its slices. */
void wna16_ck_release_pages(const wna16_checkpoint *ck);
/* Also asks the kernel to drop the shard files' clean page cache (after the
 * weights were copied out: memory for huge pages; a later load reads the
 * files again). */
void wna16_ck_drop_cache(const wna16_checkpoint *ck);

/* Element i of a 16/32-bit float tensor as fp32 (BF16, F16, F32). */
float wna16_view_float(const wna16_tensor_view *v, int64_t i);

#endif
