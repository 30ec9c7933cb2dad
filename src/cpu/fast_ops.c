// fast_ops.c: the fast CPU backend's element-wise and routing ops, in float
// on the calling thread (they move little data next to the matrix products);
// backend.h has their contracts, backend_ref.c their reference forms.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_ops.h"
#include "util.h"

void cpu_add_bias(struct backend *be, const struct weight *b, float *x, int n, int dim) {
    (void)be;
    const float *bv = b->data;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dim; j++) x[(size_t)i * dim + j] += bv[j];
}

void cpu_scale(struct backend *be, float *x, int64_t n, float s) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_softcap(struct backend *be, float *x, int64_t n, float cap) {
    (void)be;
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}

void cpu_moe_route(struct backend *be, const float *logits, int n, const struct moe_params *mp, int32_t *ids,
                   float *weights) {
    (void)be;
    const int ne = mp->n_expert, k = mp->n_used;
    float *g = st_xmalloc(sizeof(float) * (size_t)ne);
    for (int t = 0; t < n; t++) {
        const float *l = logits + (size_t)t * ne;
        if (mp->gating == MOE_GATING_SOFTMAX) {
            float mx = -INFINITY, sum = 0;
            for (int e = 0; e < ne; e++) mx = fmaxf(mx, l[e]);
            for (int e = 0; e < ne; e++) sum += g[e] = expf(l[e] - mx);
            const float inv = 1.0f / sum;
            for (int e = 0; e < ne; e++) g[e] *= inv;
        } else {
            for (int e = 0; e < ne; e++) g[e] = 1.0f / (1.0f + expf(-l[e]));
        }
        int32_t *it = ids + (size_t)t * k;
        float *wt = weights + (size_t)t * k;
        // insertion into a list kept sorted best first (k is small: 1 .. 16), by
        // the logits: the gate is increasing in them, and they do not round two
        // experts to one value as float sigmoids near 1 do (lowest index on ties)
        int m = 0;
        for (int e = 0; e < ne; e++) {
            if (m == k && !(l[e] > l[it[k - 1]])) continue;
            int pos = m < k ? m++ : k - 1;
            while (pos > 0 && l[e] > l[it[pos - 1]]) {
                it[pos] = it[pos - 1];
                pos--;
            }
            it[pos] = e;
        }
        float sel = 0;
        for (int s = 0; s < k; s++) sel += wt[s] = g[it[s]];
        const float f = mp->norm ? mp->scale / fmaxf(sel, 6.103515625e-5f) : mp->scale;
        for (int s = 0; s < k; s++) wt[s] *= f;
    }
    free(g);
}

void cpu_moe_combine(struct backend *be, const float *y, const float *weights, int n, int k, int dim,
                     float *out) {
    (void)be;
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * dim;
        const float *yt = y + (size_t)t * k * dim;
        const float w0 = weights[(size_t)t * k];
        for (int j = 0; j < dim; j++) o[j] = w0 * yt[j];
        for (int s = 1; s < k; s++) {
            const float ws = weights[(size_t)t * k + s];
            for (int j = 0; j < dim; j++) o[j] += ws * yt[(size_t)s * dim + j];
        }
    }
}
