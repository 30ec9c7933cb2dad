#!/usr/bin/env python3
"""`strata serve` tested from the outside, as its users meet it.

- the official `openai` client (PyPI) for chat and completions, plain and
  streaming, with usage counts, stop strings, seeds and prompt reuse;
- raw HTTP for every error: malformed and hostile bodies, wrong types and
  ranges, unknown routes and methods, API keys, body and context limits, the
  request timeout, a full queue, idle connections, a fuzzed request path;
- a client that disconnects mid-stream (and one that leaves while queued): the
  generation stops and the server keeps serving;
- a bounded load test (8 concurrent clients, a fixed number of requests each)
  that must lose no response;
- the chat page in headless Chromium (selenium + Debian's chromium-driver);
- start-up (/health 503 while loading, a failed load) and shutdown on SIGTERM.

Prints "  ok NAME", "  FAIL NAME: why" or "  skip NAME: why" per test and
"RESULT passed failed skipped" at the end; a skip is neither a pass nor a
failure. Random inputs use a printed seed (STRATA_SEED repeats a run).

    python3 tests/test_server.py --bin build/strata --model MODEL
    python3 tests/test_server.py --load-only --clients 8 --requests 8 --max-tokens 64
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

KEY = "test-key-0123"
# STRATA_TEST_SCALE=small: the server is a sanitizer build, ten to twenty times
# slower. Every wait and time limit is SLOW times longer and the load test
# sends fewer, shorter requests; what each test checks stays the same.
SMALL = os.environ.get("STRATA_TEST_SCALE") == "small"
SLOW = 10 if SMALL else 1
RESULTS = {"pass": 0, "fail": 0, "skip": 0}


def report(name, ok, why=""):
    if ok is None:
        RESULTS["skip"] += 1
        print(f"  skip {name}: {why}", flush=True)
        return
    RESULTS["pass" if ok else "fail"] += 1
    print(f"  {'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + why}", flush=True)


class Skip(Exception):
    pass


def run_test(name, fn, *args):
    try:
        fn(*args)
        report(name, True)
    except Skip as e:
        report(name, None, str(e))
    except Exception as e:  # an assertion or a client error: the test failed
        report(name, False, f"{type(e).__name__}: {e}")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


# --- the server process -------------------------------------------------------------


class Server:
    """A `strata serve` on a free loopback port; its stderr goes to a file."""

    def __init__(self, binary, model, *extra, wait_ready=True):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="strata-serve-", suffix=".log", delete=False)
        args = [binary, "serve", "-m", model, "--port", "0", "-c", "512", "-t", "1", *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None
        deadline = time.time() + 20 * SLOW
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", self.stderr())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.stderr()}")
            else:
                time.sleep(0.05)
        check(self.port, f"no 'listening on' line: {self.stderr()}")
        self.base = f"http://127.0.0.1:{self.port}"
        while wait_ready and time.time() < deadline:
            if http_call(self.port, "GET", "/health")[0] == 200:
                return
            time.sleep(0.05)
        check(not wait_ready, f"not ready within {20 * SLOW} s")

    def stderr(self):
        with open(self.log.name) as f:
            return f.read()

    def stop(self, timeout=10):
        """SIGTERM; returns the exit status (killing it after timeout · SLOW)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "hung"
        os.unlink(self.log.name)
        return self.proc.returncode


def http_call(port, method, path, body=None, headers=None, timeout=60):
    """One request on a fresh connection: (status, headers dict, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout * SLOW)
    try:
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def auth(extra=None):
    h = {"Authorization": f"Bearer {KEY}"}
    h.update(extra or {})
    return h


def metrics(port):
    status, _, body = http_call(port, "GET", "/metrics", headers=auth())
    check(status == 200, f"/metrics: {status}")
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def wait_for(pred, timeout, what):
    timeout *= SLOW
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def sse_events(resp):
    """Yields the data of each SSE event of an http.client response, as bytes."""
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            return
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if event.startswith(b"data: "):
                yield event[6:]


def open_stream(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60 * SLOW)
    c.request("POST", "/v1/chat/completions" if "messages" in body else "/v1/completions",
              body=json.dumps(body).encode(), headers=auth({"Content-Type": "application/json"}))
    r = c.getresponse()
    check(r.status == 200, f"stream status {r.status}")
    check(r.getheader("Content-Type", "").startswith("text/event-stream"), "not an event stream")
    return c, r


# --- the openai client ------------------------------------------------------------------


def client(srv):
    try:
        import openai
    except ImportError:
        raise Skip("the python package 'openai' is not installed (pip install openai)")
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=60 * SLOW)


MSGS = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name three colors."}]


def t_openai_chat(srv, model_id):
    cl = client(srv)
    t0 = time.time()
    r = cl.chat.completions.create(model=model_id, messages=MSGS, max_tokens=16, temperature=0)
    check(r.id.startswith("chatcmpl-") and r.object == "chat.completion", f"id/object {r.id} {r.object}")
    check(abs(r.created - t0) < 60, f"created {r.created}")
    check(r.model == model_id, f"model {r.model}")
    c = r.choices[0]
    check(c.message.role == "assistant" and isinstance(c.message.content, str) and c.message.content,
          f"message {c.message}")
    check(c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason}")
    u = r.usage
    check(0 < u.completion_tokens <= 16 and u.prompt_tokens > 10, f"usage {u}")
    check(u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage {u}")
    check(c.finish_reason == "stop" or u.completion_tokens == 16, "length without 16 tokens")


def t_openai_chat_stream(srv, model_id):
    cl = client(srv)
    plain = cl.chat.completions.create(model=model_id, messages=MSGS, max_tokens=20, temperature=0)
    stream = cl.chat.completions.create(model=model_id, messages=MSGS, max_tokens=20, temperature=0,
                                        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    check(len(chunks) >= 3, f"{len(chunks)} chunks")
    check(chunks[0].choices[0].delta.role == "assistant", "first chunk has no role")
    check(len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-"), "ids differ")
    check(all(c.object == "chat.completion.chunk" for c in chunks), "object")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check(text == plain.choices[0].message.content, f"stream {text!r} != plain {plain.choices[0].message.content!r}")
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    check(finishes == [plain.choices[0].finish_reason], f"finish reasons {finishes}")
    check(chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens,
          f"usage chunk {chunks[-1]}")


def t_openai_completions(srv, model_id):
    cl = client(srv)
    r = cl.completions.create(model=model_id, prompt="The capital of France is", max_tokens=12, temperature=0)
    check(r.id.startswith("cmpl-") and r.object == "text_completion", f"id/object {r.id} {r.object}")
    check(r.choices[0].text and r.usage.completion_tokens <= 12, f"{r}")
    s = cl.completions.create(model=model_id, prompt="The capital of France is", max_tokens=12,
                              temperature=0, stream=True)
    chunks = list(s)
    text = "".join(c.choices[0].text for c in chunks)
    check(text == r.choices[0].text, f"stream {text!r} != plain {r.choices[0].text!r}")
    check(chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason, "finish reason")
    # token ids as the prompt give the same answer as the text
    _, _, body = http_call(srv.port, "POST", "/tokenize", {"content": "The capital of France is"}, auth())
    ids = json.loads(body)["tokens"]
    r2 = cl.completions.create(model=model_id, prompt=ids, max_tokens=12, temperature=0)
    check(r2.choices[0].text == r.choices[0].text, "token-id prompt differs")


def t_length_and_seed(srv, model_id):
    cl = client(srv)
    r = cl.chat.completions.create(model=model_id, messages=MSGS, max_tokens=3, temperature=0)
    check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3, f"{r}")
    a = cl.completions.create(model=model_id, prompt="Once upon a time", max_tokens=16, temperature=1.0, seed=42)
    b = cl.completions.create(model=model_id, prompt="Once upon a time", max_tokens=16, temperature=1.0, seed=42)
    check(a.choices[0].text == b.choices[0].text, "the same seed gave different text")
    # seed -1 asks for a random seed (llama.cpp's convention), not the fixed value -1: at
    # temperature 2 over the whole vocabulary two 16-token draws agree with negligible odds
    wild = dict(model=model_id, prompt="Once upon a time", max_tokens=16, temperature=2.0, top_p=1.0, seed=-1,
                extra_body={"top_k": 0, "min_p": 0})
    c, d = cl.completions.create(**wild), cl.completions.create(**wild)
    check(c.choices[0].text != d.choices[0].text, f"seed -1 gave the same text twice: {c.choices[0].text!r}")


def t_stop_strings(srv, model_id):
    cl = client(srv)
    prompt = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    ref = cl.chat.completions.create(model=model_id, messages=prompt, max_tokens=40, temperature=0)
    text = ref.choices[0].message.content
    check(len(text) > 12, f"reference too short: {text!r}")
    stop = text[6:9]  # a piece from the middle, possibly spanning tokens
    want = text[:text.index(stop)]
    for stream in (False, True):
        r = cl.chat.completions.create(model=model_id, messages=prompt, max_tokens=40, temperature=0,
                                       stop=[stop, "never-seen-stop"], stream=stream)
        if stream:
            chunks = list(r)
            got = "".join(c.choices[0].delta.content or "" for c in chunks)
            finish = chunks[-1].choices[0].finish_reason
        else:
            got, finish = r.choices[0].message.content, r.choices[0].finish_reason
        check(got == want and finish == "stop", f"stream={stream}: {got!r} (want {want!r}), {finish}")


def t_prompt_reuse(srv, model_id):
    cl = client(srv)
    before = metrics(srv.port)["strata_prompt_tokens_cached_total"]
    conv = [{"role": "user", "content": "Write one sentence about the sea."}]
    r1 = cl.chat.completions.create(model=model_id, messages=conv, max_tokens=16, temperature=0)
    conv += [{"role": "assistant", "content": r1.choices[0].message.content},
             {"role": "user", "content": "Now one about mountains."}]
    r2 = cl.chat.completions.create(model=model_id, messages=conv, max_tokens=8, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    check(cached >= r1.usage.prompt_tokens, f"follow-up reused {cached} tokens, first prompt had {r1.usage.prompt_tokens}")
    after = metrics(srv.port)["strata_prompt_tokens_cached_total"]
    check(after - before >= cached, f"metrics cached {before} -> {after}")


def t_utf8_stream(srv, model_id):
    """Characters that tokens split in two never reach a chunk half done."""
    body = {"prompt": "😀🎉🚀 emoji party: 🎈🎂🍰😀🎉🚀🎈", "max_tokens": 24, "temperature": 0}
    _, _, plain = http_call(srv.port, "POST", "/v1/completions", body, auth())
    want = json.loads(plain)["choices"][0]["text"]
    _, r = open_stream(srv.port, dict(body, stream=True))
    got = ""
    for data in sse_events(r):
        if data == b"[DONE]":
            break
        piece = json.loads(data.decode("utf-8"))["choices"][0]["text"]  # strict UTF-8
        check("\ufffd" not in piece, f"a replacement character in {piece!r}")
        got += piece
    check(got == want, f"stream {got!r} != plain {want!r}")
    # the test means something only if the answer has characters split across tokens
    _, _, tb = http_call(srv.port, "POST", "/tokenize", {"content": want, "with_pieces": True}, auth())
    split = [t for t in json.loads(tb)["tokens"] if isinstance(t["piece"], list)]
    if not split:
        raise Skip(f"the answer {want!r} has no character split across tokens: nothing was at stake")


def t_tokenize(srv, model_id):
    text = "Hello, wörld! 😀"
    s, _, b = http_call(srv.port, "POST", "/tokenize", {"content": text}, auth())
    ids = json.loads(b)["tokens"]
    check(s == 200 and ids and all(isinstance(i, int) for i in ids), f"{s} {b[:200]}")
    s, _, b = http_call(srv.port, "POST", "/detokenize", {"tokens": ids}, auth())
    check(s == 200 and json.loads(b)["content"] == text, f"{s} {b[:200]}")
    s, _, b = http_call(srv.port, "POST", "/detokenize", {"tokens": ids[-1:]}, auth())
    check(s == 200, f"half a character: {s}")  # sanitized, still valid JSON


def t_endpoints(srv, model_id):
    s, h, b = http_call(srv.port, "GET", "/health")
    check(s == 200 and json.loads(b) == {"status": "ok"}, f"health {s} {b}")
    s, h, b = http_call(srv.port, "GET", "/")
    check(s == 200 and h["content-type"].startswith("text/html") and b"<title>Strata chat" in b, "page")
    s, h, b = http_call(srv.port, "GET", f"/v1/models/{model_id}", headers=auth())
    check(s == 200 and json.loads(b)["id"] == model_id, f"model {s}")
    m = metrics(srv.port)
    for name in ("strata_requests_total", "strata_prompt_tokens_total", "strata_generated_tokens_total",
                 "strata_generation_tokens_per_second", "strata_requests_in_flight", "strata_requests_queued"):
        check(name in m, f"/metrics has no {name}")
    check(m["strata_generated_tokens_total"] > 0, "no generated tokens counted")


def error_of(status, body, want_status, want_param=None, want_code=None, what=""):
    check(status == want_status, f"{what}: status {status}, want {want_status}: {body[:300]!r}")
    e = json.loads(body)["error"]
    check(isinstance(e["message"], str) and e["message"] and isinstance(e["type"], str)
          and "param" in e and "code" in e, f"{what}: error object {e}")
    if want_param is not None:
        check(e["param"] == want_param, f"{what}: param {e['param']!r}, want {want_param!r}")
    if want_code is not None:
        check(e["code"] == want_code, f"{what}: code {e['code']!r}, want {want_code!r}")


USER = [{"role": "user", "content": "hi"}]
BAD_REQUESTS = [
    # (what, path, body, status, param, code)
    ("empty body", "/v1/chat/completions", b"", 400, None, "invalid_json"),
    ("malformed JSON", "/v1/chat/completions", b'{"messages": [', 400, None, "invalid_json"),
    ("trailing text", "/v1/chat/completions", b'{"messages": []} x', 400, None, "invalid_json"),
    ("not an object", "/v1/chat/completions", b"[1, 2]", 400, None, "invalid_json"),
    ("deeply nested", "/v1/chat/completions", b"[" * 20000 + b"]" * 20000, 400, None, "invalid_json"),
    ("nested in a field", "/v1/chat/completions", b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, None, "invalid_json"),
    ("non-UTF-8", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None, "invalid_json"),
    ("NUL byte", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a\x00b"}]}', 400, None, "invalid_json"),
    ("NUL escape", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}', 400, None, None),
    ("lone surrogate", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 400, None, "invalid_json"),
    ("no messages", "/v1/chat/completions", {"model": "x"}, 400, "messages", "missing_required_parameter"),
    ("empty messages", "/v1/chat/completions", {"messages": []}, 400, "messages", "invalid_value"),
    ("messages not an array", "/v1/chat/completions", {"messages": "hi"}, 400, "messages", "invalid_type"),
    ("message not an object", "/v1/chat/completions", {"messages": [1]}, 400, "messages[0]", "invalid_type"),
    ("unknown role", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role", "invalid_value"),
    ("tool role", "/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, 400, "messages[0].role", "invalid_value"),
    ("role not a string", "/v1/chat/completions", {"messages": [{"role": 5, "content": "x"}]}, 400, "messages[0].role", "invalid_type"),
    ("no content", "/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages[0].content", "missing_required_parameter"),
    ("content a number", "/v1/chat/completions", {"messages": [{"role": "user", "content": 7}]}, 400, "messages[0].content", "invalid_type"),
    ("image part", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400, "messages[0].content[0]", "unsupported_parameter"),
    ("temperature a string", "/v1/chat/completions", {"messages": USER, "temperature": "hot"}, 400, "temperature", "invalid_type"),
    ("temperature too high", "/v1/chat/completions", {"messages": USER, "temperature": 7}, 400, "temperature", "invalid_value"),
    ("top_p negative", "/v1/chat/completions", {"messages": USER, "top_p": -0.5}, 400, "top_p", "invalid_value"),
    ("max_tokens zero", "/v1/chat/completions", {"messages": USER, "max_tokens": 0}, 400, "max_tokens", "invalid_value"),
    ("max_tokens negative", "/v1/chat/completions", {"messages": USER, "max_tokens": -5}, 400, "max_tokens", "invalid_value"),
    ("max_tokens huge", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e999}', 400, "max_tokens", None),
    ("max_tokens fractional", "/v1/chat/completions", {"messages": USER, "max_tokens": 2.5}, 400, "max_tokens", "invalid_type"),
    ("max_tokens a bool", "/v1/chat/completions", {"messages": USER, "max_tokens": True}, 400, "max_tokens", "invalid_type"),
    ("seed huge", "/v1/chat/completions", {"messages": USER, "seed": 10**30}, 400, "seed", "invalid_value"),
    ("stream a string", "/v1/chat/completions", {"messages": USER, "stream": "yes"}, 400, "stream", "invalid_type"),
    ("stop a number", "/v1/chat/completions", {"messages": USER, "stop": 5}, 400, "stop", "invalid_type"),
    ("stop empty string", "/v1/chat/completions", {"messages": USER, "stop": [""]}, 400, "stop[0]", "invalid_value"),
    ("too many stops", "/v1/chat/completions", {"messages": USER, "stop": ["a"] * 17}, 400, "stop", "invalid_value"),
    ("n = 0", "/v1/chat/completions", {"messages": USER, "n": 0}, 400, "n", "invalid_value"),
    ("tools", "/v1/chat/completions", {"messages": USER, "tools": [{"type": "function"}]}, 400, "tools[0]", "invalid_value"),
    ("model a number", "/v1/chat/completions", {"messages": USER, "model": 3}, 400, "model", "invalid_type"),
    ("chat_template_kwargs a number", "/v1/chat/completions", {"messages": USER, "chat_template_kwargs": 1}, 400, "chat_template_kwargs", "invalid_type"),
    ("enable_thinking a string", "/v1/chat/completions", {"messages": USER, "chat_template_kwargs": {"enable_thinking": "no"}}, 400, "chat_template_kwargs.enable_thinking", "invalid_type"),
    ("no prompt", "/v1/completions", {"max_tokens": 3}, 400, "prompt", "missing_required_parameter"),
    ("prompt an object", "/v1/completions", {"prompt": {"a": 1}}, 400, "prompt", "invalid_type"),
    ("token id out of range", "/v1/completions", {"prompt": [1, 99999999]}, 400, "prompt[1]", "invalid_value"),
    ("token id negative", "/v1/completions", {"prompt": [-1]}, 400, "prompt[0]", "invalid_value"),
    ("too many prompts", "/v1/completions", {"prompt": ["a"] * 17}, 400, "prompt", "invalid_value"),
    ("an empty prompt of several", "/v1/completions", {"prompt": ["a", ""]}, 400, "prompt[1]", "invalid_value"),
    ("a prompt of several a number", "/v1/completions", {"prompt": ["a", 5]}, 400, "prompt[1]", "invalid_type"),
    ("a bad id in a prompt of several", "/v1/completions", {"prompt": [[1], [2, -3]]}, 400, "prompt[1][1]", "invalid_value"),
    ("one of several prompts beyond the context", "/v1/completions", {"prompt": ["a", "word " * 2000]}, 400, "prompt[1]", "context_length_exceeded"),
    ("prompt beyond the context", "/v1/completions", {"prompt": "word " * 2000}, 400, "prompt", "context_length_exceeded"),
    ("messages beyond the context", "/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 2000}]}, 400, "messages", "context_length_exceeded"),
    ("tokenize without content", "/tokenize", {"text": "x"}, 400, "content", "missing_required_parameter"),
    ("detokenize bad id", "/detokenize", {"tokens": [1.5]}, 400, "tokens[0]", "invalid_type"),
]


def t_bad_requests(srv, model_id):
    failures = []
    for what, path, body, status, param, code in BAD_REQUESTS:
        try:
            s, _, b = http_call(srv.port, "POST", path, body, auth({"Content-Type": "application/json"}))
            error_of(s, b, status, param, code, what)
        except Exception as e:
            failures.append(str(e))
    check(not failures, "; ".join(failures))


def t_routes_and_keys(srv, model_id):
    s, h, b = http_call(srv.port, "GET", "/v1/nothing", headers=auth())
    error_of(s, b, 404, None, "unknown_url", "unknown route")
    s, h, b = http_call(srv.port, "GET", "/v1/chat/completions", headers=auth())
    error_of(s, b, 405, None, "method_not_allowed", "GET on a POST route")
    check(h.get("allow") == "POST", f"Allow {h.get('allow')}")
    s, h, b = http_call(srv.port, "DELETE", "/health")
    error_of(s, b, 405, None, "method_not_allowed", "DELETE /health")
    s, h, b = http_call(srv.port, "GET", "/v1/models/other", headers=auth())
    error_of(s, b, 404, "model", "model_not_found", "unknown model")
    for what, headers in (("no key", {}), ("wrong key", {"Authorization": "Bearer nope"}),
                          ("not bearer", {"Authorization": f"Basic {KEY}"})):
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/metrics")):
            s, h, b = http_call(srv.port, method, path, {"messages": USER} if method == "POST" else None, headers)
            error_of(s, b, 401, None, "invalid_api_key", f"{what} {path}")
            check(h.get("www-authenticate") == "Bearer", "no WWW-Authenticate")
    check(http_call(srv.port, "GET", "/health")[0] == 200, "/health needs no key")


def t_body_limits(srv, model_id):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 300000}]}).encode()
    s, _, b = http_call(srv.port, "POST", "/v1/chat/completions", big, auth())
    error_of(s, b, 413, None, "request_too_large", "Content-Length over --max-body")
    # no Content-Length (chunked): past the limit the server closes the connection
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10 * SLOW)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                 + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    answer = b""
    try:
        for _ in range(64):  # 512 KiB, twice the limit
            sock.sendall(b"2000\r\n" + b"x" * 0x2000 + b"\r\n")
        answer = sock.recv(65536)
    except (BrokenPipeError, ConnectionResetError):
        pass
    sock.close()
    check(not answer.startswith(b"HTTP/1.1 2"), f"an oversized chunked body was accepted: {answer[:100]!r}")
    check(http_call(srv.port, "GET", "/health")[0] == 200, "unhealthy after a big body")


def t_fuzz(srv, model_id, seed):
    """Mutated request bodies: only 200 and 4xx answers, never a dropped connection."""
    rng = random.Random(seed)
    seeds = [
        json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0.5,
                    "stop": ["x"], "stream": False}).encode(),
        json.dumps({"prompt": "hello", "max_tokens": 1, "top_p": 0.9, "seed": 3}).encode(),
        json.dumps({"content": "fuzz me", "with_pieces": True}).encode(),
        json.dumps({"tokens": [1, 2, 3]}).encode(),
    ]
    paths = ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"]
    alphabet = b'{}[]",:0123456789.eE+-truefalsnul\\u\xff\xc3\x80 '
    t_end = time.time() + 15
    n = 0
    while n < 300 and time.time() < t_end:
        k = rng.randrange(len(seeds))
        b = bytearray(seeds[k])
        for _ in range(rng.randint(1, 4)):
            op, i = rng.randrange(3), rng.randrange(len(b) + 1)
            if op == 0 and i < len(b):
                b[i] = rng.choice(alphabet)
            elif op == 1:
                b[i:i] = bytes([rng.choice(alphabet)]) * rng.randint(1, 3)
            elif i < len(b):
                del b[i:i + rng.randint(1, 4)]
        s, _, body = http_call(srv.port, "POST", paths[k], bytes(b), auth(), timeout=30)
        check(s == 200 or 400 <= s < 500, f"body {bytes(b)!r} -> {s} {body[:200]!r}")
        if s != 200:
            json.loads(body)["error"]["message"]
        n += 1
    check(http_call(srv.port, "GET", "/health")[0] == 200, "unhealthy after fuzzing")


def t_disconnect(srv, model_id):
    m0 = metrics(srv.port)
    counting = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "max_tokens": 400, "temperature": 0, "stream": True}
    c, r = open_stream(srv.port, counting)  # an answer that goes on
    events = sse_events(r)
    for _ in range(3):
        next(events)
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    t0 = time.time()
    wait_for(lambda: metrics(srv.port)["strata_requests_in_flight"] == 0, 3, "the generation stopping")
    m1 = metrics(srv.port)
    # an ordinary event: counted as cancelled, not failed, and logged as a disconnect
    check(m1["strata_requests_cancelled_total"] == m0["strata_requests_cancelled_total"] + 1, "not counted as cancelled")
    check(m1["strata_requests_failed_total"] == m0["strata_requests_failed_total"], "counted as a failure")
    check("client disconnected" in srv.stderr(), "the disconnect was not logged as one")
    # only what was delivered counts: the client read 3 events, the socket may have held a few more
    check(m1["strata_generated_tokens_total"] - m0["strata_generated_tokens_total"] < 40,
          "undelivered tokens were counted (or the generation ran on)")
    check(m1["strata_generation_tokens_per_second"] == m0["strata_generation_tokens_per_second"],
          "a cancelled request moved the generation speed gauge")
    stopped_in = time.time() - t0
    # a queued request whose client leaves is dropped from the queue: every slot busy first
    slots = json.loads(http_call(srv.port, "GET", "/props", headers=auth())[2])["total_slots"]
    streams = []
    for i in range(slots):
        c, r = open_stream(srv.port, dict(counting, prompt=f"{100 + i}, {101 + i}, {102 + i}, {103 + i},"))
        next(sse_events(r))
        streams.append(c)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10 * SLOW)
    body = json.dumps({"prompt": "queued", "max_tokens": 5}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                 + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                 + b"\r\n\r\n" + body)
    wait_for(lambda: metrics(srv.port)["strata_requests_queued"] == 1, 3, "the request queueing")
    sock.close()
    wait_for(lambda: metrics(srv.port)["strata_requests_queued"] == 0, 2, "the queued request leaving")
    for c in streams:
        c.close()
    wait_for(lambda: metrics(srv.port)["strata_requests_in_flight"] == 0, 3, "the other streams stopping")
    s, _, b = http_call(srv.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}, auth())
    check(s == 200, f"server not serving after disconnects: {s}")
    print(f"    disconnect: generation stopped {stopped_in * 1e3:.0f} ms after the client left", flush=True)


def t_parallel_greedy(srv, model_id):
    """Greedy answers are the same whether a request runs alone or in a batch with others."""
    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a dragon",
               "1, 1, 2, 3, 5, 8,", "The three primary colors are", "In 1969, the first"]
    body = lambda p: {"prompt": p, "max_tokens": 24, "temperature": 0}
    alone = []
    for p in prompts:
        st, _, b = http_call(srv.port, "POST", "/v1/completions", body(p), auth())
        check(st == 200, f"status {st}: {b[:200]!r}")
        alone.append(json.loads(b)["choices"][0]["text"])
    together = [None] * len(prompts)

    def run(i):
        st, _, b = http_call(srv.port, "POST", "/v1/completions", body(prompts[i]), auth())
        together[i] = json.loads(b)["choices"][0]["text"] if st == 200 else f"status {st}"

    busiest = 0
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        busiest = max(busiest, metrics(srv.port)["strata_requests_in_flight"])
        time.sleep(0.01)
    for i, p in enumerate(prompts):
        check(together[i] == alone[i], f"{p!r}: alone {alone[i]!r}, in a batch {together[i]!r}")
    print(f"    parallel: {len(prompts)} greedy answers equal alone and together ({int(busiest)} ran at once)",
          flush=True)


def percentile(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def load_test(port, clients, requests, max_tokens, headers):
    """clients threads, each sending `requests` streaming chats one after another.
    Returns (errors, per-request records, wall seconds)."""
    records, errors = [], []
    lock = threading.Lock()

    def worker(ci):
        for ri in range(requests):
            body = {"messages": [{"role": "user", "content": f"Client {ci}, request {ri}: name a fruit and say why you like it."}],
                    "max_tokens": max_tokens, "temperature": 0.7, "seed": ci * 1000 + ri, "stream": True,
                    "stream_options": {"include_usage": True}}
            try:
                t0 = time.time()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=300 * SLOW)
                c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
                r = c.getresponse()
                if r.status != 200:
                    raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
                t_first, text, usage, finish, done, times = None, "", None, None, False, []
                for data in sse_events(r):
                    if data == b"[DONE]":
                        done = True
                        break
                    j = json.loads(data)
                    if "error" in j:
                        raise RuntimeError(j["error"]["message"])
                    if j["choices"]:
                        ch = j["choices"][0]
                        if ch["delta"].get("content"):
                            times.append(time.time())
                            t_first = t_first or times[-1]
                            text += ch["delta"]["content"]
                        finish = ch["finish_reason"] or finish
                    if j.get("usage"):
                        usage = j["usage"]
                t1 = time.time()
                c.close()
                if not (done and usage and finish in ("stop", "length") and text):
                    raise RuntimeError(f"incomplete: done={done} usage={usage} finish={finish} text={text!r}")
                n = usage["completion_tokens"]
                with lock:
                    records.append({"ttft": (t_first or t1) - t0, "total": t1 - t0, "tokens": n,
                                    "tps": n / (t1 - t_first) if t_first and t1 > t_first and n > 1 else None,
                                    "client": ci, "start": t0, "end": t1, "times": times})
            except Exception as e:
                with lock:
                    errors.append(f"client {ci} request {ri}: {e}")

    t0 = time.time()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors, records, time.time() - t0


def all_active_rate(records, clients):
    """Generated tok/s while every client was streaming: from the latest first
    token of a client's first request to the earliest end of a client's last
    one (the ramp-up and the tail, when fewer clients are left, excluded). A
    request's tokens count in proportion to its content events in the window.
    None when the clients never all streamed at once."""
    first, last = {}, {}
    for r in records:
        if r["times"] and (r["client"] not in first or r["start"] < first[r["client"]]["start"]):
            first[r["client"]] = r
        if r["client"] not in last or r["end"] > last[r["client"]]["end"]:
            last[r["client"]] = r
    if len(first) < clients or len(last) < clients:
        return None
    lo = max(r["times"][0] for r in first.values())
    hi = min(r["end"] for r in last.values())
    if hi <= lo:
        return None
    tokens = sum(r["tokens"] * sum(lo <= t <= hi for t in r["times"]) / len(r["times"])
                 for r in records if r["times"])
    return tokens / (hi - lo), hi - lo


def load_summary(records, wall, clients):
    ttft = [r["ttft"] for r in records]
    lat = [r["total"] for r in records]
    tps = [r["tps"] for r in records if r["tps"]]
    tokens = sum(r["tokens"] for r in records)
    active = all_active_rate(records, clients)
    return (f"{len(records)} requests from {clients} clients in {wall:.1f} s: {tokens / wall:.1f} generated tok/s overall"
            + (f", {active[0]:.1f} while all {clients} streamed ({active[1]:.1f} s)" if active else "") + "; "
            f"time to first token p50 {percentile(ttft, 50):.2f} s p99 {percentile(ttft, 99):.2f} s; "
            f"latency p50 {percentile(lat, 50):.2f} s p99 {percentile(lat, 99):.2f} s; "
            f"per-request stream tok/s p50 {percentile(tps, 50) if tps else 0:.1f}, slowest 1% {percentile(tps, 1) if tps else 0:.1f}")


def step_summary(m0, m1):
    """The worker's steps between two /metrics readings: tokens per step and
    milliseconds per step in the forward pass and after it."""
    d = {k: m1[k] - m0[k] for k in m1 if k.startswith("strata_step")}
    n = d["strata_steps_total"] or 1
    return (f"{d['strata_steps_total']:.0f} steps, {d['strata_step_tokens_total'] / n:.1f} tokens "
            f"({d['strata_step_decode_tokens_total'] / n:.1f} generating) per step, "
            f"forward {1e3 * d['strata_step_forward_seconds_total'] / n:.2f} ms + "
            f"sampling and publishing {1e3 * d['strata_step_sample_seconds_total'] / n:.2f} ms per step")


def t_load(srv, model_id):
    m0 = metrics(srv.port)
    per_client, tokens = (1, 4) if SMALL else (2, 12)
    errors, records, wall = load_test(srv.port, 8, per_client, tokens, auth({"Content-Type": "application/json"}))
    n = 8 * per_client
    check(not errors, "; ".join(errors[:3]))
    check(len(records) == n, f"{len(records)} of {n} responses")
    m1 = metrics(srv.port)
    check(m1["strata_requests_total"] - m0["strata_requests_total"] == n, "request count in /metrics")
    check(m1["strata_requests_failed_total"] == m0["strata_requests_failed_total"], "failures in /metrics")
    # each generated token but a request's first was fed back as a decode token
    gen = m1["strata_generated_tokens_total"] - m0["strata_generated_tokens_total"]
    dec = m1["strata_step_decode_tokens_total"] - m0["strata_step_decode_tokens_total"]
    tok = m1["strata_step_tokens_total"] - m0["strata_step_tokens_total"]
    check(dec <= gen <= dec + n, f"/metrics: {gen} tokens generated but {dec} decode tokens stepped")
    check(dec < tok and m1["strata_steps_total"] > m0["strata_steps_total"], f"/metrics: {tok} step tokens")
    print("    load: " + load_summary(records, wall, 8) + "; " + step_summary(m0, m1), flush=True)


def t_page(srv, model_id):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        raise Skip("the python package 'selenium' is not installed (pip install selenium)")
    chromium = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(p)), None)
    driver_path = next((p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if os.path.exists(p)), None)
    if not chromium or not driver_path:
        raise Skip("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    o = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,700"):
        o.add_argument(a)
    o.binary_location = chromium
    d = webdriver.Chrome(service=Service(driver_path), options=o)
    try:
        d.get(srv.base + "/")
        wait_for(lambda: d.find_element(By.ID, "key-row").is_displayed(), 10, "the page asking for the API key")
        d.find_element(By.ID, "key").send_keys(KEY)
        d.find_element(By.ID, "save-key").click()
        wait_for(lambda: d.find_element(By.ID, "model").text == model_id, 10, "the model name showing")

        def answers():
            return d.find_elements(By.CSS_SELECTOR, ".msg.assistant")

        d.find_element(By.ID, "input").send_keys("Say hello in one short sentence.\n")
        wait_for(lambda: answers() and answers()[-1].text, 20, "streamed text appearing")
        wait_for(lambda: answers()[-1].get_attribute("data-done"), 30, "the answer finishing")
        check(answers()[-1].text.strip(), "empty answer")
        check("tok/s" in d.find_element(By.ID, "tps").text, f"no speed shown: {d.find_element(By.ID, 'tps').text!r}")
        shot = os.path.join(os.environ.get("STRATA_BUILD", tempfile.gettempdir()), "test_server_page.png")
        d.save_screenshot(shot)
        print(f"    page: screenshot {shot}", flush=True)
        # Stop ends a long answer and frees the server
        d.find_element(By.ID, "input").send_keys("Write a very long story about a dragon.\n")
        wait_for(lambda: len(answers()) == 2 and len(answers()[-1].text) > 0, 20, "the second answer streaming")
        d.find_element(By.ID, "stop").click()
        wait_for(lambda: answers()[-1].get_attribute("data-done"), 5, "Stop ending the answer")
        wait_for(lambda: metrics(srv.port)["strata_requests_in_flight"] == 0, 3, "the server stopping generation")
        # New chat clears the conversation
        d.find_element(By.ID, "new-chat").click()
        check(not d.find_elements(By.CSS_SELECTOR, ".msg"), "new chat kept messages")
    finally:
        d.quit()


def t_limits(binary, model):
    """--max-queue and --timeout on a server of their own."""
    srv = Server(binary, model, "--timeout", str(2 * SLOW), "--max-queue", "1", "--idle-timeout", "1", "-np", "1")
    try:
        # counting on, greedily: an answer that does not end by itself within the timeout
        long_body = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", "max_tokens": 500, "temperature": 0,
                     "stream": True}
        c1 = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30 * SLOW)
        c1.request("POST", "/v1/completions", json.dumps(long_body), {"Content-Type": "application/json"})
        r1 = c1.getresponse()
        wait_for(lambda: metrics_noauth(srv.port)["strata_requests_in_flight"] == 1, 5, "the first request running")
        result = {}

        def queued():
            result["b"] = http_call(srv.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 4})

        t = threading.Thread(target=queued)
        t.start()
        wait_for(lambda: metrics_noauth(srv.port)["strata_requests_queued"] == 1, 5, "the second request queueing")
        s, h, b = http_call(srv.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 4})
        error_of(s, b, 503, None, "server_overloaded", "a full queue")
        check(h.get("retry-after"), "no Retry-After")
        # Hold the server still past the queued request's deadline. Otherwise the first request,
        # which arrived earlier, times out first and the queued one may start (and finish)
        # within its own deadline, a race the test would lose on a slow machine.
        srv.proc.send_signal(signal.SIGSTOP)
        time.sleep(2 * SLOW + 0.5)
        srv.proc.send_signal(signal.SIGCONT)
        t.join(10 * SLOW)
        s, h, b = result["b"]
        error_of(s, b, 503, None, "timeout", "queued past --timeout")
        events = list(sse_events(r1))
        # tokens came: a last chunk with finish_reason "timeout", then [DONE]; none: an error event
        ended = (events[-1] == b"[DONE]" and b'"finish_reason":"timeout"' in events[-2]) or \
            (b'"code":"timeout"' in events[-1])
        check(ended, f"the stream did not end with a timeout: {events[-2:]!r}")
        c1.close()
        # a client that stops sending is cut off after --idle-timeout
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        t0 = time.time()
        try:
            data = sock.recv(4096)
        except ConnectionResetError:
            data = b""
        sock.close()
        check(time.time() - t0 < 5 * SLOW and not data.startswith(b"HTTP/1.1 2"), f"idle connection kept: {data!r}")
        check(http_call(srv.port, "GET", "/health")[0] == 200, "unhealthy")
    finally:
        status = srv.stop()
    check(status == 0, f"exit status {status} after SIGTERM")


def metrics_noauth(port):
    _, _, body = http_call(port, "GET", "/metrics")
    return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in body.decode().splitlines() if l and l[0] != "#"}


def t_loading_and_failure(binary, model):
    """/health says 503 while the model loads; a model that fails to load ends the server."""
    d = tempfile.mkdtemp()
    fifo = os.path.join(d, "slow.gguf")
    os.mkfifo(fifo)  # opening it for reading blocks until a writer comes: a model that loads forever
    try:
        srv = Server(binary, fifo, wait_ready=False)
        s, h, b = http_call(srv.port, "GET", "/health")
        check(s == 503 and json.loads(b)["status"] == "loading" and h.get("retry-after"), f"health {s} {b}")
        s, h, b = http_call(srv.port, "POST", "/v1/completions", {"prompt": "x"})
        error_of(s, b, 503, None, "model_loading", "a request while loading")
        check(http_call(srv.port, "GET", "/")[0] == 200, "the page is not served while loading")
        with open(fifo, "wb"):
            pass  # the file turns out empty: not a GGUF
        srv.proc.wait(10 * SLOW)
        check(srv.proc.returncode == 1, f"exit status {srv.proc.returncode}")
        check("slow.gguf" in srv.stderr(), f"the error does not name the file: {srv.stderr()[-300:]}")
        os.unlink(srv.log.name)
    finally:
        os.unlink(fifo)
        os.rmdir(d)


def prompt_tokens(port, extra=None, headers=None):
    body = {"messages": USER, "max_tokens": 1, "temperature": 0, **(extra or {})}
    s, _, b = http_call(port, "POST", "/v1/chat/completions", body,
                        {"Content-Type": "application/json", **(headers or {})})
    check(s == 200, f"{s} {b[:300]!r}")
    return json.loads(b)["usage"]["prompt_tokens"]


def t_template_kwargs_ignored(srv, model_id):
    """enable_thinking means nothing to a chatml template, as to Jinja."""
    plain = prompt_tokens(srv.port, headers=auth())
    for v in (False, True):
        got = prompt_tokens(srv.port, {"chat_template_kwargs": {"enable_thinking": v}}, auth())
        check(got == plain, f"enable_thinking {v}: {got} prompt tokens, {plain} without")


def t_thinking(binary, model):
    """--no-think and chat_template_kwargs.enable_thinking on Qwen3's template. The
    test model's vocabulary renders "hi" as 10 tokens, and 19 with the empty think
    block after the generation prompt (counts from llama.cpp's tokenizer)."""
    srv = Server(binary, model, "--template", "qwen3", "--no-think")
    try:
        check(prompt_tokens(srv.port) == 19, "--no-think: no empty think block")
        got = prompt_tokens(srv.port, {"chat_template_kwargs": {"enable_thinking": True}})
        check(got == 10, f"enable_thinking true: {got} prompt tokens")
        got = prompt_tokens(srv.port, {"chat_template_kwargs": {"enable_thinking": False}})
        check(got == 19, f"enable_thinking false: {got} prompt tokens")
        got = prompt_tokens(srv.port, {"chat_template_kwargs": {}})
        check(got == 19, f"empty kwargs: {got} prompt tokens")
    finally:
        status = srv.stop()
    check(status == 0, f"exit status {status} after SIGTERM")


def t_command_line(binary, model, port_taken):
    def run(*args):
        p = subprocess.run([binary, *args], capture_output=True, timeout=30 * SLOW)
        return p.returncode, (p.stdout + p.stderr).decode(errors="replace")

    for args, status, pattern in [
        (("serve", "--help"), 0, "usage: strata serve"),
        (("chat", "--help"), 0, "usage: strata chat"),
        (("serve", "-m", model, "--bogus"), 2, "unknown option '--bogus'"),
        (("serve",), 2, "no model given"),
        (("serve", "-m", model, "--port", "70000"), 2, "--port: 70000 is out of range"),
        (("serve", "-m", model, "--timeout", "soon"), 2, "--timeout: 'soon' is not a number"),
        (("serve", "-m", model, "-np", "0"), 2, "-np: 0 is out of range [1, 256]"),
        (("serve", "-m", model, "--port", "0", "-np", "256", "-c", "65536"), 1, "use -np"),
        (("serve", "-m", model, "--port", "0", "-np", "200", "-c", "16777216"), 1, "more than 2^31 positions in all: use -np 127"),
        (("serve", "-m", model, "--template", "nope"), 2, "nope"),
        (("serve", "-m", model, "--port", "0", "--no-think"), 1, "chatml template has no thinking switch"),
        (("serve", "-m", "/nonexistent/x.gguf"), 1, "cannot open model '/nonexistent/x.gguf'"),
        (("serve", "-m", model, "--port", str(port_taken)), 1, "cannot listen on 127.0.0.1 port"),
        (("chat",), 2, "no model given"),
        (("chat", "-m", model, "-n", "0"), 2, "-n: 0 would give empty answers"),
    ]:
        got, out = run(*args)
        check(got == status and pattern in out, f"strata {' '.join(args)}: exit {got} (want {status}): {out[-300:]!r}")


def t_shutdown(srv):
    c, r = open_stream(srv.port, {"messages": [{"role": "user", "content": "A long story please."}],
                                  "max_tokens": 400, "stream": True})
    next(sse_events(r))
    t0 = time.time()
    status = srv.stop()
    check(status == 0, f"exit status {status}")
    check(time.time() - t0 < 5 * SLOW, f"shutdown took {time.time() - t0:.1f} s")
    c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("STRATA_BIN", "build/strata"))
    ap.add_argument("--model", default=os.environ.get("STRATA_TEST_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--load-only", action="store_true", help="only run the load test and print its figures")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=8, help="requests per client (--load-only)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", default="1", help="-t for the server (--load-only)")
    ap.add_argument("--parallel", default=None, help="-np for the server (--load-only; default: the server's)")
    ap.add_argument("--backend", default=None, help="--backend for the server (--load-only)")
    ap.add_argument("--template", default=None, help="--template for the server (--load-only)")
    args = ap.parse_args()
    seed = int(os.environ.get("STRATA_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (set STRATA_SEED to repeat)", flush=True)
    if not os.path.exists(args.model):
        report("server tests", None, f"model {args.model} not found (make model)")
        print(f"RESULT {RESULTS['pass']} {RESULTS['fail']} {RESULTS['skip']}")
        return 0
    if not os.access(args.bin, os.X_OK):
        report("server tests", False, f"{args.bin} is not built")
        print(f"RESULT {RESULTS['pass']} {RESULTS['fail']} {RESULTS['skip']}")
        return 1
    if args.load_only:
        extra = (["-np", args.parallel] if args.parallel else []) + (["--backend", args.backend] if args.backend else []) + \
            (["--template", args.template] if args.template else [])
        srv = Server(args.bin, args.model, "-t", args.threads, "-c", "2048", *extra)
        try:
            m0 = metrics(srv.port)
            errors, records, wall = load_test(srv.port, args.clients, args.requests, args.max_tokens,
                                              {"Content-Type": "application/json"})
            print("\n".join(errors[:5]) or load_summary(records, wall, args.clients) + "\n" +
                  step_summary(m0, metrics(srv.port)))
        finally:
            srv.stop()
        return 1 if errors else 0

    t_start = time.time()
    srv = Server(args.bin, args.model, "--api-key", KEY, "--max-body", "262144")
    model_id = os.path.basename(args.model)[:-5] if args.model.endswith(".gguf") else os.path.basename(args.model)
    try:
        for name, fn in [("openai_chat", t_openai_chat),
                         ("openai_chat_stream", t_openai_chat_stream), ("openai_completions", t_openai_completions),
                         ("length_and_seed", t_length_and_seed), ("stop_strings", t_stop_strings),
                         ("prompt_reuse", t_prompt_reuse), ("utf8_stream", t_utf8_stream), ("tokenize", t_tokenize),
                         ("bad_requests", t_bad_requests), ("routes_and_keys", t_routes_and_keys),
                         ("body_limits", t_body_limits), ("disconnect", t_disconnect),
                         ("parallel_greedy", t_parallel_greedy), ("load", t_load),
                         ("endpoints", t_endpoints), ("template_kwargs_ignored", t_template_kwargs_ignored),
                         ("page", t_page)]:
            run_test(name, fn, srv, model_id)
        run_test("fuzz", t_fuzz, srv, model_id, seed)
        run_test("healthy_after_all", lambda: check(http_call(srv.port, "GET", "/health")[0] == 200, "unhealthy"))
        run_test("command_line", t_command_line, args.bin, args.model, srv.port)
        run_test("shutdown", t_shutdown, srv)
    finally:
        if srv.proc.poll() is None:
            srv.stop()
    run_test("limits", t_limits, args.bin, args.model)
    run_test("thinking", t_thinking, args.bin, args.model)
    run_test("loading_and_failure", t_loading_and_failure, args.bin, args.model)
    print(f"  ({time.time() - t_start:.1f} s)")
    print(f"RESULT {RESULTS['pass']} {RESULTS['fail']} {RESULTS['skip']}")
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
