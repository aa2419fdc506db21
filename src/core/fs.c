/* Small file-system helpers (see core/fs.h). */
#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

wna16_status wna16_write_text(wna16_diag *d, const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return wna16_fail(d, WNA16_ERR_IO, "%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok ? WNA16_OK : wna16_fail(d, WNA16_ERR_IO, "%s: write failed", path);
}

wna16_status wna16_copy_file_if_present(wna16_diag *d, const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) return WNA16_OK; /* absent: nothing to copy */
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return wna16_fail(d, WNA16_ERR_IO, "%s: %s", to, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) ok = ok && fwrite(buf, 1, n, out) == n;
    ok = !ferror(in) && ok;
    fclose(in);
    ok = fclose(out) == 0 && ok;
    return ok ? WNA16_OK : wna16_fail(d, WNA16_ERR_IO, "copying %s to %s failed", from, to);
}

void wna16_remove_flat_dir(const char *dir) {
    DIR *dd = opendir(dir);
    if (dd) {
        for (struct dirent *e; (e = readdir(dd));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = wna16_asprintf("%s/%s", dir, e->d_name);
            if (p) unlink(p);
            wna16_free(p);
        }
        closedir(dd);
    }
    rmdir(dir);
}
