// threadpool.c: see threadpool.h.
//
// One job at a time. The caller publishes fn, arg and the chunk count, then a
// 64-bit claim word holding (job id << 32 | next chunk); every thread claims a
// chunk by compare-and-swap on that word, so a thread that wakes late for an old
// job cannot take a chunk of the next one (its job id no longer matches). The
// caller returns when the finished-chunk count reaches the chunk count.
//
// Waiting, both for the next job (workers) and for the last chunks (caller),
// spins with `pause` for a bounded time and then sleeps on a futex: in a decode
// step jobs follow each other within microseconds, so spinning keeps the wake-up
// latency off the critical path, while sleeping keeps a worker whose core is
// shared with another process from burning that core's time between jobs.
// Where jobs come at a steady period of up to 20 ms (the caller's intervals,
// averaged), a worker that found no job in its spin sleeps only until shortly
// before the next one is due, then spins across that time: otherwise, with
// jobs a few ms apart, every worker is asleep when a job arrives, and the
// caller runs most chunks alone while they wake (on a 2-core machine, jobs of
// two 20 µs chunks 1.5 ms apart took 45 µs instead of 22).
//
// On a machine shared with other work, a worker whose own core is contended
// costs the jobs it joins: the caller wakes it for every job, and once in a
// while it is preempted holding a chunk and the whole job waits for the other
// process's time slice. So each worker watches itself (watch_self): every
// 20 ms or so it reads how long the scheduler has kept it waiting to run
// (/proc/thread-self/schedstat), and if meanwhile it took part in a job for
// longer than a preemption-free chunk explains (or saw a gap while
// spinning), waited a quarter of that time, and the jobs were short (under
// 100 µs on average, as in one token's decode step, where waking it and
// waiting for it cost more than its share), it sits out (sit_out): it takes no chunks and is not woken, so the jobs run on the
// threads whose cores are free, alone on the caller when every worker sits
// out. Longer jobs keep it: half a core still pays its way there. After the
// sit-out it joins again and looks again; caught again straight away, it sits
// out twice as long. Without the file it counts its involuntary context
// switches instead. Only the worker whose core is contended stops joining:
// a pool-wide rule that stopped every worker spinning for 50 ms after any
// sign of a preemption cost a 2-core server about 9% of its rate at 1 and at
// 8 clients (its own connection threads set it off every step) and gained
// nothing measurable beside a busy process (docs/PERF.md).
#include "cpu/threadpool.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "util.h"

#define WORKER_SPIN_NS 100000    // a worker sleeps after 100 µs without a job
#define CALLER_SPIN_NS 50000     // the caller sleeps after 50 µs waiting for chunks
#define GAP_NS 200000            // a gap this long between two looks while spinning means a preemption
#define SUSPECT_NS 200000        // a worker in a job this long looks at its run-queue wait
#define SIT_OUT_NS 50000000      // a worker kept waiting to run sits out jobs for 50 ms,
#define SIT_OUT_MAX_NS 800000000 // twice as long each time in a row, up to 0.8 s
#define WAITED_NS 100000         // ... at least 100 µs and a quarter
#define LOOK_NS 20000000         // ... of 20 ms or more, while jobs
#define SHORT_JOB_NS 100000      // ... take under 100 µs on average
#define LEAD_NS 150000           // a worker wakes this long before a job due at a steady period
#define PERIOD_MAX_NS 20000000   // intervals between jobs longer than this have no period

struct threadpool {
    int n;
    pthread_t *threads;
    uint32_t job_id; // caller-only copy of the last published job id
    // shared state, each hot word on its own cache line
    _Alignas(64) _Atomic uint64_t claim; // (job id << 32) | next unclaimed chunk
    _Alignas(64) atomic_int done;        // chunks of the current job finished
    atomic_int caller_sleeping;          // the caller waits on `done` in the kernel
    _Alignas(64) atomic_uint gen;        // job id of the newest job (workers' futex word)
    atomic_int sleepers;                 // workers waiting on `gen` in the kernel
    atomic_int sitting;                  // workers sitting out (see watch_self)
    _Atomic int64_t jobs, job_ns;        // jobs shared out, and their wall time (ns)
    atomic_bool stop;
    _Atomic(threadpool_chunk_fn) fn;
    _Atomic(void *) arg;
    atomic_int n_chunks;
    _Atomic int64_t last_start; // when the newest job was published (ns)
    _Atomic int64_t period;     // the recent interval between jobs (ns), 0 if none steady
    // threadpool_run's adapter
    threadpool_fn compat_fn;
    void *compat_arg;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Sleeps while *addr == val (spurious wake-ups allowed), for at most ns
// nanoseconds when ns ≥ 0.
static void futex_wait(void *addr, int val, int64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
#ifdef __linux__
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, ns >= 0 ? &ts : NULL, NULL, 0);
#else
    (void)addr, (void)val;
    if (ns < 0 || ns > 50000) ts = (struct timespec){0, 50000};
    nanosleep(&ts, NULL);
#endif
}

static void futex_wake_all(void *addr) {
#ifdef __linux__
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

// Claims and runs chunks of job `id` until none is left or a newer job replaced it.
static void work(struct threadpool *tp, uint32_t id, int ith) {
    for (;;) {
        uint64_t v = atomic_load_explicit(&tp->claim, memory_order_acquire);
        if ((uint32_t)(v >> 32) != id) return;
        const uint32_t next = (uint32_t)v;
        // acquire: a chunk count of the next job comes with that job's closed claim word
        // (below), so the compare-and-swap cannot then succeed on this job's old word
        if (next >= (uint32_t)atomic_load_explicit(&tp->n_chunks, memory_order_acquire)) return;
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue;
        // the chunk is ours: job `id` cannot end, nor fn/arg change, before it is done
        threadpool_chunk_fn fn = atomic_load_explicit(&tp->fn, memory_order_relaxed);
        fn(atomic_load_explicit(&tp->arg, memory_order_relaxed), (int)next, ith);
        const int total = atomic_load_explicit(&tp->n_chunks, memory_order_relaxed);
        if (atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel) + 1 == total &&
            atomic_load(&tp->caller_sleeping))
            futex_wake_all(&tp->done);
    }
}

struct worker_arg {
    struct threadpool *tp;
    int ith;
};

// What a worker knows of its own scheduling (watch_self).
struct self_watch {
    int fd;               // /proc/thread-self/schedstat, or -1
    int64_t waited;       // run-queue wait (ns), or involuntary context switches, when last read
    int64_t at;           // when last read
    int64_t jobs, job_ns; // the pool's jobs and job_ns then
    bool suspect;         // a suspect job or gap since then
};

// The time this thread has spent runnable but not running (ns), from
// schedstat's second field; without the file (fd < 0), its involuntary
// context switches. -1 if neither can be read. (A test's source instead.)
static _Atomic(threadpool_waited_fn) waited_source;

void threadpool_set_waited_source(threadpool_waited_fn fn) { atomic_store(&waited_source, fn); }

static int64_t self_waited(int fd) {
    const threadpool_waited_fn source = atomic_load_explicit(&waited_source, memory_order_relaxed);
    if (source) return source();
    if (fd >= 0) {
        char buf[96];
        const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        long long run, wait;
        if (n > 0) {
            buf[n] = 0;
            if (sscanf(buf, "%lld %lld", &run, &wait) == 2) return wait;
        }
        return -1;
    }
#ifdef RUSAGE_THREAD
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) ? -1 : (int64_t)ru.ru_nivcsw;
#else
    return -1;
#endif
}

// Whether the worker's core is contended, judged over LOOK_NS or more: called
// after every job and on every gap seen while spinning, with `suspect` true
// when the worker took part in the job for longer than a preemption-free
// chunk explains, or saw the gap. Once LOOK_NS have passed since the last
// look, it looks again: true if something was suspect meanwhile, the
// scheduler kept the worker from running for a quarter or more of that time
// (without schedstat: if it was preempted at all), and the pool's jobs took
// under SHORT_JOB_NS on average. A single preemption (a
// kernel thread, a neighbour's burst) weighs little over that window; a core
// shared with a busy process keeps a worker waiting about half the time.
static bool watch_self(struct self_watch *w, int64_t now, bool suspect, struct threadpool *tp) {
    w->suspect |= suspect;
    if (now - w->at < LOOK_NS) return false;
    const int64_t waited = self_waited(w->fd);
    if (waited < 0) return false;
    const int64_t jobs = atomic_load_explicit(&tp->jobs, memory_order_relaxed);
    const int64_t job_ns = atomic_load_explicit(&tp->job_ns, memory_order_relaxed);
    const int64_t dw = waited - w->waited, dt = now - w->at, dj = jobs - w->jobs, djt = job_ns - w->job_ns;
    const bool was_suspect = w->suspect;
    w->waited = waited, w->at = now, w->jobs = jobs, w->job_ns = job_ns;
    w->suspect = false;
    const bool waits = w->fd >= 0 ? dw * 4 >= dt && dw >= WAITED_NS : dw > 0;
    return was_suspect && waits && dj > 0 && djt < dj * SHORT_JOB_NS;
}

// Starts a fresh window: the wait read now, nothing suspect yet.
static void watch_start(struct self_watch *w) {
    w->waited = self_waited(w->fd);
    w->at = now_ns();
    w->suspect = false;
}

// Starts a sit-out: twice the last one's length if the worker was caught again
// within a sit-out's length of rejoining (the contention goes on), else SIT_OUT_NS.
static void sit_out(struct threadpool *tp, int64_t *until, int64_t *len, int64_t rejoined) {
    const int64_t now = now_ns();
    *len = rejoined && now - rejoined < *len ? (*len * 2 < SIT_OUT_MAX_NS ? *len * 2 : SIT_OUT_MAX_NS)
                                             : SIT_OUT_NS;
    *until = now + *len;
    atomic_fetch_add(&tp->sitting, 1);
}

// Spins until a job newer than `seen` is published (into *g), the pool
// stops, or the clock reaches `until`; true if it saw a gap that only a
// preemption explains.
static bool spin(struct threadpool *tp, unsigned seen, unsigned *g, int64_t until) {
    int64_t t = now_ns();
    for (int spins = 1;; spins++) {
        cpu_relax();
        *g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        if (*g != seen || atomic_load(&tp->stop)) return false;
        if (spins & 63) continue;
        const int64_t t1 = now_ns();
        if (t1 - t > GAP_NS) return true; // descheduled while spinning: the core is shared
        t = t1;
        if (t1 > until) return false;
    }
}

static void *worker_main(void *p) {
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct threadpool *tp = wa.tp;
    struct self_watch self = {.fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)};
    watch_start(&self);
    int64_t sit_until = 0, sit_ns = SIT_OUT_NS, rejoined = 0;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        int64_t t = now_ns();
        if (t < sit_until) { // sitting out: skip every job, asleep and uncounted, until then
            if (atomic_load(&tp->stop)) break;
            seen = g;
            futex_wait(&tp->gen, (int)seen, sit_until - t);
            if (now_ns() >= sit_until) {
                atomic_fetch_sub(&tp->sitting, 1);
                sit_until = 0;
                watch_start(&self);
                rejoined = self.at;
            }
            continue;
        }
        bool gap = false;
        if (g == seen && !atomic_load(&tp->stop)) {
            gap = spin(tp, seen, &g, t + WORKER_SPIN_NS);
            // Jobs at a steady period (a server's step, each sampling job after
            // the device's forward pass): sleep until shortly before the next
            // one is due and spin across its due time, so that the caller does
            // not run every chunk alone while the workers wake (a futex wake-up
            // takes tens of µs).
            const int64_t period = atomic_load_explicit(&tp->period, memory_order_relaxed);
            const int64_t due = atomic_load_explicit(&tp->last_start, memory_order_relaxed) + period;
            if (!gap && g == seen && period > 0 && (t = now_ns()) < due + period / 8) {
                if (due - LEAD_NS > t) {
                    atomic_fetch_add(&tp->sleepers, 1);
                    if (atomic_load(&tp->gen) == seen && !atomic_load(&tp->stop))
                        futex_wait(&tp->gen, (int)seen, due - LEAD_NS - t);
                    atomic_fetch_sub(&tp->sleepers, 1);
                    g = atomic_load_explicit(&tp->gen, memory_order_acquire);
                }
                if (g == seen && !atomic_load(&tp->stop)) gap = spin(tp, seen, &g, due + period / 8);
            }
        }
        if (gap && watch_self(&self, now_ns(), true, tp)) {
            sit_out(tp, &sit_until, &sit_ns, rejoined);
            continue;
        }
        while (g == seen && !atomic_load(&tp->stop)) {
            atomic_fetch_add(&tp->sleepers, 1);
            // re-checked after announcing the sleep: a job published in between is seen here
            // or wakes the futex (the caller reads `sleepers` after bumping `gen`)
            if (atomic_load(&tp->gen) == seen && !atomic_load(&tp->stop)) futex_wait(&tp->gen, (int)seen, -1);
            atomic_fetch_sub(&tp->sleepers, 1);
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        if (atomic_load(&tp->stop)) break;
        seen = g;
        const int64_t j0 = now_ns();
        work(tp, g, wa.ith);
        const int64_t j1 = now_ns();
        if (watch_self(&self, j1, j1 - j0 > SUSPECT_NS, tp)) sit_out(tp, &sit_until, &sit_ns, rejoined);
    }
    if (sit_until) atomic_fetch_sub(&tp->sitting, 1);
    if (self.fd >= 0) close(self.fd);
    return NULL;
}

int threadpool_default_threads(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

struct threadpool *threadpool_init(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    struct threadpool *tp = NULL;
    if (posix_memalign((void **)&tp, 64, sizeof *tp)) return NULL;
    *tp = (struct threadpool){0};
    tp->n = n_threads;
    tp->threads = st_xcalloc((size_t)n_threads, sizeof *tp->threads);
    atomic_init(&tp->claim, 0);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->last_start, 0);
    atomic_init(&tp->period, 0);
    atomic_init(&tp->sitting, 0);
    atomic_init(&tp->jobs, 0);
    atomic_init(&tp->job_ns, 0);
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
    atomic_store(&tp->stop, true);
    atomic_fetch_add(&tp->gen, 1);
    futex_wake_all(&tp->gen);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i], NULL);
    free(tp->threads);
    free(tp);
}

int threadpool_size(const struct threadpool *tp) { return tp->n; }

int threadpool_sitting(const struct threadpool *tp) {
    return atomic_load_explicit(&((struct threadpool *)tp)->sitting, memory_order_relaxed);
}

static void wait_done(struct threadpool *tp, int n_chunks);

void threadpool_run_chunks(struct threadpool *tp, threadpool_chunk_fn fn, void *arg, int n_chunks) {
    if (n_chunks <= 0) return;
    if (tp->n == 1 || n_chunks == 1 ||
        atomic_load_explicit(&tp->sitting, memory_order_relaxed) == tp->n - 1) {
        for (int c = 0; c < n_chunks; c++) fn(arg, c, 0);
        return;
    }
    const int64_t start = now_ns();
    // the period: an average of the recent intervals, none after a long one
    const int64_t last = atomic_load_explicit(&tp->last_start, memory_order_relaxed);
    const int64_t period = atomic_load_explicit(&tp->period, memory_order_relaxed), gap = start - last;
    atomic_store_explicit(&tp->period,
                          !last || gap > PERIOD_MAX_NS ? 0
                          : period                     ? (3 * period + gap) / 4
                                                       : gap,
                          memory_order_relaxed);
    atomic_store_explicit(&tp->last_start, start, memory_order_relaxed);
    const uint32_t id = ++tp->job_id;
    // Close the claim word first: a worker late from the last job may hold its
    // exhausted word and be about to compare it with the new chunk count; if
    // that count were larger, its compare-and-swap on the old word would claim
    // a chunk past the old job's end and run it with the new fn and arg.
    atomic_store_explicit(&tp->claim, (uint64_t)id << 32 | UINT32_MAX, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&tp->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&tp->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&tp->n_chunks, n_chunks, memory_order_release);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->claim, (uint64_t)id << 32, memory_order_release);
    atomic_store(&tp->gen, id);
    if (atomic_load(&tp->sleepers) > 0) futex_wake_all(&tp->gen);
    work(tp, id, 0);
    wait_done(tp, n_chunks);
    atomic_fetch_add_explicit(&tp->jobs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&tp->job_ns, now_ns() - start, memory_order_relaxed);
}

// The caller's wait for the chunks still running on workers: spinning, then asleep.
static void wait_done(struct threadpool *tp, int n_chunks) {
    if (atomic_load_explicit(&tp->done, memory_order_acquire) == n_chunks) return;
    const int64_t t0 = now_ns();
    for (int spins = 1; atomic_load_explicit(&tp->done, memory_order_acquire) != n_chunks; spins++) {
        cpu_relax();
        if (!(spins & 63) && now_ns() - t0 > CALLER_SPIN_NS) {
            atomic_store(&tp->caller_sleeping, 1);
            int d;
            while ((d = atomic_load(&tp->done)) != n_chunks) futex_wait(&tp->done, d, -1);
            atomic_store(&tp->caller_sleeping, 0);
            break;
        }
    }
}

static void compat_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    struct threadpool *tp = arg;
    tp->compat_fn(tp->compat_arg, chunk, tp->n);
}

void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *arg) {
    if (tp->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->compat_fn = fn;
    tp->compat_arg = arg;
    threadpool_run_chunks(tp, compat_chunk, tp, tp->n);
}
