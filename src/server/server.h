// server.h: `strata serve`, an OpenAI-compatible HTTP server — what its
// modules share.
//
//   server.c          start-up, signals, shutdown (options: cli/cli_serve.c)
//   server_http.c     HTTP (libmicrohttpd, a thread per connection): routes,
//                     authentication, bodies, SSE streaming, disconnects
//   server_request.c  request bodies (cJSON): every field's type and range,
//                     prompts rendered and tokenized; /tokenize, /detokenize
//   server_json.c     responses shaped as OpenAI's: completions, chunks, errors
//   server_queue.c    the FIFO of generation jobs and the one worker thread
//                     that owns the model and its context
//   server_metrics.c  counters and the Prometheus text of /metrics
//   server_text.c     UTF-8 and stop strings (server_text.h)
//   server_util.c     error objects, random values, response ids
//   server_page.c     the chat page served at /
//
// Threads: libmicrohttpd runs each connection on its own thread; one worker
// thread loads the model, then runs jobs one at a time in arrival order. A
// job is shared by its connection's thread and the worker under server.mu;
// each side holds a reference.
#ifndef STRATA_SERVER_H
#define STRATA_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/generate.h"
#include "model/session.h"
#include "text/chat.h"
#include "server/server_text.h"

#define SRV_MAX_STOP 16      // stop strings per request
#define SRV_MAX_STOP_LEN 256 // bytes per stop string

struct server_config {
    struct session_opts so;    // the model, context, batch, threads, backend
    struct sampler_params sp;  // sampling defaults of requests that do not set them
    bool seed_given;           // -s was given: requests without a seed use it
    const char *host;          // address to bind (default 127.0.0.1)
    int port;                  // 0: a free port, printed at start-up
    const char *api_key;       // NULL: no authentication
    const char *alias;         // the model's id; NULL: the file name without .gguf
    const char *template_name; // chat template family; NULL: the model's own
    bool no_think;             // requests default to enable_thinking=false (qwen3)
    size_t max_body;           // bytes a request body may have
    double timeout_s;          // a request's limit from arrival to its last token
    int max_queue;             // requests waiting beyond which new ones get 503
    int max_connections;       // open connections at most
    int idle_timeout_s;        // a connection silent this long while sending is closed
};

enum srv_state { SRV_LOADING, SRV_READY, SRV_STOPPING, SRV_FAILED };

// An error as the client will see it: HTTP status and OpenAI's error object.
struct srv_error {
    int status;
    const char *type; // "invalid_request_error", "server_error", ...
    const char *code; // a short machine-readable code, or NULL
    char param[96];   // the request field at fault, "" for none
    char message[512];
};

// Fills e; param may be NULL. Returns -1, so callers can `return srv_error_set(...)`.
int srv_error_set(struct srv_error *e, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

enum srv_kind { SRV_CHAT, SRV_COMPLETION };

// A validated generation request.
struct srv_request {
    enum srv_kind kind;
    int32_t *prompt;           // (n_prompt) owned; 1 ≤ n_prompt < n_ctx
    int n_prompt;
    struct sampler_params sp;  // checked by sampler_params_check
    int max_tokens;            // ≥ 1, or -1: until the end of turn or a full context
    char *stop[SRV_MAX_STOP];  // owned, each non-empty valid UTF-8
    int n_stop;
    bool stream, include_usage;
};

void srv_request_free(struct srv_request *r);

enum srv_finish {
    SRV_FINISH_STOP,      // end of turn or a stop string
    SRV_FINISH_LENGTH,    // max_tokens or the context's end
    SRV_FINISH_CANCELLED, // the client went away or the server is stopping
    SRV_FINISH_TIMEOUT,   // the request ran past --timeout
    SRV_FINISH_ERROR,     // the engine failed (message in error)
};

enum srv_job_state { SRV_JOB_QUEUED, SRV_JOB_RUNNING, SRV_JOB_DONE };

struct srv_job {
    struct srv_request req;   // immutable once submitted
    char id[40];              // "chatcmpl-..." or "cmpl-..."
    long long created;        // Unix seconds
    double t_arrival;         // st_time_s() when the request arrived
    double deadline;          // st_time_s() past which the job is stopped
    // Under server.mu:
    struct srv_job *next;     // queue link
    int refs;
    enum srv_job_state state;
    bool cancel;              // the connection asked the worker to stop
    struct sbuf text;         // released text not yet taken by the connection
    pthread_cond_t cv;        // signalled when text grows or the job is done
    // Valid once state is SRV_JOB_DONE:
    enum srv_finish finish;
    char error[256];
    struct gen_stats stats;
    double t_first;           // seconds from arrival to the first token (0: none)
};

struct srv_metrics {
    unsigned long long requests;          // generation requests finished (any way)
    unsigned long long requests_failed;   // of which cancelled, timed out or failed
    unsigned long long prompt_tokens;     // prompt tokens of finished requests
    unsigned long long prompt_tokens_cached;
    unsigned long long generated_tokens;
    double prompt_seconds, generation_seconds;
    double last_prompt_tps, last_generation_tps; // of the latest finished request
    unsigned long long http_responses[6]; // by status class: [2] = 2xx ... [5] = 5xx
};

struct server {
    struct server_config cfg;
    _Atomic int state;            // enum srv_state
    char load_error[512];         // why loading failed (state SRV_FAILED)
    // Set by the worker before state becomes SRV_READY, read-only afterwards.
    struct session sess;          // the model, its backend and context
    struct chat_format fmt;
    bool have_chat;               // false: the model has no known chat template
    char chat_error[256];         // why not
    char model_id[128];
    long long created;
    int n_ctx;
    // Under mu:
    pthread_mutex_t mu;
    pthread_cond_t work_cv;       // signalled when a job is queued or on stop
    struct srv_job *head, *tail;  // the queue
    int n_queued;
    int n_running;
    struct srv_metrics metrics;
    uint64_t rng;                 // ids and default seeds
    pthread_mutex_t json_mu;      // cJSON's parser keeps a global error position
    void *daemon;                 // struct MHD_Daemon
    int port;                     // the bound port
};

// --- server_util.c ---
// A random 64-bit value (ids, seeds). Takes s->mu.
uint64_t srv_random(struct server *s);
// Writes a fresh id "<prefix><24 random characters>" to out (cap ≥ 40).
void srv_make_id(struct server *s, const char *prefix, char *out, size_t cap);

// --- server.c ---
// Runs the server as cfg says until SIGINT or SIGTERM, or until loading the
// model fails. Returns the process exit status (0 after a signal, 1 on failure).
int server_run(const struct server_config *cfg);

// --- server_queue.c ---
// The worker thread: loads the model (state SRV_READY, or SRV_FAILED with
// load_error), then runs queued jobs until state is SRV_STOPPING.
void *srv_worker_main(void *server);
// Queues a generation of req (moved into the job; req is zeroed). Returns the
// job with two references (one for the caller, one for the worker), or NULL
// with a 503 in err when the queue is full or the server is stopping.
struct srv_job *srv_job_submit(struct server *s, struct srv_request *req, double t_arrival,
                               struct srv_error *err);
// Asks the job to stop: a queued job is done at once (SRV_FINISH_CANCELLED), a
// running one stops at its next token. Caller holds s->mu.
void srv_job_cancel_locked(struct server *s, struct srv_job *j);
// Waits on j->cv for at most `seconds`; ends a queued job whose deadline has
// passed (SRV_FINISH_TIMEOUT). Caller holds s->mu.
void srv_job_wait_locked(struct server *s, struct srv_job *j, double seconds);
// Drops the caller's reference (the last one frees the job). Takes s->mu.
void srv_job_release(struct server *s, struct srv_job *j);
// Stops the server: state SRV_STOPPING, every job cancelled, the worker woken.
void srv_stop(struct server *s);

// --- server_request.c ---
// Parses and validates a generation request body of the given kind and
// tokenizes its prompt. Returns 0 and fills *r (free with srv_request_free),
// or -1 with err (400 naming the field, 413, ...).
int srv_request_parse(struct server *s, enum srv_kind kind, const char *body, size_t len,
                      struct srv_request *r, struct srv_error *err);
// POST /tokenize and /detokenize: the JSON response (malloc'd), or NULL with err.
char *srv_tokenize(struct server *s, const char *body, size_t len, struct srv_error *err);
char *srv_detokenize(struct server *s, const char *body, size_t len, struct srv_error *err);

// --- server_json.c ---
// OpenAI's error object {"error": {"message", "type", "param", "code"}} (malloc'd).
char *srv_json_error(const struct srv_error *e);
// The whole response of a finished job whose text is text[0..len) (malloc'd).
char *srv_json_result(const struct server *s, const struct srv_job *j, const char *text,
                      size_t len);
// SSE events appended to out: the opening chunk (chat: the assistant role), a
// chunk carrying text, the closing chunks (finish reason, usage when asked,
// "data: [DONE]"), and an error event for a job that failed after the stream began.
void srv_sse_open(struct sbuf *out, const struct server *s, const struct srv_job *j);
void srv_sse_text(struct sbuf *out, const struct server *s, const struct srv_job *j,
                  const char *text, size_t len);
void srv_sse_close(struct sbuf *out, const struct server *s, const struct srv_job *j);
void srv_sse_error(struct sbuf *out, const struct srv_error *e);
// The error a job that ended without a result (cancelled, timed out, failed) reports.
void srv_job_error(const struct srv_job *j, double timeout_s, struct srv_error *e);
// GET /v1/models and /v1/models/{id} (malloc'd).
char *srv_json_models(const struct server *s);
char *srv_json_model(const struct server *s);

// --- server_metrics.c ---
// Adds a finished job to the counters. Caller holds s->mu.
void srv_metrics_job_locked(struct server *s, const struct srv_job *j);
// Counts an HTTP response by status class. Takes s->mu.
void srv_metrics_http(struct server *s, int status);
// The Prometheus text exposition of the counters (malloc'd).
char *srv_metrics_text(struct server *s);

// --- server_http.c ---
// Starts listening as s->cfg says; sets s->port. Returns 0 or -1 with a message.
int srv_http_start(struct server *s);
// Closes every connection (waiting for their threads) and stops listening.
void srv_http_stop(struct server *s);

#endif
