"""`wna16 bench serve` against `wna16 serve` on the demo fixture: the JSON
report's fields and values (every request exactly --output-len tokens, the
server's decode steps and roofline fraction read from /metrics), the text
report, min_tokens, and the failures that must exit non-zero with a clear
message (bad URL, nothing listening, a wrong API key, a request too long
for the model). The server machinery is test_serve.py's."""
import json
import socket
import subprocess

import pytest

from test_serve import CLI, KEY, Server, model_dir, post  # noqa: F401 (fixture)


def bench(*args, timeout=300):
    return subprocess.run([CLI, "bench", "serve", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def bserver(model_dir):  # noqa: F811
    if "built without libcurl" in bench("--help").stdout:
        pytest.skip("wna16 was built without libcurl")
    s = Server(model_dir, "--api-key", KEY)
    yield s
    assert s.stop() == 0


def test_json_report(bserver):
    before = bserver.metrics(KEY)
    r = bench("--url", bserver.url, "--api-key", KEY, "--concurrency", "2", "--requests", "6",
              "--input-len", "8", "--output-len", "5", "--seed", "3", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["completed"] == 6 and j["failed"] == 0 and j["short_outputs"] == 0
    assert j["num_prompts"] == 6 and j["concurrency"] == 2 and j["model"] == "demo"
    assert j["total_input_tokens"] == 48 and j["total_output_tokens"] == 30
    assert j["duration"] > 0 and j["request_throughput"] > 0
    # every figure is printed with 9 significant digits: a quotient of two of them is
    # exact to about 1e-8, whatever the machine's speed
    assert j["output_throughput"] == pytest.approx(30 / j["duration"], rel=1e-7)
    assert j["request_throughput"] == pytest.approx(6 / j["duration"], rel=1e-7)
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert 0 < j[f"median_{m}_ms"] <= j[f"p90_{m}_ms"] <= j[f"p99_{m}_ms"], m
        assert j[f"mean_{m}_ms"] > 0
    assert j["median_ttft_ms"] < j["p99_e2el_ms"]
    assert j["first_error"] is None
    s = j["server"]
    # 6 requests of 5 tokens: 24 decode rows (the first token is the prefill's), those of
    # steps without prompt rows counted, 2 at a time at most
    assert s["decode_steps"] >= 1 and 1 <= s["mean_decode_rows"] <= 2
    assert s["decode_steps"] * s["mean_decode_rows"] == pytest.approx(round(
        s["decode_steps"] * s["mean_decode_rows"]), abs=1e-6)
    assert s["decode_steps"] * s["mean_decode_rows"] <= 24 + 1e-3
    assert s["decode_step_ms"] > 0 and s["decode_roofline_ms"] > 0
    assert 0 < s["roofline_fraction"] == pytest.approx(
        s["decode_roofline_ms"] / s["decode_step_ms"], rel=1e-7)
    # the engine holds its limits to the steps it ran: never above the floor
    assert s["roofline_fraction"] <= 1 + 1e-7
    assert s["read_gbs"] > 0 and s["peak_gflops"] > 0
    after = bserver.metrics(KEY)
    # the warm-up request (2 tokens) and the run's 30
    assert after["generation_tokens_total"] - before["generation_tokens_total"] == 32
    assert after["steps_total"] > before["steps_total"]
    assert after["decode_step_roofline_seconds_total"] > 0


def test_text_report(bserver):
    r = bench("--url", bserver.url + "/", "--api-key", KEY, "--requests", "2", "--input-len",
              "4", "--output-len", "3")
    assert r.returncode == 0, r.stderr
    assert "completed 2, failed 0" in r.stdout and "requests/s" in r.stdout
    assert "TTFT" in r.stdout and "of the roofline" in r.stdout


def test_min_tokens(bserver):
    # a stop string that ends the text at its first token, unless min_tokens holds it off
    body = {"prompt": [1, 2, 3], "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    st, b = post(bserver.url, "/v1/completions", body)
    assert st == 200 and b["choices"][0]["text"]
    stop = [b["choices"][0]["text"][0]]
    st, b1 = post(bserver.url, "/v1/completions", {**body, "stop": stop})
    assert st == 200 and b1["usage"]["completion_tokens"] < 6
    st, b2 = post(bserver.url, "/v1/completions", {**body, "stop": stop, "min_tokens": 6})
    assert st == 200 and b2["usage"]["completion_tokens"] == 6
    st, b3 = post(bserver.url, "/v1/completions", {**body, "min_tokens": -1})
    assert st == 400 and "'min_tokens'" in b3["error"]["message"]


def test_bad_url():
    r = bench("--url", "localhost:8000", "--json")
    assert r.returncode == 2 and "expected http://HOST:PORT" in r.stderr
    r = bench("--requests", "2")
    assert r.returncode == 2 and "--url URL is required" in r.stderr
    r = bench("--url", "http://127.0.0.1:1", "--requests", "0")
    assert r.returncode == 2 and "--requests" in r.stderr


def test_server_down():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = bench("--url", f"http://127.0.0.1:{port}", "--requests", "2", "--json")
    assert r.returncode == 1 and r.stdout == ""
    assert "cannot reach http://127.0.0.1:%d/v1/models" % port in r.stderr


def test_wrong_key_and_too_long(bserver):
    r = bench("--url", bserver.url, "--api-key", "wrong", "--requests", "2")
    assert r.returncode == 1 and "HTTP 401" in r.stderr and "API key" in r.stderr
    r = bench("--url", bserver.url, "--api-key", KEY, "--input-len", "4000", "--output-len",
              "200")
    assert r.returncode == 2 and "max_model_len 4096" in r.stderr
