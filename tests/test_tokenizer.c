// test_tokenizer.c: token ids against the reference tokenizers, round trips,
// and the errors of bad vocabularies.
//
// Fixtures (tests/reference/tokenizer_reference.py and make_spm_vocab.py):
// tokenizer_{smollm,gpt2,llama_bpe,qwen2}.txt hold Hugging Face `tokenizers`
// ids for the SmolLM2 vocabulary under four pre-tokenizers (the last three
// are built here from the real model with tokenizer.ggml.pre swapped);
// tokenizer_spm.{gguf,txt} are a small SentencePiece vocabulary and
// sentencepiece's own ids. Each line: hex(text), ids(plain),
// ids(parse_special), ids(add_special + parse_special), hex(decode(ids(plain))).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/gguf_write.h"
#include "test.h"
#include "text/tokenizer.h"
#include "util.h"

// --- fixtures -------------------------------------------------------------------------

struct fcase {
    char *text;
    size_t len;
    int32_t *ids[3]; // plain, parse_special, add_special + parse_special
    int n[3];
    char *dec; // the reference's decoding of ids[0]
    size_t dec_len;
};

struct fixture {
    struct fcase *c;
    int n;
};

static char *unhex(const char *h, size_t *len) {
    size_t n = strcmp(h, "-") == 0 ? 0 : strlen(h) / 2;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        s[i] = (char)v;
    }
    s[n] = 0;
    *len = n;
    return s;
}

static int32_t *parse_ids(const char *s, int *n) {
    int cap = 8;
    int32_t *v = malloc(cap * sizeof *v);
    *n = 0;
    if (strcmp(s, "-") == 0) return v;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s) break;
        if (*n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[(*n)++] = (int32_t)x;
        s = end;
    }
    return v;
}

// Loads tests/fixtures/<name>; returns 0, or -1 when the file is missing or malformed.
static int fixture_load(const char *name, struct fixture *fx) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/%s", name);
    FILE *f = fopen(path, "r");
    memset(fx, 0, sizeof *fx);
    if (!f) return -1;
    static char line[1 << 16];
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = 0;
        char *field[5];
        int k = 0;
        for (char *p = line; k < 5; k++) {
            field[k] = p;
            p = strchr(p, '\t');
            if (!p) {
                k++;
                break;
            }
            *p++ = 0;
        }
        if (k != 5) {
            fclose(f);
            return -1;
        }
        if (fx->n == cap) fx->c = realloc(fx->c, (cap = cap ? 2 * cap : 256) * sizeof *fx->c);
        struct fcase *c = &fx->c[fx->n++];
        c->text = unhex(field[0], &c->len);
        for (int j = 0; j < 3; j++) c->ids[j] = parse_ids(field[1 + j], &c->n[j]);
        c->dec = unhex(field[4], &c->dec_len);
    }
    fclose(f);
    return fx->n > 0 ? 0 : -1;
}

static void fixture_free(struct fixture *fx) {
    for (int i = 0; i < fx->n; i++) {
        free(fx->c[i].text);
        for (int j = 0; j < 3; j++) free(fx->c[i].ids[j]);
        free(fx->c[i].dec);
    }
    free(fx->c);
}

static void print_text(const char *label, const char *s, size_t n) {
    printf("      %s \"", label);
    for (size_t i = 0; i < n && i < 200; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 32 && c < 127 && c != '"' && c != '\\')
            putchar(c);
        else
            printf("\\x%02x", c);
    }
    printf("\"\n");
}

static void print_ids(const char *label, const int32_t *v, int n) {
    printf("      %s [", label);
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", v[i]);
    printf("]\n");
}

static bool same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

// Every case of a fixture, id for id; prints the first failure of each kind.
static void check_fixture(const struct tokenizer *tok, const char *name) {
    struct fixture fx;
    CHECK(fixture_load(name, &fx) == 0, "cannot read tests/fixtures/%s", name);
    static const char *what[3] = {"plain", "parse_special", "add_special+parse_special"};
    int bad[5] = {0};
    for (int i = 0; i < fx.n; i++) {
        const struct fcase *c = &fx.c[i];
        for (int j = 0; j < 3; j++) {
            int32_t *ids;
            int n = tokenizer_encode(tok, c->text, c->len, j == 2, j >= 1, &ids);
            if (n < 0 || !same_ids(ids, n, c->ids[j], c->n[j])) {
                if (bad[j]++ == 0) {
                    printf("    %s: case %d, %s ids differ%s%s\n", name, i + 1, what[j], n < 0 ? ": " : "",
                           n < 0 ? st_last_error() : "");
                    print_text("text", c->text, c->len);
                    print_ids("want", c->ids[j], c->n[j]);
                    if (n >= 0) print_ids("got ", ids, n);
                }
            }
            if (n >= 0) free(ids);
        }
        // Decoding the reference ids: as the reference decodes them, and
        // with special tokens shown, back to the text.
        char *s;
        size_t len;
        int rc = tokenizer_decode(tok, c->ids[0], c->n[0], false, &s, &len);
        if (rc != 0 || len != c->dec_len || memcmp(s, c->dec, len) != 0) {
            if (bad[3]++ == 0) {
                printf("    %s: case %d, decode differs\n", name, i + 1);
                print_ids("ids ", c->ids[0], c->n[0]);
                print_text("want", c->dec, c->dec_len);
                if (rc == 0) print_text("got ", s, len);
            }
        }
        if (rc == 0) free(s);
        if (c->dec_len == c->len && memcmp(c->dec, c->text, c->len) == 0) {
            rc = tokenizer_decode(tok, c->ids[1], c->n[1], true, &s, &len);
            if (rc != 0 || len != c->len || memcmp(s, c->text, len) != 0) {
                if (bad[4]++ == 0) {
                    printf("    %s: case %d, decode(parse_special ids, special) is not the text\n", name,
                           i + 1);
                    print_text("want", c->text, c->len);
                    if (rc == 0) print_text("got ", s, len);
                }
            }
            if (rc == 0) free(s);
        }
    }
    printf("    %s: %d cases\n", name, fx.n);
    CHECK(bad[0] + bad[1] + bad[2] + bad[3] + bad[4] == 0,
          "%s: mismatches: plain %d, parse_special %d, add_special %d, decode %d, round trip %d", name,
          bad[0], bad[1], bad[2], bad[3], bad[4]);
    fixture_free(&fx);
}

// --- GGUFs built in memory ------------------------------------------------------------------

struct mem_gguf {
    uint8_t *bytes;
    struct gguf_file *f;
};

static int mem_open(struct gguf_writer *w, struct mem_gguf *m) {
    uint64_t size;
    m->f = NULL;
    if (gguf_writer_write_memory(w, &m->bytes, &size)) return -1;
    return gguf_open_memory(m->bytes, size, "test.gguf", &m->f);
}

static void mem_close(struct mem_gguf *m) {
    gguf_close(m->f);
    free(m->bytes);
}

// The real model's tokenizer metadata with tokenizer.ggml.pre = pre, and
// token `user_defined` (if >= 0) re-marked user-defined.
static int variant_open(const struct gguf_file *src, const char *pre, int32_t user_defined,
                        struct mem_gguf *m) {
    struct gguf_writer *w = gguf_writer_init();
    int rc = 0;
    for (uint64_t i = 0; i < src->n_kv && rc == 0; i++) {
        const struct gguf_kv *kv = &src->kv[i];
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.data);
        if (strncmp(key, "tokenizer.ggml.", 15) != 0 || strcmp(key, "tokenizer.ggml.pre") == 0) continue;
        if (strcmp(key, "tokenizer.ggml.token_type") == 0 && user_defined >= 0) {
            const struct gguf_array *a = &kv->value.v.arr;
            int32_t *types = malloc(a->count * sizeof *types);
            for (uint64_t k = 0; k < a->count; k++) types[k] = (int32_t)gguf_array_int(a, k);
            types[user_defined] = 4;
            rc = gguf_writer_add_arr(w, key, GGUF_VTYPE_INT32, types, a->count);
            free(types);
            continue;
        }
        rc = gguf_writer_add_value(w, key, &kv->value);
    }
    if (rc == 0) rc = gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
    if (rc == 0) rc = mem_open(w, m);
    gguf_writer_free(w);
    return rc;
}

// --- random strings -------------------------------------------------------------------------

static uint64_t rng_state;

static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3f)),
               o[2] = (char)(0x80 | (cp & 0x3f)), 3;
    o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

// A random string of up to 64 pieces: raw bytes (often invalid UTF-8), code
// points from many ranges, whitespace, digits, and special-token texts.
static size_t random_text(char *out, bool bytes) { // out: room for 64 * 16 bytes
    static const char *const bits[] = {" ",   "  ",   "\n",    "\r\n",         "\t",
                                       "'s",  "'LL",  "123",   "<|im_start|>", "<|im_end|>",
                                       "<s>", "</s>", "<unk>", "<|im_",        "\xe2\x96\x81"};
    static const uint32_t ranges[][2] = {
        {0x20, 0x7e},     {0xa0, 0x24f},    {0x370, 0x52f},   {0x600, 0x6ff},     {0x900, 0x97f},
        {0x3040, 0x30ff}, {0x4e00, 0x9fff}, {0xac00, 0xd7a3}, {0x1f300, 0x1faff}, {0x0, 0x10ffff}};
    size_t n = 0, pieces = rnd(64);
    for (size_t i = 0; i < pieces; i++) {
        uint32_t kind = rnd(10);
        if (kind < 3) {
            const char *b = bits[rnd(sizeof bits / sizeof bits[0])];
            memcpy(out + n, b, strlen(b));
            n += strlen(b);
        } else if (kind < 5 && bytes) {
            out[n++] = (char)rnd(256);
        } else {
            const uint32_t *r = ranges[rnd(sizeof ranges / sizeof ranges[0])];
            uint32_t cp = r[0] + rnd(r[1] - r[0] + 1);
            if (cp >= 0xd800 && cp <= 0xdfff) cp = 'x';
            n += put_utf8(cp, out + n);
        }
    }
    return n;
}

static bool has_spm_space(const char *s, size_t n) { return memmem(s, n, "\xe2\x96\x81", 3) != NULL; }

// Encodes and decodes text; returns the decoded text (malloc'd) or NULL.
static char *round_trip(const struct tokenizer *tok, const char *text, size_t n, bool special, size_t *len) {
    int32_t *ids;
    char *s = NULL;
    int k = tokenizer_encode(tok, text, n, false, special, &ids);
    if (k < 0) return NULL;
    if (tokenizer_decode(tok, ids, k, special, &s, len) != 0) s = NULL;
    free(ids);
    return s;
}

// decode(encode(text)) == text for random texts: plain ids decoded without
// specials, and parse_special ids decoded with them. Bytes the vocabulary has
// no token for are replaced first (the reference drops them too). With NFC
// the text comes back normalised: then decoding must be a fixed point.
static void check_round_trips(const struct tokenizer *tok, const char *name, bool spm, bool nfc) {
    bool byte_ok[256];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t *ids;
        int k = tokenizer_encode(tok, &c, 1, false, false, &ids);
        byte_ok[b] = k > 0;
        if (k >= 0) free(ids);
    }
    char text[64 * 16];
    int bad = 0;
    for (int it = 0; it < 400; it++) {
        size_t n = random_text(text, it % 2 == 0);
        for (size_t i = 0; i < n; i++)
            if (!byte_ok[(uint8_t)text[i]]) text[i] = 'x';
        if (spm && has_spm_space(text, n)) continue; // U+2581 is SentencePiece's space: it decodes to ' '
        for (int special = 0; special < 2; special++) {
            size_t len;
            char *s = round_trip(tok, text, n, special, &len), *first = NULL;
            const char *want = text;
            size_t want_len = n;
            if (s && nfc) {
                first = s, want = first, want_len = len;
                s = round_trip(tok, first, want_len, special, &len);
            }
            if (!s || len != want_len || memcmp(s, want, len) != 0) {
                if (bad++ == 0) {
                    printf("    %s: round trip (special %d) fails: %s\n", name, special,
                           s ? "" : st_last_error());
                    print_text("text", text, n);
                    if (s) print_text("got ", s, len);
                }
            }
            free(s);
            free(first);
        }
    }
    CHECK(bad == 0, "%s: %d random round trips failed", name, bad);
}

// --- tests ------------------------------------------------------------------------------------

static struct gguf_file *model;

static void test_spm_fixture(void) {
    struct gguf_file *f;
    struct tokenizer *tok;
    CHECK(gguf_open("tests/fixtures/tokenizer_spm.gguf", &f) == 0, "%s", st_last_error());
    if (!f) return;
    CHECK(tokenizer_init(f, &tok) == 0, "%s", st_last_error());
    gguf_close(f); // the tokenizer keeps copies
    if (!tok) return;
    CHECK(tokenizer_n_vocab(tok) == 2000, "n_vocab %d", tokenizer_n_vocab(tok));
    CHECK(tokenizer_bos(tok) == 1 && tokenizer_eos(tok) == 2, "bos %d eos %d", tokenizer_bos(tok),
          tokenizer_eos(tok));
    CHECK(tokenizer_is_eog(tok, 2) && !tokenizer_is_eog(tok, 1), "eog");
    check_fixture(tok, "tokenizer_spm.txt");
    check_round_trips(tok, "spm", true, false);
    // The leading space comes off only at the start and after special tokens.
    int32_t hello = -1, bos = tokenizer_bos(tok);
    int32_t *ids;
    if (tokenizer_encode(tok, "hello", 5, false, false, &ids) == 1) hello = ids[0], free(ids);
    char buf[16];
    CHECK(hello >= 0, "'hello' is not one token");
    if (hello >= 0) {
        CHECK(tokenizer_piece(tok, -1, hello, false, buf, sizeof buf) == 5 && memcmp(buf, "hello", 5) == 0,
              "first");
        CHECK(tokenizer_piece(tok, bos, hello, false, buf, sizeof buf) == 5, "after BOS");
        CHECK(tokenizer_piece(tok, hello, hello, false, buf, sizeof buf) == 6 && buf[0] == ' ',
              "after a word");
    }
    CHECK(tokenizer_piece(tok, -1, bos, false, buf, sizeof buf) == 0, "BOS is invisible without special");
    CHECK(tokenizer_piece(tok, -1, bos, true, buf, sizeof buf) == 3 && memcmp(buf, "<s>", 3) == 0,
          "BOS text");
    tokenizer_free(tok);
}

static void test_smollm2(void) {
    if (!model) SKIP("no test model (run scripts/fetch-model.sh)");
    struct tokenizer *tok;
    CHECK(tokenizer_init(model, &tok) == 0, "%s", st_last_error());
    if (!tok) return;
    CHECK(tokenizer_n_vocab(tok) == 49152, "n_vocab %d", tokenizer_n_vocab(tok));
    CHECK(tokenizer_bos(tok) == 1 && tokenizer_eos(tok) == 2, "bos %d eos %d", tokenizer_bos(tok),
          tokenizer_eos(tok));
    // <|im_end|> (EOS) and <|endoftext|> end generation; <|im_start|> does not.
    CHECK(tokenizer_is_eog(tok, 2) && tokenizer_is_eog(tok, 0) && !tokenizer_is_eog(tok, 1), "eog");
    CHECK(!tokenizer_is_eog(tok, -1) && !tokenizer_is_eog(tok, 49152), "eog out of range");
    CHECK(tokenizer_find(tok, "<|im_start|>") == 1, "find <|im_start|>");
    CHECK(tokenizer_find(tok, "no such token at all") == -1, "find missing");
    CHECK(tokenizer_token_text(tok, 1) && strcmp(tokenizer_token_text(tok, 1), "<|im_start|>") == 0,
          "token text");
    CHECK(tokenizer_token_text(tok, 49152) == NULL && tokenizer_token_text(tok, -1) == NULL,
          "text out of range");
    char buf[4];
    int32_t hello = tokenizer_find(tok, "\xc4\xa0hello"); // "Ġhello"
    CHECK(hello >= 0 && tokenizer_piece(tok, -1, hello, false, buf, 2) == 6 && memcmp(buf, " h", 2) == 0,
          "piece truncated to cap, full length returned");
    CHECK(tokenizer_piece(tok, -1, 49152, false, buf, sizeof buf) == -1, "piece of an id out of range");
    char *s;
    size_t len;
    int32_t bad_ids[] = {hello, 70000};
    CHECK(tokenizer_decode(tok, bad_ids, 2, false, &s, &len) == -1, "decode of an id out of range");
    check_fixture(tok, "tokenizer_smollm.txt");
    check_round_trips(tok, "smollm", false, false);
    tokenizer_free(tok);
}

static void check_variant(const char *pre, int32_t user_defined, const char *fixture) {
    if (!model) SKIP("no test model (run scripts/fetch-model.sh)");
    struct mem_gguf m;
    struct tokenizer *tok = NULL;
    CHECK(variant_open(model, pre, user_defined, &m) == 0, "%s", st_last_error());
    if (m.f) CHECK(tokenizer_init(m.f, &tok) == 0, "%s", st_last_error());
    mem_close(&m);
    if (!tok) return;
    check_fixture(tok, fixture);
    check_round_trips(tok, pre, false, strcmp(pre, "qwen2") == 0);
    tokenizer_free(tok);
}

static void test_gpt2_pre(void) { check_variant("gpt-2", -1, "tokenizer_gpt2.txt"); }
static void test_llama3_pre(void) { check_variant("llama-bpe", -1, "tokenizer_llama_bpe.txt"); }
static void test_qwen2_pre(void) { check_variant("qwen2", 12, "tokenizer_qwen2.txt"); }

// --- errors --------------------------------------------------------------------------------

struct tiny {
    const char *model, *pre;
    bool no_tokens;
    const char *merge;
    int64_t bos, eos; // -1: key absent
    int add_bos;      // -1: key absent
};

// A four-token vocabulary ("a", "b", "ab", "<s>") described by o.
static int tiny_init(const struct tiny *o, struct tokenizer **tok) {
    static const char *const tokens[] = {"a", "b", "ab", "<s>"};
    static const int32_t types[] = {1, 1, 1, 3};
    static const float scores[] = {-1, -2, -0.5f, 0};
    const char *merges[] = {o->merge ? o->merge : "a b"};
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_add_str(w, "tokenizer.ggml.model", o->model);
    if (o->pre) gguf_writer_add_str(w, "tokenizer.ggml.pre", o->pre);
    if (!o->no_tokens) gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, 4);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, types, 4);
    gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, scores, 4);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    if (o->bos >= 0) gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)o->bos);
    if (o->eos >= 0) gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)o->eos);
    if (o->add_bos >= 0) gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", o->add_bos);
    struct mem_gguf m;
    int rc = mem_open(w, &m);
    gguf_writer_free(w);
    if (rc == 0) rc = tokenizer_init(m.f, tok);
    mem_close(&m);
    return rc;
}

static struct tiny tiny_ok(void) { return (struct tiny){"gpt2", "gpt-2", false, NULL, 3, -1, 1}; }

// Whether encoding "ab" with add_special puts BOS first.
static int tiny_adds_bos(struct tiny o) {
    struct tokenizer *tok;
    int32_t *ids;
    if (tiny_init(&o, &tok)) return -1;
    int n = tokenizer_encode(tok, "ab", 2, true, false, &ids);
    int r = n == 2 && ids[0] == 3 ? 1 : n == 1 && ids[0] == 2 ? 0 : -1;
    if (n >= 0) free(ids);
    tokenizer_free(tok);
    return r;
}

static void expect_error(struct tiny o, const char *what, const char *a, const char *b) {
    struct tokenizer *tok = NULL;
    int rc = tiny_init(&o, &tok);
    const char *msg = st_last_error();
    CHECK(rc == -1 && tok == NULL, "%s: accepted", what);
    CHECK(strstr(msg, a) && (!b || strstr(msg, b)), "%s: message \"%s\" lacks '%s'%s%s", what, msg, a,
          b ? " or " : "", b ? b : "");
    tokenizer_free(tok);
}

static void test_errors(void) {
    struct tokenizer *tok = NULL;
    struct tiny o = tiny_ok();
    CHECK(tiny_init(&o, &tok) == 0, "the tiny vocabulary: %s", st_last_error());
    if (tok) {
        int32_t *ids;
        int n = tokenizer_encode(tok, "ab<s>ba", 7, true, true, &ids);
        int32_t want[] = {3, 2, 3, 1, 0};
        CHECK(n == 5 && same_ids(ids, n, want, 5), "tiny encode gave %d ids", n);
        if (n >= 0) free(ids);
        tokenizer_free(tok);
    }
    // BOS by default: Llama 3's pre-tokenizer and SentencePiece, not GPT-2's.
    o = tiny_ok();
    o.add_bos = -1;
    CHECK(tiny_adds_bos(o) == 0, "gpt-2: no BOS by default");
    o.pre = "llama-bpe";
    CHECK(tiny_adds_bos(o) == 1, "llama-bpe: BOS by default");
    o.add_bos = 0;
    CHECK(tiny_adds_bos(o) == 0, "llama-bpe: add_bos_token = false wins");
    o = tiny_ok();
    o.model = "wordpiece";
    expect_error(o, "unknown model", "tokenizer.ggml.model", "wordpiece");
    o = tiny_ok();
    o.pre = "my-new-pre";
    expect_error(o, "unknown pre", "my-new-pre", "smollm");
    o = tiny_ok();
    o.no_tokens = true;
    expect_error(o, "missing tokens", "tokenizer.ggml.tokens", NULL);
    o = tiny_ok();
    o.merge = "a c";
    expect_error(o, "merge of an unknown token", "tokenizer.ggml.merges[0]", "'c'");
    o = tiny_ok();
    o.merge = "b a";
    expect_error(o, "merge into an unknown token", "tokenizer.ggml.merges[0]", "'ba'");
    o = tiny_ok();
    o.merge = "ab";
    expect_error(o, "merge without a space", "tokenizer.ggml.merges[0]", NULL);
    o = tiny_ok();
    o.bos = 4;
    expect_error(o, "bos out of range", "bos_token_id", "4");
    o = tiny_ok();
    o.eos = 1000;
    expect_error(o, "eos out of range", "eos_token_id", "1000");
    o = tiny_ok();
    o.bos = -1;
    expect_error(o, "add_bos without bos", "add_bos_token", NULL);
    o = tiny_ok();
    o.model = "llama";
    o.bos = 5;
    expect_error(o, "spm bos out of range", "bos_token_id", NULL);
}

// Encoding tens of KB takes milliseconds: no pass over the vocabulary per
// token, no quadratic merge.
static void test_speed(void) {
    if (!model) SKIP("no test model (run scripts/fetch-model.sh)");
    struct tokenizer *tok;
    CHECK(tokenizer_init(model, &tok) == 0, "%s", st_last_error());
    if (!tok) return;
    static const char para[] = "The quick brown fox, 12345 times: \"jumps\" over\tthe lazy dog!\n"
                               "Ünïcödé テキスト 你好世界 😀👍 <|im_start|>user\n    def f(x): return x**2\n";
    size_t n = 0, reps = 64 * 1024 / (sizeof para - 1);
    char *text = malloc(reps * (sizeof para - 1) + 1);
    for (size_t i = 0; i < reps; i++) memcpy(text + n, para, sizeof para - 1), n += sizeof para - 1;
    double t0 = st_time_s();
    int32_t *ids;
    int k = tokenizer_encode(tok, text, n, true, true, &ids);
    double dt = st_time_s() - t0;
    printf("    encoded %zu bytes into %d tokens in %.1f ms\n", n, k, dt * 1e3);
    CHECK(k > 0, "%s", st_last_error());
    CHECK(dt < 2.0, "encoding %zu bytes took %.2f s", n, dt);
    // Also one long word: a merge queue over 64 KB with no splits.
    memset(text, 'a', n);
    free(ids);
    t0 = st_time_s();
    k = tokenizer_encode(tok, text, n, false, false, &ids);
    dt = st_time_s() - t0;
    printf("    %zu 'a's into %d tokens in %.1f ms\n", n, k, dt * 1e3);
    CHECK(k > 0 && dt < 2.0, "one long word: %d tokens, %.2f s", k, dt);
    if (k >= 0) free(ids);
    free(text);
    tokenizer_free(tok);
}

int main(void) {
    const char *seed_env = getenv("STRATA_SEED");
    uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10)
                                          : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
    printf("seed %llu (set STRATA_SEED to repeat)\n", (unsigned long long)seed);
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    const char *path = test_model_path();
    if (path && gguf_open(path, &model) != 0) {
        printf("  (test model %s not usable: %s)\n", path, st_last_error());
        model = NULL;
    }
    RUN(test_spm_fixture);
    RUN(test_smollm2);
    RUN(test_gpt2_pre);
    RUN(test_llama3_pre);
    RUN(test_qwen2_pre);
    RUN(test_errors);
    RUN(test_speed);
    gguf_close(model);
    TEST_END();
}
