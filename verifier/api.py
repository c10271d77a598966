"""Python API for use inside any test suite: ``assert_preserves_target`` and its power helpers.

>>> import verifier
>>> verifier.assert_preserves_target(my_decoder, target_model, prompts=[[1, 2]],   # doctest: +SKIP
...                                  sampling=verifier.SamplingConfig(temperature=0.7))

The check has no statistics of its own: it lends the decoder and the target to the suite runner
(:mod:`verifier.audit._live`), builds an audit suite (:func:`verifier.audit.suite_builder.plan_audit`)
and runs it with :func:`verifier.pipeline.run_suite` in a temporary run folder -- the very cells,
corrections and verdicts of ``specverify run`` and ``specverify audit``.

Cells of one prompt (each gets one hypothesis test; see :mod:`verifier.runner.analysis`)
--------------------------------------------------------------------------------------
``gof@t``
    Chi-square of emitted token ``t`` against its exact marginal target law (enumerated from the
    target's processed probs over ``vocab + 1`` categories, the last one "row already ended"), at
    every position ``t <= num_gof_positions`` whose law can be enumerated (default: all of them up
    to ``max_new_tokens``; positions 1-2 at vocab 384).  An emitted token with target prob 0 is a
    support violation: bias, whatever the p-value.
``joint@1..J``, ``surprisal@1..J``
    The law of the first J tokens (J <= 3, where ``(vocab + 1) ** J`` categories fit): chi-square,
    and the mean surprisal against the entropy.
``pit``
    Randomized probability integral transform of every emitted token against its teacher-forced
    target probs, tested for Uniform(0, 1) (one-sample KS).
At ``temperature == 0`` there is one cell per prompt, ``greedy``: every row must equal the
target's greedy continuation token for token (exact match, no statistics).

Verdict: the suite runner's CI gate -- Holm at ``alpha / 2`` over all cells plus a Cauchy
combination at ``alpha / 2`` (the cells share samples), so the family-wise false-alarm rate is <= ``alpha``.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from verifier._preservation import (
    SEED_ENV_VAR,
    PreservationCell,
    PreservationError,
    PreservationResult,
    _Scorer,
    greedy_check,
    reproduce_command,
)
from verifier._preservation_run import check_through_runner
from verifier.errors import invalid_argument
from verifier.sampling import SamplingConfig

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_NUM_SAMPLES",
    "PreservationCell",
    "PreservationResult",
    "PreservationError",
    "assert_preserves_target",
    "check_preserves_target",
    "min_num_samples",
    "min_detectable_effect",
]

DEFAULT_ALPHA = 1e-3  # family-wise false-alarm rate of the CI gate (docs/ARCHITECTURE.md "Statistical defaults")
DEFAULT_NUM_SAMPLES = 2000  # per prompt; with a 3-token law sees TV ~0.06 at alpha 1e-3 (min_detectable_effect)
DEFAULT_MAX_NEW_TOKENS = 4
DEFAULT_POWER = 0.99  # docs/ARCHITECTURE.md "Statistical defaults": every cell states its minimum detectable effect at power 0.99


# --------------------------------------------------------------------------- power helpers


def min_num_samples(target_probs, sampled_probs, *, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER,
                    num_cells: int = 1) -> int:
    """Samples per prompt that :func:`assert_preserves_target` needs to see a given bias at ``gof@1``.

    A thin wrapper over :func:`verifier.stats.power.samples_needed` at the strictest level the gate
    applies to one cell, ``alpha / (2 * num_cells)`` (Holm's first step at family level ``alpha / 2``).

    Parameters
    ----------
    target_probs : array_like, shape (vocab,), float64
        Processed target probs of the first emitted token (the law the decoder must reproduce).
    sampled_probs : array_like, shape (vocab,), float64
        The law a biased decoder would actually sample, e.g. a mutant's exact output law from
        :func:`verifier.exact.step_law`.
    alpha : float, default 1e-3
        Family-wise false-alarm rate, as passed to :func:`assert_preserves_target`.
    power : float, default 0.99
        Probability of detecting the bias.
    num_cells : int, default 1
        Cells the check will run (``len(prompts) * (gof positions + 3)`` for
        :func:`assert_preserves_target`); more cells mean a stricter per-cell level.

    Returns
    -------
    int
        The smallest ``num_samples`` whose pooled Pearson test at level ``alpha / (2 num_cells)``
        has power >= ``power`` (exact multinomial power for vocab <= 4, else noncentral chi-square).

    Raises
    ------
    InvalidArgumentError
        Probs that are not distributions, mismatched shapes, equal laws (no n detects them),
        alpha or power outside (0, 1), ``num_cells < 1``.

    References
    ----------
    Leviathan, Kalman & Matias (2023), Algorithm 1 (the law a correct decoder reproduces); Cohen
    (1988), ch. 7 (noncentral chi-square power).

    Examples
    --------
    The seeds' full-p-fallback bias, (.2,.5,.3) sampled as (.26,.45,.29), at alpha 0.01 for one cell:

    >>> min_num_samples([0.2, 0.5, 0.3], [0.26, 0.45, 0.29], alpha=0.02)
    1259
    """
    from verifier.stats.power import samples_needed

    cell_alpha = _cell_alpha(alpha, num_cells)
    return samples_needed(target_probs, sampled_probs, alpha=cell_alpha, power=power)


def min_detectable_effect(num_samples: int, target_probs, *, alpha: float = DEFAULT_ALPHA,
                          power: float = DEFAULT_POWER, num_cells: int = 1):
    """Smallest bias (total variation and Cohen's w) :func:`assert_preserves_target` detects at ``gof@1``.

    A thin wrapper over :func:`verifier.stats.power.min_detectable_effect` at the per-cell level
    ``alpha / (2 * num_cells)`` of the gate.

    Parameters
    ----------
    num_samples : int
        Samples per prompt (>= 1).
    target_probs : array_like, shape (vocab,), float64
        Processed target probs of the first emitted token.
    alpha : float, default 1e-3
        Family-wise false-alarm rate.
    power : float, default 0.99
    num_cells : int, default 1
        Cells the check runs (see :func:`min_num_samples`).

    Returns
    -------
    verifier.stats.power.MinDetectableEffect
        Unpacks as ``(tv, w)``: every sampled law at TV distance >= ``tv`` from ``target_probs``
        (on the pooled categories) is detected with probability >= ``power``.

    Raises
    ------
    InvalidArgumentError
        Bad probs, ``num_samples < 1``, alpha or power outside (0, 1), ``num_cells < 1``.

    Examples
    --------
    >>> tv, w = min_detectable_effect(1259, [0.2, 0.5, 0.3], alpha=0.02)
    >>> round(w, 3), round(tv, 3)
    (0.148, 0.074)
    """
    from verifier.stats.power import min_detectable_effect as _mde

    return _mde(num_samples, target_probs, alpha=_cell_alpha(alpha, num_cells), power=power)


def _cell_alpha(alpha: float, num_cells: int) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (0 < alpha < 1):
        raise invalid_argument("alpha", alpha, "a number with 0 < alpha < 1 (family-wise false-alarm rate)")
    if isinstance(num_cells, bool) or not isinstance(num_cells, (int, np.integer)) or num_cells < 1:
        raise invalid_argument("num_cells", num_cells, "an integer >= 1")
    return float(alpha) / (2 * int(num_cells))


# --------------------------------------------------------------------------- the check


def assert_preserves_target(decoder, target, prompts, sampling: SamplingConfig, *,
                            num_samples: int = DEFAULT_NUM_SAMPLES, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                            alpha: float = DEFAULT_ALPHA, seed: int | None = None, num_gof_positions: int | None = None,
                            min_effect: float | None = None, name: str | None = None,
                            reproduce_hint: str | None = None) -> PreservationResult:
    """Assert that ``decoder`` samples from ``target``'s processed distribution.

    Draws ``num_samples`` continuations of every prompt from the decoder, scores every emitted
    token under the target (teacher-forced, float64 processed probs) and tests the cells listed in
    the module docstring; the family-wise false-alarm rate is ``alpha`` (Holm at ``alpha / 2`` over
    cells + a Cauchy combination at ``alpha / 2``; Cauchy because the cells of one prompt share
    samples).

    Parameters
    ----------
    decoder : Decoder
        Anything with ``generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)`` returning
        int64 emitted tokens of shape (num_samples, max_new_tokens), -1 after EOS.
    target : causal LM or TabularLM
        The target model: a Hugging Face causal LM (:func:`verifier.models.load_model`), a
        :class:`verifier.models.TabularCausalLM`, or a :class:`verifier.exact.TabularLM` (wrapped).
        Its ``config.vocab_size`` and ``config.eos_token_id`` validate the decoder output.
    prompts : sequence of sequences of int
        Prompt token ids, one sequence per prompt (``[[1, 2], [3]]``); each gets its own cells.
    sampling : SamplingConfig
        The sampling config the decoder is asked to honour (temperature 0: exact greedy match).
    num_samples : int, default 2000
        Samples per prompt.  See :func:`min_num_samples` / :func:`min_detectable_effect` for what it buys.
    max_new_tokens : int, default 4
        Emitted tokens per sample (>= 1); the PIT cell covers all of them.
    alpha : float, default 1e-3
        Family-wise false-alarm rate over all cells (a correct decoder fails with probability <= alpha).
    seed : int or None, default None
        Root seed (>= 0) of the decoder seeds and of the PIT uniforms; ``None`` reads the
        ``SPECVERIFY_SEED`` environment variable (set by ``pytest --verifier-seed``), else 0.
    num_gof_positions : int or None, default None
        Positions 1..num_gof_positions get a ``gof@t`` cell; None: every position up to
        ``max_new_tokens`` whose exact marginal law can be enumerated.
    min_effect : float or None, default None
        If set, the check also fails (``UNDERPOWERED``) when a chi-square cell's minimum detectable
        total variation at its n, Holm level and power 0.99 is above ``min_effect``.
    name : str or None
        Decoder name in messages; default ``decoder.name`` or its class name.
    reproduce_hint : str or None
        Command shown as "reproduce:"; default: the pytest node (with ``--verifier-seed``) when
        running under pytest, else the current command line with ``SPECVERIFY_SEED`` set.

    Returns
    -------
    PreservationResult
        When every expectation is met (verdict ``PASS``).

    Raises
    ------
    PreservationError (an AssertionError)
        Bias detected (a cell rejected after correction, the combination test rejected, a support
        violation, or a greedy mismatch), or ``UNDERPOWERED`` with ``min_effect``.  The message lists
        the failing cells with p-values, adjusted p-values, TV estimates with CIs, and one command that
        reproduces the failure; ``.result`` holds everything.
    InvalidArgumentError
        Bad arguments (named in the message).
    DecoderOutputError
        The decoder returned the wrong shape/dtype, out-of-vocab ids or tokens after EOS.

    References
    ----------
    Leviathan, Kalman & Matias (2023), *Fast inference from transformers via speculative decoding*,
    Algorithm 1; Chen et al. (2023), *Accelerating LLM decoding with speculative sampling*,
    Algorithm 2 (both claim the emitted tokens follow the target exactly).  Holm (1979); Liu & Xie
    (2020) (Cauchy combination); Czado, Gneiting & Held (2009) (randomized PIT).

    Examples
    --------
    >>> from verifier.decoders import AncestralDecoder
    >>> from verifier.exact import TabularLM
    >>> from verifier.models import TabularCausalLM
    >>> target = TabularLM({(): ["1/5", "1/2", "3/10"]}, vocab_size=3, context_len=0)
    >>> result = assert_preserves_target(AncestralDecoder(TabularCausalLM(target)), target, [[0]],
    ...                                  SamplingConfig(), num_samples=1000, max_new_tokens=2, seed=0)
    >>> result.verdict, [cell.name for cell in result.cells]
    ('PASS', ['prompt0/gof@1', 'prompt0/gof@2', 'prompt0/joint@1..2', 'prompt0/surprisal@1..2', 'prompt0/pit'])
    """
    __tracebackhide__ = True  # pytest: show the caller's line and the failing cells, not this function's source
    result = check_preserves_target(decoder, target, prompts, sampling, num_samples=num_samples,
                                    max_new_tokens=max_new_tokens, alpha=alpha, seed=seed,
                                    num_gof_positions=num_gof_positions, min_effect=min_effect, name=name,
                                    reproduce_hint=reproduce_hint)
    if not result.passed:
        raise PreservationError(result)
    return result


def check_preserves_target(decoder, target, prompts, sampling: SamplingConfig, *,
                           num_samples: int = DEFAULT_NUM_SAMPLES, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                           alpha: float = DEFAULT_ALPHA, seed: int | None = None, num_gof_positions: int | None = None,
                           min_effect: float | None = None, name: str | None = None,
                           reproduce_hint: str | None = None) -> PreservationResult:
    """Like :func:`assert_preserves_target` but returns the :class:`PreservationResult` whatever
    the verdict (raises only for bad arguments and invalid decoder output)."""
    (decoder, scorer, prompts, sampling, n, max_new_tokens, alpha, seed, seed_from_env, num_gof_positions, min_effect,
     name) = _check_iv(decoder, target, prompts, sampling, num_samples, max_new_tokens, alpha, seed, num_gof_positions,
                       min_effect, name)
    command = reproduce_hint or reproduce_command(seed, seed_from_env)
    if sampling.greedy:  # temperature 0: an exact match against the target's greedy continuation
        return greedy_check(decoder, scorer, prompts, sampling, n, max_new_tokens, alpha, seed, name, command)
    # every statistical check goes through the suite runner
    return check_through_runner(decoder, scorer.model, prompts, sampling, num_samples=n, max_new_tokens=max_new_tokens,
                                alpha=alpha, seed=seed, num_gof_positions=num_gof_positions, min_effect=min_effect,
                                name=name, reproduce=command)


def _check_iv(decoder, target, prompts, sampling, num_samples, max_new_tokens, alpha, seed,
              num_gof_positions, min_effect, name):
    if not callable(getattr(decoder, "generate", None)):
        raise invalid_argument("decoder", type(decoder).__name__, "an object with generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)")
    if not isinstance(sampling, SamplingConfig):
        raise invalid_argument("sampling", sampling, "a verifier.SamplingConfig")
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise invalid_argument("prompts", prompts, "a non-empty sequence of prompts, each a sequence of token ids, e.g. [[1, 2]]")
    clean = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, (str, bytes, int, np.integer)) or not isinstance(prompt, (Sequence, np.ndarray)) or len(prompt) == 0 \
                or not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise invalid_argument(f"prompts[{i}]", prompt, "a non-empty sequence of token ids >= 0 (prompts is a list of such lists)")
        clean.append(tuple(int(t) for t in prompt))
    for arg, value, lo in (("num_samples", num_samples, 1), ("max_new_tokens", max_new_tokens, 1),
                           ("num_gof_positions", 1 if num_gof_positions is None else num_gof_positions, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
            raise invalid_argument(arg, value, f"an integer >= {lo}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (0 < alpha < 1):
        raise invalid_argument("alpha", alpha, "a number with 0 < alpha < 1 (family-wise false-alarm rate)")
    seed_from_env = seed is None
    if seed is None:
        text = os.environ.get(SEED_ENV_VAR, "0")
        try:
            seed = int(text)
        except ValueError:
            raise invalid_argument(SEED_ENV_VAR, text, "an integer >= 0 (environment variable)") from None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise invalid_argument("seed", seed, "None or an integer >= 0")
    if min_effect is not None and (isinstance(min_effect, bool) or not isinstance(min_effect, (int, float)) or not (0 < min_effect <= 1)):
        raise invalid_argument("min_effect", min_effect, "None or a total variation with 0 < min_effect <= 1")
    name = str(name or getattr(decoder, "name", None) or type(decoder).__name__)
    scorer = _Scorer(target)
    for i, prompt in enumerate(clean):
        if max(prompt) >= scorer.vocab_size:
            raise invalid_argument(f"prompts[{i}]", list(prompt), f"token ids in 0..{scorer.vocab_size - 1} (the target's vocabulary)")
    return (decoder, scorer, clean, sampling, int(num_samples), int(max_new_tokens), float(alpha), int(seed),
            seed_from_env, None if num_gof_positions is None else int(num_gof_positions), min_effect, name)


