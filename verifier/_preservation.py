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


def _check(decoder, scorer, prompts, sampling, n, max_new_tokens, alpha, seed, seed_from_env,
           num_gof_positions, min_effect, name, *, reproduce_hint):
    from verifier.validation import check_emitted_tokens

    pending: list[_PendingCell] = []
    for i, prompt in enumerate(prompts):
        emitted = decoder.generate(list(prompt), n, max_new_tokens, sampling, _derived_seed(seed, i, 0))
        emitted = check_emitted_tokens(emitted, num_samples=n, max_new_tokens=max_new_tokens,
                                       vocab_size=scorer.vocab_size, eos_token_id=scorer.eos_token_id,
                                       decoder_name=name)
        if sampling.greedy:
            pending.append(_greedy_pending(i, prompt, emitted, scorer, sampling))
        else:
            pending.extend(_prompt_pending(i, prompt, emitted, scorer, sampling, num_gof_positions,
                                           _derived_seed(seed, i, 1)))
    cells = _run_tests(pending, alpha)
    verdict, reason = _verdict(cells, alpha, min_effect)
    command = reproduce_hint or _reproduce_command(seed, seed_from_env)
    combined = cells[1] if cells else math.nan
    return PreservationResult(verdict=verdict, cells=tuple(cells[0]), alpha=alpha, combined_pvalue=combined,
                              seed=seed, num_samples=n, max_new_tokens=max_new_tokens, decoder_name=name,
                              reproduce=command, reason=reason)


def _prompt_pending(i, prompt, emitted, scorer, sampling, num_gof_positions, pit_seed) -> list[_PendingCell]:
    """Cells of one prompt: gof@1, gof@t|greedy along the target's greedy prefix, and pit."""
    from verifier.stats.pit import randomized_pit

    n, steps = emitted.shape
    vocab = scorer.vocab_size
    rng = np.random.default_rng(pit_seed)  # independent of the decoder's generator
    u_parts, violations = [], {}
    greedy_prefix: list[int] = []  # target's greedy continuation, grown one token per gof cell
    expected_at: dict[int, np.ndarray] = {}  # position t (0-based) -> law of the greedy prefix
    for rows, probs, valid in scorer.teacher_forced(prompt, emitted, sampling):  # probs: (rows, steps, vocab)
        tokens = emitted[rows]
        u, bad = randomized_pit(tokens[valid], probs[valid], rng)
        u_parts.append(u)
        for v in bad:
            violations[v.token_id] = violations.get(v.token_id, 0) + v.count
        for t in range(min(num_gof_positions, steps)):
            if t in expected_at:
                continue
            if t > 0 and (t - 1 not in expected_at or greedy_prefix[-1:] == [scorer.eos_token_id]):
                break
            prefix = greedy_prefix[:t]
            match = np.all(tokens[:, :t] == np.asarray(prefix, dtype=np.int64), axis=1) if t else np.ones(len(tokens), bool)
            if match.any():
                expected_at[t] = probs[np.argmax(match), t]
                greedy_prefix.append(int(np.argmax(expected_at[t])))  # ties: lowest id, as processed_probs
    out = []
    for t in range(min(num_gof_positions, steps)):
        if t > 0 and greedy_prefix[t - 1:t] == [scorer.eos_token_id]:
            break  # the target's greedy continuation ended: no later position to test along it
        label = f"prompt{i}/gof@{t + 1}" + ("|greedy" if t else "")
        if t not in expected_at:
            out.append(_PendingCell(label, i, "gof", detail="no row continued the target's greedy prefix"))
            continue
        match = np.all(emitted[:, :t] == np.asarray(greedy_prefix[:t], dtype=np.int64), axis=1)
        tokens_t = emitted[match, t]
        counts = np.bincount(tokens_t[tokens_t >= 0], minlength=vocab).astype(np.int64)
        detail = f"prefix {greedy_prefix[:t]}" if t else ""
        out.append(_PendingCell(label, i, "gof", counts=counts, expected=expected_at[t], detail=detail))
    bad = tuple(sorted(violations.items()))
    out.append(_PendingCell(f"prompt{i}/pit", i, "pit-ks", u=np.concatenate(u_parts) if u_parts else np.zeros(0),
                            violations=bad))
    return out


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


def _run_tests(pending: list[_PendingCell], alpha: float):
    """Test every cell at the strictest Holm level, then correct: returns (cells, combined p)."""
    from verifier.stats.gof import gof_test
    from verifier.stats.multiple import adjust
    from verifier.stats.pit import pit_ks_test

    if not pending:
        return [], math.nan
    cell_alpha = alpha / (2 * len(pending))
    tested = []  # (pending, statistic, pvalue, n, effect, effect_tv, mde_tv, violation_text)
    for k, cell in enumerate(pending):
        if cell.test == "greedy":
            from verifier.stats.power import support_check_mde

            mismatch, rows = bool(cell.counts[0]), int(cell.counts[1])
            # a single-outcome law: no false alarms; a mismatch rate TV is seen w.p. 1 - (1 - TV)^rows
            mde = support_check_mde(rows).tv if rows else math.inf
            tested.append((cell, float(mismatch), 0.0 if mismatch else 1.0, rows, "", None, mde, ""))
        elif cell.test == "gof" and cell.counts is not None and cell.counts.sum() > 0:
            res = gof_test(cell.counts, cell.expected, alpha=cell_alpha, rng=np.random.default_rng(k))
            viol = "; ".join(str(v) for v in res.support_violations)
            effect = str(res.effect) if res.effect is not None else ""
            tv = None if res.effect is None else float(res.effect.estimate)
            mde = None if res.mde is None else float(res.mde.tv)
            pval = 0.0 if res.support_violations else float(res.pvalue)
            tested.append((cell, float(res.statistic), pval, res.n, effect, tv, mde, viol))
        elif cell.test == "pit-ks" and cell.u is not None and cell.u.size > 1:
            res = pit_ks_test(cell.u, alpha=cell_alpha)
            viol = "; ".join(f"token {t} emitted {c} time{'s' if c != 1 else ''} at target prob 0" for t, c in cell.violations)
            pval = 0.0 if cell.violations else float(res.pvalue)
            tested.append((cell, float(res.statistic), pval, res.n, f"KS distance {res.statistic:.4f}", None, None, viol))
        else:  # nothing to test (no matching rows, or every token a support violation)
            viol = "; ".join(f"token {t} emitted {c} time{'s' if c != 1 else ''} at target prob 0" for t, c in cell.violations)
            tested.append((cell, math.nan, 0.0 if viol else 1.0, 0, "", None, math.inf if cell.test == "gof" else None, viol))
    adj = adjust([t[2] for t in tested], alpha=alpha, mode="gate", dependent=True)
    cells = []
    for (cell, stat, pval, n, effect, tv, mde, viol), rejected, adjusted in zip(tested, adj.rejected, adj.adjusted_pvalues):
        hard = bool(viol) or (cell.test == "greedy" and pval == 0.0)
        detail = "; ".join(x for x in (viol, cell.detail) if x)
        cells.append(PreservationCell(name=cell.name, prompt_index=cell.prompt_index, test=cell.test, n=int(n),
                                      statistic=stat, pvalue=pval, adjusted_pvalue=float(adjusted),
                                      rejected=bool(rejected) or hard, effect=effect, effect_tv=tv, mde_tv=mde,
                                      detail=detail))
    return cells, float(adj.combined_pvalue)


def _verdict(cells_and_p, alpha: float, min_effect: float | None) -> tuple[str, str]:
    cells, combined = cells_and_p
    rejected = [c for c in cells if c.rejected]
    if rejected or combined <= alpha / 2:
        why = f"{len(rejected)} of {len(cells)} cells rejected" if rejected else "no single cell rejected"
        if combined <= alpha / 2:
            why += f"; Cauchy combined p={combined:.3g} <= alpha/2={alpha / 2:g}"
        return "BIAS DETECTED", why
    if min_effect is not None:
        weak = [c for c in cells if c.test == "gof" and c.mde_tv is not None and c.mde_tv > min_effect]
        if weak:
            worst = max(weak, key=lambda c: c.mde_tv)
            return "UNDERPOWERED", (f"cell {worst.name} (n={worst.n}) only sees TV >= {worst.mde_tv:.3g} > "
                                   f"min_effect={min_effect:g}; raise num_samples (see min_num_samples)")
    return "PASS", f"no cell rejected at Holm(alpha/2) + Cauchy(alpha/2), alpha={alpha:g}"


def _reproduce_command(seed: int, seed_from_env: bool) -> str:
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
