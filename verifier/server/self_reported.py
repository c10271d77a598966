"""Self-reported design of a URL audit: the samples against the law the server reports with them.

No local model: at every emitted position the processed law is rebuilt from the top logprobs the
server returned (:mod:`verifier.server.reported_law`, valid when top-k <= the logprob cap), and

``gof@1``
    the first emitted tokens (one law: every completion starts at the prompt) are tested against
    the law a speculation-off one-token request reports at the prompt -- a Pearson chi-square that
    states its minimum detectable effect as a total variation, as the runner's ``gof@t`` cells do;
``pit``
    every emitted position of every completion gives a randomized PIT value
    ``u = F(x^-) + V p(x)`` under the law rebuilt from its own reported row (tokens ranked by prob
    descending, ties by id; ``V`` from a generator the server never saw); under the null the u's
    are i.i.d. Uniform(0, 1) (Rosenblatt), tested by Kolmogorov-Smirnov (:func:`verifier.runner.analysis.pit_cell`).
    An emitted token at rebuilt prob 0 is a support violation (bias whatever the p-value).

Positions whose row cannot define the law (:class:`~verifier.server.reported_law.Undefined`: no
row, fewer than top-k entries, a mass that does not fit) are left out of the PIT, counted per
reason and named; leaving out a fraction ``f`` of the positions can hide (or fake) a departure of
about ``f`` in the PIT's law, so when ``f`` exceeds the target TV the verdict is UNDERPOWERED
(:func:`undefined_guard`), never PASS.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from verifier.server.reported_law import ReportedLaw, Undefined, rebuild_law

__all__ = ["UNDEFINED_REASON", "VERIFICATION_ROW", "PositionLaws", "position_laws", "pit_inputs", "self_reported_cells",
           "undefined_guard", "path_probs"]

UNDEFINED_REASON = "reported logprobs cannot define the law"  # how undefined_guard's reason begins
EXAMPLES_SHOWN = 3  # undefined positions named in the report per reason
# an empty top list with the emitted token at prob 1.0 (logprob 0.0) although top logprobs were asked for: what
# llama-server returns for every token emitted by a speculative verification step (`// TODO: set result.probs`,
# tools/server/server-context.cpp, the draft-acceptance loop of update_slots; docs/servers.md)
VERIFICATION_ROW = ("no top logprobs and prob 1.0 (llama-server reports no probabilities for tokens of a speculative "
                    "verification step)")


@dataclass
class PositionLaws:
    """The rebuilt law at every emitted position of every completion, and what could not be rebuilt.

    Attributes
    ----------
    laws : list of list of (ReportedLaw or Undefined)
        ``laws[i][j]``: completion ``i``, emitted position ``j + 1``.
    positions : int
        Emitted positions in all.
    undefined : Counter
        Reason -> positions whose row defines no law.
    examples : dict
        Reason -> up to :data:`EXAMPLES_SHOWN` ``"completion i, position j"`` strings.
    """

    laws: list[list[ReportedLaw | Undefined]]
    positions: int = 0
    undefined: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def num_undefined(self) -> int:
        return int(sum(self.undefined.values()))

    def to_dict(self) -> dict[str, Any]:
        return {"positions": self.positions, "undefined": self.num_undefined,
                "fraction_undefined": self.num_undefined / self.positions if self.positions else 0.0,
                "reasons": [{"reason": r, "positions": int(c), "examples": self.examples.get(r, [])}
                            for r, c in self.undefined.most_common()]}


def position_laws(completions: Sequence[Any], sampling, convention: str, vocab_size: int | None = None) -> PositionLaws:
    """Rebuild the law at every emitted position of ``completions`` (:class:`~verifier.server.dialects.Completion`
    with ``top_logprobs``; a completion without them has every position undefined)."""
    out = PositionLaws([])
    for i, c in enumerate(completions):
        rows = c.top_logprobs or ()
        laws = []
        for j in range(len(c.token_ids)):
            law = rebuild_law(rows[j] if j < len(rows) else None, sampling, convention, vocab_size=vocab_size)
            if isinstance(law, Undefined) and j < len(rows) and not rows[j] and (c.logprobs or ())[j:j + 1] == (0.0,):
                law = Undefined(VERIFICATION_ROW)  # no top entries and prob 1.0: llama-server's verification-step row
            if isinstance(law, Undefined):
                out.undefined[law.reason] += 1
                shown = out.examples.setdefault(law.reason, [])
                if len(shown) < EXAMPLES_SHOWN:
                    shown.append(f"completion {i}, position {j + 1}")
            laws.append(law)
        out.laws.append(laws)
        out.positions += len(c.token_ids)
    return out


def pit_inputs(completions: Sequence[Any], laws: PositionLaws) -> tuple[np.ndarray, np.ndarray, tuple]:
    """``(cdf_below, prob_emitted, violations)`` of every emitted position with a defined law, in order;
    violations: :class:`~verifier.stats.results.SupportViolation` per token emitted at rebuilt prob 0."""
    from verifier.stats.results import SupportViolation

    below, width, zero = [], [], Counter()
    for c, row_laws in zip(completions, laws.laws):
        for token, law in zip(c.token_ids, row_laws):
            if isinstance(law, Undefined):
                continue
            p = law.prob(token)
            if p <= 0:
                zero[int(token)] += 1
                continue
            below.append(law.cdf_below(token))
            width.append(p)
    return (np.asarray(below, dtype=np.float64), np.asarray(width, dtype=np.float64),
            tuple(SupportViolation(t, n) for t, n in zero.items()))


def path_probs(completion: Any, row_laws: Sequence[ReportedLaw | Undefined], tokens: int) -> float | None:
    """``P(x)`` of the completion's first ``tokens`` emitted tokens under its rebuilt laws (None: a position
    undefined)."""
    prob = 1.0
    for token, law in list(zip(completion.token_ids, row_laws))[:tokens]:
        if isinstance(law, Undefined):
            return None
        prob *= law.prob(token)
    return prob


def self_reported_cells(completions: Sequence[Any], laws: PositionLaws, prompt_law: ReportedLaw, *, vocab_size: int,
                        cell_alpha: float, power: float, target_mde: float, seed: int, base: str, **meta: Any) -> list:
    """The ``gof@1`` and ``pit`` cells (:class:`~verifier.runner.analysis.CellResult`) of the design.

    Parameters
    ----------
    completions : sequence of Completion
        The audited completions of one prompt (with ``top_logprobs``).
    laws : PositionLaws
        :func:`position_laws` of them.
    prompt_law : ReportedLaw
        The law at the prompt reported by a speculation-off request (``gof@1``'s null).
    vocab_size : int
    cell_alpha, power, target_mde : float
        Per-cell level, power of the stated MDE, the suite's target TV (``n_needed``).
    seed : int
        Seeds the PIT's V's and the chi-square's Monte Carlo draws (a stream the server never saw).
    base : str
        Cell id prefix (``decoder/prompt/sampling/k=K``); ``meta`` (``decoder``, ``set_id``) goes into each cell.
    """
    from verifier.runner import analysis
    from verifier.stats.pit import randomized_pit_from_cdf

    rng = np.random.default_rng([int(seed), 0x5E1F])  # the audit's seed, a stream of its own
    first = np.array([c.token_ids[0] for c in completions], dtype=np.int64)
    counts = np.bincount(first, minlength=vocab_size)[:vocab_size]
    gof = analysis.gof_cell(f"{base}/gof@1", counts, prompt_law.dense(vocab_size), cell_alpha=cell_alpha, power=power,
                            rng=rng, target_mde=target_mde, test="gof@1", **meta)
    gof.method += "; null: the law the server reports at the prompt (speculation off)"
    below, width, violations = pit_inputs(completions, laws)
    u = randomized_pit_from_cdf(below, width, rng) if below.size else np.zeros(0)
    pit = analysis.pit_cell(f"{base}/pit", u, cell_alpha=cell_alpha, power=power, violations=violations, **meta)
    pit.method += (f"; every emitted position against the law rebuilt from its own reported logprobs "
                   f"({laws.positions - laws.num_undefined} of {laws.positions} positions defined)")
    pit.extra["reported_positions"] = laws.to_dict()
    return [gof, pit]


def undefined_guard(verdict, laws: PositionLaws, target_tv: float) -> None:
    """Turn PASS into UNDERPOWERED when more than ``target_tv`` of the emitted positions have no usable reported
    law (they are left out of the PIT and could hide a departure of that size); the reason names the causes.
    An UNDERPOWERED verdict gets the same reason first (more samples do not define those positions; the cells'
    own reason follows); BIAS and ERROR stand."""
    from verifier.runner.verdict import PASS, UNDERPOWERED

    if not laws.positions:
        return
    frac = laws.num_undefined / laws.positions
    if verdict.reason.startswith(UNDEFINED_REASON):  # another prompt's laws said it already
        return
    if frac > target_tv and verdict.verdict in (PASS, UNDERPOWERED):  # more samples cannot fix it: say so first
        top = laws.undefined.most_common(2)
        why = "; ".join(f"{n} x {r} (e.g. {', '.join(laws.examples[r][:2])})" for r, n in top)
        verdict.verdict = UNDERPOWERED
        verdict.expectation_met = False
        verdict.reason = (f"{UNDEFINED_REASON} at {laws.num_undefined} of {laws.positions} emitted "
                          f"positions ({frac:.1%} > target TV {target_tv:g}): {why}; the PIT leaves them out and could "
                          f"miss a bias of that size (the cells alone: {verdict.reason})")
