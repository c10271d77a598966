"""Internals of :mod:`verifier.api`: result objects, the cells of one prompt, correction, verdict.

See :func:`verifier.api.assert_preserves_target` for what is tested and why.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verifier.errors import invalid_argument
from verifier.sampling import SamplingConfig

__all__ = ["PreservationCell", "PreservationResult", "PreservationError"]

SEED_ENV_VAR = "SPECVERIFY_SEED"  # seed=None reads it (set by `pytest --verifier-seed`), else 0
MAX_MESSAGE_CELLS = 12  # failing cells listed in an assertion message; the rest are counted
_SEED_MASK = (1 << 63) - 1  # torch.Generator.manual_seed and numpy accept any non-negative int64


@dataclass(frozen=True)
class PreservationCell:
    """One cell's outcome.  Unpacks as ``(statistic, pvalue)``.

    Attributes
    ----------
    name : str
        ``prompt<i>/gof@1``, ``prompt<i>/gof@2|greedy``, ``prompt<i>/pit`` or ``prompt<i>/greedy``.
    prompt_index : int
    test : str
        ``"gof"``, ``"pit-ks"`` or ``"greedy"``.
    n : int
        Observations in the cell (rows, or emitted tokens for ``pit``).
    statistic, pvalue : float
    adjusted_pvalue : float
        Holm-adjusted p-value (at family level ``alpha / 2``).
    rejected : bool
        Rejected after correction, or a support violation / greedy mismatch.
    effect : str
        Effect estimate in words: TV with its confidence interval (gof), KS distance (pit).
    effect_tv : float or None
        Point estimate of the total variation distance (gof cells).
    mde_tv : float or None
        Minimum detectable effect in TV at this n, the strictest Holm level and power 0.99.
    detail : str
        Support violations or the first mismatching row, when any.
    """

    name: str
    prompt_index: int
    test: str
    n: int
    statistic: float
    pvalue: float
    adjusted_pvalue: float = math.nan
    rejected: bool = False
    effect: str = ""
    effect_tv: float | None = None
    mde_tv: float | None = None
    detail: str = ""

    def __iter__(self):
        return iter((self.statistic, self.pvalue))

    def line(self) -> str:
        """One line for assertion messages and logs."""
        parts = [f"{self.name}: {self.test} n={self.n} stat={self.statistic:.4g} p={self.pvalue:.3g}",
                 f"adj. p={self.adjusted_pvalue:.3g}"]
        if self.effect:
            parts.append(self.effect)
        if self.mde_tv is not None and math.isfinite(self.mde_tv):
            parts.append(f"MDE TV {self.mde_tv:.3g}")
        if self.detail:
            parts.append(self.detail)
        return ", ".join(parts)


@dataclass(frozen=True)
class PreservationResult:
    """Outcome of :func:`check_preserves_target`.  Unpacks as ``(verdict, combined_pvalue)``.

    Attributes
    ----------
    verdict : str
        ``"PASS"``, ``"BIAS DETECTED"`` or ``"UNDERPOWERED"`` (only when ``min_effect`` was given).
    cells : tuple of PreservationCell
    alpha : float
        Family-wise level.
    combined_pvalue : float
        Cauchy combination of every cell's p-value (judged at ``alpha / 2``; Cauchy rather than
        Fisher because the cells of one prompt share samples).
    seed, num_samples, max_new_tokens : int
    decoder_name : str
    reproduce : str
        One shell command that reruns the failing check with the same seed.
    """

    verdict: str
    cells: tuple[PreservationCell, ...]
    alpha: float
    combined_pvalue: float
    seed: int
    num_samples: int
    max_new_tokens: int
    decoder_name: str
    reproduce: str
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __iter__(self):
        return iter((self.verdict, self.combined_pvalue))

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    @property
    def failing_cells(self) -> tuple[PreservationCell, ...]:
        return tuple(c for c in self.cells if c.rejected)

    @property
    def min_adjusted_pvalue(self) -> float:
        return min((c.adjusted_pvalue for c in self.cells), default=math.nan)

    def message(self) -> str:
        """The assertion message: verdict, failing cells with p-values and effects, reproduce command."""
        claim = "preserves" if self.passed else "does not preserve"
        head = (f"{self.decoder_name} {claim} the target distribution: {self.verdict} "
                f"({self.reason}); family-wise alpha={self.alpha:g}, seed={self.seed}, "
                f"num_samples={self.num_samples}, max_new_tokens={self.max_new_tokens}")
        shown = self.failing_cells or tuple(sorted(self.cells, key=lambda c: c.adjusted_pvalue)[:3])
        lines = [head, "failing cells:" if self.failing_cells else "closest cells:"]
        lines += ["  " + c.line() for c in shown[:MAX_MESSAGE_CELLS]]
        if len(shown) > MAX_MESSAGE_CELLS:
            lines.append(f"  ... and {len(shown) - MAX_MESSAGE_CELLS} more")
        lines.append(f"Cauchy combined p={self.combined_pvalue:.3g} (judged at alpha/2={self.alpha / 2:g})")
        lines.append(f"reproduce: {self.reproduce}")
        return "\n".join(lines)


class PreservationError(AssertionError):
    """Raised by :func:`assert_preserves_target` when bias is detected (or power is short).

    ``str(error)`` lists the failing cells, their p-values and effect estimates and one command that
    reproduces the failure; ``error.result`` is the full :class:`PreservationResult`.
    """

    def __init__(self, result: PreservationResult) -> None:
        super().__init__(result.message())
        self.result = result

    def __reduce__(self):  # picklable (multiprocessing, pytest-xdist): rebuild from the result
        return (type(self), (self.result,))


def _derived_seed(seed: int, prompt_index: int, stream: int) -> int:
    """Seed of one stream of one prompt: stream 0 feeds the decoder, stream 1 the PIT uniforms."""
    ss = np.random.SeedSequence(entropy=seed, spawn_key=(prompt_index, stream))
    return int(ss.generate_state(1, dtype=np.uint64)[0]) & _SEED_MASK


@dataclass
class _PendingCell:
    name: str
    prompt_index: int
    test: str
    counts: np.ndarray | None = None  # gof: emitted-token counts, shape (vocab,)
    expected: np.ndarray | None = None  # gof: target probs of the fixed prefix, shape (vocab,)
    u: np.ndarray | None = None  # pit: randomized-PIT values, shape (tokens,)
    violations: tuple = ()
    detail: str = ""


def greedy_check(decoder, scorer, prompts, sampling, n, max_new_tokens, alpha, seed, name, command) -> PreservationResult:
    """Temperature 0: every row must be the target's greedy continuation (no statistics; the
    statistical checks go through the suite runner, :mod:`verifier._preservation_run`)."""
    from verifier.validation import check_emitted_tokens

    pending: list[_PendingCell] = []
    for i, prompt in enumerate(prompts):  # temperature 0: exact match against the target's greedy continuation
        emitted = decoder.generate(list(prompt), n, max_new_tokens, sampling, _derived_seed(seed, i, 0))
        emitted = check_emitted_tokens(emitted, num_samples=n, max_new_tokens=max_new_tokens,
                                       vocab_size=scorer.vocab_size, eos_token_id=scorer.eos_token_id,
                                       decoder_name=name)
        pending.append(_greedy_pending(i, prompt, emitted, scorer, sampling))
    cells = _greedy_cells(pending)
    verdict, reason = _verdict(cells)
    return PreservationResult(verdict=verdict, cells=tuple(cells), alpha=alpha, combined_pvalue=math.nan,
                              seed=seed, num_samples=n, max_new_tokens=max_new_tokens, decoder_name=name,
                              reproduce=command, reason=reason)


def _greedy_pending(i, prompt, emitted, scorer, sampling) -> _PendingCell:
    """temperature 0: every emitted token must be the target's argmax after its own prefix."""
    first_bad = None
    for rows, probs, valid in scorer.teacher_forced(prompt, emitted, sampling):
        tokens = emitted[rows]
        keep = valid
        p_x = np.take_along_axis(probs, np.where(keep, tokens, 0)[..., None], axis=-1)[..., 0]
        bad = keep & (p_x < 1.0)
        if bad.any() and first_bad is None:
            r, t = (int(v) for v in np.argwhere(bad)[0])
            row = rows.start + r
            first_bad = (f"row {row} position {t + 1}: emitted {int(emitted[row, t])}, target greedy "
                         f"{int(np.argmax(probs[r, t]))}; row {row} = {emitted[row].tolist()}")
    cell = _PendingCell(f"prompt{i}/greedy", i, "greedy", detail=first_bad or "")
    cell.counts = np.array([int(first_bad is not None), len(emitted)])  # (any mismatch, rows checked)
    return cell


def _greedy_cells(pending: list[_PendingCell]) -> list[PreservationCell]:
    """One exact-match cell per prompt: rejected iff some row left the target's greedy continuation.

    A single-outcome law: no false alarms; a mismatch rate TV is seen with probability
    1 - (1 - TV)^rows, so the cell states that MDE (:func:`verifier.stats.power.support_check_mde`)."""
    from verifier.stats.power import support_check_mde

    cells = []
    for cell in pending:
        mismatch, rows = bool(cell.counts[0]), int(cell.counts[1])
        cells.append(PreservationCell(name=cell.name, prompt_index=cell.prompt_index, test="greedy", n=rows,
                                      statistic=float(mismatch), pvalue=0.0 if mismatch else 1.0,
                                      adjusted_pvalue=0.0 if mismatch else 1.0, rejected=mismatch,
                                      mde_tv=support_check_mde(rows).tv if rows else math.inf, detail=cell.detail))
    return cells


def _verdict(cells: list[PreservationCell]) -> tuple[str, str]:
    rejected = [c for c in cells if c.rejected]
    if rejected:
        return "BIAS DETECTED", f"{len(rejected)} of {len(cells)} prompts left the target's greedy continuation"
    return "PASS", "every row equals the target's greedy continuation (temperature 0: exact match, no statistics)"


def reproduce_command(seed: int, seed_from_env: bool) -> str:
    """One shell command that reruns this check with the same seed."""
    env = f"{SEED_ENV_VAR}={seed} " if seed_from_env else ""
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if current:  # "tests/test_x.py::test_y (call)"
        return f"{env}python -m pytest {shlex.quote(current.rsplit(' (', 1)[0])}"
    argv = list(sys.argv)
    if argv and argv[0] and argv[0] not in ("-c", "-"):
        return f"{env}python " + " ".join(shlex.quote(a) for a in argv)
    return f"check_preserves_target(decoder, target, prompts, sampling, seed={seed}, ...)  # from an interactive session"


class _Scorer:
    """The target as :class:`verifier.decoders.TargetScorer` plus its vocabulary and EOS id."""

    def __init__(self, target) -> None:
        from verifier.exact.tabular import TabularLM

        self.model = target  # as given: what the suite runner is lent as the target
        if isinstance(target, TabularLM):
            from verifier.models.tabular import TabularCausalLM

            target = TabularCausalLM(target)
        config = getattr(target, "config", None)
        if config is None or not callable(target) or getattr(config, "vocab_size", None) is None:
            raise invalid_argument("target", type(target).__name__,
                                   "a causal LM with .config.vocab_size (Hugging Face, TabularCausalLM) or a TabularLM")
        from verifier.decoders import TargetScorer

        self._scorer = TargetScorer(target)
        self.vocab_size = int(self._scorer.vocab_size)
        eos = getattr(config, "eos_token_id", None)
        if isinstance(eos, (list, tuple)):
            eos = eos[0] if eos else None
        self.eos_token_id = None if eos is None else int(eos)

    def teacher_forced(self, prompt: tuple[int, ...], emitted: np.ndarray, sampling: SamplingConfig):
        """Yield ``(rows, probs, valid)``: ``probs[r, t]`` (shape (rows, max_new_tokens, vocab), float64)
        is the processed target law of emitted token ``t`` of row ``r`` given the prompt and tokens < t;
        ``valid[r, t]`` is False at padding (where ``probs`` is all 0)."""
        for batch in self._scorer.score(list(prompt), emitted, sampling):
            yield slice(batch.start, batch.start + len(batch.probs)), batch.probs, batch.valid
