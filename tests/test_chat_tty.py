#!/usr/bin/env python3
"""`strata chat` driven through a pseudo-terminal, as a person would use it:
streamed answers, a follow-up that reuses the cached conversation, /reset,
Ctrl-C stopping an answer before another token is written and clearing the
line at the prompt, line editing and history (libedit), /set for sampling
options, /quit, Ctrl-D; and with stdin a pipe, one answer per line.

Prints "  ok NAME" / "  FAIL NAME: why" / "  skip NAME: why" and
"RESULT passed failed skipped".
"""
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

BIN = os.environ.get("STRATA_BIN", "build/strata")
MODEL = os.environ.get("STRATA_TEST_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf")
RESULTS = {"pass": 0, "fail": 0, "skip": 0}
STATS = re.compile(rb"\[(stopped, |context full, |length limit, )?(\d+) tokens, [\d.]+ tok/s \| prompt (\d+) tokens, (\d+) from cache\]")


class Session:
    """strata chat on a pseudo-terminal."""

    def __init__(self, *args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(BIN, [BIN, "chat", "-m", MODEL, "-c", "512", "-t", "1", "--temp", "0", *args])
        self.out = b""  # everything read so far
        self.pos = 0    # what expect() has consumed

    def read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 4096)
        except OSError:  # the child closed the terminal
            data = b""
        if not data:
            raise EOFError("the program ended; output: " + self.out[-400:].decode(errors="replace"))
        self.out += data
        return True

    def prompt(self):
        """Waits for the prompt and for the line editor to take the terminal (it
        writes the prompt a moment before: keys typed in between reach the
        terminal's own line discipline, as they would from a fast typist)."""
        self.expect(rb"> ")
        time.sleep(0.2)

    def expect(self, pattern, timeout=30):
        """Waits for the regex pattern (bytes) after what was consumed; returns the match."""
        rx = re.compile(pattern)
        deadline = time.time() + timeout
        while True:
            m = rx.search(self.out, self.pos)
            if m:
                self.pos = m.end()
                return m
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"{pattern!r} not seen within {timeout} s; output: "
                                     f"{self.out[self.pos:][-400:].decode(errors='replace')!r}")
            self.read(left)

    def send(self, data):
        os.write(self.fd, data)

    def wait_exit(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                self.read(0.1)
            except EOFError:
                pass
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        raise AssertionError("the program did not exit")

    def close(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run(name, fn):
    try:
        fn()
        RESULTS["pass"] += 1
        print(f"  ok   {name}", flush=True)
    except Exception as e:
        RESULTS["fail"] += 1
        print(f"  FAIL {name}: {type(e).__name__}: {e}", flush=True)


def t_conversation():
    s = Session("-n", "24")
    try:
        s.expect(rb"/reset starts over")
        s.expect(rb"> ")
        s.send(b"What is the capital of France?\r")
        m = s.expect(STATS)
        first_prompt = int(m.group(3))
        check(int(m.group(4)) == 0 and int(m.group(2)) > 0, f"first answer stats {m.group(0)}")
        answer = s.out[s.out.index(b"France?"):m.start()]
        check(len(answer.strip()) > 10, f"no answer streamed: {answer!r}")
        s.expect(rb"> ")
        s.send(b"And of Germany?\r")
        m = s.expect(STATS)
        check(int(m.group(4)) >= first_prompt, f"the follow-up reused {m.group(4)} of {first_prompt}+ tokens")
        s.expect(rb"> ")
        s.send(b"/reset\r")
        s.expect(rb"\[new conversation\]")
        s.expect(rb"> ")
        s.send(b"/bogus\r")
        s.expect(rb"unknown command '/bogus'")
        s.expect(rb"> ")
        s.send(b"Hi\r")
        m = s.expect(STATS)
        check(int(m.group(3)) < first_prompt + 10, f"history kept after /reset: {m.group(0)}")
        s.expect(rb"> ")
        s.send(b"/quit\r")
        check(s.wait_exit() == 0, "exit status after /quit")
    finally:
        s.close()


def t_ctrl_c():
    s = Session("-n", "400")
    try:
        s.expect(rb"> ")
        s.send(b"Write a very long story about a dragon and a knight.\r")
        s.expect(rb"story about a dragon and a knight\.\r?\n")  # the echo
        s.expect(rb"\w+ \w+ \w+ \w+")  # the answer is streaming
        # (or the line editor is still redrawing the line it has just returned: a
        # Ctrl-C then is a key to it, not a signal; give it the time to let go)
        time.sleep(0.3)
        t0 = time.time()
        s.send(b"\x03")  # Ctrl-C: SIGINT to the program
        m = s.expect(STATS, timeout=5)
        check(m.group(1) == b"stopped, ", f"not stopped: {m.group(0)}")
        check(int(m.group(2)) < 400 and time.time() - t0 < 3, "the answer did not stop promptly")
        # the terminal echoes ^C when the signal is sent; not one token may follow it
        echo = s.out.rfind(b"^C", 0, m.start())
        check(echo >= 0 and not s.out[echo + 2:m.start()].strip(),
              f"text after the Ctrl-C: {s.out[echo + 2:m.start()]!r}")
        s.expect(rb"> ")
        # still alive, history kept. The answer depends on how much of the first one
        # was made before the Ctrl-C, so it must be long whatever that was: another
        # story. Four words in a row cannot match inside the statistics line.
        s.send(b"Now write another very long story, about a wizard and a princess.\r")
        s.expect(rb"a wizard and a princess\.\r?\n")
        s.expect(rb"\w+ \w+ \w+ \w+")
        time.sleep(0.3)
        s.send(b"\x03")
        m = s.expect(STATS, timeout=5)
        check(m.group(1) == b"stopped, " and int(m.group(4)) > 0, f"after Ctrl-C: {m.group(0)}")
        s.prompt()
        s.send(b"some words")
        s.expect(rb"some words")
        s.send(b"\x03")  # Ctrl-C at the prompt clears the line: what follows is a fresh line
        time.sleep(0.3)
        s.send(b"/quit\r")
        check(s.wait_exit() == 0, "Ctrl-C at the prompt did not clear the line (/quit was not seen alone)")
    finally:
        s.close()


def t_sigint_between_answers():
    """A SIGINT that comes while no answer runs (a Ctrl-C typed as the prompt
    appears, before the line editor has the terminal, is one) neither stops the
    next answer nor ends the program."""
    s = Session("-n", "6")
    try:
        s.prompt()
        os.kill(s.pid, signal.SIGINT)
        time.sleep(0.2)
        s.send(b"Say hello.\r")
        m = s.expect(STATS, timeout=30)
        check(m.group(1) != b"stopped, " and int(m.group(2)) > 0, f"the answer was stopped: {m.group(0)}")
        s.prompt()
        os.kill(s.pid, signal.SIGINT)
        time.sleep(0.2)
        s.send(b"/quit\r")
        check(s.wait_exit() == 0, "a SIGINT at the prompt ended the program")
    finally:
        s.close()


def t_editing():
    s = Session("-n", "8")
    try:
        s.expect(rb"> ")
        s.send(b"/set seed -1\r")  # llama.cpp's spelling of a random seed
        s.expect(rb"\[seed = -1\]")
        s.send(b"/set temp 0.5\r")
        s.expect(rb"\[temp = 0\.5\]")
        s.send(b"/set top-k 7\r")
        s.expect(rb"\[top-k = 7\]")
        s.send(b"/set bogus 1\r")
        s.expect(rb"unknown option 'bogus'")
        s.send(b"/set temp hot\r")
        s.expect(rb"'hot' is not a number")
        s.send(b"/set\r")
        s.expect(rb"\[temp 0\.5, top-k 7, .*n-predict 8\]")
        s.send(b"\x1b[A\x1b[A\x1b[A\x1b[A\r")  # up four times: /set top-k 7 again
        s.expect(rb"\[top-k = 7\]")
        s.send(b"/qut\x1b[Di\r")  # left arrow, insert: /quit
        check(s.wait_exit() == 0, "the edited line was not /quit")
    finally:
        s.close()


def t_eof():
    s = Session("-n", "8")
    try:
        s.prompt()
        s.send(b"\x04")  # Ctrl-D on an empty line: EOF
        check(s.wait_exit() == 0, "exit status after Ctrl-D")
    finally:
        s.close()


def pty_output(args, env, until, timeout=30):
    """Runs BIN args on a pseudo-terminal until `until` (bytes) shows; returns the output."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(BIN, [BIN, *args], env)
    out, deadline = b"", time.time() + timeout
    try:
        while until not in out and time.time() < deadline:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    break
                if not data:
                    break
                out += data
    finally:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
    return out


def t_load_progress():
    """run, chat and serve draw a load bar on a terminal (forced here: the test
    model loads faster than the bar's quarter-second threshold), none on a pipe."""
    env = dict(os.environ, STRATA_LOAD_PROGRESS="1")
    bar = re.compile(rb"strata: loading SmolLM2[^\r\n]*\[#{30}\] 100% (\d+)/\1 MiB")
    for args, until in ((["run", "-m", MODEL, "-t", "1", "-p", "Hi", "-n", "2"], b"generated"),
                        (["chat", "-m", MODEL, "-t", "1"], b"> "),
                        (["serve", "-m", MODEL, "-t", "1", "--port", "0"], b"ready in")):
        out = pty_output(args, env, until)
        check(bar.search(out), f"strata {args[0]}: no load bar: {out[-300:]!r}")
    p = subprocess.run([BIN, "run", "-m", MODEL, "-t", "1", "-p", "Hi", "-n", "2"], env=env,
                       capture_output=True, timeout=60)
    check(p.returncode == 0 and b"loading" not in p.stderr, f"a bar on a pipe: {p.stderr[-300:]!r}")


def t_pipe():
    p = subprocess.run([BIN, "chat", "-m", MODEL, "-c", "512", "-t", "1", "--temp", "0", "-n", "12"],
                       input=b"What is 2+2?\n\nName a color.\n", capture_output=True, timeout=60)
    check(p.returncode == 0, f"exit status {p.returncode}: {p.stderr[-300:]!r}")
    check(len(STATS.findall(p.stderr)) == 2, f"two answers expected: {p.stderr!r}")
    check(b"> " not in p.stdout, "a prompt was written to a pipe")
    check(len(p.stdout.strip().split(b"\n")) >= 2, f"answers: {p.stdout!r}")


def main():
    tests = [("conversation", t_conversation), ("ctrl_c", t_ctrl_c), ("sigint_between_answers", t_sigint_between_answers),
             ("editing", t_editing), ("eof", t_eof),
             ("pipe", t_pipe), ("load_progress", t_load_progress)]
    if not os.path.exists(MODEL):
        for name, _ in tests:
            RESULTS["skip"] += 1
            print(f"  skip {name}: model {MODEL} not found")
    elif not os.access(BIN, os.X_OK):
        RESULTS["fail"] += 1
        print(f"  FAIL chat tty tests: {BIN} is not built")
    else:
        for name, fn in tests:
            run(name, fn)
    print(f"RESULT {RESULTS['pass']} {RESULTS['fail']} {RESULTS['skip']}")
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
