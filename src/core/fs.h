/* Small file-system helpers with errors as values. */
#ifndef WNA16_CORE_FS_H
#define WNA16_CORE_FS_H

#include "core/common.h"

/* Writes text (NUL-terminated) to path, replacing it. IO on failure. */
wna16_status wna16_write_text(wna16_diag *d, const char *path, const char *text);
/* Copies from to to when from exists (nothing to do when it does not). IO
 * when to cannot be written. */
wna16_status wna16_copy_file_if_present(wna16_diag *d, const char *from, const char *to);
/* Removes the files directly inside dir, then dir: for a directory this
 * process created and filled with files only (a temporary output). */
void wna16_remove_flat_dir(const char *dir);

#endif
