/* safetensors reader and writer: the byte-exact vectors of format-spec §7.1
 * and §7.2, and the negative cases of §7.3 and style-and-reliability §B4. */
#include "io/safetensors.h"
#include "testing.h"

static wna16_ctx *ctx;

/* Builds [u64 len][header][data] in a static buffer. */
static uint8_t file_buf[1 << 16];
static size_t make_file(const char *header, const void *data, size_t data_len) {
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++) file_buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(file_buf + 8, header, n);
    if (data_len) memcpy(file_buf + 8 + n, data, data_len);
    return 8 + n + data_len;
}

static wna16_status open_buf(size_t size) {
    wna16_safetensors *st = NULL;
    wna16_status s = wna16_safetensors_open_memory(ctx, file_buf, size, "t.safetensors", &st);
    wna16_safetensors_close(st);
    return s;
}

static wna16_status open_header(const char *header, size_t data_len) {
    static uint8_t zeros[4096];
    return open_buf(make_file(header, zeros, data_len));
}

static void test_spec_7_1(void) {
    float vals[6] = {0, 1, 2, 3, 4, 5};
    wna16_st_writer *w;
    CHECK(wna16_st_writer_create(ctx, &w) == WNA16_OK);
    int64_t shape[3] = {1, 2, 3};
    CHECK(wna16_st_writer_add(ctx, w, "attn.0", WNA16_DTYPE_F32, 3, shape, vals) == WNA16_OK);
    uint8_t *out;
    size_t size;
    CHECK(wna16_st_writer_serialize(ctx, w, &out, &size) == WNA16_OK);
    const char *hdr = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    CHECK(size == 96);
    CHECK(out[0] == 0x40 && out[1] == 0);
    CHECK(!memcmp(out + 8, hdr, 64));
    const uint8_t data[24] = {0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40,
                              0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40, 0, 0, 0xa0, 0x40};
    CHECK(!memcmp(out + 72, data, 24));
    wna16_safetensors *st;
    CHECK(wna16_safetensors_open_memory(ctx, out, size, "x", &st) == WNA16_OK);
    const wna16_tensor_view *v = wna16_safetensors_find(st, "attn.0");
    CHECK(v && v->rank == 3 && v->shape[2] == 3 && v->nbytes == 24 &&
          ((const float *)v->data)[5] == 5.0f);
    wna16_safetensors_close(st);
    free(out);
    wna16_st_writer_free(w);

    /* empty file and empty file with metadata */
    CHECK(wna16_st_writer_create(ctx, &w) == WNA16_OK);
    CHECK(wna16_st_writer_serialize(ctx, w, &out, &size) == WNA16_OK);
    const uint8_t empty[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    CHECK(size == 16 && !memcmp(out, empty, 16));
    free(out);
    CHECK(wna16_st_writer_metadata(ctx, w, "framework", "pt") == WNA16_OK);
    CHECK(wna16_st_writer_serialize(ctx, w, &out, &size) == WNA16_OK);
    CHECK(size == 48 && out[0] == 40 && !memcmp(out + 8, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 40));
    CHECK(wna16_safetensors_open_memory(ctx, out, size, "x", &st) == WNA16_OK);
    CHECK(wna16_safetensors_count(st) == 0);
    CHECK(!strcmp(wna16_safetensors_metadata(st, "framework"), "pt"));
    wna16_safetensors_close(st);
    free(out);
    wna16_st_writer_free(w);
}

static void test_spec_7_2(void) {
    int64_t wshape_v[2] = {2, 8};
    uint32_t packed[2] = {0x88E6980Cu, 0x76543210u};
    uint16_t scale[2] = {0x3e80, 0x3f00};
    wna16_st_writer *w;
    CHECK(wna16_st_writer_create(ctx, &w) == WNA16_OK);
    int64_t s1[1] = {2}, s2[2] = {2, 1};
    /* added out of order on purpose: the writer sorts by dtype then name */
    CHECK(wna16_st_writer_add(ctx, w, "layer.weight_scale", WNA16_DTYPE_BF16, 2, s2, scale) == 0);
    CHECK(wna16_st_writer_add(ctx, w, "layer.weight_packed", WNA16_DTYPE_I32, 2, s2, packed) == 0);
    CHECK(wna16_st_writer_add(ctx, w, "layer.weight_shape", WNA16_DTYPE_I64, 1, s1, wshape_v) == 0);
    CHECK(wna16_st_writer_metadata(ctx, w, "format", "pt") == WNA16_OK);
    uint8_t *out;
    size_t size;
    CHECK(wna16_st_writer_serialize(ctx, w, &out, &size) == WNA16_OK);
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\"},\"layer.weight_shape\":{\"dtype\":\"I64\",\"shape\":"
        "[2],\"data_offsets\":[0,16]},\"layer.weight_packed\":{\"dtype\":\"I32\",\"shape\":[2,1],"
        "\"data_offsets\":[16,24]},\"layer.weight_scale\":{\"dtype\":\"BF16\",\"shape\":[2,1],"
        "\"data_offsets\":[24,28]}}   ";
    const uint8_t data[28] = {2, 0, 0, 0, 0,    0,    0,    0,    8,    0,    0,    0,    0,    0,
                              0, 0, 0x0c, 0x98, 0xe6, 0x88, 0x10, 0x32, 0x54, 0x76, 0x80, 0x3e, 0x00, 0x3f};
    CHECK(strlen(hdr) == 256);
    CHECK(size == 292);
    CHECK(out[0] == 0x00 && out[1] == 0x01); /* N = 256 */
    CHECK(!memcmp(out + 8, hdr, 256));
    CHECK(!memcmp(out + 264, data, 28));
    free(out);
    wna16_st_writer_free(w);
}

/* format-spec §7.3 and B4 cases. Each asserts the status and a message part. */
static void test_negative(void) {
    uint8_t b[16] = {0x3c, 0, 0, 0, 0, 0, 0, 0};
    memcpy(file_buf, b, 8);
    CHECK_STATUS(ctx, open_buf(8), WNA16_ERR_INVALID_HEADER_LENGTH, "runs past the end");
    CHECK_STATUS(ctx, open_buf(0), WNA16_ERR_HEADER_TOO_SMALL, "0 bytes");
    CHECK_STATUS(ctx, open_buf(7), WNA16_ERR_HEADER_TOO_SMALL, "8-byte header length");
    uint8_t big[8] = {0x3c, 0, 0, 0, 0, 0xff, 0xff, 0xff};
    memcpy(file_buf, big, 8);
    CHECK_STATUS(ctx, open_buf(8), WNA16_ERR_HEADER_TOO_LARGE, "cap");
    memset(file_buf, 0xff, 8);
    CHECK_STATUS(ctx, open_buf(8), WNA16_ERR_HEADER_TOO_LARGE, "cap");
    /* N = 100000001: just above the cap; N = 0 */
    uint64_t n = 100000001;
    for (int i = 0; i < 8; i++) file_buf[i] = (uint8_t)(n >> (8 * i));
    CHECK_STATUS(ctx, open_buf(8), WNA16_ERR_HEADER_TOO_LARGE, "100000001");
    CHECK_STATUS(ctx, open_header("", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    CHECK_STATUS(ctx, open_header("\xff", 0), WNA16_ERR_INVALID_HEADER, "UTF-8");
    CHECK_STATUS(ctx, open_header("{\"a\xc0\xaf\":1}", 0), WNA16_ERR_INVALID_HEADER, "UTF-8");
    CHECK_STATUS(ctx, open_header("{\"\xed\xa0\x80\":1}", 0), WNA16_ERR_INVALID_HEADER, "UTF-8");
    CHECK_STATUS(ctx, open_header("{", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    CHECK_STATUS(ctx, open_header("[]", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "must be an object");
    CHECK_STATUS(ctx, open_header("null", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "expected");
    CHECK_STATUS(ctx, open_header("\"str\"", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "expected");
    CHECK_STATUS(ctx, open_header("{}{}", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    CHECK_STATUS(ctx, open_header("{\"a\":1,}", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    CHECK_STATUS(ctx, open_header("{/*c*/}", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    CHECK_STATUS(ctx, open_header("{\"a\":NaN}", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    CHECK_STATUS(ctx, open_header("\xef\xbb\xbf{}", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    CHECK_STATUS(ctx, open_header("{\"a\\u0000b\":{}}", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    /* deep nesting must not overflow the stack */
    static char deep[20010];
    memset(deep, '[', 10000);
    memset(deep + 10000, ']', 10000);
    deep[20000] = 0;
    CHECK_STATUS(ctx, open_header(deep, 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    /* duplicates */
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                  "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2),
                 WNA16_ERR_DUPLICATE_KEY, "duplicate");
    CHECK_STATUS(ctx, open_header("{\"__metadata__\":{},\"__metadata__\":{}}", 0),
                 WNA16_ERR_DUPLICATE_KEY, "duplicate");
    /* schema */
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"bf16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2),
                 WNA16_ERR_UNKNOWN_DTYPE, "\"bf16\"");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"BF16 \",\"shape\":[1],\"data_offsets\":[0,2]}}", 2),
                 WNA16_ERR_UNKNOWN_DTYPE, "unknown dtype");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,2]}}", 2),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "dtype is not a string");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"shape\":[1],\"data_offsets\":[0,2]}}", 2),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "missing");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "shape is not an array");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "non-negative");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[2.0],\"data_offsets\":[0,2]}}", 2),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "non-negative");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "pair");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "pair");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "rank 9");
    CHECK_STATUS(ctx, open_header("{\"t\":[]}", 0), WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not an object");
    CHECK_STATUS(ctx, open_header("{\"__metadata__\":{\"a\":1}}", 0),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not a string");
    CHECK_STATUS(ctx, open_header("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not a string");
    CHECK_STATUS(ctx, open_header("{\"__metadata__\":[]}", 0),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "object of strings");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,18446744073709551617]}}", 1),
                 WNA16_ERR_INVALID_HEADER_DESERIALIZATION, "not valid JSON");
    /* geometry */
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", 4),
                 WNA16_ERR_TENSOR_INVALID_INFO, "need 16 bytes");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 18),
                 WNA16_ERR_METADATA_INCOMPLETE_BUFFER, "trailing");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 14),
                 WNA16_ERR_METADATA_INCOMPLETE_BUFFER, "truncated");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"F4\",\"shape\":[1,3],\"data_offsets\":[0,2]}}", 2),
                 WNA16_ERR_MISALIGNED_SLICE, "whole number of bytes");
    CHECK_STATUS(ctx, open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                                  "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}", 12),
                 WNA16_ERR_INVALID_OFFSET, "'b'");
    CHECK_STATUS(ctx, open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8),
                 WNA16_ERR_INVALID_OFFSET, "expected is 0");
    CHECK_STATUS(ctx, open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                                  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}", 10),
                 WNA16_ERR_INVALID_OFFSET, "gap");
    CHECK_STATUS(ctx, open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                                  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4),
                 WNA16_ERR_INVALID_OFFSET, "overlap");
    CHECK_STATUS(ctx, open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4),
                 WNA16_ERR_INVALID_OFFSET, "'a'");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0),
                 WNA16_ERR_VALIDATION_OVERFLOW, "overflows");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"I64\",\"shape\":[2,4611686018427387904],\"data_offsets\":[0,0]}}", 0),
                 WNA16_ERR_VALIDATION_OVERFLOW, "overflows");
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"I64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", 0),
                 WNA16_ERR_VALIDATION_OVERFLOW, "overflows");
}

static void test_positive_edges(void) {
    /* empty tensor, scalar, leading/trailing whitespace, unsorted JSON order */
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"I32\",\"shape\":[2,0],\"data_offsets\":[0,0]}}", 0), WNA16_OK, NULL);
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4), WNA16_OK, NULL);
    CHECK_STATUS(ctx, open_header("\t\n{}  \r\n", 0), WNA16_OK, NULL);
    CHECK_STATUS(ctx, open_header("{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]},"
                                  "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                                  "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,8]}}", 8), WNA16_OK, NULL);
    /* extra fields in an entry are ignored, like the reference crate */
    CHECK_STATUS(ctx, open_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1), WNA16_OK, NULL);
}

/* Tensors the file does not align to their element size (another writer's
 * layout, or a buffer at an odd address) read as aligned arrays with their
 * values: the reader copies just those. */
static void test_misaligned(void) {
    /* U8[1] at 0, then I64 at 1 and F32 at 9: both misaligned in the data */
    const char *hdr = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                      "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[1,9]},"
                      "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9,13]}}";
    uint8_t data[13] = {7};
    int64_t b = -1234567890123;
    float c = 2.5f;
    memcpy(data + 1, &b, 8);
    memcpy(data + 9, &c, 4);
    size_t size = make_file(hdr, data, sizeof data);
    static uint8_t shifted[sizeof file_buf + 8];
    for (size_t shift = 0; shift < 8; shift++) {
        /* the whole file at every offset mod 8 */
        memcpy(shifted + shift, file_buf, size);
        wna16_safetensors *st = NULL;
        CHECK(wna16_safetensors_open_memory(ctx, shifted + shift, size, "m", &st) == WNA16_OK);
        const wna16_tensor_view *va = wna16_safetensors_find(st, "a"),
                                *vb = wna16_safetensors_find(st, "b"),
                                *vc = wna16_safetensors_find(st, "c");
        CHECK(va && vb && vc);
        CHECK(((uintptr_t)vb->data & 7) == 0 && ((uintptr_t)vc->data & 3) == 0);
        CHECK(*(const uint8_t *)va->data == 7);
        CHECK(*(const int64_t *)vb->data == b && *(const float *)vc->data == c);
        wna16_safetensors_close(st);
    }
}

static void test_file_io(void) {
    wna16_safetensors *st = NULL;
    CHECK_STATUS(ctx, wna16_safetensors_open(ctx, "/nonexistent/x.safetensors", &st), WNA16_ERR_IO, "cannot open");
    CHECK_STATUS(ctx, wna16_safetensors_open(ctx, "tests", &st), WNA16_ERR_IO, "not a regular file");
    /* write through the temp-and-rename path, read back through mmap */
    wna16_st_writer *w;
    CHECK(wna16_st_writer_create(ctx, &w) == WNA16_OK);
    uint16_t v[3] = {1, 2, 3};
    int64_t shape[1] = {3};
    CHECK(wna16_st_writer_add(ctx, w, "x", WNA16_DTYPE_BF16, 1, shape, v) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_st_writer_add(ctx, w, "x", WNA16_DTYPE_BF16, 1, shape, v), WNA16_ERR_DUPLICATE_KEY, "twice");
    char path[] = "/tmp/wna16_st_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(wna16_st_writer_write(ctx, w, path) == WNA16_OK);
    CHECK(wna16_safetensors_open(ctx, path, &st) == WNA16_OK);
    const wna16_tensor_view *t = wna16_safetensors_find(st, "x");
    CHECK(t && t->dtype == WNA16_DTYPE_BF16 && ((const uint16_t *)t->data)[2] == 3);
    CHECK(wna16_safetensors_find(st, "y") == NULL);
    wna16_safetensors_close(st);
    CHECK_STATUS(ctx, wna16_st_writer_write(ctx, w, "/nonexistent/dir/x.safetensors"), WNA16_ERR_IO, "cannot create");
    wna16_st_writer_free(w);
    remove(path);
}

int main(void) {
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    test_spec_7_1();
    test_spec_7_2();
    test_negative();
    test_positive_edges();
    test_misaligned();
    test_file_io();
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
