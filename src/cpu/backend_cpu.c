// backend_cpu.c: the fast CPU backend.
//
// matmul: weights of the types with repacked kernels (Q4_0, Q4_1, Q8_0, Q4_K,
// Q6_K) are repacked once by prepare_weight into row-interleaved groups and
// multiplied by register-tiled integer kernels chosen by CPUID (gemm.h). Other
// types quantize each activation row once to the weight type's vec_dot_type
// (Q8_0, Q8_1 or Q8_K blocks; float rows stay float) and compute per-row integer
// dot products; threads take chunks of weight rows, and each chunk runs over
// every token of the batch while its rows sit in L1. Attention splits (token,
// head) pairs across threads. Small element-wise ops run on the calling thread.
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cpu/attention.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemm.h"
#include "cpu/hugemem.h"
#include "cpu/threadpool.h"
#include "cpu/vec_ops.h"
#include "model/rope.h"
#include "util.h"

#define ROW_GROUP 8  // weight rows that share one pass over the activations
#define ROW_CHUNK 32 // weight rows a thread claims at a time

struct cpu {
    struct threadpool *tp;
    struct gemm_cache *gemm; // repacked weights, by their GGUF data
    enum gemm_isa isa;       // the repacked kernels this CPU runs
    void *gemm_act;          // their quantized activations (64-byte aligned)
    size_t gemm_act_cap;
    void *scratch; // quantized activations
    size_t scratch_cap;
    float *att_scratch; // the plain loop's scores [n_threads][n_kv], or the fast kernel's scratch
    size_t att_cap;
    struct att_run *runs; // the batch's runs for the fast kernel
    size_t runs_cap;
    // RoPE angle table for the rows of the current batch
    float *rope_cos, *rope_sin; // [rope_n][n_dims/2]
    int32_t *rope_pos;          // [rope_n] the positions it holds
    int rope_n, rope_cap;
    struct rope_params rope_key;
};

static struct cpu *cpu_of(struct backend *be) { return be->impl; }

static void *grow(void **buf, size_t *cap, size_t need) {
    if (need > *cap) {
        free(*buf);
        *buf = st_xmalloc(need);
        *cap = need;
    }
    return *buf;
}

// --- memory ----------------------------------------------------------------------

static void *cpu_alloc(struct backend *be, size_t bytes) {
    (void)be;
    return hugemem_buffer(bytes);
}

// --- matmul ----------------------------------------------------------------------

struct mm_job {
    const struct weight *w;
    quant_vec_dot_fn dot;
    const char *act; // n rows of act_bytes
    size_t act_bytes;
    float *y; // (n, w->rows)
    int n;
    atomic_long next; // next unclaimed row
};

static void mm_worker(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    struct mm_job *j = arg;
    const struct weight *w = j->w;
    for (;;) {
        long r0 = atomic_fetch_add(&j->next, ROW_CHUNK);
        if (r0 >= w->rows) break;
        long r1 = r0 + ROW_CHUNK < w->rows ? r0 + ROW_CHUNK : w->rows;
        for (long g = r0; g < r1; g += ROW_GROUP) {
            long g1 = g + ROW_GROUP < r1 ? g + ROW_GROUP : r1;
            for (int t = 0; t < j->n; t++) {
                const void *a = j->act + (size_t)t * j->act_bytes;
                float *yt = j->y + (size_t)t * w->rows;
                for (long r = g; r < g1; r++)
                    yt[r] = j->dot(w->cols, (const char *)w->data + (size_t)r * w->row_bytes, a);
            }
        }
    }
}

struct quant_job {
    quant_quantize_fn q;
    const float *x;
    char *out;
    int64_t cols;
    size_t out_bytes;
    int n;
};

static void quant_worker(void *arg, int ith, int nth) {
    struct quant_job *j = arg;
    for (int t = ith; t < j->n; t += nth)
        j->q(j->x + (size_t)t * j->cols, j->out + (size_t)t * j->out_bytes, j->cols);
}

// The n activation rows x (n, cols) as the weight type's dot products take
// them: the float rows themselves, or quantized once to vec_dot_type (in the
// backend's scratch, threads sharing the rows); *row_bytes is their stride.
static const char *activations(struct cpu *c, const struct quant_traits *qt, const float *x, int n,
                               int64_t cols, size_t *row_bytes) {
    if (qt->vec_dot_type == GGML_TYPE_F32) {
        *row_bytes = sizeof(float) * (size_t)cols;
        return (const char *)x;
    }
    *row_bytes = quant_row_size(qt->vec_dot_type, cols);
    char *buf = grow(&c->scratch, &c->scratch_cap, *row_bytes * (size_t)n);
    struct quant_job qj = {quant_from_float(qt->vec_dot_type), x, buf, cols, *row_bytes, n};
    if (n > 1)
        threadpool_run(c->tp, quant_worker, &qj);
    else
        quant_worker(&qj, 0, 1);
    return buf;
}

// The repacked weights live in this backend's own memory, next to the KV cache
// and scratch (the file's mapping stays too, but the kernel may drop its pages).
static int cpu_fast_check_memory(struct backend *be, uint64_t weight_bytes, uint64_t kv_bytes,
                                 uint64_t scratch_bytes, int n_ctx) {
    if (!cpu_check_memory(be, weight_bytes, kv_bytes, scratch_bytes + weight_bytes, n_ctx)) return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st_last_error());
    return st_fail("the CPU backend keeps a repacked copy of the %.2f GiB of weights (counted in the "
                   "scratch below): %s",
                   weight_bytes / 1073741824.0, msg);
}

static int cpu_fast_prepare_weight(struct backend *be, const struct weight *w) {
    struct cpu *c = cpu_of(be);
    return gemm_cache_add(c->gemm, c->tp, w);
}

static void cpu_fast_release_weight(struct backend *be, const struct weight *w) {
    gemm_cache_remove(cpu_of(be)->gemm, w->data);
}

// The repacked copy of w, or NULL when w's products take the per-row path.
static const struct gemm_weight *repacked(const struct cpu *c, const struct weight *w) {
    const struct gemm_weight *gw = gemm_cache_find(c->gemm, w->data);
    return gw && gw->type == w->type && gw->rows == w->rows && gw->cols == w->cols ? gw : NULL;
}

static void cpu_matmul(struct backend *be, const struct weight *w, const float *x, float *y, int n) {
    struct cpu *c = cpu_of(be);
    const struct gemm_weight *gw = repacked(c, w);
    if (gw) {
        gemm_matmul(c->tp, c->isa, gw, x, y, n, &c->gemm_act, &c->gemm_act_cap);
        return;
    }
    const struct quant_traits *qt = quant_get(w->type);
    struct mm_job j = {.w = w, .dot = qt->vec_dot, .y = y, .n = n};
    j.act = activations(c, qt, x, n, w->cols, &j.act_bytes);
    atomic_init(&j.next, 0);
    threadpool_run(c->tp, mm_worker, &j);
}

// Whether every one of the n_w weights is repacked (into gw) with cols columns.
static bool all_repacked(const struct cpu *c, const struct weight *const *w, int n_w, int64_t cols,
                         const struct gemm_weight **gw) {
    bool all = n_w <= GEMM_MAX_PRODUCTS;
    for (int i = 0; all && i < n_w; i++) all = (gw[i] = repacked(c, w[i])) && w[i]->cols == cols;
    return all;
}

static void cpu_matmul_multi(struct backend *be, const struct weight *const *w, int n_w, const float *x,
                             float *const *y, int n) {
    struct cpu *c = cpu_of(be);
    const struct gemm_weight *gw[GEMM_MAX_PRODUCTS];
    if (all_repacked(c, w, n_w, w[0]->cols, gw)) {
        gemm_matmul_multi(c->tp, c->isa, gw, n_w, x, NULL, y, n, &c->gemm_act, &c->gemm_act_cap);
        return;
    }
    for (int i = 0; i < n_w; i++) cpu_matmul(be, w[i], x, y[i], n);
}

// --- expert products ---------------------------------------------------------------
// One expert at a time: the (token, slot) pairs routed to it share one pass
// over its rows, threads claiming chunks of rows as in cpu_matmul.

struct mmid_job {
    const struct weight *w;
    quant_vec_dot_fn dot;
    const char *rows; // the expert's first row
    const char *act;  // activation rows of act_bytes
    size_t act_bytes;
    const int *pair_act;  // [n_pairs] activation row of each pair
    float *const *pair_y; // [n_pairs] output row (w->rows) of each pair
    int n_pairs;
    atomic_long next;
};

static void mmid_worker(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    struct mmid_job *j = arg;
    const struct weight *w = j->w;
    for (;;) {
        long r0 = atomic_fetch_add(&j->next, ROW_CHUNK);
        if (r0 >= w->rows) break;
        long r1 = r0 + ROW_CHUNK < w->rows ? r0 + ROW_CHUNK : w->rows;
        for (int p = 0; p < j->n_pairs; p++) {
            const void *a = j->act + (size_t)j->pair_act[p] * j->act_bytes;
            for (long r = r0; r < r1; r++)
                j->pair_y[p][r] = j->dot(w->cols, j->rows + (size_t)r * w->row_bytes, a);
        }
    }
}

static void cpu_matmul_id(struct backend *be, const struct weight *w, const float *x, int x_slots,
                          const int32_t *ids, int k, float *y, int n) {
    struct cpu *c = cpu_of(be);
    const struct quant_traits *qt = quant_get(w->type);
    const int n_act = n * x_slots;
    struct mmid_job j = {.w = w, .dot = qt->vec_dot};
    j.act = activations(c, qt, x, n_act, w->cols, &j.act_bytes);
    const size_t n_pairs = (size_t)n * k;
    int *pair_act = st_xmalloc(sizeof(int) * n_pairs);
    float **pair_y = st_xmalloc(sizeof(float *) * n_pairs);
    const size_t expert_bytes = (size_t)w->rows * w->row_bytes;
    for (int e = 0; e < w->n_expert; e++) {
        int np = 0;
        for (int t = 0; t < n; t++)
            for (int sl = 0; sl < k; sl++)
                if (ids[(size_t)t * k + sl] == e) {
                    pair_act[np] = t * x_slots + (x_slots > 1 ? sl : 0);
                    pair_y[np] = y + ((size_t)t * k + sl) * w->rows;
                    np++;
                }
        if (!np) continue;
        j.rows = (const char *)w->data + (size_t)e * expert_bytes;
        j.pair_act = pair_act;
        j.pair_y = pair_y;
        j.n_pairs = np;
        atomic_init(&j.next, 0);
        threadpool_run(c->tp, mmid_worker, &j);
    }
    free(pair_act);
    free(pair_y);
}

// --- attention -------------------------------------------------------------------

static float dot_f32(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

// Cache row k of a KV head (hd elements from c at element offset off) as floats:
// c itself when it holds floats, else its halves widened into tmp.
static const float *kv_row(const void *c, size_t off, int hd, bool f16, float *tmp) {
    if (!f16) return (const float *)c + off;
    quant_get(GGML_TYPE_F16)->dequantize_row((const uint16_t *)c + off, tmp, hd);
    return tmp;
}

// The plain loop (CPUs without AVX-512): one task per (row, head).
struct att_job {
    struct cpu *c;
    const float *q;
    const void *k_cache, *v_cache;
    bool f16;
    float *out;
    const struct batch_rows *r;
    int n_head, n_head_kv, head_dim;
    struct attn_params ap;
};

static void att_worker(void *arg, int ith, int nth) {
    struct att_job *j = arg;
    float *s = j->c->att_scratch + (size_t)ith * ((size_t)j->r->n_kv + (size_t)j->head_dim);
    float *tmp = s + j->r->n_kv; // a cache row widened
    const int group = j->n_head / j->n_head_kv;
    const int kv_dim = j->n_head_kv * j->head_dim;
    const float scale = j->ap.scale, cap = j->ap.softcap;
    for (int task = ith; task < j->r->n * j->n_head; task += nth) {
        const int t = task / j->n_head, h = task % j->n_head;
        const int p = j->r->host_pos[t];
        const int p0 = j->ap.window > 0 && p - j->ap.window + 1 > 0 ? p - j->ap.window + 1 : 0;
        const float *qh = j->q + (size_t)task * j->head_dim;
        const size_t off = (size_t)(h / group) * j->head_dim;
        const size_t base = (size_t)j->r->host_base[t] * kv_dim + off;
        float mx = -INFINITY;
        for (int k = p0; k <= p; k++) {
            const float *kr = kv_row(j->k_cache, base + (size_t)k * kv_dim, j->head_dim, j->f16, tmp);
            float v = dot_f32(qh, kr, j->head_dim) * scale;
            if (cap > 0) v = cap * tanhf(v / cap);
            s[k] = v;
            if (v > mx) mx = v;
        }
        float sum = 0;
        for (int k = p0; k <= p; k++) sum += s[k] = expf(s[k] - mx);
        float *oh = j->out + (size_t)task * j->head_dim;
        memset(oh, 0, sizeof(float) * (size_t)j->head_dim);
        for (int k = p0; k <= p; k++) {
            const float *vp = kv_row(j->v_cache, base + (size_t)k * kv_dim, j->head_dim, j->f16, tmp);
            const float wgt = s[k];
            for (int d = 0; d < j->head_dim; d++) oh[d] += wgt * vp[d];
        }
        const float inv = 1.0f / sum;
        for (int d = 0; d < j->head_dim; d++) oh[d] *= inv;
    }
}

// With AVX-512, attention_avx512 takes the batch as runs of rows of one
// sequence at consecutive positions (a prompt chunk, a decode token), all in
// one call.
static void cpu_attention(struct backend *be, const float *q, const void *k_cache, const void *v_cache,
                          float *out, const struct batch_rows *r, int n_head, int n_head_kv, int head_dim,
                          const struct attn_params *ap) {
    struct cpu *c = cpu_of(be);
    const int nth = threadpool_size(c->tp);
    const bool f16 = be->kv_type == GGML_TYPE_F16;
    if (c->isa < GEMM_ISA_AVX512) {
        grow((void **)&c->att_scratch, &c->att_cap,
             sizeof(float) * ((size_t)r->n_kv + (size_t)head_dim) * (size_t)nth);
        struct att_job j = {c, q, k_cache, v_cache, f16, out, r, n_head, n_head_kv, head_dim, *ap};
        threadpool_run(c->tp, att_worker, &j);
        return;
    }
    grow((void **)&c->runs, &c->runs_cap, sizeof *c->runs * (size_t)r->n);
    int n_runs = 0;
    for (int t = 0, len; t < r->n; t += len) {
        len = batch_run_length(r, t);
        c->runs[n_runs++] = (struct att_run){t, len, r->host_pos[t], r->host_base[t]};
    }
    grow((void **)&c->att_scratch, &c->att_cap,
         sizeof(float) * attention_scratch_floats(nth, c->runs, n_runs, n_head, n_head_kv, head_dim));
    attention_avx512(c->tp, q, k_cache, v_cache, f16, out, c->runs, n_runs, n_head, n_head_kv, head_dim, ap,
                     c->att_scratch);
}

// --- small ops -------------------------------------------------------------------

static void cpu_rms_norm(struct backend *be, const struct weight *w, const float *x, float *out, int n,
                         int dim, float eps) {
    vec_rms_norm(cpu_of(be)->isa >= GEMM_ISA_AVX512, w->data, x, out, n, dim, eps);
}

// The norm taken row by row in the products' quantization job (gemm.h's
// gemm_norm), each row quantized while it is in cache; the plain ops where a
// weight has no repacked kernels.
static void cpu_norm_matmul_multi(struct backend *be, const struct weight *nw, float eps, const float *x,
                                  float *out, int dim, const struct weight *const *w, int n_w,
                                  float *const *y, int n) {
    struct cpu *c = cpu_of(be);
    const struct gemm_weight *gw[GEMM_MAX_PRODUCTS];
    if (all_repacked(c, w, n_w, dim, gw)) {
        const struct gemm_norm norm = {.g = nw->data, .eps = eps, .out = out};
        gemm_matmul_multi(c->tp, c->isa, gw, n_w, x, &norm, y, n, &c->gemm_act, &c->gemm_act_cap);
        return;
    }
    cpu_rms_norm(be, nw, x, out, n, dim, eps);
    cpu_matmul_multi(be, w, n_w, out, y, n);
}

// Fills the angle table for the positions of r's rows unless it already holds them.
static void rope_table(struct cpu *c, const struct batch_rows *r, const struct rope_params *rp) {
    const int half = rp->n_dims / 2, n = r->n;
    if (c->rope_n == n && !memcmp(&c->rope_key, rp, sizeof *rp) &&
        !memcmp(c->rope_pos, r->host_pos, sizeof(int32_t) * (size_t)n))
        return;
    if (n * half > c->rope_cap || !c->rope_pos || n > c->rope_cap) {
        free(c->rope_cos);
        free(c->rope_sin);
        free(c->rope_pos);
        c->rope_cap = n * (half > 1 ? half : 1);
        c->rope_cos = st_xmalloc(sizeof(float) * (size_t)c->rope_cap);
        c->rope_sin = st_xmalloc(sizeof(float) * (size_t)c->rope_cap);
        c->rope_pos = st_xmalloc(sizeof(int32_t) * (size_t)c->rope_cap);
    }
    for (int t = 0; t < n; t++)
        for (int i = 0; i < half; i++) {
            double cs, sn;
            rope_cos_sin(r->host_pos[t], i, rp, &cs, &sn);
            c->rope_cos[t * half + i] = (float)cs;
            c->rope_sin[t * half + i] = (float)sn;
        }
    memcpy(c->rope_pos, r->host_pos, sizeof(int32_t) * (size_t)n);
    c->rope_n = n;
    c->rope_key = *rp;
}

static void cpu_rope(struct backend *be, float *x, const struct batch_rows *r, int n_head, int head_dim,
                     const struct rope_params *rp) {
    struct cpu *c = cpu_of(be);
    rope_table(c, r, rp);
    const int half = rp->n_dims / 2;
    for (int t = 0; t < r->n; t++) {
        const float *cs = c->rope_cos + (size_t)t * half, *sn = c->rope_sin + (size_t)t * half;
        for (int h = 0; h < n_head; h++) {
            float *xh = x + ((size_t)t * n_head + h) * head_dim;
            for (int i = 0; i < half; i++) {
                int a, b;
                rope_pair(rp, i, &a, &b);
                const float x0 = xh[a], x1 = xh[b];
                xh[a] = x0 * cs[i] - x1 * sn[i];
                xh[b] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

static void cpu_glu(struct backend *be, enum glu_act act, const float *g, const float *u, float *out, int n,
                    int dim, int stride) {
    vec_glu(cpu_of(be)->tp, cpu_of(be)->isa >= GEMM_ISA_AVX512, act, g, u, out, n, dim, stride);
}

static void cpu_free(struct backend *be) {
    struct cpu *c = cpu_of(be);
    threadpool_free(c->tp);
    gemm_cache_free(c->gemm);
    free(c->gemm_act);
    free(c->scratch);
    free(c->att_scratch);
    free(c->runs);
    free(c->rope_cos);
    free(c->rope_sin);
    free(c->rope_pos);
    free(c);
    free(be);
}

struct backend *backend_cpu_init(int n_threads) {
    if (n_threads <= 0) n_threads = threadpool_default_threads();
    struct cpu *c = st_xcalloc(1, sizeof *c);
    c->isa = gemm_isa_best(); // before the threads start: AMX permission is asked for here
    c->tp = threadpool_init(n_threads);
    if (!c->tp) {
        free(c);
        return NULL;
    }
    c->gemm = gemm_cache_init();
    struct backend *be = st_xcalloc(1, sizeof *be);
    be->name = "cpu";
    be->caps = BACKEND_CAP_HOST;
    be->kv_type = GGML_TYPE_F16;
    be->kv_types = 1u << GGML_TYPE_F32 | 1u << GGML_TYPE_F16;
    be->check_memory = cpu_fast_check_memory;
    be->impl = c;
    be->free = cpu_free;
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->prepare_weight = cpu_fast_prepare_weight;
    be->release_weight = cpu_fast_release_weight;
    be->get_rows = cpu_get_rows;
    be->rms_norm = cpu_rms_norm;
    be->norm_matmul_multi = cpu_norm_matmul_multi;
    be->matmul = cpu_matmul;
    be->matmul_multi = cpu_matmul_multi;
    be->rope = cpu_rope;
    be->kv_store = cpu_kv_store;
    be->attention = cpu_attention;
    be->glu = cpu_glu;
    be->add_bias = cpu_add_bias;
    be->scale = cpu_scale;
    be->softcap = cpu_softcap;
    be->moe_route = cpu_moe_route;
    be->matmul_id = cpu_matmul_id;
    be->moe_combine = cpu_moe_combine;
    be->add = cpu_add;
    be->sync = cpu_sync;
    return be;
}
