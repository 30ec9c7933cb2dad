// server.c: start-up and shutdown of the server (the modules are listed in
// server.h; the `strata serve` command that parses its options is cli/cli_serve.c).
//
// Start-up order: the HTTP server listens first, so /health can say "loading"
// (503) while the worker thread loads the model; the main thread then waits
// for SIGINT or SIGTERM (blocked in every thread, taken with sigtimedwait) or
// for the load to fail, and shuts down: jobs cancelled, connections closed,
// the worker joined, the model freed.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"
#include "text/grammar.h"
#include "util.h"

static uint64_t random_seed(void) {
    uint64_t x;
    if (getrandom(&x, sizeof x, 0) == (ssize_t)sizeof x) return x;
    return (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^ (uint64_t)clock();
}

// The model's id: the file name without directories and ".gguf".
static void default_model_id(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
    if (n >= cap) n = cap - 1;
    memcpy(out, base, n);
    out[n] = 0;
}

int server_run(const struct server_config *cfg) {
    if (access(cfg->so.model, R_OK)) { // before listening: the load itself comes later
        fprintf(stderr, "strata serve: cannot open model '%s': %s\n", cfg->so.model, strerror(errno));
        return 1;
    }
    struct server *s = st_xcalloc(1, sizeof *s);
    s->cfg = *cfg;
    if (s->cfg.alias)
        snprintf(s->model_id, sizeof s->model_id, "%s", s->cfg.alias);
    else
        default_model_id(s->cfg.so.model, s->model_id, sizeof s->model_id);
    s->created = (long long)time(NULL);
    s->rng = random_seed();
    s->state = SRV_LOADING;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->json_mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);

    // Every thread started from here inherits the blocked signals; the main
    // thread takes them with sigtimedwait.
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    signal(SIGPIPE, SIG_IGN); // a vanished client is noticed by its socket, not by a signal

    int status = 1;
    bool worker_started = false;
    pthread_t worker;
    if (srv_http_start(s)) {
        fprintf(stderr, "strata serve: %s\n", st_last_error());
        goto out;
    }
    const bool v6 = strchr(s->cfg.host, ':') != NULL;
    fprintf(stderr, "strata serve: listening on http://%s%s%s:%d/ (loading %s)\n", v6 ? "[" : "", s->cfg.host,
            v6 ? "]" : "", s->port, s->cfg.so.model);
    if (pthread_create(&worker, NULL, srv_worker_main, s)) {
        fprintf(stderr, "strata serve: cannot start the worker thread\n");
        goto out;
    }
    worker_started = true;
    const struct timespec step = {0, 200 * 1000 * 1000};
    for (;;) {
        int sig = sigtimedwait(&set, NULL, &step);
        if (sig > 0) {
            fprintf(stderr, "strata serve: %s: shutting down\n", strsignal(sig));
            status = 0;
            break;
        }
        if (s->state == SRV_FAILED) {
            fprintf(stderr, "strata serve: %s\n", s->load_error);
            break;
        }
    }
out:
    srv_stop(s);
    srv_http_stop(s);
    if (worker_started) pthread_join(worker, NULL);
    srv_slots_free(s);
    grammar_vocab_free(s->gvocab);
    session_close(&s->sess);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->json_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return status;
}
