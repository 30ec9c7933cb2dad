// gpu_backend.cu: struct backend (backend.h) on one GPU, over the kernel
// families of src/gpu. Ops are enqueued on one stream in call order; a failure
// (a runtime call, a launch, an argument a kernel cannot take) is recorded once
// as the sticky error that sync() reports.
//
// Quantized weights live on the device in the split layout (repack.cu).
// Products with quantized weights quantize the activations to 8-bit blocks
// first; that result is kept while no other op runs, so the products that
// share an input (q, k, v; gate, up) quantize it once.
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "argmax.h"
#include "attention.h"
#include "bench.h"
#include "common.h"
#include "elementwise.h"
#include "embed.h"
#include "gemv_float.h"
#include "host.h"
#include "mmq.h"
#include "mmvq.h"
#include "moe.h"
#include "norm.h"
#include "quantize.h"
#include "repack.h"
#include "rope.h"

static_assert(GPU_MATVEC_MAX_BATCH <= GPU_MMVQ_MAX_TOKENS, "a decode batch is one matrix x vector launch");

// --- errors ---------------------------------------------------------------------------
// A failure seen by GPU_CHECK (a runtime call, a launch) lands in this thread's
// pending slot (gpu_record_error); every backend entry point then moves it into
// its own sticky error (take_error), so each backend reports its own failures.

static thread_local char tl_error[1024];
static thread_local int tl_error_set;

extern "C" void gpu_record_error(const char *msg) {
    st_fail("%s", msg);       // also this thread's last error, for callers outside a backend
    if (tl_error_set) return; // the first failure explains the rest
    snprintf(tl_error, sizeof tl_error, "%s", msg);
    tl_error_set = 1;
}

// --- state -----------------------------------------------------------------------------

// A RoPE (cos, sin) table on the device: cap positions of rp.n_dims/2 pairs.
#define GPU_ROPE_SLOTS 4
struct gpu_rope_slot {
    float2 *cs; // NULL: free slot
    int cap;
    struct rope_params rp; // what it was built for (factors in ff)
    float *ff;             // host copy of the frequency factors, or NULL
    unsigned used;         // last use, for replacement
};

// A recorded pass (backend.h's graph_begin): seen once, recorded the second
// time, replayed from then on.
#define GPU_GRAPH_SLOTS 64
struct gpu_graph {
    uint64_t key;
    bool used_slot;      // key is set
    bool broken;         // recording it failed: never again
    gpuGraphExec_t exec; // NULL until recorded
    unsigned used;       // last use, for replacement
};

struct gpu_be {
    struct backend be;
    int device;
    int n_sm;
    gpuStream_t stream;
    int tpr;              // threads per row of matrix × vector; 0: per matrix
    int rpw;              // rows per 32 threads of a several-token matrix × vector; 0: per matrix
    int tpg;              // tokens per group of a several-token matrix × vector; 0: per matrix
    bool has_mma;         // the device multiplies half-precision tiles on tensor cores
    bool mma;             // prompt batches' products and attention take the tensor-core form
    int tile_bm, tile_bn; // rows and tokens a block of the tensor-core tiles takes; 0: per product
    bool has_dp4a;        // the device computes dp4a in one instruction
    bool swar;            // one-token products take the SWAR dot product (mmvq.h)
    void **bufs;          // every alloc and prepared weight, freed by free()
    int n_bufs, cap_bufs;
    // activations converted for the products: the integer products' 8-bit
    // blocks, qs (n, cols) then ds, or (q8_half) the tensor-core tiles'
    // halves, h (n, cols) then sc (n)
    int8_t *q8;
    size_t q8_cap;
    const float *q8_src; // what q8 holds while q8_valid
    int q8_n;
    int64_t q8_cols;
    bool q8_valid;
    bool q8_half;
    float *att_part; // attention's partial results
    size_t att_cap;
    float *bench_y; // gpu_bench_matmul's output
    size_t bench_y_cap;
    struct gpu_rope_slot rope[GPU_ROPE_SLOTS]; // RoPE tables by parameters
    unsigned rope_clock;
    struct gpu_graph graphs[GPU_GRAPH_SLOTS]; // recorded passes by key (graph_begin)
    unsigned graph_clock;
    uint64_t graph_replays; // passes replayed so far
    bool graphs_off;        // STRATA_GPU_GRAPHS=0, or the runtime cannot record
    int recording;          // the slot being recorded, or -1
    bool recording_failed;  // an op needed what a recording cannot hold (a buffer to grow)
    // device copies of prepared weights, keyed by their host data (open addressing)
    const void **wkey;
    void **wval;
    int w_cap, w_n;
    // the sticky error: the first failure, reported by sync()
    char error[1024];
    int error_set;
};

// The backend of be, with its GPU made this thread's current one: every op
// enters here, so that backends on several GPUs (a layer split) and calls
// from a thread other than the one that opened the backend (the server's
// worker) reach the right device.
static struct gpu_be *gb(struct backend *be) {
    struct gpu_be *g = (struct gpu_be *)be->impl;
    int cur;
    if (gpuGetDevice(&cur) != gpuSuccess || cur != g->device) (void)gpuSetDevice(g->device);
    return g;
}

// Moves this thread's pending failure into g's sticky error. Returns whether g has failed.
static bool take_error(struct gpu_be *g) {
    if (tl_error_set) {
        if (!g->error_set) {
            snprintf(g->error, sizeof g->error, "%s", tl_error);
            g->error_set = 1;
        }
        tl_error_set = 0;
    }
    return g->error_set;
}

static void op_fail(struct gpu_be *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void op_fail(struct gpu_be *g, const char *fmt, ...) {
    if (g->recording >= 0 && g->recording_failed) return; // the ops run again, unrecorded
    take_error(g);
    if (g->error_set) return; // the first failure explains the rest
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    g->error_set = 1;
}

// --- the weight table ------------------------------------------------------------------

static size_t wslot(const struct gpu_be *g, const void *key) {
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (size_t)(g->w_cap - 1);
}

// The device copy of w, or NULL when w was not prepared on this backend.
static void *wdev(const struct gpu_be *g, const struct weight *w) {
    if (!g->w_cap || !w->data) return NULL;
    for (size_t i = wslot(g, w->data);; i = (i + 1) & (size_t)(g->w_cap - 1)) {
        if (g->wkey[i] == w->data) return g->wval[i];
        if (!g->wkey[i]) return NULL;
    }
}

static void wput(struct gpu_be *g, const void *key, void *val) {
    if (2 * (g->w_n + 1) > g->w_cap) {
        const int old_cap = g->w_cap;
        const void **ok = g->wkey;
        void **ov = g->wval;
        g->w_cap = old_cap ? 2 * old_cap : 256;
        g->wkey = (const void **)calloc((size_t)g->w_cap, sizeof *g->wkey);
        g->wval = (void **)calloc((size_t)g->w_cap, sizeof *g->wval);
        if (!g->wkey || !g->wval) abort(); // bookkeeping of a few pointers: as st_xmalloc does
        g->w_n = 0;
        for (int i = 0; i < old_cap; i++)
            if (ok[i]) wput(g, ok[i], ov[i]);
        free(ok);
        free(ov);
    }
    size_t i = wslot(g, key);
    while (g->wkey[i] && g->wkey[i] != key) i = (i + 1) & (size_t)(g->w_cap - 1);
    if (!g->wkey[i]) g->w_n++;
    g->wkey[i] = key;
    g->wval[i] = val;
}

// Removes key (backward-shift deletion keeps every probe chain whole).
static void wdel(struct gpu_be *g, const void *key) {
    if (!g->w_cap) return;
    const size_t mask = (size_t)(g->w_cap - 1);
    size_t i = wslot(g, key);
    while (g->wkey[i] != key) {
        if (!g->wkey[i]) return;
        i = (i + 1) & mask;
    }
    for (size_t j = (i + 1) & mask; g->wkey[j]; j = (j + 1) & mask) {
        const size_t home = wslot(g, g->wkey[j]);
        // move j back to i when i lies on j's probe path (home .. j, cyclically)
        if (((j - home) & mask) >= ((j - i) & mask)) {
            g->wkey[i] = g->wkey[j];
            g->wval[i] = g->wval[j];
            i = j;
        }
    }
    g->wkey[i] = NULL;
    g->wval[i] = NULL;
    g->w_n--;
}

static const char *wname(const struct weight *w) { return w->name ? w->name : ""; }

// Forgets every recorded pass (they hold buffer addresses).
static void graphs_clear(struct gpu_be *g) {
    for (int i = 0; i < GPU_GRAPH_SLOTS; i++) {
        if (g->graphs[i].exec) (void)gpuGraphExecDestroy(g->graphs[i].exec);
        memset(&g->graphs[i], 0, sizeof g->graphs[i]);
    }
}

// Whether a buffer may be (re)allocated now: not while a pass is being
// recorded (the recording is then abandoned, and its ops run unrecorded).
static bool may_allocate(struct gpu_be *g) {
    if (g->recording < 0) return true;
    g->recording_failed = true;
    return false;
}

// Grows a scratch buffer to at least need bytes; its contents are lost.
static void *grow(struct gpu_be *g, void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return *buf;
    if (!may_allocate(g)) return NULL;
    graphs_clear(g);
    // kernels in flight may still use the old buffer
    if (GPU_CHECK(gpuStreamSynchronize(g->stream))) return NULL;
    if (*buf) (void)gpuFree(*buf);
    *buf = NULL;
    *cap = 0;
    const size_t bytes = need + need / 2;
    if (GPU_CHECK(gpuMalloc(buf, bytes))) return NULL;
    *cap = bytes;
    return *buf;
}

static void track(struct gpu_be *g, void *p) {
    if (g->n_bufs == g->cap_bufs) {
        g->cap_bufs = g->cap_bufs ? 2 * g->cap_bufs : 64;
        void **nb = (void **)realloc(g->bufs, sizeof(void *) * (size_t)g->cap_bufs);
        if (!nb) abort(); // bookkeeping of a few pointers: as st_xmalloc does
        g->bufs = nb;
    }
    g->bufs[g->n_bufs++] = p;
}

// --- memory ----------------------------------------------------------------------------

static void *gb_alloc(struct backend *be, size_t bytes) {
    struct gpu_be *g = gb(be);
    void *p = NULL;
    const gpuError_t e = gpuMalloc(&p, bytes ? bytes : 256);
    if (e != gpuSuccess) {
        (void)gpuGetLastError(); // an allocation failure is the caller's to handle, not sticky
        size_t fr = 0, tot = 0;
        (void)gpuMemGetInfo(&fr, &tot);
        st_fail("GPU %d: cannot allocate %zu bytes (%zu free of %zu): %s", g->device, bytes, fr, tot,
                gpuGetErrorString(e));
        return NULL;
    }
    g->q8_valid = false; // a new buffer may sit where the cached source was
    track(g, p);
    return p;
}

static void gb_release(struct backend *be, void *buf) {
    struct gpu_be *g = gb(be);
    if (!buf) return;
    for (int i = 0; i < g->n_bufs; i++)
        if (g->bufs[i] == buf) {
            g->bufs[i] = g->bufs[--g->n_bufs];
            GPU_CHECK(gpuStreamSynchronize(g->stream));
            graphs_clear(g);
            GPU_CHECK(gpuFree(buf));
            g->q8_valid = false;
            return;
        }
    op_fail(g, "release: %p is not a buffer of this GPU backend", buf);
}

static void gb_upload(struct backend *be, void *dst, const void *src, size_t bytes) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    GPU_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, g->stream));
}

static void gb_download(struct backend *be, void *dst, const void *src, size_t bytes) {
    GPU_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToHost, gb(be)->stream));
}

static void *gb_host_alloc(struct backend *be, size_t bytes) {
    void *p = NULL;
    const gpuError_t e = gpuHostAlloc(&p, bytes ? bytes : 1, gpuHostAllocDefault);
    if (e != gpuSuccess) {
        (void)gpuGetLastError(); // the caller's to handle, not sticky
        st_fail("GPU %d: cannot allocate %zu bytes of page-locked host memory: %s", gb(be)->device, bytes,
                gpuGetErrorString(e));
        return NULL;
    }
    return p;
}

static void gb_host_free(struct backend *be, void *p) {
    (void)be;
    if (p) GPU_CHECK(gpuFreeHost(p));
}

static int gb_prepare_weight(struct backend *be, const struct weight *w) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    if (wdev(g, w)) return 0; // already here (a tied output shares the embedding's data)
    if (!gpu_type_supported(w->type))
        return st_fail("weight %.*s has type %s, which the GPU backend does not compute with; "
                       "run this model on the CPU (--backend cpu)",
                       w->name_len, wname(w), quant_name(w->type));
    struct gpu_qlayout l;
    const bool quantized = gpu_qlayout_of(w->type, &l) == 0;
    if (quantized && (w->cols % l.qk || w->row_bytes != (size_t)(w->cols / l.qk) * l.bytes))
        return st_fail("weight %.*s: %lld columns of %s do not make rows of %zu bytes", w->name_len, wname(w),
                       (long long)w->cols, quant_name(w->type), w->row_bytes);
    const int64_t rows = w->rows * (w->n_expert > 0 ? w->n_expert : 1); // experts stacked
    const size_t bytes = (size_t)rows * w->row_bytes;
    void *dev = gb_alloc(be, gpu_weight_bytes(w->type, rows, w->row_bytes));
    if (!dev) return -1;
    if (!quantized) {
        GPU_CHECK(gpuMemcpyAsync(dev, w->data, bytes, gpuMemcpyHostToDevice, g->stream));
    } else {
        // through a staging buffer of whole blocks, stream-ordered
        const int64_t total = rows * (w->cols / l.qk);
        int64_t chunk = (64 << 20) / l.bytes;
        if (chunk > total) chunk = total;
        void *stage = NULL; // also the scratch of gpu_weight_scale
        size_t stage_bytes = (size_t)chunk * l.bytes;
        if (stage_bytes < GPU_RANGE_PARTS * sizeof(float)) stage_bytes = GPU_RANGE_PARTS * sizeof(float);
        if (GPU_CHECK(gpuMalloc(&stage, stage_bytes))) {
            gb_release(be, dev);
            tl_error_set = 0;
            return st_fail("weight %.*s: cannot allocate its staging buffer: %s", w->name_len, wname(w),
                           tl_error);
        }
        for (int64_t b0 = 0; b0 < total; b0 += chunk) {
            const int64_t nb = total - b0 < chunk ? total - b0 : chunk;
            GPU_CHECK(gpuMemcpyAsync(stage, (const uint8_t *)w->data + (size_t)b0 * l.bytes,
                                     (size_t)nb * l.bytes, gpuMemcpyHostToDevice, g->stream));
            gpu_repack(w->type, rows, w->cols, dev, stage, b0, nb, g->stream);
        }
        gpu_weight_scale(gpu_mat_of(w->type, rows, w->cols, dev), (float *)stage, g->stream);
        GPU_CHECK(gpuStreamSynchronize(g->stream));
        (void)gpuFree(stage);
    }
    if (GPU_CHECK(gpuStreamSynchronize(g->stream)) || tl_error_set) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tl_error);
        tl_error_set = 0;
        gb_release(be, dev);
        return st_fail("weight %.*s: copying it to the GPU failed: %s", w->name_len, wname(w), msg);
    }
    wput(g, w->data, dev);
    return 0;
}

static void gb_release_weight(struct backend *be, const struct weight *w) {
    struct gpu_be *g = gb(be);
    void *dev = wdev(g, w);
    if (!dev) return;
    wdel(g, w->data);
    gb_release(be, dev);
    take_error(g);
}

// --- ops -------------------------------------------------------------------------------

// The device copy of w, or NULL with the failure recorded.
static void *on_device(struct gpu_be *g, const struct weight *w, const char *op) {
    void *dev = wdev(g, w);
    if (!dev)
        op_fail(g, "%s: weight %.*s is not on the GPU (prepare_weight first)", op, w->name_len, wname(w));
    return dev;
}

static void gb_get_rows(struct backend *be, const struct weight *emb, const int32_t *tokens, int n,
                        float *out) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    const void *dev = on_device(g, emb, "get_rows");
    if (!dev) return;
    const gpu_mat m = gpu_mat_of(emb->type, emb->rows, emb->cols, dev);
    if (gpu_get_rows(m, tokens, n, out, g->stream))
        op_fail(g, "get_rows: type %s is not supported", quant_name(emb->type));
    take_error(g);
}

// The 8-bit cache's layout for x (n, cols): qs (n, cols), then ds.
static size_t q8_qs_bytes(int n, int64_t cols) { return ((size_t)n * cols + 255) & ~(size_t)255; }

static void q8_view(const struct gpu_be *g, int n, int64_t cols, gpu_q8 *q) {
    q->qs = g->q8;
    q->ds = (const float2 *)(g->q8 + q8_qs_bytes(n, cols));
    q->cols = cols;
}

// The cache's buffers for the 8-bit form of x (n, cols) in *q, to be written
// now (the cache holds nothing until q8_hold). false when they could not grow.
static bool q8_slot(struct gpu_be *g, int n, int64_t cols, gpu_q8 *q) {
    const size_t ds_bytes = (size_t)n * (cols / 32) * sizeof(float2);
    g->q8_valid = false;
    if (!grow(g, (void **)&g->q8, &g->q8_cap, q8_qs_bytes(n, cols) + ds_bytes)) return false;
    q8_view(g, n, cols, q);
    return true;
}

// The cache holds the 8-bit form (or with half, the half-precision form) of
// x (n, cols) from now on.
static void q8_hold(struct gpu_be *g, const float *x, int n, int64_t cols, bool half) {
    g->q8_src = x;
    g->q8_n = n;
    g->q8_cols = cols;
    g->q8_valid = true;
    g->q8_half = half;
}

static bool q8_holds(const struct gpu_be *g, const float *x, int n, int64_t cols, bool half) {
    return g->q8_valid && g->q8_src == x && g->q8_n == n && g->q8_cols == cols && g->q8_half == half;
}

// The 8-bit form of x (n, cols), quantized now or kept from the op that wrote x.
static bool quantized_input(struct gpu_be *g, const float *x, int n, int64_t cols, gpu_q8 *q) {
    if (q8_holds(g, x, n, cols, false)) {
        q8_view(g, n, cols, q);
        return true;
    }
    if (!q8_slot(g, n, cols, q)) return false;
    gpu_quantize_q8(x, (int8_t *)q->qs, (float2 *)q->ds, n, cols, g->stream);
    q8_hold(g, x, n, cols, false);
    return true;
}

// The half-precision form of x (n, cols) for the tensor-core tiles, in the
// same cache: converted now or kept from the product before.
static bool half_input(struct gpu_be *g, const float *x, int n, int64_t cols, gpu_h16 *h) {
    const size_t h_bytes = ((size_t)n * cols * sizeof(uint16_t) + 255) & ~(size_t)255;
    const bool kept = q8_holds(g, x, n, cols, true);
    if (!kept) {
        g->q8_valid = false;
        if (!grow(g, (void **)&g->q8, &g->q8_cap, h_bytes + (size_t)n * sizeof(float))) return false;
    }
    h->h = (const uint16_t *)g->q8;
    h->sc = (const float *)(g->q8 + h_bytes);
    h->cols = cols;
    if (!kept) {
        gpu_quantize_f16(x, (uint16_t *)h->h, (float *)h->sc, n, cols, g->stream);
        q8_hold(g, x, n, cols, true);
    }
    return true;
}

static void gb_rms_norm(struct backend *be, const struct weight *w, const float *x, float *out, int n,
                        int dim, float eps) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    const void *dev = on_device(g, w, "rms_norm");
    if (!dev) return;
    if (w->type != GGML_TYPE_F32 || w->cols * w->rows != dim) {
        op_fail(g, "rms_norm: weight %.*s is %s with %lld values, not F32 with %d", w->name_len, wname(w),
                quant_name(w->type), (long long)(w->cols * w->rows), dim);
        return;
    }
    // the 8-bit form of out written with it, for the product that usually follows
    gpu_q8 q = {NULL, NULL, dim};
    if (dim % 32 || !q8_slot(g, n, dim, &q)) q.qs = NULL;
    if (gpu_rms_norm(x, (const float *)dev, out, n, dim, eps, (int8_t *)q.qs, (float2 *)q.ds, g->stream))
        q8_hold(g, out, n, dim, false);
    take_error(g);
}

// y[0..n) was just written: the cached 8-bit activations are stale if they
// were made from memory it overlaps.
static void written(struct gpu_be *g, const float *y, size_t n) {
    if (!g->q8_valid) return;
    const char *ys = (const char *)y, *ye = (const char *)(y + n);
    const char *xs = (const char *)g->q8_src, *xe = (const char *)(g->q8_src + (size_t)g->q8_n * g->q8_cols);
    if (ys < xe && xs < ye) g->q8_valid = false;
}

// Whether one-token products of matrices like m take the SWAR dot product.
static bool matvec_swar(const struct gpu_be *g, const gpu_mat &m) {
    return m.rest && g->swar && gpu_mmvq_swar_fits(m.cols);
}

// Threads per row for a matrix × vector of matrices like m with rows rows in all.
static int matvec_tpr(struct gpu_be *g, const gpu_mat &m, int64_t rows) {
    if (g->tpr) return g->tpr;
    const int64_t items = m.rest ? gpu_mmvq_items_per_row(m.type, m.cols) : gpu_cdiv(m.cols, 8);
    return gpu_pick_tpr(items, rows, g->n_sm, matvec_swar(g, m));
}

// y[i] = x · w[i]ᵀ (+= with add) for n_w ≤ GPU_SET_MAX weights of one type and
// width, one launch where a kernel takes them together; the activation cache
// left valid. 0, or -1 for a product the kernels do not take.
static int products(struct gpu_be *g, const struct weight *const *w, int n_w, const float *x, float *const *y,
                    int n, bool add) {
    gpu_mat_set set = {};
    int64_t rows = 0;
    for (int i = 0; i < n_w; i++) {
        set.w[i] = gpu_mat_of(w[i]->type, w[i]->rows, w[i]->cols, wdev(g, w[i]));
        rows += w[i]->rows;
    }
    set.count = n_w;
    const gpu_mat &m = set.w[0];
    if (!m.rest || n > GPU_MATVEC_MAX_BATCH) { // one launch a weight
        gpu_q8 q = {};
        gpu_h16 h = {};
        const bool half = m.rest && g->mma;
        if (half ? !half_input(g, x, n, m.cols, &h) : m.rest && !quantized_input(g, x, n, m.cols, &q))
            return 0; // the error is recorded
        if (half) {   // the tiles take the set in one launch
            for (int i = 0; i < n_w; i++) set.y[i] = y[i];
            return gpu_mmh(set, h, n, add, g->tile_bm, g->tile_bn, g->n_sm, g->stream);
        }
        for (int i = 0; i < n_w; i++) {
            const int rc = m.rest ? gpu_mmq(set.w[i], q, y[i], n, add, g->stream)
                                  : gpu_gemv_float(set.w[i], x, y[i], n,
                                                   matvec_tpr(g, set.w[i], set.w[i].rows), add, g->stream);
            if (rc) return rc;
        }
        return 0;
    }
    gpu_q8 q;
    if (!quantized_input(g, x, n, m.cols, &q)) return 0; // the error is recorded
    for (int i = 0; i < n_w; i++) set.y[i] = y[i];
    int rpw = g->rpw ? g->rpw : gpu_pick_rpw(rows, g->n_sm), tpr = 32;
    const bool swar = n == 1 && matvec_swar(g, m);
    if (n == 1 && (g->tpr || swar))
        tpr = matvec_tpr(g, m, rows);
    else if (n == 1 && g->rpw)
        tpr = 0; // the rows form, as set
    else if (n == 1)
        gpu_pick_matvec(m.type, m.cols, rows, g->n_sm, &tpr, &rpw); // the dp4a form's own choice
    return gpu_mmvq(set, q, n, tpr, rpw, g->tpg ? g->tpg : gpu_pick_tpg(rows, rpw, n, g->n_sm), swar, add,
                    g->stream);
}

static void matmul_fail(struct gpu_be *g, const struct weight *w, int n) {
    op_fail(g, "matmul: weight %.*s (%s, %lld x %lld) with %d tokens is not supported", w->name_len, wname(w),
            quant_name(w->type), (long long)w->rows, (long long)w->cols, n);
}

static void gb_matmul(struct backend *be, const struct weight *w, const float *x, float *y, int n) {
    struct gpu_be *g = gb(be);
    if (!on_device(g, w, "matmul")) return;
    if (products(g, &w, 1, x, &y, n, false)) matmul_fail(g, w, n);
    written(g, y, (size_t)n * w->rows);
    take_error(g);
}

static void gb_matmul_add(struct backend *be, const struct weight *w, const float *x, float *y, int n) {
    struct gpu_be *g = gb(be);
    if (!on_device(g, w, "matmul_add")) return;
    if (products(g, &w, 1, x, &y, n, true)) matmul_fail(g, w, n);
    written(g, y, (size_t)n * w->rows);
    take_error(g);
}

// Consecutive weights of one quantized type go to the kernel together, up to
// GPU_SET_MAX at a time.
static void gb_matmul_multi(struct backend *be, const struct weight *const *w, int n_w, const float *x,
                            float *const *y, int n) {
    struct gpu_be *g = gb(be);
    for (int i = 0; i < n_w; i++)
        if (!on_device(g, w[i], "matmul")) return;
    for (int i = 0; i < n_w;) {
        int k = 1;
        while (i + k < n_w && k < GPU_SET_MAX && w[i + k]->type == w[i]->type && w[i + k]->cols == w[i]->cols)
            k++;
        if (products(g, w + i, k, x, y + i, n, false)) matmul_fail(g, w[i], n);
        i += k;
    }
    for (int i = 0; i < n_w; i++) written(g, y[i], (size_t)n * w[i]->rows);
    take_error(g);
}

// Whether RoPE tables built for a and b are the same (factors by value).
static bool rope_same(const struct rope_params *a, const float *a_ff, const struct rope_params *b) {
    if (a->kind != b->kind || a->n_dims != b->n_dims || a->base != b->base ||
        a->freq_scale != b->freq_scale || a->ext_factor != b->ext_factor ||
        a->attn_factor != b->attn_factor || a->beta_fast != b->beta_fast || a->beta_slow != b->beta_slow ||
        a->n_ctx_orig != b->n_ctx_orig || !a_ff != !b->freq_factors)
        return false;
    return !a_ff || !memcmp(a_ff, b->freq_factors, sizeof(float) * (size_t)(a->n_dims / 2));
}

// The (cos, sin) table for rp covering positions 0 .. pos_end-1, built (on the
// host, in float64) when no slot holds these parameters with enough positions.
// Several slots: a model may alternate RoPE settings layer by layer (Gemma 3).
static const float2 *rope_table(struct gpu_be *g, const struct rope_params *rp, int pos_end) {
    const int half = rp->n_dims / 2;
    struct gpu_rope_slot *slot = NULL;
    for (int i = 0; i < GPU_ROPE_SLOTS && !slot; i++)
        if (g->rope[i].cs && rope_same(&g->rope[i].rp, g->rope[i].ff, rp)) slot = &g->rope[i];
    if (slot && pos_end <= slot->cap) {
        slot->used = ++g->rope_clock;
        return slot->cs;
    }
    if (!may_allocate(g)) return NULL;
    graphs_clear(g);
    int cap = slot ? 2 * slot->cap : 4096;
    if (cap < pos_end) cap = pos_end;
    if (!slot) { // the least recently used slot
        slot = &g->rope[0];
        for (int i = 1; i < GPU_ROPE_SLOTS; i++)
            if (g->rope[i].used < slot->used) slot = &g->rope[i];
    }
    float2 *host = (float2 *)malloc(sizeof(float2) * (size_t)cap * half);
    float *ff = rp->freq_factors ? (float *)malloc(sizeof(float) * (size_t)half) : NULL;
    if (!host || (rp->freq_factors && !ff)) {
        free(host);
        free(ff);
        op_fail(g, "rope: cannot allocate a host table of %d positions", cap);
        return NULL;
    }
    gpu_rope_table(host, cap, rp);
    if (ff) memcpy(ff, rp->freq_factors, sizeof(float) * (size_t)half);
    GPU_CHECK(gpuStreamSynchronize(g->stream)); // the old table may be in use
    if (slot->cs) (void)gpuFree(slot->cs);
    free(slot->ff);
    memset(slot, 0, sizeof *slot);
    if (!GPU_CHECK(gpuMalloc((void **)&slot->cs, sizeof(float2) * (size_t)cap * half)) &&
        // on the backend's stream: a plain gpuMemcpy runs on the legacy stream, which a
        // non-blocking stream does not wait for, and from pageable memory it may return
        // before the copy lands
        !GPU_CHECK(gpuMemcpyAsync(slot->cs, host, sizeof(float2) * (size_t)cap * half, gpuMemcpyHostToDevice,
                                  g->stream)) &&
        !GPU_CHECK(gpuStreamSynchronize(g->stream))) {
        slot->cap = cap;
        slot->rp = *rp;
        slot->rp.freq_factors = NULL; // ff holds them
        slot->ff = ff;
        slot->used = ++g->rope_clock;
    } else {
        if (slot->cs) (void)gpuFree(slot->cs);
        slot->cs = NULL;
        free(ff);
    }
    free(host);
    return slot->cs;
}

// The RoPE table for rp up to position n_kv, or NULL with the error recorded
// (rotated dimensions that do not fit the head, or no room for the table).
static const float2 *rope_dims_table(struct gpu_be *g, const struct rope_params *rp, int head_dim, int n_kv) {
    if (rp->n_dims < 2 || rp->n_dims % 2 || rp->n_dims > head_dim) {
        op_fail(g, "rope: %d rotated dimensions do not fit a head of %d (they must be even, 2 .. head_dim)",
                rp->n_dims, head_dim);
        return NULL;
    }
    return rope_table(g, rp, n_kv);
}

static void gb_rope(struct backend *be, float *x, const struct batch_rows *r, int n_head, int head_dim,
                    const struct rope_params *rp) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    const float2 *cs = rope_dims_table(g, rp, head_dim, r->n_kv);
    if (cs)
        gpu_rope(x, cs, r->pos, r->n, n_head, head_dim, rp->n_dims, rp->kind == ROPE_KIND_NEOX, g->stream);
    take_error(g);
}

static void gb_rope_store(struct backend *be, float *q, float *k, const float *v, void *k_cache,
                          void *v_cache, const struct batch_rows *r, int n_head, int n_head_kv, int head_dim,
                          const struct rope_params *rp) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    const float2 *cs = rope_dims_table(g, rp, head_dim, r->n_kv);
    if (cs)
        gpu_rope_store(q, k, v, k_cache, v_cache, be->kv_type == GGML_TYPE_F16, cs, r->pos, r->base, r->n,
                       n_head, n_head_kv, head_dim, rp->n_dims, rp->kind == ROPE_KIND_NEOX, g->stream);
    take_error(g);
}

static void gb_kv_store(struct backend *be, void *k_cache, void *v_cache, const float *k, const float *v,
                        const struct batch_rows *r, int kv_dim) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    gpu_kv_store(k_cache, v_cache, be->kv_type == GGML_TYPE_F16, k, v, r->pos, r->base, r->n, kv_dim,
                 g->stream);
    take_error(g);
}

// Attention of rows t0 .. t0+n-1 on the row kernel, out's 8-bit form written
// into oq (when oq.qs is not NULL) at the same rows. 0, -1 for arguments the
// kernel refuses, 1 when its scratch could not grow (the error recorded).
static int attention_rows(struct gpu_be *g, const float *q, const void *k_cache, const void *v_cache,
                          float *out, const gpu_q8 &oq, const struct batch_rows *r, int t0, int n, int n_head,
                          int n_head_kv, int head_dim, const struct attn_params *ap) {
    const int splits = gpu_attention_splits(n, r->n_kv, n_head, g->n_sm);
    const size_t need = sizeof(float) * gpu_attention_scratch(n, n_head, head_dim, splits);
    if (need && !grow(g, (void **)&g->att_part, &g->att_cap, need)) return 1;
    const int64_t row = (int64_t)n_head * head_dim;
    int8_t *qs = oq.qs ? (int8_t *)oq.qs + t0 * row : NULL;
    float2 *ds = oq.qs ? (float2 *)oq.ds + t0 * (row / 32) : NULL;
    return gpu_attention(q + t0 * row, k_cache, v_cache, g->be.kv_type == GGML_TYPE_F16, out + t0 * row, qs,
                         ds, g->att_part, r->pos + t0, r->base + t0, n, n_head, n_head_kv, head_dim, splits,
                         *ap, g->stream);
}

// Whether a run of len rows goes to the prompt-run (tile) kernel.
static bool attn_tile_run(int head_dim, int len) {
    return head_dim % 4 == 0 && len >= GPU_ATTN_TILE_MIN_ROWS;
}

// Runs of at least GPU_ATTN_TILE_MIN_ROWS rows (prompt chunks) take the tile
// kernel (its tensor-core form with g->mma, for the head sizes it takes), the
// rows between them (decode tokens) the row kernel, in one launch
// for each stretch: a decode batch is one launch. When the row kernel takes
// the whole batch, it also writes out's 8-bit form for the output product.
static void gb_attention(struct backend *be, const float *q, const void *k_cache, const void *v_cache,
                         float *out, const struct batch_rows *r, int n_head, int n_head_kv, int head_dim,
                         const struct attn_params *ap) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    const int64_t row = (int64_t)n_head * head_dim;
    bool rows_only = true;
    for (int t = 0; t < r->n && rows_only;) {
        const int len = batch_run_length(r, t);
        rows_only = !attn_tile_run(head_dim, len);
        t += len;
    }
    gpu_q8 oq = {NULL, NULL, row};
    if (!rows_only || head_dim % 32 || !q8_slot(g, r->n, row, &oq)) oq.qs = NULL;
    int rc = 0;
    for (int t = 0; t < r->n && !rc;) {
        int len = batch_run_length(r, t);
        if (attn_tile_run(head_dim, len)) {
            rc = gpu_attention_run(q + t * row, k_cache, v_cache, be->kv_type == GGML_TYPE_F16, out + t * row,
                                   r->host_base[t], r->host_pos[t], len, n_head, n_head_kv, head_dim, *ap,
                                   g->mma, g->stream);
            t += len;
            continue;
        }
        int e = t + len; // the stretch of short runs from t
        while (e < r->n) {
            len = batch_run_length(r, e);
            if (attn_tile_run(head_dim, len)) break;
            e += len;
        }
        rc = attention_rows(g, q, k_cache, v_cache, out, oq, r, t, e - t, n_head, n_head_kv, head_dim, ap);
        t = e;
    }
    if (rc < 0)
        op_fail(g,
                "attention: head_dim %d over the GPU limit of %d, or %d heads not in groups of %d "
                "kv heads",
                head_dim, GPU_ATTN_MAX_HEAD_DIM, n_head, n_head_kv);
    if (!rc && oq.qs) q8_hold(g, out, r->n, row, false);
    take_error(g);
}

static void gb_glu(struct backend *be, enum glu_act act, const float *gt, const float *u, float *out, int n,
                   int dim, int stride) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    gpu_q8 q = {NULL, NULL, dim}; // the 8-bit form of out with it, for the down product
    if (dim % 32 || !q8_slot(g, n, dim, &q)) q.qs = NULL;
    if (gpu_glu(act, gt, u, out, n, dim, stride, (int8_t *)q.qs, (float2 *)q.ds, g->stream))
        q8_hold(g, out, n, dim, false);
    take_error(g);
}

static void gb_add_bias(struct backend *be, const struct weight *b, float *x, int n, int dim) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    const void *dev = on_device(g, b, "add_bias");
    if (!dev) return;
    if (b->type != GGML_TYPE_F32 || b->cols * b->rows != dim) {
        op_fail(g, "add_bias: bias %.*s is %s with %lld values, not F32 with %d", b->name_len, wname(b),
                quant_name(b->type), (long long)(b->cols * b->rows), dim);
        return;
    }
    gpu_add_bias(x, (const float *)dev, n, dim, g->stream);
    take_error(g);
}

static void gb_scale(struct backend *be, float *x, int64_t n, float v) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    gpu_scale(x, n, v, g->stream);
    take_error(g);
}

static void gb_softcap(struct backend *be, float *x, int64_t n, float cap) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    gpu_softcap(x, n, cap, g->stream);
    take_error(g);
}

static void gb_moe_route(struct backend *be, const float *logits, int n, const struct moe_params *mp,
                         int32_t *ids, float *weights) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    if (gpu_moe_route(logits, n, *mp, ids, weights, g->stream))
        op_fail(g, "moe_route: %d experts, %d used: the GPU takes 1 to %d experts, at most all used",
                mp->n_expert, mp->n_used, GPU_MOE_MAX_EXPERTS);
    take_error(g);
}

static void gb_matmul_id(struct backend *be, const struct weight *w, const float *x, int x_slots,
                         const int32_t *ids, int k, float *y, int n) {
    struct gpu_be *g = gb(be);
    const void *dev = on_device(g, w, "matmul_id");
    if (!dev) return;
    const gpu_mat m = gpu_mat_of(w->type, w->rows * w->n_expert, w->cols, dev);
    int rc;
    if (!m.rest) {
        rc = gpu_gemv_float_id(m, x, y, ids, n, k, x_slots, w->n_expert, g->stream);
    } else {
        gpu_q8 q;
        if (!quantized_input(g, x, n * x_slots, w->cols, &q)) return; // the error is recorded
        rc = gpu_mmvq_id(m, q, y, ids, n, k, x_slots, w->n_expert, g->stream);
    }
    if (rc)
        op_fail(g, "matmul_id: expert weight %.*s (%s, %d x %lld x %lld) is not supported", w->name_len,
                wname(w), quant_name(w->type), w->n_expert, (long long)w->rows, (long long)w->cols);
    written(g, y, (size_t)n * k * w->rows);
    take_error(g);
}

static void gb_moe_combine(struct backend *be, const float *y, const float *weights, int n, int k, int dim,
                           float *out) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    gpu_moe_combine(y, weights, n, k, dim, out, g->stream);
    take_error(g);
}

static void gb_add(struct backend *be, float *x, const float *y, int64_t n) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    gpu_add(x, y, n, g->stream);
    take_error(g);
}

// --- recorded passes --------------------------------------------------------------------

static int gb_graph_begin(struct backend *be, uint64_t key) {
    struct gpu_be *g = gb(be);
    if (g->graphs_off || g->recording >= 0 || take_error(g)) return BACKEND_GRAPH_NONE;
    struct gpu_graph *gr = NULL, *lru = &g->graphs[0];
    for (int i = 0; i < GPU_GRAPH_SLOTS && !gr; i++) {
        if (g->graphs[i].used_slot && g->graphs[i].key == key) gr = &g->graphs[i];
        if (g->graphs[i].used < lru->used) lru = &g->graphs[i];
    }
    g->q8_valid = false; // a recording must not lean on what came before it
    if (!gr) {           // first sight: run as usual (buffers grow to what the pass needs)
        if (lru->exec) (void)gpuGraphExecDestroy(lru->exec);
        memset(lru, 0, sizeof *lru);
        lru->key = key;
        lru->used_slot = true;
        lru->used = ++g->graph_clock;
        return BACKEND_GRAPH_NONE;
    }
    gr->used = ++g->graph_clock;
    if (gr->broken) return BACKEND_GRAPH_NONE;
    if (gr->exec) {
        GPU_CHECK(gpuGraphLaunch(gr->exec, g->stream));
        take_error(g);
        g->graph_replays++;
        return BACKEND_GRAPH_REPLAYED;
    }
    if (gpuStreamBeginCapture(g->stream, gpuStreamCaptureModeRelaxed) != gpuSuccess) {
        (void)gpuGetLastError(); // this runtime cannot record: plain streams from now on
        g->graphs_off = true;
        return BACKEND_GRAPH_NONE;
    }
    g->recording = (int)(gr - g->graphs);
    g->recording_failed = false;
    return BACKEND_GRAPH_RECORDING;
}

static int gb_graph_end(struct backend *be) {
    struct gpu_be *g = gb(be);
    if (g->recording < 0) return st_fail("graph_end without graph_begin");
    struct gpu_graph *gr = &g->graphs[g->recording];
    g->recording = -1;
    gpuGraph_t graph = NULL;
    const gpuError_t e = gpuStreamEndCapture(g->stream, &graph);
    gpuGraphExec_t exec = NULL;
    bool ok = e == gpuSuccess && graph && !g->recording_failed && !tl_error_set && !g->error_set &&
              gpuGraphInstantiateWithFlags(&exec, graph, 0) == gpuSuccess;
    if (graph) (void)gpuGraphDestroy(graph);
    if (ok) ok = gpuGraphLaunch(exec, g->stream) == gpuSuccess;
    if (!ok) { // nothing ran: the caller enqueues the ops again, unrecorded
        if (exec) (void)gpuGraphExecDestroy(exec);
        (void)gpuGetLastError();
        tl_error_set = 0;                  // a failure to record; an op's own failure recurs unrecorded
        gr->broken = !g->recording_failed; // a buffer that had to grow: record the next time
        g->recording_failed = false;
        g->q8_valid = false;
        return -1;
    }
    gr->exec = exec;
    return 0;
}

static int gb_sync(struct backend *be) {
    struct gpu_be *g = gb(be);
    GPU_CHECK(gpuStreamSynchronize(g->stream));
    if (take_error(g)) return st_fail("%s: %s", be->name, g->error);
    return 0;
}

static int gb_check_memory(struct backend *be, uint64_t weight_bytes, uint64_t kv_bytes,
                           uint64_t scratch_bytes, int n_ctx) {
    return gpu_memory_plan(gb(be)->device, weight_bytes, kv_bytes, n_ctx, scratch_bytes);
}

static void gb_free(struct backend *be) {
    if (!be) return;
    struct gpu_be *g = gb(be);
    (void)gpuStreamSynchronize(g->stream);
    for (int i = 0; i < g->n_bufs; i++) (void)gpuFree(g->bufs[i]);
    free(g->bufs);
    graphs_clear(g);
    void *scratch[] = {g->q8, g->att_part, g->bench_y};
    for (size_t i = 0; i < sizeof scratch / sizeof *scratch; i++)
        if (scratch[i]) (void)gpuFree(scratch[i]);
    for (int i = 0; i < GPU_ROPE_SLOTS; i++) {
        if (g->rope[i].cs) (void)gpuFree(g->rope[i].cs);
        free(g->rope[i].ff);
    }
    free(g->wkey);
    free(g->wval);
    (void)gpuStreamDestroy(g->stream);
    free(g);
}

// --- public entry points -----------------------------------------------------------------

bool gpu_launch_overlap = false;

// Tensor cores for prompt batches where the device has them, unless
// STRATA_GPU_TENSOR_CORES=0.
static bool mma_default(const struct gpu_be *g) {
    return g->has_mma && st_env_switch("STRATA_GPU_TENSOR_CORES", true);
}

struct backend *backend_gpu_init(int device, char *warn, size_t warn_cap) {
    if (warn && warn_cap) warn[0] = 0;
    struct gpu_device_info info;
    if (gpu_device_query(device, &info)) return NULL;
    if (info.policy == GPU_POLICY_UNSUPPORTED) {
        st_fail("GPU %d (%s, %s) is not supported: %s", device, info.name, info.arch, info.note);
        return NULL;
    }
    if (info.policy == GPU_POLICY_UNVALIDATED && warn && warn_cap)
        snprintf(warn, warn_cap, "GPU %d (%s, %s): %s", device, info.name, info.arch, info.note);
    struct gpu_be *g = (struct gpu_be *)calloc(1, sizeof *g);
    if (!g) {
        st_fail("out of host memory");
        return NULL;
    }
    g->device = device;
    g->n_sm = info.n_sm;
    g->has_mma = info.has_mma;
    g->mma = mma_default(g);
    g->has_dp4a = info.has_dp4a;
    g->swar = !g->has_dp4a;
    if (GPU_CHECK(gpuSetDevice(device)) ||
        GPU_CHECK(gpuStreamCreateWithFlags(&g->stream, gpuStreamNonBlocking))) {
        free(g);
        tl_error_set = 0;
        st_fail("GPU %d: cannot create a stream: %s", device, tl_error);
        return NULL;
    }
    struct backend *be = &g->be;
    be->name = gpu_platform_name();
    be->caps = BACKEND_CAP_GPU;
    be->impl = g;
    be->kv_type = GGML_TYPE_F32;
    be->kv_types = 1u << GGML_TYPE_F32 | 1u << GGML_TYPE_F16;
    be->check_memory = gb_check_memory;
    be->release_weight = gb_release_weight;
    be->free = gb_free;
    be->alloc = gb_alloc;
    be->release = gb_release;
    be->upload = gb_upload;
    be->download = gb_download;
    be->host_alloc = gb_host_alloc;
    be->host_free = gb_host_free;
    be->prepare_weight = gb_prepare_weight;
    be->get_rows = gb_get_rows;
    be->rms_norm = gb_rms_norm;
    be->matmul = gb_matmul;
    be->matmul_add = gb_matmul_add;
    be->matmul_multi = gb_matmul_multi;
    be->rope_store = gb_rope_store;
    be->rope = gb_rope;
    be->kv_store = gb_kv_store;
    be->attention = gb_attention;
    be->glu = gb_glu;
    be->add_bias = gb_add_bias;
    be->scale = gb_scale;
    be->softcap = gb_softcap;
    be->moe_route = gb_moe_route;
    be->matmul_id = gb_matmul_id;
    be->moe_combine = gb_moe_combine;
    be->add = gb_add;
    be->sync = gb_sync;
    be->graph_begin = gb_graph_begin;
    be->graph_end = gb_graph_end;
    // launches overlap where the device's code waits for the kernel before
    // (compat.h), unless STRATA_GPU_OVERLAP=0
    gpu_launch_overlap = info.has_pdl && st_env_switch("STRATA_GPU_OVERLAP", true);
    g->graphs_off = !st_env_switch("STRATA_GPU_GRAPHS", true);
    g->recording = -1;
    return be;
}

void gpu_backend_set_graphs(struct backend *be, bool on) {
    struct gpu_be *g = gb(be);
    graphs_clear(g);
    g->graphs_off = !on;
}

uint64_t gpu_backend_graph_replays(struct backend *be) { return gb(be)->graph_replays; }

int gpu_backend_set_matvec_split(struct backend *be, int threads_per_row) {
    const int t = threads_per_row;
    if (t != 0 && t != 16 && t != 32 && t != 64 && t != 128 && t != 256)
        return st_fail("threads per row %d: use 16, 32, 64, 128, 256 or 0 (automatic)", t);
    graphs_clear(gb(be));
    gb(be)->tpr = t;
    return 0;
}

int gpu_backend_set_matvec_rows(struct backend *be, int rows_per_warp) {
    const int r = rows_per_warp;
    if (r != 0 && r != 1 && r != 2 && r != 4)
        return st_fail("rows per warp %d: use 1, 2, 4 or 0 (automatic)", r);
    graphs_clear(gb(be));
    gb(be)->rpw = r;
    return 0;
}

int gpu_backend_set_matvec_tokens(struct backend *be, int tokens_per_group) {
    const int t = tokens_per_group;
    if (t != 0 && t != 2 && t != 4 && t != 8)
        return st_fail("tokens per group %d: use 2, 4, 8 or 0 (automatic)", t);
    graphs_clear(gb(be));
    gb(be)->tpg = t;
    return 0;
}

int gpu_backend_set_tile(struct backend *be, int rows, int tokens) {
    if (rows != 0 && rows != 64 && rows != 128)
        return st_fail("tile rows %d: use 64, 128 or 0 (automatic)", rows);
    if (tokens != 0 && tokens != 64 && tokens != 128)
        return st_fail("tile tokens %d: use 64, 128 or 0 (automatic)", tokens);
    graphs_clear(gb(be));
    gb(be)->tile_bm = rows;
    gb(be)->tile_bn = tokens;
    return 0;
}

int gpu_backend_set_tensor_cores(struct backend *be, int mode) {
    struct gpu_be *g = gb(be);
    if (mode < -1 || mode > 1) return st_fail("tensor-core mode %d: use 1, 0 or -1 (automatic)", mode);
    graphs_clear(g);
    g->mma = mode == -1 ? mma_default(g) : mode == 1;
    return 0;
}

bool gpu_backend_attention_mma(struct backend *be, int run_rows, int head_dim) {
    return gb(be)->mma && attn_tile_run(head_dim, run_rows) && gpu_attention_run_mma(head_dim);
}

int gpu_backend_set_matvec_swar(struct backend *be, int mode) {
    struct gpu_be *g = gb(be);
    if (mode < -1 || mode > 1) return st_fail("SWAR mode %d: use 1, 0 or -1 (automatic)", mode);
    graphs_clear(g);
    g->swar = mode == -1 ? !g->has_dp4a : mode == 1;
    return 0;
}

void gpu_backend_argmax(struct backend *be, const float *x, int n, int32_t *out) {
    struct gpu_be *g = gb(be);
    g->q8_valid = false;
    gpu_argmax(x, n, out, g->stream);
    take_error(g);
}

int gpu_bench_read_bw(struct backend *be, size_t bytes, int reps, double *gbps) {
    struct gpu_be *g = gb(be);
    if (gpu_read_bandwidth(bytes, reps, g->n_sm, g->stream, gbps))
        return take_error(g), st_fail("read-bandwidth benchmark over %zu bytes failed: %s", bytes, g->error);
    return 0;
}

int gpu_bench_mma(struct backend *be, int reps, double *tops) {
    struct gpu_be *g = gb(be);
    if (gpu_mma_rate(reps, g->n_sm, g->stream, tops))
        return take_error(g), st_fail("tensor-core rate benchmark failed: %s", g->error);
    return 0;
}

static int bench_product(struct gpu_be *g, const struct weight *w, const float *x, int n) {
    return products(g, &w, 1, x, &g->bench_y, n, false);
}

int gpu_bench_matmul(struct backend *be, struct weight *const *ws, int n_ws, const float *x, int n, int reps,
                     bool graph, double *seconds) {
    struct gpu_be *g = gb(be);
    if (n_ws < 1 || reps < 1 || n < 1) return st_fail("bench: nothing to time");
    int64_t rows = 0;
    for (int i = 0; i < n_ws; i++) {
        if (!wdev(g, ws[i]) || ws[i]->cols != ws[0]->cols)
            return st_fail("bench: weight %d is not prepared or its columns differ", i);
        if (ws[i]->rows > rows) rows = ws[i]->rows;
    }
    if (!grow(g, (void **)&g->bench_y, &g->bench_y_cap, sizeof(float) * (size_t)n * rows))
        return take_error(g), st_fail("bench: %s", g->error);
    int rc = 0;
    // warm-up: also quantizes x, which the timed passes then reuse
    for (int i = 0; i < n_ws && !rc; i++) rc = bench_product(g, ws[i], x, n);
    if (GPU_CHECK(gpuStreamSynchronize(g->stream))) rc = -1;
    gpuGraph_t gr = NULL;
    gpuGraphExec_t ge = NULL;
    if (graph && !rc) {
        // the pass recorded once and replayed: what a decode step run as a graph sees
        if (GPU_CHECK(gpuStreamBeginCapture(g->stream, gpuStreamCaptureModeRelaxed))) rc = -1;
        for (int i = 0; i < n_ws && !rc; i++) rc = bench_product(g, ws[i], x, n);
        if (GPU_CHECK(gpuStreamEndCapture(g->stream, &gr)) ||
            GPU_CHECK(gpuGraphInstantiateWithFlags(&ge, gr, 0)) || GPU_CHECK(gpuGraphLaunch(ge, g->stream)))
            rc = -1;
    }
    double *ms = (double *)malloc(sizeof(double) * (size_t)reps);
    gpuEvent_t e0 = NULL, e1 = NULL;
    if (!ms || GPU_CHECK(gpuEventCreate(&e0)) || GPU_CHECK(gpuEventCreate(&e1))) rc = -1;
    for (int r = 0; r < reps && !rc; r++) {
        float t = 0;
        GPU_CHECK(gpuEventRecord(e0, g->stream));
        if (ge) GPU_CHECK(gpuGraphLaunch(ge, g->stream));
        for (int i = 0; i < n_ws && !rc && !ge; i++) rc = bench_product(g, ws[i], x, n);
        GPU_CHECK(gpuEventRecord(e1, g->stream));
        if (GPU_CHECK(gpuEventSynchronize(e1)) || GPU_CHECK(gpuEventElapsedTime(&t, e0, e1))) rc = -1;
        ms[r] = t;
    }
    if (e0) (void)gpuEventDestroy(e0);
    if (e1) (void)gpuEventDestroy(e1);
    if (ge) (void)gpuGraphExecDestroy(ge);
    if (gr) (void)gpuGraphDestroy(gr);
    if (rc || take_error(g)) {
        free(ms);
        return st_fail("bench: %s", g->error_set ? g->error : "a product is not supported");
    }
    *seconds = gpu_median(ms, reps) * 1e-3 / n_ws;
    free(ms);
    return 0;
}
