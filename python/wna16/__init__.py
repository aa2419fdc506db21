"""wna16: WNA16 (int4/int8 weights, 16-bit activations) LLM inference on CPU.

An offline API in the shape of vllm.LLM and llama-cpp-python over the
libwna16 shared library (ctypes, no compiled extension):

    llm = wna16.LLM("model_dir")
    outputs = llm.generate(["Hello"], wna16.SamplingParams(max_tokens=32))
    for piece in llm.generate_stream("Hello", wna16.SamplingParams(max_tokens=32)):
        print(piece, end="")

Errors raise wna16.Error with the library's status name and detail.
"""
import ctypes
import itertools
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _lib, _sampling
from ._lib import lib
from ._sampling import StructuredOutputsParams

__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "RequestOutput",
           "CompletionOutput", "Error", "inspect",
           "quantize", "version", "__version__"]


def version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return lib.wna16_version().decode()


__version__ = version()


class Error(Exception):
    """A failed library call: .status is the status name (e.g. "ERR_TOKEN_ID"),
    .detail what the library said."""

    def __init__(self, status: str, detail: str):
        super().__init__(f"{status}: {detail}" if detail else status)
        self.status = status
        self.detail = detail


class _Context:
    """A wna16_ctx: the error detail of the last call, and the callbacks."""

    def __init__(self):
        p = ctypes.c_void_p()
        if lib.wna16_ctx_create(ctypes.byref(p)) != 0:
            raise MemoryError("wna16_ctx_create")
        self.ptr = p

    def check(self, status: int) -> None:
        if status != 0:
            raise Error(lib.wna16_status_str(status).decode(),
                        lib.wna16_ctx_error(self.ptr).decode("utf-8", "replace"))

    def close(self):
        if self.ptr:
            lib.wna16_ctx_free(self.ptr)
            self.ptr = None

    def __del__(self):
        self.close()


def _take_string(ptr: ctypes.c_void_p) -> str:
    """A library-owned NUL-terminated string, copied and freed with wna16_free."""
    if not ptr.value:
        return ""
    try:
        return ctypes.string_at(ptr.value).decode("utf-8", "replace")
    finally:
        lib.wna16_free(ptr.value)


def _ids_array(ids) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(ids), dtype=np.int64)
    if a.ndim != 1:
        raise ValueError("token ids must be a 1-D sequence")
    if a.size and (a.min() < -(2**31) or a.max() >= 2**31):
        raise ValueError("token id outside int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def _ptr32(a: np.ndarray):
    return a.ctypes.data_as(_lib.c_int32_p)


@dataclass
class SamplingParams:
    """As vllm.SamplingParams: temperature 1.0 and seed None (fresh
    randomness) by default; temperature 0 is greedy. A bad value raises
    ValueError or TypeError naming the keyword."""
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = None
    n: int = 1
    best_of: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    min_tokens: int = 0
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    logit_bias: Optional[dict] = None
    structured_outputs: Optional[StructuredOutputsParams] = None

    def __post_init__(self):
        _sampling.check(self)

    def _stop_list(self) -> List[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    finish_reason: str  # "stop" (EOS or a stop string), "length" or "abort"
    stop_reason: Optional[str] = None  # the library's: "eos", "stop", "length", "callback"
    cumulative_logprob: Optional[float] = None  # with SamplingParams.logprobs, as vLLM
    logprobs: Optional[list] = None


@dataclass
class RequestOutput:
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput] = field(default_factory=list)
    prefill_seconds: float = 0.0  # from adding the request to its first token
    decode_seconds: float = 0.0   # from its first token to its last
    request_id: str = ""
    finished: bool = True
    prompt_logprobs: Optional[list] = None


# wna16_finish_reason
_FINISH = {1: "stop", 2: "length", 3: "abort", 4: "error"}


class _Request:
    """What the engine's steps gave one request so far."""

    def __init__(self, rid: str, prompt: Optional[str], ids: np.ndarray, eos: set,
                 keep_logprobs: bool):
        self.rid, self.prompt, self.ids, self.eos = rid, prompt, ids, eos
        self.keep_logprobs = keep_logprobs
        self.logprobs: List[dict] = []  # per token: {token id: logprob}, the sampled one first
        self.cumulative = 0.0
        self.prompt_logprobs: Optional[list] = None
        self.tokens: List[int] = []
        self.text: List[str] = []
        self.new_text: List[str] = []  # not yet taken by a stream
        self.finish: Optional[str] = None
        self.stop_reason: Optional[str] = None
        self.error = ""
        self.t0 = time.monotonic()
        self.t_first = self.t_last = 0.0

    def take(self, o) -> None:
        now = time.monotonic()
        if o.n_tokens:
            self.tokens.extend(o.token_ids[i] for i in range(o.n_tokens))
            self.t_first = self.t_first or now
            self.t_last = now
        for i in range(o.n_tokens if o.logprobs else 0):
            lp = o.logprobs[i]
            self.cumulative += lp.logprob
            d = {lp.id: lp.logprob}
            for j in range(lp.n_top):
                d.setdefault(lp.top_ids[j], lp.top_logprobs[j])
            self.logprobs.append(d)
        if o.n_prompt_logprobs:
            if self.prompt_logprobs is None:
                self.prompt_logprobs = [None] * len(self.ids)
            for i in range(o.n_prompt_logprobs):
                lp = o.prompt_logprobs[i]
                d = {lp.id: lp.logprob}
                for j in range(lp.n_top):
                    d.setdefault(lp.top_ids[j], lp.top_logprobs[j])
                self.prompt_logprobs[o.prompt_logprobs_start + i] = d
        if o.text_len:
            piece = ctypes.string_at(o.text, o.text_len).decode("utf-8", "replace")
            self.text.append(piece)
            self.new_text.append(piece)
        if o.finished:
            self.finish = _FINISH.get(o.finish_reason, "error")
            self.error = (o.error or b"").decode("utf-8", "replace")
            if self.finish == "stop":
                self.stop_reason = "stop" if o.stop_str or o.stop_token not in self.eos else "eos"
            else:
                self.stop_reason = {"length": "length", "abort": "callback"}.get(self.finish)

    def completion(self, index: int) -> CompletionOutput:
        return CompletionOutput(index, "".join(self.text), list(self.tokens),
                                self.finish or "abort", self.stop_reason,
                                self.cumulative if self.logprobs else None,
                                self.logprobs if self.keep_logprobs else None)

    def output(self, copies: Optional[list] = None, n: int = 1) -> RequestOutput:
        """The request's output; with copies (this one first: n or best_of
        samples of one prompt), the n best by cumulative logprob."""
        copies = copies or [self]
        if len(copies) > n:
            copies = sorted(copies, key=lambda r: -r.cumulative)[:n]
        t_end = max(r.t_last for r in copies) or time.monotonic()
        first = min((r.t_first for r in copies if r.t_first), default=t_end)
        return RequestOutput(
            prompt=self.prompt, prompt_token_ids=self.ids.tolist(),
            outputs=[r.completion(i) for i, r in enumerate(copies)],
            prefill_seconds=first - self.t0, decode_seconds=t_end - first,
            request_id=self.rid, finished=all(r.finish is not None for r in copies),
            prompt_logprobs=self.prompt_logprobs)


class _Progress:
    """use_tqdm: tqdm when it is installed, else a line on stderr."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.bar = total, 0, None
        self.enabled = enabled and total > 0
        if self.enabled:
            try:
                from tqdm.auto import tqdm
                self.bar = tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)
            except ImportError:
                self.t0 = time.monotonic()

    def advance(self, n: int) -> None:
        if not self.enabled or not n:
            return
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        else:
            rate = self.done / max(time.monotonic() - self.t0, 1e-9)
            sys.stderr.write(f"\rProcessed prompts: {self.done}/{self.total} "
                             f"({rate:.2f} it/s)")
            sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


class LLM:
    """A loaded model, its tokenizer (when the directory has one) and, from
    the first generation on, an engine (wna16_engine) that runs every
    request given to generate() as one continuously batched workload, as
    vllm.LLM does. Calls on one LLM are serialized."""

    def __init__(self, model: str, tokenizer: Optional[str] = None, tensor_parallel_size: int = 1,
                 threads: int = 0, max_model_len: int = 0, max_num_seqs: int = 256,
                 max_num_batched_tokens: int = 512, enable_prefix_caching: bool = True,
                 kv_cache_memory_bytes: int = 0, expert_parallel_size: int = 1,
                 act_quant: Optional[str] = None):
        # expert_parallel_size: groups of tensor_parallel_size ranks (the CLI's
        # --ep), each rank holding its block of the routed experts; vLLM spells
        # this data_parallel_size with enable_expert_parallel=True
        # (docs/distributed.md). act_quant: None or "none" keeps the quantized
        # linears' activations 16-bit; "int8" quantizes them to int8, a scale per
        # 128 inputs at most (W4A8, the CLI's --act-quant int8; docs/kernels.md).
        act_codes = {None: 0, "none": 0, "int8": 1}
        if act_quant not in act_codes:
            raise ValueError(f"act_quant={act_quant!r}: None, 'none' or 'int8'")
        self._ctx = _Context()
        self._lock = threading.RLock()
        self._engine = ctypes.c_void_p()
        self._engine_args = (int(max_num_seqs), int(max_num_batched_tokens),
                             bool(enable_prefix_caching), int(kv_cache_memory_bytes))
        self._requests: dict = {}
        self._next_id = 0
        self._model = ctypes.c_void_p()
        self._tok = ctypes.c_void_p()
        o = _lib.ModelOptions()
        lib.wna16_model_options_init(ctypes.byref(o))
        o.tp, o.threads, o.context = int(tensor_parallel_size), int(threads), int(max_model_len)
        o.ep = int(expert_parallel_size)
        o.act_quant = act_codes[act_quant]
        self._ctx.check(lib.wna16_model_load(self._ctx.ptr, os.fsencode(model), ctypes.byref(o),
                                             ctypes.byref(self._model)))
        tok_path = tokenizer or model
        has_tokenizer = tokenizer is not None or any(
            os.path.exists(os.path.join(model, name))
            for name in ("tokenizer.json", "tiktoken.model"))
        if has_tokenizer:
            try:
                self._ctx.check(lib.wna16_tokenizer_load(self._ctx.ptr, os.fsencode(tok_path),
                                                         ctypes.byref(self._tok)))
            except Error:
                self.close()
                raise
        self.vocab_size = int(lib.wna16_model_vocab_size(self._model))
        self.max_model_len = int(lib.wna16_model_context(self._model))

    # ---------------------------------------------------------- lifetime
    def close(self) -> None:
        if getattr(self, "_engine", None) and self._engine.value:
            lib.wna16_engine_free(self._engine)
            self._engine = ctypes.c_void_p()
        if getattr(self, "_tok", None) and self._tok.value:
            lib.wna16_tokenizer_free(self._tok)
            self._tok = ctypes.c_void_p()
        if getattr(self, "_model", None) and self._model.value:
            lib.wna16_model_free(self._model)
            self._model = ctypes.c_void_p()
        if getattr(self, "_ctx", None):
            self._ctx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _need_tokenizer(self):
        if not self._tok.value:
            raise Error("ERR_INVALID_ARGUMENT",
                        "this model directory has no tokenizer.json (nor tiktoken.model): pass "
                        "tokenizer=PATH, or "
                        "give prompts as token ids")

    # --------------------------------------------------------- tokenizer
    def tokenize(self, text: str, add_special_tokens: bool = True) -> np.ndarray:
        """Ids as HF's tokenizer.encode(text) (add_special_tokens as there)."""
        self._need_tokenizer()
        raw = text.encode("utf-8")
        ids = _lib.c_int32_p()
        n = ctypes.c_size_t()
        flags = _lib.TOK_PARSE_SPECIAL | (_lib.TOK_ADD_SPECIAL if add_special_tokens else 0)
        with self._lock:
            self._ctx.check(lib.wna16_tokenizer_encode(self._ctx.ptr, self._tok, raw, len(raw),
                                                       flags, ctypes.byref(ids),
                                                       ctypes.byref(n)))
        try:
            return np.ctypeslib.as_array(ids, (n.value,)).copy() if n.value else np.zeros(
                0, np.int32)
        finally:
            lib.wna16_free(ids)

    def detokenize(self, ids, skip_special_tokens: bool = True) -> str:
        self._need_tokenizer()
        a = _ids_array(ids)
        text = ctypes.c_void_p()
        with self._lock:
            self._ctx.check(lib.wna16_tokenizer_decode(self._ctx.ptr, self._tok, _ptr32(a), a.size,
                                                       skip_special_tokens, ctypes.byref(text),
                                                       None))
        return _take_string(text)

    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                            enable_thinking: Optional[bool] = None, tools: Optional[list] = None,
                            chat_template_kwargs: Optional[dict] = None,
                            chat_template: Optional[str] = None) -> str:
        """The model's chat prompt for OpenAI-shaped messages ([{"role",
        "content"}, ...]: content a string or text parts, assistant
        tool_calls, role "tool" results), rendered as the server and
        transformers' apply_chat_template render them. enable_thinking
        (a shorthand for chat_template_kwargs={"enable_thinking": ...})
        None keeps the template's own default, as vLLM."""
        self._need_tokenizer()
        kwargs = dict(chat_template_kwargs or {})
        if enable_thinking is not None:
            kwargs["enable_thinking"] = bool(enable_thinking)
        o = _lib.ChatOptions()
        lib.wna16_chat_options_init(ctypes.byref(o))
        o.add_generation_prompt = bool(add_generation_prompt)
        o.tools = json.dumps(list(tools)).encode() if tools else None
        o.template_kwargs = json.dumps(kwargs).encode() if kwargs else None
        o.chat_template = chat_template.encode() if chat_template is not None else None
        try:
            msgs = json.dumps(list(messages)).encode()
        except TypeError as e:
            raise TypeError(f"apply_chat_template: messages must be JSON-like dicts ({e})") \
                from None
        text = ctypes.c_void_p()
        with self._lock:
            self._ctx.check(lib.wna16_tokenizer_apply_chat_json(self._ctx.ptr, self._tok, msgs,
                                                                ctypes.byref(o),
                                                                ctypes.byref(text)))
        return _take_string(text)

    # ------------------------------------------------------------ logits
    def _eval(self, ids: np.ndarray, logits: Optional[np.ndarray]) -> None:
        ptr = logits.ctypes.data_as(_lib.c_float_p) if logits is not None else None
        self._ctx.check(lib.wna16_model_eval(self._ctx.ptr, self._model, _ptr32(ids), ids.size,
                                             ptr))

    def logits(self, ids) -> np.ndarray:
        """The last position's logits (float32, vocab) after the ids, as `wna16 logits`."""
        a = _ids_array(ids)
        if a.size == 0:
            raise ValueError("logits: no ids")
        out = np.empty(self.vocab_size, np.float32)
        with self._lock:
            lib.wna16_model_reset(self._model)
            self._eval(a, out)
        return out

    def logprobs(self, ids) -> np.ndarray:
        """log p(ids[i] | ids[:i]) for i = 1 .. n-1 (float64, n-1 values): the
        sequence's score, as perplexity tools compute it. One batched pass
        through wna16_model_logprobs (what `wna16 perplexity` and the server's
        echo + logprobs report); the model's cache is left empty."""
        a = _ids_array(ids)
        if a.size < 2:
            raise ValueError("logprobs: need at least two ids")
        out = np.empty(a.size, np.float32)
        with self._lock:
            self._ctx.check(lib.wna16_model_logprobs(self._ctx.ptr, self._model, _ptr32(a), a.size,
                                                     out.ctypes.data_as(_lib.c_float_p), 0, None,
                                                     None))
        return out[1:].astype(np.float64)

    # -------------------------------------------------------- generation
    def _prompt_ids(self, prompt) -> tuple:
        if isinstance(prompt, str):
            return prompt, self.tokenize(prompt)
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                return None, _ids_array(prompt["prompt_token_ids"])
            return prompt.get("prompt"), self.tokenize(prompt["prompt"])
        return None, _ids_array(prompt)

    def _engine_ptr(self):
        if not self._engine.value:
            o = _lib.EngineOptions()
            lib.wna16_engine_options_init(ctypes.byref(o))
            o.tokenizer = self._tok.value
            (o.max_num_seqs, o.max_num_batched_tokens, o.enable_prefix_caching,
             o.kv_cache_memory) = self._engine_args
            self._ctx.check(lib.wna16_engine_create(self._ctx.ptr, self._model, ctypes.byref(o),
                                                    ctypes.byref(self._engine)))
            eos = (ctypes.POINTER(ctypes.c_int32))()
            n = lib.wna16_model_eos(self._model, ctypes.byref(eos))
            self._eos = {eos[i] for i in range(n)}
        return self._engine

    def _c_params(self, params: "SamplingParams", copy: int, want_logprobs: bool):
        c, keep = _sampling.fill_engine_params(params, self.vocab_size)
        if params.seed is not None:
            c.sampler.seed = params.seed + copy  # n copies of one request differ
        if want_logprobs and c.logprobs < 0:
            c.logprobs = 0  # best_of ranks the copies by their cumulative logprob
        return c, keep

    def _add(self, prompt, params: "SamplingParams", copy: int = 0) -> _Request:
        text, ids = self._prompt_ids(prompt)
        if ids.size == 0:
            raise ValueError("generate: empty prompt")
        engine = self._engine_ptr()
        ranked = (params.best_of or params.n) > params.n
        c, keep = self._c_params(params, copy, ranked)
        rid = str(self._next_id)
        self._next_id += 1
        pr = _lib.Prompt(ids=_ptr32(ids), n_ids=ids.size)
        self._ctx.check(lib.wna16_engine_add_request(self._ctx.ptr, engine, rid.encode(),
                                                     ctypes.byref(pr), ctypes.byref(c), None,
                                                     None))
        del keep
        r = _Request(rid, text, ids, self._eos, params.logprobs is not None)
        self._requests[rid] = r
        return r

    def _step(self) -> List[_Request]:
        """One engine step; returns the requests it finished."""
        outs = ctypes.POINTER(_lib.RequestOutputC)()
        n = ctypes.c_size_t()
        self._ctx.check(lib.wna16_engine_step(self._ctx.ptr, self._engine, ctypes.byref(outs),
                                              ctypes.byref(n)))
        done = []
        for i in range(n.value):
            o = outs[i]
            r = self._requests.get(o.request_id.decode())
            if r is None:
                continue
            r.take(o)
            if r.finish is not None:
                del self._requests[r.rid]
                done.append(r)
        return done

    def _abort(self, reqs) -> None:
        for r in reqs:
            if r.rid in self._requests and r.finish is None:
                lib.wna16_engine_abort(None, self._engine, r.rid.encode())
        while any(r.finish is None for r in reqs):
            self._step()

    def _raise_failed(self, reqs) -> None:
        for r in reqs:
            if r.finish == "error":
                raise Error("ERR_INTERNAL", r.error or "generation failed")

    def generate(self, prompts, sampling_params=None, use_tqdm: bool = False
                 ) -> List[RequestOutput]:
        """One RequestOutput per prompt (a str, a list of ids, or a dict with
        "prompt" or "prompt_token_ids"), as vllm.LLM.generate: every prompt
        is submitted to the engine at once and they run continuously
        batched. sampling_params: one for all, or a list with one per
        prompt. use_tqdm: a progress bar (tqdm when installed)."""
        if isinstance(prompts, (str, dict)) or (
                isinstance(prompts, (list, tuple, np.ndarray)) and len(prompts) and
                isinstance(prompts[0], (int, np.integer))):
            prompts = [prompts]
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != len(prompts):
                raise ValueError(f"sampling_params: {len(sampling_params)} for "
                                 f"{len(prompts)} prompts")
            params = list(sampling_params)
        else:
            params = [sampling_params or SamplingParams()] * len(prompts)
        with self._lock:
            groups: List[List[_Request]] = []  # per prompt: its n (or best_of) samples
            reqs: List[_Request] = []
            progress = _Progress(len(prompts), use_tqdm)
            try:
                for p, sp in zip(prompts, params):
                    groups.append([self._add(p, sp, k) for k in range(sp.best_of or sp.n)])
                    reqs += groups[-1]
                left = len(groups)
                while any(r.finish is None for r in reqs):
                    self._step()
                    now = sum(1 for g in groups if any(r.finish is None for r in g))
                    progress.advance(left - now)
                    left = now
            except BaseException:
                self._abort(reqs)
                raise
            finally:
                progress.close()
            self._raise_failed(reqs)
            return [g[0].output(g, sp.n) for g, sp in zip(groups, params)]

    def generate_stream(self, prompt, sampling_params: Optional[SamplingParams] = None
                        ) -> Iterator[str]:
        """Yields the text as it is generated (never splitting a UTF-8
        character or a possible stop string). Closing the iterator early
        aborts the request."""
        params = sampling_params or SamplingParams()
        with self._lock:
            r = self._add(prompt, params)
        try:
            while True:
                with self._lock:
                    if r.finish is None:
                        self._step()
                    pieces, r.new_text = r.new_text, []
                for piece in pieces:
                    yield piece
                if r.finish is not None:
                    break
        finally:
            with self._lock:
                self._abort([r])
        self._raise_failed([r])

    def chat(self, messages, sampling_params: Optional[SamplingParams] = None,
             use_tqdm: bool = False, chat_template: Optional[str] = None,
             add_generation_prompt: bool = True,
             chat_template_kwargs: Optional[dict] = None, tools: Optional[list] = None,
             enable_thinking: Optional[bool] = None) -> List[RequestOutput]:
        """Generation from the model's chat template, as vllm.LLM.chat: one
        conversation or a list of them, one RequestOutput each. The prompt
        is rendered as the server renders it (apply_chat_template: tools,
        chat_template_kwargs, the template's own thinking default)."""
        convs = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        if not convs:
            raise ValueError("chat: no conversation")
        prompts, texts = [], []
        for conv in convs:
            text = self.apply_chat_template(conv, add_generation_prompt, enable_thinking, tools,
                                            chat_template_kwargs, chat_template)
            texts.append(text)
            prompts.append({"prompt_token_ids": self.tokenize(text, add_special_tokens=False)})
        outs = self.generate(prompts, sampling_params or SamplingParams(), use_tqdm=use_tqdm)
        for out, text in zip(outs, texts):
            out.prompt = text
        return outs


def inspect(model: str, tp: Optional[Iterable[int]] = None) -> dict:
    """`wna16 inspect --json` as a dict: the checkpoint, its quantization,
    and whether it shards at each TP degree (1, 2, 4, 8 by default)."""
    ctx = _Context()
    ck = ctypes.c_void_p()
    try:
        ctx.check(lib.wna16_checkpoint_open(ctx.ptr, os.fsencode(model), ctypes.byref(ck)))
        degrees = list(tp or [])
        arr = (ctypes.c_int * max(1, len(degrees)))(*degrees)
        text = ctypes.c_void_p()
        loadable = ctypes.c_bool()
        try:
            ctx.check(lib.wna16_checkpoint_report(ctx.ptr, ck, arr, len(degrees), True,
                                                  ctypes.byref(text), ctypes.byref(loadable)))
        finally:
            lib.wna16_checkpoint_close(ck)
        return json.loads(_take_string(text))
    finally:
        ctx.close()


def quantize(model: str, output: str, scheme: str = "W4A16", group_size: int = 128,
             method: str = "gptq", actorder: str = "static", dampening: float = 0.01,
             calib_text: Optional[str] = None, calib_ids: Optional[Sequence[int]] = None,
             num_samples: int = 128, seq_len: int = 512, seed: int = 0,
             ignore: Sequence[str] = (), threads: int = 0,
             skip_indivisible: bool = False, calib_random: bool = False) -> dict:
    """Quantizes an unquantized model directory into a compressed-tensors
    checkpoint vLLM loads (as `wna16 quantize`); returns the summary. A
    group size that does not divide a linear's input is refused unless
    skip_indivisible leaves such linears unquantized."""
    o = _lib.QuantizeOptions()
    lib.wna16_quantize_options_init(ctypes.byref(o))
    keep = [x.encode() for x in ignore]
    ign = (ctypes.c_char_p * max(1, len(keep)))(*keep)
    o.model, o.output = os.fsencode(model), os.fsencode(output)
    o.scheme, o.group_size = scheme.encode(), int(group_size)
    o.method, o.actorder, o.dampening = method.encode(), actorder.encode(), float(dampening)
    o.calib_text = calib_text.encode() if calib_text is not None else None
    o.calib_ids = ",".join(str(int(i)) for i in calib_ids).encode() if calib_ids is not None \
        else None
    o.num_samples, o.seq_len, o.seed = int(num_samples), int(seq_len), int(seed)
    o.ignore, o.n_ignore, o.threads = (ign if keep else None), len(keep), int(threads)
    o.skip_indivisible = bool(skip_indivisible)
    o.calib_random = bool(calib_random)
    ctx = _Context()
    try:
        report = ctypes.c_void_p()
        try:
            ctx.check(lib.wna16_quantize_model(ctx.ptr, ctypes.byref(o), ctypes.byref(report)))
        except Error as e:  # the library's fixes name CLI flags: name the keywords here
            raise Error(e.status, _python_keywords(e.detail)) from None
        return json.loads(_take_string(report))
    finally:
        ctx.close()


_FLAG_KEYWORDS = (("--calib-random", "calib_random=True"), ("--calib-ids", "calib_ids"),
                  ("--calib FILE.txt", "calib_text=\"FILE.txt\""), ("--calib", "calib_text"),
                  ("--skip-indivisible", "skip_indivisible=True"),
                  ("--group-size", "group_size"), ("--method rtn", "method=\"rtn\""),
                  ("--method", "method"), ("--seq-len", "seq_len"),
                  ("--samples", "num_samples"), ("--ignore", "ignore"),
                  ("--actorder", "actorder"), ("--scheme", "scheme"))


def _python_keywords(detail: str) -> str:
    for flag, keyword in _FLAG_KEYWORDS:
        detail = detail.replace(flag, keyword)
    return detail
