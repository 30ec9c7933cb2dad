// backend.c: the backend registry: every backend by name, what it is, and how
// to open it. Choosing a backend goes through here, never through its name.
// Also the helpers every backend shares (batch runs, host buffers).
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"
#ifdef STRATA_GPU
#include "gpu/gpu.h"
#endif

int batch_run_length(const struct batch_rows *r, int t) {
    int e = t + 1;
    while (e < r->n && r->host_base[e] == r->host_base[t] && r->host_pos[e] == r->host_pos[e - 1] + 1) e++;
    return e - t;
}

void *backend_host_alloc(struct backend *be, size_t bytes) {
    if (be->host_alloc) return be->host_alloc(be, bytes);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) st_fail("out of memory for a host buffer of %zu bytes", bytes);
    return p;
}

void backend_host_free(struct backend *be, void *p) {
    if (!p) return;
    if (be->host_free)
        be->host_free(be, p);
    else
        free(p);
}

static const struct backend_desc registry[] = {
    {"cpu", BACKEND_CAP_HOST, "fast CPU backend: 8-bit activations, SIMD, threads (default)"},
    {"cpu-ref", BACKEND_CAP_HOST | BACKEND_CAP_REFERENCE,
     "scalar reference in double precision, one thread (the oracle; slow)"},
    {"cuda", BACKEND_CAP_GPU, "NVIDIA GPUs (make GPU=cuda)"},
    {"hip", BACKEND_CAP_GPU, "AMD GPUs (make GPU=hip)"},
    {"spirv", BACKEND_CAP_GPU, "SPIR-V devices through chipStar, e.g. Intel Arc (make GPU=spirv)"},
};
#define N_REGISTRY ((int)(sizeof registry / sizeof *registry))

const struct backend_desc *backend_registry(int *n) {
    *n = N_REGISTRY;
    return registry;
}

bool backend_built(const struct backend_desc *d) {
    if (!(d->caps & BACKEND_CAP_GPU)) return true;
#ifdef STRATA_GPU
    return !strcmp(d->name, gpu_platform_name());
#else
    return false;
#endif
}

static struct backend *open_desc(const struct backend_desc *d, const struct backend_opts *o) {
    if (!(d->caps & BACKEND_CAP_GPU))
        return d->caps & BACKEND_CAP_REFERENCE ? backend_cpu_ref_init() : backend_cpu_init(o->n_threads);
#ifdef STRATA_GPU
    char warn[512];
    if (gpu_device_count() <= 0) return NULL; // the message says why
    struct backend *be = backend_gpu_init(o->device, warn, sizeof warn);
    if (be && warn[0]) fprintf(stderr, "strata: warning: %s\n", warn);
    return be;
#else
    return NULL;
#endif
}

int backend_gpu_devices(uint64_t *avail, int max) {
#ifdef STRATA_GPU
    const int n = gpu_device_count();
    if (n <= 0) return -1; // the message says why
    for (int i = 0; i < n && i < max; i++) {
        uint64_t reserve;
        if (gpu_device_avail(i, &avail[i], &reserve)) return -1;
    }
    return n < max ? n : max;
#else
    (void)avail;
    (void)max;
    return st_fail("this build has no GPU backend (make GPU=cuda, hip or spirv)");
#endif
}

const struct backend_desc *backend_find(const char *name) {
    for (int i = 0; i < N_REGISTRY; i++)
        if (!strcmp(name, registry[i].name)) return &registry[i];
    return NULL;
}

struct backend *backend_open(const char *name, const struct backend_opts *o) {
    if (!strcmp(name, "auto")) {
        for (int i = 0; i < N_REGISTRY; i++) {
            if (!(registry[i].caps & BACKEND_CAP_GPU) || !backend_built(&registry[i])) continue;
            struct backend *be = open_desc(&registry[i], o);
            if (be) return be;
            fprintf(stderr, "strata: no usable GPU (%s); running on the CPU\n", st_last_error());
        }
        return backend_cpu_init(o->n_threads);
    }
    const struct backend_desc *d = backend_find(name);
    if (d && !backend_built(d)) {
        st_fail("backend %s is not in this build of strata; rebuild with `make GPU=%s`", name, name);
        return NULL;
    }
    if (d) return open_desc(d, o);
    char known[128] = "auto";
    for (int i = 0; i < N_REGISTRY; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), ", %s", registry[i].name);
    st_fail("unknown backend '%s' (known: %s)", name, known);
    return NULL;
}

int backend_set_kv_type(struct backend *be, enum ggml_type t) {
    if ((unsigned)t < 32 && (be->kv_types & (1u << t))) {
        be->kv_type = t;
        return 0;
    }
    char known[64] = "";
    for (unsigned i = 0; i < 32; i++)
        if (be->kv_types & (1u << i))
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", known[0] ? ", " : "",
                     quant_name((enum ggml_type)i));
    return st_fail("the %s backend keeps its KV cache in %s, not %s: choose --cache-type %s", be->name, known,
                   quant_name(t), be->kv_types & (1u << GGML_TYPE_F16) ? "f16" : "f32");
}

int backend_parse_kv_type(const char *s, enum ggml_type *t) {
    if (!strcasecmp(s, "f32"))
        *t = GGML_TYPE_F32;
    else if (!strcasecmp(s, "f16"))
        *t = GGML_TYPE_F16;
    else
        return st_fail("unknown KV cache type '%s' (known: f16, f32)", s);
    return 0;
}
