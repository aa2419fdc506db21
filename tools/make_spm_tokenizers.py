#!/usr/bin/env python3
"""Builds the SentencePiece-style (BPE + byte fallback) tokenizer.json test
files from sentencepiece vocabularies that PyPI packages ship, the way
Hugging Face made the published files: transformers' LlamaConverter
(LlamaTokenizerFast(from_slow=True)).

Dev-only (needs scripts/requirements-spm-convert.txt in its own venv; the tests never
run it). Run from the repo root:

    python3 -m venv /tmp/spmvenv && /tmp/spmvenv/bin/pip install -r scripts/requirements-spm-convert.txt
    /tmp/spmvenv/bin/pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/dl
    /tmp/spmvenv/bin/pip download --no-deps mistral-common==1.13.1 -d /tmp/dl
    /tmp/spmvenv/bin/python tools/make_spm_tokenizers.py /tmp/dl

Sources:
  llama2   llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf:
           the Llama-2 vocabulary (pieces, scores, types of Meta's tokenizer.model) in GGUF.
           It is turned back into a sentencepiece ModelProto, then converted. The result is
           checked against llama.cpp's ggml-vocab-llama-spm.gguf.inp/.out (ids that HF's
           Llama-2 tokenizer gave).
  mistral  mistral-common 1.13.1 wheel, mistral_common/data/tokenizer.model.v1: the
           Mistral-7B-v0.1 / Mixtral-8x7B-v0.1 sentencepiece model.
Both converted with legacy=True (normalizer Prepend + Replace, no pre-tokenizer), as the
published Llama-2 and Mistral/Mixtral v0.1 tokenizer.json files are.
"""
import glob
import json
import os
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")
GGUF = "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf"


def gguf_to_model(gguf_path, model_path):
    import gguf
    from sentencepiece import sentencepiece_model_pb2 as pb

    r = gguf.GGUFReader(gguf_path)

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in arr("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(tokens)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id = 0, 1, 2
    m.trainer_spec.pad_id = -1
    m.trainer_spec.unk_piece, m.trainer_spec.bos_piece, m.trainer_spec.eos_piece = "<unk>", "<s>", "</s>"
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, ty  # GGUF token types use sentencepiece's numbering
    with open(model_path, "wb") as f:
        f.write(m.SerializeToString())


def convert(model_path, out_dir):
    from transformers import LlamaTokenizerFast

    tok = LlamaTokenizerFast(vocab_file=model_path, legacy=True, from_slow=True, add_prefix_space=True,
                             add_bos_token=True, add_eos_token=False)
    os.makedirs(out_dir, exist_ok=True)
    tok.backend_tokenizer.save(os.path.join(out_dir, "tokenizer.json"), pretty=False)
    return tok


def check_llama_vectors(tok, inp, out):
    texts = inp.split("\n__ggml_vocab_test__\n")[:-1]
    want = [[int(x) for x in line.split()] for line in out.split("\n")[: len(texts)]]
    bad = [t for t, w in zip(texts, want) if tok.encode(t, add_special_tokens=False) != w]
    print(f"llama2: {len(texts) - len(bad)}/{len(texts)} llama.cpp test vectors equal")
    if bad:
        sys.exit(f"llama2 conversion differs from the published tokenizer on {bad[:3]!r}")


def main():
    dl = sys.argv[1] if len(sys.argv) > 1 else "/tmp/dl"
    with tempfile.TemporaryDirectory() as tmp:
        sdist = glob.glob(os.path.join(dl, "llama_cpp_python-*.tar.gz"))[0]
        with tarfile.open(sdist) as tf:
            top = tf.getnames()[0].split("/")[0]
            g = tf.extractfile(f"{top}/{GGUF}").read()
            inp = tf.extractfile(f"{top}/{GGUF}.inp").read().decode()
            out = tf.extractfile(f"{top}/{GGUF}.out").read().decode()
        with open(os.path.join(tmp, "llama.gguf"), "wb") as f:
            f.write(g)
        gguf_to_model(os.path.join(tmp, "llama.gguf"), os.path.join(tmp, "llama2.model"))
        tok = convert(os.path.join(tmp, "llama2.model"), os.path.join(OUT, "llama2"))
        check_llama_vectors(tok, inp, out)
        wheel = glob.glob(os.path.join(dl, "mistral_common-*.whl"))[0]
        with zipfile.ZipFile(wheel) as z:
            with open(os.path.join(tmp, "mistral.model"), "wb") as f:
                f.write(z.read("mistral_common/data/tokenizer.model.v1"))
        convert(os.path.join(tmp, "mistral.model"), os.path.join(OUT, "mistral"))
    for name in ("llama2", "mistral"):
        path = os.path.join(OUT, name, "tokenizer.json")
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
