"""`wna16 serve` under a hostile mix of clients while 8 streams decode: the
streams' p99 inter-token latency and the server's memory must stay within
1.5x of what they are without the mix, and every request must be answered.
The mix: 4 `echo` + `logprobs: 20` requests on 1,500-token prompts (every
prompt position scored), 32 chat requests of 10,000 messages, 1,000 idle
sockets and a request with 16 stop strings of 10 kB. Runs on the embedded
demo model (tests/server/test_serve.py), whose step is almost all lm_head:
the shape where scored prompt rows cost the most beside decode rows."""
import json
import multiprocessing
import os
import statistics
import threading
import time
import urllib.request

import openai
import pytest

from test_isolation import idle_sockets, request
from test_serve import Server, model_dir  # noqa: F401 (model_dir: a fixture)

STREAMS = 8
LONG_PROMPT = [(i * 7919) % 50000 + 1000 for i in range(1500)]
# p99 of a handful of gaps is their maximum; the streams run long enough
# that one slow gap from the machine (2 shared cores, the client beside the
# server) is not the 99th percentile.
STREAM_TOKENS = 400
ATTEMPTS = 3  # the bound is a latency on a shared host: best of three runs


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server(model_dir, "--max-num-seqs", "16")
    yield s
    assert s.stop() == 0


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class RssWatch(threading.Thread):
    """The server's largest resident set while it runs."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.02)

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


def stream_gaps(client, started, gaps, errors):
    """One greedy stream of STREAM_TOKENS; the gaps between its tokens (s)."""
    try:
        s = client.completions.create(model="demo", prompt="Count on", max_tokens=STREAM_TOKENS,
                                      temperature=0, stream=True,
                                      extra_body={"ignore_eos": True})
        last, n, finish = None, 0, None
        for chunk in s:
            now = time.monotonic()
            if not chunk.choices:
                continue
            finish = chunk.choices[0].finish_reason or finish
            if not chunk.choices[0].text:
                continue
            if last is not None:
                gaps.append(now - last)
            last, n = now, n + 1
            if n == 8:
                started.release()
        if finish != "length":
            errors.append(f"stream ended by {finish} after {n} pieces of text")
    except Exception as e:  # noqa: BLE001 (a failed stream fails the test)
        errors.append(repr(e))
        started.release()


def post_json(url, path, body, timeout=300):
    st, _, b = request(url, path, "POST", {"Content-Type": "application/json"},
                       json.dumps(body).encode(), timeout=timeout)
    return st, b


def hostile_mix(url, port, go, done, results):
    """The mix, in a process of its own (so that encoding its bodies and
    decoding its replies cannot hold the streams' interpreter): waits for
    `go`, sends every request from threads, holds 1,000 idle sockets until
    `done`, and puts [(what, status)] on `results`. The hostile clients
    would be other machines: here they run at the lowest priority, so that
    what is measured is the server's share of the cores, not theirs."""
    os.nice(19)
    answers = []

    def echo_logprobs():
        st, b = post_json(url, "/v1/completions",
                          {"prompt": LONG_PROMPT, "echo": True, "logprobs": 20, "max_tokens": 1})
        ok = st == 200 and len(json.loads(b)["choices"][0]["logprobs"]["tokens"]) == 1501
        answers.append(("echo+logprobs", st if ok else f"{st} {b[:200]!r}"))

    def many_messages():
        msgs = [{"role": "user", "content": "hi"}] * 10000
        st, _ = post_json(url, "/v1/chat/completions", {"messages": msgs, "max_tokens": 2})
        answers.append(("10k messages", st))

    def long_stops():
        st, _ = post_json(url, "/v1/completions",
                          {"prompt": "Count on", "max_tokens": 4, "stop": ["x" * 10000] * 16})
        answers.append(("16 x 10 kB stops", st))

    threads = [threading.Thread(target=echo_logprobs) for _ in range(4)]
    threads += [threading.Thread(target=many_messages) for _ in range(32)]
    threads += [threading.Thread(target=long_stops)]
    go.wait()
    socks = idle_sockets(port, 1000)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.wait()
    for s in socks:
        s.close()
    results.put(answers)


def run_streams(server, with_mix):
    """(p99 gap in s, peak RSS in KiB, the mix's answers) of one run."""
    mp = multiprocessing.get_context("fork")  # before this process starts threads
    go, done, results = mp.Event(), mp.Event(), mp.Queue()
    mix = mp.Process(target=hostile_mix, args=(server.url, server.port, go, done, results))
    if with_mix:
        mix.start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                           timeout=300)
    gaps, errors = [], []
    started = threading.Semaphore(0)
    watch = RssWatch(server.p.pid)
    watch.start()
    streams = [threading.Thread(target=stream_gaps, args=(client, started, gaps, errors))
               for _ in range(STREAMS)]
    for t in streams:
        t.start()
    for _ in streams:  # every stream decoding before the mix arrives
        started.acquire()
    go.set()
    for t in streams:
        t.join()
    done.set()
    answers = results.get(timeout=300) if with_mix else []
    if with_mix:
        mix.join()
    peak = watch.stop()
    assert not errors, errors
    p99 = statistics.quantiles(gaps, n=100)[98]
    return p99, peak, answers


@pytest.mark.skipif(os.environ.get("WNA16_LOAD_TEST") == "skip",
                    reason="latencies under a sanitizer's instrumentation say nothing")
def test_streams_keep_their_pace_beside_a_hostile_mix(server):
    tried = []
    for _ in range(ATTEMPTS):
        base_p99, base_rss, _ = run_streams(server, with_mix=False)
        p99, rss, answers = run_streams(server, with_mix=True)
        # every request answered: the scored prompts in full, the rest refused
        # by the limits (docs/serving.md, "Limits and isolation")
        want = {"echo+logprobs": 200, "10k messages": 400, "16 x 10 kB stops": 400}
        assert len(answers) == 4 + 32 + 1, answers
        assert all(st == want[what] for what, st in answers), answers
        assert rss <= 1.5 * base_rss, (rss, base_rss)
        tried.append((round(p99 * 1e3, 2), round(base_p99 * 1e3, 2), rss // 1024,
                      base_rss // 1024))
        if p99 <= 1.5 * base_p99:
            print(f"p99 gap {p99 * 1e3:.2f} ms beside the mix, {base_p99 * 1e3:.2f} ms alone; "
                  f"peak RSS {rss // 1024} MiB, {base_rss // 1024} MiB alone")
            return
    pytest.fail("p99 inter-token gap (ms) with the mix, without; peak RSS (MiB) with, without; "
                f"per attempt: {tried}")
