#!/usr/bin/env python3
"""Independent NumPy reference of the llama forward pass, and the generator of the
model-level fixtures (tests/fixtures/model_*).

It shares nothing with the C engine: the GGUF file is read with the PyPI `gguf`
package (GGUFReader, gguf.quants.dequantize), every weight is dequantized and
upcast, and the forward pass runs in float64 (float32 on request, to measure how
far a float32 implementation may honestly drift). Prompts are tokenized with a
Hugging Face `tokenizers` BPE built from the vocabulary and merges stored in the
same GGUF (see build_tokenizer for why not transformers.AutoTokenizer).

Usage (from the repository root; MODEL defaults to $STRATA_TEST_MODEL, then
models/SmolLM2-135M-Instruct.Q4_1.gguf):
    python3 tests/reference/model_reference.py [MODEL] [--out tests/fixtures]
    python3 tests/reference/model_reference.py [MODEL] --checks

Layout conventions it relies on (checked against llama.cpp, see README.md):
  * a GGUF tensor of shape [ne0, ne1] has ne0 contiguous; GGUFReader returns it as
    a numpy array of shape (ne1, ne0), so a weight reads as (out, in): y = x @ W.T;
  * the llama converter permutes the Hugging Face q/k rows so that the rotary
    pairs are adjacent elements (x[2i], x[2i+1]): RoPE "normal" mode.
"""

import argparse
import os
import struct
import sys
import time

import numpy as np

import gguf
from gguf.quants import dequantize

# ---------------------------------------------------------------------------
# Hyper-parameters


def _field(reader, key, default=None, required=True):
    f = reader.fields.get(key)
    if f is None:
        if required:
            sys.exit(f"{key}: missing from the GGUF metadata; this reference needs it")
        return default
    return f.contents()


def read_hparams(reader):
    """Every hyper-parameter the forward pass needs, from the GGUF metadata."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        sys.exit(f"general.architecture is {arch!r}; this reference implements 'llama' only")
    a = arch + "."
    hp = {
        "arch": arch,
        "n_layer": int(_field(reader, a + "block_count")),
        "n_embd": int(_field(reader, a + "embedding_length")),
        "n_ff": int(_field(reader, a + "feed_forward_length")),
        "n_head": int(_field(reader, a + "attention.head_count")),
        "n_head_kv": int(_field(reader, a + "attention.head_count_kv", required=False,
                                default=_field(reader, a + "attention.head_count"))),
        "n_ctx_train": int(_field(reader, a + "context_length")),
        "eps": float(_field(reader, a + "attention.layer_norm_rms_epsilon")),
        "rope_base": float(_field(reader, a + "rope.freq_base", required=False, default=10000.0)),
    }
    hp["head_dim"] = int(_field(reader, a + "attention.key_length", required=False,
                                default=hp["n_embd"] // hp["n_head"]))
    vdim = int(_field(reader, a + "attention.value_length", required=False, default=hp["head_dim"]))
    if vdim != hp["head_dim"]:
        sys.exit(f"attention.value_length {vdim} != key_length {hp['head_dim']}: not supported here")
    if hp["n_head"] % hp["n_head_kv"]:
        sys.exit(f"head_count {hp['n_head']} is not a multiple of head_count_kv {hp['n_head_kv']}")
    hp["n_rot"] = int(_field(reader, a + "rope.dimension_count", required=False, default=hp["head_dim"]))
    if hp["n_rot"] % 2 or hp["n_rot"] > hp["head_dim"]:
        sys.exit(f"rope.dimension_count {hp['n_rot']} must be even and <= head_dim {hp['head_dim']}")
    # Rope scaling: none or linear (positions multiplied by 1/factor). Anything else
    # (yarn, longrope) changes the math and is refused rather than ignored.
    # The older key rope.scale_linear means linear scaling by that factor.
    legacy = _field(reader, a + "rope.scale_linear", required=False)
    stype = _field(reader, a + "rope.scaling.type", required=False,
                   default="none" if legacy is None else "linear")
    factor = float(_field(reader, a + "rope.scaling.factor", required=False,
                          default=0.0 if legacy is None else legacy))
    if stype == "none" or factor in (0.0, 1.0):
        hp["freq_scale"] = 1.0
    elif stype == "linear":
        hp["freq_scale"] = 1.0 / factor
    else:
        sys.exit(f"rope.scaling.type {stype!r} is not implemented by this reference")
    return hp


# ---------------------------------------------------------------------------
# Weights


def _tensor(tensors, name, dtype, shape=None):
    t = tensors.get(name)
    if t is None:
        sys.exit(f"tensor {name}: missing from the GGUF file")
    w = dequantize(t.data, t.tensor_type).astype(dtype)
    if shape is not None and w.shape != shape:
        sys.exit(f"tensor {name}: shape {w.shape} (rows, cols), expected {shape}")
    return w


def load_weights(reader, hp, dtype):
    """Dequantized weights as `dtype`; 2-D weights are (out, in)."""
    tensors = {t.name: t for t in reader.tensors}
    d, hd = hp["n_embd"], hp["head_dim"]
    nq, nkv, ff = hp["n_head"] * hd, hp["n_head_kv"] * hd, hp["n_ff"]
    w = {"tok_embd": _tensor(tensors, "token_embd.weight", dtype)}
    hp["n_vocab"] = w["tok_embd"].shape[0]
    if w["tok_embd"].shape[1] != d:
        sys.exit(f"token_embd.weight has {w['tok_embd'].shape[1]} columns, embedding_length is {d}")
    w["out_norm"] = _tensor(tensors, "output_norm.weight", dtype, (d,))
    # Tied embeddings: no output.weight means the token embedding matrix is reused.
    hp["tied_output"] = "output.weight" not in tensors
    w["output"] = w["tok_embd"] if hp["tied_output"] else \
        _tensor(tensors, "output.weight", dtype, (hp["n_vocab"], d))
    if "rope_freqs.weight" in tensors:
        w["rope_freqs"] = _tensor(tensors, "rope_freqs.weight", np.float64, (hp["n_rot"] // 2,))
    layers = []
    for i in range(hp["n_layer"]):
        p = f"blk.{i}."
        layers.append({
            "attn_norm": _tensor(tensors, p + "attn_norm.weight", dtype, (d,)),
            "wq": _tensor(tensors, p + "attn_q.weight", dtype, (nq, d)),
            "wk": _tensor(tensors, p + "attn_k.weight", dtype, (nkv, d)),
            "wv": _tensor(tensors, p + "attn_v.weight", dtype, (nkv, d)),
            "wo": _tensor(tensors, p + "attn_output.weight", dtype, (d, nq)),
            "ffn_norm": _tensor(tensors, p + "ffn_norm.weight", dtype, (d,)),
            "w_gate": _tensor(tensors, p + "ffn_gate.weight", dtype, (ff, d)),
            "w_up": _tensor(tensors, p + "ffn_up.weight", dtype, (ff, d)),
            "w_down": _tensor(tensors, p + "ffn_down.weight", dtype, (d, ff)),
        })
        for k in ("attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias"):
            if p + k in tensors:
                sys.exit(f"tensor {p + k}: biases are not implemented by this reference")
    w["layers"] = layers
    return w


# ---------------------------------------------------------------------------
# Forward pass


class Model:
    """The llama forward pass over dequantized weights, computed in `dtype`.

    rope_mode "norm" rotates adjacent pairs (x[2i], x[2i+1]) (what llama GGUFs
    need); "neox" rotates (x[i], x[i + n_rot/2]) and exists only for the
    --checks cross-check.
    """

    def __init__(self, reader, dtype=np.float64, rope_mode="norm"):
        self.dt = np.dtype(dtype)
        self.hp = read_hparams(reader)
        self.w = load_weights(reader, self.hp, self.dt)
        self.rope_mode = rope_mode
        # When set, the input of every weight matmul is quantized to 8 bits per block of 32
        # (scale amax/127, round half away from zero), as an engine's fast path does before
        # an integer dot product with quantized weights; used only to size its tolerance.
        self.act_q8 = False
        # When set, K and V are rounded to float16 (to nearest, ties to even) as they enter
        # the cache, as an engine with an F16 KV cache stores them.
        self.kv_f16 = False
        self.q_pos_offset = 0  # nonzero only in --checks: queries rotated that many positions late
        self.set_rope()

    def set_rope(self):
        """theta_i = pos * freq_scale * base^(-2i/n_rot) [/ rope_freqs[i]], in float64."""
        n_rot = self.hp["n_rot"]
        inv = self.hp["rope_base"] ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
        if "rope_freqs" in self.w:
            inv = inv / self.w["rope_freqs"]
        self.inv_freq = inv * self.hp["freq_scale"]

    def new_cache(self):
        n = self.hp["n_layer"]
        return {"n_past": 0, "k": [None] * n, "v": [None] * n}

    def _mm(self, x, w):
        """x @ w.T, w being (out, in)."""
        if self.act_q8:
            xb = x.reshape(*x.shape[:-1], -1, 32)
            d = (np.abs(xb).max(axis=-1, keepdims=True) / 127).astype(np.float32).astype(x.dtype)
            q = np.where(d > 0, np.abs(xb) / np.where(d > 0, d, 1), 0)
            x = (np.sign(xb) * np.floor(q + 0.5) * d).reshape(x.shape)
        return x @ w.T

    def _rmsnorm(self, x, w):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.dt.type(self.hp["eps"])) * w

    def _rope_tables(self, pos):
        ang = pos[:, None] * self.inv_freq[None, :]
        return np.cos(ang).astype(self.dt)[:, None, :], np.sin(ang).astype(self.dt)[:, None, :]

    def _rope(self, x, cos, sin):
        """x: (T, heads, head_dim); cos/sin: (T, n_rot/2). Dims past n_rot pass through."""
        n_rot = self.hp["n_rot"]
        y = x.copy()
        if self.rope_mode == "norm":
            x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
            y[..., 0:n_rot:2] = x0 * cos - x1 * sin
            y[..., 1:n_rot:2] = x0 * sin + x1 * cos
        else:
            h = n_rot // 2
            x0, x1 = x[..., :h], x[..., h:n_rot]
            y[..., :h] = x0 * cos - x1 * sin
            y[..., h:n_rot] = x0 * sin + x1 * cos
        return y

    def forward(self, ids, cache, hidden=False):
        """Logits (len(ids), n_vocab) for tokens `ids` at positions n_past.. ; extends cache.
        With hidden, the final normed hidden states (len(ids), n_embd) instead (embeddings)."""
        hp, dt = self.hp, self.dt
        T, p0 = len(ids), cache["n_past"]
        nh, nkv, hd = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
        group = nh // nkv
        x = self.w["tok_embd"][np.asarray(ids)].astype(dt)
        pos = np.arange(p0, p0 + T, dtype=np.float64)
        cos, sin = self._rope_tables(pos)
        qcos, qsin = self._rope_tables(pos + self.q_pos_offset)
        S = p0 + T
        # Causal mask: query at absolute position p0+t sees keys 0..p0+t.
        mask = np.arange(S)[None, :] > (p0 + np.arange(T))[:, None]
        scale = dt.type(1.0 / np.sqrt(hd))
        kv_of_head = np.arange(nh) // group  # q head h reads kv head h // (n_head/n_head_kv)
        for li, L in enumerate(self.w["layers"]):
            h = self._rmsnorm(x, L["attn_norm"])
            q = self._mm(h, L["wq"]).reshape(T, nh, hd)
            k = self._mm(h, L["wk"]).reshape(T, nkv, hd)
            v = self._mm(h, L["wv"]).reshape(T, nkv, hd)
            q = self._rope(q, qcos, qsin)
            k = self._rope(k, cos, sin)
            if self.kv_f16:
                k, v = k.astype(np.float16).astype(dt), v.astype(np.float16).astype(dt)
            if cache["k"][li] is None:
                cache["k"][li], cache["v"][li] = k, v
            else:
                cache["k"][li] = np.concatenate([cache["k"][li], k])
                cache["v"][li] = np.concatenate([cache["v"][li], v])
            K = cache["k"][li][:, kv_of_head, :]  # (S, nh, hd)
            V = cache["v"][li][:, kv_of_head, :]
            s = np.einsum("thd,shd->hts", q, K) * scale
            s = np.where(mask[None], -np.inf, s)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p = p / p.sum(axis=-1, keepdims=True)
            o = np.einsum("hts,shd->thd", p, V).reshape(T, nh * hd)
            x = x + self._mm(o, L["wo"])
            h = self._rmsnorm(x, L["ffn_norm"])
            g = self._mm(h, L["w_gate"])
            u = self._mm(h, L["w_up"])
            x = x + self._mm((g / (1 + np.exp(-g))) * u, L["w_down"])
        cache["n_past"] = S
        x = self._rmsnorm(x, self.w["out_norm"])
        if hidden:
            return x
        return self._mm(x, self.w["output"])

    def greedy(self, ids, n):
        """Greedy continuation of n tokens (no stop at EOS) with a KV cache.

        Returns (tokens, logits) where logits[i] (float64 copy) is the row that chose tokens[i];
        logits[0] is the row at the last prompt position.
        """
        cache = self.new_cache()
        row = self.forward(ids, cache)[-1]
        toks, rows = [], []
        for i in range(n):
            rows.append(row.astype(np.float64))
            t = int(np.argmax(row))  # ties: lowest id
            toks.append(t)
            if i + 1 < n:
                row = self.forward([t], cache)[-1]
        return toks, np.stack(rows)


# ---------------------------------------------------------------------------
# Tokenizer


def build_tokenizer(reader):
    """A Hugging Face `tokenizers` BPE built from the GGUF vocabulary and merges.

    transformers.AutoTokenizer.from_pretrained(..., gguf_file=...) needs torch, and its
    GGUF converter does not know pre-tokenizer 'smollm' (it would fall back to plain
    GPT-2 splitting, grouping digits). SmolLM2's own tokenizer.json is: no normalizer,
    pre-tokenizer Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
    use_regex=True)], BPE without byte fallback, ByteLevel decoder; llama.cpp's 'smollm'
    pre-tokenizer (\\p{N} split, then the GPT-2 regex) is the same. Control tokens
    (token_type 3) are added as special tokens, so chat markup is parsed whole.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    model = _field(reader, "tokenizer.ggml.model")
    pre = _field(reader, "tokenizer.ggml.pre", required=False, default="default")
    if model != "gpt2" or pre != "smollm":
        sys.exit(f"tokenizer {model!r}/{pre!r}: this reference builds gpt2/smollm only")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in _field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False)
                for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens(specials)
    user = [AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4]
    if user:
        tok.add_tokens(user)
    if tok.get_vocab_size() != len(tokens):
        sys.exit(f"tokenizer has {tok.get_vocab_size()} entries, the GGUF {len(tokens)}")
    return tok


def render_chat(reader, messages):
    """The GGUF's own chat template rendered with jinja2, with the generation prompt."""
    import jinja2
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    tmpl = env.from_string(_field(reader, "tokenizer.chat_template"))
    return tmpl.render(messages=messages, add_generation_prompt=True)


# ---------------------------------------------------------------------------
# Fixtures

N_GREEDY = 64
# Prompt whose logits are also recorded at a few inner positions (RoPE/position bugs).
MULTI_POS_PROMPT = 0

PLAIN_PROMPTS = [
    ("story", "Once upon a time, in a small village nestled between rolling hills and a quiet "
              "river, there lived an old clockmaker named Elias. Every morning he opened his "
              "shop, wound the great clock above the door, and"),
    ("numbers", "In 1969, Apollo 11 landed on the Moon. The mission lasted 8 days, 3 hours and"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("utf8", "The naïve café owner in Málaga served crème brûlée and"),
]
CHAT_PROMPTS = [
    ("chat_france", [{"role": "system", "content": "You are a helpful AI assistant named SmolLM, "
                                                   "trained by Hugging Face"},
                     {"role": "user", "content": "What is the capital of France?"}]),
    ("chat_haiku", [{"role": "user", "content": "Write a haiku about the sea."}]),
]


def escape(s):
    """One-line form of a prompt: backslash, newline, CR and tab escaped; UTF-8 kept raw."""
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def make_prompts(reader, tok):
    prompts = [(name, text) for name, text in PLAIN_PROMPTS]
    for name, msgs in CHAT_PROMPTS:
        prompts.append((name, render_chat(reader, msgs)))
    expect = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
              "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
              "<|im_start|>assistant\n")
    if dict(prompts)["chat_france"] != expect:
        sys.exit("the GGUF chat template rendered an unexpected chatml text")
    out = []
    for name, text in prompts:
        ids = tok.encode(text, add_special_tokens=False).ids
        if tok.decode(ids, skip_special_tokens=False) != text:
            sys.exit(f"prompt {name}: tokenizer does not round-trip")
        out.append((name, text, ids))
    crosscheck_tokenizer(reader, out)
    return out


def crosscheck_tokenizer(reader, prompts):
    """Compares with transformers' own GGUF tokenizer converter (its torch-free part), if present."""
    try:
        from transformers.integrations.gguf import gguf_tokenizer_mapping as gm
    except Exception as e:  # transformers absent, or a version without that module
        print(f"tokenizer cross-check with transformers skipped: {e}", flush=True)
        return
    d = {"tokenizer_type": "gpt2", "pre_tokenizer_type": _field(reader, "tokenizer.ggml.pre"),
         "tokens": list(_field(reader, "tokenizer.ggml.tokens")),
         "token_type": list(_field(reader, "tokenizer.ggml.token_type")),
         "merges": list(_field(reader, "tokenizer.ggml.merges"))}
    ht, _ = gm.convert_gguf_tokenizer(_field(reader, "general.architecture"), d)
    bad = [name for name, text, ids in prompts
           if ht.encode(text, add_special_tokens=False).ids != ids]
    print(f"tokenizer cross-check with transformers' GGUF converter: "
          f"{len(prompts) - len(bad)}/{len(prompts)} prompts agree" + (f", differ: {bad}" if bad else ""),
          flush=True)


def top2_margin(row):
    a = np.partition(row, -2)[-2:]
    return float(a[1] - a[0])


def top5(row):
    # Stable order: by logit descending, then id ascending.
    idx = np.lexsort((np.arange(row.size), -row))[:5]
    return [int(i) for i in idx]


def write_logits_bin(path, n_vocab, prompt_index, position, n_ctx, row32):
    # Header (24 bytes, little-endian): "SLGT", u32 version=1, u32 n_vocab,
    # u32 prompt_index, u32 position, u32 n_ctx (= position + 1); then float32[n_vocab].
    with open(path, "wb") as f:
        f.write(b"SLGT")
        f.write(struct.pack("<5I", 1, n_vocab, prompt_index, position, n_ctx))
        f.write(np.asarray(row32, dtype="<f4").tobytes())


def generate(model_path, out_dir):
    t_start = time.time()
    reader = gguf.GGUFReader(model_path)
    tok = build_tokenizer(reader)
    prompts = make_prompts(reader, tok)
    m64 = Model(reader, np.float64)
    hp = m64.hp
    eos = int(_field(reader, "tokenizer.ggml.eos_token_id"))
    print(f"hparams: {hp}", flush=True)
    print(f"load: {time.time() - t_start:.1f}s", flush=True)

    greedy = []     # (tokens, margins, top1 logits) per prompt
    full64 = []     # float64 logits over prompt + greedy tokens (teacher-forced), per prompt
    for pi, (name, text, ids) in enumerate(prompts):
        t0 = time.time()
        toks, rows = m64.greedy(ids, N_GREEDY)
        # Teacher-forced prefill over the whole sequence: checks the KV-cache path and gives
        # every position's logits for the float32 comparison.
        seq = ids + toks[:-1]
        full = m64.forward(seq, m64.new_cache())
        d_cache = float(np.max(np.abs(full[len(ids) - 1:] - rows)))
        if d_cache > 1e-9:
            sys.exit(f"prompt {name}: KV-cache decode and full prefill differ by {d_cache:g}")
        full64.append(full)
        margins = [top2_margin(r) for r in rows]
        greedy.append((toks, margins, [float(r.max()) for r in rows]))
        print(f"prompt {pi} {name}: {len(ids)} tokens, greedy {time.time() - t0:.1f}s, "
              f"cache-vs-prefill {d_cache:.2e}, min margin {min(margins):.4f}", flush=True)
        print("   ", repr(tok.decode(toks, skip_special_tokens=False)), flush=True)

    # The same model with 8-bit activations: what a fast path may honestly drift by.
    m64.act_q8 = True
    dq8 = []
    for pi, (name, text, ids) in enumerate(prompts):
        seq = ids + greedy[pi][0][:-1]
        d = np.abs(m64.forward(seq, m64.new_cache()) - full64[pi])
        toks_q8, _ = m64.greedy(ids, N_GREEDY)
        div = next((i for i, (a, b) in enumerate(zip(toks_q8, greedy[pi][0])) if a != b), -1)
        rms = float(np.sqrt(np.mean(d * d, axis=1)).max())
        dq8.append((float(d[len(ids) - 1].max()), float(d.max()), rms, div,
                    greedy[pi][1][div] if div >= 0 else 0.0))
        print(f"prompt {pi} {name}: act-q8 vs float64 max|dlogit| last-prompt {dq8[-1][0]:.3f}, "
              f"all {d.max():.3f}, max rms {rms:.3f}, greedy diverges at step {div}"
              + (f" (float64 margin there {dq8[-1][4]:.4f})" if div >= 0 else ""), flush=True)

    # The same model with an F16 K/V cache: the reference for that cache type.
    m64.act_q8 = False
    m64.kv_f16 = True
    full16, dkv = [], []
    for pi, (name, text, ids) in enumerate(prompts):
        seq = ids + greedy[pi][0][:-1]
        full16.append(m64.forward(seq, m64.new_cache()))
        d = np.abs(full16[-1] - full64[pi])
        dkv.append((float(d[len(ids) - 1].max()), float(d.max())))
        print(f"prompt {pi} {name}: F16 K/V vs float64 max|dlogit| last-prompt {dkv[-1][0]:.4f}, "
              f"all {dkv[-1][1]:.4f}", flush=True)
    del m64

    # The same sequences through a float32 model: the honest floor for a float32 engine.
    m32 = Model(reader, np.float32)
    d32 = []
    for pi, (name, text, ids) in enumerate(prompts):
        seq = ids + greedy[pi][0][:-1]
        full32 = m32.forward(seq, m32.new_cache()).astype(np.float64)
        d = np.abs(full32 - full64[pi])
        d_prompt = float(d[len(ids) - 1].max())
        d_all = float(d.max())
        flips = int(np.sum(np.argmax(full32[len(ids) - 1:], axis=1) != np.array(greedy[pi][0])))
        d32.append((d_prompt, d_all, flips))
        print(f"prompt {pi} {name}: float32 vs float64 max|dlogit| last-prompt {d_prompt:.3e}, "
              f"all {len(seq)} positions {d_all:.3e}, argmax flips {flips}", flush=True)
    # ... and with an F16 K/V cache: rounding to float16 turns float32's small differences
    # into whole steps of a half wherever a value lies near a rounding boundary.
    m32.kv_f16 = True
    d32kv = []
    for pi, (name, text, ids) in enumerate(prompts):
        row = m32.forward(ids, m32.new_cache())[-1].astype(np.float64)
        d32kv.append(float(np.abs(row - full16[pi][len(ids) - 1]).max()))
        print(f"prompt {pi} {name}: float32 vs float64, both with F16 K/V, max|dlogit| last-prompt "
              f"{d32kv[-1]:.4f}", flush=True)
    del m32

    # Records: last prompt position of every prompt, plus inner positions of one prompt.
    records = []
    for pi, (name, text, ids) in enumerate(prompts):
        positions = [len(ids) - 1]
        if pi == MULTI_POS_PROMPT:
            n = len(ids)
            positions = sorted({0, n // 3, (2 * n) // 3, n - 1})
        for pos in positions:
            records.append((pi, pos))

    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        if f.startswith("model_logits_") and f.endswith(".bin"):
            os.remove(os.path.join(out_dir, f))

    with open(os.path.join(out_dir, "model_prompts.txt"), "w", encoding="utf-8") as f:
        f.write("# Prompts of the model-level fixtures (generated by tests/reference/model_reference.py).\n"
                "# Per prompt three lines:\n"
                "#   prompt <index> <name>\n"
                "#   text <text: UTF-8, with \\\\ \\n \\r \\t escaped>\n"
                "#   ids <count> <token id>...\n"
                "# Token ids: special tokens (<|im_start|> ...) parsed, no BOS added (add_bos_token false).\n")
        for pi, (name, text, ids) in enumerate(prompts):
            f.write(f"prompt {pi} {name}\ntext {escape(text)}\nids {len(ids)} {' '.join(map(str, ids))}\n")

    with open(os.path.join(out_dir, "model_logits.txt"), "w") as f:
        f.write("# Logit fixtures (generated by tests/reference/model_reference.py).\n"
                "# One line per record:\n"
                "#   logits <file> <prompt index> <position> <top1 logit> <top1-top2 gap> "
                "<top-5 ids, best first>\n"
                "# The logits are those after the prompt's tokens 0..position, computed in float64;\n"
                "# <file> holds them as float32 (24-byte header, see tests/reference/README.md).\n"
                "# float32_vs_float64 <prompt index> <max |dlogit| at the last prompt position> "
                "<max |dlogit| over prompt + greedy positions>\n"
                "#   is the same forward pass run in float32 (weights, activations, accumulation).\n"
                "# act_q8_vs_float64 <prompt index> <max |dlogit| last prompt position> <max |dlogit| all "
                "positions>\n#   <max over positions of the rms dlogit> <first greedy step that differs, -1: "
                "none> <float64 margin there>\n"
                "#   is the float64 pass with every weight matmul's input quantized to 8 bits per block of 32.\n"
                "# logits_f16 <file> <prompt index> <position> <top1 logit> <top1-top2 gap> <top-5 ids>\n"
                "#   the float64 pass with K and V rounded to float16 as they enter the cache (an F16\n"
                "#   KV cache), at each prompt's last position.\n"
                "# kv_f16_vs_float64 <prompt index> <max |dlogit| last prompt position> <max |dlogit| all "
                "positions>\n"
                "# kv_f16_float32_vs_float64 <prompt index> <max |dlogit| last prompt position>\n"
                "#   the same forward pass in float32 against float64, both with F16 K/V.\n")
        def record(kind, prefix, full, pi, pos):  # one logits file and its line
            row = full[pi][pos]
            fname = f"{prefix}_p{pi}_t{pos}.bin"
            write_logits_bin(os.path.join(out_dir, fname), hp["n_vocab"], pi, pos, pos + 1,
                             row.astype(np.float32))
            f.write(f"{kind} {fname} {pi} {pos} {row.max():.6f} {top2_margin(row):.6f} "
                    f"{' '.join(map(str, top5(row)))}\n")

        for pi, pos in records:
            record("logits", "model_logits", full64, pi, pos)
        for pi, (dp, da, _) in enumerate(d32):
            f.write(f"float32_vs_float64 {pi} {dp:.3e} {da:.3e}\n")
        for pi, (dp, da, rms, div, mg) in enumerate(dq8):
            f.write(f"act_q8_vs_float64 {pi} {dp:.4f} {da:.4f} {rms:.4f} {div} {mg:.6f}\n")
        for pi, (name, text, ids) in enumerate(prompts):
            record("logits_f16", "model_logits_f16", full16, pi, len(ids) - 1)
        for pi, (dp, da) in enumerate(dkv):
            f.write(f"kv_f16_vs_float64 {pi} {dp:.4f} {da:.4f}\n")
        for pi, dp in enumerate(d32kv):
            f.write(f"kv_f16_float32_vs_float64 {pi} {dp:.4f}\n")

    with open(os.path.join(out_dir, "model_greedy.txt"), "w", encoding="utf-8") as f:
        f.write(f"# Greedy continuations (generated by tests/reference/model_reference.py):\n"
                f"# {N_GREEDY} tokens per prompt, argmax of float64 logits (ties: lowest id),\n"
                f"# no stop at end-of-sequence (eos id {eos} is generated like any token).\n"
                f"#   greedy <prompt index> <count>\n"
                f"#   then <count> lines: <step> <token id> <top1-top2 logit margin> <top1 logit>\n"
                f"# A margin near 0 is a near-tie: a float32 engine may legitimately pick the other token there.\n")
        for pi, (toks, margins, tops) in enumerate(greedy):
            f.write(f"# {escape(tok.decode(toks, skip_special_tokens=False))}\n")
            f.write(f"greedy {pi} {len(toks)}\n")
            for i, (t, mg, tp) in enumerate(zip(toks, margins, tops)):
                f.write(f"{i} {t} {mg:.6f} {tp:.6f}\n")

    print(f"total: {time.time() - t_start:.1f}s", flush=True)


def checks(model_path):
    """What the conventions and a few small bugs do to the logits (nothing is written).

    RoPE pairing: teacher-forced NLL of natural text and a greedy sample, adjacent pairs
    (llama.cpp's "normal" mode) against NeoX halves. Then the max |dlogit| over every
    position of prompt 0 caused by deliberate small bugs, to set against a tolerance.
    """
    reader = gguf.GGUFReader(model_path)
    tok = build_tokenizer(reader)
    ids = tok.encode(PLAIN_PROMPTS[0][1], add_special_tokens=False).ids
    m = Model(reader, np.float64)

    def run():
        return m.forward(ids, m.new_cache())

    for mode in ("norm", "neox"):
        m.rope_mode = mode
        logits = run()[:-1]
        mx = logits.max(1)
        lse = np.log(np.sum(np.exp(logits - mx[:, None]), 1)) + mx
        nll = float(np.mean(lse - logits[np.arange(len(ids) - 1), ids[1:]]))
        toks, _ = m.greedy(ids, 24)
        print(f"rope {mode}: mean NLL of prompt 0 {nll:.3f} nats/token; greedy: "
              f"{tok.decode(toks)!r}", flush=True)
    m.rope_mode = "norm"
    base = run()
    bugs = [
        ("queries rotated one position late", lambda: setattr(m, "q_pos_offset", 1),
         lambda: setattr(m, "q_pos_offset", 0)),
        ("rms eps 1e-6 instead of 1e-5", lambda: m.hp.update(eps=1e-6),
         lambda: m.hp.update(eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")))),
        ("rope base 10000 instead of 100000", lambda: (m.hp.update(rope_base=10000.0), m.set_rope()),
         lambda: (m.hp.update(rope_base=float(_field(reader, "llama.rope.freq_base"))), m.set_rope())),
        ("8-bit activations (fast path model)", lambda: setattr(m, "act_q8", True),
         lambda: setattr(m, "act_q8", False)),
        ("K/V rounded to float16 (an F16 cache)", lambda: setattr(m, "kv_f16", True),
         lambda: setattr(m, "kv_f16", False)),
    ]
    for name, on, off in bugs:
        on()
        d = np.abs(run() - base)
        off()
        print(f"{name}: max |dlogit| {d.max():.4f} over {len(ids)} positions "
              f"(median per position {np.median(d.max(1)):.4f})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("model", nargs="?", help="path to SmolLM2-135M-Instruct.Q4_1.gguf (default: "
                    "$STRATA_TEST_MODEL or models/SmolLM2-135M-Instruct.Q4_1.gguf)",
                    default=os.environ.get("STRATA_TEST_MODEL", os.path.join(
                        root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures"), help="fixture directory")
    ap.add_argument("--checks", action="store_true",
                    help="only print the RoPE pairing cross-check and the effect of small bugs; "
                         "writes nothing")
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        sys.exit(f"{args.model}: no such model file; run scripts/fetch-model.sh or pass the path")
    if args.checks:
        checks(args.model)
    else:
        generate(args.model, os.path.normpath(args.out))


if __name__ == "__main__":
    main()
