// perplexity.c: see perplexity.h. The arithmetic of one position follows
// llama-perplexity's in type and order (float where it computes in float, a
// double sum where it sums in double), so that a KLD file written here has the
// bytes llama.cpp would write for the same logits, and its figures read alike.
#include "model/perplexity.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "text/tokenizer.h"
#include "util.h"

// The file stores native i32, f32 and u16; Strata's hosts are little-endian,
// as is every machine llama.cpp writes these files on in practice.
_Static_assert(sizeof(float) == 4, "a KLD row stores two 32-bit floats in four u16");

int64_t ppl_kld_row_len(int n_vocab) { return 2 * (((int64_t)n_vocab + 1) / 2) + 4; }

int ppl_scored_per_chunk(int n_ctx) { return n_ctx - 1 - n_ctx / 2; }

// Σ expf(x - max) over the row, in double, and the row's largest value.
static double sum_exp_below(const float *logits, int n_vocab, float max_logit) {
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += expf(logits[i] - max_logit);
    return sum;
}

double ppl_nll(const float *logits, int n_vocab, int32_t tok) {
    float max_logit = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > max_logit) max_logit = logits[i];
    const double sum_exp = sum_exp_below(logits, n_vocab, max_logit);
    const float shifted = logits[tok] - max_logit;
    return -((double)shifted - log(sum_exp));
}

double ppl_nll_row(const float *logits, int n_vocab, int32_t tok, uint16_t *row) {
    float max_logit = logits[0], min_logit = logits[0];
    for (int i = 1; i < n_vocab; i++) {
        if (logits[i] > max_logit) max_logit = logits[i];
        if (logits[i] < min_logit) min_logit = logits[i];
    }
    // tokens more than 16 nats below the best are stored as 0 (p < 1e-7)
    if (max_logit - 16 > min_logit) min_logit = max_logit - 16;
    const float log_sum_exp = (float)log(sum_exp_below(logits, n_vocab, max_logit));
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    const float head[2] = {scale, min_log_prob};
    memcpy(row, head, sizeof head);
    uint16_t *q = row + 4;
    if (scale != 0.f) {
        const float inv_scale = 1 / scale;
        for (int i = 0; i < n_vocab; i++) {
            // rintf: round to nearest, ties to even, as llama.cpp's nearest_int
            // does; the value is at most 65535 plus a rounding error
            q[i] = logits[i] > min_logit ? (uint16_t)(int)rintf(inv_scale * (logits[i] - min_logit)) : 0;
        }
    } else {
        memset(q, 0, sizeof(uint16_t) * (size_t)n_vocab);
    }
    if (n_vocab % 2) q[n_vocab] = 0;
    return max_logit + log_sum_exp - logits[tok];
}

double ppl_kld_position(const float *logits, int n_vocab, const uint16_t *base_row, int32_t tok,
                        struct ppl_kld_sums *s, float *p_diff_out) {
    float max_logit = logits[0];
    int imax = 0;
    for (int i = 1; i < n_vocab; i++) {
        if (logits[i] > max_logit) {
            max_logit = logits[i];
            imax = i;
        }
    }
    const float log_sum_exp = (float)log(sum_exp_below(logits, n_vocab, max_logit));
    float head[2];
    memcpy(head, base_row, sizeof head);
    const float scale = head[0], min_log_prob = head[1];
    const uint16_t *q = base_row + 4;

    const float nll = max_logit + log_sum_exp - logits[tok];
    s->sum_nll += nll;
    s->sum_nll2 += nll * nll;
    const float nll_base = -(scale * q[tok] + min_log_prob);
    s->sum_nll_base += nll_base;
    s->sum_nll_base2 += nll_base * nll_base;
    s->sum_nll_nll_base += nll * nll_base;

    // KL(base ‖ Q) = Σ p_base (log p_base - log p_Q), log p_Q = logit - (max + log Σ)
    const float log_norm = max_logit + log_sum_exp;
    double kld = 0;
    int imax_base = -1;
    float p_log_base_max = 0;
    for (int i = 0; i < n_vocab; i++) {
        const float p_log_base = scale * q[i] + min_log_prob;
        if (i == 0 || p_log_base > p_log_base_max) {
            p_log_base_max = p_log_base;
            imax_base = i;
        }
        if (p_log_base > -16.f) {
            const float p_base = expf(p_log_base);
            kld += p_base * (p_log_base - logits[i] + log_norm);
        }
    }
    s->sum_kld += kld;
    s->sum_kld2 += kld * kld;
    s->count++;
    if (imax == imax_base) s->n_same_top++;

    const float p_base = expf(-nll_base);
    const float p = expf(-nll);
    const float p_diff = p - p_base;
    s->sum_p_diff += p_diff;
    const double p_diff2 = p_diff * p_diff;
    s->sum_p_diff2 += p_diff2;
    s->sum_p_diff4 += p_diff2 * p_diff2;
    if (fabsf(p_diff) > s->max_p_diff) s->max_p_diff = fabsf(p_diff);
    *p_diff_out = p_diff;
    return kld;
}

// --- KLD files ----------------------------------------------------------------------

// a * b into *out; false on overflow of int64.
static bool mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

int ppl_kld_file_create(const char *path, int n_ctx, int n_vocab, int n_chunk, const int32_t *tokens,
                        struct ppl_kld_file *kf) {
    memset(kf, 0, sizeof *kf);
    ST_ASSERT(n_ctx >= PPL_MIN_CTX && n_vocab > 0 && n_chunk > 0);
    FILE *f = fopen(path, "wb");
    if (!f) return st_fail("cannot create %s: %s", path, strerror(errno));
    const int32_t head[3] = {n_ctx, n_vocab, n_chunk};
    const size_t n_tok = (size_t)n_ctx * (size_t)n_chunk;
    if (fwrite(PPL_KLD_MAGIC, 1, 8, f) != 8 || fwrite(head, sizeof head, 1, f) != 1 ||
        fwrite(tokens, sizeof(int32_t), n_tok, f) != n_tok) {
        fclose(f);
        return st_fail("cannot write %s: %s", path, strerror(errno));
    }
    kf->f = f;
    kf->n_ctx = n_ctx;
    kf->n_vocab = n_vocab;
    kf->n_chunk = n_chunk;
    kf->writing = true;
    return 0;
}

int ppl_kld_file_write_rows(struct ppl_kld_file *kf, const uint16_t *rows, int n_rows) {
    ST_ASSERT(kf->f && kf->writing);
    const size_t n = (size_t)n_rows * (size_t)ppl_kld_row_len(kf->n_vocab);
    if (fwrite(rows, sizeof(uint16_t), n, kf->f) != n)
        return st_fail("cannot write the KL-divergence file: %s", strerror(errno));
    return 0;
}

int ppl_kld_file_open(const char *path, struct ppl_kld_file *kf) {
    memset(kf, 0, sizeof *kf);
    FILE *f = fopen(path, "rb");
    if (!f) return st_fail("cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    char magic[8];
    int32_t head[3];
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return st_fail("%s is not a regular file", path);
    }
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, PPL_KLD_MAGIC, 8) ||
        fread(head, sizeof head, 1, f) != 1) {
        fclose(f);
        return st_fail("%s does not look like a file of log-probabilities (it should start with "
                       "\"_logits_\", as --kl-divergence-base writes it)",
                       path);
    }
    const int n_ctx = head[0], n_vocab = head[1], n_chunk = head[2];
    if (n_ctx < PPL_MIN_CTX || n_ctx > (1 << 24) || n_vocab < 1 || n_vocab > (1 << 24) || n_chunk < 1 ||
        n_chunk > (1 << 24)) {
        fclose(f);
        return st_fail("%s: header n_ctx %d, n_vocab %d, n_chunk %d is not a sane KL-divergence "
                       "file (n_ctx %d..%d, n_vocab and n_chunk 1..%d)",
                       path, n_ctx, n_vocab, n_chunk, PPL_MIN_CTX, 1 << 24, 1 << 24);
    }
    const int64_t n_tok = (int64_t)n_ctx * n_chunk;
    int64_t rows, row_bytes, want = 0;
    bool ok = mul_ok((int64_t)n_chunk, ppl_scored_per_chunk(n_ctx), &rows) &&
              mul_ok(rows, 2 * ppl_kld_row_len(n_vocab), &row_bytes) &&
              !__builtin_add_overflow(20 + 4 * n_tok, row_bytes, &want);
    if (!ok || (int64_t)sb.st_size != want) {
        fclose(f);
        if (!ok)
            return st_fail("%s: header n_ctx %d, n_vocab %d, n_chunk %d announces more data than "
                           "a file can hold",
                           path, n_ctx, n_vocab, n_chunk);
        return st_fail("%s has %lld bytes, but its header (n_ctx %d, n_vocab %d, n_chunk %d) "
                       "announces %lld: the file is truncated or not a KL-divergence file",
                       path, (long long)sb.st_size, n_ctx, n_vocab, n_chunk, (long long)want);
    }
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n_tok);
    if (!tokens) {
        fclose(f);
        return st_fail("%s: out of memory for %lld tokens", path, (long long)n_tok);
    }
    if (fread(tokens, sizeof(int32_t), (size_t)n_tok, f) != (size_t)n_tok) {
        free(tokens);
        fclose(f);
        return st_fail("cannot read the tokens of %s", path);
    }
    for (int64_t i = 0; i < n_tok; i++) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            const int bad = tokens[i];
            free(tokens);
            fclose(f);
            return st_fail("%s: token %lld is %d, outside its vocabulary of %d", path, (long long)i, bad,
                           n_vocab);
        }
    }
    kf->f = f;
    kf->n_ctx = n_ctx;
    kf->n_vocab = n_vocab;
    kf->n_chunk = n_chunk;
    kf->tokens = tokens;
    return 0;
}

int ppl_kld_file_read_rows(struct ppl_kld_file *kf, uint16_t *rows, int n_rows) {
    ST_ASSERT(kf->f && !kf->writing);
    const size_t n = (size_t)n_rows * (size_t)ppl_kld_row_len(kf->n_vocab);
    if (fread(rows, sizeof(uint16_t), n, kf->f) != n)
        return st_fail("cannot read the log-probabilities of the KL-divergence file: %s",
                       ferror(kf->f) ? strerror(errno) : "it ends early");
    return 0;
}

int ppl_kld_file_close(struct ppl_kld_file *kf) {
    int rc = 0;
    if (kf->f) {
        const bool bad = ferror(kf->f) != 0;
        if (fclose(kf->f) || bad)
            rc = st_fail("the KL-divergence file was not written completely: %s", strerror(errno));
    }
    free(kf->tokens);
    memset(kf, 0, sizeof *kf);
    return rc;
}

// --- whole runs ----------------------------------------------------------------------

int ppl_chunk_count(int n_tokens, int n_ctx, int max_chunks) {
    if (n_ctx < 1 || (int64_t)n_tokens < 2 * (int64_t)n_ctx) return 0;
    const int n = n_tokens / n_ctx;
    return max_chunks > 0 && max_chunks < n ? max_chunks : n;
}

// Called for each scored position pos (first ≤ pos ≤ n_ctx-2 of the chunk)
// with its logits (n_vocab). Returns 0 or -1 with a message.
typedef int (*ppl_row_fn)(void *user, int pos, const float *logits);

// Evaluates one chunk from an empty cache in batches of c->n_batch and hands
// each scored position's logits to fn. chunk (n_ctx tokens, a scratch copy)
// gets BOS as its first token when the vocabulary adds one. buf holds
// (n_batch, n_vocab).
static int eval_chunk(struct context *c, int32_t *chunk, int n_ctx, float *buf, ppl_row_fn fn, void *user) {
    const struct tokenizer *tok = c->model->tok;
    const int nv = c->model->hp.n_vocab, first = n_ctx / 2;
    const int nb = c->n_batch < n_ctx ? c->n_batch : n_ctx;
    if (tokenizer_adds_bos(tok)) chunk[0] = tokenizer_bos(tok);
    for (int b0 = 0; b0 < n_ctx; b0 += nb) {
        const int n = nb < n_ctx - b0 ? nb : n_ctx - b0;
        // only batches that reach the scored half need their logits
        const bool want = b0 + n - 1 >= first;
        if (context_forward(c, chunk + b0, n, b0, buf, want)) return -1;
        if (!want) continue;
        for (int p = b0 > first ? b0 : first; p < b0 + n && p < n_ctx - 1; p++)
            if (fn(user, p, buf + (size_t)(p - b0) * nv)) return -1;
    }
    return 0;
}

static void print_eta(FILE *info, const char *what, double secs, int n_chunk) {
    if (!info) return;
    fprintf(info, "%s: %.2f seconds per pass - ETA ", what, secs);
    int total = (int)(secs * n_chunk);
    if (total >= 3600) {
        fprintf(info, "%d hours ", total / 3600);
        total %= 3600;
    }
    fprintf(info, "%.2f minutes\n", total / 60.0);
}

struct ppl_state {
    const int32_t *chunk; // the chunk's own tokens (not BOS-replaced)
    int n_vocab, first, chunk_index;
    uint16_t *rows; // (n_scored, row_len) when a KLD file is written
    int64_t row_len;
    double nll, nll2;
    int64_t count;
};

static int ppl_score(void *user, int pos, const float *logits) {
    struct ppl_state *st = user;
    const int32_t tok = st->chunk[pos + 1];
    const double v =
        st->rows ? ppl_nll_row(logits, st->n_vocab, tok, st->rows + (size_t)(pos - st->first) * st->row_len)
                 : ppl_nll(logits, st->n_vocab, tok);
    if (!isfinite(v))
        return st_fail("chunk %d, position %d: the model's logits give a non-finite "
                       "log-probability (%g); the backend produced NaN or infinite values",
                       st->chunk_index + 1, pos, v);
    st->nll += v;
    st->nll2 += v * v;
    st->count++;
    return 0;
}

int ppl_run(struct context *c, const int32_t *tokens, int n_tokens, int n_ctx, int max_chunks,
            struct ppl_kld_file *kld_out, const struct ppl_output *out, struct ppl_result *r) {
    memset(r, 0, sizeof *r);
    const struct model *m = c->model;
    const int nv = m->hp.n_vocab;
    if (n_ctx < PPL_MIN_CTX || n_ctx > c->n_ctx)
        return st_fail("chunk size %d: it must be %d..%d (the context made for it)", n_ctx, PPL_MIN_CTX,
                       c->n_ctx);
    if (tokenizer_adds_eos(m->tok))
        return st_fail("the vocabulary adds EOS to every text (tokenizer.ggml.add_eos_token); "
                       "perplexity by llama-perplexity's method needs a vocabulary that does not");
    const int n_chunk = ppl_chunk_count(n_tokens, n_ctx, max_chunks);
    if (n_chunk < 1) {
        if (n_tokens / 2 >= PPL_MIN_CTX)
            return st_fail("the text has %d tokens, too few for one chunk of -c %d: chunks need "
                           "at least 2 x %d = %d tokens (as llama-perplexity asks); use -c %d or "
                           "less, or a longer text",
                           n_tokens, n_ctx, n_ctx, 2 * n_ctx, n_tokens / 2);
        return st_fail("the text has %d tokens, too few for perplexity: the smallest chunk "
                       "(-c %d) needs %d",
                       n_tokens, PPL_MIN_CTX, 2 * PPL_MIN_CTX);
    }
    if (kld_out) ST_ASSERT(kld_out->n_ctx == n_ctx && kld_out->n_vocab == nv && kld_out->n_chunk == n_chunk);
    const int nb = c->n_batch < n_ctx ? c->n_batch : n_ctx;
    const int n_scored = ppl_scored_per_chunk(n_ctx);
    struct ppl_state st = {.n_vocab = nv, .first = n_ctx / 2, .row_len = ppl_kld_row_len(nv)};
    int32_t *chunk = malloc(sizeof(int32_t) * (size_t)n_ctx);
    float *buf = backend_host_alloc(c->be, sizeof(float) * (size_t)nb * (size_t)nv); // pinned on a GPU
    if (kld_out) st.rows = malloc(sizeof(uint16_t) * (size_t)n_scored * (size_t)st.row_len);
    int rc = 0;
    if (!chunk || !buf || (kld_out && !st.rows)) {
        rc =
            st_fail("out of memory for the logits of a batch of %d (%.1f MB)", nb, (double)nb * nv * 4 / 1e6);
        goto done;
    }
    if (out && out->info)
        fprintf(out->info,
                "perplexity: calculating perplexity over %d chunks, n_ctx=%d, batch_size=%d, "
                "n_seq=1\n",
                n_chunk, n_ctx, nb);
    for (int i = 0; i < n_chunk && !rc; i++) {
        const double t0 = st_time_s();
        memcpy(chunk, tokens + (size_t)i * n_ctx, sizeof(int32_t) * (size_t)n_ctx);
        st.chunk = tokens + (size_t)i * n_ctx;
        st.chunk_index = i;
        if ((rc = eval_chunk(c, chunk, n_ctx, buf, ppl_score, &st))) break;
        if (kld_out && (rc = ppl_kld_file_write_rows(kld_out, st.rows, n_scored))) break;
        if (i == 0 && out) print_eta(out->info, "perplexity", st_time_s() - t0, n_chunk);
        if (out && out->progress) {
            fprintf(out->progress, "[%d]%.4lf,", i + 1, exp(st.nll / (double)st.count));
            fflush(out->progress);
        }
        r->n_chunk = i + 1;
    }
    if (out && out->progress) fprintf(out->progress, "\n");
    if (rc) goto done;
    r->count = st.count;
    r->nll = st.nll;
    r->nll2 = st.nll2;
    const double mean = st.nll / (double)st.count;
    const double var = st.nll2 / (double)st.count - mean * mean;
    r->ppl = exp(mean);
    r->ppl_err = var > 0 && st.count > 1 ? sqrt(var / (double)(st.count - 1)) * r->ppl : NAN;
done:
    free(chunk);
    backend_host_free(c->be, buf);
    free(st.rows);
    return rc;
}

// The mean of count values given their sum and sum of squares, and the
// uncertainty of that mean (0 for ten values or fewer), as llama-perplexity has it.
static void mean_and_err(double sum, double sum2, int64_t count, double *mean, double *err) {
    *mean = *err = 0;
    if (count < 1) return;
    *mean = sum / (double)count;
    const double var = sum2 / (double)count - *mean * *mean;
    *err = var > 0 && count > 10 ? sqrt(var / (double)(count - 1)) : 0.;
}

// Covariance of two means (0 below ten values), as llama-perplexity has it.
static double mean_covariance(double suma, double sumb, double sumab, int64_t count) {
    if (count < 10) return 0.0;
    const double n = (double)count;
    return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

struct kld_state {
    const int32_t *chunk;
    int n_vocab, first;
    const uint16_t *rows; // the base's rows of this chunk
    int64_t row_len;
    struct ppl_kld_result *r;
};

static int kld_score(void *user, int pos, const float *logits) {
    struct kld_state *st = user;
    struct ppl_kld_result *r = st->r;
    float p_diff;
    const double kld =
        ppl_kld_position(logits, st->n_vocab, st->rows + (size_t)(pos - st->first) * st->row_len,
                         st->chunk[pos + 1], &r->s, &p_diff);
    r->kld[r->n_values] = (float)kld;
    r->p_diff[r->n_values] = p_diff;
    r->n_values++;
    return 0;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void kld_chunk_line(FILE *f, int chunk, const struct ppl_kld_sums *s) {
    double lp, lp_err, lb, lb_err, kl, kl_err, mse, mse_err;
    mean_and_err(s->sum_nll, s->sum_nll2, s->count, &lp, &lp_err);
    mean_and_err(s->sum_nll_base, s->sum_nll_base2, s->count, &lb, &lb_err);
    const double cov = mean_covariance(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base, s->count);
    mean_and_err(s->sum_kld, s->sum_kld2, s->count, &kl, &kl_err);
    mean_and_err(s->sum_p_diff2, s->sum_p_diff4, s->count, &mse, &mse_err);
    const double rms = sqrt(mse), rms_err = 0.5 / rms * mse_err;
    const double top = (double)s->n_same_top / (double)s->count;
    const double top_err = sqrt(top * (1 - top) / (double)(s->count - 1));
    fprintf(f, "%4d", chunk);
    fprintf(f, "    %9.4lf ± %9.4lf", exp(lp), exp(lp) * lp_err);
    fprintf(f, "    %10.5lf ± %10.5lf", lp - lb, sqrt(lp_err * lp_err + lb_err * lb_err - 2.0 * cov));
    fprintf(f, "    %10.5lf ± %10.5lf", kl, kl_err);
    fprintf(f, "    %6.3lf ± %6.3lf %%", 100.0 * rms, 100.0 * rms_err);
    fprintf(f, "    %6.3lf ± %6.3lf %%", 100.0 * top, 100.0 * top_err);
    fprintf(f, "\n");
}

int ppl_kld_run(struct context *c, struct ppl_kld_file *kf, int max_chunks, const struct ppl_output *out,
                struct ppl_kld_result *r) {
    memset(r, 0, sizeof *r);
    const int nv = c->model->hp.n_vocab, n_ctx = kf->n_ctx;
    if (kf->n_vocab != nv)
        return st_fail("the KL-divergence file is for a vocabulary of %d tokens, the model has "
                       "%d: it was written with another model's vocabulary",
                       kf->n_vocab, nv);
    if (n_ctx > c->n_ctx)
        return st_fail("the KL-divergence file was computed with -c %d, but the context holds %d", n_ctx,
                       c->n_ctx);
    if (tokenizer_adds_eos(c->model->tok))
        return st_fail("the vocabulary adds EOS to every text (tokenizer.ggml.add_eos_token); "
                       "perplexity by llama-perplexity's method needs a vocabulary that does not");
    const int n_chunk = max_chunks > 0 && max_chunks < kf->n_chunk ? max_chunks : kf->n_chunk;
    const int n_scored = ppl_scored_per_chunk(n_ctx);
    const int nb = c->n_batch < n_ctx ? c->n_batch : n_ctx;
    struct kld_state st = {.n_vocab = nv, .first = n_ctx / 2, .row_len = ppl_kld_row_len(nv), .r = r};
    const size_t n_values = (size_t)n_chunk * (size_t)n_scored;
    uint16_t *rows = malloc(sizeof(uint16_t) * (size_t)n_scored * (size_t)st.row_len);
    int32_t *chunk = malloc(sizeof(int32_t) * (size_t)n_ctx);
    float *buf = backend_host_alloc(c->be, sizeof(float) * (size_t)nb * (size_t)nv); // pinned on a GPU
    r->kld = malloc(sizeof(float) * n_values);
    r->p_diff = malloc(sizeof(float) * n_values);
    int rc = 0;
    if (!rows || !chunk || !buf || !r->kld || !r->p_diff) {
        rc = st_fail("out of memory for a chunk's logits and log-probabilities");
        goto done;
    }
    st.rows = rows;
    if (out && out->info)
        fprintf(out->info, "kl_divergence: computing over %d chunks, n_ctx=%d, batch_size=%d, n_seq=1\n",
                n_chunk, n_ctx, nb);
    for (int i = 0; i < n_chunk && !rc; i++) {
        const double t0 = st_time_s();
        if ((rc = ppl_kld_file_read_rows(kf, rows, n_scored))) break;
        memcpy(chunk, kf->tokens + (size_t)i * n_ctx, sizeof(int32_t) * (size_t)n_ctx);
        st.chunk = kf->tokens + (size_t)i * n_ctx;
        if ((rc = eval_chunk(c, chunk, n_ctx, buf, kld_score, &st))) break;
        if (i == 0 && out) {
            print_eta(out->info, "kl_divergence", st_time_s() - t0, n_chunk);
            if (out->progress)
                fprintf(out->progress, "\nchunk             PPL               ln(PPL(Q)/PPL(base))  "
                                       "        KL Divergence              Δp RMS            Same "
                                       "top p\n");
        }
        if (out && out->progress) {
            kld_chunk_line(out->progress, i + 1, &r->s);
            fflush(out->progress);
        }
        r->n_chunk = i + 1;
    }
    if (out && out->progress) fprintf(out->progress, "\n");
    if (!rc) {
        qsort(r->kld, (size_t)r->n_values, sizeof(float), cmp_float);
        qsort(r->p_diff, (size_t)r->n_values, sizeof(float), cmp_float);
    }
done:
    free(rows);
    free(chunk);
    backend_host_free(c->be, buf);
    if (rc) ppl_kld_result_free(r);
    return rc;
}

void ppl_kld_result_free(struct ppl_kld_result *r) {
    free(r->kld);
    free(r->p_diff);
    memset(r, 0, sizeof *r);
}

// Linear interpolation between sorted values (n ≥ 1) in float, as llama-perplexity does.
static float percentile(const float *v, int64_t n, float fraction) {
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    float p = fraction * (float)(n - 1);
    const int64_t ip = (int64_t)p;
    p -= (float)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static float median(const float *v, int64_t n) {
    return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

void ppl_kld_print(FILE *f, const struct ppl_kld_result *r) {
    const struct ppl_kld_sums *s = &r->s;
    if (s->count < 100) {
        fprintf(f, "(%lld positions: too few for statistics, which need 100)\n", (long long)s->count);
        return;
    }
    const float *kv = r->kld, *pv = r->p_diff;
    const int64_t n = r->n_values;
    double lp, lp_err, lb, lb_err;
    fprintf(f, "====== Perplexity statistics ======\n");
    mean_and_err(s->sum_nll, s->sum_nll2, s->count, &lp, &lp_err);
    const double ppl = exp(lp), ppl_err = ppl * lp_err;
    fprintf(f, "Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", ppl, ppl_err);
    mean_and_err(s->sum_nll_base, s->sum_nll_base2, s->count, &lb, &lb_err);
    const double ppl_base = exp(lb), ppl_base_err = ppl_base * lb_err;
    fprintf(f, "Mean PPL(base)                : %10.6lf ± %10.6lf\n", ppl_base, ppl_base_err);
    const double cov = mean_covariance(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base, s->count);
    fprintf(f, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", 100.0 * cov / (lp_err * lb_err));
    const double lr = lp - lb, lr_err = sqrt(lp_err * lp_err + lb_err * lb_err - 2.0 * cov);
    fprintf(f, "Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", lr, lr_err);
    fprintf(f, "Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", exp(lr), exp(lr) * lr_err);
    const double ppl_cov = ppl * ppl_base * cov;
    fprintf(f, "Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", ppl - ppl_base,
            sqrt(ppl_err * ppl_err + ppl_base_err * ppl_base_err - 2.0 * ppl_cov));
    fprintf(f, "\n");

    double kl, kl_err;
    fprintf(f, "====== KL divergence statistics ======\n");
    mean_and_err(s->sum_kld, s->sum_kld2, s->count, &kl, &kl_err);
    fprintf(f, "Mean    KLD: %10.6lf ± %10.6lf\n", kl, kl_err);
    fprintf(f, "Maximum KLD: %10.6f\n", kv[n - 1]);
    fprintf(f, "99.9%%   KLD: %10.6f\n", percentile(kv, n, 0.999f));
    fprintf(f, "99.0%%   KLD: %10.6f\n", percentile(kv, n, 0.990f));
    fprintf(f, "95.0%%   KLD: %10.6f\n", percentile(kv, n, 0.950f));
    fprintf(f, "90.0%%   KLD: %10.6f\n", percentile(kv, n, 0.900f));
    fprintf(f, "Median  KLD: %10.6f\n", median(kv, n));
    fprintf(f, "10.0%%   KLD: %10.6f\n", percentile(kv, n, 0.100f));
    fprintf(f, " 5.0%%   KLD: %10.6f\n", percentile(kv, n, 0.050f));
    fprintf(f, " 1.0%%   KLD: %10.6f\n", percentile(kv, n, 0.010f));
    fprintf(f, " 0.1%%   KLD: %10.6f\n", percentile(kv, n, 0.001f));
    fprintf(f, "Minimum KLD: %10.6f\n", kv[0]);
    fprintf(f, "\n");

    double pd, pd_err, mse, mse_err;
    fprintf(f, "====== Token probability statistics ======\n");
    mean_and_err(s->sum_p_diff, s->sum_p_diff2, s->count, &pd, &pd_err);
    fprintf(f, "Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * pd, 100.0 * pd_err);
    fprintf(f, "Maximum Δp: %6.3lf%%\n", 100.0 * pv[n - 1]);
    fprintf(f, "99.9%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.999f));
    fprintf(f, "99.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.990f));
    fprintf(f, "95.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.950f));
    fprintf(f, "90.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.900f));
    fprintf(f, "75.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.750f));
    fprintf(f, "Median  Δp: %6.3lf%%\n", 100.0 * median(pv, n));
    fprintf(f, "25.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.250f));
    fprintf(f, "10.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.100f));
    fprintf(f, " 5.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.050f));
    fprintf(f, " 1.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.010f));
    fprintf(f, " 0.1%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, n, 0.001f));
    fprintf(f, "Minimum Δp: %6.3lf%%\n", 100.0 * pv[0]);
    mean_and_err(s->sum_p_diff2, s->sum_p_diff4, s->count, &mse, &mse_err);
    const double rms = sqrt(mse);
    fprintf(f, "RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * rms, 100.0 * 0.5 / rms * mse_err);
    const double top = (double)s->n_same_top / (double)s->count;
    fprintf(f, "Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * top,
            100.0 * sqrt(top * (1.0 - top) / (double)(s->count - 1)));
}
