/* Internal view of the safetensors module (public API in wna16.h). */
#ifndef WNA16_IO_SAFETENSORS_H
#define WNA16_IO_SAFETENSORS_H

#include "core/common.h"

/* The reference crate's cap on the JSON header (format-spec §1.4 rule 2). */
#define WNA16_ST_MAX_HEADER 100000000ull

/* Open with a detail sink instead of a context (used by the checkpoint). */
wna16_status wna16_st_open_file(wna16_diag *d, const char *path, wna16_safetensors **out);
const char *wna16_st_path(const wna16_safetensors *st);
/* Drops this process's resident pages of the file mapping (no-op for memory
 * buffers). The mapping stays valid: read-only private pages fault back in
 * from the page cache on the next access. */
void wna16_st_release_pages(const wna16_safetensors *st);
/* Element count of a view (shape product; validated not to overflow). */
int64_t wna16_view_numel(const wna16_tensor_view *v);
/* Parses a dtype string exactly as the reference crate spells it. */
bool wna16_dtype_parse(const char *s, wna16_dtype *out);
/* True if the bytes are well-formed UTF-8 (no overlongs, no surrogates). */
bool wna16_utf8_valid(const uint8_t *s, size_t n);

#endif
