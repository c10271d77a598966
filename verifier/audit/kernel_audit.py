"""Kernel-level audit (level 2): drive any verification kernel with synthetic processed probs.

A :class:`KernelCase` fixes ``target_probs`` (k + 1 rows) and ``draft_probs`` (k rows) as exact
rationals, the same at every draw; draft tokens are drawn from the draft rows with a generator
independent of the kernel's.  Positions are independent, so for a correct kernel

* the token emitted at position ``j`` (among draws that reach ``j``) follows ``target_probs[j]``;
* under the canonical rule the accepted count ``m`` follows ``P(m) = a_0 ... a_{m-1} (1 - a_m)``
  (``a_k := 0``), with ``a_j = sum(min(p_j, q_j))`` the acceptance prob of position ``j`` from
  :func:`verifier.exact.step_law`.

Each emitted position is one cell with a pooled Pearson goodness-of-fit test
(:func:`verifier.stats.gof_test`); :func:`verifier.stats.adjust` over them gives the bias verdict.
The accepted count is *not* a bias cell -- a lossless kernel may verify by another rule
(``fresh_target_match``, ...) -- but an acceptance audit beside the verdict
(:func:`verifier.runner.acceptance.acceptance_audit`: observed vs canonical acceptance, a loud note
when far below); only with ``acceptance="canonical"`` declared is its law tested
(:func:`verifier.stats.accepted_count_test`), as acceptance rule conformance.  Expected laws come
from the exact enumerator, never from the kernel under test.

Cases are chosen to *maximise* the bias a defect would cause (:func:`adversarial_case` searches
rational (target, draft) pairs for the largest exact total variation between a rule's output law
and the target), and :func:`blind_cell_reasons` flags a case that cannot see a defect at all — e.g.
a draft one-hot on a token with target prob 0 makes the residual equal the target, so full-p
fallback is invisible there.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np
import torch

from verifier.plugins import PluginKernel
from verifier.errors import invalid_argument
from verifier.exact.rules import RULES, get_rule
from verifier.exact.step import step_law
from verifier.exact.tabular import as_fraction_probs
from verifier.protocols import PADDING_TOKEN_ID, VerificationKernel
from verifier.stats import BIAS_DETECTED, PASS, UNDERPOWERED, Adjustment, CellTestResult, accepted_count_test, adjust, gof_test, token_counts

__all__ = [
    "KernelCase",
    "KernelCell",
    "KernelAuditResult",
    "blind_cell_reasons",
    "adversarial_case",
    "standard_kernel_cases",
    "draw_kernel_samples",
    "audit_kernel",
    "judge_kernel_draws",
]

EXACT_MAX_VOCAB = 16  # above this, blind_cell_reasons checks the two classic causes in float64 (exact laws get slow)
DEFAULT_BATCH = 8192  # draws per kernel call: large enough to amortise Python overhead, small in memory
KERNEL_TARGET_TV = 0.03  # a kernel-audit case whose cells cannot see this TV is UNDERPOWERED, never PASS
GRID_DENOMINATOR = 10  # adversarial search over probs that are multiples of 1/10


@dataclass(frozen=True)
class KernelCase:
    """Synthetic verify-step input: ``target_probs`` (k + 1, vocab) and ``draft_probs`` (k, vocab) as fractions."""

    name: str
    target_probs: tuple[tuple[Fraction, ...], ...]
    draft_probs: tuple[tuple[Fraction, ...], ...]
    purpose: str = ""

    @classmethod
    def from_rows(cls, name: str, target_rows: Sequence[Sequence], draft_rows: Sequence[Sequence], purpose: str = "") -> "KernelCase":
        """Build a case from rows of numbers/strings/fractions (each row must sum to exactly 1).

        Raises
        ------
        InvalidArgumentError
            If there is not exactly one more target row than draft rows, or the rows differ in length.
        """
        t = tuple(as_fraction_probs(r, name=f"{name}.target_probs[{i}]") for i, r in enumerate(target_rows))
        d = tuple(as_fraction_probs(r, name=f"{name}.draft_probs[{i}]") for i, r in enumerate(draft_rows))
        if len(t) != len(d) + 1 or not d:
            raise invalid_argument("len(target_rows)", len(t), f"len(draft_rows) + 1 = {len(d) + 1} with >= 1 draft row")
        if len({len(r) for r in t + d}) != 1:
            raise invalid_argument("row lengths", sorted({len(r) for r in t + d}), "one vocabulary size for every row")
        return cls(name, t, d, purpose)

    @property
    def num_draft_tokens(self) -> int:
        return len(self.draft_probs)

    @property
    def vocab_size(self) -> int:
        return len(self.target_probs[0])

    def acceptance_probs(self) -> tuple[Fraction, ...]:
        """Exact acceptance prob of each draft position under the canonical rule."""
        return tuple(step_law(p, q).acceptance_prob for p, q in zip(self.target_probs, self.draft_probs))

    def accepted_count_law(self, acceptance: Sequence[Fraction] | None = None) -> tuple[Fraction, ...]:
        """Exact law of the accepted count m = 0..k (independent positions)."""
        a = list(acceptance if acceptance is not None else self.acceptance_probs()) + [Fraction(0)]
        law, reach = [], Fraction(1)
        for j in range(self.num_draft_tokens + 1):
            law.append(reach * (1 - a[j]))
            reach *= a[j]
        return tuple(law)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(target_probs [k+1, V], draft_probs [k, V])`` as float64 tensors."""
        to = lambda rows: torch.tensor([[float(v) for v in r] for r in rows], dtype=torch.float64)  # noqa: E731
        return to(self.target_probs), to(self.draft_probs)


FLOAT_GRID = 2**32  # float probs are rounded to multiples of 1/2^32 (a shared denominator keeps Fraction arithmetic fast)


def _fractions(values: Sequence, name: str) -> tuple[Fraction, ...]:
    """Exact fractions of a probability vector.

    Float vectors (e.g. a model's softmax) are rounded to a common denominator ``FLOAT_GRID`` and the
    rounding remainder is put on the largest entry, so the result sums to exactly 1 and is within
    ``vocab / FLOAT_GRID`` of the input in total variation (about 1e-7 for a 384-token vocabulary).
    """
    vals = list(values)
    if vals and all(isinstance(v, (float, np.floating)) for v in vals):
        arr = np.asarray(vals, dtype=np.float64)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0) or arr.sum() <= 0:
            raise invalid_argument(name, vals[:8], "finite non-negative probabilities with a positive sum")
        units = np.rint(arr / arr.sum() * FLOAT_GRID).astype(np.int64)
        units[int(np.argmax(units))] += FLOAT_GRID - int(units.sum())
        return tuple(Fraction(int(u), FLOAT_GRID) for u in units)
    return as_fraction_probs(vals, name=name)


def blind_cell_reasons(target_probs: Sequence, draft_probs: Sequence, rules: Sequence[str] | None = None, *,
                       tolerance: float = 0.0) -> list[str]:
    """Why a (target, draft) verify step cannot reveal some defects; empty when it sees them all.

    A cell is *blind* to a defect when the defect's exact output law equals the target here, so no
    number of samples can detect it.  The classic trap: a draft one-hot on a token whose target prob is
    0 makes the residual ``max(0, p - q)/sum(...)`` equal ``p``, so a kernel that falls back to the full
    target (full-p fallback) is exactly right on that cell.

    Parameters
    ----------
    target_probs, draft_probs : sequence, shape (vocab,)
        Processed probs of one position (numbers, strings or Fractions; must sum to 1).
    tolerance : float, default 0
        A defect whose TV to the target is <= ``tolerance`` counts as invisible.  Float vectors (a
        model's processed probs) are rounded to multiples of 2^-32, so use at least ``1e-6`` for them;
        pass a suite's target minimum detectable effect to flag cells that are blind *at its budget*.
        Above ``EXACT_MAX_VOCAB`` tokens (and without ``rules``), only the two classic causes are
        checked, in float64: no rejection at all, and a residual equal to the target (full-p fallback).
    rules : sequence of str, optional
        Rule names from :data:`verifier.exact.RULES` to check; default every rule not declared exact
        that acts within one step (round-level defects such as ``bonus_wrong_position``,
        ``draft_suffix_kept`` and ``shared_uniform`` need a whole round and are not judged here).

    Returns
    -------
    list of str
        One human-readable reason per blind defect, naming the rule and the cause.

    Examples
    --------
    >>> blind_cell_reasons(["1/2", "1/2", "0"], ["0", "0", "1"], rules=["full_p_fallback"])[0][:58]
    'full_p_fallback is invisible on this cell (exact TV 0): th'
    """
    if len(target_probs) > EXACT_MAX_VOCAB and rules is None:
        return _blind_float(np.asarray(target_probs, dtype=np.float64), np.asarray(draft_probs, dtype=np.float64), tolerance)
    p = _fractions(target_probs, "target_probs")
    q = _fractions(draft_probs, "draft_probs")
    if len(p) != len(q):
        raise invalid_argument("len(draft_probs)", len(q), f"len(target_probs)={len(p)}")
    tol = Fraction(tolerance)
    names = list(rules) if rules is not None else [n for n, r in RULES.items() if r.declared != "exact" and _step_local(r)]
    canonical = step_law(p, q)
    facts = []
    if canonical.rejection_prob <= tol:
        facts.append("the draft is never rejected (draft == target), so nothing after a rejection is exercised")
    elif canonical.residual is not None and _tv(canonical.residual, p) <= tol:
        facts.append("the residual equals the target (rejected draft mass sits only on tokens with target prob 0), "
                     "so falling back to the full target is indistinguishable")
    if sum(1 for v in q if v > 0) == 1:
        facts.append(f"the draft is one-hot on token {max(range(len(q)), key=q.__getitem__)}, so greedy and sampled drafts coincide")
    cause = "; ".join(facts) or "its exact output law equals the target here"
    reasons = []
    for name in names:
        rule = get_rule(name)
        if _tv(step_law(p, q, rule).output_law, p) <= tol:
            reasons.append(f"{rule.name} is invisible on this cell (exact TV {'0' if tol == 0 else f'<= {tolerance:g}'}): {cause}")
    return reasons


def _blind_float(p: np.ndarray, q: np.ndarray, tolerance: float) -> list[str]:
    """Large-vocabulary path (float64): the two causes that blind a cell to rejection-path defects."""
    if p.shape != q.shape:
        raise invalid_argument("len(draft_probs)", len(q), f"len(target_probs)={len(p)}")
    p, q = p / p.sum(), q / q.sum()
    rejection = max(0.0, 1.0 - float(np.minimum(p, q).sum()))
    if rejection <= tolerance:
        return [f"every rejection-path defect (full_p_fallback, softmax_residual, ...) is invisible on this cell: the draft is "
                f"rejected with prob {rejection:.3g} <= {tolerance:g} (draft == target)"]
    plus = np.maximum(p - q, 0.0)
    fallback_tv = rejection * 0.5 * float(np.abs(plus / plus.sum() - p).sum())  # TV(full-p-fallback law, target)
    if fallback_tv <= tolerance:
        return [f"full_p_fallback is invisible on this cell (TV {fallback_tv:.3g} <= {tolerance:g}): the residual is "
                "(nearly) the target -- rejected draft mass sits on tokens the target (almost) never emits"]
    return []


def _step_local(rule) -> bool:
    return rule.bonus_offset == 0 and not rule.keep_suffix and not rule.shared_uniform


def _grid(vocab_size: int, denominator: int) -> list[tuple[Fraction, ...]]:
    out = []
    for cuts in itertools.combinations(range(denominator + vocab_size - 1), vocab_size - 1):
        parts, prev = [], -1
        for c in cuts + (denominator + vocab_size - 1,):
            parts.append(Fraction(c - prev - 1, denominator))
            prev = c
        out.append(tuple(parts))
    return out


def _tv(a: Sequence[Fraction], b: Sequence[Fraction]) -> Fraction:
    return sum(abs(x - y) for x, y in zip(a, b)) / 2


def adversarial_case(law: str | Callable[[tuple, tuple], Sequence[Fraction]], *, vocab_size: int = 4, num_draft_tokens: int = 1,
                     num_candidates: int = 4000, seed: int = 0, name: str | None = None) -> tuple[KernelCase, Fraction]:
    """Find the (target, draft) pair on a rational grid that maximises a defect's exact bias.

    Parameters
    ----------
    law : str or callable
        A rule name from :data:`verifier.exact.RULES` (its ``step_law(...).output_law``), or a function
        ``(target_probs, draft_probs) -> output law`` in fractions (e.g. a lossy option's law such as
        :func:`verifier.engines.hf_kernel.ensemble_step_law` with a fixed weight).
    vocab_size : int, default 4
    num_draft_tokens : int, default 1
        The found pair is repeated at every draft position (and the target row once more for the bonus).
    num_candidates : int, default 4000
        Random (target, draft) pairs tried from the grid of probs that are multiples of 1/10.
    seed : int, default 0

    Returns
    -------
    (KernelCase, Fraction)
        The case and its exact total variation ``TV(law(p, q), p)`` per position.
    """
    if isinstance(law, str):
        rule = get_rule(law)
        law_fn = lambda p, q: step_law(p, q, rule).output_law  # noqa: E731
        label = rule.name
    else:
        law_fn, label = law, getattr(law, "__name__", "law")
    grid = _grid(vocab_size, GRID_DENOMINATOR)
    rng = np.random.default_rng(seed)
    best, best_tv = None, Fraction(-1)
    for i, j in rng.integers(0, len(grid), size=(num_candidates, 2)):
        p, q = grid[i], grid[j]
        tv = _tv(law_fn(p, q), p)
        if tv > best_tv:
            best, best_tv = (p, q), tv
    assert best is not None  # num_candidates >= 1 always tries a pair
    p, q = best
    case = KernelCase(name or f"adversarial[{label}]", (p,) * (num_draft_tokens + 1), (q,) * num_draft_tokens,
                      purpose=f"maximises exact TV of {label} vs target on a 1/{GRID_DENOMINATOR} grid: {float(best_tv):.4f}")
    return case, best_tv


def standard_kernel_cases() -> list[KernelCase]:
    """The kernel-level cases a suite runs by default (documented purpose on each).

    ``seed-3token``: the seeds' p=(.2,.5,.3), q=(.5,.3,.2), k=1 (full-p fallback TV .06).
    ``chain-k4``: k=4 with a different high-TV pair at every position (bonus row distinct).
    ``one-hot-blind``: draft one-hot on a token with target prob 0 — blind to full-p fallback,
    kept to show :func:`blind_cell_reasons` flags it.
    """
    return [
        KernelCase.from_rows("seed-3token", [["1/5", "1/2", "3/10"]] * 2, [["1/2", "3/10", "1/5"]],
                             "the seeds' worked example; full-p fallback gives (.26,.45,.29), TV .06"),
        KernelCase.from_rows(
            "chain-k4",
            [["1/10", "3/5", "3/10", "0"], ["1/2", "0", "1/10", "2/5"], ["0", "1/5", "1/5", "3/5"], ["7/10", "1/10", "1/10", "1/10"],
             ["1/4", "1/4", "1/4", "1/4"]],
            [["3/5", "1/10", "1/10", "1/5"], ["1/10", "3/5", "1/10", "1/5"], ["1/2", "1/2", "0", "0"], ["1/10", "1/10", "1/10", "7/10"]],
            "k=4, high TV(target, draft) at every position, distinct bonus row",
        ),
        KernelCase.from_rows("one-hot-blind", [["1/2", "3/10", "1/5", "0"]] * 2, [["0", "0", "0", "1"]],
                             "draft one-hot on a target-prob-0 token: residual == target, full-p fallback invisible"),
    ]


def draw_kernel_samples(kernel: VerificationKernel, case: KernelCase, num_draws: int, seed: int, *,
                        batch_size: int = DEFAULT_BATCH, checkpoint=None) -> np.ndarray:
    """Run ``kernel`` on ``num_draws`` independent verify steps of ``case``.

    Parameters
    ----------
    kernel : VerificationKernel
        Wrapped in :class:`~verifier.plugins.PluginKernel` unless it already is, so a crash or
        invalid output raises ``DecoderError`` / ``DecoderOutputError`` (exit 3).
    case : KernelCase
    num_draws : int
    seed : int
        Draft tokens use ``SeedSequence([seed, 0])``, the kernel's generator ``SeedSequence([seed, 1])``.
    batch_size : int, default 8192
    checkpoint : verifier.audit.kernel_checkpoint.KernelCheckpoint, optional
        Where drawn rows go as they are drawn (every ``FLUSH_SECONDS``, at the end and on an interruption),
        with the generator states after them; rows already stored there are kept and the stream continues
        from their states, so the result equals an uninterrupted run's bit for bit.

    Returns
    -------
    np.ndarray, shape (num_draws, num_draft_tokens + 1), int64
        Emitted tokens, -1 padded.
    """
    if isinstance(num_draws, bool) or not isinstance(num_draws, int) or num_draws < 1:
        raise invalid_argument("num_draws", num_draws, "an integer >= 1")
    guarded = kernel if isinstance(kernel, PluginKernel) else PluginKernel(kernel)
    draft_seed, kernel_seed = (int(s) for s in np.random.SeedSequence(int(seed)).generate_state(2, np.uint32))
    draft_gen = torch.Generator().manual_seed(draft_seed)
    kernel_gen = torch.Generator().manual_seed(kernel_seed)
    target, draft = case.tensors()
    k, vocab = case.num_draft_tokens, case.vocab_size
    out = np.empty((num_draws, k + 1), dtype=np.int64)
    done = 0  # rows [0, done) are drawn and the generators are past them
    if checkpoint is not None:
        from verifier.audit.kernel_checkpoint import FLUSH_SECONDS

        stored = checkpoint.resume(case, num_draws, batch_size)
        for rows in stored.rows:
            out[done : done + len(rows)] = rows
            done += len(rows)
        if stored.draft_state is not None:
            draft_gen.set_state(stored.draft_state)
            kernel_gen.set_state(stored.kernel_state)
        chunk, flushed, last_flush = stored.next_chunk, done, time.perf_counter()
        # (rows drawn, draft state, kernel state) as ONE object, replaced by one store: a Ctrl-C that lands between
        # counting a batch and reading the generators' states would otherwise pair the rows with the states before
        # them, and a resume would redraw part of the stream (a real SIGINT hit that window in CI)
        mark = (done, draft_gen.get_state(), kernel_gen.get_state())

        def flush() -> None:
            nonlocal chunk, flushed, last_flush
            rows, draft_state, kernel_state = mark
            if rows > flushed:
                checkpoint.write(case, chunk, out[flushed:rows], draft_state, kernel_state)
                chunk, flushed, last_flush = chunk + 1, rows, time.perf_counter()
    try:
        for start in range(done, num_draws, batch_size):
            b = min(batch_size, num_draws - start)
            if checkpoint is not None and b < batch_size:
                flush()  # a last partial batch gets a chunk of its own (a resume for more draws redraws it)
            ids = torch.multinomial(draft, b, replacement=True, generator=draft_gen).T.contiguous()  # (b, k)
            emitted = guarded(target.expand(b, k + 1, vocab).contiguous(), draft.expand(b, k, vocab).contiguous(), ids, kernel_gen)
            out[start : start + b] = emitted.numpy()
            if checkpoint is not None:
                mark = (start + b, draft_gen.get_state(), kernel_gen.get_state())
                if start + b == num_draws or time.perf_counter() - last_flush >= FLUSH_SECONDS:
                    flush()
    except BaseException:
        if checkpoint is not None:
            flush()  # the whole batches drawn before the interruption, with the states after them
        raise
    return out


@dataclass(frozen=True)
class KernelCell:
    """One kernel-level hypothesis test: a named :class:`verifier.stats.CellTestResult`."""

    name: str
    result: CellTestResult
    expected_probs: np.ndarray
    counts: np.ndarray  # observed counts per token (or per accepted count)

    def __iter__(self):
        return iter(self.result)


class _KernelVerdict:
    """Verdict properties shared by chain and tree kernel audits (needs ``adjustment``, ``alpha``, ``conformance``, ``target_tv``)."""

    @property
    def verdict(self) -> str:
        """The bias verdict, about the emitted tokens only: ``BIAS DETECTED``, ``UNDERPOWERED`` or ``PASS``.

        ``UNDERPOWERED`` when the family is not rejected but some cell's minimum detectable TV (at
        power .99 and the cell's level) exceeds ``target_tv``: such a case cannot claim PASS.
        """
        if self.adjustment.family_rejected or any(c.result.support_violations for c in self.cells):
            return BIAS_DETECTED
        return UNDERPOWERED if self.underpowered_cells() else PASS

    def underpowered_cells(self) -> list:
        """Cells whose minimum detectable TV exceeds ``target_tv`` (they cannot see it)."""
        return [c for c in self.cells if c.result.underpowered(self.target_tv)]

    def draws_needed(self) -> int | None:
        """Draws the case needs so every cell sees ``target_tv`` (None when even 1e9 rows cannot; 0 when powered).

        Per cell: :func:`verifier.stats.power.samples_for_mde` of :func:`verifier.stats.gof.gof_mde` at the
        cell's level, scaled by the share of draws that reach the cell.
        """
        from verifier.stats.gof import gof_mde
        from verifier.stats.power import samples_for_mde

        need = 0
        for c in self.underpowered_cells():
            n = max(1, int(c.result.n))
            probs = np.asarray(c.expected_probs, dtype=np.float64)
            cell_n = samples_for_mde(lambda m: gof_mde(m, probs, alpha=self.alpha).tv, self.target_tv, n_min=n)
            if cell_n is None:
                return None
            need = max(need, int(np.ceil(cell_n * self.num_draws / n)))
        return need

    def power_note(self) -> str:
        """One line on an UNDERPOWERED case: the largest MDE and the draws needed (empty otherwise)."""
        weak = self.underpowered_cells()
        if self.verdict != UNDERPOWERED or not weak:
            return ""
        worst = max(weak, key=lambda c: c.result.mde.tv)
        need = self.draws_needed()
        return (f"UNDERPOWERED: cell {worst.name} can only see TV >= {worst.result.mde.tv:.3g} > target TV {self.target_tv:g} "
                f"at n = {self.num_draws} draws; " + (f"n needed: {need} draws (--num-draws {need})" if need else
                                                      "no feasible n (<= 1e9) reaches it"))

    @property
    def conforms(self) -> bool | None:
        """Acceptance rule conformance (None when no rule is declared): the accepted-count law is the declared rule's."""
        if self.conformance is None:
            return None
        r = self.conformance.result
        return not (r.support_violations or r.pvalue <= self.alpha)


@dataclass
class KernelAuditResult(_KernelVerdict):
    """Verdict of :func:`audit_kernel` on one case (``PASS`` or ``BIAS DETECTED``).

    The cells share draws, so the family is judged with :func:`verifier.stats.adjust` in gate mode
    with ``dependent=True`` (Holm + Cauchy combination, family-wise error ``alpha``).
    """

    kernel: str
    case: KernelCase
    num_draws: int
    seed: int
    alpha: float
    cells: list[KernelCell]
    adjustment: Adjustment
    blind: list[str] = field(default_factory=list)
    acceptance: dict = field(default_factory=dict)  # verifier.runner.acceptance.AcceptanceAudit.to_dict()
    conformance: KernelCell | None = None  # only with acceptance="canonical" declared
    target_tv: float = KERNEL_TARGET_TV  # a cell that cannot see this TV makes the case UNDERPOWERED
    draw_seconds: float | None = None  # wall seconds of drawing alone (the statistics excluded; resumed: this session's rate x all draws)

    def summary(self) -> str:
        i = int(np.argmin(self.adjustment.adjusted_pvalues))
        return (f"{self.kernel} on {self.case.name}: {self.verdict} (n={self.num_draws}, seed={self.seed}, alpha={self.alpha:g}, "
                f"{self.adjustment.method}; worst cell {self.cells[i].name}: p_adj={self.adjustment.adjusted_pvalues[i]:.3g})")


def _kernel_cells(case: KernelCase, emitted: np.ndarray, alpha: float) -> list[KernelCell]:
    """The bias cells: the emitted token at each position among draws that reach it."""
    cells = []
    for j, p in enumerate(case.target_probs):
        expected = np.array([float(v) for v in p])
        counts = token_counts(emitted[:, j], case.vocab_size)
        if counts.sum() == 0:
            continue
        role = "bonus/recovered" if j == case.num_draft_tokens else "accepted/recovered"
        cells.append(KernelCell(f"position {j} token ({role})", gof_test(counts, expected, alpha=alpha), expected, counts))
    return cells


def _acceptance(case: KernelCase, emitted: np.ndarray, label: str, alpha: float, declared: str) -> tuple[dict, KernelCell | None]:
    """Acceptance audit of the draws (and the conformance cell when ``declared == "canonical"``)."""
    from verifier.runner.acceptance import acceptance_audit, coupling_bound_check

    accepted = (emitted != PADDING_TOKEN_ID).sum(axis=1) - 1
    law = np.array([float(v) for v in case.accepted_count_law()])
    audit = acceptance_audit(case.name, f"{label} on {case.name}", label, case.num_draft_tokens, accepted, None, law).to_dict()
    coupling_bound_check([audit], alpha)  # a family of one: this case's position-1 test at the audit's alpha
    cell = None
    if declared == "canonical":
        cell = KernelCell("accepted count (acceptance rule conformance)", accepted_count_test(accepted, law, alpha=alpha), law,
                          np.bincount(accepted, minlength=case.num_draft_tokens + 1))
    return audit, cell


def audit_kernel(kernel: VerificationKernel, case: KernelCase, *, num_draws: int = 200_000, seed: int = 0, alpha: float = 1e-3,
                 batch_size: int = DEFAULT_BATCH, name: str | None = None, acceptance: str = "any",
                 target_tv: float = KERNEL_TARGET_TV, checkpoint=None) -> KernelAuditResult:
    """Audit a verification kernel on one synthetic case: PASS, BIAS DETECTED or UNDERPOWERED.

    Parameters
    ----------
    kernel : VerificationKernel
        E.g. :func:`verifier.decoders.kernels.verify_chain`, a mutant, a plugin from
        :func:`~verifier.plugins.load_kernel`, or :func:`~verifier.engines.hf_kernel.make_hf_kernel`.
    case : KernelCase
    num_draws : int, default 200000
    seed : int, default 0
    alpha : float, default 1e-3
        Family-wise error rate over the case's cells (Holm + Cauchy combination, cells share draws).
    batch_size : int, default 8192
    name : str, optional
    acceptance : {"any", "canonical"}, default "any"
        ``"canonical"`` declares the min(1, p/q) rule: the accepted-count law is then tested
        (``conformance``), apart from the bias verdict.
    target_tv : float, default 0.03
        Smallest bias (total variation) the case must be able to see: a case not rejected whose cells'
        minimum detectable TV exceeds it is ``UNDERPOWERED`` (never PASS).
    checkpoint : verifier.audit.kernel_checkpoint.KernelCheckpoint, optional
        Store the draws as they are drawn and continue stored ones (:func:`draw_kernel_samples`); the
        verdict is computed on all ``num_draws`` draws, stored and new.

    Returns
    -------
    KernelAuditResult
        Per-cell :class:`~verifier.stats.CellTestResult` (statistic, p-value, TV estimate, minimum
        detectable TV at power .99), the family adjustment, and ``blind``, which lists :func:`blind_cell_reasons` of every position.

    Raises
    ------
    DecoderError, DecoderOutputError
        The kernel raised or returned invalid output (exit 3).
    """
    if not 0 < alpha < 1:
        raise invalid_argument("alpha", alpha, "a number in (0, 1)")
    if not 0 < target_tv < 1:
        raise invalid_argument("target_tv", target_tv, "a total variation in (0, 1)")
    if acceptance not in ("any", "canonical"):
        raise invalid_argument("acceptance", acceptance, "'any' or 'canonical'")
    started = time.perf_counter()
    emitted = draw_kernel_samples(kernel, case, num_draws, seed, batch_size=batch_size, checkpoint=checkpoint)
    draw_seconds = time.perf_counter() - started  # the kernel's own time: the rate a longer run scales by
    fresh = num_draws - (checkpoint.resumed_rows if checkpoint is not None else 0)
    if fresh < num_draws:  # resumed: the stored rows' time at this session's rate (None when nothing was drawn now)
        draw_seconds = draw_seconds * num_draws / fresh if fresh else None
    label = name or getattr(kernel, "name", None) or getattr(kernel, "__name__", type(kernel).__name__)
    return judge_kernel_draws(emitted, case, label=label, seed=seed, alpha=alpha, acceptance=acceptance, target_tv=target_tv,
                              draw_seconds=draw_seconds)


def judge_kernel_draws(emitted: np.ndarray, case: KernelCase, *, label: str, seed: int, alpha: float = 1e-3, acceptance: str = "any",
                       target_tv: float = KERNEL_TARGET_TV, draw_seconds: float | None = None) -> KernelAuditResult:
    """The verdict of :func:`audit_kernel` on draws already drawn (a resumed audit, merged shards).

    Parameters
    ----------
    emitted : np.ndarray, shape (num_draws, num_draft_tokens + 1), int64
        Emitted tokens of :func:`draw_kernel_samples`, -1 padded.
    case : KernelCase
    label : str
        The kernel's name in the result.
    seed : int
        The seed recorded in the result.
    alpha, acceptance, target_tv
        As in :func:`audit_kernel`.
    draw_seconds : float, optional
        Wall seconds of drawing.

    Returns
    -------
    KernelAuditResult
    """
    cells = _kernel_cells(case, emitted, alpha)
    adjustment = adjust([c.result for c in cells], alpha=alpha, mode="gate", dependent=True)
    blind = [f"position {j}: {r}" for j, (p, q) in enumerate(zip(case.target_probs, case.draft_probs)) for r in blind_cell_reasons(p, q)]
    audit, conformance = _acceptance(case, emitted, label, alpha, acceptance)
    return KernelAuditResult(kernel=label, case=case, num_draws=len(emitted), seed=seed, alpha=alpha, cells=cells,
                             adjustment=adjustment, blind=blind, acceptance=audit, conformance=conformance, target_tv=target_tv,
                             draw_seconds=draw_seconds)
