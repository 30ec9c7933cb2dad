// tool_logits.c: Strata's logits for given token ids, for tests that compare
// them with another implementation (tests/test_archs.py against llama.cpp).
//
//   tool_logits MODEL --tokens 1,2,3 [--backend NAME] [--out FILE] [--greedy N] [-b N]
//               [--compare FILE --max-nmse X]
//
// Runs the tokens as one prompt (in batches of -b, default all at once) and
// writes the logits of every position to FILE as little-endian float32
// (n_tokens, n_vocab). With --greedy N it then continues greedily for N
// tokens and prints "greedy id id ..." and, per step, the margin between the
// two largest logits ("margins m m ..."). With --compare it reads another
// implementation's logits in the same layout (tests/reference/oracle_files.py
// writes llama.cpp's), prints each position's NMSE (Σ(s-r)²/Σr²) and the
// worst, and fails when the worst exceeds --max-nmse or a position's top
// token differs where the file's own top-two margin exceeds twice the largest
// logit difference. Exit status 0, 1 on failure or error, 2 on bad usage.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "text/sampler.h"
#include "util.h"

static int usage(void) {
    fprintf(stderr, "usage: tool_logits MODEL --tokens 1,2,3 [--backend NAME] [--out FILE] "
                    "[--greedy N] [-b N] [--cache-type f32|f16 (default f32)]\n");
    return 2;
}

static int parse_tokens(const char *s, int32_t **out) {
    int cap = 16, n = 0;
    int32_t *v = st_xmalloc(sizeof(int32_t) * (size_t)cap);
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x > (1L << 30)) {
            free(v);
            return -1;
        }
        if (n == cap) {
            int32_t *nv = realloc(v, sizeof(int32_t) * (size_t)(cap *= 2));
            if (!nv) abort();
            v = nv;
        }
        v[n++] = (int32_t)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            free(v);
            return -1;
        }
    }
    *out = v;
    return n;
}

// Compares logits (n, V) with the float32 file at path. Prints per-position
// NMSE; returns 0 when within max_nmse with the top tokens agreeing where the
// file's margin decides, 1 when not, -1 with a message when the file is unfit.
static int compare(const char *path, const float *logits, int n, int V, double max_nmse) {
    FILE *f = fopen(path, "rb");
    if (!f) return st_fail("cannot open %s", path);
    float *ref = st_xmalloc(sizeof(float) * (size_t)n * V);
    const size_t got = fread(ref, sizeof(float) * (size_t)V, (size_t)n, f);
    const int extra = fgetc(f);
    fclose(f);
    if (got != (size_t)n || extra != EOF) {
        free(ref);
        return st_fail("%s does not hold %d rows of %d float32 logits", path, n, V);
    }
    double worst = 0, max_diff = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) max_diff = fmax(max_diff, fabs((double)logits[i] - ref[i]));
    int decided = 0, agree = 0;
    printf("nmse");
    for (int p = 0; p < n; p++) {
        const float *a = logits + (size_t)p * V, *r = ref + (size_t)p * V;
        double se = 0, sr = 0;
        for (int v = 0; v < V; v++) {
            se += ((double)a[v] - r[v]) * ((double)a[v] - r[v]);
            sr += (double)r[v] * r[v];
        }
        const double nmse = sr > 0 ? se / sr : se;
        printf(" %.3g", nmse);
        if (!(nmse <= worst)) worst = isnan(nmse) ? INFINITY : nmse;
        const int top = sampler_argmax(r, V);
        double second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != top && r[v] > second) second = r[v];
        if (r[top] - second > 2 * max_diff) {
            decided++;
            agree += sampler_argmax(a, V) == top;
        }
    }
    const int ok = worst <= max_nmse && agree == decided;
    printf("\ncompare %s: worst NMSE %.3g (max %.3g), largest |diff| %.3g, top token agrees at %d "
           "of %d decided positions: %s\n",
           path, worst, max_nmse, max_diff, agree, decided, ok ? "ok" : "FAIL");
    free(ref);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *path = NULL, *tokens_arg = NULL, *backend = "cpu", *out_path = NULL, *cmp_path = NULL;
    int n_greedy = 0, n_batch = 0;
    double max_nmse = -1;
    enum ggml_type kv_type = GGML_TYPE_F32; // as the references compared with keep K/V
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cache-type") && i + 1 < argc) {
            if (backend_parse_kv_type(argv[++i], &kv_type)) {
                fprintf(stderr, "tool_logits: %s\n", st_last_error());
                return 2;
            }
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens_arg = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else if (!strcmp(argv[i], "--greedy") && i + 1 < argc)
            n_greedy = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            n_batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--compare") && i + 1 < argc)
            cmp_path = argv[++i];
        else if (!strcmp(argv[i], "--max-nmse") && i + 1 < argc)
            max_nmse = atof(argv[++i]);
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            return usage();
    }
    int32_t *toks = NULL;
    const int n = tokens_arg ? parse_tokens(tokens_arg, &toks) : -1;
    if (!path || n < 1 || n_greedy < 0 || n_batch < 0 || (cmp_path && !(max_nmse >= 0))) return usage();
    if (n_batch == 0 || n_batch > n) n_batch = n;
    struct model *m;
    if (model_load(path, &m)) {
        fprintf(stderr, "tool_logits: %s\n", st_last_error());
        return 1;
    }
    const struct backend_opts bo = {0};
    struct backend *be = backend_open(backend, &bo);
    struct context *c = NULL;
    const int V = m->hp.n_vocab, n_ctx = n + n_greedy + 1;
    if (!be || backend_set_kv_type(be, kv_type) || context_init(m, be, n_ctx, n_batch, 1, &c)) {
        fprintf(stderr, "tool_logits: %s\n", st_last_error());
        return 1;
    }
    float *logits = st_xmalloc(sizeof(float) * (size_t)n * V);
    for (int p = 0; p < n; p += n_batch) {
        const int k = n - p < n_batch ? n - p : n_batch;
        if (context_forward(c, toks + p, k, p, logits + (size_t)p * V, true)) {
            fprintf(stderr, "tool_logits: %s\n", st_last_error());
            return 1;
        }
    }
    if (out_path) {
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(logits, sizeof(float) * (size_t)V, (size_t)n, f) != (size_t)n || fclose(f)) {
            fprintf(stderr, "tool_logits: cannot write %s\n", out_path);
            return 1;
        }
    }
    int status = 0;
    if (cmp_path && (status = compare(cmp_path, logits, n, V, max_nmse)) < 0) {
        fprintf(stderr, "tool_logits: %s\n", st_last_error());
        return 1;
    }
    if (n_greedy > 0) {
        float *last = st_xmalloc(sizeof(float) * (size_t)V);
        memcpy(last, logits + (size_t)(n - 1) * V, sizeof(float) * (size_t)V);
        int32_t *ids = st_xmalloc(sizeof(int32_t) * (size_t)n_greedy);
        double *margin = st_xmalloc(sizeof(double) * (size_t)n_greedy);
        for (int i = 0; i < n_greedy; i++) {
            const int32_t id = sampler_argmax(last, V);
            double second = -INFINITY;
            for (int v = 0; v < V; v++)
                if (v != id && last[v] > second) second = last[v];
            ids[i] = id;
            margin[i] = last[id] - second;
            if (i + 1 < n_greedy && context_forward(c, &id, 1, n + i, last, false)) {
                fprintf(stderr, "tool_logits: %s\n", st_last_error());
                return 1;
            }
        }
        printf("greedy");
        for (int i = 0; i < n_greedy; i++) printf(" %d", ids[i]);
        printf("\nmargins");
        for (int i = 0; i < n_greedy; i++) printf(" %.6g", margin[i]);
        printf("\n");
        free(last), free(ids), free(margin);
    }
    free(logits);
    free(toks);
    context_free(c);
    be->free(be);
    model_free(m);
    return status;
}
