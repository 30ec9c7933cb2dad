#!/usr/bin/env python3
"""Renders the real chat templates in templates/ with Jinja, the way Hugging Face
transformers does, and writes what they produce to tests/fixtures/chat_<name>.txt
for tests/test_chat.c.

Sources of the template texts (the model's tokenizer_config.json "chat_template",
JSON-decoded, or the GGUF's tokenizer.chat_template; several were taken from the
copies llama.cpp keeps in models/templates/, which its scripts/get_chat_template.py
fetches from the Hugging Face repositories named here):
  chatml_smollm2     HuggingFaceTB/SmolLM2-135M-Instruct (the test model's GGUF,
                     key tokenizer.chat_template)
  chatml_qwen2       Qwen/Qwen2-7B-Instruct
  chatml_openhermes  teknium/OpenHermes-2.5-Mistral-7B
  qwen2_5_instruct   Qwen/Qwen2.5-7B-Instruct
  qwen3              Qwen/Qwen3-0.6B (the Qwen3 family's template)
  phi4               microsoft/phi-4 as its GGUF (microsoft/phi-4-gguf) carries it;
                     the tokenizer_config.json of microsoft/phi-4 now wraps the
                     assistant content in {% generation %}, which renders the same
  llama2_chat        meta-llama/Llama-2-7b-chat-hf
  llama3_instruct    meta-llama/Meta-Llama-3-8B-Instruct
  llama3_1_instruct  meta-llama/Llama-3.1-8B-Instruct (Llama-3.3-70B-Instruct's is
                     the same text)
  llama3_2_instruct  meta-llama/Llama-3.2-3B-Instruct (its date comes from
                     strftime_now, which transformers and llama.cpp define)
  mistral_v1         mistralai/Mistral-7B-Instruct-v0.2 (same text as v0.1 and
                     Mixtral-8x7B-Instruct-v0.1 after their 2024 update)
  mistral_legacy     the earlier Mistral-7B-Instruct / Mixtral template, still
                     embedded in many GGUF files
  mistral_v3         mistralai/Mistral-7B-Instruct-v0.3
  mistral_v3_tekken  mistralai/Mistral-Nemo-Instruct-2407
  mistral_v7_tekken  mistralai/Mistral-Small-3.2-24B-Instruct-2506
  gemma2_it          google/gemma-2-2b-it (raises on a system message)
  gemma3_it          google/gemma-3-*-it
  phi3_5_mini        microsoft/Phi-3.5-mini-instruct

The environment is transformers' (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, raise_exception, strftime_now); when transformers
is installed every rendering is also checked against its render_jinja_template().
strftime_now reads a fixed clock (TODAY) so that the fixtures do not change
from day to day; the test detects the templates with the same date.

Fixture format, one item per line, strings as lowercase hex of their UTF-8
bytes ("-" for the empty string):
  today <YYYY-MM-DD>     the date strftime_now returned
  template <file name in tests/reference/templates/>
  family <the strata family name chat_detect must give>
  bos <hex>              the bos_token text the cases were rendered with
  eos <hex>
  default_system <hex>   what chat_detect must extract
  render <0|1>           0: detection only, no cases follow
  case <add_generation_prompt 0|1> <number of messages> <enable_thinking: -|0|1>
                         ("-": the variable was not passed)
  msg <role> <hex content>      (that many lines)
  expect <hex>   or   raises    (Jinja raised an exception)

Usage: python3 tests/reference/chat_reference.py  (from the repository root).
The random conversations come from a fixed seed per template, so the output is
reproducible and adding a template leaves the other fixtures as they were.
"""
import datetime
import json
import os
import random
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "templates")
FIXTURES = os.path.join(HERE, "..", "fixtures")

TODAY = datetime.datetime(2025, 3, 4, 9, 30)  # a day below 10 shows the zero padding
SEED = 20240601


def strftime_now(fmt):
    return TODAY.strftime(fmt)


def v7_default(text, bos, eos):
    """Mistral Small 3.2's default system prompt, as its template renders it for
    a conversation without a system message."""
    out = render(make_env(), text, [], False, bos, eos, None)
    head, tail = bos + "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"
    assert out.startswith(head) and out.endswith(tail), out
    return out[len(head):-len(tail)]


QWEN = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SMOL = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# name, family, bos, eos, default system prompt (or a function of the template
# text, bos and eos), render (False: detection only), thinking modes to render
TEMPLATE_TABLE = [
    ("chatml_smollm2", "chatml", "<|im_start|>", "<|im_end|>", SMOL, True, [None]),
    ("chatml_qwen2", "chatml", "", "<|im_end|>", "You are a helpful assistant.", True, [None]),
    ("chatml_openhermes", "chatml", "<s>", "<|im_end|>", "", True, [None]),
    ("qwen2_5_instruct", "qwen2.5", "", "<|im_end|>", QWEN, True, [None]),
    ("qwen3", "qwen3", "", "<|im_end|>", "", True, [None, True, False]),
    ("phi4", "phi4", "<|endoftext|>", "<|im_end|>", "", True, [None]),
    ("llama2_chat", "llama2", "<s>", "</s>", "", True, [None]),
    ("llama3_instruct", "llama3", "<|begin_of_text|>", "<|eot_id|>", "", True, [None]),
    ("llama3_1_instruct", "llama3.1", "<|begin_of_text|>", "<|eot_id|>", "", True, [None]),
    ("llama3_2_instruct", "llama3.1", "<|begin_of_text|>", "<|eot_id|>", "", True, [None]),
    ("mistral_v1", "mistral-v1", "<s>", "</s>", "", True, [None]),
    ("mistral_legacy", "mistral-legacy", "<s>", "</s>", "", True, [None]),
    ("mistral_v3", "mistral-v3", "<s>", "</s>", "", True, [None]),
    ("mistral_v3_tekken", "mistral-v3-tekken", "<s>", "</s>", "", True, [None]),
    ("mistral_v7_tekken", "mistral-v7-tekken", "<s>", "</s>", v7_default, True, [None]),
    ("gemma2_it", "gemma2", "<bos>", "<eos>", "", True, [None]),
    ("gemma3_it", "gemma3", "<bos>", "<eos>", "", True, [None]),
    ("phi3_5_mini", "phi3", "<s>", "<|endoftext|>", "", True, [None]),
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
    # reasoning blocks, which the Qwen3 template takes apart in assistant turns
    "<think>\nLet me see.\n</think>\n\nThe answer.", "<think>a</think>b</think>\n\nc",
    "\n\n<think>\n\n x \n\n</think>\n\n\n y \n", "no open tag</think>after",
    "<think>only an open tag", "<think></think>", "</think>", "x<think>\ny<think>z\n</think>w",
    # tool results, which the Qwen3 template does not count as the user's query
    "<tool_response>\n42\n</tool_response>", "<tool_response>half",
]


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = tojson
    return env


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' tojson filter (chat_template_utils), which replaces Jinja's
    own (that one sorts keys and escapes HTML): plain json.dumps."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


try:
    from transformers.utils.chat_template_utils import render_jinja_template
except Exception:  # transformers missing: the plain Jinja environment alone
    render_jinja_template = None


def render(env, text, msgs, add_gen, bos, eos, think):
    """The rendered string, or None when the template raises."""
    extra = {} if think is None else {"enable_thinking": think}
    # strftime_now as a variable overrides transformers' global of that name
    extra["strftime_now"] = strftime_now
    try:
        out = env.from_string(text).render(messages=msgs, add_generation_prompt=add_gen,
                                           bos_token=bos, eos_token=eos, **extra)
    except jinja2.exceptions.TemplateError:
        out = None
    if render_jinja_template is not None:
        try:
            hf, _ = render_jinja_template(conversations=[msgs], chat_template=text,
                                          add_generation_prompt=add_gen,
                                          bos_token=bos, eos_token=eos, **extra)
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
    think = "<think>\nI should greet.\n</think>\n\nHi there"
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
        # a finished exchange: the system prompt of some templates goes with the
        # last user message, of others with the first
        [sys_, m("user", "Hello"), m("assistant", "Hi there")],
        # reasoning in earlier and in the last assistant turns
        [m("user", "Hello"), m("assistant", think), m("user", "And now?"),
         m("assistant", "<think>\nHmm.\n</think>\n\nNow.")],
        [sys_, m("user", "Hello"), m("assistant", think), m("user", "Again")],
        [m("user", "Hello"), m("assistant", think)],
        [m("user", "<tool_response>\nresult\n</tool_response>"), m("assistant", think)],
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
    for name, family, bos, eos, default_system, do_render, thinks in TEMPLATE_TABLE:
        with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
            text = f.read()
        if callable(default_system):
            default_system = default_system(text, bos, eos)
        rng = random.Random("%d:%s" % (SEED, name))
        lines = ["# generated by tests/reference/chat_reference.py; do not edit",
                 "today " + TODAY.strftime("%Y-%m-%d"), "template %s.jinja" % name,
                 "family " + family, "bos " + hexs(bos),
                 "eos " + hexs(eos), "default_system " + hexs(default_system),
                 "render %d" % do_render]
        if do_render:
            # Gemma 2 raises on any system message, so its random conversations
            # have none, to leave more cases that render.
            allow_system = name != "gemma2_it"
            convs = fixed_conversations() + [random_conversation(rng, allow_system)
                                             for _ in range(40)]
            for msgs in convs:
                for add_gen in (False, True):
                    for think in thinks:
                        out = render(env, text, msgs, add_gen, bos, eos, think)
                        lines.append("case %d %d %s" % (add_gen, len(msgs),
                                                        "-" if think is None else int(think)))
                        lines += ["msg %s %s" % (x["role"], hexs(x["content"])) for x in msgs]
                        lines.append("raises" if out is None else "expect " + hexs(out))
        path = os.path.join(FIXTURES, "chat_%s.txt" % name)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        n_cases = sum(1 for x in lines if x.startswith("case "))
        n_raise = sum(1 for x in lines if x == "raises")
        print("wrote %s: %d cases, %d rendered, %d raise" %
              (os.path.relpath(path), n_cases, n_cases - n_raise, n_raise))


# --- tools --------------------------------------------------------------------------
#
# chat_tools_<name>.txt, for the families whose templates render tools (Qwen2.5,
# Qwen3): tool definitions, assistant tool calls (arguments as objects, the form
# vLLM hands the template) and tool results. Format as above, plus:
#   case <add_generation_prompt> <messages> <tools>
#   tool <hex>                     a tool definition as compact JSON
#   msg <role> <hex content> <calls>
#   call <hex name> <hex arguments as compact JSON>
# The C side re-prints the compact JSON as tojson does (chat_json_dumps), so the
# fixtures check that printing too.

TOOL_TEMPLATES = [("qwen2_5_instruct", "qwen2.5"), ("qwen3", "qwen3")]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city — «quoted» \"text\"\n\ttabbed",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "名前"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 3},
        "ratio": {"type": "number", "default": 0.25},
        "big": {"type": "number", "default": 1.5e-07},
        "flag": {"type": "boolean", "default": False}, "none": {"default": None},
        "list": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
BARE = {"type": "function", "function": {"name": "ping"}}


def tool_conversations():
    call = lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}}  # noqa: E731
    sys_ = m("system", "You are a helpful assistant")
    ask = m("user", "Weather in Paris?")
    called = {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris", "unit": "c"})]}
    two = {"role": "assistant", "content": "Let me check.", "tool_calls": [
        call("get_weather", {"city": "Zürich", "list": ["a", "b"], "n": 2.5}), call("get_time", {})]}
    result = m("tool", '{"temp": 21}')
    return [
        ([WEATHER], [ask]),
        ([WEATHER, CLOCK, BARE], [sys_, ask]),
        ([WEATHER], [ask, called, result]),
        ([WEATHER, CLOCK], [sys_, ask, two, result, m("tool", "12:00"), m("assistant", "It is 21 degrees.")]),
        ([], [ask, called, result]),
        ([WEATHER], [result, ask]),
        ([CLOCK], [ask, two, result, m("user", "And now?")]),
        ([WEATHER], [m("system", "Be brief."), ask, {"role": "assistant", "content": "<think>\nHmm.\n</think>\n\nOk.", "tool_calls": [call("get_time", {})]}, result]),
    ]


def compact(x):
    return json.dumps(x, ensure_ascii=False, separators=(",", ":"))


def main_tools():
    env = make_env()
    for name, family in TOOL_TEMPLATES:
        with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
            text = f.read()
        lines = ["# generated by tests/reference/chat_reference.py; do not edit",
                 "today " + TODAY.strftime("%Y-%m-%d"), "template %s.jinja" % name, "family " + family]
        for tools, msgs in tool_conversations():
            for add_gen in (False, True):
                try:
                    out = env.from_string(text).render(messages=msgs, tools=tools or None,
                                                       add_generation_prompt=add_gen, bos_token="",
                                                       eos_token="<|im_end|>", strftime_now=strftime_now)
                except jinja2.exceptions.TemplateError:
                    out = None
                lines.append("case %d %d %d" % (add_gen, len(msgs), len(tools)))
                lines += ["tool " + hexs(compact(t)) for t in tools]
                for x in msgs:
                    calls = x.get("tool_calls") or []
                    lines.append("msg %s %s %d" % (x["role"], hexs(x["content"]), len(calls)))
                    lines += ["call %s %s" % (hexs(c["function"]["name"]), hexs(compact(c["function"]["arguments"])))
                              for c in calls]
                lines.append("raises" if out is None else "expect " + hexs(out))
        path = os.path.join(FIXTURES, "chat_tools_%s.txt" % name)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print("wrote %s: %d cases" % (os.path.relpath(path), sum(1 for x in lines if x.startswith("case "))))


if __name__ == "__main__":
    main()
    main_tools()
