#!/usr/bin/env python3
"""The OpenAI features of `strata serve` beyond plain chat, and cancellation,
tested from the outside with the official `openai` client where it has the
feature and raw HTTP otherwise:

- logprobs / top_logprobs (chat and completions, streaming and not), checked
  for shape, for consistency between the forms, and the first token's values
  against the float64 NumPy reference forward pass;
- response_format json_object / json_schema (and the client's pydantic
  parse()) and the `grammar` field, the answers validated here;
- completions' echo (the prompt's text, or its ids' text, before each
  choice's completion, streamed first), and several prompts in one request
  (each prompt's choices its own answers);
- n > 1 (choice i is the request with seed + i), presence/frequency penalties
  (every greedy choice re-derived from the raw logprobs), logit_bias;
- tools: forced calls (required, named) parsed into tool_calls, streamed,
  and a conversation that carries calls and results back;
- /v1/embeddings (float and base64) against the reference's mean-pooled
  hidden states; routes without /v1, /props, max_tokens clamped;
- cancellation between prompt chunks (a client that leaves, --timeout,
  shutdown), a timeout after some tokens (finish_reason "timeout").

Prints "  ok NAME", "  FAIL NAME: why" or "  skip NAME: why" and "RESULT
passed failed skipped"; a skip is neither a pass nor a failure.

    python3 tests/test_server_api.py --bin build/strata --model MODEL
"""
import argparse
import base64
import http.client
import json
import math
import os
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server as ts  # noqa: E402  (the server helpers and the result counts)
from test_server import Server, Skip, check, client, http_call, metrics, run_test, sse_events, wait_for  # noqa: E402

KEY = ts.KEY
MSGS = [{"role": "user", "content": "Name three colors."}]


def post(srv, path, body, timeout=120):
    s, h, b = http_call(srv.port, "POST", path, body, ts.auth({"Content-Type": "application/json"}), timeout)
    return s, json.loads(b) if b else None


def ok_post(srv, path, body):
    s, j = post(srv, path, body)
    check(s == 200, f"{path}: {s} {str(j)[:300]}")
    return j


def stream_events(srv, path, body):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    c.request("POST", path, body=json.dumps(dict(body, stream=True)).encode(),
              headers=ts.auth({"Content-Type": "application/json"}))
    r = c.getresponse()
    if r.status != 200:  # (reading the body in the message would consume a good stream)
        check(False, f"stream {r.status}: {r.read()[:300]!r}")
    out = []
    for data in sse_events(r):
        if data == b"[DONE]":
            out.append("[DONE]")
            break
        out.append(json.loads(data))
    c.close()
    return out


# --- the float64 reference --------------------------------------------------------------

_REF = {}


def reference(model_path):
    """tests/reference/model_reference.py's float64 model (loaded once)."""
    if "m" not in _REF:
        try:
            import gguf  # noqa: F401
            import numpy  # noqa: F401
        except ImportError:
            raise Skip("the python packages gguf and numpy are needed for the reference")
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
        import model_reference
        r = model_reference.gguf.GGUFReader(model_path)
        _REF["m"] = model_reference.Model(r)
    return _REF["m"]


def ref_run(m, ids, hidden, act_q8=False):
    m.act_q8 = act_q8
    try:
        return m.forward(ids, m.new_cache(), hidden=hidden)
    finally:
        m.act_q8 = False


# --- logprobs ---------------------------------------------------------------------------------


def t_logprobs(srv, mid, model_path):
    cl = client(srv)
    r = cl.chat.completions.create(model=mid, messages=MSGS, max_tokens=8, temperature=0, logprobs=True,
                                   top_logprobs=3)
    content = r.choices[0].message.content
    lp = r.choices[0].logprobs.content
    check(len(lp) == r.usage.completion_tokens, f"{len(lp)} entries for {r.usage.completion_tokens} tokens")
    check(b"".join(bytes(t.bytes) for t in lp).decode() == content, "the tokens' bytes are not the content")
    for t in lp:
        tops = [x.logprob for x in t.top_logprobs]
        check(t.logprob <= 0 and len(tops) == 3 and tops == sorted(tops, reverse=True), f"entry {t}")
        check(t.token == t.top_logprobs[0].token and abs(t.logprob - tops[0]) < 1e-6, f"greedy token not first: {t}")
        check(sum(math.exp(x) for x in tops) <= 1 + 1e-6, f"probabilities above 1: {tops}")
    s = cl.chat.completions.create(model=mid, messages=MSGS, max_tokens=8, temperature=0, logprobs=True,
                                   top_logprobs=3, stream=True)
    streamed = [e for c in s if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    check([(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in lp], "stream differs")
    plain = cl.chat.completions.create(model=mid, messages=MSGS, max_tokens=4, temperature=0)
    check(plain.choices[0].logprobs is None, "logprobs without asking")
    # completions: the legacy shape, and the first token against the reference
    _, _, b = http_call(srv.port, "POST", "/tokenize", {"content": "The capital of France is"}, ts.auth())
    ids = json.loads(b)["tokens"]
    c = cl.completions.create(model=mid, prompt=ids, max_tokens=6, temperature=0, logprobs=5)
    L = c.choices[0].logprobs
    n = c.usage.completion_tokens
    check(len(L.tokens) == len(L.token_logprobs) == len(L.top_logprobs) == len(L.text_offset) == n, f"{L}")
    check(L.text_offset[0] == 0 and L.text_offset == sorted(L.text_offset), f"offsets {L.text_offset}")
    check("".join(L.tokens) == c.choices[0].text, "tokens do not make the text")
    check(all(len(t) == 5 for t in L.top_logprobs), "not 5 alternatives")
    sc = cl.completions.create(model=mid, prompt=ids, max_tokens=6, temperature=0, logprobs=5, stream=True)
    st = [x for ch in sc for x in (ch.choices[0].logprobs.token_logprobs if ch.choices[0].logprobs else [])]
    check(st == L.token_logprobs, "streamed completion logprobs differ")
    try:
        import numpy as np
        m = reference(model_path)
    except Skip as e:
        print(f"    logprobs: reference check skipped ({e})", flush=True)
        return
    def log_softmax(row):
        row = row - row.max()
        return row - np.log(np.exp(row).sum())
    ref = log_softmax(ref_run(m, ids, False)[-1])
    q8 = log_softmax(ref_run(m, ids, False, act_q8=True)[-1])
    top = sorted(L.top_logprobs[0].items(), key=lambda kv: -kv[1])
    _, _, db = http_call(srv.port, "POST", "/tokenize", {"content": top[0][0]}, ts.auth())
    order = np.argsort(-ref)[:5]
    # tolerance: 3x what 8-bit activations (the engine's matmul inputs) move the reference by
    tol = 3 * float(np.abs(q8[order] - ref[order]).max()) + 1e-3
    diffs = [abs(v - float(ref[i])) for (tok, v), i in zip(top, order)]
    check(max(diffs) <= tol, f"top-5 logprobs {[round(v, 4) for _, v in top]} vs reference "
          f"{[round(float(ref[i]), 4) for i in order]} (tolerance {tol:.4f})")
    print(f"    logprobs: first token's top 5 within {max(diffs):.4f} of the float64 reference (tolerance {tol:.4f})",
          flush=True)


# --- structured output --------------------------------------------------------------------------

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24},
    "age": {"type": "integer"},
    "color": {"enum": ["red", "green", "blue"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                "required": ["city"], "additionalProperties": False},
    "nickname": {"type": ["string", "null"], "maxLength": 12}},
    "required": ["name", "age", "color", "tags", "address"], "additionalProperties": False}


def valid_person(v):
    """PERSON checked by hand (not by the code under test)."""
    check(isinstance(v, dict), f"not an object: {v!r}")
    allowed = {"name", "age", "color", "tags", "address", "nickname"}
    check(set(v) <= allowed and {"name", "age", "color", "tags", "address"} <= set(v), f"keys {list(v)}")
    check(isinstance(v["name"], str) and len(v["name"]) <= 24, f"name {v['name']!r}")
    check(isinstance(v["age"], int) and not isinstance(v["age"], bool), f"age {v['age']!r}")
    check(v["color"] in ("red", "green", "blue"), f"color {v['color']!r}")
    check(isinstance(v["tags"], list) and len(v["tags"]) <= 3 and all(isinstance(t, str) for t in v["tags"]), f"tags {v['tags']!r}")
    check(isinstance(v["address"], dict) and set(v["address"]) == {"city"} and isinstance(v["address"]["city"], str), f"address {v['address']!r}")
    check(v.get("nickname") is None or isinstance(v["nickname"], str), f"nickname {v.get('nickname')!r}")


def t_json_modes(srv, mid, model_path):
    cl = client(srv)
    ask = [{"role": "user", "content": "Describe a person as JSON."}]
    r = cl.chat.completions.create(model=mid, messages=ask, max_tokens=120, temperature=0,
                                   response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        check(isinstance(json.loads(r.choices[0].message.content), dict), "json_object: not an object")
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for temp in (0, 1.0):
        r = cl.chat.completions.create(model=mid, messages=ask, max_tokens=200, temperature=temp, seed=11,
                                       response_format=fmt)
        check(r.choices[0].finish_reason == "stop", f"schema answer not finished: {r.choices[0].message.content!r}")
        valid_person(json.loads(r.choices[0].message.content))
    chunks = list(cl.chat.completions.create(model=mid, messages=ask, max_tokens=200, temperature=0,
                                             response_format=fmt, stream=True))
    valid_person(json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)))
    c = cl.completions.create(model=mid, prompt="A person as JSON:", max_tokens=200, temperature=0,
                              extra_body={"response_format": fmt})
    valid_person(json.loads(c.choices[0].text))
    # the grammar field (raw HTTP: the client has no such parameter)
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "Is water wet?"}]}),
                       ("/v1/completions", {"prompt": "Is water wet? Answer:"})):
        j = ok_post(srv, path, dict(body, grammar='root ::= ("yes" | "no") "."', max_tokens=10, temperature=1.0))
        text = j["choices"][0].get("message", {}).get("content") if "messages" in body else j["choices"][0]["text"]
        check(text in ("yes.", "no."), f"grammar answer {text!r}")
    # the client's pydantic parse(): its own schema (with $defs), its own validation
    try:
        import pydantic
    except ImportError:
        return
    parse = getattr(cl.chat.completions, "parse", None) or cl.beta.chat.completions.parse

    class City(pydantic.BaseModel):  # bounded, so that a small model cannot ramble past max_tokens
        name: str = pydantic.Field(max_length=20)
        population: int

    class Trip(pydantic.BaseModel):
        title: str = pydantic.Field(max_length=40)
        days: int
        cities: list[City] = pydantic.Field(max_length=2)

    p = parse(model=mid, messages=[{"role": "user", "content": "Plan a trip."}], response_format=Trip,
              max_tokens=200, temperature=0)
    check(p.choices[0].finish_reason == "stop" and isinstance(p.choices[0].message.parsed, Trip),
          f"parse(): {p.choices[0].message.content!r}")


# --- n, penalties, logit_bias -------------------------------------------------------------------


def t_n_choices(srv, mid, model_path):
    cl = client(srv)
    r = cl.chat.completions.create(model=mid, messages=MSGS, max_tokens=12, temperature=1.0, seed=7, n=3)
    check([c.index for c in r.choices] == [0, 1, 2], f"indices {[c.index for c in r.choices]}")
    for i in range(3):
        one = cl.chat.completions.create(model=mid, messages=MSGS, max_tokens=12, temperature=1.0, seed=7 + i)
        check(one.choices[0].message.content == r.choices[i].message.content,
              f"choice {i} is not the request with seed {7 + i}")
    check(r.usage.completion_tokens == sum(len(x) for x in [[0]] * 0) or r.usage.completion_tokens > 0, "usage")
    chunks = list(cl.chat.completions.create(model=mid, messages=MSGS, max_tokens=12, temperature=1.0, seed=7,
                                             n=3, stream=True))
    texts, finishes = ["", "", ""], [None] * 3
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
            finishes[ch.index] = ch.finish_reason or finishes[ch.index]
    check(texts == [c.message.content for c in r.choices], f"streamed choices {texts}")
    check(finishes == [c.finish_reason for c in r.choices], f"finishes {finishes}")


def t_echo(srv, mid, model_path):
    cl = client(srv)
    prompt = "Once upon a time, in a café,"
    plain = cl.completions.create(model=mid, prompt=prompt, max_tokens=8, temperature=0)
    r = cl.completions.create(model=mid, prompt=prompt, max_tokens=8, temperature=0, echo=True)
    check(r.choices[0].text == prompt + plain.choices[0].text, f"echoed text {r.choices[0].text!r}")
    check((r.usage.prompt_tokens, r.usage.completion_tokens) == (plain.usage.prompt_tokens,
                                                                  plain.usage.completion_tokens),
          f"usage {r.usage} against {plain.usage}")
    # streamed: the prompt in the first chunk, then the same completion
    chunks = [c.choices[0].text for c in cl.completions.create(model=mid, prompt=prompt, max_tokens=8,
                                                              temperature=0, echo=True, stream=True)
              if c.choices]
    check(chunks and chunks[0] == prompt and "".join(chunks) == r.choices[0].text, f"streamed {chunks}")
    # token ids: their text, special tokens included; every one of n choices
    _, _, b = http_call(srv.port, "POST", "/tokenize", {"content": "<|im_start|>user"}, ts.auth())
    ids = json.loads(b)["tokens"]
    _, _, b = http_call(srv.port, "POST", "/detokenize", {"tokens": ids}, ts.auth())
    text = json.loads(b)["content"]
    check("<|im_start|>" in text, f"the ids' text {text!r}")
    n = cl.completions.create(model=mid, prompt=ids, max_tokens=4, temperature=1.0, seed=3, n=2, echo=True)
    for i, c in enumerate(n.choices):
        one = cl.completions.create(model=mid, prompt=ids, max_tokens=4, temperature=1.0, seed=3 + i)
        check(c.text == text + one.choices[0].text, f"choice {i}: {c.text!r}")
    # echo false is the plain answer
    f = cl.completions.create(model=mid, prompt=prompt, max_tokens=8, temperature=0, echo=False)
    check(f.choices[0].text == plain.choices[0].text, "echo false changed the text")


def t_several_prompts(srv, mid, model_path):
    cl = client(srv)
    prompts = ["Once upon a time", "The capital of France is", "1, 2, 3,"]
    singles = [cl.completions.create(model=mid, prompt=p, max_tokens=6, temperature=0) for p in prompts]
    r = cl.completions.create(model=mid, prompt=prompts, max_tokens=6, temperature=0)
    check([c.index for c in r.choices] == [0, 1, 2], f"indices {[c.index for c in r.choices]}")
    check([c.text for c in r.choices] == [x.choices[0].text for x in singles], "not each prompt's own answer")
    check(r.usage.prompt_tokens == sum(x.usage.prompt_tokens for x in singles), f"prompt tokens {r.usage}")
    check(r.usage.completion_tokens == sum(x.usage.completion_tokens for x in singles), f"completion {r.usage}")
    # n per prompt: choice i is prompt i // n with seed + i % n
    rn = cl.completions.create(model=mid, prompt=prompts[:2], max_tokens=5, temperature=1.0, seed=11, n=2,
                               echo=True)
    check(len(rn.choices) == 4, f"{len(rn.choices)} choices")
    for c in rn.choices:
        p = prompts[c.index // 2]
        one = cl.completions.create(model=mid, prompt=p, max_tokens=5, temperature=1.0, seed=11 + c.index % 2)
        check(c.text == p + one.choices[0].text, f"choice {c.index}: {c.text!r}")
    # streamed, and as arrays of token ids
    texts = ["", "", ""]
    for ch in cl.completions.create(model=mid, prompt=prompts, max_tokens=6, temperature=0, stream=True):
        for c in ch.choices:
            texts[c.index] += c.text
    check(texts == [c.text for c in r.choices], f"streamed {texts}")
    ids = [json.loads(http_call(srv.port, "POST", "/tokenize", {"content": p}, ts.auth())[2])["tokens"]
           for p in prompts]
    ri = cl.completions.create(model=mid, prompt=ids, max_tokens=6, temperature=0)
    check([c.text for c in ri.choices] == [c.text for c in r.choices], "token-id prompts differ")


def t_penalties(srv, mid, model_path):
    """Greedy with penalties: every chosen token must be the best of the raw top-20
    after subtracting presence + frequency x count (tokens generated so far)."""
    cl = client(srv)
    prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
    for pres, freq in ((0.0, 1.5), (1.0, 0.0), (0.5, 0.7)):
        c = cl.completions.create(model=mid, prompt=prompt, max_tokens=24, temperature=0, logprobs=20,
                                  presence_penalty=pres, frequency_penalty=freq)
        L = c.choices[0].logprobs
        counts, checked = {}, 0
        for tok, lp, tops in zip(L.tokens, L.token_logprobs, L.top_logprobs):
            score = lambda t, v: v - (pres if counts.get(t) else 0) - freq * counts.get(t, 0)  # noqa: E731
            if tok in tops:
                best = max(score(t, v) for t, v in tops.items())
                check(score(tok, lp) >= best - 1e-4, f"presence {pres} frequency {freq}: '{tok}' chosen, "
                      f"but another top token scores {best:.4f} > {score(tok, lp):.4f}")
                checked += 1
            counts[tok] = counts.get(tok, 0) + 1
        check(checked > 10, f"only {checked} steps could be checked")
    plain = cl.completions.create(model=mid, prompt=prompt, max_tokens=24, temperature=0)
    pen = cl.completions.create(model=mid, prompt=prompt, max_tokens=24, temperature=0, frequency_penalty=2)
    check(plain.choices[0].text != pen.choices[0].text, "frequency_penalty changed nothing")


def t_logit_bias(srv, mid, model_path):
    cl = client(srv)
    _, _, b = http_call(srv.port, "POST", "/tokenize", {"content": "Hello"}, ts.auth())
    ids = json.loads(b)["tokens"]
    first = cl.completions.create(model=mid, prompt=ids, max_tokens=1, temperature=0, logprobs=1)
    tok = first.choices[0].logprobs.tokens[0]
    _, _, tb = http_call(srv.port, "POST", "/tokenize", {"content": tok}, ts.auth())
    tid = json.loads(tb)["tokens"][0]
    banned = cl.completions.create(model=mid, prompt=ids, max_tokens=1, temperature=0, logprobs=1,
                                   logit_bias={str(tid): -100})
    check(banned.choices[0].logprobs.tokens[0] != tok, f"banned token {tok!r} still chosen")
    _, _, bb = http_call(srv.port, "POST", "/tokenize", {"content": " banana"}, ts.auth())
    banana = json.loads(bb)["tokens"][-1]
    _, _, pb = http_call(srv.port, "POST", "/detokenize", {"tokens": [banana]}, ts.auth())
    piece = json.loads(pb)["content"]
    forced = cl.completions.create(model=mid, prompt=ids, max_tokens=3, temperature=0, logit_bias={str(banana): 100})
    check(forced.choices[0].text == piece * 3, f"+100 bias: {forced.choices[0].text!r}, want {piece * 3!r}")


# --- tools --------------------------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "maxLength": 30},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location", "unit"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 30}},
                   "required": ["zone"], "additionalProperties": False}}}


def valid_call(call, names):
    check(call.type == "function" and call.id.startswith("call_") and call.function.name in names, f"call {call}")
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        check(isinstance(args["location"], str) and args["unit"] in ("celsius", "fahrenheit") and len(args) == 2,
              f"arguments {args}")
    else:
        check(set(args) == {"zone"} and isinstance(args["zone"], str), f"arguments {args}")
    return args


def t_tools(binary, model, mid):
    srv = Server(binary, model, "--template", "qwen2.5", "-c", "2048")
    try:
        cl = client(srv)
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = cl.chat.completions.create(model=mid, messages=ask, tools=[WEATHER, CLOCK], tool_choice="required",
                                       max_tokens=80, temperature=0)
        ch = r.choices[0]
        check(ch.finish_reason == "tool_calls" and ch.message.tool_calls and ch.message.content is None, f"{ch}")
        for call in ch.message.tool_calls:
            valid_call(call, ("get_weather", "get_time"))
        r2 = cl.chat.completions.create(model=mid, messages=ask, tools=[WEATHER, CLOCK], max_tokens=80, temperature=0,
                                        tool_choice={"type": "function", "function": {"name": "get_time"}})
        check(r2.choices[0].message.tool_calls[0].function.name == "get_time", f"named: {r2.choices[0]}")
        valid_call(r2.choices[0].message.tool_calls[0], ("get_time",))
        chunks = list(cl.chat.completions.create(model=mid, messages=ask, tools=[WEATHER], tool_choice="required",
                                                 max_tokens=80, temperature=0, stream=True))
        deltas = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
        check(deltas and deltas[0].function.name == "get_weather", f"streamed calls {deltas}")
        check(json.loads(deltas[0].function.arguments) == json.loads(ch.message.tool_calls[0].function.arguments)
              or ch.message.tool_calls[0].function.name != "get_weather", "streamed arguments differ")
        check([c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"],
              "streamed finish reason")
        # the call and its result go back to the model; the template renders them
        call = ch.message.tool_calls[0]
        follow = ask + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'}]
        r3 = cl.chat.completions.create(model=mid, messages=follow, tools=[WEATHER, CLOCK], max_tokens=20, temperature=0)
        check(r3.usage.prompt_tokens > r.usage.prompt_tokens, "the call and its result did not reach the prompt")
        # auto: content or a valid call
        r4 = cl.chat.completions.create(model=mid, messages=ask, tools=[WEATHER], max_tokens=60, temperature=0)
        c4 = r4.choices[0]
        if c4.message.tool_calls:
            check(c4.finish_reason == "tool_calls", "auto call without its finish reason")
            valid_call(c4.message.tool_calls[0], ("get_weather",))
        else:
            check(isinstance(c4.message.content, str), f"auto: {c4}")
        # tool definitions make the prompt longer; tool_choice none leaves them out
        n_none = cl.chat.completions.create(model=mid, messages=ask, tools=[WEATHER], tool_choice="none",
                                            max_tokens=1, temperature=0).usage.prompt_tokens
        n_plain = cl.chat.completions.create(model=mid, messages=ask, max_tokens=1, temperature=0).usage.prompt_tokens
        check(n_none == n_plain and r.usage.prompt_tokens > n_plain + 50, f"prompt tokens {n_none} {n_plain} {r.usage.prompt_tokens}")
        for body, param in (({"messages": ask, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
                            ({"messages": ask, "tools": [{"type": "function"}]}, "tools[0]"),
                            ({"messages": ask, "tools": [WEATHER], "tool_choice": "required", "grammar": 'root ::= "x"'}, "tool_choice")):
            s, j = post(srv, "/v1/chat/completions", body)
            ts.error_of(s, json.dumps(j).encode(), 400, param, None, f"tools error {param}")
    finally:
        status = srv.stop()
    check(status == 0, f"exit status {status}")


# --- embeddings, routes, limits ----------------------------------------------------------------------


def t_embeddings(srv, mid, model_path):
    cl = client(srv)
    texts = ["Hello world", "The cat sat on the mat. Ünïcödé 🙂"]
    n_embd = json.loads(http_call(srv.port, "GET", "/props", headers=ts.auth())[2])["n_embd"]
    r = cl.embeddings.create(model=mid, input=texts)  # the client asks for base64 and decodes it
    check([d.index for d in r.data] == [0, 1] and all(len(d.embedding) == n_embd for d in r.data), "shape")
    for d in r.data:
        check(abs(sum(x * x for x in d.embedding) - 1) < 1e-5, "not normalised")
    j = ok_post(srv, "/v1/embeddings", {"input": texts, "encoding_format": "float"})
    check([e["embedding"] for e in j["data"]] == [list(map(float, d.embedding)) for d in r.data] or
          all(max(abs(a - b) for a, b in zip(e["embedding"], d.embedding)) < 1e-7 for e, d in zip(j["data"], r.data)),
          "float and base64 differ")
    raw = ok_post(srv, "/v1/embeddings", {"input": texts[0], "encoding_format": "base64"})
    vec = struct.unpack(f"<{n_embd}f", base64.b64decode(raw["data"][0]["embedding"]))
    check(max(abs(a - b) for a, b in zip(vec, r.data[0].embedding)) == 0, "single input differs")
    _, _, b = http_call(srv.port, "POST", "/tokenize", {"content": texts[1], "add_special": True}, ts.auth())
    ids = json.loads(b)["tokens"]
    by_ids = ok_post(srv, "/embeddings", {"input": [ids], "encoding_format": "float"})  # no /v1
    check(max(abs(a - b) for a, b in zip(by_ids["data"][0]["embedding"], r.data[1].embedding)) < 1e-7,
          "token ids and text differ")
    check(j["usage"]["prompt_tokens"] > 0, "usage")
    try:
        import numpy as np
        m = reference(model_path)
    except Skip as e:
        print(f"    embeddings: reference check skipped ({e})", flush=True)
        return
    def pooled(h):
        v = h.mean(axis=0)
        return v / np.linalg.norm(v)
    ref, q8 = pooled(ref_run(m, ids, True)), pooled(ref_run(m, ids, True, act_q8=True))
    ours = np.array(r.data[1].embedding)
    tol = 3 * float(np.abs(q8 - ref).max()) + 1e-4  # 3x the spread 8-bit activations cause
    err = float(np.abs(ours - ref).max())
    check(err <= tol, f"embedding off the float64 reference by {err:.5f} (tolerance {tol:.5f}); cosine {float(ours @ ref):.6f}")
    print(f"    embeddings: max |ours - float64 reference| {err:.5f} (tolerance {tol:.5f}), cosine {float(ours @ ref):.6f}",
          flush=True)


def t_routes_and_props(srv, mid, model_path):
    for method, path, body in (("GET", "/models", None), ("POST", "/chat/completions", {"messages": MSGS, "max_tokens": 2}),
                               ("POST", "/completions", {"prompt": "Hi", "max_tokens": 2})):
        s, _, b = http_call(srv.port, method, path, body, ts.auth({"Content-Type": "application/json"}))
        check(s == 200, f"{method} {path}: {s} {b[:200]!r}")
    s, _, b = http_call(srv.port, "GET", "/props", headers=ts.auth())
    p = json.loads(b)
    check(s == 200 and p["model"] == mid and p["n_ctx"] == 512 and p["n_vocab"] > 0 and
          "temperature" in p["default_generation_settings"], f"/props {p}")
    s, _, b = http_call(srv.port, "GET", "/props")
    check(s == 401, f"/props without the key: {s}")
    # max_tokens past the context is clamped, not refused
    j = ok_post(srv, "/v1/chat/completions", {"messages": MSGS, "max_tokens": 100000, "temperature": 0})
    u = j["usage"]
    check(u["completion_tokens"] <= 512 - u["prompt_tokens"], f"usage {u}")
    s, h, b = http_call(srv.port, "GET", "/favicon.ico")
    check(s == 200 and h["content-type"].startswith("image/svg+xml") and b.startswith(b"<svg"), "favicon")
    s, h, b = http_call(srv.port, "GET", "/assets/marked.min.js")
    if os.path.exists("/usr/share/javascript/marked/marked.min.js"):
        check(s == 200 and h["content-type"].startswith("text/javascript") and len(b) > 1000, f"marked: {s}")
    else:
        check(s == 404, f"marked missing: {s}")


BAD = [
    ("n too large", "/v1/chat/completions", {"messages": MSGS, "n": 17}, "n", "invalid_value"),
    ("presence_penalty out of range", "/v1/chat/completions", {"messages": MSGS, "presence_penalty": 3}, "presence_penalty", "invalid_value"),
    ("logit_bias bad key", "/v1/chat/completions", {"messages": MSGS, "logit_bias": {"x": 1}}, "logit_bias.x", "invalid_value"),
    ("logit_bias id out of range", "/v1/chat/completions", {"messages": MSGS, "logit_bias": {"99999999": 1}}, "logit_bias.99999999", "invalid_value"),
    ("logit_bias value", "/v1/chat/completions", {"messages": MSGS, "logit_bias": {"5": 101}}, "logit_bias.5", "invalid_value"),
    ("top_logprobs without logprobs", "/v1/chat/completions", {"messages": MSGS, "top_logprobs": 2}, "top_logprobs", "invalid_value"),
    ("top_logprobs too many", "/v1/chat/completions", {"messages": MSGS, "logprobs": True, "top_logprobs": 21}, "top_logprobs", "invalid_value"),
    ("completions logprobs too many", "/v1/completions", {"prompt": "x", "logprobs": 21}, "logprobs", "invalid_value"),
    ("echo with logprobs", "/v1/completions", {"prompt": "x", "echo": True, "logprobs": 2}, "echo", "unsupported_parameter"),
    ("echo not a boolean", "/v1/completions", {"prompt": "x", "echo": "yes"}, "echo", "invalid_type"),
    ("response_format type", "/v1/chat/completions", {"messages": MSGS, "response_format": {"type": "yaml"}}, "response_format.type", "invalid_value"),
    ("json_schema without schema", "/v1/chat/completions", {"messages": MSGS, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema", "missing_required_parameter"),
    ("json_schema pattern", "/v1/chat/completions", {"messages": MSGS, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}}}, "response_format.json_schema.schema", "invalid_value"),
    ("grammar syntax", "/v1/chat/completions", {"messages": MSGS, "grammar": "root ::= ("}, "grammar", "invalid_value"),
    ("grammar left recursion", "/v1/completions", {"prompt": "x", "grammar": 'root ::= root "a" | "a"'}, "grammar", "invalid_value"),
    ("grammar and response_format", "/v1/chat/completions", {"messages": MSGS, "grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "grammar", "invalid_value"),
    ("tools with chatml", "/v1/chat/completions", {"messages": MSGS, "tools": [WEATHER]}, "tools", "unsupported_parameter"),
    ("tool_choice without tools", "/v1/chat/completions", {"messages": MSGS, "tool_choice": "required"}, "tool_choice", "invalid_value"),
    ("functions", "/v1/chat/completions", {"messages": MSGS, "functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
    ("embeddings without input", "/v1/embeddings", {"model": "x"}, "input", "missing_required_parameter"),
    ("embeddings dimensions", "/v1/embeddings", {"input": "x", "dimensions": 3}, "dimensions", "unsupported_parameter"),
    ("embeddings format", "/v1/embeddings", {"input": "x", "encoding_format": "hex"}, "encoding_format", "invalid_value"),
    ("embeddings bad item", "/v1/embeddings", {"input": ["a", 5]}, "input[1]", "invalid_type"),
    ("embeddings too long", "/v1/embeddings", {"input": "word " * 2000}, "input", "context_length_exceeded"),
]


def t_bad_requests(srv, mid, model_path):
    failures = []
    for what, path, body, param, code in BAD:
        try:
            s, _, b = http_call(srv.port, "POST", path, body, ts.auth({"Content-Type": "application/json"}))
            ts.error_of(s, b, 400, param, code, what)
        except Exception as e:
            failures.append(str(e))
    check(not failures, "; ".join(failures))


# --- cancellation -------------------------------------------------------------------------------------


def long_prompt(srv, seconds, n_ctx):
    """A prompt this server takes at least `seconds` to read (from a warm-up request's speed)."""
    j = ok_post(srv, "/v1/completions", {"prompt": "word " * 60, "max_tokens": 1})
    t = j["timings"]
    n = int(t["prompt_n"] / max(t["prompt_ms"] / 1e3, 1e-3) * seconds)
    if n > n_ctx - 50:
        raise Skip(f"the prompt would need {n} tokens to take {seconds} s; the context holds {n_ctx}")
    return "word " * max(n, 100)


def t_cancel_prompt(binary, model):
    """A client that leaves, --timeout and shutdown each stop a long prompt between
    two chunks of 16 tokens (-b 16). The context is longer than the model's 8192
    tokens: with the KV cache faulted in at load, the warm-up reads fast enough
    that 8 s of prompt came to more than 8192 tokens, and the test skipped."""
    srv = Server(binary, model, "-b", "16", "-c", "16384", "-np", "1")
    slow = None
    try:
        text = long_prompt(srv, 8, 16384)
        # a client that leaves during the prompt
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        body = json.dumps({"prompt": text, "max_tokens": 4}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        wait_for(lambda: ts.metrics_noauth(srv.port)["strata_requests_in_flight"] == 1, 5, "the request running")
        time.sleep(0.5)
        sock.close()
        t0 = time.time()
        wait_for(lambda: ts.metrics_noauth(srv.port)["strata_requests_in_flight"] == 0, 3, "the prompt stopping")
        left = time.time() - t0
        m = ts.metrics_noauth(srv.port)
        check(m["strata_requests_cancelled_total"] == 1 and m["strata_requests_failed_total"] == 0, f"metrics {m}")
        check("client disconnected" in srv.stderr(), "the disconnect was not logged as such")
        # shutdown during the prompt
        def doomed():  # its connection closes under it at shutdown
            try:
                http_call(srv.port, "POST", "/v1/completions", {"prompt": text, "max_tokens": 4})
            except (OSError, http.client.HTTPException):
                pass

        th = threading.Thread(target=doomed)
        th.start()
        wait_for(lambda: ts.metrics_noauth(srv.port)["strata_requests_in_flight"] == 1, 5, "the request running")
        time.sleep(0.3)
        t0 = time.time()
        status = srv.stop()
        stop_s = time.time() - t0
        check(status == 0 and stop_s < 2.5, f"shutdown during a prompt: {status} after {stop_s:.1f} s")
        th.join(10)
        # --timeout during the prompt: 503 within the limit plus a chunk
        slow = Server(binary, model, "-b", "16", "-c", "16384", "-np", "1", "--timeout", "3")
        t0 = time.time()
        s, _, b = http_call(slow.port, "POST", "/v1/completions", {"prompt": text, "max_tokens": 4})
        took = time.time() - t0
        ts.error_of(s, b, 503, None, "timeout", "a prompt past --timeout")
        check(took < 3 + 1.5, f"the timed-out request took {took:.1f} s (limit 3 s)")
        print(f"    cancel: a long prompt stopped {left * 1e3:.0f} ms after its client left; shutdown took "
              f"{stop_s:.1f} s; a timed-out one answered after {took:.1f} s (limit 3 s)", flush=True)
    finally:
        for x in (srv, slow):
            if x and x.proc.poll() is None:
                x.stop()


def t_timeout_partial(binary, model, mid):
    """A request that times out after producing tokens returns them, finish_reason "timeout"."""
    srv = Server(binary, model, "--timeout", "2")
    try:
        cl = client(srv)
        counting = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
        # the end tokens (<|endoftext|> 0, <|im_end|> 2) banned: the answer runs until the limit
        c = cl.chat.completions.create(model=mid, messages=[{"role": "user", "content": "Count to 500."}],
                                       max_tokens=500, temperature=0, logit_bias={"0": -100, "2": -100})
        check(c.choices[0].finish_reason == "timeout" and c.choices[0].message.content, f"chat {c.choices[0]}")
        t0 = time.time()
        r = cl.completions.create(model=mid, prompt=counting, max_tokens=500, temperature=0)
        took = time.time() - t0
        check(r.choices[0].finish_reason == "timeout" and r.choices[0].text and r.usage.completion_tokens > 0,
              f"{r.choices[0].finish_reason!r} {r.usage}")
        check(took < 2 + 1.5, f"took {took:.1f} s")
        # the same prompt again: cached, so tokens come before the limit
        ev = stream_events(srv, "/v1/completions", {"prompt": counting, "max_tokens": 500, "temperature": 0})
        finishes = [e["choices"][0]["finish_reason"] for e in ev[:-1] if e.get("choices")]
        check(ev[-1] == "[DONE]" and finishes[-1] == "timeout", f"stream ends {ev[-2:]}")
        m = ts.metrics_noauth(srv.port)
        check(m["strata_requests_failed_total"] == 3, f"timeouts counted {m['strata_requests_failed_total']}")
    finally:
        status = srv.stop()
    check(status == 0, f"exit status {status}")


# --- the chat page ----------------------------------------------------------------------


def chrome():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise Skip("the python package 'selenium' is not installed (pip install selenium)")
    chromium = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(p)), None)
    driver = next((p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if os.path.exists(p)), None)
    if not chromium or not driver:
        raise Skip("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    o = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,800"):
        o.add_argument(a)
    o.binary_location = chromium
    return webdriver.Chrome(service=Service(driver), options=o)


MARKDOWN = ("# Title\n\nSome **bold** and `code` <script>window.pwned=1</script> "
            "<img src=x onerror=\"window.pwned=2\">\n\n```python\nprint('<b>&amp;')\n```\n\n"
            "[bad](javascript:window.pwned=3) [good](https://example.com/x)")


def t_page_features(binary, model, mid):
    """The chat page in headless Chromium, at 1200 and 400 px: Markdown rendered
    safely, settings, saved conversations, the context notice, clear errors."""
    from selenium.webdriver.common.by import By
    srv = Server(binary, model, "--api-key", KEY)
    d = chrome()
    shots = os.environ.get("STRATA_BUILD", "/tmp")
    try:
        css = lambda sel: d.find_elements(By.CSS_SELECTOR, sel)  # noqa: E731
        last = lambda sel: (css(sel) or [None])[-1]  # noqa: E731

        def wait_answer(n):
            wait_for(lambda: len(css(".msg.assistant")) >= n and css(".msg.assistant")[n - 1].get_attribute("data-done"),
                     60, f"answer {n} finishing")

        d.get(srv.base + "/")
        check(d.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href").endswith("/favicon.ico"), "favicon link")
        # a wrong key: the page says so
        wait_for(lambda: d.find_element(By.ID, "key-row").is_displayed(), 10, "the key prompt")
        d.find_element(By.ID, "key").send_keys("wrong")
        d.find_element(By.ID, "save-key").click()
        d.find_element(By.ID, "input").send_keys("Hello\n")
        wait_for(lambda: css(".msg.error"), 10, "an error message")
        check("API key" in last(".msg.error").text, f"wrong key message: {last('.msg.error').text!r}")
        d.find_element(By.ID, "key").clear()
        d.find_element(By.ID, "key").send_keys(KEY)
        d.find_element(By.ID, "save-key").click()
        wait_for(lambda: d.find_element(By.ID, "model").text == mid, 10, "the model name")
        # Markdown, safely
        check(d.execute_script("return typeof marked") == "function" or d.execute_script("return typeof marked") == "object",
              "marked did not load")
        html = d.execute_script("const e = strataRender(arguments[0]); document.body.appendChild(e); return e.innerHTML;", MARKDOWN)
        time.sleep(0.3)
        check(d.execute_script("return window.pwned === undefined"), "HTML in an answer ran")
        check("<h1>Title</h1>" in html and "<strong>bold</strong>" in html and "<code>code</code>" in html, f"markdown: {html[:300]}")
        check("<script" not in html and "<img" not in html and "&lt;script&gt;" in html, f"raw HTML not escaped: {html}")
        check('class="language-python"' in html and "print('&lt;b&gt;&amp;amp;')" in html, f"code block: {html}")
        check("javascript:" not in html and 'href="https://example.com/x"' in html and 'rel="noopener noreferrer"' in html,
              f"links: {html}")
        d.execute_script("document.body.lastChild.remove()")
        # settings: they shape the request and survive a reload
        d.find_element(By.ID, "open-settings").click()
        for id_, value in (("temperature", "0"), ("max-tokens", "4"), ("system", "Reply in one word.")):
            el = d.find_element(By.ID, id_)
            el.clear()
            el.send_keys(value)
        d.find_element(By.ID, "close-settings").click()
        n_before = len(css(".msg.assistant"))
        d.find_element(By.ID, "input").send_keys("Name a fruit.\n")
        wait_answer(n_before + 1)
        tps = d.find_element(By.ID, "tps").text
        check(tps.split()[0].isdigit() and int(tps.split()[0]) <= 4, f"max tokens 4 not applied: {tps!r}")
        d.refresh()
        wait_for(lambda: d.find_element(By.ID, "model").text == mid, 10, "the model name after a reload")
        d.find_element(By.ID, "open-settings").click()
        check(d.find_element(By.ID, "max-tokens").get_attribute("value") == "4" and
              d.find_element(By.ID, "system").get_attribute("value") == "Reply in one word.", "settings not kept")
        d.find_element(By.ID, "close-settings").click()
        # the conversation was saved; picking it shows it again
        convs = css("#sidebar .conv")
        check(len(convs) == 1 and "fruit" in convs[0].text, f"saved conversations {[c.text for c in convs]}")
        convs[0].click()
        check(len(css(".msg.user")) == 1 and "fruit" in css(".msg.user")[0].text and len(css(".msg.assistant")) == 1,
              "the saved conversation did not come back")
        # two long messages do not fit -c 512 together: the oldest turn is left out, with a notice
        long_text = "Summarize: " + "the quick brown fox jumps over the lazy dog " * 30
        for k in range(2):
            d.find_element(By.ID, "input").send_keys(long_text + "\n")
            wait_answer(2 + k)
        check(any("left out" in n.text for n in css(".msg.notice")), f"no notice: {[n.text for n in css('.msg.notice')]}")
        check(not css(".msg.error"), f"errors: {[e.text for e in css('.msg.error')]}")
        d.save_screenshot(os.path.join(shots, "test_server_page_desktop.png"))
        # 400 px wide: nothing overflows, the conversation list is behind the menu button
        d.set_window_size(400, 800)
        time.sleep(0.5)
        width = d.execute_script("return document.documentElement.clientWidth")
        check(d.execute_script("return document.documentElement.scrollWidth") <= width + 1, "the page overflows at 400 px")
        check(d.find_element(By.ID, "send").is_displayed() and d.find_element(By.ID, "input").is_displayed(), "controls hidden")
        check(not d.find_element(By.ID, "sidebar").is_displayed(), "the list takes the narrow screen")
        d.find_element(By.ID, "menu").click()
        check(d.find_element(By.ID, "sidebar").is_displayed(), "the menu does not open the list")
        d.save_screenshot(os.path.join(shots, "test_server_page_narrow.png"))
        d.find_element(By.ID, "menu").click()
        # the server goes away: the page says so
        srv.stop()
        d.find_element(By.ID, "input").send_keys("Are you there?\n")
        wait_for(lambda: css(".msg.error"), 10, "an error message")
        check("Cannot reach the server" in last(".msg.error").text, f"server gone: {last('.msg.error').text!r}")
        print(f"    page: screenshots {shots}/test_server_page_desktop.png and _narrow.png", flush=True)
    finally:
        d.quit()
        if srv.proc.poll() is None:
            srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("STRATA_BIN", "build/strata"))
    ap.add_argument("--model", default=os.environ.get("STRATA_TEST_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--only", help="run only the tests whose name contains this")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        ts.report("server api tests", None, f"model {args.model} not found (make model)")
        print(f"RESULT {ts.RESULTS['pass']} {ts.RESULTS['fail']} {ts.RESULTS['skip']}")
        return 0
    if not os.access(args.bin, os.X_OK):
        ts.report("server api tests", False, f"{args.bin} is not built")
        print(f"RESULT {ts.RESULTS['pass']} {ts.RESULTS['fail']} {ts.RESULTS['skip']}")
        return 1
    t_start = time.time()
    mid = os.path.basename(args.model)[:-5]
    want = lambda name: not args.only or args.only in name  # noqa: E731
    srv = Server(args.bin, args.model, "--api-key", KEY)
    try:
        for name, fn in [("logprobs", t_logprobs), ("json_modes", t_json_modes), ("n_choices", t_n_choices),
                         ("echo", t_echo), ("several_prompts", t_several_prompts),
                         ("penalties", t_penalties), ("logit_bias", t_logit_bias), ("embeddings", t_embeddings),
                         ("routes_and_props", t_routes_and_props), ("bad_requests", t_bad_requests)]:
            if want(name):
                run_test(name, fn, srv, mid, args.model)
    finally:
        srv.stop()
    for name, fn, extra in [("tools", t_tools, (mid,)), ("cancel_prompt", t_cancel_prompt, ()),
                            ("timeout_partial", t_timeout_partial, (mid,)), ("page_features", t_page_features, (mid,))]:
        if want(name):
            run_test(name, fn, args.bin, args.model, *extra)
    print(f"  ({time.time() - t_start:.1f} s)")
    print(f"RESULT {ts.RESULTS['pass']} {ts.RESULTS['fail']} {ts.RESULTS['skip']}")
    return 1 if ts.RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
