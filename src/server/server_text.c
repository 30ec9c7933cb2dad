// server_text.c: see server_text.h.
#include "server/server_text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char replacement_char[] = "\xEF\xBF\xBD"; // U+FFFD

// --- sbuf ---------------------------------------------------------------------

static void sbuf_reserve(struct sbuf *b, size_t extra) {
    ST_ASSERT(extra < ((size_t)1 << 40) && b->len < ((size_t)1 << 40));
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        fprintf(stderr, "strata: out of memory growing a text buffer to %zu bytes\n", cap);
        abort();
    }
    b->p = p;
    b->cap = cap;
}

void sbuf_append(struct sbuf *b, const void *data, size_t len) {
    sbuf_reserve(b, len);
    if (len) memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = 0;
}

void sbuf_puts(struct sbuf *b, const char *s) { sbuf_append(b, s, strlen(s)); }

void sbuf_printf(struct sbuf *b, const char *fmt, ...) {
    sbuf_reserve(b, 128);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    ST_ASSERT(n >= 0);
    if ((size_t)n >= b->cap - b->len) { // it did not fit: grow and format again
        sbuf_reserve(b, (size_t)n);
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void sbuf_consume(struct sbuf *b, size_t n) {
    ST_ASSERT(n <= b->len);
    if (!n) return;
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}

void sbuf_free(struct sbuf *b) {
    free(b->p);
    *b = (struct sbuf){0};
}

// --- UTF-8 ----------------------------------------------------------------------

enum utf8_status utf8_check(const unsigned char *s, size_t n, size_t *len) {
    ST_ASSERT(n >= 1);
    const unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; // allowed range of the second byte
    if (c < 0x80) {
        *len = 1;
        return UTF8_OK;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0; // no overlongs
        else if (c == 0xED)
            hi = 0x9F; // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90; // no overlongs
        else if (c == 0xF4)
            hi = 0x8F; // nothing above U+10FFFF
    } else {
        *len = 1; // a continuation byte, C0/C1 or F5..FF
        return UTF8_BAD;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return UTF8_SHORT;
        unsigned b = s[i];
        bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            *len = i; // the maximal valid start becomes one U+FFFD
            return UTF8_BAD;
        }
    }
    *len = need;
    return UTF8_OK;
}

bool utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { // fast path for ASCII
            i++;
            continue;
        }
        size_t len;
        if (utf8_check(u + i, n - i, &len) != UTF8_OK) return false;
        i += len;
    }
    return true;
}

// Appends the complete sequences of s[0..n) to out (invalid ones as U+FFFD) and
// returns how many bytes were consumed; an unfinished sequence at the end is
// left unconsumed.
static size_t utf8_append_complete(struct sbuf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; // s[run..i) is valid and not yet appended
    while (i < n) {
        size_t len;
        enum utf8_status st = u[i] < 0x80 ? (len = 1, UTF8_OK) : utf8_check(u + i, n - i, &len);
        if (st == UTF8_OK) {
            i += len;
            continue;
        }
        sbuf_append(out, s + run, i - run);
        if (st == UTF8_SHORT) return i;
        sbuf_append(out, replacement_char, 3);
        i += len;
        run = i;
    }
    sbuf_append(out, s + run, i - run);
    return n;
}

void utf8_append_sanitized(struct sbuf *out, const char *s, size_t n) {
    size_t used = utf8_append_complete(out, s, n);
    if (used < n) sbuf_append(out, replacement_char, 3);
}

// --- the stream filter -------------------------------------------------------------

void text_filter_init(struct text_filter *f, const char *const *stop, int n_stop) {
    *f = (struct text_filter){.stop = stop, .n_stop = n_stop};
    for (int i = 0; i < n_stop; i++) ST_ASSERT(stop[i] && stop[i][0]);
}

void text_filter_free(struct text_filter *f) {
    sbuf_free(&f->raw);
    sbuf_free(&f->held);
}

// Releases held text: up to the earliest stop string when one occurs (returns
// true), else all but the longest tail that begins some stop string (all of it
// when final).
static bool filter_release(struct text_filter *f, struct sbuf *out, bool final) {
    const char *h = f->held.p;
    const size_t n = f->held.len;
    // The stop string completed first wins (the earliest end; on a tie the
    // longer one), as if the text had come one byte at a time: that keeps the
    // result independent of how the text was cut into pieces.
    size_t first = n, first_end = SIZE_MAX;
    for (int k = 0; k < f->n_stop; k++) {
        size_t sl = strlen(f->stop[k]);
        const char *at = n ? memmem(h, n, f->stop[k], sl) : NULL;
        if (!at) continue;
        size_t start = (size_t)(at - h), end = start + sl;
        if (end < first_end || (end == first_end && start < first)) {
            first = start;
            first_end = end;
        }
    }
    if (first_end != SIZE_MAX) {
        sbuf_append(out, h, first);
        f->held.len = 0;
        f->stopped = true;
        return true;
    }
    size_t keep = 0;
    if (!final) {
        for (int k = 0; k < f->n_stop; k++) {
            size_t sl = strlen(f->stop[k]);
            size_t max = sl - 1 < n ? sl - 1 : n; // a complete match was ruled out above
            for (size_t t = max; t > keep; t--)
                if (!memcmp(h + n - t, f->stop[k], t)) {
                    keep = t;
                    break;
                }
        }
    }
    sbuf_append(out, h, n - keep);
    sbuf_consume(&f->held, n - keep);
    return false;
}

bool text_filter_push(struct text_filter *f, const char *s, size_t n, struct sbuf *out) {
    if (f->stopped) return true;
    sbuf_append(&f->raw, s, n);
    size_t used = utf8_append_complete(&f->held, f->raw.p, f->raw.len);
    sbuf_consume(&f->raw, used);
    return filter_release(f, out, false);
}

void text_filter_flush(struct text_filter *f, struct sbuf *out) {
    if (f->stopped) return;
    if (f->raw.len) {
        utf8_append_sanitized(&f->held, f->raw.p, f->raw.len);
        f->raw.len = 0;
    }
    filter_release(f, out, true);
}
