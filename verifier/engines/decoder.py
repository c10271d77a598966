"""A decoder-kind engine as a :class:`verifier.protocols.Decoder`, on top of an :class:`EngineWorker`.

Each decoder-kind adapter module (``verifier/engines/<engine>.py``) defines a registered
:class:`~verifier.engines.base.Engine` subclass with ``kind = "decoder"`` and a module-level plugin
factory ``decoder(**options)`` returning an :class:`EngineDecoder` (or a subclass).  ``specverify
audit --engine NAME --engine-arg k=v`` runs exactly ``--decoder verifier.engines.<module>:decoder
--option k=v`` through the known-p audit pipeline, with the engine's description in the report.

The worker's ``Handler.generate`` contract (``verifier/engines/workers/<engine>.py``)::

    generate(prompt_ids: int64[P], max_new_tokens: int, sampling: dict, seeds: int64[n])
        -> {"tokens": int64[n, max_new_tokens] (-1 after EOS),
            optional "accepted_counts": int64[num_rounds]  (per round, in order; k = bonus emitted),
            optional "first_round_accepted": int64[n],
            optional "row_accepted": list of n lists (each row's accepted count per round, in order; gives
                DecoderStats.origins through :func:`origins_from_rounds`),
            optional "origins": int8[n, max_new_tokens]  (ORIGIN_CODES per emitted token, -1 padding; wins over row_accepted),
            optional "rounds": int, "drafted": int, "accepted": int  (as the engine reports them),
            optional "extra": dict,
            "logprobs": float64[n, max_new_tokens]  (only when asked with return_logprobs=True; NaN after EOS)}

A worker whose ``generate`` also takes ``return_logprobs``, ``row_temperatures`` (a temperature per request) and/or
``row_prompts`` (a prompt per request: a list of n lists of token ids) says so through the decoder's
``generate_keywords``; :meth:`EngineDecoder.generate` then takes them.

and, where the engine exposes its target logits, ``target_logits(prompt_ids) -> {"logits": float[V]}``
(the numeric floor: the engine's target law vs the Hugging Face reference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verifier.engines.bridge import EngineWorker, adopt, hashed_seeds, pooled, prestart
from verifier.errors import DecoderError, DecoderOutputError, invalid_argument, refuse_sampling
from verifier.protocols import DecoderStats
from verifier.validation import check_row_prompts, check_row_temperatures, check_stop_rule

__all__ = ["EngineDecoder", "checkpoint_dir", "sampling_fields", "origins_from_rounds"]

SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty")
# issue 29 kind 3: a set one is refused unless the engine lists it in `supported` (llama-cpp-python: all three;
# OpenVINO GenAI and transformers: min_p) or names the difference in `refusals`
PROCESSOR_FIELDS = ("presence_penalty", "frequency_penalty", "min_p")
GENERATE_KEYWORDS = ("return_logprobs", "row_temperatures", "row_prompts", "stop_token_ids",
                     "max_tokens")  # optional worker keywords (generate_keywords)


def origins_from_rounds(row_rounds: Sequence[Sequence[Any]], tokens: np.ndarray, num_draft_tokens: int) -> np.ndarray | None:
    """:attr:`DecoderStats.origins` from each row's per-round accepted counts, as an engine reports them.

    Each round emits its accepted drafts (origin 0), then one recovered token (1) when a draft was
    rejected, or one bonus token (2) when every draft of the round was accepted.

    Parameters
    ----------
    row_rounds : sequence (num_samples) of sequences of int or (drafted, accepted) pairs
        Row i's rounds in order: the accepted count (the round drafted ``num_draft_tokens``), or the
        pair (drafted, accepted) when rounds draft fewer (a round with 0 drafted emits one bonus-like
        target token, origin 2).
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64
        The emitted tokens, -1 after EOS (origin -1 there).
    num_draft_tokens : int

    Returns
    -------
    np.ndarray of int8, shape like ``tokens``, or None
        None when the rounds cannot be the rows' (a row emitted more tokens than its rounds account for,
        or a count outside 0..drafted): origins unknown rather than wrong.
    """
    tokens = np.asarray(tokens)
    if len(row_rounds) != len(tokens):
        return None
    n, steps = tokens.shape
    out = np.full((n, steps), -1, dtype=np.int8)
    for i, rounds in enumerate(row_rounds):
        codes: list[int] = []
        for r in rounds:
            drafted, accepted = (int(r[0]), int(r[1])) if isinstance(r, (tuple, list)) else (num_draft_tokens, int(r))
            if not 0 <= accepted <= drafted:
                return None
            codes.extend([0] * accepted + [2 if accepted == drafted else 1])
            if len(codes) >= steps:
                break
        live = int((tokens[i] != -1).sum())
        if len(codes) < live:
            return None
        out[i, :live] = codes[:live]
    return out


def checkpoint_dir(spec: str, argument: str = "--target") -> Path:
    """The Hugging Face checkpoint folder behind a model spec an engine converts from.

    Parameters
    ----------
    spec : str
        ``"shipped:target"``, ``"shipped:draft"`` or a local checkpoint folder.
    argument : str
        The flag or option named in the error.

    Raises
    ------
    InvalidArgumentError
        (exit 2) a tabular model (engines load checkpoints only) or a folder without ``config.json``.
    """
    from verifier.models.shipped_paths import shipped_checkpoint

    if spec.startswith("shipped:"):
        return shipped_checkpoint(spec.split(":", 1)[1])
    if spec.startswith("tabular:"):
        raise invalid_argument(argument, spec, "a Hugging Face checkpoint folder or shipped:target/shipped:draft "
                               "(outside engines load checkpoints, not the harness's tabular models)")
    path = Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise invalid_argument(argument, spec, "a Hugging Face checkpoint folder (with config.json) or shipped:target/shipped:draft")
    return path.resolve()


def sampling_fields(sampling: Any) -> dict[str, Any]:
    """The :class:`~verifier.sampling.SamplingConfig` fields as a plain dict (None: not set)."""
    return {f: getattr(sampling, f, None) for f in SAMPLING_FIELDS}


class EngineDecoder:
    """Decoder protocol over an engine worker.

    Parameters
    ----------
    engine : type
        The registered :class:`~verifier.engines.base.Engine` subclass (name, venv, version).
    handler_file : path
        The worker's handler (``verifier/engines/workers/<engine>.py``).
    init : dict
        ``Handler.__init__`` keyword arguments (checkpoint paths, k, engine options).
    num_draft_tokens : int
        k (``num_draft_tokens``), reported in :class:`~verifier.protocols.DecoderStats`.
    vocab_size : int
        Valid emitted ids are ``0 .. vocab_size - 1``.
    eos_token_id : int or None
    supported : set of str, default all four sampling fields
        The :class:`SamplingConfig` fields the engine can express; a set field outside it is refused.
    greedy_ok : bool, default True
        Whether temperature 0 (greedy) is expressible.
    env : dict, optional
        Extra environment of the worker.
    rows_per_step : int or None, default None
        1 when the engine runs the rows of a call one at a time (each row its own speculative steps): then
        ``batch_composition`` levels above 1 row are refused (:func:`verifier.runner.batch.check_batch_level`);
        None: not stated.  ``engine.batching`` says how, in words.
    refusals : dict of str to str, optional
        Sampling fields the engine has but with another law than the harness's, each with the difference in words:
        a set one is refused with that reason (instead of the generic "cannot express").
    generate_keywords : collection of str, default ()
        The optional keywords the worker's ``generate`` takes, from :data:`GENERATE_KEYWORDS`:
        ``return_logprobs`` (each emitted token's logprob as the engine reports it; the ``logprob`` test),
        ``row_temperatures`` (a temperature per request of one call; the mixed-temperature batch levels) and
        ``row_prompts`` (a prompt per request of one call; the mixed-prompts batch levels).  The runner reads the
        attribute of the same name (:func:`verifier.runner.logprob.takes_return_logprobs`,
        :func:`verifier.runner.batch.takes_row_temperatures`); ``stop_token_ids`` and ``max_tokens`` together (the
        request's stop rule, :func:`verifier.runner.stop.takes_stop_rule`).

    Raises
    ------
    InvalidArgumentError
        A ``generate_keywords`` entry outside :data:`GENERATE_KEYWORDS`.
    """

    def __init__(self, engine: type, handler_file: str | Path, *, init: dict[str, Any], num_draft_tokens: int,
                 vocab_size: int, eos_token_id: int | None, supported: set[str] | None = None, greedy_ok: bool = True,
                 env: dict[str, str] | None = None, rows_per_step: int | None = None,
                 refusals: dict[str, str] | None = None, generate_keywords: Sequence[str] = ()) -> None:
        unknown = sorted(set(generate_keywords) - set(GENERATE_KEYWORDS))
        if unknown:
            raise invalid_argument("generate_keywords", list(generate_keywords), f"a subset of {list(GENERATE_KEYWORDS)}")
        if len({"stop_token_ids", "max_tokens"} & set(generate_keywords)) == 1:  # a stop rule is both or nothing
            raise invalid_argument("generate_keywords", list(generate_keywords),
                                   "'stop_token_ids' and 'max_tokens' together or neither (the runner sends a stop rule "
                                   "as both keywords)")
        self.generate_keywords = frozenset(generate_keywords)
        self.engine = engine
        self.rows_per_step = rows_per_step
        self.refusals = dict(refusals or {})
        self.name = engine.name
        self.num_draft_tokens = int(num_draft_tokens)
        self.vocab_size = int(vocab_size)
        self.eos_token_id = eos_token_id
        self.supported = set(SAMPLING_FIELDS if supported is None else supported)
        self.greedy_ok = greedy_ok
        self.settings = {"engine": engine.name, "version": engine.version, **{k: v for k, v in init.items() if not isinstance(v, np.ndarray)}}
        self.last_stats: DecoderStats | None = None
        # the engine's seconds for the last generate call when it was made ahead (verifier.cli._presample), else None:
        # the runner counts those, not its own wait, in the sampling rate
        self.last_presampled_seconds: float | None = None
        # generate calls run in the worker process: the runner's thread only waits for their replies, so it warms the
        # statistics' memos meanwhile (verifier.runner.cells.warm_statistics)
        self.runs_in_worker = True
        self._worker_args = (engine.python(), handler_file, init, env)
        self._worker: EngineWorker | None = None

    @property
    def worker(self) -> EngineWorker:
        """The worker process, started on first use (engine start-up happens here) or adopted from :meth:`start`
        (a worker started ahead with other arguments is killed first: engines hold GBs and CPU)."""
        if self._worker is None:
            python, handler, init, env = self._worker_args
            worker = adopt(python, handler, init, env) or EngineWorker(python, handler, name=self.name, init=init, env=env)
            try:
                _ = worker.methods  # the engine's start-up finished (its error raised here, as without a prestart)
            except DecoderError:
                worker.close(kill=True)  # a later use starts a fresh worker, as when the error came from its constructor
                raise
            self._worker = worker
        return self._worker

    def start(self) -> None:
        """Start the engine's worker now and return at once (:func:`verifier.engines.bridge.prestart`): its start-up
        (imports, model load: seconds, mostly one core) runs while the caller imports, loads the reference pair and
        plans, and the first decoder built with the same engine arguments adopts it.  Errors surface at that decoder's
        first use."""
        if self._worker is None:
            python, handler, init, env = self._worker_args
            prestart(python, handler, name=self.name, init=init, env=env)

    def start_engine(self, sampling: Any = None) -> float:
        """Start the engine's worker now when it is not running (imports, model load); the seconds that took (0.0 when
        it was running).  The runner calls it before a decoder's first timed ``generate`` call, so the sampling rate in
        the report counts generate calls only (the start-up was in the first chunk's time before session 25).

        Parameters
        ----------
        sampling : SamplingConfig, optional
            Checked first (:meth:`check_sampling`): a setting the engine cannot express is refused before it starts.

        Raises
        ------
        SamplingRefusedError
            (exit 2) ``sampling`` has a setting the engine cannot express (the engine is not started).
        DecoderError
            (exit 3) as :attr:`worker`."""
        if self._worker is not None:
            return 0.0
        if sampling is not None:
            self.check_sampling(sampling)
        import time

        start = time.perf_counter()
        _ = self.worker
        return time.perf_counter() - start

    def _running_worker(self) -> EngineWorker | None:
        """This decoder's worker, else the one :meth:`start` left in the pool for the decoder that adopts it, else
        None (nothing is started here)."""
        if self._worker is not None:
            return self._worker
        python, handler, init, env = self._worker_args
        return pooled(python, handler, init, env)

    def presample(self, requests: list[dict[str, Any]], *, guessed: bool = False) -> bool:
        """Make these ``generate`` calls (:meth:`request` dicts) ahead on the worker :meth:`start` started, for the
        first decoder that adopts it (``guessed``: a planned n's guess, cut by :meth:`limit_presample`); False (nothing
        done) when no such worker waits."""
        worker = self._running_worker()
        if worker is None:
            return False
        worker.presample(requests, guessed=guessed)
        return True

    def limit_presample(self, count: int) -> None:
        """Only the first ``count`` calls handed to :meth:`presample` are still made ahead."""
        worker = self._running_worker()
        if worker is not None:
            worker.limit_presample(count)

    def stop_presample(self) -> None:
        """No further ``generate`` call ahead (the runner's sampling of this decoder ended)."""
        if self._worker is not None:
            self._worker.stop_presample()

    def check_sampling(self, sampling: Any) -> dict[str, Any]:
        """The sampling fields to send, or :class:`~verifier.errors.SamplingRefusedError` (exit 2, also inside a
        suite run) for one the engine cannot express."""
        fields = sampling_fields(sampling)
        fields.update({f: getattr(sampling, f) for f in PROCESSOR_FIELDS if getattr(sampling, f, None) is not None})
        for name, value in fields.items():
            if value is not None and name in self.refusals and not (name == "repetition_penalty" and value == 1.0):
                raise refuse_sampling(name.replace("_", "-"), value, f"not set: {self.refusals[name]}")
            if value is not None and name not in self.supported and not (name == "temperature" and value == 1.0):
                raise refuse_sampling(name.replace("_", "-"), value, f"not set: engine {self.name!r} cannot express "
                                       f"{name} (it supports {', '.join(sorted(self.supported)) or 'no sampling options'})")
        if fields["temperature"] == 0 and not self.greedy_ok:
            raise refuse_sampling("temperature", 0, f"> 0: engine {self.name!r} has no greedy mode on its speculative path")
        return fields

    @property
    def launch(self) -> tuple[Any, Any, dict[str, Any], dict[str, str] | None]:
        """``(python, handler_file, init, env)``: how this decoder's worker is started (the engine venv's interpreter,
        the handler file, ``Handler.__init__``'s keywords, extra environment)."""
        return self._worker_args

    def request(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: Any, seed: int, *,
                return_logprobs: bool = False, row_temperatures: Sequence[float] | None = None,
                row_prompts: Sequence[Sequence[int]] | None = None, stop_token_ids: Sequence[int] = (),
                max_tokens: int | None = None) -> dict[str, Any]:
        """The keywords of the worker's ``Handler.generate`` for one :meth:`generate` call (same parameters): the
        prompt, ``max_new_tokens``, the checked sampling fields, one hashed seed per row and the optional keywords.
        Raises as :meth:`generate` does before the engine starts (``bench engine-alone`` replays these calls)."""
        fields = self.check_sampling(sampling)
        extra = self._call_keywords(num_samples, sampling, return_logprobs, row_temperatures, row_prompts)
        extra.update(self._stop_keywords(stop_token_ids, max_tokens, max_new_tokens))
        return {"prompt_ids": np.asarray(list(prompt_ids), dtype=np.int64), "max_new_tokens": int(max_new_tokens),
                "sampling": fields, "seeds": hashed_seeds(seed, num_samples), **extra}

    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: Any, seed: int, *,
                 return_logprobs: bool = False, row_temperatures: Sequence[float] | None = None,
                 row_prompts: Sequence[Sequence[int]] | None = None, stop_token_ids: Sequence[int] = (),
                 max_tokens: int | None = None):
        """Emitted tokens, int64 of shape (num_samples, max_new_tokens), -1 after EOS; see :class:`verifier.protocols.Decoder`.

        Every sample gets its own seed, hashed from ``seed`` (:func:`verifier.engines.bridge.hashed_seeds`).

        Parameters
        ----------
        prompt_ids, num_samples, max_new_tokens, sampling, seed
            As :class:`verifier.protocols.Decoder`: one worker call of ``num_samples`` requests.
        return_logprobs : bool, default False
            Also return each emitted token's logprob as the engine reports it (only where ``generate_keywords``
            has ``"return_logprobs"``).
        row_temperatures : sequence of float, optional
            ``num_samples`` temperatures > 0: request i is sampled at ``row_temperatures[i]`` with the rest of
            ``sampling`` (only where ``generate_keywords`` has ``"row_temperatures"``).
        row_prompts : sequence of sequence of int, optional
            ``num_samples`` prompts: request i continues ``row_prompts[i]`` in place of ``prompt_ids``, all in the
            same worker call (only where ``generate_keywords`` has ``"row_prompts"``).
        stop_token_ids, max_tokens : optional
            The request's stop rule (issue 29, kind 5), sent to the engine (only where ``generate_keywords`` has
            ``"stop_token_ids"`` and ``"max_tokens"``); the worker returns each row as the engine emitted it.

        Returns
        -------
        tokens : np.ndarray, shape (num_samples, max_new_tokens), int64
            -1 after EOS.
        logprobs : np.ndarray, shape (num_samples, max_new_tokens), float64
            Only with ``return_logprobs`` (then the pair ``(tokens, logprobs)``); NaN after EOS.

        Raises
        ------
        SamplingRefusedError
            (exit 2) a sampling setting the engine cannot express.
        InvalidArgumentError
            (exit 2) ``return_logprobs``, ``row_temperatures`` or ``row_prompts`` asked of an engine whose worker
            does not take it; ``row_temperatures`` not ``num_samples`` finite numbers > 0, or given with a greedy
            ``sampling``; ``row_prompts`` not ``num_samples`` prompts of token ids in the vocabulary; a stop rule
            :func:`verifier.validation.check_stop_rule` refuses (an id outside ``0..vocab_size - 1`` or repeated,
            ``max_tokens`` outside ``1..max_new_tokens``), before the engine starts.
        DecoderError
            (exit 3) the engine raised or its worker died.
        DecoderOutputError
            (exit 3) the reply has the wrong shape (tokens, or logprobs when asked).
        """
        request = self.request(prompt_ids, num_samples, max_new_tokens, sampling, seed, return_logprobs=return_logprobs,
                               row_temperatures=row_temperatures, row_prompts=row_prompts,
                               stop_token_ids=stop_token_ids, max_tokens=max_tokens)  # checked before the engine starts
        worker = self.worker
        ahead = worker.take_presampled(request)  # drawn while the harness planned (verifier.cli._presample)
        self.last_presampled_seconds = None if ahead is None else ahead[1]
        reply = worker.call("generate", **request) if ahead is None else ahead[0]
        tokens = np.asarray(reply.get("tokens"))
        if tokens.shape != (num_samples, max_new_tokens):
            raise DecoderOutputError(f"engine {self.name!r} returned tokens of shape {tokens.shape}; expected "
                                     f"({num_samples}, {max_new_tokens})")
        self.last_stats = self._stats(reply, tokens)
        tokens = tokens.astype(np.int64, copy=False)
        if not return_logprobs:
            return tokens
        logprobs = np.asarray(reply.get("logprobs"), dtype=np.float64)
        if logprobs.shape != tokens.shape:
            raise DecoderOutputError(f"engine {self.name!r} returned logprobs of shape {logprobs.shape}; expected {tokens.shape}")
        return tokens, logprobs

    def _call_keywords(self, num_samples: int, sampling: Any, return_logprobs: bool,
                       row_temperatures: Sequence[float] | None,
                       row_prompts: Sequence[Sequence[int]] | None = None) -> dict[str, Any]:
        """The optional worker keywords of one call, each checked against ``generate_keywords``."""
        extra: dict[str, Any] = {}
        if return_logprobs:
            if "return_logprobs" not in self.generate_keywords:
                raise invalid_argument("return_logprobs", return_logprobs,
                                       f"False: engine {self.name!r} reports no per-token logprobs")
            extra["return_logprobs"] = True
        if row_temperatures is not None:
            if "row_temperatures" not in self.generate_keywords:
                raise invalid_argument("row_temperatures", row_temperatures,
                                       f"None: engine {self.name!r} takes one temperature per call")
            extra["row_temperatures"] = check_row_temperatures(row_temperatures, num_samples, sampling)
        if row_prompts is not None:
            if "row_prompts" not in self.generate_keywords:
                raise invalid_argument("row_prompts", row_prompts, f"None: engine {self.name!r} takes one prompt per call")
            extra["row_prompts"] = [list(p) for p in check_row_prompts(row_prompts, num_samples, self.vocab_size)]
        return extra

    def _stop_keywords(self, stop_token_ids: Sequence[int], max_tokens: int | None, max_new_tokens: int) -> dict[str, Any]:
        """The stop rule's worker keywords, checked against ``generate_keywords`` and by
        :func:`verifier.validation.check_stop_rule` (ids in the vocabulary, none repeated, ``max_tokens`` in
        ``1..max_new_tokens``) before the engine starts; empty without a stop rule."""
        ids, limit = check_stop_rule(() if stop_token_ids is None else stop_token_ids, max_tokens,  # an engine would
                                     max_new_tokens=int(max_new_tokens), vocab_size=self.vocab_size)  # ignore a bad id
        if not ids and limit is None:
            return {}
        if not {"stop_token_ids", "max_tokens"} <= self.generate_keywords:
            raise invalid_argument("stop_token_ids / max_tokens", f"{list(ids)} / {limit}",
                                   f"none: engine {self.name!r} takes no stop rule through this adapter")
        return {"stop_token_ids": list(ids), "max_tokens": limit}

    def _stats(self, reply: dict[str, Any], tokens: np.ndarray) -> DecoderStats:
        """The :class:`DecoderStats` of one reply (the engine's own counters, where it reports them)."""
        counts = reply.get("accepted_counts")
        first = reply.get("first_round_accepted")
        row_rounds = reply.get("row_accepted")
        extra = dict(reply.get("extra") or {})
        origins = reply.get("origins")
        origins = np.asarray(origins, dtype=np.int8) if origins is not None and np.shape(origins) == tokens.shape else None
        for key in ("drafted", "accepted"):
            if key in reply:
                extra[f"engine_{key}"] = reply[key]
        return DecoderStats(
            rounds=int(reply.get("rounds", 0 if counts is None else len(counts))),
            accepted_counts=np.zeros(0, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64),
            num_draft_tokens=self.num_draft_tokens,
            first_round_accepted=None if first is None else np.asarray(first, dtype=np.int64),
            extra=extra,
            origins=origins if origins is not None else
            None if row_rounds is None else origins_from_rounds(row_rounds, tokens, self.num_draft_tokens))

    @property
    def exposes_target_logits(self) -> bool:
        """Whether the engine's worker has ``target_logits`` (starts the worker); the numeric floor is
        "not measured" otherwise, never a crash."""
        return "target_logits" in self.worker.methods

    def target_logits(self, prompt_ids: Sequence[int]) -> np.ndarray:
        """The engine's own target logits after ``prompt_ids``, float64 of shape (vocab,).

        Raises
        ------
        DecoderError
            (exit 3) the engine raised or does not expose logits (its worker has no ``target_logits``).
        """
        reply = self.worker.call("target_logits", prompt_ids=np.asarray(list(prompt_ids), dtype=np.int64))
        return np.asarray(reply["logits"], dtype=np.float64)

    def close(self) -> None:
        """Stop the worker process (idempotent)."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
