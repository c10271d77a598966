"""``--api mlx-lm``: MLX-LM's ``mlx_lm server`` ``POST /v1/completions`` (docs/servers.md "MLX-LM server").

Text prompts only (written by the target's tokenizer, :meth:`Dialect.with_text`); emitted ids from ``logprobs: true``
(``logprobs.content[i].id``); top rows only in one-token requests; no ``n``; no speculation counters.
"""

from __future__ import annotations

from typing import Any

from verifier.errors import invalid_argument
from verifier.server._dialect_base import Completion, Dialect, ServerReplyError, check_finish, head, logprob_value, token_id

__all__ = ["MLXLM", "MLX_MAX_TOP_LOGPROBS"]

MLX_MAX_TOP_LOGPROBS = 11  # mlx_lm server: _validate("top_logprobs", int, max_val=11)

class MLXLM(Dialect):
    """MLX-LM's ``POST /v1/completions`` (``mlx_lm server``; module docstring, docs/servers.md)."""

    def check_request_options(self, sampling, logprobs, max_new_tokens=1, stop=None) -> None:
        """What this server cannot express, as InvalidArgumentError (exit 2) -- called by the CLI before any
        request, and again per request.  Min-p, presence / frequency penalties and stop rules are refused, each with
        what ``mlx_lm server`` 0.32.2 does instead or what was not checked."""
        from verifier.errors import refuse_sampling

        why = {"--min-p": (sampling.min_p, "it applies min-p to the temperature-1 logprobs, before top-k and the "
                           "temperature (sample_utils.make_sampler): the audited law only at T = 1, and not checked on "
                           "its speculative path"),
               "--presence-penalty": (sampling.presence_penalty, "its presence window is the last "
                                      "presence_context_size (default 20) tokens, not the generated tokens"),
               "--frequency-penalty": (sampling.frequency_penalty, "its frequency window is the last "
                                       "frequency_context_size (default 20) tokens, not the generated tokens")}
        for flag, (value, reason) in why.items():
            if value not in (None, 0, 0.0):
                raise refuse_sampling(flag, value, f"unset with --api mlx-lm ({reason})")
        if stop:
            raise refuse_sampling("--stop-token-ids/--max-tokens", [list(stop.token_ids), stop.max_tokens],
                                  "unset with --api mlx-lm (its stop words are text re-encoded to token sequences, "
                                  "generate.make_stop_sequences; no stop ids, and its stop handling on the speculative "
                                  "path is not checked)")
        if logprobs is not None and not 1 <= int(logprobs) <= self.max_top_logprobs:
            raise invalid_argument("--logprobs", logprobs, f"an integer in 1..{self.max_top_logprobs} with --api mlx-lm "
                                   "(the server's top_logprobs cap)")
        if sampling.repetition_penalty not in (None, 1.0):
            raise invalid_argument("--repetition-penalty", sampling.repetition_penalty, "none with --api mlx-lm (its "
                                   "penalty covers the last 20 tokens only, not the whole context)")
        if sampling.top_p not in (None, 1.0) and sampling.top_k:
            raise invalid_argument("--top-p", sampling.top_p, "1.0 with --top-k on --api mlx-lm (it applies top-p "
                                   "before top-k; the audited law applies it after)")
        if sampling.top_p not in (None, 1.0) and sampling.temperature not in (0.0, 1.0):
            raise invalid_argument("--top-p", sampling.top_p, "1.0, or temperature 1, with --api mlx-lm (it applies "
                                   "top-p before the temperature; the audited law applies it after)")

    def request(self, prompt_ids, sampling, max_new_tokens, seed, *, n=1, logprobs=None, model=None, draft_tokens=None,
                stop=None):
        if n != 1:
            raise invalid_argument("n per request", n, "1 with --api mlx-lm (the server ignores `n`)")
        if self.text_of is None:
            raise invalid_argument("--api", self.name, "with --target (its tokenizer writes the text prompt this "
                                   "server takes)")
        self.check_request_options(sampling, logprobs, max_new_tokens, stop)
        if logprobs is not None and max_new_tokens != 1:
            raise invalid_argument("--logprobs", logprobs, "top logprobs only in one-token requests with --api mlx-lm "
                                   "(with them each entry's id is the first top entry's, not the emitted token)")
        body: dict[str, Any] = {
            "prompt": self.text_of(prompt_ids), "max_tokens": int(max_new_tokens),
            "temperature": float(sampling.temperature), "top_p": float(sampling.top_p or 1.0),
            "top_k": int(sampling.top_k or 0), "min_p": 0.0, "repetition_penalty": 0.0, "presence_penalty": 0.0,
            "frequency_penalty": 0.0, "xtc_probability": 0.0, "logprobs": True, "stream": False,
        }
        if logprobs is not None:
            body["top_logprobs"] = int(logprobs)
        if seed is not None:
            body["seed"] = int(seed)
        if draft_tokens is not None:
            body["num_draft_tokens"] = int(draft_tokens)
        if model:  # another name makes the server load that path: sent only when the user gives --model
            body["model"] = model
        return body

    def parse(self, body, *, n, max_new_tokens, eos_token_id, what, logprobs=False, stop=None):
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise ServerReplyError(f"{what}: the reply has no one-element `choices` list (not an mlx_lm server "
                                   f"completion); reply: {head(body)}")
        choice = choices[0]
        lp = choice.get("logprobs")
        content = lp.get("content") if isinstance(lp, dict) else None
        if not isinstance(content, list) or not all(isinstance(e, dict) for e in content):
            raise ServerReplyError(f"{what}: choices[0].logprobs.content is missing (logprobs: true was sent; the "
                                   f"emitted ids come from it); reply: {head(choice)}")
        tops = None
        try:
            if any("top_logprobs" in e for e in content):
                if max_new_tokens != 1:
                    raise ServerReplyError(f"{what}: top_logprobs in a {max_new_tokens}-token reply (not asked for)")
                tops = tuple({token_id(t.get("id")): logprob_value(t.get("logprob"), "logprobs.content[].top_logprobs", e)
                              for t in e.get("top_logprobs") or ()} for e in content)
            tokens = [token_id(e.get("id")) for e in content]
        except (TypeError, AttributeError) as exc:
            raise ServerReplyError(f"{what}: choices[0].logprobs.content is malformed ({exc}); reply: "
                                   f"{head(choice)}") from None
        logps = tuple(logprob_value(e.get("logprob"), "logprobs.content[].logprob", e) for e in content)
        reason = choice.get("finish_reason")
        if reason not in ("stop", "length"):
            raise ServerReplyError(f"{what}: choices[0].finish_reason={reason!r}; allowed: 'stop' or 'length'")
        ids, finish = check_finish(tokens, reason == "stop", False, max_new_tokens, eos_token_id, what, choice)
        if len(ids) > len(tokens):
            logps, tops = logps + (None,), None if tops is None else tops + ({},)
        return [Completion(ids, finish, None if tops is not None else logps, tops)]
