// threadpool.h: a fixed set of worker threads that share the chunks of one job.
//
// A job is split into chunks; the calling thread and the workers claim chunks
// one at a time until none is left, so a worker that the OS has descheduled
// delays the job by at most the one chunk it holds, never by a fixed share.
// Workers spin briefly between jobs, then sleep (futex), so an idle engine and a
// machine shared with other work cost no CPU; where jobs come at a steady
// period (a server's sampling after each step on a GPU), a worker wakes shortly
// before the next one is due, so that it does not miss it; a worker that the scheduler keeps
// waiting to run (its core busy with other work) sits out jobs for a while, so
// that they run on the threads whose cores are free.
#ifndef STRATA_THREADPOOL_H
#define STRATA_THREADPOOL_H

#include <stdint.h>

// fn is called once for each chunk in [0, n_chunks), by whichever thread claims
// it; ith in [0, threadpool_size) names that thread (0: the caller), so per-thread
// scratch may be indexed by it. Chunks of one job may run concurrently.
typedef void (*threadpool_chunk_fn)(void *arg, int chunk, int ith);
// The older form: fn is called once for each ith in [0, nth), nth = threadpool_size.
// Each ith runs exactly once (by any thread), never concurrently with itself.
typedef void (*threadpool_fn)(void *arg, int ith, int nth);

struct threadpool;

// Starts n_threads - 1 workers (n_threads ≥ 1). Returns NULL with a message on failure.
struct threadpool *threadpool_init(int n_threads);
// Stops and joins the workers.
void threadpool_free(struct threadpool *tp);
int threadpool_size(const struct threadpool *tp);
// Workers sitting out jobs now because their cores are contended: 0 .. size - 1.
int threadpool_sitting(const struct threadpool *tp);
// Tests: where workers read how long the scheduler has kept them waiting to run
// (a count that only grows, in ns) instead of /proc/thread-self/schedstat, from
// their next look on. NULL: the real source again.
typedef int64_t (*threadpool_waited_fn)(void);
void threadpool_set_waited_source(threadpool_waited_fn fn);
// Runs fn on every chunk and returns when all have finished. Not reentrant:
// one job at a time, started from one thread.
void threadpool_run_chunks(struct threadpool *tp, threadpool_chunk_fn fn, void *arg, int n_chunks);
// Runs fn for every ith in [0, threadpool_size) and returns when all have finished.
void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *arg);

// Cores this process may run on (sched_getaffinity), at least 1: the default
// thread count.
int threadpool_default_threads(void);

#endif
