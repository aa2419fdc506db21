"""One engine under every front end: 16 greedy requests (a few ending on a
stop string) give the same tokens and text from the C engine
(docs/examples/engine_demo.c), `wna16 generate`, the server (concurrently)
and the Python package (LLM.generate, one batch). The model is the demo
(random weights, Qwen3's tokenizer)."""
import concurrent.futures as cf
import json
import os
import subprocess
import sys

import pytest

from test_serve import CLI, SRC, Server, model_dir, post  # noqa: F401

DEMO = os.environ.get("WNA16_ENGINE_DEMO")
N = 16
MAX_TOKENS = 12
PROMPTS = [f"Request {i}: tell me about the number {i * 7}" for i in range(N)]


def cli_generate(d, prompt, stop=None):
    args = [CLI, "--quiet", "generate", "--model", d, "--prompt", prompt, "-n", str(MAX_TOKENS),
            "--json"]
    if stop:
        args += ["--stop", stop]
    p = subprocess.run(args, capture_output=True, text=True, check=True)
    j = json.loads(p.stdout)
    return j["tokens"], j["text"]


@pytest.fixture(scope="module")
def reference(model_dir):
    """`wna16 generate` per prompt; the odd ones then again with a stop
    string taken from the middle of their text."""
    ref = [cli_generate(model_dir, p) for p in PROMPTS]
    stops = [None] * N
    for i in range(1, N, 2):
        text = ref[i][1]
        if len(text) >= 6:
            stops[i] = text[len(text) // 2:len(text) // 2 + 2]
            ref[i] = cli_generate(model_dir, PROMPTS[i], stops[i])
            assert ref[i][1] == text[:text.index(stops[i])]
    assert sum(s is not None for s in stops) >= 4
    return ref, stops


@pytest.mark.skipif(not DEMO, reason="WNA16_ENGINE_DEMO (the example program) not given")
def test_c_engine_equals_generate(model_dir, reference):
    ref, stops = reference
    p = subprocess.run([DEMO, model_dir, str(MAX_TOKENS), *PROMPTS], capture_output=True,
                       text=True, check=True)
    got = [json.loads(line) for line in p.stdout.splitlines()]
    assert [g["id"] for g in got] == list(range(N))
    for i, g in enumerate(got):
        if stops[i] is None:
            assert (g["tokens"], g["text"]) == tuple(ref[i]), i


def test_server_equals_generate(model_dir, reference):
    ref, stops = reference
    s = Server(model_dir, "--api-key", "k")
    try:
        def one(i):
            body = {"prompt": PROMPTS[i], "max_tokens": MAX_TOKENS, "temperature": 0}
            if stops[i]:
                body["stop"] = [stops[i]]
            st, b = post(s.url, "/v1/completions", body, key="k")
            assert st == 200, b
            return b["usage"]["completion_tokens"], b["choices"][0]["text"]

        with cf.ThreadPoolExecutor(N) as pool:
            got = list(pool.map(one, range(N)))
    finally:
        assert s.stop() == 0
    for i in range(N):
        assert got[i] == (len(ref[i][0]), ref[i][1]), i


def test_python_equals_generate(model_dir, reference):
    ref, stops = reference
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
    code = f"""
import json, sys, wna16
prompts, stops = json.loads(sys.argv[1]), json.loads(sys.argv[2])
with wna16.LLM(sys.argv[3]) as llm:
    params = [wna16.SamplingParams(max_tokens={MAX_TOKENS}, stop=s, temperature=0) for s in stops]
    outs = llm.generate(prompts, params)
print(json.dumps([[o.outputs[0].token_ids, o.outputs[0].text] for o in outs]))
"""
    if not os.environ.get("WNA16_LIBRARY"):
        pytest.skip("WNA16_LIBRARY (the shared library) not given")
    p = subprocess.run([sys.executable, "-c", code, json.dumps(PROMPTS), json.dumps(stops),
                        model_dir], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    for i in range(N):
        assert got[i] == list(ref[i]), i
