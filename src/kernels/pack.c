/* WNA16 linear: repacking a canonical weight into the kernels' layout
 * (ukernel.h), and cloning, concatenating, gathering and unpacking packed
 * weights. */
#include "kernels/packed.h"

#include "core/common.h"

#include <string.h>

static void *align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }
static int64_t round_up(int64_t v, int64_t m) { return wna16_round_up(v, m); }
static size_t al64(size_t v) { return wna16_al64(v); }
static uint8_t *block_at(const wna16_packed_linear *pl, int64_t b) { return wna16_packed_block(pl, b); }

/* Packed weights of 2 MiB or more live in a 2 MiB-aligned mapping whose
 * whole pages are transparent huge pages: decode streams a weight once per
 * token, and with 4 KiB pages it walks the TLB every 4 KiB (malloc's
 * unaligned ends of an 8.6 MiB weight held ~30 % of it on small pages:
 * M=1 4096x4096 took 10 % longer on average). Smaller ones use malloc. */
static uint8_t *data_alloc(wna16_packed_linear *pl, size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    pl->mapped = 0;
    if (bytes >= huge) {
        pl->alloc = wna16_huge_alloc_fit(bytes);
        if (pl->alloc) pl->mapped = bytes;
        return pl->alloc;
    }
    pl->alloc = wna16_malloc(bytes + 64);
    return pl->alloc ? align64(pl->alloc) : NULL;
}

static void data_free(wna16_packed_linear *pl) {
    if (pl->mapped)
        wna16_huge_free(pl->alloc, pl->mapped);
    else
        wna16_free(pl->alloc);
    pl->alloc = NULL;
    pl->mapped = 0;
}

/* Byte and shift of u(kk, c) inside a group's weights (kk: column within
 * the group; ls: the layout's line stride); the layout is documented in
 * ukernel.h. */
static inline size_t packed_pos(int bits, int64_t ls, int64_t kk, int c, int *shift) {
    if (bits == 4) {
        int64_t t = kk >> 3, j = (kk >> 1) & 3, p = kk & 1;
        *shift = (int)((j & 1) * 4);
        return (size_t)(t * ls + 2 * (2 * c + p) + (j >> 1));
    }
    int64_t t = kk >> 2, hi = (kk >> 1) & 1, p = kk & 1;
    *shift = 0;
    return (size_t)(t * ls + 32 * hi + 2 * c + p);
}

static inline void store_le16(uint8_t *p, uint16_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 2);
#else
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
#endif
}

static inline void store_le32(uint8_t *p, uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 4);
#else
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
    p[3] = (uint8_t)(v >> 24);
#endif
}

/* Columns [col0, col0 + len) of row o (len a multiple of the values per
 * word) as channel c of a group's lines, a whole source word at a time: the
 * load path's repack of a full group of a word-aligned row (every group of
 * a compressed-tensors or GPTQ weight that is not sliced mid-word). Returns
 * false, writing nothing, where the columns do not line up with words; the
 * caller then places value by value (packed_pos). The same bytes either way
 * (tests compare the two, turning this path off with the tuning's
 * value_pack). */
static bool pack_words(const wna16_qweight *w, int64_t o, int64_t col0, int64_t len, int64_t ls,
                       int c, uint8_t *rec) {
    int64_t per_word = wna16_wfmts[wna16_wfmt_of(w->bits)].word_vals, first = w->col_offset + col0;
    if (first % per_word != 0 || col0 + len > w->k || len % per_word != 0) return false;
    const uint32_t *src = w->packed + o * w->row_words + first / per_word;
    for (int64_t t = 0; t < len / per_word; t++) {
        uint32_t v = src[t];
        uint8_t *line = rec + t * ls;
        if (w->bits == 4) {
            /* nibble i = column 8t + i; the line's bytes of channel c hold
             * columns (0, 2), (4, 6), (1, 3), (5, 7), low nibble first:
             * the even nibbles to the low half, the odd ones to the high
             * half (two delta swaps) */
            uint32_t x = (v ^ (v >> 4)) & 0x00F000F0u;
            v ^= x ^ (x << 4);
            x = (v ^ (v >> 8)) & 0x0000FF00u;
            v ^= x ^ (x << 8);
            store_le32(line + 4 * c, v);
        } else {
            /* byte i = column 4t + i: columns (0, 1) and (2, 3), 32 bytes apart */
            store_le16(line + 2 * c, (uint16_t)v);
            store_le16(line + 32 + 2 * c, (uint16_t)(v >> 16));
        }
    }
    return true;
}

/* Pair interleave for a new packed weight: the tuning's 1 or 2 (tests pack
 * both), else the kernel table's: 2 when its bf16 activations run 32-wide
 * kernels (the bf16 dot's), 1 when they run the int16 ones (one block at a
 * time for one row: on the Xeon guest the 512-bit pair kernel read a row
 * at 4096² in 320-345 us, AVX2's one-block kernel on one block after
 * another in 290-300; two rows and more read two blocks side by side
 * either way). */
static int interleave_for_pack(const wna16_tuning *tu) {
    if (tu->pack_interleave == 1 || tu->pack_interleave == 2) return tu->pack_interleave;
    const wna16_kernel_table *t = wna16_kernels();
    if (t->gemv_i16[WNA16_WFMT_Q4] && !t->gemv2_bf16[WNA16_WFMT_Q4]) return 1;
    return t->gemv2_bf16[WNA16_WFMT_Q4] || t->gemv2_f32[WNA16_WFMT_Q4] ? 2 : 1;
}


/* Every scale bf16-exact (compressed-tensors: bf16 scales)? Then the packed
 * blocks keep them as bf16: the same values, half the bytes. */
static bool scales_bf16_exact(const wna16_qweight *w) {
    for (int64_t o = 0; o < w->n; o++)
        for (int64_t g = 0; g < w->n_groups; g++)
            if (!wna16_bf16_exact(w->scales[o * w->scale_stride + g])) return false;
    return true;
}

/* Block b of pl from w: channel by channel, each row's groups in column
 * order (the source is read sequentially, one row after another; group by
 * group over the block's 16 rows it was 16 interleaved streams, and the
 * repack waited on them). Rows past n are padding: zero scales, and the
 * zero point as every weight. */
static void pack_block(wna16_packed_linear *pl, const wna16_qweight *w, int64_t b,
                       bool value_pack) {
    const bool asym = !pl->symmetric;
    const int64_t gsp = pl->L.group_units * wna16_wfmts[pl->fmt].unit_k, ls = pl->L.ls;
    uint8_t *blk = block_at(pl, b);
    for (int c = 0; c < WNA16_LINEAR_NR; c++) {
        int64_t o = b * WNA16_LINEAR_NR + c;
        bool valid = o < w->n;
        for (int64_t g = 0; g < pl->n_groups; g++) {
            uint8_t *rec = (uint8_t *)wna16_group_w(&pl->L, blk, g);
            void *sc = (void *)wna16_group_s(&pl->L, blk, g);
            uint32_t z = valid ? wna16_qweight_zero(w, o, g) : (asym ? 0 : wna16_wfmts[pl->fmt].sym_zero);
            float s = valid ? w->scales[o * w->scale_stride + g] : 0.0f;
            if (pl->L.scale_bf16)
                ((uint16_t *)sc)[c] = wna16_f32_to_bf16(s);
            else
                ((float *)sc)[c] = s;
            if (asym) {
                int16_t *zw = (int16_t *)wna16_group_z(&pl->L, blk, g);
                zw[2 * c] = zw[2 * c + 1] = (int16_t)z;
            }
            if (valid && !value_pack && pack_words(w, o, g * gsp, gsp, ls, c, rec)) continue;
            for (int64_t kk = 0; kk < gsp; kk++) {
                int64_t col = g * gsp + kk;
                uint32_t u = valid && col < w->k ? wna16_qweight_u(w, o, col) : z;
                int shift;
                size_t pos = packed_pos(w->bits, ls, kk, c, &shift);
                rec[pos] |= (uint8_t)(u << shift);
            }
        }
    }
}

wna16_status wna16_linear_pack(wna16_diag *d, const wna16_qweight *w, wna16_packed_linear **out) {
    if (!out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "linear pack: out is NULL");
    *out = NULL;
    if (!w || !w->packed || !w->scales)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "linear pack: weight, data or scales NULL");
    if (w->n <= 0 || w->k <= 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "linear pack: shape [%lld, %lld] must be positive", (long long)w->n,
                          (long long)w->k);
    if (w->bits != 4 && w->bits != 8)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_BITS,
                          "linear pack: %d-bit weights; the kernels take 4 or 8", w->bits);
    int64_t gs = w->group_size;
    if (!(gs == w->k || gs == 32 || gs == 64 || gs == 128) || gs <= 0 || w->k % gs != 0)
        return wna16_fail(d, WNA16_ERR_GROUP_SIZE,
                          "linear pack: group size %lld with k = %lld; the kernels take 32, 64, "
                          "128 or channelwise, and k must be a multiple of it",
                          (long long)gs, (long long)w->k);
    if (w->n_groups != w->k / gs)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "linear pack: n_groups %lld != k / group_size = %lld",
                          (long long)w->n_groups, (long long)(w->k / gs));
    if (w->col_offset < 0 || w->row_words < ((w->col_offset + w->k) * w->bits + 31) / 32 ||
        w->scale_stride < w->n_groups || (w->zeros && w->zero_stride < w->n_groups))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "linear pack: row_words/col_offset/strides too small for the shape");
    /* zero points run to 2^bits inclusive: legacy GPTQ (v1) stores zero - 1
     * in `bits` bits, so a stored 2^bits - 1 means 2^bits, and AutoGPTQ and
     * transformers dequantize it as such (q = u - 16 for int4). The leaves
     * keep u - zero exact for any zero up to 2^bits (int4: a 32-entry
     * signed table; int8: int32 arithmetic). */
    bool asym = w->zeros != NULL;
    if (asym)
        for (int64_t o = 0; o < w->n; o++)
            for (int64_t g = 0; g < w->n_groups; g++)
                if (w->zeros[o * w->zero_stride + g] > (1u << w->bits))
                    return wna16_fail(d, WNA16_ERR_BAD_ZERO_POINT,
                                      "linear pack: zero point %u at [%lld, %lld] is above 2^%d",
                                      w->zeros[o * w->zero_stride + g], (long long)o, (long long)g,
                                      w->bits);

    const wna16_kernel_table *kt = wna16_kernels();
    if (wna16_tuning_of(d)->act_int8 && !kt->gemv_i16[wna16_wfmt_of(w->bits)])
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "linear pack: int8 activations need the integer kernels, which the %s "
                          "level lacks; run at an x86 (AVX2 or above) or aarch64 level",
                          wna16_isa_name(kt->isa));
    wna16_packed_linear *pl = wna16_calloc(1, sizeof *pl);
    if (!pl) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "linear pack: header");
    pl->n = w->n;
    pl->k = w->k;
    pl->kp = round_up(w->k, 8);
    pl->group_size = gs;
    pl->n_groups = w->n_groups;
    pl->n_blocks = (w->n + WNA16_LINEAR_NR - 1) / WNA16_LINEAR_NR;
    pl->bits = w->bits;
    pl->fmt = wna16_wfmt_of(w->bits);
    pl->symmetric = !asym;
    int64_t gsp = pl->n_groups == 1 ? pl->kp : gs;
    pl->L.n_groups = pl->n_groups;
    pl->L.group_units = gsp / wna16_wfmts[pl->fmt].unit_k;
    const wna16_tuning *tu = wna16_tuning_of(d);
    pl->decode_max_m = tu->decode_max_m < 0 ? WNA16_DECODE_MAX_M : tu->decode_max_m;
    pl->L.ilv = interleave_for_pack(tu);
    pl->act_int8 = tu->act_int8;
    pl->L.ls = 64 * pl->L.ilv;
    pl->L.wbytes = pl->L.group_units * pl->L.ls;
    pl->L.bits = w->bits;
    pl->L.asym = asym;
    pl->L.scale_bf16 = scales_bf16_exact(w);
    pl->L.scale_bytes = pl->L.scale_bf16 ? 32 : 64;
    /* block = records of rec_groups groups: their weights, then their scales,
     * then their zeros, so a run of blocks reads as one stream in address
     * order. bf16 scales pair groups so that a record's scales fill one
     * 64-byte line (an odd group count keeps one group per record). */
    if (pl->L.wbytes > ((int64_t)1 << 48)) { /* keeps the record sums below far from overflow */
        wna16_free(pl);
        return wna16_fail(d, WNA16_ERR_LIMIT, "linear pack: packed size overflows");
    }
    pl->L.rec_shift = pl->L.scale_bf16 && pl->n_groups % 2 == 0 ? 1 : 0;
    int64_t rg = (int64_t)1 << pl->L.rec_shift, ls = pl->L.ls;
    pl->L.s_in_rec = rg * pl->L.wbytes;
    pl->L.z_in_rec = pl->L.s_in_rec + (int64_t)al64((uint64_t)(rg * pl->L.scale_bytes)) / 64 * ls;
    pl->L.rec_bytes = pl->L.z_in_rec + (asym ? rg * ls : 0);
    /* a block holds its records' lines; with ilv = 2 the block count is
     * rounded up to whole pairs (the last odd block's partner is zero) */
    uint64_t block_bytes = 0, total = 0;
    int64_t alloc_blocks = (pl->n_blocks + pl->L.ilv - 1) / pl->L.ilv * pl->L.ilv;
    if (!wna16_mul_u64((uint64_t)(pl->n_groups >> pl->L.rec_shift),
                       (uint64_t)(pl->L.rec_bytes / pl->L.ilv), &block_bytes) ||
        !wna16_mul_u64(block_bytes, (uint64_t)alloc_blocks, &total) || total > SIZE_MAX - 64) {
        wna16_free(pl);
        return wna16_fail(d, WNA16_ERR_LIMIT, "linear pack: packed size overflows");
    }
    pl->L.block_bytes = (int64_t)block_bytes;
    pl->data_bytes = (size_t)total;
    pl->data = data_alloc(pl, pl->data_bytes);
    if (!pl->data) {
        wna16_free(pl);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                          "linear pack: %zu bytes for the packed weight", pl->data_bytes);
    }
    memset(pl->data, 0, pl->data_bytes);

    for (int64_t b = 0; b < pl->n_blocks; b++) pack_block(pl, w, b, tu->value_pack);
    *out = pl;
    return WNA16_OK;
}

void wna16_linear_free(wna16_packed_linear *pl) {
    if (!pl) return;
    data_free(pl);
    wna16_free(pl);
}

/* A header copied from `like` with its own (uninitialised) data buffer of
 * `bytes` (data_alloc); NULL without memory. */
static wna16_packed_linear *new_like(const wna16_packed_linear *like, size_t bytes) {
    wna16_packed_linear *c = wna16_malloc(sizeof *c);
    if (!c) return NULL;
    *c = *like;
    c->data = data_alloc(c, bytes);
    if (!c->data) {
        wna16_free(c);
        return NULL;
    }
    c->data_bytes = bytes;
    return c;
}

wna16_status wna16_linear_clone(wna16_diag *d, const wna16_packed_linear *pl,
                                wna16_packed_linear **out) {
    if (!out || !pl) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "linear clone: NULL");
    *out = new_like(pl, pl->data_bytes);
    if (!*out)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "linear clone: %zu bytes", pl->data_bytes);
    memcpy((*out)->data, pl->data, pl->data_bytes);
    return WNA16_OK;
}

static bool same_layout(const wna16_packed_linear *a, const wna16_packed_linear *b) {
    return a->k == b->k && a->bits == b->bits && a->group_size == b->group_size &&
           a->symmetric == b->symmetric && a->L.block_bytes == b->L.block_bytes &&
           a->L.scale_bf16 == b->L.scale_bf16 && a->L.rec_shift == b->L.rec_shift &&
           a->L.ilv == b->L.ilv && a->act_int8 == b->act_int8;
}

/* Copies one block's lines (the blocks may sit at different places in their
 * pairs). */
static void copy_block(const wna16_block_layout *L, uint8_t *dst, const uint8_t *src) {
    for (int64_t line = 0; line < L->block_bytes / 64; line++)
        memcpy(dst + line * L->ls, src + line * L->ls, 64);
}

wna16_status wna16_linear_concat(wna16_diag *d, const wna16_packed_linear *const *parts, size_t n,
                                 wna16_packed_linear **out) {
    if (!out || !parts || n == 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "linear concat: no parts");
    *out = NULL;
    int64_t rows = 0;
    for (size_t i = 0; i < n; i++) {
        if (!parts[i] || !same_layout(parts[0], parts[i]))
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "linear concat: part %zu is missing or packed differently", i);
        if (i + 1 < n && parts[i]->n % WNA16_LINEAR_NR)
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "linear concat: part %zu has %lld rows, not whole %d-row blocks", i,
                              (long long)parts[i]->n, WNA16_LINEAR_NR);
        rows += parts[i]->n;
    }
    const wna16_block_layout *L = &parts[0]->L;
    int64_t n_blocks = (rows + WNA16_LINEAR_NR - 1) / WNA16_LINEAR_NR;
    size_t bytes = (size_t)((n_blocks + L->ilv - 1) / L->ilv * L->ilv * L->block_bytes);
    wna16_packed_linear *c = new_like(parts[0], bytes);
    if (!c) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "linear concat: %zu bytes", bytes);
    memset(c->data, 0, bytes);
    c->n = rows;
    c->n_blocks = n_blocks;
    /* block by block: a part with an odd block count shifts the next part's
     * blocks to the other side of their pairs */
    for (size_t i = 0, b0 = 0; i < n; b0 += (size_t)parts[i]->n_blocks, i++)
        for (int64_t b = 0; b < parts[i]->n_blocks; b++)
            copy_block(L, block_at(c, (int64_t)b0 + b), block_at(parts[i], b));
    *out = c;
    return WNA16_OK;
}

void *wna16_linear_gather(wna16_packed_linear *const *pls, size_t n, size_t *arena_bytes) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (pls[i]) total += al64(pls[i]->data_bytes);
    *arena_bytes = 0;
    uint8_t *arena = total ? wna16_huge_alloc(total) : NULL;
    if (!arena) return NULL;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        wna16_packed_linear *pl = pls[i];
        if (!pl) continue;
        memcpy(arena + off, pl->data, pl->data_bytes);
        data_free(pl); /* the arena's owner frees the arena */
        pl->data = arena + off;
        off += al64(pl->data_bytes);
    }
    *arena_bytes = total;
    return arena;
}

int64_t wna16_linear_n(const wna16_packed_linear *pl) { return pl->n; }
int64_t wna16_linear_k(const wna16_packed_linear *pl) { return pl->k; }
int wna16_linear_bits(const wna16_packed_linear *pl) { return pl->bits; }
int64_t wna16_linear_group_size(const wna16_packed_linear *pl) { return pl->group_size; }
bool wna16_linear_symmetric(const wna16_packed_linear *pl) { return pl->symmetric; }
bool wna16_linear_scales_bf16(const wna16_packed_linear *pl) { return pl->L.scale_bf16; }
size_t wna16_linear_packed_bytes(const wna16_packed_linear *pl) { return pl->data_bytes; }
const uint8_t *wna16_linear_data(const wna16_packed_linear *pl) { return pl->data; }

void wna16_linear_prefetch(const wna16_packed_linear *pl) {
    for (size_t off = 0; off < sizeof *pl; off += 64) __builtin_prefetch((const char *)pl + off);
    for (int line = 0; line < 4; line++) __builtin_prefetch(pl->data + line * 64);
}

size_t wna16_linear_footprint(const wna16_packed_linear *pl) {
    return pl->data_bytes + 64 + sizeof *pl;
}

void wna16_linear_unpack(const wna16_packed_linear *pl, uint8_t *u, float *scales, uint8_t *zeros) {
    int64_t gsp = pl->L.group_units * wna16_wfmts[pl->fmt].unit_k;
    for (int64_t o = 0; o < pl->n; o++) {
        int64_t b = o / WNA16_LINEAR_NR;
        int c = (int)(o % WNA16_LINEAR_NR);
        for (int64_t g = 0; g < pl->n_groups; g++) {
            const uint8_t *blk = block_at(pl, b);
            const uint8_t *rec = wna16_group_w(&pl->L, blk, g);
            const int16_t *zw = wna16_group_z(&pl->L, blk, g);
            if (scales) {
                float sc[16];
                wna16_group_scales(&pl->L, blk, g, sc);
                scales[o * pl->n_groups + g] = sc[c];
            }
            if (zeros)
                zeros[o * pl->n_groups + g] =
                    pl->L.asym ? (uint8_t)zw[2 * c] : (uint8_t)wna16_wfmts[pl->fmt].sym_zero;
            if (u)
                for (int64_t kk = 0; kk < gsp; kk++) {
                    int64_t col = g * gsp + kk;
                    if (col >= pl->k) break;
                    int shift;
                    size_t pos = packed_pos(pl->bits, pl->L.ls, kk, c, &shift);
                    u[o * pl->k + col] = (uint8_t)((rec[pos] >> shift) & ((1u << pl->bits) - 1u));
                }
        }
    }
}
