"""`wna16 serve` on the trained Qwen2.5-Coder-0.5B-Instruct that
scripts/setup_models.sh installs: the OpenAI client's chat completion, greedy,
answers "What is the capital of France?" with Paris, streamed and not. Skipped
when the model is not installed (no PyPI when the suite was set up)."""
import os

import openai
import pytest

from test_serve import Server

CACHE = os.environ.get("WNA16_CACHE", os.path.expanduser("~/.cache/wna16"))
QWEN = os.environ.get("WNA16_QWEN25_DIR") or os.path.join(CACHE, "qwen2.5-coder-0.5b-instruct")


@pytest.fixture(scope="module")
def qwen():
    if not os.path.exists(os.path.join(QWEN, ".complete")):
        pytest.skip(f"no model at {QWEN} (scripts/setup_models.sh makes it; it needs PyPI)")
    s = Server(QWEN, "--max-model-len", "512")
    yield openai.OpenAI(base_url=s.url + "/v1", api_key="none")
    assert s.stop() == 0, s.text()


def test_capital_of_france(qwen):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    r = qwen.chat.completions.create(model="demo", messages=messages, max_tokens=24,
                                     temperature=0)
    assert "Paris" in r.choices[0].message.content, r
    chunks = qwen.chat.completions.create(model="demo", messages=messages, max_tokens=24,
                                          temperature=0, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
