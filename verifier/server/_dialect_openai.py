"""``--api openai-completions``: ``POST /v1/completions`` of an OpenAI-compatible server (vLLM, SGLang, providers).

Prompts go as token ids; emitted ids come back in ``choices[i].token_ids`` (vLLM ``return_token_ids``) or as
``"token_id:N"`` strings in ``logprobs.tokens`` (``return_tokens_as_token_ids``); ``n`` > 1 per request.
"""

from __future__ import annotations

from typing import Any

from verifier.errors import invalid_argument, refuse_sampling
from verifier.server._dialect_base import (TOKEN_ID_TEXT, Completion, Dialect, ServerReplyError, check_finish, head,
                                           logprob_value, request_limit)

__all__ = ["OpenAICompletions"]


class OpenAICompletions(Dialect):
    """``POST /v1/completions`` with token-id prompts (vLLM, SGLang, MLX-LM, providers).

    Sent with the harness's semantics (vLLM 0.32 ``v1/sample/sampler.py``, ``v1/sample/ops/penalties.py``): the
    repetition penalty over prompt + output, presence / frequency penalties over the output only, and min-p -- which
    vLLM applies *before* top-k / top-p, the harness after: the same law with top-k alone (both keep a top set by
    rank, so they commute), another one with top-p, which is then refused.  A stop rule goes as ``stop_token_ids``
    (exact ids; vLLM's ``check_stop`` ends the request at the first one, kept in ``token_ids``, with
    ``finish_reason: "stop"`` and ``stop_reason`` = the id) and ``max_tokens``.
    """

    def check_request_options(self, sampling, logprobs, max_new_tokens=1, stop=None) -> None:
        """Refuse (exit 2) min-p together with top-p: vLLM applies min-p first (see the class docstring)."""
        if sampling.min_p not in (None, 0, 0.0) and sampling.top_p not in (None, 1.0):
            raise refuse_sampling("--min-p", sampling.min_p, "unset with --top-p on --api openai-completions (vLLM "
                                  "applies min-p before top-p; the audited law applies it after, and the two differ "
                                  "once top-p renormalises; min-p with --top-k alone is the same law)")

    def request(self, prompt_ids, sampling, max_new_tokens, seed, *, n=1, logprobs=None, model=None, draft_tokens=None,
                stop=None):
        self.check_request_options(sampling, logprobs, max_new_tokens, stop)
        if draft_tokens is not None:
            raise invalid_argument("speculation per request", draft_tokens, "not with --api openai-completions (no "
                                   "per-request switch): give the speculation-off server as --reference-url")
        body: dict[str, Any] = {
            "prompt": [int(t) for t in prompt_ids],
            "max_tokens": request_limit(stop, max_new_tokens), "n": int(n),
            "temperature": float(sampling.temperature), "top_p": float(sampling.top_p or 1.0),
            "top_k": int(sampling.top_k) if sampling.top_k else -1, "min_p": float(sampling.min_p or 0.0),
            "presence_penalty": float(sampling.presence_penalty or 0.0),
            "frequency_penalty": float(sampling.frequency_penalty or 0.0),
            "repetition_penalty": float(sampling.repetition_penalty or 1.0),
            "stream": False, "echo": False, "skip_special_tokens": False, "ignore_eos": False,
            "return_tokens_as_token_ids": True, "return_token_ids": True,
        }
        if stop and stop.token_ids:  # only with a stop rule: bodies (journal keys) of other audits are unchanged
            body["stop_token_ids"] = [int(t) for t in stop.token_ids]
        if seed is not None:
            body["seed"] = int(seed)
        if logprobs is not None:  # only when asked: older servers turned speculation off for logprobs requests
            body["logprobs"] = int(logprobs)
        if model:
            body["model"] = model
        return body

    def parse(self, body, *, n, max_new_tokens, eos_token_id, what, logprobs=False, stop=None):
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list):
            raise ServerReplyError(f"{what}: the reply has no `choices` list (not an OpenAI completions reply); "
                                   f"reply: {head(body)}")
        if len(choices) != n:
            raise ServerReplyError(f"{what}: asked for n={n} completions, the reply has {len(choices)}; reply: {head(body)}")
        for i, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise ServerReplyError(f"{what}: choices[{i}] is not an object; reply: {head(body)}")
        indices = [c.get("index") for c in choices]
        if any(v is not None for v in indices):  # each completion once, in the order the server numbered them
            if (not all(isinstance(v, int) and not isinstance(v, bool) for v in indices)
                    or sorted(indices) != list(range(n))):
                raise ServerReplyError(f"{what}: the choices' `index` fields are {indices}; allowed: each of "
                                       f"0..{n - 1} once (n={n}); reply: {head(body)}")
            choices = sorted(choices, key=lambda c: c["index"])
        out = []
        for i, choice in enumerate(choices):
            lp = choice.get("logprobs") if isinstance(choice.get("logprobs"), dict) else None
            tokens = choice.get("token_ids")
            if tokens is None and lp is not None and isinstance(lp.get("tokens"), list):
                tokens = []
                for text in lp["tokens"]:
                    m = TOKEN_ID_TEXT.match(str(text))
                    if not m:
                        raise ServerReplyError(f"{what}: choices[{i}].logprobs.tokens holds {text!r}, not 'token_id:N' "
                                               "(the server ignored return_tokens_as_token_ids and returns no token_ids)")
                    tokens.append(int(m.group(1)))
            if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
                raise ServerReplyError(f"{what}: choices[{i}] carries no emitted token ids (neither `token_ids` nor "
                                       f"`logprobs.tokens` as 'token_id:N'; a server without return_token_ids needs "
                                       f"--logprobs 1); reply: {head(choice)}")
            reason = choice.get("finish_reason")
            if reason not in ("stop", "length"):
                raise ServerReplyError(f"{what}: choices[{i}].finish_reason={reason!r}; allowed: 'stop' or 'length'")
            # vLLM: stop_reason None = EOS, an int = the stop id it stopped at, a str = a stop string (never sent)
            stop_reason = choice.get("stop_reason") if reason == "stop" else None
            sent = set(stop.token_ids) if stop else set()
            at_rule = isinstance(stop_reason, int) and not isinstance(stop_reason, bool) and stop_reason in sent
            other = stop_reason is not None and not at_rule
            row = list(tokens)
            if at_rule and row and row[-1] != stop_reason and len(row) < request_limit(stop, max_new_tokens):
                row.append(stop_reason)  # a server that leaves the stop id out of token_ids, as EOS below
            ids, finish = check_finish(row, reason == "stop" and stop_reason is None, other, max_new_tokens,
                                       eos_token_id, what, choice, stop=stop, at_rule=at_rule)
            logps = _openai_logprobs(lp, len(tokens), what, i)
            tops = _openai_top(lp, len(tokens), what, i, body)
            if logprobs and logps is None:
                raise ServerReplyError(f"{what}: logprobs were asked for and choices[{i}] has none "
                                       f"(logprobs.token_logprobs missing); reply: {head(choice)}")
            if len(ids) > len(tokens):  # EOS (or the stop id) appended: the server reported nothing for it
                logps = None if logps is None else logps + (None,)
                tops = None if tops is None else tops + ({},)
            elif len(ids) < len(tokens):  # a row past max_tokens cut to the row width (stop rule)
                logps = None if logps is None else logps[:len(ids)]
                tops = None if tops is None else tops[:len(ids)]
            out.append(Completion(ids, finish, logps, tops))
        return out


def _openai_logprobs(lp, count, what, i):
    if lp is None or lp.get("token_logprobs") is None:
        return None
    values = lp["token_logprobs"]
    if not isinstance(values, list) or len(values) != count:
        raise ServerReplyError(f"{what}: choices[{i}].logprobs.token_logprobs has "
                               f"{len(values) if isinstance(values, list) else 'no'} entries for {count} tokens")
    return tuple(None if v is None else logprob_value(v, f"{what}: choices[{i}].logprobs.token_logprobs", values)
                 for v in values)


def _openai_top(lp, count, what, i, body=None):
    if lp is None or not isinstance(lp.get("top_logprobs"), list):
        return None
    rows = []
    for row in lp["top_logprobs"]:
        if row is None:
            row = {}
        if not isinstance(row, dict):
            raise ServerReplyError(f"{what}: choices[{i}].logprobs.top_logprobs holds {head(row)}; allowed: one "
                                   "object {token: logprob} per emitted token")
        entry = {}
        for text, value in row.items():
            m = TOKEN_ID_TEXT.match(str(text))
            if m is None:
                return None  # tops keyed by text, not ids: not usable as a law
            entry[int(m.group(1))] = logprob_value(value, f"{what}: choices[{i}].logprobs.top_logprobs", row)
        rows.append(entry)
    return tuple(rows) if len(rows) == count else None
