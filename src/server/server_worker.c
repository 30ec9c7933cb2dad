// server_worker.c: the worker thread, which owns the model and its context
// (see server.h).
//
// Continuous batching: the context has n_slots sequences (session.seq), each a
// KV cache of n_ctx positions. A queued job takes a free slot in arrival order
// (the slot whose cache already holds the longest prefix of its prompt, else
// the one idle longest), and each step runs one batch: a token of every slot
// that is generating, then chunks of the prompts being read, oldest request
// first, up to n_batch tokens. The weights are read once per step for all of
// them, and a long prompt cannot hold the others up for more than a chunk.
// Between two steps each slot's job may stop (client gone, --timeout,
// shutdown) and free its slot. A job's choices (n > 1) run one after the
// other in its slot; an embeddings job runs a chunk per step beside the batch.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/threadpool.h"
#include "model/forward.h"
#include "model/generate.h"
#include "model/model.h"
#include "server/server.h"
#include "text/grammar.h"
#include "util.h"

// One choice's generation: what its hooks (struct gen_hooks) see.
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
    // In a step's sampling of several sequences (step_batch): the stop
    // flags as read once for the step, and the token kept for publishing then,
    // so that the sequences do not queue on the server's lock one by one.
    bool batched;
    bool cancel_seen, stopping_seen;
    bool pending; // a token (and its text in out) not yet published
};

// Whether the job must stop now: the client left, shutdown, or the deadline.
static bool run_should_stop(struct run_state *r) {
    struct server *s = r->s;
    bool cancel;
    if (r->batched) {
        cancel = r->cancel_seen;
        r->shutdown = r->stopping_seen;
    } else {
        pthread_mutex_lock(&s->mu);
        cancel = r->j->cancel;
        r->shutdown = s->state == SRV_STOPPING;
        pthread_mutex_unlock(&s->mu);
    }
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

// Publishes what the filter released (and the token's logprob entry); the
// caller holds s->mu.
static void run_publish_locked(struct run_state *r, bool token) {
    struct srv_job *j = r->j;
    struct srv_choice *ch = r->ch;
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
    r->out.len = 0;
}

// Publishes now, or (batched) when the step's sampling ends.
static void run_publish(struct run_state *r, bool token) {
    if (r->batched) {
        r->pending |= token;
        return;
    }
    pthread_mutex_lock(&r->s->mu);
    run_publish_locked(r, token);
    pthread_mutex_unlock(&r->s->mu);
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

// Logs j's end; n_taken: the tokens its connection had sent (read under s->mu).
static void log_job(const struct srv_job *j, double t_total, int n_taken) {
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
                j->id, n_taken < st->n_gen ? n_taken : st->n_gen, st->n_gen, t_total);
        return;
    }
    fprintf(stderr,
            "strata serve: %s: prompt %d tokens (%d cached) %.2f s, generated %d tokens %.2f s "
            "(%.1f tok/s), total %.2f s, %s%s%s\n",
            j->id, st->n_prompt, st->n_reused, st->t_prompt, st->n_gen, st->t_gen,
            st->t_gen > 0 ? st->n_gen / st->t_gen : 0.0, t_total, finish_names[j->finish],
            j->finish == SRV_FINISH_ERROR ? ": " : "", j->finish == SRV_FINISH_ERROR ? j->error : "");
}

// One sequence of the context and the job that has it.
struct srv_slot {
    struct context *c;      // its KV cache (a sequence of the session)
    struct srv_job *j;      // NULL: free
    double t_free;          // when it was last freed (the longest idle is taken first)
    double t0;              // when the job started here
    struct gen_stats total; // the job's choices so far
    enum srv_finish finish;
    char error[256];
    // a generation: the choice running
    int choice;
    struct run_state r;
    struct sampler *smp;
    struct gen_seq g;
    bool g_live; // g was begun and not yet ended
    // an embeddings job: the input being read, its position and sum
    int input, pos;
    double *acc;
    float *hidden; // (n_batch, n_embd)
};

// Ends the choice running in sl as its generation ended (or failed to begin).
static void choice_end(struct server *s, struct srv_slot *sl) {
    struct srv_job *j = sl->j;
    const struct srv_request *q = &j->req;
    struct run_state *r = &sl->r;
    struct gen_stats st = {0};
    int rc = sl->g_live ? gen_seq_end(&sl->g, &st) : -1;
    sl->g_live = false;
    sampler_free(sl->smp);
    sl->smp = NULL;
    enum srv_finish finish;
    if (rc) {
        if (!sl->error[0]) snprintf(sl->error, sizeof sl->error, "%s", st_last_error());
        finish = SRV_FINISH_ERROR;
        sl->c->n_past = 0; // a failed forward leaves the cache in an unknown state
    } else if (r->timed_out) {
        finish = SRV_FINISH_TIMEOUT;
    } else if (r->shutdown) {
        finish = SRV_FINISH_SHUTDOWN;
    } else if (r->stop_hit || st.stop_reason == GEN_STOP_EOG) {
        finish = SRV_FINISH_STOP;
    } else if (st.stop_reason == GEN_STOP_CALLER) {
        finish = SRV_FINISH_CANCELLED;
    } else {
        finish = SRV_FINISH_LENGTH;
    }
    if (sl->choice == 0) sl->total.n_reused = st.n_reused;
    sl->total.t_prompt += st.t_prompt;
    sl->total.n_gen += st.n_gen;
    sl->total.t_gen += st.t_gen;
    if (finish == SRV_FINISH_STOP || finish == SRV_FINISH_LENGTH || finish == SRV_FINISH_TIMEOUT)
        text_filter_flush(&r->filter, &r->out);
    run_publish(r, false);
    char *calls = NULL;
    if (finish == SRV_FINISH_STOP && q->tools != CHAT_TOOLS_NONE) {
        pthread_mutex_lock(&s->mu);
        struct sbuf text = r->ch->text;
        r->ch->text = (struct sbuf){0};
        pthread_mutex_unlock(&s->mu);
        calls = srv_tools_parse(s, q->tools, text.p ? text.p : "", text.len);
        pthread_mutex_lock(&s->mu);
        r->ch->text = text;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_lock(&s->mu);
    if (r->filter.stopped) { // logprobs of tokens cut by a stop string are not the answer's
        while (r->ch->n_lp && r->ch->lp[r->ch->n_lp - 1].offset >= r->ch->text.len) r->ch->n_lp--;
    }
    r->ch->tool_calls = calls;
    r->ch->finish = calls ? SRV_FINISH_TOOLS : finish;
    r->ch->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);
    text_filter_free(&r->filter);
    sbuf_free(&r->out);
    grammar_state_free(r->gs);
    free(r->count);
    free(r->seen);
    free(r->raw);
    memset(r, 0, sizeof *r);
    if (finish != SRV_FINISH_STOP && finish != SRV_FINISH_LENGTH) sl->finish = finish;
}

// Starts choice sl->choice of sl's job; a choice that cannot start ends at once.
static void choice_begin(struct server *s, struct srv_slot *sl) {
    struct srv_job *j = sl->j;
    const struct srv_request *q = &j->req;
    const int n_vocab = s->sess.model->hp.n_vocab;
    struct run_state *r = &sl->r;
    *r = (struct run_state){.s = s, .j = j, .ch = &j->choices[sl->choice]};
    const int set = srv_choice_set(q, sl->choice); // the choice's prompt
    int n_prompt;
    const int32_t *prompt = srv_set_prompt(q, set, &n_prompt);
    r->prev = prompt[n_prompt - 1];
    text_filter_init(&r->filter, (const char *const *)q->stop, q->n_stop);
    if (q->presence_penalty != 0 || q->frequency_penalty != 0) {
        r->count = st_xcalloc((size_t)n_vocab, sizeof *r->count);
        r->seen = st_xmalloc(sizeof *r->seen * (size_t)n_vocab);
    }
    if (q->logprobs >= 0) r->raw = st_xmalloc(sizeof *r->raw * (size_t)n_vocab);
    struct sampler_params sp = q->sp;
    sp.seed += (uint64_t)srv_choice_in_set(q, sl->choice);
    sl->smp = sampler_init(&sp, n_vocab);
    if (q->grammar) r->gs = grammar_state_new(q->grammar);
    pthread_mutex_lock(&s->mu);
    r->ch->started = true;
    if (!j->t_gen_start) j->t_gen_start = st_time_s();
    pthread_mutex_unlock(&s->mu);
    const struct gen_hooks h = {run_on_token, run_on_logits, run_cancel, r};
    // the context's end bounds the answer; a prompt that fills it gets none
    sl->g_live = sl->smp && (!q->grammar || r->gs) &&
                 !gen_seq_begin(&sl->g, sl->c, sl->smp, prompt, n_prompt, q->max_tokens, &h);
    if (!sl->g_live) choice_end(s, sl);
}

// Finishes sl's job and frees the slot (the worker's reference is dropped).
static void job_end(struct server *s, struct srv_slot *sl) {
    struct srv_job *j = sl->j;
    if (j->req.kind == SRV_EMBEDDING) sl->total.t_prompt = st_time_s() - sl->t0;
    free(sl->acc);
    free(sl->hidden);
    sl->acc = NULL;
    sl->hidden = NULL;
    pthread_mutex_lock(&s->mu);
    j->stats = sl->total;
    snprintf(j->error, sizeof j->error, "%s", sl->error);
    s->n_running--;
    srv_job_finish_locked(s, j, sl->finish);
    const double t_total = st_time_s() - j->t_arrival;
    const int n_taken = j->n_taken;
    pthread_mutex_unlock(&s->mu);
    log_job(j, t_total, n_taken); // the worker's reference keeps j until here
    srv_job_release(s, j);        // the worker's reference
    sl->j = NULL;
    sl->t_free = st_time_s();
}

// After a choice ended: the next one, or the job's end.
static void choice_next(struct server *s, struct srv_slot *sl) {
    if (sl->finish == SRV_FINISH_STOP && ++sl->choice < sl->j->req.n_choices)
        choice_begin(s, sl);
    else
        job_end(s, sl);
}

// Gives job j the slot sl and starts it.
static void job_begin(struct server *s, struct srv_slot *sl, struct srv_job *j) {
    sl->j = j;
    sl->t0 = st_time_s();
    sl->total = (struct gen_stats){0};
    sl->finish = SRV_FINISH_STOP;
    sl->error[0] = 0;
    sl->choice = sl->input = sl->pos = 0;
    if (j->req.kind == SRV_EMBEDDING) {
        const int E = s->sess.model->hp.n_embd;
        sl->acc = st_xcalloc((size_t)E, sizeof *sl->acc);
        sl->hidden = malloc(sizeof(float) * (size_t)sl->c->n_batch * (size_t)E);
        j->embd = calloc((size_t)j->req.n_inputs * (size_t)E, sizeof(float));
        if (!sl->hidden || !j->embd) {
            snprintf(sl->error, sizeof sl->error, "out of memory for embeddings");
            sl->finish = SRV_FINISH_ERROR;
            job_end(s, sl);
        }
        return;
    }
    sl->total.n_prompt = j->req.n_prompt; // each prompt counted once, whatever n
    for (int k = 1; k < j->req.n_sets; k++) sl->total.n_prompt += j->req.set_n[k];
    choice_begin(s, sl);
    while (sl->j && !sl->g_live) choice_next(s, sl);
}

// One chunk of an embeddings job: the pooled final hidden states of each input,
// normalised to length 1. Ends the job after its last input.
static void embed_step(struct server *s, struct srv_slot *sl) {
    struct srv_job *j = sl->j;
    struct context *c = sl->c;
    const int E = s->sess.model->hp.n_embd;
    pthread_mutex_lock(&s->mu);
    const bool cancel = j->cancel, shutdown = s->state == SRV_STOPPING;
    pthread_mutex_unlock(&s->mu);
    if (cancel || shutdown || st_time_s() > j->deadline) {
        sl->finish = cancel ? SRV_FINISH_CANCELLED : shutdown ? SRV_FINISH_SHUTDOWN : SRV_FINISH_TIMEOUT;
        job_end(s, sl);
        return;
    }
    const int32_t *ids = j->req.inputs[sl->input];
    const int n = j->req.n_input_tokens[sl->input];
    const int chunk = n - sl->pos < c->n_batch ? n - sl->pos : c->n_batch;
    if (context_forward_hidden(c, ids + sl->pos, chunk, sl->pos, sl->hidden)) {
        snprintf(sl->error, sizeof sl->error, "%s", st_last_error());
        sl->finish = SRV_FINISH_ERROR;
        c->n_past = 0;
        job_end(s, sl);
        return;
    }
    for (int t = 0; t < chunk; t++) {
        const int pos = sl->pos + t;
        bool use = s->pooling == 2 ? pos == 0 : s->pooling == 3 ? pos == n - 1 : true;
        if (!use) continue;
        for (int e = 0; e < E; e++) sl->acc[e] += sl->hidden[(size_t)t * E + e];
    }
    sl->pos += chunk;
    if (sl->pos < n) return;
    double norm = 0;
    for (int e = 0; e < E; e++) norm += sl->acc[e] * sl->acc[e];
    norm = norm > 0 ? 1 / sqrt(norm) : 0; // the mean's 1/n cancels in the normalisation
    float *out = j->embd + (size_t)sl->input * E;
    for (int e = 0; e < E; e++) out[e] = (float)(sl->acc[e] * norm);
    memset(sl->acc, 0, sizeof(double) * (size_t)E);
    sl->total.n_prompt += n;
    sl->pos = 0;
    if (++sl->input == j->req.n_inputs) job_end(s, sl);
}

// Gives queued jobs free slots, oldest first. Caller holds s->mu.
static void admit_locked(struct server *s) {
    while (s->head && s->state != SRV_STOPPING) {
        struct srv_job *j = s->head;
        struct srv_slot *best = NULL;
        int best_keep = -1;
        for (int i = 0; i < s->n_slots; i++) {
            struct srv_slot *sl = &s->slots[i];
            if (sl->j) continue;
            const int keep = j->req.kind == SRV_EMBEDDING
                                 ? 0
                                 : context_common_prefix(sl->c, j->req.prompt, j->req.n_prompt);
            if (keep > best_keep || (keep == best_keep && sl->t_free < best->t_free)) {
                best = sl;
                best_keep = keep;
            }
        }
        if (!best) return;
        srv_queue_remove_locked(s, j);
        if (st_time_s() > j->deadline) {
            srv_job_finish_locked(s, j, SRV_FINISH_TIMEOUT);
            if (--j->refs == 0) {
                pthread_mutex_unlock(&s->mu);
                srv_job_free(j);
                pthread_mutex_lock(&s->mu);
            }
            continue;
        }
        j->state = SRV_JOB_RUNNING;
        s->n_running++;
        pthread_mutex_unlock(&s->mu);
        job_begin(s, best, j);
        pthread_mutex_lock(&s->mu);
    }
}

// Whether sl goes in the batch's first part: a token being generated.
static bool slot_decoding(const struct srv_slot *sl) {
    return sl->j && sl->j->req.kind != SRV_EMBEDDING && sl->g_live && sl->g.decoding;
}

// Span i of the step: its slot's sequence takes the span's logits (samples,
// detokenizes and publishes its token). Spans run on several threads at once:
// each touches only its own slot, and the shared state under s->mu; a failure's
// message is kept in the slot, since st_last_error is the thread's own.
static void advance_task(void *arg, int i, int ith) {
    (void)ith;
    struct server *s = arg;
    struct srv_slot *sl = s->span_slots[i];
    gen_seq_advance(&sl->g, s->span_logits[i]);
    if (sl->g.rc && !sl->error[0]) snprintf(sl->error, sizeof sl->error, "%s", st_last_error());
}

// Around a step's sampling of several sequences (begin true, then false),
// under one hold of s->mu each time: first each span's sequence reads its
// stop flags for the step; after, the tokens are published together. Taking
// the lock for each sequence, twice, with each connection woken taking it
// back, cost the 8-sequence step 0.1 ms more (0.49-0.54 ms against 0.38-0.40
// on 2 cores, the CPU backend).
static void step_batch(struct server *s, int n_span, bool begin) {
    pthread_mutex_lock(&s->mu);
    const bool stopping = s->state == SRV_STOPPING;
    for (int i = 0; i < n_span; i++) {
        struct run_state *r = &s->span_slots[i]->r; // a span's slot runs a generation (g_live)
        if (begin) {
            r->batched = true;
            r->cancel_seen = r->j->cancel;
            r->stopping_seen = stopping;
        } else {
            r->batched = false;
            if (r->pending || r->out.len) run_publish_locked(r, r->pending);
            r->pending = false;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

// One step: every embeddings slot reads a chunk; every generating slot runs a
// token and the prompts being read a chunk each (oldest request first) in one
// batch of at most n_batch tokens; then each one's logits are sampled.
static void step(struct server *s) {
    struct context *c = s->sess.ctx;
    const int n_batch = c->n_batch, V = s->sess.model->hp.n_vocab;
    struct forward_span *sp = s->spans;
    struct srv_slot **owner = s->span_slots;
    int n_span = 0, used = 0;
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].j && s->slots[i].j->req.kind == SRV_EMBEDDING) embed_step(s, &s->slots[i]);
    // the order: generating slots, then the others by their job's arrival
    struct srv_slot **order = s->slot_order;
    int n_order = 0;
    for (int i = 0; i < s->n_slots; i++)
        if (slot_decoding(&s->slots[i])) order[n_order++] = &s->slots[i];
    const int n_dec = n_order;
    for (int i = 0; i < s->n_slots; i++) {
        struct srv_slot *sl = &s->slots[i];
        if (!sl->j || sl->j->req.kind == SRV_EMBEDDING || slot_decoding(sl)) continue;
        int k = n_order++;
        while (k > n_dec && order[k - 1]->j->t_arrival > sl->j->t_arrival) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = sl;
    }
    for (int k = 0; k < n_order && used < n_batch; k++) {
        struct srv_slot *sl = order[k];
        // a choice may end before it runs (cancelled, or nothing to run): the next one starts
        while (sl->j && (!sl->g_live || !gen_seq_span(&sl->g, n_batch - used, &sp[n_span]))) {
            if (sl->g_live) choice_end(s, sl);
            choice_next(s, sl);
        }
        if (!sl->j) continue;
        owner[n_span] = sl;
        used += sp[n_span++].n;
    }
    if (!n_span) return;
    int n_decode = 0; // spans of generating sequences (their token each)
    for (int i = 0; i < n_span; i++) n_decode += owner[i]->g.decoding;
    const double t0 = st_time_s();
    const int fail = context_forward_batch(c, sp, n_span, s->step_logits);
    const double t1 = st_time_s();
    if (fail) {
        for (int i = 0; i < n_span; i++) {
            gen_seq_fail(&owner[i]->g);
            snprintf(owner[i]->error, sizeof owner[i]->error, "%s", st_last_error());
        }
    } else {
        float *row = s->step_logits;
        for (int i = 0; i < n_span; i++) {
            const bool has = sp[i].logits != SPAN_LOGITS_NONE;
            s->span_logits[i] = has ? row : NULL;
            if (has) row += V;
        }
        if (n_span > 1) step_batch(s, n_span, true);
        if (s->sample_pool && n_span > 1)
            threadpool_run_chunks(s->sample_pool, advance_task, s, n_span);
        else
            for (int i = 0; i < n_span; i++) advance_task(s, i, 0);
        if (n_span > 1) step_batch(s, n_span, false);
    }
    const double t2 = st_time_s();
    pthread_mutex_lock(&s->mu);
    s->metrics.steps++;
    s->metrics.step_tokens += (unsigned long long)used;
    s->metrics.step_decode_tokens += (unsigned long long)n_decode;
    s->metrics.step_forward_seconds += t1 - t0;
    s->metrics.step_sample_seconds += t2 - t1;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n_span; i++) {
        struct srv_slot *sl = owner[i];
        if (!sl->g.done) continue;
        choice_end(s, sl);
        choice_next(s, sl);
        while (sl->j && !sl->g_live) choice_next(s, sl);
    }
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
    fprintf(stderr, "strata serve: model '%s' ready in %.2f s (backend %s, %d slots of %d positions)\n",
            s->model_id, st_time_s() - t0, s->sess.be->name, s->sess.n_seq, s->n_ctx);
    return 0;
}

// Threads for a step's per-sequence work (sampling, detokenizing, publishing):
// the cores the backend's compute leaves free, the worker's own among them, at
// most one per slot. A CPU backend computes on n_threads cores (every core
// when ≤ 0); another one on the worker's thread alone.
static int sample_threads(const struct server *s) {
    const int cores = threadpool_default_threads();
    const bool host = (s->sess.be->caps & BACKEND_CAP_HOST) != 0;
    const int compute = !host ? 1 : s->cfg.so.n_threads > 0 ? s->cfg.so.n_threads : cores;
    const int n = cores - compute + 1;
    return n < 1 ? 1 : n > s->n_slots ? s->n_slots : n;
}

// Makes the slots, one per sequence of the session; returns 0, or -1 with
// s->load_error.
static int slots_init(struct server *s) {
    const int n = s->sess.n_seq, n_batch = s->sess.ctx->n_batch;
    s->n_slots = n;
    s->slots = st_xcalloc((size_t)n, sizeof *s->slots);
    for (int i = 0; i < n; i++) s->slots[i].c = s->sess.seq[i];
    s->slot_order = st_xcalloc((size_t)n, sizeof *s->slot_order);
    s->spans = st_xcalloc((size_t)n, sizeof *s->spans);
    s->span_slots = st_xcalloc((size_t)n, sizeof *s->span_slots);
    const size_t rows = (size_t)(n < n_batch ? n : n_batch);
    // page-locked where the backend has such memory: every step downloads into it
    s->step_logits = backend_host_alloc(s->sess.be, sizeof(float) * rows * (size_t)s->sess.model->hp.n_vocab);
    if (!s->step_logits) {
        snprintf(s->load_error, sizeof s->load_error, "%s", st_last_error());
        return -1;
    }
    s->span_logits = st_xcalloc((size_t)n, sizeof *s->span_logits);
    const int nt = sample_threads(s);
    // without the pool (it could not start) the spans run one after another
    s->sample_pool = nt > 1 ? threadpool_init(nt) : NULL;
    return 0;
}

void srv_slots_free(struct server *s) {
    free(s->slots);
    free(s->slot_order);
    free(s->spans);
    free(s->span_slots);
    if (s->step_logits) backend_host_free(s->sess.be, s->step_logits);
    free(s->span_logits);
    if (s->sample_pool) threadpool_free(s->sample_pool);
}

void *srv_worker_main(void *arg) {
    struct server *s = arg;
    if (worker_load(s) || slots_init(s)) {
        s->state = SRV_FAILED;
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    if (s->state == SRV_LOADING) s->state = SRV_READY;
    for (;;) {
        admit_locked(s);
        int active = 0;
        for (int i = 0; i < s->n_slots; i++) active += s->slots[i].j != NULL;
        if (!active) {
            if (s->state == SRV_STOPPING) break;
            pthread_cond_wait(&s->work_cv, &s->mu);
            continue;
        }
        // a running job sees the stop at its next token or chunk, and ends
        pthread_mutex_unlock(&s->mu);
        step(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
