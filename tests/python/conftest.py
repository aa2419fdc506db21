import os
import shutil
import subprocess

import pytest

SRC = os.environ.get("WNA16_SOURCE_DIR", os.getcwd())
CLI = os.environ.get("WNA16_CLI", os.path.join(SRC, "build", "wna16"))
MODELS = os.path.join(SRC, "tests", "data", "models")


@pytest.fixture(scope="session")
def cli():
    return CLI


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """The demo preset (a tiny Qwen3-MoE, random weights) with the real Qwen3
    tokenizer, so prompts can be text."""
    d = tmp_path_factory.mktemp("demo") / "demo"
    subprocess.run([CLI, "--quiet", "synth", "--preset", "demo", "--out", str(d)], check=True,
                   stdout=subprocess.DEVNULL)
    tok = os.path.join(SRC, "tests", "data", "tokenizer", "qwen3")
    for f in os.listdir(tok):
        if f.startswith("tokenizer"):
            shutil.copy(os.path.join(tok, f), d)
    return str(d)


@pytest.fixture(scope="session")
def fixture_model():
    return os.path.join(MODELS, "qwen3_w4a16")
