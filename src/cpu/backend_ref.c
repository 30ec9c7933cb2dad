// backend_ref.c: the reference backend — plain scalar C, double accumulation,
// one thread. Every other backend's ops are checked against these.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_ops.h"
#include "util.h"

static void *ref_alloc(struct backend *be, size_t bytes) {
    (void)be;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) st_fail("cannot allocate %zu bytes of host memory", bytes);
    return p;
}





static void ref_rms_norm(struct backend *be, const struct weight *w, const float *x, float *out,
                         int n, int dim, float eps) {
    (void)be;
    const float *g = w->data;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        double scale = 1.0 / sqrt(ss / dim + eps);
        for (int j = 0; j < dim; j++) out[(size_t)i * dim + j] = (float)(xi[j] * scale * g[j]);
    }
}

static void ref_matmul(struct backend *be, const struct weight *w, const float *x, float *y, int n) {
    (void)be;
    const struct quant_traits *qt = quant_get(w->type);
    float *row = st_xmalloc(sizeof(float) * (size_t)w->cols);
    for (int64_t r = 0; r < w->rows; r++) {
        qt->dequantize_row((const char *)w->data + (size_t)r * w->row_bytes, row, w->cols);
        for (int t = 0; t < n; t++) {
            const float *xt = x + (size_t)t * w->cols;
            double acc = 0;
            for (int64_t c = 0; c < w->cols; c++) acc += (double)row[c] * xt[c];
            y[(size_t)t * w->rows + r] = (float)acc;
        }
    }
    free(row);
}

static void ref_rope(struct backend *be, float *x, int n, int n_head, int head_dim, int pos0,
                     const struct rope_params *rp) {
    (void)be;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_head; h++)
            cpu_rope_head(x + ((size_t)t * n_head + h) * head_dim, pos0 + t, rp);
}


static void ref_attention(struct backend *be, const float *q, const float *k_cache,
                          const float *v_cache, float *out, int n, int pos0, int n_head,
                          int n_head_kv, int head_dim) {
    (void)be;
    const int group = n_head / n_head_kv;
    const int kv_dim = n_head_kv * head_dim;
    const double scale = 1.0 / sqrt((double)head_dim);
    double *s = st_xmalloc(sizeof(double) * (size_t)(pos0 + n));
    double *acc = st_xmalloc(sizeof(double) * (size_t)head_dim);
    for (int t = 0; t < n; t++) {
        const int n_kv = pos0 + t + 1;
        for (int h = 0; h < n_head; h++) {
            const float *qh = q + ((size_t)t * n_head + h) * head_dim;
            const int kvh = h / group;
            double mx = -INFINITY;
            for (int j = 0; j < n_kv; j++) {
                const float *kj = k_cache + (size_t)j * kv_dim + (size_t)kvh * head_dim;
                double d = 0;
                for (int c = 0; c < head_dim; c++) d += (double)qh[c] * kj[c];
                s[j] = d * scale;
                if (s[j] > mx) mx = s[j];
            }
            double sum = 0;
            for (int j = 0; j < n_kv; j++) sum += s[j] = exp(s[j] - mx);
            for (int c = 0; c < head_dim; c++) acc[c] = 0;
            for (int j = 0; j < n_kv; j++) {
                const float *vj = v_cache + (size_t)j * kv_dim + (size_t)kvh * head_dim;
                for (int c = 0; c < head_dim; c++) acc[c] += s[j] * vj[c];
            }
            float *oh = out + ((size_t)t * n_head + h) * head_dim;
            for (int c = 0; c < head_dim; c++) oh[c] = (float)(acc[c] / sum);
        }
    }
    free(s);
    free(acc);
}

static void ref_swiglu(struct backend *be, float *gate, const float *up, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) {
        double g = gate[i];
        gate[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
    }
}



static void ref_free(struct backend *be) { free(be); }

struct backend *backend_cpu_ref_init(void) {
    struct backend *be = st_xcalloc(1, sizeof *be);
    be->name = "cpu-ref";
    be->caps = BACKEND_CAP_HOST | BACKEND_CAP_REFERENCE;
    be->check_memory = cpu_check_memory;
    be->free = ref_free;
    be->alloc = ref_alloc;
    be->release = cpu_release;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->prepare_weight = cpu_prepare_weight;
    be->release_weight = cpu_release_weight;
    be->get_rows = cpu_get_rows;
    be->rms_norm = ref_rms_norm;
    be->matmul = ref_matmul;
    be->rope = ref_rope;
    be->kv_store = cpu_kv_store;
    be->attention = ref_attention;
    be->swiglu = ref_swiglu;
    be->add = cpu_add;
    be->sync = cpu_sync;
    return be;
}
