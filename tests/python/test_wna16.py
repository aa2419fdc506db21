"""The Python package against the CLI on the fixtures: the same tokens, the
same logits, errors as exceptions, no leak over 1,000 calls."""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import wna16
from conftest import MODELS, SRC


def run_cli(cli, *args):
    p = subprocess.run([cli, "--quiet", *args], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_version_is_the_library_s(cli):
    assert wna16.__version__ == run_cli(cli, "--version").split()[-1]


@pytest.mark.parametrize("params,flags", [
    (wna16.SamplingParams(max_tokens=12, temperature=0), []),
    (wna16.SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, top_k=50, seed=7),
     ["--temp", "0.8", "--top-p", "0.9", "--top-k", "50", "--seed", "7"]),
])
def test_generate_equals_cli(cli, demo_dir, params, flags):
    prompt = "Once upon a time"
    ref = json.loads(run_cli(cli, "generate", "--model", demo_dir, "--prompt", prompt, "-n",
                             str(params.max_tokens), "--json", *flags))
    with wna16.LLM(demo_dir) as llm:
        out = llm.generate([prompt], params)[0]
    assert out.prompt == prompt
    assert len(out.prompt_token_ids) == ref["prompt_tokens"]
    assert out.outputs[0].token_ids == ref["tokens"]
    assert out.outputs[0].text == ref["text"]
    assert out.outputs[0].stop_reason == ref["stop_reason"]


def test_generate_batch_shapes_and_prompt_forms(demo_dir):
    with wna16.LLM(demo_dir) as llm:
        ids = llm.tokenize("Hello there")
        params = wna16.SamplingParams(max_tokens=5, temperature=0)
        outs = llm.generate(["Hello there", {"prompt_token_ids": ids.tolist()}, ids], params)
        assert len(outs) == 3
        assert outs[0].outputs[0].token_ids == outs[1].outputs[0].token_ids == \
            outs[2].outputs[0].token_ids
        assert outs[0].outputs[0].finish_reason == "length"
        assert len(outs[0].outputs[0].token_ids) == 5
        single = llm.generate("Hello there", params)
        assert single[0].outputs[0].token_ids == outs[0].outputs[0].token_ids


def test_stream_equals_generate_and_stops_early(demo_dir):
    params = wna16.SamplingParams(max_tokens=16, temperature=0)
    with wna16.LLM(demo_dir) as llm:
        whole = llm.generate(["The sky is"], params)[0].outputs[0].text
        pieces = list(llm.generate_stream("The sky is", params))
        assert len(pieces) > 1 and "".join(pieces) == whole
        it = llm.generate_stream("The sky is", wna16.SamplingParams(max_tokens=200))
        first = next(it)
        it.close()  # stops the generation; the model is usable again
        assert first
        again = llm.generate(["The sky is"], params)[0].outputs[0].text
        assert again == whole


def test_stop_strings(demo_dir):
    with wna16.LLM(demo_dir) as llm:
        text = llm.generate(["Hello"], wna16.SamplingParams(max_tokens=16, temperature=0))[0].outputs[0].text
        stop = text[3:6]
        out = llm.generate(["Hello"], wna16.SamplingParams(max_tokens=16, stop=stop,
                                                         temperature=0))[0]
        assert out.outputs[0].finish_reason == "stop"
        assert out.outputs[0].text == text[:text.index(stop)]


def test_tokenize_detokenize_chat(demo_dir, cli):
    with wna16.LLM(demo_dir) as llm:
        ids = llm.tokenize("Hello world, héllo!")
        assert ids.dtype == np.int32
        ref = json.loads(run_cli(cli, "tokenize", "--tokenizer", demo_dir, "--json", "--text",
                                 "Hello world, héllo!"))
        assert ids.tolist() == ref
        assert llm.detokenize(ids) == "Hello world, héllo!"
        assert llm.detokenize(np.array(ids)) == "Hello world, héllo!"
        prompt = llm.apply_chat_template([{"role": "user", "content": "hi"}])
        assert prompt.startswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        outs = llm.chat([{"role": "user", "content": "hi"}], wna16.SamplingParams(max_tokens=3))
        assert len(outs) == 1
        assert outs[0].prompt == prompt and len(outs[0].outputs[0].token_ids) == 3


def test_sampling_params_as_vllm(demo_dir):
    """vLLM's SamplingParams fields and defaults (temperature 1.0, seed None:
    fresh randomness), each bad value a ValueError or TypeError naming the
    keyword; RequestOutput carries request_id and finished."""
    p = wna16.SamplingParams()
    assert p.temperature == 1.0 and p.seed is None and p.n == 1
    for kw, needle in (({"n": 0}, "SamplingParams.n"), ({"best_of": 1, "n": 2}, "best_of"),
                       ({"logprobs": 21}, "logprobs"), ({"prompt_logprobs": -1}, "prompt_logprobs"),
                       ({"presence_penalty": 3}, "presence_penalty"),
                       ({"frequency_penalty": float("inf")}, "frequency_penalty"),
                       ({"min_tokens": -1}, "min_tokens"), ({"seed": -1}, "seed"),
                       ({"logit_bias": {5: 101}}, "logit_bias"), ({"top_p": 2}, "top_p")):
        with pytest.raises(ValueError, match=needle):
            wna16.SamplingParams(**kw)
    for kw, needle in (({"stop_token_ids": ["x"]}, "stop_token_ids"),
                       ({"ignore_eos": 1}, "ignore_eos"),
                       ({"structured_outputs": {"json": {}}}, "structured_outputs")):
        with pytest.raises(TypeError, match=needle):
            wna16.SamplingParams(**kw)
    with pytest.raises(ValueError, match="exactly one"):
        wna16.StructuredOutputsParams(json={}, regex="a")
    with pytest.raises(TypeError, match="dtype"):
        wna16.SamplingParams(dtype="bf16")
    with wna16.LLM(demo_dir) as llm:
        outs = [llm.generate("Hi", wna16.SamplingParams(max_tokens=6))[0] for _ in range(3)]
        assert len({tuple(o.outputs[0].token_ids) for o in outs}) > 1  # unseeded: fresh
        assert len({o.request_id for o in outs}) == 3 and all(o.finished for o in outs)
        seeded = [llm.generate("Hi", wna16.SamplingParams(max_tokens=6, seed=3))[0]
                  for _ in range(2)]
        assert seeded[0].outputs[0].token_ids == seeded[1].outputs[0].token_ids
        # the engine honours the rest of vLLM's fields
        out = llm.generate("Hi", wna16.SamplingParams(max_tokens=4, n=3, seed=1))[0]
        assert [c.index for c in out.outputs] == [0, 1, 2]
        best = llm.generate("Hi", wna16.SamplingParams(max_tokens=4, n=2, best_of=4, seed=1))[0]
        cums = [c.cumulative_logprob for c in best.outputs]
        assert len(cums) == 2 and cums[0] >= cums[1]
        lp = llm.generate("Hi", wna16.SamplingParams(max_tokens=3, temperature=0, logprobs=2))[0]
        c = lp.outputs[0]
        assert len(c.logprobs) == 3 and all(t in d for t, d in zip(c.token_ids, c.logprobs))
        assert abs(c.cumulative_logprob - sum(d[t] for t, d in zip(c.token_ids, c.logprobs))) < 1e-4
        greedy = llm.generate("Hi", wna16.SamplingParams(max_tokens=1, temperature=0))[0]
        banned = greedy.outputs[0].token_ids[0]
        biased = llm.generate("Hi", wna16.SamplingParams(max_tokens=1, temperature=0,
                                                         logit_bias={banned: -100}))[0]
        assert biased.outputs[0].token_ids[0] != banned
        rx = llm.generate("Hi", wna16.SamplingParams(
            max_tokens=8, structured_outputs=wna16.StructuredOutputsParams(regex="a+")))[0]
        assert set(rx.outputs[0].text) <= {"a"} and rx.outputs[0].text
        stopped = llm.generate("Hi", wna16.SamplingParams(max_tokens=8, temperature=0,
                                                          stop_token_ids=[banned]))[0]
        assert stopped.outputs[0].token_ids == [banned]
        assert stopped.outputs[0].finish_reason == "stop"
        pl = llm.generate("Hello there", wna16.SamplingParams(max_tokens=1, prompt_logprobs=1))[0]
        assert pl.prompt_logprobs[0] is None and all(pl.prompt_logprobs[1:])


def test_chat_options_and_prompt_parity(demo_dir, cli):
    """LLM.chat takes a conversation or a list, content parts, tools and
    chat_template_kwargs; its prompt ids equal `wna16 generate --chat`'s
    (and so the server's, tests/server/test_agents.py) for Qwen3's template
    with thinking by default, --think and --no-think."""
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with wna16.LLM(demo_dir) as llm:
        for flag, kw in ((None, {}), ("--think", {"enable_thinking": True}),
                         ("--no-think", {"chat_template_kwargs": {"enable_thinking": False}})):
            args = ["generate", "--model", demo_dir, "--system", "Be brief.", "--chat", "hi",
                    "-n", "1", "--json"] + ([flag] if flag else [])
            ref = json.loads(run_cli(cli, *args))["prompt_ids"]
            text = llm.apply_chat_template(msgs, **kw)
            assert llm.tokenize(text, add_special_tokens=False).tolist() == ref, flag
        off = llm.apply_chat_template(msgs, enable_thinking=False)
        assert off.endswith("<think>\n\n</think>\n\n")
        assert llm.apply_chat_template(msgs) == llm.apply_chat_template(msgs, enable_thinking=True)
        parts = [{"role": "user", "content": [{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]}]
        assert "a\nb" in llm.apply_chat_template(parts)
        with_tools = llm.apply_chat_template(msgs, tools=[tool])
        assert '"name": "f"' in with_tools and "<tools>" in with_tools
        outs = llm.chat([msgs, parts], wna16.SamplingParams(max_tokens=2), tools=[tool])
        assert len(outs) == 2 and all(len(o.outputs[0].token_ids) == 2 for o in outs)
        with pytest.raises(wna16.Error, match="image_url"):
            llm.chat([{"role": "user", "content": [{"type": "image_url"}]}])
        with pytest.raises(wna16.Error, match="may not set 'messages'"):
            llm.apply_chat_template(msgs, chat_template_kwargs={"messages": []})
        assert len(llm.chat(msgs, wna16.SamplingParams(max_tokens=1), use_tqdm=True)) == 1


@pytest.mark.parametrize("model,tp,ep", [("qwen3_w4a16", 1, 1), ("llama_w4a16", 1, 1),
                                         ("qwen3_moe_tp", 2, 1), ("deepseek_v3_w4a16", 1, 2),
                                         ("deepseek_v3_w4a16", 2, 2)])
def test_logits_equal_cli(cli, model, tp, ep):
    d = os.path.join(MODELS, model)
    ids = [1, 2, 3, 4, 5]
    ref = run_cli(cli, "logits", "--model", d, "--ids", ",".join(map(str, ids)), "--tp", str(tp),
                  "--ep", str(ep))
    with wna16.LLM(d, tensor_parallel_size=tp, expert_parallel_size=ep) as llm:
        got = llm.logits(np.array(ids))
    assert got.dtype == np.float32 and got.shape == (llm.vocab_size,)
    # the CLI prints %.7g: the same text means the same values
    assert "".join("%.7g\n" % v for v in got.tolist()) == ref


def test_act_quant_int8_equals_cli(cli):
    d = os.path.join(MODELS, "qwen3_moe_w4a16")
    ids = [1, 2, 3, 4, 5]
    ref = run_cli(cli, "logits", "--model", d, "--ids", ",".join(map(str, ids)), "--act-quant",
                  "int8")
    with wna16.LLM(d, act_quant="int8") as llm:
        got = llm.logits(np.array(ids))
    assert "".join("%.7g\n" % v for v in got.tolist()) == ref
    with wna16.LLM(d) as llm:
        assert not np.array_equal(llm.logits(np.array(ids)), got)
    with pytest.raises(ValueError, match="'none' or 'int8'"):
        wna16.LLM(d, act_quant="fp8")


def test_logprobs_are_the_log_softmax(fixture_model):
    ids = [5, 17, 3, 99, 42, 7]
    with wna16.LLM(fixture_model) as llm:
        lp = llm.logprobs(ids)
        assert lp.shape == (len(ids) - 1,)
        for i in range(1, len(ids)):
            z = llm.logits(ids[:i]).astype(np.float64)
            want = z[ids[i]] - (z.max() + math.log(np.exp(z - z.max()).sum()))
            assert abs(lp[i - 1] - want) < 2e-3, (i, lp[i - 1], want)
        assert (lp < 0).all()


def test_expert_parallel_refusals():
    with pytest.raises(wna16.Error, match="needs routed experts, and this model has none"):
        wna16.LLM(os.path.join(MODELS, "llama_w4a16"), expert_parallel_size=2)
    with pytest.raises(wna16.Error, match="a rank would own no expert; use --ep 8 or less"):
        wna16.LLM(os.path.join(MODELS, "deepseek_v3_w4a16"), expert_parallel_size=16)


def test_errors_are_exceptions(fixture_model, demo_dir, tmp_path):
    with pytest.raises(wna16.Error) as e:
        wna16.LLM(str(tmp_path / "missing"))
    assert e.value.status.startswith("ERR_") and str(tmp_path / "missing") in e.value.detail
    with wna16.LLM(fixture_model) as llm:
        with pytest.raises(wna16.Error) as e:
            llm.logits([5000])
        assert e.value.status == "ERR_TOKEN_ID" and "5000" in e.value.detail
        with pytest.raises(wna16.Error) as e:
            llm.logits([-1])
        assert e.value.status == "ERR_TOKEN_ID"
        with pytest.raises(ValueError, match="SamplingParams.temperature"):
            wna16.SamplingParams(temperature=float("nan"))
        with pytest.raises(wna16.Error) as e:
            llm.generate([[1, 2]], wna16.SamplingParams(max_tokens=10**7))
        assert e.value.status == "ERR_CONTEXT_OVERFLOW"
        with pytest.raises(wna16.Error) as e:
            llm.generate(["text needs a tokenizer"])
        assert "tokenizer" in e.value.detail
        with pytest.raises(ValueError):
            llm.logits([])
        assert llm.logits([1, 2]).shape == (llm.vocab_size,)  # still usable
    with wna16.LLM(demo_dir) as llm:
        with pytest.raises(wna16.Error) as e:
            llm.detokenize([10**8])
        assert e.value.status == "ERR_TOKEN_ID"


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_no_leak_over_1000_calls(demo_dir):
    with wna16.LLM(demo_dir, max_model_len=64) as llm:
        params = wna16.SamplingParams(max_tokens=2)

        def call(i):
            ids = llm.tokenize("leak check %d" % i)
            assert llm.detokenize(ids) == "leak check %d" % i
            llm.logits(ids)
            llm.generate([ids], params)
            with pytest.raises(wna16.Error):
                llm.logits([10**7])

        for i in range(100):
            call(i)
        before = rss_kib()
        for i in range(1000):
            call(i)
        grown = rss_kib() - before
    assert grown < 4096, f"RSS grew {grown} KiB over 1,000 calls"


def test_inspect_and_quantize(fixture_model, tmp_path, cli):
    info = wna16.inspect(fixture_model)
    ref = json.loads(subprocess.run([cli, "inspect", fixture_model, "--json"],
                                    capture_output=True, text=True).stdout)
    assert info == ref and info["loadable"] is True
    out = tmp_path / "q"
    report = wna16.quantize(os.path.join(MODELS, "qwen3_bf16"), str(out), method="rtn",
                            group_size=32, num_samples=2, seq_len=16)
    assert report["modules_quantized"] > 0
    assert wna16.inspect(str(out))["quant_method"] == "compressed-tensors"
    with wna16.LLM(str(out)) as llm:
        assert np.isfinite(llm.logits([1, 2, 3])).all()
    with pytest.raises(wna16.Error) as e:
        wna16.quantize(os.path.join(MODELS, "qwen3_bf16"), str(tmp_path / "r"), scheme="W3A16")
    assert e.value.status == "ERR_INVALID_ARGUMENT" and "W3A16" in e.value.detail
    # GPTQ without calibration data is refused with the fix, in Python's words
    with pytest.raises(wna16.Error) as e:
        wna16.quantize(os.path.join(MODELS, "qwen3_bf16"), str(tmp_path / "g"))
    assert "calib_text=" in e.value.detail and "calib_random=True" in e.value.detail
    assert "--calib" not in e.value.detail and "--method" not in e.value.detail


def test_pip_installs_the_package(tmp_path):
    target = tmp_path / "site"
    source = tmp_path / "python"  # setuptools builds in place: keep the source tree clean
    shutil.copytree(os.path.join(SRC, "python"), source)
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--target", str(target), str(source)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    env = dict(os.environ, PYTHONPATH=str(target))
    p = subprocess.run([sys.executable, "-c", "import wna16, sys; print(wna16.__file__)"],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(str(target))
