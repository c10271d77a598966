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

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from verifier.errors import DecoderOutputError, invalid_argument, refuse_sampling

if TYPE_CHECKING:  # annotations only: `specverify --help` imports this module and must stay numpy/torch-free
    from verifier.sampling import SamplingConfig

__all__ = ["Completion", "Dialect", "OpenAICompletions", "LlamaServer", "MLXLM", "DIALECTS", "get_dialect",
           "ServerReplyError", "MLX_MAX_TOP_LOGPROBS", "MAX_REQUEST_LOGPROBS", "check_logprobs"]

TOKEN_ID_TEXT = re.compile(r"^token_id:(-?\d+)$")  # vLLM's return_tokens_as_token_ids spelling of a token
REPLY_HEAD_CHARS = 300  # how much of an unexpected reply an error message shows
LOGPROB_SLACK = 1e-3  # a reported logprob above this is not a log probability (rounding may give a hair above 0)
MLX_MAX_TOP_LOGPROBS = 11  # mlx_lm server: _validate("top_logprobs", int, max_val=11)
# K of any logprobs request: above every tokenizer's vocabulary (the largest ~256k; K >= V already returns the whole row),
# and within the 32-bit int a server parses it into (llama-server's n_probs: a larger K is garbage there, not "all")
MAX_REQUEST_LOGPROBS = 1_000_000


class ServerReplyError(DecoderOutputError):
    """The server's reply is not what the dialect promises (malformed JSON, a missing field, the
    wrong number of completions or tokens).  Exit 3: the server misbehaved; responses received
    before it are kept in the run folder's journal."""


def _head(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= REPLY_HEAD_CHARS else text[:REPLY_HEAD_CHARS] + "..."


@dataclass(frozen=True)
class Completion:
    """One completion parsed from a server reply.

    Attributes
    ----------
    token_ids : tuple of int, length in 1..max_new_tokens
        Emitted tokens; EOS is the last one when the server stopped at EOS (added when the server
        reports an EOS stop without returning the token).
    finish : str
        ``"length"`` (``max_new_tokens`` reached), ``"eos"`` or ``"stop"`` (another stop rule).
    logprobs : tuple of (float or None) or None
        The natural-log probability the server reports for each emitted token (None: not asked
        for or not reported).
    top_logprobs : tuple of dict[int, float] or None
        The server's top-``K`` logprobs at each emitted position, by token id (None when absent).
    drafted, accepted : int or None
        Draft tokens proposed and accepted for this request, when the server reports them per
        request (llama-server ``timings.draft_n`` / ``draft_n_accepted``).
    """

    token_ids: tuple[int, ...]
    finish: str
    logprobs: tuple[float | None, ...] | None = None
    top_logprobs: tuple[dict[int, float], ...] | None = None
    drafted: int | None = None
    accepted: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"token_ids": list(self.token_ids), "finish": self.finish}
        if self.logprobs is not None:
            out["logprobs"] = list(self.logprobs)
        if self.top_logprobs is not None:
            out["top_logprobs"] = [{str(k): v for k, v in row.items()} for row in self.top_logprobs]
        if self.drafted is not None:
            out["drafted"], out["accepted"] = self.drafted, self.accepted
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Completion":
        """The completion :meth:`to_json` wrote; a value it cannot have written (a token id that is not an
        integer, an unknown finish, a negative or non-integer draft count) is a ValueError, never coerced."""
        def count(value):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"draft count {value!r} is not an integer >= 0")
            return value

        ids = data["token_ids"]
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ValueError(f"token_ids={_head(ids)} is not a list of integers")
        if data["finish"] not in ("length", "eos", "stop"):
            raise ValueError(f"finish={data['finish']!r} is not 'length', 'eos' or 'stop'")
        tops = data.get("top_logprobs")
        return cls(tuple(ids), data["finish"],
                   None if data.get("logprobs") is None else tuple(data["logprobs"]),
                   None if tops is None else tuple({int(k): float(v) for k, v in row.items()} for row in tops),
                   count(data.get("drafted")), count(data.get("accepted")))


@dataclass(frozen=True)
class Dialect:
    """How one server family takes a sample request and returns completions (see module docstring).

    Attributes
    ----------
    name : str
        The ``--api`` value.
    path : str
        The completion endpoint, relative to the base URL.
    max_n : int
        Most completions one request may ask for (1: no ``n``).
    health_paths : tuple of str
        Endpoints probed (GET) before the first sample request.
    metrics_counters : dict[str, tuple[str, ...]]
        Prometheus counter names (``/metrics``) of ``drafts``, ``draft_tokens`` and
        ``accepted_tokens``, each with the spellings seen across versions.
    reported_law : {"raw", "processed"}
        What the top logprobs of a reply are (docs/servers.md): ``"raw"`` = the model's softmax at
        temperature 1 before any sampler (vLLM's default ``--logprobs-mode raw_logprobs``);
        ``"processed"`` = the law after the sampler chain (llama-server with ``post_sampling_probs``,
        which this dialect sends).  :mod:`verifier.server.reported_law` rebuilds the processed law from it.
    has_switch : bool
        The server takes a per-request speculation switch (``--speculation on|off``, ``--reference-off``).
    ids_with_top_logprobs : bool
        A reply can carry the emitted ids and top rows at once (False: rows only in one-token requests).
    max_top_logprobs : int or None
        The most top logprobs a request may ask for, where the server fixes it (None: the server's own setting).
    needs_text : bool
        Prompts are sent as text: :meth:`with_text` must give the decoder of the target's tokenizer.
    bias_sweep : bool
        Its reported logprobs are taken after ``logit_bias`` (mlx_lm): a numeric floor asking for more than
        ``max_top_logprobs`` rebuilds the whole row by bias sweeps (:mod:`verifier.server.floor_sweep`).
    shares_batches : bool
        Requests in flight together can share the server's batches (False: the server serves one request at a
        time -- ``mlx_lm server`` with a draft model, whose ``ModelProvider`` sets ``is_batchable = False`` -- so
        the ``--mixed-batch`` factor cannot put background rows beside the audited ones, and the
        ``--concurrency-levels`` factor would audit the same one-at-a-time server at every level: both refused).
    text_of : callable or None
        ``text_of(ids, name="prompt", shown=None) -> text`` for ``needs_text`` dialects (set by
        :meth:`with_text`); ids that do not round-trip are a SamplingRefusedError (exit 2) naming ``name`` and
        ``shown`` (default: the ids).
    """

    name: str
    path: str
    max_n: int
    health_paths: tuple[str, ...]
    metrics_counters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reported_law: str = "raw"
    has_switch: bool = False
    ids_with_top_logprobs: bool = True
    max_top_logprobs: int | None = None
    needs_text: bool = False
    bias_sweep: bool = False
    shares_batches: bool = True
    text_of: Any = None

    def check_request_options(self, sampling: "SamplingConfig", logprobs: int | None, max_new_tokens: int = 1) -> None:
        """Refuse (InvalidArgumentError, exit 2) request options this server cannot express; none by default."""

    def with_text(self, tokenizer: Any) -> "Dialect":
        """This dialect with prompts written as text by ``tokenizer`` (a Hugging Face tokenizer: ``decode``,
        and ``encode`` with its default special tokens, as the server encodes); unchanged when prompts are ids."""
        if not self.needs_text:
            return self
        import dataclasses

        def text_of(ids: Sequence[int], name: str = "prompt", shown: Any = None) -> str:
            ids = [int(t) for t in ids]
            text = tokenizer.decode(ids)
            again = list(tokenizer.encode(text))
            if again != ids:
                raise refuse_sampling(name, ids if shown is None else shown, f"token ids that --api {self.name} can "
                                      f"send (it takes text prompts: the ids {ids} are decoded to {text!r}, which the "
                                      f"target's tokenizer encodes as {again}); choose a prompt that round-trips")
            return text

        return dataclasses.replace(self, text_of=text_of)

    def request(self, prompt_ids: Sequence[int], sampling: SamplingConfig, max_new_tokens: int, seed: int | None, *,
                n: int = 1, logprobs: int | None = None, model: str | None = None,
                draft_tokens: int | None = None) -> dict[str, Any]:
        """The JSON body of one request (``n`` completions of ``prompt_ids``); ``seed`` None sends no seed field
        (an unseeded request: the server's own randomness); ``draft_tokens``: the per-request speculation
        switch to send (k on, 0 off; None: none)."""
        raise NotImplementedError

    def parse(self, body: Any, *, n: int, max_new_tokens: int, eos_token_id: int | None,
              what: str, logprobs: bool = False) -> list[Completion]:
        """The ``n`` completions of a reply; ``what`` names the request in errors; ``logprobs``: they were
        asked for, so a reply without them is an error."""
        raise NotImplementedError


def _finish(tokens: list[int], stopped_at_eos: bool, other_stop: bool, max_new_tokens: int, eos: int | None,
            what: str, body: Any) -> tuple[tuple[int, ...], str]:
    """Check the emitted tokens' length against the stop reason; append EOS where the server omits it."""
    if eos is not None and eos in tokens[:-1]:  # before the journal keeps it: a resume would replay it
        raise ServerReplyError(f"{what}: the server emitted tokens after EOS (id {eos} at position {tokens.index(eos)} "
                               f"of {tokens}; ignore_eos=false was sent); reply: {_head(body)}")
    if stopped_at_eos and eos is not None and (not tokens or tokens[-1] != eos) and len(tokens) < max_new_tokens:
        tokens = tokens + [eos]
    if not tokens:
        raise ServerReplyError(f"{what}: the server returned no token (max_new_tokens={max_new_tokens}); "
                               f"reply: {_head(body)}")
    if len(tokens) > max_new_tokens:
        raise ServerReplyError(f"{what}: the server returned {len(tokens)} tokens for max_tokens={max_new_tokens} "
                               f"(max_tokens overshot); reply: {_head(body)}")
    if other_stop:
        raise ServerReplyError(f"{what}: the server stopped at a stop string/word it was not given "
                               f"({len(tokens)} of {max_new_tokens} tokens); reply: {_head(body)}")
    ended = eos is not None and tokens[-1] == eos
    if len(tokens) < max_new_tokens and not ended:
        raise ServerReplyError(f"{what}: the server returned {len(tokens)} of max_tokens={max_new_tokens} tokens "
                               f"without ending at EOS (id {eos}); reply: {_head(body)}")
    return tuple(tokens), "eos" if ended else "length"


class OpenAICompletions(Dialect):
    """``POST /v1/completions`` with token-id prompts (vLLM, SGLang, MLX-LM, providers)."""

    def request(self, prompt_ids, sampling, max_new_tokens, seed, *, n=1, logprobs=None, model=None, draft_tokens=None):
        if draft_tokens is not None:
            raise invalid_argument("speculation per request", draft_tokens, "not with --api openai-completions (no "
                                   "per-request switch): give the speculation-off server as --reference-url")
        body: dict[str, Any] = {
            "prompt": [int(t) for t in prompt_ids], "max_tokens": int(max_new_tokens), "n": int(n),
            "temperature": float(sampling.temperature), "top_p": float(sampling.top_p or 1.0),
            "top_k": int(sampling.top_k) if sampling.top_k else -1, "min_p": 0.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "repetition_penalty": float(sampling.repetition_penalty or 1.0),
            "stream": False, "echo": False, "skip_special_tokens": False, "ignore_eos": False,
            "return_tokens_as_token_ids": True, "return_token_ids": True,
        }
        if seed is not None:
            body["seed"] = int(seed)
        if logprobs is not None:  # only when asked: older servers turned speculation off for logprobs requests
            body["logprobs"] = int(logprobs)
        if model:
            body["model"] = model
        return body

    def parse(self, body, *, n, max_new_tokens, eos_token_id, what, logprobs=False):
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list):
            raise ServerReplyError(f"{what}: the reply has no `choices` list (not an OpenAI completions reply); "
                                   f"reply: {_head(body)}")
        if len(choices) != n:
            raise ServerReplyError(f"{what}: asked for n={n} completions, the reply has {len(choices)}; reply: {_head(body)}")
        for i, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise ServerReplyError(f"{what}: choices[{i}] is not an object; reply: {_head(body)}")
        indices = [c.get("index") for c in choices]
        if any(v is not None for v in indices):  # each completion once, in the order the server numbered them
            if (not all(isinstance(v, int) and not isinstance(v, bool) for v in indices)
                    or sorted(indices) != list(range(n))):
                raise ServerReplyError(f"{what}: the choices' `index` fields are {indices}; allowed: each of "
                                       f"0..{n - 1} once (n={n}); reply: {_head(body)}")
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
                                       f"--logprobs 1); reply: {_head(choice)}")
            reason = choice.get("finish_reason")
            if reason not in ("stop", "length"):
                raise ServerReplyError(f"{what}: choices[{i}].finish_reason={reason!r}; allowed: 'stop' or 'length'")
            stopped = reason == "stop"
            ids, finish = _finish(list(tokens), stopped, False, max_new_tokens, eos_token_id, what, choice)
            logps = _openai_logprobs(lp, len(tokens), what, i)
            tops = _openai_top(lp, len(tokens), what, i, body)
            if logprobs and logps is None:
                raise ServerReplyError(f"{what}: logprobs were asked for and choices[{i}] has none "
                                       f"(logprobs.token_logprobs missing); reply: {_head(choice)}")
            if len(ids) > len(tokens):  # EOS appended: the server reported nothing for it
                logps = None if logps is None else logps + (None,)
                tops = None if tops is None else tops + ({},)
            out.append(Completion(ids, finish, logps, tops))
        return out


def _openai_logprobs(lp, count, what, i):
    if lp is None or lp.get("token_logprobs") is None:
        return None
    values = lp["token_logprobs"]
    if not isinstance(values, list) or len(values) != count:
        raise ServerReplyError(f"{what}: choices[{i}].logprobs.token_logprobs has "
                               f"{len(values) if isinstance(values, list) else 'no'} entries for {count} tokens")
    return tuple(None if v is None else _logprob(v, f"{what}: choices[{i}].logprobs.token_logprobs", values)
                 for v in values)


def _logprob(value: Any, where: str, shown: Any) -> float:
    """A reported natural-log probability: a number <= 0 (up to rounding) or -inf; anything else is a
    :class:`ServerReplyError` naming ``where``."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)
            or value > LOGPROB_SLACK):
        raise ServerReplyError(f"{where} holds {value!r}; allowed: a log probability (a number <= 0, or -inf); "
                               f"reply: {_head(shown)}")
    return float(value)


def _openai_top(lp, count, what, i, body=None):
    if lp is None or not isinstance(lp.get("top_logprobs"), list):
        return None
    rows = []
    for row in lp["top_logprobs"]:
        if row is None:
            row = {}
        if not isinstance(row, dict):
            raise ServerReplyError(f"{what}: choices[{i}].logprobs.top_logprobs holds {_head(row)}; allowed: one "
                                   "object {token: logprob} per emitted token")
        entry = {}
        for text, value in row.items():
            m = TOKEN_ID_TEXT.match(str(text))
            if m is None:
                return None  # tops keyed by text, not ids: not usable as a law
            entry[int(m.group(1))] = _logprob(value, f"{what}: choices[{i}].logprobs.top_logprobs", row)
        rows.append(entry)
    return tuple(rows) if len(rows) == count else None


class LlamaServer(Dialect):
    """llama.cpp's native ``POST /completion`` (``llama-server``)."""

    def request(self, prompt_ids, sampling, max_new_tokens, seed, *, n=1, logprobs=None, model=None, draft_tokens=None):
        if n != 1:
            raise invalid_argument("n per request", n, "1 with --api llama-server (it has no `n`)")
        rep = sampling.repetition_penalty
        body: dict[str, Any] = {
            "prompt": [int(t) for t in prompt_ids], "n_predict": int(max_new_tokens),
            "temperature": float(sampling.temperature), "top_k": int(sampling.top_k or 0),
            "top_p": float(sampling.top_p or 1.0), "min_p": 0.0, "typical_p": 1.0, "top_n_sigma": -1.0,
            # HF's repetition penalty covers the whole context: the window is prompt + generated (-1 is refused)
            "repeat_penalty": float(rep or 1.0), "repeat_last_n": len(prompt_ids) + int(max_new_tokens) if rep else 0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "xtc_probability": 0.0,
            "mirostat": 0, "dynatemp_range": 0.0, "ignore_eos": False, "stream": False, "cache_prompt": True,
            "return_tokens": True, "n_probs": int(logprobs or 0), "post_sampling_probs": bool(logprobs),
            # the harness's processed law: penalty, temperature, top-k, top-p (top-k commutes with temperature, top-p
            # does not: the server's default chain runs top-p on the T = 1 softmax and min-p 0.05); temperature 0 is
            # greedy only with the temperature sampler in the chain (docs/servers.md)
            "samplers": (["penalties"] if rep else []) + ["top_k", "temperature", "top_p"],
        }
        if seed is not None:  # none: llama-server draws a fresh seed (LLAMA_DEFAULT_SEED)
            body["seed"] = int(seed) & 0x7FFFFFFF
        if draft_tokens is not None:
            body["speculative.n_max"] = int(draft_tokens)
        if model:
            body["model"] = model
        return body

    def parse(self, body, *, n, max_new_tokens, eos_token_id, what, logprobs=False):
        if not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
            raise ServerReplyError(f"{what}: the reply has no `tokens` list (not a llama-server /completion reply "
                                   f"with return_tokens); reply: {_head(body)}")
        tokens = body["tokens"]
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise ServerReplyError(f"{what}: `tokens` holds non-integers; reply: {_head(body)}")
        stop_type = body.get("stop_type")
        if stop_type not in ("eos", "limit", "word", "none", None):
            raise ServerReplyError(f"{what}: stop_type={stop_type!r}; allowed: 'eos', 'limit'")
        ids, finish = _finish(list(tokens), stop_type == "eos", stop_type == "word", max_new_tokens, eos_token_id,
                              what, body)
        try:
            logps, tops = _llama_probs(body.get("completion_probabilities"), len(tokens))
        except ServerReplyError as exc:
            raise ServerReplyError(f"{what}: {exc}") from None
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ServerReplyError(f"{what}: completion_probabilities is malformed ({type(exc).__name__}: {exc}); "
                                   f"reply: {_head(body)}") from None
        if logprobs and logps is None:
            raise ServerReplyError(f"{what}: n_probs were asked for and the reply has no usable "
                                   f"completion_probabilities (one per token); reply: {_head(body)}")
        if logps is not None and len(ids) > len(tokens):
            logps, tops = logps + (None,), tops + ({},)
        timings = body.get("timings") if isinstance(body.get("timings"), dict) else {}
        drafted = _count(timings.get("draft_n"), "timings.draft_n", what, body)
        accepted = _count(timings.get("draft_n_accepted"), "timings.draft_n_accepted", what, body)
        if drafted is not None and accepted is not None and accepted > drafted:
            raise ServerReplyError(f"{what}: timings.draft_n_accepted={accepted} exceeds timings.draft_n={drafted} "
                                   f"(more draft tokens accepted than proposed); reply: {_head(body)}")
        return [Completion(ids, finish, logps, tops, drafted, accepted if drafted is not None else None)]


def _count(value: Any, name: str, what: str, body: Any) -> int | None:
    """A per-request draft figure: None when absent, else a count (an integer >= 0); anything else is a
    :class:`ServerReplyError` -- the speculation guard must not read a negative, NaN or boolean figure."""
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ServerReplyError(f"{what}: {name}={value!r}; allowed: a count of draft tokens (an integer >= 0); "
                               f"reply: {_head(body)}")
    return value


def _llama_probs(rows, count):
    """(logprob of each emitted token, top logprobs by id) from ``completion_probabilities``."""
    if not isinstance(rows, list) or len(rows) != count or not rows:
        return None, None
    logps, tops = [], []
    for row in rows:
        if not isinstance(row, dict):
            return None, None
        if "logprob" in row:  # newer servers: logprobs
            logps.append(_logprob(row["logprob"], "completion_probabilities[].logprob", row))
            entries = [(_id(e["id"]), _logprob(e["logprob"], "completion_probabilities[].top_logprobs", row))
                       for e in row.get("top_logprobs", []) if "id" in e]
        elif "prob" in row:  # post_sampling_probs: probabilities
            logps.append(_prob_log(row["prob"], row))
            entries = [(_id(e["id"]), _prob_log(e["prob"], row)) for e in row.get("top_probs", []) if "id" in e]
        else:
            return None, None
        top = dict(entries)
        if len(top) < len(entries):  # a dict would keep the last value and drop the rest: not one law's row
            twice = next(t for t in top if sum(i == t for i, _v in entries) > 1)
            raise ServerReplyError(f"completion_probabilities[{len(tops)}] lists token id {twice} more than once "
                                   f"(a row of top probabilities names each token once); row: {_head(row)}")
        tops.append(top)
    return tuple(logps), tuple(tops)


def _id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"token id {value!r} is not an integer")
    return value


def _prob_log(value: Any, row: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0 + LOGPROB_SLACK:
        raise ValueError(f"probability {value!r} is not a number in [0, 1]")
    return math.log(value) if value > 0 else -math.inf


class MLXLM(Dialect):
    """MLX-LM's ``POST /v1/completions`` (``mlx_lm server``; module docstring, docs/servers.md)."""

    def check_request_options(self, sampling, logprobs, max_new_tokens=1) -> None:
        """What this server cannot express, as InvalidArgumentError (exit 2) -- called by the CLI before any
        request, and again per request."""
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

    def request(self, prompt_ids, sampling, max_new_tokens, seed, *, n=1, logprobs=None, model=None, draft_tokens=None):
        if n != 1:
            raise invalid_argument("n per request", n, "1 with --api mlx-lm (the server ignores `n`)")
        if self.text_of is None:
            raise invalid_argument("--api", self.name, "with --target (its tokenizer writes the text prompt this "
                                   "server takes)")
        self.check_request_options(sampling, logprobs, max_new_tokens)
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

    def parse(self, body, *, n, max_new_tokens, eos_token_id, what, logprobs=False):
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise ServerReplyError(f"{what}: the reply has no one-element `choices` list (not an mlx_lm server "
                                   f"completion); reply: {_head(body)}")
        choice = choices[0]
        lp = choice.get("logprobs")
        content = lp.get("content") if isinstance(lp, dict) else None
        if not isinstance(content, list) or not all(isinstance(e, dict) for e in content):
            raise ServerReplyError(f"{what}: choices[0].logprobs.content is missing (logprobs: true was sent; the "
                                   f"emitted ids come from it); reply: {_head(choice)}")
        tops = None
        try:
            if any("top_logprobs" in e for e in content):
                if max_new_tokens != 1:
                    raise ServerReplyError(f"{what}: top_logprobs in a {max_new_tokens}-token reply (not asked for)")
                tops = tuple({_id(t.get("id")): _logprob(t.get("logprob"), "logprobs.content[].top_logprobs", e)
                              for t in e.get("top_logprobs") or ()} for e in content)
            tokens = [_id(e.get("id")) for e in content]
        except (TypeError, AttributeError) as exc:
            raise ServerReplyError(f"{what}: choices[0].logprobs.content is malformed ({exc}); reply: "
                                   f"{_head(choice)}") from None
        logps = tuple(_logprob(e.get("logprob"), "logprobs.content[].logprob", e) for e in content)
        reason = choice.get("finish_reason")
        if reason not in ("stop", "length"):
            raise ServerReplyError(f"{what}: choices[0].finish_reason={reason!r}; allowed: 'stop' or 'length'")
        ids, finish = _finish(tokens, reason == "stop", False, max_new_tokens, eos_token_id, what, choice)
        if len(ids) > len(tokens):
            logps, tops = logps + (None,), None if tops is None else tops + ({},)
        return [Completion(ids, finish, None if tops is not None else logps, tops)]


DIALECTS: dict[str, Dialect] = {
    "openai-completions": OpenAICompletions(
        "openai-completions", "/v1/completions", max_n=1024, health_paths=("/v1/models",),
        metrics_counters={"drafts": ("vllm:spec_decode_num_drafts",),
                          "draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
                          "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens",)}),
    "llama-server": LlamaServer(
        "llama-server", "/completion", max_n=1, health_paths=("/health",), reported_law="processed", has_switch=True,
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
