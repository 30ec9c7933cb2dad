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

#include <math.h>

#include "model/forward.h"
#include "model/model.h"
#include "server/server.h"
#include "text/grammar.h"
#include "util.h"

static void job_free(struct srv_job *j) {
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
        job_free(j);
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
    while (s->head) {
        struct srv_job *j = s->head;
        j->cancel = true;
        queue_remove_locked(s, j);
        job_finish_locked(s, j, SRV_FINISH_SHUTDOWN);
        j->refs--; // the worker's reference
    }
    // a running job sees state at its next token
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
}

// --- the worker ---------------------------------------------------------------------

// One choice's generation: the hooks of generate_hooked see this.
struct run_state {
    struct server *s;
    struct srv_job *j;
    struct srv_choice *ch;
    struct text_filter filter;
    struct sbuf out; // text released by the current token
    bool stop_hit;   // a stop string ended the text
    bool timed_out, shutdown;
    struct grammar_state *gs; // NULL without a grammar
    int *count;               // [n_vocab] times each token was generated (penalties)
    int32_t *seen;            // distinct tokens generated, in order
    int n_seen;
    float *raw;            // [n_vocab] the model's logits of this step (logprobs)
    float lse;             // their log-sum-exp
    struct srv_logprob lp; // the entry being built
    int32_t prev;          // the token before the next one
    size_t offset;         // bytes generated so far
};

// Whether the job must stop now: the client left, shutdown, or the deadline.
static bool run_should_stop(struct run_state *r) {
    struct server *s = r->s;
    pthread_mutex_lock(&s->mu);
    bool cancel = r->j->cancel;
    r->shutdown = s->state == SRV_STOPPING;
    pthread_mutex_unlock(&s->mu);
    if (st_time_s() > r->j->deadline) r->timed_out = true;
    return cancel || r->shutdown || r->timed_out;
}

static int run_cancel(void *user) { return run_should_stop(user); }

// The k best of the raw logits with their log-probabilities.
static void top_logprobs(struct run_state *r, int k, int n_vocab) {
    struct srv_logprob *e = &r->lp;
    e->n_top = 0;
    for (int i = 0; i < n_vocab && k > 0; i++) {
        float v = r->raw[i];
        if (e->n_top == k && v <= e->top[k - 1].logprob) continue;
        int p = e->n_top < k ? e->n_top++ : k - 1;
        while (p > 0 && e->top[p - 1].logprob < v) {
            e->top[p] = e->top[p - 1];
            p--;
        }
        e->top[p].id = i;
        e->top[p].logprob = v;
    }
    for (int i = 0; i < e->n_top; i++) e->top[i].logprob -= r->lse;
}

static int run_on_logits(void *user, float *logits) {
    struct run_state *r = user;
    const struct srv_request *q = &r->j->req;
    const int n_vocab = r->s->sess.model->hp.n_vocab;
    if (run_should_stop(r)) return 1;
    if (q->logprobs >= 0) {
        memcpy(r->raw, logits, sizeof(float) * (size_t)n_vocab);
        float mx = -INFINITY;
        for (int i = 0; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
        double sum = 0;
        for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
        r->lse = mx + (float)log(sum);
        top_logprobs(r, q->logprobs, n_vocab);
    }
    for (int i = 0; i < q->n_bias; i++) {
        float *l = &logits[q->bias[i].id];
        *l = q->bias[i].bias <= -100 ? -INFINITY : *l + q->bias[i].bias;
    }
    if (q->presence_penalty != 0 || q->frequency_penalty != 0)
        for (int i = 0; i < r->n_seen; i++) {
            int32_t t = r->seen[i];
            logits[t] -= q->presence_penalty + q->frequency_penalty * (float)r->count[t];
        }
    if (r->gs) grammar_mask(r->gs, r->s->gvocab, logits);
    return 0;
}

// Publishes what the filter released (and the token's logprob entry).
static void run_publish(struct run_state *r, bool token) {
    struct server *s = r->s;
    struct srv_job *j = r->j;
    struct srv_choice *ch = r->ch;
    pthread_mutex_lock(&s->mu);
    if (token) {
        if (!j->t_first) j->t_first = st_time_s() - j->t_arrival;
        ch->n_gen++;
        if (j->req.logprobs >= 0) {
            if (ch->n_lp == ch->cap_lp) {
                ch->cap_lp = ch->cap_lp ? 2 * ch->cap_lp : 64;
                ch->lp = realloc(ch->lp, sizeof *ch->lp * (size_t)ch->cap_lp);
                ST_ASSERT(ch->lp);
            }
            ch->lp[ch->n_lp++] = r->lp;
        }
    }
    if (r->out.len) sbuf_append(&ch->text, r->out.p, r->out.len);
    if (token || r->out.len) pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);
    r->out.len = 0;
}

static int run_on_token(void *user, int32_t id, const char *piece, size_t len) {
    struct run_state *r = user;
    if (r->gs && grammar_accept_token(r->gs, r->s->gvocab, id)) {
        st_fail("the sampler chose token %d, which the grammar refuses", id);
        return 1;
    }
    if (r->count) {
        if (r->count[id]++ == 0) r->seen[r->n_seen++] = id;
    }
    r->lp.id = id;
    r->lp.prev = r->prev;
    r->lp.logprob = r->j->req.logprobs >= 0 ? r->raw[id] - r->lse : 0;
    r->lp.offset = r->offset;
    r->offset += len;
    r->prev = id;
    r->stop_hit = text_filter_push(&r->filter, piece, len, &r->out);
    run_publish(r, true);
    return r->stop_hit;
}

static const char *const finish_names[] = {"stop",  "length",   "cancelled", "timeout",
                                           "error", "shutdown", "tool_calls"};

static void log_job(const struct srv_job *j, double t_total) {
    const struct gen_stats *st = &j->stats;
    if (j->req.kind == SRV_EMBEDDING) {
        fprintf(stderr, "strata serve: %s: %d inputs, %d tokens, %.2f s, %s%s%s\n", j->id, j->req.n_inputs,
                st->n_prompt, t_total, finish_names[j->finish], j->finish == SRV_FINISH_ERROR ? ": " : "",
                j->finish == SRV_FINISH_ERROR ? j->error : "");
        return;
    }
    if (j->finish == SRV_FINISH_CANCELLED) { // an ordinary event, not a failure
        fprintf(stderr,
                "strata serve: %s: client disconnected after %d of %d generated tokens "
                "were sent; generation stopped (%.2f s)\n",
                j->id, j->n_taken < st->n_gen ? j->n_taken : st->n_gen, st->n_gen, t_total);
        return;
    }
    fprintf(stderr,
            "strata serve: %s: prompt %d tokens (%d cached) %.2f s, generated %d tokens %.2f s "
            "(%.1f tok/s), total %.2f s, %s%s%s\n",
            j->id, st->n_prompt, st->n_reused, st->t_prompt, st->n_gen, st->t_gen,
            st->t_gen > 0 ? st->n_gen / st->t_gen : 0.0, t_total, finish_names[j->finish],
            j->finish == SRV_FINISH_ERROR ? ": " : "", j->finish == SRV_FINISH_ERROR ? j->error : "");
}

// Runs choice i of job j; returns its finish.
static enum srv_finish run_choice(struct server *s, struct srv_job *j, int i, struct gen_stats *st,
                                  char *error, size_t error_cap) {
    const struct srv_request *q = &j->req;
    const int n_vocab = s->sess.model->hp.n_vocab;
    struct run_state r = {.s = s, .j = j, .ch = &j->choices[i]};
    r.prev = q->prompt[q->n_prompt - 1];
    text_filter_init(&r.filter, (const char *const *)q->stop, q->n_stop);
    if (q->presence_penalty != 0 || q->frequency_penalty != 0) {
        r.count = st_xcalloc((size_t)n_vocab, sizeof *r.count);
        r.seen = st_xmalloc(sizeof *r.seen * (size_t)n_vocab);
    }
    if (q->logprobs >= 0) r.raw = st_xmalloc(sizeof *r.raw * (size_t)n_vocab);
    struct sampler_params sp = q->sp;
    sp.seed += (uint64_t)i;
    struct sampler *smp = sampler_init(&sp, n_vocab);
    if (q->grammar) r.gs = grammar_state_new(q->grammar);
    pthread_mutex_lock(&s->mu);
    r.ch->started = true;
    if (!j->t_gen_start) j->t_gen_start = st_time_s();
    pthread_mutex_unlock(&s->mu);
    // the context's end bounds the answer; a prompt that fills it gets none
    int max = q->max_tokens;
    const struct gen_hooks h = {run_on_token, run_on_logits, run_cancel, &r};
    int rc = smp && (!q->grammar || r.gs)
                 ? generate_hooked(s->sess.ctx, smp, q->prompt, q->n_prompt, max, &h, st)
                 : -1;
    sampler_free(smp);
    enum srv_finish finish;
    if (rc) {
        snprintf(error, error_cap, "%s", st_last_error());
        finish = SRV_FINISH_ERROR;
        s->sess.ctx->n_past = 0; // a failed forward leaves the cache in an unknown state
    } else if (r.timed_out) {
        finish = SRV_FINISH_TIMEOUT;
    } else if (r.shutdown) {
        finish = SRV_FINISH_SHUTDOWN;
    } else if (r.stop_hit || st->stop_reason == GEN_STOP_EOG) {
        finish = SRV_FINISH_STOP;
    } else if (st->stop_reason == GEN_STOP_CALLER) {
        finish = SRV_FINISH_CANCELLED;
    } else {
        finish = SRV_FINISH_LENGTH;
    }
    if (finish == SRV_FINISH_STOP || finish == SRV_FINISH_LENGTH || finish == SRV_FINISH_TIMEOUT)
        text_filter_flush(&r.filter, &r.out);
    run_publish(&r, false);
    char *calls = NULL;
    if (finish == SRV_FINISH_STOP && q->tools != CHAT_TOOLS_NONE) {
        pthread_mutex_lock(&s->mu);
        struct sbuf text = r.ch->text;
        r.ch->text = (struct sbuf){0};
        pthread_mutex_unlock(&s->mu);
        calls = srv_tools_parse(s, q->tools, text.p ? text.p : "", text.len);
        pthread_mutex_lock(&s->mu);
        r.ch->text = text;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_lock(&s->mu);
    if (r.filter.stopped) { // logprobs of tokens cut by a stop string are not the answer's
        while (r.ch->n_lp && r.ch->lp[r.ch->n_lp - 1].offset >= r.ch->text.len) r.ch->n_lp--;
    }
    r.ch->tool_calls = calls;
    r.ch->finish = calls ? SRV_FINISH_TOOLS : finish;
    r.ch->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);
    text_filter_free(&r.filter);
    sbuf_free(&r.out);
    grammar_state_free(r.gs);
    free(r.count);
    free(r.seen);
    free(r.raw);
    return finish;
}

// Embeds each input: the pooled final hidden states, normalised to length 1.
static int run_embeddings(struct server *s, struct srv_job *j, struct gen_stats *st) {
    struct context *c = s->sess.ctx;
    const int E = s->sess.model->hp.n_embd;
    float *hidden = malloc(sizeof(float) * (size_t)c->n_batch * (size_t)E);
    j->embd = calloc((size_t)j->req.n_inputs * (size_t)E, sizeof(float));
    if (!hidden || !j->embd) {
        free(hidden);
        return st_fail("out of memory for embeddings");
    }
    int rc = 0;
    for (int k = 0; k < j->req.n_inputs && !rc; k++) {
        const int32_t *ids = j->req.inputs[k];
        const int n = j->req.n_input_tokens[k];
        float *out = j->embd + (size_t)k * E;
        double *acc = st_xcalloc((size_t)E, sizeof *acc);
        for (int p = 0; p < n && !rc;) {
            int chunk = n - p < c->n_batch ? n - p : c->n_batch;
            if (context_forward_hidden(c, ids + p, chunk, p, hidden)) {
                rc = -1;
                break;
            }
            for (int t = 0; t < chunk; t++) {
                const int pos = p + t;
                bool use = s->pooling == 2 ? pos == 0 : s->pooling == 3 ? pos == n - 1 : true;
                if (!use) continue;
                for (int e = 0; e < E; e++) acc[e] += hidden[(size_t)t * E + e];
            }
            p += chunk;
        }
        double norm = 0;
        for (int e = 0; e < E; e++) norm += acc[e] * acc[e];
        norm = norm > 0 ? 1 / sqrt(norm) : 0; // the mean's 1/n cancels in the normalisation
        for (int e = 0; e < E; e++) out[e] = (float)(acc[e] * norm);
        free(acc);
        st->n_prompt += n;
    }
    free(hidden);
    if (rc) c->n_past = 0;
    return rc;
}

// Runs one job to its end (the worker's reference is dropped by the caller).
static void run_job(struct server *s, struct srv_job *j) {
    struct gen_stats total = {0};
    enum srv_finish finish = SRV_FINISH_STOP;
    char error[256] = "";
    const double t0 = st_time_s();
    if (j->req.kind == SRV_EMBEDDING) {
        if (run_embeddings(s, j, &total)) {
            finish = SRV_FINISH_ERROR;
            snprintf(error, sizeof error, "%s", st_last_error());
        }
        total.t_prompt = st_time_s() - t0;
    } else {
        total.n_prompt = j->req.n_prompt;
        for (int i = 0; i < j->req.n_choices; i++) {
            struct gen_stats st = {0};
            enum srv_finish f = run_choice(s, j, i, &st, error, sizeof error);
            if (i == 0) total.n_reused = st.n_reused;
            total.t_prompt += st.t_prompt;
            total.n_gen += st.n_gen;
            total.t_gen += st.t_gen;
            if (f != SRV_FINISH_STOP && f != SRV_FINISH_LENGTH) {
                finish = f;
                break;
            }
        }
    }
    pthread_mutex_lock(&s->mu);
    j->stats = total;
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
    if (!(s->gvocab = grammar_vocab_new(s->sess.model->tok))) {
        snprintf(s->load_error, sizeof s->load_error, "%s", st_last_error());
        return -1;
    }
    // embeddings pool as the file says (<arch>.pooling_type), else by the mean
    char key[64];
    uint32_t pooling = 0;
    snprintf(key, sizeof key, "%s.pooling_type", s->sess.model->hp.arch);
    if (!gguf_find(s->sess.model->gguf, key) || gguf_get_u32(s->sess.model->gguf, key, &pooling)) pooling = 0;
    // 0 (none, or no key): the mean; 4 (rank) and beyond: /v1/embeddings refuses
    s->pooling = pooling == 0 ? 1 : pooling <= 3 ? (int)pooling : -(int)pooling;
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
        fprintf(stderr, "strata serve: warning: %s; /v1/chat/completions is unavailable\n", s->chat_error);
    }
    fprintf(stderr, "strata serve: model '%s' ready in %.2f s (backend %s, context %d)\n", s->model_id,
            st_time_s() - t0, s->sess.be->name, s->n_ctx);
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
