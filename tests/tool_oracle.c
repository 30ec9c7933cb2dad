// tool_oracle.c: Strata's token ids and logits for tests that compare them with
// another implementation (tests/test_oracle.py holds them to llama.cpp's).
//
//   tool_oracle tokenize MODEL
//       stdin: one input per line, as hex bytes ("-" for the empty input);
//       stdout: per input one line of three tab-separated id lists (space-
//       separated ids): plain (no BOS/EOS, special-token text kept as text),
//       parse_special, and add_special + parse_special.
//   tool_oracle logits MODEL BACKEND OUT [-b N] [-t N]
//       stdin: token ids (whitespace-separated); runs them from position 0 in
//       batches of N (default: all at once) on BACKEND (cpu, cpu-ref, ...) and
//       writes every position's logits to OUT as raw float32 (n_tokens, n_vocab).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "util.h"

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void print_ids(const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
}

static int cmd_tokenize(const struct model *m) {
    static char line[1 << 20];
    static char bytes[1 << 19];
    int n_line = 0;
    while (fgets(line, sizeof line, stdin)) {
        n_line++;
        size_t len = strcspn(line, "\r\n"), n = 0;
        line[len] = 0;
        if (strcmp(line, "-") != 0) {
            if (len % 2) {
                fprintf(stderr, "tool_oracle: line %d: odd number of hex digits\n", n_line);
                return 1;
            }
            for (size_t i = 0; i < len; i += 2) {
                const int hi = hexval(line[i]), lo = hexval(line[i + 1]);
                if (hi < 0 || lo < 0) {
                    fprintf(stderr, "tool_oracle: line %d: not hex\n", n_line);
                    return 1;
                }
                bytes[n++] = (char)(hi * 16 + lo);
            }
        }
        const bool modes[3][2] = {{false, false}, {false, true}, {true, true}};
        for (int k = 0; k < 3; k++) {
            int32_t *ids = NULL;
            const int n_ids = tokenizer_encode(m->tok, bytes, n, modes[k][0], modes[k][1], &ids);
            if (n_ids < 0) {
                fprintf(stderr, "tool_oracle: line %d: %s\n", n_line, st_last_error());
                return 1;
            }
            if (k) printf("\t");
            print_ids(ids, n_ids);
            free(ids);
        }
        printf("\n");
    }
    return 0;
}

static int cmd_logits(struct model *m, const char *be_name, const char *out_path, int n_batch, int n_threads,
                      enum ggml_type kv_type) {
    int cap = 1024, n = 0;
    int32_t *toks = st_xmalloc(sizeof(int32_t) * (size_t)cap);
    long v;
    while (scanf("%ld", &v) == 1) {
        if (v < 0 || v >= m->hp.n_vocab) {
            fprintf(stderr, "tool_oracle: token %ld is outside the vocabulary\n", v);
            return 1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *grown = realloc(toks, sizeof(int32_t) * (size_t)cap);
            if (!grown) return 1;
            toks = grown;
        }
        toks[n++] = (int32_t)v;
    }
    if (n < 1) {
        fprintf(stderr, "tool_oracle: no token ids on stdin\n");
        return 1;
    }
    if (n_batch <= 0 || n_batch > n) n_batch = n;
    const struct backend_opts bo = {.n_threads = n_threads};
    struct backend *be = backend_open(be_name, &bo);
    struct context *c = NULL;
    if (!be || backend_set_kv_type(be, kv_type) || context_init(m, be, n, n_batch, 1, &c)) {
        fprintf(stderr, "tool_oracle: %s: %s\n", be_name, st_last_error());
        return 1;
    }
    const size_t nv = (size_t)m->hp.n_vocab;
    float *lg = malloc(sizeof(float) * nv * (size_t)n);
    if (!lg) return 1;
    for (int p = 0; p < n; p += n_batch) {
        const int k = n - p < n_batch ? n - p : n_batch;
        if (context_forward(c, toks + p, k, p, lg + (size_t)p * nv, true)) {
            fprintf(stderr, "tool_oracle: forward: %s\n", st_last_error());
            return 1;
        }
    }
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(lg, sizeof(float), nv * (size_t)n, f) != nv * (size_t)n || fclose(f)) {
        fprintf(stderr, "tool_oracle: cannot write %s: %s\n", out_path, strerror(errno));
        return 1;
    }
    fprintf(stderr, "tool_oracle: %d positions x %zu logits on %s to %s\n", n, nv, be->name, out_path);
    free(lg);
    free(toks);
    context_free(c);
    be->free(be);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[1], "tokenize") && strcmp(argv[1], "logits")) ||
        (!strcmp(argv[1], "logits") && argc < 5)) {
        fprintf(stderr,
                "usage: %s tokenize MODEL < hex-lines\n"
                "       %s logits MODEL BACKEND OUT [-b N] [-t N] [--cache-type f32|f16] < ids\n"
                "(the K/V cache type defaults to f32, as the references compared with keep it)\n",
                argv[0], argv[0]);
        return 2;
    }
    int n_batch = 0, n_threads = 0;
    enum ggml_type kv_type = GGML_TYPE_F32;
    for (int i = 5; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b"))
            n_batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t"))
            n_threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cache-type")) {
            if (backend_parse_kv_type(argv[i + 1], &kv_type)) {
                fprintf(stderr, "tool_oracle: %s\n", st_last_error());
                return 2;
            }
        } else {
            fprintf(stderr, "tool_oracle: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    struct model *m = NULL;
    if (model_load(argv[2], &m)) {
        fprintf(stderr, "tool_oracle: %s\n", st_last_error());
        return 1;
    }
    const int rc = !strcmp(argv[1], "tokenize")
                       ? cmd_tokenize(m)
                       : cmd_logits(m, argv[3], argv[4], n_batch, n_threads, kv_type);
    model_free(m);
    return rc;
}
