#!/usr/bin/env python3
"""Renders the real chat templates in templates/ with Jinja, the way Hugging Face
transformers does, and writes what they produce to tests/fixtures/chat_<name>.txt
for tests/test_chat.c.

Sources of the template texts (tokenizer_config.json "chat_template", JSON-decoded):
  chatml_smollm2     HuggingFaceTB/SmolLM2-135M-Instruct (the test model's GGUF,
                     key tokenizer.chat_template)
  chatml_qwen2       Qwen/Qwen2-7B-Instruct
  chatml_openhermes  teknium/OpenHermes-2.5-Mistral-7B
  llama2_chat        meta-llama/Llama-2-7b-chat-hf
  llama3_instruct    meta-llama/Meta-Llama-3-8B-Instruct
  mistral_v1         mistralai/Mistral-7B-Instruct-v0.2 (same text as v0.1 and
                     Mixtral-8x7B-Instruct-v0.1 after their 2024 update)
  mistral_legacy     the earlier Mistral-7B-Instruct / Mixtral template, still
                     embedded in many GGUF files (detection only: strata renders v1)
  gemma2_it          google/gemma-2-2b-it (raises on a system message; strata
                     merges it as Gemma 3 does, so system cases are not compared)
  gemma3_it          google/gemma-3-*-it
  phi3_5_mini        microsoft/Phi-3.5-mini-instruct

The environment is transformers' (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, raise_exception); when transformers is installed
every rendering is also checked against its render_jinja_template().

Fixture format, one item per line, strings as lowercase hex of their UTF-8
bytes ("-" for the empty string):
  template <file name in tests/reference/templates/>
  family <chatml|llama2|llama3|mistral|gemma|phi3>
  bos <hex>              the bos_token text the cases were rendered with
  eos <hex>
  default_system <hex>   what chat_detect must extract
  render <0|1>           0: detection only, no cases follow
  case <add_generation_prompt 0|1> <number of messages>
  msg <role> <hex content>      (that many lines)
  expect <hex>   or   raises    (Jinja raised an exception)

Usage: python3 tests/reference/chat_reference.py  (from the repository root).
The random conversations come from a fixed seed, so the output is reproducible.
"""
import os
import random
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "templates")
FIXTURES = os.path.join(HERE, "..", "fixtures")

# name, family, bos, eos, default system prompt, render (False: detection only)
TEMPLATE_TABLE = [
    ("chatml_smollm2", "chatml", "<|im_start|>", "<|im_end|>",
     "You are a helpful AI assistant named SmolLM, trained by Hugging Face", True),
    ("chatml_qwen2", "chatml", "", "<|im_end|>", "You are a helpful assistant.", True),
    ("chatml_openhermes", "chatml", "<s>", "<|im_end|>", "", True),
    ("llama2_chat", "llama2", "<s>", "</s>", "", True),
    ("llama3_instruct", "llama3", "<|begin_of_text|>", "<|eot_id|>", "", True),
    ("mistral_v1", "mistral", "<s>", "</s>", "", True),
    ("mistral_legacy", "mistral", "<s>", "</s>", "", False),
    ("gemma2_it", "gemma", "<bos>", "<eos>", "", True),
    ("gemma3_it", "gemma", "<bos>", "<eos>", "", True),
    ("phi3_5_mini", "phi3", "<s>", "<|endoftext|>", "", True),
]

# Every character Python's str.strip() (and so Jinja's trim) removes, and some
# it keeps (zero-width space, BOM, Mongolian vowel separator, NBSP-like letters).
PY_SPACE = ["\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f", " ",
            "\x85", "\xa0", "\u1680"] + [chr(c) for c in range(0x2000, 0x200b)] + \
           ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
NOT_SPACE = ["\u200b", "\ufeff", "\u180e", "\u00ad"]

SNIPPETS = [
    "Hello", "Hi there", "Who are you", "   I am an assistant   ",
    "Line one\nLine two\n\nLine four", "{{ not jinja }} {% raw %} {x} }}{{",
    "Ünïcödé — 日本語 🙂", "' \" \\ \\n <s> </s> [INST] <|im_end|>",
    "", " ", "\n\n", "tab\tinside", "You are a terse assistant.",
]


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    return env


try:
    from transformers.utils.chat_template_utils import render_jinja_template
except Exception:  # transformers missing: the plain Jinja environment alone
    render_jinja_template = None


def render(env, text, msgs, add_gen, bos, eos):
    """The rendered string, or None when the template raises."""
    try:
        out = env.from_string(text).render(messages=msgs, add_generation_prompt=add_gen,
                                           bos_token=bos, eos_token=eos)
    except jinja2.exceptions.TemplateError:
        out = None
    if render_jinja_template is not None:
        try:
            hf, _ = render_jinja_template(conversations=[msgs], chat_template=text,
                                          add_generation_prompt=add_gen,
                                          bos_token=bos, eos_token=eos)
            hf = hf[0]
        except jinja2.exceptions.TemplateError:
            hf = None
        if hf != out:
            sys.exit("transformers and the Jinja environment disagree on %r" % (msgs,))
    return out


def hexs(s):
    return s.encode("utf-8").hex() if s else "-"


def m(role, content):
    return {"role": role, "content": content}


def fixed_conversations():
    sys_ = m("system", "You are a helpful assistant")
    return [
        [m("user", "Hello")],
        [sys_, m("user", "Hello")],
        [sys_, m("user", "Hello"), m("assistant", "Hi there"), m("user", "Who are you"),
         m("assistant", "   I am an assistant   "), m("user", "Another question")],
        [m("user", "Hello"), m("assistant", "Hi there"), m("user", "Who are you")],
        [m("system", "Multi\nline system {x}"), m("user", "Line one\nLine two\n"),
         m("assistant", "{{ braces }} and {% tags %}"), m("user", "Ünïcödé — 日本語 🙂")],
        [m("user", "\u3000\xa0 padded\u2003\t\n"), m("assistant", "\u200b kept \ufeff")],
        [m("user", "")],
        [m("system", ""), m("user", "Hello")],
        [sys_],
        [],
        [m("assistant", "first")],
        [m("user", "a"), m("user", "b")],
        [sys_, m("user", "a"), m("system", "late system"), m("user", "b")],
        [sys_, m("system", "second system"), m("user", "a")],
        [m("user", "a"), m("assistant", "b"), m("system", "mid")],
    ]


def random_content(rng):
    k = rng.random()
    if k < 0.5:
        return rng.choice(SNIPPETS)
    pad = lambda: "".join(rng.choice(PY_SPACE + NOT_SPACE) for _ in range(rng.randint(0, 3)))
    return pad() + rng.choice(SNIPPETS) + pad()


def random_conversation(rng, allow_system):
    n = rng.randint(0, 6)
    roles = ["system", "user", "assistant"] if allow_system else ["user", "assistant"]
    if rng.random() < 0.6:  # a well-formed conversation, optionally with a system message
        msgs = []
        if allow_system and rng.random() < 0.5:
            msgs.append(m("system", random_content(rng)))
        for i in range(n):
            msgs.append(m("user" if i % 2 == 0 else "assistant", random_content(rng)))
        return msgs
    return [m(rng.choice(roles), random_content(rng)) for _ in range(n)]


def main():
    env = make_env()
    rng = random.Random(20240601)
    for name, family, bos, eos, default_system, do_render in TEMPLATE_TABLE:
        with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
            text = f.read()
        lines = ["# generated by tests/reference/chat_reference.py; do not edit",
                 "template %s.jinja" % name, "family " + family, "bos " + hexs(bos),
                 "eos " + hexs(eos), "default_system " + hexs(default_system),
                 "render %d" % do_render]
        if do_render:
            allow_system = name != "gemma2_it"
            convs = [c for c in fixed_conversations()
                     if allow_system or all(x["role"] != "system" for x in c)]
            convs += [random_conversation(rng, allow_system) for _ in range(40)]
            for msgs in convs:
                for add_gen in (False, True):
                    out = render(env, text, msgs, add_gen, bos, eos)
                    lines.append("case %d %d" % (add_gen, len(msgs)))
                    lines += ["msg %s %s" % (x["role"], hexs(x["content"])) for x in msgs]
                    lines.append("raises" if out is None else "expect " + hexs(out))
        path = os.path.join(FIXTURES, "chat_%s.txt" % name)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print("wrote", os.path.relpath(path), len(lines), "lines")


if __name__ == "__main__":
    main()
