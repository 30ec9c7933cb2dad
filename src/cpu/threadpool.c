// threadpool.c: workers wait for a generation counter to move. They spin
// briefly first (ops in a decode step follow each other within microseconds),
// then sleep on a condition variable so an idle engine costs no CPU.
#include "cpu/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util.h"

#define SPIN_ITERS 20000

struct threadpool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_uint generation; // bumped for each job
    atomic_int pending;     // workers still running the current job
    atomic_bool stop;
    threadpool_fn fn;
    void *arg;
};

struct worker_arg {
    struct threadpool *tp;
    int ith;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct threadpool *tp = wa.tp;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
               !atomic_load(&tp->stop) && spins < SPIN_ITERS) {
            cpu_relax();
            spins++;
        }
        if (g == seen && !atomic_load(&tp->stop)) {
            pthread_mutex_lock(&tp->mu);
            while ((g = atomic_load(&tp->generation)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->wake, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        tp->fn(tp->arg, wa.ith, tp->n);
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_release);
    }
}

struct threadpool *threadpool_init(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    struct threadpool *tp = st_xcalloc(1, sizeof *tp);
    tp->n = n_threads;
    tp->threads = st_xcalloc((size_t)n_threads, sizeof *tp->threads);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = st_xmalloc(sizeof *wa);
        wa->tp = tp;
        wa->ith = i;
        if (pthread_create(&tp->threads[i], NULL, worker_main, wa)) {
            free(wa);
            tp->n = i;
            threadpool_free(tp);
            st_fail("cannot start worker thread %d of %d", i, n_threads);
            return NULL;
        }
    }
    return tp;
}

void threadpool_free(struct threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->wake);
    free(tp->threads);
    free(tp);
}

int threadpool_size(const struct threadpool *tp) { return tp->n; }

void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *arg) {
    if (tp->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store(&tp->pending, tp->n - 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    fn(arg, 0, tp->n);
    while (atomic_load_explicit(&tp->pending, memory_order_acquire) > 0) cpu_relax();
}
