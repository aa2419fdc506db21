/* The MPI plug-in's contract. The MPI backend (src/parallel/mpi/) is built
 * as its own shared object, libwna16-mpi.so, that links MPI, so the core
 * library has no MPI dependency: the core loads it (dlopen) when a program
 * asks for an MPI communicator. The plug-in calls nothing in the core
 * (whose internals are hidden): the core hands it the few services it needs
 * in wna16_mpi_host and it hands back wna16_mpi_plugin. Both come from one
 * source tree, so the ABI number and struct sizes must match exactly. */
#ifndef WNA16_PARALLEL_MPI_PLUGIN_H
#define WNA16_PARALLEL_MPI_PLUGIN_H

#include "parallel/comm_impl.h"

#include <stdarg.h>

#define WNA16_MPI_PLUGIN_ABI 2
#define WNA16_MPI_PLUGIN_ENTRY "wna16_mpi_plugin_entry"
#define WNA16_MPI_PLUGIN_FILE "libwna16-mpi.so"

typedef struct wna16_mpi_host {
    int abi;
    size_t comm_size, diag_size; /* sizeof(wna16_comm), sizeof(wna16_diag) */
    wna16_status (*vfail)(wna16_diag *d, wna16_status s, const char *fmt, va_list ap);
    void *(*malloc_fn)(size_t n);
    void *(*calloc_fn)(size_t count, size_t size);
    void *(*realloc_fn)(void *p, size_t n);
    void (*free_fn)(void *p);
    const char *(*status_str)(wna16_status s);
} wna16_mpi_host;

typedef struct wna16_mpi_plugin {
    int abi;
    /* wna16_comm_mpi_world's work (include/wna16.h), errors into d. */
    wna16_status (*world)(wna16_diag *d, int *argc, char ***argv, wna16_comm **out);
} wna16_mpi_plugin;

/* The one symbol the plug-in exports: NULL when host is not the ABI it was
 * built for. */
typedef const wna16_mpi_plugin *(*wna16_mpi_plugin_entry_fn)(const wna16_mpi_host *host);

#endif
