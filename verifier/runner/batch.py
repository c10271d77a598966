"""Sampling a chunk as ``generate`` calls of a fixed number of rows: the ``batch_composition`` axis (issue 29, kind 1).

A sample set without a batch level (:attr:`verifier.runner.plan.SampleSetPlan.batch_rows` None) draws each chunk in
one ``generate`` call of ``chunk_rows`` rows with the chunk's seed, exactly as before.  A set at level ``b``
(:mod:`verifier.suite.batch`) draws each chunk as ``chunk_rows / b`` calls of exactly ``b`` rows -- the batch size the
decoder sees -- call ``j`` of chunk ``i`` with seed :func:`call_seed` (a pure function of the suite seed, the set key
and the call's number, like every seed of a run).  The calls' rows, first-round accepted counts, accepted counts and
origins are joined in call order into the chunk's shard, whose meta records the level and the calls' seeds, so a
failing call can be replayed alone: ``decoder.generate(prompt, b, max_new_tokens, sampling, seed)``.

A mixed level (``mixed_temperature = T2``) calls ``generate(..., row_temperatures=[T2, T, T2, T, ...])``: the even
slots (slot 0 included) are filler rows at ``T2``, the odd slots the audited rows at the set's temperature ``T``;
only the audited rows (and their first-round accepted counts and origins) are kept -- ``accepted_counts`` (per round,
not per row) is dropped.  A decoder whose ``generate`` takes no ``row_temperatures`` keyword, or a greedy set, is a
:class:`~verifier.errors.SamplingRefusedError` (exit 2).

A mixed-prompts level (``mixed_prompt_lengths``) calls ``generate(..., row_prompts=[F0, P, F1, P, ...])``: the even
slots continue the filler prompts (other prompts of other lengths, :attr:`SampleSetPlan.filler_prompts` in turn), the
odd slots the set's prompt ``P``, all at the set's sampling config; the same rows are kept as at a mixed-temperature
level.  A decoder whose ``generate`` takes no ``row_prompts`` keyword is refused (exit 2) the same way.

Storage stays per chunk (one file of up to ``chunk_size`` rows), so a level of 1 row per call costs one call per row
but not one file per row.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


from verifier._call_timeout import call_deadline
from verifier.errors import SamplingRefusedError
from verifier.protocols import DecoderStats
from verifier.runner.plan import SampleSetPlan
from verifier.runner.seeds import stream_seed
from verifier.validation import plugin_attribute

__all__ = ["call_seed", "call_plan", "check_batch_level", "generate_chunk", "takes_row_temperatures",
           "row_prompts_of"]


def _audited(plan: SampleSetPlan) -> int:
    from verifier.suite.batch import audited_rows

    return audited_rows(plan.batch_rows, plan.mixed)


def call_seed(plan: SampleSetPlan, chunk_index: int, call_index: int) -> int:
    """Seed of call ``call_index`` of chunk ``chunk_index`` of a set at a batch level (module docstring)."""
    per_chunk = plan.chunk_size // _audited(plan)
    return stream_seed(plan.suite_seed, "calls|" + plan.key, chunk_index * per_chunk + call_index)


def call_plan(plan: SampleSetPlan, index: int) -> list[tuple[int, int]]:
    """The ``generate`` calls of chunk ``index`` as ``(rows, seed)``: one call without a batch level."""
    rows = plan.chunk_rows(index)
    if plan.batch_rows is None:
        return [(rows, plan.chunk_seed(index))]
    return [(plan.batch_rows, call_seed(plan, index, j)) for j in range(rows // _audited(plan))]


def takes_row_temperatures(decoder: Any) -> bool:
    """Whether ``decoder.generate`` takes the ``row_temperatures`` keyword (or ``**kwargs``); a decoder that states its optional
    keywords (an engine adapter's ``generate_keywords``, :class:`verifier.engines.decoder.EngineDecoder`) is taken at
    its word."""
    from verifier.validation import takes_generate_keyword

    return takes_generate_keyword(decoder, "row_temperatures")


def check_batch_level(decoder: Any, plan: SampleSetPlan, name: str) -> None:
    """Refuse a batch level above 1 row on a decoder that runs one row per speculative step.

    An engine decoder states ``rows_per_step = 1`` when its engine loops over the rows of a ``generate`` call
    (llama-cpp-python, OpenVINO GenAI's worker, transformers assisted generation): a level of ``b`` rows would be
    ``b`` calls of one row, not a batch, so its cells would audit nothing the level-1 cells do not.

    Raises
    ------
    SamplingRefusedError
        (exit 2) ``plan.batch_rows > 1`` and ``decoder.rows_per_step == 1``.
    """
    if plan.batch_rows is None or plan.batch_rows <= 1 or getattr(decoder, "rows_per_step", None) != 1:
        return
    how = (getattr(decoder, "batching", "") or getattr(getattr(decoder, "engine", None), "batching", "")
           or "one row per speculative step")
    raise SamplingRefusedError(f"decoders[{name}]: batch_composition level of {plan.batch_rows} rows cannot run: "
                               f"{getattr(decoder, 'name', name)!r} runs {how}, so the level would loop calls of one "
                               "row, not batch them; allowed: batch_composition rows = [1], or no batch_composition "
                               "(audit batch shape on an engine that verifies several rows in one step)")


def row_prompts_of(plan: SampleSetPlan) -> list[list[int]]:
    """The ``row_prompts`` of every call of a mixed-prompts level: filler ``j mod n`` in even slot ``2 j``, the set's
    prompt in the odd slots (module docstring)."""
    fillers = plan.filler_prompts
    return [list(fillers[(r // 2) % len(fillers)]) if r % 2 == 0 else list(plan.prompt_ids)
            for r in range(plan.batch_rows)]


def _mixed_kwargs(decoder: Any, plan: SampleSetPlan, name: str) -> tuple[dict[str, Any], slice]:
    """(extra generate keywords, the audited rows of a call) of a set: the fillers in the even slots of a mixed level."""
    from verifier.validation import takes_generate_keyword

    if plan.filler_prompts:
        if not takes_generate_keyword(decoder, "row_prompts"):
            raise SamplingRefusedError(f"decoders[{name}]: batch_composition.mixed_prompt_lengths="
                                       f"{list(plan.filler_prompt_names)} cannot run: its generate takes no row_prompts "
                                       "keyword (a prompt per row of one call); allowed: a decoder whose generate takes "
                                       "row_prompts (the reference decoders), or no mixed_prompt_lengths")
        return {"row_prompts": row_prompts_of(plan)}, slice(1, None, 2)
    if plan.filler_temperature is None:
        return {}, slice(None)
    if plan.sampling.greedy or not takes_row_temperatures(decoder):
        why = ("a greedy sampling config has no temperature to mix" if plan.sampling.greedy else
               "its generate takes no row_temperatures keyword (a temperature per row of one call)")
        raise SamplingRefusedError(f"decoders[{name}]: batch_composition.mixed_temperature="
                                   f"{plan.filler_temperature:g} cannot run: {why}; allowed: a decoder whose generate "
                                   "takes row_temperatures (the reference decoders), or no mixed_temperature")
    temps = [plan.filler_temperature if r % 2 == 0 else plan.sampling.temperature for r in range(plan.batch_rows)]
    return {"row_temperatures": temps}, slice(1, None, 2)


def generate_chunk(decoder: Any, plan: SampleSetPlan, index: int, name: str,
                   check: Callable[[Any, int], np.ndarray], return_logprobs: bool = False,
                   ) -> tuple[np.ndarray, Any, dict[str, Any], np.ndarray | None]:
    """Draw chunk ``index`` of ``plan``: ``(tokens, last_stats, meta, reported)``.

    Parameters
    ----------
    decoder : Decoder
        Built for the set's k.
    plan : SampleSetPlan
    index : int
        Chunk index.
    name : str
        The decoder's suite name (error messages).
    check : callable
        ``check(output, rows) -> tokens``: the runner's output check (:func:`verifier.validation.check_emitted_tokens`),
        applied to every call's output before the calls are joined.
    return_logprobs : bool, default False
        Ask every call for its reported logprobs (``generate(..., return_logprobs=True)``, the suite's ``logprob``
        test): each call must return a ``(tokens, logprobs)`` pair, checked by
        :func:`verifier.validation.check_reported_logprobs` against its tokens.

    Returns
    -------
    tokens : np.ndarray, shape (chunk_rows, max_new_tokens), int64
    stats : DecoderStats or the decoder's own ``last_stats`` (None when it reports none)
        One call: the decoder's ``last_stats`` as it is.  Several calls: their figures joined in call order
        (``first_round_accepted``, ``accepted_counts``, ``origins`` only when every call reported them; ``rounds``
        summed; numeric ``extra["speculation"]`` counters summed).
    meta : dict
        ``{}`` without a batch level, else ``{"batch_rows": b, "call_seeds": [...]}`` for the shard's meta.
    reported : np.ndarray, shape (chunk_rows, max_new_tokens), float64, or None
        The reported logprobs (None unless ``return_logprobs``).

    Raises
    ------
    DecoderError, DecoderOutputError
        As the runner's single call: a crash, a deadline (``--call-timeout``, per call), invalid output of any call.
    """
    from verifier.errors import DecoderOutputError
    from verifier.validation import check_reported_logprobs

    check_batch_level(decoder, plan, name)
    stop_kw = plan.stop_kwargs()  # the request's stop rule, only where the suite sets one
    if return_logprobs:
        stop_kw["return_logprobs"] = True
    mixed_kw, kept = _mixed_kwargs(decoder, plan, name)
    outs, stats, reported = [], [], []
    calls = call_plan(plan, index)
    for rows, seed in calls:
        call = (f"{name}: generate(prompt_ids={list(plan.prompt_ids)[:8]}, num_samples={rows}, "
                f"max_new_tokens={plan.max_new_tokens}, sampling={plan.sampling.label()}, seed={seed}"
                + "".join(f", {k}={v}" for k, v in stop_kw.items()) + ")")
        with call_deadline(call):  # --call-timeout (default: no limit)
            out = decoder.generate(list(plan.prompt_ids), rows, plan.max_new_tokens, plan.sampling, seed, **stop_kw,
                                   **mixed_kw)
        lp = None
        if return_logprobs:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise DecoderOutputError(f"{name} returned {type(out).__name__} for return_logprobs=True; "
                                         "allowed: a (tokens, logprobs) pair")
            out, lp = out
        tokens = check(out, rows)
        if return_logprobs:
            reported.append(check_reported_logprobs(lp, tokens, decoder_name=name)[kept])
        outs.append(tokens[kept])
        stats.append(plugin_attribute(decoder, "last_stats", None, decoder_name=name))
    joined_lp = np.concatenate(reported) if return_logprobs else None
    if plan.batch_rows is None:
        return outs[0], stats[0], {}, joined_lp
    meta = {"batch_rows": plan.batch_rows, "call_seeds": [seed for _, seed in calls],
            **({"filler_temperature": plan.filler_temperature, "filler_slots": "even"} if mixed_kw else {}),
            **({"filler_prompts": list(plan.filler_prompt_names)} if plan.filler_prompts else {})}
    return np.concatenate(outs), _joined(stats, name, kept), meta, joined_lp


def _field(stats: list, key: str, name: str) -> list | None:
    values = [plugin_attribute(s, key, None, decoder_name=f"{name}.last_stats") if s is not None else None for s in stats]
    return None if any(v is None for v in values) else values


def _joined(stats: list, name: str, kept: slice = slice(None)) -> DecoderStats | None:
    """One DecoderStats for the calls of a chunk (None when no call reported statistics); ``kept``: the audited rows
    of each call (a mixed level drops the fillers' rows and the per-round ``accepted_counts``)."""
    if all(s is None for s in stats):
        return None
    fra, counts, origins = (_field(stats, key, name) for key in ("first_round_accepted", "accepted_counts", "origins"))
    if kept != slice(None):
        fra = [np.atleast_1d(np.asarray(f))[kept] for f in fra] if fra is not None else None
        origins = [np.asarray(o)[kept] for o in origins] if origins is not None else None
        counts = None
    extras = [e for e in (_field(stats, "extra", name) or []) if isinstance(e, dict)]
    extra: dict[str, Any] = {"calls": len(stats)}
    spec = [e["speculation"] for e in extras if isinstance(e.get("speculation"), dict)]
    if spec:  # server counters (verifier.runner.speculation): numbers summed over the calls, the rest from the first
        extra["speculation"] = {**spec[0], **{k: sum(s.get(k, 0) for s in spec) for k, v in spec[0].items()
                                                if isinstance(v, (int, float)) and not isinstance(v, bool)}}
    k = plugin_attribute(stats[0], "num_draft_tokens", 0, decoder_name=f"{name}.last_stats") if stats[0] is not None else 0
    rounds = [plugin_attribute(s, "rounds", 0, decoder_name=f"{name}.last_stats") for s in stats if s is not None]
    return DecoderStats(
        rounds=int(sum(r for r in rounds if isinstance(r, (int, np.integer)))),
        accepted_counts=np.concatenate([np.atleast_1d(np.asarray(c)) for c in counts]) if counts is not None else None,
        num_draft_tokens=int(k or 0),
        first_round_accepted=np.concatenate([np.atleast_1d(np.asarray(f)) for f in fra]) if fra is not None else None,
        extra=extra,
        origins=np.concatenate([np.asarray(o) for o in origins]) if origins is not None else None,
    )
