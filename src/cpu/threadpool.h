// threadpool.h: a fixed set of worker threads that run one function together.
#ifndef STRATA_THREADPOOL_H
#define STRATA_THREADPOOL_H

// fn is called once per thread with ith in [0, nth); the caller runs ith = 0.
typedef void (*threadpool_fn)(void *arg, int ith, int nth);

struct threadpool;

// Starts n_threads - 1 workers (n_threads ≥ 1). Returns NULL with a message on failure.
struct threadpool *threadpool_init(int n_threads);
// Stops and joins the workers.
void threadpool_free(struct threadpool *tp);
int threadpool_size(const struct threadpool *tp);
// Runs fn on every thread and returns when all have finished.
void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *arg);

#endif
