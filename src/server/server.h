// server.h: `strata serve`, an OpenAI-compatible HTTP server — what its
// modules share.
//
//   server.c          start-up, signals, shutdown (options: cli/cli_serve.c)
//   server_http.c     HTTP (libmicrohttpd, a thread per connection): routes,
//                     authentication, bodies, SSE streaming, disconnects
//   server_request.c  request bodies (cJSON): every field's type and range,
//                     prompts rendered and tokenized, grammars compiled;
//                     embeddings inputs; /tokenize, /detokenize
//   server_tools.c    tools: definitions and earlier calls for the template,
//                     forced calls as a grammar, calls parsed from answers
//   server_json.c     responses shaped as OpenAI's: completions, chunks,
//                     logprobs, tool calls, embeddings, /props, errors
//   server_queue.c    the FIFO of jobs: submission, cancellation, waits
//   server_worker.c   the worker thread that owns the model and its context:
//                     continuous batching over slots, choices, sampling hooks
//                     (penalties, logit_bias, grammar masks, logprobs),
//                     cancellation, embeddings
//   server_metrics.c  counters and the Prometheus text of /metrics
//   server_text.c     UTF-8 and stop strings (server_text.h)
//   server_util.c     error objects, random values, response ids
//   server_page.c     the chat page served at /, its icon, the Markdown renderer
//
// Threads: libmicrohttpd runs each connection on its own thread; one worker
// thread loads the model, then runs jobs in its slots (-np), admitted in
// arrival order, every running job advanced by each batched step. A
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

struct cJSON;
typedef struct cJSON cJSON;

#define SRV_MAX_STOP 16      // stop strings per request
#define SRV_MAX_STOP_LEN 256 // bytes per stop string
#define SRV_MAX_CHOICES 16   // n
#define SRV_MAX_TOP 20       // top_logprobs
#define SRV_MAX_INPUTS 256   // inputs of one embeddings request
#define SRV_MAX_PROMPTS 16   // prompts of one completions request

struct grammar;
struct grammar_vocab;

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
int srv_error_set(struct srv_error *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));

enum srv_kind { SRV_CHAT, SRV_COMPLETION, SRV_EMBEDDING };

struct srv_bias {
    int32_t id;
    float bias; // added to the logit; -100 or less bans the token
};

// A validated request.
struct srv_request {
    enum srv_kind kind;
    int32_t *prompt; // (n_prompt) owned; 1 ≤ n_prompt < n_ctx; the first prompt of several
    int n_prompt;
    // Completions may send several prompts (n_sets, 1 otherwise): prompt 0 is
    // prompt, prompt k ≥ 1 set_prompt[k] (owned; set_prompt[0] stays NULL), each
    // with set_n[k] ids (1 … n_ctx - 1); both arrays NULL when n_sets is 1
    // (srv_set_prompt). Choice i answers prompt srv_choice_set(r, i), with the
    // sampler's seed + srv_choice_in_set(r, i).
    int n_sets;
    int32_t **set_prompt;
    int *set_n;
    struct sampler_params sp; // checked by sampler_params_check
    int max_tokens;           // ≥ 1, or -1: until the end of turn or a full context
    char *stop[SRV_MAX_STOP]; // owned, each non-empty valid UTF-8
    int n_stop;
    bool stream, include_usage;
    int n_choices;           // n (1 … SRV_MAX_CHOICES) times n_sets, each with its own sampler
    int logprobs;            // -1: none; else alternatives per token (0 … SRV_MAX_TOP)
    float presence_penalty;  // -2 … 2, over the tokens generated so far
    float frequency_penalty; // -2 … 2, times each token's count so far
    struct srv_bias *bias;   // (n_bias) owned: logit_bias
    int n_bias;
    struct grammar *grammar;     // owned, or NULL: response_format, grammar or forced tools
    char *echo;                  // completions' echo: the prompts' texts one after another (owned), or NULL;
    size_t *echo_off;            // prompt k's at echo_off[k] .. echo_off[k + 1] (n_sets + 1, owned)
    enum chat_tool_syntax tools; // CHAT_TOOLS_NONE: no tool calls are parsed
    // SRV_EMBEDDING: each input's token ids (owned)
    int32_t **inputs; // [n_inputs] each (n_input_tokens[i])
    int *n_input_tokens;
    int n_inputs;
    bool base64; // encoding_format "base64"
};

void srv_request_free(struct srv_request *r);

// The prompt choice i answers (0 … n_sets - 1), and its index among that
// prompt's choices (the seed's offset).
static inline int srv_choice_set(const struct srv_request *r, int i) {
    return r->n_sets > 1 ? i / (r->n_choices / r->n_sets) : 0;
}
static inline int srv_choice_in_set(const struct srv_request *r, int i) {
    return r->n_sets > 1 ? i % (r->n_choices / r->n_sets) : i;
}
// Prompt k (0 … n_sets - 1) of r: its ids, and their count in *n.
static inline const int32_t *srv_set_prompt(const struct srv_request *r, int k, int *n) {
    *n = k ? r->set_n[k] : r->n_prompt;
    return k ? r->set_prompt[k] : r->prompt;
}

enum srv_finish {
    SRV_FINISH_STOP,      // end of turn or a stop string
    SRV_FINISH_LENGTH,    // max_tokens or the context's end
    SRV_FINISH_CANCELLED, // the client went away
    SRV_FINISH_TIMEOUT,   // the request ran past --timeout
    SRV_FINISH_ERROR,     // the engine failed (message in error)
    SRV_FINISH_SHUTDOWN,  // the server is stopping
    SRV_FINISH_TOOLS,     // stop, and the answer was parsed as tool calls
};

enum srv_job_state { SRV_JOB_QUEUED, SRV_JOB_RUNNING, SRV_JOB_DONE };

// One generated token's log-probability and its most likely alternatives,
// from the model's own distribution (before penalties, biases and masks).
struct srv_logprob {
    int32_t id, prev; // the token and the one before it (for its text)
    float logprob;
    size_t offset; // where its bytes start in the choice's generated text
    int n_top;
    struct {
        int32_t id;
        float logprob;
    } top[SRV_MAX_TOP];
};

// One choice of a job. The worker fills it under server.mu; the connection
// reads it under server.mu and keeps its own progress in the *_sent fields.
struct srv_choice {
    struct sbuf text;       // text released so far (valid UTF-8)
    struct srv_logprob *lp; // [n_lp] when logprobs were asked for
    int n_lp, cap_lp;
    int n_gen; // tokens generated
    bool started, done;
    enum srv_finish finish; // once done
    char *tool_calls;       // once done: OpenAI's tool_calls array as JSON, or NULL
    size_t text_sent;       // the connection's progress
    int lp_sent;
    bool opened, closed;
};

struct srv_job {
    struct srv_request req; // immutable once submitted
    char id[40];            // "chatcmpl-..." or "cmpl-..."
    long long created;      // Unix seconds
    double t_arrival;       // st_time_s() when the request arrived
    double deadline;        // st_time_s() past which the job is stopped
    // Under server.mu:
    struct srv_job *next; // queue link
    int refs;
    enum srv_job_state state;
    bool cancel;                // the connection asked the worker to stop
    struct srv_choice *choices; // [req.n_choices]
    int n_taken;                // tokens the connection has sent (or taken to send)
    double t_taken;             // st_time_s() when it last took some
    pthread_cond_t cv;          // signalled when text grows or the job is done
    // Valid once state is SRV_JOB_DONE:
    enum srv_finish finish;
    char error[256];
    struct gen_stats stats; // all choices together
    double t_first;         // seconds from arrival to the first token (0: none)
    double t_gen_start;     // st_time_s() when the first choice began generating
    float *embd;            // SRV_EMBEDDING: (n_inputs, n_embd), each normalised
};

struct srv_metrics {
    unsigned long long requests;           // generation requests finished (any way)
    unsigned long long requests_failed;    // of which timed out, failed or cut by shutdown
    unsigned long long requests_cancelled; // of which the client went away
    unsigned long long prompt_tokens;      // prompt tokens of finished requests
    unsigned long long prompt_tokens_cached;
    unsigned long long generated_tokens;
    double prompt_seconds, generation_seconds;
    double last_prompt_tps, last_generation_tps; // of the latest finished request
    unsigned long long http_responses[6];        // by status class: [2] = 2xx ... [5] = 5xx
    // the worker's steps: how many, their tokens (decode tokens apart), and
    // the seconds of the batched forward pass and of what follows it (each
    // slot's sampling, detokenizing and publishing)
    unsigned long long steps, step_tokens, step_decode_tokens;
    double step_forward_seconds, step_sample_seconds;
};

struct server {
    struct server_config cfg;
    _Atomic int state;    // enum srv_state
    char load_error[512]; // why loading failed (state SRV_FAILED)
    // Set by the worker before state becomes SRV_READY, read-only afterwards.
    struct session sess; // the model, its backend and context
    struct chat_format fmt;
    struct grammar_vocab *gvocab; // the vocabulary's token bytes for grammars
    int pooling;                  // embeddings: 1 mean, 2 first token, 3 last token,
                                  // < 0: the file's pooling type, which is not supported
    bool have_chat;               // false: the model has no known chat template
    char chat_error[256];         // why not
    char model_id[128];
    long long created;
    int n_ctx;
    // Under mu:
    pthread_mutex_t mu;
    pthread_cond_t work_cv;      // signalled when a job is queued or on stop
    struct srv_job *head, *tail; // the queue
    int n_queued;
    int n_running;
    // The worker's own (server_worker.c): a slot per sequence of the session
    struct srv_slot *slots; // [n_slots]
    int n_slots;
    struct srv_slot **slot_order;   // [n_slots] a step's order
    struct forward_span *spans;     // [n_slots] a step's batch
    struct srv_slot **span_slots;   // [n_slots] whose each span is
    float *step_logits;             // (n_slots, n_vocab) a step's logits
    float **span_logits;            // [n_slots] each span's row of them (NULL: none)
    struct threadpool *sample_pool; // the spans' sampling threads (NULL: the worker alone)
    struct srv_metrics metrics;
    uint64_t rng;            // ids and default seeds
    pthread_mutex_t json_mu; // cJSON's parser keeps a global error position
    void *daemon;            // struct MHD_Daemon
    int port;                // the bound port
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

// --- server_worker.c ---
// The worker thread: loads the model (state SRV_READY, or SRV_FAILED with
// load_error), then runs queued jobs, several at once in its slots, until
// state is SRV_STOPPING.
void *srv_worker_main(void *server);
// Frees the slots (after the worker has been joined).
void srv_slots_free(struct server *s);

// --- server_queue.c ---
// Frees a job whose last reference is gone.
void srv_job_free(struct srv_job *j);
// Marks j done with finish f, waking its connection. Caller holds s->mu.
void srv_job_finish_locked(struct server *s, struct srv_job *j, enum srv_finish f);
// Unlinks a queued job. Caller holds s->mu.
void srv_queue_remove_locked(struct server *s, struct srv_job *j);
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
// Parses and validates a /v1/embeddings body (its inputs tokenized). Returns 0
// and fills *r, or -1 with err.
int srv_embeddings_parse(struct server *s, const char *body, size_t len, struct srv_request *r,
                         struct srv_error *err);
// POST /tokenize and /detokenize: the JSON response (malloc'd), or NULL with err.
char *srv_tokenize(struct server *s, const char *body, size_t len, struct srv_error *err);
char *srv_detokenize(struct server *s, const char *body, size_t len, struct srv_error *err);

// --- server_json.c ---
// OpenAI's error object {"error": {"message", "type", "param", "code"}} (malloc'd).
char *srv_json_error(const struct srv_error *e);
// Whether a finished job has an answer to send (it ended normally, or timed
// out after producing tokens).
bool srv_job_has_result(const struct srv_job *j);
// The whole response of a finished job that has a result (malloc'd).
char *srv_json_result(const struct server *s, const struct srv_job *j);
// The response of a finished embeddings job (malloc'd).
char *srv_json_embeddings(const struct server *s, const struct srv_job *j);
// Appends the SSE events of what the job produced since the last call (role,
// text and logprobs chunks, finish chunks, then usage and "data: [DONE]", or
// an error event for a job that ended without a result). Caller holds s->mu.
// Returns true once the stream is complete.
bool srv_sse_drain_locked(struct sbuf *out, const struct server *s, struct srv_job *j);
// The error a job that ended without a result (cancelled, timed out, failed) reports.
void srv_job_error(const struct srv_job *j, double timeout_s, struct srv_error *e);
// GET /props: what the server runs and its defaults (malloc'd).
char *srv_json_props(const struct server *s);
// GET /v1/models and /v1/models/{id} (malloc'd).
char *srv_json_models(const struct server *s);
char *srv_json_model(const struct server *s);

// --- server_tools.c ---
// The tool calls in a finished answer written in the given syntax: OpenAI's
// tool_calls array as JSON text (malloc'd), or NULL when the text is not a
// tool call (it is then the answer's content).
char *srv_tools_parse(struct server *s, enum chat_tool_syntax syn, const char *text, size_t len);

// What a chat request's tools come to (free with srv_tools_free).
struct srv_tools {
    char **defs; // [n_defs] each tool as the template prints it
    int n_defs;
    struct chat_calls *calls;   // [n_messages] each message's tool calls, or NULL
    int *first;                 // [n_messages] where each message's calls start in all
    struct chat_tool_call *all; // the calls themselves (names and arguments owned)
    int n_all;
    char *grammar; // GBNF forcing a call (tool_choice required or named), or NULL
};
void srv_tools_free(struct srv_tools *t);
// Reads tools, tool_choice and parallel_tool_calls of a chat request whose
// template family is kind; sets r->tools and t->defs, t->grammar. Returns 0 or
// -1 with a 400 naming the field.
int srv_tools_request(const cJSON *root, enum chat_template kind, struct srv_request *r, struct srv_tools *t,
                      struct srv_error *e);
// Reads message i's tool_calls (an assistant message) into t (n messages in
// all). Returns 0 or -1 with a 400 naming the field.
int srv_tools_message(const cJSON *m, int i, int n, enum chat_template kind, struct srv_tools *t,
                      struct srv_error *e);
// Every message's calls (for chat_render_tools) once all n are read, or NULL when none has any.
const struct chat_calls *srv_tools_calls(struct srv_tools *t, int n);

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
