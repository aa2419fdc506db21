#!/usr/bin/env python3
"""Generate the tokenizer acceptance fixtures from the reference implementation.

The reference is Hugging Face `tokenizers`; the chat fixture also needs
transformers and jinja2 (pinned in scripts/requirements-dev.txt: install them
into a venv of their own). Run from the repo root:

    python tools/gen_tokenizer_fixtures.py [--shared ../shared]

It writes, as compact JSON:
  tests/data/tokenizer/corpus.json           the strings (>= 300) and invalid UTF-8 cases
  tests/data/tokenizer/expected_qwen3.json   ids, ids with special parsing off, decoded text
                                             (null where it equals the input)
  tests/data/tokenizer/expected_llama3.json  same for Llama-3 (its tokenizer stays in shared/)
  tests/data/tokenizer/expected_gpt2.json, expected_deepseek_v3.json   same, when in shared/
  tests/data/tokenizer/chat_qwen3.json       apply_chat_template(tokenize=False) outputs
  tests/data/tokenizer/synthetic/*.json      small tokenizers for options real files lack
  tests/data/tokenizer/expected_synthetic.json   their reference ids (and decodes)
  tests/data/tokenizer/corpus_spm.json       extra strings for the SentencePiece-style files
  tests/data/tokenizer/expected_llama2.json, expected_mistral.json   ids over corpus + corpus_spm
                                             for tests/data/tokenizer/{llama2,mistral} (made by
                                             tools/make_spm_tokenizers.py), decodes with and
                                             without special tokens, and decodes of id lists
                                             mixing byte-fallback tokens (invalid UTF-8 runs)
  tests/data/tokenizer/expected_<variant>.json   same for those files with another normalizer /
                                             pre-tokenizer / decoder ("overrides", applied by
                                             the test to the base file)
and, with --bench FILE, a ~1 MB mixed-language text for the speed measurement
(plus the time HF tokenizers takes to encode it).
"""
import argparse
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")

ENGLISH = [
    "Hello world!", "Hello, world! How are you today?", "The quick brown fox jumps over the lazy dog.",
    "A man, a plan, a canal: Panama.", "It's a beautiful day in the neighbourhood.",
    "I'M sure you'Re right, but DON'T tell them we'LL be late; she'D know.",
    "They've been here. We'd've gone. Y'all ain't seen nothin'.", "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D", "don't DON'T Don'T dOn'T", "rock'n'roll", "O'Neil's cafe isn't open",
    "Mr. Smith went to Washington D.C. on Jan. 5th, 2024.", "e-mail: someone@example.com",
    "Visit https://huggingface.co/docs/tokenizers?query=bpe#section for details.",
    "    leading spaces", "trailing spaces    ", "  both  ", "multiple   spaces   between   words",
    "UPPERCASE lowercase MiXeD CaSe", "supercalifragilisticexpialidocious", "antidisestablishmentarianism",
    "Hyphenated-words and under_scored_words and camelCaseWords", "Question? Exclamation! Ellipsis...",
    "\"Quoted text\" and 'single quoted' and `backticks`", "(parentheses) [brackets] {braces} <angles>",
    "100% of $50 is $50; 3 * 4 = 12 & 2^10 = 1024", "#hashtag @mention ~tilde |pipe| \\backslash",
    "The year 1999 and 2000 and 2024-11-29T16:50:00Z", "Pi is 3.14159265358979323846.",
    "1,000,000 people; 0.001 chance; -42 degrees; +7", "Phone: (555) 123-4567",
    "a", "I", " ", "  ", "\n", "ab", "a b", " a", "a ", "a  b", "a   b", "a\nb", "a\n\nb", "a \n b",
    "Line one.\nLine two.\n\nParagraph two.\n", "Windows\r\nline\r\nendings\r\n", "old mac\rline",
    "tab\tseparated\tvalues", "\tleading tab", "trailing tab\t", "mixed \t \t whitespace",
    "     \n\n\n     ", "word\n   indented\n      more", "end with newline\n", "\n\nstarts with newlines",
    "!!!???...", "---", "===", "***bold***", "__init__", "->", "=>", "::", "<=>", "!==",
]

CJK = [
    "你好，世界！", "我爱自然语言处理。", "今天天气很好，我们去公园散步吧。", "机器学习是人工智能的一个分支。",
    "中华人民共和国成立于1949年10月1日。", "这是一个测试：包含标点符号、数字123和English混合。",
    "《红楼梦》是中国古典四大名著之一。", "他说：“你好！”然后离开了。", "一二三四五六七八九十百千万亿",
    "繁體中文測試：臺灣、香港、澳門。", "量子计算机的发展速度超出了预期。", "北京 上海 广州 深圳",
    "こんにちは、世界！", "日本語のテキストをトークン化します。", "東京は日本の首都です。",
    "カタカナとひらがなと漢字が混ざっています。", "ｶﾀｶﾅ半角テスト", "私はコーヒーが好きです☕",
    "富士山の高さは3776メートルです。", "「こんにちは」と彼女は言った。", "ありがとうございました！",
    "안녕하세요, 세계!", "한국어 토큰화 테스트입니다.", "서울은 대한민국의 수도입니다.",
    "저는 학생입니다. 반갑습니다!", "한글과 English와 123의 혼합", "대한민국 만세",
    "\u1100\u1161\u11a8 decomposed hangul jamo", "ㄱㄴㄷㄹ compatibility jamo",
]

OTHER_SCRIPTS = [
    "مرحبا بالعالم!", "اللغة العربية جميلة جداً.", "القاهرة هي عاصمة مصر.", "١٢٣٤٥ أرقام عربية",
    "السلام عليكم ورحمة الله وبركاته", "هذا اختبار: English و 123 مختلط.",
    "नमस्ते दुनिया!", "हिंदी भाषा का परीक्षण।", "भारत की राजधानी नई दिल्ली है।", "१२३४५ देवनागरी अंक",
    "क्षत्रिय ज्ञान श्रृंगार", "मैं ठीक हूँ, धन्यवाद।",
    "Привет, мир!", "Съешь же ещё этих мягких французских булок.", "Γειά σου Κόσμε!", "שלום עולם!",
    "สวัสดีชาวโลก", "Xin chào thế giới! Tiếng Việt có dấu.", "Здравствуйте 123 мир",
    "ሰላም ልዑል", "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ", "Ὀδυσσεύς", "Zoë Saldaña naïve café résumé", "straße STRASSE ß ẞ",
    "e\u0301 combining acute (NFC composes)", "A\u030a ring", "\u212b angstrom sign", "\u00c5 precomposed",
    "ﬁ ligature ﬀ", "①②③ circled", "Ⅻ roman twelve", "½ ¾ ⅓", "x² y³ H₂O", "٣.١٤ ٠١٢",
]

EMOJI = [
    "😀", "Hello 😀 world", "👍🏽 thumbs up with skin tone", "👨‍👩‍👧‍👦 family ZWJ", "🏳️‍🌈 rainbow flag",
    "👩🏻‍💻 technologist", "🇺🇸🇬🇧🇯🇵 flags", "❤️ red heart with VS16", "🧑‍🤝‍🧑", "😂😂😂😂",
    "I love 🍕 and 🍣!", "emoji at end 🎉", "🎉 emoji at start", "✅❌⚠️", "©®™", "1️⃣ keycap",
    "🤷‍♂️🤷‍♀️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿 scotland tag sequence", "\u200d lone ZWJ", "a\u200bb zero width space",
]

CODE = [
    "def hello():\n    print(\"Hello, world!\")\n",
    "int main(void) {\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; i++) {\n\tif (a[i] > 0) {\n\t\tsum += a[i];\n\t}\n}",
    "class Foo:\n    def __init__(self, x):\n        self.x = x\n\n    def bar(self):\n\treturn self.x  # mixed tab\n",
    "const f = (a, b) => a + b;\nconsole.log(f(1, 2));",
    "if x == 1:\n  \ty = 2\n\t  z = 3\n",
    "    \t    \t mixed indentation",
    "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "<html><body><p class=\"x\">Hi</p></body></html>",
    "$ ls -la | grep '^d' > out.txt 2>&1",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "fn main() { let v: Vec<u32> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "    return {\n        'a': 1,\n        'b': 2,\n    }\n",
    "// comment\n/* block\n   comment */\n",
    "diff --git a/x b/x\n-old line\n+new line\n",
    "key1=value1\nkey2 = value2\n[section]\n",
    "\t\t\t\tdeeply\n\t\t\t\t\ttabbed",
    "a\t\tb\t \tc",
]

WHITESPACE = [
    "   ", "\n\n", "\n\n\n\n", " \n", "\n ", " \n ", "  \n  ", "\t", "\t\t\n", "\r\n\r\n", "\r", " \r\n",
    "a\u3000b ideographic space", "a\u00a0b nbsp", "a\u180eb mongolian vowel separator",
    "a\u2028b line separator", "a\u2029b paragraph sep", "a\u0085b next line", "a\u000bb vertical tab",
    "a\u000cb form feed", "x\u180e's", "a \u180e\u180e b", "\u180e\n", "\u2003em\u2003space", "x    \n    y", "end   ", "   start", "a\n \nb",
    "word \t\n word", "  \t  ", "a" + " " * 40 + "b", "\n" * 30, " " * 100,
]

DIGITS = [
    "0", "7", "42", "123", "1234", "12345678901234567890", "3.14", "1,234,567", "1e10", "0x1F",
    "2024年11月29日", "第3章第12节", "v1.2.3-beta4", "abc123def456", "123abc", "١٢٣", "١٢٣٤٥٦",
    "৪২", "๓๔๕", "ⅠⅡⅢⅣ", "¹²³", "⑩⑪⑫", "１２３ fullwidth", "99 bottles of beer", "-1.5e-3",
]

EDGE = [
    "", "\x00", "a\x00b", "\x01\x02\x03\x1f\x7f", "\uffff noncharacter", "\U0010ffff max code point",
    "\ufeffBOM at start", "\ufffd replacement char", "<|im_end", "<|im_end|", "im_end|>", "<||>",
    "<<|im_end|>>", "<|im_start|><|im_end|>", "<|endoftext|><|endoftext|><|endoftext|>",
    "<|IM_END|>", "< |im_end| >", "<think></think>", "<think>\nreasoning\n</think>\n\nanswer",
    "x" * 300, "ab" * 200, "🙂" * 50, "中" * 100, "'" * 20, "'''", "''s", "\"'s\"",
    "a'sb", "it's'", "'ll've're", "'s's's",
]

QWEN_ADDED = None  # filled from the tokenizer at run time


def added_token_strings(contents):
    out = []
    for c in contents:
        out += [c + " starts the text", "in the " + c + " middle", "ends with " + c, c,
                "x" + c + "y", c + c]
    return out


def random_strings(n, seed=1234):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "     ", "\n\t\r",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "你好世界中文字符测试", "こんにちはカタカナ", "한국어문자",
        "مرحبا", "नमस्ते", "😀👍🏽🎉❤️", "éàüßçñ", "\u3000\u00a0\u2003", "'s'll'd're",
    ]
    out = []
    for _ in range(n):
        length = rng.randint(1, 60)
        s = ""
        while len(s) < length:
            pool = rng.choice(pools)
            s += "".join(rng.choice(pool) for _ in range(rng.randint(1, 6)))
        out.append(s)
    return out


INVALID_UTF8_HEX = [
    "ff", "c3", "c328", "a0a1", "e28228", "e228a1", "f0288c bc", "f09f98", "edb080",  # surrogate
    "c0af", "f8a1a1a1a1", "48656c6c6fff", "e4bd", "f4908080", "80",
]


def build_corpus(qwen_added, llama_added):
    strings = ENGLISH + CJK + OTHER_SCRIPTS + EMOJI + CODE + WHITESPACE + DIGITS + EDGE
    strings += added_token_strings(qwen_added)
    strings += added_token_strings(llama_added[:16])
    # every Llama-3 added token (256, mostly reserved) at the start, middle and end
    for c in llama_added[16:]:
        strings += [c + "Start", "mid " + c + " dle", "the end." + c]
    strings += random_strings(80)
    seen, out = set(), []
    for s in strings:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def expected(tok, strings):
    from tokenizers import __version__
    ids, ids_ns, decoded = [], [], []
    for s in strings:
        tok.encode_special_tokens = False
        e = tok.encode(s).ids
        tok.encode_special_tokens = True
        ns = tok.encode(s).ids
        tok.encode_special_tokens = False
        ids.append(e)
        ids_ns.append(ns)
        d = tok.decode(e, skip_special_tokens=False)
        decoded.append(None if d == s else d)  # null: decodes to the input itself
    return {"tokenizers_version": __version__, "ids": ids, "ids_no_special": ids_ns,
            "decoded": decoded}


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "user", "content": "Think about it."},
     {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nThe answer is 4."},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "user", "content": "Q1"},
     {"role": "assistant", "content": "<think>\nreasoning one\n</think>\n\nA1"}],
    [{"role": "user", "content": "你好，介绍一下你自己。"},
     {"role": "assistant", "content": "我是一个AI助手。"}],
    [{"role": "user", "content": "call a tool"},
     {"role": "assistant", "content": "Calling."},
     {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "second"},
     {"role": "assistant", "content": "\n\n<think>\nok\n</think>\n\nIt is 21 degrees."}],
    [{"role": "user", "content": "multi\nline\n\ncontent  "},
     {"role": "system", "content": "late system"}],
]


def chat_fixture(tok_dir, tok):
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(tok_dir)
    out = []
    for conv in CONVERSATIONS:
        for gen in (True, False):
            for think in (True, False):
                text = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen,
                                              enable_thinking=think)
                out.append({"messages": conv, "add_generation_prompt": gen,
                            "enable_thinking": think, "text": text,
                            "ids": tok.encode(text).ids})
    return out


def bench_text(size=1 << 20, seed=7):
    rng = random.Random(seed)
    parts = ENGLISH + CJK + OTHER_SCRIPTS + EMOJI + CODE + DIGITS
    out, n = [], 0
    while n < size:
        s = rng.choice(parts)
        out.append(s)
        n += len(s.encode())
        out.append(rng.choice([" ", "\n", " ", "\n\n", "  "]))
        n += 1
    return "".join(out)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


SPM_EXTRA = [
    "<s>", "</s>", "<unk>", "<s>hello", "hello<s>", "<s> hello", "<s>  hello", "hello </s> world",
    " <s>  x", "<s><s>", "<s></s><unk>", "</s>\n<s>", "x<unk>y", "<s>[INST] Hi [/INST]",
    "[INST] What is 2+2? [/INST] 4</s>", " hello", "  hello", "   hello  ", "hello ", "\thello",
    "\n hello", "\u2581", "\u2581hello", "hello\u2581world", "\u2581\u2581 \u2581", " \u2581x",
    "<0x41>", "<0xE4><0xBD>", "<0x+F>", "a\u0300e\u0301", "\u0000 nul", "\U0001d518\U0001d52b\U0001d526",
    "\U0001f999 llama", "\ua66e", "\U00020000\U0002a6d6 ext-B", "\U000e0041 tag", "\uac00\ud7a3",
    "\u0d9a\u0dca\u200d\u0dbb sinhala", "\u1f00\u1f01\u1f02", "Mixtral-8x7B & Mistral-7B-v0.1",
    "def f(x):\n    return x  # \u2581", "  \n  \n", "a" * 5 + " " * 5 + "b", "\u00a0\u00a0x",
]

# SentencePiece-style tokenizer.json files (tools/make_spm_tokenizers.py) and
# variants of them: (base directory, top-level fields replaced). The
# Metaspace one is what transformers' LlamaConverter writes with
# legacy=False (prepend_scheme "first": no space after added tokens).
SPM_FILES = {
    "llama2": ("llama2", {}),
    "mistral": ("mistral", {}),
    "mistral_metaspace": ("mistral", {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                          "split": False}}),
    "llama2_metaspace_split": ("llama2", {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                          "split": True},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                    "split": True}}),
}


def spm_decode_cases(tok, n=300, seed=99):
    """Id lists mixing byte-fallback tokens (often invalid UTF-8 runs),
    ordinary and special tokens, with HF's decodes."""
    rng = random.Random(seed)
    vocab = tok.get_vocab_size()
    byte_ids = [tok.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    utf8 = [list("é€😀中".encode()[i:j]) for i, j in ((0, 2), (2, 5), (5, 9), (9, 12))]
    cases = []
    for _ in range(n):
        ids = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.35:
                ids.append(rng.choice(byte_ids))
            elif r < 0.5:  # a whole or cut multi-byte character as byte tokens
                seq = rng.choice(utf8)
                ids += [byte_ids[b] for b in seq[: rng.randint(1, len(seq))]]
            elif r < 0.6:
                ids.append(rng.randint(0, 2))
            else:
                ids.append(rng.randrange(259, vocab))
        cases.append(ids)
    return {"ids": cases, "text": [tok.decode(c, skip_special_tokens=False) for c in cases],
            "text_skip": [tok.decode(c, skip_special_tokens=True) for c in cases]}


def spm_fixtures(corpus):
    from tokenizers import Tokenizer, __version__
    extra = [s for s in dict.fromkeys(SPM_EXTRA) if s not in set(corpus)]
    dump(os.path.join(DATA, "corpus_spm.json"), {"strings": extra})
    strings = corpus + extra
    for name, (base, overrides) in SPM_FILES.items():
        with open(os.path.join(DATA, base, "tokenizer.json"), encoding="utf-8") as f:
            spec = json.load(f)
        spec.update(overrides)
        tok = Tokenizer.from_str(json.dumps(spec))
        out = expected(tok, strings)
        skip = []
        for s, ns in zip(strings, out["ids_no_special"]):
            d = tok.decode(ns, skip_special_tokens=True)
            skip.append(None if d == s else d)
        # null where equal to ids (most strings hold no special token)
        out["ids_no_special"] = [None if a == b else b for a, b in zip(out["ids"],
                                                                     out["ids_no_special"])]
        out.update({"base": base, "overrides": overrides, "decoded_skip": skip,
                    "decode_cases": spm_decode_cases(tok)})
        dump(os.path.join(DATA, f"expected_{name}.json"), out)


def synthetic_tokenizers():
    """Small byte-level BPE files that exercise options the real files do not
    use (split behaviours, invert, prefix space, added-token flags,
    TemplateProcessing, string merges). Returns {name: tokenizer.json dict}."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: i for i, b in enumerate(sorted(b2u))}
    merges = []
    for a, b in [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"),
                 ("Ġw", "or"), ("Ġwor", "l"), ("Ġworl", "d"), ("Ġ", "t"), ("Ġt", "he"),
                 ("1", "2"), ("Ġ", "Ġ"), ("e", "s"), ("t", "es"), ("tes", "t"), ("Ġ", "test")]:
        for tok in (a, b, a + b):
            vocab.setdefault(tok, len(vocab))
        merges.append([a, b])
    added = [
        {"id": len(vocab), "content": "<s>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True},
        {"id": len(vocab) + 1, "content": "[L]", "single_word": False, "lstrip": True,
         "rstrip": False, "normalized": False, "special": False},
        {"id": len(vocab) + 2, "content": "[R]", "single_word": False, "lstrip": False,
         "rstrip": True, "normalized": False, "special": True},
        {"id": len(vocab) + 3, "content": "word", "single_word": True, "lstrip": False,
         "rstrip": False, "normalized": False, "special": False},
        {"id": len(vocab) + 4, "content": "ﬁx", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": True, "special": False},
    ]

    def make(pre, normalizer=None, post=None, string_merges=False, ignore_merges=False,
             decoder=None):
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post,
                "decoder": decoder or {"type": "ByteLevel", "add_prefix_space": True,
                                       "trim_offsets": True, "use_regex": True},
                "model": {"type": "BPE", "dropout": None, "unk_token": None,
                          "continuing_subword_prefix": None, "end_of_word_suffix": None,
                          "fuse_unk": False, "byte_fallback": False,
                          "ignore_merges": ignore_merges, "vocab": vocab,
                          "merges": [" ".join(m) for m in merges] if string_merges else merges}}

    def bl(prefix=False, regex=False):
        return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True,
                "use_regex": regex}

    def split(pattern, behavior, invert=False, literal=False):
        return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
                "behavior": behavior, "invert": invert}

    def seq(*p):
        return {"type": "Sequence", "pretokenizers": list(p)}

    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[R]", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [added[0]["id"]], "tokens": ["<s>"]},
                                   "[R]": {"id": "[R]", "ids": [added[2]["id"]], "tokens": ["[R]"]}}}
    return {
        "removed": make(seq(split(" ", "Removed", literal=True), bl())),
        "merged_prev": make(seq(split("[,.!?]", "MergedWithPrevious"), bl())),
        "merged_next": make(seq(split("\\s+", "MergedWithNext"), bl())),
        "contiguous": make(seq(split("\\d", "Contiguous"), bl())),
        "invert": make(seq(split("\\p{L}+", "Isolated", invert=True), bl())),
        "invert_removed": make(seq(split("\\p{L}+", "Removed", invert=True), bl())),
        "prefix_space": make(bl(prefix=True, regex=True), string_merges=True),
        "split_then_prefix": make(seq(split("\\d+", "Isolated"), bl(prefix=True))),
        "empty_matches": make(seq(split("x*", "Isolated"), bl(prefix=True))),
        "lookahead_next": make(seq(split("(?=[A-Z])", "MergedWithNext"), bl())),
        "lookahead_removed": make(seq(split("(?=[a-z])|,", "Removed"), bl(prefix=True))),
        "nfkc_template": make(bl(regex=True), normalizer={"type": "NFKC"}, post=template,
                              ignore_merges=True),
        # byte-level files whose decoder also names ByteFallback (as some
        # transformers versions write, e.g. for SmolLM2)
        "bytelevel_bytefallback": make(bl(regex=True), decoder={"type": "Sequence", "decoders": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
             "use_regex": True}, {"type": "ByteFallback"}, {"type": "Fuse"}]}),
        "bytefallback_bytelevel": make(bl(regex=True), decoder={"type": "Sequence", "decoders": [
            {"type": "ByteFallback"}, {"type": "ByteLevel", "add_prefix_space": True,
                                       "trim_offsets": True, "use_regex": True}]}),
    }


SYNTHETIC_STRINGS = [
    "hello world", "hello, world! the test.", "  hello   world  ", "12 123 1212 a1b2c3",
    "the [L] hello", "hello   [L]world", "[R]   hello", "a [R]  \n b", "word", "a word here",
    "swordfish word_ words", "ﬁx fix ﬁxﬁx", "<s>hello</s>", "hello\n\nworld\t!", "",
    "test testtest tests", "hi, there. ok!", "naïve café ①", "ﬁ", "x [L][R] y",
    "HelloWorld FooBar", "axxbxxxc x", "xx", "a,b,,c", "CamelCaseWordsHere",
]


def synthetic_fixture():
    from tokenizers import Tokenizer
    outdir = os.path.join(DATA, "synthetic")
    os.makedirs(outdir, exist_ok=True)
    result, decoded = {}, {}
    for name, spec in synthetic_tokenizers().items():
        path = os.path.join(outdir, name + ".json")
        dump(path, spec)
        tok = Tokenizer.from_file(path)
        result[name] = [tok.encode(s).ids for s in SYNTHETIC_STRINGS]
        decoded[name] = [tok.decode(ids, skip_special_tokens=False) for ids in result[name]]
    dump(os.path.join(DATA, "expected_synthetic.json"),
         {"strings": SYNTHETIC_STRINGS, "ids": result, "decoded": decoded})


def dump(path, obj):
    with open(path, "w", encoding="utf-8", newline="") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=os.environ.get("WNA16_SHARED_DIR",
                                                       os.path.join(ROOT, "..", "shared")))
    ap.add_argument("--bench", help="write a ~1 MB benchmark text here and time HF on it")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    qdir = os.path.join(DATA, "qwen3")
    ldir = os.path.join(args.shared, "assets", "llama3-tokenizer")
    qwen = Tokenizer.from_file(os.path.join(qdir, "tokenizer.json"))
    llama = Tokenizer.from_file(os.path.join(ldir, "tokenizer.json"))
    if args.bench:
        text = bench_text()
        with open(args.bench, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        for name, tok in (("qwen3", qwen), ("llama3", llama)):
            tok.encode(text[:1000])
            t0 = time.perf_counter()
            n = len(tok.encode(text).ids)
            dt = time.perf_counter() - t0
            print(f"HF tokenizers {name}: {len(text.encode())} bytes -> {n} ids in {dt*1000:.1f} ms")
        return
    qwen_added = [t.content for t in sorted(qwen.get_added_tokens_decoder().values(),
                                             key=lambda t: t.content)]
    llama_added = [t.content for _, t in sorted(llama.get_added_tokens_decoder().items())]
    corpus = build_corpus(sorted(set(qwen_added)), llama_added)
    assert len(corpus) >= 300, len(corpus)
    dump(os.path.join(DATA, "corpus.json"),
         {"strings": corpus, "invalid_utf8_hex": [h.replace(" ", "") for h in INVALID_UTF8_HEX]})
    dump(os.path.join(DATA, "expected_qwen3.json"), expected(qwen, corpus))
    dump(os.path.join(DATA, "expected_llama3.json"), expected(llama, corpus))
    for extra in ("gpt2", "deepseek_v3"):  # other byte-level BPE files, kept in shared/
        path = os.path.join(args.shared, "assets", extra + "-tokenizer", "tokenizer.json")
        if os.path.exists(path):
            dump(os.path.join(DATA, f"expected_{extra}.json"),
                 expected(Tokenizer.from_file(path), corpus))
    dump(os.path.join(DATA, "chat_qwen3.json"), chat_fixture(qdir, qwen))
    synthetic_fixture()
    spm_fixtures(corpus)
    print(f"{len(corpus)} strings, {len(CONVERSATIONS) * 4} chat cases")


if __name__ == "__main__":
    sys.exit(main())
