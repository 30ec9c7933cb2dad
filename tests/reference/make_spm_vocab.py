#!/usr/bin/env python3
"""A small SentencePiece BPE vocabulary and its reference token ids.

Trains a BPE SentencePiece model (vocab 2000, byte_fallback, identity
normalisation, dummy prefix, no whitespace trimming: the settings of the
Llama 2 tokenizer) on text generated here from a fixed seed, then writes

  tests/fixtures/tokenizer_spm.gguf  a GGUF holding only the tokenizer metadata,
                                     as llama.cpp's converter writes it
                                     (tokenizer.ggml.model = "llama", tokens,
                                     scores, token types, special ids);
  tests/fixtures/tokenizer_spm.txt   for each test string of
                                     tokenizer_reference.py, in its format:
      hex(input) TAB ids(plain) TAB ids(parse_special) TAB
      ids(add_special+parse_special) TAB hex(decode(ids(plain)))

ids(plain) and the decoded text are sentencepiece's own. SentencePiece never
matches control tokens in text, so ids(parse_special) follows llama.cpp's
rule, built from sentencepiece's pieces: the text is cut at the leftmost-longest
control/unknown token text ("<s>", "</s>", "<unk>"), each remaining fragment
is encoded by sentencepiece (which gives it the dummy-prefix space) and the
token's id goes between. add_special puts BOS (id 1) first.
"""

import io
import os
import random
import sys

import gguf
import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_reference import all_cases, hex_or_dash, ids_or_dash  # noqa: E402

SEED = 1234
VOCAB_SIZE = 2000

WORDS = (
    "the of and to in is was for on that with as by at from his her an be this are which it not or had "
    "have one were all their they but been has there who more would when will also into its if can two "
    "time first new after people over only some other these than then may about year years like could "
    "model token text language number system data code function value string list file line word words "
    "quick brown fox jumps lazy dog hello world example test simple small large water light music house "
    "city country river mountain garden window table paper letter story history science nature friend "
    "return while print import class self true false none yield lambda break continue pass raise"
).split()
ACCENTED = "café naïve résumé façade über straße garçon déjà señor año crème brûlée jalapeño".split()
OTHER = "你好 世界 中文 日本語 カタカナ 한국어 Привет мир Ελληνικά مرحبا 😀 👍 🎉 ❤️".split()
SYLLABLES = "ka ri to shi na mo ve lu pra stem ing tion er ly ous ment able pre con dis un re ex".split()
PUNCT = [".", ",", "!", "?", ";", ":", "'s", "'t", "-", "(", ")", "\"", "...", " -", "\n", "\n\n", "\t"]


def corpus(n_lines=6000):
    rng = random.Random(SEED)
    lines = []
    for _ in range(n_lines):
        parts = []
        for _ in range(rng.randint(3, 18)):
            r = rng.random()
            if r < 0.15:
                parts.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
            elif r < 0.80:
                w = rng.choice(WORDS)
                parts.append(w.capitalize() if rng.random() < 0.15 else w)
            elif r < 0.87:
                parts.append(rng.choice(ACCENTED))
            elif r < 0.92:
                parts.append(rng.choice(OTHER))
            else:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 6))))
            if rng.random() < 0.12:
                parts[-1] += rng.choice(PUNCT)
        sep = "  " if rng.random() < 0.05 else " "
        lines.append(sep.join(parts))
    return lines


def train():
    spm.set_random_generator_seed(SEED)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=model, model_type="bpe",
        vocab_size=VOCAB_SIZE, byte_fallback=True, character_coverage=0.9995,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def write_gguf(sp, path):
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        # The token types llama.cpp's convert_hf_to_gguf.py assigns.
        t = gguf.TokenType.NORMAL
        if sp.is_unknown(i):
            t = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            t = gguf.TokenType.CONTROL
        elif sp.is_unused(i):
            t = gguf.TokenType.UNUSED
        elif sp.is_byte(i):
            t = gguf.TokenType.BYTE
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        types.append(t)
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def encode_parse_special(sp, s):
    specials = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())
                if sp.is_control(i) or sp.is_unknown(i)}
    out, frag, i = [], "", 0
    while i < len(s):
        best = max((t for t in specials if s.startswith(t, i)), key=len, default=None)
        if best is None:
            frag += s[i]
            i += 1
            continue
        if frag:
            out += sp.encode(frag)
            frag = ""
        out.append(specials[best])
        i += len(best)
    if frag:
        out += sp.encode(frag)
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    fixtures = os.path.join(root, "tests", "fixtures")
    sp = train()
    write_gguf(sp, os.path.join(fixtures, "tokenizer_spm.gguf"))
    out = os.path.join(fixtures, "tokenizer_spm.txt")
    cases = all_cases()
    with open(out, "w", encoding="ascii") as fo:
        fo.write(f"# sentencepiece {spm.__version__} BPE, vocab {VOCAB_SIZE}, seed {SEED}, byte_fallback\n")
        fo.write("# hex(input) ids(plain) ids(parse_special) ids(add_special+parse_special)"
                 " hex(decode(ids(plain)))\n")
        for s in cases:
            plain = sp.encode(s)
            special = encode_parse_special(sp, s)
            dec = sp.decode(plain).encode("utf-8")
            fo.write("\t".join([hex_or_dash(s.encode("utf-8")), ids_or_dash(plain), ids_or_dash(special),
                                ids_or_dash([sp.bos_id()] + special), hex_or_dash(dec)]) + "\n")
    print(f"{out}: {len(cases)} strings; vocabulary {sp.get_piece_size()} pieces")


if __name__ == "__main__":
    main()
