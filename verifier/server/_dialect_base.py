"""The pieces every server dialect shares (:mod:`verifier.server.dialects` is the public import path).

:class:`Dialect` (the request/reply contract), :class:`Completion` (one parsed completion), :class:`StopRule` (a
request's stop tokens and length limit, issue 29 kind 5), :class:`ServerReplyError` and the reply checks every
dialect runs (:func:`check_finish`: the emitted tokens' length against the stop reason; :func:`logprob_value`,
:func:`token_id`, :func:`prob_log`, :func:`draft_count`).  Imports stay numpy/torch-free: ``specverify --help``
loads this module.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from verifier.errors import DecoderOutputError, refuse_sampling

if TYPE_CHECKING:  # annotations only: `specverify --help` imports this module and must stay numpy/torch-free
    from verifier.sampling import SamplingConfig

__all__ = ["Completion", "Dialect", "StopRule", "ServerReplyError", "check_finish", "request_limit", "head", "logprob_value", "token_id",
           "prob_log", "draft_count", "TOKEN_ID_TEXT", "LOGPROB_SLACK"]

TOKEN_ID_TEXT = re.compile(r"^token_id:(-?\d+)$")  # vLLM's return_tokens_as_token_ids spelling of a token
REPLY_HEAD_CHARS = 300  # how much of an unexpected reply an error message shows
LOGPROB_SLACK = 1e-3  # a reported logprob above this is not a log probability (rounding may give a hair above 0)


class ServerReplyError(DecoderOutputError):
    """The server's reply is not what the dialect promises (malformed JSON, a missing field, the
    wrong number of completions or tokens).  Exit 3: the server misbehaved; responses received
    before it are kept in the run folder's journal."""


def head(value: Any) -> str:
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
            raise ValueError(f"token_ids={head(ids)} is not a list of integers")
        if data["finish"] not in ("length", "eos", "stop"):
            raise ValueError(f"finish={data['finish']!r} is not 'length', 'eos' or 'stop'")
        tops = data.get("top_logprobs")
        return cls(tuple(ids), data["finish"],
                   None if data.get("logprobs") is None else tuple(data["logprobs"]),
                   None if tops is None else tuple({int(k): float(v) for k, v in row.items()} for row in tops),
                   count(data.get("drafted")), count(data.get("accepted")))


@dataclass(frozen=True)
class StopRule:
    """A request's stop rule (issue 29, bug kind 5): the suite's ``stop_token_ids`` and ``max_tokens``.

    Attributes
    ----------
    token_ids : tuple of int
        Ids that end a completion where they are emitted (the stop token itself is emitted), beside EOS.
    max_tokens : int or None
        The request's length limit (sent as the server's ``max_tokens`` / ``n_predict``); None: the row width.
    strings : tuple of str
        The same stop set as stop *strings*, for a server that takes strings only (llama-server): one ASCII
        character per stop token, a set closed under containment (:func:`verifier.engines._stop_strings.stop_strings`,
        built from the target's token texts); empty where the dialect takes ids.
    """

    token_ids: tuple[int, ...] = ()
    max_tokens: int | None = None
    strings: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.token_ids) or self.max_tokens is not None


def request_limit(stop: StopRule | None, max_new_tokens: int) -> int:
    """The length limit a request is sent with: the stop rule's ``max_tokens``, else the row width ``max_new_tokens``.

    >>> request_limit(StopRule((5,), 6), 8), request_limit(StopRule((5,)), 8), request_limit(None, 8)
    (6, 8, 8)
    """
    return int(stop.max_tokens) if stop is not None and stop.max_tokens is not None else int(max_new_tokens)


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
    stop_as_strings : bool
        A stop rule goes to the server as stop strings (llama-server has no stop ids): :class:`StopRule` ``strings``
        must be set (:func:`verifier.server.stop_rule.build_stop_rule` maps the ids with the target's tokenizer).
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
    stop_as_strings: bool = False
    text_of: Any = None

    def check_request_options(self, sampling: "SamplingConfig", logprobs: int | None, max_new_tokens: int = 1,
                              stop: StopRule | None = None) -> None:
        """Refuse (InvalidArgumentError, exit 2) request options this server cannot express -- called by the CLI
        before any request and again per request; by default: a min-p, presence or frequency penalty and a stop
        rule (a dialect allows what it was checked to send with the harness's semantics)."""
        for flag, value in (("--min-p", sampling.min_p), ("--presence-penalty", sampling.presence_penalty),
                            ("--frequency-penalty", sampling.frequency_penalty)):
            if value not in (None, 0, 0.0):
                raise refuse_sampling(flag, value, f"unset with --api {self.name} (not checked against this server's "
                                      "sampler)")
        if stop:
            raise refuse_sampling("--stop-token-ids/--max-tokens", [list(stop.token_ids), stop.max_tokens],
                                  f"unset with --api {self.name} (no stop rule checked for this server)")

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
                draft_tokens: int | None = None, stop: StopRule | None = None) -> dict[str, Any]:
        """The JSON body of one request (``n`` completions of ``prompt_ids``); ``seed`` None sends no seed field
        (an unseeded request: the server's own randomness); ``draft_tokens``: the per-request speculation
        switch to send (k on, 0 off; None: none); ``stop``: the request's stop rule (None or empty: only EOS and
        ``max_new_tokens`` end it, and the body holds no stop field)."""
        raise NotImplementedError

    def parse(self, body: Any, *, n: int, max_new_tokens: int, eos_token_id: int | None,
              what: str, logprobs: bool = False, stop: StopRule | None = None) -> list[Completion]:
        """The ``n`` completions of a reply; ``what`` names the request in errors; ``logprobs``: they were
        asked for, so a reply without them is an error; ``stop``: the stop rule the request was sent with
        (:func:`check_finish`)."""
        raise NotImplementedError


def check_finish(tokens: list[int], stopped_at_eos: bool, other_stop: bool, max_new_tokens: int, eos: int | None,
           what: str, body: Any, *, stop: StopRule | None = None, at_rule: bool = False) -> tuple[tuple[int, ...], str]:
    """Check one completion's emitted tokens against its stop reason; append EOS where the server omits it.

    Parameters
    ----------
    tokens : list of int
        The emitted ids the reply carries.
    stopped_at_eos : bool
        The server says it stopped at EOS.
    other_stop : bool
        The server says it stopped at a stop string / id it was not given (always an error).
    max_new_tokens : int
        The row width (the audit's ``max_new_tokens``); without a stop rule also the request's limit.
    eos : int or None
    what, body
        Name the request and show the reply in errors.
    stop : StopRule or None, keyword-only
        The request's stop rule (its ``max_tokens`` is the limit sent).  A row holding one of its ids before its end,
        or tokens past ``max_tokens`` (up to the row width; beyond it the row is cut to the width, which still shows
        them), is kept as a sample: the ``stop-rule`` cell's finding (:mod:`verifier.runner.stop`), not a malformed
        reply.
    at_rule : bool, keyword-only
        The server says it stopped at a stop string / id of ``stop`` (it was sent): the row must then hold one of
        ``stop.token_ids``.

    Returns
    -------
    (tuple of int, str)
        The tokens and the finish: ``"eos"``, ``"stop"`` (a stop token of ``stop``) or ``"length"``.

    Raises
    ------
    ServerReplyError
        Tokens after EOS, no token, more tokens than the limit without a stop rule, a stop the request did not send,
        a short row that ends at neither EOS nor a stop token, a stop at the rule with no stop token in the row.
    """
    limit = request_limit(stop, max_new_tokens)
    if eos is not None and eos in tokens[:-1]:  # before the journal keeps it: a resume would replay it
        raise ServerReplyError(f"{what}: the server emitted tokens after EOS (id {eos} at position {tokens.index(eos)} "
                               f"of {tokens}; ignore_eos=false was sent); reply: {head(body)}")
    if stopped_at_eos and eos is not None and (not tokens or tokens[-1] != eos) and len(tokens) < limit:
        tokens = tokens + [eos]
    if not tokens:
        raise ServerReplyError(f"{what}: the server returned no token (max_new_tokens={max_new_tokens}); "
                               f"reply: {head(body)}")
    if len(tokens) > max_new_tokens:
        if limit >= max_new_tokens:  # no column past the limit: the overshoot would not show in the row
            raise ServerReplyError(f"{what}: the server returned {len(tokens)} tokens for max_tokens={limit} "
                                   f"(max_tokens overshot); reply: {head(body)}")
        tokens = tokens[:max_new_tokens]  # the stop-rule cell sees the tokens past max_tokens in the row
    if other_stop:
        raise ServerReplyError(f"{what}: the server stopped at a stop string/word it was not given "
                               f"({len(tokens)} of {limit} tokens); reply: {head(body)}")
    ended = eos is not None and tokens[-1] == eos
    stops = set(stop.token_ids) if stop is not None else set()
    held = [t for t in tokens if t in stops]
    if at_rule and not held:
        raise ServerReplyError(f"{what}: the server says it stopped at a stop it was sent, but none of the stop "
                               f"tokens {sorted(stops)} is in the row {tokens}; reply: {head(body)}")
    if len(tokens) < limit and not ended and not held:
        raise ServerReplyError(f"{what}: the server returned {len(tokens)} of max_tokens={limit} tokens "
                               f"without ending at EOS (id {eos})" + (" or a stop token" if stops else "")
                               + f"; reply: {head(body)}")
    return tuple(tokens), "eos" if ended else "stop" if held else "length"


def logprob_value(value: Any, where: str, shown: Any) -> float:
    """A reported natural-log probability: a number <= 0 (up to rounding) or -inf; anything else is a
    :class:`ServerReplyError` naming ``where``."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)
            or value > LOGPROB_SLACK):
        raise ServerReplyError(f"{where} holds {value!r}; allowed: a log probability (a number <= 0, or -inf); "
                               f"reply: {head(shown)}")
    return float(value)


def draft_count(value: Any, name: str, what: str, body: Any) -> int | None:
    """A per-request draft figure: None when absent, else a count (an integer >= 0); anything else is a
    :class:`ServerReplyError` -- the speculation guard must not read a negative, NaN or boolean figure."""
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ServerReplyError(f"{what}: {name}={value!r}; allowed: a count of draft tokens (an integer >= 0); "
                               f"reply: {head(body)}")
    return value


def token_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"token id {value!r} is not an integer")
    return value


def prob_log(value: Any, row: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0 + LOGPROB_SLACK:
        raise ValueError(f"probability {value!r} is not a number in [0, 1]")
    return math.log(value) if value > 0 else -math.inf
