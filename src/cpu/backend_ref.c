// backend_ref.c: the reference backend — plain scalar C, double accumulation,
// one thread, written straight from each op's contract in backend.h. Every
// other backend's ops are checked against these, so this file shares no op
// code with them but get_rows, which is the quant formats' dequantize (checked
// on its own against the gguf package by tests/test_quant.c), and the RoPE
// angles of model/rope.c (checked against their closed form by
// tests/test_ops.c). The op harness does not count an op a backend shares
// with the reference as checked.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_ops.h"
#include "model/rope.h"
#include "util.h"

static void *ref_alloc(struct backend *be, size_t bytes) {
    (void)be;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) st_fail("cannot allocate %zu bytes of host memory", bytes);
    return p;
}

static void ref_release(struct backend *be, void *buf) {
    (void)be;
    free(buf);
}

static void ref_copy(struct backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memmove(dst, src, bytes);
}

static void ref_rms_norm(struct backend *be, const struct weight *w, const float *x, float *out, int n,
                         int dim, float eps) {
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

// y (n, rows) for the rows of one matrix starting at `data`.
static void ref_product(const struct weight *w, const void *data, const float *x, size_t x_stride, float *y,
                        size_t y_stride, int n) {
    const struct quant_traits *qt = quant_get(w->type);
    float *row = st_xmalloc(sizeof(float) * (size_t)w->cols);
    for (int64_t r = 0; r < w->rows; r++) {
        qt->dequantize_row((const char *)data + (size_t)r * w->row_bytes, row, w->cols);
        for (int t = 0; t < n; t++) {
            const float *xt = x + (size_t)t * x_stride;
            double acc = 0;
            for (int64_t c = 0; c < w->cols; c++) acc += (double)row[c] * xt[c];
            y[(size_t)t * y_stride + r] = (float)acc;
        }
    }
    free(row);
}

static void ref_matmul(struct backend *be, const struct weight *w, const float *x, float *y, int n) {
    (void)be;
    ref_product(w, w->data, x, (size_t)w->cols, y, (size_t)w->rows, n);
}

static void ref_add_bias(struct backend *be, const struct weight *b, float *x, int n, int dim) {
    (void)be;
    const float *bv = b->data;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dim; j++)
            x[(size_t)i * dim + j] = (float)((double)x[(size_t)i * dim + j] + bv[j]);
}

static void ref_rope(struct backend *be, float *x, const struct batch_rows *r, int n_head, int head_dim,
                     const struct rope_params *rp) {
    (void)be;
    for (int t = 0; t < r->n; t++)
        for (int i = 0; i < rp->n_dims / 2; i++) {
            double c, s;
            rope_cos_sin(r->pos[t], i, rp, &c, &s);
            int a, b;
            rope_pair(rp, i, &a, &b);
            for (int h = 0; h < n_head; h++) {
                float *xh = x + ((size_t)t * n_head + h) * head_dim;
                const double x0 = xh[a], x1 = xh[b];
                xh[a] = (float)(x0 * c - x1 * s);
                xh[b] = (float)(x0 * s + x1 * c);
            }
        }
}

// Element i of a cache of be's KV type, and storing x there (a half rounded to
// nearest, ties to even).
static float kv_get(const struct backend *be, const void *c, size_t i) {
    return be->kv_type == GGML_TYPE_F16 ? st_fp16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

static void kv_put(const struct backend *be, void *c, size_t i, float x) {
    if (be->kv_type == GGML_TYPE_F16)
        ((uint16_t *)c)[i] = st_f32_to_fp16(x);
    else
        ((float *)c)[i] = x;
}

static void ref_kv_store(struct backend *be, void *k_cache, void *v_cache, const float *k, const float *v,
                         const struct batch_rows *r, int kv_dim) {
    for (int t = 0; t < r->n; t++) {
        const size_t row = (size_t)r->base[t] + (size_t)r->pos[t];
        for (int i = 0; i < kv_dim; i++) {
            kv_put(be, k_cache, row * kv_dim + i, k[(size_t)t * kv_dim + i]);
            kv_put(be, v_cache, row * kv_dim + i, v[(size_t)t * kv_dim + i]);
        }
    }
}

static void ref_attention(struct backend *be, const float *q, const void *k_cache, const void *v_cache,
                          float *out, const struct batch_rows *r, int n_head, int n_head_kv, int head_dim,
                          const struct attn_params *ap) {
    const int group = n_head / n_head_kv;
    const int kv_dim = n_head_kv * head_dim;
    double *s = st_xmalloc(sizeof(double) * (size_t)r->n_kv);
    double *acc = st_xmalloc(sizeof(double) * (size_t)head_dim);
    for (int t = 0; t < r->n; t++) {
        const int p = r->pos[t];
        const size_t base = (size_t)r->base[t] * kv_dim;
        const int j0 = ap->window > 0 && p - ap->window + 1 > 0 ? p - ap->window + 1 : 0;
        for (int h = 0; h < n_head; h++) {
            const float *qh = q + ((size_t)t * n_head + h) * head_dim;
            const int kvh = h / group;
            double mx = -INFINITY;
            for (int j = j0; j <= p; j++) {
                const size_t kj = base + (size_t)j * kv_dim + (size_t)kvh * head_dim;
                double d = 0;
                for (int c = 0; c < head_dim; c++) d += (double)qh[c] * kv_get(be, k_cache, kj + (size_t)c);
                d *= ap->scale;
                if (ap->softcap > 0) d = ap->softcap * tanh(d / ap->softcap);
                s[j] = d;
                if (d > mx) mx = d;
            }
            double sum = 0;
            for (int j = j0; j <= p; j++) sum += s[j] = exp(s[j] - mx);
            for (int c = 0; c < head_dim; c++) acc[c] = 0;
            for (int j = j0; j <= p; j++) {
                const size_t vj = base + (size_t)j * kv_dim + (size_t)kvh * head_dim;
                for (int c = 0; c < head_dim; c++) acc[c] += s[j] * kv_get(be, v_cache, vj + (size_t)c);
            }
            float *oh = out + ((size_t)t * n_head + h) * head_dim;
            for (int c = 0; c < head_dim; c++) oh[c] = (float)(acc[c] / sum);
        }
    }
    free(s);
    free(acc);
}

static void ref_glu(struct backend *be, enum glu_act act, const float *g, const float *u, float *out, int n,
                    int dim, int stride) {
    (void)be;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dim; j++) {
            const double x = g[(size_t)i * stride + j], y = u[(size_t)i * stride + j];
            // GELU's tanh form 0.5·x·(1 + tanh v) as x / (1 + e^(−2v)), the same
            // function without the cancellation of 1 + tanh v for negative x
            const double a = act == GLU_SILU
                                 ? x / (1.0 + exp(-x))
                                 : x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
            out[(size_t)i * dim + j] = (float)(a * y);
        }
}

static void ref_add(struct backend *be, float *x, const float *y, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)x[i] + y[i]);
}

static void ref_scale(struct backend *be, float *x, int64_t n, float s) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * s);
}

static void ref_softcap(struct backend *be, float *x, int64_t n, float cap) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] = (float)(cap * tanh((double)x[i] / cap));
}

static void ref_moe_route(struct backend *be, const float *logits, int n, const struct moe_params *mp,
                          int32_t *ids, float *weights) {
    (void)be;
    const int ne = mp->n_expert, k = mp->n_used;
    double *g = st_xmalloc(sizeof(double) * (size_t)ne);
    for (int t = 0; t < n; t++) {
        const float *l = logits + (size_t)t * ne;
        if (mp->gating == MOE_GATING_SOFTMAX) {
            double mx = -INFINITY, sum = 0;
            for (int e = 0; e < ne; e++) mx = fmax(mx, l[e]);
            for (int e = 0; e < ne; e++) sum += g[e] = exp(l[e] - mx);
            for (int e = 0; e < ne; e++) g[e] /= sum;
        } else {
            for (int e = 0; e < ne; e++) g[e] = 1.0 / (1.0 + exp(-(double)l[e]));
        }
        // k passes of selection: the largest value not yet taken, lowest index on ties
        double sel = 0;
        for (int s = 0; s < k; s++) {
            int best = -1;
            for (int e = 0; e < ne; e++) {
                bool taken = false;
                for (int r = 0; r < s; r++) taken |= ids[(size_t)t * k + r] == e;
                if (!taken && (best < 0 || g[e] > g[best])) best = e;
            }
            ids[(size_t)t * k + s] = best;
            sel += g[best];
        }
        for (int s = 0; s < k; s++) {
            double w = g[ids[(size_t)t * k + s]];
            if (mp->norm) w /= fmax(sel, 6.103515625e-5); // llama.cpp's floor on the sum
            weights[(size_t)t * k + s] = (float)(w * mp->scale);
        }
    }
    free(g);
}

static void ref_matmul_id(struct backend *be, const struct weight *w, const float *x, int x_slots,
                          const int32_t *ids, int k, float *y, int n) {
    (void)be;
    const size_t expert_bytes = (size_t)w->rows * w->row_bytes;
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            const int e = ids[(size_t)t * k + s];
            const float *xr = x + ((size_t)t * x_slots + (x_slots > 1 ? s : 0)) * w->cols;
            ref_product(w, (const char *)w->data + (size_t)e * expert_bytes, xr, 0,
                        y + ((size_t)t * k + s) * w->rows, 0, 1);
        }
}

static void ref_moe_combine(struct backend *be, const float *y, const float *weights, int n, int k, int dim,
                            float *out) {
    (void)be;
    for (int t = 0; t < n; t++)
        for (int j = 0; j < dim; j++) {
            double acc = 0;
            for (int s = 0; s < k; s++)
                acc += (double)weights[(size_t)t * k + s] * y[((size_t)t * k + s) * dim + j];
            out[(size_t)t * dim + j] = (float)acc;
        }
}

static int ref_prepare_weight(struct backend *be, const struct weight *w) {
    (void)be;
    (void)w;
    return 0;
}

static void ref_release_weight(struct backend *be, const struct weight *w) {
    (void)be;
    (void)w;
}

static int ref_sync(struct backend *be) {
    (void)be;
    return 0;
}

static void ref_free(struct backend *be) { free(be); }

struct backend *backend_cpu_ref_init(void) {
    struct backend *be = st_xcalloc(1, sizeof *be);
    be->name = "cpu-ref";
    be->caps = BACKEND_CAP_HOST | BACKEND_CAP_REFERENCE;
    be->kv_type = GGML_TYPE_F16;
    be->kv_types = 1u << GGML_TYPE_F32 | 1u << GGML_TYPE_F16;
    be->check_memory = cpu_check_memory;
    be->free = ref_free;
    be->alloc = ref_alloc;
    be->release = ref_release;
    be->upload = ref_copy;
    be->download = ref_copy;
    be->prepare_weight = ref_prepare_weight;
    be->release_weight = ref_release_weight;
    be->get_rows = cpu_get_rows; // dequantize_row itself: nothing of the reference's own
    be->rms_norm = ref_rms_norm;
    be->matmul = ref_matmul;
    be->add_bias = ref_add_bias;
    be->rope = ref_rope;
    be->kv_store = ref_kv_store;
    be->attention = ref_attention;
    be->glu = ref_glu;
    be->add = ref_add;
    be->scale = ref_scale;
    be->softcap = ref_softcap;
    be->moe_route = ref_moe_route;
    be->matmul_id = ref_matmul_id;
    be->moe_combine = ref_moe_combine;
    be->sync = ref_sync;
    return be;
}
