// server_util.c: what every server module may use without depending on
// another: error objects, random values and response ids.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "server/server.h"
#include "util.h"

int srv_error_set(struct srv_error *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

uint64_t srv_random(struct server *s) {
    pthread_mutex_lock(&s->mu);
    const uint64_t r = st_splitmix64(&s->rng);
    pthread_mutex_unlock(&s->mu);
    return r;
}

void srv_make_id(struct server *s, const char *prefix, char *out, size_t cap) {
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    size_t n = strlen(prefix);
    ST_ASSERT(cap >= n + 25);
    memcpy(out, prefix, n);
    uint64_t r = 0;
    for (int i = 0; i < 24; i++) {
        if (i % 8 == 0) r = srv_random(s);
        out[n + i] = chars[r % 62];
        r /= 62;
    }
    out[n + 24] = 0;
}
