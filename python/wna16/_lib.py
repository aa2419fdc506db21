"""The C interface of libwna16 (include/wna16.h) as ctypes declarations.

Only this module knows the C layout. Options structs carry struct_size
(set from ctypes.sizeof), so a mismatch with the library is refused by the
library itself instead of being read as garbage.
"""
import ctypes
import ctypes.util
import os

c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_float_p = ctypes.POINTER(ctypes.c_float)


class ModelOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("tp", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("context", ctypes.c_int64),
        ("comm", ctypes.c_void_p),
        ("ep", ctypes.c_int),
        ("act_quant", ctypes.c_int),
    ]


class SamplerOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("temperature", ctypes.c_float),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("repetition_penalty", ctypes.c_float),
        ("top_k", ctypes.c_int),
        ("seed", ctypes.c_uint64),
    ]


ON_TEXT = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char),
                           ctypes.c_size_t)


class GenerateOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("max_tokens", ctypes.c_int64),
        ("sampler", SamplerOptions),
        ("stop", ctypes.POINTER(ctypes.c_char_p)),
        ("n_stop", ctypes.c_size_t),
        ("on_text", ON_TEXT),
        ("user", ctypes.c_void_p),
    ]


class GenerateResult(ctypes.Structure):
    _fields_ = [
        ("ids", c_int32_p),
        ("generated", ctypes.c_int64),
        ("text", ctypes.c_char_p),
        ("prompt_tokens", ctypes.c_int64),
        ("prefill_seconds", ctypes.c_double),
        ("decode_seconds", ctypes.c_double),
        ("stop_reason", ctypes.c_char_p),
    ]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class EngineOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("tokenizer", ctypes.c_void_p),
        ("max_num_seqs", ctypes.c_int),
        ("max_num_batched_tokens", ctypes.c_int64),
        ("max_waiting", ctypes.c_int64),
        ("kv_cache_memory", ctypes.c_size_t),
        ("kv_cache_blocks", ctypes.c_int64),
        ("enable_prefix_caching", ctypes.c_bool),
        ("step_floor", ctypes.c_void_p),
        ("step_floor_user", ctypes.c_void_p),
    ]


class SamplingParamsC(ctypes.Structure):
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
    ]


class Prompt(ctypes.Structure):
    _fields_ = [
        ("ids", c_int32_p),
        ("n_ids", ctypes.c_size_t),
        ("text", ctypes.c_char_p),
        ("messages", ctypes.c_void_p),
        ("n_messages", ctypes.c_size_t),
        ("enable_thinking", ctypes.c_bool),
    ]


class TokenLogprob(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_int32),
        ("logprob", ctypes.c_float),
        ("n_top", ctypes.c_int),
        ("top_ids", ctypes.c_int32 * 20),
        ("top_logprobs", ctypes.c_float * 20),
    ]


class RequestOutputC(ctypes.Structure):
    _fields_ = [
        ("request_id", ctypes.c_char_p),
        ("user", ctypes.c_void_p),
        ("token_ids", c_int32_p),
        ("n_tokens", ctypes.c_size_t),
        ("text", ctypes.POINTER(ctypes.c_char)),
        ("text_len", ctypes.c_size_t),
        ("logprobs", ctypes.POINTER(TokenLogprob)),
        ("prompt_logprobs", ctypes.POINTER(TokenLogprob)),
        ("n_prompt_logprobs", ctypes.c_size_t),
        ("prompt_logprobs_start", ctypes.c_int64),
        ("finished", ctypes.c_bool),
        ("finish_reason", ctypes.c_int),
        ("stop_str", ctypes.c_char_p),
        ("stop_token", ctypes.c_int32),
        ("error", ctypes.c_char_p),
        ("prompt_tokens", ctypes.c_int64),
        ("completion_tokens", ctypes.c_int64),
        ("cached_tokens", ctypes.c_int64),
    ]


class ChatOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("add_generation_prompt", ctypes.c_bool),
        ("tools", ctypes.c_char_p),
        ("template_kwargs", ctypes.c_char_p),
        ("chat_template", ctypes.c_char_p),
    ]


class QuantizeOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("model", ctypes.c_char_p),
        ("output", ctypes.c_char_p),
        ("scheme", ctypes.c_char_p),
        ("group_size", ctypes.c_int64),
        ("method", ctypes.c_char_p),
        ("actorder", ctypes.c_char_p),
        ("dampening", ctypes.c_double),
        ("calib_text", ctypes.c_char_p),
        ("calib_ids", ctypes.c_char_p),
        ("seed", ctypes.c_uint64),
        ("num_samples", ctypes.c_int64),
        ("seq_len", ctypes.c_int64),
        ("ignore", ctypes.POINTER(ctypes.c_char_p)),
        ("n_ignore", ctypes.c_size_t),
        ("threads", ctypes.c_int),
        ("max_shard_bytes", ctypes.c_size_t),
        ("skip_indivisible", ctypes.c_bool),
        ("report_text", ctypes.c_bool),
        ("calib_random", ctypes.c_bool),
    ]


LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double,
                               ctypes.c_double)
ABORT_FN = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)

TOK_ADD_SPECIAL = 1
TOK_PARSE_SPECIAL = 2

_P = ctypes.c_void_p
_S = ctypes.c_int  # wna16_status

# name: (restype, argtypes)
_SIGNATURES = {
    "wna16_version": (ctypes.c_char_p, []),
    "wna16_version_number": (ctypes.c_int, []),
    "wna16_status_str": (ctypes.c_char_p, [_S]),
    "wna16_free": (None, [_P]),
    "wna16_ctx_create": (_S, [ctypes.POINTER(_P)]),
    "wna16_ctx_free": (None, [_P]),
    "wna16_ctx_error": (ctypes.c_char_p, [_P]),
    "wna16_ctx_set_log": (None, [_P, LOG_FN, _P, ctypes.c_int]),
    "wna16_ctx_set_progress": (None, [_P, PROGRESS_FN, _P]),
    "wna16_ctx_set_abort": (None, [_P, ABORT_FN, _P]),
    "wna16_model_options_init": (None, [ctypes.POINTER(ModelOptions)]),
    "wna16_model_load": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(ModelOptions),
                              ctypes.POINTER(_P)]),
    "wna16_model_free": (None, [_P]),
    "wna16_model_vocab_size": (ctypes.c_int64, [_P]),
    "wna16_model_context": (ctypes.c_int64, [_P]),
    "wna16_model_reset": (None, [_P]),
    "wna16_model_eos": (ctypes.c_size_t, [_P, ctypes.POINTER(c_int32_p)]),
    "wna16_model_eval": (_S, [_P, _P, c_int32_p, ctypes.c_int64, c_float_p]),
    "wna16_model_logprobs": (_S, [_P, _P, c_int32_p, ctypes.c_int64, c_float_p, ctypes.c_int,
                                  c_int32_p, c_float_p]),
    "wna16_model_release": (_S, [_P, _P, _S]),
    "wna16_sampler_options_init": (None, [ctypes.POINTER(SamplerOptions)]),
    "wna16_generate_options_init": (None, [ctypes.POINTER(GenerateOptions)]),
    "wna16_generate": (_S, [_P, _P, _P, c_int32_p, ctypes.c_size_t,
                            ctypes.POINTER(GenerateOptions), ctypes.POINTER(GenerateResult)]),
    "wna16_generate_result_free": (None, [ctypes.POINTER(GenerateResult)]),
    "wna16_tokenizer_load": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "wna16_tokenizer_free": (None, [_P]),
    "wna16_tokenizer_encode": (_S, [_P, _P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint,
                                    ctypes.POINTER(c_int32_p), ctypes.POINTER(ctypes.c_size_t)]),
    "wna16_tokenizer_decode": (_S, [_P, _P, c_int32_p, ctypes.c_size_t, ctypes.c_bool,
                                    ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.POINTER(ctypes.c_size_t)]),
    "wna16_tokenizer_apply_chat": (_S, [_P, _P, ctypes.POINTER(ChatMessage), ctypes.c_size_t,
                                        ctypes.c_bool, ctypes.c_bool,
                                        ctypes.POINTER(ctypes.c_void_p)]),
    "wna16_chat_options_init": (None, [ctypes.POINTER(ChatOptions)]),
    "wna16_tokenizer_apply_chat_json": (_S, [_P, _P, ctypes.c_char_p,
                                             ctypes.POINTER(ChatOptions),
                                             ctypes.POINTER(ctypes.c_void_p)]),
    "wna16_checkpoint_open": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "wna16_checkpoint_close": (None, [_P]),
    "wna16_checkpoint_report": (_S, [_P, _P, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                     ctypes.c_bool, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_bool)]),
    "wna16_engine_options_init": (None, [ctypes.POINTER(EngineOptions)]),
    "wna16_engine_create": (_S, [_P, _P, ctypes.POINTER(EngineOptions), ctypes.POINTER(_P)]),
    "wna16_engine_free": (None, [_P]),
    "wna16_sampling_params_init": (None, [ctypes.POINTER(SamplingParamsC)]),
    "wna16_engine_add_request": (_S, [_P, _P, ctypes.c_char_p, ctypes.POINTER(Prompt), _P, _P,
                                      _P]),
    "wna16_engine_abort": (_S, [_P, _P, ctypes.c_char_p]),
    "wna16_engine_step": (_S, [_P, _P, ctypes.POINTER(ctypes.POINTER(RequestOutputC)),
                               ctypes.POINTER(ctypes.c_size_t)]),
    "wna16_engine_has_unfinished": (ctypes.c_bool, [_P]),
    "wna16_quantize_options_init": (None, [ctypes.POINTER(QuantizeOptions)]),
    "wna16_quantize_model": (_S, [_P, ctypes.POINTER(QuantizeOptions),
                                  ctypes.POINTER(ctypes.c_void_p)]),
}


def _find_library():
    explicit = os.environ.get("WNA16_LIBRARY")
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libwna16.so.0", "libwna16.so"):
        beside = os.path.join(here, name)  # a wheel that bundles the library
        if os.path.exists(beside):
            return beside
    return ctypes.util.find_library("wna16") or "libwna16.so.0"


def load():
    path = _find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"wna16: cannot load the shared library {path!r} ({e}); install libwna16 "
            "(cmake --install build) or set WNA16_LIBRARY to its path") from None
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib, path


lib, library_path = load()
