"""The ``stop`` test: the request's stop rule inside accepted blocks (issue 29, bug kind 5).

A speculative round emits a block of tokens at once; engines have checked stop tokens and ``max_tokens`` only when
the block was appended, so rows ran on past a stop token accepted mid-block, and the last round overshot the limit.
Two cells per sample set, opted into with ``tests = ["stop"]``:

``stop-rule``
    Deterministic: every row is checked for a token after its first stop token or EOS (the stop token itself is the
    row's last token) and for a token at a position past ``max_tokens``.  A correct decoder never does either, so
    one violating row is BIAS (p = 0, the row, position and tokens in the reason); its effect is the fraction of
    violating rows and its MDE the smallest such fraction that ``n`` rows show at least once with the suite's power,
    ``1 - (1 - power) ** (1 / n)``.
``stop-position@1..L``
    The law of the stopping position ``S`` of a row: the position of its first stop token or EOS within the first
    ``L = max_tokens`` tokens (categories 1..L), or "no stop within L" -- against its exact law under the target
    (:func:`stop_position_law`: the target's prefix tree, float64 processed probs; the Fraction law on tabular
    pairs is :func:`verifier.exact.stop_position_law`), by the pooled chi-square of ``gof@t``
    (:func:`verifier.runner.analysis.gof_cell`).  A decoder whose stop or EOS mass is wrong at some position
    (a logits processor skipped on verified tokens, EOS suppressed or boosted under speculation) moves ``S``.

The stop set is the model's EOS and the suite's ``stop_token_ids``; the limit is ``max_tokens`` (default
``max_new_tokens``).  With a stop rule set, ``generate`` gets ``stop_token_ids=`` and ``max_tokens=`` keywords
(:func:`takes_stop_rule` checks that it takes them) and the other cells are refused by the suite schema: their
laws end rows at EOS only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from verifier.errors import ConfigError, InvalidArgumentError
from verifier.protocols import PADDING_TOKEN_ID
from verifier.runner.analysis import CellResult, gof_cell
from verifier.runner.expected import prefix_cap
from verifier.runner.memory import rows_per_batch
from verifier.sampling import SamplingConfig
from verifier.validation import check_stop_rule

__all__ = ["StopLaw", "stop_position_law", "stop_positions", "stop_violations", "stop_rule_cell", "stop_position_cell",
           "takes_stop_rule", "decoder_takes_stop", "check_stop_specs", "stop_ends", "NO_STOP"]

NO_STOP = "no stop"  # the label of the last category: no stop token or EOS within the limit


@dataclass
class StopLaw:
    """Law of the stopping position of a row, float64.

    Attributes
    ----------
    probs : np.ndarray, shape (categories,)
        ``probs[t - 1]`` = P(first stop token or EOS at position t) for ``t = 1..len(probs) - 1``; the last entry is
        P(no stop within ``limit``) -- or, when :attr:`pooled_from` is set, P(first stop at ``pooled_from`` or later,
        or none).
    limit : int
        The request's length limit L.
    pooled_from : int or None
        First position merged into the last category because the target's live prefix tree outgrew
        :func:`verifier.runner.expected.prefix_cap` there (data-blind: it depends on the target only); None: exact.
    target_passes : int
        Prefixes the target was evaluated on.
    """

    probs: np.ndarray
    limit: int
    pooled_from: int | None = None
    target_passes: int = 0

    def label(self, c: int) -> str:
        """Name of category ``c``."""
        if c < len(self.probs) - 1:
            return f"stop at {c + 1}"
        return f"stop at >= {self.pooled_from} or {NO_STOP}" if self.pooled_from else f"{NO_STOP} within {self.limit}"


def stop_ends(stop_token_ids, eos_token_id: int | None) -> np.ndarray:
    """The ids that end a row: EOS and the request's stop tokens, sorted int64."""
    ends = set(int(t) for t in stop_token_ids) | ({int(eos_token_id)} if eos_token_id is not None else set())
    return np.array(sorted(ends), dtype=np.int64)


def stop_position_law(ref, prompt: tuple[int, ...], sampling: SamplingConfig, ends: np.ndarray, limit: int) -> StopLaw:
    """Exact law of the stopping position under the target, from its prefix tree (float64 processed probs).

    Parameters
    ----------
    ref : verifier.runner.models.ReferenceModel
        The target (``next_probs(prefixes, sampling)``, ``vocab_size``).
    prompt : tuple of int
    sampling : SamplingConfig
    ends : np.ndarray of int64
        The ids that end a row (:func:`stop_ends`).
    limit : int
        The request's length limit L >= 1.

    Returns
    -------
    StopLaw
        Exact over ``L + 1`` categories when every level's live prefixes (no stop yet, positive mass) fit
        :func:`~verifier.runner.expected.prefix_cap`; else the positions from the first level that does not are one
        category (still an exact law of the coarser categories).
    """
    vocab = ref.vocab_size
    cap = prefix_cap(vocab)
    batch = rows_per_batch(vocab * 8 * 4)
    go = np.ones(vocab, dtype=bool)
    go[ends[ends < vocab]] = False
    probs = np.zeros(limit + 1)
    prefixes, weights = np.array([prompt], dtype=np.int64), np.ones(1)
    passes = 0
    for t in range(1, limit + 1):
        nxt_p, nxt_w = [], []
        for s in range(0, len(prefixes), batch):
            part = prefixes[s:s + batch]
            path = weights[s:s + batch, None] * ref.next_probs(part, sampling, len(prompt))
            passes += len(part)
            probs[t - 1] += float(path[:, ~go].sum())
            if t == limit:
                probs[limit] += float(path[:, go].sum())
                continue
            rows, toks = np.nonzero((path > 0) & go[None, :])
            nxt_p.append(np.concatenate([part[rows], toks[:, None]], axis=1))
            nxt_w.append(path[rows, toks])
        if t == limit:
            break
        prefixes = np.concatenate(nxt_p) if nxt_p else np.zeros((0, len(prompt) + t), dtype=np.int64)
        weights = np.concatenate(nxt_w) if nxt_w else np.zeros(0)
        if len(prefixes) > cap:  # pool positions t + 1 .. L and "no stop" into one category
            merged = np.append(probs[:t], weights.sum())
            return StopLaw(np.clip(merged, 0, None) / merged.sum(), limit, pooled_from=t + 1, target_passes=passes)
        if not len(prefixes):
            break
    return StopLaw(np.clip(probs, 0, None) / probs.sum(), limit, target_passes=passes)


def stop_positions(tokens: np.ndarray, ends: np.ndarray, limit: int) -> np.ndarray:
    """Category of each row in a :class:`StopLaw`: ``t - 1`` for a first stop token or EOS at position ``t <= limit``,
    ``limit`` for none within the limit (tokens past it are the violation cell's business)."""
    head = tokens[:, :limit]
    is_end = np.isin(head, ends)
    return np.where(is_end.any(axis=1), is_end.argmax(axis=1), limit).astype(np.int64)


def stop_violations(tokens: np.ndarray, ends: np.ndarray, limit: int) -> tuple[np.ndarray, str | None]:
    """Rows that break the stop rule and the first one in words.

    Returns
    -------
    (np.ndarray of bool, shape (rows,), str or None)
        Whether each row holds a token after its first stop token or EOS, or a token at a position past ``limit``;
        the first such row as "row r, position p: ..." (positions 1-based), None when there is none.
    """
    is_end = np.isin(tokens, ends)
    emitted = tokens != PADDING_TOKEN_ID
    after_stop = (np.cumsum(is_end, axis=1) - is_end > 0) & emitted
    past_limit = np.zeros_like(emitted)
    past_limit[:, limit:] = emitted[:, limit:]
    bad = after_stop | past_limit
    rows = bad.any(axis=1)
    if not rows.any():
        return rows, None
    r = int(np.argmax(rows))
    c = int(np.argmax(bad[r]))
    shown = [int(v) for v in tokens[r] if v != PADDING_TOKEN_ID]
    if after_stop[r, c]:
        s = int(np.argmax(is_end[r]))
        what = (f"token {int(tokens[r, c])} at position {c + 1} after stop token {int(tokens[r, s])} at position "
                f"{s + 1} (a stop token must be the row's last token)")
    else:
        what = f"token {int(tokens[r, c])} at position {c + 1} past max_tokens = {limit}"
    return rows, f"row {r}, {what}; row {r} = {shown}"


def stop_rule_cell(cell_id: str, tokens: np.ndarray, ends: np.ndarray, limit: int, *, power: float,
                   cell_alpha: float, **meta: Any) -> CellResult:
    """The deterministic ``stop-rule`` cell (module docstring).

    Parameters
    ----------
    tokens : np.ndarray, shape (rows, max_new_tokens), int64
        A sample set's rows, -1 padded.
    ends : np.ndarray of int64
        The ids that end a row (:func:`stop_ends`).
    limit : int
        ``max_tokens`` (``max_new_tokens`` when the suite sets none).
    power, cell_alpha : float
        The MDE is the fraction of violating rows seen at least once with probability ``power``.

    Returns
    -------
    CellResult
        ``statistic`` = violating rows, ``pvalue`` 0 with ``support_violation`` naming the first one, else 1;
        ``effect`` = violating fraction, ``effect_unit = "rows"``.
    """
    test = meta.pop("test", "stop-rule")
    n = int(len(tokens))
    bad, first = stop_violations(tokens, ends, limit)
    k = int(bad.sum())
    mde = 1.0 - (1.0 - power) ** (1.0 / n) if n else None
    reason = None
    if first:
        reason = f"stop rule violated in {k} of {n} rows; first: {first}"
    ids = ", ".join(str(int(t)) for t in ends) or "none"
    return CellResult(cell_id, test=test, method=(
        f"deterministic: each row checked for a token after its first stop token or EOS (ids {ids}) and for a token "
        f"past max_tokens = {limit}; one violating row is BIAS"), n=n, statistic=float(k), pvalue=0.0 if k else 1.0,
        effect=k / n if n else None, effect_unit="rows", mde=mde, cell_alpha=cell_alpha, support_violation=reason,
        extra={"violating_rows": k, "stop_ids": [int(t) for t in ends], "max_tokens": limit}, **meta)


def stop_position_cell(cell_id: str, tokens: np.ndarray, law: StopLaw, ends: np.ndarray, *, cell_alpha: float,
                       power: float, rng: np.random.Generator, target_mde: float | None = None,
                       **meta: Any) -> CellResult:
    """The ``stop-position@1..L`` cell: pooled chi-square of the stopping positions against ``law`` (module docstring)."""
    codes = stop_positions(tokens, ends, law.limit)
    if law.pooled_from is not None:
        codes = np.minimum(codes, law.pooled_from - 1)
    counts = np.bincount(codes, minlength=len(law.probs)).astype(np.int64)
    cell = gof_cell(cell_id, counts, law.probs, cell_alpha=cell_alpha, power=power, rng=rng, label_fn=law.label,
                    target_mde=target_mde, **meta)
    cell.method = "stopping position (first stop token or EOS, or none within max_tokens): " + cell.method + (
        f"; positions >= {law.pooled_from} pooled (the target's prefix tree outgrew the enumeration there)"
        if law.pooled_from else "")
    return cell


def takes_stop_rule(decoder: Any) -> bool:
    """Whether ``decoder.generate`` takes the ``stop_token_ids`` and ``max_tokens`` keywords: a decoder that states
    its optional keywords (an engine adapter's ``generate_keywords``) is taken at its word, else its signature
    decides (the keywords or ``**kwargs``; :func:`verifier.validation.takes_generate_keyword`)."""
    from verifier.validation import takes_generate_keyword

    return takes_generate_keyword(decoder, "stop_token_ids") and takes_generate_keyword(decoder, "max_tokens")


def check_stop_specs(suite, pairs: dict) -> None:
    """Stop rules against the loaded models, before sampling.

    Raises
    ------
    ConfigError
        A stop id outside the target's vocabulary, a stop rule with a greedy sampling config, or a ``stop`` test on a model without EOS and without
        ``stop_token_ids`` (no row could stop before the limit: the law of the stopping position is one point).
    """
    for d in suite.decoders:
        pair = pairs[d.models]
        try:
            check_stop_rule(list(d.stop_token_ids), d.max_tokens, max_new_tokens=d.max_new_tokens,
                            vocab_size=pair.vocab_size)
        except InvalidArgumentError as exc:
            raise ConfigError(f"{suite.source}: decoders[{d.name}]: {exc} (models.{d.models} has vocab_size "
                              f"{pair.vocab_size})") from None
        greedy = [name for name in d.sampling if suite.sampling[name].greedy]
        if d.has_stop_rule and greedy:
            raise ConfigError(f"{suite.source}: decoders[{d.name}] sets a stop rule and sampling.{greedy[0]} is greedy "
                              "(temperature 0); allowed: temperature > 0 with a stop rule (the greedy cell compares "
                              "whole rows with the target's greedy output, which has no stop rule)")
        if "stop" in d.tests and not d.stop_token_ids and pair.eos_token_id is None:
            raise ConfigError(f"{suite.source}: decoders[{d.name}].tests includes 'stop' but models.{d.models} has no "
                              "EOS and the entry sets no stop_token_ids; allowed: stop_token_ids = [ID, ...] (a token "
                              "that ends a row) or a model with an eos_token_id")


def decoder_takes_stop(spec, decoder: Any) -> None:
    """Raise ConfigError when ``spec`` sets a stop rule and ``decoder.generate`` cannot take it."""
    if spec.has_stop_rule and not takes_stop_rule(decoder):
        raise ConfigError(f"decoders[{spec.name}] sets stop_token_ids={list(spec.stop_token_ids)} / max_tokens="
                          f"{spec.max_tokens}, but {type(decoder).__name__}.generate takes no stop_token_ids and "
                          "max_tokens keywords; allowed: a decoder whose generate takes them (the registered "
                          "'reference', 'ancestral', the mutants and the stop zoo) or no stop rule")

