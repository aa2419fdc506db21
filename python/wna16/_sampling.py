"""SamplingParams as the engine reads it: the ctypes layout of
wna16_sampling_params (include/wna16.h) with its structured output and
logit bias, and the checks that name a bad field by its Python keyword.

fill_engine_params(params, vocab) returns a wna16_sampling_params and the
Python objects that must stay alive while the engine copies it
(wna16_engine_add_request copies everything it needs)."""
import ctypes
import json
import math
import os
from dataclasses import dataclass
from typing import List, Optional, Union

from ._lib import SamplerOptions, c_int32_p, c_float_p

STRUCTURED_NONE, JSON_OBJECT, JSON_SCHEMA, REGEX, CHOICE, GRAMMAR, TOOL_CALLS = range(7)


class StructuredOutputC(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("spec", ctypes.c_char_p),
        ("choices", ctypes.POINTER(ctypes.c_char_p)),
        ("n_choices", ctypes.c_size_t),
        ("strict", ctypes.c_bool),
        ("compact_json", ctypes.c_bool),
        ("tool_format", ctypes.c_int),
        ("parallel_tool_calls", ctypes.c_bool),
    ]


class EngineSamplingParamsC(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("max_tokens", ctypes.c_int64),
        ("min_tokens", ctypes.c_int64),
        ("sampler", SamplerOptions),
        ("presence_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("stop", ctypes.POINTER(ctypes.c_char_p)),
        ("n_stop", ctypes.c_size_t),
        ("stop_token_ids", c_int32_p),
        ("n_stop_token_ids", ctypes.c_size_t),
        ("ignore_eos", ctypes.c_bool),
        ("include_stop_str_in_output", ctypes.c_bool),
        ("skip_special_tokens", ctypes.c_bool),
        ("logprobs", ctypes.c_int),
        ("prompt_logprobs", ctypes.c_int),
        ("structured", StructuredOutputC),
        ("logit_bias_ids", c_int32_p),
        ("logit_bias", c_float_p),
        ("n_logit_bias", ctypes.c_size_t),
    ]


@dataclass
class StructuredOutputsParams:
    """As vllm.sampling_params.StructuredOutputsParams: exactly one of json
    (a JSON Schema, dict or str), regex, choice, grammar (GBNF) or
    json_object=True."""
    json: Optional[Union[dict, str]] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False

    def __post_init__(self):
        given = [k for k in ("json", "regex", "choice", "grammar", "json_object")
                 if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError("StructuredOutputsParams: give exactly one of json, regex, choice, "
                             f"grammar, json_object (got {given or 'none'})")
        if self.choice is not None and (not isinstance(self.choice, (list, tuple)) or
                                        not self.choice or
                                        not all(isinstance(c, str) for c in self.choice)):
            raise ValueError("StructuredOutputsParams.choice must be a non-empty list of strings")
        for k in ("regex", "grammar"):
            if getattr(self, k) is not None and not isinstance(getattr(self, k), str):
                raise ValueError(f"StructuredOutputsParams.{k} must be a string")
        if self.json is not None and not isinstance(self.json, (dict, str)):
            raise ValueError("StructuredOutputsParams.json must be a JSON Schema (dict or str)")


def check(p) -> None:
    """Raises ValueError/TypeError naming the SamplingParams keyword."""
    def num(name, lo=-math.inf, hi=math.inf):
        v = getattr(p, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
                not lo <= v <= hi:
            raise ValueError(f"SamplingParams.{name} is {v!r}; it must be a number in "
                             f"[{lo}, {hi}]")

    def integer(name, lo, hi=2**62, none_ok=False):
        v = getattr(p, name)
        if v is None and none_ok:
            return
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"SamplingParams.{name} is {v!r}; it must be an integer in "
                             f"[{lo}, {hi}]" + (" or None" if none_ok else ""))
    num("temperature", 0, 1e6)
    num("top_p", 0, 1)
    num("min_p", 0, 1)
    num("repetition_penalty", 1e-6, 1e6)
    num("presence_penalty", -2, 2)
    num("frequency_penalty", -2, 2)
    integer("top_k", -1, 2**30)
    integer("max_tokens", 0, 2**40)
    integer("min_tokens", 0, 2**40)
    integer("n", 1, 64)
    integer("best_of", 1, 64, none_ok=True)
    integer("logprobs", 0, 20, none_ok=True)
    integer("prompt_logprobs", 0, 20, none_ok=True)
    integer("seed", 0, 2**64 - 1, none_ok=True)
    if p.best_of is not None and p.best_of < p.n:
        raise ValueError(f"SamplingParams.best_of ({p.best_of}) must be at least n ({p.n})")
    if p.stop is not None and not isinstance(p.stop, str) and \
            not all(isinstance(s, str) for s in p.stop):
        raise TypeError("SamplingParams.stop must be a string or a list of strings")
    if p.stop_token_ids is not None and not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in p.stop_token_ids):
        raise TypeError("SamplingParams.stop_token_ids must be a list of token ids")
    if p.logit_bias is not None:
        if not isinstance(p.logit_bias, dict):
            raise TypeError("SamplingParams.logit_bias must be a dict {token id: bias}")
        for k, v in p.logit_bias.items():
            if isinstance(k, bool) or not isinstance(int(k) if isinstance(k, str) and
                                                     k.isdigit() else k, int):
                raise TypeError(f"SamplingParams.logit_bias key {k!r} is not a token id")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not -100 <= v <= 100:
                raise ValueError(f"SamplingParams.logit_bias[{k!r}] is {v!r}; it must be in "
                                 "[-100, 100]")
    so = p.structured_outputs
    if so is not None and not isinstance(so, StructuredOutputsParams):
        raise TypeError("SamplingParams.structured_outputs must be a StructuredOutputsParams")
    for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
        if not isinstance(getattr(p, name), bool):
            raise TypeError(f"SamplingParams.{name} must be True or False")


def seed_of(p) -> int:
    """The request's seed: the one given, else fresh randomness (vLLM's
    seed=None)."""
    return p.seed if p.seed is not None else int.from_bytes(os.urandom(8), "little")


def fill_engine_params(p, vocab: int):
    """(EngineSamplingParamsC, keep-alive list) for one sequence of p."""
    check(p)
    c = EngineSamplingParamsC()
    keep = []
    c.struct_size = ctypes.sizeof(c)
    c.max_tokens, c.min_tokens = int(p.max_tokens), int(p.min_tokens)
    s = c.sampler
    s.struct_size = ctypes.sizeof(SamplerOptions)
    s.temperature, s.top_p, s.min_p = p.temperature, p.top_p, p.min_p
    s.repetition_penalty, s.top_k, s.seed = p.repetition_penalty, p.top_k, seed_of(p)
    c.presence_penalty, c.frequency_penalty = p.presence_penalty, p.frequency_penalty
    stops = [x.encode() for x in p._stop_list()]
    if stops:
        arr = (ctypes.c_char_p * len(stops))(*stops)
        keep += [stops, arr]
        c.stop, c.n_stop = arr, len(stops)
    if p.stop_token_ids:
        ids = (ctypes.c_int32 * len(p.stop_token_ids))(*p.stop_token_ids)
        keep.append(ids)
        c.stop_token_ids, c.n_stop_token_ids = ids, len(p.stop_token_ids)
    c.ignore_eos = p.ignore_eos
    c.include_stop_str_in_output = p.include_stop_str_in_output
    c.skip_special_tokens = p.skip_special_tokens
    c.logprobs = -1 if p.logprobs is None else p.logprobs
    c.prompt_logprobs = -1 if p.prompt_logprobs is None else p.prompt_logprobs
    if p.logit_bias:
        items = [(int(k), float(v)) for k, v in p.logit_bias.items()]
        for k, _ in items:
            if not 0 <= k < vocab:
                raise ValueError(f"SamplingParams.logit_bias token id {k} is outside the "
                                 f"vocabulary [0, {vocab})")
        ids = (ctypes.c_int32 * len(items))(*[k for k, _ in items])
        vals = (ctypes.c_float * len(items))(*[v for _, v in items])
        keep += [ids, vals]
        c.logit_bias_ids, c.logit_bias, c.n_logit_bias = ids, vals, len(items)
    so = p.structured_outputs
    if so is not None:
        st = c.structured
        st.strict = so.disable_additional_properties
        st.compact_json = so.disable_any_whitespace
        if so.json_object:
            st.kind = JSON_OBJECT
        elif so.json is not None:
            st.kind = JSON_SCHEMA
            spec = (so.json if isinstance(so.json, str) else json.dumps(so.json)).encode()
            keep.append(spec)
            st.spec = spec
        elif so.regex is not None or so.grammar is not None:
            st.kind = REGEX if so.regex is not None else GRAMMAR
            spec = (so.regex if so.regex is not None else so.grammar).encode()
            keep.append(spec)
            st.spec = spec
        else:
            st.kind = CHOICE
            raw = [x.encode() for x in so.choice]
            arr = (ctypes.c_char_p * len(raw))(*raw)
            keep += [raw, arr]
            st.choices, st.n_choices = arr, len(raw)
    return c, keep
