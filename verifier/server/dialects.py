"""Request and reply formats of the completion servers a URL audit speaks (``--api NAME``).

A dialect turns one sample request (prompt token ids, a processed-probs :class:`SamplingConfig`,
``max_new_tokens``, a seed, ``n`` completions) into the JSON body a server takes, and the server's
reply into emitted token ids.  Every sampler knob a server applies by default is sent explicitly at
its neutral value (llama-server's default chain has top-k 40, top-p 0.95, min-p 0.05 and a
repetition penalty; vLLM takes defaults from the model's ``generation_config.json``): a knob left
to the server would audit another law than the one the harness computes.

Dialects
--------
``openai-completions``
    ``POST /v1/completions`` of an OpenAI-compatible server (vLLM, SGLang, MLX-LM, providers).
    The prompt is sent as a list of token ids; emitted ids are read from ``choices[i].token_ids``
    (vLLM ``return_token_ids``) or from ``logprobs.tokens`` written as ``"token_id:N"`` (vLLM
    ``return_tokens_as_token_ids``).  ``n`` > 1 per request.
``llama-server``
    llama.cpp's native ``POST /completion`` (``return_tokens``; ``n_probs`` top probabilities;
    per-request ``speculative.n_max``).  One completion per request.
``mlx-lm``
    MLX-LM's ``mlx_lm server`` ``POST /v1/completions`` (docs/servers.md "MLX-LM server"): text prompts
    only, so the prompt ids are decoded with the target's tokenizer and refused unless they re-encode to
    the same ids; emitted ids from ``logprobs: true`` (``logprobs.content[i].id``); top rows
    (``top_logprobs`` <= 11) only in one-token requests (the numeric floor), because with them each entry's
    ``id`` is the first top entry's, not the sampled token; per-request ``num_draft_tokens``; no ``n``;
    no speculation counters.

Raises (from :meth:`Dialect.parse`)
------------------------------------
ServerReplyError
    The reply is not the dialect's JSON (exit 3): the message names the request and shows the head
    of what came back.
"""

from __future__ import annotations

from typing import Any

from verifier.errors import invalid_argument
from verifier.server._dialect_base import (Completion, Dialect, ServerReplyError, StopRule,  # noqa: F401  the public names
                                           request_limit)
from verifier.server._dialect_llama import LlamaServer
from verifier.server._dialect_mlx import MLX_MAX_TOP_LOGPROBS, MLXLM
from verifier.server._dialect_openai import OpenAICompletions

__all__ = ["Completion", "Dialect", "OpenAICompletions", "LlamaServer", "MLXLM", "DIALECTS", "get_dialect",
           "ServerReplyError", "StopRule", "request_limit", "MLX_MAX_TOP_LOGPROBS", "MAX_REQUEST_LOGPROBS", "check_logprobs"]

# K of any logprobs request: above every tokenizer's vocabulary (the largest ~256k; K >= V already returns the whole row),
# and within the 32-bit int a server parses it into (llama-server's n_probs: a larger K is garbage there, not "all")
MAX_REQUEST_LOGPROBS = 1_000_000


DIALECTS: dict[str, Dialect] = {
    "openai-completions": OpenAICompletions(
        "openai-completions", "/v1/completions", max_n=1024, health_paths=("/v1/models",),
        metrics_counters={"drafts": ("vllm:spec_decode_num_drafts",),
                          "draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
                          "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens",)}),
    "llama-server": LlamaServer(
        "llama-server", "/completion", max_n=1, health_paths=("/health",), reported_law="processed", has_switch=True,
        stop_as_strings=True,
        metrics_counters={"drafts": ("llamacpp:spec_decode_num_drafts",),
                          "draft_tokens": ("llamacpp:spec_decode_num_draft_tokens",),
                          "accepted_tokens": ("llamacpp:spec_decode_num_accepted_tokens",)}),
    # no /metrics: the speculation guard says "not observable" (--speculation-unverified accepts that)
    "mlx-lm": MLXLM("mlx-lm", "/v1/completions", max_n=1, health_paths=("/health",), has_switch=True,
                    max_top_logprobs=MLX_MAX_TOP_LOGPROBS, bias_sweep=True,
                    ids_with_top_logprobs=False, needs_text=True, shares_batches=False),
}


def check_logprobs(value: Any) -> None:
    """``--logprobs K``: None or an integer >= 1 (the server's own cap applies on top: vLLM ``--max-logprobs``,
    default 20; mlx-lm 11); anything else is an InvalidArgumentError (exit 2) naming the flag."""
    check_request_logprobs("--logprobs", value, "top logprobs per emitted token")


def check_request_logprobs(flag: str, value: Any, what: str) -> None:
    """``flag``'s K: None or an integer in ``1..MAX_REQUEST_LOGPROBS`` (``what`` says what it asks for); anything else
    is an InvalidArgumentError (exit 2) naming the flag."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REQUEST_LOGPROBS):
        raise invalid_argument(flag, value, f"an integer in 1..{MAX_REQUEST_LOGPROBS:,} ({what}; the server's own cap "
                               "applies, e.g. vLLM --max-logprobs, default 20)")


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name`` (``--api``); an unknown name is an InvalidArgumentError (exit 2)."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise invalid_argument("--api", name, "one of " + ", ".join(sorted(DIALECTS))) from None
