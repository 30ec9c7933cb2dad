// tool_parity.c: model-level parity of two backends on one GGUF: the logits of
// every prompt position, then greedy continuations compared token by token.
//
//   tool_parity MODEL [-a BACKEND] [-b BACKEND] [-r BACKEND] [-n N] [-p TEXT] [--max-nmse X]
//               [--split-b S]
//
// BACKEND: a registry name (cpu, cpu-ref, cuda, hip, spirv) or auto (the GPU
// of a GPU build, the default for -b there; otherwise -b defaults to
// cpu-ref). A is the side B is held to. It prints the logits' NMSE (Σ(b-a)²/Σa² per position; the worst
// position) and largest difference, whether the top tokens agree, both greedy
// continuations, the first divergence with A's margin between its two best
// logits there, and each side's generation speed.
//
// Parity holds (exit 0) when the continuations are equal, or first differ
// where A's top two logits are within twice the largest difference seen
// between the two sides (a near-tie), and the logits are close: with -r R (a
// third backend, for the prompt only, normally the float reference cpu-ref),
// B's worst NMSE from R may be at most 1.25 times A's worst NMSE from R (B is
// no further from the reference than A, the accepted path), or --max-nmse;
// without -r, B's worst NMSE from A may be at most --max-nmse (default 1e-2).
// --split-b S runs B as a layer split over S backends of its kind (equal
// shares of the blocks, context_init_split): against A of the same kind with
// --max-nmse 0, the split must change nothing.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "text/sampler.h"
#include "text/tokenizer.h"
#include "util.h"

// Greedy continuation of n tokens after the prompt already in c (last logits
// in logits); returns seconds spent, or -1.
static double greedy(struct context *c, float *logits, int pos, int n, int32_t *out, float *margins) {
    const int nv = c->model->hp.n_vocab;
    const double t0 = st_time_s();
    for (int i = 0; i < n; i++) {
        const int32_t id = sampler_argmax(logits, nv);
        float second = -INFINITY;
        for (int v = 0; v < nv; v++)
            if (v != id && logits[v] > second) second = logits[v];
        margins[i] = logits[id] - second;
        out[i] = id;
        if (i + 1 < n && context_forward(c, &id, 1, pos + i, logits, false)) return -1;
    }
    return st_time_s() - t0;
}

// Worst per-position NMSE of b against a over n positions of nv logits, and
// the largest difference; counts positions whose top tokens agree.
static double logits_nmse(const float *a, const float *b, int n, int nv, double *max_diff, int *top_agree) {
    double worst = 0;
    *max_diff = 0;
    *top_agree = 0;
    for (int p = 0; p < n; p++) {
        const float *ap = a + (size_t)p * nv, *bp = b + (size_t)p * nv;
        double se = 0, sa = 0;
        for (int v = 0; v < nv; v++) {
            const double d = (double)bp[v] - ap[v];
            se += d * d;
            sa += (double)ap[v] * ap[v];
            if (!(fabs(d) <= *max_diff)) *max_diff = isnan(d) ? INFINITY : fabs(d);
        }
        const double nmse = sa > 0 ? se / sa : se;
        if (!(nmse <= worst)) worst = isnan(nmse) ? INFINITY : nmse;
        *top_agree += sampler_argmax(ap, nv) == sampler_argmax(bp, nv);
    }
    return worst;
}

int main(int argc, char **argv) {
    const char *path = NULL, *name_a = "cpu", *name_r = NULL,
               *prompt = "The capital of France is Paris. The capital of Germany is Berlin. The capital "
                         "of Italy is Rome. The capital of Spain is";
#ifdef STRATA_GPU
    const char *name_b = "auto";
#else
    const char *name_b = "cpu-ref";
#endif
    int n_gen = 64, split_b = 1;
    double max_nmse = 1e-2;
    enum ggml_type kv_type = GGML_TYPE_F32; // every side the same (the GPU backends keep F32)
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cache-type") && i + 1 < argc) {
            if (backend_parse_kv_type(argv[++i], &kv_type)) {
                fprintf(stderr, "tool_parity: %s\n", st_last_error());
                return 2;
            }
        } else if (!strcmp(argv[i], "-a") && i + 1 < argc)
            name_a = argv[++i];
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            name_b = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            name_r = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc)
            prompt = argv[++i];
        else if (!strcmp(argv[i], "--max-nmse") && i + 1 < argc)
            max_nmse = atof(argv[++i]);
        else if (!strcmp(argv[i], "--split-b") && i + 1 < argc)
            split_b = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr,
                    "usage: %s MODEL [-a BACKEND] [-b BACKEND] [-r BACKEND] [-n N] [-p TEXT] "
                    "[--max-nmse X] [--cache-type f32|f16] [--split-b S]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!path || n_gen < 1 || split_b < 1 || split_b > 16) {
        fprintf(stderr, "tool_parity: a model path, -n ≥ 1 and --split-b 1 .. 16 are needed\n");
        return 2;
    }
    struct model *m = NULL;
    if (model_load(path, &m)) {
        fprintf(stderr, "tool_parity: %s\n", st_last_error());
        return 1;
    }
    int32_t *toks = NULL;
    const int n_prompt = tokenizer_encode(m->tok, prompt, strlen(prompt), true, false, &toks);
    if (n_prompt < 1) {
        fprintf(stderr, "tool_parity: cannot tokenize the prompt: %s\n", st_last_error());
        return 1;
    }
    const int nv = m->hp.n_vocab, n_ctx = n_prompt + n_gen + 1;
    const int n_sides = name_r ? 3 : 2;
    const char *names[3] = {name_a, name_b, name_r};
    struct backend *be[3] = {NULL, NULL, NULL};
    struct context *ctx[3] = {NULL, NULL, NULL};
    float *lg[3] = {NULL, NULL, NULL};
    for (int s = 0; s < n_sides; s++) {
        const struct backend_opts bo = {0};
        if (!(be[s] = backend_open(names[s], &bo)) || backend_set_kv_type(be[s], kv_type)) {
            fprintf(stderr, "tool_parity: backend %s: %s\n", names[s], st_last_error());
            return 1;
        }
        if (be[s]->check_memory(be[s], m->weight_bytes, model_kv_bytes(m, n_ctx, kv_type),
                                context_scratch_bytes(m, n_prompt), n_ctx)) {
            fprintf(stderr, "tool_parity: %s\n", st_last_error());
            return 1;
        }
        struct backend *stage[16] = {be[s]};
        int ends[16] = {m->hp.n_layer};
        const int n_stage = s == 1 ? split_b : 1;
        for (int k = 0; k < n_stage; k++) {
            ends[k] = (int)((int64_t)m->hp.n_layer * (k + 1) / n_stage);
            if (k && (!(stage[k] = backend_open(names[s], &bo)) || backend_set_kv_type(stage[k], kv_type))) {
                fprintf(stderr, "tool_parity: backend %s: %s\n", names[s], st_last_error());
                return 1;
            }
        }
        if (context_init_split(m, stage, ends, n_stage, n_ctx, n_prompt, 1, &ctx[s])) {
            fprintf(stderr, "tool_parity: %s: %s\n", names[s], st_last_error());
            return 1;
        }
        lg[s] = st_xmalloc(sizeof(float) * (size_t)n_prompt * nv);
        if (context_forward(ctx[s], toks, n_prompt, 0, lg[s], true)) {
            fprintf(stderr, "tool_parity: %s forward: %s\n", names[s], st_last_error());
            return 1;
        }
    }
    printf("model %s, prompt of %d tokens, %s (A) against %s (B)\n", path, n_prompt, be[0]->name,
           be[1]->name);

    double max_diff;
    int agree;
    const double nmse_ab = logits_nmse(lg[0], lg[1], n_prompt, nv, &max_diff, &agree);
    printf("prompt logits, B from A: worst NMSE %.3g, largest |diff| %.4g, top token agrees at %d "
           "of %d positions\n",
           nmse_ab, max_diff, agree, n_prompt);
    bool ok;
    if (name_r) {
        double d_r;
        int a_r;
        const double nmse_ar = logits_nmse(lg[2], lg[0], n_prompt, nv, &d_r, &a_r);
        const double nmse_br = logits_nmse(lg[2], lg[1], n_prompt, nv, &d_r, &a_r);
        const double bound = fmax(1.25 * nmse_ar, max_nmse);
        ok = nmse_br <= bound;
        printf("prompt logits from %s (R): A worst NMSE %.3g, B worst NMSE %.3g (max %.3g)\n", be[2]->name,
               nmse_ar, nmse_br, bound);
    } else {
        ok = nmse_ab <= max_nmse;
        printf("prompt logits: B's worst NMSE from A %.3g (max %.3g)\n", nmse_ab, max_nmse);
    }

    // greedy continuations, each side on its own tokens
    int32_t *gen[2];
    float *margin[2];
    double secs[2];
    float *last = st_xmalloc(sizeof(float) * (size_t)nv);
    for (int s = 0; s < 2; s++) {
        gen[s] = st_xmalloc(sizeof(int32_t) * (size_t)n_gen);
        margin[s] = st_xmalloc(sizeof(float) * (size_t)n_gen);
        memcpy(last, lg[s] + (size_t)(n_prompt - 1) * nv, sizeof(float) * (size_t)nv);
        secs[s] = greedy(ctx[s], last, n_prompt, n_gen, gen[s], margin[s]);
        if (secs[s] < 0) {
            fprintf(stderr, "tool_parity: %s generation: %s\n", names[s], st_last_error());
            return 1;
        }
    }
    int first = -1;
    for (int i = 0; i < n_gen && first < 0; i++)
        if (gen[0][i] != gen[1][i]) first = i;
    for (int s = 0; s < 2; s++) {
        char *text = NULL;
        size_t len = 0;
        tokenizer_decode(m->tok, gen[s], n_gen, false, &text, &len);
        printf("%s: %.1f tok/s (%d tokens, one at a time, logits to the host each step): %.*s\n", be[s]->name,
               (n_gen - 1) / secs[s], n_gen, (int)len, text ? text : "");
        free(text);
    }
    if (first < 0) {
        printf("greedy continuations: all %d tokens equal\n", n_gen);
    } else {
        const bool tie = margin[0][first] <= 2 * max_diff;
        printf("greedy continuations: first differ at token %d (%d against %d); A's top-two margin "
               "there %.4g, %s twice the largest logit difference %.4g: %s\n",
               first, gen[0][first], gen[1][first], (double)margin[0][first], tie ? "within" : "beyond",
               2 * max_diff, tie ? "a near-tie" : "NOT a near-tie");
        ok = ok && tie;
    }
    printf("PARITY %s\n", ok ? "holds" : "FAILS");
    for (int s = 0; s < n_sides; s++) {
        context_free(ctx[s]);
        be[s]->free(be[s]);
        free(lg[s]);
    }
    for (int s = 0; s < 2; s++) {
        free(gen[s]);
        free(margin[s]);
    }
    free(last);
    free(toks);
    model_free(m);
    return ok ? 0 : 1;
}
