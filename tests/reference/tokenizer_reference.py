#!/usr/bin/env python3
"""Reference token ids for the byte-level BPE ("gpt2") tokenizers.

Runs the Hugging Face `tokenizers` library on a fixed list of strings and
writes tests/fixtures/tokenizer_<pre>.txt, one line per string:

    hex(utf8 input) TAB ids(parse_special=False) TAB ids(parse_special=True)
        TAB ids(add_special=True, parse_special=True) TAB hex(decode(ids(parse_special=False)))

("-" stands for an empty field; ids are space-separated.)

The vocabulary and merges come from the SmolLM2-135M-Instruct GGUF. The
pipelines mirror the tokenizer.json each model family ships on the Hugging Face
Hub: SmolLM2 = Digits(individual_digits) + ByteLevel(use_regex); GPT-2 =
ByteLevel(use_regex); Llama 3 = Split(regex, isolated) + ByteLevel(no regex)
with ignore_merges; Qwen2 = NFC + Split(regex, isolated) + ByteLevel(no regex).
The GPT-2, Llama 3 and Qwen2 variants reuse the SmolLM2 vocabulary with
tokenizer.ggml.pre swapped (the C test builds the same GGUF in memory from the
model file); the Qwen2 variant also marks token 12 as user-defined (a
non-special added token, matched in text even without special parsing).

Control tokens become special added tokens and user-defined ones plain added
tokens, as transformers' GGUF converter adds them; ids(plain) is encoded with
encode_special_tokens = True, so only the special ones stay text.

transformers can load the GGUF directly (AutoTokenizer.from_pretrained(...,
gguf_file=...)) only with torch installed; its torch-free converter is run
here as a cross-check and its disagreements are printed. It knows no "smollm"
pre-tokenizer (it drops SmolLM2's Digits step, so numerals like ½ and Ⅲ, and digits
after runs of spaces, split differently) and leaves out Qwen2's NFC normaliser.

Usage: tokenizer_reference.py [model.gguf]   (default: $STRATA_TEST_MODEL or
models/SmolLM2-135M-Instruct.Q4_1.gguf)
"""

import os
import random
import sys


# --- test strings ------------------------------------------------------------

HAND = [
    "",
    " ",
    "  ",
    "\n",
    "\t",
    "\r\n",
    "a",
    "Hello world",
    "Hello, world!",
    " Hello world",
    "Hello world ",
    "hello   world",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX",
    "CamelCaseIdentifier and snake_case_name",
    "e.g. i.e. etc. Mr. Smith's",
    "café naïve résumé façade Ångström Øre",
    "Crème brûlée à la française",
    "Straße Größe Übergröße",
    "ça va? très bien!",
    "São Paulo, Coração",
    "Dziękuję bardzo, żółć",
    "Ελληνικά γράμματα",
    "Русский текст, Україна",
    "עברית מימין לשמאל",
    "مرحبا بالعالم",
    "हिन्दी भाषा",
    "ภาษาไทย",
    "日本語のテキストとカタカナ",
    "你好，世界！这是一个测试。",
    "中文和English混合",
    "한국어 텍스트입니다",
    "Tiếng Việt có dấu",
    "emoji 😀",
    "😀😃😄😁",
    "👍🏽 thumbs up with skin tone",
    "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈 flag",
    "🇺🇸🇫🇷🇯🇵",
    "❤️ heart with VS16",
    "a😀b😀c",
    "def foo(x):\n    return x ** 2  # comment",
    "int main(void) {\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "if x == 1:\n        pass\n    else:\n        raise ValueError('bad')",
    "<div class=\"main\">Hello</div>",
    "SELECT * FROM users WHERE id = 42;",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.com",
    "{\"key\": [1, 2, 3], \"other\": null}",
    "$ ls -la /usr/bin | grep python3",
    "x+=1;y-=2;z*=3;w/=4",
    "a\u2028b\u2029c",
    "1",
    "12",
    "123",
    "1234",
    "12345",
    "123456789",
    "3.14159",
    "1,000,000",
    "2024-01-15",
    "10:30:45",
    "Numbers 12345 and 3.14159 and 1,000,000",
    "abc123def456",
    "a1b2c3",
    "٣٤٥ Arabic-Indic digits",
    "１２３ fullwidth digits",
    "½ ¼ ¾ vulgar fractions",
    "Ⅻ Roman numeral twelve",
    "²³ superscripts",
    "I'm",
    "I'M",
    "you're we've they'll she'd",
    "YOU'RE WE'VE THEY'LL SHE'D",
    "don't can't won't",
    "DON'T CAN'T WON'T",
    "it's It'S iT's",
    "rock 'n' roll",
    "'s 't 're 've 'm 'll 'd",
    "''''",
    "it’s curly apostrophe",
    "«guillemets» „quotes“ “double” ‘single’",
    "em—dash en–dash hyphen-minus",
    "ellipsis… and three dots...",
    "!!!???...",
    "   leading spaces",
    "trailing spaces   ",
    "multiple   internal    spaces",
    "tabs\tand\ttabs",
    "\t\tindented with tabs",
    "new\nlines\n\nand\n\n\nmore",
    "windows\r\nline\r\nendings",
    "mixed \t \n whitespace \r\n end",
    "\n\n\n",
    "    ",
    " \n ",
    "a \n b",
    "a\n\n b",
    "trailing newline\n",
    "\u00a0non-breaking\u00a0space",
    "ideographic\u3000space",
    "thin\u2009space and hair\u200aspace",
    "zero\u200bwidth\u200bspace",
    "zero\u200dwidth\u200cjoiners",
    "\ufeffBOM at start",
    "soft\u00adhyphen",
    "left\u200eto\u200fright marks",
    "next\u0085line",
    "vertical\x0btab and form\x0cfeed",
    "nul\x00byte",
    "control\x01\x02\x1f chars",
    "del\x7fchar",
    "replacement \ufffd char",
    "noncharacter \uffff and \U0010ffff",
    "private use \ue000\uf8ff",
    "e\u0301 combining acute",
    "e\u0301\u0302\u0303 stacked marks",
    "\u0301 leading combining mark",
    "\u1100\u1161\u11a8 conjoining jamo",
    "A\u030a vs \u00c5",
    "ﬁ ligature ﬂ",
    "ｆｕｌｌｗｉｄｔｈ ＬＡＴＩＮ",
    "𝐁𝐨𝐥𝐝 𝑖𝑡𝑎𝑙𝑖𝑐 math",
    "𓀀 hieroglyph",
    "Ⓐⓑⓒ circled",
    "©®™ symbols",
    "€100 £50 ¥1000 $20",
    "∀x∈ℝ: x²≥0",
    "→ ← ↑ ↓ ⇒",
    "°C ±5%",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|>",
    "<|im_start|<|im_end|>>",
    "<|im_start",
    "im_start|>",
    "< |im_start| >",
    "<|IM_START|>",
    "<repo_name>strata<file_sep>main.c",
    "<jupyter_text>markdown<jupyter_code>print(1)",
    "<filename>a.py<gh_stars>10",
    "<s>",
    "</s>",
    "<unk>",
    "<s>Hello</s>",
    "Hello <s> world </s>",
    "<|begin_of_text|>",
    "<0x41>",
    "▁",
    "▁▁spaced▁▁",
    "a▁b",
    "ĠĊ byte-level lookalikes",
    "Ġhello",
    "ÿþ",
    "\\n literal backslash n",
    "\\\\ double backslash",
    "Ⅰ ⅱ Ⅲ",
    "ÀÁÂÃÄÅ àáâãäå",
    "İstanbul ıi",
    "ǅ titlecase digraph",
    "ß ẞ",
    "x" * 50,
    "ab" * 30,
    "a b " * 20,
    "word " * 30,
    "🙂" * 12,
    "的" * 20,
    "-" * 40,
    "=" * 33,
    "." * 17,
    "0" * 25,
    "\n" * 9,
    " " * 17,
    "\t" * 7,
    " \t" * 6,
    "!?" * 10,
    "mongolian\u180evowel separator",
    "x \u180e\n y\u180e\u180e  z \u180e",
    "a  \u180e and \u180e  b",
    "it'\u017f long s and IT'\u017f",
    "\uff29\u2019\uff4d fullwidth I'm",
    "\uff07s fullwidth apostrophe",
    " 's space before contraction",
    "'S'S's'LL",
    "\U0001f600's emoji contraction",
    "x'sy'dz",
    "\t\n\t\n",
    " \n\n ",
    "a \t\n b",
    "hi \n",
    "\r\n\r\n  x",
    "\r\rcarriage",
    "end with tab\t",
    " <|im_start|> ",
    "\n<|im_end|>\n",
    "<|im_start|im_end|>",
    "<|im_start|><|im_start|>",
    "<<|im_start|>>",
    "a<s>b</s>c",
    " <s> ",
    "<s><s>",
    "12 345 6789 01234",
    "x1234567890y",
    "3rd 21st 100th",
    "0.5e-10",
    "$1,234.56",
    "1\u00a0000",
    "a.b,c;d:e!f?g",
    "(parens) [brackets] {braces}",
    "__init__.py",
    "--flag=value",
    "...",
    "?!",
    "C++ and C# and F#",
    "naïve café" * 3,
]

SPACE_WORDS = ["a", "hello", "123", "!", "x1", "é", "中"]


def generated():
    out = []
    for n in range(1, 21):
        out.append("".join(str((i * 7 + 3) % 10) for i in range(n)))
    for n in range(1, 9):
        out.append("x" + " " * n + "y")
        out.append(" " * n + "start")
        out.append("end" + " " * n)
        out.append("a" + "\n" * n + "b")
    for w in SPACE_WORDS:
        out.append("  " + w + "  " + w)
        out.append(w + "\n\n" + w + " \n" + w)
    for c in ["s", "t", "re", "ve", "m", "ll", "d"]:
        variants = {c, c.upper(), c[0].upper() + c[1:], c[0] + c[1:].upper()}
        for v in sorted(variants):
            out.append("it'" + v + " x")
            out.append("IT'" + v)
    return out


# Characters the random mixtures draw from.
POOL = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    "0123456789" "      \n\n\t\r"
    ".,;:!?'\"()[]{}<>/\\|-_+=*&^%$#@~`"
    "éèêëàâäôöûüçñßøåÆŒ"
    "αβγδεζηθλμπσωΩ"
    "абвгдежзийклмнопрст"
    "你好世界中文测试的一是"
    "日本語カタカナひらがな"
    "한국어"
    "😀👍🎉🔥❤\u200d\ufe0f"
    "٣١²½"
    "\u00a0\u3000\u2009"
)


def randomised(count=40, seed=20240601):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(1, 60)
        out.append("".join(rng.choice(POOL) for _ in range(n)))
    return out


def all_cases():
    seen = set()
    cases = []
    for s in HAND + generated() + randomised():
        if s not in seen:
            seen.add(s)
            cases.append(s)
    return cases


def hex_or_dash(b):
    return b.hex() if b else "-"


def ids_or_dash(ids):
    return " ".join(str(i) for i in ids) if ids else "-"


# --- pipelines ---------------------------------------------------------------

# The Split regexes as the models' tokenizer.json files spell them.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# name -> (fixture suffix, token ids re-marked user-defined in this variant)
VARIANTS = {
    "smollm": ("smollm", ()),
    "gpt-2": ("gpt2", ()),
    "llama-bpe": ("llama_bpe", ()),
    "qwen2": ("qwen2", (12,)),
}


def pipeline(pre):
    from tokenizers import Regex, normalizers, pre_tokenizers
    if pre == "smollm":
        return None, pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), False
    if pre == "gpt-2":
        return None, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False
    if pre == "llama-bpe":
        return None, pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), True
    if pre == "qwen2":
        return normalizers.NFC(), pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), False
    raise ValueError(pre)


def read_vocab(path):
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields

    def strs(k):
        return [bytes(f[k].parts[i]).decode("utf-8") for i in f[k].data]

    def ints(k):
        return [int(f[k].parts[i][0]) for i in f[k].data]

    return strs("tokenizer.ggml.tokens"), strs("tokenizer.ggml.merges"), ints("tokenizer.ggml.token_type")


def build(pre, tokens, merges, types, user_defined):
    from tokenizers import AddedToken, Tokenizer, decoders, models
    normalizer, pre_tok, ignore_merges = pipeline(pre)
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ")) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tok
    tok.decoder = decoders.ByteLevel()
    types = list(types)
    for i in user_defined:
        types[i] = 4
    # GGUF token types: 3 control -> special added token, 4 user-defined -> plain added token.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, y in zip(tokens, types) if y == 3])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, y in zip(tokens, types) if y == 4])
    return tok


def encode(tok, s, parse_special, add_special=False):
    tok.encode_special_tokens = not parse_special
    ids = tok.encode(s, add_special_tokens=add_special).ids
    tok.encode_special_tokens = False
    return ids


def transformers_crosscheck(pre, tokens, merges, types, cases, ours):
    """Count strings where transformers' own GGUF converter disagrees."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except Exception as e:  # noqa: BLE001 - only a cross-check
        print(f"  transformers cross-check skipped: {e}")
        return
    d = {"tokenizer_type": "gpt2", "pre_tokenizer_type": pre, "tokens": tokens,
         "merges": merges, "token_type": types}
    tf, _ = convert_gguf_tokenizer("llama", d)
    diff = [s for s, ids in zip(cases, ours) if tf.encode(s, add_special_tokens=False).ids != ids]
    print(f"  transformers GGUF converter disagrees on {len(diff)}/{len(cases)} strings"
          + (f", e.g. {diff[:3]!r}" if diff else ""))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "STRATA_TEST_MODEL", os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    tokens, merges, types = read_vocab(path)
    cases = all_cases()
    for pre, (suffix, user_defined) in VARIANTS.items():
        tok = build(pre, tokens, merges, types, user_defined)
        out = os.path.join(root, "tests", "fixtures", f"tokenizer_{suffix}.txt")
        parsed_all = []
        with open(out, "w", encoding="ascii") as fo:
            fo.write(f"# tokenizer.ggml.pre={pre}; vocabulary: SmolLM2-135M-Instruct GGUF")
            fo.write(f"; user-defined ids: {' '.join(map(str, user_defined)) or 'none'}\n")
            fo.write("# hex(input) ids(plain) ids(parse_special) ids(add_special+parse_special)"
                     " hex(decode(ids(plain)))\n")
            for s in cases:
                plain = encode(tok, s, parse_special=False)
                special = encode(tok, s, parse_special=True)
                added = encode(tok, s, parse_special=True, add_special=True)
                dec = tok.decode(plain, skip_special_tokens=False).encode("utf-8")
                parsed_all.append(special)
                fo.write("\t".join([hex_or_dash(s.encode("utf-8")), ids_or_dash(plain), ids_or_dash(special),
                                    ids_or_dash(added), hex_or_dash(dec)]) + "\n")
        print(f"{out}: {len(cases)} strings")
        transformers_crosscheck(pre, tokens, merges, types, cases, parsed_all)


if __name__ == "__main__":
    main()
