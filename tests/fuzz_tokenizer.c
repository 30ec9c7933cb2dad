// fuzz_tokenizer.c: libFuzzer target for the tokenizers. Encodes arbitrary
// bytes with the SentencePiece test vocabulary and the byte-level BPE one (the
// test model, when STRATA_TEST_MODEL names it), with and without special-token
// parsing, and checks that decoding never fails on ids the encoder produced.
#include <stdint.h>
#include <stdlib.h>

#include "format/gguf.h"
#include "text/tokenizer.h"
#include "util.h"

static struct tokenizer *toks[2];
static int n_toks;

static void load(const char *path) {
    struct gguf_file *f;
    if (!path || gguf_open(path, &f)) return;
    if (tokenizer_init(f, &toks[n_toks]) == 0) n_toks++;
    gguf_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!n_toks) {
        load("tests/fixtures/tokenizer_spm.gguf");
        load(getenv("STRATA_TEST_MODEL"));
        ST_ASSERT(n_toks > 0);
    }
    for (int t = 0; t < n_toks; t++)
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            int n = tokenizer_encode(toks[t], (const char *)data, size, special, special, &ids);
            ST_ASSERT(n >= 0);
            char *out = NULL;
            size_t len;
            ST_ASSERT(tokenizer_decode(toks[t], ids, n, special, &out, &len) == 0);
            free(out);
            free(ids);
        }
    return 0;
}
