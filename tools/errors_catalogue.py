#!/usr/bin/env python3
"""Generates docs/errors.md, the bad-input catalogue, from the code itself:
every status of include/wna16.h (with its meaning below), and every test
that asserts a status together with a message substring (CHECK_STATUS,
EXPECT, QCASE and expect_load_error calls in tests/*.c).

Run from the repository root: python3 tools/errors_catalogue.py
Only the standard library is used."""
import os
import re

MEANING = {
    "OK": ("success", "-"),
    "ERR_INVALID_ARGUMENT": ("a caller passed NULL, a negative size, a bad range, an unknown role", "fix the call"),
    "ERR_OUT_OF_MEMORY": ("an allocation failed (or the WNA16_MAX_ALLOC cap refused it)", "free memory, shorter --ctx, fewer threads"),
    "ERR_IO": ("a file or directory cannot be opened, read, written or renamed; a path that is not a regular file", "check the path and permissions"),
    "ERR_UNSUPPORTED": ("an architecture, tokenizer feature or chat template wna16 does not run", "the message names what is supported"),
    "ERR_INTERNAL": ("a thread could not be started", "report it"),
    "ERR_LIMIT": ("a size cap: one pre-token over 512 MiB, an allocation over WNA16_MAX_ALLOC; an engine whose waiting queue is full", "raise the cap, split the input, or retry later"),
    "ERR_ABORTED": ("the context's abort callback asked to stop (load, quantize, generate)", "none: the caller asked for it"),
    "ERR_UNAVAILABLE": ("an engine that is shutting down, or whose model failed for good", "start a new engine (the detail says why the model failed)"),
    "ERR_HEADER_TOO_SMALL": ("a safetensors file shorter than its 8-byte length prefix", "the file is truncated: re-download"),
    "ERR_HEADER_TOO_LARGE": ("a declared JSON header over 100,000,000 bytes", "the file is corrupt"),
    "ERR_INVALID_HEADER_LENGTH": ("8 + header length past the end of the file", "the file is truncated"),
    "ERR_INVALID_HEADER": ("header bytes that are not UTF-8 (overlongs, surrogates)", "the file is corrupt"),
    "ERR_INVALID_HEADER_DESERIALIZATION": ("the header is not a JSON object of tensor entries: syntax, wrong types, missing fields, rank > 8, non-string metadata", "re-save with the safetensors library"),
    "ERR_DUPLICATE_KEY": ("a key twice in one JSON object (tensor names, __metadata__, config.json, the index), or a tensor in two shards / added twice to the writer", "re-export the file"),
    "ERR_UNKNOWN_DTYPE": ("a dtype string the reference crate does not know (case and spaces matter)", "the file is not safetensors"),
    "ERR_INVALID_OFFSET": ("tensor byte ranges that do not tile the data section from 0 (gaps, overlaps, END < BEGIN)", "the file is corrupt"),
    "ERR_VALIDATION_OVERFLOW": ("a shape product or byte size over 64 bits", "the file is corrupt"),
    "ERR_MISALIGNED_SLICE": ("a tensor that is not a whole number of bytes (sub-byte dtypes)", "the file is corrupt"),
    "ERR_TENSOR_INVALID_INFO": ("a byte range whose length disagrees with shape x dtype", "the file is corrupt"),
    "ERR_METADATA_INCOMPLETE_BUFFER": ("the tensors do not end exactly at the end of the file (truncated, or trailing bytes)", "re-download; trailing bytes may hide a polyglot"),
    "ERR_TENSOR_NOT_FOUND": ("a lookup of a module or tensor the checkpoint does not have", "check the name"),
    "ERR_INDEX_INVALID": ("model.safetensors.index.json that is not JSON, lacks weight_map, or maps to non-strings", "regenerate the index"),
    "ERR_SHARD_MISSING": ("no model.safetensors and no index; or a shard the index names is absent", "re-download the missing shard"),
    "ERR_PATH_UNSAFE": ("an index naming a shard with a path (../, /abs, subdirectories)", "shards must be plain file names"),
    "ERR_INDEX_MISMATCH": ("index and shards disagree: a mapped tensor absent, or a shard tensor not mapped to it", "regenerate the index"),
    "ERR_CONFIG_INVALID": ("config.json missing sizes, zero/negative/huge sizes, heads not a multiple of kv heads, top_k > experts; tensor names past num_hidden_layers or num_experts", "fix config.json to match the weights"),
    "ERR_QUANT_CONFIG_INVALID": ("a quantization_config that contradicts itself or the tensors: bad types, unknown strategy/actorder, group_size with a non-group strategy, bad regex, ignored module that is quantized, untargeted quantized module", "re-export the checkpoint"),
    "ERR_RUNTIME_ACTORDER": ("actorder group/dynamic (or true) in a config group; a non-trivial weight_g_idx / GPTQ g_idx", "re-quantize with actorder=static (or none)"),
    "ERR_SHAPE_MISMATCH": ("weight_packed, weight_scale, weight_zero_point, weight_shape, qzeros or g_idx of the wrong shape; config sizes that disagree with tensors", "re-export; the message gives expected vs found"),
    "ERR_TENSOR_MISSING": ("a tensor a quantized module needs (scale, shape, zero point), a targeted module without weight_packed, an expert missing from a layer, a model tensor (norms, embeddings)", "re-export, or add the module to the ignore list"),
    "ERR_GROUP_SIZE": ("group_size 0, < -1, or not dividing the input size; a group size the kernels do not take", "re-quantize with a group size that divides K"),
    "ERR_UNSUPPORTED_BITS": ("num_bits other than 4 or 8", "re-quantize as W4A16 or W8A16"),
    "ERR_UNSUPPORTED_SCHEME": ("not weight-only int (float types, input activations), tensor strategy, a format other than pack-quantized, an unknown quant_method or GPTQ checkpoint_format", "re-quantize with a WNA16 scheme"),
    "ERR_BAD_SCALE": ("a scale that is 0, negative, NaN or Inf", "the checkpoint is corrupt: re-quantize"),
    "ERR_BAD_ZERO_POINT": ("an unpacked zero point outside [-2^(b-1), 2^(b-1)-1]; an int8 legacy GPTQ zero point of 256 (stored 255); a packed zero above 2^b", "the checkpoint is corrupt, or re-export int8 GPTQ v1 as gptq_v2 / compressed-tensors"),
    "ERR_BAD_DTYPE": ("a tensor of a dtype its role cannot have (packed weights not I32, scales not float)", "re-export"),
    "ERR_TP_INDIVISIBLE": ("a tensor-parallel split that is not a whole number of groups, packed words, heads or rows", "smaller TP, a group size that divides the split, or expert parallelism (the message says which)"),
    "ERR_TOKENIZER_INVALID": ("a tokenizer.json that is not valid: missing/unknown model, merges naming unknown tokens, bad ids", "use the model's own tokenizer.json"),
    "ERR_TOKENIZER_REGEX": ("a pre-tokenizer regex PCRE2 cannot compile or run", "the tokenizer uses a regex feature we lack"),
    "ERR_INVALID_UTF8": ("text to encode that is not valid UTF-8 (the offset is given)", "fix the input encoding"),
    "ERR_TOKEN_ID": ("a token id outside the vocabulary (decode, model input)", "check the ids"),
    "ERR_CONTEXT_OVERFLOW": ("a prompt longer than the KV cache, a context over max_position_embeddings", "load with a longer --ctx or start a new sequence"),
    "ERR_EXPERT_ID": ("an expert id out of range in the MoE dispatch", "internal routing bug: report it"),
    "ERR_COMM": ("a communicator failure (MPI error, mismatched collective)", "check the launch (mpirun -np = --tp)"),
    "ERR_PEER_FAILED": ("another TP rank failed or died", "see that rank's message"),
}

def statuses():
    text = open("include/wna16.h").read()
    body = text[text.index("typedef enum wna16_status"):text.index("} wna16_status;")]
    return re.findall(r"WNA16_(\w+)\s*=\s*(\d+)", body)

CALL = re.compile(r"(CHECK_STATUS|EXPECT|QCASE|expect_load_error)\s*\(")

def split_args(s, start):
    depth, args, cur, i, quote = 0, [], "", start, None
    while i < len(s):
        c = s[i]
        if quote:
            cur += c
            if c == "\\":
                cur += s[i + 1]; i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c; cur += c
        elif c in "([{":
            depth += 1; cur += c
        elif c in ")]}":
            if depth == 0:
                args.append(cur.strip()); return args, i
            depth -= 1; cur += c
        elif c == "," and depth == 0:
            args.append(cur.strip()); cur = ""
        else:
            cur += c
        i += 1
    return args, i

def context_before(src, pos):
    """The statements that built the input of an EXPECT: lines back to the
    previous EXPECT or fresh() copy."""
    lines = src[:pos].split("\n")[:-1]
    picked = []
    for l in reversed(lines):
        t = l.strip()
        if not t or t.startswith("EXPECT") or t.startswith("/*"):
            break
        if t.startswith("d = fresh(") or "fresh(" in t:
            picked.append(t)
            break
        picked.append(t)
    picked = [p for p in reversed(picked) if not p.startswith("snprintf(name")]
    return " ".join(picked) if picked else "(see test)"

def cases():
    rows = []
    for name in sorted(os.listdir("tests")):
        if not name.endswith(".c"):
            continue
        src = open(os.path.join("tests", name)).read()
        for m in CALL.finditer(src):
            if src[max(0, m.start() - 8):m.start()].strip().endswith("define"):
                continue
            args, _ = split_args(src, m.end())
            line = src.count("\n", 0, m.start()) + 1
            kind = m.group(1)
            status = next((a for a in args if a.startswith("WNA16_ERR_") or a == "WNA16_OK"), None)
            if not status or status == "WNA16_OK":
                continue
            msg = args[-1] if args[-1].startswith('"') else ""
            what = {"CHECK_STATUS": lambda: args[1], "EXPECT": lambda: context_before(src, m.start()),
                    "QCASE": lambda: args[0] + ": " + args[1],
                    "expect_load_error": lambda: "tokenizer.json " + args[1]}[kind]()
            what = re.sub(r"\s+", " ", what)
            if len(what) > 110:
                what = what[:107] + "..."
            rows.append((status[6:], name, line, what, msg))
    return rows

def main():
    rows = cases()
    out = ["# Errors: every status, what triggers it, and the tests that prove it",
           "",
           "Generated by `tools/errors_catalogue.py` from `include/wna16.h` and the assertions in",
           "`tests/*.c` (each row is a test that feeds the bad input and asserts the status *and*",
           "a substring of the message). Every public call returns a `wna16_status`; the detail",
           "(file, tensor, expected vs found, and the fix) is in `wna16_ctx_error(ctx)`. Numeric",
           "values are pinned. Regenerate after adding tests: `python3 tools/errors_catalogue.py`.",
           "",
           "## Fuzzing",
           "",
           "Six in-tree libFuzzer targets (`tests/fuzz/`, replayed as ctests on every run;",
           "`scripts/fuzz.sh 60` in CI). Each ran 10.5 million executions locally with no crash,",
           "leak or sanitizer report (clang 14, ASan+UBSan, `-rss_limit_mb=2560 -timeout=25`,",
           "`WNA16_MAX_ALLOC=256 MiB`); full method and seeds in `docs/fuzzing.md`:",
           "",
           "```sh",
           "CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWNA16_FUZZ=ON",
           "cmake --build build-fuzz -j2",
           "build-fuzz/tests/fuzz/fuzz_$t /tmp/fz/$t tests/fuzz/corpus/$t -dict=tests/fuzz/$t.dict \\",
           "  -runs=10500000 -rss_limit_mb=2560 -timeout=25 -print_final_stats=1",
           "```",
           "",
           "| target | executions | wall time | exec/s |",
           "|---|---:|---:|---:|",
           "| `shard` | 10,500,000 | 156 s | 67,307 |",
           "| `config` | 10,500,000 | 173 s | 60,693 |",
           "| `safetensors` | 10,500,000 | 387 s | 27,131 |",
           "| `tokenizer_encode` | 10,500,000 | 687 s | 15,283 |",
           "| `checkpoint` | 10,500,000 | 1,717 s | 6,115 |",
           "| `tokenizer_load` | 10,500,000 | 1,290 s | 8,139 |",
           "",
           "Found and fixed by them: a signed overflow of `in x bits` in the sharding plan, a",
           "`NULL + 0` in the tokenizer's word cache, and (TSan) `target_clones` dispatch running",
           "before the TSan runtime in the quantizer.",
           "",
           "## Statuses", "",
           "| value | status | triggered by | what to do |", "|---:|---|---|---|"]
    for name, value in statuses():
        meaning, fix = MEANING.get(name, ("", ""))
        out.append(f"| {value} | `WNA16_{name}` | {meaning} | {fix} |")
    out += ["", f"## Catalogue ({len(rows)} tested cases)", "",
            "| status | input | message contains | test |", "|---|---|---|---|"]
    for status, name, line, what, msg in sorted(rows, key=lambda r: (r[0], r[1], r[2])):
        what = what.replace("|", "\\|")
        msg = msg.replace("|", "\\|")
        out.append(f"| `{status}` | `{what}` | {msg} | `tests/{name}:{line}` |")
    open("docs/errors.md", "w").write("\n".join(out) + "\n")
    print(f"docs/errors.md: {len(rows)} cases")

if __name__ == "__main__":
    main()
