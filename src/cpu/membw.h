// membw.h: the host memory's read bandwidth, the ceiling a decode step on the
// CPU streams its weights against.
#ifndef STRATA_MEMBW_H
#define STRATA_MEMBW_H

#include <stddef.h>

// Reads a buffer of bytes (in 2 MiB pages where the OS gives them, as the
// repacked weights are: hugemem.h) with n_threads threads (0: every core this
// process may use, the backend's default) taking 1 MiB chunks
// as the matrix products do; returns the best of passes passes in bytes per
// second, or -1 with a message (no memory, no threads). bytes should exceed the
// last-level cache for the figure to be the memory's.
double cpu_read_bandwidth(int n_threads, size_t bytes, int passes);

#endif
