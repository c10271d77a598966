"""Black-box audit: speculative samples vs plain-sampling samples from the same system.

For a system whose target probabilities are not available (a serving engine, a closed decoder),
the only evidence is a second sample from the *same* system with speculation off.  Both arms
generate from the same prompts and sampling config; every cell compares the two arms with the
2 x K permutation chi-square of :func:`verifier.stats.two_sample_chi2_test`:

* ``position t`` (t = 0 .. max_new_tokens - 1): the marginal law of the token emitted at position
  t, with "row already ended" (padding after EOS) as one more category;
* ``positions 0,1 joint``: the joint law of the first two emitted tokens (catches dependence
  defects such as a bonus token from the wrong position that leave the marginals intact).

Under the null (the speculative decoder samples the target) the arms are exchangeable, so the
permutation p-values are exact.  The cells of one prompt share samples, so the family is judged
with :func:`verifier.stats.adjust` in gate mode with ``dependent=True``.

Power: a two-sample test needs about twice the one-sample n *per arm* for the same effect
(the variance of a difference of two empirical laws doubles); :func:`blackbox_samples_needed`
returns ``2 * verifier.stats.samples_needed(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from verifier.errors import invalid_argument
from verifier.protocols import PADDING_TOKEN_ID
from verifier.sampling import SamplingConfig
from verifier.stats import BIAS_DETECTED, PASS, Adjustment, CellTestResult, adjust, samples_needed, two_sample_chi2_test
from verifier.stats.power import DEFAULT_POWER

__all__ = ["TWO_SAMPLE_FACTOR", "BlackBoxCell", "BlackBoxResult", "blackbox_samples_needed", "blackbox_audit", "blackbox_cells"]

TWO_SAMPLE_FACTOR = 2  # per-arm n of a two-sample test relative to the one-sample n for the same power (docs/ARCHITECTURE.md "Statistical defaults")
DEFAULT_ALPHA = 1e-3  # family-wise false-alarm rate, as the CI gate
BLACKBOX_DRAFT_TOKENS = 4  # k assumed when sizing the default chunk (the arms do not tell theirs; the audit default K)


def blackbox_samples_needed(null_probs, alt_probs, alpha: float = 0.01, power: float = DEFAULT_POWER) -> int:
    """Samples *per arm* a black-box audit needs to see ``alt_probs`` vs ``null_probs`` with ``power``.

    Parameters
    ----------
    null_probs, alt_probs : array_like, shape (vocab,)
        Target law and the law the decoder actually samples (e.g. a mutant's exact output law).
    alpha : float, default 0.01
        Level of the cell's test.
    power : float, default 0.99

    Returns
    -------
    int
        ``TWO_SAMPLE_FACTOR * verifier.stats.samples_needed(null_probs, alt_probs, alpha, power)``.

    Examples
    --------
    >>> blackbox_samples_needed([0.2, 0.5, 0.3], [0.26, 0.45, 0.29], alpha=0.01)
    2518
    """
    return TWO_SAMPLE_FACTOR * samples_needed(null_probs, alt_probs, alpha=alpha, power=power)


@dataclass(frozen=True)
class BlackBoxCell:
    """One two-sample cell: name, prompt index and the :class:`~verifier.stats.CellTestResult`."""

    name: str
    prompt_index: int
    result: CellTestResult

    def __iter__(self):
        return iter(self.result)


@dataclass
class BlackBoxResult:
    """Outcome of :func:`blackbox_audit`: ``verdict`` is ``PASS`` or ``BIAS DETECTED``."""

    decoder: str
    reference: str
    num_samples_per_arm: int
    seed: int
    alpha: float
    cells: list[BlackBoxCell]
    adjustment: Adjustment
    sampling: SamplingConfig
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return BIAS_DETECTED if self.adjustment.family_rejected else PASS

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def summary(self) -> str:
        i = int(np.argmin(self.adjustment.adjusted_pvalues))
        worst = self.cells[i]
        tv = f", {worst.result.effect}" if worst.result.effect is not None else ""
        return (f"black-box {self.decoder} vs {self.reference} ({self.sampling.label()}): {self.verdict} "
                f"(n={self.num_samples_per_arm} per arm, seed={self.seed}, alpha={self.alpha:g}, {self.adjustment.method}; "
                f"worst cell prompt {worst.prompt_index} {worst.name}: p_adj={self.adjustment.adjusted_pvalues[i]:.3g}{tv})")


def _categories(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Token ids with padding mapped to the extra category ``vocab_size`` ("row ended")."""
    return np.where(tokens == PADDING_TOKEN_ID, vocab_size, tokens)


def blackbox_cells(emitted_a: np.ndarray, emitted_b: np.ndarray, vocab_size: int, *, cell_alpha: float, rng: np.random.Generator,
                   prompt_index: int = 0) -> list[BlackBoxCell]:
    """Two-sample cells of one prompt (see the module docstring).

    Parameters
    ----------
    emitted_a, emitted_b : np.ndarray, shape (n_a, T) and (n_b, T), int64
        Decoder under test and plain sampling, -1 after EOS.
    vocab_size : int
    cell_alpha : float
        Level each permutation test must resolve (sets the number of permutations, >= 20 / cell_alpha).
    rng : numpy.random.Generator
        Drives the permutations (independent of both decoders).
    """
    if emitted_a.shape[1] != emitted_b.shape[1]:
        raise invalid_argument("emitted_b.shape", emitted_b.shape, f"(n, {emitted_a.shape[1]}) like emitted_a")
    width = vocab_size + 1
    cells = []
    for t in range(emitted_a.shape[1]):
        ca = np.bincount(_categories(emitted_a[:, t], vocab_size), minlength=width)
        cb = np.bincount(_categories(emitted_b[:, t], vocab_size), minlength=width)
        cells.append(BlackBoxCell(f"position {t}", prompt_index, two_sample_chi2_test(ca, cb, alpha=cell_alpha, rng=rng)))
    if emitted_a.shape[1] >= 2:
        ja = _categories(emitted_a[:, 0], vocab_size) * width + _categories(emitted_a[:, 1], vocab_size)
        jb = _categories(emitted_b[:, 0], vocab_size) * width + _categories(emitted_b[:, 1], vocab_size)
        # only the observed pairs matter: unobserved categories contribute nothing to a 2 x K table
        seen, inverse = np.unique(np.concatenate([ja, jb]), return_inverse=True)
        ca = np.bincount(inverse[: len(ja)], minlength=len(seen))
        cb = np.bincount(inverse[len(ja):], minlength=len(seen))
        cells.append(BlackBoxCell("positions 0,1 joint", prompt_index, two_sample_chi2_test(ca, cb, alpha=cell_alpha, rng=rng)))
    return cells


def blackbox_audit(decoder, reference, prompts: Sequence[Sequence[int]], sampling: SamplingConfig, *, num_samples: int,
                   max_new_tokens: int, vocab_size: int, alpha: float = DEFAULT_ALPHA, seed: int = 0,
                   eos_token_id: int | None = None, chunk_size: int | None = None) -> BlackBoxResult:
    """Compare a speculative decoder with plain sampling of the same system (two-sample tests).

    Parameters
    ----------
    decoder : Decoder
        The speculative system under test (wrap plugins with :func:`~verifier.plugins.load_decoder`).
    reference : Decoder
        Plain sampling from the same target (e.g. :class:`verifier.decoders.speculative.AncestralDecoder`
        or the same serving engine with speculation off).
    prompts : sequence of sequences of int
    sampling : SamplingConfig
    num_samples : int
        Samples *per arm* per prompt; see :func:`blackbox_samples_needed` (about 2x the one-sample n).
    max_new_tokens : int
    vocab_size : int
    alpha : float, default 1e-3
        Family-wise false-alarm rate over all cells.
    seed : int, default 0
        Arm seeds and permutation RNG derive from it (``SeedSequence``).
    eos_token_id : int or None
        Used to validate both arms' output.

    chunk_size : int, optional
        Rows per ``generate`` call (memory grows with it times the vocabulary); default
        :func:`verifier.runner.chunking.default_chunk_size` of ``vocab_size`` at k = 4 (the arms do not
        tell their k): 500 up to V ~ 44k, 87 at V = 256k; chunk ``j`` of an arm
        draws with seed ``SeedSequence(arm seed).spawn``'s ``j``-th child, the first chunk (or all
        rows, when they fit one chunk) with the arm seed itself.

    Returns
    -------
    BlackBoxResult

    Raises
    ------
    DecoderError, DecoderOutputError
        Either arm raised or returned invalid output (exit 3).
    InvalidArgumentError
        Bad arguments.
    """
    from verifier.plugins import PluginDecoder
    from verifier.runner.chunking import default_chunk_size

    if chunk_size is None and isinstance(vocab_size, int) and vocab_size >= 1:
        chunk_size = default_chunk_size(vocab_size, BLACKBOX_DRAFT_TOKENS)
    for arg, value in (("num_samples", num_samples), ("max_new_tokens", max_new_tokens), ("chunk_size", chunk_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid_argument(arg, value, "an integer >= 1")
    if not 0 < alpha < 1:
        raise invalid_argument("alpha", alpha, "a number in (0, 1)")
    if not prompts:
        raise invalid_argument("prompts", prompts, "a non-empty list of prompts (lists of token ids)")
    arms = [d if isinstance(d, PluginDecoder) else PluginDecoder(d, vocab_size=vocab_size, eos_token_id=eos_token_id)
            for d in (decoder, reference)]
    seeds = np.random.SeedSequence(int(seed)).spawn(len(prompts))
    num_cells = len(prompts) * (max_new_tokens + (1 if max_new_tokens >= 2 else 0))
    cell_alpha = alpha / (2 * num_cells)  # Holm's smallest level: the permutation count must resolve it
    cells: list[BlackBoxCell] = []
    for i, prompt in enumerate(prompts):
        seed_a, seed_b, seed_perm = (int(s) for s in seeds[i].generate_state(3, np.uint32))
        a = _generate_chunked(arms[0], prompt, num_samples, max_new_tokens, sampling, seed_a, chunk_size)
        b = _generate_chunked(arms[1], prompt, num_samples, max_new_tokens, sampling, seed_b, chunk_size)
        cells += blackbox_cells(a, b, vocab_size, cell_alpha=cell_alpha, rng=np.random.default_rng(seed_perm), prompt_index=i)
    adjustment = adjust([c.result for c in cells], alpha=alpha, mode="gate", dependent=True)
    notes = []
    if sampling.greedy:
        notes.append("temperature 0: both arms must be identical; the two-sample tests are a weak check of that")
    return BlackBoxResult(decoder=arms[0].name, reference=arms[1].name, num_samples_per_arm=num_samples, seed=int(seed),
                          alpha=float(alpha), cells=cells, adjustment=adjustment, sampling=sampling, notes=notes)


def _generate_chunked(arm, prompt, num_samples: int, max_new_tokens: int, sampling, seed: int, chunk_size: int) -> np.ndarray:
    """``arm.generate`` in chunks of at most ``chunk_size`` rows (issue 17: one call of all n rows
    needs n x vocab memory in the decoder); the first chunk uses ``seed`` itself."""
    parts, done = [], 0
    seeds = np.random.SeedSequence(int(seed)).spawn(max(0, -(-num_samples // chunk_size) - 1))
    for j in range(-(-num_samples // chunk_size)):
        rows = min(chunk_size, num_samples - done)
        s = int(seed) if j == 0 else int(seeds[j - 1].generate_state(1, np.uint32)[0])
        parts.append(arm.generate(list(prompt), rows, max_new_tokens, sampling, s))
        done += rows
    return np.concatenate(parts) if len(parts) > 1 else parts[0]
