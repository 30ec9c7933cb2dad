// cli_args.c: see cli_args.h.
#include "cli_args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "chat.h"
#include "forward.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#define DEFAULT_CTX 4096
#define DEFAULT_BATCH 512

int cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno)
        return st_fail("%s: '%s' is not a whole number", flag, s);
    if (v < lo || v > hi) return st_fail("%s: %lld is out of range [%lld, %lld]", flag, v, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return st_fail("%s: '%s' is not a number", flag, s);
    if (v < lo || v > hi) return st_fail("%s: %g is out of range [%g, %g]", flag, v, lo, hi);
    *out = v;
    return 0;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        st_fail("%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

void cli_model_opts_default(struct cli_model_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_batch = DEFAULT_BATCH;
    o->backend = "auto";
    o->sp = sampler_default_params();
}

const char cli_model_opts_help[] =
    "  -m, --model FILE       GGUF model to load (required)\n"
    "  -c, --ctx-size N       context size in tokens (default: 4096, or the model's own if smaller)\n"
    "  -t, --threads N        CPU threads (default: every core)\n"
    "  -b, --batch-size N     prompt tokens per forward pass (default: 512)\n"
    "      --backend NAME     auto, cpu, cpu-ref (scalar reference), cuda, hip or spirv (default: auto)\n"
    "      --temp T           temperature; 0 picks the most likely token (default: 0.8)\n"
    "      --top-k K          keep the K most likely tokens; 0 = off (default: 40)\n"
    "      --top-p P          keep the smallest set with probability >= P; 1 = off (default: 0.95)\n"
    "      --min-p P          drop tokens below P x the top probability; 0 = off (default: 0.05)\n"
    "      --repeat-penalty F penalise recently seen tokens; 1 = off (default: 1.0)\n"
    "      --repeat-last-n N  how many recent tokens the penalty sees (default: 64)\n"
    "  -s, --seed N           random seed (default: from the clock)\n";

static bool is_flag(const char *a, const char *name, const char *alias) {
    return !strcmp(a, name) || (alias && !strcmp(a, alias));
}

int cli_model_opt(struct cli_model_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v;
    long long n;
    double f;
#define IS(s1, s2) is_flag(a, s1, s2)
#define VALUE()                                                                                   \
    if (!(v = cli_value(argc, argv, i))) return -1;
    if (IS("-m", "--model")) {
        VALUE();
        o->model = v;
    } else if (IS("-c", "--ctx-size")) {
        VALUE();
        if (cli_parse_int(a, v, 1, 1 << 24, &n)) return -1;
        o->n_ctx = (int)n;
    } else if (IS("-t", "--threads")) {
        VALUE();
        if (cli_parse_int(a, v, 1, 1024, &n)) return -1;
        o->n_threads = (int)n;
    } else if (IS("-b", "--batch-size")) {
        VALUE();
        if (cli_parse_int(a, v, 1, 1 << 16, &n)) return -1;
        o->n_batch = (int)n;
    } else if (IS("--backend", NULL)) {
        VALUE();
        static const char *known[] = {"auto", "cpu", "cpu-ref", "cuda", "hip", "spirv"};
        bool ok = false;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++) ok |= !strcmp(v, known[k]);
        if (!ok) return st_fail("--backend: unknown backend '%s' (known: auto, cpu, cpu-ref, cuda, hip, spirv)", v);
        o->backend = v;
    } else if (IS("--temp", NULL)) {
        VALUE();
        if (cli_parse_float(a, v, 0, 1e6, &f)) return -1;
        o->sp.temperature = (float)f;
    } else if (IS("--top-k", NULL)) {
        VALUE();
        if (cli_parse_int(a, v, 0, 1 << 30, &n)) return -1;
        o->sp.top_k = (int)n;
    } else if (IS("--top-p", NULL)) {
        VALUE();
        if (cli_parse_float(a, v, 0, 1, &f)) return -1;
        if (f <= 0) return st_fail("%s: must be above 0 (1 turns it off)", a);
        o->sp.top_p = (float)f;
    } else if (IS("--min-p", NULL)) {
        VALUE();
        if (cli_parse_float(a, v, 0, 1, &f)) return -1;
        o->sp.min_p = (float)f;
    } else if (IS("--repeat-penalty", NULL)) {
        VALUE();
        if (cli_parse_float(a, v, 1e-3, 1e3, &f)) return -1;
        o->sp.repeat_penalty = (float)f;
    } else if (IS("--repeat-last-n", NULL)) {
        VALUE();
        if (cli_parse_int(a, v, 0, 1 << 24, &n)) return -1;
        o->sp.repeat_last_n = (int)n;
    } else if (IS("-s", "--seed")) {
        VALUE();
        char *end;
        errno = 0;
        unsigned long long u = strtoull(v, &end, 10);
        if (end == v || *end || errno || v[0] == '-')
            return st_fail("%s: '%s' is not a non-negative whole number", a, v);
        o->sp.seed = u;
    } else {
        return 0;
    }
#undef IS
#undef VALUE
    return 1;
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

#ifdef STRATA_GPU
#include "gpu/gpu.h"
#endif

// Opens the backend named by --backend. auto: the first GPU when this build
// has a GPU backend and a usable device, else the CPU (saying why on stderr).
static struct backend *open_backend(const char *name, int n_threads) {
    if (!strcmp(name, "cpu")) return backend_cpu_init(n_threads);
    if (!strcmp(name, "cpu-ref")) return backend_cpu_ref_init();
#ifdef STRATA_GPU
    const bool is_auto = !strcmp(name, "auto");
    if (is_auto || !strcmp(name, gpu_platform_name())) {
        char warn[512];
        struct backend *be = gpu_device_count() > 0 ? backend_gpu_init(0, warn, sizeof warn) : NULL;
        if (be && warn[0]) fprintf(stderr, "strata: warning: %s\n", warn);
        if (be || !is_auto) return be;
        fprintf(stderr, "strata: no usable GPU (%s); running on the CPU\n", st_last_error());
        return backend_cpu_init(n_threads);
    }
    st_fail("--backend %s: this build's GPU backend is %s; rebuild with `make GPU=%s`", name,
            gpu_platform_name(), name);
    return NULL;
#else
    if (!strcmp(name, "auto")) return backend_cpu_init(n_threads);
    st_fail("--backend %s: this build of strata has no GPU backend; rebuild with `make GPU=%s`",
            name, name);
    return NULL;
#endif
}

int cli_open(const struct cli_model_opts *o, struct model **m, struct backend **be,
             struct context **ctx) {
    *m = NULL;
    *be = NULL;
    *ctx = NULL;
    if (!o->model) return st_fail("no model given: use -m FILE (see --help)");
    if (sampler_params_check(&o->sp)) return -1;
    if (model_load(o->model, m)) return -1;
    int n_ctx = o->n_ctx;
    if (n_ctx == 0) n_ctx = (*m)->hp.n_ctx_train < DEFAULT_CTX ? (*m)->hp.n_ctx_train : DEFAULT_CTX;
    if (n_ctx > (*m)->hp.n_ctx_train)
        fprintf(stderr,
                "strata: warning: context %d is longer than the %d tokens the model was trained "
                "on; quality may drop past that\n",
                n_ctx, (*m)->hp.n_ctx_train);
    *be = open_backend(o->backend, o->n_threads);
    if (!*be) goto fail;
    const uint64_t kv = model_kv_bytes(*m, n_ctx);
    const struct model_hparams *hp = &(*m)->hp;
    const uint64_t nb = (uint64_t)(o->n_batch < n_ctx ? o->n_batch : n_ctx);
    const uint64_t scratch = sizeof(float) * nb *
                             (3ull * hp->n_embd + 2ull * hp->n_head * hp->head_dim +
                              2ull * hp->n_head_kv * hp->head_dim + 2ull * hp->n_ff + hp->n_vocab);
    if (strncmp((*be)->name, "cpu", 3)) {
#ifdef STRATA_GPU
        if (gpu_memory_plan(0, (*m)->weight_bytes, kv, n_ctx, scratch)) goto fail;
#endif
    } else {
        const uint64_t avail = mem_available();
        const uint64_t per_pos = model_kv_bytes(*m, 1);
        if (avail && kv + scratch > avail) {
            uint64_t fit = avail / 2 / per_pos;
            st_fail("-c %d needs %.2f GiB of KV cache but only %.2f GiB of memory is available; "
                    "use -c %" PRIu64 " or less",
                    n_ctx, kv / 1073741824.0, avail / 1073741824.0, fit);
            goto fail;
        }
    }
    if (context_init(*m, *be, n_ctx, o->n_batch, ctx)) goto fail;
    return 0;
fail:
    cli_close(*m, *be, *ctx);
    *m = NULL;
    *be = NULL;
    *ctx = NULL;
    return -1;
}

void cli_close(struct model *m, struct backend *be, struct context *ctx) {
    context_free(ctx);
    if (be) be->free(be);
    model_free(m);
}

int cli_chat_format(const struct model *m, const char *template_name, struct chat_format *fmt) {
    if (template_name) {
        if (chat_format_by_name(template_name, fmt)) return -1;
    } else {
        if (!m->chat_template)
            return st_fail("the model has no chat template (tokenizer.chat_template); name a "
                           "template family with --template");
        if (chat_detect(m->chat_template, strlen(m->chat_template), fmt)) return -1;
    }
    int32_t bos = tokenizer_bos(m->tok);
    const char *bos_text = bos >= 0 ? tokenizer_token_text(m->tok, bos) : NULL;
    if (bos_text) snprintf(fmt->bos, sizeof fmt->bos, "%s", bos_text);
    return 0;
}

int cli_text_tokens(const struct model *m, const char *text, int32_t **ids) {
    int n = tokenizer_encode(m->tok, text, strlen(text), true, true, ids);
    if (n < 0) return -1;
    // text that starts with the BOS token's text plus a vocabulary that adds one: keep one
    int32_t bos = tokenizer_bos(m->tok);
    if (n >= 2 && bos >= 0 && (*ids)[0] == bos && (*ids)[1] == bos) {
        memmove(*ids, *ids + 1, sizeof(int32_t) * (size_t)(n - 1));
        n--;
    }
    return n;
}

int cli_chat_tokens(const struct model *m, const struct chat_format *fmt,
                    const struct chat_message *msgs, int n, bool add_generation_prompt,
                    int32_t **ids) {
    char *text = chat_render(fmt, msgs, n, add_generation_prompt);
    if (!text) return -1;
    int n_ids = cli_text_tokens(m, text, ids);
    free(text);
    return n_ids;
}
