/* Finds and loads the MPI plug-in (parallel/mpi_plugin.h) on first use.
 * Where it looks, first match wins: $WNA16_MPI_PLUGIN (a path); beside the
 * libwna16 shared object that holds this code; beside the executable, and
 * in <exe>/../lib* (the installed layout); then the loader's own search
 * path. A failure is kept as text for wna16_comm_mpi_world's error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include "parallel/mpi_plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef WNA16_INSTALL_LIBDIR
#define WNA16_INSTALL_LIBDIR "lib"
#endif

static wna16_status host_vfail(wna16_diag *d, wna16_status s, const char *fmt, va_list ap) {
    if (d) vsnprintf(d->detail, sizeof d->detail, fmt, ap);
    return s;
}

static const wna16_mpi_host host = {
    .abi = WNA16_MPI_PLUGIN_ABI,
    .comm_size = sizeof(wna16_comm),
    .diag_size = sizeof(wna16_diag),
    .vfail = host_vfail,
    .malloc_fn = wna16_malloc,
    .calloc_fn = wna16_calloc,
    .realloc_fn = wna16_realloc,
    .free_fn = wna16_free,
    .status_str = wna16_status_str,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const wna16_mpi_plugin *plugin;
static char why[1024]; /* what the search found, when it found nothing usable */

/* dir of path, in buf; false when there is none */
static bool dir_of(const char *path, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) >= cap) return false;
    memcpy(buf, path, (size_t)(slash - path));
    buf[slash - path] = '\0';
    return true;
}

static bool try_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        /* keep the first error that is not a plain "no such file" */
        if (!why[0] || strstr(why, "No such file")) snprintf(why, sizeof why, "%s", e ? e : path);
        return false;
    }
    wna16_mpi_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h, WNA16_MPI_PLUGIN_ENTRY);
    const wna16_mpi_plugin *p = entry ? entry(&host) : NULL;
    if (!p || p->abi != WNA16_MPI_PLUGIN_ABI) {
        snprintf(why, sizeof why, "%s is not a plug-in of this libwna16 version", path);
        dlclose(h);
        return false;
    }
    plugin = p; /* stays loaded: MPI cannot be unloaded and initialized again */
    return true;
}

static bool try_dir(const char *dir, const char *sub) {
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s%s/" WNA16_MPI_PLUGIN_FILE, dir, sub);
    return n > 0 && (size_t)n < sizeof path && try_open(path);
}

static void load(void) {
    const char *env = getenv("WNA16_MPI_PLUGIN");
    if (env && *env) {
        if (!try_open(env)) return; /* asked for one file: no other */
        return;
    }
    char dir[PATH_MAX];
    Dl_info info;
    if (dladdr((void *)&host, &info) && info.dli_fname && dir_of(info.dli_fname, dir, sizeof dir) &&
        try_dir(dir, ""))
        return;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        if (dir_of(exe, dir, sizeof dir) &&
            (try_dir(dir, "") || try_dir(dir, "/../" WNA16_INSTALL_LIBDIR) || try_dir(dir, "/../lib")))
            return;
    }
    try_open(WNA16_MPI_PLUGIN_FILE);
}

bool wna16_mpi_built(void) {
    pthread_once(&once, load);
    return plugin != NULL;
}

wna16_status wna16_comm_mpi_world(wna16_ctx *ctx, int *argc, char ***argv, wna16_comm **out) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (out) *out = NULL;
    if (!out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "comm_mpi_world: out is NULL");
    if (!wna16_mpi_built())
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "the MPI plug-in (" WNA16_MPI_PLUGIN_FILE ") could not be loaded: %s; "
                          "build wna16 with an MPI implementation installed (libopenmpi-dev), "
                          "install it beside libwna16, or set WNA16_MPI_PLUGIN to its path",
                          why[0] ? why : "not found");
    return plugin->world(d, argc, argv, out);
}
