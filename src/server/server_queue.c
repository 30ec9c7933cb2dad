// server_queue.c: the queue of jobs (see server.h).
//
// Jobs wait here in the order they arrived until the worker (server_worker.c)
// gives them a slot. A job's connection thread and the worker meet under
// server.mu: the worker appends released text to job.text and signals job.cv;
// the connection takes the text and may set job.cancel, which the worker sees
// at the job's next token or prompt chunk.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <math.h>

#include "model/forward.h"
#include "model/model.h"
#include "server/server.h"
#include "text/grammar.h"
#include "util.h"

void srv_job_free(struct srv_job *j) {
    for (int i = 0; j->choices && i < j->req.n_choices; i++) {
        sbuf_free(&j->choices[i].text);
        free(j->choices[i].lp);
        free(j->choices[i].tool_calls);
    }
    free(j->choices);
    free(j->embd);
    srv_request_free(&j->req);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_release(struct server *s, struct srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&s->mu);
    ST_ASSERT(j->refs > 0);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) srv_job_free(j);
}

// Marks j done with finish f, waking its connection. Caller holds s->mu.
void srv_job_finish_locked(struct server *s, struct srv_job *j, enum srv_finish f) {
    j->state = SRV_JOB_DONE;
    j->finish = f;
    srv_metrics_job_locked(s, j);
    pthread_cond_broadcast(&j->cv);
}

// Unlinks a queued job. Caller holds s->mu.
void srv_queue_remove_locked(struct server *s, struct srv_job *j) {
    struct srv_job **p = &s->head, *prev = NULL;
    while (*p && *p != j) {
        prev = *p;
        p = &(*p)->next;
    }
    if (!*p) return;
    *p = j->next;
    if (s->tail == j) s->tail = prev;
    j->next = NULL;
    s->n_queued--;
}

struct srv_job *srv_job_submit(struct server *s, struct srv_request *req, double t_arrival,
                               struct srv_error *err) {
    struct srv_job *j = st_xcalloc(1, sizeof *j);
    j->req = *req;
    memset(req, 0, sizeof *req);
    if (j->req.n_choices < 1) j->req.n_choices = 1;
    j->choices = st_xcalloc((size_t)j->req.n_choices, sizeof *j->choices);
    srv_make_id(s,
                j->req.kind == SRV_CHAT         ? "chatcmpl-"
                : j->req.kind == SRV_COMPLETION ? "cmpl-"
                                                : "embd-",
                j->id, sizeof j->id);
    j->created = (long long)time(NULL);
    j->t_arrival = t_arrival;
    j->deadline = t_arrival + s->cfg.timeout_s;
    pthread_condattr_t attr; // waits are timed on the monotonic clock
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_lock(&s->mu);
    if (s->state != SRV_READY || s->n_queued >= s->cfg.max_queue) {
        bool stopping = s->state != SRV_READY;
        int queued = s->n_queued;
        pthread_mutex_unlock(&s->mu);
        srv_job_free(j);
        if (stopping)
            srv_error_set(err, 503, "server_error", "server_stopping", NULL, "the server is shutting down");
        else
            srv_error_set(err, 503, "server_error", "server_overloaded", NULL,
                          "the server is busy: %d requests are already waiting (--max-queue); "
                          "retry later",
                          queued);
        return NULL;
    }
    j->refs = 2;
    j->state = SRV_JOB_QUEUED;
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    s->n_queued++;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    return j;
}

void srv_job_cancel_locked(struct server *s, struct srv_job *j) {
    j->cancel = true;
    if (j->state == SRV_JOB_QUEUED) {
        srv_queue_remove_locked(s, j);
        srv_job_finish_locked(s, j, SRV_FINISH_CANCELLED);
        j->refs--; // the worker's reference: it will never see this job
        ST_ASSERT(j->refs > 0);
    }
}

void srv_job_wait_locked(struct server *s, struct srv_job *j, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)(seconds * 1e9) + ts.tv_nsec;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&j->cv, &s->mu, &ts);
    if (j->state == SRV_JOB_QUEUED && st_time_s() > j->deadline) {
        srv_queue_remove_locked(s, j);
        srv_job_finish_locked(s, j, SRV_FINISH_TIMEOUT);
        j->refs--; // the worker's reference
        ST_ASSERT(j->refs > 0);
    }
}

void srv_stop(struct server *s) {
    pthread_mutex_lock(&s->mu);
    s->state = SRV_STOPPING;
    while (s->head) {
        struct srv_job *j = s->head;
        j->cancel = true;
        srv_queue_remove_locked(s, j);
        srv_job_finish_locked(s, j, SRV_FINISH_SHUTDOWN);
        j->refs--; // the worker's reference
    }
    // a running job sees state at its next token
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
}
