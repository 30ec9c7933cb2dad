// test_threadpool.c: the CPU thread pool (src/cpu/threadpool.c).
//
// Every chunk of every job must run exactly once, with a thread index in range,
// whatever the chunk count (0, 1, fewer or many more than threads), whether the
// workers are spinning or asleep when a job arrives (pauses longer than their
// spin window), and when chunks take very different times; the caller must not
// return before the last chunk has finished.
#include "test.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu/threadpool.h"
#include "util.h"

#define MAX_CHUNKS 700

struct job {
    atomic_int runs[MAX_CHUNKS];
    atomic_int bad_ith;
    atomic_int in_flight; // chunks started and not yet finished
    int n_threads;
    int sleep_every; // chunk c sleeps 200 µs when c % sleep_every == 0 (0: never)
    atomic_int seen_ith[16];
};

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void chunk_fn(void *arg, int chunk, int ith) {
    struct job *j = arg;
    atomic_fetch_add(&j->in_flight, 1);
    if (ith < 0 || ith >= j->n_threads)
        atomic_fetch_add(&j->bad_ith, 1);
    else
        atomic_fetch_add(&j->seen_ith[ith], 1);
    if (j->sleep_every && chunk % j->sleep_every == 0) sleep_us(200);
    atomic_fetch_add(&j->runs[chunk], 1);
    atomic_fetch_sub(&j->in_flight, 1);
}

static void compat_fn(void *arg, int ith, int nth) {
    struct job *j = arg;
    if (nth != j->n_threads || ith < 0 || ith >= nth)
        atomic_fetch_add(&j->bad_ith, 1);
    else
        atomic_fetch_add(&j->runs[ith], 1);
}

static void job_reset(struct job *j, int n_threads, int sleep_every) {
    memset(j, 0, sizeof *j);
    j->n_threads = n_threads;
    j->sleep_every = sleep_every;
}

// Checks that chunks [0, n) each ran once and nothing else ran.
static bool job_ok(struct job *j, int n, const char *what) {
    int wrong = 0, first = -1;
    for (int c = 0; c < MAX_CHUNKS; c++) {
        const int want = c < n ? 1 : 0;
        if (atomic_load(&j->runs[c]) != want) {
            wrong++;
            if (first < 0) first = c;
        }
    }
    CHECK(wrong == 0, "%s: %d chunks ran a wrong number of times (first: chunk %d ran %d times)", what, wrong,
          first, first >= 0 ? atomic_load(&j->runs[first]) : 0);
    CHECK(atomic_load(&j->bad_ith) == 0, "%s: thread index out of range", what);
    CHECK(atomic_load(&j->in_flight) == 0, "%s: returned with %d chunks still running", what,
          atomic_load(&j->in_flight));
    return wrong == 0;
}

static uint64_t rng = 12345;

static void test_chunks_once(void) {
    static const int threads[] = {1, 2, 3, 4, 8};
    for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
        const int nt = threads[k];
        struct threadpool *tp = threadpool_init(nt);
        CHECK(tp != NULL, "threadpool_init(%d): %s", nt, st_last_error());
        if (!tp) continue;
        CHECK(threadpool_size(tp) == nt, "size %d, want %d", threadpool_size(tp), nt);
        static struct job j;
        for (int rep = 0; rep < 400; rep++) {
            const int n = rep < 4 ? rep : (int)(st_splitmix64(&rng) % MAX_CHUNKS);
            job_reset(&j, nt, rep % 7 == 0 ? 13 : 0);
            threadpool_run_chunks(tp, chunk_fn, &j, n);
            char what[64];
            snprintf(what, sizeof what, "threads %d job %d chunks %d", nt, rep, n);
            if (!job_ok(&j, n, what)) break;
            // now and then wait past the workers' spin window, so they are asleep
            if (rep % 50 == 49) sleep_us(2000);
        }
        threadpool_free(tp);
    }
}

// Jobs back to back with no pause and chunk counts that grow and shrink: a
// worker late from one job must not claim a chunk of it past its end once the
// next, larger job is being published (it would run the new job's chunk twice).
static void test_back_to_back(void) {
    static const int threads[] = {2, 3, 4};
    static struct job jobs[2];
    for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
        const int nt = threads[k];
        struct threadpool *tp = threadpool_init(nt);
        CHECK(tp != NULL, "threadpool_init(%d): %s", nt, st_last_error());
        if (!tp) continue;
        for (int rep = 0; rep < 30000; rep++) {
            const int n = 2 + (rep % 4) * (rep % 3 + 1); // 2 .. 11, up and down
            struct job *j = &jobs[rep & 1];
            job_reset(j, nt, 0);
            threadpool_run_chunks(tp, chunk_fn, j, n);
            char what[64];
            snprintf(what, sizeof what, "threads %d job %d chunks %d", nt, rep, n);
            if (!job_ok(j, n, what)) break;
        }
        threadpool_free(tp);
    }
}

static void test_compat_run(void) {
    for (int nt = 1; nt <= 4; nt++) {
        struct threadpool *tp = threadpool_init(nt);
        if (!tp) {
            CHECK(0, "threadpool_init: %s", st_last_error());
            continue;
        }
        static struct job j;
        for (int rep = 0; rep < 200; rep++) {
            job_reset(&j, nt, 0);
            threadpool_run(tp, compat_fn, &j);
            char what[64];
            snprintf(what, sizeof what, "threadpool_run threads %d rep %d", nt, rep);
            if (!job_ok(&j, nt, what)) break;
        }
        threadpool_free(tp);
    }
}

// Slow chunks are shared out: with 4 threads and 64 chunks of 200 µs, workers run
// some of them (wall time well under the serial 12.8 ms is not asserted: the
// machine may be busy), and every thread index stays in range.
static void test_workers_share(void) {
    struct threadpool *tp = threadpool_init(4);
    if (!tp) {
        CHECK(0, "threadpool_init: %s", st_last_error());
        return;
    }
    static struct job j;
    job_reset(&j, 4, 1);
    threadpool_run_chunks(tp, chunk_fn, &j, 64);
    job_ok(&j, 64, "slow chunks");
    int by_workers = 0;
    for (int i = 1; i < 4; i++) by_workers += atomic_load(&j.seen_ith[i]);
    CHECK(by_workers > 0, "no chunk of 64 slow ones ran on a worker");
    threadpool_free(tp);
}

// Chunks that keep the CPU busy for chunk_us each.
static atomic_int chunk_us;
static void busy_chunk(void *arg, int chunk, int ith) {
    struct job *j = arg;
    const double t0 = st_time_s(), us = atomic_load(&chunk_us);
    if (ith < 0 || ith >= j->n_threads)
        atomic_fetch_add(&j->bad_ith, 1);
    else
        atomic_fetch_add(&j->seen_ith[ith], 1);
    while ((st_time_s() - t0) * 1e6 < us) {}
    atomic_fetch_add(&j->runs[chunk], 1);
}

// Runs jobs of busy chunks, every 64th with chunks of 300 µs (a worker that
// takes one is in the job long enough to look at its waiting), the others
// of `us`, until `until` holds or `seconds` pass; false if a job went wrong.
static bool run_busy_jobs(struct threadpool *tp, int us, bool (*until)(struct threadpool *), double seconds) {
    static struct job j;
    const double t0 = st_time_s();
    for (int rep = 0; st_time_s() - t0 < seconds; rep++) {
        const int n = 4 + rep % 5;
        atomic_store(&chunk_us, rep % 64 == 0 ? 300 : us);
        job_reset(&j, threadpool_size(tp), 0);
        threadpool_run_chunks(tp, busy_chunk, &j, n);
        char what[64];
        snprintf(what, sizeof what, "job %d chunks %d", rep, n);
        if (!job_ok(&j, n, what)) return false;
        if (until && until(tp)) break;
    }
    return true;
}

static bool someone_sits(struct threadpool *tp) { return threadpool_sitting(tp) > 0; }
static bool nobody_sits(struct threadpool *tp) { return threadpool_sitting(tp) == 0; }

// Fake run-queue waits: half of the time passed (a core shared with a busy
// process), or none.
static int64_t waited_half(void) { return (int64_t)(st_time_s() * 0.5e9); }
static int64_t waited_none(void) { return 0; }

// A worker kept waiting half the time while the jobs are short sits out (and
// every chunk still runs once, on the caller); with jobs long enough for its
// share to pay, it does not; once it no longer waits, it joins again; and a
// pool freed while one sits out stops it.
static void test_contended_workers_sit_out(void) {
    threadpool_set_waited_source(waited_half);
    struct threadpool *tp = threadpool_init(2);
    CHECK(tp != NULL, "threadpool_init: %s", st_last_error());
    if (tp) {
        run_busy_jobs(tp, 1000, someone_sits, 0.5); // jobs of a millisecond or more: its share pays
        CHECK(threadpool_sitting(tp) == 0, "a waiting worker sat out of jobs of 1 ms");
        threadpool_free(tp);
    }
    tp = threadpool_init(2);
    CHECK(tp != NULL, "threadpool_init: %s", st_last_error());
    if (tp) {
        run_busy_jobs(tp, 5, someone_sits, 3.0);
        CHECK(threadpool_sitting(tp) == 1, "a worker waiting half the time did not sit out of short jobs");
        threadpool_free(tp); // returns (the test's alarm catches a worker that never stops)
    }
    tp = threadpool_init(2);
    if (tp) {
        run_busy_jobs(tp, 5, someone_sits, 3.0);
        threadpool_set_waited_source(waited_none); // read by the worker at its next look
        run_busy_jobs(tp, 5, nobody_sits, 3.0);
        CHECK(threadpool_sitting(tp) == 0, "the worker still sits out 3 s after its waits stopped");
        threadpool_free(tp);
    }
    threadpool_set_waited_source(NULL);
}

static void test_default_threads(void) {
    const int n = threadpool_default_threads();
    CHECK(n >= 1 && n <= 4096, "threadpool_default_threads() = %d", n);
}

// Spins for us microseconds (the caller's pause between jobs, as a server's
// step spends it waiting for the device).
static void pause_us(double us) {
    const double t0 = st_time_s();
    while ((st_time_s() - t0) * 1e6 < us) {}
}

// Jobs at a steady period, then early, on time, late, after a pause that ends
// the period, and steady again: every chunk runs once whether a worker is in
// its timed sleep, spinning across the due time, or asleep for good.
static void test_periodic_jobs(void) {
    static const double pauses[] = {1500, 1500, 1500, 1500, 1500,  1500, 1700, 1500, 300, 1500,
                                    3000, 1500, 150,  1500, 25000, 1500, 1500, 1500, 900, 1500};
    static struct job j;
    for (int nt = 2; nt <= 4; nt += 2) {
        struct threadpool *tp = threadpool_init(nt);
        if (!tp) {
            CHECK(0, "threadpool_init: %s", st_last_error());
            return;
        }
        for (int rep = 0; rep < 2 * (int)(sizeof pauses / sizeof *pauses); rep++) {
            pause_us(pauses[rep % (sizeof pauses / sizeof *pauses)]);
            const int n = 2 + rep % 8;
            job_reset(&j, nt, 0);
            atomic_store(&chunk_us, 20);
            threadpool_run_chunks(tp, busy_chunk, &j, n);
            char what[64];
            snprintf(what, sizeof what, "periodic job %d, %d threads", rep, nt);
            if (!job_ok(&j, n, what)) break;
        }
        threadpool_free(tp);
    }
}

// --perf: jobs of one 20 µs chunk a thread after pauses of each length, as a
// server samples its sequences after each step: the time a job takes and
// the share of chunks the workers ran (the caller runs them all while the
// workers are still waking up).
static void perf(void) {
    static const double pauses[] = {50, 300, 1500, 5000};
    static struct job j;
    const int cores = threadpool_default_threads();
    printf("| threads | pause us | job us (one chunk: 20) | chunks on workers |\n|---|---|---|---|\n");
    for (int nt = 2; nt <= 8 && nt <= cores; nt *= 2) {
        struct threadpool *tp = threadpool_init(nt);
        if (!tp) {
            CHECK(0, "threadpool_init: %s", st_last_error());
            return;
        }
        atomic_store(&chunk_us, 20);
        for (size_t k = 0; k < sizeof pauses / sizeof *pauses; k++) {
            double sum = 0;
            int on_workers = 0;
            const int jobs = 300;
            for (int rep = 0; rep < jobs; rep++) {
                pause_us(pauses[k]);
                job_reset(&j, nt, 0);
                const double t0 = st_time_s();
                threadpool_run_chunks(tp, busy_chunk, &j, nt);
                sum += st_time_s() - t0;
                for (int i = 1; i < nt; i++) on_workers += atomic_load(&j.seen_ith[i]);
            }
            printf("| %d | %.0f | %.1f | %.0f%% |\n", nt, pauses[k], sum / jobs * 1e6,
                   100.0 * on_workers / (jobs * nt));
        }
        threadpool_free(tp);
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--perf")) {
        perf();
        TEST_END();
    }
    if (argc > 1) {
        fprintf(stderr, "usage: %s [--perf]\n", argv[0]);
        return 2;
    }
    alarm(120); // a lost chunk would make the pool wait forever: fail instead of hanging
    RUN(test_chunks_once);
    RUN(test_back_to_back);
    RUN(test_compat_run);
    RUN(test_workers_share);
    RUN(test_contended_workers_sit_out);
    RUN(test_periodic_jobs);
    RUN(test_default_threads);
    TEST_END();
}
