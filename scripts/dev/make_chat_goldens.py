#!/usr/bin/env python3
"""Writes tests/data/chat/<name>.json: chat templates rendered the way
transformers' apply_chat_template renders them, over a corpus of
conversations, for tests/test_chat_template.c (our C Jinja interpreter must
give the same bytes).

Needs jinja2 (3.1.6, as transformers requires) and, preferably, transformers:
with it the renders go through transformers.utils.chat_template_utils.
render_jinja_template itself; without it through a replica of its Jinja
environment (ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks,
loopcontrols), its tojson, raise_exception, strftime_now, dict, namespace).

    python3 -m venv /tmp/jvenv && /tmp/jvenv/bin/pip install jinja2==3.1.6 transformers
    /tmp/jvenv/bin/python scripts/dev/make_chat_goldens.py [--shared /path/to/shared]

Templates: qwen3, llama3 and deepseek_v3 come from shared/assets/*-tokenizer/
tokenizer_config.json; the others from tests/data/chat/templates/*.jinja
(their sources: tests/data/chat/SOURCES.md). strftime_now is pinned to
NOW (the C test sets WNA16_CHAT_NOW to the same instant).
"""
import argparse
import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "chat")
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)
NOW_EPOCH = 1721995200  # NOW as UTC seconds

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city — «now»",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer", "minimum": 1}},
                   "required": ["city"]}}}]
# Mistral's templates insist on 9-character alphanumeric call ids.
TOOL_CALL = {"role": "assistant", "content": "",
             "tool_calls": [{"id": "c4ll1D9x0", "type": "function", "function": {
                 "name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}

# Conversations: each is rendered with add_generation_prompt true and false.
CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}],
    [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
     {"role": "user", "content": "Q2"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "你好 👋🏽 — ça va? ß Ǆ"},
     {"role": "assistant", "content": "很好！🎉"}, {"role": "user", "content": "Ünïcödé\u3000"}],
    [{"role": "user", "content": "Render {{ this }} and {% that %} and {# not #}, 'quotes' \"too\"\n"
                                 "second line\n\n\tindented\\n"}],
    [{"role": "user", "content": "  padded  \n"}, {"role": "assistant", "content": "\n reply \n"},
     {"role": "user", "content": "\n"}],
    [{"role": "user", "content": "Think first"},
     {"role": "assistant", "content": "<think>\nstep one\n</think>\n\nThe answer."},
     {"role": "user", "content": "And now?"}],
    [{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"},
     {"role": "user", "content": "two systems"}],
    [{"role": "assistant", "content": "I speak first"}, {"role": "user", "content": "ok"}],
    [{"role": "user", "content": "call a tool"}, TOOL_CALL,
     {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "c4ll1D9x0"},
     {"role": "user", "content": "thanks"}],
    [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
     {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"},
     {"role": "user", "content": "u3"}],
]


def shared_config(shared, name):
    with open(os.path.join(shared, "assets", name + "-tokenizer", "tokenizer_config.json")) as f:
        cfg = json.load(f)

    def tok(key):
        v = cfg.get(key)
        return v.get("content") if isinstance(v, dict) else v
    return cfg["chat_template"], tok("bos_token"), tok("eos_token")


def local_template(name):
    with open(os.path.join(OUT, "templates", name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def templates(shared):
    out = []
    for name in ("qwen3", "llama3", "deepseek_v3"):
        tpl, bos, eos = shared_config(shared, name)
        out.append((name, "shared/assets/%s-tokenizer/tokenizer_config.json" % name, tpl, bos, eos))
    for name, bos, eos in (("qwen2.5", None, "<|im_end|>"), ("mistral_v0.1", "<s>", "</s>"),
                           ("smollm2", "<|im_start|>", "<|im_end|>"),
                           ("llama3.2", "<|begin_of_text|>", "<|eot_id|>"),
                           ("mistral_v3", "<s>", "</s>")):
        out.append((name, "tests/data/chat/templates/%s.jinja" % name, local_template(name),
                    bos, eos))
    return out


def make_renderer():
    """render(template, kwargs) -> str, raising on template errors."""
    try:
        from transformers.utils import chat_template_utils as ctu
    except ImportError:
        ctu = None
    if ctu is not None:
        class FixedNow(datetime.datetime):
            @classmethod
            def now(cls, tz=None):
                return NOW
        ctu.datetime = FixedNow  # strftime_now reads the module's datetime

        def render(tpl, kw):
            kw = dict(kw)
            messages = kw.pop("messages")
            tools = kw.pop("tools", None)
            kw.pop("documents", None)
            rendered, _ = ctu.render_jinja_template(conversations=[messages], tools=tools,
                                                    chat_template=tpl, **kw)
            return rendered[0]
        return render, "transformers %s" % __import__("transformers").__version__

    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=NOW.strftime,
                       dict=dict, namespace=jinja2.utils.Namespace)

    def render(tpl, kw):
        return env.from_string(tpl).render(**kw)
    return render, "jinja2 %s replica" % jinja2.__version__


def cases_for(name, bos, eos):
    variants = [{}]
    if name == "qwen3":
        variants = [{}, {"enable_thinking": False}]
    for conv in CONVERSATIONS:
        for gen in (True, False):
            for extra in variants:
                kw = {"messages": conv, "tools": None, "documents": None,
                      "add_generation_prompt": gen}
                if bos is not None:
                    kw["bos_token"] = bos
                if eos is not None:
                    kw["eos_token"] = eos
                kw.update(extra)
                yield kw
    # tools offered (qwen, llama3.2 print them with tojson): a first turn,
    # and a whole round trip (call, result, next question)
    for conv in (CONVERSATIONS[1], CONVERSATIONS[11][:3]):
        kw = {"messages": conv, "tools": TOOLS, "documents": None,
              "add_generation_prompt": True}
        if bos is not None:
            kw["bos_token"] = bos
        if eos is not None:
            kw["eos_token"] = eos
        yield kw


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=os.environ.get("WNA16_SHARED_DIR",
                                                       os.path.join(ROOT, "..", "shared")))
    args = ap.parse_args()
    render, engine = make_renderer()
    for name, source, tpl, bos, eos in templates(args.shared):
        cases = []
        for kw in cases_for(name, bos, eos):
            case = {"vars": kw}
            try:
                case["text"] = render(tpl, kw)
            except Exception as e:  # the template refused (raise_exception) or failed
                case["error"] = str(e)
            cases.append(case)
        doc = {"name": name, "source": source, "rendered_by": engine, "now": NOW_EPOCH,
               "template": tpl, "cases": cases}
        path = os.path.join(OUT, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum("error" in c for c in cases)
        print("%s: %d cases (%d errors) -> %s" % (name, len(cases), errors,
                                                 os.path.relpath(path, ROOT)))


if __name__ == "__main__":
    sys.exit(main())
