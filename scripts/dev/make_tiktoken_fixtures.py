#!/usr/bin/env python3
"""Builds the tiktoken-format fixture (tests/data/tiktoken/) and its goldens.

The real Kimi-K2 tiktoken.model is not reachable from the development
machines, so this makes a small rank table in the same format and takes the
reference ids from tiktoken itself:

  * ranks: the 256 single bytes (ranks 0..255 in byte order), then the token
    each of the first N_MERGES merges of tests/data/tokenizer/qwen3 spells
    (as raw bytes, through the GPT-2 byte alphabet), in merge order, skipping
    byte strings already ranked;
  * special tokens: a few of Kimi's names in tokenizer_config.json's
    added_tokens_decoder, ids continuing after the last rank with one gap,
    which Kimi's tokenizer fills with <|reserved_token_ID|> (256 reserved ids);
  * goldens: tiktoken.Encoding(pat_str=Kimi's pattern) over the shared
    tokenizer corpus (tests/data/tokenizer/corpus.json) plus a few Han-heavy
    strings and 300 seeded random mixtures of scripts and whitespace, with
    special tokens allowed ("all") and with none.

Run from the repository root with tiktoken pinned (below) in a venv of its own:
    python3 -m venv ~/.cache/wna16/venv-fixtures
    ~/.cache/wna16/venv-fixtures/bin/pip install tiktoken==0.12.0
    ~/.cache/wna16/venv-fixtures/bin/python scripts/dev/make_tiktoken_fixtures.py
"""
import base64
import json
import os
import random
import sys

import tiktoken

TIKTOKEN_VERSION = "0.12.0"
N_MERGES = 14000
N_RESERVED = 256

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "tests", "data", "tokenizer")
OUT = os.path.join(ROOT, "tests", "data", "tiktoken")

# Kimi-K2's pre-tokenization pattern (tokenization_kimi.py pat_str), in the
# syntax of tiktoken's regex engine (class intersection with &&).
KIMI_PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# Offsets after the last rank; offset 5 is left out (a reserved token).
SPECIALS = [("[BOS]", 0), ("[EOS]", 1), ("<|im_end|>", 2), ("<|im_user|>", 3),
            ("<|im_assistant|>", 4), ("<|im_system|>", 6), ("<|im_middle|>", 7),
            ("[UNK]", 8), ("[PAD]", 9)]

UNREACHABLE = [b"qzxj", b"zvqkw"]

EXTRA = [
    "qzxj", "qzxj qzxj", " zvqkw zvqkwzvqkw", 
    "中文English混合", "汉字abc", "北京市 Pascal", "你好世界，欢迎使用Kimi！",
    "日本語とEnglishとテキスト", "DON'T stop 我们的 work's", "ÀÉÎõü 漢字 mixed\r\n\r\n ",
    "<|im_user|>user<|im_middle|>你好<|im_end|><|im_assistant|>",
    "[BOS]text[EOS][PAD] and [UNK]",
    # Han by script, not script extension; White_Space without U+180E
    "\uff61're 「中」ー々〆 \u3001'll ㇰ", "a\u180e b\u180e\u180e 's\u180e\n c\u180e",
    "x\u180e's \u180eword\u180e\u180eab \u180e\u180e\u180e!",
]

# Seeded random mixtures of scripts, whitespace (every White_Space
# character and a few that are not), contractions and special tokens.
N_RANDOM = 300
WHITESPACE = [0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0x85, 0xa0, 0x1680, 0x180e, 0x2000, 0x2005,
              0x200a, 0x200b, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff, 0x1c, 0x1f]
POOLS = [(0x20, 0x7f), (0xa0, 0x250), (0x300, 0x370), (0x370, 0x530), (0x590, 0x700),
         (0x900, 0x980), (0x3000, 0x3100), (0x4e00, 0x4f00), (0x3400, 0x3440),
         (0x20000, 0x20040), (0xac00, 0xac80), (0x1f300, 0x1f650), (0x2e80, 0x2f00),
         (0xf900, 0xfa10), (0x660, 0x66a), (0xff00, 0xffa0), (0x2160, 0x2190),
         (0x1d400, 0x1d500)]
PIECES = ["'s", "'T", "'re", "'LL", "'d", "\r\n", "<|im_end|>", "[BOS]"]


def random_strings():
    rng = random.Random(20261205)
    out = []
    for _ in range(N_RANDOM):
        s = []
        for _ in range(rng.randint(1, 24)):
            c = rng.random()
            if c < 0.25:
                s.append(chr(rng.choice(WHITESPACE)))
            elif c < 0.3:
                s.append(rng.choice(PIECES))
            else:
                lo, hi = rng.choice(POOLS)
                s.append(chr(rng.randrange(lo, hi)))
        out.append("".join(s))
    return out


def gpt2_byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def build_ranks():
    dec = gpt2_byte_decoder()
    with open(os.path.join(SRC, "qwen3", "tokenizer.json"), encoding="utf-8") as f:
        merges = json.load(f)["model"]["merges"]
    ranks = {bytes([b]): b for b in range(256)}
    for m in merges[:N_MERGES]:
        a, b = m.split(" ") if isinstance(m, str) else m
        tok = bytes(dec[c] for c in a + b)
        if tok not in ranks:
            ranks[tok] = len(ranks)
    # Tokens no merge reaches (no split into two ranked tokens): tiktoken
    # takes a piece that is a token as that token before merging.
    for tok in UNREACHABLE:
        assert tok not in ranks and not any(
            tok[:k] in ranks and tok[k:] in ranks for k in range(1, len(tok))), tok
        ranks[tok] = len(ranks)
    return ranks


def main():
    if tiktoken.__version__ != TIKTOKEN_VERSION:
        sys.exit(f"tiktoken {tiktoken.__version__} found; pin {TIKTOKEN_VERSION}")
    ranks = build_ranks()
    n = len(ranks)
    specials = {f"<|reserved_token_{i}|>": i for i in range(n, n + N_RESERVED)}
    for name, off in SPECIALS:
        del specials[f"<|reserved_token_{n + off}|>"]
        specials[name] = n + off
    enc = tiktoken.Encoding("kimi-synthetic", pat_str=KIMI_PAT, mergeable_ranks=ranks,
                            special_tokens=specials)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tiktoken.model"), "w", encoding="ascii") as f:
        for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(tok).decode()} {r}\n")
    decoder = {str(n + off): {"content": name, "lstrip": False, "normalized": False,
                              "rstrip": False, "single_word": False, "special": True}
               for name, off in SPECIALS}
    config = {"added_tokens_decoder": decoder, "bos_token": "[BOS]", "eos_token": "[EOS]",
              "pad_token": "[PAD]", "unk_token": "[UNK]", "tokenizer_class": "TikTokenTokenizer"}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(SRC, "corpus.json"), encoding="utf-8") as f:
        strings = json.load(f)["strings"] + EXTRA + random_strings()
    ids = [enc.encode(s, allowed_special="all") for s in strings]
    ids_ns = [enc.encode(s, allowed_special=set(), disallowed_special=()) for s in strings]
    for s, a in zip(strings, ids):
        assert enc.decode(a) == s, s
    expected = {"reference": f"tiktoken {TIKTOKEN_VERSION}", "ranks": n,
                "extra_strings": EXTRA + random_strings(), "ids": ids, "ids_no_special": ids_ns}
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print(f"{n} ranks, {len(specials)} special tokens, {len(strings)} strings")


if __name__ == "__main__":
    main()
