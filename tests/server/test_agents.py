"""`wna16 serve` for agents and applications, through the official OpenAI
client: structured outputs (json_schema strict, json_object, vLLM's
structured_outputs / guided_*), tool calling (tools rendered by the
template, tool_choice required / named / auto / none, streamed calls equal
to whole ones, a full round trip with a tool result), the qwen3 reasoning
parser, chat_template_kwargs, logit_bias, n / best_of, lists of prompts,
prompt_logprobs, stop_reason, /tokenize and /version, generation_config
defaults, and a 400 naming every known field the server cannot honour.

The model is the random-weight demo (Qwen3's tokenizer and chat template):
whatever it writes, a constrained reply is valid by construction, so these
checks hold for any weights. Strings and arrays in the schemas are bounded
because a random model closes a string only when nothing else is allowed.
"""
import concurrent.futures as cf
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

import jsonschema
import openai
import pytest

CLI = os.environ.get("WNA16_CLI", "build/wna16")
SRC = os.environ.get("WNA16_SOURCE_DIR", ".")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    subprocess.run([CLI, "synth", "--out", str(d), "--preset", "demo", "--tokenizer",
                    os.path.join(SRC, "tests/data/tokenizer/qwen3")], check=True,
                   capture_output=True)
    return str(d)


class Server:
    def __init__(self, model_dir, *args):
        self.log = open(os.path.join(model_dir, f"serve-{time.time_ns()}.log"), "w+")
        self.p = subprocess.Popen([CLI, "serve", "--model", model_dir, "--port", "0",
                                   "--served-model-name", "demo", *args],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            self.log.seek(0)
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log.read())
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
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


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server(model_dir, "--reasoning-parser", "qwen3", "--max-num-seqs", "16")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def chat(client, content="Hi", **kw):
    kw.setdefault("max_tokens", 64)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model="demo",
                                          messages=[{"role": "user", "content": content}], **kw)


# ---------------------------------------------------------------- schemas

SCHEMAS = [
    {"type": "object", "additionalProperties": False,
     "properties": {"name": {"type": "string", "maxLength": 12},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "member": {"type": "boolean"}},
     "required": ["name", "age", "member"]},
    {"type": "object", "additionalProperties": False,
     "properties": {"order": {"type": "object", "additionalProperties": False,
                              "properties": {"id": {"type": "integer", "minimum": 1,
                                                    "maximum": 99999},
                                             "items": {"type": "array", "maxItems": 3,
                                                       "items": {"type": "object",
                                                                 "additionalProperties": False,
                                                                 "properties": {
                                                                     "sku": {"type": "string",
                                                                             "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                                                                     "qty": {"type": "integer",
                                                                             "minimum": 1,
                                                                             "maximum": 9}},
                                                                 "required": ["sku", "qty"]}}},
                              "required": ["id", "items"]},
                    "status": {"enum": ["open", "paid", "shipped"]}},
     "required": ["order", "status"]},
    {"type": "object", "additionalProperties": False,
     "properties": {"tags": {"type": "array", "minItems": 1, "maxItems": 4,
                             "items": {"enum": ["red", "green", "blue", 7, None]}},
                    "note": {"anyOf": [{"type": "string", "maxLength": 6}, {"type": "null"}]},
                    "level": {"const": "high"}},
     "required": ["tags", "note", "level"]},
    {"type": "object", "additionalProperties": False,
     "properties": {"point": {"type": "array", "prefixItems": [{"type": "integer"},
                                                               {"type": "integer"}],
                              "items": False, "minItems": 2},
                    "label": {"type": "string", "minLength": 1, "maxLength": 4}},
     "required": ["point", "label"]},
]

PROMPTS = ["Describe a customer.", "Give me an order as JSON.", "Colors?", "A point.",
           "Anything at all", "x"]


def test_json_schema_strict_100(client):
    """100 of 100 strict json_schema replies parse and validate (4 schemas,
    nested objects, arrays, enums, anyOf, const, tuples), greedy and
    sampled, 8 at a time."""
    def one(i):
        schema = SCHEMAS[i % len(SCHEMAS)]
        r = chat(client, PROMPTS[i % len(PROMPTS)] + f" #{i}", max_tokens=1500,
                 temperature=0 if i % 2 else 0.8, seed=i,
                 response_format={"type": "json_schema",
                                  "json_schema": {"name": f"s{i % 4}", "schema": schema,
                                                  "strict": True}})
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", (i, text)
        jsonschema.validate(json.loads(text), schema)
        return True

    with cf.ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(one, range(100))) == 100


def test_json_object_and_vllm_formats(client, server):
    r = chat(client, max_tokens=300, response_format={"type": "json_object"},
             extra_body={"guided_decoding_backend": "auto"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    r = chat(client, extra_body={"guided_choice": ["alpha", "beta", "gamma δ"]})
    assert r.choices[0].message.content in ("alpha", "beta", "gamma δ")
    r = chat(client, extra_body={"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2}"}})
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", r.choices[0].message.content)
    r = chat(client, extra_body={"guided_grammar": 'root ::= "v=" [1-9] ("." [0-9]){1,2}'})
    assert re.fullmatch(r"v=[1-9](\.[0-9]){1,2}", r.choices[0].message.content)
    r = client.completions.create(model="demo", prompt="Answer:", max_tokens=50, temperature=0,
                                  extra_body={"guided_json": SCHEMAS[0]})
    jsonschema.validate(json.loads(r.choices[0].text), SCHEMAS[0])
    r = chat(client, max_tokens=300,
             extra_body={"structured_outputs": {"json": SCHEMAS[0],
                                                "disable_any_whitespace": True}})
    assert " " not in r.choices[0].message.content.replace('" "', "")
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMAS[0])


@pytest.mark.parametrize("body, needle", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "if": {}}}}}, "keyword 'if'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "schema"),
    ({"response_format": {"type": "structural_tag"}}, "structural_tag"),
    ({"guided_regex": "(?=x)y"}, "structured output"),
    ({"guided_grammar": "root ::= root \"a\" | \"b\""}, "left recursion"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_json": {"type": "object"}, "guided_regex": "a"}, "only one output format"),
    ({"structured_outputs": {"structural_tag": "x"}}, "structural_tag"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias"),
    ({"use_beam_search": True}, "use_beam_search"),
    ({"length_penalty": 2}, "length_penalty"),
    ({"bad_words": ["x"]}, "bad_words"),
    ({"allowed_token_ids": [1, 2]}, "allowed_token_ids"),
    ({"truncate_prompt_tokens": 5}, "truncate_prompt_tokens"),
    ({"guided_whitespace_pattern": " "}, "guided_whitespace_pattern"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ({"audio": {"voice": "x"}}, "audio"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"reasoning_effort": "low"}, "reasoning_effort"),
    ({"documents": [{"text": "x"}]}, "documents"),
    ({"continue_final_message": True}, "continue_final_message"),
    ({"echo": True}, "echo"),
    ({"priority": 3}, "priority"),
    ({"return_tokens_as_token_ids": True}, "return_tokens_as_token_ids"),
    ({"store": True}, "store"),
    ({"service_tier": "flex"}, "service_tier"),
    ({"metadata": {"a": "b"}}, "metadata"),
    ({"web_search_options": {}}, "web_search_options"),
    ({"logits_processors": ["x"]}, "logits_processors"),
    ({"cache_salt": "s"}, "cache_salt"),
    ({"spaces_between_special_tokens": False}, "spaces_between_special_tokens"),
    ({"n": 2, "best_of": 1}, "best_of"),
    ({"best_of": 3, "stream": True}, "best_of"),
    ({"tool_choice": "required"}, "needs 'tools'"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "not in 'tools'"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
      "response_format": {"type": "json_object"}}, "cannot both hold"),
    ({"chat_template_kwargs": {"messages": []}}, "may not set 'messages'"),
    ({"chat_template_kwargs": 3}, "chat_template_kwargs"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "x"}}]}]}, "image_url"),
])
def test_known_but_unsupported_is_400(server, body, needle):
    full = {"model": "demo", "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}], **body}
    status, j = post(server.url, "/v1/chat/completions", full)
    assert status == 400, (body, j)
    assert needle in j["error"]["message"], (needle, j)


@pytest.mark.parametrize("body, needle", [
    ({"suffix": "x"}, "suffix"),
    ({"prompt": []}, "prompt"),
    ({"prompt": ["a"] * 200, "n": 2}, "at most 256"),
])
def test_completions_refusals(server, body, needle):
    status, j = post(server.url, "/v1/completions", {"model": "demo", "prompt": "Hi", **body})
    assert status == 400 and needle in j["error"]["message"], j


# ------------------------------------------------------------------ tools

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "additionalProperties": False,
                   "properties": {"city": {"type": "string", "maxLength": 10},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone",
    "parameters": {"type": "object", "additionalProperties": False,
                   "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}},
                   "required": ["zone"]}}}
SCHEMA_OF = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}


def check_calls(calls):
    assert calls, "no tool call"
    for c in calls:
        assert c.type == "function" and c.id.startswith("chatcmpl-tool-")
        jsonschema.validate(json.loads(c.function.arguments), SCHEMA_OF[c.function.name])


def test_tool_choice_required_100(client):
    """100 of 100 replies with tool_choice "required" carry calls whose
    arguments validate against the tool's schema."""
    def one(i):
        r = chat(client, f"Plan my trip #{i}", max_tokens=400, tools=[WEATHER, TIME],
                 tool_choice="required", temperature=0 if i % 2 else 0.9, seed=i,
                 parallel_tool_calls=bool(i % 3))
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls", (i, m)
        check_calls(m.tool_calls)
        if not i % 3:
            assert len(m.tool_calls) == 1
        return True

    with cf.ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(one, range(100))) == 100


def test_named_tool_and_streamed_calls_equal_whole(client):
    kw = dict(tools=[WEATHER, TIME], max_tokens=300,
              tool_choice={"type": "function", "function": {"name": "get_time"}})
    whole = chat(client, "What time is it?", **kw)
    m = whole.choices[0].message
    assert whole.choices[0].finish_reason == "stop"  # a named function: OpenAI's "stop"
    assert [c.function.name for c in m.tool_calls] == ["get_time"]
    check_calls(m.tool_calls)
    for choice in ("required", kw["tool_choice"]):
        kw["tool_choice"] = choice
        whole = chat(client, "Weather and time please", **kw)
        calls = {}
        reason = None
        for ch in chat(client, "Weather and time please", stream=True, **kw):
            d = ch.choices[0].delta if ch.choices else None
            for tc in (d.tool_calls or []) if d else []:
                c = calls.setdefault(tc.index, {"name": "", "arguments": "", "id": None})
                c["id"] = c["id"] or tc.id
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
            if ch.choices and ch.choices[0].finish_reason:
                reason = ch.choices[0].finish_reason
        got = [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)]
        want = [(c.function.name, c.function.arguments)
                for c in whole.choices[0].message.tool_calls]
        assert got == want and reason == whole.choices[0].finish_reason


def test_tool_round_trip(client, server):
    """tools -> tool_calls -> a role "tool" result -> a final answer, and
    the template rendered the tools and the result."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model="demo", messages=msgs, tools=[WEATHER],
                                       tool_choice="required", max_tokens=200, temperature=0)
    call = r.choices[0].message.tool_calls[0]
    check_calls([call])
    msgs.append(r.choices[0].message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'})
    final = client.chat.completions.create(model="demo", messages=msgs, tools=[WEATHER],
                                           tool_choice="none", max_tokens=8, temperature=0)
    assert final.choices[0].message.tool_calls is None
    assert isinstance(final.choices[0].message.content, str)
    status, tok = post(server.url, "/tokenize", {"model": "demo", "messages": msgs,
                                                 "tools": [WEATHER]})
    assert status == 200
    status, text = post(server.url, "/detokenize", {"tokens": tok["tokens"]})
    prompt = text["prompt"]
    assert '"name": "get_weather"' in prompt and "<tools>" in prompt
    assert "<tool_response>\n{\"temp\": 21}\n</tool_response>" in prompt
    assert "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + call.function.arguments \
        in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert tok["count"] == final.usage.prompt_tokens


def test_tool_choice_auto_parses_calls_and_text(client):
    """auto: a reply the model writes as a Hermes call (forced here with a
    regex) comes back as tool_calls with the text before it as content."""
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    regex = re.escape("Checking. " + call)
    r = chat(client, "time?", tools=[TIME], max_tokens=100, extra_body={"guided_regex": regex})
    m = r.choices[0].message
    assert m.content == "Checking. " and r.choices[0].finish_reason == "tool_calls"
    assert m.tool_calls[0].function.name == "get_time"
    assert json.loads(m.tool_calls[0].function.arguments) == {"zone": "UTC"}
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chat(
        client, "time?", tools=[TIME], max_tokens=100, stream=True,
        extra_body={"guided_regex": regex}) if ch.choices)
    assert streamed == "Checking. "
    r = chat(client, "time?", tools=[TIME], tool_choice="none", max_tokens=100,
             extra_body={"guided_regex": regex})
    assert r.choices[0].message.tool_calls is None and "<tool_call>" in \
        r.choices[0].message.content


def test_reasoning_parser(client):
    regex = re.escape("<think>\nfirst, ") + "[a-z]{2}" + re.escape("\n</think>\n\nThe answer.")
    r = chat(client, "Think", max_tokens=60, extra_body={"guided_regex": regex})
    m = r.choices[0].message
    assert re.fullmatch(r"\nfirst, [a-z]{2}\n", m.reasoning_content)
    assert m.content == "\n\nThe answer."
    reasoning = content = ""
    for ch in chat(client, "Think", max_tokens=60, stream=True,
                   extra_body={"guided_regex": regex}):
        if ch.choices:
            d = ch.choices[0].delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
    assert (reasoning, content) == (m.reasoning_content, m.content)
    r = chat(client, "Think", max_tokens=60,
             extra_body={"guided_regex": regex, "include_reasoning": False})
    assert getattr(r.choices[0].message, "reasoning_content", None) is None


# ---------------------------------------------------------- request surface

def test_chat_template_kwargs_and_tokenize_default(server):
    msgs = [{"role": "user", "content": "Hi"}]
    _, default = post(server.url, "/tokenize", {"messages": msgs})
    _, no_gen = post(server.url, "/tokenize", {"messages": msgs, "add_generation_prompt": False})
    _, off = post(server.url, "/tokenize", {"messages": msgs,
                                            "chat_template_kwargs": {"enable_thinking": False}})
    _, on = post(server.url, "/tokenize", {"messages": msgs,
                                           "chat_template_kwargs": {"enable_thinking": True}})
    assert default["count"] > no_gen["count"]  # vLLM's default: the generation prompt
    assert on["tokens"] == default["tokens"]  # the template's own default: thinking
    assert off["count"] == default["count"] + 4  # "<think>\n\n</think>\n\n"
    status, r = post(server.url, "/v1/chat/completions",
                     {"messages": msgs, "max_tokens": 1,
                      "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200 and r["usage"]["prompt_tokens"] == off["count"]


def test_logit_bias(client, server):
    base = client.completions.create(model="demo", prompt="The capital of France is",
                                     max_tokens=1, temperature=0, logprobs=1)
    first = base.choices[0].logprobs.tokens[0]
    _, ids = post(server.url, "/tokenize", {"prompt": first, "add_special_tokens": False})
    tid = ids["tokens"][0]
    down = client.completions.create(model="demo", prompt="The capital of France is",
                                     max_tokens=1, temperature=0, logit_bias={str(tid): -100})
    assert down.choices[0].text != base.choices[0].text
    up = client.completions.create(model="demo", prompt="The capital of France is",
                                   max_tokens=1, temperature=0, logit_bias={"9707": 100})
    assert up.choices[0].text == "Hello"


def test_n_best_of_and_prompt_lists(client):
    r = client.completions.create(model="demo", prompt=["one two", "three"], n=3,
                                  max_tokens=4, temperature=1.0, seed=5)
    assert [c.index for c in r.choices] == list(range(6))
    assert len({c.text for c in r.choices[:3]}) > 1  # the n samples differ
    again = client.completions.create(model="demo", prompt=["one two", "three"], n=3,
                                      max_tokens=4, temperature=1.0, seed=5)
    assert [c.text for c in again.choices] == [c.text for c in r.choices]
    r = client.completions.create(model="demo", prompt=[[9707, 1879], [9707]], max_tokens=2,
                                  temperature=0)
    assert len(r.choices) == 2 and r.usage.prompt_tokens == 3
    best = client.completions.create(model="demo", prompt="A", n=2, best_of=5, max_tokens=4,
                                     temperature=1.0, seed=3, logprobs=0)
    scores = [sum(c.logprobs.token_logprobs) for c in best.choices]
    assert len(best.choices) == 2 and scores[0] >= scores[1]
    hidden = client.completions.create(model="demo", prompt="A", n=1, best_of=3, max_tokens=4,
                                       temperature=1.0, seed=3)
    assert hidden.choices[0].logprobs is None
    c = chat(client, n=2, temperature=1.0, seed=1, max_tokens=4)
    assert len(c.choices) == 2
    chunks = [ch for ch in chat(client, n=2, temperature=1.0, seed=1, max_tokens=4, stream=True)]
    assert {ch.choices[0].index for ch in chunks if ch.choices} == {0, 1}


def test_prompt_logprobs_and_stop_reason(client, server):
    status, r = post(server.url, "/v1/completions",
                     {"prompt": "a b c", "max_tokens": 1, "prompt_logprobs": 2})
    plp = r["choices"][0]["prompt_logprobs"]
    assert status == 200 and plp[0] is None and len(plp) == 3
    for pos in plp[1:]:
        assert 1 <= len(pos) <= 3
        for v in pos.values():
            assert v["logprob"] <= 0 and "decoded_token" in v
    status, r = post(server.url, "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
                      "prompt_logprobs": 0})
    assert r["prompt_logprobs"][0] is None and len(r["prompt_logprobs"]) == r["usage"][
        "prompt_tokens"]
    r = client.completions.create(model="demo", prompt="x", max_tokens=20, stop=["3"],
                                  extra_body={"guided_regex": "12345"})
    assert r.choices[0].text == "12" and r.choices[0].stop_reason == "3"
    r = client.completions.create(model="demo", prompt="x", max_tokens=20,
                                  logit_bias={"9707": 100},
                                  extra_body={"stop_token_ids": [9707]})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].stop_reason == 9707
    r = client.completions.create(model="demo", prompt="x", max_tokens=2)
    assert r.choices[0].stop_reason is None
    r = client.completions.create(model="demo", prompt="x", max_tokens=20, stop=["3"],
                                  extra_body={"guided_regex": "12345",
                                              "include_stop_str_in_output": True})
    assert r.choices[0].text == "123"


def test_version_and_skip_special(server):
    with urllib.request.urlopen(server.url + "/version") as r:
        assert re.fullmatch(r"\d+\.\d+\.\d+", json.loads(r.read())["version"])
    status, r = post(server.url, "/v1/completions",
                     {"prompt": "x", "max_tokens": 3, "logit_bias": {"151645": 100},
                      "ignore_eos": True, "skip_special_tokens": False})
    assert r["choices"][0]["text"] == "<|im_end|>" * 3


def test_generation_config_defaults(model_dir, tmp_path):
    """generation_config.json's sampling fields apply where a request is
    silent (vLLM's --generation-config auto); --generation-config vllm
    ignores them."""
    d = tmp_path / "greedy"
    shutil.copytree(model_dir, d, ignore=shutil.ignore_patterns("serve-*"))
    (d / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": 151645, "temperature": 0.0}))
    body = {"prompt": "Once upon a time", "max_tokens": 8}
    for flags, same in (((), True), (("--generation-config", "vllm"), False)):
        s = Server(str(d), *flags)
        try:
            texts = {post(s.url, "/v1/completions", body)[1]["choices"][0]["text"]
                     for _ in range(3)}
            assert (len(texts) == 1) == same, texts
        finally:
            assert s.stop() == 0


def test_serve_flag_refusals(model_dir):
    for flags, needle in ((["--tool-call-parser", "xml"], "hermes, llama3_json"),
                          (["--reasoning-parser", "r1"], "qwen3"),
                          (["--generation-config", "x"], "auto or vllm"),
                          (["--chat-template", "/nonexistent"], "cannot open")):
        p = subprocess.run([CLI, "serve", "--model", model_dir, "--port", "0", *flags],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and needle in p.stderr, (flags, p.stderr)


def test_chat_template_flag_and_tool_refusals(model_dir, tmp_path):
    """--chat-template replaces the model's; a template that never renders
    tools refuses them instead of dropping them, and one that renders them
    in no format the server parses asks for --tool-call-parser."""
    plain = tmp_path / "plain.jinja"
    plain.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    listed = tmp_path / "listed.jinja"
    listed.write_text("{{ tools | tojson }}{% for m in messages %}{{ m.content }}{% endfor %}")
    body = {"messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER], "max_tokens": 2}
    for tpl, flags, needle in ((plain, (), "does not render tools"),
                               (plain, ("--tool-call-parser", "hermes"), "does not render tools"),
                               (listed, (), "--tool-call-parser")):
        s = Server(model_dir, "--chat-template", str(tpl), *flags)
        try:
            if tpl == plain and not flags:
                _, r = post(s.url, "/tokenize", {"messages": body["messages"]})
                _, t = post(s.url, "/detokenize", {"tokens": r["tokens"]})
                assert t["prompt"] == "[user] Hi\n"
            status, r = post(s.url, "/v1/chat/completions", body)
            assert status == 400 and needle in r["error"]["message"], (tpl, flags, r)
            status, r = post(s.url, "/v1/chat/completions", {**body, "tools": None})
            assert status == 200, r
        finally:
            assert s.stop() == 0


def test_prompt_ids_equal_generate_chat(server, model_dir):
    """The server's chat prompt ids equal `wna16 generate --chat`'s for the
    same messages and options (Qwen3: thinking by default, --think,
    --no-think); tests/python checks the Python package against the CLI."""
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    for flag, kwargs in ((None, None), ("--think", {"enable_thinking": True}),
                         ("--no-think", {"enable_thinking": False})):
        p = subprocess.run([CLI, "generate", "--model", model_dir, "--system", "Be brief.",
                            "--chat", "hi", "-n", "1", "--json"] + ([flag] if flag else []),
                           capture_output=True, text=True, timeout=120, check=True)
        body = {"messages": msgs}
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        _, r = post(server.url, "/tokenize", body)
        assert r["tokens"] == json.loads(p.stdout)["prompt_ids"], flag


SMOLLM2 = os.path.join(os.environ.get("WNA16_CACHE", os.path.expanduser("~/.cache/wna16")),
                       "smollm2-135m-instruct")


def test_trained_json_schema_answers(tmp_path):
    """On the trained SmolLM2 (scripts/setup_smollm2.sh), a json_schema
    reply is valid JSON whose values answer the question."""
    if not os.path.exists(os.path.join(SMOLLM2, "model.safetensors")):
        pytest.skip(f"no model at {SMOLLM2} (scripts/setup_smollm2.sh makes it)")
    s = Server(SMOLLM2, "--max-model-len", "512")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        schema = {"type": "object", "properties": {"country": {"type": "string"},
                                                   "capital": {"type": "string"}},
                  "required": ["country", "capital"], "additionalProperties": False}
        r = c.chat.completions.create(
            model="demo", max_tokens=60, temperature=0,
            messages=[{"role": "user", "content": "What is the capital of France? Answer in JSON."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "answer", "schema": schema, "strict": True}})
        answer = json.loads(r.choices[0].message.content)
        jsonschema.validate(answer, schema)
        assert answer["capital"] == "Paris" and answer["country"].lower() == "france", answer
    finally:
        assert s.stop() == 0


def test_mistral_template_round_trip(model_dir):
    """Mistral's v3 template (tools in [AVAILABLE_TOOLS], calls after
    [TOOL_CALLS]): the parser is picked from the template, call ids are the
    9 letters and digits the template insists on, and the call and its
    result render back as Mistral writes them."""
    tpl = os.path.join(SRC, "tests/data/chat/templates/mistral_v3.jinja")
    srv = Server(model_dir, "--chat-template", tpl)
    try:
        cl = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = cl.chat.completions.create(model="demo", messages=msgs, tools=[WEATHER],
                                       tool_choice="required", parallel_tool_calls=False,
                                       max_tokens=400, temperature=0)
        assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
        call = r.choices[0].message.tool_calls[0]
        assert re.fullmatch(r"[A-Za-z0-9]{9}", call.id), call.id
        jsonschema.validate(json.loads(call.function.arguments), SCHEMA_OF["get_weather"])
        msgs.append(r.choices[0].message.model_dump(exclude_none=True))
        msgs.append({"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'})
        final = cl.chat.completions.create(model="demo", messages=msgs, tools=[WEATHER],
                                           tool_choice="none", max_tokens=8, temperature=0)
        assert isinstance(final.choices[0].message.content, str)
        status, tok = post(srv.url, "/tokenize", {"model": "demo", "messages": msgs,
                                                  "tools": [WEATHER]})
        assert status == 200, tok
        status, text = post(srv.url, "/detokenize", {"tokens": tok["tokens"]})
        prompt = text["prompt"]
        assert prompt.startswith("[AVAILABLE_TOOLS] [{\"type\": \"function\"")
        assert re.search(r'\[/INST\]\[TOOL_CALLS\] \[\{.*"name": "get_weather".*, "id": "%s"\}\]'
                         % call.id, prompt), prompt
        assert f'"call_id": "{call.id}"}}[/TOOL_RESULTS]' in prompt
    finally:
        srv.stop()
