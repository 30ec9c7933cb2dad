// perplexity.h: perplexity and KL divergence by llama-perplexity's method, so
// that figures and files are comparable with llama.cpp's.
//
// The method: the whole text is tokenized once (BOS as the vocabulary says)
// and cut into chunks of n_ctx tokens (a text needs at least 2·n_ctx tokens,
// as llama-perplexity asks); each chunk is evaluated from an empty cache, its
// first token replaced by BOS when the vocabulary adds one, and only its second
// half is scored: logits at positions first = n_ctx/2 .. n_ctx-2 predict the
// tokens after them (n_ctx - 1 - first per chunk). PPL = exp(mean NLL), with
// uncertainty PPL·sqrt((E[NLL²] - E[NLL]²)/(count - 1)).
//
// The KL-divergence ("base") file, byte for byte what llama-perplexity's
// --kl-divergence-base writes (little-endian, native sizes):
//
//   char[8]  "_logits_"
//   i32      n_ctx
//   i32      n_vocab
//   i32      n_chunk
//   i32      tokens[n_chunk · n_ctx]       the text's tokens (not BOS-replaced)
//   then per chunk, n_ctx - 1 - n_ctx/2 rows (one per scored position) of
//   u16      row[ppl_kld_row_len(n_vocab)]
//
// A row holds the position's log-probabilities compressed to 16 bits: two
// floats (scale, min_log_prob) in its first four u16, then per token
// q = round((logit - min_logit) / scale), with min_logit = max(lowest logit,
// highest - 16) and scale = (highest - min_logit) / 65535 (q = 0 below
// min_logit); log p = scale·q + min_log_prob. n_vocab is padded to even (the
// pad is 0).
#ifndef STRATA_PERPLEXITY_H
#define STRATA_PERPLEXITY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/forward.h"

#define PPL_MIN_CTX 4 // the smallest chunk with a scored position
#define PPL_KLD_MAGIC "_logits_"

// u16 per compressed row of a KLD file: 4 (two floats) + n_vocab rounded up to even.
int64_t ppl_kld_row_len(int n_vocab);
// Scored positions per chunk of n_ctx tokens: n_ctx - 1 - n_ctx/2.
int ppl_scored_per_chunk(int n_ctx);

// --- one position ---------------------------------------------------------------

// -ln p(tok) under logits (n_vocab), as llama-perplexity scores a position
// when it writes no KLD file (max-subtracted expf, summed in double).
double ppl_nll(const float *logits, int n_vocab, int32_t tok);
// -ln p(tok) as llama-perplexity scores a position while writing a KLD file
// (the same sum, finished in float), and the position's compressed row in
// row (ppl_kld_row_len(n_vocab) u16, pad included).
double ppl_nll_row(const float *logits, int n_vocab, int32_t tok, uint16_t *row);

// Running sums of the KL-divergence statistics (llama-perplexity's names).
struct ppl_kld_sums {
    double sum_nll, sum_nll2;           // -ln p(tok) of the model under test (Q)
    double sum_nll_base, sum_nll_base2; // -ln p(tok) of the base, from its rows
    double sum_nll_nll_base;
    double sum_kld, sum_kld2;
    double sum_p_diff, sum_p_diff2, sum_p_diff4; // p_Q(tok) - p_base(tok)
    float max_p_diff;
    int64_t n_same_top; // positions whose most likely token is the same
    int64_t count;
};

// Compares one position of Q (logits, n_vocab) with the base's compressed row
// for it, adds to s, and returns KL(base ‖ Q) over the tokens whose base
// log-probability is above -16; *p_diff = p_Q(tok) - p_base(tok).
double ppl_kld_position(const float *logits, int n_vocab, const uint16_t *base_row, int32_t tok,
                        struct ppl_kld_sums *s, float *p_diff);

// --- KLD files ----------------------------------------------------------------------

struct ppl_kld_file {
    FILE *f; // owned
    int n_ctx, n_vocab, n_chunk;
    int32_t *tokens; // [n_chunk · n_ctx], owned (NULL for a file being written)
    bool writing;
};

// Creates path and writes the header and tokens[n_chunk · n_ctx]. Returns 0
// (close with ppl_kld_file_close) or -1 with a message naming the file.
int ppl_kld_file_create(const char *path, int n_ctx, int n_vocab, int n_chunk, const int32_t *tokens,
                        struct ppl_kld_file *kf);
// Appends n_rows rows (n_rows · ppl_kld_row_len u16). Returns 0 or -1 with a message.
int ppl_kld_file_write_rows(struct ppl_kld_file *kf, const uint16_t *rows, int n_rows);
// Opens a KLD file written by Strata or llama.cpp and checks it: the magic, a
// sane header (n_ctx ≥ PPL_MIN_CTX, n_chunk ≥ 1), tokens in 0..n_vocab-1, and
// a size of exactly the header, tokens and rows it announces. Returns 0 or -1
// with a message naming the file and what is wrong.
int ppl_kld_file_open(const char *path, struct ppl_kld_file *kf);
// Reads the next n_rows rows into rows. Returns 0 or -1 with a message.
int ppl_kld_file_read_rows(struct ppl_kld_file *kf, uint16_t *rows, int n_rows);
// Closes kf (flushing a written file). Returns 0, or -1 if the data did not
// reach the file (a write error); kf is zeroed either way.
int ppl_kld_file_close(struct ppl_kld_file *kf);

// --- whole runs ----------------------------------------------------------------------

// What a run prints, both optional (NULL: quiet): progress is stdout in the
// command ("[1]12.3456,[2]..." for perplexity, the per-chunk table for KL
// divergence), info stderr (the seconds per pass and ETA).
struct ppl_output {
    FILE *progress;
    FILE *info;
};

struct ppl_result {
    int n_chunk;      // chunks evaluated
    int64_t count;    // positions scored
    double nll, nll2; // sums of -ln p and its square
    double ppl;       // exp(nll / count)
    double ppl_err;   // its uncertainty; NAN when the variance is not positive
};

// Chunks of n_ctx tokens a text of n_tokens gives (at most max_chunks when
// > 0), by llama-perplexity's rule; 0 when n_tokens < 2·n_ctx.
int ppl_chunk_count(int n_tokens, int n_ctx, int max_chunks);

// Perplexity of tokens[0..n_tokens) (tokenized with BOS as the vocabulary
// says) on c in chunks of n_ctx (PPL_MIN_CTX ≤ n_ctx ≤ c->n_ctx), batches of
// c->n_batch, at most max_chunks chunks when > 0. When kld_out is not NULL
// (created with this n_ctx, n_vocab and chunk count), each chunk's rows are
// appended to it. Fills *r. Returns 0, or -1 with a message (too few tokens
// for one chunk names the count and the -c that would fit).
int ppl_run(struct context *c, const int32_t *tokens, int n_tokens, int n_ctx, int max_chunks,
            struct ppl_kld_file *kld_out, const struct ppl_output *out, struct ppl_result *r);

// KL-divergence results: the sums, and the per-position values (sorted
// ascending once the run ends), for percentiles.
struct ppl_kld_result {
    struct ppl_kld_sums s;
    int n_chunk;
    int64_t n_values;
    float *kld;    // [n_values], owned
    float *p_diff; // [n_values], owned
};

// Evaluates the base file's first n_chunk chunks (all when max_chunks ≤ 0) of
// its tokens on c (kf->n_ctx ≤ c->n_ctx, kf->n_vocab = the model's) and
// compares every scored position with the file's row for it. Fills *r (free
// with ppl_kld_result_free). Returns 0 or -1 with a message.
int ppl_kld_run(struct context *c, struct ppl_kld_file *kf, int max_chunks, const struct ppl_output *out,
                struct ppl_kld_result *r);
void ppl_kld_result_free(struct ppl_kld_result *r);
// Prints llama-perplexity's closing statistics to f (PPL(Q), PPL(base), their
// correlation, ratio, ln ratio and difference; KLD mean, percentiles; Δp
// statistics; RMS Δp; same top p), in its formats. Fewer than 100 positions
// print a line saying so instead, as llama-perplexity prints nothing.
void ppl_kld_print(FILE *f, const struct ppl_kld_result *r);

#endif
