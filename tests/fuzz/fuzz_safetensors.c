/* Fuzz target (a): a whole safetensors file in memory, through every
 * validation rule of format-spec §1.4. On success, every view must lie
 * inside the input, its byte count must match shape x dtype, lookups by
 * name must find it, and its bytes are read (so ASan checks them). */
#include "fuzz_common.h"

#include "io/safetensors.h"
#include "wna16.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    wna16_ctx *ctx = NULL;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 0;
    wna16_safetensors *st = NULL;
    wna16_status s = wna16_safetensors_open_memory(ctx, data, size, "fuzz.safetensors", &st);
    fuzz_note(wna16_status_str(s), s);
    if (s == WNA16_OK) {
        FUZZ_CHECK(st != NULL);
        size_t n = wna16_safetensors_count(st);
        size_t covered = 0;
        uint64_t hlen = 0;
        for (int b = 0; b < 8; b++) hlen |= (uint64_t)data[b] << (8 * b);
        /* views in offset order with no gap from the data section's start:
         * each is there (zero-copy) or, if that is not aligned to its
         * element size, an aligned copy of those bytes */
        const uint8_t *at = data + 8 + hlen;
        for (size_t i = 0; i < n; i++) {
            const wna16_tensor_view *v = wna16_safetensors_at(st, i);
            FUZZ_CHECK(v && v->name);
            FUZZ_CHECK(v->rank >= 0 && v->rank <= WNA16_MAX_RANK);
            const uint8_t *p = v->data;
            FUZZ_CHECK(at + v->nbytes <= data + size);
            int bits_per = wna16_dtype_bits(v->dtype);
            size_t esize = bits_per >= 8 ? (size_t)bits_per / 8 : 1;
            FUZZ_CHECK(!v->nbytes || (uintptr_t)p % esize == 0);
            FUZZ_CHECK(p == at ||
                       (v->nbytes && (uintptr_t)at % esize && !memcmp(p, at, v->nbytes)));
            at += v->nbytes;
            uint64_t bits = (uint64_t)wna16_view_numel(v) * (uint64_t)bits_per;
            FUZZ_CHECK(bits % 8 == 0 && bits / 8 == v->nbytes);
            FUZZ_CHECK(wna16_safetensors_find(st, v->name) != NULL);
            FUZZ_CHECK(!strcmp(wna16_safetensors_find(st, v->name)->name, v->name));
            volatile uint8_t sink = 0;
            if (v->nbytes) sink ^= p[0] ^ p[v->nbytes - 1];
            (void)sink;
            covered += v->nbytes;
            (void)wna16_dtype_name(v->dtype);
        }
        FUZZ_CHECK(wna16_safetensors_at(st, n) == NULL);
        FUZZ_CHECK(wna16_safetensors_find(st, "\x01no such tensor") == NULL);
        (void)wna16_safetensors_metadata(st, "format");
        (void)covered;
    } else {
        FUZZ_CHECK(st == NULL);
        FUZZ_CHECK(wna16_ctx_error(ctx)[0] != '\0'); /* every refusal says why */
    }
    wna16_safetensors_close(st);
    wna16_ctx_free(ctx);
    return 0;
}
