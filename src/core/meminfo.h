/* How much memory this process may still take (meminfo.c): what loading
 * compares its estimate with, so that a model that cannot fit is refused
 * before any allocation instead of ending in the OOM killer or swap. */
#ifndef WNA16_CORE_MEMINFO_H
#define WNA16_CORE_MEMINFO_H

#include <stddef.h>
#include <stdint.h>

/* Bytes available: WNA16_MEMORY_LIMIT (bytes) when set, else the smaller of
 * /proc/meminfo's MemAvailable and the cgroup's room (memory.max minus
 * memory.current, cgroup v2) when the process is in a limited one. -1 when
 * none can be read. `source` (cap bytes) names where the figure came from. */
int64_t wna16_memory_available(char *source, size_t cap);

#endif
