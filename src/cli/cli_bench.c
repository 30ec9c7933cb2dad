// cli_bench.c: `strata bench` — prompt processing (ppN) and generation (tgN)
// speed, llama-bench style: mean ± standard deviation over repetitions, with
// the weight-streaming bandwidth generation achieves.
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "cpu/membw.h"
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
    "  -np, --parallel N      generate for N sequences at once, one batch of N tokens per\n"
    "                         step, each after its own copy of the prompt; tgN counts the\n"
    "                         tokens of all of them (default: 1)\n"
    "  -r, --repetitions N    repetitions after one warm-up (default: 3)\n"
    "      --busy             then measure again with a competing process spinning on\n"
    "                         one core (the last this process may use), and print both\n"
    "      --ceiling          also measure the host memory's read bandwidth with the same\n"
    "                         threads (a 1 GiB buffer; CPU backends) and print tgN's\n"
    "                         fraction of the floor it sets: weight bytes / bandwidth\n"
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

// Runs the warm-up and reps repetitions; pp[r], tg[r] get tokens/s. With
// several sequences the prompt runs in the first; the warm-up also puts it in
// the others, and each generation step is one batch of a token per sequence.
static int measure(struct context **seq, int n_seq, const int32_t *toks, long long n_prompt, long long n_gen,
                   long long reps, float *logits, double *pp, double *tg) {
    int status = 0;
    struct forward_span *sp = st_xcalloc((size_t)n_seq, sizeof *sp);
    for (long long r = -1; r < reps && !status; r++) { // r = -1: warm-up
        if (n_prompt > 0) {
            double t0 = st_time_s();
            status = context_forward(seq[0], toks, (int)n_prompt, 0, logits, false);
            if (r >= 0) pp[r] = (double)n_prompt / (st_time_s() - t0);
            for (int s = 1; r < 0 && s < n_seq && !status; s++)
                status = context_forward(seq[s], toks, (int)n_prompt, 0, logits, false);
        }
        if (n_gen > 0 && !status) {
            double t0 = st_time_s();
            for (long long i = 0; i < n_gen && !status; i++) {
                for (int s = 0; s < n_seq; s++)
                    sp[s] = (struct forward_span){seq[s], &toks[n_prompt + i], 1, (int)(n_prompt + i),
                                                  SPAN_LOGITS_LAST};
                status = context_forward_batch(seq[0], sp, n_seq, logits);
            }
            if (r >= 0) tg[r] = (double)(n_gen * n_seq) / (st_time_s() - t0);
        }
    }
    free(sp);
    return status;
}

// tg counts the tokens of n_par sequences; a step (one weight read) makes n_par.
// With a read ceiling (bytes/s, --ceiling) the floor line follows.
static void report(const char *tag, const struct model *m, long long n_prompt, long long n_gen,
                   long long n_par, const double *pp, const double *tg, long long reps, double ceiling) {
    double mean, sd;
    if (n_prompt > 0) {
        stats(pp, (int)reps, &mean, &sd);
        printf("pp%-5lld %10.1f ± %.1f tok/s%s\n", n_prompt, mean, sd, tag);
    }
    if (n_gen > 0) {
        stats(tg, (int)reps, &mean, &sd);
        printf("tg%-5lld %10.1f ± %.1f tok/s  (%.2f ms/%s, weights streamed at %.1f GB/s)%s\n", n_gen, mean,
               sd, 1e3 * (double)n_par / mean, n_par > 1 ? "step" : "tok",
               mean / (double)n_par * m->weight_bytes / 1e9, tag);
        if (ceiling > 0) {
            const double floor_tps = ceiling / (double)m->weight_bytes * (double)n_par;
            printf("ceiling  %.1f GB/s read: tg floor %.1f tok/s, tg%lld at %.0f%% of it%s\n", ceiling / 1e9,
                   floor_tps, n_gen, 100 * mean / floor_tps, tag);
        }
    }
}

// The read ceiling for --ceiling (CPU backends): bytes/s, or -1 with a message.
static double ceiling_of(const struct backend *be, int n_threads) {
    if (strncmp(be->name, "cpu", 3))
        return st_fail("--ceiling measures host memory, and the %s backend's weights are on its device "
                       "(test_ops --perf measures a GPU's read bandwidth)",
                       be->name);
    return cpu_read_bandwidth(n_threads, (size_t)1 << 30, 3);
}

// A child process that spins on the last CPU this process may run on; *cpu
// gets that CPU. Returns its pid, or -1 with a message.
static pid_t busy_start(int *cpu) {
    cpu_set_t set;
    *cpu = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int i = 0; i < CPU_SETSIZE; i++)
            if (CPU_ISSET(i, &set)) *cpu = i;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) return st_fail("--busy: cannot start the competing process");
    if (pid == 0) { // only async-signal-safe calls here: the parent has threads
        CPU_ZERO(&set);
        CPU_SET(*cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
        for (volatile unsigned long i = 0;; i++) {}
    }
    return pid;
}

static void busy_stop(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int cli_bench(int argc, char **argv) {
    struct cli_model_opts o;
    cli_model_opts_default(&o);
    long long n_prompt = 512, n_gen = 128, reps = 3, n_par = 1;
    bool busy = false, ceiling = false;
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
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 0, 1 << 20, &n_gen)) goto usage_error;
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 256, &n_par)) goto usage_error;
        } else if (!strcmp(a, "--busy")) {
            busy = true;
        } else if (!strcmp(a, "--ceiling")) {
            ceiling = true;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 1000, &reps)) goto usage_error;
        } else {
            st_fail("unknown option '%s'", a);
            goto usage_error;
        }
    }
    if (!o.s.model) {
        st_fail("no model given: use -m FILE");
        goto usage_error;
    }
    if (n_prompt == 0 && n_gen == 0) {
        st_fail(
            "-p 0 and -n 0 leave nothing to measure: give a prompt length (-p) or tokens to generate (-n)");
        goto usage_error;
    }
    if (o.s.n_ctx == 0) o.s.n_ctx = (int)(n_prompt + n_gen);
    if (n_prompt + n_gen > o.s.n_ctx) {
        st_fail("-p %lld plus -n %lld do not fit -c %d", n_prompt, n_gen, o.s.n_ctx);
        goto usage_error;
    }
    if (o.s.n_batch < n_prompt) o.s.n_batch = (int)n_prompt;
    if (o.s.n_batch < n_par) o.s.n_batch = (int)n_par;
    o.s.n_seq = (int)n_par;

    struct session ss;
    if (session_open(&o.s, &ss)) {
        fprintf(stderr, "strata: %s\n", st_last_error());
        return 1;
    }
    struct model *m = ss.model;
    struct backend *be = ss.be;
    const int V = m->hp.n_vocab;
    int32_t *toks = st_xmalloc(sizeof(int32_t) * (size_t)(n_prompt + n_gen + 1));
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (long long i = 0; i < n_prompt + n_gen + 1; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((rng >> 33) % (uint64_t)V);
    }
    float *logits = backend_host_alloc(be, sizeof(float) * (size_t)V * (size_t)(n_par > 1 ? n_par : 1));
    if (!logits) {
        fprintf(stderr, "strata: %s\n", st_last_error());
        free(toks);
        session_close(&ss);
        return 1;
    }
    double *pp = st_xcalloc((size_t)reps, sizeof *pp), *tg = st_xcalloc((size_t)reps, sizeof *tg);
    int status = measure(ss.seq, ss.n_seq, toks, n_prompt, n_gen, reps, logits, pp, tg);
    double ceil_bps = 0;
    if (!status && ceiling && (ceil_bps = ceiling_of(be, o.s.n_threads)) < 0) status = -1;
    if (!status) {
        char threads[16] = "all cores";
        if (o.s.n_threads > 0) snprintf(threads, sizeof threads, "%d", o.s.n_threads);
        char par[48] = "";
        if (n_par > 1) snprintf(par, sizeof par, " | %lld sequences", n_par);
        printf("model %s | %s | backend %s | threads %s | weights %.1f MB%s\n", o.s.model, m->hp.arch,
               be->name, threads, m->weight_bytes / 1e6, par);
        report("", m, n_prompt, n_gen, n_par, pp, tg, reps, ceil_bps);
    }
    if (!status && busy) {
        int cpu;
        const pid_t pid = busy_start(&cpu);
        if (pid < 0) {
            status = -1;
        } else {
            status = measure(ss.seq, ss.n_seq, toks, n_prompt, n_gen, reps, logits, pp, tg);
            if (!status && ceiling && (ceil_bps = ceiling_of(be, o.s.n_threads)) < 0) status = -1;
            busy_stop(pid);
            char tag[64];
            snprintf(tag, sizeof tag, "  busy: another process spins on CPU %d", cpu);
            if (!status) report(tag, m, n_prompt, n_gen, n_par, pp, tg, reps, ceil_bps);
        }
    }
    if (status) fprintf(stderr, "strata: %s\n", st_last_error());
    free(toks);
    backend_host_free(be, logits);
    free(pp);
    free(tg);
    session_close(&ss);
    return status ? 1 : 0;
usage_error:
    fprintf(stderr, "strata bench: %s\nTry 'strata bench --help'.\n", st_last_error());
    return 2;
}
