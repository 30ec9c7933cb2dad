// server_text.h: text that leaves the engine — strict UTF-8 checks and the
// stream filter that turns generated token pieces into text safe to send.
//
// A token's piece can end in the middle of a multi-byte character, and the
// text after a stop string must never be sent. The filter therefore holds back
// an incomplete UTF-8 sequence until it completes, and the longest tail that
// could be the start of a stop string until the next piece settles it. What it
// releases is always valid UTF-8 (an invalid byte sequence becomes U+FFFD), so
// it can be put into JSON at any point.
#ifndef STRATA_SERVER_TEXT_H
#define STRATA_SERVER_TEXT_H

#include <stdbool.h>
#include <stddef.h>

// A growable byte buffer, always NUL-terminated after its len bytes (when p is
// not NULL). Allocation failure aborts, as for st_xmalloc: its sizes are bounded
// by the context length and the request body limit.
struct sbuf {
    char *p;
    size_t len, cap;
};

void sbuf_append(struct sbuf *b, const void *data, size_t len);
void sbuf_puts(struct sbuf *b, const char *s);
void sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Drops the first n bytes (n ≤ len).
void sbuf_consume(struct sbuf *b, size_t n);
void sbuf_free(struct sbuf *b);

enum utf8_status {
    UTF8_OK,    // a complete valid sequence of *len bytes
    UTF8_SHORT, // the n bytes are a valid but unfinished start of a sequence
    UTF8_BAD,   // not valid: the first *len bytes (≥ 1) stand for one U+FFFD
};
// Classifies the sequence at s[0..n) (n ≥ 1) by the Unicode definition of
// UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
enum utf8_status utf8_check(const unsigned char *s, size_t n, size_t *len);
// True when s[0..n) is entirely valid UTF-8.
bool utf8_valid(const char *s, size_t n);
// Appends s[0..n) to out with every invalid sequence (incomplete ones at the
// end included) replaced by U+FFFD.
void utf8_append_sanitized(struct sbuf *out, const char *s, size_t n);

struct text_filter {
    const char *const *stop; // [n_stop] borrowed, each non-empty valid UTF-8
    int n_stop;
    struct sbuf raw;  // bytes of an unfinished UTF-8 sequence (< 4)
    struct sbuf held; // valid text kept back: it may begin a stop string
    bool stopped;     // a stop string was found; nothing more is released
};

// Starts a filter for the given stop strings (may be 0 of them). The filter
// borrows stop: it must outlive the filter.
void text_filter_init(struct text_filter *f, const char *const *stop, int n_stop);
void text_filter_free(struct text_filter *f);
// Feeds n bytes of generated text; appends what is now certain to out. Returns
// true when a stop string has been completed: the text before it was released,
// the stop string and anything after it are dropped, and later calls release
// nothing.
bool text_filter_push(struct text_filter *f, const char *s, size_t n, struct sbuf *out);
// The generation ended: releases everything held (an unfinished sequence as
// U+FFFD) unless a stop string was found.
void text_filter_flush(struct text_filter *f, struct sbuf *out);

#endif
