"""``--api llama-server``: llama.cpp's native ``POST /completion`` (``llama-server``).

``return_tokens`` gives the emitted ids, ``n_probs`` with ``post_sampling_probs`` the processed top probabilities,
``timings.draft_n`` / ``draft_n_accepted`` the per-request draft figures, ``speculative.n_max`` the per-request
speculation switch; one completion per request.
"""

from __future__ import annotations

from typing import Any

from verifier.errors import invalid_argument, refuse_sampling
from verifier.server._dialect_base import (Completion, Dialect, ServerReplyError, draft_count, check_finish, head,
                                           logprob_value, prob_log, request_limit, token_id)

__all__ = ["LlamaServer"]


class LlamaServer(Dialect):
    """llama.cpp's native ``POST /completion`` (``llama-server``; build 0c1e570 read for what is sent).

    The sampler chain is sent in the harness's order: ``penalties`` (the repetition penalty, window prompt +
    generated), ``top_k``, ``temperature``, ``top_p``, ``min_p``.  llama.cpp's min-p (``src/llama-sampler.cpp``
    ``llama_sampler_min_p_apply``) keeps ``logit >= max logit + log(min_p)`` on the logits the temperature sampler
    divided and top-p left unchanged (it truncates, sorted), i.e. ``p >= min_p * max p`` of the processed law: the
    harness's min-p (``min_keep`` 0: the top token always stays).  Presence / frequency penalties are refused: the
    ``penalties`` sampler counts the last ``repeat_last_n`` tokens the sampler accepted, the prompt's included
    (``server-context.cpp`` ``init_sampler``), where the harness (vLLM's semantics) counts generated tokens only.
    A stop rule goes as stop *strings* (the server has no stop ids): ``process_token`` appends each token to
    ``tokens`` and then looks for a stop string in the text, per token also inside an accepted draft block, so the
    :class:`~verifier.server.dialects.StopRule`'s one-character strings stop exactly at its ids.
    """

    def check_request_options(self, sampling, logprobs, max_new_tokens=1, stop=None) -> None:
        """Refuse (exit 2) presence / frequency penalties, and logprobs with a stop rule."""
        for flag, value in (("--presence-penalty", sampling.presence_penalty),
                            ("--frequency-penalty", sampling.frequency_penalty)):
            if value not in (None, 0, 0.0):
                raise refuse_sampling(flag, value, "unset with --api llama-server (its penalties sampler counts the "
                                      "last repeat_last_n tokens of prompt + output; the audited law, vLLM's, counts "
                                      "the generated tokens only)")
        if stop and logprobs:
            raise refuse_sampling("--logprobs", logprobs, "unset with a stop rule on --api llama-server (it drops the "
                                  "stop word's rows from completion_probabilities)")

    def request(self, prompt_ids, sampling, max_new_tokens, seed, *, n=1, logprobs=None, model=None, draft_tokens=None,
                stop=None):
        self.check_request_options(sampling, logprobs, max_new_tokens, stop)
        if stop and stop.token_ids and not stop.strings:
            raise refuse_sampling("--stop-token-ids", list(stop.token_ids), "ids --target's tokenizer maps to "
                                  "one-character stop strings with --api llama-server (it takes stop strings only)")
        limit = request_limit(stop, max_new_tokens)
        if n != 1:
            raise invalid_argument("n per request", n, "1 with --api llama-server (it has no `n`)")
        rep = sampling.repetition_penalty
        body: dict[str, Any] = {
            "prompt": [int(t) for t in prompt_ids], "n_predict": limit,
            "temperature": float(sampling.temperature), "top_k": int(sampling.top_k or 0),
            "top_p": float(sampling.top_p or 1.0), "min_p": float(sampling.min_p or 0.0), "typical_p": 1.0,
            "top_n_sigma": -1.0,
            # HF's repetition penalty covers the whole context: the window is prompt + generated (-1 is refused)
            "repeat_penalty": float(rep or 1.0), "repeat_last_n": len(prompt_ids) + limit if rep else 0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "xtc_probability": 0.0,
            "mirostat": 0, "dynatemp_range": 0.0, "ignore_eos": False, "stream": False, "cache_prompt": True,
            "return_tokens": True, "n_probs": int(logprobs or 0), "post_sampling_probs": bool(logprobs),
            # the harness's processed law: penalty, temperature, top-k, top-p, min-p (top-k commutes with temperature,
            # top-p does not: the server's default chain runs top-p on the T = 1 softmax and min-p 0.05); temperature 0
            # is greedy only with the temperature sampler in the chain (docs/servers.md)
            "samplers": (["penalties"] if rep else []) + ["top_k", "temperature", "top_p"]
                        + (["min_p"] if sampling.min_p else []),
        }
        if stop and stop.strings:  # only with a stop rule: bodies (journal keys) of other audits are unchanged
            body["stop"] = list(stop.strings)
        if seed is not None:  # none: llama-server draws a fresh seed (LLAMA_DEFAULT_SEED)
            body["seed"] = int(seed) & 0x7FFFFFFF
        if draft_tokens is not None:
            body["speculative.n_max"] = int(draft_tokens)
        if model:
            body["model"] = model
        return body

    def parse(self, body, *, n, max_new_tokens, eos_token_id, what, logprobs=False, stop=None):
        if not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
            raise ServerReplyError(f"{what}: the reply has no `tokens` list (not a llama-server /completion reply "
                                   f"with return_tokens); reply: {head(body)}")
        tokens = body["tokens"]
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise ServerReplyError(f"{what}: `tokens` holds non-integers; reply: {head(body)}")
        stop_type = body.get("stop_type")
        if stop_type not in ("eos", "limit", "word", "none", None):
            raise ServerReplyError(f"{what}: stop_type={stop_type!r}; allowed: 'eos', 'limit'")
        # a stop word it was sent (stopping_word one of the request's strings) is the stop rule; any other is refused
        at_rule = stop_type == "word" and bool(stop) and body.get("stopping_word") in stop.strings
        ids, finish = check_finish(list(tokens), stop_type == "eos", stop_type == "word" and not at_rule, max_new_tokens,
                                   eos_token_id, what, body, stop=stop, at_rule=at_rule)
        try:
            logps, tops = _llama_probs(body.get("completion_probabilities"), len(tokens))
        except ServerReplyError as exc:
            raise ServerReplyError(f"{what}: {exc}") from None
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ServerReplyError(f"{what}: completion_probabilities is malformed ({type(exc).__name__}: {exc}); "
                                   f"reply: {head(body)}") from None
        if logprobs and logps is None:
            raise ServerReplyError(f"{what}: n_probs were asked for and the reply has no usable "
                                   f"completion_probabilities (one per token); reply: {head(body)}")
        if logps is not None and len(ids) > len(tokens):
            logps, tops = logps + (None,), tops + ({},)
        elif logps is not None and len(ids) < len(tokens):  # a row past max_tokens cut to the row width (stop rule)
            logps, tops = logps[:len(ids)], tops[:len(ids)]
        timings = body.get("timings") if isinstance(body.get("timings"), dict) else {}
        drafted = draft_count(timings.get("draft_n"), "timings.draft_n", what, body)
        accepted = draft_count(timings.get("draft_n_accepted"), "timings.draft_n_accepted", what, body)
        if drafted is not None and accepted is not None and accepted > drafted:
            raise ServerReplyError(f"{what}: timings.draft_n_accepted={accepted} exceeds timings.draft_n={drafted} "
                                   f"(more draft tokens accepted than proposed); reply: {head(body)}")
        return [Completion(ids, finish, logps, tops, drafted, accepted if drafted is not None else None)]


def _llama_probs(rows, count):
    """(logprob of each emitted token, top logprobs by id) from ``completion_probabilities``."""
    if not isinstance(rows, list) or len(rows) != count or not rows:
        return None, None
    logps, tops = [], []
    for row in rows:
        if not isinstance(row, dict):
            return None, None
        if "logprob" in row:  # newer servers: logprobs
            logps.append(logprob_value(row["logprob"], "completion_probabilities[].logprob", row))
            entries = [(token_id(e["id"]), logprob_value(e["logprob"], "completion_probabilities[].top_logprobs", row))
                       for e in row.get("top_logprobs", []) if "id" in e]
        elif "prob" in row:  # post_sampling_probs: probabilities
            logps.append(prob_log(row["prob"], row))
            entries = [(token_id(e["id"]), prob_log(e["prob"], row)) for e in row.get("top_probs", []) if "id" in e]
        else:
            return None, None
        top = dict(entries)
        if len(top) < len(entries):  # a dict would keep the last value and drop the rest: not one law's row
            twice = next(t for t in top if sum(i == t for i, _v in entries) > 1)
            raise ServerReplyError(f"completion_probabilities[{len(tops)}] lists token id {twice} more than once "
                                   f"(a row of top probabilities names each token once); row: {head(row)}")
        tops.append(top)
    return tuple(logps), tuple(tops)
