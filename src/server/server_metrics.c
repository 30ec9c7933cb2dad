// server_metrics.c: counters of the generation queue and the HTTP layer, and
// their Prometheus text exposition (format 0.0.4) for GET /metrics.
#include <stdlib.h>

#include "server/server.h"
#include "util.h"

void srv_metrics_job_locked(struct server *s, const struct srv_job *j) {
    struct srv_metrics *m = &s->metrics;
    const struct gen_stats *st = &j->stats;
    const bool ok =
        j->finish == SRV_FINISH_STOP || j->finish == SRV_FINISH_LENGTH || j->finish == SRV_FINISH_TOOLS;
    m->requests++;
    if (j->finish == SRV_FINISH_CANCELLED)
        m->requests_cancelled++;
    else if (!ok)
        m->requests_failed++;
    m->prompt_tokens += (unsigned long long)st->n_prompt;
    m->prompt_tokens_cached += (unsigned long long)st->n_reused;
    m->prompt_seconds += st->t_prompt;
    if (st->t_prompt > 0) m->last_prompt_tps = (st->n_prompt - st->n_reused) / st->t_prompt;
    if (j->finish == SRV_FINISH_CANCELLED) {
        // only what reached the client: tokens made after it left are not output
        const int n = j->n_taken < st->n_gen ? j->n_taken : st->n_gen;
        m->generated_tokens += (unsigned long long)(n > 0 ? n : 0);
        if (n > 0 && j->t_gen_start > 0 && j->t_taken > j->t_gen_start)
            m->generation_seconds += j->t_taken - j->t_gen_start;
        return;
    }
    m->generated_tokens += (unsigned long long)st->n_gen;
    m->generation_seconds += st->t_gen;
    if (st->t_gen > 0 && st->n_gen > 0) m->last_generation_tps = st->n_gen / st->t_gen;
}

void srv_metrics_http(struct server *s, int status) {
    int cls = status / 100;
    if (cls < 1 || cls > 5) return;
    pthread_mutex_lock(&s->mu);
    s->metrics.http_responses[cls]++;
    pthread_mutex_unlock(&s->mu);
}

static void metric(struct sbuf *b, const char *name, const char *type, const char *help, double value) {
    sbuf_printf(b, "# HELP strata_%s %s\n# TYPE strata_%s %s\nstrata_%s %.17g\n", name, help, name, type,
                name, value);
}

char *srv_metrics_text(struct server *s) {
    pthread_mutex_lock(&s->mu);
    const struct srv_metrics m = s->metrics;
    const int queued = s->n_queued, running = s->n_running;
    pthread_mutex_unlock(&s->mu);
    struct sbuf b = {0};
    metric(&b, "requests_total", "counter", "Generation requests finished, in any way.", (double)m.requests);
    metric(&b, "requests_failed_total", "counter",
           "Generation requests that timed out, failed or were cut by a shutdown.",
           (double)m.requests_failed);
    metric(&b, "requests_cancelled_total", "counter",
           "Generation requests whose client went away before the end.", (double)m.requests_cancelled);
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
           (double)m.prompt_tokens);
    metric(&b, "prompt_tokens_cached_total", "counter",
           "Prompt tokens taken from the KV cache instead of being evaluated.",
           (double)m.prompt_tokens_cached);
    metric(&b, "generated_tokens_total", "counter",
           "Tokens generated and delivered (a client that left does not count what it missed).",
           (double)m.generated_tokens);
    metric(&b, "prompt_seconds_total", "counter", "Seconds spent evaluating prompts.", m.prompt_seconds);
    metric(&b, "generation_seconds_total", "counter", "Seconds spent generating tokens.",
           m.generation_seconds);
    metric(&b, "prompt_tokens_per_second", "gauge", "Prompt evaluation speed of the latest finished request.",
           m.last_prompt_tps);
    metric(&b, "generation_tokens_per_second", "gauge", "Generation speed of the latest finished request.",
           m.last_generation_tps);
    metric(&b, "steps_total", "counter", "Batched forward passes the worker ran.", (double)m.steps);
    metric(&b, "step_tokens_total", "counter", "Tokens in those passes (prompt and generated).",
           (double)m.step_tokens);
    metric(&b, "step_decode_tokens_total", "counter",
           "Of those, tokens of sequences that were generating (one each per pass).",
           (double)m.step_decode_tokens);
    metric(&b, "step_forward_seconds_total", "counter", "Seconds in the batched forward passes.",
           m.step_forward_seconds);
    metric(&b, "step_sample_seconds_total", "counter",
           "Seconds after them: sampling, detokenizing and publishing each sequence's token.",
           m.step_sample_seconds);
    metric(&b, "requests_in_flight", "gauge", "Requests being generated now.", running);
    metric(&b, "requests_queued", "gauge", "Requests waiting for the model.", queued);
    sbuf_puts(&b, "# HELP strata_http_responses_total HTTP responses by status class.\n"
                  "# TYPE strata_http_responses_total counter\n");
    for (int c = 1; c <= 5; c++)
        sbuf_printf(&b, "strata_http_responses_total{class=\"%dxx\"} %llu\n", c, m.http_responses[c]);
    return b.p;
}
