"""llama.cpp (through the llama-cpp-python binding) as an independent oracle.

Configured for an exact comparison with Strata's float path:
  - K and V cached in F32 (llama.cpp's default F16 cache rounds every key and
    value to 11 bits, which Strata does not do);
  - no flash attention (llama-cpp-python's default; the plain path keeps F32
    scores and probabilities when the cache is F32);
  - no extra buffer types: llama.cpp's AMX and repacked matrix kernels are
    skipped (the AMX kernels fault on machines that do not grant AMX state
    to the process), so every product runs ggml's plain CPU kernels.

Other differences that stay, and that tests account for: ggml's GELU goes
through an FP16 table (Gemma), and its RoPE angles are float products.
"""
import llama_cpp
import llama_cpp.llama as _llama
import numpy as np

_default_params = llama_cpp.llama_cpp.llama_model_default_params


def _params_without_extra_buffers():
    p = _default_params()
    p.use_extra_bufts = False
    return p


_llama.llama_cpp.llama_model_default_params = _params_without_extra_buffers


def load(path, n_ctx=512, n_batch=512, f32_cache=True, threads=2):
    """A llama_cpp.Llama for path, every position's logits kept."""
    kw = dict(model_path=path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, logits_all=True,
              verbose=False, n_threads=threads, n_threads_batch=threads, flash_attn=False)
    if f32_cache:
        kw.update(type_k=0, type_v=0)  # GGML_TYPE_F32
    return llama_cpp.Llama(**kw)


def logits(llm, tokens):
    """(len(tokens), n_vocab) float64 logits of the tokens as one prompt."""
    llm.reset()
    llm.eval(list(tokens))
    return np.array(llm.scores[: len(tokens)], dtype=np.float64)


def greedy(llm, tokens, n):
    """n greedy continuation ids after tokens, and llama.cpp's margin between
    its two best logits at each step."""
    llm.reset()
    llm.eval(list(tokens))
    ids, margins = [], []
    for _ in range(n):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top2 = np.sort(row)[-2:]
        tok = int(np.argmax(row))
        ids.append(tok)
        margins.append(float(top2[1] - top2[0]))
        llm.eval([tok])
    return ids, margins
