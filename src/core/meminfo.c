/* The memory this process may still take (meminfo.h). In a container
 * MemAvailable is the host's; the cgroup's limit is the one that kills. */
#include "core/meminfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first integer after `key` in a file, times `scale`; -1 when absent. */
static int64_t read_number(const char *path, const char *key, int64_t scale) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen)) continue;
        char *end;
        long long x = strtoll(line + klen, &end, 10);
        if (end != line + klen) v = (int64_t)x * scale;
        break;
    }
    fclose(f);
    return v;
}

/* The cgroup (v2) directory of this process under /sys/fs/cgroup. */
static int cgroup_dir(char *out, size_t cap) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[512];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3)) continue;
        line[strcspn(line, "\n")] = 0;
        rc = snprintf(out, cap, "/sys/fs/cgroup%s", line + 3) < (int)cap ? 0 : -1;
        break;
    }
    fclose(f);
    return rc;
}

/* The cgroup's room, or -1 without a limit. */
static int64_t cgroup_room(void) {
    char dir[512], path[600];
    if (cgroup_dir(dir, sizeof dir)) return -1;
    snprintf(path, sizeof path, "%s/memory.max", dir);
    int64_t max = read_number(path, "", 1); /* "max" reads as no number */
    snprintf(path, sizeof path, "%s/memory.current", dir);
    int64_t cur = read_number(path, "", 1);
    if (max < 0 || cur < 0) return -1;
    return max > cur ? max - cur : 0;
}

int64_t wna16_memory_available(char *source, size_t cap) {
    const char *env = getenv("WNA16_MEMORY_LIMIT");
    if (env && *env) {
        char *end;
        long long v = strtoll(env, &end, 10);
        if (*end == 0 && v >= 0) {
            snprintf(source, cap, "WNA16_MEMORY_LIMIT");
            return (int64_t)v;
        }
    }
    int64_t avail = read_number("/proc/meminfo", "MemAvailable:", 1024);
    int64_t room = cgroup_room();
    if (room >= 0 && (avail < 0 || room < avail)) {
        snprintf(source, cap, "the cgroup's memory.max");
        return room;
    }
    snprintf(source, cap, "MemAvailable");
    return avail;
}
