// cli_perplexity.c: `strata perplexity` — perplexity of a text and KL divergence
// against a base file, by llama-perplexity's method and in its formats
// (model/perplexity.h has the method and the file format).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "model/perplexity.h"
#include "model/session.h"
#include "text/tokenizer.h"
#include "util.h"

#define PPL_DEFAULT_CTX 512 // llama-perplexity's default

static const char perplexity_help[] =
    "usage: strata perplexity -m MODEL -f TEXT [-c N] [-b N] [--chunks N] [options]\n"
    "       strata perplexity -m MODEL -f TEXT --kl-divergence-base FILE      (writes FILE)\n"
    "       strata perplexity -m MODEL --kl-divergence --kl-divergence-base FILE [-f TEXT]\n"
    "\n"
    "Perplexity of a text as llama-perplexity computes it: the text is tokenized\n"
    "once, cut into chunks of -c tokens (it needs at least twice -c), each chunk\n"
    "evaluated from an empty context (first token BOS when the vocabulary adds\n"
    "one) and its second half scored. Prints [chunk]running PPL, then\n"
    "'Final estimate: PPL = x +/- y'.\n"
    "\n"
    "  -f, --file FILE              the text to score (UTF-8)\n"
    "  -c, --ctx-size N             tokens per chunk (default: 512; at most the model's context)\n"
    "  -b, --batch-size N           tokens per forward pass (default and most: -c)\n"
    "      --chunks N               score at most N chunks (default: all)\n"
    "      --kl-divergence-base F   without --kl-divergence: also write each scored position's\n"
    "                               log-probabilities to F (llama-perplexity's format)\n"
    "      --kl-divergence          compare the model with the base file F (written by\n"
    "                               Strata or llama-perplexity) on its tokens: KL divergence,\n"
    "                               same top token, Δp and both perplexities; with -f the\n"
    "                               text must give the file's tokens; -c is the file's\n"
    "  -h, --help                   this help\n"
    "\n"
    "Model options:\n"
    "  -m, --model FILE       GGUF model to load (required)\n"
    "  -t, --threads N        CPU threads (default: every core)\n"
    "      --backend NAME     auto, cpu, cpu-ref (scalar reference), cuda, hip or spirv (default: auto)\n"
    "      --cache-type T     the KV cache's element type, f16 or f32 (default: f16 on the CPU,\n"
    "                         f32 on a GPU); -ctk/-ctv, which must agree, say the same\n"
    "  -mg, --main-gpu N      the GPU to run on, from 0 (default: 0; strata info --devices lists them)\n"
    "  -sm, --split-mode M    none, layer or row: how a model is divided over several GPUs (default:\n"
    "                         none, the whole model on --main-gpu; this build runs a model on one GPU)\n"
    "  -ts, --tensor-split L  proportions of the model for each GPU, e.g. 3,1 (default: by free memory)\n";

// The whole file at path, NUL-terminated; *len its size. NULL with a message.
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        st_fail("cannot open the text %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f) || n < cap - 1) break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    const bool bad = !buf || ferror(f);
    const int err = errno;
    fclose(f);
    if (bad) {
        free(buf);
        st_fail("cannot read the text %s: %s", path, buf ? strerror(err) : "out of memory");
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

// Tokenizes the text at path as llama-perplexity does (BOS as the vocabulary
// says, special-token text kept as text). Returns the count and sets *ids, or -1.
static int text_tokens(const struct model *m, const char *path, int32_t **ids) {
    size_t len = 0;
    char *text = read_text(path, &len);
    if (!text) return -1;
    const int n = tokenizer_encode(m->tok, text, len, true, false, ids);
    free(text);
    if (n < 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", st_last_error());
        st_fail("cannot tokenize %s: %s", path, why);
    }
    return n;
}

static int run_kld(struct session *ss, struct ppl_kld_file *kf, const char *text_path, int max_chunks) {
    if (text_path) {
        int32_t *ids = NULL;
        const int n = text_tokens(ss->model, text_path, &ids);
        if (n < 0) return -1;
        const int64_t need = (int64_t)kf->n_ctx * kf->n_chunk;
        int64_t at = 0;
        while (at < need && at < n && ids[at] == kf->tokens[at]) at++;
        free(ids);
        if (at < need)
            return st_fail("%s does not give the base file's tokens: %s at token %lld (chunk "
                           "%lld); the file was computed on another text or with another "
                           "tokenizer",
                           text_path, at < n ? "they differ" : "the text ends", (long long)at,
                           (long long)(at / kf->n_ctx + 1));
    }
    const struct ppl_output out = {.progress = stdout, .info = stderr};
    struct ppl_kld_result r;
    if (ppl_kld_run(ss->ctx, kf, max_chunks, &out, &r)) return -1;
    ppl_kld_print(stdout, &r);
    ppl_kld_result_free(&r);
    return 0;
}

static int run_ppl(struct session *ss, const char *text_path, int n_ctx, int max_chunks,
                   const char *kld_path) {
    const struct model *m = ss->model;
    fprintf(stderr, "perplexity: tokenizing the input ..\n");
    int32_t *ids = NULL;
    const int n = text_tokens(m, text_path, &ids);
    if (n < 0) return -1;
    fprintf(stderr, "perplexity: %s gives %d tokens\n", text_path, n);
    int rc = 0;
    struct ppl_kld_file kf = {0};
    const int n_chunk = ppl_chunk_count(n, n_ctx, max_chunks);
    if (kld_path && n_chunk > 0) {
        if ((rc = ppl_kld_file_create(kld_path, n_ctx, m->hp.n_vocab, n_chunk, ids, &kf))) goto done;
        fprintf(stderr, "perplexity: saving all log-probabilities to %s\n", kld_path);
    }
    const struct ppl_output out = {.progress = stdout, .info = stderr};
    struct ppl_result r;
    rc = ppl_run(ss->ctx, ids, n, n_ctx, max_chunks, kf.f ? &kf : NULL, &out, &r);
    if (kf.f && ppl_kld_file_close(&kf) && !rc) rc = -1;
    if (rc) goto done;
    if (isnan(r.ppl_err))
        printf("Final estimate: PPL = %.4lf (no uncertainty: the variance of -log(prob) over %lld "
               "positions is not positive)\n",
               r.ppl, (long long)r.count);
    else
        printf("Final estimate: PPL = %.4lf +/- %.5lf\n", r.ppl, r.ppl_err);
done:
    if (kf.f) ppl_kld_file_close(&kf);
    free(ids);
    return rc;
}

int cli_perplexity(int argc, char **argv) {
    struct cli_model_opts o;
    cli_model_opts_default(&o);
    const char *text_path = NULL, *kld_path = NULL;
    bool kld = false, batch_given = false;
    long long max_chunks = 0;
    o.s.n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        const int session = cli_session_opt(&o.s, argc, argv, &i);
        if (session < 0) goto usage_error;
        if (session) {
            batch_given |= !strcmp(a, "-b") || !strcmp(a, "--batch-size");
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s", perplexity_help);
            return 0;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(text_path = cli_value(argc, argv, &i))) goto usage_error;
        } else if (!strcmp(a, "--chunks")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 1 << 24, &max_chunks))
                goto usage_error;
        } else if (!strcmp(a, "--kl-divergence-base")) {
            if (!(kld_path = cli_value(argc, argv, &i))) goto usage_error;
        } else if (!strcmp(a, "--kl-divergence")) {
            kld = true;
        } else {
            st_fail("unknown option '%s'", a);
            goto usage_error;
        }
    }
    if (!o.s.model) {
        st_fail("no model given: use -m FILE");
        goto usage_error;
    }
    if (kld && !kld_path) {
        st_fail("--kl-divergence needs the base file: --kl-divergence-base FILE");
        goto usage_error;
    }
    if (!kld && !text_path) {
        st_fail("no text given: use -f FILE");
        goto usage_error;
    }
    if (o.s.n_ctx && o.s.n_ctx < PPL_MIN_CTX) {
        st_fail("-c %d is too small: a chunk needs at least %d tokens", o.s.n_ctx, PPL_MIN_CTX);
        goto usage_error;
    }

    struct ppl_kld_file base = {0};
    if (kld) {
        if (ppl_kld_file_open(kld_path, &base)) {
            fprintf(stderr, "strata perplexity: %s\n", st_last_error());
            return 1;
        }
        if (o.s.n_ctx && o.s.n_ctx != base.n_ctx) {
            fprintf(stderr,
                    "strata perplexity: %s was computed with -c %d, not -c %d: use -c %d or "
                    "leave -c out\n",
                    kld_path, base.n_ctx, o.s.n_ctx, base.n_ctx);
            ppl_kld_file_close(&base);
            return 2;
        }
        o.s.n_ctx = base.n_ctx;
    }
    if (!o.s.n_ctx) o.s.n_ctx = PPL_DEFAULT_CTX;
    const int n_ctx = o.s.n_ctx;
    if (!batch_given || o.s.n_batch > n_ctx) o.s.n_batch = n_ctx;

    struct session ss;
    int rc = session_open(&o.s, &ss);
    if (!rc && n_ctx > ss.model->hp.n_ctx_train)
        rc = st_fail("-c %d is larger than the model's context of %d tokens; use -c %d or less", n_ctx,
                     ss.model->hp.n_ctx_train, ss.model->hp.n_ctx_train);
    if (!rc) {
        char threads[16] = "all cores";
        if (o.s.n_threads > 0) snprintf(threads, sizeof threads, "%d", o.s.n_threads);
        fprintf(stderr, "perplexity: model %s | backend %s | threads %s | n_ctx %d | n_batch %d\n", o.s.model,
                ss.be->name, threads, n_ctx, ss.ctx->n_batch);
        rc = kld ? run_kld(&ss, &base, text_path, (int)max_chunks)
                 : run_ppl(&ss, text_path, n_ctx, (int)max_chunks, kld_path);
    }
    if (rc) fprintf(stderr, "strata perplexity: %s\n", st_last_error());
    if (kld) ppl_kld_file_close(&base);
    session_close(&ss);
    return rc ? 1 : 0;
usage_error:
    fprintf(stderr, "strata perplexity: %s\nTry 'strata perplexity --help'.\n", st_last_error());
    return 2;
}
