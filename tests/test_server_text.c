// test_server_text.c: UTF-8 checks against Python's codec
// (tests/reference/utf8_reference.py) and the stream filter's properties on
// random text cut at random places, with random stop strings.
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_text.h"
#include "test.h"

static uint64_t rng_state;

static uint64_t rng_next(void) {
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static size_t rng_below(size_t n) { return (size_t)(rng_next() % n); }

static size_t unhex(const char *h, unsigned char *out, size_t cap) {
    size_t n = 0;
    while (h[0] && h[1] && n < cap) {
        unsigned v;
        if (sscanf(h, "%2x", &v) != 1) break;
        out[n++] = (unsigned char)v;
        h += 2;
    }
    return n;
}

// Every case of the fixture: validity and replacement agree with Python.
static void test_utf8_fixture(void) {
    FILE *f = fopen("tests/fixtures/utf8_cases.txt", "r");
    CHECK(f, "cannot open tests/fixtures/utf8_cases.txt (run from the repository root)");
    if (!f) return;
    char in_hex[512], out_hex[512];
    int valid, n_cases = 0, n_bad = 0;
    while (fscanf(f, "%511s %511s %d", in_hex, out_hex, &valid) == 3) {
        unsigned char in[256], want[256];
        size_t n_in = unhex(in_hex, in, sizeof in), n_want = unhex(out_hex, want, sizeof want);
        struct sbuf got = {0};
        utf8_append_sanitized(&got, (const char *)in, n_in);
        bool ok = got.len == n_want && !memcmp(got.p, want, n_want) &&
                  utf8_valid((const char *)in, n_in) == (valid == 1) && utf8_valid(got.p, got.len);
        if (!ok && n_bad++ < 5) CHECK(ok, "input %s: want %s", in_hex, out_hex);
        sbuf_free(&got);
        n_cases++;
    }
    fclose(f);
    CHECK(n_cases > 1000, "only %d cases read", n_cases);
    CHECK(n_bad == 0, "%d of %d cases differ", n_bad, n_cases);
}

static const char *const alphabet[] = {
    "a",
    "b",
    "c",
    " ",
    "\n",
    "\xC3\xA9" /* é */,
    "\xE2\x82\xAC" /* € */,
    "\xF0\x9F\x98\x80" /* 😀 */,
    "\xFF",
    "\x80",
    "\xE2\x82" /* truncated € */,
};

// Random text from the alphabet (valid characters, some junk bytes).
static size_t random_text(char *buf, size_t cap) {
    size_t n = 0, want = 1 + rng_below(cap / 4);
    while (n + 4 < cap && n < want) {
        const char *p = alphabet[rng_below(sizeof alphabet / sizeof *alphabet)];
        memcpy(buf + n, p, strlen(p));
        n += strlen(p);
    }
    return n;
}

// A stop string: usually a piece of the sanitized text (so it occurs), else random.
static void random_stop(const struct sbuf *clean, char *stop, size_t cap) {
    for (;;) {
        if (clean->len > 0 && rng_below(3)) {
            size_t start = rng_below(clean->len), len = 1 + rng_below(6);
            if (start + len > clean->len) len = clean->len - start;
            if (len >= cap || !utf8_valid(clean->p + start, len)) continue;
            memcpy(stop, clean->p + start, len);
            stop[len] = 0;
        } else {
            size_t n = random_text(stop, cap < 16 ? cap : 16);
            struct sbuf s = {0};
            utf8_append_sanitized(&s, stop, n);
            if (!s.len || s.len >= cap) {
                sbuf_free(&s);
                continue;
            }
            memcpy(stop, s.p, s.len + 1);
            sbuf_free(&s);
        }
        return;
    }
}

// Text cut into random pieces goes through the filter: what comes out equals
// the sanitized whole text cut before the stop string completed first; every release
// is valid UTF-8; and the filter never holds back more than a stop string's
// length (plus one unfinished character) of settled text.
static void test_filter_random(void) {
    int n_bad = 0;
    for (int iter = 0; iter < 3000 && n_bad < 3; iter++) {
        char text[256];
        size_t n = random_text(text, sizeof text);
        struct sbuf clean = {0};
        utf8_append_sanitized(&clean, text, n);
        char stops[4][32];
        const char *stop_ptrs[4];
        int n_stop = (int)rng_below(4);
        size_t max_stop = 0;
        for (int k = 0; k < n_stop; k++) {
            random_stop(&clean, stops[k], sizeof stops[k]);
            stop_ptrs[k] = stops[k];
            if (strlen(stops[k]) > max_stop) max_stop = strlen(stops[k]);
        }
        // the stop string that is complete first (earliest end, then earliest start)
        size_t want_len = clean.len, want_end = SIZE_MAX;
        for (int k = 0; k < n_stop; k++) {
            for (size_t st = 0; st + strlen(stops[k]) <= clean.len; st++) {
                if (memcmp(clean.p + st, stops[k], strlen(stops[k]))) continue;
                size_t end = st + strlen(stops[k]);
                if (end < want_end || (end == want_end && st < want_len)) {
                    want_len = st;
                    want_end = end;
                }
                break;
            }
        }
        struct text_filter f;
        text_filter_init(&f, stop_ptrs, n_stop);
        struct sbuf out = {0};
        bool stopped = false, ok = true;
        size_t pos = 0;
        while (pos < n && !stopped) {
            size_t len = 1 + rng_below(6);
            if (len > n - pos) len = n - pos;
            size_t before = out.len;
            stopped = text_filter_push(&f, text + pos, len, &out);
            pos += len;
            ok &= utf8_valid(out.p + before, out.len - before);
            // settled text so far: the sanitized prefix without its unfinished tail
            struct sbuf so_far = {0};
            utf8_append_sanitized(&so_far, text, pos);
            if (!stopped && so_far.len > out.len + max_stop + 3) ok = false;
            sbuf_free(&so_far);
        }
        if (!stopped) text_filter_flush(&f, &out);
        ok &= out.len == want_len && (!want_len || !memcmp(out.p, clean.p, want_len));
        ok &= f.stopped == (want_len < clean.len);
        if (!ok) {
            n_bad++;
            CHECK(ok, "iteration %d: text of %zu bytes, %d stop strings: got %zu bytes, want %zu", iter, n,
                  n_stop, out.len, want_len);
        }
        text_filter_free(&f);
        sbuf_free(&out);
        sbuf_free(&clean);
    }
}

// A stop string split across pieces, and a multi-byte character split across
// pieces, handled as a client would see them.
static void test_filter_examples(void) {
    const char *stop[] = {"</end>", "STOP"};
    struct text_filter f;
    text_filter_init(&f, stop, 2);
    struct sbuf out = {0};
    CHECK(!text_filter_push(&f, "Hello </e", 9, &out), "stopped early");
    CHECK(out.len == 6 && !memcmp(out.p, "Hello ", 6), "released '%s'", out.p);
    CHECK(!text_filter_push(&f, "x> caf\xC3", 7, &out), "stopped early");
    CHECK(!strcmp(out.p, "Hello </ex> caf"), "released '%s'", out.p);
    CHECK(!text_filter_push(&f, "\xA9 ST", 4, &out), "stopped early");
    CHECK(!strcmp(out.p, "Hello </ex> caf\xC3\xA9 "), "released '%s'", out.p);
    CHECK(text_filter_push(&f, "OP and more", 11, &out), "did not stop");
    CHECK(!strcmp(out.p, "Hello </ex> caf\xC3\xA9 "), "released '%s'", out.p);
    text_filter_flush(&f, &out);
    CHECK(!strcmp(out.p, "Hello </ex> caf\xC3\xA9 "), "flush after stop released '%s'", out.p);
    text_filter_free(&f);
    sbuf_free(&out);

    text_filter_init(&f, NULL, 0);
    CHECK(!text_filter_push(&f, "ab\xF0\x9F", 4, &out), "stopped");
    CHECK(!strcmp(out.p, "ab"), "released '%s'", out.p);
    text_filter_flush(&f, &out);
    CHECK(!strcmp(out.p, "ab\xEF\xBF\xBD"), "unfinished character not replaced: '%s'", out.p);
    text_filter_free(&f);
    sbuf_free(&out);
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    printf("seed %llu (set STRATA_SEED to repeat)\n", (unsigned long long)seed);
    rng_state = seed * 0x9E3779B97F4A7C15ull | 1;
    RUN(test_utf8_fixture);
    RUN(test_filter_examples);
    RUN(test_filter_random);
    TEST_END();
}
