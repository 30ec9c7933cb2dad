// cli_bench.c: `strata bench` — prompt processing (ppN) and generation (tgN)
// speed, llama-bench style: mean ± standard deviation over repetitions, with
// the weight-streaming bandwidth generation achieves.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "model/forward.h"
#include "model/model.h"
#include "util.h"

static const char bench_help[] =
    "usage: strata bench -m MODEL [-p N] [-n N] [-r N] [options]\n"
    "\n"
    "Times prompt processing of N tokens (ppN, one batch of -b) and generation of N\n"
    "tokens one at a time (tgN) on fixed pseudo-random tokens; prints mean ± sd tok/s.\n"
    "\n"
    "  -p, --n-prompt N       prompt tokens (default: 512; 0 skips)\n"
    "  -n, --n-gen N          generated tokens (default: 128; 0 skips)\n"
    "  -r, --repetitions N    repetitions after one warm-up (default: 3)\n"
    "  -h, --help             this help\n"
    "\n"
    "Model options:\n";

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

int cli_bench(int argc, char **argv) {
    struct cli_model_opts o;
    cli_model_opts_default(&o);
    long long n_prompt = 512, n_gen = 128, reps = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = cli_model_opt(&o, argc, argv, &i);
        if (rc < 0) goto usage_error;
        if (rc > 0) continue;
        const char *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s%s", bench_help, cli_model_opts_help);
            return 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 0, 1 << 20, &n_prompt))
                goto usage_error;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 0, 1 << 20, &n_gen))
                goto usage_error;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 1000, &reps))
                goto usage_error;
        } else {
            st_fail("unknown option '%s'", a);
            goto usage_error;
        }
    }
    if (!o.s.model) {
        st_fail("no model given: use -m FILE");
        goto usage_error;
    }
    if (o.s.n_ctx == 0) o.s.n_ctx = (int)(n_prompt + n_gen > 0 ? n_prompt + n_gen : 1);
    if (n_prompt + n_gen > o.s.n_ctx) {
        st_fail("-p %lld plus -n %lld do not fit -c %d", n_prompt, n_gen, o.s.n_ctx);
        goto usage_error;
    }
    if (o.s.n_batch < n_prompt) o.s.n_batch = (int)n_prompt;

    struct session ss;
    if (session_open(&o.s, &ss)) {
        fprintf(stderr, "strata: %s\n", st_last_error());
        return 1;
    }
    struct model *m = ss.model;
    struct backend *be = ss.be;
    struct context *c = ss.ctx;
    const int V = m->hp.n_vocab;
    int32_t *toks = st_xmalloc(sizeof(int32_t) * (size_t)(n_prompt + n_gen + 1));
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (long long i = 0; i < n_prompt + n_gen + 1; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((rng >> 33) % (uint64_t)V);
    }
    float *logits = st_xmalloc(sizeof(float) * (size_t)V * (n_prompt > 0 ? n_prompt : 1));
    double *pp = st_xcalloc((size_t)reps, sizeof *pp), *tg = st_xcalloc((size_t)reps, sizeof *tg);
    int status = 0;
    for (long long r = -1; r < reps && !status; r++) { // r = -1: warm-up
        if (n_prompt > 0) {
            double t0 = st_time_s();
            status = context_forward(c, toks, (int)n_prompt, 0, logits, false);
            if (r >= 0) pp[r] = (double)n_prompt / (st_time_s() - t0);
        }
        if (n_gen > 0 && !status) {
            double t0 = st_time_s();
            for (long long i = 0; i < n_gen && !status; i++)
                status = context_forward(c, &toks[n_prompt + i], 1, (int)(n_prompt + i), logits,
                                         false);
            if (r >= 0) tg[r] = (double)n_gen / (st_time_s() - t0);
        }
    }
    if (status) {
        fprintf(stderr, "strata: %s\n", st_last_error());
    } else {
        double mean, sd;
        char threads[16] = "all cores";
        if (o.s.n_threads > 0) snprintf(threads, sizeof threads, "%d", o.s.n_threads);
        printf("model %s | %s | backend %s | threads %s | weights %.1f MB\n", o.s.model,
               m->hp.arch, be->name, threads, m->weight_bytes / 1e6);
        if (n_prompt > 0) {
            stats(pp, (int)reps, &mean, &sd);
            printf("pp%-5lld %10.1f ± %.1f tok/s\n", n_prompt, mean, sd);
        }
        if (n_gen > 0) {
            stats(tg, (int)reps, &mean, &sd);
            printf("tg%-5lld %10.1f ± %.1f tok/s  (%.2f ms/tok, weights streamed at %.1f GB/s)\n",
                   n_gen, mean, sd, 1e3 / mean, mean * m->weight_bytes / 1e9);
        }
    }
    free(toks);
    free(logits);
    free(pp);
    free(tg);
    session_close(&ss);
    return status ? 1 : 0;
usage_error:
    fprintf(stderr, "strata bench: %s\nTry 'strata bench --help'.\n", st_last_error());
    return 2;
}
