// gemm.c: kernel selection by CPUID, the cache of repacked weights, and the
// threaded, cache-blocked driver of the repacked matrix products (gemm.h).
#include "cpu/gemm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpu/hugemem.h"
#include "cpu/threadpool.h"
#include "cpu/vec_ops.h"
#include "model/model.h"
#include "util.h"

// --- run-time dispatch -------------------------------------------------------------------

static const char *const isa_names[GEMM_ISA_COUNT] = {"scalar", "avx2", "avxvnni", "avx512", "amx"};

const char *gemm_isa_name(enum gemm_isa isa) { return isa < GEMM_ISA_COUNT ? isa_names[isa] : "?"; }

#if defined(__x86_64__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}
#endif

// What the CPU and the OS support, without any cap.
static enum gemm_isa isa_detect(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return GEMM_ISA_SCALAR;
    const bool fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
    if (!(fma && osxsave && avx && f16c)) return GEMM_ISA_SCALAR;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 6) != 6) return GEMM_ISA_SCALAR; // the OS saves no ymm state
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return GEMM_ISA_SCALAR;
    const bool avx2 = b >> 5 & 1, f = b >> 16 & 1, dq = b >> 17 & 1, bw = b >> 30 & 1, vl = b >> 31 & 1;
    const bool vnni512 = c >> 11 & 1;
    if (!avx2) return GEMM_ISA_SCALAR;
    if (f && dq && bw && vl && vnni512 && (xcr0 & 0xE0) == 0xE0) {
        // AMX: the tile and int8 bits, tile state enabled by the OS, and this
        // process's permission to use it (Linux asks for it once per process)
        const bool amx = (d >> 24 & 1) && (d >> 25 & 1) && (xcr0 >> 17 & 3) == 3;
#if defined(__linux__) && defined(SYS_arch_prctl)
        if (amx && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0)
            return GEMM_ISA_AMX;
#else
        (void)amx;
#endif
        return GEMM_ISA_AVX512;
    }
    unsigned a1 = 0, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 >> 4 & 1)) return GEMM_ISA_AVXVNNI;
    return GEMM_ISA_AVX2;
#else
    return GEMM_ISA_SCALAR;
#endif
}

static int detected = -1; // isa_detect() once (it asks for the AMX permission)
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static void detect(void) { detected = (int)isa_detect(); }

bool gemm_isa_available(enum gemm_isa isa) {
    pthread_once(&detect_once, detect);
    if (isa == GEMM_ISA_AVXVNNI && detected >= GEMM_ISA_AVX512) {
        // an AVX-512 VNNI CPU may still lack the VEX form
#if defined(__x86_64__)
        unsigned a = 0, b, c, d;
        return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
#endif
    }
    return (int)isa <= detected;
}

static int best = -1; // with the STRATA_CPU_ISA cap
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void choose_best(void) {
    pthread_once(&detect_once, detect);
    enum gemm_isa isa = (enum gemm_isa)detected;
    const char *cap = getenv("STRATA_CPU_ISA");
    if (cap && *cap) {
        int want = -1;
        for (int i = 0; i < GEMM_ISA_COUNT; i++)
            if (!strcmp(cap, isa_names[i])) want = i;
        if (want < 0)
            fprintf(stderr,
                    "strata: STRATA_CPU_ISA=%s is not one of scalar, avx2, avxvnni, avx512, "
                    "amx; ignored\n",
                    cap);
        else if (want < (int)isa && (want != GEMM_ISA_AVXVNNI || gemm_isa_available(GEMM_ISA_AVXVNNI)))
            isa = (enum gemm_isa)want;
        else if (want < (int)isa)
            isa = GEMM_ISA_AVX2; // asked for AVX-VNNI on a CPU without it
    }
    best = (int)isa;
}

enum gemm_isa gemm_isa_best(void) {
    pthread_once(&best_once, choose_best);
    return (enum gemm_isa)best;
}

gemm_kernel_fn gemm_kernel(enum gemm_isa isa, enum gemm_type gt, int n) {
    ST_ASSERT(gt < GEMM_N_TYPES);
    switch (isa) {
#if defined(__x86_64__)
    case GEMM_ISA_AMX:
        if (n >= 16 && gemm_kernels_amx[gt]) return gemm_kernels_amx[gt];
        return gemm_kernels_avx512[gt];
    case GEMM_ISA_AVX512:
        return gemm_kernels_avx512[gt];
    case GEMM_ISA_AVXVNNI:
        return gemm_kernels_avxvnni[gt];
    case GEMM_ISA_AVX2:
        return gemm_kernels_avx2[gt];
#endif
    default:
        return gemm_kernels_scalar[gt];
    }
}

gemm_quantize_fn gemm_quantizer(enum gemm_isa isa) {
#if defined(__x86_64__)
    if (isa >= GEMM_ISA_AVX512) return gemm_quantize_avx512;
    if (isa >= GEMM_ISA_AVX2) return gemm_quantize_avx2;
#endif
    (void)isa;
    return gemm_quantize_scalar;
}

int gemm_tile_tokens(enum gemm_isa isa) { return isa == GEMM_ISA_AMX ? 16 : isa == GEMM_ISA_AVX512 ? 8 : 4; }

// --- repacked weights, by their GGUF data ---------------------------------------------

struct gemm_cache {
    const void **keys; // open addressing, NULL = empty; cap a power of two
    struct gemm_weight **vals;
    size_t cap, used;
    struct hugemem *mem; // the repacked data, in 2 MiB pages where the OS gives them
};

struct gemm_cache *gemm_cache_init(void) {
    struct gemm_cache *c = st_xcalloc(1, sizeof(struct gemm_cache));
    c->mem = hugemem_init();
    return c;
}

static size_t slot_of(const struct gemm_cache *c, const void *key) {
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 17) & (c->cap - 1);
    while (c->keys[i] && c->keys[i] != key) i = (i + 1) & (c->cap - 1);
    return i;
}

const struct gemm_weight *gemm_cache_find(const struct gemm_cache *c, const void *data) {
    if (!c->cap) return NULL;
    const size_t i = slot_of(c, data);
    return c->keys[i] ? c->vals[i] : NULL;
}

static void cache_put(struct gemm_cache *c, const void *key, struct gemm_weight *val) {
    if (2 * (c->used + 1) > c->cap) {
        struct gemm_cache old = *c;
        c->cap = c->cap ? 2 * c->cap : 64;
        c->keys = st_xcalloc(c->cap, sizeof *c->keys);
        c->vals = st_xcalloc(c->cap, sizeof *c->vals);
        c->used = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.keys[i]) cache_put(c, old.keys[i], old.vals[i]);
        free(old.keys);
        free(old.vals);
    }
    const size_t i = slot_of(c, key);
    if (!c->keys[i]) c->used++;
    c->keys[i] = key;
    c->vals[i] = val;
}

struct repack_job {
    struct gemm_weight *gw;
    const struct weight *w;
    int64_t groups_per_chunk;
};

static void repack_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    struct repack_job *j = arg;
    const int64_t r0 = (int64_t)chunk * j->groups_per_chunk * GEMM_R;
    int64_t r1 = r0 + j->groups_per_chunk * GEMM_R;
    if (r1 > j->w->rows) r1 = j->w->rows;
    gemm_repack_rows(j->gw, j->w->data, j->w->row_bytes, r0, r1);
}

int gemm_cache_add(struct gemm_cache *c, struct threadpool *tp, const struct weight *w) {
    enum gemm_type gt;
    // expert stacks (n_expert > 1) stay in the file's layout: matmul_id takes
    // their rows one expert at a time with the per-row dot products
    if (w->n_expert > 1 || !gemm_type_of(w->type, &gt) || gemm_cache_find(c, w->data)) return 0;
    if (w->row_bytes != quant_row_size(w->type, w->cols))
        return st_fail("weight %.*s: rows of %zu bytes do not hold %lld %s values", w->name_len, w->name,
                       w->row_bytes, (long long)w->cols, quant_name(w->type));
    struct gemm_weight *gw = st_xmalloc(sizeof *gw);
    if (gemm_weight_layout(gw, w->type, w->rows, w->cols) ||
        !(gw->data = hugemem_alloc(c->mem, gemm_weight_bytes(gw)))) {
        free(gw);
        return st_fail("weight %.*s: %s", w->name_len, w->name, st_last_error());
    }
    struct repack_job j = {gw, w, 64};
    threadpool_run_chunks(tp, repack_chunk, &j, (int)((gw->n_groups + 63) / 64));
    cache_put(c, w->data, gw);
    return 0;
}

void gemm_cache_remove(struct gemm_cache *c, const void *data) {
    if (!c->cap) return;
    size_t i = slot_of(c, data);
    if (!c->keys[i]) return;
    hugemem_free(c->mem, c->vals[i]->data);
    free(c->vals[i]);
    c->keys[i] = NULL;
    c->used--;
    // re-insert the rest of the cluster so probing still finds it
    for (size_t k = (i + 1) & (c->cap - 1); c->keys[k]; k = (k + 1) & (c->cap - 1)) {
        const void *key = c->keys[k];
        struct gemm_weight *val = c->vals[k];
        c->keys[k] = NULL;
        c->used--;
        cache_put(c, key, val);
    }
}

void gemm_cache_free(struct gemm_cache *c) {
    if (!c) return;
    for (size_t i = 0; i < c->cap; i++)
        if (c->keys[i]) free(c->vals[i]);
    hugemem_free_all(c->mem);
    free(c->keys);
    free(c->vals);
    free(c);
}

// --- the driver ------------------------------------------------------------------------

#define ACT_L2_BYTES (768 << 10) // quantized activations of one token block stay in L2
#define CHUNK_BYTES (96 << 10)   // weight bytes a decode chunk streams

struct mm_part { // one weight's share of a product
    const struct gemm_weight *w;
    const struct gemm_act *a;
    gemm_kernel_fn kernel;
    float *y;
    int tb;           // tokens per block
    int64_t gc, n_gc; // groups per chunk, chunks per token block
    int end;          // chunks of the job up to and including this part's
};

struct mm_job {
    struct mm_part p[GEMM_MAX_PRODUCTS];
    int n; // tokens
};

static void mm_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    const struct mm_job *j = arg;
    int k = 0;
    while (chunk >= j->p[k].end) k++;
    const struct mm_part *p = &j->p[k];
    if (k) chunk -= j->p[k - 1].end;
    const int t0 = (int)(chunk / p->n_gc) * p->tb;
    const int64_t g0 = (chunk % p->n_gc) * p->gc;
    const int64_t g1 = g0 + p->gc < p->w->n_groups ? g0 + p->gc : p->w->n_groups;
    const int nt = j->n - t0 < p->tb ? j->n - t0 : p->tb;
    p->kernel(p->w, p->a, t0, nt, g0, g1, p->y, p->w->rows);
}

struct quant_job {
    gemm_quantize_fn q;
    const float *x;
    struct gemm_act *a[GEMM_MAX_PRODUCTS]; // one per activation layout
    int n_acts, per_chunk, chunks_per_act;
    const struct gemm_norm *norm; // or NULL
    bool avx512;                  // the norm's vector form
};

// Without a norm, chunk c quantizes a block of rows for one activation
// layout; with it, a block of rows is normed and quantized for every layout.
static void quant_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    struct quant_job *j = arg;
    const int n = j->a[0]->n;
    const int t0 = chunk % j->chunks_per_act * j->per_chunk;
    const int t1 = t0 + j->per_chunk < n ? t0 + j->per_chunk : n;
    if (!j->norm) {
        j->q(j->x, j->a[chunk / j->chunks_per_act], t0, t1);
        return;
    }
    const int64_t cols = j->a[0]->cols;
    vec_rms_norm(j->avx512, j->norm->g, j->x + t0 * cols, j->norm->out + t0 * cols, t1 - t0, (int)cols,
                 j->norm->eps);
    for (int k = 0; k < j->n_acts; k++) j->q(j->norm->out, j->a[k], t0, t1);
}

void gemm_matmul_multi(struct threadpool *tp, enum gemm_isa isa, const struct gemm_weight *const *w, int n_w,
                       const float *x, const struct gemm_norm *norm, float *const *y, int n, void **scratch,
                       size_t *scratch_cap) {
    ST_ASSERT(n_w >= 1 && n_w <= GEMM_MAX_PRODUCTS);
    // one set of quantized activations per weight type (types differ in the
    // activation blocks' sums they take), each 64-byte aligned in *scratch
    int act_of[GEMM_MAX_PRODUCTS], n_acts = 0;
    enum gemm_type act_gt[GEMM_MAX_PRODUCTS];
    size_t act_off[GEMM_MAX_PRODUCTS], need = 0;
    for (int i = 0; i < n_w; i++) {
        ST_ASSERT(w[i]->cols == w[0]->cols);
        int k = 0;
        while (k < n_acts && act_gt[k] != w[i]->gt) k++;
        if (k == n_acts) {
            act_gt[n_acts] = w[i]->gt;
            act_off[n_acts++] = need;
            need += (gemm_act_bytes(n, w[i]->cols, w[i]->gt) + 63) & ~(size_t)63;
        }
        act_of[i] = k;
    }
    if (need > *scratch_cap) {
        free(*scratch);
        *scratch = aligned_alloc(64, need);
        ST_ASSERT(*scratch); // sized by the batch the context was planned for
        *scratch_cap = need;
    }
    struct gemm_act a[GEMM_MAX_PRODUCTS];
    for (int k = 0; k < n_acts; k++)
        gemm_act_layout(&a[k], (uint8_t *)*scratch + act_off[k], n, w[0]->cols, act_gt[k]);
    // 16 tokens a chunk, fewer when that leaves threads idle
    const int nth = threadpool_size(tp), tile = gemm_tile_tokens(isa);
    struct quant_job qj = {
        .q = gemm_quantizer(isa), .x = x, .n_acts = n_acts, .norm = norm, .avx512 = isa >= GEMM_ISA_AVX512};
    qj.per_chunk = n < 16 * nth ? (n + nth - 1) / nth : 16;
    qj.chunks_per_act = (n + qj.per_chunk - 1) / qj.per_chunk;
    for (int k = 0; k < n_acts; k++) qj.a[k] = &a[k];
    threadpool_run_chunks(tp, quant_chunk, &qj, (norm ? 1 : n_acts) * qj.chunks_per_act);

    struct mm_job j = {.n = n};
    int64_t n_chunks = 0;
    for (int i = 0; i < n_w; i++) {
        struct mm_part *p = &j.p[i];
        *p = (struct mm_part){
            .w = w[i], .a = &a[act_of[i]], .kernel = gemm_kernel(isa, w[i]->gt, n), .y = y[i]};
        int tb = (int)(ACT_L2_BYTES / w[i]->cols);
        tb = tb < tile ? tile : tb / tile * tile;
        p->tb = tb < n ? tb : n;
        // chunks: about CHUNK_BYTES of weights per token tile, at least 4 per thread
        const int64_t tiles = (p->tb + tile - 1) / tile;
        int64_t gc = (int64_t)(CHUNK_BYTES / (w[i]->group_bytes * (size_t)tiles));
        const int64_t even = (w[i]->n_groups + 4 * nth - 1) / (4 * nth);
        if (gc > even) gc = even;
        p->gc = gc < 1 ? 1 : gc;
        p->n_gc = (w[i]->n_groups + p->gc - 1) / p->gc;
        n_chunks += p->n_gc * ((n + p->tb - 1) / p->tb);
        ST_ASSERT(n_chunks < (1 << 30));
        p->end = (int)n_chunks;
    }
    threadpool_run_chunks(tp, mm_chunk, &j, (int)n_chunks);
}

void gemm_matmul(struct threadpool *tp, enum gemm_isa isa, const struct gemm_weight *w, const float *x,
                 float *y, int n, void **scratch, size_t *scratch_cap) {
    gemm_matmul_multi(tp, isa, &w, 1, x, NULL, &y, n, scratch, scratch_cap);
}
