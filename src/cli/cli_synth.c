// cli_synth.c: `strata synth` — write a GGUF of any supported architecture with
// random weights.
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "model/synth.h"
#include "util.h"

static const char synth_help[] =
    "usage: strata synth -o FILE [options]\n"
    "\n"
    "Writes a model with random weights and a byte-level BPE vocabulary, with the\n"
    "keys and tensor names llama.cpp's converter writes for its architecture: for\n"
    "tests and for benchmarking model shapes you do not have.\n"
    "\n"
    "  -o, --output FILE      where to write the GGUF (required)\n"
    "      --arch NAME        llama (default), qwen2, qwen2moe, qwen3, qwen3moe, gemma2,\n"
    "                         gemma3 or phi3; sets that architecture's small defaults\n"
    "                         (experts, sliding window, soft-caps) for the options below\n"
    "      --shape NAME       start from a known shape: tiny (default), smollm2-135m,\n"
    "                         llama3.2-1b, llama2-7b, llama3-8b; the options below\n"
    "                         override it\n"
    "      --vocab N          vocabulary size (>= 257)\n"
    "      --dim N            embedding width\n"
    "      --layers N         transformer blocks\n"
    "      --heads N          attention heads\n"
    "      --kv-heads N       key/value heads (divides --heads)\n"
    "      --ff N             feed-forward width\n"
    "      --ctx N            training context length written to the metadata\n"
    "      --type T           matrix type: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q6_K\n"
    "                         IQ4_NL IQ4_XS, or Q4_K_M: Q4_K with Q6_K for the output and\n"
    "                         for attn_v and ffn_down of some layers (llama.cpp's mix)\n"
    "      --embd-type T      token embedding type (default: the --type)\n"
    "      --untied           write a separate output.weight\n"
    "      --head-dim N       per-head width (default: dim / heads)\n"
    "      --rot N            rotated dimensions per head (default: all; fewer: partial)\n"
    "      --experts N        experts per layer (llama: Mixtral-style; qwen2moe, qwen3moe)\n"
    "      --experts-used N   experts each token goes through\n"
    "      --ff-exp N         expert feed-forward width (default: --ff)\n"
    "      --ff-shexp N       shared expert width (qwen2moe; default: --ff)\n"
    "      --swa N            sliding window (gemma2, gemma3)\n"
    "      --attn-softcap F   attention logit soft-cap (gemma2)\n"
    "      --final-softcap F  final logit soft-cap (gemma2, gemma3)\n"
    "      --rope-base F      RoPE base (default: 10000)\n"
    "      --rope-base-swa F  RoPE base of sliding-window layers (gemma3)\n"
    "      --rope-scaling S   linear, yarn or longrope (phi3: factor tensors)\n"
    "      --rope-factor F    linear or YaRN scaling factor (default: 4)\n"
    "      --rope-orig-ctx N  the original context of YaRN and LongRoPE\n"
    "      --rope-attn-factor F  magnitude factor of cos and sin\n"
    "      --seed N           random seed (default: 1)\n"
    "  -h, --help             this help\n";

static int parse_type(const char *s, enum ggml_type *out) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct quant_traits *qt = quant_get((enum ggml_type)t);
        if (qt && !strcasecmp(qt->name, s)) {
            *out = (enum ggml_type)t;
            return 0;
        }
    }
    return st_fail("unknown tensor type '%s'", s);
}

int cli_synth(int argc, char **argv) {
    struct synth_params p = synth_default_params();
    const char *out = NULL;
    int embd_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long long n;
        int *field = NULL;
        long long lo = 1, hi = 1 << 20;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s", synth_help);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_value(argc, argv, &i))) goto usage_error;
            continue;
        } else if (!strcmp(a, "--untied")) {
            p.tied = 0;
            continue;
        }
        if (!(v = cli_value(argc, argv, &i))) {
            st_fail("unknown option '%s'", a);
            goto usage_error;
        }
        if (!strcmp(a, "--arch")) {
            if (synth_arch_defaults(v, &p)) goto usage_error;
        } else if (!strcmp(a, "--rope-scaling")) {
            p.rope_scaling = v;
        } else if (!strcmp(a, "--rope-base") || !strcmp(a, "--rope-base-swa") ||
                   !strcmp(a, "--rope-factor") || !strcmp(a, "--rope-attn-factor") ||
                   !strcmp(a, "--attn-softcap") || !strcmp(a, "--final-softcap")) {
            double f;
            if (cli_parse_float(a, v, 1e-6, 1e9, &f)) goto usage_error;
            float *dst = !strcmp(a, "--rope-base")          ? &p.rope_base
                         : !strcmp(a, "--rope-base-swa")    ? &p.rope_base_swa
                         : !strcmp(a, "--rope-factor")      ? &p.rope_factor
                         : !strcmp(a, "--rope-attn-factor") ? &p.rope_attn_factor
                         : !strcmp(a, "--attn-softcap")     ? &p.attn_softcap
                                                            : &p.final_softcap;
            *dst = (float)f;
        } else if (!strcmp(a, "--shape")) {
            struct synth_params d = synth_default_params();
            if (!strcmp(v, "tiny")) {
            } else if (!strcmp(v, "smollm2-135m")) {
                d.n_vocab = 49152, d.n_embd = 576, d.n_layer = 30, d.n_head = 9, d.n_head_kv = 3;
                d.n_ff = 1536, d.n_ctx_train = 8192, d.rope_base = 100000, d.type = GGML_TYPE_Q4_1;
            } else if (!strcmp(v, "llama3.2-1b")) {
                d.n_vocab = 128256, d.n_embd = 2048, d.n_layer = 16, d.n_head = 32, d.n_head_kv = 8;
                d.n_ff = 8192, d.n_ctx_train = 8192, d.rope_base = 500000, d.type = GGML_TYPE_Q4_0;
            } else if (!strcmp(v, "llama2-7b")) {
                d.n_vocab = 32000, d.n_embd = 4096, d.n_layer = 32, d.n_head = 32, d.n_head_kv = 32;
                d.n_ff = 11008, d.n_ctx_train = 4096, d.type = GGML_TYPE_Q4_0, d.tied = 0;
            } else if (!strcmp(v, "llama3-8b")) {
                d.n_vocab = 128256, d.n_embd = 4096, d.n_layer = 32, d.n_head = 32, d.n_head_kv = 8;
                d.n_ff = 14336, d.n_ctx_train = 8192, d.rope_base = 500000, d.type = GGML_TYPE_Q4_0;
                d.tied = 0;
            } else {
                st_fail("--shape: unknown shape '%s' (tiny, smollm2-135m, llama3.2-1b, llama2-7b, "
                        "llama3-8b)",
                        v);
                goto usage_error;
            }
            d.seed = p.seed;
            d.arch = p.arch;
            if (!embd_set) d.embd_type = d.type;
            p = d;
        } else if (!strcmp(a, "--type")) {
            p.more_bits_type = GGML_TYPE_COUNT;
            if (!strcasecmp(v, "Q4_K_M")) {
                p.type = GGML_TYPE_Q4_K;
                p.more_bits_type = GGML_TYPE_Q6_K;
            } else if (parse_type(v, &p.type)) {
                goto usage_error;
            }
            if (!embd_set) p.embd_type = p.type;
        } else if (!strcmp(a, "--embd-type")) {
            if (parse_type(v, &p.embd_type)) goto usage_error;
            embd_set = 1;
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(a, v, 0, (long long)1 << 62, &n)) goto usage_error;
            p.seed = (uint64_t)n;
        } else {
            if (!strcmp(a, "--vocab"))
                field = &p.n_vocab, lo = 257;
            else if (!strcmp(a, "--dim"))
                field = &p.n_embd;
            else if (!strcmp(a, "--layers"))
                field = &p.n_layer, hi = 1024;
            else if (!strcmp(a, "--heads"))
                field = &p.n_head, hi = 1024;
            else if (!strcmp(a, "--kv-heads"))
                field = &p.n_head_kv, hi = 1024;
            else if (!strcmp(a, "--ff"))
                field = &p.n_ff;
            else if (!strcmp(a, "--ctx"))
                field = &p.n_ctx_train, hi = 1 << 24;
            else if (!strcmp(a, "--head-dim"))
                field = &p.head_dim, hi = 4096;
            else if (!strcmp(a, "--rot"))
                field = &p.n_rot, hi = 4096;
            else if (!strcmp(a, "--experts"))
                field = &p.n_expert, lo = 0, hi = 1024;
            else if (!strcmp(a, "--experts-used"))
                field = &p.n_expert_used, hi = 1024;
            else if (!strcmp(a, "--ff-exp"))
                field = &p.n_ff_exp;
            else if (!strcmp(a, "--ff-shexp"))
                field = &p.n_ff_shexp;
            else if (!strcmp(a, "--swa"))
                field = &p.n_swa, lo = 0, hi = 1 << 24;
            else if (!strcmp(a, "--rope-orig-ctx"))
                field = &p.rope_orig_ctx, hi = 1 << 24;
            if (!field) {
                st_fail("unknown option '%s'", a);
                goto usage_error;
            }
            if (cli_parse_int(a, v, lo, hi, &n)) goto usage_error;
            *field = (int)n;
        }
    }
    if (!out) {
        st_fail("no output file: use -o FILE");
        goto usage_error;
    }
    if (synth_write(&p, out)) {
        fprintf(stderr, "strata %s\n", st_last_error());
        return 1;
    }
    fprintf(stderr, "wrote %s\n", out);
    return 0;
usage_error:
    fprintf(stderr, "strata synth: %s\nTry 'strata synth --help'.\n", st_last_error());
    return 2;
}
