// backend.h: the small boundary between the forward pass and the hardware.
//
// The forward pass (forward.c) is written once against these function
// pointers. Buffers are opaque: host memory for the CPU backends, device memory
// for GPU backends; the forward pass only passes them back to the backend.
// Ops are enqueued in order and may run asynchronously; errors are sticky and
// reported by sync().
//
// All activations are float32, row-major, one row per token:
//   x    (n_tok, dim)
//   q    (n_tok, n_head, head_dim)       k, v  (n_tok, n_head_kv, head_dim)
//   kv cache per layer: (n_seq·n_ctx, n_head_kv, head_dim), float32: the
//                       sequences of a context one after another (batch_rows)
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

// What a backend is, for the code that chooses and plans for it (never its name).
enum backend_cap {
    BACKEND_CAP_HOST = 1u << 0,      // buffers are host memory
    BACKEND_CAP_REFERENCE = 1u << 1, // the scalar oracle every other backend is checked against
    BACKEND_CAP_GPU = 1u << 2,       // runs on a GPU device
};

// Where the rows of a batch sit, for rope, kv_store and attention: row i is
// the token at position pos[i] of a sequence whose keys and values begin at
// row base[i] of each layer's cache (position p is cache row base[i] + p), so
// one op call serves several sequences, each at its own position. pos and base
// are backend buffers the ops read (they must stay unchanged until sync);
// host_pos and host_base hold the same values on the host, for backends that
// plan their work there. n_kv bounds the keys a row sees: n_kv ≥ pos[i] + 1 for
// every row (the forward pass rounds it up, so that one recorded pass serves
// many positions).
struct batch_rows {
    int n;                               // rows
    const int32_t *pos, *base;           // backend buffers (n)
    const int32_t *host_pos, *host_base; // host (n), the same values
    int n_kv;
};

// The rows of r from row t on that continue one sequence (the same cache,
// positions one after another), read from host_pos and host_base: how many
// (at least 1 for t < r->n). A prompt chunk is one run, a decode token its own.
int batch_run_length(const struct batch_rows *r, int t);

struct backend {
    const char *name; // the registry name: "cpu", "cpu-ref", "cuda", "hip", "spirv"
    unsigned caps;    // enum backend_cap bits
    void *impl;
    // The KV cache's element type, GGML_TYPE_F32 or GGML_TYPE_F16: what
    // kv_store writes and attention reads (values rounded to nearest, ties to
    // even, when F16). The backend's default until backend_set_kv_type;
    // kv_types has bit (1u << type) set for each type its ops take.
    enum ggml_type kv_type;
    unsigned kv_types;

    // Frees everything the backend allocated, then the backend itself.
    void (*free)(struct backend *be);

    // Checks, before anything is allocated, that weights (weight_bytes as stored),
    // a KV cache of n_ctx positions (kv_bytes) and scratch fit in the memory this
    // backend computes from. Returns 0, or -1 with a message naming what is
    // needed, what is free, and the largest context that would fit.
    int (*check_memory)(struct backend *be, uint64_t weight_bytes, uint64_t kv_bytes, uint64_t scratch_bytes,
                        int n_ctx);

    // Memory. alloc returns NULL with a message when the bytes are not there.
    void *(*alloc)(struct backend *be, size_t bytes);
    void (*release)(struct backend *be, void *buf);
    void (*upload)(struct backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(struct backend *be, void *host_dst, const void *src, size_t bytes);
    // Host memory that upload and download reach fastest: page-locked on a GPU,
    // so a copy is one DMA at the bus's rate instead of a pass through the
    // driver's staging buffer; for buffers that take a download every step
    // (logits). NULL on backends that compute from host memory. Callers use
    // backend_host_alloc / backend_host_free, which fall back to malloc / free.
    void *(*host_alloc)(struct backend *be, size_t bytes);
    void (*host_free)(struct backend *be, void *p);
    // Makes w usable by this backend's ops: a GPU copies it into its own table,
    // keyed by w->data, so the model stays untouched and may serve several
    // backends at once. Preparing the same data twice is a no-op. Returns 0 or
    // -1 with a message.
    int (*prepare_weight)(struct backend *be, const struct weight *w);
    // Frees the backend's copy of w, if any (free() frees every copy anyway).
    void (*release_weight)(struct backend *be, const struct weight *w);

    // out (n, emb.cols) = rows tokens[i] of emb, dequantized. tokens is a
    // backend buffer of n int32 ids, each < emb.rows (checked by the caller).
    void (*get_rows)(struct backend *be, const struct weight *emb, const int32_t *tokens, int n, float *out);
    // out (n, dim) = x / sqrt(mean(x²) + eps) * w   (w: F32 weight of dim; out may
    // be x). Also the per-head norm: x (n·n_head, head_dim) with w of head_dim.
    void (*rms_norm)(struct backend *be, const struct weight *w, const float *x, float *out, int n, int dim,
                     float eps);
    // y (n, w.rows) = x (n, w.cols) · wᵀ
    void (*matmul)(struct backend *be, const struct weight *w, const float *x, float *y, int n);
    // y (n, w.rows) += x (n, w.cols) · wᵀ: a residual add fused into the
    // product. May be NULL: callers then call matmul and add.
    void (*matmul_add)(struct backend *be, const struct weight *w, const float *x, float *y, int n);
    // y[i] (n, w[i].rows) = x (n, cols) · w[i]ᵀ for i < n_w ≤ 4, weights of the
    // same cols (a layer's q, k, v; gate and up): what matmul does for each, in
    // one pass where the backend can (the input prepared once). May be NULL:
    // callers then call matmul for each weight.
    void (*matmul_multi)(struct backend *be, const struct weight *const *w, int n_w, const float *x,
                         float *const *y, int n);
    // out (n, dim) = rms_norm(x) with weight nw, as rms_norm gives it (out may
    // be x), and y[i] (n, w[i].rows) = out · w[i]ᵀ for i < n_w ≤ 4, weights of
    // dim cols, as matmul_multi gives them: the norm taken in the products'
    // pass over their input. May be NULL: callers then call rms_norm and the
    // products.
    void (*norm_matmul_multi)(struct backend *be, const struct weight *nw, float eps, const float *x,
                              float *out, int dim, const struct weight *const *w, int n_w, float *const *y,
                              int n);
    // x (n, dim) += b (dim), each row   (b: F32 weight of dim)
    void (*add_bias)(struct backend *be, const struct weight *b, float *x, int n, int dim);
    // In place: rotates x (r->n, n_head, head_dim), row i for position r->pos[i]
    // (model/rope.h has the angles and which elements pair up).
    void (*rope)(struct backend *be, float *x, const struct batch_rows *r, int n_head, int head_dim,
                 const struct rope_params *rp);
    // Stores k, v (r->n, n_head_kv, head_dim) into the caches (rows of kv_dim
    // elements of be->kv_type): row i at cache row r->base[i] + r->pos[i].
    void (*kv_store)(struct backend *be, void *k_cache, void *v_cache, const float *k, const float *v,
                     const struct batch_rows *r, int kv_dim);
    // rope of q (r->n, n_head, head_dim) and of k (r->n, n_head_kv, head_dim),
    // then kv_store of k and v: what those three calls do, in one op (k itself
    // may be left unrotated: only its stored form counts). May be NULL.
    void (*rope_store)(struct backend *be, float *q, float *k, const float *v, void *k_cache, void *v_cache,
                       const struct batch_rows *r, int n_head, int n_head_kv, int head_dim,
                       const struct rope_params *rp);
    // out (r->n, n_head, head_dim): causal grouped-query attention of q; row i,
    // at position p = r->pos[i], sees positions 0 .. p of its sequence, cache
    // rows r->base[i] + 0 .. p (ap->window > 0: only positions p-window+1 .. p);
    // scores s = ap->scale · q·k, soft-capped to ap->softcap · tanh(s /
    // ap->softcap) when ap->softcap > 0, then softmax. The caches hold
    // be->kv_type, as kv_store wrote them.
    void (*attention)(struct backend *be, const float *q, const void *k_cache, const void *v_cache,
                      float *out, const struct batch_rows *r, int n_head, int n_head_kv, int head_dim,
                      const struct attn_params *ap);
    // out (n, dim) = act(g) · u, elementwise over rows whose values start every
    // `stride` floats: g[i·stride + j], u[i·stride + j] (stride ≥ dim; out is
    // dense; it may be g when stride = dim). act: SiLU, or GELU's tanh form.
    void (*glu)(struct backend *be, enum glu_act act, const float *g, const float *u, float *out, int n,
                int dim, int stride);
    // x (n) += y
    void (*add)(struct backend *be, float *x, const float *y, int64_t n);
    // x (n) *= s
    void (*scale)(struct backend *be, float *x, int64_t n, float s);
    // x (n) = cap · tanh(x / cap), cap > 0
    void (*softcap)(struct backend *be, float *x, int64_t n, float cap);

    // Mixture of experts. moe_route: for each of n rows of logits (n,
    // mp->n_expert), the mp->n_used experts of highest gate value, best first
    // (ties: lower index), into ids (n, n_used), and their weights (n, n_used):
    // gate values (softmax over all experts, or each logit's sigmoid), divided
    // by their sum (at least 2^-14) when mp->norm, times mp->scale.
    void (*moe_route)(struct backend *be, const float *logits, int n, const struct moe_params *mp,
                      int32_t *ids, float *weights);
    // y (n, k, w.rows) = for every token t and slot s, expert ids[t·k + s] of
    // w (w.n_expert matrices of (rows, cols)) times x row (t, s) when x_slots
    // is k, or row t when x_slots is 1: x (n, x_slots, cols).
    void (*matmul_id)(struct backend *be, const struct weight *w, const float *x, int x_slots,
                      const int32_t *ids, int k, float *y, int n);
    // out (n, dim) = Σ_s weights[t·k + s] · y (t, s, :)   (y: (n, k, dim); out may
    // be y when k = 1)
    void (*moe_combine)(struct backend *be, const float *y, const float *weights, int n, int k, int dim,
                        float *out);
    // Waits for every enqueued op. Returns 0, or -1 with the first error's message.
    int (*sync)(struct backend *be);

    // Recorded passes (NULL where a backend has none, e.g. a runtime without
    // graphs): the ops a caller enqueues between graph_begin and graph_end are
    // recorded once and replayed as one unit afterwards. graph_begin(key)
    // returns BACKEND_GRAPH_REPLAYED when it replayed the recording of key (the
    // caller enqueues nothing), BACKEND_GRAPH_RECORDING when the caller's ops
    // are to be recorded (then graph_end runs them, or returns -1 when the
    // recording failed and nothing ran: the caller enqueues them again), or
    // BACKEND_GRAPH_NONE (the ops run as usual). One key must stand for the same
    // ops with the same arguments (buffers, sizes, batch_rows.n_kv); what the
    // buffers hold may differ from pass to pass. Releasing or growing any
    // buffer forgets every recording.
    int (*graph_begin)(struct backend *be, uint64_t key);
    int (*graph_end)(struct backend *be);
};

enum { BACKEND_GRAPH_NONE, BACKEND_GRAPH_RECORDING, BACKEND_GRAPH_REPLAYED };

// The plain reference backend: scalar C, double accumulation, one thread. The oracle.
struct backend *backend_cpu_ref_init(void);
// The fast CPU backend: activations quantized to 8-bit blocks for integer dot
// products, rows split across n_threads (≤ 0: every core this process may run on).
struct backend *backend_cpu_init(int n_threads);

// --- host buffers and the registry (backend.c) ------------------------------------

// bytes of host memory for downloads from be (its host_alloc, else malloc);
// NULL with a message when they are not there. Free with backend_host_free
// on the same backend, before the backend itself.
void *backend_host_alloc(struct backend *be, size_t bytes);
void backend_host_free(struct backend *be, void *p);

struct backend_opts {
    int n_threads; // CPU threads, ≤ 0: every core
    int device;    // GPU device index
};

struct backend_desc {
    const char *name;
    unsigned caps;       // enum backend_cap bits
    const char *summary; // one line for --help and error messages
};

// Every backend this project knows, built into this binary or not: *n entries.
const struct backend_desc *backend_registry(int *n);
// The registry's entry called name, or NULL ("auto" is none).
const struct backend_desc *backend_find(const char *name);
// Whether this build holds backend d (a GPU backend needs `make GPU=...`).
bool backend_built(const struct backend_desc *d);
// Opens the backend called name, or with "auto" the first built GPU backend
// that finds a usable device, else "cpu" (saying why on stderr). A warning
// about the device (an unvalidated GPU) goes to stderr. Returns NULL with a
// message naming the known backends, or what to rebuild with, on failure.
struct backend *backend_open(const char *name, const struct backend_opts *o);
// The GPUs the built GPU backend sees (at most max), each with the bytes it
// may take (free memory less a reserve) in avail. Returns their count, or -1
// with a message when this build has no GPU backend or no GPU is visible.
int backend_gpu_devices(uint64_t *avail, int max);
// Makes t (GGML_TYPE_F32 or GGML_TYPE_F16) be's KV cache type, before any
// context is made on be. Returns 0, or -1 with a message when be's ops do not
// take t (naming the types they do).
int backend_set_kv_type(struct backend *be, enum ggml_type t);
// The KV cache type named s ("f32" or "f16") into *t: 0, or -1 with a message.
int backend_parse_kv_type(const char *s, enum ggml_type *t);

#endif
