// cli_args.c: see cli_args.h.
#include "cli/cli_args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "text/chat.h"
#include "model/forward.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "util.h"

#define DEFAULT_CTX 4096
#define DEFAULT_BATCH 512

int cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) return st_fail("%s: '%s' is not a whole number", flag, s);
    if (v < lo || v > hi) return st_fail("%s: %lld is out of range [%lld, %lld]", flag, v, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) return st_fail("%s: '%s' is not a number", flag, s);
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
    session_opts_default(&o->s);
    o->sp = sampler_default_params();
}

const char cli_model_opts_help[] =
    "  -m, --model FILE       GGUF model to load (required)\n"
    "  -c, --ctx-size N       context size in tokens (default: 4096, or the model's own if smaller)\n"
    "  -t, --threads N        CPU threads (default: every core)\n"
    "  -b, --batch-size N     prompt tokens per forward pass (default: 512)\n"
    "      --backend NAME     auto, cpu, cpu-ref (scalar reference), cuda, hip or spirv (default: auto)\n"
    "      --cache-type T     the KV cache's element type, f16 or f32 (default: f16 on the CPU,\n"
    "                         f32 on a GPU); -ctk/-ctv, which must agree, say the same\n"
    "  -mg, --main-gpu N      the GPU to run on, from 0 (default: 0; strata info --devices lists them)\n"
    "  -sm, --split-mode M    none, layer or row: how a model is divided over several GPUs (default:\n"
    "                         none, the whole model on --main-gpu; this build runs a model on one GPU)\n"
    "  -ts, --tensor-split L  proportions of the model for each GPU, e.g. 3,1 (default: by free memory)\n"
    "      --temp T           temperature; 0 picks the most likely token (default: 0.8)\n"
    "      --top-k K          keep the K most likely tokens; 0 = off (default: 40)\n"
    "      --top-p P          keep the smallest set with probability >= P; 1 = off (default: 0.95)\n"
    "      --min-p P          drop tokens below P x the top probability; 0 = off (default: 0.05)\n"
    "      --repeat-penalty F penalise recently seen tokens; 1 = off (default: 1.0)\n"
    "      --repeat-last-n N  how many recent tokens the penalty sees (default: 64)\n"
    "  -s, --seed N           random seed (default, or -1: from the clock)\n";

static bool is_flag(const char *a, const char *name, const char *alias) {
    return !strcmp(a, name) || (alias && !strcmp(a, alias));
}

#define IS(s1, s2) is_flag(a, s1, s2)
#define VALUE()                                                                                              \
    if (!(v = cli_value(argc, argv, i))) return -1;

int cli_session_opt(struct session_opts *so, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v;
    long long n;
    if (IS("-m", "--model")) {
        VALUE();
        so->model = v;
    } else if (IS("-c", "--ctx-size")) {
        VALUE();
        if (cli_parse_int(a, v, 1, 1 << 24, &n)) return -1;
        so->n_ctx = (int)n;
    } else if (IS("-t", "--threads")) {
        VALUE();
        if (cli_parse_int(a, v, 1, 1024, &n)) return -1;
        so->n_threads = (int)n;
    } else if (IS("-b", "--batch-size")) {
        VALUE();
        if (cli_parse_int(a, v, 1, 1 << 16, &n)) return -1;
        so->n_batch = (int)n;
    } else if (IS("--backend", NULL)) {
        VALUE();
        int n_reg;
        const struct backend_desc *reg = backend_registry(&n_reg);
        bool ok = !strcmp(v, "auto");
        char known[128] = "auto";
        for (int k = 0; k < n_reg; k++) {
            ok |= !strcmp(v, reg[k].name);
            snprintf(known + strlen(known), sizeof known - strlen(known), ", %s", reg[k].name);
        }
        if (!ok) return st_fail("--backend: unknown backend '%s' (known: %s)", v, known);
        so->backend = v;
    } else if (IS("-mg", "--main-gpu")) {
        VALUE();
        if (cli_parse_int(a, v, 0, 1023, &n)) return -1;
        so->device = (int)n;
    } else if (IS("-sm", "--split-mode") || IS("-ts", "--tensor-split")) {
        VALUE();
        const bool mode = IS("-sm", "--split-mode");
        if (mode ? placement_parse_mode(v, &so->split_mode)
                 : placement_parse_split(v, so->tensor_split, &so->n_tensor_split)) {
            char why[160];
            snprintf(why, sizeof why, "%s", st_last_error());
            return st_fail("%s: %s", a, why);
        }
    } else if (IS("--cache-type", NULL) || IS("-ctk", "--cache-type-k") || IS("-ctv", "--cache-type-v")) {
        VALUE();
        enum ggml_type t, before;
        if (backend_parse_kv_type(v, &t)) {
            char why[96];
            snprintf(why, sizeof why, "%s", st_last_error());
            return st_fail("%s: %s", a, why);
        }
        if (so->cache_type && !backend_parse_kv_type(so->cache_type, &before) && before != t)
            return st_fail("%s %s: the K and V caches are kept in one type, and %s was asked for already", a,
                           v, so->cache_type);
        so->cache_type = v;
    } else {
        return 0;
    }
    return 1;
}

int cli_model_opt(struct cli_model_opts *o, int argc, char **argv, int *i) {
    const int rc = cli_session_opt(&o->s, argc, argv, i);
    if (rc) return rc;
    const char *a = argv[*i];
    const char *v;
    long long n;
    double f;
    if (IS("--temp", NULL)) {
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
        o->seed_given = strcmp(v, "-1") != 0;
        if (!o->seed_given) { // llama.cpp's spelling of a random seed
            o->sp.seed = sampler_default_params().seed;
            return 1;
        }
        unsigned long long u = strtoull(v, &end, 10);
        if (end == v || *end || errno || v[0] == '-')
            return st_fail("%s: '%s' is not a non-negative whole number (or -1: from the clock)", a, v);
        o->sp.seed = u;
    } else {
        return 0;
    }
#undef IS
#undef VALUE
    return 1;
}
