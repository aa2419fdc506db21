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
import queue
import threading
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

    def _needs_engine(self) -> List[str]:
        """The keywords the one-sequence wna16_generate path cannot honour."""
        defaults = SamplingParams.__dataclass_fields__
        names = ("n", "best_of", "presence_penalty", "frequency_penalty", "stop_token_ids",
                 "ignore_eos", "min_tokens", "include_stop_str_in_output",
                 "skip_special_tokens", "logprobs", "prompt_logprobs", "logit_bias",
                 "structured_outputs")
        return [k for k in names if getattr(self, k) != defaults[k].default]


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
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    request_id: str = ""
    finished: bool = True
    prompt_logprobs: Optional[list] = None


_REQUEST_IDS = itertools.count()
_FINISH = {"eos": "stop", "stop": "stop", "length": "length", "callback": "abort"}


class LLM:
    """A loaded model, its tokenizer (when the directory has one) and a
    context. Calls on one LLM are serialized (the model holds one sequence's
    KV cache); use one LLM per thread for parallel work."""

    def __init__(self, model: str, tokenizer: Optional[str] = None, tensor_parallel_size: int = 1,
                 threads: int = 0, max_model_len: int = 0):
        self._ctx = _Context()
        self._lock = threading.Lock()
        self._model = ctypes.c_void_p()
        self._tok = ctypes.c_void_p()
        o = _lib.ModelOptions()
        lib.wna16_model_options_init(ctypes.byref(o))
        o.tp, o.threads, o.context = int(tensor_parallel_size), int(threads), int(max_model_len)
        self._ctx.check(lib.wna16_model_load(self._ctx.ptr, os.fsencode(model), ctypes.byref(o),
                                             ctypes.byref(self._model)))
        tok_path = tokenizer or model
        has_tokenizer = tokenizer is not None or os.path.exists(
            os.path.join(model, "tokenizer.json"))
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
                        "this model directory has no tokenizer.json: pass tokenizer=PATH, or "
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

    def _options(self, params: SamplingParams, on_text=None):
        unsupported = params._needs_engine()
        if unsupported:
            raise Error("ERR_UNSUPPORTED",
                        "SamplingParams." + ", ".join(unsupported) + ": not honoured by this "
                        "one-sequence generation path; leave them at their defaults")
        o = _lib.GenerateOptions()
        lib.wna16_generate_options_init(ctypes.byref(o))
        o.max_tokens = int(params.max_tokens)
        s = o.sampler
        s.temperature, s.top_p, s.min_p = params.temperature, params.top_p, params.min_p
        s.repetition_penalty, s.top_k = params.repetition_penalty, params.top_k
        s.seed = _sampling.seed_of(params)
        stops = [x.encode() for x in params._stop_list()]
        keep = (ctypes.c_char_p * max(1, len(stops)))(*stops)
        o.stop, o.n_stop = (keep if stops else None), len(stops)
        if on_text is not None:
            o.on_text = on_text
        return o, keep

    def _generate_one(self, prompt, params: SamplingParams, on_text=None) -> RequestOutput:
        text, ids = self._prompt_ids(prompt)
        if ids.size == 0:
            raise ValueError("generate: empty prompt")
        o, keep = self._options(params, on_text)
        r = _lib.GenerateResult()
        tok = self._tok if self._tok.value else None
        with self._lock:
            st = lib.wna16_generate(self._ctx.ptr, self._model, tok, _ptr32(ids), ids.size,
                                    ctypes.byref(o), ctypes.byref(r))
            try:
                self._ctx.check(st)
                out_ids = [r.ids[i] for i in range(r.generated)]
                reason = (r.stop_reason or b"length").decode()
                out = RequestOutput(
                    prompt=text, prompt_token_ids=ids.tolist(),
                    outputs=[CompletionOutput(0, (r.text or b"").decode("utf-8", "replace"),
                                              out_ids, _FINISH.get(reason, reason), reason)],
                    prefill_seconds=r.prefill_seconds, decode_seconds=r.decode_seconds,
                    request_id=str(next(_REQUEST_IDS)))
            finally:
                lib.wna16_generate_result_free(ctypes.byref(r))
        del keep
        return out

    def generate(self, prompts, sampling_params: Optional[SamplingParams] = None
                 ) -> List[RequestOutput]:
        """One RequestOutput per prompt (a str, a list of ids, or a dict with
        "prompt" or "prompt_token_ids"), as vllm.LLM.generate."""
        params = sampling_params or SamplingParams()
        if isinstance(prompts, (str, dict)) or (
                isinstance(prompts, (list, tuple, np.ndarray)) and len(prompts) and
                isinstance(prompts[0], (int, np.integer))):
            prompts = [prompts]
        return [self._generate_one(p, params) for p in prompts]

    def generate_stream(self, prompt, sampling_params: Optional[SamplingParams] = None
                        ) -> Iterator[str]:
        """Yields the text as it is generated (never splitting a UTF-8
        character or a possible stop string). Closing the iterator early
        stops the generation."""
        params = sampling_params or SamplingParams()
        pieces: "queue.Queue" = queue.Queue()
        stop = threading.Event()
        done = object()

        @_lib.ON_TEXT
        def on_text(_user, data, length):
            pieces.put(ctypes.string_at(data, length).decode("utf-8", "replace"))
            return not stop.is_set()

        failure = []

        def run():
            try:
                self._generate_one(prompt, params, on_text)
            except BaseException as e:  # raised in the caller's thread below
                failure.append(e)
            finally:
                pieces.put(done)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        try:
            while True:
                item = pieces.get()
                if item is done:
                    break
                if item:
                    yield item
        finally:
            stop.set()
            worker.join()
        if failure:
            raise failure[0]

    def chat(self, messages, sampling_params: Optional[SamplingParams] = None,
             use_tqdm: bool = False, chat_template: Optional[str] = None,
             add_generation_prompt: bool = True,
             chat_template_kwargs: Optional[dict] = None, tools: Optional[list] = None,
             enable_thinking: Optional[bool] = None) -> List[RequestOutput]:
        """Generation from the model's chat template, as vllm.LLM.chat: one
        conversation or a list of them, one RequestOutput each. The prompt
        is rendered as the server renders it (apply_chat_template: tools,
        chat_template_kwargs, the template's own thinking default)."""
        if use_tqdm:
            raise TypeError("chat: use_tqdm is not supported (no progress bar)")
        convs = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        if not convs:
            raise ValueError("chat: no conversation")
        prompts, texts = [], []
        for conv in convs:
            text = self.apply_chat_template(conv, add_generation_prompt, enable_thinking, tools,
                                            chat_template_kwargs, chat_template)
            texts.append(text)
            prompts.append({"prompt_token_ids": self.tokenize(text, add_special_tokens=False)})
        outs = self.generate(prompts, sampling_params or SamplingParams())
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
