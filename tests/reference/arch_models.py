"""Synthetic random-weight GGUF models of every architecture Strata supports,
written with the `gguf` Python package the way llama.cpp's converter writes
them: its GGUFWriter key setters and its tensor-name table (gguf.TENSOR_NAMES),
so names and keys come from llama.cpp's own package, not from Strata.

    write(cfg, path)   writes one model; CONFIGS lists the test cases.

Weights are random, scaled like a trained model's (unit-variance activations);
norms are near 1. Vocabulary: the 256 byte tokens of byte-level BPE, an
end-of-text token, then two-byte tokens with their merges, padded with unused
tokens.
"""
import numpy as np
import gguf

T = gguf.MODEL_TENSOR

# name: dict of the architecture and its options
CONFIGS = {
    "llama": dict(arch="llama"),
    "llama-untied-ropefreqs": dict(arch="llama", tied=False, rope_freqs=True),
    "mixtral": dict(arch="llama", experts=4, experts_used=2),
    "qwen2": dict(arch="qwen2", qkv_bias=True, output_bias=True),
    "qwen2-yarn": dict(arch="qwen2", qkv_bias=True, rope_scaling="yarn", rope_factor=4.0, orig_ctx=16),
    "qwen2moe": dict(arch="qwen2moe", qkv_bias=True, experts=8, experts_used=2, ff_exp=32, ff_shexp=64,
                     tied=False),
    "qwen3": dict(arch="qwen3", qk_norm=True, head_dim=32),
    "qwen3moe": dict(arch="qwen3moe", qk_norm=True, experts=8, experts_used=2, ff_exp=32),
    "gemma2": dict(arch="gemma2", post_norms=True, gelu=True, swa=4, attn_softcap=3.0, final_softcap=10.0,
                   layers=4),
    "gemma3": dict(arch="gemma3", post_norms=True, gelu=True, qk_norm=True, swa=4, rope_base=1e6,
                   rope_base_swa=1e4, rope_scaling="linear", rope_factor=8.0, layers=7),
    "phi3": dict(arch="phi3", fused_qkv=True, fused_gate_up=True),
    "phi3-longrope-long": dict(arch="phi3", fused_qkv=True, fused_gate_up=True, rot=12, head_dim=16,
                               longrope=True, orig_ctx=32, attn_factor=1.19),
    "phi3-longrope-short": dict(arch="phi3", fused_qkv=True, fused_gate_up=True, longrope=True,
                                orig_ctx=4096, attn_factor=1.19),
}

GELU_ARCHS = {"gemma2", "gemma3"}


def _vocab(n_vocab):
    def byte_char(b):
        printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        if b in printable:
            return chr(b)
        return chr(256 + [x for x in range(256) if x not in printable].index(b))

    chars = [byte_char(b) for b in range(256)]
    tokens, types, merges = list(chars), [1] * 256, []
    tokens.append("<|endoftext|>")
    types.append(3)
    order = "etaoinshrdlucmfwypvbgkjqxz "
    for a in order:
        for c in order:
            if len(tokens) >= n_vocab:
                break
            tokens.append(chars[ord(a)] + chars[ord(c)])
            types.append(1)
            merges.append(chars[ord(a)] + " " + chars[ord(c)])
    while len(tokens) < n_vocab:
        tokens.append("<unused%d>" % len(tokens))
        types.append(5)
    return tokens, types, merges


def write(cfg, path, qtype=gguf.GGMLQuantizationType.F32, seed=7):
    """Writes the model described by cfg (an entry of CONFIGS) to path, its
    matrices in qtype (F32 or a type gguf.quants can quantize)."""
    rng = np.random.default_rng(seed)
    arch = cfg["arch"]
    E, H, HKV, F, L, V = 64, 4, 2, 128, cfg.get("layers", 2), 400
    hd = cfg.get("head_dim", E // H)
    rot = cfg.get("rot", hd)
    q_dim, kv_dim = H * hd, HKV * hd
    ne, k = cfg.get("experts", 0), cfg.get("experts_used", 0)
    ff_exp = cfg.get("ff_exp", F)
    ff_sh = cfg.get("ff_shexp", 0)

    w = gguf.GGUFWriter(path, arch)
    w.add_name("strata oracle test")
    w.add_context_length(4096)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    if "head_dim" in cfg:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(cfg.get("rope_base", 10000.0))
    w.add_rope_dimension_count(rot)
    if ne:
        w.add_expert_count(ne)
        w.add_expert_used_count(k)
        w.add_expert_feed_forward_length(ff_exp)
        if ff_sh:
            w.add_expert_shared_feed_forward_length(ff_sh)
    if "swa" in cfg:
        w.add_sliding_window(cfg["swa"])
    if "attn_softcap" in cfg:
        w.add_attn_logit_softcapping(cfg["attn_softcap"])
    if "final_softcap" in cfg:
        w.add_final_logit_softcapping(cfg["final_softcap"])
    if "rope_base_swa" in cfg:
        w.add_rope_freq_base_swa(cfg["rope_base_swa"])
    if "rope_scaling" in cfg:
        w.add_rope_scaling_type(gguf.RopeScalingType(cfg["rope_scaling"]))
        w.add_rope_scaling_factor(cfg["rope_factor"])
    if "orig_ctx" in cfg:
        w.add_rope_scaling_orig_ctx_len(cfg["orig_ctx"])
    if "attn_factor" in cfg:
        w.add_rope_scaling_attn_factors(cfg["attn_factor"])

    tokens, types, merges = _vocab(V)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(256)
    w.add_eos_token_id(256)
    w.add_add_bos_token(False)

    def name(t, bid=None, suffix="weight"):
        n = gguf.TENSOR_NAMES[t]
        return (n.format(bid=bid) if bid is not None else n) + "." + suffix

    def mat(nm, rows, cols, scale, n_exp=0):
        shape = (n_exp, rows, cols) if n_exp else (rows, cols)
        data = (rng.uniform(-1, 1, size=shape) * scale).astype(np.float32)
        if qtype != gguf.GGMLQuantizationType.F32:
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(nm, q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            w.add_tensor(nm, data)

    def vec(nm, n, scale, offset=0.0):
        w.add_tensor(nm, (offset + rng.uniform(-1, 1, size=(n,)) * scale).astype(np.float32))

    ws, fs = 1 / np.sqrt(E), 1 / np.sqrt(F)
    mat(name(T.TOKEN_EMBD), V, E, 1.0)
    vec(name(T.OUTPUT_NORM), E, 0.2, 1.0)
    if not cfg.get("tied", True):
        mat(name(T.OUTPUT), V, E, ws)
    if cfg.get("output_bias"):
        vec(name(T.OUTPUT, suffix="bias"), V, 0.5)
    if cfg.get("rope_freqs"):
        vec(name(T.ROPE_FREQS), rot // 2, 1.0, 2.0)
    if cfg.get("longrope"):
        vec(name(T.ROPE_FACTORS_LONG), rot // 2, 1.5, 3.0)
        vec(name(T.ROPE_FACTORS_SHORT), rot // 2, 0.25, 1.25)
    for l in range(L):
        vec(name(T.ATTN_NORM, l), E, 0.2, 1.0)
        if cfg.get("fused_qkv"):
            mat(name(T.ATTN_QKV, l), q_dim + 2 * kv_dim, E, ws)
        else:
            mat(name(T.ATTN_Q, l), q_dim, E, ws)
            mat(name(T.ATTN_K, l), kv_dim, E, ws)
            mat(name(T.ATTN_V, l), kv_dim, E, ws)
        if cfg.get("qkv_bias"):
            vec(name(T.ATTN_Q, l, "bias"), q_dim, 0.5)
            vec(name(T.ATTN_K, l, "bias"), kv_dim, 0.5)
            vec(name(T.ATTN_V, l, "bias"), kv_dim, 0.5)
        if cfg.get("qk_norm"):
            vec(name(T.ATTN_Q_NORM, l), hd, 0.2, 1.0)
            vec(name(T.ATTN_K_NORM, l), hd, 0.2, 1.0)
        mat(name(T.ATTN_OUT, l), E, q_dim, 1 / np.sqrt(q_dim))
        if cfg.get("post_norms"):
            vec(name(T.ATTN_POST_NORM, l), E, 0.2, 1.0)
        vec(name(T.FFN_NORM, l), E, 0.2, 1.0)
        if ne:
            mat(name(T.FFN_GATE_INP, l), ne, E, 4 * ws)
            mat(name(T.FFN_GATE_EXP, l), ff_exp, E, ws, ne)
            mat(name(T.FFN_UP_EXP, l), ff_exp, E, ws, ne)
            mat(name(T.FFN_DOWN_EXP, l), E, ff_exp, 1 / np.sqrt(ff_exp), ne)
            if ff_sh:
                vec(name(T.FFN_GATE_INP_SHEXP, l), E, 4 * ws)
                mat(name(T.FFN_GATE_SHEXP, l), ff_sh, E, ws)
                mat(name(T.FFN_UP_SHEXP, l), ff_sh, E, ws)
                mat(name(T.FFN_DOWN_SHEXP, l), E, ff_sh, 1 / np.sqrt(ff_sh))
        elif cfg.get("fused_gate_up"):
            mat(name(T.FFN_UP, l), 2 * F, E, ws)
            mat(name(T.FFN_DOWN, l), E, F, fs)
        else:
            mat(name(T.FFN_GATE, l), F, E, ws)
            mat(name(T.FFN_UP, l), F, E, ws)
            mat(name(T.FFN_DOWN, l), E, F, fs)
        if cfg.get("post_norms"):
            vec(name(T.FFN_POST_NORM, l), E, 0.2, 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
