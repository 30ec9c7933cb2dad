// server_http.c: the HTTP side of `strata serve`, on libmicrohttpd.
//
// libmicrohttpd runs each connection on its own thread, so a handler may wait
// for its job; while it waits it polls the socket every 100 ms and cancels the
// job as soon as the client has gone. Streaming answers are Server-Sent Events
// from a content-reader callback that sends whatever text the worker released
// since its last call. The idle timeout (--idle-timeout) guards clients that
// send slowly; once a request is complete the connection's timeout is lifted,
// since the request's own deadline (--timeout) bounds the wait from then on.
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/server.h"
#include "server/server_page.h"
#include "util.h"

#define WAIT_STEP_S 0.1 // how often a waiting handler checks on its client

enum route_id {
    ROUTE_PAGE,
    ROUTE_FAVICON,
    ROUTE_MARKED,
    ROUTE_PROPS,
    ROUTE_EMBEDDINGS,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
};

struct route {
    const char *path;
    enum route_id id;
    bool post;  // POST with a JSON body; otherwise GET (and HEAD)
    bool open;  // served without the API key
    bool model; // needs the loaded model
};

// The OpenAI routes answer with and without the /v1 prefix (route_find).
static const struct route routes[] = {
    {"/", ROUTE_PAGE, false, true, false},
    {"/favicon.ico", ROUTE_FAVICON, false, true, false},
    {"/assets/marked.min.js", ROUTE_MARKED, false, true, false},
    {"/health", ROUTE_HEALTH, false, true, false},
    {"/metrics", ROUTE_METRICS, false, false, false},
    {"/props", ROUTE_PROPS, false, false, true},
    {"/v1/models", ROUTE_MODELS, false, false, true},
    {"/v1/models/", ROUTE_MODEL, false, false, true}, // prefix: /v1/models/{id}
    {"/v1/chat/completions", ROUTE_CHAT, true, false, true},
    {"/v1/completions", ROUTE_COMPLETIONS, true, false, true},
    {"/v1/embeddings", ROUTE_EMBEDDINGS, true, false, true},
    {"/tokenize", ROUTE_TOKENIZE, true, false, true},
    {"/detokenize", ROUTE_DETOKENIZE, true, false, true},
};

// One request's state, from its headers to its completion.
struct http_req {
    const struct route *route;
    const char *model_id; // ROUTE_MODEL: the id in the URL (into the URL string)
    bool answered;        // a response was queued when the headers arrived
    struct sbuf body;
    double t_arrival;
};

static const struct route *route_find(const char *url, const char **model_id) {
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
            const struct route *r = &routes[i];
            const char *path = r->path;
            if (pass == 1) { // /models, /chat/completions, ... as /v1/...
                if (strncmp(path, "/v1/", 4)) continue;
                path += 3;
            }
            if (r->id == ROUTE_MODEL) {
                size_t n = strlen(path);
                if (!strncmp(url, path, n) && url[n]) {
                    *model_id = url + n;
                    return r;
                }
            } else if (!strcmp(url, path)) {
                return r;
            }
        }
    }
    return NULL;
}

// --- responses --------------------------------------------------------------------

// Sends body (malloc'd, taken) with the given status and content type, plus
// one optional header.
static enum MHD_Result respond(struct server *s, struct MHD_Connection *c, int status,
                               const char *content_type, char *body, const char *header, const char *value) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (header) MHD_add_response_header(resp, header, value);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    srv_metrics_http(s, status);
    return rc;
}

// Sends len bytes of static data.
static enum MHD_Result respond_bytes(struct server *s, struct MHD_Connection *c, const char *content_type,
                                     const char *data, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "max-age=86400");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    srv_metrics_http(s, MHD_HTTP_OK);
    return rc;
}

static enum MHD_Result respond_json(struct server *s, struct MHD_Connection *c, int status, char *json) {
    return respond(s, c, status, "application/json", json, NULL, NULL);
}

static enum MHD_Result respond_error(struct server *s, struct MHD_Connection *c, const struct srv_error *e,
                                     const char *method, const char *url) {
    fprintf(stderr, "strata serve: %d %s %s: %s\n", e->status, method, url, e->message);
    const char *header = NULL, *value = NULL;
    if (e->status == 401) header = MHD_HTTP_HEADER_WWW_AUTHENTICATE, value = "Bearer";
    if (e->status == 503) header = MHD_HTTP_HEADER_RETRY_AFTER, value = "1";
    return respond(s, c, e->status, "application/json", srv_json_error(e), header, value);
}

static char *dup_str(const char *s) {
    char *d = strdup(s);
    ST_ASSERT(d);
    return d;
}

// True once the client has closed its end (or the socket failed).
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static bool authorized(const struct server *s, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    const char *key = s->cfg.api_key;
    size_t n = strlen(key);
    if (strlen(h) != n) return false;
    unsigned char diff = 0; // compare every byte: the time says nothing of the key
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(h[i] ^ key[i]);
    return diff == 0;
}

// --- streaming ---------------------------------------------------------------------

struct sse_stream {
    struct server *s;
    struct srv_job *j;
    struct MHD_Connection *c;
    struct sbuf out; // events formatted, not yet sent from out.p + sent
    size_t sent;
    bool opened, closed;
};

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct sse_stream *st = cls;
    struct server *s = st->s;
    struct srv_job *j = st->j;
    for (;;) {
        if (st->sent < st->out.len) {
            size_t n = st->out.len - st->sent < max ? st->out.len - st->sent : max;
            memcpy(buf, st->out.p + st->sent, n);
            st->sent += n;
            if (st->sent == st->out.len) st->out.len = st->sent = 0;
            return (ssize_t)n;
        }
        if (st->closed) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&s->mu);
        st->closed = srv_sse_drain_locked(&st->out, s, j);
        if (!st->closed && !st->out.len) srv_job_wait_locked(s, j, WAIT_STEP_S);
        pthread_mutex_unlock(&s->mu);
        if (!st->closed && !st->out.len && client_gone(st->c))
            return MHD_CONTENT_READER_END_WITH_ERROR; // sse_free cancels the job
    }
}

static void sse_free(void *cls) {
    struct sse_stream *st = cls;
    pthread_mutex_lock(&st->s->mu);
    if (st->j->state != SRV_JOB_DONE) srv_job_cancel_locked(st->s, st->j);
    pthread_mutex_unlock(&st->s->mu);
    srv_job_release(st->s, st->j);
    sbuf_free(&st->out);
    free(st);
}

static enum MHD_Result respond_stream(struct server *s, struct MHD_Connection *c, struct srv_job *j) {
    struct sse_stream *st = st_xcalloc(1, sizeof *st);
    *st = (struct sse_stream){.s = s, .j = j, .c = c};
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, st, sse_free);
    if (!resp) {
        sse_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no"); // proxies: do not hold chunks
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp); // sse_free runs when the response is done with
    srv_metrics_http(s, MHD_HTTP_OK);
    return rc;
}

// --- handlers -----------------------------------------------------------------------

// Waits for a non-streaming job; answers with its result or its error.
static enum MHD_Result respond_when_done(struct server *s, struct MHD_Connection *c, struct srv_job *j,
                                         const char *method, const char *url) {
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (j->state != SRV_JOB_DONE) srv_job_wait_locked(s, j, WAIT_STEP_S);
        const bool done = j->state == SRV_JOB_DONE;
        pthread_mutex_unlock(&s->mu);
        if (done) break;
        if (client_gone(c)) {
            pthread_mutex_lock(&s->mu);
            srv_job_cancel_locked(s, j);
            pthread_mutex_unlock(&s->mu);
            srv_job_release(s, j);
            return MHD_NO; // closes the connection
        }
    }
    enum MHD_Result rc;
    if (j->req.kind == SRV_EMBEDDING && j->finish == SRV_FINISH_STOP) {
        rc = respond_json(s, c, MHD_HTTP_OK, srv_json_embeddings(s, j));
    } else if (j->req.kind != SRV_EMBEDDING && srv_job_has_result(j)) {
        pthread_mutex_lock(&s->mu);
        j->n_taken = j->stats.n_gen;
        pthread_mutex_unlock(&s->mu);
        rc = respond_json(s, c, MHD_HTTP_OK, srv_json_result(s, j));
    } else {
        struct srv_error e;
        srv_job_error(j, s->cfg.timeout_s, &e);
        rc = respond_error(s, c, &e, method, url);
    }
    srv_job_release(s, j);
    return rc;
}

static enum MHD_Result on_generate(struct server *s, struct MHD_Connection *c, struct http_req *r,
                                   enum srv_kind kind, const char *method, const char *url) {
    struct srv_error e;
    struct srv_request req;
    int prc = kind == SRV_EMBEDDING ? srv_embeddings_parse(s, r->body.p, r->body.len, &req, &e)
                                    : srv_request_parse(s, kind, r->body.p, r->body.len, &req, &e);
    if (prc) return respond_error(s, c, &e, method, url);
    const bool stream = req.stream;
    struct srv_job *j = srv_job_submit(s, &req, r->t_arrival, &e);
    if (!j) {
        srv_request_free(&req);
        return respond_error(s, c, &e, method, url);
    }
    return stream ? respond_stream(s, c, j) : respond_when_done(s, c, j, method, url);
}

// A complete POST body has arrived.
static enum MHD_Result on_body(struct server *s, struct MHD_Connection *c, struct http_req *r,
                               const char *method, const char *url) {
    // from here the request's deadline bounds the wait, not the idle timeout
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    sbuf_append(&r->body, "", 0); // a NUL after the body, even an empty one
    struct srv_error e;
    char *json;
    switch (r->route->id) {
    case ROUTE_CHAT:
        return on_generate(s, c, r, SRV_CHAT, method, url);
    case ROUTE_COMPLETIONS:
        return on_generate(s, c, r, SRV_COMPLETION, method, url);
    case ROUTE_EMBEDDINGS:
        return on_generate(s, c, r, SRV_EMBEDDING, method, url);
    case ROUTE_TOKENIZE:
        json = srv_tokenize(s, r->body.p, r->body.len, &e);
        break;
    case ROUTE_DETOKENIZE:
        json = srv_detokenize(s, r->body.p, r->body.len, &e);
        break;
    default:
        ST_ASSERT(!"a GET route has no body handler");
        return MHD_NO;
    }
    return json ? respond_json(s, c, MHD_HTTP_OK, json) : respond_error(s, c, &e, method, url);
}

static enum MHD_Result on_get(struct server *s, struct MHD_Connection *c, struct http_req *r,
                              const char *method, const char *url) {
    struct srv_error e;
    switch (r->route->id) {
    case ROUTE_PAGE:
        return respond(s, c, MHD_HTTP_OK, "text/html; charset=utf-8", dup_str(server_page_html), NULL, NULL);
    case ROUTE_HEALTH: {
        int state = s->state;
        if (state == SRV_READY) return respond_json(s, c, MHD_HTTP_OK, dup_str("{\"status\":\"ok\"}"));
        const char *body = state == SRV_LOADING    ? "{\"status\":\"loading\"}"
                           : state == SRV_STOPPING ? "{\"status\":\"stopping\"}"
                                                   : "{\"status\":\"error\"}";
        return respond(s, c, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json", dup_str(body),
                       MHD_HTTP_HEADER_RETRY_AFTER, "1");
    }
    case ROUTE_FAVICON:
        return respond_bytes(s, c, "image/svg+xml", server_page_favicon, strlen(server_page_favicon));
    case ROUTE_MARKED: {
        size_t len = 0;
        char *js = server_page_marked(&len);
        if (!js) {
            srv_error_set(&e, 404, "invalid_request_error", "unknown_url", NULL,
                          "the Markdown renderer is not installed (Debian's libjs-marked); the "
                          "chat page shows plain text");
            return respond_error(s, c, &e, method, url);
        }
        return respond(s, c, MHD_HTTP_OK, "text/javascript; charset=utf-8", js, NULL, NULL);
    }
    case ROUTE_PROPS:
        return respond_json(s, c, MHD_HTTP_OK, srv_json_props(s));
    case ROUTE_METRICS:
        return respond(s, c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", srv_metrics_text(s),
                       NULL, NULL);
    case ROUTE_MODELS:
        return respond_json(s, c, MHD_HTTP_OK, srv_json_models(s));
    case ROUTE_MODEL:
        if (!strcmp(r->model_id, s->model_id)) return respond_json(s, c, MHD_HTTP_OK, srv_json_model(s));
        srv_error_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                      "the model '%.100s' does not exist; this server has '%s'", r->model_id, s->model_id);
        return respond_error(s, c, &e, method, url);
    default:
        ST_ASSERT(!"a POST route has no GET handler");
        return MHD_NO;
    }
}

// The request's headers have arrived: route, method, key, state and size checks.
static enum MHD_Result on_headers(struct server *s, struct MHD_Connection *c, struct http_req *r,
                                  const char *method, const char *url) {
    struct srv_error e;
    r->answered = true; // every path but the one that waits for a body responds now
    r->route = route_find(url, &r->model_id);
    if (!r->route) {
        srv_error_set(&e, 404, "invalid_request_error", "unknown_url", NULL,
                      "unknown request URL: %.16s %.200s", method, url);
        return respond_error(s, c, &e, method, url);
    }
    const bool post = !strcmp(method, "POST");
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (r->route->post ? !post : !get) {
        srv_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                      "%.200s does not take %.16s; use %s", url, method, r->route->post ? "POST" : "GET");
        fprintf(stderr, "strata serve: 405 %s %s\n", method, url);
        return respond(s, c, 405, "application/json", srv_json_error(&e), MHD_HTTP_HEADER_ALLOW,
                       r->route->post ? "POST" : "GET, HEAD");
    }
    if (!r->route->open && s->cfg.api_key && !authorized(s, c)) {
        srv_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                      "missing or wrong API key: send the header 'Authorization: Bearer KEY'");
        return respond_error(s, c, &e, method, url);
    }
    const int state = s->state;
    if (r->route->model && state != SRV_READY) {
        if (state == SRV_LOADING)
            srv_error_set(&e, 503, "server_error", "model_loading", NULL,
                          "the model is still loading; retry shortly (GET /health says when it is "
                          "ready)");
        else
            srv_error_set(&e, 503, "server_error", "server_stopping", NULL, "the server is shutting down");
        return respond_error(s, c, &e, method, url);
    }
    if (!r->route->post) return on_get(s, c, r, method, url);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
        srv_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                      "the request body has %.20s bytes; the server takes at most %zu "
                      "(--max-body)",
                      cl, s->cfg.max_body);
        return respond_error(s, c, &e, method, url);
    }
    r->answered = false;
    return MHD_YES; // the body follows
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size,
                                  void **con_cls) {
    (void)version;
    struct server *s = cls;
    struct http_req *r = *con_cls;
    if (!r) {
        r = st_xcalloc(1, sizeof *r);
        r->t_arrival = st_time_s();
        *con_cls = r;
        return on_headers(s, c, r, method, url);
    }
    if (r->answered) { // an early answer: the rest of the body is not wanted
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (r->body.len + *upload_size > s->cfg.max_body) {
            // no Content-Length told us before: the body grew past the limit
            fprintf(stderr, "strata serve: %s %s: body over %zu bytes (--max-body); closing\n", method, url,
                    s->cfg.max_body);
            return MHD_NO;
        }
        sbuf_append(&r->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    return on_body(s, c, r, method, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    (void)code;
    struct server *s = cls;
    struct http_req *r = *con_cls;
    if (!r) return;
    // the connection may carry another request: idle limits apply again
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.idle_timeout_s);
    sbuf_free(&r->body);
    free(r);
    *con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    fprintf(stderr, "strata serve: http: %s\n", msg);
}

int srv_http_start(struct server *s) {
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg.port);
    int rc = getaddrinfo(s->cfg.host, port, &hints, &res);
    if (rc) return st_fail("--host %s: %s", s->cfg.host, gai_strerror(rc));
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (res->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    errno = 0;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, // the logger must come first
        MHD_OPTION_EXTERNAL_LOGGER, on_log, s, MHD_OPTION_SOCK_ADDR, res->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)s->cfg.idle_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    int err = errno;
    freeaddrinfo(res);
    if (!d)
        return st_fail("cannot listen on %s port %d: %s (is the port taken? --port 0 picks a "
                       "free one)",
                       s->cfg.host, s->cfg.port, err ? strerror(err) : "libmicrohttpd refused");
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info && info->port ? info->port : s->cfg.port;
    s->daemon = d;
    return 0;
}

void srv_http_stop(struct server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
