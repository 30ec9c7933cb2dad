// cpu_common.c: ops the reference and the fast CPU backend share.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_ops.h"
#include "util.h"

void cpu_get_rows(struct backend *be, const struct weight *emb, const int32_t *tokens, int n, float *out) {
    (void)be;
    const struct quant_traits *qt = quant_get(emb->type);
    for (int i = 0; i < n; i++)
        qt->dequantize_row((const char *)emb->data + (size_t)tokens[i] * emb->row_bytes,
                           out + (size_t)i * emb->cols, emb->cols);
}

void cpu_kv_store(struct backend *be, void *k_cache, void *v_cache, const float *k, const float *v,
                  const struct batch_rows *r, int kv_dim) {
    const struct quant_traits *qt = quant_get(be->kv_type); // F32: a copy; F16: rounded to halves
    const size_t row = qt->type_size * (size_t)kv_dim;
    for (int t = 0; t < r->n; t++) {
        const size_t dst = ((size_t)r->host_base[t] + (size_t)r->host_pos[t]) * row, src = (size_t)t * kv_dim;
        qt->quantize_row(k + src, (char *)k_cache + dst, kv_dim);
        qt->quantize_row(v + src, (char *)v_cache + dst, kv_dim);
    }
}

void cpu_copy(struct backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
}

void cpu_release(struct backend *be, void *buf) {
    (void)be;
    free(buf);
}

int cpu_prepare_weight(struct backend *be, const struct weight *w) {
    (void)be;
    (void)w;
    return 0;
}

void cpu_release_weight(struct backend *be, const struct weight *w) {
    (void)be;
    (void)w;
}

int cpu_sync(struct backend *be) {
    (void)be;
    return 0;
}

void cpu_add(struct backend *be, float *x, const float *y, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

// Bytes of memory available to this process (MemAvailable), or 0 if unknown.
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

int cpu_check_memory(struct backend *be, uint64_t weight_bytes, uint64_t kv_bytes, uint64_t scratch_bytes,
                     int n_ctx) {
    (void)be;
    (void)weight_bytes; // the weights stay in the file's mapping, shared with the page cache
    const uint64_t avail = mem_available();
    if (!avail || kv_bytes + scratch_bytes <= avail) return 0;
    const uint64_t per_pos = n_ctx > 0 ? kv_bytes / (uint64_t)n_ctx : 0;
    const uint64_t fit = per_pos && avail > scratch_bytes ? (avail - scratch_bytes) / 2 / per_pos : 0;
    return st_fail("-c %d needs %.2f GiB of KV cache and %.2f GiB of scratch but only %.2f GiB of "
                   "memory is available; use -c %" PRIu64 " or less",
                   n_ctx, kv_bytes / 1073741824.0, scratch_bytes / 1073741824.0, avail / 1073741824.0, fit);
}
