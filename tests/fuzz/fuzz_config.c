/* Fuzz target (b): config.json text. Parses it as the checkpoint loader
 * does (duplicate keys rejected), runs the model-config parser, then the
 * quantization config parser on "quantization_config" (or on the whole
 * object, as a legacy quantize_config.json), and resolves a fixed list of
 * module names plus any strings the input lists under "_fuzz_modules" —
 * so `re:` targets and ignore entries are matched against names the
 * fuzzer controls too. */
#include "fuzz_common.h"

#include "format/config.h"

static const char *const fixed_names[] = {
    "model.layers.0.self_attn.q_proj",
    "model.layers.0.self_attn.k_proj",
    "model.layers.3.mlp.down_proj",
    "model.layers.1.mlp.experts.7.gate_proj",
    "model.layers.1.mlp.gate",
    "model.layers.1.mlp.shared_expert.up_proj",
    "lm_head",
    "",
};

static void resolve(wna16_diag *d, wna16_qconfig *qc, const char *name) {
    int scheme = -2;
    bool ignored = true;
    wna16_status s = wna16_qconfig_resolve(d, qc, name, &scheme, &ignored);
    if (s != WNA16_OK) {
        FUZZ_CHECK(s == WNA16_ERR_QUANT_CONFIG_INVALID || s == WNA16_ERR_OUT_OF_MEMORY);
        return;
    }
    FUZZ_CHECK(scheme >= -1 && scheme < (int)qc->n_schemes);
    FUZZ_CHECK(!(ignored && scheme >= 0));
    /* resolving twice gives the same answer (the regex cache is transparent) */
    int again = -2;
    bool ign2 = !ignored;
    FUZZ_CHECK(wna16_qconfig_resolve(d, qc, name, &again, &ign2) == WNA16_OK);
    FUZZ_CHECK(again == scheme && ign2 == ignored);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    json_error_t err;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        fuzz_note("not JSON", -1);
        return 0;
    }
    static wna16_diag d;
    wna16_model_config mc;
    wna16_status s = wna16_model_config_parse(&d, "config.json", root, &mc);
    fuzz_note(wna16_status_str(s), s);
    if (s == WNA16_OK) {
        FUZZ_CHECK(mc.hidden_size > 0 && mc.num_heads > 0 && mc.num_kv_heads > 0);
        FUZZ_CHECK(mc.num_heads % mc.num_kv_heads == 0);
        FUZZ_CHECK(mc.head_dim > 0 && mc.vocab_size > 0);
        if (wna16_model_config_is_moe(&mc))
            FUZZ_CHECK(mc.num_experts_per_tok >= 1 && mc.num_experts_per_tok <= mc.num_experts);
    } else {
        FUZZ_CHECK(s == WNA16_ERR_CONFIG_INVALID);
    }
    const json_t *qj = json_object_get(root, "quantization_config");
    wna16_qconfig qc;
    s = wna16_qconfig_parse(&d, "config.json", qj ? qj : root, &qc);
    fuzz_note(wna16_status_str(s), s);
    if (s == WNA16_OK) {
        for (size_t i = 0; i < qc.n_schemes; i++) {
            char text[128];
            wna16_qargs_describe(&qc.schemes[i].weights, text, sizeof text);
            FUZZ_CHECK(strlen(text) < sizeof text);
        }
        for (size_t i = 0; i < sizeof fixed_names / sizeof fixed_names[0]; i++)
            resolve(&d, &qc, fixed_names[i]);
        const json_t *extra = json_object_get(root, "_fuzz_modules");
        for (size_t i = 0; i < json_array_size(extra) && i < 16; i++) {
            const char *name = json_string_value(json_array_get(extra, i));
            if (name) resolve(&d, &qc, name);
        }
    }
    wna16_qconfig_free(&qc);
    json_decref(root);
    return 0;
}
