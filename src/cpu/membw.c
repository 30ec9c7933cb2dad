// membw.c: see membw.h.
#include "cpu/membw.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/hugemem.h"
#include "cpu/threadpool.h"
#include "util.h"

#define CHUNK ((size_t)1 << 20)

struct read_job {
    const uint64_t *buf;
    size_t words;
    uint64_t *sums; // one per thread (8 apart: no shared cache line), so the reads cannot be dropped
};

static void read_chunk(void *arg, int chunk, int ith) {
    struct read_job *j = arg;
    const size_t w0 = (size_t)chunk * (CHUNK / 8);
    const size_t w1 = w0 + CHUNK / 8 < j->words ? w0 + CHUNK / 8 : j->words;
    uint64_t a[8] = {0};
    for (size_t i = w0; i + 8 <= w1; i += 8)
        for (int k = 0; k < 8; k++) a[k] ^= j->buf[i + k];
    uint64_t s = 0;
    for (int k = 0; k < 8; k++) s += a[k];
    j->sums[8 * (size_t)ith] += s;
}

double cpu_read_bandwidth(int n_threads, size_t bytes, int passes) {
    bytes = (bytes + CHUNK - 1) / CHUNK * CHUNK;
    uint64_t *buf = hugemem_buffer(bytes);
    if (!buf) return -1;
    memset(buf, 1, bytes); // fault every page in before timing
    const int nth = n_threads > 0 ? n_threads : threadpool_default_threads();
    struct threadpool *tp = threadpool_init(nth);
    if (!tp) {
        free(buf);
        return -1;
    }
    struct read_job j = {.buf = buf, .words = bytes / 8, .sums = st_xcalloc(8 * (size_t)nth, sizeof *j.sums)};
    double best = 0;
    for (int p = 0; p < passes; p++) {
        const double t0 = st_time_s();
        threadpool_run_chunks(tp, read_chunk, &j, (int)(bytes / CHUNK));
        const double dt = st_time_s() - t0;
        if (dt > 0 && bytes / dt > best) best = bytes / dt;
    }
    volatile uint64_t sink = 0;
    for (int i = 0; i < nth; i++) sink += j.sums[8 * (size_t)i];
    (void)sink;
    free(j.sums);
    threadpool_free(tp);
    free(buf);
    return best;
}
