"""`wna16 serve` against a real client: the OpenAI Python client and curl,
batch invariance (16 concurrent prompts get the tokens each gets alone and
that `wna16 generate` gives), preemption under a KV cache too small for the
load, client disconnect, every error status, SIGTERM drain and flat memory
over 2,000 requests. The model is the embedded demo (random weights,
Qwen3's tokenizer), written by `wna16 synth`."""
import concurrent.futures as cf
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request

import openai
import pytest

CLI = os.environ.get("WNA16_CLI", "build/wna16")
SRC = os.environ.get("WNA16_SOURCE_DIR", ".")
KEY = "test-key-123"


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    subprocess.run([CLI, "synth", "--out", str(d), "--preset", "demo", "--tokenizer",
                    os.path.join(SRC, "tests/data/tokenizer/qwen3")], check=True,
                   capture_output=True)
    return str(d)


class Server:
    def __init__(self, model_dir, *args, launcher=()):
        self.log = open(os.path.join(model_dir, f"serve-{time.time_ns()}.log"), "w+")
        self.p = subprocess.Popen([*launcher, CLI, "serve", "--model", model_dir, "--port", "0",
                                   "--served-model-name", "demo", *args],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            self.log.seek(0)
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                self.url = f"http://127.0.0.1:{self.port}"
                return
            assert self.p.poll() is None, self.text()
            time.sleep(0.05)
        raise AssertionError("server did not start: " + self.text())

    def text(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            self.p.wait(timeout=60)
        return self.p.returncode

    def metrics(self, key=None):
        req = urllib.request.Request(self.url + "/metrics")
        if key:
            req.add_header("Authorization", "Bearer " + key)
        text = urllib.request.urlopen(req, timeout=10).read().decode()
        return {m.group(1): float(m.group(2))
                for m in re.finditer(r"^wna16:(\w+) ([0-9.e+-]+)$", text, re.M)}


def post(url, path, body, key=KEY, raw=None, timeout=60):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="session")
def server(model_dir):
    s = Server(model_dir, "--api-key", KEY, "--max-body-mib", "0.05")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="session")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY)


PROMPTS = [" ".join(f"word{(i * 7 + j) % 50}" for j in range(3 + (i * 5) % 40)) for i in range(16)]
SHARED = "You are a careful assistant who answers briefly. " * 6
PROMPTS[5:9] = [SHARED + f"Question {i}?" for i in range(4)]


def greedy(client, prompt, n=12):
    r = client.completions.create(model="demo", prompt=prompt, max_tokens=n, temperature=0,
                                  extra_body={"ignore_eos": True})
    return r.choices[0].text


def test_openai_completion_shapes(client):
    r = client.completions.create(model="demo", prompt="Hello world", max_tokens=5, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.choices[0].finish_reason in ("length", "stop") and isinstance(r.choices[0].text, str)
    assert r.usage.prompt_tokens == 2 and r.usage.completion_tokens <= 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_openai_chat_and_streams(client):
    r = client.chat.completions.create(model="demo", max_tokens=6, temperature=0,
                                       messages=[{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Hi"}])
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    whole = r.choices[0].message.content
    parts = list(client.chat.completions.create(
        model="demo", max_tokens=6, temperature=0, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]))
    assert parts[0].choices[0].delta.role == "assistant"
    text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert text == whole
    assert [p.choices[0].finish_reason for p in parts if p.choices][-1] in ("length", "stop")
    assert parts[-1].usage.completion_tokens == r.usage.completion_tokens
    s = "".join(c.choices[0].text for c in client.completions.create(
        model="demo", prompt="Hello world", max_tokens=5, temperature=0, stream=True))
    assert s == client.completions.create(model="demo", prompt="Hello world", max_tokens=5,
                                          temperature=0).choices[0].text


def test_curl_sse_framing(server):
    out = subprocess.run(
        ["curl", "-sN", server.url + "/v1/completions", "-H", "Authorization: Bearer " + KEY,
         "-H", "Content-Type: application/json",
         "-d", json.dumps({"prompt": "a b c", "max_tokens": 4, "stream": True})],
        capture_output=True, text=True, timeout=60).stdout
    events = out.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    for e in events[:-2]:
        assert e.startswith("data: ")
        json.loads(e[6:])
    whole = subprocess.run(
        ["curl", "-s", server.url + "/v1/chat/completions", "-H", "Authorization: Bearer " + KEY,
         "-H", "Content-Type: application/json",
         "-d", json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3})],
        capture_output=True, text=True, timeout=60).stdout
    assert json.loads(whole)["choices"][0]["message"]["role"] == "assistant"


def cli_prompt_nll(model_dir, text):
    """`wna16 perplexity` on text's ids: the model's own single-sequence
    cache (wna16_model_logprobs), not the server's paged batches."""
    ids = subprocess.run([CLI, "tokenize", "--tokenizer", model_dir, "--text", text],
                         capture_output=True, text=True, check=True).stdout.split()
    out = subprocess.run([CLI, "perplexity", "--model", model_dir, "--ids", ",".join(ids),
                          "--json"], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    return r["nll_mean"], r["scored_tokens"], len(ids)


def test_echo_logprobs_score_the_prompt(client, server, model_dir):
    # 100+ tokens: past one step's prompt-logits rows (32) and several KV blocks,
    # sent twice so the second would find the first's blocks in the prefix cache
    prompt = SHARED + "Then the question: how many legs does a spider have?"
    runs = [client.completions.create(model="demo", prompt=prompt, max_tokens=0, echo=True,
                                      logprobs=2, temperature=0) for _ in range(2)]
    nll, scored, n_ids = cli_prompt_nll(model_dir, prompt)
    for r in runs:
        c, lp = r.choices[0], r.choices[0].logprobs
        assert c.text == prompt and c.finish_reason == "length"
        assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == n_ids > 64
        assert r.usage.prompt_tokens_details.cached_tokens == 0
        assert len(lp.tokens) == n_ids and "".join(lp.tokens) == prompt
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(n_ids)]
        for got, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
            assert len(top) == 2 and got <= max(top.values()) + 1e-6 and got < 0
        mean = -sum(lp.token_logprobs[1:]) / (n_ids - 1)
        assert scored == n_ids - 1 and abs(mean - nll) <= 1e-4 * nll, (mean, nll)
    assert runs[0].choices[0].logprobs == runs[1].choices[0].logprobs
    # echo with generation: the prompt's logprobs, then the generated tokens'
    # (the same as without echo), streamed or not
    kw = dict(model="demo", prompt=prompt, max_tokens=4, logprobs=1, temperature=0,
              extra_body={"ignore_eos": True})
    gen = client.completions.create(**kw).choices[0]
    both = client.completions.create(echo=True, **kw).choices[0]
    assert both.text == prompt + gen.text
    assert both.logprobs.token_logprobs == (runs[0].choices[0].logprobs.token_logprobs
                                            + gen.logprobs.token_logprobs)
    parts = list(client.completions.create(echo=True, stream=True, **kw))
    assert "".join(p.choices[0].text for p in parts) == both.text
    streamed = [x for p in parts if p.choices[0].logprobs
                for x in p.choices[0].logprobs.token_logprobs]
    assert streamed == both.logprobs.token_logprobs
    offsets = [x for p in parts if p.choices[0].logprobs for x in p.choices[0].logprobs.text_offset]
    assert offsets == both.logprobs.text_offset
    st, b = post(server.url, "/v1/completions", {"prompt": "Hi", "max_tokens": 0})
    assert st == 400 and "unless 'echo' is true" in b["error"]["message"]


def test_concurrent_scored_prompts(client, server):
    # three scored prompts at once share one step's 32 prompt-logits rows: a
    # request left without rows in a step waits for the next (engine.c
    # build_rows), and each gets the logprobs it gets alone
    prompts = [SHARED + f"Question {i}: what comes after {i}?" for i in range(3)]
    kw = dict(model="demo", max_tokens=0, echo=True, logprobs=1, temperature=0)
    alone = [client.completions.create(prompt=p, **kw).choices[0].logprobs for p in prompts]
    with cf.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: client.completions.create(prompt=p, **kw), prompts))
    for a, t in zip(alone, together):
        assert t.choices[0].logprobs == a and len(a.tokens) > 32


def test_batch_invariance(client, server, model_dir):
    alone = [greedy(client, p) for p in PROMPTS]
    with cf.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda p: greedy(client, p), PROMPTS))
    assert together == alone
    m = server.metrics(KEY)
    assert m["prefix_cache_hits_total"] > 0
    for i in (0, 5, 11):
        out = subprocess.run([CLI, "generate", "--model", model_dir, "--prompt", PROMPTS[i],
                              "-n", "12", "--json", "--ignore-eos"], capture_output=True,
                             text=True)
        if out.returncode != 0 and "--ignore-eos" in out.stderr:
            out = subprocess.run([CLI, "generate", "--model", model_dir, "--prompt", PROMPTS[i],
                                  "-n", "12", "--json"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        text = json.loads(out.stdout)["text"]
        assert alone[i].startswith(text), (i, text, alone[i])


def test_batch_invariance_without_prefix_caching(model_dir, client):
    s = Server(model_dir, "--no-enable-prefix-caching")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
        with cf.ThreadPoolExecutor(16) as pool:
            together = list(pool.map(lambda p: greedy(c, p), PROMPTS))
        assert together == [greedy(client, p) for p in PROMPTS]
        assert s.metrics()["prefix_cache_hits_total"] == 0
    finally:
        assert s.stop() == 0


def test_preemption_small_cache(model_dir, client):
    s = Server(model_dir, "--num-kv-blocks", "10", "--max-model-len", "160")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
        prompts = PROMPTS[8:16]
        with cf.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda p: greedy(c, p, 40), prompts))
        assert got == [greedy(client, p, 40) for p in prompts]
        m = s.metrics()
        assert m["num_preemptions_total"] > 0 and m["kv_cache_blocks_used"] == 0
    finally:
        assert s.stop() == 0


def test_errors(server):
    u = server.url
    st, b = post(u, "/v1/completions", None, raw=b"{not json")
    assert st == 400 and b["error"]["code"] == 400 and "JSON" in b["error"]["message"]
    assert set(b["error"]) >= {"message", "type", "code"}
    st, b = post(u, "/v1/completions", {"prompt": "x", "temperature": "hot"})
    assert st == 400 and "'temperature' must be a number" in b["error"]["message"]
    st, b = post(u, "/v1/completions", {"prompt": [1, 2, 10 ** 9]})
    assert st == 400 and "outside the vocabulary" in b["error"]["message"]
    st, b = post(u, "/v1/completions", {"prompt": "word " * 5000, "max_tokens": 4})
    assert st == 400 and "maximum context length" in b["error"]["message"]
    st, b = post(u, "/v1/completions", {"prompt": "x"}, key=None)
    assert st == 401 and b["error"]["type"] == "AuthenticationError"
    st, b = post(u, "/v1/completions", {"prompt": "x"}, key="wrong")
    assert st == 401
    st, b = post(u, "/v1/completions", {"prompt": "x" * 100000})
    assert st == 413
    st, b = post(u, "/v1/completions", {"prompt": "x", "model": "other"})
    assert st == 404 and "does not exist" in b["error"]["message"]
    st, b = post(u, "/v1/completions", {"prompt": "x", "n": 65})
    assert st == 400 and "'n'" in b["error"]["message"]
    st, b = post(u, "/tokenize", {"prompt": "Hello world"})
    assert st == 200 and b["count"] == 2
    st, d = post(u, "/detokenize", {"tokens": b["tokens"]})
    assert st == 200 and d["prompt"] == "Hello world"
    assert urllib.request.urlopen(u + "/health").status == 200


def test_queue_full(model_dir):
    s = Server(model_dir, "--max-num-seqs", "1", "--max-waiting", "0")
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            long = pool.submit(post, s.url, "/v1/completions",
                               {"prompt": "a", "max_tokens": 400, "extra": 1, "ignore_eos": True},
                               None)
            time.sleep(0.3)
            st, b = post(s.url, "/v1/completions", {"prompt": "b", "max_tokens": 2}, key=None)
            assert st == 503 and "retry" in b["error"]["message"]
            assert long.result()[0] == 200
    finally:
        assert s.stop() == 0


def test_disconnect_frees_blocks(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    body = json.dumps({"prompt": "go", "max_tokens": 3000, "stream": True, "ignore_eos": True})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  + body).encode())
    got = b""
    while got.count(b"data: ") < 3:
        got += sock.recv(4096)
    assert server.metrics(KEY)["num_requests_running"] == 1
    sock.close()
    for _ in range(200):
        m = server.metrics(KEY)
        if m["num_requests_running"] == 0 and m["kv_cache_blocks_used"] == 0:
            break
        time.sleep(0.05)
    assert m["num_requests_running"] == 0 and m["kv_cache_blocks_used"] == 0
    assert m["request_aborted_total"] >= 1


def test_sigterm_drains(model_dir):
    s = Server(model_dir)
    with cf.ThreadPoolExecutor(1) as pool:
        running = pool.submit(post, s.url, "/v1/completions",
                              {"prompt": "a", "max_tokens": 2000, "ignore_eos": True}, None)
        time.sleep(0.3)
        s.p.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        st, b = post(s.url, "/v1/completions", {"prompt": "b"}, key=None)
        assert st == 503 and "shutting down" in b["error"]["message"]
        st, b = running.result()
        assert st == 200 and b["usage"]["completion_tokens"] == 2000
    assert s.p.wait(timeout=60) == 0


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def test_rss_flat_over_2000_requests(server):
    def one(i):
        st, _ = post(server.url, "/v1/completions", {"prompt": f"n {i % 97}", "max_tokens": 2})
        assert st == 200

    with cf.ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(300)))
        warm = rss_kib(server.p.pid)
        list(pool.map(one, range(1700)))
    grown = rss_kib(server.p.pid) - warm
    assert grown < 8 * 1024, f"RSS grew {grown} KiB over 1,700 requests after warm-up"
