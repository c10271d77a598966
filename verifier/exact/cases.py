"""Standard cases of the exact stage: the seeds' (p, q) examples and named tabular model pairs.

Other modules (decoder, kernel and statistics tests) reuse these, so they are small (vocab 3-4)
and stable: change a table only together with every test that pins a figure computed from it.

The drafts are far from their targets (total variation 0.3-0.5 per context) so that every mutant
shows, and no draft is one-hot on a token with target probability 0 (which would make the residual
equal p and hide the full-p-fallback mutant).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction as F
from typing import NamedTuple

from verifier.exact.tabular import TabularLM

__all__ = ["ExactCase", "TabularPair", "standard_cases", "standard_tabular_pairs", "unigram_case"]

STEP_NUM_DRAFT_TOKENS = 1  # a seed example is one verification step ...
STEP_NUM_TOKENS = 1  # ... whose output law is the law of the first emitted token
ROUND_NUM_DRAFT_TOKENS = 2  # a tabular case runs rounds of two drafts ...
ROUND_NUM_TOKENS = 3  # ... and compares the first k + 1 tokens (one full round incl. the bonus token)


class TabularPair(NamedTuple):
    """A named (target, draft) pair of tabular models with a valid prompt."""

    target: TabularLM
    draft: TabularLM
    prefix: tuple[int, ...]
    description: str


@dataclass(frozen=True)
class ExactCase:
    """One case of the exact stage: a model pair, a prompt, k and how many emitted tokens to compare.

    Attributes
    ----------
    name : str
    target, draft : TabularLM
    prefix : tuple of int
    num_draft_tokens : int
        k of every round.
    num_tokens : int
        N: the laws compared are those of the first N emitted tokens.
    description : str
    """

    name: str
    target: TabularLM
    draft: TabularLM
    prefix: tuple[int, ...]
    num_draft_tokens: int
    num_tokens: int
    description: str = field(default="", compare=False)

    @property
    def target_probs(self) -> tuple[F, ...] | None:
        """p for a unigram case (the seeds' examples), else None."""
        return self.target.probs(()) if self.target.context_len == 0 else None

    @property
    def draft_probs(self) -> tuple[F, ...] | None:
        """q for a unigram case, else None."""
        return self.draft.probs(()) if self.draft.context_len == 0 else None


def unigram_case(name: str, target_probs, draft_probs, *, num_draft_tokens: int = STEP_NUM_DRAFT_TOKENS,
                 num_tokens: int = STEP_NUM_TOKENS, description: str = "") -> ExactCase:
    """An :class:`ExactCase` from one (p, q) pair: context-free target and draft models.

    Raises
    ------
    InvalidArgumentError
        If p or q is not a distribution or their lengths differ.
    """
    target = TabularLM({(): target_probs}, len(target_probs), 0, name=f"{name}/target")
    draft = TabularLM({(): draft_probs}, len(draft_probs), 0, name=f"{name}/draft")
    return ExactCase(name, target, draft, (), num_draft_tokens, num_tokens, description)


def _fr(*values: str) -> tuple[F, ...]:
    return tuple(F(v) for v in values)


def standard_tabular_pairs() -> dict[str, TabularPair]:
    """Named tabular (target, draft) pairs: a unigram, a bigram with EOS, a trigram.

    Returns
    -------
    dict[str, TabularPair]
        ``"unigram3"`` (vocab 3), ``"bigram4_eos"`` (vocab 4, EOS id 3, prompt ``(0,)``),
        ``"trigram3"`` (vocab 3, prompt ``(0, 1)``).  Fresh objects on every call.
    """
    unigram_p = _fr("1/2", "1/3", "1/6")
    unigram_q = _fr("1/6", "1/6", "2/3")

    bigram_p = {(0,): _fr("1/10", "1/2", "1/5", "1/5"), (1,): _fr("2/5", "1/10", "3/10", "1/5"),
                (2,): _fr("1/2", "1/4", "1/10", "3/20"), (3,): _fr("1/4", "1/4", "1/4", "1/4")}
    bigram_q = {(0,): _fr("1/2", "1/10", "1/10", "3/10"), (1,): _fr("1/10", "1/2", "1/5", "1/5"),
                (2,): _fr("1/5", "1/5", "1/2", "1/10"), (3,): _fr("1/4", "1/4", "1/4", "1/4")}

    rows = [_fr("1/2", "3/10", "1/5"), _fr("1/5", "1/2", "3/10"), _fr("3/10", "1/5", "1/2"),
            _fr("1/10", "3/5", "3/10"), _fr("3/5", "1/10", "3/10"), _fr("1/10", "3/10", "3/5"),
            _fr("1/2", "2/5", "1/10"), _fr("1/5", "1/5", "3/5"), _fr("7/10", "1/10", "1/5")]
    contexts = list(itertools.product(range(3), repeat=2))
    trigram_p = dict(zip(contexts, rows))
    trigram_q = {ctx: row[1:] + row[:1] for ctx, row in trigram_p.items()}  # each row rotated left

    return {
        "unigram3": TabularPair(
            TabularLM({(): unigram_p}, 3, 0, name="unigram3/target"),
            TabularLM({(): unigram_q}, 3, 0, name="unigram3/draft"),
            (), "context-free p=(1/2,1/3,1/6), q=(1/6,1/6,2/3); TV 1/2"),
        "bigram4_eos": TabularPair(
            TabularLM(bigram_p, 4, 1, eos_token_id=3, name="bigram4_eos/target"),
            TabularLM(bigram_q, 4, 1, eos_token_id=3, name="bigram4_eos/draft"),
            (0,), "bigram, vocab 4, token 3 is EOS; draft rows far from the target rows"),
        "trigram3": TabularPair(
            TabularLM(trigram_p, 3, 2, name="trigram3/target"),
            TabularLM(trigram_q, 3, 2, name="trigram3/draft"),
            (0, 1), "trigram, vocab 3; each draft row is its target row rotated"),
    }


def standard_cases() -> list[ExactCase]:
    """The default cases of :func:`verifier.exact.run_exact_stage`.

    First the seeds' (p, q) examples as single steps (k = 1, first token), then every
    :func:`standard_tabular_pairs` pair with rounds of k = 2 compared on the first 3 emitted tokens
    (round-level mutants -- bonus position, suffix kept, shared uniform -- only show there; the
    bonus-position mutant needs a context-dependent target).

    Returns
    -------
    list[ExactCase]
    """
    seeds = [
        unigram_case("seed_residual", _fr("2/5", "1/5", "2/5"), _fr("1/5", "1/2", "3/10"),
                     description="p=(.4,.2,.4), q=(.2,.5,.3): B accepted with 2/5, residual (2/3,0,1/3)"),
        unigram_case("seed_fallback", _fr("1/5", "1/2", "3/10"), _fr("1/2", "3/10", "1/5"),
                     description="p=(.2,.5,.3), q=(.5,.3,.2): full-p fallback gives (.26,.45,.29)"),
        unigram_case("seed_argmax_agree", _fr("1/2", "3/10", "1/5"), _fr("9/10", "1/20", "1/20"),
                     description="p=(.5,.3,.2), q=(.9,.05,.05): argmaxes agree, acceptance only 3/5"),
        unigram_case("seed_one_hot_draft", _fr("1/2", "3/10", "1/5"), _fr("1", "0", "0"),
                     description="p=(.5,.3,.2), one-hot q=(1,0,0): the high-TV CI draft"),
        unigram_case("seed_truncated_supports", _fr("1/2", "1/2", "0"), _fr("0", "9/10", "1/10"),
                     description="p=(.5,.5,0), q=(0,.9,.1): top-k kept different token sets (llama.cpp's by-index "
                                 "residual emits token 1 always)"),
    ]
    rounds = [
        ExactCase(name, pair.target, pair.draft, pair.prefix, ROUND_NUM_DRAFT_TOKENS, ROUND_NUM_TOKENS, pair.description)
        for name, pair in standard_tabular_pairs().items()
    ]
    return seeds + rounds
