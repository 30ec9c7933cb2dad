// test_model_load.c: the model loader on synthetic models (src/synth.c): good
// ones of several shapes and types load and run the same on both CPU backends;
// crafted bad ones are refused with a message naming what is wrong.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/synth.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/strata_test_model_load_XXXXXX";

struct filter {
    const char *drop; // key or tensor left out
};

static int drop_one(void *user, const char *name) { return strcmp(name, ((struct filter *)user)->drop) != 0; }

// Writes p (minus f->drop, plus whatever add() adds) to a file; returns its path.
static const char *write_model(const struct synth_params *p, const char *drop,
                               void (*add)(struct gguf_writer *), const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    struct filter f = {drop ? drop : ""};
    struct gguf_writer *w;
    if (synth_build(p, drop_one, &f, &w)) {
        printf("    synth_build: %s\n", st_last_error());
        return NULL;
    }
    if (add) add(w);
    int rc = gguf_writer_write_file(w, path);
    gguf_writer_free(w);
    return rc ? NULL : path;
}

// Loading must fail with a message containing want.
static void expect_refused(const char *path, const char *want) {
    struct model *m = NULL;
    int rc = path ? model_load(path, &m) : 0;
    CHECK(path && rc == -1 && m == NULL, "%s loaded but should have been refused", path);
    CHECK(strstr(st_last_error(), want) != NULL, "message '%s' does not mention '%s'", st_last_error(), want);
    model_free(m);
}

static void add_wrong_vocab_size(struct gguf_writer *w) { gguf_writer_add_u32(w, "llama.vocab_size", 1000); }
static void add_arch_qwen(struct gguf_writer *w) { gguf_writer_add_str(w, "general.architecture", "mamba"); }
static void add_bad_heads(struct gguf_writer *w) {
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", 3);
}
static void add_wrong_shape(struct gguf_writer *w) {
    float z[64 * 100] = {0};
    int64_t ne[2] = {64, 100};
    gguf_writer_add_tensor(w, "blk.1.attn_q.weight", GGML_TYPE_F32, 2, ne, z);
}
static void add_unsupported_type(struct gguf_writer *w) {
    static uint8_t z[66 * 2 * 64];
    int64_t ne[2] = {256, 64}; // IQ2_XXS: 66 bytes per 256 values
    gguf_writer_add_tensor(w, "blk.0.attn_q.weight", GGML_TYPE_IQ2_XXS, 2, ne, z);
}
static void add_f16_norm(struct gguf_writer *w) {
    uint16_t z[64] = {0};
    int64_t ne[1] = {64};
    gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", GGML_TYPE_F16, 1, ne, z);
}
static void add_short_embedding(struct gguf_writer *w) {
    static float z[64 * 500];
    int64_t ne[2] = {64, 500};
    gguf_writer_add_tensor(w, "token_embd.weight", GGML_TYPE_F32, 2, ne, z);
}
static void add_scaling_dynamic(struct gguf_writer *w) {
    gguf_writer_add_str(w, "llama.rope.scaling.type", "dynamic");
}

static void test_bad_models(void) {
    struct synth_params p = synth_default_params();
    expect_refused(write_model(&p, "blk.1.ffn_up.weight", NULL, "no_tensor"),
                   "required tensor 'blk.1.ffn_up.weight' is missing");
    expect_refused(write_model(&p, "llama.embedding_length", NULL, "no_key"),
                   "'llama.embedding_length' is missing");
    expect_refused(write_model(&p, "llama.attention.layer_norm_rms_epsilon", NULL, "no_eps"),
                   "layer_norm_rms_epsilon");
    expect_refused(write_model(&p, "general.architecture", NULL, "no_arch"), "general.architecture");
    expect_refused(write_model(&p, "general.architecture", add_arch_qwen, "arch"),
                   "architecture 'mamba' is not supported");
    expect_refused(write_model(&p, "llama.vocab_size", add_wrong_vocab_size, "vocab_meta"),
                   "vocab_size is 1000 but the vocabulary has 512 tokens");
    expect_refused(write_model(&p, "blk.1.attn_q.weight", add_wrong_shape, "shape"),
                   "'blk.1.attn_q.weight' has shape [64, 100], expected [64, 64]");
    expect_refused(write_model(&p, "blk.0.attn_q.weight", add_unsupported_type, "type"), "IQ2_XXS");
    expect_refused(write_model(&p, "blk.0.attn_norm.weight", add_f16_norm, "norm"), "must be F32");
    expect_refused(write_model(&p, "llama.attention.head_count_kv", add_bad_heads, "heads"),
                   "not a multiple of head_count_kv 3");
    expect_refused(write_model(&p, NULL, add_scaling_dynamic, "dynamic"), "rope scaling 'dynamic'");
    expect_refused(write_model(&p, "tokenizer.ggml.tokens", NULL, "no_vocab"), "tokenizer");
    // embedding rows that disagree with the vocabulary
    expect_refused(write_model(&p, "token_embd.weight", add_short_embedding, "embd_rows"),
                   "the vocabulary has 512 tokens but token_embd.weight has 500 rows");
}

// A synthetic model of shape p runs on the fast backend within tol of the reference.
static void check_backends_agree(const struct synth_params *p, const char *name, double tol) {
    const char *path = write_model(p, NULL, NULL, name);
    struct model *m = NULL;
    CHECK(path && model_load(path, &m) == 0, "%s: %s", name, st_last_error());
    if (!m) return;
    const int V = m->hp.n_vocab, n = 23;
    int32_t toks[23];
    for (int i = 0; i < n; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    struct backend *ref = backend_cpu_ref_init(), *fast = backend_cpu_init(2);
    struct context *cr, *cf;
    CHECK(context_init(m, ref, 64, 8, 1, &cr) == 0, "%s", st_last_error());
    CHECK(context_init(m, fast, 64, 8, 1, &cf) == 0, "%s", st_last_error());
    float *lr = malloc(sizeof(float) * (size_t)V), *lf = malloc(sizeof(float) * (size_t)V);
    CHECK(context_eval(cr, toks, n, lr, NULL) == 0, "%s", st_last_error());
    CHECK(context_eval(cf, toks, n, lf, NULL) == 0, "%s", st_last_error());
    double num = 0, den = 0, md = 0;
    for (int i = 0; i < V; i++) {
        double d = (double)lf[i] - lr[i];
        num += d * d;
        den += (double)lr[i] * lr[i];
        md = fmax(md, fabs(d));
    }
    printf("    %s: fast vs reference max |dlogit| %.3g, nmse %.3g\n", name, md, num / den);
    CHECK(num / den <= tol, "%s: nmse %.3g above %.3g", name, num / den, tol);
    free(lr);
    free(lf);
    context_free(cr);
    context_free(cf);
    ref->free(ref);
    fast->free(fast);
    model_free(m);
}

// Float weights keep the fast path's only error in float rounding (bound 1e-8);
// quantized weights add the rounding of 8-bit activations, about 0.4% per value
// (nmse ~1e-5 per matmul), compounded over the layers: bound 1e-3. A wrong
// block, scale or index gives nmse near 1.
static void test_shapes_and_types(void) {
    struct synth_params p = synth_default_params();
    p.type = p.embd_type = GGML_TYPE_F32;
    check_backends_agree(&p, "f32", 1e-8);
    p.type = GGML_TYPE_F16;
    p.tied = 0;
    check_backends_agree(&p, "f16_untied", 1e-8);
    static const enum ggml_type quant[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
                                           GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_IQ4_NL};
    for (size_t i = 0; i < sizeof quant / sizeof *quant; i++) {
        struct synth_params q = synth_default_params();
        q.type = quant[i];
        check_backends_agree(&q, quant_name(quant[i]), 1e-3);
    }
    struct synth_params k = synth_default_params(); // K-quant-sized rows, MHA, odd vocabulary
    k.n_embd = 256, k.n_ff = 512, k.n_head = 8, k.n_head_kv = 8, k.n_vocab = 777;
    k.type = GGML_TYPE_IQ4_XS;
    check_backends_agree(&k, "iq4_xs_mha", 1e-3);
    // the repacked K-quant kernels: Q4_K, Q6_K, and llama.cpp's Q4_K_M mix of both
    // (synth's own quantizers), tied and untied
    k.type = k.embd_type = GGML_TYPE_Q4_K;
    check_backends_agree(&k, "q4_k_mha", 1e-3);
    k.type = k.embd_type = GGML_TYPE_Q6_K;
    check_backends_agree(&k, "q6_k_mha", 1e-3);
    k.type = k.embd_type = GGML_TYPE_Q4_K;
    k.more_bits_type = GGML_TYPE_Q6_K;
    k.n_layer = 9, k.n_head_kv = 2;
    check_backends_agree(&k, "q4_k_m_gqa", 1e-3);
    k.tied = 0;
    check_backends_agree(&k, "q4_k_m_untied", 1e-3);
}

int main(void) {
    if (!mkdtemp(dir)) {
        printf("cannot make a temporary directory\nRESULT 0 1\n");
        return 1;
    }
    RUN(test_bad_models);
    RUN(test_shapes_and_types);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("    could not remove %s\n", dir);
    TEST_END();
}
