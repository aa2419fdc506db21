/* Shared by every fuzz target in tests/fuzz/.
 *
 * Each target defines LLVMFuzzerTestOneInput(). Built with -DWNA16_FUZZ=ON
 * (clang) it links against libFuzzer; otherwise this header adds a plain
 * replay main() that runs the target once on every file named on the
 * command line (directories are walked one level, in name order), so ctest
 * replays the committed corpus with any compiler.
 *
 * fuzz_init() caps every library allocation (WNA16_MAX_ALLOC, 256 MiB unless
 * already set) before the first one, so an absurd declared size must come
 * back as an error: under the fuzzer's -rss_limit_mb an unchecked one would
 * be an OOM report. FUZZ_CHECK is the target's own invariant: abort() so
 * the fuzzer (or ctest) reports the input. */
#ifndef WNA16_FUZZ_COMMON_H
#define WNA16_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ALLOC_CAP "268435456"

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static inline void fuzz_init(void) {
    static int done;
    if (done) return;
    done = 1;
    setenv("WNA16_MAX_ALLOC", FUZZ_ALLOC_CAP, 0);
}

/* Reads little-endian integers off the front of the input (zeros when it
 * runs out): the data-producer pattern. */
typedef struct fuzz_reader {
    const uint8_t *p;
    size_t n;
} fuzz_reader;

static inline uint64_t fuzz_u64(fuzz_reader *r, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        uint8_t b = 0;
        if (r->n) {
            b = *r->p++;
            r->n--;
        }
        v |= (uint64_t)b << (8 * i);
    }
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Replay only, with WNA16_FUZZ_VERBOSE set: prints which status each input
 * reached, to check that the seeds cover the loader's refusals. */
#ifndef WNA16_LIBFUZZER
static const char *fuzz_current_input;
#endif
static inline void fuzz_note(const char *what, int status) {
#ifndef WNA16_LIBFUZZER
    if (getenv("WNA16_FUZZ_VERBOSE"))
        printf("%-60s %s %d\n", fuzz_current_input ? fuzz_current_input : "?", what, status);
#else
    (void)what;
    (void)status;
#endif
}

#ifndef WNA16_LIBFUZZER
#include <dirent.h>
#include <sys/stat.h>

static int fuzz_replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) return 1;
    /* an exact-size copy, so ASan sees any read past the input */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, n);
    free(buf);
    fuzz_current_input = path;
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int fuzz_cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int fuzz_replay_dir(const char *dir, size_t *count) {
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "cannot open directory %s\n", dir);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(dp);
    qsort(names, n, sizeof *names, fuzz_cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            rc |= fuzz_replay_file(path);
            ++*count;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    int rc = 0;
    size_t count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "%s: no such file or directory\n", argv[i]);
            rc = 1;
        } else if (S_ISDIR(sb.st_mode)) {
            rc |= fuzz_replay_dir(argv[i], &count);
        } else {
            rc |= fuzz_replay_file(argv[i]);
            count++;
        }
    }
    printf("%s: replayed %zu inputs\n", argv[0], count);
    if (count == 0) {
        fprintf(stderr, "no inputs: an empty corpus proves nothing\n");
        rc = 1;
    }
    return rc;
}
#endif /* WNA16_LIBFUZZER */

#endif
