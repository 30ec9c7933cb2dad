#!/usr/bin/env python3
"""UTF-8 decoding with replacement, as Python's codec does it (U+FFFD for each
maximal invalid subpart, the practice the Unicode standard recommends), for
tests/test_server_text.c. Written to tests/fixtures/utf8_cases.txt.

Format, one case per line: <input hex> <output hex> <valid 0|1>
where output is input.decode("utf-8", "replace").encode("utf-8").
The inputs mix valid text (ASCII, 2-, 3- and 4-byte characters), truncated
characters, lone continuation bytes, overlongs, surrogates and bytes above
U+10FFFF; a fixed seed keeps the fixture stable.
"""
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "utf8_cases.txt")

PIECES = [
    b"a", b"Z", b" ", b"\n", "é".encode(), "ß".encode(), "€".encode(), "中".encode(),
    "😀".encode(), "\U0010FFFF".encode(), "\uFFFD".encode(),
    b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xc2", b"\xe0\x80\xaf", b"\xe0\xa0",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xef\xbf", b"\xf0\x80\x80\xaf", b"\xf0\x9f\x98",
    b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf", b"\xf5\x80\x80\x80", b"\xfe", b"\xff", b"\xe2\x82",
    b"\xf0", b"\xdf",
]


def main():
    rng = random.Random(1234)
    cases = [bytes([b]) for b in range(256)]  # every single byte
    for _ in range(600):
        n = rng.randint(1, 12)
        cases.append(b"".join(rng.choice(PIECES) for _ in range(n)))
    for _ in range(200):
        cases.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))))
    with open(OUT, "w") as f:
        for c in cases:
            out = c.decode("utf-8", "replace").encode("utf-8")
            try:
                c.decode("utf-8")
                valid = 1
            except UnicodeDecodeError:
                valid = 0
            f.write(f"{c.hex()} {out.hex()} {valid}\n")


if __name__ == "__main__":
    main()
