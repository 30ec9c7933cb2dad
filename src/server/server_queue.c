// server_queue.c: the generation queue and its worker thread (see server.h).
//
// One model, one context: jobs run one at a time in the order they arrived,
// which is fair and lets a follow-up in a conversation reuse the cached prefix
// (context_eval keeps the longest common prefix). A job's connection thread
// and the worker meet under server.mu: the worker appends released text to
// job.text and signals job.cv; the connection takes the text and may set
// job.cancel, which the worker sees at the next token.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/forward.h"
#include "model/model.h"
#include "server/server.h"
#include "util.h"

static void job_free(struct srv_job *j) {
    srv_request_free(&j->req);
    sbuf_free(&j->text);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_release(struct server *s, struct srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&s->mu);
    ST_ASSERT(j->refs > 0);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) job_free(j);
}

// Marks j done with finish f, waking its connection. Caller holds s->mu.
static void job_finish_locked(struct server *s, struct srv_job *j, enum srv_finish f) {
    j->state = SRV_JOB_DONE;
    j->finish = f;
    srv_metrics_job_locked(s, j);
    pthread_cond_broadcast(&j->cv);
}

// Unlinks a queued job. Caller holds s->mu.
static void queue_remove_locked(struct server *s, struct srv_job *j) {
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
    srv_make_id(s, j->req.kind == SRV_CHAT ? "chatcmpl-" : "cmpl-", j->id, sizeof j->id);
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
        job_free(j);
        if (stopping)
            srv_error_set(err, 503, "server_error", "server_stopping", NULL,
                          "the server is shutting down");
        else
            srv_error_set(err, 503, "server_error", "server_overloaded", NULL,
                          "the server is busy: %d requests are already waiting (--max-queue); "
                          "retry later",
                          queued);
        return NULL;
    }
    j->refs = 2;
    j->state = SRV_JOB_QUEUED;
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    s->n_queued++;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    return j;
}

void srv_job_cancel_locked(struct server *s, struct srv_job *j) {
    j->cancel = true;
    if (j->state == SRV_JOB_QUEUED) {
        queue_remove_locked(s, j);
        job_finish_locked(s, j, SRV_FINISH_CANCELLED);
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
        queue_remove_locked(s, j);
        job_finish_locked(s, j, SRV_FINISH_TIMEOUT);
        j->refs--; // the worker's reference
        ST_ASSERT(j->refs > 0);
    }
}

void srv_stop(struct server *s) {
    pthread_mutex_lock(&s->mu);
    s->state = SRV_STOPPING;
    while (s->head) srv_job_cancel_locked(s, s->head);
    // a running job sees state at its next token
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
}

// --- the worker ---------------------------------------------------------------------

struct run_state {
    struct server *s;
    struct srv_job *j;
    struct text_filter filter;
    struct sbuf out;    // text released by the current token
    bool stop_hit;      // a stop string ended the text
    bool timed_out;
};

// Publishes what the filter released; returns non-zero to stop generating.
static int run_publish(struct run_state *r, bool first) {
    struct server *s = r->s;
    struct srv_job *j = r->j;
    pthread_mutex_lock(&s->mu);
    if (first && !j->t_first) j->t_first = st_time_s() - j->t_arrival;
    if (r->out.len) {
        sbuf_append(&j->text, r->out.p, r->out.len);
        pthread_cond_broadcast(&j->cv);
    }
    bool stop = j->cancel || s->state == SRV_STOPPING;
    pthread_mutex_unlock(&s->mu);
    r->out.len = 0;
    if (st_time_s() > j->deadline) r->timed_out = true;
    return stop || r->timed_out || r->stop_hit;
}

static int run_on_token(void *user, int32_t id, const char *piece, size_t len) {
    (void)id;
    struct run_state *r = user;
    r->stop_hit = text_filter_push(&r->filter, piece, len, &r->out);
    return run_publish(r, true);
}

static void log_job(const struct srv_job *j, double t_total) {
    static const char *const names[] = {"stop", "length", "cancelled", "timeout", "error"};
    const struct gen_stats *st = &j->stats;
    fprintf(stderr,
            "strata serve: %s: prompt %d tokens (%d cached) %.2f s, generated %d tokens %.2f s "
            "(%.1f tok/s), total %.2f s, %s%s%s\n",
            j->id, st->n_prompt, st->n_reused, st->t_prompt, st->n_gen, st->t_gen,
            st->t_gen > 0 ? st->n_gen / st->t_gen : 0.0, t_total, names[j->finish],
            j->finish == SRV_FINISH_ERROR ? ": " : "", j->finish == SRV_FINISH_ERROR ? j->error : "");
}

// Runs one job to its end (the worker's reference is dropped by the caller).
static void run_job(struct server *s, struct srv_job *j) {
    struct run_state r = {.s = s, .j = j};
    const struct srv_request *q = &j->req;
    text_filter_init(&r.filter, (const char *const *)q->stop, q->n_stop);
    struct gen_stats st = {.n_prompt = q->n_prompt};
    enum srv_finish finish;
    char error[256] = "";
    struct sampler_params sp = q->sp;
    struct sampler *smp = sampler_init(&sp, s->sess.model->hp.n_vocab);
    int rc = smp ? generate(s->sess.ctx, smp, q->prompt, q->n_prompt, q->max_tokens, run_on_token, &r,
                            &st)
                 : -1;
    sampler_free(smp);
    if (rc) {
        snprintf(error, sizeof error, "%s", st_last_error());
        finish = SRV_FINISH_ERROR;
        // a failed forward leaves the cache in an unknown state: forget it
        s->sess.ctx->n_past = 0;
    } else if (r.timed_out) {
        finish = SRV_FINISH_TIMEOUT;
    } else if (r.stop_hit || st.stop_reason == GEN_STOP_EOG) {
        finish = SRV_FINISH_STOP;
    } else if (st.stop_reason == GEN_STOP_CALLER) {
        finish = SRV_FINISH_CANCELLED;
    } else {
        finish = SRV_FINISH_LENGTH;
    }
    if (finish == SRV_FINISH_STOP || finish == SRV_FINISH_LENGTH) {
        text_filter_flush(&r.filter, &r.out);
        run_publish(&r, false);
    }
    text_filter_free(&r.filter);
    sbuf_free(&r.out);
    pthread_mutex_lock(&s->mu);
    j->stats = st;
    snprintf(j->error, sizeof j->error, "%s", error);
    s->n_running--;
    job_finish_locked(s, j, finish);
    double t_total = st_time_s() - j->t_arrival;
    pthread_mutex_unlock(&s->mu);
    log_job(j, t_total);
}

// Loads the model as the options say; returns 0, or -1 with s->load_error.
static int worker_load(struct server *s) {
    double t0 = st_time_s();
    if (session_open(&s->cfg.so, &s->sess)) {
        snprintf(s->load_error, sizeof s->load_error, "%s", st_last_error());
        return -1;
    }
    s->n_ctx = s->sess.ctx->n_ctx;
    if (session_chat_format(s->sess.model, s->cfg.template_name, &s->fmt) == 0) {
        if (session_chat_no_think(&s->fmt, s->cfg.no_think)) {
            snprintf(s->load_error, sizeof s->load_error, "%s", st_last_error());
            return -1;
        }
        s->have_chat = true;
    } else {
        if (s->cfg.template_name) { // a bad name was refused earlier; this is the model's fault
            snprintf(s->load_error, sizeof s->load_error, "%s", st_last_error());
            return -1;
        }
        snprintf(s->chat_error, sizeof s->chat_error, "%s", st_last_error());
        fprintf(stderr, "strata serve: warning: %s; /v1/chat/completions is unavailable\n",
                s->chat_error);
    }
    fprintf(stderr, "strata serve: model '%s' ready in %.2f s (backend %s, context %d)\n",
            s->model_id, st_time_s() - t0, s->sess.be->name, s->n_ctx);
    return 0;
}

void *srv_worker_main(void *arg) {
    struct server *s = arg;
    if (worker_load(s)) {
        s->state = SRV_FAILED;
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    if (s->state == SRV_LOADING) s->state = SRV_READY;
    for (;;) {
        while (s->state != SRV_STOPPING && !s->head) pthread_cond_wait(&s->work_cv, &s->mu);
        if (s->state == SRV_STOPPING) break;
        struct srv_job *j = s->head;
        queue_remove_locked(s, j);
        if (st_time_s() > j->deadline) {
            job_finish_locked(s, j, SRV_FINISH_TIMEOUT);
        } else {
            j->state = SRV_JOB_RUNNING;
            s->n_running++;
            pthread_mutex_unlock(&s->mu);
            run_job(s, j);
            pthread_mutex_lock(&s->mu);
        }
        ST_ASSERT(j->refs > 0);
        if (--j->refs == 0) {
            pthread_mutex_unlock(&s->mu);
            job_free(j);
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
